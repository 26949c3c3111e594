//! What `qdq calibrate` reports.

use std::fmt;
use std::path::PathBuf;

use crate::job::Report;
use crate::steps::collect::PassTimes;

/// What [`calibrate_to_dir`] did.
#[derive(Debug, Clone)]
pub struct CalibrateReport {
    /// The smoothing summary and where the smoothed model went, when the policy smoothed.
    pub smoothed: Option<(String, PathBuf)>,
    pub tensors: usize,
    pub features: usize,
    /// Units of calibration data (`questions` of SQuAD, or `inputs`) and their name.
    pub questions: usize,
    pub unit: &'static str,
    pub seconds: f64,
    pub times: PassTimes,
    /// How far the ranges of the two halves of the data lie apart.
    pub halves: Option<calib::RangeSpread>,
    pub out: PathBuf,
}

impl Report for CalibrateReport {
    /// The document `qdq calibrate --json` prints (docs/JSON.md, schema `qdq.calibrate/1`).
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "schema": "qdq.calibrate/1",
            "out": self.out,
            "tensors": self.tensors,
            "features": self.features,
            "questions": self.questions,
            "seconds": self.seconds,
            "pass": self.times,
            "halves": self.halves,
            "smoothing": self.smoothed.as_ref().map(|(summary, model)| serde_json::json!({
                "summary": summary,
                "model": model,
            })),
        })
    }
}

impl fmt::Display for CalibrateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some((summary, path)) = &self.smoothed {
            writeln!(f, "{summary}; wrote {} (quantize this model with these tables)", path.display())?;
        }
        write!(
            f,
            "Calibrated {} tensors on {} features ({} {}) in {:.1} s ({}); tables in {}",
            self.tensors,
            self.features,
            self.questions,
            self.unit,
            self.seconds,
            self.times.describe(),
            self.out.display()
        )?;
        if let Some(h) = &self.halves {
            write!(f, "\n{}", crate::steps::calibrate::describe_spread(h))?;
        }
        Ok(())
    }
}
