//! The models a command reads and writes: which file a path names, how an FP32 model is loaded for quantization,
//! how a model the user gets is saved, and what a model holds.

use std::path::{Path, PathBuf};

use crate::disk::{read_bounded, write_atomic};
use crate::error::{Error, Result};

/// The model file `path` names: the file itself, or in a directory (a Hugging Face export folder) its model.onnx,
/// else its only .onnx file; or its `onnx/` the same way (the Hugging Face hub layout, tokenizer and configs beside
/// `onnx/`). A folder with a model in both is refused, naming both: which one a user means cannot be told (a run's
/// output written into the folder would otherwise be taken for its model).
pub fn resolve_model(path: &Path) -> Result<PathBuf> {
    if !path.is_dir() {
        return Ok(path.to_path_buf());
    }
    let bad = |reason: String| Error::Input { path: path.to_path_buf(), reason };
    let onnx_in = |dir: &Path| -> Result<Vec<PathBuf>> {
        let Ok(entries) = std::fs::read_dir(dir) else { return Ok(vec![]) };
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "onnx") && p.is_file())
            .collect();
        found.sort();
        Ok(found)
    };
    let mut found = vec![];
    for dir in [path.to_path_buf(), path.join("onnx")] {
        if dir.join("model.onnx").is_file() {
            found.push(dir.join("model.onnx"));
            continue;
        }
        match onnx_in(&dir)?.as_slice() {
            [] => continue,
            [one] => found.push(one.clone()),
            many => {
                return Err(bad(format!(
                    "{} holds {} .onnx files and no model.onnx; name one: {}",
                    dir.display(),
                    many.len(),
                    many.iter()
                        .filter_map(|p| p.file_name())
                        .map(|n| n.to_string_lossy())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
    }
    match found.as_slice() {
        [] => Err(bad("a directory without model.onnx or any .onnx file (nor in onnx/)".into())),
        [one] => Ok(one.clone()),
        [first, second, ..] => Err(bad(format!(
            "holds a model at {} and another at {}: give --model the file meant",
            first.display(),
            second.display()
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
    name_nodes(&mut model, path);
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

/// Gives each node of `model` (read from `path`) without a name of its own one ([`onnx_ir::GraphExt::name_nodes`]),
/// and says so: exclusions, tune's sensitivity, `debug`'s pairs and the plan's reports refer to nodes by name.
pub fn name_nodes(model: &mut onnx_ir::Model, path: &Path) {
    let named = onnx_ir::GraphExt::name_nodes(model.graph_mut());
    if named > 0 {
        tracing::info!("{}: {named} nodes without a name of their own named after their op", path.display());
    }
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

/// The model's metadata key naming the kind of CPU its layout was made for ([`record_target_cpu`]).
pub const TARGET_CPU_KEY: &str = "qdq.target_cpu";

/// Records in `model`'s metadata the kind of CPU its layout was made for (`amx`, `avx512-bf16`, `vnni`, `avx2`), where
/// the preset's layout depends on it: whoever serves the model can tell what it was made for.
pub fn record_target_cpu(model: &mut onnx_ir::Model, cpu: Option<runtime::CpuKind>) {
    let Some(cpu) = cpu else { return };
    let props = &mut model.proto.metadata_props;
    props.retain(|e| e.key() != TARGET_CPU_KEY);
    props.push(onnx_ir::proto::StringStringEntryProto {
        key: Some(TARGET_CPU_KEY.to_owned()),
        value: Some(cpu.to_string()),
    });
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

/// The tokenizer a run read its text with, to be written beside the models it saves.
pub struct TokenizerFiles<'a> {
    /// A Hugging Face tokenizer.json (taken first), else the WordPiece vocabulary.
    pub tokenizer_json: Option<&'a Path>,
    pub vocab: &'a Path,
    /// Lower-cased: a vocab.txt of a cased run is written with a tokenizer_config.json saying `do_lower_case: false`.
    pub lowercase: bool,
}

/// Writes the tokenizer beside the models saved in `dir` under the names qdq finds beside a model (tokenizer.json,
/// else vocab.txt with tokenizer_config.json for a cased vocabulary), so `qdq eval --model dir/model_qdq.onnx` needs
/// no --vocab. A file already there with the same bytes is left; a missing source (inputs that are not text) writes
/// nothing.
pub fn carry_tokenizer(t: &TokenizerFiles, dir: &Path) -> Result<()> {
    let (source, name) = match t.tokenizer_json {
        Some(json) => (json, "tokenizer.json"),
        None => (t.vocab, "vocab.txt"),
    };
    if !source.is_file() {
        return Ok(());
    }
    copy_unless_same(source, &dir.join(name))?;
    if t.tokenizer_json.is_none() {
        let stale = dir.join("tokenizer.json");
        if stale.is_file() {
            tracing::warn!(
                "{} is not the tokenizer this run used ({}), and qdq takes it before vocab.txt: give --vocab when \
                 evaluating the models here",
                stale.display(),
                source.display()
            );
        }
        if !t.lowercase {
            write_atomic(&dir.join("tokenizer_config.json"), b"{\n  \"do_lower_case\": false\n}\n")?;
        }
    }
    Ok(())
}

/// `qdq quantize`: the tokenizer files found beside the model read (`from`) written beside the model written (`to`),
/// where that directory has none of its own (one there that differs is named in a warning, and kept).
pub fn carry_tokenizer_files(from: &Path, to: &Path) -> Result<()> {
    let (from, to) = (crate::disk::parent_dir(from), crate::disk::parent_dir(to));
    for name in ["tokenizer.json", "vocab.txt", "tokenizer_config.json"] {
        let (source, dest) = (from.join(name), to.join(name));
        if !source.is_file() {
            continue;
        }
        if !dest.exists() {
            copy_unless_same(&source, &dest)?;
        } else if !same_bytes(&source, &dest) {
            tracing::warn!(
                "{} differs from the model's {}: kept; give --vocab / --token when evaluating the quantized model",
                dest.display(),
                source.display()
            );
        }
    }
    Ok(())
}

/// Copies `source` to `dest` (atomically) unless `dest` is the same file or has the same bytes.
fn copy_unless_same(source: &Path, dest: &Path) -> Result<()> {
    if same_bytes(source, dest) {
        return Ok(());
    }
    write_atomic(dest, &read_bounded(source)?)
}

/// True when both files exist and hold the same bytes (or are one file).
fn same_bytes(a: &Path, b: &Path) -> bool {
    if let (Ok(x), Ok(y)) = (a.canonicalize(), b.canonicalize())
        && x == y
    {
        return true;
    }
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).ok();
    size(a).is_some() && size(a) == size(b) && read_bounded(a).ok() == read_bounded(b).ok()
}

/// Whether graph `g` has float8 Q/DQ pairs (a float8 zero point or quantized initializer).
pub fn has_float8_pairs(g: &onnx_ir::proto::GraphProto) -> bool {
    g.initializer.iter().any(|t| qdq::QuantType::from_onnx_code(t.data_type()).is_some_and(|q| q.is_float8()))
}

/// `cfg` for a model with float8 pairs (`float8`): on the CPU EP (or falling back to it), ONNX Runtime's basic level
/// at most, unless the level was chosen.
/// ONNX Runtime 1.31.1's CPU EP fuses float8 pairs into integer kernels that refuse them at its extended level and
/// above, and with those fusions off its other extended rewrites change an FP8 model's answers where the basic level
/// scores as no optimisation does (docs/QUANTIZATION.md).
pub fn session_for(cfg: &runtime::SessionConfig, float8: bool) -> runtime::SessionConfig {
    use runtime::OptLevel;
    let mut cfg = cfg.clone();
    if float8 {
        cfg.cpu_opt_level = OptLevel::Basic;
        if !cfg.opt_level_given
            && cfg.ep == runtime::Ep::Cpu
            && matches!(cfg.opt_level, OptLevel::Extended | OptLevel::All)
        {
            cfg.opt_level = OptLevel::Basic;
        }
    }
    cfg
}

/// A session on `model` ([`runtime::Session::open`]) as [`session_for`] says (a model that cannot be read here is
/// left to the session to name).
pub fn open_session(
    model: runtime::ModelSource<'_>,
    name: &str,
    cfg: &runtime::SessionConfig,
) -> runtime::Result<runtime::Session> {
    let graph = match model {
        runtime::ModelSource::File(p) => onnx_ir::Model::load_graph_only(p),
        runtime::ModelSource::Bytes(b) => onnx_ir::Model::from_bytes(b, name),
    };
    let float8 = graph.is_ok_and(|m| has_float8_pairs(m.graph()));
    runtime::Session::open(model, name, &session_for(cfg, float8))
}
