//! Helpers shared by the uring_* integration tests: whether this kernel has io_uring zero-copy send,
//! and a pool loop for [`UringSender`] (the byte pattern and sinks come from `tx_common`).
#![allow(dead_code)]

use std::net::UdpSocket;
use std::time::Duration;

use crate::tx_common::Checksum;
use zcnet::tx::{BufferPool, PooledBuf, ZcSocket};
use zcnet::uring::{UringConfig, UringError, UringSender};

/// Whether io_uring `SEND_ZC` works here; [`testnet::skip`]s with the reason when not (a failure under
/// `ZCNET_PRIV_TESTS=1`: CI's kernels have it).
pub fn send_zc_available(test: &str) -> bool {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let reason = match UringSender::new(socket, UringConfig::default()) {
        Ok(tx) => match tx.zerocopy_status() {
            Ok(()) => return true,
            Err(why) => why.to_string(),
        },
        Err(e) => e.to_string(),
    };
    testnet::skip(test, &reason);
    false
}

/// A sender config with a 20 s send timeout, so a stalled test fails instead of hanging.
pub fn config(mode: zcnet::tx::Mode) -> UringConfig {
    UringConfig {
        send_timeout: Some(Duration::from_secs(20)),
        ..UringConfig::with_mode(mode)
    }
}

/// Takes a buffer, waiting for notifications to recycle one when the pool is dry (bounded); a send
/// error seen while waiting comes back.
pub fn take<S: ZcSocket>(
    pool: &BufferPool,
    tx: &mut UringSender<S>,
) -> Result<PooledBuf, UringError> {
    for _ in 0..200 {
        if let Some(b) = pool.take() {
            return Ok(b);
        }
        tx.wait_completions(Duration::from_millis(50))?;
    }
    panic!(
        "pool stayed empty for 10 s: {} ids outstanding",
        tx.outstanding()
    );
}

/// Sends buffers of `sizes` (cycled `rounds` times) from `pool`, each filled with the stream pattern
/// at its position, calling `before` with the bytes sent so far first; returns the checksum sent.
pub fn send_sizes<S: ZcSocket>(
    tx: &mut UringSender<S>,
    pool: &BufferPool,
    sizes: &[usize],
    rounds: usize,
    mut before: impl FnMut(u64),
) -> Result<Checksum, UringError> {
    let mut sum = Checksum::default();
    for _ in 0..rounds {
        for &size in sizes {
            before(sum.len);
            let mut buf = take(pool, tx)?;
            sum.fill_next(&mut buf, size);
            tx.send(buf)?;
        }
    }
    Ok(sum)
}
