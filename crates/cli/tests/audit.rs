//! Issue 18's audit, item by item, at the binary: each test runs `qdq` only with flags every version since the audit
//! parses, so the same test binary can be pointed at an older `qdq` (put it at `target/debug/qdq`) to see the defect.
//! Hangs are bounded by a generous deadline (a liveness oracle, not a speed goal) and memory by `ulimit -d`, which is
//! what a container's memory cap does to an unbounded read.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use onnx_ir::proto::tensor_proto::DataLocation;
use onnx_ir::proto::{StringStringEntryProto, TensorProto};
use onnx_ir::tiny_bert::{TinyBertConfig, build};
use onnx_ir::{DataType, Model};

use crate::common::testdata;

/// A run that has not ended after this long is a hang.
const DEADLINE: Duration = Duration::from_secs(120);
/// `ulimit -d` for the runs that must not read without bound: 1 GiB, far above what any of them needs.
const DATA_LIMIT_KIB: u64 = 1 << 20;

/// Runs `qdq args` under `ulimit -d limit_kib` (if given); a run past [`DEADLINE`] is killed and fails the test.
fn qdq_bounded(args: &[&str], limit_kib: Option<u64>) -> Output {
    let limit = limit_kib.map_or_else(|| "unlimited".to_owned(), |k| k.to_string());
    let child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -d {limit} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_qdq"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sh runs");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(out) => out.expect("qdq runs"),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("qdq {args:?} did not end within {DEADLINE:?}: it hangs");
        }
    }
}

/// The one `qdq: error:` line of a failed run (no panic, no abort by signal, nothing else reported as an error).
fn one_error(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "expected exit 1 with an error line (a signal has no code); stderr: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("qdq: error:")).collect();
    assert_eq!(lines.len(), 1, "stderr: {err}");
    assert!(!err.contains("panicked") && !err.contains("memory allocation"), "{err}");
    lines[0].to_owned()
}

fn external(name: &str, dims: &[i64], location: &str, length: Option<u64>) -> TensorProto {
    let kv = |k: &str, v: String| StringStringEntryProto { key: Some(k.into()), value: Some(v) };
    let mut external_data = vec![kv("location", location.into()), kv("offset", "0".into())];
    external_data.extend(length.map(|l| kv("length", l.to_string())));
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(DataType::Float as i32),
        data_location: Some(DataLocation::External as i32),
        external_data,
        ..Default::default()
    }
}

/// The tiny BERT with one more initializer, written as bytes (no checks on the way out).
fn tiny_with(dir: &Path, file: &str, extra: TensorProto) -> PathBuf {
    let mut m = build(&TinyBertConfig { max_positions: 64, ..Default::default() });
    m.graph_mut().initializer.push(extra);
    let p = dir.join(file);
    std::fs::write(&p, m.to_bytes().unwrap()).unwrap();
    p
}

fn tiny(dir: &Path) -> PathBuf {
    let p = dir.join("tiny.onnx");
    build(&TinyBertConfig { max_positions: 64, ..Default::default() }).save(&p).unwrap();
    p
}

fn sparse_file(path: &Path, len: u64) {
    std::fs::File::create(path).unwrap().set_len(len).unwrap();
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Item 1: a FIFO, as the model or as a tensor's external data, is refused instead of blocking on open.
#[test]
fn a_fifo_as_model_or_external_data_is_an_error_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe.bin");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success(), "mkfifo");
    let model = tiny_with(dir.path(), "m.onnx", external("ext_w", &[2], "pipe.bin", Some(8)));
    for target in [&model, &fifo] {
        let e = one_error(&qdq_bounded(&["inspect", s(target)], None));
        assert!(e.contains("pipe.bin") && e.contains("not a regular file"), "{e}");
    }
}

