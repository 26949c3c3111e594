//! Official SQuAD v1.1 and v2.0 scoring (exact match and token F1), with the SQuAD JSON dataset types.
//!
//! This crate depends on `serde` and `serde_json` only, so it can be used alone. It reproduces the semantics of the
//! official `evaluate-v1.1.py` and `evaluate-v2.0.py` scripts:
//!
//! * answers are normalised by [`normalize_answer`] (Unicode lower-case, drop ASCII punctuation, drop the words
//!   `a`/`an`/`the`, collapse whitespace);
//! * per question, EM and F1 are the maximum over the gold answers, and the totals are `100 * sum / total`, summed in
//!   dataset order like the scripts do;
//! * v1.1 F1 is 0 when no token overlaps (even if both are empty); v2.0 F1 is `EM` when either side has no tokens,
//!   unanswerable questions have the gold answer `""`, and the `best_*` threshold search follows the official rules.
//!
//! Deliberate differences, all for inputs on which the official scripts crash or are ill-defined: a missing
//! prediction counts as 0 (and is reported in `missing`) in both versions; a v1.1 question without gold answers
//! scores 0; in the v2.0 threshold search, questions whose `na_prob` ties are visited in dataset order (the official
//! script uses the order of the na-prob file, which the standard tools write in dataset order).
//!
//! Scoring predictions (question id -> answer text) against a dataset:
//!
//! ```
//! use std::collections::HashMap;
//! use qdq_squad_metrics::{Dataset, evaluate_v1, exact_match, f1_v1};
//!
//! let dataset: Dataset = serde_json::from_str(r#"{"version": "1.1", "data": [{"title": "t", "paragraphs": [
//!     {"context": "The Eiffel Tower is in Paris.", "qas": [
//!         {"id": "q1", "question": "Where is it?", "answers": [{"text": "Paris", "answer_start": 23}]},
//!         {"id": "q2", "question": "What is in Paris?", "answers": [{"text": "The Eiffel Tower", "answer_start": 0}]}
//!     ]}]}]}"#)?;
//! let predictions: HashMap<String, String> =
//!     [("q1", "paris."), ("q2", "Eiffel")].into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
//! let m = evaluate_v1(&dataset, &predictions);
//! // q1 matches after normalisation (case, punctuation); q2 has one of two gold tokens ("the" is dropped).
//! assert_eq!((m.exact_match, m.total, m.missing), (50.0, 2, 0));
//! assert!((m.f1 - 100.0 * (1.0 + 2.0 / 3.0) / 2.0).abs() < 1e-9);
//! assert_eq!((exact_match("The  Paris!", "paris"), f1_v1("Eiffel", "The Eiffel Tower")), (1.0, 2.0 / 3.0));
//! # Ok::<(), serde_json::Error>(())
//! ```

mod paired;

pub use paired::{PairedDifference, Proportion, paired_difference};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// A SQuAD JSON file (v1.1 or v2.0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dataset {
    /// `"1.1"` or `"v2.0"` in the official files; empty when absent.
    #[serde(default)]
    pub version: String,
    /// Articles in file order.
    pub data: Vec<Article>,
}

/// One Wikipedia article.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Article {
    /// Article title (may be absent in hand-made files).
    #[serde(default)]
    pub title: String,
    /// Paragraphs in file order.
    pub paragraphs: Vec<Paragraph>,
}

/// One context paragraph and its questions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Paragraph {
    /// The context text answers are taken from.
    pub context: String,
    /// Questions in file order.
    pub qas: Vec<Qa>,
}

/// One question with its gold answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Qa {
    /// Unique question id (the key of the predictions file).
    pub id: String,
    /// The question text.
    pub question: String,
    /// Gold answers; empty for unanswerable v2.0 questions.
    #[serde(default)]
    pub answers: Vec<Answer>,
    /// v2.0: the question has no answer in the context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_impossible: Option<bool>,
    /// v2.0: plausible (but wrong) answers of an unanswerable question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plausible_answers: Option<Vec<Answer>>,
}

