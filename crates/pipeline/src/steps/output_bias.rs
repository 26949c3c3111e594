//! A classifier's output shift corrected ([`correct_output_bias`], policy `output_bias = corrected`): the model as it
//! will be quantized and FP32 run side by side over the calibration inputs, the mean per-class difference of their
//! outputs subtracted from the output layer's bias ([`qdq::shift_output_bias`]) before Q/DQ placement. Quantization
//! moves every input's logits a little; what moves them all the same way (on QNLI's MiniLM classifier, the margin of
//! the second class by -0.03 on average) sends inputs to one class, and only a shift removes that.

use std::path::Path;

use ndarray::s;
use onnx_ir::Model;
use runtime::{ModelSource, Session};

use crate::error::{Error, Result};
use crate::inputs::feeds::Feeds;
use crate::progress::Progress;
use crate::steps::augment::{augmented_sessions, used_rows};
use crate::steps::collect::CalibrateOptions;
use crate::steps::rounding::real_tokens;

/// The shift measured and corrected (see [`correct_output_bias`]).
#[derive(Debug, Clone)]
pub struct OutputShift {
    pub output: String,
    /// The initializer moved.
    pub bias: String,
    /// Mean of quantized minus FP32, per channel of the output's last axis.
    pub mean: Vec<f64>,
    /// Half the 95 % interval of each mean.
    pub half_width: Vec<f64>,
    /// Rows averaged (inputs, or real tokens of a per-token output).
    pub rows: u64,
    /// The output holds probabilities (a Softmax writes it): the shift is one of their logarithms, moved in the bias
    /// of the logits before the Softmax.
    pub log_probabilities: bool,
}

impl OutputShift {
    /// One line for logs and results.json.
    pub fn describe(&self) -> String {
        let means: Vec<String> =
            self.mean.iter().zip(&self.half_width).map(|(m, h)| format!("{m:+.4} ± {h:.4}")).collect();
        format!(
            "output `{}`{} shifted by quantization on the {} calibration rows by {} (per class, quantized minus FP32, \
             95 % intervals); corrected in its bias {}",
            self.output,
            if self.log_probabilities { " (log-probabilities)" } else { "" },
            self.rows,
            means.join(", "),
            self.bias
        )
    }
}

/// The output whose shift `policy` corrects: the task's `shifted` output (a classifier's logits) when
/// `output_bias = corrected`.
pub fn corrected_output<'t>(policy: &qdq::Policy, shifted: Option<&'t str>) -> Option<&'t str> {
    match policy.output_bias {
        qdq::OutputBias::Corrected => shifted,
        qdq::OutputBias::Kept => None,
    }
}

/// Measures the mean shift of `output` between `model` quantized by `plan` and FP32 (the file `fp32`) over `data`,
/// and subtracts it from the bias of `output`'s layer in `model` (still float: the plan then quantizes the corrected
/// bias). `None`, with a warning, when the output has no bias of its own to move.
pub fn correct_output_bias(
    model: &mut Model,
    fp32: &Path,
    plan: &qdq::Plan,
    output: &str,
    data: &dyn Feeds,
    opts: &CalibrateOptions,
    progress: &dyn Progress,
) -> Result<Option<OutputShift>> {
    // Refused before any run when the head has nothing to move.
    if let Err(e) = qdq::output_bias_site(model, output) {
        progress.warn(&format!("{e}; its mean shift is left as it is"));
        return Ok(None);
    }
    let mut probe = Model::clone(model);
    plan.apply(&mut probe)?;
    let label = "quantized model (output shift)";
    let mut quantized = augmented_sessions(&probe, &[], label, std::slice::from_ref(&opts.session), None)?
        .pop()
        .ok_or_else(|| Error::Internal("output shift: no session was made".into()))?;
    drop(probe);
    let mut reference = Session::open(ModelSource::File(fp32), "FP32 model (output shift)", &opts.session)?;
    // Probabilities are compared as their logarithms: the logits' shift, less one constant per input.
    let log = model_io::roles::class_probabilities(model.graph(), output);
    let sums = sum_differences([&mut quantized, &mut reference], (output, log), data, opts.batch, progress)?;
    let Some(Sums { sums, rows }) = sums else { return Ok(None) };
    let n = rows as f64;
    let mean: Vec<f64> = sums.iter().map(|(s, _)| s / n).collect();
    let half_width = sums
        .iter()
        .zip(&mean)
        .map(|((_, sq), m)| {
            let var = if rows > 1 { ((sq - n * m * m) / (n - 1.0)).max(0.0) } else { 0.0 };
            1.96 * (var / n).sqrt()
        })
        .collect();
    let by: Vec<f32> = mean.iter().map(|m| *m as f32).collect();
    let bias = qdq::shift_output_bias(model, output, &by)?;
    Ok(Some(OutputShift { output: output.to_owned(), bias, mean, half_width, rows, log_probabilities: log }))
}

