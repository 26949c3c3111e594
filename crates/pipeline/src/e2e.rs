//! The whole job: calibrate → quantize → evaluate FP32 and INT8 → output directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use onnx_ir::Model;
use runtime::{ModelSource, SessionConfig};
use serde_json::{Value, json};

use crate::calibrate::{CalibrateOptions, calibrate, smooth_model, write_tables};
use crate::classify::{Side, evaluate_classifier};
use crate::data::{Corpus, DataConfig};
use crate::evaluate::{EvalOptions, Evaluation, evaluate};
use crate::inputs::{Feeds, InputSet, TextInputs, load_feeds};
use crate::provenance::{Invocation, Machine, Provenance};
use crate::report::{
    CalibrationSummary, ComparedMethod, E2eResults, ModelResult, OpProfiles, QuantizationSummary, op_table,
};
use crate::settings::{Mode, PolicyChoice};
use crate::speed::{self, PairedTiming};
use crate::{Progress, Result, write_predictions};

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
    /// Calibration questions.
    pub cal_num: usize,
    pub calibrate: CalibrateOptions,
    pub policy: qdq::Policy,
    /// Which preset `policy` started from, and why.
    pub policy_choice: PolicyChoice,
    /// Static (calibrated) or dynamic (no calibration; `calibration_data` and `calibrate` unused).
    pub mode: Mode,
    /// The command line, for results.json's provenance.
    pub invocation: Invocation,
    /// Session settings of the FP32 evaluation; the INT8 one is passed to [`e2e`] (see
    /// [`crate::RuntimeSettings::int8_session`]).
    pub eval: EvalOptions,
    pub no_eval: bool,
    /// Also profile both models on the speed comparison's features ([`crate::OpProfiles`]).
    pub profile_ops: bool,
}

fn model_result(e: &Evaluation, model: &Path, bytes: u64) -> ModelResult {
    ModelResult {
        model: model.display().to_string(),
        model_bytes: bytes,
        ep: e.ep.clone(),
        score: e.score.clone(),
        latency: e.latency.clone(),
    }
}

/// What the model is evaluated on: SQuAD questions (start / end logits), or inputs of another task (class logits).
enum EvalData {
    Squad(Box<Corpus>),
    Classify(InputSet, String),
}

