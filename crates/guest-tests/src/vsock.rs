//! AF_VSOCK MSG_ZEROCOPY over the `vsock_loopback` transport (inside the guest): zcnet's sender on stream
//! and seqpacket sockets, and the kernel behaviour it is built on, seen at the `sys` level.

use std::os::fd::AsFd;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;
use testnet::loopback_check;
use zcnet::tx::Completion as ZerocopyCompletion;
use zcnet::tx::errqueue::{self, ControlBuf, ErrqueueMessage, SOL_VSOCK, VSOCK_RECVERR};
use zcnet::tx::vsock::{
    VMADDR_CID_LOCAL, VMADDR_PORT_ANY, VsockSocket, VsockType, loopback_available, set_buffer_size,
};
use zcnet::tx::{BufferPool, Mode, PoolConfig, SendPath, SenderConfig, TxStats, VsockSender};

use crate::outcome::Outcome;
use crate::{
    pattern, vsock_async, vsock_credit, vsock_optmem, vsock_seqpacket, vsock_timeout, vsock_uring,
};

/// The largest send the virtio vsock transport completes with one id (`VIRTIO_VSOCK_MAX_PKT_BUF_SIZE`).
pub(crate) const PACKET: usize = 64 << 10;
/// Receiver buffer: credit for many whole sends, so that the sender is never short of it.
pub(crate) const RECEIVER_BUFFER: u64 = 4 << 20;
/// How long any wait for data or completions may take.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// Runs every vsock check; the outcome says which passed.
pub fn run() -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new("vsock");
    if let Err(why) = loopback_available() {
        outcome.fail("loopback", &why);
        return Ok(outcome);
    }
    for ty in [VsockType::Stream, VsockType::Seqpacket] {
        self_check(ty, &mut outcome);
        pooled_sends(ty, PACKET, &mut outcome)?;
        pooled_sends(ty, 4 * PACKET, &mut outcome)?;
        vsock_async::async_sends(ty, &mut outcome)?;
    }
    for mode in [Mode::Copy, Mode::ZeroCopy] {
        vsock_seqpacket::short_credit(mode, &mut outcome)?;
    }
    vsock_seqpacket::zerocopy_pieces(&mut outcome)?;
    vsock_timeout::restored_on_close(&mut outcome)?;
    starved_sends(&mut outcome)?;
    vsock_credit::run(&mut outcome)?;
    vsock_optmem::no_notification_memory(&mut outcome)?;
    vsock_uring::run(&mut outcome)?;
    so_zerocopy(&mut outcome)?;
    large_send(Some(RECEIVER_BUFFER), &mut outcome)?;
    large_send(None, &mut outcome)?;
    Ok(outcome)
}

pub(crate) fn type_name(ty: VsockType) -> &'static str {
    match ty {
        VsockType::Stream => "stream",
        VsockType::Seqpacket => "seqpacket",
    }
}

pub(crate) fn ids(stats: &TxStats) -> String {
    format!(
        "ids sent {}, zero-copied {}, copied {}, notifications {}",
        stats.zc_calls, stats.zc_ids, stats.copied_ids, stats.notifications
    )
}

/// zcnet's own loopback self-check: 64 KiB pooled sends, every byte verified, every buffer back;
/// zero-copy on a stream, copied on seqpacket (whole messages: see `zcnet::tx::vsock`).
fn self_check(ty: VsockType, outcome: &mut Outcome) {
    let name = format!("{}-self-check", type_name(ty));
    match loopback_check(ty, Mode::ZeroCopy, PACKET, 64) {
        Ok(r) => {
            let s = &r.stats;
            let zero_copy_ok = match ty {
                VsockType::Stream => {
                    s.zc_calls > 0 && s.zc_ids + s.copied_ids == s.zc_calls && s.zc_ids > 0
                }
                VsockType::Seqpacket => s.zc_calls == 0 && s.copy_unsupported == 64,
            };
            let ok = zero_copy_ok && r.pool_available == r.pool_capacity;
            let what = format!(
                "{} bytes verified, {}, buffers back {}/{}",
                r.bytes,
                ids(s),
                r.pool_available,
                r.pool_capacity
            );
            outcome.check(&name, ok, &what);
        }
        Err(e) => outcome.fail(&name, &e.to_string()),
    }
}

