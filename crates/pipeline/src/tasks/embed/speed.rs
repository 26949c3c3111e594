//! An embedding model's speed against FP32, in alternation ([`crate::steps::speed`]), at the shapes a deployment
//! sees: one text at a time (a search query) and a batch (indexing documents), both at the longest length the model
//! takes (every text padded to it).

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::inputs::files::InputSet;
use crate::steps::speed::{PairedTiming, Speedup, Workload};
use crate::tasks::Side;

/// The quantized model's speed against FP32 at one shape.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SpeedAt {
    /// Texts per run and tokens per text.
    pub batch: usize,
    pub seq_len: usize,
    /// FP32's time over the quantized model's per round; each model's median ms per text.
    pub speedup: Speedup,
}

impl SpeedAt {
    /// `1x128: 1.45x (1.40-1.52), 3.10 -> 2.14 ms per text`.
    pub fn describe(&self) -> String {
        format!(
            "{}x{}: {} ({:.2} -> {:.2} ms per text)",
            self.batch,
            self.seq_len,
            self.speedup.describe(),
            self.speedup.reference_ms_per_feature,
            self.speedup.ms_per_feature
        )
    }
}

/// Batch sizes timed (a query; a batch of documents) and the runs of each per round.
const SHAPES: [(usize, usize); 2] = [(1, 32), (32, 2)];
/// Rounds per shape: both models run in turn this many times.
const ROUNDS: usize = 7;

/// `int8` against `fp32` at each of [`SHAPES`] (only `fixed_batch` when the model declares one), every text padded
/// to `seq_len` tokens, on the first texts of `set`.
pub fn speed_at_lengths(
    (fp32, int8): (Side, Side),
    output: &str,
    set: &InputSet,
    seq_len: usize,
    fixed_batch: Option<usize>,
) -> Result<Vec<SpeedAt>> {
    let shapes: Vec<(usize, usize)> = match fixed_batch {
        Some(b) => vec![(b, SHAPES[0].1)],
        None => SHAPES.to_vec(),
    };
    let mut out = vec![];
    for (batch, runs) in shapes {
        let rows = |r: usize| -> Vec<usize> { (0..batch).map(|k| (r * batch + k) % set.len()).collect() };
        let batches = (0..runs).map(|r| set.batch_of(&rows(r), seq_len)).collect();
        let work = Workload::new(batches, vec![output.to_owned()]);
        let timing = PairedTiming::on(fp32.path, fp32.session, work, ROUNDS)?;
        let speedup = timing.against(int8.path, int8.session)?;
        out.push(SpeedAt { batch, seq_len, speedup });
    }
    Ok(out)
}
