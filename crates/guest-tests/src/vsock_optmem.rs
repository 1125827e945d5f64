//! A zero-copy AF_VSOCK stream when the kernel has no memory for its notifications: with
//! `net.core.optmem_max` below one notification's size, `msg_zerocopy_realloc` fails in
//! `virtio_transport_send_pkt_info`, which enqueues nothing and fails the call with `ENOMEM` (TCP
//! and UDP say `ENOBUFS`). zcnet's sender must send those bytes again by copy and back off, as it
//! does on `ENOBUFS`, never failing the stream.

use std::fs;

use crate::outcome::Outcome;
use crate::vsock::{PACKET, RECEIVER_BUFFER, Receiver, WAIT, ids, send_pooled, zero_copy_sender};
use zcnet::tx::vsock::VsockType;

const OPTMEM_MAX: &str = "/proc/sys/net/core/optmem_max";

/// Sets `net.core.optmem_max` for as long as it lives, then puts the old value back.
struct OptmemMax {
    before: String,
}

impl OptmemMax {
    fn set(value: &str) -> anyhow::Result<OptmemMax> {
        let before = fs::read_to_string(OPTMEM_MAX)?;
        fs::write(OPTMEM_MAX, value)?;
        Ok(OptmemMax { before })
    }
}

impl Drop for OptmemMax {
    fn drop(&mut self) {
        if let Err(e) = fs::write(OPTMEM_MAX, self.before.trim()) {
            eprintln!("restoring {OPTMEM_MAX}: {e}");
        }
    }
}

/// 32 pooled 64 KiB zero-copy sends with `optmem_max` at 1 byte: every byte arrives verified, the
/// refusals are counted and copied, nothing is zero-copied, and every buffer comes back.
pub fn no_notification_memory(outcome: &mut Outcome) -> anyhow::Result<()> {
    let sends = 32;
    let total = (PACKET * sends) as u64;
    let receiver = Receiver::start(VsockType::Stream, total, Some(RECEIVER_BUFFER))?;
    let (mut tx, pool) = zero_copy_sender(VsockType::Stream, receiver.port, PACKET)?;
    let (sent, flushed, stats) = {
        let _optmem = OptmemMax::set("1")?;
        let sent = send_pooled(&mut tx, &pool, PACKET, sends);
        let flushed = tx.flush(WAIT);
        (sent, flushed, tx.stats().clone())
    };
    drop(tx);
    let got = receiver.finish()?;
    let ok = sent.is_ok()
        && flushed.is_ok()
        && got.bytes == total
        && got.errors == 0
        && stats.enobufs > 0
        && stats.zc_ids == 0
        && pool.available() == pool.capacity();
    let what = format!(
        "{sends} sends of {PACKET} bytes, optmem_max 1: send {sent:?}, flush {flushed:?}, {} bytes \
         verified, {} data errors, refused for memory {}, copied while backing off {}, {}, buffers \
         back {}/{}",
        got.bytes,
        got.errors,
        stats.enobufs,
        stats.copy_enobufs,
        ids(&stats),
        pool.available(),
        pool.capacity()
    );
    outcome.check("stream-no-notification-memory", ok, &what);
    Ok(())
}
