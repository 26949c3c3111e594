//! `qdq calibrate` and `qdq quantize`: every table format, dry runs, dynamic mode, merged and smoothed states.

use std::path::Path;

use onnx_ir::GraphExt;
use onnx_ir::tiny_bert::{TinyBertConfig, build};

use crate::common::*;

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

/// `quantize` without `--output` (and without `--dry-run`) says so before reading anything: the model and the table
/// named here do not exist, and the error is about the missing output, not them.
#[test]
fn quantize_without_an_output_fails_before_any_work() {
    let o = qdq(&["quantize", "--model", "absent.onnx", "--ranges", "absent.json"]);
    let e = one_error(&o);
    assert!(e.contains("--out") && !e.contains("absent"), "{e}");
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
        // One session: its two halves each see enough values for the tails to be kept alone.
        let nearest = [
            "--cal-workers",
            "1",
            "--policy-option",
            "weight_rounding=nearest",
            "--policy-option",
            "outlier_channels=off",
        ];
        let unsmoothed = ["--policy-option", "smooth=off", "--out", dir.to_str().unwrap()];
        qdq(&[&base[..], &TINY_SHAPE, &nearest, &unsmoothed, extra].concat())
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
    // Each run would round the weights against its own inputs (the `cpu` preset's GPTQ): refused with the way out.
    let gptq = ["--policy-option", "weight_rounding=gptq", "--merge", merge.to_str().unwrap()];
    let e = one_error(&calibrate("gptq", &gptq));
    assert!(e.contains("--merge") && e.contains("GPTQ") && e.contains("weight_rounding=nearest"), "{e}");
    let o = calibrate("whole", &[&wider[..], &["--merge", merge.to_str().unwrap()]].concat());
    let e = one_error(&o);
    assert!(e.contains("counted only together") && e.contains("--compare-methods distribution"), "{e}");
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
    // The preset rounds weights by GPTQ: the one reading the NaN tensor (the QA head) is rounded to nearest, said.
    assert!(err.lines().any(|l| l.contains("not by GPTQ") && l.contains("qa_outputs")), "{err}");
    let out = dir.path().join("q.onnx");
    let q = qdq(&[
        "quantize",
        "--model",
        cal.join("model_rounded.onnx").to_str().unwrap(),
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

/// Issue 52: `weight_rounding = gptq` rounds the weights in calibration's own pass (here without smoothing: the model
/// goes to model_rounded.onnx, recording it), `quantize` takes that model with the tables and refuses the original
/// one under the same policy, saying which model to pass.
#[test]
fn gptq_rounded_weights_travel_with_their_tables_and_the_original_model_is_refused() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let (model, vocab, data) = (f.model.to_str().unwrap(), vocab.to_str().unwrap(), data.to_str().unwrap());
    let cal = f.dir.path().join("cal");
    let gptq = ["--policy-option", "smooth=off", "--policy-option", "weight_rounding=gptq"];
    let args = ["calibrate", "--model", model, "--vocab", vocab, "--calibration-data", data, "--batch", "2"];
    let o = qdq(&[&args[..], &TINY_SHAPE, &gptq, &["--out", cal.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("rounded by GPTQ") && stdout.contains("model_rounded.onnx"), "{stdout}");
    assert!(!cal.join("model_smoothed.onnx").exists());
    let rounded = onnx_ir::Model::load(cal.join("model_rounded.onnx")).unwrap();
    assert!(qdq::rounding_record(&rounded).is_some_and(|r| r.starts_with("gptq; weights=")), "no record");
    let original = onnx_ir::Model::load(&f.model).unwrap();
    let weight = "bert.encoder.layer.0.intermediate.dense.weight";
    let values = |m: &onnx_ir::Model| onnx_ir::tensor_to_array::<f32>(m.graph().initializer(weight).unwrap()).unwrap();
    assert_ne!(values(&rounded), values(&original), "{weight} was not rounded");
    let quantize = |m: &str| {
        let out = f.dir.path().join("q.onnx");
        let ranges = cal.join("calibration.json");
        let args = ["quantize", "--model", m, "--ranges", ranges.to_str().unwrap(), "-o", out.to_str().unwrap()];
        qdq(&[&args[..], &gptq].concat())
    };
    let e = one_error(&quantize(model));
    assert!(e.contains("GPTQ") && e.contains("model_rounded.onnx") && e.contains("weight_rounding=nearest"), "{e}");
    let o = quantize(cal.join("model_rounded.onnx").to_str().unwrap());
    assert!(o.status.success(), "{}", stderr(&o));
}

/// A model whose nodes have no names (optional in ONNX) is quantized with a name for each, made from its op and
/// position the same way on every run, so that exclusions (and tune's recipes, which name nodes) hold one node each.
#[test]
fn unnamed_nodes_get_names_that_exclusions_hold_to() {
    let f = tiny();
    let mut m = onnx_ir::Model::load(&f.model).unwrap();
    for n in &mut m.graph_mut().node {
        n.name = Some(String::new());
    }
    let unnamed = f.dir.path().join("unnamed.onnx");
    m.save(&unnamed).unwrap();
    // The name a weight MatMul gets: the same function names them in the run.
    let mut named = m.clone();
    named.graph_mut().name_nodes();
    let g = named.graph();
    let matmul = g.node.iter().find(|n| n.op_type() == "MatMul" && g.is_initializer(&n.input[1]));
    let matmul = matmul.unwrap().name().to_owned();
    let out = f.dir.path().join("dynamic.onnx");
    let run = |extra: &[&str]| {
        let args = ["quantize", "--model", unnamed.to_str().unwrap(), "--mode", "dynamic", "-o", out.to_str().unwrap()];
        let o = qdq(&[&args[..], extra].concat());
        assert!(o.status.success(), "{}", stderr(&o));
        let q = onnx_ir::Model::load(&out).unwrap();
        let names: Vec<String> = q.graph().node.iter().map(|n| n.name().to_owned()).collect();
        let unique: std::collections::HashSet<&String> = names.iter().collect();
        assert!(names.iter().all(|n| !n.is_empty()) && unique.len() == names.len(), "{names:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let layers = TinyBertConfig::default().layers;
    let text = run(&[]);
    assert!(text.contains(&format!("{} MatMul-like nodes left in float", 2 * layers)), "{text}");
    let text = run(&["--exclude-node", &matmul]);
    assert!(text.contains(&format!("{} MatMul-like nodes left in float", 2 * layers + 1)), "{text}");
    assert!(text.contains(&matmul), "{text}");
}

/// `outlier_channels`: calibrate splits the inputs' outlier channels off in the model it writes (and says so), the
/// rest each MatMul reads takes its observed min/max whatever the method, `quantize` takes that model with the
/// tables, and refuses the original model with the way out.
#[test]
fn calibrate_splits_outlier_channels_and_quantize_needs_the_split_model() {
    let f = tiny();
    let (vocab, data) = (testdata("squad/vocab.txt"), testdata("squad/tiny-v1.1.json"));
    let cal = f.dir.path().join("cal");
    // No smoothing and round-to-nearest, so that the outlier split alone makes the written model differ.
    let policy = ["--policy", "cpu", "--policy-option", "smooth=off", "--policy-option", "weight_rounding=nearest"];
    let split = ["--policy-option", "outlier_channels=1.5"];
    let (model, vocab, data) = (f.model.to_str().unwrap(), vocab.to_str().unwrap(), data.to_str().unwrap());
    let small = ["--seq-len", "64", "--query-len", "16", "--doc-stride", "24"];
    let args = ["calibrate", "--model", model, "--vocab", vocab, "--calibration-data", data];
    let tail = ["--compare-methods", "minmax", "--out", cal.to_str().unwrap()];
    let o = qdq(&[&args[..], &small, &policy, &split, &tail].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let said = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(said.contains("outlier channel") && said.contains("carried in float"), "{said}");
    let written = onnx_ir::Model::load(cal.join("model_smoothed.onnx")).unwrap();
    assert!(qdq::outlier_record(&written).is_some());
    let rests = qdq::outlier_rests(&written);
    assert!(!rests.is_empty(), "a ratio of 1.5 finds outlier channels in the tiny BERT");
    let table =
        |file: &str| -> serde_json::Value { serde_json::from_slice(&std::fs::read(cal.join(file)).unwrap()).unwrap() };
    let (mse, minmax) = (table("calibration.json"), table("calibration_minmax.json"));
    for r in &rests {
        assert_eq!(mse["chosen"][r], "minmax", "{r}: {mse:#}");
        assert_eq!(mse["ranges"][r], minmax["ranges"][r], "{r}");
    }
    let ranges = cal.join("calibration.json");
    let quantize = |m: &str| {
        let q = ["quantize", "--model", m, "--ranges", ranges.to_str().unwrap(), "--dry-run"];
        qdq(&[&q[..], &policy, &split].concat())
    };
    let o = quantize(cal.join("model_smoothed.onnx").to_str().unwrap());
    assert!(o.status.success(), "{}", stderr(&o));
    let e = one_error(&quantize(model));
    assert!(e.contains("outlier_channels") && e.contains("model_smoothed.onnx"), "{e}");
}
