//! Helpers shared by the tx_* integration tests: a position-dependent byte pattern with a running
//! checksum, a TCP sink thread, a loop that sends through a pool as fast as completions recycle it,
//! and [`each_path!`], which runs one test body on every submission path.
#![allow(dead_code)]

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use zcnet::tx::{
    BufferPool, Mode, PoolConfig, PooledBuf, SendError, SendPath, Sender, SenderConfig, TxStats,
    ZcSocket,
};

/// Defines one `#[test]` per submission path, `<name>::sendmsg` and `<name>::io_uring`, both
/// running `body` with the path in `$path`: the same checks hold on either. The io_uring test
/// [`testnet::skip`]s when this kernel has no io_uring zero-copy send (a failure under
/// `ZCNET_PRIV_TESTS=1`).
#[macro_export]
macro_rules! each_path {
    ($(#[$meta:meta])* fn $name:ident($path:ident: SendPath) $body:block) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            fn body($path: zcnet::tx::SendPath) $body

            #[test]
            fn sendmsg() {
                body(zcnet::tx::SendPath::SENDMSG);
            }

            #[test]
            fn io_uring() {
                let test = concat!(stringify!($name), "::io_uring");
                if $crate::tx_common::io_uring_available(test) {
                    body(zcnet::tx::SendPath::IO_URING);
                }
            }
        }
    };
    // An async body, run on a two-worker tokio runtime.
    ($(#[$meta:meta])* async fn $name:ident($path:ident: SendPath) $body:block) => {
        $crate::each_path! {
            $(#[$meta])*
            fn $name(path: SendPath) {
                async fn run($path: zcnet::tx::SendPath) $body
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("a tokio runtime")
                    .block_on(run(path));
            }
        }
    };
}

/// Whether io_uring `SEND_ZC` works here; [`testnet::skip`]s `test` with the reason when not (a
/// failure under `ZCNET_PRIV_TESTS=1`: CI's kernels have it).
pub fn io_uring_available(test: &str) -> bool {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let tx = Sender::new(socket, path_config(SendPath::IO_URING, Mode::ZeroCopy));
    let reason = match (tx.path_status(), tx.zerocopy_status()) {
        (Ok(()), Ok(())) => return true,
        (Err(why), _) | (_, Err(why)) => why.to_string(),
    };
    testnet::skip(test, &reason);
    false
}

/// [`testnet::privileged`] for the run of `test` on `path`, named so in what it prints.
pub fn privileged(path: SendPath, test: &str) -> bool {
    testnet::privileged(&format!("{test}::{}", path.name()))
}

/// A config on `path` with a 20 s send timeout, so a stalled test fails instead of hanging.
pub fn path_config(path: SendPath, mode: Mode) -> SenderConfig {
    let mut config = sender_config(mode);
    config.path = path;
    config
}

/// A sender on `path` (which must be the one used), with `pool` registered for fixed sends on
/// io_uring.
pub fn sender_on<S: ZcSocket>(socket: S, config: SenderConfig, pool: &BufferPool) -> Sender<S> {
    let mut tx = Sender::new(socket, config);
    tx.path_status().expect("the configured path");
    if matches!(config.path, SendPath::IoUring { .. }) {
        tx.register_pool(pool).expect("register the pool");
    }
    tx
}

/// The page size (x86-64): sends around it start or end inside a page.
pub const PAGE: usize = 4096;

/// Stream send sizes: empty, one byte, around a page, 64 KiB, and around the default zero-copy
/// threshold (10 KiB).
pub const STREAM_SIZES: [usize; 7] = [0, 1, PAGE - 1, PAGE + 1, 64 << 10, 10 * 1024 - 1, 10 * 1024];

/// A running checksum (FNV-1a over every byte, plus the length): equal on both sides only when the
/// same bytes arrived in the same order, none missing or repeated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checksum {
    pub hash: u64,
    pub len: u64,
}

impl Default for Checksum {
    fn default() -> Self {
        Checksum {
            hash: 0xcbf2_9ce4_8422_2325,
            len: 0,
        }
    }
}

impl Checksum {
    pub fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.hash = (self.hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.len += bytes.len() as u64;
    }

    /// Fills `buf` with `size` bytes of the pattern at this stream's position and adds them.
    pub fn fill_next(&mut self, buf: &mut PooledBuf, size: usize) {
        let pos = self.len;
        buf.fill_with(size, |b| fill(b, pos));
        self.update(buf);
    }
}

/// A sender config with a 20 s send timeout, so a stalled test fails instead of hanging.
pub fn sender_config(mode: Mode) -> SenderConfig {
    let mut config = SenderConfig::with_mode(mode);
    config.send_timeout = Some(Duration::from_secs(20));
    config
}

/// The pattern byte at stream position `pos`: differs between neighbouring buffers, so a buffer
/// refilled before the kernel finished with it would change what arrives.
pub fn pattern(pos: u64) -> u8 {
    (pos ^ (pos >> 8) ^ (pos >> 16).wrapping_mul(7)) as u8
}

pub fn fill(buf: &mut [u8], pos: u64) {
    for (k, b) in buf.iter_mut().enumerate() {
        *b = pattern(pos + k as u64);
    }
}

/// Accepts one connection on `listener` and reads it to the end, checksumming.
pub fn tcp_sink(listener: TcpListener) -> JoinHandle<Checksum> {
    thread::spawn(move || read_checksum(listener.accept().expect("accept").0))
}

/// Reads `conn` to its end, checksumming. Each read is bounded by 60 s, the longest send timeout the
/// tests give their senders: a bound against a hang, wide enough for a shared host under load (a
/// stream with a part of 4 GiB took 22 to 35 s in all on a 2-core host under load).
pub fn read_checksum(conn: TcpStream) -> Checksum {
    read_checksum_paced(conn, 256 << 10, Duration::ZERO)
}

/// [`read_checksum`] in reads of at most `chunk` bytes, sleeping `pause` after each: a reader as
/// slow as a test needs.
pub fn read_checksum_paced(mut conn: TcpStream, chunk: usize, pause: Duration) -> Checksum {
    conn.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut sum = Checksum::default();
    let mut buf = vec![0u8; chunk];
    loop {
        let n = conn.read(&mut buf).expect("read");
        if n == 0 {
            return sum;
        }
        sum.update(&buf[..n]);
        if !pause.is_zero() {
            thread::sleep(pause);
        }
    }
}

/// A pool big enough for `max_size` with `count` buffers.
pub fn pool(max_size: usize, count: usize) -> BufferPool {
    BufferPool::new(PoolConfig::new(max_size.max(1), count)).expect("pool")
}

/// Takes a buffer, waiting (bounded) for completions to recycle one when the pool is dry.
pub fn take<S: ZcSocket>(pool: &BufferPool, tx: &mut Sender<S>) -> zcnet::tx::PooledBuf {
    tx.take_from(pool, Duration::from_secs(10))
        .expect("a pool buffer within 10 s")
}

/// Sends buffers of `sizes` (cycled `rounds` times) from `pool` with `send`, returning the checksum
/// of everything sent.
pub fn send_sizes<S: ZcSocket>(
    tx: &mut Sender<S>,
    pool: &BufferPool,
    sizes: &[usize],
    rounds: usize,
    mut send: impl FnMut(
        &mut Sender<S>,
        zcnet::tx::PooledBuf,
    ) -> Result<(), SendError<zcnet::tx::PooledBuf>>,
) -> Checksum {
    let mut sum = Checksum::default();
    for _ in 0..rounds {
        for &size in sizes {
            let mut buf = take(pool, tx);
            sum.fill_next(&mut buf, size);
            send(tx, buf).expect("send");
        }
    }
    sum
}

/// After the sender closed: the stream `sink` read is the one sent, every buffer of `pool` came
/// back, and `stats` count every byte sent and one completion for every zero-copy call.
pub fn assert_stream_delivered(
    sink: JoinHandle<Checksum>,
    sent: Checksum,
    pool: &BufferPool,
    stats: &TxStats,
) {
    let got = sink.join().expect("sink");
    assert_eq!(got, sent, "bytes delivered differ from bytes sent");
    assert_eq!(
        pool.available(),
        pool.capacity(),
        "a buffer was not returned"
    );
    assert_eq!(stats.bytes, sent.len);
    assert_eq!(stats.zc_ids + stats.copied_ids, stats.zc_calls, "{stats:?}");
}

/// A connected TCP pair over loopback with small socket buffers (64 KiB each way, both ends), so
/// that sends wait for the reader.
pub fn small_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    for s in [&client, &server] {
        rustix::net::sockopt::set_socket_send_buffer_size(s, 64 << 10).unwrap();
        rustix::net::sockopt::set_socket_recv_buffer_size(s, 64 << 10).unwrap();
    }
    (client, server)
}

