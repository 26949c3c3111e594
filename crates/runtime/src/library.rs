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
pub(crate) fn workspace_root() -> PathBuf {
    normalised(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

/// `p` with `.` and `..` taken out lexically (the folder need not exist), so a message shows each place once, as a
/// user would type it.
pub(crate) fn normalised(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if out.file_name().is_some() => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
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

/// How the running binary was installed, told from where it sits: what decides where ONNX Runtime is looked for
/// and how the not-found message says to get it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Install {
    /// `pip install` of the wheel: the binary in `<prefix>/bin`, the environment's packages in
    /// `<prefix>/lib/python3.*/site-packages` (a venv, the system, `pip install --user`'s `~/.local`).
    Python { prefix: PathBuf, site_packages: Vec<PathBuf> },
    /// The release archive: `bin/qdq` beside `lib/` holding ONNX Runtime.
    Archive { lib: PathBuf },
    /// Built in a checkout on this machine (`target/release/qdq`, `target/debug/qdq`, `cargo install`ed from one).
    Source,
    /// A binary on its own (copied from somewhere else).
    Alone,
}

impl Install {
    /// Tells how the binary at `exe` was installed.
    pub fn of(exe: &Path) -> Install {
        let bin = exe.parent().unwrap_or(Path::new("."));
        let prefix = bin.parent().unwrap_or(Path::new("/")).to_path_buf();
        let site_packages = python_site_packages(&prefix);
        if bin.file_name().is_some_and(|n| n == "bin") && !site_packages.is_empty() {
            return Install::Python { prefix, site_packages };
        }
        if bin.file_name().is_some_and(|n| n == "bin") && prefix.join("lib").is_dir() {
            return Install::Archive { lib: prefix.join("lib") };
        }
        if workspace_root().join("Cargo.toml").is_file() { Install::Source } else { Install::Alone }
    }

    /// Where ONNX Runtime is looked for, in order, for this installation.
    fn places(&self, exe_dir: &Path) -> Vec<PathBuf> {
        let mut places = match self {
            Install::Python { site_packages, .. } => site_packages.iter().map(|s| s.join("onnxruntime/capi")).collect(),
            Install::Archive { lib } => vec![lib.clone()],
            Install::Source | Install::Alone => Vec::new(),
        };
        places.push(exe_dir.to_path_buf());
        let root = workspace_root();
        if *self == Install::Source {
            // The checkout a binary built from source came from, on this machine: the copies `cargo xtask setup`
            // installs. An installed binary keeps to its own installation's.
            places.extend(["gpu", "cpu"].map(|flavor| root.join(".ort").join(flavor).join("onnxruntime/capi")));
        }
        places
    }

    /// How to get ONNX Runtime for this installation.
    fn advice(&self) -> String {
        let version = crate::ORT_VERSION;
        match self {
            Install::Python { prefix, .. } => format!(
                "qdq was installed with pip: install ONNX Runtime into the same environment (`{} -m pip install \
                 onnxruntime=={version}`, or onnxruntime-gpu=={version} for CUDA and TensorRT), or set {LIBRARY_ENV} \
                 to a libonnxruntime.so {version}",
                prefix.join("bin/python").display()
            ),
            Install::Archive { lib } => format!(
                "qdq runs from a release archive whose {} lacks libonnxruntime.so: unpack the whole archive, or set \
                 {LIBRARY_ENV} to a libonnxruntime.so {version}",
                lib.display()
            ),
            Install::Source => format!(
                "Run `cargo xtask setup` (or `cargo xtask setup --gpu`) in the qdq checkout {}, or set {LIBRARY_ENV} to \
                 a libonnxruntime.so {version}",
                workspace_root().display()
            ),
            Install::Alone => format!(
                "Put libonnxruntime.so.{version} beside qdq or set {LIBRARY_ENV} to it (`pip install \
                 onnxruntime=={version}` has it in site-packages/onnxruntime/capi/), or install qdq with pip, which \
                 brings ONNX Runtime"
            ),
        }
    }
}

/// The `lib/python3.*/site-packages` folders under `prefix`.
fn python_site_packages(prefix: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else { return Vec::new() };
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("python3")))
        .map(|p| p.join("site-packages"))
        .filter(|p| p.is_dir())
        .collect();
    found.sort();
    found
}

/// Where ONNX Runtime will be loaded from, in this order:
/// 1. `explicit` (a `--ort-lib` flag),
/// 2. the `ORT_DYLIB_PATH` environment variable,
/// 3. where the way qdq was installed puts it ([`Install`]): the Python environment's onnxruntime package, or the
///    release archive's `lib/`,
/// 4. a `libonnxruntime.so*` next to the running executable,
/// 5. built from source, the copy `cargo xtask setup` installed in the checkout qdq was built in (`.ort/gpu` before
///    `.ort/cpu`).
///
/// A path given explicitly or by the environment must exist; it is never silently skipped. Not found, the error lists
/// every place looked at, once, and says how to get ONNX Runtime for the way qdq was installed.
pub fn locate_library(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return existing(p, "the --ort-lib option");
    }
    if let Some(p) = std::env::var_os(LIBRARY_ENV).filter(|v| !v.is_empty()) {
        return existing(Path::new(&p), LIBRARY_ENV);
    }
    let exe = std::env::current_exe().map(|e| absolute(&e)).unwrap_or_default();
    find_for(&exe)
}

