use std::collections::BTreeMap;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::hist::Histogram;
use crate::{CalibState, Error, Method, Result, TensorState};

/// A closed real range `[min, max]`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct Range {
    pub min: f32,
    pub max: f32,
}

impl Range {
    /// `max(|min|, |max|)`.
    pub fn amax(&self) -> f32 {
        self.min.abs().max(self.max.abs())
    }
    /// `[-amax, amax]`.
    pub fn symmetric(&self) -> Range {
        let a = self.amax();
        Range { min: -a, max: a }
    }
    /// Both ends clamped into `bounds` (so the result is inside `bounds` and never inverted).
    pub fn clamp_to(&self, bounds: Range) -> Range {
        let c = |x: f32| x.max(bounds.min).min(bounds.max);
        Range { min: c(self.min), max: c(self.max) }
    }
}

/// Mean and standard deviation of a tensor's histogram ([`Method::Distribution`]).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct DistributionStats {
    pub mean: f32,
    pub std: f32,
}

/// Ranges of every tensor for one method (what `calibration.json` holds).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RangeTable {
    /// [`Method::name`].
    pub method: String,
    /// [`Method::options_json`].
    pub options: BTreeMap<String, serde_json::Value>,
    /// Per-tensor range (always present for every tensor with at least one finite value).
    pub ranges: BTreeMap<String, Range>,
    /// Per-channel ranges (MinMax with per-channel collection only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub channels: BTreeMap<String, Vec<Range>>,
    /// Histogram mean/std ([`Method::Distribution`] only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub distribution: BTreeMap<String, DistributionStats>,
    /// An opaque identity of the model the ranges were measured on, set by the caller (qdq: the fingerprint of the
    /// smoothing it applied first), so that a reader can tell ranges of another model apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Tensors whose range another method gave (`qdq tune`'s per-tensor choice from the same statistics): tensor
    /// -> that method's name. Every other tensor's range is `method`'s.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub chosen: BTreeMap<String, String>,
}

impl RangeTable {
    /// `tensor -> (min, max)` of the per-tensor ranges: what Q/DQ placement takes.
    pub fn min_max(&self) -> BTreeMap<String, (f32, f32)> {
        self.ranges.iter().map(|(k, r)| (k.clone(), (r.min, r.max))).collect()
    }
}

/// How far the ranges of two tables (of two parts of the same data) lie apart, per tensor relative to the size of
/// its range in a reference table (of all the data): `max(|min_a - min_b|, |max_a - max_b|) / max(|min|, |max|)`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RangeSpread {
    /// Tensors with a range in all three tables (and a reference range wider than 0).
    pub tensors: usize,
    /// The median of the tensors' spreads (a fraction: 0.05 is 5 %).
    pub median: f64,
    /// The largest, and the tensor it is in.
    pub max: f64,
    pub tensor: String,
}

/// [`RangeSpread`] of `a` and `b` against `reference`; `None` when no tensor has a range in all three.
pub fn range_spread(a: &RangeTable, b: &RangeTable, reference: &RangeTable) -> Option<RangeSpread> {
    let spreads: Vec<(f64, &str)> = reference
        .ranges
        .iter()
        .filter_map(|(t, r)| {
            let size = f64::from(r.min.abs().max(r.max.abs()));
            let (ra, rb) = (a.ranges.get(t)?, b.ranges.get(t)?);
            let apart = f64::from((ra.min - rb.min).abs().max((ra.max - rb.max).abs()));
            (size > 0.0).then_some((apart / size, t.as_str()))
        })
        .collect();
    let &(max, tensor) = spreads.iter().max_by(|x, y| x.0.total_cmp(&y.0))?;
    let median = median(&mut spreads.iter().map(|s| s.0).collect::<Vec<_>>())?;
    Some(RangeSpread { tensors: spreads.len(), median, max, tensor: tensor.to_owned() })
}

