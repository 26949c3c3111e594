//! Which inputs each task holds out for `qdq debug` and `qdq tune` ([`Task::held_out`]): its room's `held` module,
//! whose reader the generic `held_out` runs.

use std::path::Path;

use onnx_ir::Model;
use runtime::SessionConfig;

use crate::error::Result;
use crate::held_out::HeldOut;
use crate::inputs::config::DataConfig;
use crate::tasks::{Task, classify, embed, squad};

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
