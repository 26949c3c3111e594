//! Bad input gives one clear error; small hand-made graphs check the maths end to end.
use crate::common::*;
use onnx_ir::proto::{GraphProto, ModelProto, OperatorSetIdProto};
use onnx_ir::{DataType, Model, node, value_info};
use qdq::{Policy, Ranges};

/// y = x @ W (+ optional extra nodes), opset `opset`.
fn matmul_model(opset: i64, b_input: &str, w: Option<Vec<f32>>) -> Model {
    let mut g = GraphProto { name: Some("mm".into()), ..Default::default() };
    g.input.push(value_info("x", DataType::Float, Some(&[Ok(1), Ok(2)])));
    if let Some(w) = w {
        g.initializer.push(f32_init("W", &[2, 3], w));
    }
    g.node.push(node("MatMul", "mm", &["x", b_input], &["y"]));
    g.output.push(value_info("y", DataType::Float, Some(&[Ok(1), Ok(3)])));
    Model::new(ModelProto {
        ir_version: Some(7),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(opset) }],
        graph: Some(g),
        ..Default::default()
    })
}

fn ranges(pairs: &[(&str, f32, f32)]) -> Ranges {
    pairs.iter().map(|(t, lo, hi)| (t.to_string(), (*lo, *hi))).collect()
}

#[test]
fn undefined_matmul_input_is_named() {
    let m = matmul_model(14, "nowhere", None);
    let e = qdq::plan(&m, &Ranges::new(), &unsmoothed("tensorrt")).unwrap_err().to_string();
    assert!(e.contains("'mm'") && e.contains("nowhere") && e.contains("neither"), "{e}");
}

#[test]
fn model_without_quantizable_ops() {
    let mut m = matmul_model(14, "W", Some(vec![0.0; 6]));
    m.graph_mut().node[0].op_type = Some("Mul".into());
    let e = qdq::plan(&m, &Ranges::new(), &unsmoothed("tensorrt")).unwrap_err().to_string();
    assert!(e.contains("MatMul/Gemm/FusedMatMul/Attention/Add"), "{e}");
    assert!(qdq::tensors_to_calibrate(&m, &Policy::preset("cpu").unwrap()).is_err());
}

#[test]
fn bad_ranges_are_rejected() {
    let m = matmul_model(14, "W", Some(vec![1.0; 6]));
    let p = unsmoothed("tensorrt");
    for (lo, hi) in [(1.0, -1.0), (f32::NAN, 1.0), (0.0, f32::INFINITY)] {
        let e = qdq::plan(&m, &ranges(&[("x", lo, hi)]), &p).unwrap_err().to_string();
        assert!(e.contains("'x'") && e.contains("range"), "{e}");
    }
}

#[test]
fn weight_with_non_finite_value() {
    let m = matmul_model(14, "W", Some(vec![1.0, f32::NAN, 0.0, 0.0, 0.0, 0.0]));
    let e = qdq::plan(&m, &ranges(&[("x", -1.0, 1.0)]), &unsmoothed("tensorrt")).unwrap_err().to_string();
    assert!(e.contains("'W'") && e.contains("NaN"), "{e}");
}

#[test]
fn plan_for_another_model_is_refused() {
    let m = matmul_model(14, "W", Some(vec![1.0; 6]));
    let p = qdq::plan(&m, &ranges(&[("x", -1.0, 1.0)]), &unsmoothed("tensorrt")).unwrap();
    let mut other = matmul_model(14, "W", Some(vec![1.0; 6]));
    other.graph_mut().node[0].name = Some("renamed".into());
    let e = p.apply(&mut other).unwrap_err().to_string();
    assert!(e.contains("plan does not match") && e.contains("'mm'"), "{e}");
}

