//! `--ep cpu,openvino`: the run's FP32 and quantized models evaluated again on each EP after the first, and set
//! against the same models on the first (answers, logits, F1 with its paired interval), so a model that scores
//! differently on another EP says so instead of going unnoticed.

use std::path::Path;
use std::time::Instant;

use runtime::{ModelSource, SessionConfig};

use crate::commands::e2e::config::{E2eConfig, Phases};
use crate::commands::e2e::evaluate::model_result;
use crate::commands::e2e::quantize::precision_name;
use crate::disk::write_predictions;
use crate::error::Result;
use crate::model::model_size;
use crate::progress::Progress;
use crate::report::e2e::precision_label;
use crate::report::results::{E2eResults, OtherEp};
use crate::steps::run::EvalOptions;
use crate::steps::speed::{self, PairedTiming, logits_agreement};
use crate::tasks::squad::data::Corpus;
use crate::tasks::squad::evaluate::{Evaluation, evaluate};

/// The first EP's evaluations of FP32 and the quantized model, and the quantized model's session there.
pub(crate) struct First<'a> {
    pub fp32: &'a Evaluation,
    pub int8: &'a Evaluation,
    pub int8_session: &'a SessionConfig,
}

/// Each of `cfg.other_eps` in turn: FP32 and the quantized model (`qpath`) evaluated on it, their predictions
/// written (`predictions_{fp32,int8}_<ep>.json`), compared with `first`'s, timed against each other, and kept in
/// `results.other_eps`. A model whose F1 differs between the two EPs by more than these questions' paired noise is
/// warned about.
pub(crate) fn evaluate_on_other_eps(
    cfg: &E2eConfig,
    qpath: &Path,
    data: &Corpus,
    first: &First<'_>,
    results: &mut E2eResults,
    progress: &dyn Progress,
    phases: &mut Phases,
) -> Result<()> {
    let label = precision_label(&precision_name(&cfg.policy));
    let batches: Vec<squad::Batch> =
        data.batches(cfg.eval.batch)?.take(speed::FEATURES).collect::<std::result::Result<_, _>>()?;
    let io = data.io();
    for other in &cfg.other_eps {
        let t = Instant::now();
        let ep = other.fp32.ep.short_name().to_owned();
        let run = |model: &Path, session: &SessionConfig, what: &str| {
            let opts = EvalOptions { session: session.clone(), ..cfg.eval.clone() };
            evaluate(ModelSource::File(model), &model.display().to_string(), data, &opts, what, progress)
        };
        let fp32 = run(&cfg.model, &other.fp32, &format!("FP32 on {ep}"))?;
        let int8 = run(qpath, &other.int8, &format!("{label} on {ep}"))?;
        write_predictions(&cfg.out.join(format!("predictions_fp32_{ep}.json")), &fp32.predictions)?;
        write_predictions(&cfg.out.join(format!("predictions_int8_{ep}.json")), &int8.predictions)?;
        let mut r = OtherEp {
            ep: ep.clone(),
            first_ep: first.fp32.ep.clone(),
            fp32: Some(model_result(&fp32, &cfg.model, model_size(&cfg.model))),
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
        };
        if !batches.is_empty() {
            if other.int8.ep.is_timed() {
                time_on(&mut r, (&cfg.model, qpath), (&other.fp32, &other.int8), &batches, io)?;
            }
            let first_ep = &first.fp32.ep;
            let stage = format!("FP32's logits on {ep} against {first_ep}");
            let sessions = (&cfg.eval.session, &other.fp32);
            r.fp32_logits = Some(logits_agreement(&cfg.model, sessions, &batches, io, (&stage, progress))?);
            let stage = format!("{label}'s logits on {ep} against {first_ep}");
            let sessions = (first.int8_session, &other.int8);
            r.int8_logits = Some(logits_agreement(qpath, sessions, &batches, io, (&stage, progress))?);
        }
        say(&r, &label, progress);
        results.other_eps.push(r);
        phases.insert(format!("eval_on_{ep}"), t.elapsed().as_secs_f64());
    }
    Ok(())
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
