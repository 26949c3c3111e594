//! SmoothQuant-style smoothing on tiny BERT (both LayerNorm forms): which sites are found, that the smoothed model
//! computes the same function, that the LayerNorm outputs' channel spread shrinks by the factors, and that an
//! outlier channel then costs less accuracy once quantized.
use std::collections::BTreeMap;

use crate::common::*;
use onnx_ir::{GraphExt, Model, tensor_from_vec};
use qdq::{Policy, SmoothForm, SmoothTargets};

const EMB_LN: &str = "/bert/embeddings/LayerNorm";
const OUTLIER: usize = 3;

/// tiny BERT whose embedding LayerNorm has one channel 40x larger than the others (γ and β), as BERT's residual
/// stream does.
fn with_outlier(ln: Ln) -> Model {
    let mut m = tiny_bert(ln);
    let g = m.graph_mut();
    for (name, v) in [("bert.embeddings.LayerNorm.weight", 40.0f32), ("bert.embeddings.LayerNorm.bias", 8.0)] {
        let t = g.initializer(name).unwrap().clone();
        let mut vals = onnx_ir::tensor_to_array::<f32>(&t).unwrap().into_iter().collect::<Vec<_>>();
        vals[OUTLIER] = v;
        g.add_initializer(tensor_from_vec::<f32>(name, &[HIDDEN], vals).unwrap());
    }
    m
}

fn channel_absmax(model: &Model, tensors: &[String]) -> BTreeMap<String, Vec<f32>> {
    channel_absmax_on(model, tensors, &feed())
}

fn logits(m: &Model) -> Vec<f32> {
    run(m, &["start_logits"]).remove(0).into_iter().collect()
}

const QUERY: &str = "/bert/encoder/layer.0/attention/self/query/MatMul_output_0";

/// The output of the first MatMul reading the outlier LayerNorm, and the logits.
fn query_and_logits(m: &Model) -> (Vec<f32>, Vec<f32>) {
    let mut m = m.clone();
    m.graph_mut().add_output(QUERY, onnx_ir::DataType::Float);
    let mut o = run(&m, &[QUERY, "start_logits"]);
    let l = o.remove(1).into_iter().collect();
    (o.remove(0).into_iter().collect(), l)
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// The tensorrt preset smoothing LayerNorm outputs only, with strength `alpha`.
fn smoothing_policy(alpha: f32) -> Policy {
    let mut p = Policy::preset("tensorrt").unwrap();
    p.set("smooth", &alpha.to_string()).unwrap();
    p.set("smooth_targets", "layernorm").unwrap();
    p
}

#[test]
fn finds_layer_norm_outputs_read_by_constant_weight_matmuls() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let m = tiny_bert(ln);
        let sites = qdq::smoothing_sites(&m, &smoothing_policy(0.5)).unwrap();
        let got: Vec<(usize, bool)> = sites.iter().map(|s| (s.matmuls.len(), s.other_readers)).collect();
        // embeddings LN -> Q, K, V (+ residual Add); attention-output LN -> intermediate (+ residual Add);
        // output LN -> qa_outputs only.
        assert_eq!(got, vec![(3, true), (1, true), (1, false)], "{ln:?}");
        assert!(sites.iter().all(|s| s.channels == HIDDEN));
        match (&sites[0].form, ln) {
            (SmoothForm::LayerNorm, Ln::Fused) => {}
            (SmoothForm::DecomposedLayerNorm { mul }, Ln::Decomposed) => assert_eq!(mul, &format!("{EMB_LN}/Mul")),
            (f, _) => panic!("{ln:?}: form {f:?}"),
        }
        assert_eq!(sites[1].matmuls, vec!["/bert/encoder/layer.0/intermediate/dense/MatMul".to_string()]);

        // The policy decides: an excluded tensor or MatMul is not smoothed into.
        let mut p = smoothing_policy(0.5);
        p.set("exclude_tensors", &sites[2].tensor).unwrap();
        p.set("exclude_nodes", "*/query/MatMul").unwrap();
        let fewer = qdq::smoothing_sites(&m, &p).unwrap();
        assert_eq!(fewer.len(), 2);
        assert_eq!(fewer[0].matmuls.len(), 2);
        assert!(fewer[0].other_readers, "the excluded MatMul still reads the original tensor");
    }
}

