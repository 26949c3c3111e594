//! `qdq tune` and `qdq debug`: the curve, the screen, the all-integer candidate, planted bad ranges, recipes.

use std::path::{Path, PathBuf};

use onnx_ir::tiny_bert::TinyBertConfig;

use crate::common::*;

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
    // Each candidate's dF1 comes with its standard error and its 95 % interval over the questions scored.
    assert!(curve.iter().all(|c| c["delta_f1_se"].as_f64().is_some_and(|se| se >= 0.0)), "{report:#}");
    for c in curve {
        let (d, i) = (c["delta_f1"].as_f64().unwrap(), &c["delta_f1_interval"]);
        assert!(i[0].as_f64().unwrap() <= d && d <= i[1].as_f64().unwrap(), "{c}");
    }
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
    let o = qdq(&["quantize", "--recipe", recipe.to_str().unwrap(), "-o", replay.to_str().unwrap()]);
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
    // A screened candidate's dF1 is an estimate without an interval; the chosen one's has its interval.
    assert!(md.contains("(screen estimate)") && md.contains("dF1 [95 %]"), "{md}");
    for (i, c) in curve.iter().enumerate() {
        assert_eq!(c["screen_only"], i != chosen, "{i}: {report:#}");
    }
    assert_markdown_tables(&md);
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
    let o = qdq(&["quantize", "--recipe", recipe.to_str().unwrap(), "-o", replay.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read(&replay).unwrap() == std::fs::read(out.join("model_qdq.onnx")).unwrap());
    // Either way the all-integer model is on disk to compare with.
    assert!(out.join("candidates/model_qdq_float0_all_integer.onnx").is_file());
}

/// The policy the planted-range tests quantize with.
const PLANT_POLICY: [&str; 4] = ["--policy", "tensorrt", "--policy-option", "smooth=off"];

