//! Exact Q/DQ placement on tiny BERT under the TensorRT preset, and ORT execution of every preset.
use std::collections::{BTreeSet, HashMap};

use crate::common::*;
use onnx_ir::Model;
use qdq::{PRESETS, Policy};

const LAYER: &str = "/bert/encoder/layer.0";

fn ranges_for(model: &Model, policy: &Policy) -> qdq::Ranges {
    let tensors = qdq::tensors_to_calibrate(model, policy).unwrap();
    observed_ranges(model, &tensors)
}

/// Producer op type of every tensor.
fn producers(m: &Model) -> HashMap<String, String> {
    m.graph().node.iter().flat_map(|n| n.output.iter().map(|o| (o.clone(), n.op_type().to_string()))).collect()
}

fn node<'a>(m: &'a Model, name: &str) -> &'a onnx_ir::proto::NodeProto {
    m.graph().node.iter().find(|n| n.name() == name).unwrap_or_else(|| panic!("no node {name}"))
}

fn input_is_dq(m: &Model, node_name: &str, slot: usize) -> bool {
    let p = producers(m);
    p.get(&node(m, node_name).input[slot]).map(String::as_str) == Some("DequantizeLinear")
}

/// The seeds' (000/001) placement, which `ort-compatible` reproduces.
#[test]
fn seed_placement_on_tiny_bert() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let fp32 = tiny_bert(ln);
        let policy = Policy::preset("ort-compatible").unwrap();
        let ranges = ranges_for(&fp32, &policy);
        let (q, plan) = qdq::quantize(&fp32, &ranges, &policy).unwrap();
        q.validate().unwrap();
        assert!(plan.skipped.is_empty(), "{plan}");
        let cov = qdq::coverage(&q);

        // Weights: one pair each, per-channel on axis 1 with one scale per output column.
        let weights: Vec<_> = cov.pairs.iter().filter(|p| p.tensor.ends_with(".weight")).collect();
        let expect_cols = [
            ("attention/self/query.weight", HIDDEN),
            ("attention/self/key.weight", HIDDEN),
            ("attention/self/value.weight", HIDDEN),
            ("attention/output/dense.weight", HIDDEN),
            ("intermediate/dense.weight", FFN),
            ("output/dense.weight", HIDDEN),
        ];
        for (w, cols) in expect_cols {
            let name = format!("bert.encoder.layer.0.{}", w.replace('/', "."));
            let p = weights.iter().find(|p| p.tensor == name).unwrap_or_else(|| panic!("{name}"));
            assert_eq!((p.axis, p.scales.len(), p.zero_points.iter().all(|&z| z == 0)), (Some(1), cols, true), "{w}");
            assert_eq!(p.consumers.len(), 1);
            assert!(p.quantize_node.is_some(), "TensorRT keeps FP32 weight + Q/DQ pair");
        }
        let qa = weights.iter().find(|p| p.tensor == "qa_outputs.weight").unwrap();
        assert_eq!(qa.scales.len(), 2);

        // Bias Adds: no input behind a DQ. Residual Adds (feeding LayerNorm): both inputs are.
        for dense in [
            "attention/self/query",
            "attention/self/key",
            "attention/self/value",
            "attention/output/dense",
            "intermediate/dense",
            "output/dense",
        ] {
            let add = format!("{LAYER}/{dense}/Add");
            assert!(!input_is_dq(&q, &add, 0) && !input_is_dq(&q, &add, 1), "{add}");
            assert!(input_is_dq(&q, &format!("{LAYER}/{dense}/MatMul"), 0));
            assert!(input_is_dq(&q, &format!("{LAYER}/{dense}/MatMul"), 1));
        }
        assert!(!input_is_dq(&q, "/qa_outputs/Add", 0) && !input_is_dq(&q, "/qa_outputs/Add", 1));
        for residual in
            [format!("{LAYER}/attention/output/Add"), format!("{LAYER}/output/Add"), "/bert/embeddings/Add_1".into()]
        {
            assert!(input_is_dq(&q, &residual, 0) && input_is_dq(&q, &residual, 1), "{residual}");
        }
        // Attention MatMuls take two activations, both quantized.
        for mm in ["MatMul", "MatMul_1"] {
            let n = format!("{LAYER}/attention/self/{mm}");
            assert!(input_is_dq(&q, &n, 0) && input_is_dq(&q, &n, 1), "{n}");
        }

        // Dedicated pairs: the embeddings LayerNorm output feeds Q, K, V and the residual Add,
        // each through its own pair with one consumer.
        let ln0 = if ln == Ln::Fused {
            "/bert/embeddings/LayerNorm/LayerNormalization_output_0"
        } else {
            "/bert/embeddings/LayerNorm/Add_1_output_0"
        };
        let ln0_pairs: Vec<_> = cov.pairs.iter().filter(|p| p.tensor == ln0).collect();
        assert_eq!(ln0_pairs.len(), 4);
        assert!(ln0_pairs.iter().all(|p| p.consumers.len() == 1));
        let readers: BTreeSet<&str> = ln0_pairs.iter().map(|p| p.consumers[0].0.as_str()).collect();
        assert_eq!(readers.len(), 4);

        // No output quantization: outputs of quantized MatMul/Add get a pair only when another
        // quantized node reads them (ctx MatMul_1 -> dense MatMul); these feed float ops only.
        let float_fed = [
            format!("{LAYER}/attention/self/MatMul_output_0"),
            format!("{LAYER}/attention/output/Add_output_0"),
            format!("{LAYER}/output/Add_output_0"),
            "/bert/embeddings/Add_1_output_0".to_string(),
            "/qa_outputs/MatMul_output_0".to_string(),
        ];
        for t in &float_fed {
            assert!(!cov.pairs.iter().any(|p| &p.tensor == t), "{t} is quantized");
        }
        let mut with_outputs = policy.clone();
        with_outputs.set("quantize_outputs", "true").unwrap();
        let more = ranges_for(&fp32, &with_outputs);
        let (q2, _) = qdq::quantize(&fp32, &more, &with_outputs).unwrap();
        let cov2 = qdq::coverage(&q2);
        for t in &float_fed {
            assert!(cov2.pairs.iter().any(|p| &p.tensor == t), "{t} not quantized with quantize_outputs");
        }

        // Everything the plan quantizes from ranges is exactly what tensors_to_calibrate asked for.
        let calibrated: BTreeSet<String> = qdq::tensors_to_calibrate(&fp32, &policy).unwrap().into_iter().collect();
        let activations: BTreeSet<String> =
            cov.pairs.iter().filter(|p| !p.is_initializer).map(|p| p.tensor.clone()).collect();
        assert_eq!(calibrated, activations);
        // 7 weight pairs, the rest activations (the embeddings Add reads two Gathers; LN outputs have 4/2/1 pairs).
        assert_eq!(cov.pairs.len(), 24, "{plan}");
    }
}

