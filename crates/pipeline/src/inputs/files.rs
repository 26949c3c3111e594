//! Model inputs that are not SQuAD questions, for any BERT (a classifier, or a model qdq cannot score): arrays from
//! `.npz` / `.npy` files, text lines (one text, or a text pair separated by a tab, per line), GLUE's TSVs and
//! labelled JSONL (`{"text": ..., "text_pair": ..., "label": 2}` per line, or GLUE's keys; [`super::text`]), and
//! texts one by one.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ndarray::{Array2, ArrayView2};
use onnx_ir::{GraphExt as _, Model};
use tokenizer::Tokenizer;

use model_io::roles::InputRoles;

use crate::disk::{open_regular, read_text};
use crate::error::{Error, Result};
use crate::inputs::config::DataConfig;
use crate::inputs::feeds::{BatchFn, Feeds};
use crate::inputs::roles::{Vocabulary, check_tokenizer_kind, check_vocab, detect_inputs};
use crate::inputs::shape::DeclaredShape;
use crate::inputs::text::rows as text_rows;

impl TextInputs {
    /// The roles found in `model` and the tokenizer of `cfg` (or why not), the tokenizer checked against the
    /// model's word embedding ([`check_vocab`]: ids past its table, a much smaller vocabulary).
    pub fn for_model(model: &Model, model_path: &Path, cfg: &DataConfig) -> TextInputs {
        let roles = detect_inputs(model, model_path, &cfg.io_names).map_err(|e| e.to_string());
        let mut tokenizer = cfg.tokenizer().map_err(|e| e.to_string());
        if let (Ok(r), Ok(t)) = (&roles, &tokenizer) {
            let vocab = Vocabulary { tok: t, path: cfg.tokenizer_source(), force: cfg.force_vocab };
            let checked = check_vocab(model, model_path, &r.ids, &vocab)
                .and_then(|()| check_tokenizer_kind(t, cfg.tokenizer_source(), &cfg.folder.folder));
            if let Err(e) = checked {
                tokenizer = Err(e.to_string());
            }
        }
        TextInputs {
            roles,
            tokenizer,
            tokenizer_file: cfg.no_tokenizer_in.clone().unwrap_or_else(|| cfg.tokenizer_source().to_path_buf()),
            max_len: cfg.features.max_seq_len,
            label_ids: cfg.folder.label_ids.clone(),
        }
    }
}

/// Rows of model inputs with optional labels. Rows may differ in length (text); a batch is padded to its longest.
#[derive(Debug, Clone)]
pub struct InputSet {
    path: PathBuf,
    /// Model input names, in feed order.
    names: Vec<String>,
    /// Per row, per input, the values.
    rows: Vec<Vec<Vec<i64>>>,
    /// Padding value per input (`[PAD]` for token ids, 0 otherwise).
    pad: Vec<i64>,
    /// One class per row, if the file has labels.
    pub labels: Option<Vec<i64>>,
    /// The name of each class, as the model's config.json gives them (`id2label` / `label2id`): tables say
    /// `entailment`, not class 0.
    pub label_names: std::collections::BTreeMap<i64, String>,
    /// The labels as numbers, when every one is (STS-B's scores: a regression head's targets).
    pub scores: Option<Vec<f64>>,
    /// Why the labels are not classes (names the model's config.json lacks, scores like `3.8`), said when the model
    /// turns out to be a classifier ([`InputSet::check_labels`]); a regression head reads them as scores instead.
    label_error: Option<String>,
    /// The line of the file each row came from (text files; empty for arrays), for errors about a row.
    lines: Vec<usize>,
    /// The attention-mask input, when the model's roles name one that is fed: per-token logits are compared on the
    /// positions it keeps.
    mask: Option<String>,
}

/// How text (and bare token ids) become inputs: the model's input roles and its tokenizer, or why they are not
/// available (then only `.npz` files, which name every input, can be read).
pub struct TextInputs {
    pub roles: std::result::Result<InputRoles, String>,
    pub tokenizer: std::result::Result<Arc<Tokenizer>, String>,
    /// The file the tokenizer is read from: its errors name it, not the data.
    pub tokenizer_file: PathBuf,
    /// Label name -> class (config.json's `label2id`), for data files that name their labels.
    pub label_ids: Option<std::collections::BTreeMap<String, i64>>,
    /// Longest input in tokens ([CLS] and [SEP]s included).
    pub max_len: usize,
}

