//! Zero-copy send on tokio: the blocking [`Sender`]'s `try_send` driven by the reactor — the
//! socket's writable and error readiness on the `sendmsg` path, the ring's readable readiness on the
//! io_uring path — with a queue that makes dropped send futures harmless.

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::sys::{errqueue, reactor};
use crate::tx::reaper::{self, Reaped};
use crate::tx::{
    BufferPool, PooledBuf, SendBuf, SendError, SendPath, Sender, TrySendError, TxError, TxStats,
    Unsent, UnsentBuf, ZcSocket,
};

/// A [`Sender`] driven by tokio (see [`crate::aio`]), on either submission path: `send(buf).await`
/// waits for the kernel to take the buffer (send-buffer space, or room in the io_uring queue), never
/// for completions; completions are read when the socket reports error-queue readiness (or the
/// ring CQEs), as the path drains them on its own, and in [`AsyncSender::flush`].
///
/// # Cancellation
///
/// A send future that is dropped before its first poll sends nothing and drops its buffer. From its
/// first poll the buffer is the sender's: if the future is dropped before it completes — by
/// `select!`, a timeout, an aborted task, even while it waits for earlier queued buffers to go out
/// — the bytes the kernel has not taken stay queued with the buffer, and the next
/// [`send`](AsyncSender::send), [`flush`](AsyncSender::flush), [`close`](AsyncSender::close) or
/// [`take_from`](AsyncSender::take_from) sends them first, in order. The queue holds one buffer per
/// future dropped so ([`AsyncSender::queued`] counts them; a caller that keeps dropping sends to a
/// peer that does not read bounds it by waiting on [`flush`](AsyncSender::flush)).
///
/// When a queued buffer's send fails, the error hands back, in stream order, that buffer's rest
/// and every buffer queued after it ([`TxError::unsent`], as [`TxError::Stopped`] unless the error
/// carries a list of its own), and the queue is empty: nothing queued before the failure goes out
/// after it, and the caller holds every byte that did not go out. A failed
/// [`send`](AsyncSender::send) hands back its own buffer beside them ([`SendError`]). So a stream
/// never loses, repeats or reorders a byte whatever futures are dropped, and a buffer is released
/// only by the completions covering it (or, if nothing of it was lent, when it is handed back or
/// sent by copy).
///
/// # Drop
///
/// Dropping the `AsyncSender` loses nothing it accepted either, as closing a socket delivers its
/// send buffer, and never waits, on a runtime's thread or any other: what it still holds — rests
/// of dropped send futures, sends the io_uring path has not submitted, loans in flight — goes to
/// the process's reaper thread (see `# Drop` on [`Sender`]), which sends the rests in order, then
/// releases each buffer as its completions arrive, all within
/// [`crate::tx::SenderConfig::send_timeout`] (60 s when it is unset) from the drop. A runtime's
/// shutdown does not wait for it. When a send fails there, or the bound passes with rests unsent,
/// a TCP stream is reset, so that its peer never takes a stream cut short for a whole one, and
/// what is still lent then is leaked and counted ([`crate::tx::leaked`]); so is everything when
/// the reaper is full (1024 senders). [`close`](AsyncSender::close) to know that
/// everything arrived, or to get back what could not be sent; [`abort`](AsyncSender::abort) to
/// end at once.
pub struct AsyncSender<S: ZcSocket> {
    /// The socket's registration (a duplicate descriptor) for writable and error readiness.
    io: Readiness,
    /// Present until the drop hands it to [`Unfinished`] (or `close` takes it).
    tx: Option<Sender<S>>,
    /// Buffers of dropped send futures, with their unsent parts, oldest first.
    queue: Backlog<S>,
}

/// The rests of dropped send futures, oldest first.
type Backlog<S> = VecDeque<Box<dyn Queued<S>>>;

/// The unsent part of a buffer of any type, waiting in an [`AsyncSender`]'s queue.
trait Queued<S: ZcSocket>: Send {
    /// Tries to send the rest; gives itself back when the socket would block.
    fn resume(self: Box<Self>, tx: &mut Sender<S>) -> Result<(), Resume<S>>;

