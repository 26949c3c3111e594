//! Held-out inputs run through FP32 once, and how far another model's outputs are from FP32's on them, in the task's
//! measure: a QA head's start and end logits (KL, argmax agreement), a sentence embedding (cosine) or a classifier's
//! class logits (KL of the class probabilities, class = FP32's). The proxy
//! `qdq debug` and `qdq tune` measure candidates by; which inputs and which outputs is the task's choice
//! (`tasks::Task::held_out`).

use std::path::Path;

use ndarray::{Array2, ArrayView2};
use onnx_ir::Model;
use runtime::SessionConfig;
use serde::Serialize;

pub mod pairs;

use crate::error::Result;
use crate::inputs::config::DataConfig;
use crate::inputs::files::InputSet;
use crate::inputs::files::TextInputs;
use crate::steps::augment::session_with_outputs;
use crate::steps::speed::{Workload, leading_by};
use crate::tasks::Task;
use crate::tasks::embed::data::EmbedData;
use crate::tasks::embed::head::EmbeddingHead;
use crate::tasks::squad::data::{Corpus, questions_done};
use crate::tasks::squad::logits::run_logits;

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

/// How two models' sentence embeddings of the same texts agree.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct EmbeddingAgreement {
    /// Mean cosine between the two models' embeddings of a text.
    pub mean_cosine: f64,
    /// The lowest of those cosines.
    pub min_cosine: f64,
    /// How much the model moves the similarities that order each text's neighbours, relative to how far apart those
    /// similarities are: for every held-out text, the change of its cosine to each other text, less that change's
    /// mean over the others (a shift common to them all reorders nothing), root-mean-square, over the spread
    /// (standard deviation) of FP32's cosines; the mean over texts. 0: every text ranks the others as FP32 does by
    /// the same margins. Retrieval loses what reorders neighbours, which a mean cosine does not tell apart from error
    /// in directions no ranking reads. Over the first [`DISTORTION_TEXTS`] texts (the pairs grow with their square).
    pub similarity_distortion: f64,
}

/// How two classifiers' class logits agree, per input (a token classifier: per token the mask keeps).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ClassAgreement {
    /// Classes per row (1: a regression head, compared by its squared difference).
    pub classes: usize,
    /// Mean KL(softmax(FP32) ‖ softmax(other)) of the class probabilities, in nats.
    pub mean_kl: f64,
    /// Share of rows whose class (argmax) is FP32's.
    pub same_class: f64,
    /// Rows whose class is not FP32's.
    pub flips: u64,
    /// Mean squared logit difference (a regression head's distance).
    pub mean_sq_diff: f64,
    /// Largest |logit difference|.
    pub max_abs_diff: f64,
}

/// How another model agrees with FP32 on the held-out inputs, in its task's measure.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(untagged)]
pub enum OutputAgreement {
    /// A QA head's start and end logits.
    Logits(LogitAgreement),
    /// A sentence embedding.
    Embeddings(EmbeddingAgreement),
    /// A classifier's class logits.
    Classes(ClassAgreement),
}

impl OutputAgreement {
    /// The distance from FP32 that `debug` ranks nodes by and `tune` compares candidates by (0: FP32's outputs):
    /// the logits' mean KL in nats, the embeddings' mean cosine distance (1 - cosine).
    pub fn loss(&self) -> f64 {
        match self {
            OutputAgreement::Logits(a) => a.kl(),
            OutputAgreement::Embeddings(a) => 1.0 - a.mean_cosine,
            OutputAgreement::Classes(a) if a.classes == 1 => a.mean_sq_diff,
            OutputAgreement::Classes(a) => a.mean_kl,
        }
    }

    /// The logits' agreement, for a QA model.
    pub fn as_logits(&self) -> Option<&LogitAgreement> {
        match self {
            OutputAgreement::Logits(a) => Some(a),
            OutputAgreement::Embeddings(_) | OutputAgreement::Classes(_) => None,
        }
    }

    /// The embeddings' agreement, for an embedding model.
    pub fn as_embeddings(&self) -> Option<&EmbeddingAgreement> {
        match self {
            OutputAgreement::Embeddings(a) => Some(a),
            OutputAgreement::Logits(_) | OutputAgreement::Classes(_) => None,
        }
    }

