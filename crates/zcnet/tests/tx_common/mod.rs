//! Helpers shared by the tx_* integration tests: a position-dependent byte pattern with a running
//! checksum, a TCP sink thread, and a loop that sends through a pool as fast as completions recycle it.
#![allow(dead_code)]

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use zcnet::tx::{BufferPool, PoolConfig, SendError, Sender, ZcSocket};

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

/// Reads `conn` to its end (each read bounded by 20 s), checksumming.
pub fn read_checksum(mut conn: TcpStream) -> Checksum {
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut sum = Checksum::default();
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = conn.read(&mut buf).expect("read");
        if n == 0 {
            return sum;
        }
        sum.update(&buf[..n]);
    }
}

/// A pool big enough for `max_size` with `count` buffers.
pub fn pool(max_size: usize, count: usize) -> BufferPool {
    BufferPool::new(PoolConfig {
        buf_size: max_size.max(1),
        count,
        huge_pages: false,
    })
    .expect("pool")
}

/// Takes a buffer, waiting (bounded) for completions to recycle one when the pool is dry.
pub fn take<S: ZcSocket>(pool: &BufferPool, tx: &mut Sender<S>) -> zcnet::tx::PooledBuf {
    pool.take_or_wait(tx, Duration::from_secs(10))
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
            let pos = sum.len;
            buf.fill_with(size, |b| fill(b, pos));
            sum.update(&buf);
            send(tx, buf).expect("send");
        }
    }
    sum
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

use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

pub fn udp_sink(socket: UdpSocket) -> UdpSink {
    let received = Arc::new(AtomicU64::new(0));
    let target = Arc::new(AtomicU64::new(u64::MAX));
    let (r, t) = (Arc::clone(&received), Arc::clone(&target));
    // A big receive buffer when allowed (root), else a window of one maximal datagram.
    let window = match rustix::net::sockopt::set_socket_recv_buffer_size_force(&socket, 8 << 20) {
        Ok(()) => 1 << 20,
        Err(_) => 64 << 10,
    };
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
        let start = Instant::now();
        while sent.saturating_sub(self.received.load(Ordering::Acquire)) > self.window {
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
}

/// A veth pair whose receiving end drops every frame in a native XDP program (attached while the
/// returned link lives), and a UDP socket in the sending namespace connected across it.
pub fn xdp_drop_sink(v6: bool) -> (testnet::VethPair, zcnet::xdp::XdpLink, UdpSocket) {
    use std::net::{IpAddr, SocketAddr};
    use zcnet::xdp::{AttachMode, XdpProgram};
    let pair = testnet::VethPair::new(testnet::VethConfig::default()).expect("veth pair");
    let link = pair
        .b
        .run(|| XdpProgram::drop_all()?.attach_to(&pair.b_if, AttachMode::Driver))
        .expect("attach the XDP drop program");
    // The drop program also drops ARP and neighbour discovery: resolve the peer statically.
    pair.pin_b_neighbours().unwrap();
    let (src, dst): (IpAddr, IpAddr) = if v6 {
        (pair.a_v6.into(), pair.b_v6.into())
    } else {
        (pair.a_v4.into(), pair.b_v4.into())
    };
    let socket = pair.a.run(|| UdpSocket::bind((src, 0))).unwrap();
    socket.connect(SocketAddr::new(dst, 9)).unwrap();
    (pair, link, socket)
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
