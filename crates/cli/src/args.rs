//! Command-line arguments. Long options are kebab-case; the seed scripts' snake_case spellings (`--seq_len`,
//! `--cal_num`, ...) are accepted as aliases with the same meaning and defaults.

use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser as _};
use clap::{Args, Parser, Subcommand};
use pipeline::{Ep, IoNames, MethodKind, OptLevel, SquadVersion};

const ABOUT: &str = "Post-training INT8 quantization of BERT ONNX models in QDQ form, proved on SQuAD.";

const LONG_ABOUT: &str = "\
Post-training INT8 quantization of BERT ONNX models in QDQ form, proved on SQuAD.

qdq calibrates a model on SQuAD features (streaming histograms: memory stays flat in the number of samples),
inserts QuantizeLinear/DequantizeLinear pairs placed by a policy, and evaluates the FP32 and INT8 models on an
ONNX Runtime execution provider, reporting EM/F1 and latency side by side.

ONNX Runtime is loaded from ORT_DYLIB_PATH, --ort-lib, or the copy `cargo xtask setup` installs.";

#[derive(Debug, Parser)]
#[command(name = "qdq", version, about = ABOUT, long_about = LONG_ABOUT, args_override_self = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// More log output (debug level; QDQ_LOG=<filter> sets any tracing filter).
    #[arg(long, short, global = true)]
    pub verbose: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Calibrate, quantize, then evaluate FP32 and INT8 side by side; writes everything to --out.
    #[command(long_about = E2E_ABOUT)]
    E2e(Box<E2eArgs>),
    /// Run calibration data through a model and write its ranges (calibration.json, TensorRT/MIGraphX tables).
    Calibrate(Box<CalibrateArgs>),
    /// Insert Q/DQ pairs into a model, with ranges from a calibration file.
    Quantize(Box<QuantizeArgs>),
    /// Evaluate a model (FP32 or QDQ) on SQuAD: EM, F1 and latency.
    Eval(Box<EvalArgs>),
    /// Summarise a model: operators, Q/DQ coverage, and the ranges Q/DQ pairs encode.
    Inspect(InspectArgs),
    /// List the execution providers of the loaded ONNX Runtime.
    Providers(ProvidersArgs),
}

const E2E_ABOUT: &str = "\
Calibrate, quantize, then evaluate FP32 and INT8 side by side.

Steps: (1) calibration features from --calibration-data (default: --dataset) run through the model with every
tensor the policy quantizes exposed as an output; statistics for every --calibrate-method are collected in one
pass; (2) Q/DQ pairs are inserted by --policy with ranges from the chosen method; (3) both models are evaluated
on --dataset.

Output directory (--out): model_qdq.onnx, calibration.json, calibration.flatbuffers (ORT TensorRT/MIGraphX
table), calibration.cache (TensorRT native cache), calib_state.json (mergeable statistics),
predictions_fp32.json, predictions_int8.json, results.json and report.md.

Settings may also come from a TOML file (--config): keys are the long option names (`seq-len = 128`,
`calibrate-method = \"entropy\"`); options on the command line win.";

/// Which ONNX Runtime and execution provider to use.
#[derive(Debug, Clone, Args)]
pub struct RuntimeArgs {
    /// Execution provider: cpu, cuda, tensorrt, migraphx, rocm, openvino. An EP the loaded ONNX Runtime lacks is an
    /// error (see --allow-fallback).
    #[arg(long, default_value = "cpu", value_name = "EP")]
    pub ep: Ep,
    /// Enable the EP's FP16 mode (TensorRT trt_fp16_enable / MIGraphX fp16; as ORT_*_FP16_ENABLE=1 in the seeds).
    #[arg(long)]
    pub fp16: bool,
    /// Enable the EP's INT8 mode for the quantized model (TensorRT trt_int8_enable / MIGraphX int8; as
    /// ORT_*_INT8_ENABLE=1 in the seeds). TensorRT/MIGraphX also get our calibration table. No effect on cpu.
    #[arg(long)]
    pub int8: bool,
    /// Run on CPU when the EP is missing or fails to register (printed, never silent).
    #[arg(long)]
    pub allow_fallback: bool,
    /// ONNX Runtime's verbose log.
    #[arg(long, visible_alias = "ort_verbose")]
    pub ort_verbose: bool,
    /// Save the models as optimised by ONNX Runtime into --out (model*_optimized.onnx), e.g. to see which Q/DQ
    /// patterns the EP fused.
    #[arg(long, visible_alias = "save_load")]
    pub save_load: bool,
    /// Graph optimisation level: disable, basic, extended, all. Default: all, except `disable` for QDQ models on
    /// TensorRT and MIGraphX (as the seeds do: those EPs read the Q/DQ pairs themselves).
    #[arg(long, value_name = "LEVEL")]
    pub opt_level: Option<OptLevel>,
    /// Intra-op threads (default: one per core).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Path of libonnxruntime.so (default: ORT_DYLIB_PATH, then the copy `cargo xtask setup` installed).
    #[arg(long, value_name = "FILE")]
    pub ort_lib: Option<PathBuf>,
    /// TensorRT engine cache directory.
    #[arg(long, value_name = "DIR")]
    pub trt_engine_cache: Option<PathBuf>,
}

