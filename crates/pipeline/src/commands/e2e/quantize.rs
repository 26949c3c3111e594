//! The e2e run's quantization: smoothing, calibration and Q/DQ placement (static), or run-time input quantization
//! (dynamic); and what results.json says of it.

use std::path::PathBuf;
use std::time::Instant;

use onnx_ir::Model;

use crate::commands::e2e::config::{E2eConfig, Phases};
use crate::error::{Error, Result};
use crate::inputs::feeds::Feeds;
use crate::model::save_model;
use crate::progress::Progress;
use crate::report::results::{CalibrationSummary, QuantizationSummary};
use crate::steps::calibrate::{Calibration, calibrate, describe_spread, write_tables};
use crate::steps::ops::float_summary;
use crate::steps::output_bias::{correct_output_bias, corrected_output};
use crate::steps::rounding::round_model_weights;
use crate::steps::smooth::smooth_model;

/// Smoothing (when the policy asks for it: the ranges are those of the smoothed model), calibration, the tables,
/// the correction of `shifted`'s mean shift (a classifier's logits, policy `output_bias`), then Q/DQ placement, all
/// on `model` itself. FP32 is evaluated on the original model's file, not the (equivalent in exact arithmetic)
/// smoothed one.
pub(crate) fn quantize_static(
    cfg: &E2eConfig,
    model: Model,
    cal_data: &dyn Feeds,
    shifted: Option<&str>,
    progress: &dyn Progress,
    phases: &mut Phases,
) -> Result<Quantized> {
    let t = Instant::now();
    let (to_quantize, smoothing) = smooth_model(model, &cfg.policy, cal_data, &cfg.calibrate, progress)?;
    if let Some(s) = &smoothing {
        progress.note(&s.describe());
    }
    let (to_quantize, rounding) = round_model_weights(to_quantize, &cfg.policy, cal_data, &cfg.calibrate, progress)?;
    if let Some(r) = &rounding {
        progress.note(&r.describe());
    }
    let tensors = qdq::tensors_to_calibrate(&to_quantize, &cfg.policy)?;
    let cal = calibrate(&to_quantize, &tensors, cal_data, &cfg.calibrate, progress)?;
    if let Some(h) = &cal.halves {
        progress.note(&describe_spread(h));
    }
    write_tables(&cal, &cfg.out, cfg.policy.precision.is_integer())?;
    phases.insert("smoothing_and_calibration".to_owned(), t.elapsed().as_secs_f64());
    let t = Instant::now();
    let main = &cal.tables[0];
    let plan = qdq::plan(&to_quantize, &main.min_max(), &cfg.policy)?;
    let mut to_quantize = to_quantize;
    let output_bias = match corrected_output(&cfg.policy, shifted) {
        Some(o) => correct_output_bias(&mut to_quantize, &cfg.model, &plan, o, cal_data, &cfg.calibrate, progress)?,
        None => None,
    };
    output_bias.iter().for_each(|s| progress.note(&s.describe()));
    // Before the main placement changes the model (each with the corrected bias).
    let (compared, precisions) = quantize_others(cfg, &to_quantize, &cal.tables)?;
    let mut qmodel = to_quantize;
    plan.apply(&mut qmodel)?;
    phases.insert("quantization".to_owned(), t.elapsed().as_secs_f64());
    let calibration = calibration_summary(cfg, &cal);
    let quantization = QuantizationSummary {
        quantized_tensors: plan.tensors.len(),
        embedding_tables: plan.embeddings.len(),
        integer_forms: plan.integer_forms(),
        smoothing: smoothing.as_ref().map(|s| s.describe()),
        weight_rounding: rounding.as_ref().map(|r| r.describe()),
        output_bias: output_bias.as_ref().map(|s| s.describe()),
        skipped: plan.skipped.iter().map(|s| format!("{}: {}", s.tensor, s.reason)).collect(),
        ..summary_base(cfg, &qmodel)
    };
    Ok(Quantized { model: qmodel, calibration: Some(calibration), quantization, compared, precisions })
}

/// What results.json says of the calibration `cal` (its unit set by the task later).
fn calibration_summary(cfg: &E2eConfig, cal: &Calibration) -> CalibrationSummary {
    let non_finite: Vec<String> =
        cal.state.non_finite().into_iter().filter(|(_, c)| c.nan + c.pos_inf + c.neg_inf > 0).map(|(t, _)| t).collect();
    CalibrationSummary {
        data: cfg.calibration_data.display().to_string(),
        questions: cal.questions,
        unit: "questions".to_owned(),
        features: cal.features,
        tensors: cal.tensors.len(),
        method: cal.tables[0].method.clone(),
        seconds: cal.seconds,
        pass: Some(cal.times),
        non_finite_tensors: non_finite,
        also_evaluated: None,
        halves: cal.halves.clone(),
    }
}

