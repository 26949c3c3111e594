//! Placement policy: which nodes get Q/DQ on which inputs, and how they are quantized.

use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::error::{Error, Result};
use crate::scale::{QuantSpec, QuantType};

/// Names accepted by [`Policy::preset`]: [`Preset::NAMES`].
pub const PRESETS: &[&str] = Preset::NAMES;

/// Migration strength of the `tensorrt`, `migraphx` and `cpu` presets' smoothing (see [`crate::smooth`]); chosen on the
/// SQuAD dev set, see docs/QUANTIZATION.md.
pub const DEFAULT_SMOOTH_ALPHA: f32 = 1.0;

/// "a, b or c": how errors and help texts list a closed set of values.
fn or_list(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// An option whose values are keywords: the enum, its names, `Display` and `FromStr` from one list, so the names
/// `set` accepts and the names `describe` prints cannot drift apart.
macro_rules! keywords {
    ($(#[$m:meta])* $t:ident { $($(#[$vm:meta])* $v:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $t { $($(#[$vm])* $v),+ }

        impl $t {
            /// Every value's name, as [`Policy::set`] takes it.
            pub const NAMES: &'static [&'static str] = &[$($s),+];
            /// Every value, in [`Self::NAMES`] order.
            pub const ALL: &'static [$t] = &[$($t::$v),+];
        }

        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(match self { $($t::$v => $s),+ })
            }
        }

        impl std::str::FromStr for $t {
            /// What is accepted ("a, b or c").
            type Err = String;

            fn from_str(s: &str) -> std::result::Result<Self, String> {
                match s { $($s => Ok($t::$v),)+ _ => Err(or_list($t::NAMES)) }
            }
        }

        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                let name = String::deserialize(d)?;
                name.parse().map_err(|valid| serde::de::Error::custom(format!("`{name}`: expected {valid}")))
            }
        }
    };
}

keywords! {
    /// The named starting points of a [`Policy`] ([`Policy::of`]; docs/QUANTIZATION.md explains each).
    Preset {
        /// ONNX Runtime's QDQ quantizer with the seed scripts' options.
        OrtCompatible = "ort-compatible",
        /// For TensorRT: residual Adds in float, every constant-weight MatMul input smoothed, Softmax shifted.
        TensorRt = "tensorrt",
        /// For MIGraphX: the `tensorrt` layout.
        MiGraphX = "migraphx",
        /// For ONNX Runtime's CPU EP: its integer MatMul kernels, uint8 activations, int8 weights and embeddings.
        Cpu = "cpu",
        /// For Qualcomm's QNN EP (HTP): the `tensorrt` layout, 16-bit activations, fully connected outputs quantized.
        Qnn = "qnn",
        /// For OpenVINO: the `cpu` placement in plain Q/DQ (no contrib op), the attention scores integer on int8
        /// operands without a zero point, the smoothing in a form OpenVINO fuses with the pairs.
        OpenVino = "openvino",
    }
}

keywords! {
    /// Treatment of `Add` nodes whose output feeds `ReduceMean` (LayerNorm decomposed, opset <= 16)
    /// or `LayerNormalization` (opset >= 17): the residual Adds. Other Adds (bias Adds, ...) are
    /// never quantized.
    ResidualAdd {
        /// Put Q/DQ on both inputs of residual Adds (what ORT does with the seed-001 exclusions).
        Quantize = "quantize",
        /// Leave residual Adds in float.
        Skip = "skip",
    }
}

keywords! {
    /// How Softmax outputs (attention probabilities) are quantized.
    SoftmaxRange {
        /// The calibrated range, like any activation (ORT's behaviour). A calibrator that clips attention
        /// probabilities (entropy, MSE, percentile) saturates the few large ones that carry the attention.
        Calibrated = "calibrated",
        /// The analytic range [0, 1]: with symmetric int8 only 128 levels (steps of 1/127) are used.
        Full = "full",
        /// `p - 0.5` quantized over [-0.5, 0.5]: all 255 symmetric int8 levels (steps of 1/254) on [0, 1], so half
        /// the rounding error and far fewer small probabilities rounded to zero. The MatMul `P·V` stays int8; its
        /// output gets `0.5 · Σ_k V[k, :]` added back in float, computed from the same dequantized `V`, so the
        /// result is exactly `DQ(P)·DQ(V)`. Needs symmetric activations.
        Shifted = "shifted",
        /// The analytic range [0, 1] as uint8 with zero point 0, whatever `activations` says: all 256 levels (steps
        /// of 1/255), read by an integer `P·V` beside int8 `V` (u8 x s8, the form int8 GEMM kernels take natively),
        /// and no correction node.
        FullUint8 = "full-uint8",
        /// Not quantized: the MatMul reading the probabilities (`P·V`) stays in float, its `V` with it; where variable
        /// MatMuls are quantized (`matmul_const_b_only = false`) only the scores `Q·K^T` are integer.
        Float = "float",
    }
}

keywords! {
    /// Which activations SmoothQuant-style smoothing rescales (see [`crate::smooth`]).
    SmoothTargets {
        /// LayerNorm outputs only: γ / β absorb the division, no node is added on their path.
        LayerNorm = "layernorm",
        /// Also every other activation read by a constant-weight MatMul (GELU outputs, attention context), divided
        /// by an explicit `Mul` in front of the MatMuls (an attention context as [`SmoothContext`] says).
        All = "all",
        /// Only the activations that are not LayerNorm outputs (GELU outputs, attention context), each divided by an
        /// explicit `Mul`; LayerNorm outputs stay as they are, so their residual path needs no `Mul` restoring them.
        Others = "others",
        /// LayerNorm outputs (also seen through shape-only ops) and attention contexts (as [`SmoothContext`] says), not
        /// the FFN's inner activation (the GELU output read by the down projection), whose division would be a `Mul`
        /// over the FFN's widest tensor: a kernel pass of its own on ONNX Runtime's CPU EP.
        LayerNormContext = "layernorm-context",
    }
}

keywords! {
    /// How smoothing divides an attention context (the input of the attention's output projection).
    SmoothContext {
        /// In its value projection's weight columns and bias: nothing is added to the graph (for ORT's CPU EP, where a
        /// `Mul` is a kernel of its own); where the graph allows it (see [`crate::SmoothForm::ValueProjection`], and
        /// [`crate::SmoothForm::PackedValue`] for ONNX Runtime's fused `Attention`: the V part of its packed weight).
        Projection = "projection",
        /// By an explicit `Mul` in front of the output projection (TensorRT fuses it as the pre-quant scale).
        Mul = "mul",
    }
}

keywords! {
    /// How smoothing divides a LayerNorm output that something other than its quantized MatMuls also reads (the
    /// residual Add of a post-LN BERT).
    #[derive(Default)]
    SmoothLayerNorm {
        /// In γ and β (nothing added on the MatMuls' path); the other readers read it through a `Mul` restoring it.
        #[default]
        Parameters = "parameters",
        /// By a `Mul` in front of the MatMuls only; the other readers read the LayerNorm output as it is (OpenVINO
        /// fuses that `Mul` with the pair's quantization, where a pair read beside a float reader is a kernel of its
        /// own).
        Mul = "mul",
    }
}

