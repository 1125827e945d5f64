//! UDP zero-copy into a veth whose receiving end runs a native XDP program that drops every frame:
//! the one local path where the kernel does not copy, so completions (MSG_ZEROCOPY) and
//! notifications (io_uring's REPORT_USAGE) must say zero-copied. One body runs on both submission
//! paths; pooled buffers (registered on io_uring) recycle as completions arrive; every one comes
//! back.

mod tx_common;

use std::time::Duration;

use tx_common::{path_config, send_sizes, sender_on, xdp_sink_run};
use zcnet::tx::Mode;

each_path! {
    fn udp_into_xdp_drop_sink_is_zero_copy(path: SendPath) {
        if !tx_common::privileged(path, "udp_into_xdp_drop_sink_is_zero_copy") {
            return;
        }
        for v6 in [false, true] {
            for gso in [None, Some(1200)] {
                xdp_sink_run(v6, gso, |socket, pool, size, sends| {
                    let mut tx = sender_on(socket, path_config(path, Mode::ZeroCopy), pool);
                    tx.set_gso_segment(gso).expect("UDP_SEGMENT");
                    send_sizes(&mut tx, pool, &[size], sends, |tx, b| tx.send(b));
                    tx.flush(Duration::from_secs(20)).expect("flush");
                    tx.stats().clone()
                });
            }
        }
    }
}