/// How SQuAD text becomes model inputs.
#[derive(Debug, Clone, Args)]
pub struct DataArgs {
    /// WordPiece vocabulary of the model.
    #[arg(long, default_value = "squad/vocab.txt", value_name = "FILE")]
    pub vocab: PathBuf,
    /// Tokenizer of the inputs: a Hugging Face tokenizer.json saved with the model (its own lower-casing applies).
    /// Default: WordPiece built from --vocab.
    #[arg(long, value_name = "FILE")]
    pub token: Option<PathBuf>,
    /// The vocabulary is cased: do not lower-case text.
    #[arg(long)]
    pub cased: bool,
    /// SQuAD version of the dataset: 1.1 or 2.0.
    #[arg(long, default_value = "1.1",
          value_parser = PossibleValuesParser::new(["1.1", "2.0"]).try_map(|s| s.parse::<SquadVersion>()))]
    pub version: SquadVersion,
    /// Sequence length of a feature (query + window + 3 special tokens).
    #[arg(long, default_value_t = 384, visible_alias = "seq_len", value_name = "N")]
    pub seq_len: usize,
    /// Maximum query length in tokens (longer questions are truncated).
    #[arg(long, default_value_t = 64, visible_alias = "query_len", value_name = "N")]
    pub query_len: usize,
    /// Step between the starts of consecutive windows over a long context, in tokens.
    #[arg(long, default_value_t = 128, visible_alias = "doc_stride", value_name = "N")]
    pub doc_stride: usize,
    /// Model input/output names: `hf` (input_ids, attention_mask, token_type_ids -> start_logits, end_logits) or
    /// `nvidia` (input_ids, input_mask, segment_ids -> output_start_logits, output_end_logits).
    #[arg(long, default_value = "hf",
          value_parser = PossibleValuesParser::new(["hf", "nvidia"]).try_map(|s| s.parse::<IoNames>()))]
    pub io_names: IoNames,
    /// Pad every batch to --seq-len instead of to its longest feature (static shapes, e.g. for TensorRT engines).
    #[arg(long)]
    pub pad_to_max: bool,
}

/// Calibration settings.
#[derive(Debug, Clone, Args)]
pub struct CalibArgs {
    /// SQuAD file for calibration (default: the evaluation --dataset). Calibrating on train data and evaluating
    /// on dev is the sound protocol.
    #[arg(long, visible_alias = "calibration_data", value_name = "FILE")]
    pub calibration_data: Option<PathBuf>,
    /// Number of calibration questions (the first N of the file).
    #[arg(long, default_value_t = 100, visible_alias = "cal_num", value_name = "N")]
    pub cal_num: usize,
    /// Execution provider for calibration (runs the FP32 model with extra outputs).
    #[arg(long, default_value = "cpu", visible_alias = "cal_ep", value_name = "EP")]
    pub cal_ep: Ep,
    /// Range algorithm used for the Q/DQ scales: mse (the range minimising the expected quantization error; the
    /// default; MiniLM SQuAD with the tensorrt policy: 0.33 F1 below FP32 on the whole dev set), minmax, percentile,
    /// entropy (TensorRT's KL method) or distribution. Statistics for all of
    /// --compare-methods are collected in the same pass.
    #[arg(long, default_value = "mse", visible_alias = "calibrate_method", value_name = "METHOD")]
    pub calibrate_method: MethodKind,
    /// Also compute ranges with these methods from the same statistics (written to calibration_<method>.json).
    #[arg(long, value_delimiter = ',', value_name = "METHOD,...")]
    pub compare_methods: Vec<MethodKind>,
    /// Percentile for the percentile method.
    #[arg(long, default_value_t = 99.999, value_name = "P")]
    pub percentile: f64,
    /// Histogram bins per tensor.
    #[arg(long, default_value_t = 2048, visible_alias = "num_bins", value_name = "N")]
    pub num_bins: usize,
    /// Quantized bins of the entropy method (TensorRT uses 128 for int8; the seeds' 8001/255 is accepted).
    #[arg(long, default_value_t = 128, visible_alias = "num_quantized_bins", value_name = "N")]
    pub num_quantized_bins: usize,
    /// Symmetric ranges for minmax/percentile (+-max|x|).
    #[arg(long)]
    pub symmetric: bool,
}

/// Where Q/DQ pairs go.
#[derive(Debug, Clone, Args)]
pub struct PolicyArgs {
    /// Placement preset: tensorrt, migraphx, cpu, ort-compatible (`qdq quantize --list-policies` explains them).
    #[arg(long, default_value = "tensorrt", value_name = "PRESET")]
    pub policy: String,
    /// Use ONNX Runtime's own QDQ layout (the `ort-compatible` preset), as the seeds' --ort_quant does.
    #[arg(long, visible_alias = "ort_quant")]
    pub ort_quant: bool,
    /// Change one policy option: KEY=VALUE (repeatable), e.g. `smooth=off` (no SmoothQuant-style smoothing before
    /// calibration), `smooth=0.5` (its strength), `softmax_range=full`, `exclude_tensors=GLOB`. Unknown keys are errors
    /// listing the valid ones; `qdq quantize --list-policies` shows every key and each preset's values.
    #[arg(long = "policy-option", value_name = "KEY=VALUE", value_parser = key_value)]
    pub policy_options: Vec<(String, String)>,
    /// Do not quantize these nodes (exact name or glob; repeatable).
    #[arg(long, value_name = "NODE")]
    pub exclude_node: Vec<String>,
    /// Fail if a tensor the policy would quantize has no range (default: skip it and list it).
    #[arg(long)]
    pub strict: bool,
}

