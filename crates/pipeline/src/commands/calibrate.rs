//! `qdq calibrate`: smooth (when the policy does), one statistics pass, the tables into `--out`.

use std::path::{Path, PathBuf};

use runtime::SessionConfig;

use crate::disk::{finish_run_dir, open_run_dir};
use crate::error::{Error, Result};
use crate::guard::InOut;
use crate::inputs::files::TextInputs;
use crate::job::Job;
use crate::model::{carry_tokenizer, load_for_quantization, resolve_model, save_model};
use crate::progress::Progress;
use crate::report::calibrate::CalibrateReport;
use crate::settings::calib::CalibSettings;
use crate::settings::data::DataSettings;
use crate::settings::policy::{Mode, PolicySettings, Target};
use crate::settings::runtime::{BatchSize, OrtLibrary};
use crate::steps::calibrate::{Calibration, calibrate, write_tables};
use crate::steps::collect::CalibrateOptions;
use crate::steps::output_bias::{correct_output_bias, corrected_output};
use crate::steps::rounding::round_model_weights;
use crate::steps::smooth::smooth_model;
use crate::tasks::{Task, Unclaimed};

/// `qdq calibrate`.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct CalibrateJob {
    /// The FP32 ONNX model (file or model directory)
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE", help_heading = "Model and data"))]
    pub model: PathBuf,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub data: DataSettings,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub calib: CalibSettings,
    /// Also merge these statistics (calib_state.json of other runs)
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE", help_heading = "Calibration"))]
    pub merge: Vec<PathBuf>,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub policy: PolicySettings,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub target: Target,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub batching: BatchSize,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub library: OrtLibrary,
    /// Output directory
    ///
    /// calibration.json, calibration_<method>.json, calibration.flatbuffers, calibration.cache, calib_state.json;
    /// with a smoothing policy also model_smoothed.onnx (model_rounded.onnx when it only rounds weights by GPTQ,
    /// model_corrected.onnx when it only corrects a classifier's output bias), the model to pass to `qdq quantize`
    /// with these tables.
    #[cfg_attr(
        feature = "cli",
        arg(long, short = 'o', default_value = "out", value_name = "DIR", help_heading = "Output")
    )]
    pub out: PathBuf,
}

impl Job for CalibrateJob {
    type Report = CalibrateReport;

    /// model_smoothed.onnx (when smoothing), calibration.json, calibration_<method>.json, calibration.flatbuffers,
    /// calibration.cache and calib_state.json into `out`.
    fn run(&self, progress: &dyn Progress) -> Result<CalibrateReport> {
        if self.policy.mode == Mode::Dynamic {
            return Err(Error::Usage("--mode dynamic needs no calibration: run `qdq quantize --mode dynamic`".into()));
        }
        let (policy, choice) = self.policy.policy(&self.target.ep())?;
        tracing::info!("{choice}");
        // An --out that cannot hold the tables fails now, not after the pass.
        let run = open_run_dir(&self.out, "--out", "qdq calibrate")?;
        let (cal, smoothed) = self.calibrate(&policy, progress)?;
        finish_run_dir(run)?;
        Ok(CalibrateReport {
            smoothed,
            tensors: cal.tensors.len(),
            features: cal.features,
            questions: cal.questions,
            unit: cal.unit,
            seconds: cal.seconds,
            times: cal.times,
            halves: cal.halves,
            out: self.out.clone(),
        })
    }
}

