//! io_uring zero-copy receive (zcrx) in the guest: device-less zcrx over loopback TCP on the
//! backports kernel (7.1+: `ZCRX_REG_NODEV`), every byte checked against the stream pattern, the
//! area exhausted and recovered, the kernel's copy statistics, and each refusal with its errno and
//! zcnet's reason; on an older kernel (`--expect-too-old`, the 6.12 boot) only that zcrx is refused
//! as too old.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::OwnedFd;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use rustix::thread::{CapabilitySet, capabilities, set_capabilities};
use zcnet::aio::AsyncReceiver;
use zcnet::rx::{
    AutoReason, ChunkKind, Receiver, RxConfig, RxError, RxMode, RxPath, RxStats, ZcrxConfig,
    ZcrxRefusal,
};

use crate::outcome::Outcome;
use crate::{nic, pattern, peer, wire};

/// A loopback pair: (client, server).
fn pair() -> anyhow::Result<(TcpStream, TcpStream)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let client = TcpStream::connect(listener.local_addr()?)?;
    Ok((client, listener.accept()?.0))
}

/// Sends `bytes` of the pattern on `client` from a thread (paced as [`peer::send_pattern`] says),
/// then closes it.
fn send_pattern(
    mut client: TcpStream,
    bytes: u64,
    pace: Option<Duration>,
) -> thread::JoinHandle<std::io::Result<()>> {
    thread::spawn(move || peer::send_pattern(&mut client, bytes, pace))
}

/// What receiving a whole stream through zcrx gave.
struct Received {
    bytes: u64,
    mismatched: u64,
    chunks: u64,
    stats: RxStats,
}

/// Receives until the end of the stream, checking every byte against the pattern.
fn receive_all(rx: &mut Receiver) -> Result<Received, RxError> {
    let (mut bytes, mut mismatched, mut chunks) = (0, 0, 0);
    while let Some(chunk) = rx.recv()? {
        if chunk.kind() != ChunkKind::Zcrx || chunk.offset() != bytes {
            mismatched += chunk.len() as u64;
        } else {
            mismatched += pattern::mismatches(&chunk, bytes);
        }
        bytes += chunk.len() as u64;
        chunks += 1;
    }
    Ok(Received {
        bytes,
        mismatched,
        chunks,
        stats: *rx.stats(),
    })
}

fn zcrx_config(area: usize) -> RxConfig {
    RxConfig::default().with_path(RxPath::Zcrx(ZcrxConfig::no_device().with_area_len(area)))
}

/// The refusal line: errno name and zcnet's reason.
fn refusal_text(e: &RxError) -> String {
    format!("{e} [refusal {:?}]", e.zcrx_refusal())
}

pub fn run(
    expect_too_old: bool,
    iface: Option<&str>,
    peer: Option<IpAddr>,
) -> anyhow::Result<Outcome> {
    let mut out = Outcome::new("zcrx");
    if expect_too_old {
        let (_client, server) = pair()?;
        match Receiver::new(server, zcrx_config(1 << 20)) {
            Err(e) if e.zcrx_refusal() == Some(ZcrxRefusal::KernelTooOld) => out.check(
                "too-old",
                e.raw_os_error() == Some(libc::EINVAL),
                &refusal_text(&e),
            ),
            Err(e) => out.fail(
                "too-old",
                &format!("refused otherwise: {}", refusal_text(&e)),
            ),
            Ok(_) => out.fail("too-old", "this kernel took a zcrx registration"),
        }
        return Ok(out);
    }
    loopback(&mut out, 8 << 20, 1 << 20, "loopback")?;
    exhaustion(&mut out)?;
    auto_reports_copying(&mut out)?;
    async_under_cancellation(&mut out)?;
    refusals(&mut out, iface)?;
    crate::zcrx_broker::run(&mut out)?;
    if let Some(peer) = peer {
        over_nic(&mut out, peer)?;
        nic::request(peer, wire::Request::Quit)?;
    }
    Ok(out)
}

/// A stream the host side of the guest's virtio-net sends, received device-less through zcrx.
fn over_nic(out: &mut Outcome, peer: IpAddr) -> anyhow::Result<()> {
    let bytes = 4u64 << 20;
    let mut conn = TcpStream::connect(SocketAddr::new(peer, wire::TCP_PORT))
        .with_context(|| format!("connect to the peer {peer}:{}", wire::TCP_PORT))?;
    conn.write_all(&wire::Request::TcpSend { bytes }.encode())?;
    let mut rx = Receiver::new(conn, zcrx_config(1 << 20)).context("zcrx receiver")?;
    match receive_all(&mut rx) {
        Ok(got) => out.check(
            "virtio-net",
            got.bytes == bytes && got.mismatched == 0,
            &format!(
                "{} of {bytes} bytes from the host side of the tap through a 1 MiB area, {} \
                 mismatched; kernel copy_bytes {}, area exhausted {} times",
                got.bytes, got.mismatched, got.stats.zcrx_copied_bytes, got.stats.zcrx_exhausted
            ),
        ),
        Err(e) => out.fail("virtio-net", &refusal_text(&e)),
    }
    Ok(())
}

