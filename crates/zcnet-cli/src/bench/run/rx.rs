//! Run: `zcnet bench rx`: TCP zero-copy receive (`TCP_ZEROCOPY_RECEIVE`) against plain `recv`, over
//! loopback with an MSS of one page or over a veth pair whose MTU leaves one page of payload per
//! segment, the sender in a process of its own; or the two sides apart with `--listen`/`--connect`.
//! Prints what tcp_mmap prints for each receive mode. The receiver runs with the library's
//! `RxConfig::bulk()` unless `--window-kib`/`--rcvlowat-kib` say otherwise. `--api zcrx` receives
//! through io_uring zero-copy receive (device-less) beside the socket; a kernel that refuses it gets
//! a row saying why, not measured.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::LazyLock;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use benchnet::{VethConfig, VethPair};
use serde_json::{Value, json};
use zcnet::probe::ResourceUsage;
use zcnet::rx::{Receiver, Release, RxConfig, RxMode, RxPath, RxStats, ZcrxConfig, sender};
use zcnet::tx::{BufferPool, MemlockBudget, Mode, PoolConfig, SenderConfig, TcpSender};

use crate::bench::args;
use crate::bench::args::apart::TcpTimeouts;
use crate::bench::args::rx::{ApiArg, ModeArg, ReleaseArg, RxArgs, SenderArg, apis_shown};
use crate::bench::plan;
use crate::bench::run::child::Watched;
use crate::bench::run::copies::{self, KernelCopies};
use crate::bench::run::listen::{self, Ended, mapped_pct};
use crate::bench::run::serve::{self, Rows, Serving, StreamSetup};
use crate::bench::run::streams::{self, each as streams_of};
use crate::bench::run::watch::{SendWatch, Stop};
use crate::bench::run::why;
use crate::bench::run::wire::{self, Bench, Header};
use crate::flags;
use crate::flags::UsageError;
use crate::live::{self, Ticker};
use crate::report::{Column, Row, cpu_us_per_mb, gbit_per_s, object, print_rows};

/// Where sender and receiver connect.
enum Path {
    Loopback(IpAddr),
    Veth(Box<VethPair>),
}

impl Path {
    fn name(&self) -> &'static str {
        match self {
            Path::Loopback(_) => "loopback",
            Path::Veth(_) => "veth",
        }
    }

    /// A listener on the receiving side whose connections carry one page of payload per segment.
    fn listen(&self, ipv6: bool) -> anyhow::Result<TcpListener> {
        let listen = |ip| sender::bind_page_mss(SocketAddr::new(ip, 0));
        match self {
            Path::Loopback(ip) => listen(*ip).context("listen on loopback"),
            Path::Veth(pair) => {
                let ip = if ipv6 {
                    IpAddr::V6(pair.b_v6)
                } else {
                    IpAddr::V4(pair.b_v4)
                };
                pair.b
                    .run(|| listen(ip))
                    .context("listen in the receiver's namespace")
            }
        }
    }

    /// Starts this program as the sender process (in the sending namespace for veth).
    fn sender_command(&self) -> anyhow::Result<Command> {
        let exe = std::env::current_exe().context("locating the zcnet binary")?;
        Ok(match self {
            Path::Loopback(_) => Command::new(exe),
            Path::Veth(pair) => pair.a.command(&exe.to_string_lossy()),
        })
    }
}

/// What the receiver measured (its thread's CPU time and context switches).
struct Measured {
    /// Payload bytes (after the header).
    bytes: u64,
    stats: RxStats,
    seconds: f64,
    usage: ResourceUsage,
    fallback: Option<String>,
    interrupted: bool,
}

fn receive(server: TcpStream, config: RxConfig, ticker: &mut Ticker) -> anyhow::Result<Measured> {
    let report = listen::receive_stream(server, config, ticker, None);
    if !report.complete() && !report.interrupted() {
        bail!(
            "the stream ended {}: {}",
            report.ended.map_or("?", Ended::name),
            report.reason.as_deref().unwrap_or("?")
        );
    }
    if let Some(errors) = report.data_errors.filter(|&n| n > 0) {
        bail!(
            "{errors} received bytes differ from what was sent (the first at offset {:?})",
            report.first_error
        );
    }
    let interrupted = report.interrupted();
    Ok(Measured {
        bytes: report.bytes,
        stats: report.stats,
        seconds: report.seconds,
        usage: report.usage,
        fallback: report.fallback,
        interrupted,
    })
}

/// What the sender did, beyond the bytes.
#[derive(Default)]
struct SenderCounts {
    zerocopy_calls: u64,
    copy_calls: u64,
}

