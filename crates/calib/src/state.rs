use std::collections::BTreeMap;
use std::path::Path;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::hist::{Filler, Histogram};
use crate::ranges::mse_fold_limit;
use crate::{Error, Method, Range, Result};

/// What to collect per tensor. Min/max is always collected (it is cheap).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CollectOptions {
    /// Histogram resolution: bins per side of zero of the signed histogram, and half the bins of the absolute
    /// histogram, so that both resolve `[0, max|x|]` into more than `num_bins / 2` and `num_bins` bins
    /// respectively (see [`crate::hist`]). Default 2048.
    pub num_bins: usize,
    /// Min/max; always collected whatever this says.
    pub minmax: bool,
    /// Collect the signed histogram (entropy, distribution, asymmetric percentile).
    pub signed_histogram: bool,
    /// Collect the absolute-value histogram (symmetric percentile, mse).
    pub abs_histogram: bool,
    /// Moving-average min/max with coefficient `c` in (0, 1]: `new = old + c (batch - old)`.
    pub moving_average: Option<f32>,
    /// Also collect min/max per channel along this axis of each batch's shape; negative counts from the end
    /// (-1 = the last axis), as ONNX axes do.
    pub per_channel_axis: Option<isize>,
    /// Histograms need only resolve this share of the values at each end (of `|x|`: at the top), as a percentile
    /// does (and mse, [`MSE_TAILS`]): once a tensor has [`TAIL_MIN`] values past a bin at each end, and
    /// [`TAIL_MARGIN`] times this share, the bins in between are folded into one count
    /// ([`Histogram::fold_to_tails`]) and later values there are not binned. `None`: whole histograms (entropy and
    /// `distribution` need them).
    #[serde(default)]
    pub tails: Option<f64>,
    /// With `tails`, absolute histograms fold only bins below which mse's threshold stays proven from the rest by
    /// [`MSE_PROOF_MARGIN`] on the values so far ([`crate::mse_threshold`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mse_tails: bool,
}

/// Values a histogram collected for its tails keeps bin by bin at each end, at least ([`CollectOptions::tails`]).
pub const TAIL_MIN: u64 = 4096;
/// How many times the tail a percentile reads a histogram keeps bin by bin ([`CollectOptions::tails`]): a tail
/// chosen on the first batches stays wide enough unless later ones hold this many times fewer values there.
pub const TAIL_MARGIN: f64 = 256.0;
/// The tail share ([`CollectOptions::tails`]) mse is collected for: [`TAIL_MARGIN`] times it, 1 % of `|x|`, stays
/// counted bin by bin at the top, and more where its threshold needs them ([`CollectOptions::mse_tails`]). On MiniLM
/// the threshold clips at most 6e-4 of a tensor's values and is proven with the top 0.15 % kept.
pub const MSE_TAILS: f64 = 0.01 / TAIL_MARGIN;
/// How many times mse's best error the clipping error of every threshold inside folded bins must be, on the values
/// folded so far ([`CollectOptions::mse_tails`]), so that later batches leave it proven.
pub const MSE_PROOF_MARGIN: f64 = 4.0;

impl Default for CollectOptions {
    fn default() -> Self {
        CollectOptions {
            num_bins: 2048,
            minmax: true,
            signed_histogram: false,
            abs_histogram: false,
            moving_average: None,
            per_channel_axis: None,
            tails: None,
            mse_tails: false,
        }
    }
}

