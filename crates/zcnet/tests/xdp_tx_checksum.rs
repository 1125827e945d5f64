//! `xdp::UdpEndpoint`'s UDP checksums through AF_XDP TX metadata, on a veth pair in copy mode:
//! every datagram reaches a plain UDP socket in the peer namespace intact, and a packet socket there
//! sees what the sending end put on the wire. With veth's transmit checksum offload on (its
//! default), an offloaded datagram arrives as the endpoint wrote it, carrying only the pseudo-header
//! sum (a `CHECKSUM_PARTIAL` skb the receiving stack trusts): its checksum field is wrong on the
//! wire, completing it gives the right frame, and the socket still takes it. With the offload off,
//! the kernel's transmit path completes the sum in software; with `Checksums::Software` the endpoint
//! writes whole checksums. A datagram with a wrong checksum and no offload request would be dropped
//! by the receiving socket, so each arrival proves its checksum right or offloaded.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use testnet::{Offloads, VethConfig, VethPair};
use zcnet::packet;
use zcnet::xdp::headers::{self, Malformed};
use zcnet::xdp::{BoundMode, Checksums, EndpointConfig, Mode, UdpEndpoint, interface_index};

/// The endpoint's port, and the peer socket's.
const PORT: u16 = 9400;
/// Datagrams sent.
const COUNT: usize = 200;
/// Bound on every wait (never reached when things work).
const PATIENCE: Duration = Duration::from_secs(10);
/// `ETH_P_ALL`: every frame.
const ETH_P_ALL: u16 = 0x0003;

/// Payload `seq`: 1 to 1400 bytes derived from the sequence number (odd lengths included).
fn payload(seq: usize) -> Vec<u8> {
    let len = 1 + (seq * 197) % 1400;
    (0..len).map(|i| (seq * 31 + i * 7) as u8).collect()
}

/// How the UDP checksum fields looked on the wire.
#[derive(Debug, Default, PartialEq, Eq)]
struct Wire {
    /// Whole, right checksums.
    whole: usize,
    /// Only the pseudo-header sum: completing it as a device does gives a right frame.
    pseudo_header: usize,
    /// Neither (to our port).
    other: usize,
}

/// Sends [`COUNT`] datagrams from an endpoint on `a`'s end to a UDP socket on `b`'s (IPv4 or IPv6),
/// checks that every one arrives intact, and returns whether the endpoint offloaded and what a
/// packet socket on `b`'s end saw.
fn run(offloads: Offloads, checksums: Checksums, v6: bool) -> (bool, Wire) {
    let pair = VethPair::new(VethConfig {
        offloads,
        ..VethConfig::default()
    })
    .expect("veth pair");
    pair.pin_b_neighbours().expect("static neighbours");
    let (local, peer): (IpAddr, IpAddr) = match v6 {
        false => (pair.a_v4.into(), pair.b_v4.into()),
        true => (pair.a_v6.into(), pair.b_v6.into()),
    };
    let (receiver, capture) = pair.b.run(|| {
        let receiver = UdpSocket::bind((peer, PORT)).expect("bind the peer socket");
        let ifindex = interface_index(&pair.b_if).expect("b's ifindex");
        let capture = packet::open(ifindex, ETH_P_ALL).expect("packet socket");
        (receiver, capture)
    });
    receiver.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let mut endpoint = pair.a.run(|| {
        let mut config = EndpointConfig::default();
        config.mode = Mode::Copy;
        config.checksums = checksums;
        UdpEndpoint::bind(&pair.a_if, SocketAddr::new(local, PORT), config).expect("bind")
    });
    assert_eq!(endpoint.sockets()[0].mode(), BoundMode::Copy);
    let to = SocketAddr::new(peer, PORT);
    let mut buf = vec![0u8; 2048];
    let mut seen = [false; COUNT];
    let mut wire = Wire::default();
    for round in (0..COUNT).step_by(20) {
        let mut batch = endpoint.send_batch();
        for seq in round..round + 20 {
            let bytes = payload(seq);
            batch
                .push(to, bytes.len(), |b| b.copy_from_slice(&bytes))
                .expect("build");
        }
        assert_eq!(batch.flush().expect("flush"), 20);
        for _ in 0..20 {
            let n = receiver.recv(&mut buf).expect("every datagram arrives");
            let seq = (0..COUNT)
                .find(|&s| payload(s) == buf[..n])
                .expect("a datagram arrived changed");
            assert!(!seen[seq], "datagram {seq} arrived twice");
            seen[seq] = true;
        }
        // Read the capture round by round: its socket buffer holds fewer frames than a run.
        capture_until(&capture, to, round + 20, &mut wire);
    }
    assert!(seen.iter().all(|&s| s));
    (endpoint.offloads_checksums(), wire)
}