impl CalibrateJob {
    /// Smooths (when `policy` does) and calibrates the tensors `policy` quantizes; writes the tables (and the
    /// smoothed model) into `out`. Returns the calibration and, when it smoothed, what and where the model went.
    pub(crate) fn calibrate(
        &self,
        policy: &qdq::Policy,
        progress: &dyn Progress,
    ) -> Result<(Calibration, Option<(String, PathBuf)>)> {
        let model_path = resolve_model(&self.model)?;
        let Some(calibration_data) = &self.calib.calibration_data else {
            return Err(Error::Usage("qdq calibrate needs --calibration-data FILE".into()));
        };
        let model = load_for_quantization(&model_path)?;
        let data_cfg = self.data.config(&model_path)?;
        self.guard(&model_path, calibration_data, &data_cfg)?;
        let text = TextInputs::for_model(&model, &model_path, &data_cfg);
        let task = Task::detect_or(&model, &model_path, &data_cfg, Unclaimed::CalibrateInputs)?;
        let data = task.calibration_feeds(
            (&model, &model_path),
            calibration_data,
            self.calib.cal_num.unwrap_or(task.default_cal_num()),
            &data_cfg,
            &text,
        )?;
        let data = data.as_ref();
        let base = SessionConfig {
            library: self.library.ort_lib.clone(),
            plugins: self.library.ep_plugin.clone(),
            ..SessionConfig::default()
        };
        let calib = self.calib.with_integer_default(task.integer_method());
        let opts = calib.options(self.batching.batch, &base, &[policy.precision])?;
        if !self.merge.is_empty() {
            qdq::check_mergeable(&model, policy)?;
        }
        let (model, smoothing) = smooth_model(model, policy, data, &opts, progress)?;
        let (mut model, rounding) = round_model_weights(model, policy, data, &opts, progress)?;
        let tensors = qdq::tensors_to_calibrate(&model, policy)?;
        let mut cal = calibrate(&model, &tensors, data, &opts, progress)?;
        self.merge_into(&mut cal, &opts)?;
        // The shift is the quantized model's: measured with the main table's ranges, in the model the tables go with.
        let output_bias = match corrected_output(policy, task.shifted_output()) {
            Some(output) => {
                let plan = qdq::plan(&model, &cal.tables[0].min_max(), policy)?;
                correct_output_bias(&mut model, &model_path, &plan, output, data, &opts, progress)?
            }
            None => None,
        };
        let rewrites =
            Rewrites { smoothing: smoothing.as_ref(), rounding: rounding.as_ref(), output_bias: output_bias.as_ref() };
        let smoothed = self.write_rewritten(&model, &rewrites, &data_cfg)?;
        write_tables(&cal, &self.out, policy.precision.is_integer())?;
        Ok((cal, smoothed))
    }

    /// The model the tables describe into `out`, when it is not the one given: smoothed, its weights rounded and/or its
    /// output bias corrected (named for the largest rewrite: smoothing, else GPTQ's rounding, else an outlier split
    /// alone (smoothed), else the bias); with the folder's tokenizer and files. What was done, and where it went.
    fn write_rewritten(
        &self,
        model: &onnx_ir::Model,
        done: &Rewrites<'_>,
        data_cfg: &crate::inputs::config::DataConfig,
    ) -> Result<Option<(String, PathBuf)>> {
        let summary: Vec<String> = done
            .smoothing
            .map(|s| s.describe())
            .into_iter()
            .chain(done.rounding.map(|r| r.describe()))
            .chain(done.output_bias.map(|b| b.describe()))
            .collect();
        if summary.is_empty() {
            return Ok(None);
        }
        let smoothed = done.smoothing.is_some_and(|s| !s.sites.is_empty());
        let file = match (smoothed, done.rounding.is_some(), done.smoothing.is_some()) {
            (true, _, _) | (false, false, true) => "model_smoothed.onnx",
            (false, true, _) => "model_rounded.onnx",
            (false, false, false) => "model_corrected.onnx",
        };
        let path = self.out.join(file);
        save_model(model, &path)?;
        carry_tokenizer(&data_cfg.tokenizer_files(), &self.out)?;
        data_cfg.folder.carry_to(&self.out)?;
        Ok(Some((summary.join("; "), path)))
    }

    /// The outputs against the inputs ([`InOut`]), before any work.
    fn guard(
        &self,
        model_path: &Path,
        calibration_data: &Path,
        data_cfg: &crate::inputs::config::DataConfig,
    ) -> Result<()> {
        let mut io = InOut::new()
            .model("--model", model_path)
            .input("--calibration-data", Some(calibration_data))
            .data(data_cfg)
            .out_dir("--out", &self.out);
        for m in &self.merge {
            io = io.input("--merge", Some(m));
        }
        io.check()
    }

    /// `--merge`: the other runs' statistics folded into `cal`, and the ranges computed again from the sum.
    fn merge_into(&self, cal: &mut Calibration, opts: &CalibrateOptions) -> Result<()> {
        if self.merge.is_empty() {
            return Ok(());
        }
        for m in &self.merge {
            let other = calib::CalibState::load_json(m)?;
            cal.state.merge(&other).map_err(|e| Error::Input { path: m.clone(), reason: format!("merging: {e}") })?;
        }
        cal.tables = calib::compute_all(&cal.state, &opts.methods).map_err(|e| match e {
            calib::Error::TailTooThin { .. } | calib::Error::TailsOnly { .. } => Error::Usage(format!(
                "{e}. A state calibrated for percentiles or mse alone keeps only the tails they read (and merged, the \
                 widest middle of them all); to merge states whole, calibrate every part with a method that reads \
                 whole histograms too (e.g. --compare-methods distribution)"
            )),
            e => e.into(),
        })?;
        Ok(())
    }
}

/// What calibrate did to the model before its tables ([`CalibrateJob::write_rewritten`]).
struct Rewrites<'a> {
    smoothing: Option<&'a crate::steps::smooth::Smoothing>,
    rounding: Option<&'a crate::steps::rounding::Rounding>,
    output_bias: Option<&'a crate::steps::output_bias::OutputShift>,
}
