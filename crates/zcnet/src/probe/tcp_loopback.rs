//! One MSG_ZEROCOPY write over loopback TCP: what zero-copy send does on this host, for the probe.

use std::io::{self, Read};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use crate::tx::{Mode, SenderConfig, TcpSender, TxStats};

/// What one MSG_ZEROCOPY write over a loopback TCP connection showed.
#[derive(Debug, Clone)]
pub(super) struct TcpLoopbackCheck {
    /// Whether `SO_ZEROCOPY` could be set, or why not (errno name).
    pub(super) zerocopy: Result<(), crate::Fallback>,
    /// The sender's counters: `zc_calls` sends, `zc_ids`/`copied_ids` completions.
    pub(super) stats: TxStats,
}

/// Sends one `size`-byte MSG_ZEROCOPY write over a fresh 127.0.0.1 TCP connection to a reader thread
/// and waits up to `timeout` for its completion. Fails only when the loopback connection itself fails
/// or the completion does not come.
pub(super) fn tcp_loopback_check(size: usize, timeout: Duration) -> io::Result<TcpLoopbackCheck> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let addr = listener.local_addr()?;
    let reader = thread::spawn(move || -> io::Result<u64> {
        let (mut conn, _) = listener.accept()?;
        conn.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut sink = Vec::new();
        conn.read_to_end(&mut sink).map(|n| n as u64)
    });
    let mut tx = TcpSender::new(
        TcpStream::connect(addr)?,
        SenderConfig::with_mode(Mode::ZeroCopy),
    );
    tx.send(vec![0x5a; size.max(1)])?;
    tx.flush(timeout)?;
    let check = TcpLoopbackCheck {
        zerocopy: tx.zerocopy_status().map_err(Clone::clone),
        stats: tx.stats().clone(),
    };
    drop(tx.close(timeout)?);
    reader
        .join()
        .map_err(|_| io::Error::other("loopback reader panicked"))??;
    Ok(check)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_loopback_write_reports_its_completion_as_copied() {
        let check = tcp_loopback_check(64 << 10, Duration::from_secs(10)).unwrap();
        check.zerocopy.as_ref().expect("SO_ZEROCOPY on TCP");
        // Delivered to a local socket, the kernel copies: the one completion says so.
        assert_eq!(check.stats.zc_calls, 1);
        assert_eq!(check.stats.copied_ids, 1, "{check:?}");
        assert_eq!(check.stats.zc_ids, 0, "{check:?}");
    }
}
