//! The text of an e2e run: the FP32 vs INT8 table (printed and in report.md), report.md, and the command's report.

use std::fmt::{self, Write as _};
use std::path::PathBuf;

use crate::job::Report;
use crate::report::results::{CalibrationSummary, E2eResults, OVERLAP_EFFECT, QuantizationSummary};
use crate::settings::policy::Mode;
use crate::steps::ops::op_table;
use crate::tasks::{TableLabels, precision_label};

/// What `qdq e2e` did: the results (as results.json) and where everything went.
#[derive(Debug, Clone)]
pub struct E2eReport {
    pub results: E2eResults,
    pub out: PathBuf,
}

impl fmt::Display for E2eReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.results.table())?;
        write!(f, "Outputs written to {}", self.out.display())?;
        for line in crate::inputs::folder::loaders(&self.out, "model_qdq.onnx", self.results.loader.as_ref()) {
            write!(f, "\n{line}")?;
        }
        Ok(())
    }
}

impl Report for E2eReport {
    /// results.json's fields, with the schema (`qdq.e2e/2`) and the output directory.
    fn json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(&self.results).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.insert("schema".into(), "qdq.e2e/2".into());
            m.insert("out".into(), serde_json::json!(self.out));
        }
        v
    }
}

impl E2eResults {
    /// How the tables name the quantized model: `INT8 (QDQ)`, `FP8 E4M3FN (QDQ)`, `INT8 (dynamic)`.
    fn labels(&self) -> TableLabels {
        let q = &self.quantization;
        let (precision, row) = match q.mode {
            Mode::Dynamic => ("INT8".to_owned(), "INT8 (dynamic)".to_owned()),
            Mode::Static => (precision_label(&q.precision), format!("{} (QDQ)", precision_label(&q.precision))),
        };
        TableLabels {
            row,
            precision,
            pairs: q.precision.clone(),
            method: self.calibration.as_ref().map(|c| c.method.clone()),
        }
    }

    /// The FP32 vs INT8 table, as printed and as in report.md (columns aligned, and valid Markdown): the task's own;
    /// one line without evaluation (`--no-eval`).
    pub fn table(&self) -> String {
        match &self.result {
            Some(r) => r.table(&self.labels()),
            None => "Quantized (no evaluation: --no-eval)".to_owned(),
        }
    }

    /// report.md: the table plus how the numbers were made.
    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "# qdq e2e report\n");
        let _ = writeln!(md, "Dataset: `{}` (task: {})\n", self.dataset, self.task);
        md.push_str(&self.table());
        if let Some(p) = &self.op_profile {
            let _ = writeln!(md, "\n## Where the time goes\n");
            md.push_str(&op_table(&[("FP32", &p.fp32), ("INT8", &p.int8)]));
        }
        let _ = writeln!(md, "\n## Calibration\n");
        match &self.calibration {
            Some(c) => calibration_section(&mut md, c),
            None => {
                let _ = writeln!(md, "- none: dynamic mode quantizes each MatMul input at run time");
            }
        }
        let _ = writeln!(md, "\n## Quantization\n");
        quantization_section(&mut md, &self.quantization);
        md
    }
}

/// report.md's calibration list.
fn calibration_section(md: &mut String, c: &CalibrationSummary) {
    let unit = &c.unit;
    let _ = writeln!(
        md,
        "- data: `{}` ({} {unit}, {} features)\n- method: {}\n- tensors calibrated: {}\n- time: {:.1} s{}",
        c.data,
        c.questions,
        c.features,
        c.method,
        c.tensors,
        c.seconds,
        c.pass.map(|p| format!(" ({})", p.describe())).unwrap_or_default()
    );
    if !c.non_finite_tensors.is_empty() {
        let _ = writeln!(md, "- tensors with NaN/Inf values (excluded): {}", c.non_finite_tensors.join(", "));
    }
    if let Some(n) = c.also_evaluated.filter(|&n| n > 0) {
        let _ = writeln!(md, "- {n} of the calibration {unit} are also evaluated: {OVERLAP_EFFECT}");
    }
}

/// report.md's quantization list.
fn quantization_section(md: &mut String, q: &QuantizationSummary) {
    let _ = writeln!(
        md,
        "- mode: {}\n- policy: {}{} (chosen by {})\n- quantized tensors: {}\n- int8 embedding tables: {}\n- \
         QuantizeLinear nodes: {}, DequantizeLinear nodes: {}",
        q.mode,
        q.policy,
        q.target_cpu.as_ref().map_or(String::new(), |c| format!(", laid out for {c} CPUs")),
        q.policy_chosen_by,
        q.quantized_tensors,
        q.embedding_tables,
        q.quantize_nodes,
        q.dequantize_nodes
    );
    if let Some(s) = &q.smoothing {
        let _ = writeln!(md, "- smoothing: {s}");
    }
    for line in &q.integer_forms {
        let _ = writeln!(md, "- {line}");
    }
    if !q.float_matmul_like.is_empty() {
        let _ = writeln!(md, "- MatMul-like nodes left in float ({}):", q.float_matmul_like.len());
        for n in &q.float_matmul_like {
            let _ = writeln!(md, "  - {n}");
        }
    }
    if !q.skipped.is_empty() {
        let _ = writeln!(md, "- skipped ({}):", q.skipped.len());
        for s in &q.skipped {
            let _ = writeln!(md, "  - {s}");
        }
    }
}
