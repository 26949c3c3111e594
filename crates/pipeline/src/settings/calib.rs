//! Calibration settings: the data, the range methods computed from the one statistics pass, and the pass's
//! sessions.

use std::path::PathBuf;

use calib::{Method, MethodKind, MethodOptions};
use runtime::{Ep, SessionConfig};

use crate::error::{Error, Result};
use crate::settings::runtime::calibration_session;
use crate::steps::collect::CalibrateOptions;

/// Which range methods to compute, from the one statistics pass.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", command(next_help_heading = "Calibration"))]
pub struct MethodSettings {
    /// Range method [default: mse; embeddings: percentile]
    ///
    /// mse, fp8-mse, minmax, percentile, entropy or distribution; float8 pairs default to fp8-mse. mse takes the
    /// range minimising the expected INT8 error, fp8-mse the float8 one (relative rounding: it clips far less);
    /// entropy is TensorRT's KL method. A pooled sentence embedding takes percentile: pooling averages the tokens'
    /// rounding noise away and keeps the error of clipped values, so its ranges clip less. Statistics for
    /// --compare-methods are collected in the same pass. Where every method is percentile, mse or minmax, the
    /// histograms count bin by bin only the tails the ranges read (the same ranges; where a range turns out to need
    /// more, the pass runs again with whole histograms and says so). docs/QUANTIZATION.md compares them.
    #[cfg_attr(feature = "cli", arg(long = "calibrate-method", value_name = "METHOD"))]
    pub method: Option<MethodKind>,
    /// Also compute these methods' ranges from the same pass
    ///
    /// Written to calibration_<method>.json; `qdq e2e` also quantizes with each (model_qdq_<method>.onnx) and
    /// evaluates it: a table row, results.json `compared_methods`, predictions_int8_<method>.json.
    #[cfg_attr(feature = "cli", arg(long = "compare-methods", value_delimiter = ',', value_name = "METHOD,..."))]
    pub compare: Vec<MethodKind>,
    /// Percentile of the percentile method [default: 99.999]
    ///
    /// An error when no method of the run is percentile.
    #[cfg_attr(feature = "cli", arg(long, value_name = "P", hide_short_help = true))]
    pub percentile: Option<f64>,
    /// Quantized bins of the entropy method [default: 128]
    ///
    /// TensorRT uses 128 for int8; the seeds' 255 (with --num-bins 8001) is accepted. An error when no method of the
    /// run is entropy.
    #[cfg_attr(feature = "cli", arg(long, value_name = "N", hide_short_help = true))]
    pub num_quantized_bins: Option<usize>,
    /// Symmetric ranges (+-max|x|) for minmax and percentile
    ///
    /// An error when the run computes neither.
    #[cfg_attr(feature = "cli", arg(long, hide_short_help = true))]
    pub symmetric: bool,
    /// The method for integer pairs when --calibrate-method names none: the task's
    /// ([`crate::tasks::Task::integer_method`]); mse when unset.
    #[cfg_attr(feature = "cli", arg(skip))]
    pub integer_default: Option<MethodKind>,
}

impl MethodSettings {
    /// The method whose ranges a model of `precision` is quantized with: `--calibrate-method`, else the task's
    /// method for integer pairs (mse unless [`MethodSettings::integer_default`] says otherwise) and fp8-mse for
    /// float8 ones.
    pub fn method_for(&self, precision: qdq::Precision) -> MethodKind {
        self.method.unwrap_or(if !precision.is_integer() {
            MethodKind::Fp8Mse
        } else {
            self.integer_default.unwrap_or(MethodKind::Mse)
        })
    }

    /// `--compare-methods` other than the method a model of `precision` is quantized with, by name: the tables also
    /// quantized and evaluated beside it.
    pub fn compared(&self, precision: qdq::Precision) -> Vec<String> {
        let main = self.method_for(precision);
        self.compare.iter().filter(|&&k| k != main).map(|k| k.name().to_owned()).collect()
    }

    /// These settings with `kind` as the integer pairs' method where --calibrate-method names none.
    pub fn with_integer_default(&self, kind: MethodKind) -> MethodSettings {
        MethodSettings { integer_default: Some(kind), ..self.clone() }
    }

    /// The methods of a run quantizing with each of `precisions` (the first makes the main model): the first's
    /// method, each of `compare` once, then the others' ([`MethodSettings::method_for`]). A method option that none
    /// of them reads is an error naming it (a mistyped or forgotten `--calibrate-method` would otherwise pass
    /// unnoticed). While the task's own method is not known yet (no --calibrate-method and no
    /// [`MethodSettings::integer_default`]), an option of a method a task may still choose passes: the task's
    /// settings check again. fp8-mse prices the first float8 format among `precisions` (E4M3FN without one).
    pub fn methods(&self, precisions: &[qdq::Precision]) -> Result<Vec<Method>> {
        let kinds = self.kinds(precisions);
        let mut may_run = kinds.clone();
        if self.method.is_none() && self.integer_default.is_none() {
            may_run.extend(crate::tasks::Task::INTEGER_METHODS.iter().filter(|k| !kinds.contains(k)));
        }
        let unused = |flag: &str, value: String, wants: &[MethodKind]| -> Error {
            let names = |ks: &[MethodKind]| ks.iter().map(|k| k.name()).collect::<Vec<_>>().join(" or ");
            Error::Usage(format!(
                "{flag}{value} is an option of the {} method, and this run computes {} only: add --calibrate-method {} \
                 or --compare-methods {}, or leave {flag} out",
                names(wants),
                names(&kinds),
                wants[0],
                wants[0]
            ))
        };
        if let Some(p) = self.percentile
            && !may_run.contains(&MethodKind::Percentile)
        {
            return Err(unused("--percentile", format!(" {p}"), &[MethodKind::Percentile]));
        }
        if let Some(n) = self.num_quantized_bins
            && !may_run.contains(&MethodKind::Entropy)
        {
            return Err(unused("--num-quantized-bins", format!(" {n}"), &[MethodKind::Entropy]));
        }
        if self.symmetric && !may_run.iter().any(|k| matches!(k, MethodKind::MinMax | MethodKind::Percentile)) {
            return Err(unused("--symmetric", String::new(), &[MethodKind::MinMax, MethodKind::Percentile]));
        }
        let d = MethodOptions::default();
        let options = MethodOptions {
            percentile: self.percentile.unwrap_or(d.percentile),
            symmetric: self.symmetric,
            num_quantized_bins: self.num_quantized_bins.unwrap_or(d.num_quantized_bins),
            float8: precisions
                .iter()
                .find_map(|p| match p.grid() {
                    qdq::Grid::Float8(q) => q.float8(),
                    qdq::Grid::Integer => None,
                })
                .unwrap_or_default(),
        };
        kinds.into_iter().map(|k| Ok(Method::new(k, &options)?)).collect()
    }