#[test]
fn smoothed_model_computes_the_same_and_moves_the_spread_into_weights() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let m = with_outlier(ln);
        let policy = smoothing_policy(0.5);
        let sites = qdq::smoothing_sites(&m, &policy).unwrap();
        let tensors: Vec<String> = sites.iter().map(|s| s.tensor.clone()).collect();
        let absmax = channel_absmax(&m, &tensors);
        let (s, done) = qdq::smooth(&m, &policy, &absmax, 0.5).unwrap();
        s.validate().unwrap();
        assert_eq!(done.len(), 3);
        let record = qdq::smoothing_record(&s).unwrap();
        assert!(record.starts_with("alpha=0.5; tensors=3; factors="), "{record}");
        // The fingerprint is the factors': the same smoothing gives the same one, other statistics another.
        let fp = qdq::smoothing_fingerprint(&s).unwrap();
        assert_eq!(fp.len(), 16);
        assert_eq!(qdq::smoothing_fingerprint(&qdq::smooth(&m, &policy, &absmax, 0.5).unwrap().0), Some(fp));
        assert_ne!(qdq::smoothing_fingerprint(&qdq::smooth(&m, &policy, &absmax, 0.8).unwrap().0), Some(fp));
        assert_eq!(qdq::smoothing_record(&m), None);

        // Same function: logits agree to float rounding.
        let (a, b) = (logits(&m), logits(&s));
        let scale = a.iter().fold(0f32, |x, v| x.max(v.abs()));
        assert!(max_abs_diff(&a, &b) <= 1e-4 * scale.max(1.0), "{ln:?}: {} vs scale {scale}", max_abs_diff(&a, &b));

        // The smoothed tensors' channel maxima are the calibrated ones divided by the factors.
        let smoothed: Vec<String> = done.iter().map(|d| d.smoothed_tensor.clone()).collect();
        let after = channel_absmax(&s, &smoothed);
        for d in &done {
            let before = &absmax[&d.site.tensor];
            for (j, ((x, f), y)) in before.iter().zip(&d.factors).zip(&after[&d.smoothed_tensor]).enumerate() {
                assert!(
                    (x / f - y).abs() <= 1e-4 * (x / f).abs().max(1e-3),
                    "{} channel {j}: {x}/{f} vs {y}",
                    d.site.tensor
                );
            }
        }
        let emb = &done[0];
        assert!(emb.spread_before > 10.0, "the outlier channel dominates: {}", emb.spread_before);
        assert!(emb.spread_after < emb.spread_before / 3.0, "{} -> {}", emb.spread_before, emb.spread_after);
        // α = 0.5: s_j = sqrt(max|X_j| / max|W_j|), so the outlier channel gets the largest factor.
        let top = emb.factors.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
        assert_eq!(top, OUTLIER);

        // The residual path still reads the original tensor (restored by one Mul), the last LN needs no Mul.
        let g = s.graph();
        let muls: Vec<_> = g.node.iter().filter(|n| n.name().ends_with("_unsmooth")).collect();
        assert_eq!(muls.len(), 2);
        assert_eq!(muls[0].output[0], emb.site.tensor);
        assert!(g.producer_of(&done[2].site.tensor).is_none());
        // Replaced originals are gone, so the model does not grow by a second copy of its weights.
        assert_eq!(g.initializer.len(), m.graph().initializer.len() + 2);
    }
}

#[test]
fn smoothing_lowers_the_int8_error_of_an_outlier_channel() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let m = with_outlier(ln);
        let (q_fp32, l_fp32) = query_and_logits(&m);
        let plain = unsmoothed("tensorrt");
        let (q, _) = qdq::quantize(&m, &ranges(&m, &plain), &plain).unwrap();
        let (q_plain, l_plain) = query_and_logits(&q);

        let policy = smoothing_policy(0.5);
        let tensors: Vec<String> = qdq::smoothing_sites(&m, &policy).unwrap().into_iter().map(|s| s.tensor).collect();
        let (s, _) = qdq::smooth(&m, &policy, &channel_absmax(&m, &tensors), 0.5).unwrap();
        let (qs, plan) = qdq::quantize(&s, &ranges(&s, &policy), &policy).unwrap();
        assert!(plan.skipped.is_empty(), "{plan}");
        // Every MatMul still reads only dequantized inputs.
        let cov = qdq::coverage(&qs);
        let mm = &cov.by_op["MatMul"];
        assert_eq!(mm.covered, mm.nodes, "{cov:?}");
        let (q_smooth, l_smooth) = query_and_logits(&qs);
        // The query projection reads the outlier LayerNorm directly: its INT8 error drops by more than half.
        let (e_plain, e_smooth) = (max_abs_diff(&q_fp32, &q_plain), max_abs_diff(&q_fp32, &q_smooth));
        assert!(e_smooth < e_plain * 0.5, "{ln:?}: query error {e_smooth} smoothed vs {e_plain} plain");
        // And the logits, after every other quantized tensor, are closer too.
        let (e_plain, e_smooth) = (max_abs_diff(&l_fp32, &l_plain), max_abs_diff(&l_fp32, &l_smooth));
        assert!(e_smooth < e_plain, "{ln:?}: logit error {e_smooth} smoothed vs {e_plain} plain");
    }
}

