//! The jobs behind the `qdq` commands, one function each: the binary fills a job from its flags, calls it, and prints
//! the report it gets back (each report's `Display` is the command's text output).

use std::fmt;
use std::path::{Path, PathBuf};

use onnx_ir::Model;
use runtime::{Ep, ModelSource, SessionConfig};

use crate::calibrate::{calibrate, smooth_model, write_tables};
use crate::data::Corpus;
use crate::e2e::{E2eConfig, e2e};
use crate::evaluate::{EvalOptions, Evaluation, evaluate};
use crate::report::E2eResults;
use crate::settings::{CalibSettings, DataSettings, Mode, PolicySettings, RuntimeSettings, resolve_model};
use crate::{Error, Progress, Result, write_predictions};

/// What a job hands back: its text (`Display`, what the command prints) and its `--json` document (docs/JSON.md).
pub trait Report: fmt::Display {
    /// The JSON document, with its `schema`.
    fn json(&self) -> serde_json::Value;
}

/// `qdq calibrate`: smooth (when the policy does), then one statistics pass, tables into `out`.
#[derive(Debug, Clone)]
pub struct CalibrateJob {
    pub model: PathBuf,
    pub batch: usize,
    pub out: PathBuf,
    /// calib_state.json files of other runs merged into the result.
    pub merge: Vec<PathBuf>,
    pub data: DataSettings,
    /// `calibration_data` is required here.
    pub calib: CalibSettings,
    pub policy: PolicySettings,
    /// The EP the quantized model is for: it picks the default preset ([`PolicySettings::choice`]).
    pub ep: Ep,
    pub ort_lib: Option<PathBuf>,
}

/// What [`calibrate_to_dir`] did.
#[derive(Debug, Clone)]
pub struct CalibrateReport {
    /// The smoothing summary and where the smoothed model went, when the policy smoothed.
    pub smoothed: Option<(String, PathBuf)>,
    pub tensors: usize,
    pub features: usize,
    /// Units of calibration data (`questions` of SQuAD, or `inputs`) and their name.
    pub questions: usize,
    pub unit: &'static str,
    pub seconds: f64,
    pub times: crate::PassTimes,
    pub out: PathBuf,
}

impl Report for CalibrateReport {
    /// The document `qdq calibrate --json` prints (docs/JSON.md, schema `qdq.calibrate/1`).
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "schema": "qdq.calibrate/1",
            "out": self.out,
            "tensors": self.tensors,
            "features": self.features,
            "questions": self.questions,
            "seconds": self.seconds,
            "pass": self.times,
            "smoothing": self.smoothed.as_ref().map(|(summary, model)| serde_json::json!({
                "summary": summary,
                "model": model,
            })),
        })
    }
}

impl fmt::Display for CalibrateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some((summary, path)) = &self.smoothed {
            writeln!(f, "{summary}; wrote {} (quantize this model with these tables)", path.display())?;
        }
        write!(
            f,
            "Calibrated {} tensors on {} features ({} {}) in {:.1} s ({}); tables in {}",
            self.tensors,
            self.features,
            self.questions,
            self.unit,
            self.seconds,
            self.times.describe(),
            self.out.display()
        )
    }
}

