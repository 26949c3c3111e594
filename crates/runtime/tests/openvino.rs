//! OpenVINO as a plugin execution provider (`onnxruntime-ep-openvino`, provisioned by `cargo xtask test` through
//! `cargo xtask setup --openvino`): found by itself, tiny BERT on it gives the CPU EP's logits, and once it is
//! registered a CPU-EP session still runs on the CPU EP. Its own process: a registered plugin is process-wide.

use ndarray::{Array2, ArrayD};
use onnx_ir::tiny_bert::{TinyBertConfig, build};
use onnx_ir::{DataType, GraphExt as _, node};
use qdq_runtime::{Ep, OpTimes, Session, SessionConfig};

const SEQ: usize = 12;

/// OpenVINO's plugin, provisioned by `cargo xtask test`, registered; `false` (said on stderr) when it registers but
/// offers no CPU device on this machine (a CPU it does not serve: on such a host nothing here can run). A plugin that
/// is not there fails the test.
fn openvino_serves_this_cpu() -> bool {
    let ov = SessionConfig { ep: Ep::parse("openvino").unwrap(), ..Default::default() };
    match ov.check_available() {
        Ok(()) => true,
        Err(e) if e.to_string().contains("registered but offers no CPU device") => {
            eprintln!("skipped on this machine: {e}");
            false
        }
        Err(e) => panic!("OpenVINO's plugin is provisioned by `cargo xtask test` (cargo xtask setup --openvino): {e}"),
    }
}

fn inputs() -> [Array2<i64>; 3] {
    let ids = Array2::from_shape_fn((2, SEQ), |(i, j)| ((i * 31 + j * 53 + 7) % 800) as i64);
    let mask = Array2::from_shape_fn((2, SEQ), |(i, j)| i64::from(j < SEQ - 3 * i));
    let types = Array2::from_shape_fn((2, SEQ), |(_, j)| i64::from(j >= SEQ / 2));
    [ids, mask, types]
}

/// Runs the model twice on `cfg`'s EP, profiled; the logits and the providers the profile saw running kernels.
fn run(bytes: &[u8], cfg: &SessionConfig, dir: &std::path::Path) -> (Vec<ArrayD<f32>>, Vec<String>) {
    let cfg = SessionConfig { profile: Some(dir.join(cfg.ep.short_name())), ..cfg.clone() };
    let mut s = Session::from_bytes(bytes, "tiny_bert.onnx", &cfg).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.ep(), &cfg.ep);
    let x = inputs();
    let feeds = [("input_ids", x[0].view()), ("attention_mask", x[1].view()), ("token_type_ids", x[2].view())];
    let mut out = Vec::new();
    for _ in 0..2 {
        out = s.run(&feeds, &["start_logits", "end_logits"]).unwrap();
    }
    let times = OpTimes::read(&s.end_profiling().unwrap(), 1).unwrap();
    let mut providers: Vec<String> = times.ops.iter().map(|o| o.provider.clone()).collect();
    providers.sort();
    providers.dedup();
    (out, providers)
}

#[test]
fn tiny_bert_runs_whole_on_openvino_and_cpu_sessions_stay_on_the_cpu_ep() {
    let bytes = build(&TinyBertConfig::default()).to_bytes().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ov = SessionConfig { ep: Ep::parse("openvino").unwrap(), intra_threads: Some(1), ..Default::default() };
    if !openvino_serves_this_cpu() {
        return;
    }
    assert!(!qdq_runtime::plugin::registered().is_empty(), "the plugin was found and registered");
    let devices = qdq_runtime::plugin::devices(None).unwrap();
    assert!(devices.iter().any(|d| d.ep == "OpenVINOExecutionProvider" && d.kind == "CPU"), "{devices:?}");

    let (on_ov, ov_providers) = run(&bytes, &ov, dir.path());
    assert_eq!(ov_providers, ["OpenVINOExecutionProvider"], "the whole graph runs on OpenVINO");
    // With the plugin registered, ONNX Runtime's automatic device selection would put an unpinned session on
    // OpenVINO's CPU device: the CPU EP's session must still run on the CPU EP.
    let cpu = SessionConfig { intra_threads: Some(1), ..Default::default() };
    let (on_cpu, cpu_providers) = run(&bytes, &cpu, dir.path());
    assert_eq!(cpu_providers, ["CPUExecutionProvider"]);
    for (a, b) in on_ov.iter().zip(&on_cpu) {
        assert_eq!(a.shape(), b.shape());
        let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs() / (1.0 + y.abs())).fold(0f32, f32::max);
        assert!(worst < 1e-3, "OpenVINO at f32 gives the CPU EP's logits: worst relative difference {worst}");
    }
}

#[test]
fn a_plugin_file_that_is_not_one_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("libnot_a_plugin.so");
    std::fs::write(&fake, b"not a library").unwrap();
    let cfg = SessionConfig { ep: Ep::parse("openvino").unwrap(), plugins: vec![fake.clone()], ..Default::default() };
    let e = cfg.check_available().unwrap_err().to_string();
    assert!(e.contains(fake.to_str().unwrap()) && e.contains("plugin"), "{e}");
    let missing = SessionConfig { plugins: vec![dir.path().join("nope.so")], ..cfg };
    let e = missing.check_available().unwrap_err().to_string();
    assert!(e.contains("nope.so") && e.contains("no such file"), "{e}");
}

/// A node OpenVINO cannot take (ONNX Runtime's `com.microsoft.Inverse`, run on a MatMul's output reshaped to 1x1
/// matrices) makes the OpenVINO session an error naming that node, not a silent split with the CPU EP; with
/// fallback allowed, the model runs on the CPU EP and says why.
#[test]
fn a_node_openvino_cannot_take_is_named_in_the_error() {
    if !openvino_serves_this_cpu() {
        return;
    }
    let mut model = build(&TinyBertConfig::default());
    model
        .proto
        .opset_import
        .push(onnx_ir::proto::OperatorSetIdProto { domain: Some("com.microsoft".into()), version: Some(1) });
    let g = model.graph_mut();
    let t = g.node.iter().find(|n| n.op_type() == "MatMul").map(|n| n.output[0].clone()).unwrap();
    let shape = ndarray::arr1(&[-1i64, 1, 1]).into_dyn();
    g.add_initializer(onnx_ir::array_to_tensor("one_by_one", &shape));
    g.node.push(node("Reshape", "to_matrices", &[&t, "one_by_one"], &["matrices"]));
    let mut inverse = node("Inverse", "the_inverse", &["matrices"], &["inverses"]);
    inverse.domain = Some("com.microsoft".into());
    g.node.push(inverse);
    g.add_output("inverses", DataType::Float);
    let bytes = model.to_bytes().unwrap();

    let ov = SessionConfig { ep: Ep::parse("openvino").unwrap(), ..Default::default() };
    let e = Session::from_bytes(&bytes, "inverse.onnx", &ov).unwrap_err().to_string();
    assert!(e.contains("OpenVINOExecutionProvider cannot run every node of inverse.onnx"), "{e}");
    assert!(e.contains("Inverse (the_inverse)") && e.contains("1 would run on the CPU EP"), "{e}");
    let s = Session::from_bytes(&bytes, "inverse.onnx", &SessionConfig { allow_fallback: true, ..ov }).unwrap();
    assert_eq!(s.ep(), &Ep::Cpu);
    assert!(s.fallback().is_some_and(|why| why.contains("Inverse (the_inverse)")), "{:?}", s.fallback());
}
