//! The placement policy a run quantizes with: a preset (by default the one made for the EP), then option overrides,
//! node exclusions and strictness; and how activations are quantized (static or dynamic).

use std::fmt;
use std::str::FromStr;

use qdq::{Policy, Preset};
use runtime::{CpuKind, Ep};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The placement policy: a preset plus overrides.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", command(next_help_heading = "Placement"))]
pub struct PolicySettings {
    /// Preset: cpu, openvino, tensorrt, migraphx, qnn, ort-compatible
    ///
    /// `qdq quantize --list-policies` explains them. Default: the one made for the EP the model is for (cpu -> cpu,
    /// openvino -> openvino, tensorrt, cuda, rocm -> tensorrt, migraphx -> migraphx, qnn -> qnn).
    #[cfg_attr(
        feature = "cli",
        arg(
            long = "policy",
            value_name = "PRESET",
            value_parser = crate::settings::parsers::choice::<Preset>(qdq::PRESETS),
            hide_possible_values = true
        )
    )]
    pub preset: Option<Preset>,
    /// Activations: static (calibrated) or dynamic
    ///
    /// static: calibrated ranges in Q/DQ pairs. dynamic: constant-weight MatMuls get int8 weights and their inputs are quantized at run time
    /// (DynamicQuantizeLinear + MatMulInteger, which ONNX Runtime's CPU EP fuses into DynamicQuantizeMatMul),
    /// embeddings as the policy's `embeddings` option says; for CPU only.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value = "static",
            value_name = "MODE",
            value_parser = crate::settings::parsers::choice::<Mode>(&Mode::NAMES),
            hide_possible_values = true
        )
    )]
    pub mode: Mode,
    /// The `ort-compatible` preset: ONNX Runtime's own QDQ layout
    ///
    /// As the seeds' --ort_quant does.
    #[cfg_attr(feature = "cli", arg(long, hide_short_help = true))]
    pub ort_quant: bool,
    /// Pair precision: int8 or fp8; `qdq e2e` takes int8,fp8
    ///
    /// fp8: E4M3 pairs from the same calibration (FLOAT8E4M3FN for tensorrt and ort-compatible, FLOAT8E4M3FNUZ for
    /// migraphx; the cpu preset is integer-only), zero point 0, scale = range / the format's largest value, ranges
    /// from fp8-mse unless --calibrate-method names one; the model raised to opset 19. ONNX Runtime's CPU EP runs
    /// FP8 models (by dequantizing), so their accuracy is measured on any machine; their speed needs the GPU. With
    /// int8,fp8, `qdq e2e` quantizes and evaluates both, side by side (the first is model_qdq.onnx).
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            value_delimiter = ',',
            value_name = "PRECISION",
            value_parser = crate::settings::parsers::choice::<PrecisionChoice>(&PrecisionChoice::NAMES),
            hide_possible_values = true
        )
    )]
    pub precision: Vec<PrecisionChoice>,
    /// Change one policy option: KEY=VALUE (repeatable)
    ///
    /// E.g. `smooth=off` (no SmoothQuant-style smoothing before calibration), `smooth=0.5` (its strength),
    /// `softmax_range=full`, `exclude_tensors=GLOB`. An unknown key or a value it does not take is refused with the
    /// valid ones; `qdq quantize --list-policies` shows every key and each preset's values.
    #[cfg_attr(feature = "cli", arg(long = "policy-option", value_name = "KEY=VALUE"))]
    pub options: Vec<PolicyOverride>,
    /// Do not quantize these nodes (name or glob; repeatable)
    #[cfg_attr(feature = "cli", arg(long = "exclude-node", value_name = "NODE"))]
    pub exclude_nodes: Vec<String>,
    /// A tensor to quantize without a range is an error
    ///
    /// Default: it is left in float and listed.
    #[cfg_attr(feature = "cli", arg(long, hide_short_help = true))]
    pub strict: bool,
}

