//! xtask's command line, declared once with clap (as rust-analyzer's xtask/src/flags.rs): every command, its options
//! and their help. `cargo xtask help` / `cargo xtask <command> --help` print it.

use std::path::PathBuf;

use clap::builder::TypedValueParser as _;
use clap::{ArgAction, Args, Parser, Subcommand};

use crate::workspace::root;

/// Environment variable naming a local mirror directory of the assets (same as `--mirror`).
pub const MIRROR_ENV: &str = "QDQ_ASSETS_MIRROR";

#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "The qdq project's automation: ONNX Runtime set-up, assets, the real-model run, benchmarks and tests.",
    args_override_self = true
)]
pub struct Xtask {
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Install ONNX Runtime (PyPI wheel onnxruntime==1.31.1, or onnxruntime-gpu with --gpu; OpenVINO's plugin with
    /// --openvino) into .ort/ in the workspace, with pip. Idempotent.
    Setup(SetupArgs),
    /// setup, then cargo fmt --check, cargo clippy -D warnings, and every test of the workspace (tidy tests among
    /// them).
    Test(TestArgs),
    /// Fetch SQuAD files, vocab and model into .assets/, checking sizes and SHA-256.
    Download(DownloadArgs),
    /// setup + download, build qdq in release, run `qdq e2e` on the assets (default --samples 1000, --out out/e2e).
    E2e(E2eArgs),
    /// criterion benchmarks of calib, then an e2e run for timing (out/bench/summary.md); `bench <name>` runs one
    /// comparison instead (vs-python, cpu-int8, openvino, embeddings, classify, qnn, serve, big-model).
    Bench(Box<BenchArgs>),
    /// Seeded mutation of ONNX models, range tables and SQuAD files through the library loaders: no panic, no
    /// case over 5 s, every error with a message (runs briefly inside `cargo xtask test`; this runs it long).
    Fuzz(FuzzArgs),
    /// Build what users install into out/dist/: the Python wheel (maturin; `pip install` puts qdq on the PATH and
    /// brings ONNX Runtime) and the release archive (bin/qdq and lib/ with ONNX Runtime).
    Dist(DistArgs),
}

#[derive(Debug, Clone, Default, Args)]
pub struct DistArgs {
    /// Then install each into a fresh place (the wheel by pip into a new venv, the archive unpacked) and run `qdq
    /// providers` and `qdq e2e` on the tiny BERT from there, with no ORT_DYLIB_PATH (`cargo xtask test` does).
    #[arg(long)]
    pub check: bool,
}

#[derive(Debug, Clone, Args)]
pub struct FuzzArgs {
    /// Cases per seed file.
    #[arg(long, default_value_t = 10_000, value_parser = positive_u64, value_name = "N")]
    pub cases: u64,
    /// First case number (the generator's seed): reruns a reported case.
    #[arg(long, default_value_t = 0, value_name = "K")]
    pub first: u64,
}

fn positive_u64(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("expected a whole number of at least 1, got `{s}`")),
    }
}

#[derive(Debug, Clone, Default, Args)]
pub struct SetupArgs {
    /// Install onnxruntime-gpu (CUDA and TensorRT EPs) instead of the CPU build.
    #[arg(long)]
    pub gpu: bool,
    /// Also install OpenVINO's plugin EP (PyPI onnxruntime-ep-openvino 1.8.1, OpenVINO bundled) into .ort/openvino,
    /// where `qdq --ep openvino` finds it.
    #[arg(long)]
    pub openvino: bool,
    /// Also install Qualcomm's QNN plugin EP (PyPI onnxruntime-qnn 2.7.0, the HTP backend emulated on x86-64) into
    /// .ort/qnn, where `qdq --ep qnn` finds it.
    #[arg(long)]
    pub qnn: bool,
    /// Reinstall even when the right version is there.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Clone, Default, Args)]
pub struct TestArgs {
    /// Passed on to `cargo test` (e.g. `--no-fail-fast`, or `-- NAME` to filter).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "CARGO TEST ARGS")]
    pub cargo_test: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct DownloadArgs {
    /// Take the files from this local copy of the assets instead of the internet (default: QDQ_ASSETS_MIRROR, else
    /// a shared/assets folder beside the checkout if there is one).
    #[arg(long, env = MIRROR_ENV, value_name = "DIR")]
    pub mirror: Option<PathBuf>,
    /// Where the assets go (default: .assets/ in the workspace).
    #[arg(long, value_name = "DIR")]
    pub dest: Option<PathBuf>,
    /// Asset set: minilm (the project's reference model; only in the mirror, the default with one) or distilbert
    /// (needs internet).
    #[arg(long = "assets", value_name = "SET", value_parser = ["minilm", "distilbert"])]
    pub set: Option<String>,
}

impl DownloadArgs {
    /// The mirror to use: `--mirror` / QDQ_ASSETS_MIRROR when set and non-empty, else ../shared/assets if it exists.
    pub fn resolved(mut self) -> DownloadArgs {
        self.mirror = self.mirror.filter(|m| !m.as_os_str().is_empty()).or_else(|| {
            // The shared assets beside the checkout (how this project's machines and CI hold them).
            root().parent().map(|p| p.join("shared/assets")).filter(|p| p.is_dir())
        });
        self
    }

