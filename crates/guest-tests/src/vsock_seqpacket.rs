//! SOCK_SEQPACKET messages the peer is short of credit for: every message must arrive whole, once, in
//! order, with its content.
//!
//! The receiver's vsock buffer (64 KiB) holds one 48 KiB message and a third of the next, and it
//! reads slowly, so the kernel enqueues most messages in pieces as credit comes back
//! (`vsock_connectible_sendmsg` enqueues what the peer has credit for, then waits or, without
//! waiting, fails the whole call with `EAGAIN` though a piece went out). A message sent again after
//! such a piece would reach the receiver merged with it.

use std::os::fd::AsFd;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;
use zcnet::tx::errqueue;
use zcnet::tx::vsock::{
    VMADDR_CID_LOCAL, VMADDR_PORT_ANY, VsockSocket, VsockType, set_buffer_size,
};
use zcnet::tx::{BufferPool, Mode, PoolConfig, SenderConfig, VsockSender};

use crate::outcome::Outcome;
use crate::pattern;
use crate::vsock::{WAIT, completions, ids, raw_zerocopy_send};

/// The message size: more than the receiver's buffer has room for twice, and not a divisor of it.
const MESSAGE: usize = 48 << 10;
/// The receiver's vsock buffer (`SO_VM_SOCKETS_BUFFER_SIZE`): the sender's credit.
const PEER_BUFFER: u64 = 64 << 10;
/// Messages per run.
const MESSAGES: usize = 64;
/// The receiver's pause after each message (a slow reader).
const PAUSE: Duration = Duration::from_millis(3);

/// The length and FNV-1a checksum of one message.
type Summary = (usize, u64);

fn summary(bytes: &[u8]) -> Summary {
    let sum = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    (bytes.len(), sum)
}

/// Sends [`MESSAGES`] messages in `mode` to a slow reader with a small buffer and compares what
/// arrived, message by message, with what was sent.
pub fn short_credit(mode: Mode, outcome: &mut Outcome) -> anyhow::Result<()> {
    let name = format!("seqpacket-short-credit-{}", mode.name());
    let listener = VsockSocket::listen(VsockType::Seqpacket, VMADDR_CID_LOCAL, VMADDR_PORT_ANY)
        .context("listen on VMADDR_CID_LOCAL")?;
    set_buffer_size(listener.as_fd(), PEER_BUFFER).context("SO_VM_SOCKETS_BUFFER_SIZE")?;
    let port = listener.local_port()?;
    let receiver = thread::spawn(move || -> anyhow::Result<Vec<Summary>> {
        let conn = listener.accept().context("accept")?;
        // Room for a whole buffer's worth: a merged message shows its true length.
        let mut buf = vec![0u8; 2 * PEER_BUFFER as usize];
        let mut got = Vec::new();
        loop {
            let n = conn.recv(&mut buf).context("recv")?;
            if n == 0 {
                return Ok(got);
            }
            got.push(summary(&buf[..n]));
            thread::sleep(PAUSE);
        }
    });
    let socket =
        VsockSocket::connect(VsockType::Seqpacket, VMADDR_CID_LOCAL, port).context("connect")?;
    let pool = BufferPool::new(PoolConfig::new(MESSAGE, 8))?;
    let mut config = SenderConfig::with_mode(mode);
    config.send_timeout = Some(WAIT);
    let mut tx = VsockSender::new(socket, config);
    let mut sent = Vec::with_capacity(MESSAGES);
    let mut failure = None;
    for i in 0..MESSAGES {
        let mut buf = tx.take_from(&pool, WAIT)?;
        buf.fill_with(MESSAGE, |b| pattern::fill(b, (i * MESSAGE) as u64));
        let this = summary(&buf);
        if let Err(e) = tx.send(buf) {
            failure = Some(format!("send {i}: {e}"));
            break;
        }
        sent.push(this);
    }
    let flushed = tx.flush(WAIT).map_err(|e| e.to_string());
    let stats = tx.stats().clone();
    let status = tx.zerocopy_status().map_err(|f| f.to_string()).err();
    // Closing the socket ends the receiver's loop.
    let closed = tx.close(WAIT).map(drop).map_err(|e| e.to_string());
    let got = receiver.join().expect("receiver thread panicked")?;
    let first_wrong = sent.iter().zip(&got).position(|(s, g)| s != g);
    let ok = failure.is_none()
        && flushed.is_ok()
        && closed.is_ok()
        && got.len() == MESSAGES
        && got == sent
        && pool.available() == pool.capacity();
    let what = format!(
        "{MESSAGES} messages of {MESSAGE} bytes, receiver buffer {} KiB, slow reader: {} sent, {} \
         received, first differing message {first_wrong:?} (sent {:?}, received {:?}), received \
         lengths {:?}, send failure {failure:?}, flush {flushed:?}, close {closed:?}, {}, \
         zero-copy status {status:?}, buffers back {}/{}",
        PEER_BUFFER >> 10,
        sent.len(),
        got.len(),
        first_wrong.map(|i| sent[i]),
        first_wrong.and_then(|i| got.get(i)),
        lengths(&got),
        ids(&stats),
        pool.available(),
        pool.capacity()
    );
    outcome.check(&name, ok, &what);
    Ok(())
}

