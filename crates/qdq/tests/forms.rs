//! Issue 16: graph forms other than the plain Hugging Face export. onnx-ir's tiny BERT in its `Gemm` form (linear
//! layers as Reshape -> Gemm(transB) -> Reshape) and in ONNX Runtime's fused form (EmbedLayerNormalization,
//! Attention, SkipLayerNormalization, BiasGelu) goes through every preset, smoothing included: the model runs in ORT,
//! stays close to FP32, and every MatMul-like op reads quantized A and B (or, for `cpu`, is ORT's integer kernel).
use std::collections::BTreeMap;

use ndarray::Array2;
use onnx_ir::tiny_bert::{GraphForm, TinyBertConfig};
use onnx_ir::{DataType, GraphExt, Model, NodeExt};

use crate::common::*;

fn tiny(form: GraphForm) -> Model {
    tiny_form(form, 7)
}

/// Two sequences, the second padded (mask 0 on its last three positions), with segment ids.
fn feed3() -> Vec<(&'static str, Array2<i64>)> {
    let ids = Array2::from_shape_fn((2, SEQ), |(b, j)| ((j * 5 + 3 + b * 7) % VOCAB) as i64);
    let mask = Array2::from_shape_fn((2, SEQ), |(b, j)| i64::from(b == 0 || j < SEQ - 3));
    let segment = Array2::from_shape_fn((2, SEQ), |(_, j)| i64::from(j >= SEQ / 2));
    vec![("input_ids", ids), ("attention_mask", mask), ("token_type_ids", segment)]
}

/// Start logits at ORT optimisation level `opt`.
fn logits_at(m: &Model, opt: runtime::OptLevel) -> Vec<f32> {
    run_feed(m, &feed3(), &["start_logits"], opt).remove(0).into_iter().collect()
}

fn logits(m: &Model) -> Vec<f32> {
    logits_at(m, runtime::OptLevel::default())
}

fn channel_absmax(model: &Model, tensors: &[String]) -> BTreeMap<String, Vec<f32>> {
    channel_absmax_on(model, tensors, &feed3())
}

/// The preset's model: smoothed when the preset smooths, split where it splits, then quantized with ranges observed on [`feed3`].
fn quantized(fp32: &Model, preset: &str) -> (Model, Model, qdq::Plan) {
    let policy = qdq::Policy::preset(preset).unwrap();
    let model = match policy.smooth {
        Some(alpha) => {
            let sites: Vec<String> =
                qdq::smoothing_sites(fp32, &policy).unwrap().into_iter().map(|s| s.tensor).collect();
            assert!(!sites.is_empty(), "{preset}: nothing to smooth");
            qdq::smooth(fp32, &policy, &channel_absmax(fp32, &sites), alpha).unwrap().0
        }
        None => fp32.clone(),
    };
    // Then the outlier split, as the pipeline does on the same per-channel pass (the names it reads are unchanged).
    let mut model = model;
    let candidates = qdq::outlier_candidates(fp32, &policy).unwrap();
    qdq::split_outliers(&mut model, &policy, &channel_absmax(fp32, &candidates)).unwrap();
    let tensors = qdq::tensors_to_calibrate(&model, &policy).unwrap();
    let ranges = observed_on(&model, &tensors, &feed3(), runtime::OptLevel::default());
    let (q, plan) = qdq::quantize(&model, &ranges, &policy).unwrap();
    (model, q, plan)
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn ops(m: &Model, op: &str) -> Vec<onnx_ir::proto::NodeProto> {
    m.graph().node.iter().filter(|n| n.op_type() == op).cloned().collect()
}

/// The DequantizeLinear producing `t`, if any.
fn dq_of<'m>(m: &'m Model, t: &str) -> Option<&'m onnx_ir::proto::NodeProto> {
    m.graph().node.iter().find(|n| n.op_type() == "DequantizeLinear" && n.output[0] == t)
}

