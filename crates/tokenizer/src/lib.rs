//! How text becomes a BERT's token ids, whatever its task: [`Tokenizer`] reads a WordPiece vocabulary or a Hugging
//! Face tokenizer.json, and [`Framing`] is what its post-processor (or its declared special tokens) says frames a text
//! and a pair (`[CLS] a [SEP] b [SEP]`, `<s> a </s></s> b </s>`). SQuAD's features and every task's inputs are
//! tokenized through it.

mod error;
mod tokenizer;

pub use error::{Error, Result};
pub use tokenizer::{Framing, Tokenizer, Tokens};
