//! Execution providers as a typed enum, with the options the seeds' workflows use.

use std::path::PathBuf;

use ort::ep::{self, ArbitrarilyConfigurableExecutionProvider as _, ExecutionProviderDispatch};

use crate::{Error, Result};

/// TensorRT EP options. `int8` with a calibration table makes TensorRT use our ranges for tensors without Q/DQ.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TensorRtOptions {
    pub device_id: i32,
    pub fp16: bool,
    pub int8: bool,
    /// `trt_int8_calibration_table_name`: a flatbuffers table (or native cache with `use_native_table`).
    pub calibration_table: Option<PathBuf>,
    /// `trt_int8_use_native_calibration_table`.
    pub use_native_table: bool,
    /// `trt_engine_cache_enable` + `trt_engine_cache_path`.
    pub engine_cache_dir: Option<PathBuf>,
}

/// MIGraphX EP options.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MiGraphXOptions {
    pub device_id: i32,
    pub fp16: bool,
    pub int8: bool,
    pub calibration_table: Option<PathBuf>,
    pub use_native_table: bool,
    /// Save the compiled program here (`migraphx_save_compiled_model`).
    pub save_model: Option<PathBuf>,
    /// Load a compiled program from here (`migraphx_load_compiled_model`).
    pub load_model: Option<PathBuf>,
}

/// OpenVINO EP options (the plugin `onnxruntime-ep-openvino`, or an ONNX Runtime with OpenVINO compiled in).
#[derive(Debug, Clone, PartialEq)]
pub struct OpenVinoOptions {
    /// OpenVINO's device: `CPU` (the default), `GPU` or `NPU`.
    pub device: String,
    /// The precision OpenVINO runs the float parts in (its `INFERENCE_PRECISION_HINT`): `f32` by default, so that
    /// FP32 is an honest baseline (on a CPU with AMX or AVX512-BF16 OpenVINO's own default is bf16), or `bf16`, `f16`.
    pub precision: String,
    /// OpenVINO's model cache (`CACHE_DIR`): compiled models are kept there between runs.
    pub cache_dir: Option<PathBuf>,
    /// The kind of CPU the models are for (the CPU device's): its bf16 instructions make bf16 the float its users run
    /// ([`Ep::default_float`]). This machine's unless named.
    pub cpu: crate::CpuKind,
}

impl Default for OpenVinoOptions {
    fn default() -> Self {
        OpenVinoOptions { device: "CPU".into(), precision: "f32".into(), cache_dir: None, cpu: crate::CpuKind::host() }
    }
}

impl OpenVinoOptions {
    /// The precisions `precision` takes.
    pub const PRECISIONS: &'static [&'static str] = &["f32", "bf16", "f16"];

    /// OpenVINO's `load_config`: the device's properties as JSON (`{"CPU":{"INFERENCE_PRECISION_HINT":"f32",...}}`),
    /// with `threads` as `INFERENCE_NUM_THREADS` when given.
    pub fn load_config(&self, threads: Option<usize>) -> String {
        let mut props = serde_json::Map::new();
        props.insert("INFERENCE_PRECISION_HINT".into(), self.precision.clone().into());
        if let Some(n) = threads {
            props.insert("INFERENCE_NUM_THREADS".into(), n.to_string().into());
        }
        if let Some(dir) = &self.cache_dir {
            props.insert("CACHE_DIR".into(), dir.display().to_string().into());
        }
        serde_json::json!({ self.device.to_ascii_uppercase(): props }).to_string()
    }
}

/// Qualcomm's QNN EP options (the plugin `onnxruntime-qnn`, or an ONNX Runtime with QNN compiled in).
#[derive(Debug, Clone, PartialEq)]
pub struct QnnOptions {
    /// QNN's backend: `htp` (the NPU's, the default; emulated on x86-64) or `gpu` (Adreno's).
    pub backend: String,
    /// Further QNN EP options as ONNX Runtime names them (`htp_performance_mode`, `soc_model`, ...).
    pub options: Vec<(String, String)>,
}

