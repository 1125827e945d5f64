//! Run: The accept loop of `zcnet bench tcp|rx --listen`, which serves as `iperf3 -s` does: streams side
//! by side, each on a thread of its own (so that its CPU time is its thread's), up to
//! `--max-streams` at once; a stream that brings no bytes for `--idle-timeout` is ended and
//! reported, and TCP keepalive on every accepted socket finds a peer that vanished. Nothing a peer
//! does ends the receiver: each stream ends with a row saying how ([`Ended`]).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use anyhow::{Result, bail};
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::net::sockopt;
use zcnet::rx::RxConfig;

use crate::bench::args::apart::ServeFlags;
use crate::bench::run::copies::{self, KernelCopies};
use crate::bench::run::listen::{Ended, StreamReport, Watch, receive_stream, stream_row};
use crate::live::{Ticker, interrupted};
use crate::report::{Column, Row, emit, print_rows};

/// TCP keepalive on accepted sockets: the first probe after this much silence…
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
/// …then one every this long…
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// …and the kernel resets the connection (`ETIMEDOUT`) after this many unanswered.
const KEEPALIVE_PROBES: u32 = 3;

/// How often the accept loop looks at its streams (idle, Ctrl-C) while no connection comes.
const WATCH_EVERY: Duration = Duration::from_millis(50);

/// How a listener prints the row of each stream.
#[derive(Debug, Clone, Copy)]
pub struct Rows {
    /// `tcp` or `rx`, for rows and messages.
    pub bench: &'static str,
    /// The columns of its text rows.
    pub columns: &'static [Column],
    pub json: bool,
}

impl Rows {
    /// Prints a stream's row, and in text a line saying why it ended otherwise than whole.
    fn print(self, peer: SocketAddr, r: &StreamReport, fields: Row) {
        let mut row = stream_row(self.bench, peer, r);
        row.extend(fields);
        print_rows(&[row], self.columns, self.json);
        if !self.json
            && let Some(why) = &r.reason
        {
            let ended = r.ended.map_or("?", Ended::name);
            emit(&format!("the stream from {peer} ended {ended}: {why}\n"));
        }
    }
}

/// How a listener serves its streams.
pub struct Serving<'a> {
    pub rows: Rows,
    /// `--once`: stop after the first stream.
    pub once: bool,
    pub flags: &'a ServeFlags,
    /// Whether to fail at the end when a stream asked to verify did not (the one-process mode's
    /// receiver leaves that to the bench that started it, which reads its rows).
    pub judge: bool,
    /// Whether each stream's row gains the kernel's copies of its receives
    /// (`kernel_copied_per_byte`, see [`StreamCopies`]), and whether they are counted (`false`:
    /// the rows say they are not, `--no-kernel-copies`).
    pub count_copies: Option<bool>,
}

/// The kernel's copies of a listener's receives, per stream: `zcnet::observe` counts the process,
/// so a stream's figure is the process's copies while it was received, and only a stream received
/// alone has one; a stream that overlapped another says so instead.
struct StreamCopies {
    copies: KernelCopies,
    /// A flag per stream being received, set once another stream overlapped it.
    active: Mutex<Vec<Arc<AtomicBool>>>,
}

/// Why a stream that overlapped another has no figure.
const OVERLAPPED: &str =
    "streams overlapped: the kernel's receive copies are counted per process, not per stream";

impl StreamCopies {
    /// A stream starts: the copies so far, and its overlap flag (every stream in flight is marked).
    fn begin(&self) -> (Result<u64, String>, Arc<AtomicBool>) {
        let flag = Arc::new(AtomicBool::new(false));
        let mut active = self.active.lock().unwrap_or_else(PoisonError::into_inner);
        if !active.is_empty() {
            flag.store(true, Ordering::Relaxed);
            active.iter().for_each(|f| f.store(true, Ordering::Relaxed));
        }
        active.push(Arc::clone(&flag));
        drop(active);
        (self.copies.so_far(), flag)
    }

    /// The stream of `bytes` ended: puts its figure, or why it has none, into `row`.
    fn end(&self, before: Result<u64, String>, flag: &Arc<AtomicBool>, bytes: u64, row: &mut Row) {
        let copied = self.copies.since(before);
        let mut active = self.active.lock().unwrap_or_else(PoisonError::into_inner);
        active.retain(|f| !Arc::ptr_eq(f, flag));
        drop(active);
        let copied = match flag.load(Ordering::Relaxed) {
            true => Err(OVERLAPPED.to_string()),
            false => copied,
        };
        copies::put(row, &copied, bytes);
    }
}

