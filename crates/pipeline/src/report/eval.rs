//! What `qdq eval` reports: the model in its task's measures (each task's own report: a SQuAD model's scores and
//! speed, an embedding model's retrieval and fidelity, a classifier's agreement), with `--baseline` against a second
//! model.

use std::fmt;

use crate::job::Report;

/// What `qdq eval` measured, as the model's task reports it.
pub struct EvalReport(pub(crate) Box<dyn Report>);

impl Report for EvalReport {
    /// The document `qdq eval --json` prints (docs/JSON.md, schema `qdq.eval/1`).
    fn json(&self) -> serde_json::Value {
        self.0.json()
    }
}

impl fmt::Display for EvalReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for EvalReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EvalReport({})", self.0.json())
    }
}
