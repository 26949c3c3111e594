//! Which integer kernels ORT's CPU EP turns the `cpu` preset's MatMuls into (optimized model
//! saved through `SessionConfig::optimized_model_path`, opt level All).
use std::collections::BTreeMap;

use ndarray::Array2;

use crate::common::*;
use onnx_ir::GraphExt as _;

fn optimized_op_counts(preset: &str, ln: Ln, set: &[(&str, &str)]) -> BTreeMap<String, usize> {
    let fp32 = tiny_bert(ln);
    let mut policy = unsmoothed(preset);
    for (k, v) in set {
        policy.set(k, v).unwrap();
    }
    let tensors = qdq::tensors_to_calibrate(&fp32, &policy).unwrap();
    let ranges = observed_ranges(&fp32, &tensors);
    let (q, _) = qdq::quantize(&fp32, &ranges, &policy).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("optimized.onnx");
    let cfg = runtime::SessionConfig { optimized_model_path: Some(path.clone()), ..Default::default() };
    drop(session(&q, &cfg));
    let opt = onnx_ir::Model::load(&path).unwrap();
    let mut counts = BTreeMap::new();
    for n in &opt.graph().node {
        if std::env::var_os("QDQ_SHOW").is_some() {
            eprintln!("  {} {} {:?}", n.op_type(), n.name(), n.input);
        }
        *counts.entry(n.op_type().to_string()).or_insert(0) += 1;
    }
    eprintln!("{preset} {ln:?} {set:?}: {counts:?}");
    counts
}

#[test]
fn cpu_preset_matmuls_become_integer_kernels() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let counts = optimized_op_counts("cpu", ln, &[]);
        // 9 MatMuls: the 7 weighted ones integer kernels with a float output; the 2 attention ones (Q·K with the
        // 1/sqrt(d) scale folded into a FusedMatMul, and P·V) in float, as ORT's dynamic quantization leaves them.
        let to_float = counts.get("MatMulIntegerToFloat").copied().unwrap_or(0);
        let float = ["MatMul", "FusedMatMul"].iter().map(|k| counts.get(*k).copied().unwrap_or(0)).sum::<usize>();
        assert!(to_float == 7 && float == 2, "{counts:?}");
        assert!(!counts.contains_key("QLinearMatMul") && !counts.contains_key("Gemm"), "{counts:?}");
    }
}

/// The `cpu` preset writes each weighted MatMul and its bias `Add` as one `MatMulIntegerToFloat` (ORT's own Q/DQ
/// fusion would leave the Add as a node of its own): the model computes what the Q/DQ form with a separate Add does.
/// The `cpu` layout (with `set` applied) of `fp32` and its plan, and the same in the Q/DQ form (`contrib_ops` off).
fn cpu_and_qdq_forms(fp32: &onnx_ir::Model, set: &[(&str, &str)]) -> (onnx_ir::Model, qdq::Plan, onnx_ir::Model) {
    let mut policy = unsmoothed("cpu");
    for (k, v) in set {
        policy.set(k, v).unwrap();
    }
    let ranges = observed_ranges(fp32, &qdq::tensors_to_calibrate(fp32, &policy).unwrap());
    let (folded, plan) = qdq::quantize(fp32, &ranges, &policy).unwrap();
    policy.set("contrib_ops", "false").unwrap();
    let (plain, _) = qdq::quantize(fp32, &ranges, &policy).unwrap();
    folded.validate().unwrap();
    (folded, plan, plain)
}

/// The two models' start logits agree to 1e-4 of their largest.
fn assert_same_logits(a: &onnx_ir::Model, b: &onnx_ir::Model, what: &str) {
    let (a, b) = (run(a, &["start_logits"]), run(b, &["start_logits"]));
    let scale = a[0].iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = a[0].iter().zip(b[0].iter()).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    assert!(diff <= 1e-4 * scale.max(1.0), "{what} differ by {diff}");
}