/// What one stream is received with.
pub struct StreamSetup {
    pub config: RxConfig,
    pub ticker: Ticker,
    /// Fields added to the stream's row.
    pub fields: Row,
}

/// A stream being received on its thread.
struct Active {
    thread: JoinHandle<Option<String>>,
    watch: Arc<Watch>,
    peer: SocketAddr,
}

/// Serves `listener` until Ctrl-C (or after one stream with `--once`): each accepted stream is
/// received on a thread of its own with what `setup` gives for it, and reported in a row when it
/// ends. Fails at the end (when `judge`) naming the streams whose sender asked for verification
/// that did not arrive whole or had bytes that differ.
pub fn serve(
    listener: &TcpListener,
    how: &Serving,
    mut setup: impl FnMut(SocketAddr) -> StreamSetup,
) -> Result<()> {
    listener.set_nonblocking(true)?;
    let idle =
        (how.flags.idle_timeout > 0.0).then(|| Duration::from_secs_f64(how.flags.idle_timeout));
    let mut active: Vec<Active> = Vec::new();
    let mut failures = Failures::default();
    let copies = how.count_copies.map(|counted| {
        Arc::new(StreamCopies {
            copies: KernelCopies::in_receives(!counted),
            active: Mutex::default(),
        })
    });
    let mut accepted = false;
    loop {
        reap(&mut active, &mut failures, how.rows.bench);
        let stopping = interrupted();
        for a in &active {
            if stopping {
                a.watch.end(Ended::Interrupted, "Ctrl-C".into());
            } else if let Some(limit) = idle.filter(|&d| a.watch.silent_for() >= d) {
                a.watch.end(
                    Ended::Idle,
                    format!("no bytes for {} s", limit.as_secs_f64()),
                );
            }
        }
        if stopping || (how.once && accepted) {
            if active.is_empty() {
                break;
            }
            thread::sleep(WATCH_EVERY);
            continue;
        }
        let Some((stream, peer)) = next_connection(listener) else {
            continue;
        };
        accepted = true;
        let busy = active
            .iter()
            .filter(|a| !a.watch.received.load(Ordering::Acquire))
            .count();
        if busy >= how.flags.max_streams as usize {
            let why = format!("{busy} streams are being received (--max-streams)");
            how.rows.print(
                peer,
                &StreamReport::ended_early(Ended::Refused, why),
                Row::new(),
            );
            continue;
        }
        let StreamSetup {
            config,
            ticker,
            fields,
        } = setup(peer);
        match start(
            stream,
            peer,
            (config, ticker, fields),
            copies.clone(),
            how.rows,
        ) {
            Ok(a) => active.push(a),
            Err((why, fields)) => {
                how.rows
                    .print(peer, &StreamReport::ended_early(Ended::Error, why), fields)
            }
        }
    }
    if how.judge && failures.count > 0 {
        let more = failures.count - failures.first.len() as u64;
        let more = if more > 0 {
            format!("; and {more} more")
        } else {
            String::new()
        };
        bail!(
            "{} streams asked to verify did not arrive whole and clean: {}{more}",
            how.rows.bench,
            failures.first.join("; ")
        );
    }
    Ok(())
}

/// The streams asked to verify that did not: how many, and the first few named (a receiver that runs
/// for months keeps no more).
#[derive(Default)]
struct Failures {
    count: u64,
    first: Vec<String>,
}

impl Failures {
    const NAMED: usize = 10;

    fn add(&mut self, failure: String) {
        self.count += 1;
        if self.first.len() < Failures::NAMED {
            self.first.push(failure);
        }
    }
}

/// Joins the streams whose threads have ended, collecting the failures they report.
fn reap(active: &mut Vec<Active>, failures: &mut Failures, bench: &str) {
    let mut i = 0;
    while i < active.len() {
        if !active[i].thread.is_finished() {
            i += 1;
            continue;
        }
        let a = active.swap_remove(i);
        match a.thread.join() {
            Ok(failure) => failure.into_iter().for_each(|f| failures.add(f)),
            Err(_) => failures.add(format!(
                "the {bench} stream from {}: its receiving thread panicked",
                a.peer
            )),
        }
    }
}

