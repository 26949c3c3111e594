//! `--ep qnn`: Qualcomm's QNN plugin (provisioned by `cargo xtask test`; on x86-64 its HTP backend is emulated) through
//! the binary: found and listed, a float model run once the SoC is known, a dynamic model run whole with its dimensions
//! fixed by name and its features padded (giving the CPU EP's answers), and `qdq e2e --ep qnn` with its own preset.

use ndarray::{ArrayD, IxDyn};
use onnx_ir::proto::GraphProto;
use onnx_ir::tiny_bert::TinyBertConfig;
use onnx_ir::{DataType, GraphExt as _, array_to_tensor, attr_int, node, value_info};

use crate::common::*;

/// `--ep qnn` (Qualcomm's QNN plugin, provisioned by `cargo xtask test`): `qdq providers` lists its device; a float
/// model runs whole on the emulated HTP (in fp16) once it knows the SoC, which qdq names unless `--qnn-option
/// soc_model` does; without one (`soc_model=0`) the graph fails to finalize, one error saying what to set; its options
/// are checked as they are read.
#[test]
fn qnn_is_found_and_a_float_model_runs_once_the_soc_is_known() {
    let providers = qdq(&["providers", "--json"]);
    assert!(providers.status.success(), "{}", stderr(&providers));
    let v: serde_json::Value = serde_json::from_slice(&providers.stdout).unwrap();
    let devices = v["devices"].as_array().unwrap();
    assert!(devices.iter().any(|d| d["ep"] == "QNNExecutionProvider"), "{v}");
    let f = fixture(TinyBertConfig::default());
    let (squad, vocab) = (testdata("squad/tiny-v1.1.json"), testdata("squad/vocab.txt"));
    let (m, s, v) = (f.model.to_str().unwrap(), squad.to_str().unwrap(), vocab.to_str().unwrap());
    let args = ["eval", "--model", m, "--dataset", s, "--vocab", v, "--ep", "qnn", "--seq-len", "32", "--qnn-option"];
    let ran = qdq(&[&args[..], &["htp_performance_mode=burst"]].concat());
    assert!(ran.status.success(), "{}", stderr(&ran));
    assert!(String::from_utf8_lossy(&ran.stdout).contains("on 9 questions (0 missing)"), "{}", stderr(&ran));
    let e = one_error(&qdq(&[&args[..], &["soc_model=0"]].concat()));
    assert!(e.contains("(on QNNExecutionProvider)") && e.contains("--qnn-option soc_model=<SoC>"), "{e}");
    let bad = qdq(&[&args[..], &["burst"]].concat());
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("`burst` must be KEY=VALUE"), "{}", stderr(&bad));
}

/// Issue 63: `qdq e2e --ep qnn` calibrates and evaluates FP32 on the CPU EP and the quantized model on QNN, whole
/// (fallback to the CPU EP is off), its shapes fixed and features padded; the preset is `qnn` (16-bit activations
/// beside 8-bit weights: `A16W8`), no speed is reported from the emulator; with `--ep cpu,qnn` the quantized model's
/// logits move from the CPU EP's to QNN's hardly more than the float model's do (the HTP's fp16 float parts).
#[test]
fn e2e_on_qnn_runs_the_qnn_preset_whole_beside_fp32_on_the_cpu_ep() {
    let f = fixture(TinyBertConfig::default());
    let (squad, vocab) = (testdata("squad/tiny-v1.1.json"), testdata("squad/vocab.txt"));
    let mut args = e2e_args(&f, "out", vocab.to_str().unwrap(), squad.to_str().unwrap());
    args.extend(["--ep", "qnn"].map(String::from));
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("QNNExecutionProvider runs static shapes only"), "{}", stderr(&o));
    let out = f.dir.path().join("out");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(
        (r["result"]["fp32"]["ep"].as_str(), r["result"]["int8"]["ep"].as_str()),
        (Some("cpu"), Some("qnn")),
        "{r}"
    );
    let q = &r["quantization"];
    assert_eq!((q["policy"].as_str(), q["precision"].as_str()), (Some("qnn"), Some("a16w8")), "{q}");
    assert!(r["result"]["speedup"].is_null(), "no speed from an emulated NPU: {}", r["result"]["speedup"]);
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("A16W8 (QDQ)"), "{table}");
    // The same preset on both EPs: the quantized model's logits on QNN against the CPU EP's.
    let mut both = e2e_args(&f, "both", vocab.to_str().unwrap(), squad.to_str().unwrap());
    both.extend(["--ep", "cpu,qnn", "--policy", "qnn"].map(String::from));
    let o = run(&both);
    assert!(o.status.success(), "{}", stderr(&o));
    // The logits' comparison runs both models again on QNN (seconds per feature on an emulated HTP): shown as it goes.
    assert!(stderr(&o).contains("A16W8's logits on qnn against cpu: 16 features"), "{}", stderr(&o));
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(f.dir.path().join("both/results.json")).unwrap()).unwrap();
    let qnn = &r["result"]["other_eps"][0];
    assert_eq!(qnn["ep"], "qnn", "{qnn}");
    assert!(qnn["speedup"].is_null(), "{qnn}");
    // The HTP runs the float parts in fp16: the float model moves there as much as the quantized one does, and the
    // 16-bit pairs add little to it.
    let (fp32, int8) =
        (qnn["fp32_logits"]["mean_abs"].as_f64().unwrap(), qnn["int8_logits"]["mean_abs"].as_f64().unwrap());
    assert!(fp32 > 0.0 && int8 <= 1.5 * fp32 + 1e-3, "quantized {int8} against float {fp32}: {qnn}");
}

