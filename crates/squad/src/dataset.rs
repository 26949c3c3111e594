//! SQuAD v1.1 / v2.0 files as a flat list of examples.

use crate::error::{Error, Result};
use squad_metrics::{Answer, Dataset};
use std::path::Path;
use std::sync::Arc;

/// One question with its (shared) context, in file order.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    /// Question id (the key of predictions.json).
    pub id: String,
    /// Question text.
    pub question: String,
    /// The paragraph's context, shared by all its questions.
    pub context: Arc<str>,
    /// Index of the paragraph in file order (questions with the same index share a context).
    pub context_index: usize,
    /// Gold answers (`answer_start` in characters, as in the file).
    pub answers: Vec<Answer>,
    /// v2.0: the question has no answer.
    pub is_impossible: bool,
}

/// A loaded SQuAD file.
#[derive(Debug, Clone, PartialEq)]
pub struct SquadData {
    /// The file's `version` field.
    pub version: String,
    /// Examples in file order.
    pub examples: Vec<Example>,
}

impl SquadData {
    /// Builds examples from parsed JSON, checking every answer lies inside its context.
    /// `path` only names the source in errors.
    pub fn from_dataset(dataset: Dataset, path: &Path) -> Result<Self> {
        let mut examples = Vec::new();
        let mut context_index = 0;
        for (ai, article) in dataset.data.into_iter().enumerate() {
            for (pi, para) in article.paragraphs.into_iter().enumerate() {
                let context: Arc<str> = Arc::from(para.context);
                let n_chars = context.chars().count();
                for (qi, qa) in para.qas.into_iter().enumerate() {
                    for (ni, a) in qa.answers.iter().enumerate() {
                        let end = a.answer_start.checked_add(a.text.chars().count());
                        if end.is_none_or(|e| e > n_chars) {
                            return Err(Error::Json {
                                path: path.to_owned(),
                                json_path: format!("data[{ai}].paragraphs[{pi}].qas[{qi}].answers[{ni}].answer_start"),
                                message: format!(
                                    "answer {:?} at character {} does not fit in a context of {n_chars} characters",
                                    a.text, a.answer_start
                                ),
                            });
                        }
                    }
                    examples.push(Example {
                        id: qa.id,
                        question: qa.question,
                        context: Arc::clone(&context),
                        context_index,
                        is_impossible: qa.is_impossible.unwrap_or(false),
                        answers: qa.answers,
                    });
                }
                context_index += 1;
            }
        }
        Ok(SquadData { version: dataset.version, examples })
    }

    /// Keeps only the first `n` questions (SQuAD file order).
    pub fn limit(&mut self, n: usize) {
        self.examples.truncate(n);
    }

    /// Whether this is a v2.0 file (version 2.x or some question marked impossible).
    pub fn is_v2(&self) -> bool {
        self.version.trim_start_matches('v').starts_with('2') || self.examples.iter().any(|e| e.is_impossible)
    }
}

/// Reads a SQuAD v1.1 or v2.0 JSON file. Malformed JSON is an [`Error::Json`] naming the file and the JSON path of
/// the bad field.
pub fn load_squad(path: impl AsRef<Path>) -> Result<SquadData> {
    let path = path.as_ref();
    SquadData::from_dataset(read_dataset(path)?, path)
}

/// Parses a SQuAD JSON file into the official data model (with the gold answers, for scoring). Malformed JSON is an
/// [`Error::Json`] naming the file and the JSON path of the bad field.
pub fn read_dataset(path: impl AsRef<Path>) -> Result<Dataset> {
    let path = path.as_ref();
    let bytes = files::read_regular(path, files::MAX_INPUT_BYTES)
        .map_err(|source| Error::Io { path: path.to_owned(), source })?;
    // A byte-order mark before the JSON (an editor's) is not part of it.
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let dataset: Dataset = serde_path_to_error::deserialize(de).map_err(|e| {
        let json_path = e.path().to_string();
        let message = e.into_inner().to_string();
        // At the top the file is not SQuAD at all (text, another JSON): say what was expected.
        let message = if json_path == "." {
            format!("not a SQuAD dataset (a JSON object with \"data\": [articles]): {message}")
        } else {
            message
        };
        Error::Json { path: path.to_owned(), json_path, message }
    })?;
    Ok(dataset)
}

/// BERT's whitespace tokens of a context, as the original `read_squad_examples` builds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocTokens {
    /// The whitespace-separated words.
    pub tokens: Vec<String>,
    /// Byte span of each word in the context.
    pub spans: Vec<(usize, usize)>,
    /// For every character of the context, the index of the word it belongs to (whitespace maps to the previous
    /// word, leading whitespace to 0).
    pub char_to_word: Vec<usize>,
}

impl DocTokens {
    /// Splits on BERT's whitespace (space, tab, CR, LF, U+202F). Leading whitespace maps to word 0 (the reference
    /// stores -1 there, which no answer can start on).
    pub fn new(context: &str) -> Self {
        let is_ws = |c: char| matches!(c, ' ' | '\t' | '\r' | '\n' | '\u{202f}');
        let (mut tokens, mut spans, mut char_to_word) = (Vec::<String>::new(), Vec::new(), Vec::new());
        let mut prev_ws = true;
        for (b, c) in context.char_indices() {
            if is_ws(c) {
                prev_ws = true;
            } else {
                if prev_ws {
                    tokens.push(String::new());
                    spans.push((b, b));
                }
                if let (Some(t), Some(s)) = (tokens.last_mut(), spans.last_mut()) {
                    t.push(c);
                    s.1 = b + c.len_utf8();
                }
                prev_ws = false;
            }
            char_to_word.push(tokens.len().saturating_sub(1));
        }
        DocTokens { tokens, spans, char_to_word }
    }

    /// Index of the word containing (or, for whitespace, preceding) the byte position `byte`.
    pub fn word_at_byte(&self, byte: usize) -> usize {
        self.spans.partition_point(|s| s.0 <= byte).saturating_sub(1)
    }
}
