//! AF_XDP: a UMEM of frames shared with the kernel, ring halves, sockets bound to one queue of an
//! interface, and the embedded XDP programs that steer frames to them.
//!
//! - [`XdpProgram`]: a few instructions of typed bytecode ([`ProgramKind`]) loaded with `bpf(2)` —
//!   nothing beyond the kernel is needed at build or run time — attached with `BPF_LINK_CREATE`
//!   (kernel 5.9+). The returned [`XdpLink`] owns the link descriptor, so no program outlives its
//!   owner: not on drop, not on panic, not when the process is killed.
//! - [`Umem`]: the frame area. Frames are owned by the type system: a [`Frame`] token (neither `Copy`
//!   nor `Clone`) is the only way to a frame's bytes; it comes from the free list ([`Umem::alloc`]) or
//!   an rx ring ([`Socket::receive`]) and is consumed by a fill ring ([`Socket::fill_with`]), a tx
//!   ring ([`Socket::transmit`]) or the free list ([`Umem::release`]). A descriptor the kernel
//!   returns for a frame it was not lent is rejected, never turned into a second token, and ring
//!   indices the kernel could not have written are clamped.
//! - [`Socket`]: one kernel socket, [`Socket::bind`] in [`Mode::Auto`], [`Mode::Copy`] or
//!   [`Mode::ZeroCopy`]; why it copies is a [`crate::Fallback`] ([`Socket::zerocopy_status`]);
//!   [`probe_zero_copy`] asks just that question; [`TxMetadata`] says which AF_XDP TX metadata
//!   (checksum, timestamp, launch time) a bound mode gets on an interface. Sockets share a UMEM (`XDP_SHARED_UMEM`) by binding
//!   with the same one; the sockets on one queue share its fill and completion rings, which stay
//!   open while any of them lives. Dropping the last socket of a queue unbinds it, and the frames
//!   lent there come back when the UMEM binds that queue again.
//! - [`Packet`]: with multi-buffer ([`SocketConfig::multi_buffer`]), a packet larger than a frame
//!   in several frames ([`Socket::receive_packets`]).
//!
//! - [`Broker`] and [`BrokerClient`]: the privilege split — a privileged broker sets queues up and
//!   passes their descriptors to workers that run a [`Socket`] with no capability; it also
//!   registers zcrx instances (feature `io-uring`) for workers that receive through them
//!   ([`Receiver::with_zcrx_grant`](crate::rx::Receiver::with_zcrx_grant)).
//! - [`UdpEndpoint`]: UDP on AF_XDP for applications — one local address and port served from
//!   queues of an interface, datagrams received with their payloads in the UMEM frames and
//!   checksums verified, sent with payloads written in place and headers, checksums and the next hop
//!   (route and neighbour tables over route netlink) filled in; [`headers`] parses and builds the
//!   Ethernet, IPv4/IPv6 and UDP headers it uses.
//!
//! A receiver, in short: `Umem::new`, `Socket::bind`, `socket.fill(&mut umem, n)`, attach
//! `XdpProgram::redirect_to_xsk` (with a [`FrameMatch`]: other frames go on to the stack) and insert
//! the socket into its map, then loop on `socket.receive(&mut umem, n, &mut frames)`, reading each
//! frame with `umem.bytes(&frame)` and recycling them with `socket.fill_with(&mut umem, &mut frames)`.

mod broker;
mod error;
mod frame_match;
pub mod headers;
#[cfg(feature = "bench-internals")]
mod live;
mod mode;
mod packet;
mod program;
mod queue;
mod ring;
mod route;
mod send_error;
mod socket;
mod stats;
pub(crate) mod tx_metadata;
mod udp_endpoint;
mod umem;

pub use broker::{
    Broker, BrokerClient, BrokerConfig, BrokerError, Event as BrokerEvent, QueueRequest, Refusal,
};
pub use error::{Error, Result};
pub use frame_match::FrameMatch;
#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub use live::host_traffic;
pub use mode::{BoundMode, Mode};
pub use packet::{Packet, PacketFrame};
pub use program::{AttachMode, ProgramKind, XdpLink, XdpProgram, XskMap, interface_index};
pub use send_error::SendError;
pub use socket::{BusyPoll, Socket, SocketConfig, probe_zero_copy};
pub use stats::Statistics;
pub use tx_metadata::TxMetadata;
#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub use tx_metadata::probe_umem as probe_tx_metadata_umem;
pub use udp_endpoint::{
    Checksums, Datagram, EndpointConfig, EndpointStats, Received, SendBatch, UdpEndpoint,
};
pub use umem::{Frame, FrameSize, Reclaimed, Umem, UmemConfig};
