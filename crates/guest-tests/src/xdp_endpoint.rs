//! The guest side of the AF_XDP UDP endpoint check: `aio::AsyncUdpEndpoint` bound in zero-copy mode
//! on every queue of the guest's NIC takes a burst from the peer (each datagram's pattern verified
//! in the UMEM frame it arrived in) and sends every payload on to the peer's UDP port, built in
//! place with headers, checksums and the peer's MAC from the kernel's tables; the peer verifies each.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use anyhow::Context;
use zcnet::aio::AsyncUdpEndpoint;
use zcnet::xdp::{BoundMode, EndpointConfig, Mode, UdpEndpoint};

use crate::outcome::Outcome;
use crate::wire;
use crate::xdp_zc::{self, DATAGRAMS};

/// Longest wait for the burst's next datagram (it starts a second after the request).
const WAIT: Duration = Duration::from_secs(30);

/// Binds the endpoint on `queues` queues of `iface` at `ip`'s burst port, in zero-copy mode, has
/// the peer send stream `stream` and forwards it to the peer's UDP port.
pub fn run(
    peer: IpAddr,
    ip: Ipv4Addr,
    iface: &str,
    queues: u32,
    stream: u32,
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    let config = EndpointConfig {
        mode: Mode::ZeroCopy,
        ..EndpointConfig::with_queues((0..queues).collect())
    };
    let local = SocketAddr::new(IpAddr::V4(ip), wire::BURST_PORT);
    let endpoint = UdpEndpoint::bind(iface, local, config)
        .with_context(|| format!("bind a UDP endpoint at {local} on {iface}"))?;
    let modes: Vec<String> = endpoint
        .sockets()
        .iter()
        .map(|s| format!("queue {} {}", s.queue(), s.mode()))
        .collect();
    let zero_copy = endpoint
        .sockets()
        .iter()
        .all(|s| s.mode() == BoundMode::ZeroCopy);
    xdp_zc::request_burst(peer, stream)?;
    let to = SocketAddr::new(peer, wire::UDP_PORT);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("a tokio runtime")?;
    let (tally, stats) = runtime.block_on(forward(endpoint, stream, to))?;
    let (received, errors) = xdp_zc::report(peer, stream)?;
    let ok = zero_copy
        && tally.intact == DATAGRAMS
        && tally.other == 0
        && received == DATAGRAMS
        && errors == 0;
    outcome.check(
        "xdp-udp-endpoint",
        ok,
        &format!(
            "{}: {} of {DATAGRAMS} burst datagrams received intact ({} not, malformed {}, bad \
             checksum {}), {} sent on, the peer verified {received}, {errors} corrupt or \
             duplicated",
            modes.join(", "),
            tally.intact,
            tally.other,
            stats.malformed,
            stats.bad_checksum,
            stats.sent
        ),
    );
    Ok(())
}

/// Burst datagrams received intact, and others.
#[derive(Debug, Default)]
struct Tally {
    intact: u64,
    other: u64,
}

/// Receives the burst on the endpoint and sends each payload to `to`, until every datagram came or
/// none came for [`WAIT`].
async fn forward(
    endpoint: UdpEndpoint,
    stream: u32,
    to: SocketAddr,
) -> anyhow::Result<(Tally, zcnet::xdp::EndpointStats)> {
    let mut endpoint = AsyncUdpEndpoint::new(endpoint)?;
    let mut tally = Tally::default();
    let mut payloads = Vec::new();
    while tally.intact + tally.other < DATAGRAMS {
        let Ok(batch) = tokio::time::timeout(WAIT, endpoint.receive(64)).await else {
            break;
        };
        for datagram in batch?.iter() {
            match wire::check_datagram(datagram.payload) {
                Some(d) if d.stream == stream && d.intact => tally.intact += 1,
                _ => tally.other += 1,
            }
            payloads.push(datagram.payload.to_vec());
        }
        for payload in payloads.drain(..) {
            endpoint
                .send(to, payload.len(), |buf| buf.copy_from_slice(&payload))
                .await?;
        }
        endpoint.flush().await?;
    }
    Ok((tally, endpoint.stats()))
}
