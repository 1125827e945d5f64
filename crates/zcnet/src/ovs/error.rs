//! Errors of the datapath client: the refused call, its errno, and what the user can do.

use std::fmt;
use std::io;

use crate::sys::errno::error_name;

/// A datapath request the kernel refused (or whose reply made no sense).
#[derive(Debug)]
pub struct OvsError {
    call: &'static str,
    source: io::Error,
}

impl OvsError {
    pub(crate) fn new(call: &'static str, source: io::Error) -> OvsError {
        OvsError { call, source }
    }

    /// The request that failed (`"OVS_DP_CMD_NEW"`, `"resolve ovs_datapath"`).
    pub fn call(&self) -> &'static str {
        self.call
    }

    /// The errno, when the kernel returned one.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.source.raw_os_error()
    }

    /// What the user can do about it.
    pub fn remedy(&self) -> &'static str {
        match self.source.raw_os_error() {
            Some(libc::ENOENT) if self.call.starts_with("resolve") => {
                "the openvswitch kernel module is not loaded (modprobe openvswitch)"
            }
            Some(libc::EPERM) => "changing a datapath needs CAP_NET_ADMIN (run as root)",
            Some(libc::ENODEV) => "no such datapath or port (it may have been deleted)",
            Some(libc::EEXIST) => "something of that name exists already",
            Some(libc::EBUSY) => "the device belongs to another master (bridge, bond or datapath)",
            Some(libc::EINVAL) => "the kernel rejected the request's attributes",
            None if self.source.kind() == io::ErrorKind::InvalidInput => {
                "netlink cannot carry it: an attribute (a packet to execute included) holds at most \
                 65531 bytes"
            }
            _ => "see the errno",
        }
    }
}

impl fmt::Display for OvsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} ({}): {}",
            self.call,
            error_name(&self.source),
            self.source,
            self.remedy()
        )
    }
}

impl std::error::Error for OvsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Adds the call's name to an `io::Result`.
pub(crate) trait Call<T> {
    fn call(self, call: &'static str) -> Result<T, OvsError>;
}

impl<T> Call<T> for io::Result<T> {
    fn call(self, call: &'static str) -> Result<T, OvsError> {
        self.map_err(|e| OvsError::new(call, e))
    }
}
