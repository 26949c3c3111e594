//! The pipeline's one error type: the failing crate's error, or what went wrong and where.

use std::path::PathBuf;

/// Errors of the pipeline: each wraps the failing crate's error or names the file or setting concerned. Callers
/// branch on the kind: a [`Error::Usage`] is the user's command line (the binary exits 2, as for a flag clap rejects),
/// a [`Error::Gate`] a run that did its work and failed its own condition.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Model(#[from] onnx_ir::Error),
    #[error(transparent)]
    Runtime(#[from] runtime::Error),
    #[error(transparent)]
    Calib(#[from] calib::Error),
    #[error(transparent)]
    Qdq(#[from] qdq::Error),
    #[error(transparent)]
    Squad(#[from] squad::Error),
    #[error(transparent)]
    Tokenizer(#[from] tokenizer::Error),
    /// A file that cannot be used: `reason` says what it holds and what was expected.
    #[error("{path}: {reason}")]
    Input { path: PathBuf, reason: String },
    /// An output that cannot be written.
    #[error("cannot write {path}: {reason}")]
    Output { path: PathBuf, reason: String },
    /// Settings that do not go together or a value out of its range, found before any work: the sentence names the
    /// flags and says what to give instead.
    #[error("{0}")]
    Usage(String),
    /// The run wrote its outputs and then failed the condition it was given (`qdq tune --fail-above`).
    #[error("{0}")]
    Gate(String),
    /// Something qdq itself got wrong (a session that stopped answering, a chart that cannot be drawn): never the
    /// user's input.
    #[error("{0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
