//! `zcnet probe --measure --json` end to end: it ends in good time, lists every path, and each
//! verdict is what its own bench rows say (recomputed here from the rows alone); a path that cannot
//! run says why, naming the capability it lacks.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

use common::ZCNET;

/// Every path `probe --measure` reports, the ones that need root last.
const PATHS: &[&str] = &[
    "tcp_send",
    "tcp_receive",
    "io_uring_send",
    "udp_gso_xdp_drop",
    "af_xdp_rx",
];

/// The paths that build veth pairs, XDP programs and raw sockets, and the capabilities they name.
const ROOT_ONLY: &[(&str, &[&str])] = &[
    ("udp_gso_xdp_drop", &["CAP_SYS_ADMIN", "CAP_NET_ADMIN"]),
    (
        "af_xdp_rx",
        &["CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_NET_RAW"],
    ),
];

/// A bound for "does not hang" only: the run takes about 15 s on an idle 2-CPU host.
const BOUND: Duration = Duration::from_secs(60);

/// One run at a time: the benches of two runs would share the CPUs.
static TURN: Mutex<()> = Mutex::new(());

/// Runs `cmd` (a `probe --measure --json`) and returns its report and how long it took.
fn measured(cmd: &mut Command, what: &str) -> (Value, Duration) {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let start = Instant::now();
    let out = cmd.output().expect("run zcnet probe --measure");
    let took = start.elapsed();
    common::succeeded(&out, what);
    let _ = writeln!(std::io::stderr(), "{what} took {:.1} s", took.as_secs_f64());
    let report = serde_json::from_slice(&out.stdout).expect("one JSON object");
    (report, took)
}

/// The report of one run with this process's privileges, shared by the tests that read it.
fn report() -> &'static (Value, Duration) {
    static REPORT: OnceLock<(Value, Duration)> = OnceLock::new();
    REPORT.get_or_init(|| {
        measured(
            Command::new(ZCNET).args(["probe", "--measure", "--json"]),
            "probe --measure --json",
        )
    })
}

fn path<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["measure"]["paths"]
        .as_array()
        .expect("measure.paths")
        .iter()
        .find(|p| p["path"] == name)
        .unwrap_or_else(|| panic!("no path {name} in {report}"))
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_else(|| panic!("{key} in {v}"))
}

/// The cost per unit of `mode` over the rows: each row's cost times its units, over all units.
fn cost(rows: &[Value], compare: &Value, mode: &str) -> f64 {
    let (mut spent, mut units) = (0.0, 0.0);
    for row in rows
        .iter()
        .filter(|r| r[text(compare, "mode_field")] == mode)
    {
        let metric = row[text(compare, "metric")]
            .as_f64()
            .expect("the row's cost");
        let weight = row[text(compare, "weight")]
            .as_f64()
            .expect("the row's units");
        spent += metric * weight;
        units += weight;
    }
    assert!(units > 0.0, "no {mode} row moved anything: {rows:?}");
    spent / units
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Checks a measured path's verdict against its rows, and that its modes ran in alternating order.
fn check_verdict(p: &Value) {
    let name = text(p, "path");
    let compare = &p["compare"];
    let rows = p["rows"].as_array().expect("rows");
    let copy = cost(rows, compare, text(compare, "copy"));
    let zerocopy = cost(rows, compare, text(compare, "zerocopy"));
    let figures = &p["figures"];
    assert!(
        close(figures["copy_cost"].as_f64().unwrap(), copy),
        "{name}: {figures}"
    );
    assert!(
        close(figures["zerocopy_cost"].as_f64().unwrap(), zerocopy),
        "{name}: {figures}"
    );
    let change = (zerocopy / copy - 1.0) * 100.0;
    let margin = figures["margin_pct"].as_f64().unwrap();
    let pays = if change <= -margin {
        "yes"
    } else if change >= margin {
        "no"
    } else {
        "no clear difference"
    };
    assert_eq!(p["pays"], pays, "{name}: {change}% against copy, {figures}");
    assert_eq!(figures["pays"], pays, "{name}");
    let verdict = text(p, "verdict");
    assert!(
        verdict.starts_with(&format!(
            "zero-copy pays here: {pays}, {:.0}% ",
            change.abs()
        )),
        "{name}: {verdict}"
    );
    assert!(!text(p, "why").is_empty(), "{name}");

    // The two modes of each repetition (a round of bench tcp|udp, a run of the others) in the order
    // they ran: the second repetition reverses the first.
    let rep = if rows[0].get("round").is_some() {
        "round"
    } else {
        "run"
    };
    let order = |n: u64| -> Vec<&str> {
        rows.iter()
            .filter(|r| r[rep].as_u64() == Some(n))
            .map(|r| r[text(compare, "mode_field")].as_str().unwrap())
            .filter(|m| [text(compare, "copy"), text(compare, "zerocopy")].contains(m))
            .collect()
    };
    let (first, mut second) = (order(1), order(2));
    assert_eq!(first.len(), 2, "{name}: {rows:?}");
    second.reverse();
    assert_eq!(first, second, "{name}: the modes did not alternate");
}

/// Checks that a path that did not run says why, with a remedy.
fn check_unmeasured(p: &Value) {
    assert_eq!(p["pays"], "not measured", "{p}");
    assert!(text(p, "verdict").starts_with("not measured: "), "{p}");
    let why = &p["not_measured"];
    assert!(
        !text(why, "kind").is_empty() && !text(why, "remedy").is_empty(),
        "{p}"
    );
}

#[test]
fn probe_measure_lists_every_path_in_good_time() {
    let (report, took) = report();
    assert!(*took < BOUND, "probe --measure took {took:?}");
    assert!(report["kernel"].is_string() && report["features"].is_array());
    let paths = report["measure"]["paths"].as_array().unwrap();
    assert_eq!(paths.len(), PATHS.len(), "{report}");
    for name in PATHS {
        let p = path(report, name);
        assert!(!text(p, "what").is_empty());
        assert!(!p["commands"].as_array().unwrap().is_empty(), "{p}");
        let remote = &p["remote"];
        assert!(
            !text(remote, "question").is_empty() && text(remote, "run").contains("zcnet "),
            "{name}: {remote}"
        );
    }
}

#[test]
fn each_verdict_agrees_with_its_own_rows() {
    let (report, _) = report();
    for name in PATHS {
        let p = path(report, name);
        if p["measured"] == true {
            check_verdict(p);
        } else {
            check_unmeasured(p);
        }
    }
}

#[test]
fn as_root_every_path_is_measured() {
    if !testnet::privileged("as_root_every_path_is_measured") {
        return;
    }
    let (report, _) = report();
    for name in PATHS {
        let p = path(report, name);
        assert_eq!(p["measured"], true, "{p}");
    }
}

#[test]
fn without_capabilities_the_root_only_paths_name_what_they_lack() {
    // Root runs the probe with every capability dropped from its bounding set; a normal user has none.
    let mut cmd = if rustix::process::geteuid().is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--inh-caps=-all", "--bounding-set=-all", ZCNET]);
        c
    } else {
        Command::new(ZCNET)
    };
    cmd.args(["probe", "--measure", "--json"]);
    let (report, took) = measured(&mut cmd, "probe --measure --json without capabilities");
    assert!(took < BOUND, "probe --measure took {took:?}");
    for (name, caps) in ROOT_ONLY {
        let p = path(&report, name);
        check_unmeasured(p);
        let why = &p["not_measured"];
        assert_eq!(why["kind"], "capability", "{p}");
        assert_eq!(why["missing"], serde_json::json!(caps), "{p}");
        assert!(text(p, "verdict").contains(caps[1]), "{p}");
        assert!(text(why, "remedy").contains("root"), "{p}");
        assert!(p["rows"].as_array().unwrap().is_empty(), "{p}");
    }
    // Plain sockets need no capability: these paths are measured all the same.
    for name in ["tcp_send", "tcp_receive"] {
        let p = path(&report, name);
        assert_eq!(p["measured"], true, "{p}");
        check_verdict(p);
    }
}

