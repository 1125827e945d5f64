//! io_uring zero-copy UDP into a veth whose receiving end runs a native XDP program that drops every
//! frame: the one local path where the kernel does not copy, so every notification's REPORT_USAGE
//! must say zero-copied. Registered pool buffers recycle as notifications arrive; every one comes back.

mod tx_common;
mod uring_common;

use std::time::Duration;

use tx_common::xdp_sink_run;
use uring_common::{config, send_sizes, send_zc_available};
use zcnet::tx::Mode;
use zcnet::uring::UringUdpSender;

#[test]
fn uring_udp_into_xdp_drop_sink_is_zero_copy() {
    if !testnet::privileged("uring_udp_into_xdp_drop_sink_is_zero_copy")
        || !send_zc_available("uring_udp_into_xdp_drop_sink_is_zero_copy")
    {
        return;
    }
    for v6 in [false, true] {
        for gso in [None, Some(1200)] {
            xdp_sink_run(v6, gso, |socket, pool, size, sends| {
                let mut tx = UringUdpSender::new(socket, config(Mode::ZeroCopy)).expect("io_uring");
                tx.register_pool(pool).expect("register the pool");
                tx.set_gso_segment(gso).expect("UDP_SEGMENT");
                send_sizes(&mut tx, pool, &[size], sends, drop).expect("send");
                tx.flush(Duration::from_secs(20)).expect("flush");
                tx.stats().clone()
            });
        }
    }
}