/// The EP a quantized model is for, where the command does not run it (`qdq calibrate`, `qdq quantize`): it picks
/// the default preset ([`PolicySettings::choice`]).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", command(next_help_heading = "Placement"))]
pub struct Target {
    /// The EP the quantized model is for
    ///
    /// It picks the default --policy: cpu -> cpu, openvino -> openvino, tensorrt, cuda and rocm -> tensorrt, migraphx
    /// -> migraphx, qnn -> qnn. Use the same for `qdq calibrate` and `qdq quantize`. Calibration itself runs on
    /// --cal-ep.
    #[cfg_attr(feature = "cli", arg(long, default_value = "cpu", value_name = "EP"))]
    pub ep: Ep,
    /// OpenVINO: the CPU the model is for: amx, avx512-bf16, vnni, avx2 [default: this one]
    ///
    /// The `openvino` preset lays the model out for it (docs/QUANTIZATION.md), and the model records it.
    #[cfg_attr(feature = "cli", arg(long, value_name = "KIND", hide_short_help = true))]
    pub ov_cpu: Option<CpuKind>,
}

impl Target {
    /// The EP with the CPU `--ov-cpu` names, for OpenVINO.
    pub fn ep(&self) -> Ep {
        let mut ep = self.ep.clone();
        if let (Ep::OpenVino(o), Some(cpu)) = (&mut ep, self.ov_cpu) {
            o.cpu = cpu;
        }
        ep
    }
}

/// One `--policy-option KEY=VALUE`, checked as it is read: the key is an option of [`qdq::OPTIONS`] and the value
/// one it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyOverride {
    pub key: &'static str,
    pub value: String,
}

impl FromStr for PolicyOverride {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let (k, v) = s.split_once('=').ok_or_else(|| Error::Usage(format!("`{s}` must be KEY=VALUE")))?;
        let (k, v) = (k.trim(), v.trim());
        // Every value is checked against a policy: what `set` refuses on one it refuses on all.
        Policy::of(Preset::TensorRt).set(k, v)?;
        let key = qdq::KEYS.iter().copied().find(|key| *key == k).ok_or_else(|| Error::Internal(k.to_owned()))?;
        Ok(PolicyOverride { key, value: v.to_owned() })
    }
}

impl fmt::Display for PolicyOverride {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.key, self.value)
    }
}

/// `--precision`: integer or float8 pairs; which float8 follows the preset ([`PrecisionChoice::for_preset`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrecisionChoice {
    #[default]
    Int8,
    Fp8,
}

impl PrecisionChoice {
    pub const NAMES: [&'static str; 2] = ["int8", "fp8"];

    /// The policy's precision under `preset`: fp8 is E4M3FN for TensorRT (and ONNX Runtime's own layout, whose
    /// quantizer writes that type), E4M3FNUZ for MIGraphX; the cpu preset is refused (its integer kernels and int8
    /// weight initializers have no float8 form).
    pub fn for_preset(self, preset: Preset) -> Result<qdq::Precision> {
        Ok(match (self, preset) {
            (PrecisionChoice::Int8, _) => qdq::Precision::Int8,
            (PrecisionChoice::Fp8, Preset::TensorRt | Preset::OrtCompatible) => qdq::Precision::Fp8E4M3Fn,
            (PrecisionChoice::Fp8, Preset::MiGraphX) => qdq::Precision::Fp8E4M3Fnuz,
            (PrecisionChoice::Fp8, Preset::OpenVino) => {
                return Err(Error::Usage(
                    "--precision fp8 is for --policy tensorrt (E4M3FN) or migraphx (E4M3FNUZ): the openvino preset's \
                     pairs are integer, the int8 OpenVINO's CPU device computes in"
                        .into(),
                ));
            }
            (PrecisionChoice::Fp8, Preset::Cpu) => {
                return Err(Error::Usage(
                    "--precision fp8 is for --policy tensorrt (E4M3FN) or migraphx (E4M3FNUZ): the cpu preset writes \
                     ONNX Runtime's integer kernels, which have no float8 form (ONNX Runtime's CPU EP runs an FP8 \
                     model of those presets, dequantizing it)"
                        .into(),
                ));
            }
            (PrecisionChoice::Fp8, Preset::Qnn) => {
                return Err(Error::Usage(
                    "--precision fp8 is for --policy tensorrt (E4M3FN) or migraphx (E4M3FNUZ): QNN's HTP takes \
                     integer Q/DQ pairs only"
                        .into(),
                ));
            }
        })
    }

    /// How tables and file names call it: `INT8` / `FP8`, `int8` / `fp8`.
    pub fn label(self) -> &'static str {
        match self {
            PrecisionChoice::Int8 => "INT8",
            PrecisionChoice::Fp8 => "FP8",
        }
    }
}

