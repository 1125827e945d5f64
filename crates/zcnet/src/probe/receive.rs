//! Receive-side finding: how much of a TCP stream TCP_ZEROCOPY_RECEIVE maps on this host.

use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use super::send::{LOOPBACK_SEND_SIZE, LOOPBACK_SENDS, pin_refusal};
use super::{Finding, Support};
use crate::rx;
use crate::tx::{Mode, SenderConfig, TcpSender, TxStats};

/// TCP_ZEROCOPY_RECEIVE over loopback at MSS 4096: the share of a stream that maps, with a
/// MSG_ZEROCOPY sender (whole pages per segment) and with a plain `write()` sender.
///
/// Only what the MSG_ZEROCOPY sender sent zero-copy can map: a send it copied instead (`ENOBUFS`
/// when the pages it would pin exceed the user's locked-memory limit, which every process of the
/// user shares) lands in the kernel's own unaligned pages. The share is therefore taken over the
/// sends that went out zero-copy whole, and the reason names any that did not; when none did, the
/// finding is [`Support::Unknown`] ("not measured", and why), not a verdict on the receive path.
pub(super) fn zerocopy_receive() -> Finding {
    const FEATURE: &str = "tcp.zerocopy_receive";
    let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
    // What the MSG_ZEROCOPY sender did, recorded once its sends were flushed.
    let (mut whole_zc_sends, mut sender, mut refused) = (0u64, TxStats::default(), None);
    let zerocopy = rx::measure::measure_loopback(ip, |client| {
        let mut tx = TcpSender::new(client, SenderConfig::with_mode(Mode::ZeroCopy));
        for _ in 0..LOOPBACK_SENDS {
            let copies_before = tx.stats().copy_calls;
            tx.send(vec![0x5a; LOOPBACK_SEND_SIZE])?;
            whole_zc_sends += u64::from(tx.stats().copy_calls == copies_before);
        }
        tx.flush(Duration::from_secs(5))?;
        sender = tx.stats().clone();
        refused = tx.zerocopy_status().err().map(ToString::to_string);
        tx.close(Duration::from_secs(5))
            .map(drop)
            .map_err(io::Error::from)
    });
    let plain = rx::measure::measure_loopback(ip, |mut client| {
        (0..LOOPBACK_SENDS).try_for_each(|_| client.write_all(&[0x5a; LOOPBACK_SEND_SIZE]))
    });
    match (zerocopy, plain) {
        (Err(e), _) | (_, Err(e)) => Finding::new(FEATURE, Support::No, e.to_string()),
        (Ok(_), Ok(plain)) if whole_zc_sends == 0 => Finding::new(
            FEATURE,
            Support::Unknown,
            format!(
                "not measured: the MSG_ZEROCOPY sender copied all {LOOPBACK_SENDS} sends ({}); {:.1}% \
                 of bytes mapped with a plain sender (loopback, MSS 4096)",
                copy_why(&sender, refused.as_deref()),
                plain.mapped_pct()
            ),
        ),
        (Ok(zc), Ok(plain)) => {
            let zc_bytes = whole_zc_sends * LOOPBACK_SEND_SIZE as u64;
            // A send copied in part may have mapped in part: never more than all of the rest.
            let pct = zc.mapped_bytes.min(zc_bytes) as f64 * 100.0 / zc_bytes as f64;
            let support = match pct {
                p if p >= 99.0 => Support::Yes,
                p if p > 0.0 => Support::Partial,
                _ => Support::No,
            };
            let copied = match LOOPBACK_SENDS as u64 - whole_zc_sends {
                0 => String::new(),
                n => format!(
                    " (of the {whole_zc_sends} of {LOOPBACK_SENDS} sends that went out zero-copy \
                     whole; {n} copied: {})",
                    copy_why(&sender, refused.as_deref())
                ),
            };
            Finding::new(
                FEATURE,
                support,
                format!(
                    "{pct:.1}% of bytes mapped with a MSG_ZEROCOPY sender{copied}, {:.1}% with a plain \
                     sender (loopback, MSS 4096)",
                    plain.mapped_pct()
                ),
            )
        }
    }
}

/// Why a MSG_ZEROCOPY sender copied sends: the socket's refusal of zero-copy (`refused`, the
/// sender's [`crate::tx::Sender::zerocopy_status`]), else pages it could not pin ([`pin_refusal`]),
/// else its policy.
fn copy_why(stats: &TxStats, refused: Option<&str>) -> String {
    match (refused, pin_refusal(stats)) {
        (Some(refused), _) => refused.to_string(),
        (None, Some((_, why))) => why,
        (None, None) => format!(
            "{} calls copied by the sender's policy ({} as too small, {} after copied completions)",
            stats.copy_calls, stats.copy_small, stats.copy_copied
        ),
    }
}