    /// The rest, for an error to hand back.
    fn hand_back(self: Box<Self>) -> UnsentBuf;
}

enum Resume<S: ZcSocket> {
    WouldBlock(Box<dyn Queued<S>>),
    /// The send failed: the error, and the part not sent (kept at the front of the queue).
    Failed(TxError, Box<dyn Queued<S>>),
}

impl<S: ZcSocket, B: SendBuf> Queued<S> for Unsent<B> {
    fn resume(self: Box<Self>, tx: &mut Sender<S>) -> Result<(), Resume<S>> {
        tx.try_send_unsent(*self).map_err(|e| match e {
            TrySendError::WouldBlock(unsent) => Resume::WouldBlock(Box::new(unsent)),
            TrySendError::Failed(e) => {
                let (error, unsent) = e.into_parts();
                Resume::Failed(error, Box::new(unsent))
            }
        })
    }

    fn hand_back(self: Box<Self>) -> UnsentBuf {
        let (buf, sent) = self.into_parts();
        UnsentBuf::new(buf, sent)
    }
}

/// A send future's own buffer: moved to the back of the queue if the future is dropped with part of
/// it unsent.
struct InFlight<'a, S: ZcSocket, B: SendBuf> {
    queue: &'a mut Backlog<S>,
    unsent: Option<Unsent<B>>,
}

impl<S: ZcSocket, B: SendBuf> Drop for InFlight<'_, S, B> {
    fn drop(&mut self) {
        if let Some(unsent) = self.unsent.take() {
            self.queue.push_back(Box::new(unsent));
        }
    }
}

/// The sender's registration with the reactor: the ring's descriptor on the io_uring path
/// (readable while CQEs wait, see [`Sender`]'s `AsFd`), else the socket's, renewed when tokio's
/// writable readiness went stale.
///
/// mio reads an epoll event carrying both `EPOLLOUT` and `EPOLLERR` as "write closed" (what a pipe
/// whose reader went away reports), and tokio keeps closed states until the registration ends. A
/// MSG_ZEROCOPY socket reports exactly that whenever completions are queued while it is writable —
/// so after such an event, writable readiness would stay set for good and a wait for send space would
/// spin. A new registration starts clean: the sender registers again before a wait that follows one.
struct Readiness {
    fd: AsyncFd<OwnedFd>,
    /// The last writable wake-up also said "write closed": renew before the next wait.
    stale: bool,
    /// The descriptor is an io_uring's.
    ring: bool,
}

impl Readiness {
    const INTEREST: Interest = Interest::WRITABLE.add(Interest::ERROR);

    fn new<S: ZcSocket>(tx: &Sender<S>) -> io::Result<Readiness> {
        #[cfg(feature = "io-uring")]
        let ring = matches!(tx.path(), SendPath::IoUring { .. });
        #[cfg(not(feature = "io-uring"))]
        let ring = false;
        let interest = if ring {
            Interest::READABLE
        } else {
            Self::INTEREST
        };
        Ok(Readiness {
            fd: reactor::register(tx.as_fd(), interest)?,
            stale: false,
            ring,
        })
    }

    /// Registers the socket anew if the last writable wake-up left a stale state behind.
    fn renew_if_stale(&mut self, socket: BorrowedFd<'_>) -> io::Result<()> {
        if self.stale {
            self.fd = reactor::register(socket, Self::INTEREST)?;
            self.stale = false;
        }
        Ok(())
    }
}

