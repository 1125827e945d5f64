//! The data path of a test's streams on zcnet's side, each on a thread of its own: TCP sent with a
//! zcnet sender (MSG_ZEROCOPY through `sendmsg` or io_uring, as `--mode`/`--api` say) and received
//! with a zcnet receiver (`--rx`); UDP datagrams, each carrying iperf3's header, sent the same way
//! and received in batches.
//!
//! Each stream counts what it moved in [`Live`] as it goes (for the intervals) and returns an
//! [`Outcome`] when it ends. Senders stop at the test's [`Stop`] flag or when the test's byte or block
//! budget is spent; a TCP receiver stops at the end of its stream or when [`Running::finish`] shuts
//! its socket down for reading, a UDP receiver at the flag.
//!
//! Kernel behaviour relied on: `shutdown(SHUT_RD)` on a socket another thread waits on in `poll` or
//! `recv` wakes it, and its reads then return 0; `shutdown(SHUT_WR)` makes a `sendmsg` blocked for
//! buffer space fail (`EPIPE`), so a sender whose peer stopped reading can be ended; a connected
//! UDP socket reports the peer's ICMP port-unreachable as `ECONNREFUSED` on a later call, which a
//! receiver ignores (the datagrams that did arrive still count).

use std::io::ErrorKind;
use std::net::{Shutdown, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use zcnet::probe::{TcpSendState, tcp_send_state};
use zcnet::rx::{DatagramBatch, Receiver, RxConfig, RxMode};
use zcnet::tx::{BufferPool, Mode, PoolConfig, SenderConfig, ZcSocket};

use super::proto::{UdpHeader, UdpTally};
use crate::bench::args::api::Api;
use crate::bench::run::sender;

/// How zcnet's side sends and receives (its own flags).
#[derive(Debug, Clone, Copy)]
pub struct Zc {
    pub mode: Mode,
    pub api: Api,
    pub rx: RxMode,
}

/// What every stream of a test does, from the parameters both ends agreed.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub udp: bool,
    /// Bytes per send (TCP) or per datagram (UDP).
    pub blksize: usize,
    /// Bits per second per sending stream (0: as fast as it goes).
    pub rate: u64,
    /// UDP sequence numbers of 64 bits.
    pub wide: bool,
}

/// The longest a sender waits for the socket to take a send, or for its last completions, before
/// the stream ends with an error: a peer that stopped reading does not hold a stream for ever.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest a stopped sender waits for the completions of its last sends.
const END_WAIT: Duration = Duration::from_secs(2);

/// The longest [`Running::join`] waits for the senders to stop before it shuts their sockets down
/// (iperf3's peer may have stopped reading, leaving a sender blocked in a send).
const STOP_WAIT: Duration = Duration::from_secs(1);

/// How often a UDP receiver looks at the stop flag while no datagram comes.
const UDP_WAKE: Duration = Duration::from_millis(50);

/// Buffers in a UDP sender's pool: datagrams lent to the kernel at once.
const UDP_BUFFERS: usize = 256;

/// What a stream has moved so far, read by the interval reports.
#[derive(Debug, Default)]
pub struct Live {
    pub bytes: AtomicU64,
    pub packets: AtomicU64,
}

/// The test's shared end conditions: a flag, and the bytes and blocks all senders may send together
/// (`-n`, `-k`; 0: no limit).
#[derive(Debug, Default)]
pub struct Stop {
    pub flag: AtomicBool,
    bytes_limit: u64,
    blocks_limit: u64,
    bytes: AtomicU64,
    blocks: AtomicU64,
}

impl Stop {
    pub fn new(bytes_limit: u64, blocks_limit: u64) -> Stop {
        Stop {
            bytes_limit,
            blocks_limit,
            ..Stop::default()
        }
    }

    /// Takes one block of `len` bytes from the budget: `false` once the flag is up or the budget spent
    /// (as iperf3 does, the last block may pass the byte limit).
    fn take(&self, len: usize) -> bool {
        if self.flag.load(Ordering::Relaxed) {
            return false;
        }
        let bytes = self.bytes.fetch_add(len as u64, Ordering::Relaxed);
        let blocks = self.blocks.fetch_add(1, Ordering::Relaxed);
        (self.bytes_limit == 0 || bytes < self.bytes_limit)
            && (self.blocks_limit == 0 || blocks < self.blocks_limit)
    }

    pub fn raise(&self) {
        self.flag.store(true, Ordering::Relaxed);
    }

    fn raised(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }
}

/// A stream's socket.
#[derive(Debug)]
pub enum Socket {
    Tcp(TcpStream),
    Udp(UdpSocket),
}

