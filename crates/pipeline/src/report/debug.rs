//! What `qdq debug` found: the task's outputs (logits, embeddings) against FP32's, every activation pair's error,
//! each node's sensitivity and (with `--confirm`) the F1 it stands for; as text, JSON and debug.json / debug.md /
//! sqnr.svg.

use std::fmt;
use std::path::{Path, PathBuf};

use comfy_table::{CellAlignment, Table, presets::ASCII_MARKDOWN};
use serde::Serialize;

use crate::disk::{write_atomic, write_json};
use crate::error::Result;
use crate::held_out::agreement::OutputAgreement;
use crate::held_out::pairs::{EpComparison, NodeSensitivity, TensorError};
use crate::job::Report;
use crate::report::plots::sqnr_svg;

/// `--confirm`: F1 on evaluation questions, beside the sensitivity's KL.
#[derive(Debug, Clone, Serialize)]
pub struct Confirmation {
    /// Questions scored (the first ones of the dataset).
    pub questions: usize,
    pub fp32_f1: f64,
    pub qdq_f1: f64,
    /// Spearman's rank correlation between the KL recovered and the F1 recovered over the confirmed nodes (1: the
    /// same order; `None` under 3 nodes).
    pub rank_correlation: Option<f64>,
    /// How many confirmed nodes' F1 recovered has a 95 % interval that excludes 0 ([`NodeSensitivity::f1_difference`]):
    /// with none, which answers happen to flip moves each effect as much as the node does, and F1 cannot check the
    /// order.
    pub outside_noise: usize,
}

/// What `qdq debug` found.
#[derive(Debug, Clone, Serialize)]
pub struct DebugReport {
    pub model: PathBuf,
    pub qdq: PathBuf,
    pub dataset: PathBuf,
    /// Which inputs were held out, in words.
    pub held_out: String,
    /// How many questions (a SQuAD model) or texts (an embedding model), and which.
    pub units: usize,
    pub unit: &'static str,
    /// Rows run (a SQuAD model: features).
    pub features: usize,
    /// The QDQ model against FP32: its logits, or its embeddings.
    pub logits: OutputAgreement,
    /// The float reference (the QDQ model without its activation pairs: only its weights quantized) against FP32.
    pub weights_only_logits: OutputAgreement,
    /// Every activation pair, the worst own rounding (lowest `own` SQNR) first: the pairs that add the most error
    /// themselves, not those that only carry error from upstream.
    pub tensors: Vec<TensorError>,
    /// With `--sensitivity`: every node reading quantized activations, most recovering first.
    pub sensitivity: Vec<NodeSensitivity>,
    /// With `--confirm`.
    pub confirmation: Option<Confirmation>,
    /// With a second EP (`--ep cpu,qnn`): the same QDQ model there against the first EP.
    pub other_ep: Option<EpComparison>,
    /// Rows of the printed table.
    #[serde(skip)]
    pub top: usize,
}

impl DebugReport {
    /// debug.json, debug.md (the text, the chart linked) and sqnr.svg into `dir`.
    pub fn write(&self, dir: &Path) -> Result<()> {
        write_json(&dir.join("debug.json"), &self.json())?;
        let rows: Vec<(usize, f64, f64)> =
            self.tensors.iter().map(|t| (t.graph_order, t.total.sqnr_db(), t.own.sqnr_db())).collect();
        write_atomic(&dir.join("sqnr.svg"), sqnr_svg(&rows)?.as_bytes())?;
        let md = format!("# qdq debug\n\n{self}\n\n![SQNR of each quantized activation](sqnr.svg)\n");
        write_atomic(&dir.join("debug.md"), md.as_bytes())
    }
}

impl Report for DebugReport {
    /// The document `qdq debug --json` prints (docs/JSON.md, schema `qdq.debug/1`).
    fn json(&self) -> serde_json::Value {
        let tensors: Vec<serde_json::Value> = self
            .tensors
            .iter()
            .map(|t| {
                serde_json::json!({
                    "tensor": t.tensor,
                    "readers": t.readers,
                    "range": [t.range.0, t.range.1],
                    "sqnr_db": finite(t.total.sqnr_db()),
                    "relative_error": finite(t.total.relative_error()),
                    "max_abs_error": t.total.max_abs_error,
                    "own_sqnr_db": finite(t.own.sqnr_db()),
                    "clipped_fraction": t.own.clipped_fraction(),
                    "values": t.total.values,
                })
            })
            .collect();
        // `logits` for a SQuAD model, `embeddings` for an embedding model, `class_logits` for a classifier.
        let measured = self.logits.key();
        let mut doc = serde_json::json!({
            "schema": "qdq.debug/1",
            "model": self.model,
            "qdq": self.qdq,
            "dataset": self.dataset,
            "held_out": self.held_out,
            "features": self.features,
            "tensors": tensors,
            "sensitivity": self.sensitivity.iter().map(|n| serde_json::json!({
                "node": n.node,
                "op_type": n.op_type,
                "inputs": n.inputs,
                measured: n.logits,
                "recovered": finite(n.recovered),
                "f1_recovered": n.f1_recovered,
                "f1_two_se": n.f1_two_se,
                "f1_interval": n.f1_difference.map(|d| [d.low, d.high]),
            })).collect::<Vec<_>>(),
            "confirmation": self.confirmation,
        });
        if let Some(o) = &self.other_ep {
            doc["other_ep"] = other_ep_json(o, measured);
        }
        doc[self.unit] = self.units.into();
        doc[measured] = serde_json::to_value(&self.logits).unwrap_or_default();
        doc[format!("weights_only_{measured}")] = serde_json::to_value(&self.weights_only_logits).unwrap_or_default();
        doc
    }
}