impl<S: ZcSocket> AsyncSender<S> {
    /// Registers `tx`'s socket with the current tokio runtime (call inside one). The sender's own
    /// sends use `MSG_DONTWAIT`, so the socket's blocking mode does not matter.
    ///
    /// Refused, with [`io::ErrorKind::Unsupported`] and a [`TxError::Unsupported`] inside, for a
    /// socket that cuts messages (AF_VSOCK seqpacket, [`ZcSocket::cuts_messages`]): a send that
    /// does not wait may enqueue part of a message and fail, so each message must be sent by a call
    /// that waits in the kernel for the peer's credit — for as long as the peer takes to read,
    /// which would hold a runtime thread. Send such messages with the blocking [`Sender`] on a
    /// thread of its own (`tokio::task::spawn_blocking`, for one).
    ///
    /// # Errors
    ///
    /// `Unsupported` for a socket that cuts messages (above), or the registration's error.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, as tokio's registration does.
    ///
    /// # Examples
    ///
    /// Send, flush (every buffer back) and close, with the peer counting the bytes:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use tokio::io::AsyncReadExt;
    /// use zcnet::aio::AsyncSender;
    /// use zcnet::tx::{SenderConfig, TcpSender};
    ///
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// let stream = std::net::TcpStream::connect(listener.local_addr()?)?;
    /// let (mut peer, _) = listener.accept().await?;
    /// let reader = tokio::spawn(async move {
    ///     let mut got = Vec::new();
    ///     peer.read_to_end(&mut got).await.map(|_| got.len())
    /// });
    /// let mut tx = AsyncSender::new(TcpSender::new(stream, SenderConfig::default()))?;
    /// for i in 0..4u8 {
    ///     tx.send(vec![i; 1 << 16]).await?; // lent until its completion
    /// }
    /// tx.flush().await?; // every buffer back
    /// drop(tx.close().await?); // the socket, deregistered; dropping it ends the stream
    /// assert_eq!(reader.await??, 4 << 16);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(tx: Sender<S>) -> io::Result<AsyncSender<S>> {
        if tx.get_ref().cuts_messages() {
            let e = TxError::Unsupported {
                what: "AsyncSender on an AF_VSOCK seqpacket socket",
                remedy: "each message is sent by one call that waits in the kernel until the peer \
                         has credit for all of it, which would hold a runtime thread: send with the \
                         blocking Sender on a thread of its own (tokio::task::spawn_blocking)",
            };
            return Err(io::Error::new(io::ErrorKind::Unsupported, e));
        }
        let io = Readiness::new(&tx)?;
        Ok(AsyncSender {
            io,
            tx: Some(tx),
            queue: VecDeque::new(),
        })
    }

    /// The registration, the sender and the queue, apart.
    fn parts(&mut self) -> (&mut Readiness, &mut Sender<S>, &mut Backlog<S>) {
        let AsyncSender { io, tx, queue } = self;
        (io, tx.as_mut().expect(PRESENT), queue)
    }

    fn tx(&self) -> &Sender<S> {
        self.tx.as_ref().expect(PRESENT)
    }

    /// Sends all of `buf` (a stream in as many calls as it takes, a datagram in one), after the rest
    /// of any dropped send; waits for send-buffer space, never for completions. The buffer stays lent
    /// until the completions covering it arrive. On failure the error hands back the part not sent
    /// (all of `buf` when a queued buffer failed, which comes back inside the error with the rest of
    /// the queue). See the type's docs for cancellation.
    ///
    /// # Errors
    ///
    /// [`SendError`]: the socket's error (a peer's reset: `ConnectionReset`) with the unsent part
    /// of `buf` inside. Example: [`AsyncSender::new`].
    pub async fn send<B: SendBuf>(&mut self, buf: B) -> Result<(), SendError<B>> {
        let (io, tx, queue) = self.parts();
        let unsent = Unsent::new(Arc::new(buf), 0);
        let mut mine = InFlight {
            queue,
            unsent: Some(unsent),
        };
        if let Err(e) = send_queued(io, tx, &mut *mine.queue).await {
            let unsent = mine.unsent.take().expect("still ours");
            return Err(SendError::new(e, unsent));
        }
        loop {
            let unsent = mine.unsent.take().expect("still ours");
            match tx.try_send_unsent(unsent) {
                Ok(()) => return Ok(()),
                Err(TrySendError::WouldBlock(unsent)) => mine.unsent = Some(unsent),
                Err(TrySendError::Failed(e)) => return Err(e),
            }
            if let Err(e) = writable(io, tx).await {
                let unsent = mine.unsent.take().expect("still ours");
                return Err(SendError::new(e, unsent));
            }
        }
    }

    /// Sends what dropped send futures left queued, then waits until every completion arrived and
    /// every lent buffer is released. Fails with the socket's error when the error queue signals one
    /// instead of completions, and with the error of a queued buffer whose send fails (handing back
    /// it and the rest of the queue). Bound it with `tokio::time::timeout`; a dropped flush loses
    /// nothing.
    ///
    /// # Errors
    ///
    /// [`TxError`]: the socket's error, or a queued buffer's failed send (with the unsent
    /// buffers inside). Example: [`AsyncSender::new`].
    pub async fn flush(&mut self) -> Result<(), TxError> {
        let (io, tx, queue) = self.parts();
        send_queued(io, tx, queue).await?;
        loop {
            match tx.flush(Duration::ZERO) {
                Ok(()) => return Ok(()),
                Err(TxError::Timeout { .. }) => {}
                Err(e) => return Err(e),
            }
            completions(io, tx).await?;
        }
    }

    /// Flushes and returns the socket (deregistered). On failure the error hands back, in stream
    /// order, every buffer not yet given to the kernel ([`TxError::unsent`]), and a TCP stream
    /// that then misses bytes is reset; the ones still lent stay lent for good, as
    /// [`Sender::close`] leaves them.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the sender: what it still holds is sent as its drop sends it (see
    /// `# Drop` above), within the same bound, and nothing is lost that the drop would not lose.
    ///
    /// # Errors
    ///
    /// As [`AsyncSender::flush`], with the unsent buffers in [`TxError::unsent`]. Example:
    /// [`AsyncSender::new`].
    pub async fn close(mut self) -> Result<S, TxError> {
        let flushed = self.flush().await;
        let mut tx = self.tx.take().expect(PRESENT);
        if let Err(e) = flushed {
            let e = tx.give_up(e);
            tx.end_now();
            return Err(e);
        }
        drop(self);
        tx.close(Duration::ZERO)
    }

    /// Ends the connection now, without a task or a wait: the buffers still queued are dropped
    /// unsent, a TCP stream is reset, and the buffers still lent are leaked (counted in
    /// [`crate::tx::leaked`]), as [`Sender::abort`]. [`close`](AsyncSender::close) delivers
    /// everything instead, and dropping the sender drains in the background (see `# Drop`).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use zcnet::aio::AsyncSender;
    /// use zcnet::tx::{SenderConfig, TcpSender, leaked};
    ///
    /// let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// let stream = std::net::TcpStream::connect(listener.local_addr()?)?;
    /// let (_peer, _) = listener.accept()?; // never reads
    /// let mut tx = AsyncSender::new(TcpSender::new(stream, SenderConfig::default()))?;
    /// tx.send(vec![1u8; 1 << 20]).await?;
    /// tx.abort(); // reset now, no wait; what the kernel still holds stays lent, and is counted
    /// println!("leaked so far: {:?}", leaked());
    /// # Ok(())
    /// # }
    /// ```
    pub fn abort(mut self) {
        if let Some(tx) = self.tx.take() {
            tx.abort();
        }
    }

    /// A free buffer of `pool`, sending the buffers of dropped send futures and reading completions
    /// as they arrive while the pool is dry. Fails with [`TxError::Timeout`] at once when this sender
    /// holds none of the pool's buffers — none queued, none lent — (waiting on it cannot bring one
    /// back), and with the error of a queued send that fails.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped future took no buffer from the pool, and what it was sending of the
    /// queue stays queued, in order, for the next call.
    ///
    /// # Errors
    ///
    /// [`TxError::Timeout`] when this sender holds none of the pool's buffers, or the error of a
    /// queued send or of the socket.
    ///
    /// # Examples
    ///
    /// Four pool buffers serve sixteen sends, each coming back as its completion arrives:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use tokio::io::AsyncReadExt;
    /// use zcnet::aio::AsyncSender;
    /// use zcnet::tx::{BufferPool, PoolConfig, SenderConfig, TcpSender};
    ///
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// let stream = std::net::TcpStream::connect(listener.local_addr()?)?;
    /// let (mut peer, _) = listener.accept().await?;
    /// let reader = tokio::spawn(async move {
    ///     let mut got = Vec::new();
    ///     peer.read_to_end(&mut got).await.map(|_| got.len())
    /// });
    /// let pool = BufferPool::new(PoolConfig::new(64 << 10, 4))?;
    /// let mut tx = AsyncSender::new(TcpSender::new(stream, SenderConfig::default()))?;
    /// for i in 0..16u8 {
    ///     let mut buf = tx.take_from(&pool).await?;
    ///     buf.fill_with(64 << 10, |b| b.fill(i));
    ///     tx.send(buf).await?;
    /// }
    /// drop(tx.close().await?);
    /// assert_eq!(reader.await??, 16 << 16);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn take_from(&mut self, pool: &BufferPool) -> Result<PooledBuf, TxError> {
        let started = std::time::Instant::now();
        loop {
            if let Some(buf) = pool.take() {
                return Ok(buf);
            }
            let (io, tx, queue) = self.parts();
            if !queue.is_empty() {
                // Queued buffers may be the pool's: once sent, they come back by copy or by
                // completion.
                send_queued(io, tx, queue).await?;
                continue;
            }
            if tx.holds_nothing() {
                return Err(TxError::Timeout {
                    what: "a free pool buffer",
                    outstanding: 0,
                    waited: started.elapsed(),
                });
            }
            completions(io, tx).await?;
        }
    }

    /// The sender: its stats, zero-copy status and socket.
    pub fn get_ref(&self) -> &Sender<S> {
        self.tx()
    }

    /// The sender, to change its settings. Its own waiting calls (`send`, `flush`, `set_cork` …)
    /// block the thread, a runtime's too: use this `AsyncSender`'s instead. Sending through it
    /// while rests of dropped send futures are queued ([`AsyncSender::queued`]) would put its
    /// bytes before theirs.
    pub fn get_mut(&mut self) -> &mut Sender<S> {
        self.tx.as_mut().expect(PRESENT)
    }

    /// The sender, deregistered from the runtime, with everything it holds; or, while rests of
    /// dropped send futures are still queued ([`AsyncSender::queued`]: only this `AsyncSender`
    /// sends them), this `AsyncSender` back, to [`flush`](AsyncSender::flush) first.
    pub fn into_inner(mut self) -> Result<Sender<S>, Box<AsyncSender<S>>> {
        if !self.queue.is_empty() {
            return Err(Box::new(self));
        }
        Ok(self.tx.take().expect(PRESENT))
    }

    /// Queues `buf` behind the rests of dropped send futures, for the next send, flush or close
    /// to send, in order (a [`crate::aio::SenderSink`]'s `start_send`).
    #[cfg(feature = "sink")]
    pub(super) fn push<B: SendBuf>(&mut self, buf: B) {
        self.queue
            .push_back(Box::new(Unsent::new(Arc::new(buf), 0)));
    }

    /// Sends what is queued as far as the kernel takes it now, without waiting; whether the queue
    /// is empty. A failed send empties it: the error hands back every buffer not sent, in order.
    #[cfg(feature = "sink")]
    pub(super) fn try_send_queued(&mut self) -> Result<bool, TxError> {
        let (_, tx, queue) = self.parts();
        while let Some(front) = queue.pop_front() {
            match front.resume(tx) {
                Ok(()) => {}
                Err(Resume::WouldBlock(rest)) => {
                    queue.push_front(rest);
                    return Ok(false);
                }
                Err(Resume::Failed(e, rest)) => {
                    queue.push_front(rest);
                    return Err(handing_back_queue(e, queue));
                }
            }
        }
        Ok(true)
    }

    /// Sends what is queued, waiting for the kernel to take each (cancel-safe: what is not sent
    /// stays queued, in order).
    #[cfg(feature = "sink")]
    pub(super) async fn send_queued(&mut self) -> Result<(), TxError> {
        let (io, tx, queue) = self.parts();
        send_queued(io, tx, queue).await
    }

    /// Whether nothing is queued and the sender holds no buffer (all lent ones are back).
    #[cfg(feature = "sink")]
    pub(super) fn holds_nothing(&self) -> bool {
        self.queue.is_empty() && self.tx().holds_nothing()
    }

    /// Sends the rests of dropped send futures, then (io_uring) submits what the sender queued and
    /// waits until the kernel took each — so that a socket option changed next applies to the
    /// sends made after it only. A send error on the way is returned (handing back what was not
    /// sent). Cancel-safe: what is not sent stays queued, in order.
    async fn settle(&mut self) -> Result<(), TxError> {
        let (io, tx, queue) = self.parts();
        send_queued(io, tx, queue).await?;
        while tx.queued() > 0 {
            ring_ready(&io.fd, tx).await?;
        }
        Ok(())
    }

    /// The counters so far.
    pub fn stats(&self) -> &TxStats {
        self.tx().stats()
    }

    /// Zero-copy ids sent and not yet completed.
    pub fn outstanding(&self) -> usize {
        self.tx().outstanding()
    }

    /// Buffers of dropped send futures whose bytes are still queued.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }
}