/// A classifier (pooler and classifier `Gemm`s on the `[CLS]` row): every preset quantizes both Gemms (per-channel
/// along their output rows; int32 biases in the CPU layout) and the model stays close to FP32.
#[test]
fn every_preset_quantizes_a_classifier_head() {
    let cfg = TinyBertConfig {
        hidden: HIDDEN,
        heads: 2,
        intermediate: FFN,
        vocab_size: VOCAB,
        max_positions: SEQ,
        head: onnx_ir::tiny_bert::Head::Classifier { labels: 3 },
        seed: 3,
        ..Default::default()
    };
    let fp32 = onnx_ir::tiny_bert::build(&cfg);
    let out = |m: &Model| -> Vec<f32> {
        run_feed(m, &feed3(), &["logits"], runtime::OptLevel::Disable).remove(0).into_iter().collect()
    };
    let reference = out(&fp32);
    assert_eq!(reference.len(), 2 * 3);
    let magnitude = reference.iter().fold(0f32, |a, v| a.max(v.abs()));
    for &preset in qdq::PRESETS {
        let (_, q, plan) = quantized(&fp32, preset);
        let err = max_abs_diff(&out(&q), &reference);
        assert!(err > 0.0 && err <= 0.05 * magnitude, "{preset}: {err} vs {magnitude}");
        for name in ["/bert/pooler/dense/Gemm", "/classifier/Gemm"] {
            let g = q.graph().node.iter().find(|n| n.name() == name).unwrap();
            assert!(dq_of(&q, &g.input[0]).is_some() && dq_of(&q, &g.input[1]).is_some(), "{preset}: {name}");
            // int32 biases go with int8 weight initializers (the cpu and openvino presets).
            let int8_weights = matches!(preset, "cpu" | "openvino");
            let bias_dq = dq_of(&q, &g.input[2]);
            assert_eq!(bias_dq.is_some(), int8_weights, "{preset}: {name} bias");
        }
        assert_eq!(plan.biases.len(), if matches!(preset, "cpu" | "openvino") { 2 } else { 0 }, "{preset}");
    }
}

#[test]
fn every_preset_quantizes_gemm_and_ort_fused_forms() {
    for form in [GraphForm::Gemm, GraphForm::OrtFused] {
        let fp32 = tiny(form);
        let reference = logits(&fp32);
        let magnitude = reference.iter().fold(0f32, |a, v| a.max(v.abs()));
        for &preset in qdq::PRESETS {
            let (smoothed, q, plan) = quantized(&fp32, preset);
            // Smoothing changes nothing the model computes.
            assert!(max_abs_diff(&logits(&smoothed), &reference) <= 1e-4 * magnitude.max(1.0), "{form:?} {preset}");
            // Graph optimisations off: the Q/DQ arithmetic as written (at level All, ORT's int8 x int8 kernels on a
            // CPU without VNNI saturate, which the `cpu` preset's uint8 / 7-bit layout avoids: checked there too).
            let plain = logits_at(&q, runtime::OptLevel::Disable);
            let mut errs = vec![max_abs_diff(&plain, &reference)];
            if preset == "cpu" {
                errs.push(max_abs_diff(&logits(&q), &reference));
            }
            eprintln!("{form:?} {preset}: max |int8 - fp32| {errs:?} (max |fp32| {magnitude:.3})");
            let ok = errs.iter().all(|&e| e > 0.0 && e <= 0.05 * magnitude);
            assert!(plain.iter().all(|v| v.is_finite()) && ok, "{form:?} {preset}: {errs:?}");
            let float = qdq::coverage(&q).float_matmul_like;
            match form {
                GraphForm::Gemm => check_gemm(&q, preset, &float),
                _ => check_fused(&q, preset, &plan, &float),
            }
        }
    }
}

/// Every Gemm reads a quantized activation and a per-channel weight along its output rows (axis 0 of the
/// `[out, in]` weight); only the `cpu` preset's float attention MatMuls (Q·K, P·V) and the `openvino` preset's P·V
/// (by design) are float work.
fn check_gemm(q: &Model, preset: &str, float: &[qdq::FloatNode]) {
    let gemms = ops(q, "Gemm");
    assert_eq!(gemms.len(), 2 * 6 + 1, "{preset}");
    for g in &gemms {
        let w = dq_of(q, &g.input[1]).unwrap_or_else(|| panic!("{preset}: {} weight not dequantized", g.name()));
        assert_eq!(onnx_ir::get_attr_int(w, "axis").unwrap(), Some(0), "{preset} {}", g.name());
        let scales = q.graph().initializer(&w.input[1]).unwrap();
        let rows = q.graph().initializer(&w.input[0]).map(|t| t.dims[0]);
        assert!(rows.is_none() || Some(scales.dims[0]) == rows, "{preset}: one scale per output row");
        assert!(dq_of(q, &g.input[0]).is_some(), "{preset}: {} activation not dequantized", g.name());
    }
    let expected_float = match preset {
        "cpu" => 2 * 2,
        "openvino" => 2,
        _ => 0,
    };
    assert_eq!(float.len(), expected_float, "{preset}: {float:?}");
    assert!(float.iter().all(|f| f.op_type == "MatMul" && f.node.contains("/attention/self/")), "{float:?}");
}

