//! A difference between two models' scores on the same questions, with its paired 95 % interval: what every `dF1`
//! and `dEM` qdq prints comes with, so a difference the question sample cannot resolve is said to be one.

use serde::{Deserialize, Serialize};

/// `ours - theirs` in points (per-question scores in 0..1, paired by question), with the 95 % interval of the mean
/// difference (Student's t over the per-question differences).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PairedDifference {
    /// Mean difference, in points.
    pub delta: f64,
    /// Its standard error: the differences' sample standard deviation over the square root of their number.
    pub se: f64,
    /// The 95 % interval `delta ± t · se` (t of n - 1 degrees of freedom).
    pub low: f64,
    pub high: f64,
    /// Questions paired.
    pub questions: usize,
}

/// The paired difference of `ours` and `theirs` (each question's score in 0..1, in the same order). Under two
/// questions the interval is undefined (NaN bounds).
///
/// ```
/// // Differences 0, 0, +100, -100 points: mean 0 and a wide interval.
/// let d = qdq_squad_metrics::paired_difference(&[1.0, 0.5, 1.0, 0.0], &[1.0, 0.5, 0.0, 1.0]);
/// assert_eq!(d.delta, 0.0);
/// assert!(d.low < -50.0 && d.high > 50.0 && !d.excludes(0.0));
/// // The same answers everywhere: no spread, an interval of one point.
/// let same = qdq_squad_metrics::paired_difference(&[0.3, 0.9], &[0.3, 0.9]);
/// assert_eq!((same.low, same.high), (0.0, 0.0));
/// ```
pub fn paired_difference(ours: &[f64], theirs: &[f64]) -> PairedDifference {
    let d: Vec<f64> = ours.iter().zip(theirs).map(|(a, b)| 100.0 * (a - b)).collect();
    let n = d.len();
    let delta = if n == 0 { 0.0 } else { d.iter().sum::<f64>() / n as f64 };
    let se = crate::paired_standard_error(ours, theirs);
    let half = t_975(n.saturating_sub(1)) * se;
    PairedDifference { delta, se, low: delta - half, high: delta + half, questions: n }
}

impl PairedDifference {
    /// Half the interval's width.
    pub fn half_width(&self) -> f64 {
        (self.high - self.low) / 2.0
    }

    /// True if the interval lies wholly on one side of `threshold` (0: the models differ; `-budget`: within or over a
    /// budget).
    pub fn excludes(&self, threshold: f64) -> bool {
        self.low > threshold || self.high < threshold
    }

    /// About how many questions would make the interval exclude `threshold`, the per-question spread staying as it is
    /// (the half width shrinks as one over the square root of the questions); `None` when it excludes it already, or
    /// when the difference sits on the threshold (no number of questions separates them).
    pub fn questions_to_decide(&self, threshold: f64) -> Option<usize> {
        let gap = (self.delta - threshold).abs();
        if self.excludes(threshold) || gap < 1e-9 || !self.se.is_finite() {
            return None;
        }
        let n = self.questions as f64 * (1.96 * self.se / gap).powi(2);
        Some(n.ceil() as usize)
    }

    /// `-0.37 [-0.52, -0.22]`.
    pub fn describe(&self) -> String {
        format!("{:+.2} [{:+.2}, {:+.2}]", self.delta, self.low, self.high)
    }
}

/// A share of questions (0-1) with its 95 % interval (Wilson's score interval, which stays inside 0..1 and is not
/// empty at a share of 0 or 1): how many answers two models share, say.
///
/// ```
/// let p = qdq_squad_metrics::Proportion::of(930, 1000);
/// assert!((p.share - 0.93).abs() < 1e-12 && p.low < 0.93 && p.high > 0.93);
/// assert!((p.high - p.low - 0.0317).abs() < 1e-3);
/// assert_eq!(p.describe(), "93.00 % [91.25, 94.42]");
/// let all = qdq_squad_metrics::Proportion::of(50, 50);
/// assert!(all.high == 1.0 && all.low < 1.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Proportion {
    pub share: f64,
    pub low: f64,
    pub high: f64,
    /// Questions counted.
    pub questions: usize,
}

