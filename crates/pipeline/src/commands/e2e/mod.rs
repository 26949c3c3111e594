//! `qdq e2e`: calibrate, quantize, then evaluate FP32 and INT8 side by side; everything into `--out`.

mod config;
mod profile;
mod quantize;
mod run;

use std::path::{Path, PathBuf};

use runtime::{Ep, SessionConfig};

pub use self::config::{AlsoPrecision, E2eConfig, OtherEpSessions};
pub use self::run::e2e;
use crate::error::Result;
use crate::guard::InOut;
use crate::job::Job;
use crate::model::resolve_model;
use crate::progress::Progress;
use crate::provenance::Invocation;
use crate::report::e2e::E2eReport;
use crate::settings::calib::CalibSettings;
use crate::settings::data::DataSettings;
use crate::settings::policy::{Mode, PolicySettings};
use crate::settings::runtime::{BatchSize, RuntimeSettings};
use crate::steps::run::EvalOptions;

/// `qdq e2e`.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct E2eJob {
    /// The FP32 ONNX model (file or model directory)
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value = "model.onnx", value_name = "FILE", help_heading = "Model and data")
    )]
    pub model: PathBuf,
    /// SQuAD file to evaluate on [default: squad/dev-v<version>.json]
    ///
    /// A model without start / end logits (a classifier) takes .npz (arrays named after the model inputs, optional
    /// `label`), .npy (token ids), text lines (a tab separates a pair), GLUE's TSVs or JSONL (`{"text",
    /// "text_pair", "label"}`, or GLUE's keys).
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE", help_heading = "Model and data"))]
    pub dataset: Option<PathBuf>,
    /// Questions to evaluate: the first N of --dataset (0 = all)
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 0, value_name = "N", help_heading = "Model and data"))]
    pub samples: usize,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub data: DataSettings,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub calib: CalibSettings,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub policy: PolicySettings,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub runtime: RuntimeSettings,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub batching: BatchSize,
    /// Output directory
    ///
    /// model_qdq.onnx, calibration.json, calibration.flatbuffers (ORT TensorRT/MIGraphX table), calibration.cache
    /// (TensorRT native cache), calib_state.json (mergeable statistics), predictions_fp32.json,
    /// predictions_int8.json, results.json and report.md; with --compare-methods also model_qdq_<method>.onnx and
    /// predictions_int8_<method>.json for each method, each a row of the table.
    #[cfg_attr(
        feature = "cli",
        arg(long, short = 'o', default_value = "out", value_name = "DIR", help_heading = "Output")
    )]
    pub out: PathBuf,
    /// Stop after quantizing: no evaluation
    #[cfg_attr(feature = "cli", arg(long, help_heading = "Output"))]
    pub no_eval: bool,
    /// Also show where each model's time goes, per operator type
    ///
    /// FP32 and INT8 run under ONNX Runtime's profiler on the first evaluation features (at most 16): kernel time
    /// per operator type as ONNX Runtime ran them (integer MatMuls, fused attention, what stayed in float). A few
    /// seconds more; printed, in report.md and in results.json (`op_profile`).
    #[cfg_attr(feature = "cli", arg(long, conflicts_with = "no_eval", help_heading = "Output"))]
    pub profile_ops: bool,
    /// The command line and build, recorded in results.json (the binary fills it; not a flag).
    #[cfg_attr(feature = "cli", arg(skip))]
    pub invocation: Invocation,
}

impl Job for E2eJob {
    type Report = E2eReport;

