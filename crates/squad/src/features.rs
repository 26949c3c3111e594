//! Sliding-window features in the original BERT `run_squad` layout.

use crate::error::{Error, Result};
use crate::tokenizer::Tokens;

/// Windowing settings. Defaults: `max_seq_len` 384, `doc_stride` 128, `max_query_len` 64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureConfig {
    /// Tokens per feature including `[CLS]` and both `[SEP]`s.
    pub max_seq_len: usize,
    /// Step between window starts (BERT meaning), at least 1.
    pub doc_stride: usize,
    /// Questions are truncated to this many tokens.
    pub max_query_len: usize,
}

impl Default for FeatureConfig {
    fn default() -> Self {
        FeatureConfig { max_seq_len: 384, doc_stride: 128, max_query_len: 64 }
    }
}

impl FeatureConfig {
    /// Checks that a window leaves room for the longest query plus 3 special tokens and at least one context token,
    /// and that the stride is at least 1.
    pub fn validate(&self) -> Result<()> {
        if self.max_seq_len < self.max_query_len + 4 {
            return Err(Error::Config(format!(
                "max_seq_len {} must be at least max_query_len {} + 4 ([CLS], 2 x [SEP] and one context token)",
                self.max_seq_len, self.max_query_len
            )));
        }
        if self.doc_stride == 0 {
            return Err(Error::Config("doc_stride must be at least 1".into()));
        }
        Ok(())
    }
}

/// BERT's windows over `doc_len` context tokens as `(start, len)`: each takes `min(remaining, max_doc_tokens)`
/// tokens, the next starts `min(len, stride)` later, and the last one reaches the end. An empty context gives one
/// empty window (so every question gets a feature).
pub fn windows(doc_len: usize, max_doc_tokens: usize, stride: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    loop {
        let len = (doc_len - start).min(max_doc_tokens);
        out.push((start, len));
        if start + len >= doc_len || len == 0 {
            return out;
        }
        start += len.min(stride.max(1));
    }
}

/// One model input: `[CLS] query [SEP] window [SEP]`, unpadded (attention mask = 1 on all `len()` tokens).
#[derive(Debug, Clone, PartialEq)]
pub struct Feature {
    /// Position in the stream of all features (0-based, file order).
    pub id: usize,
    /// Index of the example (question) in [`SquadData::examples`](crate::SquadData).
    pub example_index: usize,
    /// Which window of the example this is.
    pub window_index: usize,
    /// How many windows the example has.
    pub num_windows: usize,
    /// Token ids.
    pub input_ids: Vec<i64>,
    /// 0 for `[CLS]`, query and first `[SEP]`; 1 for the window and the last `[SEP]`.
    pub token_type_ids: Vec<i64>,
    /// Byte span in the context of each context token; `None` for special and query tokens.
    pub token_offsets: Vec<Option<(usize, usize)>>,
    /// Whether this window is the one where the token has maximum context (false for non-context tokens).
    pub token_is_max_context: Vec<bool>,
}

impl Feature {
    /// Number of real tokens.
    pub fn len(&self) -> usize {
        self.input_ids.len()
    }

    /// Whether the feature has no tokens (never true for built features).
    pub fn is_empty(&self) -> bool {
        self.input_ids.is_empty()
    }
}

/// BERT's `_check_is_max_context`: the window (index) in which context token `pos` has the largest
/// `min(left, right) + 0.01 * window_len`; the first such window wins ties.
fn max_context_window(spans: &[(usize, usize)], pos: usize) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, &(start, len)) in spans.iter().enumerate() {
        if pos < start || pos >= start + len {
            continue;
        }
        let score = (pos - start).min(start + len - 1 - pos) as f64 + 0.01 * len as f64;
        if best.is_none_or(|(_, b)| score > b) {
            best = Some((i, score));
        }
    }
    best.map(|b| b.0)
}

/// Builds the features of one example from its query token ids and its context tokens. Ids are numbered from
/// `first_id`. The config should be [valid](FeatureConfig::validate); a context token without an offset is treated
/// like a non-context token (never part of an answer).
pub fn build_features(
    config: &FeatureConfig,
    cls_id: u32,
    sep_id: u32,
    query_ids: &[u32],
    context: &Tokens,
    example_index: usize,
    first_id: usize,
) -> Vec<Feature> {
    let query = &query_ids[..query_ids.len().min(config.max_query_len)];
    let max_doc = config.max_seq_len.saturating_sub(query.len() + 3).max(1);
    let spans = windows(context.ids.len(), max_doc, config.doc_stride);
    let n = spans.len();
    spans
        .iter()
        .enumerate()
        .map(|(w, &(start, len))| {
            let total = query.len() + len + 3;
            let mut input_ids = Vec::with_capacity(total);
            let mut token_offsets = Vec::with_capacity(total);
            let mut token_is_max_context = Vec::with_capacity(total);
            input_ids.push(i64::from(cls_id));
            input_ids.extend(query.iter().map(|&t| i64::from(t)));
            input_ids.push(i64::from(sep_id));
            token_offsets.resize(input_ids.len(), None);
            token_is_max_context.resize(input_ids.len(), false);
            for (pos, &id) in context.ids.iter().enumerate().skip(start).take(len) {
                input_ids.push(i64::from(id));
                token_offsets.push(context.offsets.get(pos).copied());
                token_is_max_context.push(max_context_window(&spans, pos) == Some(w));
            }
            input_ids.push(i64::from(sep_id));
            token_offsets.push(None);
            token_is_max_context.push(false);
            let first_segment = query.len() + 2;
            let token_type_ids = (0..total).map(|i| i64::from(i >= first_segment)).collect();
            Feature {
                id: first_id + w,
                example_index,
                window_index: w,
                num_windows: n,
                input_ids,
                token_type_ids,
                token_offsets,
                token_is_max_context,
            }
        })
        .collect()
}

/// Names of the model's inputs and outputs. The runtime feeds only the inputs the model has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelIo {
    /// Token ids input.
    pub input_ids: String,
    /// Attention mask input.
    pub attention_mask: String,
    /// Segment ids input, if the model takes one.
    pub token_type_ids: Option<String>,
    /// Start logits output.
    pub start_logits: String,
    /// End logits output.
    pub end_logits: String,
}

impl ModelIo {
    /// Hugging Face export names: input_ids / attention_mask / token_type_ids, start_logits / end_logits.
    pub fn huggingface() -> Self {
        ModelIo {
            input_ids: "input_ids".into(),
            attention_mask: "attention_mask".into(),
            token_type_ids: Some("token_type_ids".into()),
            start_logits: "start_logits".into(),
            end_logits: "end_logits".into(),
        }
    }

    /// Original BERT / TensorRT-style names: input_ids / input_mask / segment_ids, output_start_logits /
    /// output_end_logits.
    pub fn bert_tf() -> Self {
        ModelIo {
            input_ids: "input_ids".into(),
            attention_mask: "input_mask".into(),
            token_type_ids: Some("segment_ids".into()),
            start_logits: "output_start_logits".into(),
            end_logits: "output_end_logits".into(),
        }
    }
}

impl Default for ModelIo {
    fn default() -> Self {
        Self::huggingface()
    }
}
