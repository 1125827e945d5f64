//! The guest side of the AF_XDP runs: sockets on every queue of the guest's NIC, checked against the
//! host-side peer. The zero-copy run (a kernel whose virtio-net binds XDP_ZEROCOPY) requires zero-copy:
//! rxdrop of a burst from the peer, txpush to the peer (which verifies every datagram), an echo of a
//! burst back to the peer (l2fwd with the addresses turned around so the host delivers it to the peer),
//! with need_wakeup on and off, 64- and 1500-byte frames, a socket bound again right after the last
//! one closed, 9000-byte frames with multi-buffer ([`jumbo`]), and the UDP endpoint on tokio
//! ([`crate::xdp_endpoint`]), and `zcnet probe`'s TX metadata row held against the kernel
//! ([`crate::xdp_endpoint::tx_metadata`]). The copy-mode run (6.12) does the rxdrop only.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use testnet::frame::{UDP_HEADERS, UdpFrame, udp_payload};
use zcnet::xdp::{
    AttachMode, BoundMode, Frame, FrameMatch, Mode, Socket, SocketConfig, Umem, UmemConfig,
    XdpLink, XdpProgram,
};

use crate::outcome::Outcome;
use crate::{nic, wire};

#[path = "xdp_zc_jumbo.rs"]
mod jumbo;

/// Datagrams of each burst and of each txpush.
pub(crate) const DATAGRAMS: u64 = 500;
/// Longest wait for frames, completions and answers.
const WAIT: Duration = Duration::from_secs(30);
/// txpush pacing: a group of frames, then a pause (the emulated NIC and the host's tap keep up).
const TX_GROUP: u64 = 8;
const TX_GAP: Duration = Duration::from_millis(4);

/// Runs the zero-copy checks against the peer at `peer` over `iface` (address `ip`), then tells the
/// peer to quit.
pub fn run(peer: IpAddr, ip: Ipv4Addr, iface: &str) -> anyhow::Result<Outcome> {
    let IpAddr::V4(peer_v4) = peer else {
        bail!("the AF_XDP checks build IPv4 frames: --peer must be IPv4");
    };
    let mut outcome = Outcome::new("xdp");
    let queues = queue_count(iface)?;
    let link = LinkAddrs::of(iface, ip, peer_v4)?;
    let mut stream = 10;
    // Rounds: need_wakeup on, off (with the first round's UMEMs again), and one UMEM shared by the
    // sockets of every queue.
    let mut kept = Vec::new();
    for (need_wakeup, shared_umem) in [(true, false), (false, false), (true, true)] {
        let mode = Mode::ZeroCopy;
        let reuse = match shared_umem {
            true => Vec::new(),
            false => std::mem::take(&mut kept),
        };
        let mut q = Queues::bind(
            iface,
            queues,
            mode,
            need_wakeup,
            shared_umem,
            reuse,
            &mut outcome,
        )?;
        q.expect_zero_copy(&mut outcome);
        let label = match (need_wakeup, shared_umem) {
            (true, false) => "need_wakeup",
            (false, false) => "no need_wakeup",
            _ => "shared UMEM, need_wakeup",
        };
        stream += 1;
        rxdrop(&mut q, peer, stream, label, &mut outcome)?;
        stream += 1;
        echo(&mut q, peer, stream, label, &mut outcome)?;
        for size in [64, 1500] {
            stream += 1;
            txpush(&mut q, peer, &link, stream, size, label, &mut outcome)?;
        }
        // Dropping the sockets unbinds the queues; the next round binds them again at once (the
        // kernel releases a closed socket's queue asynchronously: the bind waits out EBUSY).
        kept = q.into_umems();
    }
    stream += 1;
    jumbo::run(peer, iface, queues, stream, &mut outcome)?;
    stream += 1;
    crate::xdp_endpoint::run(peer, ip, iface, queues, stream, &mut outcome)?;
    stream += 1;
    crate::xdp_endpoint::tx_metadata(peer, iface, queues, stream, &mut outcome)?;
    nic::request(peer, wire::Request::Quit)?;
    Ok(outcome)
}

