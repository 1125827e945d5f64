//! Buffers for zcnet's senders: pooled, and back in the pool only once their completions arrived.

use std::time::{Duration, Instant};

use anyhow::bail;
use zcnet::tx::{BufferPool, PooledBuf, Sender, TxStats, ZcSocket};
use zcnet::uring::UringSender;

/// A sender whose completions hand pooled buffers back: the MSG_ZEROCOPY or the io_uring one.
pub trait Lender {
    /// Lends `buf` to the kernel for sending.
    fn send(&mut self, buf: PooledBuf) -> anyhow::Result<()>;
    /// Waits up to `wait` for completions, releasing the buffers they cover.
    fn wait_completions(&mut self, wait: Duration) -> anyhow::Result<u64>;
    /// Waits up to `wait` until every buffer is back.
    fn flush(&mut self, wait: Duration) -> anyhow::Result<()>;
    /// The sender's counters.
    fn stats(&self) -> &TxStats;
}

macro_rules! lender {
    ($sender:ident) => {
        impl<S: ZcSocket> Lender for $sender<S> {
            fn send(&mut self, buf: PooledBuf) -> anyhow::Result<()> {
                Ok($sender::send(self, buf)?)
            }
            fn wait_completions(&mut self, wait: Duration) -> anyhow::Result<u64> {
                Ok($sender::wait_completions(self, wait)?)
            }
            fn flush(&mut self, wait: Duration) -> anyhow::Result<()> {
                Ok($sender::flush(self, wait)?)
            }
            fn stats(&self) -> &TxStats {
                $sender::stats(self)
            }
        }
    };
}

lender!(Sender);
lender!(UringSender);

/// Takes a buffer from `pool` for `tx`, draining `tx`'s completions while none is free; fails when
/// none comes back within `wait`.
pub fn take(pool: &BufferPool, tx: &mut impl Lender, wait: Duration) -> anyhow::Result<PooledBuf> {
    let deadline = Instant::now() + wait;
    loop {
        if let Some(buf) = pool.take() {
            return Ok(buf);
        }
        if Instant::now() > deadline {
            bail!("no pooled buffer came back within {wait:?}: completions are missing");
        }
        tx.wait_completions(Duration::from_millis(100))?;
    }
}
