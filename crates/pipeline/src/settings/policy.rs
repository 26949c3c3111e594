//! The placement policy a run quantizes with: a preset (by default the one made for the EP), then option overrides,
//! node exclusions and strictness; and how activations are quantized (static or dynamic).

use std::fmt;
use std::str::FromStr;

use qdq::{Policy, Preset};
use runtime::Ep;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The placement policy: a preset plus overrides.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", command(next_help_heading = "Placement"))]
pub struct PolicySettings {
    /// Placement preset: cpu, tensorrt, migraphx, ort-compatible
    ///
    /// `qdq quantize --list-policies` explains them. Default: the one made for the EP the model is for (cpu -> cpu,
    /// tensorrt -> tensorrt, migraphx -> migraphx; any other EP -> tensorrt, the most accurate layout).
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
    /// It picks the default --policy: cpu -> cpu, tensorrt -> tensorrt, migraphx -> migraphx, any other -> tensorrt. Use the same for `qdq
    /// calibrate` and `qdq quantize`. Calibration itself runs on --cal-ep.
    #[cfg_attr(feature = "cli", arg(long, default_value = "cpu", value_name = "EP"))]
    pub ep: Ep,
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

/// The preset made for an execution provider: what `--policy` defaults to.
pub fn preset_for_ep(ep: &Ep) -> Preset {
    match ep {
        Ep::Cpu => Preset::Cpu,
        Ep::MiGraphX(_) => Preset::MiGraphX,
        _ => Preset::TensorRt,
    }
}

/// Which preset a run uses, and why (printed, and recorded in results.json).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyChoice {
    pub preset: Preset,
    /// `--policy`, `--ort-quant`, or `--ep <name>` when the preset followed the EP.
    pub chosen_by: String,
}

impl fmt::Display for PolicyChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.chosen_by.starts_with("--ep") {
            write!(f, "policy {} (the preset for {}; --policy chooses another)", self.preset, self.chosen_by)
        } else {
            write!(f, "policy {} (from {})", self.preset, self.chosen_by)
        }
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
        PolicyChoice { preset, chosen_by }
    }

    /// The policy for a model meant for `ep` (overrides applied in order, then the exclusions and `strict`), and
    /// which preset it started from.
    pub fn policy(&self, ep: &Ep) -> Result<(Policy, PolicyChoice)> {
        let choice = self.choice(ep);
        let mut policy = Policy::of(choice.preset);
        for o in &self.options {
            policy.set(o.key, &o.value)?;
        }
        for n in &self.exclude_nodes {
            policy.set("exclude_nodes", n)?;
        }
        policy.strict |= self.strict;
        Ok((policy, choice))
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
