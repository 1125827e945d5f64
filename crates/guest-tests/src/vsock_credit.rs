//! A zero-copy AF_VSOCK stream whose reader keeps the sender short of credit: completion ids must
//! match sends, or a completion releases a buffer the kernel still reads.
//!
//! The reader's vsock buffer (64 KiB) is the sender's whole credit, and the reader takes 4 KiB at a
//! time with a pause, so sends meet partial credit and credit comes back while sends are lent. A
//! `sendmsg` that enqueued twice (credit back inside the call) would take two completion ids, and
//! the sender's later releases would each come one send early. Each pool buffer is rewritten with the
//! pattern of a new stream offset as soon as it is back, so a buffer released while its pages are
//! still queued to the reader shows up as data errors.

use std::os::fd::AsFd;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;
use zcnet::tx::Completion as ZerocopyCompletion;
use zcnet::tx::errqueue::{self, ControlBuf, ErrqueueMessage};
use zcnet::tx::vsock::{
    VMADDR_CID_LOCAL, VMADDR_PORT_ANY, VsockSocket, VsockType, set_buffer_size,
};

use crate::outcome::Outcome;
use crate::pattern;
use crate::vsock::{
    Receiver, WAIT, completions, ids, raw_zerocopy_send, send_pooled, zero_copy_sender,
};

/// The reader's vsock buffer (`SO_VM_SOCKETS_BUFFER_SIZE`): the sender's credit.
const PEER_BUFFER: u64 = 64 << 10;
/// Bytes each check streams.
const STREAM: usize = 96 * (48 << 10);

/// How the reader reads: bytes per `recv` and the pause after each.
#[derive(Debug, Clone, Copy)]
struct Pace {
    name: &'static str,
    read: usize,
    pause: Duration,
}

/// 4 KiB reads 1 ms apart: the sender waits for credit most of the time.
const SLOW: Pace = Pace {
    name: "slow",
    read: 4 << 10,
    pause: Duration::from_millis(1),
};
/// 1 KiB reads without a pause: credit comes back in the most, and smallest, steps the reader
/// makes.
const FAST: Pace = Pace {
    name: "fast",
    read: 1 << 10,
    pause: Duration::ZERO,
};

/// Runs the short-credit checks of a stream.
pub fn run(outcome: &mut Outcome) -> anyhow::Result<()> {
    // 48 KiB does not divide the reader's buffer; 96 KiB goes out as a 64 KiB and a 32 KiB piece.
    rewrite_while_lent(outcome)?;
    for (size, pace) in [(48 << 10, SLOW), (96 << 10, SLOW), (48 << 10, FAST)] {
        rewritten_pool(size, pace, outcome)?;
    }
    for size in [48 << 10, 64 << 10] {
        nonblocking_ids(size, outcome)?;
    }
    Ok(())
}

/// A reader with a small buffer, reading at `pace`.
fn reader(pace: Pace) -> anyhow::Result<Receiver> {
    Receiver::start_reading(
        VsockType::Stream,
        STREAM as u64,
        Some(PEER_BUFFER),
        pace.read,
        pace.pause,
    )
}

