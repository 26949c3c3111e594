//! Mergeable streaming histograms on a power-of-two grid aligned on zero.
//!
//! A [`Histogram`] has a fixed number of bins per side of zero (`per_side`): a *signed* histogram counts `x` in
//! `2 * per_side` bins `[k w, (k + 1) w)` for `k` in `-per_side..per_side`; an *absolute* histogram counts `|x|`
//! in `per_side` bins `k` in `0..per_side`. The bin width `w = 2^e` is a pure function of the largest finite
//! `|x|` seen so far, `t`: the smallest power of two (not below [`MIN_WIDTH_LOG2`]) with `t < per_side * w`.
//!
//! When a batch raises `t` past the covered range, the width doubles (as many times as needed) and each pair of
//! bins `2j, 2j + 1` merges into bin `j`. Because `floor(floor(x / w) / 2) == floor(x / (2 w))` and every
//! bin index is computed exactly (`x * 2^-e` is exact in `f64`), the counts only depend on the multiset of
//! values seen, never on batch order or sharding: [`Histogram::merge`] is exact. The covered range
//! `per_side * w` always lies in `(t, 2 t]`, so at least `per_side / 2` bins span `[0, t]`.
//!
//! An all-zero first batch gets the minimum width `2^MIN_WIDTH_LOG2` (never 0); the width grows as soon as a
//! non-zero value arrives.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// log2 of the smallest bin width (used when every value seen is 0).
pub const MIN_WIDTH_LOG2: i32 = -120;
/// Batches larger than this are binned in parallel chunks.
const PAR_CHUNK: usize = 1 << 18;

/// Streaming histogram of `x` (signed) or `|x|` (absolute); see the module docs for the grid.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Histogram {
    signed: bool,
    per_side: usize,
    /// log2 of the bin width; `None` until a finite value was seen.
    width_log2: Option<i32>,
    /// `2 * per_side` (signed) or `per_side` (absolute) counts once a value was seen, else empty.
    counts: Vec<u64>,
    total: u64,
    max_abs: f32,
    /// Bins `a..b` (indices into `counts`) whose values are not counted bin by bin: their number is `total` minus
    /// the counts, and their counts stay 0. Set by [`Histogram::fold_to_tails`] where only the tails matter (a
    /// percentile); `None`: every bin counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    folded: Option<(usize, usize)>,
}

/// [`Histogram::fold_to_tails`] folds only where the bins left counted at the ends hold less than this fraction
/// (one over it) of the values.
const FOLD_WHEN_RESOLVED_UNDER: u64 = 8;
/// [`Histogram::fold_to_tails`] folds groups of `2^m` bins, `m` at most this (the ends survive `m` doublings of the
/// width: a wide bin holding any folded narrow one is folded whole)...
const FOLD_ALIGN_LOG2: u32 = 4;
/// ...and at least this: a tail kept in groups any finer is soon folded away as the width doubles (GELU's negative
/// side, a few bins under a growing positive side), and its percentile read from a second pass.
const FOLD_ALIGN_MIN_LOG2: u32 = 2;

/// Smallest `e >= MIN_WIDTH_LOG2` with `t < per_side * 2^e`.
pub fn width_log2_for(t: f32, per_side: usize) -> i32 {
    let t = f64::from(t.abs());
    let n = per_side.max(1) as f64;
    let covers = |e: i32| n * 2f64.powi(e) > t;
    let mut e = if t > 0.0 { ((t / n).log2().floor() as i32).max(MIN_WIDTH_LOG2) } else { MIN_WIDTH_LOG2 };
    while e > MIN_WIDTH_LOG2 && covers(e - 1) {
        e -= 1;
    }
    while !covers(e) {
        e += 1;
    }
    e
}

impl Histogram {
    /// Empty histogram with `per_side` bins per side of zero (must be >= 1).
    pub fn new(signed: bool, per_side: usize) -> Self {
        Histogram {
            signed,
            per_side: per_side.max(1),
            width_log2: None,
            counts: Vec::new(),
            total: 0,
            max_abs: 0.0,
            folded: None,
        }
    }

    /// Whether this counts `x` (true) or `|x|` (false).
    pub fn is_signed(&self) -> bool {
        self.signed
    }
    /// Bins per side of zero.
    pub fn per_side(&self) -> usize {
        self.per_side
    }
    /// Bin width, `None` before the first finite value.
    pub fn width(&self) -> Option<f64> {
        self.width_log2.map(|e| 2f64.powi(e))
    }
    /// log2 of the bin width, `None` before the first finite value.
    pub fn width_log2(&self) -> Option<i32> {
        self.width_log2
    }
    /// Counts; index `i` is bin `k = i - per_side` (signed) or `k = i` (absolute), covering `[k w, (k + 1) w)`.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }
    /// Number of finite values counted.
    pub fn total(&self) -> u64 {
        self.total
    }
    /// Largest finite `|x|` counted.
    pub fn max_abs(&self) -> f32 {
        self.max_abs
    }
    /// Bin number `k` of the bin at index `i` (see [`Histogram::counts`]).
    pub fn bin_of_index(&self, i: usize) -> i64 {
        if self.signed { i as i64 - self.per_side as i64 } else { i as i64 }
    }

    /// The bins `a..b` counted only together ([`Histogram::fold_to_tails`]), if any: their values number
    /// [`Histogram::total`] minus the sum of the counts.
    pub fn folded(&self) -> Option<(usize, usize)> {
        self.folded
    }

    /// Whether the internal layout is consistent (counts length, total, width, folded bins); checked on load.
    pub fn is_consistent(&self) -> bool {
        let sum: u64 = self.counts.iter().sum();
        let max_ok = self.max_abs.is_finite() && self.max_abs >= 0.0;
        let sum_ok = match self.folded {
            None => sum == self.total,
            Some((a, b)) => {
                a < b && b <= self.counts.len() && self.counts[a..b].iter().all(|&c| c == 0) && sum <= self.total
            }
        };
        match self.width_log2 {
            None => self.counts.is_empty() && self.total == 0 && self.folded.is_none(),
            Some(e) => {
                self.counts.len() == self.len()
                    && sum_ok
                    && max_ok
                    && (MIN_WIDTH_LOG2..=200).contains(&e)
                    && e >= width_log2_for(self.max_abs, self.per_side)
            }
        }
    }

