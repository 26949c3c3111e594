//! Typed settings of the `qdq` commands, and the one place that turns them into the configs the steps take
//! (sessions, data, range methods, the placement policy). The CLI fills these from flags and the config file.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use calib::{Method, MethodKind, MethodOptions};
use runtime::{Ep, OptLevel, SessionConfig};
use squad::{FeatureConfig, ModelIo, Padding};

use crate::calibrate::CalibrateOptions;
use crate::data::{DataConfig, DeclaredShape};
use crate::{Error, Result};

/// Which ONNX Runtime and execution provider run the models.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct RuntimeSettings {
    /// Execution provider: cpu, cuda, tensorrt, migraphx, rocm, openvino. An EP the loaded ONNX Runtime lacks is an
    /// error (see --allow-fallback).
    #[cfg_attr(feature = "cli", arg(long, default_value = "cpu", value_name = "EP"))]
    pub ep: Ep,
    /// Enable the EP's FP16 mode (TensorRT trt_fp16_enable / MIGraphX fp16; as ORT_*_FP16_ENABLE=1 in the seeds).
    #[cfg_attr(feature = "cli", arg(long))]
    pub fp16: bool,
    /// Enable the EP's INT8 mode for the quantized model (TensorRT trt_int8_enable / MIGraphX int8; as
    /// ORT_*_INT8_ENABLE=1 in the seeds). TensorRT/MIGraphX also get our calibration table. No effect on cpu.
    #[cfg_attr(feature = "cli", arg(long))]
    pub int8: bool,
    /// Run on CPU when the EP is missing or fails to register (printed, never silent).
    #[cfg_attr(feature = "cli", arg(long))]
    pub allow_fallback: bool,
    /// ONNX Runtime's verbose log.
    #[cfg_attr(feature = "cli", arg(long, visible_alias = "ort_verbose"))]
    pub ort_verbose: bool,
    /// Save the models as optimised by ONNX Runtime (e2e: into --out as model_fp32_optimized.onnx and
    /// model_int8_optimized.onnx; eval: beside the model as model_eval_optimized.onnx), e.g. to see which Q/DQ
    /// patterns the EP fused.
    #[cfg_attr(feature = "cli", arg(long, visible_alias = "save_load"))]
    pub save_load: bool,
    /// Graph optimisation level: disable, basic, extended, all. Default: all, except `disable` for QDQ models on
    /// TensorRT and MIGraphX (as the seeds do: those EPs read the Q/DQ pairs themselves).
    #[cfg_attr(feature = "cli", arg(long, value_name = "LEVEL"))]
    pub opt_level: Option<OptLevel>,
    /// Intra-op threads (default: one per core).
    #[cfg_attr(feature = "cli", arg(long, value_name = "N"))]
    pub threads: Option<usize>,
    /// Path of libonnxruntime.so (default: ORT_DYLIB_PATH, then the copy `cargo xtask setup` installed).
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub ort_lib: Option<PathBuf>,
    /// TensorRT engine cache directory.
    #[cfg_attr(feature = "cli", arg(long, value_name = "DIR"))]
    pub trt_engine_cache: Option<PathBuf>,
    /// Untimed runs of the first batch before latency is measured (TensorRT builds its engine on the first run).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1, value_name = "N"))]
    pub warmup: usize,
}

impl Default for RuntimeSettings {
    /// The command line's defaults: the CPU EP, one warm-up run, everything else off.
    fn default() -> Self {
        RuntimeSettings {
            ep: Ep::Cpu,
            fp16: false,
            int8: false,
            allow_fallback: false,
            ort_verbose: false,
            save_load: false,
            opt_level: None,
            threads: None,
            ort_lib: None,
            trt_engine_cache: None,
            warmup: 1,
        }
    }
}