impl CollectOptions {
    /// Options collecting only what `methods` need, with `num_bins` histogram bins: where every method reading a
    /// histogram is a percentile or mse, only the tails they read ([`CollectOptions::tails`]), the thickest of them
    /// (its bins hold the thinner ones).
    pub fn for_methods(methods: &[Method], num_bins: usize) -> Self {
        let histograms: Vec<&Method> =
            methods.iter().filter(|m| m.needs_signed_histogram() || m.needs_abs_histogram()).collect();
        let tails = histograms.iter().try_fold(0.0f64, |share, m| match **m {
            Method::Percentile { percentile, symmetric } => {
                let cut = (1.0 - percentile / 100.0).max(0.0);
                Some(share.max(if symmetric { cut } else { cut / 2.0 }))
            }
            Method::Mse => Some(share.max(MSE_TAILS)),
            _ => None,
        });
        let tails = tails.filter(|_| !histograms.is_empty());
        CollectOptions {
            num_bins,
            signed_histogram: methods.iter().any(Method::needs_signed_histogram),
            abs_histogram: methods.iter().any(Method::needs_abs_histogram),
            tails,
            mse_tails: tails.is_some() && methods.contains(&Method::Mse),
            ..Default::default()
        }
    }

    /// Check the values: `num_bins` in 2..=1<<22, `moving_average` in (0, 1].
    pub fn validate(&self) -> Result<()> {
        if !(2..=1 << 22).contains(&self.num_bins) {
            return Err(Error::Options {
                field: "num_bins",
                message: format!("must be in 2..=4194304, got {}", self.num_bins),
            });
        }
        if let Some(c) = self.moving_average
            && !(c > 0.0 && c <= 1.0)
        {
            return Err(Error::Options { field: "moving_average", message: format!("must be in (0, 1], got {c}") });
        }
        Ok(())
    }
}

/// How many NaN / +Inf / -Inf values a tensor had (they are excluded from every statistic).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NonFiniteCounts {
    pub nan: u64,
    pub pos_inf: u64,
    pub neg_inf: u64,
}

impl NonFiniteCounts {
    /// Total non-finite values.
    pub fn total(&self) -> u64 {
        self.nan + self.pos_inf + self.neg_inf
    }
}

/// Everything collected for one tensor.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TensorState {
    /// Number of finite values seen.
    pub count: u64,
    /// Observed min/max of the finite values; `None` until one was seen.
    pub minmax: Option<Range>,
    /// Moving-average min/max (only with [`CollectOptions::moving_average`]).
    pub moving: Option<Range>,
    /// Per-channel min/max (only with [`CollectOptions::per_channel_axis`]); `None` for a channel without
    /// finite values.
    pub channels: Option<Vec<Option<Range>>>,
    /// Signed histogram, if collected.
    pub signed: Option<Histogram>,
    /// Absolute-value histogram, if collected.
    pub abs: Option<Histogram>,
    /// Non-finite values seen.
    pub non_finite: NonFiniteCounts,
}

impl TensorState {
    fn new(opts: &CollectOptions) -> Self {
        TensorState {
            count: 0,
            minmax: None,
            moving: None,
            channels: None,
            signed: opts.signed_histogram.then(|| Histogram::new(true, opts.num_bins)),
            abs: opts.abs_histogram.then(|| Histogram::new(false, 2 * opts.num_bins)),
            non_finite: NonFiniteCounts::default(),
        }
    }
}

/// One pass over a slice: min, max, max|x| of the finite values, and counts.
#[derive(Default)]
struct Scan {
    min: f32,
    max: f32,
    finite: u64,
    non_finite: NonFiniteCounts,
}

