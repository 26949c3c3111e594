//! The `qnn` preset (QNN's HTP): every fully connected layer's output quantized after its bias, 16-bit activations
//! beside 8-bit weights, the model raised to opset 21, computing what the float model does.
use onnx_ir::{GraphIndex, Model};
use qdq::{QuantType, Ranges};

use crate::common::*;

/// The constant-weight MatMuls of `m` and the tensor their bias Add writes.
fn fully_connected(m: &Model) -> Vec<(String, String)> {
    let ix = GraphIndex::new(m.graph());
    let mut out = Vec::new();
    for n in &m.graph().node {
        if n.op_type() != "MatMul" || !ix.is_initializer(&n.input[1]) {
            continue;
        }
        if let [(reader, _)] = ix.readers(&n.output[0]) {
            let add = ix.node(*reader);
            if add.op_type() == "Add" {
                out.push((n.name().to_owned(), add.output[0].clone()));
            }
        }
    }
    out
}

/// Each fully connected layer's bias Add output gets one pair that every reader reads (so ONNX Runtime fuses MatMul +
/// bias into one Gemm ending in a QuantizeLinear, the FullyConnected QNN's HTP takes with per-channel weights); every
/// activation pair is int16 with zero point 0, weights stay per-channel int8, the model is at opset 21 (upgraded:
/// its reductions' axes as inputs) and gives the float model's logits to a small fraction of their range.
#[test]
fn the_qnn_preset_quantizes_fully_connected_outputs_in_16_bits_at_opset_21() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let m = tiny_bert(ln);
        let policy = unsmoothed("qnn");
        let tensors = qdq::tensors_to_calibrate(&m, &policy).unwrap();
        let fc = fully_connected(&m);
        assert!(fc.len() >= 6, "{ln:?}: the tiny BERT's projections: {fc:?}");
        for (node, bias_out) in &fc {
            assert!(tensors.contains(bias_out), "{ln:?}: {node}'s output after its bias is calibrated");
        }
        let (q, plan) = qdq::quantize(&m, &observed_ranges(&m, &tensors), &policy).unwrap();
        assert_eq!(plan.opset_bump.map(|(_, to)| to), Some(qdq::MIN_INT16_OPSET), "{ln:?}");
        assert_eq!(q.opset(""), Some(21));
        q.validate().unwrap();
        let ix = GraphIndex::new(q.graph());
        for (node, bias_out) in &fc {
            let readers = ix.readers(bias_out);
            assert!(
                readers.len() == 1 && ix.node(readers[0].0).op_type() == "QuantizeLinear",
                "{ln:?}: {node}'s output after its bias is read by its QuantizeLinear alone"
            );
        }
        for t in &plan.tensors {
            let weight = t.axis.is_some();
            let want = if weight { QuantType::Int8 } else { QuantType::Int16 };
            assert_eq!(t.qtype, want, "{ln:?}: {}", t.tensor);
            assert!(weight || t.zero_points.iter().all(|z| *z == 0), "{ln:?}: {}", t.tensor);
        }
        let cov = qdq::coverage(&q);
        assert!(cov.float_matmul_like.is_empty(), "{:?}", cov.float_matmul_like);
        let (a, b) = (logits(&m), logits(&q));
        let scale = a.iter().fold(0f32, |x, v| x.max(v.abs()));
        let diff = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(diff < 0.02 * scale, "{ln:?}: {diff} against {scale}");
    }
}

/// Without `quantize_fc_outputs` no output is quantized; with it, a MatMul whose output more than one node reads
/// (no bias Add of its own) has its own output quantized. 16-bit activations cannot go with ONNX Runtime's 8-bit
/// contrib ops, said naming the option.
#[test]
fn fc_outputs_follow_the_option_and_int16_refuses_contrib_ops() {
    let m = tiny_bert(Ln::Decomposed);
    let mut policy = unsmoothed("qnn");
    policy.set("quantize_fc_outputs", "false").unwrap();
    let tensors = qdq::tensors_to_calibrate(&m, &policy).unwrap();
    assert!(fully_connected(&m).iter().all(|(_, out)| !tensors.contains(out)));
    let mut branched = m.clone();
    let (node, bias_out) = fully_connected(&m).remove(0);
    let mm_out = m.graph().node.iter().find(|n| n.name() == node).unwrap().output[0].clone();
    branched.graph_mut().node.push(onnx_ir::node("Identity", "second_reader", &[&mm_out], &["copy"]));
    let tensors = qdq::tensors_to_calibrate(&branched, &unsmoothed("qnn")).unwrap();
    assert!(tensors.contains(&mm_out) && !tensors.contains(&bias_out), "{node}: its own output, not the bias Add's");
    let mut cpu_ops = unsmoothed("qnn");
    cpu_ops.set("contrib_ops", "true").unwrap();
    let e = qdq::plan(&m, &Ranges::new(), &cpu_ops).unwrap_err().to_string();
    assert!(e.contains("contrib_ops") && e.contains("int16-symmetric"), "{e}");
}

fn logits(m: &Model) -> Vec<f32> {
    run_feed(m, &feed(), &["start_logits"], runtime::OptLevel::Basic).remove(0).into_iter().collect()
}
