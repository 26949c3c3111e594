//! The integration tests of the `qdq` binary, one test binary (one link, one run), a module per subject, on
//! onnx-ir's tiny BERT and the SQuAD fixtures.

mod common;

mod audit;
mod classify;
mod command_line;
mod e2e;
mod embedding;
mod errors;
mod inputs;
mod qnn;
mod quantize;
mod tune;