/// Connects a TCP pair over loopback whose sender can hold a backlog: the receiving end (returned
/// second, not read yet) has a 64 KiB receive buffer, so a small window, and the sending end a
/// 4 MiB send buffer.
pub fn backlog_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).unwrap();
    rustix::net::sockopt::set_socket_recv_buffer_size(&listener, 64 << 10).unwrap();
    let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    rustix::net::sockopt::set_socket_send_buffer_size(&stream, 4 << 20).unwrap();
    let (server, _) = listener.accept().unwrap();
    (stream, server)
}

/// Connects a TCP pair over loopback whose receiving end (returned second, not read yet) delays
/// its ACKs: it leaves quick-ACK mode (`TCP_QUICKACK` off), so it acknowledges a lone segment only
/// when its delayed-ACK timer fires, 40 ms or more later. The sending end has Nagle's algorithm on
/// (the default), so a short send waits while an earlier short segment is unacknowledged.
pub fn delayed_ack_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).unwrap();
    let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    rustix::net::sockopt::set_tcp_quickack(&server, false).unwrap();
    (stream, server)
}

/// Bytes the socket holds and has not sent (`tcpi_notsent_bytes`).
pub fn unsent_bytes(stream: &TcpStream) -> u32 {
    zcnet::probe::tcp_send_state(stream.as_fd())
        .expect("TCP_INFO")
        .notsent_bytes
}

