//! Typed settings of the `qdq` commands, and the one place that turns them into the configs the steps take
//! (sessions, data, range methods, the placement policy). The CLI fills these from flags and the config file.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use calib::{Method, MethodKind, MethodOptions};
use runtime::{Ep, OptLevel, SessionConfig};
use squad::{FeatureConfig, ModelIo, Padding};

use crate::calibrate::CalibrateOptions;
use crate::data::DataConfig;
use crate::{Error, Result};

/// Which ONNX Runtime and execution provider run the models.
#[derive(Debug, Clone)]
pub struct RuntimeSettings {
    pub ep: Ep,
    /// The EP's FP16 mode (TensorRT / MIGraphX).
    pub fp16: bool,
    /// The EP's INT8 mode for the quantized model (TensorRT / MIGraphX, with qdq's calibration table).
    pub int8: bool,
    pub allow_fallback: bool,
    pub ort_verbose: bool,
    /// Save each model as ONNX Runtime optimised it (`model_<tag>_optimized.onnx`).
    pub save_load: bool,
    /// `None`: all, except no optimisation for QDQ models on TensorRT / MIGraphX.
    pub opt_level: Option<OptLevel>,
    pub threads: Option<usize>,
    pub ort_lib: Option<PathBuf>,
    pub trt_engine_cache: Option<PathBuf>,
}

impl RuntimeSettings {
    /// The session of an FP32 model: the EP with the seeds' environment switches and `fp16` applied, INT8 mode off;
    /// with `save_load`, the optimised model goes to `dir/model_<tag>_optimized.onnx`.
    pub fn fp32_session(&self, dir: Option<&Path>, tag: &str) -> SessionConfig {
        let mut ep = self.ep.clone().with_seed_env();
        ep.set_precision(self.fp16, false);
        let mut ep = ep.without_int8();
        if let Ep::TensorRt(o) = &mut ep {
            o.engine_cache_dir.clone_from(&self.trt_engine_cache);
        }
        SessionConfig {
            ep,
            allow_fallback: self.allow_fallback,
            opt_level: self.opt_level.unwrap_or_default(),
            intra_threads: self.threads,
            verbose: self.ort_verbose,
            optimized_model_path: dir.filter(|_| self.save_load).map(|d| d.join(format!("model_{tag}_optimized.onnx"))),
            library: self.ort_lib.clone(),
        }
    }

    /// The session of the quantized model, derived from `fp32` ([`SessionConfig::for_int8_model`]); `table` is the
    /// calibration table TensorRT / MIGraphX read in INT8 mode.
    pub fn int8_session(&self, fp32: &SessionConfig, table: &Path) -> SessionConfig {
        let int8 = self.int8 || self.ep.clone().with_seed_env().int8();
        fp32.for_int8_model(int8, self.opt_level.is_some(), table)
    }
}

/// The session calibration runs on `ep`, otherwise as `base` (library, threads, fallback): the FP32 model with
/// extra outputs, basic optimisation (the exposed tensors must survive), no EP INT8 mode, no saved optimised model.
pub fn calibration_session(ep: &Ep, base: &SessionConfig) -> SessionConfig {
    SessionConfig {
        ep: ep.clone().with_seed_env().without_int8(),
        opt_level: OptLevel::Basic,
        optimized_model_path: None,
        ..base.clone()
    }
}

/// SQuAD format version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SquadVersion {
    #[default]
    V1_1,
    /// Unanswerable questions (empty answers) are allowed.
    V2_0,
}

impl FromStr for SquadVersion {
    type Err = Error;

    fn from_str(s: &str) -> Result<SquadVersion> {
        match s.trim().trim_start_matches('v') {
            "1.1" | "1" => Ok(SquadVersion::V1_1),
            "2.0" | "2" => Ok(SquadVersion::V2_0),
            other => Err(Error::Config(format!("SQuAD version `{other}` is not supported; use 1.1 or 2.0"))),
        }
    }
}

impl std::fmt::Display for SquadVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SquadVersion::V1_1 => "1.1",
            SquadVersion::V2_0 => "2.0",
        })
    }
}

/// Which names the model's inputs and outputs have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoNames {
    /// input_ids, attention_mask, token_type_ids -> start_logits, end_logits.
    #[default]
    Hf,
    /// input_ids, input_mask, segment_ids -> output_start_logits, output_end_logits.
    Nvidia,
}

impl FromStr for IoNames {
    type Err = Error;

    fn from_str(s: &str) -> Result<IoNames> {
        match s.trim() {
            "hf" | "huggingface" => Ok(IoNames::Hf),
            "nvidia" | "bert-tf" => Ok(IoNames::Nvidia),
            other => Err(Error::Config(format!("io names `{other}` are not known; use hf or nvidia"))),
        }
    }
}

