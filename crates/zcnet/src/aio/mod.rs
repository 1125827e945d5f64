//! Zero-copy send and receive on tokio (feature `tokio`).
//!
//! [`AsyncSender`] and [`AsyncReceiver`] drive the blocking [`crate::tx::Sender`] and
//! [`crate::rx::Receiver`] over non-blocking sockets registered with tokio's reactor (`AsyncFd`); they
//! share the same policy, completion tracking, chunks and statistics, and park the task instead of the
//! thread. They must be created inside a tokio runtime.
//!
//! Kernel behaviour relied on: a socket's poll mask has `EPOLLERR` while its error queue holds a
//! message (`sock_poll`: `sk_err` or a non-empty `sk_error_queue`), and queueing a zero-copy completion
//! wakes its waiters (`sk_error_report`) — so edge-triggered epoll, which tokio uses, reports each new
//! batch of completions as error readiness (`Interest::ERROR`). `EPOLLOUT` reports send-buffer space;
//! `EPOLLIN` received data.
//!
//! Not here: an async AF_XDP socket. Its rings are being rebuilt around frame ownership tokens
//! ([`crate::xdp`]); an async wrapper (fill/rx on `EPOLLIN`, tx kicks with need_wakeup) belongs on the
//! new ring types rather than on the ones being replaced.

mod receiver;
mod sender;

pub use receiver::AsyncReceiver;
pub use sender::AsyncSender;
