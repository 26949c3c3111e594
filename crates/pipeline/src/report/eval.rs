//! What `qdq eval` reports: one model's scores and speed, and with `--baseline` a second model's on the same
//! questions and the difference, with its interval.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::inputs::squad::Comparison;
use crate::job::Report;
use crate::report::ops::op_table;
use crate::steps::evaluate::Evaluation;
use crate::steps::speed::OpProfile;
use crate::tasks::classify::ClassifierEval;
use crate::tasks::embed::report::embedding_table;
use crate::tasks::embed::{EmbeddingEval, EmbeddingModel};

/// What `qdq eval` measured: a SQuAD model's answers, or an embedding model's embeddings.
#[derive(Debug, Clone)]
pub enum EvalReport {
    Squad(Box<SquadEvalReport>),
    Embedding(Box<EmbeddingEvalReport>),
    Classify(Box<ClassifierEvalReport>),
}

/// A classifier against `--baseline`: the baseline as FP32, the model as the quantized side.
#[derive(Debug, Clone)]
pub struct ClassifierEvalReport {
    pub model: PathBuf,
    pub baseline: PathBuf,
    pub comparison: ClassifierEval,
}

/// An embedding model's evaluation: its scores on retrieval data, and with `--baseline` how it compares with the
/// baseline's embeddings of the same texts.
#[derive(Debug, Clone)]
pub struct EmbeddingEvalReport {
    pub model: PathBuf,
    /// The model alone (retrieval scores on labelled data, speed).
    pub evaluation: EmbeddingModel,
    /// `--baseline`: the baseline as FP32, the model as the quantized side.
    pub vs_baseline: Option<EmbeddingEval>,
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

impl Report for EvalReport {
    /// The document `qdq eval --json` prints (docs/JSON.md, schema `qdq.eval/1`).
    fn json(&self) -> serde_json::Value {
        match self {
            EvalReport::Squad(r) => r.json(),
            EvalReport::Embedding(r) => serde_json::json!({
                "schema": "qdq.eval/1",
                "task": "embedding",
                "model": r.model,
                "evaluation": r.evaluation,
                "vs_baseline": r.vs_baseline,
            }),
            EvalReport::Classify(r) => serde_json::json!({
                "schema": "qdq.eval/1",
                "task": "classification",
                "model": r.model,
                "baseline": r.baseline,
                "vs_baseline": r.comparison,
            }),
        }
    }
}

impl fmt::Display for EvalReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvalReport::Squad(r) => r.fmt(f),
            EvalReport::Embedding(r) => r.fmt(f),
            EvalReport::Classify(r) => {
                write!(f, "{}", crate::tasks::classify::table(&r.comparison, "model").trim_end())?;
                write!(f, "\nbaseline (the FP32 row): {}", r.baseline.display())
            }
        }
    }
}

impl fmt::Display for EmbeddingEvalReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(e) = &self.vs_baseline {
            return write!(f, "{}", embedding_table(e, "model").trim_end());
        }
        let m = &self.evaluation;
        write!(f, "{}: ", self.model.display())?;
        if let Some(s) = &m.retrieval {
            write!(
                f,
                "MRR@10 {:.2}, nDCG@10 {:.2}, R@1 {:.2}, R@5 {:.2}, R@10 {:.2} | ",
                s.mrr_at_10, s.ndcg_at_10, s.recall_at_1, s.recall_at_5, s.recall_at_10
            )?;
        }
        let l = &m.latency;
        write!(
            f,
            "{} texts, {:.2} ms/text, {:.1} texts/s on {}",
            l.features, l.ms_per_feature, l.features_per_second, m.ran.ep
        )
    }
}

impl SquadEvalReport {
    /// The document `qdq eval --json` prints for a SQuAD model.
    fn json(&self) -> serde_json::Value {
        let mut v = evaluation_json(&self.model, &self.evaluation);
        v["task"] = "squad".into();
        v["schema"] = "qdq.eval/1".into();
        v["op_profile"] = serde_json::json!(self.op_profile);
        if let Some(b) = &self.baseline {
            v["baseline"] = evaluation_json(&b.model, &b.evaluation);
            v["vs_baseline"] = serde_json::json!(b.difference);
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
