//! AF_XDP sockets on a veth pair: receive, transmit, forward with a shared UMEM, and the zero-copy
//! fallback. Frames carry sequence-numbered, checksummed payloads; every test checks that each
//! sequence number arrived exactly once and intact.

use std::collections::BTreeSet;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

mod xdp_common;

use testnet::VethPair;
use testnet::frame::{UdpFrame, swap_macs, udp_payload};
use xdp_common::{PATIENCE, PORT, assert_all_arrived, frames, peer_receiver, read_paced, record};
use zcnet::packet;
use zcnet::xdp::{
    AttachMode, BoundMode, FrameMatch, FrameSize, Mode, Reclaimed, Socket, SocketConfig, Umem,
    UmemConfig, XdpLink, XdpProgram, interface_index, probe_zero_copy,
};

const FRAMES: u64 = 2000;

/// Sends `FRAMES` frames from `b` through a raw packet socket, pausing every 32 so that nothing
/// overflows (veth's 256-frame ring, the receiver's rings).
fn send_from_b(pair: &VethPair, spec: UdpFrame, payload_len: usize) {
    pair.b.run(|| {
        let fd =
            packet::open(interface_index(&pair.b_if).expect("ifindex"), 0).expect("packet socket");
        let mut buf = [0u8; 2048];
        for seq in 0..FRAMES {
            let n = spec.write(&mut buf, seq, payload_len).expect("frame fits");
            packet::send(fd.as_fd(), &buf[..n]).expect("send");
            if seq % 32 == 31 {
                thread::sleep(Duration::from_millis(1));
            }
        }
    });
}

/// Attaches the redirect program on `a_if` and puts `socket` in its map (inside namespace `a`).
fn redirect_to(pair: &VethPair, socket: &Socket) -> (XdpProgram, XdpLink) {
    pair.a.run(|| {
        let program =
            XdpProgram::redirect_to_xsk(1, FrameMatch::All).expect("load redirect program");
        program
            .xsk_map()
            .expect("map")
            .insert(0, socket)
            .expect("insert socket");
        let link = program
            .attach_to(&pair.a_if, AttachMode::Driver)
            .expect("attach");
        (program, link)
    })
}

#[test]
fn frames_from_the_peer_arrive_intact() {
    if !testnet::privileged("frames_from_the_peer_arrive_intact") {
        return;
    }
    receive_all(UmemConfig::default());
}

#[test]
fn frames_arrive_intact_in_page_sized_frames_on_huge_pages() {
    if !testnet::privileged("frames_arrive_intact_in_page_sized_frames_on_huge_pages") {
        return;
    }
    receive_all({
        let mut config = UmemConfig::default();
        config.frame_size = FrameSize::Page;
        config.headroom = 128;
        config.huge_pages = true;
        config
    });
}

/// Sends `FRAMES` frames from the peer and checks that each arrives once, intact, in the AF_XDP
/// socket, recycling every frame through the fill ring.
fn receive_all(config: UmemConfig) {
    let pair = VethPair::one_queue().expect("veth pair");
    let (umem, socket) = pair.a.run(|| {
        let mut umem = Umem::new(config).expect("umem");
        let socket = Socket::bind(&mut umem, &pair.a_if, 0, Mode::Copy).expect("bind copy");
        (umem, socket)
    });
    receive_all_on(&pair, umem, socket);
}

/// [`receive_all`] with a socket bound on `pair.a_if` queue 0.
fn receive_all_on(pair: &VethPair, mut umem: Umem, mut socket: Socket) {
    assert_eq!(socket.fill(&mut umem, u32::MAX).expect("fill"), 2048);
    receive_every_frame(pair, &mut umem, &mut socket);
}

