//! Run: `zcnet bench vsock`: AF_VSOCK with and without MSG_ZEROCOPY, in the style of the kernel's vsock_perf.
//!
//! By default sender and receiver run in this process over the vsock loopback transport
//! (`VMADDR_CID_LOCAL`); like vsock_perf, the two sides can also run apart: `--listen` is the receiver
//! (any context id, `--port`), `--sender CID` the sender (a guest reaches its host at CID 2). The
//! receiver grants `--vsk-size` bytes of credit (SO_VM_SOCKETS_BUFFER_SIZE, set at both ends) and reads
//! until the sender closes; the sender sends `--bytes` in `--buf-size` pieces from pooled buffers, on a
//! fresh connection per mode, buffer size and `--api` (MSG_ZEROCOPY `sendmsg`, or io_uring `SEND_ZC`
//! from the pool registered with the ring). As vsock_perf does, the headline rate is computed from the
//! time spent inside `send()` only (zero-copy returns as soon as the pages are pinned; on io_uring a
//! send only queues, so its rows have none); the total rate
//! also counts waiting for the receiver and for the last completions. The loopback run needs a vsock
//! loopback transport (the `vsock_loopback` module): where there is none it fails before connecting.
//! With `-P N` each run is N streams side by side ([`streams`]), each on its own connection (in the
//! loopback run to its own listener and receiving thread).

use std::os::fd::AsFd;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use zcnet::probe::{ResourceUsage, UsageOf, resource_usage};
use zcnet::tx::vsock::{
    self, VMADDR_CID_ANY, VMADDR_CID_LOCAL, VMADDR_PORT_ANY, VsockSocket, VsockType,
    set_buffer_size,
};
use zcnet::tx::{BufferPool, Mode, PoolConfig, SenderConfig, TxStats};

use crate::bench::args::api::Api;
use crate::bench::args::vsock::{Type, VsockApi, VsockArgs};
use crate::bench::plan;
use crate::bench::run::copies::KernelCopies;
use crate::bench::run::sender;
use crate::bench::run::streams;
use crate::flags::UsageError;
use crate::report::{Column, Row, cpu_us_per_mb, gbit_per_s, object, print_rows};

/// Buffers in the send pool: enough to keep the sender busy while completions are on their way.
const POOL_BUFFERS: usize = 16;
/// Longest wait for a buffer to come back, for the receiver, or for the last completions.
const WAIT: Duration = Duration::from_secs(30);

/// Columns of the receiver's table (`--listen`).
const RX_COLUMNS: &[Column] = &[
    ("type", "TYPE"),
    ("bytes", "BYTES"),
    ("seconds", "SECONDS"),
    ("gbit_per_s", "RX GBIT/S"),
    ("cpu_us_per_mb", "CPU US/MB"),
];

/// What the runs of a `bench vsock` sender hand to its report.
pub(crate) struct VsockRuns {
    /// A row per size, mode and API (with `-P N`, a row per stream of each, numbered).
    pub(crate) rows: Vec<Row>,
    /// Every run of the plan ran.
    pub(crate) whole: bool,
}

