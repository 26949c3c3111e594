//! SIGINT and SIGTERM held while outputs are put in place.
//!
//! A commit is a few system calls, but one of them syncs data to disk (milliseconds), and a signal inside it could
//! otherwise end the process between two of them. [`defer_during_commits`] installs a handler for both signals:
//! outside a [`hold`] it ends the process at once, as the default action would (restoring the default and raising
//! the signal again, so the exit status still says "killed by SIGINT"); inside one it records the signal, and the
//! last [`Held`] to drop raises it. Libraries only [`hold`]; the binary decides whether to defer. SIGKILL cannot be
//! held; [`crate::AtomicFile`] keeps its window to one `linkat` for a new file.
//!
//! Scratch files that cannot be unnamed (a model ONNX Runtime must open by path) are [`remove_on_signal`]: when the
//! handler ends the process it removes them first, so Ctrl-C does not leave gigabytes in the temporary directory.
//!
//! The handler also says one line on stderr ([`say_on_signal`]), and settles an open [`crate::RunDir`]: removed when
//! the run made it and nothing is in it yet, else left with its marker, the line saying which.

/// Installs the deferring handler for SIGINT and SIGTERM (a no-op off Unix). Call once, early, from the binary.
pub fn defer_during_commits() {
    #[cfg(unix)]
    imp::install();
}

/// Holds SIGINT and SIGTERM (when [`defer_during_commits`] was called) until the returned guard and every other one
/// drop. Hold only around short, bounded work: committing outputs, not computing them.
#[must_use = "signals are held only while the guard lives"]
pub fn hold() -> Held {
    #[cfg(unix)]
    imp::HELD.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    Held(())
}

/// Removes `path` (a file, or an empty directory) if SIGINT or SIGTERM ends the process while the returned guard
/// lives ([`defer_during_commits`] installs the handler that does it; without it, nothing happens). Register a
/// directory before the files in it. At most 16 paths at once; past that the path is simply not registered.
pub fn remove_on_signal(path: &std::path::Path) -> Registered {
    #[cfg(unix)]
    return Registered(imp::register(path));
    #[cfg(not(unix))]
    Registered(None)
}

/// Sets the line said on stderr when SIGINT or SIGTERM ends the process (`qdq: interrupted`); a [`crate::RunDir`]
/// open at that moment adds what became of it. Without a call, nothing is said.
pub fn say_on_signal(line: &str) {
    let _ = LINE.set(line.to_owned());
    #[cfg(unix)]
    imp::set_line(&format!("{}{line}\n", newline_first()));
}

/// The line set by [`say_on_signal`], if any.
pub(crate) fn signal_line() -> Option<&'static str> {
    LINE.get().map(String::as_str)
}

static LINE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// A newline before a line said from the handler when stderr is a terminal (a progress bar may be mid-line).
pub(crate) fn newline_first() -> &'static str {
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) { "\n" } else { "" }
}

/// What the handler does with an open run directory ([`crate::RunDir`]): `marker` inside it; `created` the
/// directories the run made, deepest first (the run directory itself first when it made it); `text` the marker's
/// contents; `kept` and `removed` the lines to say.
pub(crate) struct RunWatch {
    pub marker: std::path::PathBuf,
    pub created: Vec<std::path::PathBuf>,
    pub text: String,
    pub kept: String,
    pub removed: String,
}

/// Watches a run directory until the guard drops: when a signal ends the process, the directories the run made are
/// removed if nothing but the marker is in them; otherwise the marker stays (written again if it was taken away).
/// One run directory is watched at a time: a run opened inside another (tune's calibration) is watched until its
/// guard drops, then the outer one again.
pub(crate) fn watch_run(watch: RunWatch) -> Watching {
    #[cfg(unix)]
    return Watching(imp::watch_run(watch));
    #[cfg(not(unix))]
    {
        drop(watch);
        Watching(0)
    }
}

/// The guard of [`watch_run`], holding the run watched before (as an address; 0: none).
pub(crate) struct Watching(usize);

impl Drop for Watching {
    fn drop(&mut self) {
        #[cfg(unix)]
        imp::unwatch_run(self.0);
    }
}

/// The guard of [`remove_on_signal`]: dropped, the path is no longer removed on a signal.
pub struct Registered(Option<usize>);

impl Drop for Registered {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(slot) = self.0 {
            imp::unregister(slot);
        }
    }
}

/// The guard of [`hold`]; a signal that arrived meanwhile takes effect when the last one drops.
pub struct Held(());

impl Drop for Held {
    fn drop(&mut self) {
        #[cfg(unix)]
        imp::release();
    }
}

