//! Run: `zcnet bench xdp`: the AF_XDP applications against their older counterparts, in one run on a fresh
//! veth pair (1 queue):
//! - rxdrop (default): AF_XDP rxdrop vs an AF_PACKET TPACKET_V3 ring vs `recvmmsg` on a UDP socket.
//!   The peer namespace generates the same UDP frames for every path with the cheapest sender
//!   available, an AF_PACKET TX ring with the qdisc bypassed (many frames per `send`), and its own rate
//!   is reported: on a 2-core host the generator is usually the limit, so the paths are compared by
//!   the CPU cost per packet of the receiving CPU. The application thread, the receiving veth's NAPI
//!   (threaded NAPI, its kernel thread pinned) and, with the skb feed, its backlog (RPS) run on one
//!   CPU, the generator on another; `app_cpu_ns_per_packet` is that CPU's busy time (`/proc/stat`)
//!   per packet — exact on a quiet host only, since other processes on that CPU count too — and
//!   `app_threads_ns_per_packet` the CPU time of the application thread, the NAPI threads and the
//!   receiving CPU's `ksoftirqd` alone. How frames reach the receiving interface is `--feed`
//!   ([`crate::xdp::feed`]): as a NIC driver delivers them (default), or as skbs that veth copies once
//!   more.
//! - txpush (`--app txpush`): AF_XDP txpush vs an AF_PACKET TX ring vs `sendmmsg`, into an XDP drop
//!   program on the peer (the cheapest sink).
//! - l2fwd (`--app l2fwd`): AF_XDP l2fwd vs a `recvmmsg`/`sendmmsg` forwarder, fed by the generator.
//!
//! Each path prints a line per `--interval`; Ctrl-C (SIGINT/SIGTERM) stops the path that runs and
//! prints the rows of what ran (the last one `"interrupted": true`), then removes what the run built.

use std::cell::{Cell, RefCell};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use benchnet::frame::{MIN_PAYLOAD, UDP_HEADERS, UdpFrame, udp_payload};
use benchnet::{VethConfig, VethPair, cpu};
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use serde_json::{Value, json};
use zcnet::packet::{RecvBatch, RxRingV3, TxRingV2, send_copies};
use zcnet::xdp::{AttachMode, FrameMatch, XdpLink, XdpProgram, interface_index};

use crate::bench::args::xdp::{BenchApp, BenchXdpArgs};
use crate::bench::run::copies;
use crate::live::{self, Ticker};
use crate::report::Row;
use crate::xdp::feed::{Feed, FeedPath};
use crate::xdp::meter::{Counted, Meter};
use crate::xdp::{App, Wait};

impl BenchXdpArgs {
    fn wait(&self) -> Wait {
        match self.coalesce_us {
            0 => Wait::Poll,
            us => Wait::Coalesce(Duration::from_micros(us)),
        }
    }
}

/// UDP port the generated frames go to.
const PORT: u16 = 9100;

/// System-wide CPU time from the first line of `/proc/stat`, in seconds: (user + nice,
/// system + irq + softirq). The file counts in USER_HZ, which is 100 on Linux.
fn system_cpu() -> Result<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let line = stat.lines().next().context("/proc/stat is empty")?;
    let f: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    let get = |i: usize| f.get(i).copied().unwrap_or(0.0) / 100.0;
    Ok((get(0) + get(1), get(2) + get(5) + get(6)))
}

/// `Udp: RcvbufErrors` of the calling thread's network namespace.
fn udp_rcvbuf_errors() -> Result<u64> {
    let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp")
        .context("reading /proc/thread-self/net/snmp")?;
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (names, values) = (
        udp.next().context("no Udp header")?,
        udp.next().context("no Udp values")?,
    );
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "RcvbufErrors")
        .and_then(|(_, v)| v.parse().ok())
        .context("no RcvbufErrors counter")
}