/// `other_ep` of the JSON document: the second EP's outputs against FP32's and the first EP's, and every pair's
/// dequantized tensor against the first EP's, in graph order.
fn other_ep_json(o: &EpComparison, measured: &str) -> serde_json::Value {
    let tensors: Vec<serde_json::Value> = o
        .tensors
        .iter()
        .map(|t| {
            serde_json::json!({
                "tensor": t.tensor,
                "range": [t.range.0, t.range.1],
                "sqnr_db": finite(t.stats.sqnr_db()),
                "relative_error": finite(t.stats.relative_error()),
                "max_abs_error": t.stats.max_abs_error,
                "values": t.stats.values,
            })
        })
        .collect();
    let mut doc = serde_json::json!({ "ep": o.ep, "against": o.against, "tensors": tensors });
    doc[format!("{measured}_vs_fp32")] = serde_json::to_value(&o.vs_fp32).unwrap_or_default();
    doc[format!("{measured}_vs_first")] = serde_json::to_value(&o.vs_first).unwrap_or_default();
    doc
}

/// A float for JSON: infinite (an exact tensor's SQNR) and NaN become null.
fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// Two EPs' runs of one tensor part where their SQNR falls below this: 30 dB is an error of 3 % of the signal, a few
/// 8-bit steps; fp16 arithmetic alone keeps a tensor near 60 dB.
const PARTED_DB: f64 = 30.0;

/// A markdown table with `header`, its columns `right` aligned right.
fn table(header: &[&str], right: std::ops::RangeInclusive<usize>) -> Table {
    let mut t = Table::new();
    t.load_preset(ASCII_MARKDOWN);
    t.set_header(header);
    for c in right {
        if let Some(col) = t.column_mut(c) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

impl fmt::Display for DebugReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} against {}: {}", self.qdq.display(), self.model.display(), self.held_out)?;
        let measured = format!("{} vs FP32:", self.logits.measured());
        writeln!(f, "{measured:<22} {}", self.logits.describe())?;
        writeln!(f, "{:<22} {}", "weights only vs FP32:", self.weights_only_logits.describe())?;
        if !self.tensors.is_empty() {
            self.pairs_table(f)?;
        }
        if let Some(o) = &self.other_ep {
            self.other_ep_text(f, o)?;
        }
        if self.sensitivity.is_empty() {
            return Ok(());
        }
        self.sensitivity_table(f)?;
        match &self.confirmation {
            Some(c) => self.confirmation_text(f, c),
            None => Ok(()),
        }
    }
}

impl DebugReport {
    /// The `top` pairs that add the most error themselves.
    fn pairs_table(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = self.top.min(self.tensors.len());
        writeln!(
            f,
            "\n{} activation pairs; the {shown} that add the most error themselves (own: SQNR of this pair's rounding \
             and clipping alone; SQNR: the dequantized tensor against its float value, upstream error included; \
             higher is better):",
            self.tensors.len()
        )?;
        let mut t = table(&["tensor", "own dB", "SQNR dB", "rel. error", "clipped", "range", "read by"], 1..=4);
        let db = |x: f64| if x.is_finite() { format!("{x:.1}") } else { "exact".into() };
        for e in &self.tensors[..shown] {
            let mut readers = e.readers.first().cloned().unwrap_or_default();
            if e.readers.len() > 1 {
                readers.push_str(&format!(" (+{})", e.readers.len() - 1));
            }
            t.add_row([
                e.tensor.clone(),
                db(e.own.sqnr_db()),
                db(e.total.sqnr_db()),
                format!("{:.4}", e.total.relative_error()),
                format!("{:.3} %", 100.0 * e.own.clipped_fraction()),
                format!("[{:.3}, {:.3}]", e.range.0, e.range.1),
                readers,
            ]);
        }
        write!(f, "{t}")
    }

