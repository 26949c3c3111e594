//! The float its users run. Where an EP runs a float model in another precision than the session's when nothing is
//! set ([`runtime::Ep::default_float`]: OpenVINO's bf16 on a CPU with bf16 matrix instructions, its GPU's f16,
//! TensorRT's and MIGraphX's FP16 engines), FP32 and the quantized model are measured again with their float parts
//! at that precision, in the task's own measures and against FP32 at the run's precision (the exact reference): the
//! baseline a user decides against ("bf16 keeps 98.6 % of the answers at 1.0x; INT8 93.1 % at 1.1x").

use runtime::SessionConfig;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::progress::Progress;
use crate::steps::speed::Speedup;

/// FP32 and the quantized model at the EP's own default float precision, each in the task's measures against FP32 at
/// the run's precision (results.json `default_float`; `R` is the task's row, `S` its speed measure).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(bound(deserialize = "R: Deserialize<'de>, S: Deserialize<'de>"))]
pub struct DefaultFloat<R, S = Speedup> {
    /// The precision's name as the EP takes it (`bf16`, `f16`, `fp16`).
    pub precision: String,
    /// What gives the CPU that precision, where it is the CPU's (`AMX`, `AVX512-BF16`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// FP32 at this precision, against FP32 at the run's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp32: Option<R>,
    /// The quantized model at this precision, against FP32 at the run's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub int8: Option<R>,
    /// FP32 at the run's precision against FP32 at this one, timed in alternation (above 1: the run's precision is
    /// the faster one on this machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp32_speedup: Option<S>,
    /// Why a part was not measured (the EP refused the precision), when one was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl<R, S> DefaultFloat<R, S> {
    /// `bf16 (AVX512-BF16)`: the precision and what gives it.
    pub fn name(&self) -> String {
        match &self.instructions {
            Some(i) => format!("{} ({i})", self.precision),
            None => self.precision.clone(),
        }
    }
}

/// FP32's and the quantized model's sessions at their EP's default float precision, its name, and the CPU
/// instructions behind it.
pub(crate) type DefaultSessions = (SessionConfig, SessionConfig, &'static str, Option<String>);

/// The sessions of FP32 (`fp32`) and of the quantized model (`int8`) at their EP's default float precision, with its
/// name and the CPU instructions behind it; `None` when that is the sessions' own, or the EP is not timed (an emulated
/// NPU: its float precision is the device's, not a choice).
pub(crate) fn sessions(fp32: &SessionConfig, int8: &SessionConfig) -> Option<DefaultSessions> {
    crate::steps::speed::timed_default_sessions(fp32, int8)
}

/// Which model a default-float measurement runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Which {
    Fp32,
    Int8,
}

/// FP32 and the quantized model of sessions `fp32` / `int8` again at their EP's default float precision, when it is
/// another: `eval(which, session)` measures a model in the task's measures, `time(reference, fp32_at_run)` times FP32
/// at the run's precision against FP32 at the default one (`None`: not timed). A part that fails (the EP refusing the
/// precision) is recorded with its reason, not raised: the run's own results stand without it. Nothing unless
/// `opts.at_default_float`.
pub(crate) fn measure<R, S>(
    opts: &crate::steps::run::EvalOptions,
    (fp32, int8): (&SessionConfig, &SessionConfig),
    mut eval: impl FnMut(Which, &SessionConfig) -> Result<R>,
    time: impl FnOnce(&SessionConfig, &SessionConfig) -> Result<Option<S>>,
    progress: &dyn Progress,
) -> Option<DefaultFloat<R, S>> {
    let (f, q, precision, instructions) = sessions(fp32, int8).filter(|_| opts.at_default_float)?;
    let by = instructions.as_ref().map_or(String::new(), |i| format!(" ({i})"));
    progress.note(&format!(
        "FP32 and the quantized model again at {precision}{by}, the EP's own default float precision here: the float \
         its users run"
    ));
    let mut errors = vec![];
    let mut keep = |r: Result<R>| r.map_err(|e| errors.push(e.to_string())).ok();
    let fp32_row = keep(eval(Which::Fp32, &f));
    let int8_row = keep(eval(Which::Int8, &q));
    let fp32_speedup = match fp32_row.is_some().then(|| time(&f, fp32)) {
        Some(Ok(s)) => s,
        Some(Err(e)) => {
            errors.push(e.to_string());
            None
        }
        None => None,
    };
    for e in &errors {
        progress.warn(&format!("at {precision}: {e}"));
    }
    Some(DefaultFloat {
        precision: precision.to_owned(),
        instructions,
        fp32: fp32_row,
        int8: int8_row,
        fp32_speedup,
        error: (!errors.is_empty()).then(|| errors.join("; ")),
    })
}
