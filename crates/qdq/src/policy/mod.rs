//! Placement policy: which nodes get Q/DQ on which inputs, and how they are quantized.

use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::error::{Error, Result};
use crate::scale::{QuantSpec, QuantType};

/// Names accepted by [`Policy::preset`]: [`Preset::NAMES`].
pub const PRESETS: &[&str] = Preset::NAMES;

/// Migration strength of the `tensorrt`, `migraphx` and `cpu` presets' smoothing (see [`crate::smooth`]); chosen on the
/// SQuAD dev set, see docs/QUANTIZATION.md.
pub const DEFAULT_SMOOTH_ALPHA: f32 = 1.0;

mod kinds;
mod matchers;
mod options;

pub use kinds::*;
pub(crate) use matchers::Matchers;
use matchers::build_globset;
pub use options::{DEFAULT_OUTLIER_RATIO, KEYS, OPTIONS, PolicyOption};
use options::{outlier_ratio, smooth_strength};

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
    /// Whether a classifier's output bias is corrected by the mean shift measured on the calibration inputs (recipes
    /// written before it existed read as `kept`).
    #[serde(default)]
    pub output_bias: OutputBias,
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
            // Every preset: the shift is the task's outputs', not a target's (docs/QUANTIZATION.md, "A classifier's
            // output shift").
            output_bias: OutputBias::Corrected,
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

#[cfg(test)]
mod tests {
    use super::options::OP_TYPES;
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
