//! An embedding model's score per unit, the way `qdq tune` weighs candidates against FP32: on retrieval data each
//! query's nDCG@10; on texts without labels each text's cosine to FP32's embedding (FP32 scores 1 on every text).
//! Scores are 0-1 per unit and reported x100, so a budget reads in nDCG points. Each unit's top-1 result (a query's first document, a text's
//! nearest other text) says whether the model still ranks first what FP32 ranks first.

use ndarray::{Array2, s};

use crate::error::Result;
use crate::inputs::files::InputSet;
use crate::progress::Progress;
use crate::steps::run::EvalOptions;
use crate::tasks::Side;
use crate::tasks::embed::data::EmbedData;
use crate::tasks::embed::measure::{NEIGHBOUR_TEXTS, cosines, rankings};
use crate::tasks::embed::{EmbedTask, embed_side, retrieval_of};

/// A model's scores on the units, and its time per text.
#[derive(Debug, Clone)]
pub struct UnitScores {
    /// One score per unit (query or text), 0-1.
    pub per_unit: Vec<f64>,
    /// Units whose top-1 result is FP32's, of those that have one (a query's first document; a text's nearest
    /// other text among the first [`NEIGHBOUR_TEXTS`]).
    pub same_top1: (usize, usize),
    /// Wall milliseconds per text over the embedding of every text.
    pub ms_per_text: f64,
}

impl UnitScores {
    /// The mean over the units, x100.
    pub fn points(&self) -> f64 {
        100.0 * self.per_unit.iter().sum::<f64>() / self.per_unit.len().max(1) as f64
    }
}

/// The data an embedding model's candidates are scored on, and FP32's embeddings of it.
pub struct EmbedScoring {
    task: EmbedTask,
    data: EmbedData,
    set: InputSet,
    opts: EvalOptions,
    /// FP32's embeddings (unit rows) and the top-1 result of each unit.
    fp32: Array2<f32>,
    fp32_top1: Vec<Option<usize>>,
    /// FP32's scores.
    pub fp32_scores: UnitScores,
}

impl EmbedScoring {
    /// FP32 (`fp32`) on `data` (as `set`), embedded as `task` says, run as `opts` says.
    pub fn new(
        task: &EmbedTask,
        data: EmbedData,
        set: InputSet,
        opts: EvalOptions,
        fp32: Side<'_>,
        progress: &dyn Progress,
    ) -> Result<EmbedScoring> {
        let (model, vectors) = embed_side(fp32, task, &set, &opts, ("FP32", progress))?;
        let mut scoring = EmbedScoring {
            task: task.clone(),
            data,
            set,
            opts,
            fp32: vectors,
            fp32_top1: vec![],
            fp32_scores: UnitScores { per_unit: vec![], same_top1: (0, 0), ms_per_text: model.latency.ms_per_feature },
        };
        let (mut per_unit, top1) = scoring.units_of(&scoring.fp32);
        if scoring.data.retrieval.is_none() {
            // FP32's cosine to itself, 1 by definition (not 1 - 1e-8 from rounding the unit rows).
            per_unit.fill(1.0);
        }
        let ranked = top1.iter().filter(|t| t.is_some()).count();
        scoring.fp32_scores.same_top1 = (ranked, ranked);
        scoring.fp32_scores.per_unit = per_unit;
        scoring.fp32_top1 = top1;
        Ok(scoring)
    }

    /// The score: `nDCG@10` on retrieval data, `cos x100` on texts.
    pub fn metric(&self) -> &'static str {
        if self.data.retrieval.is_some() { "nDCG@10" } else { "cos x100" }
    }

    /// What the units are: `queries` or `texts`.
    pub fn unit(&self) -> &'static str {
        if self.data.retrieval.is_some() { "queries" } else { "texts" }
    }

    /// One of them: `query` or `text`.
    pub fn unit_one(&self) -> &'static str {
        if self.data.retrieval.is_some() { "query" } else { "text" }
    }

    /// How many units there are.
    pub fn units(&self) -> usize {
        self.fp32_scores.per_unit.len()
    }

    /// FP32's score: the mean over the units, x100.
    pub fn fp32_mean(&self) -> f64 {
        self.fp32_scores.points()
    }

    /// `model`'s scores (on `session`, named by its path).
    pub fn score(&self, model: Side<'_>, progress: &dyn Progress) -> Result<UnitScores> {
        let (m, vectors) = embed_side(model, &self.task, &self.set, &self.opts, ("evaluating", progress))?;
        let (per_unit, top1) = self.units_of(&vectors);
        let ranked = self.fp32_top1.iter().filter(|t| t.is_some()).count();
        let same = top1.iter().zip(&self.fp32_top1).filter(|(a, b)| a.is_some() && a == b).count();
        Ok(UnitScores { per_unit, same_top1: (same, ranked), ms_per_text: m.latency.ms_per_feature })
    }

    /// Per unit, the score and the top-1 result of embeddings `m` (unit rows of every text).
    fn units_of(&self, m: &Array2<f32>) -> (Vec<f64>, Vec<Option<usize>>) {
        match &self.data.retrieval {
            Some(r) => {
                let (per_query, top) = retrieval_of(m, r);
                (per_query.ndcg10, top.iter().map(|t| t.first().copied()).collect())
            }
            None => {
                let cos = cosines(self.fp32.view(), m.view());
                let n = m.nrows().min(NEIGHBOUR_TEXTS);
                let head = m.slice(s![..n, ..]);
                let mut top1: Vec<Option<usize>> =
                    rankings(head, head, 1, true).into_iter().map(|t| t.first().copied()).collect();
                top1.resize(m.nrows(), None);
                (cos, top1)
            }
        }
    }
}
