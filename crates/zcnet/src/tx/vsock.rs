//! AF_VSOCK stream and seqpacket sockets for [`crate::tx::VsockSender`], and a loopback self-check the
//! guest (VM) harness runs where a vsock loopback transport exists.
//!
//! Kernel behaviour relied on: vsock accepts `SO_ZEROCOPY` (Linux 6.7+); its completions are
//! `SOL_VSOCK/VSOCK_RECVERR` control messages; the virtio transports attach one completion id per enqueue
//! of at most 64 KiB. Binding to `VMADDR_CID_LOCAL` fails with `EADDRNOTAVAIL` without a loopback
//! transport, which [`loopback_check`] uses to decline before connecting anywhere.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::thread;
use std::time::Duration;

use crate::sys::vsock::{self as sys, SockaddrVm, VsockType};

use super::{BufferPool, Mode, PoolConfig, SenderConfig, TxError, TxStats, VsockSender};

/// A connected (or listening) AF_VSOCK socket.
#[derive(Debug)]
pub struct VsockSocket {
    fd: OwnedFd,
    ty: VsockType,
}

impl VsockSocket {
    /// Connects to `cid:port` (blocking).
    pub fn connect(ty: VsockType, cid: u32, port: u32) -> io::Result<VsockSocket> {
        let fd = sys::socket(ty)?;
        sys::connect(fd.as_fd(), SockaddrVm::new(cid, port))?;
        Ok(VsockSocket { fd, ty })
    }

    /// Binds to `cid:port` (`VMADDR_PORT_ANY` picks a port) and listens.
    pub fn listen(ty: VsockType, cid: u32, port: u32) -> io::Result<VsockSocket> {
        let fd = sys::socket(ty)?;
        sys::bind(fd.as_fd(), SockaddrVm::new(cid, port))?;
        sys::listen(fd.as_fd(), 16)?;
        Ok(VsockSocket { fd, ty })
    }

    /// Accepts one connection on a listening socket.
    pub fn accept(&self) -> io::Result<VsockSocket> {
        Ok(VsockSocket {
            fd: sys::accept(self.fd.as_fd())?,
            ty: self.ty,
        })
    }

    /// The bound port.
    pub fn local_port(&self) -> io::Result<u32> {
        Ok(sys::local_addr(self.fd.as_fd())?.svm_port)
    }

    /// Stream or seqpacket.
    pub fn socket_type(&self) -> VsockType {
        self.ty
    }

    /// Receives up to `buf.len()` bytes (one message on a seqpacket socket); 0 at end of stream.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        sys::recv(self.fd.as_fd(), buf)
    }
}

impl AsFd for VsockSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

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
/// `vsock_loopback`, zero-copy completions are expected to be not copied for sizes up to 64 KiB.
pub fn loopback_check(
    ty: VsockType,
    mode: Mode,
    size: usize,
    count: usize,
) -> Result<LoopbackReport, LoopbackError> {
    sys::loopback_available().map_err(LoopbackError::Unavailable)?;
    let size = size.clamp(1, 64 << 10);
    let listener = VsockSocket::listen(ty, sys::VMADDR_CID_LOCAL, sys::VMADDR_PORT_ANY)
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
        VsockSocket::connect(ty, sys::VMADDR_CID_LOCAL, port).map_err(LoopbackError::Io)?;
    let pool = BufferPool::new(PoolConfig {
        buf_size: size,
        count: 16,
        huge_pages: false,
    })
    .map_err(LoopbackError::Io)?;
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