    fn len(&self) -> usize {
        if self.signed { 2 * self.per_side } else { self.per_side }
    }

    /// A histogram of the same kind, size and grid (and so the same `max_abs`) with nothing counted: partial
    /// histograms started from it merge back without coarsening while their values stay within `max_abs`.
    pub(crate) fn empty_like(&self) -> Histogram {
        Histogram {
            signed: self.signed,
            per_side: self.per_side,
            width_log2: self.width_log2,
            counts: vec![0; self.counts.len()],
            total: 0,
            max_abs: self.max_abs,
            folded: self.folded,
        }
    }

    /// Folds the middle bins (an absolute histogram's lowest ones) into one count wherever at least `keep` values
    /// stay counted bin by bin at each end (of `|x|`: at the top), so later values there are not binned: a
    /// percentile reads only the tails. The folded bins are whole groups of `2^m` bins counted from zero, `m` the
    /// largest from `FOLD_ALIGN_LOG2` down to `FOLD_ALIGN_MIN_LOG2` that leaves under an eighth of the values binned,
    /// so `m` doublings of the width keep the ends apart from them; no fold without one. Bins already folded stay so.
    /// Nothing at or above `below` is folded. Returns whether any bin was folded.
    pub fn fold_to_tails(&mut self, keep: u64, below: usize) -> bool {
        let c = &self.counts;
        if c.is_empty() || keep == 0 {
            return false;
        }
        // The first bin whose prefix holds `keep` values, and the last whose suffix does.
        let mut acc = 0u64;
        let lower = c.iter().position(|&n| {
            acc += n;
            acc >= keep
        });
        acc = 0;
        let upper = c.iter().rposition(|&n| {
            acc += n;
            acc >= keep
        });
        let (Some(lower), Some(upper)) = (lower, upper) else {
            return false;
        };
        let (a, b) = if self.signed { (lower + 1, upper.min(below)) } else { (0, upper.min(below)) };
        // An edge inside a group of `2^m` bins would, on a coarser grid, fold the narrow bins kept next to it (a tail
        // one bin wide at a dense end, as GELU's minimum, lost whole).
        let offset = if self.signed { self.per_side as i64 } else { 0 };
        let align = |i: usize, group: i64, up: bool| {
            let k = (i as i64 - offset).div_euclid(group);
            let k = k + i64::from(up && (i as i64 - offset).rem_euclid(group) != 0);
            (k * group + offset).max(0) as usize
        };
        let fold = (FOLD_ALIGN_MIN_LOG2..=FOLD_ALIGN_LOG2).rev().find_map(|m| {
            let g = 1i64 << m;
            let (a, b) = (if self.signed { align(a, g, true) } else { a }, align(b, g, false));
            let (a, b) = match self.folded {
                Some((fa, fb)) => (a.min(fa), b.max(fb)),
                None => (a, b),
            };
            // Folding pays where most values fall in the middle: not where an end's bins hold many (a signed
            // histogram of masked attention, whose lowest bin holds its zeros).
            let resolved: u64 = c[..a.min(c.len())].iter().chain(&c[b.min(c.len())..]).sum();
            (a < b && resolved <= self.total / FOLD_WHEN_RESOLVED_UNDER).then_some((a, b))
        });
        let Some((a, b)) = fold.filter(|&f| Some(f) != self.folded) else {
            return false;
        };
        self.fold(a, b);
        true
    }

    /// Folds bins `a..b` (clamped to the counts), leaving their values in `total` only.
    fn fold(&mut self, a: usize, b: usize) {
        let b = b.min(self.counts.len());
        if a < b {
            self.counts[a..b].fill(0);
            self.folded = Some((a, b));
        }
    }

    /// Coarsen to width `2^e` (no-op if already at least that coarse).
    fn coarsen_to(&mut self, e: i32) {
        let Some(cur) = self.width_log2 else {
            self.width_log2 = Some(e);
            self.counts = vec![0; self.len()];
            return;
        };
        let offset = if self.signed { self.per_side as i64 } else { 0 };
        let half = |i: usize| ((i as i64 - offset).div_euclid(2) + offset).max(0) as usize;
        for _ in cur..e {
            let mut next = vec![0u64; self.counts.len()];
            for (i, &c) in self.counts.iter().enumerate() {
                if c == 0 {
                    continue;
                }
                if let Some(slot) = next.get_mut(half(i)) {
                    *slot += c;
                }
            }
            self.counts = next;
            // A wide bin holding any folded narrow one is folded whole.
            if let Some((a, b)) = self.folded {
                self.fold(half(a), half(b - 1) + 1);
            }
        }
        self.width_log2 = Some(cur.max(e));
    }

    /// Count the finite values of `data`; `batch_max_abs` must be the largest finite `|x|` in `data` and
    /// `finite` the number of finite values (the caller computes both in its own pass).
    pub fn observe(&mut self, data: &[f32], batch_max_abs: f32, finite: u64) {
        if finite == 0 {
            return;
        }
        let t = self.max_abs.max(batch_max_abs);
        self.coarsen_to(width_log2_for(t, self.per_side));
        // Every chunk is binned on the grid `self` now has (no value reaches past `t`), so the partial counts add
        // without coarsening.
        let template = Histogram { counts: vec![0; self.counts.len()], total: 0, max_abs: 0.0, ..self.clone() };
        let fill = |mut f: Filler, chunk: &[f32]| {
            f.add_on_grid(chunk, t);
            f
        };
        let partial = if data.len() <= PAR_CHUNK {
            fill(Filler::new(template).windowed_as(self), data).finish()
        } else {
            data.par_chunks(PAR_CHUNK)
                .fold(|| Filler::new(template.clone()).windowed_as(self), fill)
                .map(Filler::finish)
                .reduce(
                    || template.clone(),
                    |mut a, b| {
                        add_into(&mut a.counts, &b.counts);
                        a
                    },
                )
        };
        add_into(&mut self.counts, &partial.counts);
        self.max_abs = t;
        self.total += finite;
    }