/// Frames the veth pair lost on the way to `a_if`'s receiver: `a_if`'s receive drops (its ring was full
/// for a redirected frame, its XDP program's redirect failed, or its backlog was full) and `b_if`'s
/// transmit drops (`a_if`'s ring was full for an skb), as the pair's interface statistics count them.
/// Read with `cat` inside each namespace: sysfs shows the namespace it was mounted in.
fn veth_dropped(pair: &VethPair) -> Result<u64> {
    let read = |ns: &benchnet::Netns, iface: &str, counter: &str| -> Result<u64> {
        let path = format!("/sys/class/net/{iface}/statistics/{counter}");
        let text = ns
            .exec("cat", &[&path])
            .with_context(|| format!("read {path}"))?;
        text.trim()
            .parse()
            .with_context(|| format!("{path} holds {text:?}"))
    };
    Ok(read(&pair.a, &pair.a_if, "rx_dropped")? + read(&pair.b, &pair.b_if, "tx_dropped")?)
}

/// Which CPU runs what: the application with the receiving interface's NAPI and backlog, and the
/// generator. `None` on a single-CPU machine (nothing pinned).
#[derive(Debug, Clone, Copy)]
struct Placement {
    app: usize,
    generator: usize,
}

impl Placement {
    /// CPU 0 for the application, CPU 1 for the generator, when there are two.
    fn choose() -> Option<Placement> {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        (cpus >= 2).then_some(Placement {
            app: 0,
            generator: 1,
        })
    }

    /// Puts the receive processing of `pair.a_if` on the application's CPU: threaded NAPI (veth has
    /// NAPI only with GRO on or an XDP program attached, so GRO is turned on for every path) and, for
    /// the skb feed, RPS. skbs that `b_if` cannot hand to `a_if`'s NAPI (with TSO on `b_if`, as it is
    /// without an XDP program on `a_if`) go through `netif_rx` to the backlog of the sending CPU, the
    /// generator's: RPS moves them to the application's. XDP frames always arrive through NAPI, where
    /// RPS would only add a trip through the backlog of the same CPU, so it stays off for them.
    fn steer_receive(self, pair: &VethPair, feed: Feed) -> Result<()> {
        let (iface, dir) = (&pair.a_if, format!("/sys/class/net/{}", pair.a_if));
        let mut script = format!("ethtool -K {iface} gro on && echo 1 > {dir}/threaded");
        if feed == Feed::Skb {
            let mask = format!("{:x}", 1u64 << self.app);
            script.push_str(&format!(" && echo {mask} > {dir}/queues/rx-0/rps_cpus"));
        }
        pair.a
            .exec("sh", &["-c", &script])
            .with_context(|| format!("enable threaded NAPI (and RPS) on {}", pair.a_if))?;
        Ok(())
    }

    /// Pins the NAPI threads of `pair.a_if` (created anew when an XDP program attaches) to the
    /// application's CPU; returns their ids.
    fn pin_napi(self, pair: &VethPair) -> Result<Vec<u32>> {
        let threads = cpu::napi_threads(&pair.a_if).context("list NAPI threads")?;
        for &tid in &threads {
            cpu::pin(tid, self.app).with_context(|| format!("pin NAPI thread {tid}"))?;
        }
        Ok(threads)
    }
}

/// What every path needs: the pair, the options and the frames in both directions.
struct Ctx<'a> {
    pair: &'a VethPair,
    feed: &'a FeedPath,
    args: &'a BenchXdpArgs,
    placement: Option<Placement>,
    /// Frame from `b` to `a` (receive paths).
    to_a: Vec<u8>,
    /// Frame from `a` to `b` (transmit paths).
    to_b: Vec<u8>,
}

impl Ctx<'_> {
    /// Interval lines of a path that has just started, counting `counted` frames of the App's socket.
    fn meter(&self, ticker: Ticker, counted: Counted) -> Meter {
        Meter::Interval {
            ticker,
            frame_bytes: self.frame_bytes(),
            counted,
        }
    }

    /// Bytes per frame (both directions have the same length).
    fn frame_bytes(&self) -> u64 {
        self.to_a.len() as u64
    }

    /// The interval line of a path that has counted `packets` so far, when one is due.
    fn tick(&self, ticker: &mut Ticker, packets: u64) {
        ticker.tick_with(packets * self.frame_bytes(), || vec![("packets", packets)]);
    }
}