/// The median of `v` (sorted in place; the mean of the middle two for an even count), `None` when it is empty.
pub fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    (n > 0).then(|| if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

/// Number of standard deviations each side of the mean in [`Method::Distribution`]'s INT8 range.
pub const DISTRIBUTION_NUM_STD: f64 = 4.0;
/// Smoothing constant of the KL search (as TensorRT / ONNX Runtime).
const KL_EPS: f64 = 1e-4;
/// Below this smoothing shift the `p ln p` term uses the prefix-sum series (error < 1e-9 per bin).
const SERIES_MAX_EPS: f64 = 1e-2;

struct TensorResult {
    range: Range,
    channels: Option<Vec<Range>>,
    distribution: Option<DistributionStats>,
}

/// Ranges of every tensor of `state` for `method`, in parallel across tensors. Tensors without any finite value
/// are left out (see [`CalibState::non_finite`]).
pub fn compute_ranges(state: &CalibState, method: &Method) -> Result<RangeTable> {
    method.validate()?;
    let names: Vec<&str> = state.tensors().collect();
    let results: Vec<(String, Option<TensorResult>)> = names
        .par_iter()
        .map(|&name| {
            let t = state
                .tensor(name)
                .ok_or_else(|| Error::Shape { tensor: name.to_string(), message: "vanished from the state".into() })?;
            Ok((name.to_string(), tensor_range(name, t, state, method)?))
        })
        .collect::<Result<_>>()?;
    let mut table = RangeTable {
        method: method.name().to_string(),
        options: method.options_json(),
        ranges: BTreeMap::new(),
        channels: BTreeMap::new(),
        distribution: BTreeMap::new(),
        model: None,
        chosen: BTreeMap::new(),
    };
    for (name, r) in results {
        let Some(r) = r else { continue };
        if let Some(c) = r.channels {
            table.channels.insert(name.clone(), c);
        }
        if let Some(d) = r.distribution {
            table.distribution.insert(name.clone(), d);
        }
        table.ranges.insert(name, r.range);
    }
    Ok(table)
}

/// One table per method from the same collection.
pub fn compute_all(state: &CalibState, methods: &[Method]) -> Result<Vec<RangeTable>> {
    methods.iter().map(|m| compute_ranges(state, m)).collect()
}

/// The whole histogram `method` needs (one with folded bins is refused: it holds only tails).
fn need<'a>(h: &'a Option<Histogram>, tensor: &str, method: &Method, needs: &'static str) -> Result<&'a Histogram> {
    let h = need_tails(h, tensor, method, needs)?;
    match h.folded() {
        Some(_) => Err(Error::TailsOnly { tensor: tensor.to_string(), method: method.name(), needs }),
        None => Ok(h),
    }
}

/// The histogram `method` needs, whose tails are enough (a percentile's or mse's).
fn need_tails<'a>(
    h: &'a Option<Histogram>,
    tensor: &str,
    method: &Method,
    needs: &'static str,
) -> Result<&'a Histogram> {
    h.as_ref().ok_or_else(|| Error::NotCollected { tensor: tensor.to_string(), method: method.name(), needs })
}

fn too_thin(tensor: &str, method: &Method) -> Error {
    Error::TailTooThin { tensor: tensor.to_string(), method: method.name() }
}

