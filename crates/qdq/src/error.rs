//! The crate's error type.

/// Everything that can go wrong planning or applying Q/DQ insertion.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `Policy::set` got a key it does not know.
    #[error("unknown policy option '{key}'; valid options: {valid}")]
    UnknownOption {
        /// The key given.
        key: String,
        /// Comma-separated valid keys.
        valid: String,
    },
    /// `Policy::preset` got a name it does not know.
    #[error("unknown preset '{name}'; valid presets: {valid}")]
    UnknownPreset {
        /// The name given.
        name: String,
        /// Comma-separated valid presets.
        valid: String,
    },
    /// An option value could not be parsed.
    #[error("policy option '{key}': bad value '{value}', expected {expected}")]
    BadOptionValue {
        /// Option key.
        key: String,
        /// Value given.
        value: String,
        /// What is accepted.
        expected: String,
    },
    /// A range is non-finite or has min > max.
    #[error("tensor '{tensor}': range [{min}, {max}] is not a finite interval with min <= max")]
    BadRange {
        /// Tensor name.
        tensor: String,
        /// Given minimum.
        min: f32,
        /// Given maximum.
        max: f32,
    },
    /// A tensor that needs a range has none and the policy is strict.
    #[error("tensor '{tensor}' (input of node '{node}') has no calibration range and the policy is strict")]
    MissingRange {
        /// Tensor name.
        tensor: String,
        /// A node that reads it.
        node: String,
    },
    /// The model has no node of the op types the policy quantizes.
    #[error("the model has no {op_types} node to quantize")]
    NothingToQuantize {
        /// Comma-separated op types of the policy.
        op_types: String,
    },
    /// A node selected for quantization is malformed.
    #[error("node '{node}' ({op_type}): {reason}")]
    BadNode {
        /// Node name.
        node: String,
        /// Its op type.
        op_type: String,
        /// What is wrong.
        reason: String,
    },
    /// A weight initializer cannot be quantized as asked.
    #[error("weight '{tensor}': {reason}")]
    BadWeight {
        /// Initializer name.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// An activation's statistics cannot be used as asked.
    #[error("activation '{tensor}': {reason}")]
    BadActivation {
        /// Tensor name.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// `Plan::apply` was given a model the plan was not made for.
    #[error("plan does not match the model: {reason}")]
    PlanMismatch {
        /// The first difference found.
        reason: String,
    },
    /// A node or tensor name or glob of the policy matches no node (tensor) of the model.
    #[error(
        "policy option '{key}': '{pattern}' matches no {what} of the model ({what} names look like '{example}'){hint}"
    )]
    UnmatchedPattern {
        /// `include_nodes`, `exclude_nodes` or `exclude_tensors`.
        key: &'static str,
        /// The name or glob given.
        pattern: String,
        /// "node" or "tensor".
        what: &'static str,
        /// One node (tensor) name of the model.
        example: String,
        /// More help, or empty.
        hint: String,
    },
    /// A smoothing policy was planned on a model it smooths that is not smoothed.
    #[error(
        "the policy smooths MatMul inputs (smooth={alpha}) but this model is not smoothed; pass the \
         model_smoothed.onnx that `qdq calibrate` wrote next to the ranges, or --policy-option smooth=off with ranges \
         calibrated without smoothing"
    )]
    NotSmoothed {
        /// The policy's migration strength.
        alpha: f32,
    },
    /// An `outlier_channels` policy was planned on a model whose outlier channels were not split off.
    #[error(
        "the policy carries MatMul inputs' outlier channels in float (outlier_channels={ratio}) but this model's were \
         not split off; pass the model `qdq calibrate` wrote next to the ranges (model_smoothed.onnx, or \
         model_rounded.onnx without smoothing), or \
         --policy-option outlier_channels=off with ranges calibrated without it"
    )]
    NotSplit {
        /// The policy's ratio.
        ratio: f32,
    },
    /// Calibration statistics were to be merged under a policy that smooths the model.
    #[error(
        "--merge cannot be combined with smoothing: each run smooths with its own statistics, so their ranges \
         describe different models; pass --policy-option smooth=off to every run"
    )]
    MergeWithSmoothing,
    /// Calibration statistics were to be merged under a policy that splits off outlier channels.
    #[error(
        "--merge cannot be combined with outlier_channels: each run picks the outlier channels from its own \
         statistics, so their ranges describe different models; pass --policy-option outlier_channels=off to every run"
    )]
    MergeWithOutliers,
    /// Calibration statistics were to be merged under a policy that rounds weights by GPTQ.
    #[error(
        "--merge cannot be combined with GPTQ weight rounding (weight_rounding = gptq): each run rounds the weights \
         against its own calibration inputs, so their ranges describe different models; pass --policy-option \
         weight_rounding=nearest to every run"
    )]
    MergeWithRounding,
    /// A node or initializer the pass needs is not in the model (the model changed under it).
    #[error("'{name}' ({what}) is missing from the model")]
    Missing {
        /// Node or initializer name.
        name: String,
        /// "node" or "initializer".
        what: &'static str,
    },
    /// [`crate::shift_output_bias`]: the output has no bias of its own to move.
    #[error("output '{output}' has no bias to correct: {reason}")]
    NoOutputBias {
        /// The graph output.
        output: String,
        /// Why not.
        reason: String,
    },
    /// An onnx-ir operation failed.
    #[error(transparent)]
    Ir(#[from] onnx_ir::Error),
}

/// Result alias using [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
