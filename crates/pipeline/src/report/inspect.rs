//! What `qdq inspect` reports of a model.

use std::fmt::{self, Write as _};
use std::path::PathBuf;

use crate::job::Report;
use crate::steps::ops::float_summary;

/// Everything `qdq inspect` reports of a model.
#[derive(Debug, Clone)]
pub struct Inspection {
    pub path: PathBuf,
    pub ir_version: i64,
    pub opset: Option<i64>,
    pub producer: (String, String),
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub nodes: usize,
    pub initializers: usize,
    pub parameters: usize,
    pub smoothing: Option<String>,
    pub counts: qdq::QdqCounts,
    pub coverage: qdq::Coverage,
    /// The text lists every pair with its scale and range instead of the per-op table (`--pairs`).
    pub pairs: bool,
}

impl Report for Inspection {
    /// The document `qdq inspect --json` prints (docs/JSON.md, schema `qdq.inspect/1`).
    fn json(&self) -> serde_json::Value {
        let ranges: std::collections::BTreeMap<_, _> =
            self.ranges().map(|(t, lo, hi)| (t.to_owned(), [lo, hi])).collect();
        serde_json::json!({
            "schema": "qdq.inspect/1",
            "model": self.path,
            "ir_version": self.ir_version,
            "opset": self.opset,
            "producer": format!("{} {}", self.producer.0, self.producer.1).trim(),
            "inputs": self.inputs,
            "outputs": self.outputs,
            "nodes": self.nodes,
            "initializers": self.initializers,
            "parameters": self.parameters,
            "smoothing": self.smoothing,
            "coverage": self.coverage,
            "ranges": ranges,
        })
    }
}

impl Inspection {
    /// The ranges the model's per-tensor Q/DQ pairs, and the QuantizeLinears its integer kernels read, encode.
    fn ranges(&self) -> impl Iterator<Item = (&str, f32, f32)> {
        let c = &self.coverage;
        let pairs = c.pairs.iter().filter_map(|p| p.range().map(|r| (p.tensor.as_str(), r.0, r.1)));
        pairs.chain(c.quantizers.iter().filter_map(|q| q.range().map(|r| (q.tensor.as_str(), r.0, r.1))))
    }

    /// `37 MatMulIntegerToFloat`: the integer kernels by op type, or `None`.
    fn integer_kernels(&self) -> Option<String> {
        let k: Vec<String> = self
            .coverage
            .by_op
            .iter()
            .filter(|(_, c)| c.integer > 0)
            .map(|(op, c)| format!("{} {op}", c.integer))
            .collect();
        (!k.is_empty()).then(|| k.join(", "))
    }
}

impl fmt::Display for Inspection {
    /// The text of `qdq inspect`: the model, then its Q/DQ pairs by op type or (`--pairs`) one by one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        let opset = self.opset.map_or("?".into(), |v| v.to_string());
        let _ = writeln!(s, "{}", self.path.display());
        let _ =
            writeln!(s, "  IR {} | opset {opset} | producer {} {}", self.ir_version, self.producer.0, self.producer.1);
        let _ = writeln!(s, "  inputs:  {}", self.inputs.join(", "));
        let _ = writeln!(s, "  outputs: {}", self.outputs.join(", "));
        let _ =
            writeln!(s, "  {} nodes, {} initializers, {} parameters", self.nodes, self.initializers, self.parameters);
        if let Some(r) = &self.smoothing {
            let _ = writeln!(s, "  smoothed MatMul inputs (SmoothQuant-style): {r}");
        }
        let _ = writeln!(s);
        let (q, dq) = (self.counts.quantize, self.counts.dequantize);
        let _ = writeln!(s, "Q/DQ: {q} QuantizeLinear, {dq} DequantizeLinear");
        if let Some(k) = self.integer_kernels() {
            let read = self.coverage.quantizers.len();
            let _ = writeln!(s, "Integer kernels: {k} (reading {read} QuantizeLinear outputs and integer weights)");
        }
        if self.pairs {
            let _ = writeln!(s, "{}", self.coverage);
            let _ = writeln!(
                s,
                "Ranges encoded by per-tensor pairs and integer kernels' QuantizeLinear (tensor: [min, max]):"
            );
            for (tensor, lo, hi) in self.ranges() {
                let _ = writeln!(s, "  {tensor}: [{lo:.6}, {hi:.6}]");
            }
        } else {
            let _ = writeln!(s, "{:<24} {:>6} {:>10} {:>8}", "op type", "nodes", "behind DQ", "integer");
            for (op, c) in &self.coverage.by_op {
                let _ = writeln!(s, "{op:<24} {:>6} {:>10} {:>8}", c.nodes, c.covered, c.integer);
            }
            if dq > 0 || !self.coverage.quantizers.is_empty() {
                let float = float_summary(&self.coverage.float_matmul_like);
                if !float.is_empty() {
                    let _ = writeln!(s, "MatMul-like work left in float: {float} (--pairs lists the nodes)");
                }
                let _ = writeln!(s, "(--pairs lists every pair with its scale and range)");
            }
        }
        f.write_str(s.trim_end_matches('\n'))
    }
}
