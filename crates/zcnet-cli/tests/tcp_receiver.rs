//! The TCP receivers of `zcnet bench tcp --listen` and `bench rx --listen` against hostile and broken
//! peers, over loopback: one live receiver of each takes a table of resets, garbage, malformed and
//! truncated headers, a truncated payload, a stream without its end mark or with a false one and a
//! silent peer, each followed by a real zcnet sender whose stream must verify; every hostile stream
//! ends with its own row saying how, and the receiver lives on to the end, where it fails naming the
//! streams asked to verify that did not. A real sender killed or interrupted midway is not whole.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::{ZCNET, json_rows, nft_usable, sigint, start_listener, stdout_of, u};
use serde_json::Value;
use testnet::{VethConfig, VethPair};

/// Longest wait for a row: every stream here ends within the idle timeout, far below this.
const ROW_WAIT: Duration = Duration::from_secs(30);

/// The receiver's idle timeout, in seconds.
const IDLE: &str = "2";

/// A `bench tcp|rx --listen` receiver on a loopback port and the rows it printed.
struct Receiver {
    child: Child,
    addr: SocketAddr,
    lines: mpsc::Receiver<String>,
    /// Rows read but not yet taken.
    pending: Vec<Value>,
}

impl Receiver {
    /// A receiver on a loopback port, with an idle timeout of [`IDLE`].
    fn start(bench: &str, extra: &[&str]) -> Receiver {
        let mut args = vec!["--idle-timeout", IDLE];
        args.extend(extra);
        Receiver::start_with(Command::new(ZCNET), bench, "127.0.0.1:0", &args)
    }

    /// A receiver started by `cmd` (this binary, perhaps in a namespace) on `addr`.
    fn start_with(mut cmd: Command, bench: &str, addr: &str, extra: &[&str]) -> Receiver {
        let (child, addr, stdout) = start_listener(
            cmd.args(["bench", bench, "--listen", addr, "--json"])
                .args(["--interval", "0"])
                .args(extra),
        );
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Receiver {
            child,
            addr,
            lines,
            pending: Vec::new(),
        }
    }

    /// The first row (read so far or to come) that `matches`, within [`ROW_WAIT`]; the receiver must
    /// still be running.
    fn row(&mut self, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        self.row_within(ROW_WAIT, what, matches)
    }

    /// [`Receiver::row`] within `wait`.
    fn row_within(
        &mut self,
        wait: Duration,
        what: &str,
        matches: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(i) = self.pending.iter().position(&matches) {
                return self.pending.remove(i);
            }
            assert!(
                self.child.try_wait().unwrap().is_none(),
                "the receiver exited while waiting for {what}; rows: {:?}",
                self.pending
            );
            let left = deadline.saturating_duration_since(Instant::now());
            match self
                .lines
                .recv_timeout(left.min(Duration::from_millis(200)))
            {
                Ok(line) => self.pending.extend(json_rows(&line)),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    assert!(
                        Instant::now() < deadline,
                        "no row for {what}: {:?}",
                        self.pending
                    )
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("the receiver's output ended waiting for {what}")
                }
            }
        }
    }

    /// The row of the stream from `peer`.
    fn row_of(&mut self, peer: SocketAddr) -> Value {
        let peer = peer.to_string();
        self.row(&peer.clone(), |r| r["peer"] == peer.as_str())
    }

    /// Runs a real zcnet sender against the receiver; its stream must arrive whole and verified.
    fn valid_stream(&mut self, bench: &str, after: &str) {
        let addr = self.addr.to_string();
        let mut cmd = Command::new(ZCNET);
        cmd.args(["bench", bench, "--connect", &addr, "--json"]);
        match bench {
            "tcp" => cmd.args(["--mode", "zerocopy", "--duration", "0.2"]),
            _ => cmd.args(["--mib", "4"]),
        };
        let sent = json_rows(&stdout_of(&mut cmd, "the sender"));
        let row = self.row(&format!("the valid stream after {after}"), |r| {
            r["zcnet_header"] == true && r["ended"] == "closed"
        });
        let want = match bench {
            "tcp" => u(&sent[0], "bytes"),
            _ => 4 << 20,
        };
        assert_eq!(u(&row, "bytes"), want, "after {after}: {row}");
        assert_eq!(row["complete"], true, "after {after}: {row}");
        assert_eq!(row["verified"], true, "after {after}: {row}");
        assert_eq!(row["data_errors"], 0, "after {after}: {row}");
    }

    /// Stops the receiver with Ctrl-C: it fails naming the streams asked to verify that did not.
    fn stop(mut self) {
        let (status, stderr) = self.interrupt();
        assert_eq!(status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("did not arrive whole"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }

    /// Sends Ctrl-C and waits for the receiver's exit; returns its status and standard error.
    fn interrupt(&mut self) -> (ExitStatus, String) {
        sigint(&self.child);
        let mut stderr = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        (self.child.wait().unwrap(), stderr)
    }

    /// The receiver's resident memory, in KiB (`VmRSS` of /proc/PID/status).
    fn resident_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap()
    }
}

