//! `zcnet iperf3`: a peer for stock iperf3, as its server (`-s`, for `iperf3 -c`) or its client
//! (`-c`, of `iperf3 -s`), speaking iperf3's control protocol ([`proto`]) while zcnet's side sends
//! with zcnet's senders and receives with zcnet's receivers ([`streams`]), and reporting in iperf3's
//! own shape with zcnet's counts added ([`run`]).

mod client;
pub mod proto;
mod run;
mod server;
mod streams;

use std::io;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::time::Duration;

use anyhow::Result;
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::net::sockopt;
use zcnet::rx::RxMode;
use zcnet::tx::Mode;

use crate::bench::args::api::Api;
use crate::flags::{self, UsageError};
use proto::Params;
use streams::{Spec, Zc};

/// Options of `zcnet iperf3`, named as iperf3 names them, and zcnet's own.
#[derive(Debug, clap::Args)]
pub struct Iperf3Args {
    /// Run as a server, for stock `iperf3 -c` clients.
    #[arg(short = 's', long, conflicts_with = "client")]
    server: bool,
    /// Run as a client of a stock `iperf3 -s` on HOST.
    #[arg(
        short = 'c',
        long,
        value_name = "HOST",
        required_unless_present = "server"
    )]
    client: Option<String>,
    /// The server's port.
    #[arg(short = 'p', long, default_value_t = 5201)]
    port: u16,
    /// Server: serve one test, then exit.
    #[arg(short = '1', long = "one-off", requires = "server")]
    one_off: bool,
    /// UDP rather than TCP.
    #[arg(short = 'u', long, conflicts_with = "server")]
    udp: bool,
    /// Bits per second per stream, K/M/G in powers of 1000 (UDP default 1048576, as iperf3; TCP:
    /// unlimited).
    #[arg(short = 'b', long, value_parser = bitrate, conflicts_with = "server")]
    bitrate: Option<u64>,
    /// Bytes per send or datagram (TCP default 128K; UDP default: the control connection's MSS).
    #[arg(short = 'l', long, value_parser = flags::size, conflicts_with = "server")]
    length: Option<usize>,
    /// The server sends, the client receives.
    #[arg(short = 'R', long, conflicts_with_all = ["server", "bidir"])]
    reverse: bool,
    /// Both send.
    #[arg(long, conflicts_with = "server")]
    bidir: bool,
    /// Parallel streams (each way with --bidir), at most 128.
    #[arg(short = 'P', long, default_value_t = 1, value_parser = flags::count, conflicts_with = "server")]
    parallel: u32,
    /// Seconds to send.
    #[arg(short = 't', long, default_value_t = 10, conflicts_with_all = ["server", "bytes", "blockcount"])]
    time: u32,
    /// Bytes to send in all instead of -t (K/M/G suffixes).
    #[arg(short = 'n', long, value_parser = flags::count64, conflicts_with_all = ["server", "blockcount"])]
    bytes: Option<u64>,
    /// Blocks (sends or datagrams) to send in all instead of -t.
    #[arg(short = 'k', long, value_parser = flags::count64, conflicts_with = "server")]
    blockcount: Option<u64>,
    /// Socket buffer size (SO_SNDBUF and SO_RCVBUF) of each stream.
    #[arg(short = 'w', long, value_parser = flags::size, conflicts_with = "server")]
    window: Option<usize>,
    /// TCP maximum segment size.
    #[arg(short = 'M', long = "set-mss", value_parser = flags::count, conflicts_with = "server")]
    mss: Option<u32>,
    /// Seconds at the start not counted.
    #[arg(short = 'O', long, default_value_t = 0, conflicts_with = "server")]
    omit: u32,
    /// Seconds between interval reports (0: none).
    #[arg(short = 'i', long, default_value_t = 1.0, value_parser = flags::interval)]
    interval: f64,
    /// The report as iperf3's JSON (start, intervals, end), with zcnet's counts under end.zcnet.
    #[arg(short = 'J', long)]
    json: bool,
    /// zcnet's sends: zerocopy (MSG_ZEROCOPY), copy, or auto.
    #[arg(long, default_value = "zerocopy")]
    mode: Mode,
    /// zcnet's send API: sendmsg or io_uring.
    #[arg(long, value_enum, default_value = "sendmsg")]
    api: Api,
    /// zcnet's TCP receives: copy, zerocopy (TCP_ZEROCOPY_RECEIVE, mapped), or auto.
    #[arg(long, default_value = "auto", value_parser = rx_mode)]
    rx: RxMode,
}