/// [`receive_all_on`] with the queue's fill ring already filled.
fn receive_every_frame(pair: &VethPair, umem: &mut Umem, socket: &mut Socket) {
    assert_eq!(socket.mode(), BoundMode::Copy);
    let (_program, link) = redirect_to(pair, socket);
    let spec = frames(pair, false);
    let sender = thread::scope(|s| {
        let sender = s.spawn(|| send_from_b(pair, spec, 100));
        let mut seen = BTreeSet::new();
        let deadline = Instant::now() + PATIENCE;
        let mut frames = Vec::new();
        while (seen.len() as u64) < FRAMES && Instant::now() < deadline {
            socket
                .wait_rx(Some(Duration::from_millis(100)))
                .expect("poll");
            let invalid = socket.receive(umem, 64, &mut frames).expect("rx ring");
            assert_eq!(invalid, 0, "kernel descriptors are valid");
            for frame in &frames {
                if let Some((PORT, payload)) = udp_payload(umem.bytes(frame)) {
                    assert_eq!(payload.len(), 100);
                    record(&mut seen, payload);
                }
            }
            socket.fill_with(umem, &mut frames).expect("refill");
            for frame in frames.drain(..) {
                umem.release(frame);
            }
        }
        sender.join().expect("sender");
        seen
    });
    assert_all_arrived(&sender, FRAMES);
    let stats = socket.statistics().expect("stats");
    assert_eq!(stats.invalid_descs(), 0, "{stats:?}");
    assert_eq!(stats.rx_dropped, 0, "{stats:?}");
    drop(link);
    let shown = pair.a.link_once_xdp_detached(&pair.a_if).expect("ip");
    assert!(!shown.contains("prog/xdp"), "still attached: {shown}");
}

/// Dropping a socket unbinds its queue while its UMEM lives: a socket of another UMEM binds that
/// queue right away; when the UMEM binds the queue again, the frames the closed socket's rings held
/// (fill and tx) are back on its free list while a frame the user holds stays the user's, and every
/// frame sent arrives intact.
#[test]
fn a_dropped_socket_frees_its_queue_and_its_frames() {
    if !testnet::privileged("a_dropped_socket_frees_its_queue_and_its_frames") {
        return;
    }
    let pair = VethPair::one_queue().expect("veth pair");
    let (umem, socket) = pair.a.run(|| {
        let mut umem = Umem::new(UmemConfig::default()).expect("umem");
        let total = umem.frame_count() as usize;
        let mut socket = Socket::bind(&mut umem, &pair.a_if, 0, Mode::Copy).expect("bind");
        assert_eq!(socket.fill(&mut umem, u32::MAX).expect("fill"), 2048);
        let held = umem.alloc().expect("a frame the user holds");
        let mut frame = umem.alloc().expect("a frame to send");
        assert!(frame.set_len(60));
        // On the tx ring, never sent: copy mode sends only when woken.
        let mut tx = vec![frame];
        assert_eq!(socket.transmit(&mut umem, &mut tx).expect("tx"), 1);
        assert_eq!(umem.free_frames(), total - 2048 - 2);
        drop(socket);
        assert_eq!(
            umem.free_frames(),
            total - 2048 - 2,
            "lent until the queue is bound again: the kernel may not have let go yet"
        );
        let started = Instant::now();
        let mut other = Umem::new(UmemConfig::default()).expect("umem");
        let other_socket =
            Socket::bind(&mut other, &pair.a_if, 0, Mode::Copy).expect("the queue is free");
        println!(
            "a socket of another UMEM bound the queue {:?} after the drop",
            started.elapsed()
        );
        drop(other_socket);
        let socket = Socket::bind(&mut umem, &pair.a_if, 0, Mode::Copy).expect("bind again");
        assert!(
            !socket.shares_umem(),
            "registered anew: no socket used it any more"
        );
        assert_eq!(
            umem.free_frames(),
            total - 1,
            "fill and tx ring frames came back"
        );
        umem.release(held);
        assert_eq!(umem.free_frames(), total);
        (umem, socket)
    });
    receive_all_on(&pair, umem, socket);
}

