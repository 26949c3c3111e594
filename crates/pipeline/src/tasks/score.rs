//! How `qdq tune` scores a candidate in its task's terms ([`TaskScoring`]): each task's score per unit (a SQuAD
//! question's F1, a query's nDCG@10, a text's cosine to FP32's), paired with FP32's for the interval of the
//! difference, and the share of units whose top result is FP32's.

use std::path::Path;

use onnx_ir::Model;
use runtime::SessionConfig;

use crate::error::Result;
use crate::inputs::config::DataConfig;
use crate::progress::Progress;
use crate::tasks::Side;

/// The evaluation units a candidate is scored on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Questions {
    /// Those whose FP32 answers are nearest to flipping; FP32's answers are taken for the others.
    Screen,
    /// The others, completing a screened candidate's scores.
    Rest,
    /// Every question.
    All,
}

/// A model's scores on the units, and its time per unit of work.
#[derive(Debug, Clone)]
pub struct UnitScores {
    /// One score per unit (question, query or text), 0-1.
    pub per_unit: Vec<f64>,
    /// The model's score as the task reports it, in points (SQuAD's official F1; the mean of `per_unit` x100).
    pub points: f64,
    /// SQuAD's exact match, in points.
    pub exact_match: Option<f64>,
    /// Units whose top result is FP32's (a question's answer, a query's first document, a text's nearest other
    /// text), of those that have one.
    pub same_top1: (usize, usize),
    /// Wall milliseconds per feature (or text) of the pass.
    pub ms_per_text: f64,
    /// The units these scores were measured on (the screen's, or all).
    pub scored: usize,
    /// Completing a screened model ([`Questions::Rest`]): its points on the screen.
    pub screen_points: Option<f64>,
}

impl UnitScores {
    /// The mean of `per_unit`, x100.
    pub fn mean_points(per_unit: &[f64]) -> f64 {
        100.0 * per_unit.iter().sum::<f64>() / per_unit.len().max(1) as f64
    }
}

/// What candidates are scored in, in the task's own words: a SQuAD model's F1 over questions; an embedding model's
/// nDCG@10 over the queries of retrieval data, or its cosine to FP32's (x100) over texts without labels. A budget is
/// in its points.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Metric {
    /// `F1`, `nDCG@10` or `cos x100`.
    pub name: &'static str,
    /// What it is averaged over: `questions`, `queries` or `texts`.
    pub unit: &'static str,
    /// One of them: `question`, `query`, `text`.
    #[serde(skip)]
    pub one: &'static str,
    /// The share of units whose result is FP32's, as tables head it: `answers = FP32`, `top-1 = FP32`.
    #[serde(skip)]
    pub same: &'static str,
    /// The held-out proxy candidates are measured by first: `held-out KL`, `held-out 1 - cos`.
    #[serde(skip)]
    pub proxy: &'static str,
    /// What a model's time is per: `feature`, `text`.
    #[serde(skip)]
    pub per: &'static str,
    /// The difference to FP32's, as the tables head it: `dF1`, `dnDCG@10`, `dcos x100`, `accuracy diff`.
    #[serde(skip)]
    pub delta: &'static str,
    /// Scored with SQuAD's exact match beside its F1 (and tune.json's keys are SQuAD's: `f1`, `delta_f1`).
    #[serde(skip)]
    pub exact_match: bool,
}

impl Metric {
    /// SQuAD's.
    pub const F1: Metric = Metric {
        name: "F1",
        unit: "questions",
        one: "question",
        same: "answers = FP32",
        proxy: "held-out KL",
        per: "feature",
        delta: "dF1",
        exact_match: true,
    };

    /// The difference to FP32's, as the tables head it.
    pub fn delta(&self) -> String {
        self.delta.to_owned()
    }
}

/// A task's scoring of candidates: FP32's scores, and a candidate's on the units asked for.
pub(crate) trait TaskScoring {
    /// What the score is, in the task's words.
    fn metric(&self) -> Metric;
    /// FP32's scores.
    fn fp32(&self) -> &UnitScores;
    /// Whether candidates are screened on part of the units first ([`Questions::Screen`]).
    fn screens(&self) -> bool {
        false
    }
    /// `model`'s scores on the units `on` names.
    fn score(&mut self, model: Side<'_>, on: Questions, progress: &dyn Progress) -> Result<UnitScores>;
}

/// What a task's scoring is made of: the FP32 model (its graph, for the checks), the first `samples` units of
/// `dataset`, the session candidates are scored on, and `--screen`'s share.
pub(crate) struct ScoringRequest<'a> {
    pub fp32: &'a Path,
    pub graph: &'a Model,
    pub data: &'a DataConfig,
    pub dataset: &'a Path,
    pub samples: usize,
    pub session: SessionConfig,
    pub warmup: usize,
    /// Score as SQuAD v2.0 (`--squad-version 2.0`).
    pub version_2: bool,
    pub screen: f64,
}
