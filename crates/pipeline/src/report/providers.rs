//! What `qdq providers` reports: the ONNX Runtime library that was loaded, its execution providers, the plugin EPs
//! registered and every EP's devices.

use std::fmt;
use std::path::PathBuf;

use crate::job::Report;

/// The loaded ONNX Runtime, the EPs it provides and the plugins found.
#[derive(Debug, Clone)]
pub struct ProvidersReport {
    pub version: String,
    pub library: PathBuf,
    /// Compiled into the library.
    pub providers: Vec<String>,
    /// Plugin libraries found and registered.
    pub plugins: Vec<PathBuf>,
    /// Every EP's devices, the plugins' among them.
    pub devices: Vec<runtime::plugin::Device>,
    /// Plugin EPs not found: the EP and why.
    pub missing: Vec<(String, String)>,
}

impl Report for ProvidersReport {
    /// The document `qdq providers --json` prints (docs/JSON.md, schema `qdq.providers/1`).
    fn json(&self) -> serde_json::Value {
        let devices: Vec<_> = self
            .devices
            .iter()
            .map(|d| serde_json::json!({ "ep": d.ep, "kind": d.kind, "vendor": d.vendor }))
            .collect();
        let missing: Vec<_> =
            self.missing.iter().map(|(ep, why)| serde_json::json!({ "ep": ep, "reason": why })).collect();
        serde_json::json!({
            "schema": "qdq.providers/1",
            "onnxruntime": self.version,
            "library": self.library,
            "providers": self.providers,
            "plugins": self.plugins,
            "devices": devices,
            "plugins_missing": missing,
        })
    }
}

impl fmt::Display for ProvidersReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ONNX Runtime {} ({})", self.version, self.library.display())?;
        for p in &self.providers {
            write!(f, "\n  {p}")?;
        }
        for p in &self.plugins {
            write!(f, "\nplugin {}", p.display())?;
        }
        if !self.devices.is_empty() {
            write!(f, "\ndevices:")?;
        }
        for d in &self.devices {
            write!(f, "\n  {} on {} ({})", d.ep, d.kind, d.vendor)?;
        }
        for (ep, why) in &self.missing {
            write!(f, "\n{ep}: not available. {why}")?;
        }
        Ok(())
    }
}