/// iperf3's most streams.
const MAX_STREAMS: u32 = 128;
/// iperf3's largest TCP block.
const MAX_BLOCK: usize = 1 << 20;
/// The shortest datagram: iperf3's header with 64-bit counters.
const MIN_DATAGRAM: usize = 16;
/// The largest UDP payload over IPv4.
const MAX_DATAGRAM: usize = 65_507;
/// iperf3's largest socket buffer.
const MAX_WINDOW: usize = 512 << 20;
/// iperf3's longest test and omit period.
const MAX_TIME: u32 = 86_400;
/// TCP's default block.
const TCP_BLOCK: usize = 128 << 10;
/// UDP's default block without a known MSS.
const UDP_BLOCK: usize = 1460;
/// UDP's default rate.
const UDP_RATE: u64 = 1 << 20;

/// Runs `zcnet iperf3`.
pub fn run(args: Iperf3Args) -> Result<()> {
    if matches!(args.api, Api::Sendmmsg | Api::AfXdp) {
        return Err(UsageError("--api: zcnet iperf3 sends with sendmsg or io_uring".into()).into());
    }
    let zc = Zc {
        mode: args.mode,
        api: args.api,
        rx: args.rx,
    };
    let out = run::Output {
        json: args.json,
        interval: args.interval,
    };
    crate::live::watch_interrupts()?;
    match &args.client {
        Some(host) => {
            let params = client_params(&args)?;
            client::run(host, args.port, params, zc, out, (args.window, args.mss))
        }
        None => server::serve(args.port, args.one_off, zc, out),
    }
}

/// The parameter block of a client run.
fn client_params(a: &Iperf3Args) -> Result<Params> {
    flags::at_most(
        "-P",
        u64::from(a.parallel),
        u64::from(MAX_STREAMS),
        "iperf3's most streams",
    )?;
    flags::at_most("-O", u64::from(a.omit), u64::from(MAX_TIME), "one day")?;
    flags::at_most("-t", u64::from(a.time), u64::from(MAX_TIME), "one day")?;
    let limit = if a.udp { MAX_DATAGRAM } else { MAX_BLOCK };
    if let Some(l) = a.length {
        flags::at_most(
            "-l",
            l as u64,
            limit as u64,
            "iperf3's largest block or datagram",
        )?;
    }
    if let Some(w) = a.window {
        flags::at_most(
            "-w",
            w as u64,
            MAX_WINDOW as u64,
            "iperf3's largest socket buffer",
        )?;
    }
    let ends_by_count = a.bytes.is_some() || a.blockcount.is_some();
    if a.time == 0 && !ends_by_count {
        return Err(UsageError(
            "-t 0: a test needs an end (more than 0 seconds, or -n or -k)".into(),
        )
        .into());
    }
    if a.udp && a.length.is_some_and(|l| l < MIN_DATAGRAM) {
        return Err(UsageError(format!(
            "-l: a UDP datagram holds at least its {MIN_DATAGRAM}-byte header"
        ))
        .into());
    }
    let flag = |on: bool| on.then_some(true);
    Ok(Params {
        tcp: flag(!a.udp),
        udp: flag(a.udp),
        omit: a.omit,
        time: if ends_by_count { 0 } else { a.time },
        num: a.bytes.unwrap_or(0),
        blockcount: a.blockcount.unwrap_or(0),
        mss: a.mss,
        parallel: a.parallel,
        reverse: flag(a.reverse),
        bidirectional: flag(a.bidir),
        window: a.window.map(|w| w as u32),
        len: a.length.map(|l| l as u32),
        bandwidth: a.bitrate.or(a.udp.then_some(UDP_RATE)),
        udp_counters_64bit: None,
        zerocopy: None,
        client_version: Some(format!("zcnet {}", env!("CARGO_PKG_VERSION"))),
    })
}

/// Why a parameter block cannot be run, if it cannot.
fn check_params(p: &Params) -> Result<(), String> {
    let checks = [
        (
            p.parallel == 0 || p.parallel > MAX_STREAMS,
            format!("{} streams (1 to {MAX_STREAMS})", p.parallel),
        ),
        (
            p.time > MAX_TIME || p.omit > MAX_TIME,
            format!(
                "{} s with {} s omitted (at most {MAX_TIME} each)",
                p.time, p.omit
            ),
        ),
        (
            p.len.is_some_and(|l| {
                l == 0 || l as usize > if p.is_udp() { MAX_DATAGRAM } else { MAX_BLOCK }
            }),
            format!("blocks of {} bytes", p.len.unwrap_or(0)),
        ),
        (
            p.window.is_some_and(|w| w as usize > MAX_WINDOW),
            format!("a window of {} bytes", p.window.unwrap_or(0)),
        ),
        (
            p.time == 0 && p.num == 0 && p.blockcount == 0,
            "no end (no time, bytes or blocks)".to_string(),
        ),
        (
            p.is_udp() && p.len.is_some_and(|l| (l as usize) < MIN_DATAGRAM),
            "datagrams shorter than their header".to_string(),
        ),
    ];
    match checks.into_iter().find(|(bad, _)| *bad) {
        Some((_, what)) => Err(format!("the parameters ask for {what}")),
        None => Ok(()),
    }
}

