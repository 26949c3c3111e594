use std::path::PathBuf;

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `calib`; each variant names what is at fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A tensor's data does not fit its shape, or a per-channel axis is unusable.
    #[error("tensor `{tensor}`: {message}")]
    Shape { tensor: String, message: String },
    /// Two states cannot be merged; `field` names the option or statistic that differs.
    #[error("cannot merge calibration states: `{field}` differs ({ours} vs {theirs})")]
    MergeMismatch { field: &'static str, ours: String, theirs: String },
    /// A state cannot be merged at all (e.g. the moving average depends on batch order).
    #[error("cannot merge calibration states: {0}")]
    NotMergeable(String),
    /// Unknown method name.
    #[error("unknown calibration method `{name}`; valid: minmax, percentile, entropy, distribution, mse")]
    UnknownMethod { name: String },
    /// Bad method option name or value.
    #[error("method `{method}`: option `{option}`: {message}")]
    MethodOption { method: &'static str, option: String, message: String },
    /// Invalid collection options.
    #[error("collect options: `{field}`: {message}")]
    Options { field: &'static str, message: String },
    /// A method needs a statistic that was not collected for a tensor.
    #[error(
        "tensor `{tensor}`: method `{method}` needs the {needs}, which was not collected (see CollectOptions::for_methods)"
    )]
    NotCollected { tensor: String, method: &'static str, needs: &'static str },
    /// A histogram collected for its tails alone ([`crate::CollectOptions::tails`]) folded the bins `method`'s range
    /// falls in: the statistics must be collected again with whole histograms.
    #[error(
        "tensor `{tensor}`: method `{method}`'s range needs histogram bins counted only together (the tails kept for \
         a percentile or mse were thinner than the first batches showed): collect again with whole histograms"
    )]
    TailTooThin { tensor: String, method: &'static str },
    /// A method needs a whole histogram of a tensor whose state kept only its tails.
    #[error(
        "tensor `{tensor}`: method `{method}` needs the whole {needs}, and this state kept only its tails (collected \
         for a percentile or mse alone): collect again for `{method}`"
    )]
    TailsOnly { tensor: String, method: &'static str, needs: &'static str },
    /// File system error.
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// JSON (de)serialisation error.
    #[error("{}: invalid JSON: {source}", path.display())]
    Json { path: PathBuf, source: serde_json::Error },
    /// A calibration table file is malformed.
    #[error("{}: {location}: {message}", path.display())]
    Table { path: PathBuf, location: String, message: String },
}