    /// Add `other`'s counts; exact (see module docs). Both must have the same kind and `per_side`
    /// (checked by the caller, which knows the tensor name; returns false if they differ).
    pub fn merge(&mut self, other: &Histogram) -> bool {
        if self.signed != other.signed || self.per_side != other.per_side {
            return false;
        }
        let Some(oe) = other.width_log2 else {
            return true;
        };
        let e = self.width_log2.unwrap_or(oe).max(oe);
        self.coarsen_to(e);
        let their_fold = if oe == e {
            add_into(&mut self.counts, &other.counts);
            other.folded
        } else {
            let mut theirs = other.clone();
            theirs.coarsen_to(e);
            add_into(&mut self.counts, &theirs.counts);
            theirs.folded
        };
        // Folded in either: folded in the sum (their union's hull, so one range), and cleared again of the other's
        // counts there.
        let hull = match (self.folded, their_fold) {
            (Some((a, b)), Some((c, d))) => Some((a.min(c), b.max(d))),
            (ours, theirs) => ours.or(theirs),
        };
        if let Some((a, b)) = hull {
            self.fold(a, b);
        }
        self.total += other.total;
        self.max_abs = self.max_abs.max(other.max_abs);
        true
    }
}

fn add_into(a: &mut [u64], b: &[u64]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += *y;
    }
}

/// Sub-histogram lanes of a [`Filler`]: consecutive values go to different lanes, which breaks the
/// store-to-load chains of values that repeat a bin (common in activations: zeros after ReLU-like ops, saturated
/// softmax).
const LANES: usize = 4;
/// Indices checked at once for a run of one bin.
const RUN: usize = 16;
/// Values binned between two flushes of the `u32` lanes into the `u64` counts, so a lane cannot overflow.
const FLUSH_EVERY: u64 = 1 << 31;

/// Fills one [`Histogram`] from one thread, block after block: bin indices are computed for a block at a time
/// (a loop the compiler vectorises) and scattered into `LANES` interleaved `u32` sub-histograms (a run of `RUN`
/// indices of one bin, such as masked attention's zeros, is added at once), which are
/// flushed into the histogram's counts before its grid changes, every [`FLUSH_EVERY`] values and at the end. Where
/// the histogram so far holds most of its values in [`WINDOW`] neighbouring bins (masked attention's zeros and small
/// probabilities, GELU outputs near zero), those bins are counted in registers instead ([`count_window`]).
/// Each lane has one extra slot at its end that collects non-finite and out-of-grid values and is discarded.
pub(crate) struct Filler {
    hist: Histogram,
    /// The lanes, taken from this thread's [`LANE_POOL`] and given back all zero.
    sub: Vec<u32>,
    pending: u64,
    idx: Vec<u32>,
    /// Bins the lanes may hold counts in since the last flush (`lo > hi`: none), so a flush reads and clears only
    /// those: a histogram of 16,002 bins whose values of one batch fill a few hundred is not swept whole per batch.
    lo: usize,
    hi: usize,
    /// First of the [`WINDOW`] bins counted in registers ([`count_window`]): where the histogram so far holds most of
    /// its values (at least [`WINDOW_SHARE`]), on a CPU with AVX-512F; `None` counts every value into the lanes.
    window: Option<usize>,
    /// [`count_window`]'s indices outside the window.
    outside: Vec<u32>,
    /// A block's values outside the histogram's folded bins ([`keep_outside`]), the only ones binned.
    kept: Vec<f32>,
    /// The last block's grid and its width.
    grid: Option<(i32, Grid)>,
}

thread_local! {
    /// Zeroed lane buffers of finished [`Filler`]s, for the next ones on this thread: one batch's tensor is often
    /// smaller than its lanes (16,002 bins x 4 lanes is 256 KB), which would otherwise be allocated, zeroed and
    /// freed per tensor per batch.
    static LANE_POOL: std::cell::RefCell<Vec<Vec<u32>>> = const { std::cell::RefCell::new(Vec::new()) };
}
/// Buffers kept per thread in [`LANE_POOL`] (a calibration pass fills at most two histograms per tensor at once).
const POOL_KEEP: usize = 4;

impl Filler {
    /// Starts from `hist` (its counts are kept and added to).
    pub(crate) fn new(hist: Histogram) -> Self {
        let window = window_of(&hist);
        Filler {
            hist,
            sub: Vec::new(),
            pending: 0,
            idx: Vec::new(),
            lo: 1,
            hi: 0,
            window,
            outside: Vec::new(),
            kept: Vec::new(),
            grid: None,
        }
    }

    /// Counts in registers where `like` (of the same grid, such as the histogram a partial one will be merged into)
    /// holds most of its values.
    pub(crate) fn windowed_as(mut self, like: &Histogram) -> Self {
        if like.width_log2 == self.hist.width_log2 && like.counts.len() == self.hist.counts.len() {
            self.window = window_of(like);
        }
        self
    }

    /// Counts the finite values of `block`, whose largest finite `|x|` is `block_max_abs` and which has `finite`
    /// finite values; coarsens the grid first if the block reaches past it.
    pub(crate) fn add(&mut self, block: &[f32], block_max_abs: f32, finite: u64) {
        if finite == 0 {
            return;
        }
        let t = self.hist.max_abs.max(block_max_abs);
        // The grid covers the largest value so far; only a larger one can need a coarser grid.
        if self.hist.width_log2.is_none() || t > self.hist.max_abs {
            let e = width_log2_for(t, self.hist.per_side);
            if self.hist.width_log2.is_none_or(|w| w < e) {
                self.flush();
                self.hist.coarsen_to(e);
                self.window = window_of(&self.hist);
            }
        }
        self.hist.max_abs = t;
        self.hist.total += finite;
        self.add_on_grid(block, block_max_abs);
    }