const PRESENT: &str = "the sender is present until the AsyncSender is dropped or closed";

impl AsyncSender<UdpSocket> {
    /// Sends `buf` as one datagram (or one GSO train, see
    /// [`set_gso_segment`](AsyncSender::set_gso_segment)) to `dest`, on an unconnected socket,
    /// after the rests of any dropped send; waits for send-buffer space, never for completions, as
    /// [`send`](AsyncSender::send) does. The `sendmsg` path only, as [`Sender::send_to`]: on
    /// io_uring it is refused with [`TxError::Unsupported`] and `buf` handed back.
    ///
    /// # Errors
    ///
    /// The send fails (the datagram comes back inside the error), or a queued rest's send fails
    /// (it and the rest of the queue come back inside, [`TxError::unsent`], and `buf` beside it).
    ///
    /// # Cancel safety
    ///
    /// A datagram goes out whole or not at all: a future dropped before it completed sent none of
    /// it (and drops `buf`); what it was sending of the queue stays queued, in order.
    pub async fn send_to<B: SendBuf>(
        &mut self,
        buf: B,
        dest: SocketAddr,
    ) -> Result<(), SendError<B>> {
        let (io, tx, queue) = self.parts();
        let mut datagram = Unsent::new(Arc::new(buf), 0);
        if let Err(e) = send_queued(io, tx, queue).await {
            return Err(SendError::new(e, datagram));
        }
        loop {
            match tx.try_send_datagram_to(datagram, dest) {
                Ok(()) => return Ok(()),
                Err(TrySendError::WouldBlock(unsent)) => datagram = unsent,
                Err(TrySendError::Failed(e)) => return Err(e),
            }
            if let Err(e) = writable(io, tx).await {
                return Err(SendError::new(e, datagram));
            }
        }
    }