/// That the checks below can see a release that comes early: a raw zero-copy send of 48 KiB, its
/// buffer rewritten before the reader (held back until then) reads it. The reader gets the new bytes:
/// the transport queues the send's pages themselves, unread until the `recv`, so a pool buffer
/// rewritten while the kernel still holds it reaches the reader changed.
fn rewrite_while_lent(outcome: &mut Outcome) -> anyhow::Result<()> {
    let size = 48 << 10;
    let listener = VsockSocket::listen(VsockType::Stream, VMADDR_CID_LOCAL, VMADDR_PORT_ANY)
        .context("listen on VMADDR_CID_LOCAL")?;
    set_buffer_size(listener.as_fd(), PEER_BUFFER).context("SO_VM_SOCKETS_BUFFER_SIZE")?;
    let port = listener.local_port()?;
    let (go, wait_for_go) = mpsc::channel::<()>();
    let reader = thread::spawn(move || -> anyhow::Result<(u64, u64)> {
        let conn = listener.accept().context("accept")?;
        wait_for_go.recv().context("the sender's go")?;
        let mut buf = vec![0u8; size];
        let (mut bytes, mut errors) = (0u64, 0u64);
        while bytes < size as u64 {
            let n = conn.recv(&mut buf).context("recv")?;
            if n == 0 {
                break;
            }
            errors += pattern::mismatches(&buf[..n], bytes);
            bytes += n as u64;
        }
        Ok((bytes, errors))
    });
    let socket =
        VsockSocket::connect(VsockType::Stream, VMADDR_CID_LOCAL, port).context("connect")?;
    errqueue::enable_zerocopy(socket.as_fd())?;
    let mut buf = vec![0u8; size];
    pattern::fill(&mut buf, 0);
    let sent = raw_zerocopy_send(&socket, &buf)?;
    // The reader has read nothing, so the send has not completed: its pages are still queued.
    let mut control = ControlBuf::default();
    let mut early = Vec::new();
    read_completions(&socket, &mut control, &mut early)?;
    pattern::fill(&mut buf, 1 << 40);
    go.send(()).context("the reader is gone")?;
    let (bytes, errors) = reader.join().expect("reader thread panicked")?;
    let done = completions(&socket, 1)?;
    drop(buf);
    let ok = sent == size
        && early.is_empty()
        && bytes == size as u64
        && errors > 0
        && done.list.first().is_some_and(|c| c.lo == 0 && !c.copied);
    let what = format!(
        "one zero-copy send of {size} bytes, rewritten before the reader read it: {bytes} bytes \
         read, {errors} differ from what was sent (must be more than 0), completions before the \
         read {early:?}, after {:?}",
        done.list
    );
    outcome.check("stream-rewrite-while-lent-seen", ok, &what);
    Ok(())
}

/// zcnet's `VsockSender` (`sendmsg` path, `Mode::ZeroCopy`) streams pool buffers of `size` bytes,
/// each rewritten with new content whenever the pool hands it back, to a reader with a small
/// buffer: every byte must arrive as written, every id completed once, every buffer back.
fn rewritten_pool(size: usize, pace: Pace, outcome: &mut Outcome) -> anyhow::Result<()> {
    let name = format!(
        "stream-short-credit-rewritten-{}k-{}",
        size >> 10,
        pace.name
    );
    let sends = STREAM / size;
    let receiver = reader(pace)?;
    let (mut tx, pool) = zero_copy_sender(VsockType::Stream, receiver.port, size)?;
    send_pooled(&mut tx, &pool, size, sends)?;
    let flushed = tx.flush(WAIT);
    let stats = tx.stats().clone();
    let status = tx.zerocopy_status().map_err(|f| f.to_string());
    let outstanding = tx.outstanding();
    drop(tx.close(WAIT)?);
    let got = receiver.finish()?;
    let accounted = stats.zc_calls > 0
        && stats.zc_ids > 0
        && stats.zc_ids + stats.copied_ids == stats.zc_calls
        && stats.unregistered_ids == 0
        && stats.ignored_ids == 0;
    let short_of_credit = stats.waits > 0 && stats.partial_sends > 0;
    let ok = got.bytes == STREAM as u64
        && got.errors == 0
        && flushed.is_ok()
        && status.is_ok()
        && outstanding == 0
        && accounted
        && short_of_credit
        && pool.available() == pool.capacity();
    let what = format!(
        "{sends} sends of {size} bytes, reader buffer {} KiB, {}-byte reads {:?} apart: {} bytes \
         verified, \
         {} data errors, {}, ids never registered {}, waits for credit {}, partial sends {}, status \
         {status:?}, flush {flushed:?}, buffers back {}/{}",
        PEER_BUFFER >> 10,
        pace.read,
        pace.pause,
        got.bytes,
        got.errors,
        ids(&stats),
        stats.unregistered_ids,
        stats.waits,
        stats.partial_sends,
        pool.available(),
        pool.capacity()
    );
    outcome.check(&name, ok, &what);
    Ok(())
}

