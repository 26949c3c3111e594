//! Uncased/cased BERT WordPiece tokenization through the `tokenizers` crate.

use crate::error::{Error, Result};
use std::collections::HashMap;
use std::path::Path;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::{
    NormalizedString, Normalizer, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer, Tokenizer,
};

/// Token ids with the byte span of each token in the original text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tokens {
    /// WordPiece ids.
    pub ids: Vec<u32>,
    /// Byte span `(start, end)` of each token in the text that was tokenized.
    pub offsets: Vec<(usize, usize)>,
}

/// BERT WordPiece tokenizer: BertNormalizer (clean text, CJK spacing, accent stripping when lower-casing,
/// lower-casing) + BertPreTokenizer + WordPiece (`##` prefix, `[UNK]`, at most 100 characters per word).
/// No post-processor: [`build_features`](crate::build_features) adds `[CLS]`/`[SEP]` itself.
pub struct SquadTokenizer {
    inner: Tokenizer,
    /// Id of `[CLS]`.
    pub cls_id: u32,
    /// Id of `[SEP]`.
    pub sep_id: u32,
    /// Id of `[PAD]`.
    pub pad_id: u32,
    /// Id of `[UNK]`.
    pub unk_id: u32,
    vocab_size: usize,
    max_token_id: u32,
}

impl std::fmt::Debug for SquadTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SquadTokenizer").field("vocab_size", &self.vocab_size).finish_non_exhaustive()
    }
}

impl SquadTokenizer {
    /// Loads a BERT `vocab.txt` (one token per line, id = line number). Errors name the file when it cannot be read,
    /// is empty, or lacks `[CLS]`, `[SEP]`, `[PAD]` or `[UNK]`.
    pub fn from_vocab(path: impl AsRef<Path>, lowercase: bool) -> Result<Self> {
        let path = path.as_ref();
        let vocab_err = |message: String| Error::Vocab { path: path.to_owned(), message };
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.to_owned(), source })?;
        let mut vocab: HashMap<&str, u32> = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let id = u32::try_from(i).map_err(|_| vocab_err("more than 2^32 lines".into()))?;
            vocab.insert(line.trim_end(), id);
        }
        if vocab.is_empty() {
            return Err(vocab_err("the file has no tokens".into()));
        }
        let special = |t: &str| vocab.get(t).copied().ok_or_else(|| vocab_err(format!("missing special token {t}")));
        let (cls_id, sep_id, pad_id, unk_id) =
            (special("[CLS]")?, special("[SEP]")?, special("[PAD]")?, special("[UNK]")?);
        let max_token_id = vocab.values().copied().max().unwrap_or(0);
        let vocab_size = vocab.len();
        let path_str = path.to_str().ok_or_else(|| vocab_err("path is not UTF-8".into()))?;
        let wp_vocab = WordPiece::read_file(path_str).map_err(|e| vocab_err(e.to_string()))?;
        let model = WordPiece::builder()
            .vocab(wp_vocab)
            .unk_token("[UNK]".into())
            .continuing_subword_prefix("##".into())
            .max_input_chars_per_word(100)
            .build()
            .map_err(|e| vocab_err(e.to_string()))?;
        let mut inner = Tokenizer::new(model);
        inner
            .with_normalizer(Some(BertNormalizer::new(true, true, None, lowercase)))
            .map_err(|e| vocab_err(e.to_string()))?;
        inner.with_pre_tokenizer(Some(BertPreTokenizer));
        Ok(SquadTokenizer { inner, cls_id, sep_id, pad_id, unk_id, vocab_size, max_token_id })
    }

    /// Loads a Hugging Face `tokenizer.json` (e.g. one saved with a fine-tuned model). Its normalizer,
    /// pre-tokenizer and model are used as they are; its post-processor, padding and truncation are dropped
    /// ([`build_features`](crate::build_features) adds `[CLS]`/`[SEP]` and windows the text itself). Errors name the
    /// file when it cannot be parsed or lacks `[CLS]`, `[SEP]`, `[PAD]` or `[UNK]`.
    pub fn from_tokenizer_json(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let vocab_err = |message: String| Error::Vocab { path: path.to_owned(), message };
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.to_owned(), source })?;
        let mut inner: Tokenizer =
            text.parse().map_err(|e: tokenizers::Error| vocab_err(format!("not a tokenizer.json: {e}")))?;
        inner.with_post_processor(None::<tokenizers::PostProcessorWrapper>);
        inner.with_padding(None);
        inner.with_truncation(None).map_err(|e| vocab_err(e.to_string()))?;
        let vocab = inner.get_vocab(true);
        if vocab.is_empty() {
            return Err(vocab_err("the tokenizer has no tokens".into()));
        }
        let special = |t: &str| vocab.get(t).copied().ok_or_else(|| vocab_err(format!("missing special token {t}")));
        let (cls_id, sep_id, pad_id, unk_id) =
            (special("[CLS]")?, special("[SEP]")?, special("[PAD]")?, special("[UNK]")?);
        let max_token_id = vocab.values().copied().max().unwrap_or(0);
        Ok(SquadTokenizer { inner, cls_id, sep_id, pad_id, unk_id, vocab_size: vocab.len(), max_token_id })
    }

    /// Saves this tokenizer as a Hugging Face `tokenizer.json`.
    pub fn save_tokenizer_json(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let json =
            self.inner.to_string(true).map_err(|e| Error::Vocab { path: path.to_owned(), message: e.to_string() })?;
        std::fs::write(path, json).map_err(|source| Error::Io { path: path.to_owned(), source })
    }

    /// Number of distinct tokens in the vocab.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Largest token id (a model's embedding table needs `max_token_id() + 1` rows).
    pub fn max_token_id(&self) -> u32 {
        self.max_token_id
    }

    /// Tokenizes `text`; offsets are byte spans into `text`. `what` names the text in errors.
    pub fn tokenize(&self, text: &str, what: &str) -> Result<Tokens> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| Error::Tokenize { what: what.to_owned(), message: e.to_string() })?;
        Ok(Tokens { ids: enc.get_ids().to_vec(), offsets: enc.get_offsets().to_vec() })
    }

    /// BERT's BasicTokenizer output (normalised words and punctuation, before WordPiece) joined by single spaces.
    pub fn basic_tokenize(&self, text: &str) -> Result<String> {
        let fail = |e: tokenizers::Error| Error::Tokenize { what: "answer text".into(), message: e.to_string() };
        let mut normalized = NormalizedString::from(text);
        if let Some(n) = self.inner.get_normalizer() {
            n.normalize(&mut normalized).map_err(fail)?;
        }
        let mut pre = PreTokenizedString::from(normalized);
        if let Some(p) = self.inner.get_pre_tokenizer() {
            p.pre_tokenize(&mut pre).map_err(fail)?;
        }
        let words: Vec<&str> =
            pre.get_splits(OffsetReferential::Original, OffsetType::Byte).into_iter().map(|s| s.0).collect();
        Ok(words.join(" "))
    }

    /// The vocab string of a token id, if any.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }
}
