//! The texts an embedding model is measured on, and calibrated with: a SQuAD file as a retrieval task (each question
//! retrieves its own paragraph among all of the file's paragraphs, the protocol of MTEB's XQuADRetrieval and of
//! ReQA), the user's own retrieval data (JSONL queries naming their relevant documents, and a corpus file), or plain
//! texts (text lines, TSV, JSONL), on which only FP32's and INT8's embeddings are compared.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::disk::read_text;
use crate::error::{Error, Result};

/// Texts to embed; with `retrieval`, the first `retrieval.queries` are queries and the rest the corpus.
#[derive(Debug, Clone)]
pub struct EmbedData {
    /// The file the texts come from.
    pub path: PathBuf,
    pub texts: Vec<String>,
    pub retrieval: Option<Retrieval>,
}

/// Which documents each query should find.
#[derive(Debug, Clone, PartialEq)]
pub struct Retrieval {
    /// Queries (the first texts).
    pub queries: usize,
    /// Per query, its relevant documents (index among the documents) and their grade (1 for SQuAD's one paragraph).
    pub relevant: Vec<Vec<(usize, f64)>>,
    /// The corpus file, when it is not the queries' own.
    pub corpus: Option<PathBuf>,
}

impl EmbedData {
    /// Reads `path`: a SQuAD `.json` (its first `first` questions as queries, 0 = all, and all its paragraphs as the
    /// corpus), `.jsonl` queries with `relevant` ids and `corpus` beside them, or texts (the first `first`).
    pub fn load(path: &Path, corpus: Option<&Path>, first: usize) -> Result<EmbedData> {
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or_default().to_ascii_lowercase();
        if ext == "json" {
            return squad_retrieval(path, first);
        }
        if corpus.is_some() && ext != "jsonl" {
            return Err(Error::Usage(format!(
                "--corpus goes with queries in JSONL ({{\"text\": ..., \"relevant\": [ids]}} per line); {} is not a \
                 .jsonl file",
                path.display()
            )));
        }
        let content = text_of(path)?;
        if corpus.is_none() && ext == "jsonl" && names_relevant(&content) {
            tracing::warn!(
                "{}: its lines name relevant documents, but no --corpus holds them: the texts are compared as texts \
                 (fidelity, neighbours), not scored on retrieval",
                path.display()
            );
        }
        let data = match corpus {
            Some(corpus) => labelled_retrieval(path, &content, corpus, first)?,
            None => EmbedData { path: path.to_path_buf(), texts: plain_texts(path, &content, first)?, retrieval: None },
        };
        if data.texts.is_empty() {
            return Err(Error::Input { path: path.to_path_buf(), reason: "holds no text".into() });
        }
        Ok(data)
    }

    /// Texts to calibrate on from `path`: from a SQuAD file both kinds a deployed model embeds, the first `first`
    /// questions (0 = all) and the paragraphs they ask about, each paragraph before its questions; from any other
    /// file its first `first` texts (a JSONL file's queries and, beside `corpus`, nothing else).
    pub fn calibration_texts(path: &Path, first: usize) -> Result<Vec<String>> {
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or_default().to_ascii_lowercase();
        if ext != "json" {
            return plain_texts(path, &text_of(path)?, first);
        }
        let dataset = squad::read_dataset(path)?;
        let limit = if first == 0 { usize::MAX } else { first };
        let (mut texts, mut questions) = (vec![], 0);
        for p in dataset.data.iter().flat_map(|a| &a.paragraphs) {
            if questions >= limit {
                break;
            }
            let asked: Vec<&str> = p.qas.iter().take(limit - questions).map(|q| q.question.as_str()).collect();
            questions += asked.len();
            texts.push(p.context.clone());
            texts.extend(asked.into_iter().map(str::to_owned));
        }
        Ok(texts)
    }

