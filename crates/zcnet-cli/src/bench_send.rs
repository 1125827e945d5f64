//! `zcnet bench tcp` and `zcnet bench udp`: MSG_ZEROCOPY senders against plain copying sends, every
//! mode in the same invocation so that ratios are meaningful on a noisy host.
//!
//! By default both sides run on this host: the sender in this process, the receiver in a process of
//! its own (this binary with `--listen … --once`), over loopback or over the veth harness with
//! `--netns`, so that the receiver never shares the sender's CPU time or caps its rate. `--listen` and
//! `--connect` run the two sides apart, on two hosts. `zcnet bench udp --sink xdp-drop` sends into a
//! veth whose far end runs a native XDP program dropping every frame — the one local path where the
//! kernel does not copy zero-copy sends. Each mode gets a fresh socket (MSG_ZEROCOPY ids start at 0
//! per socket) and the same buffer pool size; streams carry the header and pattern of [`crate::wire`].

use std::io::{ErrorKind, Read, Write};
use std::net::{
    IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket,
};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use testnet::{VethConfig, VethPair};
use zcnet::probe::{ResourceUsage, UsageOf, resource_usage};
use zcnet::rx::{RxConfig, RxMode};
use zcnet::tx::{BufferPool, Mode, PolicyConfig, PoolConfig, Sender, SenderConfig, ZcSocket};
use zcnet::xdp::headers::{IPV4_HLEN, IPV6_HLEN, UDP_HLEN};
use zcnet::xdp::{AttachMode, XdpLink, XdpProgram};

use crate::auto_why;
use crate::bench_apart::ApartFlags;
use crate::bench_api::{self, Api};
use crate::bench_listen;
use crate::bench_listen_udp::{self, DatagramReport};
use crate::bench_send_mmsg::{self, MmsgSend};
use crate::bench_send_xdp::{self, XdpSend};
use crate::bench_serve::{self, Rows, ServeFlags, Serving, StreamSetup};
use crate::child::Watched;
use crate::flags::{self, UsageError};
use crate::live::{self, Ticker};
use crate::report::{self, Column, Row, cpu_share, cpu_us_per_mb, gbit_per_s, object, print_rows};
use crate::send_watch::{SendWatch, Stop, TcpTimeouts};
use crate::sweep::{self, Swept};
use crate::wire::{self, Bench, Finish, Header};

/// Options shared by both benches. The sender's are refused with `--listen`; `--api` is checked once
/// parsed (udp's receiver takes `--api af_xdp`).
#[derive(Debug, clap::Args)]
struct Common {
    /// Bytes per send call (K, M suffixes allowed).
    #[arg(long, value_parser = flags::size, conflicts_with = "listen")]
    size: Option<usize>,
    /// Send sizes to sweep instead of one --size, comma-separated (e.g. 1K,4K,16K,64K,256K): every
    /// --mode runs at every size, the order of the modes reversed from one size (and round) to the
    /// next; a row per size and mode, then the size from which zerocopy costs less CPU per MB than
    /// copy. Each size is the bytes of one send, within --size's limits (udp --gso: the bytes of one
    /// send, cut into --gso segments, the last one shorter; at most 64 segments and 65507 bytes).
    #[arg(long, value_delimiter = ',', value_parser = flags::size, conflicts_with_all = ["size", "listen"])]
    sizes: Vec<usize>,
    /// With --sizes: draw Gbit/s and CPU per MB against the size, a line per mode, into FILE.svg.
    #[arg(
        long,
        value_name = "FILE.svg",
        requires = "sizes",
        conflicts_with = "listen"
    )]
    plot: Option<PathBuf>,
    /// Seconds each mode runs.
    #[arg(long, default_value_t = 2.0, value_parser = flags::duration, conflicts_with = "listen")]
    duration: f64,
    /// Modes to compare, comma-separated: copy, zerocopy, auto.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "copy,zerocopy,auto",
        conflicts_with = "listen"
    )]
    mode: Vec<Mode>,
    /// Send APIs to compare, comma-separated: sendmsg (MSG_ZEROCOPY), io_uring (SEND_ZC from
    /// registered buffers), sendmmsg (udp only: --batch datagrams a call, always copied, so it runs
    /// in --mode copy only; no --gso), af_xdp (udp --sink xdp-drop only: an AF_XDP UDP endpoint on
    /// the sending veth end; --mode copy binds XDP_COPY, zerocopy and auto try XDP_ZEROCOPY and fall
    /// back to copy, saying why; no --gso); each mode runs with each, side by side [default:
    /// sendmsg].
    // No default_value: a `--listen` given `--api sendmsg` is refused, which a default would hide.
    #[arg(long, value_delimiter = ',')]
    api: Vec<Api>,
    /// Use IPv6.
    #[arg(long)]
    ipv6: bool,
    /// Run over a veth pair between two fresh network namespaces instead of loopback (needs root).
    #[arg(long, conflicts_with_all = ["listen", "connect"])]
    netns: bool,
    /// Size threshold of the auto mode, in bytes.
    #[arg(long, default_value_t = 10 << 10, value_parser = flags::size, conflicts_with = "listen")]
    threshold: usize,
    /// Back the send buffers with transparent huge pages (io_uring then sends them unregistered:
    /// the kernel charges a fixed send from a huge page to the socket as up to the whole page).
    #[arg(long, conflicts_with = "listen")]
    huge_pages: bool,
    /// One JSON object per interval and per mode instead of a table.
    #[arg(long)]
    json: bool,
    /// Seconds between interval lines (0: none).
    #[arg(long, default_value_t = 1.0, value_parser = flags::interval)]
    interval: f64,
    /// Rounds: every mode runs once per round, in reverse order on even rounds; with more than one,
    /// the summary adds each mode's totals and how auto compares with the better of the other two.
    #[arg(long, default_value_t = 1, value_parser = flags::count, conflicts_with = "listen")]
    rounds: u32,
    /// Be the receiver only: listen on [ADDR:]PORT and report each stream (until Ctrl-C, or --once).
    #[arg(long, value_name = "[ADDR:]PORT", conflicts_with = "connect")]
    listen: Option<String>,
    /// Be the sender only: send each --mode to a `--listen` receiver (or a foreign one with --raw) at
    /// HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    connect: Option<String>,
    #[command(flatten)]
    apart: ApartFlags,
    /// Internal: end when standard input closes (the receiver process of the one-process mode).
    #[arg(long, hide = true)]
    exit_with_parent: bool,
}

impl Common {
    /// The send APIs of `--api`, `sendmsg` when it is not given.
    fn apis(&self) -> &[Api] {
        if self.api.is_empty() {
            &[Api::Sendmsg]
        } else {
            &self.api
        }
    }
}

/// Options of `zcnet bench tcp`.
#[derive(Debug, clap::Args)]
pub struct TcpArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    serve: ServeFlags,
    #[command(flatten)]
    timeouts: TcpTimeouts,
}

