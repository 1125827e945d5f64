//! `xdp::UdpEndpoint` on a veth pair: datagrams from a kernel UDP socket in the peer namespace arrive
//! intact with their source and the endpoint's echoes reach that socket intact (the kernel drops a
//! datagram with a wrong checksum, so an arrival proves them right); frames that are not good
//! datagrams for the endpoint are counted and dropped; everything else (ARP, neighbour discovery,
//! ICMP) still reaches the kernel's stack; what cannot be sent is refused with its reason; what the
//! kernel drops unsent is counted as dropped.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::ops::Range;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use testnet::{VethConfig, VethPair};
use zcnet::packet;
use zcnet::xdp::headers::{self, ETH_HLEN, IPV4_HLEN, Path, UDP_HLEN};
use zcnet::xdp::{
    BusyPoll, EndpointConfig, FrameSize, Mode, SendError, UdpEndpoint, interface_index,
};

/// The endpoint's port.
const PORT: u16 = 9300;
/// Datagrams sent in each direction.
const COUNT: usize = 300;
/// Bound on every wait (never reached when things work).
const PATIENCE: Duration = Duration::from_secs(10);

/// A one-queue pair whose ends put whole UDP checksums in what they send (see
/// [`VethConfig::full_checksums`]).
fn pair() -> VethPair {
    pair_with_queues(1)
}

/// [`pair`] with `queues` queues per end.
fn pair_with_queues(queues: u32) -> VethPair {
    VethPair::new(VethConfig::full_checksums(queues)).expect("veth pair")
}

/// For a privileged `test`: a one-queue [`pair`] and the endpoint on `a`'s IPv4 address.
fn v4_endpoint(test: &str) -> Option<(VethPair, UdpEndpoint)> {
    endpoint_of_family(test, false).map(|(pair, endpoint, ..)| (pair, endpoint))
}

/// For a privileged `test`: a one-queue [`pair`], the endpoint on `a`'s address of one family
/// (IPv6 when `family_v6`), and that family's addresses of `a` and `b`.
fn endpoint_of_family(
    test: &str,
    family_v6: bool,
) -> Option<(VethPair, UdpEndpoint, IpAddr, IpAddr)> {
    if !testnet::privileged(test) {
        return None;
    }
    let pair = pair();
    let (local, far) = match family_v6 {
        false => (IpAddr::V4(pair.a_v4), IpAddr::V4(pair.b_v4)),
        true => (IpAddr::V6(pair.a_v6), IpAddr::V6(pair.b_v6)),
    };
    let endpoint = bind(&pair, local);
    Some((pair, endpoint, local, far))
}

/// The endpoint on `a`'s end at `ip`, queue 0.
fn bind(pair: &VethPair, ip: IpAddr) -> UdpEndpoint {
    bind_queues(pair, ip, vec![0])
}

/// The endpoint on `queues` of `a`'s end at `ip`, with a UMEM so small (64 frames per queue's fill
/// ring, 64 more for sending) that a frame it failed to give back would soon stop the traffic.
fn bind_queues(pair: &VethPair, ip: IpAddr, queues: Vec<u32>) -> UdpEndpoint {
    bind_with(pair, ip, queues, None)
}

/// [`bind_queues`] with busy polling set as `busy_poll` says.
fn bind_with(
    pair: &VethPair,
    ip: IpAddr,
    queues: Vec<u32>,
    busy_poll: Option<BusyPoll>,
) -> UdpEndpoint {
    pair.a.run(|| {
        let frames = 64 * (queues.len() as u32 + 1);
        let mut config = EndpointConfig::default();
        config.mode = Mode::Copy;
        config.queues = queues;
        config.busy_poll = busy_poll;
        config.umem.frame_size = FrameSize::Half;
        config.umem.frame_count = frames;
        config.umem.fill_size = 64;
        config.umem.completion_size = 64;
        UdpEndpoint::bind(&pair.a_if, SocketAddr::new(ip, PORT), config).expect("bind endpoint")
    })
}

/// Payload `seq`: its length varies from 1 byte to `max`, its bytes derive from the sequence number.
fn payload(seq: usize, max: usize) -> Vec<u8> {
    let len = 1 + (seq * 197) % max;
    (0..len).map(|i| (seq * 31 + i * 7) as u8).collect()
}

/// Which sequence number `bytes` is, if it is one of `payload(_, max)` intact.
fn sequence_of(bytes: &[u8], max: usize) -> Option<usize> {
    (0..COUNT).find(|&seq| payload(seq, max) == bytes)
}

/// Receives until `count` datagrams arrived or [`PATIENCE`] passed; returns their payloads, sources
/// and destinations.
fn receive(endpoint: &mut UdpEndpoint, count: usize) -> Vec<(Vec<u8>, SocketAddr, SocketAddr)> {
    let mut got = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while got.len() < count && Instant::now() < deadline {
        endpoint
            .wait(Some(Duration::from_millis(50)))
            .expect("wait");
        let batch = endpoint.receive(64).expect("receive");
        got.extend(
            batch
                .iter()
                .map(|d| (d.payload.to_vec(), d.source, d.destination)),
        );
    }
    got
}

