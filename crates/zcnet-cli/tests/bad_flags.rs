//! Every numeric flag of every subcommand refuses bad values the same way: exit status 2 and a
//! message naming the flag, never a panic and never a run of zeros.

use std::process::Command;

/// (arguments, the flag the message must name).
const TABLE: &[(&[&str], &str)] = &[
    (&["bench", "tcp", "--duration=-1"], "--duration"),
    (&["bench", "tcp", "--duration", "0"], "--duration"),
    (&["bench", "tcp", "--duration", "nan"], "--duration"),
    (&["bench", "tcp", "--size", "0"], "--size"),
    (&["bench", "tcp", "--size=-5"], "--size"),
    (&["bench", "tcp", "--size", "64M"], "--size"),
    (&["bench", "tcp", "--interval=-1"], "--interval"),
    (&["bench", "tcp", "--threshold", "0"], "--threshold"),
    (&["bench", "tcp", "--pool-buffers", "0"], "--pool-buffers"),
    (&["bench", "udp", "--pool-buffers", "-1"], "--pool-buffers"),
    (
        &["bench", "tcp", "--pool-buffers", "4294967296"],
        "--pool-buffers",
    ),
    // More send buffers than the bench maps (1 GiB): refused before anything is mapped.
    (
        &["bench", "tcp", "--size", "1M", "--pool-buffers", "2048"],
        "--pool-buffers",
    ),
    (
        &["bench", "udp", "--size", "60000", "--pool-buffers", "1M"],
        "--pool-buffers",
    ),
    (&["bench", "tcp", "--listen", "nowhere"], "--listen"),
    (&["bench", "tcp", "--connect", "no-port"], "--connect"),
    (&["bench", "udp", "--size", "70000"], "--size"),
    (&["bench", "udp", "--gso", "0"], "--gso"),
    (
        &["bench", "udp", "--gso", "1000", "--size", "65000"],
        "--size",
    ),
    (&["bench", "udp", "--duration", "inf"], "--duration"),
    // A negative size names its flag (not "unexpected argument '-1'").
    (&["bench", "tcp", "--size", "-1K"], "--size"),
    (&["bench", "udp", "--sizes", "-1K,4K"], "--sizes"),
    (&["bench", "rx", "--write-kib", "-4K"], "--write-kib"),
    // The AF_XDP receiver takes one port, which its sender must know.
    (
        &[
            "bench",
            "udp",
            "--listen",
            "127.0.0.1:0",
            "--api",
            "af_xdp",
            "--iface",
            "lo",
        ],
        "--listen",
    ),
    // A plot that is no regular file: refused before the sweep, not after it.
    (
        &["bench", "tcp", "--sizes", "4K,8K", "--plot", "/dev/full"],
        "--plot",
    ),
    (
        &["bench", "rx", "--sizes", "4K,8K", "--plot", "/dev/null"],
        "--plot",
    ),
    // A segment too short, or too long for the default 40 a send: --gso, not a size never given.
    (&["bench", "udp", "--gso", "1", "--size", "64"], "--gso"),
    (&["bench", "udp", "--gso", "65507"], "--gso"),
    // --api af_xdp only where it means something.
    (&["bench", "tcp", "--api", "af_xdp"], "--api"),
    (&["bench", "udp", "--api", "af_xdp"], "--sink"),
    (
        &[
            "bench", "udp", "--api", "af_xdp", "--sink", "xdp-drop", "--gso", "1400",
        ],
        "--gso",
    ),
    (
        &["bench", "udp", "--api", "af_xdp", "--listen", "5201"],
        "--listen",
    ),
    (
        &[
            "bench",
            "udp",
            "--api",
            "af_xdp",
            "--connect",
            "127.0.0.1:9",
        ],
        "--connect",
    ),
    (
        &[
            "bench", "udp", "--api", "af_xdp", "--sink", "xdp-drop", "--size", "1473",
        ],
        "--size",
    ),
    (
        &[
            "bench", "udp", "--api", "af_xdp", "--sink", "xdp-drop", "--ipv6", "--sizes", "64,1453",
        ],
        "--sizes",
    ),
    // --api sendmmsg copies, one datagram per message, udp only.
    (&["bench", "tcp", "--api", "sendmmsg"], "--api"),
    (
        &["bench", "udp", "--api", "sendmmsg", "--mode", "zerocopy"],
        "--mode",
    ),
    (
        &["bench", "udp", "--api", "sendmmsg", "--gso", "1400"],
        "--gso",
    ),
    (&["bench", "udp", "--batch", "0"], "--batch"),
    (&["bench", "udp", "--batch", "1025"], "--batch"),
    (&["bench", "rx", "--mib", "0"], "--mib"),
    (&["bench", "rx", "--rounds", "0"], "--rounds"),
    (&["bench", "rx", "--rounds=-2"], "--rounds"),
    (&["bench", "rx", "--write-kib", "0"], "--write-kib"),
    (&["bench", "rx", "--write-kib", "1G"], "--write-kib"),
    (&["bench", "rx", "--window-kib", "0"], "--window-kib"),
    (&["bench", "rx", "--interval", "x"], "--interval"),
    (&["bench", "xdp", "--duration=-1"], "--duration"),
    (&["bench", "xdp", "--batch", "0"], "--batch"),
    (&["bench", "xdp", "--size", "0"], "--size"),
    (&["bench", "xdp", "--size", "53"], "--size"),
    (&["bench", "xdp", "--size", "1515"], "--size"),
    (&["bench", "xdp", "--interval=-1"], "--interval"),
    (&["bench", "xdp", "--feed", "nic"], "--feed"),
    (&["bench", "xdp", "--path", "af_xdp,nope"], "--path"),
    (&["bench", "vsock", "--bytes", "0"], "--bytes"),
    (&["bench", "vsock", "--buf-size", "12Q"], "--buf-size"),
    (&["bench", "vsock", "--vsk-size=-1"], "--vsk-size"),
    (&["bench", "vsock", "--api", "af_xdp"], "--api"),
    (&["bench", "vsock", "--api", "sendmsg,sendmmsg"], "--api"),
    (
        &["bench", "vsock", "--type", "seqpacket", "--api", "io_uring"],
        "--api",
    ),
    (
        &["bench", "vsock", "--listen", "--connections", "0"],
        "--connections",
    ),
    (
        &["xdp", "rxdrop", "--iface", "lo", "--duration", "0"],
        "--duration",
    ),
    (&["xdp", "rxdrop", "--iface", "lo", "--batch=-1"], "--batch"),
    (&["switch", "--port", "lo", "--duration", "0"], "--duration"),
    (&["bench", "upcall", "--duration=-1"], "--duration"),
    (&["bench", "upcall", "--size", "59"], "--size"),
    (&["bench", "upcall", "--size", "0"], "--size"),
    (&["bench", "upcall", "--flows", "0"], "--flows"),
    (&["bench", "upcall", "--interval=-1"], "--interval"),
    (&["bench", "upcall", "--interval", "nan"], "--interval"),
    (&["xdp", "txpush", "--iface", "lo", "--size", "0"], "--size"),
    (&["xdp", "rxdrop", "--iface", "lo", "--queue=-1"], "--queue"),
    // Size sweeps: each size bounded as the bench's single size is, no size twice, and not with the
    // single-size flag.
    (&["bench", "tcp", "--sizes", "0"], "--sizes"),
    (&["bench", "tcp", "--sizes", ""], "--sizes"),
    (&["bench", "tcp", "--sizes", "1K,,4K"], "--sizes"),
    (&["bench", "tcp", "--sizes", "1K,4K,1K"], "--sizes"),
    (&["bench", "tcp", "--sizes", "1K,32M"], "--sizes"),
    (
        &["bench", "tcp", "--sizes", "1K", "--size", "4K"],
        "--sizes",
    ),
    (&["bench", "tcp", "--plot", "x.svg"], "--sizes"),
    (&["bench", "udp", "--sizes", "1K,70000"], "--sizes"),
    (&["bench", "udp", "--sizes", "4,1K"], "--sizes"),
    (
        &["bench", "udp", "--gso", "1400", "--sizes", "1K,90000"],
        "--sizes",
    ),
    (&["bench", "rx", "--sizes", "1500"], "--sizes"),
    (&["bench", "rx", "--sizes", "128M"], "--sizes"),
    (
        &["bench", "rx", "--sizes", "4K", "--write-kib", "4"],
        "--sizes",
    ),
    (
        &["bench", "vsock", "--sizes", "4K", "--buf-size", "4K"],
        "--sizes",
    ),
    (&["bench", "vsock", "--sizes", "4K,4K"], "--sizes"),
    (&["bench", "vsock", "--sizes", "2G"], "--sizes"),
    // Negative values given as a separate word: the value's parser names the flag.
    (&["bench", "tcp", "--size", "-1"], "--size"),
    (&["bench", "tcp", "--duration", "-5"], "--duration"),
    (&["bench", "rx", "--rounds", "-1"], "--rounds"),
    (&["bench", "xdp", "--batch", "-1"], "--batch"),
    (&["bench", "vsock", "--bytes", "-1"], "--bytes"),
    (
        &["xdp", "rxdrop", "--iface", "lo", "--queue", "-1"],
        "--queue",
    ),
    (&["bench", "xdp", "--coalesce-us", "-1"], "--coalesce-us"),
    (&["bench", "udp", "--size", "-1"], "--size"),
    (&["bench", "xdp", "--size", "-1"], "--size"),
    (&["bench", "upcall", "--size", "-1"], "--size"),
    (
        &["xdp", "txpush", "--iface", "lo", "--size", "-1"],
        "--size",
    ),
    (&["bench", "rx", "--mib", "-1"], "--mib"),
    (&["bench", "rx", "--rcvlowat-kib", "-1"], "--rcvlowat-kib"),
    // Values that wrapped, truncated or allocated without bound.
    (&["bench", "rx", "--mib", "17592186044416"], "--mib"),
    (&["bench", "rx", "--mib", "16777216G"], "--mib"),
    (
        &["xdp", "rxdrop", "--iface", "lo", "--queue", "65536"],
        "--queue",
    ),
    (
        &["xdp", "l2fwd", "--iface", "lo", "--queue", "4294967296"],
        "--queue",
    ),
    (
        &["xdp", "txpush", "--iface", "lo", "--queue", "65536"],
        "--queue",
    ),
    (
        &["xdp", "l2fwd", "--iface", "lo", "--queue", "65536"],
        "--queue",
    ),
    (
        &["bench", "xdp", "--coalesce-us", "4294967295"],
        "--coalesce-us",
    ),
    (
        &["bench", "xdp", "--coalesce-us", "1000001"],
        "--coalesce-us",
    ),
    (&["bench", "xdp", "--batch", "1G"], "--batch"),
    (
        &["xdp", "rxdrop", "--iface", "lo", "--batch", "1G"],
        "--batch",
    ),
    (
        &["xdp", "txpush", "--iface", "lo", "--batch", "1G"],
        "--batch",
    ),
    (
        &["xdp", "txpush", "--iface", "lo", "--batch", "4096"],
        "--batch",
    ),
    (
        &["xdp", "l2fwd", "--iface", "lo", "--batch", "1G"],
        "--batch",
    ),
    (&["bench", "rx", "--rcvlowat-kib", "1G"], "--rcvlowat-kib"),
    (&["bench", "rx", "--rcvlowat-kib", "x"], "--rcvlowat-kib"),
    (&["bench", "rx", "--rcvlowat-kib=-1"], "--rcvlowat-kib"),
    // txpush: every usage error exits 2.
    (
        &["xdp", "txpush", "--iface", "lo", "--size", "1048576"],
        "--size",
    ),
    (
        &["xdp", "txpush", "--iface", "lo", "--size", "2049"],
        "--size",
    ),
    (
        &["xdp", "txpush", "--iface", "lo", "--size", "53"],
        "--size",
    ),
    (
        &["xdp", "txpush", "--iface", "lo", "--dst-mac", "zz"],
        "--dst-mac",
    ),
    // Addresses.
    (&["bench", "tcp", "--listen", "::1"], "--listen"),
    (&["bench", "rx", "--listen", "::1"], "--listen"),
    (&["bench", "udp", "--listen", "::1"], "--listen"),
    (&["bench", "tcp", "--listen", "::"], "--listen"),
    (&["bench", "tcp", "--connect", "::1"], "--connect"),
    (&["bench", "rx", "--connect", "host:99999"], "--connect"),
    // A flag of the receiver given to the sender.
    (
        &["bench", "rx", "--connect", "127.0.0.1:9", "--interval", "2"],
        "--interval",
    ),
    // Timeouts of the TCP senders.
    (
        &["bench", "tcp", "--connect-timeout", "0"],
        "--connect-timeout",
    ),
    (&["bench", "tcp", "--send-timeout", "-1"], "--send-timeout"),
    (&["bench", "rx", "--send-timeout", "inf"], "--send-timeout"),
    (
        &["bench", "rx", "--connect-timeout", "nan"],
        "--connect-timeout",
    ),
];