impl Default for QnnOptions {
    fn default() -> Self {
        QnnOptions { backend: "htp".into(), options: Vec::new() }
    }
}

impl QnnOptions {
    /// The backends `backend` takes.
    pub const BACKENDS: &'static [&'static str] = &["htp", "gpu"];

    /// The SoC the HTP backend compiles for unless `soc_model` is given: Snapdragon X Elite, the NPU of Windows on Arm
    /// laptops. QNN's emulated HTP fails to finalize a graph with a float part (`QNN_COMMON_ERROR_MEM_ALLOC`) until it
    /// knows the SoC; with one it runs the float part in fp16, as the device does.
    pub const DEFAULT_SOC: &'static str = "SC8380XP";

    /// Every option as the EP takes it: `backend_type`, `soc_model` for the HTP ([`Self::DEFAULT_SOC`] unless given),
    /// then the others.
    fn all(&self) -> Vec<(String, String)> {
        let mut out = vec![("backend_type".to_owned(), self.backend.clone())];
        if self.backend == "htp" && !self.options.iter().any(|(k, _)| k == "soc_model") {
            out.push(("soc_model".to_owned(), Self::DEFAULT_SOC.to_owned()));
        }
        out.extend(self.options.iter().cloned());
        out
    }
}

/// The execution providers qdq knows how to configure.
#[derive(Debug, Clone, PartialEq)]
pub enum Ep {
    Cpu,
    Cuda { device_id: i32 },
    TensorRt(TensorRtOptions),
    MiGraphX(MiGraphXOptions),
    Rocm { device_id: i32 },
    OpenVino(OpenVinoOptions),
    Qnn(QnnOptions),
}

/// What qdq has to know of an EP to run it, in one row per EP ([`Ep::capabilities`]): a new EP fills one row, and
/// the compiler names it there. The predicates of [`Ep`] read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// The kind of device it runs on (`CPU`, `GPU`), or [`ANY_DEVICE`]; OpenVINO's is its `device` option's.
    pub device: &'static str,
    /// The Python package that carries it as a plugin library, and the library's file name in it; `None`: compiled
    /// into the ONNX Runtime builds that have it.
    pub plugin: Option<(&'static str, &'static str)>,
    /// Runs only graphs whose shapes are all static: inputs are padded to fixed shapes.
    pub static_shapes: bool,
    /// Its speed is measured against FP32's (not an emulated backend's).
    pub timed: bool,
    /// FP32's reference and calibration run on the CPU EP when it comes first.
    pub fp32_on_cpu: bool,
    /// Builds its own engine from the Q/DQ pairs (ONNX Runtime's graph optimisations would fold them first).
    pub reads_qdq_itself: bool,
    /// Users run a float model in another precision than the session's when they set nothing ([`Ep::default_float`]:
    /// OpenVINO's bf16 / f16, TensorRT's and MIGraphX's FP16 engines).
    pub own_default_float: bool,
}

/// [`Ep::device_kind`] of an EP whose devices are taken whatever their kind.
pub const ANY_DEVICE: &str = "any";

/// Reads a boolean switch the seeds' scripts use (`ORT_TENSORRT_INT8_ENABLE=1`).
fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| matches!(v.trim(), "1" | "true" | "TRUE" | "True" | "yes"))
}