/// How a `--connect` sender's stream ended: what it did, and why it ended early, if it did.
#[derive(Default)]
struct Sent {
    counts: SenderCounts,
    /// Payload bytes handed to the kernel.
    bytes: u64,
    interrupted: bool,
    /// What the [`SendWatch`] saw when it ended a stream the peer stopped taking.
    stalled: Option<String>,
}

/// Sends `total` bytes of the pattern (units of `write` bytes) after `header`, if any, under a
/// [`SendWatch`]; the header goes as a record of its own (`MSG_EOR`) so that the payload behind it
/// stays page-aligned.
fn send_all(
    client: TcpStream,
    (sender, total, write): (SenderArg, u64, usize),
    header: Option<Header>,
    timeouts: &TcpTimeouts,
) -> anyhow::Result<Sent> {
    let watch = SendWatch::start(&client, timeouts)?;
    let mut sent = Sent::default();
    let result = send_pieces(client, (sender, total, write), header, &mut sent);
    sent.interrupted = live::interrupted();
    if let Err(e) = result {
        match watch.stop() {
            Some(Stop::Interrupted) => sent.interrupted = true,
            Some(Stop::Stalled(why)) => sent.stalled = Some(why),
            // No end is set on this watch: a stream of a size, not of a duration.
            Some(Stop::Slow { .. }) | None => return Err(e),
        }
    }
    Ok(sent)
}

fn send_pieces(
    client: TcpStream,
    (sender, total, write): (SenderArg, u64, usize),
    header: Option<Header>,
    sent: &mut Sent,
) -> anyhow::Result<()> {
    if let Some(h) = header {
        sender::send_record(&client, &h.encode()).context("sending the stream header")?;
    }
    let pieces = || {
        let mut left = total;
        std::iter::from_fn(move || {
            let n = left.min(write as u64) as usize;
            left -= n as u64;
            (n > 0).then_some(n)
        })
    };
    // No buffer larger than the stream, and no more of them than it has writes.
    let largest = total.min(write as u64) as usize;
    let writes = total.div_ceil(write.max(1) as u64);
    let client = match sender {
        SenderArg::Copy => {
            let mut buf = vec![0u8; largest];
            wire::fill(&mut buf, write);
            let mut client = client;
            for n in pieces() {
                if live::interrupted() {
                    break;
                }
                client.write_all(&buf[..n]).context("send")?;
                sent.bytes += n as u64;
            }
            client
        }
        SenderArg::Zerocopy => {
            // Filled once below: the buffers keep the pattern from one send to the next.
            let pool = BufferPool::new_keeping_contents(PoolConfig::new(
                largest.max(1),
                buffers_in_flight(write).min(writes.max(1) as usize),
            ))
            .context("send buffer pool")?;
            let mut filled = Vec::new();
            while let Some(mut buf) = pool.take() {
                buf.fill_with(largest, |b| wire::fill(b, write));
                filled.push(buf);
            }
            drop(filled);
            let mut tx = TcpSender::new(client, SenderConfig::with_mode(Mode::ZeroCopy));
            if let Err(why) = tx.zerocopy_status() {
                bail!("MSG_ZEROCOPY sender: {why}");
            }
            let sending = (|| {
                for n in pieces() {
                    if live::interrupted() {
                        break;
                    }
                    let mut buf = loop {
                        if let Some(buf) = pool.take() {
                            break buf;
                        }
                        tx.wait_completions(COMPLETION_WAIT)?;
                    };
                    buf.set_len(n);
                    tx.send(buf)?;
                }
                Ok::<_, zcnet::tx::TxError>(())
            })();
            sent.bytes = tx.stats().bytes;
            sent.counts = SenderCounts {
                zerocopy_calls: tx.stats().zc_calls,
                copy_calls: tx.stats().copy_calls,
            };
            sending?;
            tx.close(COMPLETION_WAIT)?
        }
    };
    client.shutdown(std::net::Shutdown::Write)?;
    Ok(())
}

/// Buffers the zero-copy sender keeps in flight: 16, fewer when that is more than
/// [`POOL_BYTES`] (at least 2), or as many sends of `write` bytes as the process's locked-memory
/// budget can pin at once (at least 2), so that under a normal user's limit every send still goes
/// zero-copy and its pages map on the receiver.
fn buffers_in_flight(write: usize) -> usize {
    let by_bytes = (POOL_BYTES / write.max(1)).clamp(2, 16);
    let budget = MemlockBudget::global();
    match budget.usable() {
        None => by_bytes,
        Some(usable) => (usable / budget.pages_for(write)).clamp(2, by_bytes as u64) as usize,
    }
}

