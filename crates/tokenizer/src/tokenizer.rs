//! Uncased/cased BERT WordPiece tokenization through the `tokenizers` crate.

use crate::error::{Error, Result};

use std::collections::HashMap;
use std::path::Path;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::{
    NormalizedString, Normalizer, NormalizerWrapper, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer,
    PreTokenizerWrapper, Tokenizer as HfTokenizer,
};

/// Bytes of text [`Tokenizer::tokenize`] hands a word-local tokenizer at once (more only when no whitespace
/// follows).
const TOKENIZE_PIECE: usize = 1 << 16;

/// The end of the piece of `text` starting at `start`: the whole rest if it is at most `piece` bytes, else the start
/// of the first whitespace run at or after `start + piece` (the rest of the text if there is none).
fn piece_end(text: &str, start: usize, piece: usize) -> usize {
    if text.len() - start <= piece {
        return text.len();
    }
    let from = text.ceil_char_boundary(start + piece);
    let mut prev_ws = text[..from].chars().next_back().is_some_and(char::is_whitespace);
    for (i, c) in text[from..].char_indices() {
        if c.is_whitespace() && !prev_ws {
            return from + i;
        }
        prev_ws = c.is_whitespace();
    }
    text.len()
}

/// Token ids with the byte span of each token in the original text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tokens {
    /// WordPiece ids.
    pub ids: Vec<u32>,
    /// Byte span `(start, end)` of each token in the text that was tokenized.
    pub offsets: Vec<(usize, usize)>,
}

/// The special tokens a sequence is framed with, under BERT's names and under RoBERTa / MPNet's (whose WordPiece
/// vocabularies and tokenizer.json files name them `<s>`, `</s>`, `<pad>`, `<unk>`): `[CLS]`, `[SEP]`, `[PAD]`, `[UNK]`.
const SPECIALS: [[&str; 2]; 4] = [["[CLS]", "<s>"], ["[SEP]", "</s>"], ["[PAD]", "<pad>"], ["[UNK]", "<unk>"]];

/// The ids of [`SPECIALS`] in a vocabulary (`id` of a token), or which one it lacks: the name the folder's
/// tokenizer_config.json or special_tokens_map.json declares (`declared`, in [`SPECIALS`]' order) first, then a name
/// `special` marks as a special token of the tokenizer, then BERT's name before RoBERTa's.
fn special_ids(
    id: impl Fn(&str) -> Option<u32>,
    declared: &[Option<String>; 4],
    special: impl Fn(&str) -> bool,
) -> std::result::Result<[u32; 4], String> {
    let mut out = [0; 4];
    for ((slot, names), declared) in out.iter_mut().zip(SPECIALS).zip(declared) {
        let by_declared = declared.as_deref().and_then(&id);
        let by_special = names.iter().filter(|t| special(t)).find_map(|t| id(t));
        *slot = by_declared
            .or(by_special)
            .or_else(|| names.iter().find_map(|t| id(t)))
            .ok_or_else(|| format!("missing special token {} (or {})", names[0], names[1]))?;
    }
    Ok(out)
}

/// The special tokens (`cls_token`, `sep_token`, `pad_token`, `unk_token`) a tokenizer file's folder declares in
/// tokenizer_config.json, else special_tokens_map.json (a name or `{"content": name}`); `None` where neither says.
/// A file that cannot be read or parsed declares nothing (the pipeline checks the folder's files itself).
fn declared_specials(tokenizer_file: &Path) -> [Option<String>; 4] {
    let mut out: [Option<String>; 4] = Default::default();
    let Some(dir) = tokenizer_file.parent() else { return out };
    for file in ["tokenizer_config.json", "special_tokens_map.json"] {
        let Ok(text) = files::read_text(&dir.join(file), files::MAX_INPUT_BYTES) else { continue };
        let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) else { continue };
        for (slot, key) in out.iter_mut().zip(["cls_token", "sep_token", "pad_token", "unk_token"]) {
            let v = &json[key];
            let name = v.as_str().or_else(|| v.get("content").and_then(|c| c.as_str()));
            if slot.is_none() {
                *slot = name.map(str::to_owned);
            }
        }
    }
    out
}

