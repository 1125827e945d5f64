//! AF_VSOCK senders. This host has no vsock loopback transport (binding to VMADDR_CID_LOCAL gives
//! EADDRNOTAVAIL), so the live tests skip here with that reason and run in the guest (VM) harness, which
//! loads vsock_loopback. Nothing here ever connects to CID 1 or 2 without a loopback transport.

use testnet::{LoopbackError, loopback_check};
use zcnet::tx::Mode;
use zcnet::tx::vsock::{self, VsockType};

#[test]
fn vsock_sockets_accept_so_zerocopy() {
    use rustix::net::{AddressFamily, SocketType, socket};
    for ty in [SocketType::STREAM, SocketType::SEQPACKET] {
        let fd = match socket(AddressFamily::VSOCK, ty, None) {
            Ok(fd) => fd,
            Err(e) => {
                let reason = format!("socket(AF_VSOCK): {e}");
                testnet::skip("vsock_sockets_accept_so_zerocopy", &reason);
                return;
            }
        };
        zcnet::tx::errqueue::enable_zerocopy(std::os::fd::AsFd::as_fd(&fd))
            .expect("SO_ZEROCOPY on AF_VSOCK (Linux 6.7+)");
    }
}

/// Whether the live tests can run here; prints the SKIP line with the reason when not.
fn available(test: &str) -> bool {
    match vsock::loopback_available() {
        Ok(()) => true,
        Err(reason) => {
            testnet::skip(test, &reason);
            false
        }
    }
}

fn live(test: &str, ty: VsockType, mode: Mode, size: usize) {
    match loopback_check(ty, mode, size, 200) {
        Err(e @ LoopbackError::Unavailable(_)) => {
            panic!("{test}: {e} (was available a moment ago)")
        }
        Err(e) => panic!("{test}: {e}"),
        Ok(report) => {
            let s = &report.stats;
            assert_eq!(
                report.pool_available, report.pool_capacity,
                "{test}: buffer leaked"
            );
            assert_eq!(s.zc_ids + s.copied_ids, s.zc_calls, "{test}: {s:?}");
            match ty {
                VsockType::Stream if mode == Mode::ZeroCopy => {
                    assert!(s.zc_calls > 0, "{test}: {s:?}")
                }
                VsockType::Stream => {}
                // Sent whole by one waiting call each, copied: see zcnet::tx::vsock.
                VsockType::Seqpacket => assert_eq!(s.zc_calls, 0, "{test}: {s:?}"),
            }
            eprintln!(
                "{test}: {} bytes, zc_calls {} zc_ids {} copied_ids {}",
                report.bytes, s.zc_calls, s.zc_ids, s.copied_ids
            );
        }
    }
}

#[test]
fn vsock_stream_loopback_zerocopy_delivers_every_byte() {
    if !available("vsock_stream_loopback_zerocopy_delivers_every_byte") {
        return;
    }
    for size in [1, 4095, 4097, 64 << 10] {
        live(
            "vsock_stream_loopback_zerocopy",
            VsockType::Stream,
            Mode::ZeroCopy,
            size,
        );
    }
}

#[test]
fn vsock_seqpacket_loopback_zerocopy_mode_copies_every_message() {
    if !available("vsock_seqpacket_loopback_zerocopy_mode_copies_every_message") {
        return;
    }
    for size in [1, 4097, 64 << 10] {
        live(
            "vsock_seqpacket_loopback_zerocopy",
            VsockType::Seqpacket,
            Mode::ZeroCopy,
            size,
        );
    }
}

#[test]
fn vsock_stream_loopback_copy_and_auto() {
    if !available("vsock_stream_loopback_copy_and_auto") {
        return;
    }
    for mode in [Mode::Copy, Mode::Auto] {
        live(
            "vsock_stream_loopback_copy_and_auto",
            VsockType::Stream,
            mode,
            32 << 10,
        );
    }
}

/// A listening seqpacket socket on any context id (no connection, so nothing is ever sent), or the
/// SKIP line and `None` where AF_VSOCK is unusable.
fn seqpacket_listener(test: &str) -> Option<vsock::VsockSocket> {
    use vsock::{VMADDR_CID_ANY, VMADDR_PORT_ANY, VsockSocket};
    match VsockSocket::listen(VsockType::Seqpacket, VMADDR_CID_ANY, VMADDR_PORT_ANY) {
        Ok(s) => Some(s),
        Err(e) => {
            testnet::skip(test, &format!("AF_VSOCK seqpacket listen: {e}"));
            None
        }
    }
}

