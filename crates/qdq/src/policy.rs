//! Placement policy: which nodes get Q/DQ on which inputs, and how they are quantized.

use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::error::{Error, Result};
use crate::scale::{QuantSpec, QuantType};

/// Names accepted by [`Policy::preset`].
pub const PRESETS: &[&str] = &["ort-compatible", "tensorrt", "migraphx", "cpu"];

/// Migration strength of the `tensorrt`, `migraphx` and `cpu` presets' smoothing (see [`crate::smooth`]); chosen on the
/// SQuAD dev set, see docs/QUANTIZATION.md.
pub const DEFAULT_SMOOTH_ALPHA: f32 = 1.0;

/// Keys accepted by [`Policy::set`].
pub const KEYS: &[&str] = &[
    "op_types",
    "matmul_const_b_only",
    "residual_add",
    "dedicated_pairs",
    "shared_pair_feeds_all",
    "quantize_outputs",
    "activations",
    "per_channel",
    "weights",
    "reduce_range",
    "softmax_range",
    "smooth",
    "smooth_targets",
    "include_nodes",
    "exclude_nodes",
    "exclude_tensors",
    "strict",
];

/// Treatment of `Add` nodes whose output feeds `ReduceMean` (LayerNorm decomposed, opset <= 16)
/// or `LayerNormalization` (opset >= 17): the residual Adds. Other Adds (bias Adds, ...) are
/// never quantized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResidualAdd {
    /// Put Q/DQ on both inputs of residual Adds (what ORT does with the seed-001 exclusions).
    Quantize,
    /// Leave residual Adds in float.
    Skip,
}

/// How Softmax outputs (attention probabilities) are quantized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SoftmaxRange {
    /// The calibrated range, like any activation (ORT's behaviour). A calibrator that clips attention probabilities
    /// (entropy, MSE, percentile) saturates the few large ones that carry the attention.
    Calibrated,
    /// The analytic range [0, 1]: with symmetric int8 only 128 levels (steps of 1/127) are used.
    Full,
    /// `p - 0.5` quantized over [-0.5, 0.5]: all 255 symmetric int8 levels (steps of 1/254) on [0, 1], so half
    /// the rounding error and far fewer small probabilities rounded to zero. The MatMul `P·V` stays int8; its output
    /// gets `0.5 · Σ_k V[k, :]` added back in float, computed from the same dequantized `V`, so the result is
    /// exactly `DQ(P)·DQ(V)`. Needs symmetric activations.
    Shifted,
}

/// Which activations SmoothQuant-style smoothing rescales (see [`crate::smooth`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmoothTargets {
    /// LayerNorm outputs only: γ / β absorb the division, no node is added on their path.
    LayerNorm,
    /// Also every other activation read by a constant-weight MatMul (GELU outputs, attention context), divided by
    /// an explicit `Mul` in front of the MatMuls.
    All,
}

/// How a constant weight is represented after quantization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightStorage {
    /// Keep the FP32 initializer followed by QuantizeLinear -> DequantizeLinear (TensorRT style,
    /// ORT's `AddQDQPairToWeight`).
    QdqPair,
    /// Store an int8 initializer read by a DequantizeLinear.
    Int8Initializer,
}