/// How a stream ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub bytes: u64,
    /// UDP: datagrams sent (a sender).
    pub packets: u64,
    /// UDP: what the receiver counted.
    pub tally: Option<UdpTally>,
    /// What zcnet's sender or receiver did: its path, zero-copy and copied counts.
    pub zc: Value,
    /// Why the stream ended early, if it did.
    pub error: Option<String>,
}

/// A stream running on its thread.
struct Handle {
    thread: JoinHandle<Outcome>,
    /// A TCP stream's socket, to shut down when it must stop.
    waker: Option<TcpStream>,
    sender: bool,
}

/// The streams of a test running on zcnet's side, in the test's stream order.
pub struct Running {
    handles: Vec<Option<Handle>>,
    pub live: Vec<Arc<Live>>,
    /// Ends the senders.
    pub stop: Arc<Stop>,
    /// Ends the receivers (raised after the senders', whose peer may still be sending).
    done: Arc<AtomicBool>,
}

impl Running {
    /// Room for `count` streams, none started; senders share `stop`.
    pub fn new(stop: Stop, count: usize) -> Running {
        Running {
            handles: (0..count).map(|_| None).collect(),
            live: (0..count).map(|_| Arc::default()).collect(),
            stop: Arc::new(stop),
            done: Arc::default(),
        }
    }

    /// Starts stream `i` (`sender` or receiver) on its thread; a sender paces from `start`.
    pub fn start(
        &mut self,
        i: usize,
        socket: Socket,
        sender: bool,
        (spec, zc): (Spec, Zc),
        start: Instant,
    ) {
        let mine = Arc::clone(&self.live[i]);
        let stop = Arc::clone(&self.stop);
        let done = Arc::clone(&self.done);
        let waker = match &socket {
            Socket::Tcp(s) => s.try_clone().ok(),
            Socket::Udp(_) => None,
        };
        let run = move || {
            let ended = match (socket, sender) {
                (Socket::Tcp(s), true) => send(s, spec, zc, &mine, &stop, start),
                (Socket::Udp(s), true) => send(s, spec, zc, &mine, &stop, start),
                (Socket::Tcp(s), false) => receive_tcp(s, zc.rx, &mine, &done),
                (Socket::Udp(s), false) => receive_udp(&s, spec, &mine, &done),
            };
            ended.unwrap_or_else(|(why, live_bytes)| Outcome {
                bytes: live_bytes,
                packets: mine.packets.load(Ordering::Relaxed),
                tally: None,
                zc: Value::Null,
                error: Some(why),
            })
        };
        let thread = thread::Builder::new()
            .name(format!("iperf3 stream {i}"))
            .spawn(run)
            .expect("spawning a stream thread");
        self.handles[i] = Some(Handle {
            thread,
            waker,
            sender,
        });
    }

    /// The TCP sending state of stream `i` (`TCP_INFO`), while it runs; `None` for UDP.
    pub fn tcp_state(&self, i: usize) -> Option<TcpSendState> {
        let socket = self.handles[i].as_ref()?.waker.as_ref()?;
        tcp_send_state(socket.as_fd()).ok()
    }

    /// Whether stream `i`'s thread has ended (or it never started).
    pub fn finished(&self, i: usize) -> bool {
        self.handles[i]
            .as_ref()
            .is_none_or(|h| h.thread.is_finished())
    }

    /// Stops the senders (the flag) and waits for the streams at `which`.
    pub fn join(&mut self, which: &[usize]) -> Vec<Outcome> {
        self.stop.raise();
        let deadline = Instant::now() + STOP_WAIT;
        while Instant::now() < deadline && which.iter().any(|&i| !self.finished(i)) {
            thread::sleep(Duration::from_millis(5));
        }
        for &i in which {
            if let Some(Some(Handle { waker: Some(s), .. })) = self.handles.get(i)
                && !self.finished(i)
            {
                let _ = s.shutdown(Shutdown::Write);
            }
        }
        which.iter().map(|&i| self.take(i)).collect()
    }

    /// Ends the receiving streams at `which` once each has `target` bytes (when known) or at once,
    /// waiting at most `wait` for the bytes, and returns how they ended.
    pub fn finish(&mut self, which: &[(usize, Option<u64>)], wait: Duration) -> Vec<Outcome> {
        self.done.store(true, Ordering::Relaxed);
        let deadline = Instant::now() + wait;
        for &(i, target) in which {
            if let Some(target) = target {
                while self.live[i].bytes.load(Ordering::Relaxed) < target
                    && Instant::now() < deadline
                    && !self.handles[i]
                        .as_ref()
                        .is_some_and(|h| h.thread.is_finished())
                {
                    thread::sleep(Duration::from_millis(5));
                }
            }
            if let Some(Some(Handle {
                waker: Some(s),
                sender: false,
                ..
            })) = self.handles.get(i)
            {
                let _ = s.set_nonblocking(true);
                let _ = s.shutdown(Shutdown::Read);
            }
        }
        which.iter().map(|&(i, _)| self.take(i)).collect()
    }