/// Item 2: a small tensor whose external file is huge is refused from the sizes alone, and `/dev/zero` as model,
/// vocabulary, dataset, ranges or config file is refused instead of read until memory runs out: each under a 1 GiB
/// data limit that an unbounded read passes.
#[test]
fn nothing_is_read_past_what_its_header_or_dims_imply() {
    let dir = tempfile::tempdir().unwrap();
    sparse_file(&dir.path().join("big.bin"), 3 << 30);
    let model = tiny_with(dir.path(), "m.onnx", external("ext_w", &[2], "big.bin", None));
    let e = one_error(&qdq_bounded(&["inspect", s(&model)], Some(DATA_LIMIT_KIB)));
    assert!(e.contains("ext_w") && e.contains("big.bin"), "{e}");

    let tiny = tiny(dir.path());
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let window = ["--seq-len", "64", "--query-len", "16", "--doc-stride", "24"];
    let eval = |vocab: &str, data: &str| {
        let args = [&["eval", "--model", s(&tiny), "--vocab", vocab, "--dataset", data][..], &window[..]].concat();
        qdq_bounded(&args, Some(DATA_LIMIT_KIB))
    };
    let q = dir.path().join("q.onnx");
    for o in [
        qdq_bounded(&["inspect", "/dev/zero"], Some(DATA_LIMIT_KIB)),
        eval("/dev/zero", s(&data)),
        eval(s(&vocab), "/dev/zero"),
        qdq_bounded(&["quantize", "--model", s(&tiny), "--ranges", "/dev/zero", "-o", s(&q)], Some(DATA_LIMIT_KIB)),
    ] {
        // Refused up front, not read until the data limit ends it with "out of memory".
        let e = one_error(&o);
        assert!(e.contains("/dev/zero") && e.contains("not a regular file"), "{e}");
    }
    // A config file is read before the command line is parsed: a usage error (exit 2), still one line.
    let o = qdq_bounded(&["eval", "--config", "/dev/zero"], Some(DATA_LIMIT_KIB));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("/dev/zero") && err.contains("not a regular file"), "{err}");
    assert!(!q.exists());
}

/// Item 3: dims whose byte count passes u64 are an error, not a tensor whose length check was skipped.
#[test]
fn a_byte_count_past_u64_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let huge = TensorProto {
        name: Some("huge".into()),
        dims: vec![1 << 31, 1 << 31],
        data_type: Some(DataType::Float as i32),
        raw_data: Some(vec![0; 4]),
        ..Default::default()
    };
    let model = tiny_with(dir.path(), "m.onnx", huge);
    let e = one_error(&qdq_bounded(&["inspect", s(&model)], None));
    assert!(e.contains("huge"), "{e}");
}

/// Item 4: a model over 2 GiB (a 2.4 GB tensor as external data, in a sparse file) is summarised under a 1 GiB data
/// limit: its large tensors are checked, not read. (Quantizing and evaluating such a model is `cargo xtask bench
/// big-model`: it writes gigabytes.)
#[test]
fn a_model_over_2_gib_is_inspected_without_reading_its_weights() {
    let dir = tempfile::tempdir().unwrap();
    let n: u64 = 600_000_000;
    sparse_file(&dir.path().join("big.onnx.data"), 4 * n);
    let model = tiny_with(dir.path(), "big.onnx", external("big_w", &[n as i64], "big.onnx.data", Some(4 * n)));
    let o = qdq_bounded(&["inspect", "--json", s(&model)], Some(DATA_LIMIT_KIB));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let params = v["parameters"].as_u64().unwrap_or_else(|| panic!("no parameter count: {v}"));
    assert!(params > n, "{params}");
}

/// Item 11: one question on a 1.2 MB context (about 250,000 tokens, 2,000 windows of 384) is answered within a data
/// limit of 160 MB: the context is tokenized in pieces and its windows are built as batches need them (this run needs
/// about 90 MB here; building every window up front needed about 200 MB).
#[test]
fn a_very_long_context_is_answered_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.onnx");
    build(&TinyBertConfig { max_positions: 512, ..Default::default() }).save(&model).unwrap();
    let fixture: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("squad/tiny-v1.1.json")).unwrap()).unwrap();
    let para = &fixture["data"][0]["paragraphs"][0];
    let (context, qa) = (para["context"].as_str().unwrap(), &para["qas"][0]);
    let copies = 1_200_000 / (context.len() + 1) + 1;
    let long = vec![context; copies].join(" ");
    let shift = (long.chars().count() - context.chars().count()) as u64;
    let answers: Vec<serde_json::Value> = qa["answers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| serde_json::json!({"text": a["text"], "answer_start": a["answer_start"].as_u64().unwrap() + shift}))
        .collect();
    let data = serde_json::json!({"version": "1.1", "data": [{"title": "long", "paragraphs": [{"context": long,
        "qas": [{"id": "long-1", "question": qa["question"], "answers": answers}]}]}]});
    let path = dir.path().join("long.json");
    std::fs::write(&path, data.to_string()).unwrap();
    let vocab = testdata("squad/vocab.txt");
    let args = ["eval", "--model", s(&model), "--vocab", s(&vocab), "--dataset", s(&path), "--batch", "8"];
    let o = qdq_bounded(&args, Some(160_000));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("on 1 questions (0 missing)"), "{err}");
}

