use std::path::PathBuf;

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in this crate; every variant names what was wrong and where.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The SQuAD JSON is malformed or inconsistent at `json_path` (e.g. `data[0].paragraphs[1].qas[2].id`).
    #[error("{path}: at {json_path}: {message}")]
    Json {
        /// The file.
        path: PathBuf,
        /// Where in the JSON document.
        json_path: String,
        /// What was expected.
        message: String,
    },
    /// The tokenizer or a text it tokenizes.
    #[error(transparent)]
    Text(#[from] tokenizer::Error),
    /// A [`FeatureConfig`](crate::FeatureConfig) or post-processing setting is unusable.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Logits handed to the accumulator do not fit the feature.
    #[error("feature {feature_id}: {message}")]
    Logits {
        /// The feature id.
        feature_id: usize,
        /// What is wrong.
        message: String,
    },
}
