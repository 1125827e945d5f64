//! Run: `zcnet bench udp` — UDP datagrams per mode (and `--api`: sendmsg, io_uring, sendmmsg,
//! af_xdp), into a receiver of its own or a veth whose far end drops every frame in XDP (`--sink
//! xdp-drop`), or apart with `--listen` and `--connect`; the pooled sender is
//! [`crate::bench::run::send`]'s.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use benchnet::VethConfig;
use serde_json::{Value, json};
use zcnet::tx::Mode;
use zcnet::xdp::headers::{IPV4_HLEN, IPV6_HLEN, UDP_HLEN};

use crate::bench::args::api::Api;
use crate::bench::args::udp::{Sink, UdpArgs};
use crate::bench::args::{Common, check_listener_api, check_pool_bytes, connect_addr, listen_addr};
use crate::bench::plan;
use crate::bench::run::af_xdp::{self, XdpSend};
use crate::bench::run::listen;
use crate::bench::run::listen_udp::{self, DatagramReport};
use crate::bench::run::mmsg::{self, MmsgSend};
use crate::bench::run::net::Net;
use crate::bench::run::peer::Peer;
use crate::bench::run::role::receiver_role;
use crate::bench::run::rounds::{Rounds, run_rounds};
use crate::bench::run::send::{
    COMPLETION_WAIT, Stamp, cut_short, cut_short_by, header, measure, new_pool, receiver_ticker,
    sender_config, ticker,
};
use crate::bench::run::sender;
use crate::bench::run::streams;
use crate::bench::run::wire::{self, Bench};
use crate::flags::{self, UsageError};
use crate::live;
use crate::report::{self, Column, Row, print_rows};

/// Largest UDP payload (IPv4: 65535 less the IP and UDP headers).
const MAX_UDP_PAYLOAD: u64 = 65_507;

/// Segments one UDP GSO send may carry (UDP_MAX_SEGMENTS of the kernel).
const MAX_GSO_SEGMENTS: u64 = 64;