impl Proportion {
    /// `k` of `n` questions (none of none: a share of 1 with the interval 0..1).
    pub fn of(k: usize, n: usize) -> Proportion {
        if n == 0 {
            return Proportion { share: 1.0, low: 0.0, high: 1.0, questions: 0 };
        }
        const Z: f64 = 1.959_963_984_540_054;
        let (p, n_f) = (k as f64 / n as f64, n as f64);
        let denominator = 1.0 + Z * Z / n_f;
        let centre = (p + Z * Z / (2.0 * n_f)) / denominator;
        let half = Z * (p * (1.0 - p) / n_f + Z * Z / (4.0 * n_f * n_f)).sqrt() / denominator;
        Proportion { share: p, low: (centre - half).max(0.0), high: (centre + half).min(1.0), questions: n }
    }

    /// `93.00 % [91.25, 94.42]`.
    pub fn describe(&self) -> String {
        format!("{:.2} % [{:.2}, {:.2}]", 100.0 * self.share, 100.0 * self.low, 100.0 * self.high)
    }
}

/// The 97.5 % quantile of Student's t with `df` degrees of freedom: the table up to 30, then a Cornish-Fisher
/// expansion around the normal's 1.96 (within 1e-4 of the table from 31 on).
fn t_975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139, 2.200985,
        2.178813, 2.160369, 2.144787, 2.131450, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963, 2.079614, 2.073873,
        2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272,
    ];
    const Z: f64 = 1.959_963_984_540_054;
    match df {
        0 => f64::NAN,
        1..=30 => TABLE[df - 1],
        _ => {
            let v = df as f64;
            let z = |k: i32| Z.powi(k);
            Z + (z(3) + Z) / (4.0 * v)
                + (5.0 * z(5) + 16.0 * z(3) + 3.0 * Z) / (96.0 * v.powi(2))
                + (3.0 * z(7) + 19.0 * z(5) + 17.0 * z(3) - 15.0 * Z) / (384.0 * v.powi(3))
                + (79.0 * z(9) + 776.0 * z(7) + 1482.0 * z(5) - 1920.0 * z(3) - 945.0 * Z) / (92160.0 * v.powi(4))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_quantiles_match_the_table() {
        // Student's t, 97.5 %, past the table (standard values).
        for (df, t) in [(31, 2.039513), (40, 2.021075), (60, 2.000298), (120, 1.979930)] {
            assert!((t_975(df) - t).abs() < 1e-4, "df {df}: {} against {t}", t_975(df));
        }
        assert_eq!(t_975(3), 3.182446);
        assert!((t_975(100_000) - 1.96).abs() < 1e-3);
    }

    #[test]
    fn an_interval_says_how_many_questions_would_decide() {
        // 100 questions, the second model losing one question's F1 in five: mean -20 points.
        let ours: Vec<f64> = (0..100).map(|i| if i % 5 == 0 { 0.0 } else { 1.0 }).collect();
        let theirs = vec![1.0; 100];
        let d = paired_difference(&ours, &theirs);
        assert!((d.delta + 20.0).abs() < 1e-9 && d.excludes(0.0), "{d:?}");
        assert_eq!(d.questions_to_decide(0.0), None, "already decided");
        // Against a budget of 19 points the interval (about -28 to -12) cannot decide: more questions would.
        assert!(!d.excludes(-19.0));
        let n = d.questions_to_decide(-19.0).unwrap();
        assert!(n > 100, "{n}");
        let narrower = PairedDifference { se: d.se * (100.0 / n as f64).sqrt(), questions: n, ..d };
        assert!((1.96 * narrower.se - 1.0).abs() < 0.01, "{narrower:?}");
        assert!(d.describe().starts_with("-20.00 ["), "{}", d.describe());
    }
}