/// What one path measured.
struct Received {
    mode: String,
    packets: u64,
    rx_dropped: u64,
    invalid_descs: Option<u64>,
}

impl Received {
    /// What a path through the stack measured (`mode` "ring" or "syscall"; no AF_XDP descriptors).
    fn stack(mode: &str, packets: u64, rx_dropped: u64) -> Received {
        Received {
            mode: mode.into(),
            packets,
            rx_dropped,
            invalid_descs: None,
        }
    }

    /// What an AF_XDP path measured, from `app`'s socket statistics once it has run: its mode, the
    /// invalid descriptors it counted and `invalid` more that the application found, and, for a
    /// `receiving` socket, the frames it dropped (`rx_dropped` and `rx_ring_full`).
    fn af_xdp(app: &App, packets: u64, invalid: u64, receiving: bool) -> Result<Received> {
        let stats = app.statistics()?;
        Ok(Received {
            mode: app.socket.mode().as_str().to_string(),
            packets,
            rx_dropped: match receiving {
                true => stats.rx_dropped + stats.rx_ring_full,
                false => 0,
            },
            invalid_descs: Some(stats.invalid_descs() + invalid),
        })
    }
}

/// The generator in the peer namespace: sends `frame` through a TX ring until told to stop.
struct Generator {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Result<(u64, f64)>>,
}

impl Generator {
    /// Starts sending `frame` on `feed`'s generator interface (in `b`), pinned to `cpu`; returns once
    /// the generator is about to send its first frame (its set-up, which runs `taskset`, can take a
    /// while on a busy host and must not eat into a path's measured time).
    fn start(
        pair: &VethPair,
        feed: &FeedPath,
        frame: Vec<u8>,
        cpu: Option<usize>,
    ) -> Result<Generator> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let iface = feed.generator_if.clone();
        let (ready, started) = std::sync::mpsc::channel();
        let handle = pair.b.spawn(move || -> Result<(u64, f64)> {
            if let Some(cpu) = cpu {
                cpu::pin_current_thread(cpu).context("pin the generator thread")?;
            }
            let mut ring = TxRingV2::open(interface_index(&iface)?, 2048, 512)
                .context("AF_PACKET TX ring on the generator side")?;
            // The receiver may have given up (and dropped `started`); the flag then stops us at once.
            let _ = ready.send(());
            let start = Instant::now();
            let until = || flag.load(Ordering::Relaxed);
            let sent = send_through_ring(&mut ring, &frame, &until, &mut |_| {})?;
            Ok((sent, start.elapsed().as_secs_f64()))
        })?;
        let generator = Generator { stop, handle };
        match started.recv() {
            Ok(()) => Ok(generator),
            // The thread ended before sending: its result says why.
            Err(_) => Err(generator
                .finish()
                .err()
                .unwrap_or_else(|| anyhow::anyhow!("generator ended before it started"))),
        }
    }

    fn finish(self) -> Result<(u64, f64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .join()
            .map_err(|_| anyhow::anyhow!("generator thread panicked"))?
            .context("generator")
    }
}

/// Sends `frame` through `ring` until `until()`, up to 256 frames per `send`, telling `progress` the
/// frames queued so far; returns frames queued.
fn send_through_ring(
    ring: &mut TxRingV2,
    frame: &[u8],
    until: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(u64),
) -> Result<u64> {
    let mut sent = 0u64;
    while !until() {
        progress(sent);
        let mut queued = 0;
        while queued < 256
            && ring.push(|buf| {
                buf[..frame.len()].copy_from_slice(frame);
                frame.len()
            })
        {
            queued += 1;
        }
        sent += queued;
        match ring.flush() {
            // The device queue was full: the kernel dropped a frame and hands its slot back.
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {}
            other => other.context("send on the AF_PACKET TX ring")?,
        }
        if queued == 0 {
            ring.wait(10).context("poll the AF_PACKET TX ring")?;
        }
    }
    Ok(sent)
}

fn ours(frame: &[u8]) -> bool {
    matches!(udp_payload(frame), Some((PORT, _)))
}

