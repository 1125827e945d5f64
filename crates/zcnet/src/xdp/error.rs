//! The one error type of the AF_XDP module: what zcnet tried, the errno the kernel gave, and what to do.

use std::fmt;
use std::io;

use crate::sys::errno::error_name;

/// A failed AF_XDP or XDP program operation.
///
/// Its message names the operation and interface, the errno (`EOPNOTSUPP`), and a hint: the missing
/// privilege (CAP_NET_RAW for AF_XDP sockets, CAP_BPF and CAP_NET_ADMIN for programs and links), the
/// missing interface, or the mode to use instead. A rejected program carries the verifier log.
#[derive(Debug)]
pub struct Error {
    operation: String,
    source: io::Error,
    hint: String,
    verifier_log: String,
}

/// Result of the AF_XDP module.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error of `operation` with the kernel's `source` error and a `hint` for the user.
    pub(crate) fn new(
        operation: impl Into<String>,
        source: io::Error,
        hint: impl Into<String>,
    ) -> Error {
        Error {
            operation: operation.into(),
            source,
            hint: hint.into(),
            verifier_log: String::new(),
        }
    }

    /// Same as [`Error::new`], with the hint chosen from the errno: a privilege error names
    /// `privilege`, `ENODEV` names the missing interface, other errnos use `otherwise`.
    pub(crate) fn from_errno(
        operation: impl Into<String>,
        source: io::Error,
        privilege: &str,
        otherwise: &str,
    ) -> Error {
        let hint = match source.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => {
                format!("needs {privilege}: run as root or grant the capability")
            }
            Some(libc::ENODEV | libc::ENXIO) => {
                "no such interface in this network namespace".into()
            }
            _ => otherwise.to_string(),
        };
        Error::new(operation, source, hint)
    }

    /// A call that cannot work as made (`EINVAL`), described by `operation`.
    pub(crate) fn usage(operation: String) -> Error {
        Error::new(operation, io::Error::from_raw_os_error(libc::EINVAL), "")
    }

    pub(crate) fn with_verifier_log(mut self, log: String) -> Error {
        self.verifier_log = log;
        self
    }

    /// The errno of the failed call, if the kernel gave one.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.source.raw_os_error()
    }

    /// The kind of the kernel's error (`PermissionDenied` without the privilege, `NotFound` …).
    pub fn kind(&self) -> io::ErrorKind {
        self.source.kind()
    }

    /// The kernel's error.
    pub fn io_error(&self) -> &io::Error {
        &self.source
    }

    /// The verifier log of a rejected program load (empty otherwise).
    pub fn verifier_log(&self) -> &str {
        &self.verifier_log
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.operation, error_name(&self.source))?;
        if !self.hint.is_empty() {
            write!(f, " ({})", self.hint)?;
        }
        if !self.verifier_log.is_empty() {
            write!(f, "\nverifier log:\n{}", self.verifier_log)?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

crate::error::into_io_error!(Error);