    /// Corks the socket (`UDP_CORK`): the following sends append to one datagram, sent when it is
    /// uncorked (`false`), as [`Sender::set_cork`] — without holding the runtime's thread: the
    /// queued sends are sent first, and each lands in the datagram it was sent for.
    ///
    /// # Errors
    ///
    /// A queued send fails on the way (handing back what was not sent; the option is left as it
    /// was), or the socket refuses the option ([`TxError::SocketOption`]).
    ///
    /// # Cancel safety
    ///
    /// A future dropped before it completed left the option as it was; what it was sending stays
    /// queued, in order.
    pub async fn set_cork(&mut self, cork: bool) -> Result<(), TxError> {
        self.settle().await?;
        self.get_mut().set_cork(cork)
    }

    /// Sets the GSO segment size (`None`: off) for the datagrams sent from now on, as
    /// [`Sender::set_gso_segment`] — without holding the runtime's thread: the queued sends are
    /// sent first, under the size in force when they were sent.
    ///
    /// # Errors
    ///
    /// As [`set_cork`](AsyncSender::set_cork) (`UDP_SEGMENT`).
    ///
    /// # Cancel safety
    ///
    /// As [`set_cork`](AsyncSender::set_cork).
    pub async fn set_gso_segment(&mut self, segment: Option<u16>) -> Result<(), TxError> {
        self.settle().await?;
        self.get_mut().set_gso_segment(segment)
    }
}

