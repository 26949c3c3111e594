//! SIGINT and SIGTERM held while outputs are put in place.
//!
//! A commit is a few system calls, but one of them syncs data to disk (milliseconds), and a signal inside it could
//! otherwise end the process between two of them. [`defer_during_commits`] installs a handler for both signals:
//! outside a [`hold`] it ends the process at once, as the default action would (restoring the default and raising
//! the signal again, so the exit status still says "killed by SIGINT"); inside one it records the signal, and the
//! last [`Held`] to drop raises it. Libraries only [`hold`]; the binary decides whether to defer. SIGKILL cannot be
//! held; [`crate::AtomicFile`] keeps its window to one `linkat` for a new file.

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
    use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering::SeqCst};

    /// Guards alive, over all threads.
    pub(super) static HELD: AtomicUsize = AtomicUsize::new(0);
    /// The signal that arrived while held (0: none).
    static PENDING: AtomicI32 = AtomicI32::new(0);

    /// Ends the process by `sig` with its default action. Async-signal-safe (signal and raise only).
    fn die(sig: i32) {
        // SAFETY: restoring a signal's default disposition and raising it are async-signal-safe and touch no memory
        // of ours.
        unsafe {
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
            // SAFETY: reading the current action into a zeroed struct, then a zeroed sigaction with our handler (atomics, signal and raise only) and an empty mask;
            // SA_RESTART so the syscalls a held signal interrupts are resumed.
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