    /// Texts held out from an evaluation of the first ones: from a SQuAD file its last `last` questions and the
    /// paragraphs they ask about (each paragraph before its questions), from any other file its last `last` texts.
    pub fn held_out_texts(path: &Path, last: usize) -> Result<Vec<String>> {
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or_default().to_ascii_lowercase();
        let texts = if ext == "json" {
            let dataset = squad::read_dataset(path)?.last_n(last);
            let mut texts = vec![];
            for p in dataset.data.iter().flat_map(|a| &a.paragraphs) {
                texts.push(p.context.clone());
                texts.extend(p.qas.iter().map(|q| q.question.clone()));
            }
            texts
        } else {
            let all = plain_texts(path, &text_of(path)?, 0)?;
            all[all.len().saturating_sub(last)..].to_vec()
        };
        if texts.is_empty() {
            return Err(Error::Input { path: path.to_path_buf(), reason: "holds no text".into() });
        }
        Ok(texts)
    }

    /// Queries, when this is a retrieval set.
    pub fn queries(&self) -> usize {
        self.retrieval.as_ref().map_or(0, |r| r.queries)
    }
}

/// Whether the first line of a JSONL file names relevant documents (retrieval queries).
fn names_relevant(content: &str) -> bool {
    let first = content.lines().find(|l| !l.trim().is_empty()).unwrap_or_default();
    serde_json::from_str::<serde_json::Value>(first).is_ok_and(|v| v.get("relevant").is_some())
}

/// The file as UTF-8 text.
fn text_of(path: &Path) -> Result<String> {
    read_text(path, "text lines, TSV, JSONL or a SQuAD .json")
}

/// A SQuAD file as a retrieval set: its first `first` questions retrieve among all of its paragraphs.
fn squad_retrieval(path: &Path, first: usize) -> Result<EmbedData> {
    let dataset = squad::read_dataset(path)?;
    let paragraphs: Vec<&squad_metrics::Paragraph> = dataset.data.iter().flat_map(|a| &a.paragraphs).collect();
    let limit = if first == 0 { usize::MAX } else { first };
    let (mut queries, mut relevant) = (vec![], vec![]);
    for (k, p) in paragraphs.iter().enumerate() {
        for q in &p.qas {
            if queries.len() < limit {
                queries.push(q.question.clone());
                relevant.push(vec![(k, 1.0)]);
            }
        }
    }
    if queries.is_empty() {
        return Err(Error::Input { path: path.to_path_buf(), reason: "holds no question".into() });
    }
    let n = queries.len();
    let mut texts = queries;
    texts.extend(paragraphs.iter().map(|p| p.context.clone()));
    Ok(EmbedData { path: path.to_path_buf(), texts, retrieval: Some(Retrieval { queries: n, relevant, corpus: None }) })
}

/// Every text of a text-lines, TSV or JSONL file (a line's pair, if any, as a text of its own), the first `first`.
fn plain_texts(path: &Path, content: &str, first: usize) -> Result<Vec<String>> {
    let jsonl = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("jsonl"));
    let bad = |line: usize, e: String| Error::Input { path: path.to_path_buf(), reason: format!("line {line}: {e}") };
    let limit = if first == 0 { usize::MAX } else { first };
    let mut texts = vec![];
    for (line, row) in crate::inputs::text::rows(content, jsonl).map_err(|(line, e)| bad(line, e))? {
        if texts.len() >= limit {
            break;
        }
        let (a, b, _) = row.map_err(|e| bad(line, e))?;
        texts.push(a);
        texts.extend(b);
    }
    texts.truncate(limit);
    Ok(texts)
}