/// Per channel, the sum and the sum of squares of quantized minus FP32, over `rows` rows.
struct Sums {
    sums: Vec<(f64, f64)>,
    rows: u64,
}

/// `output` of both sessions (quantized, FP32) on every batch of `data` (as logarithms when `log`), their
/// differences summed per channel of its last axis: one row per input, or per real token of a per-token output.
/// `None` when no row came.
fn sum_differences(
    [quantized, reference]: [&mut Session; 2],
    (output, log): (&str, bool),
    data: &dyn Feeds,
    batch: usize,
    progress: &dyn Progress,
) -> Result<Option<Sums>> {
    for s in [&mut *quantized, &mut *reference] {
        s.feed_zeros(data.zero_inputs())?;
    }
    let (units, unit) = data.units();
    progress.start("measuring the output shift", Some(units), unit);
    let mask_input = data.attention_mask();
    let mut acc = Sums { sums: vec![], rows: 0 };
    data.each_batch(batch, &mut |inputs, used, done| {
        let fed = inputs.first().map_or(used, |(_, a)| a.nrows());
        let mask = mask_input.and_then(|m| inputs.iter().find(|(n, _)| *n == m)).map(|(_, a)| a.slice(s![..used, ..]));
        let read = |session: &mut Session| -> Result<(Vec<f32>, usize)> {
            session.run_with(inputs, &[output], |outs| -> Result<(Vec<f32>, usize)> {
                let o = &outs[0];
                let shape = used_rows(&o.shape, used, fed);
                let n = shape.iter().product::<usize>();
                let channels = shape.last().copied().unwrap_or(1).max(1);
                // One row per position (a per-token head): its real tokens only; one per input: all of them.
                Ok(match mask.and_then(|m| real_tokens(&o.data[..n], &shape, m)) {
                    Some((kept, [_, c])) => (kept, c),
                    None => (o.data[..n].to_vec(), channels),
                })
            })
        };
        let (q, channels) = read(quantized)?;
        let (f, _) = read(reference)?;
        if acc.sums.is_empty() {
            acc.sums = vec![(0.0, 0.0); channels];
        }
        if acc.sums.len() != channels || q.len() != f.len() {
            return Err(Error::Internal(format!("output shift: `{output}` changed shape between batches")));
        }
        for (qr, fr) in q.chunks_exact(channels).zip(f.chunks_exact(channels)) {
            for ((sum, sq), (a, b)) in acc.sums.iter_mut().zip(qr.iter().zip(fr)) {
                let value = |v: f32| f64::from(if log { model_io::roles::probability_logit(v) } else { v });
                let d = value(*a) - value(*b);
                *sum += d;
                *sq += d * d;
            }
            acc.rows += 1;
        }
        progress.advance(done);
        Ok(())
    })?;
    progress.finish();
    Ok((acc.rows > 0).then_some(acc))
}
