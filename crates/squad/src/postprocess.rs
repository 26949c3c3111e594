//! Logits to answers (BERT `write_predictions` rules) and predictions files.

use crate::dataset::{DocTokens, Example};
use crate::error::{Error, Result};
use crate::features::Feature;
use ndarray::ArrayView2;
use serde::Serialize;
use std::path::Path;
use tokenizer::Tokenizer;

/// How the answer text is taken from the chosen token span.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AnswerText {
    /// `context[start_token.start..end_token.end]` from the tokenizer's byte offsets (the reference; default).
    #[default]
    Offsets,
    /// BERT's older `get_final_text`: map the de-tokenized WordPiece text back onto the whitespace words of the
    /// context; differs from `Offsets` on a few answers (e.g. around punctuation).
    FinalText,
}

/// Post-processing settings.
#[derive(Debug, Clone, PartialEq)]
pub struct PostProcessConfig {
    /// Start and end candidates taken per window (top by logit), and answers kept in the n-best list.
    pub n_best: usize,
    /// Longest answer in tokens.
    pub max_answer_len: usize,
    /// SQuAD v2.0: predict "" when `null_score - best_non_null > null_threshold`.
    pub version_2: bool,
    /// v2.0 null threshold (default 0.0).
    pub null_threshold: f32,
    /// How answer texts are extracted.
    pub answer_text: AnswerText,
    /// Keep the n-best list in each prediction.
    pub keep_nbest: bool,
}

impl Default for PostProcessConfig {
    fn default() -> Self {
        PostProcessConfig {
            n_best: 20,
            max_answer_len: 30,
            version_2: false,
            null_threshold: 0.0,
            answer_text: AnswerText::Offsets,
            keep_nbest: false,
        }
    }
}

/// One n-best answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NbestEntry {
    /// Answer text.
    pub text: String,
    /// Softmax of the scores over the n-best list.
    pub probability: f64,
    /// Start logit.
    pub start_logit: f32,
    /// End logit.
    pub end_logit: f32,
}

/// The answer to one question.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    /// Question id.
    pub id: String,
    /// Predicted answer ("" for no answer).
    pub text: String,
    /// Score of the best non-null span (`start_logit + end_logit`; 0 when no span is valid).
    pub score: f32,
    /// The n-best list when requested.
    pub nbest: Option<Vec<NbestEntry>>,
    /// v2.0: minimum over windows of `start[0] + end[0]`.
    pub null_score: Option<f32>,
    /// How far the answer is from changing: the score of the best span minus that of the best span with another text
    /// (and, for v2.0, the distance of `null_score - score` from the null threshold, if smaller); infinite when no
    /// other answer was a candidate. Small margins are the answers a slightly different model flips first.
    pub margin: f32,
}

#[derive(Debug, Clone, Copy)]
struct Candidate {
    start: (usize, usize),
    end: (usize, usize),
    start_logit: f32,
    end_logit: f32,
}

/// Indices of the `n` largest values, largest first; ties keep index order.
fn top_n(logits: &[f32], n: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..logits.len()).collect();
    idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    idx.truncate(n);
    idx
}

/// Turns logits into predictions, one example at a time: features must arrive in id order, and an example is
/// finalised as soon as its last window arrives, so only the current example's candidates are kept.
pub struct PredictionAccumulator<'a> {
    examples: &'a [Example],
    tokenizer: Option<&'a Tokenizer>,
    config: PostProcessConfig,
    next_feature_id: usize,
    candidates: Vec<Candidate>,
    null_score: f32,
    ready: Vec<Prediction>,
}

impl<'a> PredictionAccumulator<'a> {
    /// An accumulator for `examples`. [`AnswerText::FinalText`] needs the tokenizer.
    pub fn new(examples: &'a [Example], tokenizer: Option<&'a Tokenizer>, config: PostProcessConfig) -> Result<Self> {
        if config.answer_text == AnswerText::FinalText && tokenizer.is_none() {
            return Err(Error::Config("AnswerText::FinalText needs the tokenizer".into()));
        }
        if config.n_best == 0 || config.max_answer_len == 0 {
            return Err(Error::Config("n_best and max_answer_len must be at least 1".into()));
        }
        Ok(PredictionAccumulator {
            examples,
            tokenizer,
            config,
            next_feature_id: 0,
            candidates: Vec::new(),
            null_score: f32::INFINITY,
            ready: Vec::new(),
        })
    }

