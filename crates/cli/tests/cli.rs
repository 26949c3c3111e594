//! The `qdq` binary on onnx-ir's tiny BERT and the SQuAD fixtures: the main job, its outputs, and one clear error
//! line for each kind of bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use onnx_ir::tiny_bert::{TinyBertConfig, build};

fn testdata(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata").join(rel)
}

fn qdq(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qdq")).args(args).output().expect("qdq runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The error lines (`qdq: error: ...`) of a failed run; asserts there is exactly one and returns it.
fn one_error(o: &Output) -> String {
    assert!(!o.status.success(), "expected failure; stdout: {}", String::from_utf8_lossy(&o.stdout));
    let err = stderr(o);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("qdq: error:")).collect();
    assert_eq!(lines.len(), 1, "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    lines[0].to_owned()
}

struct Fixture {
    dir: tempfile::TempDir,
    model: PathBuf,
}

fn fixture(cfg: TinyBertConfig) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.onnx");
    build(&cfg).save(&model).unwrap();
    Fixture { dir, model }
}

fn tiny() -> Fixture {
    fixture(TinyBertConfig { max_positions: 64, ..Default::default() })
}

/// The feature shape every run on the tiny model uses (its positions end at 64).
const TINY_SHAPE: [&str; 6] = ["--seq_len", "64", "--query_len", "16", "--doc_stride", "24"];

fn e2e_args<'a>(f: &'a Fixture, out: &'a str, vocab: &'a str, dataset: &'a str) -> Vec<String> {
    let model = f.model.to_str().unwrap();
    let out = f.dir.path().join(out);
    let args = ["e2e", "--model", model, "--vocab", vocab, "--dataset", dataset, "--out", out.to_str().unwrap()];
    args.iter().chain(&TINY_SHAPE).chain(&["--cal_num", "4", "--batch", "2"]).map(|s| s.to_string()).collect()
}

fn run(args: &[String]) -> Output {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    qdq(&refs)
}

#[test]
fn e2e_prints_the_table_and_writes_every_output() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let mut args = e2e_args(&f, "out", vocab.to_str().unwrap(), data.to_str().unwrap());
    args.extend(
        ["--calibrate-method", "entropy", "--num-bins", "1024", "--num_quantized_bins", "128"].map(String::from),
    );
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    // An aligned table (every line as wide as the header), which is also valid Markdown.
    let table: Vec<&str> = stdout.lines().take_while(|l| l.starts_with('|')).collect();
    assert_eq!(table.len(), 4, "{stdout}");
    assert!(table.iter().all(|l| l.chars().count() == table[0].chars().count()), "{stdout}");
    assert!(table[2].starts_with("| FP32 ") && table[3].starts_with("| INT8 (QDQ) | cpu |"), "{stdout}");
    let out = f.dir.path().join("out");
    for file in [
        "model_qdq.onnx",
        "calibration.json",
        "calibration.flatbuffers",
        "calibration.cache",
        "predictions_fp32.json",
        "predictions_int8.json",
        "results.json",
        "report.md",
    ] {
        assert!(out.join(file).is_file(), "{file} missing");
    }
    let results: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["calibration"]["method"], "entropy");
    assert_eq!(results["calibration"]["questions"], 4);
    assert_eq!(results["int8"]["questions"], 9);
    // No --policy: the preset made for the EP (--ep defaults to cpu), and the run says so.
    assert_eq!(results["quantization"]["policy"], "cpu");
    assert_eq!(results["quantization"]["policy_chosen_by"], "--ep cpu");
    // The command line as given, for reproduction.
    let line = results["provenance"]["command_line"].as_array().unwrap();
    assert!(line[1] == "e2e" && line.iter().any(|a| a == "entropy"), "{line:?}");

    // inspect reads the QDQ model back.
    let o = qdq(&["inspect", out.join("model_qdq.onnx").to_str().unwrap(), "--ranges"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("MatMul") && text.contains("DequantizeLinear") && text.contains("start_logits"), "{text}");
}

#[test]
fn a_config_file_supplies_settings_and_the_command_line_wins() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let cfg = f.dir.path().join("run.toml");
    // Long names and the seeds' aliases (`version` for `squad-version`) are both keys.
    let toml = "no_eval = true\ncal_num = 2\ncalibrate-method = \"minmax\"\nseq-len = 999\nversion = \"1.1\"\n";
    std::fs::write(&cfg, toml).unwrap();
    let mut args = e2e_args(&f, "cfg_out", vocab.to_str().unwrap(), data.to_str().unwrap());
    args.extend(["--config".into(), cfg.to_str().unwrap().into()]);
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = f.dir.path().join("cfg_out");
    let results: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["calibration"]["method"], "minmax");
    // --cal_num 4 on the command line beats cal_num = 2 in the file; seq-len 64 beats 999.
    assert_eq!(results["calibration"]["questions"], 4);
    assert!(results["fp32"].is_null() && !out.join("predictions_fp32.json").exists());

    std::fs::write(&cfg, "seq_lenn = 128\n").unwrap();
    let e = one_error(&qdq(&["e2e", "--config", cfg.to_str().unwrap()]));
    assert!(e.contains("run.toml") && e.contains("seq_lenn") && e.contains("seq-len"), "{e}");
}

#[test]
fn bad_inputs_each_give_one_clear_error_line() {
    let f = tiny();
    let vocab = testdata("squad/vocab.txt");
    let data = testdata("squad/tiny-v1.1.json");
    let (vocab, data) = (vocab.to_str().unwrap(), data.to_str().unwrap());

    // Missing model.
    let mut args = e2e_args(&f, "o1", vocab, data);
    args[2] = f.dir.path().join("nope.onnx").to_string_lossy().into_owned();
    let e = one_error(&run(&args));
    assert!(e.contains("nope.onnx"), "{e}");

    // A model that is not ONNX.
    let junk = f.dir.path().join("junk.onnx");
    std::fs::write(&junk, b"\x0a\xff\xff\xff\xff\x0fjunk").unwrap();
    args[2] = junk.to_string_lossy().into_owned();
    let e = one_error(&run(&args));
    assert!(e.contains("junk.onnx"), "{e}");

    // Wrong input names.
    let mut args = e2e_args(&f, "o2", vocab, data);
    args.extend(["--io-names".into(), "nvidia".into()]);
    let e = one_error(&run(&args));
    assert!(e.contains("tiny.onnx") && e.contains("input_mask") && e.contains("--io-names"), "{e}");

    // Vocabulary that does not belong to the model.
    let small = fixture(TinyBertConfig { vocab_size: 50, max_positions: 64, ..Default::default() });
    let e = one_error(&run(&e2e_args(&small, "o3", vocab, data)));
    assert!(e.contains("vocab.txt") && e.contains("50"), "{e}");

    // Unreadable SQuAD file.
    let bad = f.dir.path().join("broken.json");
    std::fs::write(&bad, "{\"version\": \"1.1\", \"data\": [{\"title\": \"x\", \"paragraphs\": [{\"context\": 5}]}]}")
        .unwrap();
    let e = one_error(&run(&e2e_args(&f, "o4", vocab, bad.to_str().unwrap())));
    assert!(e.contains("broken.json") && e.contains("context"), "{e}");
    let e = one_error(&run(&e2e_args(&f, "o5", vocab, f.dir.path().join("absent.json").to_str().unwrap())));
    assert!(e.contains("absent.json"), "{e}");
    // A file of another kind in each place: text as the dataset, the model as the vocabulary and as calibration data.
    let text = f.dir.path().join("notes.txt");
    std::fs::write(&text, "hello world\n").unwrap();
    let e = one_error(&run(&e2e_args(&f, "o8", vocab, text.to_str().unwrap())));
    assert!(e.contains("notes.txt") && e.contains("not a SQuAD dataset"), "{e}");
    let model = f.model.to_str().unwrap();
    let e = one_error(&run(&e2e_args(&f, "o9", model, data)));
    assert!(e.contains("tiny.onnx") && e.contains("not a WordPiece vocabulary"), "{e}");
    let mut args = e2e_args(&f, "o10", vocab, data);
    args.extend(["--calibration-data".into(), model.into()]);
    let e = one_error(&run(&args));
    assert!(e.contains("tiny.onnx") && e.contains("binary, where text lines"), "{e}");
    // --out naming a file, for e2e and (before its pass) calibrate.
    std::fs::write(f.dir.path().join("o11"), "").unwrap();
    let e = one_error(&run(&e2e_args(&f, "o11", vocab, data)));
    assert!(e.contains("--out") && e.contains("o11 is a file; give a directory"), "{e}");
    let out = f.dir.path().join("o11").join("cal");
    let calibrate = ["calibrate", "--model", model, "--vocab", vocab, "--calibration-data", data, "--cal-num", "2"];
    let o = qdq(&[&calibrate[..], &TINY_SHAPE, &["--out", out.to_str().unwrap()]].concat());
    let e = one_error(&o);
    assert!(e.contains("o11 is a file; give a directory") && !stderr(&o).contains("calibrating"), "{}", stderr(&o));

    // Bad option values name the option.
    let mut args = e2e_args(&f, "o6", vocab, data);
    args.extend(["--calibrate-method".into(), "kl-div".into()]);
    let o = run(&args);
    // A value the flag's type rejects is a usage error (exit 2) before any work, naming the value and the valid ones.
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("--calibrate-method") && e.contains("kl-div") && e.contains("entropy"), "{e}");
    assert!(!f.dir.path().join("o6").exists(), "nothing written on a usage error");
    let mut args = e2e_args(&f, "o7", vocab, data);
    args.extend(["--policy-option".into(), "residual_adds=skip".into()]);
    let e = one_error(&run(&args));
    assert!(e.contains("residual_adds") && e.contains("residual_add"), "{e}");

    // Nothing was written for any of them.
    for o in ["o1", "o2", "o3", "o4", "o5", "o6", "o7", "o8", "o9", "o10"] {
        assert!(!f.dir.path().join(o).join("calibration.json").exists(), "{o}");
    }
}

