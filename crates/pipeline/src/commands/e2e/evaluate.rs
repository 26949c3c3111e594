//! The e2e run's evaluation: FP32, INT8 and the `--compare-methods` models on SQuAD, their speed against each other,
//! and (`--profile-ops`) where each one's time goes.

use std::path::{Path, PathBuf};
use std::time::Instant;

use runtime::{ModelSource, SessionConfig};

use crate::commands::e2e::config::{E2eConfig, Phases};
use crate::commands::e2e::quantize::precision_name;
use crate::disk::write_predictions;
use crate::error::Result;
use crate::inputs::files::InputSet;
use crate::model::model_size;
use crate::progress::Progress;
use crate::report::e2e::precision_label;
use crate::report::results::{E2eResults, ModelResult, OpProfiles};
use crate::steps::ops::op_table;
use crate::steps::run::EvalOptions;
use crate::steps::speed::{self, OpProfile, PairedTiming};
use crate::tasks::squad::data::Corpus;
use crate::tasks::squad::evaluate::{Evaluation, evaluate};

pub(crate) fn model_result(e: &Evaluation, model: &Path, bytes: u64) -> ModelResult {
    ModelResult {
        model: model.display().to_string(),
        model_bytes: bytes,
        ep: e.ep.clone(),
        ep_precision: e.ep_precision.clone(),
        fallback_from: e.fallback_from.clone(),
        score: e.score.clone(),
        latency: e.latency.clone(),
    }
}

/// FP32 and INT8 (and `--compare-methods`' models) on SQuAD: predictions files and `results.fp32` / `int8`; FP32's
/// and INT8's evaluations, for the other EPs to be compared with.
#[allow(clippy::too_many_arguments)]
pub(crate) fn evaluate_squad(
    cfg: &E2eConfig,
    qpath: &Path,
    data: &Corpus,
    int8_session: &SessionConfig,
    compared: &[(String, PathBuf)],
    results: &mut E2eResults,
    progress: &dyn Progress,
    phases: &mut Phases,
) -> Result<(Evaluation, Evaluation)> {
    let t = Instant::now();
    let fp32 =
        evaluate(ModelSource::File(&cfg.model), &cfg.model.display().to_string(), data, &cfg.eval, "FP32", progress)?;
    phases.insert("fp32_eval".to_owned(), t.elapsed().as_secs_f64());
    write_predictions(&cfg.out.join("predictions_fp32.json"), &fp32.predictions)?;
    results.fp32 = Some(model_result(&fp32, &cfg.model, model_size(&cfg.model)));
    let int8_opts = EvalOptions { session: int8_session.clone(), ..cfg.eval.clone() };
    let t = Instant::now();
    // The quantized model's label: INT8, A16W8 (the qnn preset), or FP8 E4M3FN under --precision fp8.
    let label = precision_label(&precision_name(&cfg.policy));
    let int8 = evaluate(ModelSource::File(qpath), &qpath.display().to_string(), data, &int8_opts, &label, progress)?;
    phases.insert("int8_eval".to_owned(), t.elapsed().as_secs_f64());
    write_predictions(&cfg.out.join("predictions_int8.json"), &int8.predictions)?;
    results.int8 = Some(model_result(&int8, qpath, model_size(qpath)));
    results.int8_vs_fp32 = Some(data.compare(&int8.predictions, &fp32.predictions));
    // The two evaluations are minutes apart: the speed comparison runs both on the same features in turn.
    let t = Instant::now();
    // Enough batches for speed::FEATURES features (each holds at least one); PairedTiming takes the first of them.
    let batches: Vec<squad::Batch> =
        data.batches(cfg.eval.batch)?.take(speed::FEATURES).collect::<std::result::Result<_, _>>()?;
    // No speed on an emulated NPU (`Ep::is_timed`).
    if !batches.is_empty() && int8_session.ep.is_timed() {
        let timing =
            PairedTiming::new(&cfg.model, &cfg.eval.session, &batches, data.io(), speed::FEATURES, speed::ROUNDS)?;
        let s = timing.against(qpath, int8_session)?;
        progress.note(&format!("{label} against FP32, in alternation on {} features: {}", s.features, s.describe()));
        results.speedup = Some(s);
        let time = |f: &SessionConfig, q: &SessionConfig| {
            PairedTiming::new(&cfg.model, f, &batches, data.io(), speed::FEATURES, speed::ROUNDS)?.against(qpath, q)
        };
        results.speedup_default_precision = speed::at_default_precision(&cfg.eval.session, int8_session, time);
        if let Some(d) = &results.speedup_default_precision {
            progress.note(&d.describe(int8_session.ep.short_name(), &label));
        }
        phases.insert("speed".to_owned(), t.elapsed().as_secs_f64());
        profile_both(cfg, (qpath, int8_session), results, phases, progress, |m, s| timing.profile(m, s))?;
    }
    evaluate_others(cfg, data, &int8_opts, &fp32, compared, results, progress, phases)?;
    Ok((fp32, int8))
}

