//! `zcnet observe` watching other processes: its totals for a sender it observes by pid equal what
//! the sender reports itself (zcnet's bench, `--connect` side, on the `sendmsg` and io_uring paths,
//! and copying), and for a zero-copy receiver the bytes it mapped, inside a network namespace; its
//! totals for a cgroup are those of the bench processes in it; a copying sender shows no zero-copy; a
//! sender run as a normal user shows the locked memory its sends are charged; after
//! `kill -9` none of its programs stays loaded; without CAP_BPF and CAP_PERFMON it refuses, naming
//! them. Each run either attaches the `skb_copy_ubufs` kprobe or says why it cannot.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::observing::{start_observer, totals_of, within_one_percent};
use common::{
    Reaped, ZCNET, held_sender, held_sender_as, json_lines, sender_row, sigint, start_reading, u,
};
use serde_json::Value;

/// What `zcnet observe` counts for a `sendmsg` path sender, beside the field of the sender's row it
/// equals.
const SENDMSG_AGREES: &[(&str, &str)] = &[
    ("zc_sends", "zc_calls"),
    ("zc_bytes", "bytes"),
    ("notifications", "notifications"),
    ("copied_completions", "copied_ids"),
];

/// Each observed counter of `pairs` is within 1% of the sender row's field beside it.
fn agree(seen: &Value, row: &Value, pairs: &[(&str, &str)]) {
    for &(observed, reported) in pairs {
        within_one_percent(
            &format!("{observed} against the sender's {reported}"),
            u(seen, observed),
            u(row, reported),
        );
    }
}

/// Runs a `bench tcp --connect` sender with `args` in `ns` against a listener there, observed by
/// pid from before its first send; returns the sender's row and the observer's totals for it.
fn observed_sender(ns: &testnet::Netns, args: &[&str]) -> (Value, Value) {
    let held = held_sender(ns, args);
    let pid = u64::from(held.pid);
    let (row, summary) = observe_held(held, &[]);
    (row, totals_of(&summary, pid))
}

/// Observes a held sender by pid (with the observer's flags `extra`), lets it go, and returns its
/// row and the observer's output.
fn observe_held(mut held: common::HeldSender, extra: &[&str]) -> (Value, String) {
    let pid = u64::from(held.pid);
    let pid_arg = pid.to_string();
    let (observer, _, mut observed) = start_observer(&[&["--pid", &pid_arg], extra].concat());
    writeln!(held.go, "go").unwrap();
    drop(held.go);
    let mut rows = String::new();
    held.stdout.read_to_string(&mut rows).unwrap();
    assert!(
        held.sender.wait().unwrap().success(),
        "sender failed: {rows}"
    );
    held.listener.wait().unwrap();
    sigint(&observer.0);
    let mut summary = String::new();
    observed.read_to_string(&mut summary).unwrap();
    (sender_row(&rows), summary)
}

#[test]
fn observe_pid_totals_equal_what_each_sender_reports() {
    let test = "observe_pid_totals_equal_what_each_sender_reports";
    if !testnet::may_trace(test) || !testnet::privileged(test) {
        return;
    }
    let ns = testnet::Netns::create("obs").expect("namespace");

    let (row, seen) = observed_sender(&ns, &["--mode", "zerocopy", "--api", "sendmsg"]);
    agree(&seen, &row, SENDMSG_AGREES);
    // Loopback delivery copies: every completion says so (kernel-facts.md).
    assert_eq!(u(&seen, "completions"), u(&seen, "copied_completions"));

    let (row, seen) = observed_sender(&ns, &["--mode", "zerocopy", "--api", "io_uring"]);
    agree(
        &seen,
        &row,
        &[
            ("uring_zc_requests", "zc_calls"),
            ("uring_zc_bytes", "bytes"),
            ("uring_notifications", "notifications"),
            ("uring_copied_notifications", "copied_ids"),
        ],
    );

    let (row, seen) = observed_sender(&ns, &["--mode", "copy", "--api", "sendmsg"]);
    agree(&seen, &row, &[("copy_bytes", "bytes")]);
    for zero_copy in [
        "zc_sends",
        "notifications",
        "uring_zc_requests",
        "uring_notifications",
    ] {
        assert_eq!(
            u(&seen, zero_copy),
            0,
            "a copying sender shows {zero_copy}: {seen}"
        );
    }
}