/// Min, max (NaN ignored) and number of non-finite values of the whole 16-value chunks of `data`.
#[inline(always)]
fn scan_lanes(data: &[f32]) -> (f32, f32, u64) {
    let (mut mn, mut mx, mut bad) = ([f32::INFINITY; 16], [f32::NEG_INFINITY; 16], [0u32; 16]);
    for c in data.chunks_exact(16) {
        for l in 0..16 {
            let x = c[l];
            // Comparisons, not `f32::min`: a NaN compares false and is passed over (one vector min / max each, where
            // `f32::min`'s NaN rule costs a compare and a blend more).
            mn[l] = if x < mn[l] { x } else { mn[l] };
            mx[l] = if x > mx[l] { x } else { mx[l] };
            bad[l] += u32::from((x.to_bits() & 0x7f80_0000) == 0x7f80_0000);
        }
    }
    let min = mn.iter().copied().fold(f32::INFINITY, f32::min);
    let max = mx.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    (min, max, bad.iter().map(|&b| u64::from(b)).sum())
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn scan_lanes_avx2(data: &[f32]) -> (f32, f32, u64) {
    scan_lanes(data)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn scan_lanes_avx512(data: &[f32]) -> (f32, f32, u64) {
    scan_lanes(data)
}

fn scan(data: &[f32]) -> Scan {
    // Fast path: 16 lanes of min/max (`f32::min` ignores NaN) plus a count of non-finite values (exponent bits
    // all ones), which the compiler vectorises (for AVX2 too when the CPU has it). Only if something was
    // non-finite, a careful second pass. (u32 lane counts: blocks are far below 2^32 values per lane.)
    #[cfg(target_arch = "x86_64")]
    let (mut min, mut max, mut non_finite) = if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU supports AVX-512F, checked just above.
        unsafe { scan_lanes_avx512(data) }
    } else if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        unsafe { scan_lanes_avx2(data) }
    } else {
        scan_lanes(data)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let (mut min, mut max, mut non_finite) = scan_lanes(data);
    let chunks = data.chunks_exact(16);
    for &x in chunks.remainder() {
        min = if x < min { x } else { min };
        max = if x > max { x } else { max };
        non_finite += u64::from(!x.is_finite());
    }
    if non_finite == 0 {
        return Scan { min, max, finite: data.len() as u64, non_finite: NonFiniteCounts::default() };
    }
    let (mut min, mut max, mut finite) = (f32::INFINITY, f32::NEG_INFINITY, 0u64);
    let mut nf = NonFiniteCounts::default();
    for &x in data {
        if x.is_finite() {
            min = min.min(x);
            max = max.max(x);
            finite += 1;
        } else if x.is_nan() {
            nf.nan += 1;
        } else if x > 0.0 {
            nf.pos_inf += 1;
        } else {
            nf.neg_inf += 1;
        }
    }
    Scan { min, max, finite, non_finite: nf }
}

impl Scan {
    fn empty() -> Self {
        Scan { min: f32::INFINITY, max: f32::NEG_INFINITY, finite: 0, non_finite: NonFiniteCounts::default() }
    }

    fn join(mut self, b: Scan) -> Scan {
        self.min = self.min.min(b.min);
        self.max = self.max.max(b.max);
        self.finite += b.finite;
        self.non_finite.nan += b.non_finite.nan;
        self.non_finite.pos_inf += b.non_finite.pos_inf;
        self.non_finite.neg_inf += b.non_finite.neg_inf;
        self
    }
}

/// Values per parallel task of [`collect`].
const PAR_CHUNK: usize = 1 << 18;
/// Values per block of [`collect`]'s fused loop: scanned, then binned while still in L1.
const FUSED_BLOCK: usize = 4096;

/// One batch's scan and partial histograms (of the same kinds and sizes as the tensor's).
struct Collected {
    scan: Scan,
    signed: Option<Filler>,
    abs: Option<Filler>,
}

impl Collected {
    /// Partial histograms on the grids of `signed` and `abs` (the tensor's so far): a batch that stays inside the
    /// range already seen is binned without a single coarsening.
    fn new(signed: Option<&Histogram>, abs: Option<&Histogram>) -> Self {
        let filler = |h: Option<&Histogram>| h.map(|h| Filler::new(h.empty_like()).windowed_as(h));
        Collected { scan: Scan::empty(), signed: filler(signed), abs: filler(abs) }
    }

    /// Filling `signed` and `abs` themselves (taken out of their places until [`Collected::put_back`]).
    fn filling(signed: &mut Option<Histogram>, abs: &mut Option<Histogram>) -> Self {
        Collected { scan: Scan::empty(), signed: signed.take().map(Filler::new), abs: abs.take().map(Filler::new) }
    }

    /// The scan, with the histograms of [`Collected::filling`] back in their places.
    fn put_back(self, signed: &mut Option<Histogram>, abs: &mut Option<Histogram>) -> Scan {
        *signed = self.signed.map(Filler::finish);
        *abs = self.abs.map(Filler::finish);
        self.scan
    }

    /// Scans `data` block by block, binning each block right after its scan, so the data is read from memory
    /// once. Each partial histogram's grid follows its own running max; merging partials (and the tensor's
    /// histogram) is exact, so the result does not depend on how the batch was cut.
    fn add(mut self, data: &[f32]) -> Self {
        for block in data.chunks(FUSED_BLOCK) {
            let b = scan(block);
            let max_abs = if b.finite > 0 { b.min.abs().max(b.max.abs()) } else { 0.0 };
            for f in [self.signed.as_mut(), self.abs.as_mut()].into_iter().flatten() {
                f.add(block, max_abs, b.finite);
            }
            self.scan = self.scan.join(b);
        }
        self
    }
}

/// Scan of `data`, counted into the histograms `signed` and `abs` (those present), in parallel chunks when `data`
/// is large.
fn collect(data: &[f32], signed: &mut Option<Histogram>, abs: &mut Option<Histogram>, fan_out: bool) -> Scan {
    if !fan_out || data.len() <= PAR_CHUNK {
        return Collected::filling(signed, abs).add(data).put_back(signed, abs);
    }
    let (scan, s, a) = collect_parts(data, signed.as_ref(), abs.as_ref());
    // Same kinds and sizes, so the merges cannot be refused.
    for (h, part) in [(signed.as_mut(), s), (abs.as_mut(), a)] {
        if let (Some(h), Some(part)) = (h, part) {
            let merged = h.merge(&part);
            debug_assert!(merged);
        }
    }
    scan
}

/// Scan of `data` and partial signed / absolute histograms on the grids of `signed` and `abs`, from parallel
/// chunks.
fn collect_parts(
    data: &[f32],
    signed: Option<&Histogram>,
    abs: Option<&Histogram>,
) -> (Scan, Option<Histogram>, Option<Histogram>) {
    let finish = |c: Collected| (c.scan, c.signed.map(Filler::finish), c.abs.map(Filler::finish));
    let join_hist = |a: Option<Histogram>, b: Option<Histogram>| match (a, b) {
        (Some(mut a), Some(b)) => {
            a.merge(&b);
            Some(a)
        }
        (a, b) => a.or(b),
    };
    data.par_chunks(PAR_CHUNK)
        .fold(|| Collected::new(signed, abs), Collected::add)
        .map(finish)
        .reduce(|| (Scan::empty(), None, None), |a, b| (a.0.join(b.0), join_hist(a.1, b.1), join_hist(a.2, b.2)))
}

fn union(a: Option<Range>, b: Option<Range>) -> Option<Range> {
    match (a, b) {
        (Some(a), Some(b)) => Some(Range { min: a.min.min(b.min), max: a.max.max(b.max) }),
        (a, b) => a.or(b),
    }
}

/// Per-tensor calibration statistics, streamed batch by batch; serde-serialisable and exactly mergeable
/// (except moving averages, which depend on batch order).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CalibState {
    options: CollectOptions,
    tensors: BTreeMap<String, TensorState>,
}

