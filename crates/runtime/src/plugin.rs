//! Execution providers shipped as plugin libraries (ONNX Runtime 1.23 and later: OpenVINO's
//! `onnxruntime-ep-openvino`), registered into the one environment of the process and reached through its devices.
//!
//! A registered plugin changes how every later session is placed: ONNX Runtime's automatic device selection (which
//! `ort` turns on) prefers a plugin's CPU device even for a session that asks for nothing. So once a plugin is
//! registered, sessions meant for the CPU EP are pinned to the CPU EP's own device ([`cpu_devices`]).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ort::memory::DeviceType;

use crate::library::{Install, environment, init};
use crate::{Ep, Error, Result};

/// Environment variable naming plugin libraries to register (separated by `:`), as `--ep-plugin` does.
pub const PLUGIN_ENV: &str = "QDQ_EP_PLUGIN";

/// The plugin libraries registered in this process (canonical paths), in order.
static REGISTERED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// One device a registered execution provider (compiled in or plugin) offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// The EP's name, e.g. `OpenVINOExecutionProvider`.
    pub ep: String,
    /// `CPU`, `GPU` or `NPU`.
    pub kind: String,
    /// The hardware's maker, as ONNX Runtime read it.
    pub vendor: String,
}

/// Registers the plugin library at `path` once per process (later calls with the same file do nothing). An error
/// names the file and what ONNX Runtime said.
pub fn register(path: &Path, ort_library: Option<&Path>) -> Result<()> {
    let bad = |reason: String| Error::Plugin { path: path.to_path_buf(), reason };
    if !path.is_file() {
        return Err(bad("no such file".into()));
    }
    init(ort_library)?;
    let canonical = std::fs::canonicalize(path).map_err(|e| bad(e.to_string()))?;
    let mut registered = REGISTERED.lock().unwrap_or_else(|p| p.into_inner());
    if registered.contains(&canonical) {
        return Ok(());
    }
    // The name has to be unique per library; some plugins (QNN's) also name their EP after it, so a library of a
    // package qdq knows is registered under its EP's name, any other under its file name (without the version
    // suffixes).
    let stem = canonical.file_name().and_then(|n| n.to_str()).unwrap_or("plugin");
    let known =
        Ep::NAMES.iter().filter_map(|n| Ep::parse(n).ok()).find(|e| e.plugin_package().is_some_and(|(_, f)| f == stem));
    let name = match known {
        Some(ep) => ep.ort_name().to_owned(),
        None => stem.split(".so").next().unwrap_or(stem).trim_start_matches("lib").to_owned(),
    };
    environment()?.register_ep_library(name, &canonical).map_err(|e| bad(e.to_string()))?;
    registered.push(canonical);
    Ok(())
}

/// Whether any plugin was registered in this process (then CPU-EP sessions are pinned to the CPU EP's device).
pub fn any_registered() -> bool {
    !REGISTERED.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
}

/// The plugin libraries registered so far.
pub fn registered() -> Vec<PathBuf> {
    REGISTERED.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Every device of every EP the environment knows (the CPU EP's first; plugins' after registration).
pub fn devices(ort_library: Option<&Path>) -> Result<Vec<Device>> {
    init(ort_library)?;
    Ok(environment()?
        .devices()
        .map(|d| Device {
            ep: d.ep().unwrap_or("?").to_owned(),
            kind: kind_name(d.hardware_device().ty()).to_owned(),
            vendor: d.hardware_device().vendor().unwrap_or("?").to_owned(),
        })
        .collect())
}

fn kind_name(ty: DeviceType) -> &'static str {
    match ty {
        DeviceType::CPU => "CPU",
        DeviceType::GPU => "GPU",
        DeviceType::NPU => "NPU",
        DeviceType::FPGA => "FPGA",
    }
}

