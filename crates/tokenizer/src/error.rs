use std::path::PathBuf;

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong reading a tokenizer or tokenizing a text; every variant names the file or the text.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The vocabulary or tokenizer file is unusable.
    #[error("vocab {path}: {message}")]
    Vocab {
        /// The vocab file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The tokenizers library failed on a text.
    #[error("tokenizing {what}: {message}")]
    Tokenize {
        /// Which text (e.g. the question id).
        what: String,
        /// The library's message.
        message: String,
    },
}