fn tensor_range(name: &str, t: &TensorState, state: &CalibState, method: &Method) -> Result<Option<TensorResult>> {
    let Some(observed) = t.minmax else {
        return Ok(None);
    };
    let plain = |range: Range| Ok(Some(TensorResult { range, channels: None, distribution: None }));
    match *method {
        Method::MinMax { symmetric } => {
            let base = if state.options().moving_average.is_some() { t.moving.unwrap_or(observed) } else { observed };
            let sym = |r: Range| if symmetric { r.symmetric() } else { r };
            let channels =
                t.channels.as_ref().map(|c| c.iter().map(|r| sym(r.unwrap_or(Range { min: 0.0, max: 0.0 }))).collect());
            Ok(Some(TensorResult { range: sym(base), channels, distribution: None }))
        }
        Method::Percentile { percentile, symmetric: true } => {
            let h = need_tails(&t.abs, name, method, "absolute histogram")?;
            let thr = abs_percentile(h, percentile / 100.0).ok_or_else(|| too_thin(name, method))?;
            plain(Range { min: -thr, max: thr }.clamp_to(observed))
        }
        Method::Percentile { percentile, symmetric: false } => {
            let h = need_tails(&t.signed, name, method, "signed histogram")?;
            plain(signed_percentile(h, percentile / 100.0).ok_or_else(|| too_thin(name, method))?.clamp_to(observed))
        }
        Method::Entropy { num_quantized_bins } => {
            let h = need(&t.signed, name, method, "signed histogram")?;
            let thr = entropy_threshold(h, num_quantized_bins);
            plain(Range { min: -thr, max: thr }.clamp_to(observed))
        }
        Method::Distribution => {
            let h = need(&t.signed, name, method, "signed histogram")?;
            let (mean, std) = histogram_mean_std(h);
            let k = DISTRIBUTION_NUM_STD;
            let range = Range { min: (mean - k * std) as f32, max: (mean + k * std) as f32 }.clamp_to(observed);
            Ok(Some(TensorResult {
                range,
                channels: None,
                distribution: Some(DistributionStats { mean: mean as f32, std: std as f32 }),
            }))
        }
        Method::Mse => {
            let h = need_tails(&t.abs, name, method, "absolute histogram")?;
            let thr = mse_threshold(h).ok_or_else(|| too_thin(name, method))?;
            plain(Range { min: -thr, max: thr }.clamp_to(observed))
        }
        Method::Fp8Mse { format } => {
            let h = need(&t.abs, name, method, "absolute histogram")?;
            let thr = fp8_mse_threshold(h, format);
            plain(Range { min: -thr, max: thr }.clamp_to(observed))
        }
    }
}

/// Candidate thresholds [`fp8_mse_threshold`] prices at most (evenly spaced bin edges; every edge below this many).
const FP8_MSE_CANDIDATES: usize = 512;

/// Symmetric threshold `T` (a bin edge) minimising the expected squared error of `format` with scale `T / max`:
/// a value `x` inside `[-T, T]` contributes the rounding noise `(spacing(x / scale) scale)^2 / 12` of the format's
/// values around it (relative: a float8 pair rounds small values finely, so clipping costs more and rounding less
/// than in INT8), a value beyond it the clipping error `(|x| - T)^2` (values at bin centres). At most
/// [`FP8_MSE_CANDIDATES`] evenly spaced edges are priced, each over every bin.
pub fn fp8_mse_threshold(h: &Histogram, format: crate::Float8) -> f32 {
    let Some(s) = Suffix::of(h) else { return 0.0 };
    let n = s.n;
    let counts = h.counts();
    let fmax = f64::from(format.max());
    let stride = n.div_ceil(FP8_MSE_CANDIDATES).max(1);
    let mut best = (f64::INFINITY, n);
    let mut k = n;
    loop {
        let t = k as f64 * s.w;
        let scale = t / fmax;
        let rounding: f64 = counts[..k]
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(j, &c)| {
                let step = format.spacing((j as f64 + 0.5) * s.w / scale) * scale;
                c as f64 * step * step / 12.0
            })
            .sum();
        let err = s.clip_at(k, t).max(0.0) + rounding;
        if err < best.0 {
            best = (err, k);
        }
        if k <= stride {
            break;
        }
        k -= stride;
    }
    ((best.1 as f64 * s.w).min(f64::from(h.max_abs()))) as f32
}

/// Upper edge of the first bin where the CDF of `|x|` reaches `p` (fraction), capped at max|x|. `None` where that
/// bin is among the histogram's folded ones ([`Histogram::fold_to_tails`]: its tail was too thin for `p`).
pub fn abs_percentile(h: &Histogram, p: f64) -> Option<f32> {
    let (Some(w), total) = (h.width(), h.total()) else {
        return Some(0.0);
    };
    let target = p * total as f64;
    let fold = Folded::of(h);
    let mut cum = 0u64;
    for (i, &c) in h.counts().iter().enumerate() {
        cum += c + fold.mass_at(i);
        if fold.starts_at(i) && cum as f64 >= target {
            return None;
        }
        if c > 0 && cum as f64 >= target {
            return Some(((h.bin_of_index(i) + 1) as f64 * w).min(f64::from(h.max_abs())) as f32);
        }
    }
    Some(h.max_abs())
}

