//! A SQuAD model evaluated: run over SQuAD features, logits turned into answers, the answers scored.

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc;
use std::time::Instant;

use runtime::{ModelSource, Session};

use crate::error::{Error, Result};
use crate::progress::Progress;
use crate::steps::run::{EvalOptions, Latency, ep_label};
use crate::steps::spread::{Order, spread};
use crate::tasks::squad::data::{Corpus, Score, questions_done};
use crate::tasks::squad::logits::{RunLogits, run_logits};

/// Predictions, scores and timing of one model.
#[derive(Debug, Clone)]
pub struct Evaluation {
    /// Question id -> answer text.
    pub predictions: HashMap<String, String>,
    /// Question id -> how far its answer is from flipping ([`squad::Prediction::margin`]).
    pub margins: HashMap<String, f32>,
    pub score: Score,
    pub latency: Latency,
    /// Wall time of the pass, first batch to last answer (warm-up left out).
    pub wall_seconds: f64,
    /// Sessions run side by side ([`EvalOptions::workers`]).
    pub workers: usize,
    /// The EP the model ran on (cpu after an allowed fallback).
    pub ep: String,
    /// The precision the EP ran the float parts in, where that is a setting of the EP's (OpenVINO's `f32`, `bf16`).
    pub ep_precision: Option<String>,
    /// Why the EP fell back to CPU, when --allow-fallback allowed it.
    pub fallback: Option<String>,
    /// The EP asked for, when the run fell back to CPU from it.
    pub fallback_from: Option<String>,
}

impl Evaluation {
    /// Milliseconds of the pass's wall time per feature: its throughput, whatever the sessions.
    pub fn wall_ms_per_feature(&self) -> f64 {
        if self.latency.features == 0 { 0.0 } else { self.wall_seconds * 1000.0 / self.latency.features as f64 }
    }

    /// The EP as printed: `cpu (fallback from tensorrt)` after a fallback.
    pub fn ep_label(&self) -> String {
        ep_label(&self.ep, self.ep_precision.as_deref(), self.fallback_from.as_deref())
    }
}

/// Answers as the logits of consecutive batches arrive, in feature order.
struct Answers<'a> {
    acc: squad::PredictionAccumulator<'a>,
    predictions: HashMap<String, String>,
    margins: HashMap<String, f32>,
    timings: Vec<(f64, usize)>,
}

impl Answers<'_> {
    fn take(&mut self, batch: &squad::Batch, logits: &RunLogits<'_>, seconds: f64) -> Result<()> {
        self.timings.push((seconds, batch.len()));
        let RunLogits { start, end, width } = logits;
        for (row, f) in batch.features.iter().enumerate() {
            let s = &start[row * width..(row + 1) * width];
            let e = &end[row * width..(row + 1) * width];
            if let Some(p) = self.acc.push(f, s, e)? {
                self.margins.insert(p.id.clone(), p.margin);
                self.predictions.insert(p.id, p.text);
            }
        }
        Ok(())
    }
}

/// The first `samples` questions of `dataset` (0: all) for per-question scores (`squad_metrics::question_f1`), and
/// whether they are scored as SQuAD v2.0 (`version_2` says so, or the file does).
pub fn scored_questions(
    dataset: &std::path::Path,
    samples: usize,
    version_2: bool,
) -> Result<(squad_metrics::Dataset, bool)> {
    let all = squad_metrics::load_dataset(dataset)
        .map_err(|e| Error::Input { path: dataset.to_path_buf(), reason: e.to_string() })?;
    let gold = if samples == 0 { all } else { all.first_n(samples) };
    let v2 = version_2 || gold.is_v2();
    Ok((gold, v2))
}

/// Evaluates `model` (`name` is used in messages) on `data`.
pub fn evaluate(
    model: ModelSource<'_>,
    name: &str,
    data: &Corpus,
    opts: &EvalOptions,
    stage: &str,
    progress: &dyn Progress,
) -> Result<Evaluation> {
    let mut sessions = open_warm(model, name, data, opts, progress)?;
    let io = data.io();
    let outputs = io.logit_outputs();
    let mut answers = Answers {
        acc: data.accumulator()?,
        predictions: HashMap::with_capacity(data.questions()),
        margins: HashMap::with_capacity(data.questions()),
        timings: Vec::new(),
    };
    progress.start(stage, Some(data.questions() as u64), "questions");
    let started = Instant::now();
    if let [session] = sessions.as_mut_slice() {
        for batch in data.batches(opts.batch)? {
            let batch = batch?;
            let t0 = Instant::now();
            session.run_with(&batch.inputs(io), &outputs, |outs| -> Result<()> {
                let seconds = t0.elapsed().as_secs_f64();
                answers.take(&batch, &run_logits(outs, io, batch.len(), name)?, seconds)
            })?;
            progress.advance(questions_done(&batch));
        }
    } else {
        run_side_by_side(&mut sessions, data, opts.batch, name, &mut answers, progress)?;
    }
    let wall_seconds = started.elapsed().as_secs_f64();
    progress.finish();
    let score = data.score(&answers.predictions);
    Ok(Evaluation {
        predictions: answers.predictions,
        margins: answers.margins,
        score,
        latency: Latency::from_batches(&answers.timings),
        wall_seconds,
        workers: sessions.len(),
        ep: sessions[0].ep().short_name().to_owned(),
        ep_precision: sessions[0].ep().float_precision().map(str::to_owned),
        fallback: sessions[0].fallback().map(str::to_owned),
        fallback_from: sessions[0].fallback_from().map(str::to_owned),
    })
}

