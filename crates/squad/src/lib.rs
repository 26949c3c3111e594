//! SQuAD for BERT question answering: dataset loading, WordPiece tokenization, sliding-window features, batching and
//! answer post-processing, matching the original BERT `run_squad` reference.
//!
//! Flow: [`load_squad`] → `tokenizer::Tokenizer` → [`FeatureStream`] (batches of [`Feature`]s as `i64` arrays) → model →
//! [`PredictionAccumulator`] (logits to [`Prediction`]s) → [`write_predictions`] → `squad_metrics`.
//!
//! Invariants:
//! * examples keep SQuAD file order (articles, paragraphs, questions); features and their ids follow that order, and
//!   the accumulator requires logits in feature-id order;
//! * each paragraph's context is tokenized once and shared by its questions (`Arc<str>` context);
//! * token offsets are byte spans into the original context, so answer texts are exact substrings of it;
//! * memory is flat: the stream featurizes one batch at a time and the accumulator drops an example's logits as soon
//!   as its last window is scored;
//! * bad input is a typed [`Error`] naming the file and JSON path, never a panic; output files are written to a
//!   temporary file and renamed.
//!
//! What it offers the crates that use it: `FeatureStream` / `Batch`, `PredictionAccumulator`, `ModelIo`; texts are
//! tokenized by `tokenizer::Tokenizer`.

mod batch;
mod dataset;
mod error;
mod features;
mod postprocess;

pub use batch::{Batch, FeatureStream, Padding};
pub use dataset::{DocTokens, Example, SquadData, load_squad, read_dataset};
pub use error::{Error, Result};
pub use features::{Feature, FeatureConfig, FeatureWindows, ModelIo, build_features, windows};
pub use postprocess::{
    AnswerText, NbestEntry, PostProcessConfig, Prediction, PredictionAccumulator, write_predictions,
};
