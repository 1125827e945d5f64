//! The data path asked of an AF_XDP bind, and the one the kernel gave.

use std::fmt;

/// Which data path to ask the kernel for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Try zero-copy; when the driver refuses, bind in copy mode and record why.
    Auto,
    /// Copy mode (`XDP_COPY`): the kernel copies each frame between its buffers and the UMEM. Works on
    /// every interface with XDP.
    Copy,
    /// Zero-copy (`XDP_ZEROCOPY`): the driver receives into and sends from the UMEM directly. Fails with
    /// `EOPNOTSUPP` when the driver lacks it (veth does).
    ZeroCopy,
}

/// The data path a socket actually got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundMode {
    /// The kernel copies frames.
    Copy,
    /// The driver uses the UMEM directly.
    ZeroCopy,
}

impl BoundMode {
    /// `"copy"` or `"zerocopy"`.
    pub fn as_str(self) -> &'static str {
        match self {
            BoundMode::Copy => "copy",
            BoundMode::ZeroCopy => "zerocopy",
        }
    }
}

impl fmt::Display for BoundMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
