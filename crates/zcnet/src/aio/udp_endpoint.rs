//! The AF_XDP UDP endpoint on tokio: [`UdpEndpoint`]'s receive and send, the task parked on its
//! sockets' readiness instead of the thread in `poll`.
//!
//! Kernel behaviour relied on (`xsk_poll`): an AF_XDP socket polls readable while its rx ring holds
//! descriptors, and writable while its tx ring is at most half full; the kernel wakes the socket's
//! waiters when it posts received frames (`sk_data_ready`) and when it consumes tx descriptors or
//! frees a sent frame (`sk_write_space`). tokio's epoll is edge-triggered, so readiness is cleared
//! only after a try found nothing, and the kernel is kicked (`sendto`, where need_wakeup asks for
//! it) before every wait for tx room: in copy mode the kick is what transmits. A zero-copy driver
//! completes sent frames without waking the socket, so a wait for a free frame also looks again
//! every millisecond.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::sys::reactor;
use crate::xdp::{EndpointStats, Error, Received, SendError, UdpEndpoint};

/// A [`UdpEndpoint`] driven by tokio: [`AsyncUdpEndpoint::receive`] waits for datagrams on any of
/// the endpoint's queues, [`AsyncUdpEndpoint::send`] and [`AsyncUdpEndpoint::flush`] for free
/// frames and tx ring room, instead of failing with [`SendError::NoFrame`] or
/// [`SendError::TxRingFull`].
///
/// # Cancellation
///
/// Every future here is cancel-safe: it waits only for readiness, and takes frames from the rx rings
/// or gives them to the tx ring only in the poll that completes it. A `receive` dropped by
/// `select!` has taken no frame, and the frames its polls rejected are back in the fill ring, so
/// cancelled receives never leave the kernel short of frames to receive into; datagrams [`push`](AsyncUdpEndpoint::push)ed and not yet flushed
/// stay queued in the endpoint (a dropped `flush` leaves them for the next `flush` or `send`).
///
/// ```no_run
/// use zcnet::aio::AsyncUdpEndpoint;
/// use zcnet::xdp::{EndpointConfig, UdpEndpoint};
///
/// # async fn echo() -> Result<(), Box<dyn std::error::Error>> {
/// let endpoint = UdpEndpoint::bind("veth0", "10.0.0.1:9000".parse()?, EndpointConfig::default())?;
/// let mut endpoint = AsyncUdpEndpoint::new(endpoint)?;
/// let mut answers = Vec::new();
/// loop {
///     let batch = endpoint.receive(64).await?;
///     answers.extend(batch.iter().map(|d| (d.source, d.payload.to_vec())));
///     drop(batch); // the frames go back to their fill rings
///     for (to, payload) in answers.drain(..) {
///         endpoint.send(to, payload.len(), |buf| buf.copy_from_slice(&payload)).await?;
///     }
///     endpoint.flush().await?;
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct AsyncUdpEndpoint {
    /// One registration per queue's socket (a duplicate descriptor each), in the endpoint's order:
    /// the first is the one sends go through.
    sockets: Vec<AsyncFd<OwnedFd>>,
    endpoint: UdpEndpoint,
    /// Whether the route and neighbour changes were read since the last flush.
    routes_read: bool,
    /// The longest [`AsyncUdpEndpoint::send`] waits for a free frame.
    send_timeout: Duration,
}

impl AsyncUdpEndpoint {
    /// Registers every socket of `endpoint` with the current tokio runtime (call inside one).
    /// AF_XDP sockets never block, so nothing about them changes.
    ///
    /// # Errors
    ///
    /// Registering a socket with the runtime's reactor fails (an [`Error`] naming its queue).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, as tokio's registration does.
    pub fn new(endpoint: UdpEndpoint) -> Result<AsyncUdpEndpoint, Error> {
        let sockets = endpoint
            .sockets()
            .iter()
            .map(|socket| {
                reactor::register(socket.fd(), Interest::READABLE | Interest::WRITABLE).map_err(
                    |e| {
                        Error::new(
                            format!("register the AF_XDP socket of queue {}", socket.queue()),
                            e,
                            "",
                        )
                    },
                )
            })
            .collect::<Result<_, _>>()?;
        Ok(AsyncUdpEndpoint {
            sockets,
            endpoint,
            routes_read: false,
            send_timeout: SEND_TIMEOUT,
        })
    }