/// How a tokenizer frames one text and a pair: `first a sep (b sep)` with `pair_seps` separators between the two
/// texts and the second text's segment id, as its `tokenizer.json` post-processor says (BERT: `[CLS] a [SEP] b
/// [SEP]`, segment 1; RoBERTa and MPNet: `<s> a </s></s> b </s>`, segment 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framing {
    /// The token before the text (`[CLS]`, `<s>`).
    pub cls: u32,
    /// The token after each text (`[SEP]`, `</s>`).
    pub sep: u32,
    /// Separators between the two texts of a pair (BERT 1, RoBERTa 2).
    pub pair_seps: usize,
    /// Segment id of the second text and its separator (BERT 1, RoBERTa 0).
    pub pair_type: i64,
}

/// The framing a `tokenizer.json` post-processor declares (`RobertaProcessing`, `BertProcessing`, a
/// `TemplateProcessing` of one special token before the text and one after, or a `Sequence` holding one of them);
/// `None` when it declares none that qdq can use. `id` looks a special token's name up.
fn declared_framing(pp: &serde_json::Value, id: &dyn Fn(&str) -> Option<u32>) -> Option<Framing> {
    let named = |v: &serde_json::Value| -> Option<u32> {
        // `["</s>", 2]`: the id as written, checked against the vocabulary when it has the name.
        let (name, written) = (v.get(0)?.as_str()?, u32::try_from(v.get(1)?.as_u64()?).ok()?);
        Some(id(name).unwrap_or(written))
    };
    match pp.get("type")?.as_str()? {
        "RobertaProcessing" => {
            Some(Framing { cls: named(&pp["cls"])?, sep: named(&pp["sep"])?, pair_seps: 2, pair_type: 0 })
        }
        "BertProcessing" => {
            Some(Framing { cls: named(&pp["cls"])?, sep: named(&pp["sep"])?, pair_seps: 1, pair_type: 1 })
        }
        "Sequence" => pp.get("processors")?.as_array()?.iter().find_map(|p| declared_framing(p, id)),
        "TemplateProcessing" => template_framing(pp, id),
        _ => None,
    }
}

/// A `TemplateProcessing`'s framing: `single` must be one special token, `$A`, one special token; `pair` gives the
/// separators between `$A` and `$B` (all the `single` one's closing token) and `$B`'s segment id.
fn template_framing(pp: &serde_json::Value, id: &dyn Fn(&str) -> Option<u32>) -> Option<Framing> {
    let special = |item: &serde_json::Value| -> Option<u32> {
        let name = item.get("SpecialToken")?.get("id")?.as_str()?;
        let ids = pp.get("special_tokens")?.get(name)?.get("ids")?.as_array()?;
        match ids.as_slice() {
            [one] => u32::try_from(one.as_u64()?).ok(),
            _ => id(name),
        }
    };
    let single = pp.get("single")?.as_array()?;
    let [first, text, last] = single.as_slice() else { return None };
    text.get("Sequence")?;
    let (cls, sep) = (special(first)?, special(last)?);
    let mut framing = Framing { cls, sep, pair_seps: 1, pair_type: 1 };
    if let Some(pair) = pp.get("pair").and_then(|p| p.as_array()) {
        let a = pair.iter().position(|i| i.get("Sequence").is_some())?;
        let b = a + 1 + pair[a + 1..].iter().position(|i| i.get("Sequence").is_some())?;
        let between: Option<Vec<u32>> = pair[a + 1..b].iter().map(special).collect();
        let between = between?;
        if between.is_empty() || between.iter().any(|&t| t != sep) {
            return None;
        }
        framing.pair_seps = between.len();
        framing.pair_type = pair[b]["Sequence"].get("type_id")?.as_i64()?;
    }
    Some(framing)
}