/// Packets of a batch sent with `sendmmsg`; `ENOBUFS` (the device queue was full and the kernel
/// dropped a datagram) sent none.
fn sent_unless_enobufs(sent: std::io::Result<usize>) -> Result<u64> {
    match sent {
        Ok(n) => Ok(n as u64),
        Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => Ok(0),
        Err(e) => Err(e).context("sendmmsg"),
    }
}

/// AF_XDP rxdrop on `a_if` queue 0, redirect program in driver mode.
fn af_xdp(ctx: &Ctx, run: &Run) -> Result<Received> {
    af_xdp_receiver(ctx, run, false)
}

/// AF_XDP l2fwd on `a_if` queue 0: received frames go back out with swapped MACs (frames sent).
fn af_xdp_l2fwd(ctx: &Ctx, run: &Run) -> Result<Received> {
    af_xdp_receiver(ctx, run, true)
}

/// AF_XDP rxdrop, or l2fwd with `forward`.
fn af_xdp_receiver(ctx: &Ctx, run: &Run, forward: bool) -> Result<Received> {
    let (pair, args) = (ctx.pair, ctx.args);
    let mut app = pair.a.run(|| {
        let mode = args.mode.into();
        // The pair is the bench's own: its socket takes every frame, as xdpsock's does.
        let attach = Some((AttachMode::Driver, FrameMatch::All));
        App::open(&pair.a_if, 0, mode, true, forward, attach)
    })?;
    let counted = if forward {
        Counted::Sent
    } else {
        Counted::Received
    };
    app.set_meter(ctx.meter(run.start()?, counted));
    let (packets, invalid) = if forward {
        app.l2fwd(args.batch, args.wait(), run.until)?
    } else {
        app.rxdrop(args.batch, args.wait(), run.until)?
    };
    Received::af_xdp(&app, packets, invalid, true)
}

/// A TPACKET_V3 ring on `a_if` (the stack still processes every frame as well).
fn tpacket_v3(ctx: &Ctx, run: &Run) -> Result<Received> {
    let pair = ctx.pair;
    let mut ring = pair.a.run(|| -> Result<RxRingV3> {
        Ok(RxRingV3::open(
            interface_index(&pair.a_if)?,
            libc::ETH_P_ALL as u16,
            1 << 18,
            16,
            10,
        )?)
    })?;
    ring.statistics()?;
    let packets = run.count_packets(ctx, || {
        let mut packets = 0u64;
        if ring.next_block(|f| packets += ours(f) as u64).is_none() {
            ring.wait(100)?;
        }
        Ok(packets)
    })?;
    let (_, drops) = ring.statistics()?;
    Ok(Received::stack("ring", packets, drops))
}

/// `recvmmsg` batches on a UDP socket bound to the frames' destination.
fn recvmmsg(ctx: &Ctx, run: &Run) -> Result<Received> {
    udp_receiver(ctx, run, false)
}

/// A UDP forwarder: `recvmmsg` a batch, `sendmmsg` it back to the peer (datagrams sent).
fn mmsg_forwarder(ctx: &Ctx, run: &Run) -> Result<Received> {
    udp_receiver(ctx, run, true)
}

/// `recvmmsg` receiver; with `forward`, every batch goes back to the peer with `sendmmsg` and the
/// datagrams sent are counted.
fn udp_receiver(ctx: &Ctx, run: &Run, forward: bool) -> Result<Received> {
    let (pair, args) = (ctx.pair, ctx.args);
    let (socket, errors_before) = pair.a.run(|| -> Result<_> {
        let s = std::net::UdpSocket::bind((pair.a_v4, PORT))?;
        if forward {
            s.connect((pair.b_v4, PORT))?;
        }
        rustix::net::sockopt::set_socket_recv_buffer_size_force(&s, 4 << 20)?;
        Ok((s, udp_rcvbuf_errors()?))
    })?;
    // One recvmmsg takes at most RecvBatch::MAX datagrams; --batch may ask more of AF_XDP's rings.
    let mut batch = RecvBatch::new((args.batch as usize).min(RecvBatch::MAX), 2048)?;
    let packets = run.count_packets(ctx, || match batch.recv(socket.as_fd()) {
        Ok(n) if !forward => Ok(n as u64),
        Ok(n) => sent_unless_enobufs(batch.send(socket.as_fd(), n)),
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
            let mut fds = [PollFd::new(&socket, PollFlags::IN)];
            poll(
                &mut fds,
                Some(&Timespec {
                    tv_sec: 0,
                    tv_nsec: 100_000_000,
                }),
            )?;
            Ok(0)
        }
        Err(e) => Err(e).context("recvmmsg"),
    })?;
    let errors_after = pair.a.run(udp_rcvbuf_errors)?;
    let rx_dropped = errors_after.saturating_sub(errors_before);
    Ok(Received::stack("syscall", packets, rx_dropped))
}

