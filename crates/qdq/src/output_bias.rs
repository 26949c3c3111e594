//! An output's bias moved by a measured amount ([`shift_output_bias`]): the correction of the mean shift that
//! quantization leaves on a classifier's logits (the pipeline measures it, quantized against FP32, on the calibration
//! inputs). A per-class shift moves decisions one way (more inputs to one class), which no range or rounding choice
//! undoes; subtracting the mean shift from the bias of the layer that writes the output does. Applied to the float
//! model before Q/DQ placement, so an int32 Gemm bias ([`crate::PlannedBias`]) is quantized from the corrected value.

use onnx_ir::proto::StringStringEntryProto;
use onnx_ir::{DataType, GraphExt, Model, get_attr_float, tensor_from_vec, tensor_shape, tensor_to_array};

use crate::error::{Error, Result};

/// Model metadata key recording each output whose bias [`shift_output_bias`] moved, and by how much.
pub const OUTPUT_BIAS_METADATA_KEY: &str = "qdq.output_bias";

/// The record of [`shift_output_bias`] in a model's metadata, if any (e.g. `logits: -0.0143 +0.0167`).
pub fn output_bias_record(model: &Model) -> Option<&str> {
    model.proto.metadata_props.iter().find(|e| e.key() == OUTPUT_BIAS_METADATA_KEY).map(|e| e.value())
}

/// The bias [`shift_output_bias`] would move for graph output `output`: the node writing it (through any
/// `Identity`, and through a last-axis `Softmax`: then the shift is one of log-probabilities,
/// [`crate::softmax_logits`]) a `Gemm` with a C or an `Add` with one initializer operand, that bias a float vector
/// (one value per channel of the output's last axis) no other node reads.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputBiasSite {
    /// The bias initializer.
    pub bias: String,
    /// Its values: the output's channels.
    pub channels: usize,
    /// What a shift of the output is in the bias (`1 / beta` of a Gemm, else 1).
    scale: f32,
}

/// The [`OutputBiasSite`] of `output`, or [`Error::NoOutputBias`] saying why it has none.
pub fn output_bias_site(model: &Model, output: &str) -> Result<OutputBiasSite> {
    let g = model.graph();
    let refuse = |reason: String| Error::NoOutputBias { output: output.to_owned(), reason };
    if !g.output.iter().any(|o| o.name() == output) {
        return Err(refuse("it is not a graph output".into()));
    }
    // Class probabilities: the bias is the logits' (a shift measured in log-probabilities is theirs, up to one
    // constant per input that the Softmax takes away).
    let logits = crate::patterns::softmax_logits(g, output).unwrap_or_else(|| output.to_owned());
    let mut node = g.producer_of(&logits).map(|i| &g.node[i]).ok_or_else(|| refuse("no node writes it".into()))?;
    // An exporter's Identity in front of the output (torch's when the output is renamed).
    while node.op_type() == "Identity" {
        node =
            node.input.first().and_then(|t| g.producer_of(t)).map(|i| &g.node[i]).ok_or_else(|| {
                refuse(format!("the Identity '{}' in front of it reads no node's output", node.name()))
            })?;
    }
    let (bias, scale) = match node.op_type() {
        "Gemm" if node.input.len() > 2 && !node.input[2].is_empty() => {
            let beta = get_attr_float(node, "beta").ok().flatten().unwrap_or(1.0);
            if beta == 0.0 || !beta.is_finite() {
                return Err(refuse(format!("its Gemm '{}' has beta {beta}", node.name())));
            }
            (node.input[2].clone(), 1.0 / beta)
        }
        "Add" => {
            let constant: Vec<&String> = node.input.iter().filter(|t| g.is_initializer(t)).collect();
            match constant[..] {
                [c] => (c.clone(), 1.0),
                _ => return Err(refuse(format!("its Add '{}' has no one constant operand", node.name()))),
            }
        }
        op => return Err(refuse(format!("it is written by {op} '{}', not by a Gemm or Add with a bias", node.name()))),
    };
    let t = g.initializer(&bias).ok_or_else(|| refuse(format!("its bias '{bias}' is not an initializer")))?;
    if t.data_type() != DataType::Float as i32 {
        return Err(refuse(format!("its bias '{bias}' is not float")));
    }
    let (dims, count) = tensor_shape(t)?;
    if dims.iter().rev().skip(1).any(|&d| d != 1) {
        return Err(refuse(format!("its bias '{bias}' has shape {dims:?}, not one value per channel")));
    }
    if g.consumers_of(&bias).len() != 1 || g.output.iter().any(|o| o.name() == bias) {
        return Err(refuse(format!("its bias '{bias}' is read by other nodes too")));
    }
    Ok(OutputBiasSite { bias, channels: count as usize, scale })
}

/// Subtracts `by` (one value per channel of `output`'s last axis) from the bias of its [`OutputBiasSite`] and records
/// the shift in the model's metadata ([`output_bias_record`]). Returns the bias initializer's name;
/// [`Error::NoOutputBias`] when the output has no such bias or `by` is not one value per channel (the model is then
/// unchanged).
pub fn shift_output_bias(model: &mut Model, output: &str, by: &[f32]) -> Result<String> {
    let site = output_bias_site(model, output)?;
    if site.channels != by.len() {
        let reason = format!(
            "its bias '{}' has {} values, not one per channel of the {} measured",
            site.bias,
            site.channels,
            by.len()
        );
        return Err(Error::NoOutputBias { output: output.to_owned(), reason });
    }
    let g = model.graph();
    let t = g.initializer(&site.bias).ok_or_else(|| Error::Missing { name: site.bias.clone(), what: "initializer" })?;
    let (dims, _) = tensor_shape(t)?;
    let values: Vec<f32> = tensor_to_array::<f32>(t)?.iter().zip(by).map(|(b, d)| b - d * site.scale).collect();
    let corrected = tensor_from_vec::<f32>(&site.bias, &dims, values)?;
    model.graph_mut().add_initializer(corrected);
    let shifts: Vec<String> = by.iter().map(|d| format!("{:+.4}", -d)).collect();
    let entry = format!("{output}: {}", shifts.join(" "));
    let record = match output_bias_record(model) {
        Some(r) => format!("{r}; {entry}"),
        None => entry,
    };
    model.proto.metadata_props.retain(|e| e.key() != OUTPUT_BIAS_METADATA_KEY);
    model
        .proto
        .metadata_props
        .push(StringStringEntryProto { key: Some(OUTPUT_BIAS_METADATA_KEY.to_owned()), value: Some(record) });
    Ok(site.bias)
}
