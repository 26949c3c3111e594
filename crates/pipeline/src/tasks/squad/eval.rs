//! `qdq eval` on a SQuAD model: EM, F1 and speed on SQuAD questions; with `--baseline` a second model on the same
//! questions and the paired difference; `--ep`'s others against the first; where the time goes.

use std::fmt;
use std::path::{Path, PathBuf};

use runtime::ModelSource;

use crate::disk::write_predictions;
use crate::error::Result;
use crate::job::Report;
use crate::model::model_size;
use crate::progress::Progress;
use crate::steps::ops::op_table;
use crate::steps::run::EvalOptions;
use crate::steps::speed::{self, OpProfile, profile_batches};
use crate::tasks::EvalRequest;
use crate::tasks::default_float::{self, DefaultFloat, Which};
use crate::tasks::squad::data::{Comparison, Corpus};
use crate::tasks::squad::e2e::{SquadAt, model_result};
use crate::tasks::squad::evaluate::{Evaluation, evaluate};

/// The SQuAD model of `req` on its questions ([`SquadEvalReport`]).
pub(crate) fn eval(req: EvalRequest<'_>, progress: &dyn Progress) -> Result<Box<dyn Report>> {
    let EvalRequest { model, graph, dataset, samples, data: data_cfg, opts, other_eps, baseline, out, profile_ops } =
        req;
    let tokenizer = data_cfg.tokenizer()?;
    let mut data = Corpus::load(dataset, &data_cfg, &tokenizer, samples)?;
    data.fit_model(graph, model)?;
    let name = model.display().to_string();
    let evaluation = evaluate(ModelSource::File(model), &name, &data, &opts, "evaluating", progress)?;
    if let Some(p) = out {
        write_predictions(p, &evaluation.predictions)?;
    }
    let baseline = match baseline {
        Some(b) => {
            let name = b.display().to_string();
            let e = evaluate(ModelSource::File(&b), &name, &data, &opts, "evaluating the baseline", progress)?;
            let difference = data.compare(&evaluation.predictions, &e.predictions);
            let default_float = at_default_float((&b, model), &data, (&opts, &e), progress);
            Some(Baseline { model: b, evaluation: e, difference, default_float })
        }
        None => None,
    };
    let op_profile =
        if profile_ops { Some(profile_first_features(model, &data, opts.batch, &opts.session)?) } else { None };
    // --ep's others: the same model on each, against its answers on the first.
    let mut others = Vec::new();
    for (ep, session) in other_eps {
        let opts = EvalOptions { session, ..opts.clone() };
        let what = format!("evaluating on {ep}");
        let e = evaluate(ModelSource::File(model), &name, &data, &opts, &what, progress)?;
        let vs_first = data.compare(&e.predictions, &evaluation.predictions);
        others.push(OtherEpEval { evaluation: e, vs_first });
    }
    let model = model.to_path_buf();
    Ok(Box::new(SquadEvalReport { model, evaluation, op_profile, baseline, other_eps: others }))
}

/// The baseline and the model again at their EP's default float precision, when that is another
/// ([`default_float::measure`]): each one's answers against the baseline's at the run's precision (`baseline`).
fn at_default_float(
    (baseline_path, model): (&Path, &Path),
    data: &Corpus,
    (opts, baseline): (&EvalOptions, &Evaluation),
    progress: &dyn Progress,
) -> Option<DefaultFloat<SquadAt>> {
    let eval = |which: Which, session: &runtime::SessionConfig| -> Result<SquadAt> {
        let (path, label) = match which {
            Which::Fp32 => (baseline_path, "the baseline"),
            Which::Int8 => (model, "the model"),
        };
        let what = format!("evaluating {label} at {}", session.ep.float_precision().unwrap_or("default"));
        let o = EvalOptions { session: session.clone(), ..opts.clone() };
        let e = evaluate(ModelSource::File(path), &path.display().to_string(), data, &o, &what, progress)?;
        let vs_fp32 = data.compare(&e.predictions, &baseline.predictions);
        Ok(SquadAt { result: model_result(&e, path, model_size(path)), vs_fp32 })
    };
    default_float::measure(opts, (&opts.session, &opts.session), eval, |_, _| Ok(None), progress)
}

