//! A SQuAD model's leg of `qdq e2e`: FP32 and the quantized model (and `--compare-methods`' and `--precision`'s
//! others) on SQuAD questions, predictions written, each compared with FP32 by question, timed against FP32 in
//! alternation; with `--ep cpu,openvino` both evaluated again on each other EP and set against the first.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use runtime::{ModelSource, SessionConfig};
use serde::{Deserialize, Serialize};

use crate::disk::write_predictions;
use crate::error::Result;
use crate::model::model_size;
use crate::progress::Progress;
use crate::steps::run::{EvalOptions, Latency};
use crate::steps::speed::{self, AtDefaultPrecision, LogitsAgreement, PairedTiming, Speedup, logits_agreement};
use crate::tasks::default_float::{self, DefaultFloat, Which};
use crate::tasks::squad::data::{Comparison, Corpus, Score};
use crate::tasks::squad::evaluate::{Evaluation, evaluate};
use crate::tasks::{E2eRun, RanOn};

/// One evaluated model in results.json: which model ran where (flattened: the same keys as every task's), its
/// scores and latency.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ModelResult {
    #[serde(flatten)]
    pub ran: RanOn,
    #[serde(flatten)]
    pub score: Score,
    pub latency: Latency,
}

/// The run's FP32 and quantized models on another EP of `--ep`'s list, against the same models on the first.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OtherEp {
    /// The EP as `--ep` named it.
    pub ep: String,
    /// The first EP's name, which the comparisons below are against.
    pub first_ep: String,
    pub fp32: Option<ModelResult>,
    pub int8: Option<ModelResult>,
    /// The quantized model against FP32, both on this EP.
    pub int8_vs_fp32: Comparison,
    /// Each model's answers here against the same model's on the first EP (paired by question).
    pub fp32_vs_first: Comparison,
    pub int8_vs_first: Comparison,
    /// Share of questions answered with the same text as on the first EP (0-1).
    pub fp32_same_answers: f64,
    pub int8_same_answers: f64,
    /// Each model's logits here against the first EP's on the same features (the speed comparison's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp32_logits: Option<LogitsAgreement>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub int8_logits: Option<LogitsAgreement>,
    /// The quantized model against FP32 timed in alternation on this EP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup: Option<Speedup>,
    /// The same with both at this EP's own default float precision, where that is not the run's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup_default_precision: Option<AtDefaultPrecision>,
    /// Both models again at this EP's own default float precision, against FP32's answers on this EP at the run's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_float: Option<DefaultFloat<SquadAt>>,
}

/// What the SQuAD leg of an e2e run measured: results.json's `result` of task `squad`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SquadE2e {
    pub fp32: ModelResult,
    pub int8: ModelResult,
    /// INT8's answers against FP32's on the same questions: dF1 and dEM with their paired 95 % intervals.
    pub int8_vs_fp32: Comparison,
    /// `--compare-methods`' models, in their order, each with its answers against FP32's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compared_methods: Vec<MethodResult>,
    /// `--precision`'s others, in their order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compared_precisions: Vec<PrecisionResult>,
    /// INT8 against FP32 timed in alternation on the first evaluation features.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup: Option<Speedup>,
    /// The same with both models at the EP's own default float precision, where that is not the run's (OpenVINO's
    /// bf16 on a CPU with bf16 matrix instructions, FP16 engines on TensorRT / MIGraphX): the FP32 its users run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup_default_precision: Option<AtDefaultPrecision>,
    /// FP32 and the quantized model again with their float parts at the EP's own default precision, where that is
    /// not the run's: the FP32 its users run, with its answers against FP32's at the run's precision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_float: Option<DefaultFloat<SquadAt>>,
    /// `--ep`'s others (`--ep cpu,openvino`): the same FP32 and quantized models evaluated on each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_eps: Vec<OtherEp>,
}

/// A model at the EP's default float precision: its scores, and its answers against FP32's at the run's precision.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SquadAt {
    #[serde(flatten)]
    pub result: ModelResult,
    pub vs_fp32: Comparison,
}

/// One `--compare-methods` model: the same placement with another method's ranges, evaluated as the main one.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MethodResult {
    pub method: String,
    pub int8: ModelResult,
    /// Its answers against FP32's: dF1 and dEM with their paired 95 % intervals.
    pub vs_fp32: Comparison,
}

/// One more `--precision`'s model (e.g. fp8 after int8), evaluated as the main one.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PrecisionResult {
    /// The policy's `precision` (`fp8-e4m3fn`, `fp8-e4m3fnuz`, `int8`).
    pub precision: String,
    /// The range method its ranges came from.
    pub method: String,
    pub result: ModelResult,
    /// Its answers against FP32's: dF1 and dEM with their paired 95 % intervals.
    pub vs_fp32: Comparison,
}