#[test]
fn a_mistyped_option_is_rejected_with_a_suggestion() {
    let o = qdq(&["e2e", "--seq-length", "128"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("--seq-length") && err.contains("--seq-len"), "{err}");
    // A batch of 0 is refused as the flags are read, before any work, by every command that takes one.
    for cmd in ["e2e", "calibrate", "eval"] {
        let o = qdq(&[cmd, "--batch", "0"]);
        assert_eq!(o.status.code(), Some(2), "{cmd}");
        assert!(
            stderr(&o).contains("'0' for '--batch <N>': `0` must be a whole number of at least 1"),
            "{cmd}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn tensorrt_here_fails_before_any_work_with_the_way_to_get_it() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let mut args = e2e_args(&f, "trt", vocab.to_str().unwrap(), data.to_str().unwrap());
    args.extend(["--ep", "tensorrt", "--int8", "--fp16"].map(String::from));
    let info = runtime::init(None).unwrap();
    if info.providers.iter().any(|p| p == "TensorrtExecutionProvider") {
        eprintln!("skipped: this ONNX Runtime has TensorRT");
        return;
    }
    let e = one_error(&run(&args));
    for needle in ["TensorrtExecutionProvider", "CPUExecutionProvider", "cargo xtask setup --gpu"] {
        assert!(e.contains(needle), "`{needle}` missing: {e}");
    }
    assert!(!f.dir.path().join("trt").join("calibration.json").exists());
}

#[test]
fn e2e_help_documents_every_seed_flag() {
    let o = qdq(&["e2e", "--help"]);
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout);
    for flag in [
        "--fp16",
        "--int8",
        "--ep",
        "--cal_ep",
        "--model",
        "--vocab",
        "--token",
        "--version",
        "--no_eval",
        "--ort_verbose",
        "--ort_quant",
        "--save_load",
        "--batch",
        "--seq_len",
        "--query_len",
        "--doc_stride",
        "--cal_num",
        "--samples",
        "--verbose",
        "--calibrate-method",
        "--percentile",
        "--num-bins",
        "--num-quantized-bins",
        "--policy",
        "--out",
        "--config",
    ] {
        assert!(help.contains(flag), "{flag} not in qdq e2e --help");
    }
    for default in ["Default: 64, or half the sequence length", "Default: 128, or half the window", "[default: 100]"] {
        assert!(help.contains(default), "{default} not in help");
    }
    // --seq-len defaults to the model's own fixed length, else to the seeds' 384.
    assert!(help.contains("else 384"), "the --seq-len default is not in help");
}

#[test]
fn a_method_option_no_method_of_the_run_reads_is_an_error_naming_it() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let out = f.dir.path().join("cal");
    let calibrate = |extra: &[&str]| {
        let (model, vocab, data) = (f.model.to_str().unwrap(), vocab.to_str().unwrap(), data.to_str().unwrap());
        let args = ["calibrate", "--model", model, "--vocab", vocab, "--calibration-data", data, "--cal-num", "2"];
        qdq(&[&args[..], &TINY_SHAPE, &["--out", out.to_str().unwrap()], extra].concat())
    };
    // The default method is mse: each option names itself, what the run computes, and the way out.
    for (extra, said) in [
        (
            &["--percentile", "99"][..],
            "--percentile 99 is an option of the percentile method, and this run computes mse",
        ),
        (&["--num-quantized-bins", "255"], "--num-quantized-bins 255 is an option of the entropy method"),
        (&["--symmetric"], "--symmetric is an option of the minmax or percentile method"),
        (&["--calibrate-method", "minmax", "--num-bins", "100"], "--num-bins 100 sizes the histograms, and minmax"),
    ] {
        let e = one_error(&calibrate(extra));
        assert!(e.contains(said) && e.contains("leave --"), "{extra:?}: {e}");
    }
    assert!(!out.exists(), "a refused run wrote {}", out.display());
    // Read by a compared method, each is accepted and reaches that method's options.
    let o = calibrate(&[
        "--compare-methods",
        "percentile,entropy,minmax",
        "--percentile",
        "99.9",
        "--num-quantized-bins",
        "64",
        "--symmetric",
        "--num-bins",
        "256",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let options = |method: &str| {
        let t: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join(format!("calibration_{method}.json"))).unwrap()).unwrap();
        t["options"].clone()
    };
    assert_eq!(options("percentile"), serde_json::json!({"percentile": 99.9, "symmetric": true}));
    assert_eq!(options("entropy")["num_quantized_bins"], 64, "{}", options("entropy"));
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("calib_state.json")).unwrap()).unwrap();
    assert_eq!(state["options"]["num_bins"], 256, "{}", state["options"]);
}