    /// What [`OutputAgreement::loss`] is, as the tables head it.
    pub fn loss_name(&self) -> &'static str {
        match self {
            OutputAgreement::Logits(_) => "KL",
            OutputAgreement::Embeddings(_) => "1 - cos",
            OutputAgreement::Classes(a) if a.classes == 1 => "mean sq diff",
            OutputAgreement::Classes(_) => "KL",
        }
    }

    /// What is compared, as debug.json's keys name it: `logits`, `embeddings` or `class_logits`.
    pub fn key(&self) -> &'static str {
        match self {
            OutputAgreement::Classes(_) => "class_logits",
            OutputAgreement::Logits(_) | OutputAgreement::Embeddings(_) => self.measured(),
        }
    }

    /// What is compared, in words: `logits`, `embeddings` or `class logits`.
    pub fn measured(&self) -> &'static str {
        match self {
            OutputAgreement::Logits(_) => "logits",
            OutputAgreement::Embeddings(_) => "embeddings",
            OutputAgreement::Classes(_) => "class logits",
        }
    }

    /// [`OutputAgreement::loss`] as the tables show it: KL to 4 decimals, a cosine distance (often 1e-5) in
    /// scientific notation.
    pub fn loss_text(&self) -> String {
        match self {
            OutputAgreement::Logits(a) => format!("{:.4}", a.kl()),
            OutputAgreement::Embeddings(_) | OutputAgreement::Classes(_) => format!("{:.3e}", self.loss()),
        }
    }

    /// The second measure the tables show beside the loss: the share of features with the same argmax (start and
    /// end together), the lowest cosine, or the share of inputs whose class is FP32's (a regression head: the largest
    /// difference).
    pub fn second(&self) -> (&'static str, String) {
        match self {
            OutputAgreement::Logits(a) => ("same argmax", format!("{:.1} %", 50.0 * (a.argmax_start + a.argmax_end))),
            OutputAgreement::Embeddings(a) => ("min cos", format!("{:.5}", a.min_cosine)),
            OutputAgreement::Classes(a) if a.classes == 1 => ("max |diff|", format!("{:.4}", a.max_abs_diff)),
            OutputAgreement::Classes(a) => ("class = FP32", format!("{:.2} %", 100.0 * a.same_class)),
        }
    }

    /// The agreement in one line.
    pub fn describe(&self) -> String {
        match self {
            OutputAgreement::Logits(a) => format!(
                "KL start {:.4} / end {:.4} nats, same argmax {:.1} % / {:.1} %, max |diff| {:.3}",
                a.kl_start,
                a.kl_end,
                100.0 * a.argmax_start,
                100.0 * a.argmax_end,
                a.max_abs_diff
            ),
            OutputAgreement::Embeddings(a) => format!(
                "cosine mean {:.5} (distance {:.2e}), min {:.5}, similarity distortion {:.4}",
                a.mean_cosine,
                1.0 - a.mean_cosine,
                a.min_cosine,
                a.similarity_distortion
            ),
            OutputAgreement::Classes(a) if a.classes == 1 => format!(
                "regression output: mean squared difference {:.3e}, max |diff| {:.4}",
                a.mean_sq_diff, a.max_abs_diff
            ),
            OutputAgreement::Classes(a) => format!(
                "class KL {:.3e} nats, class = FP32's {:.2} % ({} flipped), max |diff| {:.3}",
                a.mean_kl,
                100.0 * a.same_class,
                a.flips,
                a.max_abs_diff
            ),
        }
    }
}

/// One held-out batch's values a model is compared on: `[start, end]` logits (`[rows, seq]` each), one embedding
/// per row, or class logits (one row per input, or per kept token of a token classifier).
pub(crate) enum Values {
    Logits([Vec<f32>; 2]),
    Embeddings(Vec<Vec<f32>>),
    Classes(Vec<Vec<f32>>),
}

/// Sums of per-input agreement.
pub(crate) enum Sums {
    Logits {
        kl: [f64; 2],
        same: [u64; 2],
        max_abs: f64,
        features: u64,
    },
    /// Each text's two embeddings, unit length (FP32's, the other model's).
    Embeddings {
        pairs: Vec<(Vec<f64>, Vec<f64>)>,
    },
    Classes(ClassSums),
}

/// Sums of class-logit agreement over rows.
#[derive(Default)]
pub(crate) struct ClassSums {
    classes: usize,
    kl: f64,
    sq: f64,
    sq_n: u64,
    same: u64,
    rows: u64,
    max_abs: f64,
}

