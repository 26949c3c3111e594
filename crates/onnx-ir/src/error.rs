//! The crate's single error type.

use std::path::PathBuf;

/// Everything that can go wrong reading, editing or writing a model.
///
/// Every variant names the file, tensor, node or attribute involved.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// File involved.
        path: PathBuf,
        /// Underlying I/O error.
        source: std::io::Error,
    },
    /// The bytes are not a valid ONNX protobuf message.
    #[error("{what}: not a valid ONNX model protobuf: {source}")]
    Decode {
        /// File name (or the name given to [`crate::Model::from_bytes`]).
        what: String,
        /// Underlying protobuf error.
        source: prost::DecodeError,
    },
    /// A tensor's dims, type or data are inconsistent or not what the caller asked for.
    #[error("tensor '{tensor}': {reason}")]
    BadTensor {
        /// Tensor name (with the file it came from when known).
        tensor: String,
        /// What was expected and what was found.
        reason: String,
    },
    /// A tensor stored in an external file could not be resolved or read.
    #[error("tensor '{tensor}': external data location '{location}': {reason}")]
    ExternalData {
        /// Tensor name.
        tensor: String,
        /// The `location` entry of the tensor.
        location: String,
        /// Why it was rejected.
        reason: String,
    },
    /// The graph structure is invalid (undefined input, duplicate output, cycle, bad index...).
    #[error("graph: {reason}")]
    Graph {
        /// Description naming the node and/or tensor.
        reason: String,
    },
    /// A node attribute is missing the expected type.
    #[error("node '{node}': attribute '{attr}': {reason}")]
    Attribute {
        /// Node name.
        node: String,
        /// Attribute name.
        attr: String,
        /// What was expected and what was found.
        reason: String,
    },
    /// The serialized model would exceed the 2 GiB protobuf limit.
    #[error("{what} would be {size} bytes, over the 2 GiB protobuf limit; {hint}")]
    TooLarge {
        /// What was being serialized.
        what: String,
        /// Its size in bytes.
        size: u64,
        /// How to avoid the limit.
        hint: String,
    },
    /// Invalid save options (for example an external data file name that is a path).
    #[error("invalid save options: {reason}")]
    Options {
        /// What is wrong.
        reason: String,
    },
}

/// Result alias using [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn graph_err(reason: impl Into<String>) -> Error {
    Error::Graph { reason: reason.into() }
}

pub(crate) fn tensor_err(tensor: impl Into<String>, reason: impl Into<String>) -> Error {
    Error::BadTensor { tensor: tensor.into(), reason: reason.into() }
}
