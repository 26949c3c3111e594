//! What the commands hand back and write: one report type per command (its text and its `--json` document),
//! results.json and report.md of an e2e run, the tables they share, and the SVG charts.

pub mod calibrate;
pub mod debug;
pub mod e2e;
pub mod eval;
pub mod inspect;
pub mod plots;
pub mod providers;
pub mod quantize;
pub mod results;
pub mod tune;
