//! zcnet's `AsyncSender` over AF_VSOCK (inside the guest, on tokio): pooled 64 KiB zero-copy sends
//! taken with `take_from` as completions recycle them, every byte verified, message boundaries kept
//! (seqpacket), every buffer back after `close`; on seqpacket, the typed refusal.

use anyhow::Context;
use zcnet::aio::AsyncSender;
use zcnet::tx::TxError;
use zcnet::tx::vsock::VsockType;

use crate::outcome::Outcome;
use crate::pattern;
use crate::vsock::{PACKET, RECEIVER_BUFFER, Receiver, WAIT, ids, type_name, zero_copy_sender};

/// Sends 64 pooled buffers of one vsock packet each through an [`AsyncSender`] on a current-thread
/// runtime and checks what arrived. On seqpacket, checks instead that [`AsyncSender::new`] refuses:
/// each message must be sent by a call that waits in the kernel for the peer's credit.
pub fn async_sends(ty: VsockType, outcome: &mut Outcome) -> anyhow::Result<()> {
    let name = format!("{}-async", type_name(ty));
    if ty == VsockType::Seqpacket {
        return refused(&name, outcome);
    }
    let (size, sends) = (PACKET, 64);
    let total = (size * sends) as u64;
    let receiver = Receiver::start(ty, total, Some(RECEIVER_BUFFER))?;
    let (tx, pool) = zero_copy_sender(ty, receiver.port, size)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let sent = runtime.block_on(async {
        let mut tx = AsyncSender::new(tx)?;
        let mut at = 0u64;
        for _ in 0..sends {
            let mut buf = tx.take_from(&pool).await?;
            buf.fill_with(size, |b| pattern::fill(b, at));
            at += size as u64;
            tx.send(buf).await?;
        }
        tokio::time::timeout(WAIT, tx.flush())
            .await
            .context("flush within the wait")??;
        let stats = tx.stats().clone();
        drop(tx.close().await?);
        anyhow::Ok(stats)
    });
    let stats = match sent {
        Ok(stats) => stats,
        Err(e) => {
            outcome.fail(&name, &format!("{e:#}"));
            return Ok(());
        }
    };
    let got = receiver.finish()?;
    let boundaries_kept = ty == VsockType::Stream || got.reads.iter().all(|&n| n == size);
    let ok = got.bytes == total
        && got.errors == 0
        && boundaries_kept
        && stats.zc_ids > 0
        && stats.zc_ids + stats.copied_ids == stats.zc_calls
        && pool.available() == pool.capacity();
    let what = format!(
        "{sends} async sends of {size} bytes: {} bytes verified, {} data errors, {} reads, {}, buffers \
         back {}/{}",
        got.bytes,
        got.errors,
        got.reads.len(),
        ids(&stats),
        pool.available(),
        pool.capacity()
    );
    outcome.check(&name, ok, &what);
    Ok(())
}

/// [`AsyncSender::new`] on a seqpacket sender: refused with `Unsupported` and a typed reason, before
/// anything is sent.
fn refused(name: &str, outcome: &mut Outcome) -> anyhow::Result<()> {
    // Reads until the sender's socket closes (dropped with the refused sender).
    let receiver = Receiver::start(VsockType::Seqpacket, 1, Some(RECEIVER_BUFFER))?;
    let (tx, _pool) = zero_copy_sender(VsockType::Seqpacket, receiver.port, PACKET)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let refusal = runtime.block_on(async { AsyncSender::new(tx).err() });
    let got = receiver.finish()?;
    let typed = refusal.as_ref().is_some_and(|e| {
        e.kind() == std::io::ErrorKind::Unsupported
            && e.get_ref()
                .and_then(|inner| inner.downcast_ref::<TxError>())
                .is_some_and(|t| matches!(t, TxError::Unsupported { .. }))
    });
    let ok = typed && got.bytes == 0;
    let what = format!(
        "AsyncSender::new on a seqpacket sender: {refusal:?}; {} bytes reached the receiver",
        got.bytes
    );
    outcome.check(name, ok, &what);
    Ok(())
}