impl RuntimeSettings {
    /// The session of an FP32 model: the EP with the seeds' environment switches and `fp16` applied, INT8 mode off;
    /// with `save_load`, the optimised model goes to `dir/model_<tag>_optimized.onnx`.
    pub fn fp32_session(&self, dir: Option<&Path>, tag: &str) -> SessionConfig {
        let mut ep = self.ep.clone().with_seed_env().without_int8();
        ep.set_precision(self.fp16, false);
        if let Ep::TensorRt(o) = &mut ep {
            o.engine_cache_dir.clone_from(&self.trt_engine_cache);
        }
        SessionConfig {
            ep,
            allow_fallback: self.allow_fallback,
            opt_level: self.opt_level.unwrap_or_default(),
            intra_threads: self.threads,
            intra_spinning: true,
            verbose: self.ort_verbose,
            optimized_model_path: dir.filter(|_| self.save_load).map(|d| d.join(format!("model_{tag}_optimized.onnx"))),
            library: self.ort_lib.clone(),
            profile: None,
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
/// extra outputs, no EP INT8 mode, no saved optimised model. Full graph optimisation, as inference gets: ONNX
/// Runtime's fusions leave a node alone when its output is a graph output, so every exposed tensor survives with the
/// same values (MiniLM: ranges within 6e-7 relative of `basic`'s), and the pass runs the fused kernels (5-8 %
/// faster than `basic` there). ONNX Runtime's threads do not spin between runs: the statistics run on the same cores
/// right after each run (MiniLM, histogram methods: statistics 2.0 s -> 1.5 s for 100 features).
pub fn calibration_session(ep: &Ep, base: &SessionConfig) -> SessionConfig {
    SessionConfig {
        ep: ep.clone().with_seed_env().without_int8(),
        opt_level: OptLevel::All,
        intra_spinning: false,
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
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum IoNames {
    /// Found in the graph: token ids feed the largest embedding Gather, segment ids a small one (or ORT's fused
    /// EmbedLayerNormalization's slots), the mask is the remaining integer input; start / end logits by name, else the
    /// two outputs in order, else one output declared `[batch, seq, 2]` holding both ([`crate::data::detect_io`]).
    #[default]
    Auto,
    /// input_ids, attention_mask, token_type_ids -> start_logits, end_logits.
    Hf,
    /// input_ids, input_mask, segment_ids -> output_start_logits, output_end_logits.
    Nvidia,
    /// Named roles (`ids=...,mask=...,segment=...,start=...,end=...`); roles not named are found as with `Auto`, and
    /// `segment=` (empty) means the model takes no segment ids.
    Explicit(ExplicitIo),
}

/// The roles `--io-names ids=...,mask=...` names.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExplicitIo {
    pub ids: Option<String>,
    pub mask: Option<String>,
    /// `Some("")`: no segment input.
    pub segment: Option<String>,
    pub start: Option<String>,
    pub end: Option<String>,
    /// Class logits (a model that is not a SQuAD model).
    pub logits: Option<String>,
    /// Position ids input (fed 0, 1, 2, ...); `Some("")`: none.
    pub position: Option<String>,
}

impl FromStr for IoNames {
    type Err = Error;

    fn from_str(s: &str) -> Result<IoNames> {
        match s.trim() {
            "auto" => Ok(IoNames::Auto),
            "hf" | "huggingface" => Ok(IoNames::Hf),
            "nvidia" | "bert-tf" => Ok(IoNames::Nvidia),
            other if other.contains('=') => {
                let mut e = ExplicitIo::default();
                for pair in other.split(',') {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    let slot = match k.trim() {
                        "ids" => &mut e.ids,
                        "mask" => &mut e.mask,
                        "segment" => &mut e.segment,
                        "start" => &mut e.start,
                        "end" => &mut e.end,
                        "logits" => &mut e.logits,
                        "position" | "positions" => &mut e.position,
                        k => {
                            return Err(Error::Config(format!(
                                "--io-names: unknown role `{k}`; roles: ids, mask, segment, start, end, logits, position"
                            )));
                        }
                    };
                    *slot = Some(v.trim().to_owned());
                }
                Ok(IoNames::Explicit(e))
            }
            other => Err(Error::Config(format!(
                "--io-names `{other}` is not known: auto, hf, nvidia, or roles like ids=input.1,mask=input.2,segment=,\
                 start=s,end=e"
            ))),
        }
    }
}

impl IoNames {
    /// The fixed names of `Hf` / `Nvidia`; the others start from the Hugging Face names until the model is seen.
    fn io(&self) -> ModelIo {
        match self {
            IoNames::Nvidia => ModelIo::bert_tf(),
            _ => ModelIo::huggingface(),
        }
    }
}

/// How SQuAD text becomes model inputs.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct DataSettings {
    /// WordPiece vocabulary of the model. Default: the model directory's tokenizer.json (as --token) or vocab.txt,
    /// else squad/vocab.txt.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub vocab: Option<PathBuf>,
    /// Tokenizer of the inputs: a Hugging Face tokenizer.json saved with the model (its own lower-casing applies).
    /// Default: WordPiece built from --vocab.
    #[cfg_attr(feature = "cli", arg(long = "token", value_name = "FILE"))]
    pub tokenizer_json: Option<PathBuf>,
    /// The vocabulary is cased: do not lower-case text.
    #[cfg_attr(feature = "cli", arg(long = "cased", action = clap::ArgAction::SetFalse))]
    pub lowercase: bool,
    /// SQuAD version of the dataset: 1.1 or 2.0 (`--version` is the seed scripts' spelling; qdq's own version is
    /// `qdq --version`).
    #[cfg_attr(
        feature = "cli",
        arg(
            long = "squad-version",
            visible_alias = "version",
            default_value = "1.1",
            value_name = "VERSION",
            value_parser = cli::choice::<SquadVersion>(&["1.1", "2.0"])
        )
    )]
    pub version: SquadVersion,
    /// Sequence length of a feature (query + window + 3 special tokens). Default: the model's own when its inputs
    /// declare a fixed one (e.g. [batch, 256]; every batch is then padded to it), else 384, or fewer when the model's
    /// position-embedding table has fewer rows (a model trained on 128 positions gets 128).
    #[cfg_attr(feature = "cli", arg(long, visible_alias = "seq_len", value_name = "N"))]
    pub seq_len: Option<usize>,
    /// Maximum query length in tokens (longer questions are truncated). Default: 64, or half the sequence length
    /// when that is shorter (32 for --seq-len 64).
    #[cfg_attr(feature = "cli", arg(long, visible_alias = "query_len", value_name = "N"))]
    pub query_len: Option<usize>,
    /// Step between the starts of consecutive windows over a long context, in tokens. Default: 128, or half the
    /// window when the window (--seq-len - --query-len - 3) is not longer than 128, so windows still overlap.
    #[cfg_attr(feature = "cli", arg(long, visible_alias = "doc_stride", value_name = "N"))]
    pub doc_stride: Option<usize>,
    /// Model input/output names. auto (the default): found in the graph (token ids feed the word-embedding Gather,
    /// segment ids the small one (or a OneHot of depth <= 16, as TF exports look up token types), position ids (if an
    /// input) the position table, the mask is the other integer input;
    /// an input the logits do not depend on, such as
    /// a `unique_ids` copied to an output, is fed zeros; outputs named start/end, else the two parts of one Split
    /// (or Gather / Slice at 0 and 1) of the QA head, else the only two outputs in order, else one [batch, seq, 2]
    /// output holding start and end on its last axis), printed. hf: input_ids,
    /// attention_mask, token_type_ids -> start_logits, end_logits. nvidia: input_ids, input_mask, segment_ids ->
    /// output_start_logits, output_end_logits. Or roles: `ids=input.1,mask=input.2,segment=input.3,start=out0,end=out1`
    /// (roles left out are found; `segment=` = none, likewise `position=`; start and end naming one output = stacked).
    #[cfg_attr(feature = "cli", arg(long, default_value = "auto", value_name = "NAMES"))]
    pub io_names: IoNames,
    /// Pad every batch to --seq-len instead of to its longest feature (static shapes, e.g. for TensorRT engines;
    /// implied when the model's inputs declare a fixed sequence length).
    #[cfg_attr(feature = "cli", arg(long))]
    pub pad_to_max: bool,
}

/// The sequence length every feature gets when none is asked for and the model does not fix or limit one.
pub const DEFAULT_SEQ_LEN: usize = 384;
/// The longest query when none is asked for (at most half the sequence length).
pub const DEFAULT_QUERY_LEN: usize = 64;
/// The step between windows when none is asked for (at most half the window when the window is not longer).
pub const DEFAULT_DOC_STRIDE: usize = 128;

impl DataSettings {
    /// The checked data configuration (window sizes validated) for the model at `model` (a file; see
    /// [`resolve_model`]): without --vocab and --token, the tokenizer is the one beside the model (tokenizer.json,
    /// else vocab.txt), else squad/vocab.txt.
    pub fn config(&self, model: &Path) -> Result<DataConfig> {
        // Only the graph is read here; a file that cannot be read is reported by whatever loads it next.
        let (declared, positions) = match onnx_ir::Model::load_graph_only(model) {
            Ok(m) => (DeclaredShape::of(&m, model)?, crate::data::position_rows(&m)),
            Err(_) => (DeclaredShape::default(), None),
        };
        if let Some(b) = declared.batch {
            tracing::info!(
                "{}: token inputs declared with a batch of exactly {b}: every run takes {b} feature{} whatever --batch \
                 says{}",
                model.display(),
                if b == 1 { "" } else { "s" },
                if b == 1 {
                    ""
                } else {
                    ", a short last batch filled up with copies of its first feature (not scored)"
                }
            );
        }
        let seq_len = match (self.seq_len, declared.seq_len) {
            (Some(asked), Some(fixed)) if asked != fixed => {
                return Err(Error::Input {
                    path: model.to_path_buf(),
                    reason: format!(
                        "the model takes sequences of exactly {fixed} tokens (its token inputs are declared \
                         [.., {fixed}]) but --seq-len is {asked}: leave --seq-len out or give {fixed}"
                    ),
                });
            }
            (_, Some(fixed)) => {
                tracing::info!(
                    "{}: token inputs declared [{}, {fixed}]: features of {fixed} tokens, every batch padded to {fixed}",
                    model.display(),
                    declared.batch.map_or("batch".to_owned(), |b| b.to_string())
                );
                fixed
            }
            (Some(asked), None) => asked,
            (None, None) => match positions {
                Some((table, rows)) if rows > 0 && (rows as usize) < DEFAULT_SEQ_LEN => {
                    tracing::info!(
                        "{}: the model embeds {rows} positions (`{table}`): features of {rows} tokens (--seq-len)",
                        model.display()
                    );
                    rows as usize
                }
                _ => DEFAULT_SEQ_LEN,
            },
        };
        let features = self.windows(seq_len)?;
        features.validate()?;
        let dir = model.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let (vocab, tokenizer_json) = match (&self.vocab, &self.tokenizer_json) {
            (v, Some(t)) => (v.clone().unwrap_or_default(), Some(t.clone())),
            (Some(v), None) => (v.clone(), None),
            (None, None) if dir.join("tokenizer.json").is_file() => (PathBuf::new(), Some(dir.join("tokenizer.json"))),
            (None, None) if dir.join("vocab.txt").is_file() => (dir.join("vocab.txt"), None),
            (None, None) => (PathBuf::from("squad/vocab.txt"), None),
        };
        if vocab != self.vocab.clone().unwrap_or_default() || tokenizer_json != self.tokenizer_json {
            let found = tokenizer_json.as_ref().unwrap_or(&vocab);
            tracing::info!("tokenizer: {} (no --vocab / --token given)", found.display());
        }
        Ok(DataConfig {
            vocab,
            tokenizer_json,
            lowercase: self.lowercase,
            version_2: self.version == SquadVersion::V2_0,
            features,
            io: self.io_names.io(),
            io_names: self.io_names.clone(),
            padding: if self.pad_to_max || declared.seq_len.is_some() {
                Padding::Fixed(seq_len)
            } else {
                Padding::Longest
            },
            fixed_batch: declared.batch,
        })
    }
}

impl DataSettings {
    /// The window settings for features of `seq_len` tokens: --query-len and --doc-stride as given (checked to fit, the
    /// error naming the flags), else their defaults scaled down for a short sequence (logged when they are).
    fn windows(&self, seq_len: usize) -> Result<FeatureConfig> {
        // [CLS], [SEP], [SEP] and at least one query and one context token.
        if seq_len < 5 {
            return Err(Error::Config(format!(
                "--seq-len {seq_len} is too short: a feature holds [CLS], the query, [SEP], the context and [SEP] (at \
                 least 5 tokens)"
            )));
        }
        let query_len = match self.query_len {
            Some(0) => return Err(Error::Config("--query-len must be at least 1".into())),
            Some(q) if seq_len < q + 4 => {
                return Err(Error::Config(format!(
                    "--seq-len {seq_len} leaves no room for --query-len {q}: a feature holds [CLS], the query, [SEP], at \
                     least one context token and [SEP]; give --query-len {} or less, or a longer --seq-len",
                    seq_len - 4
                )));
            }
            Some(q) => q,
            None => {
                let q = DEFAULT_QUERY_LEN.min(seq_len / 2).min(seq_len - 4);
                if q < DEFAULT_QUERY_LEN {
                    tracing::info!("--seq-len {seq_len}: queries of at most {q} tokens (--query-len; default 64)");
                }
                q
            }
        };
        let window = seq_len - query_len - 3;
        let doc_stride = match self.doc_stride {
            Some(0) => return Err(Error::Config("--doc-stride must be at least 1".into())),
            Some(s) => s,
            None if window <= DEFAULT_DOC_STRIDE => {
                let s = (window / 2).max(1);
                tracing::info!(
                    "windows of {window} context tokens: a step of {s} tokens between them (--doc-stride; default 128), \
                     so they overlap"
                );
                s
            }
            None => DEFAULT_DOC_STRIDE,
        };
        Ok(FeatureConfig { max_seq_len: seq_len, doc_stride, max_query_len: query_len })
    }
}

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

/// Which range methods to compute, from the one statistics pass.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct MethodSettings {
    /// Range algorithm used for the Q/DQ scales: mse (the range minimising the expected quantization error; the
    /// default; MiniLM SQuAD with the tensorrt policy: 0.33 F1 below FP32 on the whole dev set), minmax, percentile,
    /// entropy (TensorRT's KL method) or distribution. Statistics for all of
    /// --compare-methods are collected in the same pass. Where every method is percentile, mse or minmax, the
    /// histograms count bin by bin only the tails the ranges read (the same ranges; where a range turns out to need
    /// more, the pass runs again with whole histograms and says so).
    #[cfg_attr(
        feature = "cli",
        arg(
            long = "calibrate-method",
            default_value = "mse",
            visible_alias = "calibrate_method",
            value_name = "METHOD"
        )
    )]
    pub method: MethodKind,
    /// Also compute ranges with these methods from the same statistics (written to calibration_<method>.json); `qdq
    /// e2e` also quantizes with each (model_qdq_<method>.onnx) and evaluates it: a table row, results.json
    /// `compared_methods`, predictions_int8_<method>.json.
    #[cfg_attr(feature = "cli", arg(long = "compare-methods", value_delimiter = ',', value_name = "METHOD,..."))]
    pub compare: Vec<MethodKind>,
    /// Percentile for the percentile method. Default: 99.999. An error when no method of the run is percentile.
    #[cfg_attr(feature = "cli", arg(long, value_name = "P"))]
    pub percentile: Option<f64>,
    /// Quantized bins of the entropy method (TensorRT uses 128 for int8; the seeds' 8001/255 is accepted). Default:
    /// 128. An error when no method of the run is entropy.
    #[cfg_attr(feature = "cli", arg(long, visible_alias = "num_quantized_bins", value_name = "N"))]
    pub num_quantized_bins: Option<usize>,
    /// Symmetric ranges for minmax/percentile (+-max|x|); an error when the run computes neither.
    #[cfg_attr(feature = "cli", arg(long))]
    pub symmetric: bool,
}

