//! The two endpoints of the Open vSwitch run: the host-side peer on the tap, which sends datagrams of
//! every checked length through the guest's switch and verifies each echo, floods while the switch
//! pauses, and ends the run; and the echo agent in a guest namespace behind the switch, which verifies
//! every datagram that reaches it and sends it back.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::outcome::Outcome;
use crate::ovs_wire::{
    self, BYE, DISCARD_PORT, DONE_PORT, ECHO_PORT, FLOOD, FRAME_LENGTHS, ROUNDS, SOURCE_PORT_BASE,
};

/// How long the peer waits for the guest's switch to answer the first datagram.
const FIRST_ANSWER: Duration = Duration::from_secs(300);
/// How long it waits for any later echo.
const ECHO_WAIT: Duration = Duration::from_secs(20);
/// Pause after the first phase, so that the switch sees its hits and stops reading.
const BEFORE_FLOOD: Duration = Duration::from_secs(4);
/// Pause after the flood, so that the switch sees the loss, drains its queue, and follows the
/// datapath's dispatch changed by a second client.
const AFTER_FLOOD: Duration = Duration::from_secs(20);

/// Sends datagram `seq` of `len` from `sock` and waits for its echo; true when it came back intact.
fn round_trip(
    sock: &UdpSocket,
    to: SocketAddr,
    len: usize,
    seq: u16,
    wait: Duration,
) -> anyhow::Result<bool> {
    let sent = ovs_wire::payload(len, seq);
    let mut buf = vec![0u8; 2048];
    let start = Instant::now();
    let mut resend = Instant::now();
    sock.send_to(&sent, to)?;
    while start.elapsed() < wait {
        // Before the switch runs (the guest still booting) the first datagram is resent.
        if seq == 0 && resend.elapsed() > Duration::from_secs(2) {
            sock.send_to(&sent, to)?;
            resend = Instant::now();
        }
        match sock.recv_from(&mut buf) {
            Ok((n, from)) if from == to => {
                if buf[..n] == sent[..] {
                    return Ok(true);
                }
                if ovs_wire::verify(&buf[..n]).is_none() {
                    return Ok(false);
                }
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(false)
}

/// The host-side peer: talks to the agent at `agent` from `listen`.
pub fn peer(listen: IpAddr, agent: IpAddr) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new("ovs-peer");
    let socks: Vec<UdpSocket> = (0..FRAME_LENGTHS.len())
        .map(|i| {
            let s = UdpSocket::bind(SocketAddr::new(listen, SOURCE_PORT_BASE + i as u16))?;
            s.set_read_timeout(Some(Duration::from_millis(200)))?;
            Ok(s)
        })
        .collect::<std::io::Result<_>>()
        .context("bind the peer's sockets")?;
    let echo = SocketAddr::new(agent, ECHO_PORT);
    let (mut intact, mut failed) = (0u32, Vec::new());
    let phase = |rounds: std::ops::Range<u16>,
                 intact: &mut u32,
                 failed: &mut Vec<String>|
     -> anyhow::Result<()> {
        for (sock, len) in socks.iter().zip(FRAME_LENGTHS) {
            for seq in rounds.clone() {
                let wait = if *intact == 0 {
                    FIRST_ANSWER
                } else {
                    ECHO_WAIT
                };
                if round_trip(sock, echo, len, seq, wait)? {
                    *intact += 1;
                } else {
                    failed.push(format!("{len}-byte #{seq}"));
                }
            }
        }
        Ok(())
    };
    phase(0..ROUNDS, &mut intact, &mut failed)?;
    println!("ovs-peer: first phase: {intact} echoes intact, failed {failed:?}");

    thread::sleep(BEFORE_FLOOD);
    let flood = UdpSocket::bind(SocketAddr::new(listen, 0))?;
    let big = ovs_wire::payload(1514, 0);
    let mut flooded = 0;
    for i in 0..FLOOD {
        if flood
            .send_to(&big, SocketAddr::new(agent, DISCARD_PORT))
            .is_ok()
        {
            flooded += 1;
        }
        if i % 64 == 63 {
            thread::sleep(Duration::from_millis(2));
        }
    }
    println!("ovs-peer: flooded {flooded} datagrams of 1514-byte frames");
    thread::sleep(AFTER_FLOOD);

    phase(ROUNDS..ROUNDS + 2, &mut intact, &mut failed)?;
    let expected = u32::from(ROUNDS + 2) * FRAME_LENGTHS.len() as u32;
    outcome.check(
        "both-directions",
        intact == expected && failed.is_empty(),
        &format!("{intact} of {expected} datagrams (frames of {FRAME_LENGTHS:?} bytes) echoed byte for byte; failed {failed:?}"),
    );

    let done = UdpSocket::bind(SocketAddr::new(listen, 0))?;
    done.set_read_timeout(Some(Duration::from_secs(1)))?;
    let mut bye = false;
    let mut buf = [0u8; 16];
    for _ in 0..30 {
        done.send_to(b"done", SocketAddr::new(agent, DONE_PORT))?;
        if let Ok((n, _)) = done.recv_from(&mut buf) {
            bye = &buf[..n] == BYE;
            break;
        }
    }
    outcome.check("end", bye, "the agent answered the final datagram");
    Ok(outcome)
}

/// The echo agent: answers on [`ECHO_PORT`] at `listen`, counts what arrives on the discard port, and
/// ends when the final datagram arrives (or after `max`).
pub fn echo(listen: IpAddr, max: Duration) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new("ovs-agent");
    let sock = UdpSocket::bind(SocketAddr::new(listen, ECHO_PORT)).context("bind the echo port")?;
    sock.set_read_timeout(Some(Duration::from_millis(100)))?;
    let done = UdpSocket::bind(SocketAddr::new(listen, DONE_PORT))?;
    done.set_nonblocking(true)?;
    let discard = UdpSocket::bind(SocketAddr::new(listen, DISCARD_PORT))?;
    discard.set_read_timeout(Some(Duration::from_millis(200)))?;
    let discarded = Arc::new(AtomicU64::new(0));
    {
        let discarded = discarded.clone();
        thread::spawn(move || {
            let mut buf = vec![0u8; 2048];
            loop {
                if discard.recv_from(&mut buf).is_ok() {
                    discarded.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    let (mut intact, mut corrupt) = (0u64, 0u64);
    let mut buf = vec![0u8; 2048];
    let start = Instant::now();
    let mut ended = false;
    while start.elapsed() < max && !ended {
        if let Ok((n, from)) = sock.recv_from(&mut buf) {
            if ovs_wire::verify(&buf[..n]).is_some() {
                intact += 1;
            } else {
                corrupt += 1;
            }
            sock.send_to(&buf[..n], from)?;
        }
        if let Ok((_, from)) = done.recv_from(&mut buf) {
            done.send_to(BYE, from)?;
            ended = true;
        }
    }
    let expected = u64::from(ROUNDS + 2) * FRAME_LENGTHS.len() as u64;
    outcome.check(
        "received",
        ended && corrupt == 0 && intact >= expected,
        &format!(
            "{intact} datagrams arrived intact (>= {expected} expected), {corrupt} corrupt, {} of the flood got through while the switch paused",
            discarded.load(Ordering::Relaxed)
        ),
    );
    Ok(outcome)
}
