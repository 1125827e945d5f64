//! AF_XDP multi-buffer (`XDP_USE_SG`) in copy mode over a veth pair with a 9000-byte MTU: frames of
//! 64, 1500 and 9000 bytes arrive as packets of one or several UMEM frames with every byte verified,
//! and 9000-byte packets sent as several frames arrive whole at the peer's UDP socket.

mod xdp_common;

use std::collections::BTreeSet;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use testnet::frame::{UDP_HEADERS, udp_payload};
use testnet::{VethConfig, VethPair};
use xdp_common::{PATIENCE, PORT, assert_all_arrived, frames, peer_receiver, read_paced, record};
use zcnet::packet;
use zcnet::xdp::{
    AttachMode, BoundMode, FrameMatch, Mode, Packet, Socket, SocketConfig, Umem, UmemConfig,
    interface_index,
};

const MTU: u32 = 9000;
/// Payload of a UDP datagram filling the MTU: 9000 - 20 (IPv4) - 8 (UDP).
const JUMBO_PAYLOAD: usize = MTU as usize - 28;
const PACKETS: u64 = 600;

fn jumbo_pair() -> VethPair {
    VethPair::new(VethConfig {
        mtu: MTU,
        ..VethConfig::default()
    })
    .expect("veth pair with a 9000-byte MTU")
}

fn multi_buffer(rx: bool, tx: bool) -> SocketConfig {
    let mut config = SocketConfig::default();
    config.rx_size = if rx { 2048 } else { 0 };
    config.tx_size = if tx { 2048 } else { 0 };
    config.multi_buffer = true;
    config
}

/// Payload length of packet `seq`: the sizes cycle through a 64-byte frame, a 1500-byte one and a
/// 9000-byte one (frame lengths 64, 1514, 9014).
fn payload_len(seq: u64) -> usize {
    [64 - UDP_HEADERS, 1500 - 28, JUMBO_PAYLOAD][(seq % 3) as usize]
}

#[test]
fn frames_up_to_9000_bytes_arrive_whole_in_copy_mode() {
    if !testnet::privileged("frames_up_to_9000_bytes_arrive_whole_in_copy_mode") {
        return;
    }
    let pair = jumbo_pair();
    let (mut umem, mut socket, _program, _link) = pair.a.run(|| {
        let mut umem = Umem::new(UmemConfig::default()).expect("umem");
        let mut socket = Socket::bind_with(
            &mut umem,
            &pair.a_if,
            0,
            Mode::Copy,
            multi_buffer(true, false),
        )
        .expect("bind with XDP_USE_SG");
        assert!(socket.uses_multi_buffer());
        assert_eq!(socket.mode(), BoundMode::Copy);
        assert_eq!(socket.fill(&mut umem, u32::MAX).expect("fill"), 2048);
        let program =
            zcnet::xdp::XdpProgram::redirect_to_xsk_multi_buffer(1, FrameMatch::UdpPort(PORT))
                .expect("load the redirect program for multi-buffer");
        program
            .xsk_map()
            .expect("map")
            .insert(0, &socket)
            .expect("insert");
        let link = program
            .attach_to(&pair.a_if, AttachMode::Driver)
            .expect("attach with a 9000-byte MTU");
        (umem, socket, program, link)
    });
    let spec = frames(&pair, false);
    let (seen, spanned) = thread::scope(|s| {
        let sender = s.spawn(|| {
            pair.b.run(|| {
                let ifindex = interface_index(&pair.b_if).expect("ifindex");
                let fd = packet::open(ifindex, 0).expect("packet socket");
                let mut buf = vec![0u8; MTU as usize + 14];
                for seq in 0..PACKETS {
                    let n = spec
                        .write(&mut buf, seq, payload_len(seq))
                        .expect("frame fits");
                    packet::send(fd.as_fd(), &buf[..n]).expect("send");
                    if seq % 16 == 15 {
                        thread::sleep(Duration::from_millis(1));
                    }
                }
            })
        });
        let mut seen = BTreeSet::new();
        let mut spanned = 0u64;
        let mut packets: Vec<Packet> = Vec::new();
        let mut bytes = Vec::new();
        let deadline = Instant::now() + PATIENCE;
        while (seen.len() as u64) < PACKETS && Instant::now() < deadline {
            socket
                .wait_rx(Some(Duration::from_millis(100)))
                .expect("poll");
            let invalid = socket
                .receive_packets(&mut umem, 64, &mut packets)
                .expect("rx");
            assert_eq!(invalid, 0, "kernel descriptors are valid");
            for packet in packets.drain(..) {
                bytes.clear();
                umem.copy_packet(&packet, &mut bytes);
                assert_eq!(bytes.len(), packet.len());
                let Some((PORT, payload)) = udp_payload(&bytes) else {
                    panic!("a {}-byte frame that is not ours", bytes.len());
                };
                let seq = testnet::frame::check_payload(payload).expect("payload checksum");
                assert_eq!(payload.len(), payload_len(seq), "sequence {seq}");
                if packet.frames().len() > 1 {
                    spanned += 1;
                }
                record(&mut seen, payload);
                let mut frames = packet.into_frames();
                socket.fill_with(&mut umem, &mut frames).expect("refill");
                for frame in frames {
                    umem.release(frame);
                }
            }
        }
        sender.join().expect("sender");
        (seen, spanned)
    });
    assert_all_arrived(&seen, PACKETS);
    assert_eq!(
        spanned,
        PACKETS / 3,
        "every 9000-byte frame spans several UMEM frames"
    );
    let stats = socket.statistics().expect("stats");
    assert_eq!(stats.invalid_descs(), 0, "{stats:?}");
    assert_eq!(stats.rx_dropped, 0, "{stats:?}");
}