/// A UDP socket on `b`'s IPv4 address, with `b`'s neighbour entries pinned so that nothing sent
/// to it waits for address resolution; and its address.
fn resolved_peer(pair: &VethPair) -> (UdpSocket, SocketAddr) {
    pair.pin_b_neighbours()
        .expect("pin the peer's neighbour entries");
    peer_at(pair, IpAddr::V4(pair.b_v4))
}

/// A UDP socket on `b`'s address `ip`, port [`PORT`], reads bounded by [`PATIENCE`]; and its address.
fn peer_at(pair: &VethPair, ip: IpAddr) -> (UdpSocket, SocketAddr) {
    let peer = pair
        .b
        .run(|| UdpSocket::bind((ip, PORT)).expect("bind peer"));
    peer.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let to = peer.local_addr().expect("addr");
    (peer, to)
}

/// Sends payloads `seqs` (of at most `max` bytes) to `to` in one batch, which hands all of them to
/// the kernel.
fn send_payloads(endpoint: &mut UdpEndpoint, to: SocketAddr, max: usize, seqs: Range<usize>) {
    let mut batch = endpoint.send_batch();
    for seq in seqs.clone() {
        let bytes = payload(seq, max);
        batch
            .push(to, bytes.len(), |buf| buf.copy_from_slice(&bytes))
            .expect("build");
    }
    assert_eq!(batch.flush().expect("flush"), seqs.len());
}

/// The largest UDP payload over a 1500-byte MTU for `ip`'s family.
fn max_payload(ip: IpAddr) -> usize {
    1500 - (headers::headers_len(ip) - ETH_HLEN)
}

fn datagrams_from_the_peer_arrive_intact(test: &str, family_v6: bool) {
    let Some((pair, mut endpoint, local, peer)) = endpoint_of_family(test, family_v6) else {
        return;
    };
    let max = max_payload(local);
    let sender = pair
        .b
        .run(|| UdpSocket::bind((peer, 0)).expect("bind sender"));
    sender.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let from = sender.local_addr().expect("addr");
    let to = SocketAddr::new(local, PORT);
    let mut got = Vec::new();
    let mut echoes = Vec::new();
    let mut buf = vec![0u8; 2048];
    // Send in rounds of 32, collecting and answering as they arrive, so that no ring overflows.
    for round in (0..COUNT).step_by(32) {
        let end = (round + 32).min(COUNT);
        for seq in round..end {
            sender.send_to(&payload(seq, max), to).expect("send");
        }
        let arrived = receive(&mut endpoint, end - got.len());
        let mut batch = endpoint.send_batch();
        for (bytes, source, _) in &arrived {
            batch
                .push(*source, bytes.len(), |buf| buf.copy_from_slice(bytes))
                .expect("echo");
        }
        assert_eq!(batch.flush().expect("flush"), arrived.len());
        for _ in 0..arrived.len() {
            let (n, replier) = sender.recv_from(&mut buf).expect("an echo arrives");
            assert_eq!(replier, to, "the echo comes from the endpoint's address");
            echoes.push(buf[..n].to_vec());
        }
        got.extend(arrived);
    }
    let mut echoed = vec![false; COUNT];
    for bytes in &echoes {
        let seq = sequence_of(bytes, max).expect("an echo arrived changed");
        assert!(!echoed[seq], "echo {seq} arrived twice");
        echoed[seq] = true;
    }
    assert_eq!(endpoint.stats().sent, COUNT as u64);
    let mut seen = vec![false; COUNT];
    for (bytes, source, _) in &got {
        assert_eq!(*source, from, "source address");
        let seq = sequence_of(bytes, max).expect("a payload arrived changed");
        assert!(!seen[seq], "sequence {seq} arrived twice");
        seen[seq] = true;
    }
    let lost: Vec<usize> = (0..COUNT).filter(|&s| !seen[s]).collect();
    assert!(lost.is_empty(), "lost: {lost:?}");
    let stats = endpoint.stats();
    assert_eq!(stats.received, COUNT as u64, "{stats:?}");
    assert_eq!(stats.bad_checksum + stats.malformed, 0, "{stats:?}");
    // ARP or neighbour discovery for the endpoint's address went to the stack (the peer could send),
    // and so does ICMP.
    let ping = pair
        .b
        .exec("ping", &["-c", "1", "-W", "5", &local.to_string()])
        .expect("ping the endpoint's address while it is bound");
    assert!(ping.contains("1 received"), "{ping}");
}

#[test]
fn ipv4_datagrams_arrive_intact_and_echoes_reach_the_peer() {
    datagrams_from_the_peer_arrive_intact(
        "ipv4_datagrams_arrive_intact_and_echoes_reach_the_peer",
        false,
    );
}