impl MethodSettings {
    /// `method` first, then each of `compare` once. A method option that none of them reads is an error naming it
    /// (a mistyped or forgotten `--calibrate-method` would otherwise pass unnoticed).
    pub fn methods(&self) -> Result<Vec<Method>> {
        let kinds = self.kinds();
        let unused = |flag: &str, value: String, wants: &[MethodKind]| -> Error {
            let names = |ks: &[MethodKind]| ks.iter().map(|k| k.name()).collect::<Vec<_>>().join(" or ");
            Error::Config(format!(
                "{flag}{value} is an option of the {} method, and this run computes {} only: add --calibrate-method {} \
                 or --compare-methods {}, or leave {flag} out",
                names(wants),
                names(&kinds),
                wants[0],
                wants[0]
            ))
        };
        if let Some(p) = self.percentile
            && !kinds.contains(&MethodKind::Percentile)
        {
            return Err(unused("--percentile", format!(" {p}"), &[MethodKind::Percentile]));
        }
        if let Some(n) = self.num_quantized_bins
            && !kinds.contains(&MethodKind::Entropy)
        {
            return Err(unused("--num-quantized-bins", format!(" {n}"), &[MethodKind::Entropy]));
        }
        if self.symmetric && !kinds.iter().any(|k| matches!(k, MethodKind::MinMax | MethodKind::Percentile)) {
            return Err(unused("--symmetric", String::new(), &[MethodKind::MinMax, MethodKind::Percentile]));
        }
        let d = MethodOptions::default();
        let options = MethodOptions {
            percentile: self.percentile.unwrap_or(d.percentile),
            symmetric: self.symmetric,
            num_quantized_bins: self.num_quantized_bins.unwrap_or(d.num_quantized_bins),
        };
        kinds.into_iter().map(|k| Ok(Method::new(k, &options)?)).collect()
    }

