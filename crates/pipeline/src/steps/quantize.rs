//! Q/DQ placement from a range table: the table read and checked against the model it is applied to, and the plan.

use std::path::Path;

use onnx_ir::Model;
use qdq::Policy;

use crate::error::{Error, Result};

/// The ranges of the table at `ranges` for quantizing `model` (loaded from `model_path`) with `policy`: any table
/// [`calib::tables::read_ranges`] reads, refused when it was measured on another smoothing of the model, or when an
/// entry the policy needs is bad (an entry it does not need is left out with a warning: ONNX Runtime's tables list
/// every tensor it saw).
pub fn read_table(ranges: &Path, model: &Model, model_path: &Path, policy: &Policy) -> Result<qdq::Ranges> {
    let table = calib::tables::read_ranges(ranges)?;
    // calibrate writes model_smoothed.onnx and the tables one by one: a killed or repeated run can leave a pair from
    // two runs, whose ranges do not describe the model.
    if let Some(want) = &table.model {
        let reason = match qdq::smoothing_fingerprint(model) {
            Some(has) if has == want => None,
            Some(has) => Some(format!(
                "its ranges were measured on the model smoothed as `{want}`, but {} is smoothed as `{has}`: they come \
                 from different runs of qdq calibrate; run it again and quantize the model_smoothed.onnx it writes",
                model_path.display()
            )),
            None => Some(format!(
                "its ranges were measured on a smoothed model, but {} is not smoothed: quantize the model_smoothed.onnx \
                 that qdq calibrate wrote beside this table (or calibrate with --policy-option smooth=off)",
                model_path.display()
            )),
        };
        if let Some(reason) = reason {
            return Err(Error::Input { path: ranges.to_path_buf(), reason });
        }
    }
    if !table.rejected.is_empty() {
        let wanted = qdq::tensors_to_calibrate(model, policy)?;
        for (tensor, why) in &table.rejected {
            if wanted.contains(tensor) {
                let reason = format!("tensor '{tensor}', which the policy quantizes: {why}");
                return Err(Error::Input { path: ranges.to_path_buf(), reason });
            }
            tracing::warn!("{}: tensor '{tensor}' left out ({why}); the policy does not quantize it", ranges.display());
        }
    }
    Ok(table.ranges)
}

/// [`qdq::plan`], a smoothing policy on an unsmoothed model (or a GPTQ policy on weights not rounded) being an error
/// naming `model_path`.
pub fn plan(model: &Model, model_path: &Path, ranges: &qdq::Ranges, policy: &Policy) -> Result<qdq::Plan> {
    // Planned on the original weights, a GPTQ policy would give round-to-nearest's model without a word.
    if qdq::rounding_record(model).is_none() && !qdq::rounding_sites(model, policy)?.is_empty() {
        let reason = "the policy rounds weights by GPTQ (weight_rounding = gptq) but this model's weights were not \
                      rounded: quantize the model `qdq calibrate` wrote beside the ranges (model_smoothed.onnx, or \
                      model_rounded.onnx without smoothing), or pass --policy-option weight_rounding=nearest"
            .to_owned();
        return Err(Error::Input { path: model_path.to_path_buf(), reason });
    }
    qdq::plan(model, ranges, policy).map_err(|e| match e {
        e @ qdq::Error::NotSmoothed { .. } => Error::Input { path: model_path.to_path_buf(), reason: e.to_string() },
        e => e.into(),
    })
}

/// The MatMul-like nodes of a quantized model that still read float inputs, one line each.
pub fn float_matmul_like(model: &Model) -> Vec<String> {
    qdq::coverage(model).float_matmul_like.iter().map(ToString::to_string).collect()
}
