//! zcrx through the broker: this process runs a [`Broker`] as root that registers device-less zcrx
//! instances, and a worker — this binary again, as uid 65534 with no capabilities — refused zcrx of
//! its own (`EPERM`) receives a whole stream through the instance the broker hands it, every byte
//! checked; a worker killed mid-stream releases its instance (the broker logs it and keeps no
//! ring), and a request for what the broker does not allow is refused by name.

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Mutex;
use std::sync::mpsc::{self, Receiver as Events};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;
use zcnet::rx::{ChunkKind, Receiver, RxConfig, RxPath, ZcrxBind, ZcrxConfig};
use zcnet::xdp::{Broker, BrokerClient, BrokerConfig, BrokerError, BrokerEvent as Event, Refusal};

use crate::outcome::Outcome;
use crate::{pattern, peer};

/// The worker's uid and gid.
const NOBODY: u32 = 65534;
/// Bytes of the stream a worker receives.
const STREAM: u64 = 8 << 20;
/// Area of the instances the worker asks for.
const AREA: usize = 1 << 20;

pub fn run(out: &mut Outcome) -> anyhow::Result<()> {
    let path = std::env::temp_dir().join(format!("zcnet-zcrx-broker-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let rings_before = io_uring_fds()?;
    let mut config = BrokerConfig::new(Vec::new());
    config.uids = vec![NOBODY, 0];
    config.zcrx = vec![ZcrxBind::NoDevice];
    let broker = Broker::bind(&path, config).context("bind the broker")?;
    let (tx, events) = mpsc::channel();
    let tx = Mutex::new(tx);
    thread::spawn(move || {
        broker.serve(move |e| {
            let _ = tx.lock().map(|tx| tx.send(e.clone()));
        })
    });
    whole_stream(out, &path, &events)?;
    killed_worker(out, &path, &events)?;
    let refused = BrokerClient::new(&path).open_zcrx(&ZcrxConfig::queue("lo", 0));
    match refused {
        Err(BrokerError::Refused(r @ Refusal::ZcrxNotAllowed(_))) => {
            out.check("broker-not-allowed", true, &format!("lo queue 0: {r}"));
        }
        other => out.fail("broker-not-allowed", &format!("{other:?}")),
    }
    let _ = next_event(&events);
    let rings_after = io_uring_fds()?;
    out.check(
        "broker-keeps-no-ring",
        rings_after == rings_before,
        &format!(
            "io_uring descriptors of the broker's process: {rings_before} before, {rings_after} \
             after its workers ended"
        ),
    );
    let _ = std::fs::remove_file(&path);
    Ok(())
}

/// A worker receives a whole stream through its granted instance.
fn whole_stream(out: &mut Outcome, path: &Path, events: &Events<Event>) -> anyhow::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let mut worker = spawn_worker(path, listener.local_addr()?)?;
    let conn = accept_worker(&listener, &mut worker)?;
    let stdout = worker.stdout.take().context("worker stdout")?;
    let sender = thread::spawn(move || peer::send_pattern(&mut { conn }, STREAM, None));
    let lines: Vec<String> = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .collect();
    let status = worker.wait()?;
    let sent = sender.join().expect("sender thread");
    for line in lines.iter().filter(|l| l.starts_with("own-zcrx")) {
        out.check(
            "broker-worker-unprivileged",
            line.contains("NotPermitted"),
            line,
        );
    }
    let received = lines.iter().find(|l| l.starts_with("received"));
    out.check(
        "broker-worker-stream",
        status.success()
            && sent.is_ok()
            && received.is_some_and(|l| {
                l.contains(&format!("received {STREAM} bytes, 0 mismatched, 0 chunks"))
            }),
        &format!("worker uid {NOBODY} exited {status}: {}", lines.join(" | ")),
    );
    let granted = next_event(events);
    let released = next_event(events);
    out.check(
        "broker-worker-log",
        matches!(
            &granted,
            Some(Event::GrantedZcrx {
                peer: (_, NOBODY, _),
                ..
            })
        ) && matches!(&released, Some(Event::ReleasedZcrx { .. })),
        &format!(
            "{} / {}",
            granted.map_or("no event".into(), |e| e.to_string()),
            released.map_or("no event".into(), |e| e.to_string())
        ),
    );
    Ok(())
}

/// A worker killed with SIGKILL while it receives: the broker logs the release.
fn killed_worker(out: &mut Outcome, path: &Path, events: &Events<Event>) -> anyhow::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let mut worker = spawn_worker(path, listener.local_addr()?)?;
    let conn = accept_worker(&listener, &mut worker)?;
    let sender = thread::spawn(move || {
        peer::send_pattern(&mut { conn }, 1 << 40, Some(Duration::from_millis(1)))
    });
    let granted = next_event(events);
    thread::sleep(Duration::from_millis(500));
    worker.kill()?;
    let status = worker.wait()?;
    let released = next_event(events);
    let _ = sender.join();
    out.check(
        "broker-worker-killed",
        matches!(granted, Some(Event::GrantedZcrx { .. }))
            && matches!(released, Some(Event::ReleasedZcrx { .. })),
        &format!(
            "worker {status}; broker: {}",
            released.map_or("no release logged".into(), |e| e.to_string())
        ),
    );
    Ok(())
}

