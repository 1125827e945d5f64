//! How much of a sender's stream maps: the measurement behind tcp_mmap's "% mmap'ed", packaged for
//! probes and tests.

use std::io;
use std::net::{IpAddr, TcpStream};
use std::thread;

use super::{Receiver, RxConfig, RxError, RxMode, RxOp, RxStats, sender};

/// Connects a loopback pair on `ip` with one page of payload per segment
/// ([`sender::connect_page_mss`]), lets `send` write into the client end (dropping it ends the
/// stream), receives everything with a zero-copy [`Receiver`] that never gives up on mapping, and
/// returns its stats: [`RxStats::mapped_pct`] is the share of the stream this kernel mapped for that
/// sender. On this kernel a plain `write()` sender maps 0% and a MSG_ZEROCOPY sender 100%.
pub fn measure_loopback<F>(ip: IpAddr, send: F) -> Result<RxStats, RxError>
where
    F: FnOnce(TcpStream) -> io::Result<()> + Send,
{
    let (client, server) =
        sender::connect_page_mss(ip).map_err(|e| RxError::new(RxOp::Setup, e))?;
    let config = RxConfig {
        mode: RxMode::ZeroCopy,
        give_up_after: None,
        ..RxConfig::default()
    };
    thread::scope(|scope| {
        let writer = scope.spawn(move || send(client));
        let received = Receiver::new(server, config).and_then(|mut rx| {
            while rx.recv()?.is_some() {}
            Ok(*rx.stats())
        });
        let sent = writer
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        let stats = received?;
        sent.map_err(|e| RxError::new(RxOp::Setup, e))?;
        Ok(stats)
    })
}