impl ClassSums {
    fn add(&mut self, a: &[Vec<f32>], b: &[Vec<f32>]) {
        for (x, y) in a.iter().zip(b) {
            self.classes = x.len();
            self.kl += calib::softmax_kl(x, y, &[]);
            self.same += u64::from(calib::argmax(x, &[]) == calib::argmax(y, &[]));
            for (p, q) in x.iter().zip(y) {
                let d = f64::from(p - q);
                self.sq += d * d;
                self.max_abs = self.max_abs.max(d.abs());
            }
            self.sq_n += x.len() as u64;
            self.rows += 1;
        }
    }

    fn agreement(&self) -> ClassAgreement {
        let n = self.rows.max(1) as f64;
        ClassAgreement {
            classes: self.classes,
            mean_kl: self.kl / n,
            same_class: if self.rows == 0 { 1.0 } else { self.same as f64 / n },
            flips: self.rows - self.same,
            mean_sq_diff: self.sq / self.sq_n.max(1) as f64,
            max_abs_diff: self.max_abs,
        }
    }
}

impl Sums {
    /// Adds a batch: `fp32` and `other` are the same batch's values of the two models; positions the batch's
    /// attention mask leaves out do not count.
    pub(crate) fn add(&mut self, fp32: &Values, other: &Values, batch: &HeldBatch) {
        match (self, fp32, other) {
            (Sums::Logits { kl, same, max_abs, features }, Values::Logits(a), Values::Logits(b)) => {
                let Some(mask) = batch.mask() else { return };
                let seq = mask.ncols();
                // Only the rows holding features (a fixed-batch model's filler rows have no logits here).
                for (row, m) in mask.rows().into_iter().take(batch.used).enumerate() {
                    let keep: Vec<bool> = m.iter().map(|&v| v != 0).collect();
                    for k in 0..2 {
                        let (x, y) = (&a[k][row * seq..(row + 1) * seq], &b[k][row * seq..(row + 1) * seq]);
                        kl[k] += calib::softmax_kl(x, y, &keep);
                        same[k] += u64::from(calib::argmax(x, &keep) == calib::argmax(y, &keep));
                        let diff = x.iter().zip(y).map(|(p, q)| f64::from((p - q).abs())).fold(0.0, f64::max);
                        *max_abs = max_abs.max(diff);
                    }
                    *features += 1;
                }
            }
            (Sums::Embeddings { pairs }, Values::Embeddings(a), Values::Embeddings(b)) => {
                pairs.extend(a.iter().zip(b).map(|(x, y)| (unit(x), unit(y))));
            }
            (Sums::Classes(sums), Values::Classes(a), Values::Classes(b)) => sums.add(a, b),
            // The two sides of one comparison are read by the same reader.
            _ => {}
        }
    }

    pub(crate) fn agreement(&self) -> OutputAgreement {
        match self {
            Sums::Logits { kl, same, max_abs, features } => {
                let n = (*features).max(1) as f64;
                OutputAgreement::Logits(LogitAgreement {
                    kl_start: kl[0] / n,
                    kl_end: kl[1] / n,
                    argmax_start: same[0] as f64 / n,
                    argmax_end: same[1] as f64 / n,
                    max_abs_diff: *max_abs,
                })
            }
            Sums::Embeddings { pairs } => OutputAgreement::Embeddings(embedding_agreement(pairs)),
            Sums::Classes(sums) => OutputAgreement::Classes(sums.agreement()),
        }
    }
}

/// The held-out texts [`EmbeddingAgreement::similarity_distortion`] reads at most: a million pairs.
pub const DISTORTION_TEXTS: usize = 1000;

