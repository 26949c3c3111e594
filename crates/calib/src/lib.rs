//! `calib`: calibration statistics and range algorithms for post-training INT8 quantization.
//!
//! Pure math over `f32` slices; knows nothing of ONNX or ONNX Runtime. The flow is:
//! [`CalibState::observe`] / [`CalibState::observe_batch`] stream activations batch by batch into per-tensor
//! collectors (min/max, optional moving average, optional per-channel min/max, signed and/or absolute
//! histograms); [`compute_ranges`] / [`compute_all`] turn one collection into a [`RangeTable`] per [`Method`];
//! [`tables`] reads and writes `calibration.json`, ONNX Runtime's flatbuffers table (TensorRT / MIGraphX EPs)
//! and TensorRT's native calibration cache. [`ErrorStats`] and [`softmax_kl`] measure how far a quantized tensor or
//! logit vector is from its float reference (`qdq debug`).
//!
//! Observe two shards of activations, compute ranges, and check that merging the shards gives exactly the ranges
//! of one pass:
//!
//! ```
//! use qdq_calib::{CalibState, CollectOptions, Method, MethodKind, MethodOptions, compute_all};
//!
//! let methods = [MethodKind::MinMax, MethodKind::Percentile, MethodKind::Mse]
//!     .map(|k| Method::new(k, &MethodOptions::default()))
//!     .into_iter()
//!     .collect::<Result<Vec<_>, _>>()?;
//! let opts = CollectOptions::for_methods(&methods, 2048);
//! // Two batches of one tensor, shape [batch, channels]: observed by one state, or by two shards.
//! let a: Vec<f32> = (0..512).map(|i| (i as f32 * 0.37).sin()).collect();
//! let b: Vec<f32> = (0..512).map(|i| (i as f32 * 0.11).cos() * 3.0).collect();
//! let mut one = CalibState::try_new(opts.clone())?;
//! one.observe("x", &a, &[8, 64])?;
//! one.observe("x", &b, &[8, 64])?;
//! let (mut first, mut second) = (CalibState::try_new(opts.clone())?, CalibState::try_new(opts)?);
//! first.observe("x", &a, &[8, 64])?;
//! second.observe("x", &b, &[8, 64])?;
//! first.merge(&second)?;
//!
//! let tables = compute_all(&one, &methods)?;
//! assert_eq!(tables, compute_all(&first, &methods)?);
//! let minmax = &tables[0].ranges["x"];
//! assert!((minmax.min + 3.0).abs() < 1e-2 && minmax.max == 3.0); // the extremes of both shards
//! // MSE clips less than the extremes, never more than them.
//! assert!(tables[2].ranges["x"].amax() <= minmax.amax());
//! # Ok::<(), qdq_calib::Error>(())
//! ```
//!
//! Invariants:
//! * NaN and ±Inf never enter any statistic; they are counted per tensor ([`CalibState::non_finite`]).
//! * Histograms have a fixed number of bins per side of zero and a power-of-two bin width that is a pure
//!   function of the largest finite `|x|` seen so far (see [`hist`]). Growing the range halves the resolution by
//!   merging bin pairs, which is exact, so collecting shards separately and [`CalibState::merge`]-ing them gives
//!   bit-identical state and ranges to one pass, whatever the batch order.
//! * Every error is a typed [`Error`] naming the tensor, field, file or line at fault; nothing panics on user input
//!   and every written file is written to a temporary sibling first and then renamed.
//!
//! What it offers the crates that use it: `CalibState` (`observe`, `observe_batch`, `merge`, JSON state),
//! `CollectOptions::for_methods`, `Method` built from `MethodKind` + `MethodOptions`, `compute_ranges` / `compute_all`
//! -> `RangeTable` (`min_max()` for placement), `range_spread` -> `RangeSpread` (how far two tables' ranges lie apart)
//! and `median`, `ErrorStats` / `softmax_kl` / `argmax` (how far a tensor or logits are from a reference),
//! `tables::{write_*, read_*}` and `tables::read_ranges`, which reads any table by content: qdq's, the three ONNX
//! Runtime's `write_calibration_table` writes (fixtures from onnxruntime 1.31.1 in testdata/calib/) and TensorRT's
//! cache, listing bad entries instead of failing on them; `Float8` (the E4M3FN / E4M3FNUZ grids, through the
//! `microfloat` crate, saturated as ONNX's `QuantizeLinear`: what the `fp8-mse` method prices and what the tests hold
//! ONNX Runtime's float8 pairs to). Its lib.rs doctest observes two shards and merges them.

mod compare;
mod error;
mod float8;
pub mod hist;
mod method;
mod ranges;
mod state;
pub mod tables;

pub use compare::{ErrorStats, argmax, softmax_kl};
pub use error::{Error, Result};
pub use float8::Float8;
pub use method::{Method, MethodKind, MethodOptions};
pub use ranges::{
    DistributionStats, Range, RangeSpread, RangeTable, abs_percentile, compute_all, compute_ranges, entropy_threshold,
    fp8_mse_threshold, histogram_mean_std, median, mse_threshold, range_spread, signed_percentile,
};
pub use state::{
    CalibState, CollectOptions, MSE_PROOF_MARGIN, MSE_TAILS, NonFiniteCounts, TAIL_MARGIN, TAIL_MIN, TensorState,
};