#[test]
fn ipv6_datagrams_arrive_intact_and_echoes_reach_the_peer() {
    datagrams_from_the_peer_arrive_intact(
        "ipv6_datagrams_arrive_intact_and_echoes_reach_the_peer",
        true,
    );
}

#[test]
fn bad_frames_are_counted_and_dropped() {
    let Some((pair, mut endpoint)) = v4_endpoint("bad_frames_are_counted_and_dropped") else {
        return;
    };
    let path = Path {
        src_mac: pair.mac(&pair.b_if).expect("mac"),
        dst_mac: pair.mac(&pair.a_if).expect("mac"),
        src: SocketAddr::new(IpAddr::V4(pair.b_v4), 4000),
        dst: SocketAddr::new(IpAddr::V4(pair.a_v4), PORT),
    };
    let good = |path: &Path, payload: &[u8]| {
        let hlen = headers::headers_len(path.src.ip());
        let mut frame = vec![0u8; hlen + payload.len()];
        frame[hlen..].copy_from_slice(payload);
        headers::write_udp(&mut frame, path, payload.len(), 1).expect("headers");
        frame
    };
    let udp_at = ETH_HLEN + IPV4_HLEN;
    let mut bad_checksum = good(&path, b"corrupted on the way");
    bad_checksum[udp_at + UDP_HLEN] ^= 0x40;
    let mut bad_length = good(&path, b"a UDP length beyond the IP datagram");
    bad_length[udp_at + 4..udp_at + 6].copy_from_slice(&1000u16.to_be_bytes());
    let other_host = Path {
        dst: "10.77.0.99:9300".parse().expect("literal"),
        ..path
    };
    let not_for_us = good(&other_host, b"to another address");
    // Frames the redirect program leaves to the stack: never seen, so never counted, by the endpoint.
    let mut first_fragment = good(&path, b"the first of two fragments");
    first_fragment[ETH_HLEN + 6] |= 0x20; // more fragments
    let mut tagged = good(&path, b"behind a VLAN tag");
    tagged.splice(12..12, [0x81, 0x00, 0x00, 0x05]);
    let mut options = good(&path, b"after IPv4 options");
    options[ETH_HLEN] = 0x46;
    let v6 = Path {
        src: SocketAddr::new(IpAddr::V6(pair.b_v6), 4000),
        dst: SocketAddr::new(IpAddr::V6(pair.a_v6), PORT),
        ..path
    };
    let mut extension = good(&v6, b"behind a hop-by-hop options header");
    extension[ETH_HLEN + 6] = 0;
    // Eight rounds of 70 bad frames (30 of them redirected to the endpoint) and one good one: far
    // more bad frames than the 64 the fill ring holds, so each must go back to it for the good ones
    // to arrive.
    const ROUNDS: u64 = 8;
    let fd = pair.b.run(|| {
        packet::open(interface_index(&pair.b_if).expect("ifindex"), 0).expect("packet socket")
    });
    for round in 0..ROUNDS {
        for _ in 0..10 {
            for frame in [
                &bad_checksum,
                &bad_length,
                &not_for_us,
                &first_fragment,
                &tagged,
                &options,
                &extension,
            ] {
                packet::send(fd.as_fd(), frame).expect("send");
            }
        }
        let fine = good(&path, format!("good datagram {round}").as_bytes());
        packet::send(fd.as_fd(), &fine).expect("send");
        let got = receive(&mut endpoint, 1);
        assert_eq!(got.len(), 1, "round {round}: {got:?}");
        assert_eq!(got[0].0, format!("good datagram {round}").as_bytes());
        assert_eq!(got[0].1, path.src);
    }
    // The bad frames of each round were taken with (before) its good one, on the one queue.
    let stats = endpoint.stats();
    let each = ROUNDS * 10;
    assert_eq!(
        (stats.bad_checksum, stats.malformed, stats.not_for_us),
        (each, each, each),
        "{stats:?}"
    );
    assert_eq!(stats.received, ROUNDS);
}

