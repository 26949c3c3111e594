//! The whole e2e run: calibrate -> quantize -> evaluate FP32 and INT8 -> output directory.

use std::path::{Path, PathBuf};
use std::time::Instant;

use onnx_ir::Model;
use runtime::SessionConfig;

use crate::commands::e2e::config::{E2eConfig, Phases, settings};
use crate::commands::e2e::profile::profile_both;
use crate::commands::e2e::quantize::precision_name;
use crate::commands::e2e::quantize::{Quantized, quantize_dynamic, quantize_static};
use crate::disk::{finish_run_dir, open_run_dir};
use crate::error::{Error, Result};
use crate::inputs::feeds::Feeds;
use crate::inputs::files::TextInputs;
use crate::model::{carry_tokenizer, load_for_quantization, record_target_cpu, save_model};
use crate::progress::Progress;
use crate::provenance::{Machine, Provenance, onnxruntime};
use crate::report::results::{
    CalibrationSummary, ComparedMethod, ComparedPrecision, E2eResults, OVERLAP_EFFECT, QuantizationSummary,
};
use crate::settings::policy::Mode;
use crate::tasks::{E2eRun, OtherPrecision, Side, Task, TaskData, precision_label};

/// Runs the whole job. `int8_session` is the INT8 leg's session settings. What the model is evaluated on follows
/// its [`Task`]: a classifier on `.npz` / `.npy` / text / JSONL inputs ([`InputSet`]), compared with FP32
/// ([`evaluate_classifier`]); an embedding model on texts ([`evaluate_embeddings`]).
pub fn e2e(cfg: &E2eConfig, int8_session: &SessionConfig, progress: &dyn Progress) -> Result<E2eResults> {
    let run = open_run_dir(&cfg.out, "--out", "qdq e2e")?;
    let started = Instant::now();
    let mut phases = Phases::new();
    let model = load_for_quantization(&cfg.model)?;
    let task = Task::detect(&model, &cfg.model, &cfg.data)?;
    if let Some(d) = task.describe() {
        tracing::info!("{d}");
    }
    let settled = cfg.for_task(&task)?;
    let cfg = settled.as_ref().unwrap_or(cfg);
    if !task.on_several_eps() && !cfg.other_eps.is_empty() {
        return Err(Error::Usage(format!(
            "--ep with several EPs evaluates SQuAD models on each; a {} model is evaluated on the first: give one --ep \
             (and `qdq eval --ep <other> --baseline` for another)",
            task.name()
        )));
    }
    let (eval_data, cal_data) = prepare(cfg, &model, &task)?;
    // 1. calibrate and 2. quantize (or quantize dynamically: no calibration)
    let Quantized { model: mut qmodel, mut calibration, quantization, compared, precisions } =
        match (cfg.mode, &cal_data) {
            // The model is smoothed and quantized in place (a model of gigabytes is not held twice); FP32 is evaluated
            // from its file.
            (Mode::Static, Some(cal)) => {
                quantize_static(cfg, model, cal.as_ref(), task.shifted_output(), progress, &mut phases)?
            }
            _ => quantize_dynamic(cfg, &model, &mut phases)?,
        };
    if let Some(c) = calibration.as_mut() {
        c.unit = task.unit().to_owned();
        say_overlap(cfg, c, eval_data.as_deref(), task.unit());
    }
    let qpath = write_model(cfg, &mut qmodel)?;
    // Both models are evaluated from their files (ONNX Runtime reads a model over 2 GiB with its side file).
    drop(qmodel);
    let mut results = unevaluated(cfg, &task, calibration, quantization, &compared);
    results.compared_precisions = precisions
        .into_iter()
        .map(|p| ComparedPrecision {
            precision: p.precision,
            method: p.method,
            model: p.path.display().to_string(),
            pairs: p.pairs,
        })
        .collect();
    // 3. evaluate
    if let Some(data) = eval_data.as_deref() {
        let on = Evaluated { qpath: &qpath, int8_session, compared: &compared };
        evaluate_task(cfg, data, &on, &mut results, progress, &mut phases)?;
    }
    phases.insert("total".to_owned(), started.elapsed().as_secs_f64());
    results.provenance = provenance(cfg, int8_session, phases);
    results.write(&cfg.out)?;
    finish_run_dir(run)?;
    Ok(results)
}

/// `qmodel` written to `--out` as model_qdq.onnx (the kind of CPU it was laid out for recorded in it), with the
/// tokenizer and the source folder's files (config.json, a sentence-transformers folder's modules), so the output
/// loads where the source does; its path.
fn write_model(cfg: &E2eConfig, qmodel: &mut Model) -> Result<PathBuf> {
    let qpath = cfg.out.join("model_qdq.onnx");
    record_target_cpu(qmodel, cfg.policy_choice.target_cpu);
    save_model(qmodel, &qpath)?;
    carry_tokenizer(&cfg.data.tokenizer_files(), &cfg.out)?;
    cfg.data.folder.carry_to(&cfg.out)?;
    Ok(qpath)
}

/// The models of the run's evaluation: the quantized one with its session, and `--compare-methods`' others.
struct Evaluated<'a> {
    qpath: &'a Path,
    int8_session: &'a SessionConfig,
    compared: &'a [(String, PathBuf)],
}

