//! A classifier's held-out measure ([`HeldReader`]): each held-out input's class logits against FP32's (KL of the
//! class probabilities, class = FP32's, flips; a regression head by its squared difference).

use std::path::Path;

use onnx_ir::Model;
use runtime::SessionConfig;

use crate::error::Result;
use crate::held_out::agreement::{HeldAgreement, OutputAgreement};
use crate::held_out::{AgreementSums, HeldBatch, HeldOut, HeldReader, Runs, Values};
use crate::inputs::config::DataConfig;
use crate::inputs::files::TextInputs;
use crate::tasks::classify::{ClassOutput, load_inputs};
use serde::Serialize;

/// Reads a classifier's class logits (the output named): one row per input, or per kept token.
struct ClassReader(ClassOutput);

impl HeldReader for ClassReader {
    fn output_names(&self) -> Vec<&str> {
        vec![self.0.name.as_str()]
    }

    fn read(&self, o: &[runtime::OutputRef<'_>], batch: &HeldBatch, model: &str) -> Result<Values> {
        class_rows(&o[0], batch, &self.0, model)
    }

    fn sums(&self) -> Box<dyn AgreementSums> {
        Box::new(ClassSums::default())
    }
}

/// Sums of class-logit agreement over rows.
#[derive(Default)]
struct ClassSums {
    classes: usize,
    kl: f64,
    sq: f64,
    sq_n: u64,
    same: u64,
    rows: u64,
    max_abs: f64,
}

impl AgreementSums for ClassSums {
    fn add(&mut self, a: &Values, b: &Values, _batch: &HeldBatch) {
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

    fn agreement(&self) -> OutputAgreement {
        let n = self.rows.max(1) as f64;
        OutputAgreement::new(ClassAgreement {
            classes: self.classes,
            mean_kl: self.kl / n,
            same_class: if self.rows == 0 { 1.0 } else { self.same as f64 / n },
            flips: self.rows - self.same,
            mean_sq_diff: self.sq / self.sq_n.max(1) as f64,
            max_abs_diff: self.max_abs,
        })
    }
}

/// A classifier's class-logit rows of one held-out batch: `[rows, classes]` gives a row per input; `[rows, seq,
/// classes]` over the batch's `[rows, seq]` attention mask (a token classifier) a row per token the mask keeps.
fn class_rows(
    o: &runtime::OutputRef<'_>,
    batch: &HeldBatch,
    output: &ClassOutput,
    model: &str,
) -> Result<Vec<Vec<f32>>> {
    let classes = o.shape.last().copied().unwrap_or(0);
    let bad =
        |reason: String| runtime::Error::BadOutput { model: model.to_owned(), output: output.name.clone(), reason };
    if o.shape.first() != Some(&batch.rows()) || classes == 0 || !o.data.len().is_multiple_of(classes) {
        return Err(bad(format!("expected [batch {}, ..., classes] logits, got {:?}", batch.rows(), o.shape)).into());
    }
    let per_row = o.data.len() / batch.rows().max(1);
    let used = &o.data[..per_row * batch.used];
    Ok(match batch.mask().filter(|m| o.shape.len() == 3 && m.dim() == (batch.rows(), o.shape[1])) {
        Some(mask) => {
            used.chunks(classes).zip(mask.iter()).filter(|(_, m)| **m != 0).map(|(row, _)| output.row(row)).collect()
        }
        None => used.chunks(classes).map(|row| output.row(row)).collect(),
    })
}

/// The last `n` inputs of the classifier's file `dataset`, one per batch, and FP32's class logits `output` on them,
/// run on `session`.
pub(crate) fn held_out(
    output: &ClassOutput,
    (fp32, fp32_path): (&Model, &Path),
    dataset: &Path,
    n: usize,
    session: SessionConfig,
    cfg: &DataConfig,
) -> Result<HeldOut> {
    let text = TextInputs::for_model(fp32, fp32_path, cfg);
    let set = load_inputs(dataset, fp32, &text, 0, &output.name)?;
    let picked = set.len().saturating_sub(n)..set.len();
    let batches = picked.clone().map(|i| HeldBatch::new(set.batch_of(&[i], 0), 1, 1, set.mask())).collect();
    let runs = Runs::new(session, Box::new(ClassReader(output.clone())), vec![], batches);
    let held = HeldOut::with_fp32(runs, fp32, picked.len(), "inputs")?;
    let what = format!("the last {} inputs of {}", held.units(), dataset.display());
    Ok(held.described(what))
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

impl HeldAgreement for ClassAgreement {
    /// The class KL; a regression head's mean squared difference.
    fn loss(&self) -> f64 {
        if self.classes == 1 { self.mean_sq_diff } else { self.mean_kl }
    }

    fn loss_name(&self) -> &'static str {
        if self.classes == 1 { "mean sq diff" } else { "KL" }
    }

    fn loss_text(&self) -> String {
        format!("{:.3e}", self.loss())
    }

    fn explained(&self) -> &'static str {
        if self.classes == 1 {
            "mean squared difference of the regression output"
        } else {
            "KL: of the class probabilities, mean over inputs"
        }
    }

    fn measured(&self) -> &'static str {
        "class logits"
    }

    fn key(&self) -> &'static str {
        "class_logits"
    }

    /// The share of inputs whose class is FP32's (a regression head: the largest difference).
    fn second(&self) -> (&'static str, String) {
        if self.classes == 1 {
            ("max |diff|", format!("{:.4}", self.max_abs_diff))
        } else {
            ("class = FP32", format!("{:.2} %", 100.0 * self.same_class))
        }
    }

    fn describe(&self) -> String {
        if self.classes == 1 {
            return format!(
                "regression output: mean squared difference {:.3e}, max |diff| {:.4}",
                self.mean_sq_diff, self.max_abs_diff
            );
        }
        format!(
            "class KL {:.3e} nats, class = FP32's {:.2} % ({} flipped), max |diff| {:.3}",
            self.mean_kl,
            100.0 * self.same_class,
            self.flips,
            self.max_abs_diff
        )
    }
}