#[test]
fn observe_pid_mapped_bytes_equal_what_the_receiver_reports() {
    let test = "observe_pid_mapped_bytes_equal_what_the_receiver_reports";
    if !testnet::may_trace(test) || !testnet::privileged(test) {
        return;
    }
    let ns = testnet::Netns::create("obsrx").expect("namespace");
    // The receiver's shell says its pid and becomes the bench (same pid).
    let mut receiver = ns
        .command("sh")
        .args(["-c", "echo $$; exec \"$0\" \"$@\"", ZCNET])
        .args(["bench", "rx", "--listen", "127.0.0.1:0", "--once", "--json"])
        .args(["--interval", "0", "--mode", "zerocopy"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the receiver");
    let mut out = BufReader::new(receiver.stdout.take().unwrap());
    let mut lines = [String::new(), String::new()];
    for line in &mut lines {
        out.read_line(line).unwrap();
    }
    let pid: u64 = lines[0].trim().parse().expect("the receiver's pid");
    let listening: Value = serde_json::from_str(&lines[1]).expect("the listening line");
    let addr = listening["listening"].as_str().expect("its address");
    let (observer, _, mut observed) = start_observer(&["--pid", &pid.to_string()]);
    let sent = ns
        .command(ZCNET)
        .args(["bench", "rx", "--connect", addr, "--sender", "zerocopy"])
        .args([
            "--mode", "zerocopy", "--rounds", "1", "--mib", "256", "--json",
        ])
        .output()
        .expect("run the sender");
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let mut rows = String::new();
    out.read_to_string(&mut rows).unwrap();
    assert!(
        receiver.wait().unwrap().success(),
        "receiver failed: {rows}"
    );
    sigint(&observer.0);
    let mut summary = String::new();
    observed.read_to_string(&mut summary).unwrap();
    let row = json_lines(&rows)
        .into_iter()
        .rfind(|r| r.get("mapped_bytes").is_some())
        .unwrap_or_else(|| panic!("no receiver row in {rows}"));
    let seen = totals_of(&summary, pid);
    agree(&seen, &row, &[("rx_mapped_bytes", "mapped_bytes")]);
}

/// A zero-copy sender run as a normal user (uid 65534, RLIMIT_MEMLOCK 8 MiB) over loopback: the
/// observer shows its user's locked memory, at least what one 64 KiB send is charged (16 pages and
/// the 2 the kernel adds) and at most the limit, and the limit; so does a sender that is root in a
/// user namespace of its own (its CAP_IPC_LOCK does not count there: root's sends are charged);
/// a root sender shows it exempt.
#[test]
fn observe_shows_the_locked_memory_a_normal_users_sends_are_charged() {
    let test = "observe_shows_the_locked_memory_a_normal_users_sends_are_charged";
    if !testnet::may_trace(test) || !testnet::privileged(test) {
        return;
    }
    const LIMIT: u64 = 8 << 20;
    let ns = testnet::Netns::create("obslock").expect("namespace");
    for (setup, exec_through, uid, limit) in [
        (
            "ulimit -l 8192;",
            "setpriv --reuid 65534 --regid 65534 --clear-groups",
            65534,
            Value::from(LIMIT),
        ),
        (
            "ulimit -l 8192;",
            "unshare --user --map-root-user",
            0,
            Value::from(LIMIT),
        ),
        ("", "", 0, Value::from("exempt")),
    ] {
        let args = ["--mode", "zerocopy", "--api", "sendmsg", "--size", "65536"];
        let held = held_sender_as(&ns, setup, exec_through, &args);
        let pid = u64::from(held.pid);
        let (_, summary) = observe_held(held, &["--interval", "0.2"]);
        let process = json_lines(&summary)
            .into_iter()
            .find(|v| v["event"] == "process" && v["pid"] == pid)
            .unwrap_or_else(|| panic!("no process line for {pid} in {summary}"));
        let locked = &process["locked_memory"];
        eprintln!("uid {uid}: {locked}");
        assert_eq!(locked["uid"], uid, "{locked}");
        assert_eq!(locked["limit"], limit, "{locked}");
        if limit != "exempt" {
            let peak = u(locked, "peak_bytes");
            assert!(
                (18 * 4096..=LIMIT).contains(&peak),
                "peak {peak} is not between one send's charge and the limit: {locked}"
            );
            assert!(u(locked, "bytes") <= peak, "{locked}");
            // While it sent, the rows of the intervals in which it changed said so.
            let rows = json_lines(&summary)
                .into_iter()
                .filter(|v| v["event"] == "locked_memory" && v["pid"] == pid)
                .count();
            assert!(rows > 0, "no locked_memory row for {pid}: {summary}");
        }
    }
}

/// A cgroup v2 directory of this test's own, removed when dropped (its processes have ended).
struct Cgroup(std::path::PathBuf);

impl Cgroup {
    /// A new cgroup under the first cgroup2 mount in `/proc/mounts`.
    fn create(name: &str) -> Cgroup {
        let mounts = std::fs::read_to_string("/proc/mounts").expect("/proc/mounts");
        let root = mounts
            .lines()
            .map(|l| l.split(' ').collect::<Vec<_>>())
            .find(|f| f.get(2) == Some(&"cgroup2"))
            .map(|f| f[1].to_string())
            .expect("a cgroup2 mount");
        let dir = std::path::Path::new(&root).join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir(&dir).expect("create the cgroup");
        Cgroup(dir)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir(&self.0) {
            eprintln!("removing {}: {e}", self.0.display());
        }
    }
}

/// Runs `zcnet bench` with `bench` in a cgroup of its own observed with `--cgroup`; returns the
/// bench's last sender row and the observer's counters summed over every process it saw.
fn bench_observed_in_a_cgroup(name: &str, bench: &[&str]) -> (Value, Value) {
    let cgroup = Cgroup::create(name);
    let dir = cgroup.0.to_str().unwrap().to_string();
    let (observer, _, mut observed) = start_observer(&["--cgroup", &dir]);
    // The shell joins the cgroup, then becomes a bench whose sender and receiver processes are
    // its children (in the cgroup too).
    let procs = format!("{dir}/cgroup.procs");
    let out = Command::new("sh")
        .args(["-c", "echo $$ > \"$0\" && exec \"$@\"", &procs, ZCNET])
        .arg("bench")
        .args(bench)
        .args(["--duration", "1", "--json", "--interval", "0"])
        .output()
        .expect("run the bench");
    let rows = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{rows}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    sigint(&observer.0);
    let mut summary = String::new();
    observed.read_to_string(&mut summary).unwrap();
    let row = json_lines(&rows)
        .into_iter()
        .rfind(|r| r["role"] == "sender")
        .unwrap_or_else(|| panic!("no sender row in {rows}"));
    let mut seen = serde_json::Map::new();
    for process in json_lines(&summary)
        .iter()
        .filter(|v| v["event"] == "process")
    {
        for (name, value) in process["counters"].as_object().unwrap() {
            let sum = seen.get(name).and_then(Value::as_u64).unwrap_or(0) + value.as_u64().unwrap();
            seen.insert(name.clone(), sum.into());
        }
    }
    (row, Value::Object(seen))
}

#[test]
fn observe_cgroup_counts_every_process_in_it() {
    let test = "observe_cgroup_counts_every_process_in_it";
    if !testnet::may_trace(test) {
        return;
    }
    let (row, seen) = bench_observed_in_a_cgroup("zcnet-observe", &["tcp", "--mode", "zerocopy"]);
    agree(&seen, &row, SENDMSG_AGREES);
    agree(&seen, &row, &[("rx_copied_bytes", "bytes")]);
}

/// `sendmmsg` sends are counted one per message, and UDP receives' copies are counted: the socket
/// layer's tracepoints fire once per message, where the system call's exit saw one call.
#[test]
fn observe_counts_each_sendmmsg_message_and_each_udp_receive() {
    let test = "observe_counts_each_sendmmsg_message_and_each_udp_receive";
    if !testnet::may_trace(test) {
        return;
    }
    let bench = [
        "udp", "--api", "sendmmsg", "--mode", "copy", "--size", "1400", "--batch", "7",
    ];
    let (row, seen) = bench_observed_in_a_cgroup("zcnet-observe-mmsg", &bench);
    eprintln!("{seen}");
    // Beside the datagrams, the bench's processes exchange a few control messages.
    agree(
        &seen,
        &row,
        &[
            ("copy_sends", "sent_datagrams"),
            ("copy_bytes", "bytes"),
            ("rx_copied_bytes", "received_bytes"),
        ],
    );
    assert_eq!(u(&seen, "zc_sends"), 0, "{seen}");
}

/// One `getsockopt` on `socket`: its result (0 or the errno) and the value it gave, offered a
/// buffer of `len` bytes.
fn option(socket: &TcpStream, level: i32, name: i32, len: usize) -> (i32, Vec<u8>) {
    let mut value = vec![0u8; len];
    let mut written = len as libc::socklen_t;
    // SAFETY: `value` holds `written` bytes, and both outlive the call.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            level,
            name,
            value.as_mut_ptr().cast(),
            &mut written,
        )
    };
    value.truncate(written as usize);
    match rc {
        0 => (0, value),
        _ => (
            std::io::Error::last_os_error().raw_os_error().unwrap(),
            value,
        ),
    }
}