    /// The asset set: as given, else minilm with a mirror and distilbert without.
    pub fn set(&self) -> &str {
        self.set.as_deref().unwrap_or(if self.mirror.is_some() { "minilm" } else { "distilbert" })
    }

    /// Where the assets go.
    pub fn dest(&self) -> PathBuf {
        self.dest.clone().unwrap_or_else(|| root().join(".assets"))
    }
}

#[derive(Debug, Clone, Args)]
pub struct E2eArgs {
    #[command(flatten)]
    pub download: DownloadArgs,
    /// Fail unless FP32 F1 matches the reference within 0.1 and INT8 F1 is within --int8-tolerance of FP32, unless
    /// (the default CPU run: no --ep other than cpu, no --policy / --ort-quant / --mode) INT8 is faster (median of
    /// qdq's alternating rounds above 1) and smaller than FP32, and (minilm set) unless squad-metrics scores the
    /// reference predictions exactly as the official script did (1e-9).
    #[arg(long)]
    pub check: bool,
    /// How far INT8 F1 may fall below FP32 under --check, in F1 points.
    #[arg(long, default_value_t = 1.0, requires = "check", value_name = "F1", value_parser = non_negative)]
    pub int8_tolerance: f64,
    /// Flags for `qdq e2e` (after xtask's own), e.g. `--samples 0 --ep tensorrt --int8`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "QDQ E2E FLAGS")]
    pub qdq: Vec<String>,
}

#[derive(Debug, Clone, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    /// The bench to run (none: the criterion benchmarks and the end-to-end timing).
    #[command(subcommand)]
    pub bench: Option<BenchCmd>,
    /// criterion only, no e2e timing run.
    #[arg(long)]
    pub no_e2e: bool,
    #[command(flatten)]
    pub download: DownloadArgs,
}

/// The benches, one subcommand each (`cargo xtask bench <name> --help` lists its options).
#[derive(Debug, Clone, Subcommand)]
pub enum BenchCmd {
    /// qdq's calibration against ONNX Runtime's Python tools on the same model and features (out/bench/vs_python.*).
    VsPython(VsPythonArgs),
    /// FP32, qdq's CPU models and ONNX Runtime's quantize_dynamic: latency, size, F1 (out/bench/cpu_int8.*).
    CpuInt8(CpuInt8Bench),
    /// A model over protobuf's 2 GiB through qdq, each command's peak memory (out/bench/big_model.*).
    BigModel(BigModelBench),
    /// FP32, qdq's INT8 for OpenVINO and NNCF's, timed and scored on OpenVINO (out/bench/openvino.*).
    Openvino(OpenVinoBench),
    /// Sentence-embedding models: qdq against ORT dynamic and NNCF, fidelity, retrieval, speed
    /// (out/bench/embeddings.*).
    Embeddings(EmbeddingsBench),
    /// A sentence-pair classifier: qdq against ORT dynamic and NNCF, accuracy, agreement, speed
    /// (out/bench/classify.*).
    Classify(ClassifyBench),
    /// qdq's model for QNN against ONNX Runtime's QNN recipe, on the CPU EP and the emulated HTP (out/bench/qnn.*).
    Qnn(QnnBench),
    /// Whether qdq's output folders load where their sources load (sentence-transformers, optimum) (out/bench/serve.*).
    Serve(ServeBench),
}

/// `bench cpu-int8`'s options.
#[derive(Debug, Clone, Args)]
pub struct CpuInt8Bench {
    #[command(flatten)]
    pub args: CpuInt8Args,
    #[command(flatten)]
    pub timing: TimingArgs,
    #[command(flatten)]
    pub data: BenchData,
    #[command(flatten)]
    pub download: DownloadArgs,
}

/// `bench big-model`'s options.
#[derive(Debug, Clone, Args)]
pub struct BigModelBench {
    #[command(flatten)]
    pub args: BigModelArgs,
    /// Output directory.
    #[arg(long, default_value_os_t = root().join("out/bench"), value_name = "DIR")]
    pub out: PathBuf,
}

/// `bench openvino`'s options.
#[derive(Debug, Clone, Args)]
pub struct OpenVinoBench {
    #[command(flatten)]
    pub args: OpenVinoBenchArgs,
    #[command(flatten)]
    pub embeddings: EmbeddingModels,
    #[command(flatten)]
    pub timing: TimingArgs,
    #[command(flatten)]
    pub data: BenchData,
    #[command(flatten)]
    pub download: DownloadArgs,
}

/// `bench embeddings`' options.
#[derive(Debug, Clone, Args)]
pub struct EmbeddingsBench {
    #[command(flatten)]
    pub args: EmbeddingsBenchArgs,
    #[command(flatten)]
    pub models: EmbeddingModels,
    #[command(flatten)]
    pub timing: TimingArgs,
    #[command(flatten)]
    pub data: BenchData,
    #[command(flatten)]
    pub download: DownloadArgs,
}

/// `bench classify`'s options.
#[derive(Debug, Clone, Args)]
pub struct ClassifyBench {
    #[command(flatten)]
    pub args: ClassifyBenchArgs,
    #[command(flatten)]
    pub timing: TimingArgs,
    /// Output directory.
    #[arg(long, default_value_os_t = root().join("out/bench"), value_name = "DIR")]
    pub out: PathBuf,
    /// Do not wait for other `qdq` runs or busy processes to finish before timing.
    #[arg(long = "no-wait", action = ArgAction::SetFalse)]
    pub wait: bool,
}

/// `bench qnn`'s options.
#[derive(Debug, Clone, Args)]
pub struct QnnBench {
    #[command(flatten)]
    pub args: QnnBenchArgs,
    #[command(flatten)]
    pub data: BenchData,
    #[command(flatten)]
    pub download: DownloadArgs,
}

/// `bench serve`'s options.
#[derive(Debug, Clone, Args)]
pub struct ServeBench {
    #[command(flatten)]
    pub data: BenchData,
    #[command(flatten)]
    pub download: DownloadArgs,
}

/// Options of `bench classify`: a fine-tuned sentence-pair classifier (a folder holding `model/` with its
/// config.json and tokenizer, and GLUE-layout `dev.tsv` / `train.tsv`, as xtask/python/make_qnli_classifier.py writes
/// it; not in CI): `qdq e2e` on it with no flag beyond the files, ONNX Runtime's dynamic INT8 and NNCF's INT8 of the
/// same calibration pairs, each scored by `qdq eval --baseline` on every dev pair (accuracy, the paired difference with
/// its interval, class = FP32's, KL) and timed at 1 and 32 pairs on the CPU EP. Writes out/bench/classify.{json,md}.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct ClassifyBenchArgs {
    /// The classifier's folder (model/, dev.tsv, train.tsv).
    #[arg(long, value_name = "DIR")]
    pub classifier: PathBuf,
    /// Calibration pairs for every tool (default: each its own, qdq 100 and NNCF 300).
    #[arg(long, value_parser = positive, value_name = "N")]
    pub classify_cal_num: Option<usize>,
    /// Dev pairs scored (0: all).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub classify_samples: usize,
    /// Tokens per pair the models are timed at.
    #[arg(long, default_value_t = 128, value_parser = positive, value_name = "N")]
    pub classify_seq_len: usize,
}

