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
            if mode == Mode::ZeroCopy {
                assert!(s.zc_calls > 0, "{test}: {s:?}");
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
fn vsock_seqpacket_loopback_zerocopy_delivers_every_byte() {
    if !available("vsock_seqpacket_loopback_zerocopy_delivers_every_byte") {
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