impl<S: ZcSocket> Drop for AsyncSender<S> {
    fn drop(&mut self) {
        let Some(tx) = self.tx.take() else {
            return;
        };
        if self.queue.is_empty() {
            // The sender's own drop hands what is in flight to the reaper, without waiting.
            return;
        }
        let unfinished = Unfinished {
            tx,
            queue: std::mem::take(&mut self.queue),
        };
        // While unwinding, sending could panic again, and abort: it is ended at once. A reaper
        // that is full hands it back, to be ended so too.
        if !std::thread::panicking() {
            let _ = reaper::hand_over(Box::new(unfinished));
        }
    }
}

/// What a dropped [`AsyncSender`] still held when rests of dropped send futures were queued,
/// for the reaper to send, in order: those rests, then what the sender holds itself. When a send
/// fails, the stream is cut short: nothing after it goes out, and a TCP peer is told by a reset.
struct Unfinished<S: ZcSocket> {
    tx: Sender<S>,
    queue: Backlog<S>,
}

impl<S: ZcSocket> Reaped for Unfinished<S> {
    fn interest(&self) -> (BorrowedFd<'_>, i16) {
        if self.queue.is_empty() {
            return self.tx.reap_interest();
        }
        // Room for the rests: send-buffer space, or (io_uring) a chain's CQEs.
        let events = if matches!(self.tx.path(), SendPath::Sendmsg { .. }) {
            libc::POLLOUT
        } else {
            libc::POLLIN
        };
        (self.tx.as_fd(), events)
    }

