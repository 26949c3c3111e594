//! How a result was made, recorded in results.json so a run can be reproduced: the build, the command line, ONNX
//! Runtime, the sessions, every setting, the machine, and the wall time of each phase.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What the caller knows of the invocation (the binary fills it; a library caller may leave it empty).
#[derive(Debug, Clone, Default)]
pub struct Invocation {
    pub command_line: Vec<String>,
    /// The git commit the binary was built from (its build script stamps it: stamped here, every commit would
    /// rebuild this crate); empty when unknown.
    pub build_commit: String,
}

impl Invocation {
    /// The build's commit, or `unknown`.
    pub fn git_commit(&self) -> &str {
        if self.build_commit.is_empty() { "unknown" } else { &self.build_commit }
    }
}

/// results.json's `provenance`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Provenance {
    pub qdq_version: String,
    pub git_commit: String,
    /// Empty when the run was not started from the command line.
    pub command_line: Vec<String>,
    pub onnxruntime: OnnxRuntime,
    /// The FP32 and INT8 sessions (EP with its options, optimization level, threads, fallback), as Rust writes them.
    pub sessions: BTreeMap<String, String>,
    /// Data, policy, calibration and evaluation settings, each as a JSON object.
    pub settings: Value,
    pub machine: Machine,
    /// Wall seconds per phase (`smoothing_and_calibration`, `quantization`, `fp32_eval`, `int8_eval`, `total`).
    pub phase_seconds: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct OnnxRuntime {
    pub version: String,
    pub library: String,
    pub providers: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub os: String,
    /// The CPU's 8-bit dot-product instructions ONNX Runtime's integer kernels use ([`runtime::int8_dot_product`]).
    #[serde(default)]
    pub int8_dot_product: Option<String>,
}

impl Machine {
    pub fn this() -> Machine {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines().find_map(|l| {
                    l.strip_prefix("model name").map(|r| r.trim_start_matches([' ', '\t', ':']).to_owned())
                })
            })
            .unwrap_or_else(|| std::env::consts::ARCH.to_owned());
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            os: std::env::consts::OS.to_owned(),
            int8_dot_product: runtime::int8_dot_product().map(str::to_owned),
        }
    }
}

/// The ONNX Runtime this process loaded (empty fields if none is loaded yet and loading fails).
pub fn onnxruntime(library: Option<&std::path::Path>) -> OnnxRuntime {
    match runtime::init(library) {
        Ok(i) => OnnxRuntime { version: i.version, library: i.path.display().to_string(), providers: i.providers },
        Err(_) => OnnxRuntime::default(),
    }
}
