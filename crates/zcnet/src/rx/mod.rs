//! TCP zero-copy receive: received pages mapped into a read-only window of the socket
//! (`TCP_ZEROCOPY_RECEIVE`), the unaligned rest copied by the kernel into a small copy buffer (copybuf)
//! or read with `recv`.
//!
//! A [`Receiver`] owns a connected [`std::net::TcpStream`] and hands out [`Chunk`]s in stream order: each
//! is either pages mapped from the socket ([`ChunkKind::Mapped`]) or bytes copied
//! ([`ChunkKind::Copybuf`], [`ChunkKind::Recv`]). A chunk borrows the receiver, so its pages cannot be
//! replaced while it is read; releasing it zaps them (`MADV_DONTNEED`) or leaves them for the next call
//! to replace ([`Release`]). [`RxStats`] counts mapped and copied bytes — the "% mmap'ed" of tcp_mmap.
//!
//! Pages map only when the sender's segments carry whole, page-aligned pages: on this kernel that takes a
//! MSG_ZEROCOPY sender and an MSS of one page ([`sender`] sets it); a plain `send()` sender's pages never
//! map, and the receiver then falls back to `recv` with the reason recorded ([`crate::Fallback`]).
//!
//! Mapping saves the copy but costs page-table work, which can cost more than the copy (on a VM whose
//! page tables are virtualised). The default mode, [`RxMode::Auto`], maps or copies, whichever costs
//! the receiving thread less CPU time per byte on the stream, measured as it goes; [`RxStats::auto`]
//! says what it chose and why ([`AutoChoice`]).
//!
//! For UDP, [`DatagramBatch`] ([`datagrams`]) takes a batch of datagrams per call and copies only the
//! bytes the caller keeps, while still counting each datagram's full length.
//!
//! ```no_run
//! use std::net::{IpAddr, Ipv4Addr};
//! use zcnet::rx::{ChunkKind, Receiver, RxConfig, sender};
//!
//! // A loopback pair whose segments carry one page each; `client` would be handed to a
//! // MSG_ZEROCOPY sender (zcnet::tx::TcpSender) for its pages to map.
//! let (client, server) = sender::connect_page_mss(IpAddr::V4(Ipv4Addr::LOCALHOST))?;
//! # drop(client);
//! let mut rx = Receiver::new(server, RxConfig::default())?;
//! while let Some(chunk) = rx.recv()? {
//!     let mapped = chunk.kind() == ChunkKind::Mapped;
//!     println!("{} bytes at {} ({})", chunk.len(), chunk.offset(), if mapped { "mapped" } else { "copied" });
//! }
//! println!("{:.1}% mapped, fallback: {:?}", rx.stats().mapped_pct(), rx.zerocopy_status());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod auto;
mod chunk;
#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub mod datagrams;
mod error;
pub(crate) mod measure;
mod receiver;
#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub mod sender;
#[cfg(not(feature = "bench-internals"))]
mod sender;
mod stats;
mod zcrx;
#[cfg(feature = "io-uring")]
pub(crate) mod zcrx_path;

pub use auto::{AutoChoice, AutoConfig, AutoReason};
pub use chunk::{Chunk, ChunkKind};
#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub use datagrams::{Datagram, DatagramBatch};
pub use error::{RxError, RxOp};
#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub use measure::measure_loopback;
pub use receiver::{Receiver, Release, RxConfig, RxMode, RxPath};
pub use stats::RxStats;
#[cfg(feature = "io-uring")]
pub use zcrx::ZcrxGrant;
pub use zcrx::{ZcrxBind, ZcrxConfig, ZcrxRefusal};
