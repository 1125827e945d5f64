//! AF_VSOCK stream and seqpacket sockets for [`crate::tx::VsockSender`].
//!
//! Kernel behaviour relied on: vsock accepts `SO_ZEROCOPY` (Linux 6.7+); its completions are
//! `SOL_VSOCK/VSOCK_RECVERR` control messages; the virtio transports attach one completion id per enqueue
//! of at most 64 KiB. Binding to `VMADDR_CID_LOCAL` fails with `EADDRNOTAVAIL` without a loopback
//! transport ([`loopback_available`] says so before connecting anywhere).
//!
//! One zero-copy stream send, one completion id. `vsock_connectible_sendmsg` (net/vmw_vsock/af_vsock.c)
//! enqueues what the peer has credit for, then loops while bytes are left and credit remains; a call
//! that may wait sleeps for credit with the socket unlocked and enqueues the next piece under an id
//! of its own (`virtio_transport_send_pkt_info` takes one per enqueue): one call, several ids. The
//! sender's zero-copy calls never wait (`MSG_DONTWAIT`) and carry at most 64 KiB, and such a call
//! enqueues once: it holds the socket lock from its first enqueue to its return, and credit comes
//! back only in `virtio_transport_recv_pkt`, which takes that lock before it stores the peer's
//! counters, so the space left after the enqueue is what the enqueue left — none when it was cut
//! short, and the call returns its count. A piece of at most 64 KiB is one packet, sent whole or
//! not at all, and a call that enqueued nothing gives its id back (`net_zcopy_put_abort`). So each
//! call that returns a count took exactly one id, and a completion releases only the buffer of the
//! call that took its id. The sender waits for credit in `poll`, between calls.
//!
//! Seqpacket sockets keep message boundaries only for messages sent whole: a seqpacket `sendmsg`
//! enqueues as much of a message as the peer has credit for and, when it cannot enqueue the rest
//! (no waiting allowed, the send timeout passed, a signal), returns an error and no count although
//! part of the message is in the peer's queue without its end mark (`vsock_connectible_sendmsg`,
//! net/vmw_vsock/af_vsock.c). So a [`crate::tx::VsockSender`] sends each seqpacket message with one
//! call that waits in the kernel (bounded by [`crate::tx::SenderConfig::send_timeout`], set as
//! `SO_SNDTIMEO`), by copy (each piece takes a completion id of its own, so zero-copy ids would not
//! match sends), on `sendmsg` (io_uring tries sends without waiting first); a failed call is
//! [`crate::tx::TxError::MessageCut`] and nothing is sent after it; a send that may not wait
//! (`try_send`, `zcnet::aio::AsyncSender`) is refused.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::sys::vsock::{self as sys, SockaddrVm};
pub use crate::sys::vsock::{
    VMADDR_CID_ANY, VMADDR_CID_HOST, VMADDR_CID_LOCAL, VMADDR_PORT_ANY, VsockType,
    loopback_available,
};
pub use crate::sys::vsock_buffer::{buffer_size, set_buffer_size};

/// A connected (or listening) AF_VSOCK socket.
#[derive(Debug)]
pub struct VsockSocket {
    fd: OwnedFd,
    ty: VsockType,
}

impl VsockSocket {
    /// Connects to `cid:port` (blocking).
    pub fn connect(ty: VsockType, cid: u32, port: u32) -> io::Result<VsockSocket> {
        let fd = sys::socket(ty)?;
        sys::connect(fd.as_fd(), SockaddrVm::new(cid, port))?;
        Ok(VsockSocket { fd, ty })
    }

    /// Binds to `cid:port` (`VMADDR_PORT_ANY` picks a port) and listens.
    pub fn listen(ty: VsockType, cid: u32, port: u32) -> io::Result<VsockSocket> {
        let fd = sys::socket(ty)?;
        sys::bind(fd.as_fd(), SockaddrVm::new(cid, port))?;
        sys::listen(fd.as_fd(), 16)?;
        Ok(VsockSocket { fd, ty })
    }

    /// Accepts one connection on a listening socket.
    pub fn accept(&self) -> io::Result<VsockSocket> {
        Ok(VsockSocket {
            fd: sys::accept(self.fd.as_fd())?,
            ty: self.ty,
        })
    }

    /// The bound port.
    pub fn local_port(&self) -> io::Result<u32> {
        Ok(sys::local_addr(self.fd.as_fd())?.svm_port)
    }

    /// Stream or seqpacket.
    pub fn socket_type(&self) -> VsockType {
        self.ty
    }

    /// Receives up to `buf.len()` bytes (one message on a seqpacket socket); 0 at end of stream.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        sys::recv(self.fd.as_fd(), buf)
    }
}

impl AsFd for VsockSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
