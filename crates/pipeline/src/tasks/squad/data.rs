//! SQuAD questions as model inputs: the loaded questions with their gold answers ([`Corpus`]), batches of features
//! (also as calibration [`Feeds`]), and the official scores of a set of answers ([`Score`], [`Comparison`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use onnx_ir::Model;
use squad::{FeatureStream, ModelIo, PostProcessConfig, PredictionAccumulator};
use tokenizer::Tokenizer;

use crate::error::{Error, Result};
use crate::inputs::config::DataConfig;
use crate::inputs::feeds::{BatchFn, Feeds};
use crate::inputs::roles;

/// EM/F1 of a set of predictions against the gold answers of a [`Corpus`]: the one score type, embedded in
/// [`crate::tasks::squad::evaluate::Evaluation`] and (flattened, so results.json keeps its keys) in
/// [`crate::report::e2e::ModelResult`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Score {
    pub exact_match: f64,
    pub f1: f64,
    /// Questions scored.
    pub questions: usize,
    /// Questions without a prediction (scored 0).
    pub missing_predictions: usize,
}

impl Score {
    /// Official SQuAD scoring of `predictions` on `gold` (v1.1, or v2.0 with empty answers for unanswerable
    /// questions).
    pub fn of(gold: &squad_metrics::Dataset, predictions: &HashMap<String, String>, v2: bool) -> Score {
        if v2 {
            let m = squad_metrics::evaluate_v2(gold, predictions, None, 1.0);
            let missing = gold.questions().filter(|q| !predictions.contains_key(&q.id)).count();
            Score { exact_match: m.exact, f1: m.f1, questions: m.total, missing_predictions: missing }
        } else {
            let m = squad_metrics::evaluate_v1(gold, predictions);
            Score { exact_match: m.exact_match, f1: m.f1, questions: m.total, missing_predictions: m.missing }
        }
    }
}

/// One set of answers against another on the same questions: dF1 and dEM, each with its paired 95 % interval
/// ([`squad_metrics::PairedDifference`]), so a difference the question sample cannot resolve says so.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Comparison {
    pub f1: squad_metrics::PairedDifference,
    pub exact_match: squad_metrics::PairedDifference,
    /// Questions answered with the same text by both, with its 95 % interval: the fidelity measure the dev set
    /// resolves where dF1 cannot (10,570 questions resolve about ±0.25 F1, while a share of identical answers near
    /// 93 % comes within ±0.5 points).
    #[serde(default)]
    pub same_answers: squad_metrics::Proportion,
}

impl Comparison {
    /// `ours` against `theirs` on the questions of `gold`.
    pub fn of(
        gold: &squad_metrics::Dataset,
        ours: &HashMap<String, String>,
        theirs: &HashMap<String, String>,
        v2: bool,
    ) -> Comparison {
        let (f1, em) = (squad_metrics::question_f1, squad_metrics::question_em);
        let same = gold.questions().filter(|q| ours.get(&q.id) == theirs.get(&q.id)).count();
        Comparison {
            f1: squad_metrics::paired_difference(&f1(gold, ours, v2), &f1(gold, theirs, v2)),
            exact_match: squad_metrics::paired_difference(&em(gold, ours, v2), &em(gold, theirs, v2)),
            same_answers: squad_metrics::Proportion::of(same, gold.num_questions()),
        }
    }

    /// One sentence when these questions cannot tell the F1 of `ours` from that of `theirs` (the interval holds 0),
    /// with about how many would.
    pub fn undecided(&self, ours: &str, theirs: &str) -> Option<String> {
        let d = &self.f1;
        if d.excludes(0.0) || d.questions < 2 {
            return None;
        }
        let more = match d.questions_to_decide(0.0) {
            Some(n) => format!("about {n} questions would resolve a difference this size"),
            None => "they answer alike".to_owned(),
        };
        Some(format!(
            "These {} questions cannot tell {ours}'s F1 from {theirs}'s: dF1 {} holds 0; {more}.",
            d.questions,
            d.describe()
        ))
    }
}

/// The first `limit` questions of a SQuAD file, ready to be featurized in batches and scored.
#[derive(Debug)]
pub struct Corpus {
    path: PathBuf,
    gold: squad_metrics::Dataset,
    data: squad::SquadData,
    cfg: DataConfig,
    tokenizer: Arc<Tokenizer>,
}

impl Corpus {
    /// Reads `path` and keeps its first `limit` questions (0 = all). An empty selection is an error.
    pub fn load(path: &Path, cfg: &DataConfig, tokenizer: &Arc<Tokenizer>, limit: usize) -> Result<Corpus> {
        let gold = squad::read_dataset(path)?;
        Corpus::from_gold(path, if limit == 0 { gold } else { gold.first_n(limit) }, cfg, tokenizer)
    }

    /// Reads `path` and keeps its last `n` questions: questions held out from an evaluation of the first ones.
    pub fn load_last(path: &Path, cfg: &DataConfig, tokenizer: &Arc<Tokenizer>, n: usize) -> Result<Corpus> {
        let gold = squad::read_dataset(path)?;
        Corpus::from_gold(path, gold.last_n(n), cfg, tokenizer)
    }

    /// The same questions restricted to those whose id is in `ids` (an error when none is).
    pub fn restricted(&self, ids: &std::collections::HashSet<String>) -> Result<Corpus> {
        Corpus::from_gold(&self.path, self.gold.questions_where(|q| ids.contains(&q.id)), &self.cfg, &self.tokenizer)
    }