/// Where UDP datagrams go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Sink {
    /// A UDP socket in a receiver process that reads (and verifies) them.
    Socket,
    /// A native XDP program on the receiving veth end that drops every frame (implies --netns).
    XdpDrop,
}

/// Options of `zcnet bench udp`.
#[derive(Debug, clap::Args)]
pub struct UdpArgs {
    #[command(flatten)]
    common: Common,
    /// Segment size for UDP GSO (UDP_SEGMENT): each send of --size bytes leaves as segments of SEG.
    #[arg(long, value_name = "SEG", value_parser = flags::segment, conflicts_with = "listen")]
    gso: Option<u16>,
    /// Receiver of the datagrams (one-process mode).
    #[arg(long, value_enum, default_value = "socket", conflicts_with_all = ["listen", "connect"])]
    sink: Sink,
    /// With --listen --api af_xdp: the interface whose every rx queue the AF_XDP endpoint serves.
    #[arg(
        long,
        value_name = "IF",
        requires = "listen",
        conflicts_with = "connect"
    )]
    iface: Option<String>,
    /// Datagrams per sendmmsg(2) call of --api sendmmsg (1 to 1024, the kernel's UIO_MAXIOV).
    #[arg(long, default_value_t = 32, value_parser = flags::mmsg_batch, conflicts_with = "listen")]
    batch: usize,
}

const COLUMNS: &[Column] = &[
    ("path", "path"),
    ("round", "round"),
    ("api", "api"),
    ("mode", "mode"),
    ("size", "size"),
    ("gbit_per_s", "Gbit/s"),
    ("calls", "calls"),
    ("cpu_us_per_mb", "CPU us/MB"),
    ("cpu_ns_per_packet", "CPU ns/pkt"),
    ("zc_ids", "zc ids"),
    ("copied_ids", "copied ids"),
    ("notifications", "notifs"),
    ("enobufs", "ENOBUFS"),
    ("fallbacks", "fallbacks"),
    ("rx_cpu_us_per_mb", "rx us/MB"),
    ("lost", "lost"),
    ("data_errors", "data errors"),
    ("why", "why"),
];

/// Buffers per pool: enough to keep the socket busy while completions trail behind.
const POOL_BUFFERS: usize = 64;

/// Largest `--size` of `bench tcp`: the pool holds [`POOL_BUFFERS`] buffers of it.
const MAX_TCP_SIZE: u64 = 16 << 20;

/// Largest UDP payload (IPv4: 65535 less the IP and UDP headers).
const MAX_UDP_PAYLOAD: u64 = 65_507;

/// Segments one UDP GSO send may carry (UDP_MAX_SEGMENTS of the kernel).
const MAX_GSO_SEGMENTS: u64 = 64;

/// Longest wait for MSG_ZEROCOPY completions before a run fails.
const COMPLETION_WAIT: Duration = Duration::from_secs(10);

/// The network a bench runs over: loopback of this namespace, or a veth pair (with an optional XDP
/// drop program on the receiving end).
struct Net {
    veth: Option<VethPair>,
    _sink: Option<XdpLink>,
    src: IpAddr,
    dst: IpAddr,
}

impl Net {
    fn new(common: &Common, xdp_drop: bool) -> Result<Net> {
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

    fn path(&self) -> &'static str {
        match (&self.veth, &self._sink) {
            (None, _) => "loopback",
            (Some(_), None) => "veth",
            (Some(_), Some(_)) => "xdp-drop",
        }
    }

    /// Runs `f` in the sending namespace (this one for loopback).
    fn in_sender<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.veth {
            Some(p) => p.a.run(f),
            None => f(),
        }
    }

    /// A command that starts `exe` in the receiving namespace.
    fn receiver_command(&self, exe: &str) -> Command {
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

/// The address of `--listen [ADDR:]PORT` (a bare port, or `:PORT`, listens on every address; an IPv6
/// address goes in brackets, `[::1]:5201`).
pub(crate) fn listen_addr(spec: &str, ipv6: bool) -> Result<SocketAddr> {
    if let Ok(addr) = spec.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let usage = |why: &str| -> anyhow::Error {
        UsageError(format!(
            "--listen {spec:?}: {why}, e.g. 5201, 0.0.0.0:5201 or [::1]:5201"
        ))
        .into()
    };
    if let Ok(ip) = spec.parse::<IpAddr>() {
        return Err(UsageError(format!("--listen {spec:?}: {}", no_port(ip, spec))).into());
    }
    let port = spec.strip_prefix(':').unwrap_or(spec);
    match port.parse::<u16>() {
        Ok(port) if ipv6 => Ok(SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port)),
        Ok(port) => Ok(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port)),
        Err(_) => Err(usage("expected [ADDR:]PORT")),
    }
}

/// Why `spec`, which parsed as the address `ip`, is no address with a port. An IPv6 address takes
/// its port after brackets; one whose last group reads as a port (`::1:5401`) is shown so
/// (`[::1]:5401`), unless that leaves the bare `::` (`::1` is loopback more likely than port 1).
fn no_port(ip: IpAddr, spec: &str) -> String {
    if ip.is_ipv4() {
        return format!("{ip} has no port: use ADDR:PORT");
    }
    let meant = spec
        .rsplit_once(':')
        .filter(|(addr, port)| {
            *addr != "::" && addr.parse::<Ipv6Addr>().is_ok() && port.parse::<u16>().is_ok()
        })
        .map_or_else(
            || "[::1]:5201".to_string(),
            |(addr, port)| format!("[{addr}]:{port}"),
        );
    format!("an IPv6 address goes in brackets before its port, as in {meant}")
}

/// The address of `--connect HOST:PORT` (an IPv6 one first with --ipv6): a usage error without a
/// port, an error naming the host when the name does not resolve.
pub(crate) fn connect_addr(spec: &str, ipv6: bool) -> Result<SocketAddr> {
    if let Ok(ip) = spec.parse::<IpAddr>() {
        return Err(UsageError(format!("--connect {spec:?}: {}", no_port(ip, spec))).into());
    }
    let port_ok = spec
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if !port_ok {
        return Err(UsageError(format!(
            "--connect {spec:?}: expected HOST:PORT (e.g. 192.0.2.1:5201, [::1]:5201)"
        ))
        .into());
    }
    let addrs: Vec<SocketAddr> = spec
        .to_socket_addrs()
        .with_context(|| format!("--connect {spec:?}: the host name did not resolve"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv6() == ipv6)
        .or(addrs.first())
        .copied()
        .with_context(|| format!("--connect {spec:?}: the host name has no address"))
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
        _ => e.to_string(),
    }
}