/// A receiver on `VMADDR_CID_LOCAL` that accepts one connection and checks `total` bytes of pattern.
pub(crate) struct Receiver {
    pub(crate) port: u32,
    thread: thread::JoinHandle<anyhow::Result<Received>>,
}

/// What a [`Receiver`] got.
#[derive(Debug)]
pub(crate) struct Received {
    pub(crate) bytes: u64,
    pub(crate) errors: u64,
    /// Sizes of the messages (seqpacket) or reads (stream).
    pub(crate) reads: Vec<usize>,
}

impl Receiver {
    /// Listens, with `buffer` bytes of vsock receive buffer (`None`: the kernel's default).
    pub(crate) fn start(
        ty: VsockType,
        total: u64,
        buffer: Option<u64>,
    ) -> anyhow::Result<Receiver> {
        Receiver::start_reading(ty, total, buffer, 1 << 20, Duration::ZERO)
    }

    /// Like [`Receiver::start`], reading at most `read` bytes at a time with a `pause` after each read
    /// (a slow reader: the sender's credit runs short).
    pub(crate) fn start_reading(
        ty: VsockType,
        total: u64,
        buffer: Option<u64>,
        read: usize,
        pause: Duration,
    ) -> anyhow::Result<Receiver> {
        let listener = VsockSocket::listen(ty, VMADDR_CID_LOCAL, VMADDR_PORT_ANY)
            .context("listen on VMADDR_CID_LOCAL")?;
        if let Some(bytes) = buffer {
            set_buffer_size(listener.as_fd(), bytes).context("SO_VM_SOCKETS_BUFFER_SIZE")?;
        }
        let port = listener.local_port()?;
        let thread = thread::spawn(move || {
            let conn = listener.accept().context("accept")?;
            let mut buf = vec![0u8; read];
            let mut got = Received {
                bytes: 0,
                errors: 0,
                reads: Vec::new(),
            };
            while got.bytes < total {
                let n = conn.recv(&mut buf).context("recv")?;
                if n == 0 {
                    break;
                }
                got.errors += pattern::mismatches(&buf[..n], got.bytes);
                got.bytes += n as u64;
                got.reads.push(n);
                thread::sleep(pause);
            }
            Ok(got)
        });
        Ok(Receiver { port, thread })
    }

    pub(crate) fn finish(self) -> anyhow::Result<Received> {
        self.thread.join().expect("receiver thread panicked")
    }
}

/// A zero-copy [`VsockSender`] connected to `port` on `VMADDR_CID_LOCAL`, and a pool of eight buffers of
/// `size` bytes for it.
pub(crate) fn zero_copy_sender(
    ty: VsockType,
    port: u32,
    size: usize,
) -> anyhow::Result<(VsockSender, BufferPool)> {
    zero_copy_sender_on(SendPath::SENDMSG, ty, port, size)
}

/// [`zero_copy_sender`] sending on `path`.
pub(crate) fn zero_copy_sender_on(
    path: SendPath,
    ty: VsockType,
    port: u32,
    size: usize,
) -> anyhow::Result<(VsockSender, BufferPool)> {
    let socket = VsockSocket::connect(ty, VMADDR_CID_LOCAL, port).context("connect")?;
    let pool = BufferPool::new(PoolConfig::new(size, 8))?;
    let mut config = SenderConfig::with_mode(Mode::ZeroCopy);
    config.path = path;
    Ok((VsockSender::new(socket, config), pool))
}

