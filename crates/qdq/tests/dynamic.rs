//! Dynamic mode (`qdq::quantize_dynamic`): no calibration; the model loads and runs in ORT close to FP32, and ORT's
//! CPU EP fuses every constant-weight MatMul into an integer kernel that quantizes its input at run time.
use std::collections::BTreeMap;

use onnx_ir::{GraphExt, Model};

use crate::common::*;

fn optimized_ops(q: &Model) -> BTreeMap<String, usize> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("optimized.onnx");
    let cfg = runtime::SessionConfig { optimized_model_path: Some(path.clone()), ..Default::default() };
    drop(session(q, &cfg));
    let mut counts = BTreeMap::new();
    for n in &Model::load(&path).unwrap().graph().node {
        *counts.entry(n.op_type().to_string()).or_insert(0) += 1;
    }
    counts
}

#[test]
fn dynamic_mode_runs_close_to_fp32_and_fuses_integer_kernels() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let fp32 = tiny_bert(ln);
        let (q, plan) = qdq::quantize_dynamic(&fp32, &qdq::Policy::preset("cpu").unwrap()).unwrap();
        // 7 constant-weight MatMuls (Q, K, V, attention output, FFN up and down, QA head) reading 5 distinct inputs
        // (three LayerNorm outputs, the attention context, the GELU output); the two attention MatMuls stay float;
        // word and position tables int8.
        assert_eq!(plan.matmuls.len(), 7, "{plan}");
        assert_eq!(plan.inputs.len(), 5, "{plan}");
        assert_eq!(plan.embeddings.len(), 2, "{plan}");
        let outputs = ["start_logits", "end_logits"];
        let (ours, float) = (run(&q, &outputs), run(&fp32, &outputs));
        for (a, b) in ours.iter().zip(&float) {
            let err = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
            let scale = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            assert!(err <= 0.1 * scale, "{ln:?}: max error {err} vs max |logit| {scale}");
        }
        let ops = optimized_ops(&q);
        let fused = ops.get("DynamicQuantizeMatMul").copied().unwrap_or(0)
            + ops.get("MatMulIntegerToFloat").copied().unwrap_or(0);
        assert_eq!(fused, 7, "{ln:?}: {ops:?}");
        assert!(!ops.contains_key("MatMulInteger"), "{ln:?}: {ops:?}");
        // One run-time quantization per input: only the input shared by Q, K and V keeps its own node (its three
        // MatMuls become MatMulIntegerToFloat); the others fold into DynamicQuantizeMatMul.
        assert_eq!(ops.get("DynamicQuantizeLinear").copied().unwrap_or(0), 1, "{ln:?}: {ops:?}");
        // No float weight is left in the file.
        assert!(q.graph().initializer("bert.encoder.layer.0.intermediate.dense.weight").is_none());
    }
}

#[test]
fn dynamic_mode_respects_exclusions_and_per_tensor() {
    let fp32 = tiny_bert(Ln::Fused);
    let mut policy = qdq::Policy::preset("cpu").unwrap();
    policy.set("exclude_nodes", "/qa_outputs/*").unwrap();
    policy.set("per_channel", "false").unwrap();
    let (q, plan) = qdq::quantize_dynamic(&fp32, &policy).unwrap();
    assert_eq!(plan.matmuls.len(), 6, "{plan}");
    assert!(plan.matmuls.iter().all(|m| !m.starts_with("/qa_outputs")));
    let scale = q.graph().initializer("bert.encoder.layer.0.intermediate.dense.weight_scale").unwrap();
    assert!(scale.dims.is_empty(), "per-tensor scale expected, got dims {:?}", scale.dims);
    run(&q, &["start_logits"]);
    // A pattern that matches nothing is an error, as in static mode.
    policy.set("exclude_nodes", "/no/such/node").unwrap();
    let e = qdq::quantize_dynamic(&fp32, &policy).unwrap_err().to_string();
    assert!(e.contains("/no/such/node"), "{e}");
}

/// Issue 16: on ONNX Runtime's fused form, dynamic mode writes what ORT's `quantize_dynamic` writes there: each
/// Attention as `QAttention` (its packed weight int8, its input quantized at run time), the EmbedLayerNormalization as
/// `QEmbedLayerNormalization`, the other MatMuls integer; the model runs close to FP32.
#[test]
fn dynamic_mode_on_the_ort_fused_form() {
    let fp32 = tiny_form(onnx_ir::tiny_bert::GraphForm::OrtFused, 0);
    let (q, plan) = qdq::quantize_dynamic(&fp32, &qdq::Policy::preset("cpu").unwrap()).unwrap();
    assert_eq!(plan.contrib.attention, ["Attention_0", "Attention_1"], "{plan}");
    assert_eq!(plan.contrib.embed_layer_norm, ["EmbedLayerNormalization_0"], "{plan}");
    // 2 x (attention output, FFN up, FFN down) + QA head, and the two Attentions.
    assert_eq!(plan.matmuls.len(), 2 * 3 + 1 + 2, "{plan}");
    let ops = optimized_ops(&q);
    assert_eq!((ops.get("QAttention"), ops.get("QEmbedLayerNormalization")), (Some(&2), Some(&1)), "{ops:?}");
    assert!(!ops.contains_key("MatMul") && !ops.contains_key("Attention"), "{ops:?}");
    let feed = vec![
        ("input_ids", input_ids()),
        ("attention_mask", ndarray::Array2::<i64>::ones((1, SEQ))),
        ("token_type_ids", ndarray::Array2::<i64>::zeros((1, SEQ))),
    ];
    let out = |m: &Model| run_feed(m, &feed, &["start_logits"], runtime::OptLevel::default()).remove(0);
    let (ours, float) = (out(&q), out(&fp32));
    let err = ours.iter().zip(&float).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    let scale = float.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    assert!(err > 0.0 && err <= 0.1 * scale, "max error {err} vs max |logit| {scale}");
}
