//! The sender: one engine for every socket kind — decide, send, track, drain, flush.

use std::io::{self, IoSlice};
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::buffer::{Loan, SendBuf};
use super::error::TxError;
use super::policy::{CopyReason, Decision, Policy, PolicyConfig};
use super::socket::ZcSocket;
use super::stats::TxStats;
use super::tracker::CompletionTracker;
use crate::sys::errno::error_name;
use crate::sys::errqueue::{self, ControlBuf, ErrqueueMessage, SockAddr};

/// How a [`Sender`] behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderConfig {
    /// The zero-copy policy.
    pub policy: PolicyConfig,
    /// Drain the error queue after this many sends even when nothing forces it (default 32).
    pub drain_every: u32,
    /// Longest wait for send-buffer space before a send fails with `ETIMEDOUT` (default: none, like a
    /// blocking socket).
    pub send_timeout: Option<Duration>,
}

impl Default for SenderConfig {
    fn default() -> Self {
        SenderConfig {
            policy: PolicyConfig::default(),
            drain_every: 32,
            send_timeout: None,
        }
    }
}

impl SenderConfig {
    /// The default configuration with `mode`.
    pub fn with_mode(mode: super::Mode) -> Self {
        SenderConfig {
            policy: PolicyConfig::with_mode(mode),
            ..Default::default()
        }
    }
}

/// Longest single `poll` while waiting, so that deadlines are checked.
const POLL_SLICE: Duration = Duration::from_millis(100);

/// A MSG_ZEROCOPY sender owning socket `S` (see [`crate::tx`]). Sends never block on completions:
/// completions are drained when the socket is not writable, every [`SenderConfig::drain_every`] sends,
/// when the socket reports `POLLERR`, and in [`Sender::poll_completions`] / [`Sender::flush`].
///
/// Dropping a sender with ids outstanding keeps their buffers lent forever (they are leaked, never
/// reused, since the kernel may still read them): call [`Sender::flush`] or [`Sender::close`] first.
pub struct Sender<S: ZcSocket> {
    /// Present until [`Sender::close`] takes it.
    socket: Option<S>,
    tracker: CompletionTracker<Loan>,
    policy: Policy,
    stats: TxStats,
    control: ControlBuf,
    zerocopy: Result<(), String>,
    config: SenderConfig,
    since_drain: u32,
    gso_segment: Option<u16>,
}

impl<S: ZcSocket> Sender<S> {
    /// Wraps `socket` (which must not have sent with MSG_ZEROCOPY before). Unless the mode is
    /// [`super::Mode::Copy`], sets `SO_ZEROCOPY`; when that fails the sender copies and
    /// [`Sender::zerocopy_status`] says why.
    pub fn new(socket: S, config: SenderConfig) -> Self {
        let zerocopy = if config.policy.mode == super::Mode::Copy {
            Err("mode copy".to_string())
        } else {
            errqueue::enable_zerocopy(socket.fd()).map_err(|e| {
                format!(
                    "setsockopt(SO_ZEROCOPY) on {}: {} (no zero-copy send for this socket: sends are copied)",
                    S::NAME,
                    error_name(&e)
                )
            })
        };
        Sender {
            socket: Some(socket),
            tracker: CompletionTracker::new(0),
            policy: Policy::new(config.policy),
            stats: TxStats::default(),
            control: ControlBuf::default(),
            zerocopy,
            config,
            since_drain: 0,
            gso_segment: None,
        }
    }

    /// The socket.
    pub fn get_ref(&self) -> &S {
        self.socket
            .as_ref()
            .expect("the socket is present until close()")
    }

    /// Whether zero-copy is enabled on the socket, or why not.
    pub fn zerocopy_status(&self) -> Result<(), &str> {
        self.zerocopy.as_ref().map(|_| ()).map_err(String::as_str)
    }

    /// The counters so far.
    pub fn stats(&self) -> &TxStats {
        &self.stats
    }

    /// Zero-copy ids sent and not yet completed (their buffers are still lent).
    pub fn outstanding(&self) -> usize {
        self.tracker.outstanding()
    }

    /// Sends all of `buf`: on a stream socket in as many calls as the kernel needs (a partial send
    /// continues with the remainder, in order); on a message socket as one message (datagram). The
    /// buffer stays lent until the completions covering it arrive.
    pub fn send<B: SendBuf>(&mut self, buf: B) -> Result<(), TxError> {
        self.send_loan(Arc::new(buf), None)
    }