/// Reads `capture` until `wire` counts `total` UDP frames to `to` (or [`PATIENCE`] passed), sorting
/// them by their checksum field.
fn capture_until(capture: &OwnedFd, to: SocketAddr, total: usize, wire: &mut Wire) {
    let mut frame = vec![0u8; 4096];
    let deadline = Instant::now() + PATIENCE;
    while wire.whole + wire.pseudo_header + wire.other < total && Instant::now() < deadline {
        let n = match packet::recv_nonblocking(capture.as_fd(), &mut frame) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(e) => panic!("capture: {e}"),
        };
        let frame = &mut frame[..n];
        match headers::parse(frame) {
            Ok(udp) if udp.dst == to => wire.whole += 1,
            Ok(_) => {}
            Err(Malformed::BadUdpChecksum) => {
                // Complete it as a device does a CHECKSUM_PARTIAL packet: sum from the UDP header
                // (its field holding the pseudo-header sum) to the end, store the complement.
                let at = headers::udp_offset(to.ip());
                let sum = headers::checksum(&frame[at..]);
                frame[at + 6..at + 8].copy_from_slice(&sum.to_be_bytes());
                match headers::parse(frame) {
                    Ok(udp) if udp.dst == to => wire.pseudo_header += 1,
                    // A frame to our port whose sum is neither whole nor the pseudo-header's.
                    _ if frame.get(at + 2..at + 4) == Some(&PORT.to_be_bytes()[..]) => {
                        wire.other += 1
                    }
                    _ => {}
                }
            }
            Err(_) => {}
        }
    }
}

#[test]
fn offloaded_checksums_leave_as_pseudo_header_sums_and_every_datagram_arrives() {
    let test = "offloaded_checksums_leave_as_pseudo_header_sums_and_every_datagram_arrives";
    if !testnet::privileged(test) {
        return;
    }
    let tx = zcnet::xdp::probe_tx_metadata_umem().expect("probe");
    if let Some(errno) = tx {
        println!("SKIP {test}: this kernel refuses a UMEM with TX metadata room (errno {errno})");
        return;
    }
    for v6 in [false, true] {
        let (offloaded, wire) = run(Offloads::default(), Checksums::Offload, v6);
        assert!(offloaded, "copy mode offloads here (v6 {v6})");
        let expected = Wire {
            pseudo_header: COUNT,
            ..Wire::default()
        };
        assert_eq!(wire, expected, "v6 {v6}");
    }
}

#[test]
fn without_device_offload_the_kernel_completes_the_offloaded_sum() {
    let test = "without_device_offload_the_kernel_completes_the_offloaded_sum";
    if !testnet::privileged(test) {
        return;
    }
    if zcnet::xdp::probe_tx_metadata_umem()
        .expect("probe")
        .is_some()
    {
        println!("SKIP {test}: this kernel refuses a UMEM with TX metadata room");
        return;
    }
    let off = Offloads {
        tx_checksum: false,
        ..Offloads::default()
    };
    let (offloaded, wire) = run(off, Checksums::Offload, false);
    assert!(offloaded);
    let expected = Wire {
        whole: COUNT,
        ..Wire::default()
    };
    assert_eq!(wire, expected);
}

#[test]
fn software_checksums_are_whole_on_the_wire() {
    if !testnet::privileged("software_checksums_are_whole_on_the_wire") {
        return;
    }
    for v6 in [false, true] {
        let (offloaded, wire) = run(Offloads::default(), Checksums::Software, v6);
        assert!(!offloaded);
        let expected = Wire {
            whole: COUNT,
            ..Wire::default()
        };
        assert_eq!(wire, expected, "v6 {v6}");
    }
}
