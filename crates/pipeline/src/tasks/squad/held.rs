//! A SQuAD model's held-out measure ([`HeldReader`]): the start and end logits of each held-out question's features
//! against FP32's, over each feature's real tokens (KL of the softmax distributions, argmax agreement).

use std::path::Path;

use onnx_ir::Model;
use runtime::SessionConfig;

use crate::error::Result;
use crate::held_out::agreement::{HeldAgreement, OutputAgreement};
use crate::held_out::{AgreementSums, HeldBatch, HeldOut, HeldReader, Runs, Values};
use crate::inputs::config::DataConfig;
use crate::tasks::squad::data::{Corpus, questions_done};
use crate::tasks::squad::logits::run_logits;
use serde::Serialize;

/// Reads a QA head's start and end logits through the SQuAD names: `[start, end]` values (`[rows, seq]` each).
struct LogitReader(squad::ModelIo);

impl HeldReader for LogitReader {
    fn output_names(&self) -> Vec<&str> {
        self.0.logit_outputs()
    }

    fn read(&self, o: &[runtime::OutputRef<'_>], batch: &HeldBatch, model: &str) -> Result<Values> {
        let l = run_logits(o, &self.0, batch.used, model)?;
        Ok(vec![l.start.into_owned(), l.end.into_owned()])
    }

    fn sums(&self) -> Box<dyn AgreementSums> {
        Box::new(LogitSums::default())
    }
}

/// Sums of per-feature KL and argmax agreement, start and end.
#[derive(Default)]
struct LogitSums {
    kl: [f64; 2],
    same: [u64; 2],
    max_abs: f64,
    features: u64,
}

impl AgreementSums for LogitSums {
    /// Positions the batch's attention mask leaves out do not count; only the rows holding features (a fixed-batch
    /// model's filler rows have no logits here).
    fn add(&mut self, a: &Values, b: &Values, batch: &HeldBatch) {
        let Some(mask) = batch.mask() else { return };
        let seq = mask.ncols();
        for (row, m) in mask.rows().into_iter().take(batch.used).enumerate() {
            let keep: Vec<bool> = m.iter().map(|&v| v != 0).collect();
            for k in 0..2 {
                let (x, y) = (&a[k][row * seq..(row + 1) * seq], &b[k][row * seq..(row + 1) * seq]);
                self.kl[k] += calib::softmax_kl(x, y, &keep);
                self.same[k] += u64::from(calib::argmax(x, &keep) == calib::argmax(y, &keep));
                let diff = x.iter().zip(y).map(|(p, q)| f64::from((p - q).abs())).fold(0.0, f64::max);
                self.max_abs = self.max_abs.max(diff);
            }
            self.features += 1;
        }
    }

    fn agreement(&self) -> OutputAgreement {
        let n = self.features.max(1) as f64;
        OutputAgreement::new(LogitAgreement {
            kl_start: self.kl[0] / n,
            kl_end: self.kl[1] / n,
            argmax_start: self.same[0] as f64 / n,
            argmax_end: self.same[1] as f64 / n,
            max_abs_diff: self.max_abs,
        })
    }
}

/// The last `n` questions of `dataset` (fitted to `fp32`), one feature per batch, and FP32's logits on them, run on
/// `session`.
pub(crate) fn held_out(
    (fp32, fp32_path): (&Model, &Path),
    dataset: &Path,
    n: usize,
    session: SessionConfig,
    cfg: &DataConfig,
) -> Result<HeldOut> {
    let mut corpus = Corpus::load_last(dataset, cfg, &cfg.tokenizer()?, n)?;
    corpus.fit_model(fp32, fp32_path)?;
    let io = corpus.io().clone();
    let mut batches = vec![];
    for b in corpus.batches(1)? {
        let b = b?;
        let feeds: Vec<(String, ndarray::Array2<i64>)> =
            b.inputs(&io).into_iter().map(|(n, a)| (n.to_owned(), a.to_owned())).collect();
        batches.push(HeldBatch::new(feeds, b.len(), questions_done(&b), Some(&io.attention_mask)));
    }
    let zero_inputs = io.zero_inputs.clone();
    let runs = Runs::new(session, Box::new(LogitReader(io)), zero_inputs, batches);
    let held = HeldOut::with_fp32(runs, fp32, corpus.questions(), "questions")?;
    let what = format!("the last {} questions of {} ({} features)", held.units(), dataset.display(), held.features());
    Ok(held.described(what))
}

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

impl HeldAgreement for LogitAgreement {
    fn loss(&self) -> f64 {
        self.kl()
    }

    fn loss_name(&self) -> &'static str {
        "KL"
    }

    fn loss_text(&self) -> String {
        format!("{:.4}", self.kl())
    }

    fn explained(&self) -> &'static str {
        "KL: mean of start and end"
    }

    fn measured(&self) -> &'static str {
        "logits"
    }

    fn key(&self) -> &'static str {
        "logits"
    }

    /// The share of features with the same argmax, start and end together.
    fn second(&self) -> (&'static str, String) {
        ("same argmax", format!("{:.1} %", 50.0 * (self.argmax_start + self.argmax_end)))
    }

    fn describe(&self) -> String {
        format!(
            "KL start {:.4} / end {:.4} nats, same argmax {:.1} % / {:.1} %, max |diff| {:.3}",
            self.kl_start,
            self.kl_end,
            100.0 * self.argmax_start,
            100.0 * self.argmax_end,
            self.max_abs_diff
        )
    }
}