fn ranges(m: &Model, p: &Policy) -> qdq::Ranges {
    let t = qdq::tensors_to_calibrate(m, p).unwrap();
    observed_ranges(m, &t)
}

#[test]
fn layers_sharing_their_weights_are_smoothed_with_one_set_of_factors() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let m = albert_like(ln);
        // Q, K, V, attention output, FFN up and down read by both layers, the QA head by one.
        let readers = |m: &Model| {
            let g = m.graph();
            let mut n: BTreeMap<String, usize> = BTreeMap::new();
            for node in g.node.iter().filter(|n| n.op_type() == "MatMul" && g.initializer(&n.input[1]).is_some()) {
                *n.entry(node.input[1].clone()).or_default() += 1;
            }
            let mut counts: Vec<usize> = n.into_values().collect();
            counts.sort();
            counts
        };
        assert_eq!(readers(&m), vec![1, 2, 2, 2, 2, 2, 2]);
        let mut policy = smoothing_policy(0.5);
        policy.set("smooth_targets", "all").unwrap();
        let sites = qdq::smoothing_sites(&m, &policy).unwrap();
        let tensors: Vec<String> = sites.iter().map(|s| s.tensor.clone()).collect();
        let absmax = channel_absmax(&m, &tensors);
        let (s, done) = qdq::smooth(&m, &policy, &absmax, 0.5).unwrap();
        s.validate().unwrap();
        assert_eq!(done.len(), 9, "embedding LN, per layer 2 LNs + context + GELU");
        let (a, b) = (logits(&m), logits(&s));
        let scale = a.iter().fold(0f32, |x, v| x.max(v.abs()));
        assert!(max_abs_diff(&a, &b) <= 1e-4 * scale.max(1.0), "{ln:?}: {}", max_abs_diff(&a, &b));
        // Each shared weight is rescaled once and still read by both layers, so the model does not grow.
        assert_eq!(readers(&s), readers(&m), "{ln:?}");
        assert_eq!(big_initializers(&s), big_initializers(&m), "{ln:?}");
        // Sites reading one weight share their factors, taken over both layers' channel maxima.
        for (x, y) in [("attention/output/dense", "attention/output/dense"), ("output/dense", "output/dense")] {
            let at = |l: usize, part: &str| {
                let mm = format!("/bert/encoder/layer.{l}/{part}/MatMul");
                done.iter().find(|d| d.site.matmuls == [mm.clone()]).unwrap_or_else(|| panic!("{mm}"))
            };
            let (s0, s1) = (at(0, x), at(1, y));
            assert_eq!(s0.factors, s1.factors, "{ln:?} {x}");
            let (x0, x1) = (&absmax[&s0.site.tensor], &absmax[&s1.site.tensor]);
            assert_ne!(x0, x1, "the layers' activations differ");
        }

        // Quantized, static and dynamic, every weight is still written once.
        for preset in ["tensorrt", "cpu"] {
            let mut p = Policy::preset(preset).unwrap();
            p.set("smooth_targets", "all").unwrap();
            let sites: Vec<String> = qdq::smoothing_sites(&m, &p).unwrap().into_iter().map(|s| s.tensor).collect();
            let (s, _) = qdq::smooth(&m, &p, &channel_absmax(&m, &sites), p.smooth.unwrap()).unwrap();
            let q = qdq::quantize(&s, &ranges(&s, &p), &p).unwrap().0;
            assert_eq!(big_initializers(&q), big_initializers(&m), "{ln:?} {preset}");
            let err = max_abs_diff(&logits(&q), &a);
            assert!(err <= 0.2 * scale.max(1.0), "{ln:?} {preset}: logit error {err}");
        }
        let (q, _) = qdq::quantize_dynamic(&m, &Policy::preset("cpu").unwrap()).unwrap();
        assert_eq!(big_initializers(&q), big_initializers(&m), "{ln:?} dynamic");
    }
}

#[test]
fn bad_statistics_and_strengths_are_errors_naming_the_tensor() {
    let m = tiny_bert(Ln::Decomposed);
    let policy = smoothing_policy(0.5);
    let sites = qdq::smoothing_sites(&m, &policy).unwrap();
    let e = qdq::smooth(&m, &policy, &BTreeMap::new(), 0.5).unwrap_err().to_string();
    assert!(e.contains(&sites[0].tensor), "{e}");
    let short: BTreeMap<String, Vec<f32>> = sites.iter().map(|s| (s.tensor.clone(), vec![1.0; 3])).collect();
    let e = qdq::smooth(&m, &policy, &short, 0.5).unwrap_err().to_string();
    assert!(e.contains(&sites[0].tensor) && e.contains("3 channels") && e.contains(&HIDDEN.to_string()), "{e}");
    let ok: BTreeMap<String, Vec<f32>> = sites.iter().map(|s| (s.tensor.clone(), vec![1.0; HIDDEN])).collect();
    assert!(qdq::smooth(&m, &policy, &ok, 1.5).unwrap_err().to_string().contains("[0, 1]"));
    let mut p = Policy::preset("tensorrt").unwrap();
    let e = p.set("smooth", "lots").unwrap_err().to_string();
    assert!(e.contains("smooth") && e.contains("[0, 1]"), "{e}");
    p.set("smooth", "off").unwrap();
    assert_eq!(p.smooth, None);
}

