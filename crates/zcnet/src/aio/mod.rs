//! Zero-copy send and receive on tokio (feature `tokio`).
//!
//! [`AsyncSender`] and [`AsyncReceiver`] drive the blocking [`crate::tx::Sender`] (through its
//! non-blocking `try_send`, on either submission path) and [`crate::rx::Receiver`] (over a non-blocking socket) from tokio's
//! reactor: they share the same policy, completion tracking, chunks and statistics, and park the task
//! instead of the thread. Each registers a duplicate of its socket's descriptor with the reactor, so
//! they must be created inside a tokio runtime.
//!
//! ```no_run
//! use std::net::TcpStream;
//! use bytes::Bytes;
//! use zcnet::aio::AsyncSender;
//! use zcnet::tx::{SenderConfig, TcpSender};
//!
//! # async fn serve(object: Bytes) -> Result<(), Box<dyn std::error::Error>> {
//! let stream = TcpStream::connect("127.0.0.1:9000")?;
//! let mut tx = AsyncSender::new(TcpSender::new(stream, SenderConfig::default()))?;
//! tx.send(object.clone()).await?; // the same Bytes can be lent to every connection
//! tx.flush().await?; // every completion in, every lent reference dropped
//! # Ok(())
//! # }
//! ```
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

mod receiver;
mod sender;
mod udp_endpoint;

pub use receiver::AsyncReceiver;
pub use sender::AsyncSender;
pub use udp_endpoint::{AsyncUdpEndpoint, FULL_RING_TRIES};
