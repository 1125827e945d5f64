//! The guest side of the virtio-net run: streams to the host-side peer over the guest's real NIC driver.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use anyhow::Context;

use crate::outcome::Outcome;
use crate::{pattern, wire};

/// Bytes of each TCP stream: enough for hundreds of sends, short enough for an emulated CPU.
const TCP_BYTES: u64 = 8 << 20;
/// Bytes per TCP send.
const TCP_SEND: usize = 64 << 10;
/// UDP datagram size: fills a 1500-byte MTU (20 IPv4 + 8 UDP header bytes).
const DATAGRAM: usize = 1472;
/// Datagrams per UDP stream.
const DATAGRAMS: u64 = 2000;

/// Runs the TCP and UDP checks against the peer at `peer`, then tells it to quit.
pub fn run(peer: IpAddr) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new("nic");
    tcp_stream(peer, &mut outcome)?;
    udp_stream(peer, 1, &mut outcome)?;
    let mut quit =
        TcpStream::connect(SocketAddr::new(peer, wire::TCP_PORT)).context("connect to the peer")?;
    quit.write_all(&wire::Request::Quit.encode())?;
    Ok(outcome)
}

fn tcp_stream(peer: IpAddr, outcome: &mut Outcome) -> anyhow::Result<()> {
    let mut conn = TcpStream::connect(SocketAddr::new(peer, wire::TCP_PORT))
        .with_context(|| format!("connect to the peer {peer}:{}", wire::TCP_PORT))?;
    conn.set_read_timeout(Some(Duration::from_secs(60)))?;
    conn.write_all(&wire::Request::TcpStream { bytes: TCP_BYTES }.encode())?;
    let mut buf = vec![0u8; TCP_SEND];
    let mut at = 0u64;
    while at < TCP_BYTES {
        let n = TCP_SEND.min((TCP_BYTES - at) as usize);
        pattern::fill(&mut buf[..n], at);
        conn.write_all(&buf[..n])
            .context("send on the TCP stream")?;
        at += n as u64;
    }
    let (verified, errors) = wire::read_answer(&mut conn).context("read the peer's answer")?;
    let what = format!("{TCP_BYTES} bytes sent, peer verified {verified}, {errors} data errors");
    outcome.check("tcp", verified == TCP_BYTES && errors == 0, &what);
    Ok(())
}

fn udp_stream(peer: IpAddr, stream: u32, outcome: &mut Outcome) -> anyhow::Result<()> {
    let udp = UdpSocket::bind("0.0.0.0:0").context("bind a UDP socket")?;
    udp.connect(SocketAddr::new(peer, wire::UDP_PORT))
        .context("connect the UDP socket")?;
    let mut buf = vec![0u8; DATAGRAM];
    for seq in 0..DATAGRAMS {
        wire::fill_datagram(&mut buf, stream, seq);
        udp.send(&buf).context("send a datagram")?;
    }
    let mut conn =
        TcpStream::connect(SocketAddr::new(peer, wire::TCP_PORT)).context("connect to the peer")?;
    conn.set_read_timeout(Some(Duration::from_secs(60)))?;
    conn.write_all(
        &wire::Request::UdpReport {
            stream,
            expected: DATAGRAMS,
        }
        .encode(),
    )?;
    let (received, errors) = wire::read_answer(&mut conn).context("read the peer's answer")?;
    let what =
        format!("{DATAGRAMS} datagrams sent, peer verified {received}, {errors} data errors");
    outcome.check("udp", received > 0 && errors == 0, &what);
    Ok(())
}