/// A complete, validated set of placement and maths options.
///
/// Biases: bias Adds are never quantized, so biases stay FP32 under every preset.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Preset this policy started from.
    pub preset: String,
    /// Op types whose inputs get Q/DQ (only `MatMul` and `Add` are understood).
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
    /// Activation quantization.
    pub activations: QuantSpec,
    /// One scale per output column of MatMul weights (axis 1 of `[in, out]`).
    pub per_channel: bool,
    /// Weight representation.
    pub weights: WeightStorage,
    /// 7-bit weights (int8 [-64, 64]), as ORT's `reduce_range`: avoids u8s8 saturation in
    /// ORT's CPU integer kernels on x86 without VNNI. Activations keep the full range.
    pub reduce_range: bool,
    /// Range of Softmax outputs (attention probabilities).
    pub softmax_range: SoftmaxRange,
    /// SmoothQuant-style migration strength α in [0, 1] for the MatMul inputs of [`Policy::smooth_targets`] (see
    /// [`crate::smooth`]); `None` = off. Needs per-channel calibration of those inputs first, which the pipeline
    /// does before the main calibration.
    pub smooth: Option<f32>,
    /// Which MatMul inputs smoothing rescales.
    pub smooth_targets: SmoothTargets,
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
    /// A named preset (see [`PRESETS`]).
    ///
    /// `ort-compatible` is ORT's QDQQuantizer with the seeds' options: MatMul+Add, per-channel symmetric int8
    /// weights as FP32 + Q/DQ pair, symmetric int8 activations, dedicated pairs, no output quantization and residual
    /// Adds quantized. `tensorrt` and `migraphx` (identical) leave residual Adds in float, smooth every
    /// constant-weight MatMul input and quantize Softmax outputs shifted (see docs/QUANTIZATION.md).
    /// `cpu` quantizes MatMuls only (smoothed as in `tensorrt`), with asymmetric uint8 activations, shared pairs, 7-bit
    /// (`reduce_range`) int8 weight initializers and quantized MatMul outputs: ORT 1.31's CPU EP (opt level All) turns
    /// DQ -> MatMul -> Q into `QLinearMatMul` (tiny BERT: 8 of 9 MatMuls). Without output
    /// quantization ORT first fuses MatMul + bias Add into `Gemm`, and only the Gemms whose
    /// output is re-quantized become `QGemm` (5 of 9 integer).
    pub fn preset(name: &str) -> Result<Policy> {
        let base = Policy {
            preset: name.to_string(),
            op_types: vec!["MatMul".into(), "Add".into()],
            matmul_const_b_only: false,
            residual_add: ResidualAdd::Quantize,
            dedicated_pairs: true,
            shared_pair_feeds_all: true,
            quantize_outputs: false,
            activations: QuantSpec { qtype: QuantType::Int8, symmetric: true, reduce_range: false },
            per_channel: true,
            weights: WeightStorage::QdqPair,
            reduce_range: false,
            softmax_range: SoftmaxRange::Calibrated,
            smooth: None,
            smooth_targets: SmoothTargets::LayerNorm,
            include_nodes: vec![],
            exclude_nodes: vec![],
            exclude_tensors: vec![],
            strict: false,
        };
        match name {
            "ort-compatible" => Ok(base),
            // The seed placement with four changes (docs/QUANTIZATION.md; whole dev set: from ~30 F1 below FP32 to
            // 0.33 below): residual Adds (the LayerNorm inputs, whose outlier channels per-tensor int8 cannot hold)
            // stay in float, and so do the non-MatMul readers of a quantized tensor; every constant-weight MatMul
            // input is smoothed into its weights (alpha DEFAULT_SMOOTH_ALPHA); Softmax outputs are quantized shifted
            // by -0.5 to use all int8 levels. Every MatMul still reads only quantized inputs.
            "tensorrt" | "migraphx" => Ok(Policy {
                residual_add: ResidualAdd::Skip,
                shared_pair_feeds_all: false,
                softmax_range: SoftmaxRange::Shifted,
                smooth: Some(DEFAULT_SMOOTH_ALPHA),
                smooth_targets: SmoothTargets::All,
                ..base
            }),
            "cpu" => Ok(Policy {
                op_types: vec!["MatMul".into()],
                residual_add: ResidualAdd::Skip,
                dedicated_pairs: false,
                quantize_outputs: true,
                activations: QuantSpec { qtype: QuantType::UInt8, symmetric: false, reduce_range: false },
                weights: WeightStorage::Int8Initializer,
                reduce_range: true,
                softmax_range: SoftmaxRange::Full,
                smooth: Some(DEFAULT_SMOOTH_ALPHA),
                smooth_targets: SmoothTargets::All,
                ..base
            }),
            _ => Err(Error::UnknownPreset { name: name.to_string(), valid: PRESETS.join(", ") }),
        }
    }

    /// Sets one option from strings (CLI / TOML). Lists are comma-separated; the glob lists
    /// (`include_nodes`, `exclude_nodes`, `exclude_tensors`) are appended to, the others replaced.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let bad = |expected: &str| Error::BadOptionValue {
            key: key.to_string(),
            value: value.to_string(),
            expected: expected.to_string(),
        };
        let boolean = || match value {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err(bad("true or false")),
        };
        let list = || value.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect::<Vec<_>>();
        match key {
            "op_types" => {
                let ops = list();
                if ops.is_empty() || ops.iter().any(|o| o != "MatMul" && o != "Add") {
                    return Err(bad("a comma-separated subset of MatMul,Add"));
                }
                self.op_types = ops;
            }
            "matmul_const_b_only" => self.matmul_const_b_only = boolean()?,
            "residual_add" => {
                self.residual_add = match value {
                    "quantize" => ResidualAdd::Quantize,
                    "skip" => ResidualAdd::Skip,
                    _ => return Err(bad("quantize or skip")),
                }
            }
            "dedicated_pairs" => self.dedicated_pairs = boolean()?,
            "shared_pair_feeds_all" => self.shared_pair_feeds_all = boolean()?,
            "quantize_outputs" => self.quantize_outputs = boolean()?,
            "activations" => {
                self.activations = match value {
                    "int8-symmetric" => QuantSpec { qtype: QuantType::Int8, symmetric: true, reduce_range: false },
                    "uint8-asymmetric" => QuantSpec { qtype: QuantType::UInt8, symmetric: false, reduce_range: false },
                    _ => return Err(bad("int8-symmetric or uint8-asymmetric")),
                }
            }
            "per_channel" => self.per_channel = boolean()?,
            "weights" => {
                self.weights = match value {
                    "qdq-pair" => WeightStorage::QdqPair,
                    "int8-initializer" => WeightStorage::Int8Initializer,
                    _ => return Err(bad("qdq-pair or int8-initializer")),
                }
            }
            "reduce_range" => self.reduce_range = boolean()?,
            "softmax_range" => {
                self.softmax_range = match value {
                    "calibrated" => SoftmaxRange::Calibrated,
                    "full" => SoftmaxRange::Full,
                    "shifted" => SoftmaxRange::Shifted,
                    _ => return Err(bad("calibrated, full or shifted")),
                }
            }
            "smooth" => {
                self.smooth = match value {
                    "off" | "none" | "false" => None,
                    v => match v.parse::<f32>() {
                        Ok(a) if (0.0..=1.0).contains(&a) => Some(a),
                        _ => return Err(bad("off or a migration strength in [0, 1], e.g. 0.5")),
                    },
                }
            }
            "smooth_targets" => {
                self.smooth_targets = match value {
                    "layernorm" => SmoothTargets::LayerNorm,
                    "all" => SmoothTargets::All,
                    _ => return Err(bad("layernorm or all")),
                }
            }
            "include_nodes" | "exclude_nodes" | "exclude_tensors" => {
                let globs = list();
                build_globset(key, &globs)?;
                let target = match key {
                    "include_nodes" => &mut self.include_nodes,
                    "exclude_nodes" => &mut self.exclude_nodes,
                    _ => &mut self.exclude_tensors,
                };
                target.extend(globs);
            }
            "strict" => self.strict = boolean()?,
            _ => return Err(Error::UnknownOption { key: key.to_string(), valid: KEYS.join(", ") }),
        }
        Ok(())
    }

    /// One `key = value` line per option, in [`KEYS`] order (values as [`Policy::set`] takes them).
    pub fn describe(&self) -> String {
        let b = |v: bool| if v { "true" } else { "false" };
        let acts = match (self.activations.qtype, self.activations.symmetric) {
            (QuantType::Int8, true) => "int8-symmetric",
            (QuantType::UInt8, false) => "uint8-asymmetric",
            (QuantType::Int8, false) => "int8-asymmetric",
            (QuantType::UInt8, true) => "uint8-symmetric",
        };
        let lines = [
            ("preset", self.preset.clone()),
            ("op_types", self.op_types.join(",")),
            ("matmul_const_b_only", b(self.matmul_const_b_only).into()),
            ("residual_add", if self.residual_add == ResidualAdd::Quantize { "quantize" } else { "skip" }.into()),
            ("dedicated_pairs", b(self.dedicated_pairs).into()),
            ("shared_pair_feeds_all", b(self.shared_pair_feeds_all).into()),
            ("quantize_outputs", b(self.quantize_outputs).into()),
            ("activations", acts.into()),
            ("per_channel", b(self.per_channel).into()),
            ("weights", if self.weights == WeightStorage::QdqPair { "qdq-pair" } else { "int8-initializer" }.into()),
            ("reduce_range", b(self.reduce_range).into()),
            (
                "softmax_range",
                match self.softmax_range {
                    SoftmaxRange::Calibrated => "calibrated",
                    SoftmaxRange::Full => "full",
                    SoftmaxRange::Shifted => "shifted",
                }
                .into(),
            ),
            ("smooth", self.smooth.map_or_else(|| "off".to_string(), |a| a.to_string())),
            ("smooth_targets", if self.smooth_targets == SmoothTargets::All { "all" } else { "layernorm" }.into()),
            ("include_nodes", self.include_nodes.join(",")),
            ("exclude_nodes", self.exclude_nodes.join(",")),
            ("exclude_tensors", self.exclude_tensors.join(",")),
            ("strict", b(self.strict).into()),
        ];
        lines.iter().map(|(k, v)| format!("{k} = {v}\n")).collect()
    }

    /// Weight quantization: symmetric int8 (per-channel or per-tensor per [`Policy::per_channel`]).
    pub fn weight_spec(&self) -> QuantSpec {
        QuantSpec { qtype: QuantType::Int8, symmetric: true, reduce_range: self.reduce_range }
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
        assert_eq!(cpu.activations.qtype, QuantType::UInt8);
        assert_eq!(cpu.weights, WeightStorage::Int8Initializer);
        // uint8 activations already use all 256 levels on [0, 1]: no shift, but the same smoothing.
        assert_eq!(
            (cpu.softmax_range, cpu.smooth, cpu.smooth_targets),
            (SoftmaxRange::Full, trt.smooth, SmoothTargets::All)
        );
    }
}
