//! Qualcomm's QNN as a plugin execution provider (`onnxruntime-qnn`, provisioned by `cargo xtask test` through
//! `cargo xtask setup --qnn`; on x86-64 its HTP backend emulates the NPU): found by itself and listed with its
//! device, a static quantized MatMul runs whole on it and agrees with the CPU EP, and a graph it cannot take is an
//! error naming the nodes. Its own process: a registered plugin is process-wide.

use ndarray::{Array2, ArrayD, IxDyn};
use onnx_ir::proto::GraphProto;
use onnx_ir::{DataType, GraphExt as _, array_to_tensor, node, value_info};
use qdq_runtime::{Ep, Session, SessionConfig};

/// QNN's plugin, provisioned by `cargo xtask test`, registered; a plugin that is not there fails the test.
fn qnn() -> SessionConfig {
    let cfg = SessionConfig { ep: Ep::parse("qnn").unwrap(), ..Default::default() };
    if let Err(e) = cfg.check_available() {
        panic!("QNN's plugin is provisioned by `cargo xtask test` (cargo xtask setup --qnn): {e}");
    }
    cfg
}

/// `ids [rows, k]` (int64, static: sessions here feed token-id arrays) -> Cast to float -> x 0.1 -> QuantizeLinear / DequantizeLinear (uint8, scale `sx`, zero point 128) -> MatMul
/// by int8 weights `w` (per-tensor scale `sw`) -> `y [rows, n]`: one quantized MatMul, the smallest graph of a QDQ
/// BERT's kind, opset 21.
fn quantized_matmul(rows: usize, w: &Array2<i8>, (sx, sw): (f32, f32), x_dims: &[Result<i64, &str>]) -> Vec<u8> {
    let n = w.ncols();
    let mut g = GraphProto { name: Some("one_matmul".into()), ..Default::default() };
    g.input.push(value_info("ids", DataType::Int64, Some(x_dims)));
    g.output.push(value_info("y", DataType::Float, Some(&[Ok(rows as i64), Ok(n as i64)])));
    g.add_initializer(array_to_tensor("sx", &ArrayD::from_elem(IxDyn(&[]), sx)));
    g.add_initializer(array_to_tensor("zx", &ArrayD::from_elem(IxDyn(&[]), 128u8)));
    g.add_initializer(array_to_tensor("sw", &ArrayD::from_elem(IxDyn(&[]), sw)));
    g.add_initializer(array_to_tensor("zw", &ArrayD::from_elem(IxDyn(&[]), 0i8)));
    g.add_initializer(array_to_tensor("w", &w.clone().into_dyn()));
    g.add_initializer(array_to_tensor("tenth", &ArrayD::from_elem(IxDyn(&[]), 0.1f32)));
    let mut cast = node("Cast", "to_float", &["ids"], &["xi"]);
    cast.attribute.push(onnx_ir::attr_int("to", DataType::Float as i64));
    g.node.push(cast);
    g.node.push(node("Mul", "scaled", &["xi", "tenth"], &["x"]));
    g.node.push(node("QuantizeLinear", "quantize_x", &["x", "sx", "zx"], &["xq"]));
    g.node.push(node("DequantizeLinear", "dequantize_x", &["xq", "sx", "zx"], &["xd"]));
    g.node.push(node("DequantizeLinear", "dequantize_w", &["w", "sw", "zw"], &["wd"]));
    g.node.push(node("MatMul", "the_matmul", &["xd", "wd"], &["y"]));
    onnx_ir::Model::of_graph(g, 21).to_bytes().unwrap()
}

fn weights(k: usize, n: usize) -> Array2<i8> {
    Array2::from_shape_fn((k, n), |(i, j)| (((i * 37 + j * 11) % 200) as i64 - 100) as i8)
}

/// Values -1.4 to 1.4 once scaled by the graph.
fn inputs(rows: usize, k: usize) -> Array2<i64> {
    Array2::from_shape_fn((rows, k), |(i, j)| ((i * 13 + j * 7) % 29) as i64 - 14)
}