/// Hand-computed: W columns have absmax 2.54, 1.27, 0.635 -> per-channel scales 0.02, 0.01,
/// 0.005; x in [-1.27, 0.5] -> scale 0.01. Int8 initializers hold round(W / scale).
#[test]
fn int8_initializer_weights_and_opset_bump() {
    let w = vec![2.54, -1.27, 0.3, -1.0, 0.5, -0.635];
    let m = matmul_model(11, "W", Some(w.clone()));
    let mut p = unsmoothed("tensorrt");
    p.set("weights", "int8-initializer").unwrap();
    let (q, plan) = qdq::quantize(&m, &ranges(&[("x", -1.27, 0.5)]), &p).unwrap();
    assert_eq!(plan.opset_bump, Some((11, qdq::MIN_QDQ_OPSET)));
    assert_eq!(q.opset(""), Some(13));
    q.validate().unwrap();
    let cov = qdq::coverage(&q);
    let wp = cov.pairs.iter().find(|p| p.tensor.starts_with("W")).unwrap();
    assert!(wp.is_initializer && wp.quantize_node.is_none());
    for (got, want) in wp.scales.iter().zip([0.02f32, 0.01, 0.005]) {
        assert!((got - want).abs() < 1e-7, "{:?}", wp.scales);
    }
    let qw =
        onnx_ir::tensor_to_array::<i8>(q.graph().initializer.iter().find(|t| t.name() == wp.tensor).unwrap()).unwrap();
    // 2.54/0.02=127, -1.27/0.01=-127, 0.3/0.005=60, -1/0.02=-50, 0.5/0.01=50, -0.635/0.005=-127
    assert_eq!(qw.iter().copied().collect::<Vec<_>>(), vec![127, -127, 60, -50, 50, -127]);
    assert!(q.graph().initializer.iter().all(|t| t.name() != "W"), "FP32 weight should be dropped");
    let xp = cov.pairs.iter().find(|p| p.tensor == "x").unwrap();
    assert!((xp.scales[0] - 0.01).abs() < 1e-7 && xp.zero_points == vec![0]);
    assert_eq!(cov.by_op.get("MatMul").map(|c| (c.nodes, c.covered)), Some((1, 1)));
    let text = cov.to_string();
    assert!(text.contains("3 chans") && text.contains("2 DequantizeLinear nodes") && text.contains("mm[1]"), "{text}");
}

#[test]
fn matmul_const_b_only_skips_activation_matmuls() {
    let fp32 = tiny_bert(Ln::Fused);
    let mut p = unsmoothed("tensorrt");
    p.set("matmul_const_b_only", "true").unwrap();
    let t = qdq::tensors_to_calibrate(&fp32, &p).unwrap();
    assert!(!t.iter().any(|t| t.ends_with("Softmax_output_0") || t.ends_with("Transpose_output_0")), "{t:?}");
    let all = qdq::tensors_to_calibrate(&fp32, &unsmoothed("tensorrt")).unwrap();
    assert_eq!(all.len(), t.len() + 4); // Softmax, Transpose, query/Add and value/Add outputs
}

/// A node name or glob that matches nothing is an error naming it (it used to be ignored silently).
#[test]
fn node_patterns_that_match_nothing_are_errors() {
    let m = matmul_model(14, "W", Some(vec![1.0; 6]));
    let mut p = unsmoothed("tensorrt");
    p.set("exclude_nodes", "/bert/encoder/layer.0/*").unwrap();
    let e = qdq::plan(&m, &ranges(&[("x", -1.0, 1.0)]), &p).unwrap_err().to_string();
    assert!(e.contains("exclude_nodes") && e.contains("/bert/encoder/layer.0/*") && e.contains("'mm'"), "{e}");
    assert!(qdq::tensors_to_calibrate(&m, &p).is_err());
    let mut p = unsmoothed("tensorrt");
    p.set("include_nodes", "m?").unwrap();
    qdq::plan(&m, &ranges(&[("x", -1.0, 1.0)]), &p).unwrap();
    p.set("include_nodes", "nothing").unwrap();
    assert!(qdq::plan(&m, &ranges(&[("x", -1.0, 1.0)]), &p).unwrap_err().to_string().contains("'nothing'"));
    // Tensors too; a name copied from a QDQ model (qdq debug lists the shifted Softmax pair as `<P>_shifted`) gets
    // told which name to use.
    let mut p = unsmoothed("tensorrt");
    p.set("exclude_tensors", "x").unwrap();
    qdq::plan(&m, &ranges(&[("x", -1.0, 1.0)]), &p).unwrap();
    p.set("exclude_tensors", "x_shifted").unwrap();
    let e = qdq::plan(&m, &ranges(&[("x", -1.0, 1.0)]), &p).unwrap_err().to_string();
    assert!(e.contains("exclude_tensors") && e.contains("matches no tensor") && e.contains("stands for"), "{e}");
}