impl TextInputs {
    /// The tokenizer; where it did not load, the error loading it from `cfg` (the configuration these inputs were
    /// made for) gives.
    pub fn loaded_tokenizer(&self, cfg: &DataConfig) -> Result<Arc<Tokenizer>> {
        match &self.tokenizer {
            Ok(t) => Ok(Arc::clone(t)),
            Err(_) => cfg.tokenizer(),
        }
    }

    /// The roles and the tokenizer, or an error naming `path` and what is missing.
    fn ready(&self, path: &Path) -> Result<(&InputRoles, &Arc<Tokenizer>)> {
        let bad = |why: &String| Error::Input {
            path: path.to_path_buf(),
            reason: format!("reading token ids or text needs the model's input roles and a tokenizer: {why}"),
        };
        match (&self.roles, &self.tokenizer) {
            (Ok(r), Ok(t)) => Ok((r, t)),
            (Err(why), _) => Err(bad(why)),
            // The tokenizer's own fault, named by its file (the error's text names it already; said once).
            (_, Err(why)) => {
                let file = self.tokenizer_file.display().to_string();
                let reason = why.split_once(&format!("{file}: ")).map_or(why.as_str(), |(_, r)| r);
                Err(Error::Input { path: self.tokenizer_file.clone(), reason: reason.to_owned() })
            }
        }
    }
}

