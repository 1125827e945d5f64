//! UDP MSG_ZEROCOPY into a veth whose receiving end runs a native XDP program that drops every frame:
//! the one local path where the kernel does not copy, so completions must say zero-copied. Sends from
//! pooled buffers recycle as completions arrive; every buffer comes back.

mod tx_common;

use std::time::Duration;

use tx_common::{fill, pool, take, xdp_drop_sink};
use zcnet::tx::{Mode, SenderConfig, UdpSender};

fn sink_run(v6: bool, gso: Option<u16>) {
    let (_pair, link, socket) = xdp_drop_sink(v6);
    let pool = pool(64 << 10, 8);
    let mut tx = UdpSender::new(
        socket,
        SenderConfig {
            send_timeout: Some(Duration::from_secs(20)),
            ..SenderConfig::with_mode(Mode::ZeroCopy)
        },
    );
    tx.set_gso_segment(gso);
    let size = if gso.is_some() { 1200 * 40 } else { 1400 };
    for i in 0..500u64 {
        let mut buf = take(&pool, &mut tx);
        buf.fill_with(size, |b| fill(b, i));
        tx.send(buf).expect("send");
    }
    tx.flush(Duration::from_secs(20)).expect("flush");
    let stats = tx.stats().clone();
    drop(tx);
    drop(link);
    assert_eq!(stats.zc_calls, 500);
    assert_eq!(stats.copied_ids, 0, "{stats:?}");
    assert_eq!(stats.zc_ids, 500);
    assert_eq!(pool.available(), pool.capacity());
}

#[test]
fn udp_into_xdp_drop_sink_is_zero_copy() {
    if !testnet::privileged("udp_into_xdp_drop_sink_is_zero_copy") {
        return;
    }
    for v6 in [false, true] {
        for gso in [None, Some(1200)] {
            sink_run(v6, gso);
        }
    }
}
