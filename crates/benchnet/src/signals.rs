//! Removing this process's namespaces when SIGINT or SIGTERM ends it.
//!
//! A named namespace is a bind mount of the namespace file on `/run/netns/NAME`; once it is unmounted
//! and no task or descriptor refers to it, the kernel destroys the namespace and every interface in
//! it. `umount2` and `unlink` are async-signal-safe, so the handler can do the whole job itself: it
//! walks a fixed table of registered paths (no locks, no allocation), removes each, restores the
//! default action and re-raises the signal so that the process still dies of it.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::ptr;
use std::sync::Once;
use std::sync::atomic::{AtomicPtr, Ordering};

const SLOTS: usize = 256;
static PATHS: [AtomicPtr<libc::c_char>; SLOTS] = [const { AtomicPtr::new(ptr::null_mut()) }; SLOTS];
static INSTALL: Once = Once::new();

fn path_of(name: &str) -> CString {
    CString::new(format!("/run/netns/{name}")).expect("namespace names have no NUL")
}

/// Remembers namespace `name` for the signal handler, installing the handler on first use.
pub(crate) fn register(name: &str) {
    INSTALL.call_once(install);
    let raw = path_of(name).into_raw();
    for slot in &PATHS {
        if slot
            .compare_exchange(ptr::null_mut(), raw, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
    // Table full: the namespace is still removed on drop and by the sweeper; only Ctrl-C misses it.
    // SAFETY: `raw` came from `CString::into_raw` above and was not shared.
    drop(unsafe { CString::from_raw(raw) });
}

/// Forgets namespace `name` (it has been deleted). The path string is leaked, not freed: the handler
/// may be reading it concurrently, and a few bytes per namespace are cheap.
pub(crate) fn unregister(name: &str) {
    let wanted = path_of(name);
    for slot in &PATHS {
        let p = slot.load(Ordering::Acquire);
        // SAFETY: non-null slots hold pointers from `CString::into_raw` that are never freed.
        if !p.is_null() && unsafe { std::ffi::CStr::from_ptr(p) } == wanted.as_c_str() {
            slot.store(ptr::null_mut(), Ordering::Release);
            return;
        }
    }
}

extern "C" fn on_termination(sig: libc::c_int) {
    for slot in &PATHS {
        let p = slot.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: `p` is a NUL-terminated path that is never freed; umount2 and unlink are
            // async-signal-safe system calls.
            unsafe {
                libc::umount2(p, libc::MNT_DETACH);
                libc::unlink(p);
            }
        }
    }
    // SAFETY: restoring the default disposition and re-raising are async-signal-safe.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

fn install() {
    arm_removal();
}

/// The handler that removes the registered namespaces and ends the process of its signal.
pub(crate) fn removal_handler() -> libc::sighandler_t {
    on_termination as extern "C" fn(libc::c_int) as libc::sighandler_t
}

/// Makes SIGINT and SIGTERM remove the registered namespaces and end the process. Async-signal-safe
/// (only `sigemptyset` and `sigaction`): [`crate::termination_flag`]'s handler calls it on the first
/// signal, so that a second one ends the process without leaving namespaces behind.
pub(crate) fn arm_removal() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `sigaction` is plain old data; all-zero is a valid starting value.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = removal_handler();
        // SAFETY: `action` is a valid sigaction whose handler only makes async-signal-safe calls; a
        // null old-action pointer is allowed.
        unsafe {
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, ptr::null_mut());
        }
    }
}
