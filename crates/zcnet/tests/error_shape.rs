//! Every public error type has one shape, checked from outside the crate on errors the kernel and
//! the parsers really give: `kind()` is the kind of the `io::Error` it converts into, that
//! `io::Error` wraps the error itself (downcast gives it back, its message intact), and an error's
//! message never repeats its `source()`'s (a chain printed cause by cause says each thing once).

mod tx_common;

use std::error::Error;
use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use zcnet::tx::{BufferPool, Mode, PoolConfig, Sender, SenderConfig, TxError};
use zcnet::{Fallback, ovs, rx, xdp};

/// Checks the shape of `e`: `kind` as `e.kind()` says, a message that does not repeat its source's,
/// and a conversion into `io::Error` that keeps `e` whole.
fn check<E>(e: E, kind: io::ErrorKind)
where
    E: Error + Send + Sync + 'static,
    io::Error: From<E>,
{
    let shown = e.to_string();
    assert!(!shown.is_empty());
    if let Some(source) = e.source() {
        let cause = source.to_string();
        assert!(
            !shown.contains(&cause),
            "message {shown:?} repeats its source {cause:?}"
        );
    }
    let converted = io::Error::from(e);
    assert_eq!(converted.kind(), kind, "{shown}");
    assert_eq!(converted.to_string(), shown);
    let back = converted.into_inner().expect("the error itself, wrapped");
    assert!(back.downcast::<E>().is_ok(), "{shown}: downcast back");
}

/// The kind an errno converts to, as `io::Error` maps it.
fn kind_of(errno: Option<i32>) -> io::ErrorKind {
    errno.map_or(io::ErrorKind::Other, |e| {
        io::Error::from_raw_os_error(e).kind()
    })
}

#[test]
fn parse_errors_convert_whole_and_have_no_errno() {
    let mode = "fast".parse::<Mode>().unwrap_err();
    assert_eq!(mode.text(), "fast");
    assert_eq!(mode.raw_os_error(), None);
    check(mode, io::ErrorKind::InvalidInput);

    let flow = ovs::parse_key("in_port(").unwrap_err();
    assert_eq!(flow.raw_os_error(), None);
    check(flow, io::ErrorKind::InvalidData);

    let upcall = ovs::parse_upcall(&[1, 2, 3], 0).unwrap_err();
    assert_eq!(upcall.kind(), io::ErrorKind::InvalidData);
    check(upcall, io::ErrorKind::InvalidData);

    let frame = xdp::headers::parse(&[0; 10]).unwrap_err();
    assert_eq!(frame.kind(), io::ErrorKind::InvalidData);
    check(frame, io::ErrorKind::InvalidData);

    let path = xdp::headers::Path {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        src: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 1),
        dst: SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 2),
    };
    let build = xdp::headers::write_udp(&mut [0; 128], &path, 0, 1).unwrap_err();
    assert_eq!(build, xdp::headers::BuildError::MixedFamilies);
    check(build, io::ErrorKind::InvalidInput);
}

#[test]
fn a_fallback_is_an_error_and_the_answer_to_why_it_copies() {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let mut tx = Sender::new(
        TcpStream::connect(listener.local_addr().unwrap()).unwrap(),
        {
            let mut config = SenderConfig::default();
            config.policy.mode = Mode::Copy;
            config
        },
    );
    let why = tx.zerocopy_status().expect_err("copy was asked for");
    assert!(matches!(why.cause(), zcnet::Cause::Requested), "{why}");
    assert_eq!(why.raw_os_error(), None);
    assert_eq!(why.kind(), io::ErrorKind::Unsupported);
    check(why.clone(), io::ErrorKind::Unsupported);

    // The sendmsg path registers no pool: the reason goes through `?` as an error.
    let pool = BufferPool::new(PoolConfig::default()).unwrap();
    let register = |tx: &mut zcnet::tx::TcpSender| -> Result<(), Box<dyn Error>> {
        tx.register_pool(&pool)?;
        Ok(())
    };
    let err = register(&mut tx).unwrap_err();
    assert!(err.downcast_ref::<Fallback>().is_some(), "{err}");

    let refused = Fallback::refused("setsockopt SO_ZEROCOPY", libc::EPERM, "");
    assert_eq!(refused.kind(), io::ErrorKind::PermissionDenied);
    check(refused, io::ErrorKind::PermissionDenied);
}