/// 8 MiB through a 1 MiB area over loopback: every byte in order, the copy statistics equal to it.
fn loopback(out: &mut Outcome, bytes: u64, area: usize, check: &str) -> anyhow::Result<()> {
    let (client, server) = pair()?;
    let sender = send_pattern(client, bytes, None);
    let mut rx = Receiver::new(server, zcrx_config(area)).context("zcrx receiver")?;
    let got = receive_all(&mut rx);
    sender.join().expect("sender thread")?;
    let got = got.context("zcrx receive")?;
    let s = got.stats;
    out.check(
        check,
        got.bytes == bytes && got.mismatched == 0 && s.zcrx_bytes == bytes,
        &format!(
            "{} of {bytes} bytes in {} chunks through a {} KiB area, {} mismatched; {} receives armed, \
             {} exhausted",
            got.bytes,
            got.chunks,
            area >> 10,
            got.mismatched,
            s.zcrx_arms,
            s.zcrx_exhausted
        ),
    );
    out.check(
        &format!("{check}-copy-stats"),
        s.zcrx_copied_bytes == got.bytes && s.zcrx_copy_count > 0 && s.zcrx_copy_events > 0,
        &format!(
            "kernel copy_bytes {} for {} bytes received, copy_count {}, {} copy events re-armed \
             ({} re-arm failures)",
            s.zcrx_copied_bytes,
            got.bytes,
            s.zcrx_copy_count,
            s.zcrx_copy_events,
            s.zcrx_rearm_failures
        ),
    );
    Ok(())
}

/// A stream queued whole before the receiver starts, into an area of a sixteenth of it: the kernel
/// exhausts the area (`-ENOMEM`), the receive is re-armed once the chunks came back, and the stream
/// still arrives whole.
fn exhaustion(out: &mut Outcome) -> anyhow::Result<()> {
    let bytes = 2u64 << 20;
    let (client, server) = pair()?;
    send_pattern(client, bytes, None)
        .join()
        .expect("sender thread")?;
    let mut rx = Receiver::new(server, zcrx_config(128 << 10)).context("zcrx receiver")?;
    let got = receive_all(&mut rx).context("zcrx receive")?;
    out.check(
        "exhaustion",
        got.bytes == bytes && got.mismatched == 0 && got.stats.zcrx_exhausted > 0,
        &format!(
            "{} of {bytes} bytes through a 128 KiB area, {} mismatched; area exhausted {} times, \
             {} receives armed",
            got.bytes, got.mismatched, got.stats.zcrx_exhausted, got.stats.zcrx_arms
        ),
    );
    Ok(())
}

/// `RxMode::Auto` on a device-less zcrx receiver says it copies, and why.
fn auto_reports_copying(out: &mut Outcome) -> anyhow::Result<()> {
    let (client, server) = pair()?;
    let sender = send_pattern(client, 1 << 20, None);
    // RxMode::Auto is the default mode.
    let mut rx = Receiver::new(server, zcrx_config(1 << 20)).context("zcrx receiver")?;
    let got = receive_all(&mut rx);
    sender.join().expect("sender thread")?;
    let got = got.context("zcrx receive")?;
    let choice = got.stats.auto;
    out.check(
        "auto",
        got.mismatched == 0
            && choice.is_some_and(|c| {
                c.mode == RxMode::Copy && matches!(c.reason, AutoReason::Zcrx { .. })
            }),
        &format!("{} bytes, auto reports {choice:?}", got.bytes),
    );
    Ok(())
}

