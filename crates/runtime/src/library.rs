//! Finding and loading the ONNX Runtime shared library.

use std::ffi::{CStr, c_char, c_int};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::{Error, Result};

/// Environment variable naming the ONNX Runtime library to load (the same one `ort` documents).
pub const LIBRARY_ENV: &str = "ORT_DYLIB_PATH";

/// What was loaded: where from, its version, and the execution providers compiled into it.
#[derive(Debug, Clone)]
pub struct OrtInfo {
    pub path: PathBuf,
    pub version: String,
    pub providers: Vec<String>,
}

struct Loaded {
    info: OrtInfo,
    env: ort::environment::Environment,
}

static LOADED: OnceLock<std::result::Result<Loaded, String>> = OnceLock::new();

/// The workspace this crate was built in; `cargo xtask setup` installs ONNX Runtime below it, in `.ort/`.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The first file in `dir` whose name starts with `libonnxruntime.so` (or the platform's equivalent).
fn library_in(dir: &Path) -> Option<PathBuf> {
    let prefix = format!("{}onnxruntime{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX);
    let mut hits: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix)))
        .collect();
    // Prefer the fully versioned file (libonnxruntime.so.1.31.1) over symlinks, deterministically.
    hits.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    hits.into_iter().next()
}

/// Where ONNX Runtime will be loaded from, in this order:
/// 1. `explicit` (a `--ort-lib` flag),
/// 2. the `ORT_DYLIB_PATH` environment variable,
/// 3. the copy `cargo xtask setup` installed in the workspace (`.ort/gpu` before `.ort/cpu`),
/// 4. a `libonnxruntime.so*` next to the running executable.
///
/// A path given explicitly or by the environment must exist; it is never silently skipped.
pub fn locate_library(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return existing(p, "the --ort-lib option");
    }
    if let Some(p) = std::env::var_os(LIBRARY_ENV).filter(|v| !v.is_empty()) {
        return existing(Path::new(&p), LIBRARY_ENV);
    }
    let mut searched = vec![format!("{LIBRARY_ENV} unset")];
    for flavor in ["gpu", "cpu"] {
        let dir = workspace_root().join(".ort").join(flavor).join("onnxruntime/capi");
        if let Some(lib) = library_in(&dir) {
            return Ok(absolute(&lib));
        }
        searched.push(dir.display().to_string());
    }
    if let Some(dir) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf)) {
        if let Some(lib) = library_in(&dir) {
            return Ok(absolute(&lib));
        }
        searched.push(dir.display().to_string());
    }
    Err(Error::LibraryNotFound { searched: format!("looked at {}", searched.join(", ")) })
}

