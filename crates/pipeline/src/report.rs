//! results.json and report.md of an e2e run.

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::data::Score;
use crate::speed::OpProfile;
use crate::{Result, write_atomic};

/// Latency of an evaluation. Per-feature numbers divide each batch's wall time by its features.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub features: usize,
    pub batches: usize,
    pub total_seconds: f64,
    pub ms_per_feature: f64,
    pub features_per_second: f64,
    /// Median over batches of (batch wall time / features in the batch), in ms.
    pub p50_ms_per_feature: f64,
    /// 90th percentile over batches of (batch wall time / features in the batch), in ms.
    pub p90_ms_per_feature: f64,
}

impl Latency {
    /// Builds the summary from per-batch (seconds, features) pairs.
    pub fn from_batches(batches: &[(f64, usize)]) -> Latency {
        let features: usize = batches.iter().map(|b| b.1).sum();
        let total: f64 = batches.iter().map(|b| b.0).sum();
        let mut per: Vec<f64> = batches.iter().filter(|b| b.1 > 0).map(|(s, n)| s * 1000.0 / *n as f64).collect();
        per.sort_by(f64::total_cmp);
        let pct = |p: f64| -> f64 {
            if per.is_empty() {
                return 0.0;
            }
            // nearest-rank percentile
            let rank = ((p / 100.0) * per.len() as f64).ceil().max(1.0) as usize;
            per[rank.min(per.len()) - 1]
        };
        Latency {
            features,
            batches: batches.len(),
            total_seconds: total,
            ms_per_feature: if features > 0 { total * 1000.0 / features as f64 } else { 0.0 },
            features_per_second: if total > 0.0 { features as f64 / total } else { 0.0 },
            p50_ms_per_feature: pct(50.0),
            p90_ms_per_feature: pct(90.0),
        }
    }
}

/// One evaluated model in results.json.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ModelResult {
    pub model: String,
    pub model_bytes: u64,
    pub ep: String,
    #[serde(flatten)]
    pub score: Score,
    pub latency: Latency,
}

/// One `--compare-methods` method: its model and, unless `--no-eval`, its INT8 result.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ComparedMethod {
    pub method: String,
    pub model: String,
    pub int8: Option<ModelResult>,
}

/// Calibration summary in results.json.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CalibrationSummary {
    pub data: String,
    pub questions: usize,
    pub features: usize,
    pub tensors: usize,
    pub method: String,
    pub seconds: f64,
    /// Where the statistics pass went (absent in results.json files written before it was recorded).
    #[serde(default)]
    pub pass: Option<crate::PassTimes>,
    /// Tensors in which NaN or infinite values were seen (excluded from the statistics).
    pub non_finite_tensors: Vec<String>,
    /// Calibration questions that are also among the evaluated ones (both SQuAD files, compared by question id; or,
    /// for other inputs, the first rows of one file both read); absent when that cannot be told (different files of
    /// other inputs, or no evaluation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub also_evaluated: Option<usize>,
}

/// What calibrating on evaluated questions does to the INT8 row, for the warning and report.md.
pub(crate) const OVERLAP_EFFECT: &str = "INT8's score is partly measured on data its ranges were fitted to; calibrate on \
     other questions (e.g. the training set) to keep the measurement clean";

/// Quantization summary in results.json.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QuantizationSummary {
    /// `static` (calibrated Q/DQ pairs) or `dynamic` (inputs quantized at run time).
    #[serde(default)]
    pub mode: crate::settings::Mode,
    pub policy: String,
    /// What chose the preset: `--policy`, `--ort-quant`, or `--ep <name>` (the EP's own preset).
    #[serde(default)]
    pub policy_chosen_by: String,
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
    /// Tensors the policy wanted but that had no usable range, with the reason.
    pub skipped: Vec<String>,
}

/// One model's side of a classifier evaluation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClassifierModel {
    pub model: String,
    pub model_bytes: u64,
    pub ep: String,
    /// Share of labelled inputs whose argmax is the label (`None` without labels).
    pub accuracy: Option<f64>,
    pub latency: Latency,
}