/// Sockets of a UMEM on one queue share the queue's fill and completion rings, which outlive any one
/// of them: with the queue's first socket dropped, the second receives every frame into what the
/// first lent the fill ring, recycles through the same ring, sends and reclaims; once it is dropped
/// too, every frame comes back when the UMEM binds the queue again.
#[test]
fn a_shared_queue_keeps_working_when_its_first_socket_is_dropped() {
    if !testnet::privileged("a_shared_queue_keeps_working_when_its_first_socket_is_dropped") {
        return;
    }
    let pair = VethPair::one_queue().expect("veth pair");
    let (mut umem, mut second, total) = pair.a.run(|| {
        let mut umem = Umem::new(UmemConfig::default()).expect("umem");
        let total = umem.frame_count() as usize;
        let mut first = Socket::bind(&mut umem, &pair.a_if, 0, Mode::Copy).expect("bind");
        let second = Socket::bind(&mut umem, &pair.a_if, 0, Mode::Copy).expect("shared bind");
        assert!(!first.shares_umem() && second.shares_umem());
        assert_eq!(first.fill(&mut umem, u32::MAX).expect("fill"), 2048);
        // On the first socket's tx ring, never sent: copy mode sends only when woken.
        let mut frame = umem.alloc().expect("frame");
        assert!(frame.set_len(60));
        let mut tx = vec![frame];
        assert_eq!(first.transmit(&mut umem, &mut tx).expect("tx"), 1);
        drop(first);
        (umem, second, total)
    });
    receive_every_frame(&pair, &mut umem, &mut second);
    // The second socket sends through its own tx ring and reclaims through the queue's completion
    // ring.
    let mut frame = umem.alloc().expect("frame");
    assert!(frame.set_len(60));
    umem.bytes_mut(&mut frame).fill(0xff);
    let mut tx = vec![frame];
    assert_eq!(second.transmit(&mut umem, &mut tx).expect("tx"), 1);
    let deadline = Instant::now() + PATIENCE;
    let mut reclaimed = 0;
    while reclaimed == 0 && Instant::now() < deadline {
        second.wake_tx().expect("wake");
        let Reclaimed {
            frames: done,
            skipped: invalid,
            ..
        } = second.reclaim(&mut umem, 8).expect("reclaim");
        assert_eq!(invalid, 0);
        reclaimed += done;
        thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(reclaimed, 1, "the sent frame came back");
    drop(second);
    pair.a.run(|| {
        let again = Socket::bind(&mut umem, &pair.a_if, 0, Mode::Copy).expect("bind again");
        assert!(
            !again.shares_umem(),
            "registered anew: no socket used it any more"
        );
        assert_eq!(
            umem.free_frames(),
            total,
            "the fill ring's frames and the closed socket's unsent one came back"
        );
    });
}

/// Failed binds, first or sharing, leave the UMEM as it was: the next bind works and receives.
#[test]
fn a_failed_bind_leaves_the_umem_reusable() {
    if !testnet::privileged("a_failed_bind_leaves_the_umem_reusable") {
        return;
    }
    let pair = VethPair::one_queue().expect("veth pair");
    let (umem, socket) = pair.a.run(|| {
        let mut umem = Umem::new(UmemConfig::default()).expect("umem");
        let total = umem.frame_count() as usize;
        let err = Socket::bind(&mut umem, &pair.a_if, 5, Mode::Copy).expect_err("no queue 5");
        assert!(err.to_string().contains("queue 5"), "{err}");
        let err = Socket::bind(&mut umem, &pair.a_if, 0, Mode::ZeroCopy).expect_err("veth");
        assert_eq!(err.raw_os_error(), Some(libc::EOPNOTSUPP), "{err}");
        assert_eq!(umem.free_frames(), total);
        let socket = Socket::bind(&mut umem, &pair.a_if, 0, Mode::Copy).expect("bind");
        assert!(!socket.shares_umem());
        let err = Socket::bind(&mut umem, &pair.a_if, 7, Mode::Copy).expect_err("no queue 7");
        assert!(err.to_string().contains("XDP_SHARED_UMEM"), "{err}");
        let sharing = Socket::bind(&mut umem, &pair.a_if, 0, Mode::Copy).expect("shared bind");
        assert!(sharing.shares_umem());
        drop(sharing);
        assert_eq!(umem.free_frames(), total);
        (umem, socket)
    });
    receive_all_on(&pair, umem, socket);
}

#[test]
fn zero_copy_on_veth_fails_clearly_and_auto_falls_back_to_copy() {
    if !testnet::privileged("zero_copy_on_veth_fails_clearly_and_auto_falls_back_to_copy") {
        return;
    }
    let pair = VethPair::one_queue().expect("veth pair");
    pair.a.run(|| {
        let mut umem = Umem::new(UmemConfig::default()).expect("umem");
        let err = Socket::bind(&mut umem, &pair.a_if, 0, Mode::ZeroCopy)
            .expect_err("no zero-copy on veth");
        assert_eq!(err.raw_os_error(), Some(libc::EOPNOTSUPP), "{err}");
        let text = err.to_string();
        for part in [
            "XDP_ZEROCOPY",
            pair.a_if.as_str(),
            "queue 0",
            "EOPNOTSUPP",
            "copy mode",
        ] {
            assert!(text.contains(part), "{part:?} missing in: {text}");
        }
        // The failed bind leaves the UMEM usable: the same UMEM binds in Auto mode.
        let socket = Socket::bind(&mut umem, &pair.a_if, 0, Mode::Auto).expect("auto binds");
        assert_eq!(socket.mode(), BoundMode::Copy);
        let fallback = socket.zerocopy_status().expect_err("reason");
        assert_eq!(fallback.raw_os_error(), Some(libc::EOPNOTSUPP));
        assert!(fallback.to_string().contains("EOPNOTSUPP"), "{fallback}");
    });
    // A closed socket releases its queue asynchronously (the kernel defers it to a workqueue), so
    // the probe uses the other end of the pair.
    pair.b.run(|| {
        let refused = probe_zero_copy(&pair.b_if, 0)
            .expect("probe")
            .expect_err("veth has no zero-copy");
        assert_eq!(refused.raw_os_error(), Some(libc::EOPNOTSUPP));
        assert!(refused.to_string().contains("EOPNOTSUPP"), "{refused}");
        let missing = probe_zero_copy("zcnet-missing0", 0).expect_err("no such interface");
        assert!(missing.to_string().contains("zcnet-missing0"), "{missing}");
    });
}

#[test]
fn a_bound_queue_is_busy() {
    if !testnet::privileged("a_bound_queue_is_busy") {
        return;
    }
    let pair = VethPair::one_queue().expect("veth pair");
    pair.a.run(|| {
        let mut first = Umem::new(UmemConfig::default()).expect("umem");
        let _socket = Socket::bind(&mut first, &pair.a_if, 0, Mode::Copy).expect("bind");
        let mut second = Umem::new(UmemConfig::default()).expect("umem");
        let err = Socket::bind(&mut second, &pair.a_if, 0, Mode::Copy).expect_err("queue taken");
        assert_eq!(err.raw_os_error(), Some(libc::EBUSY), "{err}");
        let mut third = Umem::new(UmemConfig::default()).expect("umem");
        let err = Socket::bind(&mut third, &pair.a_if, 5, Mode::Copy).expect_err("no queue 5");
        assert!(err.to_string().contains("queue 5"), "{err}");
    });
}

#[test]
fn txpush_frames_arrive_at_the_peer_intact() {
    if !testnet::privileged("txpush_frames_arrive_at_the_peer_intact") {
        return;
    }
    let pair = VethPair::one_queue().expect("veth pair");
    let receiver = peer_receiver(&pair);
    let (mut umem, mut socket) = pair.a.run(|| {
        let mut umem = Umem::new(UmemConfig::default()).expect("umem");
        let mut config = SocketConfig::default();
        config.rx_size = 0;
        let socket = Socket::bind_with(&mut umem, &pair.a_if, 0, Mode::Auto, config).expect("bind");
        (umem, socket)
    });
    let spec = frames(&pair, true);
    // The sender stays at most a window ahead of the reader, so that a reader starved by a busy host
    // never finds its socket buffer overflowed.
    let arrived = AtomicU64::new(0);
    let seen = thread::scope(|s| {
        let reader = s.spawn(|| read_paced(&receiver, FRAMES, 2048, &arrived, |_| {}));
        let mut seq = 0;
        let deadline = Instant::now() + PATIENCE;
        while seq < FRAMES && Instant::now() < deadline {
            if seq >= arrived.load(Ordering::Acquire) + 64 {
                thread::sleep(Duration::from_millis(1));
                continue;
            }
            socket.reclaim(&mut umem, 64).expect("reclaim");
            let mut batch = Vec::new();
            while batch.len() < 32 && seq + (batch.len() as u64) < FRAMES {
                let Some(mut frame) = umem.alloc() else { break };
                let buf = umem.buffer_mut(&mut frame);
                let len = spec
                    .write(buf, seq + batch.len() as u64, 200)
                    .expect("fits") as u32;
                assert!(frame.set_len(len));
                batch.push(frame);
            }
            let sent = socket.transmit(&mut umem, &mut batch).expect("tx ring");
            for frame in batch {
                umem.release(frame);
            }
            seq += u64::from(sent);
            socket.wake_tx().expect("wake tx");
            thread::sleep(Duration::from_millis(1));
        }
        reader.join().expect("reader")
    });
    assert_all_arrived(&seen, FRAMES);
    assert_eq!(socket.statistics().expect("stats").invalid_descs(), 0);
}

#[test]
fn l2fwd_returns_frames_with_swapped_macs_through_a_shared_umem() {
    if !testnet::privileged("l2fwd_returns_frames_with_swapped_macs_through_a_shared_umem") {
        return;
    }
    let pair = VethPair::one_queue().expect("veth pair");
    let (a_mac, b_mac) = (
        pair.mac(&pair.a_if).expect("mac"),
        pair.mac(&pair.b_if).expect("mac"),
    );
    let (mut umem, mut rx_socket, mut tx_socket) = pair.a.run(|| {
        let mut umem = Umem::new(UmemConfig::default()).expect("umem");
        let mut rx_only = SocketConfig::default();
        rx_only.tx_size = 0;
        let mut tx_only = SocketConfig::default();
        tx_only.rx_size = 0;
        let rx = Socket::bind_with(&mut umem, &pair.a_if, 0, Mode::Copy, rx_only).expect("rx bind");
        let tx = Socket::bind_with(&mut umem, &pair.a_if, 0, Mode::Copy, tx_only).expect("tx bind");
        (umem, rx, tx)
    });
    assert!(!rx_socket.shares_umem() && tx_socket.shares_umem());
    assert_eq!(
        tx_socket.mode(),
        BoundMode::Copy,
        "inherited from the UMEM's first socket"
    );
    rx_socket.fill(&mut umem, u32::MAX).expect("fill");
    let (_program, _link) = redirect_to(&pair, &rx_socket);
    let listener = pair.b.run(|| {
        packet::open(
            interface_index(&pair.b_if).expect("ifindex"),
            libc::ETH_P_IP as u16,
        )
        .expect("listener")
    });
    let spec = frames(&pair, false);
    let seen = thread::scope(|s| {
        let sender = s.spawn(|| send_from_b(&pair, spec, 64));
        let mut seen = BTreeSet::new();
        let mut forwarded = 0u64;
        let mut buf = [0u8; 2048];
        let deadline = Instant::now() + PATIENCE;
        while (seen.len() as u64) < FRAMES && Instant::now() < deadline {
            // Forward: received frames go to the tx ring as they are (same UMEM): only addresses move.
            let mut frames = Vec::new();
            let invalid = rx_socket.receive(&mut umem, 64, &mut frames).expect("rx");
            assert_eq!(invalid, 0);
            let received = frames.len();
            for frame in &mut frames {
                swap_macs(umem.bytes_mut(frame));
            }
            forwarded += u64::from(tx_socket.transmit(&mut umem, &mut frames).expect("tx"));
            assert!(frames.is_empty(), "tx ring as large as the rx batch");
            tx_socket.wake_tx().expect("wake");
            // The tx socket's frames complete on the queue's completion ring, which both sockets
            // share: either reclaims and fills.
            let Reclaimed {
                frames: done,
                skipped: invalid,
                ..
            } = tx_socket.reclaim(&mut umem, 64).expect("reclaim");
            assert_eq!(invalid, 0);
            if done > 0 {
                tx_socket.fill(&mut umem, done).expect("fill");
            }
            // Collect what came back to b.
            while let Ok(n) = packet::recv_nonblocking(listener.as_fd(), &mut buf) {
                let f = &buf[..n];
                if let Some((PORT, payload)) = udp_payload(f) {
                    assert_eq!(
                        (&f[..6], &f[6..12]),
                        (&b_mac[..], &a_mac[..]),
                        "MACs swapped"
                    );
                    record(&mut seen, payload);
                }
            }
            if received == 0 {
                rx_socket
                    .wait_rx(Some(Duration::from_millis(1)))
                    .expect("poll");
            }
        }
        sender.join().expect("sender");
        assert!(forwarded >= FRAMES);
        seen
    });
    assert_all_arrived(&seen, FRAMES);
}

/// One UMEM shared by sockets on two queues: each queue gets fill and completion rings of its own (the
/// kernel requires them on another queue), each socket's fill ring serves its queue, and
/// every frame arrives once, intact, whichever queue it came through.
#[test]
fn a_umem_shared_across_two_queues_receives_on_both() {
    if !testnet::privileged("a_umem_shared_across_two_queues_receives_on_both") {
        return;
    }
    let pair = VethPair::new(testnet::VethConfig {
        queues: 2,
        ..testnet::VethConfig::default()
    })
    .expect("veth pair");
    let (mut umem, mut sockets, _program, _link) = pair.a.run(|| {
        let mut umem = Umem::new(UmemConfig::default()).expect("umem");
        let mut sockets = Vec::new();
        for queue in 0..2 {
            let socket = Socket::bind(&mut umem, &pair.a_if, queue, Mode::Copy).expect("bind");
            sockets.push(socket);
        }
        let program =
            XdpProgram::redirect_to_xsk(2, FrameMatch::UdpPort(PORT)).expect("redirect program");
        for socket in &sockets {
            let map = program.xsk_map().expect("map");
            map.insert(socket.queue(), socket).expect("insert");
        }
        let link = program
            .attach_to(&pair.a_if, AttachMode::Driver)
            .expect("attach");
        (umem, sockets, program, link)
    });
    assert!(!sockets[0].shares_umem() && sockets[1].shares_umem());
    for socket in &mut sockets {
        assert_eq!(socket.fill(&mut umem, 2048).expect("fill"), 2048);
    }
    assert_eq!(umem.free_frames(), 0);
    let spec = frames(&pair, false);
    let seen = thread::scope(|s| {
        let sender = s.spawn(|| send_from_b(&pair, spec, 100));
        let mut seen = BTreeSet::new();
        let mut frames = Vec::new();
        let deadline = Instant::now() + PATIENCE;
        while (seen.len() as u64) < FRAMES && Instant::now() < deadline {
            for socket in &mut sockets {
                socket
                    .wait_rx(Some(Duration::from_millis(10)))
                    .expect("poll");
                let invalid = socket.receive(&mut umem, 64, &mut frames).expect("rx");
                assert_eq!(invalid, 0);
                for frame in &frames {
                    if let Some((PORT, payload)) = udp_payload(umem.bytes(frame)) {
                        record(&mut seen, payload);
                    }
                }
                socket.fill_with(&mut umem, &mut frames).expect("refill");
                assert!(frames.is_empty(), "the fill ring had room for what it gave");
            }
        }
        sender.join().expect("sender");
        seen
    });
    assert_all_arrived(&seen, FRAMES);
}