    /// The second EP against the first: outputs, where the pairs part (the first below [`PARTED_DB`]) and the `top`
    /// lowest SQNRs in graph order.
    fn other_ep_text(&self, f: &mut fmt::Formatter<'_>, o: &EpComparison) -> fmt::Result {
        let measured = self.logits.measured();
        writeln!(f, "\n\nThe same QDQ model on {} against {} (the same inputs):", o.ep, o.against)?;
        writeln!(f, "{:<22} {}", format!("{measured} vs FP32:"), o.vs_fp32.describe())?;
        write!(f, "{:<22} {}", format!("{measured} vs {}'s:", o.against), o.vs_first.describe())?;
        if o.tensors.is_empty() {
            return writeln!(f);
        }
        let n = o.tensors.len();
        match o.tensors.iter().position(|t| t.stats.sqnr_db() < PARTED_DB) {
            Some(i) => writeln!(
                f,
                "\nThe EPs part at pair {} of {n} in graph order: {} ({:.1} dB; every earlier one at {PARTED_DB:.0} dB or more)",
                i + 1,
                o.tensors[i].tensor,
                o.tensors[i].stats.sqnr_db()
            )?,
            None => writeln!(f, "\nEvery one of the {n} pairs agrees at {PARTED_DB:.0} dB or more")?,
        }
        let mut worst: Vec<usize> = (0..n).collect();
        worst.sort_by(|&a, &b| o.tensors[a].stats.sqnr_db().total_cmp(&o.tensors[b].stats.sqnr_db()));
        worst.truncate(self.top.min(n));
        worst.sort_unstable();
        writeln!(
            f,
            "The {} pairs where {} is furthest from {}, in graph order (SQNR of its dequantized tensor against {}'s; \
             higher is better):",
            worst.len(),
            o.ep,
            o.against,
            o.against
        )?;
        let mut t = table(&["#", "tensor", "SQNR dB", "rel. error", "max |diff|", "range"], 2..=4);
        let db = |x: f64| if x.is_finite() { format!("{x:.1}") } else { "exact".into() };
        for i in worst {
            let e = &o.tensors[i];
            t.add_row([
                format!("{}", i + 1),
                e.tensor.clone(),
                db(e.stats.sqnr_db()),
                format!("{:.4}", e.stats.relative_error()),
                format!("{:.4}", e.stats.max_abs_error),
                format!("[{:.3}, {:.3}]", e.range.0, e.range.1),
            ]);
        }
        write!(f, "{t}")
    }

    /// The `top` nodes whose inputs, kept in float alone, bring the outputs closest to FP32's.
    fn sensitivity_table(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = self.top.min(self.sensitivity.len());
        let (loss, measured) = (self.logits.loss_name(), self.logits.measured());
        let explained = self.logits.explained();
        writeln!(
            f,
            "\n\nSensitivity: the {shown} nodes (of {}) whose quantized inputs, kept in float alone, bring the \
             {measured} closest to FP32 ({explained}; recovered: share of the QDQ model's {loss} {}):",
            self.sensitivity.len(),
            self.logits.loss_text()
        )?;
        let second = self.logits.second().0;
        // F1 recovered, with --confirm.
        let f1 = self.confirmation.is_some();
        let header: Vec<&str> = ["node", "op", loss, "recovered"]
            .into_iter()
            .chain(f1.then_some("F1 recovered"))
            .chain([second, "inputs"])
            .collect();
        let mut t = table(&header, 2..=header.len() - 2);
        for n in &self.sensitivity[..shown] {
            let mut row = vec![
                n.node.clone(),
                n.op_type.clone(),
                n.logits.loss_text(),
                // `+ 0.0` turns a -0 that rounds from a tiny loss into 0 (no "-0 %" in the table).
                format!("{:.0} %", (100.0 * n.recovered).round() + 0.0),
            ];
            if f1 {
                row.push(match (n.f1_difference, n.f1_recovered) {
                    (Some(d), _) if d.se.is_finite() => d.describe(),
                    (_, Some(d)) => format!("{d:+.2}"),
                    _ => String::new(),
                });
            }
            row.extend([n.logits.second().1, n.inputs.join(", ")]);
            t.add_row(row);
        }
        write!(f, "{t}")
    }

    /// What `--confirm` scored, and whether F1 can check the order on these questions.
    fn confirmation_text(&self, f: &mut fmt::Formatter<'_>, c: &Confirmation) -> fmt::Result {
        write!(
            f,
            "\n\nF1 recovered: each node alone in float, scored on the first {} questions (FP32 {:.2}, QDQ model {:.2}); \
             rank correlation of KL recovered with F1 recovered: {}",
            c.questions,
            c.fp32_f1,
            c.qdq_f1,
            c.rank_correlation
                .map_or_else(|| "n/a (under 3 nodes, or one column constant)".to_owned(), |r| format!("{r:+.2}"))
        )?;
        let confirmed: Vec<_> = self.sensitivity.iter().filter_map(|n| n.f1_difference).collect();
        write!(
            f,
            ". Effects whose 95 % interval excludes 0 (wider than the spread of which answers happen to flip): {} of {}",
            c.outside_noise,
            confirmed.len()
        )?;
        let largest = confirmed.iter().max_by(|a, b| a.delta.abs().total_cmp(&b.delta.abs()));
        if let (0, Some(d)) = (c.outside_noise, largest) {
            let more =
                d.questions_to_decide(0.0).map_or(String::new(), |n| format!("; about {n} would tell the largest one"));
            write!(
                f,
                " (these {} questions cannot tell any single node's F1 effect from none, so F1 cannot check the order{more})",
                d.questions
            )?;
        }
        Ok(())
    }
}