/// Options of `bench qnn`: qdq's model for `--ep qnn` against ONNX Runtime's QNN recipe (`get_qnn_qdq_config`) of
/// the same calibration questions, each scored with `qdq eval` on the CPU EP and on QNN's emulated HTP beside FP32.
/// No speed (the HTP is emulated). Takes --model, --vocab, --dataset, --calibration-data, --cal-num, --doc-stride and
/// --out above. Writes out/bench/qnn.{json,md}; a rerun scores again only the legs whose model changed.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct QnnBenchArgs {
    /// Dev questions each model is scored on (the emulated HTP takes 20-30 s per feature: about an hour per 200).
    #[arg(long, default_value_t = 200, value_parser = positive, value_name = "N")]
    pub qnn_samples: usize,
    /// The static length of every feature (QNN takes static shapes only), for calibration and scoring.
    #[arg(long, default_value_t = 256, value_parser = positive, value_name = "N")]
    pub qnn_seq_len: usize,
}

/// Options of `bench embeddings`: qdq's INT8 sentence-embedding model against ONNX Runtime's dynamic INT8 (as
/// sentence-transformers exports it) and NNCF's INT8 of the same calibration texts, scored by `qdq eval --baseline`
/// on SQuAD dev as retrieval and timed at 1 and 32 texts, on the CPU EP and on OpenVINO. Writes
/// out/bench/embeddings.{json,md}.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct EmbeddingsBenchArgs {
    /// The CPU EP only (no OpenVINO plugin).
    #[arg(long)]
    pub no_openvino: bool,
}