/// The evaluation's sessions (one, or `opts.workers` side by side), fed as `data` feeds the model and warmed up on
/// its first batch (untimed runs: TensorRT builds its engine on the first one).
fn open_warm(
    model: ModelSource<'_>,
    name: &str,
    data: &Corpus,
    opts: &EvalOptions,
    progress: &dyn Progress,
) -> Result<Vec<Session>> {
    let mut sessions = opts
        .session
        .side_by_side(opts.workers)
        .iter()
        .map(|cfg| crate::model::open_session(model, name, cfg))
        .collect::<runtime::Result<Vec<_>>>()?;
    if let Some(why) = sessions[0].fallback() {
        progress.warn(why);
    }
    let io = data.io();
    for session in &mut sessions {
        session.feed_zeros(&io.zero_inputs)?;
    }
    if opts.warmup > 0
        && let Some(first) = data.batches(opts.batch)?.next()
    {
        let first = first?;
        let inputs = first.inputs(io);
        for session in &mut sessions {
            for _ in 0..opts.warmup {
                session.run_with(&inputs, &io.logit_outputs(), |_| Ok::<_, Error>(()))?;
            }
        }
    }
    Ok(sessions)
}

/// A batch run by one of the side-by-side sessions: its index in the pass, its logits and the run's seconds.
type Done = (usize, squad::Batch, RunLogits<'static>, f64);

/// The pass with every session in its own thread taking the next batch ([`spread`]); the answers
/// are made on this thread in feature order (the logits of a batch that finishes early wait for the ones before it).
fn run_side_by_side(
    sessions: &mut [Session],
    data: &Corpus,
    batch: usize,
    name: &str,
    answers: &mut Answers<'_>,
    progress: &dyn Progress,
) -> Result<()> {
    let io = data.io();
    let outputs = io.logit_outputs();
    let (finished, done) = mpsc::channel::<Done>();
    let mut waiting: BTreeMap<usize, (squad::Batch, RunLogits<'static>, f64)> = BTreeMap::new();
    let mut next = 0;
    let mut take = |(index, b, l, s): Done| -> Result<()> {
        waiting.insert(index, (b, l, s));
        while let Some((b, l, s)) = waiting.remove(&next) {
            answers.take(&b, &l, s)?;
            progress.advance(questions_done(&b));
            next += 1;
        }
        Ok(())
    };
    // Feeds the queue and makes the answers of what has come back, in order, as it goes.
    let sent = spread(
        sessions,
        name,
        Order::Free,
        |send| {
            let mut sent = 0;
            for b in data.batches(batch)? {
                send((sent, b?))?;
                sent += 1;
                while let Ok(d) = done.try_recv() {
                    take(d)?;
                }
            }
            Ok(sent)
        },
        |session, (index, b): (usize, squad::Batch)| {
            let t0 = Instant::now();
            let (l, s) = session.run_with(&b.inputs(io), &outputs, |outs| -> Result<(RunLogits<'static>, f64)> {
                let seconds = t0.elapsed().as_secs_f64();
                Ok((run_logits(outs, io, b.len(), name)?.into_owned(), seconds))
            })?;
            finished.send((index, b, l, s)).map_err(|_| Error::Internal(format!("{name}: the answers stopped")))
        },
    )?;
    drop(finished);
    for d in done.iter() {
        take(d)?;
    }
    if next < sent {
        return Err(Error::Internal(format!("{name}: {next} of {sent} batches came back from the sessions")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_percentiles_use_nearest_rank_per_feature() {
        // per-feature ms: 10, 20, 30, 40 (batch of 2 taking 0.08 s = 40 ms/feature)
        let l = Latency::from_batches(&[(0.010, 1), (0.020, 1), (0.030, 1), (0.080, 2)]);
        assert_eq!(l.features, 5);
        assert_eq!(l.batches, 4);
        assert!((l.total_seconds - 0.14).abs() < 1e-12);
        assert!((l.ms_per_feature - 28.0).abs() < 1e-9);
        assert!((l.p50_ms_per_feature - 20.0).abs() < 1e-9);
        assert!((l.p90_ms_per_feature - 40.0).abs() < 1e-9);
        assert!((l.features_per_second - 5.0 / 0.14).abs() < 1e-9);
        assert_eq!(Latency::from_batches(&[]), Latency::default());
    }
}