#[test]
fn send_and_receive_errors_from_a_reset_connection_keep_their_errno_and_kind() {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = tx_common::resetting_peer(listener);
    let mut tx = Sender::new(TcpStream::connect(addr).unwrap(), SenderConfig::default());
    let buf = Arc::new(vec![7u8; 64 << 10]);
    let err = (0..100_000)
        .find_map(|_| tx.send(Arc::clone(&buf)).err())
        .expect("a reset peer fails a send");
    peer.join().unwrap();
    let errno = err.raw_os_error();
    assert!(
        matches!(errno, Some(libc::ECONNRESET | libc::EPIPE)),
        "{err}"
    );
    assert_eq!(err.kind(), kind_of(errno));
    assert_eq!(err.error().kind(), kind_of(errno));
    // The whole error, the buffer handed back with it, survives the trip through io::Error.
    let converted = io::Error::from(err);
    let back = converted
        .into_inner()
        .unwrap()
        .downcast::<zcnet::tx::SendError<Arc<Vec<u8>>>>()
        .expect("a SendError");
    assert!(Arc::ptr_eq(back.unsent().buf(), &buf));
    let (error, _) = back.into_parts();
    check(error, kind_of(errno));

    // A stopped call's message is its own; what stopped it is its source.
    let stopped = TxError::Stopped {
        error: Box::new(TxError::Timeout {
            what: "flush",
            outstanding: 2,
            waited: Duration::from_secs(1),
        }),
        unsent: Vec::new(),
    };
    assert_eq!(stopped.kind(), io::ErrorKind::TimedOut);
    assert!(stopped.source().unwrap().is::<TxError>());
    check(stopped, io::ErrorKind::TimedOut);

    // The receiving side of a reset.
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    rustix::net::sockopt::set_socket_linger(&server, Some(Duration::ZERO)).unwrap();
    drop(server);
    let mut rx = rx::Receiver::new(client, rx::RxConfig::default()).unwrap();
    let err = loop {
        match rx.recv() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("a reset, not an end"),
            Err(e) => break e,
        }
    };
    assert_eq!(err.raw_os_error(), Some(libc::ECONNRESET), "{err}");
    assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
    check(err, io::ErrorKind::ConnectionReset);
}

#[test]
fn xdp_and_ovs_errors_from_the_kernel_keep_their_errno_and_kind() {
    // No such interface, or no privilege to ask: an error of the kernel either way.
    let local = SocketAddr::from((Ipv4Addr::LOCALHOST, 9));
    let err = xdp::UdpEndpoint::bind("zcnet-none0", local, Default::default())
        .expect_err("no interface of that name");
    assert!(err.raw_os_error().is_some(), "{err}");
    assert_eq!(err.kind(), kind_of(err.raw_os_error()));
    let kind = err.kind();
    // Wrapped in a send error, it stays itself: transparent, message and source both its own.
    let wrapped = xdp::SendError::Xdp(err);
    assert_eq!(wrapped.kind(), kind);
    if let xdp::SendError::Xdp(inner) = &wrapped {
        assert_eq!(wrapped.to_string(), inner.to_string());
    }
    check(wrapped, kind);
    check(xdp::SendError::NoFrame, io::ErrorKind::WouldBlock);
    check(
        xdp::SendError::NoFrameWithin {
            waited: std::time::Duration::from_secs(1),
        },
        io::ErrorKind::TimedOut,
    );

    let err = ovs::Datapath::open("zcnet-none").expect_err("no datapath of that name");
    assert!(err.raw_os_error().is_some(), "{err}");
    let kind = err.kind();
    match err.ovs_kind() {
        ovs::OvsErrorKind::DatapathGone => assert_eq!(kind, io::ErrorKind::NotFound),
        _ => assert_eq!(kind, kind_of(err.raw_os_error())),
    }
    check(err, kind);
}

#[test]
fn a_would_block_try_send_converts_whole() {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    stream.set_nonblocking(true).unwrap();
    let mut tx = Sender::new(stream, SenderConfig::default());
    let err = (0..10_000)
        .find_map(|_| tx.try_send(vec![1u8; 64 << 10]).err())
        .expect("a peer that does not read fills the socket");
    assert_eq!(err.raw_os_error(), Some(libc::EAGAIN));
    check(err, io::ErrorKind::WouldBlock);
    peer.set_nonblocking(true).unwrap();
    let _ = peer.read(&mut [0; 16]);
}

/// The observer's, the queue lease's and the AF_XDP broker's errors have the same shape: an errno
/// where the kernel gave one, a kind, a message that does not repeat its source, and a whole
/// conversion into `io::Error`.
#[test]
fn observer_lease_and_broker_errors_have_the_same_shape() {
    use zcnet::observe::ObserveError;
    use zcnet::queue_lease::{LeaseError, Step};
    use zcnet::xdp::BrokerError;

    let observe = ObserveError::Capabilities {
        missing: vec!["CAP_BPF"],
    };
    assert_eq!(observe.raw_os_error(), None);
    check(observe, io::ErrorKind::PermissionDenied);
    check(ObserveError::NoTracefs, io::ErrorKind::NotFound);

    let lease = LeaseError {
        iface: "eth0".into(),
        queue: 3,
        step: Step::HeaderSplit,
        call: "ETHTOOL_MSG_RINGS_SET tcp-data-split on".into(),
        error: io::Error::from_raw_os_error(libc::EOPNOTSUPP),
        rolled_back: Vec::new(),
        rollback_failed: Vec::new(),
    };
    assert_eq!(lease.raw_os_error(), Some(libc::EOPNOTSUPP));
    check(lease, kind_of(Some(libc::EOPNOTSUPP)));

    let broker = BrokerError::Io(
        "connect to /run/zcnet/xdp.sock".into(),
        io::Error::from_raw_os_error(libc::ECONNREFUSED),
    );
    assert_eq!(broker.raw_os_error(), Some(libc::ECONNREFUSED));
    assert!(broker.source().is_some(), "the kernel's error is the cause");
    check(broker, io::ErrorKind::ConnectionRefused);
    check(
        BrokerError::Protocol("a short answer".into()),
        io::ErrorKind::InvalidData,
    );
}