    fn from_gold(
        path: &Path,
        gold: squad_metrics::Dataset,
        cfg: &DataConfig,
        tokenizer: &Arc<Tokenizer>,
    ) -> Result<Corpus> {
        let dup = gold.duplicate_ids();
        if !dup.is_empty() {
            tracing::warn!(
                "{}: {} question ids occur more than once (first: {}); predictions hold one answer per id",
                path.display(),
                dup.len(),
                dup[0]
            );
        }
        let data = squad::SquadData::from_dataset(gold.clone(), path)?;
        if data.examples.is_empty() {
            return Err(Error::Input { path: path.to_path_buf(), reason: "the file holds no questions".into() });
        }
        Ok(Corpus { path: path.to_path_buf(), gold, data, cfg: cfg.clone(), tokenizer: Arc::clone(tokenizer) })
    }

    /// The ids of these questions.
    pub fn question_ids(&self) -> impl Iterator<Item = &str> {
        self.gold.questions().map(|q| q.id.as_str())
    }

    /// The file the questions came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of questions.
    pub fn questions(&self) -> usize {
        self.data.examples.len()
    }

    /// Whether answers may be empty (SQuAD v2.0).
    pub fn is_v2(&self) -> bool {
        self.cfg.version_2 || self.data.is_v2()
    }

    /// The model input and output names in use (see [`Corpus::fit_model`]).
    pub fn io(&self) -> &ModelIo {
        &self.cfg.io
    }

    /// Feature batches in feature order, of `batch` features; a model declaring a fixed batch gets batches of that
    /// size whatever `batch` asks, the last filled up to it ([`squad::Batch::fill_to`]; `DataSettings::config` says
    /// so once).
    pub fn batches(&self, batch: usize) -> Result<Batches<'_>> {
        let size = self.cfg.fixed_batch.unwrap_or(batch);
        let stream =
            FeatureStream::new(&self.data.examples, &self.tokenizer, self.cfg.features, size, self.cfg.padding)?;
        Ok(Batches { stream, fill: self.cfg.fixed_batch })
    }

    /// Turns logits into answers, in feature order.
    pub fn accumulator(&self) -> Result<PredictionAccumulator<'_>> {
        let pp = PostProcessConfig { version_2: self.is_v2(), ..PostProcessConfig::default() };
        Ok(PredictionAccumulator::new(&self.data.examples, Some(&self.tokenizer), pp)?)
    }

    /// Official SQuAD scoring (v1.1, or v2.0 with empty answers for unanswerable questions).
    pub fn score(&self, predictions: &HashMap<String, String>) -> Score {
        Score::of(&self.gold, predictions, self.is_v2())
    }

    /// `ours` against `theirs` on these questions ([`Comparison`]).
    pub fn compare(&self, ours: &HashMap<String, String>, theirs: &HashMap<String, String>) -> Comparison {
        Comparison::of(&self.gold, ours, theirs, self.is_v2())
    }

    /// Checks that `model` (loaded from `model_path`) takes the inputs and gives the outputs this data expects, and
    /// that the vocabulary fits its word embedding. A model without a segment-ids input (e.g. DistilBERT) is fed
    /// without one.
    pub fn fit_model(&mut self, model: &Model, model_path: &Path) -> Result<()> {
        roles::settle(&mut self.cfg.io, &mut self.cfg.io_names, model, model_path)?;
        roles::fit_io(&mut self.cfg.io, model, model_path)?;
        roles::check_positions(model, model_path, self.cfg.features.max_seq_len)?;
        let vocab =
            roles::Vocabulary { tok: &self.tokenizer, path: self.cfg.tokenizer_source(), force: self.cfg.force_vocab };
        roles::check_vocab(model, model_path, &self.cfg.io.input_ids, &vocab)?;
        roles::check_tokenizer_kind(&self.tokenizer, self.cfg.tokenizer_source(), &self.cfg.folder.folder)
    }
}

/// [`Corpus::batches`]: the feature stream's batches, each filled up to a model's fixed batch.
pub struct Batches<'a> {
    stream: FeatureStream<'a>,
    fill: Option<usize>,
}

impl Iterator for Batches<'_> {
    type Item = std::result::Result<squad::Batch, squad::Error>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut b = self.stream.next()?;
        if let (Ok(b), Some(rows)) = (&mut b, self.fill) {
            b.fill_to(rows);
        }
        Some(b)
    }
}

/// Questions whose last window is in `batch`.
pub(crate) fn questions_done(batch: &squad::Batch) -> u64 {
    batch.features.iter().filter(|f| f.window_index + 1 == f.num_windows).count() as u64
}

impl Feeds for Corpus {
    fn source(&self) -> &std::path::Path {
        self.path()
    }

    fn units(&self) -> (u64, &'static str) {
        (self.questions() as u64, "questions")
    }

    fn each_batch(&self, batch: usize, f: &mut BatchFn<'_>) -> Result<usize> {
        let mut features = 0;
        for b in self.batches(batch)? {
            let b = b?;
            f(&b.inputs(self.io()), b.len(), questions_done(&b))?;
            features += b.len();
        }
        Ok(features)
    }

    fn zero_inputs(&self) -> &[String] {
        &self.io().zero_inputs
    }

    fn attention_mask(&self) -> Option<&str> {
        Some(&self.io().attention_mask)
    }
}
