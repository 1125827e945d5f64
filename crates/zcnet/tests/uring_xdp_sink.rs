//! io_uring zero-copy UDP into a veth whose receiving end runs a native XDP program that drops every
//! frame: the one local path where the kernel does not copy, so every notification's REPORT_USAGE
//! must say zero-copied. Registered pool buffers recycle as notifications arrive; every one comes back.

mod tx_common;
mod uring_common;

use std::time::Duration;

use tx_common::{fill, pool, xdp_drop_sink};
use uring_common::{config, send_zc_available, take};
use zcnet::tx::Mode;
use zcnet::uring::UringUdpSender;

fn sink_run(v6: bool, gso: Option<u16>) {
    let (_pair, link, socket) = xdp_drop_sink(v6);
    let pool = pool(64 << 10, 8);
    let mut tx = UringUdpSender::new(socket, config(Mode::ZeroCopy)).expect("io_uring");
    tx.register_pool(&pool).expect("register the pool");
    tx.set_gso_segment(gso).expect("UDP_SEGMENT");
    let size = if gso.is_some() { 1200 * 40 } else { 1400 };
    for i in 0..500u64 {
        let mut buf = take(&pool, &mut tx).expect("take");
        buf.fill_with(size, |b| fill(b, i));
        tx.send(buf).expect("send");
    }
    tx.flush(Duration::from_secs(20)).expect("flush");
    let stats = tx.stats().clone();
    drop(tx);
    drop(link);
    assert_eq!(stats.zc_calls, 500, "{stats:?}");
    assert_eq!(stats.copied_ids, 0, "{stats:?}");
    assert_eq!(stats.zc_ids, 500, "{stats:?}");
    assert_eq!(pool.available(), pool.capacity());
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
