//! Files in and out, the same way in every qdq crate.
//!
//! - **Reading**: an input read whole (a dataset, a vocabulary, a range table, a config) must be a regular file of at
//!   most a stated size. A FIFO would block forever and `/dev/zero` would be read until memory runs out;
//!   [`read_regular`] refuses both before reading a byte.
//! - **Writing**: every output is an [`AtomicFile`]: written to an unnamed temporary file in the destination's
//!   directory and linked into place whole on [`AtomicFile::commit`]. Readers see the old file or the whole new one;
//!   a process that dies before the commit leaves nothing (the kernel frees an unnamed file with its last
//!   descriptor); a file that does not exist yet is linked straight to its name, so even `kill -9` during the
//!   commit cannot leave a temporary name behind.
//! - **Signals**: once the binary calls [`signals::defer_during_commits`], SIGINT and SIGTERM that arrive while a
//!   commit (or a [`signals::hold`], e.g. a set of outputs committed together) is in flight take effect right after
//!   it, with their usual meaning (the process ends as killed by that signal). Without it, the defaults apply.
//!
//! ```
//! use std::io::Write as _;
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("out.json");
//! let mut out = qdq_files::AtomicFile::create(&path)?;
//! out.write_all(b"{}")?;
//! assert!(!path.exists()); // nothing under the name until the commit
//! out.commit()?;
//! assert_eq!(qdq_files::read_regular(&path, 1 << 20)?, b"{}");
//! // A device is not an input file: refused up front, not read until memory runs out.
//! # #[cfg(unix)]
//! assert!(qdq_files::read_regular(std::path::Path::new("/dev/zero"), 1 << 20).is_err());
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! - **Inputs are never outputs**: a command names the files it reads ([`protect`]); an `AtomicFile` whose
//!   destination is one of them, by any name (a symlink, a hard link), is refused before a byte is written.
//! - **Text as users write it**: [`text`] / [`read_text`] take UTF-8 with or without a byte-order mark and name a
//!   byte that is not UTF-8 by its line and column; CRLF line ends are left to `str::lines`, which takes both.
//!
//! What it offers the crates that use it: `read_regular` / `open_regular` (with a limit; `MAX_INPUT_BYTES` by default),
//! `read_text` / `text`, `protect` / `same_file`, `AtomicFile` (`create`, `Write`, `commit`, `discard`), `write_atomic`, `what_it_is` (a path that is not a regular
//! file, in words), `RunDir` (a run's output directory: opened before any work by writing its `INCOMPLETE` marker,
//! finished by removing it, put back as it was when dropped before anything was written),
//! `signals::{defer_during_commits, hold, remove_on_signal, say_on_signal}` (the handler also settles an open `RunDir`
//! and says one line). Its lib.rs doctest writes and reads a file; `RunDir`'s doctest opens, finishes and drops one.

use std::fs::File;
use std::io::{self, BufWriter, Read as _, Write};
use std::path::{Path, PathBuf};

mod inputs;
mod run_dir;
pub mod signals;
mod text;

pub use inputs::{protect, same_file, unprotect_all};
pub use run_dir::{INCOMPLETE, RunDir};
pub use text::{NotText, read_text, text};

/// Largest input file read whole unless a reader states its own limit (a dataset, a vocabulary, a config, arrays):
/// 4 GiB.
pub const MAX_INPUT_BYTES: u64 = 4 << 30;

/// Opens `path` for reading if it is a regular file of at most `limit` bytes; otherwise an `InvalidInput` error
/// saying what it is (the caller names the file).
pub fn open_regular(path: &Path, limit: u64) -> io::Result<File> {
    let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
    let file = File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(invalid(format!("{}, not a regular file", what_it_is(&meta))));
    }
    if meta.len() > limit {
        return Err(invalid(format!("{} bytes, more than the {limit} read as one input", meta.len())));
    }
    Ok(file)
}

/// What a path that is not a regular file is, in words (`a directory`, `a pipe (FIFO)`), for an error that says why
/// it cannot be read as a file.
pub fn what_it_is(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        if t.is_fifo() {
            return "a pipe (FIFO)";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_char_device() || t.is_block_device() {
            return "a device";
        }
    }
    "not a file"
}

/// The bytes of `path`, read through [`open_regular`]; a file that grows while it is read stops at `limit`.
pub fn read_regular(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let file = open_regular(path, limit)?;
    let len = file.metadata()?.len();
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(limit).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// An output file written atomically: buffered into an unnamed temporary file beside the destination (mode from the
/// umask) and put in place whole by [`AtomicFile::commit`]. Dropped without a commit, nothing appears and nothing is
/// left behind.
pub struct AtomicFile {
    dest: PathBuf,
    writer: BufWriter<atomic_write_file::AtomicWriteFile>,
}

impl AtomicFile {
    /// Starts the output `dest`; fails at once when its directory does not take a new file, or when `dest` is an
    /// input of this run ([`protect`]).
    pub fn create(dest: impl AsRef<Path>) -> io::Result<Self> {
        let dest = dest.as_ref().to_path_buf();
        inputs::check_dest(&dest)?;
        let file = atomic_write_file::AtomicWriteFile::options().open(&dest)?;
        Ok(AtomicFile { dest, writer: BufWriter::with_capacity(1 << 20, file) })
    }

    /// The destination path.
    pub fn path(&self) -> &Path {
        &self.dest
    }

    /// Syncs the data and puts the file in place, with SIGINT and SIGTERM held until it is done
    /// ([`signals::hold`]): a file that does not exist yet is linked straight to its name; one that exists is replaced
    /// by a rename.
    pub fn commit(self) -> io::Result<()> {
        let file = self.writer.into_inner().map_err(io::IntoInnerError::into_error)?;
        let _held = signals::hold();
        #[cfg(target_os = "linux")]
        if link_new(&file, &self.dest)? {
            return file.discard();
        }
        // atomic-write-file syncs the data itself before its rename.
        file.commit()
    }

    /// Drops the output: nothing appears under its name.
    pub fn discard(self) -> io::Result<()> {
        let file = self.writer.into_inner().map_err(io::IntoInnerError::into_error)?;
        file.discard()
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.writer.write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.writer.write_all(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.writer.flush()
    }
}

/// Syncs the temporary file and links it to `dest` if no file is there: one `linkat`, so there is no moment at which the
/// file exists under another name. `Ok(false)` when that cannot be done here (the name exists, no `/proc`, a
/// filesystem without it): the caller falls back to the rename.
#[cfg(target_os = "linux")]
fn link_new(file: &atomic_write_file::AtomicWriteFile, dest: &Path) -> io::Result<bool> {
    use std::ffi::CString;
    use std::os::fd::AsRawFd as _;
    use std::os::unix::ffi::OsStrExt as _;

    if std::fs::symlink_metadata(dest).is_ok() {
        return Ok(false);
    }
    // The data is durable before the name appears.
    file.sync_all()?;
    let (Ok(src), Ok(dst)) =
        (CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())), CString::new(dest.as_os_str().as_bytes()))
    else {
        return Ok(false);
    };
    // SAFETY: two NUL-terminated paths that live across the call; linkat only reads them.
    let linked =
        unsafe { libc::linkat(libc::AT_FDCWD, src.as_ptr(), libc::AT_FDCWD, dst.as_ptr(), libc::AT_SYMLINK_FOLLOW) };
    if linked != 0 {
        return Ok(false);
    }
    // The new name is durable once its directory is.
    let dir = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()?;
    Ok(true)
}

/// Writes `bytes` to `path` through an [`AtomicFile`].
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = AtomicFile::create(path)?;
    file.write_all(bytes)?;
    file.commit()
}