    /// Adds one feature's logits (of the feature's real length, or padded longer). Returns the prediction when
    /// this was the example's last window.
    pub fn push(&mut self, feature: &Feature, start_logits: &[f32], end_logits: &[f32]) -> Result<Option<Prediction>> {
        let err = |message: String| Error::Logits { feature_id: feature.id, message };
        if feature.id != self.next_feature_id {
            return Err(err(format!("features must arrive in order; expected feature {}", self.next_feature_id)));
        }
        let n = feature.len();
        if start_logits.len() < n || end_logits.len() < n {
            return Err(err(format!(
                "logits have {} start and {} end values but the feature has {n} tokens",
                start_logits.len(),
                end_logits.len()
            )));
        }
        if self.examples.get(feature.example_index).is_none() {
            return Err(err(format!("example index {} is out of range", feature.example_index)));
        }
        let (s, e) = (&start_logits[..n], &end_logits[..n]);
        if let (Some(&s0), Some(&e0)) = (s.first(), e.first()) {
            self.null_score = self.null_score.min(s0 + e0);
        }
        let in_context = |i: usize| feature.token_offsets.get(i).is_some_and(Option::is_some);
        let (starts, ends) = (top_n(s, self.config.n_best), top_n(e, self.config.n_best));
        for &si in &starts {
            if !in_context(si) || !feature.token_is_max_context.get(si).copied().unwrap_or(false) {
                continue;
            }
            for &ei in &ends {
                if !in_context(ei) || ei < si || ei - si + 1 > self.config.max_answer_len {
                    continue;
                }
                let (Some(Some(a)), Some(Some(b))) = (feature.token_offsets.get(si), feature.token_offsets.get(ei))
                else {
                    continue;
                };
                self.candidates.push(Candidate { start: *a, end: *b, start_logit: s[si], end_logit: e[ei] });
            }
        }
        self.next_feature_id += 1;
        if feature.window_index + 1 < feature.num_windows {
            return Ok(None);
        }
        let pred = self.finalize(&self.examples[feature.example_index])?;
        Ok(Some(pred))
    }

    /// Adds a batch of logits (`[batch, seq]`, rows in the batch's feature order); finished predictions are queued
    /// for [`take_ready`](Self::take_ready).
    pub fn push_batch(&mut self, batch: &crate::Batch, start: ArrayView2<f32>, end: ArrayView2<f32>) -> Result<()> {
        if start.nrows() != batch.len() || end.nrows() != batch.len() {
            return Err(Error::Logits {
                feature_id: batch.feature_ids.first().copied().unwrap_or(0),
                message: format!("batch of {} rows got {} / {} logit rows", batch.len(), start.nrows(), end.nrows()),
            });
        }
        for (f, (s, e)) in batch.features.iter().zip(start.rows().into_iter().zip(end.rows())) {
            let (s, e) = (s.as_standard_layout(), e.as_standard_layout());
            let (s, e) = (s.as_slice().unwrap_or(&[]), e.as_slice().unwrap_or(&[]));
            if let Some(p) = self.push(f, s, e)? {
                self.ready.push(p);
            }
        }
        Ok(())
    }

    /// Predictions finished so far (and not yet taken), in example order.
    pub fn take_ready(&mut self) -> Vec<Prediction> {
        std::mem::take(&mut self.ready)
    }

    fn text_of(&self, ex: &Example, c: &Candidate, words: &Option<DocTokens>) -> Result<String> {
        let raw = ex.context.get(c.start.0..c.end.1).unwrap_or("");
        match (self.config.answer_text, self.tokenizer, words) {
            (AnswerText::FinalText, Some(tok), Some(words)) => {
                let (w0, w1) = (words.word_at_byte(c.start.0), words.word_at_byte(c.end.1.saturating_sub(1)));
                let orig = words.tokens.get(w0..=w1).map(|w| w.join(" ")).unwrap_or_default();
                Ok(final_text(&tok.basic_tokenize(raw)?, &orig, &tok.basic_tokenize(&orig)?))
            }
            _ => Ok(raw.to_owned()),
        }
    }

