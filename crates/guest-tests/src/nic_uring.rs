//! The guest side of the virtio-net run for io_uring: zcnet's sender on its io_uring path
//! (`IORING_OP_SEND_ZC` from a registered pool) streams TCP and UDP (plain and GSO) over the guest's real NIC driver to the
//! host-side peer, which verifies every byte; `IORING_SEND_ZC_REPORT_USAGE` must say "not copied" for
//! every notification (the NIC sent from the lent pages).

use std::net::IpAddr;

use zcnet::tx::{BufferPool, Mode, SendPath, Sender, SenderConfig, TxStats, ZcSocket};

use crate::nic::{GSO_SEGMENTS, gso_segment, tcp_stream, udp_stream};
use crate::outcome::Outcome;

/// Runs the io_uring TCP, UDP and UDP-GSO checks against the peer at `peer` (UDP streams 4 and 5:
/// the MSG_ZEROCOPY checks and AF_XDP use 1 to 3).
pub fn run(peer: IpAddr, outcome: &mut Outcome) -> anyhow::Result<()> {
    tcp_stream(peer, "uring-tcp-zerocopy", sender, not_copied, outcome)?;
    for (check, gso) in [
        (("uring-udp-zerocopy", 4), None),
        (("uring-udp-gso-zerocopy", 5), Some(GSO_SEGMENTS)),
    ] {
        let udp = |socket, pool: &BufferPool| {
            let mut tx = sender(socket, pool)?;
            tx.set_gso_segment(gso_segment(gso))?;
            Ok(tx)
        };
        udp_stream(peer, check, gso, udp, not_copied, outcome)?;
    }
    Ok(())
}

/// A sender on the io_uring path in zero-copy mode with `pool` registered (fixed sends); an error
/// when any is missing.
fn sender<S: ZcSocket>(socket: S, pool: &BufferPool) -> anyhow::Result<Sender<S>> {
    let mut config = SenderConfig::with_mode(Mode::ZeroCopy);
    config.path = SendPath::IO_URING;
    let mut tx = Sender::new(socket, config);
    if let Err(why) = tx.path_status() {
        anyhow::bail!("io_uring unavailable: {why}");
    }
    if let Err(why) = tx.zerocopy_status() {
        anyhow::bail!("io_uring zero-copy send unavailable: {why}");
    }
    tx.register_pool(pool)
        .map_err(|why| anyhow::anyhow!("registering the pool: {why}"))?;
    Ok(tx)
}

/// REPORT_USAGE: every zero-copy request notified, none copied.
fn not_copied(stats: &TxStats) -> bool {
    stats.zc_ids > 0 && stats.copied_ids == 0 && stats.zc_ids == stats.zc_calls
}
