use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// A range algorithm. Which statistic each one reads (see [`crate::CollectOptions::for_methods`]):
///
/// | method | statistic |
/// |---|---|
/// | `MinMax` | min/max (moving average if collected; per-channel if collected) |
/// | `Percentile { symmetric: true }` | absolute histogram (as ONNX Runtime) |
/// | `Percentile { symmetric: false }` | signed histogram (as ONNX Runtime) |
/// | `Entropy` | signed histogram (as ONNX Runtime) |
/// | `Distribution` | signed histogram (as ONNX Runtime) |
/// | `Mse` | absolute histogram |
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum Method {
    /// Observed min/max; `symmetric` gives `±max|x|`.
    MinMax { symmetric: bool },
    /// Keep `percentile` % of the values (symmetric: of `|x|`; else cut half the rest from each tail).
    Percentile { percentile: f64, symmetric: bool },
    /// TensorRT's KL-divergence threshold search, quantising to `num_quantized_bins`.
    Entropy { num_quantized_bins: usize },
    /// Mean and standard deviation of the histogram (ONNX Runtime's float8 method); the INT8 range is
    /// `mean ± 4 std`, clamped to the observed range.
    Distribution,
    /// Symmetric threshold minimising the expected INT8 error (rounding noise inside, clipping error outside).
    Mse,
}

/// Default percentile of [`Method::Percentile`].
pub const DEFAULT_PERCENTILE: f64 = 99.999;
/// Default quantized bins of [`Method::Entropy`].
pub const DEFAULT_QUANTIZED_BINS: usize = 128;

fn parse_bool(method: &'static str, option: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(Error::MethodOption {
            method,
            option: option.to_string(),
            message: format!("expected true or false, got `{value}`"),
        }),
    }
}

impl Method {
    /// Parse a method by name (`minmax`, `percentile`, `entropy`, `distribution`, `mse`; case-insensitive) with
    /// string options. Options: minmax `symmetric` (default false); percentile `percentile` in (0, 100]
    /// (default 99.999) and `symmetric` (default false); entropy `num_quantized_bins` >= 2 (default 128);
    /// distribution and mse take none. Unknown options or bad values are errors listing the valid ones.
    pub fn parse(name: &str, options: &BTreeMap<String, String>) -> Result<Method> {
        let lower = name.trim().to_ascii_lowercase();
        let (method, valid): (&'static str, &[&str]) = match lower.as_str() {
            "minmax" => ("minmax", &["symmetric"]),
            "percentile" => ("percentile", &["percentile", "symmetric"]),
            "entropy" => ("entropy", &["num_quantized_bins"]),
            "distribution" => ("distribution", &[]),
            "mse" => ("mse", &[]),
            _ => {
                return Err(Error::UnknownMethod { name: name.to_string() });
            }
        };
        if let Some(bad) = options.keys().find(|k| !valid.contains(&k.as_str())) {
            let list = if valid.is_empty() { "none".to_string() } else { valid.join(", ") };
            return Err(Error::MethodOption {
                method,
                option: bad.clone(),
                message: format!("unknown option; valid options: {list}"),
            });
        }
        let symmetric = match options.get("symmetric") {
            Some(v) => parse_bool(method, "symmetric", v)?,
            None => false,
        };
        let m = match method {
            "minmax" => Method::MinMax { symmetric },
            "percentile" => {
                let percentile = match options.get("percentile") {
                    Some(v) => v.trim().parse::<f64>().map_err(|_| Error::MethodOption {
                        method,
                        option: "percentile".into(),
                        message: format!("expected a number in (0, 100], got `{v}`"),
                    })?,
                    None => DEFAULT_PERCENTILE,
                };
                Method::Percentile { percentile, symmetric }
            }
            "entropy" => {
                let num_quantized_bins = match options.get("num_quantized_bins") {
                    Some(v) => v.trim().parse::<usize>().map_err(|_| Error::MethodOption {
                        method,
                        option: "num_quantized_bins".into(),
                        message: format!("expected an integer >= 2, got `{v}`"),
                    })?,
                    None => DEFAULT_QUANTIZED_BINS,
                };
                Method::Entropy { num_quantized_bins }
            }
            "distribution" => Method::Distribution,
            _ => Method::Mse,
        };
        m.validate()?;
        Ok(m)
    }

    /// Check option values (also done by [`Method::parse`] and [`crate::compute_ranges`]).
    pub fn validate(&self) -> Result<()> {
        match *self {
            Method::Percentile { percentile, .. } if !(percentile > 0.0 && percentile <= 100.0) => {
                Err(Error::MethodOption {
                    method: self.name(),
                    option: "percentile".into(),
                    message: format!("must be in (0, 100], got {percentile}"),
                })
            }
            Method::Entropy { num_quantized_bins } if num_quantized_bins < 2 => Err(Error::MethodOption {
                method: self.name(),
                option: "num_quantized_bins".into(),
                message: format!("must be >= 2, got {num_quantized_bins}"),
            }),
            _ => Ok(()),
        }
    }

    /// The method's name as accepted by [`Method::parse`].
    pub fn name(&self) -> &'static str {
        match self {
            Method::MinMax { .. } => "minmax",
            Method::Percentile { .. } => "percentile",
            Method::Entropy { .. } => "entropy",
            Method::Distribution => "distribution",
            Method::Mse => "mse",
        }
    }

    /// The method's options as JSON values (what [`crate::RangeTable::options`] records).
    pub fn options_json(&self) -> BTreeMap<String, serde_json::Value> {
        let mut m = BTreeMap::new();
        match *self {
            Method::MinMax { symmetric } => {
                m.insert("symmetric".into(), symmetric.into());
            }
            Method::Percentile { percentile, symmetric } => {
                m.insert("percentile".into(), percentile.into());
                m.insert("symmetric".into(), symmetric.into());
            }
            Method::Entropy { num_quantized_bins } => {
                m.insert("num_quantized_bins".into(), num_quantized_bins.into());
            }
            Method::Distribution | Method::Mse => {}
        }
        m
    }

    /// Whether this method reads the signed histogram.
    pub fn needs_signed_histogram(&self) -> bool {
        matches!(self, Method::Entropy { .. } | Method::Distribution | Method::Percentile { symmetric: false, .. })
    }

    /// Whether this method reads the absolute-value histogram.
    pub fn needs_abs_histogram(&self) -> bool {
        matches!(self, Method::Mse | Method::Percentile { symmetric: true, .. })
    }
}