    /// The first precision's method, each of `compare`, then the other precisions' methods, each once.
    fn kinds(&self, precisions: &[qdq::Precision]) -> Vec<MethodKind> {
        let first = precisions.first().copied().unwrap_or(qdq::Precision::Int8);
        let others = precisions.iter().skip(1).map(|&p| self.method_for(p));
        let mut kinds: Vec<MethodKind> = vec![];
        for k in std::iter::once(self.method_for(first)).chain(self.compare.iter().copied()).chain(others) {
            if !kinds.contains(&k) {
                kinds.push(k);
            }
        }
        kinds
    }
}

/// Calibration settings shared by `qdq calibrate`, `qdq e2e` and `qdq tune`.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", command(next_help_heading = "Calibration"))]
pub struct CalibSettings {
    /// Calibration data [e2e: default --dataset]
    ///
    /// SQuAD JSON, or for any model .npz (arrays named after the model inputs), .npy (token ids), text lines (a tab
    /// separates a pair) or JSONL (`{"text": ..., "text_pair": ...}`). Calibrating on train data and evaluating on
    /// dev is the sound protocol.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub calibration_data: Option<PathBuf>,
    /// Calibration questions or inputs, the first N (0 = all) [default: 100; embeddings: 2000]
    ///
    /// 100 is the seed scripts' default. An embedding model takes 2000 by default: questions are short, and its
    /// ranges need more tokens than 100 give (docs/QUANTIZATION.md). 0 takes every one in the file: a SQuAD training
    /// set's 87,599 questions take hours on a CPU.
    #[cfg_attr(feature = "cli", arg(long, value_name = "N"))]
    pub cal_num: Option<usize>,
    /// Execution provider calibration runs on
    ///
    /// It runs the FP32 model with its tensors to calibrate exposed.
    #[cfg_attr(
        feature = "cli",
        arg(id = "cal_ep", long = "cal-ep", default_value = "cpu", value_name = "EP", hide_short_help = true)
    )]
    pub ep: Ep,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub methods: MethodSettings,
    /// Histogram bins per tensor [default: 2048]
    ///
    /// An error when every method of the run is minmax (no histogram).
    #[cfg_attr(feature = "cli", arg(long, value_name = "N", hide_short_help = true))]
    pub num_bins: Option<usize>,
    /// Calibration sessions side by side on the CPU EP
    ///
    /// Each runs on its share of --threads, the batches dealt to them in turn, each folding its outputs into
    /// statistics of its own, merged exactly at the end: the ranges are the same whatever the number, and with the
    /// same number calib_state.json is the same from run to run. While one session folds, another runs. Default: 2
    /// (1 on one core) for a model of at most 512 MiB, else 1: each session holds its own copy of the weights.
    /// Always 1 on other EPs and with a moving-average calibrator (its result depends on batch order).
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "N", value_parser = crate::settings::parsers::positive, hide_short_help = true)
    )]
    pub cal_workers: Option<usize>,
}

impl CalibSettings {
    /// These settings with `kind` as the integer pairs' method where --calibrate-method names none
    /// ([`MethodSettings::with_integer_default`]).
    pub fn with_integer_default(&self, kind: MethodKind) -> CalibSettings {
        CalibSettings { methods: self.methods.with_integer_default(kind), ..self.clone() }
    }

    /// The calibration options: the methods, and a session on [`CalibSettings::ep`] otherwise as `base`
    /// ([`calibration_session`]).
    ///
    /// `precisions`: those of the models made from the ranges ([`MethodSettings::methods`]).
    pub fn options(
        &self,
        batch: usize,
        base: &SessionConfig,
        precisions: &[qdq::Precision],
    ) -> Result<CalibrateOptions> {
        let methods = self.methods.methods(precisions)?;
        if let Some(n) = self.num_bins
            && !methods.iter().any(|m| m.needs_signed_histogram() || m.needs_abs_histogram())
        {
            return Err(Error::Usage(format!(
                "--num-bins {n} sizes the histograms, and minmax reads none: give a histogram method (--calibrate-method \
                 or --compare-methods percentile, entropy, mse or distribution), or leave --num-bins out"
            )));
        }
        Ok(CalibrateOptions {
            batch,
            methods,
            num_bins: self.num_bins.unwrap_or(calib::CollectOptions::default().num_bins),
            session: calibration_session(&self.ep, base),
            workers: self.cal_workers,
            reading: None,
        })
    }
}