/// AF_XDP txpush on `a_if` queue 0 (completed frames).
fn af_xdp_txpush(ctx: &Ctx, run: &Run) -> Result<Received> {
    let (pair, args) = (ctx.pair, ctx.args);
    let mut app = pair
        .a
        .run(|| App::open(&pair.a_if, 0, args.mode.into(), false, true, None))?;
    app.set_meter(ctx.meter(run.start()?, Counted::Sent));
    let packets = app.txpush(&ctx.to_b, args.batch, run.until)?;
    Received::af_xdp(&app, packets, 0, false)
}

/// An AF_PACKET TPACKET_V2 TX ring on `a_if` with the qdisc bypassed (frames queued).
fn tx_ring(ctx: &Ctx, run: &Run) -> Result<Received> {
    let pair = ctx.pair;
    let mut ring = pair.a.run(|| -> Result<TxRingV2> {
        Ok(TxRingV2::open(interface_index(&pair.a_if)?, 2048, 512)?)
    })?;
    let mut ticker = run.start()?;
    let mut progress = |sent: u64| ctx.tick(&mut ticker, sent);
    let packets = send_through_ring(&mut ring, &ctx.to_b, run.until, &mut progress)?;
    Ok(Received::stack("ring", packets, 0))
}

/// `sendmmsg` batches on a UDP socket connected to `b` (the stack builds the same frames).
fn sendmmsg(ctx: &Ctx, run: &Run) -> Result<Received> {
    let (pair, args) = (ctx.pair, ctx.args);
    let socket = pair.a.run(|| -> Result<std::net::UdpSocket> {
        let s = std::net::UdpSocket::bind((pair.a_v4, PORT))?;
        s.connect((pair.b_v4, PORT))?;
        Ok(s)
    })?;
    let payload = &ctx.to_b[UDP_HEADERS..];
    let packets = run.count_packets(ctx, || {
        sent_unless_enobufs(send_copies(socket.as_fd(), payload, args.batch as usize))
    })?;
    Ok(Received::stack("syscall", packets, 0))
}

/// How [`measure`] runs a path: the path sets up, calls `start` (which starts the clock and, for
/// receive paths, the generator, and returns the path's interval printer), then runs until
/// `until()`.
struct Run<'a> {
    until: &'a dyn Fn() -> bool,
    start: &'a dyn Fn() -> Result<Ticker>,
}

impl Run<'_> {
    fn start(&self) -> Result<Ticker> {
        (self.start)()
    }

    /// Starts the clock, then calls `step` until the run is over, printing interval lines of the
    /// packets counted so far; returns the packets every `step` counted.
    fn count_packets(&self, ctx: &Ctx, mut step: impl FnMut() -> Result<u64>) -> Result<u64> {
        let mut ticker = self.start()?;
        let mut packets = 0u64;
        while !(self.until)() {
            ctx.tick(&mut ticker, packets);
            packets += step()?;
        }
        Ok(packets)
    }
}

/// A path: sets up and runs as [`Run`] says.
type Path = fn(&Ctx, &Run) -> Result<Received>;

/// Shortest `--size`: the Ethernet, IPv4 and UDP headers and the checked payload's minimum.
const MIN_FRAME: usize = UDP_HEADERS + MIN_PAYLOAD;
/// Longest `--size`: the veth pair's MTU (1500) and the Ethernet header; the TX rings' 2048-byte
/// slots hold it.
const MAX_FRAME: usize = 1514;

