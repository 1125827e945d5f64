//! The error type of io_uring zero-copy sends.

use std::fmt;
use std::io;
use std::time::Duration;

use super::UnsentBuf;
use crate::sys::errno::error_name;
use crate::tx::send_hint;

/// What went wrong in a [`crate::uring::UringSender`], with the failing call, the errno name and what
/// to do. An error that ends sends hands back every buffer not wholly sent ([`UringError::unsent`]);
/// after the others the buffers stay queued or lent, and a later call goes on with them.
#[derive(Debug)]
#[non_exhaustive]
pub enum UringError {
    /// The ring could not be set up (`io_uring_setup`): `ENOSYS` (no io_uring), `EPERM`
    /// (`kernel.io_uring_disabled`), `ENOMEM`.
    Setup {
        /// The kernel's error.
        source: io::Error,
    },
    /// A send request failed; `sent` of `len` bytes of that buffer had been accepted before. The
    /// sends after it were not made: `unsent` holds, in order, that buffer and every one queued
    /// after it (and the buffer of the call that reported the error), none of them sent again.
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
        /// Every buffer not wholly sent, in stream order.
        unsent: Vec<UnsentBuf>,
    },
    /// A datagram longer than one request can carry (the kernel would cut it short); it is handed
    /// back, and nothing was queued.
    TooLong {
        /// Its length.
        len: usize,
        /// The most bytes one request carries.
        max: usize,
        /// The buffer.
        buf: UnsentBuf,
    },
    /// Submitting or waiting (`io_uring_enter`) failed; what was queued stays queued.
    Enter {
        /// The kernel's error.
        source: io::Error,
    },
    /// Results or notifications did not arrive in time; the buffers they cover stay lent, and queued
    /// ones queued (a later call sends them).
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
            UringError::Timeout { .. } | UringError::TooLong { .. } => None,
        }
    }

    /// The buffers this error hands back, in stream order (none for errors after which they stay
    /// queued or lent).
    pub fn unsent(&self) -> &[UnsentBuf] {
        match self {
            UringError::Send { unsent, .. } => unsent,
            UringError::TooLong { buf, .. } => std::slice::from_ref(buf),
            _ => &[],
        }
    }

    /// Takes the buffers this error hands back (see [`UringError::unsent`]).
    pub fn into_unsent(self) -> Vec<UnsentBuf> {
        match self {
            UringError::Send { unsent, .. } => unsent,
            UringError::TooLong { buf, .. } => vec![buf],
            _ => Vec::new(),
        }
    }
}

impl fmt::Display for UringError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The rings are charged to the locked-memory limit of a user without CAP_IPC_LOCK,
            // and setup fails with ENOMEM when it is used up.
            UringError::Setup { source } if source.raw_os_error() == Some(libc::ENOMEM) => write!(
                f,
                "io_uring_setup: {} (the rings are charged to locked memory and RLIMIT_MEMLOCK is \
                 used up: raise it (`ulimit -l`, limits.conf memlock) or run with CAP_IPC_LOCK)",
                error_name(source)
            ),
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
                unsent,
            } => write!(
                f,
                "{} on {socket} after {sent} of {len} bytes: {} ({}); {} buffers handed back \
                 unsent",
                if *zerocopy {
                    "IORING_OP_SEND_ZC"
                } else {
                    "IORING_OP_SEND"
                },
                error_name(source),
                send_hint(source.raw_os_error()),
                unsent.len()
            ),
            UringError::TooLong { len, max, .. } => write!(
                f,
                "a datagram of {len} bytes: one io_uring send request carries at most {max} \
                 (the buffer is handed back unsent)"
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
            UringError::Timeout { .. } | UringError::TooLong { .. } => None,
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
            UringError::TooLong { .. } => io::ErrorKind::InvalidInput,
        };
        io::Error::new(kind, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setup_enomem_names_the_locked_memory_limit() {
        let enomem = UringError::Setup {
            source: io::Error::from_raw_os_error(libc::ENOMEM),
        };
        assert!(enomem.to_string().contains("RLIMIT_MEMLOCK"), "{enomem}");
        let enosys = UringError::Setup {
            source: io::Error::from_raw_os_error(libc::ENOSYS),
        };
        assert!(enosys.to_string().contains("kernel 6.0+"), "{enosys}");
    }
}
