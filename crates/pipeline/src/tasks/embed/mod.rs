//! Sentence-embedding models (search, RAG): which output holds the embedding and how token states are pooled
//! ([`EmbedTask`]), the texts they are measured on ([`data`]), their embeddings ([`run`]), the measures
//! ([`measure`]: cosine to FP32's, neighbours, retrieval) and the evaluation of FP32 against the quantized model
//! ([`evaluate_embeddings`]), with its table ([`report`]).

pub mod data;
pub mod eval;
pub mod head;
pub mod held;
pub mod measure;
pub mod report;
pub mod room;
pub mod run;
pub mod score;
pub mod speed;

use std::path::Path;

use ndarray::{Array2, ArrayView2, s};

use model_io::roles::{EmbeddingOutput, FoundEmbedding};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::inputs::config::DataConfig;
use crate::inputs::files::InputSet;
use crate::inputs::pooling::{PoolMode, Pooling};
use crate::progress::Progress;
use crate::steps::run::{EvalOptions, Latency};
use crate::steps::speed::AtDefaultPrecision;
use crate::tasks::default_float::{self, DefaultFloat, Which};
use crate::tasks::embed::data::EmbedData;
use crate::tasks::embed::data::Retrieval;
use crate::tasks::embed::head::EmbeddingHead;
use crate::tasks::embed::measure::{
    Fidelity, Neighbours, PerQuery, RetrievalDifference, RetrievalScores, TOP_K, fidelity, neighbour_agreement,
    rankings, text_groups, unit_rows,
};
use crate::tasks::embed::run::embed_all;
use crate::tasks::embed::speed::{SpeedAt, speed_at_lengths};
use crate::tasks::{RanOn, Side};

/// An embedding model's head as settled: the output, its pooling and where each came from.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbedTask {
    pub head: EmbeddingHead,
    /// Why this output (said once, and in results.json).
    pub why: String,
    /// Where the pooling of token states came from (`--pooling`, the folder's config file, or the default).
    pub pooling_from: Option<String>,
}

impl EmbedTask {
    /// The head of `found`: token states get `--pooling`, else the pooling the model's folder configures, else mean
    /// pooling with a warning; a folder whose modules put a Dense layer after the pooling cannot be followed from
    /// token states (its weights are not in the graph), which is an error.
    pub fn settle(found: FoundEmbedding, model_path: &Path, cfg: &DataConfig) -> Result<EmbedTask> {
        let folder = &cfg.folder;
        let (pooling, from) = match (&found.output, &cfg.pooling, &folder.pooling) {
            (EmbeddingOutput::Pooled(_), asked, _) => {
                if asked.is_some() {
                    tracing::warn!(
                        "--pooling applies to token states; `{}` is pooled in the graph",
                        found.output.name()
                    );
                }
                (None, None)
            }
            (EmbeddingOutput::TokenStates(_), Some(p), _) => {
                (Some(Pooling { normalize: folder.normalize, ..p.clone() }), Some("--pooling".to_owned()))
            }
            (EmbeddingOutput::TokenStates(_), None, Some((p, file))) => {
                (Some(p.clone()), Some(file.display().to_string()))
            }
            (EmbeddingOutput::TokenStates(o), None, None) => {
                tracing::warn!(
                    "{}: `{o}` holds token states and no 1_Pooling/config.json says how to pool them: mean pooling \
                     (--pooling cls|max|mean to choose)",
                    model_path.display()
                );
                (Some(Pooling { modes: vec![PoolMode::Mean], normalize: folder.normalize }), Some("default".into()))
            }
        };
        if pooling.is_some() && !folder.not_computed.is_empty() {
            return Err(Error::Input {
                path: model_path.to_path_buf(),
                reason: format!(
                    "`{}` holds token states, but {} puts module(s) after them that qdq cannot compute ({}; qdq \
                     pools and normalizes, and a Dense module's weights are not in the graph): export the model with \
                     its sentence embedding (sentence-transformers' `sentence_embedding` output) and give that",
                    found.output.name(),
                    folder.folder.join("modules.json").display(),
                    folder.not_computed.join(", ")
                ),
            });
        }
        Ok(EmbedTask { head: EmbeddingHead { output: found.output, pooling }, why: found.why, pooling_from: from })
    }

