//! UDP MSG_ZEROCOPY into a veth whose receiving end runs a native XDP program that drops every frame:
//! the one local path where the kernel does not copy, so completions must say zero-copied. Sends from
//! pooled buffers recycle as completions arrive; every buffer comes back.

mod tx_common;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use testnet::{VethConfig, VethPair};
use tx_common::{fill, pool, take};
use zcnet::tx::{Mode, SenderConfig, UdpSender};
use zcnet::xdp::{AttachMode, XdpProgram};

fn sink_run(v6: bool, gso: Option<u16>) {
    let pair = VethPair::new(VethConfig::default()).expect("veth pair");
    let link = pair
        .b
        .run(|| XdpProgram::drop_all()?.attach_to(&pair.b_if, AttachMode::Driver))
        .expect("attach the XDP drop program");
    // The drop program also drops ARP and neighbour discovery: resolve the peer statically.
    pair.pin_b_neighbours().unwrap();
    let (src, dst): (IpAddr, IpAddr) = if v6 {
        (pair.a_v6.into(), pair.b_v6.into())
    } else {
        (pair.a_v4.into(), pair.b_v4.into())
    };
    let socket = pair.a.run(|| UdpSocket::bind((src, 0))).unwrap();
    socket.connect(SocketAddr::new(dst, 9)).unwrap();
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