/// Runs zcnet with `args` under a 1 GiB address-space limit: a value that made it allocate without
/// bound would abort instead of giving a usage error.
fn zcnet_limited(args: &[&str]) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", r#"ulimit -v 1048576 && exec "$0" "$@""#])
        .arg(env!("CARGO_BIN_EXE_zcnet"))
        .args(args);
    cmd
}

#[test]
fn bad_values_are_usage_errors_naming_the_flag() {
    let mut failures = Vec::new();
    for (args, flag) in TABLE {
        let out = zcnet_limited(args).output().expect("run zcnet");
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.code() != Some(2) || !err.contains(flag) || err.contains("panicked") {
            failures.push(format!("{args:?}: {} {err}", out.status));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `--listen` takes an IPv6 address with its port in brackets, and means it.
#[test]
fn listen_takes_a_bracketed_ipv6_address() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_zcnet"))
        .args(["bench", "tcp", "--listen", "[::1]:0", "--json", "--once"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run zcnet");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    // The receiver is this test's: stop it by its pid.
    let _ = child.kill();
    let _ = child.wait();
    let v: serde_json::Value = serde_json::from_str(&line).expect(&line);
    let addr: std::net::SocketAddr = v["listening"].as_str().unwrap().parse().unwrap();
    assert_eq!(addr.ip(), std::net::Ipv6Addr::LOCALHOST, "{line}");
}

/// Runs `zcnet bench ARGS` with its standard output to `stdout`: it must exit 1 saying `says`.
fn fails_saying(args: &[&str], stdout: std::process::Stdio, says: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_zcnet"))
        .arg("bench")
        .args(args)
        .stdout(stdout)
        .output()
        .expect("run zcnet");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(err.contains(says), "{args:?}: {err}");
}

/// An IPv6 address with its port outside brackets is shown bracketed, by `--listen` and `--connect`.
#[test]
fn an_ipv6_address_and_port_are_shown_in_brackets() {
    for (bench, flag) in [
        ("tcp", "--listen"),
        ("udp", "--connect"),
        ("rx", "--connect"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_zcnet"))
            .args(["bench", bench, flag, "::1:5401"])
            .output()
            .expect("run zcnet");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bench} {flag}: {err}");
        assert!(err.contains("[::1]:5401"), "{bench} {flag}: {err}");
    }
}

/// Help speaks of flags and values, not of zcnet's source.
#[test]
fn help_names_no_source_module() {
    for bench in ["tcp", "udp", "rx"] {
        let out = Command::new(env!("CARGO_BIN_EXE_zcnet"))
            .args(["bench", bench, "--help"])
            .output()
            .expect("run zcnet");
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{bench}: {help}");
        assert!(!help.contains("crate::"), "{bench}: {help}");
    }
}

/// A UDP send that fails says where it went: in a namespace of its own, with no route but
/// loopback, 192.0.2.1 is unreachable.
#[test]
fn a_failed_udp_send_names_its_destination() {
    if !testnet::privileged("a_failed_udp_send_names_its_destination") {
        return;
    }
    let ns = testnet::Netns::create("u").expect("a namespace");
    let out = ns
        .command(env!("CARGO_BIN_EXE_zcnet"))
        .args([
            "bench",
            "udp",
            "--connect",
            "192.0.2.1:9",
            "--duration",
            "0.1",
        ])
        .output()
        .expect("run zcnet");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("sending to 192.0.2.1:9"), "{err}");
    assert!(err.contains("unreachable"), "{err}");
}

/// A host name that does not resolve is named as such (not as a malformed HOST:PORT), by every
/// sender that connects.
#[test]
fn an_unresolved_host_name_is_named() {
    for bench in ["tcp", "udp", "rx"] {
        let args = [bench, "--connect", "nohost.invalid:1"];
        fails_saying(&args, std::process::Stdio::null(), "did not resolve");
    }
}

/// Output that cannot be written (a full device) fails the run, table or JSON.
#[test]
fn a_full_output_device_fails_the_run() {
    for args in [
        &["tcp", "--mode", "copy", "--duration", "0.2"][..],
        &["udp", "--mode", "copy", "--duration", "0.2", "--json"],
        &["rx", "--mode", "copy", "--mib", "4", "--rounds", "1"],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        fails_saying(args, full.into(), "writing the output");
    }
}

/// `--rounds 4294967295` asks for a long run, not for memory: each round is scheduled when it is due,
/// so the first run's interval line comes under the table's address-space limit (a schedule made
/// ahead grew past it and aborted before the first run).
#[test]
fn the_largest_round_count_starts_without_allocating_ahead() {
    let mut child = zcnet_limited(&[
        "bench",
        "tcp",
        "--rounds",
        "4294967295",
        "--mode",
        "copy",
        "--duration",
        "0.2",
        "--interval",
        "0.1",
        "--json",
    ])
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::null())
    .spawn()
    .expect("run zcnet");
    let stdout = child.stdout.take().unwrap();
    let (tx, first) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
        let _ = tx.send(line);
    });
    // Far above the tenth of a second the line takes: only a run that never starts reaches it.
    let line = first.recv_timeout(std::time::Duration::from_secs(60));
    // The run is this test's: stop it by its pid.
    let _ = child.kill();
    let _ = child.wait();
    let line = line.unwrap_or_default();
    let row: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("no interval line: {line:?}"));
    assert_eq!(row["interval"], true, "{line}");
}

