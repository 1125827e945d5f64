//! The guest side of the AF_XDP UDP endpoint check: an endpoint bound in zero-copy mode on each queue
//! of the guest's NIC (`UdpEndpoint::bind_each_queue`), each on a tokio task of its own
//! (`aio::AsyncUdpEndpoint`), takes a burst from the peer (each datagram's pattern verified in the
//! UMEM frame it arrived in) and sends every payload on to the peer's UDP port through its own
//! queue, built in place with headers, checksums and the peer's MAC from the kernel's tables; the
//! peer verifies each.
//! Then `zcnet probe`'s AF_XDP TX metadata row for the NIC is held against what the guest kernel
//! does ([`tx_metadata`]).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use zcnet::aio::AsyncUdpEndpoint;
use zcnet::probe::{ProbeOptions, Support, probe};
use zcnet::xdp::{BoundMode, Checksums, EndpointConfig, Mode, TxMetadata, UdpEndpoint};

use crate::outcome::Outcome;
use crate::wire;
use crate::xdp_zc::{self, DATAGRAMS};

/// How long a queue's task waits for a datagram before it looks at the other queues' progress.
const SLICE: Duration = Duration::from_millis(200);

/// Longest wait for the burst's next datagram (it starts a second after the request).
const WAIT: Duration = Duration::from_secs(30);

/// Binds an endpoint on each of `queues` queues of `iface` at `ip`'s burst port, in zero-copy mode
/// (each with the default UMEM), has the peer send stream `stream` and forwards it to the peer's UDP
/// port.
pub fn run(
    peer: IpAddr,
    ip: Ipv4Addr,
    iface: &str,
    queues: u32,
    stream: u32,
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    let mut config = EndpointConfig::default();
    config.mode = Mode::ZeroCopy;
    config.queues = (0..queues).collect();
    let local = SocketAddr::new(IpAddr::V4(ip), wire::BURST_PORT);
    let endpoints = UdpEndpoint::bind_each_queue(iface, local, config)
        .with_context(|| format!("bind a UDP endpoint at {local} on each queue of {iface}"))?;
    let modes: Vec<String> = endpoints
        .iter()
        .flat_map(UdpEndpoint::sockets)
        .map(|s| format!("queue {} {}", s.queue(), s.mode()))
        .collect();
    let zero_copy = endpoints
        .iter()
        .flat_map(UdpEndpoint::sockets)
        .all(|s| s.mode() == BoundMode::ZeroCopy);
    xdp_zc::request_burst(peer, stream)?;
    let to = SocketAddr::new(peer, wire::UDP_PORT);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("a tokio runtime")?;
    let per_queue = runtime.block_on(forward_on_each(endpoints, stream, to))?;
    let mut tally = Tally::default();
    let mut stats = zcnet::xdp::EndpointStats::default();
    for (t, s) in &per_queue {
        tally.intact += t.intact;
        tally.other += t.other;
        stats += *s;
    }
    let answered: Vec<String> = per_queue
        .iter()
        .map(|(t, s)| format!("{} in, {} out", t.intact + t.other, s.sent))
        .collect();
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
            "{} (per queue: {}): {} of {DATAGRAMS} burst datagrams received intact ({} not, \
             malformed {}, bad checksum {}), {} sent on, the peer verified {received}, {errors} \
             corrupt or duplicated",
            modes.join(", "),
            answered.join("; "),
            tally.intact,
            tally.other,
            stats.malformed,
            stats.bad_checksum,
            stats.sent
        ),
    );
    Ok(())
}

