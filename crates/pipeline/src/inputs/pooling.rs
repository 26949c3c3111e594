//! Pooling token states into one vector per input, as sentence-transformers' Pooling module does: over the tokens
//! the attention mask keeps, the mean, the `[CLS]` row, the max, and the rarer modes, concatenated in its order when
//! several are on.

use std::fmt;
use std::str::FromStr;

use ndarray::ArrayView2;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// One pooling mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolMode {
    /// The first token's row (`[CLS]`).
    Cls,
    /// The largest value of each channel over the kept tokens.
    Max,
    /// The mean over the kept tokens.
    Mean,
    /// Their sum over the square root of their number.
    MeanSqrtLen,
    /// The mean weighted by position (1, 2, 3, ...), as SGPT does.
    WeightedMean,
    /// The last kept token's row.
    LastToken,
}

/// The modes as `--pooling` and the tables name them.
const NAMES: [(PoolMode, &str); 6] = [
    (PoolMode::Cls, "cls"),
    (PoolMode::Max, "max"),
    (PoolMode::Mean, "mean"),
    (PoolMode::MeanSqrtLen, "mean-sqrt-len"),
    (PoolMode::WeightedMean, "weighted-mean"),
    (PoolMode::LastToken, "last-token"),
];

/// How token states become a sentence embedding: the modes, concatenated, then L2-normalised when `normalize`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pooling {
    pub modes: Vec<PoolMode>,
    /// A Normalize module follows (the measures normalise anyway; recorded as the model does it).
    #[serde(default)]
    pub normalize: bool,
}

impl fmt::Display for Pooling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> =
            self.modes.iter().map(|m| NAMES.iter().find(|(k, _)| k == m).map_or("?", |(_, n)| *n)).collect();
        write!(f, "{}{}", names.join("+"), if self.normalize { ", normalised" } else { "" })
    }
}

impl FromStr for Pooling {
    type Err = Error;

    /// `mean`, `cls`, `max`, `mean-sqrt-len`, `weighted-mean`, `last-token`, or several joined by `+` or `,`.
    fn from_str(s: &str) -> Result<Pooling, Error> {
        let modes = s
            .split(['+', ','])
            .map(|w| {
                let w = w.trim().to_ascii_lowercase().replace('_', "-");
                NAMES.iter().find(|(_, n)| *n == w).map(|(m, _)| *m).ok_or_else(|| {
                    let all: Vec<&str> = NAMES.iter().map(|(_, n)| *n).collect();
                    Error::Usage(format!("--pooling: `{w}` is not a pooling mode; modes: {}", all.join(", ")))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Pooling { modes, normalize: false })
    }
}

impl Pooling {
    /// One embedding per row of `states` (`[batch, seq, hidden]`, row-major) over the tokens `mask` keeps (a row
    /// without any is pooled over all of its tokens).
    pub fn pool(
        &self,
        states: &[f32],
        (batch, seq, hidden): (usize, usize, usize),
        mask: ArrayView2<i64>,
    ) -> Vec<Vec<f32>> {
        (0..batch)
            .map(|b| {
                let rows: Vec<&[f32]> = (0..seq).map(|t| &states[(b * seq + t) * hidden..][..hidden]).collect();
                let mut kept: Vec<usize> = (0..seq).filter(|&t| mask.get((b, t)).is_none_or(|m| *m != 0)).collect();
                if kept.is_empty() {
                    kept = (0..seq).collect();
                }
                let mut v: Vec<f32> = self.modes.iter().flat_map(|m| pool_one(*m, &rows, &kept, hidden)).collect();
                if self.normalize {
                    normalise(&mut v);
                }
                v
            })
            .collect()
    }
}

/// One mode over the kept token rows.
fn pool_one(mode: PoolMode, rows: &[&[f32]], kept: &[usize], hidden: usize) -> Vec<f32> {
    let weighted_sum = |weight: &dyn Fn(usize) -> f64| {
        let mut sum = vec![0f64; hidden];
        for &t in kept {
            for (s, x) in sum.iter_mut().zip(rows[t]) {
                *s += weight(t) * f64::from(*x);
            }
        }
        sum
    };
    let n = kept.len() as f64;
    let scaled = |sum: Vec<f64>, by: f64| sum.into_iter().map(|s| (s / by) as f32).collect();
    match mode {
        PoolMode::Cls => rows[0].to_vec(),
        PoolMode::LastToken => rows[*kept.last().unwrap_or(&0)].to_vec(),
        PoolMode::Max => {
            (0..hidden).map(|c| kept.iter().map(|&t| rows[t][c]).fold(f32::NEG_INFINITY, f32::max)).collect()
        }
        PoolMode::Mean => scaled(weighted_sum(&|_| 1.0), n),
        PoolMode::MeanSqrtLen => scaled(weighted_sum(&|_| 1.0), n.sqrt()),
        PoolMode::WeightedMean => {
            let total: f64 = kept.iter().map(|&t| (t + 1) as f64).sum();
            scaled(weighted_sum(&|t| (t + 1) as f64), total)
        }
    }
}

/// Scales `v` to unit length (a zero vector stays zero).
pub fn normalise(v: &mut [f32]) {
    let norm = v.iter().map(|x| f64::from(*x) * f64::from(*x)).sum::<f64>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x = (f64::from(*x) / norm) as f32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    /// Two texts of three token rows (hidden 2); the second text's last token is padding.
    const STATES: [f32; 12] = [1.0, 2.0, 3.0, -4.0, 5.0, 0.0, 2.0, 2.0, 4.0, -2.0, 100.0, 100.0];

    fn pooled(modes: &str) -> Vec<Vec<f32>> {
        let mask = array![[1i64, 1, 1], [1, 1, 0]];
        modes.parse::<Pooling>().unwrap().pool(&STATES, (2, 3, 2), mask.view())
    }

    #[test]
    fn each_mode_pools_the_kept_tokens_as_sentence_transformers_does() {
        assert_eq!(pooled("mean"), [vec![3.0, -2.0 / 3.0], vec![3.0, 0.0]]);
        assert_eq!(pooled("cls"), [vec![1.0, 2.0], vec![2.0, 2.0]]);
        assert_eq!(pooled("max"), [vec![5.0, 2.0], vec![4.0, 2.0]], "padding (100) is left out");
        assert_eq!(pooled("last-token"), [vec![5.0, 0.0], vec![4.0, -2.0]]);
        let sqrt_len = pooled("mean_sqrt_len");
        assert!((sqrt_len[1][0] - 6.0 / 2f32.sqrt()).abs() < 1e-6 && sqrt_len[1][1] == 0.0, "{sqrt_len:?}");
        // Weights 1, 2 by position: (2·1 + 4·2) / 3.
        assert_eq!(pooled("weighted-mean")[1], [10.0 / 3.0, (2.0 - 4.0) / 3.0]);
        // Several modes concatenate in sentence-transformers' order (as given here), then normalise if asked.
        assert_eq!(pooled("cls+mean")[1], [2.0, 2.0, 3.0, 0.0]);
        let mut p: Pooling = "mean".parse().unwrap();
        p.normalize = true;
        assert_eq!(p.pool(&STATES, (2, 3, 2), array![[1i64, 1, 1], [1, 1, 0]].view())[1], [1.0, 0.0]);
        assert_eq!(p.to_string(), "mean, normalised");
    }

    #[test]
    fn an_unknown_mode_is_a_usage_error_listing_the_modes() {
        let e = "mean+avg".parse::<Pooling>().unwrap_err().to_string();
        assert!(e.contains("`avg`") && e.contains("cls, max, mean"), "{e}");
    }
}