/// The bytes of send buffers beyond which the zero-copy sender keeps fewer than 16: a socket holds
/// a few MiB in flight, and 16 writes of 64 MiB would hold 1 GiB.
const POOL_BYTES: usize = 64 << 20;

/// Longest wait for MSG_ZEROCOPY completions before the run fails.
const COMPLETION_WAIT: Duration = Duration::from_secs(10);

/// One mode's totals over every round.
#[derive(Default)]
struct Totals {
    connections: u32,
    bytes: u64,
    interrupted: bool,
    stats: RxStats,
    seconds: f64,
    usage: ResourceUsage,
    fallback: Option<String>,
    sent: SenderCounts,
    /// Why a stream of several ended without its figures (its error), when one did.
    failed: Option<String>,
}

impl Totals {
    fn add(&mut self, measured: Measured, sent: SenderCounts) {
        self.connections += 1;
        self.bytes += measured.bytes;
        self.interrupted |= measured.interrupted;
        self.stats += measured.stats;
        self.seconds += measured.seconds;
        let u = &mut self.usage;
        u.user += measured.usage.user;
        u.system += measured.usage.system;
        u.voluntary_switches += measured.usage.voluntary_switches;
        u.involuntary_switches += measured.usage.involuntary_switches;
        self.fallback = measured.fallback;
        self.sent.zerocopy_calls += sent.zerocopy_calls;
        self.sent.copy_calls += sent.copy_calls;
    }
}

/// The receiver's configuration for `mode` on `api`: the library's defaults unless a flag says
/// otherwise.
fn rx_config(args: &RxArgs, (mode, api): Leg) -> RxConfig {
    let config = socket_config(args, mode);
    match api {
        ApiArg::Socket => config,
        ApiArg::Zcrx => config.with_path(RxPath::Zcrx(ZcrxConfig::no_device())),
    }
}

/// One receive mode on one API: what a row measures.
type Leg = (ModeArg, ApiArg);

/// Every (--mode, --api) pair, the APIs of each mode side by side.
fn legs(args: &RxArgs) -> Vec<Leg> {
    let apis = &args.api;
    args.mode
        .iter()
        .flat_map(|&mode| apis.iter().map(move |&api| (mode, api)))
        .collect()
}

/// Why zcrx cannot receive here, if `--api` asks for it: a device-less receiver set up on a
/// loopback connection, dropped at once.
fn zcrx_refusal(args: &RxArgs) -> anyhow::Result<Option<String>> {
    if !args.api.contains(&ApiArg::Zcrx) {
        return Ok(None);
    }
    let (_client, server) = sender::connect_page_mss(IpAddr::V4(Ipv4Addr::LOCALHOST))
        .context("a loopback connection to try zcrx on")?;
    Ok(
        Receiver::new(server, rx_config(args, (ModeArg::Copy, ApiArg::Zcrx)))
            .err()
            .map(|e| e.to_string()),
    )
}

/// The socket receiver's configuration for `mode`.
fn socket_config(args: &RxArgs, mode: ModeArg) -> RxConfig {
    let defaults = RxConfig::bulk();
    let low_water = match args.rcvlowat_kib {
        None => defaults.low_water,
        Some(0) => None,
        Some(kib) => Some(kib << 10),
    };
    let window = args.window_kib.map_or(defaults.window, |kib| kib << 10);
    let release = match args.release {
        ReleaseArg::Zap => Release::Zap,
        ReleaseArg::Lazy => Release::Lazy,
    };
    let mut config = defaults;
    config.low_water = low_water;
    match mode {
        ModeArg::Copy => {
            config.mode = RxMode::Copy;
            config.copy_buffer = window;
        }
        ModeArg::Zerocopy => {
            config.mode = RxMode::ZeroCopy;
            config.window = window;
            config.release = release;
            config.give_up_after = None;
        }
        // Its copy windows read as the copy mode does; it gives up mapping as the library does.
        ModeArg::Auto => {
            config.mode = RxMode::Auto;
            config.window = window;
            config.copy_buffer = window;
            config.release = release;
        }
    }
    config
}

/// Interval lines of the receiver in `mode` (of its stream from `peer`, when several may run at once).
fn receiver_ticker(args: &RxArgs, leg: Leg, peer: Option<SocketAddr>) -> Ticker {
    let mut label = leg_fields(args, leg);
    if let Some(peer) = peer {
        label["peer"] = json!(peer.to_string());
    }
    Ticker::new(args.interval, label, args.json)
}

