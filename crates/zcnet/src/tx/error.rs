//! The error type of zero-copy sends.

use std::fmt;
use std::io;
use std::time::Duration;

use crate::sys::errno::error_name;

/// What went wrong in a [`crate::tx::Sender`], with the failing call, the errno name and what to do.
#[derive(Debug)]
pub enum TxError {
    /// `sendmsg` failed; `sent` of `len` bytes of the buffer had been accepted before.
    Send {
        /// The socket kind (`TCP`, `UDP`, `AF_VSOCK`).
        socket: &'static str,
        /// Whether the failing call used MSG_ZEROCOPY.
        zerocopy: bool,
        /// Bytes of the buffer the kernel accepted before the failure.
        sent: usize,
        /// Length of the buffer.
        len: usize,
        /// The kernel's error.
        source: io::Error,
    },
    /// Reading the error queue (`recvmsg(MSG_ERRQUEUE)`) or polling the socket failed.
    Errqueue {
        /// The socket kind.
        socket: &'static str,
        /// The kernel's error.
        source: io::Error,
    },
    /// A socket error (`SO_ERROR`, now cleared) ended a wait for completions: the connection failed.
    Socket {
        /// The socket kind.
        socket: &'static str,
        /// Ids still outstanding (their buffers stay lent).
        outstanding: usize,
        /// The pending error.
        source: io::Error,
    },
    /// A completion named an id the sender never registered: the kernel numbered its sends
    /// differently, so no completion can be trusted to release a buffer. The buffers still lent stay
    /// lent (leaked, never reused) and the sender copies from then on.
    LostTrack {
        /// The first id named that was never registered.
        id: u32,
        /// Ids still outstanding.
        outstanding: usize,
    },
    /// Completions did not arrive in time; the buffers they cover stay lent.
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// Ids still outstanding.
        outstanding: usize,
        /// How long it waited.
        waited: Duration,
    },
}

impl TxError {
    /// The errno of the underlying kernel error, if there is one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            TxError::Send { source, .. }
            | TxError::Errqueue { source, .. }
            | TxError::Socket { source, .. } => source.raw_os_error(),
            TxError::Timeout { .. } | TxError::LostTrack { .. } => None,
        }
    }
}

/// Why MSG_ZEROCOPY sends were refused with `ENOBUFS`, naming this process's locked-memory limit:
/// the kernel charges the pages a zero-copy send pins to the sender's `RLIMIT_MEMLOCK` unless it has
/// `CAP_IPC_LOCK` (`mm_account_pinned_pages`), and the send's notification to the socket's option
/// memory (`net.core.optmem_max`); either refusal is `ENOBUFS`, and the sender then copies.
pub fn enobufs_reason() -> String {
    let limit = match crate::sys::socket::memlock_limit() {
        Ok((Some(soft), _)) => format!("{} KiB", soft >> 10),
        Ok((None, _)) => "unlimited".into(),
        Err(_) => "unknown".into(),
    };
    format!(
        "MSG_ZEROCOPY refused with ENOBUFS: the pages a zero-copy send pins count against the \
         locked-memory limit (RLIMIT_MEMLOCK, {limit} here: raise it with `ulimit -l` or \
         limits.conf, or grant CAP_IPC_LOCK), its notification against net.core.optmem_max"
    )
}

pub(crate) fn send_hint(errno: Option<i32>) -> &'static str {
    match errno {
        Some(libc::ECONNRESET | libc::EPIPE) => {
            "the peer closed or reset the connection; flush() or close() returns every lent buffer"
        }
        Some(libc::EMSGSIZE) => "the datagram is larger than the socket allows: send less per call",
        Some(libc::EINVAL) => {
            "the kernel rejected the message (a GSO segment size beyond the MTU or too many segments)"
        }
        Some(libc::ENOBUFS) => {
            "out of socket memory or locked memory: raise net.core.optmem_max or RLIMIT_MEMLOCK \
             (`ulimit -l`), or send less at once"
        }
        Some(libc::ECONNREFUSED) => "nothing listens at the destination",
        Some(libc::ETIMEDOUT) => {
            "no send-buffer space within the send timeout: the peer is not reading, or the path \
             drops what is sent (TCP_INFO tells them apart: a zero window is a peer not reading)"
        }
        _ => "see sendmsg(2)",
    }
}

impl fmt::Display for TxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TxError::Send {
                socket,
                zerocopy,
                sent,
                len,
                source,
            } => write!(
                f,
                "sendmsg{} on {socket} after {sent} of {len} bytes: {} ({})",
                if *zerocopy { "(MSG_ZEROCOPY)" } else { "" },
                error_name(source),
                send_hint(source.raw_os_error())
            ),
            TxError::Errqueue { socket, source } => write!(
                f,
                "reading completions (recvmsg MSG_ERRQUEUE) on {socket}: {}",
                error_name(source)
            ),
            TxError::Socket {
                socket,
                outstanding,
                source,
            } => write!(
                f,
                "{socket} socket error while {outstanding} zero-copy ids were outstanding: {} ({})",
                error_name(source),
                send_hint(source.raw_os_error())
            ),
            TxError::LostTrack { id, outstanding } => write!(
                f,
                "a completion named id {id}, which was never sent: completion ids no longer match \
                 the buffers; {outstanding} buffers stay lent (leaked, never reused) and sends copy"
            ),
            TxError::Timeout {
                what,
                outstanding,
                waited,
            } => write!(
                f,
                "{what}: {outstanding} zero-copy ids still outstanding after {waited:?} (the peer is \
                 not reading, or the connection stalled; their buffers stay lent to the kernel)"
            ),
        }
    }
}

impl std::error::Error for TxError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TxError::Send { source, .. }
            | TxError::Errqueue { source, .. }
            | TxError::Socket { source, .. } => Some(source),
            TxError::Timeout { .. } | TxError::LostTrack { .. } => None,
        }
    }
}

impl From<TxError> for io::Error {
    fn from(e: TxError) -> io::Error {
        let kind = match &e {
            TxError::Send { source, .. }
            | TxError::Errqueue { source, .. }
            | TxError::Socket { source, .. } => source.kind(),
            TxError::LostTrack { .. } => io::ErrorKind::InvalidData,
            TxError::Timeout { .. } => io::ErrorKind::TimedOut,
        };
        io::Error::new(kind, e)
    }
}