/// BERT WordPiece tokenizer: BertNormalizer (clean text, CJK spacing, accent stripping when lower-casing,
/// lower-casing) + BertPreTokenizer + WordPiece (`##` prefix, `[UNK]`, at most 100 characters per word).
/// No post-processor: SQuAD's `build_features` adds `[CLS]`/`[SEP]` itself.
pub struct Tokenizer {
    inner: HfTokenizer,
    /// Id of `[CLS]`.
    pub cls_id: u32,
    /// Id of `[SEP]`.
    pub sep_id: u32,
    /// Id of `[PAD]`.
    pub pad_id: u32,
    /// Id of `[UNK]`.
    pub unk_id: u32,
    /// Separators between the texts of a pair (`[SEP]`: 1; RoBERTa's and MPNet's `</s></s>`: 2).
    pub pair_seps: usize,
    /// Segment id of a pair's second text (BERT 1; RoBERTa and MPNet, which have one segment, 0).
    pub pair_type: i64,
    vocab_size: usize,
    max_token_id: u32,
    /// Its normalizer and pre-tokenizer work word by word (BERT's): a long text may be tokenized in pieces.
    word_local: bool,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer").field("vocab_size", &self.vocab_size).finish_non_exhaustive()
    }
}

/// A vocabulary or tokenizer file as UTF-8 text, read as a regular file of bounded size.
fn read_text(path: &Path) -> Result<String> {
    let io = |source| Error::Io { path: path.to_owned(), source };
    files::read_text(path, files::MAX_INPUT_BYTES).map_err(io)
}