impl InputSet {
    /// Reads `path` by its extension: `.npz` (one 2-D integer array per model input, named after it, optional 1-D
    /// `label` / `labels`), `.npy` (the token ids; mask all ones, segment 0), `.jsonl` (labelled text) or anything
    /// else as text lines. Keeps the first `first` rows (0 = all); text past them is not tokenized.
    pub fn load(path: &Path, model: &Model, text: &TextInputs, first: usize) -> Result<InputSet> {
        let bad = |reason: String| Error::Input { path: path.to_path_buf(), reason };
        if let Some(b) = DeclaredShape::of(model, path)?.batch.filter(|b| *b > 1) {
            // SQuAD questions fill a short last batch up (Corpus::batches); inputs from a file do not.
            return Err(bad(format!(
                "the model's token inputs are declared with a batch of exactly {b}; inputs from a file are run in \
                 batches that may be shorter: give the model a dynamic batch dimension (or a batch of 1)"
            )));
        }
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or_default().to_ascii_lowercase();
        let limit = if first == 0 { usize::MAX } else { first };
        let mut set = match ext.as_str() {
            "npz" => from_npz(path, model)?,
            "npy" => from_npy(path, text)?,
            _ => {
                let expected = "text lines (`text` or `text<TAB>pair`), TSV, JSONL, a SQuAD .json, .npz or .npy";
                let content = read_text(path, expected)?;
                from_text(path, &content, ext == "jsonl", text, limit)?
            }
        };
        if set.rows.is_empty() {
            return Err(bad("holds no inputs".into()));
        }
        set.rows.truncate(limit);
        if let Some(labels) = &mut set.labels {
            labels.truncate(limit);
        }
        set.lines.truncate(limit);
        if let Some(scores) = &mut set.scores {
            scores.truncate(limit);
        }
        set.mask = text.roles.as_ref().ok().map(|r| r.mask.clone()).filter(|m| set.names.contains(m));
        Ok(set)
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True if there is no row.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The file the rows came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where row `i` is in its file, for an error: `line 7` of a text file, else `input 3` (1-based).
    pub fn row_place(&self, i: usize) -> String {
        match self.lines.get(i) {
            Some(line) => format!("line {line}"),
            None => format!("input {}", i + 1),
        }
    }

    /// The labels against a model of `classes` classes (its output `output`): one that is not a class (below 0, or
    /// `classes` and above) is an error naming the first such row and the classes, before any score is taken.
    /// One output (`classes` 1) is a regression head: its labels are scores, not classes.
    pub fn check_labels(&self, classes: usize, output: &str) -> Result<()> {
        if classes == 1 {
            return Ok(());
        }
        if let Some(e) = &self.label_error {
            return Err(Error::Input { path: self.path.clone(), reason: e.clone() });
        }
        let Some(labels) = &self.labels else { return Ok(()) };
        let Some((i, label)) = labels.iter().enumerate().find(|(_, l)| !(0..classes as i64).contains(l)) else {
            return Ok(());
        };
        let bad = labels.iter().filter(|l| !(0..classes as i64).contains(l)).count();
        // Hugging Face `datasets` writes a GLUE test split's missing labels as -1.
        let unlabelled = if labels.iter().all(|l| *l == -1) {
            ": every label is -1, how Hugging Face datasets marks a test split's rows, which have none; give the \
             validation split, or the rows without their labels"
        } else {
            ""
        };
        Err(Error::Input {
            path: self.path.clone(),
            reason: format!(
                "{}: label {label} is not a class of the model, whose output `{output}` has {classes} classes (labels \
                 0 to {}); {bad} of {} labels are outside them{unlabelled}",
                self.row_place(i),
                classes.saturating_sub(1),
                labels.len()
            ),
        })
    }

    /// The attention-mask input, when known and fed.
    pub fn mask(&self) -> Option<&str> {
        self.mask.as_deref()
    }

    /// Tokens of row `i` (its first input's length).
    pub fn row_len(&self, i: usize) -> usize {
        self.rows[i].first().map_or(0, Vec::len)
    }

    /// Each of `texts` as `[CLS] text [SEP]` (cut to `text.max_len` tokens) in the model's input roles, read from
    /// `path` (named in errors).
    pub fn from_texts(path: &Path, texts: &[String], text: &TextInputs) -> Result<InputSet> {
        let (roles, tokenizer) = text.ready(path)?;
        let bad =
            |i: usize, e: Error| Error::Input { path: path.to_path_buf(), reason: format!("text {}: {e}", i + 1) };
        let mut rows = Vec::with_capacity(texts.len());
        for (i, t) in texts.iter().enumerate() {
            let (ids, segment) = encode(tokenizer, text.max_len, t, None).map_err(|e| bad(i, e))?;
            rows.push(token_row(ids, Some(segment), roles));
        }
        if rows.is_empty() {
            return Err(Error::Input { path: path.to_path_buf(), reason: "holds no text".into() });
        }
        let mut set = with_roles(path, rows, roles, tokenizer, None);
        set.mask = Some(roles.mask.clone());
        Ok(set)
    }

    /// Rows `range` padded into one array per input.
    pub fn batch(&self, range: std::ops::Range<usize>) -> Vec<(String, Array2<i64>)> {
        self.batch_of(&range.collect::<Vec<_>>(), 0)
    }

    /// Rows `picked`, in that order, padded into one array per input, to their longest or to `width` when that is
    /// longer.
    pub fn batch_of(&self, picked: &[usize], width: usize) -> Vec<(String, Array2<i64>)> {
        let rows: Vec<&Vec<Vec<i64>>> = picked.iter().map(|&i| &self.rows[i]).collect();
        self.names
            .iter()
            .enumerate()
            .map(|(k, name)| {
                let width = rows.iter().map(|r| r[k].len()).max().unwrap_or(0).max(width);
                let mut a = Array2::from_elem((rows.len(), width), self.pad[k]);
                for (i, r) in rows.iter().enumerate() {
                    for (j, &v) in r[k].iter().enumerate() {
                        a[[i, j]] = v;
                    }
                }
                (name.clone(), a)
            })
            .collect()
    }
}

impl Feeds for InputSet {
    fn source(&self) -> &Path {
        self.path()
    }

    fn units(&self) -> (u64, &'static str) {
        (self.rows.len() as u64, "inputs")
    }

    fn attention_mask(&self) -> Option<&str> {
        self.mask()
    }

