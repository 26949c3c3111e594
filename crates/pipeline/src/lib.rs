//! `pipeline`: the one crate that ties the others together: calibrate → quantize → evaluate.
//!
//! Data flows one way: SQuAD features (squad) run through the model (runtime); the activations feed the collectors
//! (calib); the ranges drive Q/DQ placement (qdq); both models are run again (runtime) and scored (squad-metrics).
//!
//! The `qdq` binary fills the typed settings ([`RuntimeSettings`], [`DataSettings`], [`CalibSettings`],
//! [`MethodSettings`], [`PolicySettings`]; with feature `cli` they declare their own flags) into a job
//! ([`E2eJob`], [`CalibrateJob`], [`QuantizeJob`], [`EvalJob`], [`DebugJob`], [`TuneJob`], [`inspect`]) and prints the [`Report`] it returns.
//!
//! Invariants:
//! - Memory is flat in the amount of data: calibration folds each batch into fixed-size statistics; evaluation turns
//!   an example's logits into an answer as soon as its last window is scored.
//! - Every file is written atomically ([`write_atomic`]: unnamed temporary file, synced, linked into place, umask
//!   mode).
//! - Errors name the file, tensor or setting concerned; nothing here panics on user input.

mod calibrate;
mod classify;
mod data;
mod debug;
mod e2e;
mod evaluate;
mod inputs;
mod jobs;
mod plots;
mod progress;
mod provenance;
mod report;
mod settings;
mod speed;
mod spread;
mod tune;

