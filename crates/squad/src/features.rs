//! Sliding-window features in the original BERT `run_squad` layout.

use crate::error::{Error, Result};
use tokenizer::{Framing, Tokens};

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
/// `spans` are [`windows`]: starts and ends never decrease, so the windows holding `pos` are one run, found by
/// binary search (a context of 300,000 tokens has thousands of windows: scanning them all for every token was
/// quadratic).
fn max_context_window(spans: &[(usize, usize)], pos: usize) -> Option<usize> {
    let first = spans.partition_point(|&(start, len)| start + len <= pos);
    let last = spans.partition_point(|&(start, _)| start <= pos);
    let mut best: Option<(usize, f64)> = None;
    // Every window in first..last holds `pos`: it ends after it and starts at or before it.
    for (i, &(start, len)) in spans.iter().enumerate().take(last).skip(first) {
        let score = (pos - start).min(start + len - 1 - pos) as f64 + 0.01 * len as f64;
        if best.is_none_or(|(_, b)| score > b) {
            best = Some((i, score));
        }
    }
    best.map(|b| b.0)
}

/// Builds the features of one example from its query token ids and its context tokens. Ids are numbered from
/// `first_id`. The config should be [valid](FeatureConfig::validate); a context token without an offset is treated
/// like a non-context token (never part of an answer). [`FeatureWindows`] gives the same features one at a time.
pub fn build_features(
    config: &FeatureConfig,
    cls_id: u32,
    sep_id: u32,
    query_ids: &[u32],
    context: &Tokens,
    example_index: usize,
    first_id: usize,
) -> Vec<Feature> {
    let framing = Framing { cls: cls_id, sep: sep_id, pair_seps: 1, pair_type: 1 };
    FeatureWindows::new(config, (framing, example_index, first_id), query_ids, std::sync::Arc::new(context.clone()))
        .collect()
}

/// The features of one example, built one window at a time: a context of any length costs one feature's memory
/// at a time, not all of its windows at once (a 1 MB context has thousands).
#[derive(Debug, Clone)]
pub struct FeatureWindows {
    query: Vec<u32>,
    context: std::sync::Arc<Tokens>,
    spans: Vec<(usize, usize)>,
    framing: Framing,
    example_index: usize,
    first_id: usize,
    next: usize,
}

impl FeatureWindows {
    /// The windows of one example, framed as the tokenizer frames a pair (`[CLS] query [SEP] context [SEP]`, or
    /// RoBERTa's `<s> query </s></s> context </s>`); example index and first id as for [`build_features`].
    pub fn new(
        config: &FeatureConfig,
        (framing, example_index, first_id): (Framing, usize, usize),
        query_ids: &[u32],
        context: std::sync::Arc<Tokens>,
    ) -> Self {
        let query = query_ids[..query_ids.len().min(config.max_query_len)].to_vec();
        let max_doc = config.max_seq_len.saturating_sub(query.len() + 2 + framing.pair_seps).max(1);
        let spans = windows(context.ids.len(), max_doc, config.doc_stride);
        FeatureWindows { query, context, spans, framing, example_index, first_id, next: 0 }
    }

    /// Windows of this example (features it gives in all).
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Never true: an empty context still gives one window.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }
}

impl Iterator for FeatureWindows {
    type Item = Feature;

