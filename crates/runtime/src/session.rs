//! A model loaded on one execution provider, fed with named `i64` arrays.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ndarray::{ArrayD, ArrayView2};
use ort::session::SessionInputValue;
use ort::session::builder::{GraphOptimizationLevel, SessionBuilder};
use ort::value::{TensorElementType, TensorRef, ValueType};

use crate::library::{environment, init};
use crate::observe::Observer;
use crate::plugin;
use crate::tensor::float_data;
use crate::{Ep, Error, Result};

/// ONNX Runtime graph optimisation level. The seeds disable all optimisation for QDQ models on TensorRT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OptLevel {
    Disable,
    Basic,
    Extended,
    #[default]
    All,
}

impl std::str::FromStr for OptLevel {
    type Err = Error;

    fn from_str(s: &str) -> Result<OptLevel> {
        OptLevel::parse(s)
    }
}

impl OptLevel {
    pub const NAMES: &'static [&'static str] = &["disable", "basic", "extended", "all"];

    /// Its name as `--opt-level` takes it.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// `disable`/`none`/`0`, `basic`/`1`, `extended`/`2`, `all`/`3`/`99`, case-insensitive.
    pub fn parse(s: &str) -> Result<OptLevel> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "disable" | "none" | "0" => OptLevel::Disable,
            "basic" | "1" => OptLevel::Basic,
            "extended" | "2" => OptLevel::Extended,
            "all" | "99" | "3" => OptLevel::All,
            _ => {
                return Err(Error::EpOption {
                    ep: "session".into(),
                    reason: format!("unknown graph optimisation level `{s}`; valid: {}", OptLevel::NAMES.join(", ")),
                });
            }
        })
    }
}

/// How to build a [`Session`].
#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub ep: Ep,
    /// Run on CPU when `ep` is missing or fails to register. Off by default: we never fall back silently, and when
    /// this is on, [`Session::fallback`] carries the reason for the caller to print.
    pub allow_fallback: bool,
    pub opt_level: OptLevel,
    /// `opt_level` was chosen by the user: kept on a fallback to CPU. Otherwise it is the EP's (none for TensorRT and
    /// MIGraphX reading Q/DQ pairs themselves), and a fallback to CPU takes CPU's own, all (its integer kernels come
    /// from graph fusion: without it an INT8 model runs ten times slower than FP32).
    pub opt_level_given: bool,
    /// The level a fallback to CPU runs at when the user chose none: all (the CPU's integer kernels come from graph
    /// fusion), or lower for a model the CPU EP cannot run fused (float8 pairs: basic).
    pub cpu_opt_level: OptLevel,
    /// Intra-op threads; `None` lets ONNX Runtime decide (one per core).
    pub intra_threads: Option<usize>,
    /// ONNX Runtime's intra-op threads spin-wait for work between parallel sections (its default). Off when the
    /// caller works on the same cores between runs (calibration's statistics), so idle threads do not compete.
    pub intra_spinning: bool,
    /// ONNX Runtime's own verbose logging (`--ort_verbose`).
    pub verbose: bool,
    /// Save the model as optimised by ONNX Runtime here (`--save_load`, and to inspect CPU QDQ fusion).
    pub optimized_model_path: Option<PathBuf>,
    /// Load ONNX Runtime from this path instead of the default search ([`crate::locate_library`]).
    pub library: Option<PathBuf>,
    /// Plugin libraries of execution providers to register when the EP is not compiled into the library (with
    /// those [`crate::PLUGIN_ENV`] lists, and the EP's own package found by itself: [`crate::plugin`]).
    pub plugins: Vec<PathBuf>,
    /// Record ONNX Runtime's profile (an event per node per run) into a file whose name starts with this prefix;
    /// [`Session::end_profiling`] finishes it and says where it is.
    pub profile: Option<PathBuf>,
    /// Symbolic dimensions fixed to a size (ONNX Runtime's free-dimension overrides, by the name the model gives the
    /// dimension): a model exported with a dynamic batch and length runs with static shapes, as QNN needs
    /// ([`Ep::needs_static_shapes`]); shapes are inferred through the graph from them.
    pub dim_overrides: Vec<(String, i64)>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            ep: Ep::Cpu,
            allow_fallback: false,
            opt_level: OptLevel::All,
            opt_level_given: false,
            cpu_opt_level: OptLevel::All,
            intra_threads: None,
            intra_spinning: true,
            verbose: false,
            optimized_model_path: None,
            library: None,
            plugins: Vec::new(),
            profile: None,
            dim_overrides: Vec::new(),
        }
    }
}