/// Calibrates the tiny model into `cal/` with [`PLANT_POLICY`]: the table's path and its JSON.
fn calibrate_to_plant(f: &Fixture, vocab: &str, dataset: &str, extra: &[&str]) -> (PathBuf, serde_json::Value) {
    let mut args = e2e_args(f, "cal", vocab, dataset);
    args.extend(PLANT_POLICY.iter().chain(&["--no-eval"]).chain(extra).map(|s| s.to_string()));
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
    let f = fixture(TinyBertConfig { vocab_size: 1000, max_positions: 64, ..Default::default() });
    let (vocab, dataset) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let (vocab, dataset) = (vocab.to_str().unwrap(), dataset.to_str().unwrap());
    let policy = PLANT_POLICY;
    let (_, mut ranges) = calibrate_to_plant(&f, vocab, dataset, &["--force"]);
    let planted_tensor = plant(&mut ranges);
    let planted = f.dir.path().join("planted.json");
    std::fs::write(&planted, serde_json::to_vec(&ranges).unwrap()).unwrap();
    let (model, planted) = (f.model.to_str().unwrap(), planted.to_str().unwrap());
    let data = ["--vocab", vocab, "--dataset", dataset, "--seq-len", "64", "--query-len", "16", "--doc-stride", "24"];
    // The model the planting was designed on: a 1,000-row embedding, which the 800-token vocabulary indexes.
    let data = [&data[..], &["--force"]].concat();

    let bad = f.dir.path().join("planted_qdq.onnx");
    let mut q = vec!["quantize", "--model", model, "--ranges", planted, "-o", bad.to_str().unwrap()];
    q.extend(policy);
    let o = qdq(&q);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut d = vec!["debug", "--model", model, "--qdq", bad.to_str().unwrap(), "--held-out", "4", "--json"];
    d.extend(data.iter().copied());
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
    t.extend(data.iter().copied());
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

/// The tiny model calibrated and quantized with [`PLANT_POLICY`]: int8.onnx's path.
fn quantize_to_plant(f: &Fixture, vocab: &str, dataset: &str) -> PathBuf {
    let (table, _) = calibrate_to_plant(f, vocab, dataset, &[]);
    let int8 = f.dir.path().join("int8.onnx");
    let model = f.model.to_str().unwrap();
    let mut q = vec!["quantize", "--model", model, "--ranges", table.to_str().unwrap(), "-o", int8.to_str().unwrap()];
    q.extend(PLANT_POLICY);
    let o = qdq(&q);
    assert!(o.status.success(), "{}", stderr(&o));
    int8
}

/// Issue 14: `qdq debug --sensitivity --confirm N` scores FP32, the QDQ model and the QDQ model with each of the N most
/// recovering nodes in float on the first evaluation questions: FP32's and the QDQ model's F1 are what `qdq eval` says
/// of the same files and questions, and exactly the first N nodes carry the F1 they recover.
#[test]
fn debug_confirm_scores_the_top_nodes_and_agrees_with_eval() {
    let f = tiny();
    let (vocab, dataset) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let (vocab, dataset) = (vocab.to_str().unwrap(), dataset.to_str().unwrap());
    let (model, int8) = (f.model.to_str().unwrap(), quantize_to_plant(&f, vocab, dataset));
    let data = ["--vocab", vocab, "--dataset", dataset, "--seq-len", "64", "--query-len", "16", "--doc-stride", "24"];
    let int8 = int8.to_str().unwrap();
    let mut d = vec!["debug", "--model", model, "--qdq", int8, "--held-out", "3", "--sensitivity", "--json"];
    d.extend(["--confirm", "3", "--samples", "5"]);
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
    // Each effect comes with its 95 % interval, which holds it; the effects outside their noise are those whose
    // interval leaves out 0.
    let interval =
        |n: &serde_json::Value| (n["f1_interval"][0].as_f64().unwrap(), n["f1_interval"][1].as_f64().unwrap());
    for n in &nodes[..3] {
        let ((low, high), d) = (interval(n), n["f1_recovered"].as_f64().unwrap());
        assert!(low <= d && d <= high, "{n}");
    }
    assert!(nodes[3..].iter().all(|n| n["f1_interval"].is_null()), "{report:#}");
    let outside = nodes[..3].iter().map(interval).filter(|&(low, high)| low > 0.0 || high < 0.0).count();
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
    let (table, mut ranges) = calibrate_to_plant(&f, vocab, dataset, &[]);
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

/// Node names are optional in ONNX and other tools' QDQ models may lack or repeat them: `qdq debug` gives every node
/// a name of its own before it takes pairs out and ranks nodes, so a model without node names is explained as its
/// named form is (the same pairs, one sensitivity entry per node, each under a name of its own).
#[test]
fn debug_explains_a_model_whose_nodes_have_no_names() {
    let f = tiny();
    let (vocab, dataset) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let (vocab, dataset) = (vocab.to_str().unwrap(), dataset.to_str().unwrap());
    let (model, int8) = (f.model.to_str().unwrap(), quantize_to_plant(&f, vocab, dataset));
    let unnamed = f.dir.path().join("unnamed.onnx");
    let mut m = onnx_ir::Model::load(&int8).unwrap();
    for n in &mut m.graph_mut().node {
        n.name = Some(String::new());
    }
    m.save(&unnamed).unwrap();
    let report = |qdq_model: &std::path::Path| {
        let mut d = vec!["debug", "--model", model, "--qdq", qdq_model.to_str().unwrap(), "--held-out", "3"];
        d.extend(["--sensitivity", "--json", "--vocab", vocab, "--dataset", dataset]);
        d.extend(TINY_SHAPE);
        let o = qdq(&d);
        assert!(o.status.success(), "{}: {}", qdq_model.display(), stderr(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let (named, bare) = (report(&int8), report(&unnamed));
    let tensors = |r: &serde_json::Value| -> Vec<String> {
        r["tensors"].as_array().unwrap().iter().map(|t| t["tensor"].as_str().unwrap().to_owned()).collect()
    };
    let (mut a, mut b) = (tensors(&named), tensors(&bare));
    a.sort();
    b.sort();
    assert!(!a.is_empty());
    assert_eq!(a, b, "the same pairs measured");
    assert_eq!(named["logits"], bare["logits"]);
    let nodes: Vec<&str> =
        bare["sensitivity"].as_array().unwrap().iter().map(|n| n["node"].as_str().unwrap()).collect();
    assert_eq!(nodes.len(), named["sensitivity"].as_array().unwrap().len(), "{nodes:?}");
    let unique: std::collections::HashSet<&&str> = nodes.iter().collect();
    assert!(nodes.iter().all(|n| !n.is_empty()) && unique.len() == nodes.len(), "{nodes:?}");
}

/// Issue 68: `--min-same` is a budget too: with a generous F1 budget the preset (or its all-integer form) is chosen,
/// unless it must also answer more questions as FP32 does than it can (101 % is refused as no share at all; 100 % is
/// met by no quantized candidate on these questions unless every answer stays), and the report says which was asked.
#[test]
fn tune_takes_a_budget_of_answers_identical_to_fp32s() {
    let f = tiny();
    let within = tune_tiny(&f, &f.dir.path().join("f1"), &["--budget", "100", "--max-float", "1"]);
    // The preset, or its all-integer form where timing put that at most 2 % slower (whichever way the timing went).
    let faster = within["curve"].as_array().unwrap().len() == 2;
    let chosen = (within["within_budget"].as_bool(), within["chosen"].as_u64());
    assert_eq!(chosen, (Some(true), Some(u64::from(faster))), "{within:#}");
    assert!(within.get("min_same_answers").is_none(), "{within:#}");
    let asked =
        tune_tiny(&f, &f.dir.path().join("same"), &["--budget", "100", "--max-float", "1", "--min-same", "100"]);
    assert_eq!(asked["min_same_answers"].as_f64(), Some(1.0), "{asked:#}");
    let curve = asked["curve"].as_array().unwrap();
    let all_same = |c: &serde_json::Value| c["same_answers"]["share"].as_f64() == Some(1.0);
    assert_eq!(asked["within_budget"].as_bool(), Some(curve.iter().any(all_same)), "{asked:#}");
    let model = f.model.to_str().unwrap();
    let bad = qdq(&["tune", "--model", model, "--dataset", "x.json", "--min-same", "101"]);
    assert!(one_error(&bad).contains("--min-same must be a share in per cent"), "{}", stderr(&bad));
}