    fn send_loan(&mut self, loan: Loan, dest: Option<&SockAddr>) -> Result<(), TxError> {
        let len = loan.as_bytes().len();
        if !self.get_ref().is_stream() {
            return self.send_piece(&loan, 0, dest).map(drop);
        }
        let mut off = 0;
        while off < len {
            off += self.send_piece(&loan, off, None)?;
            if off < len {
                self.stats.partial_sends += 1;
            }
        }
        Ok(())
    }

    fn decide(&mut self, len: usize) -> Decision {
        match self.policy.decide(len) {
            Decision::ZeroCopy if self.zerocopy.is_err() => Decision::Copy(CopyReason::Unsupported),
            Decision::ZeroCopy
                if !self.get_ref().is_stream() && len > self.get_ref().max_zerocopy_piece() =>
            {
                Decision::Copy(CopyReason::Unsupported)
            }
            d => d,
        }
    }

    /// One `sendmsg` of `loan[off..]` (retried on `EAGAIN`, resent by copy on `ENOBUFS`); returns the
    /// bytes the kernel took.
    fn send_piece(
        &mut self,
        loan: &Loan,
        off: usize,
        dest: Option<&SockAddr>,
    ) -> Result<usize, TxError> {
        let total = loan.as_bytes().len();
        let mut forced: Option<CopyReason> = None;
        let deadline = self.config.send_timeout.map(|t| Instant::now() + t);
        loop {
            let data = &loan.as_bytes()[off..];
            let decision = match forced {
                Some(reason) => Decision::Copy(reason),
                None => self.decide(data.len()),
            };
            let zc = decision == Decision::ZeroCopy;
            let piece = if zc && self.get_ref().is_stream() {
                &data[..data.len().min(self.get_ref().max_zerocopy_piece())]
            } else {
                data
            };
            let mut control = ControlBuf::default();
            if let Some(seg) = self.gso_segment.filter(|&s| piece.len() > usize::from(s)) {
                control
                    .push(libc::SOL_UDP, libc::UDP_SEGMENT, &seg.to_ne_bytes())
                    .expect("one UDP_SEGMENT fits the control buffer");
            }
            let id = zc.then(|| self.tracker.register(Arc::clone(loan)));
            let flags = libc::MSG_DONTWAIT | if zc { libc::MSG_ZEROCOPY } else { 0 };
            let res = errqueue::send_msg(
                self.get_ref().fd(),
                &[IoSlice::new(piece)],
                dest,
                Some(&control),
                flags,
            );
            match res {
                Ok(n) => {
                    self.count_send(decision, n);
                    return Ok(n);
                }
                Err(e) => {
                    if let Some(id) = id {
                        // A failed call normally takes no id; a datagram freed inside the call does,
                        // and its completion is queued before the call returns: drain to find out.
                        self.drain()?;
                        if self.tracker.is_outstanding(id) {
                            self.tracker.cancel_last();
                        }
                    }
                    match e.raw_os_error() {
                        Some(libc::EAGAIN) => self.wait_writable(deadline, off, total)?,
                        Some(libc::EINTR) => {}
                        Some(libc::ENOBUFS) if zc => {
                            self.stats.enobufs += 1;
                            self.policy.on_enobufs();
                            forced = Some(CopyReason::Enobufs);
                        }
                        _ => return Err(self.send_error(zc, off, total, e)),
                    }
                }
            }
        }
    }

    fn count_send(&mut self, decision: Decision, n: usize) {
        self.stats.calls += 1;
        self.stats.bytes += n as u64;
        match decision {
            Decision::ZeroCopy => self.stats.zc_calls += 1,
            Decision::Copy(reason) => {
                self.stats.copy_calls += 1;
                self.stats.count_copy(reason);
            }
        }
        self.since_drain += 1;
        if self.since_drain >= self.config.drain_every {
            // Completions are advisory here; an error-queue failure will show again on the next wait.
            let _ = self.drain();
        }
    }

    fn send_error(&self, zerocopy: bool, sent: usize, len: usize, source: io::Error) -> TxError {
        TxError::Send {
            socket: S::NAME,
            zerocopy,
            sent,
            len,
            source,
        }
    }

