//! Run: The watch over a TCP sender (`bench tcp`, `bench rx --connect`): a connect that gives up after
//! `--connect-timeout`, and a thread that ends a send the peer stopped taking — after
//! `--send-timeout` seconds without acknowledged progress, saying what `TCP_INFO` showed — or that
//! Ctrl-C interrupted, or that outlasted its `--duration` against a peer that reads slower than the
//! sender sends (every ACK is progress then, so no send timeout fires), however the sending thread
//! is blocked.
//!
//! Kernel behaviour relied on:
//! - `connect(AF_UNSPEC)` on a connected TCP socket (`tcp_disconnect`) sends a reset, drops the
//!   write queue (so MSG_ZEROCOPY completions of what it held are reported) and wakes a thread
//!   blocked in `send`, `sendmsg` or `poll` on the same socket, whose call then fails with
//!   `ECONNRESET`; it works from any thread, on a descriptor shared with the sender.
//! - A non-blocking `connect` returns `EINPROGRESS` while the SYN waits for an answer; the socket
//!   polls writable once the handshake ends, and `SO_ERROR` then holds its outcome (0, or
//!   `ECONNREFUSED`, `EHOSTUNREACH`, …). Waiting in short polls keeps Ctrl-C heard while a SYN is
//!   black-holed.
//! - A peer that does not read advertises a zero window (`tcpi_snd_wnd` 0) and answers the
//!   sender's window probes; a path that drops every segment leaves data unacknowledged, with
//!   retransmissions and no ACK arriving (`tcpi_last_ack_recv` grows).

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::io::Errno;
use rustix::net::{self, AddressFamily, SocketFlags, SocketType};
use zcnet::probe::{TcpSendState, tcp_send_state};

use crate::bench::args::apart::TcpTimeouts;
use crate::live;

impl TcpTimeouts {
    /// Connects to `addr` within `--connect-timeout`, with a message naming what went wrong; Ctrl-C
    /// ends the wait at once.
    pub fn connect(&self, addr: SocketAddr) -> anyhow::Result<TcpStream> {
        let limit = Duration::from_secs_f64(self.connect_timeout);
        connect_watched(addr, limit).map_err(|e| connect_error(addr, self, &e))
    }
}

/// A blocking TCP stream to `addr`, connected within `limit`: the handshake is waited for in polls
/// of [`LOOK_EVERY`], between which Ctrl-C ends it (`ErrorKind::Interrupted`).
fn connect_watched(addr: SocketAddr, limit: Duration) -> io::Result<TcpStream> {
    let family = if addr.is_ipv6() {
        AddressFamily::INET6
    } else {
        AddressFamily::INET
    };
    let flags = SocketFlags::CLOEXEC | SocketFlags::NONBLOCK;
    let socket = net::socket_with(family, SocketType::STREAM, flags, None)?;
    match net::connect(&socket, &addr) {
        Ok(()) => {}
        Err(Errno::INPROGRESS) => {
            let start = Instant::now();
            loop {
                if live::interrupted() {
                    return Err(io::ErrorKind::Interrupted.into());
                }
                let left = limit.saturating_sub(start.elapsed());
                if left.is_zero() {
                    return Err(io::ErrorKind::TimedOut.into());
                }
                let slice = Timespec::try_from(left.min(LOOK_EVERY)).map_err(io::Error::other)?;
                let mut fds = [PollFd::new(&socket, PollFlags::OUT)];
                match poll(&mut fds, Some(&slice)) {
                    Ok(0) | Err(Errno::INTR) => continue,
                    Ok(_) => break,
                    Err(e) => return Err(e.into()),
                }
            }
            net::sockopt::socket_error(&socket)??;
        }
        Err(e) => return Err(e.into()),
    }
    let stream = TcpStream::from(socket);
    stream.set_nonblocking(false)?;
    Ok(stream)
}

fn connect_error(addr: SocketAddr, t: &TcpTimeouts, e: &io::Error) -> anyhow::Error {
    let why = match e.kind() {
        io::ErrorKind::Interrupted => "interrupted (Ctrl-C) before the peer answered".into(),
        io::ErrorKind::TimedOut => format!(
            "no answer to the SYN within --connect-timeout {}s (a firewall drops it, or no host \
             has that address)",
            t.connect_timeout
        ),
        io::ErrorKind::ConnectionRefused => "refused: nothing listens on that port".into(),
        io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => {
            format!("unreachable: {e}")
        }
        _ => e.to_string(),
    };
    anyhow!("connecting to {addr}: {why}")
}

/// Why a watched send was ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// Ctrl-C (SIGINT or SIGTERM).
    Interrupted,
    /// No acknowledged progress for `--send-timeout`: what `TCP_INFO` showed.
    Stalled(String),
    /// The run's end ([`SendWatch::end_by`]) passed by [`SLOW_GRACE`] with bytes still waiting for
    /// the peer: it reads slower than the sender sends.
    Slow {
        /// Bytes the peer acknowledged since the watch started.
        acked: u64,
    },
}

/// A thread watching one TCP sender; it stops when dropped.
#[derive(Debug)]
pub struct SendWatch {
    done: Arc<AtomicBool>,
    stop: Arc<Mutex<Option<Stop>>>,
    end: Arc<Mutex<Option<Instant>>>,
    thread: Option<JoinHandle<()>>,
}

/// How often the watch looks.
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// How long after Ctrl-C the sender may take to stop on its own (it checks between sends) before
/// the watch resets the connection under it.
const INTERRUPT_GRACE: Duration = Duration::from_millis(250);

