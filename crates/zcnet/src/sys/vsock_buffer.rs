//! The receive buffer of an AF_VSOCK socket (`SO_VM_SOCKETS_BUFFER_*`, linux/vm_sockets.h): how much
//! credit a vsock receiver grants its peer. The options take a 64-bit value at level `AF_VSOCK`.
//!
//! Kernel behaviour relied on: `SO_VM_SOCKETS_BUFFER_SIZE` is clamped to the socket's current
//! `SO_VM_SOCKETS_BUFFER_MAX_SIZE` (256 KiB by default), so the maximum is raised first; sockets accepted
//! from a listener inherit the listener's sizes. A virtio vsock sender sends with MSG_ZEROCOPY only when
//! the peer has credit for the whole message, so a receiver buffer smaller than the sends turns
//! zero-copy sends into copies.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `SO_VM_SOCKETS_BUFFER_SIZE` (linux/vm_sockets.h).
pub const SO_VM_SOCKETS_BUFFER_SIZE: i32 = 0;
/// `SO_VM_SOCKETS_BUFFER_MAX_SIZE` (linux/vm_sockets.h).
pub const SO_VM_SOCKETS_BUFFER_MAX_SIZE: i32 = 2;

fn set_u64_option(fd: BorrowedFd<'_>, name: i32, value: u64) -> io::Result<()> {
    // SAFETY: `value` is a live u64 and the length passed is exactly its size, as the kernel expects
    // for the SO_VM_SOCKETS_BUFFER_* options.
    syscall!(setsockopt(
        fd.as_raw_fd(),
        libc::AF_VSOCK,
        name,
        (&value as *const u64).cast(),
        mem::size_of::<u64>() as libc::socklen_t,
    ))
    .map(drop)
}

/// Sets the socket's vsock buffer to `bytes`: first `SO_VM_SOCKETS_BUFFER_MAX_SIZE`, then
/// `SO_VM_SOCKETS_BUFFER_SIZE` (as vsock_perf does).
pub fn set_buffer_size(fd: BorrowedFd<'_>, bytes: u64) -> io::Result<()> {
    set_u64_option(fd, SO_VM_SOCKETS_BUFFER_MAX_SIZE, bytes)?;
    set_u64_option(fd, SO_VM_SOCKETS_BUFFER_SIZE, bytes)
}

/// The socket's current `SO_VM_SOCKETS_BUFFER_SIZE`.
pub fn buffer_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut value: u64 = 0;
    let mut len = mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live locals; the kernel writes at most `len` bytes into `value`.
    syscall!(getsockopt(
        fd.as_raw_fd(),
        libc::AF_VSOCK,
        SO_VM_SOCKETS_BUFFER_SIZE,
        (&mut value as *mut u64).cast(),
        &mut len,
    ))?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::{buffer_size, set_buffer_size};
    use crate::sys::vsock::{VsockType, socket};

    /// The options work on any AF_VSOCK socket, with or without a transport: set, then read back.
    #[test]
    fn buffer_size_reads_back_what_was_set() {
        let fd = match socket(VsockType::Stream) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::EAFNOSUPPORT) => {
                testnet::skip(
                    "buffer_size_reads_back_what_was_set",
                    "no AF_VSOCK (EAFNOSUPPORT)",
                );
                return;
            }
            Err(e) => panic!("socket(AF_VSOCK): {e}"),
        };
        set_buffer_size(fd.as_fd(), 1 << 20).expect("set the vsock buffer size");
        assert_eq!(buffer_size(fd.as_fd()).expect("read it back"), 1 << 20);
        set_buffer_size(fd.as_fd(), 300 << 10).expect("set a smaller one");
        assert_eq!(buffer_size(fd.as_fd()).expect("read it back"), 300 << 10);
    }
}
