//! `qdq debug`: where a QDQ model loses accuracy. Runs the FP32 model, the QDQ model and the QDQ model's float
//! reference ([`qdq::float_reference`]: its activation pairs taken out) on held-out inputs and measures, for every
//! activation pair, the dequantized tensor against the float value it stands for (any rewrite, a shifted Softmax or
//! a smoothed input, is the same tensor in both), and the task's outputs against FP32's: a SQuAD model's start and
//! end logits, an embedding model's sentence embedding, a classifier's class logits. With a second EP (`--ep cpu,qnn`), the same QDQ model there
//! against the first, pair by pair.

mod confirm;

use std::path::{Path, PathBuf};

use onnx_ir::Model;

use crate::disk::{create_out_dir, finish_run_dir, open_run_dir, parent_dir};
use crate::error::{Error, Result};
use crate::guard::InOut;
use crate::held_out::HeldOut;
use crate::held_out::pairs::{across_eps, measure, probes, sensitivity};
use crate::job::Job;
use crate::model::{name_nodes, quantized_ops_text, resolve_model};
use crate::progress::Progress;
use crate::report::debug::DebugReport;
use crate::settings::data::DataSettings;
use crate::settings::runtime::RuntimeSettings;
use crate::tasks::Task;

/// `qdq debug`: the FP32 model, the QDQ model made from it, held-out questions.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct DebugJob {
    /// The FP32 model the QDQ model was made from (file or model directory)
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE", help_heading = "Model and data"))]
    pub model: PathBuf,
    /// The QDQ model to explain (model_qdq.onnx of `qdq e2e` / `qdq quantize`)
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE", help_heading = "Model and data"))]
    pub qdq: PathBuf,
    /// SQuAD file (or texts); its last --held-out questions are run
    ///
    /// Held out from an evaluation of its first ones (--confirm scores the first --samples). An embedding model runs
    /// the last --held-out questions of a SQuAD file with their paragraphs, or the last --held-out texts of any
    /// other file (text lines, TSV, JSONL); a classifier the last --held-out inputs of its file.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE", help_heading = "Model and data"))]
    pub dataset: PathBuf,
    /// Held-out questions to run: the last N of --dataset
    #[cfg_attr(
        feature = "cli",
        arg(long, alias = "questions", default_value_t = 32, value_name = "N", help_heading = "Model and data")
    )]
    pub held_out: usize,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub data: DataSettings,
    /// Also each node's sensitivity (one more run per node)
    ///
    /// The outputs against FP32's with only that node's quantized inputs kept in float (same ranges, no
    /// re-calibration; one more run of the held-out inputs per node): the logits' KL, the embeddings' cosine
    /// distance.
    #[cfg_attr(feature = "cli", arg(long, help_heading = "Sensitivity"))]
    pub sensitivity: bool,
    /// F1 of the N most recovering nodes (with --sensitivity)
    ///
    /// Scores F1 on the first --samples questions of --dataset for FP32, the QDQ model and the QDQ model with each
    /// of the N most recovering nodes in float, one at a time, so each node's KL stands beside the F1 it recovers
    /// (N + 2 evaluations). 0 = no F1.
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value_t = 0, value_name = "N", requires = "sensitivity", help_heading = "Sensitivity")
    )]
    pub confirm: usize,
    /// Questions --confirm scores: the first N of --dataset
    ///
    /// Keep them apart from the last --held-out.
    #[cfg_attr(
        feature = "cli",
        arg(long, alias = "confirm-samples", default_value_t = 1000, value_name = "N", help_heading = "Sensitivity")
    )]
    pub samples: usize,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub runtime: RuntimeSettings,
    /// Also write debug.json, debug.md and sqnr.svg here
    ///
    /// sqnr.svg: each pair's SQNR in graph order.
    #[cfg_attr(feature = "cli", arg(long, short = 'o', value_name = "DIR", help_heading = "Output"))]
    pub out: Option<PathBuf>,
    /// Tensors in the printed table, worst first (--json lists all)
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 20, value_name = "N", help_heading = "Output"))]
    pub top: usize,
}

impl Job for DebugJob {
    type Report = DebugReport;

