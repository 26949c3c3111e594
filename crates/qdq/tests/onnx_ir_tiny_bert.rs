//! Generic placement invariants on onnx-ir's HF-shaped tiny BERT (2 layers, multi-head
//! attention with Reshape/Transpose, Erf GELU, Split QA head), both LayerNorm forms.
use std::collections::HashMap;

use ndarray::Array2;
use onnx_ir::tiny_bert::{LayerNormKind, TinyBertConfig, build};
use onnx_ir::{GraphExt, Model};
use qdq::Policy;

const SEQ: usize = 12;

/// Token ids, an all-ones mask and two segments, `SEQ` long.
fn feed() -> Vec<(&'static str, Array2<i64>)> {
    vec![
        ("input_ids", Array2::from_shape_fn((1, SEQ), |(_, j)| ((j * 37 + 11) % 1000) as i64)),
        ("attention_mask", Array2::from_elem((1, SEQ), 1i64)),
        ("token_type_ids", Array2::from_shape_fn((1, SEQ), |(_, j)| i64::from(j >= SEQ / 2))),
    ]
}

fn run(model: &Model, outputs: &[&str], opt: runtime::OptLevel) -> Vec<ndarray::ArrayD<f32>> {
    crate::common::run_feed(model, &feed(), outputs, opt)
}

fn observed(model: &Model, tensors: &[String]) -> qdq::Ranges {
    crate::common::observed_on(model, tensors, &feed(), runtime::OptLevel::Disable)
}

fn producer_op<'a>(m: &'a Model, tensor: &str) -> Option<&'a str> {
    m.graph().producer_of(tensor).map(|i| m.graph().node[i].op_type())
}

#[test]
fn presets_place_pairs_by_policy_on_onnx_ir_tiny_bert() {
    for (kind, preset) in [LayerNormKind::Decomposed, LayerNormKind::Fused]
        .into_iter()
        .flat_map(|k| [(k, "ort-compatible"), (k, "tensorrt")])
    {
        // ort-compatible (the seeds' placement) quantizes the residual Adds; tensorrt leaves them in float.
        let residual_quantized = preset == "ort-compatible";
        let fp32 = build(&TinyBertConfig { layer_norm: kind, ..Default::default() });
        let reference = run(&fp32, &["start_logits"], runtime::OptLevel::Disable).remove(0);
        let mut policy = Policy::preset(preset).unwrap();
        policy.set("smooth", "off").unwrap(); // a raw model: smoothing policies are planned on smoothed ones only
        let tensors = qdq::tensors_to_calibrate(&fp32, &policy).unwrap();
        let (q, plan) = qdq::quantize(&fp32, &observed(&fp32, &tensors), &policy).unwrap();
        q.validate().unwrap();
        assert!(plan.skipped.is_empty(), "{plan}");
        let g = q.graph();
        let producer: HashMap<&str, &str> =
            g.node.iter().flat_map(|n| n.output.iter().map(move |o| (o.as_str(), n.op_type()))).collect();
        let is_dq = |t: &str| producer.get(t) == Some(&"DequantizeLinear");
        let (mut weighted, mut residual) = (0, 0);
        for n in &fp32.graph().node {
            let qn = g.node.iter().find(|m| m.name() == n.name()).unwrap();
            let has_bias = n.input.iter().any(|i| i.ends_with(".bias"));
            match n.op_type() {
                "MatMul" => {
                    assert!(qn.input.iter().all(|i| is_dq(i)), "{} not fully quantized", n.name());
                    weighted += usize::from(fp32.graph().is_initializer(&n.input[1]));
                }
                "Add" if has_bias => assert!(!qn.input.iter().any(|i| is_dq(i)), "bias Add {} quantized", n.name()),
                "Add" => {
                    let feeds_ln =
                        fp32.graph().consumers_of(&n.output[0]).iter().any(|&(c, _)| {
                            matches!(fp32.graph().node[c].op_type(), "ReduceMean" | "LayerNormalization")
                        });
                    if residual_quantized {
                        assert_eq!(qn.input.iter().all(|i| is_dq(i)), feeds_ln, "{preset}: Add {}", n.name());
                    } else {
                        assert!(!qn.input.iter().any(|i| is_dq(i)), "{preset}: Add {} reads a DQ", n.name());
                    }
                    residual += usize::from(feeds_ln);
                }
                _ => {}
            }
        }
        // 2 layers x 6 dense + QA head; embeddings Add chain + 2 residuals per layer.
        assert_eq!(weighted, 13);
        assert_eq!(residual, 5); // embeddings Add_1 + 2 per layer
        // tensorrt quantizes Softmax outputs shifted by -0.5 over [-0.5, 0.5]: scale 0.5/127 whatever was
        // calibrated, the pair reading a Sub of the Softmax output; ort-compatible uses the calibrated range.
        let cov = qdq::coverage(&q);
        let reads_softmax = |t: &str| {
            producer_op(&fp32, t) == Some("Softmax")
                || g.producer_of(t).is_some_and(|i| {
                    g.node[i].op_type() == "Sub" && producer_op(&fp32, &g.node[i].input[0]) == Some("Softmax")
                })
        };
        let softmax: Vec<_> = cov.pairs.iter().filter(|p| reads_softmax(&p.tensor)).collect();
        assert_eq!(softmax.len(), 2, "{preset}");
        for p in softmax {
            let shifted = (p.scales[0] - 0.5 / 127.0).abs() < 1e-9;
            assert_eq!(shifted, !residual_quantized, "{preset}: {} scale {}", p.tensor, p.scales[0]);
            assert_eq!(p.tensor.ends_with("_shifted"), shifted, "{preset}: {}", p.tensor);
        }
        for p in qdq::coverage(&q)
            .pairs
            .iter()
            .filter(|p| p.is_initializer && p.tensor.ends_with(".weight") && p.axis.is_some())
        {
            let w = fp32.graph().initializer(&p.tensor).unwrap();
            assert_eq!(p.scales.len() as i64, w.dims[1], "{}", p.tensor);
        }
        let out = run(&q, &["start_logits"], runtime::OptLevel::Disable).remove(0);
        let err = out.iter().zip(&reference).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        let mag = reference.iter().map(|v| v.abs()).fold(0.0, f32::max);
        eprintln!("{kind:?}: max |int8 - fp32| = {err:.5}, max |fp32| = {mag:.5}");
        assert!(err <= 0.05 * mag && err > 0.0, "{err} vs {mag}");
        for preset in qdq::PRESETS {
            let mut p = Policy::preset(preset).unwrap();
            p.set("smooth", "off").unwrap(); // a raw model: smoothing policies are planned on smoothed ones only
            p.set("outlier_channels", "off").unwrap(); // nor split ones
            let t = qdq::tensors_to_calibrate(&fp32, &p).unwrap();
            let (q, _) = qdq::quantize(&fp32, &observed(&fp32, &t), &p).unwrap();
            q.validate().unwrap();
            let out = run(&q, &["start_logits", "end_logits"], runtime::OptLevel::All);
            assert!(out.iter().all(|a| a.iter().all(|v| v.is_finite())), "{preset}");
        }
    }
}