/// Runs [`CalibrateJob`]: model_smoothed.onnx (when smoothing), calibration.json, calibration_<method>.json,
/// calibration.flatbuffers, calibration.cache and calib_state.json into `job.out`.
pub fn calibrate_to_dir(job: &CalibrateJob, progress: &dyn Progress) -> Result<CalibrateReport> {
    let job = &CalibrateJob { model: resolve_model(&job.model)?, ..job.clone() };
    if job.policy.mode == Mode::Dynamic {
        return Err(Error::Config("--mode dynamic needs no calibration: run `qdq quantize --mode dynamic`".into()));
    }
    let Some(calibration_data) = &job.calib.calibration_data else {
        return Err(Error::Config("qdq calibrate needs --calibration-data FILE".into()));
    };
    let model = crate::load_for_quantization(&job.model)?;
    let data_cfg = job.data.config(&job.model)?;
    let text = crate::inputs::TextInputs::for_model(&model, &job.model, &data_cfg);
    let data = crate::inputs::load_feeds(&model, &job.model, calibration_data, job.calib.cal_num, &data_cfg, &text)?;
    let data = data.as_ref();
    let (policy, choice) = job.policy.policy(&job.ep)?;
    tracing::info!("{choice}");
    let base = SessionConfig { library: job.ort_lib.clone(), ..SessionConfig::default() };
    let opts = job.calib.options(job.batch, &base)?;
    if !job.merge.is_empty() {
        qdq::check_mergeable(&model, &policy)?;
    }
    // An --out that cannot hold the tables fails now, not after the pass.
    crate::prepare_out_dir(&job.out, "--out")?;
    let (model, smoothed) = match smooth_model(model, &policy, data, &opts, progress)? {
        (model, None) => (model, None),
        (smoothed, Some(s)) => {
            let path = job.out.join("model_smoothed.onnx");
            crate::save_model(&smoothed, &path)?;
            (smoothed, Some((s.describe(), path)))
        }
    };
    let tensors = qdq::tensors_to_calibrate(&model, &policy)?;
    let mut cal = calibrate(&model, &tensors, data, &opts, progress)?;
    for m in &job.merge {
        let other = calib::CalibState::load_json(m)?;
        cal.state.merge(&other).map_err(|e| Error::Input { path: m.clone(), reason: format!("merging: {e}") })?;
    }
    if !job.merge.is_empty() {
        cal.tables = calib::compute_all(&cal.state, &opts.methods).map_err(|e| match e {
            calib::Error::TailTooThin { .. } | calib::Error::TailsOnly { .. } => Error::Config(format!(
                "{e}. A state calibrated for percentiles or mse alone keeps only the tails they read (and merged, the \
                 widest middle of them all); to merge states whole, calibrate every part with a method that reads \
                 whole histograms too (e.g. --compare-methods distribution)"
            )),
            e => e.into(),
        })?;
    }
    write_tables(&cal, &job.out)?;
    Ok(CalibrateReport {
        smoothed,
        tensors: cal.tensors.len(),
        features: cal.features,
        questions: cal.questions,
        unit: cal.unit,
        seconds: cal.seconds,
        times: cal.times,
        out: job.out.clone(),
    })
}

/// `qdq quantize`: Q/DQ pairs into a model, with ranges from any table qdq reads.
#[derive(Debug, Clone)]
pub struct QuantizeJob {
    pub model: PathBuf,
    /// qdq's or ONNX Runtime's calibration.json, ONNX Runtime's calibration.flatbuffers or calibration.cache, or a
    /// TensorRT calibration cache ([`calib::tables::read_ranges`]). Required in static mode, unused in dynamic.
    pub ranges: Option<PathBuf>,
    /// Where the QDQ model goes; `None` only with `dry_run`.
    pub output: Option<PathBuf>,
    /// Plan only, write nothing.
    pub dry_run: bool,
    pub policy: PolicySettings,
    /// The EP the quantized model is for: it picks the default preset ([`PolicySettings::choice`]).
    pub ep: Ep,
}

/// What [`quantize_file`] did: the plan (dry run) or the model it wrote.
#[derive(Debug, Clone)]
pub enum QuantizeReport {
    Planned(qdq::Plan),
    PlannedDynamic(qdq::DynamicPlan),
    /// `skipped`: each tensor the policy wanted but left in float, with the reason; `float_matmul_like`: the
    /// MatMul-like nodes of the written model that still read float inputs; `integer_forms`: what was written
    /// besides Q/DQ pairs ([`qdq::Plan::integer_forms`]).
    Written {
        output: PathBuf,
        tensors: usize,
        skipped: Vec<String>,
        float_matmul_like: Vec<String>,
        integer_forms: Vec<String>,
    },
}

impl Report for QuantizeReport {
    /// The document `qdq quantize --json` prints (docs/JSON.md, schema `qdq.quantize/1`).
    fn json(&self) -> serde_json::Value {
        match self {
            QuantizeReport::Planned(plan) => serde_json::json!({
                "schema": "qdq.quantize/1",
                "dry_run": true,
                "pairs": plan.pair_count(),
                "plan": plan,
            }),
            QuantizeReport::PlannedDynamic(plan) => serde_json::json!({
                "schema": "qdq.quantize/1",
                "dry_run": true,
                "mode": "dynamic",
                "plan": plan,
            }),
            QuantizeReport::Written { output, tensors, skipped, float_matmul_like, integer_forms } => {
                serde_json::json!({
                    "schema": "qdq.quantize/1",
                    "dry_run": false,
                    "output": output,
                    "quantized_tensors": tensors,
                    "skipped_tensors": skipped.len(),
                    "skipped": skipped,
                    "float_matmul_like": float_matmul_like,
                    "integer_forms": integer_forms,
                })
            }
        }
    }
}

