//! An embedding model's score per unit, the way `qdq tune` weighs candidates against FP32: on retrieval data each
//! query's nDCG@10; on texts without labels each text's cosine to FP32's embedding (FP32 scores 1 on every text).
//! Scores are 0-1 per unit and reported x100, so a budget reads in nDCG points. Each unit's top-1 result (a query's first document, a text's
//! nearest other text) says whether the model still ranks first what FP32 ranks first.

use ndarray::{Array2, s};

use crate::error::Result;
use crate::inputs::files::InputSet;
use crate::inputs::files::TextInputs;
use crate::progress::Progress;
use crate::steps::run::EvalOptions;
use crate::tasks::Side;
use crate::tasks::embed::data::EmbedData;
use crate::tasks::embed::measure::{NEIGHBOUR_TEXTS, cosines, rankings};
use crate::tasks::embed::{EmbedTask, embed_side, retrieval_of};
use crate::tasks::score::{Metric, Questions, ScoringRequest, TaskScoring, UnitScores};

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

/// Texts per batch when candidates are scored (texts of about the same length batched together: a throughput pass).
const EMBED_BATCH: usize = 16;

impl EmbedScoring {
    /// The first `req.samples` queries or texts of `req.dataset` and FP32's scores on them.
    pub(crate) fn of(task: &EmbedTask, req: &ScoringRequest<'_>, progress: &dyn Progress) -> Result<EmbedScoring> {
        let text = TextInputs::for_model(req.graph, req.fp32, req.data);
        let data = EmbedData::load(req.dataset, req.data.corpus.as_deref(), req.samples)?;
        let set = InputSet::from_texts(req.dataset, &data.texts, &text)?;
        let opts = EvalOptions {
            batch: EMBED_BATCH,
            session: req.session.clone(),
            warmup: req.warmup,
            workers: 1,
            at_default_float: false,
        };
        let fp32 = Side { path: req.fp32, session: &opts.session };
        let scoring = EmbedScoring::new(task, data, set, opts.clone(), fp32, progress)?;
        progress.note(&format!(
            "candidates are scored by {} on {} {} (FP32 {:.2}); no screen (--screen is for SQuAD questions)",
            scoring.metric(),
            scoring.units(),
            scoring.unit(),
            scoring.fp32_mean()
        ));
        Ok(scoring)
    }

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
            fp32_scores: UnitScores {
                per_unit: vec![],
                points: 0.0,
                exact_match: None,
                same_top1: (0, 0),
                ms_per_text: model.latency.ms_per_feature,
                scored: 0,
                screen_points: None,
            },
        };
        let (mut per_unit, top1) = scoring.units_of(&scoring.fp32);
        if scoring.data.retrieval.is_none() {
            // FP32's cosine to itself, 1 by definition (not 1 - 1e-8 from rounding the unit rows).
            per_unit.fill(1.0);
        }
        let ranked = top1.iter().filter(|t| t.is_some()).count();
        scoring.fp32_scores.same_top1 = (ranked, ranked);
        scoring.fp32_scores.points = UnitScores::mean_points(&per_unit);
        scoring.fp32_scores.scored = per_unit.len();
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
        self.fp32_scores.points
    }

    /// `model`'s scores (on `session`, named by its path).
    pub fn score(&self, model: Side<'_>, progress: &dyn Progress) -> Result<UnitScores> {
        let (m, vectors) = embed_side(model, &self.task, &self.set, &self.opts, ("evaluating", progress))?;
        let (per_unit, top1) = self.units_of(&vectors);
        let ranked = self.fp32_top1.iter().filter(|t| t.is_some()).count();
        let same = top1.iter().zip(&self.fp32_top1).filter(|(a, b)| a.is_some() && a == b).count();
        Ok(UnitScores {
            points: UnitScores::mean_points(&per_unit),
            exact_match: None,
            scored: per_unit.len(),
            per_unit,
            same_top1: (same, ranked),
            ms_per_text: m.latency.ms_per_feature,
            screen_points: None,
        })
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

impl TaskScoring for EmbedScoring {
    fn metric(&self) -> Metric {
        Metric {
            name: EmbedScoring::metric(self),
            unit: self.unit(),
            one: self.unit_one(),
            same: "top-1 = FP32",
            proxy: "held-out 1 - cos",
            per: "text",
            delta: if self.data.retrieval.is_some() { "dnDCG@10" } else { "dcos x100" },
            exact_match: false,
        }
    }

    fn fp32(&self) -> &UnitScores {
        &self.fp32_scores
    }

    /// Every text or query, whatever `on` says (no screen).
    fn score(&mut self, model: Side<'_>, _on: Questions, progress: &dyn Progress) -> Result<UnitScores> {
        EmbedScoring::score(self, model, progress)
    }
}