/// Runs the comparison, a row per app and path.
pub(crate) fn run(args: &BenchXdpArgs) -> Result<Vec<Row>> {
    crate::flags::at_most(
        "--size",
        args.size as u64,
        MAX_FRAME as u64,
        "the pair's MTU of 1500 and the 14-byte Ethernet header",
    )?;
    if args.size < MIN_FRAME {
        return Err(crate::flags::UsageError(format!(
            "--size {} is below the minimum of {MIN_FRAME} (Ethernet, IPv4 and UDP headers and a \
             {MIN_PAYLOAD}-byte checked payload)",
            args.size
        ))
        .into());
    }
    for app in &args.app {
        chosen(app_paths(*app), &args.paths)?;
    }
    let pair = VethPair::new(VethConfig {
        queues: 1,
        ..VethConfig::default()
    })
    .context("building the veth pair (needs root)")?;
    let (to_a, to_b) = pair.udp_frames(PORT)?;
    let build = |spec: UdpFrame| -> Result<Vec<u8>> {
        let mut frame = vec![0u8; args.size];
        let len = spec
            .write(&mut frame, 0, args.size - UDP_HEADERS)
            .context("building the UDP frame")?;
        frame.truncate(len);
        Ok(frame)
    };
    let placement = Placement::choose();
    if let Some(placement) = placement {
        cpu::pin_current_thread(placement.app).context("pin the application thread")?;
        placement.steer_receive(&pair, args.feed)?;
    }
    let feed = FeedPath::new(&pair, args.feed).context("setting up --feed")?;
    if let Some(placement) = placement {
        feed.pin(placement.generator)?;
    }
    // Ctrl-C from here on stops the path that runs, prints the rows of what ran and drops everything
    // the ordinary way (XDP links, generator thread, namespaces): this handler replaces the harness's
    // own, which would remove the namespaces and end the process without a summary.
    live::watch_interrupts()?;
    let ctx = Ctx {
        pair: &pair,
        feed: &feed,
        args,
        placement,
        to_a: build(to_a)?,
        to_b: build(to_b)?,
    };
    let mut rows = Vec::new();
    for app in &args.app {
        let paths = chosen(app_paths(*app), &args.paths)?;
        // Transmitting paths send into an XDP drop program on the peer, the cheapest sink.
        let _sink = match app {
            BenchApp::Rxdrop => None,
            BenchApp::Txpush | BenchApp::L2fwd => Some(drop_sink(&pair)?),
        };
        for (name, path) in paths {
            rows.push(measure(&ctx, *app, name, path)?);
            if live::interrupted() {
                break;
            }
        }
        if live::interrupted() {
            break;
        }
    }
    Ok(rows)
}

/// Why a row has no `kernel_copied_per_byte`: no tracepoint shows the copies of these paths (the
/// UDP receivers' rows have the figure).
fn copies_unseen(app: BenchApp, path: &str) -> &'static str {
    match (app, path) {
        (BenchApp::Txpush, "af_xdp") => {
            "not counted: no tracepoint shows an AF_XDP socket's transmit copies (copy mode builds a \
             packet from each frame); `mode` says whether the socket was zero-copy"
        }
        (_, "af_xdp") => {
            "not counted: no tracepoint shows an AF_XDP socket's copies (copy mode copies each frame \
             into the UMEM); `mode` says whether the socket was zero-copy"
        }
        (_, "tpacket_v3" | "af_packet_tx_ring") => {
            "not counted: no tracepoint shows a packet ring's copies"
        }
        _ => {
            "not counted: sendmmsg copies every byte as it sends, by design; the column counts the \
             kernel's copies after zero-copy sends and in receives"
        }
    }
}

/// The paths `app` compares, by name.
fn app_paths(app: BenchApp) -> Vec<(&'static str, Path)> {
    match app {
        BenchApp::Rxdrop => vec![
            ("af_xdp", af_xdp),
            ("tpacket_v3", tpacket_v3),
            ("recvmmsg", recvmmsg),
        ],
        BenchApp::Txpush => vec![
            ("af_xdp", af_xdp_txpush),
            ("af_packet_tx_ring", tx_ring),
            ("sendmmsg", sendmmsg),
        ],
        BenchApp::L2fwd => vec![("af_xdp", af_xdp_l2fwd), ("mmsg_forwarder", mmsg_forwarder)],
    }
}