/// A gold answer: its text and the character (Unicode scalar) index where it starts in the context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// Answer text.
    pub text: String,
    /// Start position in the context, counted in characters as the official files do.
    pub answer_start: usize,
}

impl Dataset {
    /// Iterates over every question in file order (articles, then paragraphs, then questions).
    pub fn questions(&self) -> impl Iterator<Item = &Qa> {
        self.data.iter().flat_map(|a| a.paragraphs.iter()).flat_map(|p| p.qas.iter())
    }

    /// Number of questions.
    pub fn num_questions(&self) -> usize {
        self.questions().count()
    }

    /// Question ids that occur more than once, each once, in file order of their second occurrence. A predictions
    /// file maps an id to one answer, so every copy of a duplicated id is scored against that one answer.
    pub fn duplicate_ids(&self) -> Vec<&str> {
        let mut seen = std::collections::HashSet::new();
        let mut dup = Vec::new();
        for q in self.questions() {
            if !seen.insert(q.id.as_str()) && !dup.contains(&q.id.as_str()) {
                dup.push(q.id.as_str());
            }
        }
        dup
    }

    /// A copy restricted to the first `n` questions in file order; paragraphs and articles left without questions
    /// are dropped.
    pub fn first_n(&self, n: usize) -> Dataset {
        self.questions_in(0..n)
    }

    /// A copy restricted to the last `n` questions in file order (all of them if there are fewer): questions held
    /// out from an evaluation of the first ones.
    ///
    /// ```
    /// use qdq_squad_metrics::Dataset;
    ///
    /// let d: Dataset = serde_json::from_str(r#"{"version": "1.1", "data": [{"title": "t", "paragraphs": [
    ///     {"context": "a b", "qas": [{"id": "1", "question": "?", "answers": [{"text": "a", "answer_start": 0}]},
    ///                                {"id": "2", "question": "?", "answers": [{"text": "b", "answer_start": 2}]}]},
    ///     {"context": "c", "qas": [{"id": "3", "question": "?", "answers": [{"text": "c", "answer_start": 0}]}]}]}]}"#)
    /// .unwrap();
    /// let ids = |d: &Dataset| d.questions().map(|q| q.id.clone()).collect::<Vec<_>>();
    /// assert_eq!(ids(&d.last_n(2)), ["2", "3"]);
    /// assert_eq!(ids(&d.first_n(2)), ["1", "2"]);
    /// assert_eq!(ids(&d.last_n(9)), ["1", "2", "3"]);
    /// ```
    pub fn last_n(&self, n: usize) -> Dataset {
        let total = self.num_questions();
        self.questions_in(total.saturating_sub(n)..total)
    }

    /// A copy restricted to the questions whose file-order index is in `range`.
    fn questions_in(&self, range: std::ops::Range<usize>) -> Dataset {
        let mut index = 0;
        self.questions_where(|_| {
            index += 1;
            range.contains(&(index - 1))
        })
    }

    /// A copy restricted to the questions `keep` accepts (called once per question, in file order); paragraphs and
    /// articles left without questions are dropped.
    ///
    /// ```
    /// use qdq_squad_metrics::Dataset;
    ///
    /// let d: Dataset = serde_json::from_str(r#"{"version": "1.1", "data": [{"title": "t", "paragraphs": [
    ///     {"context": "a b", "qas": [{"id": "1", "question": "?", "answers": [{"text": "a", "answer_start": 0}]},
    ///                                {"id": "2", "question": "?", "answers": [{"text": "b", "answer_start": 2}]}]},
    ///     {"context": "c", "qas": [{"id": "3", "question": "?", "answers": [{"text": "c", "answer_start": 0}]}]}]}]}"#)
    /// .unwrap();
    /// let odd = d.questions_where(|q| q.id != "2");
    /// assert_eq!(odd.questions().map(|q| q.id.as_str()).collect::<Vec<_>>(), ["1", "3"]);
    /// assert_eq!(d.questions_where(|q| q.id == "3").data[0].paragraphs.len(), 1);
    /// ```
    pub fn questions_where(&self, mut keep: impl FnMut(&Qa) -> bool) -> Dataset {
        let mut data = Vec::new();
        for article in &self.data {
            let mut paragraphs = Vec::new();
            for p in &article.paragraphs {
                let qas: Vec<Qa> = p.qas.iter().filter(|q| keep(q)).cloned().collect();
                if !qas.is_empty() {
                    paragraphs.push(Paragraph { context: p.context.clone(), qas });
                }
            }
            if !paragraphs.is_empty() {
                data.push(Article { title: article.title.clone(), paragraphs });
            }
        }
        Dataset { version: self.version.clone(), data }
    }

