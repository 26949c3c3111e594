//! The shapes of the documents this bench reads and writes, as types: the report (`vs_python.json`, read back by
//! `--render`) and the JSON each measured tool prints (calib's microbench, `vs_ort.py`; qdq's own in
//! `crate::qdq_json`). Every field
//! of the report is optional where a step can fail or be skipped, so a partial report still renders.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------------------------------------------
// The report

/// `vs_python.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Report {
    pub command: String,
    pub setup: Setup,
    /// One row per calibration method.
    pub methods: Vec<MethodRow>,
    /// Ours, every method from one calibration pass.
    pub one_pass: Option<OnePass>,
    /// `qdq calibrate` with its own defaults (dynamic padding, the preset for `--ep cpu`, mse) on the same questions,
    /// beside the identical-features runs that pad every feature to the seeds' 384.
    pub own_workflow: Option<OnePass>,
    /// Peak RSS at two calibration sizes, per method.
    pub memory: Vec<MemoryRow>,
    /// FP32 on the evaluation questions.
    pub fp32: Option<Score>,
    /// FP32 inference alone on the calibration features: the floor of a calibration pass.
    pub inference_on_calibration_features: Inference,
    /// Per method, our calibration pass and FP32 inference alone on the same features, run in turn.
    pub pass_rounds: Vec<PassRounds>,
    pub micro: Micro,
    /// Every command run, as debug-printed.
    pub commands: Vec<String>,
    /// What limits each missed target (filled when the report is written).
    pub analysis: Vec<String>,
    /// The targets and their verdicts (filled when the report is written).
    pub targets: Vec<TargetRecord>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Setup {
    pub model: PathBuf,
    pub vocab: PathBuf,
    pub dataset: PathBuf,
    pub calibration_data: PathBuf,
    pub cal_num: usize,
    pub memory_cal_num: usize,
    pub samples: usize,
    pub seq_len: usize,
    pub doc_stride: usize,
    /// Questions per ORT collect_data call.
    pub stride: usize,
    pub micro_repeat: usize,
    /// Features of the first `cal_num` questions.
    pub features: Option<usize>,
    pub features_exported: usize,
    /// Tensors our calibration collected.
    pub tensors: usize,
    pub cpus: usize,
    /// Python-side versions: python, onnxruntime, onnx, numpy.
    pub versions: BTreeMap<String, String>,
    pub git: Option<String>,
    pub waited_for_quiet_s: f64,
    pub quiet_check: bool,
}

/// One measured child process (see `measure::Run`); every field optional so that a skipped run is a valid row.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct RunRecord {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_rss_mb: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load1_before: Option<f64>,
    /// CPU seconds other processes used meanwhile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_cpu_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<PathBuf>,
}

/// Our `qdq calibrate` run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct OursRun {
    #[serde(flatten)]
    pub run: RunRecord,
    /// Seconds of the calibration pass itself (`qdq calibrate --json`'s `seconds`).
    pub pipeline_s: Option<f64>,
    /// The pass alone (no session building) and its split between ONNX Runtime and the statistics.
    pub pass: Option<crate::qdq_json::PassTimes>,
    /// Finite values observed (sum of calib_state.json's counts).
    pub values_observed: Option<u64>,
}

/// ORT's calibration run (vs_ort.py calibrate), or why it did not run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct OrtRun {
    #[serde(flatten)]
    pub run: RunRecord,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phases: Option<Phases>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub features: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// For a skipped run: the wall time estimated from the micro-benchmark, and how.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimated_wall_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate: Option<String>,
}

/// Seconds inside vs_ort.py, per phase.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Phases {
    pub create_calibrator: Option<f64>,
    /// session.run alone, inside collect_data.
    pub inference: Option<f64>,
    pub collect_data: Option<f64>,
    pub compute_data: Option<f64>,
    /// load_features, total_in_script and any phase added later.
    #[serde(flatten)]
    pub other: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct MethodRow {
    pub method: String,
    pub ours_flags: String,
    pub ort_flags: String,
    pub ours: OursRun,
    pub ort: OrtRun,
    /// How the two range tables agree (None when ORT produced none).
    pub ranges: Option<RangeAgreement>,
    pub f1: ToolScores,
}

