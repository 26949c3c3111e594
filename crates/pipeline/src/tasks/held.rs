//! The held-out measure every task room gives `qdq debug` and `qdq tune` (its `held` module): what another model's
//! outputs are measured by against FP32's ([`Agreement`], [`OutputAgreement`] as reports carry it) and which inputs
//! are held out ([`Task::held_out`]).

use std::path::Path;

use onnx_ir::Model;
use runtime::SessionConfig;
use serde::Serialize;

use crate::error::Result;
use crate::held_out::HeldOut;
use crate::inputs::config::DataConfig;
use crate::tasks::classify::held::ClassAgreement;
use crate::tasks::embed::held::EmbeddingAgreement;
use crate::tasks::squad::held::LogitAgreement;
use crate::tasks::{Task, classify, embed, squad};

/// One task's measure of how another model's outputs agree with FP32's, as `qdq debug` and `qdq tune` show it.
pub trait Agreement {
    /// The distance from FP32 that `debug` ranks nodes by and `tune` compares candidates by (0: FP32's outputs).
    fn loss(&self) -> f64;
    /// What [`Agreement::loss`] is, as the tables head it (`KL`, `1 - cos`).
    fn loss_name(&self) -> &'static str;
    /// [`Agreement::loss`] as the tables show it.
    fn loss_text(&self) -> String;
    /// What [`Agreement::loss`] is, in a few words (the sensitivity table's legend).
    fn explained(&self) -> &'static str;
    /// What is compared, in words: `logits`, `embeddings`, `class logits`.
    fn measured(&self) -> &'static str;
    /// What is compared, as debug.json's keys name it: `logits`, `embeddings`, `class_logits`.
    fn key(&self) -> &'static str;
    /// The second measure the tables show beside the loss, headed.
    fn second(&self) -> (&'static str, String);
    /// The agreement in one line.
    fn describe(&self) -> String;
}

/// How another model agrees with FP32 on the held-out inputs, in its task's measure.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(untagged)]
pub enum OutputAgreement {
    /// A QA head's start and end logits.
    Logits(LogitAgreement),
    /// A sentence embedding.
    Embeddings(EmbeddingAgreement),
    /// A classifier's class logits.
    Classes(ClassAgreement),
}

impl OutputAgreement {
    /// The task's agreement.
    fn inner(&self) -> &dyn Agreement {
        match self {
            OutputAgreement::Logits(a) => a,
            OutputAgreement::Embeddings(a) => a,
            OutputAgreement::Classes(a) => a,
        }
    }

    /// [`Agreement::loss`]: the logits' mean KL in nats, the embeddings' mean cosine distance (1 - cosine), the class
    /// probabilities' KL.
    pub fn loss(&self) -> f64 {
        self.inner().loss()
    }

    /// The logits' agreement, for a QA model.
    pub fn as_logits(&self) -> Option<&LogitAgreement> {
        match self {
            OutputAgreement::Logits(a) => Some(a),
            OutputAgreement::Embeddings(_) | OutputAgreement::Classes(_) => None,
        }
    }

    /// The embeddings' agreement, for an embedding model.
    pub fn as_embeddings(&self) -> Option<&EmbeddingAgreement> {
        match self {
            OutputAgreement::Embeddings(a) => Some(a),
            OutputAgreement::Logits(_) | OutputAgreement::Classes(_) => None,
        }
    }

    /// [`Agreement::loss_name`].
    pub fn loss_name(&self) -> &'static str {
        self.inner().loss_name()
    }

    /// [`Agreement::key`].
    pub fn key(&self) -> &'static str {
        self.inner().key()
    }

    /// [`Agreement::measured`].
    pub fn measured(&self) -> &'static str {
        self.inner().measured()
    }

    /// [`Agreement::explained`].
    pub fn explained(&self) -> &'static str {
        self.inner().explained()
    }

    /// [`Agreement::loss_text`].
    pub fn loss_text(&self) -> String {
        self.inner().loss_text()
    }

    /// [`Agreement::second`].
    pub fn second(&self) -> (&'static str, String) {
        self.inner().second()
    }

    /// [`Agreement::describe`].
    pub fn describe(&self) -> String {
        self.inner().describe()
    }
}

impl Task {
    /// The held-out inputs `qdq debug` and `qdq tune` measure this task's models on, the last `n` units of `dataset`,
    /// with FP32's (`fp32`, loaded from `fp32_path`) outputs on them, run on `session`: SQuAD questions compared by
    /// their start and end logits, texts (questions with their paragraphs from a SQuAD file) by their embedding, a
    /// classifier's inputs by their class logits.
    pub(crate) fn held_out(
        &self,
        fp32: (&Model, &Path),
        dataset: &Path,
        n: usize,
        session: SessionConfig,
        cfg: &DataConfig,
    ) -> Result<HeldOut> {
        let held = match self {
            Task::Squad => squad::held::held_out(fp32, dataset, n, session, cfg)?,
            Task::Embed(e) => embed::held::held_out(e, fp32, dataset, n, session, cfg)?,
            Task::Classify { output } => classify::held::held_out(output, fp32, dataset, n, session, cfg)?,
        };
        Ok(held.held_for(self))
    }
}
