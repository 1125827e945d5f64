//! The host-side peer of the virtio-net run: runs in the harness's namespace on the host end of the tap,
//! receives the guest's TCP and UDP streams, checks every byte against the pattern and answers the guest
//! with what it verified. Its PASS/FAIL lines go into the harness's verdict beside the guest's.

use std::collections::HashMap;
use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::outcome::Outcome;
use crate::{pattern, wire};

/// How long the peer waits for stragglers of a UDP stream after the last datagram arrived.
const UDP_IDLE: Duration = Duration::from_secs(1);
/// Upper bound on any wait for a UDP report, and the read timeout on TCP streams.
const PEER_WAIT: Duration = Duration::from_secs(20);

/// What arrived of one UDP stream.
#[derive(Debug, Default)]
struct UdpStream {
    received: u64,
    corrupt: u64,
    duplicates: u64,
    seen: Vec<u64>,
    last: Option<Instant>,
}

impl UdpStream {
    fn record(&mut self, seq: u64, payload: &[u8]) {
        self.last = Some(Instant::now());
        let offset = wire::datagram_offset(seq, payload.len());
        if seq >= 1 << 24 || pattern::mismatches(payload, offset) != 0 {
            self.corrupt += 1;
            return;
        }
        let (word, bit) = ((seq / 64) as usize, seq % 64);
        if self.seen.len() <= word {
            self.seen.resize(word + 1, 0);
        }
        if self.seen[word] & (1 << bit) != 0 {
            self.duplicates += 1;
        } else {
            self.seen[word] |= 1 << bit;
            self.received += 1;
        }
    }
}

type Streams = Arc<Mutex<HashMap<u32, UdpStream>>>;

/// Runs the peer on `listen` until the guest sends `Quit` or `max` passes; returns the failures it saw.
pub fn run(listen: IpAddr, max: Duration) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new("peer");
    let listener = TcpListener::bind(SocketAddr::new(listen, wire::TCP_PORT))
        .with_context(|| format!("bind TCP {listen}:{}", wire::TCP_PORT))?;
    let udp = UdpSocket::bind(SocketAddr::new(listen, wire::UDP_PORT))
        .with_context(|| format!("bind UDP {listen}:{}", wire::UDP_PORT))?;
    // A deep receive queue: the peer must not drop what a burst of the guest's sender delivers.
    zcnet::sys::socket::set_int_option(udp.as_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, 8 << 20)
        .context("SO_RCVBUF on the UDP socket")?;
    udp.set_read_timeout(Some(Duration::from_millis(200)))?;
    let streams: Streams = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let receiver = {
        let (streams, stop) = (streams.clone(), stop.clone());
        thread::spawn(move || receive_datagrams(&udp, &streams, &stop))
    };
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + max;
    println!(
        "peer: listening on {listen} tcp {} udp {}",
        wire::TCP_PORT,
        wire::UDP_PORT
    );
    let mut quit = false;
    while !quit && Instant::now() < deadline {
        let conn = match listener.accept() {
            Ok((conn, _)) => conn,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e) => return Err(e).context("accept on the peer's TCP port"),
        };
        conn.set_nonblocking(false)?;
        conn.set_read_timeout(Some(PEER_WAIT))?;
        match serve(conn, &streams, &mut outcome) {
            Ok(q) => quit = q,
            Err(e) => outcome.fail("connection", &format!("{e:#}")),
        }
    }
    stop.store(true, Ordering::Relaxed);
    receiver.join().expect("UDP receiver thread panicked")?;
    if !quit {
        outcome.fail("guest", &format!("no Quit from the guest within {max:?}"));
    }
    Ok(outcome)
}

fn receive_datagrams(udp: &UdpSocket, streams: &Streams, stop: &AtomicBool) -> anyhow::Result<()> {
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::Relaxed) {
        let n = match udp.recv(&mut buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) => return Err(e).context("recv on the peer's UDP socket"),
        };
        let mut streams = streams.lock().expect("stream table poisoned");
        match wire::datagram_header(&buf[..n]) {
            Some((stream, seq)) => streams
                .entry(stream)
                .or_default()
                .record(seq, &buf[wire::DATAGRAM_HEADER..n]),
            None => streams.entry(u32::MAX).or_default().corrupt += 1,
        }
    }
    Ok(())
}

/// Serves one connection; returns whether the guest asked the peer to quit.
fn serve(mut conn: TcpStream, streams: &Streams, outcome: &mut Outcome) -> anyhow::Result<bool> {
    let mut raw = [0u8; 24];
    conn.read_exact(&mut raw).context("read the request")?;
    let request =
        wire::Request::decode(&raw).context("the connection did not start with a request")?;
    match request {
        wire::Request::TcpStream { bytes } => {
            let (verified, errors) = verify_stream(&mut conn, bytes)?;
            wire::write_answer(&mut conn, verified, errors)?;
            let what = format!("{verified} of {bytes} bytes verified, {errors} data errors");
            outcome.check("tcp-rx", verified == bytes && errors == 0, &what);
        }
        wire::Request::UdpReport { stream, expected } => {
            let (received, corrupt, duplicates) = wait_for_stream(streams, stream, expected);
            wire::write_answer(&mut conn, received, corrupt + duplicates)?;
            let what = format!(
                "stream {stream}: {received} of {expected} datagrams verified, {corrupt} corrupt, \
                 {duplicates} duplicated, {} lost",
                expected.saturating_sub(received)
            );
            outcome.check(
                "udp-rx",
                received > 0 && corrupt == 0 && duplicates == 0,
                &what,
            );
        }
        wire::Request::Quit => return Ok(true),
    }
    Ok(false)
}

/// Reads `bytes` bytes of pattern; returns (bytes that matched, bytes that did not or never came).
fn verify_stream(conn: &mut TcpStream, bytes: u64) -> anyhow::Result<(u64, u64)> {
    let mut buf = vec![0u8; 1 << 20];
    let (mut at, mut bad) = (0u64, 0u64);
    while at < bytes {
        let want = buf.len().min((bytes - at) as usize);
        let n = conn.read(&mut buf[..want]).context("read the stream")?;
        if n == 0 {
            break;
        }
        bad += pattern::mismatches(&buf[..n], at);
        at += n as u64;
    }
    Ok((at - bad, bad + (bytes - at)))
}

/// Waits until every datagram of `stream` arrived, or none came for [`UDP_IDLE`]; returns
/// (received, corrupt, duplicated).
fn wait_for_stream(streams: &Streams, stream: u32, expected: u64) -> (u64, u64, u64) {
    let start = Instant::now();
    loop {
        {
            let table = streams.lock().expect("stream table poisoned");
            let garbage = table.get(&u32::MAX).map_or(0, |s| s.corrupt);
            let s = table.get(&stream);
            let (received, corrupt, duplicates) =
                s.map_or((0, 0, 0), |s| (s.received, s.corrupt, s.duplicates));
            let idle = s
                .and_then(|s| s.last)
                .is_none_or(|t| t.elapsed() > UDP_IDLE);
            let complete = received + corrupt >= expected;
            if complete || (idle && start.elapsed() > UDP_IDLE) || start.elapsed() > PEER_WAIT {
                return (received, corrupt + garbage, duplicates);
            }
        }
        thread::sleep(Duration::from_millis(50));
    }
}