/// How the INT8 logits agree with FP32's, over every input (every row of the logits' last axis).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Agreement {
    /// Rows compared: inputs, or with `per_token` the tokens the attention mask keeps.
    pub inputs: usize,
    /// Per-token logits (`[batch, seq, classes]`, a token-classification head): one row per unmasked token.
    #[serde(default)]
    pub per_token: bool,
    /// The output compared and its class count (last axis).
    pub output: String,
    pub classes: usize,
    /// Share of rows with the same argmax.
    pub top1: f64,
    /// Mean and largest KL(softmax(FP32) ‖ softmax(INT8)) per row, in nats.
    pub mean_kl: f64,
    pub max_kl: f64,
    /// Largest |logit difference|.
    pub max_abs_diff: f64,
}

/// Both models and their agreement (results.json `classification`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClassifierEval {
    /// The inputs evaluated on.
    pub data: String,
    pub fp32: ClassifierModel,
    pub int8: ClassifierModel,
    pub agreement: Agreement,
}

/// Everything an e2e run measured: results.json.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct E2eResults {
    pub qdq_version: String,
    pub dataset: String,
    /// `squad` (start / end logits, EM / F1 in `fp32` / `int8`) or `classification` (class logits, compared in
    /// `classification`).
    #[serde(default = "squad_task")]
    pub task: String,
    /// `None` in dynamic mode (no calibration).
    pub calibration: Option<CalibrationSummary>,
    pub quantization: QuantizationSummary,
    pub fp32: Option<ModelResult>,
    pub int8: Option<ModelResult>,
    /// A model that is not a SQuAD model: INT8 against FP32 on its inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classification: Option<ClassifierEval>,
    /// `--compare-methods`: the same placement with each other method's ranges.
    #[serde(default)]
    pub compared_methods: Vec<ComparedMethod>,
    /// INT8 against FP32 timed in alternation on the first evaluation features (SQuAD models).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup: Option<crate::Speedup>,
    /// `--profile-ops`: where each model's time goes, on the same features.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_profile: Option<OpProfiles>,
    /// How the run was made (build, command line, ONNX Runtime, settings, machine, phase times).
    #[serde(default)]
    pub provenance: crate::Provenance,
}

/// [`E2eResults::op_profile`]: both models' [`OpProfile`]s.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OpProfiles {
    pub fp32: OpProfile,
    pub int8: OpProfile,
}

/// Kernel time per operator type of each of `models` (name, profile), side by side: ms per feature and share of the
/// model's kernel time, the operators most costly in any model first; the provider is named where it is not the CPU.
/// Columns aligned, and valid Markdown.
pub fn op_table(models: &[(&str, &OpProfile)]) -> String {
    use comfy_table::{CellAlignment, Table, presets::ASCII_MARKDOWN};
    let mut rows: Vec<(&str, &str, f64)> = vec![];
    for (_, p) in models {
        for o in &p.ops {
            match rows.iter_mut().find(|r| r.0 == o.op && r.1 == o.provider) {
                Some(r) => r.2 = r.2.max(o.ms_per_feature),
                None => rows.push((&o.op, &o.provider, o.ms_per_feature)),
            }
        }
    }
    rows.sort_by(|a, b| b.2.total_cmp(&a.2).then_with(|| a.0.cmp(b.0)));
    let mut t = Table::new();
    t.load_preset(ASCII_MARKDOWN);
    let mut header = vec!["operator".to_owned()];
    for (name, _) in models {
        header.extend([format!("{name} nodes"), format!("{name} ms/feature")]);
    }
    t.set_header(header);
    for (op, provider, _) in rows {
        let label = match provider {
            "CPUExecutionProvider" | "" => op.to_owned(),
            p => format!("{op} ({})", p.trim_end_matches("ExecutionProvider")),
        };
        let mut row = vec![label];
        for (_, p) in models {
            match p.ops.iter().find(|o| o.op == op && o.provider == provider) {
                Some(o) => row.extend([
                    o.nodes.to_string(),
                    format!("{:.3} ({:.0} %)", o.ms_per_feature, 100.0 * o.ms_per_feature / p.kernel_ms_per_feature),
                ]),
                None => row.extend(["".to_owned(), "".to_owned()]),
            }
        }
        t.add_row(row);
    }
    for (label, value) in [("all kernels", 0), ("whole run", 1)] {
        let mut row = vec![label.to_owned()];
        for (_, p) in models {
            let ms = if value == 0 { p.kernel_ms_per_feature } else { p.run_ms_per_feature };
            row.extend([String::new(), format!("{ms:.3}")]);
        }
        t.add_row(row);
    }
    for c in t.column_iter_mut().skip(1) {
        c.set_cell_alignment(CellAlignment::Right);
    }
    let p = models.first().map(|m| m.1);
    format!(
        "{t}\nONNX Runtime's profiler: kernel time per operator type as it ran them (after its graph optimisations), \
         per feature, over {} passes of the same {} features after an untimed one; a profiled run is slower than an \
         unprofiled one, so read shares, not speed.\n",
        p.map_or(0, |p| p.passes),
        p.map_or(0, |p| p.features)
    )
}

