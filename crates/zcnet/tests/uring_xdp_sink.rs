//! io_uring zero-copy UDP into a veth whose receiving end runs a native XDP program that drops every
//! frame: the one local path where the kernel does not copy, so every notification's REPORT_USAGE
//! must say zero-copied. Registered pool buffers recycle as notifications arrive; every one comes back.

mod tx_common;
mod uring_common;

use std::time::Duration;

use tx_common::{assert_every_send_zero_copied, pool, xdp_drop_sink, xdp_sink_size};
use uring_common::{config, send_sizes, send_zc_available};
use zcnet::tx::Mode;
use zcnet::uring::UringUdpSender;

fn sink_run(v6: bool, gso: Option<u16>) {
    let (_pair, link, socket) = xdp_drop_sink(v6);
    let pool = pool(64 << 10, 8);
    let mut tx = UringUdpSender::new(socket, config(Mode::ZeroCopy)).expect("io_uring");
    tx.register_pool(&pool).expect("register the pool");
    tx.set_gso_segment(gso).expect("UDP_SEGMENT");
    send_sizes(&mut tx, &pool, &[xdp_sink_size(gso)], 500, drop).expect("send");
    tx.flush(Duration::from_secs(20)).expect("flush");
    let stats = tx.stats().clone();
    drop(tx);
    drop(link);
    assert_every_send_zero_copied(&stats, &pool, 500);
}

#[test]
fn uring_udp_into_xdp_drop_sink_is_zero_copy() {
    if !testnet::privileged("uring_udp_into_xdp_drop_sink_is_zero_copy")
        || !send_zc_available("uring_udp_into_xdp_drop_sink_is_zero_copy")
    {
        return;
    }
    for v6 in [false, true] {
        for gso in [None, Some(1200)] {
            sink_run(v6, gso);
        }
    }
}