/// (bench, the role's flag, flags of the other role, each with its value if it takes one): flags that
/// do not apply to the role `--listen` or `--connect` chose.
const OTHER_ROLE: &[(&str, &str, &[&str])] = &[
    // Receiver flags on a sender.
    (
        "tcp",
        "--connect",
        &["--once", "--max-streams 3", "--idle-timeout 3"],
    ),
    ("udp", "--connect", &["--once", "--iface lo"]),
    (
        "rx",
        "--connect",
        &[
            "--once",
            "--max-streams 3",
            "--idle-timeout 3",
            "--release lazy",
            "--window-kib 64",
            "--rcvlowat-kib 0",
        ],
    ),
    // Sender flags on a receiver.
    (
        "tcp",
        "--listen",
        &[
            "--raw",
            "--no-verify",
            "--duration 0.1",
            "--size 1",
            "--mode zerocopy",
            "--api io_uring",
            "--api sendmsg",
            "--rounds 5",
            "--threshold 1",
            "--pages huge",
            "--pool-buffers 8",
            "--connect-timeout 1",
            "--send-timeout 1",
            "--plot x.svg",
        ],
    ),
    (
        "udp",
        "--listen",
        &[
            "--raw",
            "--duration 0.1",
            "--size 64",
            "--mode zerocopy",
            "--api io_uring",
            "--api sendmsg",
            "--api sendmmsg",
            "--rounds 5",
            "--gso 1400",
            "--batch 8",
            "--pages huge",
            "--pool-buffers 8",
        ],
    ),
    (
        "rx",
        "--listen",
        &[
            "--raw",
            "--no-verify",
            "--sender copy",
            "--mib 1",
            "--write-kib 4",
            "--rounds 2",
            "--connect-timeout 1",
            "--plot x.svg",
        ],
    ),
];