    /// Bins `block`, whose finite values lie within `+-max_abs`, on the current grid without touching the
    /// histogram's `max_abs` or `total` (the caller accounts for them).
    fn add_on_grid(&mut self, block: &[f32], max_abs: f32) {
        let Some(e) = self.hist.width_log2 else {
            return;
        };
        let len = self.hist.counts.len();
        if self.sub.len() != LANES * (len + 1) {
            self.give_back();
            self.sub = LANE_POOL
                .with_borrow_mut(|pool| {
                    pool.iter().position(|b| b.len() == LANES * (len + 1)).map(|i| pool.swap_remove(i))
                })
                .unwrap_or_else(|| vec![0; LANES * (len + 1)]);
        }
        // The grid of the last block, while the width stays (Grid::new asks the CPU and computes 2^-e).
        let grid = match self.grid.take() {
            Some((w, g)) if w == e => g,
            _ => Grid::new(e, if self.hist.signed { self.hist.per_side } else { 0 }, self.hist.signed, len),
        };
        self.add_with(&grid, block, max_abs);
        self.grid = Some((e, grid));
    }

    /// [`Filler::add_on_grid`] on `grid`.
    fn add_with(&mut self, grid: &Grid, block: &[f32], max_abs: f32) {
        if let Some((a, b)) = self.hist.folded {
            // Only the values outside the folded bins are binned; the others are in `total` already.
            let mut kept = std::mem::take(&mut self.kept);
            kept.clear();
            grid.keep_outside(block, (a, b), &mut kept);
            self.bin(grid, &kept, max_abs);
            self.kept = kept;
        } else {
            self.bin(grid, block, max_abs);
        }
    }

    /// [`Filler::add_on_grid`]'s binning of `block` (finite values within `+-max_abs`) on `grid`.
    fn bin(&mut self, grid: &Grid, block: &[f32], max_abs: f32) {
        if block.is_empty() {
            return;
        }
        let len = self.hist.counts.len();
        // Bins are monotonic in the value, so `+-max_abs` (or `0..max_abs`) bound the bins this block touches; the
        // few values outside folded bins, a tail's, bound them by their own indices.
        let mut ends = [0u32; 2];
        grid.indices(&[if self.hist.signed { -max_abs } else { 0.0 }, max_abs], &mut ends);
        let folded = self.hist.folded.is_some();
        for piece in block.chunks(BLOCK) {
            if self.pending + piece.len() as u64 > FLUSH_EVERY {
                self.flush();
            }
            self.pending += piece.len() as u64;
            self.idx.resize(piece.len(), 0);
            grid.indices(piece, &mut self.idx);
            if folded {
                let seen = self.idx.iter().filter(|&&i| (i as usize) < len);
                ends = seen.fold([u32::MAX, 0], |[lo, hi], &i| [lo.min(i), hi.max(i)]);
            }
            self.lo = self.lo.min(ends[0].min(len as u32 - 1) as usize);
            self.hi = self.hi.max(ends[1].min(len as u32 - 1) as usize);
            let stride = len + 1;
            // `sub` holds exactly LANES lanes of `stride` slots (sized above), which `scatter` relies on.
            let mut lanes = self.sub.chunks_exact_mut(stride);
            if lanes.len() != LANES {
                return;
            }
            let mut l: [&mut [u32]; LANES] = std::array::from_fn(|_| lanes.next().unwrap_or_default());
            #[cfg(target_arch = "x86_64")]
            if let Some(first) = self.window.filter(|_| grid.avx512) {
                // SAFETY: the CPU supports AVX-512F and POPCNT (`grid.avx512`); `window_of` keeps the window inside
                // the bins, and every index is at most a lane's discard slot.
                unsafe { count_window(&mut l, &self.idx, first, &mut self.outside) };
                continue;
            }
            let mut runs = self.idx.chunks_exact(RUN);
            for r in &mut runs {
                // A run of one bin (zeros after masking, saturated values) is counted at once.
                let first = r[0];
                if r.iter().fold(true, |same, &i| same & (i == first)) {
                    if let Some(c) = l[0].get_mut(first as usize) {
                        *c += RUN as u32;
                    }
                    continue;
                }
                r.chunks_exact(LANES).for_each(|q| scatter(&mut l, q));
            }
            let mut quads = runs.remainder().chunks_exact(LANES);
            quads.by_ref().for_each(|q| scatter(&mut l, q));
            let [l0, ..] = l;
            for &i in quads.remainder() {
                if let Some(c) = l0.get_mut(i as usize) {
                    *c += 1;
                }
            }
        }
    }

    /// Adds the lanes into the counts and clears them (only the bins touched since the last flush, and the
    /// discard slots).
    fn flush(&mut self) {
        if self.pending == 0 {
            return;
        }
        let len = self.hist.counts.len();
        // The touched bins, less the folded ones (no value is binned there): one or two runs.
        let (a, b) = self.hist.folded.unwrap_or((len, len));
        let runs = [(self.lo, (self.hi + 1).min(a)), (self.lo.max(b), self.hi + 1)];
        for lane in self.sub.chunks_exact_mut(len + 1) {
            for &(from, to) in runs.iter().filter(|r| r.0 < r.1) {
                let (counts, lane) = (&mut self.hist.counts[from..to], &mut lane[from..to]);
                for (c, s) in counts.iter_mut().zip(lane.iter()) {
                    *c += u64::from(*s);
                }
                lane.fill(0);
            }
            lane[len] = 0;
        }
        (self.lo, self.hi, self.pending) = (1, 0, 0);
    }

    /// Flushes and returns the lanes, all zero, to this thread's pool (once: the lanes are gone after).
    fn give_back(&mut self) {
        self.flush();
        let sub = std::mem::take(&mut self.sub);
        if !sub.is_empty() {
            LANE_POOL.with_borrow_mut(|pool| {
                if pool.len() < POOL_KEEP {
                    pool.push(sub);
                }
            });
        }
    }

    /// The histogram with everything added.
    pub(crate) fn finish(mut self) -> Histogram {
        self.give_back();
        std::mem::replace(&mut self.hist, Histogram::new(false, 1))
    }
}