impl Ep {
    /// Every name [`Ep::parse`] accepts, for help texts and errors.
    pub const NAMES: &'static [&'static str] = &["cpu", "cuda", "tensorrt", "migraphx", "rocm", "openvino", "qnn"];

    /// Parses an EP name case-insensitively (`TensorRT`, `tensorrt`, `trt`, `MIGraphX`, `CPU`, ...) with default
    /// options. Reads no environment: [`Ep::with_seed_env`] is the explicit step that does.
    pub fn parse(name: &str) -> Result<Ep> {
        let lower = name.trim().to_ascii_lowercase();
        let lower = lower.strip_suffix("executionprovider").unwrap_or(&lower);
        Ok(match lower {
            "cpu" => Ep::Cpu,
            "cuda" => Ep::Cuda { device_id: 0 },
            "tensorrt" | "trt" => Ep::TensorRt(TensorRtOptions::default()),
            "migraphx" => Ep::MiGraphX(MiGraphXOptions::default()),
            "rocm" => Ep::Rocm { device_id: 0 },
            "openvino" | "ov" => Ep::OpenVino(OpenVinoOptions::default()),
            "qnn" => Ep::Qnn(QnnOptions::default()),
            _ => {
                return Err(Error::EpOption {
                    ep: name.to_owned(),
                    reason: format!("unknown execution provider; valid: {}", Ep::NAMES.join(", ")),
                });
            }
        })
    }

    /// The provider's name inside ONNX Runtime, as `GetAvailableProviders` lists it.
    pub fn ort_name(&self) -> &'static str {
        match self {
            Ep::Cpu => "CPUExecutionProvider",
            Ep::Cuda { .. } => "CUDAExecutionProvider",
            Ep::TensorRt(_) => "TensorrtExecutionProvider",
            Ep::MiGraphX(_) => "MIGraphXExecutionProvider",
            Ep::Rocm { .. } => "ROCMExecutionProvider",
            Ep::OpenVino(_) => "OpenVINOExecutionProvider",
            Ep::Qnn(_) => "QNNExecutionProvider",
        }
    }

    /// Short lower-case name (`tensorrt`), as the CLI spells it.
    pub fn short_name(&self) -> &'static str {
        match self {
            Ep::Cpu => "cpu",
            Ep::Cuda { .. } => "cuda",
            Ep::TensorRt(_) => "tensorrt",
            Ep::MiGraphX(_) => "migraphx",
            Ep::Rocm { .. } => "rocm",
            Ep::OpenVino(_) => "openvino",
            Ep::Qnn(_) => "qnn",
        }
    }

    /// How a user gets a library that has this EP.
    pub fn install_hint(&self) -> &'static str {
        match self {
            Ep::Cpu => "Every ONNX Runtime build has it.",
            Ep::Cuda { .. } | Ep::TensorRt(_) => {
                "Install the GPU build with `cargo xtask setup --gpu` (onnxruntime-gpu: CUDA and TensorRT EPs; needs an \
                 NVIDIA GPU with CUDA 12 and, for TensorRT, the TensorRT libraries), or point ORT_DYLIB_PATH at such a \
                 build."
            }
            Ep::MiGraphX(_) | Ep::Rocm { .. } => {
                "Build ONNX Runtime with --use_migraphx / --use_rocm (ROCm and MIGraphX installed) and point \
                 ORT_DYLIB_PATH at it; no PyPI wheel carries these EPs."
            }
            Ep::OpenVino(_) => {
                "OpenVINO comes as a plugin: `cargo xtask setup --openvino` in the qdq checkout, or `pip install \
                 onnxruntime-ep-openvino==1.8.1` into the Python environment of the onnxruntime package, or give its \
                 libonnxruntime_providers_openvino_plugin.so with --ep-plugin (or QDQ_EP_PLUGIN)."
            }
            Ep::Qnn(_) => {
                "Qualcomm's QNN comes as a plugin: `cargo xtask setup --qnn` in the qdq checkout, or `pip install \
                 onnxruntime-qnn==2.7.0` into the Python environment of the onnxruntime package, or give its \
                 libonnxruntime_providers_qnn.so with --ep-plugin (or QDQ_EP_PLUGIN)."
            }
        }
    }

    /// This EP's row of the capability table.
    pub fn capabilities(&self) -> Capabilities {
        let base = Capabilities {
            device: "CPU",
            plugin: None,
            static_shapes: false,
            timed: true,
            fp32_on_cpu: false,
            reads_qdq_itself: false,
            own_default_float: false,
        };
        let gpu = Capabilities { device: "GPU", ..base };
        match self {
            Ep::Cpu => base,
            Ep::Cuda { .. } | Ep::Rocm { .. } => gpu,
            Ep::TensorRt(_) | Ep::MiGraphX(_) => {
                Capabilities { reads_qdq_itself: true, own_default_float: true, ..gpu }
            }
            // The device kind follows the `device` option ([`Ep::device_kind`]).
            Ep::OpenVino(_) => Capabilities {
                plugin: Some(("onnxruntime_ep_openvino", "libonnxruntime_providers_openvino_plugin.so")),
                own_default_float: true,
                ..base
            },
            // The NPU on a Snapdragon, the CPU where its HTP backend is emulated (seconds per inference: not timed);
            // a float graph runs in fp16 there, so FP32's reference runs on the CPU EP.
            Ep::Qnn(_) => Capabilities {
                device: ANY_DEVICE,
                plugin: Some(("onnxruntime_qnn", "libonnxruntime_providers_qnn.so")),
                static_shapes: true,
                timed: false,
                fp32_on_cpu: true,
                ..base
            },
        }
    }

    /// The Python package that carries this EP as a plugin library, and the library's file name in it.
    pub fn plugin_package(&self) -> Option<(&'static str, &'static str)> {
        self.capabilities().plugin
    }

    /// The kind of device this EP runs on (`CPU`, `GPU`, `NPU`), as plugin devices are told apart; [`ANY_DEVICE`]
    /// for QNN, whose one device is the NPU on a Snapdragon and the CPU where its backend is emulated.
    pub fn device_kind(&self) -> &str {
        match self {
            Ep::OpenVino(o) => o.device.split(['.', ':']).next().unwrap_or("CPU"),
            Ep::Cpu | Ep::Cuda { .. } | Ep::TensorRt(_) | Ep::MiGraphX(_) | Ep::Rocm { .. } | Ep::Qnn(_) => {
                self.capabilities().device
            }
        }
    }

    /// The options a plugin's devices take, each keyed `<EP name>.<option>` as `SessionOptionsAppendExecutionProvider_V2`
    /// takes them; `threads` are the session's intra-op threads.
    pub(crate) fn plugin_options(&self, threads: Option<usize>) -> Vec<(String, String)> {
        match self {
            Ep::OpenVino(o) => vec![(format!("{}.load_config", self.ort_name()), o.load_config(threads))],
            Ep::Qnn(o) => o.all().into_iter().map(|(k, v)| (format!("{}.{k}", self.ort_name()), v)).collect(),
            Ep::Cpu | Ep::Cuda { .. } | Ep::TensorRt(_) | Ep::MiGraphX(_) | Ep::Rocm { .. } => Vec::new(),
        }
    }

    /// Whether the EP runs only graphs whose shapes are all static (QNN): a model with a dynamic batch or length gets
    /// them fixed ([`crate::SessionConfig::dim_overrides`]) and its inputs padded to them.
    pub fn needs_static_shapes(&self) -> bool {
        self.capabilities().static_shapes
    }

    /// Whether a run on this EP has its speed measured against FP32's: not QNN, whose HTP is emulated on the x86-64
    /// hosts qdq runs on (seconds per inference, nothing like the NPU's speed) and whose FP32 reference runs on the CPU
    /// EP (nothing to set an NPU's time against).
    pub fn is_timed(&self) -> bool {
        self.capabilities().timed
    }

    /// [`Ep::is_timed`] of an EP named as results record it ([`Ep::short_name`]); a name qdq does not know is timed.
    pub fn is_timed_name(name: &str) -> bool {
        name.parse::<Ep>().map_or(true, |ep| ep.is_timed())
    }

    /// Whether FP32's reference and the calibration runs (which read every quantized tensor) go to the CPU EP when
    /// this EP comes first: QNN, which computes a float graph in fp16 on its HTP and takes static shapes only.
    pub fn fp32_on_cpu(&self) -> bool {
        self.capabilities().fp32_on_cpu
    }

    /// What an EP's failure to build a session usually means, when it says something of its own (`reason`: ONNX
    /// Runtime's message).
    pub fn failure_hint(&self, reason: &str) -> &'static str {
        match self {
            Ep::Qnn(_) if reason.contains("Failed to finalize QNN graph") => {
                ": QNN's emulated HTP finalizes a graph with float parts only when it knows the SoC it compiles for \
                 (`--qnn-option soc_model=<SoC>`, SC8380XP unless given; 0 is none: docs/QUANTIZATION.md)"
            }
            Ep::Qnn(_)
            | Ep::Cpu
            | Ep::Cuda { .. }
            | Ep::TensorRt(_)
            | Ep::MiGraphX(_)
            | Ep::Rocm { .. }
            | Ep::OpenVino(_) => "",
        }
    }

    /// Why an EP may refuse a graph's nodes, when it has a reason of its own to say (QNN's static shapes).
    pub fn refusal_hint(&self) -> &'static str {
        match self {
            Ep::Qnn(_) => {
                "; QNN takes static shapes only: a model whose token inputs declare a fixed batch and length (its \
                 nodes with a dynamic dimension are refused one by one)"
            }
            Ep::Cpu | Ep::Cuda { .. } | Ep::TensorRt(_) | Ep::MiGraphX(_) | Ep::Rocm { .. } | Ep::OpenVino(_) => "",
        }
    }

    /// The precision the float parts run in, for EPs where it is a setting of its own (OpenVINO's; TensorRT's and
    /// MIGraphX's FP16 mode, when on): what a result on this EP has to say next to its F1.
    pub fn float_precision(&self) -> Option<&str> {
        match self {
            Ep::OpenVino(o) => Some(&o.precision),
            Ep::TensorRt(TensorRtOptions { fp16: true, .. }) | Ep::MiGraphX(MiGraphXOptions { fp16: true, .. }) => {
                Some("fp16")
            }
            Ep::Cpu | Ep::Cuda { .. } | Ep::TensorRt(_) | Ep::MiGraphX(_) | Ep::Rocm { .. } | Ep::Qnn(_) => None,
        }
    }

    /// This EP as its users run a float model when they set nothing, where that differs from this configuration, with
    /// the precision's name: the FP32 baseline a speed-up is honestly measured against. OpenVINO's CPU device runs
    /// float parts in bf16 on a CPU with bf16 matrix instructions (its `cpu` kind's, [`crate::CpuKind::bf16_matmul`]:
    /// this machine's unless another is named; qdq's sessions ask for f32
    /// unless told otherwise), its GPU device in f16; TensorRT and MIGraphX users build FP16 engines. `None`: no other
    /// precision to compare in (the CPU EP, CUDA and ROCm run a float model's own types; QNN is not timed).
    pub fn default_float(&self) -> Option<(Ep, &'static str)> {
        if !self.capabilities().own_default_float {
            return None;
        }
        match self {
            Ep::OpenVino(o) => {
                let native = match self.device_kind() {
                    "CPU" => o.cpu.bf16_matmul().map(|_| "bf16")?,
                    "GPU" => "f16",
                    _ => return None,
                };
                (o.precision != native)
                    .then(|| (Ep::OpenVino(OpenVinoOptions { precision: native.to_owned(), ..o.clone() }), native))
            }
            Ep::TensorRt(_) | Ep::MiGraphX(_) => {
                let mut ep = self.clone();
                let (fp16, _, _) = ep.precision_mut()?;
                if *fp16 {
                    return None;
                }
                *fp16 = true;
                Some((ep, "fp16"))
            }
            Ep::Cpu | Ep::Cuda { .. } | Ep::Rocm { .. } | Ep::Qnn(_) => None,
        }
    }

    /// The CPU instructions its own default float precision runs on, where that is a CPU's bf16 (OpenVINO's CPU device:
    /// `AMX`, `AVX512-BF16`); `None` elsewhere.
    pub fn default_float_instructions(&self) -> Option<&'static str> {
        match self {
            Ep::OpenVino(_) => self.cpu_kind().and_then(crate::CpuKind::bf16_matmul),
            Ep::Cpu | Ep::Cuda { .. } | Ep::TensorRt(_) | Ep::MiGraphX(_) | Ep::Rocm { .. } | Ep::Qnn(_) => None,
        }
    }

    /// The kind of CPU models on this EP are for: OpenVINO's CPU device's (its `cpu` option), this machine's for the CPU
    /// EP; `None` for EPs on other devices.
    pub fn cpu_kind(&self) -> Option<crate::CpuKind> {
        match self {
            Ep::OpenVino(o) if self.device_kind() == "CPU" => Some(o.cpu),
            Ep::Cpu => Some(crate::CpuKind::host()),
            Ep::OpenVino(_) | Ep::Cuda { .. } | Ep::TensorRt(_) | Ep::MiGraphX(_) | Ep::Rocm { .. } | Ep::Qnn(_) => {
                None
            }
        }
    }

    /// Whether TensorRT/MIGraphX should run in INT8 mode.
    pub fn int8(&self) -> bool {
        match self {
            Ep::TensorRt(o) => o.int8,
            Ep::MiGraphX(o) => o.int8,
            Ep::Cpu | Ep::Cuda { .. } | Ep::Rocm { .. } | Ep::OpenVino(_) | Ep::Qnn(_) => false,
        }
    }

    /// The precision switches TensorRT and MIGraphX share (the only EPs that have them): FP16, INT8, INT8 table.
    fn precision_mut(&mut self) -> Option<(&mut bool, &mut bool, &mut Option<PathBuf>)> {
        match self {
            Ep::TensorRt(o) => Some((&mut o.fp16, &mut o.int8, &mut o.calibration_table)),
            Ep::MiGraphX(o) => Some((&mut o.fp16, &mut o.int8, &mut o.calibration_table)),
            Ep::Cpu | Ep::Cuda { .. } | Ep::Rocm { .. } | Ep::OpenVino(_) | Ep::Qnn(_) => None,
        }
    }

    /// Turns the seeds' environment switches (`ORT_TENSORRT_FP16_ENABLE`, `ORT_TENSORRT_INT8_ENABLE`,
    /// `ORT_MIGRAPHX_FP16_ENABLE`, `ORT_MIGRAPHX_INT8_ENABLE` = 1) on for the EP they name; other EPs are returned
    /// unchanged. Callers apply command-line flags after this, so flags add to what the environment set.
    pub fn with_seed_env(mut self) -> Ep {
        let prefix = match self {
            Ep::TensorRt(_) => "ORT_TENSORRT",
            Ep::MiGraphX(_) => "ORT_MIGRAPHX",
            Ep::Cpu | Ep::Cuda { .. } | Ep::Rocm { .. } | Ep::OpenVino(_) | Ep::Qnn(_) => return self,
        };
        let (fp16, int8) = (env_flag(&format!("{prefix}_FP16_ENABLE")), env_flag(&format!("{prefix}_INT8_ENABLE")));
        self.set_precision(fp16, int8);
        self
    }

    /// Turns the EP's FP16 / INT8 modes on (never off); no effect on EPs without them.
    pub fn set_precision(&mut self, fp16: bool, int8: bool) {
        if let Some((f, i, _)) = self.precision_mut() {
            *f |= fp16;
            *i |= int8;
        }
    }

    /// The EP for an FP32 model: its INT8 mode off (INT8 is for the quantized model only).
    pub fn without_int8(mut self) -> Ep {
        if let Some((_, i, _)) = self.precision_mut() {
            *i = false;
        }
        self
    }

    /// The EP for a quantized model: INT8 mode on when `int8` is set (or already on), and then reading `table` for
    /// tensors without Q/DQ pairs.
    pub fn for_int8_model(mut self, int8: bool, table: &std::path::Path) -> Ep {
        if let Some((_, i, t)) = self.precision_mut() {
            *i |= int8;
            if *i {
                *t = Some(table.to_path_buf());
            }
        }
        self
    }

    /// TensorRT and MIGraphX read Q/DQ pairs themselves: ORT's graph optimisations would fold them first.
    pub fn reads_qdq_itself(&self) -> bool {
        self.capabilities().reads_qdq_itself
    }

    /// Builds the `ort` dispatch, always with `error_on_failure` so a failed registration is an error, never a fallback.
    pub(crate) fn dispatch(&self, threads: Option<usize>) -> Result<Option<ExecutionProviderDispatch>> {
        let path_str = |p: &PathBuf, what: &str| -> Result<String> {
            p.to_str().map(str::to_owned).ok_or_else(|| Error::EpOption {
                ep: self.short_name().to_owned(),
                reason: format!("{what} path {} is not valid UTF-8", p.display()),
            })
        };
        let d = match self {
            Ep::Cpu => return Ok(None),
            Ep::Cuda { device_id } => ep::CUDA::default().with_device_id(*device_id).build(),
            Ep::TensorRt(o) => {
                let mut trt = ep::TensorRT::default().with_device_id(o.device_id).with_fp16(o.fp16).with_int8(o.int8);
                if let Some(t) = &o.calibration_table {
                    trt = trt
                        .with_int8_calibration_table_name(path_str(t, "calibration table")?)
                        .with_int8_use_native_calibration_table(o.use_native_table);
                }
                if let Some(dir) = &o.engine_cache_dir {
                    trt = trt.with_engine_cache(true).with_engine_cache_path(path_str(dir, "engine cache")?);
                }
                trt.build()
            }
            Ep::MiGraphX(o) => {
                let mut m = ep::MIGraphX::default().with_device_id(o.device_id).with_fp16(o.fp16).with_int8(o.int8);
                if let Some(t) = &o.calibration_table {
                    m = m.with_int8_calibration_table(path_str(t, "calibration table")?, o.use_native_table);
                }
                if let Some(p) = &o.save_model {
                    m = m.with_save_model(path_str(p, "save model")?);
                }
                if let Some(p) = &o.load_model {
                    m = m.with_load_model(path_str(p, "load model")?);
                }
                m.build()
            }
            Ep::Rocm { device_id } => ep::ROCm::default().with_device_id(*device_id).build(),
            Ep::OpenVino(o) => ep::OpenVINO::default()
                .with_device_type(&o.device)
                .with_arbitrary_config("load_config", o.load_config(threads))
                .build(),
            Ep::Qnn(o) => {
                o.all().into_iter().fold(ep::QNN::default(), |q, (k, v)| q.with_arbitrary_config(k, v)).build()
            }
        };
        Ok(Some(d.error_on_failure()))
    }
}