#[test]
fn providers_lists_what_the_library_has() {
    let o = qdq(&["providers"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(s.contains("1.31.1") && s.contains("CPUExecutionProvider"), "{s}");
}

#[test]
fn quantize_reads_every_table_format_and_dry_run_writes_nothing() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let cal = f.dir.path().join("cal");
    let calibrate = |out: &Path, extra: &[&str]| {
        let (model, vocab, data) = (f.model.to_str().unwrap(), vocab.to_str().unwrap(), data.to_str().unwrap());
        let small = ["--seq-len", "64", "--query-len", "16", "--doc-stride", "24"];
        // For TensorRT (symmetric int8 activations, so every table format gives the same scales): `--ep` picks the
        // preset, and calibration still runs on the CPU (--cal-ep).
        let args = ["calibrate", "--model", model, "--vocab", vocab, "--calibration-data", data, "--ep", "tensorrt"];
        qdq(&[&args[..], &small, &["--out", out.to_str().unwrap()], extra].concat())
    };
    let o = calibrate(&cal, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("policy tensorrt (the preset for --ep tensorrt"), "{}", stderr(&o));
    // The preset smooths the LayerNorm outputs: calibration writes the smoothed model its tables describe,
    // and quantizing the raw model with them is refused with the way out.
    let smoothed = cal.join("model_smoothed.onnx");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("model_smoothed.onnx"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(qdq::smoothing_record(&onnx_ir::Model::load(&smoothed).unwrap()).is_some());
    let raw = qdq(&[
        "quantize",
        "--model",
        f.model.to_str().unwrap(),
        "--ranges",
        cal.join("calibration.json").to_str().unwrap(),
        "--dry-run",
        "--ep",
        "tensorrt",
    ]);
    let e = one_error(&raw);
    assert!(e.contains("not smoothed") && e.contains("model_smoothed.onnx") && e.contains("smooth=off"), "{e}");
    // Merging statistics of smoothed runs would mix ranges of different models: refused before any inference.
    let merged = f.dir.path().join("merged");
    let o = calibrate(&merged, &["--merge", cal.join("calib_state.json").to_str().unwrap()]);
    let e = one_error(&o);
    assert!(e.contains("--merge") && e.contains("smooth=off"), "{e}");
    assert!(!merged.exists());
    // The same ranges as ONNX Runtime writes them (its calibration.json shape and its calibration.cache text), each
    // with an entry for a tensor the model does not have whose value is bad: left out with a warning.
    let own: serde_json::Value = serde_json::from_slice(&std::fs::read(cal.join("calibration.json")).unwrap()).unwrap();
    let mut data = serde_json::Map::new();
    let mut text = String::new();
    for (t, r) in own["ranges"].as_object().unwrap() {
        let (lo, hi) = (r["min"].as_f64().unwrap(), r["max"].as_f64().unwrap());
        data.insert(t.clone(), serde_json::json!({"lowest": lo, "highest": hi, "CLS": "TensorData"}));
        text.push_str(&format!("{t} {}\n", hi.max(lo)));
    }
    data.insert("elsewhere".into(), serde_json::json!({"lowest": 1.0, "highest": -1.0, "CLS": "TensorData"}));
    text.push_str("elsewhere nan\n");
    let ort_json = serde_json::json!({"CLS": "TensorsData", "data": data});
    std::fs::write(cal.join("ort_calibration.json"), serde_json::to_vec(&ort_json).unwrap()).unwrap();
    std::fs::write(cal.join("ort_calibration.cache"), &text).unwrap();
    let mut scales = Vec::new();
    let tables = ["calibration.json", "calibration.flatbuffers", "calibration.cache", "ort_calibration.json"];
    for table in tables.into_iter().chain(["ort_calibration.cache"]) {
        let out = f.dir.path().join(format!("q_{table}.onnx"));
        let ranges = cal.join(table);
        let args = [
            "quantize",
            "--model",
            smoothed.to_str().unwrap(),
            "--ranges",
            ranges.to_str().unwrap(),
            "--policy",
            "tensorrt",
        ];
        let dry = qdq(&[&args[..], &["--dry-run"]].concat());
        assert!(dry.status.success(), "{table}: {}", stderr(&dry));
        assert!(String::from_utf8_lossy(&dry.stdout).contains("Q/DQ pairs"), "{table}");
        assert!(!out.exists());
        let o = qdq(&[&args[..], &["-o", out.to_str().unwrap()]].concat());
        assert!(o.status.success(), "{table}: {}", stderr(&o));
        if table.starts_with("ort_") {
            assert!(stderr(&o).contains("'elsewhere' left out"), "{table}: {}", stderr(&o));
        }
        let q = onnx_ir::Model::load(&out).unwrap();
        let cov = qdq::coverage(&q);
        assert_eq!(cov.by_op["MatMul"].nodes, cov.by_op["MatMul"].covered, "{table}");
        let mut s: Vec<(String, f32)> =
            cov.pairs.iter().filter(|p| !p.is_initializer).map(|p| (p.tensor.clone(), p.scales[0])).collect();
        s.sort_by(|a, b| a.0.cmp(&b.0));
        scales.push(s);
    }
    // Symmetric int8 activations use amax, so every format gives the same scales, except that ONNX Runtime's text
    // cache holds max(highest, lowest): where |lowest| is the larger end it gives a smaller amax (ONNX Runtime's
    // convention, which the reader documents; its JSON keeps the range).
    let upper_end_larger = |t: &str| {
        // Tensors without a table range (the shifted Softmax pair's analytic range) are the same in every format.
        let r = &own["ranges"][t];
        r["max"].as_f64().zip(r["min"].as_f64()).is_none_or(|(hi, lo)| hi >= -lo)
    };
    let names: Vec<&str> = tables[1..].iter().copied().chain(["ort_calibration.cache"]).collect();
    for (other, table) in scales[1..].iter().zip(&names) {
        assert_eq!(other.len(), scales[0].len());
        for ((ta, a), (tb, b)) in scales[0].iter().zip(other) {
            assert_eq!(ta, tb);
            if *table == "ort_calibration.cache" && !upper_end_larger(ta) {
                assert!(b <= a, "{table} {ta}: {a} vs {b}");
            } else {
                assert!((a - b).abs() <= 1e-6 * a.abs(), "{table} {ta}: {a} vs {b}");
            }
        }
    }
    // A bad entry for a tensor the policy quantizes is an error naming the file and the tensor.
    let (t, _) = scales[0][0].clone();
    std::fs::write(cal.join("bad.cache"), format!("{t} nan\n")).unwrap();
    let bad = cal.join("bad.cache");
    let args = ["quantize", "--model", smoothed.to_str().unwrap(), "--ranges", bad.to_str().unwrap(), "--dry-run"];
    let o = qdq(&[&args[..], &["--policy", "tensorrt"]].concat());
    let e = one_error(&o);
    assert!(e.contains("bad.cache") && e.contains(&t) && e.contains("not finite"), "{e}");
    let o = qdq(&["quantize", "--list-policies"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("tensorrt:") && text.contains("residual_add = skip") && text.contains("softmax_range"),
        "{text}"
    );
}

/// Two calibration states hold the same statistics: every tensor's count, min/max and histograms (kind, grid,
/// total), and the same count in every bin that neither folded ([`calib::CollectOptions::tails`]: which middle bins a
/// histogram kept for its tails counts only together depends on how the batches fell to the sessions; no range does).
fn same_statistics(a: &std::path::Path, b: &std::path::Path) {
    let read =
        |p: &std::path::Path| -> serde_json::Value { serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap() };
    let (a, b) = (read(a), read(b));
    assert_eq!(a["options"], b["options"]);
    let (ta, tb) = (a["tensors"].as_object().unwrap(), b["tensors"].as_object().unwrap());
    assert_eq!(ta.keys().collect::<Vec<_>>(), tb.keys().collect::<Vec<_>>());
    for (name, x) in ta {
        let y = &tb[name];
        assert_eq!((&x["count"], &x["minmax"]), (&y["count"], &y["minmax"]), "{name}");
        for kind in ["signed", "abs"] {
            let (hx, hy) = (&x[kind], &y[kind]);
            for field in ["signed", "per_side", "width_log2", "total", "max_abs"] {
                assert_eq!(hx[field], hy[field], "{name} {kind} {field}");
            }
            let fold = |h: &serde_json::Value| {
                h["folded"].as_array().map(|r| (r[0].as_u64().unwrap(), r[1].as_u64().unwrap()))
            };
            let folded = |i: u64| [fold(hx), fold(hy)].into_iter().flatten().any(|(lo, hi)| (lo..hi).contains(&i));
            let counts = |h: &serde_json::Value| h["counts"].as_array().cloned().unwrap_or_default();
            let (cx, cy) = (counts(hx), counts(hy));
            assert_eq!(cx.len(), cy.len(), "{name} {kind}");
            for (i, (p, q)) in cx.iter().zip(&cy).enumerate() {
                assert!(folded(i as u64) || p == q, "{name} {kind}: bin {i} holds {p} and {q}");
            }
        }
    }
}

/// `--json` prints exactly one JSON document on stdout, with its schema, for every command that has it.
#[test]
fn every_command_speaks_json() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let (vocab, data) = (vocab.to_str().unwrap(), data.to_str().unwrap());
    let small = ["--seq-len", "64", "--query-len", "16", "--doc-stride", "24"];
    let json = |args: &[&str]| -> serde_json::Value {
        let o = qdq(&[args, &["--json"]].concat());
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{args:?}: not one JSON document ({e})"))
    };
    let cal = f.dir.path().join("cal");
    let model = f.model.to_str().unwrap();
    let c = json(
        &[
            &["calibrate", "--model", model, "--vocab", vocab, "--calibration-data", data][..],
            &small,
            &["--out", cal.to_str().unwrap()],
        ]
        .concat(),
    );
    assert_eq!(c["schema"], "qdq.calibrate/1");
    assert!(c["tensors"].as_u64().unwrap() > 0 && c["features"].as_u64().unwrap() > 0, "{c}");
    assert!(c["pass"]["sessions"].as_u64().unwrap() >= 1 && c["pass"]["pass_seconds"].as_f64().unwrap() > 0.0, "{c}");
    // Three augmented-model sessions side by side: said, and the very same tables and statistics.
    let cal3 = f.dir.path().join("cal3");
    let c3 = json(
        &[
            &["calibrate", "--model", model, "--vocab", vocab, "--calibration-data", data][..],
            &small,
            &["--cal-workers", "3", "--out", cal3.to_str().unwrap()],
        ]
        .concat(),
    );
    assert_eq!(c3["pass"]["sessions"], 3, "{c3}");
    for file in ["calibration.json", "calibration.cache"] {
        let read = |d: &std::path::Path| std::fs::read(d.join(file)).unwrap();
        assert!(read(&cal) == read(&cal3), "{file} differs with three calibration sessions");
    }
    same_statistics(&cal.join("calib_state.json"), &cal3.join("calib_state.json"));
    // Batches are dealt to the sessions in turn: the same command, the very same statistics.
    let again = f.dir.path().join("cal3_again");
    json(
        &[
            &["calibrate", "--model", model, "--vocab", vocab, "--calibration-data", data][..],
            &small,
            &["--cal-workers", "3", "--out", again.to_str().unwrap()],
        ]
        .concat(),
    );
    let state = |d: &std::path::Path| std::fs::read(d.join("calib_state.json")).unwrap();
    assert!(state(&cal3) == state(&again), "calib_state.json differs between two runs of one command");
    let smoothed = c["smoothing"]["model"].as_str().unwrap().to_owned();
    let ranges = cal.join("calibration.json");
    let qargs = ["quantize", "--model", &smoothed, "--ranges", ranges.to_str().unwrap()];
    let plan = json(&[&qargs[..], &["--dry-run"]].concat());
    assert_eq!((plan["schema"].as_str(), plan["dry_run"].as_bool()), (Some("qdq.quantize/1"), Some(true)));
    let planned = plan["plan"]["tensors"].as_array().unwrap();
    assert!(planned.iter().any(|t| t["kind"] == "Weight") && plan["pairs"].as_u64().unwrap() >= planned.len() as u64);
    let out = f.dir.path().join("q.onnx");
    let q = json(&[&qargs[..], &["-o", out.to_str().unwrap()]].concat());
    assert_eq!((q["dry_run"].as_bool(), q["quantized_tensors"].as_u64()), (Some(false), Some(planned.len() as u64)));
    let e =
        json(&[&["eval", "--model", out.to_str().unwrap(), "--vocab", vocab, "--dataset", data][..], &small].concat());
    assert_eq!(e["schema"], "qdq.eval/1");
    assert!(e["f1"].as_f64().is_some() && e["latency"]["features"].as_u64().unwrap() > 0, "{e}");
    assert!(e["workers"] == 1 && e["wall_seconds"].as_f64().unwrap() > 0.0, "{e}");
    // Two sessions side by side: the same scores, the workers said.
    let w = json(
        &[
            &["eval", "--model", out.to_str().unwrap(), "--vocab", vocab, "--dataset", data, "--workers", "2"][..],
            &small,
        ]
        .concat(),
    );
    assert_eq!((w["workers"].as_u64(), &w["f1"], &w["exact_match"]), (Some(2), &e["f1"], &e["exact_match"]), "{w}");
    let i = json(&["inspect", out.to_str().unwrap()]);
    assert_eq!(i["schema"], "qdq.inspect/1");
    let mut args = e2e_args(&f, "e2e", vocab, data);
    args.push("--json".into());
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["schema"], "qdq.e2e/1");
    assert!(r["int8"]["f1"].as_f64().is_some() && r["quantization"]["quantized_tensors"].as_u64().unwrap() > 0);
}

/// `--profile-ops` runs each model under ONNX Runtime's profiler and reports its kernel time per operator type: the
/// INT8 model's MatMuls run as integer kernels, the FP32 model's as float ones, and every node ONNX Runtime ran is
/// counted once; without the flag nothing is profiled.
#[test]
fn profile_ops_shows_which_kernels_each_model_ran() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let (vocab, data) = (vocab.to_str().unwrap(), data.to_str().unwrap());
    let mut args = e2e_args(&f, "prof", vocab, data);
    args.extend(["--profile-ops", "--json"].map(String::from));
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ops = |model: &str| -> Vec<(String, u64, f64)> {
        let p = &r["op_profile"][model];
        assert_eq!(p["passes"], 3, "{p}");
        assert!(p["features"].as_u64().unwrap() >= 1, "{p}");
        let kernels = p["kernel_ms_per_feature"].as_f64().unwrap();
        assert!(kernels > 0.0 && kernels <= p["run_ms_per_feature"].as_f64().unwrap(), "{p}");
        let ops: Vec<_> = p["ops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                (
                    o["op"].as_str().unwrap().to_owned(),
                    o["nodes"].as_u64().unwrap(),
                    o["ms_per_feature"].as_f64().unwrap(),
                )
            })
            .collect();
        let sum: f64 = ops.iter().map(|o| o.2).sum();
        assert!((sum - kernels).abs() <= 1e-9 * kernels.max(1.0), "{p}");
        ops
    };
    let (fp32, int8) = (ops("fp32"), ops("int8"));
    let has = |ops: &[(String, u64, f64)], op: &str| ops.iter().any(|o| o.0 == op && o.1 > 0);
    assert!(has(&int8, "MatMulIntegerToFloat") && has(&int8, "QuantizeLinear"), "{int8:?}");
    assert!(!has(&fp32, "MatMulIntegerToFloat") && (has(&fp32, "MatMul") || has(&fp32, "FusedMatMul")), "{fp32:?}");
    let err = stderr(&o);
    assert!(err.contains("Where the time goes") && err.contains("MatMulIntegerToFloat"), "{err}");
    let report = std::fs::read_to_string(f.dir.path().join("prof/report.md")).unwrap();
    assert!(report.contains("## Where the time goes") && report.contains("| all kernels"), "{report}");

    // eval: one model, in its JSON and under its line.
    let q = f.dir.path().join("prof/model_qdq.onnx");
    let eval = ["eval", "--model", q.to_str().unwrap(), "--vocab", vocab, "--dataset", data];
    let o = qdq(&[&eval[..], &TINY_SHAPE, &["--profile-ops"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("Where the time goes") && text.contains("| MatMulIntegerToFloat"), "{text}");
    let o = qdq(&[&eval[..], &TINY_SHAPE, &["--json"]].concat());
    let e: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(e["op_profile"].is_null(), "{e}");
}

/// A state calibrated for a percentile alone keeps only the tails it reads; merged into a run whose range needs more of
/// the histograms (a wider percentile), the error says so and how to keep them whole.
#[test]
fn merging_a_tails_only_state_says_how_to_keep_histograms_whole() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let (vocab, data) = (vocab.to_str().unwrap(), data.to_str().unwrap());
    let model = f.model.to_str().unwrap();
    let out = |name: &str| f.dir.path().join(name);
    let calibrate = |name: &str, extra: &[&str]| {
        let dir = out(name);
        let base = ["calibrate", "--model", model, "--vocab", vocab, "--calibration-data", data, "--batch", "1"];
        let unsmoothed = ["--policy-option", "smooth=off", "--out", dir.to_str().unwrap()];
        qdq(&[&base[..], &TINY_SHAPE, &unsmoothed, extra].concat())
    };
    let o = calibrate("tails", &["--calibrate-method", "percentile", "--symmetric"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out("tails/calib_state.json")).unwrap()).unwrap();
    assert!(state["options"]["tails"].as_f64().is_some(), "{}", state["options"]);
    let folded = state["tensors"].as_object().unwrap().values().filter(|t| t["abs"]["folded"].is_array()).count();
    assert!(folded > 0, "no histogram folded");
    let merge = out("tails/calib_state.json");
    // The 10th percentile of |x| lies in the bins the merged state folded.
    let wider = ["--calibrate-method", "percentile", "--symmetric", "--percentile", "10"];
    let o = calibrate("whole", &[&wider[..], &["--merge", merge.to_str().unwrap()]].concat());
    let e = one_error(&o);
    assert!(e.contains("counted only together") && e.contains("--compare-methods distribution"), "{e}");
}