#[test]
fn packets_of_several_frames_are_sent_whole() {
    if !testnet::privileged("packets_of_several_frames_are_sent_whole") {
        return;
    }
    let pair = jumbo_pair();
    let receiver = peer_receiver(&pair);
    let (mut umem, mut socket) = pair.a.run(|| {
        let mut umem = Umem::new(UmemConfig::default()).expect("umem");
        let socket = Socket::bind_with(
            &mut umem,
            &pair.a_if,
            0,
            Mode::Copy,
            multi_buffer(false, true),
        )
        .expect("bind with XDP_USE_SG");
        (umem, socket)
    });
    let spec = frames(&pair, true);
    // The sender stays at most 8 packets ahead of the reader: 8 jumbo datagrams fit the socket buffer.
    let arrived = AtomicU64::new(0);
    let seen = thread::scope(|s| {
        let reader = s.spawn(|| {
            read_paced(&receiver, PACKETS, MTU as usize, &arrived, |payload| {
                let seq = testnet::frame::check_payload(payload).expect("payload checksum");
                assert_eq!(payload.len(), payload_len(seq), "sequence {seq}");
            })
        });
        let mut whole = vec![0u8; MTU as usize + 14];
        let mut seq = 0;
        let mut pending: Vec<zcnet::xdp::Frame> = Vec::new();
        let deadline = Instant::now() + PATIENCE;
        while seq < PACKETS && Instant::now() < deadline {
            socket.reclaim(&mut umem, u32::MAX).expect("reclaim");
            if pending.is_empty() && seq < arrived.load(Ordering::Acquire) + 8 {
                // One packet, cut into frames of at most a frame's size.
                let n = spec
                    .write(&mut whole, seq, payload_len(seq))
                    .expect("frame fits");
                let mut parts = Vec::new();
                for chunk in whole[..n].chunks(umem.frame_size() as usize) {
                    let Some(mut frame) = umem.alloc() else { break };
                    umem.buffer_mut(&mut frame)[..chunk.len()].copy_from_slice(chunk);
                    assert!(frame.set_len(chunk.len() as u32));
                    parts.push(frame);
                }
                pending = Packet::new(parts).into_frames();
            }
            let before = pending.len();
            socket.transmit(&mut umem, &mut pending).expect("tx ring");
            if pending.is_empty() && before > 0 {
                seq += 1;
            }
            socket.wake_tx().expect("wake tx");
            if pending.len() == before {
                thread::sleep(Duration::from_millis(1));
            }
        }
        reader.join().expect("reader")
    });
    assert_all_arrived(&seen, PACKETS);
    let stats = socket.statistics().expect("stats");
    assert_eq!(stats.invalid_descs(), 0, "{stats:?}");
}

#[test]
fn zero_copy_multi_buffer_refused_by_veth_is_a_typed_fallback() {
    if !testnet::privileged("zero_copy_multi_buffer_refused_by_veth_is_a_typed_fallback") {
        return;
    }
    let pair = jumbo_pair();
    pair.a.run(|| {
        let mut umem = Umem::new(UmemConfig::default()).expect("umem");
        let config = multi_buffer(true, false);
        let err = Socket::bind_with(&mut umem, &pair.a_if, 0, Mode::ZeroCopy, config)
            .expect_err("veth has no zero-copy");
        assert_eq!(err.raw_os_error(), Some(libc::EOPNOTSUPP), "{err}");
        assert!(err.to_string().contains("XDP_USE_SG"), "{err}");
        let socket =
            Socket::bind_with(&mut umem, &pair.a_if, 0, Mode::Auto, config).expect("auto binds");
        assert_eq!(socket.mode(), BoundMode::Copy);
        assert!(socket.uses_multi_buffer());
        let fallback = socket.zerocopy_status().expect_err("the reason");
        assert_eq!(fallback.raw_os_error(), Some(libc::EOPNOTSUPP));
        let text = fallback.to_string();
        assert!(
            text.contains("XDP_USE_SG") && text.contains("copy mode"),
            "{text}"
        );
    });
}