    fn progress(&mut self) -> bool {
        while let Some(front) = self.queue.pop_front() {
            match front.resume(&mut self.tx) {
                Ok(()) => {}
                Err(Resume::WouldBlock(rest)) => {
                    self.queue.push_front(rest);
                    break;
                }
                Err(Resume::Failed(..)) => {
                    // What failed and what follows it never go out: dropped (the kernel holds
                    // none of it; what it took of the failed one stays lent to the sender).
                    self.tx.cut_short();
                    self.queue.clear();
                }
            }
        }
        self.tx.reap_progress() && self.queue.is_empty()
    }

    fn bound(&self) -> Duration {
        self.tx.drop_wait()
    }
}

impl<S: ZcSocket> Drop for Unfinished<S> {
    /// Done, past the reaper's bound, or refused by it: rests still queued are never sent, so a
    /// stream is cut short; the sender ends here (what it lends is leaked, not handed to the
    /// reaper again).
    fn drop(&mut self) {
        if !self.queue.is_empty() {
            self.tx.cut_short();
        }
        self.tx.end_now();
    }
}

/// Sends the queued rests of dropped send futures, oldest first; each stays queued until it is sent.
/// On an error the whole queue comes back inside it, in order, so that nothing queued goes out after
/// the failure.
async fn send_queued<S: ZcSocket>(
    io: &mut Readiness,
    tx: &mut Sender<S>,
    queue: &mut Backlog<S>,
) -> Result<(), TxError> {
    while let Some(front) = queue.pop_front() {
        let error = match front.resume(tx) {
            Ok(()) => continue,
            Err(Resume::WouldBlock(rest)) => {
                queue.push_front(rest);
                match writable(io, tx).await {
                    Ok(()) => continue,
                    Err(e) => e,
                }
            }
            Err(Resume::Failed(e, rest)) => {
                queue.push_front(rest);
                e
            }
        };
        return Err(handing_back_queue(error, queue));
    }
    Ok(())
}

/// `error`, handing back every buffer of `queue` (emptied), in order.
fn handing_back_queue<S: ZcSocket>(error: TxError, queue: &mut Backlog<S>) -> TxError {
    error.handing_back(Vec::new(), queue.drain(..).map(Queued::hand_back))
}

