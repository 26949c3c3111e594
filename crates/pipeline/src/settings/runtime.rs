//! Which ONNX Runtime and execution provider run the models, and the sessions the steps get from that.

use std::path::{Path, PathBuf};

use runtime::{Ep, OptLevel, SessionConfig};

/// The ONNX Runtime library to load: the one flag every command that runs a model shares.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", command(next_help_heading = "Runtime"))]
pub struct OrtLibrary {
    /// Path of libonnxruntime.so
    ///
    /// Default: ORT_DYLIB_PATH, then the copy `cargo xtask setup` installed.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub ort_lib: Option<PathBuf>,
    /// Plugin library of an execution provider (repeatable)
    ///
    /// For EPs ONNX Runtime loads as plugins, such as OpenVINO (libonnxruntime_providers_openvino_plugin.so of PyPI
    /// onnxruntime-ep-openvino). Default: QDQ_EP_PLUGIN, then the EP's package beside onnxruntime's, then the copy
    /// `cargo xtask setup --openvino` installed.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE", hide_short_help = true))]
    pub ep_plugin: Vec<PathBuf>,
}

/// OpenVINO's settings (`--ep openvino`).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", command(next_help_heading = "Runtime"))]
pub struct OpenVinoSettings {
    /// OpenVINO: precision of the float parts: f32, bf16, f16
    ///
    /// OpenVINO's INFERENCE_PRECISION_HINT. f32 keeps FP32 an honest baseline; OpenVINO's own default on CPUs with
    /// AMX or AVX512-BF16 is bf16, which moves F1 (results.json and the table say which ran).
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value = "f32", value_name = "P", value_parser = ["f32", "bf16", "f16"], hide_short_help = true)
    )]
    pub ov_precision: String,
    /// OpenVINO: device: CPU, GPU or NPU
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value = "CPU", value_name = "D", value_parser = ["CPU", "GPU", "NPU"], ignore_case = true, hide_short_help = true)
    )]
    pub ov_device: String,
    /// OpenVINO: model cache directory (compiled models kept between runs)
    #[cfg_attr(feature = "cli", arg(long, value_name = "DIR", hide_short_help = true))]
    pub ov_cache: Option<PathBuf>,
    /// OpenVINO: the CPU the model is for: amx, avx512-bf16, vnni, avx2 [default: this one]
    ///
    /// The `openvino` preset lays the model out for it (docs/QUANTIZATION.md), FP32 is also measured at the float its
    /// users run there (bf16 on amx and avx512-bf16), and the model and results.json record it. Speed measured on
    /// another kind of CPU says little of this one's.
    #[cfg_attr(feature = "cli", arg(long, value_name = "KIND", hide_short_help = true))]
    pub ov_cpu: Option<runtime::CpuKind>,
}

impl Default for OpenVinoSettings {
    fn default() -> Self {
        OpenVinoSettings { ov_precision: "f32".into(), ov_device: "CPU".into(), ov_cache: None, ov_cpu: None }
    }
}

impl OpenVinoSettings {
    /// Sets `o` from these settings.
    pub fn apply(&self, o: &mut runtime::OpenVinoOptions) {
        o.precision.clone_from(&self.ov_precision);
        o.device = self.ov_device.to_ascii_uppercase();
        o.cache_dir.clone_from(&self.ov_cache);
        o.cpu = self.ov_cpu.unwrap_or_else(runtime::CpuKind::host);
    }
}

/// Qualcomm QNN's settings (`--ep qnn`).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", command(next_help_heading = "Runtime"))]
pub struct QnnSettings {
    /// QNN: backend: htp (the NPU's; emulated on x86-64) or gpu
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value = "htp", value_name = "B", value_parser = ["htp", "gpu"], ignore_case = true, hide_short_help = true)
    )]
    pub qnn_backend: String,
    /// QNN: an EP option KEY=VALUE as ONNX Runtime names it (repeatable)
    ///
    /// E.g. htp_performance_mode=burst, soc_model=60, htp_arch=73, enable_htp_fp16_precision=1.
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "KEY=VALUE", value_parser = crate::settings::parsers::key_value, hide_short_help = true)
    )]
    pub qnn_option: Vec<(String, String)>,
}

