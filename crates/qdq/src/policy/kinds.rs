//! The policy's keyword options (presets, precisions, layouts): each an enum whose names, `Display` and `FromStr`
//! come from one list.

use super::*;

/// "a, b or c": how errors and help texts list a closed set of values.
pub(super) fn or_list(names: &[&str]) -> String {
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
    /// Whether the pipeline corrects the mean shift quantization leaves on a classifier's outputs
    /// ([`crate::shift_output_bias`]): measured on the calibration inputs, subtracted from the output layer's bias.
    #[derive(Default)]
    OutputBias {
        /// The bias as it is (recipes written before the option existed read as this).
        #[default]
        Kept = "kept",
        /// The output layer's bias moved by the mean shift, where the task's outputs are per-input decisions (a
        /// classifier's class logits or a regression head's score); other tasks' outputs are left as they are.
        Corrected = "corrected",
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
