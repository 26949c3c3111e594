//! The integration tests of squad, one binary (one link, one run), a module per subject: data, tokenizer, features and post-processing.

mod common;

mod data_and_tokenizer;
mod features;
mod postprocess;
