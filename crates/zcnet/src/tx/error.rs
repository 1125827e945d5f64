//! The error type of zero-copy sends.

use std::fmt;
use std::io;
use std::time::Duration;

use super::erased::UnsentBuf;
use crate::sys::errno::error_name;

/// What went wrong in a [`crate::tx::Sender`], with the failing call, the errno name and what to do,
/// on either submission path.
///
/// An error never drops a buffer: the buffer of the call that fails comes back beside it
/// ([`crate::tx::SendError`]); when an earlier queued io_uring request failed, the buffers queued
/// before the call and not wholly sent come back inside it ([`TxError::unsent`]); after the other
/// errors the buffers stay queued or lent, and a later call goes on with them — except where a call
/// stops for good ([`crate::tx::Sender::close`], an [`crate::aio::AsyncSender`]'s queue), which hands
/// back what it still held inside the error ([`TxError::Stopped`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum TxError {
    /// A send failed (`sendmsg`, or an io_uring send request); `sent` of `len` bytes of that buffer
    /// had been accepted before. On the io_uring path the requests queued after it were not made:
    /// `unsent` holds, in order, that buffer and every one queued after it before the call that
    /// reports the error, none of them sent again (empty on the `sendmsg` path, which fails the
    /// call that sends).
    Send {
        /// The failing call (`sendmsg`, `IORING_OP_SEND_ZC`, `IORING_OP_SEND`).
        call: &'static str,
        /// The socket kind (`TCP`, `UDP`, `AF_VSOCK`).
        socket: &'static str,
        /// Whether the failing call sent zero-copy.
        zerocopy: bool,
        /// Bytes of the buffer the kernel accepted before the failure.
        sent: usize,
        /// Length of the buffer.
        len: usize,
        /// The kernel's error.
        source: io::Error,
        /// Earlier buffers not wholly sent, in stream order (io_uring path only).
        unsent: Vec<UnsentBuf>,
    },
    /// A whole-message send on a socket that may cut messages (AF_VSOCK seqpacket,
    /// [`crate::tx::ZcSocket::cuts_messages`]) failed: the kernel may have enqueued the first part of
    /// the message, which the peer then reads merged with whatever is sent next, so the connection can
    /// no longer carry whole messages. The message comes back unsent beside the error
    /// ([`crate::tx::SendError`]; [`crate::tx::Unsent::sent`] is 0, as the kernel does not say how
    /// much went), and every later send on the sender fails the same way (`earlier`) without a call:
    /// close the connection.
    MessageCut {
        /// The socket kind.
        socket: &'static str,
        /// Length of the message handed back.
        len: usize,
        /// The kernel's error: `EAGAIN` when the send timeout passed, `EINTR` on a signal, or an
        /// error of the connection; for a later send, the error that cut the earlier message.
        source: io::Error,
        /// Whether an earlier message was cut (this one was not tried).
        earlier: bool,
    },
    /// A datagram longer than one io_uring request carries (the kernel would cut it short): refused
    /// before anything was queued, and handed back.
    TooLong {
        /// Its length.
        len: usize,
        /// The most bytes one request carries.
        max: usize,
    },
    /// Submitting or waiting on the io_uring (`io_uring_enter`) failed; what was queued stays queued.
    Enter {
        /// The kernel's error.
        source: io::Error,
    },
    /// Setting a socket option failed.
    SocketOption {
        /// The option (`UDP_CORK`).
        option: &'static str,
        /// The kernel's error.
        source: io::Error,
    },
    /// The operation needs what the sender's submission path lacks (for example `send_to`, a
    /// destination per datagram, on the io_uring path); nothing was sent.
    Unsupported {
        /// The operation.
        what: &'static str,
        /// What to do instead.
        remedy: &'static str,
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
    /// Completions did not arrive (or the kernel did not take queued sends) in time; the buffers they
    /// cover stay lent or queued.
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// Ids (or io_uring requests) still outstanding.
        outstanding: usize,
        /// How long it waited.
        waited: Duration,
    },
    /// `error` stopped a call that held buffers not yet given to the kernel — a close whose flush
    /// failed with io_uring requests still queued, an [`crate::aio::AsyncSender`] whose queued
    /// buffer failed — and the call hands them back, in stream order ([`TxError::unsent`]), none
    /// sent again.
    Stopped {
        /// What went wrong.
        error: Box<TxError>,
        /// The buffers handed back.
        unsent: Vec<UnsentBuf>,
    },
}

