#![allow(dead_code)]
use std::path::PathBuf;
pub use tokenizer::{Framing, Tokenizer, Tokens};

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/squad").join(name)
}

pub fn tokenizer() -> Tokenizer {
    Tokenizer::from_vocab(fixture("vocab.txt"), true).unwrap()
}

/// Context tokens for a text of space-separated words, one token per word, with byte offsets.
pub fn word_tokens(text: &str) -> Tokens {
    let mut t = Tokens::default();
    let mut pos = 0;
    for (i, w) in text.split(' ').enumerate() {
        t.ids.push(100 + i as u32);
        t.offsets.push((pos, pos + w.len()));
        pos += w.len() + 1;
    }
    t
}
