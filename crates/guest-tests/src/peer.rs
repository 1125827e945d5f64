//! The host-side peer of the virtio-net run: runs in the harness's namespace on the host end of the tap,
//! receives the guest's TCP and UDP streams, checks every byte against the pattern and answers the guest
//! with what it verified. Its PASS/FAIL lines go into the harness's verdict beside the guest's.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::outcome::Outcome;
use crate::{pattern, wire};

/// How long the peer waits for stragglers of a UDP stream after the last datagram arrived.
const UDP_IDLE: Duration = Duration::from_secs(1);
/// Size of the burst datagrams (UDP payload, header included).
pub const BURST_DATAGRAM: usize = 1024;
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
    fn record(&mut self, seq: u64, intact: bool) {
        self.last = Some(Instant::now());
        if seq >= 1 << 24 || !intact {
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
type Burst = thread::JoinHandle<anyhow::Result<u64>>;

/// Datagrams of a burst: sent in groups of [`BURST_GROUP`], one group every [`BURST_GAP`], a rate an
/// emulated guest keeps up with.
const BURST_GROUP: u64 = 8;
const BURST_GAP: Duration = Duration::from_millis(4);

/// Runs the peer on `listen` until the guest sends `Quit` or `max` passes; returns the failures it saw.
pub fn run(listen: IpAddr, max: Duration) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new("peer");
    let listener = TcpListener::bind(SocketAddr::new(listen, wire::TCP_PORT))
        .with_context(|| format!("bind TCP {listen}:{}", wire::TCP_PORT))?;
    let udp = UdpSocket::bind(SocketAddr::new(listen, wire::UDP_PORT))
        .with_context(|| format!("bind UDP {listen}:{}", wire::UDP_PORT))?;
    // A deep receive queue: the peer must not drop what a burst of the guest's sender delivers.
    rustix::net::sockopt::set_socket_recv_buffer_size(&udp, 8 << 20)
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
    let mut burst = None;
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
        match serve(conn, &streams, &mut burst, &mut outcome) {
            Ok(q) => quit = q,
            Err(e) => outcome.fail("connection", &format!("{e:#}")),
        }
        if let Some(done) = burst.take_if(|b| b.is_finished()) {
            finish_burst(done, &mut outcome);
        }
    }
    if let Some(running) = burst {
        finish_burst(running, &mut outcome);
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
        match wire::check_datagram(&buf[..n]) {
            Some(d) => streams.entry(d.stream).or_default().record(d.seq, d.intact),
            None => streams.entry(u32::MAX).or_default().corrupt += 1,
        }
    }
    Ok(())
}

/// Serves one connection; returns whether the guest asked the peer to quit.
fn serve(
    mut conn: TcpStream,
    streams: &Streams,
    burst: &mut Option<Burst>,
    outcome: &mut Outcome,
) -> anyhow::Result<bool> {
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
        wire::Request::Burst { stream, datagrams } => {
            wire::write_answer(&mut conn, 0, 0)?;
            let guest = conn.peer_addr()?.ip();
            let send = move || send_burst(guest, stream, datagrams, BURST_DATAGRAM);
            *burst = Some(thread::spawn(send));
        }
        wire::Request::JumboBurst { stream, datagrams } => {
            wire::write_answer(&mut conn, 0, 0)?;
            let guest = conn.peer_addr()?.ip();
            let send = move || send_burst(guest, stream, datagrams, wire::JUMBO_DATAGRAM);
            *burst = Some(thread::spawn(send));
        }
        wire::Request::TcpSend { bytes } => {
            let sent = send_pattern(&mut conn, bytes, None);
            let what = match &sent {
                Ok(()) => {
                    format!("{bytes} bytes of pattern sent to the guest (the guest verifies them)")
                }
                Err(e) => format!("sending {bytes} bytes to the guest: {e}"),
            };
            outcome.check("tcp-tx", sent.is_ok(), &what);
        }
        wire::Request::Quit => return Ok(true),
    }
    Ok(false)
}

/// Writes `bytes` of pattern on `conn` (when `pace` is given: after waiting 20 paces, pausing one
/// pace after each 64 KiB, so that a receiver waits for each piece), then shuts its sending side
/// down.
pub fn send_pattern(
    conn: &mut TcpStream,
    bytes: u64,
    pace: Option<Duration>,
) -> std::io::Result<()> {
    if let Some(pace) = pace {
        thread::sleep(pace * 20);
    }
    let mut buf = vec![0u8; if pace.is_some() { 64 << 10 } else { 256 << 10 }];
    let mut at = 0u64;
    while at < bytes {
        let n = buf.len().min((bytes - at) as usize);
        pattern::fill(&mut buf[..n], at);
        conn.write_all(&buf[..n])?;
        at += n as u64;
        if let Some(pace) = pace {
            thread::sleep(pace);
        }
    }
    conn.shutdown(std::net::Shutdown::Write)
}

fn finish_burst(burst: Burst, outcome: &mut Outcome) {
    match burst.join().expect("burst thread panicked") {
        Ok(sent) => outcome.check(
            "burst",
            true,
            &format!("{sent} datagrams sent to the guest (the guest verifies them)"),
        ),
        Err(e) => outcome.fail("burst", &format!("{e:#}")),
    }
}

/// Sends a paced burst of pattern datagrams of `size` bytes to the guest's [`wire::BURST_PORT`];
/// returns how many.
fn send_burst(guest: IpAddr, stream: u32, datagrams: u64, size: usize) -> anyhow::Result<u64> {
    let udp = UdpSocket::bind(SocketAddr::new(guest_side_any(guest), 0))
        .context("bind the burst socket")?;
    udp.connect(SocketAddr::new(guest, wire::BURST_PORT))
        .context("connect the burst socket")?;
    thread::sleep(Duration::from_secs(1));
    let mut buf = vec![0u8; size];
    for seq in 0..datagrams {
        wire::fill_datagram(&mut buf, stream, seq);
        udp.send(&buf)
            .with_context(|| format!("send burst datagram {seq}"))?;
        if seq % BURST_GROUP == BURST_GROUP - 1 {
            thread::sleep(BURST_GAP);
        }
    }
    Ok(datagrams)
}

/// The unspecified address of `guest`'s family.
fn guest_side_any(guest: IpAddr) -> IpAddr {
    match guest {
        IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    }
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
