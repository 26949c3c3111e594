//! The one shape every command has: settings that run ([`Job`]) into a report that prints ([`Report`]).

use std::fmt;

use crate::error::Result;
use crate::progress::Progress;

/// What a command hands back: its text (`Display`, what the command prints) and its `--json` document (docs/JSON.md).
pub trait Report: fmt::Display {
    /// The JSON document, with its `schema`.
    fn json(&self) -> serde_json::Value;

    /// Whether the run met the condition it was given, judged once its outputs are written (`qdq tune
    /// --fail-above`): the binary prints the report, then fails with this error.
    fn verdict(&self) -> Result<()> {
        Ok(())
    }
}

/// A command's settings: with feature `cli` each also derives `clap::Args`, so the binary flattens every command the
/// same way and calls [`Job::run`].
pub trait Job {
    type Report: Report;

    /// Does the command's work, reporting long stages to `progress`.
    fn run(&self, progress: &dyn Progress) -> Result<Self::Report>;
}
