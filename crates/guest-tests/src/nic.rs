//! The guest side of the virtio-net run: zcnet's TCP and UDP MSG_ZEROCOPY senders stream over the
//! guest's real NIC driver to the host-side peer (which verifies every byte), then an AF_XDP socket on
//! the NIC receives a burst the peer sends. The same checks on the io_uring path are in
//! [`crate::nic_uring`].

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use anyhow::Context;
use zcnet::tx::{BufferPool, Mode, PoolConfig, SenderConfig, TcpSender, TxStats, UdpSender};
use zcnet::xdp;

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
            tx.set_gso_segment(gso_segment(gso))?;
            Ok(tx)
        };
        udp_stream(peer, check, gso, udp, sendmsg_ids_ok, &mut outcome)?;
    }
    nic_uring::run(peer, &mut outcome)?;
    // 6.12's virtio-net has no AF_XDP zero-copy: copy mode (Auto says why).
    crate::xdp_zc::rxdrop_any_mode(peer, iface, xdp::Mode::Auto, 3, &mut outcome)?;
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
pub(crate) fn tcp_stream(
    peer: IpAddr,
    name: &str,
    make: impl FnOnce(TcpStream, &BufferPool) -> anyhow::Result<TcpSender>,
    ids_ok: fn(&TxStats) -> bool,
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    let mut conn = connect(peer)?;
    conn.write_all(&wire::Request::TcpStream { bytes: TCP_BYTES }.encode())?;
    let mut answer = conn.try_clone()?;
    let pool = BufferPool::new(PoolConfig::new(TCP_SEND, 16))?;
    let mut tx = make(conn, &pool)?;
    let mut at = 0u64;
    while at < TCP_BYTES {
        let n = TCP_SEND.min((TCP_BYTES - at) as usize);
        let mut buf = tx.take_from(&pool, WAIT)?;
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
pub(crate) fn udp_stream(
    peer: IpAddr,
    (name, stream): (&str, u32),
    gso: Option<usize>,
    make: impl FnOnce(UdpSocket, &BufferPool) -> anyhow::Result<UdpSender>,
    ids_ok: fn(&TxStats) -> bool,
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    let udp = UdpSocket::bind("0.0.0.0:0").context("bind a UDP socket")?;
    udp.connect(SocketAddr::new(peer, wire::UDP_PORT))
        .context("connect the UDP socket")?;
    let per_send = gso.unwrap_or(1);
    let pool = BufferPool::new(PoolConfig::new(DATAGRAM * per_send, 32))?;
    let mut tx = make(udp, &pool)?;
    let mut seq = 0u64;
    while seq < DATAGRAMS {
        let count = (per_send as u64).min(DATAGRAMS - seq);
        let mut buf = tx.take_from(&pool, WAIT)?;
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