impl Default for QnnSettings {
    fn default() -> Self {
        QnnSettings { qnn_backend: "htp".into(), qnn_option: Vec::new() }
    }
}

impl QnnSettings {
    /// Sets `o` from these settings.
    pub fn apply(&self, o: &mut runtime::QnnOptions) {
        o.backend = self.qnn_backend.to_ascii_lowercase();
        o.options.clone_from(&self.qnn_option);
    }
}

/// Features per batch: the flag every command that runs batches of features shares.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", command(next_help_heading = "Runtime"))]
pub struct BatchSize {
    /// Features per batch (inference and calibration)
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value_t = 1, value_name = "N", value_parser = crate::settings::parsers::positive)
    )]
    pub batch: usize,
}

impl Default for BatchSize {
    fn default() -> Self {
        BatchSize { batch: 1 }
    }
}

/// Which ONNX Runtime and execution provider run the models.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", command(next_help_heading = "Runtime"))]
pub struct RuntimeSettings {
    /// Execution provider that runs the models (e2e: several, comma-separated)
    ///
    /// cpu, cuda, tensorrt, migraphx, rocm, openvino or qnn. An EP the loaded ONNX Runtime lacks is an error naming what
    /// it has (see --allow-fallback). e2e takes a list (`cpu,openvino`): the first calibrates and chooses the
    /// preset, and the same FP32 and quantized models are evaluated on each, side by side. debug takes two
    /// (`cpu,qnn`): the quantized model on the second, tensor by tensor against the first.
    #[cfg_attr(
        feature = "cli",
        arg(long = "ep", default_value = "cpu", value_name = "EP", value_delimiter = ',', num_args = 1)
    )]
    pub eps: Vec<Ep>,
    /// The EP's FP16 mode (TensorRT, MIGraphX)
    ///
    /// TensorRT's trt_fp16_enable, MIGraphX's fp16: the seeds' ORT_*_FP16_ENABLE=1.
    #[cfg_attr(feature = "cli", arg(long))]
    pub fp16: bool,
    /// The EP's INT8 mode for the quantized model (TensorRT, MIGraphX)
    ///
    /// TensorRT's trt_int8_enable, MIGraphX's int8 (the seeds' ORT_*_INT8_ENABLE=1); they also get qdq's calibration
    /// table. No effect on cpu.
    #[cfg_attr(feature = "cli", arg(long))]
    pub int8: bool,
    /// Run on CPU when the EP is missing or fails (said, never silent)
    #[cfg_attr(feature = "cli", arg(long))]
    pub allow_fallback: bool,
    /// ONNX Runtime's verbose log
    #[cfg_attr(feature = "cli", arg(long, hide_short_help = true))]
    pub ort_verbose: bool,
    /// Save the models as ONNX Runtime optimised them
    ///
    /// e2e: into --out as model_fp32_optimized.onnx and model_int8_optimized.onnx; eval: beside the model as
    /// model_eval_optimized.onnx. Shows which Q/DQ patterns the EP fused.
    #[cfg_attr(feature = "cli", arg(long, hide_short_help = true))]
    pub save_load: bool,
    /// Graph optimisation level: disable, basic, extended, all
    ///
    /// Default: all, except `disable` for QDQ models on TensorRT and MIGraphX (as the seeds do: those EPs read the
    /// Q/DQ pairs themselves).
    #[cfg_attr(feature = "cli", arg(long, value_name = "LEVEL", hide_short_help = true))]
    pub opt_level: Option<OptLevel>,
    /// Intra-op threads [default: one per core]
    #[cfg_attr(feature = "cli", arg(long, value_name = "N"))]
    pub threads: Option<usize>,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub library: OrtLibrary,
    /// TensorRT engine cache directory
    #[cfg_attr(feature = "cli", arg(long, value_name = "DIR", hide_short_help = true))]
    pub trt_engine_cache: Option<PathBuf>,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub openvino: OpenVinoSettings,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub qnn: QnnSettings,
    /// Untimed runs of the first batch before timing
    ///
    /// TensorRT builds its engine on the first run, and every EP allocates on it; answers are unaffected.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1, value_name = "N", hide_short_help = true))]
    pub warmup: usize,
    /// Do not evaluate the models again at the EP's own default float precision
    ///
    /// Where the EP runs a float model in another precision than the session's when nothing is set (OpenVINO's bf16
    /// on a CPU with bf16 instructions, FP16 engines), e2e and eval --baseline evaluate both models again at it (the
    /// table's rows of the float its users run) and tune times its candidates at it; this leaves that out (e2e still
    /// times INT8 against FP32 at it).
    #[cfg_attr(feature = "cli", arg(long, hide_short_help = true))]
    pub no_default_float: bool,
}

