//! The output directory of a run that writes a set of files: checked before any work, marked while the run has not
//! finished, and gone again when the run stops before writing anything.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::signals;

/// The marker file of a run that has not finished.
pub const INCOMPLETE: &str = "INCOMPLETE";

/// An output directory a run fills. [`RunDir::open`] creates it (and missing parents) and writes [`INCOMPLETE`] in
/// it, which is also the check that files can be written there; [`RunDir::finish`] removes the marker. Dropped
/// unfinished (an error returned, a panic), the directory is put back as it was when nothing was written since it
/// was opened (directories the run made removed, the marker taken away from one that existed), else the marker
/// stays beside the files. A signal that ends the process (see [`signals`]) does the same from its handler, except
/// that a directory that existed keeps its marker.
///
/// ```
/// let tmp = tempfile::tempdir()?;
/// let out = tmp.path().join("run");
/// let dir = qdq_files::RunDir::open(&out, "the example")?;
/// assert!(out.join(qdq_files::INCOMPLETE).is_file());
/// std::fs::write(out.join("result.json"), "{}")?;
/// dir.finish()?;
/// assert!(!out.join(qdq_files::INCOMPLETE).exists() && out.join("result.json").is_file());
/// // Stopped before writing: nothing is left.
/// drop(qdq_files::RunDir::open(&tmp.path().join("other"), "the example")?);
/// assert!(!tmp.path().join("other").exists());
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct RunDir {
    dir: PathBuf,
    marker: PathBuf,
    /// Directories this run made, deepest first.
    created: Vec<PathBuf>,
    /// The marker's modification time: files touched at or after it were written by this run.
    since: Option<SystemTime>,
    finished: bool,
    _watching: signals::Watching,
}

impl RunDir {
    /// Creates `dir` if needed and marks it as holding an unfinished run of `what` (`qdq e2e`). Errors: a path on the
    /// way that is a file, a directory that cannot be created or written to (nothing made is left behind).
    pub fn open(dir: &Path, what: &str) -> io::Result<RunDir> {
        if let Some(file) = dir.ancestors().find(|a| a.exists()).filter(|a| !a.is_dir()) {
            let why = format!("{} is a file; give a directory for the outputs", file.display());
            return Err(io::Error::new(io::ErrorKind::InvalidInput, why));
        }
        let created: Vec<PathBuf> =
            dir.ancestors().take_while(|a| !a.as_os_str().is_empty() && !a.exists()).map(Path::to_path_buf).collect();
        let marker = dir.join(INCOMPLETE);
        let text = format!(
            "{what} writes its outputs here and has not finished: it is running, or an error or an interrupt stopped \
             it. The files here are not a whole run. A run that finishes removes this file.\n"
        );
        if let Err(e) = fs::create_dir_all(dir).and_then(|()| fs::write(&marker, &text)) {
            remove_dirs(&created);
            return Err(e);
        }
        let since = fs::metadata(&marker).and_then(|m| m.modified()).ok();
        let line = signals::signal_line().unwrap_or("interrupted");
        let first = signals::newline_first();
        let watch = signals::RunWatch {
            marker: marker.clone(),
            created: created.clone(),
            text,
            kept: format!("{first}{line}: {} holds an unfinished run ({INCOMPLETE} marks it)\n", dir.display()),
            removed: format!("{first}{line}: nothing was written; {} removed\n", dir.display()),
        };
        let watching = signals::watch_run(watch);
        Ok(RunDir { dir: dir.to_path_buf(), marker, created, since, finished: false, _watching: watching })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The run finished: its marker goes.
    pub fn finish(mut self) -> io::Result<()> {
        self.finished = true;
        match fs::remove_file(&self.marker) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// True when nothing in the directory but the marker was written since it was opened: no file modified at or
    /// after the marker (empty directories do not count).
    fn untouched(&self) -> bool {
        let Some(since) = self.since else { return false };
        let Ok(entries) = fs::read_dir(&self.dir) else { return false };
        entries.flatten().filter(|e| e.path() != self.marker).all(|e| !written(&e.path(), since, 4))
    }
}

/// True when a file under `path` was modified at or after `since` (or cannot be told, or lies deeper than `depth`).
fn written(path: &Path, since: SystemTime, depth: usize) -> bool {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            depth == 0
                || fs::read_dir(path).map_or(true, |es| es.flatten().any(|e| written(&e.path(), since, depth - 1)))
        }
        Ok(m) => m.modified().map_or(true, |t| t >= since),
        Err(_) => true,
    }
}

/// Removes the empty directories under `dir` made at or after `since`, deepest first (only empty ones: a directory
/// that holds anything stays).
fn remove_new_empty_dirs(dir: &Path, since: SystemTime) {
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(m) = fs::symlink_metadata(e.path()) else { continue };
        if m.is_dir() && m.modified().is_ok_and(|t| t >= since) {
            remove_new_empty_dirs(&e.path(), since);
            let _ = fs::remove_dir(e.path());
        }
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if self.finished || !self.untouched() {
            return;
        }
        if let Some(since) = self.since {
            remove_new_empty_dirs(&self.dir, since);
        }
        let _ = fs::remove_file(&self.marker);
        remove_dirs(&self.created);
    }
}

/// Removes the (empty) directories, deepest first, stopping at the first that will not go.
fn remove_dirs(dirs: &[PathBuf]) {
    for d in dirs {
        if fs::remove_dir(d).is_err() {
            break;
        }
    }
}