    /// Whether the file looks like SQuAD v2.0: its version says 2.x, or some question is marked impossible.
    pub fn is_v2(&self) -> bool {
        let v = self.version.trim_start_matches('v');
        v.starts_with('2') || self.questions().any(|q| q.is_impossible.is_some())
    }
}

/// Error reading a dataset, predictions or na-prob file.
#[derive(Debug)]
pub enum Error {
    /// The file could not be read.
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not the JSON that was expected.
    Json {
        /// The file.
        path: PathBuf,
        /// What the file should contain.
        expected: &'static str,
        /// The parser's message, with line and column.
        source: serde_json::Error,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { path, source } => write!(f, "cannot read {}: {source}", path.display()),
            Error::Json { path, expected, source } => {
                write!(f, "{} is not {expected}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::Json { source, .. } => Some(source),
        }
    }
}

/// Largest text input read whole (a dataset, a predictions file, a vocabulary): 4 GiB.
pub const MAX_TEXT_INPUT_BYTES: u64 = 4 << 30;

/// The bytes of `path` if it is a regular file of at most [`MAX_TEXT_INPUT_BYTES`]: a FIFO would block, a device
/// such as `/dev/zero` would be read until memory runs out. The errors are `InvalidInput` I/O errors saying which.
///
/// ```
/// let e = qdq_squad_metrics::read_regular_file(std::path::Path::new("/dev/zero")).unwrap_err();
/// assert!(e.to_string().contains("not a regular file"));
/// ```
pub fn read_regular_file(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let invalid = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, m);
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        // This crate reads with std alone (users can take the scorer by itself): `files::what_it_is`, in short.
        let what = if meta.is_dir() { "a directory" } else { "a pipe or a device" };
        return Err(invalid(format!("{what}, not a regular file")));
    }
    if meta.len() > MAX_TEXT_INPUT_BYTES {
        return Err(invalid(format!("{} bytes, more than the {MAX_TEXT_INPUT_BYTES} read as one input", meta.len())));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // `take`: a file that grows while it is read stops at the limit.
    file.take(MAX_TEXT_INPUT_BYTES).read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path, expected: &'static str) -> Result<T, Error> {
    let bytes = read_regular_file(path).map_err(|source| Error::Io { path: path.to_owned(), source })?;
    // A byte-order mark before the JSON (an editor's) is not part of it.
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
    serde_json::from_slice(bytes).map_err(|source| Error::Json { path: path.to_owned(), expected, source })
}

/// Reads a SQuAD dataset JSON file.
pub fn load_dataset(path: impl AsRef<Path>) -> Result<Dataset, Error> {
    read_json(path.as_ref(), "a SQuAD dataset (an object with \"data\": [articles])")
}

/// Reads a predictions file: a JSON object mapping question id to answer text.
pub fn load_predictions(path: impl AsRef<Path>) -> Result<HashMap<String, String>, Error> {
    read_json(path.as_ref(), "a predictions file (an object mapping question id to answer text)")
}

/// Reads a na-prob file: a JSON object mapping question id to the probability of "no answer".
pub fn load_na_probs(path: impl AsRef<Path>) -> Result<HashMap<String, f64>, Error> {
    read_json(path.as_ref(), "a na-prob file (an object mapping question id to a number)")
}

