//! The guest side of the virtio-net run: zcnet's TCP and UDP MSG_ZEROCOPY senders stream over the
//! guest's real NIC driver to the host-side peer (which verifies every byte), then an AF_XDP socket on
//! the NIC receives a burst the peer sends.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::Context;
use zcnet::tx::{BufferPool, Mode, PoolConfig, SenderConfig, TcpSender, TxStats, UdpSender};
use zcnet::xdp::frame::udp_payload;
use zcnet::xdp::{self, AttachMode, FrameMatch, Socket, Umem, UmemConfig, XdpProgram};

use crate::outcome::Outcome;
use crate::{lend, pattern, wire};

/// Bytes of the TCP stream: enough for hundreds of sends, short enough for an emulated CPU.
const TCP_BYTES: u64 = 8 << 20;
/// Bytes per TCP send.
const TCP_SEND: usize = 64 << 10;
/// UDP datagram size: fills a 1500-byte MTU (20 IPv4 + 8 UDP header bytes).
const DATAGRAM: usize = 1472;
/// Datagrams per UDP stream.
const DATAGRAMS: u64 = 2000;
/// Datagrams per UDP_SEGMENT (GSO) send: 44 x 1472 bytes stays below the 64 KiB datagram limit.
const GSO_SEGMENTS: usize = 44;
/// Datagrams the peer sends toward the guest's AF_XDP socket.
const BURST: u64 = 1000;
/// Longest wait for buffers, answers or frames.
const WAIT: Duration = Duration::from_secs(30);

/// Runs the TCP, UDP and AF_XDP checks against the peer at `peer` over `iface`, then tells the peer
/// to quit.
pub fn run(peer: IpAddr, iface: &str) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new("nic");
    tcp_stream(peer, &mut outcome)?;
    udp_stream(peer, 1, None, &mut outcome)?;
    udp_stream(peer, 2, Some(GSO_SEGMENTS), &mut outcome)?;
    xdp_rxdrop(peer, iface, 1, false, 3, &mut outcome)?;
    request(peer, wire::Request::Quit)?;
    Ok(outcome)
}

fn connect(peer: IpAddr) -> anyhow::Result<TcpStream> {
    let conn = TcpStream::connect(SocketAddr::new(peer, wire::TCP_PORT))
        .with_context(|| format!("connect to the peer {peer}:{}", wire::TCP_PORT))?;
    conn.set_read_timeout(Some(WAIT))?;
    Ok(conn)
}

/// Sends `request` on a new connection and returns the peer's answer (none for `Quit`).
pub fn request(peer: IpAddr, request: wire::Request) -> anyhow::Result<Option<(u64, u64)>> {
    let mut conn = connect(peer)?;
    conn.write_all(&request.encode())?;
    if request == wire::Request::Quit {
        return Ok(None);
    }
    Ok(Some(
        wire::read_answer(&mut conn).context("read the peer's answer")?,
    ))
}

fn ids(stats: &TxStats) -> String {
    format!(
        "ids sent {}, not copied {}, copied {}, notifications {}",
        stats.zc_calls, stats.zc_ids, stats.copied_ids, stats.notifications
    )
}

/// zcnet's [`TcpSender`] in zero-copy mode: the completions must say "not copied" (the NIC sent from
/// the lent pages), and the peer must verify every byte.
fn tcp_stream(peer: IpAddr, outcome: &mut Outcome) -> anyhow::Result<()> {
    let mut conn = connect(peer)?;
    conn.write_all(&wire::Request::TcpStream { bytes: TCP_BYTES }.encode())?;
    let answer = conn.try_clone()?;
    let pool = BufferPool::new(PoolConfig {
        buf_size: TCP_SEND,
        count: 16,
        huge_pages: false,
    })?;
    let mut tx = TcpSender::new(conn, SenderConfig::with_mode(Mode::ZeroCopy));
    let mut at = 0u64;
    while at < TCP_BYTES {
        let n = TCP_SEND.min((TCP_BYTES - at) as usize);
        let mut buf = lend::take(&pool, &mut tx, WAIT)?;
        buf.fill_with(n, |b| pattern::fill(b, at));
        tx.send(buf)?;
        at += n as u64;
    }
    tx.flush(WAIT)?;
    let stats = tx.stats().clone();
    let mut answer = answer;
    let (verified, errors) = wire::read_answer(&mut answer).context("read the peer's answer")?;
    drop(tx.close(WAIT)?);
    let ok = verified == TCP_BYTES
        && errors == 0
        && stats.zc_ids > 0
        && stats.zc_ids + stats.copied_ids == stats.zc_calls
        && pool.available() == pool.capacity();
    let what = format!(
        "{TCP_BYTES} bytes, peer verified {verified}, {errors} data errors; {}; buffers back {}/{}",
        ids(&stats),
        pool.available(),
        pool.capacity()
    );
    outcome.check("tcp-zerocopy", ok, &what);
    Ok(())
}