/// ORT's fused form: the `cpu` preset turns each Attention into QAttention and the EmbedLayerNormalization into
/// QEmbedLayerNormalization; the other presets put pairs on Attention's input and packed weight. Nothing
/// MatMul-like is left in float either way.
fn check_fused(q: &Model, preset: &str, plan: &qdq::Plan, float: &[qdq::FloatNode]) {
    assert!(float.is_empty(), "{preset}: {float:?}");
    if preset == "cpu" {
        assert_eq!(ops(q, "QAttention").len(), 2, "{preset}");
        assert_eq!(ops(q, "QEmbedLayerNormalization").len(), 1, "{preset}");
        assert!(ops(q, "Attention").is_empty() && ops(q, "EmbedLayerNormalization").is_empty(), "{preset}");
        assert_eq!(plan.contrib.attention, ["Attention_0", "Attention_1"], "{preset}");
        for a in ops(q, "QAttention") {
            let wq = q.graph().initializer(&a.input[1]).unwrap();
            assert_eq!(wq.data_type(), DataType::Int8 as i32, "int8 packed weight");
            let scales = q.graph().initializer(&a.input[4]).unwrap();
            assert_eq!(scales.dims, [3 * HIDDEN as i64], "per-column weight scales");
        }
    } else {
        assert!(plan.contrib.is_empty(), "{preset}");
        for a in ops(q, "Attention") {
            for slot in [0, 1] {
                assert!(dq_of(q, &a.input[slot]).is_some(), "{preset}: {} input {slot}", a.name());
            }
        }
    }
}

/// Smoothing finds ORT's SkipLayerNormalization and EmbedLayerNormalization outputs as LayerNorm sites (γ / β absorb
/// the division) and smooths into the packed Attention weight.
#[test]
fn smoothing_sees_ort_fused_layer_norms() {
    let fp32 = tiny(GraphForm::OrtFused);
    let policy = qdq::Policy::preset("tensorrt").unwrap();
    let sites = qdq::smoothing_sites(&fp32, &policy).unwrap();
    let producer_op = |s: &qdq::SmoothSite| {
        fp32.graph().node.iter().find(|n| n.name() == s.producer).map(|n| n.op_type().to_owned()).unwrap_or_default()
    };
    let layer_norms: Vec<String> =
        sites.iter().filter(|s| s.form == qdq::SmoothForm::LayerNorm).map(producer_op).collect();
    assert_eq!(layer_norms.iter().filter(|op| *op == "EmbedLayerNormalization").count(), 1, "{layer_norms:?}");
    assert_eq!(layer_norms.iter().filter(|op| *op == "SkipLayerNormalization").count(), 4, "{layer_norms:?}");
    let attention_smoothed = sites.iter().flat_map(|s| &s.matmuls).filter(|m| m.starts_with("Attention_")).count();
    assert_eq!(attention_smoothed, 2);
}

/// Op counts of the graph ORT's CPU EP runs (opt level All) for the `cpu` preset's model of `form`.
fn optimized_cpu_ops(form: GraphForm) -> BTreeMap<String, usize> {
    let (_, q, _) = quantized(&tiny(form), "cpu");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("optimized.onnx");
    let cfg = runtime::SessionConfig { optimized_model_path: Some(path.clone()), ..Default::default() };
    drop(session(&q, &cfg));
    let mut counts = BTreeMap::new();
    let optimized = Model::load(&path).unwrap();
    for n in &optimized.graph().node {
        // No weight is dequantized at run time: what a DequantizeLinear is left with is computed (gathered rows, a
        // quantized activation that a float reader shares).
        if n.op_type() == "DequantizeLinear" {
            assert!(!optimized.graph().is_initializer(&n.input[0]), "{form:?}: {} dequantizes a constant", n.name());
        }
        *counts.entry(n.op_type().to_owned()).or_insert(0) += 1;
    }
    eprintln!("{form:?}: {counts:?}");
    counts
}