    /// Every EP is checked against the loaded ONNX Runtime before any work.
    fn run(&self, progress: &dyn Progress) -> Result<E2eReport> {
        let model = resolve_model(&self.model)?;
        let dataset =
            self.dataset.clone().unwrap_or_else(|| PathBuf::from(format!("squad/dev-v{}.json", self.data.version)));
        let (fp32, mut int8, mut other_eps) = self.sessions(progress)?;
        let (mut policies, choice) = self.policy.policies(&self.runtime.configured_ep())?;
        tracing::info!("{choice}");
        let precisions: Vec<qdq::Precision> = policies.iter().map(|(_, p)| p.precision).collect();
        let methods = &self.calib.methods;
        let (_, policy) = policies.remove(0);
        let also = policies
            .into_iter()
            .map(|(precision, policy)| {
                let method = methods.method_for(policy.precision).name().to_owned();
                AlsoPrecision { precision, policy, method }
            })
            .collect();
        let compare = methods.compared(policy.precision);
        if self.policy.mode == Mode::Dynamic && !matches!(self.runtime.ep(), Ep::Cpu) {
            progress.note(
                "--mode dynamic writes ONNX Runtime's CPU integer ops; other EPs run them on the CPU or not at all",
            );
        }
        // An EP that takes static shapes only (QNN) has every feature padded to --seq-len, on each EP.
        let mut data = self.data.config(&model)?;
        self.guard(&model, &dataset, &data)?;
        for s in std::iter::once(&mut int8).chain(other_eps.iter_mut().flat_map(|o| [&mut o.fp32, &mut o.int8])) {
            data.fix_shapes(s, self.batching.batch);
        }
        let cfg = E2eConfig {
            calibration_data: self.calib.calibration_data.clone().unwrap_or_else(|| dataset.clone()),
            dataset,
            out: self.out.clone(),
            data,
            samples: self.samples,
            cal_num: self.calib.cal_num,
            calibrate: self.calib.options(self.batching.batch, &fp32, &precisions)?,
            policy,
            compare,
            also,
            methods: methods.clone(),
            policy_choice: choice,
            mode: self.policy.mode,
            invocation: self.invocation.clone(),
            eval: EvalOptions {
                batch: self.batching.batch,
                session: fp32,
                warmup: self.runtime.warmup,
                workers: 1,
                at_default_float: !self.runtime.no_default_float,
            },
            no_eval: self.no_eval,
            other_eps,
            profile_ops: self.profile_ops,
            model,
        };
        Ok(E2eReport { results: e2e(&cfg, &int8, progress)?, out: self.out.clone() })
    }
}

impl E2eJob {
    /// The outputs against the inputs ([`InOut`]), before any work.
    fn guard(&self, model: &Path, dataset: &Path, data: &crate::inputs::config::DataConfig) -> Result<()> {
        InOut::new()
            .model("--model", model)
            .input("--dataset", Some(dataset))
            .input("--calibration-data", self.calib.calibration_data.as_deref())
            .data(data)
            .out_dir("--out", &self.out)
            .check()
    }

    /// The FP32 and quantized models' sessions on the first EP of `--ep`, and on each other; every one checked
    /// against the loaded ONNX Runtime before any work.
    fn sessions(&self, progress: &dyn Progress) -> Result<(SessionConfig, SessionConfig, Vec<OtherEpSessions>)> {
        let table = self.out.join("calibration.flatbuffers");
        let (fp32, mut int8) = if self.runtime.ep().fp32_on_cpu() {
            // QNN: FP32's reference and the calibration on the CPU EP, the quantized model on QNN.
            (
                self.runtime.fp32_session_on(&Ep::Cpu, Some(&self.out), "fp32"),
                self.runtime.int8_session_on(self.runtime.ep(), &table),
            )
        } else {
            let fp32 = self.runtime.fp32_session(Some(&self.out), "fp32");
            let int8 = self.runtime.int8_session(&fp32, &table);
            (fp32, int8)
        };
        if self.runtime.save_load {
            int8.optimized_model_path = Some(self.out.join("model_int8_optimized.onnx"));
        }
        if self.runtime.int8 && matches!(int8.ep, Ep::Cpu) {
            progress.note(
                    "--int8 has no extra effect on cpu: ONNX Runtime runs the QDQ model with integer kernels where it fuses \
                     them",
                );
        }
        let other_eps: Vec<OtherEpSessions> = self
            .runtime
            .other_eps()
            .iter()
            .map(|ep| OtherEpSessions {
                fp32: self.runtime.fp32_session_on(ep, None, ""),
                int8: self.runtime.int8_session_on(ep, &table),
            })
            .collect();
        for s in [&fp32, &int8].into_iter().chain(other_eps.iter().flat_map(|o| [&o.fp32, &o.int8])) {
            s.check_available()?;
        }
        Ok((fp32, int8, other_eps))
    }
}