/// rxdrop of a burst from the peer on every queue of `iface`, in `mode` (the copy-mode run of the
/// 6.12 kernel, whose virtio-net has no zero-copy).
pub fn rxdrop_any_mode(
    peer: IpAddr,
    iface: &str,
    mode: Mode,
    stream: u32,
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    let queues = queue_count(iface)?;
    let mut q = Queues::bind(iface, queues, mode, true, false, Vec::new(), outcome)?;
    rxdrop(&mut q, peer, stream, "need_wakeup", outcome)
}

/// Number of rx queues of `iface` (sysfs).
fn queue_count(iface: &str) -> anyhow::Result<u32> {
    let dir = format!("/sys/class/net/{iface}/queues");
    let n = std::fs::read_dir(&dir)
        .with_context(|| format!("list {dir}"))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
        .count();
    Ok(n.max(1) as u32)
}

/// Whether `/proc/net/arp`'s flags column (hexadecimal) has `ATF_COM`: the address is resolved.
fn complete(flags: &str) -> bool {
    u32::from_str_radix(flags.trim_start_matches("0x"), 16)
        .is_ok_and(|f| f & libc::ATF_COM as u32 != 0)
}

/// The addresses of the guest's frames to the peer.
#[derive(Debug, Clone, Copy)]
struct LinkAddrs {
    to_peer: UdpFrame,
}

impl LinkAddrs {
    /// The guest's MAC from sysfs, the peer's from the neighbour table (the harness's ping filled it).
    /// Only a complete entry counts (`ATF_COM` in its flags): an incomplete one reads
    /// 00:00:00:00:00:00, and frames sent to it reach nobody.
    fn of(iface: &str, ip: Ipv4Addr, peer: Ipv4Addr) -> anyhow::Result<LinkAddrs> {
        let path = format!("/sys/class/net/{iface}/address");
        let ours = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
        let ours = testnet::frame::parse_mac(ours.trim()).context("the NIC's MAC")?;
        let arp = std::fs::read_to_string("/proc/net/arp").context("read /proc/net/arp")?;
        let theirs = arp
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.len() >= 4 && f[0] == peer.to_string() && complete(f[2]))
            .and_then(|f| testnet::frame::parse_mac(f[3]))
            .with_context(|| format!("no complete neighbour entry for {peer}"))?;
        Ok(LinkAddrs {
            to_peer: UdpFrame {
                src_mac: ours,
                dst_mac: theirs,
                src_ip: ip,
                dst_ip: peer,
                src_port: wire::BURST_PORT,
                dst_port: wire::UDP_PORT,
            },
        })
    }
}

/// A socket (rx and tx rings) per queue, with a UMEM each or one UMEM shared by all (the later
/// sockets bound with `XDP_SHARED_UMEM` and fill and completion rings of their own), and the program
/// that redirects the burst port's datagrams to them: everything else (the TCP requests, ARP) goes on
/// to the stack.
struct Queues {
    umems: Vec<Umem>,
    /// Each socket with the index of its UMEM.
    sockets: Vec<(usize, Socket)>,
    _link: XdpLink,
    _program: XdpProgram,
    iface: String,
}