    fn run(&self, progress: &dyn Progress) -> Result<DebugReport> {
        let (_, other_ep) = self.runtime.debug_eps()?;
        let (fp32_path, int8_path) = (resolve_model(&self.model)?, resolve_model(&self.qdq)?);
        let fp32 = Model::load(&fp32_path)?;
        if let Some(held) = quantized_ops_text(&fp32) {
            return Err(Error::Input {
                path: fp32_path,
                reason: format!(
                    "--model holds a quantized model ({held}): debug compares the quantized model (--qdq) with the \
                     FP32 model it was made from (--model); were the two given the other way round?"
                ),
            });
        }
        self.check()?;
        let run = self.out.as_ref().map(|dir| open_run_dir(dir, "--out", "qdq debug")).transpose()?;
        let mut session = self.runtime.fp32_session(Some(parent_dir(&fp32_path)), "debug");
        let mut data = self.data.config(&fp32_path)?;
        let mut io = InOut::new()
            .model("--model", &fp32_path)
            .model("--qdq", &int8_path)
            .input("--dataset", Some(&self.dataset))
            .data(&data);
        if let Some(dir) = &self.out {
            io = io.report_dir("--out", dir);
        }
        io.check()?;
        let mut other = other_ep.map(|ep| self.runtime.fp32_session_on(ep, None, "debug"));
        // An EP of static shapes only (QNN) has every held-out feature padded to --seq-len, on both EPs.
        for s in std::iter::once(&mut session).chain(other.as_mut()) {
            data.fix_shapes(s, 1);
        }
        let task = Task::detect(&fp32, &fp32_path, &data)?;
        if let Some(d) = task.describe() {
            progress.note(&d);
        }
        self.check_confirm(&task)?;
        let held = task.held_out((&fp32, &fp32_path), &self.dataset, self.held_out, session, &data)?;
        drop(fp32);
        // Loaded once: a second EP runs the same QDQ model with the same pairs exposed.
        let int8 = load_qdq(&int8_path)?;
        let mut report = self.report_on(&fp32_path, (&int8_path, &int8), (&held, Some(&task)), progress)?;
        if let Some(other) = &other {
            progress.start(&format!("on {}", other.ep), Some(held.units() as u64), held.unit());
            report.other_ep = Some(across_eps(&held, &int8, &probes(&int8), other, progress)?);
            progress.finish();
        }
        if let Some(dir) = &self.out {
            report.write(dir)?;
        }
        run.map(finish_run_dir).transpose()?;
        Ok(report)
    }
}

impl DebugJob {
    /// `--confirm` scores SQuAD's F1: refused for another task, naming what scores it.
    fn check_confirm(&self, task: &Task) -> Result<()> {
        let scores_instead = task.confirm_instead();
        match scores_instead.filter(|_| self.confirm > 0) {
            Some(instead) => {
                Err(Error::Usage(format!("--confirm scores SQuAD F1 beside a SQuAD model's sensitivity; {instead}")))
            }
            None => Ok(()),
        }
    }

    fn check(&self) -> Result<()> {
        if self.held_out == 0 {
            return Err(Error::Usage("--held-out must be at least 1".into()));
        }
        Ok(())
    }

    /// The debug of `int8_path` on held-out inputs already run through FP32 (`held`: this job's dataset and
    /// questions, as `qdq tune` shares them with its candidates' measurements), written to --out.
    pub(crate) fn run_on(
        &self,
        fp32_path: &Path,
        int8_path: &Path,
        held: &HeldOut,
        progress: &dyn Progress,
    ) -> Result<DebugReport> {
        let int8 = load_qdq(int8_path)?;
        let report = self.report_on(fp32_path, (int8_path, &int8), (held, None), progress)?;
        if let Some(dir) = &self.out {
            report.write(dir)?;
        }
        Ok(report)
    }

    /// [`DebugJob::run_on`] of the QDQ model already loaded (`int8`, from `int8_path`), without writing; `task`, the
    /// model's when already told (`--confirm` tells it otherwise).
    fn report_on(
        &self,
        fp32_path: &Path,
        (int8_path, int8): (&Path, &Model),
        (held, task): (&HeldOut, Option<&Task>),
        progress: &dyn Progress,
    ) -> Result<DebugReport> {
        self.check()?;
        if let Some(dir) = &self.out {
            create_out_dir(dir, "--out")?;
        }
        let probes = probes(int8);
        if probes.is_empty() {
            progress.note(&format!(
                "{} has no activation Q/DQ pairs (a dynamic or weight-only model?): only its outputs are compared",
                int8_path.display()
            ));
        }
        progress.start("debugging", Some(held.units() as u64), held.unit());
        let measured = measure(held, int8, &probes, progress)?;
        progress.finish();
        let mut sensitivity =
            if self.sensitivity { sensitivity(held, int8, measured.logits.loss(), progress)? } else { Vec::new() };
        let confirmation = if self.confirm > 0 && !sensitivity.is_empty() {
            let on = confirm::ConfirmOn {
                task,
                dataset: &self.dataset,
                samples: self.samples,
                nodes: self.confirm,
                runtime: &self.runtime,
                data: &self.data,
            };
            Some(confirm::confirm(&on, fp32_path, int8, &mut sensitivity, progress)?)
        } else {
            None
        };
        let report = DebugReport {
            model: fp32_path.to_path_buf(),
            qdq: int8_path.to_path_buf(),
            dataset: self.dataset.clone(),
            held_out: held.describe().to_owned(),
            units: held.units(),
            unit: held.unit(),
            features: held.features(),
            logits: measured.logits,
            weights_only_logits: held.agreement_of(&measured.reference_values),
            tensors: measured.tensors,
            sensitivity,
            confirmation,
            other_ep: None,
            top: self.top,
        };
        Ok(report)
    }
}

/// The QDQ model as `debug` measures it. Sensitivity and the pairs taken out refer to nodes by name, so each node gets
/// one of its own; the CPU layout's integer MatMuls read the quantized tensors directly, so they take their Q/DQ form
/// (the same values), in which each has its activation pair to measure and take out.
fn load_qdq(path: &Path) -> Result<Model> {
    let mut int8 = Model::load(path)?;
    name_nodes(&mut int8, path);
    Ok(qdq::expand_integer_matmuls(int8))
}
