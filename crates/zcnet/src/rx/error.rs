//! The receive module's one error type: which call failed, its errno, and what to do about it.

use std::fmt;
use std::io;

use super::ZcrxRefusal;
use crate::sys::errno::error_name;

/// The kernel call an [`RxError`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RxOp {
    /// `getsockopt(TCP_ZEROCOPY_RECEIVE)`.
    ZerocopyReceive,
    /// `recv` on the socket (fallback and unaligned bytes).
    Recv,
    /// `poll` waiting for data.
    Poll,
    /// Reading or setting a socket option or flag while setting up the receiver.
    Setup,
    /// A pending socket error the kernel reported (`SO_ERROR`), such as a reset.
    Socket,
    /// Setting up io_uring zero-copy receive: the ring, the area, the refill ring, the registration
    /// (`IORING_REGISTER_ZCRX_IFQ`).
    ZcrxSetup,
    /// An io_uring zero-copy receive (`IORING_OP_RECV_ZC`) or waiting for its completions.
    ZcrxReceive,
}

/// A failed receive: the call, the kernel's error, and advice.
#[derive(Debug)]
pub struct RxError {
    op: RxOp,
    source: io::Error,
    zcrx: Option<ZcrxRefusal>,
}

impl RxError {
    pub(crate) fn new(op: RxOp, source: io::Error) -> RxError {
        RxError {
            op,
            source,
            zcrx: None,
        }
    }

    #[cfg(feature = "io-uring")]
    /// The kernel refused io_uring zero-copy receive, for `refusal`.
    pub(crate) fn zcrx(op: RxOp, source: io::Error, refusal: ZcrxRefusal) -> RxError {
        RxError {
            op,
            source,
            zcrx: Some(refusal),
        }
    }

    /// Why the kernel refused zero-copy receive through io_uring (with [`RxError::raw_os_error`],
    /// the errno), when that is what failed.
    pub fn zcrx_refusal(&self) -> Option<ZcrxRefusal> {
        self.zcrx
    }

    /// The call that failed.
    pub fn op(&self) -> RxOp {
        self.op
    }

    /// The kind of the underlying error (`WouldBlock` on a non-blocking socket with nothing queued,
    /// `ConnectionReset`, …).
    pub fn kind(&self) -> io::ErrorKind {
        self.source.kind()
    }

    /// The errno, when the kernel gave one.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.source.raw_os_error()
    }

    fn advice(&self) -> &'static str {
        if let Some(refusal) = self.zcrx {
            return refusal.remedy();
        }
        match (self.op, self.source.raw_os_error()) {
            (_, Some(libc::EAGAIN)) => {
                "nothing queued on a non-blocking socket: poll and call again"
            }
            (_, Some(libc::ECONNRESET)) => "the peer reset the connection",
            (_, Some(libc::ENOTCONN)) => {
                "the socket is not connected: receive on an accepted or connected stream"
            }
            (RxOp::ZerocopyReceive, _) => "use RxMode::Copy to receive with plain recv",
            _ => "see the errno",
        }
    }
}

impl fmt::Display for RxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            RxOp::ZerocopyReceive => "getsockopt TCP_ZEROCOPY_RECEIVE",
            RxOp::Recv => "recv",
            RxOp::Poll => "poll for POLLIN",
            RxOp::Setup => "setting up the receiver",
            RxOp::Socket => "socket error",
            RxOp::ZcrxSetup => "setting up io_uring zero-copy receive",
            RxOp::ZcrxReceive => "io_uring RECV_ZC",
        };
        write!(f, "{op}: {} ", error_name(&self.source))?;
        match self.zcrx {
            Some(refusal) => write!(f, "({refusal:?}: {})", self.advice()),
            None => write!(f, "({})", self.advice()),
        }
    }
}

impl std::error::Error for RxError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

crate::error::into_io_error!(RxError);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_the_call_the_errno_and_the_remedy() {
        let err = RxError::new(
            RxOp::ZerocopyReceive,
            io::Error::from_raw_os_error(libc::ENOPROTOOPT),
        );
        assert_eq!(
            err.to_string(),
            "getsockopt TCP_ZEROCOPY_RECEIVE: ENOPROTOOPT (use RxMode::Copy to receive with plain recv)"
        );
        assert_eq!(err.raw_os_error(), Some(libc::ENOPROTOOPT));
        let reset = RxError::new(RxOp::Socket, io::Error::from_raw_os_error(libc::ECONNRESET));
        let io: io::Error = reset.into();
        assert_eq!(io.kind(), io::ErrorKind::ConnectionReset);
        assert!(io.to_string().contains("ECONNRESET"), "{io}");
    }
}