/// Cut `(1 - p) / 2` of the mass from each tail: lower edge of the bin where the CDF first exceeds the cut,
/// upper edge of the bin where it reaches `1 - cut` (both conservative to the bin). `None` where either bin is among
/// the histogram's folded ones ([`Histogram::fold_to_tails`]).
pub fn signed_percentile(h: &Histogram, p: f64) -> Option<Range> {
    let (Some(w), total) = (h.width(), h.total()) else {
        return Some(Range { min: 0.0, max: 0.0 });
    };
    let cut = (1.0 - p) / 2.0 * total as f64;
    let (mut lo, mut hi) = (None, None);
    let fold = Folded::of(h);
    let mut cum = 0u64;
    for (i, &c) in h.counts().iter().enumerate() {
        cum += c + fold.mass_at(i);
        if fold.starts_at(i) && (lo.is_none() && cum as f64 > cut || cum as f64 >= total as f64 - cut) {
            return None;
        }
        if c == 0 {
            continue;
        }
        if lo.is_none() && cum as f64 > cut {
            lo = Some(h.bin_of_index(i) as f64 * w);
        }
        if cum as f64 >= total as f64 - cut {
            hi = Some((h.bin_of_index(i) + 1) as f64 * w);
            break;
        }
    }
    let m = f64::from(h.max_abs());
    Some(Range { min: lo.unwrap_or(-m) as f32, max: hi.unwrap_or(m) as f32 })
}

/// A histogram's folded bins for a running count: their values ([`Histogram::folded`]), all counted at the first
/// of them, where a result read off them would be a guess (their values' bins are not known).
struct Folded {
    first: Option<usize>,
    mass: u64,
}

impl Folded {
    fn of(h: &Histogram) -> Self {
        let mass = h.total().saturating_sub(h.counts().iter().sum());
        Folded { first: h.folded().map(|(a, _)| a).filter(|_| mass > 0), mass }
    }

    fn mass_at(&self, i: usize) -> u64 {
        if self.first == Some(i) { self.mass } else { 0 }
    }

    fn starts_at(&self, i: usize) -> bool {
        self.first == Some(i)
    }
}