/// Cosines and [`EmbeddingAgreement::similarity_distortion`] of unit-length embedding pairs (FP32's, the other's).
fn embedding_agreement(pairs: &[(Vec<f64>, Vec<f64>)]) -> EmbeddingAgreement {
    if pairs.is_empty() {
        return EmbeddingAgreement { mean_cosine: 1.0, min_cosine: 1.0, similarity_distortion: 0.0 };
    }
    let cosines: Vec<f64> = pairs.iter().map(|(a, b)| cosine_of(a, b)).collect();
    let (mut distortion, mut anchors) = (0.0, 0usize);
    let ranked = &pairs[..pairs.len().min(DISTORTION_TEXTS)];
    let n = ranked.len();
    if n >= 3 {
        for (i, (a, b)) in ranked.iter().enumerate() {
            let (mut s, mut d) = (Vec::with_capacity(n - 1), Vec::with_capacity(n - 1));
            for (x, y) in ranked.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, p)| p) {
                let fp32 = dot(a, x);
                s.push(fp32);
                d.push(dot(b, y) - fp32);
            }
            let spread = std_dev(&s);
            if spread > 0.0 {
                distortion += std_dev(&d) / spread;
                anchors += 1;
            }
        }
    }
    EmbeddingAgreement {
        mean_cosine: cosines.iter().sum::<f64>() / pairs.len() as f64,
        min_cosine: cosines.iter().copied().fold(f64::INFINITY, f64::min),
        similarity_distortion: if anchors == 0 { 0.0 } else { distortion / anchors as f64 },
    }
}

/// `v` scaled to unit length, in f64 (a zero vector stays zero).
fn unit(v: &[f32]) -> Vec<f64> {
    let norm = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
    v.iter().map(|&x| if norm > 0.0 { f64::from(x) / norm } else { 0.0 }).collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The population standard deviation (root-mean-square about the mean).
fn std_dev(v: &[f64]) -> f64 {
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    (v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / v.len().max(1) as f64).sqrt()
}

/// The cosine of two unit-length (or zero) vectors (1 for two zero vectors: the same output).
fn cosine_of(a: &[f64], b: &[f64]) -> f64 {
    let (aa, bb) = (dot(a, a), dot(b, b));
    if aa == 0.0 && bb == 0.0 { 1.0 } else { dot(a, b).clamp(-1.0, 1.0) }
}

/// One held-out batch: the arrays fed, the rows that hold inputs (a fixed-batch model's filler rows come after
/// them), the units (questions, texts) it completes and which feed is the attention mask.
pub(crate) struct HeldBatch {
    feeds: Vec<(String, Array2<i64>)>,
    pub(crate) used: usize,
    pub(crate) units: u64,
    mask: Option<usize>,
}

impl HeldBatch {
    /// The feeds as a run takes them.
    pub(crate) fn feeds(&self) -> Vec<(&str, ArrayView2<'_, i64>)> {
        self.feeds.iter().map(|(n, a)| (n.as_str(), a.view())).collect()
    }

    /// Rows fed (the inputs, then any filler rows).
    pub(crate) fn rows(&self) -> usize {
        self.feeds.first().map_or(0, |(_, a)| a.nrows())
    }

    fn mask(&self) -> Option<ArrayView2<'_, i64>> {
        self.mask.map(|k| self.feeds[k].1.view())
    }
}

/// What a held-out run reads: the QA head's logits (through the SQuAD names), the sentence embedding, or a
/// classifier's class logits (the output named).
pub(crate) enum Read {
    Logits(squad::ModelIo),
    Embedding(EmbeddingHead),
    Classes(String),
}

/// The held-out batches and how to run a model on them.
pub(crate) struct Runs {
    pub(crate) cfg: SessionConfig,
    read: Read,
    zero_inputs: Vec<String>,
    pub(crate) batches: Vec<HeldBatch>,
}

impl Runs {
    /// The outputs the compared values come from, fetched first in every run.
    pub(crate) fn output_names(&self) -> Vec<&str> {
        match &self.read {
            Read::Logits(io) => io.logit_outputs(),
            Read::Embedding(head) => vec![head.output.name()],
            Read::Classes(output) => vec![output.as_str()],
        }
    }

    /// Inputs fed zeros.
    pub(crate) fn zero_inputs(&self) -> &[String] {
        &self.zero_inputs
    }

    /// Empty sums of this reader's kind.
    pub(crate) fn sums(&self) -> Sums {
        match &self.read {
            Read::Logits(_) => Sums::Logits { kl: [0.0; 2], same: [0; 2], max_abs: 0.0, features: 0 },
            Read::Embedding(_) => Sums::Embeddings { pairs: vec![] },
            Read::Classes(_) => Sums::Classes(ClassSums::default()),
        }
    }