#[test]
fn what_cannot_be_sent_is_refused_with_its_reason() {
    let Some((pair, mut endpoint)) = v4_endpoint("what_cannot_be_sent_is_refused_with_its_reason")
    else {
        return;
    };
    let peer = SocketAddr::new(IpAddr::V4(pair.b_v4), PORT);
    let max = endpoint.max_payload(peer.ip());
    assert_eq!(max, 1500 - 20 - 8);
    let mut send = |to: SocketAddr, len: usize| endpoint.send(to, len, |buf| buf.fill(7));
    match send(peer, max + 1) {
        Err(SendError::TooLong { len, max: m }) => assert_eq!((len, m), (max + 1, max)),
        other => panic!("over the MTU: {other:?}"),
    }
    match send("192.0.2.1:9".parse().expect("literal"), 10) {
        Err(SendError::NoRoute { source, .. }) => {
            assert_eq!(source.raw_os_error(), Some(libc::ENETUNREACH), "{source}")
        }
        other => panic!("no route: {other:?}"),
    }
    match send(SocketAddr::new(IpAddr::V4(pair.a_v4), 9), 10) {
        Err(SendError::OtherInterface { oif, .. }) if oif == zcnet::IfIndex::new(1) => {}
        other => panic!("own address, through lo: {other:?}"),
    }
    match send("10.77.0.50:9".parse().expect("literal"), 10) {
        Err(SendError::Unresolved {
            state: None,
            next_hop,
            resolving: true,
        }) => {
            assert_eq!(next_hop, "10.77.0.50".parse::<IpAddr>().expect("literal"))
        }
        other => panic!("no neighbour entry: {other:?}"),
    }
    match send(SocketAddr::new(IpAddr::V6(pair.b_v6), 9), 10) {
        Err(SendError::FamilyMismatch { .. }) => {}
        other => panic!("IPv6 from an IPv4 endpoint: {other:?}"),
    }
    let elsewhere: IpAddr = "10.77.0.9".parse().expect("literal");
    match endpoint
        .send_batch()
        .push_from(elsewhere, peer, 10, |buf| buf.fill(7))
    {
        Err(SendError::SourceMismatch { from, .. }) => assert_eq!(from, elsewhere),
        other => panic!("from an address the endpoint is not bound to: {other:?}"),
    }
    assert_eq!(endpoint.stats().sent, 0);
}

#[test]
fn a_batch_larger_than_one_copy_mode_wakeup_arrives_whole() {
    let Some((pair, mut endpoint)) =
        v4_endpoint("a_batch_larger_than_one_copy_mode_wakeup_arrives_whole")
    else {
        return;
    };
    let (peer, to) = resolved_peer(&pair);
    // 60 frames in one flush: a copy-mode wakeup (`sendto`) transmits at most 32, so the flush
    // must wake the kernel until it took them all.
    let max = max_payload(to.ip());
    send_payloads(&mut endpoint, to, max, 0..60);
    let mut seen = [false; 60];
    let mut buf = vec![0u8; 2048];
    for _ in 0..60 {
        let n = peer
            .recv(&mut buf)
            .expect("every datagram of the batch arrives");
        let seq = sequence_of(&buf[..n], max).expect("intact");
        assert!(seq < 60 && !seen[seq], "datagram {seq} again");
        seen[seq] = true;
    }
}

/// A datagram the kernel takes from the tx ring and drops unsent (copy mode: the device refuses it,
/// `sendto` says `EBUSY`; here the link lost its carrier when the peer's end went down) is counted
/// as dropped, not as sent; once the peer is back, what is counted as sent arrives.
#[test]
fn datagrams_the_kernel_drops_unsent_are_not_counted_as_sent() {
    let Some((pair, mut endpoint)) =
        v4_endpoint("datagrams_the_kernel_drops_unsent_are_not_counted_as_sent")
    else {
        return;
    };
    let (peer, to) = resolved_peer(&pair);
    let max = max_payload(to.ip());
    let link = |state: &str| {
        pair.b
            .ip(&["link", "set", &pair.b_if, state])
            .unwrap_or_else(|e| panic!("set {} {state}: {e}", pair.b_if));
    };
    link("down");
    send_payloads(&mut endpoint, to, max, 0..5);
    let stats = endpoint.stats();
    assert_eq!((stats.sent, stats.tx_dropped), (0, 5), "{stats:?}");
    link("up");
    // The carrier comes back a moment after the link is up: until then datagrams are dropped.
    peer.set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let deadline = Instant::now() + PATIENCE;
    let mut buf = vec![0u8; 2048];
    let mut next = 5;
    while Instant::now() < deadline {
        send_payloads(&mut endpoint, to, max, next..next + 1);
        next += 1;
        if let Ok(n) = peer.recv(&mut buf) {
            assert!(sequence_of(&buf[..n], max).is_some_and(|seq| seq >= 5));
            break;
        }
    }
    let stats = endpoint.stats();
    assert_eq!(stats.sent + stats.tx_dropped, next as u64, "{stats:?}");
    assert_eq!(stats.sent, 1, "{stats:?}");
}