/// Runs `zcnet bench vsock`; a `--listen` receiver returns `None` when done, having printed its rows.
pub(crate) fn run(args: &VsockArgs) -> Result<Option<VsockRuns>> {
    let ty = match args.socket_type {
        Type::Stream => VsockType::Stream,
        Type::Seqpacket => VsockType::Seqpacket,
    };
    check_peer(args)?;
    check_apis(&args.api, ty)?;
    streams::check(args.parallel)?;
    if args.listen {
        return listen(args, ty).map(|()| None);
    }
    let sizes = if args.sizes.is_empty() {
        args.buf_size
            .iter()
            .map(|&b| usize::try_from(b).context("--buf-size does not fit in memory"))
            .collect::<Result<Vec<usize>>>()?
    } else {
        plan::check_plot(args.plot.as_deref())?;
        plan::sizes(&args.sizes, (0, "--buf-size"), |_, _| Ok(()))?
    };
    if args.sender.is_none() {
        vsock::loopback_available().map_err(|reason| {
            anyhow::anyhow!(
                "no vsock transport to benchmark: {reason}. The loopback run needs a vsock loopback \
                 transport (modprobe vsock_loopback, as vm/run-suite's guest does); between two \
                 context ids, run --listen on one side and --sender CID on the other"
            )
        })?;
    }
    let emulated = super::emulated_cpu();
    if emulated && !args.json {
        crate::report::emit(
            "note: the CPU is emulated (QEMU TCG): timings are for correctness only\n",
        );
    }
    // Ctrl-C stops the sending loop, which then flushes, closes and reports (the receiver of the
    // loopback run sees the end of the stream). `--listen` keeps the default action: it holds nothing
    // that needs cleaning up and may be blocked in accept.
    crate::live::watch_interrupts()?;
    let path = match args.sender {
        Some(cid) => format!("cid:{cid}"),
        None => "loopback".to_string(),
    };
    let mut rows = Vec::new();
    let mut whole = true;
    let copies = KernelCopies::after_sends();
    // The order of the modes alternates from one size to the next (see plan::schedule).
    'sweep: for (_, size, modes) in plan::schedule(1, &sizes, &args.mode) {
        for mode in modes {
            for api in args.api.iter().map(|&api| Api::from(api)) {
                let fields = streams::fields("vsock", &path, (mode, api), size);
                let before = copies.so_far();
                let mut ran = streams::side_by_side(args.parallel, &fields, || {
                    run_one(ty, (mode, api), size, args).with_context(|| {
                        format!("vsock {} {} {size}-byte sends", api.name(), mode.name())
                    })
                })?;
                copies.record(before, &mut ran);
                for mut row in ran {
                    row.insert("emulated_cpu".into(), Value::Bool(emulated));
                    rows.push(row);
                }
                if crate::live::interrupted() {
                    whole = false;
                    break 'sweep;
                }
            }
        }
    }
    Ok(Some(VsockRuns { rows, whole }))
}

/// Refuses a `--sender` address that names no peer: the wildcards VMADDR_CID_ANY and
/// VMADDR_PORT_ANY (u32::MAX both) mean "any" to bind, not an address to connect to.
fn check_peer(args: &VsockArgs) -> Result<()> {
    if args.sender == Some(VMADDR_CID_ANY) {
        return Err(UsageError(format!(
            "--sender {VMADDR_CID_ANY} is VMADDR_CID_ANY, no context id to connect to (2 is the \
             host, from a guest)"
        ))
        .into());
    }
    if args.sender.is_some() && args.port == VMADDR_PORT_ANY {
        return Err(UsageError(format!(
            "--port {VMADDR_PORT_ANY} with --sender is VMADDR_PORT_ANY, no port to connect to"
        ))
        .into());
    }
    Ok(())
}

/// Refuses io_uring on seqpacket (see `--api`) before anything connects.
fn check_apis(apis: &[VsockApi], ty: VsockType) -> Result<()> {
    if ty == VsockType::Seqpacket && apis.contains(&VsockApi::IoUring) {
        return Err(UsageError(
            "--api io_uring with --type seqpacket: a seqpacket message is sent whole by one call \
             that waits for credit, and io_uring tries each send without waiting first (use --api \
             sendmsg)"
                .into(),
        )
        .into());
    }
    Ok(())
}

