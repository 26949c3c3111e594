//! The models a command reads and writes: which file a path names, how an FP32 model is loaded for quantization,
//! how a model the user gets is saved, and what a model holds.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The model file `path` names: the file itself, or in a directory (a Hugging Face export folder) its model.onnx,
/// else its only .onnx file.
pub fn resolve_model(path: &Path) -> Result<PathBuf> {
    if !path.is_dir() {
        return Ok(path.to_path_buf());
    }
    if path.join("model.onnx").is_file() {
        return Ok(path.join("model.onnx"));
    }
    let bad = |reason: String| Error::Input { path: path.to_path_buf(), reason };
    let entries = std::fs::read_dir(path).map_err(|e| bad(e.to_string()))?;
    let onnx: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "onnx") && p.is_file())
        .collect();
    match onnx.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(bad("a directory without model.onnx or any .onnx file".into())),
        many => Err(bad(format!(
            "a directory with {} .onnx files and no model.onnx; name one: {}",
            many.len(),
            many.iter().filter_map(|p| p.file_name()).map(|n| n.to_string_lossy()).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// Loads an FP32 model to calibrate, smooth or quantize, with what is constant by construction folded into
/// initializers ([`onnx_ir::fold_constants`]: weights written as `Constant` nodes, or stored transposed behind a
/// `Transpose`, or in float16 behind a `Cast`), so qdq's rules, which look for MatMuls whose weight is an initializer,
/// see every weight whatever the exporter; a model converted to float16 computes in float32 again
/// ([`onnx_ir::upcast_float16`]); an export older than opset 13 is carried over to it ([`onnx_ir::upgrade_default_opset`]:
/// per-channel Q/DQ needs it). One line says what was folded, widened or carried over; the file itself is not changed. A model
/// that is quantized already (activation `QuantizeLinear`s or integer kernels: qdq's or ORT's output, a QAT export)
/// is refused, naming what it holds ([`qdq::quantized_ops`]): quantizing it again would call an INT8 model FP32.
/// `DequantizeLinear` alone (weights stored as int8) is allowed.
pub fn load_for_quantization(path: &Path) -> Result<onnx_ir::Model> {
    let mut model = onnx_ir::Model::load(path)?;
    if let Some(held) = quantized_ops_text(&model) {
        return Err(Error::Input {
            path: path.to_path_buf(),
            reason: format!(
                "the model is quantized already ({held}): qdq calibrates and quantizes FP32 models; give the FP32 \
                 model it was made from (`qdq eval` runs this one as it is)"
            ),
        });
    }
    let folded = onnx_ir::fold_constants(model.graph_mut())?;
    if folded.nodes() > 0 {
        tracing::info!(
            "{}: folded {} constant nodes into initializers ({}), so the weights behind them are seen as weights",
            path.display(),
            folded.nodes(),
            folded.describe()
        );
    }
    let up = onnx_ir::upcast_float16(model.graph_mut())?;
    if up.changed() {
        tracing::info!(
            "{}: computes in float16: calibrated and quantized in float32 ({} float16 tensors widened, exactly; {} casts \
             to float16 now to float32; {} declared types), so the INT8 model computes in float32 outside its \
             quantized ops (TensorRT's and MIGraphX's fp16 switches run those in float16)",
            path.display(),
            up.tensors,
            up.casts,
            up.declared
        );
    }
    // Per-channel Q/DQ needs opset 13: an older export is carried over before any work, so a node that cannot be is
    // an error now, not after calibration.
    if let Some(up) = onnx_ir::upgrade_default_opset(&mut model, qdq::MIN_QDQ_OPSET)
        .map_err(|e| Error::Input { path: path.to_path_buf(), reason: e.to_string() })?
    {
        tracing::info!(
            "{}: opset {} raised to {}, which per-channel Q/DQ needs ({}; the same computation)",
            path.display(),
            up.from,
            up.to,
            up.describe()
        );
    }
    Ok(model)
}

/// Saves a model the user gets ([`onnx_ir::Model::save`]): inline, or with its large tensors in a side file when it
/// would pass protobuf's 2 GiB limit inline, and then one line says where they went.
pub fn save_model(model: &onnx_ir::Model, path: &Path) -> Result<()> {
    if let Some(side) = model.save(path)?.external_data {
        tracing::info!(
            "{}: over protobuf's 2 GiB limit inline, so its large tensors went to {} beside it (ONNX Runtime reads both; \
             keep them together)",
            path.display(),
            side.display()
        );
    }
    Ok(())
}

/// What the model at `p` takes on disk, in bytes: the file and the external data files it references (0 if it
/// cannot be read).
pub fn model_size(p: &Path) -> u64 {
    let len = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let external = onnx_ir::Model::load_graph_only(p).map(|m| m.external_files().map(len).sum()).unwrap_or(0);
    len(p) + external
}

/// The quantized ops `model` holds, as "37 MatMulIntegerToFloat, 25 QuantizeLinear"; `None` for a float model.
pub fn quantized_ops_text(model: &onnx_ir::Model) -> Option<String> {
    let quantized = qdq::quantized_ops(model);
    let held: Vec<String> = quantized.iter().map(|(op, n)| format!("{n} {op}")).collect();
    (!held.is_empty()).then(|| held.join(", "))
}
