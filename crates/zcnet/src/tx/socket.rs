//! The socket kinds a [`crate::tx::Sender`] can drive.

use std::io;
use std::net::{TcpStream, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};

use super::vsock::VsockSocket;

mod sealed {
    pub trait Sealed {}
}

/// A socket a [`crate::tx::Sender`] can send from with MSG_ZEROCOPY (sealed: TCP streams, UDP sockets,
/// AF_VSOCK sockets), owning its descriptor (`'static`: a dropped `aio::AsyncSender` may finish its
/// sends on another thread).
pub trait ZcSocket: sealed::Sealed + Send + 'static {
    /// The socket's name in messages (`TCP`, `UDP`, `AF_VSOCK`).
    const NAME: &'static str;
    /// The socket's file descriptor.
    fn fd(&self) -> BorrowedFd<'_>;
    /// Whether sends form a byte stream (partial sends continue with the rest) rather than messages.
    fn is_stream(&self) -> bool;
    /// The most bytes one zero-copy `sendmsg` may carry so that it takes exactly one completion id.
    fn max_zerocopy_piece(&self) -> usize {
        usize::MAX
    }
    /// Whether the kernel may enqueue part of a message and then fail the call without a count
    /// (AF_VSOCK seqpacket: see [`crate::tx::TxError::MessageCut`]). Such a socket's messages are
    /// sent whole by one call that waits in the kernel, copied, never with `MSG_DONTWAIT` and never
    /// again after a call failed.
    fn cuts_messages(&self) -> bool {
        false
    }
    /// Whether an io_uring zero-copy request (`IORING_OP_SEND_ZC`) sends zero-copy only on a socket
    /// with `SO_ZEROCOPY` on; without it such a socket takes the request and copies it.
    fn send_zc_needs_so_zerocopy(&self) -> bool {
        false
    }
    /// Whether the kernel shows that nothing was ever sent on the socket, so that no send took a
    /// completion id yet; `None` when this kind of socket cannot tell (only TCP can, from `TCP_INFO`).
    fn nothing_sent(&self) -> io::Result<Option<bool>> {
        Ok(None)
    }
    /// Sends at once what the socket holds back for later bytes to join (Nagle's algorithm on TCP;
    /// nothing on the others).
    fn push_held(&self) -> io::Result<()> {
        Ok(())
    }
    /// Makes the socket's close tell the peer that the stream was cut short, for a sender dropped
    /// with bytes it accepted and could not send (TCP: a reset; nothing on the others: a datagram
    /// socket has no stream to cut, and an AF_VSOCK close always shuts the stream down cleanly).
    fn reset_on_close(&self) -> io::Result<()> {
        Ok(())
    }
}

impl sealed::Sealed for TcpStream {}
impl ZcSocket for TcpStream {
    const NAME: &'static str = "TCP";
    fn fd(&self) -> BorrowedFd<'_> {
        self.as_fd()
    }
    fn is_stream(&self) -> bool {
        true
    }
    /// No data segment ever sent and none waiting: every `sendmsg` that carried data left some in
    /// the stream, and a failed one gave its id back (TCP aborts the send's completion record).
    fn nothing_sent(&self) -> io::Result<Option<bool>> {
        crate::sys::socket::tcp_nothing_written(self.as_fd()).map(Some)
    }
    /// With `TCP_NODELAY` off, a segment shorter than the MSS waits while an earlier one is
    /// unacknowledged; this sends it now, turning the option on and off again (only while it is
    /// off and bytes wait unsent: `SIOCOUTQNSD`), which also sends what `TCP_CORK` holds.
    fn push_held(&self) -> io::Result<()> {
        crate::sys::socket::push_held_segments(self.as_fd())
    }
    /// `SO_LINGER` with a zero timeout: the close sends RST, and the peer reads `ECONNRESET`.
    fn reset_on_close(&self) -> io::Result<()> {
        crate::sys::socket::reset_on_close(self.as_fd())
    }
}

impl sealed::Sealed for UdpSocket {}
impl ZcSocket for UdpSocket {
    const NAME: &'static str = "UDP";
    fn fd(&self) -> BorrowedFd<'_> {
        self.as_fd()
    }
    fn is_stream(&self) -> bool {
        false
    }
}

impl sealed::Sealed for VsockSocket {}
impl ZcSocket for VsockSocket {
    const NAME: &'static str = "AF_VSOCK";
    fn fd(&self) -> BorrowedFd<'_> {
        self.as_fd()
    }
    fn is_stream(&self) -> bool {
        self.socket_type() == crate::sys::vsock::VsockType::Stream
    }
    /// A seqpacket `sendmsg` the peer lacks credit for enqueues part of the message and returns an
    /// error, not the count, when it cannot enqueue the rest (`vsock_connectible_sendmsg`).
    fn cuts_messages(&self) -> bool {
        self.socket_type() == crate::sys::vsock::VsockType::Seqpacket
    }
    /// The virtio vsock transport attaches one completion to each enqueue, and a piece of at most
    /// 64 KiB (`VIRTIO_VSOCK_MAX_PKT_BUF_SIZE`) is one packet, enqueued whole or not at all; sent
    /// without waiting it is enqueued once, so it takes one id (see [`crate::tx::vsock`]).
    fn max_zerocopy_piece(&self) -> usize {
        64 << 10
    }
    /// `virtio_transport_send_pkt_info` clears `MSG_ZEROCOPY` on a socket without `SO_ZEROCOPY`,
    /// the flag io_uring's zero-copy requests carry, and then builds the packets by copy.
    fn send_zc_needs_so_zerocopy(&self) -> bool {
        true
    }
}

/// The socket a sender holds until its `close` takes it.
pub(crate) fn present<S>(socket: &Option<S>) -> &S {
    socket
        .as_ref()
        .expect("the socket is present until close()")
}