fn squad_task() -> String {
    "squad".to_owned()
}

impl E2eResults {
    pub fn delta_f1(&self) -> Option<f64> {
        Some(self.int8.as_ref()?.score.f1 - self.fp32.as_ref()?.score.f1)
    }

    /// The FP32 vs INT8 table, as printed and as in report.md: columns aligned, and valid Markdown.
    pub fn table(&self) -> String {
        use comfy_table::{CellAlignment, Table, presets::ASCII_MARKDOWN};
        let int8 = match self.quantization.mode {
            crate::Mode::Dynamic => "INT8 (dynamic)",
            crate::Mode::Static => "INT8 (QDQ)",
        };
        if let Some(c) = &self.classification {
            return classification_table(c, int8);
        }
        let mut t = Table::new();
        t.load_preset(ASCII_MARKDOWN);
        t.set_header(["model", "EP", "EM", "F1", "dF1", "ms/feature", "p50", "p90", "features/s", "size (MB)"]);
        let mut rows = vec![("FP32".to_owned(), &self.fp32), (int8.to_owned(), &self.int8)];
        let method = self.calibration.as_ref().map(|c| c.method.as_str());
        if let (Some(m), false) = (method, self.compared_methods.is_empty()) {
            rows[1].0 = format!("INT8 (QDQ, {m})");
        }
        rows.extend(self.compared_methods.iter().map(|c| (format!("INT8 (QDQ, {})", c.method), &c.int8)));
        for (name, r) in rows {
            let Some(r) = r else { continue };
            let d = match &self.fp32 {
                Some(f) if name != "FP32" => format!("{:+.2}", r.score.f1 - f.score.f1),
                _ => "".to_owned(),
            };
            t.add_row([
                name,
                r.ep.clone(),
                format!("{:.2}", r.score.exact_match),
                format!("{:.2}", r.score.f1),
                d,
                format!("{:.2}", r.latency.ms_per_feature),
                format!("{:.2}", r.latency.p50_ms_per_feature),
                format!("{:.2}", r.latency.p90_ms_per_feature),
                format!("{:.1}", r.latency.features_per_second),
                format!("{:.1}", r.model_bytes as f64 / 1e6),
            ]);
        }
        for c in t.column_iter_mut().skip(2) {
            c.set_cell_alignment(CellAlignment::Right);
        }
        match &self.speedup {
            Some(s) => format!(
                "{t}\nINT8 runs at {} FP32's speed: both models run the same {} features in turn, {} rounds (median, \
                 slowest-fastest round); the ms/feature columns are single passes minutes apart.\n",
                s.describe(),
                s.features,
                s.rounds
            ),
            None => format!("{t}\n"),
        }
    }

