//! What `zcnet bench tcp` ([`crate::bench::tcp`]) and `zcnet bench udp` ([`crate::bench::udp`]) share:
//! MSG_ZEROCOPY senders against plain copying sends, every mode in the same invocation so that ratios
//! are meaningful on a noisy host.
//!
//! By default both sides run on this host: the sender in this process, the receiver in a process of
//! its own (this binary with `--listen … --once`), over loopback or over the veth harness with
//! `--netns`, so that the receiver never shares the sender's CPU time or caps its rate. `--listen` and
//! `--connect` run the two sides apart, on two hosts. `zcnet bench udp --sink xdp-drop` sends into a
//! veth whose far end runs a native XDP program dropping every frame — the one local path where the
//! kernel does not copy zero-copy sends. Each mode gets a fresh socket (MSG_ZEROCOPY ids start at 0
//! per socket) and the same buffer pool size; streams carry the header and pattern of [`crate::bench::run::wire`].

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use benchnet::{VethConfig, VethPair};
use serde_json::{Value, json};
use zcnet::probe::{ResourceUsage, UsageOf, resource_usage};
use zcnet::tx::{BufferPool, Mode, PolicyConfig, PoolConfig, Sender, SenderConfig, ZcSocket};
use zcnet::xdp::{AttachMode, XdpLink, XdpProgram};

use crate::bench::api::{self, Api};
use crate::bench::args::{Common, Pages, listen_addr};
use crate::bench::plan;
use crate::bench::report::crossover::Swept;
use crate::bench::report::summary::{Shown, print_summary};
use crate::bench::report::sweep;
use crate::bench::report::why;
use crate::bench::run::child::Watched;
use crate::bench::run::copies::KernelCopies;
use crate::bench::run::watch::{SendWatch, Stop};
use crate::bench::run::wire::{self, Bench, Header};
use crate::live::{self, Ticker};
use crate::report::{Row, cpu_share, cpu_us_per_mb, gbit_per_s, object};

/// Longest wait for MSG_ZEROCOPY completions before a run fails.
pub(crate) const COMPLETION_WAIT: Duration = Duration::from_secs(10);

/// The network a bench runs over: loopback of this namespace, or a veth pair (with an optional XDP
/// drop program on the receiving end).
pub(crate) struct Net {
    pub(crate) veth: Option<VethPair>,
    pub(crate) _sink: Option<XdpLink>,
    pub(crate) src: IpAddr,
    pub(crate) dst: IpAddr,
}

impl Net {
    pub(crate) fn new(common: &Common, xdp_drop: bool) -> Result<Net> {
        if !common.netns && !xdp_drop {
            let ip = loopback(common.ipv6);
            return Ok(Net {
                veth: None,
                _sink: None,
                src: ip,
                dst: ip,
            });
        }
        let pair = VethPair::new(VethConfig::default())
            .context("building the veth harness (needs root, iproute2 and ethtool)")?;
        let (src, dst): (IpAddr, IpAddr) = if common.ipv6 {
            (pair.a_v6.into(), pair.b_v6.into())
        } else {
            (pair.a_v4.into(), pair.b_v4.into())
        };
        // The far end is resolved statically: the XDP drop program drops ARP and neighbour
        // discovery too, and without it a burst of datagrams sent while discovery is pending is
        // dropped (the kernel queues only a few per unresolved neighbour).
        pair.pin_b_neighbours()?;
        let sink = if xdp_drop {
            let link = pair
                .b
                .run(|| XdpProgram::drop_all()?.attach_to(&pair.b_if, AttachMode::Driver))
                .context("attaching the XDP drop program to the receiving veth end")?;
            Some(link)
        } else {
            None
        };
        Ok(Net {
            veth: Some(pair),
            _sink: sink,
            src,
            dst,
        })
    }

    pub(crate) fn path(&self) -> &'static str {
        match (&self.veth, &self._sink) {
            (None, _) => "loopback",
            (Some(_), None) => "veth",
            (Some(_), Some(_)) => "xdp-drop",
        }
    }

    /// Runs `f` in the sending namespace (this one for loopback).
    pub(crate) fn in_sender<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.veth {
            Some(p) => p.a.run(f),
            None => f(),
        }
    }

    /// A command that starts `exe` in the receiving namespace.
    pub(crate) fn receiver_command(&self, exe: &str) -> Command {
        match &self.veth {
            Some(p) => p.b.command(exe),
            None => Command::new(exe),
        }
    }
}

