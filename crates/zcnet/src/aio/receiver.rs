//! TCP zero-copy receive on tokio: the blocking [`Receiver`] over a non-blocking socket, woken by the
//! reactor.

use std::io::{self, BufRead};
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncBufRead, AsyncRead, Interest, ReadBuf};

use crate::rx::{Chunk, Receiver, RxError, RxOp, RxStats};
use crate::sys::reactor;

/// A [`Receiver`] driven by tokio: [`AsyncReceiver::recv`] yields the same borrowed [`Chunk`]s as
/// [`Receiver::recv`] — mapped pages, copybuf bytes or `recv` bytes, in stream order, each byte once —
/// waiting for the socket to become readable instead of blocking the thread.
///
/// Readiness is confirmed with a one-byte `MSG_PEEK` before each receive that would read the socket, so
/// a stale wake-up never turns into a `WouldBlock` error; an error the peek reads (a reset) is
/// returned, and again by every later chunk, as [`Receiver::recv`] does. Reading the stream behind the receiver's back
/// (through [`Receiver::get_ref`]) takes bytes out of its order; a chunk then may fail with `WouldBlock`.
///
/// On the io_uring zero-copy receive path ([`RxPath::Zcrx`](crate::rx::RxPath::Zcrx)) readiness
/// comes from the ring: an eventfd registered with it, which the kernel signals when a completion
/// or the deferred work that posts one waits. A completion taken while looking is kept for the next
/// chunk, so dropping the future loses nothing there either.
#[derive(Debug)]
pub struct AsyncReceiver {
    /// The socket's registration with the reactor (through a duplicate descriptor), or the ring's
    /// eventfd on the zcrx path.
    io: AsyncFd<OwnedFd>,
    rx: Receiver,
    /// Readiness comes from the zcrx ring's eventfd.
    #[cfg_attr(not(feature = "io-uring"), allow(dead_code))]
    ring: bool,
}

impl AsyncReceiver {
    /// Switches `rx`'s socket to non-blocking and registers it with the current tokio runtime (call
    /// inside one).
    ///
    /// # Errors
    ///
    /// Switching the socket or registering it fails.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, as tokio's registration does.
    pub fn new(mut rx: Receiver) -> io::Result<AsyncReceiver> {
        rx.set_nonblocking(true)?;
        #[cfg(feature = "io-uring")]
        if let Some(eventfd) = rx.zcrx_eventfd() {
            let io = reactor::register(eventfd?.as_fd(), Interest::READABLE)?;
            return Ok(AsyncReceiver { io, rx, ring: true });
        }
        let io = reactor::register(rx.as_fd(), Interest::READABLE)?;
        Ok(AsyncReceiver {
            io,
            rx,
            ring: false,
        })
    }

    /// The next chunk of the stream, `Ok(None)` at its end, as [`Receiver::recv`] without blocking
    /// the runtime. Cancel-safe: a dropped future has taken nothing from the stream (only a
    /// returned chunk consumes bytes).
    ///
    /// # Errors
    ///
    /// As [`Receiver::recv`]: a reset (`ConnectionReset`) after the bytes that came before it, a
    /// failed kernel call ([`RxError::op`] names it), or a failed wait on the reactor.
    ///
    /// ```
    /// use zcnet::aio::AsyncReceiver;
    /// use zcnet::rx::RxConfig;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use tokio::io::AsyncWriteExt;
    /// # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// # let mut peer = tokio::net::TcpStream::connect(listener.local_addr()?).await?;
    /// # let (stream, _) = listener.accept().await?;
    /// # peer.write_all(b"hello").await?;
    /// # drop(peer);
    /// let mut rx = AsyncReceiver::from_tokio(stream, RxConfig::default())?;
    /// let mut got = Vec::new();
    /// while let Some(chunk) = rx.recv().await? {
    ///     got.extend_from_slice(&chunk); // or use it in place
    /// }
    /// assert_eq!(got, b"hello");
    /// assert_eq!(rx.stats().bytes(), 5);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn recv(&mut self) -> Result<Option<Chunk<'_>>, RxError> {
        std::future::poll_fn(|cx| self.poll_receivable(cx)).await?;
        self.rx.recv()
    }

    /// Ready once a receive will not wait: bytes or the end are queued, or the receiver holds some.
    fn poll_receivable(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), RxError>> {
        #[cfg(feature = "io-uring")]
        if self.ring {
            while !self.rx.has_buffered() && !self.rx.zcrx_ready()? {
                let mut ready =
                    ready!(self.io.poll_read_ready(cx)).map_err(|e| RxError::new(RxOp::Poll, e))?;
                crate::sys::zcrx::drain_eventfd(ready.get_inner().as_fd());
                ready.clear_ready();
            }
            return Poll::Ready(Ok(()));
        }
        while !self.rx.has_buffered() {
            let mut ready =
                ready!(self.io.poll_read_ready(cx)).map_err(|e| RxError::new(RxOp::Poll, e))?;
            match self.rx.get_ref().peek(&mut [0u8]) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready.clear_ready(),
                // The peek took the socket's pending error (a reset): only it can report it.
                Err(e) => return Poll::Ready(Err(self.rx.record_end(RxError::new(RxOp::Recv, e)))),
                // Data or the end of the stream: the receive reports each.
                Ok(_) => break,
            }
        }
        Poll::Ready(Ok(()))
    }

    /// The receiver (its fallback reason, stream). There is no `get_mut`, for the reason
    /// [`Receiver`] has none, and because a receiver switched back to blocking
    /// ([`Receiver::set_nonblocking`]) would stall the runtime.
    pub fn get_ref(&self) -> &Receiver {
        &self.rx
    }

    /// The counters so far ([`Receiver::stats`]).
    pub fn stats(&self) -> &RxStats {
        self.rx.stats()
    }

    /// Deregisters the socket and returns the receiver (its socket stays non-blocking).
    pub fn into_inner(self) -> Receiver {
        self.rx
    }
}

/// Zero-copy reads in place, as the receiver's [`std::io::BufRead`]: `poll_fill_buf` lends the
/// next chunk (mapped pages, copybuf or `recv` bytes), `consume` advances through it, and a mapped
/// chunk's pages go back once it is consumed to its end. With `tokio::io::AsyncBufReadExt`
/// (`fill_buf().await`, `consume`), a framed protocol reads its headers and takes its payloads in
/// parts without copying them. Cancel-safe: a dropped `fill_buf` future consumed nothing.
impl AsyncBufRead for AsyncReceiver {
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        let this = self.get_mut();
        ready!(this.poll_receivable(cx))?;
        Poll::Ready(this.rx.fill_buf())
    }

    fn consume(self: Pin<&mut Self>, amt: usize) {
        self.get_mut().rx.consume(amt);
    }
}

/// Reads by copying out of the chunks (each byte once, into the caller's buffer); the zero-copy way
/// is [`AsyncBufRead`] or [`AsyncReceiver::recv`].
impl AsyncRead for AsyncReceiver {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let lent = ready!(self.as_mut().poll_fill_buf(cx))?;
        let n = lent.len().min(buf.remaining());
        buf.put_slice(&lent[..n]);
        self.consume(n);
        Poll::Ready(Ok(()))
    }
}
