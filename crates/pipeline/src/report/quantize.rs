//! What `qdq quantize` reports: the plan of a dry run, or the model it wrote.

use std::fmt;
use std::path::PathBuf;

use crate::job::Report;

/// What [`quantize_file`] did: the plan (dry run) or the model it wrote.
#[derive(Debug, Clone)]
pub enum QuantizeReport {
    /// `--list-policies`: every preset's options, and what each option does.
    Policies(String),
    Planned(qdq::Plan),
    PlannedDynamic(qdq::DynamicPlan),
    /// `skipped`: each tensor the policy wanted but left in float, with the reason; `float_matmul_like`: the
    /// MatMul-like nodes of the written model that still read float inputs; `integer_forms`: what was written
    /// besides Q/DQ pairs ([`qdq::Plan::integer_forms`]).
    Written {
        output: PathBuf,
        tensors: usize,
        skipped: Vec<String>,
        float_matmul_like: Vec<String>,
        integer_forms: Vec<String>,
    },
}

impl Report for QuantizeReport {
    /// The document `qdq quantize --json` prints (docs/JSON.md, schema `qdq.quantize/1`).
    fn json(&self) -> serde_json::Value {
        match self {
            QuantizeReport::Policies(_) => {
                let presets: serde_json::Map<String, serde_json::Value> = qdq::Preset::ALL
                    .iter()
                    .map(|p| (p.to_string(), serde_json::to_value(qdq::Policy::of(*p)).unwrap_or_default()))
                    .collect();
                let options: Vec<serde_json::Value> = qdq::OPTIONS
                    .iter()
                    .map(|o| serde_json::json!({"key": o.key, "doc": o.doc, "values": o.values}))
                    .collect();
                serde_json::json!({"schema": "qdq.policies/1", "presets": presets, "options": options})
            }
            QuantizeReport::Planned(plan) => serde_json::json!({
                "schema": "qdq.quantize/1",
                "dry_run": true,
                "pairs": plan.pair_count(),
                "plan": plan,
            }),
            QuantizeReport::PlannedDynamic(plan) => serde_json::json!({
                "schema": "qdq.quantize/1",
                "dry_run": true,
                "mode": "dynamic",
                "plan": plan,
            }),
            QuantizeReport::Written { output, tensors, skipped, float_matmul_like, integer_forms } => {
                serde_json::json!({
                    "schema": "qdq.quantize/1",
                    "dry_run": false,
                    "output": output,
                    "quantized_tensors": tensors,
                    "skipped_tensors": skipped.len(),
                    "skipped": skipped,
                    "float_matmul_like": float_matmul_like,
                    "integer_forms": integer_forms,
                })
            }
        }
    }
}

impl fmt::Display for QuantizeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuantizeReport::Policies(text) => f.write_str(text),
            QuantizeReport::Planned(plan) => write!(f, "{plan}"),
            QuantizeReport::PlannedDynamic(plan) => write!(f, "{plan}"),
            QuantizeReport::Written { output, tensors, skipped, float_matmul_like, integer_forms } => {
                write!(f, "Wrote {} ({tensors} tensors quantized, {} skipped)", output.display(), skipped.len())?;
                for line in integer_forms {
                    write!(f, "\n  {line}")?;
                }
                for s in skipped {
                    write!(f, "\n  skipped {s}")?;
                }
                if !float_matmul_like.is_empty() {
                    write!(f, "\n{} MatMul-like nodes left in float:", float_matmul_like.len())?;
                    for n in float_matmul_like {
                        write!(f, "\n  {n}")?;
                    }
                }
                Ok(())
            }
        }
    }
}
