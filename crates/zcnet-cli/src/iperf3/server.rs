//! `zcnet iperf3 -s`: serves stock `iperf3 -c` clients one test at a time, as iperf3's server does.
//! A connection that comes while a test runs is answered "busy" (`ACCESS_DENIED`) and closed, unless
//! it is a stream of the test (it brings the test's cookie while the streams are being opened). A
//! test the client aborts or breaks — killed mid-test, a bad cookie, a malformed or outsized
//! parameter block — ends with a line saying why, and the server goes on serving.
//!
//! Kernel behaviour relied on: UDP sockets bound to one address with `SO_REUSEADDR` may coexist, and
//! a datagram goes to the one connected to its sender before the unconnected one, so each UDP stream
//! is a socket connected to its client while a fresh one on the same port waits for the next (as
//! iperf3's server does it).

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rustix::event::{PollFd, PollFlags, Timespec, poll};

use super::proto::{
    self, COOKIE_LEN, Cookie, MAX_PARAMS, MAX_RESULTS, Params, Received, Results, ServerError,
    State, UDP_CONNECT_REPLY,
};
use super::run::{Output, Test, start_json, stream_roles};
use super::streams::{Socket, Zc};
use super::{UDP_BLOCK, check_params, readable, spec_of, tune, udp_socket};
use crate::live::interrupted;
use crate::report::emit;

/// The longest the server waits for each message of the protocol outside the test itself.
const CONTROL_WAIT: Duration = Duration::from_secs(10);
/// The longest it waits for the client to open every stream.
const STREAMS_WAIT: Duration = Duration::from_secs(10);
/// The longest a connection may take to bring its cookie while the streams are opened.
const COOKIE_WAIT: Duration = Duration::from_secs(2);
/// What iperf3's server adds to a test's time before it gives up on the client's end of it.
const GRACE: Duration = Duration::from_secs(40);
/// How long the receivers may take to get the bytes the client says it sent.
const DRAIN_WAIT: Duration = Duration::from_secs(5);

/// Serves tests on `port` until Ctrl-C (or after one, with `one_off`).
pub fn serve(port: u16, one_off: bool, zc: Zc, out: Output) -> Result<()> {
    let any = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port);
    let listener = TcpListener::bind(any)
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .with_context(|| format!("listening on port {port}"))?;
    listener.set_nonblocking(true)?;
    let line = format!(
        "zcnet iperf3: server listening on {}\n",
        listener.local_addr()?.port()
    );
    if out.json {
        eprint!("{line}");
    } else {
        emit(&line);
    }
    let mut next: Option<NextClient> = None;
    loop {
        if interrupted() {
            return Ok(());
        }
        let (ctrl, peer, cookie) = match next.take() {
            Some(n) => (n.ctrl, n.peer, Some(n.cookie)),
            None => match accept(&listener, Duration::from_millis(100)) {
                Some((ctrl, peer)) => (ctrl, peer, None),
                None => continue,
            },
        };
        if let Err(e) = test(&listener, (ctrl, peer, cookie), zc, out) {
            match e.downcast::<NextClient>() {
                Ok(n) => {
                    eprintln!("zcnet iperf3: the test from {peer} ended: {}", n.why);
                    next = Some(n);
                }
                Err(e) => eprintln!("zcnet iperf3: the test from {peer} ended: {e:#}"),
            }
        }
        if one_off {
            return Ok(());
        }
    }
}

/// A connection that came while a test's streams were being opened, with another cookie, after the
/// test's client left: the control connection of the next test, its cookie read.
#[derive(Debug)]
struct NextClient {
    ctrl: TcpStream,
    peer: SocketAddr,
    cookie: Cookie,
    /// Why the test it interrupted ended.
    why: String,
}

impl std::fmt::Display for NextClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

impl std::error::Error for NextClient {}