    /// One line saying what is embedded, for the log.
    pub fn describe(&self) -> String {
        match (&self.head.output, &self.head.pooling) {
            (EmbeddingOutput::TokenStates(o), Some(p)) => format!(
                "sentence embeddings: token states `{o}` ({}), {p} pooling (from {})",
                self.why,
                self.pooling_from.as_deref().unwrap_or("?")
            ),
            (o, _) => format!("sentence embeddings: `{}` ({})", o.name(), self.why),
        }
    }
}

/// One model's side of an embedding evaluation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EmbeddingModel {
    #[serde(flatten)]
    pub ran: RanOn,
    /// Time per text over every text embedded (batches of similar length).
    pub latency: Latency,
    /// Its retrieval scores, on retrieval data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retrieval: Option<RetrievalScores>,
}

/// Retrieval on labelled data: the quantized model against FP32, query by query.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RetrievalEval {
    pub queries: usize,
    pub documents: usize,
    /// The quantized model's scores minus FP32's, each with its paired 95 % interval, and the share kept.
    pub difference: RetrievalDifference,
}

/// An embedding model's evaluation (results.json `embedding`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EmbeddingEval {
    /// The texts (queries) evaluated on, and the corpus file when it is another.
    pub data: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corpus: Option<String>,
    /// The output read, whether it is pooled in the graph or token states, the pooling applied and why.
    pub output: String,
    pub token_states: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooling: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooling_from: Option<String>,
    pub detected: String,
    /// Longest text in tokens.
    pub seq_len: usize,
    pub texts: usize,
    pub fp32: EmbeddingModel,
    pub int8: EmbeddingModel,
    pub fidelity: Fidelity,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retrieval: Option<RetrievalEval>,
    /// The quantized model against FP32 timed in alternation, at one text and at a batch, at the longest length.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub speed: Vec<SpeedAt>,
    /// The same with both models at the EP's own default float precision, where that is not the run's (OpenVINO's
    /// bf16 on a CPU with bf16 matrix instructions): the FP32 its users run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_default_precision: Option<AtDefaultPrecision<Vec<SpeedAt>>>,
    /// Both models again with their float parts at the EP's own default precision, where that is not the run's: the
    /// FP32 its users run, with its embeddings against FP32's at the run's precision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_float: Option<DefaultFloat<EmbeddingAt, Vec<SpeedAt>>>,
}

/// A model at the EP's default float precision: its side (latency, retrieval scores), how close its embeddings stay
/// to FP32's at the run's precision, and its retrieval against FP32's there.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EmbeddingAt {
    #[serde(flatten)]
    pub model: EmbeddingModel,
    pub fidelity: Fidelity,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retrieval: Option<RetrievalEval>,
}

/// One model's embeddings of every text of `set` (unit rows), with its side of the evaluation.
pub fn embed_side(
    side: Side,
    task: &EmbedTask,
    set: &InputSet,
    opts: &EvalOptions,
    (stage, progress): (&str, &dyn Progress),
) -> Result<(EmbeddingModel, Array2<f32>)> {
    let o = EvalOptions { session: side.session.clone(), ..opts.clone() };
    let name = side.path.display().to_string();
    let (vectors, latency, ran) = embed_all(side.path, &name, &task.head, set, &o, (stage, progress))?;
    let model = EmbeddingModel { ran, latency, retrieval: None };
    Ok((model, unit_rows(&vectors)))
}

/// The queries' and the documents' rows of `m` (retrieval data: queries first).
fn split(m: &Array2<f32>, queries: usize) -> (ArrayView2<'_, f32>, ArrayView2<'_, f32>) {
    (m.slice(s![..queries, ..]), m.slice(s![queries.., ..]))
}

