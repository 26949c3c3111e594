//! How far a quantized tensor is from the float tensor it stands for, accumulated over batches: signal-to-
//! quantization-noise ratio, relative error, the share of values a range clips; and how far two logit vectors'
//! softmax distributions are apart.

use serde::Serialize;

/// Error of a test tensor against a reference, streamed over batches (sums in f64).
///
/// ```
/// use qdq_calib::ErrorStats;
///
/// let reference = [1.0f32, -2.0, 3.0, -4.0];
/// let test = [1.1f32, -2.0, 2.9, -4.0];
/// let mut e = ErrorStats::default();
/// e.observe(&reference, &test);
/// e.observe_clipping(&reference, (-3.5, 3.5)); // -4.0 lies outside
/// // noise 0.02 against signal 30: 10·log10(1500) = 31.8 dB
/// assert!((e.sqnr_db() - 31.76).abs() < 0.01);
/// assert!((e.relative_error() - (0.02f64 / 30.0).sqrt()).abs() < 1e-6);
/// assert_eq!(e.clipped_fraction(), 0.25);
///
/// // An all-zero tensor reproduced exactly (an attention mask without padding) is exact, not 0/0.
/// let mut zeros = ErrorStats::default();
/// zeros.observe(&[0.0; 4], &[0.0; 4]);
/// assert_eq!((zeros.sqnr_db(), zeros.relative_error()), (f64::INFINITY, 0.0));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ErrorStats {
    /// Values compared.
    pub values: u64,
    /// Σ reference².
    pub signal: f64,
    /// Σ (test - reference)².
    pub noise: f64,
    /// max |test - reference|.
    pub max_abs_error: f64,
    /// Values checked against a range, and how many fell outside it.
    pub range_values: u64,
    pub clipped: u64,
}

impl ErrorStats {
    /// Adds one batch; the slices are the same tensor, element for element (a shorter one bounds both).
    pub fn observe(&mut self, reference: &[f32], test: &[f32]) {
        for (&r, &t) in reference.iter().zip(test) {
            let (r, d) = (f64::from(r), f64::from(t) - f64::from(r));
            self.signal += r * r;
            self.noise += d * d;
            self.max_abs_error = self.max_abs_error.max(d.abs());
        }
        self.values += reference.len().min(test.len()) as u64;
    }

    /// Counts the values of `x` outside `[lo, hi]` (what a quantizer with that range clips).
    pub fn observe_clipping(&mut self, x: &[f32], (lo, hi): (f32, f32)) {
        self.range_values += x.len() as u64;
        self.clipped += x.iter().filter(|&&v| v < lo || v > hi).count() as u64;
    }

    /// 10·log10(signal / noise) in dB; infinite when the test is exact (an exact all-zero tensor too), NaN before
    /// any value.
    pub fn sqnr_db(&self) -> f64 {
        if self.noise == 0.0 && self.values > 0 {
            return f64::INFINITY;
        }
        10.0 * (self.signal / self.noise).log10()
    }

    /// ‖test - reference‖ / ‖reference‖; 0 when the test is exact (an exact all-zero tensor too), NaN before any value.
    pub fn relative_error(&self) -> f64 {
        if self.noise == 0.0 && self.values > 0 {
            return 0.0;
        }
        (self.noise / self.signal).sqrt()
    }

    /// The share of values [`observe_clipping`](Self::observe_clipping) found outside the range (0 before any).
    pub fn clipped_fraction(&self) -> f64 {
        if self.range_values == 0 { 0.0 } else { self.clipped as f64 / self.range_values as f64 }
    }
}

/// KL(softmax(p) ‖ softmax(q)) in nats, over the positions where `keep` is true (all when `keep` is empty).
///
/// ```
/// let p = [2.0f32, 0.0, -1.0];
/// assert_eq!(qdq_calib::softmax_kl(&p, &p, &[]), 0.0);
/// assert!(qdq_calib::softmax_kl(&p, &[0.0, 2.0, -1.0], &[]) > 0.5);
/// // A masked position does not count.
/// assert_eq!(qdq_calib::softmax_kl(&[1.0, 5.0], &[1.0, -5.0], &[true, false]), 0.0);
/// ```
pub fn softmax_kl(p: &[f32], q: &[f32], keep: &[bool]) -> f64 {
    let kept = |i: usize| keep.get(i).copied().unwrap_or(keep.is_empty());
    let log_softmax = |x: &[f32]| -> Vec<f64> {
        let m = x.iter().enumerate().filter(|(i, _)| kept(*i)).map(|(_, &v)| f64::from(v)).fold(f64::MIN, f64::max);
        let lse = m + x
            .iter()
            .enumerate()
            .filter(|(i, _)| kept(*i))
            .map(|(_, &v)| (f64::from(v) - m).exp())
            .sum::<f64>()
            .ln();
        x.iter().map(|&v| f64::from(v) - lse).collect()
    };
    let (lp, lq) = (log_softmax(p), log_softmax(q));
    (0..p.len().min(q.len())).filter(|&i| kept(i)).map(|i| lp[i].exp() * (lp[i] - lq[i])).sum::<f64>().max(0.0)
}

/// The index of the largest value among the positions where `keep` is true (all when `keep` is empty).
pub fn argmax(x: &[f32], keep: &[bool]) -> Option<usize> {
    let kept = |i: usize| keep.get(i).copied().unwrap_or(keep.is_empty());
    x.iter().enumerate().filter(|(i, _)| kept(*i)).max_by(|a, b| a.1.total_cmp(b.1)).map(|(i, _)| i)
}