#[test]
fn a_changed_neighbour_is_followed() {
    let Some((pair, mut endpoint)) = v4_endpoint("a_changed_neighbour_is_followed") else {
        return;
    };
    let peer = pair
        .b
        .run(|| UdpSocket::bind((pair.b_v4, 0)).expect("bind peer"));
    peer.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let to = SocketAddr::new(IpAddr::V4(pair.a_v4), PORT);
    let echo_once = |endpoint: &mut UdpEndpoint, text: &[u8]| {
        peer.send_to(text, to).expect("send");
        let got = receive(endpoint, 1);
        assert_eq!(got.len(), 1, "{got:?}");
        endpoint
            .send(got[0].1, text.len(), |buf| buf.copy_from_slice(text))
            .expect("echo");
        let mut buf = [0u8; 64];
        let n = peer.recv(&mut buf).expect("the echo arrives");
        assert_eq!(&buf[..n], text);
    };
    echo_once(&mut endpoint, b"before");
    // The peer takes a new MAC address and `a`'s neighbour entry follows (as the stack's would once
    // it learns of it); a frame to the old address would be dropped by the peer as not its own.
    let new_mac = "02:7a:00:00:00:02";
    pair.b
        .ip(&["link", "set", &pair.b_if, "address", new_mac])
        .expect("set address");
    let neigh = [
        "neigh",
        "replace",
        &pair.b_v4.to_string(),
        "lladdr",
        new_mac,
        "dev",
        &pair.a_if,
        "nud",
        "reachable",
    ];
    pair.a.ip(&neigh).expect("neigh replace");
    // The kernel announced the change before `ip` returned: the next send follows it at once,
    // without waiting for the cache's NEXT_HOP_TTL (the one send to the old address would be lost).
    echo_once(&mut endpoint, b"after");
}

#[test]
fn a_changed_mtu_is_followed() {
    let Some((pair, mut endpoint)) = v4_endpoint("a_changed_mtu_is_followed") else {
        return;
    };
    let (peer, to) = resolved_peer(&pair);
    let ip = to.ip();
    assert_eq!(endpoint.max_payload(ip), max_payload(ip));
    // Both ends lower their MTU: a datagram over it would leave `a` and be dropped by `b`.
    for (ns, iface) in [(&pair.a, &pair.a_if), (&pair.b, &pair.b_if)] {
        ns.ip(&["link", "set", iface, "mtu", "1000"])
            .expect("set mtu");
    }
    let lowered = 1000 - (headers::headers_len(ip) - ETH_HLEN);
    // The kernel announced the change before `ip` returned: the next send follows it.
    match endpoint.send(to, lowered + 1, |buf| buf.fill(1)) {
        Err(SendError::TooLong { len, max }) => assert_eq!((len, max), (lowered + 1, lowered)),
        other => panic!("a datagram over the new MTU: {other:?}"),
    }
    assert_eq!(endpoint.max_payload(ip), lowered);
    endpoint
        .send(to, lowered, |buf| buf.fill(2))
        .expect("a datagram of the new MTU");
    let mut buf = vec![0u8; 2048];
    let n = peer.recv(&mut buf).expect("it arrives");
    assert!(
        n == lowered && buf[..n].iter().all(|&b| b == 2),
        "{n} bytes"
    );
}

#[test]
fn two_queues_serve_one_endpoint() {
    if !testnet::privileged("two_queues_serve_one_endpoint") {
        return;
    }
    let pair = pair_with_queues(2);
    // With preferred busy polling: the sockets take the option, and traffic still flows.
    let mut endpoint = bind_with(
        &pair,
        IpAddr::V4(pair.a_v4),
        vec![0, 1],
        Some(BusyPoll::new(Duration::from_micros(50), 8)),
    );
    assert_eq!(endpoint.sockets().len(), 2);
    let to = SocketAddr::new(IpAddr::V4(pair.a_v4), PORT);
    // Several source ports, so that the peer's transmit queue choice spreads them.
    let senders: Vec<UdpSocket> = (0..8)
        .map(|_| {
            pair.b
                .run(|| UdpSocket::bind((pair.b_v4, 0)).expect("bind sender"))
        })
        .collect();
    let mut expected = Vec::new();
    let mut got = Vec::new();
    for round in 0..8 {
        for (i, sender) in senders.iter().enumerate() {
            let text = format!("round {round} from sender {i}");
            sender.send_to(text.as_bytes(), to).expect("send");
            expected.push((text.into_bytes(), sender.local_addr().expect("addr"), to));
        }
        let arrived = receive(&mut endpoint, senders.len());
        assert_eq!(arrived.len(), senders.len(), "round {round}");
        got.extend(arrived);
    }
    expected.sort();
    got.sort();
    assert_eq!(got, expected, "every datagram intact, from its sender");
    assert_eq!(endpoint.stats().received, expected.len() as u64);
}