/// EM/F1 of a `qdq eval` run, or why there is none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Score {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub em: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub f1: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ToolScores {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ours: Option<Score>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ort: Option<Score>,
}

/// Agreement of two range tables on amax, relative to ORT's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct RangeAgreement {
    /// Tensors both sides have.
    pub tensors: usize,
    pub max_rel_diff: Option<f64>,
    pub median_rel_diff: Option<f64>,
    pub within_1pct: usize,
    pub worst: Option<WorstTensor>,
    pub only_ours: Vec<String>,
    pub only_ort: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct WorstTensor {
    pub tensor: String,
    pub rel_diff: f64,
    pub ours_amax: f64,
    pub ort_amax: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct OnePass {
    #[serde(flatten)]
    pub run: RunRecord,
    pub flags: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct MemoryRow {
    pub method: String,
    /// At `--memory-cal-num` questions.
    pub ours_small: RunRecord,
    /// At `--cal-num` questions (the method's calibration run).
    pub ours_large: OursRun,
    pub ort_small: OrtRun,
    pub ort_large: OrtRun,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Inference {
    pub ms_per_feature: Option<f64>,
    pub features: Option<usize>,
}

/// One method's calibration passes beside FP32 inference alone on the same features, alternating (inference, pass,
/// inference, pass, ...), so that both see the same hours of a noisy host.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PassRounds {
    pub method: String,
    /// Augmented-model sessions our pass ran side by side.
    pub sessions: Option<usize>,
    /// Per round: our pass (first batch to ranges), its time in ONNX Runtime and in statistics (per session), and
    /// inference alone right after it with as many sessions side by side (the wall time of the pass) and with one.
    pub pass_s: Vec<f64>,
    pub in_ort_s: Vec<f64>,
    pub statistics_s: Vec<f64>,
    pub inference_s: Vec<f64>,
    pub one_session_inference_s: Vec<f64>,
}

impl PassRounds {
    /// Pass / inference alone with the same sessions, over the rounds: median, min, max.
    pub(crate) fn ratio(&self) -> crate::bench::rounds::Ratio {
        crate::bench::rounds::Ratio::of(self.pass_s.iter().zip(&self.inference_s).map(|(p, i)| p / i).collect())
    }

    /// Pass / inference alone in one session (`qdq eval`'s default), over the rounds.
    pub(crate) fn ratio_to_one_session(&self) -> crate::bench::rounds::Ratio {
        crate::bench::rounds::Ratio::of(
            self.pass_s.iter().zip(&self.one_session_inference_s).map(|(p, i)| p / i).collect(),
        )
    }
}

impl Inference {
    /// Seconds of FP32 inference alone on all the calibration features.
    pub(crate) fn seconds(&self) -> Option<f64> {
        Some(self.ms_per_feature? * self.features? as f64 / 1e3)
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Micro {
    /// Rayon threads of our default run.
    pub threads: Option<usize>,
    pub versions: BTreeMap<String, String>,
    pub collection: Vec<CollectionRow>,
    pub entropy: Vec<EntropyRow>,
}

/// Histogram collection of one array at one bin count (seconds, medians).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct CollectionRow {
    pub array: String,
    pub values: u64,
    pub bins: u64,
    pub ours_observe_s: Option<f64>,
    pub ours_observe_1t_s: Option<f64>,
    pub ours_histogram_only_s: Option<f64>,
    pub ours_histogram_only_1t_s: Option<f64>,
    pub ours_minmax_only_s: Option<f64>,
    pub ours_minmax_only_1t_s: Option<f64>,
    pub np_histogram_s: Option<f64>,
    pub ort_collect_value_s: Option<f64>,
}

/// The entropy threshold search on one histogram.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct EntropyRow {
    pub name: String,
    pub bins: u64,
    pub ours_s: Option<f64>,
    pub ours_candidates: Option<f64>,
    pub ours_threshold: Option<f64>,
    pub ort_s: Option<f64>,
    pub ort_candidates: Option<f64>,
    /// ORT's `[min, max]`.
    pub ort_threshold: Option<[f64; 2]>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct TargetRecord {
    pub target: String,
    pub goal: String,
    pub measured: Option<String>,
    pub pass: Option<bool>,
}

// ---------------------------------------------------------------------------------------------------------------
// What the measured tools print

/// What `vs_ort.py calibrate` writes.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct OrtCalibration {
    /// `{tensor: [min, max]}`.
    pub ranges: Option<BTreeMap<String, [f64; 2]>>,
    pub phases: Option<Phases>,
    pub features: Option<usize>,
    pub versions: Option<BTreeMap<String, String>>,
    pub error: Option<String>,
}

/// What calib's `microbench` example prints.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct OursMicro {
    pub threads: Option<usize>,
    pub collection: Vec<OursCollection>,
    pub entropy: Vec<OursEntropy>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct OursCollection {
    pub array: String,
    pub values: u64,
    pub bins: u64,
    pub observe_s: Option<f64>,
    pub histogram_only_s: Option<f64>,
    pub minmax_only_s: Option<f64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct OursEntropy {
    pub name: String,
    pub bins: u64,
    pub seconds: Option<f64>,
    pub candidates: Option<f64>,
    pub threshold: Option<f64>,
}

/// What `vs_ort.py micro` writes.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct PythonMicro {
    pub versions: BTreeMap<String, String>,
    pub collection: Vec<PythonCollection>,
    pub entropy: Vec<PythonEntropy>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct PythonCollection {
    pub array: String,
    pub bins: u64,
    pub np_histogram_s: Option<f64>,
    pub ort_collect_value_s: Option<f64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct PythonEntropy {
    pub name: String,
    pub seconds: Option<f64>,
    pub candidates: Option<f64>,
    pub threshold: Option<[f64; 2]>,
}

/// The part of our calibration.json this bench reads.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct OursTable {
    pub ranges: BTreeMap<String, MinMax>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub(crate) struct MinMax {
    pub min: f64,
    pub max: f64,
}

/// The part of our calib_state.json this bench reads: values observed per tensor.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct StateCounts {
    pub tensors: BTreeMap<String, TensorCount>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(default)]
pub(crate) struct TensorCount {
    pub count: u64,
}

impl crate::bench::measure::Run {
    /// The run as the report records it.
    pub(super) fn record(&self) -> RunRecord {
        RunRecord {
            wall_s: Some(self.wall_s),
            peak_rss_mb: Some(self.peak_rss_mb),
            exit_code: self.code,
            load1_before: Some(self.load1).filter(|l| l.is_finite()),
            other_cpu_s: Some(self.other_cpu_s),
            log: Some(self.log.clone()),
        }
    }
}

/// Timed runs during which other processes used more than a tenth of the wall time in CPU: `log: X CPU-s during
/// Y s`, for every run the report records.
pub(crate) fn disturbed(r: &Report) -> Vec<String> {
    let mut runs: Vec<&RunRecord> = Vec::new();
    for m in &r.methods {
        runs.extend([&m.ours.run, &m.ort.run]);
    }
    for m in &r.memory {
        runs.extend([&m.ours_small, &m.ours_large.run, &m.ort_small.run, &m.ort_large.run]);
    }
    runs.extend(r.one_pass.as_ref().map(|o| &o.run));
    let mut out: Vec<String> = runs
        .into_iter()
        .filter_map(|run| {
            let (wall, other) = (run.wall_s?, run.other_cpu_s?);
            (other > 0.1 * wall).then(|| {
                let log = run.log.as_deref().and_then(|l| l.file_stem()?.to_str()).unwrap_or("?");
                format!("{log}: other processes used {other:.1} CPU-s during its {wall:.1} s")
            })
        })
        .collect();
    out.sort();
    out.dedup();
    out
}
