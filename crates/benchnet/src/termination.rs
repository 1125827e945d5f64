//! Termination requests: SIGINT and SIGTERM turned into a flag that long-running loops poll, so that
//! they stop, release what they hold (an XDP link, a UMEM) and report, as xdpsock does on Ctrl-C.
//! The first signal only sets the flag; a second one removes this process's namespaces (see
//! [`crate::signals`]) and ends the process of that signal, so that a run stuck past its first Ctrl-C
//! still leaves nothing behind.
#![allow(unsafe_code)]

use std::io;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);
static INSTALLED: OnceLock<Result<(), i32>> = OnceLock::new();

extern "C" fn on_termination(_sig: libc::c_int) {
    // An atomic store is async-signal-safe.
    REQUESTED.store(true, Ordering::Relaxed);
    // So is sigaction: the next SIGINT or SIGTERM removes the namespaces and ends the process.
    crate::signals::arm_removal();
}

fn install() -> Result<(), i32> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `sigaction` is plain old data; all-zero is a valid starting value.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_termination as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: `action` is a valid sigaction whose handler only stores to an atomic; a null
        // old-action pointer is allowed.
        if unsafe { libc::sigaction(sig, &action, std::ptr::null_mut()) } != 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL));
        }
    }
    Ok(())
}

/// Installs (once per process) SIGINT and SIGTERM handlers that set a flag, and returns the flag.
/// The first signal only sets it; a second one removes this process's namespaces and terminates the
/// process the default way.
pub fn termination_flag() -> io::Result<&'static AtomicBool> {
    match INSTALLED.get_or_init(install) {
        Ok(()) => Ok(&REQUESTED),
        Err(errno) => Err(io::Error::from_raw_os_error(*errno)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigterm_sets_the_flag_and_arms_the_removal() {
        let flag = termination_flag().unwrap();
        assert!(!flag.load(Ordering::Relaxed));
        // SAFETY: raising a signal whose handler was installed above; it only stores to an atomic.
        unsafe { libc::raise(libc::SIGTERM) };
        assert!(flag.load(Ordering::Relaxed));
        let mut old: libc::sigaction = empty_action();
        // SAFETY: a null new action only reads the current disposition into `old`.
        let rc = unsafe { libc::sigaction(libc::SIGTERM, std::ptr::null(), &mut old) };
        assert_eq!(rc, 0);
        assert_eq!(
            old.sa_sigaction,
            crate::signals::removal_handler(),
            "the second signal removes the namespaces and ends the process"
        );
        // Leave SIGINT handled by the flag (the test harness is not interrupted here).
    }

    fn empty_action() -> libc::sigaction {
        // SAFETY: `sigaction` is plain old data; all-zero is a valid value.
        unsafe { std::mem::zeroed() }
    }
}