/// Which embedding models `bench embeddings` and `bench openvino` take, and on how much of the data.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct EmbeddingModels {
    /// One model's folder (default: every embedding model of the minilm assets).
    #[arg(long, value_name = "DIR")]
    pub embedding_model: Option<PathBuf>,
    /// A base-size embedding model's folder benched beside the others (all-mpnet-base-v2, as
    /// ../shared/tools/make-all-mpnet-base-v2.sh builds it; not in CI): timed at one text of its length and 8x128.
    #[arg(long, value_name = "DIR")]
    pub base_model: Option<PathBuf>,
    /// Dev questions used as queries (0: all 10,570; every paragraph is a document).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub embedding_samples: usize,
    /// Calibration questions (with their paragraphs), for qdq and NNCF alike (qdq's default for embedding models).
    #[arg(long, default_value_t = 2000, value_parser = positive, value_name = "N")]
    pub embedding_cal_num: usize,
}

/// Options of `bench openvino`: FP32, qdq's INT8 for `--ep openvino` and NNCF's INT8 of the same calibration data,
/// for the SQuAD model and every embedding model of the assets, timed on OpenVINO at f32 and at its own default
/// precision (bf16 on CPUs with AMX or AVX512-BF16) and scored on OpenVINO (the CPU EP where its plugin offers no
/// device). Writes out/bench/openvino.{json,md}.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct OpenVinoBenchArgs {
    /// Batch x sequence shapes the SQuAD models are timed at (embedding models: 1 and 32 texts at their length).
    #[arg(long, default_value = "1x128,1x256,1x384,8x128,32x128", value_name = "BxS,...")]
    pub ov_shapes: String,
    /// Dev questions the SQuAD models are scored on (0: all 10,570).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub ov_samples: usize,
    /// The SQuAD model only (no embedding model).
    #[arg(long)]
    pub ov_squad_only: bool,
    /// `qdq tune --ep openvino --min-same P` of the SQuAD model at each of these shares, benched beside the default
    /// (none: no tuned model).
    #[arg(long, value_delimiter = ',', default_value = "97,95", value_name = "PCT,...")]
    pub ov_tune: Vec<f64>,
    /// Dev questions `qdq tune` scores its candidates on (the first N).
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub ov_tune_samples: usize,
}

/// Options of `bench big-model`: a model over protobuf's 2 GiB (onnx-ir's tiny BERT with a word-embedding table
/// grown in a sparse external data file) through `qdq inspect`, `quantize`, `eval` and `calibrate`, each one's peak
/// memory against the model's size. Writes out/bench/big_model.{json,md} (the model files are removed after).
#[derive(Debug, Clone, PartialEq, Args)]
pub struct BigModelArgs {
    /// Size of the grown model, GiB.
    #[arg(long, default_value_t = 2.2, value_name = "GIB", value_parser = size_gib)]
    pub size_gib: f64,
}