/// Python's `string.punctuation`.
const PUNCTUATION: &str = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

/// Python's `str.isspace` (what `str.split()` splits on): Unicode White_Space plus the ASCII separators 0x1C..0x1F.
fn py_is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python `re`'s Unicode `\w`: alphanumeric or underscore.
fn py_is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The official SQuAD answer normalisation: lower-case, remove punctuation, remove articles, fix whitespace.
pub fn normalize_answer(s: &str) -> String {
    let no_punc: String = s.to_lowercase().chars().filter(|c| !PUNCTUATION.contains(*c)).collect();
    // `\b(a|an|the)\b` only matches whole runs of word characters, so replace such runs.
    let mut no_articles = String::with_capacity(no_punc.len());
    let mut rest = no_punc.as_str();
    while let Some(first) = rest.chars().next() {
        let is_word = py_is_word(first);
        let end = rest.find(|c: char| py_is_word(c) != is_word).unwrap_or(rest.len());
        let (run, tail) = rest.split_at(end);
        if is_word && matches!(run, "a" | "an" | "the") {
            no_articles.push(' ');
        } else {
            no_articles.push_str(run);
        }
        rest = tail;
    }
    no_articles.split(py_is_space).filter(|t| !t.is_empty()).collect::<Vec<_>>().join(" ")
}

fn tokens(s: &str) -> Vec<String> {
    normalize_answer(s).split(' ').filter(|t| !t.is_empty()).map(str::to_owned).collect()
}

/// Number of tokens common to both lists, counted as a multiset.
fn overlap(a: &[String], b: &[String]) -> usize {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for t in a {
        *counts.entry(t).or_default() += 1;
    }
    b.iter()
        .filter(|t| match counts.get_mut(t.as_str()) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        })
        .count()
}

fn f1_from_tokens(pred: &[String], gold: &[String]) -> f64 {
    let same = overlap(pred, gold);
    if same == 0 {
        return 0.0;
    }
    let precision = same as f64 / pred.len() as f64;
    let recall = same as f64 / gold.len() as f64;
    2.0 * precision * recall / (precision + recall)
}

/// Exact match (both versions): 1.0 when the normalised texts are equal.
pub fn exact_match(prediction: &str, gold: &str) -> f64 {
    f64::from(u8::from(normalize_answer(prediction) == normalize_answer(gold)))
}

/// v1.1 token F1: 0 when no token overlaps (also when both are empty).
pub fn f1_v1(prediction: &str, gold: &str) -> f64 {
    f1_from_tokens(&tokens(prediction), &tokens(gold))
}

/// v2.0 token F1: when either side has no tokens, 1.0 if both have none and 0.0 otherwise.
pub fn f1_v2(prediction: &str, gold: &str) -> f64 {
    let (p, g) = (tokens(prediction), tokens(gold));
    if p.is_empty() || g.is_empty() {
        return f64::from(u8::from(p == g));
    }
    f1_from_tokens(&p, &g)
}

fn max_over<'a>(golds: impl Iterator<Item = &'a str>, score: impl Fn(&str) -> f64) -> f64 {
    golds.map(score).fold(0.0, f64::max)
}

/// Each question's F1 (0..1, dataset order; a missing prediction scores 0): the best token F1 over its gold answers,
/// by v1.1's rule, or v2.0's when `v2` (an unanswerable question's gold answer is the empty string). Their mean is
/// [`evaluate_v1`]'s F1 over 100; two models' per-question differences give the spread of their F1 difference.
///
/// ```
/// use std::collections::HashMap;
/// let data: qdq_squad_metrics::Dataset = serde_json::from_str(r#"{"version": "1.1", "data": [{"title": "t",
///     "paragraphs": [{"context": "the cat sat", "qas": [
///         {"id": "a", "question": "who?", "answers": [{"text": "the cat", "answer_start": 0}]},
///         {"id": "b", "question": "did?", "answers": [{"text": "sat", "answer_start": 8}]}]}]}]}"#).unwrap();
/// let preds = HashMap::from([("a".to_string(), "cat".to_string())]);
/// assert_eq!(qdq_squad_metrics::question_f1(&data, &preds, false), vec![1.0, 0.0]);
/// assert_eq!(qdq_squad_metrics::evaluate_v1(&data, &preds).f1, 50.0);
/// ```
pub fn question_f1(dataset: &Dataset, predictions: &HashMap<String, String>, v2: bool) -> Vec<f64> {
    per_question(dataset, predictions, v2, if v2 { f1_v2 } else { f1_v1 })
}

