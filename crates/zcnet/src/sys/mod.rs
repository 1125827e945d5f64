//! The kernel boundary: every `unsafe` system call and every kernel UAPI definition that `libc` lacks.
//!
//! # Contract for the modules above
//! Everything here is a thin, checked wrapper:
//! - functions take borrowed file descriptors (`BorrowedFd`) or owned ones (`OwnedFd`), never raw integers
//!   whose lifetime nobody owns;
//! - a failing call returns `io::Error::last_os_error()` through the one [`syscall!`] macro, and calls that
//!   may be interrupted go through [`retry_if_interrupted`];
//! - every `#[repr(C)]` struct carries a compile-time size assertion and unit tests for its field offsets,
//!   with the values taken from the kernel's UAPI headers (named beside each definition);
//! - no policy: deciding what an errno *means* (unsupported, retry, fall back) is the caller's job.
//!
//! Submodules are grouped by the mechanism they serve: [`socket`] (generic options, resource usage),
//! [`errqueue`] (MSG_ZEROCOPY completions), [`tcp_zc`] (TCP zero-copy receive), [`bpf`] and [`xdp`]
//! (AF_XDP and its programs), [`netlink`] (netdev generic netlink), [`uring`] (io_uring probing),
//! [`ns`] (network namespaces) and [`vsock`].
#![allow(unsafe_code)]

use std::io;

/// Runs a libc call, mapping a `-1` return to `io::Error::last_os_error()`.
///
/// The `unsafe` block lives here so that callers write one `// SAFETY:` comment per call site.
macro_rules! syscall {
    ($fn: ident ( $($arg: expr),* $(,)* ) ) => {{
        #[allow(unused_unsafe)]
        // SAFETY: the caller of `syscall!` documents why the arguments are valid for this call.
        let res = unsafe { libc::$fn($($arg, )*) };
        if res == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(res)
        }
    }};
}

pub mod bpf;
pub mod errno;
pub mod errqueue;
pub mod frame_area;
pub mod netlink;
pub mod ns;
pub mod pages;
pub mod signal;
pub mod socket;
pub mod tcp_zc;
#[cfg(feature = "io-uring")]
pub mod uring;
pub mod vsock;
pub mod vsock_buffer;
pub mod xdp;

pub use errno::errno_name;

/// Repeats `f` while it fails with `EINTR` (a signal arrived before the call did any work).
pub fn retry_if_interrupted<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}