    /// report.md: the table plus how the numbers were made.
    pub fn markdown(&self) -> String {
        let q = &self.quantization;
        let mut md = String::new();
        let _ = writeln!(md, "# qdq e2e report\n");
        let _ = writeln!(md, "Dataset: `{}` (task: {})\n", self.dataset, self.task);
        md.push_str(&self.table());
        if let Some(p) = &self.op_profile {
            let _ = writeln!(md, "\n## Where the time goes\n");
            md.push_str(&op_table(&[("FP32", &p.fp32), ("INT8", &p.int8)]));
        }
        let _ = writeln!(md, "\n## Calibration\n");
        let unit = if self.task == "squad" { "questions" } else { "inputs" };
        match &self.calibration {
            Some(c) => {
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
                    let _ =
                        writeln!(md, "- tensors with NaN/Inf values (excluded): {}", c.non_finite_tensors.join(", "));
                }
                if let Some(n) = c.also_evaluated.filter(|&n| n > 0) {
                    let _ = writeln!(md, "- {n} of the calibration {unit} are also evaluated: {OVERLAP_EFFECT}");
                }
            }
            None => {
                let _ = writeln!(md, "- none: dynamic mode quantizes each MatMul input at run time");
            }
        }
        let _ = writeln!(md, "\n## Quantization\n");
        let _ = writeln!(
            md,
            "- mode: {}\n- policy: {} (chosen by {})\n- quantized tensors: {}\n- int8 embedding tables: {}\n- QuantizeLinear nodes: {}, DequantizeLinear nodes: {}",
            q.mode,
            q.policy,
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
        md
    }

    pub fn write(&self, dir: &Path) -> Result<()> {
        let json = serde_json::to_vec_pretty(self)
            .map_err(|e| crate::Error::Output { path: dir.join("results.json"), reason: e.to_string() })?;
        write_atomic(&dir.join("results.json"), &json)?;
        write_atomic(&dir.join("report.md"), self.markdown().as_bytes())
    }
}

/// A classifier's FP32 vs INT8 table: accuracy (with labels), agreement with FP32, latency and size.
fn classification_table(c: &ClassifierEval, int8: &str) -> String {
    use comfy_table::{CellAlignment, Table, presets::ASCII_MARKDOWN};
    let mut t = Table::new();
    t.load_preset(ASCII_MARKDOWN);
    t.set_header(["model", "EP", "accuracy", "top-1 = FP32", "mean KL", "max logit diff", "ms/input", "size (MB)"]);
    let a = &c.agreement;
    for (name, m, same) in [("FP32", &c.fp32, None), (int8, &c.int8, Some(a))] {
        let pct = |v: f64| format!("{:.2} %", 100.0 * v);
        t.add_row([
            name.to_owned(),
            m.ep.clone(),
            m.accuracy.map_or("-".to_owned(), pct),
            same.map_or(String::new(), |a| pct(a.top1)),
            same.map_or(String::new(), |a| format!("{:.2e}", a.mean_kl)),
            same.map_or(String::new(), |a| format!("{:.4}", a.max_abs_diff)),
            format!("{:.2}", m.latency.ms_per_feature),
            format!("{:.1}", m.model_bytes as f64 / 1e6),
        ]);
    }
    for col in t.column_iter_mut().skip(2) {
        col.set_cell_alignment(CellAlignment::Right);
    }
    let rows = if a.per_token { "tokens (padding left out)" } else { "inputs" };
    format!("{t}\n{} {rows}, output `{}` ({} classes)\n", a.inputs, a.output, a.classes)
}

/// `MatMul 12, Attention 6`: the float MatMul-like nodes counted per op type.
pub fn float_summary(nodes: &[qdq::FloatNode]) -> String {
    let mut by_op: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for n in nodes {
        *by_op.entry(n.op_type.as_str()).or_default() += 1;
    }
    by_op.iter().map(|(op, c)| format!("{op} {c}")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_percentiles_use_nearest_rank_per_feature() {
        // per-feature ms: 10, 20, 30, 40 (batch of 2 taking 0.08 s = 40 ms/feature)
        let l = Latency::from_batches(&[(0.010, 1), (0.020, 1), (0.030, 1), (0.080, 2)]);
        assert_eq!(l.features, 5);
        assert_eq!(l.batches, 4);
        assert!((l.total_seconds - 0.14).abs() < 1e-12);
        assert!((l.ms_per_feature - 28.0).abs() < 1e-9);
        assert!((l.p50_ms_per_feature - 20.0).abs() < 1e-9);
        assert!((l.p90_ms_per_feature - 40.0).abs() < 1e-9);
        assert!((l.features_per_second - 5.0 / 0.14).abs() < 1e-9);
        assert_eq!(Latency::from_batches(&[]), Latency::default());
    }
}
