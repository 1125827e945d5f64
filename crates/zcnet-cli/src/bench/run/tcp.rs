//! Run: `zcnet bench tcp` — a TCP stream per mode (and `--api`), from this process to a receiver of
//! its own (the process of [`crate::bench::run::peer`], over the network of
//! [`crate::bench::run::net`]), or apart with `--listen` and `--connect`; the sender is
//! [`crate::bench::run::send`]'s.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use zcnet::rx::{RxConfig, RxMode};
use zcnet::tx::Mode;

use crate::bench::args::apart::{ServeFlags, TcpTimeouts};
use crate::bench::args::api::Api;
use crate::bench::args::tcp::TcpArgs;
use crate::bench::args::{Common, check_listener_api, check_pool_bytes, connect_addr};
use crate::bench::plan;
use crate::bench::run::listen;
use crate::bench::run::net::Net;
use crate::bench::run::peer::Peer;
use crate::bench::run::role::receiver_role;
use crate::bench::run::rounds::{Rounds, run_rounds};
use crate::bench::run::send::{
    COMPLETION_WAIT, cut_short, cut_short_by, header, is_interrupted, measure, new_pool,
    receiver_ticker, sender_config,
};
use crate::bench::run::sender;
use crate::bench::run::serve::{self, Rows, Serving, StreamSetup};
use crate::bench::run::streams;
use crate::bench::run::watch::{SendWatch, Stop};
use crate::bench::run::wire::{self, Bench, Finish};
use crate::flags::UsageError;
use crate::live;
use crate::report::{Column, Row, gbit_per_s, object};

/// Runs `zcnet bench tcp`. Ctrl-C is watched from the moment the last resource is set up: the veth
/// harness installs a handler of its own (which removes its namespaces and ends the process), and
/// the one installed last wins, so a Ctrl-C after set-up stops the run, prints its summary and drops
/// the harness the ordinary way. A `--listen` receiver returns `None` when it stops: it has reported
/// each stream as it ended.
pub(crate) fn run(args: &TcpArgs) -> Result<Option<Rounds>> {
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
        return listen_tcp(addr, common, &args.serve).map(|()| None);
    }
    let single = (common.size.unwrap_or(64 << 10), "--size");
    plan::check_plot(common.plot.as_deref())?;
    let sizes = plan::sizes(&common.sizes, single, |flag, size| {
        check_pool_bytes(flag, size, common)
    })?;
    streams::check(common.parallel)?;
    let timeouts = &args.timeouts;
    let n = common.parallel;
    if let Some(spec) = &common.connect {
        live::watch_interrupts()?;
        let addr = connect_addr(spec, common.ipv6)?;
        return Ok(Some(run_rounds((common, &sizes), |size, mode, api| {
            let fields = streams::fields("tcp", "remote", (mode, api), size);
            streams::side_by_side(n, &fields, || {
                let stream = timeouts.connect(addr)?;
                send_tcp(stream, "remote", (mode, api), size, (common, timeouts))
            })
        })));
    }
    let net = Net::new(common, false)?;
    live::watch_interrupts()?;
    Ok(Some(run_rounds((common, &sizes), |size, mode, api| {
        let fields = streams::fields("tcp", net.path(), (mode, api), size);
        streams::side_by_side(n, &fields, || {
            one_process_stream(&net, (mode, api), size, (common, timeouts))
        })
    })))
}

/// One stream of the one-process mode: a receiver process of its own over `net`, the stream sent
/// to it, and its report merged into the sender's row; fails when the receiver found the stream cut
/// short or other bytes than were sent.
fn one_process_stream(
    net: &Net,
    (mode, api): (Mode, Api),
    size: usize,
    (common, timeouts): (&Common, &TcpTimeouts),
) -> Result<Row> {
    let peer = Peer::spawn(net, "tcp", &[], common)?;
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
        && (cut_short_by(row).is_some() || row.contains_key("slow_peer"))
    {
        // The watch reset the connection, or the receiver went away: it has nothing whole to
        // report.
        peer.abandon();
        return sent;
    }
    let (row, received) = match peer.merge_into(sent, "tcp", mode)? {
        (row, Some(received)) => (row, received),
        // Marked failed: the receiver gave no report.
        (row, None) => return Ok(row),
    };
    let sent = row["bytes"].as_u64().unwrap_or(0);
    let got = received.get("bytes").and_then(Value::as_u64).unwrap_or(0);
    // A stream Ctrl-C stopped is not whole, and not judged (its end mark says so).
    if received.get("complete").and_then(Value::as_bool) == Some(false) && !is_interrupted(&row) {
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
    let mut header_bytes = 0;
    if !common.apart.raw {
        let encoded = header(Bench::Tcp, mode, size, common).encode();
        stream
            .write_all(&encoded)
            .context("sending the stream header")?;
        header_bytes = encoded.len() as u64;
    }
    let pool = new_pool(size, size, api, common)?;
    let mut tx = sender::sender(api, stream, sender_config(mode, common, None), &pool)?;
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
    if let Some(Stop::Slow { acked }) = watch.stop() {
        mark_slow(&mut row, acked, header_bytes);
        return Ok(row);
    }
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
                Some(Stop::Slow { acked }) => {
                    mark_slow(&mut row, acked, header_bytes);
                    return Ok(row);
                }
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

/// Marks `row` as a run that reached its end with bytes its peer had not taken, whereupon the watch
/// ended the connection: of the bytes handed to the kernel, those the peer acknowledged (`acked`,
/// the `header` bytes before them not counted) are delivered, the rest in flight; the rate is of
/// the delivered bytes.
fn mark_slow(row: &mut Row, acked: u64, header: u64) {
    let handed = row["bytes"].as_u64().unwrap_or(0);
    let delivered = acked.saturating_sub(header).min(handed);
    let in_flight = handed - delivered;
    let seconds = row["seconds"].as_f64().unwrap_or(0.0);
    row.insert("delivered_bytes".into(), json!(delivered));
    row.insert("in_flight_bytes".into(), json!(in_flight));
    row.insert("gbit_per_s".into(), json!(gbit_per_s(delivered, seconds)));
    row.insert(
        "slow_peer".into(),
        json!(format!(
            "the peer was slow: it had taken {delivered} of the {handed} bytes sent when the run \
             ended; the {in_flight} bytes in flight were dropped with the connection (it reads \
             slower than this sends)"
        )),
    );
}

/// `bench tcp --listen`: streams side by side ([`serve::serve`]), a row for each. Fails at its
/// end when a stream whose sender asked for verification did not arrive whole or had wrong bytes (the
/// one-process mode's receiver leaves that judgement to the bench that started it, which reads its
/// row).
fn listen_tcp(addr: SocketAddr, common: &Common, serve: &ServeFlags) -> Result<()> {
    serve.check()?;
    let listener = TcpListener::bind(addr).with_context(|| format!("listening on {addr}"))?;
    listen::announce(listener.local_addr()?, common.json);
    let mut config = RxConfig::default();
    config.mode = RxMode::Copy;
    config.copy_buffer = TCP_READ;
    config.low_water = Some(TCP_READ);
    let how = Serving {
        rows: Rows {
            bench: "tcp",
            columns: TCP_RECEIVER_COLUMNS,
            json: common.json,
        },
        once: common.apart.once,
        flags: serve,
        judge: !common.exit_with_parent,
        // Its receives copy by design (recv), and its rows are merged into the sender's.
        count_copies: None,
    };
    serve::serve(&listener, &how, |peer| StreamSetup {
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
