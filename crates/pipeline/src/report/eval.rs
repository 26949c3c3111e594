//! What `qdq eval` reports.

use std::fmt;
use std::path::PathBuf;

use crate::job::Report;
use crate::report::ops::op_table;
use crate::steps::evaluate::Evaluation;
use crate::steps::speed::OpProfile;

/// An evaluation and the model it was of.
#[derive(Debug, Clone)]
pub struct EvalReport {
    pub model: PathBuf,
    pub evaluation: Evaluation,
    /// `--profile-ops`.
    pub op_profile: Option<OpProfile>,
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
            Some(p) => write!(f, "\nWhere the time goes:\n{}", op_table(&[("model", p)]).trim_end()),
            None => Ok(()),
        }
    }
}