/// The shifted Softmax pair plus its correction computes exactly `Σ_k (DQ(Q(P - 0.5)) + 0.5) · V`.
#[test]
fn shifted_softmax_product_is_exact_for_the_quantized_probabilities() {
    for kind in [LayerNormKind::Decomposed, LayerNormKind::Fused] {
        let fp32 = build(&TinyBertConfig { layer_norm: kind, layers: 1, ..Default::default() });
        let g = fp32.graph();
        let pv = g
            .node
            .iter()
            .find(|n| n.op_type() == "MatMul" && producer_op(&fp32, &n.input[0]) == Some("Softmax"))
            .unwrap();
        let (p_name, v_name, ctx_name) = (pv.input[0].clone(), pv.input[1].clone(), pv.output[0].clone());
        // Quantize only the Softmax output: V and everything else stay float.
        let mut policy = Policy::preset("tensorrt").unwrap();
        policy.set("smooth", "off").unwrap();
        policy.set("include_nodes", pv.name()).unwrap();
        policy.set("exclude_tensors", &v_name).unwrap();
        let (q, plan) = qdq::quantize(&fp32, &qdq::Ranges::new(), &policy).unwrap();
        q.validate().unwrap();
        assert_eq!(plan.tensors.len(), 1, "{plan}");
        assert_eq!(plan.tensors[0].shift, Some(0.5));
        assert!(plan.to_string().contains("shifted"), "{plan}");

        let mut probe = fp32.clone();
        for t in [&p_name, &v_name] {
            probe.graph_mut().add_output(t, onnx_ir::DataType::Float);
        }
        let o = run(&probe, &[&p_name, &v_name], runtime::OptLevel::Disable);
        let (p, v) = (&o[0], &o[1]);
        let mut qm = q.clone();
        qm.graph_mut().add_output(&ctx_name, onnx_ir::DataType::Float);
        let ctx = run(&qm, &[&ctx_name], runtime::OptLevel::Disable).remove(0);
        // p: [b, h, s, s], v: [b, h, s, d]
        let (sh, dv) = (p.shape().to_vec(), v.shape().to_vec());
        let (bh, s, d) = (sh[0] * sh[1], sh[2], dv[3]);
        let scale = 0.5f32 / 127.0;
        let (pf, vf, cf): (Vec<f32>, Vec<f32>, Vec<f32>) =
            (p.iter().copied().collect(), v.iter().copied().collect(), ctx.iter().copied().collect());
        let mut worst = 0f32;
        for h in 0..bh {
            for i in 0..s {
                for c in 0..d {
                    let mut want = 0f32;
                    for k in 0..s {
                        let pk = pf[(h * s + i) * s + k];
                        let q = ((pk - 0.5) / scale).round_ties_even().clamp(-127.0, 127.0);
                        want += (q * scale + 0.5) * vf[(h * s + k) * d + c];
                    }
                    worst = worst.max((want - cf[(h * s + i) * d + c]).abs());
                }
            }
        }
        assert!(worst < 1e-4, "{kind:?}: max |expected - ORT| = {worst}");
    }
}
