//! zcnet's sender on its io_uring path over an AF_VSOCK stream: `IORING_OP_SEND_ZC` requests, whose
//! one notification covers every packet of the request however the peer's credit cuts it
//! (`virtio_transport_send_pkt_info` attaches the request's `msg_ubuf` to each), sent zero-copy
//! once the socket has `SO_ZEROCOPY` (without it the transport clears `MSG_ZEROCOPY` and copies).
//! Each pool buffer is rewritten as soon as it comes back, so one released while the kernel still
//! reads it shows as data errors.
//!
//! The kernel's trace of each packet it builds ([`PacketTrace`]) is set beside zcnet's counts. The
//! transport copies a request the peer lacks credit for whole (`virtio_transport_can_zcopy` refuses
//! an iterator longer than the credit, or one already part sent) and still completes it as
//! zero-copied, so on io_uring zcnet's zero-copied ids are the kernel's claim, shown, not checked;
//! the same short-credit stream on the `sendmsg` path, whose every id is one packet, must count
//! as many ids as the kernel built data packets.

use std::time::Duration;

use zcnet::tx::SendPath;
use zcnet::tx::vsock::VsockType;

use crate::outcome::Outcome;
use crate::vsock::{
    PACKET, RECEIVER_BUFFER, Receiver, WAIT, ids, send_pooled, zero_copy_sender_on,
};
use crate::vsock_trace::PacketTrace;

/// Runs the io_uring checks, a stream with room and one to a slow reader with a 64 KiB buffer, and
/// the same slow stream on the `sendmsg` path.
pub fn run(outcome: &mut Outcome) -> anyhow::Result<()> {
    let roomy = Receiver::start(
        VsockType::Stream,
        (32 * PACKET) as u64,
        Some(RECEIVER_BUFFER),
    )?;
    let room = (PACKET, 32);
    pooled(
        SendPath::IO_URING,
        "stream-io-uring-64k",
        roomy,
        room,
        outcome,
    )?;
    // 48 KiB sends to a reader with a 64 KiB buffer taking 4 KiB a millisecond, on each path.
    let run = (48 << 10, 96);
    for (path, name) in [
        (SendPath::IO_URING, "stream-io-uring-short-credit-48k"),
        (SendPath::SENDMSG, "stream-sendmsg-short-credit-48k"),
    ] {
        let slow = Receiver::start_reading(
            VsockType::Stream,
            (run.0 * run.1) as u64,
            Some(64 << 10),
            4 << 10,
            Duration::from_millis(1),
        )?;
        pooled(path, name, slow, run, outcome)?;
    }
    Ok(())
}

/// `sends` pooled zero-copy sends of `size` bytes on `send_path` to `receiver`, the kernel's packet
/// trace on: it must stay on that path, zero-copy some, and deliver every byte intact with every
/// buffer back (on `sendmsg`, with as many ids as the kernel built data packets).
fn pooled(
    send_path: SendPath,
    name: &str,
    receiver: Receiver,
    (size, sends): (usize, usize),
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    let trace = PacketTrace::start()?;
    let (mut tx, pool) = zero_copy_sender_on(send_path, VsockType::Stream, receiver.port, size)?;
    let path = tx.path_status().map_err(|f| f.to_string());
    let status = tx.zerocopy_status().map_err(|f| f.to_string());
    let sent = send_pooled(&mut tx, &pool, size, sends);
    let flushed = tx.flush(WAIT);
    let stats = tx.stats().clone();
    let outstanding = tx.outstanding();
    drop(tx.close(WAIT)?);
    let got = receiver.finish()?;
    let packets = trace.finish()?;
    let total = (size * sends) as u64;
    // On sendmsg every id is one packet (a piece of at most 64 KiB sent without waiting): the ids
    // the completions cover are the data packets the kernel built. (Their split into zero-copied
    // and copied may differ: the kernel merges completions without comparing that flag.)
    let counted = send_path == SendPath::IO_URING
        || stats.zc_ids + stats.copied_ids == packets.zero_copied + packets.copied;
    let ok = counted
        && path.is_ok()
        && status.is_ok()
        && sent.is_ok()
        && flushed.is_ok()
        && got.bytes == total
        && got.errors == 0
        && stats.zc_ids > 0
        && outstanding == 0
        && pool.available() == pool.capacity();
    let what = format!(
        "{sends} sends of {size} bytes: path {path:?}, zero-copy {status:?}, send {sent:?}, flush \
         {flushed:?}, {} bytes verified, {} data errors, {}, buffers back {}/{}; the kernel built \
         {} data packets from the sender's pages and copied {}",
        got.bytes,
        got.errors,
        ids(&stats),
        pool.available(),
        pool.capacity(),
        packets.zero_copied,
        packets.copied
    );
    outcome.check(name, ok, &what);
    Ok(())
}
