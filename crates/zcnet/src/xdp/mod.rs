//! AF_XDP: embedded XDP programs and the links that attach them.
//!
//! The programs are a few instructions of typed bytecode ([`ProgramKind`]) loaded with `bpf(2)`, so
//! nothing beyond the kernel is needed at build or run time. They are attached with `BPF_LINK_CREATE`
//! (kernel 5.9+): the returned [`XdpLink`] owns the link descriptor, so no program outlives its owner —
//! not on drop, not on panic, not when the process is killed.

mod error;
mod program;

pub use error::{Error, Result};
pub use program::{AttachMode, ProgramKind, XdpLink, XdpProgram, XskMap, interface_index};
