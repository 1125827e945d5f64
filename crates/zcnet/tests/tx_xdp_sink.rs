//! UDP MSG_ZEROCOPY into a veth whose receiving end runs a native XDP program that drops every frame:
//! the one local path where the kernel does not copy, so completions must say zero-copied. Sends from
//! pooled buffers recycle as completions arrive; every buffer comes back.

mod tx_common;

use std::time::Duration;

use tx_common::{send_sizes, sender_config, xdp_sink_run};
use zcnet::tx::{Mode, UdpSender};

#[test]
fn udp_into_xdp_drop_sink_is_zero_copy() {
    if !testnet::privileged("udp_into_xdp_drop_sink_is_zero_copy") {
        return;
    }
    for v6 in [false, true] {
        for gso in [None, Some(1200)] {
            xdp_sink_run(v6, gso, |socket, pool, size, sends| {
                let mut tx = UdpSender::new(socket, sender_config(Mode::ZeroCopy));
                tx.set_gso_segment(gso);
                send_sizes(&mut tx, pool, &[size], sends, |tx, b| tx.send(b));
                tx.flush(Duration::from_secs(20)).expect("flush");
                tx.stats().clone()
            });
        }
    }
}
