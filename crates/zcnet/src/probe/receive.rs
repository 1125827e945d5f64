//! Receive-side finding: how much of a TCP stream TCP_ZEROCOPY_RECEIVE maps on this host.

use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use super::send::{LOOPBACK_SEND_SIZE, LOOPBACK_SENDS};
use super::{Finding, Support};
use crate::rx;
use crate::tx::{Mode, SenderConfig, TcpSender};

/// TCP_ZEROCOPY_RECEIVE over loopback at MSS 4096: the share of a stream that maps, with a
/// MSG_ZEROCOPY sender (whole pages per segment) and with a plain `write()` sender.
pub(super) fn zerocopy_receive() -> Finding {
    const FEATURE: &str = "tcp.zerocopy_receive";
    let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let zerocopy = rx::measure_loopback(ip, |client| {
        let mut tx = TcpSender::new(client, SenderConfig::with_mode(Mode::ZeroCopy));
        for _ in 0..LOOPBACK_SENDS {
            tx.send(vec![0x5a; LOOPBACK_SEND_SIZE])?;
        }
        tx.flush(Duration::from_secs(5))?;
        tx.close(Duration::from_secs(5))
            .map(drop)
            .map_err(io::Error::from)
    });
    let plain = rx::measure_loopback(ip, |mut client| {
        (0..LOOPBACK_SENDS).try_for_each(|_| client.write_all(&[0x5a; LOOPBACK_SEND_SIZE]))
    });
    match (zerocopy, plain) {
        (Err(e), _) | (_, Err(e)) => Finding::new(FEATURE, Support::No, e.to_string()),
        (Ok(zc), Ok(plain)) => {
            let support = match zc.mapped_pct() {
                p if p >= 99.0 => Support::Yes,
                p if p > 0.0 => Support::Partial,
                _ => Support::No,
            };
            Finding::new(
                FEATURE,
                support,
                format!(
                    "{:.1}% of bytes mapped with a MSG_ZEROCOPY sender, {:.1}% with a plain sender (loopback, MSS 4096)",
                    zc.mapped_pct(),
                    plain.mapped_pct()
                ),
            )
        }
    }
}