/// Options whose values do not change on an idle connection, one of them offered more than a page
/// (the cgroup hook copies at most a page), and one the kernel refuses.
fn idle_options(socket: &TcpStream) -> Vec<(i32, Vec<u8>)> {
    vec![
        option(socket, libc::SOL_SOCKET, libc::SO_RCVBUF, 4),
        option(socket, libc::SOL_SOCKET, libc::SO_TYPE, 4),
        option(socket, libc::IPPROTO_TCP, libc::TCP_NODELAY, 4),
        option(socket, libc::IPPROTO_TCP, libc::TCP_CONGESTION, 8192),
        option(socket, libc::IPPROTO_TCP, 9999, 4),
    ]
}

/// The attachments an observer started with `setpriv_args` before it (none: as the test runs) names
/// for `getsockopt`; the observer is killed if the test ends before it.
fn getsockopt_hook(setpriv_args: &[&str]) -> (Reaped, Vec<String>) {
    let mut cmd = testnet::with_tracefs("setpriv");
    cmd.args(setpriv_args)
        .args([ZCNET, "observe", "--all", "--interval", "0", "--json"]);
    let (observer, line, _) = start_reading(&mut cmd);
    let attached: Value = serde_json::from_str(&line).expect("the attached line");
    let hooks = attached["tracepoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t.as_str())
        .filter(|t| t.contains("getsockopt"))
        .map(String::from)
        .collect();
    (Reaped(observer), hooks)
}

/// Where a cgroup v2 hierarchy is mounted (and the observer runs as root), it reads
/// `TCP_ZEROCOPY_RECEIVE` at `getsockopt`'s cgroup hook, not at a system call tracepoint, and every
/// other `getsockopt` returns what it returned before it attached: the hook leaves the calls' results
/// and values as the kernel made them. Without CAP_NET_ADMIN (and CAP_SYS_ADMIN), which linking
/// a cgroup program needs, it falls back to the tracepoint.
/// (`observe_pid_mapped_bytes_equal_what_the_receiver_reports` counts through the hook; the guest,
/// which mounts no cgroup v2, through the tracepoint.)
#[test]
fn observe_reads_zero_copy_receives_at_the_cgroup_hook_and_leaves_other_getsockopts_alone() {
    let test =
        "observe_reads_zero_copy_receives_at_the_cgroup_hook_and_leaves_other_getsockopts_alone";
    if !testnet::may_trace(test) || !testnet::privileged(test) {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
    let client = TcpStream::connect(listener.local_addr().unwrap()).expect("connect");
    let before = idle_options(&client);
    assert_eq!(before[4].0, libc::ENOPROTOOPT, "{before:?}");
    let (mut observer, hooks) = getsockopt_hook(&[]);
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    match mountinfo.lines().any(|l| l.contains(" - cgroup2 ")) {
        true => assert!(
            matches!(&hooks[..], [hook] if hook.starts_with("cgroup_getsockopt:/")),
            "{hooks:?}"
        ),
        false => assert_eq!(hooks, ["syscalls:sys_exit_getsockopt"]),
    }
    assert_eq!(idle_options(&client), before, "getsockopt while observed");
    sigint(&observer.0);
    observer.wait_success("the observer", "");
    let (mut fallback, hooks) = getsockopt_hook(&["--bounding-set", "-net_admin,-sys_admin"]);
    assert_eq!(hooks, ["syscalls:sys_exit_getsockopt"]);
    sigint(&fallback.0);
    fallback.wait_success("the observer without CAP_NET_ADMIN", "");
}

#[test]
fn observe_leaves_nothing_loaded_after_sigkill() {
    let test = "observe_leaves_nothing_loaded_after_sigkill";
    if !testnet::may_trace(test) {
        return;
    }
    let (mut observer, ids, _) = start_observer(&["--all"]);
    // io_uring_submit_req, io_uring_complete and sys_exit_getsockopt, the raw sock_send_length and
    // sock_recv_length tracepoints, and the skb_copy_ubufs kprobe where the kernel has kprobes.
    assert!(
        matches!(ids.len(), 5 | 6),
        "one program per attachment: {ids:?}"
    );
    let loaded = zcnet::observe::loaded_programs().expect("list loaded programs");
    for id in &ids {
        assert!(
            loaded.contains(&(*id as u32)),
            "program {id} is not loaded: {loaded:?}"
        );
    }
    observer.0.kill().expect("kill -9");
    observer.0.wait().unwrap();
    // The kernel frees programs after an RCU grace period once their last reference goes.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let loaded = zcnet::observe::loaded_programs().expect("list loaded programs");
        let left: Vec<&u64> = ids
            .iter()
            .filter(|id| loaded.contains(&(**id as u32)))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still loaded after kill -9: {left:?}"
        );
        sleep(Duration::from_millis(50));
    }
}