/// What the sender's numbering rests on, seen with raw calls: `sendmsg(MSG_ZEROCOPY | MSG_DONTWAIT)`
/// of `size` bytes (at most one virtio vsock packet) to the slow reader takes exactly one completion
/// id per call that returns a count, however short the credit. The ids covered must be `0..calls`.
/// (The reader's credit comes back a whole packet at a time, so 64 KiB calls are never cut short.)
fn nonblocking_ids(size: usize, outcome: &mut Outcome) -> anyhow::Result<()> {
    let name = format!("stream-nonblocking-ids-{}k", size >> 10);
    let receiver = reader(SLOW)?;
    let socket = VsockSocket::connect(VsockType::Stream, VMADDR_CID_LOCAL, receiver.port)
        .context("connect")?;
    errqueue::enable_zerocopy(socket.as_fd())?;
    // Never written again until every completion is in (the end of this function).
    let mut data = vec![0u8; STREAM];
    pattern::fill(&mut data, 0);
    let flags =
        rustix::net::SendFlags::from_bits_retain((libc::MSG_ZEROCOPY | libc::MSG_DONTWAIT) as u32);
    let mut control = ControlBuf::default();
    let mut done = Vec::new();
    let (mut off, mut calls, mut short) = (0, 0u32, 0u32);
    let deadline = Instant::now() + 4 * WAIT;
    while off < STREAM && Instant::now() < deadline {
        let piece = size.min(STREAM - off);
        match rustix::net::send(&socket, &data[off..off + piece], flags) {
            Ok(n) => {
                calls += 1;
                short += u32::from(n < piece);
                off += n;
            }
            Err(rustix::io::Errno::AGAIN) => {
                read_completions(&socket, &mut control, &mut done)?;
                errqueue::poll_socket(socket.as_fd(), true, Duration::from_millis(100))?;
            }
            Err(e) => return Err(e).context("send(MSG_ZEROCOPY | MSG_DONTWAIT)"),
        }
    }
    let sent = off;
    while covered(&done) < u64::from(calls) && Instant::now() < deadline {
        if !read_completions(&socket, &mut control, &mut done)? {
            errqueue::poll_socket(socket.as_fd(), false, Duration::from_millis(100))?;
        }
    }
    drop(socket);
    let got = receiver.finish()?;
    drop(data);
    let lowest = done.iter().map(|c| c.lo).min();
    let highest = done.iter().map(|c| c.hi).max();
    let copied: u64 = done.iter().filter(|c| c.copied).map(count).sum();
    let one_each =
        covered(&done) == u64::from(calls) && lowest == Some(0) && highest == calls.checked_sub(1);
    let ok = sent == STREAM && got.bytes == STREAM as u64 && got.errors == 0 && one_each;
    let what = format!(
        "{calls} calls of at most {size} bytes ({short} cut short by credit), reader buffer {} KiB: \
         completions cover {} ids ({copied} copied), lowest {lowest:?}, highest {highest:?}; {} bytes \
         verified, {} data errors",
        PEER_BUFFER >> 10,
        covered(&done),
        got.bytes,
        got.errors
    );
    outcome.check(&name, ok, &what);
    Ok(())
}

/// Ids a completion covers.
fn count(c: &ZerocopyCompletion) -> u64 {
    u64::from(c.hi.wrapping_sub(c.lo)) + 1
}

/// Ids the completions cover.
fn covered(done: &[ZerocopyCompletion]) -> u64 {
    done.iter().map(count).sum()
}

/// Reads the error-queue entries queued now into `done`; whether there was any.
fn read_completions(
    socket: &VsockSocket,
    control: &mut ControlBuf,
    done: &mut Vec<ZerocopyCompletion>,
) -> anyhow::Result<bool> {
    let mut any = false;
    while errqueue::recv_errqueue(socket.as_fd(), control)? {
        any = true;
        for m in control.messages() {
            if let Some(ErrqueueMessage::Zerocopy(c)) = errqueue::decode(m.level, m.ty, m.data) {
                done.push(c);
            }
        }
    }
    Ok(any)
}
