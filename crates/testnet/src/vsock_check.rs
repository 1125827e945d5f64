//! A vsock loopback self-check: pooled zero-copy sends through zcnet's `VsockSender`, every byte
//! verified at the receiver, every buffer back. For the guest (VM) harness, where a vsock loopback
//! transport exists; it declines before connecting anywhere where none does.

use std::io;
use std::thread;
use std::time::Duration;

use zcnet::tx::vsock::{self, VsockSocket, VsockType};
use zcnet::tx::{BufferPool, Mode, PoolConfig, SenderConfig, TxError, TxStats, VsockSender};

/// The result of [`loopback_check`].
#[derive(Debug, Clone)]
pub struct LoopbackReport {
    /// Bytes received, all verified.
    pub bytes: u64,
    /// The sender's counters (zero-copied and copied completion ids).
    pub stats: TxStats,
    /// Buffers back in the pool at the end, out of `pool_capacity`.
    pub pool_available: usize,
    /// Buffers the pool holds.
    pub pool_capacity: usize,
}

/// Why [`loopback_check`] could not run or failed.
#[derive(Debug)]
pub enum LoopbackError {
    /// No vsock loopback transport here (the reason, with errno name): nothing was connected.
    Unavailable(String),
    /// A socket call failed.
    Io(io::Error),
    /// The sender failed.
    Send(TxError),
    /// The bytes received differ from those sent.
    Mismatch(String),
}

impl std::fmt::Display for LoopbackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoopbackError::Unavailable(r) => write!(f, "vsock loopback unavailable: {r}"),
            LoopbackError::Io(e) => write!(f, "vsock loopback: {e}"),
            LoopbackError::Send(e) => write!(f, "vsock loopback send: {e}"),
            LoopbackError::Mismatch(m) => write!(f, "vsock loopback data mismatch: {m}"),
        }
    }
}

impl std::error::Error for LoopbackError {}

/// The byte at stream offset `i` of the check's pattern.
fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(131) >> 3) as u8 ^ (i as u8)
}

/// Sends `count` messages of `size` bytes (at most 64 KiB) from pooled buffers through a
/// [`VsockSender`] in `mode` to a receiver on `VMADDR_CID_LOCAL`, verifying every byte and that every
/// buffer comes back. Declines with [`LoopbackError::Unavailable`] — before connecting anywhere — when
/// the host has no vsock loopback transport. For the guest harness: on a kernel with
/// `vsock_loopback`, zero-copy completions of a stream are expected to be not copied for sizes up to
/// 64 KiB; seqpacket messages are always copied (see `zcnet::tx::vsock`).
pub fn loopback_check(
    ty: VsockType,
    mode: Mode,
    size: usize,
    count: usize,
) -> Result<LoopbackReport, LoopbackError> {
    vsock::loopback_available().map_err(LoopbackError::Unavailable)?;
    let size = size.clamp(1, 64 << 10);
    let listener = VsockSocket::listen(ty, vsock::VMADDR_CID_LOCAL, vsock::VMADDR_PORT_ANY)
        .map_err(LoopbackError::Io)?;
    let port = listener.local_port().map_err(LoopbackError::Io)?;
    let total = (size * count) as u64;
    let receiver = thread::spawn(move || -> Result<u64, LoopbackError> {
        let conn = listener.accept().map_err(LoopbackError::Io)?;
        let mut buf = vec![0u8; 128 << 10];
        let mut at = 0u64;
        while at < total {
            let n = conn.recv(&mut buf).map_err(LoopbackError::Io)?;
            if n == 0 {
                break;
            }
            for (k, &b) in buf[..n].iter().enumerate() {
                if b != pattern(at + k as u64) {
                    return Err(LoopbackError::Mismatch(format!("byte {}", at + k as u64)));
                }
            }
            at += n as u64;
        }
        Ok(at)
    });
    let socket =
        VsockSocket::connect(ty, vsock::VMADDR_CID_LOCAL, port).map_err(LoopbackError::Io)?;
    let pool = BufferPool::new(PoolConfig::new(size, 16)).map_err(LoopbackError::Io)?;
    let mut tx = VsockSender::new(socket, SenderConfig::with_mode(mode));
    let mut at = 0u64;
    for _ in 0..count {
        let mut buf = loop {
            if let Some(b) = pool.take() {
                break b;
            }
            tx.wait_completions(Duration::from_millis(100))
                .map_err(LoopbackError::Send)?;
        };
        buf.fill_with(size, |b| {
            for (k, x) in b.iter_mut().enumerate() {
                *x = pattern(at + k as u64);
            }
        });
        at += size as u64;
        tx.send(buf).map_err(|e| LoopbackError::Send(e.into()))?;
    }
    tx.flush(Duration::from_secs(10))
        .map_err(LoopbackError::Send)?;
    let stats = tx.stats().clone();
    drop(
        tx.close(Duration::from_secs(1))
            .map_err(LoopbackError::Send)?,
    );
    let bytes = receiver
        .join()
        .map_err(|_| LoopbackError::Mismatch("receiver panicked".into()))??;
    if bytes != total {
        return Err(LoopbackError::Mismatch(format!(
            "received {bytes} of {total} bytes"
        )));
    }
    Ok(LoopbackReport {
        bytes,
        stats,
        pool_available: pool.available(),
        pool_capacity: pool.capacity(),
    })
}
