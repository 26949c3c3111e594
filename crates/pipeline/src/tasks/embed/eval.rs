//! `qdq eval` on an embedding model: its retrieval scores on labelled texts, and with `--baseline` its embeddings
//! against the baseline's (as the quantized model's against FP32's in `qdq e2e`).

use std::fmt;
use std::path::PathBuf;

use crate::error::Result;
use crate::inputs::files::{InputSet, TextInputs};
use crate::job::Report;
use crate::progress::Progress;
use crate::steps::run::EvalOptions;
use crate::tasks::embed::data::EmbedData;
use crate::tasks::embed::report::embedding_table;
use crate::tasks::embed::{EmbedTask, EmbeddingEval, EmbeddingModel, embed_side, evaluate_embeddings, retrieval_of};
use crate::tasks::{EvalRequest, Side};

/// The embedding model of `req` on its texts ([`EmbeddingEvalReport`]).
pub(crate) fn eval(task: &EmbedTask, req: EvalRequest<'_>, progress: &dyn Progress) -> Result<Box<dyn Report>> {
    req.one_ep_only("an embedding model")?;
    let EvalRequest { model, graph, dataset, samples, data: data_cfg, opts, baseline, .. } = req;
    let text = TextInputs::for_model(graph, model, &data_cfg);
    let data = EmbedData::load(dataset, data_cfg.corpus.as_deref(), samples)?;
    let set = InputSet::from_texts(dataset, &data.texts, &text)?;
    let opts = EvalOptions { workers: 1, ..opts };
    let side = Side { path: model, session: &opts.session };
    let vs_baseline = match &baseline {
        Some(b) => {
            let baseline = Side { path: b, session: &opts.session };
            Some(evaluate_embeddings((baseline, side), task, &data, &set, &opts, progress)?)
        }
        None => None,
    };
    let evaluation = match &vs_baseline {
        Some(e) => e.int8.clone(),
        None => {
            let (mut m, vectors) = embed_side(side, task, &set, &opts, ("evaluating", progress))?;
            m.retrieval = data.retrieval.as_ref().map(|r| retrieval_of(&vectors, r).0.scores());
            m
        }
    };
    Ok(Box::new(EmbeddingEvalReport { model: model.to_path_buf(), evaluation, vs_baseline }))
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

impl Report for EmbeddingEvalReport {
    /// The document `qdq eval --json` prints for an embedding model.
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "schema": "qdq.eval/1",
            "task": "embedding",
            "model": self.model,
            "evaluation": self.evaluation,
            "vs_baseline": self.vs_baseline,
        })
    }
}
