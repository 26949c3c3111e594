//! `qdq`: post-training insertion of QuantizeLinear / DequantizeLinear pairs into ONNX models
//! (onnx-ir [`onnx_ir::Model`]), following a composable [`Policy`] with presets matching ONNX
//! Runtime's QDQ quantizer (`ort-compatible`, `tensorrt`, `migraphx`) and a CPU layout (`cpu`).
//!
//! Flow: [`tensors_to_calibrate`] names the activations needing ranges; [`plan`] turns ranges
//! into per-tensor scales / zero points and placements; [`Plan::apply`] edits the model;
//! [`coverage`] reports what a (quantized) model contains; [`float_reference`] takes a QDQ model's activation pairs
//! out again, so each quantized tensor can be compared with the float value it stands for (`qdq debug`). Before calibration, [`smooth`] can migrate the
//! LayerNorm outputs' outlier channels into the weights of the MatMuls that read them (SmoothQuant), given each
//! channel's calibrated max; [`smoothing_sites`] names the tensors whose per-channel max it needs.
//!
//! Inside: `patterns` is the one module that knows op patterns (residual Add, LayerNorm forms, Softmax -> P·V,
//! constant-weight MatMul), asked through an [`onnx_ir::GraphIndex`] built once per pass; `select` (which nodes and
//! tensors), `params` (ranges, scales, zero points), `apply` (the graph edit) and `shift` (the shifted-Softmax pair
//! and its correction) are the steps of a plan; `policy` holds the option table ([`OPTIONS`]).
//!
//! Invariants:
//! - Scales are finite and > 0; zero points lie in the integer range of their type.
//! - Only MatMul-like nodes (`MatMul`, `Gemm`, ONNX Runtime's `FusedMatMul` and fused `Attention`: their inputs A
//!   and B) and `Add` nodes are quantized; an `Add` only when its output feeds `ReduceMean` or `LayerNormalization`
//!   (a residual Add), so bias Adds and biases (a Gemm's C, an Attention's bias) stay FP32. With `contrib_ops`
//!   (the `cpu` preset), ORT's fused `Attention` / `EmbedLayerNormalization` become its integer `QAttention` /
//!   `QEmbedLayerNormalization` and a quantized MatMul with its bias `Add` one `MatMulIntegerToFloat` (`contrib`,
//!   which also imports the com.microsoft domain), the one place qdq writes an op other than Q/DQ and their
//!   corrections.
//! - A plan only rewires inputs of existing nodes; it never changes graph inputs / outputs (an initializer that an old
//!   exporter also listed as a graph input, a default value, is a constant like any other: when nothing reads it any
//!   more, it goes with its input). The one exception is a
//!   shifted Softmax pair (`softmax_range = shifted`): the `P·V` MatMul then writes a new tensor and an added `Add`
//!   (the exact correction) writes the MatMul's original output name, so every reader is unchanged.
//!   The default-domain opset is raised to 13 when lower (per-channel Q/DQ needs it). Every float `Softmax` gets its
//!   input and output shape declared ([`onnx_ir::annotate_shape_preserving`]), the one `value_info` qdq writes.
//! - A policy that smooths is planned only on a model that records its smoothing ([`Error::NotSmoothed`]), and a
//!   node or tensor name or glob it lists must match a node or tensor ([`Error::UnmatchedPattern`]).
//! - The float branch of a split MatMul input ([`split_outliers`], policy `outlier_channels`) is never selected,
//!   smoothed or rounded: its nodes carry a mark ([`is_outlier_branch`]). A policy that splits is planned only on a
//!   model that records its split ([`Error::NotSplit`]).
//! - Bad input gives an [`Error`] naming the option, node or tensor; never a panic.

mod apply;
mod bias;
mod contrib;
mod coverage;
mod dynamic;
mod embedding;
mod error;
mod outliers;
mod output_bias;
mod params;
mod patterns;
mod plan;
mod policy;
mod reference;
mod rounding;
mod scale;
mod select;
mod shift;
mod smooth;
mod types;

pub use bias::PlannedBias;
pub use contrib::{ContribRewrites, expand_integer_matmuls};
pub use coverage::{
    Coverage, FloatNode, OpCoverage, PairInfo, QUANTIZED_OPS, QdqCounts, QuantizerInfo, coverage, is_integer_kernel,
    quantized_ops,
};
pub use dynamic::{DynamicPlan, quantize_dynamic};
pub use embedding::{EmbeddingTable, RowDequantize};
pub use error::{Error, Result};
pub use outliers::{
    MAX_SHARE, OUTLIER_METADATA_KEY, OutlierSplit, outlier_candidates, outlier_channels, outlier_record, outlier_rests,
    split_outliers,
};
pub use output_bias::{
    OUTPUT_BIAS_METADATA_KEY, OutputBiasSite, output_bias_record, output_bias_site, shift_output_bias,
};
pub use patterns::{is_outlier_branch, layer_norm_channels, softmax_logits};
pub use plan::{
    Consumer, MIN_FLOAT8_OPSET, MIN_INT16_OPSET, MIN_QDQ_OPSET, Plan, PlannedTensor, Ranges, Skipped, TensorKind,
    check_mergeable, plan, quantize, tensors_to_calibrate,
};
pub use policy::{
    Activations, DEFAULT_OUTLIER_RATIO, DEFAULT_SMOOTH_ALPHA, Embeddings, Grid, KEYS, OPTIONS, OutlierBranch,
    OutlierMask, OutputBias, PRESETS, Policy, PolicyOption, Precision, Preset, ResidualAdd, SmoothContext,
    SmoothLayerNorm, SmoothTargets, SoftmaxRange, VariableB, WeightRounding, WeightStorage,
};
pub use reference::{activation_pairs, float_reference, with_float_inputs, without_pairs};
pub use rounding::{
    DAMPENING, Gram, ROUNDING_METADATA_KEY, RoundedWeight, RoundingSite, round_weights, rounding_record, rounding_sites,
};
pub use scale::{PAIR_LIMIT, QuantSpec, QuantType, ScaleZp, bound_pairs, compute_scale_zp, quantize_value};
pub use smooth::{
    SMOOTH_METADATA_KEY, SmoothForm, SmoothSite, SmoothedSite, smooth, smooth_in_place, smoothing_fingerprint,
    smoothing_record, smoothing_sites,
};
pub use types::{MATMUL_LIKE, MATMUL_OPS};
