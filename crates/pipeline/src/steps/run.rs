//! How a pass runs a model over a task's data ([`EvalOptions`]), how fast it went ([`Latency`]) and how the EP it ran
//! on is named ([`ep_label`]).

use runtime::SessionConfig;
use serde::{Deserialize, Serialize};

/// How to evaluate.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// Features per batch.
    pub batch: usize,
    pub session: SessionConfig,
    /// Untimed runs of the first batch before timing starts (TensorRT builds its engine on the first run, and every
    /// EP allocates on it); predictions are unaffected.
    pub warmup: usize,
    /// Sessions run side by side on the CPU EP, each on its share of `session`'s intra-op threads and taking the
    /// next batch when done: more questions per second where one session's threads wait on each other (a model of
    /// many small Q/DQ kernels most: docs/BENCHMARKS.md), the same answers (ONNX Runtime's CPU kernels do not split a sum across threads). 1 = one session; other EPs always
    /// one. Latency is then each session's own per batch: a throughput run, not a latency measurement.
    pub workers: usize,
    /// Also evaluate the models again at their EP's own default float precision, where that is not the session's
    /// (OpenVINO's bf16, FP16 engines: `tasks::default_float`): the rows of the float its users run.
    pub at_default_float: bool,
}

impl EvalOptions {
    /// One session per intra-op thread (`session`'s, else one per core) on the CPU EP: the throughput setting of
    /// scoring passes whose latency nobody reads ([`EvalOptions::workers`]).
    pub fn throughput(batch: usize, session: SessionConfig) -> EvalOptions {
        let workers = runtime::threads_or_cores(session.intra_threads);
        EvalOptions { batch, warmup: 0, workers, session, at_default_float: false }
    }
}

/// Latency of an evaluation. Per-feature numbers divide each batch's wall time by its features.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub features: usize,
    pub batches: usize,
    pub total_seconds: f64,
    pub ms_per_feature: f64,
    pub features_per_second: f64,
    /// Median over batches of (batch wall time / features in the batch), in ms.
    pub p50_ms_per_feature: f64,
    /// 90th percentile over batches of (batch wall time / features in the batch), in ms.
    pub p90_ms_per_feature: f64,
}

impl Latency {
    /// Builds the summary from per-batch (seconds, features) pairs.
    pub fn from_batches(batches: &[(f64, usize)]) -> Latency {
        let features: usize = batches.iter().map(|b| b.1).sum();
        let total: f64 = batches.iter().map(|b| b.0).sum();
        let mut per: Vec<f64> = batches.iter().filter(|b| b.1 > 0).map(|(s, n)| s * 1000.0 / *n as f64).collect();
        per.sort_by(f64::total_cmp);
        let pct = |p: f64| -> f64 {
            if per.is_empty() {
                return 0.0;
            }
            // nearest-rank percentile
            let rank = ((p / 100.0) * per.len() as f64).ceil().max(1.0) as usize;
            per[rank.min(per.len()) - 1]
        };
        Latency {
            features,
            batches: batches.len(),
            total_seconds: total,
            ms_per_feature: if features > 0 { total * 1000.0 / features as f64 } else { 0.0 },
            features_per_second: if total > 0.0 { features as f64 / total } else { 0.0 },
            p50_ms_per_feature: pct(50.0),
            p90_ms_per_feature: pct(90.0),
        }
    }
}

/// `ep`, with the precision of its float parts when it has one of its own (`openvino f32`), or `ep (fallback from
/// FROM)` when the run fell back to it.
pub fn ep_label(ep: &str, precision: Option<&str>, fallback_from: Option<&str>) -> String {
    match (fallback_from, precision) {
        (Some(from), _) => format!("{ep} (fallback from {from})"),
        (None, Some(p)) => format!("{ep} {p}"),
        (None, None) => ep.to_owned(),
    }
}
