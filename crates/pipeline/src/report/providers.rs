//! What `qdq providers` reports: the ONNX Runtime library that was loaded and its execution providers.

use std::fmt;
use std::path::PathBuf;

use crate::job::Report;

/// The loaded ONNX Runtime and the EPs it provides.
#[derive(Debug, Clone)]
pub struct ProvidersReport {
    pub version: String,
    pub library: PathBuf,
    pub providers: Vec<String>,
}

impl Report for ProvidersReport {
    /// The document `qdq providers --json` prints (docs/JSON.md, schema `qdq.providers/1`).
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "schema": "qdq.providers/1",
            "onnxruntime": self.version,
            "library": self.library,
            "providers": self.providers,
        })
    }
}

impl fmt::Display for ProvidersReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ONNX Runtime {} ({})", self.version, self.library.display())?;
        for p in &self.providers {
            write!(f, "\n  {p}")?;
        }
        Ok(())
    }
}
