//! `zcnet::observe` on a kernel with kprobes (inside the guest): what it counts for zcnet's sender on
//! both paths equals the sender's `TxStats` within 1%, a plain copying sender shows no zero-copy, and
//! the bytes the kernel copies after a zero-copy send (`skb_copy_ubufs`) show with their cause:
//! loopback delivery, and a packet socket tapping the interface.
//!
//! The kernel's own `msg_zerocopy -z` is observed too (`observe_reference`), and Debian's bpftrace
//! counts beside the observer on the same kprobe (`observe_bpftrace`). AF_XDP socket counters
//! are read through the kernel's socket diagnostics (`XDP_DIAG`, module
//! `xsk_diag`) for a socket of this process on the loopback, and must equal what the socket's owner
//! reads with `XDP_STATISTICS`.
//!
//! The sender's own counts are taken for this process; the late copies are also summed over every
//! task of the guest (the copy runs in softirq context, which may be `ksoftirqd` rather than the
//! sender), where they must equal the bytes sent once per copy site.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream, UdpSocket};
use std::thread;
use std::time::Duration;

use anyhow::Context;
use zcnet::observe::{Counter, Counters, MemlockLimit, Observer, Scope, XdpSocket, xdp_sockets_of};
use zcnet::tx::{Mode, SendPath, SenderConfig, TcpSender, TxStats};
use zcnet::xdp::{self, AttachMode, FrameMatch, Umem, UmemConfig, XdpProgram};

use crate::outcome::Outcome;

/// Bytes per send, and sends per stream.
const SEND: usize = 64 << 10;
const SENDS: usize = 64;

/// The counters of this process and of every task, before and after one stream.
struct Watch<'a> {
    own: &'a Observer,
    all: &'a Observer,
}

impl Watch<'_> {
    fn totals(&self) -> anyhow::Result<(Counters, Counters)> {
        let own = self.own.process_totals(std::process::id())?;
        Ok((own, everyone(self.all)?))
    }

    /// What `run` added to this process's counters and to everyone's, and its result.
    fn around<T>(
        &self,
        run: impl FnOnce() -> anyhow::Result<T>,
    ) -> anyhow::Result<(Counters, Counters, T)> {
        let (own0, all0) = self.totals()?;
        let value = run()?;
        let (own1, all1) = self.totals()?;
        Ok((own1.since(&own0), all1.since(&all0), value))
    }
}

/// Every task's counters, summed.
pub(crate) fn everyone(all: &Observer) -> anyhow::Result<Counters> {
    let mut sum = Counters::default();
    for (_, c) in all.snapshot()? {
        sum.add(&c);
    }
    Ok(sum)
}