    /// `method` first, then each of `compare` once.
    fn kinds(&self) -> Vec<MethodKind> {
        let mut kinds = vec![self.method];
        for k in &self.compare {
            if !kinds.contains(k) {
                kinds.push(*k);
            }
        }
        kinds
    }
}

/// Calibration settings shared by `qdq calibrate` and `qdq e2e`.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct CalibSettings {
    /// Calibration data (e2e: default the evaluation --dataset; calibrate: required): SQuAD JSON, or for any model
    /// .npz (arrays named after the model inputs), .npy (token ids), text lines (a tab separates a pair) or JSONL
    /// (`{"text": ..., "text_pair": ...}`). Calibrating on train data and evaluating on dev is the sound protocol.
    #[cfg_attr(feature = "cli", arg(long, visible_alias = "calibration_data", value_name = "FILE"))]
    pub calibration_data: Option<PathBuf>,
    /// Number of calibration questions or inputs (the first N of the file).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 100, visible_alias = "cal_num", value_name = "N"))]
    pub cal_num: usize,
    /// Execution provider for calibration (runs the FP32 model with extra outputs).
    #[cfg_attr(
        feature = "cli",
        arg(id = "cal_ep", long = "cal-ep", default_value = "cpu", visible_alias = "cal_ep", value_name = "EP")
    )]
    pub ep: Ep,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub methods: MethodSettings,
    /// Histogram bins per tensor. Default: 2048. An error when every method of the run is minmax (no histogram).
    #[cfg_attr(feature = "cli", arg(long, visible_alias = "num_bins", value_name = "N"))]
    pub num_bins: Option<usize>,
    /// Augmented-model sessions run side by side on the CPU EP, each on its share of --threads, the batches dealt to
    /// them in turn, each folding its outputs into statistics of its own (merged exactly at the end: the ranges are
    /// the same whatever the number, and with the same number calib_state.json is the same from run to run). While
    /// one session folds, another runs (MiniLM, 2 cores, 100 questions padded to 384: the pass 3-13 % shorter than
    /// one session's and steadier, peak memory 350 -> 565 MB). Default: 2 (1 on one core) for a model of at most
    /// 512 MiB, else 1: each session holds its own copy of the weights. Always 1 on other EPs and with a
    /// moving-average calibrator (its result depends on batch order).
    #[cfg_attr(feature = "cli", arg(long, visible_alias = "cal_workers", value_name = "N", value_parser = cli::positive))]
    pub cal_workers: Option<usize>,
}

