//! The integration tests of squad-metrics, one binary (one link, one run), a module per subject: the scorer and the squad-eval binary.

mod cli;
mod metrics;