impl SessionConfig {
    /// The session for a quantized model derived from an FP32 one: the EP's INT8 mode when `int8` is set (TensorRT and
    /// MIGraphX then read `table` for tensors without Q/DQ), and for those two EPs no graph optimisation unless the
    /// user chose a level (`opt_level_given`): they read the Q/DQ pairs themselves.
    pub fn for_int8_model(&self, int8: bool, opt_level_given: bool, table: &Path) -> SessionConfig {
        let mut s = self.clone();
        s.opt_level_given = opt_level_given;
        s.ep = s.ep.for_int8_model(int8, table);
        if !opt_level_given && s.ep.reads_qdq_itself() {
            s.opt_level = OptLevel::Disable;
        }
        s
    }

    /// The configs of `workers` sessions run side by side: on the CPU EP, each with its share of the intra-op threads
    /// (of every core when none are set; at least one each; only the first saves the optimised model); on other EPs,
    /// or for one worker, this config alone.
    pub fn side_by_side(&self, workers: usize) -> Vec<SessionConfig> {
        if workers <= 1 || !matches!(self.ep, Ep::Cpu) {
            return vec![self.clone()];
        }
        let threads = threads_or_cores(self.intra_threads);
        (0..workers)
            .map(|i| SessionConfig {
                intra_threads: Some((threads / workers).max(1)),
                optimized_model_path: self.optimized_model_path.clone().filter(|_| i == 0),
                profile: self.profile.clone().filter(|_| i == 0),
                ..self.clone()
            })
            .collect()
    }

    /// The config a fallback to CPU runs with: the same, but at [`SessionConfig::cpu_opt_level`] unless the user
    /// chose one ([`SessionConfig::opt_level_given`]).
    fn on_cpu_instead(&self) -> (SessionConfig, FallbackLevel) {
        if self.opt_level_given || self.opt_level == self.cpu_opt_level {
            return (SessionConfig { ep: Ep::Cpu, ..self.clone() }, FallbackLevel::Same);
        }
        let cpu = SessionConfig { ep: Ep::Cpu, opt_level: self.cpu_opt_level, ..self.clone() };
        (cpu, FallbackLevel::Cpu { ep: self.opt_level })
    }

    /// Fails fast, before any work, when the loaded ONNX Runtime lacks this config's EP (unless fallback is allowed):
    /// the error names the EP, the library, what it provides and how to get the missing one.
    pub fn check_available(&self) -> Result<()> {
        let info = init(self.library.as_deref())?;
        match route(&info, self)? {
            Route::Missing(e) if !self.allow_fallback => Err(e),
            _ => Ok(()),
        }
    }
}

/// `threads` when given, else the cores this process may use (at least 1): how many one-thread sessions a throughput
/// pass runs side by side.
pub fn threads_or_cores(threads: Option<usize>) -> usize {
    threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1)
}

/// How the loaded ONNX Runtime provides a config's EP.
enum Route {
    /// Compiled into the library (the CPU EP always is).
    Compiled,
    /// Through a registered plugin library's devices.
    Plugin,
    /// Not at all: the error to give (or the reason of a permitted fallback).
    Missing(Error),
}

/// Whether `ep` is compiled into the ONNX Runtime `cfg` loads (else it comes from a plugin, [`route`]).
fn compiled_in(cfg: &SessionConfig, ep: &Ep) -> Result<bool> {
    Ok(init(cfg.library.as_deref())?.providers.iter().any(|p| p == ep.ort_name()))
}

/// Whether and how `cfg`'s EP is provided: compiled in, else from a plugin library (registered now if it was not:
/// those given, then the EP's package where it is installed). A plugin that fails to register is an error, or with
/// [`SessionConfig::allow_fallback`] the reason to fall back.
fn route(info: &crate::OrtInfo, cfg: &SessionConfig) -> Result<Route> {
    if compiled_in(cfg, &cfg.ep)? {
        return Ok(Route::Compiled);
    }
    let looked = match plugin::provide(&cfg.ep, &cfg.plugins, &info.path) {
        Ok(Ok(_)) => return Ok(Route::Plugin),
        Ok(Err(looked)) => looked,
        Err(e) if cfg.allow_fallback => return Ok(Route::Missing(e)),
        Err(e) => return Err(e),
    };
    Ok(Route::Missing(unavailable(info, &cfg.ep, &looked)))
}

fn unavailable(info: &crate::OrtInfo, ep: &Ep, looked: &plugin::Looked) -> Error {
    let files = |f: &[PathBuf]| f.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
    // A plugin that is there but offers no device: installing it again would not help.
    if !looked.without_device.is_empty() {
        let kind = match ep.device_kind() {
            crate::ep::ANY_DEVICE => String::new(),
            k => format!("{k} "),
        };
        let hint = format!(
            "The plugin {} registered but offers no {kind}device on this machine (a CPU or accelerator it does not \
             serve).",
            files(&looked.without_device),
        );
        return ep_unavailable(info, ep, hint);
    }
    let mut hint = String::new();
    if !looked.missing.is_empty() {
        hint = format!("No plugin library for it at {}. ", files(&looked.missing));
    }
    hint.push_str(ep.install_hint());
    ep_unavailable(info, ep, hint)
}