/// Sends `sends` buffers of `size` bytes from `pool`, the stream's pattern written into each as the
/// pool hands it out (a buffer back from an earlier send is rewritten with the next bytes).
pub(crate) fn send_pooled(
    tx: &mut VsockSender,
    pool: &BufferPool,
    size: usize,
    sends: usize,
) -> anyhow::Result<()> {
    let mut at = 0u64;
    for _ in 0..sends {
        let mut buf = tx.take_from(pool, WAIT)?;
        buf.fill_with(size, |b| pattern::fill(b, at));
        at += size as u64;
        tx.send(buf)?;
    }
    Ok(())
}

/// zcnet's [`VsockSender`] in zero-copy mode with pooled buffers of `size` bytes: data verified,
/// message boundaries kept (seqpacket), completions counted, every buffer back in the pool.
/// Above 64 KiB a stream sender splits each send into 64 KiB zero-copy pieces. A seqpacket message
/// is copied whatever its size: it is sent whole by one call that waits for the peer's credit, and a
/// message enqueued in pieces takes one completion id per piece.
fn pooled_sends(ty: VsockType, size: usize, outcome: &mut Outcome) -> anyhow::Result<()> {
    let name = format!("{}-{}k", type_name(ty), size >> 10);
    let sends = 32;
    let total = (size * sends) as u64;
    let receiver = Receiver::start(ty, total, Some(RECEIVER_BUFFER))?;
    let (mut tx, pool) = zero_copy_sender(ty, receiver.port, size)?;
    send_pooled(&mut tx, &pool, size, sends)?;
    tx.flush(WAIT)?;
    let stats = tx.stats().clone();
    drop(tx.close(WAIT)?);
    let got = receiver.finish()?;
    let boundaries_kept = ty == VsockType::Stream || got.reads.iter().all(|&n| n == size);
    let zero_copy_expected = ty == VsockType::Stream;
    let completions_ok = if zero_copy_expected {
        stats.zc_ids > 0 && stats.zc_ids + stats.copied_ids == stats.zc_calls
    } else {
        stats.zc_calls == 0 && stats.copy_unsupported == sends as u64
    };
    let ok = got.bytes == total
        && got.errors == 0
        && boundaries_kept
        && completions_ok
        && pool.available() == pool.capacity();
    let what = format!(
        "{sends} sends of {size} bytes: {} bytes verified, {} data errors, {} reads{}, {}, copied by \
         policy {}, buffers back {}/{}",
        got.bytes,
        got.errors,
        got.reads.len(),
        if ty == VsockType::Seqpacket {
            " (one per message)"
        } else {
            ""
        },
        ids(&stats),
        stats.copy_calls,
        pool.available(),
        pool.capacity()
    );
    outcome.check(&name, ok, &what);
    Ok(())
}

/// Credit starvation with the default vsock buffers (256 KiB) and a slow reader: a zero-copy stream
/// sender refills each pooled 48 KiB buffer as soon as its completion releases it, so a buffer
/// released early would reach the receiver overwritten. 48 KiB does not divide the peer's buffer, so
/// sends meet partial credit. The sender's calls never wait in the kernel, so each takes one
/// completion id however short the credit (see `vsock_credit`): no completion may name an id the
/// sender never registered, every byte must arrive intact and every buffer come back.
fn starved_sends(outcome: &mut Outcome) -> anyhow::Result<()> {
    let (size, sends) = (48 << 10, 200);
    let total = (size * sends) as u64;
    let receiver = Receiver::start_reading(
        VsockType::Stream,
        total,
        None,
        4 << 10,
        Duration::from_millis(1),
    )?;
    let (mut tx, pool) = zero_copy_sender(VsockType::Stream, receiver.port, size)?;
    send_pooled(&mut tx, &pool, size, sends)?;
    let flushed = tx.flush(WAIT);
    let stats = tx.stats().clone();
    let status = tx.zerocopy_status().map_err(|f| f.to_string());
    drop(tx);
    let got = receiver.finish()?;
    let tracked = stats.unregistered_ids == 0
        && status.is_ok()
        && flushed.is_ok()
        && pool.available() == pool.capacity();
    let starved = stats.waits > 0 && stats.partial_sends > 0;
    let ok = got.bytes == total && got.errors == 0 && tracked && starved && stats.zc_calls > 0;
    let what = format!(
        "{sends} sends of {size} bytes, default buffers, slow reader: {} bytes verified, {} data errors, {}, \
         waits for credit {}, partial sends {}, ids never registered {}, status {status:?}, flush \
         {flushed:?}, buffers back {}/{}",
        got.bytes,
        got.errors,
        ids(&stats),
        stats.waits,
        stats.partial_sends,
        stats.unregistered_ids,
        pool.available(),
        pool.capacity()
    );
    outcome.check("stream-starved-credit", ok, &what);
    Ok(())
}