impl Default for RuntimeSettings {
    /// The command line's defaults: the CPU EP, one warm-up run, everything else off.
    fn default() -> Self {
        RuntimeSettings {
            eps: vec![Ep::Cpu],
            fp16: false,
            int8: false,
            allow_fallback: false,
            ort_verbose: false,
            save_load: false,
            opt_level: None,
            threads: None,
            library: OrtLibrary::default(),
            trt_engine_cache: None,
            openvino: OpenVinoSettings::default(),
            qnn: QnnSettings::default(),
            warmup: 1,
            no_default_float: false,
        }
    }
}

impl RuntimeSettings {
    /// The EP that runs the models: the first of `--ep`.
    pub fn ep(&self) -> &Ep {
        self.eps.first().unwrap_or(&Ep::Cpu)
    }

    /// The first of `--ep` with its EP's own settings applied (TensorRT's engine cache, OpenVINO's and QNN's options,
    /// the CPU OpenVINO's device is for): what the preset is chosen and laid out for.
    pub fn configured_ep(&self) -> Ep {
        let mut ep = self.ep().clone();
        match &mut ep {
            Ep::TensorRt(o) => o.engine_cache_dir.clone_from(&self.trt_engine_cache),
            Ep::OpenVino(o) => self.openvino.apply(o),
            Ep::Qnn(o) => self.qnn.apply(o),
            Ep::Cpu | Ep::Cuda { .. } | Ep::MiGraphX(_) | Ep::Rocm { .. } => {}
        }
        ep
    }

    /// The EPs after the first, on which e2e evaluates the same models again.
    pub fn other_eps(&self) -> &[Ep] {
        self.eps.get(1..).unwrap_or_default()
    }

    /// `command` runs on one EP and reads every quantized tensor there: an error naming the list otherwise, or saying
    /// where to measure a model for QNN (whose HTP gives no tensor but the outputs).
    pub fn one_ep(&self, command: &str) -> crate::error::Result<&Ep> {
        if self.eps.len() > 1 {
            let names: Vec<String> = self.eps.iter().map(Ep::to_string).collect();
            return Err(crate::error::Error::Usage(format!(
                "--ep {}: {command} runs on one execution provider (e2e evaluates on several)",
                names.join(",")
            )));
        }
        if self.ep().fp32_on_cpu() {
            return Err(crate::error::Error::Usage(format!(
                "--ep {}: {command} reads every quantized tensor of both models on one EP, which QNN's HTP cannot \
                 give; measure the model on the CPU EP (--ep cpu), and set QNN against it with `qdq e2e --ep cpu,qnn \
                 --policy qnn` (scores) or `qdq debug --ep cpu,qnn` (tensor by tensor)",
                self.ep()
            )));
        }
        Ok(self.ep())
    }

