//! The files a run reads, kept from its writes: a command names its inputs once ([`protect`]); from then on an
//! [`crate::AtomicFile`] whose destination is one of them (by path after symlinks, or by file identity: a hard link
//! is the same file under another name) is refused before a byte is written. Commands check their output flags
//! against their inputs up front with [`same_file`]; this is the last line behind those checks.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// One protected input: what the run calls it, the path it was given as, and an open handle on it (which is its
/// identity, and keeps its inode from being reused while the run lasts).
struct Input {
    what: String,
    given: PathBuf,
    handle: same_file::Handle,
}

static INPUTS: Mutex<Vec<Input>> = Mutex::new(Vec::new());

/// True when `a` and `b` both exist and are one file: the same path after symlinks, or hard links to one inode.
pub fn same_file(a: &Path, b: &Path) -> bool {
    same_file::is_same_file(a, b).unwrap_or(false)
}

/// Marks `path` (an existing file; a path that cannot be opened is ignored) as an input of this run, called `what`
/// in the refusal (`--dataset`, `the model's external data`).
pub fn protect(path: &Path, what: &str) {
    let Ok(handle) = same_file::Handle::from_path(path) else { return };
    let mut inputs = INPUTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !inputs.iter().any(|i| i.handle == handle) {
        inputs.push(Input { what: what.to_owned(), given: path.to_path_buf(), handle });
    }
}

/// Forgets every protected input (a process that runs several commands, such as a test, starts each clean).
pub fn unprotect_all() {
    INPUTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
}

/// The refusal for writing `dest` when it is a protected input: an `InvalidInput` error naming the input.
pub(crate) fn check_dest(dest: &Path) -> io::Result<()> {
    let Ok(handle) = same_file::Handle::from_path(dest) else { return Ok(()) };
    let inputs = INPUTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    match inputs.iter().find(|i| i.handle == handle) {
        Some(i) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("is {} ({}), which this run reads; qdq does not write over its inputs", i.what, i.given.display()),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_protected_input_is_not_written_under_any_of_its_names() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("dev.json");
        std::fs::write(&input, "{}").unwrap();
        let linked = dir.path().join("hard.json");
        std::fs::hard_link(&input, &linked).unwrap();
        let other = dir.path().join("other.json");
        std::fs::write(&other, "x").unwrap();
        assert!(same_file(&input, &linked) && !same_file(&input, &other));
        assert!(!same_file(&input, &dir.path().join("missing")));
        protect(&input, "--dataset");
        for dest in [&input, &linked, &dir.path().join(".").join("dev.json")] {
            let e = crate::write_atomic(dest, b"predictions").unwrap_err();
            assert!(e.to_string().contains("--dataset") && e.to_string().contains("dev.json"), "{e}");
        }
        crate::write_atomic(&other, b"y").unwrap();
        assert_eq!(std::fs::read(&input).unwrap(), b"{}");
        unprotect_all();
        crate::write_atomic(&input, b"z").unwrap();
        assert_eq!(std::fs::read(&input).unwrap(), b"z");
    }
}