/// The environment's devices of the EP named `ep` whose kind is `kind` (`CPU`, `GPU`, `NPU`; case-insensitive;
/// [`crate::ep::ANY_DEVICE`]: all of them).
pub(crate) fn devices_of(ep: &str, kind: &str) -> Result<Vec<ort::device::Device<'static>>> {
    Ok(environment()?
        .devices()
        .filter(|d| {
            d.ep().is_ok_and(|n| n == ep)
                && (kind == crate::ep::ANY_DEVICE || kind_name(d.hardware_device().ty()).eq_ignore_ascii_case(kind))
        })
        .collect())
}

/// The CPU EP's own device: what a CPU-EP session is pinned to once a plugin is registered.
pub(crate) fn cpu_devices() -> Result<Vec<ort::device::Device<'static>>> {
    devices_of(Ep::Cpu.ort_name(), "CPU")
}

/// The plugin libraries given for this process: `given` (`--ep-plugin`), then those [`PLUGIN_ENV`] lists.
pub fn given(given: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = given.to_vec();
    if let Some(v) = std::env::var_os(PLUGIN_ENV) {
        out.extend(std::env::split_paths(&v).filter(|p| !p.as_os_str().is_empty()));
    }
    out
}

/// Where `ep`'s plugin package is looked for when none was given, in order: beside the loaded ONNX Runtime's package
/// (`site-packages/onnxruntime/capi/` → `site-packages/<package>/`), in the Python environment qdq was installed
/// into, in the release archive's `lib/`, and built from source in the checkout's `.ort/<ep>/` (where `cargo xtask
/// setup --openvino` puts it). Empty for an EP without a plugin package qdq knows.
pub fn known_places(ep: &Ep, ort_library: &Path) -> Vec<PathBuf> {
    let Some((package, file)) = ep.plugin_package() else { return Vec::new() };
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(site) = ort_library.parent().and_then(Path::parent).and_then(Path::parent) {
        dirs.push(site.join(package));
    }
    match Install::of(&std::env::current_exe().unwrap_or_default()) {
        Install::Python { site_packages, .. } => dirs.extend(site_packages.iter().map(|s| s.join(package))),
        Install::Archive { lib } => dirs.push(lib.join(package)),
        Install::Source => dirs.push(crate::library::workspace_root().join(".ort").join(ep.short_name()).join(package)),
        Install::Alone => {}
    }
    let mut out: Vec<PathBuf> = Vec::new();
    for file in dirs.into_iter().map(|d| crate::library::normalised(&d.join(file))) {
        if !out.contains(&file) {
            out.push(file);
        }
    }
    out
}

/// Makes `ep` available from a plugin: registers every library given (each must exist), then, while `ep` has no
/// device of its kind, the first of its [`known_places`] that exists. The plugin that provides it, or `None` (with
/// the places looked at) when none does.
pub(crate) fn provide(ep: &Ep, given_here: &[PathBuf], ort_library: &Path) -> Result<Result<PathBuf, Looked>> {
    let has = || -> Result<bool> { Ok(!devices_of(ep.ort_name(), ep.device_kind())?.is_empty()) };
    let mut looked = Looked::default();
    let known = known_places(ep, ort_library).into_iter().filter(|f| f.is_file());
    for file in given(given_here).into_iter().chain(known) {
        // A plugin given and also found by itself is registered (and named) once.
        let same = crate::library::normalised(&file);
        if looked.without_device.iter().any(|f| crate::library::normalised(f) == same) {
            continue;
        }
        register(&file, Some(ort_library))?;
        if has()? {
            return Ok(Ok(file));
        }
        looked.without_device.push(file);
    }
    looked.missing = known_places(ep, ort_library).into_iter().filter(|f| !f.is_file()).collect();
    Ok(Err(looked))
}

/// Where [`provide`] looked for an EP's plugin in vain: files that are not there, and plugins that registered but offer
/// no device of the EP's kind on this machine (OpenVINO's on a CPU it does not serve, say).
#[derive(Debug, Default)]
pub(crate) struct Looked {
    pub missing: Vec<PathBuf>,
    pub without_device: Vec<PathBuf>,
}
