//! `zcnet iperf3 -c HOST`: runs a test against a stock `iperf3 -s`. The client decides when the test
//! ends (`-t`, `-n`, `-k`), as iperf3's does; its receiving streams are read to their end (the server
//! closes them before the results) so that they count every byte the server sent.

use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rustix::net::{AddressFamily, SocketType, connect, socket};

use super::proto::{
    self, Cookie, LEGACY_UDP_CONNECT_REPLY, MAX_RESULTS, Params, Received, Results, State,
    UDP_CONNECT_MSG, UDP_CONNECT_REPLY,
};
use super::run::{Output, Test, start_json, stream_roles};
use super::streams::{Socket, Zc};
use super::{MAX_DATAGRAM, MIN_DATAGRAM, UDP_BLOCK, readable, spec_of, tune, udp_socket};
use crate::live::interrupted;

/// The longest the client waits for each message of the server outside the test itself.
const CONTROL_WAIT: Duration = Duration::from_secs(30);
/// The longest a UDP stream waits for the server's answer.
const UDP_WAIT: Duration = Duration::from_secs(10);
/// How long the receivers may take to reach the end of their streams.
const DRAIN_WAIT: Duration = Duration::from_secs(5);
/// Datagrams a reverse UDP stream may see before the server's answer (iperf3 allows the same).
const EARLY_DATAGRAMS: usize = 2;

/// Runs one test against the iperf3 server at `host`:`port`.
pub fn run(
    host: &str,
    port: u16,
    mut params: Params,
    zc: Zc,
    out: Output,
    (window, mss): (Option<usize>, Option<u32>),
) -> Result<()> {
    let addr = (host, port)
        .to_socket_addrs()
        .with_context(|| format!("resolving {host}"))?
        .next()
        .with_context(|| format!("{host} has no address"))?;
    let mut ctrl = TcpStream::connect_timeout(&addr, CONTROL_WAIT)
        .with_context(|| format!("connecting to {addr}"))?;
    ctrl.set_nodelay(true)?;
    ctrl.set_read_timeout(Some(CONTROL_WAIT))?;
    let cookie = Cookie::random()?;
    ctrl.write_all(&cookie.0)?;
    if params.is_udp() && params.len.is_none() {
        let mss =
            zcnet::rx::sender::current_mss(rustix::fd::AsFd::as_fd(&ctrl)).unwrap_or(UDP_BLOCK);
        params.len = Some(mss.clamp(MIN_DATAGRAM, MAX_DATAGRAM) as u32);
    }
    expect(&mut ctrl, State::ParamExchange)?;
    proto::write_json(&mut ctrl, &params)?;
    expect(&mut ctrl, State::CreateStreams)?;
    let spec = spec_of(&params, UDP_BLOCK);
    let mut test = Test::new(params.clone(), (spec, zc), out, false);
    for sender in stream_roles(&params, true) {
        let socket = if spec.udp {
            Socket::Udp(connect_udp(addr, window, !sender)?)
        } else {
            Socket::Tcp(connect_tcp(addr, &cookie, (window, mss))?)
        };
        test.add(sender, socket)?;
    }
    test.start_json = start_json(&test, &cookie, ("connecting_to", addr));
    test.start_receivers();
    expect(&mut ctrl, State::TestStart)?;
    expect(&mut ctrl, State::TestRunning)?;
    test.begin();
    loop {
        let wait = test.tick();
        let counted = test.params.time == 0 && (test.senders_done() || test.received_enough());
        if test.time_is_up() || counted {
            break;
        }
        if interrupted() {
            let _ = State::ClientTerminate.write(&mut ctrl);
            bail!("Ctrl-C");
        }
        if readable(&ctrl, wait)? {
            match proto::read_state(&mut ctrl) {
                Ok(Received::State(State::ServerTerminate)) => {
                    bail!("the server terminated the test")
                }
                Ok(other) => bail!("the server sent {other:?} during the test"),
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                    bail!("the server closed the control connection mid-test")
                }
                Err(e) => bail!("reading the control connection: {e}"),
            }
        }
    }
    test.stop_senders();
    State::TestEnd.write(&mut ctrl)?;
    expect(&mut ctrl, State::ExchangeResults)?;
    test.drain_receivers(DRAIN_WAIT);
    proto::write_json(&mut ctrl, &test.results())?;
    let theirs: Results = proto::read_json(&mut ctrl, MAX_RESULTS)
        .map_err(|e| anyhow::anyhow!("the server's results: {e}"))?;
    expect(&mut ctrl, State::DisplayResults)?;
    State::IperfDone.write(&mut ctrl)?;
    let report = test.report(&theirs, None);
    test.print(&report);
    let failures = test.failures();
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    Ok(())
}

/// Reads the next state byte and fails unless it is `want`, saying what the server meant instead.
fn expect(ctrl: &mut TcpStream, want: State) -> Result<()> {
    match proto::read_state(ctrl) {
        Ok(Received::State(s)) if s == want => Ok(()),
        Ok(Received::State(State::AccessDenied)) => {
            bail!("the server is busy running a test (it answered ACCESS_DENIED)")
        }
        Ok(Received::State(State::ServerError)) => {
            let (error, errno) = proto::read_server_error(ctrl)?;
            bail!("the server could not run the test: iperf3 error {error}, errno {errno}")
        }
        Ok(Received::State(State::ServerTerminate)) => bail!("the server terminated the test"),
        Ok(other) => bail!("expected {want:?} from the server, got {other:?}"),
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
            bail!("the server closed the control connection while zcnet waited for {want:?}")
        }
        Err(e) => bail!("waiting for {want:?} from the server: {e}"),
    }
}

/// A TCP stream to the server with `-w`/`-M` set before it connects, its cookie sent.
fn connect_tcp(
    addr: SocketAddr,
    cookie: &Cookie,
    (window, mss): (Option<usize>, Option<u32>),
) -> Result<TcpStream> {
    let family = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let fd = socket(family, SocketType::STREAM, None)?;
    tune(&fd, window, mss).context("setting -w/-M on a stream")?;
    connect(&fd, &addr).with_context(|| format!("opening a stream to {addr}"))?;
    let mut s = TcpStream::from(fd);
    s.write_all(&cookie.0)?;
    Ok(s)
}

/// A UDP stream to the server: says hello from a socket connected to the server's port and waits
/// for the answer (a receiving stream may see a few datagrams first).
fn connect_udp(addr: SocketAddr, window: Option<usize>, receiving: bool) -> Result<UdpSocket> {
    let any = if addr.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let s = udp_socket(any.parse().expect("an address"))?;
    s.connect(addr)?;
    tune(&s, window, None).context("setting -w on a UDP stream")?;
    s.send(&UDP_CONNECT_MSG.to_ne_bytes())?;
    s.set_read_timeout(Some(UDP_WAIT))?;
    let tries = if receiving { 1 + EARLY_DATAGRAMS } else { 1 };
    let mut buf = vec![0u8; 65_536];
    for _ in 0..tries {
        let n = s
            .recv(&mut buf)
            .context("waiting for the server's UDP answer")?;
        if n == 4 {
            let reply = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]);
            if reply == UDP_CONNECT_REPLY || reply == LEGACY_UDP_CONNECT_REPLY {
                s.set_read_timeout(None)?;
                return Ok(s);
            }
        }
    }
    bail!("the server did not answer the UDP stream's hello")
}
