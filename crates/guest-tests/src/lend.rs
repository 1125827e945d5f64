//! Buffers for zcnet's senders: pooled, and back in the pool only once their completions arrived.

use std::time::{Duration, Instant};

use anyhow::bail;
use zcnet::tx::{BufferPool, PooledBuf, Sender, ZcSocket};

/// Takes a buffer from `pool` for `tx`, draining `tx`'s completions while none is free; fails when
/// none comes back within `wait`.
pub fn take<S: ZcSocket>(
    pool: &BufferPool,
    tx: &mut Sender<S>,
    wait: Duration,
) -> anyhow::Result<PooledBuf> {
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