/// Runs the checks; the outcome says which passed.
pub fn run() -> anyhow::Result<Outcome> {
    let mut out = Outcome::new("observe");
    let own = Observer::own_process().context("observe this process")?;
    let all = Observer::attach(Scope::All).context("observe every task")?;
    let attached: Vec<&str> = own.tracepoints().collect();
    out.check(
        "kprobe",
        attached.contains(&"kprobe:skb_copy_ubufs"),
        &format!(
            "attached to {attached:?}; not seen: {:?}",
            own.blind_spots()
        ),
    );
    let watch = Watch {
        own: &own,
        all: &all,
    };

    for (path, name) in [
        (SendPath::SENDMSG, "sendmsg"),
        (SendPath::IO_URING, "io_uring"),
    ] {
        let ((seen, everyone, stats), retransmits) =
            counting_retransmits(|| watch.around(|| zero_copy_stream(path)))?;
        let pairs: [(Counter, u64); 4] = if path == SendPath::SENDMSG {
            [
                (Counter::ZcSends, stats.zc_calls),
                (Counter::ZcBytes, stats.bytes),
                (Counter::Notifications, stats.notifications),
                (Counter::CopiedCompletions, stats.copied_ids),
            ]
        } else {
            [
                (Counter::UringZcRequests, stats.zc_calls),
                (Counter::UringZcBytes, stats.bytes),
                (Counter::UringNotifications, stats.notifications),
                (Counter::UringCopiedNotifications, stats.copied_ids),
            ]
        };
        agree(&mut out, &format!("{name} totals"), &seen, &pairs);
        late_copies(
            &mut out,
            name,
            &seen,
            &everyone,
            (stats.bytes, retransmits),
            false,
        );
    }

    // Root's sends are not charged: the kernel's capable(CAP_IPC_LOCK) exempts them.
    let me = std::process::id();
    let locked = own.locked_memory()?;
    out.check(
        "locked memory",
        locked
            .iter()
            .any(|l| l.pid == me && l.uid == 0 && l.limit == MemlockLimit::Exempt),
        &format!("this process (pid {me}, root) after its zero-copy streams: {locked:?}"),
    );

    let (seen, everyone, bytes) = watch.around(copying_stream)?;
    let zero_copy = [
        Counter::ZcSends,
        Counter::Notifications,
        Counter::UringZcRequests,
        Counter::UringNotifications,
        Counter::LateCopies,
    ];
    out.check(
        "copying sender",
        within_one_percent(seen.get(Counter::CopyBytes), bytes)
            && zero_copy.iter().all(|&c| seen.get(c) == 0)
            && everyone.get(Counter::LateCopies) == 0,
        &format!(
            "sent {bytes} bytes through std's TcpStream (send, copying); observed copy_bytes {}, {}",
            seen.get(Counter::CopyBytes),
            listed(&seen, &zero_copy)
        ),
    );

    let tap = rustix::net::socket(
        rustix::net::AddressFamily::PACKET,
        rustix::net::SocketType::RAW,
        Some(rustix::net::eth::ALL),
    )
    .context("open an AF_PACKET socket for every protocol (a tap on every interface)")?;
    let ((seen, everyone, stats), retransmits) =
        counting_retransmits(|| watch.around(|| zero_copy_stream(SendPath::SENDMSG)))?;
    drop(tap);
    agree(
        &mut out,
        "tapped sendmsg totals",
        &seen,
        &[
            (Counter::ZcSends, stats.zc_calls),
            (Counter::Notifications, stats.notifications),
        ],
    );
    late_copies(
        &mut out,
        "tapped",
        &seen,
        &everyone,
        (stats.bytes, retransmits),
        true,
    );
    xdp_socket_counters(&mut out)?;
    crate::observe_zcrx::check(&mut out, &own, &all)?;
    crate::observe_reference::msg_zerocopy(&mut out, &all)?;
    crate::observe_reference::tcp_mmap(&mut out, &all)?;
    crate::observe_bpftrace::late_copies(&mut out, &all)?;
    Ok(out)
}

/// The UDP port the AF_XDP check's program redirects, and the datagrams sent to it.
const XDP_PORT: u16 = 7311;
const XDP_DATAGRAMS: u64 = 40;