impl fmt::Display for QuantizeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuantizeReport::Planned(plan) => write!(f, "{plan}"),
            QuantizeReport::PlannedDynamic(plan) => write!(f, "{plan}"),
            QuantizeReport::Written { output, tensors, skipped, float_matmul_like, integer_forms } => {
                write!(f, "Wrote {} ({tensors} tensors quantized, {} skipped)", output.display(), skipped.len())?;
                for line in integer_forms {
                    write!(f, "\n  {line}")?;
                }
                for s in skipped {
                    write!(f, "\n  skipped {s}")?;
                }
                if !float_matmul_like.is_empty() {
                    write!(f, "\n{} MatMul-like nodes left in float:", float_matmul_like.len())?;
                    for n in float_matmul_like {
                        write!(f, "\n  {n}")?;
                    }
                }
                Ok(())
            }
        }
    }
}

/// Runs [`QuantizeJob`]. A smoothing policy on an unsmoothed model is an error naming the model file.
pub fn quantize_file(job: &QuantizeJob) -> Result<QuantizeReport> {
    let job = &QuantizeJob { model: resolve_model(&job.model)?, ..job.clone() };
    if job.output.is_none() && !job.dry_run {
        return Err(Error::Config("qdq quantize needs --output FILE (or --dry-run)".into()));
    }
    if let (Some(out), false) = (&job.output, job.dry_run) {
        crate::check_writable(out, "--output")?;
    }
    let (policy, choice) = job.policy.policy(&job.ep)?;
    tracing::info!("{choice}");
    if job.policy.mode == Mode::Dynamic {
        return quantize_file_dynamic(job, &policy);
    }
    let Some(ranges) = &job.ranges else {
        return Err(Error::Config("qdq quantize needs --ranges FILE (or --mode dynamic, which needs none)".into()));
    };
    let model = crate::load_for_quantization(&job.model)?;
    let table = calib::tables::read_ranges(ranges)?;
    // calibrate writes model_smoothed.onnx and the tables one by one: a killed or repeated run can leave a pair from
    // two runs, whose ranges do not describe the model.
    if let Some(want) = &table.model {
        let reason = match qdq::smoothing_fingerprint(&model) {
            Some(has) if has == want => None,
            Some(has) => Some(format!(
                "its ranges were measured on the model smoothed as `{want}`, but {} is smoothed as `{has}`: they come \
                 from different runs of qdq calibrate; run it again and quantize the model_smoothed.onnx it writes",
                job.model.display()
            )),
            None => Some(format!(
                "its ranges were measured on a smoothed model, but {} is not smoothed: quantize the model_smoothed.onnx \
                 that qdq calibrate wrote beside this table (or calibrate with --policy-option smooth=off)",
                job.model.display()
            )),
        };
        if let Some(reason) = reason {
            return Err(Error::Input { path: ranges.clone(), reason });
        }
    }
    // A bad entry matters only for a tensor the policy quantizes; ONNX Runtime's tables list every tensor it saw.
    if !table.rejected.is_empty() {
        let wanted = qdq::tensors_to_calibrate(&model, &policy)?;
        for (tensor, why) in &table.rejected {
            if wanted.contains(tensor) {
                let reason = format!("tensor '{tensor}', which the policy quantizes: {why}");
                return Err(Error::Input { path: ranges.clone(), reason });
            }
            tracing::warn!("{}: tensor '{tensor}' left out ({why}); the policy does not quantize it", ranges.display());
        }
    }
    let plan = qdq::plan(&model, &table.ranges, &policy).map_err(|e| match e {
        e @ qdq::Error::NotSmoothed { .. } => Error::Input { path: job.model.clone(), reason: e.to_string() },
        e => e.into(),
    })?;
    let (Some(output), false) = (&job.output, job.dry_run) else {
        return Ok(QuantizeReport::Planned(plan));
    };
    let mut model = model;
    plan.apply(&mut model)?;
    crate::save_model(&model, output)?;
    let skipped = plan.skipped.iter().map(|s| format!("{}: {}", s.tensor, s.reason)).collect();
    let float_matmul_like = qdq::coverage(&model).float_matmul_like.iter().map(ToString::to_string).collect();
    let integer_forms = plan.integer_forms();
    Ok(QuantizeReport::Written {
        output: output.clone(),
        tensors: plan.tensors.len(),
        skipped,
        float_matmul_like,
        integer_forms,
    })
}