/// The next connection, waiting at most `wait`.
fn accept(listener: &TcpListener, wait: Duration) -> Option<(TcpStream, SocketAddr)> {
    let t = Timespec::try_from(wait).ok()?;
    let mut fds = [PollFd::new(listener, PollFlags::IN)];
    if poll(&mut fds, Some(&t)).ok()? == 0 {
        return None;
    }
    let (s, peer) = listener.accept().ok()?;
    s.set_nonblocking(false).ok()?;
    Some((s, peer))
}

/// Answers "busy" to every connection waiting on the listener.
fn deny_waiting(listener: &TcpListener) {
    while let Some((s, peer)) = accept(listener, Duration::ZERO) {
        deny(s, peer);
    }
}

fn deny(mut s: TcpStream, peer: SocketAddr) {
    let _ = State::AccessDenied.write(&mut s);
    eprintln!("zcnet iperf3: {peer} answered busy (a test is running)");
}

/// Runs one test on the control connection `ctrl` from `peer` (whose cookie may have been read).
fn test(
    listener: &TcpListener,
    (mut ctrl, peer, cookie): (TcpStream, SocketAddr, Option<Cookie>),
    zc: Zc,
    out: Output,
) -> Result<()> {
    ctrl.set_nodelay(true)?;
    ctrl.set_read_timeout(Some(CONTROL_WAIT))?;
    let cookie = match cookie {
        Some(c) => c,
        None => Cookie::read(&mut ctrl).context("reading the cookie")?,
    };
    State::ParamExchange.write(&mut ctrl)?;
    let params: Params = match proto::read_json(&mut ctrl, MAX_PARAMS) {
        Ok(p) => p,
        Err(e) => {
            let _ = proto::write_server_error(&mut ctrl, ServerError::RecvParams, 0);
            bail!("its parameter block: {e}");
        }
    };
    if let Err(why) = check_params(&params) {
        let _ = proto::write_server_error(&mut ctrl, ServerError::RecvParams, libc::EINVAL);
        bail!("refused: {why}");
    }
    let spec = spec_of(&params, UDP_BLOCK);
    let mut test = Test::new(params.clone(), (spec, zc), out, true);
    let local = ctrl.local_addr()?;
    let udp = if spec.udp {
        match udp_socket(local) {
            Ok(s) => Some(s),
            Err(e) => {
                let _ = proto::write_server_error(
                    &mut ctrl,
                    ServerError::Listen,
                    e.raw_os_error().unwrap_or(0),
                );
                bail!("binding the UDP port {local}: {e}");
            }
        }
    } else {
        None
    };
    State::CreateStreams.write(&mut ctrl)?;
    let deadline = Instant::now() + STREAMS_WAIT;
    let (window, mss) = (params.window.map(|w| w as usize), params.mss);
    let mut udp = udp;
    for sender in stream_roles(&params, false) {
        let socket = match udp.take() {
            Some(listening) => {
                let (stream, next) = accept_udp(listening, (local, &ctrl), deadline, window)?;
                udp = Some(next);
                Socket::Udp(stream)
            }
            None => Socket::Tcp(accept_tcp(
                (listener, &ctrl),
                &cookie,
                deadline,
                (window, mss),
            )?),
        };
        test.add(sender, socket)?;
    }
    drop(udp);
    test.start_json = start_json(&test, &cookie, ("accepted_connection", peer));
    test.start_receivers();
    State::TestStart.write(&mut ctrl)?;
    State::TestRunning.write(&mut ctrl)?;
    test.begin();
    let give_up =
        Instant::now() + Duration::from_secs(u64::from(params.time + params.omit)) + GRACE;
    loop {
        let wait = test.tick();
        deny_waiting(listener);
        if interrupted() {
            let _ = State::ServerTerminate.write(&mut ctrl);
            bail!("Ctrl-C");
        }
        if Instant::now() > give_up {
            bail!(
                "no end of the test from the client {} s after its time",
                GRACE.as_secs()
            );
        }
        if !readable(&ctrl, wait)? {
            continue;
        }
        match proto::read_state(&mut ctrl) {
            Ok(Received::State(State::TestEnd)) => break,
            Ok(Received::State(State::ClientTerminate)) => bail!("the client terminated the test"),
            Ok(other) => bail!("the client sent {other:?} during the test"),
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                bail!("the client closed the control connection mid-test")
            }
            Err(e) => bail!("reading the control connection: {e}"),
        }
    }
    test.stop_senders();
    State::ExchangeResults.write(&mut ctrl)?;
    let theirs: Results = proto::read_json(&mut ctrl, MAX_RESULTS)
        .map_err(|e| anyhow::anyhow!("the client's results: {e}"))?;
    test.finish_receivers(&theirs, DRAIN_WAIT);
    proto::write_json(&mut ctrl, &test.results())?;
    State::DisplayResults.write(&mut ctrl)?;
    let done = proto::read_state(&mut ctrl);
    let report = test.report(&theirs, None);
    test.print(&report);
    let failures = test.failures();
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    match done {
        Ok(Received::State(State::IperfDone)) => Ok(()),
        Ok(other) => bail!("the client ended with {other:?} rather than IPERF_DONE"),
        Err(e) => bail!("waiting for the client's IPERF_DONE: {e}"),
    }
}

