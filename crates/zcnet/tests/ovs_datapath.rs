//! A datapath in a fresh namespace, fed through its local port: MISS upcalls carry every frame byte
//! for byte in both upcall formats, a flow installed from the upcall's key turns the next frame into a
//! hit, and deleting the datapath leaves nothing. This host's kernel has no openvswitch module: here
//! the test skips with the reason, and the guest suite (`vm/run-suite ovs`) runs the datapath checks.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use testnet::Netns;
use testnet::frame::UdpFrame;
use zcnet::ovs::{self, Datapath, DatapathConfig, Dispatch, Received, UpcallKind, UpcallSocket};

const TEST: &str = "ovs_local_port_upcalls_carry_every_byte_and_flows_turn_misses_into_hits";

fn frame(len: usize, port: u16) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let udp = UdpFrame {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        src_ip: Ipv4Addr::new(10, 9, 0, 1),
        dst_ip: Ipv4Addr::new(10, 9, 0, 2),
        src_port: port,
        dst_port: 9,
    };
    let n = udp.write(&mut buf, u64::from(port), len - 42).unwrap();
    assert_eq!(n, len);
    buf
}

/// The first MISS upcall within two seconds, as (packet bytes, key bytes, in_port).
fn next_miss(upcalls: &mut UpcallSocket) -> (Vec<u8>, Vec<u8>, Option<u32>) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        upcalls.wait(Duration::from_millis(100)).unwrap();
        while let Some(r) = upcalls.recv().unwrap() {
            if let Received::Upcall(up) = r
                && up.kind == UpcallKind::Miss
                && up.key.udp.is_some()
            {
                return (up.packet.to_vec(), up.key.raw().to_vec(), up.key.in_port);
            }
        }
    }
    panic!("no MISS upcall within 2 s");
}

#[test]
fn ovs_local_port_upcalls_carry_every_byte_and_flows_turn_misses_into_hits() {
    if !testnet::privileged(TEST) {
        return;
    }
    let ns = Netns::create("o").expect("namespace");
    ns.run(|| {
        match ovs::datapaths() {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                testnet::skip(
                    TEST,
                    "this kernel has no openvswitch module; the guest suite's ovs run (vm/run-suite ovs) checks upcalls and hits on a NIC and a veth port, not the local port",
                );
                return;
            }
            Err(e) => panic!("{e}"),
        }
        for (i, unaligned) in [false, true].into_iter().enumerate() {
            let mut upcalls = UpcallSocket::open().unwrap();
            let name = format!("zc{}-t{i}", std::process::id());
            let mut config = DatapathConfig::default();
            config.unaligned = unaligned;
            config.dispatch = Dispatch::PerVport;
            let mut dp = Datapath::create(&name, config, &upcalls).unwrap();
            assert_eq!(dp.info().unwrap().user_features, config.user_features());
            let port = dp.local_port().unwrap();
            for (j, len) in [60usize, 61, 1001, 1514].into_iter().enumerate() {
                let sent = frame(len, 1000 + j as u16);
                port.send(&sent).unwrap();
                let (packet, key, in_port) = next_miss(&mut upcalls);
                assert_eq!(packet, sent, "{len}-byte frame, unaligned {unaligned}");
                assert_eq!(in_port, Some(0));
                dp.install_flow(&key, &[]).unwrap();
                let hits = dp.info().unwrap().stats.n_hit;
                port.send(&sent).unwrap();
                assert_eq!(dp.info().unwrap().stats.n_hit, hits + 1, "{len}: a hit");
            }
            assert!(dp.flows().unwrap().len() >= 4);
            // A packet longer than an attribute's 16-bit length can say is refused before it is
            // sent, not sent with a wrapped length.
            let (_, key, _) = {
                port.send(&frame(200, 2000)).unwrap();
                next_miss(&mut upcalls)
            };
            let err = dp.execute(&vec![0; 65_532], &key, &[]).unwrap_err();
            assert_eq!(
                (err.call(), err.raw_os_error()),
                ("OVS_PACKET_CMD_EXECUTE", None),
                "{err}"
            );
            assert!(err.to_string().contains("65531"), "{err}");
            dp.delete().unwrap();
            assert!(
                ovs::datapaths().unwrap().iter().all(|d| d.name != name),
                "{name} deleted"
            );
        }
    });
}