/// Runs the whole job. `int8_session` is the INT8 leg's session settings. A model without start / end logits (a
/// classifier) is calibrated and evaluated on `.npz` / `.npy` / text / JSONL inputs ([`InputSet`]) and compared with
/// FP32 ([`crate::classify`]).
pub fn e2e(cfg: &E2eConfig, int8_session: &SessionConfig, progress: &dyn Progress) -> Result<E2eResults> {
    crate::create_out_dir(&cfg.out, "--out")?;
    let started = Instant::now();
    let mut phases = BTreeMap::new();
    let model = crate::load_for_quantization(&cfg.model)?;
    let squad = crate::data::is_squad_model(&model, &cfg.data.io_names);
    let (eval_data, cal_data) = prepare(cfg, &model, squad)?;
    // 1. calibrate and 2. quantize (or quantize dynamically: no calibration)
    let Quantized { model: qmodel, mut calibration, quantization, compared } = match (cfg.mode, &cal_data) {
        // The model is smoothed and quantized in place (a model of gigabytes is not held twice); FP32 is evaluated
        // from its file.
        (Mode::Static, Some(cal)) => quantize_static(cfg, model, cal.as_ref(), progress, &mut phases)?,
        _ => quantize_dynamic(cfg, &model, &mut phases)?,
    };
    if let Some(c) = calibration.as_mut() {
        let same_file = files_are_one(&cfg.dataset, &cfg.calibration_data);
        c.also_evaluated = match &eval_data {
            Some(EvalData::Squad(evaluated)) => calibration_overlap(evaluated, &cfg.calibration_data, cfg.cal_num),
            // Inputs of a file have no ids: both take the first rows of one file, so the shorter run is all shared.
            Some(EvalData::Classify(set, _)) if same_file => Some(c.questions.min(set.len())),
            _ => None,
        };
        if let Some(n) = c.also_evaluated.filter(|&n| n > 0) {
            let unit = if squad { "questions" } else { "inputs" };
            let default = if same_file { " (--calibration-data is --dataset)" } else { "" };
            tracing::warn!(
                "{n} of the {} calibration {unit} are also evaluated{default}: {}",
                c.questions,
                crate::report::OVERLAP_EFFECT
            );
        }
    }
    let qpath = cfg.out.join("model_qdq.onnx");
    crate::save_model(&qmodel, &qpath)?;
    // Both models are evaluated from their files (ONNX Runtime reads a model over 2 GiB with its side file).
    drop(qmodel);

    let mut results = E2eResults {
        qdq_version: env!("CARGO_PKG_VERSION").to_owned(),
        dataset: cfg.dataset.display().to_string(),
        task: if squad { "squad" } else { "classification" }.to_owned(),
        calibration,
        quantization,
        fp32: None,
        int8: None,
        classification: None,
        compared_methods: compared
            .iter()
            .map(|(method, path)| ComparedMethod {
                method: method.clone(),
                model: path.display().to_string(),
                int8: None,
            })
            .collect(),
        speedup: None,
        op_profile: None,
        provenance: Provenance::default(),
    };

    // 3. evaluate
    match &eval_data {
        Some(EvalData::Squad(data)) => {
            evaluate_squad(cfg, &qpath, data, int8_session, &compared, &mut results, progress, &mut phases)?;
        }
        Some(EvalData::Classify(set, output)) => {
            let t = Instant::now();
            let fp32 = Side { path: &cfg.model, session: &cfg.eval.session };
            let int8 = Side { path: &qpath, session: int8_session };
            results.classification = Some(evaluate_classifier(fp32, int8, set, output, &cfg.eval, progress)?);
            phases.insert("evaluation".to_owned(), t.elapsed().as_secs_f64());
            let profile = |m: &Path, s: &SessionConfig| profile_inputs(m, s, cfg.eval.batch, set, output);
            profile_both(cfg, (&qpath, int8_session), &mut results, &mut phases, progress, profile)?;
        }
        None => {}
    }
    phases.insert("total".to_owned(), started.elapsed().as_secs_f64());
    results.provenance = Provenance {
        qdq_version: env!("CARGO_PKG_VERSION").to_owned(),
        git_commit: crate::GIT_COMMIT.to_owned(),
        command_line: cfg.invocation.command_line.clone(),
        onnxruntime: crate::provenance::onnxruntime(cfg.eval.session.library.as_deref()),
        sessions: [("fp32", &cfg.eval.session), ("int8", int8_session)]
            .into_iter()
            .map(|(k, s)| (k.to_owned(), format!("{s:?}")))
            .collect(),
        settings: settings(cfg),
        machine: Machine::this(),
        phase_seconds: phases,
    };
    results.write(&cfg.out)?;
    Ok(results)
}

/// `--profile-ops` (else nothing): FP32 (`cfg.model` on its session) and INT8 (`int8`: the model and its session)
/// each profiled by `profile`, shown, and kept in `results`.
fn profile_both(
    cfg: &E2eConfig,
    int8: (&Path, &SessionConfig),
    results: &mut E2eResults,
    phases: &mut BTreeMap<String, f64>,
    progress: &dyn Progress,
    profile: impl Fn(&Path, &SessionConfig) -> Result<crate::OpProfile>,
) -> Result<()> {
    if !cfg.profile_ops {
        return Ok(());
    }
    let t = Instant::now();
    let p = OpProfiles { fp32: profile(&cfg.model, &cfg.eval.session)?, int8: profile(int8.0, int8.1)? };
    progress.note(&format!("Where the time goes:\n{}", op_table(&[("FP32", &p.fp32), ("INT8", &p.int8)])));
    results.op_profile = Some(p);
    phases.insert("op_profile".to_owned(), t.elapsed().as_secs_f64());
    Ok(())
}

