//! GPTQ-style weight rounding before calibration (after smoothing): one pass collects the Gram matrix of every
//! activation a rounded weight's MatMuls read, then the weights are rounded in place ([`qdq::round_weights`]).

use std::collections::BTreeMap;
use std::time::Instant;

use ndarray::{ArrayView2, s};
use onnx_ir::Model;

use crate::error::Result;
use crate::inputs::feeds::Feeds;
use crate::progress::Progress;
use crate::steps::augment::{augmented_sessions, used_rows};
use crate::steps::collect::CalibrateOptions;

/// What the rounding step did (see [`round_model_weights`]).
#[derive(Debug, Clone)]
pub struct Rounding {
    /// One entry per rounded weight.
    pub weights: Vec<qdq::RoundedWeight>,
    /// Wall time of the pass and the rounding.
    pub seconds: f64,
}

impl Rounding {
    /// One line for logs and reports: how many weights, and their output error against round-to-nearest's.
    pub fn describe(&self) -> String {
        let mut ratios: Vec<f64> =
            self.weights.iter().filter(|w| w.nearest_error > 0.0).map(|w| w.gptq_error / w.nearest_error).collect();
        ratios.sort_by(f64::total_cmp);
        let n = self.weights.len();
        let plural = if n == 1 { "" } else { "s" };
        match (ratios.first(), ratios.last()) {
            (Some(lo), Some(hi)) => format!(
                "{n} weight{plural} rounded by GPTQ in {:.1} s: MatMul output error {:.2}x round-to-nearest's \
                 (median; {lo:.2}x-{hi:.2}x)",
                self.seconds,
                ratios[ratios.len() / 2],
            ),
            _ => format!("{n} weight{plural} rounded by GPTQ in {:.1} s", self.seconds),
        }
    }
}

/// Rounds the policy's integer weights by GPTQ ([`qdq::rounding_sites`]; `weight_rounding = gptq`): one pass over
/// `data` on `model` (as it will be quantized: smoothed already) sums each input's Gram matrix, then the weights are
/// replaced in the model itself by values on their grid. Returns the model and what was done (`None` when the policy
/// does not round or no weight qualifies).
pub fn round_model_weights(
    model: Model,
    policy: &qdq::Policy,
    data: &dyn Feeds,
    opts: &CalibrateOptions,
    progress: &dyn Progress,
) -> Result<(Model, Option<Rounding>)> {
    let sites = qdq::rounding_sites(&model, policy)?;
    if sites.is_empty() {
        return Ok((model, None));
    }
    let started = Instant::now();
    let mut grams: BTreeMap<String, qdq::Gram> = BTreeMap::new();
    for s in &sites {
        for x in &s.inputs {
            grams.entry(x.clone()).or_insert_with(|| qdq::Gram::new(s.channels));
        }
    }
    sum_grams(&model, &mut grams, data, opts, progress)?;
    let mut model = model;
    let weights = qdq::round_weights(&mut model, policy, &sites, &grams)?;
    for w in &weights {
        tracing::debug!(weight = w.weight, nearest = w.nearest_error, gptq = w.gptq_error, "rounded");
    }
    let kept: Vec<&str> =
        sites.iter().filter(|s| !weights.iter().any(|w| w.weight == s.weight)).map(|s| s.weight.as_str()).collect();
    if !kept.is_empty() {
        progress.warn(&format!(
            "{} weight(s) rounded to nearest, not by GPTQ: their inputs held no finite value ({})",
            kept.len(),
            kept.join(", ")
        ));
    }
    Ok((model, Some(Rounding { weights, seconds: started.elapsed().as_secs_f64() })))
}

/// One pass over `data` on `model`, each tensor of `grams` read as a graph output and its real tokens' rows (where
/// the data has an attention mask) folded into its Gram matrix.
fn sum_grams(
    model: &Model,
    grams: &mut BTreeMap<String, qdq::Gram>,
    data: &dyn Feeds,
    opts: &CalibrateOptions,
    progress: &dyn Progress,
) -> Result<()> {
    let tensors: Vec<String> = grams.keys().cloned().collect();
    let names: Vec<&str> = tensors.iter().map(String::as_str).collect();
    let label = "GPTQ statistics model";
    let mut sessions = augmented_sessions(model, &names, label, std::slice::from_ref(&opts.session), None)?;
    let session = &mut sessions[0];
    session.feed_zeros(data.zero_inputs())?;
    let (units, unit) = data.units();
    progress.start("rounding weights", Some(units), unit);
    let mask_input = data.attention_mask();
    data.each_batch(opts.batch, &mut |inputs, used, done| {
        let fed = inputs.first().map_or(used, |(_, a)| a.nrows());
        let mask = mask_input.and_then(|m| inputs.iter().find(|(n, _)| *n == m)).map(|(_, a)| a.slice(s![..used, ..]));
        session.run_with(inputs, &names, |outs| -> Result<()> {
            for o in outs {
                let shape = used_rows(&o.shape, used, fed);
                let n = shape.iter().product::<usize>();
                let Some(g) = grams.get_mut(o.name) else { continue };
                match mask.and_then(|m| real_tokens(&o.data[..n], &shape, m)) {
                    Some((rows, shape)) => g.observe(o.name, &rows, &shape)?,
                    None => g.observe(o.name, &o.data[..n], &shape)?,
                }
            }
            Ok(())
        })?;
        progress.advance(done);
        Ok(())
    })?;
    progress.finish();
    Ok(())
}

/// The rows of `data` (`shape`, channels last) at the real tokens of `mask` (`[batch, seq]`, nonzero = a token), as
/// `[rows, channels]`: for a tensor with one row per position (`[batch, seq, C]` or `[batch · seq, C]`); `None` for
/// any other shape (all rows count then).
pub(crate) fn real_tokens(data: &[f32], shape: &[usize], mask: ArrayView2<'_, i64>) -> Option<(Vec<f32>, [usize; 2])> {
    let (&channels, lead) = shape.split_last()?;
    if lead.iter().product::<usize>() != mask.len() || channels == 0 {
        return None;
    }
    let kept: Vec<f32> = data
        .chunks_exact(channels)
        .zip(mask.iter())
        .filter(|(_, m)| **m != 0)
        .flat_map(|(row, _)| row.iter().copied())
        .collect();
    let rows = kept.len() / channels;
    Some((kept, [rows, channels]))
}