    /// `qdq debug`'s EPs: the one that measures the QDQ model against FP32 and, when `--ep` names a second, the EP
    /// whose run of the same QDQ model is set against the first's tensor by tensor. QNN cannot come first (its FP32
    /// runs in fp16, and the float reference would need float parts the HTP does not finalize alone).
    pub fn debug_eps(&self) -> crate::error::Result<(&Ep, Option<&Ep>)> {
        match self.eps.as_slice() {
            [_, other] if !self.ep().fp32_on_cpu() => Ok((self.ep(), Some(other))),
            [_, _] => Err(crate::error::Error::Usage(format!(
                "--ep {}: the first EP measures against FP32, which QNN's HTP cannot; put the CPU EP first: --ep cpu,{}",
                self.eps.iter().map(Ep::to_string).collect::<Vec<_>>().join(","),
                self.eps[1]
            ))),
            [_, _, ..] => Err(crate::error::Error::Usage(format!(
                "--ep {}: debug compares two execution providers at most (the first measures, the second is set \
                 against it)",
                self.eps.iter().map(Ep::to_string).collect::<Vec<_>>().join(",")
            ))),
            _ => Ok((self.one_ep("debug")?, None)),
        }
    }

    /// The FP32 session on `ep` instead of the first of `--ep` (the others of e2e's list).
    pub fn fp32_session_on(&self, ep: &Ep, dir: Option<&Path>, tag: &str) -> SessionConfig {
        RuntimeSettings { eps: vec![ep.clone()], ..self.clone() }.fp32_session(dir, tag)
    }

    /// The quantized model's session on `ep` instead of the first of `--ep`.
    pub fn int8_session_on(&self, ep: &Ep, table: &Path) -> SessionConfig {
        let on = RuntimeSettings { eps: vec![ep.clone()], ..self.clone() };
        on.int8_session(&on.fp32_session(None, ""), table)
    }
    /// The session of an FP32 model: the EP with the seeds' environment switches and `fp16` applied, INT8 mode off;
    /// with `save_load`, the optimised model goes to `dir/model_<tag>_optimized.onnx`.
    pub fn fp32_session(&self, dir: Option<&Path>, tag: &str) -> SessionConfig {
        let mut ep = self.configured_ep().with_seed_env().without_int8();
        ep.set_precision(self.fp16, false);
        SessionConfig {
            ep,
            allow_fallback: self.allow_fallback,
            opt_level: self.opt_level.unwrap_or_default(),
            opt_level_given: self.opt_level.is_some(),
            cpu_opt_level: runtime::OptLevel::All,
            intra_threads: self.threads,
            intra_spinning: true,
            verbose: self.ort_verbose,
            optimized_model_path: dir.filter(|_| self.save_load).map(|d| d.join(format!("model_{tag}_optimized.onnx"))),
            library: self.library.ort_lib.clone(),
            plugins: self.library.ep_plugin.clone(),
            profile: None,
            dim_overrides: Vec::new(),
        }
    }

    /// The session of the quantized model, derived from `fp32` ([`SessionConfig::for_int8_model`]); `table` is the
    /// calibration table TensorRT / MIGraphX read in INT8 mode.
    pub fn int8_session(&self, fp32: &SessionConfig, table: &Path) -> SessionConfig {
        let int8 = self.int8 || self.ep().clone().with_seed_env().int8();
        fp32.for_int8_model(int8, self.opt_level.is_some(), table)
    }

    /// The session a quantized model is evaluated on outside e2e (eval, debug, tune): the FP32 session, or with
    /// INT8 mode on the INT8 session reading calibration.flatbuffers in the working directory.
    pub fn evaluation_session(&self, fp32: &SessionConfig) -> SessionConfig {
        if self.int8 { self.int8_session(fp32, Path::new("calibration.flatbuffers")) } else { fp32.clone() }
    }
}

/// The session calibration runs on `ep`, otherwise as `base` (library, threads, fallback): the FP32 model with
/// extra outputs, no EP INT8 mode, no saved optimised model. Full graph optimisation, as inference gets: ONNX
/// Runtime's fusions leave a node alone when its output is a graph output, so every exposed tensor survives with the
/// same values (docs/QUANTIZATION.md), and the pass runs the fused kernels. ONNX Runtime's threads do not spin
/// between runs: the statistics run on the same cores right after each run.
pub fn calibration_session(ep: &Ep, base: &SessionConfig) -> SessionConfig {
    SessionConfig {
        ep: ep.clone().with_seed_env().without_int8(),
        opt_level: OptLevel::All,
        intra_spinning: false,
        optimized_model_path: None,
        ..base.clone()
    }
}
