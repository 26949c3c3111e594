//! results.json of an e2e run: what was calibrated, quantized and measured, and how (provenance).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::disk::{write_atomic, write_json};
use crate::error::Result;
use crate::provenance::Provenance;
use crate::settings::policy::Mode;
use crate::steps::collect::PassTimes;
use crate::steps::speed::OpProfile;
use crate::tasks::TaskResult;

/// One `--compare-methods` method's model (its evaluation is in the task's result).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ComparedMethod {
    pub method: String,
    pub model: String,
}

/// One more `--precision` of an e2e run: its model (its evaluation is in the task's result).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ComparedPrecision {
    /// The policy's `precision` (`fp8-e4m3fn`, `fp8-e4m3fnuz`, `int8`).
    pub precision: String,
    /// The range method its ranges came from.
    pub method: String,
    pub model: String,
    /// Q/DQ pairs it has.
    pub pairs: usize,
}

/// Calibration summary in results.json.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CalibrationSummary {
    pub data: String,
    /// Calibration units: SQuAD questions, a classifier's inputs, an embedding model's texts (`unit` says which).
    pub questions: usize,
    /// What `questions` counts: `questions`, `inputs` or `texts` (absent in results.json files written before it was
    /// recorded: questions).
    #[serde(default = "questions")]
    pub unit: String,
    pub features: usize,
    pub tensors: usize,
    pub method: String,
    pub seconds: f64,
    /// Where the statistics pass went (absent in results.json files written before it was recorded).
    #[serde(default)]
    pub pass: Option<PassTimes>,
    /// Tensors in which NaN or infinite values were seen (excluded from the statistics).
    pub non_finite_tensors: Vec<String>,
    /// Calibration questions that are also among the evaluated ones (both SQuAD files, compared by question id; or,
    /// for other inputs, the first rows of one file both read); absent when that cannot be told (different files of
    /// other inputs, or no evaluation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub also_evaluated: Option<usize>,
    /// How far the ranges of the two halves of the calibration data lie apart (absent when a half was empty, and in
    /// results.json files written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halves: Option<calib::RangeSpread>,
}

/// What calibrating on evaluated questions does to the INT8 row, for the warning and report.md.
pub(crate) const OVERLAP_EFFECT: &str = "INT8's score is partly measured on data its ranges were fitted to; calibrate on \
     other questions (e.g. the training set) to keep the measurement clean";

/// Quantization summary in results.json.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QuantizationSummary {
    /// `static` (calibrated Q/DQ pairs) or `dynamic` (inputs quantized at run time).
    #[serde(default)]
    pub mode: Mode,
    /// The pairs' type (the policy's `precision`): `int8` (which integers, the policy's `activations`), `a16w8`
    /// (int16 activations beside int8 weights), `fp8-e4m3fn` or `fp8-e4m3fnuz`. The `int8` result is this model's
    /// whatever its precision.
    #[serde(default = "int8")]
    pub precision: String,
    pub policy: String,
    /// What chose the preset: `--policy`, `--ort-quant`, or `--ep <name>` (the EP's own preset).
    #[serde(default)]
    pub policy_chosen_by: String,
    /// The kind of CPU the preset laid the model out for, where its layout depends on it (`amx`, `avx512-bf16`,
    /// `vnni`, `avx2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_cpu: Option<String>,
    pub quantized_tensors: usize,
    pub quantize_nodes: usize,
    pub dequantize_nodes: usize,
    /// Embedding tables stored as int8.
    #[serde(default)]
    pub embedding_tables: usize,
    /// MatMul-like nodes (MatMul, Gemm, FusedMatMul, Attention, ...) that still read a float input that is not
    /// dequantized: `node (op; float: inputs)`.
    #[serde(default)]
    pub float_matmul_like: Vec<String>,
    /// ONNX Runtime fused ops written as its integer contrib ops (`QAttention: Attention_0, ...`) and Gemm biases
    /// stored as int32 (so its CPU EP fuses `QGemm`), one line each.
    #[serde(default)]
    pub integer_forms: Vec<String>,
    /// SmoothQuant-style migration applied before calibration (one line), if any.
    #[serde(default)]
    pub smoothing: Option<String>,
    /// GPTQ rounding of the integer weights before calibration (one line), if any.
    #[serde(default)]
    pub weight_rounding: Option<String>,
    /// The mean shift quantization left on a classifier's output, corrected in its bias (`output_bias =
    /// corrected`; one line), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_bias: Option<String>,
    /// Tensors the policy wanted but that had no usable range, with the reason.
    pub skipped: Vec<String>,
}

/// Everything an e2e run measured: results.json.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct E2eResults {
    pub qdq_version: String,
    pub dataset: String,
    /// `squad` (start / end logits), `classification` (class logits) or `embedding` (a sentence embedding): the
    /// task detected, whose measurements `result` holds.
    #[serde(default = "squad_task")]
    pub task: String,
    /// The Python library (and class) that loads the output folder, as the task says (absent for a task none serves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loader: Option<crate::inputs::folder::Loader>,
    /// `None` in dynamic mode (no calibration).
    pub calibration: Option<CalibrationSummary>,
    pub quantization: QuantizationSummary,
    /// The task's measurements of FP32 against the quantized model(s), tagged by `task` (absent with `--no-eval`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<TaskResult>,
    /// `--compare-methods`: the same placement with each other method's ranges.
    #[serde(default)]
    pub compared_methods: Vec<ComparedMethod>,
    /// `--precision`'s others (e.g. fp8 after int8): quantized from the same calibration, evaluated the same way.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compared_precisions: Vec<ComparedPrecision>,
    /// `--profile-ops`: where each model's time goes, on the same features.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_profile: Option<OpProfiles>,
    /// How the run was made (build, command line, ONNX Runtime, settings, machine, phase times).
    #[serde(default)]
    pub provenance: Provenance,
}

/// [`E2eResults::op_profile`]: both models' [`OpProfile`]s.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OpProfiles {
    pub fp32: OpProfile,
    pub int8: OpProfile,
}

fn int8() -> String {
    "int8".to_owned()
}

fn questions() -> String {
    "questions".to_owned()
}

fn squad_task() -> String {
    "squad".to_owned()
}

impl E2eResults {
    /// results.json and report.md ([`E2eResults::markdown`]) into `dir`.
    pub fn write(&self, dir: &Path) -> Result<()> {
        write_json(&dir.join("results.json"), self)?;
        let mut md = self.markdown();
        let loaders = crate::inputs::folder::loaders(dir, "model_qdq.onnx", self.loader.as_ref());
        if !loaders.is_empty() {
            md.push_str("\n## Loading the quantized model\n\n");
            for line in loaders {
                md.push_str(&format!("- {line}\n"));
            }
        }
        write_atomic(&dir.join("report.md"), md.as_bytes())
    }
}