impl Tokenizer {
    /// Loads a BERT `vocab.txt` (one token per line, id = line number). Errors name the file when it cannot be read,
    /// is empty, or lacks `[CLS]`, `[SEP]`, `[PAD]` or `[UNK]`.
    pub fn from_vocab(path: impl AsRef<Path>, lowercase: bool) -> Result<Self> {
        let path = path.as_ref();
        let vocab_err = |message: String| Error::Vocab { path: path.to_owned(), message };
        let text = read_text(path).map_err(|e| match e {
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::InvalidData => vocab_err(format!(
                "not a WordPiece vocabulary (UTF-8 text, one token per line): {source}; a tokenizer.json goes to --token"
            )),
            e => e,
        })?;
        let mut vocab: HashMap<&str, u32> = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let id = u32::try_from(i).map_err(|_| vocab_err("more than 2^32 lines".into()))?;
            vocab.insert(line.trim_end(), id);
        }
        if vocab.is_empty() {
            return Err(vocab_err("the file has no tokens".into()));
        }
        let declared = declared_specials(path);
        let [cls_id, sep_id, pad_id, unk_id] =
            special_ids(|t| vocab.get(t).copied(), &declared, |_| false).map_err(vocab_err)?;
        let max_token_id = vocab.values().copied().max().unwrap_or(0);
        let vocab_size = vocab.len();
        // The text read above (its byte-order mark dropped), not the file again.
        let wp_vocab = WordPiece::read_bytes(text.as_bytes()).map_err(|e| vocab_err(e.to_string()))?;
        let model = WordPiece::builder()
            .vocab(wp_vocab)
            .unk_token("[UNK]".into())
            .continuing_subword_prefix("##".into())
            .max_input_chars_per_word(100)
            .build()
            .map_err(|e| vocab_err(e.to_string()))?;
        let mut inner = HfTokenizer::new(model);
        inner
            .with_normalizer(Some(BertNormalizer::new(true, true, None, lowercase)))
            .map_err(|e| vocab_err(e.to_string()))?;
        inner.with_pre_tokenizer(Some(BertPreTokenizer));
        // RoBERTa's names (MPNet's vocabulary) come with RoBERTa's pairs: `<s> a </s></s> b </s>`, one segment.
        let roberta = vocab.get("<s>") == Some(&cls_id);
        let (pair_seps, pair_type) = if roberta { (2, 0) } else { (1, 1) };
        Ok(Tokenizer {
            inner,
            cls_id,
            sep_id,
            pad_id,
            unk_id,
            pair_seps,
            pair_type,
            vocab_size,
            max_token_id,
            word_local: true,
        })
    }

    /// Loads a Hugging Face `tokenizer.json` (e.g. one saved with a fine-tuned model). Its normalizer,
    /// pre-tokenizer and model are used as they are; its truncation is dropped, and its post-processor and padding
    /// are read for the tokens that frame and pad a text ([`Framing`]: MPNet's `<s>`, `</s></s>` and `<pad>`, not the
    /// `[CLS]` its vocabulary also holds), then dropped (SQuAD's `build_features` frames and windows
    /// the text itself). Errors name the file when it cannot be parsed or lacks `[CLS]`, `[SEP]`, `[PAD]` or `[UNK]`.
    pub fn from_tokenizer_json(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let vocab_err = |message: String| Error::Vocab { path: path.to_owned(), message };
        let text = read_text(path)?;
        let mut inner: HfTokenizer =
            text.parse().map_err(|e: tokenizers::Error| vocab_err(format!("not a tokenizer.json: {e}")))?;
        inner.with_post_processor(None::<tokenizers::PostProcessorWrapper>);
        inner.with_padding(None);
        inner.with_truncation(None).map_err(|e| vocab_err(e.to_string()))?;
        let vocab = inner.get_vocab(true);
        if vocab.is_empty() {
            return Err(vocab_err("the tokenizer has no tokens".into()));
        }
        let id = |t: &str| vocab.get(t).copied();
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| vocab_err(format!("not JSON: {e}")))?;
        let special = |t: &str| {
            json["added_tokens"].as_array().is_some_and(|added| {
                added.iter().any(|a| a["content"].as_str() == Some(t) && a["special"].as_bool() == Some(true))
            })
        };
        let declared = declared_specials(path);
        let [mut cls_id, mut sep_id, mut pad_id, unk_id] = special_ids(id, &declared, special).map_err(vocab_err)?;
        // The post-processor frames the texts the model was trained on, the padding pads them: they win.
        let (mut pair_seps, mut pair_type) = (1, 1);
        if let Some(f) = declared_framing(&json["post_processor"], &id) {
            (cls_id, sep_id, pair_seps, pair_type) = (f.cls, f.sep, f.pair_seps, f.pair_type);
        }
        if let Some(pad) = json["padding"]["pad_id"].as_u64().and_then(|p| u32::try_from(p).ok()) {
            pad_id = pad;
        }
        let max_token_id = vocab.values().copied().max().unwrap_or(0);
        // Another tokenizer's pieces could join differently at a cut (a byte-level BPE keeps whitespace in tokens).
        let word_local = matches!(inner.get_pre_tokenizer(), Some(PreTokenizerWrapper::BertPreTokenizer(_)))
            && matches!(inner.get_normalizer(), None | Some(NormalizerWrapper::BertNormalizer(_)));
        let vocab_size = vocab.len();
        Ok(Tokenizer {
            inner,
            cls_id,
            sep_id,
            pad_id,
            unk_id,
            pair_seps,
            pair_type,
            vocab_size,
            max_token_id,
            word_local,
        })
    }

    /// Saves this tokenizer as a Hugging Face `tokenizer.json`.
    pub fn save_tokenizer_json(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let json =
            self.inner.to_string(true).map_err(|e| Error::Vocab { path: path.to_owned(), message: e.to_string() })?;
        files::write_atomic(path, json.as_bytes()).map_err(|source| Error::Io { path: path.to_owned(), source })
    }

    /// The tokens that frame a text and a pair.
    pub fn framing(&self) -> Framing {
        Framing { cls: self.cls_id, sep: self.sep_id, pair_seps: self.pair_seps, pair_type: self.pair_type }
    }

    /// Number of distinct tokens in the vocab.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Largest token id (a model's embedding table needs `max_token_id() + 1` rows).
    pub fn max_token_id(&self) -> u32 {
        self.max_token_id
    }

    /// Tokenizes `text`; offsets are byte spans into `text`. `what` names the text in errors. With BERT's normalizer
    /// and pre-tokenizer, which work word by word, a text over 64 KiB is tokenized in pieces cut where a whitespace
    /// run starts (the tokenizer's own working memory is about 100 bytes per character: a 1 MB context would cost
    /// 100 MB at once); the tokens are those of the whole text. Other tokenizers get the text whole.
    pub fn tokenize(&self, text: &str, what: &str) -> Result<Tokens> {
        self.tokenize_in_pieces(text, what, if self.word_local { TOKENIZE_PIECE } else { usize::MAX })
    }

    fn tokenize_in_pieces(&self, text: &str, what: &str, piece: usize) -> Result<Tokens> {
        let mut out = Tokens { ids: Vec::new(), offsets: Vec::new() };
        let mut start = 0;
        loop {
            let end = piece_end(text, start, piece);
            let enc = self
                .inner
                .encode(&text[start..end], false)
                .map_err(|e| Error::Tokenize { what: what.to_owned(), message: e.to_string() })?;
            out.ids.extend_from_slice(enc.get_ids());
            out.offsets.extend(enc.get_offsets().iter().map(|&(a, b)| (a + start, b + start)));
            if end == text.len() {
                break;
            }
            start = end;
        }
        Ok(out)
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

    /// The kind of its model, as Hugging Face names them: `WordPiece`, `BPE`, `Unigram` or `WordLevel`.
    pub fn model_kind(&self) -> &'static str {
        use tokenizers::models::ModelWrapper;
        match self.inner.get_model() {
            ModelWrapper::WordPiece(_) => "WordPiece",
            ModelWrapper::BPE(_) => "BPE",
            ModelWrapper::Unigram(_) => "Unigram",
            ModelWrapper::WordLevel(_) => "WordLevel",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pieces cut before whitespace give the tokens (ids and byte offsets) of the whole text: accents, CJK
    /// characters (split one by one), punctuation, runs of whitespace, multi-byte characters at the cut.
    #[test]
    fn tokenizing_in_pieces_gives_the_tokens_of_the_whole_text() {
        let vocab = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/squad/vocab.txt");
        let tok = Tokenizer::from_vocab(vocab, true).unwrap();
        let text =
            "The Café (Zürich)\tserved 北京 tea,  \n\n dozens of   \u{00a0}visitors; naïve résumé-style! ".repeat(40);
        let whole = tok.tokenize_in_pieces(&text, "t", usize::MAX).unwrap();
        assert!(whole.ids.len() > 500);
        for piece in [1, 5, 13, 64, 1000] {
            let cut = tok.tokenize_in_pieces(&text, "t", piece).unwrap();
            assert_eq!((&cut.ids, &cut.offsets), (&whole.ids, &whole.offsets), "piece {piece}");
        }
        for empty in ["", "   "] {
            assert!(tok.tokenize_in_pieces(empty, "t", 1).unwrap().ids.is_empty());
        }
    }

    /// Only BERT's normalizer and pre-tokenizer are cut into pieces: a tokenizer.json with another pre-tokenizer
    /// (byte-level BPE keeps whitespace inside its tokens) gets its text whole.
    #[test]
    fn only_word_local_tokenizers_are_cut() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let vocab = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/squad/vocab.txt");
        let bert = dir.join("bert.json");
        Tokenizer::from_vocab(vocab, true).unwrap().save_tokenizer_json(&bert).unwrap();
        assert!(Tokenizer::from_tokenizer_json(&bert).unwrap().word_local);
        let mut json: serde_json::Value = serde_json::from_slice(&std::fs::read(&bert).unwrap()).unwrap();
        json["pre_tokenizer"] = serde_json::json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
        let byte_level = dir.join("byte_level.json");
        std::fs::write(&byte_level, json.to_string()).unwrap();
        assert!(!Tokenizer::from_tokenizer_json(&byte_level).unwrap().word_local);
    }
}