impl Drop for Filler {
    /// A filler dropped unfinished (a panic in a parallel fold) still hands its lanes back, cleared.
    fn drop(&mut self) {
        self.give_back();
    }
}

/// Bins counted in registers by [`count_window`]: four vectors of 16 `u32`, each holding four byte counters.
const WINDOW: usize = 16;
/// The share of a histogram's values its densest [`WINDOW`] bins must hold for a [`Filler`] to count them in
/// registers: a block with most of its values outside the window costs more than in the lanes alone.
const WINDOW_SHARE: f64 = 0.6;
// [`count_window`]'s byte counters gain at most 1 per 16 indices: a block of indices cannot overflow them.
const _: () = assert!(BLOCK / 16 <= 255);

/// The first bin of the fullest [`WINDOW`] bins that hold `h`'s fullest bin, if they hold at least [`WINDOW_SHARE`]
/// of its values. (One pass for the fullest bin, then [`WINDOW`] windows: a tensor of a few hundred thousand values
/// finds its window in a fraction of a per cent of the time it takes to count them.)
fn window_of(h: &Histogram) -> Option<usize> {
    let c = &h.counts;
    // Folded bins: the few values binned are a tail's, spread out.
    if c.len() < WINDOW || h.total == 0 || h.folded.is_some() || !registers_count() {
        return None;
    }
    let fullest = c.iter().enumerate().fold((0, 0), |best, (i, &n)| if n > best.1 { (i, n) } else { best }).0;
    let (lo, hi) = (fullest.saturating_sub(WINDOW - 1), fullest.min(c.len() - WINDOW));
    let mut held: u64 = c[lo..lo + WINDOW].iter().sum();
    let mut best = (held, lo);
    for first in lo + 1..=hi {
        held = held + c[first + WINDOW - 1] - c[first - 1];
        if held > best.0 {
            best = (held, first);
        }
    }
    (best.0 as f64 >= WINDOW_SHARE * h.total as f64).then_some(best.1)
}

/// The CPU has AVX-512F and POPCNT, which [`count_window`] and the 16-wide bin indices need (every CPU with AVX-512F
/// has POPCNT; checked all the same). Elsewhere no window is chosen.
fn registers_count() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("popcnt");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Counts `idx` into the lanes `l` like [`Filler::add_on_grid`]'s lane scatter, but the indices inside
/// `first..first + WINDOW` in registers: a one-hot byte `1 << 8 (i - first)` spread over four `u32` vectors, added
/// 16 indices at a time, the bytes summed into lane 0 at the end (at most [`BLOCK`] indices, so no byte overflows).
/// The indices outside the window are packed into `outside` (a scratch buffer) and then go into the lanes.
///
/// # Safety
/// The CPU must support AVX-512F and POPCNT; `first + WINDOW` must be at most the lanes' length, and every index at
/// most a lane's discard slot.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,popcnt")]
unsafe fn count_window(l: &mut [&mut [u32]; LANES], idx: &[u32], first: usize, outside: &mut Vec<u32>) {
    use std::arch::x86_64::*;
    let (base, one, width) = (_mm512_set1_epi32(first as i32), _mm512_set1_epi32(1), _mm512_set1_epi32(WINDOW as i32));
    let quarter = |k: i32| _mm512_set1_epi32(32 * k);
    let mut acc = [_mm512_setzero_si512(); 4];
    let flush = |acc: &[__m512i; 4], l0: &mut [u32]| {
        for (k, a) in acc.iter().enumerate() {
            for b in 0..4 {
                let bytes = _mm512_and_si512(_mm512_srlv_epi32(*a, _mm512_set1_epi32(8 * b)), _mm512_set1_epi32(0xff));
                // SAFETY: `first + WINDOW` is at most the lane's length (the caller's contract).
                unsafe { *l0.get_unchecked_mut(first + 4 * k + b as usize) += _mm512_reduce_add_epi32(bytes) as u32 };
            }
        }
    };
    outside.resize(idx.len() + 16, 0);
    let mut n = 0;
    let chunks = idx.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        // SAFETY: `c` holds 16 `u32`, 64 bytes, read unaligned.
        let v = unsafe { _mm512_loadu_si512(c.as_ptr().cast()) };
        // A run of one bin (zeros after masking, saturated values) is counted at once.
        if _mm512_cmpeq_epi32_mask(v, _mm512_broadcastd_epi32(_mm512_castsi512_si128(v))) == u16::MAX {
            // SAFETY: as below.
            unsafe { *l[0].get_unchecked_mut(c[0] as usize) += 16 };
            continue;
        }
        let d = _mm512_sub_epi32(v, base);
        // Unsigned: an index below the window wraps past it.
        let inside = _mm512_cmplt_epu32_mask(d, width);
        let shift = _mm512_slli_epi32::<3>(d);
        for (k, a) in acc.iter_mut().enumerate() {
            // The byte of `d` in the k-th vector (a shift outside 0..32 gives 0), for indices inside the window.
            *a = _mm512_add_epi32(*a, _mm512_maskz_sllv_epi32(inside, one, _mm512_sub_epi32(shift, quarter(k as i32))));
        }
        // The others, packed at the end of `outside` (room for 16 more is kept: `outside` holds `idx.len() + 16`).
        // SAFETY: `n + 16 <= outside.len()`, as `n` is at most the indices seen before this vector.
        unsafe {
            _mm512_storeu_si512(outside.as_mut_ptr().add(n).cast(), _mm512_maskz_compress_epi32(!inside, v));
        }
        n += (!inside).count_ones() as usize;
    }
    for q in outside[..n].chunks_exact(LANES) {
        scatter(l, q);
    }
    for &i in outside[..n].chunks_exact(LANES).remainder() {
        // SAFETY: every index is at most the lane's discard slot (the caller's contract).
        unsafe { *l[0].get_unchecked_mut(i as usize) += 1 };
    }
    flush(&acc, l[0]);
    for &i in rest {
        // SAFETY: as above.
        unsafe { *l[0].get_unchecked_mut(i as usize) += 1 };
    }
}