/// The completions read from an error queue, and the (level, type) of every control message.
#[derive(Debug, Default)]
pub(crate) struct Completions {
    pub(crate) list: Vec<ZerocopyCompletion>,
    cmsgs: Vec<(i32, i32)>,
}

impl Completions {
    /// Ids covered, and of those the ones reported copied.
    pub(crate) fn ids(&self) -> (u32, u32) {
        let count = |c: &ZerocopyCompletion| c.hi.wrapping_sub(c.lo) + 1;
        let all = self.list.iter().map(count).sum();
        let copied = self.list.iter().filter(|c| c.copied).map(count).sum();
        (all, copied)
    }

    /// Whether every control message was `SOL_VSOCK`/`VSOCK_RECVERR`.
    fn levels_ok(&self) -> bool {
        !self.cmsgs.is_empty() && self.cmsgs.iter().all(|&l| l == (SOL_VSOCK, VSOCK_RECVERR))
    }
}

/// Reads error-queue entries until completions cover `ids` ids or [`WAIT`] passes.
pub(crate) fn completions(socket: &VsockSocket, ids: u32) -> anyhow::Result<Completions> {
    let mut control = ControlBuf::default();
    let mut got = Completions::default();
    let deadline = Instant::now() + WAIT;
    while got.ids().0 < ids && Instant::now() < deadline {
        if !errqueue::recv_errqueue(socket.as_fd(), &mut control)? {
            errqueue::poll_socket(socket.as_fd(), false, Duration::from_millis(100))?;
            continue;
        }
        for m in control.messages() {
            got.cmsgs.push((m.level, m.ty));
            if let Some(ErrqueueMessage::Zerocopy(c)) = errqueue::decode(m.level, m.ty, m.data) {
                got.list.push(c);
            }
        }
    }
    Ok(got)
}

/// One raw `send(MSG_ZEROCOPY)` of `buf` on `socket`, to see what the kernel does with the flag; the
/// caller keeps `buf` unchanged until its completion arrived, and the receiver checks the bytes arrive.
pub(crate) fn raw_zerocopy_send(socket: &VsockSocket, buf: &[u8]) -> anyhow::Result<usize> {
    let flags = rustix::net::SendFlags::from_bits_retain(libc::MSG_ZEROCOPY as u32);
    rustix::net::send(socket, buf, flags).context("send(MSG_ZEROCOPY) on the vsock stream")
}