impl IoNames {
    fn io(self) -> ModelIo {
        match self {
            IoNames::Hf => ModelIo::huggingface(),
            IoNames::Nvidia => ModelIo::bert_tf(),
        }
    }
}

/// How SQuAD text becomes model inputs.
#[derive(Debug, Clone)]
pub struct DataSettings {
    pub vocab: PathBuf,
    /// A Hugging Face tokenizer.json used instead of WordPiece from `vocab`.
    pub tokenizer_json: Option<PathBuf>,
    pub lowercase: bool,
    pub version: SquadVersion,
    pub seq_len: usize,
    pub query_len: usize,
    pub doc_stride: usize,
    pub io_names: IoNames,
    /// Pad every batch to `seq_len` instead of its longest feature.
    pub pad_to_max: bool,
}

impl DataSettings {
    /// The checked data configuration (window sizes validated).
    pub fn config(&self) -> Result<DataConfig> {
        let features =
            FeatureConfig { max_seq_len: self.seq_len, doc_stride: self.doc_stride, max_query_len: self.query_len };
        features.validate()?;
        Ok(DataConfig {
            vocab: self.vocab.clone(),
            tokenizer_json: self.tokenizer_json.clone(),
            lowercase: self.lowercase,
            version_2: self.version == SquadVersion::V2_0,
            features,
            io: self.io_names.io(),
            padding: if self.pad_to_max { Padding::Fixed(self.seq_len) } else { Padding::Longest },
        })
    }
}

/// Which range methods to compute, from the one statistics pass.
#[derive(Debug, Clone)]
pub struct MethodSettings {
    /// The method whose ranges place the Q/DQ pairs.
    pub method: MethodKind,
    /// Also computed and written (calibration_<method>.json).
    pub compare: Vec<MethodKind>,
    pub options: MethodOptions,
}

impl MethodSettings {
    /// `method` first, then each of `compare` once.
    pub fn methods(&self) -> Result<Vec<Method>> {
        let mut kinds = vec![self.method];
        for k in &self.compare {
            if !kinds.contains(k) {
                kinds.push(*k);
            }
        }
        kinds.into_iter().map(|k| Ok(Method::new(k, &self.options)?)).collect()
    }
}

/// Calibration settings shared by `qdq calibrate` and `qdq e2e`.
#[derive(Debug, Clone)]
pub struct CalibSettings {
    /// SQuAD file of calibration questions (e2e: the evaluation dataset when `None`; calibrate: required).
    pub calibration_data: Option<PathBuf>,
    /// Calibration questions (the first N).
    pub cal_num: usize,
    /// The EP calibration runs on.
    pub ep: Ep,
    pub methods: MethodSettings,
    /// Histogram bins per tensor.
    pub num_bins: usize,
}

impl CalibSettings {
    /// The calibration options: the methods, and a session on [`CalibSettings::ep`] otherwise as `base`
    /// ([`calibration_session`]).
    pub fn options(&self, batch: usize, base: &SessionConfig) -> Result<CalibrateOptions> {
        Ok(CalibrateOptions {
            batch,
            methods: self.methods.methods()?,
            num_bins: self.num_bins,
            session: calibration_session(&self.ep, base),
        })
    }
}

/// The placement policy: a preset plus overrides.
#[derive(Debug, Clone)]
pub struct PolicySettings {
    /// A name of [`qdq::PRESETS`].
    pub preset: String,
    /// `KEY=VALUE` overrides in order ([`qdq::Policy::set`]).
    pub options: Vec<(String, String)>,
    /// Node names or globs never quantized.
    pub exclude_nodes: Vec<String>,
    /// A tensor without a range is an error.
    pub strict: bool,
}

impl PolicySettings {
    /// The policy (overrides applied in order, then the exclusions and `strict`).
    pub fn policy(&self) -> Result<qdq::Policy> {
        let mut policy = qdq::Policy::preset(&self.preset)?;
        for (k, v) in &self.options {
            policy.set(k.trim(), v.trim())?;
        }
        for n in &self.exclude_nodes {
            policy.set("exclude_nodes", n)?;
        }
        if self.strict {
            policy.set("strict", "true")?;
        }
        Ok(policy)
    }
}

/// Every preset with its settings, then what each option does and takes: what `qdq quantize --list-policies`
/// prints.
pub fn describe_policies() -> Result<String> {
    let mut out = String::new();
    for name in qdq::PRESETS {
        out.push_str(&format!("{name}:\n{}\n", qdq::Policy::preset(name)?.describe()));
    }
    out.push_str("Options (--policy-option KEY=VALUE, repeatable; later ones win):\n");
    for o in qdq::OPTIONS {
        out.push_str(&format!("  {:<22} {}\n  {:<22} values: {}\n", o.key, o.doc, "", o.values));
    }
    Ok(out.trim_end().to_owned())
}