#[test]
fn residual_add_skip_and_exclusions() {
    let fp32 = tiny_bert(Ln::Fused);
    let mut policy = unsmoothed("tensorrt");
    policy.set("residual_add", "skip").unwrap();
    policy.set("shared_pair_feeds_all", "false").unwrap();
    policy.set("exclude_nodes", "/qa_outputs/*").unwrap();
    policy.set("exclude_tensors", "*Softmax_output_0").unwrap();
    let ranges = ranges_for(&fp32, &unsmoothed("tensorrt"));
    let (q, plan) = qdq::quantize(&fp32, &ranges, &policy).unwrap();
    for residual in [format!("{LAYER}/attention/output/Add"), format!("{LAYER}/output/Add")] {
        assert!(!input_is_dq(&q, &residual, 0) && !input_is_dq(&q, &residual, 1), "{residual}");
    }
    assert!(!input_is_dq(&q, "/qa_outputs/MatMul", 0) && !input_is_dq(&q, "/qa_outputs/MatMul", 1));
    assert!(!input_is_dq(&q, &format!("{LAYER}/attention/self/MatMul_1"), 0));
    assert!(input_is_dq(&q, &format!("{LAYER}/attention/self/MatMul_1"), 1));
    assert!(
        plan.skipped.iter().any(|s| s.tensor.ends_with("Softmax_output_0") && s.reason.contains("exclude_tensors"))
    );
    // Without the residual Add, the LN output only has 3 quantized readers (Q, K, V).
    let ln0 = qdq::coverage(&q)
        .pairs
        .iter()
        .filter(|p| p.tensor == "/bert/embeddings/LayerNorm/LayerNormalization_output_0")
        .count();
    assert_eq!(ln0, 3);
    let text = plan.to_string();
    assert!(text.contains("skipped:") && text.contains("weight"), "{text}");
}