/// A seqpacket sender copies (declined, with its reason), never sends without waiting (refused,
/// buffer back whole), bounds its waits with a finite, non-zero `SO_SNDTIMEO`, and after a failed
/// send sends nothing more.
#[test]
fn vsock_seqpacket_sender_sends_whole_messages_or_stops() {
    use std::time::Duration;
    use zcnet::Cause;
    use zcnet::tx::{SenderConfig, TrySendError, TxError, VsockSender};

    let test = "vsock_seqpacket_sender_sends_whole_messages_or_stops";
    let Some(socket) = seqpacket_listener(test) else {
        return;
    };
    let mut tx = VsockSender::new(socket, SenderConfig::with_mode(Mode::ZeroCopy));
    let status = tx.zerocopy_status().map_err(|f| f.cause().clone());
    assert!(matches!(status, Err(Cause::Declined(_))), "{status:?}");
    let timeout =
        rustix::net::sockopt::socket_timeout(tx.get_ref(), rustix::net::sockopt::Timeout::Send)
            .expect("SO_SNDTIMEO");
    let year = Duration::from_secs(365 * 24 * 3600);
    assert!(
        timeout.is_some_and(|t| t > year / 2 && t <= year),
        "no send timeout configured: SO_SNDTIMEO {timeout:?}, want a finite year"
    );

    match tx.try_send(vec![1u8; 100]) {
        Err(TrySendError::Failed(e)) => {
            assert!(matches!(e.error(), TxError::Unsupported { .. }), "{e}");
            let (_, unsent) = e.into_parts();
            assert_eq!(unsent.sent(), 0);
            assert_eq!(unsent.into_buf().expect("nothing lent"), vec![1u8; 100]);
        }
        other => panic!("try_send on seqpacket: {other:?}"),
    }

    // Not connected: the kernel fails the call, which may have cut a message as far as the sender
    // can tell; the next send makes no call at all.
    let first = tx
        .send(vec![2u8; 100])
        .expect_err("send on a listening socket");
    assert!(
        matches!(
            first.error(),
            TxError::MessageCut {
                earlier: false,
                len: 100,
                ..
            }
        ),
        "{first}"
    );
    // Not the source's EAGAIN-like kinds: a caller must not read it as "try again".
    assert_eq!(
        std::io::Error::from(first).kind(),
        std::io::ErrorKind::ConnectionAborted
    );
    let second = tx.send(vec![3u8; 10]).expect_err("send after a cut");
    assert!(
        matches!(
            second.error(),
            TxError::MessageCut {
                earlier: true,
                len: 10,
                ..
            }
        ),
        "{second}"
    );
    let (_, unsent) = second.into_parts();
    assert_eq!(unsent.into_buf().expect("nothing lent"), vec![3u8; 10]);

    let mut config = SenderConfig::with_mode(Mode::Copy);
    config.send_timeout = Some(Duration::ZERO);
    let Some(socket) = seqpacket_listener(test) else {
        return;
    };
    let tx = VsockSender::new(socket, config);
    let timeout =
        rustix::net::sockopt::socket_timeout(tx.get_ref(), rustix::net::sockopt::Timeout::Send)
            .expect("SO_SNDTIMEO");
    assert!(
        timeout.is_some_and(|t| !t.is_zero()),
        "a zero send timeout must not become SO_SNDTIMEO 0 (no limit): {timeout:?}"
    );
}

#[test]
fn async_sender_refuses_vsock_seqpacket() {
    use zcnet::aio::AsyncSender;
    use zcnet::tx::{SenderConfig, TxError, VsockSender};

    let Some(socket) = seqpacket_listener("async_sender_refuses_vsock_seqpacket") else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let tx = VsockSender::new(socket, SenderConfig::with_mode(Mode::Copy));
    let e = runtime
        .block_on(async { AsyncSender::new(tx).err() })
        .expect("AsyncSender::new on seqpacket must refuse");
    assert_eq!(e.kind(), std::io::ErrorKind::Unsupported, "{e}");
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<TxError>());
    assert!(matches!(inner, Some(TxError::Unsupported { .. })), "{e}");
}