impl FromStr for PrecisionChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "int8" => Ok(PrecisionChoice::Int8),
            "fp8" => Ok(PrecisionChoice::Fp8),
            _ => Err(Error::Usage(format!("unknown --precision `{s}`; valid: {}", PrecisionChoice::NAMES.join(", ")))),
        }
    }
}

impl fmt::Display for PrecisionChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PrecisionChoice::Int8 => "int8",
            PrecisionChoice::Fp8 => "fp8",
        })
    }
}

/// How activations are quantized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Calibrated ranges, fixed in Q/DQ pairs.
    #[default]
    Static,
    /// No calibration: weights int8, each MatMul input quantized at run time ([`qdq::quantize_dynamic`]).
    Dynamic,
}

impl Mode {
    pub const NAMES: [&'static str; 2] = ["static", "dynamic"];
}

impl FromStr for Mode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "static" => Ok(Mode::Static),
            "dynamic" => Ok(Mode::Dynamic),
            _ => Err(Error::Usage(format!("unknown --mode `{s}`; valid: {}", Mode::NAMES.join(", ")))),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Static => "static",
            Mode::Dynamic => "dynamic",
        })
    }
}

/// The preset made for an execution provider: what `--policy` defaults to (docs/QUANTIZATION.md says why each). Every
/// EP is named, so a new one cannot silently take another's.
pub fn preset_for_ep(ep: &Ep) -> Preset {
    match ep {
        Ep::Cpu => Preset::Cpu,
        Ep::OpenVino(_) => Preset::OpenVino,
        Ep::TensorRt(_) | Ep::Cuda { .. } | Ep::Rocm { .. } => Preset::TensorRt,
        Ep::MiGraphX(_) => Preset::MiGraphX,
        Ep::Qnn(_) => Preset::Qnn,
    }
}

/// Which preset a run uses, and why (printed, and recorded in results.json).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyChoice {
    pub preset: Preset,
    /// `--policy`, `--ort-quant`, or `--ep <name>` when the preset followed the EP.
    pub chosen_by: String,
    /// The kind of CPU the preset laid the model out for, where its layout depends on it (`openvino`: the EP's
    /// `--ov-cpu`, this machine's unless named).
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "cpu_name")]
    pub target_cpu: Option<CpuKind>,
}

impl fmt::Display for PolicyChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = self.target_cpu.map_or(String::new(), |c| format!(" for {c} CPUs"));
        if self.chosen_by.starts_with("--ep") {
            write!(f, "policy {}{target} (the preset for {}; --policy chooses another)", self.preset, self.chosen_by)
        } else {
            write!(f, "policy {}{target} (from {})", self.preset, self.chosen_by)
        }
    }
}

/// A CPU kind by its name.
fn cpu_name<S: serde::Serializer>(cpu: &Option<CpuKind>, s: S) -> std::result::Result<S::Ok, S::Error> {
    match cpu {
        Some(c) => s.serialize_str(c.name()),
        None => s.serialize_none(),
    }
}

/// The depth AMX's int8 tiles contract (64 bytes): a MatMul of two variables contracting fewer elements (attention
/// heads of 32) ran its int8 attention slower than bf16 there (docs/QUANTIZATION.md, "OpenVINO").
pub const AMX_INT8_DEPTH: u32 = 64;

/// The `openvino` preset's choices for the kind of CPU the model is for (docs/QUANTIZATION.md, "OpenVINO"): on AMX the
/// attention scores stay float where they contract fewer elements than its int8 tiles do; the other kinds take the
/// preset as it is (their int8 attention ran faster than bf16 and f32).
pub fn for_cpu(policy: &mut Policy, cpu: CpuKind) {
    match cpu {
        CpuKind::Amx => policy.variable_min_depth = AMX_INT8_DEPTH,
        CpuKind::Avx512Bf16 | CpuKind::Vnni | CpuKind::Avx2 => {}
    }
}