/// FP32 against the quantized model(s) in the task's measures ([`TaskData::e2e`]), into `results`; then, with
/// `--profile-ops`, where each one's time goes.
fn evaluate_task(
    cfg: &E2eConfig,
    data: &dyn TaskData,
    on: &Evaluated,
    results: &mut E2eResults,
    progress: &dyn Progress,
    phases: &mut Phases,
) -> Result<()> {
    let Evaluated { qpath, int8_session, compared } = *on;
    let label = precision_label(&precision_name(&cfg.policy));
    let run = E2eRun {
        fp32: Side { path: &cfg.model, session: &cfg.eval.session },
        int8: Side { path: qpath, session: int8_session },
        eval: &cfg.eval,
        out: &cfg.out,
        label: &label,
        compared,
        precisions: results
            .compared_precisions
            .iter()
            .map(|c| OtherPrecision {
                precision: c.precision.clone(),
                method: c.method.clone(),
                label: precision_label(&c.precision),
                path: PathBuf::from(&c.model),
            })
            .collect(),
        other_eps: cfg.other_eps.iter().map(|o| (&o.fp32, &o.int8)).collect(),
        seq_len: cfg.data.features.max_seq_len,
        fixed_batch: cfg.data.fixed_batch,
    };
    results.result = Some(data.e2e(&run, progress, phases)?);
    let profile = |m: &Path, s: &SessionConfig| data.profile(m, s, cfg.eval.batch);
    profile_both(cfg, (qpath, int8_session), results, phases, progress, profile)
}

/// The results before evaluation: what was calibrated and quantized.
fn unevaluated(
    cfg: &E2eConfig,
    task: &Task,
    calibration: Option<CalibrationSummary>,
    quantization: QuantizationSummary,
    compared: &[(String, PathBuf)],
) -> E2eResults {
    E2eResults {
        qdq_version: env!("CARGO_PKG_VERSION").to_owned(),
        dataset: cfg.dataset.display().to_string(),
        task: task.name().to_owned(),
        loader: task.loader(),
        calibration,
        quantization,
        result: None,
        compared_methods: compared
            .iter()
            .map(|(method, path)| ComparedMethod { method: method.clone(), model: path.display().to_string() })
            .collect(),
        compared_precisions: vec![],
        op_profile: None,
        provenance: Provenance::default(),
    }
}

/// How the run was made: the build, the command line, ONNX Runtime, both sessions, every setting, the machine.
fn provenance(cfg: &E2eConfig, int8_session: &SessionConfig, phases: Phases) -> Provenance {
    Provenance {
        qdq_version: env!("CARGO_PKG_VERSION").to_owned(),
        git_commit: cfg.invocation.git_commit().to_owned(),
        command_line: cfg.invocation.command_line.clone(),
        onnxruntime: onnxruntime(cfg.eval.session.library.as_deref()),
        sessions: [("fp32", &cfg.eval.session), ("int8", int8_session)]
            .into_iter()
            .map(|(k, s)| (k.to_owned(), format!("{s:?}")))
            .collect(),
        settings: settings(cfg),
        machine: Machine::this(),
        phase_seconds: phases,
    }
}

/// Counts the calibration questions (or inputs, texts) that are also evaluated into `c`, and warns when there are
/// any.
fn say_overlap(cfg: &E2eConfig, c: &mut CalibrationSummary, eval_data: Option<&dyn TaskData>, unit: &str) {
    let same_file = files_are_one(&cfg.dataset, &cfg.calibration_data);
    c.also_evaluated = match eval_data {
        Some(data) => data.calibration_overlap(&cfg.calibration_data, c.questions, same_file),
        None => None,
    };
    if let Some(n) = c.also_evaluated.filter(|&n| n > 0) {
        let default = if same_file { " (--calibration-data is --dataset)" } else { "" };
        tracing::warn!("{n} of the {} calibration {unit} are also evaluated{default}: {OVERLAP_EFFECT}", c.questions);
    }
}

/// What the model is evaluated on (unless `--no-eval`) and calibrated with (static mode).
type Prepared = (Option<Box<dyn TaskData>>, Option<Box<dyn Feeds>>);

/// The evaluation set as the task reads it (SQuAD questions checked against the model; a classifier's inputs; an
/// embedding model's texts, through the model's tokenizer and input roles) and the calibration data
/// ([`Task::calibration_feeds`]). The tokenizer is loaded once for both.
fn prepare(cfg: &E2eConfig, model: &Model, task: &Task) -> Result<Prepared> {
    let text = TextInputs::for_model(model, &cfg.model, &cfg.data);
    let eval_data = match cfg.no_eval {
        true => None,
        false => Some(task.eval_data((model, &cfg.model), &cfg.dataset, cfg.samples, &cfg.data, &text)?),
    };
    let cal = match cfg.mode {
        Mode::Static => {
            let n = cfg.cal_num.unwrap_or(task.default_cal_num());
            Some(task.calibration_feeds((model, &cfg.model), &cfg.calibration_data, n, &cfg.data, &text)?)
        }
        Mode::Dynamic => None,
    };
    Ok((eval_data, cal))
}

/// Whether `a` and `b` name one file (the same path, or both resolve to one).
fn files_are_one(a: &Path, b: &Path) -> bool {
    a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}