/// Each question's exact match (0 or 1, dataset order; a missing prediction scores 0), as [`question_f1`] gives F1:
/// their mean is the exact-match score over 100.
///
/// ```
/// use std::collections::HashMap;
/// let data: qdq_squad_metrics::Dataset = serde_json::from_str(r#"{"version": "1.1", "data": [{"title": "t",
///     "paragraphs": [{"context": "the cat sat", "qas": [
///         {"id": "a", "question": "who?", "answers": [{"text": "the cat", "answer_start": 0}]},
///         {"id": "b", "question": "did?", "answers": [{"text": "sat", "answer_start": 8}]}]}]}]}"#).unwrap();
/// let preds = HashMap::from([("a".to_string(), "The cat".to_string()), ("b".to_string(), "cat".to_string())]);
/// assert_eq!(qdq_squad_metrics::question_em(&data, &preds, false), vec![1.0, 0.0]);
/// ```
pub fn question_em(dataset: &Dataset, predictions: &HashMap<String, String>, v2: bool) -> Vec<f64> {
    per_question(dataset, predictions, v2, exact_match)
}

/// `score` of each question's prediction against its best gold answer (v2.0: an unanswerable question's gold answer
/// is the empty string).
fn per_question(
    dataset: &Dataset,
    predictions: &HashMap<String, String>,
    v2: bool,
    score: fn(&str, &str) -> f64,
) -> Vec<f64> {
    dataset
        .questions()
        .map(|qa| {
            let Some(pred) = predictions.get(&qa.id) else { return 0.0 };
            if !v2 {
                return max_over(qa.answers.iter().map(|a| a.text.as_str()), |g| score(pred, g));
            }
            let golds: Vec<&str> =
                qa.answers.iter().map(|a| a.text.as_str()).filter(|t| !normalize_answer(t).is_empty()).collect();
            if golds.is_empty() { score(pred, "") } else { max_over(golds.into_iter(), |g| score(pred, g)) }
        })
        .collect()
}

/// Standard error, in F1 points, of the mean of `ours - theirs` (per-question F1 in 0..1 as [`question_f1`] gives
/// them, paired by question): the sample standard deviation of the differences over the square root of their number;
/// NaN under two questions. Twice it is how far two models' F1 difference moves with which questions were drawn.
///
/// ```
/// // Differences (points) 0, 0, 100, -100: mean 0, sample variance 20000/3, SE sqrt(20000/3/4).
/// let se = qdq_squad_metrics::paired_standard_error(&[1.0, 0.5, 1.0, 0.0], &[1.0, 0.5, 0.0, 1.0]);
/// assert!((se - (20000.0f64 / 3.0 / 4.0).sqrt()).abs() < 1e-9);
/// // The same answers everywhere: no spread at all; one question: undefined.
/// assert_eq!(qdq_squad_metrics::paired_standard_error(&[0.3, 0.9], &[0.3, 0.9]), 0.0);
/// assert!(qdq_squad_metrics::paired_standard_error(&[1.0], &[0.0]).is_nan());
/// ```
pub fn paired_standard_error(ours: &[f64], theirs: &[f64]) -> f64 {
    let d: Vec<f64> = ours.iter().zip(theirs).map(|(a, b)| 100.0 * (a - b)).collect();
    let n = d.len() as f64;
    if d.len() < 2 {
        return f64::NAN;
    }
    let mean = d.iter().sum::<f64>() / n;
    (d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0) / n).sqrt()
}