impl PolicySettings {
    /// The preset in use for a model meant for `ep`: `ort-compatible` with `ort_quant`, else `--policy`, else
    /// [`preset_for_ep`].
    pub fn choice(&self, ep: &Ep) -> PolicyChoice {
        let (preset, chosen_by) = match (self.preset, self.ort_quant) {
            (_, true) => (Preset::OrtCompatible, "--ort-quant".to_owned()),
            (Some(p), false) => (p, "--policy".to_owned()),
            (None, false) => (preset_for_ep(ep), format!("--ep {}", ep.short_name())),
        };
        // The CPU the model is for: OpenVINO's CPU device's, this machine's on an EP that names none.
        let target_cpu = (preset == Preset::OpenVino).then(|| ep.cpu_kind().unwrap_or_else(CpuKind::host));
        PolicyChoice { preset, chosen_by, target_cpu }
    }

    /// The policy for a model meant for `ep` (overrides applied in order, then the exclusions and `strict`), and
    /// which preset it started from.
    ///
    /// The policy is that of the one `--precision` (int8 without it); more than one is an error here (`qdq e2e` takes
    /// them through [`PolicySettings::policies`]).
    pub fn policy(&self, ep: &Ep) -> Result<(Policy, PolicyChoice)> {
        let distinct = self.precisions();
        if distinct.len() > 1 {
            return Err(Error::Usage(format!(
                "--precision {} names {} precisions, and this command makes one model: give one (`qdq e2e` quantizes \
                 several side by side)",
                self.precision.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
                distinct.len()
            )));
        }
        let (mut policies, choice) = self.policies(ep)?;
        Ok((policies.remove(0).1, choice))
    }

    /// `--precision`'s values in order, each once; int8 without any.
    fn precisions(&self) -> Vec<PrecisionChoice> {
        let mut out: Vec<PrecisionChoice> = vec![];
        for p in self.precision.iter().copied().chain(self.precision.is_empty().then_some(PrecisionChoice::Int8)) {
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }

    /// The policy of each `--precision` (in order, each once; int8 without it): the preset with its precision, then
    /// the overrides (a `precision` override wins), the exclusions and `strict`.
    pub fn policies(&self, ep: &Ep) -> Result<(Vec<(PrecisionChoice, Policy)>, PolicyChoice)> {
        let choice = self.choice(ep);
        let mut out = vec![];
        for p in self.precisions() {
            let mut policy = Policy::of(choice.preset);
            if let Some(cpu) = choice.target_cpu {
                for_cpu(&mut policy, cpu);
            }
            policy.precision = p.for_preset(choice.preset)?;
            if p == PrecisionChoice::Fp8 {
                // The weights as float8 initializers: the values a float weight behind its pair stands for, in a
                // quarter of the file, and not quantized again on every run (ONNX Runtime's CPU EP does not fold a
                // float8 QuantizeLinear of a constant).
                policy.weights = qdq::WeightStorage::Int8Initializer;
            }
            for o in &self.options {
                policy.set(o.key, &o.value)?;
            }
            for n in &self.exclude_nodes {
                policy.set("exclude_nodes", n)?;
            }
            policy.strict |= self.strict;
            policy.check_precision()?;
            if self.mode == Mode::Dynamic && !policy.precision.is_integer() {
                return Err(Error::Usage(
                    "--mode dynamic quantizes inputs at run time with integer ops only: give --precision int8".into(),
                ));
            }
            out.push((p, policy));
        }
        Ok((out, choice))
    }
}

/// Every preset with its settings, then what each option does and takes: what `qdq quantize --list-policies`
/// prints.
pub fn describe_policies() -> String {
    let mut out = String::new();
    for preset in Preset::ALL {
        out.push_str(&format!("{preset}:\n{}\n", Policy::of(*preset).describe()));
    }
    out.push_str("Options (--policy-option KEY=VALUE, repeatable; later ones win):\n");
    for o in qdq::OPTIONS {
        out.push_str(&format!("  {:<22} {}\n  {:<22} values: {}\n", o.key, o.doc, "", o.values));
    }
    out.trim_end().to_owned()
}
