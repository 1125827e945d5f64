//! Run: the sender of `zcnet bench tcp` and `zcnet bench udp` — MSG_ZEROCOPY senders against plain
//! copying sends, every mode in the same invocation so that ratios are meaningful on a noisy host.
//! One mode's timed run on a pooled sender ([`measure`]) and the row it hands over. Each mode gets a
//! fresh socket (MSG_ZEROCOPY ids start at 0 per socket) and the same buffer pool size; streams
//! carry the header and pattern of [`crate::bench::run::wire`].

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{Value, json};
use zcnet::probe::{ResourceUsage, UsageOf, resource_usage};
use zcnet::tx::{BufferPool, Mode, PoolConfig, Sender, SenderConfig, ZcSocket};

use crate::bench::args::api::Api;
use crate::bench::args::{Common, Pages};
use crate::bench::run::streams;
use crate::bench::run::watch::{SendWatch, Stop};
use crate::bench::run::why;
use crate::bench::run::wire::{self, Bench, Header};
use crate::bench::run::{latency, sender};
use crate::live::{self, Ticker};
use crate::report::{Row, cpu_share, cpu_us_per_mb, gbit_per_s, object};

/// Longest wait for MSG_ZEROCOPY completions before a run fails.
pub(crate) const COMPLETION_WAIT: Duration = Duration::from_secs(10);

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
/// which a [`SendWatch`] watches instead); transmit timestamps with `--latency`.
pub(crate) fn sender_config(
    mode: Mode,
    common: &Common,
    send_timeout: Option<Duration>,
) -> SenderConfig {
    let mut config = SenderConfig::with_mode(mode);
    config.policy.threshold = common.threshold;
    config.send_timeout = send_timeout;
    config.timestamps = common.latency;
    config
}

/// A pool of `--pool-buffers` buffers for `api` (on the pages `--pages` chooses for it) whose every
/// buffer holds the pattern of units of `unit` bytes (filled once: buffers keep their bytes when
/// they come back). Huge pages the kernel does not give leave the pool on small ones; only an
/// explicit `--pages huge` says so here (the row's `huge_pages` says which it was).
pub(crate) fn new_pool(size: usize, unit: usize, api: Api, common: &Common) -> Result<BufferPool> {
    let count = common.pool_buffers as usize;
    let huge_pages = common.pages.huge_for(api);
    let pool = BufferPool::new_keeping_contents({
        let mut config = PoolConfig::new(size.max(1), count);
        config.huge_pages = huge_pages;
        config
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
    if common.latency {
        row.insert("latency".into(), latency::json(&tx.stats().latency));
    }
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
        "zerocopy": sender::zerocopy(tx),
        "registered": sender::registered(tx),
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

/// Interval lines of a sender (naming its stream when the run has several).
pub(crate) fn ticker(common: &Common, bench: &str, mode: Mode) -> Ticker {
    let mut label = json!({"bench": bench, "mode": mode.name()});
    if let Some(stream) = streams::current() {
        label["stream"] = json!(stream);
    }
    Ticker::new(common.interval, label, common.json)
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
        streams: 1,
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
