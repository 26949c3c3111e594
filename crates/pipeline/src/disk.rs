//! Files in and out, with the error naming the file: bounded reads of regular files, atomic writes ([`files`]), and
//! the checks that an output can be written before any work starts.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::error::{Error, Result};

/// Writes `bytes` to `path` atomically ([`files::write_atomic`]; missing directories created): readers see the old
/// file or the whole new one, and a killed process leaves no temporary file behind.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let err = |e: std::io::Error| Error::Output { path: path.to_path_buf(), reason: e.to_string() };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(err)?;
    files::write_atomic(path, bytes).map_err(err)
}

/// Writes `value` as pretty JSON to `path`, atomically.
pub fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<()> {
    let json = serde_json::to_vec_pretty(value)
        .map_err(|e| Error::Output { path: path.to_path_buf(), reason: e.to_string() })?;
    write_atomic(path, &json)
}

/// Writes SQuAD predictions (question id -> answer text, sorted by id) as pretty JSON, atomically.
pub fn write_predictions(path: &Path, predictions: &HashMap<String, String>) -> Result<()> {
    let sorted: BTreeMap<&String, &String> = predictions.iter().collect();
    write_json(path, &sorted)
}

/// Opens the output directory `dir` (of option `flag`) of a run of `what` (`qdq e2e`) before any work
/// ([`files::RunDir`]): created, checked writable by its INCOMPLETE marker, which [`files::RunDir::finish`] removes;
/// an early error leaves it as it was (a directory the run made is gone again).
pub fn open_run_dir(dir: &Path, flag: &str, what: &str) -> Result<files::RunDir> {
    files::RunDir::open(dir, what)
        .map_err(|e| Error::Output { path: dir.to_path_buf(), reason: format!("{flag}: cannot write there: {e}") })
}

/// [`files::RunDir::finish`], the error naming the directory.
pub fn finish_run_dir(run: files::RunDir) -> Result<()> {
    let dir = run.path().to_path_buf();
    run.finish().map_err(|e| Error::Output { path: dir, reason: format!("removing its INCOMPLETE marker: {e}") })
}

/// Creates the output directory `dir` of option `flag`; a file already there is named as such.
pub fn create_out_dir(dir: &Path, flag: &str) -> Result<()> {
    let err = |reason: String| Error::Output { path: dir.to_path_buf(), reason: format!("{flag}: {reason}") };
    // The first existing ancestor that is not a directory (`--out results.json/run1`) is the one to name.
    if let Some(file) = dir.ancestors().find(|a| a.exists()).filter(|a| !a.is_dir()) {
        return Err(err(format!("{} is a file; give a directory for the outputs", file.display())));
    }
    std::fs::create_dir_all(dir).map_err(|e| err(e.to_string()))
}

/// Checks, before any work, that a file can be written at `path`: its directory exists and takes a new file (tried
/// with an unnamed temporary file that is discarded), and `path` is not a directory.
pub fn check_writable(path: &Path, flag: &str) -> Result<()> {
    let err = |reason: String| Error::Output { path: path.to_path_buf(), reason: format!("{flag}: {reason}") };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(err(format!("directory {} does not exist", dir.display())));
    }
    if path.is_dir() {
        return Err(err("is a directory".into()));
    }
    let probe = files::AtomicFile::create(path).map_err(|e| err(format!("cannot write: {e}")))?;
    probe.discard().map_err(|e| err(format!("cannot write: {e}")))
}

/// Opens `path` for reading if it is a regular file (a FIFO or a device would block or never end) of at most
/// [`files::MAX_INPUT_BYTES`].
pub fn open_regular(path: &Path) -> Result<std::fs::File> {
    files::open_regular(path, files::MAX_INPUT_BYTES)
        .map_err(|e| Error::Input { path: path.to_path_buf(), reason: e.to_string() })
}

/// The bytes of `path`, a regular file of at most [`files::MAX_INPUT_BYTES`] ([`files::read_regular`]).
pub fn read_bounded(path: &Path) -> Result<Vec<u8>> {
    files::read_regular(path, files::MAX_INPUT_BYTES)
        .map_err(|e| Error::Input { path: path.to_path_buf(), reason: e.to_string() })
}

/// The text of `path` ([`read_bounded`]; a UTF-8 byte-order mark dropped): a byte that is not UTF-8 is an error
/// naming the file, the byte's line and column, and `expected` (what the file should have been).
pub fn read_text(path: &Path, expected: &str) -> Result<String> {
    files::text(read_bounded(path)?).map_err(|e| Error::Input {
        path: path.to_path_buf(),
        reason: format!("not text (binary?): {e}; expected {expected}"),
    })
}

/// The directory `path` is in (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> &Path {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}