/// Connects a TCP pair: the listener end is read by [`tcp_sink`].
pub fn tcp_pair(listener: TcpListener) -> (TcpStream, JoinHandle<Checksum>) {
    let addr = listener.local_addr().unwrap();
    let sink = tcp_sink(listener);
    (TcpStream::connect(addr).expect("connect"), sink)
}

/// A UDP receiver thread: checksums every datagram (in arrival order) until `target` bytes arrived or
/// 20 s passed, and publishes its progress in `received` so senders can keep a bounded window in
/// flight (the kernel drops datagrams a full receive buffer cannot take).
pub struct UdpSink {
    pub received: Arc<AtomicU64>,
    pub target: Arc<AtomicU64>,
    pub handle: JoinHandle<(Checksum, u64)>,
    /// Unreceived bytes the receive buffer can surely hold.
    pub window: u64,
}

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

pub fn udp_sink(socket: UdpSocket) -> UdpSink {
    let received = Arc::new(AtomicU64::new(0));
    let target = Arc::new(AtomicU64::new(u64::MAX));
    let (r, t) = (Arc::clone(&received), Arc::clone(&target));
    // A big receive buffer: forced past net.core.rmem_max when allowed (root), else up to it. The
    // window is an eighth of what the kernel granted (at most 1 MiB): a 1200-byte datagram takes
    // about twice its size of the buffer (its skb's truesize), the kernel releases read datagrams'
    // memory only in steps of a quarter of the buffer, and a send adds up to 64 KiB on top.
    if rustix::net::sockopt::set_socket_recv_buffer_size_force(&socket, 8 << 20).is_err() {
        rustix::net::sockopt::set_socket_recv_buffer_size(&socket, 8 << 20).unwrap();
    }
    let granted = rustix::net::sockopt::socket_recv_buffer_size(&socket).unwrap() as u64;
    let window = (granted / 8).min(1 << 20);
    socket
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let handle = thread::spawn(move || {
        let mut sum = Checksum::default();
        let mut datagrams = 0u64;
        let mut buf = vec![0u8; 1 << 16];
        let start = Instant::now();
        while sum.len < t.load(Ordering::Acquire) && start.elapsed() < Duration::from_secs(20) {
            match socket.recv(&mut buf) {
                Ok(n) => {
                    sum.update(&buf[..n]);
                    datagrams += 1;
                    r.store(sum.len, Ordering::Release);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(e) => panic!("udp recv: {e}"),
            }
        }
        (sum, datagrams)
    });
    UdpSink {
        received,
        target,
        handle,
        window,
    }
}

impl UdpSink {
    /// Blocks (bounded) until no more than `window` bytes of `sent` are unreceived.
    pub fn throttle(&self, sent: u64) {
        self.throttle_while(sent, || {});
    }

    /// [`UdpSink::throttle`], calling `meanwhile` before each pause (a sender that must push queued
    /// sends to the kernel itself).
    pub fn throttle_while(&self, sent: u64, mut meanwhile: impl FnMut()) {
        let start = Instant::now();
        while sent.saturating_sub(self.received.load(Ordering::Acquire)) > self.window {
            meanwhile();
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "receiver stalled: datagrams were lost"
            );
            thread::sleep(Duration::from_micros(200));
        }
    }

    /// Tells the receiver the total and waits for it.
    pub fn finish(self, total: u64) -> (Checksum, u64) {
        self.target.store(total, Ordering::Release);
        self.handle.join().expect("udp sink")
    }

    /// After the sender closed: every datagram sent arrived (`datagrams` of them, their bytes the
    /// ones sent, in order) and every buffer of `pool` came back.
    pub fn assert_delivered(self, sent: Checksum, datagrams: u64, pool: &BufferPool) {
        let (got, got_datagrams) = self.finish(sent.len);
        assert_eq!(got, sent, "bytes delivered differ from bytes sent");
        assert_eq!(got_datagrams, datagrams);
        assert_eq!(
            pool.available(),
            pool.capacity(),
            "a buffer was not returned"
        );
    }
}

