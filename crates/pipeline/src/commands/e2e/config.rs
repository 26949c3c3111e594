//! Everything an e2e run needs, settled: the files, the data configuration, the calibration and evaluation
//! settings, the policy; and all of it as results.json records it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Value, json};

use crate::error::Result;
use crate::inputs::config::DataConfig;
use crate::provenance::Invocation;
use crate::settings::calib::MethodSettings;
use crate::settings::policy::{Mode, PolicyChoice};
use crate::steps::collect::CalibrateOptions;
use crate::steps::run::EvalOptions;
use crate::tasks::Task;

/// Wall seconds per phase of the run (results.json's `provenance.phase_seconds`).
pub(crate) type Phases = BTreeMap<String, f64>;

/// Everything an e2e run needs. The CLI fills it from flags and the config file.
#[derive(Debug, Clone)]
pub struct E2eConfig {
    pub model: PathBuf,
    pub dataset: PathBuf,
    pub calibration_data: PathBuf,
    pub out: PathBuf,
    pub data: DataConfig,
    /// Questions to evaluate (0 = all).
    pub samples: usize,
    /// Calibration questions (`None`: the task's default, [`crate::tasks::Task::default_cal_num`]).
    pub cal_num: Option<usize>,
    pub calibrate: CalibrateOptions,
    /// The range methods as asked for, which `calibrate`, `compare` and `also` were settled from; settled again for
    /// the model's task ([`E2eConfig::for_task`]).
    pub methods: MethodSettings,
    pub policy: qdq::Policy,
    /// `--compare-methods`: the other methods quantized with `policy` (tables of these names), each evaluated.
    pub compare: Vec<String>,
    /// `--precision`'s others (e.g. fp8 after int8): each policy and the method its ranges come from, quantized from
    /// the same calibration and evaluated beside the main model.
    pub also: Vec<AlsoPrecision>,
    /// Which preset `policy` started from, and why.
    pub policy_choice: PolicyChoice,
    /// Static (calibrated) or dynamic (no calibration; `calibration_data` and `calibrate` unused).
    pub mode: Mode,
    /// The command line, for results.json's provenance.
    pub invocation: Invocation,
    /// Session settings of the FP32 evaluation; the INT8 one is passed to [`e2e`] (see
    /// [`crate::settings::runtime::RuntimeSettings::int8_session`]).
    pub eval: EvalOptions,
    pub no_eval: bool,
    /// `--ep`'s others: the sessions the same FP32 and quantized models are evaluated on again.
    pub other_eps: Vec<OtherEpSessions>,
    /// Also profile both models on the speed comparison's features ([`crate::report::results::OpProfiles`]).
    pub profile_ops: bool,
}

impl E2eConfig {
    /// The configuration with the range methods settled for `task` where --calibrate-method names none and the
    /// task's method for integer pairs is not the one settled (an embedding model's percentile): `None` when nothing
    /// changes.
    pub(crate) fn for_task(&self, task: &Task) -> Result<Option<E2eConfig>> {
        if self.methods.method.is_some() {
            return Ok(None);
        }
        let methods = self.methods.with_integer_default(task.integer_method());
        let main = methods.method_for(self.policy.precision);
        let precisions: Vec<qdq::Precision> =
            std::iter::once(self.policy.precision).chain(self.also.iter().map(|a| a.policy.precision)).collect();
        // Also checks the method options against the task's methods (`--percentile` with a SQuAD model's mse).
        let task_methods = methods.methods(&precisions)?;
        if self.calibrate.methods.first().is_some_and(|m| m.kind() == main) {
            return Ok(None);
        }
        let mut cfg = self.clone();
        cfg.calibrate.methods = task_methods;
        cfg.compare = methods.compared(self.policy.precision);
        for a in &mut cfg.also {
            a.method = methods.method_for(a.policy.precision).name().to_owned();
        }
        cfg.methods = methods;
        Ok(Some(cfg))
    }
}

/// Another EP of `--ep`'s list: the FP32 and quantized models' sessions on it.
#[derive(Debug, Clone)]
pub struct OtherEpSessions {
    pub fp32: runtime::SessionConfig,
    pub int8: runtime::SessionConfig,
}

/// One more precision of an e2e run ([`E2eConfig::also`]).
#[derive(Debug, Clone)]
pub struct AlsoPrecision {
    pub precision: crate::settings::policy::PrecisionChoice,
    pub policy: qdq::Policy,
    pub method: String,
}

/// Every setting of an e2e run, grouped as the CLI groups its flags.
pub(crate) fn settings(cfg: &E2eConfig) -> Value {
    let d = &cfg.data;
    let policy: BTreeMap<&str, String> = cfg.policy.values().into_iter().collect();
    let methods: Vec<Value> =
        cfg.calibrate.methods.iter().map(|m| json!({"method": m.name(), "options": m.options_json()})).collect();
    json!({
        "data": {
            "model": cfg.model, "dataset": cfg.dataset, "samples": cfg.samples,
            "vocab": d.vocab, "tokenizer_json": d.tokenizer_json, "lowercase": d.lowercase, "squad_v2": d.version_2,
            "seq_len": d.features.max_seq_len, "doc_stride": d.features.doc_stride,
            "query_len": d.features.max_query_len, "io": format!("{:?}", d.io), "padding": format!("{:?}", d.padding),
        },
        "policy": {"mode": cfg.mode, "preset": cfg.policy_choice.preset, "chosen_by": cfg.policy_choice.chosen_by, "options": policy,
                   "also": cfg.also.iter().map(|a| json!({"precision": a.policy.precision, "method": a.method})).collect::<Vec<_>>()},
        "calibration": {
            "data": cfg.calibration_data, "questions": cfg.cal_num, "batch": cfg.calibrate.batch,
            "num_bins": cfg.calibrate.num_bins, "methods": methods,
            "session": format!("{:?}", cfg.calibrate.session),
        },
        "evaluation": {"batch": cfg.eval.batch, "warmup": cfg.eval.warmup},
    })
}
