//! AF_XDP with least privilege: `zcnet xdp broker`, run as root inside a testnet namespace on its
//! veth end, hands queue 0 to a worker running as a throwaway user with no capabilities (`setpriv`)
//! and outside that namespace, which receives UDP datagrams sent from the peer namespace and sends
//! each back (every datagram verified on both sides). Killing the worker detaches the program (the
//! broker's last worker is gone); killing the broker (SIGKILL) leaves nothing attached either, and
//! the program ids are gone from the kernel. A uid not allowed, a queue not on the allow-list and a
//! queue held by another worker each get their typed refusal.
//!
//! Each worker is this test binary run again under setpriv (selected by `ZCNET_BROKER_CHILD`);
//! building it and the namespaces needs root, so as a normal user the tests skip with the reason.

mod common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use benchnet::frame::{ETH_HLEN, check_payload, swap_macs, udp_payload, write_payload};
use common::ZCNET;
use testnet::{VethConfig, VethPair};
use zcnet::xdp::{BrokerClient, BrokerError, QueueRequest, Refusal};

const CHILD: &str = "ZCNET_BROKER_CHILD";
const SOCKET: &str = "ZCNET_BROKER_SOCKET";
const IFACE: &str = "ZCNET_BROKER_IFACE";
const ECHO: &str = "a_worker_without_capabilities_receives_and_sends_through_the_broker_and_leaves_nothing_attached";
const REFUSALS: &str = "the_broker_refuses_a_uid_a_queue_off_its_list_and_a_busy_queue_by_type";

/// The UDP port the broker's program steers to the worker.
const PORT: u16 = 7399;
/// Datagrams echoed.
const DATAGRAMS: u64 = 300;
/// Bytes of each datagram's payload.
const PAYLOAD: usize = 200;

/// The uid the broker allows, and one it does not.
const WORKER_UID: &str = "65534";
const STRANGER_UID: &str = "65533";

// ---- the worker (the child, without capabilities) ----

