//! Progress reporting, so long stages can drive a progress bar without the pipeline knowing about terminals.

/// Receives progress of long stages. The CLI implements it with indicatif; tests and libraries use [`NoProgress`].
pub trait Progress: Sync {
    /// A stage starts; `total` is the number of units (features) when known.
    fn start(&self, stage: &str, total: Option<u64>);
    /// `n` more units are done.
    fn advance(&self, n: u64);
    /// The stage is over.
    fn finish(&self);
    /// A message for the user (e.g. "falling back to CPU: ...").
    fn note(&self, message: &str) {
        tracing::warn!("{message}");
    }
}

/// Ignores progress.
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _: &str, _: Option<u64>) {}
    fn advance(&self, _: u64) {}
    fn finish(&self) {}
}
