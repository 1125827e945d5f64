//! zcnet: Linux zero-copy networking made practical from user space.
//!
//! The kernel's zero-copy paths each come with rules that are easy to break: a buffer handed to a
//! MSG_ZEROCOPY send must not change until its completion arrives on the error queue, pages mapped by
//! TCP_ZEROCOPY_RECEIVE must be released before the window is reused, an AF_XDP frame belongs either to
//! user space or to the kernel. zcnet encodes those rules in types, falls back to copying when the
//! kernel cannot do better (and records why), and measures what each path really costs.
//!
//! # Where to start
//!
//! | to … | blocking | async, on tokio (feature `tokio`) |
//! |---|---|---|
//! | send on a TCP stream | [`tx::TcpSender`] | `aio::AsyncSender<TcpStream>` |
//! | send UDP datagrams (optionally GSO) | [`tx::UdpSender`] | `aio::AsyncSender<UdpSocket>` |
//! | send on an AF_VSOCK socket | [`tx::VsockSender`] | `aio::AsyncSender<VsockSocket>` |
//! | receive a TCP stream without copying | [`rx::Receiver`] | `aio::AsyncReceiver` |
//! | serve a UDP port over AF_XDP | [`xdp::UdpEndpoint`] | `aio::AsyncUdpEndpoint` |
//! | receive or send raw frames on a NIC queue | [`xdp::Socket`] | — |
//!
//! A sender takes ownership of what it sends and gives it back only after the kernel's completion:
//! a `Vec<u8>`, `Box<[u8]>`, `Arc<[u8]>`, a `bytes::Bytes` (feature `bytes`; one `Bytes` can be lent
//! to many connections at once) or a page-aligned [`tx::PooledBuf`] from a [`tx::BufferPool`]
//! ([`tx::Sender::take_from`] recycles buffers as completions arrive). The async types drive
//! the same senders and receivers and must be created inside a tokio runtime. `examples/` has an
//! object server (one `Bytes` per object lent to every client, async), a zero-copy receive stream
//! hasher, and this one:
//!
//! ```
//! use std::io::Read;
//! use std::net::{TcpListener, TcpStream};
//! use std::time::Duration;
//! use zcnet::tx::{SenderConfig, TcpSender};
//!
//! let listener = TcpListener::bind("127.0.0.1:0")?;
//! let addr = listener.local_addr()?;
//! let reader = std::thread::spawn(move || listener.accept()?.0.read_to_end(&mut Vec::new()));
//! let mut tx = TcpSender::new(TcpStream::connect(addr)?, SenderConfig::default());
//! for i in 0..16u8 {
//!     tx.send(vec![i; 1 << 20])?; // lent to the kernel until its completion
//! }
//! tx.flush(Duration::from_secs(5))?; // every buffer back
//! drop(tx); // closes the connection
//! assert_eq!(reader.join().unwrap()?, 16 << 20);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Modules
//!
//! - [`tx`]: zero-copy senders for TCP, UDP and AF_VSOCK, with buffer loans and completion tracking,
//!   over `sendmsg(MSG_ZEROCOPY)` or io_uring (`SEND_ZC`, feature `io-uring`), chosen in the config.
//! - [`rx`]: TCP zero-copy receive into a mapped window.
//! - `aio` (feature `tokio`): `AsyncSender`, `AsyncReceiver` and `AsyncUdpEndpoint` on tokio's
//!   reactor.
//! - [`xdp`]: AF_XDP sockets, UMEM, rings and the embedded XDP programs that feed them.
//! - [`ovs`]: Open vSwitch datapath client: flows, vports, and upcalls whose packets are not copied.
//! - [`probe`]: what this host supports, each feature measured by doing it.
//! - [`Fallback`]: why a zero-copy path is not used (the call, its errno, what to do), shared by all.
//! - `cost` (private): the auto modes' measured comparison of zero-copy and copy, shared by [`tx`]
//!   and [`rx`].
//! - `sys` (private to the crate): the kernel boundary; the only module with `unsafe` code.
#![deny(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations)]

#[cfg(feature = "tokio")]
pub mod aio;
#[cfg(feature = "io-uring")]
mod btf;
mod cost;
mod fallback;
pub mod ovs;
pub mod packet;
pub mod probe;
pub mod rx;
mod sys;
pub mod tx;
pub mod xdp;

pub use fallback::{Cause, Fallback};
