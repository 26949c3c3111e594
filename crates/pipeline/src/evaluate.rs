//! Evaluation: run a model over SQuAD features, turn logits into answers, score them.

use std::collections::HashMap;
use std::time::Instant;

use runtime::{Session, SessionConfig};

use crate::data::questions_done;
use crate::data::{Corpus, RunLogits, Score, run_logits};
use crate::report::Latency;
use crate::{Error, Progress, Result};

/// How to evaluate.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// Features per batch.
    pub batch: usize,
    pub session: SessionConfig,
    /// Untimed runs of the first batch before timing starts (TensorRT builds its engine on the first run, and every
    /// EP allocates on it); predictions are unaffected.
    pub warmup: usize,
}

/// Predictions, scores and timing of one model.
#[derive(Debug, Clone)]
pub struct Evaluation {
    /// Question id -> answer text.
    pub predictions: HashMap<String, String>,
    /// Question id -> how far its answer is from flipping ([`squad::Prediction::margin`]).
    pub margins: HashMap<String, f32>,
    pub score: Score,
    pub latency: Latency,
    /// The EP the model ran on (cpu after an allowed fallback).
    pub ep: String,
    /// Why the EP fell back to CPU, when --allow-fallback allowed it.
    pub fallback: Option<String>,
}

/// Evaluates `model` (`name` is used in messages) on `data`.
pub fn evaluate(
    model: runtime::ModelSource<'_>,
    name: &str,
    data: &Corpus,
    opts: &EvalOptions,
    stage: &str,
    progress: &dyn Progress,
) -> Result<Evaluation> {
    let mut session = Session::open(model, name, &opts.session)?;
    if let Some(why) = session.fallback() {
        progress.note(why);
    }
    let io = data.io();
    session.feed_zeros(&io.zero_inputs)?;
    let outputs = io.logit_outputs();
    let mut acc = data.accumulator()?;
    let mut predictions = HashMap::with_capacity(data.questions());
    let mut margins = HashMap::with_capacity(data.questions());
    let mut timings = Vec::new();
    if opts.warmup > 0
        && let Some(first) = data.batches(opts.batch)?.next()
    {
        let first = first?;
        let inputs = first.inputs(io);
        for _ in 0..opts.warmup {
            session.run_with(&inputs, &outputs, |_| Ok::<_, Error>(()))?;
        }
    }
    progress.start(stage, Some(data.questions() as u64), "questions");
    for batch in data.batches(opts.batch)? {
        let batch = batch?;
        let inputs = batch.inputs(io);
        let n = batch.len();
        let t0 = Instant::now();
        session.run_with(&inputs, &outputs, |outs| -> Result<()> {
            timings.push((t0.elapsed().as_secs_f64(), n));
            let RunLogits { start, end, width } = run_logits(outs, io, n, name)?;
            for (row, f) in batch.features.iter().enumerate() {
                let s = &start[row * width..(row + 1) * width];
                let e = &end[row * width..(row + 1) * width];
                if let Some(p) = acc.push(f, s, e)? {
                    margins.insert(p.id.clone(), p.margin);
                    predictions.insert(p.id, p.text);
                }
            }
            Ok(())
        })?;
        progress.advance(questions_done(&batch));
    }
    progress.finish();
    let score = data.score(&predictions);
    Ok(Evaluation {
        predictions,
        margins,
        score,
        latency: Latency::from_batches(&timings),
        ep: session.ep().short_name().to_owned(),
        fallback: session.fallback().map(str::to_owned),
    })
}