/// Where each of the leg's phases took its seconds.
type Phases = BTreeMap<String, f64>;

/// One evaluation as results.json records it.
pub(crate) fn model_result(e: &Evaluation, model: &Path, bytes: u64) -> ModelResult {
    let ran = RanOn {
        model: model.display().to_string(),
        model_bytes: bytes,
        ep: e.ep.clone(),
        ep_precision: e.ep_precision.clone(),
        fallback_from: e.fallback_from.clone(),
    };
    ModelResult { ran, score: e.score.clone(), latency: e.latency.clone() }
}

/// FP32 and the quantized model of `run` (and its compared models) on `data`: predictions files, scores, the
/// comparison with FP32, the speed in alternation, the other EPs.
pub(crate) fn e2e(run: &E2eRun<'_>, data: &Corpus, progress: &dyn Progress, phases: &mut Phases) -> Result<SquadE2e> {
    let (fp32_path, qpath, label) = (run.fp32.path, run.int8.path, run.label);
    let t = Instant::now();
    let fp32 =
        evaluate(ModelSource::File(fp32_path), &fp32_path.display().to_string(), data, run.eval, "FP32", progress)?;
    phases.insert("fp32_eval".to_owned(), t.elapsed().as_secs_f64());
    write_predictions(&run.out.join("predictions_fp32.json"), &fp32.predictions)?;
    let int8_opts = EvalOptions { session: run.int8.session.clone(), ..run.eval.clone() };
    let t = Instant::now();
    let int8 = evaluate(ModelSource::File(qpath), &qpath.display().to_string(), data, &int8_opts, label, progress)?;
    phases.insert("int8_eval".to_owned(), t.elapsed().as_secs_f64());
    write_predictions(&run.out.join("predictions_int8.json"), &int8.predictions)?;
    let mut r = SquadE2e {
        fp32: model_result(&fp32, fp32_path, model_size(fp32_path)),
        int8: model_result(&int8, qpath, model_size(qpath)),
        int8_vs_fp32: data.compare(&int8.predictions, &fp32.predictions),
        compared_methods: vec![],
        compared_precisions: vec![],
        speedup: None,
        speedup_default_precision: None,
        default_float: None,
        other_eps: vec![],
    };
    // The features speed and the other EPs' logits are measured on: enough batches for speed::FEATURES features
    // (each holds at least one); PairedTiming takes the first of them.
    let batches: Vec<squad::Batch> =
        data.batches(run.eval.batch)?.take(speed::FEATURES).collect::<std::result::Result<_, _>>()?;
    timed(run, (data, &batches), &mut r, progress, phases)?;
    others(run, data, (&int8_opts, &fp32), &mut r, progress, phases)?;
    let t_default = Instant::now();
    let sessions = (run.fp32.session, run.int8.session);
    r.default_float = at_default_float(run, sessions, (data, &batches), &fp32, progress);
    phases.insert("default_float".to_owned(), t_default.elapsed().as_secs_f64());
    let first = First { fp32: &fp32, int8: &int8, int8_session: run.int8.session };
    r.other_eps = on_other_eps(run, (data, &batches), &first, progress, phases)?;
    Ok(r)
}

/// The two evaluations are minutes apart: the speed comparison runs both on the same features in turn, into `r`.
/// No speed on an emulated NPU (`Ep::is_timed`).
fn timed(
    run: &E2eRun<'_>,
    (data, batches): (&Corpus, &[squad::Batch]),
    r: &mut SquadE2e,
    progress: &dyn Progress,
    phases: &mut Phases,
) -> Result<()> {
    let t = Instant::now();
    if batches.is_empty() || !run.int8.session.ep.is_timed() {
        return Ok(());
    }
    let (fp32, qpath) = (run.fp32.path, run.int8.path);
    let timing = PairedTiming::new(fp32, run.fp32.session, batches, data.io(), speed::FEATURES, speed::ROUNDS)?;
    let s = timing.against(qpath, run.int8.session)?;
    progress.note(&format!("{} against FP32, in alternation on {} features: {}", run.label, s.features, s.describe()));
    r.speedup = Some(s);
    let time = |f: &SessionConfig, q: &SessionConfig| {
        PairedTiming::new(fp32, f, batches, data.io(), speed::FEATURES, speed::ROUNDS)?.against(qpath, q)
    };
    r.speedup_default_precision = speed::at_default_precision(run.fp32.session, run.int8.session, time);
    if let Some(d) = &r.speedup_default_precision {
        progress.note(&d.describe(run.int8.session.ep.short_name(), run.label));
    }
    phases.insert("speed".to_owned(), t.elapsed().as_secs_f64());
    Ok(())
}

