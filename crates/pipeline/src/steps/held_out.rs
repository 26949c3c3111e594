//! Held-out questions run through FP32 once, and how far another model's start and end logits are from FP32's on
//! them (KL, argmax agreement): the proxy `qdq debug` and `qdq tune` measure candidates by.

use std::path::Path;

use onnx_ir::Model;
use runtime::SessionConfig;
use serde::Serialize;

use crate::error::Result;
use crate::inputs::squad::{Corpus, DataConfig};
use crate::steps::augment::session_with_outputs;
use crate::steps::logits::run_logits;

/// How two models' start and end logits agree, per feature, over the feature's real tokens.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct LogitAgreement {
    /// Mean KL(softmax(FP32) ‖ softmax(other)) in nats.
    pub kl_start: f64,
    pub kl_end: f64,
    /// Share of features whose argmax is the same.
    pub argmax_start: f64,
    pub argmax_end: f64,
    /// Largest |logit difference|.
    pub max_abs_diff: f64,
}

impl LogitAgreement {
    /// The mean of the start and end KL.
    pub fn kl(&self) -> f64 {
        (self.kl_start + self.kl_end) / 2.0
    }
}

/// The FP32 logits `[start, end]` of one batch.
pub(crate) type Logits = [Vec<f32>; 2];

/// Sums of per-feature logit agreement.
#[derive(Default)]
pub(crate) struct LogitSums {
    kl: [f64; 2],
    same: [u64; 2],
    max_abs: f64,
    features: u64,
}

impl LogitSums {
    /// Adds a batch: `fp32` and `other` hold `[start, end]` as `[batch, seq]`; positions the batch's attention
    /// mask leaves out do not count.
    pub(crate) fn add(&mut self, fp32: &Logits, other: &Logits, batch: &squad::Batch) {
        let seq = batch.input_ids.ncols();
        // Only the rows holding features (a fixed-batch model's filler rows have no logits here: run_logits).
        for (row, m) in batch.attention_mask.rows().into_iter().take(batch.len()).enumerate() {
            let keep: Vec<bool> = m.iter().map(|&v| v != 0).collect();
            for k in 0..2 {
                let (a, b) = (&fp32[k][row * seq..(row + 1) * seq], &other[k][row * seq..(row + 1) * seq]);
                self.kl[k] += calib::softmax_kl(a, b, &keep);
                self.same[k] += u64::from(calib::argmax(a, &keep) == calib::argmax(b, &keep));
                let diff = a.iter().zip(b).map(|(x, y)| f64::from((x - y).abs())).fold(0.0, f64::max);
                self.max_abs = self.max_abs.max(diff);
            }
            self.features += 1;
        }
    }

    pub(crate) fn agreement(&self) -> LogitAgreement {
        let n = self.features.max(1) as f64;
        LogitAgreement {
            kl_start: self.kl[0] / n,
            kl_end: self.kl[1] / n,
            argmax_start: self.same[0] as f64 / n,
            argmax_end: self.same[1] as f64 / n,
            max_abs_diff: self.max_abs,
        }
    }
}

/// How `other`'s logits agree with `fp32`'s over `batches`.
pub(crate) fn agreement(fp32: &[Logits], other: &[Logits], batches: &[squad::Batch]) -> LogitAgreement {
    let mut sums = LogitSums::default();
    for ((f, o), b) in fp32.iter().zip(other).zip(batches) {
        sums.add(f, o, b);
    }
    sums.agreement()
}

/// Held-out questions and FP32's logits on them: scores other models by how their logits agree with FP32's.
pub struct HeldOut {
    pub(crate) runs: Runs,
    pub(crate) fp32: Vec<Logits>,
    questions: usize,
}

impl HeldOut {
    /// The last `questions` questions of `dataset`, featurized as `data` says for `fp32` (loaded from `fp32_path`),
    /// and FP32's logits on them, run on `session`.
    pub fn new(
        fp32_path: &Path,
        fp32: &Model,
        dataset: &Path,
        questions: usize,
        session: SessionConfig,
        data: &DataConfig,
    ) -> Result<Self> {
        let tokenizer = data.tokenizer()?;
        let mut corpus = Corpus::load_last(dataset, data, &tokenizer, questions)?;
        corpus.fit_model(fp32, fp32_path)?;
        let batches = corpus.batches(1)?.collect::<std::result::Result<Vec<_>, _>>()?;
        let runs = Runs { cfg: session, io: corpus.io().clone(), batches };
        let fp32 = runs.values(fp32, "FP32 model")?;
        Ok(HeldOut { runs, fp32, questions: corpus.questions() })
    }

    /// The held-out batches (batch 1) and the names they are fed by: what `qdq tune` times its candidates on.
    pub fn batches(&self) -> (&[squad::Batch], &squad::ModelIo) {
        (&self.runs.batches, &self.runs.io)
    }

    /// How many questions are held out.
    pub fn questions(&self) -> usize {
        self.questions
    }

    /// How `model`'s logits agree with FP32's (`label` names it in errors).
    pub fn agreement(&self, model: &Model, label: &str) -> Result<LogitAgreement> {
        let logits = self.runs.values(model, label)?;
        Ok(agreement(&self.fp32, &logits, &self.runs.batches))
    }
}

/// The held-out batches and how to run a model on them.
pub(crate) struct Runs {
    pub(crate) cfg: SessionConfig,
    pub(crate) io: squad::ModelIo,
    pub(crate) batches: Vec<squad::Batch>,
}

impl Runs {
    /// The outputs the logits come from (both, or one stacked output), fetched first in every run.
    pub(crate) fn logit_names(&self) -> Vec<&str> {
        self.io.logit_outputs()
    }

    /// The `[start, end]` logits of a run's outputs (the first [`Runs::logit_names`]).
    pub(crate) fn pair(&self, o: &[runtime::OutputRef<'_>], batch: &squad::Batch, model: &str) -> Result<Logits> {
        let l = run_logits(o, &self.io, batch.len(), model)?;
        Ok([l.start.into_owned(), l.end.into_owned()])
    }

    /// `model`'s logits on every batch.
    fn values(&self, model: &Model, label: &str) -> Result<Vec<Logits>> {
        self.values_on(model, label, &self.cfg)
    }

    /// [`Runs::values`] in a session built with `cfg`.
    pub(crate) fn values_on(&self, model: &Model, label: &str, cfg: &SessionConfig) -> Result<Vec<Logits>> {
        let names = self.logit_names();
        let mut session = session_with_outputs(model, &names, label, cfg)?;
        session.feed_zeros(&self.io.zero_inputs)?;
        let mut logits = Vec::with_capacity(self.batches.len());
        for batch in &self.batches {
            logits.push(session.run_with(&batch.inputs(&self.io), &names, |o| self.pair(o, batch, label))?);
        }
        Ok(logits)
    }
}