/// The sender's configuration; `send_timeout` is the library's wait for buffer space (none for TCP,
/// which a [`SendWatch`] watches instead).
fn sender_config(mode: Mode, common: &Common, send_timeout: Option<Duration>) -> SenderConfig {
    SenderConfig {
        policy: PolicyConfig {
            threshold: common.threshold,
            ..PolicyConfig::with_mode(mode)
        },
        send_timeout,
        ..Default::default()
    }
}

/// A pool whose every buffer holds the pattern of units of `unit` bytes (filled once: buffers keep
/// their bytes when they come back).
fn new_pool(size: usize, unit: usize, huge_pages: bool) -> Result<BufferPool> {
    let pool = BufferPool::new_keeping_contents(PoolConfig {
        buf_size: size.max(1),
        count: POOL_BUFFERS,
        huge_pages,
    })
    .context("mapping the send buffer pool")?;
    if let (true, Err(why)) = (huge_pages, pool.huge_pages()) {
        eprintln!("zcnet: --huge-pages: the send buffers are on small pages: {why}");
    }
    let mut all = Vec::with_capacity(POOL_BUFFERS);
    while let Some(mut buf) = pool.take() {
        buf.fill_with(size, |b| wire::fill(b, unit));
        all.push(buf);
    }
    Ok(pool)
}