impl Drop for Receiver {
    /// A test that failed midway leaves no receiver running: it is ours, stopped by its pid.
    fn drop(&mut self) {
        if self.child.try_wait().is_ok_and(|s| s.is_none()) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A zcnet header (crate::wire's layout): magic, bench, mode, verify, reserved, unit, duration in ms,
/// bytes announced.
fn header(bench: u8, mode: u8, unit: u32, bytes: u64) -> Vec<u8> {
    let mut b = b"ZCNETBH1".to_vec();
    b.extend([bench, mode, 1, 0]);
    b.extend(unit.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend(bytes.to_le_bytes());
    b
}

/// The header of a duration-bound stream (one second) that ends with its sender's end mark.
fn marked_header(bench: u8, unit: u32) -> Vec<u8> {
    let mut b = header(bench, 0, unit, 0);
    b[..8].copy_from_slice(b"ZCNETBH2");
    b[16..24].copy_from_slice(&1000u64.to_le_bytes());
    b
}

/// The end mark of a marked stream: magic, the payload bytes sent, 0 (its duration ran out).
fn end_mark(bytes: u64) -> Vec<u8> {
    let mut b = b"ZCNETSE1".to_vec();
    b.extend(bytes.to_le_bytes());
    b.extend([0; 8]);
    b
}

/// `n` bytes of the pattern of units of `unit` bytes.
fn pattern(n: usize, unit: usize) -> Vec<u8> {
    (0..n).map(|i| b'a' + ((i % unit) % 26) as u8).collect()
}

/// Ends `stream` with a reset (`SO_LINGER` 0, then close).
fn reset(stream: TcpStream) {
    rustix::net::sockopt::set_socket_linger(&stream, Some(Duration::ZERO)).unwrap();
    drop(stream);
}

/// A connection that sends `bytes`, then closes (reset when `rst`); returns its local address.
fn send_then_close(addr: SocketAddr, bytes: &[u8], rst: bool) -> SocketAddr {
    let mut s = TcpStream::connect(addr).unwrap();
    let local = s.local_addr().unwrap();
    s.write_all(bytes).unwrap();
    if rst {
        // Let the bytes be read first, so that the reset comes mid-stream.
        thread::sleep(Duration::from_millis(100));
        reset(s);
    }
    local
}

/// A hostile peer (it returns its local address) and what its stream's row must say: how it
/// ended, and words its reason contains.
struct Case<'a> {
    name: &'static str,
    hostile: Box<dyn Fn() -> SocketAddr + 'a>,
    ended: &'static str,
    reason: &'static str,
}

/// Every hostile case against one receiver of `bench`, each followed by a valid stream.
fn hostile_table(bench: &str, extra: &[&str]) {
    let mut rx = Receiver::start(bench, extra);
    let addr = rx.addr;
    let bench_byte = if bench == "tcp" { 1 } else { 3 };
    let unit = 4096usize;
    let announced = 1u64 << 20;
    let valid_head = header(bench_byte, 1, unit as u32, announced);
    let with_payload = |n: usize| [valid_head.clone(), pattern(n, unit)].concat();
    let marked = |n: usize, mark: Option<u64>| {
        let mark = mark.map(end_mark).unwrap_or_default();
        [
            marked_header(bench_byte, unit as u32),
            pattern(n, unit),
            mark,
        ]
        .concat()
    };
    let garbage: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let cases = [
        Case {
            name: "reset right after connect",
            hostile: Box::new(|| {
                let s = TcpStream::connect(addr).unwrap();
                let local = s.local_addr().unwrap();
                reset(s);
                local
            }),
            ended: "reset",
            reason: "",
        },
        Case {
            name: "reset mid-stream",
            hostile: Box::new(|| send_then_close(addr, &with_payload(100 << 10), true)),
            ended: "reset",
            reason: "",
        },
        Case {
            name: "garbage bytes",
            hostile: Box::new(|| send_then_close(addr, &garbage, false)),
            ended: "closed",
            reason: "",
        },
        Case {
            name: "unit 0xFFFFFFFF",
            hostile: Box::new(|| send_then_close(addr, &header(bench_byte, 0, u32::MAX, 0), false)),
            ended: "malformed",
            reason: "unit 4294967295",
        },
        Case {
            name: "unit 0",
            hostile: Box::new(|| send_then_close(addr, &header(bench_byte, 0, 0, 0), false)),
            ended: "malformed",
            reason: "unit 0",
        },
        Case {
            name: "bad bench",
            hostile: Box::new(|| send_then_close(addr, &header(9, 0, 4096, 0), false)),
            ended: "malformed",
            reason: "bench 9",
        },
        Case {
            name: "bad mode",
            hostile: Box::new(|| send_then_close(addr, &header(bench_byte, 7, 4096, 0), false)),
            ended: "malformed",
            reason: "mode 7",
        },
        Case {
            name: "truncated header",
            hostile: Box::new(|| send_then_close(addr, &valid_head[..20], false)),
            ended: "truncated",
            reason: "within its 32-byte header",
        },
        Case {
            name: "truncated payload",
            hostile: Box::new(|| send_then_close(addr, &with_payload(100 << 10), false)),
            ended: "truncated",
            reason: "102400 of the 1048576 bytes",
        },
        Case {
            name: "a marked stream closed without its end mark",
            hostile: Box::new(|| send_then_close(addr, &marked(100 << 10, None), false)),
            ended: "truncated",
            reason: "closed after 102400 bytes without the sender's end mark",
        },
        Case {
            name: "an end mark that counts more than arrived",
            hostile: Box::new(|| send_then_close(addr, &marked(100 << 10, Some(1 << 20)), false)),
            ended: "truncated",
            reason: "102400 bytes arrived, but the sender's end mark says it sent 1048576",
        },
    ];
    for Case {
        name,
        hostile,
        ended,
        reason: words,
    } in &cases
    {
        let peer = hostile();
        let row = rx.row_of(peer);
        eprintln!("{bench} {name}: {row}");
        assert_eq!(row["ended"], *ended, "{name}: {row}");
        let reason = row["reason"].as_str().unwrap_or("");
        assert!(reason.contains(words), "{name}: {row}");
        assert_eq!(row["verified"], false, "{name}: {row}");
        assert_eq!(row["complete"], *ended == "closed", "{name}: {row}");
        rx.valid_stream(bench, name);
    }
    // Nothing was sized by the hostile unit.
    assert!(rx.resident_kib() < 256 << 10, "{} KiB", rx.resident_kib());

    // A silent peer held open does not keep a valid stream waiting; TCP keepalive watches it, and it
    // ends idle.
    let silent = TcpStream::connect(addr).unwrap();
    let peer = silent.local_addr().unwrap();
    rx.valid_stream(bench, "a silent peer connected");
    let ss = Command::new("ss")
        .args(["-tnoH", "state", "established"])
        .args(["dst", &peer.to_string()])
        .output()
        .expect("ss");
    let ss = String::from_utf8_lossy(&ss.stdout);
    assert!(ss.contains("keepalive"), "the accepted socket: {ss:?}");
    let row = rx.row_of(peer);
    assert_eq!(row["ended"], "idle", "{row}");
    assert!(
        row["reason"].as_str().unwrap().contains("no bytes for 2 s"),
        "{row}"
    );
    drop(silent);
    rx.valid_stream(bench, "the silent peer's end");
    rx.stop();
}

#[test]
fn tcp_receiver_survives_every_hostile_stream() {
    hostile_table("tcp", &[]);
}

#[test]
fn rx_receiver_survives_every_hostile_stream() {
    hostile_table("rx", &["--mode", "zerocopy,copy"]);
}

#[test]
fn streams_beyond_max_streams_are_refused_and_reported() {
    let mut rx = Receiver::start("tcp", &["--max-streams", "1"]);
    // Two silent peers: the first accepted takes the one slot until it ends idle, the other is
    // refused at once.
    let a = TcpStream::connect(rx.addr).unwrap();
    let b = TcpStream::connect(rx.addr).unwrap();
    let mut ended: Vec<String> = [&a, &b]
        .iter()
        .map(|s| rx.row_of(s.local_addr().unwrap()))
        .map(|row| {
            if row["ended"] == "refused" {
                assert!(
                    row["reason"].as_str().unwrap().contains("--max-streams"),
                    "{row}"
                );
            }
            row["ended"].as_str().unwrap().to_string()
        })
        .collect();
    ended.sort();
    assert_eq!(ended, ["idle", "refused"]);
    rx.valid_stream("tcp", "a refused stream");
    let (status, stderr) = rx.interrupt();
    assert!(status.success(), "{stderr}");
}

/// A peer that vanishes mid-stream (an nftables rule in the receiver's namespace drops everything it
/// sends from then on, as a host gone down would) is found by TCP keepalive, with the idle timeout
/// off: its stream ends as `keepalive` and the receiver lives on.
#[test]
fn a_vanished_peer_is_found_by_keepalive() {
    let test = "a_vanished_peer_is_found_by_keepalive";
    if !nft_usable(test) {
        return;
    }
    let pair = VethPair::new(VethConfig::default()).expect("veth harness");
    let mut rx = Receiver::start_with(
        pair.b.command(ZCNET),
        "tcp",
        &format!("{}:0", pair.b_v4),
        &["--idle-timeout", "0"],
    );
    let addr = rx.addr;
    let mut peer = pair.a.run(|| TcpStream::connect(addr)).expect("connect");
    let local = peer.local_addr().unwrap();
    let unit = 4096;
    peer.write_all(&[header(1, 0, unit as u32, 1 << 20), pattern(unit, unit)].concat())
        .unwrap();
    let nft = |rule: &str| pair.b.exec("nft", &[rule]).expect("nft");
    nft("add table inet zcnet_gone");
    nft("add chain inet zcnet_gone input { type filter hook input priority 0; }");
    nft(&format!(
        "add rule inet zcnet_gone input ip saddr {} drop",
        pair.a_v4
    ));
    // 10 s of silence, then 3 probes 5 s apart.
    let row = rx.row_within(Duration::from_secs(60), "the vanished peer", |r| {
        r["peer"] == local.to_string().as_str()
    });
    assert_eq!(row["ended"], "keepalive", "{row}");
    assert_eq!(row["complete"], false, "{row}");
    assert_eq!(row["verified"], false, "{row}");
    assert!(
        rx.child.try_wait().unwrap().is_none(),
        "the receiver lives on"
    );
    drop(peer);
    rx.stop();
}

/// A real `bench tcp` sender killed midway closes its stream (the kernel sends its FIN) without the
/// end mark: the stream is truncated, not complete, and fails the receiver. One stopped by Ctrl-C
/// ends with an end mark saying so: interrupted, not complete, and not judged.
#[test]
fn a_tcp_stream_whose_sender_is_killed_or_interrupted_is_not_complete() {
    let mut rx = Receiver::start("tcp", &[]);
    for (signal, ended, reason) in [
        ("-KILL", "truncated", "without the sender's end mark"),
        ("-INT", "interrupted", "Ctrl-C stopped the sender"),
    ] {
        let mut sender = Command::new(ZCNET)
            .args(["bench", "tcp", "--connect", &rx.addr.to_string()])
            .args(["--mode", "copy", "--duration", "60", "--interval", "0.1"])
            .arg("--json")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The first interval line: the stream is flowing.
        let mut stdout = BufReader::new(sender.stdout.take().unwrap());
        stdout.read_line(&mut String::new()).unwrap();
        testnet::run_checked("kill", &[signal, &sender.id().to_string()]).expect("kill");
        std::io::copy(&mut stdout, &mut std::io::sink()).unwrap();
        let status = sender.wait().unwrap();
        assert_eq!(status.success(), signal == "-INT", "{signal}: {status}");
        let row = rx.row(signal, |r| r["zcnet_header"] == true);
        assert_eq!(row["ended"], ended, "{signal}: {row}");
        assert!(row["reason"].as_str().unwrap().contains(reason), "{row}");
        assert_eq!(row["complete"], false, "{signal}: {row}");
        assert_eq!(row["verified"], false, "{signal}: {row}");
        assert_eq!(row["data_errors"], 0, "{signal}: {row}");
    }
    // Only the killed sender's stream is judged.
    let (status, stderr) = rx.interrupt();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("without the sender's end mark") && !stderr.contains("Ctrl-C stopped"),
        "{stderr}"
    );
}