    fn each_batch(&self, batch: usize, f: &mut BatchFn<'_>) -> Result<usize> {
        let batch = batch.max(1);
        for start in (0..self.rows.len()).step_by(batch) {
            let end = (start + batch).min(self.rows.len());
            let arrays = self.batch(start..end);
            let views: Vec<(&str, ArrayView2<'_, i64>)> = arrays.iter().map(|(n, a)| (n.as_str(), a.view())).collect();
            f(&views, end - start, (end - start) as u64)?;
        }
        Ok(self.rows.len())
    }
}

/// The graph inputs that are not initializers, with their element types.
fn graph_inputs(model: &Model) -> Vec<(String, i32)> {
    let g = model.graph();
    g.input
        .iter()
        .filter(|v| !g.is_initializer(v.name()))
        .map(|v| (v.name().to_owned(), onnx_ir::declared_elem_type(v).unwrap_or(0)))
        .collect()
}

fn from_npz(path: &Path, model: &Model) -> Result<InputSet> {
    let bad = |reason: String| Error::Input { path: path.to_path_buf(), reason };
    let file = open_regular(path)?;
    let mut npz = ndarray_npy::NpzReader::new(file).map_err(|e| bad(format!("is not an .npz archive ({e})")))?;
    let names = npz.names().map_err(|e| bad(e.to_string()))?;
    let mut inputs = vec![];
    let mut rows_n = None;
    for (name, elem) in graph_inputs(model) {
        if !names.iter().any(|n| n == &name) {
            return Err(bad(format!("has no array `{name}` (a model input); it holds [{}]", names.join(", "))));
        }
        let a = read_int_array(&mut npz, &name, elem).map_err(|e| bad(format!("array `{name}`: {e}")))?;
        if rows_n.is_some_and(|n| n != a.nrows()) {
            return Err(bad(format!("array `{name}` has {} rows, the others {}", a.nrows(), rows_n.unwrap_or(0))));
        }
        rows_n = Some(a.nrows());
        inputs.push((name, a));
    }
    let labels = ["label", "labels"].iter().find(|l| names.iter().any(|n| n == *l)).map(|l| {
        npz.by_name::<ndarray::OwnedRepr<i64>, ndarray::Ix1>(l)
            .map(|a| a.to_vec())
            .map_err(|e| bad(format!("array `{l}`: {e} (expected a 1-D int64 array)")))
    });
    let labels = labels.transpose()?;
    let n = rows_n.unwrap_or(0);
    if labels.as_ref().is_some_and(|l| l.len() != n) {
        return Err(bad(format!("the labels are not one per row ({} rows)", n)));
    }
    let rows = (0..n).map(|i| inputs.iter().map(|(_, a)| a.row(i).to_vec()).collect()).collect();
    let pad = inputs.iter().map(|_| 0).collect();
    Ok(InputSet {
        path: path.to_path_buf(),
        names: inputs.into_iter().map(|(n, _)| n).collect(),
        rows,
        pad,
        scores: labels.as_ref().map(|l| l.iter().map(|&c| c as f64).collect()),
        labels,
        label_names: Default::default(),
        label_error: None,
        lines: vec![],
        mask: None,
    })
}

/// A 2-D int64 or int32 array (as int64).
fn read_int_array<R: std::io::Read + std::io::Seek>(
    npz: &mut ndarray_npy::NpzReader<R>,
    name: &str,
    elem: i32,
) -> std::result::Result<Array2<i64>, String> {
    let as_i64 = npz.by_name::<ndarray::OwnedRepr<i64>, ndarray::Ix2>(name);
    match as_i64 {
        Ok(a) => Ok(a),
        Err(_) => npz
            .by_name::<ndarray::OwnedRepr<i32>, ndarray::Ix2>(name)
            .map(|a| a.mapv(i64::from))
            .map_err(|e| format!("{e} (expected a 2-D int64 or int32 array, the model takes {})", type_name(elem))),
    }
}

fn type_name(elem: i32) -> String {
    onnx_ir::data_type_name(elem)
}

fn from_npy(path: &Path, text: &TextInputs) -> Result<InputSet> {
    let bad = |reason: String| Error::Input { path: path.to_path_buf(), reason };
    let (roles, tokenizer) = text.ready(path)?;
    let file = open_regular(path)?;
    let ids: Array2<i64> = match ndarray_npy::ReadNpyExt::read_npy(&file) {
        Ok(a) => a,
        Err(_) => {
            let file = open_regular(path)?;
            let a: Array2<i32> = ndarray_npy::ReadNpyExt::read_npy(file)
                .map_err(|e| bad(format!("{e} (expected the token ids as a 2-D int64 or int32 array)")))?;
            a.mapv(i64::from)
        }
    };
    let rows = ids.rows().into_iter().map(|r| token_row(r.to_vec(), None, roles)).collect();
    Ok(with_roles(path, rows, roles, tokenizer, None))
}

/// One row's inputs in role order (ids, mask, segment and position if any) from token ids and segment ids.
fn token_row(ids: Vec<i64>, segment: Option<Vec<i64>>, roles: &InputRoles) -> Vec<Vec<i64>> {
    let mut row = vec![vec![1; ids.len()]];
    if roles.segment.is_some() {
        row.push(segment.unwrap_or_else(|| vec![0; ids.len()]));
    }
    if roles.position.is_some() {
        row.push((0..ids.len() as i64).collect());
    }
    row.insert(0, ids);
    row
}

fn with_roles(
    path: &Path,
    rows: Vec<Vec<Vec<i64>>>,
    r: &InputRoles,
    tokenizer: &Tokenizer,
    labels: Option<Vec<i64>>,
) -> InputSet {
    let mut names = vec![r.ids.clone(), r.mask.clone()];
    let mut pad = vec![i64::from(tokenizer.pad_id), 0];
    if let Some(s) = &r.segment {
        names.push(s.clone());
        pad.push(0);
    }
    if let Some(p) = &r.position {
        names.push(p.clone());
        pad.push(0);
    }
    let scores = labels.as_ref().map(|l| l.iter().map(|&c| c as f64).collect());
    InputSet {
        path: path.to_path_buf(),
        names,
        rows,
        pad,
        labels,
        label_names: Default::default(),
        scores,
        label_error: None,
        lines: vec![],
        mask: None,
    }
}

/// Labels as written turned into classes: an integer is a class; a name is looked up in `ids` (config.json's
/// `label2id`). Every label that is neither is named in one error, with the classes the model has.
fn classes_of(
    labels: Vec<(usize, String)>,
    ids: Option<&std::collections::BTreeMap<String, i64>>,
) -> std::result::Result<Vec<i64>, String> {
    let lookup = |name: &str| {
        ids.and_then(|m| m.get(name).or_else(|| m.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v)))
    };
    let mut unknown: Vec<(usize, &str)> = vec![];
    let mut out = Vec::with_capacity(labels.len());
    for (line, label) in &labels {
        match label.parse::<i64>().ok().or_else(|| lookup(label).copied()) {
            Some(c) => out.push(c),
            None if unknown.iter().all(|(_, u)| u != label) => unknown.push((*line, label)),
            None => {}
        }
    }
    if unknown.is_empty() {
        return Ok(out);
    }
    let named: Vec<String> = unknown.iter().take(5).map(|(line, l)| format!("`{l}` (line {line})")).collect();
    let classes = match ids {
        Some(m) => format!(
            "the model's config.json names the classes {}",
            m.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
        ),
        None => "labels are class numbers, or names the model's config.json maps (label2id); it has none".to_owned(),
    };
    Err(format!("{} label(s) that are not classes: {}; {classes}", unknown.len(), named.join(", ")))
}

/// Text lines, a GLUE-style TSV (a header naming `sentence` / `sentence1` / `question` ..., an optional pair column
/// and `label`) or JSONL, its first `limit` rows: `[CLS] a [SEP] (b [SEP])`, truncated to `max_len` (the longer text
/// first).
fn from_text(path: &Path, content: &str, jsonl: bool, text: &TextInputs, limit: usize) -> Result<InputSet> {
    let (roles, tokenizer) = text.ready(path)?;
    let bad = |line: usize, reason: String| Error::Input {
        path: path.to_path_buf(),
        reason: format!("line {line}: {reason}"),
    };
    let (mut rows, mut labels, mut lines) = (vec![], vec![], vec![]);
    for (line, row) in text_rows(content, jsonl).map_err(|(line, e)| bad(line, e))?.take(limit) {
        lines.push(line);
        let (a, b, label) = row.map_err(|e| bad(line, e))?;
        let (ids, segment) = encode(tokenizer, text.max_len, &a, b.as_deref()).map_err(|e| bad(line, e.to_string()))?;
        rows.push(token_row(ids, Some(segment), roles));
        labels.push(label);
    }
    if rows.is_empty() {
        return Err(Error::Input { path: path.to_path_buf(), reason: "holds no text".into() });
    }
    let labelled = labels.iter().filter(|l| l.is_some()).count();
    if labelled != 0 && labelled != labels.len() {
        return Err(Error::Input {
            path: path.to_path_buf(),
            reason: format!("{labelled} of {} lines have a label; give every line one or none", labels.len()),
        });
    }
    let written: Vec<(usize, String)> = lines.iter().copied().zip(labels.into_iter().flatten()).collect();
    let scores: Option<Vec<f64>> = (labelled != 0)
        .then(|| written.iter().map(|(_, l)| l.parse::<f64>().ok().filter(|v| v.is_finite())).collect())
        .flatten();
    let (labels, label_error) = match (labelled, classes_of(written, text.label_ids.as_ref())) {
        (0, _) => (None, None),
        (_, Ok(classes)) => (Some(classes), None),
        // Scores are a regression head's targets; the error stands for a classifier.
        (_, Err(e)) if scores.is_some() => (None, Some(format!("labels are not classes: {e}"))),
        (_, Err(e)) => return Err(Error::Input { path: path.to_path_buf(), reason: e }),
    };
    let set = with_roles(path, rows, roles, tokenizer, labels);
    let label_names = text.label_ids.iter().flatten().map(|(name, &class)| (class, name.clone())).collect();
    Ok(InputSet { lines, scores: scores.or(set.scores.clone()), label_error, label_names, ..set })
}

/// Token ids and segment ids of `[CLS] a [SEP] (b [SEP])` as the tokenizer frames them (RoBERTa and MPNet: `<s> a
/// </s></s> b </s>`, one segment), the longer text cut first until it fits `max_len`.
fn encode(t: &Tokenizer, max_len: usize, a: &str, b: Option<&str>) -> Result<(Vec<i64>, Vec<i64>)> {
    let f = t.framing();
    let mut ta = t.tokenize(a, "text")?.ids;
    let mut tb = match b {
        Some(b) => t.tokenize(b, "text pair")?.ids,
        None => vec![],
    };
    let specials = if b.is_some() { 2 + f.pair_seps } else { 2 };
    while ta.len() + tb.len() + specials > max_len.max(specials + 1) {
        if ta.len() >= tb.len() {
            ta.pop()
        } else {
            tb.pop()
        };
    }
    let mut ids = vec![f.cls];
    ids.extend(&ta);
    ids.push(f.sep);
    let mut segment = vec![0; ids.len()];
    if b.is_some() {
        ids.extend(std::iter::repeat_n(f.sep, f.pair_seps - 1));
        ids.extend(&tb);
        ids.push(f.sep);
        segment.resize(ids.len(), f.pair_type);
    }
    Ok((ids.into_iter().map(i64::from).collect(), segment))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 76: a pair is framed as the tokenizer frames one: BERT's `[CLS] a [SEP] b [SEP]` with segments 0 / 1,
    /// RoBERTa's and MPNet's `<s> a </s></s> b </s>` in one segment; a single text `<s> a </s>`.
    #[test]
    fn pairs_are_framed_as_the_tokenizer_frames_them() {
        let dir = tempfile::tempdir().unwrap();
        let v = dir.path().join("vocab.txt");
        std::fs::write(&v, "<s>\n<pad>\n</s>\n<unk>\n[UNK]\nhello\nworld\n").unwrap();
        let t = Tokenizer::from_vocab(&v, true).unwrap();
        assert_eq!(encode(&t, 16, "hello", Some("world")).unwrap(), (vec![0, 5, 2, 2, 6, 2], vec![0; 6]));
        assert_eq!(encode(&t, 16, "hello world", None).unwrap(), (vec![0, 5, 6, 2], vec![0; 4]));
        std::fs::write(&v, "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nworld\n").unwrap();
        let t = Tokenizer::from_vocab(&v, true).unwrap();
        assert_eq!(encode(&t, 16, "hello", Some("world")).unwrap(), (vec![2, 4, 3, 5, 3], vec![0, 0, 0, 1, 1]));
        // Cut to fit: the longer text first (then the first on a tie), the framing kept whole.
        assert_eq!(encode(&t, 4, "hello world", Some("world")).unwrap().0, [2, 3, 5, 3]);
    }

    #[test]
    fn label_names_map_through_the_config_and_the_rest_are_named() {
        let ids: std::collections::BTreeMap<String, i64> =
            [("entailment".to_owned(), 0), ("not_entailment".to_owned(), 1)].into();
        let written = |v: &[&str]| v.iter().enumerate().map(|(i, l)| (i + 2, l.to_string())).collect::<Vec<_>>();
        assert_eq!(classes_of(written(&["entailment", "Not_Entailment", "1"]), Some(&ids)), Ok(vec![0, 1, 1]));
        let e = classes_of(written(&["entailment", "neutral", "neutral", "contradiction"]), Some(&ids)).unwrap_err();
        assert!(
            e.starts_with("2 label(s)") && e.contains("`neutral` (line 3)") && e.contains("`contradiction` (line 5)")
        );
        assert!(e.contains("entailment=0, not_entailment=1"), "{e}");
        let e = classes_of(written(&["yes"]), None).unwrap_err();
        assert!(e.contains("label2id") && e.contains("`yes` (line 2)"), "{e}");
    }
}