/// The fields naming `leg` in rows and interval lines: its API only when `--api` is not the
/// socket alone, so that the socket's output stays as it was.
fn leg_fields(args: &RxArgs, (mode, api): Leg) -> Value {
    let mut fields = json!({"bench": "rx", "mode": mode_name(mode)});
    if apis_shown(args) {
        fields["api"] = json!(api_name(api));
    }
    fields
}

/// One connection: a sender process sends `--mib` in writes of `write` bytes (whole KiB); this
/// thread receives it in `mode`. The sender is watched: one that stops or dies ends the run with its
/// state and standard error.
fn run_one(
    args: &RxArgs,
    path: &Path,
    ((mode, api), write): (Leg, usize),
) -> anyhow::Result<(Measured, SenderCounts)> {
    let config = rx_config(args, (mode, api));
    let total = mib_bytes(args.mib)?;
    let listener = path.listen(args.ipv6)?;
    let mut command = path.sender_command()?;
    command
        .args(["bench", "rx", "--connect"])
        .arg(listener.local_addr()?.to_string())
        .args(["--sender", sender_name(args.sender)])
        // One stream, which this receiver takes in `mode`.
        .args(["--rounds", "1", "--mode", mode_name(mode)])
        .args(["--mib", &args.mib.to_string()])
        .args(["--write-kib", &(write >> 10).to_string()])
        .args(args.timeouts.args())
        // Its line of counts is read here.
        .arg("--json");
    if args.apart.no_verify {
        command.arg("--no-verify");
    }
    let mut child = Watched::spawn(&mut command, "the sender process")?;
    let server = match accept(&listener, &mut child) {
        Ok(server) => server,
        Err(e) => return Err(child.failure(&format!("{e:#}"))),
    };
    let guard = child.guard(&server)?;
    let mut ticker = receiver_ticker(args, (mode, api), None);
    let received = receive(server, config, &mut ticker);
    if let Some(why) = guard.finish() {
        return Err(child.failure(&why));
    }
    let measured = match received {
        Ok(m) if m.interrupted => {
            child.abandon();
            return Ok((m, SenderCounts::default()));
        }
        Ok(m) => m,
        Err(e) => {
            // A sender that died (its connection reset) is the cause to report.
            if let Ok(Some(status)) = child.try_wait()
                && !status.success()
            {
                return Err(child.failure(&format!("failed ({status})")));
            }
            child.abandon();
            return Err(e);
        }
    };
    let deadline = Instant::now() + COMPLETION_WAIT;
    let mut report = None;
    loop {
        match child.next_line(deadline) {
            Ok(Some(line)) => report = Some(line),
            Ok(None) => break,
            Err(why) => return Err(child.failure(&why)),
        }
    }
    match child.wait(deadline) {
        Ok(status) if status.success() => {}
        Ok(status) => return Err(child.failure(&format!("failed ({status})"))),
        Err(why) => return Err(child.failure(&why)),
    }
    let sent: Value =
        serde_json::from_str(report.as_deref().unwrap_or("")).context("the sender's report")?;
    let count = |key: &str| sent.get(key).and_then(Value::as_u64).unwrap_or(0);
    if measured.bytes != total && !live::interrupted() {
        bail!("received {} bytes of {total}", measured.bytes);
    }
    Ok((
        measured,
        SenderCounts {
            zerocopy_calls: count("zerocopy_calls"),
            copy_calls: count("copy_calls"),
        },
    ))
}

/// Accepts the sender's connection, failing if the sender process exits first.
fn accept(listener: &TcpListener, child: &mut Watched) -> anyhow::Result<TcpStream> {
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + COMPLETION_WAIT;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false)?;
                return Ok(stream);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if let Some(status) = child.try_wait()? {
                    bail!("exited before connecting ({status})");
                }
                if Instant::now() > deadline {
                    bail!("did not connect within {COMPLETION_WAIT:?}");
                }
                thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e).context("accept"),
        }
    }
}

/// `--mib` in bytes (`--mib` of 2^44 or more would not fit in 64 bits).
fn mib_bytes(mib: u64) -> anyhow::Result<u64> {
    mib.checked_mul(1 << 20).ok_or_else(|| {
        UsageError(format!(
            "--mib {mib} is above the limit of {} (bytes must fit in 64 bits)",
            u64::MAX >> 20
        ))
        .into()
    })
}