impl Queues {
    /// Binds a socket per queue, with the UMEMs of `reuse` (one per queue, in order) where there are
    /// some: their sockets closed, every frame of theirs must be free again once the queue is bound
    /// anew (a zero-copy queue's frames come back only then).
    #[allow(clippy::too_many_arguments)]
    fn bind(
        iface: &str,
        queues: u32,
        mode: Mode,
        need_wakeup: bool,
        shared_umem: bool,
        mut reuse: Vec<Umem>,
        outcome: &mut Outcome,
    ) -> anyhow::Result<Queues> {
        let mut config = SocketConfig::default();
        config.need_wakeup = need_wakeup;
        let mut umems: Vec<Umem> = Vec::new();
        let mut sockets = Vec::new();
        for queue in 0..queues {
            let mut reused = false;
            if umems.is_empty() || !shared_umem {
                let umem = match reuse.is_empty() {
                    true => Umem::new(UmemConfig::default())?,
                    false => {
                        reused = true;
                        reuse.remove(0)
                    }
                };
                umems.push(umem);
            }
            let index = umems.len() - 1;
            let umem = &mut umems[index];
            let started = Instant::now();
            let mut socket = Socket::bind_with(umem, iface, queue, mode, config)
                .with_context(|| format!("bind {iface} queue {queue}"))?;
            if reused {
                let (free, total) = (umem.free_frames(), umem.frame_count() as usize);
                outcome.check(
                    "xdp-frames-return",
                    free == total,
                    &format!(
                        "queue {queue}: the UMEM of the closed {} socket has {free} of {total} \
                         frames free again",
                        socket.mode()
                    ),
                );
            }
            if let Some(why) = socket.zerocopy_status().err() {
                outcome.skip("xdp-zerocopy-bind", &format!("queue {queue}: {why}"));
            }
            let waited = started.elapsed();
            if waited > Duration::from_millis(50) {
                println!("guest: bind of {iface} queue {queue} took {waited:?} (EBUSY retried)");
            }
            // Half the frames each when shared, all of them otherwise (up to the fill ring's size).
            let share = if shared_umem {
                umem.frame_count() / queues
            } else {
                u32::MAX
            };
            socket.fill(umem, share)?;
            sockets.push((index, socket));
        }
        let program = XdpProgram::redirect_to_xsk(queues, FrameMatch::UdpPort(wire::BURST_PORT))?;
        let map = program
            .xsk_map()
            .context("the redirect program has a map")?;
        for (_, socket) in &sockets {
            map.insert(socket.queue(), socket)?;
        }
        let link = program.attach_to(iface, AttachMode::Driver)?;
        Ok(Queues {
            umems,
            sockets,
            _link: link,
            _program: program,
            iface: iface.to_string(),
        })
    }

    /// Closes the sockets (unbinding the queues) and detaches the program; returns the UMEMs.
    fn into_umems(self) -> Vec<Umem> {
        let Queues {
            umems,
            sockets,
            _link,
            _program,
            ..
        } = self;
        drop(sockets);
        umems
    }

    /// A PASS line per queue bound zero-copy, a FAIL line per queue that is not.
    fn expect_zero_copy(&self, outcome: &mut Outcome) {
        for (_, socket) in &self.sockets {
            let wake = if socket.uses_need_wakeup() {
                "with"
            } else {
                "without"
            };
            outcome.check(
                "xdp-zerocopy-bind",
                socket.mode() == BoundMode::ZeroCopy,
                &format!(
                    "{} queue {} bound {} {wake} need_wakeup",
                    self.iface,
                    socket.queue(),
                    socket.mode()
                ),
            );
        }
    }

    /// Kernel counters summed over the queues: (rx_dropped, invalid descriptors).
    fn drops(&self) -> anyhow::Result<(u64, u64)> {
        let (mut dropped, mut invalid) = (0, 0);
        for (_, socket) in &self.sockets {
            let stats = socket.statistics()?;
            dropped += stats.rx_dropped;
            invalid += stats.invalid_descs();
        }
        Ok((dropped, invalid))
    }

    /// Receives on every queue until `want` burst datagrams were handled, a second passed without any
    /// after the first, or [`WAIT`]; `handle` gets each queue's frames (and must take them all).
    fn receive_burst(
        &mut self,
        want: u64,
        mut handle: impl FnMut(&mut Umem, &mut Socket, &mut Vec<Frame>) -> anyhow::Result<u64>,
    ) -> anyhow::Result<u64> {
        let deadline = Instant::now() + WAIT;
        let (mut handled, mut last) = (0, Instant::now());
        let mut frames = Vec::new();
        let per_queue = Duration::from_millis(100) / self.sockets.len().max(1) as u32;
        while handled < want && Instant::now() < deadline {
            if handled > 0 && last.elapsed() > Duration::from_secs(1) {
                break;
            }
            for (index, socket) in &mut self.sockets {
                let umem = &mut self.umems[*index];
                socket.wait_rx(Some(per_queue))?;
                let invalid = socket.receive(umem, 64, &mut frames)?;
                if invalid > 0 {
                    bail!("{invalid} rx descriptors named frames the kernel was not lent");
                }
                if !frames.is_empty() {
                    last = Instant::now();
                }
                handled += handle(umem, socket, &mut frames)?;
                debug_assert!(frames.is_empty());
            }
        }
        Ok(handled)
    }
}

/// Counts of a burst's datagrams as received.
#[derive(Debug, Default)]
struct Tally {
    intact: u64,
    corrupt: u64,
    other: u64,
}

