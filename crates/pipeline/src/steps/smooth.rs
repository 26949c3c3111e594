//! SmoothQuant-style smoothing before calibration: one pass collects the per-channel range of every tensor the
//! policy smooths, then the model is rescaled in place ([`qdq::smooth_in_place`]).

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
}

impl Smoothing {
    /// One line for logs and reports: sites, α and how much the channel spread shrank.
    pub fn describe(&self) -> String {
        let ln = self.sites.iter().filter(|s| s.site.gamma.is_some()).count();
        let other = self.sites.len() - ln;
        let matmuls: usize = self.sites.iter().map(|s| s.site.matmuls.len()).sum();
        let worst = |f: fn(&qdq::SmoothedSite) -> f32| self.sites.iter().map(f).fold(0.0f32, f32::max);
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        let what = if other == 0 {
            format!("{ln} LayerNorm output{}", plural(ln))
        } else {
            format!("{ln} LayerNorm output{} and {other} other MatMul input{}", plural(ln), plural(other))
        };
        format!(
            "{what} smoothed into {matmuls} MatMul{} (alpha {}): largest channel max / median {:.1}x -> {:.1}x",
            plural(matmuls),
            self.alpha,
            worst(|s| s.spread_before),
            worst(|s| s.spread_after),
        )
    }
}

/// Applies the policy's SmoothQuant-style migration ([`qdq::smooth`]): one pass over `data` collects the
/// per-channel min/max (last axis) of every [`qdq::smoothing_sites`] tensor, then the LayerNorm parameters and the
/// MatMul weights are rescaled, in the model itself (a model of gigabytes is not held twice). Returns the model,
/// smoothed or as it was, and what smoothing did (`None` when the policy does not smooth or the model has no site).
/// The main calibration must then run on the returned model.
pub fn smooth_model(
    model: Model,
    policy: &qdq::Policy,
    data: &dyn Feeds,
    opts: &CalibrateOptions,
    progress: &dyn Progress,
) -> Result<(Model, Option<Smoothing>)> {
    let Some(alpha) = policy.smooth else { return Ok((model, None)) };
    if let Some(record) = qdq::smoothing_record(&model) {
        return Err(Error::Usage(format!(
            "the model is already smoothed ({record}); quantize it with policy option smooth=off, or start from the \
             original model"
        )));
    }
    let started = Instant::now();
    let sites = qdq::smoothing_sites(&model, policy)?;
    if sites.is_empty() {
        return Ok((model, None));
    }
    let tensors: Vec<String> = sites.iter().map(|s| s.tensor.clone()).collect();
    let collect = CollectOptions { per_channel_axis: Some(-1), ..Default::default() };
    let state = collect_stats(&model, &tensors, data, opts, collect, "smoothing", progress)?.state;
    let mut absmax = std::collections::BTreeMap::new();
    for t in &tensors {
        let channels = state.tensor(t).and_then(|s| s.channels.as_ref()).ok_or_else(|| {
            Error::Internal(format!("smoothing: no per-channel statistics were collected for tensor '{t}'"))
        })?;
        let m: Vec<f32> = channels.iter().map(|r| r.map_or(0.0, |r| r.min.abs().max(r.max.abs()))).collect();
        absmax.insert(t.clone(), m);
    }
    let mut model = model;
    let sites = qdq::smooth_in_place(&mut model, policy, &absmax, alpha)?;
    Ok((model, Some(Smoothing { alpha, sites, seconds: started.elapsed().as_secs_f64() })))
}
