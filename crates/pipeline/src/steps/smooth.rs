//! SmoothQuant-style smoothing before calibration: one pass collects the per-channel range of every tensor the
//! policy smooths, then the model is rescaled in place ([`qdq::smooth_in_place`]).

use std::collections::BTreeMap;
use std::time::Instant;

use calib::CollectOptions;
use onnx_ir::Model;

use crate::error::{Error, Result};
use crate::inputs::feeds::Feeds;
use crate::progress::Progress;
use crate::steps::collect::{CalibrateOptions, collect_stats};

/// What the smoothing step did (see [`smooth_model`]).
#[derive(Debug, Clone)]
pub struct Smoothing {
    /// Migration strength α.
    pub alpha: f32,
    /// One entry per smoothed LayerNorm output.
    pub sites: Vec<qdq::SmoothedSite>,
    /// Wall time of the per-channel pass and the rewrite.
    pub seconds: f64,
    /// How far the channel maxima (what the smoothing factors are made of) of the two halves of the data lie apart:
    /// `median` over every channel of `|max_a - max_b| / max`, `max` the largest tensor's median (`tensor`).
    pub halves: Option<calib::RangeSpread>,
    /// The inputs whose outlier channels were split off, and the ratio (policy `outlier_channels`; `None`: off).
    pub outliers: Vec<qdq::OutlierSplit>,
    pub ratio: Option<f32>,
}

impl Smoothing {
    /// One line for logs and reports: sites, α and how much the channel spread shrank.
    pub fn describe(&self) -> String {
        let ln = self.sites.iter().filter(|s| s.site.gamma.is_some()).count();
        let other = self.sites.len() - ln;
        let matmuls: usize = self.sites.iter().map(|s| s.site.matmuls.len()).sum();
        let worst = |f: fn(&qdq::SmoothedSite) -> f32| self.sites.iter().map(f).fold(0.0f32, f32::max);
        let what = if other == 0 {
            format!("{ln} LayerNorm output{}", plural(ln))
        } else {
            format!("{ln} LayerNorm output{} and {other} other MatMul input{}", plural(ln), plural(other))
        };
        let halves = self.halves.as_ref().map_or(String::new(), |h| {
            format!(
                "; channel maxima move {:.1} % between the halves of the data (median; {:.1} % in {})",
                100.0 * h.median,
                100.0 * h.max,
                h.tensor
            )
        });
        let smoothed = format!(
            "{what} smoothed into {matmuls} MatMul{} (alpha {}): largest channel max / median {:.1}x -> {:.1}x{halves}",
            plural(matmuls),
            self.alpha,
            worst(|s| s.spread_before),
            worst(|s| s.spread_after),
        );
        let outliers = self.describe_outliers();
        match (self.sites.is_empty(), outliers) {
            (false, Some(o)) => format!("{smoothed}; {o}"),
            (true, Some(o)) => o,
            (_, None) => smoothed,
        }
    }

    /// The outlier split, one clause (`None` when the policy does not split): how many inputs, channels and MatMuls,
    /// and the largest outlier against the largest channel left.
    fn describe_outliers(&self) -> Option<String> {
        let ratio = self.ratio?;
        let channels: usize = self.outliers.iter().map(|o| o.channels.len()).sum();
        let matmuls: usize = self.outliers.iter().map(|o| o.matmuls.len()).sum();
        let worst = self.outliers.iter().max_by(|a, b| (a.max / a.rest_max).total_cmp(&(b.max / b.rest_max)));
        Some(match worst {
            None => format!("no outlier channel over {ratio}x the median channel's max"),
            Some(w) => format!(
                "{channels} outlier channel{} of {} MatMul input{} (over {ratio}x the median channel's max) carried in \
                 float beside {matmuls} MatMul{}; largest {:.1} against {:.1} for the rest, in {}",
                plural(channels),
                self.outliers.len(),
                plural(self.outliers.len()),
                plural(matmuls),
                w.max,
                w.rest_max,
                w.tensor
            ),
        })
    }
}

/// `s` after a count other than one.
fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Each tensor's per-channel max |x| in `state` (0 for a channel without values).
fn channel_absmax(state: &calib::CalibState, tensors: &[String]) -> Result<BTreeMap<String, Vec<f32>>> {
    let mut absmax = BTreeMap::new();
    for t in tensors {
        let channels = state.tensor(t).and_then(|s| s.channels.as_ref()).ok_or_else(|| {
            Error::Internal(format!("smoothing: no per-channel statistics were collected for tensor '{t}'"))
        })?;
        let m: Vec<f32> = channels.iter().map(|r| r.map_or(0.0, |r| r.min.abs().max(r.max.abs()))).collect();
        absmax.insert(t.clone(), m);
    }
    Ok(absmax)
}