#[test]
fn observe_refuses_without_bpf_and_perfmon_naming_them() {
    // As root, the capabilities are dropped from the bounding set first, so the refusal is tested
    // as a normal user meets it.
    let mut cmd = if rustix::process::geteuid().is_root() {
        let mut cmd = Command::new("setpriv");
        cmd.args([
            "--bounding-set",
            "-all",
            "--inh-caps",
            "-all",
            "--ambient-caps",
            "-all",
        ]);
        cmd.arg(ZCNET);
        cmd
    } else {
        Command::new(ZCNET)
    };
    let out = cmd
        .args(["observe", "--all"])
        .output()
        .expect("run zcnet observe");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("refused"), "{stderr}");
    assert!(
        stderr.contains("CAP_BPF") && stderr.contains("CAP_PERFMON"),
        "{stderr}"
    );
}

/// Every row of `zcnet bench tcp` carries the kernel's copies after its sends per payload byte, or
/// says why not: on a kernel without kprobes (this host) that it has none, without CAP_BPF and
/// CAP_PERFMON those; where the probe runs, loopback delivery copies each byte at most once (plus
/// retransmissions), and only the copies made in the bench's own softirq work are the bench's (in the
/// emulated guest most run in `ksoftirqd`: 0.03 to 0.06 per byte), so only the upper bound holds.
#[test]
fn bench_rows_carry_the_kernels_copies_or_say_why_not() {
    let (stdout, rows) = bench_rows(
        &["tcp", "--mode", "copy,zerocopy", "--duration", "0.3"],
        |r| r["role"] == "sender",
    );
    assert_eq!(rows.len(), 2, "{stdout}");
    let root = rustix::process::geteuid().is_root();
    let kprobes = std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists();
    for row in &rows {
        let figure = &row["kernel_copied_per_byte"];
        let reason = row["kernel_copied_reason"].as_str().unwrap_or("");
        if !root {
            assert!(figure.is_null() && reason.contains("CAP_BPF"), "{row}");
        } else if !kprobes {
            assert!(figure.is_null() && reason.contains("no kprobes"), "{row}");
        } else if row["mode"] == "zerocopy" {
            let f = figure.as_f64().unwrap_or_else(|| panic!("{row}"));
            assert!((0.0..=1.1).contains(&f), "{row}");
        } else {
            assert_eq!(figure.as_f64(), Some(0.0), "{row}");
        }
    }
}