#[test]
fn missing_range_is_skipped_or_strict_error() {
    let fp32 = tiny_bert(Ln::Fused);
    let mut policy = unsmoothed("tensorrt");
    policy.set("softmax_range", "calibrated").unwrap(); // else the Softmax output needs no range
    let mut ranges = ranges_for(&fp32, &policy);
    let gone = format!("{LAYER}/attention/self/Softmax_output_0");
    ranges.remove(&gone);
    let plan = qdq::plan(&fp32, &ranges, &policy).unwrap();
    assert!(plan.skipped.iter().any(|s| s.tensor == gone && s.reason.contains("no calibration range")));
    policy.set("strict", "true").unwrap();
    let e = qdq::plan(&fp32, &ranges, &policy).unwrap_err().to_string();
    assert!(e.contains(&gone) && e.contains("MatMul_1") && e.contains("strict"), "{e}");
}

/// Max |a - b| and max |b| over all elements.
fn max_err(a: &ndarray::ArrayD<f32>, b: &ndarray::ArrayD<f32>) -> (f32, f32) {
    let e = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
    (e, b.iter().map(|v| v.abs()).fold(0.0, f32::max))
}

/// Q/DQ placement is judged with graph optimizations off (ORT evaluates Q -> DQ exactly, i.e.
/// fake quantization); with opt level All the CPU EP's integer kernels add their own error
/// (u8s8/s8s8 saturation without VNNI, which `reduce_range` avoids), so there we only require
/// finite outputs.
#[test]
fn every_preset_runs_in_ort_close_to_fp32() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let fp32 = tiny_bert(ln);
        let reference = run(&fp32, &["start_logits"]).remove(0);
        for preset in PRESETS {
            let policy = unsmoothed(preset);
            let ranges = ranges_for(&fp32, &policy);
            let (q, _) = qdq::quantize(&fp32, &ranges, &policy).unwrap();
            q.validate().unwrap();
            for opt in [runtime::OptLevel::Disable, runtime::OptLevel::All] {
                let cfg = runtime::SessionConfig { opt_level: opt, ..Default::default() };
                let mut s = session(&q, &cfg);
                let (ids, mask) = (input_ids(), ndarray::Array2::<i64>::ones((1, SEQ)));
                let feeds = [("input_ids", ids.view()), ("attention_mask", mask.view())];
                let out = s.run(&feeds, &["start_logits"]).unwrap().remove(0);
                assert!(out.iter().all(|v| v.is_finite()));
                let (err, mag) = max_err(&out, &reference);
                eprintln!("{preset} {ln:?} {opt:?}: max |int8 - fp32| = {err:.4} (max |fp32| = {mag:.3})");
                if opt == runtime::OptLevel::Disable {
                    // 8-bit steps on ~10 quantized tensors in sequence: a few % of the magnitude.
                    assert!(err <= 0.05 * mag, "{preset} {ln:?}: error {err} vs magnitude {mag}");
                    assert!(err > 0.0, "{preset}: quantization had no effect");
                }
            }
        }
    }
}

/// An FP32 model has nothing behind a DequantizeLinear, including nodes that read only integer tensors
/// (`Shape(input_ids)`, `Unsqueeze(attention_mask)`), which used to count as covered because no float input failed.
#[test]
fn fp32_model_has_nothing_behind_dq() {
    let fp32 = onnx_ir::tiny_bert::build(&onnx_ir::tiny_bert::TinyBertConfig::default());
    let cov = qdq::coverage(&fp32);
    assert!(cov.by_op.contains_key("Shape") && cov.by_op.contains_key("Unsqueeze"), "{:?}", cov.by_op.keys());
    for (op, c) in &cov.by_op {
        assert_eq!(c.covered, 0, "{op}: {c:?}");
    }
    assert!(cov.pairs.is_empty());
}