/// The datagrams one send of `size` bytes makes with GSO segments of `gso` (an empty send is one).
pub fn datagrams_of(size: usize, gso: Option<u16>) -> u64 {
    match gso {
        Some(seg) if size > 0 => size.div_ceil(usize::from(seg)) as u64,
        _ => 1,
    }
}

/// The addresses of `pair`'s ends `a` and `b`, IPv6 or IPv4.
pub fn veth_ips(pair: &testnet::VethPair, v6: bool) -> (IpAddr, IpAddr) {
    if v6 {
        (pair.a_v6.into(), pair.b_v6.into())
    } else {
        (pair.a_v4.into(), pair.b_v4.into())
    }
}

/// A UDP socket in each namespace of `pair` (IPv6 or IPv4): the sender's in `a`, the receiver's in
/// `b`. `a` knows `b`'s link address from the start: while ARP or neighbour discovery resolves it,
/// the kernel holds at most `unres_qlen_bytes` (about 200 KiB) of datagrams and silently drops the
/// rest, which a sender a window ahead of its receiver overruns when the resolution is slow.
pub fn veth_udp_sockets(pair: &testnet::VethPair, v6: bool) -> (UdpSocket, UdpSocket) {
    pair.pin_b_neighbours().expect("static neighbours");
    let (a_ip, b_ip) = veth_ips(pair, v6);
    let tx = pair.a.run(|| UdpSocket::bind((a_ip, 0))).unwrap();
    let rx = pair.b.run(|| UdpSocket::bind((b_ip, 0))).unwrap();
    (tx, rx)
}

