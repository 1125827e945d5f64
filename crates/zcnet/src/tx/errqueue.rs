//! Reading MSG_ZEROCOPY completions yourself: for sends made outside a [`crate::tx::Sender`], or to see
//! what the kernel reports. The one call that lends a buffer to the kernel (`sendmsg` with
//! `MSG_ZEROCOPY`) is reachable only through a sender, which keeps the buffer until its completion:
//!
//! ```compile_fail
//! // Not exported: a borrowed slice lent to the kernel could change before the kernel read it.
//! let lend_borrowed_slice = zcnet::sys::errqueue::send_msg;
//! ```
//!
//! Reading the error queue takes the entry read off it ([`recv_errqueue`]): on a socket a sender owns,
//! that would take the sender's completions, so it is refused there.
//!
//! Kernel behaviour relied on (Documentation/networking/msg_zerocopy.rst): `SO_ZEROCOPY` opts a socket
//! in; completions arrive one per `recvmsg(MSG_ERRQUEUE)`, as `IP_RECVERR`, `IPV6_RECVERR` or
//! `SOL_VSOCK`/`VSOCK_RECVERR` control messages holding a `sock_extended_err` with an inclusive id range;
//! `recvmsg(MSG_ERRQUEUE)` dequeues the entry it returns (it has no `MSG_PEEK`).

use std::io;
use std::os::fd::BorrowedFd;

pub use crate::sys::errqueue::{
    ControlBuf, ControlMessage, ControlMessages, ErrqueueMessage, Readiness,
    SO_EE_CODE_ZEROCOPY_COPIED, SO_EE_ORIGIN_ZEROCOPY, SockExtendedErr, decode, enable_zerocopy,
    poll_socket, zerocopy_enabled,
};
pub use crate::sys::vsock::{SOL_VSOCK, VSOCK_RECVERR};

/// Takes one entry off the socket's error queue (`recvmsg(MSG_ERRQUEUE | MSG_DONTWAIT)`) into
/// `control`: the entry is gone from the queue once read. Returns `Ok(false)` when the queue is empty
/// (`EAGAIN`). A truncated control message (`MSG_CTRUNC`) is an error, since the completion it carried
/// is lost to the caller.
///
/// Fails with [`io::ErrorKind::ResourceBusy`], reading nothing, when a [`crate::tx::Sender`] of this
/// process owns the socket (through this descriptor or another of the same socket): its completions
/// are its own, and taking one would keep its buffer lent forever. Read them through the sender
/// ([`crate::tx::Sender::poll_completions`]).
pub fn recv_errqueue(fd: BorrowedFd<'_>, control: &mut ControlBuf) -> io::Result<bool> {
    super::claim::unless_claimed(fd, || crate::sys::errqueue::recv_errqueue(fd, control))
}
