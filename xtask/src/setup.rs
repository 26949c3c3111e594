//! `cargo xtask setup`: ONNX Runtime from its PyPI wheel, installed with pip into `.ort/<flavor>/`.
//!
//! The wheel is the only prebuilt ONNX Runtime reachable from a machine that sees just the package registries; `ort`'s
//! own download step fetches from elsewhere, so we load the library dynamically (`ort` feature `load-dynamic`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

pub use crate::flags::SetupArgs;
use crate::workspace::{root, run_cmd};

/// The ONNX Runtime release qdq is built and tested against (`ort` 2.0.0-rc.15 speaks its API 31).
pub const ORT_VERSION: &str = "1.31.1";
pub const LIBRARY_ENV: &str = "ORT_DYLIB_PATH";

/// Where a flavour is installed: `.ort/cpu` or `.ort/gpu`.
pub fn install_dir(gpu: bool) -> PathBuf {
    root().join(".ort").join(if gpu { "gpu" } else { "cpu" })
}

/// The versioned library file inside an install dir.
pub fn library_path(dir: &Path) -> PathBuf {
    dir.join("onnxruntime/capi").join(format!("libonnxruntime.so.{ORT_VERSION}"))
}

/// The version recorded in the installed wheel's metadata (`<pkg>-<version>.dist-info`).
fn installed_version(dir: &Path, package: &str) -> Option<String> {
    let prefix = format!("{}-", package.replace('-', "_"));
    std::fs::read_dir(dir).ok()?.filter_map(|e| e.ok()).find_map(|e| {
        let name = e.file_name().into_string().ok()?;
        name.strip_suffix(".dist-info")?.strip_prefix(&prefix).map(str::to_owned)
    })
}

pub fn python() -> Result<String> {
    for candidate in ["python3", "python"] {
        let ok = Command::new(candidate).args(["-m", "pip", "--version"]).output().is_ok_and(|o| o.status.success());
        if ok {
            return Ok(candidate.to_owned());
        }
    }
    bail!(
        "setup needs Python 3 with pip to fetch the {} wheel from PyPI (apt-get install python3-pip), or set \
         {LIBRARY_ENV} to an existing libonnxruntime.so {ORT_VERSION} and skip setup",
        "onnxruntime"
    )
}

/// Installs (once) and returns the path of the library to load; with `--openvino` / `--qnn`, those plugins too.
pub fn setup(args: &SetupArgs) -> Result<PathBuf> {
    let package = if args.gpu { "onnxruntime-gpu" } else { "onnxruntime" };
    let dir = install_dir(args.gpu);
    let lib =
        install_wheel(&Wheel { package, version: ORT_VERSION, dir: &dir, file: &library_path(&dir) }, args.force)?;
    if args.openvino {
        openvino(args.force)?;
    }
    if args.qnn {
        qnn(args.force)?;
    }
    Ok(lib)
}

/// Qualcomm's QNN plugin of ONNX Runtime (PyPI onnxruntime-qnn: the EP and QNN's backends; on x86-64 the HTP
/// backend emulates the NPU) in `.ort/qnn/`, where a qdq built from this checkout finds it by itself for `--ep qnn`.
pub const QNN_PLUGIN: &str = "onnxruntime-qnn";
pub const QNN_PLUGIN_VERSION: &str = "2.7.0";

/// Installs the QNN plugin (once) and returns its library's path.
pub fn qnn(force: bool) -> Result<PathBuf> {
    let dir = root().join(".ort/qnn");
    let file = dir.join("onnxruntime_qnn/libonnxruntime_providers_qnn.so");
    install_wheel(&Wheel { package: QNN_PLUGIN, version: QNN_PLUGIN_VERSION, dir: &dir, file: &file }, force)
}

/// The OpenVINO plugin of ONNX Runtime (PyPI onnxruntime-ep-openvino, OpenVINO bundled) in `.ort/openvino/`, where
/// a qdq built from this checkout finds it by itself for `--ep openvino`.
pub const OPENVINO_PLUGIN: &str = "onnxruntime-ep-openvino";
pub const OPENVINO_PLUGIN_VERSION: &str = "1.8.1";

/// Installs the OpenVINO plugin (once) and returns its library's path.
pub fn openvino(force: bool) -> Result<PathBuf> {
    let dir = root().join(".ort/openvino");
    let file = openvino_library(&dir);
    install_wheel(&Wheel { package: OPENVINO_PLUGIN, version: OPENVINO_PLUGIN_VERSION, dir: &dir, file: &file }, force)
}

/// The plugin library inside its install dir.
pub fn openvino_library(dir: &Path) -> PathBuf {
    dir.join("onnxruntime_ep_openvino/libonnxruntime_providers_openvino_plugin.so")
}

/// A wheel to install with pip into a folder of its own, and the file that must be there afterwards.
struct Wheel<'a> {
    package: &'a str,
    version: &'a str,
    dir: &'a Path,
    file: &'a Path,
}

/// Installs `w` (unless that version is there already, or `force`) and returns its file. pip installs into a fresh
/// staging dir, swapped in afterwards: an interrupted install never leaves a half-populated folder.
fn install_wheel(w: &Wheel<'_>, force: bool) -> Result<PathBuf> {
    let (package, version, dir) = (w.package, w.version, w.dir);
    let have = installed_version(dir, package);
    if !force && w.file.is_file() && have.as_deref() == Some(version) {
        eprintln!("xtask: {package} {version} already installed: {}", w.file.display());
        return Ok(w.file.to_path_buf());
    }
    if let Some(v) = &have {
        eprintln!("xtask: replacing {package} {v} in {} with {version}", dir.display());
    }
    let staging = dir.with_extension("staging");
    if staging.exists() {
        std::fs::remove_dir_all(&staging).with_context(|| format!("cannot remove {}", staging.display()))?;
    }
    eprintln!("xtask: installing {package}=={version} from PyPI into {}", dir.display());
    run_cmd(
        Command::new(python()?)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"])
            .args(["--target".as_ref(), staging.as_os_str(), format!("{package}=={version}").as_ref()]),
    )?;
    let staged = staging.join(w.file.strip_prefix(dir).unwrap_or(w.file));
    if !staged.is_file() {
        bail!("{package}=={version} installed, but {} is missing: the wheel's layout changed", staged.display());
    }
    match installed_version(&staging, package) {
        Some(v) if v == version => {}
        other => bail!("pip installed {package} {other:?} into {}, expected {version}", staging.display()),
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot remove old {}", dir.display()))?;
    }
    std::fs::rename(&staging, dir)
        .with_context(|| format!("cannot move {} to {}", staging.display(), dir.display()))?;
    eprintln!("xtask: {package} {version} ready: {}", w.file.display());
    Ok(w.file.to_path_buf())
}