/// The [`crate::OpProfile`] of a classifier `model` (on `session`) on the first inputs of `set` (at most
/// [`speed::FEATURES`], in batches of `batch`), reading `output`.
fn profile_inputs(
    model: &Path,
    session: &SessionConfig,
    batch: usize,
    set: &InputSet,
    output: &str,
) -> Result<crate::OpProfile> {
    let n = set.len().min(speed::FEATURES);
    let batch = batch.max(1);
    let batches: Vec<_> = (0..n).step_by(batch).map(|i| set.batch(i..(i + batch).min(n))).collect();
    speed::profile_ops(model, session, &[], (batches.len(), n), |s| {
        batches.iter().try_for_each(|b| {
            let feeds: Vec<(&str, ndarray::ArrayView2<i64>)> = b.iter().map(|(k, a)| (k.as_str(), a.view())).collect();
            s.run_with(&feeds, &[output], |_| Ok::<_, crate::Error>(()))
        })
    })
}

/// What the model is evaluated on (unless `--no-eval`) and calibrated with (static mode).
type Prepared = (Option<EvalData>, Option<Box<dyn Feeds>>);

/// The evaluation set (SQuAD questions checked against the model; for a model without start / end logits, inputs
/// from `.npz` / `.npy` / text / JSONL, text through the model's tokenizer and input roles) and the calibration data
/// ([`load_feeds`]). The tokenizer is loaded once for both.
fn prepare(cfg: &E2eConfig, model: &Model, squad: bool) -> Result<Prepared> {
    let text = TextInputs::for_model(model, &cfg.model, &cfg.data);
    let eval_data = match (cfg.no_eval, squad) {
        (true, _) => None,
        (false, true) => {
            let mut d = Corpus::load(&cfg.dataset, &cfg.data, text.loaded_tokenizer()?, cfg.samples)?;
            d.fit_model(model, &cfg.model)?;
            Some(EvalData::Squad(Box::new(d)))
        }
        (false, false) => {
            let output = crate::classify::logits_output(model, &cfg.data.io_names, &cfg.model)?;
            tracing::info!("no start / end logits: evaluating `{output}` as class logits, INT8 against FP32");
            Some(EvalData::Classify(InputSet::load(&cfg.dataset, model, &text, cfg.samples)?, output))
        }
    };
    let cal = match cfg.mode {
        Mode::Static => Some(load_feeds(model, &cfg.model, &cfg.calibration_data, cfg.cal_num, &cfg.data, &text)?),
        Mode::Dynamic => None,
    };
    Ok((eval_data, cal))
}

/// How many of the first `cal_num` questions of `calibration` are among the `evaluated` ones, by question id; `None`
/// unless `calibration` reads as a SQuAD dataset.
fn calibration_overlap(evaluated: &Corpus, calibration: &Path, cal_num: usize) -> Option<usize> {
    let all = squad_metrics::load_dataset(calibration).ok()?;
    let calibrated = if cal_num == 0 { all } else { all.first_n(cal_num) };
    let evaluated: std::collections::HashSet<&str> = evaluated.question_ids().collect();
    Some(calibrated.questions().filter(|q| evaluated.contains(q.id.as_str())).count())
}