/// Issue 16: MatMul-like work the policy does not quantize (here an ORT FusedMatMul, with `op_types` leaving it
/// out) is listed by `coverage` with its float inputs, never silent; the quantized MatMuls are not listed.
#[test]
fn matmul_like_work_left_in_float_is_listed() {
    let mut fp32 = tiny_bert(Ln::Fused);
    let qa = fp32.graph().node.iter().position(|n| n.name() == "/qa_outputs/MatMul").unwrap();
    let n = &mut fp32.graph_mut().node[qa];
    n.op_type = Some("FusedMatMul".into());
    n.domain = Some("com.microsoft".into());
    let mut policy = unsmoothed("cpu");
    policy.set("op_types", "MatMul").unwrap();
    let tensors = qdq::tensors_to_calibrate(&fp32, &policy).unwrap();
    let (q, _) = qdq::quantize(&fp32, &observed_ranges(&fp32, &tensors), &policy).unwrap();
    let float = qdq::coverage(&q).float_matmul_like;
    let names: Vec<(&str, &str)> = float.iter().map(|f| (f.node.as_str(), f.op_type.as_str())).collect();
    // The FusedMatMul, and the attention MatMuls the `cpu` preset leaves in float by design (Q·K and P·V).
    let fused: Vec<(&str, &str)> = names.iter().copied().filter(|(_, op)| *op == "FusedMatMul").collect();
    let attention: Vec<(&str, &str)> = names.iter().copied().filter(|(_, op)| *op != "FusedMatMul").collect();
    assert_eq!(fused, [("/qa_outputs/MatMul", "FusedMatMul")], "{float:?}");
    assert_eq!(attention.len(), 2, "{float:?}");
    assert!(attention.iter().all(|(n, op)| *op == "MatMul" && n.contains("/attention/self/MatMul")), "{float:?}");
    let qa = float.iter().find(|f| f.op_type == "FusedMatMul").unwrap();
    assert_eq!(qa.float_inputs.len(), 2, "activation and weight both float: {float:?}");
    // On the FP32 model every MatMul is listed.
    let all = qdq::coverage(&fp32).float_matmul_like;
    assert_eq!(all.len(), fp32.graph().node.iter().filter(|n| qdq::MATMUL_LIKE.contains(&n.op_type())).count());
}

/// The two forms of integer attention beside int8 activations: `softmax_range = float` quantizes the scores `Q·Kᵀ`
/// and leaves `P·V` (and V) in float; `full-uint8` quantizes `P` as uint8 over [0, 1] (zero point 0, 256 levels)
/// beside int8 `V`. Both run in ONNX Runtime close to FP32.
#[test]
fn attention_scores_alone_or_probabilities_as_uint8() {
    let scores = format!("{LAYER}/attention/self/MatMul");
    let context = format!("{LAYER}/attention/self/MatMul_1");
    for ln in [Ln::Decomposed, Ln::Fused] {
        let fp32 = tiny_bert(ln);
        let reference = run(&fp32, &["start_logits"]).remove(0);
        for softmax in ["float", "full-uint8"] {
            let mut policy = unsmoothed("cpu");
            for (k, v) in [
                ("contrib_ops", "false"),
                ("activations", "int8-symmetric"),
                ("matmul_const_b_only", "false"),
                ("softmax_range", softmax),
            ] {
                policy.set(k, v).unwrap();
            }
            let (q, _) = qdq::quantize(&fp32, &ranges_for(&fp32, &policy), &policy).unwrap();
            q.validate().unwrap();
            assert!(input_is_dq(&q, &scores, 0) && input_is_dq(&q, &scores, 1), "{ln:?} {softmax}");
            let cov = qdq::coverage(&q);
            let probs = cov.pairs.iter().find(|p| p.consumers.contains(&(context.clone(), 0)));
            match softmax {
                "float" => {
                    assert!(!input_is_dq(&q, &context, 0) && !input_is_dq(&q, &context, 1), "{ln:?}: P·V in float");
                    let float: Vec<&str> = cov.float_matmul_like.iter().map(|f| f.node.as_str()).collect();
                    assert_eq!(float, [context.as_str()], "{ln:?}");
                }
                _ => {
                    let p = probs.unwrap_or_else(|| panic!("{ln:?}: no pair on P"));
                    assert_eq!((p.qtype, p.zero_points.as_slice()), (qdq::QuantType::UInt8, &[0][..]), "{ln:?}");
                    assert!((p.scales[0] - 1.0 / 255.0).abs() < 1e-9, "{:?}", p.scales);
                    assert!(input_is_dq(&q, &context, 1), "{ln:?}: V quantized");
                    // Everything else keeps the policy's int8.
                    let others = cov.pairs.iter().filter(|p| !p.is_initializer && p.output != probs.unwrap().output);
                    assert!(others.into_iter().all(|p| p.qtype == qdq::QuantType::Int8), "{ln:?}");
                    assert!(cov.float_matmul_like.is_empty(), "{:?}", cov.float_matmul_like);
                }
            }
            let cfg = runtime::SessionConfig { opt_level: runtime::OptLevel::Disable, ..Default::default() };
            let out = session(&q, &cfg)
                .run(
                    &[("input_ids", input_ids().view()), ("attention_mask", ndarray::Array2::ones((1, SEQ)).view())],
                    &["start_logits"],
                )
                .unwrap()
                .remove(0);
            let (err, mag) = max_err(&out, &reference);
            assert!(err > 0.0 && err <= 0.05 * mag, "{ln:?} {softmax}: error {err} vs magnitude {mag}");
        }
    }
}