fn loopback(ipv6: bool) -> IpAddr {
    if ipv6 {
        Ipv6Addr::LOCALHOST.into()
    } else {
        Ipv4Addr::LOCALHOST.into()
    }
}

/// What one timed run measured on the sending thread.
struct Measured {
    seconds: f64,
    usage: ResourceUsage,
    interrupted: bool,
    /// Why the [`SendWatch`] ended the run for want of progress.
    stalled: Option<String>,
    /// Why a send error ended the run, in the bench's words ([`cut_short`]).
    failed: Option<String>,
}

/// Why the send error `e` (whose errno is `errno`) ended a run, in the bench's words: a peer that
/// went away is named as such (the library's own text speaks to programs holding a sender); any
/// other error as it is.
pub(crate) fn cut_short(errno: Option<i32>, e: &dyn std::fmt::Display) -> String {
    match errno {
        Some(libc::ECONNRESET) => "the peer reset the connection (ECONNRESET)".into(),
        Some(libc::EPIPE) => "the peer closed the connection (EPIPE)".into(),
        Some(libc::ECONNREFUSED) => {
            "the peer refused the datagrams: nothing listens there any more (ECONNREFUSED)".into()
        }
        Some(libc::EMSGSIZE) => {
            "a datagram is larger than the path to the peer takes (EMSGSIZE)".into()
        }
        Some(libc::EPERM) => "a firewall rule on this host refused the send (EPERM: an nftables \
                              or iptables drop or reject on output)"
            .into(),
        _ => e.to_string(),
    }
}

/// The sender's configuration; `send_timeout` is the library's wait for buffer space (none for TCP,
/// which a [`SendWatch`] watches instead).
pub(crate) fn sender_config(
    mode: Mode,
    common: &Common,
    send_timeout: Option<Duration>,
) -> SenderConfig {
    SenderConfig {
        policy: PolicyConfig {
            threshold: common.threshold,
            ..PolicyConfig::with_mode(mode)
        },
        send_timeout,
        ..Default::default()
    }
}

/// A pool of `--pool-buffers` buffers for `api` (on the pages `--pages` chooses for it) whose every
/// buffer holds the pattern of units of `unit` bytes (filled once: buffers keep their bytes when
/// they come back). Huge pages the kernel does not give leave the pool on small ones; only an
/// explicit `--pages huge` says so here (the row's `huge_pages` says which it was).
pub(crate) fn new_pool(size: usize, unit: usize, api: Api, common: &Common) -> Result<BufferPool> {
    let count = common.pool_buffers as usize;
    let huge_pages = common.pages.huge_for(api);
    let pool = BufferPool::new_keeping_contents(PoolConfig {
        buf_size: size.max(1),
        count,
        huge_pages,
    })
    .context("mapping the send buffer pool")?;
    if let (Pages::Huge, Err(why)) = (common.pages, pool.huge_pages()) {
        eprintln!("zcnet: --pages huge: the send buffers are on small pages: {why}");
    }
    let mut all = Vec::with_capacity(count);
    while let Some(mut buf) = pool.take() {
        buf.fill_with(size, |b| wire::fill(b, unit));
        all.push(buf);
    }
    Ok(pool)
}

/// What is written into each send's bytes just before it leaves (UDP sequence numbers).
pub(crate) type Stamp<'a> = &'a mut dyn FnMut(&mut [u8]);

/// Whether a timed run goes on, from the clock read once every [`RunClock::SENDS`] sends or
/// [`RunClock::BYTES`] bytes, whichever comes first (and at the first send): a clock read per send
/// was 0.7% of a copy-mode TCP sender's CPU samples on a VM (kvm-clock through the vDSO), and the
/// end of a run need not be found to the send.
struct RunClock {
    start: Instant,
    duration: Duration,
    sends: u32,
    bytes: usize,
}

impl RunClock {
    const SENDS: u32 = 8;
    const BYTES: usize = 1 << 20;

    fn new(start: Instant, duration: Duration) -> RunClock {
        RunClock {
            start,
            duration,
            sends: Self::SENDS,
            bytes: 0,
        }
    }

