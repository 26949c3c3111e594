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
