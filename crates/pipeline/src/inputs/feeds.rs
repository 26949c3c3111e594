//! [`Feeds`]: batches of named model inputs, the one way calibration reads its data, whatever the file held (SQuAD
//! questions, [`crate::inputs::files::InputSet`] rows).

use ndarray::ArrayView2;

use crate::error::Result;

/// What [`Feeds::each_batch`] calls per batch: the named input arrays, how many of their rows hold data (the rest
/// fill a fixed-batch model's run: `squad::Batch::fill_to`) and the units the batch completes.
pub type BatchFn<'a> = dyn FnMut(&[(&str, ArrayView2<'_, i64>)], usize, u64) -> Result<()> + 'a;

/// Batches of model inputs, for calibration.
pub trait Feeds {
    /// The file the inputs come from (named in errors).
    fn source(&self) -> &std::path::Path;
    /// How many units (questions, inputs) there are and what they are called (for progress).
    fn units(&self) -> (u64, &'static str);
    /// Calls `f` with each batch of at most `batch` features (named input arrays) and the units it completes;
    /// returns the number of features.
    fn each_batch(&self, batch: usize, f: &mut BatchFn<'_>) -> Result<usize>;
    /// Model inputs the batches leave out, to be fed zeros ([`squad::ModelIo::zero_inputs`]).
    fn zero_inputs(&self) -> &[String] {
        &[]
    }
    /// The input marking real tokens (1) against padding (0), where the data knows it.
    fn attention_mask(&self) -> Option<&str> {
        None
    }
}