/// How the timing benches (`cpu-int8`, `embeddings`, `openvino`, `classify`) time their models.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct TimingArgs {
    /// Rounds; in each, every model in turn runs once untimed, then --runs timed runs (a block: never timed beside another
    /// session's spinning threads). The verdicts compare medians over rounds: the host's speed moves between blocks.
    #[arg(long, default_value_t = 9, value_parser = positive, value_name = "N")]
    pub rounds: usize,
    /// Timed runs per model and round (their median is the round's latency).
    #[arg(long, default_value_t = 8, value_parser = positive, value_name = "N")]
    pub runs: usize,
    /// Intra-op threads of every session.
    #[arg(long, default_value_t = 2, value_parser = positive, value_name = "N")]
    pub threads: usize,
}

/// Options of `bench cpu-int8`: FP32, qdq's CPU models (static default, --mode dynamic) and ONNX Runtime's
/// quantize_dynamic, timed on the same fixed batches and scored with `qdq eval`. Also takes --model, --vocab,
/// --dataset, --calibration-data, --cal-num, --out and --no-wait above. Writes out/bench/cpu_int8.{json,md}.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct CpuInt8Args {
    /// Batch x sequence shapes timed (fixed random tokens).
    #[arg(long, default_value = "1x256,8x128,1x384", value_name = "BxS,...")]
    pub shapes: String,
    /// Dev questions each model is scored on.
    #[arg(long, default_value_t = 1000, value_parser = positive, value_name = "N")]
    pub f1_samples: usize,
    /// Rounds of `qdq eval`'s own latency (dynamic padding, batch 1): in each, every model is evaluated on
    /// --eval-samples questions in turn, each round starting one model later; its speed-up is the median of the rounds'
    /// FP32 / model ratios. Short passes close together pair FP32 and each model under the same host speed (whole
    /// 1,000-question passes of 5-13 s, five rounds, moved a model's ratio between 1.5x and 2.3x).
    #[arg(long, default_value_t = 11, value_parser = positive, value_name = "N")]
    pub eval_rounds: usize,
    /// Dev questions of each latency round of `qdq eval` (F1 is scored once per model on --f1-samples).
    #[arg(long, default_value_t = 200, value_parser = positive, value_name = "N")]
    pub eval_samples: usize,
    /// Compare on the model as ONNX Runtime's transformers optimizer rewrites it (EmbedLayerNormalization, fused
    /// Attention, SkipLayerNormalization, BiasGelu: Olive's CPU recipe), made by the bench venv's onnxruntime; every
    /// model, FP32 included, is of that form. Writes out/bench/cpu_int8_ort_optimized.{json,md}.
    #[arg(long)]
    pub ort_optimized: bool,
}

/// The calibration methods `bench vs-python` compares.
pub const METHODS: [&str; 3] = ["minmax", "percentile", "entropy"];

/// The model, data, output and waiting every bench that runs qdq on SQuAD data shares.
#[derive(Debug, Clone, PartialEq, Args)]
#[command(next_help_heading = "Model and data")]
pub struct BenchData {
    /// The model (default: the minilm assets).
    #[arg(long, value_name = "FILE")]
    pub model: Option<PathBuf>,
    /// Its vocabulary.
    #[arg(long, value_name = "FILE")]
    pub vocab: Option<PathBuf>,
    /// SQuAD dev file for the F1 comparison.
    #[arg(long, value_name = "FILE")]
    pub dataset: Option<PathBuf>,
    /// SQuAD file for calibration.
    #[arg(long, visible_alias = "calibration_data", value_name = "FILE")]
    pub calibration_data: Option<PathBuf>,
    /// Output directory.
    #[arg(long, default_value_os_t = root().join("out/bench"), value_name = "DIR")]
    pub out: PathBuf,
    /// Calibration questions.
    #[arg(long, visible_alias = "cal_num", default_value_t = 100, value_parser = positive, value_name = "N")]
    pub cal_num: usize,
    /// Sequence length; features are padded to it.
    #[arg(long, visible_alias = "seq_len", default_value_t = 384, value_parser = positive, value_name = "N")]
    pub seq_len: usize,
    /// Step between window starts over a long context.
    #[arg(long, visible_alias = "doc_stride", default_value_t = 128, value_parser = positive, value_name = "N")]
    pub doc_stride: usize,
    /// Do not wait for other `qdq` runs or busy processes to finish before each timed step.
    #[arg(long = "no-wait", action = ArgAction::SetFalse)]
    pub wait: bool,
}