/// `--connect`: one stream per `--mode` for each of `--rounds` rounds (at each size of `--sizes`, in
/// the sweep's order), as the one-process run receives them, so that a `--listen` receiver with the
/// same `--mode` (and `-P`) takes each in its mode's turn: each connects, sends `--mib` (after the
/// header unless `--raw`) and reports its counts. With `-P N` each of them is N streams side by
/// side, whose rows go to the report (a sum row after each connection's streams).
fn run_sender(args: &RxArgs, spec: &str, sizes: &[usize]) -> anyhow::Result<Option<RxSent>> {
    let addr = args::connect_addr(spec, args.ipv6)?;
    let total = mib_bytes(args.mib)?;
    let mut sent = RxSent {
        runs: Vec::new(),
        columns: [&[("stream", "stream")], SENDER_COLUMNS].concat(),
    };
    for (round, size, modes) in plan::schedule(args.rounds, sizes, &legs(args)) {
        for _ in modes {
            if args.parallel == 1 {
                let (ended, row) = send_stream(args, addr, size)?;
                print_rows(&[row], SENDER_COLUMNS, args.json);
                if let Some(why) = &ended.stalled {
                    bail!(
                        "the stream stopped after {} of {total} bytes: {why}",
                        ended.bytes
                    );
                }
                if ended.interrupted {
                    return Ok(None);
                }
                continue;
            }
            let ended = streams_of(args.parallel, || send_stream(args, addr, size))?;
            let rows = ended.into_iter().zip(1u32..).map(|(ended, stream)| {
                let mut row = ended.map_or_else(
                    |e| {
                        object(
                            json!({"role": "sender", "sender_mode": sender_name(args.sender),
                            "size": size, "bytes": 0, "failed": format!("{e:#}")}),
                        )
                    },
                    |(_, row)| row,
                );
                row.insert("stream".into(), json!(stream));
                row.insert("round".into(), json!(round));
                row
            });
            sent.runs.push(rows.collect());
            if live::interrupted() {
                return Ok(Some(sent));
            }
        }
    }
    Ok((args.parallel > 1).then_some(sent))
}

/// One stream of `--connect`: `--mib` in writes of `write` bytes; how it ended and its row of
/// counts (`stalled` saying why it stopped early).
fn send_stream(args: &RxArgs, addr: SocketAddr, write: usize) -> anyhow::Result<(Sent, Row)> {
    let total = mib_bytes(args.mib)?;
    let client = args.timeouts.connect(addr)?;
    let header = (!args.apart.raw).then_some(Header {
        bench: Bench::Rx,
        mode: match args.sender {
            SenderArg::Copy => 0,
            SenderArg::Zerocopy => 1,
        },
        verify: !args.apart.no_verify,
        unit: write as u32,
        duration_ms: 0,
        bytes: total,
        // The byte count it announces tells a whole stream.
        marked: false,
        // Each stream of `-P` is a connection of its own, judged alone.
        streams: 1,
    });
    let sent = send_all(client, (args.sender, total, write), header, &args.timeouts)?;
    let row = object(
        json!({"role": "sender", "sender_mode": sender_name(args.sender),
        "size": write, "bytes": sent.bytes, "zerocopy_calls": sent.counts.zerocopy_calls,
        "copy_calls": sent.counts.copy_calls, "interrupted": sent.interrupted,
        "stalled": sent.stalled}),
    );
    Ok((sent, row))
}

/// The text columns of a `--connect` stream's row.
const SENDER_COLUMNS: &[Column] = &[
    ("sender_mode", "sender"),
    ("size", "write size"),
    ("bytes", "bytes"),
    ("zerocopy_calls", "zc calls"),
    ("copy_calls", "copy calls"),
    ("interrupted", "interrupted"),
];

/// `--listen`: streams side by side ([`serve::serve`]), each received in the next `--mode` in
/// turn (with `-P N`, N streams to a turn). Fails at its end when a stream whose sender asked for verification did not arrive whole or
/// had wrong bytes.
fn run_listener(args: &RxArgs, spec: &str) -> anyhow::Result<()> {
    args.serve.check()?;
    let addr = args::listen_addr(spec, args.ipv6)?;
    let listener = sender::bind_page_mss(addr).with_context(|| format!("listening on {addr}"))?;
    listen::announce(listener.local_addr()?, args.json);
    let how = Serving {
        rows: Rows {
            bench: "rx",
            columns: if apis_shown(args) {
                &LISTEN_API_COLUMNS
            } else {
                LISTEN_COLUMNS
            },
            json: args.json,
        },
        once: args.apart.once,
        flags: &args.serve,
        judge: true,
        count_copies: Some(!args.no_kernel_copies),
    };
    // Each mode's turn takes the -P streams of a connection.
    let legs = legs(args);
    let n = args.parallel as usize;
    let mut turns = legs
        .iter()
        .flat_map(|leg| std::iter::repeat_n(leg, n))
        .cycle();
    serve::serve(&listener, &how, |peer| {
        let leg = turns
            .next()
            .copied()
            .unwrap_or((ModeArg::Copy, ApiArg::Socket));
        let mut fields = leg_fields(args, leg);
        if let Some(map) = fields.as_object_mut() {
            map.remove("bench");
        }
        StreamSetup {
            config: rx_config(args, leg),
            ticker: receiver_ticker(args, leg, Some(peer)),
            fields: object(fields),
        }
    })
}

