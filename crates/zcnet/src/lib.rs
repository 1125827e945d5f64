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
//! # Errors
//!
//! Every public error type has the same shape: `raw_os_error()` (the kernel's errno, when a
//! kernel call failed) and `kind()` (an [`std::io::ErrorKind`]: `ConnectionReset` for a peer's
//! reset, `TimedOut`, `PermissionDenied`, …); `Display` is the context (the call, the errno's
//! name, what to do) and `source()` the cause, never both; it converts into `io::Error` by
//! wrapping itself, so `get_ref()` and `downcast` give it back. [`Fallback`], the one answer to
//! "why does this copy?" (`zerocopy_status()` on [`tx::Sender`], [`rx::Receiver`] and
//! [`xdp::Socket`]), is an error of the same shape where zero-copy was required. Each goes
//! through `?` into a `Box<dyn Error>` (or an `io::Error`):
//!
//! ```
//! use std::error::Error;
//! use std::io;
//! use std::net::{SocketAddr, TcpListener, TcpStream};
//! use zcnet::tx::{BufferPool, PoolConfig, SenderConfig, TcpSender};
//! use zcnet::{ovs, rx, tx, xdp};
//!
//! // tx::TxError, tx::SendError<B>, tx::TrySendError<B>, and a Fallback where zero-copy is required.
//! fn send(tx: &mut TcpSender, pool: &BufferPool) -> Result<(), Box<dyn Error>> {
//!     tx.register_pool(pool)?;
//!     tx.send(vec![1u8; 4096])?;
//!     tx.try_send(vec![2u8; 4096])?;
//!     tx.flush(std::time::Duration::from_secs(5))?;
//!     Ok(())
//! }
//! // rx::RxError; "why does this copy?" is asked the same way of a sender, a receiver and an
//! // AF_XDP socket.
//! fn receive(stream: TcpStream) -> Result<usize, Box<dyn Error>> {
//!     let mut rx = rx::Receiver::new(stream, rx::RxConfig::default())?;
//!     if let Err(why) = rx.zerocopy_status() {
//!         eprintln!("receiving by copy: {why}");
//!     }
//!     Ok(rx.recv()?.map_or(0, |chunk| chunk.len()))
//! }
//! // xdp::Error, xdp::SendError, xdp::headers::{Malformed, BuildError}.
//! fn xdp_send(to: SocketAddr, frame: &mut [u8]) -> Result<usize, Box<dyn Error>> {
//!     let mut endpoint = xdp::UdpEndpoint::bind("zcnet-none0", to, Default::default())?;
//!     endpoint.send(to, 5, |payload| payload.copy_from_slice(b"hello"))?;
//!     let parsed = xdp::headers::parse(frame)?;
//!     let path = xdp::headers::Path {
//!         src_mac: parsed.src_mac,
//!         dst_mac: parsed.dst_mac,
//!         src: parsed.dst,
//!         dst: parsed.src,
//!     };
//!     Ok(xdp::headers::write_udp(frame, &path, 0, 1)?)
//! }
//! // ovs::OvsError, ovs::OdpParseError, ovs::ParseError.
//! fn ovs(flow: &str, upcall: &[u8]) -> Result<(), Box<dyn Error>> {
//!     let (key, _mask) = ovs::parse_key(flow)?;
//!     ovs::Datapath::open("zcnet-none")?.install_flow(&key, &[])?;
//!     ovs::parse_upcall(upcall, 0)?;
//!     Ok(())
//! }
//! // tx::ParseModeError.
//! fn mode(text: &str) -> Result<tx::Mode, Box<dyn Error>> {
//!     Ok(text.parse()?)
//! }
//!
//! let err = mode("fast").unwrap_err();
//! assert_eq!(err.to_string(), r#"unknown mode "fast": use copy, zerocopy or auto"#);
//! assert!(err.source().is_none());
//! let err = ovs("in_port(", &[]).unwrap_err();
//! let parse = err.downcast_ref::<ovs::OdpParseError>().expect("a flow text error");
//! assert_eq!(parse.kind(), io::ErrorKind::InvalidData);
//!
//! // On the sendmsg path no pool is registered: the Fallback says why, as an error.
//! let listener = TcpListener::bind("127.0.0.1:0")?;
//! let mut tx = TcpSender::new(TcpStream::connect(listener.local_addr()?)?, SenderConfig::default());
//! let pool = BufferPool::new(PoolConfig::default())?;
//! let err = send(&mut tx, &pool).unwrap_err();
//! let fallback = err.downcast_ref::<zcnet::Fallback>().expect("the reason");
//! assert_eq!(fallback.kind(), io::ErrorKind::Unsupported);
//!
//! // Into io::Error and back.
//! let io_err = io::Error::from(fallback.clone());
//! assert_eq!(io_err.kind(), io::ErrorKind::Unsupported);
//! assert!(io_err.get_ref().unwrap().is::<zcnet::Fallback>());
//! # let _ = (receive, xdp_send);
//! # Ok::<(), Box<dyn Error>>(())
//! ```
//!
//! # Configs and growing enums
//!
//! Every config (`SenderConfig`, `PolicyConfig`, `PoolConfig`, `RxConfig`, `AutoConfig`,
//! `ZcrxConfig`, the `xdp` and `ovs` configs, `ProbeOptions`, `LeaseSpec`, …) is
//! `#[non_exhaustive]`: a new field is not a breaking change, so a struct literal does not compile
//! outside zcnet. Start from `Default::default()` or a named constructor (`with_mode`, `bulk`,
//! `with_queues`, `PoolConfig::new`, `LeaseSpec::new`, …) and set the fields that differ. Enums
//! that will grow (why a send or receive copies, chunk kinds, upcall kinds, lease steps, observed
//! counters, …) are `#[non_exhaustive]` too: a `match` on one needs a `_` arm.
//!
//! ```
//! use std::time::Duration;
//! use zcnet::queue_lease::{FlowMatch, FlowProto, LeaseSpec};
//! use zcnet::rx::{AutoConfig, ChunkKind, RxConfig, RxMode, ZcrxConfig};
//! use zcnet::tx::{CopyReason, Mode, PolicyConfig, PoolConfig, SendPath, SenderConfig};
//! use zcnet::{ovs, probe, xdp};
//!
//! let mut sender = SenderConfig::with_mode(Mode::ZeroCopy);
//! sender.path = SendPath::SENDMSG;
//! sender.send_timeout = Some(Duration::from_secs(5));
//! sender.policy.threshold = 64 << 10;
//! let mut policy = PolicyConfig::default();
//! policy.window_bytes = 0;
//! let mut pool = PoolConfig::new(256 << 10, 32);
//! pool.huge_pages = true;
//!
//! let mut rx = RxConfig::bulk();
//! rx.mode = RxMode::ZeroCopy;
//! rx.auto = AutoConfig::default();
//! rx.auto.window_bytes = 1 << 20;
//! let _zcrx = RxConfig::default().with_path(zcnet::rx::RxPath::Zcrx(
//!     ZcrxConfig::no_device().with_area_len(4 << 20),
//! ));
//!
//! let mut endpoint = xdp::EndpointConfig::with_queues(vec![0, 1]);
//! endpoint.mode = xdp::Mode::Copy;
//! endpoint.umem.frame_size = xdp::FrameSize::Page;
//! let mut umem = xdp::UmemConfig::default();
//! umem.frame_count = 8192;
//! let mut socket = xdp::SocketConfig::default();
//! socket.multi_buffer = true;
//!
//! let mut datapath = ovs::DatapathConfig::default();
//! datapath.dispatch = ovs::Dispatch::PerCpu;
//! let mut limits = ovs::SwitchLimits::default();
//! limits.max_flows = 1024;
//! let mut probe_options = probe::ProbeOptions::default();
//! probe_options.ifaces = Some(vec!["lo".to_string()]);
//! let mut lease = LeaseSpec::new("eth1", 3);
//! lease.isolate = true;
//! lease.flow = Some(FlowMatch::new(FlowProto::Tcp, 9000));
//!
//! // A growing enum: the `_` arm covers what later versions add.
//! fn copies(reason: CopyReason) -> &'static str {
//!     match reason {
//!         CopyReason::Small => "below the threshold",
//!         CopyReason::Copied => "the kernel copied anyway",
//!         _ => "another reason",
//!     }
//! }
//! assert_eq!(copies(CopyReason::Mode), "another reason");
//! fn mapped(kind: ChunkKind) -> bool {
//!     match kind {
//!         ChunkKind::Mapped | ChunkKind::Zcrx => true,
//!         _ => false,
//!     }
//! }
//! assert!(!mapped(ChunkKind::Recv));
//! ```
//!
//! # Modules
//!
//! - [`tx`]: zero-copy senders for TCP, UDP and AF_VSOCK, with buffer loans and completion tracking,
//!   over `sendmsg(MSG_ZEROCOPY)` or io_uring (`SEND_ZC`, feature `io-uring`), chosen in the config.
//! - [`rx`]: TCP zero-copy receive into a mapped window.
//! - `aio` (feature `tokio`): `AsyncSender`, `AsyncReceiver` and `AsyncUdpEndpoint` on tokio's
//!   reactor, entered from tokio's own sockets (`aio::connect`, `aio::split`, `from_tokio`).
//! - [`xdp`]: AF_XDP sockets, UMEM, rings and the embedded XDP programs that feed them.
//! - [`observe`]: count zero-copy sends, completions, copies and mapped receives in any running
//!   process (or this one) with BPF programs on the kernel's tracepoints.
//! - [`ovs`]: Open vSwitch datapath client: flows, vports, and upcalls whose packets are not copied.
//! - [`probe`]: what this host supports, each feature measured by doing it.
//! - [`queue_lease`]: a NIC receive queue dedicated to one flow (header split, RSS, ntuple) for
//!   io_uring zero-copy receive or AF_XDP, undone exactly on drop, on error and after a crash.
//! - [`IfIndex`]: a network interface's index, as `xdp`, `ovs` and `queue_lease` take and give it.
//! - [`Fallback`]: why a zero-copy path is not used (the call, its errno, what to do), shared by all.
//! - `cost` (private): the auto modes' measured comparison of zero-copy and copy, shared by [`tx`]
//!   and [`rx`].
//! - `sys` (private to the crate): the kernel boundary; the only module with `unsafe` code.
//!
//! Feature `bench-internals` adds the plumbing of zcnet's own command and benches, hidden from
//! these docs and outside the API (no compatibility promise): the `packet` module (AF_PACKET
//! sockets and rings, the copying paths AF_XDP is compared with), `rx::sender` (page-sized MSS),
//! `rx::datagrams` (`recvmmsg` batches), `tx::errqueue` (the error queue read by hand), and a few
//! helpers (`probe::resource_usage`, `probe::tcp_send_state`, `rx::measure_loopback`,
//! `ovs::monotonic_ms`, `xdp::host_traffic`, `xdp::probe_tx_metadata_umem`).
#![deny(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, missing_debug_implementations)]

/// `AddAssign` for a struct of counters: each field of `other` added to this one's. The struct is
/// destructured without `..`, so that a counter added to it cannot be left out of the sum.
macro_rules! add_counters {
    ($(#[$doc:meta])* $ty:ident { $($field:ident),+ $(,)? }) => {
        $(#[$doc])*
        impl std::ops::AddAssign for $ty {
            fn add_assign(&mut self, other: $ty) {
                let $ty { $($field),+ } = other;
                $(self.$field += $field;)+
            }
        }
    };
}

#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod aio;
mod btf;
mod cost;
mod error;
mod fallback;
mod ifindex;
pub mod observe;
pub mod ovs;
#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub mod packet;
pub mod probe;
pub mod queue_lease;
pub mod rx;
mod sys;
pub mod tx;
pub mod xdp;

pub use fallback::{Cause, Fallback};
pub use ifindex::IfIndex;
