//! Held-out inputs run through FP32 once, and how far another model's outputs are from FP32's on them, in the task's
//! measure: the proxy `qdq debug` and `qdq tune` measure candidates by. What is read and how two models' values
//! compare is each task room's [`HeldReader`] (its `held` module); which inputs, its `held_out` function there,
//! chosen by the room ([`crate::tasks::TaskRoom::held_out`]).

use ndarray::{Array2, ArrayView2};
use onnx_ir::Model;
use runtime::SessionConfig;

pub mod agreement;
pub mod pairs;

use crate::error::Result;
use crate::held_out::agreement::OutputAgreement;
use crate::steps::augment::session_with_outputs;
use crate::steps::speed::{Workload, leading_by};

/// One held-out batch's values a model is compared on, as its task's reader lays them out (`[start, end]` logits,
/// one embedding per row, one class-logit row per input).
pub(crate) type Values = Vec<Vec<f32>>;

/// What a task's held-out runs read, and how two models' values of the same batches compare: each task room
/// implements it.
pub(crate) trait HeldReader: Send + Sync {
    /// The outputs the compared values come from, fetched first in every run.
    fn output_names(&self) -> Vec<&str>;
    /// The values of a run's outputs (the first [`HeldReader::output_names`]) on `batch`, of the model `model` (named
    /// in errors).
    fn read(&self, o: &[runtime::OutputRef<'_>], batch: &HeldBatch, model: &str) -> Result<Values>;
    /// Empty sums of this reader's agreement.
    fn sums(&self) -> Box<dyn AgreementSums>;
}

/// Per-batch sums of two models' agreement.
pub(crate) trait AgreementSums {
    /// Adds a batch: `fp32` and `other` are the same batch's values of the two models.
    fn add(&mut self, fp32: &Values, other: &Values, batch: &HeldBatch);
    /// The agreement over the batches added.
    fn agreement(&self) -> OutputAgreement;
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
    /// A batch of `feeds` whose first `used` rows hold inputs completing `units` units; the attention mask is the
    /// feed named `mask`, if any.
    pub(crate) fn new(feeds: Vec<(String, Array2<i64>)>, used: usize, units: u64, mask: Option<&str>) -> HeldBatch {
        let mask = mask.and_then(|m| feeds.iter().position(|(n, _)| n == m));
        HeldBatch { feeds, used, units, mask }
    }

    /// The feeds as a run takes them.
    pub(crate) fn feeds(&self) -> Vec<(&str, ArrayView2<'_, i64>)> {
        self.feeds.iter().map(|(n, a)| (n.as_str(), a.view())).collect()
    }

    /// Rows fed (the inputs, then any filler rows).
    pub(crate) fn rows(&self) -> usize {
        self.feeds.first().map_or(0, |(_, a)| a.nrows())
    }

    /// The attention mask fed, if known.
    pub(crate) fn mask(&self) -> Option<ArrayView2<'_, i64>> {
        self.mask.map(|k| self.feeds[k].1.view())
    }
}

/// The held-out batches and how to run a model on them.
pub(crate) struct Runs {
    pub(crate) cfg: SessionConfig,
    read: Box<dyn HeldReader>,
    zero_inputs: Vec<String>,
    pub(crate) batches: Vec<HeldBatch>,
}

impl Runs {
    /// `batches` read by `read` in sessions of `cfg`, with `zero_inputs` fed zeros.
    pub(crate) fn new(
        cfg: SessionConfig,
        read: Box<dyn HeldReader>,
        zero_inputs: Vec<String>,
        batches: Vec<HeldBatch>,
    ) -> Runs {
        Runs { cfg, read, zero_inputs, batches }
    }

    /// [`HeldReader::output_names`].
    pub(crate) fn output_names(&self) -> Vec<&str> {
        self.read.output_names()
    }

    /// Inputs fed zeros.
    pub(crate) fn zero_inputs(&self) -> &[String] {
        &self.zero_inputs
    }

    /// [`HeldReader::sums`].
    pub(crate) fn sums(&self) -> Box<dyn AgreementSums> {
        self.read.sums()
    }

    /// [`HeldReader::read`].
    pub(crate) fn read(&self, o: &[runtime::OutputRef<'_>], batch: &HeldBatch, model: &str) -> Result<Values> {
        self.read.read(o, batch, model)
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

/// Held-out inputs and FP32's values on them: scores other models by how their outputs agree with FP32's.
pub struct HeldOut {
    pub(crate) runs: Runs,
    pub(crate) fp32: Vec<Values>,
    units: usize,
    unit: &'static str,
    /// Which inputs, in words (`the last 32 questions of dev.json (33 features)`).
    what: String,
}

impl HeldOut {
    /// `runs` with FP32's (`fp32`) values on them: `units` held-out `unit` (`questions`, `texts`, `inputs`).
    pub(crate) fn with_fp32(runs: Runs, fp32: &Model, units: usize, unit: &'static str) -> Result<Self> {
        let fp32 = runs.values(fp32, "FP32 model")?;
        Ok(HeldOut { runs, fp32, units, unit, what: String::new() })
    }

    /// These inputs described as `what`.
    pub(crate) fn described(self, what: String) -> Self {
        HeldOut { what, ..self }
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

    /// How many questions, texts or inputs are held out.
    pub fn units(&self) -> usize {
        self.units
    }

    /// What they are: `questions`, `texts` or `inputs`.
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