/// The sizes sent across a veth: around the 1200-byte GSO segment with GSO, up to a datagram that
/// fills the 1500-byte MTU without.
pub fn veth_udp_sizes(gso: Option<u16>) -> &'static [usize] {
    match gso {
        Some(_) => &[1, 1200, 1201, PAGE + 1, 1200 * 40],
        None => &[0, 1, 1000, 1400],
    }
}

/// A veth pair whose receiving end drops every frame in a native XDP program (attached while the
/// returned link lives), and a UDP socket in the sending namespace connected across it.
pub fn xdp_drop_sink(v6: bool) -> (testnet::VethPair, zcnet::xdp::XdpLink, UdpSocket) {
    use zcnet::xdp::{AttachMode, XdpProgram};
    let pair = testnet::VethPair::new(testnet::VethConfig::default()).expect("veth pair");
    let link = pair
        .b
        .run(|| XdpProgram::drop_all()?.attach_to(&pair.b_if, AttachMode::Driver))
        .expect("attach the XDP drop program");
    // The drop program also drops ARP and neighbour discovery: resolve the peer statically.
    pair.pin_b_neighbours().unwrap();
    let (src, dst) = veth_ips(&pair, v6);
    let socket = pair.a.run(|| UdpSocket::bind((src, 0))).unwrap();
    socket.connect(SocketAddr::new(dst, 9)).unwrap();
    (pair, link, socket)
}

/// Into the XDP drop sink (IPv6 or IPv4): `send` wraps the socket in a sender, sends `sends`
/// buffers of `size` bytes (GSO segments of 1200 bytes, or one 1400-byte datagram each) from the
/// pool, flushes and returns the statistics; each send must have been one zero-copy call whose
/// completion says not copied, and every buffer must be back.
pub fn xdp_sink_run(
    v6: bool,
    gso: Option<u16>,
    send: impl FnOnce(UdpSocket, &BufferPool, usize, usize) -> TxStats,
) {
    const SENDS: usize = 500;
    let (_pair, link, socket) = xdp_drop_sink(v6);
    let pool = pool(64 << 10, 8);
    let size = if gso.is_some() { 1200 * 40 } else { 1400 };
    let stats = send(socket, &pool, size, SENDS);
    drop(link);
    assert_eq!(stats.zc_calls, SENDS as u64, "{stats:?}");
    assert_eq!(stats.copied_ids, 0, "{stats:?}");
    assert_eq!(stats.zc_ids, SENDS as u64, "{stats:?}");
    assert_eq!(pool.available(), pool.capacity());
}

/// Accepts one connection, reads 100 000 bytes, then closes with data unread, which makes the kernel
/// reset the connection.
pub fn resetting_peer(listener: TcpListener) -> JoinHandle<()> {
    thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut buf = vec![0u8; 100_000];
        conn.read_exact(&mut buf).unwrap();
        thread::sleep(Duration::from_millis(50));
        drop(conn);
    })
}

/// Caps the rate at which the kernel sends from `stream` (`SO_MAX_PACING_RATE`, TCP's own pacing):
/// a sender faster than that keeps bytes unsent in the socket while the peer reads all it gets.
pub fn cap_pacing_rate(stream: &TcpStream, bytes_per_second: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain integer option on a descriptor `stream` owns, its length given.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            (&bytes_per_second as *const u64).cast(),
            std::mem::size_of::<u64>() as libc::socklen_t,
        )
    };
    assert_eq!(
        rc,
        0,
        "SO_MAX_PACING_RATE: {}",
        std::io::Error::last_os_error()
    );
}
