//! Zero-copy send and receive on tokio (feature `tokio`).
//!
//! [`AsyncSender`] and [`AsyncReceiver`] drive the blocking [`crate::tx::Sender`] (through its
//! non-blocking `try_send`, on either submission path) and [`crate::rx::Receiver`] (over a non-blocking socket) from tokio's
//! reactor: they share the same policy, completion tracking, chunks and statistics, and park the task
//! instead of the thread. Each registers a duplicate of its socket's descriptor with the reactor, so
//! they must be created inside a tokio runtime.
//!
//! Start from tokio's own sockets: [`connect`] (or [`split`] of an accepted
//! `tokio::net::TcpStream`) gives one connection as an [`AsyncReceiver`] and an [`AsyncSender`];
//! `AsyncSender::from_tokio` and `AsyncReceiver::from_tokio` take one direction. The receiver is a
//! `tokio::io::AsyncBufRead`: `fill_buf` lends the received pages in place and `consume` advances,
//! so a framed protocol reads headers across chunk boundaries and takes payloads without copying
//! them. An echo server and its client, every byte checked:
//!
//! ```
//! use std::io;
//! use tokio::io::AsyncBufReadExt;
//! use tokio::net::TcpListener;
//! use zcnet::aio::{self, AsyncReceiver};
//!
//! /// One frame (a 4-byte big-endian length, then the payload), whose payload is lent to `each`
//! /// in place, part by part; `None` at the end of the stream.
//! async fn frame(rx: &mut AsyncReceiver, mut each: impl FnMut(&[u8])) -> io::Result<Option<usize>> {
//!     let (mut header, mut got) = ([0u8; 4], 0);
//!     while got < 4 {
//!         let lent = rx.fill_buf().await?;
//!         match (lent.len(), got) {
//!             (0, 0) => return Ok(None),
//!             (0, _) => return Err(io::ErrorKind::UnexpectedEof.into()),
//!             (n, _) => {
//!                 let n = n.min(4 - got); // a header may be cut across chunks
//!                 header[got..got + n].copy_from_slice(&lent[..n]);
//!                 rx.consume(n);
//!                 got += n;
//!             }
//!         }
//!     }
//!     let len = u32::from_be_bytes(header) as usize;
//!     let mut left = len;
//!     while left > 0 {
//!         let lent = rx.fill_buf().await?;
//!         if lent.is_empty() {
//!             return Err(io::ErrorKind::UnexpectedEof.into());
//!         }
//!         let n = lent.len().min(left);
//!         each(&lent[..n]); // mapped pages or the copy buffer, not copied
//!         rx.consume(n); // a mapped chunk's pages go back once consumed
//!         left -= n;
//!     }
//!     Ok(Some(len))
//! }
//!
//! fn payload(i: usize, len: usize) -> Vec<u8> {
//!     (0..len).map(|k| (k * 31 + i * 7) as u8).collect()
//! }
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let listener = TcpListener::bind("127.0.0.1:0").await?;
//! let addr = listener.local_addr()?;
//! let server = tokio::spawn(async move {
//!     let (stream, _) = listener.accept().await?;
//!     let (mut rx, mut tx) = aio::split(stream, Default::default(), Default::default())?;
//!     loop {
//!         let mut echo = Vec::new();
//!         let Some(len) = frame(&mut rx, |part| echo.extend_from_slice(part)).await? else {
//!             break;
//!         };
//!         let mut reply = (len as u32).to_be_bytes().to_vec();
//!         reply.append(&mut echo); // an echo must keep the bytes: the one copy, by choice
//!         tx.send(reply).await?;
//!     }
//!     tx.close().await?; // every reply sent, every completion in
//!     Ok::<(), io::Error>(())
//! });
//!
//! let sizes = [0, 1, 3, 4095, 4096, 100_000, 1 << 20, 5];
//! let (mut rx, mut tx) = aio::connect(addr, Default::default(), Default::default()).await?;
//! let sending = tokio::spawn(async move {
//!     for (i, len) in sizes.into_iter().enumerate() {
//!         let mut frame = (len as u32).to_be_bytes().to_vec();
//!         frame.extend(payload(i, len));
//!         tx.send(frame).await?; // lent to the kernel, not copied
//!     }
//!     tx.close().await?.shutdown(std::net::Shutdown::Write)
//! });
//! for (i, len) in sizes.into_iter().enumerate() {
//!     let (expected, mut at) = (payload(i, len), 0);
//!     let got = frame(&mut rx, |part| {
//!         assert_eq!(part, &expected[at..at + part.len()], "frame {i} at {at}");
//!         at += part.len();
//!     })
//!     .await?;
//!     assert_eq!((got, at), (Some(len), len));
//! }
//! assert_eq!(frame(&mut rx, |_| ()).await?, None, "the server closed after the last echo");
//! sending.await??;
//! server.await??;
//! # Ok(())
//! # }
//! ```
//!
//! `AsyncSender` is not an `AsyncWrite`, on purpose: `poll_write` borrows the caller's bytes only
//! for the call, while a zero-copy send lends them to the kernel until its completion arrives,
//! after the call returned — so an `AsyncWrite` would have to copy them into a buffer of its own,
//! the copy zcnet exists to avoid. Hand it owned buffers instead (`Vec<u8>`, `bytes::Bytes`, a
//! pooled buffer), which it gives back after their completions — one at a time with
//! [`AsyncSender::send`], or as a `futures::Sink` of owned buffers with `AsyncSender::into_sink`
//! (feature `sink`).
//!
//! Kernel behaviour relied on: a socket's poll mask has `EPOLLERR` while its error queue holds a
//! message (`sock_poll`: `sk_err` or a non-empty `sk_error_queue`), and queueing a zero-copy completion
//! wakes its waiters (`sk_error_report`); epoll always reports `EPOLLERR` whatever the interest — so
//! edge-triggered epoll, which tokio uses, reports each new batch of completions as error readiness
//! (`Interest::ERROR`). `EPOLLOUT` reports send-buffer space, `EPOLLIN` received data. Zero-copy data
//! is charged to the send buffer only by its skb heads, so a zero-copy sender waits for space far less
//! often than a copying one.
//!
//! [`AsyncUdpEndpoint`] serves a UDP port over AF_XDP ([`crate::xdp::UdpEndpoint`]) from tokio: it
//! waits for received frames on every queue's socket and for tx room on the sending one.

mod entry;
mod receiver;
mod sender;
#[cfg(feature = "sink")]
mod sink;
mod udp_endpoint;

pub use entry::{TokioSocket, connect, split};
pub use receiver::AsyncReceiver;
pub use sender::AsyncSender;
#[cfg(feature = "sink")]
#[cfg_attr(docsrs, doc(cfg(feature = "sink")))]
pub use sink::SenderSink;
pub use udp_endpoint::AsyncUdpEndpoint;