    /// Up to `max` datagrams (at least one), waiting until some arrive on any queue. Frames that are
    /// not good datagrams for the endpoint are counted and recycled on the way, as
    /// [`UdpEndpoint::receive`] does; the batch gives its frames back when it drops.
    ///
    /// # Errors
    ///
    /// A ring operation or the wait on the reactor fails (an [`Error`] naming it). Cancel-safe:
    /// a dropped future leaves the datagrams it took for the next call.
    pub async fn receive(&mut self, max: usize) -> Result<Received<'_>, Error> {
        let max = max.max(1);
        loop {
            self.endpoint.take(max)?;
            if self.endpoint.has_taken() {
                break;
            }
            self.readable().await?;
        }
        Ok(self.endpoint.taken())
    }

    /// Waits until a socket whose readiness was not yet tried reports readable, and clears the
    /// readiness of every socket reported so: the caller tries all the rx rings next, so an arrival
    /// after this point raises a new edge.
    async fn readable(&self) -> Result<(), Error> {
        poll_fn(|cx| {
            let mut ready = false;
            for socket in &self.sockets {
                match socket.poll_read_ready(cx) {
                    Poll::Ready(Ok(mut guard)) => {
                        guard.clear_ready();
                        ready = true;
                    }
                    Poll::Ready(Err(e)) => {
                        return Poll::Ready(Err(Error::new("wait for AF_XDP frames", e, "")));
                    }
                    Poll::Pending => {}
                }
            }
            if ready {
                Poll::Ready(Ok(()))
            } else {
                Poll::Pending
            }
        })
        .await
    }

    /// Waits until the first queue's socket, which sends, reports tx ring room or freed frames.
    async fn writable(&self) -> Result<(), Error> {
        let mut guard = self.sockets[0]
            .writable()
            .await
            .map_err(|e| Error::new("wait for AF_XDP tx room", e, ""))?;
        guard.clear_ready();
        Ok(())
    }

    /// Builds a datagram of `len` payload bytes to `to` in a UMEM frame (`write` fills the payload
    /// in place) and queues it for [`AsyncUdpEndpoint::flush`], without waiting. Refuses what
    /// [`SendBatch::push`](crate::xdp::SendBatch::push) refuses, [`SendError::NoFrame`] included:
    /// [`AsyncUdpEndpoint::send`] waits for a frame instead.
    pub fn push(
        &mut self,
        to: SocketAddr,
        len: usize,
        write: impl FnOnce(&mut [u8]),
    ) -> Result<(), SendError> {
        if !self.routes_read {
            self.endpoint.refresh_routes()?;
            self.routes_read = true;
        }
        self.endpoint.build((None, to), len, write)
    }

    /// [`AsyncUdpEndpoint::push`], waiting for a free frame when every frame is in flight or
    /// queued: queued datagrams are handed to the kernel meanwhile, and sent frames reclaimed.
    /// Between tries the task sleeps on the sending socket's readiness (raised as the kernel takes
    /// tx descriptors or frees what it sent), at most a millisecond at a time. Datagrams go to
    /// the tx ring at [`AsyncUdpEndpoint::flush`], or here when frames run short.
    ///
    /// # Errors
    ///
    /// What [`AsyncUdpEndpoint::push`] refuses, but [`SendError::NoFrame`]; and
    /// [`SendError::NoFrameWithin`] when no frame came free within the send timeout
    /// ([`AsyncUdpEndpoint::set_send_timeout`], default 1 s): the kernel completed
    /// nothing that was in flight. Nothing was built then; the frames in flight stay lent.
    ///
    /// # Panics
    ///
    /// In a tokio runtime without its time driver (`enable_time`), when it has to wait.
    pub async fn send(
        &mut self,
        to: SocketAddr,
        len: usize,
        write: impl FnOnce(&mut [u8]),
    ) -> Result<(), SendError> {
        let mut write = Some(write);
        let deadline = Instant::now().checked_add(self.send_timeout);
        loop {
            match self.push(to, len, |buf| (write.take().expect("written once"))(buf)) {
                Err(SendError::NoFrame) => {}
                done => return done,
            }
            // Transmitting what is queued reclaims sent frames too when some stay queued.
            let freed = if self.endpoint.has_pending() {
                self.endpoint.transmit_pending()? > 0
            } else {
                self.endpoint.wake_tx()?;
                self.endpoint.reclaim()? > 0
            };
            if freed {
                continue;
            }
            let slice = match deadline {
                Some(deadline) => deadline.saturating_duration_since(Instant::now()),
                None => RECLAIM_SLICE,
            };
            if slice.is_zero() {
                return Err(SendError::NoFrameWithin {
                    waited: self.send_timeout,
                });
            }
            // Readiness the kernel raised, or the slice's end: either way, look again.
            let _ = tokio::time::timeout(slice.min(RECLAIM_SLICE), self.writable()).await;
        }
    }

    /// Sets the longest [`AsyncUdpEndpoint::send`] waits for a free frame before it fails with
    /// [`SendError::NoFrameWithin`] (default 1 s; `Duration::MAX` waits without limit).
    pub fn set_send_timeout(&mut self, timeout: Duration) {
        self.send_timeout = timeout;
    }

    /// The longest [`AsyncUdpEndpoint::send`] waits for a free frame.
    pub fn send_timeout(&self) -> Duration {
        self.send_timeout
    }

    /// Hands every queued datagram to the tx ring, waiting for room while the ring is full, and
    /// wakes the kernel until it has taken them all where it takes them only when woken (copy mode:
    /// each wakeup transmits a batch); returns how many went. Their frames come back to the free
    /// list as the kernel completes them. While no progress is made the kernel is woken again after
    /// yielding to other tasks, and after 8 such tries the wait is for the
    /// socket's writable readiness (the kernel raises it as it frees what it sent).
    ///
    /// # Errors
    ///
    /// A ring operation or the wait on the reactor fails ([`SendError::Xdp`]).
    pub async fn flush(&mut self) -> Result<usize, SendError> {
        self.routes_read = false;
        let mut sent = 0;
        let mut tries = 0;
        loop {
            let went = self.endpoint.transmit_pending()?;
            sent += went;
            if !self.endpoint.has_pending() && !self.endpoint.tx_waits_for_wakeup() {
                return Ok(sent);
            }
            if went > 0 {
                tries = 0;
            } else if tries < FULL_RING_TRIES {
                tries += 1;
                tokio::task::yield_now().await;
            } else {
                tries = 0;
                self.writable().await?;
            }
        }
    }

    /// What the endpoint counted so far.
    pub fn stats(&self) -> EndpointStats {
        self.endpoint.stats()
    }

    /// The endpoint (its address, sockets, program).
    pub fn get_ref(&self) -> &UdpEndpoint {
        &self.endpoint
    }

    /// Deregisters the sockets and returns the endpoint, with any datagram still queued by
    /// [`AsyncUdpEndpoint::push`] (its next send batch hands them to the kernel).
    pub fn into_inner(self) -> UdpEndpoint {
        self.endpoint
    }
}

/// The longest [`AsyncUdpEndpoint::send`] waits for a free frame unless
/// [`AsyncUdpEndpoint::set_send_timeout`] says otherwise.
const SEND_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest [`AsyncUdpEndpoint::send`] sleeps on the socket's readiness before it looks for
/// completed frames again (a zero-copy driver completes them without waking the socket).
const RECLAIM_SLICE: Duration = Duration::from_millis(1);

/// Tries of a full tx ring, each after yielding, before [`AsyncUdpEndpoint::flush`] waits for the
/// socket to report tx room (the kernel reports it once the ring is at most half full).
const FULL_RING_TRIES: u32 = 8;
