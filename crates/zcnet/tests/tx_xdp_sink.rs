//! UDP MSG_ZEROCOPY into a veth whose receiving end runs a native XDP program that drops every frame:
//! the one local path where the kernel does not copy, so completions must say zero-copied. Sends from
//! pooled buffers recycle as completions arrive; every buffer comes back.

mod tx_common;

use std::time::Duration;

use tx_common::{
    assert_every_send_zero_copied, pool, send_sizes, sender_config, xdp_drop_sink, xdp_sink_size,
};
use zcnet::tx::{Mode, UdpSender};

fn sink_run(v6: bool, gso: Option<u16>) {
    let (_pair, link, socket) = xdp_drop_sink(v6);
    let pool = pool(64 << 10, 8);
    let mut tx = UdpSender::new(socket, sender_config(Mode::ZeroCopy));
    tx.set_gso_segment(gso);
    send_sizes(&mut tx, &pool, &[xdp_sink_size(gso)], 500, |tx, b| {
        tx.send(b)
    });
    tx.flush(Duration::from_secs(20)).expect("flush");
    let stats = tx.stats().clone();
    drop(tx);
    drop(link);
    assert_every_send_zero_copied(&stats, &pool, 500);
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