/// The next connection, waiting at most [`WATCH_EVERY`]. An accept error ends no more than that
/// connection: a peer gone before it was accepted is skipped; any other error (out of descriptors,
/// memory) is named on standard error and the listener goes on after a pause.
fn next_connection(listener: &TcpListener) -> Option<(TcpStream, SocketAddr)> {
    let timeout = Timespec::try_from(WATCH_EVERY).ok()?;
    let mut fds = [PollFd::new(listener, PollFlags::IN)];
    if poll(&mut fds, Some(&timeout)).ok()? == 0 {
        return None;
    }
    match listener.accept() {
        Ok(accepted) => Some(accepted),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock
                    | std::io::ErrorKind::Interrupted
                    | std::io::ErrorKind::ConnectionAborted
            ) =>
        {
            None
        }
        Err(e) => {
            eprintln!("zcnet: accept: {e}; the listener goes on");
            thread::sleep(Duration::from_secs(1));
            None
        }
    }
}

/// Readies an accepted socket (blocking, TCP keepalive) and starts its receiving thread; on failure,
/// why and the row's fields back.
fn start(
    stream: TcpStream,
    peer: SocketAddr,
    (config, mut ticker, mut fields): (RxConfig, Ticker, Row),
    copies: Option<Arc<StreamCopies>>,
    rows: Rows,
) -> std::result::Result<Active, (String, Row)> {
    let ready = stream
        .set_nonblocking(false)
        .and_then(|()| keepalive(&stream))
        .and_then(|()| Watch::new(&stream));
    let watch = match ready {
        Ok(w) => Arc::new(w),
        Err(e) => return Err((format!("setting up the accepted socket: {e}"), fields)),
    };
    let bench = rows.bench;
    let theirs = Arc::clone(&watch);
    let spawned = thread::Builder::new()
        .name(format!("{bench} {peer}"))
        .spawn(move || {
            let counting = copies.as_ref().map(|c| (c, c.begin()));
            let r = receive_stream(stream, config, &mut ticker, Some(&theirs));
            if let Some((copies, (before, flag))) = counting {
                copies.end(before, &flag, r.bytes, &mut fields);
            }
            theirs.received.store(true, Ordering::Release);
            rows.print(peer, &r, fields);
            r.failure()
                .map(|why| format!("the {bench} stream from {peer}: {why}"))
        });
    match spawned {
        Ok(thread) => Ok(Active {
            thread,
            watch,
            peer,
        }),
        Err(e) => Err((format!("starting its thread: {e}"), Row::new())),
    }
}

/// Turns on TCP keepalive: a peer that vanished without a reset (a host down, a cable out) ends its
/// stream with `ETIMEDOUT` after [`KEEPALIVE_IDLE`] + [`KEEPALIVE_PROBES`] × [`KEEPALIVE_INTERVAL`] of
/// silence instead of pinning its thread.
fn keepalive(stream: &TcpStream) -> std::io::Result<()> {
    sockopt::set_socket_keepalive(stream, true)?;
    sockopt::set_tcp_keepidle(stream, KEEPALIVE_IDLE)?;
    sockopt::set_tcp_keepintvl(stream, KEEPALIVE_INTERVAL)?;
    sockopt::set_tcp_keepcnt(stream, KEEPALIVE_PROBES)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream received alone keeps the observer's answer; streams in flight together each say
    /// they overlapped, however they end.
    #[test]
    fn only_a_stream_received_alone_has_a_copy_figure() {
        let copies = StreamCopies {
            copies: KernelCopies::not_counted("no observer here"),
            active: Mutex::default(),
        };
        let reason = |row: &Row| row["kernel_copied_reason"].as_str().unwrap().to_string();
        let (a, flag_a) = copies.begin();
        let (b, flag_b) = copies.begin();
        let (mut row_a, mut row_b, mut row_c) = (Row::new(), Row::new(), Row::new());
        copies.end(a, &flag_a, 10, &mut row_a);
        let (c, flag_c) = copies.begin();
        copies.end(b, &flag_b, 10, &mut row_b);
        copies.end(c, &flag_c, 10, &mut row_c);
        assert_eq!(reason(&row_a), OVERLAPPED);
        assert_eq!(reason(&row_b), OVERLAPPED);
        assert_eq!(reason(&row_c), OVERLAPPED);
        let (d, flag_d) = copies.begin();
        let mut row_d = Row::new();
        copies.end(d, &flag_d, 10, &mut row_d);
        assert_eq!(reason(&row_d), "no observer here");
        assert!(row_d["kernel_copied_per_byte"].is_null());
    }
}