#[test]
fn cpu_preset_folds_bias_adds_into_the_integer_kernel() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let fp32 = tiny_bert(ln);
        let (folded, plan, plain) = cpu_and_qdq_forms(&fp32, &[]);
        assert!(folded.proto.opset_import.iter().any(|o| o.domain() == "com.microsoft"), "{ln:?}: domain imported");

        let ops = |m: &onnx_ir::Model, op: &str| m.graph().node.iter().filter(|n| n.op_type() == op).count();
        assert_eq!(ops(&folded, "MatMulIntegerToFloat"), 7, "{ln:?}");
        assert_eq!(ops(&folded, "Add"), ops(&plain, "Add") - 7, "{ln:?}: one bias Add per weighted MatMul folded");
        assert_eq!(plan.contrib.matmul_bias.len(), 7, "{ln:?}");
        for n in folded.graph().node.iter().filter(|n| n.op_type() == "MatMulIntegerToFloat") {
            assert_eq!(n.input.len(), 7, "{}: input, weight, scales, zero points and the bias", n.name());
            assert!(folded.graph().is_initializer(&n.input[6]), "{}", n.name());
        }

        assert_same_logits(&plain, &folded, &format!("{ln:?}: folded and Q/DQ forms"));
    }
}

/// `qdq debug` / `qdq tune` on the `cpu` layout: its `MatMulIntegerToFloat`s, expanded back to Q/DQ form, compute the
/// same logits and expose one activation pair per quantized tensor (none before: the kernels read the QuantizeLinear
/// outputs directly), which the debugging machinery can take out.
#[test]
fn the_cpu_layout_expands_to_the_qdq_form_it_stands_for() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let fp32 = tiny_bert(ln);
        let policy = unsmoothed("cpu");
        let tensors = qdq::tensors_to_calibrate(&fp32, &policy).unwrap();
        let ranges = observed_ranges(&fp32, &tensors);
        let (int8, _) = qdq::quantize(&fp32, &ranges, &policy).unwrap();
        assert!(qdq::activation_pairs(&int8).is_empty(), "{ln:?}: the integer kernels read Q outputs directly");
        let expanded = qdq::expand_integer_matmuls(int8.clone());
        expanded.validate().unwrap();
        let ops = |m: &onnx_ir::Model, op: &str| m.graph().node.iter().filter(|n| n.op_type() == op).count();
        assert_eq!(ops(&expanded, "MatMulIntegerToFloat"), 0, "{ln:?}");
        let pairs = qdq::activation_pairs(&expanded);
        let mut paired: Vec<&str> = pairs.iter().map(|p| p.tensor.as_str()).collect();
        paired.sort_unstable();
        paired.dedup();
        assert_eq!(paired.len(), pairs.len(), "{ln:?}: one pair per quantized tensor, shared by its readers");
        assert_eq!(paired.len(), tensors.len(), "{ln:?}: every calibrated tensor has its pair");

        let (a, b) = (run(&int8, &["start_logits"]), run(&expanded, &["start_logits"]));
        let scale = a[0].iter().fold(0f32, |m, v| m.max(v.abs()));
        let diff = a[0].iter().zip(b[0].iter()).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(diff <= 1e-4 * scale.max(1.0), "{ln:?}: expanded and integer forms differ by {diff}");
        // The float reference (every pair taken out) of the expanded form has none left.
        let reference = qdq::float_reference(&expanded);
        assert!(qdq::activation_pairs(&reference).is_empty());
        assert!(
            ops(&qdq::expand_integer_matmuls(fp32.clone()), "MatMul") == ops(&fp32, "MatMul"),
            "no-op without them"
        );
    }
}

