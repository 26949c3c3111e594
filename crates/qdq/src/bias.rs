//! Int32 Gemm biases for ONNX Runtime's CPU EP: it turns `DQ(A), DQ(B) -> Gemm` into its integer `QGemm` only when
//! the bias C is dequantized from int32 too (scale `s_A · s_B[j]`, zero point 0, as ORT's own QDQ quantizer writes
//! it); with a float C the Gemm stays float behind a DequantizeLinear of its weight on every run. So a policy that
//! stores weights as int8 initializers (the CPU layout) quantizes the C of each Gemm whose A and B it quantizes.
//! Other layouts keep C in float (TensorRT takes no int32 DequantizeLinear).

use onnx_ir::proto::{GraphProto, NodeProto};
use onnx_ir::{GraphExt, GraphIndex, NameSet, NodeExt, attr_int, get_attr_float, node};

use crate::error::{Error, Result};
use crate::policy::{Policy, WeightStorage};
use crate::types::Consumer;
use crate::types::PlannedTensor;

/// One Gemm bias stored as int32.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlannedBias {
    /// The float initializer C.
    pub bias: String,
    /// The Gemm reading it (input 2).
    pub gemm: Consumer,
    /// `s_A · s_B[j]`: one per output channel, or one.
    pub scales: Vec<f32>,
}

/// The Gemms of `policy` (int8-initializer weights) whose A and B are planned (`tensors`) and whose C is a float
/// `[N]` initializer with `beta = 1`.
pub(crate) fn plan_biases(ix: &GraphIndex, tensors: &[PlannedTensor], policy: &Policy) -> Vec<PlannedBias> {
    // int32 biases go with integer weights only.
    if policy.weights != WeightStorage::Int8Initializer || !policy.precision.is_integer() {
        return vec![];
    }
    let planned = |t: &str| tensors.iter().find(|p| p.tensor == t);
    let mut out = vec![];
    for (i, n) in ix.graph().node.iter().enumerate() {
        if n.op_type() != "Gemm" || n.input.len() < 3 || get_attr_float(n, "beta").ok().flatten().unwrap_or(1.0) != 1.0
        {
            continue;
        }
        let (Some(a), Some(b)) = (planned(&n.input[0]), planned(&n.input[1])) else { continue };
        let [sa] = a.scales[..] else { continue };
        let covers = |p: &PlannedTensor| p.pairs.iter().flatten().any(|c| c.node == i);
        let c = ix.initializer(&n.input[2]);
        let n_out = b.axis.map(|_| b.scales.len());
        let vector = c.is_some_and(|c| {
            c.data_type() == onnx_ir::DataType::Float as i32
                && c.dims.len() == 1
                && n_out.is_none_or(|len| c.dims[0] as usize == len)
        });
        if a.shift.is_some() || !b.int8_initializer || !covers(a) || !covers(b) || !vector {
            continue;
        }
        let scales = b.scales.iter().map(|sb| sa * sb).collect();
        let gemm = Consumer { node: i, node_name: n.name().to_owned(), slot: 2 };
        out.push(PlannedBias { bias: n.input[2].clone(), gemm, scales });
    }
    out
}

/// Adds each bias's int32 copy and a DequantizeLinear feeding its Gemm's input 2 (returned with the index of the
/// node it must precede).
pub(crate) fn apply_biases(
    g: &mut GraphProto,
    names: &mut NameSet,
    biases: &[PlannedBias],
) -> Result<Vec<(usize, Vec<NodeProto>)>> {
    let mut inserts = vec![];
    for b in biases {
        let c = g.initializer(&b.bias).ok_or_else(|| Error::Missing { name: b.bias.clone(), what: "initializer" })?;
        let values = onnx_ir::tensor_to_array::<f32>(c)?;
        let per_channel = b.scales.len() > 1;
        let q: Vec<i32> = values
            .iter()
            .enumerate()
            .map(|(j, &v)| {
                let s = b.scales[if per_channel { j } else { 0 }];
                (f64::from(v) / f64::from(s)).round_ties_even().clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32
            })
            .collect();
        let [qn, sn, zn, dq_out, dq_name] =
            ["quantized", "scale", "zero_point", "DequantizeLinear_Output", "DequantizeLinear"]
                .map(|k| names.fresh(&format!("{}_{k}", b.bias)));
        let shape: Vec<usize> = if per_channel { vec![b.scales.len()] } else { vec![] };
        g.add_initializer(onnx_ir::tensor_from_vec::<i32>(&qn, &[q.len()], q)?);
        g.add_initializer(onnx_ir::tensor_from_vec::<f32>(&sn, &shape, b.scales.clone())?);
        g.add_initializer(onnx_ir::tensor_from_vec::<i32>(&zn, &shape, vec![0; b.scales.len()])?);
        let mut dq = node("DequantizeLinear", &dq_name, &[&qn, &sn, &zn], &[&dq_out]);
        if per_channel {
            dq = dq.with_attr(attr_int("axis", 0));
        }
        g.rewire_input(b.gemm.node, 2, &dq_out)?;
        inserts.push((b.gemm.node, vec![dq]));
    }
    Ok(inserts)
}