/// How far the halves' channel maxima lie apart against `whole`'s ([`Smoothing::halves`]); `None` when a half saw
/// nothing.
fn halves_spread(
    halves: [&BTreeMap<String, Vec<f32>>; 2],
    whole: &BTreeMap<String, Vec<f32>>,
) -> Option<calib::RangeSpread> {
    let (mut all, mut worst) = (vec![], None::<(f64, &str)>);
    for (t, w) in whole {
        let (a, b) = (halves[0].get(t)?, halves[1].get(t)?);
        let mut moved: Vec<f64> = w
            .iter()
            .zip(a.iter().zip(b))
            .filter(|(w, (a, b))| **w > 0.0 && **a > 0.0 && **b > 0.0)
            .map(|(w, (a, b))| f64::from((a - b).abs() / w))
            .collect();
        all.extend_from_slice(&moved);
        if let Some(m) = calib::median(&mut moved)
            && worst.is_none_or(|(x, _)| m > x)
        {
            worst = Some((m, t.as_str()));
        }
    }
    let (max, tensor) = worst?;
    Some(calib::RangeSpread { tensors: whole.len(), median: calib::median(&mut all)?, max, tensor: tensor.to_owned() })
}

/// Applies the policy's SmoothQuant-style migration ([`qdq::smooth`]) and outlier split ([`qdq::split_outliers`]):
/// one pass over `data` collects the per-channel min/max (last axis) of every [`qdq::smoothing_sites`] and
/// [`qdq::outlier_candidates`] tensor, then the LayerNorm parameters and the MatMul weights are rescaled and the
/// outlier channels split off, in the model itself (a model of gigabytes is not held twice). Returns the model,
/// rewritten or as it was, and what was done (`None` when the policy does neither or the model has no site). The
/// main calibration must then run on the returned model.
pub fn smooth_model(
    model: Model,
    policy: &qdq::Policy,
    data: &dyn Feeds,
    opts: &CalibrateOptions,
    progress: &dyn Progress,
) -> Result<(Model, Option<Smoothing>)> {
    if policy.smooth.is_none() && policy.outlier_channels.is_none() {
        return Ok((model, None));
    }
    if let (Some(_), Some(record)) = (policy.smooth, qdq::smoothing_record(&model)) {
        return Err(Error::Usage(format!(
            "the model is already smoothed ({record}); quantize it with policy option smooth=off, or start from the \
             original model"
        )));
    }
    if let (Some(_), Some(record)) = (policy.outlier_channels, qdq::outlier_record(&model)) {
        return Err(Error::Usage(format!(
            "the model's outlier channels are already split off ({record}); quantize it with policy option \
             outlier_channels=off, or start from the original model"
        )));
    }
    let started = Instant::now();
    let sites = if policy.smooth.is_some() { qdq::smoothing_sites(&model, policy)? } else { vec![] };
    let candidates = qdq::outlier_candidates(&model, policy)?;
    if sites.is_empty() && candidates.is_empty() {
        return Ok((model, None));
    }
    let mut tensors: Vec<String> = sites.iter().map(|s| s.tensor.clone()).collect();
    tensors.extend(candidates.iter().filter(|c| !tensors.contains(c)).cloned().collect::<Vec<_>>());
    let collect = CollectOptions { per_channel_axis: Some(-1), ..Default::default() };
    let pass = collect_stats(&model, &tensors, data, opts, collect, "smoothing", progress)?;
    let absmax = channel_absmax(&pass.state, &tensors)?;
    // A half that saw no batch has no per-channel statistics: no spread then.
    let halves = match (channel_absmax(&pass.halves[0], &tensors), channel_absmax(&pass.halves[1], &tensors)) {
        (Ok(a), Ok(b)) => halves_spread([&a, &b], &absmax),
        _ => None,
    };
    let mut model = model;
    let sites = match policy.smooth {
        Some(alpha) if !sites.is_empty() => qdq::smooth_in_place(&mut model, policy, &absmax, alpha)?,
        _ => vec![],
    };
    // Only the candidates' maxima: a smoothing site keeps its name, but its maxima are those before smoothing.
    let candidates: BTreeMap<String, Vec<f32>> = absmax.into_iter().filter(|(t, _)| candidates.contains(t)).collect();
    let outliers = qdq::split_outliers(&mut model, policy, &candidates)?;
    let seconds = started.elapsed().as_secs_f64();
    Ok((
        model,
        Some(Smoothing {
            alpha: policy.smooth.unwrap_or(0.0),
            sites,
            seconds,
            halves,
            outliers,
            ratio: policy.outlier_channels,
        }),
    ))
}