/// Every row of `zcnet bench rx` carries the bytes its receives copied per payload byte
/// (`kernel_copied_per_byte`, the `skb_copy_datagram_iovec` tracepoint for the bench's process), or
/// says why not (without CAP_BPF and CAP_PERFMON). Where it counts, the figure equals what the
/// receiver reports itself, the bytes it did not map (`copied_bytes`), give or take the stream's
/// header: the copying run copies every byte, the zero-copy run almost none.
#[test]
fn receive_rows_carry_the_kernels_copies_or_say_why_not() {
    let (stdout, rows) = bench_rows(
        &[
            "rx",
            "--mode",
            "copy,zerocopy",
            "--mib",
            "64",
            "--rounds",
            "1",
        ],
        |r| r.get("mapped_bytes").is_some(),
    );
    assert_eq!(rows.len(), 2, "{stdout}");
    let root = rustix::process::geteuid().is_root();
    for row in &rows {
        let figure = &row["kernel_copied_per_byte"];
        if !root {
            let reason = row["kernel_copied_reason"].as_str().unwrap_or("");
            assert!(figure.is_null() && reason.contains("CAP_BPF"), "{row}");
            continue;
        }
        let per_byte = figure.as_f64().unwrap_or_else(|| panic!("{row}"));
        let copied = (per_byte * u(row, "bytes") as f64).round() as u64;
        let reported = u(row, "copied_bytes");
        assert!(
            copied.abs_diff(reported) <= 4096,
            "the kernel copied {copied} bytes, the receiver reports {reported}: {row}"
        );
        if row["mode"] == "copy" {
            assert!((0.99..=1.01).contains(&per_byte), "{row}");
        }
    }
}