/// SQuAD v1.1 result, serialised like the official script (`exact_match`, `f1`; the counts are skipped).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricsV1 {
    /// Exact match, percent.
    pub exact_match: f64,
    /// Token F1, percent.
    pub f1: f64,
    /// Number of questions in the dataset.
    #[serde(skip)]
    pub total: usize,
    /// Questions without a prediction (scored 0).
    #[serde(skip)]
    pub missing: usize,
}

/// Official v1.1 evaluation. Missing predictions score 0 and are counted in `missing`.
pub fn evaluate_v1(dataset: &Dataset, predictions: &HashMap<String, String>) -> MetricsV1 {
    let (mut em, mut f1, mut total, mut missing) = (0.0, 0.0, 0usize, 0usize);
    for qa in dataset.questions() {
        total += 1;
        let Some(pred) = predictions.get(&qa.id) else {
            missing += 1;
            continue;
        };
        let golds = || qa.answers.iter().map(|a| a.text.as_str());
        em += max_over(golds(), |g| exact_match(pred, g));
        f1 += max_over(golds(), |g| f1_v1(pred, g));
    }
    let pct = |x: f64| if total == 0 { 0.0 } else { 100.0 * x / total as f64 };
    MetricsV1 { exact_match: pct(em), f1: pct(f1), total, missing }
}

/// SQuAD v2.0 result, serialised with the official script's keys and order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricsV2 {
    /// Exact match after applying the na-prob threshold, percent.
    pub exact: f64,
    /// F1 after applying the na-prob threshold, percent.
    pub f1: f64,
    /// Number of questions.
    pub total: usize,
    /// Exact match on answerable questions (absent when there are none).
    #[serde(rename = "HasAns_exact", skip_serializing_if = "Option::is_none")]
    pub has_ans_exact: Option<f64>,
    /// F1 on answerable questions.
    #[serde(rename = "HasAns_f1", skip_serializing_if = "Option::is_none")]
    pub has_ans_f1: Option<f64>,
    /// Number of answerable questions.
    #[serde(rename = "HasAns_total", skip_serializing_if = "Option::is_none")]
    pub has_ans_total: Option<usize>,
    /// Exact match on unanswerable questions (absent when there are none).
    #[serde(rename = "NoAns_exact", skip_serializing_if = "Option::is_none")]
    pub no_ans_exact: Option<f64>,
    /// F1 on unanswerable questions.
    #[serde(rename = "NoAns_f1", skip_serializing_if = "Option::is_none")]
    pub no_ans_f1: Option<f64>,
    /// Number of unanswerable questions.
    #[serde(rename = "NoAns_total", skip_serializing_if = "Option::is_none")]
    pub no_ans_total: Option<usize>,
    /// Best exact match over all na-prob thresholds (only with na-probs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_exact: Option<f64>,
    /// The threshold reaching `best_exact`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_exact_thresh: Option<f64>,
    /// Best F1 over all na-prob thresholds (only with na-probs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_f1: Option<f64>,
    /// The threshold reaching `best_f1`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_f1_thresh: Option<f64>,
    /// Questions without a prediction (scored 0; not serialised).
    #[serde(skip)]
    pub missing: usize,
}

struct Scored<'a> {
    id: &'a str,
    has_ans: bool,
    pred: Option<&'a str>,
    exact: f64,
    f1: f64,
}

/// The official best-threshold search over questions sorted by na-prob (stable, so ties keep dataset order).
fn best_thresh(scored: &[Scored], na_probs: &HashMap<String, f64>, score: impl Fn(&Scored) -> f64) -> (f64, f64) {
    let num_no_ans = scored.iter().filter(|s| !s.has_ans).count();
    let mut order: Vec<(&Scored, f64)> = scored.iter().filter_map(|s| na_probs.get(s.id).map(|&p| (s, p))).collect();
    order.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut cur = num_no_ans as f64;
    let (mut best, mut thresh) = (cur, 0.0);
    for (s, p) in order {
        cur += if s.has_ans {
            score(s)
        } else if s.pred.is_some_and(str::is_empty) {
            0.0
        } else {
            -1.0
        };
        if cur > best {
            best = cur;
            thresh = p;
        }
    }
    let total = scored.len();
    (if total == 0 { 0.0 } else { 100.0 * best / total as f64 }, thresh)
}