/// `AsyncReceiver` on the zcrx path, each `recv()` raced against a random sleep in `select!` so that
/// many futures are dropped part-way: the stream still arrives whole, in order, once.
fn async_under_cancellation(out: &mut Outcome) -> anyhow::Result<()> {
    let bytes = 4u64 << 20;
    let (client, server) = pair()?;
    let rx = Receiver::new(server, zcrx_config(256 << 10)).context("zcrx receiver")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // Paced (64 KiB per millisecond, after 20 ms) so that the receiver waits and the sleeps win
    // races: at least those before the first byte.
    let sender = send_pattern(client, bytes, Some(Duration::from_millis(1)));
    let mut seed = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos() as u64 | 1;
    let run = async move {
        let mut arx = AsyncReceiver::new(rx)?;
        let (mut got, mut mismatched, mut cancelled) = (0u64, 0u64, 0u64);
        loop {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let delay = Duration::from_micros(seed % 2000);
            tokio::select! {
                chunk = arx.recv() => match chunk? {
                    Some(chunk) => {
                        mismatched += if chunk.offset() == got {
                            pattern::mismatches(&chunk, got)
                        } else {
                            chunk.len() as u64
                        };
                        got += chunk.len() as u64;
                    }
                    None => break,
                },
                () = tokio::time::sleep(delay) => cancelled += 1,
            }
        }
        anyhow::Ok((got, mismatched, cancelled, *arx.get_ref().stats()))
    };
    let result =
        runtime.block_on(async { tokio::time::timeout(Duration::from_secs(120), run).await });
    sender.join().expect("sender thread")?;
    let (got, mismatched, cancelled, stats) = match result {
        Ok(Ok(done)) => done,
        Ok(Err(e)) => {
            out.fail("async-cancellation", &format!("{e:#}"));
            return Ok(());
        }
        Err(_) => {
            out.fail("async-cancellation", "no end of the stream within 120 s");
            return Ok(());
        }
    };
    out.check(
        "async-cancellation",
        got == bytes && mismatched == 0 && cancelled > 0,
        &format!(
            "{got} of {bytes} bytes through AsyncReceiver, {mismatched} mismatched, {cancelled} chunk futures dropped by select!; area exhausted {} times",
            stats.zcrx_exhausted
        ),
    );
    Ok(())
}

/// One refused set-up: the errno and reason it must give.
fn expect_refused(
    out: &mut Outcome,
    check: &str,
    result: Result<Receiver, RxError>,
    errno: i32,
    reason: ZcrxRefusal,
) {
    match result {
        Err(e) => out.check(
            check,
            e.raw_os_error() == Some(errno) && e.zcrx_refusal() == Some(reason),
            &refusal_text(&e),
        ),
        Ok(_) => out.fail(check, "the kernel took it"),
    }
}

fn refusals(out: &mut Outcome, iface: Option<&str>) -> anyhow::Result<()> {
    // Device-less takes page-sized buffers only.
    let big = RxConfig::default().with_path(RxPath::Zcrx(
        ZcrxConfig::no_device().with_rx_buf_len(16 << 10),
    ));
    expect_refused(
        out,
        "refused-rx-buf-len",
        Receiver::new(pair()?.1, big),
        libc::EOPNOTSUPP,
        ZcrxRefusal::DeviceUnsupported,
    );
    // RECV_ZC takes TCP only: a UDP socket handed over as a stream is refused at the first receive.
    let udp = UdpSocket::bind("127.0.0.1:0")?;
    udp.connect(udp.local_addr()?)?;
    let as_stream = TcpStream::from(OwnedFd::from(udp));
    match Receiver::new(as_stream, zcrx_config(1 << 20)) {
        Ok(mut rx) => match rx.recv() {
            Err(e) => out.check(
                "refused-udp",
                e.raw_os_error() == Some(libc::EPROTONOSUPPORT)
                    && e.zcrx_refusal() == Some(ZcrxRefusal::NotTcp),
                &refusal_text(&e),
            ),
            Ok(_) => out.fail("refused-udp", "RECV_ZC on a UDP socket returned data"),
        },
        Err(e) => out.fail(
            "refused-udp",
            &format!("set-up failed: {}", refusal_text(&e)),
        ),
    }
    // Without CAP_NET_ADMIN (dropped from this thread's effective set only).
    let unprivileged = thread::spawn(|| -> anyhow::Result<Result<Receiver, RxError>> {
        let mut caps = capabilities(None)?;
        caps.effective.remove(CapabilitySet::NET_ADMIN);
        set_capabilities(None, caps)?;
        Ok(Receiver::new(pair()?.1, zcrx_config(1 << 20)))
    });
    let result = unprivileged.join().expect("unprivileged thread")?;
    expect_refused(
        out,
        "refused-no-cap-net-admin",
        result,
        libc::EPERM,
        ZcrxRefusal::NotPermitted,
    );
    // A real registration on the guest's virtio-net: no queue management, no header split.
    if let Some(iface) = iface {
        let config = RxConfig::default().with_path(RxPath::Zcrx(ZcrxConfig::queue(iface, 0)));
        match Receiver::new(pair()?.1, config) {
            Err(e) => out.check(
                "refused-virtio-net",
                e.zcrx_refusal().is_some() && e.raw_os_error().is_some(),
                &format!("{iface} queue 0: {}", refusal_text(&e)),
            ),
            Ok(_) => out.fail("refused-virtio-net", "virtio-net took a zcrx queue"),
        }
    }
    Ok(())
}