/// What the docs promise ORT's CPU EP runs for the `cpu` preset: every Gemm as the integer `QGemm` (the int32 bias
/// makes ORT fuse it), every fused Attention as `QAttention`, the embeddings as `QEmbedLayerNormalization`, every
/// other MatMul as `MatMulIntegerToFloat`, and no weight dequantized at run time.
#[test]
fn cpu_preset_forms_run_as_integer_kernels() {
    let gemm = optimized_cpu_ops(GraphForm::Gemm);
    assert_eq!(gemm.get("QGemm"), Some(&13), "{gemm:?}");
    assert!(!gemm.contains_key("Gemm"), "{gemm:?}");
    let fused = optimized_cpu_ops(GraphForm::OrtFused);
    assert_eq!(fused.get("QAttention"), Some(&2), "{fused:?}");
    assert_eq!(fused.get("QEmbedLayerNormalization"), Some(&1), "{fused:?}");
    assert_eq!(fused.get("MatMulIntegerToFloat"), Some(&(3 * 2 + 1)), "{fused:?}");
    assert!(!fused.contains_key("MatMul") && !fused.contains_key("Attention"), "{fused:?}");
}

/// `m` with PyTorch's "safe softmax" after every Softmax, as its export of `scaled_dot_product_attention` writes it:
/// `Where(IsNaN(P), 0, P)` read by `P·V`; the zero a `Constant` node in the first layer, an initializer after.
fn with_safe_softmax(m: &Model) -> Model {
    let mut out = m.clone();
    let g = out.graph_mut();
    let softmaxes: Vec<(usize, String)> = g
        .node
        .iter()
        .enumerate()
        .filter(|(_, n)| n.op_type() == "Softmax")
        .map(|(i, n)| (i, n.output[0].clone()))
        .collect();
    for (k, (at, p)) in softmaxes.into_iter().enumerate().rev() {
        let (nan, zero, safe) = (format!("{p}_isnan"), format!("{p}_zero"), format!("{p}_safe"));
        for (r, slot) in g.consumers_of(&p) {
            g.rewire_input(r, slot, &safe).unwrap();
        }
        let mut nodes = vec![onnx_ir::node("IsNaN", &format!("{p}/IsNaN"), &[&p], &[&nan])];
        let zero_tensor = onnx_ir::tensor_from_vec::<f32>(&zero, &[], vec![0.0]).unwrap();
        if k == 0 {
            let c = onnx_ir::node("Constant", &format!("{p}/Constant"), &[], &[&zero]);
            nodes.push(c.with_attr(onnx_ir::attr_tensor("value", zero_tensor)));
        } else {
            g.add_initializer(zero_tensor);
        }
        nodes.push(onnx_ir::node("Where", &format!("{p}/Where"), &[&nan, &zero, &p], &[&safe]));
        g.insert_nodes(at + 1, nodes);
    }
    out
}

/// Attention probabilities behind the safe-softmax `Where` are still attention probabilities: the `tensorrt` preset
/// quantizes them shifted over [-0.5, 0.5] (before, the `Where` output got a calibrated [0, max] pair), so the
/// model quantizes to the same computation as the plain form.
#[test]
fn attention_probabilities_behind_pytorchs_safe_softmax_are_quantized_as_softmax_outputs() {
    let plain = tiny(GraphForm::Hf);
    let safe = with_safe_softmax(&plain);
    safe.validate().unwrap();
    assert_eq!(ops(&safe, "Where").len(), 2);
    let (a, b) = (logits(&plain), logits(&safe));
    assert!(max_abs_diff(&a, &b) <= 1e-6, "the same function: {}", max_abs_diff(&a, &b));
    let (_, qp, plan_p) = quantized(&plain, "tensorrt");
    let (_, qs, plan_s) = quantized(&safe, "tensorrt");
    let shifted = |plan: &qdq::Plan| plan.tensors.iter().filter(|t| t.shift.is_some()).count();
    assert_eq!(shifted(&plan_p), 2, "{plan_p}");
    assert_eq!(shifted(&plan_s), 2, "{plan_s}");
    let (lp, ls) = (logits(&qp), logits(&qs));
    let scale = lp.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(max_abs_diff(&lp, &ls) <= 1e-5 * scale.max(1.0), "{} vs {scale}", max_abs_diff(&lp, &ls));
}