/// How long past the end of its run ([`SendWatch::end_by`]) a sender may still wait for its peer
/// (its last sends, its completions, its end mark) before the watch ends the connection: far above
/// what a peer that keeps up takes, short of what makes a run outlast its duration noticeably.
pub const SLOW_GRACE: Duration = Duration::from_secs(1);

impl SendWatch {
    /// Starts watching `stream` (a descriptor of it is kept until the watch ends).
    pub fn start(stream: &TcpStream, timeouts: &TcpTimeouts) -> io::Result<SendWatch> {
        let socket = stream.try_clone()?;
        let limit = Duration::from_secs_f64(timeouts.send_timeout);
        let done = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(Mutex::new(None));
        let end = Arc::new(Mutex::new(None));
        let thread = {
            let (done, stop, end) = (done.clone(), stop.clone(), end.clone());
            thread::spawn(move || watch(&socket, limit, &done, (&stop, &end)))
        };
        Ok(SendWatch {
            done,
            stop,
            end,
            thread: Some(thread),
        })
    }

    /// Says that the run ends at `at`: from [`SLOW_GRACE`] after it, bytes still waiting for the
    /// peer end the connection ([`Stop::Slow`]).
    pub fn end_by(&self, at: Instant) {
        if let Ok(mut end) = self.end.lock() {
            *end = Some(at);
        }
    }

    /// Why the send was ended, if it was.
    pub fn stop(&self) -> Option<Stop> {
        self.stop.lock().map_or(None, |s| s.clone())
    }
}

impl Drop for SendWatch {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn watch(
    socket: &TcpStream,
    limit: Duration,
    done: &AtomicBool,
    (stop, end): (&Mutex<Option<Stop>>, &Mutex<Option<Instant>>),
) {
    let Ok(first) = tcp_send_state(socket.as_fd()) else {
        return;
    };
    let mut acked = first.bytes_acked;
    let mut progress = Instant::now();
    let mut interrupted_at = None;
    while !done.load(Ordering::Relaxed) {
        thread::sleep(LOOK_EVERY);
        let why = if live::interrupted() {
            let at = *interrupted_at.get_or_insert_with(Instant::now);
            if at.elapsed() < INTERRUPT_GRACE {
                continue;
            }
            Stop::Interrupted
        } else {
            let Ok(state) = tcp_send_state(socket.as_fd()) else {
                return;
            };
            let waiting = state.unacked > 0 || state.notsent_bytes > 0;
            let overdue = end
                .lock()
                .ok()
                .and_then(|end| *end)
                .is_some_and(|end| end.elapsed() >= SLOW_GRACE);
            if overdue && waiting && state.established {
                Stop::Slow {
                    acked: state.bytes_acked.saturating_sub(first.bytes_acked),
                }
            } else if state.bytes_acked != acked || !waiting || !state.established {
                acked = state.bytes_acked;
                progress = Instant::now();
                continue;
            } else if progress.elapsed() < limit {
                continue;
            } else {
                Stop::Stalled(stall_reason(&state, limit))
            }
        };
        if let Ok(mut s) = stop.lock() {
            *s = Some(why);
        }
        // Ends the connection with a reset, waking the sender wherever it blocks (see the module
        // documentation).
        let _ = rustix::net::connect_unspec(socket);
        return;
    }
}

/// What a sender that saw no acknowledged progress for `limit` observed.
pub fn stall_reason(s: &TcpSendState, limit: Duration) -> String {
    let seconds = limit.as_secs_f64();
    if s.snd_wnd == Some(0) {
        return format!(
            "zero window: for --send-timeout {seconds}s the peer acknowledged nothing new and \
             advertised no room (it is not reading, or reads too slowly to open its window in \
             that time)"
        );
    }
    if s.unacked > 0 && u128::from(s.ms_since_ack) >= limit.as_millis() {
        return format!(
            "no ACK progress: no ACK for {:.1}s with {} segments unacknowledged and {} \
             retransmissions (a black hole: a DROP rule, a dead peer or path)",
            f64::from(s.ms_since_ack) / 1000.0,
            s.unacked,
            s.total_retrans
        );
    }
    format!(
        "no ACK progress for --send-timeout {seconds}s ({} segments unacknowledged, {} bytes \
         unsent, {} retransmissions, last ACK {:.1}s ago)",
        s.unacked,
        s.notsent_bytes,
        s.total_retrans,
        f64::from(s.ms_since_ack) / 1000.0
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_name_what_was_seen() {
        let limit = Duration::from_secs(2);
        let zero = TcpSendState {
            snd_wnd: Some(0),
            unacked: 1,
            ..Default::default()
        };
        let why = stall_reason(&zero, limit);
        // A peer that reads a little now and then looks the same from here.
        assert!(
            why.starts_with("zero window") && why.contains("reads too slowly"),
            "{why}"
        );
        let hole = TcpSendState {
            snd_wnd: Some(65535),
            unacked: 10,
            ms_since_ack: 2500,
            total_retrans: 4,
            ..Default::default()
        };
        assert!(stall_reason(&hole, limit).contains("black hole"));
        let slow = TcpSendState {
            snd_wnd: Some(65535),
            notsent_bytes: 100,
            ms_since_ack: 10,
            ..Default::default()
        };
        assert!(stall_reason(&slow, limit).starts_with("no ACK progress for"));
    }
}