/// A QA model of quantized ops only, which the emulated HTP takes whole: `input_ids [batch, seq]` (dynamic) cast to
/// float and scaled, one uint8 activation pair, then int8 weight matrices `[seq, seq]` for the start and the end
/// logits. The attention mask is an input the logits do not read. It fits `seq` tokens exactly.
fn quantized_qa(seq: usize) -> Vec<u8> {
    let mut g = GraphProto { name: Some("qa".into()), ..Default::default() };
    for input in ["input_ids", "attention_mask"] {
        g.input.push(value_info(input, DataType::Int64, Some(&[Err("batch"), Err("sequence")])));
    }
    for out in ["start_logits", "end_logits"] {
        g.output.push(value_info(out, DataType::Float, Some(&[Err("batch"), Err("sequence")])));
    }
    let scalar = |name: &str, g: &mut GraphProto, v: f32| {
        g.add_initializer(array_to_tensor(name, &ArrayD::from_elem(IxDyn(&[]), v)))
    };
    scalar("scale_ids", &mut g, 1e-4);
    scalar("sx", &mut g, 0.02);
    scalar("sw", &mut g, 0.01);
    g.add_initializer(array_to_tensor("zx", &ArrayD::from_elem(IxDyn(&[]), 0u8)));
    g.add_initializer(array_to_tensor("zw", &ArrayD::from_elem(IxDyn(&[]), 0i8)));
    let mut cast = node("Cast", "to_float", &["input_ids"], &["ids_f"]);
    cast.attribute.push(attr_int("to", DataType::Float as i64));
    g.node.push(cast);
    g.node.push(node("Mul", "scaled", &["ids_f", "scale_ids"], &["x"]));
    g.node.push(node("QuantizeLinear", "quantize_x", &["x", "sx", "zx"], &["xq"]));
    g.node.push(node("DequantizeLinear", "dequantize_x", &["xq", "sx", "zx"], &["xd"]));
    for (k, out) in ["start_logits", "end_logits"].iter().enumerate() {
        let w =
            ArrayD::from_shape_fn(IxDyn(&[seq, seq]), |d| (((d[0] * 31 + d[1] * (17 + k)) % 201) as i64 - 100) as i8);
        g.add_initializer(array_to_tensor(&format!("w{k}"), &w));
        g.node.push(node(
            "DequantizeLinear",
            &format!("dequantize_w{k}"),
            &[&format!("w{k}"), "sw", "zw"],
            &[&format!("wd{k}")],
        ));
        g.node.push(node("MatMul", &format!("logits{k}"), &["xd", &format!("wd{k}")], &[out]));
    }
    onnx_ir::Model::of_graph(g, 21).to_bytes().unwrap()
}

/// Issue 63 (static shapes): a model exported with a dynamic batch and length runs on QNN with both fixed by the names
/// it gives them (`batch`, `sequence`) to `--batch` x `--seq-len`, every feature padded to that length; it runs whole
/// there (a node left to the CPU EP would be an error) and answers every question as the CPU EP does on the same
/// padded features.
#[test]
fn a_dynamic_model_runs_on_qnn_with_its_shapes_fixed_and_answers_as_the_cpu_ep() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("qa.onnx");
    std::fs::write(&model, quantized_qa(48)).unwrap();
    let (squad, vocab) = (testdata("squad/tiny-v1.1.json"), testdata("squad/vocab.txt"));
    let (m, s, v) = (model.to_str().unwrap(), squad.to_str().unwrap(), vocab.to_str().unwrap());
    let eval = |ep: &str, extra: &[&str], out: &str| -> (serde_json::Value, String) {
        let o = dir.path().join(out);
        let mut args = vec!["eval", "--model", m, "--dataset", s, "--vocab", v, "--seq-len", "48", "--ep", ep];
        args.extend(extra);
        args.extend(["-o", o.to_str().unwrap(), "--json"]);
        let run = qdq(&args);
        assert!(run.status.success(), "{}", stderr(&run));
        let predictions: serde_json::Value = serde_json::from_slice(&std::fs::read(&o).unwrap()).unwrap();
        (predictions, stderr(&run))
    };
    let (on_qnn, log) = eval("qnn", &[], "qnn.json");
    assert!(
        log.contains(
            "QNNExecutionProvider runs static shapes only: the model's inputs fixed to 1x48 (batch=1, sequence=48)"
        ),
        "{log}"
    );
    let (on_cpu, _) = eval("cpu", &["--pad-to-max"], "cpu.json");
    assert_eq!(on_qnn.as_object().unwrap().len(), 9, "every question answered");
    assert_eq!(on_qnn, on_cpu, "QNN answers as the CPU EP");
}