/// The [`OpProfile`] of `model` on the first batches of `data` (at most [`speed::FEATURES`] features, at least one
/// batch).
pub(crate) fn profile_first_features(
    model: &Path,
    data: &Corpus,
    batch: usize,
    session: &runtime::SessionConfig,
) -> Result<OpProfile> {
    // Enough batches for FEATURES features (each holds at least one).
    let batches: Vec<squad::Batch> =
        data.batches(batch)?.take(speed::FEATURES).collect::<std::result::Result<_, _>>()?;
    profile_batches(model, session, speed::leading(&batches, speed::FEATURES), data.io())
}

/// A SQuAD model's evaluation and the model it was of.
#[derive(Debug, Clone)]
pub struct SquadEvalReport {
    pub model: PathBuf,
    pub evaluation: Evaluation,
    /// `--profile-ops`.
    pub op_profile: Option<OpProfile>,
    /// `--baseline`: the other model on the same questions, and the model's answers against its.
    pub baseline: Option<Baseline>,
    /// `--ep`'s others: the same model on each, and its answers there against those on the first EP.
    pub other_eps: Vec<OtherEpEval>,
}

/// The model on another EP of `--ep`'s list.
#[derive(Debug, Clone)]
pub struct OtherEpEval {
    pub evaluation: Evaluation,
    /// Its answers here against those on the first EP, paired by question.
    pub vs_first: Comparison,
}

/// `qdq eval --baseline`.
#[derive(Debug, Clone)]
pub struct Baseline {
    pub model: PathBuf,
    pub evaluation: Evaluation,
    /// The evaluated model's answers against the baseline's: dF1 and dEM with their paired 95 % intervals.
    pub difference: Comparison,
    /// The baseline (as FP32) and the model (as the quantized one) again at the EP's own default float precision,
    /// where that is not the run's, each against the baseline's answers at the run's precision.
    pub default_float: Option<DefaultFloat<SquadAt>>,
}

/// An evaluation's fields in `--json`.
fn evaluation_json(model: &Path, e: &Evaluation) -> serde_json::Value {
    serde_json::json!({
        "model": model,
        "ep": e.ep,
        "ep_precision": e.ep_precision,
        "fallback": e.fallback,
        "fallback_from": e.fallback_from,
        "exact_match": e.score.exact_match,
        "f1": e.score.f1,
        "questions": e.score.questions,
        "missing_predictions": e.score.missing_predictions,
        "latency": e.latency,
        "wall_seconds": e.wall_seconds,
        "workers": e.workers,
    })
}

impl Report for SquadEvalReport {
    /// The document `qdq eval --json` prints for a SQuAD model.
    fn json(&self) -> serde_json::Value {
        let mut v = evaluation_json(&self.model, &self.evaluation);
        v["task"] = "squad".into();
        v["schema"] = "qdq.eval/1".into();
        v["op_profile"] = serde_json::json!(self.op_profile);
        if let Some(b) = &self.baseline {
            v["baseline"] = evaluation_json(&b.model, &b.evaluation);
            v["vs_baseline"] = serde_json::json!(b.difference);
            if let Some(d) = &b.default_float {
                v["default_float"] = serde_json::json!(d);
            }
        }
        if !self.other_eps.is_empty() {
            let others: Vec<_> = self
                .other_eps
                .iter()
                .map(|o| {
                    let mut e = evaluation_json(&self.model, &o.evaluation);
                    e["vs_first"] = serde_json::json!(o.vs_first);
                    e
                })
                .collect();
            v["other_eps"] = others.into();
        }
        v
    }
}