fn ep_unavailable(info: &crate::OrtInfo, ep: &Ep, hint: String) -> Error {
    Error::EpUnavailable {
        requested: ep.ort_name().to_owned(),
        library: format!("{} {}", info.path.display(), info.version),
        available: info.providers.join(", "),
        hint,
    }
}

/// The nodes ONNX Runtime's verbose log of node placements puts on the CPU EP: the indented lines (`  Inverse
/// (inv1)`) after "Node(s) placed on [CPUExecutionProvider]", up to the next placement heading.
fn cpu_placed(lines: &[String]) -> Placed {
    let mut nodes = Vec::new();
    let mut on_cpu = false;
    for line in lines.iter().flat_map(|l| l.lines()) {
        // "All nodes placed on [CPUExecutionProvider]. Number of nodes: 7": the EP took none.
        if let Some(n) = line.split("All nodes placed on [CPUExecutionProvider]. Number of nodes: ").nth(1) {
            return Placed::All(n.trim().parse().unwrap_or(0));
        }
        if line.contains("placed on [") {
            on_cpu = line.contains("placed on [CPUExecutionProvider]");
        } else if on_cpu && line.starts_with("  ") && !line.trim().is_empty() {
            nodes.push(line.trim().to_owned());
        } else {
            on_cpu = false;
        }
    }
    Placed::These(nodes)
}

/// The nodes ONNX Runtime's log puts on the CPU EP: all of the graph's (how many), or these.
#[derive(Debug, PartialEq)]
enum Placed {
    All(usize),
    These(Vec<String>),
}

/// Element type of a model input or output, as far as qdq cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TensorKind {
    F32,
    /// float16: outputs are handed over widened to float32.
    F16,
    I64,
    I32,
    Bool,
    Other(String),
}

/// A model input or output: name, element type and shape (`-1` for a dynamic dimension).
#[derive(Debug, Clone, PartialEq)]
pub struct IoInfo {
    pub name: String,
    pub kind: TensorKind,
    pub shape: Vec<i64>,
}

fn io_info(name: &str, ty: &ValueType) -> IoInfo {
    match ty {
        ValueType::Tensor { ty, shape, .. } => IoInfo {
            name: name.to_owned(),
            kind: match ty {
                TensorElementType::Float32 => TensorKind::F32,
                TensorElementType::Float16 => TensorKind::F16,
                TensorElementType::Int64 => TensorKind::I64,
                TensorElementType::Int32 => TensorKind::I32,
                TensorElementType::Bool => TensorKind::Bool,
                other => TensorKind::Other(format!("{other:?}")),
            },
            shape: shape.iter().copied().collect(),
        },
        other => IoInfo { name: name.to_owned(), kind: TensorKind::Other(format!("{other:?}")), shape: Vec::new() },
    }
}

/// An input fed in its declared element type other than int64: the zeros [`Session::feed_zeros`] named, or the
/// caller's int64 rows converted.
enum Fed {
    I64(ArrayD<i64>),
    I32(ArrayD<i32>),
    F32(ArrayD<f32>),
    F16(ArrayD<half::f16>),
    Bool(ArrayD<bool>),
}

impl Fed {
    /// `rows` in the element type `kind`: int32 (an error if a value does not fit), float32 / float16 (a float mask
    /// takes 0 / 1; token ids are exact below 2^24 / 2^11) or bool (non-zero is true).
    fn convert(kind: &TensorKind, rows: ArrayView2<'_, i64>) -> std::result::Result<Self, String> {
        let rows = rows.into_dyn();
        Ok(match kind {
            TensorKind::I64 => Fed::I64(rows.to_owned()),
            TensorKind::I32 => {
                let mut overflow = false;
                let converted = rows.mapv(|v| {
                    i32::try_from(v).unwrap_or_else(|_| {
                        overflow = true;
                        0
                    })
                });
                if overflow {
                    return Err("a value does not fit the model's int32 input".into());
                }
                Fed::I32(converted)
            }
            TensorKind::F32 => Fed::F32(rows.mapv(|v| v as f32)),
            TensorKind::F16 => Fed::F16(rows.mapv(|v| half::f16::from_f32(v as f32))),
            TensorKind::Bool => Fed::Bool(rows.mapv(|v| v != 0)),
            TensorKind::Other(k) => {
                return Err(format!(
                    "expected an int64, int32, float32, float16 or bool input, the model declares {k}"
                ));
            }
        })
    }