/// Issue 75: OpenVINO runs its int8 attention only on operands without a zero point, so `variable_a` makes the scores'
/// A (`Q`) int8 with zero point 0 as `variable_b` does `K`; and `variable_min_depth` leaves `Q·Kᵀ` float when it
/// contracts fewer elements than that (the head size, told from the Reshape that split the heads): AMX's int8 tiles
/// contract 64 bytes.
#[test]
fn attention_operands_without_a_zero_point_and_only_deep_enough() {
    let scores = format!("{LAYER}/attention/self/MatMul");
    for ln in [Ln::Decomposed, Ln::Fused] {
        let fp32 = tiny_bert(ln);
        let mut policy = unsmoothed("openvino");
        policy.set("outlier_channels", "off").unwrap();
        let (q, _) = qdq::quantize(&fp32, &ranges_for(&fp32, &policy), &policy).unwrap();
        q.validate().unwrap();
        assert!(input_is_dq(&q, &scores, 0) && input_is_dq(&q, &scores, 1), "{ln:?}");
        let cov = qdq::coverage(&q);
        for slot in [0, 1] {
            let p = cov.pairs.iter().find(|p| p.consumers.contains(&(scores.clone(), slot))).unwrap();
            assert_eq!((p.qtype, p.zero_points.as_slice()), (qdq::QuantType::Int8, &[0][..]), "{ln:?} input {slot}");
        }
        // The other activations keep their zero points (the fully connected layers' uint8).
        let asymmetric = cov.pairs.iter().filter(|p| !p.is_initializer).any(|p| p.zero_points.iter().any(|&z| z != 0));
        assert!(asymmetric, "{ln:?}");
        // The tiny BERT's one head holds HIDDEN channels: at that depth the scores stay integer, one deeper they are
        // float, and nothing else changes.
        for (depth, integer) in [(HIDDEN, true), (HIDDEN + 1, false)] {
            policy.set("variable_min_depth", &depth.to_string()).unwrap();
            let (d, _) = qdq::quantize(&fp32, &ranges_for(&fp32, &policy), &policy).unwrap();
            assert_eq!(input_is_dq(&d, &scores, 0), integer, "{ln:?} depth {depth}");
            let float: Vec<String> = qdq::coverage(&d).float_matmul_like.into_iter().map(|f| f.node).collect();
            assert_eq!(float.contains(&scores), !integer, "{ln:?} {float:?}");
            assert!(float.iter().all(|n| n.contains("/attention/self/MatMul")), "{float:?}");
        }
        policy.set("variable_min_depth", "0").unwrap();
    }
}