/// Each question of `dataset` scored against `predictions` as v2.0 does (an unanswerable question's gold answer is
/// the empty string), and how many questions have no prediction.
fn score_v2<'a>(dataset: &'a Dataset, predictions: &'a HashMap<String, String>) -> (Vec<Scored<'a>>, usize) {
    let mut scored = Vec::new();
    let mut missing = 0;
    for qa in dataset.questions() {
        let mut golds: Vec<&str> =
            qa.answers.iter().map(|a| a.text.as_str()).filter(|t| !normalize_answer(t).is_empty()).collect();
        let has_ans = !golds.is_empty();
        if !has_ans {
            golds.push("");
        }
        let pred = predictions.get(&qa.id).map(String::as_str);
        let (exact, f1) = match pred {
            Some(p) => (
                max_over(golds.iter().copied(), |g| exact_match(p, g)),
                max_over(golds.iter().copied(), |g| f1_v2(p, g)),
            ),
            None => {
                missing += 1;
                (0.0, 0.0)
            }
        };
        scored.push(Scored { id: &qa.id, has_ans, pred, exact, f1 });
    }
    (scored, missing)
}

/// Official v2.0 evaluation.
///
/// A question is predicted unanswerable when its na-prob is `> threshold` (the official default threshold is 1.0;
/// questions absent from `na_probs` count as na-prob 0). With `na_probs`, the `best_*` fields are filled.
pub fn evaluate_v2(
    dataset: &Dataset,
    predictions: &HashMap<String, String>,
    na_probs: Option<&HashMap<String, f64>>,
    threshold: f64,
) -> MetricsV2 {
    let (scored, missing) = score_v2(dataset, predictions);
    let thresholded = |s: &Scored, raw: f64| {
        let p = na_probs.and_then(|m| m.get(s.id)).copied().unwrap_or(0.0);
        if p > threshold { f64::from(u8::from(!s.has_ans)) } else { raw }
    };
    let summary = |keep: &dyn Fn(&Scored) -> bool| {
        let subset: Vec<&Scored> = scored.iter().filter(|s| keep(s)).collect();
        let n = subset.len();
        let sum = |f: &dyn Fn(&Scored) -> f64| subset.iter().map(|s| f(s)).sum::<f64>();
        let pct = |x: f64| if n == 0 { 0.0 } else { 100.0 * x / n as f64 };
        (pct(sum(&|s| thresholded(s, s.exact))), pct(sum(&|s| thresholded(s, s.f1))), n)
    };
    let (exact, f1, total) = summary(&|_| true);
    let (ha_e, ha_f, ha_n) = summary(&|s| s.has_ans);
    let (na_e, na_f, na_n) = summary(&|s| !s.has_ans);
    let has = (ha_n > 0).then_some((ha_e, ha_f, ha_n));
    let no = (na_n > 0).then_some((na_e, na_f, na_n));
    let best_e = na_probs.map(|m| best_thresh(&scored, m, |s| s.exact));
    let best_f = na_probs.map(|m| best_thresh(&scored, m, |s| s.f1));
    MetricsV2 {
        exact,
        f1,
        total,
        has_ans_exact: has.map(|h| h.0),
        has_ans_f1: has.map(|h| h.1),
        has_ans_total: has.map(|h| h.2),
        no_ans_exact: no.map(|h| h.0),
        no_ans_f1: no.map(|h| h.1),
        no_ans_total: no.map(|h| h.2),
        best_exact: best_e.map(|b| b.0),
        best_exact_thresh: best_e.map(|b| b.1),
        best_f1: best_f.map(|b| b.0),
        best_f1_thresh: best_f.map(|b| b.1),
        missing,
    }
}