    /// Waits for send-buffer space, draining completions on `POLLERR`; a pending socket error (a reset)
    /// becomes the send's error.
    fn wait_writable(
        &mut self,
        deadline: Option<Instant>,
        sent: usize,
        len: usize,
    ) -> Result<(), TxError> {
        self.stats.waits += 1;
        loop {
            let slice = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        let e = io::Error::from_raw_os_error(libc::ETIMEDOUT);
                        return Err(self.send_error(false, sent, len, e));
                    }
                    left.min(POLL_SLICE)
                }
                None => POLL_SLICE,
            };
            let ready = errqueue::poll_socket(self.get_ref().fd(), true, slice)
                .map_err(|e| self.queue_error(e))?;
            if ready.error && self.drain()? == 0 {
                let pending = errqueue::take_socket_error(self.get_ref().fd())
                    .map_err(|e| self.queue_error(e))?;
                if let Some(e) = pending {
                    return Err(self.send_error(false, sent, len, e));
                }
            }
            if ready.writable || ready.hangup {
                return Ok(());
            }
        }
    }

    fn queue_error(&self, source: io::Error) -> TxError {
        TxError::Errqueue {
            socket: S::NAME,
            source,
        }
    }

    /// Reads every completion queued now, releasing the buffers they cover; returns the ids released.
    fn drain(&mut self) -> Result<u64, TxError> {
        self.since_drain = 0;
        let mut released = 0;
        loop {
            let socket = self
                .socket
                .as_ref()
                .expect("the socket is present until close()");
            match errqueue::recv_errqueue(socket.fd(), &mut self.control) {
                Ok(false) => break,
                Ok(true) => {}
                Err(e) => {
                    self.stats.set_tracker(self.tracker.counts());
                    return Err(self.queue_error(e));
                }
            }
            for m in self.control.messages() {
                match errqueue::decode(m.level, m.ty, m.data) {
                    Some(ErrqueueMessage::Zerocopy(c)) => {
                        let ids = self.tracker.complete(c, drop);
                        self.policy.on_completion(c.copied, ids);
                        released += ids;
                    }
                    Some(ErrqueueMessage::Error(_)) => self.stats.queue_errors += 1,
                    None => {}
                }
            }
        }
        self.stats.set_tracker(self.tracker.counts());
        self.stats.policy_switches = self.policy.switches();
        Ok(released)
    }

    /// Reads the completions queued now (without waiting); returns the number of ids released.
    pub fn poll_completions(&mut self) -> Result<u64, TxError> {
        self.drain()
    }

    /// Waits up to `timeout` for at least one completion when ids are outstanding (for example when a
    /// [`super::BufferPool`] ran dry); returns the number of ids released.
    pub fn wait_completions(&mut self, timeout: Duration) -> Result<u64, TxError> {
        let released = self.drain()?;
        if released > 0 || self.outstanding() == 0 {
            return Ok(released);
        }
        errqueue::poll_socket(self.get_ref().fd(), false, timeout)
            .map_err(|e| self.queue_error(e))?;
        self.drain()
    }

    /// Waits, up to `timeout`, until every outstanding id completed and every lent buffer is released.
    pub fn flush(&mut self, timeout: Duration) -> Result<(), TxError> {
        let start = Instant::now();
        loop {
            self.drain()?;
            if self.outstanding() == 0 {
                return Ok(());
            }
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(TxError::Timeout {
                    what: "flush",
                    outstanding: self.outstanding(),
                    waited: start.elapsed(),
                });
            }
            errqueue::poll_socket(self.get_ref().fd(), false, left.min(POLL_SLICE))
                .map_err(|e| self.queue_error(e))?;
        }
    }

    /// Flushes (bounded by `timeout`) and returns the socket. On failure the buffers still lent are
    /// leaked — never reused — and the error says how many.
    pub fn close(mut self, timeout: Duration) -> Result<S, TxError> {
        self.flush(timeout)?;
        Ok(self
            .socket
            .take()
            .expect("the socket is present until close()"))
    }
}

impl<S: ZcSocket + std::fmt::Debug> std::fmt::Debug for Sender<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("socket", &self.socket)
            .field("outstanding", &self.tracker.outstanding())
            .field("next_id", &self.tracker.next_id())
            .field("zerocopy", &self.zerocopy)
            .field("policy", &self.policy)
            .field("stats", &self.stats)
            .finish()
    }
}

impl<S: ZcSocket> Drop for Sender<S> {
    fn drop(&mut self) {
        if self.socket.is_some() {
            let _ = self.drain();
        }
        for loan in self.tracker.abandon() {
            // The kernel may still read these pages: never let the memory be reused.
            std::mem::forget(loan);
        }
    }
}

impl Sender<UdpSocket> {
    /// Sets the GSO segment size (`UDP_SEGMENT` control message on each send longer than one segment):
    /// one call then carries up to 64 segments, split by the stack or the device. `None` turns it off.
    pub fn set_gso_segment(&mut self, segment: Option<u16>) {
        self.gso_segment = segment;
    }

    /// Sends `buf` as one datagram (or one GSO train) to `dest`, on an unconnected socket.
    pub fn send_to<B: SendBuf>(&mut self, buf: B, dest: SocketAddr) -> Result<(), TxError> {
        let dest = SockAddr::from(dest);
        self.send_loan(Arc::new(buf), Some(&dest))
    }
}