/// `bench rx --listen` rows carry the kernel's copies of the stream's receives: for a stream read
/// with `recv`, every byte (within a page of the bytes it did not map); as a normal user, null
/// with the capabilities named.
#[test]
fn listen_rows_carry_the_kernels_copies_or_say_why_not() {
    let mut listener = Command::new(ZCNET)
        .args(["bench", "rx", "--listen", "127.0.0.1:0", "--once", "--json"])
        .args(["--interval", "0", "--mode", "copy"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the listener");
    let mut lines = BufReader::new(listener.stdout.take().unwrap()).lines();
    let first = lines.next().expect("an announcement").unwrap();
    let announced: Value = serde_json::from_str(&first).unwrap_or_else(|_| panic!("{first}"));
    let addr = announced["listening"].as_str().unwrap().to_string();
    let sent = Command::new(ZCNET)
        .args(["bench", "rx", "--connect", &addr, "--mode", "copy"])
        .args(["--mib", "32", "--rounds", "1", "--json"])
        .output()
        .expect("run the sender");
    assert!(sent.status.success(), "{sent:?}");
    let rows: Vec<Value> = lines
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str(&l).ok())
        .filter(|r: &Value| r.get("peer").is_some())
        .collect();
    assert!(listener.wait().unwrap().success());
    let [row] = &rows[..] else {
        panic!("one stream row: {rows:?}")
    };
    let figure = &row["kernel_copied_per_byte"];
    if !rustix::process::geteuid().is_root() {
        let reason = row["kernel_copied_reason"].as_str().unwrap_or("");
        assert!(figure.is_null() && reason.contains("CAP_BPF"), "{row}");
        return;
    }
    let per_byte = figure.as_f64().unwrap_or_else(|| panic!("{row}"));
    let copied = (per_byte * u(row, "bytes") as f64).round() as u64;
    let reported = u(row, "bytes") - u(row, "mapped_bytes");
    assert!(
        copied.abs_diff(reported) <= 4096 && (0.99..=1.01).contains(&per_byte),
        "the kernel copied {copied} bytes, the receiver reports {reported}: {row}"
    );
}

/// Runs `zcnet bench ARGS --json` (after `--interval 0` where the bench takes it), which must
/// succeed; its output and the rows `wanted` picks.
fn bench_rows(args: &[&str], wanted: impl Fn(&Value) -> bool) -> (String, Vec<Value>) {
    let mut command = Command::new(ZCNET);
    command.arg("bench").args(args).arg("--json");
    if args[0] == "tcp" {
        command.args(["--interval", "0"]);
    }
    let out = command.output().expect("run zcnet bench");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = json_lines(&stdout).into_iter().filter(wanted).collect();
    (stdout, rows)
}
