//! A UDP echo server on AF_XDP, on tokio: zcnet's `UdpEndpoint` on an interface's queues answers
//! every datagram to its port with the same payload, until it has answered COUNT of them or is
//! interrupted (Ctrl-C), then prints what it counted. Any UDP client on the link can talk to it (a
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

use zcnet::aio::AsyncUdpEndpoint;
use zcnet::xdp::{EndpointConfig, UdpEndpoint};

fn main() -> Result<(), Box<dyn std::error::Error>> {
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
    // Each queue's fill ring is filled at bind: as many frames again to send with.
    let config = EndpointConfig::with_queues(queues);
    let endpoint = UdpEndpoint::bind(iface, local.parse()?, config)?;
    for socket in endpoint.sockets() {
        println!(
            "queue {}: {:?}{}",
            socket.queue(),
            socket.mode(),
            socket
                .fallback()
                .map(|f| format!(" ({f})"))
                .unwrap_or_default()
        );
    }
    println!("ready on {iface} {local}");
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(serve(endpoint, count))
}

/// Echoes datagrams until `count` were answered or Ctrl-C, then prints the endpoint's counts.
async fn serve(endpoint: UdpEndpoint, count: u64) -> Result<(), Box<dyn std::error::Error>> {
    let mut endpoint = AsyncUdpEndpoint::new(endpoint)?;
    let mut answers: Vec<(std::net::SocketAddr, Vec<u8>)> = Vec::new();
    let mut echoed = 0;
    let interrupted = loop {
        if echoed >= count {
            break false;
        }
        let left = usize::try_from(count - echoed).unwrap_or(usize::MAX);
        tokio::select! {
            // Cancel-safe: a receive dropped here has taken no frame.
            batch = endpoint.receive(left.min(64)) => {
                let batch = batch?;
                answers.extend(batch.iter().map(|d| (d.source, d.payload.to_vec())));
            }
            _ = tokio::signal::ctrl_c() => break true,
        }
        for (to, payload) in answers.drain(..) {
            endpoint
                .send(to, payload.len(), |buf| buf.copy_from_slice(&payload))
                .await?;
        }
        endpoint.flush().await?;
        echoed = endpoint.stats().sent;
    };
    let stats = endpoint.stats();
    println!(
        "echoed {echoed} datagrams{}: received {}, malformed {}, bad checksum {}, not for us {}",
        if interrupted { " (interrupted)" } else { "" },
        stats.received,
        stats.malformed,
        stats.bad_checksum,
        stats.not_for_us
    );
    Ok(())
}
