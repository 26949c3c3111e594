//! Where a session's time goes, read from ONNX Runtime's profiler: the kernel time of each operator type (per
//! execution provider), summed over the runs a profile recorded after the first few.
//!
//! A session made with [`SessionConfig::profile`](crate::SessionConfig::profile) records one event per node per run
//! into a JSON file (Chrome's trace format) that [`Session::end_profiling`](crate::Session::end_profiling) finishes;
//! [`OpTimes::read`] sums it up.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::{Error, Result};

/// One operator type's share of the profiled runs.
#[derive(Debug, Clone, PartialEq)]
pub struct OpTime {
    /// The operator type as ONNX Runtime ran it (after its graph optimisations: `MatMulIntegerToFloat`,
    /// `FusedMatMul`, ...).
    pub op: String,
    /// The execution provider its kernels ran on (`CPUExecutionProvider`, ...).
    pub provider: String,
    /// Nodes of this type (distinct node names).
    pub nodes: usize,
    /// Kernel time summed over the counted runs, microseconds.
    pub micros: f64,
}

/// Kernel time per operator type over the runs a profile counted.
#[derive(Debug, Clone, PartialEq)]
pub struct OpTimes {
    /// Runs counted (those after the skipped ones).
    pub runs: usize,
    /// Their wall time (each run from start to end), microseconds.
    pub run_micros: f64,
    /// Largest first.
    pub ops: Vec<OpTime>,
}

/// An event of ONNX Runtime's profile (the fields read here).
#[derive(Deserialize)]
struct Event {
    #[serde(default)]
    cat: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    ts: f64,
    #[serde(default)]
    dur: f64,
    #[serde(default)]
    args: EventArgs,
}

#[derive(Deserialize, Default)]
struct EventArgs {
    #[serde(default)]
    op_name: String,
    #[serde(default)]
    provider: String,
}

impl OpTimes {
    /// Sums the profile at `path` over its runs after the first `skip_runs` (warm-up runs: ONNX Runtime plans and
    /// allocates for each new input shape on its first run). Every node's kernel event inside a counted run adds to
    /// its operator type. An unreadable file, another format, or no run after the skipped ones is an error naming the
    /// file.
    pub fn read(path: &Path, skip_runs: usize) -> Result<OpTimes> {
        let bad = |reason: String| Error::Profile { path: path.to_path_buf(), reason };
        let bytes = std::fs::read(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
        let events: Vec<Event> = serde_json::from_slice(&bytes)
            .map_err(|e| bad(format!("not ONNX Runtime's profile (a JSON array of trace events): {e}")))?;
        let mut runs: Vec<(f64, f64)> =
            events.iter().filter(|e| e.cat == "Session" && e.name == "model_run").map(|e| (e.ts, e.dur)).collect();
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let counted = runs.get(skip_runs..).unwrap_or_default();
        let Some(&(start, _)) = counted.first() else {
            return Err(bad(format!("{} run(s) recorded, none after the {skip_runs} skipped", runs.len())));
        };
        let mut by_op: BTreeMap<(&str, &str), (f64, Vec<&str>)> = BTreeMap::new();
        for e in events.iter().filter(|e| e.cat == "Node" && e.ts >= start) {
            let Some(node) = e.name.strip_suffix("_kernel_time") else { continue };
            // Inside a counted run (runs do not overlap: one session runs one at a time here).
            let i = counted.partition_point(|r| r.0 <= e.ts);
            if i == 0 || e.ts > counted[i - 1].0 + counted[i - 1].1 {
                continue;
            }
            let entry = by_op.entry((&e.args.op_name, &e.args.provider)).or_default();
            entry.0 += e.dur;
            entry.1.push(node);
        }
        let mut ops: Vec<OpTime> = by_op
            .into_iter()
            .map(|((op, provider), (micros, mut nodes))| {
                nodes.sort_unstable();
                nodes.dedup();
                OpTime { op: op.to_owned(), provider: provider.to_owned(), nodes: nodes.len(), micros }
            })
            .collect();
        ops.sort_by(|a, b| b.micros.total_cmp(&a.micros).then_with(|| a.op.cmp(&b.op)));
        Ok(OpTimes { runs: counted.len(), run_micros: counted.iter().map(|r| r.1).sum(), ops })
    }

    /// Kernel time of every operator type together, microseconds (less than [`OpTimes::run_micros`]: the rest is
    /// ONNX Runtime's own work between kernels).
    pub fn kernel_micros(&self) -> f64 {
        self.ops.iter().map(|o| o.micros).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(cat: &str, name: &str, ts: f64, dur: f64, op: &str) -> serde_json::Value {
        serde_json::json!({"cat": cat, "pid": 1, "tid": 1, "name": name, "ts": ts, "dur": dur, "ph": "X",
            "args": {"op_name": op, "provider": "CPUExecutionProvider"}})
    }

    #[test]
    fn kernel_time_is_summed_per_op_type_over_the_runs_after_the_skipped_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json");
        let mut events = vec![event("Session", "model_loading_uri", 0.0, 50.0, "")];
        // Three runs of two MatMul nodes and a Softmax; the first (warm-up) is slow and must not count.
        for (run, start) in [0.0, 1000.0, 2000.0].into_iter().enumerate() {
            let slow = if run == 0 { 10.0 } else { 1.0 };
            events.push(event("Session", "model_run", start + 100.0, 500.0, ""));
            events.push(event("Node", "a_fence_before", start + 110.0, 0.0, "MatMul"));
            events.push(event("Node", "a_kernel_time", start + 110.0, 40.0 * slow, "MatMul"));
            events.push(event("Node", "b_kernel_time", start + 200.0, 60.0 * slow, "MatMul"));
            events.push(event("Node", "s_kernel_time", start + 300.0, 25.0 * slow, "Softmax"));
        }
        // A kernel event outside every run (another session's, say) is left out.
        events.push(event("Node", "x_kernel_time", 5000.0, 999.0, "Softmax"));
        std::fs::write(&path, serde_json::to_vec(&events).unwrap()).unwrap();

        let t = OpTimes::read(&path, 1).unwrap();
        assert_eq!((t.runs, t.run_micros), (2, 1000.0));
        let got: Vec<_> = t.ops.iter().map(|o| (o.op.as_str(), o.nodes, o.micros)).collect();
        assert_eq!(got, [("MatMul", 2, 200.0), ("Softmax", 1, 50.0)]);
        assert_eq!(t.kernel_micros(), 250.0);
        assert_eq!(t.ops[0].provider, "CPUExecutionProvider");

        let e = OpTimes::read(&path, 3).unwrap_err().to_string();
        assert!(e.contains("p.json") && e.contains("3 run(s) recorded, none after the 3 skipped"), "{e}");
        std::fs::write(&path, b"{\"traceEvents\": 3}").unwrap();
        let e = OpTimes::read(&path, 0).unwrap_err().to_string();
        assert!(e.contains("p.json") && e.contains("not ONNX Runtime's profile"), "{e}");
    }
}
