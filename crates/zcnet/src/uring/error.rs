//! The error type of io_uring zero-copy sends.

use std::fmt;
use std::io;
use std::time::Duration;

use crate::sys::errno::error_name;
use crate::tx::send_hint;

/// What went wrong in a [`crate::uring::UringSender`], with the failing call, the errno name and what
/// to do.
#[derive(Debug)]
#[non_exhaustive]
pub enum UringError {
    /// The ring could not be set up (`io_uring_setup`): `ENOSYS` (no io_uring), `EPERM`
    /// (`kernel.io_uring_disabled`), `ENOMEM`.
    Setup {
        /// The kernel's error.
        source: io::Error,
    },
    /// A send request failed; `sent` of `len` bytes of that buffer had been accepted before.
    Send {
        /// The socket kind (`TCP`, `UDP`).
        socket: &'static str,
        /// Whether the failing request was `IORING_OP_SEND_ZC`.
        zerocopy: bool,
        /// Bytes of the buffer the kernel accepted before the failure.
        sent: usize,
        /// Length of the buffer.
        len: usize,
        /// The kernel's error.
        source: io::Error,
    },
    /// Submitting or waiting (`io_uring_enter`) failed.
    Enter {
        /// The kernel's error.
        source: io::Error,
    },
    /// Results or notifications did not arrive in time; the buffers they cover stay lent.
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// Requests still in flight.
        in_flight: usize,
        /// How long it waited.
        waited: Duration,
    },
}

impl UringError {
    /// The errno of the underlying kernel error, if there is one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            UringError::Setup { source }
            | UringError::Send { source, .. }
            | UringError::Enter { source } => source.raw_os_error(),
            UringError::Timeout { .. } => None,
        }
    }
}

impl fmt::Display for UringError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UringError::Setup { source } => write!(
                f,
                "io_uring_setup: {} (no io_uring here: kernel 6.0+ with kernel.io_uring_disabled=0 \
                 is needed; send with zcnet::tx instead)",
                error_name(source)
            ),
            UringError::Send {
                socket,
                zerocopy,
                sent,
                len,
                source,
            } => write!(
                f,
                "{} on {socket} after {sent} of {len} bytes: {} ({})",
                if *zerocopy {
                    "IORING_OP_SEND_ZC"
                } else {
                    "IORING_OP_SEND"
                },
                error_name(source),
                send_hint(source.raw_os_error())
            ),
            UringError::Enter { source } => {
                write!(f, "io_uring_enter: {}", error_name(source))
            }
            UringError::Timeout {
                what,
                in_flight,
                waited,
            } => write!(
                f,
                "{what}: {in_flight} io_uring send requests still in flight after {waited:?} (the \
                 peer is not reading, or the connection stalled; their buffers stay lent)"
            ),
        }
    }
}

impl std::error::Error for UringError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            UringError::Setup { source }
            | UringError::Send { source, .. }
            | UringError::Enter { source } => Some(source),
            UringError::Timeout { .. } => None,
        }
    }
}

impl From<UringError> for io::Error {
    fn from(e: UringError) -> io::Error {
        let kind = match &e {
            UringError::Setup { source }
            | UringError::Send { source, .. }
            | UringError::Enter { source } => source.kind(),
            UringError::Timeout { .. } => io::ErrorKind::TimedOut,
        };
        io::Error::new(kind, e)
    }
}
