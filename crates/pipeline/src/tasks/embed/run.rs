//! A model's sentence embeddings of a set of texts: batches of texts of similar length (less padding), run, pooled
//! when the model gives token states, put back in the texts' order.

use std::time::Instant;

use ndarray::ArrayView2;

use crate::error::{Error, Result};
use crate::inputs::files::InputSet;
use crate::progress::Progress;
use crate::steps::run::{EvalOptions, Latency};
use crate::tasks::RanOn;
use crate::tasks::embed::head::EmbeddingHead;

/// Rows of `set` in batches of at most `batch` of about the same length, longest first: each batch is padded to its
/// longest row, so sorting saves the padding's work.
fn length_batches(set: &InputSet, batch: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..set.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(set.row_len(i)));
    order.chunks(batch.max(1)).map(<[usize]>::to_vec).collect()
}

/// `model`'s embedding of every row of `set`, in row order, with the time per batch and where it ran.
pub fn embed_all(
    model: &std::path::Path,
    name: &str,
    head: &EmbeddingHead,
    set: &InputSet,
    opts: &EvalOptions,
    (stage, progress): (&str, &dyn Progress),
) -> Result<(Vec<Vec<f32>>, Latency, RanOn)> {
    let mut session = crate::model::open_session(runtime::ModelSource::File(model), name, &opts.session)?;
    if let Some(why) = session.fallback() {
        progress.warn(why);
    }
    let batches = length_batches(set, opts.batch);
    let output = head.output.name();
    for first in batches.iter().take(usize::from(opts.warmup > 0)) {
        let arrays = set.batch_of(first, 0);
        let feeds: Vec<(&str, ArrayView2<i64>)> = arrays.iter().map(|(n, a)| (n.as_str(), a.view())).collect();
        for _ in 0..opts.warmup {
            session.run_with(&feeds, &[output], |_| Ok::<_, Error>(()))?;
        }
    }
    progress.start(stage, Some(set.len() as u64), "texts");
    let (mut out, mut timings) = (vec![Vec::new(); set.len()], Vec::with_capacity(batches.len()));
    for rows in &batches {
        let arrays = set.batch_of(rows, 0);
        let feeds: Vec<(&str, ArrayView2<i64>)> = arrays.iter().map(|(n, a)| (n.as_str(), a.view())).collect();
        let mask = feeds.iter().find(|(n, _)| Some(*n) == set.mask()).map(|(_, m)| *m);
        let t0 = Instant::now();
        let vectors = session.run_with(&feeds, &[output], |outs| {
            timings.push((t0.elapsed().as_secs_f64(), rows.len()));
            head.embeddings(name, &outs[0].shape, &outs[0].data, mask)
        })?;
        if vectors.len() != rows.len() {
            return Err(Error::Internal(format!("{name}: {} embeddings for {} texts", vectors.len(), rows.len())));
        }
        for (&i, v) in rows.iter().zip(vectors) {
            out[i] = v;
        }
        progress.advance(rows.len() as u64);
    }
    progress.finish();
    Ok((out, Latency::from_batches(&timings), RanOn::of(&session, name, model)))
}