impl CalibSettings {
    /// The calibration options: the methods, and a session on [`CalibSettings::ep`] otherwise as `base`
    /// ([`calibration_session`]).
    pub fn options(&self, batch: usize, base: &SessionConfig) -> Result<CalibrateOptions> {
        let methods = self.methods.methods()?;
        if let Some(n) = self.num_bins
            && !methods.iter().any(|m| m.needs_signed_histogram() || m.needs_abs_histogram())
        {
            return Err(Error::Config(format!(
                "--num-bins {n} sizes the histograms, and minmax reads none: give a histogram method (--calibrate-method \
                 or --compare-methods percentile, entropy, mse or distribution), or leave --num-bins out"
            )));
        }
        Ok(CalibrateOptions {
            batch,
            methods,
            num_bins: self.num_bins.unwrap_or(calib::CollectOptions::default().num_bins),
            session: calibration_session(&self.ep, base),
            workers: self.cal_workers,
            reading: None,
        })
    }
}

/// The placement policy: a preset plus overrides.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct PolicySettings {
    /// Placement preset: tensorrt, migraphx, cpu, ort-compatible (`qdq quantize --list-policies` explains them).
    /// Default: the one made for --ep (cpu -> cpu, tensorrt -> tensorrt, migraphx -> migraphx; any other EP ->
    /// tensorrt, the most accurate layout).
    #[cfg_attr(feature = "cli", arg(long = "policy", value_name = "PRESET"))]
    pub preset: Option<String>,
    /// static: calibrated ranges in Q/DQ pairs. dynamic: no calibration; constant-weight MatMuls get int8 weights and
    /// their inputs are quantized at run time (DynamicQuantizeLinear + MatMulInteger, which ONNX Runtime's CPU EP
    /// fuses into DynamicQuantizeMatMul), embeddings as the policy's `embeddings` option says; for CPU only.
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value = "static", value_name = "MODE", value_parser = cli::choice::<Mode>(&Mode::NAMES))
    )]
    pub mode: Mode,
    /// Use ONNX Runtime's own QDQ layout (the `ort-compatible` preset), as the seeds' --ort_quant does.
    #[cfg_attr(feature = "cli", arg(long, visible_alias = "ort_quant"))]
    pub ort_quant: bool,
    /// Change one policy option: KEY=VALUE (repeatable), e.g. `smooth=off` (no SmoothQuant-style smoothing before
    /// calibration), `smooth=0.5` (its strength), `softmax_range=full`, `exclude_tensors=GLOB`. Unknown keys are errors
    /// listing the valid ones; `qdq quantize --list-policies` shows every key and each preset's values.
    #[cfg_attr(feature = "cli", arg(long = "policy-option", value_name = "KEY=VALUE", value_parser = cli::key_value))]
    pub options: Vec<(String, String)>,
    /// Do not quantize these nodes (exact name or glob; repeatable).
    #[cfg_attr(feature = "cli", arg(long = "exclude-node", value_name = "NODE"))]
    pub exclude_nodes: Vec<String>,
    /// Fail if a tensor the policy would quantize has no range (default: skip it and list it).
    #[cfg_attr(feature = "cli", arg(long))]
    pub strict: bool,
}