impl Tally {
    /// Classifies one frame: a burst datagram of `stream` (intact or not) or another frame.
    fn record(&mut self, frame: &[u8], stream: u32) -> bool {
        match udp_payload(frame) {
            Some((wire::BURST_PORT, payload)) => {
                match wire::check_datagram(payload) {
                    Some(d) if d.stream == stream && d.intact => self.intact += 1,
                    _ => self.corrupt += 1,
                }
                true
            }
            _ => {
                self.other += 1;
                false
            }
        }
    }
}

/// Frames back to the fill ring of `socket`'s queue; what does not fit goes to the free list.
fn recycle(umem: &mut Umem, socket: &mut Socket, frames: &mut Vec<Frame>) -> anyhow::Result<()> {
    socket.fill_with(umem, frames)?;
    for frame in frames.drain(..) {
        umem.release(frame);
    }
    Ok(())
}

/// rxdrop: the peer's burst arrives, every datagram intact, none lost.
fn rxdrop(
    q: &mut Queues,
    peer: IpAddr,
    stream: u32,
    label: &str,
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    request_burst(peer, stream)?;
    let mut tally = Tally::default();
    q.receive_burst(DATAGRAMS, |umem, socket, frames| {
        let mut burst = 0;
        for frame in frames.iter() {
            burst += u64::from(tally.record(umem.bytes(frame), stream));
        }
        recycle(umem, socket, frames)?;
        Ok(burst)
    })?;
    let (dropped, invalid) = q.drops()?;
    let modes = modes(q);
    let ok = tally.intact == DATAGRAMS && tally.corrupt == 0 && invalid == 0;
    outcome.check(
        "xdp-rxdrop",
        ok,
        &format!(
            "{label}, {modes}: {} of {DATAGRAMS} burst datagrams intact, {} corrupt, {} lost, \
             {} other frames, rx_dropped {dropped}, invalid descriptors {invalid}",
            tally.intact,
            tally.corrupt,
            DATAGRAMS.saturating_sub(tally.intact + tally.corrupt),
            tally.other
        ),
    );
    Ok(())
}

fn modes(q: &Queues) -> String {
    let umems = match q.umems.len() {
        1 if q.sockets.len() > 1 => "one shared UMEM".to_string(),
        n => format!("{n} UMEMs"),
    };
    let queues: Vec<String> = q
        .sockets
        .iter()
        .map(|(_, s)| format!("queue {} {}", s.queue(), s.mode()))
        .collect();
    format!("{} ({umems})", queues.join(", "))
}

/// Turns a received burst frame around toward the peer's UDP port: MACs and IP addresses swapped,
/// ports set, UDP checksum cleared (none, allowed for IPv4); the payload is not touched.
fn turn_around(frame: &mut [u8]) {
    testnet::frame::swap_macs(frame);
    let ip = 14;
    let (src, dst) = frame[ip + 12..ip + 20].split_at_mut(4);
    src.swap_with_slice(dst);
    let udp = ip + 20;
    frame[udp..udp + 2].copy_from_slice(&wire::BURST_PORT.to_be_bytes());
    frame[udp + 2..udp + 4].copy_from_slice(&wire::UDP_PORT.to_be_bytes());
    frame[udp + 6..udp + 8].copy_from_slice(&[0, 0]);
}

/// Echo: every burst datagram goes back out of the queue it arrived on, from the same UMEM frame (no
/// copy), and the peer verifies what comes back.
fn echo(
    q: &mut Queues,
    peer: IpAddr,
    stream: u32,
    label: &str,
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    request_burst(peer, stream)?;
    let mut tally = Tally::default();
    let mut sent = 0u64;
    let mut back = Vec::new();
    let mut completed = 0u64;
    let echoed = q.receive_burst(DATAGRAMS, |umem, socket, frames| {
        completed += u64::from(socket.reclaim(umem, u32::MAX)?.frames);
        for mut frame in frames.drain(..) {
            if tally.record(umem.bytes(&frame), stream) {
                turn_around(umem.bytes_mut(&mut frame));
                back.push(frame);
            } else {
                umem.release(frame);
            }
        }
        let n = back.len() as u64;
        sent += u64::from(socket.transmit(umem, &mut back)?);
        socket.wake_tx()?;
        // Frames the tx ring had no room for are not echoed (counted as lost by the peer).
        recycle(umem, socket, &mut back)?;
        Ok(n)
    })?;
    completed += drain_completions(q, sent - completed)?;
    let (received, errors) = report(peer, stream)?;
    let ok = tally.intact == DATAGRAMS && received == DATAGRAMS && errors == 0;
    outcome.check(
        "xdp-l2fwd",
        ok,
        &format!(
            "{label}, {}: {echoed} burst datagrams received ({} intact), {sent} sent back \
             ({completed} frames completed), the peer verified {received} of {DATAGRAMS}, \
             {errors} corrupt or duplicated, {} lost",
            modes(q),
            tally.intact,
            DATAGRAMS.saturating_sub(received)
        ),
    );
    Ok(())
}