/// One query line of labelled retrieval data.
#[derive(Deserialize)]
struct QueryLine {
    #[serde(alias = "query")]
    text: String,
    /// Relevant document ids: a list (grade 1 each), one id, or an object id -> grade.
    relevant: Relevant,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Relevant {
    Graded(BTreeMap<String, f64>),
    Ids(Vec<Id>),
    One(Id),
}

/// A document id as JSON gives it: a string or a number.
#[derive(Deserialize)]
#[serde(untagged)]
enum Id {
    Text(String),
    Number(i64),
}

impl Id {
    fn key(&self) -> String {
        match self {
            Id::Text(s) => s.clone(),
            Id::Number(n) => n.to_string(),
        }
    }
}

/// One document line of a corpus file (BEIR's corpus.jsonl among them).
#[derive(Deserialize)]
struct DocLine {
    #[serde(alias = "_id", alias = "doc_id")]
    id: Id,
    text: String,
    #[serde(default)]
    title: Option<String>,
}

/// Queries of `path` (`{"text": ..., "relevant": [ids]}` per line) retrieving among the documents of `corpus`
/// (`{"id": ..., "text": ..., "title": ...}` per line; the title, when there is one, goes before the text).
fn labelled_retrieval(path: &Path, content: &str, corpus: &Path, first: usize) -> Result<EmbedData> {
    let bad = |p: &Path, line: usize, reason: String| Error::Input {
        path: p.to_path_buf(),
        reason: format!("line {line}: {reason}"),
    };
    let corpus_text = text_of(corpus)?;
    let (mut docs, mut ids) = (vec![], HashMap::new());
    for (i, line) in corpus_text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let d: DocLine = serde_json::from_str(line)
            .map_err(|e| bad(corpus, i + 1, format!("{e} (expected {{\"id\": ..., \"text\": ...}})")))?;
        if ids.insert(d.id.key(), docs.len()).is_some() {
            return Err(bad(corpus, i + 1, format!("document id `{}` given twice", d.id.key())));
        }
        docs.push(match d.title.filter(|t| !t.trim().is_empty()) {
            Some(t) => format!("{t} {}", d.text),
            None => d.text,
        });
    }
    let limit = if first == 0 { usize::MAX } else { first };
    let (mut texts, mut relevant) = (vec![], vec![]);
    for (i, line) in content.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()).take(limit) {
        let q: QueryLine = serde_json::from_str(line)
            .map_err(|e| bad(path, i + 1, format!("{e} (expected {{\"text\": ..., \"relevant\": [ids]}})")))?;
        let graded: Vec<(String, f64)> = match q.relevant {
            Relevant::Graded(m) => m.into_iter().collect(),
            Relevant::Ids(v) => v.iter().map(|id| (id.key(), 1.0)).collect(),
            Relevant::One(id) => vec![(id.key(), 1.0)],
        };
        let mut found = vec![];
        for (id, grade) in graded.into_iter().filter(|(_, g)| *g > 0.0) {
            let doc = ids.get(&id).ok_or_else(|| {
                bad(path, i + 1, format!("relevant document `{id}` is not in the corpus {}", corpus.display()))
            })?;
            found.push((*doc, grade));
        }
        if found.is_empty() {
            return Err(bad(path, i + 1, "names no relevant document".into()));
        }
        texts.push(q.text);
        relevant.push(found);
    }
    let queries = texts.len();
    texts.extend(docs);
    let retrieval = Retrieval { queries, relevant, corpus: Some(corpus.to_path_buf()) };
    Ok(EmbedData { path: path.to_path_buf(), texts, retrieval: Some(retrieval) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_squad() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/squad/tiny-v1.1.json")
    }

    #[test]
    fn a_squad_file_is_questions_retrieving_their_own_paragraph() {
        let d = EmbedData::load(&tiny_squad(), None, 0).unwrap();
        let r = d.retrieval.as_ref().unwrap();
        // 9 questions over 4 paragraphs (4, 1, 3 and 1 questions): every paragraph is a document, in file order.
        assert_eq!((r.queries, d.texts.len()), (9, 13));
        let own: Vec<usize> = r.relevant.iter().map(|v| v[0].0).collect();
        assert_eq!(own, [0, 0, 0, 0, 1, 2, 2, 2, 3]);
        assert_eq!(d.texts[0], "When did the café open?");
        // The first 5 questions still retrieve among all four paragraphs.
        let first = EmbedData::load(&tiny_squad(), None, 5).unwrap();
        assert_eq!((first.queries(), first.texts.len()), (5, 9));
    }

    #[test]
    fn held_out_texts_are_the_last_questions_with_their_paragraphs() {
        let texts = EmbedData::held_out_texts(&tiny_squad(), 3).unwrap();
        // The last 3 questions: two of the whale paragraph's, then the note's one, each after its paragraph.
        assert_eq!(texts.len(), 5, "{texts:?}");
        assert!(texts[0].starts_with("The blue whale") && texts[1] == "When was the international ban?");
        assert_eq!(&texts[3..], ["Naïve Café: a short note.", "What is the note about?"]);
        let dir = tempfile::tempdir().unwrap();
        let lines = dir.path().join("texts.txt");
        std::fs::write(&lines, "one\ntwo\nthree\n").unwrap();
        assert_eq!(EmbedData::held_out_texts(&lines, 2).unwrap(), ["two", "three"]);
        assert_eq!(EmbedData::held_out_texts(&lines, 9).unwrap().len(), 3);
    }

    #[test]
    fn calibration_texts_are_paragraphs_with_their_questions() {
        let texts = EmbedData::calibration_texts(&tiny_squad(), 5).unwrap();
        // Paragraph 1 and its 4 questions, paragraph 2 and its one.
        assert_eq!(texts.len(), 7);
        assert!(texts[0].len() > 400 && texts[1] == "When did the café open?", "{texts:?}");
        assert_eq!(EmbedData::calibration_texts(&tiny_squad(), 0).unwrap().len(), 13);
    }

    #[test]
    fn labelled_queries_retrieve_among_a_corpus_by_id() {
        let d = tempfile::tempdir().unwrap();
        let (queries, corpus) = (d.path().join("q.jsonl"), d.path().join("corpus.jsonl"));
        std::fs::write(
            &corpus,
            "{\"_id\": \"a\", \"title\": \"Cats\", \"text\": \"cats purr\"}\n{\"id\": 7, \"text\": \"dogs bark\"}\n",
        )
        .unwrap();
        let q = "{\"text\": \"what purrs\", \"relevant\": [\"a\"]}\n{\"query\": \"who barks\", \"relevant\": {\"7\": 2, \"a\": 0}}\n";
        std::fs::write(&queries, q).unwrap();
        let data = EmbedData::load(&queries, Some(&corpus), 0).unwrap();
        assert_eq!(data.texts, ["what purrs", "who barks", "Cats cats purr", "dogs bark"]);
        let r = data.retrieval.unwrap();
        assert_eq!(r.relevant, [vec![(0, 1.0)], vec![(1, 2.0)]], "grade 0 is not relevant");
        std::fs::write(&queries, "{\"text\": \"x\", \"relevant\": [\"b\"]}\n").unwrap();
        let e = EmbedData::load(&queries, Some(&corpus), 0).unwrap_err().to_string();
        assert!(e.contains("q.jsonl: line 1: relevant document `b` is not in the corpus"), "{e}");
        let e = EmbedData::load(&tiny_squad().with_extension("txt"), Some(&corpus), 0).unwrap_err().to_string();
        assert!(e.contains("--corpus goes with queries in JSONL"), "{e}");
    }

    #[test]
    fn plain_texts_are_one_per_line_and_pairs_give_two() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("texts.txt");
        std::fs::write(&p, "first text\n\nsecond\tits pair\nthird\n").unwrap();
        let data = EmbedData::load(&p, None, 0).unwrap();
        assert!(data.retrieval.is_none());
        assert_eq!(data.texts, ["first text", "second", "its pair", "third"]);
        assert_eq!(EmbedData::load(&p, None, 2).unwrap().texts.len(), 2);
    }
}