/// The next TCP stream of the test: a connection that brings `cookie`. Any other is answered busy.
fn accept_tcp(
    (listener, ctrl): (&TcpListener, &TcpStream),
    cookie: &Cookie,
    deadline: Instant,
    (window, mss): (Option<usize>, Option<u32>),
) -> Result<TcpStream> {
    loop {
        let left = opening(ctrl, deadline)?;
        let Some((mut s, peer)) = accept(listener, left.min(Duration::from_millis(100))) else {
            continue;
        };
        s.set_read_timeout(Some(COOKIE_WAIT))?;
        let mut theirs = [0u8; COOKIE_LEN];
        match std::io::Read::read_exact(&mut s, &mut theirs) {
            Ok(()) if theirs == cookie.0 => {
                s.set_read_timeout(None)?;
                tune(&s, window, mss).context("setting -w/-M on a stream")?;
                return Ok(s);
            }
            Ok(()) => match opening(ctrl, deadline) {
                Ok(_) => deny(s, peer),
                Err(why) => {
                    return Err(NextClient {
                        ctrl: s,
                        peer,
                        cookie: Cookie(theirs),
                        why: format!("{why:#}"),
                    }
                    .into());
                }
            },
            Err(_) => deny(s, peer),
        }
    }
}

/// The time left to open the streams; fails once it is over, or when the client spoke or closed the
/// control connection meanwhile (it has nothing to say until the test starts).
fn opening(ctrl: &TcpStream, deadline: Instant) -> Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        bail!(
            "the client did not open its streams within {} s",
            STREAMS_WAIT.as_secs()
        );
    }
    if readable(ctrl, Duration::ZERO)? {
        let mut b = [0u8; 1];
        match ctrl.peek(&mut b) {
            Ok(0) => bail!("the client closed the control connection while opening its streams"),
            Ok(_) => bail!("the client spoke while its streams were being opened"),
            Err(e) => bail!("reading the control connection: {e}"),
        }
    }
    Ok(left)
}

/// The next UDP stream: the listening socket takes the client's first datagram, connects to its
/// sender and answers; a new socket on the same address listens for the next stream.
fn accept_udp(
    listening: std::net::UdpSocket,
    (local, ctrl): (SocketAddr, &TcpStream),
    deadline: Instant,
    window: Option<usize>,
) -> Result<(std::net::UdpSocket, std::net::UdpSocket)> {
    let mut hello = [0u8; 4];
    let peer = loop {
        let left = opening(ctrl, deadline)?;
        listening.set_read_timeout(Some(left.min(Duration::from_millis(100))))?;
        match listening.recv_from(&mut hello) {
            Ok((_, peer)) => break peer,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => bail!("waiting for the client's UDP stream: {e}"),
        }
    };
    listening.connect(peer)?;
    listening.set_read_timeout(None)?;
    tune(&listening, window, None).context("setting -w on a UDP stream")?;
    let next = udp_socket(local).context("binding the next UDP stream")?;
    listening.send(&UDP_CONNECT_REPLY.to_ne_bytes())?;
    Ok((listening, next))
}
