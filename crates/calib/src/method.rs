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
/// | `Fp8Mse` | absolute histogram (whole) |
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
    /// Symmetric threshold minimising the expected error of `format` scaled so the threshold is its largest value:
    /// each value's rounding noise follows the format's spacing where it lands (relative, unlike INT8's), values
    /// beyond it are clipped.
    Fp8Mse { format: crate::Float8 },
}

/// Default percentile of [`Method::Percentile`].
pub const DEFAULT_PERCENTILE: f64 = 99.999;
/// Default quantized bins of [`Method::Entropy`].
pub const DEFAULT_QUANTIZED_BINS: usize = 128;

/// The name of a range algorithm, without its options: what `--calibrate-method` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MethodKind {
    MinMax,
    Percentile,
    Entropy,
    Distribution,
    Mse,
    Fp8Mse,
}

impl MethodKind {
    /// Every kind, in the order help texts list them.
    pub const ALL: [MethodKind; 6] = [
        MethodKind::MinMax,
        MethodKind::Percentile,
        MethodKind::Entropy,
        MethodKind::Distribution,
        MethodKind::Mse,
        MethodKind::Fp8Mse,
    ];

    /// The lower-case name (`minmax`, `percentile`, `entropy`, `distribution`, `mse`, `fp8-mse`).
    pub fn name(self) -> &'static str {
        match self {
            MethodKind::MinMax => "minmax",
            MethodKind::Percentile => "percentile",
            MethodKind::Entropy => "entropy",
            MethodKind::Distribution => "distribution",
            MethodKind::Mse => "mse",
            MethodKind::Fp8Mse => "fp8-mse",
        }
    }
}

impl std::fmt::Display for MethodKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for MethodKind {
    type Err = Error;

    /// Case-insensitive; an unknown name is an error listing the valid ones.
    fn from_str(name: &str) -> Result<MethodKind> {
        let lower = name.trim().to_ascii_lowercase();
        MethodKind::ALL
            .into_iter()
            .find(|k| k.name() == lower)
            .ok_or_else(|| Error::UnknownMethod { name: name.to_string() })
    }
}

/// The options of every method, typed; each method reads the ones that apply to it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MethodOptions {
    /// [`Method::Percentile`]'s percentile, in (0, 100].
    pub percentile: f64,
    /// `±max|x|` ranges for [`Method::MinMax`] and [`Method::Percentile`].
    pub symmetric: bool,
    /// [`Method::Entropy`]'s quantized bins, >= 2.
    pub num_quantized_bins: usize,
    /// [`Method::Fp8Mse`]'s format.
    pub float8: crate::Float8,
}

impl Default for MethodOptions {
    fn default() -> Self {
        MethodOptions {
            percentile: DEFAULT_PERCENTILE,
            symmetric: false,
            num_quantized_bins: DEFAULT_QUANTIZED_BINS,
            float8: crate::Float8::E4M3Fn,
        }
    }
}

impl Method {
    /// The method of `kind` with the options that apply to it, validated ([`Method::validate`]).
    ///
    /// ```
    /// use qdq_calib::{Method, MethodKind, MethodOptions};
    /// let opts = MethodOptions { percentile: 99.99, ..MethodOptions::default() };
    /// let m = Method::new("Percentile".parse::<MethodKind>()?, &opts)?;
    /// assert_eq!(m, Method::Percentile { percentile: 99.99, symmetric: false });
    /// assert!(Method::new(MethodKind::Entropy, &MethodOptions { num_quantized_bins: 1, ..opts }).is_err());
    /// # Ok::<(), qdq_calib::Error>(())
    /// ```
    pub fn new(kind: MethodKind, opts: &MethodOptions) -> Result<Method> {
        let m = match kind {
            MethodKind::MinMax => Method::MinMax { symmetric: opts.symmetric },
            MethodKind::Percentile => Method::Percentile { percentile: opts.percentile, symmetric: opts.symmetric },
            MethodKind::Entropy => Method::Entropy { num_quantized_bins: opts.num_quantized_bins },
            MethodKind::Distribution => Method::Distribution,
            MethodKind::Mse => Method::Mse,
            MethodKind::Fp8Mse => Method::Fp8Mse { format: opts.float8 },
        };
        m.validate()?;
        Ok(m)
    }

    /// Which kind of method this is.
    pub fn kind(&self) -> MethodKind {
        match self {
            Method::MinMax { .. } => MethodKind::MinMax,
            Method::Percentile { .. } => MethodKind::Percentile,
            Method::Entropy { .. } => MethodKind::Entropy,
            Method::Distribution => MethodKind::Distribution,
            Method::Mse => MethodKind::Mse,
            Method::Fp8Mse { .. } => MethodKind::Fp8Mse,
        }
    }

    /// Check option values (also done by [`Method::new`] and [`crate::compute_ranges`]).
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

    /// The method's name ([`MethodKind::name`]).
    pub fn name(&self) -> &'static str {
        self.kind().name()
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
            Method::Fp8Mse { format } => {
                m.insert("format".into(), format.to_string().into());
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
        matches!(self, Method::Mse | Method::Fp8Mse { .. } | Method::Percentile { symmetric: true, .. })
    }
}