/// `--listen`: serves `--connections` connections one after the other, a row each.
fn listen(args: &VsockArgs, ty: VsockType) -> Result<()> {
    let listener = VsockSocket::listen(ty, VMADDR_CID_ANY, args.port)
        .with_context(|| format!("listen on vsock port {}", args.port))?;
    set_buffer_size(listener.as_fd(), args.vsk_size).context("SO_VM_SOCKETS_BUFFER_SIZE")?;
    // On standard error, so that scripts can wait for it while the rows stay clean JSON. The port
    // bound: the kernel's choice for VMADDR_PORT_ANY.
    eprintln!(
        "zcnet: listening on vsock port {} for {} connection(s)",
        listener.local_port()?,
        args.connections
    );
    for _ in 0..args.connections {
        let conn = listener.accept().context("accept on the vsock receiver")?;
        let before = resource_usage(UsageOf::Thread)?;
        let start = Instant::now();
        let bytes = receive_all(&conn, None)?.bytes;
        let seconds = start.elapsed().as_secs_f64();
        let usage = resource_usage(UsageOf::Thread)?.since(&before);
        let row = object(json!({
            "bench": "vsock",
            "path": "listen",
            "type": type_name(ty),
            "vsk_size": args.vsk_size,
            "bytes": bytes,
            "seconds": seconds,
            "gbit_per_s": gbit_per_s(bytes, seconds),
            "cpu_user_s": usage.user.as_secs_f64(),
            "cpu_sys_s": usage.system.as_secs_f64(),
            "cpu_us_per_mb": cpu_us_per_mb(&usage, bytes),
            "emulated_cpu": super::emulated_cpu(),
        }));
        print_rows(&[row], RX_COLUMNS, args.json);
    }
    Ok(())
}

/// What a receiver read until the sender closed.
struct Received {
    bytes: u64,
    /// Reads (on seqpacket, messages).
    reads: u64,
    /// Messages whose length was not the expected one (cut, or merged with another).
    misfits: u64,
}

/// Reads until the sender closes. With `message` (seqpacket), counts the messages of another
/// length; the read buffer holds more than one, so a merged message shows its length.
fn receive_all(conn: &VsockSocket, message: Option<usize>) -> Result<Received> {
    let mut buf = vec![0u8; (1 << 20).max(2 * message.unwrap_or(0))];
    let mut got = Received {
        bytes: 0,
        reads: 0,
        misfits: 0,
    };
    loop {
        match conn.recv(&mut buf).context("recv on the vsock receiver")? {
            0 => return Ok(got),
            n => {
                got.bytes += n as u64;
                got.reads += 1;
                got.misfits += u64::from(message.is_some_and(|m| m != n));
            }
        }
    }
}

fn type_name(ty: VsockType) -> &'static str {
    match ty {
        VsockType::Stream => "stream",
        VsockType::Seqpacket => "seqpacket",
    }
}

/// What one sender run measured.
struct Sent {
    stats: TxStats,
    /// io_uring: whether the pool was registered, or why not (null for sendmsg).
    registered: Value,
    bytes: u64,
    in_send: Duration,
    seconds: f64,
    usage: ResourceUsage,
    interrupted: bool,
}

/// Sends `sends` buffers of `size` bytes on `socket` in `mode` with `api`, waits for every
/// completion and closes the connection (the receiver sees the end of the stream).
fn send_run(
    socket: VsockSocket,
    (mode, api): (Mode, Api),
    size: usize,
    sends: u64,
    ticker: &mut crate::live::Ticker,
) -> Result<Sent> {
    let pool = BufferPool::new(PoolConfig::new(size, POOL_BUFFERS))
        .context("mapping the send buffer pool")?;
    let mut tx = sender::sender(api, socket, SenderConfig::with_mode(mode), &pool)?;
    let registered = sender::registered(&tx);
    let before = resource_usage(UsageOf::Thread)?;
    let start = Instant::now();
    let mut in_send = Duration::ZERO;
    let mut done = 0u64;
    while done < sends && !crate::live::interrupted() {
        let deadline = Instant::now() + WAIT;
        let mut buf = loop {
            if let Some(b) = pool.take() {
                break b;
            }
            if Instant::now() > deadline {
                bail!("no send buffer came back within {WAIT:?} (completions missing)");
            }
            tx.wait_completions(Duration::from_millis(100))?;
        };
        buf.fill_with(size, |b| b.fill(0x5a));
        let t = Instant::now();
        tx.send(buf)?;
        in_send += t.elapsed();
        done += 1;
        ticker.tick(tx.stats().bytes);
    }
    tx.flush(WAIT)?;
    let usage = resource_usage(UsageOf::Thread)?.since(&before);
    let stats = tx.stats().clone();
    drop(tx.close(WAIT)?);
    Ok(Sent {
        stats,
        registered,
        bytes: done * size as u64,
        in_send,
        seconds: start.elapsed().as_secs_f64(),
        usage,
        interrupted: done < sends,
    })
}