/// `qdq quantize --mode dynamic`: no ranges ([`qdq::quantize_dynamic`]).
fn quantize_file_dynamic(job: &QuantizeJob, policy: &qdq::Policy) -> Result<QuantizeReport> {
    if job.ranges.is_some() {
        tracing::warn!("--ranges is not used in dynamic mode");
    }
    let model = crate::load_for_quantization(&job.model)?;
    let (qmodel, plan) = qdq::quantize_dynamic(&model, policy)?;
    let (Some(output), false) = (&job.output, job.dry_run) else {
        return Ok(QuantizeReport::PlannedDynamic(plan));
    };
    crate::save_model(&qmodel, output)?;
    let float_matmul_like = qdq::coverage(&qmodel).float_matmul_like.iter().map(ToString::to_string).collect();
    Ok(QuantizeReport::Written {
        output: output.clone(),
        tensors: plan.matmuls.len(),
        skipped: vec![],
        float_matmul_like,
        integer_forms: plan.contrib.lines(),
    })
}

/// `qdq eval`: one model on SQuAD.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct EvalJob {
    /// The ONNX model (FP32 or QDQ).
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub model: PathBuf,
    /// SQuAD file to evaluate on.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub dataset: PathBuf,
    /// Questions to evaluate (first N; 0 = all).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 0, value_name = "N"))]
    pub samples: usize,
    /// Features per inference batch.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1, value_name = "N", value_parser = crate::settings::cli::positive))]
    pub batch: usize,
    /// Write predictions here (SQuAD predictions JSON).
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub predictions: Option<PathBuf>,
    /// Sessions run side by side (CPU EP), each on its share of --threads, each taking the next batch: more
    /// questions per second where one session's threads wait on each other (MiniLM, 2 cores, two one-thread
    /// sessions: 1.37x with the `tensorrt` layout's Q/DQ pairs, 1.08x FP32), the same answers. The latency printed is
    /// then each session's own; the pass's wall time is in --json (`wall_seconds`).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1, value_name = "N", value_parser = crate::settings::cli::positive))]
    pub workers: usize,
    /// Also run the model under ONNX Runtime's profiler on its first features (at most 16) and show where its time
    /// goes: kernel time per operator type as ONNX Runtime ran them (integer MatMuls, fused attention, what stayed in
    /// float). A few seconds more; in --json as `op_profile`.
    #[cfg_attr(feature = "cli", arg(long))]
    pub profile_ops: bool,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub runtime: RuntimeSettings,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub data: DataSettings,
}

/// An evaluation and the model it was of.
#[derive(Debug, Clone)]
pub struct EvalReport {
    pub model: PathBuf,
    pub evaluation: Evaluation,
    /// `--profile-ops`.
    pub op_profile: Option<crate::OpProfile>,
}

impl Report for EvalReport {
    /// The document `qdq eval --json` prints (docs/JSON.md, schema `qdq.eval/1`).
    fn json(&self) -> serde_json::Value {
        let e = &self.evaluation;
        serde_json::json!({
            "schema": "qdq.eval/1",
            "model": self.model,
            "ep": e.ep,
            "fallback": e.fallback,
            "exact_match": e.score.exact_match,
            "f1": e.score.f1,
            "questions": e.score.questions,
            "missing_predictions": e.score.missing_predictions,
            "latency": e.latency,
            "wall_seconds": e.wall_seconds,
            "workers": e.workers,
            "op_profile": self.op_profile,
        })
    }
}