/// The models beside the main one, each evaluated as it was (on the quantized model's session) and compared with
/// FP32: `--compare-methods`' and `--precision`'s others, into `r`.
fn others(
    run: &E2eRun<'_>,
    data: &Corpus,
    (int8_opts, fp32): (&EvalOptions, &Evaluation),
    r: &mut SquadE2e,
    progress: &dyn Progress,
    phases: &mut Phases,
) -> Result<()> {
    let t = Instant::now();
    for (method, path) in run.compared {
        let label = format!("INT8 {method}");
        let e = evaluate(ModelSource::File(path), &path.display().to_string(), data, int8_opts, &label, progress)?;
        write_predictions(&run.out.join(format!("predictions_int8_{method}.json")), &e.predictions)?;
        let vs_fp32 = data.compare(&e.predictions, &fp32.predictions);
        let int8 = model_result(&e, path, model_size(path));
        r.compared_methods.push(MethodResult { method: method.clone(), int8, vs_fp32 });
    }
    if !run.compared.is_empty() {
        phases.insert("compared_methods_eval".to_owned(), t.elapsed().as_secs_f64());
    }
    let t = Instant::now();
    for p in &run.precisions {
        let (path, precision) = (&p.path, &p.precision);
        let e = evaluate(ModelSource::File(path), &path.display().to_string(), data, int8_opts, &p.label, progress)?;
        let short = precision.split('-').next().unwrap_or(precision);
        write_predictions(&run.out.join(format!("predictions_{short}.json")), &e.predictions)?;
        let vs_fp32 = data.compare(&e.predictions, &fp32.predictions);
        let result = model_result(&e, path, model_size(path));
        r.compared_precisions.push(PrecisionResult {
            precision: precision.clone(),
            method: p.method.clone(),
            result,
            vs_fp32,
        });
    }
    if !run.precisions.is_empty() {
        phases.insert("compared_precisions_eval".to_owned(), t.elapsed().as_secs_f64());
    }
    Ok(())
}

/// FP32 and the quantized model of `run` again at the default float precision of their EP (of `sessions`), when that
/// is another ([`default_float::measure`]): each model's answers on `data` against FP32's at the run's precision
/// (`fp32`), their predictions written (`predictions_{fp32,int8}_<ep>_<precision>.json`), and FP32 at the run's
/// precision timed against FP32 at the default one on `batches`.
fn at_default_float(
    run: &E2eRun<'_>,
    sessions: (&SessionConfig, &SessionConfig),
    (data, batches): (&Corpus, &[squad::Batch]),
    fp32: &Evaluation,
    progress: &dyn Progress,
) -> Option<DefaultFloat<SquadAt>> {
    let (fp32_path, qpath) = (run.fp32.path, run.int8.path);
    let eval = |which: Which, session: &SessionConfig| -> Result<SquadAt> {
        let (path, label, file) = match which {
            Which::Fp32 => (fp32_path, "FP32", "fp32"),
            Which::Int8 => (qpath, run.label, "int8"),
        };
        let (ep, precision) = (session.ep.short_name(), session.ep.float_precision().unwrap_or("default"));
        let opts = EvalOptions { session: session.clone(), ..run.eval.clone() };
        let what = format!("{label} on {ep} at {precision}");
        let e = evaluate(ModelSource::File(path), &path.display().to_string(), data, &opts, &what, progress)?;
        write_predictions(&run.out.join(format!("predictions_{file}_{ep}_{precision}.json")), &e.predictions)?;
        let vs_fp32 = data.compare(&e.predictions, &fp32.predictions);
        Ok(SquadAt { result: model_result(&e, path, model_size(path)), vs_fp32 })
    };
    let time = |reference: &SessionConfig, at_run: &SessionConfig| {
        let timing = PairedTiming::new(fp32_path, reference, batches, data.io(), speed::FEATURES, speed::ROUNDS)?;
        timing.against(fp32_path, at_run).map(Some)
    };
    default_float::measure(run.eval, sessions, eval, time, progress)
}

/// The first EP's evaluations of FP32 and the quantized model, and the quantized model's session there.
struct First<'a> {
    fp32: &'a Evaluation,
    int8: &'a Evaluation,
    int8_session: &'a SessionConfig,
}