/// One model's retrieval scores on `r` from its embeddings `m` (unit rows, queries first).
pub fn retrieval_of(m: &Array2<f32>, r: &Retrieval) -> (PerQuery, Vec<Vec<usize>>) {
    let (q, d) = split(m, r.queries);
    let top = rankings(q, d, TOP_K, false);
    (PerQuery::of(&top, r), top)
}

/// How `b`'s embeddings compare with `a`'s (unit rows of the same texts): the neighbours and, on retrieval data, the
/// retrieval of each (set into `sides`) and their difference.
fn compare(
    (a, b): (&Array2<f32>, &Array2<f32>),
    data: &EmbedData,
    sides: (&mut EmbeddingModel, &mut EmbeddingModel),
) -> (Neighbours, Option<RetrievalEval>) {
    match &data.retrieval {
        Some(r) => {
            let ((pa, ta), (pb, tb)) = (retrieval_of(a, r), retrieval_of(b, r));
            sides.0.retrieval = Some(pa.scores());
            sides.1.retrieval = Some(pb.scores());
            let documents = a.nrows() - r.queries;
            let eval = RetrievalEval { queries: r.queries, documents, difference: RetrievalDifference::of(&pb, &pa) };
            (neighbour_agreement(&ta, &tb, "documents"), Some(eval))
        }
        None => {
            let n = a.nrows().min(measure::NEIGHBOUR_TEXTS);
            let (sa, sb) = (a.slice(s![..n, ..]), b.slice(s![..n, ..]));
            let (ta, tb) = (rankings(sa, sa, TOP_K, true), rankings(sb, sb, TOP_K, true));
            (neighbour_agreement(&ta, &tb, "texts"), None)
        }
    }
}

/// The groups of `data`'s texts (as `set`) fidelity is told per: queries and documents, and lengths in tokens.
fn groups_of(data: &EmbedData, set: &InputSet) -> Vec<(String, Vec<usize>)> {
    let lens: Vec<usize> = (0..set.len()).map(|i| set.row_len(i)).collect();
    text_groups(data.retrieval.as_ref().map(|r| r.queries), &lens)
}

/// Both models' embeddings of `data` (as `set`) and how they compare: fidelity, neighbours, retrieval; and again at
/// their EP's own default float precision, where that is not the sessions' ([`at_default_float`]).
pub fn evaluate_embeddings(
    (fp32, int8): (Side, Side),
    task: &EmbedTask,
    data: &EmbedData,
    set: &InputSet,
    opts: &EvalOptions,
    progress: &dyn Progress,
) -> Result<EmbeddingEval> {
    let (mut fp32_model, a) = embed_side(fp32, task, set, opts, ("FP32", progress))?;
    let (mut int8_model, b) = embed_side(int8, task, set, opts, ("INT8", progress))?;
    progress.note("comparing the embeddings (cosine, neighbours, retrieval)");
    let (neighbours, retrieval) = compare((&a, &b), data, (&mut fp32_model, &mut int8_model));
    let default_float = at_default_float((fp32, int8), (task, data, set, opts), (&fp32_model, &a), progress);
    Ok(EmbeddingEval {
        data: data.path.display().to_string(),
        corpus: data.retrieval.as_ref().and_then(|r| r.corpus.as_ref()).map(|c| c.display().to_string()),
        output: task.head.output.name().to_owned(),
        token_states: matches!(task.head.output, EmbeddingOutput::TokenStates(_)),
        pooling: task.head.pooling.as_ref().map(ToString::to_string),
        pooling_from: task.pooling_from.clone(),
        detected: task.why.clone(),
        seq_len: (0..set.len()).map(|i| set.row_len(i)).max().unwrap_or(0),
        texts: set.len(),
        fp32: fp32_model,
        int8: int8_model,
        fidelity: fidelity(a.view(), b.view(), &data.texts, &groups_of(data, set), neighbours),
        retrieval,
        speed: vec![],
        speed_default_precision: None,
        default_float,
    })
}