/// `--profile-ops` (else nothing): FP32 (`cfg.model` on its session) and INT8 (`int8`: the model and its session)
/// each profiled by `profile`, shown, and kept in `results`.
pub(crate) fn profile_both(
    cfg: &E2eConfig,
    int8: (&Path, &SessionConfig),
    results: &mut E2eResults,
    phases: &mut Phases,
    progress: &dyn Progress,
    profile: impl Fn(&Path, &SessionConfig) -> Result<OpProfile>,
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

/// The [`OpProfile`] of a classifier `model` (on `session`) on the first inputs of `set` (at most
/// [`speed::FEATURES`], in batches of `batch`), reading `output`.
pub(crate) fn profile_inputs(
    model: &Path,
    session: &SessionConfig,
    batch: usize,
    set: &InputSet,
    output: &str,
) -> Result<OpProfile> {
    let n = set.len().min(speed::FEATURES);
    let batch = batch.max(1);
    let batches: Vec<_> = (0..n).step_by(batch).map(|i| set.batch(i..(i + batch).min(n))).collect();
    speed::profile_ops(model, session, &[], (batches.len(), n), |s| {
        batches.iter().try_for_each(|b| {
            let feeds: Vec<(&str, ndarray::ArrayView2<i64>)> = b.iter().map(|(k, a)| (k.as_str(), a.view())).collect();
            s.run_with(&feeds, &[output], |_| Ok::<_, crate::error::Error>(()))
        })
    })
}

/// The models beside the main one, each evaluated as it was and compared with FP32: `--compare-methods`' and
/// `--precision`'s others (on the quantized model's session).
#[allow(clippy::too_many_arguments)]
fn evaluate_others(
    cfg: &E2eConfig,
    data: &Corpus,
    int8_opts: &EvalOptions,
    fp32: &Evaluation,
    compared: &[(String, PathBuf)],
    results: &mut E2eResults,
    progress: &dyn Progress,
    phases: &mut Phases,
) -> Result<()> {
    // --compare-methods: each other method's model, evaluated the same way.
    let t = Instant::now();
    for (c, (method, path)) in results.compared_methods.iter_mut().zip(compared) {
        let label = format!("INT8 {method}");
        let r = evaluate(ModelSource::File(path), &path.display().to_string(), data, int8_opts, &label, progress)?;
        write_predictions(&cfg.out.join(format!("predictions_int8_{method}.json")), &r.predictions)?;
        c.int8 = Some(model_result(&r, path, model_size(path)));
        c.vs_fp32 = Some(data.compare(&r.predictions, &fp32.predictions));
    }
    if !compared.is_empty() {
        phases.insert("compared_methods_eval".to_owned(), t.elapsed().as_secs_f64());
    }
    // --precision's others, evaluated the same way (on the quantized model's session).
    let t = Instant::now();
    for c in &mut results.compared_precisions {
        let path = PathBuf::from(&c.model);
        let label = precision_label(&c.precision);
        let r = evaluate(ModelSource::File(&path), &c.model, data, int8_opts, &label, progress)?;
        let short = c.precision.split('-').next().unwrap_or(&c.precision);
        write_predictions(&cfg.out.join(format!("predictions_{short}.json")), &r.predictions)?;
        c.result = Some(model_result(&r, &path, model_size(&path)));
        c.vs_fp32 = Some(data.compare(&r.predictions, &fp32.predictions));
    }
    if !results.compared_precisions.is_empty() {
        phases.insert("compared_precisions_eval".to_owned(), t.elapsed().as_secs_f64());
    }
    Ok(())
}