/// An AF_XDP socket of this process bound (copy mode) to queue 0 of the loopback, a generic XDP
/// program redirecting [`XDP_PORT`] to it, its fill ring left empty: every datagram redirected to
/// it finds no buffer and is dropped. `xdp_sockets_of` reads, through `XDP_DIAG`, every bound AF_XDP
/// socket of the process on lo:0 — the one in the XSKMAP and the one that holds the queue's fill
/// and completion rings (zcnet's `xdp::Socket` binds both, sharing one UMEM). Exactly one must have
/// dropped the datagrams sent (`rx_dropped`); the fill ring's emptiness is the shared pool's, so
/// each shows it; and the receiving one's counters equal, one by one, what the owner reads with
/// `XDP_STATISTICS`.
fn xdp_socket_counters(out: &mut Outcome) -> anyhow::Result<()> {
    let mut umem = Umem::new(UmemConfig::default()).context("UMEM")?;
    let socket = xdp::Socket::bind(&mut umem, "lo", 0, xdp::Mode::Copy).context("bind to lo")?;
    let program = XdpProgram::redirect_to_xsk(1, FrameMatch::UdpPort(XDP_PORT))?;
    program
        .xsk_map()
        .context("a redirect program has a map")?
        .insert(0, &socket)?;
    let _link = program
        .attach_to("lo", AttachMode::Generic)
        .context("attach to lo")?;
    let ours = || -> anyhow::Result<Vec<XdpSocket>> {
        Ok(xdp_sockets_of(&[std::process::id()])?
            .into_iter()
            .map(|(_, s)| s)
            .filter(|s| s.interface.as_deref() == Some("lo") && s.queue_id == 0)
            .collect())
    };
    let before = ours()?;
    let sender = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    for i in 0..XDP_DATAGRAMS {
        sender.send_to(&i.to_le_bytes(), (Ipv4Addr::LOCALHOST, XDP_PORT))?;
    }
    // Loopback delivery (and the generic XDP program with it) runs in the sending call's softirq.
    thread::sleep(Duration::from_millis(200));
    let after = ours()?;
    let owner = socket.statistics()?;
    let grown: Vec<(u64, xdp::Statistics)> = after
        .iter()
        .filter_map(|a| {
            let b = before.iter().find(|b| b.inode == a.inode)?;
            Some((a.inode, a.stats.since(&b.stats)))
        })
        .collect();
    let receiving: Vec<&XdpSocket> = after
        .iter()
        .filter(|a| {
            grown
                .iter()
                .any(|(inode, g)| *inode == a.inode && g.rx_dropped > 0)
        })
        .collect();
    let ok = match receiving[..] {
        [rx] => {
            let diag = rx.stats;
            grown.len() == after.len()
                && grown.iter().all(|(inode, g)| {
                    g.rx_fill_ring_empty_descs == XDP_DATAGRAMS
                        && g.rx_dropped == if *inode == rx.inode { XDP_DATAGRAMS } else { 0 }
                })
                && diag == owner
        }
        _ => false,
    };
    out.check(
        "xdp-diag",
        ok,
        &format!(
            "{XDP_DATAGRAMS} datagrams to an AF_XDP socket on lo:0 with an empty fill ring: \
             XDP_DIAG lists {} socket(s) of ours there, grown by {grown:?}; the receiving one \
             {:?}; the owner's XDP_STATISTICS {owner:?}",
            after.len(),
            receiving.first()
        ),
    );
    Ok(())
}

/// A PASS line when each observed counter is within 1% of what the sender reported.
pub(crate) fn agree(out: &mut Outcome, check: &str, seen: &Counters, pairs: &[(Counter, u64)]) {
    let ok = pairs
        .iter()
        .all(|&(c, reported)| within_one_percent(seen.get(c), reported));
    let text: Vec<String> = pairs
        .iter()
        .map(|&(c, reported)| format!("{c} {} (sender {reported})", seen.get(c)))
        .collect();
    out.check(check, ok, &text.join(", "));
}

/// What `run` returns, and the segments TCP retransmitted in this network namespace while it ran.
pub(crate) fn counting_retransmits<T>(
    run: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<(T, u64)> {
    let before = retransmitted_segments()?;
    let value = run()?;
    Ok((value, retransmitted_segments()? - before))
}

/// Segments TCP retransmitted in this network namespace so far (`Tcp: RetransSegs` of
/// /proc/net/snmp).
fn retransmitted_segments() -> anyhow::Result<u64> {
    let snmp = std::fs::read_to_string("/proc/net/snmp").context("read /proc/net/snmp")?;
    let mut tcp = snmp.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next(), tcp.next());
    let (Some(names), Some(values)) = (names, values) else {
        anyhow::bail!("no Tcp lines in /proc/net/snmp");
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(name, _)| *name == "RetransSegs")
        .context("no RetransSegs in /proc/net/snmp")?
        .1
        .parse()
        .context("RetransSegs")
}

/// The most bytes one segment over loopback carries: `lo`'s `gso_max_size`, the kernel's
/// `GSO_LEGACY_MAX_SIZE` unless raised (`ip link set lo gso_max_size`, which the guest does not).
const LOOPBACK_SEGMENT_MAX: u64 = 65536;