pub use calibrate::{
    CalibrateOptions, Calibration, Pass, PassTimes, Reading, SIDE_BY_SIDE_MAX_BYTES, Smoothing, calibrate,
    collect_stats, pass_workers, smooth_model, write_tables,
};
pub use data::{Batches, Corpus, DataConfig, InputRoles, Score, detect_inputs, detect_io, is_squad_model};
pub use debug::{Confirmation, DebugJob, DebugReport, LogitAgreement, TensorError, debug_models};
pub use e2e::{E2eConfig, e2e};
pub use inputs::{Feeds, InputSet, TextInputs};
pub use jobs::{
    CalibrateJob, CalibrateReport, E2eJob, E2eReport, EvalJob, EvalReport, Inspection, QuantizeJob, QuantizeReport,
    Report, calibrate_to_dir, e2e_job, evaluate_file, inspect, quantize_file,
};
/// clap value parsers of the settings' flags, for the binary's own flags too.
#[cfg(feature = "cli")]
pub use settings::cli as value_parsers;
pub use settings::{
    CalibSettings, DataSettings, ExplicitIo, IoNames, MethodSettings, Mode, PolicyChoice, PolicySettings,
    RuntimeSettings, SquadVersion, calibration_session, describe_policies, preset_for_ep, resolve_model,
};
pub use speed::{OpProfile, OpShare, Speedup};
pub use tune::{Candidate, TuneJob, TuneReport, tune};
// The types a caller of the jobs names: EPs and their options, range methods.
pub use calib::{MethodKind, MethodOptions};
pub use evaluate::{EvalOptions, Evaluation, evaluate};
/// SIGINT / SIGTERM held while outputs are put in place (the binary calls `signals::defer_during_commits`).
pub use files::signals;
pub use progress::{LogProgress, NoProgress, Progress};
pub use provenance::{GIT_COMMIT, Invocation, Machine, OnnxRuntime, Provenance};
pub use report::{
    Agreement, CalibrationSummary, ClassifierEval, ClassifierModel, E2eResults, Latency, ModelResult, OpProfiles,
    QuantizationSummary, op_table,
};
pub use runtime::{Ep, OptLevel, OrtInfo, SessionConfig};

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Errors of the pipeline: each wraps the failing crate's error or names the file concerned.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Model(#[from] onnx_ir::Error),
    #[error(transparent)]
    Runtime(#[from] runtime::Error),
    #[error(transparent)]
    Calib(#[from] calib::Error),
    #[error(transparent)]
    Qdq(#[from] qdq::Error),
    #[error(transparent)]
    Squad(#[from] squad::Error),
    #[error("{path}: {reason}")]
    Input { path: PathBuf, reason: String },
    #[error("cannot write {path}: {reason}")]
    Output { path: PathBuf, reason: String },
    #[error("{0}")]
    Config(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Writes `bytes` to `path` atomically ([`files::write_atomic`]; missing directories created): readers see the old
/// file or the whole new one, and a killed process leaves no temporary file behind.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let err = |e: std::io::Error| Error::Output { path: path.to_path_buf(), reason: e.to_string() };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(err)?;
    files::write_atomic(path, bytes).map_err(err)
}

/// Creates the output directory `dir` (of option `flag`) and checks that a file can be written in it, before any
/// work: an unwritable `--out` fails at once, not after the run.
pub fn prepare_out_dir(dir: &Path, flag: &str) -> Result<()> {
    create_out_dir(dir, flag)?;
    check_writable(&dir.join(".qdq-write-check"), flag)
}

/// Creates the output directory `dir` of option `flag`; a file already there is named as such.
pub(crate) fn create_out_dir(dir: &Path, flag: &str) -> Result<()> {
    let err = |reason: String| Error::Output { path: dir.to_path_buf(), reason: format!("{flag}: {reason}") };
    // The first existing ancestor that is not a directory (`--out results.json/run1`) is the one to name.
    if let Some(file) = dir.ancestors().find(|a| a.exists()).filter(|a| !a.is_dir()) {
        return Err(err(format!("{} is a file; give a directory for the outputs", file.display())));
    }
    std::fs::create_dir_all(dir).map_err(|e| err(e.to_string()))
}

/// What the model at `p` takes on disk, in bytes: the file and the external data files it references (0 if it
/// cannot be read).
pub(crate) fn model_size(p: &Path) -> u64 {
    let len = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let external = onnx_ir::Model::load_graph_only(p).map(|m| m.external_files().map(len).sum()).unwrap_or(0);
    len(p) + external
}

/// The quantized ops `model` holds, as "37 MatMulIntegerToFloat, 25 QuantizeLinear"; `None` for a float model.
pub(crate) fn quantized_ops_text(model: &onnx_ir::Model) -> Option<String> {
    let quantized = qdq::quantized_ops(model);
    let held: Vec<String> = quantized.iter().map(|(op, n)| format!("{n} {op}")).collect();
    (!held.is_empty()).then(|| held.join(", "))
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

/// Checks, before any work, that a file can be written at `path`: its directory exists and takes a new file (tried
/// with an unnamed temporary file that is discarded), and `path` is not a directory.
pub fn check_writable(path: &Path, flag: &str) -> Result<()> {
    let err = |reason: String| Error::Output { path: path.to_path_buf(), reason: format!("{flag}: {reason}") };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(err(format!("directory {} does not exist", dir.display())));
    }
    if path.is_dir() {
        return Err(err("is a directory".into()));
    }
    let probe = files::AtomicFile::create(path).map_err(|e| err(format!("cannot write: {e}")))?;
    probe.discard().map_err(|e| err(format!("cannot write: {e}")))
}

/// Opens `path` for reading if it is a regular file (a FIFO or a device would block or never end) of at most
/// [`files::MAX_INPUT_BYTES`].
pub(crate) fn open_regular(path: &Path) -> Result<std::fs::File> {
    files::open_regular(path, files::MAX_INPUT_BYTES)
        .map_err(|e| Error::Input { path: path.to_path_buf(), reason: e.to_string() })
}

/// The bytes of `path`, a regular file of at most [`files::MAX_INPUT_BYTES`] ([`files::read_regular`]).
pub fn read_bounded(path: &Path) -> Result<Vec<u8>> {
    files::read_regular(path, files::MAX_INPUT_BYTES)
        .map_err(|e| Error::Input { path: path.to_path_buf(), reason: e.to_string() })
}

/// Writes SQuAD predictions (question id -> answer text, sorted by id) as pretty JSON, atomically.
pub fn write_predictions(path: &Path, predictions: &HashMap<String, String>) -> Result<()> {
    let sorted: BTreeMap<&String, &String> = predictions.iter().collect();
    let json = serde_json::to_vec_pretty(&sorted)
        .map_err(|e| Error::Output { path: path.to_path_buf(), reason: e.to_string() })?;
    write_atomic(path, &json)
}

/// The ONNX Runtime library that would be loaded (`library`, else the default search) and its EPs.
pub fn providers(library: Option<&Path>) -> Result<OrtInfo> {
    Ok(runtime::init(library)?)
}