    /// The values of a run's outputs (the first [`Runs::output_names`]) on `batch`, of the model `model` (named in
    /// errors).
    pub(crate) fn read(&self, o: &[runtime::OutputRef<'_>], batch: &HeldBatch, model: &str) -> Result<Values> {
        match &self.read {
            Read::Logits(io) => {
                let l = run_logits(o, io, batch.used, model)?;
                Ok(Values::Logits([l.start.into_owned(), l.end.into_owned()]))
            }
            Read::Embedding(head) => {
                let mut rows = head.embeddings(model, &o[0].shape, &o[0].data, batch.mask())?;
                rows.truncate(batch.used);
                Ok(Values::Embeddings(rows))
            }
            Read::Classes(output) => Ok(Values::Classes(class_rows(&o[0], batch, output, model)?)),
        }
    }

    /// `model`'s values on every batch.
    fn values(&self, model: &Model, label: &str) -> Result<Vec<Values>> {
        self.values_on(model, label, &self.cfg)
    }

    /// [`Runs::values`] in a session built with `cfg`.
    pub(crate) fn values_on(&self, model: &Model, label: &str, cfg: &SessionConfig) -> Result<Vec<Values>> {
        let names = self.output_names();
        let mut session = session_with_outputs(model, &names, label, cfg)?;
        session.feed_zeros(&self.zero_inputs)?;
        let mut values = Vec::with_capacity(self.batches.len());
        for batch in &self.batches {
            values.push(session.run_with(&batch.feeds(), &names, |o| self.read(o, batch, label))?);
        }
        Ok(values)
    }
}

/// A classifier's class-logit rows of one held-out batch: `[rows, classes]` gives a row per input; `[rows, seq,
/// classes]` over the batch's `[rows, seq]` attention mask (a token classifier) a row per token the mask keeps.
fn class_rows(o: &runtime::OutputRef<'_>, batch: &HeldBatch, output: &str, model: &str) -> Result<Vec<Vec<f32>>> {
    let classes = o.shape.last().copied().unwrap_or(0);
    let bad = |reason: String| runtime::Error::BadOutput { model: model.to_owned(), output: output.to_owned(), reason };
    if o.shape.first() != Some(&batch.rows()) || classes == 0 || !o.data.len().is_multiple_of(classes) {
        return Err(bad(format!("expected [batch {}, ..., classes] logits, got {:?}", batch.rows(), o.shape)).into());
    }
    let per_row = o.data.len() / batch.rows().max(1);
    let used = &o.data[..per_row * batch.used];
    Ok(match batch.mask().filter(|m| o.shape.len() == 3 && m.dim() == (batch.rows(), o.shape[1])) {
        Some(mask) => {
            used.chunks(classes).zip(mask.iter()).filter(|(_, m)| **m != 0).map(|(row, _)| row.to_vec()).collect()
        }
        None => used.chunks(classes).map(<[f32]>::to_vec).collect(),
    })
}

/// Held-out inputs and FP32's values on them: scores other models by how their outputs agree with FP32's.
pub struct HeldOut {
    pub(crate) runs: Runs,
    pub(crate) fp32: Vec<Values>,
    units: usize,
    unit: &'static str,
    /// Which inputs, in words (`the last 32 questions of dev.json (33 features)`).
    what: String,
    /// The task the inputs are held out for (set by `Task::held_out`).
    task: Option<Task>,
}

impl HeldOut {
    /// SQuAD questions (`corpus`, fitted to `fp32`), one feature per batch, and FP32's logits on them, run on
    /// `session`.
    pub(crate) fn questions(fp32: &Model, corpus: &Corpus, session: SessionConfig) -> Result<Self> {
        let io = corpus.io().clone();
        let mut batches = vec![];
        for b in corpus.batches(1)? {
            let b = b?;
            let feeds: Vec<(String, Array2<i64>)> =
                b.inputs(&io).into_iter().map(|(n, a)| (n.to_owned(), a.to_owned())).collect();
            let mask = feeds.iter().position(|(n, _)| *n == io.attention_mask);
            batches.push(HeldBatch { feeds, used: b.len(), units: questions_done(&b), mask });
        }
        let runs = Runs { cfg: session, zero_inputs: io.zero_inputs.clone(), read: Read::Logits(io), batches };
        HeldOut::with_fp32(runs, fp32, corpus.questions(), "questions")
    }