/// A flag of the other role is a usage error naming it and the role's flag. The receivers are given
/// an address this test holds and the senders a closed loopback port, so that a flag let through ends
/// the run at once with another error instead of listening or sending.
#[test]
fn a_flag_of_the_other_role_is_a_usage_error() {
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let udp = std::net::UdpSocket::bind(tcp.local_addr().unwrap()).unwrap();
    let held = tcp.local_addr().unwrap().to_string();
    // A port nothing listens on once its listener is dropped: a connection to it is refused.
    let refusing = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .to_string();
    let mut failures = Vec::new();
    for &(bench, role, others) in OTHER_ROLE {
        let addr = if role == "--listen" { &held } else { &refusing };
        for other in others {
            let mut args = vec!["bench", bench, role, addr];
            args.extend(other.split_whitespace());
            let flag = args[4];
            let out = zcnet_limited(&args).output().expect("run zcnet");
            let err = String::from_utf8_lossy(&out.stderr);
            if out.status.code() != Some(2) || !err.contains(flag) || !err.contains(role) {
                failures.push(format!("{args:?}: {} {err}", out.status));
            }
        }
    }
    drop((tcp, udp));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A `--plot` FIFO is refused at once: opening it to write would wait for a reader, before the
/// sweep and again after it.
#[test]
fn a_plot_into_a_fifo_is_refused_before_the_sweep() {
    let dir = std::env::temp_dir().join(format!("zcnet-plot-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("plot.svg");
    testnet::run_checked("mkfifo", &[fifo.to_str().unwrap()]).expect("mkfifo");
    let mut child = Command::new(env!("CARGO_BIN_EXE_zcnet"))
        .args([
            "bench",
            "tcp",
            "--sizes",
            "4K,8K",
            "--duration",
            "0.2",
            "--plot",
        ])
        .arg(&fifo)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Far above a usage error's time; only a wait on the FIFO reaches it.
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() && start.elapsed().as_secs() < 10 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let waited = child.try_wait().unwrap().is_none();
    if waited {
        // This test's own child, ended by its pid.
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!waited, "zcnet waited on the FIFO");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--plot"), "{err}");
}