/// The paths of `--path`, in its order (all of `paths` without it); a name that is not among them is a
/// usage error.
fn chosen<'a>(paths: Vec<(&'a str, Path)>, names: &[String]) -> Result<Vec<(&'a str, Path)>> {
    if names.is_empty() {
        return Ok(paths);
    }
    names
        .iter()
        .map(|name| {
            paths
                .iter()
                .find(|(n, _)| *n == name.as_str())
                .copied()
                .ok_or_else(|| {
                    let known: Vec<&str> = paths.iter().map(|(n, _)| *n).collect();
                    crate::flags::UsageError(format!(
                        "--path {name}: not a path of this app (its paths: {})",
                        known.join(", ")
                    ))
                    .into()
                })
        })
        .collect()
}

/// Attaches the drop program to `b_if` and gives `a` a static neighbour entry for `b` (ARP would be
/// dropped by the sink too), so that frames sent from `a` to `b` cost the peer almost nothing.
fn drop_sink(pair: &VethPair) -> Result<XdpLink> {
    pair.pin_b_neighbours()?;
    pair.b.run(|| -> Result<XdpLink> {
        Ok(XdpProgram::drop_all()?.attach_to(&pair.b_if, AttachMode::Driver)?)
    })
}

/// CPU counters at one moment of a path's run.
#[derive(Debug, Clone, Copy)]
struct Snapshot {
    at: Instant,
    /// System-wide (user, system) seconds.
    system: (f64, f64),
    /// Busy seconds of the application's CPU.
    app_cpu_busy_s: f64,
    /// CPU seconds of the application thread, the receiving NAPI threads and ksoftirqd.
    receiver_threads_s: f64,
}