fn existing(p: &Path, source: &str) -> Result<PathBuf> {
    if p.is_file() {
        Ok(absolute(p))
    } else {
        Err(Error::LibraryNotFound { searched: format!("{} (from {source}) is not a file", p.display()) })
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Loads ONNX Runtime once per process (later calls return the first result) and reports what it provides.
pub fn init(explicit: Option<&Path>) -> Result<OrtInfo> {
    let loaded = LOADED.get_or_init(|| load(explicit).map_err(|e| e.to_string()));
    match loaded {
        Ok(l) => Ok(l.info.clone()),
        Err(msg) => Err(Error::LibraryLoad { path: PathBuf::from("ONNX Runtime"), reason: msg.clone() }),
    }
}

fn load(explicit: Option<&Path>) -> Result<Loaded> {
    let path = locate_library(explicit)?;
    let builder =
        ort::init_from(&path).map_err(|e| Error::LibraryLoad { path: path.clone(), reason: e.to_string() })?;
    let env = builder
        .with_name("qdq")
        .build()
        .map_err(|e| Error::LibraryLoad { path: path.clone(), reason: e.to_string() })?;
    let providers = query_providers().map_err(|reason| Error::LibraryLoad { path: path.clone(), reason })?;
    let version = version_string(&path).unwrap_or_else(|_| version_from_build_info(ort::info()));
    Ok(Loaded { info: OrtInfo { path, version, providers }, env })
}

/// The library's own version string (`OrtGetApiBase()->GetVersionString()`, e.g. "1.31.1"). The library is already
/// loaded by `ort`, so this only takes another reference to it.
fn version_string(path: &Path) -> std::result::Result<String, String> {
    // SAFETY: the library was loaded and initialised successfully by ort::init_from just before; loading it again
    // returns the same handle and runs no new initialisers. OrtGetApiBase has this signature in every release.
    unsafe {
        let lib = libloading::Library::new(path).map_err(|e| e.to_string())?;
        let get_base: libloading::Symbol<'_, unsafe extern "C" fn() -> *const ort::sys::OrtApiBase> =
            lib.get(b"OrtGetApiBase").map_err(|e| e.to_string())?;
        let base = get_base();
        if base.is_null() {
            return Err("OrtGetApiBase returned null".into());
        }
        let v = ((*base).GetVersionString)();
        if v.is_null() {
            return Err("GetVersionString returned null".into());
        }
        Ok(CStr::from_ptr(v).to_string_lossy().into_owned())
    }
}

/// Fallback when the version string is unreadable: `ort::info()` reads like "ORT Build Info: git-branch=rel-1.31.1, git-commit-id=...".
fn version_from_build_info(info: &str) -> String {
    info.split([',', ' '])
        .find_map(|part| part.strip_prefix("git-branch=rel-"))
        .map(str::to_owned)
        .unwrap_or_else(|| info.to_owned())
}

pub(crate) fn environment() -> Result<&'static ort::environment::Environment> {
    match LOADED.get() {
        Some(Ok(l)) => Ok(&l.env),
        Some(Err(msg)) => Err(Error::LibraryLoad { path: PathBuf::from("ONNX Runtime"), reason: msg.clone() }),
        None => init(None).and_then(|_| environment()),
    }
}

/// The execution providers compiled into the loaded library (e.g. `CPUExecutionProvider`).
pub fn available_providers() -> Result<Vec<String>> {
    init(None).map(|i| i.providers)
}

fn query_providers() -> std::result::Result<Vec<String>, String> {
    let api = ort::api();
    let mut list: *mut *mut c_char = std::ptr::null_mut();
    let mut len: c_int = 0;
    // SAFETY: the API table comes from the loaded library; the out-pointers are valid for writes.
    let status = unsafe { (api.GetAvailableProviders)(&mut list, &mut len) };
    status_to_result(api, status)?;
    if list.is_null() {
        return Ok(Vec::new());
    }
    let mut names = Vec::with_capacity(len.max(0) as usize);
    for i in 0..len.max(0) as usize {
        // SAFETY: ORT returned `len` valid NUL-terminated strings.
        let name = unsafe { CStr::from_ptr(*list.add(i)) };
        names.push(name.to_string_lossy().into_owned());
    }
    // SAFETY: releasing exactly what GetAvailableProviders returned.
    let status = unsafe { (api.ReleaseAvailableProviders)(list, len) };
    status_to_result(api, status)?;
    Ok(names)
}

fn status_to_result(api: &ort::sys::OrtApi, status: ort::sys::OrtStatusPtr) -> std::result::Result<(), String> {
    if status.0.is_null() {
        return Ok(());
    }
    // SAFETY: a non-null status carries a message; we release it after copying.
    let msg = unsafe { CStr::from_ptr((api.GetErrorMessage)(status.0)) }.to_string_lossy().into_owned();
    unsafe { (api.ReleaseStatus)(status.0) };
    Err(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_parsed_from_build_info() {
        assert_eq!(version_from_build_info("ORT Build Info: git-branch=rel-1.31.1, git-commit-id=abc"), "1.31.1");
        assert_eq!(version_from_build_info("weird"), "weird");
    }

    #[test]
    fn explicit_missing_path_is_a_clear_error() {
        let err = locate_library(Some(Path::new("/nonexistent/libonnxruntime.so"))).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("/nonexistent/libonnxruntime.so"), "{msg}");
        assert!(msg.contains("cargo xtask setup"), "{msg}");
    }

    #[test]
    fn library_in_prefers_the_versioned_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("libonnxruntime.so"), b"").unwrap();
        std::fs::write(dir.path().join("libonnxruntime.so.1.31.1"), b"").unwrap();
        std::fs::write(dir.path().join("libother.so"), b"").unwrap();
        assert_eq!(library_in(dir.path()).unwrap(), dir.path().join("libonnxruntime.so.1.31.1"));
        assert!(library_in(&dir.path().join("missing")).is_none());
    }
}
