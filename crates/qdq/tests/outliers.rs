//! Outlier channels carried in float (policy `outlier_channels`): the split keeps the float model's logits, finds a
//! planted outlier channel, stays out of every pair, and gives the other channels the int8 levels.
use onnx_ir::tiny_bert::{GraphForm, TinyBertConfig};
use onnx_ir::{GraphExt, Model, tensor_from_vec};
use qdq::Policy;

use crate::common::*;

const GELU: &str = "/bert/encoder/layer.0/intermediate/intermediate_act_fn/Mul_1_output_0";
const DOWN: &str = "/bert/encoder/layer.0/output/dense/MatMul";
const FFN_OUT: &str = "/bert/encoder/layer.0/output/dense/Add_output_0";
const PLANTED: usize = 5;

/// `model` with the FFN's channel [`PLANTED`] lifted by its bias, so that the GELU output has one channel far above
/// the others (BERT's GELU outputs have one or two per layer).
fn with_gelu_outlier(mut m: Model) -> Model {
    let g = m.graph_mut();
    let name = "bert.encoder.layer.0.intermediate.dense.bias";
    let t = g.initializer(name).unwrap().clone();
    let mut vals: Vec<f32> = onnx_ir::tensor_to_array::<f32>(&t).unwrap().into_iter().collect();
    vals[PLANTED] = 12.0;
    g.add_initializer(tensor_from_vec::<f32>(name, &[vals.len()], vals).unwrap());
    m
}

/// The `cpu` placement without smoothing (the tiny model is not smoothed) and with outlier channels at 8x.
fn policy() -> Policy {
    let mut p = unsmoothed("cpu");
    p.set("outlier_channels", "8").unwrap();
    p
}

fn without_outliers() -> Policy {
    let mut p = policy();
    p.set("outlier_channels", "off").unwrap();
    p
}

fn logits(m: &Model) -> Vec<f32> {
    run(m, &["start_logits"]).remove(0).into_iter().collect()
}