/// Mean and standard deviation of the histogram, each value at its bin centre (as ONNX Runtime).
pub fn histogram_mean_std(h: &Histogram) -> (f64, f64) {
    let (Some(w), total) = (h.width(), h.total()) else {
        return (0.0, 0.0);
    };
    if total == 0 {
        return (0.0, 0.0);
    }
    let n = total as f64;
    let centre = |i: usize| (h.bin_of_index(i) as f64 + 0.5) * w;
    let mean = h.counts().iter().enumerate().map(|(i, &c)| c as f64 * centre(i)).sum::<f64>() / n;
    let var = h.counts().iter().enumerate().map(|(i, &c)| c as f64 * (centre(i) - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// Suffix sums of an absolute histogram's bins up to its last non-empty one (`n` bins, and a zero at `n`): of the
/// counts, of count x centre, and of count x centre^2, summed from the top down; and `first`, the lowest threshold
/// (in bins) they price exactly: 1, or the folded bins' upper edge ([`Histogram::fold_to_tails`]).
struct Suffix {
    s0: Vec<f64>,
    s1: Vec<f64>,
    s2: Vec<f64>,
    w: f64,
    total: f64,
    n: usize,
    first: usize,
}

impl Suffix {
    /// `None` for a histogram with no value.
    fn of(h: &Histogram) -> Option<Self> {
        let w = h.width()?;
        let counts = h.counts();
        let n = counts.iter().rposition(|&c| c > 0)? + 1;
        let (mut s0, mut s1, mut s2) = (vec![0f64; n + 1], vec![0f64; n + 1], vec![0f64; n + 1]);
        for k in (0..n).rev() {
            let c = counts[k] as f64;
            let x = (k as f64 + 0.5) * w;
            s0[k] = s0[k + 1] + c;
            s1[k] = s1[k + 1] + c * x;
            s2[k] = s2[k + 1] + c * x * x;
        }
        let first = h.folded().map_or(1, |(_, b)| b.max(1));
        Some(Suffix { s0, s1, s2, w, total: h.total() as f64, n, first })
    }

    /// The clipping error at threshold `t` of the values in bins `k..`.
    fn clip_at(&self, k: usize, t: f64) -> f64 {
        self.s2[k] - 2.0 * t * self.s1[k] + t * t * self.s0[k]
    }

    /// The expected squared error of threshold `k w`: the clipping of the bins from `k` on, the rounding of the rest.
    fn err(&self, k: usize) -> f64 {
        let t = k as f64 * self.w;
        let step = t / 127.0;
        self.clip_at(k, t).max(0.0) + (self.total - self.s0[k]) * step * step / 12.0
    }

    /// What every threshold below bin `b` costs at least: the values from bin `b` on clipped to `(b - 1) w`.
    fn bound_below(&self, b: usize) -> f64 {
        self.clip_at(b, (b - 1) as f64 * self.w)
    }
}

/// Symmetric INT8 threshold `T` (a bin edge) minimising the expected squared error: values inside `[-T, T]`
/// contribute the rounding noise `(T / 127)^2 / 12`, values outside the clipping error `(|x| - T)^2` (at bin
/// centres). O(bins) with suffix sums.
///
/// Of a histogram that kept only its top ([`Histogram::fold_to_tails`], bins `..b` folded) only the thresholds at
/// `b` and above can be computed, each exactly as on the whole histogram (the same bins, summed in the same order).
/// Every threshold below clips at least the kept values to `(b - 1) w` or lower, an error of at least
/// `sum over kept bins of c (x - (b - 1) w)^2`: where the best of the computed ones is below that, it is the whole
/// histogram's threshold, bit for bit; otherwise `None` (its tail was too thin to tell).
pub fn mse_threshold(h: &Histogram) -> Option<f32> {
    let Some(s) = Suffix::of(h) else { return Some(0.0) };
    let (n, first) = (s.n, s.first);
    if first > n {
        return None;
    }
    let mut best = (f64::INFINITY, n);
    for k in first..=n {
        let err = s.err(k);
        if err < best.0 {
            best = (err, k);
        }
    }
    if first > 1 {
        // Less a margin for the rounding of the whole histogram's sums (their terms are at most those of every value
        // at the top bin's edge).
        let top = n as f64 * s.w;
        let slack = 1e-9 * (s.s2[first] + 2.0 * top * s.s1[first] + s.total * top * top * 4.0);
        if best.0 >= s.bound_below(first) - slack {
            return None;
        }
    }
    Some(((best.1 as f64 * s.w).min(f64::from(h.max_abs()))) as f32)
}

/// The highest bin `b` of the absolute histogram `h` such that every threshold below `b` costs at least `margin`
/// times mse's best error from `b` on, on the values so far: bins below it may be folded with [`mse_threshold`]
/// still proven from the rest. (The bound grows and the best error falls as `b` falls, so the bins that qualify are
/// all those up to it.) 0 where none does; the folded bins' upper edge where the histogram is already folded.
pub(crate) fn mse_fold_limit(h: &Histogram, margin: f64) -> usize {
    let unfolded = h.folded().map_or(0, |(_, b)| b);
    let Some(s) = Suffix::of(h) else { return unfolded };
    let mut best = f64::INFINITY;
    for b in (s.first..=s.n).rev() {
        best = best.min(s.err(b));
        if b > 1 && s.bound_below(b) >= margin * best {
            return b;
        }
    }
    unfolded
}

/// TensorRT's entropy calibration on a signed histogram: for each candidate half-width `i` (in bins) from
/// `ceil(nq / 2)` to the extent of the data, take the centred slice `[-i, i)`, fold the outliers into its edge
/// bins (reference `p`), merge the slice (without outliers) into `nq` groups, spread each group's mass evenly
/// over its bins where `p` is non-zero (`q`), smooth both with eps = 1e-4 and compute KL(p || q). Returns the
/// threshold `i * w` of the smallest divergence (the first on ties).
///
/// Cost: O(nq) per candidate with prefix sums and no allocation per candidate; the `p ln p` term of the
/// smoothed reference uses a 4-term series in the smoothing shift (exact loop when the shift exceeds 0.01).
/// A candidate's `nq` logarithms are taken in one tight loop after its groups are summed, so they overlap.
pub fn entropy_threshold(h: &Histogram, num_quantized_bins: usize) -> f32 {
    let Some(w) = h.width() else { return 0.0 };
    let counts = h.counts();
    let nq = num_quantized_bins.max(2);
    // extent: smallest m with every non-zero bin inside [-m, m)
    let extent = counts
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0)
        .map(|(i, _)| {
            let k = h.bin_of_index(i);
            if k >= 0 { k + 1 } else { -k }
        })
        .max()
        .unwrap_or(0) as usize;
    let first = nq.div_ceil(2);
    if extent <= first {
        return (first as f64 * w).min(f64::from(h.max_abs())) as f32;
    }
    let sums = KlSums::new(counts, h.per_side(), nq);
    let mut groups = KlGroups { mass: vec![0.0; nq], nonzero: vec![0; nq], term: vec![0.0; nq] };
    let mut best = (f64::INFINITY, extent);
    for i in first..=extent.min(sums.half) {
        if let Some(kl) = sums.divergence(i, &mut groups)
            && kl < best.0
        {
            best = (kl, i);
        }
    }
    ((best.1 as f64 * w).min(f64::from(h.max_abs()))) as f32
}

/// Prefix sums of a signed histogram's counts, over which [`entropy_threshold`] prices each candidate in O(nq).
struct KlSums<'a> {
    counts: &'a [u64],
    half: usize,
    nq: usize,
    total: f64,
    /// Counts, and non-zero bins.
    pc: Vec<f64>,
    pnz: Vec<usize>,
    /// Over non-zero bins: `c ln c`, `ln c`, `1 / c`, `1 / c^2` (the series of `(c - e) ln(c - e)`).
    pcl: Vec<f64>,
    pln: Vec<f64>,
    pinv: Vec<f64>,
    pinv2: Vec<f64>,
}

/// One candidate's groups: mass of the slice in each, its non-zero bins of `p`, and `q` there (then the group's term
/// of the cross sum, `(sum of p') ln q'`).
struct KlGroups {
    mass: Vec<f64>,
    nonzero: Vec<usize>,
    term: Vec<f64>,
}

impl<'a> KlSums<'a> {
    fn new(counts: &'a [u64], half: usize, nq: usize) -> Self {
        let len = counts.len();
        let (mut pc, mut pnz) = (vec![0f64; len + 1], vec![0usize; len + 1]);
        let (mut pcl, mut pln, mut pinv, mut pinv2) =
            (vec![0f64; len + 1], vec![0f64; len + 1], vec![0f64; len + 1], vec![0f64; len + 1]);
        for (i, &c) in counts.iter().enumerate() {
            pc[i + 1] = pc[i] + c as f64;
            pnz[i + 1] = pnz[i] + usize::from(c > 0);
            let c = c as f64;
            let (a, b, d, e) =
                if c > 0.0 { (c * c.ln(), c.ln(), 1.0 / c, 1.0 / (c * c)) } else { (0.0, 0.0, 0.0, 0.0) };
            pcl[i + 1] = pcl[i] + a;
            pln[i + 1] = pln[i] + b;
            pinv[i + 1] = pinv[i] + d;
            pinv2[i + 1] = pinv2[i] + e;
        }
        KlSums { counts, half, nq, total: pc[len], pc, pnz, pcl, pln, pinv, pinv2 }
    }

    /// KL(p || q) of the candidate slice `[-i, i)` (`i` in `ceil(nq / 2)..=half`), `None` where it is undefined.
    fn divergence(&self, i: usize, g: &mut KlGroups) -> Option<f64> {
        let (pc, pnz, nq) = (&self.pc, &self.pnz, self.nq);
        let (a, b) = (self.half - i, self.half + i); // slice [a, b) of the array
        let n = b - a;
        let (left, right) = (pc[a], self.total - pc[b]);
        let sliced_total = pc[b] - pc[a];
        // p at the edges includes the outliers (a non-zero p where the edge bin itself is empty)
        let (c_first, c_last) = (self.counts[a] as f64, self.counts[b - 1] as f64);
        let edge_lo = usize::from(c_first == 0.0 && left > 0.0);
        let edge_hi = usize::from(c_last == 0.0 && right > 0.0);
        let nnz_p = pnz[b] - pnz[a] + edge_lo + edge_hi;
        if nnz_p == 0 || sliced_total <= 0.0 {
            return None;
        }
        let e_p = KL_EPS * (n - nnz_p) as f64 / nnz_p as f64;
        // groups of m bins (the last takes the rest): mass, non-zero p, and q's non-zero count
        let m = n / nq;
        for j in 0..nq - 1 {
            let lo = a + j * m;
            g.mass[j] = pc[lo + m] - pc[lo];
            g.nonzero[j] = pnz[lo + m] - pnz[lo];
        }
        let last = a + (nq - 1) * m;
        (g.mass[nq - 1], g.nonzero[nq - 1]) = (pc[b] - pc[last], pnz[b] - pnz[last] + edge_hi);
        g.nonzero[0] += edge_lo;
        let nnz_q: usize = g.mass.iter().zip(&g.nonzero).map(|(&mass, &z)| if mass > 0.0 { z } else { 0 }).sum();
        if nnz_q == 0 {
            return None;
        }
        let e_q = KL_EPS * (n - nnz_q) as f64 / nnz_q as f64;
        let mut undefined = false;
        for ((x, &mass), &z) in g.term.iter_mut().zip(&g.mass).zip(&g.nonzero) {
            *x = if z == 0 || mass <= 0.0 { KL_EPS } else { mass / z as f64 - e_q };
            undefined |= *x <= 0.0;
        }
        if undefined {
            return None;
        }
        // each group's (sum of p' in it, the outliers in the edge groups) * ln q' (0 where p is zero throughout),
        // summed in order after
        g.mass[0] += left;
        g.mass[nq - 1] += right;
        for ((x, &s), &z) in g.term.iter_mut().zip(&g.mass).zip(&g.nonzero) {
            *x = if z == 0 { 0.0 } else { (s - e_p * z as f64) * x.ln() };
        }
        // (cross starts at +0 and never becomes -0, so adding a skipped group's +0 changes no bit)
        let cross = g.term.iter().fold(0f64, |acc, &t| acc + t);
        let self_term = self.p_ln_p(a, b, e_p, c_first + left, c_last + right);
        if !self_term.is_finite() {
            return None;
        }
        Some((self_term - cross) / self.total + (sliced_total / self.total).ln())
    }

    /// Sum of `p' ln p'` over the non-zero `p` of the slice `[a, b)`, whose edge bins hold `p_first` and `p_last`.
    fn p_ln_p(&self, a: usize, b: usize, e_p: f64, p_first: f64, p_last: f64) -> f64 {
        let f = |p: f64| {
            let v = p - e_p;
            if v > 0.0 { v * v.ln() } else { f64::NAN }
        };
        let mut self_term = 0f64;
        let (lo, hi) = (a + 1, b - 1);
        if e_p <= SERIES_MAX_EPS {
            // (c - e) ln(c - e) = c ln c - e ln c - e + e^2 / 2c + e^3 / 6c^2 + O(e^4 / c^3), c >= 1
            let nzc = (self.pnz[hi] - self.pnz[lo]) as f64;
            self_term = (self.pcl[hi] - self.pcl[lo]) - e_p * (self.pln[hi] - self.pln[lo]) - e_p * nzc
                + e_p * e_p / 2.0 * (self.pinv[hi] - self.pinv[lo])
                + e_p.powi(3) / 6.0 * (self.pinv2[hi] - self.pinv2[lo]);
        } else {
            for &c in &self.counts[lo..hi] {
                if c > 0 {
                    self_term += f(c as f64);
                }
            }
        }
        for p in [p_first, p_last] {
            if p > 0.0 {
                self_term += f(p);
            }
        }
        self_term
    }
}
