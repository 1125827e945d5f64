//! Reading MSG_ZEROCOPY completions yourself: for sends made outside a [`crate::tx::Sender`], or to see
//! what the kernel reports. Everything here only reads: the one call that lends a buffer to the kernel
//! (`sendmsg` with `MSG_ZEROCOPY`) is reachable only through a sender, which keeps the buffer until its
//! completion:
//!
//! ```compile_fail
//! // Not exported: a borrowed slice lent to the kernel could change before the kernel read it.
//! let lend_borrowed_slice = zcnet::sys::errqueue::send_msg;
//! ```
//!
//! Kernel behaviour relied on (Documentation/networking/msg_zerocopy.rst): `SO_ZEROCOPY` opts a socket
//! in; completions arrive one per `recvmsg(MSG_ERRQUEUE)`, as `IP_RECVERR`, `IPV6_RECVERR` or
//! `SOL_VSOCK`/`VSOCK_RECVERR` control messages holding a `sock_extended_err` with an inclusive id range.

pub use crate::sys::errqueue::{
    ControlBuf, ControlMessage, ControlMessages, ErrqueueMessage, Readiness,
    SO_EE_CODE_ZEROCOPY_COPIED, SO_EE_ORIGIN_ZEROCOPY, SockExtendedErr, decode, enable_zerocopy,
    poll_socket, recv_errqueue, zerocopy_enabled,
};
pub use crate::sys::vsock::{SOL_VSOCK, VSOCK_RECVERR};