/// Reclaims completed tx frames on every queue until `outstanding` more came back; returns how many.
fn drain_completions(q: &mut Queues, outstanding: u64) -> anyhow::Result<u64> {
    let deadline = Instant::now() + WAIT;
    let mut completed = 0u64;
    while completed < outstanding {
        for (index, socket) in &mut q.sockets {
            completed += u64::from(socket.reclaim(&mut q.umems[*index], u32::MAX)?.frames);
            socket.wake_tx()?;
        }
        if Instant::now() > deadline {
            bail!("{} tx frames never completed", outstanding - completed);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(completed)
}

/// Has the peer send a burst of [`DATAGRAMS`] datagrams of `stream` to the guest's burst port
/// (starting a second later).
pub(crate) fn request_burst(peer: IpAddr, stream: u32) -> anyhow::Result<()> {
    let burst = wire::Request::Burst {
        stream,
        datagrams: DATAGRAMS,
    };
    nic::request(peer, burst).map(drop)
}

/// Asks the peer what arrived of `stream`: (verified, corrupt or duplicated).
pub(crate) fn report(peer: IpAddr, stream: u32) -> anyhow::Result<(u64, u64)> {
    let request = wire::Request::UdpReport {
        stream,
        expected: DATAGRAMS,
    };
    nic::request(peer, request)?.context("a report has an answer")
}

/// txpush: `DATAGRAMS` frames of `size` bytes built in UMEM frames and sent from queue 0, paced; the
/// peer verifies every datagram.
#[allow(clippy::too_many_arguments)]
fn txpush(
    q: &mut Queues,
    peer: IpAddr,
    link: &LinkAddrs,
    stream: u32,
    size: usize,
    label: &str,
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    let (index, socket) = q.sockets.first_mut().context("no queue bound")?;
    let umem = &mut q.umems[*index];
    let payload_len = size - UDP_HEADERS;
    let mut seq = 0u64;
    let mut pending = Vec::new();
    let deadline = Instant::now() + WAIT;
    let mut completed = 0u64;
    while seq < DATAGRAMS && Instant::now() < deadline {
        completed += u64::from(socket.reclaim(umem, u32::MAX)?.frames);
        while pending.len() < TX_GROUP as usize && seq + (pending.len() as u64) < DATAGRAMS {
            let Some(mut frame) = umem.alloc() else { break };
            let n = seq + pending.len() as u64;
            let buf = umem.buffer_mut(&mut frame);
            let len = link
                .to_peer
                .write(buf, n, payload_len)
                .context("the frame fits a UMEM frame")?;
            wire::fill_datagram(&mut buf[UDP_HEADERS..len], stream, n);
            frame.set_len(len as u32);
            pending.push(frame);
        }
        let before = pending.len();
        socket.transmit(umem, &mut pending)?;
        seq += (before - pending.len()) as u64;
        socket.wake_tx()?;
        std::thread::sleep(TX_GAP);
    }
    for frame in pending {
        umem.release(frame);
    }
    completed += drain_completions(q, seq - completed)?;
    let (received, errors) = report(peer, stream)?;
    let ok = seq == DATAGRAMS && received == DATAGRAMS && errors == 0;
    outcome.check(
        "xdp-txpush",
        ok,
        &format!(
            "{label}, {size}-byte frames, {}: {seq} of {DATAGRAMS} sent ({completed} completed), \
             the peer verified {received}, {errors} corrupt or duplicated, {} lost",
            modes(q),
            DATAGRAMS.saturating_sub(received)
        ),
    );
    Ok(())
}
