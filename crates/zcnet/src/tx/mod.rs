//! Zero-copy send over TCP, UDP (optionally with GSO) and AF_VSOCK, on one of two submission paths.
//!
//! A [`Sender`] owns a connected socket. [`Sender::send`] takes ownership of a byte container
//! ([`SendBuf`]: `Vec<u8>`, `Box<[u8]>`, `Arc<[u8]>`, a pooled page-aligned [`PooledBuf`], …) and lends
//! it to the kernel; the buffer is dropped — a pooled one goes back to its [`BufferPool`] — only when the
//! completion covering it arrives. A per-send policy ([`PolicyConfig`]) decides between zero-copy and copy (size
//! threshold, copied completions, `ENOBUFS` back-off and, in [`Mode::Auto`], the measured CPU cost per
//! byte of each), and [`TxStats`] counts every decision and completion.
//!
//! [`SenderConfig::path`] chooses how sends reach the kernel: [`SendPath::Sendmsg`] (`sendmsg` with
//! `MSG_ZEROCOPY`, completions on the socket's error queue: `sendmsg.rs`) or `SendPath::IoUring`
//! (feature `io-uring`: `IORING_OP_SEND_ZC` requests in linked chains, completions as notification
//! CQEs: `uring/`). Both feed the same completion tracker, policy and stats, and keep one contract
//! (see [`Sender`]): a failed send hands back what was not sent, and one [`TxError`] says why.
//!
//! Kernel behaviour relied on by the `sendmsg` path (Documentation/networking/msg_zerocopy.rst):
//! `SO_ZEROCOPY` opts a socket in; each successful `sendmsg(MSG_ZEROCOPY)` with data takes the next u32 id (a failed one takes none);
//! completions are inclusive id ranges on the error queue, flagged `SO_EE_CODE_ZEROCOPY_COPIED` when the
//! kernel copied anyway — always, when the receiver is a local socket. A sender numbers its sends from
//! 0, so it sends zero-copy only on a socket that did not have `SO_ZEROCOPY` yet (one no sender used), and
//! stops releasing buffers if a completion ever names an id it never registered.
//!
//! ```no_run
//! use std::net::TcpStream;
//! use std::time::Duration;
//! use zcnet::tx::{SenderConfig, TcpSender};
//!
//! let stream = TcpStream::connect("127.0.0.1:9000")?;
//! let mut tx = TcpSender::new(stream, SenderConfig::default());
//! tx.send(vec![7u8; 1 << 20])?;
//! tx.flush(Duration::from_secs(5))?;
//! println!("zero-copied ids {}, copied ids {}", tx.stats().zc_ids, tx.stats().copied_ids);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub(crate) mod budget;
mod buffer;
mod claim;
mod erased;
pub(crate) mod error;
#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub mod errqueue;
#[cfg(test)]
mod errqueue_room_tests;
mod latency;
mod leak;
mod policy;
mod pool;
pub(crate) mod reaper;
mod sender;
mod sendmsg;
mod socket;
mod stats;
mod timestamps;
mod tracker;
#[cfg(test)]
mod tracker_hostile_tests;
mod unsent;
#[cfg(feature = "io-uring")]
mod uring;
pub mod vsock;

pub use budget::{MemlockBudget, memlock_reason};
pub use buffer::SendBuf;
pub use erased::UnsentBuf;
pub use error::{TxError, enobufs_reason};
pub use latency::{Histogram, TxLatency};
pub use leak::{Leaked, leaked};
pub use policy::{AutoChoice, AutoReason, CopyReason, Mode, ParseModeError, PolicyConfig};
#[cfg(feature = "io-uring")]
pub(crate) use policy::{Decision, Policy};
pub use pool::{BufferPool, FrozenBuf, PoolConfig, PooledBuf};
pub use reaper::{Reaping, reaping};
pub use sender::{SendPath, Sender, SenderConfig};
pub use socket::ZcSocket;
pub use stats::TxStats;
pub use tracker::Completion;
#[cfg(feature = "io-uring")]
pub(crate) use tracker::CompletionTracker;
pub use unsent::{SendError, TrySendError, Unsent};
pub use vsock::VsockSocket;

/// A zero-copy sender over a connected TCP stream (IPv4 or IPv6).
pub type TcpSender = Sender<std::net::TcpStream>;
/// A zero-copy sender over a UDP socket (connected, or with a destination per send on the
/// `sendmsg` path; optional GSO).
pub type UdpSender = Sender<std::net::UdpSocket>;
/// A MSG_ZEROCOPY sender over a connected AF_VSOCK stream or seqpacket socket.
pub type VsockSender = Sender<VsockSocket>;