/// `qdq tune` and a `qdq debug` on QNN alone read every quantized tensor of both models on one EP, which QNN cannot
/// give: one usage error each, before any work, saying where to measure; QNN may not be the first of debug's two EPs,
/// nor may debug take three.
#[test]
fn debug_and_tune_on_qnn_say_where_to_measure() {
    let f = fixture(TinyBertConfig::default());
    let (squad, vocab) = (testdata("squad/tiny-v1.1.json"), testdata("squad/vocab.txt"));
    let (m, s, v) = (f.model.to_str().unwrap(), squad.to_str().unwrap(), vocab.to_str().unwrap());
    let out = f.dir.path().join("tuned");
    let debug = |ep: &'static str| vec!["debug", "--model", m, "--qdq", m, "--dataset", s, "--vocab", v, "--ep", ep];
    let runs = [
        (debug("qnn"), "qdq debug --ep cpu,qnn"),
        (
            vec!["tune", "--model", m, "--dataset", s, "--vocab", v, "--ep", "qnn", "--out", out.to_str().unwrap()],
            "--ep cpu,qnn --policy qnn",
        ),
        (debug("qnn,cpu"), "put the CPU EP first: --ep cpu,cpu"),
        (debug("cpu,qnn,cpu"), "debug compares two execution providers at most"),
    ];
    for (args, says) in runs {
        let o = qdq(&args);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let e = one_error(&o);
        assert!(e.contains(&format!("--ep {}", args[args.iter().position(|a| *a == "--ep").unwrap() + 1])), "{e}");
        assert!(e.contains(says), "{e}");
    }
    assert!(!out.exists(), "nothing written");
}

/// Issue 63 (agreement, layer by layer): `qdq debug --ep cpu,qnn` measures the `qnn` preset's model against FP32 on
/// the CPU EP, then runs the same model on QNN (whole, its features padded to the fixed length) and sets every
/// activation pair's dequantized tensor there against the CPU EP's, in graph order, with the outputs: QNN's fp16
/// float parts keep each pair close (the pairs are 16-bit), and the report says where the two part if they do. Its
/// `--json` is JSON alone on stdout, though QNN's library prints a line there of its own.
#[test]
fn debug_on_cpu_and_qnn_sets_every_pair_on_qnn_against_the_cpu_ep() {
    let f = fixture(TinyBertConfig::default());
    let (squad, vocab) = (testdata("squad/tiny-v1.1.json"), testdata("squad/vocab.txt"));
    let (s, v) = (squad.to_str().unwrap(), vocab.to_str().unwrap());
    let mut args = e2e_args(&f, "out", v, s);
    args.extend(["--ep", "qnn", "--no-eval"].map(String::from));
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let qdq_model = f.dir.path().join("out/model_qdq.onnx");
    let report = f.dir.path().join("debug");
    let (m, q) = (f.model.to_str().unwrap(), qdq_model.to_str().unwrap());
    let debug = ["debug", "--model", m, "--qdq", q, "--dataset", s, "--vocab", v, "--held-out", "3", "--seq-len", "32"];
    let o = qdq(&[&debug[..], &["--ep", "cpu,qnn", "--json", "-o", report.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("QNNExecutionProvider runs static shapes only"), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let other = &doc["other_ep"];
    assert_eq!((other["ep"].as_str(), other["against"].as_str()), (Some("qnn"), Some("cpu")), "{other}");
    let (pairs, on_qnn) = (doc["tensors"].as_array().unwrap(), other["tensors"].as_array().unwrap());
    assert!(!pairs.is_empty() && on_qnn.len() == pairs.len(), "every pair on both EPs: {other}");
    for t in on_qnn {
        // 16-bit pairs and fp16 float parts: far above the 30 dB where the report says two EPs part.
        let db = t["sqnr_db"].as_f64().unwrap_or(f64::INFINITY);
        assert!(db > 30.0 && t["values"].as_u64().unwrap() > 0, "{t}");
    }
    // The outputs: QNN's logits those of the CPU EP's run to fp16's precision (measured: 5e-4), the same answers.
    let vs_cpu = &other["logits_vs_first"];
    assert!(vs_cpu["argmax_start"] == 1.0 && vs_cpu["argmax_end"] == 1.0, "{other}");
    assert!(vs_cpu["max_abs_diff"].as_f64().unwrap() < 1e-2, "{other}");
    assert!(other["logits_vs_fp32"]["max_abs_diff"].as_f64().is_some(), "{other}");
    let md = std::fs::read_to_string(report.join("debug.md")).unwrap();
    assert!(md.contains("The same QDQ model on qnn against cpu") && md.contains("logits vs cpu's:"), "{md}");
    assert!(md.contains("pairs agrees at 30 dB or more"), "{md}");
}
