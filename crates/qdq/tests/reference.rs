//! The float reference of a QDQ model (`qdq::float_reference`, what `qdq debug` compares against): every
//! activation pair taken out, whatever rewrite the tensor went through (shifted Softmax, smoothing), so that each
//! quantized tensor's float value is there under its own name, close to the FP32 model's.
use crate::common::*;
use onnx_ir::GraphExt;
use qdq::{Policy, SoftmaxRange};

fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
    let den: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum();
    (num / den.max(1e-30)).sqrt()
}

#[test]
fn the_reference_holds_each_quantized_tensors_float_value() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let fp32 = tiny_bert(ln);
        let policy = Policy { softmax_range: SoftmaxRange::Shifted, ..unsmoothed("tensorrt") };
        let tensors = qdq::tensors_to_calibrate(&fp32, &policy).unwrap();
        // Ranges far too wide: the INT8 model's activations are coarse, the reference's are not.
        let ranges: qdq::Ranges =
            observed_ranges(&fp32, &tensors).into_iter().map(|(t, (lo, hi))| (t, (lo * 8.0, hi * 8.0))).collect();
        let (int8, _) = qdq::quantize(&fp32, &ranges, &policy).unwrap();
        let pairs = qdq::activation_pairs(&int8);
        assert!(pairs.iter().any(|p| p.tensor.contains("_shifted")), "{}: no shifted Softmax pair", variant_name(ln));
        let reference = qdq::float_reference(&int8);
        assert!(qdq::activation_pairs(&reference).is_empty());
        let g = reference.graph();
        assert!(g.node.iter().filter(|n| n.op_type() == "QuantizeLinear").all(|n| g.is_initializer(&n.input[0])));

        // Every dequantized tensor of the reference is the float tensor of its pair; where the FP32 model has the
        // tensor under the same name, the two agree up to the weights' int8 rounding.
        let mut probe = reference.clone();
        let mut names = Vec::new();
        for p in pairs.iter().filter(|p| fp32.graph().node.iter().any(|n| n.output.contains(&p.tensor))) {
            probe.graph_mut().add_output(&p.output, onnx_ir::DataType::Float);
            names.push((p.output.clone(), p.tensor.clone()));
        }
        assert!(names.len() >= 4, "{}: {} comparable pairs", variant_name(ln), names.len());
        let mut fp32_probe = fp32.clone();
        for (_, t) in &names {
            fp32_probe.graph_mut().add_output(t, onnx_ir::DataType::Float);
        }
        let outs: Vec<&str> = names.iter().map(|(o, _)| o.as_str()).collect();
        let fp32_outs: Vec<&str> = names.iter().map(|(_, t)| t.as_str()).collect();
        let got = run(&probe, &outs);
        let want = run(&fp32_probe, &fp32_outs);
        for ((name, _), (g, w)) in names.iter().zip(got.iter().zip(&want)) {
            let e = rel_err(g.as_slice().unwrap(), w.as_slice().unwrap());
            assert!(e < 0.02, "{}: {name} relative error {e} vs FP32", variant_name(ln));
        }

        // The logits: the reference is much closer to FP32 than the INT8 model with its coarse activations.
        let l = |m: &onnx_ir::Model| run(m, &["start_logits"]).remove(0).into_iter().collect::<Vec<f32>>();
        let (f, q, r) = (l(&fp32), l(&int8), l(&reference));
        let (eq, er) = (rel_err(&q, &f), rel_err(&r, &f));
        assert!(er < 0.02 && er * 5.0 < eq, "{}: reference {er}, int8 {eq}", variant_name(ln));
    }
}

#[test]
fn one_node_keeps_its_inputs_in_float_and_the_others_keep_their_pairs() {
    let fp32 = tiny_bert(Ln::Decomposed);
    let policy = unsmoothed("tensorrt");
    let tensors = qdq::tensors_to_calibrate(&fp32, &policy).unwrap();
    let (int8, _) = qdq::quantize(&fp32, &observed_ranges(&fp32, &tensors), &policy).unwrap();
    let pairs = qdq::activation_pairs(&int8);
    // A node that reads dequantized activations, and the tensors behind them.
    let (node, _) = pairs.iter().flat_map(|p| &p.consumers).find(|(n, _)| n.ends_with("query/MatMul")).unwrap().clone();
    let behind: Vec<String> =
        pairs.iter().filter(|p| p.consumers.iter().any(|(n, _)| *n == node)).map(|p| p.tensor.clone()).collect();
    let edited = qdq::with_float_inputs(&int8, &std::collections::HashSet::from([node.as_str()]));
    let g = edited.graph();
    let n = g.node.iter().find(|n| n.name() == node).unwrap();
    assert!(behind.iter().all(|t| n.input.contains(t)), "{node} reads {:?}, not {behind:?}", n.input);
    let after = qdq::activation_pairs(&edited);
    assert!(after.iter().all(|p| p.consumers.iter().all(|(c, _)| *c != node)));
    // Every other reader keeps its pairs.
    let others =
        |ps: &[qdq::PairInfo]| -> usize { ps.iter().flat_map(|p| &p.consumers).filter(|(c, _)| *c != node).count() };
    assert_eq!(others(&after), others(&pairs));
    assert!(!after.is_empty());
    // And it still runs.
    let _ = run(&edited, &["start_logits"]);
}

/// Node names are optional in ONNX (and other tools' QDQ models may repeat them): the reference of a model whose nodes
/// have no names takes every pair out all the same, and computes what the named model's reference computes.
#[test]
fn the_reference_of_a_model_without_node_names_is_the_same() {
    let fp32 = tiny_bert(Ln::Decomposed);
    let policy = unsmoothed("tensorrt");
    let tensors = qdq::tensors_to_calibrate(&fp32, &policy).unwrap();
    let (int8, _) = qdq::quantize(&fp32, &observed_ranges(&fp32, &tensors), &policy).unwrap();
    let mut unnamed = int8.clone();
    for n in &mut unnamed.graph_mut().node {
        n.name = Some(String::new());
    }
    assert!(qdq::activation_pairs(&unnamed).len() > 1);
    let reference = qdq::float_reference(&unnamed);
    reference.graph().validate().unwrap();
    assert!(qdq::activation_pairs(&reference).is_empty());
    let l = |m: &onnx_ir::Model| run(m, &["start_logits"]).remove(0).into_iter().collect::<Vec<f32>>();
    assert_eq!(l(&reference), l(&qdq::float_reference(&int8)));
}