    fn next(&mut self) -> Option<Feature> {
        let w = self.next;
        let &(start, len) = self.spans.get(w)?;
        self.next += 1;
        let (query, context) = (&self.query, &self.context);
        let Framing { cls, sep, pair_seps, pair_type } = self.framing;
        let total = query.len() + len + 2 + pair_seps;
        let mut input_ids = Vec::with_capacity(total);
        let mut token_offsets = Vec::with_capacity(total);
        let mut token_is_max_context = Vec::with_capacity(total);
        input_ids.push(i64::from(cls));
        input_ids.extend(query.iter().map(|&t| i64::from(t)));
        input_ids.push(i64::from(sep));
        input_ids.extend(std::iter::repeat_n(i64::from(sep), pair_seps - 1));
        token_offsets.resize(input_ids.len(), None);
        token_is_max_context.resize(input_ids.len(), false);
        for (pos, &id) in context.ids.iter().enumerate().skip(start).take(len) {
            input_ids.push(i64::from(id));
            token_offsets.push(context.offsets.get(pos).copied());
            token_is_max_context.push(max_context_window(&self.spans, pos) == Some(w));
        }
        input_ids.push(i64::from(sep));
        token_offsets.push(None);
        token_is_max_context.push(false);
        // The separators after the first one belong to the second segment.
        let first_segment = query.len() + 2;
        let token_type_ids = (0..total).map(|i| if i >= first_segment { pair_type } else { 0 }).collect();
        Some(Feature {
            id: self.first_id + w,
            example_index: self.example_index,
            window_index: w,
            num_windows: self.spans.len(),
            input_ids,
            token_type_ids,
            token_offsets,
            token_is_max_context,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.spans.len() - self.next;
        (left, Some(left))
    }
}

impl ExactSizeIterator for FeatureWindows {}

/// Names of the model's inputs and outputs. The runtime feeds only the inputs the model has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelIo {
    /// Token ids input.
    pub input_ids: String,
    /// Attention mask input.
    pub attention_mask: String,
    /// Segment ids input, if the model takes one.
    pub token_type_ids: Option<String>,
    /// Start logits output (`[batch, seq]`).
    pub start_logits: String,
    /// End logits output (`[batch, seq]`). The same name as `start_logits`: one output `[batch, seq, 2]` holds both,
    /// start at index 0 of its last axis and end at 1 (a head exported without its split, e.g. `cls_squad_logits`).
    pub end_logits: String,
    /// Position ids input, if the model takes one (fed 0, 1, 2, ... on every row).
    pub position_ids: Option<String>,
    /// Inputs the logits do not depend on (the ONNX Model Zoo BERT-Squad's `unique_ids`, copied to an output of its
    /// own): fed zeros.
    pub zero_inputs: Vec<String>,
}

impl ModelIo {
    /// Whether one output holds both logits (`[batch, seq, 2]`), see [`ModelIo::end_logits`].
    pub fn stacked_logits(&self) -> bool {
        self.start_logits == self.end_logits
    }

    /// The outputs to fetch for the logits: start and end, or the one stacked output.
    pub fn logit_outputs(&self) -> Vec<&str> {
        if self.stacked_logits() {
            vec![self.start_logits.as_str()]
        } else {
            vec![self.start_logits.as_str(), self.end_logits.as_str()]
        }
    }
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
            position_ids: None,
            zero_inputs: Vec::new(),
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
            position_ids: None,
            zero_inputs: Vec::new(),
        }
    }
}

impl Default for ModelIo {
    fn default() -> Self {
        Self::huggingface()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The binary-searched run of windows gives what scanning every window gives (BERT's rule, first window wins
    /// ties), for every token of documents of many lengths, window sizes and strides.
    #[test]
    fn max_context_window_matches_the_full_scan() {
        let scan = |spans: &[(usize, usize)], pos: usize| {
            let mut best: Option<(usize, f64)> = None;
            for (i, &(start, len)) in spans.iter().enumerate() {
                if pos >= start && pos < start + len {
                    let score = (pos - start).min(start + len - 1 - pos) as f64 + 0.01 * len as f64;
                    if best.is_none_or(|(_, b)| score > b) {
                        best = Some((i, score));
                    }
                }
            }
            best.map(|b| b.0)
        };
        for doc in [1, 2, 7, 64, 129, 1000] {
            for max_doc in [1, 3, 16, 50] {
                for stride in [1, 2, 5, 16, 128] {
                    let spans = windows(doc, max_doc, stride);
                    for pos in 0..doc + 2 {
                        assert_eq!(
                            max_context_window(&spans, pos),
                            scan(&spans, pos),
                            "{doc} {max_doc} {stride} {pos}"
                        );
                    }
                }
            }
        }
    }
}