fn next_event(events: &Events<Event>) -> Option<Event> {
    events.recv_timeout(Duration::from_secs(60)).ok()
}

/// The worker's connection to `listener`; an error with what the worker printed when it ends
/// first or does not connect within a minute.
fn accept_worker(listener: &TcpListener, worker: &mut Child) -> anyhow::Result<TcpStream> {
    listener.set_nonblocking(true)?;
    let start = Instant::now();
    loop {
        match listener.accept() {
            Ok((conn, _)) => {
                conn.set_nonblocking(false)?;
                return Ok(conn);
            }
            Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => return Err(e.into()),
            Err(_) => {}
        }
        let ended = worker.try_wait()?;
        if ended.is_some() || start.elapsed() > Duration::from_secs(60) {
            if ended.is_none() {
                worker.kill()?;
                worker.wait()?;
            }
            let mut printed = String::new();
            if let Some(mut stdout) = worker.stdout.take() {
                stdout.read_to_string(&mut printed)?;
            }
            anyhow::bail!("the worker did not connect ({ended:?}): {printed}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// This binary as a worker, as uid and gid 65534 (with no supplementary groups: a process run as
/// root drops them when it sets the uid) and so with no capability.
fn spawn_worker(broker: &Path, connect: SocketAddr) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("current_exe")?;
    let mut cmd = Command::new(exe);
    cmd.args(["zcrx-worker", "--broker"])
        .arg(broker)
        .args(["--connect", &connect.to_string()])
        .stdout(Stdio::piped())
        .uid(NOBODY)
        .gid(NOBODY);
    cmd.spawn().context("spawn the worker")
}

/// The number of io_uring descriptors this process holds.
fn io_uring_fds() -> anyhow::Result<usize> {
    let mut count = 0;
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let link = std::fs::read_link(entry?.path()).unwrap_or_default();
        count += usize::from(link.as_os_str() == "anon_inode:[io_uring]");
    }
    Ok(count)
}

/// The worker: shows that zcrx of its own is refused, takes an instance from the broker at
/// `broker`, connects to `connect` and receives through it until the stream ends (or it is
/// killed), checking every byte against the pattern and printing what it got.
pub fn worker(broker: &Path, connect: SocketAddr) -> ExitCode {
    match receive_granted(broker, connect) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn receive_granted(broker: &Path, connect: SocketAddr) -> anyhow::Result<()> {
    let config = ZcrxConfig::no_device().with_area_len(AREA);
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let own = TcpStream::connect(listener.local_addr()?)?;
    match Receiver::new(
        own,
        RxConfig::default().with_path(RxPath::Zcrx(config.clone())),
    ) {
        Err(e) => println!("own-zcrx refused: {e} [{:?}]", e.zcrx_refusal()),
        Ok(_) => println!("own-zcrx taken by the kernel"),
    }
    let grant = BrokerClient::new(broker)
        .open_zcrx(&config)
        .context("ask the broker")?;
    println!("grant: {grant:?}");
    let stream = TcpStream::connect(connect).context("connect to the sender")?;
    let mut rx = Receiver::with_zcrx_grant(stream, RxConfig::default(), grant)?;
    let (mut got, mut mismatched, mut not_zcrx) = (0u64, 0u64, 0u64);
    while let Some(chunk) = rx.recv()? {
        mismatched += pattern::mismatches(&chunk, got);
        not_zcrx += u64::from(chunk.kind() != ChunkKind::Zcrx);
        got += chunk.len() as u64;
    }
    let stats = rx.stats();
    println!(
        "received {got} bytes, {mismatched} mismatched, {not_zcrx} chunks not from the area; \
         kernel copy_bytes {}, area exhausted {} times",
        stats.zcrx_copied_bytes, stats.zcrx_exhausted
    );
    Ok(())
}