/// Each of `run.other_eps` in turn: FP32 and the quantized model evaluated on it, their predictions written
/// (`predictions_{fp32,int8}_<ep>.json`), compared with `first`'s, timed against each other. A model whose F1 differs
/// between the two EPs by more than these questions' paired noise is warned about.
fn on_other_eps(
    run: &E2eRun<'_>,
    (data, batches): (&Corpus, &[squad::Batch]),
    first: &First<'_>,
    progress: &dyn Progress,
    phases: &mut Phases,
) -> Result<Vec<OtherEp>> {
    let (fp32_path, qpath, label) = (run.fp32.path, run.int8.path, run.label);
    let io = data.io();
    let mut out = Vec::new();
    for (other_fp32, other_int8) in &run.other_eps {
        let t = Instant::now();
        let ep = other_fp32.ep.short_name().to_owned();
        let eval = |model: &Path, session: &SessionConfig, what: &str| {
            let opts = EvalOptions { session: session.clone(), ..run.eval.clone() };
            evaluate(ModelSource::File(model), &model.display().to_string(), data, &opts, what, progress)
        };
        let fp32 = eval(fp32_path, other_fp32, &format!("FP32 on {ep}"))?;
        let int8 = eval(qpath, other_int8, &format!("{label} on {ep}"))?;
        write_predictions(&run.out.join(format!("predictions_fp32_{ep}.json")), &fp32.predictions)?;
        write_predictions(&run.out.join(format!("predictions_int8_{ep}.json")), &int8.predictions)?;
        let mut r = OtherEp {
            ep: ep.clone(),
            first_ep: first.fp32.ep.clone(),
            fp32: Some(model_result(&fp32, fp32_path, model_size(fp32_path))),
            int8: Some(model_result(&int8, qpath, model_size(qpath))),
            int8_vs_fp32: data.compare(&int8.predictions, &fp32.predictions),
            fp32_vs_first: data.compare(&fp32.predictions, &first.fp32.predictions),
            int8_vs_first: data.compare(&int8.predictions, &first.int8.predictions),
            fp32_same_answers: same_answers(&fp32, first.fp32),
            int8_same_answers: same_answers(&int8, first.int8),
            fp32_logits: None,
            int8_logits: None,
            speedup: None,
            speedup_default_precision: None,
            default_float: at_default_float(run, (other_fp32, other_int8), (data, batches), &fp32, progress),
        };
        if !batches.is_empty() {
            if other_int8.ep.is_timed() {
                time_on(&mut r, (fp32_path, qpath), (other_fp32, other_int8), batches, io)?;
            }
            let first_ep = &first.fp32.ep;
            let stage = format!("FP32's logits on {ep} against {first_ep}");
            let sessions = (run.fp32.session, *other_fp32);
            r.fp32_logits = Some(logits_agreement(fp32_path, sessions, batches, io, (&stage, progress))?);
            let stage = format!("{label}'s logits on {ep} against {first_ep}");
            let sessions = (first.int8_session, *other_int8);
            r.int8_logits = Some(logits_agreement(qpath, sessions, batches, io, (&stage, progress))?);
        }
        say(&r, label, progress);
        out.push(r);
        phases.insert(format!("eval_on_{ep}"), t.elapsed().as_secs_f64());
    }
    Ok(out)
}

/// The quantized model against FP32 on another EP's sessions, in alternation on `batches`: at the run's precision and
/// at the EP's own default, into `r`.
fn time_on(
    r: &mut OtherEp,
    (fp32, qpath): (&Path, &Path),
    (fp32_session, int8_session): (&SessionConfig, &SessionConfig),
    batches: &[squad::Batch],
    io: &squad::ModelIo,
) -> Result<()> {
    let time = |f: &SessionConfig, q: &SessionConfig| {
        PairedTiming::new(fp32, f, batches, io, speed::FEATURES, speed::ROUNDS)?.against(qpath, q)
    };
    r.speedup = Some(time(fp32_session, int8_session)?);
    r.speedup_default_precision = speed::at_default_precision(fp32_session, int8_session, time);
    Ok(())
}

/// Share of `a`'s questions that `b` answers with the same text.
fn same_answers(a: &Evaluation, b: &Evaluation) -> f64 {
    let same = a.predictions.iter().filter(|(id, text)| b.predictions.get(*id) == Some(*text)).count();
    if a.predictions.is_empty() { 1.0 } else { same as f64 / a.predictions.len() as f64 }
}

/// The comparison with the first EP, said as the run goes; a warning when a model's F1 on the two EPs differs by more
/// than these questions' paired noise (the interval leaves out 0).
fn say(r: &OtherEp, label: &str, progress: &dyn Progress) {
    for (name, vs, same) in
        [("FP32", &r.fp32_vs_first, r.fp32_same_answers), (label, &r.int8_vs_first, r.int8_same_answers)]
    {
        let line = format!(
            "{name} on {} against {}: dF1 {}, {:.1} % of the answers the same",
            r.ep,
            r.first_ep,
            vs.f1.describe(),
            100.0 * same
        );
        if vs.f1.excludes(0.0) {
            progress.warn(&format!(
                "{line}: the same model scores differently on the two EPs, by more than these {} questions' noise \
                 (they compute it differently: fusions, kernels, the float parts' precision)",
                vs.f1.questions
            ));
        } else {
            progress.note(&line);
        }
    }
}
