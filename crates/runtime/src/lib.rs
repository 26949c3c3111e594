//! `runtime`: the execution-provider (EP) abstraction over [`ort`].
//!
//! What this crate owns:
//! - finding and loading the ONNX Runtime shared library ([`locate_library`], [`init`]);
//! - the typed [`Ep`] enum with each provider's options, and turning it into an `ort` session;
//! - running a model on named `i64` inputs and handing back `f32` outputs, or handing tensors to an [`Observer`]
//!   while the run computes them ([`observe`]);
//! - what this CPU offers ONNX Runtime's integer kernels ([`int8_dot_product`]);
//! - its bf16 matrix instructions, which make bf16 OpenVINO's default float precision ([`bf16_matmul`]);
//! - reading ONNX Runtime's profiler output: kernel time per operator type ([`OpTimes`]).
//!
//! Invariants:
//! - We never fall back to another EP silently. An EP the loaded library lacks, or that fails to register, is an
//!   [`Error::EpUnavailable`] / [`Error::EpRegistration`] unless the caller set [`SessionConfig::allow_fallback`], and
//!   then [`Session::fallback`] says so, for the caller to print.
//! - The library is loaded with `ort::init_from` (never the panicking `ort::init`), once per process.
//! - This crate knows nothing of SQuAD, calibration or Q/DQ: it takes model bytes and arrays.
//!
//! What it offers the crates that use it: `init` (the library and its EPs), `plugin` (EPs from plugin libraries,
//! OpenVINO's and QNN's: `register` once per process (a known package's library under its EP's name, which QNN's takes
//! as its own), `given` / `known_places` where each EP's package is looked for (a plugin that registers but offers no
//! device of its kind on this machine is named as such, not as missing), `devices`; once one is registered, CPU-EP
//! sessions are pinned to the CPU EP's device, since ONNX Runtime's automatic selection would pick the plugin's; a
//! plugin EP's session takes the whole graph or fails with `EpPartial`, the nodes read from ONNX Runtime's verbose
//! placement log, with the EP's own reason where it has one: `refusal_hint`), `Ep` (`FromStr`; `capabilities`: one row
//! per EP, what qdq must know to run it (device kind, plugin package, static shapes, timed, FP32 on the CPU EP, reads
//! Q/DQ itself, a default float precision of its own), which the predicates below read, so a new EP fills one row;
//! `OpenVinoOptions` and its `load_config`; `QnnOptions` (backend, raw options, `DEFAULT_SOC` named for the HTP unless
//! given); `is_timed` (and `is_timed_name` for a recorded EP name) / `fp32_on_cpu` (QNN: no speed from the emulator,
//! FP32 and calibration on the CPU EP); QNN's one device is taken whatever its kind (`ANY_DEVICE`); precision switches
//! `set_precision`, `without_int8`, `for_int8_model`; `with_seed_env`, the one place that reads the seeds'
//! `ORT_*_ENABLE` variables; `default_float`: the EP as its users run FP32 when nobody sets a precision, where that
//! differs (OpenVINO's CPU at bf16 given `bf16_matmul`, its GPU at f16, TensorRT / MIGraphX FP16), the baseline of
//! `speedup_default_precision`), `SessionConfig` (`check_available`, `for_int8_model`, `side_by_side`: the configs of
//! sessions that share the cores, for evaluation's `--workers`, calibration's `--cal-workers` and debug's sensitivity),
//! `Session::run_with` (borrowed outputs, the caller's error type; float16 outputs handed over widened;
//! `Session::feed_zeros` names inputs a run leaves out, fed zeros of their declared shape), `ModelSource` (bytes, or a
//! file ONNX Runtime reads itself with its external data: models over 2 GiB), `observe` (`Observer`,
//! `Session::open_observed`: the custom operator `ai.qdq.observe:Observe`, whose kernel hands its float32 / float16
//! input to the session's observer during the run; calibration on the CPU EP reads its tensors through it instead of
//! extra graph outputs), `int8_dot_product` (the CPU's 8-bit dot-product instructions ONNX Runtime's integer kernels
//! use: recorded in results.json, since INT8 speed-ups on one kind of CPU do not carry over to the other),
//! `bf16_matmul` (AMX or AVX512-BF16: whether OpenVINO's own default precision is bf16 here), `OpTimes` (ONNX Runtime's
//! profile, which `SessionConfig::profile` starts and `Session::end_profiling` ends, summed per operator type and
//! provider over the runs after the warm-up ones: the format is ONNX Runtime's, so it is read here; pipeline's
//! `speed::profile_ops` turns it into `--profile-ops`' per-feature `OpProfile`).