/// Checked view of one observation: the number of channels and the inner block size when per-channel.
struct Checked {
    channels: Option<(usize, usize)>,
}

impl CalibState {
    /// Empty state. Invalid options are reported by [`CalibState::try_new`]; `new` clamps `num_bins` to
    /// at least 2 and drops an out-of-range moving-average coefficient.
    pub fn new(opts: CollectOptions) -> Self {
        let mut opts = opts;
        opts.num_bins = opts.num_bins.clamp(2, 1 << 22);
        if opts.moving_average.is_some_and(|c| !(c > 0.0 && c <= 1.0)) {
            opts.moving_average = None;
        }
        CalibState { options: opts, tensors: BTreeMap::new() }
    }

    /// Empty state after validating `opts`.
    pub fn try_new(opts: CollectOptions) -> Result<Self> {
        opts.validate()?;
        Ok(CalibState { options: opts, tensors: BTreeMap::new() })
    }

    /// The collection options.
    pub fn options(&self) -> &CollectOptions {
        &self.options
    }

    /// The state of one tensor.
    pub fn tensor(&self, name: &str) -> Option<&TensorState> {
        self.tensors.get(name)
    }

    /// Names of the observed tensors, sorted.
    pub fn tensors(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// Tensors that had NaN or ±Inf values, with their counts.
    pub fn non_finite(&self) -> BTreeMap<String, NonFiniteCounts> {
        self.tensors.iter().filter(|(_, t)| t.non_finite.total() > 0).map(|(n, t)| (n.clone(), t.non_finite)).collect()
    }

    fn check(&self, tensor: &str, data: &[f32], shape: &[usize]) -> Result<Checked> {
        let shape_err = |message: String| Error::Shape { tensor: tensor.to_string(), message };
        let elements = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if !shape.is_empty() && elements != Some(data.len()) {
            return Err(shape_err(format!("shape {shape:?} does not match {} values", data.len())));
        }
        let Some(given) = self.options.per_channel_axis else {
            return Ok(Checked { channels: None });
        };
        let resolved = if given < 0 { shape.len().checked_sub(given.unsigned_abs()) } else { Some(given as usize) };
        let Some((axis, &channels)) = resolved.and_then(|a| Some((a, shape.get(a)?))) else {
            return Err(shape_err(format!("per-channel axis {given} is out of range for shape {shape:?}")));
        };
        let inner: usize = shape.iter().skip(axis + 1).product();
        if let Some(Some(prev)) = self.tensors.get(tensor).map(|t| t.channels.as_ref())
            && prev.len() != channels
        {
            return Err(shape_err(format!("axis {axis} has {channels} channels, earlier batches had {}", prev.len())));
        }
        Ok(Checked { channels: Some((channels, inner)) })
    }

    fn apply(opts: &CollectOptions, t: &mut TensorState, data: &[f32], checked: &Checked, fan_out: bool) {
        let s = collect(data, &mut t.signed, &mut t.abs, fan_out);
        // Tails only: the folded bins are chosen again each time the tensor's count passes a power of two.
        let (before, after) = (t.count, t.count + s.finite);
        if let Some(share) = opts.tails
            && after >= TAIL_MIN
            && (before == 0 || after.ilog2() > before.ilog2())
        {
            for h in [t.signed.as_mut(), t.abs.as_mut()].into_iter().flatten() {
                let keep = (TAIL_MARGIN * share * h.total() as f64).ceil() as u64;
                // mse reads the top of `|x|` down to where its threshold is proven.
                let below =
                    if opts.mse_tails && !h.is_signed() { mse_fold_limit(h, MSE_PROOF_MARGIN) } else { usize::MAX };
                h.fold_to_tails(keep.max(TAIL_MIN), below);
            }
        }
        t.non_finite.nan += s.non_finite.nan;
        t.non_finite.pos_inf += s.non_finite.pos_inf;
        t.non_finite.neg_inf += s.non_finite.neg_inf;
        if let Some((channels, inner)) = checked.channels {
            observe_channels(t.channels.get_or_insert_with(|| vec![None; channels]), data, channels, inner);
        }
        if s.finite == 0 {
            return;
        }
        let batch = Range { min: s.min, max: s.max };
        t.count += s.finite;
        t.minmax = union(t.minmax, Some(batch));
        if let Some(c) = opts.moving_average {
            t.moving = Some(match t.moving {
                None => batch,
                Some(m) => Range { min: m.min + c * (batch.min - m.min), max: m.max + c * (batch.max - m.max) },
            });
        }
    }

    /// Add one batch of `tensor`. `shape` must describe `data` (an empty shape means "flat"); shapes may differ
    /// between batches except along the per-channel axis.
    pub fn observe(&mut self, tensor: &str, data: &[f32], shape: &[usize]) -> Result<()> {
        self.observe_one(tensor, data, shape, true)
    }

    /// [`CalibState::observe`] on the calling thread alone (a large batch is not spread over the thread pool): for
    /// a caller that already runs one observer per core, such as a calibration pass whose sessions side by side each
    /// observe their own tensors while they run, where a fan-out would take the other sessions' cores.
    pub fn observe_here(&mut self, tensor: &str, data: &[f32], shape: &[usize]) -> Result<()> {
        self.observe_one(tensor, data, shape, false)
    }

    fn observe_one(&mut self, tensor: &str, data: &[f32], shape: &[usize], fan_out: bool) -> Result<()> {
        let checked = self.check(tensor, data, shape)?;
        let opts = &self.options;
        let t = self.tensors.entry(tensor.to_string()).or_insert_with(|| TensorState::new(opts));
        Self::apply(opts, t, data, &checked, fan_out);
        Ok(())
    }

    /// Add one batch of many tensors, in parallel across tensors. All items are checked first, so on error
    /// nothing is added. A tensor named twice gets both batches, in order.
    pub fn observe_batch(&mut self, batch: &[(&str, &[f32], &[usize])]) -> Result<()> {
        let mut by_tensor: BTreeMap<&str, Vec<(&[f32], Checked)>> = BTreeMap::new();
        for &(name, data, shape) in batch {
            let checked = self.check(name, data, shape)?;
            if let (Some((channels, _)), Some(first)) = (checked.channels, by_tensor.get(name).and_then(|v| v.first()))
                && first.1.channels.map(|c| c.0) != Some(channels)
            {
                return Err(Error::Shape {
                    tensor: name.to_string(),
                    message: "per-channel axis length differs within one batch".into(),
                });
            }
            by_tensor.entry(name).or_default().push((data, checked));
        }
        for name in by_tensor.keys() {
            if !self.tensors.contains_key(*name) {
                self.tensors.insert(name.to_string(), TensorState::new(&self.options));
            }
        }
        let opts = &self.options;
        self.tensors.par_iter_mut().for_each(|(name, t)| {
            if let Some(items) = by_tensor.get(name.as_str()) {
                for (data, checked) in items {
                    Self::apply(opts, t, data, checked, true);
                }
            }
        });
        Ok(())
    }

    /// Add `other`'s statistics. Options must be equal (the error names the differing field). Histograms merge
    /// exactly; moving averages cannot be merged (error) when both states saw the same tensor.
    pub fn merge(&mut self, other: &CalibState) -> Result<()> {
        check_same_options(&self.options, &other.options)?;
        let mut merged = self.tensors.clone();
        for (name, theirs) in &other.tensors {
            let Some(ours) = merged.get_mut(name) else {
                merged.insert(name.clone(), theirs.clone());
                continue;
            };
            if ours.moving.is_some() && theirs.moving.is_some() {
                return Err(Error::NotMergeable(format!(
                    "tensor `{name}`: moving-average min/max depends on batch order"
                )));
            }
            merge_tensor(name, ours, theirs)?;
        }
        self.tensors = merged;
        Ok(())
    }

    /// Write the state as JSON (to a temporary sibling, then renamed).
    pub fn save_json(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let bytes = serde_json::to_vec(self).map_err(|source| Error::Json { path: path.to_path_buf(), source })?;
        crate::tables::write_atomic(path, &bytes)
    }

    /// Read a state written by [`CalibState::save_json`]; its options are validated.
    pub fn load_json(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = crate::tables::read(path)?;
        let state: CalibState =
            serde_json::from_slice(&bytes).map_err(|source| Error::Json { path: path.to_path_buf(), source })?;
        state.options.validate()?;
        for (name, t) in &state.tensors {
            let layouts = [(&t.signed, true, state.options.num_bins), (&t.abs, false, 2 * state.options.num_bins)];
            for (h, signed, per_side) in layouts {
                if let Some(h) = h
                    && !(h.is_signed() == signed && h.per_side() == per_side && h.is_consistent())
                {
                    return Err(Error::Shape {
                        tensor: name.clone(),
                        message: format!(
                            "{}: inconsistent {} histogram",
                            path.display(),
                            if signed { "signed" } else { "absolute" }
                        ),
                    });
                }
            }
        }
        Ok(state)
    }
}

/// Folds `data`'s per-channel min/max into `ch`: `channels` channels, each a run of `inner` consecutive values
/// (1: the channels are the last axis).
fn observe_channels(ch: &mut [Option<Range>], data: &[f32], channels: usize, inner: usize) {
    if inner == 1 && channels > 0 {
        // Channels on the last axis: one running min/max per channel over the rows.
        let mut lo = vec![f32::INFINITY; channels];
        let mut hi = vec![f32::NEG_INFINITY; channels];
        for row in data.chunks_exact(channels) {
            for ((l, h), &v) in lo.iter_mut().zip(hi.iter_mut()).zip(row) {
                if v.is_finite() {
                    *l = l.min(v);
                    *h = h.max(v);
                }
            }
        }
        for ((slot, l), h) in ch.iter_mut().zip(lo).zip(hi) {
            if l <= h {
                *slot = union(*slot, Some(Range { min: l, max: h }));
            }
        }
    } else if inner > 0 {
        for (i, block) in data.chunks_exact(inner).enumerate() {
            let b = scan(block);
            if b.finite > 0
                && let Some(slot) = ch.get_mut(i % channels.max(1))
            {
                *slot = union(*slot, Some(Range { min: b.min, max: b.max }));
            }
        }
    }
}

/// The options two states must share to merge (the error names the first that differs).
fn check_same_options(a: &CollectOptions, b: &CollectOptions) -> Result<()> {
    let mismatch = |field: &'static str, ours: String, theirs: String| Error::MergeMismatch { field, ours, theirs };
    if a.num_bins != b.num_bins {
        return Err(mismatch("num_bins", a.num_bins.to_string(), b.num_bins.to_string()));
    }
    if a.signed_histogram != b.signed_histogram {
        return Err(mismatch("signed_histogram", a.signed_histogram.to_string(), b.signed_histogram.to_string()));
    }
    if a.abs_histogram != b.abs_histogram {
        return Err(mismatch("abs_histogram", a.abs_histogram.to_string(), b.abs_histogram.to_string()));
    }
    if a.moving_average != b.moving_average {
        return Err(mismatch("moving_average", format!("{:?}", a.moving_average), format!("{:?}", b.moving_average)));
    }
    if a.per_channel_axis != b.per_channel_axis {
        return Err(mismatch(
            "per_channel_axis",
            format!("{:?}", a.per_channel_axis),
            format!("{:?}", b.per_channel_axis),
        ));
    }
    Ok(())
}

/// Adds `theirs`'s statistics of tensor `name` to `ours` (their moving averages already checked).
fn merge_tensor(name: &str, ours: &mut TensorState, theirs: &TensorState) -> Result<()> {
    ours.moving = ours.moving.or(theirs.moving);
    ours.count += theirs.count;
    ours.minmax = union(ours.minmax, theirs.minmax);
    ours.non_finite.nan += theirs.non_finite.nan;
    ours.non_finite.pos_inf += theirs.non_finite.pos_inf;
    ours.non_finite.neg_inf += theirs.non_finite.neg_inf;
    match (ours.channels.as_mut(), theirs.channels.as_ref()) {
        (Some(x), Some(y)) if x.len() != y.len() => {
            return Err(Error::Shape {
                tensor: name.to_owned(),
                message: format!("{} channels vs {} in the other state", x.len(), y.len()),
            });
        }
        (Some(x), Some(y)) => x.iter_mut().zip(y).for_each(|(p, q)| *p = union(*p, *q)),
        (None, Some(y)) => ours.channels = Some(y.clone()),
        _ => {}
    }
    for (h, o) in [(&mut ours.signed, &theirs.signed), (&mut ours.abs, &theirs.abs)] {
        if let (Some(h), Some(o)) = (h.as_mut(), o.as_ref())
            && !h.merge(o)
        {
            return Err(Error::Shape { tensor: name.to_owned(), message: "histogram layouts differ".into() });
        }
    }
    Ok(())
}