fn run(bytes: &[u8], cfg: &SessionConfig, x: &Array2<i64>) -> ArrayD<f32> {
    let mut s = Session::from_bytes(bytes, "one_matmul.onnx", cfg).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.ep(), &cfg.ep);
    s.run(&[("ids", x.view())], &["y"]).unwrap().remove(0)
}

#[test]
fn qnn_is_found_and_lists_its_device() {
    let _ = qnn();
    let registered = qdq_runtime::plugin::registered();
    assert!(registered.iter().any(|p| p.ends_with("libonnxruntime_providers_qnn.so")), "{registered:?}");
    let devices = qdq_runtime::plugin::devices(None).unwrap();
    assert!(devices.iter().any(|d| d.ep == "QNNExecutionProvider"), "{devices:?}");
}

/// The smallest graph of a QDQ model runs whole on QNN's HTP backend (the session refuses a split with the CPU EP)
/// and gives the CPU EP's product to fp16's precision: the HTP computes the float output in fp16 once it knows the SoC
/// (qdq names one; measured in emulation: 6.6e-4 of a range of 4.7, where fp32 had 7e-7 before the SoC was named).
#[test]
fn a_quantized_matmul_runs_whole_on_qnn_and_agrees_with_the_cpu_ep() {
    let cfg = qnn();
    let (rows, k, n) = (4, 64, 16);
    let (sx, sw) = (0.02, 0.01);
    let bytes = quantized_matmul(rows, &weights(k, n), (sx, sw), &[Ok(rows as i64), Ok(k as i64)]);
    let x = inputs(rows, k);
    let on_qnn = run(&bytes, &cfg, &x);
    let on_cpu = run(&bytes, &SessionConfig::default(), &x);
    assert_eq!(on_qnn.shape(), on_cpu.shape());
    let range = on_cpu.iter().fold(0f32, |m, v| m.max(v.abs()));
    let worst = on_qnn.iter().zip(&on_cpu).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    // A wrong scale, zero point or layout would be off by a step (range / 255) or more; fp16 rounds within 2^-11.
    assert!(worst <= 1e-3 * range, "QNN against the CPU EP: worst |diff| {worst} over a range of {range}");
}

/// The same graph exported with a dynamic batch runs on QNN once the batch is fixed (a free-dimension override by the
/// dimension's name), with the CPU EP's product.
#[test]
fn a_dynamic_batch_fixed_by_name_runs_whole_on_qnn() {
    let (rows, k, n) = (4, 64, 16);
    let bytes = quantized_matmul(rows, &weights(k, n), (0.02, 0.01), &[Err("batch"), Ok(k as i64)]);
    let fixed = SessionConfig { dim_overrides: vec![("batch".into(), rows as i64)], ..qnn() };
    let x = inputs(rows, k);
    let on_qnn = run(&bytes, &fixed, &x);
    let on_cpu = run(&bytes, &SessionConfig::default(), &x);
    let range = on_cpu.iter().fold(0f32, |m, v| m.max(v.abs()));
    let worst = on_qnn.iter().zip(&on_cpu).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(worst <= 1e-3 * range, "QNN against the CPU EP: worst |diff| {worst} over a range of {range}");
}

/// QNN takes static shapes only: a dynamic batch is refused as an error naming what it could not take, not run in
/// part on the CPU EP.
#[test]
fn a_dynamic_shape_is_an_error_naming_the_nodes() {
    let cfg = qnn();
    let bytes = quantized_matmul(4, &weights(64, 16), (0.02, 0.01), &[Err("batch"), Ok(64)]);
    let e = Session::from_bytes(&bytes, "dynamic.onnx", &cfg).unwrap_err().to_string();
    assert!(e.contains("QNNExecutionProvider cannot run every node of dynamic.onnx"), "{e}");
    assert!(e.contains("every node: the EP took none of them") && e.contains("--allow-fallback"), "{e}");
}