#[test]
fn an_unspecified_address_serves_both_families() {
    if !testnet::privileged("an_unspecified_address_serves_both_families") {
        return;
    }
    let pair = pair();
    let mut endpoint = bind(&pair, "::".parse().expect("literal"));
    for (local, peer) in [
        (IpAddr::V4(pair.a_v4), IpAddr::V4(pair.b_v4)),
        (IpAddr::V6(pair.a_v6), IpAddr::V6(pair.b_v6)),
    ] {
        let socket = pair
            .b
            .run(|| UdpSocket::bind((peer, 0)).expect("bind peer"));
        socket.set_read_timeout(Some(PATIENCE)).expect("timeout");
        let to = SocketAddr::new(local, PORT);
        socket.send_to(b"to any address", to).expect("send");
        let got = receive(&mut endpoint, 1);
        assert_eq!(got.len(), 1, "{got:?}");
        let (payload, source, destination) = &got[0];
        assert_eq!(*destination, to);
        assert_eq!(*source, socket.local_addr().expect("addr"));
        // The answer's source is the kernel's preferred source for the peer: the address it was sent to.
        endpoint
            .send(*source, payload.len(), |buf| buf.copy_from_slice(payload))
            .expect("answer");
        let mut buf = [0u8; 64];
        let (n, replier) = socket.recv_from(&mut buf).expect("the answer arrives");
        assert_eq!((&buf[..n], replier), (&payload[..], to));
    }
}

/// A child forked from this process that never execs: it holds a duplicate of every descriptor open
/// at the fork (the endpoint's sockets, its BPF link) until dropped (killed), as a child another
/// thread of a program forks does for the moment between its fork and its exec.
struct HeldFork {
    pid: libc::pid_t,
}

impl HeldFork {
    fn new() -> HeldFork {
        // SAFETY: the child calls only pause(2), async-signal-safe, so forking this multi-threaded
        // process is sound; it waits with every descriptor open until killed.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            loop {
                // SAFETY: see above.
                unsafe { libc::pause() };
            }
        }
        assert!(pid > 0, "fork: {}", std::io::Error::last_os_error());
        HeldFork { pid }
    }
}

impl Drop for HeldFork {
    fn drop(&mut self) {
        // SAFETY: `pid` is this process's own child, killed and reaped only here.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

#[test]
fn dropping_the_endpoint_gives_the_port_back_to_the_stack() {
    let Some((pair, mut endpoint)) =
        v4_endpoint("dropping_the_endpoint_gives_the_port_back_to_the_stack")
    else {
        return;
    };
    let to = SocketAddr::new(IpAddr::V4(pair.a_v4), PORT);
    let kernel = pair
        .a
        .run(|| UdpSocket::bind(to).expect("bind the same port in the stack"));
    let peer = pair
        .b
        .run(|| UdpSocket::bind((pair.b_v4, 0)).expect("bind peer"));
    peer.send_to(b"to the endpoint", to).expect("send");
    let got = receive(&mut endpoint, 1);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, b"to the endpoint");
    // A child forked meanwhile keeps the endpoint's descriptors open: the port comes back all the same.
    let fork = HeldFork::new();
    drop(endpoint);
    peer.send_to(b"to the stack", to).expect("send");
    kernel.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let mut buf = [0u8; 64];
    // The kernel socket never saw the endpoint's datagram: the first it reads is the later one.
    let n = kernel
        .recv(&mut buf)
        .expect("the stack receives once the endpoint is gone");
    assert_eq!(&buf[..n], b"to the stack");
    drop(fork);
}

/// One endpoint per queue of a two-queue `a` end, each with its own UMEM as small as
/// [`bind_queues`]'s per queue.
fn bind_each_queue(pair: &VethPair) -> Vec<UdpEndpoint> {
    pair.a.run(|| {
        let mut config = EndpointConfig::default();
        config.mode = Mode::Copy;
        config.queues = vec![0, 1];
        config.umem.frame_size = FrameSize::Half;
        config.umem.frame_count = 128;
        config.umem.fill_size = 64;
        config.umem.completion_size = 64;
        let to = SocketAddr::new(IpAddr::V4(pair.a_v4), PORT);
        UdpEndpoint::bind_each_queue(&pair.a_if, to, config).expect("bind an endpoint per queue")
    })
}

/// Sockets of the peer on `b`, enough of them that the peer's transmit queue choice (a hash of each
/// flow) puts some on each of `a`'s two receive queues.
fn peer_sockets(pair: &VethPair) -> Vec<UdpSocket> {
    (0..32)
        .map(|_| {
            let socket = pair
                .b
                .run(|| UdpSocket::bind((pair.b_v4, 0)).expect("bind peer"));
            socket.set_read_timeout(Some(PATIENCE)).expect("timeout");
            socket
        })
        .collect()
}

#[test]
fn an_endpoint_per_queue_each_on_its_own_thread_answers_every_datagram() {
    if !testnet::privileged("an_endpoint_per_queue_each_on_its_own_thread_answers_every_datagram") {
        return;
    }
    let pair = pair_with_queues(2);
    let endpoints = bind_each_queue(&pair);
    assert_eq!(endpoints.len(), 2);
    let to = SocketAddr::new(IpAddr::V4(pair.a_v4), PORT);
    let peers = peer_sockets(&pair);
    const ROUNDS: usize = 4;
    let total = ROUNDS * peers.len();
    let answered = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        // A worker per queue: echoes what its queue receives, through its own queue's socket.
        let workers: Vec<_> = endpoints
            .into_iter()
            .map(|mut endpoint| {
                let answered = &answered;
                s.spawn(move || {
                    let deadline = Instant::now() + PATIENCE;
                    let mut mine = 0u64;
                    while answered.load(std::sync::atomic::Ordering::Relaxed) < total
                        && Instant::now() < deadline
                    {
                        endpoint
                            .wait(Some(Duration::from_millis(20)))
                            .expect("wait");
                        let batch = endpoint.receive(64).expect("receive");
                        let got: Vec<_> = batch
                            .iter()
                            .map(|d| (d.source, d.payload.to_vec()))
                            .collect();
                        drop(batch);
                        let mut send = endpoint.send_batch();
                        for (from, payload) in &got {
                            send.push(*from, payload.len(), |b| b.copy_from_slice(payload))
                                .expect("echo");
                        }
                        send.flush().expect("flush");
                        mine += got.len() as u64;
                        answered.fetch_add(got.len(), std::sync::atomic::Ordering::Relaxed);
                    }
                    (endpoint.sockets()[0].queue(), mine, endpoint.stats())
                })
            })
            .collect();
        for round in 0..ROUNDS {
            for (i, peer) in peers.iter().enumerate() {
                let text = format!("round {round} from peer {i}");
                peer.send_to(text.as_bytes(), to).expect("send");
                let mut buf = [0u8; 64];
                let (n, from) = peer.recv_from(&mut buf).expect("the echo arrives");
                assert_eq!(&buf[..n], text.as_bytes(), "the echo is intact");
                assert_eq!(from, to);
            }
        }
        let results: Vec<_> = workers
            .into_iter()
            .map(|w| w.join().expect("worker"))
            .collect();
        println!("per queue (queue, answered, stats): {results:?}");
        for (queue, mine, stats) in &results {
            assert!(*mine > 0, "queue {queue} answered nothing: {results:?}");
            assert_eq!(stats.received, *mine);
            assert_eq!(stats.sent, *mine, "each answered through its own queue");
            assert_eq!(stats.malformed + stats.bad_checksum, 0);
        }
        assert_eq!(results.iter().map(|r| r.1).sum::<u64>(), total as u64);
    });
}