const LISTEN_COLUMNS: &[Column] = &[
    ("mode", "mode"),
    ("peer", "peer"),
    ("size", "write size"),
    ("bytes", "bytes"),
    ("mapped_pct", "% mapped"),
    ("seconds", "seconds"),
    ("gbit_per_s", "Gbit/s"),
    ("cpu_us_per_mb", "usec/MB"),
    ("ctx_switches", "c-switches"),
    ("kernel_copied_per_byte", "kernel copied/B"),
    ("data_errors", "data errors"),
    ("ended", "ended"),
    ("why", "why"),
];

/// The text columns of the one-process run's rows.
const RUN_COLUMNS: &[Column] = &[
    ("path", "path"),
    ("mode", "mode"),
    ("sender_mode", "sender"),
    ("size", "write size"),
    ("bytes", "bytes"),
    ("mapped_pct", "% mapped"),
    ("kernel_copied_per_byte", "kernel copied/B"),
    ("seconds", "seconds"),
    ("gbit_per_s", "Gbit/s"),
    ("cpu_user_s", "user s"),
    ("cpu_sys_s", "sys s"),
    ("cpu_us_per_mb", "usec/MB"),
    ("ctx_switches", "c-switches"),
    ("why", "why"),
];

/// `columns` with the API after the mode, and what zcrx received and the kernel copied after the
/// share mapped (the rows of `--api` other than `socket` alone).
fn api_columns(columns: &[Column]) -> Vec<Column> {
    columns
        .iter()
        .flat_map(|&column| match column.0 {
            "mode" => vec![column, ("api", "api")],
            "mapped_pct" => vec![
                column,
                ("zcrx_bytes", "zcrx bytes"),
                ("zcrx_copied_bytes", "kernel copied"),
            ],
            _ => vec![column],
        })
        .collect()
}

/// [`api_columns`] of [`LISTEN_COLUMNS`], static as a listener's rows take them.
static LISTEN_API_COLUMNS: LazyLock<Vec<Column>> = LazyLock::new(|| api_columns(LISTEN_COLUMNS));

fn row(args: &RxArgs, path: &Path, ((mode, api), size): (Leg, usize), t: &Totals) -> Row {
    let stats = &t.stats;
    let mut row = json!({
        "bench": "rx",
        "path": path.name(),
        "ip": if args.ipv6 { "v6" } else { "v4" },
        "mode": mode_name(mode),
        "size": size,
        "sender_mode": sender_name(args.sender),
        "rounds": t.connections,
        "bytes": t.bytes,
        "seconds": t.seconds,
        "gbit_per_s": gbit_per_s(t.bytes, t.seconds),
        "cpu_user_s": t.usage.user.as_secs_f64(),
        "cpu_sys_s": t.usage.system.as_secs_f64(),
        "cpu_us_per_mb": cpu_us_per_mb(&t.usage, t.bytes),
        "mapped_bytes": stats.mapped_bytes,
        "copied_bytes": t.bytes.saturating_sub(stats.mapped_bytes),
        "mapped_pct": mapped_pct(stats.mapped_bytes, t.bytes),
        "ctx_switches": t.usage.context_switches(),
        "zerocopy_calls": stats.zerocopy_calls,
        "recv_calls": stats.recv_calls,
        "fallback": t.fallback,
        "auto_choice": stats.auto.as_ref().map(why::rx_choice_json),
        "cost_comparisons": stats.cost_comparisons,
        "why": why::rx_short(stats),
        "sender_zerocopy_calls": t.sent.zerocopy_calls,
        "sender_copy_calls": t.sent.copy_calls,
        "verified": !args.apart.no_verify,
        "interrupted": t.interrupted,
    });
    if apis_shown(args) {
        row["api"] = json!(api_name(api));
        row["zcrx_bytes"] = json!(stats.zcrx_bytes);
        row["zcrx_copied_bytes"] = json!(stats.zcrx_copied_bytes);
        row["zcrx_copy_count"] = json!(stats.zcrx_copy_count);
        row["zcrx_exhausted"] = json!(stats.zcrx_exhausted);
    }
    object(row)
}

