//! One clear error line for each kind of bad input, before any work, and only whole outputs after a stop.

use std::process::Command;

use onnx_ir::tiny_bert::TinyBertConfig;

use crate::common::*;

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
    assert!(e.contains("tiny.onnx") && e.contains("not text") && e.contains("line 1, column"), "{e}");
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
    // So is an unknown policy option or preset: the valid ones listed.
    let mut args = e2e_args(&f, "o7", vocab, data);
    args.extend(["--policy-option".into(), "residual_adds=skip".into()]);
    let o = run(&args);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("residual_adds") && e.contains("valid options: op_types") && e.contains("residual_add,"), "{e}");
    let mut args = e2e_args(&f, "o7", vocab, data);
    args.extend(["--policy".into(), "tensor-rt".into()]);
    let o = run(&args);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("tensor-rt") && e.contains("ort-compatible, tensorrt, migraphx, cpu, qnn"), "{e}");

    // Nothing was written for any of them.
    for o in ["o1", "o2", "o3", "o4", "o5", "o6", "o7", "o8", "o9", "o10"] {
        assert!(!f.dir.path().join(o).join("calibration.json").exists(), "{o}");
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
    let o = qdq(&[&args[..], &["--dataset", data.to_str().unwrap(), "--out", preds.to_str().unwrap()]].concat());
    let e = one_error(&o);
    assert!(e.contains("--out") && e.contains("does not exist"), "{e}");
    assert!(!stderr(&o).contains("evaluating"), "{}", stderr(&o));
    assert!(!missing.exists());
    let out = missing.join("q.onnx");
    let o = qdq(&["quantize", "--model", f.model.to_str().unwrap(), "--mode", "dynamic", "-o", out.to_str().unwrap()]);
    let e = one_error(&o);
    assert!(e.contains("--out") && e.contains("does not exist"), "{e}");
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
        vec!["tune", "--model", model, "--dataset", data, "--calibration-data", data, "--out", out.to_str().unwrap()],
    ] {
        let o = qdq(&cmd);
        let e = one_error(&o);
        assert!(e.contains("--out") && e.contains("a_file"), "{e}");
        assert!(!stderr(&o).contains("INFO"), "{}", stderr(&o));
    }
    // tune without data to calibrate on is told what it needs, by its own name (it said `qdq calibrate needs`).
    let e = one_error(&qdq(&["tune", "--model", model, "--dataset", data, "--out", out.to_str().unwrap()]));
    assert!(e.contains("qdq tune needs --calibration-data FILE") && e.contains("--ranges"), "{e}");
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
        "vocab.txt",
        "INCOMPLETE",
    ];
    // The signals go at points spread over one whole run's duration, measured here (a fixed delay is past the end
    // on a fast machine: the whole run takes about 150 ms on the CI host).
    // The faster of two whole runs: the first pays for loading ONNX Runtime from a cold disk cache.
    let mut run_ms = f64::INFINITY;
    for whole in ["whole", "whole_again"] {
        let started = std::time::Instant::now();
        let o = run(&e2e_args(&f, whole, vocab.to_str().unwrap(), data.to_str().unwrap()));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        run_ms = run_ms.min(started.elapsed().as_secs_f64() * 1e3);
    }
    let mut stopped_early = 0;
    for (k, (signal, at)) in [("INT", 0.05), ("TERM", 0.2), ("KILL", 0.35), ("INT", 0.5), ("TERM", 0.7), ("KILL", 1.5)]
        .into_iter()
        .enumerate()
    {
        let delay_ms = (at * run_ms) as u64;
        let out = format!("out_{k}");
        let args = e2e_args(&f, &out, vocab.to_str().unwrap(), data.to_str().unwrap());
        let child = signals_at_default(Command::new(env!("CARGO_BIN_EXE_qdq")).args(&args))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let sent = Command::new("kill").args(["-s", signal, &child.id().to_string()]).status().unwrap();
        let o = child.wait_with_output().unwrap();
        let dir = f.dir.path().join(&out);
        // A signal after the run removed its marker (report.md, its last output, written; the process ending) stops
        // nothing.
        let finished = dir.join("report.md").is_file() && !dir.join("INCOMPLETE").exists();
        if sent.success() && !o.status.success() && !finished {
            stopped_early += 1;
            // A stopped run's directory is marked unfinished (or gone, when it held nothing yet); INT and TERM say
            // one line about it.
            assert!(!dir.exists() || dir.join("INCOMPLETE").is_file(), "SIG{signal} after {delay_ms} ms: no marker");
            // (A signal in the first milliseconds, before qdq installs its handler, ends it silently; the handler
            // is installed before --out is opened, so a directory there means it ran.)
            let said = String::from_utf8_lossy(&o.stderr);
            let line = said.lines().find(|l| l.starts_with("qdq: interrupted"));
            if signal == "KILL" {
                assert!(line.is_none(), "{said}");
            } else if dir.exists() {
                assert!(line.is_some(), "SIG{signal} after {delay_ms} ms: {said}");
            }
        } else {
            assert!(!dir.join("INCOMPLETE").exists(), "a finished run leaves no marker");
        }
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

/// Issue 50: Ctrl-C in the middle of a run says one line, and the output directory says it is not a whole run; the
/// files written so far stay whole.
#[cfg(unix)]
#[test]
fn an_interrupted_run_says_so_and_marks_its_outputs() {
    let f = tiny();
    let vocab = testdata("squad/vocab.txt");
    // Enough questions that evaluation takes a while after the model is written: the signal lands there.
    let data = f.dir.path().join("many.json");
    std::fs::write(&data, serde_json::to_vec(&many_questions(200)).unwrap()).unwrap();
    let mut args = e2e_args(&f, "out", vocab.to_str().unwrap(), data.to_str().unwrap());
    args.extend(["--samples", "0"].map(String::from));
    let out = f.dir.path().join("out");
    let mut child = signals_at_default(Command::new(env!("CARGO_BIN_EXE_qdq")).args(&args))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while !out.join("model_qdq.onnx").exists() {
        assert!(t.elapsed().as_secs() < 120 && child.try_wait().unwrap().is_none(), "no model written");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    assert!(!o.status.success(), "the run should still be evaluating");
    let said = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = said.lines().filter(|l| l.contains("interrupted")).collect();
    assert_eq!(lines.len(), 1, "{said}");
    assert!(lines[0].starts_with("qdq: interrupted: ") && lines[0].contains("unfinished run"), "{said}");
    let marker = std::fs::read_to_string(out.join("INCOMPLETE")).unwrap();
    assert!(marker.contains("qdq e2e") && marker.contains("not a whole run"), "{marker}");
    assert!(onnx_ir::Model::load(out.join("model_qdq.onnx")).is_ok());
    assert!(!out.join("results.json").exists());
}

/// Issue 50: an error before any output is written leaves no --out behind (it was left empty); an --out that cannot
/// be written fails before any work (it failed after calibrating); a directory as an input file is called one.
#[test]
fn early_errors_leave_no_output_directory() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let (vocab, data) = (vocab.to_str().unwrap(), data.to_str().unwrap());
    let model = f.model.to_str().unwrap();
    let missing = f.dir.path().join("missing.json");
    let out = f.dir.path().join("new/out");
    for (cmd, dataset_flag) in [("e2e", "--dataset"), ("calibrate", "--calibration-data"), ("tune", "--dataset")] {
        let mut args = vec![cmd, "--model", model, "--vocab", vocab, dataset_flag, missing.to_str().unwrap()];
        args.extend(["--calibration-data", missing.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        let e = one_error(&qdq(&args));
        assert!(e.contains("missing.json"), "{cmd}: {e}");
        assert!(!f.dir.path().join("new").exists(), "{cmd} left {}", out.display());
    }
    // An existing directory keeps what it held, and gets no marker.
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("results.json"), "{}").unwrap();
    let args = ["e2e", "--model", model, "--vocab", vocab, "--dataset", missing.to_str().unwrap(), "--out"];
    one_error(&qdq(&[&args[..], &[out.to_str().unwrap()]].concat()));
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);
    // Nothing can be written under /proc/self, even by root: refused before calibrating.
    let mut args = e2e_args(&f, "unused", vocab, data);
    let at = args.iter().position(|a| a == "--out").unwrap();
    args[at + 1] = "/proc/self".into();
    let o = run(&args);
    let e = one_error(&o);
    assert!(e.contains("/proc/self") && e.contains("--out"), "{e}");
    assert!(!stderr(&o).contains("calibrating"), "{}", stderr(&o));
    // A directory where a file is read.
    let args = ["eval", "--model", model, "--vocab", vocab, "--dataset", f.dir.path().to_str().unwrap()];
    let e = one_error(&qdq(&args));
    assert!(e.contains("a directory, not a regular file"), "{e}");
}

/// Issue 50: a vocabulary much smaller than the model's word embedding (another model's) is an error naming both
/// sizes (it warned twice and scored F1 near 0); --force runs with it, warning once.
#[test]
fn a_vocabulary_far_smaller_than_the_embedding_is_refused_unless_forced() {
    let f = fixture(TinyBertConfig { vocab_size: 5000, max_positions: 64, ..Default::default() });
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let args = e2e_args(&f, "out", vocab.to_str().unwrap(), data.to_str().unwrap());
    let o = run(&args);
    let e = one_error(&o);
    assert!(e.contains("vocab.txt") && e.contains("800 token ids") && e.contains("embeds 5000"), "{e}");
    assert!(e.contains("--force"), "{e}");
    assert!(!f.dir.path().join("out").exists());
    let o = run(&[&args[..], &["--force".to_owned()]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let warnings = stderr(&o).lines().filter(|l| l.contains("embeds 5000")).count();
    assert_eq!(warnings, 1, "{}", stderr(&o));
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

/// `command` with SIGINT and SIGTERM at their defaults in the child: a test run as a background job of a script
/// inherits them ignored, and qdq rightly keeps a signal ignored that it started with ignored.
#[cfg(unix)]
fn signals_at_default(command: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: between fork and exec only `signal`, which is async-signal-safe, runs.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            Ok(())
        })
    }
}

/// The tiny SQuAD file's questions `times` over, each copy with its own ids.
fn many_questions(times: usize) -> serde_json::Value {
    let tiny: serde_json::Value =
        serde_json::from_slice(&std::fs::read(testdata("squad/tiny-v1.1.json")).unwrap()).unwrap();
    let mut data = Vec::new();
    for k in 0..times {
        let mut copy = tiny["data"].clone();
        for article in copy.as_array_mut().unwrap() {
            for p in article["paragraphs"].as_array_mut().unwrap() {
                for q in p["qas"].as_array_mut().unwrap() {
                    q["id"] = format!("{}-{k}", q["id"].as_str().unwrap()).into();
                }
            }
        }
        data.extend(copy.as_array().unwrap().iter().cloned());
    }
    serde_json::json!({ "version": "1.1", "data": data })
}