#[test]
fn all_targets_add_an_explicit_scale_in_front_of_other_matmul_inputs() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let m = with_outlier(ln);
        let mut policy = smoothing_policy(1.0);
        policy.set("smooth_targets", "all").unwrap();
        let sites = qdq::smoothing_sites(&m, &policy).unwrap();
        // The three LayerNorm outputs, plus the attention context (-> attention/output/dense) and the FFN activation
        // (-> output/dense). Q·Kᵀ and probs·V read no constant weight and are not sites.
        let forms: Vec<bool> = sites.iter().map(|s| s.form == SmoothForm::ScaleNode).collect();
        assert_eq!(forms, vec![false, true, false, true, false], "{ln:?}: {sites:?}");
        assert_eq!(sites[1].matmuls, vec!["/bert/encoder/layer.0/attention/output/dense/MatMul".to_string()]);
        assert_eq!(sites[3].matmuls, vec!["/bert/encoder/layer.0/output/dense/MatMul".to_string()]);
        assert!(sites[3].gamma.is_none() && sites[3].channels == FFN);

        let tensors: Vec<String> = sites.iter().map(|s| s.tensor.clone()).collect();
        let absmax = channel_absmax(&m, &tensors);
        let (s, done) = qdq::smooth(&m, &policy, &absmax, 1.0).unwrap();
        s.validate().unwrap();
        let (a, b) = (logits(&m), logits(&s));
        let scale = a.iter().fold(0f32, |x, v| x.max(v.abs()));
        assert!(max_abs_diff(&a, &b) <= 1e-4 * scale.max(1.0), "{ln:?}: {}", max_abs_diff(&a, &b));
        // α = 1 makes every channel's max 1 (channels that were all zero keep factor 1).
        let smoothed: Vec<String> = done.iter().map(|d| d.smoothed_tensor.clone()).collect();
        for (t, maxes) in channel_absmax(&s, &smoothed) {
            for (j, v) in maxes.iter().enumerate() {
                assert!(*v == 0.0 || (v - 1.0).abs() < 1e-3, "{t} channel {j}: {v}");
            }
        }
        // The explicit scale: one Mul reading the original tensor, the MatMul reading its output; the original
        // tensor keeps its producer and name.
        let g = s.graph();
        let ctx = &done[1];
        let mul = g.node.iter().find(|n| n.output.first() == Some(&ctx.smoothed_tensor)).unwrap();
        assert_eq!((mul.op_type(), mul.input[0].as_str()), ("Mul", ctx.site.tensor.as_str()));
        assert!(g.producer_of(&ctx.site.tensor).is_some());
        let quantized = qdq::quantize(&s, &ranges(&s, &policy), &policy).unwrap().0;
        let cov = qdq::coverage(&quantized);
        assert_eq!(cov.by_op["MatMul"].covered, cov.by_op["MatMul"].nodes);
    }
}

#[test]
fn other_targets_smooth_only_what_no_layer_norm_produces() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let m = with_outlier(ln);
        let mut policy = smoothing_policy(1.0);
        policy.set("smooth_targets", "others").unwrap();
        let sites = qdq::smoothing_sites(&m, &policy).unwrap();
        // The attention context and the FFN activation only: each LayerNorm output keeps its one tensor for the
        // MatMuls and the residual Add (no Mul restoring it).
        let got: Vec<(&str, bool)> =
            sites.iter().map(|s| (s.matmuls[0].as_str(), s.form == SmoothForm::ScaleNode)).collect();
        assert_eq!(
            got,
            vec![
                ("/bert/encoder/layer.0/attention/output/dense/MatMul", true),
                ("/bert/encoder/layer.0/output/dense/MatMul", true)
            ],
            "{ln:?}"
        );
        let tensors: Vec<String> = sites.iter().map(|s| s.tensor.clone()).collect();
        let (s, done) = qdq::smooth(&m, &policy, &channel_absmax(&m, &tensors), 1.0).unwrap();
        assert_eq!(done.len(), 2);
        let (a, b) = (logits(&m), logits(&s));
        let scale = a.iter().fold(0f32, |x, v| x.max(v.abs()));
        assert!(max_abs_diff(&a, &b) <= 1e-4 * scale.max(1.0), "{ln:?}: {}", max_abs_diff(&a, &b));
        let muls = |m: &onnx_ir::Model| m.graph().node.iter().filter(|n| n.op_type() == "Mul").count();
        assert_eq!(muls(&s), muls(&m) + 2, "{ln:?}: one Mul per site, none on a LayerNorm's residual path");
    }
}

