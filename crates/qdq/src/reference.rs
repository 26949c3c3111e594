//! The float reference of a QDQ model, for `qdq debug`: the same graph with every activation pair taken out, so
//! each tensor a pair quantizes has its float value under the same name, whatever rewrite produced it (a smoothed
//! input, a shifted Softmax output, a tool's own names). Weights stay as the model stores them (dequantized), so the
//! reference differs from the FP32 model by the weights' quantization alone.

use std::collections::{HashMap, HashSet};

use onnx_ir::{GraphExt as _, Model, node};

use crate::coverage::{PairInfo, coverage};

/// An activation Q/DQ pair of a QDQ model: a QuantizeLinear on a computed float tensor and a DequantizeLinear
/// reading it. ONNX Runtime's integer MatMuls that read a QuantizeLinear output directly (the `cpu` layout) have no
/// DequantizeLinear: [`crate::expand_integer_matmuls`] first gives them one.
pub fn activation_pairs(model: &Model) -> Vec<PairInfo> {
    coverage(model).pairs.into_iter().filter(|p| p.quantize_node.is_some() && !p.is_initializer).collect()
}

/// `model` with every activation pair ([`activation_pairs`]) replaced by `Identity(tensor) -> dequantized`, and the
/// QuantizeLinear nodes left without readers removed. Every tensor name of `model` keeps its meaning: the
/// dequantized tensors now carry the float value they stand for.
///
/// ```
/// use onnx_ir::tiny_bert::{TinyBertConfig, build};
///
/// let fp32 = build(&TinyBertConfig::default());
/// let ranges: qdq::Ranges = qdq::tensors_to_calibrate(&fp32, &qdq::Policy::preset("tensorrt").unwrap())
///     .unwrap()
///     .into_iter()
///     .map(|t| (t, (-4.0, 4.0)))
///     .collect();
/// let policy = qdq::Policy { smooth: None, ..qdq::Policy::preset("tensorrt").unwrap() };
/// let (int8, _) = qdq::quantize(&fp32, &ranges, &policy).unwrap();
/// let pairs = qdq::activation_pairs(&int8);
/// assert!(!pairs.is_empty());
/// let reference = qdq::float_reference(&int8);
/// assert!(qdq::activation_pairs(&reference).is_empty());
/// // The weights' pairs stay.
/// assert!(reference.graph().node.iter().any(|n| n.op_type() == "DequantizeLinear"));
/// ```
pub fn float_reference(model: &Model) -> Model {
    without_pairs(model, |_| true)
}

/// `model` with the activation pairs `take_out` selects replaced by `Identity(tensor) -> dequantized` (their
/// readers then see the float tensor), and the QuantizeLinear nodes left without readers removed: the model as if
/// those inputs had been kept in float, with every other pair and range unchanged (no re-calibration).
pub fn without_pairs(model: &Model, take_out: impl Fn(&PairInfo) -> bool) -> Model {
    // By the dequantized tensor, which only its DequantizeLinear writes: node names may be missing or repeated.
    let pairs: HashMap<String, PairInfo> =
        activation_pairs(model).into_iter().filter(|p| take_out(p)).map(|p| (p.output.clone(), p)).collect();
    let mut out = model.clone();
    let g = out.graph_mut();
    for n in g.node.iter_mut().filter(|n| n.op_type() == "DequantizeLinear") {
        let Some(p) = n.output.first().and_then(|o| pairs.get(o.as_str())) else { continue };
        *n = node("Identity", n.name(), &[&p.tensor], &[&p.output]);
    }
    g.remove_unread_nodes(&|n| n.op_type() == "QuantizeLinear");
    out
}

/// `model` with each node `nodes` names reading, instead of its dequantized activation inputs, the float tensors
/// behind them; pairs no other node reads are removed. Unlike [`without_pairs`], a pair several nodes share stays
/// for the others: the model as if only these nodes' inputs had been kept in float (same ranges, no
/// re-calibration).
pub fn with_float_inputs(model: &Model, nodes: &HashSet<&str>) -> Model {
    let pairs = activation_pairs(model);
    let float_of: HashMap<&str, &str> = pairs.iter().map(|p| (p.output.as_str(), p.tensor.as_str())).collect();
    let mut out = model.clone();
    let g = out.graph_mut();
    for n in g.node.iter_mut().filter(|n| nodes.contains(n.name())) {
        for input in n.input.iter_mut() {
            if let Some(t) = float_of.get(input.as_str()) {
                *input = (*t).to_owned();
            }
        }
    }
    let activation_dq: HashSet<&str> = pairs.iter().map(|p| p.dequantize_node.as_str()).collect();
    g.remove_unread_nodes(&|n| activation_dq.contains(n.name()));
    g.remove_unread_nodes(&|n| n.op_type() == "QuantizeLinear");
    out
}