#[test]
fn dropping_one_queues_endpoint_leaves_the_other_serving_and_its_queue_to_the_stack() {
    if !testnet::privileged(
        "dropping_one_queues_endpoint_leaves_the_other_serving_and_its_queue_to_the_stack",
    ) {
        return;
    }
    let pair = pair_with_queues(2);
    let mut endpoints = bind_each_queue(&pair);
    let mut kept = endpoints.pop().expect("queue 1's endpoint");
    // A child forked meanwhile keeps queue 0's socket open: its queue comes back all the same.
    let fork = HeldFork::new();
    drop(endpoints);
    // The stack's own socket on the port takes what arrives on queue 0 now.
    let stack = pair
        .a
        .run(|| UdpSocket::bind((pair.a_v4, PORT)).expect("bind the stack's socket"));
    stack.set_nonblocking(true).expect("nonblocking");
    let to = SocketAddr::new(IpAddr::V4(pair.a_v4), PORT);
    let peers = peer_sockets(&pair);
    let mut expected = Vec::new();
    for (i, peer) in peers.iter().enumerate() {
        let text = format!("to the port from peer {i}");
        peer.send_to(text.as_bytes(), to).expect("send");
        expected.push(text.into_bytes());
    }
    let mut by_endpoint = Vec::new();
    let mut by_stack = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while by_endpoint.len() + by_stack.len() < expected.len() && Instant::now() < deadline {
        kept.wait(Some(Duration::from_millis(20))).expect("wait");
        let batch = kept.receive(64).expect("receive");
        by_endpoint.extend(batch.iter().map(|d| d.payload.to_vec()));
        drop(batch);
        let mut buf = [0u8; 64];
        while let Ok(n) = stack.recv(&mut buf) {
            by_stack.push(buf[..n].to_vec());
        }
    }
    println!(
        "endpoint of queue 1: {}, stack: {}",
        by_endpoint.len(),
        by_stack.len()
    );
    assert!(!by_endpoint.is_empty(), "queue 1's endpoint still serves");
    assert!(
        !by_stack.is_empty(),
        "queue 0's datagrams went to the stack"
    );
    by_endpoint.append(&mut by_stack);
    by_endpoint.sort();
    expected.sort();
    assert_eq!(by_endpoint, expected, "every datagram exactly once, intact");
    assert_eq!(kept.stats().malformed + kept.stats().bad_checksum, 0);
    drop(fork);
}