/// `quantize` without `--output` (and without `--dry-run`) says so before reading anything: the model and the table
/// named here do not exist, and the error is about the missing output, not them.
#[test]
fn quantize_without_an_output_fails_before_any_work() {
    let o = qdq(&["quantize", "--model", "absent.onnx", "--ranges", "absent.json"]);
    let e = one_error(&o);
    assert!(e.contains("--output") && !e.contains("absent"), "{e}");
}

/// `--mode dynamic`: `quantize` needs no ranges (a plan with --dry-run, a model that `eval` runs otherwise), static
/// `quantize` without ranges says what is missing, and `calibrate` refuses the mode with the way out.
#[test]
fn dynamic_mode_quantizes_without_ranges() {
    let f = tiny();
    let model = f.model.to_str().unwrap();
    let out = f.dir.path().join("dynamic.onnx");
    let plan = qdq(&["quantize", "--model", model, "--mode", "dynamic", "--dry-run", "--json"]);
    assert!(plan.status.success(), "{}", stderr(&plan));
    let doc: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!((doc["schema"].as_str(), doc["mode"].as_str()), (Some("qdq.quantize/1"), Some("dynamic")));
    assert!(doc["plan"]["matmuls"].as_array().unwrap().len() >= 7, "{doc}");
    assert!(!out.exists());
    let o = qdq(&["quantize", "--model", model, "--mode", "dynamic", "-o", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The attention MatMuls (Q*K and P*V, 2 per layer) stay in float in dynamic mode, and the run says so.
    let text = String::from_utf8_lossy(&o.stdout);
    let layers = TinyBertConfig::default().layers;
    assert!(text.contains(&format!("{} MatMul-like nodes left in float", 2 * layers)), "{text}");
    assert!(text.contains("attention/self/MatMul (MatMul; float:"), "{text}");
    let inspect = qdq(&["inspect", out.to_str().unwrap(), "--json"]);
    let i: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert!(i.to_string().contains("MatMulInteger") && i.to_string().contains("DynamicQuantizeLinear"), "{i}");
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let small = ["--seq-len", "64", "--query-len", "16", "--doc-stride", "24"];
    let args = ["eval", "--model", out.to_str().unwrap(), "--vocab", vocab.to_str().unwrap()];
    let e = qdq(&[&args[..], &["--dataset", data.to_str().unwrap()], &small].concat());
    assert!(e.status.success(), "{}", stderr(&e));
    let e = one_error(&qdq(&["quantize", "--model", model, "-o", out.to_str().unwrap()]));
    assert!(e.contains("--ranges") && e.contains("--mode dynamic"), "{e}");
    let c = qdq(&["calibrate", "--model", model, "--calibration-data", data.to_str().unwrap(), "--mode", "dynamic"]);
    let e = one_error(&c);
    assert!(e.contains("no calibration") && e.contains("qdq quantize --mode dynamic"), "{e}");
    // The quantized model is not quantized again: one error naming it and what it holds, and nothing written.
    let twice = f.dir.path().join("twice.onnx");
    let e = one_error(&qdq(&[
        "quantize",
        "--model",
        out.to_str().unwrap(),
        "--mode",
        "dynamic",
        "-o",
        twice.to_str().unwrap(),
    ]));
    assert!(e.contains("dynamic.onnx") && e.contains("quantized already") && e.contains("MatMulInteger"), "{e}");
    let c = qdq(&["calibrate", "--model", out.to_str().unwrap(), "--calibration-data", data.to_str().unwrap()]);
    assert!(one_error(&c).contains("quantized already"));
    assert!(!twice.exists());
    // A mistyped mode is a usage error (exit 2) listing the valid ones.
    let o = qdq(&["quantize", "--model", model, "--mode", "fast", "--dry-run"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("static, dynamic"), "{}", stderr(&o));
}

/// `qdq help` is a command like the others: `qdq help --help` explains it (clap's built-in one exited 2), `qdq help
/// eval` is `qdq eval --help`, and an unknown command is one error listing the commands.
#[test]
fn help_command_explains_itself_and_every_command() {
    let o = qdq(&["help", "--help"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("Usage: qdq help [OPTIONS] [COMMAND]"));
    let (a, b) = (qdq(&["help", "eval"]), qdq(&["eval", "--help"]));
    assert!(a.status.success());
    assert_eq!(String::from_utf8_lossy(&a.stdout), String::from_utf8_lossy(&b.stdout));
    let top = qdq(&["help"]);
    assert!(top.status.success() && String::from_utf8_lossy(&top.stdout).contains("Usage: qdq [OPTIONS] <COMMAND>"));
    let e = one_error(&qdq(&["help", "nope"]));
    assert!(e.contains("nope") && e.contains("calibrate, quantize"), "{e}");
}

/// Off a terminal (here: a pipe) long stages log plain progress lines (done / total, rate, time left) in the same
/// log format as every other message, instead of hidden bars; notes are log lines too, not `qdq:` lines.
#[test]
fn progress_in_a_pipe_is_plain_log_lines() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let args = e2e_args(&f, "piped", vocab.to_str().unwrap(), data.to_str().unwrap());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = Command::new(env!("CARGO_BIN_EXE_qdq")).args(&refs).env("QDQ_PROGRESS_SECS", "0").output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    let progress: Vec<&str> = err.lines().filter(|l| l.contains(" questions (") && l.contains("%), ")).collect();
    assert!(!progress.is_empty(), "no progress line:\n{err}");
    // Before the first question is done there is no rate to tell the time left from: the line says so far.
    let told = |l: &&str| l.contains("/s, about") || l.contains(" 0/") && l.contains(" s so far");
    assert!(progress.iter().all(|l| l.contains(" INFO ") && told(l)), "{progress:?}");
    assert!(err.lines().any(|l| l.contains(" INFO ") && l.contains("questions in")), "{err}");
    assert!(err.lines().all(|l| !l.starts_with("qdq:")), "{err}");
}

/// Issue 18, item 7: control characters from file names, model names or tables are escaped in the error line, so a
/// crafted name cannot rewrite it on a terminal (here a model path ending in ESC [2K CR "qdq: ok").
#[test]
fn error_lines_escape_control_characters() {
    let dir = tempfile::tempdir().unwrap();
    let crafted = dir.path().join("m\u{1b}[2K\rqdq: ok.onnx");
    let o = qdq(&["inspect", crafted.to_str().unwrap()]);
    let e = one_error(&o);
    assert!(!e.contains('\u{1b}') && !e.contains('\r'), "{e:?}");
    assert!(e.contains("\\u{1b}[2K\\rqdq: ok"), "{e:?}");
}

/// Issue 18, item 8: an output path that cannot be written is an error before any work, and its missing directory
/// is not created.
#[test]
fn unwritable_outputs_fail_before_any_work() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let missing = f.dir.path().join("no/such/dir");
    let preds = missing.join("p.json");
    let args = ["eval", "--model", f.model.to_str().unwrap(), "--vocab", vocab.to_str().unwrap()];
    let o =
        qdq(&[&args[..], &["--dataset", data.to_str().unwrap(), "--predictions", preds.to_str().unwrap()]].concat());
    let e = one_error(&o);
    assert!(e.contains("--predictions") && e.contains("does not exist"), "{e}");
    assert!(!stderr(&o).contains("evaluating"), "{}", stderr(&o));
    assert!(!missing.exists());
    let out = missing.join("q.onnx");
    let o = qdq(&["quantize", "--model", f.model.to_str().unwrap(), "--mode", "dynamic", "-o", out.to_str().unwrap()]);
    let e = one_error(&o);
    assert!(e.contains("--output") && e.contains("does not exist"), "{e}");
    // A directory given as the output file.
    let o = qdq(&[
        "quantize",
        "--model",
        f.model.to_str().unwrap(),
        "--mode",
        "dynamic",
        "-o",
        f.dir.path().to_str().unwrap(),
    ]);
    assert!(one_error(&o).contains("is a directory"));
    // debug --out and tune --out: a file where the directory should be fails before any model is run.
    let blocker = f.dir.path().join("a_file");
    std::fs::write(&blocker, "x").unwrap();
    let out = blocker.join("out");
    let (model, data) = (f.model.to_str().unwrap(), data.to_str().unwrap());
    for cmd in [
        vec!["debug", "--model", model, "--qdq", model, "--dataset", data, "--out", out.to_str().unwrap()],
        vec!["tune", "--model", model, "--dataset", data, "--out", out.to_str().unwrap()],
    ] {
        let o = qdq(&cmd);
        let e = one_error(&o);
        assert!(e.contains("--out") && e.contains("a_file"), "{e}");
        assert!(!stderr(&o).contains("INFO"), "{}", stderr(&o));
    }
}

/// Issue 18, item 9: a tensor that is NaN everywhere (here the last LayerNorm output, through a NaN β) is named by
/// `calibrate` (it gets no range and stays in float), and `quantize` names it among the skipped tensors.
#[test]
fn non_finite_tensors_are_named_not_dropped_silently() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = build(&TinyBertConfig { max_positions: 64, layers: 1, ..Default::default() });
    let beta = "bert.encoder.layer.0.output.LayerNorm.bias";
    let t = m.graph_mut().initializer.iter_mut().find(|t| t.name() == beta).unwrap();
    let n = t.dims.iter().product::<i64>() as usize;
    *t = onnx_ir::tensor_from_vec::<f32>(beta, &[n], vec![f32::NAN; n]).unwrap();
    let model = dir.path().join("nan.onnx");
    m.save(&model).unwrap();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let cal = dir.path().join("cal");
    let small = ["--seq-len", "64", "--query-len", "16", "--doc-stride", "24", "--policy-option", "smooth=off"];
    let args = ["calibrate", "--model", model.to_str().unwrap(), "--vocab", vocab.to_str().unwrap()];
    let o =
        qdq(&[&args[..], &["--calibration-data", data.to_str().unwrap(), "--out", cal.to_str().unwrap()], &small]
            .concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let tensor = "/bert/encoder/layer.0/output/LayerNorm/Add_1_output_0";
    let err = stderr(&o);
    assert!(err.lines().any(|l| l.contains(tensor) && l.contains("NaN")), "{err}");
    assert!(err.lines().any(|l| l.contains(tensor) && l.contains("no finite value")), "{err}");
    let out = dir.path().join("q.onnx");
    let q = qdq(&[
        "quantize",
        "--model",
        model.to_str().unwrap(),
        "--ranges",
        cal.join("calibration.json").to_str().unwrap(),
        "--policy-option",
        "smooth=off",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(q.status.success(), "{}", stderr(&q));
    let text = String::from_utf8_lossy(&q.stdout);
    assert!(text.contains(&format!("skipped {tensor}: no calibration range")), "{text}");
}

/// Issue 18, item 5: model_smoothed.onnx and calibration.json of two different calibrate runs (what a run killed
/// between its writes leaves) are refused by quantize instead of giving a model whose ranges describe another one;
/// the pair of one run is accepted.
#[test]
fn quantize_refuses_a_smoothed_model_and_tables_of_different_runs() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let calibrate = |out: &Path, questions: &str| {
        let args = ["calibrate", "--model", f.model.to_str().unwrap(), "--vocab", vocab.to_str().unwrap()];
        let rest =
            ["--calibration-data", data.to_str().unwrap(), "--cal-num", questions, "--out", out.to_str().unwrap()];
        let small = ["--seq-len", "64", "--query-len", "16", "--doc-stride", "24"];
        let o = qdq(&[&args[..], &rest, &small].concat());
        assert!(o.status.success(), "{}", stderr(&o));
    };
    let (a, b) = (f.dir.path().join("a"), f.dir.path().join("b"));
    calibrate(&a, "3");
    calibrate(&b, "9");
    let quantize = |model: &Path, table: &Path| {
        let out = f.dir.path().join("q.onnx");
        qdq(&[
            "quantize",
            "--model",
            model.to_str().unwrap(),
            "--ranges",
            table.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ])
    };
    let mixed = quantize(&a.join("model_smoothed.onnx"), &b.join("calibration.json"));
    let e = one_error(&mixed);
    assert!(e.contains("calibration.json") && e.contains("different runs"), "{e}");
    let same = quantize(&b.join("model_smoothed.onnx"), &b.join("calibration.json"));
    assert!(same.status.success(), "{}", stderr(&same));
}

/// Issue 18, item 6: under `ulimit -f` (a file size limit) a write that passes it is one error line naming the
/// output, not a death by SIGXFSZ, and no partial output is left.
#[cfg(unix)]
#[test]
fn a_file_size_limit_is_an_error_line() {
    let f = tiny();
    let out = f.dir.path().join("q.onnx");
    let script = format!(
        "ulimit -f 1; exec '{}' quantize --model '{}' --mode dynamic -o '{}'",
        env!("CARGO_BIN_EXE_qdq"),
        f.model.display(),
        out.display()
    );
    let o = Command::new("sh").args(["-c", &script]).output().unwrap();
    let e = one_error(&o);
    assert!(e.contains("q.onnx") && e.to_lowercase().contains("too large"), "{e}");
    assert!(!out.exists());
}

/// `qdq tune --json` on the tiny model into `out`, calibrating and scoring on the tiny SQuAD file (every question, the
/// last 3 held out), with `extra` flags; the parsed report.
fn tune_tiny(f: &Fixture, out: &Path, extra: &[&str]) -> serde_json::Value {
    let (vocab, dataset) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let mut args = e2e_args(f, "unused", vocab.to_str().unwrap(), dataset.to_str().unwrap());
    args.retain(|a| a != "e2e" && a != "--batch" && a != "2");
    let out_at = args.iter().position(|a| a == "--out").unwrap();
    args[out_at + 1] = out.display().to_string();
    args.extend(["--calibration-data", dataset.to_str().unwrap()].iter().map(|s| s.to_string()));
    args.extend(["--samples", "0", "--held-out", "3", "--json"].iter().map(|s| s.to_string()));
    args.extend(extra.iter().map(|s| s.to_string()));
    args.insert(0, "tune".into());
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Issue 14: `qdq tune` walks the trade-off curve (float nodes 0, 1, 2 here, where no candidate can meet a budget
/// that asks INT8 to beat FP32 by 100 F1), keeps the best, and its recipe replays the chosen model byte for byte.
#[test]
fn tune_writes_the_curve_and_a_recipe_that_replays_its_model() {
    let f = tiny();
    let out = f.dir.path().join("tune");
    let report = tune_tiny(&f, &out, &["--budget=-100", "--max-float", "2"]);
    assert_eq!(report["schema"], "qdq.tune/1");
    let curve = report["curve"].as_array().unwrap();
    let floats: Vec<usize> = curve.iter().map(|c| c["float_nodes"].as_array().unwrap().len()).collect();
    // The table's ranges, then (when another calibrator's range helped) the same with those, then 1 and 2 nodes.
    let choices = report["calibrators"].as_array().unwrap().len();
    assert_eq!(floats, if choices > 0 { vec![0, 0, 1, 2] } else { vec![0, 1, 2] }, "{report:#}");
    // Each candidate's held-out logit KL is reported beside its F1 (the preset is over budget); quantization moves
    // the logits, so none is 0.
    assert!(curve.iter().all(|c| c["held_out_kl"].as_f64().is_some_and(|kl| kl > 0.0)), "{report:#}");
    // Each candidate's dF1 comes with its standard error over the questions scored.
    assert!(curve.iter().all(|c| c["delta_f1_se"].as_f64().is_some_and(|se| se >= 0.0)), "{report:#}");
    // Each candidate is timed against FP32 in alternating rounds on the held-out features: a median within its range.
    for c in curve {
        let s = &c["speedup"];
        let (median, min, max) =
            (s["median"].as_f64().unwrap(), s["min"].as_f64().unwrap(), s["max"].as_f64().unwrap());
        assert!(0.0 < min && min <= median && median <= max && max.is_finite(), "{s}");
        assert_eq!(s["rounds"], 5, "{s}");
        assert!(s["features"].as_u64().is_some_and(|n| (1..=16).contains(&n)), "{s}");
    }
    assert_eq!(report["within_budget"], false);
    // MatMul-like nodes are counted in the model quantized: the `cpu` preset (the one for the default EP) writes its
    // integer MatMuls as MatMulIntegerToFloat, which still count, as integer; each node kept in float is one fewer.
    let model = onnx_ir::Model::load(&f.model).unwrap();
    let matmuls = model.graph().node.iter().filter(|n| n.op_type() == "MatMul").count() as u64;
    assert!(curve.iter().all(|c| c["matmuls"] == matmuls), "{report:#}");
    let integer: Vec<u64> = curve.iter().map(|c| c["integer_matmuls"].as_u64().unwrap()).collect();
    assert!(integer[0] > 0 && integer.windows(2).all(|w| w[1] <= w[0]), "{integer:?}");
    assert!(curve.iter().zip(&integer).all(|(c, &i)| i + c["float_nodes"].as_array().unwrap().len() as u64 <= matmuls));
    let on_disk: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("tune.json")).unwrap()).unwrap();
    assert_eq!(on_disk, report);
    let md = std::fs::read_to_string(out.join("tune.md")).unwrap();
    assert!(md.contains("(chosen)") && md.contains("](curve.svg)") && md.contains("debug/debug.md"), "{md}");
    for chart in ["curve.svg", "debug/sqnr.svg", "histograms.svg"] {
        assert!(std::fs::read_to_string(out.join(chart)).unwrap().starts_with("<svg"), "{chart}");
    }
    // The histograms mark each calibrator's range (mse is the default; minmax needs no histogram).
    let hist = std::fs::read_to_string(out.join("histograms.svg")).unwrap();
    assert!(hist.contains("\nmse\n") && hist.contains("\nminmax\n") && md.contains("](histograms.svg)"), "{md}");

    let replay = f.dir.path().join("replay.onnx");
    let recipe = out.join("recipe.toml");
    let o = qdq(&["quantize", "--config", recipe.to_str().unwrap(), "-o", replay.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read(&replay).unwrap() == std::fs::read(out.join("model_qdq.onnx")).unwrap());
    let chosen = &curve[report["chosen"].as_u64().unwrap() as usize];
    let text = std::fs::read_to_string(&recipe).unwrap();
    for node in chosen["float_nodes"].as_array().unwrap() {
        assert!(text.contains(node.as_str().unwrap()), "{text}");
    }
}

/// Issue 14: each candidate is screened on the questions whose FP32 answers are nearest to flipping; one over budget
/// there is not run on the rest, and the chosen model's F1 is measured on every question: the F1 `qdq eval` gives it.
#[test]
fn tune_screens_candidates_and_scores_the_chosen_one_on_every_question() {
    let f = tiny();
    let out = f.dir.path().join("tune_screen");
    // No candidate can beat FP32 by 100 F1: every one is over budget on its screen, the best is kept.
    let report = tune_tiny(&f, &out, &["--budget", "-100", "--max-float", "2", "--screen", "0.4"]);
    let questions = report["questions"].as_u64().unwrap();
    let curve = report["curve"].as_array().unwrap();
    let chosen = report["chosen"].as_u64().unwrap() as usize;
    assert!(curve.len() >= 3, "{report:#}");
    for (i, c) in curve.iter().enumerate() {
        // ceil(0.4 * 9 questions) = 4 screened.
        let expected = if i == chosen { questions } else { (0.4 * questions as f64).ceil() as u64 };
        assert_eq!(c["questions_scored"].as_u64(), Some(expected), "{i}: {report:#}");
    }
    let (vocab, dataset) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let (vocab, data, model) = (vocab.to_str().unwrap(), dataset.to_str().unwrap(), out.join("model_qdq.onnx"));
    let args = ["eval", "--model", model.to_str().unwrap(), "--vocab", vocab, "--dataset", data, "--json"];
    let o = qdq(&[&args[..], &TINY_SHAPE].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let e: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let (measured, reported) = (e["f1"].as_f64().unwrap(), curve[chosen]["f1"].as_f64().unwrap());
    assert!((measured - reported).abs() < 1e-9, "eval {measured}, tune {reported}");
    let md = std::fs::read_to_string(out.join("tune.md")).unwrap();
    assert!(md.contains(" (screen) |") && md.contains("nearest to flipping"), "{md}");
    // Every candidate on every question when asked, and a share outside (0, 1] is refused.
    let all = tune_tiny(&f, &f.dir.path().join("tune_all"), &["--budget=-100", "--max-float", "1", "--screen", "1"]);
    assert!(all["curve"].as_array().unwrap().iter().all(|c| c["questions_scored"] == questions), "{all:#}");
    let o = qdq(&["tune", "--model", f.model.to_str().unwrap(), "--dataset", data, "--screen", "0"]);
    assert!(one_error(&o).contains("--screen"), "{}", stderr(&o));
}

/// Issue 14: with the preset within budget and MatMuls it keeps float by design (the `cpu` layout's attention
/// MatMuls), tune also builds the model with every MatMul integer, times it head to head against the preset, and
/// scores and keeps it when it is within budget and at most 2 % slower; the recipe replays whichever was chosen.
#[test]
fn tune_tries_every_matmul_integer_when_the_preset_is_within_budget() {
    let f = tiny();
    let out = f.dir.path().join("tune_up");
    let report = tune_tiny(&f, &out, &["--budget", "100", "--policy", "cpu"]);
    let curve = report["curve"].as_array().unwrap();
    let not_scored = report["not_scored"].as_array().unwrap();
    // The all-integer model is timed first: scored (a second curve point) only when the head-to-head median puts it
    // at most 2 % slower than the preset, else listed as not scored; exactly one of the two, whichever way the timing
    // went here.
    assert_eq!(curve.len() + not_scored.len(), 2, "{report:#}");
    let preset = &curve[0];
    let all = curve.get(1).unwrap_or_else(|| &not_scored[0]);
    assert!(preset.get("policy_options").is_none(), "{preset}");
    assert_eq!(all["policy_options"], serde_json::json!(["matmul_const_b_only=false"]));
    assert!(preset["integer_matmuls"].as_u64() < preset["matmuls"].as_u64(), "{preset}");
    assert_eq!(all["integer_matmuls"], all["matmuls"], "{all}");
    let head_to_head = &all["vs_preset"];
    // Head to head in more rounds than a model against FP32 (two INT8 models a few per cent apart).
    assert!(head_to_head["min"].as_f64() <= head_to_head["max"].as_f64() && head_to_head["rounds"] == 21, "{all}");
    assert_eq!(all["speedup"]["rounds"], 5, "{all}");
    let faster = head_to_head["median"].as_f64().unwrap() >= 0.98;
    assert_eq!(curve.len() == 2, faster, "{report:#}");
    assert_eq!(report["chosen"], u64::from(faster), "{report:#}");
    // Where the time went: every phase this run had, none overlapping (their sum is within the total).
    let phases = report["phase_seconds"].as_object().unwrap();
    for k in ["statistics", "fp32_scoring", "held_out_fp32", "quantization", "held_out_kl", "timing", "total"] {
        assert!(phases[k].as_f64().unwrap() > 0.0, "{k}: {report:#}");
    }
    assert!(phases.contains_key("candidate_scoring"), "the preset is always scored: {report:#}");
    let sum: f64 = phases.iter().filter(|(k, _)| *k != "total").map(|(_, v)| v.as_f64().unwrap()).sum();
    assert!(sum <= phases["total"].as_f64().unwrap() + 1e-3, "{report:#}");
    let md = std::fs::read_to_string(out.join("tune.md")).unwrap();
    assert!(md.contains("Took ") && md.contains("statistics ") && md.contains("candidates scored "), "{md}");
    if faster {
        assert!(all.get("f1").is_some(), "{all}");
        assert!(md.contains("| matmul_const_b_only=false |"), "{md}");
    } else {
        assert!(all.get("f1").is_none(), "{all}");
        assert!(md.contains("Not scored: 0 nodes in float, matmul_const_b_only=false"), "{md}");
    }
    let replay = f.dir.path().join("replay_up.onnx");
    let recipe = out.join("recipe.toml");
    let o = qdq(&["quantize", "--config", recipe.to_str().unwrap(), "-o", replay.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read(&replay).unwrap() == std::fs::read(out.join("model_qdq.onnx")).unwrap());
    // Either way the all-integer model is on disk to compare with.
    assert!(out.join("candidates/model_qdq_float0_all_integer.onnx").is_file());
}

/// The policy the planted-range tests quantize with.
const PLANT_POLICY: [&str; 4] = ["--policy", "tensorrt", "--policy-option", "smooth=off"];

/// Calibrates the tiny model into `cal/` with [`PLANT_POLICY`]: the table's path and its JSON.
fn calibrate_to_plant(f: &Fixture, vocab: &str, dataset: &str) -> (PathBuf, serde_json::Value) {
    let mut args = e2e_args(f, "cal", vocab, dataset);
    args.extend(PLANT_POLICY.iter().chain(&["--no-eval"]).map(|s| s.to_string()));
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = f.dir.path().join("cal/calibration.json");
    let ranges = serde_json::from_slice(&std::fs::read(&table).unwrap()).unwrap();
    (table, ranges)
}

/// Shrinks one GELU output's range 100x in `ranges`; returns that tensor.
fn plant(ranges: &mut serde_json::Value) -> &'static str {
    let tensor = "/bert/encoder/layer.1/intermediate/intermediate_act_fn/Mul_1_output_0";
    let r = &mut ranges["ranges"][tensor];
    for k in ["min", "max"] {
        r[k] = (r[k].as_f64().unwrap() / 100.0).into();
    }
    tensor
}

/// Issue 14: a planted bad range (one tensor's range shrunk 100x) is the first tensor `qdq debug` lists, and the
/// node reading it is the first `qdq tune` keeps in float, from the same table (`--ranges`, no re-calibration).
#[test]
fn a_planted_bad_range_is_found_first_by_debug_and_floated_first_by_tune() {
    let f = tiny();
    let (vocab, dataset) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let (vocab, dataset) = (vocab.to_str().unwrap(), dataset.to_str().unwrap());
    let policy = PLANT_POLICY;
    let (_, mut ranges) = calibrate_to_plant(&f, vocab, dataset);
    let planted_tensor = plant(&mut ranges);
    let planted = f.dir.path().join("planted.json");
    std::fs::write(&planted, serde_json::to_vec(&ranges).unwrap()).unwrap();
    let (model, planted) = (f.model.to_str().unwrap(), planted.to_str().unwrap());
    let data = ["--vocab", vocab, "--dataset", dataset, "--seq-len", "64", "--query-len", "16", "--doc-stride", "24"];

    let bad = f.dir.path().join("planted_qdq.onnx");
    let mut q = vec!["quantize", "--model", model, "--ranges", planted, "-o", bad.to_str().unwrap()];
    q.extend(policy);
    let o = qdq(&q);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut d = vec!["debug", "--model", model, "--qdq", bad.to_str().unwrap(), "--questions", "4", "--json"];
    d.extend(data);
    let o = qdq(&d);
    assert!(o.status.success(), "{}", stderr(&o));
    let found: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(found["tensors"][0]["tensor"], planted_tensor, "{found:#}");
    assert!(found["tensors"][0]["clipped_fraction"].as_f64().unwrap() > 0.5, "{found:#}");

    let out = f.dir.path().join("tune");
    let mut t = vec!["tune", "--model", model, "--ranges", planted, "--out", out.to_str().unwrap(), "--json"];
    t.extend(["--budget=-100", "--max-float", "1", "--samples", "0", "--held-out", "4"]);
    // The sensitivity on another file than the one scored (a copy here: the ranking must not change).
    let held = f.dir.path().join("held_out.json");
    std::fs::copy(testdata("squad/tiny-v1.1.json"), &held).unwrap();
    t.extend(["--held-out-data", held.to_str().unwrap()]);
    t.extend(policy);
    t.extend(data);
    let o = qdq(&t);
    assert!(o.status.success(), "{}", stderr(&o));
    let tuned: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(tuned["ranking"][0], "/bert/encoder/layer.1/output/dense/MatMul", "{tuned:#}");
    let debugged: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("debug/debug.json")).unwrap()).unwrap();
    assert_eq!(debugged["dataset"].as_str(), held.to_str(), "the sensitivity ran on --held-out-data");
    assert_eq!(tuned["curve"][1]["float_nodes"][0], tuned["ranking"][0]);
    // A given table: no statistics, so no histograms.
    assert!(!out.join("histograms.svg").exists());
}

/// Issue 14: `qdq debug --sensitivity --confirm N` scores FP32, the QDQ model and the QDQ model with each of the N most
/// recovering nodes in float on the first evaluation questions: FP32's and the QDQ model's F1 are what `qdq eval` says
/// of the same files and questions, and exactly the first N nodes carry the F1 they recover.
#[test]
fn debug_confirm_scores_the_top_nodes_and_agrees_with_eval() {
    let f = tiny();
    let (vocab, dataset) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let (vocab, dataset) = (vocab.to_str().unwrap(), dataset.to_str().unwrap());
    let (table, _) = calibrate_to_plant(&f, vocab, dataset);
    let (model, int8) = (f.model.to_str().unwrap(), f.dir.path().join("int8.onnx"));
    let mut q = vec!["quantize", "--model", model, "--ranges", table.to_str().unwrap(), "-o", int8.to_str().unwrap()];
    q.extend(PLANT_POLICY);
    let o = qdq(&q);
    assert!(o.status.success(), "{}", stderr(&o));
    let data = ["--vocab", vocab, "--dataset", dataset, "--seq-len", "64", "--query-len", "16", "--doc-stride", "24"];
    let int8 = int8.to_str().unwrap();
    let mut d = vec!["debug", "--model", model, "--qdq", int8, "--questions", "3", "--sensitivity", "--json"];
    d.extend(["--confirm", "3", "--confirm-samples", "5"]);
    d.extend(data);
    let o = qdq(&d);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let c = &report["confirmation"];
    assert_eq!(c["questions"], 5, "{report:#}");
    let f1_of = |m: &str| {
        let mut e = vec!["eval", "--model", m, "--samples", "5", "--json"];
        e.extend(data);
        let o = qdq(&e);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["f1"].as_f64().unwrap()
    };
    assert!((c["fp32_f1"].as_f64().unwrap() - f1_of(model)).abs() < 1e-9, "{report:#}");
    assert!((c["qdq_f1"].as_f64().unwrap() - f1_of(int8)).abs() < 1e-9, "{report:#}");
    let nodes = report["sensitivity"].as_array().unwrap();
    assert!(nodes.len() > 3, "{report:#}");
    for (i, n) in nodes.iter().enumerate() {
        assert_eq!(n["f1_recovered"].is_f64(), i < 3, "{report:#}");
        assert_eq!(n["f1_two_se"].as_f64().is_some_and(|se| se >= 0.0), i < 3, "{report:#}");
    }
    // The count of effects outside their noise is the one the two columns give.
    let outside = nodes[..3]
        .iter()
        .filter(|n| n["f1_recovered"].as_f64().unwrap().abs() > n["f1_two_se"].as_f64().unwrap())
        .count();
    assert_eq!(c["outside_noise"].as_u64(), Some(outside as u64), "{report:#}");
    // Three nodes: a correlation, unless one column is constant (the tiny model's F1 on 5 questions may not move).
    let r = &c["rank_correlation"];
    assert!(r.is_null() || r.as_f64().is_some_and(|r| (-1.0..=1.0).contains(&r)), "{report:#}");
    // --confirm needs the sensitivity it confirms.
    let o = qdq(&["debug", "--model", model, "--qdq", int8, "--dataset", dataset, "--confirm", "2"]);
    assert!(!o.status.success() && stderr(&o).contains("--sensitivity"), "{}", stderr(&o));
    // The two models the other way round: refused, naming the quantized one and what it holds, nothing written.
    let out = f.dir.path().join("swapped");
    let mut d = vec!["debug", "--model", int8, "--qdq", model, "--out", out.to_str().unwrap()];
    d.extend(data);
    let e = one_error(&qdq(&d));
    assert!(e.contains("int8.onnx: --model holds a quantized model (") && e.contains("other way round"), "{e}");
    assert!(!out.exists());
}

/// Issue 14: with the statistics at hand (calib_state.json beside the table), tune first tries the other
/// calibrators' ranges for the worst pairs: a range shrunk 100x is replaced by one from the same statistics (the model
/// stays wholly integer), and the table it writes replays that candidate byte for byte.
#[test]
fn tune_replaces_a_planted_bad_range_with_another_calibrators() {
    let f = tiny();
    let (vocab, dataset) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let (vocab, dataset) = (vocab.to_str().unwrap(), dataset.to_str().unwrap());
    let policy = PLANT_POLICY;
    let (table, mut ranges) = calibrate_to_plant(&f, vocab, dataset);
    let method = ranges["method"].as_str().unwrap().to_owned();
    let planted_tensor = plant(&mut ranges);
    std::fs::write(&table, serde_json::to_vec(&ranges).unwrap()).unwrap();
    let (model, table) = (f.model.to_str().unwrap(), table.to_str().unwrap());
    let data = ["--vocab", vocab, "--dataset", dataset, "--seq-len", "64", "--query-len", "16", "--doc-stride", "24"];

    let out = f.dir.path().join("tune");
    let mut t = vec!["tune", "--model", model, "--ranges", table, "--out", out.to_str().unwrap(), "--json"];
    t.extend(["--budget=-100", "--max-float", "0", "--calibrator-trials", "3", "--samples", "0", "--held-out", "4"]);
    t.extend(policy);
    t.extend(data);
    let o = qdq(&t);
    assert!(o.status.success(), "{}", stderr(&o));
    let tuned: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let first = &tuned["calibrators"][0];
    assert_eq!(first["tensor"], planted_tensor, "{tuned:#}");
    assert_eq!(first["from"].as_str(), Some(method.as_str()));
    assert_ne!(first["to"].as_str(), Some(method.as_str()));
    assert!(first["kl_after"].as_f64().unwrap() < 0.98 * first["kl_before"].as_f64().unwrap(), "{tuned:#}");
    // The planted range was 100x too small: the one taken instead covers far more.
    let (from, to) = (first["from_range"][1].as_f64().unwrap(), first["to_range"][1].as_f64().unwrap());
    assert!(to > 10.0 * from, "{tuned:#}");
    let curve = tuned["curve"].as_array().unwrap();
    assert_eq!(curve.len(), 2, "{tuned:#}");
    assert_eq!(curve[0]["calibrator_choices"], 0);
    let n = tuned["calibrators"].as_array().unwrap().len();
    assert_eq!(curve[1]["calibrator_choices"].as_u64(), Some(n as u64));
    assert!(
        curve[1]["float_nodes"].as_array().unwrap().is_empty()
            && curve[1]["integer_matmuls"] == curve[0]["integer_matmuls"]
    );

    // The table written names each choice and replays the candidate exactly.
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("ranges_tuned.json")).unwrap()).unwrap();
    assert_eq!(written["chosen"][planted_tensor], first["to"]);
    let max = written["ranges"][planted_tensor]["max"].as_f64().unwrap();
    assert!((max - to).abs() <= 1e-6 * to, "{written:#}");
    let replay = f.dir.path().join("replay.onnx");
    let tuned_table = out.join("ranges_tuned.json");
    let mut q = vec!["quantize", "--model", model, "--ranges", tuned_table.to_str().unwrap()];
    q.extend(["-o", replay.to_str().unwrap()]);
    q.extend(policy);
    let o = qdq(&q);
    assert!(o.status.success(), "{}", stderr(&o));
    let candidate = curve[1]["model"].as_str().unwrap();
    assert!(std::fs::read(&replay).unwrap() == std::fs::read(candidate).unwrap());
    let md = std::fs::read_to_string(out.join("tune.md")).unwrap();
    assert!(md.contains("Ranges from another calibrator") && md.contains(planted_tensor), "{md}");
}

/// Issue 18: a run stopped by SIGINT, SIGTERM or SIGKILL at any point leaves only whole outputs behind: every file in
/// the output directory is one the run writes (no temporary file: outputs are written through unnamed temporary
/// files linked into place), and each one that exists is complete (the JSON parses, the model loads).
#[test]
fn a_killed_run_leaves_only_whole_outputs() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let known = [
        "model_qdq.onnx",
        "calibration.json",
        "calibration.flatbuffers",
        "calibration.cache",
        "calib_state.json",
        "predictions_fp32.json",
        "predictions_int8.json",
        "results.json",
        "report.md",
    ];
    // The signals go at points spread over one whole run's duration, measured here (a fixed delay is past the end
    // on a fast machine: the whole run takes about 150 ms on the CI host).
    let started = std::time::Instant::now();
    let whole = run(&e2e_args(&f, "whole", vocab.to_str().unwrap(), data.to_str().unwrap()));
    assert!(whole.status.success(), "{}", String::from_utf8_lossy(&whole.stderr));
    let run_ms = started.elapsed().as_secs_f64() * 1e3;
    let mut stopped_early = 0;
    for (k, (signal, at)) in [("INT", 0.05), ("TERM", 0.2), ("KILL", 0.35), ("INT", 0.5), ("TERM", 0.7), ("KILL", 1.5)]
        .into_iter()
        .enumerate()
    {
        let delay_ms = (at * run_ms) as u64;
        let out = format!("out_{k}");
        let args = e2e_args(&f, &out, vocab.to_str().unwrap(), data.to_str().unwrap());
        let mut child = Command::new(env!("CARGO_BIN_EXE_qdq"))
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let sent = Command::new("kill").args(["-s", signal, &child.id().to_string()]).status().unwrap();
        let status = child.wait().unwrap();
        if sent.success() && !status.success() {
            stopped_early += 1;
        }
        let dir = f.dir.path().join(&out);
        for entry in std::fs::read_dir(&dir).into_iter().flatten() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            assert!(known.contains(&name.as_str()), "SIG{signal} after {delay_ms} ms left {name}");
            let path = entry.path();
            if name.ends_with(".json") {
                let bytes = std::fs::read(&path).unwrap();
                assert!(serde_json::from_slice::<serde_json::Value>(&bytes).is_ok(), "{name} is not whole");
            } else if name.ends_with(".onnx") {
                assert!(onnx_ir::Model::load(&path).is_ok(), "{name} is not whole");
            }
        }
    }
    assert!(stopped_early >= 2, "the runs should mostly be stopped before they end ({stopped_early} were)");
}