keywords! {
    /// The type of a pair read by a MatMul whose B is not a constant: as A (attention's `Q` in `Q·Kᵀ`, `P` in `P·V`;
    /// [`Policy::variable_a`]) or as B (`K`, `V`; [`Policy::variable_b`]).
    #[derive(Default)]
    VariableB {
        /// The policy's `activations`.
        #[default]
        Activations = "activations",
        /// int8 with zero point 0 whatever `activations` says: x86 int8 GEMMs multiply u8 by s8, and OpenVINO runs its
        /// int8 attention only on operands without a zero point (with one it runs the attention in float, the zero
        /// point a `Subtract` of its own).
        Int8Symmetric = "int8-symmetric",
    }
}

keywords! {
    /// How an outlier channel split off into float (`outlier_channels`) leaves the integer MatMul's input.
    #[derive(Default)]
    OutlierMask {
        /// Zeroed by a `Mul` in front of the pair (the pair reads the rest).
        #[default]
        Mul = "mul",
        /// Saturated in the pair, against the zeroed weight rows it meets (the pair reads the input itself): the same
        /// integers without the `Mul`, where no other reader shares the weight; a weight-only float reference then
        /// holds the outlier channels in its input.
        Fold = "fold",
    }
}

keywords! {
    /// Where the float branch of split-off outlier channels (`outlier_channels`) takes them from.
    #[derive(Default)]
    OutlierBranch {
        /// Gathered from the MatMul's input itself (a second reader of the widest activation).
        #[default]
        Gather = "gather",
        /// Recomputed from the layer before, where the input is a fully connected layer's output through an
        /// elementwise activation (the FFN's GELU): that layer and activation on the outlier channels alone, so the
        /// input keeps one reader (OpenVINO then fuses its pair, and with `outlier_mask = fold` the activation, into
        /// the layer); gathered where it is not.
        Recompute = "recompute",
    }
}

keywords! {
    /// Which integer each weight is rounded to (the grid, its scales and zero points, is the same either way).
    #[derive(Default)]
    WeightRounding {
        /// The nearest grid point, weight by weight.
        #[default]
        Nearest = "nearest",
        /// GPTQ ([`crate::rounding`]): row by row, each row's error pushed into the rows left along the inverse of
        /// the input's Gram matrix (from the calibration data), so the MatMul's output error is what is minimised.
        Gptq = "gptq",
    }
}

keywords! {
    /// How a constant weight is represented after quantization.
    WeightStorage {
        /// Keep the FP32 initializer followed by QuantizeLinear -> DequantizeLinear (TensorRT style,
        /// ORT's `AddQDQPairToWeight`).
        QdqPair = "qdq-pair",
        /// Store an 8-bit initializer read by a DequantizeLinear: int8, or float8 under a float8 `precision`.
        Int8Initializer = "int8-initializer",
    }
}

keywords! {
    /// How embedding tables (float initializers that only Gathers read) are stored.
    Embeddings {
        /// As they are.
        Float = "float",
        /// int8, one symmetric scale per column, a DequantizeLinear after each Gather (`Cast` + `Mul` in ONNX
        /// Runtime's CPU layout, `contrib_ops`: the same values, faster there; [`crate::EmbeddingTable`]).
        Int8 = "int8",
        /// int8 in the file as `int8`, dequantized whole by one DequantizeLinear before its Gathers: a constant an EP
        /// that folds constants (OpenVINO) turns back into the float table at load, so each lookup gathers float rows
        /// with no kernel of its own (the table then takes float's memory at run time). OpenVINO 2026.4's CPU plugin
        /// crashed on `qdq debug`'s float reference of such a model.
        Int8Table = "int8-table",
    }
}

keywords! {
    /// How activations are quantized.
    Activations {
        /// int8 with zero point 0 (TensorRT, MIGraphX).
        Int8Symmetric = "int8-symmetric",
        /// uint8 with a zero point (ONNX Runtime's CPU integer kernels).
        Uint8Asymmetric = "uint8-asymmetric",
        /// int8 with a zero point: all 256 levels on a one-sided range (a GELU output) as uint8 has, in the signed type
        /// OpenVINO's int8 attention takes (NNCF's activations).
        Int8Asymmetric = "int8-asymmetric",
        /// int16 with zero point 0 beside 8-bit weights (QNN's HTP); the model raised to opset 21.
        Int16Symmetric = "int16-symmetric",
    }
}

keywords! {
    /// The 8-bit type of the Q/DQ pairs (activations and weights; embedding tables follow `embeddings`).
    #[derive(Default)]
    Precision {
        /// Integers: `activations` says which; weights int8.
        #[default]
        Int8 = "int8",
        /// `FLOAT8E4M3FN` (TensorRT on Hopper / Ada): zero point 0.0, scale = range / 448; opset 19.
        Fp8E4M3Fn = "fp8-e4m3fn",
        /// `FLOAT8E4M3FNUZ` (MIGraphX on MI300): zero point 0.0, scale = range / 240; opset 19.
        Fp8E4M3Fnuz = "fp8-e4m3fnuz",
    }
}

/// The kind of grid a [`Precision`]'s pairs put values on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grid {
    /// Integers with a scale and zero point: what GPTQ rounding, bounded pairs, int32 biases, the shifted Softmax
    /// range, TensorRT / MIGraphX tables, ONNX Runtime's integer contrib ops and dynamic mode work on.
    Integer,
    /// A float8 format (its element type): finest near 0, no zero point.
    Float8(QuantType),
}

impl Precision {
    /// The grid its pairs put values on.
    pub fn grid(self) -> Grid {
        match self {
            Precision::Int8 => Grid::Integer,
            Precision::Fp8E4M3Fn => Grid::Float8(QuantType::Float8E4M3Fn),
            Precision::Fp8E4M3Fnuz => Grid::Float8(QuantType::Float8E4M3Fnuz),
        }
    }

    /// Whether its pairs are integer ones ([`Grid::Integer`]).
    pub fn is_integer(self) -> bool {
        self.grid() == Grid::Integer
    }

    /// The element type of its weights' pairs (int8, or the float8 format).
    pub fn weight_type(self) -> QuantType {
        match self.grid() {
            Grid::Integer => QuantType::Int8,
            Grid::Float8(q) => q,
        }
    }
}

impl Activations {
    /// The integer type and symmetry.
    pub fn spec(self) -> QuantSpec {
        match self {
            Activations::Int8Symmetric => QuantSpec { qtype: QuantType::Int8, symmetric: true, reduce_range: false },
            Activations::Uint8Asymmetric => {
                QuantSpec { qtype: QuantType::UInt8, symmetric: false, reduce_range: false }
            }
            Activations::Int16Symmetric => QuantSpec { qtype: QuantType::Int16, symmetric: true, reduce_range: false },
            Activations::Int8Asymmetric => QuantSpec { qtype: QuantType::Int8, symmetric: false, reduce_range: false },
        }
    }
}

/// One policy option: its key, one sentence on what it does, the values it takes, how to read and write it.
/// [`OPTIONS`] is the only list of them: [`Policy::set`], [`Policy::describe`], [`KEYS`] and the CLI's
/// `--list-policies` all read it.
pub struct PolicyOption {
    /// The key of `--policy-option KEY=VALUE`.
    pub key: &'static str,
    /// What the option does, one sentence.
    pub doc: &'static str,
    /// The values it takes.
    pub values: &'static str,
    get: fn(&Policy) -> String,
    set: fn(&mut Policy, &str) -> std::result::Result<(), String>,
}

fn boolean(v: &str) -> std::result::Result<bool, String> {
    match v {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err("true or false".into()),
    }
}

fn list(v: &str) -> Vec<String> {
    v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()
}