#[cfg(unix)]
mod imp {
    use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicUsize, Ordering::SeqCst};

    /// Guards alive, over all threads.
    pub(super) static HELD: AtomicUsize = AtomicUsize::new(0);
    /// The signal that arrived while held (0: none).
    static PENDING: AtomicI32 = AtomicI32::new(0);

    /// Paths to remove when a signal ends the process: NUL-terminated strings, leaked on purpose (a handler may be
    /// reading one while its guard drops; a few per run), null when free.
    static SCRATCH: [AtomicPtr<libc::c_char>; 16] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 16];

    pub(super) fn register(path: &std::path::Path) -> Option<usize> {
        use std::os::unix::ffi::OsStrExt as _;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
        let ptr = c.into_raw();
        let slot = SCRATCH.iter().position(|s| s.compare_exchange(std::ptr::null_mut(), ptr, SeqCst, SeqCst).is_ok());
        if slot.is_none() {
            // SAFETY: `ptr` came from `into_raw` just above and was published nowhere.
            drop(unsafe { std::ffi::CString::from_raw(ptr) });
        }
        slot
    }

    pub(super) fn unregister(slot: usize) {
        SCRATCH[slot].store(std::ptr::null_mut(), SeqCst);
    }

    /// The line said when a signal ends the process (leaked; null: none).
    static LINE: AtomicPtr<Vec<u8>> = AtomicPtr::new(std::ptr::null_mut());

    pub(super) fn set_line(line: &str) {
        LINE.store(Box::into_raw(Box::new(line.as_bytes().to_vec())), SeqCst);
    }

    /// A run directory as the handler needs it: paths as C strings, texts as bytes (leaked; a few per run).
    struct Run {
        marker: std::ffi::CString,
        created: Vec<std::ffi::CString>,
        text: Vec<u8>,
        kept: Vec<u8>,
        removed: Vec<u8>,
    }

    static RUN: AtomicPtr<Run> = AtomicPtr::new(std::ptr::null_mut());

    /// Watches `w`; returns the run watched before (its address, 0: none).
    pub(super) fn watch_run(w: super::RunWatch) -> usize {
        use std::os::unix::ffi::OsStrExt as _;
        let c = |p: &std::path::Path| std::ffi::CString::new(p.as_os_str().as_bytes()).ok();
        let before = RUN.load(SeqCst) as usize;
        let Some(marker) = c(&w.marker) else { return before };
        let created = w.created.iter().filter_map(|d| c(d)).collect();
        let run = Run {
            marker,
            created,
            text: w.text.into_bytes(),
            kept: w.kept.into_bytes(),
            removed: w.removed.into_bytes(),
        };
        RUN.store(Box::into_raw(Box::new(run)), SeqCst);
        before
    }

    pub(super) fn unwatch_run(before: usize) {
        RUN.store(before as *mut Run, SeqCst);
    }

    /// Settles the watched run directory and returns the line to say. Async-signal-safe (unlink, rmdir, open, write,
    /// close).
    unsafe fn settle(r: &Run) -> &[u8] {
        // SAFETY: the strings are NUL-terminated and live for the process (leaked).
        unsafe {
            if !r.created.is_empty() {
                libc::unlink(r.marker.as_ptr());
                if libc::rmdir(r.created[0].as_ptr()) == 0 {
                    for d in &r.created[1..] {
                        if libc::rmdir(d.as_ptr()) != 0 {
                            break;
                        }
                    }
                    return &r.removed;
                }
            }
            let fd =
                libc::open(r.marker.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC, 0o644);
            if fd >= 0 {
                libc::write(fd, r.text.as_ptr().cast(), r.text.len());
                libc::close(fd);
            }
            &r.kept
        }
    }

    /// Removes the registered scratch files, settles the run directory and says so, then ends the process by `sig`
    /// with its default action. Async-signal-safe (unlink, rmdir, open, write, close, signal and raise only).
    fn die(sig: i32) {
        // SAFETY: each non-null slot points at a leaked NUL-terminated string that is never freed, RUN and LINE at
        // leaked values never freed; unlink, rmdir, open, write, close, signal and raise are async-signal-safe.
        unsafe {
            for s in &SCRATCH {
                let p = s.load(SeqCst);
                if !p.is_null() {
                    libc::unlink(p);
                }
            }
            for s in &SCRATCH {
                let p = s.load(SeqCst);
                if !p.is_null() {
                    libc::rmdir(p);
                }
            }
            // Then the run directory (its scratch files gone), and one line on stderr.
            let run = RUN.load(SeqCst);
            let line = LINE.load(SeqCst);
            let say: &[u8] = match (run.is_null(), line.is_null()) {
                (false, _) => settle(&*run),
                (true, false) => &*line,
                (true, true) => &[],
            };
            if !say.is_empty() {
                libc::write(2, say.as_ptr().cast(), say.len());
            }
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    }

    extern "C" fn on_signal(sig: libc::c_int) {
        // Record first, then look: a release that ran before this load sees the record (both are SeqCst).
        PENDING.store(sig, SeqCst);
        if HELD.load(SeqCst) == 0 {
            die(sig);
        }
    }

    pub(super) fn install() {
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: reading the current action into a zeroed struct, then a zeroed sigaction with our handler
            // (atomics, unlink, rmdir, signal and raise only) and an empty mask; SA_RESTART so the system calls a held
            // signal interrupts are resumed.
            unsafe {
                let mut current: libc::sigaction = std::mem::zeroed();
                libc::sigaction(sig, std::ptr::null(), &mut current);
                if current.sa_sigaction == libc::SIG_IGN {
                    // Started with the signal ignored (`nohup`, a background job of a script): it stays ignored.
                    continue;
                }
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
                action.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(sig, &action, std::ptr::null_mut());
            }
        }
    }

    pub(super) fn release() {
        if HELD.fetch_sub(1, SeqCst) == 1 {
            let sig = PENDING.load(SeqCst);
            if sig != 0 {
                die(sig);
            }
        }
    }
}
