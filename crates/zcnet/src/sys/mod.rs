//! The kernel boundary: every `unsafe` system call and every kernel UAPI definition that `libc` lacks.
//!
//! # Contract for the modules above
//! Everything here is a thin, checked wrapper:
//! - functions take borrowed file descriptors (`BorrowedFd`) or owned ones (`OwnedFd`), never raw integers
//!   whose lifetime nobody owns;
//! - a failing call returns `io::Error::last_os_error()` through the one `syscall!` macro, and calls that
//!   may be interrupted go through `retry_if_interrupted`;
//! - every `#[repr(C)]` struct carries a compile-time size assertion and unit tests for its field offsets,
//!   with the values taken from the kernel's UAPI headers (named beside each definition);
//! - no policy: deciding what an errno *means* (unsupported, retry, fall back) is the caller's job.
//!
//! Submodules are grouped by the mechanism they serve: `socket` (generic options, resource usage),
//! `errqueue` (MSG_ZEROCOPY completions), `datagram` (batched UDP receive), `tcp_zc` (TCP zero-copy
//! receive), `bpf`, `xdp` and `frame_area` (AF_XDP, its programs and frame ownership), `packet`
//! (AF_PACKET sockets and rings), `netlink` (generic netlink: netdev and the OVS families),
//! `ethtool` (channels, rings, RSS and ntuple rules), `rtnetlink` (routes, neighbours and links),
//! `ovs` (Open vSwitch datapath UAPI), `link` (interface indices), `perf_event` (tracepoints for
//! BPF programs), `uring` (io_uring zero-copy sends and probing), `uring_timestamps` (transmit
//! timestamps through io_uring), `zcrx` (io_uring zero-copy receive) and
//! `zcrx_ring` (its ring, mapped by zcnet, also when another process set it up), `timestamping` (transmit
//! timestamps), `trial` (a system call tried in a throwaway child, to see whether a seccomp filter
//! refuses it), `unix` (descriptors passed over Unix sockets, peer credentials, sealed memory
//! files) and `vsock`.
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

// Private to the crate: the library's modules export the sound wrappers users need (for example
// `tx::errqueue`, `tx::vsock`, `probe::resource_usage`, `tx::Sender`, `xdp`).
pub(crate) mod bpf;
#[cfg(feature = "bench-internals")]
pub(crate) mod datagram;
pub(crate) mod errno;
pub(crate) mod errqueue;
pub(crate) mod ethtool;
pub(crate) mod frame_area;
pub(crate) mod link;
pub(crate) mod netlink;
// The whole UAPI table of openvswitch.h, each value tested against the header; the client sends only
// part of it.
#[allow(dead_code)]
pub(crate) mod ovs;
#[cfg(feature = "bench-internals")]
pub(crate) mod packet;
pub(crate) mod packet_socket;
pub(crate) mod pages;
pub(crate) mod perf_event;
#[cfg(feature = "tokio")]
pub(crate) mod reactor;
pub(crate) mod rtnetlink;
pub(crate) mod socket;
pub(crate) mod tcp_zc;
pub(crate) mod timestamping;
pub(crate) mod trial;
pub(crate) mod unix;
#[cfg(feature = "io-uring")]
pub(crate) mod uring;
#[cfg(feature = "io-uring")]
pub(crate) mod uring_timestamps;
pub(crate) mod vsock;
pub(crate) mod vsock_buffer;
pub(crate) mod xdp;
pub(crate) mod xdp_diag;
#[cfg(feature = "io-uring")]
pub(crate) mod zcrx;
#[cfg(feature = "io-uring")]
pub(crate) mod zcrx_ring;

pub(crate) use errno::errno_name;

/// Repeats `f` while it fails with `EINTR` (a signal arrived before the call did any work).
pub(crate) fn retry_if_interrupted<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}