/// The row of a leg the kernel refused (`why`): named as a measured one, nothing measured.
fn refused_row(args: &RxArgs, path: &Path, ((mode, api), size): (Leg, usize), why: &str) -> Row {
    object(json!({
        "bench": "rx",
        "path": path.name(),
        "ip": if args.ipv6 { "v6" } else { "v4" },
        "mode": mode_name(mode),
        "api": api_name(api),
        "size": size,
        "sender_mode": sender_name(args.sender),
        "rounds": 0,
        "bytes": 0,
        "not_measured": why,
        "why": format!("not measured: {why}"),
    }))
}

fn api_name(api: ApiArg) -> &'static str {
    match api {
        ApiArg::Socket => "socket",
        ApiArg::Zcrx => "zcrx",
    }
}

fn mode_name(mode: ModeArg) -> &'static str {
    match mode {
        ModeArg::Copy => "copy",
        ModeArg::Zerocopy => "zerocopy",
        ModeArg::Auto => "auto",
    }
}

fn sender_name(sender: SenderArg) -> &'static str {
    match sender {
        SenderArg::Copy => "copy",
        SenderArg::Zerocopy => "zerocopy",
    }
}

/// Largest write of the sender: 64 MiB.
const MAX_WRITE: u64 = 64 << 20;

/// The sender's write sizes in bytes: `--sizes` (each whole KiB, as the sender takes them in
/// `--write-kib`), or `--write-kib`'s.
fn write_sizes(args: &RxArgs) -> anyhow::Result<Vec<usize>> {
    let single = (args.write_kib << 10, "--write-kib");
    plan::check_plot(args.plot.as_deref())?;
    plan::sizes(&args.sizes, single, |flag, bytes| {
        if flag == "--write-kib" {
            let kib = (bytes >> 10) as u64;
            return flags::at_most(flag, kib, MAX_WRITE >> 10, "64 MiB per write");
        }
        if bytes % 1024 != 0 {
            return Err(UsageError(format!(
                "{flag} {bytes}: the sender writes whole KiB (as --write-kib takes them)"
            ))
            .into());
        }
        flags::at_most(flag, bytes as u64, MAX_WRITE, "64 MiB per write")
    })
}

/// What the runs of a one-process `bench rx` hand to its report.
pub(crate) struct RxRuns {
    /// A row per receive mode (and API) and size.
    pub(crate) rows: Vec<Row>,
    /// The columns of the table: the API's with `--api`.
    pub(crate) columns: Vec<Column>,
    /// `loopback` or `veth`.
    pub(crate) path: &'static str,
    /// Every mode and size got all its rounds.
    pub(crate) whole: bool,
    /// Why zcrx was not measured, when the kernel refused it.
    pub(crate) refused: Option<String>,
    /// Why a stream of several ended without its figures, when one did (the first).
    pub(crate) failed: Option<String>,
}

/// What `bench rx` hands its report.
pub(crate) enum RxEnded {
    /// The one-process bench's rows.
    Runs(RxRuns),
    /// A `--connect -P N` sender's streams.
    Sent(RxSent),
}

/// The streams a `--connect -P N` sender sent.
pub(crate) struct RxSent {
    /// Each connection's N stream rows (numbered), in the order sent.
    pub(crate) runs: Vec<Vec<Row>>,
    /// The columns of the table.
    pub(crate) columns: Vec<Column>,
}

