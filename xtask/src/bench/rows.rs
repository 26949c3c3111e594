//! The rows every timing bench reports: the Python harnesses' latencies per shape and round ([`Times`]), each shape's
//! per-round speed-ups against FP32 ([`ShapeRow`]), and a model's `qdq eval` scores ([`run_eval`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::bench::rounds::Ratio;
use crate::workspace::root;

/// One shape's latencies and speed-ups.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ShapeRow {
    pub(crate) shape: String,
    /// Per model, the median latency of each round, ms.
    pub(crate) rounds_ms: BTreeMap<String, Vec<f64>>,
    /// Per INT8 model, FP32 / model per round.
    pub(crate) speedup: BTreeMap<String, Ratio>,
}

/// The Python harness's output.
#[derive(Debug, Deserialize)]
pub(crate) struct Times {
    pub(crate) versions: BTreeMap<String, String>,
    pub(crate) shapes: BTreeMap<String, BTreeMap<String, Vec<f64>>>,
}

/// `qdq eval --json` of `model` on the first `samples` dev questions.
pub(crate) fn run_eval(
    mut eval: Command,
    paths: &crate::bench::venv::Paths,
    model: &Path,
    samples: usize,
) -> Result<crate::qdq_json::Eval> {
    eval.arg("--model").arg(model).arg("--vocab").arg(&paths.vocab).arg("--dataset").arg(&paths.dataset);
    let out = eval.args(["--samples", &samples.to_string(), "--json"]).current_dir(root()).output()?;
    if !out.status.success() {
        bail!("qdq eval of {} failed:\n{}", model.display(), String::from_utf8_lossy(&out.stderr));
    }
    crate::qdq_json::parse(&String::from_utf8_lossy(&out.stdout)).context("qdq eval --json")
}

/// Each shape of `times` with every INT8 model's speed-up against FP32 per round.
pub(crate) fn shape_rows(times: &Times) -> Vec<ShapeRow> {
    times
        .shapes
        .iter()
        .map(|(shape, rounds)| {
            let fp32 = rounds.get("fp32").cloned().unwrap_or_default();
            let speedup = rounds
                .iter()
                .filter(|(m, _)| *m != "fp32")
                .map(|(m, r)| (m.clone(), Ratio::of(fp32.iter().zip(r).map(|(f, x)| f / x).collect())))
                .collect();
            ShapeRow { shape: shape.clone(), rounds_ms: rounds.clone(), speedup }
        })
        .collect()
}