    /// Waits until the receiving TCP streams at `which` reach the end of their streams, at most
    /// `wait`, then ends them.
    pub fn drain(&mut self, which: &[usize], wait: Duration) -> Vec<Outcome> {
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline
            && which.iter().any(|&i| {
                self.handles[i]
                    .as_ref()
                    .is_some_and(|h| h.waker.is_some() && !h.sender && !h.thread.is_finished())
            })
        {
            thread::sleep(Duration::from_millis(5));
        }
        let which: Vec<(usize, Option<u64>)> = which.iter().map(|&i| (i, None)).collect();
        self.finish(&which, Duration::ZERO)
    }

    fn take(&mut self, i: usize) -> Outcome {
        let Some(handle) = self.handles[i].take() else {
            return Outcome {
                bytes: 0,
                packets: 0,
                tally: None,
                zc: Value::Null,
                error: Some("it never started".into()),
            };
        };
        handle.thread.join().unwrap_or_else(|_| Outcome {
            bytes: self.live[i].bytes.load(Ordering::Relaxed),
            packets: 0,
            tally: None,
            zc: Value::Null,
            error: Some("its thread panicked".into()),
        })
    }
}

impl Drop for Running {
    /// Streams never joined (a test that failed) are told to stop; their threads end on their own.
    fn drop(&mut self) {
        self.stop.raise();
        self.done.store(true, Ordering::Relaxed);
        for h in self.handles.iter().flatten() {
            if let Some(s) = &h.waker {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }
}

/// A failed stream: why, and the bytes counted so far.
type Failed = (String, u64);

/// Whether a socket kind carries datagrams (each send stamped with iperf3's header).
trait Kind: ZcSocket {
    const DATAGRAMS: bool;
}

impl Kind for TcpStream {
    const DATAGRAMS: bool = false;
}

impl Kind for UdpSocket {
    const DATAGRAMS: bool = true;
}

/// Sends blocks (TCP) or datagrams (UDP) with a zcnet sender until the test stops them, paced to
/// `spec.rate` when it is set. TCP sends one read-only block lent over and over; each datagram is
/// a pool buffer stamped with its header.
fn send<S: Kind>(
    socket: S,
    spec: Spec,
    zc: Zc,
    live: &Live,
    stop: &Stop,
    start: Instant,
) -> Result<Outcome, Failed> {
    let failed = |what: &str, e: &dyn std::fmt::Display| {
        (format!("{what}: {e}"), live.bytes.load(Ordering::Relaxed))
    };
    let count = if S::DATAGRAMS { UDP_BUFFERS } else { 1 };
    let pool = BufferPool::new_keeping_contents(PoolConfig::new(spec.blksize, count))
        .map_err(|e| failed("mapping the send buffers", &e))?;
    let mut bufs = Vec::with_capacity(count);
    while let Some(mut b) = pool.take() {
        b.fill_with(spec.blksize, |d| {
            d.iter_mut().enumerate().for_each(|(i, x)| *x = i as u8)
        });
        bufs.push(b);
    }
    let block = (!S::DATAGRAMS).then(|| bufs.pop().expect("one buffer").freeze());
    drop(bufs);
    let mut config = SenderConfig::with_mode(zc.mode);
    config.send_timeout = Some(SEND_TIMEOUT);
    let mut tx =
        sender::sender(zc.api, socket, config, &pool).map_err(|e| failed("the sender", &e))?;
    let mut seq = 0u64;
    while stop.take(spec.blksize) {
        if spec.rate > 0 {
            pace(spec.rate, live.bytes.load(Ordering::Relaxed), start, stop);
        }
        let sent = match &block {
            Some(block) => tx.send(block.clone()).map_err(|e| e.to_string()),
            None => {
                let mut buf = tx
                    .take_from(&pool, SEND_TIMEOUT)
                    .map_err(|e| failed("waiting for a free buffer", &e))?;
                seq += 1;
                let (sec, usec) = now();
                buf.fill_with(spec.blksize, |d| {
                    UdpHeader { sec, usec, seq }.write(d, spec.wide)
                });
                tx.send(buf).map_err(|e| e.to_string())
            }
        };
        if let Err(e) = sent {
            // A send the test cut at its end (the peer stopped reading) ends the stream.
            if stop.raised() {
                break;
            }
            return Err(failed("sending", &e));
        }
        live.bytes.store(tx.stats().bytes, Ordering::Relaxed);
        live.packets.store(seq, Ordering::Relaxed);
    }
    let flushed = tx.flush(END_WAIT);
    let stats = tx.stats().clone();
    live.bytes.store(stats.bytes, Ordering::Relaxed);
    let mut zc_row = json!({
        "api": tx.path().name(),
        "mode": zc.mode.name(),
        "zerocopy": sender::zerocopy(&tx),
        "zc_calls": stats.zc_calls,
        "copy_calls": stats.copy_calls,
        "zc_ids": stats.zc_ids,
        "copied_ids": stats.copied_ids,
    });
    match flushed {
        Ok(()) => drop(tx),
        // iperf3's peer stops reading at the end of a --bidir test, and its receive window may hold
        // the last sends: they are left to the kernel, and the connection reset when it closes.
        Err(e) if stop.raised() => {
            zc_row["unacked_at_end"] = json!(e.to_string());
            let _ = tx.close(Duration::ZERO);
        }
        Err(e) => return Err(failed("waiting for the last completions", &e)),
    }
    Ok(Outcome {
        bytes: stats.bytes,
        packets: seq,
        tally: None,
        zc: zc_row,
        error: None,
    })
}

/// Sleeps until `sent` bytes are no more than `rate` bits per second since `start` allows (waking
/// for the stop flag).
fn pace(rate: u64, sent: u64, start: Instant, stop: &Stop) {
    let due = Duration::from_secs_f64(sent as f64 * 8.0 / rate as f64);
    while !stop.raised() {
        let ahead = due.saturating_sub(start.elapsed());
        if ahead.is_zero() {
            return;
        }
        thread::sleep(ahead.min(UDP_WAKE));
    }
}

/// The wall clock as iperf3's header carries it.
fn now() -> (u32, u32) {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (t.as_secs() as u32, t.subsec_micros())
}

/// Receives a TCP stream with a zcnet receiver until its end, or until the test shuts it down.
fn receive_tcp(
    stream: TcpStream,
    mode: RxMode,
    live: &Live,
    done: &AtomicBool,
) -> Result<Outcome, Failed> {
    // No low-water mark: iperf3's sender keeps its streams open after the test, so the last bytes
    // of a stream must wake the receiver however few they are.
    let mut config = RxConfig::default();
    config.mode = mode;
    let mut rx = Receiver::new(stream, config).map_err(|e| (format!("the receiver: {e}"), 0))?;
    let mut bytes = 0u64;
    let error = loop {
        match rx.recv() {
            Ok(Some(chunk)) => {
                bytes += chunk.len() as u64;
                live.bytes.store(bytes, Ordering::Relaxed);
            }
            Ok(None) => break None,
            // Shut down by the test, which raised the flag first.
            Err(_) if done.load(Ordering::Relaxed) => break None,
            Err(e) => break Some(format!("receiving: {e}")),
        }
    };
    let s = rx.stats();
    Ok(Outcome {
        bytes,
        packets: 0,
        tally: None,
        zc: json!({
            "rx_mode": mode.name(),
            "mapped_bytes": s.mapped_bytes,
            "copied_bytes": s.copied_bytes(),
            "fallback": rx.zerocopy_status().err().map(ToString::to_string),
        }),
        error,
    })
}

/// Receives datagrams in batches until the `done` flag, then takes what is already queued.
fn receive_udp(
    socket: &UdpSocket,
    spec: Spec,
    live: &Live,
    done: &AtomicBool,
) -> Result<Outcome, Failed> {
    let keep = UdpHeader::len(spec.wide);
    let mut batch = DatagramBatch::new(64, keep);
    socket
        .set_read_timeout(Some(UDP_WAKE))
        .map_err(|e| (format!("setting the read timeout: {e}"), 0))?;
    let mut tally = UdpTally::default();
    let (mut bytes, mut datagrams) = (0u64, 0u64);
    let mut stopping = false;
    loop {
        if !stopping && done.load(Ordering::Relaxed) {
            stopping = true;
            let _ = socket.set_nonblocking(true);
        }
        match batch.recv(socket) {
            Ok(_) => {
                let arrived = {
                    let (s, us) = now();
                    f64::from(s) + f64::from(us) / 1e6
                };
                for d in batch.iter() {
                    bytes += d.len() as u64;
                    datagrams += 1;
                    if let Some(h) = UdpHeader::parse(d.bytes(), spec.wide) {
                        tally.add(&h, arrived);
                    }
                }
                live.bytes.store(bytes, Ordering::Relaxed);
                live.packets.store(datagrams, Ordering::Relaxed);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                if stopping {
                    break;
                }
            }
            // A connected UDP socket reports the peer's ICMP errors (port unreachable) on reads.
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
            Err(e) => return Err((format!("receiving: {e}"), bytes)),
        }
    }
    Ok(Outcome {
        bytes,
        packets: datagrams,
        tally: Some(tally),
        zc: json!({"rx": "recvmmsg", "copied_bytes": bytes}),
        error: None,
    })
}