/// Appends globs to one of the policy's glob lists after checking they compile.
fn globs(target: &mut Vec<String>, v: &str) -> std::result::Result<(), String> {
    let new = list(v);
    for p in &new {
        Glob::new(p).map_err(|e| format!("a valid glob ({e})"))?;
    }
    target.extend(new);
    Ok(())
}

/// What `op_types` takes: [`crate::MATMUL_OPS`] and `Add` (a test holds the two together).
const OP_TYPES: &str = "a comma-separated subset of MatMul,Gemm,FusedMatMul,Attention,Add";

/// The `cpu` preset's `outlier_channels`: channels over 6 times the median channel's max |x| (docs/QUANTIZATION.md,
/// "Sentence-embedding models": why not 8).
pub const DEFAULT_OUTLIER_RATIO: f32 = 6.0;

/// An option that is `off` or a number `valid` accepts (`smooth`, `outlier_channels`), as the CLI / TOML give it.
fn off_or_number(v: &str, valid: fn(f64) -> bool, expected: &str) -> std::result::Result<Option<f32>, String> {
    match v {
        "off" | "none" | "false" => Ok(None),
        v => match v.parse::<f64>() {
            Ok(a) if valid(a) => Ok(Some(a as f32)),
            _ => Err(expected.to_owned()),
        },
    }
}

fn strength(a: f64) -> bool {
    (0.0..=1.0).contains(&a)
}

fn ratio(r: f64) -> bool {
    r.is_finite() && r > 1.0
}

/// Such an option in a serialized [`Policy`]: `"off"`, or the number.
mod off_or_number_serde {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<f32>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(a) => s.serialize_f32(*a),
            None => s.serialize_str("off"),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
        valid: fn(f64) -> bool,
        expected: &str,
    ) -> Result<Option<f32>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Value {
            Number(f64),
            Word(String),
        }
        match Value::deserialize(d)? {
            Value::Number(a) if valid(a) => Ok(Some(a as f32)),
            Value::Word(w) if w == "off" => Ok(None),
            _ => Err(serde::de::Error::custom(expected)),
        }
    }
}

/// `smooth` in a serialized [`Policy`]: `"off"`, or the migration strength.
mod smooth_strength {
    pub use super::off_or_number_serde::serialize;

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f32>, D::Error> {
        super::off_or_number_serde::deserialize(
            d,
            super::strength,
            "expected \"off\" or a migration strength in [0, 1]",
        )
    }
}

/// `outlier_channels` in a serialized [`Policy`]: `"off"`, or the ratio.
mod outlier_ratio {
    pub use super::off_or_number_serde::serialize;

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f32>, D::Error> {
        super::off_or_number_serde::deserialize(d, super::ratio, "expected \"off\" or a ratio > 1")
    }
}