/// The two smoothing invariants live in qdq, so every caller of `plan` / `quantize` gets them: a smoothing
/// policy's ranges are planned on the smoothed model only, and statistics of smoothing runs are not merged.
#[test]
fn smoothing_policy_needs_a_smoothed_model() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let m = with_outlier(ln);
        let policy = Policy::preset("tensorrt").unwrap();
        let e = qdq::plan(&m, &qdq::Ranges::new(), &policy).unwrap_err();
        assert!(matches!(e, qdq::Error::NotSmoothed { alpha } if alpha == 1.0), "{e}");
        assert!(e.to_string().contains("model_smoothed.onnx") && e.to_string().contains("smooth=off"), "{e}");
        assert!(matches!(qdq::check_mergeable(&m, &policy), Err(qdq::Error::MergeWithSmoothing)));

        let tensors: Vec<String> = qdq::smoothing_sites(&m, &policy).unwrap().into_iter().map(|s| s.tensor).collect();
        let (s, _) = qdq::smooth(&m, &policy, &channel_absmax(&m, &tensors), 1.0).unwrap();
        let plan = qdq::plan(&s, &ranges(&s, &policy), &policy).unwrap();
        assert!(!plan.tensors.is_empty());
        // Without smoothing in the policy, the raw model plans and merges as before.
        let off = unsmoothed("tensorrt");
        qdq::plan(&m, &ranges(&m, &off), &off).unwrap();
        qdq::check_mergeable(&m, &off).unwrap();
    }
}

/// `m` smoothed by `policy` at `sites` (alpha 1), checked to give the same logits relative to their scale (this model's
/// are below 0.2; float rounding moves them by ~1e-7 here, a context channel divided by its neighbour's factor by
/// ~1e-3): the smoothed model, what was done, its logits and their scale.
fn smoothed_alike(
    m: &Model,
    policy: &Policy,
    sites: &[qdq::SmoothSite],
) -> (Model, Vec<qdq::SmoothedSite>, Vec<f32>, f32) {
    let tensors: Vec<String> = sites.iter().map(|s| s.tensor.clone()).collect();
    let (s, done) = qdq::smooth(m, policy, &channel_absmax(m, &tensors), 1.0).unwrap();
    s.validate().unwrap();
    let (a, b) = (logits(m), logits(&s));
    let scale = a.iter().fold(0f32, |x, v| x.max(v.abs()));
    assert!(max_abs_diff(&a, &b) <= 1e-5 * scale, "{} of {scale}", max_abs_diff(&a, &b));
    (s, done, b, scale)
}