    /// Texts (`set`), one per batch, embedded as `head` says, and FP32's embeddings of them, run on `session`.
    pub(crate) fn texts(fp32: &Model, set: &InputSet, head: EmbeddingHead, session: SessionConfig) -> Result<Self> {
        let mut batches = vec![];
        for i in 0..set.len() {
            let feeds = set.batch_of(&[i], 0);
            let mask = feeds.iter().position(|(n, _)| Some(n.as_str()) == set.mask());
            batches.push(HeldBatch { feeds, used: 1, units: 1, mask });
        }
        let runs = Runs { cfg: session, zero_inputs: vec![], read: Read::Embedding(head), batches };
        HeldOut::with_fp32(runs, fp32, set.len(), "texts")
    }

    /// The inputs `picked` of `set`, one per batch, and FP32's class logits `output` on them, run on `session`.
    pub(crate) fn inputs(
        fp32: &Model,
        set: &InputSet,
        picked: std::ops::Range<usize>,
        output: &str,
        session: SessionConfig,
    ) -> Result<Self> {
        let mut batches = vec![];
        for i in picked.clone() {
            let feeds = set.batch_of(&[i], 0);
            let mask = feeds.iter().position(|(n, _)| Some(n.as_str()) == set.mask());
            batches.push(HeldBatch { feeds, used: 1, units: 1, mask });
        }
        let runs = Runs { cfg: session, zero_inputs: vec![], read: Read::Classes(output.to_owned()), batches };
        HeldOut::with_fp32(runs, fp32, picked.len(), "inputs")
    }

    fn with_fp32(runs: Runs, fp32: &Model, units: usize, unit: &'static str) -> Result<Self> {
        let fp32 = runs.values(fp32, "FP32 model")?;
        Ok(HeldOut { runs, fp32, units, unit, what: String::new(), task: None })
    }

    /// These inputs as held out for `task`, described as `what`.
    fn held_for(self, task: &Task, what: String) -> Self {
        HeldOut { what, task: Some(task.clone()), ..self }
    }

    /// The task the inputs are held out for.
    pub(crate) fn task(&self) -> Option<&Task> {
        self.task.as_ref()
    }

    /// Which inputs are held out, in words.
    pub fn describe(&self) -> &str {
        &self.what
    }

    /// The first held-out batches holding at most `max_rows` rows (at least one batch), as timing runs them: what
    /// `qdq tune` times its candidates on.
    pub(crate) fn workload(&self, max_rows: usize) -> Workload {
        let batches = leading_by(&self.runs.batches, max_rows, |b| b.used).iter().map(|b| b.feeds.clone()).collect();
        let outputs = self.runs.output_names().into_iter().map(str::to_owned).collect();
        Workload::new(batches, outputs).with_zero_inputs(self.runs.zero_inputs.clone())
    }

    /// How many questions or texts are held out.
    pub fn units(&self) -> usize {
        self.units
    }

    /// What they are: `questions` or `texts`.
    pub fn unit(&self) -> &'static str {
        self.unit
    }

    /// Rows run (SQuAD: features, a long paragraph's windows each one).
    pub fn features(&self) -> usize {
        self.runs.batches.iter().map(|b| b.used).sum()
    }

    /// How `model`'s outputs agree with FP32's (`label` names it in errors).
    pub fn agreement(&self, model: &Model, label: &str) -> Result<OutputAgreement> {
        let values = self.runs.values(model, label)?;
        Ok(self.agreement_of(&values))
    }

    /// How `other` (values on every batch) agrees with FP32's.
    pub(crate) fn agreement_of(&self, other: &[Values]) -> OutputAgreement {
        let mut sums = self.runs.sums();
        for ((f, o), b) in self.fp32.iter().zip(other).zip(&self.runs.batches) {
            sums.add(f, o, b);
        }
        sums.agreement()
    }
}