impl std::str::FromStr for Ep {
    type Err = Error;

    fn from_str(s: &str) -> Result<Ep> {
        Ep::parse(s)
    }
}

impl std::fmt::Display for Ep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.short_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CpuKind;

    #[test]
    fn every_ep_has_a_row_the_predicates_read() {
        for name in Ep::NAMES {
            let ep = Ep::parse(name).unwrap();
            let c = ep.capabilities();
            assert_eq!(
                (ep.needs_static_shapes(), ep.is_timed(), ep.fp32_on_cpu(), ep.reads_qdq_itself()),
                (c.static_shapes, c.timed, c.fp32_on_cpu, c.reads_qdq_itself),
                "{name}"
            );
            assert_eq!(ep.plugin_package(), c.plugin, "{name}");
            // A plugin EP's library is found in its package; the others are compiled in.
            assert_eq!(c.plugin.is_some(), matches!(ep, Ep::OpenVino(_) | Ep::Qnn(_)), "{name}");
            // Only an EP with a precision of its own is ever timed again in it.
            if !c.own_default_float {
                assert!(ep.default_float().is_none(), "{name}");
            }
        }
        let qnn = Ep::parse("qnn").unwrap().capabilities();
        assert!(qnn.static_shapes && !qnn.timed && qnn.fp32_on_cpu && qnn.device == ANY_DEVICE);
        assert_eq!(Ep::parse("tensorrt").unwrap().default_float().map(|(_, p)| p), Some("fp16"));
    }

    #[test]
    fn parse_accepts_the_seed_spellings() {
        assert_eq!(Ep::parse("CPU").unwrap(), Ep::Cpu);
        assert!(matches!(Ep::parse("TensorRT").unwrap(), Ep::TensorRt(_)));
        assert!(matches!(Ep::parse("TensorrtExecutionProvider").unwrap(), Ep::TensorRt(_)));
        assert!(matches!(Ep::parse("MIGraphX").unwrap(), Ep::MiGraphX(_)));
        assert_eq!(Ep::parse("ROCm").unwrap(), Ep::Rocm { device_id: 0 });
    }

    /// The emulated HTP finalizes a graph with float parts only when it knows the SoC: qdq names one unless the
    /// options do; the GPU backend gets none.
    #[test]
    fn qnn_names_a_soc_for_the_htp_unless_given_one() {
        let htp = QnnOptions::default().all();
        assert!(htp.contains(&("soc_model".to_owned(), QnnOptions::DEFAULT_SOC.to_owned())), "{htp:?}");
        let given = QnnOptions { options: vec![("soc_model".into(), "SM8650".into())], ..Default::default() }.all();
        assert_eq!(
            given.iter().filter(|(k, _)| k == "soc_model").collect::<Vec<_>>(),
            [&("soc_model".into(), "SM8650".into())]
        );
        let gpu = QnnOptions { backend: "gpu".into(), options: vec![] }.all();
        assert!(gpu.iter().all(|(k, _)| k != "soc_model"), "{gpu:?}");
    }

    /// The baseline in the EP's own precision: OpenVINO's CPU device in bf16 only where the CPU has bf16 matrix
    /// instructions, its GPU in f16, TensorRT and MIGraphX with FP16 engines; none where the session already runs so.
    #[test]
    fn the_default_float_precision_is_the_eps_own() {
        let ov = Ep::parse("openvino").unwrap();
        match crate::bf16_matmul() {
            Some(_) => {
                let (native, name) = ov.default_float().unwrap();
                assert_eq!((native.float_precision(), name), (Some("bf16"), "bf16"));
                assert!(native.default_float().is_none());
            }
            None => assert!(ov.default_float().is_none()),
        }
        // A CPU named for another machine: bf16 where that kind has bf16 matrix instructions, whatever this one has.
        for (kind, native) in [(CpuKind::Amx, Some("bf16")), (CpuKind::Avx512Bf16, Some("bf16")), (CpuKind::Vnni, None)]
        {
            let ep = Ep::OpenVino(OpenVinoOptions { cpu: kind, ..Default::default() });
            assert_eq!(ep.default_float().map(|(_, n)| n), native, "{kind}");
            assert_eq!(ep.cpu_kind(), Some(kind));
        }
        let bf16 = Ep::OpenVino(OpenVinoOptions { cpu: CpuKind::Amx, precision: "bf16".into(), ..Default::default() });
        assert!(bf16.default_float().is_none(), "already at its default");
        let gpu = Ep::OpenVino(OpenVinoOptions { device: "GPU.0".into(), ..Default::default() });
        assert_eq!(gpu.cpu_kind(), None);
        assert_eq!(
            gpu.default_float().map(|(e, n)| (e.float_precision().map(str::to_owned), n)),
            Some((Some("f16".into()), "f16"))
        );
        let (trt, name) = Ep::parse("tensorrt").unwrap().default_float().unwrap();
        assert!(matches!(&trt, Ep::TensorRt(o) if o.fp16 && !o.int8) && name == "fp16");
        assert!(trt.default_float().is_none());
        assert!(matches!(Ep::parse("migraphx").unwrap().default_float(), Some((Ep::MiGraphX(o), "fp16")) if o.fp16));
        for plain in ["cpu", "cuda", "rocm", "qnn"] {
            assert!(Ep::parse(plain).unwrap().default_float().is_none(), "{plain}");
        }
    }

    #[test]
    fn unknown_ep_lists_valid_names() {
        let msg = Ep::parse("tpu").unwrap_err().to_string();
        assert!(msg.contains("tpu") && msg.contains("tensorrt") && msg.contains("migraphx"), "{msg}");
    }

    #[test]
    fn ort_names_match_onnxruntime() {
        for name in Ep::NAMES {
            let ep = Ep::parse(name).unwrap();
            assert!(ep.ort_name().ends_with("ExecutionProvider"));
            assert_eq!(Ep::parse(ep.ort_name()).unwrap().short_name(), ep.short_name());
        }
    }
}