/// Options of `bench vs-python`: qdq's calibration against ONNX Runtime's Python tools (onnxruntime==1.31.1, onnx,
/// numpy in a .venv-bench/ venv) on the same model and byte-identical features. Writes out/bench/vs_python.{json,md}.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct VsPythonArgs {
    #[command(flatten)]
    pub data: BenchData,
    #[command(flatten)]
    pub download: DownloadArgs,
    /// Calibration questions of the small peak-memory run.
    #[arg(long, default_value_t = 10, value_parser = positive, value_name = "N")]
    pub memory_cal_num: usize,
    /// Dev questions both INT8 models are scored on.
    #[arg(long, default_value_t = 300, value_parser = positive, value_name = "K")]
    pub samples: usize,
    /// Methods compared (minmax, percentile 99.999 / 2048 bins, entropy 8001 / 255 bins).
    #[arg(long, value_delimiter = ',', default_values_t = METHODS.map(String::from), ignore_case = true,
          value_parser = clap::builder::PossibleValuesParser::new(METHODS).map(|m| m.to_lowercase()), value_name = "LIST")]
    pub methods: Vec<String>,
    /// Questions per collect_data call on the ONNX Runtime side (as its TensorRT BERT example).
    #[arg(long, default_value_t = 10, value_parser = positive, value_name = "N")]
    pub stride: usize,
    /// Repeats of the histogram / entropy-search micro-benchmarks.
    #[arg(long, default_value_t = 5, value_parser = positive, value_name = "R")]
    pub micro_repeat: usize,
    /// Rounds of the pass-against-inference comparison: per round and method, FP32 inference alone on the
    /// calibration features (`qdq eval --pad-to-max`) then `qdq calibrate`, in turn.
    #[arg(long, default_value_t = 3, value_parser = positive, value_name = "R")]
    pub pass_rounds: usize,
    /// Skip ONNX Runtime's entropy calibration (its threshold search alone takes ~5 minutes on 2 cores); report an
    /// estimate of its time instead.
    #[arg(long)]
    pub quick: bool,
    /// Only rewrite vs_python.md (and the targets and notes of vs_python.json) from an existing vs_python.json.
    #[arg(long)]
    pub render: bool,
}

fn positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("expected a whole number of at least 1, got `{s}`")),
    }
}

fn non_negative(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(t) if t.is_finite() && t >= 0.0 => Ok(t),
        _ => Err(format!("expected a non-negative number of F1 points, got `{s}`")),
    }
}