mod cpu;
mod ep;
mod library;
pub mod observe;
pub mod plugin;
mod profile;
mod session;
mod tensor;

pub use cpu::{CpuKind, bf16_matmul, int8_dot_product};
pub use ep::{Capabilities, Ep, MiGraphXOptions, OpenVinoOptions, QnnOptions, TensorRtOptions};
pub use library::{Install, LIBRARY_ENV, OrtInfo, available_providers, init, locate_library};
pub use observe::Observer;
pub use plugin::PLUGIN_ENV;
pub use profile::{OpTime, OpTimes};
pub use session::{IoInfo, ModelSource, OptLevel, OutputRef, Session, SessionConfig, TensorKind, threads_or_cores};

use std::path::PathBuf;

/// The ONNX Runtime release qdq is built and tested against (`ort` 2.0.0-rc.15 speaks its API 31): what the messages
/// on a missing library tell to install.
pub const ORT_VERSION: &str = "1.31.1";

/// Errors of the runtime crate. Each one names the library, EP, model or tensor concerned.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No library where one was looked for: `searched` says where, `advice` how to get one for this installation.
    #[error("ONNX Runtime library not found: {searched}. {advice}")]
    LibraryNotFound { searched: String, advice: String },
    #[error("cannot load ONNX Runtime from {path}: {reason}")]
    LibraryLoad { path: PathBuf, reason: String },
    /// Loading failed earlier in this process (the library is loaded once): that failure, as it was said.
    #[error("{0}")]
    Unavailable(String),
    #[error(
        "execution provider {requested} is not in the loaded ONNX Runtime ({library}); it provides: {available}. {hint}"
    )]
    EpUnavailable { requested: String, library: String, available: String, hint: String },
    #[error("execution provider plugin {path}: {reason}")]
    Plugin { path: PathBuf, reason: String },
    /// A plugin EP that cannot run every node (ONNX Runtime's fallback to CPU for them is off): the nodes.
    #[error(
        "{ep} cannot run every node of {model}: {count} would run on the CPU EP instead ({nodes}). --allow-fallback runs \
         the model on the CPU EP"
    )]
    EpPartial { ep: String, model: String, count: usize, nodes: String },
    #[error("execution provider {ep} failed to register: {reason}")]
    EpRegistration { ep: String, reason: String },
    #[error("invalid option for {ep}: {reason}")]
    EpOption { ep: String, reason: String },
    #[error("cannot create an ONNX Runtime session for {model}: {reason}")]
    Session { model: String, reason: String },
    #[error("model {model} needs input `{input}`, which was not given (given: {given})")]
    MissingInput { model: String, input: String, given: String },
    #[error("model {model} input `{input}`: {reason}")]
    BadInput { model: String, input: String, reason: String },
    #[error("model {model} has no output `{output}` (outputs: {available})")]
    MissingOutput { model: String, output: String, available: String },
    #[error("model {model} output `{output}`: {reason}")]
    BadOutput { model: String, output: String, reason: String },
    #[error("running {model} failed: {reason}")]
    Run { model: String, reason: String },
    #[error("ONNX Runtime profile {path}: {reason}")]
    Profile { path: PathBuf, reason: String },
    #[error("ONNX Runtime error: {0}")]
    Ort(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<ort::Error> for Error {
    fn from(e: ort::Error) -> Self {
        Error::Ort(e.to_string())
    }
}