/// How activations are quantized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Calibrated ranges, fixed in Q/DQ pairs.
    #[default]
    Static,
    /// No calibration: weights int8, each MatMul input quantized at run time ([`qdq::quantize_dynamic`]).
    Dynamic,
}

impl Mode {
    pub const NAMES: [&'static str; 2] = ["static", "dynamic"];
}

impl FromStr for Mode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "static" => Ok(Mode::Static),
            "dynamic" => Ok(Mode::Dynamic),
            _ => Err(Error::Config(format!("unknown --mode `{s}`; valid: {}", Mode::NAMES.join(", ")))),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Static => "static",
            Mode::Dynamic => "dynamic",
        })
    }
}

/// The preset made for an execution provider: what `--policy` defaults to.
pub fn preset_for_ep(ep: &Ep) -> &'static str {
    match ep {
        Ep::Cpu => "cpu",
        Ep::MiGraphX(_) => "migraphx",
        _ => "tensorrt",
    }
}

/// Which preset a run uses, and why (printed, and recorded in results.json).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PolicyChoice {
    pub preset: String,
    /// `--policy`, `--ort-quant`, or `--ep <name>` when the preset followed the EP.
    pub chosen_by: String,
}

impl fmt::Display for PolicyChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.chosen_by.starts_with("--ep") {
            write!(f, "policy {} (the preset for {}; --policy chooses another)", self.preset, self.chosen_by)
        } else {
            write!(f, "policy {} (from {})", self.preset, self.chosen_by)
        }
    }
}