/// Every option, in the order `describe` prints them.
pub const OPTIONS: &[PolicyOption] = &[
    PolicyOption {
        key: "op_types",
        doc: "op types whose inputs get Q/DQ pairs",
        values: OP_TYPES,
        get: |p| p.op_types.join(","),
        set: |p, v| {
            let ops = list(v);
            let known = |o: &String| o == "Add" || crate::types::MATMUL_OPS.contains(&o.as_str());
            if ops.is_empty() || !ops.iter().all(known) {
                return Err(OP_TYPES.into());
            }
            p.op_types = ops;
            Ok(())
        },
    },
    PolicyOption {
        key: "matmul_const_b_only",
        doc: "quantize a MatMul only when its second input is a constant weight",
        values: "true or false",
        get: |p| p.matmul_const_b_only.to_string(),
        set: |p, v| {
            p.matmul_const_b_only = boolean(v)?;
            Ok(())
        },
    },
    PolicyOption {
        key: "residual_add",
        doc: "the residual Adds (those feeding a LayerNorm): Q/DQ on both inputs, or left in float",
        values: "quantize or skip",
        get: |p| p.residual_add.to_string(),
        set: |p, v| {
            p.residual_add = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "dedicated_pairs",
        doc: "one Q/DQ pair per quantized reader of an activation (TensorRT cannot share one) instead of a shared pair",
        values: "true or false",
        get: |p| p.dedicated_pairs.to_string(),
        set: |p, v| {
            p.dedicated_pairs = boolean(v)?;
            Ok(())
        },
    },
    PolicyOption {
        key: "shared_pair_feeds_all",
        doc: "a shared pair also feeds the tensor's readers that are not quantized, as ONNX Runtime does",
        values: "true or false",
        get: |p| p.shared_pair_feeds_all.to_string(),
        set: |p, v| {
            p.shared_pair_feeds_all = boolean(v)?;
            Ok(())
        },
    },
    PolicyOption {
        key: "quantize_outputs",
        doc: "also Q/DQ on the outputs of quantized nodes (with shared_pair_feeds_all = true, ONNX Runtime's CPU EP then fuses QLinearMatMul instead of MatMulIntegerToFloat)",
        values: "true or false",
        get: |p| p.quantize_outputs.to_string(),
        set: |p, v| {
            p.quantize_outputs = boolean(v)?;
            Ok(())
        },
    },
    PolicyOption {
        key: "quantize_fc_outputs",
        doc: "also Q/DQ on the output of each quantized constant-weight MatMul, after its bias Add when it has one (QNN's \
              HTP then runs MatMul, bias and requantization as one FullyConnected with per-channel weights)",
        values: "true or false",
        get: |p| p.quantize_fc_outputs.to_string(),
        set: |p, v| {
            p.quantize_fc_outputs = boolean(v)?;
            Ok(())
        },
    },
    PolicyOption {
        key: "activations",
        doc: "activation quantization: int8 with zero point 0, uint8 with a zero point, int8 with a zero point, or \
              int16 with zero point 0 (opset 21)",
        values: "int8-symmetric, uint8-asymmetric, int8-asymmetric or int16-symmetric",
        get: |p| p.activations.to_string(),
        set: |p, v| {
            p.activations = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "variable_b",
        doc: "the type of a pair read as B by a MatMul whose B is not a constant (attention's K, V): as `activations`, \
              or int8 with zero point 0 (x86 int8 GEMMs multiply u8 by s8)",
        values: "activations or int8-symmetric",
        get: |p| p.variable_b.to_string(),
        set: |p, v| {
            p.variable_b = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "variable_min_depth",
        doc: "a MatMul of two variables (attention's Q·Kᵀ) is quantized only when it contracts over at least this many \
              elements (its head size), where the graph tells: AMX's int8 tiles contract 64 bytes, so a shallower one \
              runs faster in bf16 there; 0 = any",
        values: "a whole number (0 = any)",
        get: |p| p.variable_min_depth.to_string(),
        set: |p, v| {
            p.variable_min_depth = v.parse().map_err(|_| "a whole number (0 = any)".to_owned())?;
            Ok(())
        },
    },
    PolicyOption {
        key: "variable_a",
        doc: "the type of a pair read as A by a MatMul whose B is not a constant (attention's Q, P): as `activations`, \
              or int8 with zero point 0 (OpenVINO's int8 attention takes no zero point)",
        values: "activations or int8-symmetric",
        get: |p| p.variable_a.to_string(),
        set: |p, v| {
            p.variable_a = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "precision",
        doc: "the pairs' 8-bit type: integers (as `activations` says), or E4M3 floats for TensorRT (fp8-e4m3fn, largest \
              value 448) or MIGraphX (fp8-e4m3fnuz, 240): zero point 0, scale = range / that value, per-channel \
              weights stored as `weights` says, Softmax outputs over [0, 1]; the model raised to opset 19",
        values: "int8, fp8-e4m3fn or fp8-e4m3fnuz",
        get: |p| p.precision.to_string(),
        set: |p, v| {
            p.precision = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "per_channel",
        doc: "one scale per output column of each MatMul weight instead of one per tensor",
        values: "true or false",
        get: |p| p.per_channel.to_string(),
        set: |p, v| {
            p.per_channel = boolean(v)?;
            Ok(())
        },
    },
    PolicyOption {
        key: "weights",
        doc: "weight storage: float initializer + Q + DQ, or 8-bit initializer + DQ (int8, float8 with an fp8 precision; a \
              smaller file)",
        values: "qdq-pair or int8-initializer",
        get: |p| p.weights.to_string(),
        set: |p, v| {
            p.weights = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "weight_rounding",
        doc: "which integer each int8 weight takes on its grid: the nearest, or GPTQ's choice against the calibration \
              inputs' Gram matrix (the MatMul's output error minimised; one more pass over the calibration data)",
        values: "nearest or gptq",
        get: |p| p.weight_rounding.to_string(),
        set: |p, v| {
            p.weight_rounding = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "embeddings",
        doc: "embedding tables (float initializers only Gathers read) as they are, or int8 with one scale per column and a DequantizeLinear after each Gather (a 4x smaller table; with contrib_ops, Cast + Mul: the same values, faster on ORT's CPU EP), or int8-table: int8 in the file, dequantized whole before the Gathers (a constant OpenVINO folds at load)",
        values: "float, int8 or int8-table",
        get: |p| p.embeddings.to_string(),
        set: |p, v| {
            p.embeddings = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "contrib_ops",
        doc: "ONNX Runtime's fused Attention and EmbedLayerNormalization (written by its transformers optimizer) become its integer QAttention / QEmbedLayerNormalization (CPU EP only) instead of reading Q/DQ pairs that its CPU EP would dequantize on every run, and a quantized MatMul with a bias Add becomes one MatMulIntegerToFloat with the bias",
        values: "true or false",
        get: |p| p.contrib_ops.to_string(),
        set: |p, v| {
            p.contrib_ops = boolean(v)?;
            Ok(())
        },
    },
    PolicyOption {
        key: "reduce_range",
        doc: "7-bit weights, avoiding u8s8 saturation in ONNX Runtime's CPU kernels on x86 without VNNI",
        values: "true or false",
        get: |p| p.reduce_range.to_string(),
        set: |p, v| {
            p.reduce_range = boolean(v)?;
            Ok(())
        },
    },
    PolicyOption {
        key: "bounded_pairs",
        doc: "8-bit weights with reduce_range's guarantee: adjacent weights along the contracted axis hold |a| + |b| <= 128, so ONNX Runtime's u8s8 kernels cannot saturate on x86 without VNNI either",
        values: "true or false",
        get: |p| p.bounded_pairs.to_string(),
        set: |p, v| {
            p.bounded_pairs = boolean(v)?;
            Ok(())
        },
    },
    PolicyOption {
        key: "softmax_range",
        doc: "range of Softmax outputs: calibrated, [0, 1], P - 0.5 over [-0.5, 0.5] with an exact float correction, \
              [0, 1] as uint8 whatever the activations' type, or not quantized (P·V left in float)",
        values: "calibrated, full, shifted, full-uint8 or float",
        get: |p| p.softmax_range.to_string(),
        set: |p, v| {
            p.softmax_range = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "smooth",
        doc: "SmoothQuant-style migration of MatMul inputs' outlier channels into the weights, before calibration",
        values: "off or a migration strength in [0, 1], e.g. 0.5",
        get: |p| p.smooth.map_or_else(|| "off".to_string(), |a| a.to_string()),
        set: |p, v| {
            p.smooth = off_or_number(v, strength, "off or a migration strength in [0, 1], e.g. 0.5")?;
            Ok(())
        },
    },
    PolicyOption {
        key: "outlier_channels",
        doc: "carry a MatMul input's outlier channels (max |x| over this many times the median channel's) in float \
              beside its integer MatMul, the pair's range made from the other channels; for inputs smoothing leaves \
              alone (the GELU outputs)",
        values: "off or a ratio > 1, e.g. 8",
        get: |p| p.outlier_channels.map_or_else(|| "off".to_string(), |r| r.to_string()),
        set: |p, v| {
            p.outlier_channels = off_or_number(v, ratio, "off or a ratio > 1, e.g. 8")?;
            Ok(())
        },
    },
    PolicyOption {
        key: "outlier_branch",
        doc: "where the float branch of outlier channels takes them from: gathered from the MatMul's input, or \
              recomputed from the fully connected layer and elementwise activation that made it (the input then \
              keeps one reader, which OpenVINO fuses into that layer)",
        values: "gather or recompute",
        get: |p| p.outlier_branch.to_string(),
        set: |p, v| {
            p.outlier_branch = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "outlier_mask",
        doc: "how outlier channels carried in float leave the integer MatMul's input: zeroed by a Mul in front of \
              its pair, or saturated in the pair against the weight rows zeroed for them (the same integers, one \
              kernel fewer)",
        values: "mul or fold",
        get: |p| p.outlier_mask.to_string(),
        set: |p, v| {
            p.outlier_mask = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "smooth_targets",
        doc: "what smoothing rescales: LayerNorm outputs (into gamma/beta), every constant-weight MatMul input, only \
              the inputs that are not LayerNorm outputs (GELU outputs, attention context; one Mul each), or LayerNorm \
              outputs and attention contexts (not the GELU outputs)",
        values: "layernorm, all, others or layernorm-context",
        get: |p| p.smooth_targets.to_string(),
        set: |p, v| {
            p.smooth_targets = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "smooth_context",
        doc: "how an attention context is divided by its smoothing factors: in its value projection's weight columns \
              and bias, or a fused Attention's V columns of its packed weight (nothing added; for ORT's CPU EP, where \
              a Mul is a kernel of its own), or by a Mul in front of the output projection (TensorRT fuses it as the \
              pre-quant scale)",
        values: "projection or mul",
        get: |p| p.smooth_context.to_string(),
        set: |p, v| {
            p.smooth_context = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "smooth_layernorm",
        doc: "how a LayerNorm output that the residual path also reads is divided by its smoothing factors: in gamma \
              and beta (the residual path then reads it through a Mul restoring it), or by a Mul in front of its \
              MatMuls only (the residual path reads it as it is; OpenVINO fuses that Mul with the pair)",
        values: "parameters or mul",
        get: |p| p.smooth_layernorm.to_string(),
        set: |p, v| {
            p.smooth_layernorm = v.parse()?;
            Ok(())
        },
    },
    PolicyOption {
        key: "include_nodes",
        doc: "node names or globs: when any is given, only matching nodes are quantized (added to the list)",
        values: "comma-separated names or globs",
        get: |p| p.include_nodes.join(","),
        set: |p, v| globs(&mut p.include_nodes, v),
    },
    PolicyOption {
        key: "exclude_nodes",
        doc: "node names or globs never quantized (added to the list)",
        values: "comma-separated names or globs",
        get: |p| p.exclude_nodes.join(","),
        set: |p, v| globs(&mut p.exclude_nodes, v),
    },
    PolicyOption {
        key: "exclude_tensors",
        doc: "tensor names or globs never given a Q/DQ pair (added to the list)",
        values: "comma-separated names or globs",
        get: |p| p.exclude_tensors.join(","),
        set: |p, v| globs(&mut p.exclude_tensors, v),
    },
    PolicyOption {
        key: "strict",
        doc: "a tensor the policy quantizes that has no calibration range is an error instead of being skipped",
        values: "true or false",
        get: |p| p.strict.to_string(),
        set: |p, v| {
            p.strict = boolean(v)?;
            Ok(())
        },
    },
];

/// Keys accepted by [`Policy::set`], in [`OPTIONS`] order.
pub const KEYS: [&str; OPTIONS.len()] = {
    let mut keys = [""; OPTIONS.len()];
    let mut i = 0;
    while i < OPTIONS.len() {
        keys[i] = OPTIONS[i].key;
        i += 1;
    }
    keys
};

/// A complete, validated set of placement and maths options. Serialized (serde), it is every option under its
/// [`OPTIONS`] key with the value [`Policy::set`] takes, `smooth` `"off"` or its strength: what `qdq tune` writes into
/// its recipe, so a recipe replays the same model whatever later versions make of the presets.
///
/// Biases: bias Adds are never quantized, so biases stay FP32 under every preset.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Preset this policy started from.
    pub preset: Preset,
    /// Op types whose inputs get Q/DQ: the MatMul-like ops (`MatMul`, `Gemm`, ONNX Runtime's `FusedMatMul` and
    /// fused `Attention`; their A and B only) and `Add`.
    pub op_types: Vec<String>,
    /// Quantize a MatMul only when its B input is an initializer.
    pub matmul_const_b_only: bool,
    /// Residual Add treatment.
    pub residual_add: ResidualAdd,
    /// One Q/DQ pair per quantized consumer (TensorRT cannot share a pair) instead of one shared.
    pub dedicated_pairs: bool,
    /// A shared pair (one quantized reader, or `dedicated_pairs` off) also feeds the tensor's
    /// readers that are not quantized, as ORT does; off, those keep reading the FP32 tensor.
    pub shared_pair_feeds_all: bool,
    /// Also put Q/DQ on the outputs of quantized nodes (needs their ranges).
    pub quantize_outputs: bool,
    /// Also put Q/DQ on the output of each quantized constant-weight MatMul, after its bias `Add` when one follows
    /// (a fully connected layer's output), one pair feeding every reader (recipes written before it existed read as
    /// `false`).
    #[serde(default)]
    pub quantize_fc_outputs: bool,
    /// Activation quantization.
    pub activations: Activations,
    /// A MatMul of two variables (attention's `Q·Kᵀ`) is quantized only when it contracts over at least this many
    /// elements (its head size), where the graph tells; 0: any (recipes written before it existed read as 0).
    #[serde(default)]
    pub variable_min_depth: u32,
    /// The type of a variable MatMul's A (recipes written before it existed read as `activations`).
    #[serde(default)]
    pub variable_a: VariableB,
    /// The type of a variable MatMul's B (recipes written before it existed read as `activations`).
    #[serde(default)]
    pub variable_b: VariableB,
    /// The pairs' 8-bit type: int8 (`activations` says which integer) or an E4M3 float (recipes written before it
    /// existed read as int8).
    #[serde(default)]
    pub precision: Precision,
    /// One scale per output column of MatMul weights (axis 1 of `[in, out]`).
    pub per_channel: bool,
    /// Weight representation.
    pub weights: WeightStorage,
    /// How integer weights are rounded to their grid (recipes written before it existed read as `nearest`).
    #[serde(default)]
    pub weight_rounding: WeightRounding,
    /// Embedding table representation.
    pub embeddings: Embeddings,
    /// ONNX Runtime's fused `Attention` / `EmbedLayerNormalization` as its integer `QAttention` /
    /// `QEmbedLayerNormalization` (the latter with `embeddings = int8`), and a quantized MatMul with its bias `Add` as
    /// one `MatMulIntegerToFloat`; see `contrib` in the crate docs.
    pub contrib_ops: bool,
    /// 7-bit weights (int8 [-64, 64]), as ORT's `reduce_range`: avoids u8s8 saturation in
    /// ORT's CPU integer kernels on x86 without VNNI. Activations keep the full range.
    pub reduce_range: bool,
    /// 8-bit weights with the same guarantee as `reduce_range`: adjacent int8 weights along the contracted axis hold
    /// `|a| + |b| <= 128` ([`crate::scale::PAIR_LIMIT`]), so a uint8 activation times the pair cannot saturate
    /// `VPMADDUBSW`'s 16-bit sum (recipes written before it existed read as `false`).
    #[serde(default)]
    pub bounded_pairs: bool,
    /// Range of Softmax outputs (attention probabilities).
    pub softmax_range: SoftmaxRange,
    /// SmoothQuant-style migration strength α in [0, 1] for the MatMul inputs of [`Policy::smooth_targets`] (see
    /// [`crate::smooth`]); `None` = off. Needs per-channel calibration of those inputs first, which the pipeline
    /// does before the main calibration.
    #[serde(with = "smooth_strength")]
    pub smooth: Option<f32>,
    /// Which MatMul inputs smoothing rescales.
    pub smooth_targets: SmoothTargets,
    /// How smoothing divides an attention context.
    pub smooth_context: SmoothContext,
    /// How smoothing divides a LayerNorm output that others than its MatMuls read (recipes written before it existed
    /// read as `parameters`).
    #[serde(default)]
    pub smooth_layernorm: SmoothLayerNorm,
    /// Outlier channels carried in float (see [`crate::outliers`]): a constant-weight MatMul input that smoothing
    /// leaves alone, whose channels reach more than this many times the median channel's max |x|, has those channels
    /// taken out of its pair (and its range) and multiplied by their weight rows in a small float MatMul beside it;
    /// `None` = off. Decided on the same per-channel pass as smoothing.
    #[serde(with = "outlier_ratio", default)]
    pub outlier_channels: Option<f32>,
    /// How outlier channels leave the integer MatMul's input (recipes written before it existed read as `mul`).
    #[serde(default)]
    pub outlier_mask: OutlierMask,
    /// Where their float branch takes them from (recipes written before it existed read as `gather`).
    #[serde(default)]
    pub outlier_branch: OutlierBranch,
    /// Node-name globs: when non-empty, only matching nodes are quantized.
    pub include_nodes: Vec<String>,
    /// Node-name globs never quantized.
    pub exclude_nodes: Vec<String>,
    /// Tensor-name globs never given a Q/DQ pair.
    pub exclude_tensors: Vec<String>,
    /// A tensor without a range is an error instead of being skipped.
    pub strict: bool,
}

impl Policy {
    /// A preset by name (see [`PRESETS`]); an unknown name is an error listing them.
    pub fn preset(name: &str) -> Result<Policy> {
        let preset =
            name.parse().map_err(|_| Error::UnknownPreset { name: name.to_string(), valid: PRESETS.join(", ") })?;
        Ok(Policy::of(preset))
    }

    /// A preset.
    ///
    /// `ort-compatible` is ORT's QDQQuantizer with the seeds' options: MatMul+Add, per-channel symmetric int8
    /// weights as FP32 + Q/DQ pair, symmetric int8 activations, dedicated pairs, no output quantization and residual
    /// Adds quantized. `tensorrt` and `migraphx` (identical) leave residual Adds in float, smooth every
    /// constant-weight MatMul input and quantize Softmax outputs shifted (see docs/QUANTIZATION.md).
    /// `cpu` quantizes MatMuls only (smoothed as in `tensorrt`), with asymmetric uint8 activations, shared pairs (read
    /// by the quantized MatMuls only: the residual path keeps the float tensor) and int8 weight initializers
    /// (`bounded_pairs`, GPTQ-rounded), the GELU outputs' outlier channels in float beside the integer MatMul
    /// (`outlier_channels`), int8 embedding tables, outputs in float: ORT 1.31's CPU EP (opt level All) turns each
    /// DQ -> MatMul into `MatMulIntegerToFloat` (real model: all 49), whose float output keeps the outlier channels of
    /// the residual stream that a quantized output (`quantize_outputs = true`, fused into `QLinearMatMul`) clips, and
    /// runs faster too (docs/QUANTIZATION.md). `qnn`: see
    /// `Policy::qnn` (private) and docs/QUANTIZATION.md. `openvino`: the `cpu` placement, weights, uint8 activations
    /// and outlier channels as plain Q/DQ, the attention scores `Q·Kᵀ` integer on int8 operands with zero point 0,
    /// every smoothed input divided by a `Mul` OpenVINO fuses with its pair (docs/QUANTIZATION.md, "OpenVINO").
    pub fn of(preset: Preset) -> Policy {
        let base = Policy::ort_compatible(preset);
        match preset {
            Preset::OrtCompatible => base,
            // The seed placement with four changes (docs/QUANTIZATION.md, which measures each): residual Adds (the LayerNorm inputs, whose outlier channels per-tensor int8 cannot hold)
            // stay in float, and so do the non-MatMul readers of a quantized tensor; every constant-weight MatMul
            // input is smoothed into its weights (alpha DEFAULT_SMOOTH_ALPHA); Softmax outputs are quantized shifted
            // by -0.5 to use all int8 levels. Every MatMul still reads only quantized inputs.
            Preset::TensorRt | Preset::MiGraphX => Policy {
                residual_add: ResidualAdd::Skip,
                shared_pair_feeds_all: false,
                softmax_range: SoftmaxRange::Shifted,
                smooth: Some(DEFAULT_SMOOTH_ALPHA),
                smooth_targets: SmoothTargets::All,
                ..base
            },
            Preset::Qnn => Policy::qnn(base),
            Preset::OpenVino => Policy::openvino(Policy::of(Preset::Cpu)),
            // For ORT's CPU EP (docs/QUANTIZATION.md, "What decides CPU speed"): the constant-weight MatMuls only
            // (the attention MatMuls stay float, as ORT's dynamic quantization leaves them: faster at batch 1),
            // int8 weight initializers with 7-bit range, uint8 activations, int8 embedding tables, smoothed: LayerNorm
            // outputs and attention contexts (in their value projections: no Mul, a kernel of its own on the CPU EP),
            // not the GELU outputs (no measurable loss, and 6 fewer Muls over the FFN's widest activation).
            Preset::Cpu => Policy {
                op_types: crate::types::MATMUL_OPS.map(String::from).to_vec(),
                matmul_const_b_only: true,
                residual_add: ResidualAdd::Skip,
                dedicated_pairs: false,
                shared_pair_feeds_all: false,
                activations: Activations::Uint8Asymmetric,
                weights: WeightStorage::Int8Initializer,
                embeddings: Embeddings::Int8,
                contrib_ops: true,
                // 8-bit weights whose adjacent pairs cannot saturate ORT's u8s8 kernels on CPUs without VNNI, where
                // 7-bit ones (`reduce_range`) cost most of the error left (docs/QUANTIZATION.md, "Bounded pairs").
                bounded_pairs: true,
                // Rounded against the calibration inputs (docs/QUANTIZATION.md, "GPTQ").
                weight_rounding: WeightRounding::Gptq,
                softmax_range: SoftmaxRange::Full,
                smooth: Some(DEFAULT_SMOOTH_ALPHA),
                smooth_targets: SmoothTargets::LayerNormContext,
                smooth_context: SmoothContext::Projection,
                // The GELU outputs' one or two huge channels per layer in float beside the integer MatMul
                // (docs/QUANTIZATION.md, "Outlier channels in float").
                outlier_channels: Some(DEFAULT_OUTLIER_RATIO),
                ..base
            },
        }
    }

    /// For QNN's HTP (docs/QUANTIZATION.md, "Qualcomm QNN in emulation"): the `tensorrt` layout, each fully
    /// connected layer's output quantized after its bias (the HTP takes a per-channel weight only inside a
    /// FullyConnected whose output is quantized; ONNX Runtime fuses MatMul + bias into the Gemm it becomes),
    /// and nothing smoothed by an explicit Mul in front of the GELU (the HTP has no Erf: its GELU is fused only
    /// when the pattern sits whole between a DequantizeLinear and a QuantizeLinear); the float rest runs in
    /// the HTP's fp16.
    fn qnn(base: Policy) -> Policy {
        Policy {
            // 16-bit activations beside 8-bit weights (A16W8, as ONNX Runtime's QNN recipe): each fully connected
            // output is requantized on the HTP, which 8 bits cannot do without losing the residual branches'
            // outlier channels (docs/QUANTIZATION.md).
            activations: Activations::Int16Symmetric,
            residual_add: ResidualAdd::Skip,
            shared_pair_feeds_all: false,
            quantize_fc_outputs: true,
            // Not shifted: the HTP adds the shift's correction (half the sum of V) back in fp16 after P·V, where the
            // two nearly cancel: the attention context lost most of its precision there (docs/QUANTIZATION.md).
            // Sixteen bits hold [0, 1] finely enough without it.
            softmax_range: SoftmaxRange::Full,
            smooth: Some(DEFAULT_SMOOTH_ALPHA),
            smooth_targets: SmoothTargets::LayerNormContext,
            smooth_context: SmoothContext::Projection,
            ..base
        }
    }

    /// For OpenVINO's CPU plugin (docs/QUANTIZATION.md, "OpenVINO"): the `cpu` placement and weights, written as plain
    /// Q/DQ pairs that OpenVINO's low-precision transformations turn into its int8 kernels.
    fn openvino(cpu: Policy) -> Policy {
        Policy {
            preset: Preset::OpenVino,
            // OpenVINO reads Q/DQ pairs; ONNX Runtime's contrib ops it would run as they are written.
            contrib_ops: false,
            // The `cpu` preset's uint8 with a zero point for the fully connected layers' inputs (a GELU output's
            // one-sided range gets all 256 levels): OpenVINO runs u8 x s8 GEMMs natively, an int8 input with zero
            // point 0 through a slower path with compensation (docs/QUANTIZATION.md). The scores Q·K^T integer, Q and
            // K int8 with zero point 0: OpenVINO's int8 attention takes signed operands without a zero point (else it
            // runs the whole attention in float). The probabilities and P·V in float (integer P·V moved answers away
            // from FP32's even with 256 levels).
            matmul_const_b_only: false,
            softmax_range: SoftmaxRange::Float,
            variable_a: VariableB::Int8Symmetric,
            variable_b: VariableB::Int8Symmetric,
            // Every smoothed input divided by a Mul in front of its MatMuls (LayerNorm outputs, attention contexts):
            // OpenVINO runs each such Mul with the pair's quantization fused into it, where a pair with no Mul before
            // it is a FakeQuantize of its own (and, at bf16, two conversions).
            smooth_layernorm: SmoothLayerNorm::Mul,
            smooth_context: SmoothContext::Mul,
            // The outlier channels recomputed from the FFN's input and saturated in the pair (no mask, no second
            // reader): the GELU output keeps one reader, and OpenVINO fuses the activation and the pair into the up
            // projection, where a mask Mul over the widest activation was a kernel of its own (docs/QUANTIZATION.md).
            outlier_branch: OutlierBranch::Recompute,
            outlier_mask: OutlierMask::Fold,
            // The embedding tables' rows dequantized after each Gather, as in `cpu` (`int8-table`, a constant OpenVINO
            // folds at load, saves the lookups' Multiply, about 0.2 % of the time, but qdq debug's float reference
            // of such a model crashed OpenVINO 2026.4's CPU plugin: docs/QUANTIZATION.md).
            ..cpu
        }
    }

    /// ORT's QDQQuantizer with the seeds' options, named `name`: the base every preset changes.
    fn ort_compatible(preset: Preset) -> Policy {
        Policy {
            preset,
            op_types: crate::types::MATMUL_OPS.iter().chain(&["Add"]).map(|o| o.to_string()).collect(),
            matmul_const_b_only: false,
            residual_add: ResidualAdd::Quantize,
            dedicated_pairs: true,
            shared_pair_feeds_all: true,
            quantize_outputs: false,
            quantize_fc_outputs: false,
            activations: Activations::Int8Symmetric,
            variable_min_depth: 0,
            variable_a: VariableB::Activations,
            variable_b: VariableB::Activations,
            precision: Precision::Int8,
            per_channel: true,
            weights: WeightStorage::QdqPair,
            weight_rounding: WeightRounding::Nearest,
            embeddings: Embeddings::Float,
            contrib_ops: false,
            reduce_range: false,
            bounded_pairs: false,
            softmax_range: SoftmaxRange::Calibrated,
            smooth: None,
            smooth_targets: SmoothTargets::LayerNorm,
            smooth_context: SmoothContext::Mul,
            smooth_layernorm: SmoothLayerNorm::Parameters,
            outlier_channels: None,
            outlier_mask: OutlierMask::Mul,
            outlier_branch: OutlierBranch::Gather,
            include_nodes: vec![],
            exclude_nodes: vec![],
            exclude_tensors: vec![],
            strict: false,
        }
    }

    /// Sets one option from strings (CLI / TOML). Lists are comma-separated; the glob lists
    /// (`include_nodes`, `exclude_nodes`, `exclude_tensors`) are appended to, the others replaced. An unknown key
    /// is an error listing the valid ones; a bad value, one saying what the key takes.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let Some(option) = OPTIONS.iter().find(|o| o.key == key) else {
            return Err(Error::UnknownOption { key: key.to_string(), valid: KEYS.join(", ") });
        };
        (option.set)(self, value).map_err(|expected| Error::BadOptionValue {
            key: key.to_string(),
            value: value.to_string(),
            expected,
        })
    }

    /// Every option's value, in [`KEYS`] order, as [`Policy::set`] takes it.
    pub fn values(&self) -> Vec<(&'static str, String)> {
        OPTIONS.iter().map(|o| (o.key, (o.get)(self))).collect()
    }

    /// One `key = value` line per option, in [`KEYS`] order (values as [`Policy::set`] takes them), after the
    /// preset's name.
    pub fn describe(&self) -> String {
        let mut out = format!("preset = {}\n", self.preset);
        for o in OPTIONS {
            out.push_str(&format!("{} = {}\n", o.key, (o.get)(self)));
        }
        out
    }

    /// Weight quantization: symmetric int8, or the float8 type of [`Policy::precision`] (per-channel or per-tensor
    /// per [`Policy::per_channel`]).
    pub fn weight_spec(&self) -> QuantSpec {
        let qtype = self.precision.weight_type();
        QuantSpec { qtype, symmetric: true, reduce_range: self.reduce_range && !qtype.is_float8() }
    }

    /// Activation quantization: [`Policy::activations`], or the float8 type of [`Policy::precision`].
    pub fn activation_spec(&self) -> QuantSpec {
        match self.precision.grid() {
            Grid::Float8(qtype) => QuantSpec { qtype, symmetric: true, reduce_range: false },
            Grid::Integer => self.activations.spec(),
        }
    }

    /// Options that cannot go with [`Policy::precision`]'s float8: ONNX Runtime's integer contrib ops. (Weights
    /// stored as 8-bit initializers are float8 ones then.) `Err` names the option and what to set.
    pub fn check_precision(&self) -> Result<()> {
        if self.activations == Activations::Int16Symmetric && self.precision.is_integer() && self.contrib_ops {
            return Err(Error::BadOptionValue {
                key: "contrib_ops".to_owned(),
                value: "true with activations = int16-symmetric".to_owned(),
                expected: "false (ONNX Runtime's integer contrib ops take int8 / uint8 only)".to_owned(),
            });
        }
        if self.precision.is_integer() {
            return Ok(());
        }
        let clash = if self.contrib_ops {
            Some(("contrib_ops", "false (ONNX Runtime's integer contrib ops take int8 / uint8 only)"))
        } else {
            None
        };
        match clash {
            Some((key, expected)) => Err(Error::BadOptionValue {
                key: key.to_owned(),
                value: format!(
                    "{} with precision = {}",
                    (OPTIONS.iter().find(|o| o.key == key).map_or(String::new(), |o| (o.get)(self))),
                    self.precision
                ),
                expected: expected.to_owned(),
            }),
            None => Ok(()),
        }
    }

    pub(crate) fn matchers(&self) -> Result<Matchers> {
        Ok(Matchers {
            include: build_globset("include_nodes", &self.include_nodes)?,
            exclude: build_globset("exclude_nodes", &self.exclude_nodes)?,
            tensors: build_globset("exclude_tensors", &self.exclude_tensors)?,
        })
    }
}

/// Compiled glob lists of a policy.
pub(crate) struct Matchers {
    pub include: Option<GlobSet>,
    pub exclude: Option<GlobSet>,
    pub tensors: Option<GlobSet>,
}

impl Matchers {
    /// True if node `name` passes the include / exclude lists.
    pub fn node_selected(&self, name: &str) -> bool {
        self.include.as_ref().is_none_or(|g| g.is_match(name))
            && !self.exclude.as_ref().is_some_and(|g| g.is_match(name))
    }

    /// True if tensor `name` is excluded.
    pub fn tensor_excluded(&self, name: &str) -> bool {
        self.tensors.as_ref().is_some_and(|g| g.is_match(name))
    }
}

/// Exact names and globs: a pattern without glob metacharacters matches only itself.
fn build_globset(key: &str, patterns: &[String]) -> Result<Option<GlobSet>> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        let glob = Glob::new(p).map_err(|e| Error::BadOptionValue {
            key: key.to_string(),
            value: p.clone(),
            expected: format!("a valid glob ({e})"),
        })?;
        b.add(glob);
    }
    b.build().map(Some).map_err(|e| Error::BadOptionValue {
        key: key.to_string(),
        value: patterns.join(","),
        expected: format!("valid globs ({e})"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_option_lists_valid_keys() {
        let mut p = Policy::preset("tensorrt").unwrap();
        let e = p.set("dedicated_pair", "true").unwrap_err().to_string();
        assert!(e.contains("dedicated_pair") && e.contains("dedicated_pairs") && e.contains("exclude_tensors"), "{e}");
        let e = Policy::preset("tensor-rt").unwrap_err().to_string();
        assert!(e.contains("tensor-rt") && e.contains("migraphx"), "{e}");
        let e = p.set("residual_add", "maybe").unwrap_err().to_string();
        assert!(e.contains("quantize or skip"), "{e}");
        assert!(p.set("exclude_nodes", "a[").is_err());
        assert!(p.set("op_types", "Conv").is_err());
    }

    #[test]
    fn set_then_describe_round_trips() {
        let mut p = Policy::preset("tensorrt").unwrap();
        p.set("residual_add", "skip").unwrap();
        p.set("activations", "uint8-asymmetric").unwrap();
        p.set("exclude_nodes", "/bert/pooler/*, /qa_outputs/MatMul").unwrap();
        p.set("strict", "yes").unwrap();
        let d = p.describe();
        let mut q = Policy::preset("tensorrt").unwrap();
        for line in d.lines().filter(|l| !l.starts_with("preset")) {
            let (k, v) = line.split_once(" = ").unwrap();
            if !v.is_empty() {
                q.set(k, v).unwrap();
            }
        }
        assert_eq!(q.describe(), d);
        assert!(d.contains("residual_add = skip\n"));
        let m = q.matchers().unwrap();
        assert!(!m.node_selected("/bert/pooler/dense/MatMul"));
        assert!(!m.node_selected("/qa_outputs/MatMul"));
        assert!(m.node_selected("/qa_outputs/MatMul_1"));
    }

    #[test]
    fn every_option_is_described_and_says_what_it_takes() {
        assert_eq!(KEYS.len(), OPTIONS.len());
        for o in OPTIONS {
            assert!(!o.doc.is_empty() && !o.values.is_empty(), "{}", o.key);
            // Whatever describe prints, set takes back, for every preset.
            for preset in PRESETS {
                let mut p = Policy::preset(preset).unwrap();
                let shown = (o.get)(&p);
                if !shown.is_empty() {
                    p.set(o.key, &shown).unwrap_or_else(|e| panic!("{preset} {}: {e}", o.key));
                }
            }
            // A bad value's error says what the key takes (the list options take any name; a bad glob fails).
            let bad = if o.values.contains("globs") { "a[" } else { "bogus-value" };
            let e = Policy::preset("tensorrt").unwrap().set(o.key, bad).unwrap_err().to_string();
            let expected = if o.values.contains("globs") { "a valid glob" } else { o.values };
            assert!(e.contains(o.key) && e.contains(expected), "{}: {e}", o.key);
        }
        // Keyword values: exactly the enum's names.
        assert_eq!(SoftmaxRange::NAMES, ["calibrated", "full", "shifted", "full-uint8", "float"]);
        assert_eq!("shifted".parse::<SoftmaxRange>(), Ok(SoftmaxRange::Shifted));
        assert_eq!(
            "clipped".parse::<SoftmaxRange>(),
            Err("calibrated, full, shifted, full-uint8 or float".to_string())
        );
    }

    #[test]
    fn op_types_takes_the_matmul_ops_and_add() {
        let listed = OP_TYPES.rsplit(' ').next().unwrap();
        let ops: Vec<&str> = crate::MATMUL_OPS.iter().copied().chain(["Add"]).collect();
        assert_eq!(listed, ops.join(","));
        assert_eq!(Policy::preset("ort-compatible").unwrap().op_types, ops);
    }

    /// A serialized policy holds every option and reads back equal, for every preset and a changed one; an unknown
    /// key or a bad value is refused.
    #[test]
    fn a_policy_serializes_and_reads_back() {
        let mut changed = Policy::of(Preset::Cpu);
        changed.smooth = None;
        changed.exclude_nodes.push("/qa_outputs/MatMul".into());
        for p in PRESETS.iter().map(|n| Policy::preset(n).unwrap()).chain([changed]) {
            let json = serde_json::to_value(&p).unwrap();
            for key in KEYS {
                assert!(json.get(key).is_some(), "{key} missing: {json}");
            }
            assert_eq!(serde_json::from_value::<Policy>(json).unwrap(), p);
        }
        let mut json = serde_json::to_value(Policy::of(Preset::TensorRt)).unwrap();
        assert_eq!(json["smooth"], 1.0);
        json["smooth"] = "off".into();
        assert_eq!(serde_json::from_value::<Policy>(json.clone()).unwrap().smooth, None);
        json["smooth"] = 2.0.into();
        assert!(serde_json::from_value::<Policy>(json.clone()).is_err());
        json["smooth"] = "off".into();
        json["softmax_range"] = "clipped".into();
        let e = serde_json::from_value::<Policy>(json.clone()).unwrap_err().to_string();
        assert!(e.contains("calibrated, full, shifted, full-uint8 or float"), "{e}");
        json["softmax_range"] = "full".into();
        json["residual_adds"] = "skip".into();
        assert!(serde_json::from_value::<Policy>(json).is_err());
    }

    #[test]
    fn presets_differ_where_documented() {
        let trt = Policy::preset("tensorrt").unwrap();
        let ort = Policy::preset("ort-compatible").unwrap();
        assert_eq!(ort.residual_add, ResidualAdd::Quantize);
        assert!(ort.shared_pair_feeds_all && ort.softmax_range == SoftmaxRange::Calibrated);
        assert_eq!(trt.residual_add, ResidualAdd::Skip);
        assert!(!trt.shared_pair_feeds_all && trt.softmax_range == SoftmaxRange::Shifted);
        // tensorrt = ort-compatible + exactly those five settings.
        let mut seed = ort.clone();
        let alpha = DEFAULT_SMOOTH_ALPHA.to_string();
        for (k, v) in [
            ("residual_add", "skip"),
            ("shared_pair_feeds_all", "false"),
            ("softmax_range", "shifted"),
            ("smooth", alpha.as_str()),
            ("smooth_targets", "all"),
        ] {
            seed.set(k, v).unwrap();
        }
        assert_eq!(trt.describe().replace("tensorrt", "x"), seed.describe().replace("ort-compatible", "x"));
        let mig = Policy::preset("migraphx").unwrap();
        assert_eq!(mig.describe().replace("migraphx", "x"), trt.describe().replace("tensorrt", "x"));
        assert!(Policy::preset("tensorrt").unwrap().set("softmax_range", "clipped").is_err());
        let cpu = Policy::preset("cpu").unwrap();
        assert_eq!(cpu.activations, Activations::Uint8Asymmetric);
        assert_eq!(cpu.weights, WeightStorage::Int8Initializer);
        // uint8 activations already use all 256 levels on [0, 1]: no shift; the same smoothing strength, the GELU
        // outputs left out.
        assert_eq!(
            (cpu.softmax_range, cpu.smooth, cpu.smooth_targets),
            (SoftmaxRange::Full, trt.smooth, SmoothTargets::LayerNormContext)
        );
        // openvino = cpu + exactly these settings.
        let ov = Policy::preset("openvino").unwrap();
        let mut seed = cpu.clone();
        for (k, v) in [
            ("contrib_ops", "false"),
            ("matmul_const_b_only", "false"),
            ("softmax_range", "float"),
            ("variable_a", "int8-symmetric"),
            ("variable_b", "int8-symmetric"),
            ("smooth_layernorm", "mul"),
            ("smooth_context", "mul"),
            ("outlier_branch", "recompute"),
            ("outlier_mask", "fold"),
        ] {
            seed.set(k, v).unwrap();
        }
        assert_eq!(ov.describe().replace("openvino", "x"), seed.describe().replace("cpu", "x"));
    }
}