impl fmt::Display for EvalReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (e, l) = (&self.evaluation, &self.evaluation.latency);
        write!(
            f,
            "{}: EM {:.2} F1 {:.2} on {} questions ({} missing) | ",
            self.model.display(),
            e.score.exact_match,
            e.score.f1,
            e.score.questions,
            e.score.missing_predictions,
        )?;
        if e.workers > 1 {
            write!(
                f,
                "{:.1} features/s over the pass with {} sessions side by side (each: {:.2} ms/feature, p50 {:.2}, p90 \
                 {:.2}) on {}",
                l.features as f64 / e.wall_seconds.max(1e-9),
                e.workers,
                l.ms_per_feature,
                l.p50_ms_per_feature,
                l.p90_ms_per_feature,
                e.ep
            )?;
        } else {
            write!(
                f,
                "{:.2} ms/feature, p50 {:.2}, p90 {:.2}, {:.1} features/s on {}",
                l.ms_per_feature, l.p50_ms_per_feature, l.p90_ms_per_feature, l.features_per_second, e.ep
            )?;
        }
        match &self.op_profile {
            Some(p) => write!(f, "\nWhere the time goes:\n{}", crate::op_table(&[("model", p)]).trim_end()),
            None => Ok(()),
        }
    }
}

/// Runs [`EvalJob`]. With `save_load` the optimised model goes beside the evaluated one
/// (model_eval_optimized.onnx); with `int8` TensorRT / MIGraphX run in INT8 mode reading calibration.flatbuffers.
pub fn evaluate_file(job: &EvalJob, progress: &dyn Progress) -> Result<EvalReport> {
    evaluate_questions(job, None, progress)
}

/// [`evaluate_file`] on those of its questions whose id is in `only` (all when `None`): `qdq tune` scores a candidate
/// on the questions whose answers are nearest to flipping first.
pub(crate) fn evaluate_questions(
    job: &EvalJob,
    only: Option<&std::collections::HashSet<String>>,
    progress: &dyn Progress,
) -> Result<EvalReport> {
    let job = &EvalJob { model: resolve_model(&job.model)?, ..job.clone() };
    if let Some(p) = &job.predictions {
        crate::check_writable(p, "--predictions")?;
    }
    let data_cfg = job.data.config(&job.model)?;
    let tokenizer = data_cfg.tokenizer()?;
    // The graph is enough for the checks; ONNX Runtime reads the file itself, with any external data (a model over
    // 2 GiB cannot be serialized inline, and none is held twice).
    let model = Model::load_graph_only(&job.model)?;
    let mut data = Corpus::load(&job.dataset, &data_cfg, &tokenizer, job.samples)?;
    if let Some(ids) = only {
        data = data.restricted(ids)?;
    }
    data.fit_model(&model, &job.model)?;
    drop(model);
    let source = ModelSource::File(&job.model);
    let model_dir = job.model.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut session = job.runtime.fp32_session(Some(model_dir), "eval");
    if let Some(p) = &session.optimized_model_path {
        progress.note(&format!("the model as optimised by ONNX Runtime goes to {}", p.display()));
    }
    if job.runtime.int8 {
        session = job.runtime.int8_session(&session, Path::new("calibration.flatbuffers"));
    }
    let opts = EvalOptions { batch: job.batch, session, warmup: job.runtime.warmup, workers: job.workers };
    let evaluation = evaluate(source, &job.model.display().to_string(), &data, &opts, "evaluating", progress)?;
    if let Some(p) = &job.predictions {
        write_predictions(p, &evaluation.predictions)?;
    }
    let op_profile = if job.profile_ops { Some(profile_first_features(&job.model, &data, &opts)?) } else { None };
    Ok(EvalReport { model: job.model.clone(), evaluation, op_profile })
}

/// The [`crate::OpProfile`] of `model` on the first batches of `data` (at most [`crate::speed::FEATURES`] features, at
/// least one batch).
fn profile_first_features(model: &Path, data: &Corpus, opts: &EvalOptions) -> Result<crate::OpProfile> {
    // Enough batches for FEATURES features (each holds at least one).
    let batches: Vec<squad::Batch> =
        data.batches(opts.batch)?.take(crate::speed::FEATURES).collect::<std::result::Result<_, _>>()?;
    crate::speed::profile_batches(
        model,
        &opts.session,
        crate::speed::leading(&batches, crate::speed::FEATURES),
        data.io(),
    )
}