/// The capabilities this process has in effect (`CapEff` of /proc/self/status).
fn effective_caps() -> String {
    let status = std::fs::read_to_string("/proc/self/status").expect("read status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .expect("CapEff")
        .trim()
        .to_string()
}

fn client() -> (BrokerClient, String) {
    let path = std::env::var(SOCKET).expect("socket path");
    let iface = std::env::var(IFACE).expect("interface");
    (BrokerClient::new(path), iface)
}

/// Opens queue 0 through the broker, receives [`DATAGRAMS`] datagrams (each verified, none twice),
/// sends each back with addresses swapped (which keeps both checksums right), then holds the queue
/// until killed.
fn echo_worker() {
    assert_eq!(
        effective_caps(),
        "0000000000000000",
        "the worker has no capability"
    );
    let (client, iface) = client();
    let (mut umem, mut socket) = client.open(&QueueRequest::new(&iface, 0)).expect("granted");
    let filled = socket.fill(&mut umem, 2048).expect("fill");
    println!("READY {} filled {filled}", socket.mode());
    let mut seen = HashSet::new();
    let (mut frames, mut out) = (Vec::new(), Vec::new());
    let mut sent = 0u64;
    let deadline = Instant::now() + Duration::from_secs(30);
    while sent < DATAGRAMS {
        assert!(Instant::now() < deadline, "{} of {DATAGRAMS} echoed", sent);
        socket
            .wait_rx(Some(Duration::from_millis(100)))
            .expect("poll");
        let rejected = socket.receive(&mut umem, 64, &mut frames).expect("receive");
        assert_eq!(rejected, 0, "descriptors the kernel could not have written");
        for mut frame in frames.drain(..) {
            let bytes = umem.bytes(&frame);
            let (port, payload) = udp_payload(bytes).expect("a UDP frame");
            assert_eq!(port, PORT);
            let seq = check_payload(payload).expect("an intact payload");
            assert!(seq < DATAGRAMS && seen.insert(seq), "datagram {seq} again");
            let bytes = umem.bytes_mut(&mut frame);
            swap_macs(bytes);
            let ip = ETH_HLEN + 12;
            let (src, dst) = bytes[ip..ip + 8].split_at_mut(4);
            src.swap_with_slice(dst);
            out.push(frame);
        }
        while !out.is_empty() {
            sent += u64::from(socket.transmit(&mut umem, &mut out).expect("transmit"));
            assert_eq!(
                socket.wake_tx().expect("wake tx"),
                0,
                "a frame dropped unsent"
            );
            socket.reclaim(&mut umem, 256).expect("reclaim");
        }
        socket.reclaim(&mut umem, 256).expect("reclaim");
        socket.fill(&mut umem, 256).expect("refill");
    }
    println!("ECHOED {sent} datagrams, each verified");
    let stats = socket.statistics().expect("statistics");
    println!("{stats:?}");
    println!("HOLDING");
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Opens queue 0 and holds it until killed.
fn holding_worker() {
    let (client, iface) = client();
    let (_umem, socket) = client.open(&QueueRequest::new(&iface, 0)).expect("granted");
    println!("READY {}", socket.mode());
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn refusal_of(result: Result<impl std::fmt::Debug, BrokerError>) -> Refusal {
    match result {
        Err(BrokerError::Refused(r)) => {
            println!("REFUSED {r:?}: {r}");
            r
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// As an allowed uid: queue 1 is not on the list; queue 0, held by this worker already, is busy.
fn refused_queues() {
    let (client, iface) = client();
    let (_umem, _socket) = client.open(&QueueRequest::new(&iface, 0)).expect("granted");
    assert_eq!(
        refusal_of(client.open(&QueueRequest::new(&iface, 1))),
        Refusal::QueueNotAllowed {
            iface: iface.clone(),
            queue: 1
        }
    );
    assert_eq!(
        refusal_of(client.open(&QueueRequest::new(&iface, 0))),
        Refusal::QueueBusy { iface, queue: 0 }
    );
}

/// As a uid the broker does not serve.
fn refused_uid() {
    let (client, iface) = client();
    let refusal = refusal_of(client.open(&QueueRequest::new(&iface, 0)));
    assert_eq!(
        refusal,
        Refusal::UidNotAllowed {
            uid: STRANGER_UID.parse().unwrap(),
            gid: STRANGER_UID.parse().unwrap(),
        }
    );
}

/// Runs the child role named in [`CHILD`], if any: `true` when this process is a child.
fn child_role() -> bool {
    let Ok(role) = std::env::var(CHILD) else {
        return false;
    };
    match role.as_str() {
        "echo" => echo_worker(),
        "hold" => holding_worker(),
        "queues" => refused_queues(),
        "uid" => refused_uid(),
        other => panic!("unknown role {other}"),
    }
    println!("worker checks done");
    true
}

// ---- the parent (root) ----

/// A directory every user may enter, for the broker's socket; removed on drop.
struct SocketDir(PathBuf);

impl SocketDir {
    /// A directory of this process's own for `tag`.
    fn new(tag: &str) -> SocketDir {
        use std::os::unix::fs::PermissionsExt;
        let name = format!("zcnet-broker-{}-{tag}", std::process::id());
        let dir = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&dir).expect("socket directory");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        SocketDir(dir)
    }

    fn socket(&self) -> PathBuf {
        self.0.join("xdp.sock")
    }
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A process whose stdout lines arrive on a channel.
struct Lines {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Lines {
    fn new(mut child: Child) -> Lines {
        let stdout: ChildStdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits up to 20 s for a line containing `needle`; returns it.
    fn wait_for(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "no line with {needle:?}; exit {:?}; lines:\n{}",
                    self.child.try_wait(),
                    self.seen.join("\n")
                ),
            }
        }
    }

    fn kill(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("wait");
    }
}

impl Drop for Lines {
    /// A test that failed half-way leaves no process behind.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts `zcnet xdp broker` on `pair`'s `a` end, serving uid [`WORKER_UID`] queue 0.
fn start_broker(pair: &VethPair, socket: &Path) -> Lines {
    let child = pair
        .a
        .command(ZCNET)
        .args(["xdp", "broker", "--socket"])
        .arg(socket)
        .args(["--allow", &format!("{}:0", pair.a_if)])
        .args(["--allow-uid", WORKER_UID, "--port", &PORT.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the broker");
    let mut broker = Lines::new(child);
    broker.wait_for("listening on");
    broker
}

/// Starts this test binary's `test` as `role` under setpriv: uid and gid `uid`, no capability, in
/// the host's network namespace (the broker's descriptors work anywhere).
fn start_worker(test: &str, role: &str, uid: &str, socket: &Path, iface: &str) -> Lines {
    let child = Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
        ])
        .arg(std::env::current_exe().expect("test binary"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, role)
        .env(SOCKET, socket)
        .env(IFACE, iface)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn setpriv (util-linux)");
    Lines::new(child)
}

/// Waits for `worker` to end; it must succeed, with its checks done.
fn finished(mut worker: Lines) {
    worker.wait_for("worker checks done");
    let status = worker.child.wait().expect("wait");
    assert!(
        status.success(),
        "worker: {status}:\n{}",
        worker.seen.join("\n")
    );
}

/// The id of the XDP program attached to `a_if`, if any (`prog/xdp id N` of `ip -d link`).
fn attached_program(pair: &VethPair) -> Option<u32> {
    let shown = pair
        .a
        .ip(&["-d", "link", "show", &pair.a_if])
        .expect("ip -d link");
    let at = shown.find("prog/xdp id ")? + "prog/xdp id ".len();
    shown[at..].split_whitespace().next()?.parse().ok()
}

/// Checks that nothing is attached to `a_if` and that program `id` is gone from the kernel.
fn nothing_left(pair: &VethPair, id: u32, after: &str) {
    let shown = pair
        .a
        .link_once_xdp_detached(&pair.a_if)
        .expect("ip -d link");
    assert!(
        !shown.contains("prog/xdp"),
        "program left after {after}: {shown}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while zcnet::observe::loaded_programs()
        .expect("list loaded programs")
        .contains(&id)
    {
        assert!(
            Instant::now() < deadline,
            "program {id} still loaded after {after}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "after {after}: no XDP program on {}, program {id} gone",
        pair.a_if
    );
}

/// Sends [`DATAGRAMS`] datagrams from `b` to the worker and checks that each comes back once,
/// intact.
fn exchange(pair: &VethPair) {
    let (to, from) = (
        SocketAddr::from((pair.a_v4, PORT)),
        SocketAddr::from((pair.b_v4, PORT)),
    );
    pair.b.run(|| {
        let sock = UdpSocket::bind(from).expect("bind in b");
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut back = HashSet::new();
        let mut buf = vec![0u8; 2048];
        let mut payload = vec![0u8; PAYLOAD];
        for seq in 0..DATAGRAMS {
            write_payload(&mut payload, seq);
            sock.send_to(&payload, to).expect("send");
            // Paced by the echoes, so no queue on the way overflows.
            if seq % 32 == 31 {
                while (back.len() as u64) < seq - 16 {
                    receive_one(&sock, &mut buf, &mut back, to);
                }
            }
        }
        while (back.len() as u64) < DATAGRAMS {
            receive_one(&sock, &mut buf, &mut back, to);
        }
    });
    println!("{DATAGRAMS} datagrams echoed, each verified");
}

fn receive_one(sock: &UdpSocket, buf: &mut [u8], back: &mut HashSet<u64>, worker: SocketAddr) {
    let (n, src) = sock.recv_from(buf).expect("an echo within 10 s");
    assert_eq!(src, worker);
    assert_eq!(n, PAYLOAD);
    let seq = check_payload(&buf[..n]).expect("an intact echo");
    assert!(back.insert(seq), "echo {seq} twice");
}

#[test]
fn a_worker_without_capabilities_receives_and_sends_through_the_broker_and_leaves_nothing_attached()
{
    if child_role() || !testnet::privileged(ECHO) {
        return;
    }
    let pair = VethPair::new(VethConfig::full_checksums(1)).expect("veth pair");
    let dir = SocketDir::new("echo");
    let socket = dir.socket();
    let mut broker = start_broker(&pair, &socket);
    assert_eq!(attached_program(&pair), None, "attached before any worker");

    let mut worker = start_worker(ECHO, "echo", WORKER_UID, &socket, &pair.a_if);
    println!("{}", worker.wait_for("READY"));
    println!("{}", broker.wait_for("granted"));
    let id = attached_program(&pair).expect("the program attached for the worker");
    exchange(&pair);
    worker.wait_for("HOLDING");
    println!("{}", worker.seen.join("\n"));

    worker.kill();
    println!("{}", broker.wait_for("detached"));
    nothing_left(&pair, id, "the worker was killed");

    let mut holder = start_worker(ECHO, "hold", WORKER_UID, &socket, &pair.a_if);
    holder.wait_for("READY");
    let id = attached_program(&pair).expect("attached again for the next worker");
    broker.kill();
    nothing_left(&pair, id, "the broker was killed");
    holder.kill();
}

#[test]
fn the_broker_refuses_a_uid_a_queue_off_its_list_and_a_busy_queue_by_type() {
    if child_role() || !testnet::privileged(REFUSALS) {
        return;
    }
    let pair = VethPair::new(VethConfig::full_checksums(2)).expect("veth pair");
    let dir = SocketDir::new("refusals");
    let socket = dir.socket();
    let mut broker = start_broker(&pair, &socket);

    finished(start_worker(
        REFUSALS,
        "uid",
        STRANGER_UID,
        &socket,
        &pair.a_if,
    ));
    println!("{}", broker.wait_for("refused"));
    assert_eq!(
        attached_program(&pair),
        None,
        "attached for a refused worker"
    );

    finished(start_worker(
        REFUSALS, "queues", WORKER_UID, &socket, &pair.a_if,
    ));
    println!("{}", broker.wait_for("is not on the broker's allow-list"));
    println!("{}", broker.wait_for("is busy"));
    println!("{}", broker.wait_for("detached"));
    assert_eq!(
        attached_program(&pair),
        None,
        "left attached after the worker ended"
    );
    broker.kill();
}