/// The late copies of one zero-copy stream of `bytes` over loopback: every byte copied on the
/// receive path (local delivery) and, when tapped, once more for the tap; some of it counted
/// against this process. A retransmitted segment is copied again (its clone is delivered, and
/// tapped, too): with `retransmits` segments retransmitted meanwhile (in the namespace, see
/// [`counting_retransmits`]) each path may copy up to that many loopback segments more than was
/// sent, and a few percent besides, never less.
pub(crate) fn late_copies(
    out: &mut Outcome,
    name: &str,
    seen: &Counters,
    everyone: &Counters,
    (bytes, retransmits): (u64, u64),
    tapped: bool,
) {
    let receive = everyone.get(Counter::LateCopiedReceiveBytes);
    let tap = everyone.get(Counter::LateCopiedTapBytes);
    let total = everyone.get(Counter::LateCopiedBytes);
    let again = retransmits * LOOPBACK_SEGMENT_MAX;
    let expected_tap = if tapped { bytes } else { 0 };
    let tap_again = if tapped { again } else { 0 };
    out.check(
        &format!("{name} late copies"),
        (bytes..=bytes + bytes / 20 + again).contains(&receive)
            && (expected_tap..=expected_tap + expected_tap / 20 + tap_again).contains(&tap)
            && total == receive + tap
            && seen.get(Counter::LateCopies) > 0,
        &format!(
            "sent {bytes} bytes ({retransmits} segments retransmitted meanwhile); the kernel copied \
             {total} later ({} copies): {receive} on the receive path (local delivery), {tap} for a \
             tap (this process: {})",
            everyone.get(Counter::LateCopies),
            listed(
                seen,
                &[
                    Counter::LateCopies,
                    Counter::LateCopiedReceiveBytes,
                    Counter::LateCopiedTapBytes
                ]
            )
        ),
    );
}

fn listed(c: &Counters, which: &[Counter]) -> String {
    which
        .iter()
        .map(|&k| format!("{k} {}", c.get(k)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `seen` is within 1% of `reported` (both zero counts as equal).
fn within_one_percent(seen: u64, reported: u64) -> bool {
    seen.abs_diff(reported) as f64 <= reported as f64 * 0.01
}

/// A loopback TCP connection and a thread reading everything from its far end, checking every byte
/// is `i as u8` for the `i`-th send of `SEND` bytes.
fn connection() -> anyhow::Result<(TcpStream, thread::JoinHandle<std::io::Result<bool>>)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let reader = thread::spawn(move || {
        let mut data = Vec::new();
        listener.accept()?.0.read_to_end(&mut data)?;
        Ok(data.len() == SEND * SENDS
            && data
                .chunks(SEND)
                .enumerate()
                .all(|(i, c)| c.iter().all(|&b| b == i as u8)))
    });
    Ok((TcpStream::connect(addr)?, reader))
}

/// Waits for the reader and fails unless every byte arrived as sent.
fn verified(reader: thread::JoinHandle<std::io::Result<bool>>) -> anyhow::Result<()> {
    let intact = reader
        .join()
        .map_err(|_| anyhow::anyhow!("the reader panicked"))??;
    anyhow::ensure!(intact, "the receiver did not get every byte as sent");
    Ok(())
}

/// A stream sent with zcnet's `TcpSender` in zero-copy mode on `path`; its statistics.
fn zero_copy_stream(path: SendPath) -> anyhow::Result<TxStats> {
    let (stream, reader) = connection()?;
    let mut config = SenderConfig::default();
    config.policy.mode = Mode::ZeroCopy;
    config.path = path;
    let mut tx = TcpSender::new(stream, config);
    for i in 0..SENDS {
        tx.send(vec![i as u8; SEND])?;
    }
    tx.flush(Duration::from_secs(60))?;
    let stats = tx.stats().clone();
    drop(tx);
    verified(reader)?;
    Ok(stats)
}

/// The same stream written through std's `TcpStream` (`send`, copying); the bytes sent.
fn copying_stream() -> anyhow::Result<u64> {
    let (mut stream, reader) = connection()?;
    for i in 0..SENDS {
        stream.write_all(&vec![i as u8; SEND])?;
    }
    drop(stream);
    verified(reader)?;
    Ok((SEND * SENDS) as u64)
}