impl TxError {
    /// The errno of the underlying kernel error, if there is one.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.io_source().and_then(io::Error::raw_os_error)
    }

    fn io_source(&self) -> Option<&io::Error> {
        match self {
            TxError::Send { source, .. }
            | TxError::MessageCut { source, .. }
            | TxError::Errqueue { source, .. }
            | TxError::Socket { source, .. }
            | TxError::Enter { source }
            | TxError::SocketOption { source, .. } => Some(source),
            TxError::Stopped { error, .. } => error.io_source(),
            TxError::Timeout { .. }
            | TxError::LostTrack { .. }
            | TxError::TooLong { .. }
            | TxError::Unsupported { .. } => None,
        }
    }

    /// The kind of `io::Error` this error converts to: the kernel error's kind where there is one
    /// (`ConnectionReset` for a peer's reset), `TimedOut`, `InvalidInput`, `Unsupported`,
    /// `InvalidData` for lost completion ids, and `ConnectionAborted` for a cut message (never
    /// `WouldBlock`, which would invite a retry that must not be made).
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            TxError::LostTrack { .. } => io::ErrorKind::InvalidData,
            // Not the source's kind: `EAGAIN` would read as "try again", which must never be done.
            TxError::MessageCut { .. } => io::ErrorKind::ConnectionAborted,
            TxError::Timeout { .. } => io::ErrorKind::TimedOut,
            TxError::TooLong { .. } => io::ErrorKind::InvalidInput,
            TxError::Unsupported { .. } => io::ErrorKind::Unsupported,
            TxError::Stopped { error, .. } => error.kind(),
            _ => self
                .io_source()
                .map_or(io::ErrorKind::Other, io::Error::kind),
        }
    }

    /// The earlier buffers this error hands back, in stream order: those of io_uring requests queued
    /// before the failing call and not wholly sent ([`TxError::Send`]), those a stopped call still
    /// held ([`TxError::Stopped`]); none for the other errors.
    pub fn unsent(&self) -> &[UnsentBuf] {
        match self {
            TxError::Send { unsent, .. } | TxError::Stopped { unsent, .. } => unsent,
            _ => &[],
        }
    }

    /// Takes the buffers this error hands back (see [`TxError::unsent`]).
    pub fn into_unsent(self) -> Vec<UnsentBuf> {
        match self {
            TxError::Send { unsent, .. } | TxError::Stopped { unsent, .. } => unsent,
            _ => Vec::new(),
        }
    }

    /// The error handing back `earlier` before the buffers it hands back already and `later` after
    /// them (stream order), as [`TxError::Stopped`] unless it carries a list of its own.
    pub(crate) fn handing_back(
        mut self,
        earlier: Vec<UnsentBuf>,
        later: impl IntoIterator<Item = UnsentBuf>,
    ) -> TxError {
        let mut later = later.into_iter().peekable();
        if earlier.is_empty() && later.peek().is_none() {
            return self;
        }
        match &mut self {
            TxError::Send { unsent, .. } | TxError::Stopped { unsent, .. } => {
                unsent.splice(0..0, earlier);
                unsent.extend(later);
                self
            }
            _ => {
                let mut unsent = earlier;
                unsent.extend(later);
                TxError::Stopped {
                    error: Box::new(self),
                    unsent,
                }
            }
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

fn cut_hint(errno: Option<i32>) -> &'static str {
    match errno {
        Some(libc::EAGAIN) => {
            "the peer had no credit for the rest within the send timeout: it reads too slowly, or \
             its vsock buffer (SO_VM_SOCKETS_BUFFER_SIZE) is small for the message"
        }
        Some(libc::EINTR) => "a signal interrupted the wait for the peer's credit",
        other => send_hint(other),
    }
}

fn send_hint(errno: Option<i32>) -> &'static str {
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
                call,
                socket,
                zerocopy,
                sent,
                len,
                source,
                unsent,
            } => {
                let flag = if *zerocopy && *call == "sendmsg" {
                    "(MSG_ZEROCOPY)"
                } else {
                    ""
                };
                write!(
                    f,
                    "{call}{flag} on {socket} after {sent} of {len} bytes: {} ({})",
                    error_name(source),
                    send_hint(source.raw_os_error())
                )?;
                if !unsent.is_empty() {
                    write!(f, "; {} buffers handed back unsent", unsent.len())?;
                }
                Ok(())
            }
            TxError::MessageCut {
                socket,
                len,
                source,
                earlier: false,
            } => write!(
                f,
                "send on {socket} seqpacket stopped before the whole message of {len} bytes was \
                 enqueued: {} ({}); the kernel may have enqueued its first part, which the peer would \
                 read merged with the next message, so this connection can no longer carry whole \
                 messages: close it (the message is handed back unsent)",
                error_name(source),
                cut_hint(source.raw_os_error())
            ),
            TxError::MessageCut {
                socket,
                len,
                source,
                earlier: true,
            } => write!(
                f,
                "{socket} seqpacket connection cut by an earlier message's failed send ({}): this \
                 message of {len} bytes was not sent and is handed back; close the connection",
                error_name(source)
            ),
            TxError::TooLong { len, max } => write!(
                f,
                "a datagram of {len} bytes: one io_uring send request carries at most {max} \
                 (the buffer is handed back unsent; send it on the sendmsg path, or less per \
                 datagram)"
            ),
            TxError::Enter { source } => {
                write!(f, "io_uring_enter: {}", error_name(source))
            }
            TxError::SocketOption { option, source } => {
                write!(f, "setsockopt {option}: {}", error_name(source))
            }
            TxError::Unsupported { what, remedy } => {
                write!(
                    f,
                    "{what} is not available on this submission path: {remedy}"
                )
            }
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
            TxError::Stopped { unsent, .. } => write!(
                f,
                "stopped with {} queued buffers, handed back unsent",
                unsent.len()
            ),
            TxError::Timeout {
                what,
                outstanding,
                waited,
            } => write!(
                f,
                "{what}: {outstanding} zero-copy ids or requests still outstanding after {waited:?} \
                 (the peer is not reading, or the connection stalled; their buffers stay lent to \
                 the kernel)"
            ),
        }
    }
}

impl std::error::Error for TxError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TxError::Stopped { error, .. } => Some(&**error),
            _ => self
                .io_source()
                .map(|e| e as &(dyn std::error::Error + 'static)),
        }
    }
}

crate::error::into_io_error!(TxError);