    /// Called before each send of `size` bytes: false once the duration has passed.
    fn running(&mut self, size: usize) -> bool {
        if !self.read_next() {
            self.sends += 1;
            self.bytes = self.bytes.saturating_add(size);
            return true;
        }
        self.sends = 1;
        self.bytes = size;
        self.start.elapsed() < self.duration
    }

    /// Whether the next [`RunClock::running`] reads the clock (interval lines are due then too).
    fn read_next(&self) -> bool {
        self.sends >= Self::SENDS || self.bytes >= Self::BYTES
    }
}

/// Sends `size`-byte pooled buffers with `send` for `duration` (or until Ctrl-C), recycling them as
/// completions return and printing interval lines, then flushes. CPU time is the sending thread's.
/// A send that `watch` ended (Ctrl-C, no progress, or a slow peer past the run's end, which the
/// watch is told) ends the run with what it sent so far; so does any other send error (a peer that
/// went away), the run then marked `failed` with why.
fn timed<S: ZcSocket>(
    tx: &mut Sender<S>,
    pool: &BufferPool,
    (size, stamp): (usize, Stamp<'_>),
    duration: Duration,
    (ticker, watch): (&mut Ticker, Option<&SendWatch>),
) -> Result<Measured> {
    let before = resource_usage(UsageOf::Thread)?;
    let start = Instant::now();
    if let Some(watch) = watch {
        watch.end_by(start + duration);
    }
    let mut clock = RunClock::new(start, duration);
    let mut interrupted = false;
    let sent = (|| {
        while clock.running(size) {
            if live::interrupted() {
                interrupted = true;
                break;
            }
            let mut buf = match pool.take() {
                Some(b) => b,
                None => {
                    tx.wait_completions(Duration::from_millis(100))?;
                    continue;
                }
            };
            buf.set_len(size);
            stamp(&mut buf);
            tx.send(buf)?;
            if clock.read_next() {
                ticker.tick(tx.stats().bytes);
            }
        }
        tx.flush(COMPLETION_WAIT)
    })();
    let (mut stalled, mut failed) = (None, None);
    if let Err(e) = sent {
        match watch.and_then(SendWatch::stop) {
            Some(Stop::Interrupted) => interrupted = true,
            Some(Stop::Stalled(why)) => stalled = Some(why),
            // The run reached its end; its caller counts what the peer had not taken.
            Some(Stop::Slow { .. }) => {}
            None => failed = Some(cut_short(e.raw_os_error(), &e)),
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let usage = resource_usage(UsageOf::Thread)?.since(&before);
    Ok(Measured {
        seconds,
        usage,
        interrupted,
        stalled,
        failed,
    })
}

/// One mode's run on `tx`: sends of `size` bytes from `pool` (filled with the pattern, each send
/// passed to `stamp` first) for `--duration`, with interval lines; returns the sender's row.
#[allow(clippy::too_many_arguments)]
pub(crate) fn measure<S: ZcSocket>(
    tx: &mut Sender<S>,
    pool: &BufferPool,
    bench: &str,
    path: &str,
    dst: SocketAddr,
    (mode, api): (Mode, Api),
    (size, stamp): (usize, Stamp<'_>),
    (common, watch): (&Common, Option<&SendWatch>),
) -> Result<Row> {
    let mut ticker = ticker(common, bench, mode);
    let duration = Duration::from_secs_f64(common.duration);
    let m = timed(tx, pool, (size, stamp), duration, (&mut ticker, watch))
        .with_context(|| format!("{bench} {} {} run", api.name(), mode.name()))?;
    let mut row = row(bench, path, dst, (mode, api), size, &m, tx);
    row.insert("huge_pages".into(), json!(pool.huge_pages().is_ok()));
    Ok(row)
}

fn row<S: ZcSocket>(
    bench: &str,
    path: &str,
    dst: SocketAddr,
    (mode, api): (Mode, Api),
    size: usize,
    m: &Measured,
    tx: &Sender<S>,
) -> Row {
    let s = tx.stats();
    let v = json!({
        "bench": bench,
        "role": "sender",
        "path": path,
        "ip": if dst.is_ipv6() { "v6" } else { "v4" },
        "api": api.name(),
        "mode": mode.name(),
        "size": size,
        "seconds": m.seconds,
        "bytes": s.bytes,
        "gbit_per_s": gbit_per_s(s.bytes, m.seconds),
        "calls": s.calls,
        "cpu_user_s": m.usage.user.as_secs_f64(),
        "cpu_sys_s": m.usage.system.as_secs_f64(),
        "cpu_share": cpu_share(&m.usage, m.seconds),
        "cpu_us_per_mb": cpu_us_per_mb(&m.usage, s.bytes),
        "zc_ids": s.zc_ids,
        "copied_ids": s.copied_ids,
        "notifications": s.notifications,
        "enobufs": s.enobufs,
        "fallbacks": s.fallbacks(),
        "zc_calls": s.zc_calls,
        "copy_small": s.copy_small,
        "policy_switches": s.policy_switches,
        "zerocopy": api::zerocopy(tx),
        "registered": api::registered(tx),
        "interrupted": m.interrupted,
        "stalled": m.stalled,
        "failed": m.failed,
        "copy_cheaper": s.copy_cheaper,
        "cost_comparisons": s.cost_comparisons,
        "auto_choice": s.auto.as_ref().map(why::choice_json),
        "why": why::short(s),
        "auto_reason": why::sentence(s),
        "enobufs_reason": (s.copy_enobufs > 0).then(|| format!(
            "{} of {} sends copied: {}",
            s.copy_enobufs,
            s.calls,
            zcnet::tx::enobufs_reason()
        )),
        "memlock_reason": (s.copy_memlock > 0).then(|| format!(
            "{} of {} sends copied: {}",
            s.copy_memlock,
            s.calls,
            zcnet::tx::memlock_reason()
        )),
    });
    object(v)
}

pub(crate) fn ticker(common: &Common, bench: &str, mode: Mode) -> Ticker {
    Ticker::new(
        common.interval,
        json!({"bench": bench, "mode": mode.name()}),
        common.json,
    )
}

/// Interval lines of a `--listen` receiver (of its stream from `peer`, when several may run at once).
pub(crate) fn receiver_ticker(common: &Common, bench: &str, peer: Option<SocketAddr>) -> Ticker {
    let mut label = json!({"bench": bench, "role": "receiver"});
    if let Some(peer) = peer {
        label["peer"] = json!(peer.to_string());
    }
    Ticker::new(common.interval, label, common.json)
}

pub(crate) fn header(bench: Bench, mode: Mode, unit: usize, common: &Common) -> Header {
    Header {
        bench,
        mode: match mode {
            Mode::Copy => 0,
            Mode::ZeroCopy => 1,
            Mode::Auto => 2,
        },
        verify: !common.apart.no_verify,
        unit: unit as u32,
        duration_ms: (common.duration * 1000.0) as u64,
        bytes: 0,
        // A TCP stream runs for a duration: its end mark tells a whole one (UDP has end datagrams).
        marked: bench == Bench::Tcp,
    }
}

/// The receiver process of the one-process mode: this binary with `--listen … --once`, in the
/// receiving namespace and in a process group of its own (Ctrl-C reaches only this process, which
/// then ends the stream so that the receiver reports what arrived).
pub(crate) struct Peer {
    pub(crate) child: Watched,
    pub(crate) addr: SocketAddr,
}

impl Peer {
    pub(crate) fn spawn(net: &Net, bench: &str, extra: &[String], common: &Common) -> Result<Peer> {
        let exe = std::env::current_exe().context("locating the zcnet binary")?;
        let mut cmd = net.receiver_command(&exe.to_string_lossy());
        cmd.args(["bench", bench, "--listen"])
            .arg(SocketAddr::new(net.dst, 0).to_string())
            .args(["--once", "--json", "--interval", "0", "--exit-with-parent"])
            .args(extra);
        if common.ipv6 {
            cmd.arg("--ipv6");
        }
        cmd.stdin(Stdio::piped()).process_group(0);
        let mut child = Watched::spawn(&mut cmd, "the receiver process")?;
        let addr = match child.next_line(Instant::now() + REPORT_WAIT) {
            Ok(Some(line)) => serde_json::from_str::<Value>(&line)
                .ok()
                .and_then(|v| v.get("listening")?.as_str()?.parse().ok()),
            Ok(None) => None,
            Err(why) => return Err(child.failure(&why)),
        };
        match addr {
            Some(addr) => Ok(Peer { child, addr }),
            None => Err(child.failure("did not start")),
        }
    }

    /// Waits for the receiver's report of its one stream, at most [`REPORT_WAIT`]: the receiver
    /// ends its stream within that once the sender is done, unless it is stopped or stuck; then it
    /// is killed and the run fails with its state and standard error.
    pub(crate) fn finish(mut self) -> Result<Row> {
        let deadline = Instant::now() + REPORT_WAIT;
        let mut last = None;
        loop {
            match self.child.next_line(deadline) {
                Ok(Some(line)) => {
                    if let Ok(Value::Object(row)) = serde_json::from_str::<Value>(&line)
                        && row.get("role").and_then(Value::as_str) == Some("receiver")
                    {
                        last = Some(row);
                    }
                }
                Ok(None) => break,
                Err(why) => return Err(self.child.failure(&why)),
            }
        }
        let status = match self.child.wait(deadline) {
            Ok(status) => status,
            Err(why) => return Err(self.child.failure(&why)),
        };
        match last {
            Some(row) if status.success() => Ok(row),
            _ => Err(self.child.failure(&format!("failed ({status})"))),
        }
    }

    /// Stops the receiver (the run failed on this side).
    pub(crate) fn abandon(self) {
        self.child.abandon();
    }

    /// The sender's row of a run `sent` to this receiver, with the receiver's findings added, and
    /// the receiver's own row — `None` when the receiver gave none (it was stopped, or failed),
    /// the sender's row then marked `failed` with why; fails when the send failed (the receiver is
    /// stopped then) or the receiver found wrong bytes.
    pub(crate) fn merge_into(
        self,
        sent: Result<Row>,
        bench: &str,
        mode: Mode,
    ) -> Result<(Row, Option<Row>)> {
        let mut row = match sent {
            Ok(row) => row,
            Err(e) => {
                self.abandon();
                return Err(e);
            }
        };
        let received = match self.finish() {
            Ok(received) => received,
            Err(e) => {
                row.insert("failed".into(), json!(format!("{e:#}")));
                return Ok((row, None));
            }
        };
        merge_receiver(&mut row, &received);
        check_data(bench, mode, &received)?;
        Ok((row, Some(received)))
    }
}

/// Longest wait for the receiver's report once the sender is done: its stream ends within a few
/// seconds (a UDP run after two silent seconds at most).
const REPORT_WAIT: Duration = Duration::from_secs(10);

/// Adds the receiver's findings to the sender's row.
fn merge_receiver(row: &mut Row, peer: &Row) {
    for (key, name) in [
        ("bytes", "received_bytes"),
        ("datagrams", "received_datagrams"),
        ("cpu_us_per_mb", "rx_cpu_us_per_mb"),
        ("data_errors", "data_errors"),
        ("socket_drops", "rx_socket_drops"),
        ("sent_datagrams", "sent_datagrams"),
        ("lost", "lost"),
        ("duplicated", "duplicated"),
        ("reordered", "reordered"),
    ] {
        if let Some(v) = peer.get(key) {
            row.insert(name.into(), v.clone());
        }
    }
}

/// Fails when the receiver found wrong bytes.
fn check_data(bench: &str, mode: Mode, peer: &Row) -> Result<()> {
    match peer.get("data_errors").and_then(Value::as_u64) {
        Some(n) if n > 0 => bail!(
            "{bench} {}: the receiver found {n} bytes that differ from what was sent",
            mode.name()
        ),
        _ => Ok(()),
    }
}

/// Runs `one_run` for every (round, size, mode, api) of the [`plan::sends`] of `sizes`, stopping after a
/// run that was interrupted, stalled or failed (or before the next run once Ctrl-C came or the
/// output closed), and prints the summary of the rows (each with its round) — with `--sizes`, then
/// the crossover and the `--plot`; a stalled or failed run then fails the bench with what was seen.
/// A run that ends in an error without a row (a peer that refuses the connection) still gets the
/// rows of the runs before it printed, then fails the bench.
pub(crate) fn run_rounds(
    (common, bench, sizes): (&Common, &str, &[usize]),
    mut one_run: impl FnMut(usize, Mode, Api) -> Result<Row>,
) -> Result<()> {
    let mut rows = Vec::new();
    let mut whole = true;
    let copies = KernelCopies::start();
    for (round, size, mode, api) in plan::sends(common.rounds, sizes, &common.mode, common.apis()) {
        // Ctrl-C, or an output whose reader is gone, that came after a run's end: no more runs.
        if live::interrupted() {
            whole = false;
            break;
        }
        let before = copies.so_far();
        let mut row = match one_run(size, mode, api) {
            Ok(row) => row,
            Err(e) => {
                print_summary(&rows, shown(common));
                return Err(e);
            }
        };
        copies.record(before, &mut row);
        row.insert("round".into(), json!(round));
        let stop = is_interrupted(&row) || cut_short_by(&row).is_some();
        rows.push(row);
        if stop {
            whole = false;
            break;
        }
    }
    print_summary(&rows, shown(common));
    if !common.sizes.is_empty() {
        let path = rows.first().and_then(|r| r["path"].as_str()).unwrap_or("?");
        let swept = Swept {
            bench,
            path,
            size_means: "bytes per send",
        };
        sweep::finish(&rows, &swept, common.json, (common.plot.as_deref(), whole))?;
    }
    if let Some(row) = rows.last()
        && let Some(why) = cut_short_by(row)
    {
        let name = |key| row.get(key).and_then(Value::as_str).unwrap_or("?");
        bail!(
            "the {} {} run stopped after {} bytes: {why}",
            name("api"),
            name("mode"),
            row.get("bytes").and_then(Value::as_u64).unwrap_or(0)
        );
    }
    Ok(())
}

/// With `--listen`, the address to listen on, Ctrl-C watched from now on; `None` for a sender. The
/// one-process mode's receiver (`--exit-with-parent`) starts watching its standard input here.
pub(crate) fn receiver_role(common: &Common) -> Result<Option<SocketAddr>> {
    if common.exit_with_parent {
        exit_with_parent();
    }
    let Some(spec) = &common.listen else {
        return Ok(None);
    };
    live::watch_interrupts()?;
    listen_addr(spec, common.ipv6).map(Some)
}

/// Ends this process when standard input closes: the one-process mode's receiver must not outlive
/// the bench that started it, however that bench ends.
pub(crate) fn exit_with_parent() {
    thread::spawn(|| {
        let mut sink = [0u8; 64];
        while matches!(std::io::stdin().read(&mut sink), Ok(n) if n > 0) {}
        std::process::exit(3);
    });
}

/// What the summary of `common`'s runs shows.
fn shown(common: &Common) -> Shown {
    Shown {
        json: common.json,
        rounds: common.rounds > 1,
        sweep: !common.sizes.is_empty(),
    }
}

pub(crate) fn is_interrupted(row: &Row) -> bool {
    row.get("interrupted").and_then(Value::as_bool) == Some(true)
}

/// Why the run of `row` ended before its duration on this side: it stalled (see [`SendWatch`]) or
/// a send failed ([`cut_short`]), if it did.
pub(crate) fn cut_short_by(row: &Row) -> Option<&str> {
    ["stalled", "failed"]
        .iter()
        .find_map(|key| row.get(*key).and_then(Value::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_refused_by_a_firewall_says_so() {
        let e = std::io::Error::from_raw_os_error(libc::EPERM);
        let why = cut_short(e.raw_os_error(), &e);
        assert!(why.contains("firewall"), "{why}");
    }

    #[test]
    fn a_run_ends_within_a_few_sends_of_its_duration() {
        let mut clock = RunClock::new(Instant::now(), Duration::ZERO);
        assert!(!clock.running(1), "a run of no duration sends nothing");
        let mut clock = RunClock::new(Instant::now(), Duration::from_millis(20));
        assert!(clock.running(100));
        std::thread::sleep(Duration::from_millis(30));
        let small = (1..=RunClock::SENDS)
            .take_while(|_| clock.running(100))
            .count();
        assert!(
            small < RunClock::SENDS as usize,
            "{small} sends after the end"
        );
        let mut clock = RunClock::new(Instant::now(), Duration::from_millis(20));
        assert!(clock.running(RunClock::BYTES));
        std::thread::sleep(Duration::from_millis(30));
        assert!(!clock.running(RunClock::BYTES), "a MiB send after the end");
    }
}
