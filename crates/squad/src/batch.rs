//! Padding features into `i64` batches, and the lazy feature stream.

use crate::dataset::Example;
use crate::error::{Error, Result};
use crate::features::{Feature, FeatureConfig, FeatureWindows, ModelIo};
use ndarray::{Array2, ArrayView2};
use std::collections::VecDeque;
use std::sync::Arc;
use tokenizer::{Tokenizer, Tokens};

/// How a batch is padded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    /// Dynamic: pad to the longest feature in the batch.
    Longest,
    /// Pad every batch to this length (must be at least the longest feature).
    Fixed(usize),
}

/// A padded batch of features: `[batch, seq]` arrays, padding with `[PAD]` ids, mask 0 and segment 0.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// Ids of the features, one per row.
    pub feature_ids: Vec<usize>,
    /// Token ids.
    pub input_ids: Array2<i64>,
    /// 1 on real tokens, 0 on padding.
    pub attention_mask: Array2<i64>,
    /// Segment ids.
    pub token_type_ids: Array2<i64>,
    /// Position ids: 0, 1, 2, ... on every row (for models that take them as an input).
    pub position_ids: Array2<i64>,
    /// The features themselves (needed to turn the logits into answers).
    pub features: Vec<Feature>,
}

impl Batch {
    /// Pads `features` into a batch.
    pub fn new(features: Vec<Feature>, pad_id: u32, padding: Padding) -> Result<Self> {
        let longest = features.iter().map(Feature::len).max().unwrap_or(0);
        let width = match padding {
            Padding::Longest => longest,
            Padding::Fixed(n) if n >= longest => n,
            Padding::Fixed(n) => {
                return Err(Error::Config(format!("fixed padding {n} is shorter than a feature of {longest} tokens")));
            }
        };
        let rows = features.len();
        let mut input_ids = Array2::from_elem((rows, width), i64::from(pad_id));
        let mut attention_mask = Array2::zeros((rows, width));
        let mut token_type_ids = Array2::zeros((rows, width));
        for (r, f) in features.iter().enumerate() {
            for (c, (&id, &tt)) in f.input_ids.iter().zip(&f.token_type_ids).enumerate() {
                input_ids[[r, c]] = id;
                attention_mask[[r, c]] = 1;
                token_type_ids[[r, c]] = tt;
            }
        }
        Ok(Batch {
            feature_ids: features.iter().map(|f| f.id).collect(),
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids: Array2::from_shape_fn((rows, width), |(_, c)| c as i64),
            features,
        })
    }

    /// Number of features (rows that hold one; see [`Batch::rows`]).
    pub fn len(&self) -> usize {
        self.feature_ids.len()
    }

    /// Rows fed to the model: the features, then any filler rows [`Batch::fill_to`] added.
    pub fn rows(&self) -> usize {
        self.input_ids.nrows()
    }

    /// Adds copies of the first row until the arrays have `rows` rows, for a model that takes exactly that many per
    /// run; the features (and [`Batch::len`]) stay as they were, so the copies' outputs are not read. No-op on an
    /// empty batch or one with `rows` rows already.
    pub fn fill_to(&mut self, rows: usize) {
        let have = self.rows();
        if have == 0 || have >= rows {
            return;
        }
        let fill =
            |a: &Array2<i64>| Array2::from_shape_fn((rows, a.ncols()), |(r, c)| a[[if r < have { r } else { 0 }, c]]);
        self.input_ids = fill(&self.input_ids);
        self.attention_mask = fill(&self.attention_mask);
        self.token_type_ids = fill(&self.token_type_ids);
        self.position_ids = fill(&self.position_ids);
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.feature_ids.is_empty()
    }

    /// The model inputs by name (the segment and position ids only when `io` names them).
    pub fn inputs<'a>(&'a self, io: &'a ModelIo) -> Vec<(&'a str, ArrayView2<'a, i64>)> {
        let mut v = vec![
            (io.input_ids.as_str(), self.input_ids.view()),
            (io.attention_mask.as_str(), self.attention_mask.view()),
        ];
        if let Some(tt) = &io.token_type_ids {
            v.push((tt.as_str(), self.token_type_ids.view()));
        }
        if let Some(p) = &io.position_ids {
            v.push((p.as_str(), self.position_ids.view()));
        }
        v
    }
}

/// Lazily featurizes examples and yields batches in feature order. Each context is tokenized once and shared by the
/// consecutive questions on it; only one batch of features is held at a time.
pub struct FeatureStream<'a> {
    examples: &'a [Example],
    tokenizer: &'a Tokenizer,
    config: FeatureConfig,
    batch_size: usize,
    padding: Padding,
    next_example: usize,
    next_feature_id: usize,
    pending: VecDeque<Feature>,
    /// The current example's windows not yet built.
    windows: Option<FeatureWindows>,
    context_cache: Option<(usize, Arc<Tokens>)>,
}

impl<'a> FeatureStream<'a> {
    /// A stream over `examples`; fails on an invalid config or a zero batch size.
    pub fn new(
        examples: &'a [Example],
        tokenizer: &'a Tokenizer,
        config: FeatureConfig,
        batch_size: usize,
        padding: Padding,
    ) -> Result<Self> {
        config.validate()?;
        if batch_size == 0 {
            return Err(Error::Config("batch size must be at least 1".into()));
        }
        if let Padding::Fixed(n) = padding
            && n < config.max_seq_len
        {
            return Err(Error::Config(format!("fixed padding {n} is shorter than max_seq_len {}", config.max_seq_len)));
        }
        Ok(FeatureStream {
            examples,
            tokenizer,
            config,
            batch_size,
            padding,
            next_example: 0,
            next_feature_id: 0,
            pending: VecDeque::new(),
            windows: None,
            context_cache: None,
        })
    }

    fn context_tokens(&mut self, ex: &Example) -> Result<Arc<Tokens>> {
        if let Some((idx, toks)) = &self.context_cache
            && *idx == ex.context_index
        {
            return Ok(Arc::clone(toks));
        }
        let toks = Arc::new(self.tokenizer.tokenize(&ex.context, &format!("context of question {}", ex.id))?);
        self.context_cache = Some((ex.context_index, Arc::clone(&toks)));
        Ok(toks)
    }

    /// Starts the next example's windows (they are built one at a time as batches need them).
    fn featurize_next(&mut self) -> Result<()> {
        let examples = self.examples;
        let Some(ex) = examples.get(self.next_example) else { return Ok(()) };
        let ctx = self.context_tokens(ex)?;
        let query = self.tokenizer.tokenize(&ex.question, &format!("question {}", ex.id))?;
        let t = self.tokenizer;
        let ids = (t.framing(), self.next_example, self.next_feature_id);
        let windows = FeatureWindows::new(&self.config, ids, &query.ids, ctx);
        self.next_feature_id += windows.len();
        self.next_example += 1;
        self.windows = Some(windows);
        Ok(())
    }
}

impl Iterator for FeatureStream<'_> {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.pending.len() < self.batch_size {
            if let Some(f) = self.windows.as_mut().and_then(Iterator::next) {
                self.pending.push_back(f);
                continue;
            }
            if self.next_example >= self.examples.len() {
                break;
            }
            if let Err(e) = self.featurize_next() {
                self.next_example = self.examples.len();
                self.windows = None;
                return Some(Err(e));
            }
        }
        if self.pending.is_empty() {
            return None;
        }
        let take = self.pending.len().min(self.batch_size);
        let feats: Vec<Feature> = self.pending.drain(..take).collect();
        Some(Batch::new(feats, self.tokenizer.pad_id, self.padding))
    }
}