/// Issue 18 item 12: a model that fails inside ONNX Runtime at run time gives one error line, not ORT's own ERROR log
/// line beside ours.
#[test]
fn an_onnx_runtime_failure_is_one_error_line() {
    let f = tiny();
    let mut m = onnx_ir::Model::load(&f.model).unwrap();
    let g = m.graph_mut();
    g.initializer.retain(|t| t.name() != "/bert/Constant_hidden_shape");
    // [batch, 7, -1]: not divisible at run time, which shape inference cannot see.
    g.initializer.push(onnx_ir::tensor_from_vec::<i64>("/bert/Constant_hidden_shape", &[3], vec![0, 7, -1]).unwrap());
    m.save(&f.model).unwrap();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let model = f.model.to_str().unwrap();
    let args = ["eval", "--model", model, "--vocab", vocab.to_str().unwrap(), "--dataset", data.to_str().unwrap()];
    let o = qdq(&[&args[..], &["--seq-len", "64", "--query-len", "16", "--doc-stride", "24"]].concat());
    let line = one_error(&o);
    assert!(line.contains("Reshape") && line.contains("tiny.onnx"), "{line}");
    assert!(!stderr(&o).lines().any(|l| l.contains(" ERROR ")), "{}", stderr(&o));
}

/// A model whose large weights are external data (as every export over 2 GiB must be): `eval` hands ONNX Runtime the
/// file itself (qdq never reads those tensors) and answers exactly as the same model inline; `quantize` reads them and
/// writes the same model as from the inline file.
#[test]
fn a_model_with_external_data_evaluates_and_quantizes_as_the_same_model_inline() {
    // A 10,000-row word embedding (1.3 MB) is over the 1 MiB up to which graph-only loading reads external tensors.
    let f = fixture(TinyBertConfig { max_positions: 64, vocab_size: 10_000, ..Default::default() });
    let ext = f.dir.path().join("ext.onnx");
    let opts = onnx_ir::SaveOptions { external_data: Some(onnx_ir::ExternalDataOptions::new("ext.onnx.data")) };
    onnx_ir::Model::load(&f.model).unwrap().save_with(&ext, &opts).unwrap();
    assert!(onnx_ir::Model::load_graph_only(&ext).unwrap().unread_external_data() > 0);
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let small = ["--seq-len", "64", "--query-len", "16", "--doc-stride", "24"];
    let mut answers = vec![];
    for m in [&f.model, &ext] {
        let preds = m.with_extension("predictions.json");
        let args = ["eval", "--model", m.to_str().unwrap(), "--vocab", vocab.to_str().unwrap(), "--dataset"];
        let more = [data.to_str().unwrap(), "--predictions", preds.to_str().unwrap()];
        let o = qdq(&[&args[..], &more, &small].concat());
        assert!(o.status.success(), "{}", stderr(&o));
        answers.push(std::fs::read_to_string(&preds).unwrap());
        let q = m.with_extension("dynamic.onnx");
        let o = qdq(&["quantize", "--model", m.to_str().unwrap(), "--mode", "dynamic", "-o", q.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    assert_eq!(answers[0], answers[1]);
    let read = |p: &Path| std::fs::read(p).unwrap();
    assert_eq!(read(&f.model.with_extension("dynamic.onnx")), read(&ext.with_extension("dynamic.onnx")));
}

/// A model that embeds 64 positions, run without any window flag: the sequence length follows its position table and
/// the query length and window step shrink with it (each logged), where 384 / 64 / 128 would not fit; a query length
/// that does not fit is one error naming both flags.
#[test]
fn window_defaults_follow_a_short_position_table() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let base = ["eval", "--model", f.model.to_str().unwrap(), "--vocab", vocab.to_str().unwrap()];
    let base = [&base[..], &["--dataset", data.to_str().unwrap()]].concat();
    let o = qdq(&[&base[..], &["--json"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("the model embeds 64 positions") && err.contains("features of 64 tokens"), "{err}");
    assert!(err.contains("queries of at most 32 tokens") && err.contains("a step of 14 tokens"), "{err}");
    let defaults: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // The same features as the flags spelled out give.
    let spelled = qdq(&[&base[..], &["--json", "--seq-len", "64", "--query-len", "32", "--doc-stride", "14"]].concat());
    assert!(spelled.status.success(), "{}", stderr(&spelled));
    let spelled: serde_json::Value = serde_json::from_slice(&spelled.stdout).unwrap();
    let features = |v: &serde_json::Value| v["latency"]["features"].as_u64().unwrap();
    assert_eq!(features(&defaults), features(&spelled));
    assert!(features(&defaults) > defaults["questions"].as_u64().unwrap(), "overlapping windows: more features");
    assert_eq!(defaults["f1"].as_f64().unwrap(), spelled["f1"].as_f64().unwrap());
    let e = one_error(&qdq(&[&base[..], &["--query-len", "64"]].concat()));
    assert!(
        e.contains("--seq-len 64 leaves no room for --query-len 64") && e.contains("--query-len 60 or less"),
        "{e}"
    );
    let e = one_error(&qdq(&[&base[..], &["--seq-len", "4"]].concat()));
    assert!(e.contains("--seq-len 4 is too short"), "{e}");
    // The shortest sequence that holds a query and a context token runs with the defaults.
    let o = qdq(&[&base[..], &["--seq-len", "5"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
}