#[derive(Debug, Args)]
pub struct E2eArgs {
    /// Print one JSON document on stdout instead of text (schemas in docs/JSON.md); logs stay on stderr.
    #[arg(long)]
    pub json: bool,
    /// The FP32 ONNX model.
    #[arg(long, default_value = "model.onnx", value_name = "FILE")]
    pub model: PathBuf,
    /// SQuAD file to evaluate on (default: squad/dev-v<version>.json).
    #[arg(long, value_name = "FILE")]
    pub dataset: Option<PathBuf>,
    /// Questions to evaluate (the first N of the file; 0 = all).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub samples: usize,
    /// Features per inference batch.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub batch: usize,
    /// Stop after quantizing: no evaluation.
    #[arg(long, visible_alias = "no_eval")]
    pub no_eval: bool,
    /// Output directory.
    #[arg(long, default_value = "out", value_name = "DIR")]
    pub out: PathBuf,
    /// TOML file with settings (keys = long option names); command-line options win.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    #[command(flatten)]
    pub data: DataArgs,
    #[command(flatten)]
    pub calib: CalibArgs,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Print one JSON document on stdout instead of text (schemas in docs/JSON.md); logs stay on stderr.
    #[arg(long)]
    pub json: bool,
    /// The FP32 ONNX model.
    #[arg(long, value_name = "FILE")]
    pub model: PathBuf,
    /// Features per calibration batch.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub batch: usize,
    /// Output directory for calibration.json, calibration.flatbuffers, calibration.cache, calib_state.json.
    #[arg(long, default_value = "out", value_name = "DIR")]
    pub out: PathBuf,
    /// Also merge these statistics files (calib_state.json of earlier or parallel runs) into the result.
    #[arg(long, value_name = "FILE")]
    pub merge: Vec<PathBuf>,
    /// Placement policy: decides which tensors need ranges and, with its `smooth` option (on in the tensorrt,
    /// migraphx and cpu presets), whether the MatMul inputs are smoothed into the weights first; the smoothed model is
    /// then written as model_smoothed.onnx next to the tables, and that is the model to pass to `qdq quantize`.
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub data: DataArgs,
    #[command(flatten)]
    pub calib: CalibArgs,
    #[arg(long, value_name = "FILE", help = "Path of libonnxruntime.so")]
    pub ort_lib: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct QuantizeArgs {
    /// Print one JSON document on stdout instead of text (schemas in docs/JSON.md); logs stay on stderr.
    #[arg(long)]
    pub json: bool,
    /// The FP32 ONNX model.
    #[arg(long, value_name = "FILE", required_unless_present = "list_policies")]
    pub model: Option<PathBuf>,
    /// Ranges: calibration.json from `qdq calibrate`, ORT's flatbuffers table, or a TensorRT calibration cache.
    #[arg(long, value_name = "FILE", required_unless_present = "list_policies")]
    pub ranges: Option<PathBuf>,
    /// Where to write the QDQ model.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Print what would be inserted where, write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Describe the presets and options, then exit.
    #[arg(long)]
    pub list_policies: bool,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Print one JSON document on stdout instead of text (schemas in docs/JSON.md); logs stay on stderr.
    #[arg(long)]
    pub json: bool,
    /// The ONNX model (FP32 or QDQ).
    #[arg(long, value_name = "FILE")]
    pub model: PathBuf,
    /// SQuAD file to evaluate on.
    #[arg(long, value_name = "FILE")]
    pub dataset: PathBuf,
    #[arg(long, default_value_t = 0, value_name = "N", help = "Questions to evaluate (first N; 0 = all)")]
    pub samples: usize,
    #[arg(long, default_value_t = 1, value_name = "N", help = "Features per inference batch")]
    pub batch: usize,
    /// Write predictions here (SQuAD predictions JSON).
    #[arg(long, value_name = "FILE")]
    pub predictions: Option<PathBuf>,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    #[command(flatten)]
    pub data: DataArgs,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The ONNX model.
    pub model: PathBuf,
    /// Also list every Q/DQ pair with its scale and the range it encodes.
    #[arg(long)]
    pub ranges: bool,
    /// Print one JSON document on stdout instead of text (schemas in docs/JSON.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ProvidersArgs {
    #[arg(long, value_name = "FILE", help = "Path of libonnxruntime.so")]
    pub ort_lib: Option<PathBuf>,
}

/// `KEY=VALUE` of `--policy-option`.
fn key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())).ok_or_else(|| format!("`{s}` must be KEY=VALUE"))
}
