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

    /// Removes the registered scratch files, then ends the process by `sig` with its default action.
    /// Async-signal-safe (unlink, rmdir, signal and raise only).
    fn die(sig: i32) {
        // SAFETY: each non-null slot points at a leaked NUL-terminated string that is never freed; unlink, rmdir,
        // signal and raise are async-signal-safe.
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