/// With `smooth_context = projection` (`cpu`), an attention context is divided in its value projection (the weight's
/// columns and the bias), whether `P·V` stays float (the preset) or is quantized (tune's all-integer candidate, or
/// `tensorrt` given the option): no `Mul`, the same function, and every channel of the smoothed context at max 1, on
/// two heads (a wrong head/lane order would change the logits); each layout quantizes it into a model ONNX Runtime
/// runs. Where the context's factors are shared (ALBERT: one output projection for every layer) or the policy says
/// `mul` (`tensorrt`), the `Mul` stays.
#[test]
fn an_attention_context_is_divided_in_its_value_projection() {
    let ctx_of = |layer: usize| format!("/bert/encoder/layer.{layer}/attention/output/dense/MatMul");
    let with = |preset: &str, key: &str, value: &str| {
        let mut p = unsplit(preset);
        p.set(key, value).unwrap();
        p
    };
    let policies =
        [unsplit("cpu"), with("cpu", "matmul_const_b_only", "false"), with("tensorrt", "smooth_context", "projection")];
    let models = [two_heads(onnx_ir::tiny_bert::GraphForm::Hf, 0, 5), tiny_bert(Ln::Fused)];
    for (m, policy) in models.iter().flat_map(|m| policies.iter().map(move |p| (m, p))) {
        let (m, policy) = (m.clone(), policy.clone());
        let sites = qdq::smoothing_sites(&m, &policy).unwrap();
        let contexts: Vec<_> =
            sites.iter().filter(|s| s.matmuls[0].ends_with("attention/output/dense/MatMul")).collect();
        assert!(!contexts.is_empty());
        for (layer, site) in contexts.iter().enumerate() {
            assert_eq!(site.matmuls[0], ctx_of(layer));
            let value = format!("/bert/encoder/layer.{layer}/attention/self/value/MatMul");
            assert!(
                matches!(&site.form, SmoothForm::ValueProjection { matmul, bias: Some(_), .. } if *matmul == value),
                "{site:?}"
            );
        }
        // The FFN activation has no linear producer: it keeps its Mul (`tensorrt`), or is not smoothed (`cpu`,
        // `smooth_targets = layernorm-context`).
        let ffn: Vec<_> = sites
            .iter()
            .filter(|s| s.matmuls[0].ends_with("/output/dense/MatMul") && !s.matmuls[0].contains("attention"))
            .collect();
        match policy.smooth_targets {
            SmoothTargets::LayerNormContext => assert!(ffn.is_empty(), "{ffn:?}"),
            _ => assert!(!ffn.is_empty() && ffn.iter().all(|s| s.form == SmoothForm::ScaleNode), "{ffn:?}"),
        }

        let (s, done, b, scale) = smoothed_alike(&m, &policy, &sites);
        let g = s.graph();
        let muls = |m: &Model| m.graph().node.iter().filter(|n| n.op_type() == "Mul").count();
        let lns = done.iter().filter(|d| d.site.other_readers && d.site.gamma.is_some()).count();
        let ffn = done.iter().filter(|d| d.site.form == SmoothForm::ScaleNode).count();
        assert_eq!(muls(&s), muls(&m) + lns + ffn, "no Mul for the contexts");
        let ctx: Vec<_> = done.iter().filter(|d| matches!(d.site.form, SmoothForm::ValueProjection { .. })).collect();
        for d in &ctx {
            let writer = g.producer_of(&d.smoothed_tensor).map(|i| g.node[i].op_type());
            assert_eq!(writer, Some("Reshape"));
            assert!(g.producer_of(&d.site.tensor).is_none(), "the unsmoothed context is gone");
        }
        let smoothed: Vec<String> = ctx.iter().map(|d| d.smoothed_tensor.clone()).collect();
        for (t, maxes) in channel_absmax(&s, &smoothed) {
            assert!(maxes.iter().all(|v| *v == 0.0 || (v - 1.0).abs() < 1e-3), "{t}: {maxes:?}");
        }
        // Each layout quantizes it into a model ONNX Runtime runs, near the float one (the ranges are the smoothed
        // model's own).
        let quantized = qdq::quantize(&s, &ranges(&s, &policy), &policy).unwrap().0;
        quantized.validate().unwrap();
        let q = logits(&quantized);
        assert!(q.len() == b.len() && max_abs_diff(&q, &b) <= 0.2 * scale, "{} of {scale}", max_abs_diff(&q, &b));
    }
    // Tune calibrates the `cpu` preset with its attention MatMuls' inputs added (for the all-integer candidate): the
    // smoothing is the preset's either way, so its preset candidate is the preset's model.
    for m in &models {
        assert_eq!(qdq::smoothing_sites(m, &policies[0]).unwrap(), qdq::smoothing_sites(m, &policies[1]).unwrap());
    }
    for (m, policy) in [
        (albert_like(Ln::Fused), unsplit("cpu")),
        (tiny_bert(Ln::Fused), Policy::preset("tensorrt").unwrap()),
        (tiny_bert(Ln::Fused), with("cpu", "smooth_context", "mul")),
    ] {
        let sites = qdq::smoothing_sites(&m, &policy).unwrap();
        assert!(sites.iter().all(|s| !matches!(s.form, SmoothForm::ValueProjection { .. })), "{sites:?}");
        assert!(sites.iter().any(|s| s.matmuls[0] == ctx_of(0) && s.form == SmoothForm::ScaleNode), "{sites:#?}");
    }
}