/// zcnet's [`UdpSender`] in zero-copy mode, one datagram per send or `gso` datagrams per
/// UDP_SEGMENT send: completions not copied, and the peer verifies every datagram that arrives.
fn udp_stream(
    peer: IpAddr,
    stream: u32,
    gso: Option<usize>,
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    let name = if gso.is_some() {
        "udp-gso-zerocopy"
    } else {
        "udp-zerocopy"
    };
    let udp = UdpSocket::bind("0.0.0.0:0").context("bind a UDP socket")?;
    udp.connect(SocketAddr::new(peer, wire::UDP_PORT))
        .context("connect the UDP socket")?;
    let per_send = gso.unwrap_or(1);
    let pool = BufferPool::new(PoolConfig {
        buf_size: DATAGRAM * per_send,
        count: 32,
        huge_pages: false,
    })?;
    let mut tx = UdpSender::new(udp, SenderConfig::with_mode(Mode::ZeroCopy));
    if gso.is_some() {
        tx.set_gso_segment(Some(DATAGRAM as u16));
    }
    let mut seq = 0u64;
    while seq < DATAGRAMS {
        let count = (per_send as u64).min(DATAGRAMS - seq);
        let mut buf = lend::take(&pool, &mut tx, WAIT)?;
        buf.fill_with(count as usize * DATAGRAM, |b| {
            for (k, datagram) in b.chunks_mut(DATAGRAM).enumerate() {
                wire::fill_datagram(datagram, stream, seq + k as u64);
            }
        });
        tx.send(buf)?;
        seq += count;
    }
    tx.flush(WAIT)?;
    let stats = tx.stats().clone();
    drop(tx.close(WAIT)?);
    let report = wire::Request::UdpReport {
        stream,
        expected: DATAGRAMS,
    };
    let (received, errors) = request(peer, report)?.expect("a report has an answer");
    let ok = received > 0
        && errors == 0
        && stats.zc_ids > 0
        && stats.zc_ids + stats.copied_ids == stats.zc_calls
        && pool.available() == pool.capacity();
    let what = format!(
        "{DATAGRAMS} datagrams of {DATAGRAM} bytes ({per_send} per send), peer verified {received}, \
         {errors} data errors; {}; buffers back {}/{}",
        ids(&stats),
        pool.available(),
        pool.capacity()
    );
    outcome.check(name, ok, &what);
    Ok(())
}

/// AF_XDP on the NIC: reports whether [`xdp::Mode::ZeroCopy`] binds, then receives (and drops) a burst
/// of datagrams from the peer on every one of `queues` queues (the NIC's hash picks the queue of the
/// burst), checking each one's contents. With `require_zero_copy`, a refused zero-copy bind fails.
pub fn xdp_rxdrop(
    peer: IpAddr,
    iface: &str,
    queues: u32,
    require_zero_copy: bool,
    stream: u32,
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    let mut bound = Vec::new();
    let mut filled = 0;
    for queue in 0..queues {
        let mut umem = Umem::new(UmemConfig::default())?;
        let socket = match Socket::bind(&mut umem, iface, queue, xdp::Mode::ZeroCopy) {
            Ok(socket) => {
                outcome.check(
                    "xdp-zerocopy-bind",
                    true,
                    &format!("{iface} queue {queue} bound zero-copy"),
                );
                socket
            }
            Err(e) if require_zero_copy => {
                outcome.fail("xdp-zerocopy-bind", &e.to_string());
                return Ok(());
            }
            Err(e) => {
                outcome.skip("xdp-zerocopy-bind", &e.to_string());
                umem = Umem::new(UmemConfig::default())?;
                Socket::bind(&mut umem, iface, queue, xdp::Mode::Auto)?
            }
        };
        filled += umem.fill(u32::MAX);
        bound.push((umem, socket));
    }
    // Only the burst's datagrams go to the sockets: the request below (TCP) and ARP reach the stack.
    let program = XdpProgram::redirect_to_xsk(queues, FrameMatch::UdpPort(wire::BURST_PORT))?;
    let map = program
        .xsk_map()
        .context("the redirect program has a map")?;
    for (_, socket) in &bound {
        map.insert(socket.queue(), socket)?;
    }
    let link = program.attach_to(iface, AttachMode::Driver)?;
    request(
        peer,
        wire::Request::Burst {
            stream,
            datagrams: BURST,
        },
    )?;
    let (mut intact, mut corrupt, mut other, mut invalid_seen) = (0u64, 0u64, 0u64, 0u64);
    let mut frames = Vec::new();
    let deadline = Instant::now() + WAIT;
    let mut last = Instant::now();
    while intact + corrupt < BURST && Instant::now() < deadline {
        // The burst starts a moment after the request; once it flowed, a quiet second ends it.
        if intact + corrupt > 0 && last.elapsed() > Duration::from_secs(1) {
            break;
        }
        for (umem, socket) in &mut bound {
            socket.wait_rx(100 / queues as i32)?;
            invalid_seen += u64::from(socket.receive(umem, 64, &mut frames)?);
            for frame in &frames {
                match udp_payload(umem.bytes(frame)) {
                    Some((wire::BURST_PORT, payload)) => match wire::check_datagram(payload) {
                        Some(d) if d.stream == stream && d.intact => intact += 1,
                        _ => corrupt += 1,
                    },
                    _ => other += 1,
                }
            }
            if !frames.is_empty() {
                last = Instant::now();
            }
            umem.fill_with(&mut frames);
            for frame in frames.drain(..) {
                umem.release(frame);
            }
        }
    }
    drop(link);
    drop(program);
    let (mut rx_dropped, mut invalid) = (0, 0);
    let mut modes = Vec::new();
    for (_, socket) in &bound {
        let stats = socket.statistics()?;
        rx_dropped += stats.rx_dropped;
        invalid += stats.invalid_descs();
        let fallback = socket
            .fallback()
            .map(|r| format!(" (zero-copy refused: {r})"))
            .unwrap_or_default();
        modes.push(format!(
            "queue {} {}{fallback}",
            socket.queue(),
            socket.mode()
        ));
    }
    drop(bound);
    invalid += invalid_seen;
    let ok = intact > 0 && corrupt == 0 && invalid == 0;
    let what = format!(
        "{} on {iface} ({filled} frames filled): {intact} of {BURST} burst datagrams intact, \
         {corrupt} corrupt, {other} other frames, rx_dropped {rx_dropped}, invalid descriptors {invalid}",
        modes.join(", ")
    );
    outcome.check("xdp-rxdrop", ok, &what);
    Ok(())
}
