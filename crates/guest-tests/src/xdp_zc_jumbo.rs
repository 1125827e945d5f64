//! The AF_XDP jumbo check of the zero-copy run: 9000-byte frames from the host-side peer arrive on
//! sockets bound with multi-buffer (`XDP_USE_SG`), each as a packet of several UMEM frames, every byte
//! verified. Zero-copy first; when the driver refuses zero-copy multi-buffer the check says so (with
//! the kernel's errno) and passes as "driver refuses", and the frames are checked in copy mode.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use testnet::frame::udp_payload;
use zcnet::xdp::{
    AttachMode, FrameMatch, Mode, Packet, Socket, SocketConfig, Umem, UmemConfig, XdpProgram,
};

use crate::outcome::Outcome;
use crate::{nic, wire};

/// MTU of the guest's NIC during the check (the harness sets the host side of the link to it).
const JUMBO_MTU: u32 = 9000;
/// Datagrams of the jumbo burst.
const JUMBOS: u64 = 100;
/// Longest wait for the burst.
const WAIT: Duration = Duration::from_secs(30);

/// Runs the check on every queue of `iface` with the peer's jumbo burst of stream `stream`. The NIC's
/// MTU is 9000 for the check and back to what it was afterwards.
pub fn run(
    peer: IpAddr,
    iface: &str,
    queues: u32,
    stream: u32,
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    let path = format!("/sys/class/net/{iface}/mtu");
    let mtu: u32 = std::fs::read_to_string(&path)
        .with_context(|| format!("read {path}"))?
        .trim()
        .parse()
        .with_context(|| format!("parse {path}"))?;
    set_mtu(iface, JUMBO_MTU)?;
    let checked = receive_jumbos(peer, iface, queues, stream, outcome);
    set_mtu(iface, mtu)?;
    checked
}

/// `ip link set dev IFACE mtu MTU` (busybox in the guest).
fn set_mtu(iface: &str, mtu: u32) -> anyhow::Result<()> {
    let status = std::process::Command::new("ip")
        .args(["link", "set", "dev", iface, "mtu", &mtu.to_string()])
        .status()
        .context("run ip link set mtu")?;
    if !status.success() {
        bail!("ip link set dev {iface} mtu {mtu}: {status}");
    }
    Ok(())
}

fn receive_jumbos(
    peer: IpAddr,
    iface: &str,
    queues: u32,
    stream: u32,
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    let mut config = SocketConfig::default();
    config.multi_buffer = true;
    config.tx_size = 0;
    // Queue 0 tries zero-copy; the others follow in the mode it got.
    let mut umems = vec![Umem::new(UmemConfig::default())?];
    let mode = match Socket::bind_with(&mut umems[0], iface, 0, Mode::ZeroCopy, config) {
        Ok(socket) => {
            drop(socket);
            outcome.check(
                "xdp-jumbo-zerocopy",
                true,
                &format!("{iface} queue 0 bound zero-copy with multi-buffer"),
            );
            Mode::ZeroCopy
        }
        Err(refused) => {
            outcome.check(
                "xdp-jumbo-zerocopy",
                true,
                &format!(
                    "driver refuses: {refused}; the 9000-byte frames are checked in copy mode"
                ),
            );
            Mode::Copy
        }
    };
    let mut sockets = Vec::new();
    for queue in 0..queues {
        if queue > 0 {
            umems.push(Umem::new(UmemConfig::default())?);
        }
        let umem = &mut umems[queue as usize];
        let mut socket = Socket::bind_with(umem, iface, queue, mode, config)
            .with_context(|| format!("bind {iface} queue {queue} with multi-buffer"))?;
        socket.fill(umem, u32::MAX)?;
        sockets.push(socket);
    }
    let program =
        XdpProgram::redirect_to_xsk_multi_buffer(queues, FrameMatch::UdpPort(wire::BURST_PORT))?;
    let map = program
        .xsk_map()
        .context("the redirect program has a map")?;
    for socket in &sockets {
        map.insert(socket.queue(), socket)?;
    }
    let _link = program
        .attach_to(iface, AttachMode::Driver)
        .with_context(|| format!("attach the multi-buffer program to {iface} (MTU {JUMBO_MTU})"))?;
    nic::request(
        peer,
        wire::Request::JumboBurst {
            stream,
            datagrams: JUMBOS,
        },
    )?;
    let (mut intact, mut corrupt, mut spanned) = (0u64, 0u64, 0u64);
    let mut packets: Vec<Packet> = Vec::new();
    let mut bytes = Vec::new();
    let deadline = Instant::now() + WAIT;
    let mut last = Instant::now();
    while intact + corrupt < JUMBOS && Instant::now() < deadline {
        if intact + corrupt > 0 && last.elapsed() > Duration::from_secs(2) {
            break;
        }
        for (socket, umem) in sockets.iter_mut().zip(umems.iter_mut()) {
            socket.wait_rx(Some(Duration::from_millis(50)))?;
            let invalid = socket.receive_packets(umem, 64, &mut packets)?;
            if invalid > 0 {
                bail!("{invalid} rx descriptors named frames the kernel was not lent");
            }
            for packet in packets.drain(..) {
                last = Instant::now();
                bytes.clear();
                umem.copy_packet(&packet, &mut bytes);
                if let Some((wire::BURST_PORT, payload)) = udp_payload(&bytes) {
                    match wire::check_datagram(payload) {
                        Some(d)
                            if d.stream == stream
                                && d.intact
                                && payload.len() == wire::JUMBO_DATAGRAM =>
                        {
                            intact += 1
                        }
                        _ => corrupt += 1,
                    }
                    spanned += u64::from(packet.frames().len() > 1);
                }
                let mut frames = packet.into_frames();
                socket.fill_with(umem, &mut frames)?;
                frames.into_iter().for_each(|f| umem.release(f));
            }
        }
    }
    let mode = sockets
        .first()
        .map_or("unbound", |s| s.mode().as_str())
        .to_string();
    outcome.check(
        "xdp-jumbo",
        intact == JUMBOS && corrupt == 0 && spanned == intact,
        &format!(
            "{mode}, multi-buffer, MTU {JUMBO_MTU}: {intact} of {JUMBOS} 9000-byte datagrams \
             intact ({spanned} in several UMEM frames), {corrupt} corrupt, {} lost",
            JUMBOS.saturating_sub(intact + corrupt)
        ),
    );
    Ok(())
}
