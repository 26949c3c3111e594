//! Ratios measured in alternating rounds (A B A B ...): the median and the spread, as every bench reports them.

use serde::{Deserialize, Serialize};

/// A ratio over alternating rounds (latency FP32 / model in `bench cpu-int8`, pass / inference alone in
/// `bench vs-python`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Ratio {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

impl Ratio {
    /// The median (upper of two middle values), smallest and largest of per-round ratios; NaN when there are none.
    pub(crate) fn of(mut per_round: Vec<f64>) -> Ratio {
        per_round.sort_by(f64::total_cmp);
        let median = per_round.get(per_round.len() / 2).copied().unwrap_or(f64::NAN);
        let (min, max) = (per_round.first().copied(), per_round.last().copied());
        Ratio { median, min: min.unwrap_or(f64::NAN), max: max.unwrap_or(f64::NAN) }
    }
}
