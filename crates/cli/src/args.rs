//! Command-line arguments. Long options are kebab-case; the seed scripts' snake_case spellings (`--seq_len`,
//! `--cal_num`, ...) are accepted as aliases with the same meaning and defaults.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use pipeline::{CalibSettings, DataSettings, PolicySettings, RuntimeSettings};

const ABOUT: &str = "Post-training INT8 quantization of BERT ONNX models in QDQ form, proved on SQuAD.";

const LONG_ABOUT: &str = "\
Post-training INT8 quantization of BERT ONNX models in QDQ form, proved on SQuAD.

qdq calibrates a model on SQuAD features (streaming histograms: memory stays flat in the number of samples),
inserts QuantizeLinear/DequantizeLinear pairs placed by a policy, and evaluates the FP32 and INT8 models on an
ONNX Runtime execution provider, reporting EM/F1 and latency side by side.

ONNX Runtime is loaded from ORT_DYLIB_PATH, --ort-lib, or the copy `cargo xtask setup` installs.";

#[derive(Debug, Parser)]
#[command(
    name = "qdq",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    args_override_self = true,
    disable_help_subcommand = true
)]
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
    Eval(Box<JobArgs<pipeline::EvalJob>>),
    /// Where a QDQ model loses accuracy: each quantized tensor and the logits against the float model, on held-out
    /// questions.
    #[command(long_about = DEBUG_ABOUT)]
    Debug(Box<JobArgs<pipeline::DebugJob>>),
    /// The most-integer QDQ model within an F1 budget: calibrate, quantize, keep the most sensitive nodes in float
    /// until the budget is met; writes the model, a recipe `qdq quantize --config` replays, and the trade-off curve.
    Tune(Box<JobArgs<pipeline::TuneJob>>),
    /// Summarise a model: operators, Q/DQ coverage, and the ranges Q/DQ pairs encode.
    Inspect(InspectArgs),
    /// List the execution providers of the loaded ONNX Runtime.
    Providers(ProvidersArgs),
    /// Print the help of qdq or of one of its commands (as `qdq <COMMAND> --help`).
    Help(HelpArgs),
}

#[derive(Debug, Args)]
pub struct HelpArgs {
    /// The command to explain (default: qdq itself).
    pub command: Option<String>,
}

const E2E_ABOUT: &str = "\
Calibrate, quantize, then evaluate FP32 and INT8 side by side.

Steps: (1) calibration features from --calibration-data (default: --dataset) run through the model, every
tensor the policy quantizes read as it is computed (on the CPU EP; exposed as an extra output on others);
statistics for every --calibrate-method are collected in one pass; (2) Q/DQ pairs are inserted by --policy with ranges from the chosen method; (3) both models are evaluated
on --dataset.

Output directory (--out): model_qdq.onnx, calibration.json, calibration.flatbuffers (ORT TensorRT/MIGraphX
table), calibration.cache (TensorRT native cache), calib_state.json (mergeable statistics),
predictions_fp32.json, predictions_int8.json, results.json and report.md; with --compare-methods also
model_qdq_<method>.onnx and predictions_int8_<method>.json for each method, each a row of the table.

A model without start / end logits (a classifier): --dataset and --calibration-data take .npz (arrays named after
the model inputs, optional `label`), .npy (token ids), text lines (a tab separates a pair), GLUE-style TSV or JSONL
({\"text\", \"text_pair\", \"label\"}); INT8 is compared with FP32 (top-1 agreement, KL, largest logit difference)
and both are scored against the labels if any.

Without --policy the preset is the one made for --ep (cpu -> cpu, tensorrt -> tensorrt, migraphx -> migraphx);
--mode dynamic skips calibration (CPU: weights int8, inputs quantized at run time).

Settings may also come from a TOML file (--config): keys are the long option names (`seq-len = 128`,
`calibrate-method = \"entropy\"`); options on the command line win.";

#[derive(Debug, Args)]
pub struct E2eArgs {
    /// Print one JSON document on stdout instead of text (schemas in docs/JSON.md); logs stay on stderr.
    #[arg(long)]
    pub json: bool,
    /// The FP32 ONNX model.
    #[arg(long, default_value = "model.onnx", value_name = "FILE")]
    pub model: PathBuf,
    /// SQuAD file to evaluate on (default: squad/dev-v<version>.json); a classifier's inputs (see above).
    #[arg(long, value_name = "FILE")]
    pub dataset: Option<PathBuf>,
    /// Questions to evaluate (the first N of the file; 0 = all).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub samples: usize,
    /// Features per inference batch.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = pipeline::value_parsers::positive)]
    pub batch: usize,
    /// Stop after quantizing: no evaluation.
    #[arg(long, visible_alias = "no_eval")]
    pub no_eval: bool,
    /// Also run FP32 and INT8 under ONNX Runtime's profiler on the first evaluation features (at most 16) and show
    /// where each one's time goes: kernel time per operator type as ONNX Runtime ran them (integer MatMuls, fused
    /// attention, what stayed in float). A few seconds more; printed, in report.md and in results.json (`op_profile`).
    #[arg(long, conflicts_with = "no_eval")]
    pub profile_ops: bool,
    /// Output directory.
    #[arg(long, default_value = "out", value_name = "DIR")]
    pub out: PathBuf,
    /// TOML file with settings (keys = long option names); command-line options win.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub runtime: RuntimeSettings,
    #[command(flatten)]
    pub data: DataSettings,
    #[command(flatten)]
    pub calib: CalibSettings,
    #[command(flatten)]
    pub policy: PolicySettings,
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
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = pipeline::value_parsers::positive)]
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
    pub policy: PolicySettings,
    /// The execution provider the quantized model is for: picks the default --policy (cpu -> cpu, tensorrt ->
    /// tensorrt, migraphx -> migraphx, any other -> tensorrt). Calibration itself runs on --cal-ep.
    #[arg(long, default_value = "cpu", value_name = "EP")]
    pub ep: pipeline::Ep,
    #[command(flatten)]
    pub data: DataSettings,
    #[command(flatten)]
    pub calib: CalibSettings,
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
    /// Ranges: calibration.json from `qdq calibrate`, any of the three files ONNX Runtime's write_calibration_table
    /// writes (calibration.json, .flatbuffers, .cache), or a TensorRT calibration cache; told apart by content.
    /// Required unless --mode dynamic.
    #[arg(long, value_name = "FILE")]
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
    pub policy: PolicySettings,
    /// The execution provider the quantized model is for: picks the default --policy (cpu -> cpu, tensorrt ->
    /// tensorrt, migraphx -> migraphx, any other -> tensorrt). Use the same as for `qdq calibrate`.
    #[arg(long, default_value = "cpu", value_name = "EP")]
    pub ep: pipeline::Ep,
}

const DEBUG_ABOUT: &str = "\
Where a QDQ model loses accuracy, on held-out questions (the last --questions of --dataset): every activation pair's
dequantized tensor against its float value in the QDQ model's float reference (the model without its activation
pairs, so shifted or smoothed tensors meet what they stand for): SQNR dB, relative error, clipped share, the pair's
own rounding; and the logits of the QDQ model and of that reference against FP32 (KL, argmax agreement).";

/// A job that declares its own flags (pipeline, feature `cli`), and `--json`.
#[derive(Debug, Args)]
pub struct JobArgs<T: Args> {
    /// Print one JSON document on stdout instead of text (schemas in docs/JSON.md); logs stay on stderr.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub job: T,
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