/// Runs every requested receive mode over one path (at every size of `--sizes`), a row for each; a
/// `--connect` sender (but for the streams of `-P N`, handed over) and a `--listen` receiver return
/// `None` when done, having printed their rows.
pub(crate) fn run(args: &RxArgs) -> anyhow::Result<Option<RxEnded>> {
    let sizes = write_sizes(args)?;
    mib_bytes(args.mib)?;
    streams::check(args.parallel)?;
    if let Some(kib) = args.rcvlowat_kib {
        flags::at_most("--rcvlowat-kib", kib as u64, 1 << 20, "1 GiB")?;
    }
    if let Some(kib) = args.window_kib {
        flags::at_most("--window-kib", kib as u64, 1 << 20, "a window of 1 GiB")?;
    }
    if apis_shown(args) && !args.sizes.is_empty() {
        return Err(UsageError(
            "--api with --sizes: a sweep compares the socket's modes (--api socket)".into(),
        )
        .into());
    }
    if let Some(spec) = &args.connect {
        live::watch_interrupts()?;
        return Ok(run_sender(args, spec, &sizes)?.map(RxEnded::Sent));
    }
    if let Some(spec) = &args.listen {
        live::watch_interrupts()?;
        return run_listener(args, spec).map(|()| None);
    }
    let path = if args.netns {
        let mtu = if args.ipv6 { 4168 } else { 4148 };
        let pair = VethPair::new(VethConfig {
            mtu,
            ..VethConfig::default()
        })
        .context("creating the veth pair (needs root)")?;
        Path::Veth(Box::new(pair))
    } else if args.ipv6 {
        Path::Loopback(IpAddr::V6(Ipv6Addr::LOCALHOST))
    } else {
        Path::Loopback(IpAddr::V4(Ipv4Addr::LOCALHOST))
    };
    // After the veth harness, whose own Ctrl-C handler this replaces (see run::tcp::run).
    live::watch_interrupts()?;
    // The order of the modes alternates from one round (and size) to the next, so that a noisy
    // neighbour hits them alike.
    let legs = legs(args);
    // A total per size, leg and stream (0 for the one stream of a run without -P).
    let streams: Vec<u32> = match args.parallel {
        1 => vec![0],
        n => (1..=n).collect(),
    };
    let mut totals: Vec<((usize, Leg, u32), Totals)> = sizes
        .iter()
        .flat_map(|&size| legs.iter().map(move |&leg| (size, leg)))
        .flat_map(|(size, leg)| {
            streams
                .iter()
                .map(move |&s| ((size, leg, s), Totals::default()))
        })
        .collect();
    let refused = zcrx_refusal(args)?;
    // The kernel's copies to this process per size and leg, over its rounds and streams.
    let copies = KernelCopies::in_receives(args.no_kernel_copies);
    let mut copied: Vec<((usize, Leg), Result<u64, String>)> = Vec::new();
    let mut whole = true;
    'sweep: for (_, size, legs) in plan::schedule(args.rounds, &sizes, &legs) {
        for leg in legs {
            if leg.1 == ApiArg::Zcrx && refused.is_some() {
                continue;
            }
            let before = copies.so_far();
            let ended = streams_of(args.parallel, || run_one(args, &path, (leg, size)))?;
            let run = copies.since(before);
            match copied.iter_mut().find(|(key, _)| *key == (size, leg)) {
                Some((_, sum)) => *sum = sum.clone().and_then(|s| Ok(s + run?)),
                None => copied.push(((size, leg), run)),
            }
            for (&stream, ended) in streams.iter().zip(ended) {
                let Some((_, total)) = totals
                    .iter_mut()
                    .find(|(key, _)| *key == (size, leg, stream))
                else {
                    continue;
                };
                match ended {
                    Ok((measured, sent)) => total.add(measured, sent),
                    Err(e) => total.failed = Some(format!("{e:#}")),
                }
            }
            if live::interrupted() {
                whole = false;
                break 'sweep;
            }
        }
    }
    if !whole {
        // A mode and size that did not get every round it was to have is part of a measurement.
        for (_, total) in &mut totals {
            total.interrupted |= total.connections < args.rounds;
        }
    }
    let rows: Vec<Row> = totals
        .iter()
        .filter_map(|&((size, leg, stream), ref t)| match &refused {
            Some(why) if leg.1 == ApiArg::Zcrx => {
                (stream <= 1).then(|| refused_row(args, &path, (leg, size), why))
            }
            _ => (t.connections > 0 || t.failed.is_some()).then(|| {
                let mut row = row(args, &path, (leg, size), t);
                let bytes = totals
                    .iter()
                    .filter(|((s, l, _), _)| (*s, *l) == (size, leg))
                    .map(|(_, t)| t.bytes)
                    .sum();
                let run = copied.iter().find(|(key, _)| *key == (size, leg));
                let run = run.map_or(Ok(0), |(_, c)| c.clone());
                copies::put(&mut row, &run, bytes);
                if stream > 0 {
                    row.insert("stream".into(), json!(stream));
                }
                if let Some(why) = &t.failed {
                    row.insert("failed".into(), json!(why));
                }
                row
            }),
        })
        .collect();
    let failed = totals.iter().find_map(|((_, leg, stream), t)| {
        let why = t.failed.as_ref()?;
        Some(format!(
            "stream {stream} of the {} run: {why}",
            mode_name(leg.0)
        ))
    });
    let mut columns = if apis_shown(args) {
        api_columns(RUN_COLUMNS)
    } else {
        RUN_COLUMNS.to_vec()
    };
    if args.parallel > 1 {
        columns.insert(1, ("stream", "stream"));
    }
    Ok(Some(RxEnded::Runs(RxRuns {
        rows,
        columns,
        path: path.name(),
        whole,
        refused,
        failed,
    })))
}