/// With attention's MatMuls quantized too (`matmul_const_b_only = false`), the `cpu` layout writes Q·K and the
/// `1/sqrt(d)` division after it as one `MatMulIntegerToFloat` (the scalar folded into Q's scale): no `Div` left for
/// ONNX Runtime to run after an integer kernel, the same logits as the Q/DQ form, and `qdq debug`'s expansion gives
/// that form back with Q's own pair.
#[test]
fn integer_attention_folds_its_scale_into_the_kernel() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let fp32 = tiny_bert(ln);
        let (folded, plan, plain) = cpu_and_qdq_forms(&fp32, &[("matmul_const_b_only", "false")]);
        let ops = |m: &onnx_ir::Model, op: &str| m.graph().node.iter().filter(|n| n.op_type() == op).count();
        let layers = ops(&fp32, "Softmax");
        assert_eq!(plan.contrib.matmul_scale.len(), layers, "{ln:?}: one Q·K per layer: {:?}", plan.contrib);
        assert_eq!(ops(&folded, "Div"), ops(&plain, "Div") - layers, "{ln:?}");
        assert_eq!(
            ops(&folded, "MatMulIntegerToFloat"),
            7 * layers + 1,
            "{ln:?}: 6 weighted and Q·K a layer, the head"
        );
        assert!(plan.contrib.lines().iter().any(|l| l.contains("scale Div folded in")), "{:?}", plan.contrib.lines());
        assert_same_logits(&plain, &folded, &format!("{ln:?}: the folded and Q/DQ forms"));
        // The scaled attention scores themselves (on a random tiny model the softmax hides a lost scale).
        let scores: Vec<String> = plain
            .graph()
            .node
            .iter()
            .filter(|n| n.op_type() == "Div" && n.name().ends_with("attention/self/Div"))
            .map(|n| n.output[0].clone())
            .collect();
        assert_eq!(scores.len(), layers, "{ln:?}");
        let with_scores = |m: &onnx_ir::Model| {
            let mut m = m.clone();
            for t in &scores {
                m.graph_mut().add_output(t, onnx_ir::DataType::Float);
            }
            run(&m, &scores.iter().map(String::as_str).collect::<Vec<_>>())
        };
        for (a, b) in with_scores(&plain).iter().zip(with_scores(&folded).iter()) {
            let big = a.iter().fold(0f32, |m, v| m.max(v.abs()));
            let diff = a.iter().zip(b.iter()).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
            assert!(big > 0.0 && diff <= 1e-4 * big, "{ln:?}: scores differ by {diff} (largest {big})");
        }
        // Expanded for debugging: Q's pair with Q's own scale (the pairs of the Q/DQ form), the scale after the MatMul.
        let expanded = qdq::expand_integer_matmuls(folded.clone());
        expanded.validate().unwrap();
        assert_eq!(ops(&expanded, "MatMulIntegerToFloat"), 0, "{ln:?}");
        let pairs = |m: &onnx_ir::Model| {
            let mut p: Vec<(String, Vec<u32>)> = qdq::activation_pairs(m)
                .into_iter()
                .map(|p| (p.tensor, p.scales.iter().map(|s| s.to_bits()).collect()))
                .collect();
            p.sort();
            p.dedup();
            p
        };
        assert_eq!(pairs(&expanded), pairs(&plain), "{ln:?}");
        assert_same_logits(&folded, &expanded, &format!("{ln:?}: the folded and expanded forms"));
    }
}

#[test]
fn cpu_preset_with_quantized_outputs_fuses_qlinear_matmul() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        // Every reader through the output pairs (as ORT lays it out): then each MatMul is DQ -> MatMul -> Q.
        let set = [("quantize_outputs", "true"), ("matmul_const_b_only", "false"), ("shared_pair_feeds_all", "true")];
        let counts = optimized_op_counts("cpu", ln, &set);
        let qlinear = counts.get("QLinearMatMul").copied().unwrap_or(0);
        let float = counts.get("MatMul").copied().unwrap_or(0);
        assert!(qlinear >= 7 && qlinear + float == 9, "{counts:?}");
    }
}

#[test]
#[ignore = "exploration: prints layouts"]
fn explore_cpu_layouts() {
    for set in [
        &[("quantize_outputs", "false")][..],
        &[("dedicated_pairs", "true")][..],
        &[("op_types", "MatMul,Add"), ("residual_add", "quantize"), ("quantize_outputs", "true")][..],
    ] {
        optimized_op_counts("cpu", Ln::Fused, set);
    }
}