/// On ONNX Runtime's fused form (`Attention` with a packed `[in, 3 · hidden]` QKV weight), `smooth_context =
/// projection` divides the context in the V third of the packed weight's columns and of its bias: no `Mul`, the same
/// function on two heads, every channel of the smoothed context at max 1, and the `cpu` preset's model (`QAttention`)
/// near the float one. A packed weight two layers share keeps the `Mul` (its V columns cannot take two layers'
/// factors).
#[test]
fn a_fused_attention_context_is_divided_in_its_packed_value_weight() {
    use onnx_ir::tiny_bert::{GraphForm, TinyBertConfig};
    let m = two_heads(GraphForm::OrtFused, 0, 5);
    let policy = unsplit("cpu");
    let sites = qdq::smoothing_sites(&m, &policy).unwrap();
    let contexts: Vec<_> = sites.iter().filter(|s| s.matmuls[0].ends_with("attention/output/dense/MatMul")).collect();
    assert_eq!(contexts.len(), 2, "{sites:#?}");
    for (layer, site) in contexts.iter().enumerate() {
        let want = SmoothForm::PackedValue { attention: format!("Attention_{layer}"), offset: 2 * HIDDEN };
        assert_eq!(site.form, want);
    }
    let (s, done, b, scale) = smoothed_alike(&m, &policy, &sites);
    let muls = |m: &Model| m.graph().node.iter().filter(|n| n.op_type() == "Mul").count();
    let restoring = done.iter().filter(|d| d.site.other_readers && d.site.gamma.is_some()).count();
    assert_eq!(muls(&s), muls(&m) + restoring, "no Mul for the contexts");
    let smoothed: Vec<String> = done
        .iter()
        .filter(|d| matches!(d.site.form, SmoothForm::PackedValue { .. }))
        .map(|d| d.smoothed_tensor.clone())
        .collect();
    assert_eq!(smoothed.len(), 2);
    for t in &smoothed {
        let writer = s.graph().producer_of(t).map(|i| s.graph().node[i].op_type());
        assert_eq!(writer, Some("Attention"));
    }
    for (t, maxes) in channel_absmax(&s, &smoothed) {
        assert!(maxes.iter().all(|v| *v == 0.0 || (v - 1.0).abs() < 1e-3), "{t}: {maxes:?}");
    }
    let quantized = qdq::quantize(&s, &ranges(&s, &policy), &policy).unwrap().0;
    quantized.validate().unwrap();
    assert!(quantized.graph().node.iter().any(|n| n.op_type() == "QAttention"));
    let q = logits(&quantized);
    assert!(max_abs_diff(&q, &b) <= 0.2 * scale, "{} of {scale}", max_abs_diff(&q, &b));

    let shared = onnx_ir::tiny_bert::build(&TinyBertConfig {
        form: GraphForm::OrtFused,
        layers: 2,
        shared_layers: true,
        ..Default::default()
    });
    let sites = qdq::smoothing_sites(&shared, &policy).unwrap();
    assert!(sites.iter().all(|s| !matches!(s.form, SmoothForm::PackedValue { .. })), "{sites:#?}");

    // `qkv_hidden_sizes` whose sum passes usize (read from the file): no match there, never an overflow.
    let mut huge = m.clone();
    let n = huge.graph_mut().node.iter_mut().find(|n| n.name() == "Attention_0").unwrap();
    n.attribute.push(onnx_ir::attr_ints("qkv_hidden_sizes", &[i64::MAX, i64::MAX, HIDDEN as i64]));
    let sites = qdq::smoothing_sites(&huge, &policy).unwrap();
    let packed = |layer: usize| SmoothForm::PackedValue { attention: format!("Attention_{layer}"), offset: 2 * HIDDEN };
    assert!(sites.iter().all(|s| s.form != packed(0)) && sites.iter().any(|s| s.form == packed(1)), "{sites:#?}");
}

/// `smooth_targets = layernorm-context` (the `cpu` preset) smooths what `all` does except the FFN's inner activation
/// (the GELU output read by the down projection): LayerNorm outputs, also the `Gemm` form's `[B·S, H]` views of them,
/// and attention contexts, also ALBERT's shared ones (with their `Mul`) and those the `Gemm` form reshapes; the
/// smoothed model computes what the original does.
#[test]
fn layernorm_context_leaves_out_only_the_gelu_outputs() {
    use onnx_ir::tiny_bert::GraphForm;
    let policy = |targets: &str| {
        let mut p = Policy::preset("cpu").unwrap();
        p.set("smooth_targets", targets).unwrap();
        p
    };
    assert_eq!(Policy::preset("cpu").unwrap().smooth_targets, SmoothTargets::LayerNormContext);
    let models = [
        ("hf", two_heads(GraphForm::Hf, 0, 5)),
        ("gemm", two_heads(GraphForm::Gemm, 0, 5)),
        ("albert", albert_like(Ln::Fused)),
        ("decomposed", tiny_bert(Ln::Decomposed)),
    ];
    for (form, m) in models {
        let all = qdq::smoothing_sites(&m, &policy("all")).unwrap();
        let kept = qdq::smoothing_sites(&m, &policy("layernorm-context")).unwrap();
        let gelu = |s: &qdq::SmoothSite| {
            let n = &s.matmuls[0];
            n.contains("/output/dense") && !n.contains("attention")
        };
        let expected: Vec<_> = all.iter().filter(|s| !gelu(s)).cloned().collect();
        assert_eq!(kept, expected, "{form}");
        // Per layer one GELU output left out; every LayerNorm output (the embeddings' and 2 per layer, the last one
        // read by the QA head) and each context kept; the `Gemm` form reshapes a LayerNorm output once per reader
        // (query, key, value: a site each).
        let layers = m.graph().node.iter().filter(|n| n.name().ends_with("intermediate/dense/MatMul")).count()
            + m.graph().node.iter().filter(|n| n.name().ends_with("intermediate/dense/Gemm")).count();
        let per_layer = if form == "gemm" { 5 } else { 3 };
        assert!(layers > 0);
        assert_eq!((all.len() - kept.len(), kept.len()), (layers, per_layer * layers + 1), "{form}: {kept:#?}");
        let tensors: Vec<String> = kept.iter().map(|s| s.tensor.clone()).collect();
        let (s, _) = qdq::smooth(&m, &policy("layernorm-context"), &channel_absmax(&m, &tensors), 1.0).unwrap();
        let (a, b) = (logits(&m), logits(&s));
        let scale = a.iter().fold(0f32, |x, v| x.max(v.abs()));
        assert!(max_abs_diff(&a, &b) <= 1e-5 * scale.max(1e-3), "{form}: {} of {scale}", max_abs_diff(&a, &b));
    }
    // PyTorch's ALBERT export: the first layer's query, key and value read the embedding projection's output (no
    // LayerNorm), sharing their weights with the later layers, which read LayerNorm outputs: the group is smoothed
    // (every LayerNorm output `all` smooths still is); the shared down projection's GELU outputs are not.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/forms/torch_albert_dynamo.onnx");
    let albert = Model::load(&path).unwrap();
    let all = qdq::smoothing_sites(&albert, &policy("all")).unwrap();
    let kept = qdq::smoothing_sites(&albert, &policy("layernorm-context")).unwrap();
    let lns = |sites: &[qdq::SmoothSite]| sites.iter().filter(|s| s.gamma.is_some()).count();
    assert!(lns(&all) > 1 && lns(&kept) == lns(&all), "{kept:#?}");
    assert!(kept.len() < all.len() && kept.iter().all(|s| all.contains(s)), "{kept:#?}");
}