/// Both models of `sides` again at their EP's default float precision, when that is another
/// ([`default_float::measure`]): each one's embeddings against FP32's at the run's precision (`fp32`: its side and
/// unit rows), in cosine, neighbours and retrieval. Not timed here ([`e2e`] times FP32 at both precisions).
fn at_default_float(
    (fp32, int8): (Side, Side),
    (task, data, set, opts): (&EmbedTask, &EmbedData, &InputSet, &EvalOptions),
    (fp32_model, a): (&EmbeddingModel, &Array2<f32>),
    progress: &dyn Progress,
) -> Option<DefaultFloat<EmbeddingAt, Vec<SpeedAt>>> {
    let eval = |which: Which, session: &runtime::SessionConfig| -> Result<EmbeddingAt> {
        let (path, label) = match which {
            Which::Fp32 => (fp32.path, "FP32"),
            Which::Int8 => (int8.path, "INT8"),
        };
        let stage = format!("{label} at {}", session.ep.float_precision().unwrap_or("default"));
        let side = Side { path, session };
        let (mut model, c) = embed_side(side, task, set, opts, (&stage, progress))?;
        let (neighbours, retrieval) = compare((a, &c), data, (&mut fp32_model.clone(), &mut model));
        let groups = groups_of(data, set);
        Ok(EmbeddingAt { model, fidelity: fidelity(a.view(), c.view(), &data.texts, &groups, neighbours), retrieval })
    };
    default_float::measure(opts, (fp32.session, int8.session), eval, |_, _| Ok(None), progress)
}

/// An embedding model's leg of `qdq e2e`: both models' embeddings of `data` compared ([`evaluate_embeddings`]), then
/// timed in turn at one text and at a batch of the model's length (`seq_len`, or its `fixed_batch`), at the run's
/// precision and at the EP's default; each phase's seconds into `phases`.
pub(crate) fn e2e(
    sides: (Side, Side),
    task: &EmbedTask,
    data: &EmbedData,
    set: &InputSet,
    (opts, seq_len, fixed_batch): (&EvalOptions, usize, Option<usize>),
    progress: &dyn Progress,
    phases: &mut std::collections::BTreeMap<String, f64>,
) -> Result<EmbeddingEval> {
    let t = std::time::Instant::now();
    let mut e = evaluate_embeddings(sides, task, data, set, opts, progress)?;
    phases.insert("evaluation".to_owned(), t.elapsed().as_secs_f64());
    let t = std::time::Instant::now();
    progress.note("timing both models in turn at one text and at a batch");
    let output = task.head.output.name();
    e.speed = speed_at_lengths(sides, output, set, seq_len, fixed_batch)?;
    let time = |f: &runtime::SessionConfig, q: &runtime::SessionConfig| {
        let sides = (Side { path: sides.0.path, session: f }, Side { path: sides.1.path, session: q });
        speed_at_lengths(sides, output, set, seq_len, fixed_batch)
    };
    e.speed_default_precision = crate::steps::speed::at_default_precision(sides.0.session, sides.1.session, time);
    if let Some(d) = e.default_float.as_mut().filter(|d| d.fp32.is_some()) {
        // FP32 at the run's precision against FP32 at the default one.
        let at = default_float::sessions(sides.0.session, sides.1.session).map(|(f, ..)| f);
        if let Some(f) = at {
            let pair = (Side { path: sides.0.path, session: &f }, sides.0);
            match speed_at_lengths(pair, output, set, seq_len, fixed_batch) {
                Ok(s) => d.fp32_speedup = Some(s),
                Err(err) => d.error = Some(err.to_string()),
            }
        }
    }
    phases.insert("speed".to_owned(), t.elapsed().as_secs_f64());
    Ok(e)
}