/// The declared shape of `tensor` in `m`'s value_info.
fn declared(m: &onnx_ir::Model, tensor: &str) -> Option<Vec<Result<i64, String>>> {
    m.graph().value_info.iter().find(|v| v.name() == tensor).and_then(onnx_ir::declared_dims)
}

/// Every quantized model (static, dynamic, every preset) declares the shape of its attention probabilities: each
/// Softmax's input and output, in symbols the two share and no other tensor uses, so that ORT's CPU planner may
/// compute them in place (docs/QUANTIZATION.md). ORT accepts the declaration at other batch sizes and lengths, and
/// the model computes what it computes without it.
#[test]
fn quantized_models_declare_the_attention_probabilities_shape() {
    let feed_of = |m: &onnx_ir::Model, batch: usize, seq: usize| {
        let ids = Array2::from_shape_fn((batch, seq), |(i, j)| ((i * 7 + j * 5 + 3) % VOCAB) as i64);
        let mut feed = vec![("input_ids", ids), ("attention_mask", Array2::<i64>::ones((batch, seq)))];
        if m.graph().input.iter().any(|i| i.name() == "token_type_ids") {
            feed.push(("token_type_ids", Array2::from_shape_fn((batch, seq), |(_, j)| i64::from(j >= seq / 2))));
        }
        feed
    };
    let gemm = tiny_form(onnx_ir::tiny_bert::GraphForm::Gemm, 3);
    for (fp32, matmuls) in [(tiny_bert(Ln::Decomposed), true), (tiny_bert(Ln::Fused), true), (gemm, false)] {
        let mut models = vec![];
        for preset in ["cpu", "tensorrt"] {
            let policy = unsmoothed(preset);
            let tensors = qdq::tensors_to_calibrate(&fp32, &policy).unwrap();
            let ranges = observed_on(&fp32, &tensors, &feed_of(&fp32, 2, SEQ), runtime::OptLevel::default());
            models.push((preset, qdq::quantize(&fp32, &ranges, &policy).unwrap().0));
        }
        if matmuls {
            // The dynamic mode rewrites MatMuls only (a Gemm form has none).
            models.push(("dynamic", qdq::quantize_dynamic(&fp32, &unsmoothed("cpu")).unwrap().0));
        }
        for (what, m) in &models {
            let softmax: Vec<_> = m.graph().node.iter().filter(|n| n.op_type() == "Softmax").collect();
            assert!(!softmax.is_empty(), "{what}");
            for n in softmax {
                let (x, y) = (declared(m, &n.input[0]), declared(m, &n.output[0]));
                assert!(x.as_ref().is_some_and(|d| d.len() == 4) && x == y, "{what} {}: {x:?} {y:?}", n.name());
                let others = m
                    .graph()
                    .value_info
                    .iter()
                    .filter(|v| ![&n.input[0], &n.output[0]].contains(&&v.name().to_string()));
                let theirs: Vec<Result<i64, String>> = others.filter_map(|v| declared(m, v.name())).flatten().collect();
                assert!(x.unwrap().iter().all(|d| !theirs.contains(d)), "{what}: symbols shared with another tensor");
            }
            let mut bare = m.clone();
            bare.graph_mut().value_info.clear();
            for (batch, seq) in [(2, 5), (3, SEQ)] {
                let feed = feed_of(m, batch, seq);
                let a = run_feed(m, &feed, &["start_logits"], runtime::OptLevel::All);
                let b = run_feed(&bare, &feed, &["start_logits"], runtime::OptLevel::All);
                assert_eq!(a[0].shape(), &[batch, seq]);
                let diff = a[0].iter().zip(b[0].iter()).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
                assert!(diff <= 1e-6, "{what} at {batch}x{seq}: differs from the undeclared model by {diff}");
            }
        }
    }
}