    fn value(&self) -> Result<SessionInputValue<'_>> {
        Ok(match self {
            Fed::I64(a) => TensorRef::from_array_view(a.view())?.into(),
            Fed::I32(a) => TensorRef::from_array_view(a.view())?.into(),
            Fed::F32(a) => TensorRef::from_array_view(a.view())?.into(),
            Fed::F16(a) => TensorRef::from_array_view(a.view())?.into(),
            Fed::Bool(a) => TensorRef::from_array_view(a.view())?.into(),
        })
    }

    /// `shape`'s dynamic dimensions: the first is `rows`, the second `width` (others were refused by feed_zeros).
    fn zeros(kind: &TensorKind, shape: &[i64], rows: usize, width: usize) -> Self {
        let dims: Vec<usize> = shape
            .iter()
            .enumerate()
            .map(|(axis, &d)| match (d, axis) {
                (d, _) if d >= 0 => d as usize,
                (_, 0) => rows,
                _ => width,
            })
            .collect();
        let dims = ndarray::IxDyn(&dims);
        match kind {
            TensorKind::I64 => Fed::I64(ArrayD::zeros(dims)),
            TensorKind::I32 => Fed::I32(ArrayD::zeros(dims)),
            TensorKind::F32 => Fed::F32(ArrayD::zeros(dims)),
            TensorKind::F16 => Fed::F16(ArrayD::from_elem(dims, half::f16::ZERO)),
            TensorKind::Bool | TensorKind::Other(_) => Fed::Bool(ArrayD::from_elem(dims, false)),
        }
    }
}

/// One output of a run: borrowed from ONNX Runtime's buffer (float32), or widened from float16.
#[derive(Debug)]
pub struct OutputRef<'a> {
    pub name: &'a str,
    pub shape: Vec<usize>,
    pub data: Cow<'a, [f32]>,
}

/// A permitted fallback to CPU: the EP asked for and why, with the optimisation level CPU runs at.
struct Fallback {
    from: &'static str,
    why: String,
}

/// The graph optimisation level a fallback session runs at, and how its message says so.
enum FallbackLevel {
    /// The user's (or the EP's equal to CPU's default): nothing to say.
    Same,
    /// The EP's own level replaced by CPU's default.
    Cpu { ep: OptLevel },
}

impl FallbackLevel {
    fn describe(&self, why: &dyn std::fmt::Display) -> String {
        match self {
            FallbackLevel::Same => format!("falling back to CPU: {why}"),
            FallbackLevel::Cpu { ep } => format!(
                "falling back to CPU, at CPU's graph optimisation level (all, not the EP's {}): {why}",
                ep.name()
            ),
        }
    }
}

/// An ONNX Runtime session on a known execution provider.
pub struct Session {
    inner: ort::session::Session,
    model: String,
    ep: Ep,
    fallback: Option<Fallback>,
    inputs: Vec<IoInfo>,
    outputs: Vec<IoInfo>,
    /// Slots of the inputs fed zeros when a run does not give them ([`Session::feed_zeros`]).
    zero_fed: Vec<usize>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("model", &self.model).field("ep", &self.ep).finish_non_exhaustive()
    }
}

fn builder_err<R>(model: &str) -> impl Fn(ort::Error<R>) -> Error + '_ {
    move |e| Error::Session { model: model.to_owned(), reason: e.to_string() }
}