/// `zcnet probe`'s `xdp.tx_metadata` row for `iface` against the guest kernel: the support it
/// gives must be what the kernel's own answers make it (a UMEM registered with TX metadata room;
/// the driver's `xsk-features`), and what it claims for copy mode must hold: an endpoint bound in
/// copy mode offloads its UDP checksums exactly when the row says copy mode has TX metadata, and
/// the peer verifies every one of [`DATAGRAMS`] datagrams it sends as stream `stream` (a datagram
/// whose checksum request the kernel ignored would carry only the pseudo-header sum, and the
/// peer's socket would drop it).
pub fn tx_metadata(
    peer: IpAddr,
    iface: &str,
    queues: u32,
    stream: u32,
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    let findings = probe(&{
        let mut opts = ProbeOptions::default();
        opts.ifaces = Some(vec![iface.to_string()]);
        opts.try_xsk_bind = false;
        opts
    });
    let row = findings
        .iter()
        .find(|f| f.feature == "xdp.tx_metadata")
        .context("zcnet probe gave no xdp.tx_metadata row")?;
    let kernel = TxMetadata::probe(iface).context("probe the guest kernel's TX metadata")?;
    let expected = match (
        kernel.checksum(BoundMode::Copy),
        kernel.checksum(BoundMode::ZeroCopy),
    ) {
        (true, true) => Support::Yes,
        (true, false) => Support::Partial,
        (false, _) => Support::No,
    };
    let mut config = EndpointConfig::with_queues((0..queues).collect());
    config.mode = Mode::Copy;
    config.checksums = Checksums::Offload;
    let local = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), wire::BURST_PORT);
    let mut endpoint = UdpEndpoint::bind(iface, local, config)
        .with_context(|| format!("bind a copy-mode UDP endpoint on {iface}"))?;
    let to = SocketAddr::new(peer, wire::UDP_PORT);
    let len = 1000;
    let mut sent = 0u64;
    while sent < DATAGRAMS {
        let mut batch = endpoint.send_batch();
        // Groups of 8 with a pause: the emulated NIC and the host's tap keep up.
        for seq in sent..(sent + 8).min(DATAGRAMS) {
            batch.push(to, len, |buf| wire::fill_datagram(buf, stream, seq))?;
        }
        sent += batch.flush()? as u64;
        std::thread::sleep(Duration::from_millis(4));
    }
    let (received, errors) = xdp_zc::report(peer, stream)?;
    let offloaded = endpoint.offloads_checksums();
    let ok = row.support == expected
        && offloaded == (row.support != Support::No)
        && received == DATAGRAMS
        && errors == 0;
    outcome.check(
        "xdp-tx-metadata",
        ok,
        &format!(
            "probe: {} ({}); the kernel: UMEM with TX metadata {:?}, xsk-features {:?} (so {}); a \
             copy-mode endpoint {} its checksums, the peer verified {received} of {DATAGRAMS}, \
             {errors} corrupt or duplicated",
            row.support,
            row.reason,
            kernel.umem,
            kernel.zero_copy_names(),
            expected,
            if offloaded { "offloaded" } else { "computed" },
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

/// Runs [`forward`] for each endpoint on a task of its own; returns each one's tally and counts, in
/// queue order.
async fn forward_on_each(
    endpoints: Vec<UdpEndpoint>,
    stream: u32,
    to: SocketAddr,
) -> anyhow::Result<Vec<(Tally, zcnet::xdp::EndpointStats)>> {
    let arrived = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = endpoints
        .into_iter()
        .map(|endpoint| tokio::spawn(forward(endpoint, stream, to, Arc::clone(&arrived))))
        .collect();
    let mut per_queue = Vec::with_capacity(tasks.len());
    for task in tasks {
        per_queue.push(task.await.context("a queue's task")??);
    }
    Ok(per_queue)
}

/// Receives the burst on one queue's endpoint and sends each payload to `to`, until the datagrams
/// `arrived` on every queue make the whole burst, or none arrived on any for [`WAIT`].
async fn forward(
    endpoint: UdpEndpoint,
    stream: u32,
    to: SocketAddr,
    arrived: Arc<AtomicU64>,
) -> anyhow::Result<(Tally, zcnet::xdp::EndpointStats)> {
    let mut endpoint = AsyncUdpEndpoint::new(endpoint)?;
    let mut tally = Tally::default();
    let mut payloads = Vec::new();
    let (mut seen, mut since) = (0, Instant::now());
    loop {
        let total = arrived.load(Ordering::Relaxed);
        if total >= DATAGRAMS {
            break;
        }
        if total != seen {
            (seen, since) = (total, Instant::now());
        } else if since.elapsed() > WAIT {
            break;
        }
        let Ok(batch) = tokio::time::timeout(SLICE, endpoint.receive(64)).await else {
            continue;
        };
        for datagram in batch?.iter() {
            match wire::check_datagram(datagram.payload) {
                Some(d) if d.stream == stream && d.intact => tally.intact += 1,
                _ => tally.other += 1,
            }
            payloads.push(datagram.payload.to_vec());
        }
        arrived.fetch_add(payloads.len() as u64, Ordering::Relaxed);
        for payload in payloads.drain(..) {
            endpoint
                .send(to, payload.len(), |buf| buf.copy_from_slice(&payload))
                .await?;
        }
        endpoint.flush().await?;
    }
    Ok((tally, endpoint.stats()))
}