/// What is written into each send's bytes just before it leaves (UDP sequence numbers).
type Stamp<'a> = &'a mut dyn FnMut(&mut [u8]);

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
/// A send that `watch` ended (Ctrl-C, or no progress) ends the run with what it sent so far; so does
/// any other send error (a peer that went away), the run then marked `failed` with why.
fn timed<S: ZcSocket>(
    tx: &mut Sender<S>,
    pool: &BufferPool,
    (size, stamp): (usize, Stamp<'_>),
    duration: Duration,
    (ticker, watch): (&mut Ticker, Option<&SendWatch>),
) -> Result<Measured> {
    let before = resource_usage(UsageOf::Thread)?;
    let start = Instant::now();
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
fn measure<S: ZcSocket>(
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
    Ok(row(bench, path, dst, (mode, api), size, &m, tx))
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
        "zerocopy": bench_api::zerocopy(tx),
        "registered": bench_api::registered(tx),
        "interrupted": m.interrupted,
        "stalled": m.stalled,
        "failed": m.failed,
        "copy_cheaper": s.copy_cheaper,
        "cost_comparisons": s.cost_comparisons,
        "auto_choice": s.auto.as_ref().map(auto_why::choice_json),
        "why": auto_why::short(s),
        "auto_reason": auto_why::sentence(s),
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

fn ticker(common: &Common, bench: &str, mode: Mode) -> Ticker {
    Ticker::new(
        common.interval,
        json!({"bench": bench, "mode": mode.name()}),
        common.json,
    )
}

/// Interval lines of a `--listen` receiver (of its stream from `peer`, when several may run at once).
fn receiver_ticker(common: &Common, bench: &str, peer: Option<SocketAddr>) -> Ticker {
    let mut label = json!({"bench": bench, "role": "receiver"});
    if let Some(peer) = peer {
        label["peer"] = json!(peer.to_string());
    }
    Ticker::new(common.interval, label, common.json)
}

fn header(bench: Bench, mode: Mode, unit: usize, common: &Common) -> Header {
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
struct Peer {
    child: Watched,
    addr: SocketAddr,
}

impl Peer {
    fn spawn(net: &Net, bench: &str, extra: &[String], common: &Common) -> Result<Peer> {
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
    fn finish(mut self) -> Result<Row> {
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
    fn abandon(self) {
        self.child.abandon();
    }

    /// The sender's row of a run `sent` to this receiver, with the receiver's findings added, and
    /// the receiver's own row; fails when the send failed (the receiver is stopped then) or the
    /// receiver found wrong bytes.
    fn merge_into(self, sent: Result<Row>, bench: &str, mode: Mode) -> Result<(Row, Row)> {
        let mut row = match sent {
            Ok(row) => row,
            Err(e) => {
                self.abandon();
                return Err(e);
            }
        };
        let received = self.finish()?;
        merge_receiver(&mut row, &received);
        check_data(bench, mode, &received)?;
        Ok((row, received))
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

/// Every (round, size, mode, api) in the order they run: the [`sweep::schedule`] of `sizes` (one
/// size: `--mode`'s order, reversed on even rounds), so that a noisy neighbour hits every mode alike;
/// the APIs of each mode side by side. `sendmmsg` always copies: it runs in copy mode only.
fn schedule<'a>(
    common: &'a Common,
    sizes: &'a [usize],
) -> impl Iterator<Item = (u32, usize, Mode, Api)> + 'a {
    sweep::schedule(common.rounds, sizes, &common.mode).flat_map(|(round, size, modes)| {
        let apis = common.apis();
        modes.into_iter().flat_map(move |mode| {
            apis.iter()
                .filter(move |&&api| api != Api::Sendmmsg || mode == Mode::Copy)
                .map(move |&api| (round, size, mode, api))
        })
    })
}

/// The totals over every round of each api and mode, and auto against the better of copy and
/// zerocopy of the same api.
fn totals(rows: &[Row]) -> Vec<Row> {
    let mut groups: Vec<(&Value, &str, &Value)> = Vec::new();
    for row in rows {
        if let Some(mode) = row.get("mode").and_then(Value::as_str) {
            let group = (&row["api"], mode, &row["size"]);
            if !groups.contains(&group) {
                groups.push(group);
            }
        }
    }
    let num = |row: &Row, key: &str| row.get(key).and_then(Value::as_f64).unwrap_or(0.0);
    let mut out: Vec<Row> = groups
        .iter()
        .map(|&(api, mode, size)| {
            let of_group = rows
                .iter()
                .filter(|r| r["api"] == *api && r["mode"] == mode && r["size"] == *size);
            let (mut bytes, mut seconds, mut cpu) = (0.0, 0.0, 0.0);
            for r in of_group {
                bytes += num(r, "bytes");
                seconds += num(r, "seconds");
                cpu += num(r, "cpu_user_s") + num(r, "cpu_sys_s");
            }
            object(json!({
                "total": true,
                "bench": rows[0]["bench"],
                "path": rows[0]["path"],
                "api": api,
                "mode": mode,
                "size": size,
                "bytes": bytes as u64,
                "seconds": seconds,
                "gbit_per_s": if seconds > 0.0 { bytes * 8.0 / seconds / 1e9 } else { 0.0 },
                "cpu_us_per_mb": if bytes > 0.0 { cpu * 1e6 / (bytes / 1e6) } else { 0.0 },
            }))
        })
        .collect();
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    for (api, _, size) in groups.iter().filter(|(_, mode, _)| *mode == "auto") {
        let total = |m: &str| {
            out.iter()
                .find(|r| r["api"] == **api && r["mode"] == m && r["size"] == **size)
        };
        let (Some(auto), Some(copy), Some(zc)) = (total("auto"), total("copy"), total("zerocopy"))
        else {
            continue;
        };
        let best_rate = num(copy, "gbit_per_s").max(num(zc, "gbit_per_s"));
        let best_cost = num(copy, "cpu_us_per_mb").min(num(zc, "cpu_us_per_mb"));
        let vs_best_gbit = ratio(num(auto, "gbit_per_s"), best_rate);
        let vs_best_cpu = ratio(num(auto, "cpu_us_per_mb"), best_cost);
        let (rate, cost) = auto_vs_best_per_round(rows, api, size);
        let row = out
            .iter_mut()
            .find(|r| r["api"] == **api && r["mode"] == "auto" && r["size"] == **size)
            .expect("found above");
        row.insert("auto_vs_best_gbit".into(), json!(vs_best_gbit));
        row.insert("auto_vs_best_cpu".into(), json!(vs_best_cpu));
        row.insert("auto_vs_best_gbit_median".into(), json!(median(rate)));
        row.insert("auto_vs_best_cpu_median".into(), json!(median(cost)));
    }
    out
}

/// Auto rows of `api` and `size` against the better of copy and zerocopy of the same round, api and
/// size, round by round: its throughput over the higher one, its CPU per MB over the lower one.
fn auto_vs_best_per_round(rows: &[Row], api: &Value, size: &Value) -> (Vec<f64>, Vec<f64>) {
    let num = |row: &Row, key: &str| row.get(key).and_then(Value::as_f64).unwrap_or(0.0);
    let (mut rate, mut cost) = (Vec::new(), Vec::new());
    for auto in rows
        .iter()
        .filter(|r| r["mode"] == "auto" && r["api"] == *api && r["size"] == *size)
    {
        let of = |mode: &str| {
            rows.iter().find(|r| {
                r["mode"] == mode
                    && r.get("round") == auto.get("round")
                    && r["api"] == auto["api"]
                    && r["size"] == auto["size"]
            })
        };
        let (Some(copy), Some(zc)) = (of("copy"), of("zerocopy")) else {
            continue;
        };
        let best_rate = num(copy, "gbit_per_s").max(num(zc, "gbit_per_s"));
        let best_cost = num(copy, "cpu_us_per_mb").min(num(zc, "cpu_us_per_mb"));
        if best_rate > 0.0 && best_cost > 0.0 {
            rate.push(num(auto, "gbit_per_s") / best_rate);
            cost.push(num(auto, "cpu_us_per_mb") / best_cost);
        }
    }
    (rate, cost)
}

/// The median of `values` (the mean of the middle two for an even count); `None` when empty.
fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

const TOTAL_COLUMNS: &[Column] = &[
    ("path", "path"),
    ("api", "api"),
    ("mode", "total of rounds"),
    ("size", "size"),
    ("bytes", "bytes"),
    ("gbit_per_s", "Gbit/s"),
    ("cpu_us_per_mb", "CPU us/MB"),
    ("auto_vs_best_gbit", "auto/best Gbit/s"),
    ("auto_vs_best_cpu", "auto/best CPU per MB"),
    (
        "auto_vs_best_gbit_median",
        "median of rounds: auto/best Gbit/s",
    ),
    ("auto_vs_best_cpu_median", "CPU per MB"),
];

fn print_summary(rows: &[Row], common: &Common) {
    print_rows(rows, COLUMNS, common.json);
    if common.rounds > 1 && !rows.is_empty() {
        print_rows(&totals(rows), TOTAL_COLUMNS, common.json);
    }
    if !common.json {
        for row in rows {
            if let Some(why) = row.get("auto_reason").and_then(Value::as_str) {
                // A sweep names the size each line is about.
                let at = match row.get("size").and_then(Value::as_u64) {
                    Some(size) if !common.sizes.is_empty() => format!(" at {}", sweep::human(size)),
                    _ => String::new(),
                };
                report::emit(&format!("auto{at}: {why}\n"));
            }
        }
    }
    // Said once even under --json: a run that copied for want of locked memory must not pass for
    // a zero-copy one.
    for reason in ["memlock_reason", "enobufs_reason"] {
        if let Some(why) = rows
            .iter()
            .find_map(|row| row.get(reason).and_then(Value::as_str))
        {
            eprintln!("zcnet: {why}");
        }
    }
    // Nor may io_uring sends from unregistered buffers pass for fixed sends.
    if let Some(why) = rows
        .iter()
        .find_map(|row| row.get("registered").and_then(Value::as_str))
    {
        eprintln!("zcnet: io_uring sent from unregistered buffers: {why}");
    }
}

fn is_interrupted(row: &Row) -> bool {
    row.get("interrupted").and_then(Value::as_bool) == Some(true)
}

/// Why the run of `row` ended before its duration on this side: it stalled (see [`SendWatch`]) or
/// a send failed ([`cut_short`]), if it did.
fn cut_short_by(row: &Row) -> Option<&str> {
    ["stalled", "failed"]
        .iter()
        .find_map(|key| row.get(*key).and_then(Value::as_str))
}

/// Runs `one_run` for every (round, size, mode, api) of the [`schedule`] of `sizes`, stopping after a
/// run that was interrupted, stalled or failed (or before the next run once Ctrl-C came or the
/// output closed), and prints the summary of the rows (each with its round) — with `--sizes`, then
/// the crossover and the `--plot`; a stalled or failed run then fails the bench with what was seen.
/// A run that ends in an error without a row (a peer that refuses the connection) still gets the
/// rows of the runs before it printed, then fails the bench.
fn run_rounds(
    (common, bench, sizes): (&Common, &str, &[usize]),
    mut one_run: impl FnMut(usize, Mode, Api) -> Result<Row>,
) -> Result<()> {
    let mut rows = Vec::new();
    for (round, size, mode, api) in schedule(common, sizes) {
        // Ctrl-C, or an output whose reader is gone, that came after a run's end: no more runs.
        if live::interrupted() {
            break;
        }
        let mut row = match one_run(size, mode, api) {
            Ok(row) => row,
            Err(e) => {
                print_summary(&rows, common);
                return Err(e);
            }
        };
        row.insert("round".into(), json!(round));
        let stop = is_interrupted(&row) || cut_short_by(&row).is_some();
        rows.push(row);
        if stop {
            break;
        }
    }
    print_summary(&rows, common);
    if !common.sizes.is_empty() {
        let path = rows.first().and_then(|r| r["path"].as_str()).unwrap_or("?");
        let swept = Swept {
            bench,
            path,
            size_means: "bytes per send",
        };
        sweep::finish(&rows, &swept, common.json, common.plot.as_deref())?;
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
fn receiver_role(common: &Common) -> Result<Option<SocketAddr>> {
    if common.exit_with_parent {
        exit_with_parent();
    }
    let Some(spec) = &common.listen else {
        return Ok(None);
    };
    live::watch_interrupts()?;
    listen_addr(spec, common.ipv6).map(Some)
}

/// Runs `zcnet bench tcp`. Ctrl-C is watched from the moment the last resource is set up: the veth
/// harness installs a handler of its own (which removes its namespaces and ends the process), and
/// the one installed last wins, so a Ctrl-C after set-up stops the run, prints its summary and drops
/// the harness the ordinary way.
pub fn run_tcp(args: TcpArgs) -> Result<()> {
    let common = &args.common;
    if common.apis().contains(&Api::AfXdp) {
        return Err(UsageError(
            "--api af_xdp: only bench udp --sink xdp-drop sends through AF_XDP".into(),
        )
        .into());
    }
    if common.apis().contains(&Api::Sendmmsg) {
        return Err(UsageError("--api sendmmsg: only bench udp sends datagrams".into()).into());
    }
    check_listener_api(common, "the receiver reads with recv")?;
    if let Some(addr) = receiver_role(common)? {
        return listen_tcp(addr, common, &args.serve);
    }
    let single = (common.size.unwrap_or(64 << 10), "--size");
    sweep::check_plot(common.plot.as_deref())?;
    let sizes = sweep::sizes(&common.sizes, single, |flag, size| {
        flags::at_most(
            flag,
            size as u64,
            MAX_TCP_SIZE,
            "the bench keeps 64 buffers of a send's size",
        )
    })?;
    let timeouts = &args.timeouts;
    if let Some(spec) = &common.connect {
        live::watch_interrupts()?;
        let addr = connect_addr(spec, common.ipv6)?;
        return run_rounds((common, "tcp", &sizes), |size, mode, api| {
            let stream = timeouts.connect(addr)?;
            send_tcp(stream, "remote", (mode, api), size, (common, timeouts))
        });
    }
    let net = Net::new(common, false)?;
    live::watch_interrupts()?;
    run_rounds((common, "tcp", &sizes), |size, mode, api| {
        let peer = Peer::spawn(&net, "tcp", &[], common)?;
        let addr = peer.addr;
        let sent = net.in_sender(|| timeouts.connect(addr)).and_then(|stream| {
            // A receiver stopped (SIGSTOP, a debugger) for 2 s gets the stream shut down under
            // the sender, which would otherwise wait for it until its send timeout.
            let guard = peer.child.guard(&stream)?;
            let sent = send_tcp(stream, net.path(), (mode, api), size, (common, timeouts));
            // Ended whatever the send gave: a guard left running would watch the child for ever.
            let stopped = guard.finish();
            let mut row = sent?;
            if let Some(why) = stopped {
                row.insert(
                    "failed".into(),
                    json!(format!("the receiver process {why}")),
                );
            }
            Ok(row)
        });
        if let Ok(row) = &sent
            && cut_short_by(row).is_some()
        {
            // The watch reset the connection, or the receiver went away: it has nothing whole to
            // report.
            peer.abandon();
            return sent;
        }
        let (row, received) = peer.merge_into(sent, "tcp", mode)?;
        let sent = row["bytes"].as_u64().unwrap_or(0);
        let got = received.get("bytes").and_then(Value::as_u64).unwrap_or(0);
        // A stream Ctrl-C stopped is not whole, and not judged (its end mark says so).
        if received.get("complete").and_then(Value::as_bool) == Some(false) && !is_interrupted(&row)
        {
            let field = |key: &str| received.get(key).and_then(Value::as_str).unwrap_or("?");
            bail!(
                "tcp {}: the receiver's stream ended {}: {}",
                mode.name(),
                field("ended"),
                field("reason")
            );
        }
        if got != sent {
            bail!("tcp {}: sent {sent} bytes but {got} arrived", mode.name());
        }
        Ok(row)
    })
}

/// Sends one TCP stream in `mode`: the header (unless `--raw`), then the pattern for `--duration`,
/// under a [`SendWatch`]: a stream the peer stops taking, or that Ctrl-C interrupts, ends with the
/// row of what was sent, marked `stalled` (with what was seen) or `interrupted`.
fn send_tcp(
    mut stream: TcpStream,
    path: &str,
    (mode, api): (Mode, Api),
    size: usize,
    (common, timeouts): (&Common, &TcpTimeouts),
) -> Result<Row> {
    let dst = stream.peer_addr()?;
    let watch = SendWatch::start(&stream, timeouts)?;
    if !common.apart.raw {
        stream
            .write_all(&header(Bench::Tcp, mode, size, common).encode())
            .context("sending the stream header")?;
    }
    let pool = new_pool(size, size, common.huge_pages)?;
    let mut tx = bench_api::sender(api, stream, sender_config(mode, common, None), &pool)?;
    let mut row = measure(
        &mut tx,
        &pool,
        "tcp",
        path,
        dst,
        (mode, api),
        (size, &mut |_| {}),
        (common, Some(&watch)),
    )?;
    if watch.stop().is_some() || cut_short_by(&row).is_some() {
        return Ok(row);
    }
    // The end mark says the stream is whole (or that Ctrl-C stopped it): a receiver judges a stream
    // closed without it cut short.
    let finish = if is_interrupted(&row) {
        Finish::Interrupted
    } else {
        Finish::Done
    };
    let bytes = row["bytes"].as_u64().unwrap_or(0);
    let mark = (!common.apart.raw).then(|| wire::encode_stream_end(bytes, finish));
    let closed = tx
        .close(COMPLETION_WAIT)
        .map_err(|e| cut_short(e.raw_os_error(), &e));
    let ended = closed.and_then(|mut s| {
        if let Some(mark) = mark {
            s.write_all(&mark)
                .map_err(|e| format!("sending the stream's end mark: {e}"))?;
        }
        s.shutdown(std::net::Shutdown::Write)
            .map(|()| s)
            .map_err(|e| format!("shutting the stream down: {e}"))
    });
    let stream = match ended {
        Ok(stream) => stream,
        Err(why) => {
            let (key, value) = match watch.stop() {
                Some(Stop::Interrupted) => ("interrupted", json!(true)),
                Some(Stop::Stalled(why)) => ("stalled", json!(why)),
                None => ("failed", json!(why)),
            };
            row.insert(key.into(), value);
            return Ok(row);
        }
    };
    drop(watch);
    // Wait (bounded, and no longer once Ctrl-C came) for the receiver to close, so that every byte
    // is counted before the next mode starts.
    stream.set_read_timeout(Some(Duration::from_millis(100)))?;
    let deadline = Instant::now() + COMPLETION_WAIT;
    let mut sink = [0u8; 64];
    while Instant::now() < deadline && !live::interrupted() {
        match (&stream).read(&mut sink) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    Ok(row)
}

/// `bench tcp --listen`: streams side by side ([`bench_serve::serve`]), a row for each. Fails at its
/// end when a stream whose sender asked for verification did not arrive whole or had wrong bytes (the
/// one-process mode's receiver leaves that judgement to the bench that started it, which reads its
/// row).
fn listen_tcp(addr: SocketAddr, common: &Common, serve: &ServeFlags) -> Result<()> {
    serve.check()?;
    let listener = TcpListener::bind(addr).with_context(|| format!("listening on {addr}"))?;
    bench_listen::announce(listener.local_addr()?, common.json);
    let config = RxConfig {
        mode: RxMode::Copy,
        copy_buffer: TCP_READ,
        low_water: Some(TCP_READ),
        ..RxConfig::default()
    };
    let how = Serving {
        rows: Rows {
            bench: "tcp",
            columns: TCP_RECEIVER_COLUMNS,
            json: common.json,
        },
        once: common.apart.once,
        flags: serve,
        judge: !common.exit_with_parent,
    };
    bench_serve::serve(&listener, &how, |peer| StreamSetup {
        config: config.clone(),
        ticker: receiver_ticker(common, "tcp", Some(peer)),
        // In place of the library's "copy requested", whose remedy names a --mode this receiver
        // does not take: it reads with recv whatever the sender's mode.
        fields: object(json!({"fallback": TCP_RECEIVER_COPIES})),
    })
}

/// Why `bench tcp --listen` does not map received pages.
const TCP_RECEIVER_COPIES: &str =
    "copy: bench tcp's receiver reads with recv (bench rx maps received pages)";

/// Bytes per read of the TCP receiver, and its `SO_RCVLOWAT`: a wake-up brings this much.
const TCP_READ: usize = 512 << 10;

/// The text columns of a `bench tcp --listen` stream row.
const TCP_RECEIVER_COLUMNS: &[Column] = &[
    ("bench", "bench"),
    ("peer", "peer"),
    ("sender_mode", "sender"),
    ("bytes", "bytes"),
    ("seconds", "seconds"),
    ("gbit_per_s", "Gbit/s"),
    ("cpu_us_per_mb", "CPU us/MB"),
    ("data_errors", "data errors"),
    ("ended", "ended"),
    ("complete", "complete"),
];

/// The text columns of a `bench udp --listen` run row.
const UDP_RECEIVER_COLUMNS: &[Column] = &[
    ("bench", "bench"),
    ("peer", "peer"),
    ("local", "local"),
    ("sender_mode", "sender"),
    ("bytes", "bytes"),
    ("datagrams", "datagrams"),
    ("lost", "lost"),
    ("duplicated", "dup"),
    ("reordered", "reordered"),
    ("foreign", "foreign"),
    ("rejected", "rejected"),
    ("socket_drops", "socket drops"),
    ("seconds", "seconds"),
    ("gbit_per_s", "Gbit/s"),
    ("cpu_us_per_mb", "CPU us/MB"),
    ("cpu_ns_per_packet", "CPU ns/pkt"),
    ("data_errors", "data errors"),
    ("end", "end"),
    ("complete", "complete"),
];

/// Ends this process when standard input closes: the one-process mode's receiver must not outlive
/// the bench that started it, however that bench ends.
pub(crate) fn exit_with_parent() {
    thread::spawn(|| {
        let mut sink = [0u8; 64];
        while matches!(std::io::stdin().read(&mut sink), Ok(n) if n > 0) {}
        std::process::exit(3);
    });
}

/// Runs `zcnet bench udp`.
pub fn run_udp(args: UdpArgs) -> Result<()> {
    let common = &args.common;
    check_af_xdp(&args)?;
    check_sendmmsg(&args)?;
    check_listener_api(
        common,
        "the receiver reads with a UDP socket, or with --api af_xdp --iface IF",
    )?;
    if let Some(addr) = receiver_role(common)? {
        return listen_udp(addr, common, args.iface.as_deref());
    }
    if let Some(seg) = args.gso
        && usize::from(seg) < wire::SEQ_LEN
        && !common.apart.raw
    {
        return Err(UsageError(format!(
            "--gso {seg}: each segment is a datagram that carries its {}-byte sequence number (or \
             use --raw)",
            wire::SEQ_LEN
        ))
        .into());
    }
    let single = match (common.size, args.gso) {
        (Some(size), _) => size,
        (None, Some(seg)) => default_gso_size(seg, common.sizes.is_empty())?,
        (None, None) => 1400,
    };
    // The bytes of each datagram: a GSO segment, or the whole send.
    let unit = |size: usize| args.gso.map_or(size, usize::from);
    sweep::check_plot(common.plot.as_deref())?;
    let sizes = sweep::sizes(&common.sizes, (single, "--size"), |flag, size| {
        if let Some(seg) = args.gso {
            flags::at_most(
                flag,
                size as u64,
                u64::from(seg) * MAX_GSO_SEGMENTS,
                "one GSO send carries at most 64 segments of --gso",
            )?;
        }
        flags::at_most(
            flag,
            size as u64,
            MAX_UDP_PAYLOAD,
            "the largest UDP payload",
        )?;
        if common.apis().contains(&Api::AfXdp) && common.listen.is_none() {
            flags::at_most(
                flag,
                size as u64,
                af_xdp_max_payload(common.ipv6) as u64,
                "--api af_xdp sends each datagram in one frame over the veth harness's MTU",
            )?;
        }
        // (A --gso segment under it was refused above.)
        if args.gso.is_none() && size < wire::SEQ_LEN && !common.apart.raw {
            return Err(UsageError(format!(
                "{flag} {size}: each datagram carries its {}-byte sequence number (or use --raw)",
                wire::SEQ_LEN
            ))
            .into());
        }
        Ok(())
    })?;
    if let Some(spec) = &common.connect {
        live::watch_interrupts()?;
        let dest = connect_addr(spec, common.ipv6)?;
        return run_rounds((common, "udp", &sizes), |size, mode, api| {
            let bind: SocketAddr = match dest {
                SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
                SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
            };
            let socket = UdpSocket::bind(bind).context("binding the UDP sender")?;
            send_udp(socket, dest, "remote", (mode, api), size, unit(size), &args)
        });
    }
    let net = Net::new(common, args.sink == Sink::XdpDrop)?;
    live::watch_interrupts()?;
    let mut shortfalls = Vec::new();
    run_rounds((common, "udp", &sizes), |size, mode, api| {
        let unit = unit(size);
        if api == Api::AfXdp {
            let veth = net
                .veth
                .as_ref()
                .context("af_xdp runs over the veth harness")?;
            let run = XdpSend {
                mode,
                size,
                src: SocketAddr::new(net.src, 0),
                dst: SocketAddr::new(net.dst, 9),
                duration: Duration::from_secs_f64(common.duration),
                raw: common.apart.raw,
            };
            return bench_send_xdp::send(veth, &run, ticker(common, "udp", mode));
        }
        let peer = match args.sink {
            Sink::Socket => Some(Peer::spawn(&net, "udp", &[], common)?),
            Sink::XdpDrop => None,
        };
        let dest = peer
            .as_ref()
            .map_or(SocketAddr::new(net.dst, 9), |p| p.addr);
        let sent = net
            .in_sender(|| UdpSocket::bind(SocketAddr::new(net.src, 0)))
            .context("binding the UDP sender")
            .and_then(|socket| send_udp(socket, dest, net.path(), (mode, api), size, unit, &args));
        let mut row = match peer {
            Some(peer) if sent.as_ref().is_ok_and(|row| cut_short_by(row).is_some()) => {
                // The receiver went away: it has nothing whole to report.
                peer.abandon();
                sent?
            }
            Some(peer) => {
                let (row, received) = peer.merge_into(sent, "udp", mode)?;
                if received.get("complete").and_then(Value::as_bool) == Some(false) {
                    let lost = received.get("lost").and_then(Value::as_u64).unwrap_or(0);
                    let sent = received.get("sent_datagrams").and_then(Value::as_u64);
                    shortfalls.push(match sent {
                        Some(sent) => format!("{}: {lost} of {sent} datagrams lost", mode.name()),
                        None => format!("{}: the end datagram never arrived", mode.name()),
                    });
                }
                row
            }
            None => sent?,
        };
        row.insert("gso".into(), json!(args.gso));
        Ok(row)
    })?;
    if !shortfalls.is_empty() {
        bail!(
            "udp runs asked to verify did not arrive whole: {}",
            shortfalls.join("; ")
        );
    }
    Ok(())
}

/// `bench udp --gso SEG`'s size when `--size` is not given: 40 segments. A usage error naming
/// `--gso` when they are above the largest UDP payload and the size is to be sent (`used`, not
/// replaced by `--sizes`): the user gave no size to blame.
fn default_gso_size(seg: u16, used: bool) -> Result<usize> {
    let size = usize::from(seg) * 40;
    if used && size as u64 > MAX_UDP_PAYLOAD {
        return Err(UsageError(format!(
            "--gso {seg}: the default --size of 40 segments ({size} bytes) is above the largest \
             UDP payload ({MAX_UDP_PAYLOAD} bytes): give a --size"
        ))
        .into());
    }
    Ok(size)
}

/// The longest payload the AF_XDP endpoint sends unfragmented over the veth harness (its MTU less
/// the IP and UDP headers).
fn af_xdp_max_payload(ipv6: bool) -> usize {
    let ip = if ipv6 { IPV6_HLEN } else { IPV4_HLEN };
    VethConfig::default().mtu as usize - ip - UDP_HLEN
}

/// Refuses `--api af_xdp` where it means nothing: a `--listen` receiver on AF_XDP needs `--iface`;
/// a sender sends only in the one-process mode into `--sink xdp-drop` (the socket receiver tells
/// control datagrams by their TTL, which the endpoint does not vary), and has no UDP GSO.
fn check_af_xdp(args: &UdpArgs) -> Result<()> {
    let common = &args.common;
    if !common.apis().contains(&Api::AfXdp) {
        return Ok(());
    }
    let why = if common.listen.is_some() {
        if args.iface.is_some() {
            return Ok(());
        }
        "--listen and no --iface: the endpoint serves the queues of one interface"
    } else if args.gso.is_some() {
        "--gso: an AF_XDP endpoint sends one frame per datagram, there is no UDP GSO"
    } else if common.connect.is_some() {
        "--connect: af_xdp sends only over the veth harness, into --sink xdp-drop"
    } else if args.sink != Sink::XdpDrop {
        "--sink socket: af_xdp sends only into --sink xdp-drop (the receiver tells control \
         datagrams by their TTL, which the endpoint does not vary)"
    } else {
        return Ok(());
    };
    Err(UsageError(format!("--api af_xdp with {why}")).into())
}

/// Refuses `--api` with `--listen`: the API is the sender's (udp's receiver takes `--api af_xdp`
/// alone, checked by [`check_af_xdp`]).
fn check_listener_api(common: &Common, reads: &str) -> Result<()> {
    if common.listen.is_none() || common.api.is_empty() || common.api == [Api::AfXdp] {
        return Ok(());
    }
    let apis: Vec<&str> = common.api.iter().map(|api| api.name()).collect();
    Err(UsageError(format!(
        "--api {} with --listen: the API is the sender's ({reads})",
        apis.join(",")
    ))
    .into())
}

/// Refuses `--api sendmmsg` where it would give no row or mean something else: without `--mode
/// copy` (it always copies), and with `--gso` (one datagram per message).
fn check_sendmmsg(args: &UdpArgs) -> Result<()> {
    let common = &args.common;
    if !common.apis().contains(&Api::Sendmmsg) || common.listen.is_some() {
        return Ok(());
    }
    let why = if !common.mode.contains(&Mode::Copy) {
        "no --mode copy: sendmmsg always copies, it runs in copy mode only"
    } else if args.gso.is_some() {
        "--gso: the sendmmsg sender sends one datagram per message"
    } else {
        return Ok(());
    };
    Err(UsageError(format!("--api sendmmsg with {why}")).into())
}

/// Sends one UDP run in `mode`: header datagrams (unless `--raw`) until the receiver answers, the
/// pattern for `--duration`, then end datagrams with the totals. Fails at once when the receiver
/// refuses the run (it is busy with another sender's); a receiver that does not answer is sent to
/// all the same.
fn send_udp(
    socket: UdpSocket,
    dest: SocketAddr,
    path: &str,
    (mode, api): (Mode, Api),
    size: usize,
    unit: usize,
    args: &UdpArgs,
) -> Result<Row> {
    let common = &args.common;
    socket
        .connect(dest)
        .with_context(|| format!("sending to {dest}"))?;
    // Sent a few times: a datagram may be lost, and the receiver ignores repeats.
    const END_REPEATS: usize = 6;
    if !common.apart.raw {
        let h = header(Bench::Udp, mode, unit, common).encode();
        let answer = wire::offer_header(&socket, &h)
            .with_context(|| format!("sending the header datagram to {dest}"))?;
        if let Some(wire::Answer::Refused(why)) = answer {
            bail!(
                "udp {}: the receiver at {dest} refused the run: {why}",
                mode.name()
            );
        }
    }
    let (mut row, socket) = if api == Api::Sendmmsg {
        let run = MmsgSend {
            size,
            batch: args.batch,
            duration: Duration::from_secs_f64(common.duration),
            raw: common.apart.raw,
        };
        let row = bench_send_mmsg::send(&socket, path, &run, ticker(common, "udp", mode))?;
        // A run the kernel refused sends no end datagrams: the peer is gone.
        let socket = cut_short_by(&row).is_none().then_some(socket);
        (row, socket)
    } else {
        send_pooled(socket, dest, path, (mode, api), (size, unit), args)?
    };
    let bytes = row["bytes"].as_u64().unwrap_or(0);
    // Every send is `size` bytes, cut into datagrams of `unit` (the last one of each send shorter).
    let (sends, rest) = (bytes / size as u64, bytes % size as u64);
    let datagrams = sends * size.div_ceil(unit) as u64 + rest.div_ceil(unit as u64);
    let cpu = row["cpu_user_s"].as_f64().unwrap_or(0.0) + row["cpu_sys_s"].as_f64().unwrap_or(0.0);
    row.insert("datagrams".into(), json!(datagrams));
    row.insert(
        "cpu_ns_per_packet".into(),
        json!(bench_send_xdp::ns_per_packet(cpu, datagrams)),
    );
    if let (false, Some(socket)) = (common.apart.raw, socket) {
        // Spaced out, so that a receiver still draining a full queue finds room for one of them.
        let end = wire::encode_end(datagrams, bytes);
        for _ in 0..END_REPEATS {
            thread::sleep(Duration::from_millis(25));
            // A receiver that is gone already refuses it (ECONNREFUSED): nothing is lost then.
            let _ = wire::send_control(&socket, &end);
        }
    }
    Ok(row)
}

/// The measured part of a UDP run of a pooled sender (`sendmsg`, `io_uring`): its row, and the
/// socket back once every buffer has come back (`None`, the row marked `failed`, when the wait for
/// them failed: a peer gone, whose errors keep coming).
fn send_pooled(
    socket: UdpSocket,
    dest: SocketAddr,
    path: &str,
    (mode, api): (Mode, Api),
    (size, unit): (usize, usize),
    args: &UdpArgs,
) -> Result<(Row, Option<UdpSocket>)> {
    let common = &args.common;
    let pool = new_pool(size, unit, common.huge_pages)?;
    let config = sender_config(mode, common, Some(COMPLETION_WAIT));
    let mut tx = bench_api::sender(api, socket, config, &pool)?;
    tx.set_gso_segment(args.gso)?;
    // Each datagram (GSO segment) of a run with the header opens with its sequence number.
    let mut next = 0u64;
    let mut stamp = |buf: &mut [u8]| {
        if !common.apart.raw {
            next = wire::stamp(buf, unit, next);
        }
    };
    let send = (size, &mut stamp as Stamp<'_>);
    let mut row = measure(
        &mut tx,
        &pool,
        "udp",
        path,
        dest,
        (mode, api),
        send,
        (common, None),
    )?;
    match tx.close(COMPLETION_WAIT) {
        Ok(socket) => Ok((row, Some(socket))),
        Err(e) => {
            if cut_short_by(&row).is_none() {
                row.insert("failed".into(), json!(cut_short(e.raw_os_error(), &e)));
            }
            Ok((row, None))
        }
    }
}

/// What a `bench udp --listen` receiver reads: a UDP socket, or an AF_XDP UDP endpoint
/// (`--api af_xdp --iface IF`).
enum UdpListener {
    Socket(UdpSocket),
    Endpoint(Box<zcnet::xdp::UdpEndpoint>),
}

/// `bench udp --listen`: one run after another, a row for each. Fails at its end when a run whose
/// sender asked for verification lost datagrams, had wrong bytes or never ended (the one-process
/// mode's receiver leaves that judgement to the bench that started it, which reads its rows).
fn listen_udp(addr: SocketAddr, common: &Common, iface: Option<&str>) -> Result<()> {
    let mut listener = match iface {
        Some(iface) => UdpListener::Endpoint(Box::new(bench_send_xdp::bind_receiver(iface, addr)?)),
        None => {
            let socket = UdpSocket::bind(addr).with_context(|| format!("binding {addr}"))?;
            bench_listen_udp::prepare(&socket)?;
            UdpListener::Socket(socket)
        }
    };
    let local = match &listener {
        UdpListener::Socket(socket) => socket.local_addr()?,
        UdpListener::Endpoint(endpoint) => endpoint.local_addr(),
    };
    bench_listen::announce(local, common.json);
    let mut shortfalls = Vec::new();
    let print = |report: &DatagramReport, fields: Row| {
        let mut row = bench_listen_udp::datagram_row(local, report);
        row.extend(fields);
        print_rows(&[row], UDP_RECEIVER_COLUMNS, common.json);
        if let (false, Some(why)) = (common.json, report.reason()) {
            let from = report.peer.map_or("?".into(), |p| p.to_string());
            report::emit(&format!(
                "the run from {from} ended {}: {why}\n",
                report.end.name()
            ));
        }
    };
    loop {
        let ticker = || receiver_ticker(common, "udp", None);
        let refused = &mut |r: &DatagramReport| print(r, Row::new());
        let report = match &mut listener {
            UdpListener::Socket(socket) => {
                bench_listen_udp::receive_datagrams(socket, ticker, refused)?
            }
            UdpListener::Endpoint(endpoint) => {
                bench_listen_udp::receive_endpoint_datagrams(endpoint, ticker, refused)?
            }
        };
        let Some(report) = report else { break };
        let mut fields = Row::new();
        if let UdpListener::Endpoint(endpoint) = &listener {
            bench_send_xdp::add_endpoint_fields(&mut fields, endpoint);
        }
        print(&report, fields);
        if let Some(why) = report.shortfall() {
            let from = report.peer.map_or("?".into(), |p| p.to_string());
            shortfalls.push(format!("the run from {from}: {why}"));
        }
        if common.apart.stop_after(report.interrupted) {
            break;
        }
    }
    if !shortfalls.is_empty() && !common.exit_with_parent {
        bail!(
            "udp runs asked to verify did not arrive whole: {}",
            shortfalls.join("; ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn run(round: u32, mode: &str, gbit: f64, cpu: f64) -> Row {
        object(
            json!({"round": round, "api": "sendmsg", "mode": mode, "size": 1024,
                      "gbit_per_s": gbit, "cpu_us_per_mb": cpu}),
        )
    }

    #[test]
    fn auto_is_compared_with_the_best_of_its_own_round() {
        let rows = vec![
            run(1, "copy", 10.0, 100.0),
            run(1, "zerocopy", 8.0, 120.0),
            run(1, "auto", 9.0, 110.0),
            run(2, "auto", 12.0, 90.0),
            run(2, "zerocopy", 6.0, 150.0),
            run(2, "copy", 8.0, 100.0),
            // A round cut short (Ctrl-C) before copy and zerocopy ran is left out.
            run(3, "auto", 1.0, 1000.0),
        ];
        let (rate, cost) = auto_vs_best_per_round(&rows, &json!("sendmsg"), &json!(1024));
        assert_eq!(rate, vec![0.9, 1.5]);
        assert_eq!(cost, vec![1.1, 0.9]);
        assert_eq!(median(rate), Some(1.2));
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(Vec::new()), None);
    }
}