/// A model size in GiB: above protobuf's 2 GiB (the point of the check) and below 64 GiB.
fn size_gib(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(g) if g > 2.0 && g <= 64.0 => Ok(g),
        _ => Err(format!("expected a size in GiB over 2 (protobuf's limit) and at most 64, got `{s}`")),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn parse(args: &[&str]) -> Result<Cmd, clap::Error> {
        Xtask::try_parse_from(["cargo xtask"].iter().chain(args)).map(|x| x.command)
    }

    #[test]
    fn e2e_takes_its_own_flags_first_and_passes_the_rest_to_qdq() {
        let Ok(Cmd::E2e(a)) = parse(&["e2e", "--mirror", "/m", "--check", "--int8-tolerance=1.5", "--samples", "0"])
        else {
            panic!("not e2e")
        };
        assert_eq!((a.download.mirror.as_deref(), a.check, a.int8_tolerance), (Some(Path::new("/m")), true, 1.5));
        assert_eq!(a.qdq, ["--samples", "0"]);
        let Ok(Cmd::E2e(a)) = parse(&["e2e", "--ep", "tensorrt", "--int8"]) else { panic!("not e2e") };
        assert_eq!((a.check, a.int8_tolerance, a.qdq.len()), (false, 1.0, 3));
        let e = parse(&["e2e", "--int8-tolerance", "2"]).unwrap_err().to_string();
        assert!(e.contains("--check"), "{e}");
        assert!(parse(&["e2e", "--check", "--int8-tolerance", "-1"]).unwrap_err().to_string().contains("non-negative"));
    }

    #[test]
    fn fuzz_takes_cases_and_a_first_case() {
        let Ok(Cmd::Fuzz(f)) = parse(&["fuzz", "--cases", "50", "--first", "7"]) else { panic!("not fuzz") };
        assert_eq!((f.cases, f.first), (50, 7));
        assert!(parse(&["fuzz", "--cases", "0"]).is_err());
    }

    #[test]
    fn cpu_int8_options_parse_in_their_subcommand() {
        let args = ["bench", "cpu-int8", "--rounds", "3", "--f1-samples", "300", "--eval-samples", "50", "--no-wait"];
        let Ok(Cmd::Bench(b)) = parse(&args) else { panic!("bench cpu-int8 did not parse") };
        let Some(BenchCmd::CpuInt8(c)) = b.bench else { panic!("not cpu-int8: {:?}", b.bench) };
        assert!(!c.data.wait);
        assert_eq!(
            (c.timing.rounds, c.timing.runs, c.args.f1_samples, c.args.eval_samples, c.args.eval_rounds),
            (3, 8, 300, 50, 11)
        );
        assert_eq!(c.args.shapes, "1x256,8x128,1x384");
        assert!(parse(&["bench", "cpu-int8", "--rounds", "0"]).is_err());
        // Another bench's option is not this one's.
        let e = parse(&["bench", "cpu-int8", "--methods", "minmax"]).unwrap_err().to_string();
        assert!(e.contains("--methods"), "{e}");
    }

    #[test]
    fn big_model_options_parse_and_bound_the_size() {
        let Ok(Cmd::Bench(b)) = parse(&["bench", "big-model", "--size-gib", "2.5"]) else {
            panic!("bench big-model did not parse")
        };
        let Some(BenchCmd::BigModel(m)) = b.bench else { panic!("not big-model") };
        assert_eq!(m.args.size_gib, 2.5);
        for bad in ["1.5", "-3", "NaN", "100", "x"] {
            assert!(parse(&["bench", "big-model", "--size-gib", bad]).is_err(), "{bad}");
        }
        assert!(parse(&["bench", "big-model", "cpu-int8"]).is_err());
    }

    #[test]
    fn classify_takes_its_folder_and_each_tool_its_own_calibration_by_default() {
        let Ok(Cmd::Bench(b)) = parse(&["bench", "classify", "--classifier", "/q", "--rounds", "2"]) else {
            panic!("bench classify did not parse")
        };
        let Some(BenchCmd::Classify(c)) = b.bench else { panic!("not classify") };
        assert_eq!((c.args.classifier.as_path(), c.args.classify_cal_num, c.timing.rounds), (Path::new("/q"), None, 2));
        assert!(parse(&["bench", "classify"]).unwrap_err().to_string().contains("--classifier"));
        assert!(parse(&["bench", "classify", "--classifier", "/q", "--classify-cal-num", "0"]).is_err());
    }

    #[test]
    fn vs_python_options_parse_with_both_spellings_and_reject_unknowns() {
        let args = ["bench", "vs-python", "--cal-num=20", "--samples", "50", "--methods", "Entropy,minmax"];
        let Ok(Cmd::Bench(b)) =
            parse(&[&args[..], &["--no-wait", "--model", "m.onnx", "--quick", "--cal_num", "21"]].concat())
        else {
            panic!("not bench")
        };
        let Some(BenchCmd::VsPython(o)) = b.bench else { panic!("not vs-python") };
        assert!(o.quick && !o.render && !o.data.wait);
        assert_eq!((o.data.cal_num, o.samples, o.memory_cal_num), (21, 50, 10));
        assert_eq!(o.methods, ["entropy", "minmax"]);
        assert_eq!(o.data.model.as_deref(), Some(Path::new("m.onnx")));
        let Ok(Cmd::Bench(b)) = parse(&["bench", "vs-python"]) else { panic!("not bench") };
        let Some(BenchCmd::VsPython(o)) = b.bench else { panic!("not vs-python") };
        assert!(o.data.wait && o.methods == METHODS && o.data.cal_num == 100);
        let Ok(Cmd::Bench(b)) = parse(&["bench", "--no-e2e"]) else { panic!("not bench") };
        assert!(b.bench.is_none() && b.no_e2e);
        for (bad, says) in [
            (&["bench", "vs-python", "--methods", "kl"][..], "kl"),
            (&["bench", "--frobnicate"], "--frobnicate"),
            (&["bench", "vs-python", "--samples"], "--samples"),
            (&["bench", "vs-python", "--cal-num", "x"], "whole number"),
            (&["bench", "vs-python", "--cal-num", "0"], "at least 1"),
            (&["bench", "--vs-python"], "--vs-python"),
            (&["bench", "frobnicate"], "frobnicate"),
            (&["setup", "--cpu"], "--cpu"),
            (&["download", "--assets", "bert"], "minilm"),
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }
}