/// A `probe --measure --json` started, once it says it is measuring `path`; its standard error.
fn probe_measuring(path: &str) -> (Child, BufReader<ChildStderr>) {
    let mut child = Command::new(ZCNET)
        .args(["probe", "--measure", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start zcnet probe --measure");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.starts_with(&format!("zcnet: measuring {path}")) {
        line.clear();
        let n = stderr.read_line(&mut line).expect("read standard error");
        assert!(n > 0, "the probe ended before measuring {path}");
    }
    (child, stderr)
}

#[test]
fn ctrl_c_ends_the_measure_and_every_path_left_says_so() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let (child, mut stderr) = probe_measuring("tcp_send");
    // Only the probe gets the signal (a terminal's Ctrl-C would reach its bench too): the bench
    // that runs ends in its time, and the probe then stops.
    common::sigint(&child);
    let mut rest = String::new();
    stderr
        .read_to_string(&mut rest)
        .expect("read standard error");
    let out = child.wait_with_output().expect("wait");
    common::succeeded(&out, "the interrupted probe");
    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let first = path(&report, "tcp_send");
    assert_eq!(first["not_measured"]["kind"], "interrupted", "{first}");
    for name in PATHS {
        let p = path(&report, name);
        check_unmeasured(p);
        let kind = text(&p["not_measured"], "kind");
        assert!(["interrupted", "capability"].contains(&kind), "{p}");
    }
    assert!(!rest.contains("measuring tcp_receive"), "{rest}");
}

#[test]
fn a_signal_to_the_probe_alone_ends_the_bench_it_runs_at_once() {
    if !testnet::privileged("a_signal_to_the_probe_alone_ends_the_bench_it_runs_at_once") {
        return;
    }
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let (child, mut stderr) = probe_measuring("udp_gso_xdp_drop");
    std::thread::sleep(Duration::from_millis(300));
    // The probe's pid alone: its bench (four runs of 0.5 s) learns of it only from the probe.
    common::sigint(&child);
    let signalled = Instant::now();
    let mut rest = String::new();
    stderr
        .read_to_string(&mut rest)
        .expect("read standard error");
    let out = child.wait_with_output().expect("wait");
    let took = signalled.elapsed();
    common::succeeded(&out, "the interrupted probe");
    // A bound far above the bench's own stop (a quarter of a second) and the harness's removal,
    // below the 2 s the bench's remaining runs take.
    assert!(
        took < Duration::from_secs(2),
        "the probe took {took:?} to stop"
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let p = path(&report, "udp_gso_xdp_drop");
    assert_eq!(p["not_measured"]["kind"], "interrupted", "{p}");
}