/// `--compare-methods`' models: (method, file).
type Compared = Vec<(String, PathBuf)>;

/// The models beside the main one, saved for evaluation: `--compare-methods` (the same placement with each other
/// method's ranges) and `--precision`'s others (the same model and statistics, their own policy and method).
fn quantize_others(
    cfg: &E2eConfig,
    model: &Model,
    tables: &[calib::RangeTable],
) -> Result<(Compared, Vec<OtherPrecision>)> {
    let table = |name: &str| {
        tables.iter().find(|t| t.method == name).ok_or_else(|| Error::Internal(format!("no {name} table")))
    };
    let mut compared = vec![];
    for name in &cfg.compare {
        let (m, _) = qdq::quantize(model, &table(name)?.min_max(), &cfg.policy)?;
        let path = cfg.out.join(format!("model_qdq_{name}.onnx"));
        save_model(&m, &path)?;
        compared.push((name.clone(), path));
    }
    let mut precisions = vec![];
    for also in &cfg.also {
        let (m, plan) = qdq::quantize(model, &table(&also.method)?.min_max(), &also.policy)?;
        let path = cfg.out.join(format!("model_qdq_{}.onnx", also.precision));
        save_model(&m, &path)?;
        let precision = also.policy.precision.to_string();
        precisions.push(OtherPrecision { precision, method: also.method.clone(), path, pairs: plan.pair_count() });
    }
    Ok((compared, precisions))
}

/// [`qdq::quantize_dynamic`]: no calibration, so no tables and no smoothing.
pub(crate) fn quantize_dynamic(cfg: &E2eConfig, model: &Model, phases: &mut Phases) -> Result<Quantized> {
    let t = Instant::now();
    let (qmodel, plan) = qdq::quantize_dynamic(model, &cfg.policy)?;
    phases.insert("quantization".to_owned(), t.elapsed().as_secs_f64());
    tracing::info!("{}", plan.to_string().lines().next().unwrap_or_default());
    let quantization = QuantizationSummary {
        quantized_tensors: plan.matmuls.len(),
        embedding_tables: plan.embeddings.len(),
        integer_forms: plan.contrib.lines(),
        ..summary_base(cfg, &qmodel)
    };
    Ok(Quantized { model: qmodel, calibration: None, quantization, compared: vec![], precisions: vec![] })
}

/// What the quantization step made: the INT8 model, its summaries, and the models of `--compare-methods` (method,
/// file).
pub(crate) struct Quantized {
    pub model: Model,
    pub calibration: Option<CalibrationSummary>,
    pub quantization: QuantizationSummary,
    pub compared: Vec<(String, PathBuf)>,
    pub precisions: Vec<OtherPrecision>,
}

/// A model of another `--precision`, saved for evaluation.
pub(crate) struct OtherPrecision {
    /// The policy's precision (`fp8-e4m3fn`, ...).
    pub precision: String,
    pub method: String,
    pub path: PathBuf,
    pub pairs: usize,
}

/// The MatMul-like work the quantized model still does in float, said once in the log (and kept for results.json).
fn float_work(qmodel: &Model) -> Vec<String> {
    let nodes = qdq::coverage(qmodel).float_matmul_like;
    if !nodes.is_empty() {
        tracing::warn!(
            "MatMul-like work left in float: {} (report.md and results.json list the nodes)",
            float_summary(&nodes)
        );
    }
    nodes.iter().map(ToString::to_string).collect()
}

/// The precision a run's quantized model is named by (results.json's `precision`; the table's `A16W8 (QDQ)`): the
/// policy's, but 16-bit activations beside 8-bit weights (the qnn preset) are `a16w8`, not int8.
pub(crate) fn precision_name(policy: &qdq::Policy) -> String {
    if policy.activations == qdq::Activations::Int16Symmetric && policy.precision.is_integer() {
        "a16w8".to_owned()
    } else {
        policy.precision.to_string()
    }
}

/// What every quantization summary says of `qmodel`: mode, preset, Q/DQ counts and the MatMul-like work left in float.
fn summary_base(cfg: &E2eConfig, qmodel: &Model) -> QuantizationSummary {
    let counts = qdq::QdqCounts::of(qmodel);
    QuantizationSummary {
        mode: cfg.mode,
        precision: precision_name(&cfg.policy),
        policy: cfg.policy_choice.preset.to_string(),
        policy_chosen_by: cfg.policy_choice.chosen_by.clone(),
        target_cpu: cfg.policy_choice.target_cpu.map(|c| c.to_string()),
        quantized_tensors: 0,
        quantize_nodes: counts.quantize,
        dequantize_nodes: counts.dequantize,
        embedding_tables: 0,
        float_matmul_like: float_work(qmodel),
        integer_forms: vec![],
        smoothing: None,
        weight_rounding: None,
        output_bias: None,
        skipped: vec![],
    }
}
