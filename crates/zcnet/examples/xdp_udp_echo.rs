//! A UDP echo server on AF_XDP, on tokio: zcnet's `UdpEndpoint` bound once per queue of an
//! interface ([`UdpEndpoint::bind_each_queue`]), each queue served by a task of its own on a
//! runtime with a thread per queue, answers every datagram to its port with the same payload
//! (through the queue it arrived on), until COUNT were answered or it is interrupted (Ctrl-C), then
//! prints what each queue counted and the totals. Any UDP client on the link can talk to it (a
//! plain `std::net::UdpSocket` does); everything else sent to the host still reaches its stack.
//!
//! ```sh
//! # as root, ADDR one of IFACE's addresses; QUEUES a comma-separated list (default 0)
//! cargo run --release --example xdp_udp_echo -- veth0 10.0.0.1:9000 1000 0,1
//! ```
//!
//! Needs CAP_NET_RAW, CAP_BPF and CAP_NET_ADMIN. A sender on the same host whose interface offloads
//! transmit checksums (veth does) must turn that off (`ethtool -K IF tx off`): AF_XDP frames carry
//! no checksum status, and the endpoint drops what does not verify.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;
use zcnet::aio::AsyncUdpEndpoint;
use zcnet::xdp::{EndpointConfig, EndpointStats, UdpEndpoint};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (iface, local, count, queues) = match &args[..] {
        [iface, local, count] => (iface, local, count, "0"),
        [iface, local, count, queues] => (iface, local, count, queues.as_str()),
        _ => return Err("usage: xdp_udp_echo IFACE ADDR:PORT COUNT [QUEUES]".into()),
    };
    let count: u64 = count.parse()?;
    let queues = queues
        .split(',')
        .map(str::parse)
        .collect::<Result<Vec<u32>, _>>()?;
    let mut config = EndpointConfig::default();
    config.queues = queues;
    let endpoints = UdpEndpoint::bind_each_queue(iface, local.parse()?, config)?;
    for endpoint in &endpoints {
        let socket = &endpoint.sockets()[0];
        println!(
            "queue {}: {:?}{}",
            socket.queue(),
            socket.mode(),
            socket
                .zerocopy_status()
                .err()
                .map(|f| format!(" ({f})"))
                .unwrap_or_default()
        );
    }
    println!("ready on {iface} {local}");
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(endpoints.len())
        .enable_all()
        .build()?
        .block_on(serve_all(endpoints, count))
}

/// Serves every queue's endpoint on a task of its own until `count` datagrams were answered in all
/// or Ctrl-C, then prints each queue's counts and the totals.
async fn serve_all(endpoints: Vec<UdpEndpoint>, count: u64) -> Result<(), BoxError> {
    let echoed = Arc::new(AtomicU64::new(0));
    let (stop, stopped) = watch::channel(false);
    let stop = Arc::new(stop);
    let mut tasks = Vec::new();
    for endpoint in endpoints {
        let queue = endpoint.sockets()[0].queue();
        let task = serve(
            endpoint,
            count,
            Arc::clone(&echoed),
            Arc::clone(&stop),
            stopped.clone(),
        );
        tasks.push((queue, tokio::spawn(task)));
    }
    let mut all_done = stopped.clone();
    let interrupted = tokio::select! {
        _ = all_done.wait_for(|&done| done) => false,
        _ = tokio::signal::ctrl_c() => true,
    };
    stop.send_replace(true);
    let mut total = EndpointStats::default();
    for (queue, task) in tasks {
        let stats = task.await??;
        println!(
            "queue {queue}: echoed {}, received {}, malformed {}, bad checksum {}, not for us {}",
            stats.sent, stats.received, stats.malformed, stats.bad_checksum, stats.not_for_us
        );
        total += stats;
    }
    println!(
        "echoed {} datagrams{}: received {}, malformed {}, bad checksum {}, not for us {}",
        total.sent,
        if interrupted { " (interrupted)" } else { "" },
        total.received,
        total.malformed,
        total.bad_checksum,
        total.not_for_us
    );
    Ok(())
}

/// Echoes what one queue's endpoint receives until `count` datagrams were answered over all queues
/// (`echoed`; the task that reaches it says so on `stop`) or `stopped` says to end; returns the
/// endpoint's counts.
async fn serve(
    endpoint: UdpEndpoint,
    count: u64,
    echoed: Arc<AtomicU64>,
    stop: Arc<watch::Sender<bool>>,
    mut stopped: watch::Receiver<bool>,
) -> Result<EndpointStats, BoxError> {
    let mut endpoint = AsyncUdpEndpoint::new(endpoint)?;
    let mut answers: Vec<(std::net::SocketAddr, Vec<u8>)> = Vec::new();
    while !*stopped.borrow() {
        tokio::select! {
            // Cancel-safe: a receive dropped here has taken no frame.
            batch = endpoint.receive(64) => {
                let batch = batch?;
                answers.extend(batch.iter().map(|d| (d.source, d.payload.to_vec())));
            }
            _ = stopped.changed() => break,
        }
        let answered = answers.len() as u64;
        for (to, payload) in answers.drain(..) {
            endpoint
                .send(to, payload.len(), |buf| buf.copy_from_slice(&payload))
                .await?;
        }
        endpoint.flush().await?;
        if echoed.fetch_add(answered, Ordering::Relaxed) + answered >= count {
            stop.send_replace(true);
        }
    }
    Ok(endpoint.stats())
}