/// `qdq e2e`: calibrate, quantize, evaluate FP32 and INT8, everything into `out`.
#[derive(Debug, Clone)]
pub struct E2eJob {
    pub model: PathBuf,
    /// Default: squad/dev-v<version>.json.
    pub dataset: Option<PathBuf>,
    pub out: PathBuf,
    pub samples: usize,
    pub batch: usize,
    pub no_eval: bool,
    /// Profile both models after the speed comparison ([`crate::OpProfiles`]).
    pub profile_ops: bool,
    pub data: DataSettings,
    pub calib: CalibSettings,
    pub policy: PolicySettings,
    pub runtime: RuntimeSettings,
    /// The command line, recorded in results.json.
    pub invocation: crate::Invocation,
}

/// What [`e2e_job`] did: the results (as results.json) and where everything went.
#[derive(Debug, Clone)]
pub struct E2eReport {
    pub results: E2eResults,
    pub out: PathBuf,
}

impl fmt::Display for E2eReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.results;
        if r.fp32.is_none() && r.int8.is_none() && r.classification.is_none() {
            writeln!(f, "Quantized (no evaluation: --no-eval)")?;
        } else {
            writeln!(f, "{}", self.results.table())?;
        }
        write!(f, "Outputs written to {}", self.out.display())
    }
}

impl Report for E2eReport {
    /// results.json's fields, with the schema (`qdq.e2e/1`) and the output directory.
    fn json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(&self.results).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.insert("schema".into(), "qdq.e2e/1".into());
            m.insert("out".into(), serde_json::json!(self.out));
        }
        v
    }
}

/// Runs [`E2eJob`]. Every EP is checked against the loaded ONNX Runtime before any work.
pub fn e2e_job(job: &E2eJob, progress: &dyn Progress) -> Result<E2eReport> {
    let job = &E2eJob { model: resolve_model(&job.model)?, ..job.clone() };
    let dataset = job.dataset.clone().unwrap_or_else(|| PathBuf::from(format!("squad/dev-v{}.json", job.data.version)));
    let fp32 = job.runtime.fp32_session(Some(&job.out), "fp32");
    let mut int8 = job.runtime.int8_session(&fp32, &job.out.join("calibration.flatbuffers"));
    if job.runtime.save_load {
        int8.optimized_model_path = Some(job.out.join("model_int8_optimized.onnx"));
    }
    if job.runtime.int8 && matches!(int8.ep, Ep::Cpu) {
        progress.note(
            "--int8 has no extra effect on cpu: ONNX Runtime runs the QDQ model with integer kernels where it fuses them",
        );
    }
    for s in [&fp32, &int8] {
        s.check_available()?;
    }
    let (policy, choice) = job.policy.policy(&job.runtime.ep)?;
    tracing::info!("{choice}");
    if job.policy.mode == Mode::Dynamic && !matches!(job.runtime.ep, Ep::Cpu) {
        progress
            .note("--mode dynamic writes ONNX Runtime's CPU integer ops; other EPs run them on the CPU or not at all");
    }
    let cfg = E2eConfig {
        model: job.model.clone(),
        calibration_data: job.calib.calibration_data.clone().unwrap_or_else(|| dataset.clone()),
        dataset,
        out: job.out.clone(),
        data: job.data.config(&job.model)?,
        samples: job.samples,
        cal_num: job.calib.cal_num,
        calibrate: job.calib.options(job.batch, &fp32)?,
        policy,
        policy_choice: choice,
        mode: job.policy.mode,
        invocation: job.invocation.clone(),
        eval: EvalOptions { batch: job.batch, session: fp32, warmup: job.runtime.warmup, workers: 1 },
        no_eval: job.no_eval,
        profile_ops: job.profile_ops,
    };
    Ok(E2eReport { results: e2e(&cfg, &int8, progress)?, out: job.out.clone() })
}

/// Everything `qdq inspect` reports of a model.
#[derive(Debug, Clone)]
pub struct Inspection {
    pub path: PathBuf,
    pub ir_version: i64,
    pub opset: Option<i64>,
    pub producer: (String, String),
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub nodes: usize,
    pub initializers: usize,
    pub parameters: usize,
    pub smoothing: Option<String>,
    pub counts: qdq::QdqCounts,
    pub coverage: qdq::Coverage,
}