impl PolicySettings {
    /// The preset in use for a model meant for `ep`: `ort-compatible` with `ort_quant`, else `--policy`, else
    /// [`preset_for_ep`].
    pub fn choice(&self, ep: &Ep) -> PolicyChoice {
        let (preset, chosen_by) = match (&self.preset, self.ort_quant) {
            (_, true) => ("ort-compatible".to_owned(), "--ort-quant".to_owned()),
            (Some(p), false) => (p.clone(), "--policy".to_owned()),
            (None, false) => (preset_for_ep(ep).to_owned(), format!("--ep {}", ep.short_name())),
        };
        PolicyChoice { preset, chosen_by }
    }

    /// The policy for a model meant for `ep` (overrides applied in order, then the exclusions and `strict`), and
    /// which preset it started from.
    pub fn policy(&self, ep: &Ep) -> Result<(qdq::Policy, PolicyChoice)> {
        let choice = self.choice(ep);
        let mut policy = qdq::Policy::preset(&choice.preset)?;
        for (k, v) in &self.options {
            policy.set(k.trim(), v.trim())?;
        }
        for n in &self.exclude_nodes {
            policy.set("exclude_nodes", n)?;
        }
        if self.strict {
            policy.set("strict", "true")?;
        }
        Ok((policy, choice))
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

/// Value parsers of the flags the settings declare (feature `cli`).
#[cfg(feature = "cli")]
pub mod cli {
    use clap::builder::{PossibleValuesParser, TypedValueParser};

    /// One of `names` (listed in --help), parsed into `T`.
    pub fn choice<T>(names: &'static [&'static str]) -> impl TypedValueParser<Value = T>
    where
        T: std::str::FromStr + Clone + Send + Sync + 'static,
        T::Err: std::error::Error + Send + Sync + 'static,
    {
        PossibleValuesParser::new(names).try_map(|s| s.parse::<T>())
    }

    /// `KEY=VALUE` of `--policy-option`.
    pub fn key_value(s: &str) -> Result<(String, String), String> {
        s.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())).ok_or_else(|| format!("`{s}` must be KEY=VALUE"))
    }

    /// A count of at least 1.
    pub fn positive(s: &str) -> Result<usize, String> {
        match s.parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("`{s}` must be a whole number of at least 1")),
        }
    }
}
