//! `pipeline`: the one crate that ties the others together: calibrate → quantize → evaluate.
//!
//! Data flows one way: SQuAD features (squad) run through the model (runtime); the activations feed the collectors
//! (calib); the ranges drive Q/DQ placement (qdq); both models are run again (runtime) and scored (squad-metrics).
//!
//! Invariants:
//! - Memory is flat in the amount of data: calibration folds each batch into fixed-size statistics; evaluation turns
//!   an example's logits into an answer as soon as its last window is scored.
//! - Every file written goes to a temporary file in the target directory and is renamed into place.
//! - Errors name the file, tensor or setting concerned; nothing here panics on user input.

mod calibrate;
mod data;
mod e2e;
mod evaluate;
mod progress;
mod report;

pub use calibrate::{CalibrateOptions, Calibration, Smoothing, calibrate, collect_stats, smooth_model, write_tables};
pub use data::{Corpus, DataConfig, Score};
pub use e2e::{E2eConfig, e2e, int8_session};
pub use evaluate::{EvalOptions, Evaluation, evaluate};
pub use progress::{NoProgress, Progress};
pub use report::{CalibrationSummary, E2eResults, Latency, ModelResult, QuantizationSummary};

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Errors of the pipeline: each wraps the failing crate's error or names the file concerned.
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
    #[error("{path}: {reason}")]
    Input { path: PathBuf, reason: String },
    #[error("cannot write {path}: {reason}")]
    Output { path: PathBuf, reason: String },
    #[error("{0}")]
    Config(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Writes `bytes` to a temporary file next to `path`, then renames it into place: readers never see a partial file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let err = |reason: String| Error::Output { path: path.to_path_buf(), reason };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| err(e.to_string()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| err(e.to_string()))?;
    tmp.write_all(bytes).map_err(|e| err(e.to_string()))?;
    tmp.as_file().sync_all().map_err(|e| err(e.to_string()))?;
    tmp.persist(path).map_err(|e| err(e.error.to_string()))?;
    Ok(())
}
