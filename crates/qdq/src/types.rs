//! The data a plan is made of that every step of it shares: ranges in, which tensors and readers, what was left out.
//! (Leaf types: selection, parameters, application and the Softmax shift depend on them rather than on `plan`,
//! which uses those steps.)

use std::collections::BTreeMap;

/// Ranges table: tensor name -> (min, max).
pub type Ranges = BTreeMap<String, (f32, f32)>;

/// What kind of tensor a pair quantizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum TensorKind {
    /// A tensor computed at run time; scale from its calibration range.
    Activation,
    /// A constant MatMul input; scale from its values.
    Weight,
    /// Another constant (e.g. an Add operand); quantized like an activation, range from its values.
    Constant,
}

/// One node input that will read a dequantized tensor.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Consumer {
    /// Index of the node in `graph.node` of the planned model.
    pub node: usize,
    /// Node name (for display and checks).
    pub node_name: String,
    /// Input slot.
    pub slot: usize,
}

/// A tensor the policy wanted to quantize but that was left alone.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    /// Tensor name.
    pub tensor: String,
    /// Why.
    pub reason: String,
}

/// Q/DQ insertion for one tensor.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlannedTensor {
    /// Tensor that is quantized.
    pub tensor: String,
    /// Activation, weight or other constant.
    pub kind: TensorKind,
    /// Integer type.
    pub qtype: crate::scale::QuantType,
    /// One scale (per-tensor) or one per channel.
    pub scales: Vec<f32>,
    /// Zero points, same length as `scales`.
    pub zero_points: Vec<i32>,
    /// Channel axis for per-channel quantization.
    pub axis: Option<usize>,
    /// Weight stored as int8 initializer (+ DQ only) instead of FP32 + Q + DQ.
    pub int8_initializer: bool,
    /// Weight quantized to the 7-bit range.
    pub reduce_range: bool,
    /// A weight's axes along which adjacent int8 values are bounded to `|a| + |b| <= 128`
    /// ([`crate::scale::bound_pairs`]; policy `bounded_pairs`); empty for everything else.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pair_axes: Vec<usize>,
    /// One entry per Q/DQ pair: the inputs that read that pair's DQ output.
    pub pairs: Vec<Vec<Consumer>>,
    /// `Some(c)`: the pair quantizes `tensor - c` (shifted Softmax output); each reading MatMul's output gets
    /// `c · Σ_k B[.., k, :]` added back (see [`crate::SoftmaxRange::Shifted`]).
    pub shift: Option<f32>,
}

/// The MatMul-like op types qdq quantizes (besides `Add`); `patterns::matmul_rule` says where their operands are.
pub const MATMUL_OPS: [&str; 4] = ["MatMul", "Gemm", "FusedMatMul", "Attention"];

/// Op types that do matrix-multiply work: [`MATMUL_OPS`], then ONNX Runtime's other fused attention ops and `Conv`,
/// which qdq counts but does not quantize. When one of them reads a float input that is not dequantized, that work
/// runs in float, and qdq says so ([`crate::coverage`]).
pub const MATMUL_LIKE: [&str; 7] =
    [MATMUL_OPS[0], MATMUL_OPS[1], MATMUL_OPS[2], MATMUL_OPS[3], "MultiHeadAttention", "GroupQueryAttention", "Conv"];
