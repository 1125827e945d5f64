//! AF_XDP: a UMEM of frames shared with the kernel, ring halves, sockets bound to one queue of an
//! interface, and the embedded XDP programs that steer frames to them.
//!
//! - [`XdpProgram`]: a few instructions of typed bytecode ([`ProgramKind`]) loaded with `bpf(2)` —
//!   nothing beyond the kernel is needed at build or run time — attached with `BPF_LINK_CREATE`
//!   (kernel 5.9+). The returned [`XdpLink`] owns the link descriptor, so no program outlives its
//!   owner: not on drop, not on panic, not when the process is killed.
//! - [`Umem`]: the frame area and its fill and completion rings; every descriptor read back from the
//!   kernel is validated ([`Umem::validate`]) before its bytes become a slice.
//! - [`Producer`]/[`Consumer`]: ring halves with batch guards ([`Reservation`], [`Batch`]).
//! - [`Socket`]: [`Socket::bind`] in [`Mode::Auto`], [`Mode::Copy`] or [`Mode::ZeroCopy`]; Auto records
//!   why it copies ([`Socket::fallback`], a [`crate::Fallback`]); [`probe_zero_copy`] asks just that question.
//!
//! A receiver, in short: `Umem::new`, `Socket::bind`, `umem.fill(n)`, attach
//! `XdpProgram::redirect_to_xsk` (with a [`FrameMatch`]: the rest goes to the stack) and insert the socket into its map, then loop on `socket.rx().peek(n)`,
//! reading frames with `umem.data(&umem.validate(desc)?)` and recycling them with `umem.fill_with`.

mod error;
pub mod frame;
mod frame_match;
mod live;
mod program;
mod ring;
mod socket;
mod stats;
mod umem;

pub use error::{Error, Result};
pub use frame_match::FrameMatch;
pub use live::host_traffic;
pub use program::{AttachMode, ProgramKind, XdpLink, XdpProgram, XskMap, interface_index};
pub use ring::{Batch, Consumer, Desc, Entry, Producer, Reservation};
pub use socket::{BoundMode, Mode, Socket, SocketConfig, probe_zero_copy};
pub use stats::Statistics;
pub use umem::{Frame, FrameSize, InvalidDescriptor, Umem, UmemConfig};