/// Whether `a` and `b` name one file (the same path, or both resolve to one).
fn files_are_one(a: &Path, b: &Path) -> bool {
    a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

/// FP32 and INT8 (and `--compare-methods`' models) on SQuAD: predictions files and `results.fp32` / `int8`.
#[allow(clippy::too_many_arguments)]
fn evaluate_squad(
    cfg: &E2eConfig,
    qpath: &Path,
    data: &Corpus,
    int8_session: &SessionConfig,
    compared: &[(String, PathBuf)],
    results: &mut E2eResults,
    progress: &dyn Progress,
    phases: &mut BTreeMap<String, f64>,
) -> Result<()> {
    let t = Instant::now();
    let fp32 =
        evaluate(ModelSource::File(&cfg.model), &cfg.model.display().to_string(), data, &cfg.eval, "FP32", progress)?;
    phases.insert("fp32_eval".to_owned(), t.elapsed().as_secs_f64());
    write_predictions(&cfg.out.join("predictions_fp32.json"), &fp32.predictions)?;
    results.fp32 = Some(model_result(&fp32, &cfg.model, crate::model_size(&cfg.model)));
    let int8_opts = EvalOptions { session: int8_session.clone(), ..cfg.eval.clone() };
    let t = Instant::now();
    let int8 = evaluate(ModelSource::File(qpath), &qpath.display().to_string(), data, &int8_opts, "INT8", progress)?;
    phases.insert("int8_eval".to_owned(), t.elapsed().as_secs_f64());
    write_predictions(&cfg.out.join("predictions_int8.json"), &int8.predictions)?;
    results.int8 = Some(model_result(&int8, qpath, crate::model_size(qpath)));
    // The two evaluations are minutes apart: the speed comparison runs both on the same features in turn.
    let t = Instant::now();
    // Enough batches for speed::FEATURES features (each holds at least one); PairedTiming takes the first of them.
    let batches: Vec<squad::Batch> =
        data.batches(cfg.eval.batch)?.take(speed::FEATURES).collect::<std::result::Result<_, _>>()?;
    if !batches.is_empty() {
        let timing =
            PairedTiming::new(&cfg.model, &cfg.eval.session, &batches, data.io(), speed::FEATURES, speed::ROUNDS)?;
        let s = timing.against(qpath, int8_session)?;
        progress.note(&format!("INT8 against FP32, in alternation on {} features: {}", s.features, s.describe()));
        results.speedup = Some(s);
        phases.insert("speed".to_owned(), t.elapsed().as_secs_f64());
        profile_both(cfg, (qpath, int8_session), results, phases, progress, |m, s| timing.profile(m, s))?;
    }
    // --compare-methods: each other method's model, evaluated the same way.
    let t = Instant::now();
    for (c, (method, path)) in results.compared_methods.iter_mut().zip(compared) {
        let label = format!("INT8 {method}");
        let r = evaluate(ModelSource::File(path), &path.display().to_string(), data, &int8_opts, &label, progress)?;
        write_predictions(&cfg.out.join(format!("predictions_int8_{method}.json")), &r.predictions)?;
        c.int8 = Some(model_result(&r, path, crate::model_size(path)));
    }
    if !compared.is_empty() {
        phases.insert("compared_methods_eval".to_owned(), t.elapsed().as_secs_f64());
    }
    Ok(())
}

/// Smoothing (when the policy asks for it: the ranges are those of the smoothed model), calibration, the tables,
/// then Q/DQ placement, all on `model` itself. FP32 is evaluated on the original model's file, not the (equivalent in
/// exact arithmetic) smoothed one.
fn quantize_static(
    cfg: &E2eConfig,
    model: Model,
    cal_data: &dyn Feeds,
    progress: &dyn Progress,
    phases: &mut BTreeMap<String, f64>,
) -> Result<Quantized> {
    let t = Instant::now();
    let (to_quantize, smoothing) = smooth_model(model, &cfg.policy, cal_data, &cfg.calibrate, progress)?;
    if let Some(s) = &smoothing {
        progress.note(&s.describe());
    }
    let tensors = qdq::tensors_to_calibrate(&to_quantize, &cfg.policy)?;
    let cal = calibrate(&to_quantize, &tensors, cal_data, &cfg.calibrate, progress)?;
    write_tables(&cal, &cfg.out)?;
    let non_finite: Vec<String> =
        cal.state.non_finite().into_iter().filter(|(_, c)| c.nan + c.pos_inf + c.neg_inf > 0).map(|(t, _)| t).collect();
    phases.insert("smoothing_and_calibration".to_owned(), t.elapsed().as_secs_f64());
    let t = Instant::now();
    let main = &cal.tables[0];
    // --compare-methods: the same placement with each other method's ranges, saved for evaluation (before the main
    // placement changes the model).
    let mut compared = vec![];
    for table in &cal.tables[1..] {
        let (m, _) = qdq::quantize(&to_quantize, &table.min_max(), &cfg.policy)?;
        let path = cfg.out.join(format!("model_qdq_{}.onnx", table.method));
        crate::save_model(&m, &path)?;
        compared.push((table.method.clone(), path));
    }
    let plan = qdq::plan(&to_quantize, &main.min_max(), &cfg.policy)?;
    let mut qmodel = to_quantize;
    plan.apply(&mut qmodel)?;
    phases.insert("quantization".to_owned(), t.elapsed().as_secs_f64());
    let calibration = CalibrationSummary {
        data: cfg.calibration_data.display().to_string(),
        questions: cal.questions,
        features: cal.features,
        tensors: cal.tensors.len(),
        method: main.method.clone(),
        seconds: cal.seconds,
        pass: Some(cal.times),
        non_finite_tensors: non_finite,
        also_evaluated: None,
    };
    let quantization = QuantizationSummary {
        quantized_tensors: plan.tensors.len(),
        embedding_tables: plan.embeddings.len(),
        integer_forms: plan.integer_forms(),
        smoothing: smoothing.as_ref().map(|s| s.describe()),
        skipped: plan.skipped.iter().map(|s| format!("{}: {}", s.tensor, s.reason)).collect(),
        ..summary_base(cfg, &qmodel)
    };
    Ok(Quantized { model: qmodel, calibration: Some(calibration), quantization, compared })
}

/// [`qdq::quantize_dynamic`]: no calibration, so no tables and no smoothing.
fn quantize_dynamic(cfg: &E2eConfig, model: &Model, phases: &mut BTreeMap<String, f64>) -> Result<Quantized> {
    let t = Instant::now();
    let (qmodel, plan) = qdq::quantize_dynamic(model, &cfg.policy)?;
    phases.insert("quantization".to_owned(), t.elapsed().as_secs_f64());
    tracing::info!("{}", plan.to_string().lines().next().unwrap_or_default());
    let quantization = QuantizationSummary {
        quantized_tensors: plan.matmuls.len(),
        embedding_tables: plan.embeddings.len(),
        integer_forms: plan.contrib.lines(),
        ..summary_base(cfg, &qmodel)
    };
    Ok(Quantized { model: qmodel, calibration: None, quantization, compared: vec![] })
}

/// What the quantization step made: the INT8 model, its summaries, and the models of `--compare-methods` (method,
/// file).
struct Quantized {
    model: Model,
    calibration: Option<CalibrationSummary>,
    quantization: QuantizationSummary,
    compared: Vec<(String, PathBuf)>,
}

/// The MatMul-like work the quantized model still does in float, said once in the log (and kept for results.json).
fn float_work(qmodel: &Model) -> Vec<String> {
    let nodes = qdq::coverage(qmodel).float_matmul_like;
    if !nodes.is_empty() {
        tracing::warn!(
            "MatMul-like work left in float: {} (report.md and results.json list the nodes)",
            crate::report::float_summary(&nodes)
        );
    }
    nodes.iter().map(ToString::to_string).collect()
}

/// What every quantization summary says of `qmodel`: mode, preset, Q/DQ counts and the MatMul-like work left in float.
fn summary_base(cfg: &E2eConfig, qmodel: &Model) -> QuantizationSummary {
    let counts = qdq::QdqCounts::of(qmodel);
    QuantizationSummary {
        mode: cfg.mode,
        policy: cfg.policy_choice.preset.clone(),
        policy_chosen_by: cfg.policy_choice.chosen_by.clone(),
        quantized_tensors: 0,
        quantize_nodes: counts.quantize,
        dequantize_nodes: counts.dequantize,
        embedding_tables: 0,
        float_matmul_like: float_work(qmodel),
        integer_forms: vec![],
        smoothing: None,
        skipped: vec![],
    }
}

/// Every setting of an e2e run, grouped as the CLI groups its flags.
fn settings(cfg: &E2eConfig) -> Value {
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
        "policy": {"mode": cfg.mode, "preset": cfg.policy_choice.preset, "chosen_by": cfg.policy_choice.chosen_by, "options": policy},
        "calibration": {
            "data": cfg.calibration_data, "questions": cfg.cal_num, "batch": cfg.calibrate.batch,
            "num_bins": cfg.calibrate.num_bins, "methods": methods,
            "session": format!("{:?}", cfg.calibrate.session),
        },
        "evaluation": {"batch": cfg.eval.batch, "warmup": cfg.eval.warmup},
    })
}