/// What every stream does, from the parameters.
fn spec_of(p: &Params, udp_default_block: usize) -> Spec {
    let udp = p.is_udp();
    Spec {
        udp,
        blksize: p
            .len
            .map_or(if udp { udp_default_block } else { TCP_BLOCK }, |l| {
                l as usize
            }),
        rate: p.bandwidth.unwrap_or(0),
        wide: p.udp_counters_64bit.is_some_and(|v| v != 0),
    }
}

/// Sets `-w` (both buffers) and `-M` on a stream's socket.
fn tune(fd: impl AsFd, window: Option<usize>, mss: Option<u32>) -> io::Result<()> {
    if let Some(w) = window {
        sockopt::set_socket_send_buffer_size(&fd, w)?;
        sockopt::set_socket_recv_buffer_size(&fd, w)?;
    }
    if let Some(m) = mss {
        zcnet::rx::sender::set_mss(fd.as_fd(), m as i32)?;
    }
    Ok(())
}

/// A UDP socket bound to `addr` that other sockets may bind too (SO_REUSEADDR), as iperf3's server
/// binds one per stream on its port.
fn udp_socket(addr: SocketAddr) -> io::Result<UdpSocket> {
    use rustix::net::{AddressFamily, SocketType, bind, socket};
    let family = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let fd = socket(family, SocketType::DGRAM, None)?;
    sockopt::set_socket_reuseaddr(&fd, true)?;
    bind(&fd, &addr)?;
    Ok(UdpSocket::from(fd))
}

/// Waits up to `timeout` for `ctl` to be readable (or closed).
fn readable(ctl: &TcpStream, timeout: Duration) -> io::Result<bool> {
    let t = Timespec::try_from(timeout).map_err(io::Error::other)?;
    let mut fds = [PollFd::new(ctl, PollFlags::IN)];
    Ok(poll(&mut fds, Some(&t))? > 0)
}

/// A bit rate: a number with K, M or G for powers of 1000 (iperf3's `-b`).
fn bitrate(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, scale) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1e3),
        Some((i, 'm' | 'M')) => (&s[..i], 1e6),
        Some((i, 'g' | 'G')) => (&s[..i], 1e9),
        _ => (s, 1.0),
    };
    let v: f64 = digits
        .parse()
        .map_err(|_| "expected bits per second (K, M, G suffixes allowed)".to_string())?;
    if !v.is_finite() || v < 0.0 || v * scale > 1e15 {
        return Err("must be from 0 to 1000T".into());
    }
    Ok((v * scale) as u64)
}

/// A receive mode: copy, zerocopy or auto.
fn rx_mode(s: &str) -> Result<RxMode, String> {
    match s {
        "copy" => Ok(RxMode::Copy),
        "zerocopy" | "zc" => Ok(RxMode::ZeroCopy),
        "auto" => Ok(RxMode::Auto),
        other => Err(format!(
            "unknown receive mode {other:?}: use copy, zerocopy or auto"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitrates_are_powers_of_1000() {
        assert_eq!(bitrate("10M"), Ok(10_000_000));
        assert_eq!(bitrate("1.5G"), Ok(1_500_000_000));
        assert_eq!(bitrate("0"), Ok(0));
        assert!(bitrate("-1").is_err());
    }

    #[test]
    fn hostile_parameter_blocks_are_refused_with_what_they_ask() {
        let ok = Params {
            tcp: Some(true),
            time: 1,
            parallel: 1,
            ..Params::default()
        };
        assert_eq!(check_params(&ok), Ok(()));
        let many = Params {
            parallel: 100_000,
            ..ok.clone()
        };
        assert!(check_params(&many).unwrap_err().contains("100000 streams"));
        let huge = Params {
            len: Some(u32::MAX),
            ..ok.clone()
        };
        assert!(
            check_params(&huge)
                .unwrap_err()
                .contains("blocks of 4294967295")
        );
        let endless = Params { time: 0, ..ok };
        assert!(check_params(&endless).unwrap_err().contains("no end"));
    }
}