/// SO_ZEROCOPY: off on a fresh socket, MSG_ZEROCOPY then ignored (data sent, no completion); once set,
/// the same send takes id 0 and its completion arrives as SOL_VSOCK/VSOCK_RECVERR.
fn so_zerocopy(outcome: &mut Outcome) -> anyhow::Result<()> {
    let buf = vec_pattern(PACKET, 0);
    let again = vec_pattern(PACKET, PACKET as u64);
    let receiver = Receiver::start(VsockType::Stream, 2 * PACKET as u64, Some(RECEIVER_BUFFER))?;
    let socket = VsockSocket::connect(VsockType::Stream, VMADDR_CID_LOCAL, receiver.port)?;
    let off = i32::from(errqueue::zerocopy_enabled(socket.as_fd())?);
    let sent = raw_zerocopy_send(&socket, &buf)?;
    // The kernel ignored the flag: nothing may appear on the error queue.
    let ready = errqueue::poll_socket(socket.as_fd(), false, Duration::from_millis(500))?;
    errqueue::enable_zerocopy(socket.as_fd())?;
    let on = i32::from(errqueue::zerocopy_enabled(socket.as_fd())?);
    let sent_zc = raw_zerocopy_send(&socket, &again)?;
    let done = completions(&socket, 1)?;
    let got = receiver.finish()?;
    // `again` stayed untouched until its completion arrived (above); it may be reused from here.
    drop((buf, again));
    let first = done.list.first().copied();
    let ok = off == 0
        && sent == PACKET
        && !ready.error
        && on == 1
        && sent_zc == PACKET
        && first.is_some_and(|c| c.lo == 0 && c.hi == 0)
        && got.bytes == 2 * PACKET as u64
        && got.errors == 0;
    let what = format!(
        "SO_ZEROCOPY {off} on a new socket: MSG_ZEROCOPY send of {sent} bytes gave {} error-queue \
         entry; after SO_ZEROCOPY=1 ({on}) completion {first:?}; {} bytes verified, {} data errors",
        if ready.error { "an" } else { "no" },
        got.bytes,
        got.errors
    );
    outcome.check("so-zerocopy", ok, &what);
    let what = format!(
        "error-queue control messages (level, type): {:?}",
        done.cmsgs
    );
    outcome.check("cmsg-level", done.levels_ok(), &what);
    Ok(())
}

/// What the kernel does with one zero-copy `sendmsg` larger than a virtio vsock packet (64 KiB): with
/// vsock buffers larger than the message at both ends (`buffers`) it is sent from the lent pages under
/// one id; with the default 256 KiB buffers the transport enqueues it piece by piece as credit returns,
/// each piece copied under an id of its own.
fn large_send(buffers: Option<u64>, outcome: &mut Outcome) -> anyhow::Result<()> {
    let size = 16 * PACKET;
    let buf = vec_pattern(size, 0);
    let receiver = Receiver::start(VsockType::Stream, size as u64, buffers)?;
    let socket = VsockSocket::connect(VsockType::Stream, VMADDR_CID_LOCAL, receiver.port)?;
    if let Some(bytes) = buffers {
        set_buffer_size(socket.as_fd(), bytes).context("SO_VM_SOCKETS_BUFFER_SIZE")?;
    }
    errqueue::enable_zerocopy(socket.as_fd())?;
    let sent = raw_zerocopy_send(&socket, &buf)?;
    let got = receiver.finish()?;
    // The whole stream arrived: every completion of the send is queued or on its way. With credit
    // one id covers it; without, more than one.
    let want_ids = if buffers.is_some() { 1 } else { 2 };
    let done = completions(&socket, want_ids)?;
    drop(buf);
    let (ids, copied) = done.ids();
    let completions_ok = match buffers {
        Some(_) => ids == 1 && copied == 0,
        None => ids > 1 && copied == ids,
    };
    let ok = sent == size
        && completions_ok
        && done.levels_ok()
        && got.bytes == size as u64
        && got.errors == 0;
    let (name, credit) = match buffers {
        Some(b) => (
            "large-send-credit",
            format!("vsock buffers {} KiB at both ends", b >> 10),
        ),
        None => ("large-send-no-credit", "default vsock buffers".to_string()),
    };
    let what = format!(
        "{credit}: one MSG_ZEROCOPY sendmsg of {sent} bytes took {ids} ids, {copied} reported copied; \
         {} bytes verified, {} data errors",
        got.bytes, got.errors
    );
    outcome.check(name, ok, &what);
    Ok(())
}

fn vec_pattern(len: usize, offset: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    pattern::fill(&mut v, offset);
    v
}
