//! `qdq tune`'s calibrator choice per tensor. One statistics pass (calib_state.json) gives every calibrator's range
//! for every tensor; the table holds one method's. For the pairs with the worst own rounding (lowest own SQNR in
//! `qdq debug`), each other calibrator's range is tried in turn, in memory (placement and apply, no file, no
//! re-calibration), and kept when the model's logits then agree better with FP32's on the held-out questions (mean
//! start/end KL lower by at least [`MIN_GAIN`]). Choices compound: each trial starts from the ranges kept so far.

use onnx_ir::Model;

use crate::error::Result;
use crate::held_out::HeldOut;
use crate::progress::Progress;
use crate::report::tune::CalibratorChoice;

/// The smallest relative drop of the held-out KL that keeps another calibrator's range (the KL is measured on a few
/// dozen questions: smaller gains are as likely to be those questions' as the model's).
pub const MIN_GAIN: f64 = 0.02;

/// What the choice did.
pub struct Chosen {
    /// The table with the kept ranges (`chosen` names their calibrators).
    pub table: calib::RangeTable,
    pub choices: Vec<CalibratorChoice>,
    /// Held-out KL of the table as given, and with the choices.
    pub kl_start: f64,
    pub kl_end: f64,
}

/// What a trial needs besides the ranges: the model quantized (the smoothed one when the policy smooths), the policy,
/// the held-out questions, and the methods (with their options) whose ranges are tried.
pub struct Trials<'a> {
    pub base: &'a Model,
    pub policy: &'a qdq::Policy,
    pub held: &'a HeldOut,
    pub methods: Vec<calib::Method>,
}

impl Trials<'_> {
    /// The held-out logit KL of the model quantized with `table`'s ranges (in memory: placement and apply).
    fn kl(&self, table: &calib::RangeTable, label: &str) -> Result<f64> {
        let plan = qdq::plan(self.base, &table.min_max(), self.policy)?;
        let mut model = Model::clone(self.base);
        plan.apply(&mut model)?;
        Ok(self.held.agreement(&model, label)?.loss())
    }

    /// Of `others`, the table whose range for `tensor` (put into `current`) gives the lowest KL, with that KL; ranges
    /// within 0.1 % of the current one are not tried.
    fn best_for<'t>(
        &self,
        current: &calib::RangeTable,
        tensor: &str,
        others: &'t [calib::RangeTable],
        progress: &dyn Progress,
    ) -> Result<Option<(f64, &'t calib::RangeTable)>> {
        let have = current.ranges[tensor];
        let mut best: Option<(f64, &calib::RangeTable)> = None;
        for other in others {
            progress.advance(1);
            let Some(&r) = other.ranges.get(tensor) else { continue };
            let reach = have.amax().max(r.amax()).max(f32::MIN_POSITIVE);
            if (r.min - have.min).abs() <= 1e-3 * reach && (r.max - have.max).abs() <= 1e-3 * reach {
                continue;
            }
            let mut trial = current.clone();
            trial.ranges.insert(tensor.to_owned(), r);
            let k = self.kl(&trial, &format!("QDQ model with {}'s {} range", tensor, other.method))?;
            if best.is_none_or(|(b, _)| k < b) {
                best = Some((k, other));
            }
        }
        Ok(best)
    }
}

/// Tries every method of `trials` that `state` supports on each of `worst` (in order) against `table`; see the module
/// docs.
pub fn choose(
    trials: &Trials<'_>,
    table: &calib::RangeTable,
    state: &calib::CalibState,
    worst: &[String],
    progress: &dyn Progress,
) -> Result<Chosen> {
    // Every other method the statistics support (each needs its histogram kind; minmax none).
    let others: Vec<calib::RangeTable> = trials
        .methods
        .iter()
        .filter(|m| m.name() != table.method)
        .filter_map(|m| calib::compute_ranges(state, m).ok())
        .collect();
    let worst: Vec<&String> = worst.iter().filter(|t| table.ranges.contains_key(*t)).collect();
    progress.start("calibrator choice", Some((worst.len() * others.len()) as u64 + 1), "trials");
    let kl_start = trials.kl(table, "QDQ model with the table's ranges")?;
    progress.advance(1);
    let (mut current, mut kl, mut choices) = (table.clone(), kl_start, Vec::new());
    for tensor in worst {
        let best = trials.best_for(&current, tensor, &others, progress)?;
        let Some((k, other)) = best.filter(|(k, _)| *k < kl * (1.0 - MIN_GAIN)) else { continue };
        let (have, r) = (current.ranges[tensor], other.ranges[tensor]);
        choices.push(CalibratorChoice {
            tensor: tensor.clone(),
            from: current.chosen.get(tensor).unwrap_or(&current.method).clone(),
            from_range: (have.min, have.max),
            to: other.method.clone(),
            to_range: (r.min, r.max),
            kl_before: kl,
            kl_after: k,
        });
        current.ranges.insert(tensor.clone(), r);
        current.chosen.insert(tensor.clone(), other.method.clone());
        kl = k;
    }
    progress.finish();
    Ok(Chosen { table: current, choices, kl_start, kl_end: kl })
}
