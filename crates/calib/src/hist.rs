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
}

/// Smallest `e >= MIN_WIDTH_LOG2` with `t < per_side * 2^e`.
pub fn width_log2_for(t: f32, per_side: usize) -> i32 {
    let t = f64::from(t.abs());
    let n = per_side.max(1) as f64;
    let covers = |e: i32| n * 2f64.powi(e) > t;
    let mut e = if t > 0.0 {
        ((t / n).log2().floor() as i32).max(MIN_WIDTH_LOG2)
    } else {
        MIN_WIDTH_LOG2
    };
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
        if self.signed {
            i as i64 - self.per_side as i64
        } else {
            i as i64
        }
    }

    /// Whether the internal layout is consistent (counts length, total, width); checked on load.
    pub fn is_consistent(&self) -> bool {
        let sum: u64 = self.counts.iter().sum();
        let max_ok = self.max_abs.is_finite() && self.max_abs >= 0.0;
        match self.width_log2 {
            None => self.counts.is_empty() && self.total == 0,
            Some(e) => {
                self.counts.len() == self.len()
                    && sum == self.total
                    && max_ok
                    && (MIN_WIDTH_LOG2..=200).contains(&e)
                    && e >= width_log2_for(self.max_abs, self.per_side)
            }
        }
    }

    fn len(&self) -> usize {
        if self.signed {
            2 * self.per_side
        } else {
            self.per_side
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
        for _ in cur..e {
            let mut next = vec![0u64; self.counts.len()];
            for (i, &c) in self.counts.iter().enumerate() {
                if c == 0 {
                    continue;
                }
                let k = i as i64 - offset;
                if let Some(slot) = next.get_mut((k.div_euclid(2) + offset) as usize) {
                    *slot += c;
                }
            }
            self.counts = next;
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
        self.max_abs = t;
        self.total += finite;
        let e = self.width_log2.unwrap_or(MIN_WIDTH_LOG2);
        let inv_w = 2f64.powi(-e);
        let offset = if self.signed { self.per_side as i64 } else { 0 };
        let signed = self.signed;
        if data.len() <= PAR_CHUNK {
            accumulate(&mut self.counts, data, inv_w, offset, signed);
        } else {
            let len = self.counts.len();
            let partial = data
                .par_chunks(PAR_CHUNK)
                .fold(
                    || vec![0u64; len],
                    |mut acc, chunk| {
                        accumulate(&mut acc, chunk, inv_w, offset, signed);
                        acc
                    },
                )
                .reduce(
                    || vec![0u64; len],
                    |mut a, b| {
                        add_into(&mut a, &b);
                        a
                    },
                );
            add_into(&mut self.counts, &partial);
        }
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
        let mut theirs = other.clone();
        let e = self.width_log2.unwrap_or(oe).max(oe);
        self.coarsen_to(e);
        theirs.coarsen_to(e);
        add_into(&mut self.counts, &theirs.counts);
        self.total += theirs.total;
        self.max_abs = self.max_abs.max(theirs.max_abs);
        true
    }
}

fn add_into(a: &mut [u64], b: &[u64]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += *y;
    }
}

/// Hot loop: bin index by multiplying with the exact power-of-two `1 / w` in `f32` (exact while the product is
/// normal; a negative value whose product underflows to -0 still lands in bin -1), floor without a libm call,
/// four interleaved sub-histograms to break store-to-load chains on repeated bins.
fn accumulate(counts: &mut [u64], data: &[f32], inv_w: f64, offset: i64, signed: bool) {
    let len = counts.len();
    let inv = inv_w as f32;
    // 1/w may not be representable in f32 (widths outside 2^-126..2^127): fall back to exact f64.
    let f32_exact = inv.is_normal() && f64::from(inv) == inv_w;
    let off = offset as i32;
    let dropped = 4 * len; // index past every sub-histogram, even after adding a lane offset
    let mut sub = vec![0u32; 4 * len];
    let bin_f32 = |x: f32| -> usize {
        let v = if signed { x } else { x.abs() };
        let y = v * inv;
        let mut k = y as i32;
        k = k.wrapping_sub(i32::from(((k as f32) > y) | ((y == 0.0) & (v < 0.0))));
        let i = k.wrapping_add(off) as u32 as usize;
        if x.is_finite() & (i < len) {
            i
        } else {
            dropped
        }
    };
    let bin_f64 = |x: f32| -> usize {
        let v = if signed {
            f64::from(x)
        } else {
            f64::from(x).abs()
        };
        let y = v * inv_w;
        let mut k = y as i64;
        k = k.wrapping_sub(i64::from((k as f64) > y));
        match usize::try_from(k.wrapping_add(offset)) {
            Ok(i) if x.is_finite() && i < len => i,
            _ => dropped,
        }
    };
    // u32 sub-counts are flushed every 2^30 values so they cannot overflow. Indices are computed for 256
    // values at a time (a loop the compiler vectorises), then scattered into four sub-histograms.
    let mut idx = [0usize; 256];
    for block in data.chunks(1 << 30) {
        for piece in block.chunks(256) {
            let idx = &mut idx[..piece.len()];
            if f32_exact {
                idx.iter_mut()
                    .zip(piece)
                    .for_each(|(o, &x)| *o = bin_f32(x));
            } else {
                idx.iter_mut()
                    .zip(piece)
                    .for_each(|(o, &x)| *o = bin_f64(x));
            }
            for (j, &i) in idx.iter().enumerate() {
                if let Some(s) = sub.get_mut((j & 3) * len + i) {
                    *s += 1;
                }
            }
        }
        for (i, c) in counts.iter_mut().enumerate() {
            for lane in 0..4 {
                if let Some(s) = sub.get_mut(lane * len + i) {
                    *c += u64::from(*s);
                    *s = 0;
                }
            }
        }
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
    fn abs_bins_hand_computed() {
        let mut h = Histogram::new(false, 4);
        h.observe(&[-1.0, 0.1, 0.6, -0.75], 1.0, 4);
        // w = 0.5: |x| = 1.0 -> bin 2, 0.1 -> 0, 0.6 -> 1, 0.75 -> 1
        assert_eq!(h.counts(), &[1, 2, 1, 0]);
    }
}