/// The text columns of a `bench udp --listen` run row.
const UDP_RECEIVER_COLUMNS: &[Column] = &[
    ("bench", "bench"),
    ("peer", "peer"),
    ("stream", "stream"),
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

/// Runs `zcnet bench udp`; a `--listen` receiver returns `None` when it stops (it has reported each
/// run as it ended).
pub(crate) fn run(args: &UdpArgs) -> Result<Option<Rounds>> {
    let common = &args.common;
    check_af_xdp(args)?;
    check_sendmmsg(args)?;
    check_listener_api(
        common,
        "the receiver reads with a UDP socket, or with --api af_xdp --iface IF",
    )?;
    if let Some(addr) = receiver_role(common)? {
        return listen_udp(addr, common, args.iface.as_deref()).map(|()| None);
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
    plan::check_plot(common.plot.as_deref())?;
    let sizes = plan::sizes(&common.sizes, (single, "--size"), |flag, size| {
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
        check_pool_bytes(flag, size, common)?;
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
    streams::check(common.parallel)?;
    let n = common.parallel;
    if let Some(spec) = &common.connect {
        live::watch_interrupts()?;
        let dest = connect_addr(spec, common.ipv6)?;
        return Ok(Some(run_rounds((common, &sizes), |size, mode, api| {
            let bind: SocketAddr = match dest {
                SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
                SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
            };
            let fields = streams::fields("udp", "remote", (mode, api), size);
            streams::side_by_side(n, &fields, || {
                let socket = UdpSocket::bind(bind).context("binding the UDP sender")?;
                send_udp(socket, dest, "remote", (mode, api), size, unit(size), args)
            })
        })));
    }
    if n > 1 && common.apis().contains(&Api::AfXdp) {
        return Err(UsageError(
            "-P with --api af_xdp: the AF_XDP endpoint is the one socket of the veth's queue"
                .into(),
        )
        .into());
    }
    let net = Net::new(common, args.sink == Sink::XdpDrop)?;
    live::watch_interrupts()?;
    let shortfalls = Mutex::new(Vec::new());
    let mut rounds = run_rounds((common, &sizes), |size, mode, api| {
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
            return af_xdp::send(veth, &run, ticker(common, "udp", mode)).map(|row| vec![row]);
        }
        let fields = streams::fields("udp", net.path(), (mode, api), size);
        streams::side_by_side(n, &fields, || {
            let (row, shortfall) = one_process_stream(&net, (mode, api), (size, unit), args)?;
            if let Some(shortfall) = shortfall {
                shortfalls
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(shortfall);
            }
            Ok(row)
        })
    });
    let shortfalls = shortfalls.into_inner().unwrap_or_else(|e| e.into_inner());
    if !shortfalls.is_empty() && rounds.error.is_none() && rounds.failed.is_none() {
        rounds.failed = Some(format!(
            "udp runs asked to verify did not arrive whole: {}",
            shortfalls.join("; ")
        ));
    }
    Ok(Some(rounds))
}

/// One stream of the one-process mode: datagrams to a receiver process of its own over `net` (none
/// into `--sink xdp-drop`), its report merged into the sender's row; with what the receiver missed
/// when the run did not arrive whole.
fn one_process_stream(
    net: &Net,
    (mode, api): (Mode, Api),
    (size, unit): (usize, usize),
    args: &UdpArgs,
) -> Result<(Row, Option<String>)> {
    let common = &args.common;
    let peer = match args.sink {
        Sink::Socket => Some(Peer::spawn(net, "udp", &[], common)?),
        Sink::XdpDrop => None,
    };
    let dest = peer
        .as_ref()
        .map_or(SocketAddr::new(net.dst, 9), |p| p.addr);
    let sent = net
        .in_sender(|| UdpSocket::bind(SocketAddr::new(net.src, 0)))
        .context("binding the UDP sender")
        .and_then(|socket| send_udp(socket, dest, net.path(), (mode, api), size, unit, args));
    let mut shortfall = None;
    let mut row = match peer {
        Some(peer) if sent.as_ref().is_ok_and(|row| cut_short_by(row).is_some()) => {
            // The receiver went away: it has nothing whole to report.
            peer.abandon();
            sent?
        }
        Some(peer) => {
            let (row, received) = peer.merge_into(sent, "udp", mode)?;
            if let Some(received) = received
                && received.get("complete").and_then(Value::as_bool) == Some(false)
            {
                let lost = received.get("lost").and_then(Value::as_u64).unwrap_or(0);
                let sent = received.get("sent_datagrams").and_then(Value::as_u64);
                shortfall = Some(match sent {
                    Some(sent) => format!("{}: {lost} of {sent} datagrams lost", mode.name()),
                    None => format!("{}: the end datagram never arrived", mode.name()),
                });
            }
            row
        }
        None => sent?,
    };
    row.insert("gso".into(), json!(args.gso));
    Ok((row, shortfall))
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
    let why = if let Some(spec) = &common.listen {
        if args.iface.is_none() {
            "--listen and no --iface: the endpoint serves the queues of one interface"
        } else if listen_addr(spec, common.ipv6)?.port() == 0 {
            "--listen on port 0: the endpoint takes the datagrams of one port, which the sender \
             must know (give one, as in --listen 192.0.2.1:5201)"
        } else {
            return Ok(());
        }
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

/// Sends one UDP run in `mode`: header datagrams (unless `--raw`, or into `--sink xdp-drop`) until
/// the receiver answers, the pattern for `--duration`, then end datagrams with the totals. Fails at once when the receiver
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
    // A drop sink answers no header and reads no end datagram: the run goes without them.
    let control = !common.apart.raw && args.sink != Sink::XdpDrop;
    if control {
        let mut h = header(Bench::Udp, mode, unit, common);
        // Apart, the receiver takes the run's streams together (each in a process of its own
        // here).
        if common.connect.is_some() {
            h.streams = u8::try_from(common.parallel).unwrap_or(wire::MAX_STREAMS);
        }
        let h = h.encode();
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
        let row = mmsg::send(&socket, path, &run, ticker(common, "udp", mode))?;
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
        json!(af_xdp::ns_per_packet(cpu, datagrams)),
    );
    if let (true, Some(socket)) = (control, socket) {
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
    let pool = new_pool(size, unit, api, common)?;
    let config = sender_config(mode, common, Some(COMPLETION_WAIT));
    let mut tx = sender::sender(api, socket, config, &pool)?;
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
        Some(iface) => UdpListener::Endpoint(Box::new(af_xdp::bind_receiver(iface, addr)?)),
        None => {
            let socket = UdpSocket::bind(addr).with_context(|| format!("binding {addr}"))?;
            listen_udp::prepare(&socket)?;
            UdpListener::Socket(socket)
        }
    };
    let local = match &listener {
        UdpListener::Socket(socket) => socket.local_addr()?,
        UdpListener::Endpoint(endpoint) => endpoint.local_addr(),
    };
    listen::announce(local, common.json);
    let mut shortfalls = Vec::new();
    let print = |report: &DatagramReport, fields: Row| {
        let mut row = listen_udp::datagram_row(local, report);
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
        let report = &mut |report: &DatagramReport, fields: Row| {
            print(report, fields);
            if let Some(why) = report.shortfall() {
                let from = report.peer.map_or("?".into(), |p| p.to_string());
                shortfalls.push(format!("the run from {from}: {why}"));
            }
        };
        let interrupted = match &mut listener {
            UdpListener::Socket(socket) => listen_udp::receive_datagrams(socket, ticker, report)?,
            UdpListener::Endpoint(endpoint) => {
                listen_udp::receive_endpoint_datagrams(endpoint, ticker, report)?
            }
        };
        // After the streams it has just reported: with `--once`, or when Ctrl-C interrupted them.
        if common.apart.once || interrupted {
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