/// `smooth_layernorm = mul`: a LayerNorm output the residual path also reads keeps γ and β and its readers; its MatMuls
/// read it through one `Mul` by 1/s (which OpenVINO fuses with the pair), so no restoring `Mul` is added; one that
/// only MatMuls read keeps γ / β absorbing the division. The function is the same.
#[test]
fn a_layer_norm_read_by_the_residual_path_is_divided_by_a_mul_in_front_of_its_matmuls() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let m = with_outlier(ln);
        let mut policy = smoothing_policy(0.5);
        policy.set("smooth_layernorm", "mul").unwrap();
        let sites = qdq::smoothing_sites(&m, &policy).unwrap();
        let forms: Vec<(bool, bool)> =
            sites.iter().map(|s| (s.form == SmoothForm::ScaleNode, s.other_readers)).collect();
        // The embeddings LayerNorm (Q, K, V and the residual Add) and the attention output's (the FFN and the
        // residual Add) by a Mul; the last one (qa_outputs alone) in γ / β.
        assert_eq!(forms, vec![(true, true), (true, true), (false, false)], "{ln:?}");
        assert!(sites[0].gamma.is_none() && sites[2].gamma.is_some());
        let tensors: Vec<String> = sites.iter().map(|s| s.tensor.clone()).collect();
        let absmax = channel_absmax(&m, &tensors);
        let (s, done) = qdq::smooth(&m, &policy, &absmax, 0.5).unwrap();
        s.validate().unwrap();
        let (a, b) = (logits(&m), logits(&s));
        let scale = a.iter().fold(0f32, |x, v| x.max(v.abs()));
        assert!(max_abs_diff(&a, &b) <= 1e-4 * scale.max(1.0), "{ln:?}: {}", max_abs_diff(&a, &b));
        let g = s.graph();
        let emb = &done[0];
        // γ and β as they were; the dividing Mul reads the LayerNorm output, the residual Add reads it too.
        assert!(g.initializer("bert.embeddings.LayerNorm.weight").is_some());
        let mul = g.node.iter().find(|n| n.output.first() == Some(&emb.smoothed_tensor)).unwrap();
        assert_eq!((mul.op_type(), mul.input[0].as_str()), ("Mul", emb.site.tensor.as_str()));
        let readers: Vec<&str> =
            g.node.iter().filter(|n| n.input.contains(&emb.site.tensor)).map(|n| n.op_type()).collect();
        assert_eq!(readers, ["Mul", "Add"], "{ln:?}: the residual reads the LayerNorm output itself");
        assert!(!g.node.iter().any(|n| n.name().ends_with("_unsmooth")), "{ln:?}: no restoring Mul");
        let quantized = qdq::quantize(&s, &ranges(&s, &policy), &policy).unwrap().0;
        let cov = qdq::coverage(&quantized);
        assert_eq!(cov.by_op["MatMul"].covered, cov.by_op["MatMul"].nodes);
    }
}