/// Item 10: a vocabulary of the model's size whose special tokens are not at BERT's ids is named in a warning that
/// says what was checked; a vocabulary padded with duplicate lines is not called too small.
#[test]
fn a_vocabulary_laid_out_unlike_bert_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.onnx");
    build(&TinyBertConfig { vocab_size: 1200, max_positions: 64, ..Default::default() }).save(&model).unwrap();
    let fixture = std::fs::read_to_string(testdata("squad/vocab.txt")).unwrap();
    let tokens: Vec<&str> = fixture.lines().collect();
    let data = testdata("squad/tiny-v1.1.json");
    let eval = |vocab: &Path| {
        let args = ["eval", "--model", s(&model), "--vocab", s(vocab), "--dataset", s(&data)];
        qdq_bounded(&[&args[..], &["--seq-len", "64", "--query-len", "16", "--doc-stride", "24"]].concat(), None)
    };

    // 1200 distinct tokens, [CLS] at 7 as in the fixture, not at 101.
    let shifted = dir.path().join("shifted.txt");
    let extra: Vec<String> = (tokens.len()..1200).map(|i| format!("[extra{i}]")).collect();
    std::fs::write(&shifted, [tokens.clone(), extra.iter().map(String::as_str).collect()].concat().join("\n")).unwrap();
    let o = eval(&shifted);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("shifted.txt") && err.contains("[CLS] expected at 101"), "{err}");

    // The same 800 tokens, then 400 repeated lines: 1200 ids, as many as the model embeds.
    let padded = dir.path().join("padded.txt");
    let repeat = std::iter::repeat_n(tokens[tokens.len() - 1], 1200 - tokens.len());
    std::fs::write(&padded, tokens.iter().copied().chain(repeat).collect::<Vec<_>>().join("\n")).unwrap();
    let o = eval(&padded);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Item 12: question ids that occur more than once are reported, since predictions keep one answer per id.
#[test]
fn duplicate_question_ids_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny(dir.path());
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("squad/tiny-v1.1.json")).unwrap()).unwrap();
    let qas = v["data"][0]["paragraphs"][0]["qas"].as_array_mut().unwrap();
    let mut twin = qas[0].clone();
    let id = twin["id"].as_str().unwrap().to_owned();
    twin["question"] = serde_json::Value::from("A second question under the same id?");
    qas.push(twin);
    let data = dir.path().join("dup.json");
    std::fs::write(&data, v.to_string()).unwrap();
    let vocab = testdata("squad/vocab.txt");
    let args = ["eval", "--model", s(&model), "--vocab", s(&vocab), "--dataset", s(&data)];
    let o = qdq_bounded(&[&args[..], &["--seq-len", "64", "--query-len", "16", "--doc-stride", "24"]].concat(), None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("more than once") && err.contains(&id), "{err}");
}

/// Item 6: under `ulimit -f`, writing the output is an error line naming it (not death by SIGXFSZ), and no file is
/// left. A static quantize from a TensorRT calibration cache, which every version reads.
#[test]
fn a_file_size_limit_is_an_error_line_not_a_signal() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny(dir.path());
    let m = Model::load(&model).unwrap();
    let mut cache = String::from("TRT-8601-EntropyCalibration2\n");
    let names = m.graph().input.iter().map(|i| i.name().to_owned());
    for name in names.chain(m.graph().node.iter().flat_map(|n| n.output.iter().cloned())) {
        cache.push_str(&format!("{name}: {:08x}\n", 0.05f32.to_bits()));
    }
    let ranges = dir.path().join("calibration.cache");
    std::fs::write(&ranges, cache).unwrap();
    let out = dir.path().join("q.onnx");
    let o = Command::new("sh")
        .arg("-c")
        .arg("ulimit -f 1 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_qdq"))
        .args([
            "quantize",
            "--model",
            s(&model),
            "--ranges",
            s(&ranges),
            "--policy-option",
            "smooth=off",
            "--policy-option",
            "weight_rounding=nearest",
            "--policy-option",
            "outlier_channels=off",
            "-o",
            s(&out),
        ])
        .output()
        .unwrap();
    let e = one_error(&o);
    assert!(e.contains("q.onnx") && e.to_lowercase().contains("too large"), "{e}");
    assert!(!out.exists());
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 2, "only the inputs remain: {left:?}");
}
