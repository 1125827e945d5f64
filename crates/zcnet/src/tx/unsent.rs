//! What a send hands back when it stops early: the buffer, or the part of it the kernel has not taken.

use std::fmt;
use std::sync::Arc;

use super::buffer::SendBuf;
use super::error::TxError;

/// The unsent part of a buffer: the buffer and how many of its bytes the kernel already took.
///
/// While a zero-copy id still covers part of the buffer, the kernel may read it: the buffer is then
/// shared with the sender until that completion, and [`Unsent::into_buf`] refuses to hand it out.
/// Pass an `Unsent` to [`crate::tx::Sender::try_send_unsent`] (or
/// [`crate::tx::Sender::send_unsent`]) to send the rest, in order.
pub struct Unsent<B> {
    buf: Arc<B>,
    sent: usize,
}

impl<B: SendBuf> Unsent<B> {
    pub(crate) fn new(buf: Arc<B>, sent: usize) -> Self {
        Unsent { buf, sent }
    }

    pub(crate) fn into_parts(self) -> (Arc<B>, usize) {
        (self.buf, self.sent)
    }

    /// Bytes of the buffer the kernel took before the send stopped.
    pub fn sent(&self) -> usize {
        self.sent
    }

    /// The bytes not sent yet.
    pub fn remaining(&self) -> &[u8] {
        &self.buf.as_bytes()[self.sent..]
    }

    /// The whole buffer, readable (the kernel may still read the sent part too).
    pub fn buf(&self) -> &B {
        &self.buf
    }

    /// The buffer itself, once no zero-copy id still covers any part of it (always when nothing of it
    /// went out by zero-copy); otherwise `self` back: poll the sender's completions and try again.
    pub fn into_buf(self) -> Result<B, Self> {
        Arc::try_unwrap(self.buf).map_err(|buf| Unsent {
            buf,
            sent: self.sent,
        })
    }
}

impl<B> fmt::Debug for Unsent<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Unsent")
            .field("sent", &self.sent)
            .finish_non_exhaustive()
    }
}

/// A send that failed: the error, and the part of the buffer not sent.
pub struct SendError<B> {
    error: TxError,
    unsent: Unsent<B>,
}

impl<B: SendBuf> SendError<B> {
    pub(crate) fn new(error: TxError, unsent: Unsent<B>) -> Self {
        SendError { error, unsent }
    }

    /// What went wrong.
    pub fn error(&self) -> &TxError {
        &self.error
    }

    /// The part of the buffer not sent.
    pub fn unsent(&self) -> &Unsent<B> {
        &self.unsent
    }

    /// The errno of the underlying kernel error, if there is one.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.error.raw_os_error()
    }

    /// The kind of `io::Error` this converts to ([`TxError::kind`]).
    pub fn kind(&self) -> std::io::ErrorKind {
        self.error.kind()
    }

    /// The error and the unsent part.
    pub fn into_parts(self) -> (TxError, Unsent<B>) {
        (self.error, self.unsent)
    }
}

impl<B> fmt::Debug for SendError<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendError")
            .field("error", &self.error)
            .field("unsent", &self.unsent)
            .finish()
    }
}

impl<B> fmt::Display for SendError<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl<B> std::error::Error for SendError<B> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}

impl<B> From<SendError<B>> for TxError {
    fn from(e: SendError<B>) -> TxError {
        e.error
    }
}

/// Wraps the whole error, the unsent buffer with it: `downcast::<SendError<B>>()` gives both back.
impl<B: SendBuf> From<SendError<B>> for std::io::Error {
    fn from(e: SendError<B>) -> std::io::Error {
        std::io::Error::new(e.kind(), e)
    }
}

/// Why [`crate::tx::Sender::try_send`] stopped, with the part of the buffer not sent.
pub enum TrySendError<B> {
    /// The socket's send buffer is full: wait until it is writable (or for `POLLERR`, which may bring
    /// completions) and pass the unsent part to [`crate::tx::Sender::try_send_unsent`].
    WouldBlock(Unsent<B>),
    /// The send failed.
    Failed(SendError<B>),
}

impl<B: SendBuf> TrySendError<B> {
    /// The part of the buffer not sent.
    pub fn unsent(&self) -> &Unsent<B> {
        match self {
            TrySendError::WouldBlock(u) => u,
            TrySendError::Failed(e) => e.unsent(),
        }
    }

    /// The errno of the failure (`EAGAIN` for [`TrySendError::WouldBlock`]).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            TrySendError::WouldBlock(_) => Some(libc::EAGAIN),
            TrySendError::Failed(e) => e.raw_os_error(),
        }
    }

    /// The kind of `io::Error` this converts to: `WouldBlock`, or [`TxError::kind`].
    pub fn kind(&self) -> std::io::ErrorKind {
        match self {
            TrySendError::WouldBlock(_) => std::io::ErrorKind::WouldBlock,
            TrySendError::Failed(e) => e.kind(),
        }
    }

    /// The part of the buffer not sent, dropping the reason.
    pub fn into_unsent(self) -> Unsent<B> {
        match self {
            TrySendError::WouldBlock(u) => u,
            TrySendError::Failed(e) => e.unsent,
        }
    }
}

impl<B> fmt::Debug for TrySendError<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::WouldBlock(u) => f.debug_tuple("WouldBlock").field(u).finish(),
            TrySendError::Failed(e) => f.debug_tuple("Failed").field(e).finish(),
        }
    }
}

impl<B> fmt::Display for TrySendError<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::WouldBlock(u) => write!(
                f,
                "the send buffer is full after {} bytes (EAGAIN): send the rest when writable",
                u.sent
            ),
            TrySendError::Failed(e) => e.fmt(f),
        }
    }
}

impl<B> std::error::Error for TrySendError<B> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TrySendError::WouldBlock(_) => None,
            TrySendError::Failed(e) => std::error::Error::source(e),
        }
    }
}

/// Wraps the whole error, the unsent buffer with it.
impl<B: SendBuf> From<TrySendError<B>> for std::io::Error {
    fn from(e: TrySendError<B>) -> std::io::Error {
        std::io::Error::new(e.kind(), e)
    }
}