/// The down projection's output (bias added), the tensor the split changes first.
fn ffn_out(m: &Model) -> Vec<f32> {
    let mut m = m.clone();
    m.graph_mut().add_output(FFN_OUT, onnx_ir::DataType::Float);
    run(&m, &[FFN_OUT]).remove(0).into_iter().collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// The split of `m` under [`policy`], from the channel maxima the FP32 model shows on [`feed`].
fn split(m: &Model) -> (Model, Vec<qdq::OutlierSplit>) {
    let candidates = qdq::outlier_candidates(m, &policy()).unwrap();
    let absmax = channel_absmax_on(m, &candidates, &feed());
    let mut out = m.clone();
    let done = qdq::split_outliers(&mut out, &policy(), &absmax).unwrap();
    (out, done)
}

#[test]
fn the_rule_takes_channels_over_the_ratio_times_the_median_at_most_a_share() {
    let mut absmax = vec![1.0f32; 64];
    absmax[7] = 9.0;
    absmax[40] = 30.0;
    absmax[3] = 7.9;
    assert_eq!(qdq::outlier_channels(&absmax, 8.0), vec![7, 40]);
    // 64 channels: at most 2 (1/32), the largest.
    absmax[10] = 20.0;
    assert_eq!(qdq::outlier_channels(&absmax, 8.0), vec![10, 40]);
    assert!(qdq::outlier_channels(&[0.0; 16], 8.0).is_empty(), "a silent tensor has no outlier");
    // The option takes off or a ratio above 1, and says so.
    let mut p = policy();
    for bad in ["1", "0.5", "eight"] {
        let e = p.set("outlier_channels", bad).unwrap_err().to_string();
        assert!(e.contains("a ratio > 1"), "{bad}: {e}");
    }
    p.set("outlier_channels", "off").unwrap();
    assert_eq!(p.outlier_channels, None);
}

/// The split model computes what the original does (the outlier rows move to the branch, the mask zeroes them in the
/// rest), in the HF and the `Gemm` (transposed weight, bias inside) forms; the planted channel is the one found.
#[test]
fn splitting_keeps_the_float_logits_and_finds_the_planted_channel() {
    let gemm = onnx_ir::tiny_bert::build(&TinyBertConfig { form: GraphForm::Gemm, ..tiny_config(Ln::Fused) });
    for (form, m) in [("hf", tiny_bert(Ln::Fused)), ("gemm", gemm)] {
        let m = with_gelu_outlier(m);
        let (s, done) = split(&m);
        let planted = done.iter().find(|d| d.channels == [PLANTED]).unwrap_or_else(|| panic!("{form}: {done:?}"));
        assert!(planted.max > 8.0 * planted.rest_max, "{form}: {planted:?}");
        assert_eq!(planted.matmuls.len(), 1, "{form}: {planted:?}");
        let d = max_abs_diff(&logits(&s), &logits(&m));
        assert!(d < 1e-4, "{form}: the split model's logits moved by {d}");
        assert!(qdq::outlier_record(&s).is_some_and(|r| r.starts_with("ratio=8")), "{form}");
        let branch = s.graph().node.iter().filter(|n| qdq::is_outlier_branch(n)).count();
        // Mask Mul and Gather per tensor; MatMul and Add per MatMul.
        let want: usize = done.iter().map(|d| 2 + 2 * d.matmuls.len()).sum();
        assert_eq!(branch, want, "{form}");
        // A split model is not split again.
        let mut again = s.clone();
        let absmax = channel_absmax_on(&s, &qdq::outlier_candidates(&s, &policy()).unwrap(), &feed());
        assert!(qdq::split_outliers(&mut again, &policy(), &absmax).is_err(), "{form}");
    }
}

/// Quantized, the split model keeps the outlier in float and gives the rest the int8 levels: the down projection's
/// output stays several times closer to FP32's than the unsplit model's (whose range must span the outlier), the
/// branch has no pair, and the float reference `qdq debug` compares with is the FP32 model again. The unsplit model
/// is refused.
#[test]
fn a_planted_outlier_channel_is_carried_in_float_and_the_rest_keeps_its_levels() {
    let fp32 = with_gelu_outlier(tiny_bert(Ln::Fused));
    let ranges = observed_ranges(&fp32, &qdq::tensors_to_calibrate(&fp32, &without_outliers()).unwrap());
    let (plain, _) = qdq::quantize(&fp32, &ranges, &without_outliers()).unwrap();

    let (s, _) = split(&fp32);
    let tensors = qdq::tensors_to_calibrate(&s, &policy()).unwrap();
    assert!(!tensors.iter().any(|t| t == GELU), "the MatMul reads the rest, not the GELU output: {tensors:?}");
    let ranges_s = observed_ranges(&s, &tensors);
    let (int8, plan) = qdq::quantize(&s, &ranges_s, &policy()).unwrap();
    for t in &plan.tensors {
        let readers = t.pairs.iter().flatten();
        assert!(readers.clone().all(|c| !c.node_name.contains("outliers")), "a branch node got a pair: {t:?}");
    }
    let down = int8.graph().node.iter().find(|n| n.name() == DOWN).unwrap();
    assert_eq!(down.op_type(), "MatMulIntegerToFloat", "the down projection keeps its integer form and its bias");

    let want_ffn = ffn_out(&fp32);
    let (e_plain, e_split) = (max_abs_diff(&ffn_out(&plain), &want_ffn), max_abs_diff(&ffn_out(&int8), &want_ffn));
    assert!(e_split < 0.5 * e_plain, "split {e_split} against unsplit {e_plain}");
    let reference = qdq::float_reference(&qdq::expand_integer_matmuls(int8.clone()));
    // Counted twice, the branch would move the output by the outlier times its weight row (about 0.2 here).
    let weights_only = max_abs_diff(&ffn_out(&reference), &want_ffn);
    assert!(weights_only < e_plain, "the float reference holds the branch once: {weights_only} against {e_plain}");

    let err = qdq::plan(&fp32, &ranges_s, &policy()).unwrap_err();
    assert!(matches!(err, qdq::Error::NotSplit { .. }), "{err}");
}

/// `outlier_mask = fold`: the pair reads the GELU output itself and the mask `Mul` is gone; the outlier channel
/// saturates in the pair against the zeroed weight row, so the quantized model computes exactly what the masked one
/// does (ONNX Runtime's Q/DQ arithmetic as written). A weight that is not the MatMul's alone keeps its rows, and the
/// mask stays.
#[test]
fn a_folded_mask_leaves_the_same_integers_without_its_mul() {
    let fp32 = with_gelu_outlier(tiny_bert(Ln::Fused));
    let (s, _) = split(&fp32);
    let ranges = observed_ranges(&s, &qdq::tensors_to_calibrate(&s, &policy()).unwrap());
    let mut folding = policy();
    folding.set("outlier_mask", "fold").unwrap();
    let (masked, _) = qdq::quantize(&s, &ranges, &policy()).unwrap();
    let (folded, _) = qdq::quantize(&s, &ranges, &folding).unwrap();
    let mask_muls =
        |m: &Model| m.graph().node.iter().filter(|n| qdq::is_outlier_branch(n) && n.op_type() == "Mul").count();
    assert_eq!((mask_muls(&masked), mask_muls(&folded)), (1, 0));
    let q = folded.graph().node.iter().find(|n| n.op_type() == "QuantizeLinear" && n.input[0] == GELU);
    assert!(q.is_some(), "the pair reads the GELU output itself");
    let out = |m: &Model| -> Vec<f32> {
        run_feed(m, &feed(), &[FFN_OUT], runtime::OptLevel::Disable).remove(0).into_iter().collect()
    };
    let with_out = |m: &Model| {
        let mut m = m.clone();
        m.graph_mut().add_output(FFN_OUT, onnx_ir::DataType::Float);
        out(&m)
    };
    assert_eq!(with_out(&masked), with_out(&folded));

    // The down projection's weight also read by another node when the split is made: its rows stay, so the mask
    // does too.
    let mut shared = fp32.clone();
    let w = shared.graph().node.iter().find(|n| n.name() == DOWN).unwrap().input[1].clone();
    shared.graph_mut().push_node(onnx_ir::node("Identity", "keep_w", &[&w], &["w_copy"]));
    shared.graph_mut().add_output("w_copy", onnx_ir::DataType::Float);
    let (s, _) = split(&shared);
    let ranges = observed_ranges(&s, &qdq::tensors_to_calibrate(&s, &folding).unwrap());
    let (kept, _) = qdq::quantize(&s, &ranges, &folding).unwrap();
    assert_eq!(mask_muls(&kept), 1, "a shared weight keeps its rows: the mask stays");
}

/// Issue 75: `outlier_branch = recompute` takes the outlier channels from the layer that made the GELU output (the up
/// projection on those columns, then a copy of the activation) instead of gathering them from it: the float model
/// computes the same, the GELU output keeps one reader besides the mask (folded away with `outlier_mask = fold`, so
/// only its pair reads it), through a smoothing `Mul` in front of the up projection too (read from its input, the
/// factors in the branch's weight). A policy without it gathers as before; an input no layer and activation made is
/// gathered too.
#[test]
fn a_recomputed_branch_leaves_the_gelu_output_one_reader() {
    let fp32 = with_gelu_outlier(tiny_bert(Ln::Fused));
    let mut recompute = policy();
    recompute.set("outlier_branch", "recompute").unwrap();
    let absmax = channel_absmax_on(&fp32, &qdq::outlier_candidates(&fp32, &recompute).unwrap(), &feed());
    let mut s = fp32.clone();
    let done = qdq::split_outliers(&mut s, &recompute, &absmax).unwrap();
    assert!(done.iter().any(|d| d.tensor == GELU && d.channels == [PLANTED]), "{done:?}");
    s.validate().unwrap();
    let d = max_abs_diff(&logits(&s), &logits(&fp32));
    assert!(d < 1e-4, "the recomputed branch moved the float logits by {d}");
    let ops = |m: &Model| -> Vec<String> {
        m.graph().node.iter().filter(|n| qdq::is_outlier_branch(n)).map(|n| n.op_type().to_owned()).collect()
    };
    let branch = ops(&s);
    assert!(!branch.iter().any(|o| o == "Gather"), "{branch:?}");
    assert!(branch.iter().any(|o| o == "Erf"), "the GELU recomputed on the outlier channel: {branch:?}");
    let readers = |m: &Model| m.graph().node.iter().filter(|n| n.input.iter().any(|i| i == GELU)).count();
    assert_eq!(readers(&s), 1, "the mask alone reads the GELU output");
    // Quantized with the mask folded: the pair alone reads it, and the down projection's output is what the
    // gathering split gives up to the branch's float (the same integers in the pair).
    let mut folding = recompute.clone();
    folding.set("outlier_mask", "fold").unwrap();
    let ranges = observed_ranges(&s, &qdq::tensors_to_calibrate(&s, &folding).unwrap());
    let (q, _) = qdq::quantize(&s, &ranges, &folding).unwrap();
    let only: Vec<&str> =
        q.graph().node.iter().filter(|n| n.input.iter().any(|i| i == GELU)).map(|n| n.op_type()).collect();
    assert_eq!(only, ["QuantizeLinear"]);
    let (g, _) = split(&fp32);
    let (gathered, _) = qdq::quantize(&g, &ranges_of(&g), &policy()).unwrap();
    let (a, b, want) = (ffn_out(&q), ffn_out(&gathered), ffn_out(&fp32));
    assert!(max_abs_diff(&a, &b) < 0.05 * max_abs_diff(&b, &want).max(1e-3) + 1e-3, "{a:?} {b:?}");

    // Through a smoothing Mul in front of the up projection: the branch reads its input.
    let mut smoothed = fp32.clone();
    let up = "/bert/encoder/layer.0/intermediate/dense/MatMul";
    let x = smoothed.graph().node.iter().find(|n| n.name() == up).unwrap().input[0].clone();
    let factors: Vec<f32> = (0..HIDDEN).map(|k| 0.5 + k as f32 / HIDDEN as f32).collect();
    let w = smoothed.graph().node.iter().find(|n| n.name() == up).unwrap().input[1].clone();
    let mut wt = onnx_ir::tensor_to_array::<f32>(smoothed.graph().initializer(&w).unwrap()).unwrap();
    for (mut row, f) in wt.outer_iter_mut().zip(&factors) {
        row /= *f;
    }
    let g = smoothed.graph_mut();
    g.add_initializer(onnx_ir::array_to_tensor(&w, &wt));
    g.add_initializer(tensor_from_vec::<f32>("smooth_f", &[HIDDEN], factors).unwrap());
    let i = g.node.iter().position(|n| n.name() == up).unwrap();
    g.node[i].input[0] = "x_smoothed".into();
    g.insert_nodes(i, vec![onnx_ir::node("Mul", "x_smooth", &[&x, "smooth_f"], &["x_smoothed"])]);
    let mut s2 = smoothed.clone();
    let absmax = channel_absmax_on(&smoothed, &qdq::outlier_candidates(&smoothed, &recompute).unwrap(), &feed());
    qdq::split_outliers(&mut s2, &recompute, &absmax).unwrap();
    let d = max_abs_diff(&logits(&s2), &logits(&smoothed));
    assert!(d < 1e-4, "through the smoothing Mul: {d}");
    let branch_mm = s2.graph().node.iter().find(|n| qdq::is_outlier_branch(n) && n.name().contains("outlier_columns"));
    assert_eq!(branch_mm.map(|n| n.input[0].as_str()), Some(x.as_str()), "the branch reads the Mul's input");
    assert_eq!(s2.graph().node.iter().filter(|n| n.input.iter().any(|t| t == "x_smoothed")).count(), 1);
}

/// The ranges of every tensor `policy()` calibrates on `m`.
fn ranges_of(m: &Model) -> qdq::Ranges {
    observed_ranges(m, &qdq::tensors_to_calibrate(m, &policy()).unwrap())
}