/// The library for the binary at `exe`, from where its installation keeps one ([`Install::places`]).
fn find_for(exe: &Path) -> Result<PathBuf> {
    let install = Install::of(exe);
    let places = install.places(exe.parent().unwrap_or(Path::new(".")));
    let mut searched: Vec<String> = Vec::new();
    for dir in &places {
        if let Some(lib) = library_in(dir) {
            return Ok(absolute(&lib));
        }
        let shown = normalised(dir).display().to_string();
        if !searched.contains(&shown) {
            searched.push(shown);
        }
    }
    Err(Error::LibraryNotFound {
        searched: format!("{LIBRARY_ENV} is unset and none of {} holds libonnxruntime.so", searched.join(", ")),
        advice: install.advice(),
    })
}

fn existing(p: &Path, source: &str) -> Result<PathBuf> {
    if p.is_file() {
        Ok(absolute(p))
    } else {
        Err(Error::LibraryNotFound {
            searched: format!("{} (from {source}) is not a file", p.display()),
            advice: Install::of(&std::env::current_exe().unwrap_or_default()).advice(),
        })
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Loads ONNX Runtime once per process (later calls return the first result) and reports what it provides.
pub fn init(explicit: Option<&Path>) -> Result<OrtInfo> {
    let mut first = None;
    let loaded = LOADED.get_or_init(|| {
        load(explicit).map_err(|e| {
            let said = e.to_string();
            first = Some(e);
            said
        })
    });
    match (loaded, first) {
        (Ok(l), _) => Ok(l.info.clone()),
        (Err(_), Some(e)) => Err(e),
        (Err(said), None) => Err(Error::Unavailable(said.clone())),
    }
}

/// An error and its causes, in one line (libloading says "dlopen failed" and keeps the loader's words in its source).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut said = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !said.contains(&text) {
            said.push_str(": ");
            said.push_str(&text);
        }
        cause = c.source();
    }
    said
}

fn load(explicit: Option<&Path>) -> Result<Loaded> {
    let path = locate_library(explicit)?;
    // The loader's own words first (a missing dependency, a wrong architecture, not a library at all): `ort` reports
    // only that loading failed.
    // SAFETY: loading the library runs its initialisers, as ort::init_from does right after; nothing else is called.
    unsafe { libloading::Library::new(&path) }
        .map_err(|e| Error::LibraryLoad { path: path.clone(), reason: with_causes(&e) })?;
    let builder = ort::init_from(&path).map_err(|e| {
        let mut reason = e.to_string();
        if reason.contains("not compatible") {
            // An older release (an OpenVINO build of ONNX Runtime serves API 24): say what to use instead.
            reason.push_str(&format!(
                ". qdq needs ONNX Runtime {} or newer (the PyPI onnxruntime wheel); OpenVINO runs in it as a plugin \
                 EP (onnxruntime-ep-openvino: `cargo xtask setup --openvino`)",
                crate::ORT_VERSION
            ));
        }
        Error::LibraryLoad { path: path.clone(), reason }
    })?;
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
        Some(Err(msg)) => Err(Error::Unavailable(msg.clone())),
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

    /// A binary `pip install` put in a venv's bin/ finds the onnxruntime package of that venv; one from the release
    /// archive finds the archive's lib/; found nowhere, the error names every place once (no `..`) and says how to
    /// install for that way of installing.
    #[test]
    fn each_installation_finds_its_own_onnxruntime_or_says_how_to_get_it() {
        let dir = tempfile::tempdir().unwrap();
        let venv = dir.path().join("venv");
        let capi = venv.join("lib/python3.11/site-packages/onnxruntime/capi");
        std::fs::create_dir_all(&capi).unwrap();
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        let exe = venv.join("bin/qdq");
        assert!(matches!(Install::of(&exe), Install::Python { .. }));
        let e = find_for(&exe).unwrap_err().to_string();
        assert!(e.contains(capi.to_str().unwrap()) && e.contains("python -m pip install onnxruntime==1.31.1"), "{e}");
        assert_eq!(e.matches(capi.to_str().unwrap()).count(), 1, "{e}");
        std::fs::write(capi.join("libonnxruntime.so.1.31.1"), b"").unwrap();
        assert_eq!(find_for(&exe).unwrap(), absolute(&capi.join("libonnxruntime.so.1.31.1")));

        let archive = dir.path().join("qdq-0.1.0");
        std::fs::create_dir_all(archive.join("bin")).unwrap();
        std::fs::create_dir_all(archive.join("lib")).unwrap();
        let exe = archive.join("bin/qdq");
        assert!(matches!(Install::of(&exe), Install::Archive { .. }));
        let e = find_for(&exe).unwrap_err().to_string();
        assert!(e.contains("unpack the whole archive") && !e.contains(".."), "{e}");
        std::fs::write(archive.join("lib/libonnxruntime.so.1.31.1"), b"").unwrap();
        assert!(find_for(&exe).unwrap().starts_with(absolute(&archive.join("lib"))));

        let elsewhere = dir.path().join("target/release/qdq");
        assert_eq!(Install::of(&elsewhere), Install::Source);
        assert_eq!(normalised(Path::new("/a/crates/runtime/../../.ort")), Path::new("/a/.ort"));
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