/// One model's line: scores and speed.
fn line(f: &mut fmt::Formatter<'_>, model: &Path, e: &Evaluation) -> fmt::Result {
    let l = &e.latency;
    write!(
        f,
        "{}: EM {:.2} F1 {:.2} on {} questions ({} missing) | ",
        model.display(),
        e.score.exact_match,
        e.score.f1,
        e.score.questions,
        e.score.missing_predictions,
    )?;
    if !runtime::Ep::is_timed_name(&e.ep) {
        // QNN's emulated HTP: no speed figure means anything.
        write!(f, "on {} (no speed: its HTP is emulated on x86-64)", e.ep_label())
    } else if e.workers > 1 {
        write!(
            f,
            "{:.1} features/s over the pass with {} sessions side by side (each: {:.2} ms/feature, p50 {:.2}, p90 \
             {:.2}) on {}",
            l.features as f64 / e.wall_seconds.max(1e-9),
            e.workers,
            l.ms_per_feature,
            l.p50_ms_per_feature,
            l.p90_ms_per_feature,
            e.ep_label()
        )
    } else {
        write!(
            f,
            "{:.2} ms/feature, p50 {:.2}, p90 {:.2}, {:.1} features/s on {}",
            l.ms_per_feature,
            l.p50_ms_per_feature,
            l.p90_ms_per_feature,
            l.features_per_second,
            e.ep_label()
        )
    }
}

/// The baseline and the model at the EP's own default float precision, against the baseline's answers at the run's.
fn default_float_lines(f: &mut fmt::Formatter<'_>, d: &DefaultFloat<SquadAt>, baseline: &Evaluation) -> fmt::Result {
    let run = baseline.ep_precision.as_deref().unwrap_or("the run's precision");
    write!(
        f,
        "\nAt {}, {}'s own default float precision here (the float its users run), against the baseline's answers at \
         {run}:",
        d.name(),
        baseline.ep
    )?;
    for (name, at) in [("the baseline", &d.fp32), ("the model", &d.int8)] {
        if let Some(at) = at {
            let (s, v) = (&at.result.score, &at.vs_fp32);
            write!(
                f,
                "\n  {name}: EM {:.2} F1 {:.2}, dF1 {}, the same answer on {}",
                s.exact_match,
                s.f1,
                v.f1.describe(),
                v.same_answers.describe()
            )?;
        }
    }
    match &d.error {
        Some(e) => write!(f, "\n  not measured at {}: {e}", d.precision),
        None => Ok(()),
    }
}

impl fmt::Display for SquadEvalReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        line(f, &self.model, &self.evaluation)?;
        if let Some(b) = &self.baseline {
            writeln!(f)?;
            line(f, &b.model, &b.evaluation)?;
            let d = &b.difference;
            write!(
                f,
                "\nAgainst the baseline on the same {} questions: dF1 {}, dEM {} (95 % intervals, paired by question); the \
                 baseline's answer on {} of them",
                d.f1.questions,
                d.f1.describe(),
                d.exact_match.describe(),
                d.same_answers.describe()
            )?;
            if let Some(undecided) = d.undecided("the model", "the baseline") {
                write!(f, "\n{undecided}")?;
            }
            if let Some(d) = &b.default_float {
                default_float_lines(f, d, &b.evaluation)?;
            }
        }
        for o in &self.other_eps {
            writeln!(f)?;
            line(f, &self.model, &o.evaluation)?;
            let (here, first) = (o.evaluation.ep_label(), self.evaluation.ep_label());
            write!(
                f,
                "\nOn {here} against {first}, the same {} questions: dF1 {}",
                o.vs_first.f1.questions,
                o.vs_first.f1.describe()
            )?;
            if o.vs_first.f1.excludes(0.0) {
                write!(f, ": the model scores differently on the two EPs, by more than these questions' noise")?;
            }
        }
        match &self.op_profile {
            Some(p) => write!(f, "\nWhere the time goes:\n{}", op_table(&[("model", p)]).trim_end()),
            None => Ok(()),
        }
    }
}