    fn finalize(&mut self, ex: &Example) -> Result<Prediction> {
        let mut cands = std::mem::take(&mut self.candidates);
        let null_score = std::mem::replace(&mut self.null_score, f32::INFINITY);
        cands.sort_by(|a, b| (b.start_logit + b.end_logit).total_cmp(&(a.start_logit + a.end_logit)));
        let words = (self.config.answer_text == AnswerText::FinalText).then(|| DocTokens::new(&ex.context));
        let mut nbest: Vec<(String, Candidate)> = Vec::new();
        for c in &cands {
            if nbest.len() >= self.config.n_best {
                break;
            }
            let text = self.text_of(ex, c, &words)?;
            if !nbest.iter().any(|(t, _)| *t == text) {
                nbest.push((text, *c));
            }
        }
        let (mut text, score) =
            nbest.first().map(|(t, c)| (t.clone(), c.start_logit + c.end_logit)).unwrap_or((String::new(), 0.0));
        let null = self.config.version_2.then_some(null_score);
        let mut margin = nbest.get(1).map_or(f32::INFINITY, |(_, c)| score - (c.start_logit + c.end_logit));
        if let Some(ns) = null {
            if !nbest.is_empty() {
                margin = margin.min((ns - score - self.config.null_threshold).abs());
            }
            if nbest.is_empty() || ns - score > self.config.null_threshold {
                text.clear();
            }
        }
        let nbest = self.config.keep_nbest.then(|| {
            let max = nbest.iter().map(|(_, c)| c.start_logit + c.end_logit).fold(f32::NEG_INFINITY, f32::max);
            let exps: Vec<f64> =
                nbest.iter().map(|(_, c)| f64::from(c.start_logit + c.end_logit - max).exp()).collect();
            let total: f64 = exps.iter().sum();
            nbest
                .iter()
                .zip(&exps)
                .map(|((t, c), x)| NbestEntry {
                    text: t.clone(),
                    probability: x / total,
                    start_logit: c.start_logit,
                    end_logit: c.end_logit,
                })
                .collect()
        });
        Ok(Prediction { id: ex.id.clone(), text, score, nbest, null_score: null, margin })
    }
}

/// BERT's `get_final_text`: find `pred_tok` (the normalised prediction) in `orig_tok` (the normalised whitespace
/// words `orig`), align both without spaces, and return the matching slice of `orig`; `orig` itself if that fails.
fn final_text(pred_tok: &str, orig: &str, orig_tok: &str) -> String {
    let strip = |s: &str| -> (Vec<char>, Vec<usize>) {
        let (mut chars, mut map) = (Vec::new(), Vec::new());
        for (i, c) in s.chars().enumerate() {
            if c != ' ' {
                chars.push(c);
                map.push(i);
            }
        }
        (chars, map)
    };
    let Some(byte_pos) = orig_tok.find(pred_tok) else { return orig.to_owned() };
    let start = orig_tok[..byte_pos].chars().count();
    let end = start + pred_tok.chars().count().saturating_sub(1);
    let (orig_ns, orig_map) = strip(orig);
    let (tok_ns, tok_map) = strip(orig_tok);
    if orig_ns.len() != tok_ns.len() {
        return orig.to_owned();
    }
    let to_orig = |pos: usize| tok_map.iter().position(|&p| p == pos).and_then(|ns| orig_map.get(ns).copied());
    match (to_orig(start), to_orig(end)) {
        (Some(a), Some(b)) if a <= b => orig.chars().skip(a).take(b - a + 1).collect(),
        _ => orig.to_owned(),
    }
}

struct Ordered<'a, V>(&'a [(&'a str, V)]);

impl<V: Serialize> Serialize for Ordered<'_, V> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

/// Writes `value` as pretty JSON, atomically (unnamed temporary file, synced, linked into place; umask mode).
fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let io = |source: std::io::Error| Error::Io { path: path.to_owned(), source };
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| io(std::io::Error::other(e)))?;
    files::write_atomic(path, &bytes).map_err(io)
}

/// Writes `predictions.json` (id → text, example order) into `dir`, plus `nbest_predictions.json` when predictions
/// carry n-best lists and `null_odds.json` (id → null_score − best score) when they carry null scores. Each file is
/// written to a temporary file and renamed.
pub fn write_predictions(dir: impl AsRef<Path>, predictions: &[Prediction]) -> Result<()> {
    let dir = dir.as_ref();
    let texts: Vec<(&str, &str)> = predictions.iter().map(|p| (p.id.as_str(), p.text.as_str())).collect();
    write_json_atomic(&dir.join("predictions.json"), &Ordered(&texts))?;
    if predictions.iter().all(|p| p.nbest.is_some()) && !predictions.is_empty() {
        let nbest: Vec<(&str, &[NbestEntry])> =
            predictions.iter().map(|p| (p.id.as_str(), p.nbest.as_deref().unwrap_or(&[]))).collect();
        write_json_atomic(&dir.join("nbest_predictions.json"), &Ordered(&nbest))?;
    }
    if predictions.iter().all(|p| p.null_score.is_some()) && !predictions.is_empty() {
        let odds: Vec<(&str, f32)> =
            predictions.iter().map(|p| (p.id.as_str(), p.null_score.unwrap_or(0.0) - p.score)).collect();
        write_json_atomic(&dir.join("null_odds.json"), &Ordered(&odds))?;
    }
    Ok(())
}