/// Waits until the socket may take more bytes, reading completions when the error queue signals.
async fn writable<S: ZcSocket>(io: &mut Readiness, tx: &mut Sender<S>) -> Result<(), TxError> {
    if io.ring {
        return ring_ready(&io.fd, tx).await;
    }
    io.renew_if_stale(tx.get_ref().fd())
        .map_err(|e| queue_error::<S>(e))?;
    loop {
        let mut ready = io
            .fd
            .ready(Readiness::INTEREST)
            .await
            .map_err(|e| queue_error::<S>(e))?;
        let state = ready.ready();
        if state.is_error() {
            // A socket error (a reset) also makes the socket writable (shut down): the caller's next
            // try reports it.
            tx.poll_completions()?;
        }
        ready.clear_ready();
        if state.is_writable() {
            // The caller's next try answers whether there is room; a newer edge survives the clear.
            io.stale = state.is_write_closed();
            return Ok(());
        }
    }
}

/// Waits until the ring has CQEs, reads them and submits what is queued.
///
/// Kernel behaviour relied on: the ring's descriptor polls readable while CQEs wait
/// (`io_uring_poll`), and posting one wakes its pollers. The ring runs with
/// `IORING_SETUP_COOP_TASKRUN`: a CQE is posted by task work on the thread that submitted the
/// request, at its next entry into the kernel; a thread asleep (in `epoll_wait`, a futex) is woken
/// for it (`TWA_SIGNAL_NO_IPI` wakes an interruptible sleep), so the edge comes whichever thread
/// waits.
async fn ring_ready<S: ZcSocket>(io: &AsyncFd<OwnedFd>, tx: &mut Sender<S>) -> Result<(), TxError> {
    // A CQE comes only for a request in flight: submit what is queued first (a queue shorter than
    // a batch waits for it), and wait only when no CQE was there to read.
    let seen = tx.ring_cqes();
    tx.poll_completions()?;
    if tx.ring_cqes() != seen {
        return Ok(());
    }
    let mut ready = io
        .ready(Interest::READABLE)
        .await
        .map_err(|source| TxError::Enter { source })?;
    tx.poll_completions()?;
    // A CQE posted after the read above is a newer edge, which the clear leaves set.
    ready.clear_ready();
    Ok(())
}

/// Waits for error-queue readiness (the ring's CQEs on io_uring) and reads the completions queued.
async fn completions<S: ZcSocket>(io: &Readiness, tx: &mut Sender<S>) -> Result<(), TxError> {
    if io.ring {
        return ring_ready(&io.fd, tx).await;
    }
    // What Nagle's algorithm holds back is sent first, as the blocking wait does (see
    // `ZcSocket::push_held`); a failure leaves it held until the peer's ACK, a slower wait.
    let _ = tx.get_ref().push_held();
    let mut ready = io
        .fd
        .ready(Interest::ERROR)
        .await
        .map_err(|e| queue_error::<S>(e))?;
    if read_completions(tx)? == 0 {
        ready.clear_ready();
    }
    Ok(())
}

/// Reads the completions queued now; when there were none, the error readiness came from a socket
/// error (a reset), which is returned.
fn read_completions<S: ZcSocket>(tx: &mut Sender<S>) -> Result<u64, TxError> {
    let released = tx.poll_completions()?;
    if released == 0
        && let Some(source) =
            errqueue::take_socket_error(tx.get_ref().fd()).map_err(|e| queue_error::<S>(e))?
    {
        return Err(TxError::Socket {
            socket: S::NAME,
            outstanding: tx.outstanding(),
            source,
        });
    }
    Ok(released)
}

fn queue_error<S: ZcSocket>(source: io::Error) -> TxError {
    TxError::Errqueue {
        socket: S::NAME,
        source,
    }
}

impl<S: ZcSocket + std::fmt::Debug> std::fmt::Debug for AsyncSender<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncSender")
            .field("tx", self.tx())
            .field("queued", &self.queue.len())
            .finish()
    }
}