/// One value of each of `q`'s four indices into its own lane. Every index is at most the lane's discard slot, so none
/// of these can miss.
#[inline(always)]
fn scatter(l: &mut [&mut [u32]; LANES], q: &[u32]) {
    for (lane, &i) in l.iter_mut().zip(q) {
        debug_assert!((i as usize) < lane.len());
        // SAFETY: `Grid::indices` gives at most `len`, the discard slot, and each lane has `len + 1` slots (checked
        // where the lanes are cut from `sub`).
        unsafe { *lane.get_unchecked_mut(i as usize) += 1 };
    }
}

/// [`Grid::keep_outside`] with AVX-512F: per 16 values two compares, and the values outside packed into `out` where there
/// are any.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn keep_outside_avx512(data: &[f32], (lo, hi): (f32, f32), signed: bool, out: &mut Vec<f32>) {
    use std::arch::x86_64::*;
    let (lo_v, hi_v) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
    let chunks = data.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        // SAFETY: `c` holds 16 values, read unaligned.
        let x = unsafe { _mm512_loadu_ps(c.as_ptr()) };
        let v = if signed { x } else { _mm512_abs_ps(x) };
        // Ordered compares: NaN is in neither, so outside.
        let inside = _mm512_mask_cmp_ps_mask::<_CMP_LT_OQ>(_mm512_cmp_ps_mask::<_CMP_GE_OQ>(v, lo_v), v, hi_v);
        if inside != u16::MAX {
            out.reserve(16);
            let n = out.len();
            // Packed in a register and stored whole (a compress straight to memory is slow on some CPUs); only the
            // packed values are kept.
            // SAFETY: `out` has room for 16 more values (reserved above), and its length then covers exactly the
            // values written and packed first.
            unsafe {
                _mm512_storeu_ps(out.as_mut_ptr().add(n), _mm512_maskz_compress_ps(!inside, x));
                out.set_len(n + (!inside).count_ones() as usize);
            }
        }
    }
    keep_outside_lanes(rest, (lo, hi), signed, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn keep_outside_avx2(data: &[f32], band: (f32, f32), signed: bool, out: &mut Vec<f32>) {
    keep_outside_lanes(data, band, signed, out)
}

#[inline(always)]
fn keep_outside_lanes(data: &[f32], (lo, hi): (f32, f32), signed: bool, out: &mut Vec<f32>) {
    let outside = |x: f32| {
        let v = if signed { x } else { x.abs() };
        !(v >= lo && v < hi)
    };
    let chunks = data.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        if c.iter().fold(false, |any, &x| any | outside(x)) {
            out.extend(c.iter().copied().filter(|&x| outside(x)));
        }
    }
    out.extend(rest.iter().copied().filter(|&x| outside(x)));
}

/// Values per block of index computation: the indices of a block stay in L1 for the scatter.
const BLOCK: usize = 2048;

/// The bin-index function of one grid.
struct Grid {
    inv: f32,
    inv_w: f64,
    /// `1 / w` is exact in `f32` (widths inside `2^-126..2^127`); otherwise indices are computed in `f64`.
    f32_exact: bool,
    offset: i64,
    signed: bool,
    len: usize,
    /// The CPU has AVX2 (and so SSE4.1's vector floor): the `f32` indices take the vectorised path.
    avx2: bool,
    /// The CPU has AVX-512F (and POPCNT): that path with 16 values per instruction, and `count_window`.
    avx512: bool,
}

impl Grid {
    fn new(width_log2: i32, offset: usize, signed: bool, len: usize) -> Self {
        let inv_w = 2f64.powi(-width_log2);
        let inv = inv_w as f32;
        #[cfg(target_arch = "x86_64")]
        let avx2 = std::arch::is_x86_feature_detected!("avx2");
        #[cfg(not(target_arch = "x86_64"))]
        let avx2 = false;
        let avx512 = registers_count();
        Grid {
            inv,
            inv_w,
            f32_exact: inv.is_normal() && f64::from(inv) == inv_w,
            offset: offset as i64,
            signed,
            len,
            avx2,
            avx512,
        }
    }

    /// The lower edge of the bin at index `i` (`(i - offset) w`; exact in `f32`, or infinite past its range): a value
    /// is in bins `a..b` exactly when it lies in `edge(a)..edge(b)`.
    fn edge(&self, i: usize) -> f32 {
        ((i as i64 - self.offset) as f64 / self.inv_w) as f32
    }

    /// Appends to `out` the values of `data` outside bins `a..b` (NaN is outside), 16 at a time: a run of 16 inside
    /// (the usual case where the middle bins are folded) costs a few vector instructions.
    fn keep_outside(&self, data: &[f32], (a, b): (usize, usize), out: &mut Vec<f32>) {
        let band = (self.edge(a), self.edge(b));
        #[cfg(target_arch = "x86_64")]
        if self.avx512 {
            // SAFETY: the CPU supports AVX-512F, checked in `Grid::new`.
            return unsafe { keep_outside_avx512(data, band, self.signed, out) };
        }
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: the CPU supports AVX2, checked in `Grid::new`.
            return unsafe { keep_outside_avx2(data, band, self.signed, out) };
        }
        keep_outside_lanes(data, band, self.signed, out)
    }

    /// `out[j]` = index of `data[j]`'s bin, or `len` (the discard slot) for a non-finite or out-of-grid value.
    /// The bin is `floor(x / w)`, computed by multiplying with the exact power of two `1 / w` (exact while the
    /// product is normal; a negative value whose product underflows to -0 still lands in bin -1).
    fn indices(&self, data: &[f32], out: &mut [u32]) {
        let len = self.len as u32;
        let (inv, off, signed) = (self.inv, self.offset as i32, self.signed);
        if self.f32_exact {
            #[cfg(target_arch = "x86_64")]
            if self.avx512 {
                // SAFETY: the CPU supports AVX-512F, checked at run time in `Grid::new`.
                unsafe { indices_avx512(inv, off, signed, len, data, out) };
                return;
            }
            if self.avx2 {
                // SAFETY: the CPU supports AVX2, checked at run time in `Grid::new`.
                unsafe { indices_avx2(inv, off, signed, len, data, out) };
                return;
            }
            for (o, &x) in out.iter_mut().zip(data) {
                let v = if signed { x } else { x.abs() };
                let y = v * inv;
                // floor without a libm call (baseline x86-64 has no vector floor)
                let mut k = y as i32;
                k = k.wrapping_sub(i32::from(((k as f32) > y) | ((y == 0.0) & (v < 0.0))));
                let i = k.wrapping_add(off) as u32;
                *o = if x.is_finite() & (i < len) { i } else { len };
            }
        } else {
            let (inv_w, offset) = (self.inv_w, self.offset);
            for (o, &x) in out.iter_mut().zip(data) {
                let v = if signed { f64::from(x) } else { f64::from(x).abs() };
                let y = v * inv_w;
                let mut k = y as i64;
                k = k.wrapping_sub(i64::from((k as f64) > y));
                *o = match u32::try_from(k.wrapping_add(offset)) {
                    Ok(i) if x.is_finite() && i < len => i,
                    _ => len,
                };
            }
        }
    }
}