impl Task {
    /// The held-out inputs `qdq debug` and `qdq tune` measure this task's models on, the last `n` units of `dataset`,
    /// with FP32's (`fp32`, loaded from `fp32_path`) outputs on them, run on `session`: SQuAD questions compared by
    /// their start and end logits, or texts (questions with their paragraphs from a SQuAD file) by their embedding.
    pub(crate) fn held_out(
        &self,
        (fp32, fp32_path): (&Model, &Path),
        dataset: &Path,
        n: usize,
        session: SessionConfig,
        cfg: &DataConfig,
    ) -> Result<HeldOut> {
        match self {
            Task::Squad => {
                let mut corpus = Corpus::load_last(dataset, cfg, &cfg.tokenizer()?, n)?;
                corpus.fit_model(fp32, fp32_path)?;
                let held = HeldOut::questions(fp32, &corpus, session)?;
                let what = format!(
                    "the last {} questions of {} ({} features)",
                    held.units(),
                    dataset.display(),
                    held.features()
                );
                Ok(held.held_for(self, what))
            }
            Task::Embed(e) => {
                let texts = EmbedData::held_out_texts(dataset, n)?;
                let set = InputSet::from_texts(dataset, &texts, &TextInputs::for_model(fp32, fp32_path, cfg))?;
                let held = HeldOut::texts(fp32, &set, e.head.clone(), session)?;
                let what = if dataset.extension().is_some_and(|x| x.eq_ignore_ascii_case("json")) {
                    format!(
                        "the last {n} questions of {} and their paragraphs ({} texts)",
                        dataset.display(),
                        set.len()
                    )
                } else {
                    format!("the last {} texts of {}", set.len(), dataset.display())
                };
                Ok(held.held_for(self, what))
            }
            Task::Classify { output } => {
                let text = TextInputs::for_model(fp32, fp32_path, cfg);
                let set = crate::tasks::classify::load_inputs(dataset, fp32, &text, 0, output)?;
                let picked = set.len().saturating_sub(n)..set.len();
                let held = HeldOut::inputs(fp32, &set, picked, output, session)?;
                let what = format!("the last {} inputs of {}", held.units(), dataset.display());
                Ok(held.held_for(self, what))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts() -> Vec<Vec<f32>> {
        vec![vec![1.0, 0.2, 0.0], vec![0.3, 1.0, 0.1], vec![0.0, 0.4, 1.0], vec![0.5, 0.5, 0.5], vec![0.9, 0.0, 0.4]]
    }

    fn agreement(a: &[Vec<f32>], b: &[Vec<f32>]) -> EmbeddingAgreement {
        let pairs: Vec<_> = a.iter().zip(b).map(|(x, y)| (unit(x), unit(y))).collect();
        embedding_agreement(&pairs)
    }

    #[test]
    fn a_rotation_moves_every_embedding_and_reorders_no_neighbour() {
        let a = texts();
        // A rotation about the third axis: every text's cosine to its FP32 self drops, no cosine between texts moves.
        let (c, s) = (0.2f32.cos(), 0.2f32.sin());
        let b: Vec<Vec<f32>> = a.iter().map(|v| vec![c * v[0] - s * v[1], s * v[0] + c * v[1], v[2]]).collect();
        let r = agreement(&a, &b);
        assert!(r.mean_cosine < 0.99, "{r:?}");
        assert!(r.similarity_distortion < 1e-6, "{r:?}");
        let same = agreement(&a, &a);
        assert!((same.mean_cosine - 1.0).abs() < 1e-12 && same.similarity_distortion < 1e-12, "{same:?}");
    }

    #[test]
    fn noise_that_reorders_neighbours_is_measured_against_the_spread() {
        let a = texts();
        let mut b = a.clone();
        b[0][1] += 0.3;
        b[2][0] -= 0.2;
        let small = agreement(&a, &b);
        b[0][1] += 0.3;
        let large = agreement(&a, &b);
        assert!(small.similarity_distortion > 0.01, "{small:?}");
        assert!(large.similarity_distortion > small.similarity_distortion, "{small:?} {large:?}");
        assert!(large.min_cosine < small.min_cosine && large.min_cosine <= large.mean_cosine);
        // Fewer than three texts: no neighbours to order.
        assert_eq!(agreement(&a[..2], &b[..2]).similarity_distortion, 0.0);
    }

    #[test]
    fn the_distortion_reads_the_first_thousand_texts_and_the_cosine_all() {
        let fp32: Vec<Vec<f32>> =
            (0..DISTORTION_TEXTS + 2).map(|i| vec![1.0, (i % 7) as f32 * 0.1, (i % 11) as f32 * 0.1]).collect();
        let mut other = fp32.clone();
        other[3][1] += 0.2;
        let first = agreement(&fp32[..DISTORTION_TEXTS], &other[..DISTORTION_TEXTS]);
        // The texts after the first thousand moved far: the cosine sees them, the distortion does not.
        for v in &mut other[DISTORTION_TEXTS..] {
            v[0] = -v[0];
        }
        let all = agreement(&fp32, &other);
        assert_eq!(all.similarity_distortion, first.similarity_distortion);
        assert!(all.min_cosine < 0.0 && all.mean_cosine < first.mean_cosine, "{all:?} {first:?}");
    }
}