/// A model for ONNX Runtime: serialized in memory (all tensors inline), or a file it reads itself with its external
/// data (models over protobuf's 2 GiB, which cannot be serialized inline).
#[derive(Debug, Clone, Copy)]
pub enum ModelSource<'a> {
    Bytes(&'a [u8]),
    File(&'a Path),
}

impl Session {
    /// A session on `model`; `name` is used in messages about bytes (a file is named by its path).
    pub fn open(model: ModelSource<'_>, name: &str, cfg: &SessionConfig) -> Result<Session> {
        Self::create(model, name, cfg, None)
    }

    /// Like [`Session::open`], with the `Observe` operator ([`crate::observe`]) handing its inputs to `observer`
    /// during each run. Always on the CPU EP: the node reads its input in host memory.
    pub fn open_observed(
        model: ModelSource<'_>,
        name: &str,
        cfg: &SessionConfig,
        observer: Arc<dyn Observer>,
    ) -> Result<Session> {
        Self::create(model, name, &SessionConfig { ep: Ep::Cpu, ..cfg.clone() }, Some(observer))
    }

    /// Loads a model file. External-data files are resolved next to it by ONNX Runtime.
    pub fn from_file(path: &Path, cfg: &SessionConfig) -> Result<Session> {
        Self::open(ModelSource::File(path), "", cfg)
    }

    /// Loads a model from memory (a model with all tensors inline). `name` is used in messages.
    pub fn from_bytes(bytes: &[u8], name: &str, cfg: &SessionConfig) -> Result<Session> {
        Self::open(ModelSource::Bytes(bytes), name, cfg)
    }

    fn create(
        source: ModelSource<'_>,
        name: &str,
        cfg: &SessionConfig,
        observer: Option<Arc<dyn Observer>>,
    ) -> Result<Session> {
        let model: Cow<'_, str> = match source {
            ModelSource::Bytes(_) => name.into(),
            ModelSource::File(p) => p.display().to_string().into(),
        };
        let model = model.as_ref();
        let commit = |b: &mut SessionBuilder| match source {
            ModelSource::Bytes(bytes) => b.commit_from_memory(bytes),
            ModelSource::File(p) => b.commit_from_file(p),
        };
        let info = init(cfg.library.as_deref())?;
        let cpu = cfg.on_cpu_instead();
        let fell = |why: &dyn std::fmt::Display| Fallback { from: cfg.ep.short_name(), why: cpu.1.describe(why) };
        if let Route::Missing(unavailable) = route(&info, cfg)? {
            if !cfg.allow_fallback {
                return Err(unavailable);
            }
            let inner = Self::build(model, &cpu.0, &Ep::Cpu, observer.as_ref(), &commit)?;
            return Ok(Self::wrap(inner, model, Ep::Cpu, Some(fell(&unavailable))));
        }
        match Self::build(model, cfg, &cfg.ep, observer.as_ref(), &commit) {
            Ok(inner) => Ok(Self::wrap(inner, model, cfg.ep.clone(), None)),
            Err(e @ (Error::EpRegistration { .. } | Error::EpPartial { .. }))
                if cfg.allow_fallback && cfg.ep != Ep::Cpu =>
            {
                let inner = Self::build(model, &cpu.0, &Ep::Cpu, observer.as_ref(), &commit)?;
                Ok(Self::wrap(inner, model, Ep::Cpu, Some(fell(&e))))
            }
            Err(e) => Err(e),
        }
    }

    fn wrap(inner: ort::session::Session, model: &str, ep: Ep, fallback: Option<Fallback>) -> Session {
        let inputs = inner.inputs().iter().map(|o| io_info(o.name(), o.dtype())).collect();
        let outputs = inner.outputs().iter().map(|o| io_info(o.name(), o.dtype())).collect();
        Session { inner, model: model.to_owned(), ep, fallback, inputs, outputs, zero_fed: Vec::new() }
    }

    fn build(
        model: &str,
        cfg: &SessionConfig,
        ep: &Ep,
        observer: Option<&Arc<dyn Observer>>,
        commit: &impl Fn(&mut SessionBuilder) -> ort::Result<ort::session::Session>,
    ) -> Result<ort::session::Session> {
        let mut b = Self::builder(model, cfg, ep, observer, None)?;
        if !compiled_in(cfg, ep)? {
            // A plugin EP takes the whole graph or fails ([`Session::left_to_cpu`] then says which nodes it could
            // not take): ONNX Runtime's fallback to the CPU EP for them is off.
            b = b.with_disable_cpu_fallback().map_err(builder_err(model))?;
        }
        // ONNX Runtime registers a custom domain in a process-wide table as a session is made, and two sessions made
        // at once can both find it missing and both add it (the second fails): sessions with the domain are made one
        // at a time.
        let _one_at_a_time = observer.map(|_| crate::observe::BUILDING.lock().unwrap_or_else(|p| p.into_inner()));
        commit(&mut b).map_err(|e| {
            let reason = e.to_string();
            if reason.contains("fallback to CPU EP has been explicitly disabled") {
                return Self::left_to_cpu(model, cfg, ep, commit);
            }
            let reason = if *ep == Ep::Cpu {
                reason
            } else {
                format!("{reason} (on {}){}", ep.ort_name(), ep.failure_hint(&reason))
            };
            Error::Session { model: model.to_owned(), reason }
        })
    }

    /// Why a plugin EP's session failed: the nodes ONNX Runtime leaves to the CPU EP, read from its verbose log of
    /// the node placements of the session made again without the strict setting ("Node(s) placed on
    /// [CPUExecutionProvider]", one node per line after).
    fn left_to_cpu(
        model: &str,
        cfg: &SessionConfig,
        ep: &Ep,
        commit: &impl Fn(&mut SessionBuilder) -> ort::Result<ort::session::Session>,
    ) -> Error {
        let lines = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let sink = Arc::clone(&lines);
        let logger: ort::logging::LoggerFunction = Arc::new(move |_, _, _, _, message: &str| {
            sink.lock().unwrap_or_else(|p| p.into_inner()).push(message.to_owned());
        });
        let verbose = SessionConfig { verbose: true, profile: None, optimized_model_path: None, ..cfg.clone() };
        if let Ok(mut b) = Self::builder(model, &verbose, ep, None, Some(logger)) {
            let _ = commit(&mut b);
        }
        let lines = lines.lock().unwrap_or_else(|p| p.into_inner());
        let nodes = match cpu_placed(&lines) {
            Placed::All(count) => {
                return Error::EpPartial {
                    ep: ep.ort_name().to_owned(),
                    model: model.to_owned(),
                    count,
                    nodes: format!("every node: the EP took none of them{}", ep.refusal_hint()),
                };
            }
            Placed::These(nodes) => nodes,
        };
        let shown: Vec<&str> = nodes.iter().take(10).map(String::as_str).collect();
        let more =
            if nodes.len() > shown.len() { format!(", and {} more", nodes.len() - shown.len()) } else { String::new() };
        Error::EpPartial {
            ep: ep.ort_name().to_owned(),
            model: model.to_owned(),
            count: nodes.len(),
            nodes: if nodes.is_empty() {
                format!("ONNX Runtime did not say which{}", ep.refusal_hint())
            } else {
                format!("{}{more}{}", shown.join(", "), ep.refusal_hint())
            },
        }
    }

    /// A session builder for `model` on `ep` with `cfg`'s settings, logging to `logger` when given.
    fn builder(
        model: &str,
        cfg: &SessionConfig,
        ep: &Ep,
        observer: Option<&Arc<dyn Observer>>,
        logger: Option<ort::logging::LoggerFunction>,
    ) -> Result<SessionBuilder> {
        let env = environment()?;
        let mut b = ort::session::Session::builder(env)
            .map_err(|e| Error::Session { model: model.to_owned(), reason: e.to_string() })?;
        let level = match cfg.opt_level {
            OptLevel::Disable => GraphOptimizationLevel::Disable,
            OptLevel::Basic => GraphOptimizationLevel::Level1,
            OptLevel::Extended => GraphOptimizationLevel::Level2,
            OptLevel::All => GraphOptimizationLevel::All,
        };
        b = b.with_optimization_level(level).map_err(builder_err(model))?;
        if let Some(n) = cfg.intra_threads {
            b = b.with_intra_threads(n).map_err(builder_err(model))?;
        }
        if !cfg.intra_spinning {
            b = b.with_intra_op_spinning(false).map_err(builder_err(model))?;
        }
        let level = if cfg.verbose { ort::logging::LogLevel::Verbose } else { ort::logging::LogLevel::Error };
        b = b.with_log_level(level).map_err(builder_err(model))?;
        if let Some(l) = logger {
            b = b.with_logger(l).map_err(builder_err(model))?;
        }
        if let Some(p) = &cfg.optimized_model_path {
            b = b.with_optimized_model_path(p).map_err(builder_err(model))?;
        }
        if let Some(p) = &cfg.profile {
            b = b.with_profiling(p).map_err(builder_err(model))?;
        }
        for (name, size) in &cfg.dim_overrides {
            b = b.with_dimension_override(name, *size).map_err(builder_err(model))?;
        }
        if let Some(o) = observer {
            let domain = crate::observe::domain(Arc::clone(o)).map_err(builder_err(model))?;
            b = b.with_operators(domain).map_err(builder_err(model))?;
        }
        Self::place(b, cfg, ep)
    }

    /// Puts the session on `ep`: a compiled-in EP through its options, a plugin EP through its devices, and the CPU
    /// EP on its own device once a plugin is registered (else ONNX Runtime's automatic selection would pick the
    /// plugin's).
    fn place(b: SessionBuilder, cfg: &SessionConfig, ep: &Ep) -> Result<SessionBuilder> {
        let err = |e: ort::Error<SessionBuilder>| Error::EpRegistration {
            ep: ep.ort_name().to_owned(),
            reason: e.to_string(),
        };
        if !compiled_in(cfg, ep)? {
            let devices = plugin::devices_of(ep.ort_name(), ep.device_kind())?;
            let options = ep.plugin_options(cfg.intra_threads);
            return b.with_devices(devices, Some(&options)).map_err(err);
        }
        match ep.dispatch(cfg.intra_threads)? {
            Some(d) => b.with_execution_providers([d]).map_err(err),
            None if plugin::any_registered() => b.with_devices(plugin::cpu_devices()?, None).map_err(err),
            None => Ok(b),
        }
    }

    /// Ends the profile [`SessionConfig::profile`] started and returns its file (ONNX Runtime adds a date to the
    /// prefix). An error on a session made without one.
    pub fn end_profiling(&mut self) -> Result<PathBuf> {
        let name =
            self.inner.end_profiling().map_err(|e| Error::Run { model: self.model.clone(), reason: e.to_string() })?;
        if name.is_empty() {
            return Err(Error::Run {
                model: self.model.clone(),
                reason: "no profile was started for this session".into(),
            });
        }
        Ok(PathBuf::from(name))
    }

    /// The EP the session runs on (CPU after a permitted fallback).
    pub fn ep(&self) -> &Ep {
        &self.ep
    }

    /// Why the session fell back to CPU, when [`SessionConfig::allow_fallback`] allowed it.
    pub fn fallback(&self) -> Option<&str> {
        self.fallback.as_ref().map(|f| f.why.as_str())
    }

    /// The EP asked for (its short name), when the session fell back to CPU from it.
    pub fn fallback_from(&self) -> Option<&'static str> {
        self.fallback.as_ref().map(|f| f.from)
    }

    pub fn inputs(&self) -> &[IoInfo] {
        &self.inputs
    }

    pub fn outputs(&self) -> &[IoInfo] {
        &self.outputs
    }

    /// From now on, feed zeros to each input in `names` that a run does not give: an input the outputs asked for do
    /// not depend on (a `unique_ids` the model copies to an output of its own). Its declared shape is used, a dynamic
    /// first dimension taking the batch's rows and a dynamic second one its width; int64, int32, float32, float16
    /// and bool inputs. An unknown name, another element type or another dynamic dimension is an error naming the input.
    pub fn feed_zeros(&mut self, names: &[String]) -> Result<()> {
        for name in names {
            let slot = self.inputs.iter().position(|i| i.name == *name).ok_or_else(|| Error::BadInput {
                model: self.model.clone(),
                input: name.clone(),
                reason: format!(
                    "cannot feed it zeros: the model has no such input (its inputs: {})",
                    self.inputs.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
            })?;
            let info = &self.inputs[slot];
            let bad = |reason: String| Error::BadInput { model: self.model.clone(), input: name.clone(), reason };
            if matches!(&info.kind, TensorKind::Other(_)) {
                return Err(bad(format!("cannot feed it zeros: element type {:?}", info.kind)));
            }
            if let Some(axis) = info.shape.iter().skip(2).position(|&d| d < 0) {
                return Err(bad(format!(
                    "cannot feed it zeros: dimension {} of its shape {:?} is dynamic (only the batch and sequence \
                     dimensions may be)",
                    axis + 2,
                    info.shape
                )));
            }
            if !self.zero_fed.contains(&slot) {
                self.zero_fed.push(slot);
            }
        }
        Ok(())
    }

    /// Every one of `outputs` is an output of the model, of float32 (or float16) values.
    fn check_outputs(&self, outputs: &[&str]) -> Result<(), Error> {
        for out in outputs {
            let info = self.outputs.iter().find(|o| o.name == *out).ok_or_else(|| Error::MissingOutput {
                model: self.model.clone(),
                output: (*out).to_owned(),
                available: self.outputs.iter().map(|o| o.name.as_str()).collect::<Vec<_>>().join(", "),
            })?;
            if !matches!(info.kind, TensorKind::F32 | TensorKind::F16) {
                return Err(Error::BadOutput {
                    model: self.model.clone(),
                    output: (*out).to_owned(),
                    reason: format!("expected float32 (or float16), the model declares {:?}", info.kind),
                });
            }
        }
        Ok(())
    }

    /// Runs the model. `inputs` may hold more arrays than the model takes (DistilBERT has no `token_type_ids`):
    /// only the model's inputs are fed; a model input that is missing from `inputs` is an error naming it, unless
    /// [`Session::feed_zeros`] named it.
    /// Model inputs declared int32, float32 (a float attention mask), float16 or bool are fed the values converted. All requested outputs (which must be `float32`) are handed to `with`
    /// at once, without copying, in the order requested.
    ///
    /// `with` returns the caller's own error type (anything this crate's [`Error`] converts into), so a collector's
    /// error reaches the caller unchanged instead of being flattened into a string.
    pub fn run_with<R, E: From<Error>>(
        &mut self,
        inputs: &[(&str, ArrayView2<'_, i64>)],
        outputs: &[&str],
        with: impl FnOnce(&[OutputRef<'_>]) -> Result<R, E>,
    ) -> Result<R, E> {
        self.check_outputs(outputs)?;
        // Converted copies (and zeros) must outlive the feeds that borrow them.
        let mut fed: Vec<(usize, ArrayView2<'_, i64>)> = Vec::with_capacity(self.inputs.len());
        let mut made: Vec<(usize, Fed)> = Vec::new();
        for (slot, info) in self.inputs.iter().enumerate() {
            if self.zero_fed.contains(&slot) && !inputs.iter().any(|(n, _)| *n == info.name) {
                let (rows, width) = inputs.first().map_or((1, 1), |(_, a)| a.dim());
                made.push((slot, Fed::zeros(&info.kind, &info.shape, rows, width)));
                continue;
            }
            let (_, arr) = inputs.iter().find(|(n, _)| *n == info.name).ok_or_else(|| Error::MissingInput {
                model: self.model.clone(),
                input: info.name.clone(),
                given: inputs.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
            })?;
            let bad = |reason: String| Error::BadInput { model: self.model.clone(), input: info.name.clone(), reason };
            if arr.as_slice().is_none() {
                return Err(bad("array is not contiguous".into()).into());
            }
            match info.kind {
                TensorKind::I64 => fed.push((slot, *arr)),
                ref k => made.push((slot, Fed::convert(k, *arr).map_err(bad)?)),
            }
        }
        let mut feeds: Vec<(Cow<'_, str>, SessionInputValue<'_>)> = Vec::with_capacity(self.inputs.len());
        for (slot, view) in &fed {
            feeds.push((
                Cow::Borrowed(self.inputs[*slot].name.as_str()),
                TensorRef::from_array_view(*view).map_err(Error::from)?.into(),
            ));
        }
        for (slot, arr) in &made {
            feeds.push((Cow::Borrowed(self.inputs[*slot].name.as_str()), arr.value()?));
        }
        let model = &self.model;
        let result = self.inner.run(feeds).map_err(|e| Error::Run { model: model.clone(), reason: e.to_string() })?;
        let mut refs = Vec::with_capacity(outputs.len());
        for out in outputs {
            let value = result.get(*out).ok_or_else(|| Error::MissingOutput {
                model: model.clone(),
                output: (*out).to_owned(),
                available: result.keys().collect::<Vec<_>>().join(", "),
            })?;
            let bad = |e: ort::Error| Error::BadOutput {
                model: model.clone(),
                output: (*out).to_owned(),
                reason: e.to_string(),
            };
            let (shape, data) = float_data(value).map_err(bad)?;
            refs.push(OutputRef { name: out, shape, data });
        }
        with(&refs)
    }

    /// Like [`Session::run_with`], copying each requested output into an owned array.
    pub fn run(&mut self, inputs: &[(&str, ArrayView2<'_, i64>)], outputs: &[&str]) -> Result<Vec<ArrayD<f32>>> {
        let model = self.model.clone();
        self.run_with(inputs, outputs, |refs| {
            refs.iter()
                .map(|r| {
                    ArrayD::from_shape_vec(r.shape.clone(), r.data.to_vec()).map_err(|e| Error::BadOutput {
                        model: model.clone(),
                        output: r.name.to_owned(),
                        reason: e.to_string(),
                    })
                })
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TensorRtOptions;

    #[test]
    fn side_by_side_sessions_share_the_threads_and_one_saves_the_optimised_model() {
        let cpu = SessionConfig {
            intra_threads: Some(5),
            optimized_model_path: Some(PathBuf::from("opt.onnx")),
            ..SessionConfig::default()
        };
        let two = cpu.side_by_side(2);
        assert_eq!(two.iter().map(|c| c.intra_threads).collect::<Vec<_>>(), [Some(2), Some(2)]);
        assert_eq!(two[0].optimized_model_path, cpu.optimized_model_path);
        assert_eq!(two[1].optimized_model_path, None);
        // More sessions than threads: one thread each, never zero.
        assert!(cpu.side_by_side(8).iter().all(|c| c.intra_threads == Some(1)));
        assert_eq!(cpu.side_by_side(1).len(), 1);
        assert_eq!(cpu.side_by_side(1)[0].intra_threads, Some(5));
        // A GPU EP runs one session whatever is asked.
        let trt = SessionConfig { ep: Ep::TensorRt(TensorRtOptions::default()), ..cpu.clone() };
        assert_eq!(trt.side_by_side(4).len(), 1);
        assert_eq!(threads_or_cores(Some(3)), 3);
        assert!(threads_or_cores(None) >= 1 && threads_or_cores(Some(0)) == 1);
    }

    /// ONNX Runtime's two ways of logging placements: the nodes under a CPU heading, or one line when every node is
    /// on the CPU EP.
    #[test]
    fn the_placement_log_gives_the_nodes_left_to_the_cpu() {
        let log = |s: &str| vec![s.to_owned()];
        let split = log("Node(s) placed on [QNNExecutionProvider]. Number of nodes: 2\n  MatMul (a)\n  Add (b)\n\
             Node(s) placed on [CPUExecutionProvider]. Number of nodes: 1\n  Inverse (inv)\nother line");
        assert_eq!(cpu_placed(&split), Placed::These(vec!["Inverse (inv)".into()]));
        let all = log("All nodes placed on [CPUExecutionProvider]. Number of nodes: 4");
        assert_eq!(cpu_placed(&all), Placed::All(4));
        assert_eq!(
            cpu_placed(&log("All nodes placed on [QNNExecutionProvider]. Number of nodes: 4")),
            Placed::These(vec![])
        );
    }
}
