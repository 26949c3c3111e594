//! `cargo xtask setup`: ONNX Runtime from its PyPI wheel, installed with pip into `.ort/<flavor>/`.
//!
//! The wheel is the only prebuilt ONNX Runtime reachable from a machine that sees just the package registries; `ort`'s
//! own download step fetches from elsewhere, so we load the library dynamically (`ort` feature `load-dynamic`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

pub use crate::flags::SetupArgs;
use crate::{root, run_cmd};

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

/// Installs (once) and returns the path of the library to load.
pub fn setup(args: &SetupArgs) -> Result<PathBuf> {
    let package = if args.gpu { "onnxruntime-gpu" } else { "onnxruntime" };
    let dir = install_dir(args.gpu);
    let lib = library_path(&dir);
    let have = installed_version(&dir, package);
    if !args.force && lib.is_file() && have.as_deref() == Some(ORT_VERSION) {
        eprintln!("xtask: ONNX Runtime {ORT_VERSION} ({package}) already installed: {}", lib.display());
        return Ok(lib);
    }
    if let Some(v) = &have {
        eprintln!("xtask: replacing {package} {v} in {} with {ORT_VERSION}", dir.display());
    }
    // Install into a fresh staging dir, then swap it in: an interrupted install never leaves a half-populated .ort/.
    let staging = dir.with_extension("staging");
    if staging.exists() {
        std::fs::remove_dir_all(&staging).with_context(|| format!("cannot remove {}", staging.display()))?;
    }
    eprintln!("xtask: installing {package}=={ORT_VERSION} from PyPI into {}", dir.display());
    run_cmd(
        Command::new(python()?)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"])
            .args(["--target".as_ref(), staging.as_os_str(), format!("{package}=={ORT_VERSION}").as_ref()]),
    )?;
    let staged_lib = library_path(&staging);
    if !staged_lib.is_file() {
        bail!(
            "{package}=={ORT_VERSION} installed, but {} is missing: the wheel's layout changed",
            staged_lib.display()
        );
    }
    match installed_version(&staging, package) {
        Some(v) if v == ORT_VERSION => {}
        other => bail!("pip installed {package} {other:?} into {}, expected {ORT_VERSION}", staging.display()),
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("cannot remove old {}", dir.display()))?;
    }
    std::fs::rename(&staging, &dir)
        .with_context(|| format!("cannot move {} to {}", staging.display(), dir.display()))?;
    eprintln!("xtask: ONNX Runtime {ORT_VERSION} ready: {}", lib.display());
    Ok(lib)
}
