//! The embedding room's answers to [`TaskRoom`]: a sentence embedding (pooled in the graph, or token states pooled
//! as the folder says), calibrated on texts and measured by its fidelity to FP32 and its retrieval.

use std::path::Path;

use onnx_ir::Model;
use runtime::SessionConfig;

use crate::error::Result;
use crate::held_out::HeldOut;
use crate::inputs::config::DataConfig;
use crate::inputs::feeds::Feeds;
use crate::inputs::files::{InputSet, TextInputs};
use crate::inputs::folder::Loader;
use crate::job::Report;
use crate::progress::Progress;
use crate::steps::speed::OpProfile;
use crate::tasks::embed::data::EmbedData;
use crate::tasks::embed::{self, EmbedTask, EmbeddingEval};
use crate::tasks::score::{ScoringRequest, TaskScoring};
use crate::tasks::{
    Detected, E2eRun, EvalRequest, TableLabels, Task, TaskData, TaskOutcome, TaskResult, TaskRoom, profile_inputs,
    rows_shared,
};

/// A sentence embedding or token states ([`model_io::roles::embedding_output`], the embedding `--io-names` names first)
/// make an embedding model, unless class logits were named; settled with its pooling ([`EmbedTask::settle`]). A
/// named output the graph lacks, or a folder whose modules qdq cannot compute, is an error.
pub(crate) fn detect(model: &Model, model_path: &Path, cfg: &DataConfig) -> Result<Detected> {
    let named = cfg.io_names.named();
    if named.logits.is_some() {
        return Ok(Detected::Not(None));
    }
    let found = model_io::roles::embedding_output(model.graph(), named, cfg.pooling.is_some())
        .map_err(|e| crate::inputs::roles::role_error(model_path, e))?;
    Ok(match found {
        Some(found) => Detected::Is(Task::of(EmbedTask::settle(found, model_path, cfg)?)),
        None => Detected::Not(None),
    })
}

impl TaskRoom for EmbedTask {
    fn name(&self) -> &'static str {
        "embedding"
    }

    fn unit(&self) -> &'static str {
        "texts"
    }

    /// 2,000 questions (with their paragraphs) or texts: short texts hold few tokens each (docs/QUANTIZATION.md
    /// measures the counts).
    fn default_cal_num(&self) -> usize {
        2000
    }

    /// percentile (99.999): pooling averages the rounding noise of a text's tokens away, which is independent from
    /// token to token, but keeps the error of values clipped at the range, which all lean one way, so the range that
    /// serves the pooled output clips less than mse's (docs/QUANTIZATION.md, "all-MiniLM-L6-v2").
    fn integer_method(&self) -> calib::MethodKind {
        calib::MethodKind::Percentile
    }

    fn describe(&self) -> Option<String> {
        Some(EmbedTask::describe(self))
    }

    fn shifted_output(&self) -> Option<&str> {
        None
    }

    fn loader(&self) -> Option<Loader> {
        Some(Loader::SentenceTransformers)
    }

    fn confirm_instead(&self) -> Option<&'static str> {
        Some("for an embedding model `qdq e2e` or `qdq eval --baseline` scores retrieval")
    }

    /// Every text alone: a SQuAD `.json` gives its questions and their paragraphs
    /// ([`EmbedData::calibration_texts`]).
    fn calibration_feeds(
        &self,
        _: (&Model, &Path),
        path: &Path,
        n: usize,
        _: &DataConfig,
        text: &TextInputs,
    ) -> Result<Box<dyn Feeds>> {
        let texts = EmbedData::calibration_texts(path, n)?;
        Ok(Box::new(InputSet::from_texts(path, &texts, text)?))
    }

    fn eval_data(
        &self,
        _: (&Model, &Path),
        dataset: &Path,
        n: usize,
        cfg: &DataConfig,
        text: &TextInputs,
    ) -> Result<Box<dyn TaskData>> {
        let data = EmbedData::load(dataset, cfg.corpus.as_deref(), n)?;
        let set = InputSet::from_texts(dataset, &data.texts, text)?;
        Ok(Box::new(EmbedRun { task: self.clone(), data, set }))
    }

    fn eval(&self, req: EvalRequest<'_>, progress: &dyn Progress) -> Result<Box<dyn Report>> {
        embed::eval::eval(self, req, progress)
    }

    fn scoring(&self, req: &ScoringRequest<'_>, progress: &dyn Progress) -> Result<Box<dyn TaskScoring>> {
        Ok(Box::new(embed::score::EmbedScoring::of(self, req, progress)?))
    }

    /// Texts (questions with their paragraphs from a SQuAD file), compared by their embedding.
    fn held_out(
        &self,
        fp32: (&Model, &Path),
        dataset: &Path,
        n: usize,
        session: SessionConfig,
        cfg: &DataConfig,
    ) -> Result<HeldOut> {
        embed::held::held_out(self, fp32, dataset, n, session, cfg)
    }
}

/// An embedding model's evaluation texts, as its head reads them.
struct EmbedRun {
    task: EmbedTask,
    data: EmbedData,
    set: InputSet,
}

impl TaskData for EmbedRun {
    fn calibration_overlap(&self, _: &Path, cal_num: usize, same_file: bool) -> Option<usize> {
        rows_shared(&self.set, cal_num, same_file)
    }

    fn e2e(
        &self,
        run: &E2eRun<'_>,
        progress: &dyn Progress,
        phases: &mut std::collections::BTreeMap<String, f64>,
    ) -> Result<TaskResult> {
        let lengths = (run.eval, run.seq_len, run.fixed_batch);
        let e = embed::e2e((run.fp32, run.int8), &self.task, &self.data, &self.set, lengths, progress, phases)?;
        Ok(TaskResult::new(e))
    }

    fn profile(&self, model: &Path, session: &SessionConfig, batch: usize) -> Result<OpProfile> {
        profile_inputs(model, session, batch, &self.set, self.task.head.output.name())
    }
}

#[typetag::serde(name = "embedding")]
impl TaskOutcome for EmbeddingEval {
    fn table(&self, labels: &TableLabels) -> String {
        embed::report::embedding_table(self, &labels.row)
    }
}