#[test]
fn a_payload_writer_that_panics_takes_no_frame_with_it() {
    let Some((pair, mut endpoint)) =
        v4_endpoint("a_payload_writer_that_panics_takes_no_frame_with_it")
    else {
        return;
    };
    let (peer, to) = resolved_peer(&pair);
    // More panics than the endpoint has frames to send with (64): each one that kept its frame
    // would leave one fewer, and the send after them would find none. (`resume_unwind` skips the
    // panic hook: nothing is printed.)
    for _ in 0..200 {
        let sent = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            endpoint.send(to, 10, |_| {
                std::panic::resume_unwind(Box::new("writer failed"))
            })
        }));
        assert!(sent.is_err(), "the writer's panic reaches the caller");
    }
    assert_eq!(endpoint.stats().sent, 0);
    endpoint
        .send(to, 10, |buf| buf.fill(9))
        .expect("a frame to send with after the panics");
    let mut buf = [0u8; 64];
    let n = peer.recv(&mut buf).expect("the datagram after the panics");
    assert_eq!(&buf[..n], &[9; 10]);
}

#[test]
fn an_ipv4_peer_never_heard_from_is_resolved_after_the_first_refusal() {
    a_peer_never_heard_from_is_resolved_after_the_first_refusal(
        "an_ipv4_peer_never_heard_from_is_resolved_after_the_first_refusal",
        false,
    );
}

#[test]
fn an_ipv6_peer_never_heard_from_is_resolved_after_the_first_refusal() {
    a_peer_never_heard_from_is_resolved_after_the_first_refusal(
        "an_ipv6_peer_never_heard_from_is_resolved_after_the_first_refusal",
        true,
    );
}

fn a_peer_never_heard_from_is_resolved_after_the_first_refusal(test: &str, family_v6: bool) {
    let Some((pair, mut endpoint, _, far)) = endpoint_of_family(test, family_v6) else {
        return;
    };
    let (peer, to) = peer_at(&pair, far);
    // Nothing was ever sent between the two ends, so `a` has no entry for `b`: the first send is
    // refused, and asks the kernel to resolve `b` (an ARP request or neighbour solicitation, which
    // the stack on `b` answers).
    match endpoint.send(to, 5, |buf| buf.fill(3)) {
        Err(SendError::Unresolved {
            state: None,
            resolving: true,
            ..
        }) => {}
        other => panic!("the first send to an unknown peer: {other:?}"),
    }
    let deadline = Instant::now() + PATIENCE;
    loop {
        match endpoint.send(to, 5, |buf| buf.fill(3)) {
            Ok(()) => break,
            Err(SendError::Unresolved { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            other => panic!("sending once the kernel resolved the peer: {other:?}"),
        }
    }
    let mut buf = [0u8; 16];
    let n = peer.recv(&mut buf).expect("the datagram arrives");
    assert_eq!(&buf[..n], &[3; 5]);
}

/// A datagram over the MTU, which the peer's stack fragments (a UDP socket's default): the endpoint
/// takes no fragment of it, the stack reassembles it and a kernel socket on the port reads it
/// whole; the endpoint still takes the unfragmented datagram sent after it.
fn a_fragmented_datagram_goes_whole_to_the_stack(test: &str, family_v6: bool) {
    let Some((pair, mut endpoint, local, peer)) = endpoint_of_family(test, family_v6) else {
        return;
    };
    let to = SocketAddr::new(local, PORT);
    let stack = pair
        .a
        .run(|| UdpSocket::bind(to).expect("bind the stack's socket on the port"));
    stack
        .set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    let sender = pair
        .b
        .run(|| UdpSocket::bind((peer, 0)).expect("bind sender"));
    // Three fragments over the 1500-byte MTU (the socket's default `IP_PMTUDISC_WANT` fragments a
    // datagram larger than the path MTU).
    let large: Vec<u8> = (0..4000u32).map(|i| (i * 13 + 5) as u8).collect();
    sender.send_to(&large, to).expect("send the large datagram");
    sender.send_to(b"small", to).expect("send the small one");
    let mut buf = vec![0u8; 8192];
    let n = stack
        .recv(&mut buf)
        .expect("the stack receives the reassembled datagram");
    assert_eq!(n, large.len());
    assert!(buf[..n] == large[..], "the reassembled datagram is intact");
    let got = receive(&mut endpoint, 1);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, b"small");
    let stats = endpoint.stats();
    assert_eq!(stats.received, 1, "{stats:?}");
    assert_eq!(stats.malformed + stats.bad_checksum, 0, "{stats:?}");
}

#[test]
fn an_ipv4_datagram_fragmented_by_the_peer_goes_whole_to_the_stack() {
    a_fragmented_datagram_goes_whole_to_the_stack(
        "an_ipv4_datagram_fragmented_by_the_peer_goes_whole_to_the_stack",
        false,
    );
}

#[test]
fn an_ipv6_datagram_fragmented_by_the_peer_goes_whole_to_the_stack() {
    a_fragmented_datagram_goes_whole_to_the_stack(
        "an_ipv6_datagram_fragmented_by_the_peer_goes_whole_to_the_stack",
        true,
    );
}