/// The received lengths other than [`MESSAGE`], with their positions (at most eight).
fn lengths(got: &[Summary]) -> Vec<(usize, usize)> {
    got.iter()
        .enumerate()
        .filter(|(_, s)| s.0 != MESSAGE)
        .map(|(i, s)| (i, s.0))
        .take(8)
        .collect()
}

/// What the kernel does with a MSG_ZEROCOPY seqpacket message the peer lacks credit for, seen with
/// raw blocking sends: message A (48 KiB) fits the receiver's 64 KiB; message B is sent while A is
/// unread, so the kernel enqueues 16 KiB of it, sleeps for credit (the receiver starts reading only
/// once the sending thread sleeps in `sendto`), then enqueues the rest. Each enqueue takes a
/// completion id of its own, so the two calls take more than two ids, B's copied (the flag shows
/// unless B's completions arrive merged into A's entry); both messages still arrive whole. This is why zcnet copies seqpacket messages: it could not match ids to sends.
pub fn zerocopy_pieces(outcome: &mut Outcome) -> anyhow::Result<()> {
    let listener = VsockSocket::listen(VsockType::Seqpacket, VMADDR_CID_LOCAL, VMADDR_PORT_ANY)
        .context("listen on VMADDR_CID_LOCAL")?;
    set_buffer_size(listener.as_fd(), PEER_BUFFER).context("SO_VM_SOCKETS_BUFFER_SIZE")?;
    let port = listener.local_port()?;
    let (sending, sender_tid) = mpsc::channel::<i32>();
    let receiver = thread::spawn(move || -> anyhow::Result<(Vec<Summary>, bool)> {
        let conn = listener.accept().context("accept")?;
        let tid = sender_tid.recv().context("the sender's thread id")?;
        let slept = sleeps_in_sendto(tid);
        let mut buf = vec![0u8; 2 * PEER_BUFFER as usize];
        let mut got = Vec::new();
        loop {
            match conn.recv(&mut buf).context("recv")? {
                0 => return Ok((got, slept)),
                n => got.push(summary(&buf[..n])),
            }
        }
    });
    let socket =
        VsockSocket::connect(VsockType::Seqpacket, VMADDR_CID_LOCAL, port).context("connect")?;
    errqueue::enable_zerocopy(socket.as_fd())?;
    let messages: Vec<Vec<u8>> = (0..2)
        .map(|i| {
            let mut m = vec![0u8; MESSAGE];
            pattern::fill(&mut m, (i * MESSAGE) as u64);
            m
        })
        .collect();
    let a = raw_zerocopy_send(&socket, &messages[0])?;
    sending.send(rustix::thread::gettid().as_raw_nonzero().get())?;
    let b = raw_zerocopy_send(&socket, &messages[1])?;
    let done = completions(&socket, 3)?;
    drop(socket);
    let (got, slept) = receiver.join().expect("receiver thread panicked")?;
    // Every completion is in: the kernel no longer reads the messages.
    let sent: Vec<Summary> = messages.iter().map(|m| summary(m)).collect();
    drop(messages);
    let (ids, copied) = done.ids();
    // A completion queued behind an unread one with the next ids extends it and keeps its
    // copied flag (`skb_zerocopy_notify_extend`): B's pieces then show only as ids.
    let merged = done.list.iter().any(|c| c.lo == 0 && c.hi > 0);
    let ok =
        slept && a == MESSAGE && b == MESSAGE && ids > 2 && (copied >= 2 || merged) && got == sent;
    let what = format!(
        "two blocking MSG_ZEROCOPY sends of {MESSAGE} bytes to a {} KiB peer buffer, the second \
         while the first was unread (sender seen sleeping in sendto: {slept}): returned {a} and {b}, \
         took {ids} completion ids, {copied} reported copied ({:?}); {} messages arrived, whole and \
         in order: {}",
        PEER_BUFFER >> 10,
        done.list,
        got.len(),
        got == sent
    );
    outcome.check("seqpacket-zerocopy-pieces", ok, &what);
    Ok(())
}

/// Waits (up to [`WAIT`]) until thread `tid` of this process sleeps in `sendto` (syscall 44 on
/// x86-64, read from `/proc/self/task/<tid>/syscall`, with state `S` in its `stat`).
fn sleeps_in_sendto(tid: i32) -> bool {
    let deadline = Instant::now() + WAIT;
    let task = format!("/proc/self/task/{tid}");
    while Instant::now() < deadline {
        let syscall = std::fs::read_to_string(format!("{task}/syscall")).unwrap_or_default();
        let stat = std::fs::read_to_string(format!("{task}/stat")).unwrap_or_default();
        // The state follows the parenthesised command name.
        let state = stat
            .rsplit_once(") ")
            .map(|(_, rest)| rest.starts_with('S'));
        if syscall.starts_with("44 ") && state == Some(true) {
            return true;
        }
        thread::sleep(Duration::from_millis(1));
    }
    false
}