/// Runs one path for the configured duration (with the generator for receive paths) and builds its
/// row.
fn measure(ctx: &Ctx, app: BenchApp, name: &str, path: Path) -> Result<Row> {
    let generator: RefCell<Option<Generator>> = RefCell::new(None);
    // The receiver's threads: this one, the receiving interface's NAPI threads and the receiving CPU's
    // softirq thread (found at start).
    let threads: RefCell<Vec<u32>> = RefCell::new(Vec::new());
    let snapshot = || -> Result<Snapshot> {
        let mut receiver_threads_s = 0.0;
        for &tid in threads.borrow().iter() {
            receiver_threads_s +=
                cpu::thread_seconds(tid).with_context(|| format!("CPU time of thread {tid}"))?;
        }
        Ok(Snapshot {
            at: Instant::now(),
            system: system_cpu()?,
            app_cpu_busy_s: match ctx.placement {
                Some(p) => cpu::busy_seconds(p.app).context("read /proc/stat")?,
                None => 0.0,
            },
            receiver_threads_s,
        })
    };
    let dropped_before: Cell<u64> = Cell::new(0);
    let first: Cell<Option<Snapshot>> = Cell::new(None);
    let last: Cell<Option<Snapshot>> = Cell::new(None);
    // The bytes this process's receives copied, from start to end, where a tracepoint shows them.
    let receive_copies = matches!(name, "recvmmsg" | "mmsg_forwarder")
        .then(|| copies::KernelCopies::in_receives(false));
    let copies_before: RefCell<Result<u64, String>> = RefCell::new(Err("never started".into()));
    let copied: RefCell<Result<u64, String>> = RefCell::new(Err("never ended".into()));
    let app_name = match app {
        BenchApp::Rxdrop => "rxdrop",
        BenchApp::Txpush => "txpush",
        BenchApp::L2fwd => "l2fwd",
    };
    let feed = ctx.args.feed.as_str();
    let start = || -> Result<Ticker> {
        let mut tids = vec![cpu::current_thread_id().context("thread id")?];
        if let Some(placement) = ctx.placement {
            tids.extend(placement.pin_napi(ctx.pair)?);
            tids.push(cpu::softirq_thread(placement.app).context("find ksoftirqd")?);
        }
        *threads.borrow_mut() = tids;
        dropped_before.set(veth_dropped(ctx.pair)?);
        if app != BenchApp::Txpush {
            let gen_cpu = ctx.placement.map(|p| p.generator);
            *generator.borrow_mut() = Some(Generator::start(
                ctx.pair,
                ctx.feed,
                ctx.to_a.clone(),
                gen_cpu,
            )?);
        }
        first.set(Some(snapshot()?));
        if let Some(copies) = &receive_copies {
            *copies_before.borrow_mut() = copies.so_far();
        }
        Ok(Ticker::new(
            ctx.args.interval,
            json!({"app": app_name, "path": name}),
            ctx.args.json,
        ))
    };
    let limit = Duration::from_secs_f64(ctx.args.duration);
    // The end is measured when the run's time is up (or Ctrl-C came), before the path tears down
    // (and NAPI threads of a detached program are gone).
    let interrupted = Cell::new(false);
    let until = || {
        interrupted.set(interrupted.get() || live::interrupted());
        let done = interrupted.get() || first.get().is_some_and(|s| s.at.elapsed() >= limit);
        if done && last.get().is_none() {
            last.set(snapshot().ok());
            if let Some(copies) = &receive_copies {
                *copied.borrow_mut() = copies.since(copies_before.borrow().clone());
            }
        }
        done
    };
    let run = Run {
        until: &until,
        start: &start,
    };
    let received = path(ctx, &run).with_context(|| format!("path {name}"))?;
    let begin = first.get().context("path never started")?;
    let end = match last.get() {
        Some(end) => end,
        None => snapshot()?,
    };
    let seconds = (end.at - begin.at).as_secs_f64();
    let generator_mpps = match generator.borrow_mut().take() {
        Some(g) => {
            let (generated, gen_seconds) = g.finish()?;
            json!(generated as f64 / gen_seconds / 1e6)
        }
        None => Value::Null,
    };
    let veth_dropped = veth_dropped(ctx.pair)?.saturating_sub(dropped_before.get());
    let (user, sys) = (end.system.0 - begin.system.0, end.system.1 - begin.system.1);
    let per_packet = |seconds: f64| match received.packets {
        0 => Value::Null,
        n => json!(seconds * 1e9 / n as f64),
    };
    let app_per_packet = match ctx.placement {
        Some(_) => per_packet(end.app_cpu_busy_s - begin.app_cpu_busy_s),
        None => Value::Null,
    };
    let threads_per_packet = per_packet(end.receiver_threads_s - begin.receiver_threads_s);
    let frame_bytes = ctx.to_a.len();
    let mut row = Row::new();
    for (k, v) in [
        ("bench", json!("xdp")),
        ("app", json!(app_name)),
        ("path", json!(name)),
        ("feed", json!(feed)),
        ("mode", json!(received.mode)),
        ("frame_bytes", json!(frame_bytes)),
        ("packets", json!(received.packets)),
        ("seconds", json!(seconds)),
        ("mpps", json!(received.packets as f64 / seconds / 1e6)),
        ("cpu_user_s", json!(user)),
        ("cpu_sys_s", json!(sys)),
        ("sys_cpu_ns_per_packet", per_packet(user + sys)),
        ("app_cpu_ns_per_packet", app_per_packet),
        ("app_threads_ns_per_packet", threads_per_packet),
        ("app_cpu", json!(ctx.placement.map(|p| p.app))),
        ("generator_cpu", json!(ctx.placement.map(|p| p.generator))),
        ("generator_mpps", generator_mpps),
        ("rx_dropped", json!(received.rx_dropped)),
        ("veth_dropped", json!(veth_dropped)),
        ("invalid_descs", json!(received.invalid_descs)),
        ("interrupted", json!(interrupted.get())),
    ] {
        row.insert(k.to_string(), v);
    }
    match receive_copies {
        // Each datagram's payload is what a receive returns.
        Some(_) => copies::put(
            &mut row,
            &copied.into_inner(),
            received.packets * (frame_bytes - UDP_HEADERS) as u64,
        ),
        None => copies::put(&mut row, &Err(copies_unseen(app, name).to_string()), 0),
    }
    Ok(row)
}
