//! The command line itself: options, config files, help, JSON documents, and the spellings every command shares.

use crate::common::*;

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
    assert!(results["result"].is_null() && !out.join("predictions_fp32.json").exists());

    std::fs::write(&cfg, "seq_lenn = 128\n").unwrap();
    let e = one_error(&qdq(&["e2e", "--config", cfg.to_str().unwrap()]));
    assert!(e.contains("run.toml") && e.contains("seq_lenn") && e.contains("seq-len"), "{e}");
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
    for default in [
        "Default: 64, or half the sequence length",
        "Default: 128, or half the window",
        "[default: 100; embeddings: 2000]",
    ] {
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
    // The same as a JSON document.
    let o = qdq(&["providers", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((v["schema"].as_str(), v["onnxruntime"].as_str()), (Some("qdq.providers/1"), Some("1.31.1")));
    assert!(v["providers"].as_array().unwrap().iter().any(|p| p == "CPUExecutionProvider"), "{v}");
    // The presets as JSON: each the policy a recipe writes, every option with what it takes.
    let o = qdq(&["quantize", "--list-policies", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["schema"], "qdq.policies/1");
    assert_eq!(v["presets"]["cpu"]["activations"], "uint8-asymmetric", "{v}");
    assert_eq!(v["presets"]["tensorrt"]["softmax_range"], "shifted", "{v}");
    let options = v["options"].as_array().unwrap();
    assert!(options.len() > 10 && options.iter().all(|o| o["key"].is_string() && o["values"].is_string()), "{v}");
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
    // Issue 52: how far the two halves' ranges lie apart, over every calibrated tensor, the largest named.
    let h = &c["halves"];
    assert_eq!(h["tensors"], c["tensors"], "{c}");
    let (median, max) = (h["median"].as_f64().unwrap(), h["max"].as_f64().unwrap());
    assert!(0.0 < median && median <= max && max < 10.0, "{h}");
    assert!(h["tensor"].as_str().is_some_and(|t| !t.is_empty()), "{h}");
    // And how far the channel maxima the smoothing factors come from move between them.
    let smoothing = c["smoothing"]["summary"].as_str().unwrap();
    assert!(smoothing.contains("channel maxima move") && smoothing.contains("% between the halves"), "{smoothing}");
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
    assert_eq!(c3["halves"]["tensors"], c["halves"]["tensors"], "{c3}");
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
    // Against the FP32 model on the same questions: both evaluated, the difference with its paired interval.
    let fp32 = f.model.to_str().unwrap();
    let b = json(
        &[
            &["eval", "--model", out.to_str().unwrap(), "--baseline", fp32][..],
            &["--vocab", vocab, "--dataset", data][..],
            &small,
        ]
        .concat(),
    );
    assert_eq!((&b["f1"], &b["baseline"]["model"].as_str()), (&e["f1"], &Some(fp32)), "{b}");
    let d = &b["vs_baseline"]["f1"];
    let delta = b["f1"].as_f64().unwrap() - b["baseline"]["f1"].as_f64().unwrap();
    assert!((d["delta"].as_f64().unwrap() - delta).abs() < 1e-9, "{b}");
    assert!(d["low"].as_f64().unwrap() <= delta && delta <= d["high"].as_f64().unwrap(), "{b}");
    assert_eq!(d["questions"], b["questions"], "{b}");
    assert!(b["vs_baseline"]["exact_match"]["se"].as_f64().is_some(), "{b}");
    let same = &b["vs_baseline"]["same_answers"];
    assert_eq!(same["questions"], b["questions"], "{b}");
    let (low, share, high) =
        (same["low"].as_f64().unwrap(), same["share"].as_f64().unwrap(), same["high"].as_f64().unwrap());
    assert!(low <= share && share <= high && high <= 1.0, "{b}");
    let i = json(&["inspect", out.to_str().unwrap()]);
    assert_eq!(i["schema"], "qdq.inspect/1");
    // e2e settles the method once it knows the task: a SQuAD model's is mse, which --percentile does not reach.
    let mut args = e2e_args(&f, "refused", vocab, data);
    args.extend(["--percentile".to_owned(), "99".to_owned()]);
    let o = run(&args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(one_error(&o).contains("--percentile 99 is an option of the percentile method, and this run computes mse"));
    assert!(!f.dir.path().join("refused").exists(), "nothing written on a usage error");
    let mut args = e2e_args(&f, "e2e", vocab, data);
    args.push("--json".into());
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["schema"], "qdq.e2e/2");
    assert!(
        r["result"]["int8"]["f1"].as_f64().is_some() && r["quantization"]["quantized_tensors"].as_u64().unwrap() > 0
    );
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

/// Issue 48: every command's `-h` fits a screen (at most 60 rows, none over 100 columns), one line per flag; every
/// command that reads a model takes it as `--model` (inspect also as before, positionally).
#[test]
fn every_short_help_fits_a_screen_and_every_command_takes_model() {
    for cmd in ["e2e", "calibrate", "quantize", "eval", "debug", "tune", "inspect", "providers"] {
        let o = qdq(&[cmd, "-h"]);
        assert!(o.status.success(), "{cmd}: {}", stderr(&o));
        let help = String::from_utf8_lossy(&o.stdout);
        let rows: Vec<&str> = help.lines().collect();
        assert!(rows.len() <= 60, "qdq {cmd} -h has {} rows:\n{help}", rows.len());
        let wide: Vec<&&str> = rows.iter().filter(|r| r.chars().count() > 100).collect();
        assert!(wide.is_empty(), "qdq {cmd} -h has lines over 100 columns: {wide:?}");
        // One line per flag: a line that continues a flag's help starts with spaces and no `-`.
        // A flag's line starts with `-`, a positional's with `[` or `<`.
        let flag = |r: &&str| r.trim_start().starts_with(['-', '[', '<']);
        let continued = rows.windows(2).filter(|w| flag(&w[0]) && w[1].starts_with("  ") && !flag(&w[1])).count();
        assert_eq!(continued, 0, "qdq {cmd} -h wraps a flag's help:\n{help}");
        let long = String::from_utf8_lossy(&qdq(&[cmd, "--help"]).stdout).into_owned();
        assert!(long.lines().all(|l| l.chars().count() <= 100), "qdq {cmd} --help is not wrapped");
        if cmd != "providers" {
            assert!(help.contains("--model <FILE>"), "qdq {cmd} takes no --model:\n{help}");
        }
    }
    let f = tiny();
    let model = f.model.to_str().unwrap();
    let (a, b) = (qdq(&["inspect", model]), qdq(&["inspect", "--model", model]));
    assert!(a.status.success() && b.status.success(), "{}", stderr(&b));
    assert_eq!(a.stdout, b.stdout);
}

/// Issue 48: a spelling renamed in this release still works as before, and says once that it is deprecated and what
/// replaces it; the new spelling says nothing.
#[test]
fn renamed_spellings_still_work_and_say_so_once() {
    let f = tiny();
    let model = f.model.to_str().unwrap();
    let (old, new) = (qdq(&["inspect", model, "--ranges"]), qdq(&["inspect", model, "--pairs"]));
    assert!(old.status.success(), "{}", stderr(&old));
    assert_eq!(old.stdout, new.stdout);
    let warnings: Vec<String> = stderr(&old).lines().filter(|l| l.contains("deprecated")).map(str::to_owned).collect();
    assert_eq!(warnings, ["qdq: warning: --ranges is deprecated and goes in the next release: use --pairs"]);
    assert!(!stderr(&new).contains("deprecated"));
    // A file-taking one, through a config file too (its keys are the options' spellings).
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let preds = f.dir.path().join("p.json");
    let cfg = f.dir.path().join("eval.toml");
    std::fs::write(&cfg, format!("predictions = {:?}\n", preds.to_str().unwrap())).unwrap();
    let args = ["eval", "--model", model, "--vocab", vocab.to_str().unwrap(), "--dataset", data.to_str().unwrap()];
    let o = qdq(&[&args[..], &TINY_SHAPE, &["--samples", "2", "--config", cfg.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("--predictions is deprecated and goes in the next release: use --out"));
    assert!(std::fs::read_to_string(&preds).unwrap().starts_with('{'));
}

/// Issue 48: a value a flag does not take, or settings that do not go together, are usage errors (exit 2) naming
/// the valid values, before any work: the preset of every command that places pairs, a policy option, a recipe with
/// policy flags, a method option no method reads.
#[test]
fn bad_settings_are_usage_errors_listing_what_is_valid() {
    let f = tiny();
    let model = f.model.to_str().unwrap();
    for cmd in ["e2e", "calibrate", "quantize", "tune"] {
        let o = qdq(&[cmd, "--model", model, "--policy", "tensor-rt"]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {e}");
        assert!(
            e.contains("'tensor-rt'")
                && e.contains("[possible values: ort-compatible, tensorrt, migraphx, cpu, qnn, openvino]"),
            "{e}"
        );
    }
    let o = qdq(&["quantize", "--recipe", "r.toml", "--policy", "cpu", "-o", "q.onnx"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--recipe") && stderr(&o).contains("--policy"), "{}", stderr(&o));
    // Found by the pipeline, not by the flag's parser: still a usage error.
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let out = f.dir.path().join("cal");
    let args = ["calibrate", "--model", model, "--vocab", vocab.to_str().unwrap(), "--calibration-data"];
    let more = [data.to_str().unwrap(), "--percentile", "99.9", "--out", out.to_str().unwrap()];
    let o = qdq(&[&args[..], &more].concat());
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(one_error(&o).contains("--percentile 99.9 is an option of the percentile method"));
    assert!(!out.exists(), "nothing written on a usage error");
}

/// Issue 48: a recipe of `qdq tune` given where a settings file goes is named as such, with the flag that replays it.
#[test]
fn a_recipe_given_as_a_config_file_says_how_to_replay_it() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = dir.path().join("recipe.toml");
    std::fs::write(&recipe, "model = \"m.onnx\"\nranges = \"r.json\"\n[policy]\npreset = \"cpu\"\n").unwrap();
    let o = qdq(&["quantize", "--config", recipe.to_str().unwrap(), "-o", "q.onnx"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("is a recipe of qdq tune") && stderr(&o).contains("qdq quantize --recipe"),
        "{}",
        stderr(&o)
    );
}

/// `--version` without a value after a command is qdq's version, as before the command (it was read as
/// `--squad-version` and failed for want of a value); with a value it stays the seed scripts' `--squad-version`.
#[test]
fn version_after_a_command_is_qdqs_version() {
    let top = qdq(&["--version"]);
    assert!(top.status.success(), "{}", stderr(&top));
    let version = String::from_utf8_lossy(&top.stdout).into_owned();
    assert!(version.starts_with("qdq 0.") && version.contains("commit"), "{version}");
    for cmd in ["e2e", "eval", "quantize"] {
        let o = qdq(&[cmd, "--version"]);
        assert!(o.status.success(), "{cmd}: {}", stderr(&o));
        assert_eq!(String::from_utf8_lossy(&o.stdout), version, "{cmd}");
    }
    // With a value: the SQuAD version, checked as such (no model given: the error is about the missing flag).
    let o = qdq(&["eval", "--version", "2.0", "--dataset", "d.json"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("required arguments were not provided:\n  --model"), "{}", stderr(&o));
    let o = qdq(&["eval", "--version", "3.0", "--model", "m.onnx", "--dataset", "d.json"]);
    assert!(!o.status.success() && stderr(&o).contains("3.0"), "{}", stderr(&o));
}

/// Issue 50: `--cal-num 0` is documented as every question, and a run says it takes them all (it did so silently).
#[test]
fn cal_num_zero_is_every_question_and_says_so() {
    let help = String::from_utf8_lossy(&qdq(&["calibrate", "--help"]).stdout).into_owned();
    assert!(help.contains("0 = all"), "{help}");
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let out = f.dir.path().join("cal");
    let (model, out) = (f.model.to_str().unwrap(), out.to_str().unwrap());
    let args = ["calibrate", "--model", model, "--vocab", vocab.to_str().unwrap(), "--out", out, "--cal-num", "0"];
    let o = qdq(&[&args[..], &["--calibration-data", data.to_str().unwrap()], &TINY_SHAPE[..]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("--cal-num 0: calibrating on all 9 questions of"), "{}", stderr(&o));
}
