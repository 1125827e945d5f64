//! The guest side of the virtio-net run: zcnet's TCP and UDP MSG_ZEROCOPY senders stream over the
//! guest's real NIC driver to the host-side peer (which verifies every byte), then an AF_XDP socket on
//! the NIC receives a burst the peer sends. The io_uring sender's checks are in [`crate::nic_uring`].

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::Context;
use zcnet::tx::{BufferPool, Mode, PoolConfig, SenderConfig, TcpSender, TxStats, UdpSender};
use zcnet::xdp::frame::udp_payload;
use zcnet::xdp::{self, AttachMode, FrameMatch, Socket, Umem, UmemConfig, XdpProgram};

use crate::lend::{self, Lender};
use crate::outcome::Outcome;
use crate::{nic_uring, pattern, wire};

/// Bytes of the TCP stream: enough for hundreds of sends, short enough for an emulated CPU.
const TCP_BYTES: u64 = 8 << 20;
/// Bytes per TCP send.
const TCP_SEND: usize = 64 << 10;
/// UDP datagram size: fills a 1500-byte MTU (20 IPv4 + 8 UDP header bytes).
const DATAGRAM: usize = 1472;
/// Datagrams per UDP stream.
const DATAGRAMS: u64 = 2000;
/// Datagrams per UDP_SEGMENT (GSO) send: 44 x 1472 bytes stays below the 64 KiB datagram limit.
pub(crate) const GSO_SEGMENTS: usize = 44;
/// Datagrams the peer sends toward the guest's AF_XDP socket.
const BURST: u64 = 1000;
/// Longest wait for buffers, answers or frames.
pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// Runs the TCP, UDP and AF_XDP checks against the peer at `peer` over `iface`, then tells the peer
/// to quit.
pub fn run(peer: IpAddr, iface: &str) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new("nic");
    let config = SenderConfig::with_mode(Mode::ZeroCopy);
    let tcp = |conn, _: &BufferPool| Ok(TcpSender::new(conn, config));
    tcp_stream(peer, "tcp-zerocopy", tcp, sendmsg_ids_ok, &mut outcome)?;
    for (check, gso) in [
        (("udp-zerocopy", 1), None),
        (("udp-gso-zerocopy", 2), Some(GSO_SEGMENTS)),
    ] {
        let udp = |socket, _: &BufferPool| {
            let mut tx = UdpSender::new(socket, config);
            tx.set_gso_segment(gso_segment(gso));
            Ok(tx)
        };
        udp_stream(peer, check, gso, udp, sendmsg_ids_ok, &mut outcome)?;
    }
    nic_uring::run(peer, &mut outcome)?;
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

/// MSG_ZEROCOPY completions: some ids not copied (the NIC sent from the lent pages), every id back.
fn sendmsg_ids_ok(stats: &TxStats) -> bool {
    stats.zc_ids > 0 && stats.zc_ids + stats.copied_ids == stats.zc_calls
}

/// Streams [`TCP_BYTES`] of pattern to the peer with the sender `make` builds (pooled buffers, lent
/// until their completions): the peer must verify every byte, every buffer must come back, and the
/// sender's counters must satisfy `ids_ok`. Checked as `name`.
pub(crate) fn tcp_stream<L: Lender>(
    peer: IpAddr,
    name: &str,
    make: impl FnOnce(TcpStream, &BufferPool) -> anyhow::Result<L>,
    ids_ok: fn(&TxStats) -> bool,
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    let mut conn = connect(peer)?;
    conn.write_all(&wire::Request::TcpStream { bytes: TCP_BYTES }.encode())?;
    let mut answer = conn.try_clone()?;
    let pool = BufferPool::new(PoolConfig {
        buf_size: TCP_SEND,
        count: 16,
        huge_pages: false,
    })?;
    let mut tx = make(conn, &pool)?;
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
    let (verified, errors) = wire::read_answer(&mut answer).context("read the peer's answer")?;
    drop(tx);
    let ok = verified == TCP_BYTES
        && errors == 0
        && ids_ok(&stats)
        && pool.available() == pool.capacity();
    let what = format!(
        "{TCP_BYTES} bytes, peer verified {verified}, {errors} data errors; {}; buffers back {}/{}",
        ids(&stats),
        pool.available(),
        pool.capacity()
    );
    outcome.check(name, ok, &what);
    Ok(())
}

/// Streams [`DATAGRAMS`] datagrams of UDP stream `stream` to the peer with the sender `make` builds,
/// one datagram per send or `gso` datagrams per UDP_SEGMENT send: the peer verifies every datagram
/// that arrives, every buffer must come back, and the counters must satisfy `ids_ok`.
pub(crate) fn udp_stream<L: Lender>(
    peer: IpAddr,
    (name, stream): (&str, u32),
    gso: Option<usize>,
    make: impl FnOnce(UdpSocket, &BufferPool) -> anyhow::Result<L>,
    ids_ok: fn(&TxStats) -> bool,
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    let udp = UdpSocket::bind("0.0.0.0:0").context("bind a UDP socket")?;
    udp.connect(SocketAddr::new(peer, wire::UDP_PORT))
        .context("connect the UDP socket")?;
    let per_send = gso.unwrap_or(1);
    let pool = BufferPool::new(PoolConfig {
        buf_size: DATAGRAM * per_send,
        count: 32,
        huge_pages: false,
    })?;
    let mut tx = make(udp, &pool)?;
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
    drop(tx);
    let report = wire::Request::UdpReport {
        stream,
        expected: DATAGRAMS,
    };
    let (received, errors) = request(peer, report)?.expect("a report has an answer");
    let ok = received > 0 && errors == 0 && ids_ok(&stats) && pool.available() == pool.capacity();
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

/// The GSO segment size of `gso` datagrams per send, if any.
pub(crate) fn gso_segment(gso: Option<usize>) -> Option<u16> {
    gso.map(|_| DATAGRAM as u16)
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
    let (mut intact, mut corrupt, mut other) = (0u64, 0u64, 0u64);
    let deadline = Instant::now() + WAIT;
    let mut last = Instant::now();
    while intact + corrupt < BURST && Instant::now() < deadline {
        // The burst starts a moment after the request; once it flowed, a quiet second ends it.
        if intact + corrupt > 0 && last.elapsed() > Duration::from_secs(1) {
            break;
        }
        for (umem, socket) in &mut bound {
            socket.wait_rx(100 / queues as i32)?;
            let rx = socket.rx().context("the socket has an rx ring")?;
            let batch = rx.peek(64);
            let mut recycled = Vec::with_capacity(batch.len() as usize);
            for desc in batch.iter() {
                let frame = umem.validate(desc)?;
                match udp_payload(umem.data(&frame)) {
                    Some((wire::BURST_PORT, payload)) => match wire::check_datagram(payload) {
                        Some(d) if d.stream == stream && d.intact => intact += 1,
                        _ => corrupt += 1,
                    },
                    _ => other += 1,
                }
                recycled.push(desc.addr);
            }
            if !recycled.is_empty() {
                last = Instant::now();
            }
            batch.release();
            let refilled = umem.fill_with(&recycled) as usize;
            for &addr in &recycled[refilled..] {
                umem.release(addr);
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
    let ok = intact > 0 && corrupt == 0 && invalid == 0;
    let what = format!(
        "{} on {iface} ({filled} frames filled): {intact} of {BURST} burst datagrams intact, \
         {corrupt} corrupt, {other} other frames, rx_dropped {rx_dropped}, invalid descriptors {invalid}",
        modes.join(", ")
    );
    outcome.check("xdp-rxdrop", ok, &what);
    Ok(())
}