/// One mode, API and buffer size: `--bytes` (rounded up to whole buffers) from a fresh sender, to the
/// receiver in this process over loopback, or to `--sender CID`.
fn run_one(ty: VsockType, (mode, api): (Mode, Api), size: usize, args: &VsockArgs) -> Result<Row> {
    let sends = args.bytes.div_ceil(size as u64);
    let mut ticker = crate::live::Ticker::new(
        args.interval,
        json!({"bench": "vsock", "api": api.name(), "mode": mode.name(), "buf_size": size}),
        args.json,
    );
    let (sent, path) = match args.sender {
        Some(cid) => {
            let socket = VsockSocket::connect(ty, cid, args.port).with_context(|| {
                format!(
                    "connect to vsock {cid}:{} (is --listen running?)",
                    args.port
                )
            })?;
            set_buffer_size(socket.as_fd(), args.vsk_size).context("SO_VM_SOCKETS_BUFFER_SIZE")?;
            (
                send_run(socket, (mode, api), size, sends, &mut ticker)?,
                format!("cid:{cid}"),
            )
        }
        None => {
            let listener = VsockSocket::listen(ty, VMADDR_CID_LOCAL, VMADDR_PORT_ANY)
                .context("listen on VMADDR_CID_LOCAL")?;
            set_buffer_size(listener.as_fd(), args.vsk_size)
                .context("SO_VM_SOCKETS_BUFFER_SIZE (receiver)")?;
            let port = listener.local_port()?;
            let message = (ty == VsockType::Seqpacket).then_some(size);
            let receiving = thread::spawn(move || -> Result<Received> {
                let conn = listener.accept().context("accept on the vsock receiver")?;
                receive_all(&conn, message)
            });
            let socket = VsockSocket::connect(ty, VMADDR_CID_LOCAL, port)
                .context("connect to the receiver")?;
            set_buffer_size(socket.as_fd(), args.vsk_size)
                .context("SO_VM_SOCKETS_BUFFER_SIZE (sender)")?;
            let sent = send_run(socket, (mode, api), size, sends, &mut ticker)?;
            let received = receiving
                .join()
                .map_err(|_| anyhow::anyhow!("vsock receiver panicked"))??;
            if received.bytes != sent.bytes {
                bail!("sent {} bytes but {} arrived", sent.bytes, received.bytes);
            }
            if received.misfits > 0 {
                bail!(
                    "{} of {} seqpacket messages arrived with a length other than {size} bytes \
                     (cut, or merged with another)",
                    received.misfits,
                    received.reads
                );
            }
            (sent, "loopback".to_string())
        }
    };
    let s = &sent.stats;
    Ok(object(json!({
        "bench": "vsock",
        "path": path,
        "type": type_name(ty),
        "api": api.name(),
        "mode": mode.name(),
        "buf_size": size,
        "size": size,
        "vsk_size": args.vsk_size,
        "bytes": sent.bytes,
        "seconds": sent.seconds,
        "send_seconds": sent.in_send.as_secs_f64(),
        // On io_uring a send queues (the kernel sends from the ring later): no rate in send.
        "tx_gbit_per_s": (api == Api::Sendmsg)
            .then(|| gbit_per_s(sent.bytes, sent.in_send.as_secs_f64())),
        "gbit_per_s": gbit_per_s(sent.bytes, sent.seconds),
        "calls": s.calls,
        "zc_calls": s.zc_calls,
        "copy_calls": s.copy_calls,
        "notifications": s.notifications,
        "zc_ids": s.zc_ids,
        "copied_ids": s.copied_ids,
        "fallbacks": s.fallbacks(),
        "registered": sent.registered,
        "cpu_user_s": sent.usage.user.as_secs_f64(),
        "cpu_sys_s": sent.usage.system.as_secs_f64(),
        "cpu_us_per_mb": cpu_us_per_mb(&sent.usage, sent.bytes),
        "interrupted": sent.interrupted,
    })))
}
