//! io_uring zero-copy receive (zcrx) on this host's kernel: a typed refusal where the kernel or the
//! process cannot, every byte over loopback where a device-less instance registers (Linux 7.1+; the
//! guest suite's zcrx run checks the rest on 7.3).

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::thread;

use rustix::thread::{CapabilitySet, capabilities};
use zcnet::probe::{self, Support};
use zcnet::rx::{ChunkKind, Receiver, RxConfig, RxPath, ZcrxConfig, ZcrxRefusal};

fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    (client, listener.accept().unwrap().0)
}

fn device_less() -> RxConfig {
    RxConfig::default().with_path(RxPath::Zcrx(
        ZcrxConfig::no_device().with_area_len(256 << 10),
    ))
}

/// Whether this kernel registers a device-less instance for this process (the probe tries one).
fn nodev_registers() -> bool {
    probe::zcrx()
        .iter()
        .any(|f| f.feature == "io_uring.zcrx_nodev" && f.support == Support::Yes)
}

#[test]
fn zcrx_refusals_say_why() {
    if nodev_registers() {
        testnet::adapted(
            "zcrx_refusals_say_why",
            "this kernel registers device-less zcrx: the refusal is checked for the buffer length",
        );
        let config = RxConfig::default().with_path(RxPath::Zcrx(
            ZcrxConfig::no_device().with_rx_buf_len(16 << 10),
        ));
        let err = Receiver::new(pair().1, config).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EOPNOTSUPP), "{err}");
        assert_eq!(err.zcrx_refusal(), Some(ZcrxRefusal::DeviceUnsupported));
        return;
    }
    let net_admin =
        capabilities(None).is_ok_and(|c| c.effective.contains(CapabilitySet::NET_ADMIN));
    let err = Receiver::new(pair().1, device_less()).unwrap_err();
    let zcrx_rows = probe::zcrx();
    let has_recv_zc = zcrx_rows
        .iter()
        .any(|f| f.feature == "io_uring.zcrx" && f.support == Support::Yes);
    let (errno, refusal) = match (has_recv_zc, net_admin) {
        (false, _) => (libc::EINVAL, ZcrxRefusal::KernelTooOld),
        (true, false) => (libc::EPERM, ZcrxRefusal::NotPermitted),
        (true, true) => (libc::EINVAL, ZcrxRefusal::NoDeviceless),
    };
    assert_eq!(err.raw_os_error(), Some(errno), "{err}");
    assert_eq!(err.zcrx_refusal(), Some(refusal), "{err}");
    let text = err.to_string();
    assert!(text.contains(&format!("{refusal:?}")), "{text}");
    assert!(
        text.contains("RxPath::Socket"),
        "the remedy names the other path: {text}"
    );
}

#[test]
fn zcrx_device_less_loopback_delivers_every_byte() {
    const TEST: &str = "zcrx_device_less_loopback_delivers_every_byte";
    if !nodev_registers() {
        let why = probe::zcrx()
            .into_iter()
            .find(|f| f.feature == "io_uring.zcrx_nodev")
            .map_or("no zcrx".to_string(), |f| f.reason);
        testnet::skip(TEST, &format!("no device-less zcrx here: {why}"));
        return;
    }
    let bytes = 4usize << 20;
    let (mut client, server) = pair();
    let sender = thread::spawn(move || {
        let data: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
        client.write_all(&data)
    });
    let mut rx = Receiver::new(server, device_less()).unwrap();
    let mut got = 0usize;
    while let Some(chunk) = rx.recv().unwrap() {
        assert_eq!(chunk.kind(), ChunkKind::Zcrx);
        assert_eq!(chunk.offset(), got as u64);
        for (i, &b) in chunk.iter().enumerate() {
            assert_eq!(b, ((got + i) % 251) as u8, "byte {}", got + i);
        }
        got += chunk.len();
    }
    sender.join().unwrap().unwrap();
    assert_eq!(got, bytes);
    let stats = rx.stats();
    assert_eq!(stats.zcrx_bytes, bytes as u64);
    assert_eq!(
        stats.zcrx_copied_bytes, bytes as u64,
        "device-less copies every byte"
    );
}