/// [`Grid::indices`] for an exact `f32` inverse width, compiled for AVX2: a vector floor, and a float-to-int
/// conversion without saturation fix-ups (the value is clamped first).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn indices_avx2(inv: f32, off: i32, signed: bool, len: u32, data: &[f32], out: &mut [u32]) {
    indices_vector(inv, off, signed, len, data, out)
}

/// [`Grid::indices`] for an exact `f32` inverse width with AVX-512F, 16 values at a time: the product is converted
/// to an integer rounding down (floor and conversion in one instruction); NaN, infinities and products past the
/// `i32` range convert to `i32::MIN`, and the unsigned minimum with `len` sends them, like every other index past the
/// grid, to the discard slot.
///
/// A negative value whose product underflows to -0 belongs in bin -1; that takes a fix-up only in a signed
/// histogram whose bins are wider than 1 (for a width of at most 1 the product of a nonzero `f32` cannot underflow).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn indices_avx512(inv: f32, off: i32, signed: bool, len: u32, data: &[f32], out: &mut [u32]) {
    match (signed, inv < 1.0) {
        (true, true) => indices_avx512_as::<true, true>(inv, off, len, data, out),
        (true, false) => indices_avx512_as::<true, false>(inv, off, len, data, out),
        (false, _) => indices_avx512_as::<false, false>(inv, off, len, data, out),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn indices_avx512_as<const SIGNED: bool, const UNDERFLOW: bool>(
    inv: f32,
    off: i32,
    len: u32,
    data: &[f32],
    out: &mut [u32],
) {
    use std::arch::x86_64::*;
    let signed = SIGNED;
    const FLOOR: i32 = _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC;
    let (inv_v, off_v, len_v) = (_mm512_set1_ps(inv), _mm512_set1_epi32(off), _mm512_set1_epi32(len as i32));
    let (zero, minus_one) = (_mm512_setzero_ps(), _mm512_set1_epi32(-1));
    let (whole, rest) = (data.len() / 16 * 16, data.len() % 16);
    for (x, o) in data[..whole].chunks_exact(16).zip(out.chunks_exact_mut(16)) {
        // SAFETY: `x` and `o` hold 16 values each, read and written unaligned.
        unsafe {
            let v = _mm512_loadu_ps(x.as_ptr());
            let v = if signed { v } else { _mm512_abs_ps(v) };
            let y = _mm512_mul_ps(v, inv_v);
            let k = _mm512_cvt_roundps_epi32::<FLOOR>(y);
            let k = if UNDERFLOW {
                // A negative value whose product underflows to -0 is in bin -1.
                let tiny = _mm512_mask_cmp_ps_mask::<_CMP_EQ_OQ>(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(v, zero), y, zero);
                _mm512_mask_add_epi32(k, tiny, k, minus_one)
            } else {
                k
            };
            let i = _mm512_min_epu32(_mm512_add_epi32(k, off_v), len_v);
            _mm512_storeu_si512(o.as_mut_ptr().cast(), i);
        }
    }
    indices_vector(inv, off, signed, len, &data[whole..], &mut out[whole..whole + rest]);
}

#[inline(always)]
fn indices_vector(inv: f32, off: i32, signed: bool, len: u32, data: &[f32], out: &mut [u32]) {
    for (o, &x) in out.iter_mut().zip(data) {
        let v = if signed { x } else { x.abs() };
        let y = v * inv;
        let f = y.floor() - f32::from(u8::from((y == 0.0) & (v < 0.0)));
        // `max` returns the non-NaN operand, so `c` is finite and within +-2e9 whatever `x` was (`clamp` would
        // pass a NaN through).
        #[allow(clippy::manual_clamp)]
        let c = f.max(-2e9).min(2e9);
        // SAFETY: `c` is finite and inside the range of i32 (see above).
        let k = unsafe { c.to_int_unchecked::<i32>() };
        let i = k.wrapping_add(off) as u32;
        *o = if x.is_finite() & (i < len) { i } else { len };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn width_is_smallest_covering_power_of_two() {
        // t = 1, 4 bins per side: need 4 w > 1 -> w = 0.5 (4 * 0.25 = 1 is not > 1)
        assert_eq!(width_log2_for(1.0, 4), -1);
        assert_eq!(width_log2_for(0.99, 4), -2);
        assert_eq!(width_log2_for(0.0, 4), MIN_WIDTH_LOG2);
        assert_eq!(width_log2_for(-3.0, 1), 2);
    }

    #[test]
    fn signed_bins_hand_computed() {
        let mut h = Histogram::new(true, 2);
        // t = 1.5, 2 per side -> w = 1; bins k=-2..1 cover [-2,2)
        let data = [-1.5f32, -0.25, 0.0, 0.5, 1.0, 1.5, f32::NAN];
        h.observe(&data, 1.5, 6);
        assert_eq!(h.width(), Some(1.0));
        assert_eq!(h.counts(), &[1, 1, 2, 2]);
        // growth to t = 3 -> w = 2: pairs (-2,-1)->-1, (0,1)->0; new layout k=-2..1
        h.observe(&[3.0], 3.0, 1);
        assert_eq!(h.width(), Some(2.0));
        assert_eq!(h.counts(), &[0, 2, 4, 1]);
        assert_eq!(h.total(), 7);
    }

    #[test]
    fn tiny_negatives_land_in_bin_minus_one() {
        let mut h = Histogram::new(true, 2);
        // w = 2: the smallest subnormal times 1/2 underflows to -0 in f32, yet floor(x / w) = -1
        h.observe(&[-f32::from_bits(1), -1e-30, 0.0, 3.0], 3.0, 4);
        assert_eq!(h.width(), Some(2.0));
        assert_eq!(h.counts(), &[0, 2, 1, 1]);
    }

    #[test]
    fn vectorised_and_portable_indices_agree() {
        // Bin edges, values just inside and outside them, signed zeros, subnormals, non-finite values and values
        // past the grid (a count that is not a multiple of 16), on a signed and an absolute grid; the AVX2 and
        // AVX-512F paths run only where the CPU has them.
        let mut data = vec![
            0.0f32,
            -0.0,
            f32::from_bits(1),
            -f32::from_bits(1),
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e30,
            -1e30,
        ];
        for k in -40i32..40 {
            let edge = k as f32 * 0.125;
            data.extend([
                edge,
                f32::from_bits(edge.to_bits() + 1),
                f32::from_bits(edge.to_bits().wrapping_sub(1)),
                edge + 0.06,
            ]);
        }
        for signed in [true, false] {
            for e in [-3, 0, 5, -130] {
                let len = if signed { 64 } else { 32 };
                // `Grid::new` picks AVX-512F or AVX2 where the CPU has them; the other paths are forced.
                let detected = Grid::new(e, if signed { 32 } else { 0 }, signed, len);
                let portable =
                    Grid { avx2: false, avx512: false, ..Grid::new(e, if signed { 32 } else { 0 }, signed, len) };
                let avx2 = Grid { avx512: false, ..Grid::new(e, if signed { 32 } else { 0 }, signed, len) };
                // Expected from the definition, in f64: floor(x / w) + offset, or the discard slot.
                let want: Vec<u32> = data
                    .iter()
                    .map(|&x| {
                        let v = if signed { f64::from(x) } else { f64::from(x).abs() };
                        let k = (v / 2f64.powi(e)).floor() + if signed { 32.0 } else { 0.0 };
                        if x.is_finite() && k >= 0.0 && k < len as f64 { k as u32 } else { len as u32 }
                    })
                    .collect();
                for (path, grid) in [("portable", &portable), ("avx2", &avx2), ("detected", &detected)] {
                    let mut got = vec![0u32; data.len()];
                    grid.indices(&data, &mut got);
                    let (v2, v512) = (grid.avx2, grid.avx512);
                    assert_eq!(got, want, "{path} (avx2 {v2}, avx512 {v512}), signed {signed}, width 2^{e}");
                    // Folded bins: kept are exactly the values whose bin lies outside them (in order, NaN kept).
                    for (a, b) in [(0, len / 2), (3, len - 5), (len / 2 - 1, len / 2 + 1), (1, len)] {
                        let mut kept = vec![];
                        grid.keep_outside(&data, (a, b), &mut kept);
                        let outside = data.iter().zip(&want).filter(|(_, i)| !(a..b).contains(&(**i as usize)));
                        let expected: Vec<u32> = outside.map(|(x, _)| x.to_bits()).collect();
                        let kept: Vec<u32> = kept.iter().map(|x| x.to_bits()).collect();
                        assert_eq!(kept, expected, "{path}, signed {signed}, width 2^{e}, bins {a}..{b}");
                    }
                }
            }
        }
    }

    /// Counting a window of bins in registers gives the lanes' counts exactly: every window position (the first bins,
    /// the last, one holding few of the values), a batch of many blocks, zeros,
    /// non-finite values and values past the grid, on a signed and an absolute grid.
    #[test]
    fn counting_a_window_in_registers_counts_what_the_lanes_do() {
        let mut data: Vec<f32> = (0..40_000u32)
            .map(|i| {
                let u = (i.wrapping_mul(2_654_435_761) >> 8) as f32 / (1u32 << 24) as f32;
                let x = (u - 0.5) * if i % 7 == 0 { 6.0 } else { 0.05 };
                if i % 97 < 40 { 0.0 } else { x }
            })
            .collect();
        data.extend([f32::NAN, f32::INFINITY, -f32::INFINITY, 1e30, -1e30, 2.999, -2.999]);
        for signed in [true, false] {
            let mut start = Histogram::new(signed, 64);
            start.observe(&[3.0], 3.0, 1);
            let (max_abs, finite) = (3.0, data.iter().filter(|x| x.is_finite()).count() as u64);
            let plain = {
                let mut f = Filler::new(start.clone());
                f.window = None;
                f.add(&data, max_abs, finite);
                f.finish()
            };
            let bins = plain.counts().len();
            for first in [0, 1, bins / 2 - 8, bins / 2, bins / 2 + 3, bins - WINDOW] {
                let mut f = Filler::new(start.clone());
                f.window = Some(first);
                f.add(&data, max_abs, finite);
                assert_eq!(f.finish(), plain, "signed {signed}, window at bin {first}");
            }
            // Chosen by itself from a histogram holding most of its values near zero, where registers count it.
            assert_eq!(Filler::new(plain.clone()).window.is_some(), registers_count(), "signed {signed}");
        }
    }

    #[test]
    fn abs_bins_hand_computed() {
        let mut h = Histogram::new(false, 4);
        h.observe(&[-1.0, 0.1, 0.6, -0.75], 1.0, 4);
        // w = 0.5: |x| = 1.0 -> bin 2, 0.1 -> 0, 0.6 -> 1, 0.75 -> 1
        assert_eq!(h.counts(), &[1, 2, 1, 0]);
    }
}