/// Reads the model at `path` and summarises it.
pub fn inspect(path: &Path) -> Result<Inspection> {
    let path = &resolve_model(path)?;
    let model = Model::load_graph_only(path)?;
    let g = model.graph();
    let names = |v: &[onnx_ir::proto::ValueInfoProto]| v.iter().map(|v| v.name().to_owned()).collect::<Vec<_>>();
    Ok(Inspection {
        path: path.to_path_buf(),
        ir_version: model.proto.ir_version(),
        opset: model.opset(""),
        producer: (model.proto.producer_name().to_owned(), model.proto.producer_version().to_owned()),
        inputs: names(&g.input),
        outputs: names(&g.output),
        nodes: g.node.len(),
        initializers: g.initializer.len(),
        parameters: g.initializer.iter().map(|t| t.dims.iter().product::<i64>().max(0) as usize).sum(),
        smoothing: qdq::smoothing_record(&model).map(str::to_owned),
        counts: qdq::QdqCounts::of(&model),
        coverage: qdq::coverage(&model),
    })
}

impl Inspection {
    /// The JSON document of `qdq inspect --json`.
    pub fn json(&self) -> serde_json::Value {
        let ranges: std::collections::BTreeMap<_, _> =
            self.coverage.pairs.iter().filter_map(|p| p.range().map(|r| (p.tensor.clone(), [r.0, r.1]))).collect();
        serde_json::json!({
            "schema": "qdq.inspect/1",
            "model": self.path,
            "ir_version": self.ir_version,
            "opset": self.opset,
            "producer": format!("{} {}", self.producer.0, self.producer.1).trim(),
            "inputs": self.inputs,
            "outputs": self.outputs,
            "nodes": self.nodes,
            "initializers": self.initializers,
            "parameters": self.parameters,
            "smoothing": self.smoothing,
            "coverage": self.coverage,
            "ranges": ranges,
        })
    }

    /// The text of `qdq inspect` (`with_ranges`: every pair's range instead of the per-op table).
    pub fn text(&self, with_ranges: bool) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let opset = self.opset.map_or("?".into(), |v| v.to_string());
        let _ = writeln!(s, "{}", self.path.display());
        let _ =
            writeln!(s, "  IR {} | opset {opset} | producer {} {}", self.ir_version, self.producer.0, self.producer.1);
        let _ = writeln!(s, "  inputs:  {}", self.inputs.join(", "));
        let _ = writeln!(s, "  outputs: {}", self.outputs.join(", "));
        let _ =
            writeln!(s, "  {} nodes, {} initializers, {} parameters", self.nodes, self.initializers, self.parameters);
        if let Some(r) = &self.smoothing {
            let _ = writeln!(s, "  smoothed MatMul inputs (SmoothQuant-style): {r}");
        }
        let _ = writeln!(s);
        let (q, dq) = (self.counts.quantize, self.counts.dequantize);
        let _ = writeln!(s, "Q/DQ: {q} QuantizeLinear, {dq} DequantizeLinear");
        if with_ranges {
            let _ = writeln!(s, "{}", self.coverage);
            let _ = writeln!(s, "Ranges encoded by per-tensor pairs (tensor: [min, max]):");
            for p in &self.coverage.pairs {
                if let Some((lo, hi)) = p.range() {
                    let _ = writeln!(s, "  {}: [{lo:.6}, {hi:.6}]", p.tensor);
                }
            }
        } else {
            let _ = writeln!(s, "{:<24} {:>6} {:>10}", "op type", "nodes", "behind DQ");
            for (op, c) in &self.coverage.by_op {
                let _ = writeln!(s, "{op:<24} {:>6} {:>10}", c.nodes, c.covered);
            }
            if dq > 0 {
                let float = crate::report::float_summary(&self.coverage.float_matmul_like);
                if !float.is_empty() {
                    let _ = writeln!(s, "MatMul-like work left in float: {float} (--ranges lists the nodes)");
                }
                let _ = writeln!(s, "(--ranges lists every pair with its scale and range)");
            }
        }
        s
    }
}
