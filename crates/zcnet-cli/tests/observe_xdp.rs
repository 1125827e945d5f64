//! `zcnet observe --pid` and `zcnet::observe::xdp_sockets_of` on an AF_XDP socket of this test
//! process, bound (copy mode) to queue 0 of a veth end in a namespace the test creates, its fill
//! ring left empty: every datagram redirected to it finds no buffer, so `fill_ring_empty` and
//! `rx_dropped` each grow by exactly the datagrams sent (zcnet's `Socket` is two kernel sockets on
//! its queue sharing one UMEM: the one in the XSKMAP drops them, and both show the shared fill
//! ring's emptiness). The library's figures must equal what
//! iproute2's `ss -f xdp -a -e` prints for the socket's inode, and the observer's rows must add up
//! to them. On a kernel without `xsk_diag` (ss lists no AF_XDP socket although one is bound), the
//! library must say so with `ObserveError::NoXdpDiag` and the observer name it as not seen.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::net::UdpSocket;
use std::sync::mpsc;
use std::thread::sleep;
use std::time::Duration;

use common::{json_lines, start_reading};
use serde_json::Value;
use testnet::VethPair;
use zcnet::observe::{ObserveError, XdpSocket, xdp_sockets_of};
use zcnet::xdp::{AttachMode, FrameMatch, Mode, Socket, Statistics, Umem, UmemConfig, XdpProgram};

const TEST: &str = "observe_pid_shows_an_af_xdp_sockets_counters_as_ss_does";
const PORT: u16 = 7311;
const DATAGRAMS: u64 = 40;

/// The socket inodes this process holds (`/proc/self/fd`).
fn socket_inodes() -> BTreeSet<u64> {
    std::fs::read_dir("/proc/self/fd")
        .expect("read /proc/self/fd")
        .filter_map(|e| {
            let link = std::fs::read_link(e.ok()?.path()).ok()?;
            let link = link.to_str()?;
            link.strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// `ss -f xdp -a -e -n` in `pair.a`: `None` when this ss has no AF_XDP support.
fn ss_xdp(pair: &VethPair) -> Option<String> {
    pair.a.exec("ss", &["-f", "xdp", "-a", "-e", "-n"]).ok()
}

/// The `stats(…)` ss prints for socket `inode`, by name (`rx dropped`, …), if it lists the socket.
fn ss_stats(ss: &str, inode: u64) -> Option<BTreeMap<String, u64>> {
    let needle = format!("ino:{inode}");
    let at = ss.match_indices(&needle).find_map(|(i, _)| {
        let next = ss[i + needle.len()..].chars().next();
        (!next.is_some_and(|c| c.is_ascii_digit())).then_some(i)
    })?;
    let rest = &ss[at..];
    let start = rest.find("stats(")? + "stats(".len();
    let inside = &rest[start..start + rest[start..].find(')')?];
    Some(
        inside
            .split(',')
            .filter_map(|pair| {
                let (name, value) = pair.rsplit_once(':')?;
                Some((name.trim().to_string(), value.trim().parse().ok()?))
            })
            .collect(),
    )
}

/// The library's view of this process's socket `inode`.
fn ours(inode: u64) -> Result<Option<XdpSocket>, ObserveError> {
    Ok(xdp_sockets_of(&[std::process::id()])?
        .into_iter()
        .map(|(_, s)| s)
        .find(|s| s.inode == inode))
}

fn sum_of(rows: &[&Value], field: &str) -> u64 {
    rows.iter().map(|r| r[field].as_u64().expect(field)).sum()
}

#[test]
fn observe_pid_shows_an_af_xdp_sockets_counters_as_ss_does() {
    if !testnet::privileged(TEST) || !testnet::may_trace(TEST) {
        return;
    }
    let pair = VethPair::one_queue().expect("veth pair");
    let before = socket_inodes();
    // A thread in namespace `a` binds the socket and holds it (and stays there, so that the
    // process has a thread in the socket's namespace) until told to let go.
    let (ready_tx, ready_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let a_if = pair.a_if.clone();
    let holder = pair
        .a
        .spawn(move || {
            let mut umem = Umem::new(UmemConfig::default()).expect("umem");
            let socket = Socket::bind(&mut umem, &a_if, 0, Mode::Copy).expect("bind");
            let program =
                XdpProgram::redirect_to_xsk(1, FrameMatch::UdpPort(PORT)).expect("program");
            program
                .xsk_map()
                .expect("map")
                .insert(0, &socket)
                .expect("insert");
            let link = program
                .attach_to(&a_if, AttachMode::Driver)
                .expect("attach");
            ready_tx.send(()).expect("ready");
            let _ = done_rx.recv();
            drop((link, program, socket, umem));
        })
        .expect("holder thread");
    ready_rx.recv().expect("socket bound");
    let new: Vec<u64> = socket_inodes().difference(&before).copied().collect();
    assert!(!new.is_empty(), "no new socket in /proc/self/fd");

    let ss = ss_xdp(&pair);
    let listed = ss
        .as_deref()
        .and_then(|text| new.iter().find(|&&i| ss_stats(text, i).is_some()).copied());
    let library = xdp_sockets_of(&[std::process::id()]);
    match (&ss, listed, &library) {
        (Some(_), None, _) | (None, _, Err(ObserveError::NoXdpDiag)) => {
            // ss lists no AF_XDP socket while ours is bound: the kernel has no xsk_diag.
            assert!(
                matches!(library, Err(ObserveError::NoXdpDiag)),
                "ss lists none of {new:?} ({ss:?}) but the library read {library:?}"
            );
            let out = observe_while(&pair, 0);
            let attached = &out[0];
            let said = attached["not_seen"].as_array().unwrap().iter().any(|b| {
                b["what"] == "AF_XDP socket counters"
                    && b["why"].as_str().unwrap().contains("xsk_diag")
            });
            assert!(said, "AF_XDP counters not named as unseen: {attached}");
            assert!(
                out.iter()
                    .all(|r| r["event"] != "xdp" && r["event"] != "xdp_summary"),
                "xdp rows without xsk_diag"
            );
            testnet::adapted(
                TEST,
                "the kernel has no xsk_diag: checked the typed reason, not the counters",
            );
        }
        (_, _, Err(e)) => panic!("the library could not read AF_XDP sockets: {e}"),
        (_, _, Ok(_)) => {
            // zcnet's Socket binds two AF_XDP sockets on its queue, sharing one UMEM: the one in
            // the XSKMAP, which drops what finds no buffer, and the one holding the fill and
            // completion rings. The fill ring's emptiness is the shared pool's: both show it.
            let start: Vec<XdpSocket> =
                new.iter().filter_map(|&i| ours(i).expect("read")).collect();
            assert!(!start.is_empty(), "none of {new:?} in the library's list");
            for socket in &start {
                assert_eq!(socket.queue_id, 0);
                assert_eq!(socket.interface.as_deref(), Some(pair.a_if.as_str()));
            }
            let out = observe_while(&pair, DATAGRAMS);
            let mut receiving = Vec::new();
            for socket in &start {
                let now = ours(socket.inode)
                    .expect("read")
                    .expect("still there")
                    .stats;
                let grown = now.since(&socket.stats);
                assert_eq!(grown.rx_fill_ring_empty_descs, DATAGRAMS, "{grown:?}");
                assert!(
                    grown.rx_dropped == 0 || grown.rx_dropped == DATAGRAMS,
                    "{grown:?}"
                );
                compare_with_ss(&pair, socket.inode, &now);
                if grown.rx_dropped == DATAGRAMS {
                    receiving.push(socket.inode);
                }
            }
            assert_eq!(receiving.len(), 1, "sockets that dropped: {receiving:?}");
            let name = format!("xdp {}:0", pair.a_if);
            let of_ours = |event: &str| -> Vec<&Value> {
                out.iter()
                    .filter(|r| r["event"] == event && r["inode"] == receiving[0])
                    .collect()
            };
            let rows = of_ours("xdp");
            let summary = of_ours("xdp_summary");
            assert_eq!(summary.len(), 1, "{out:?}");
            assert_eq!(summary[0]["socket"], name.as_str());
            for field in ["fill_ring_empty", "rx_dropped"] {
                assert_eq!(sum_of(&rows, field), DATAGRAMS, "{field} rows {rows:?}");
                assert_eq!(summary[0][field], DATAGRAMS, "{field}: {}", summary[0]);
            }
        }
    }
    done_tx.send(()).expect("let go");
    holder.join().expect("holder");
}

/// `zcnet observe --pid <this process> --json` over `datagrams` UDP datagrams sent from `b` to the
/// socket's port once it has read its starting counters (its first line), for 3 s; its lines.
fn observe_while(pair: &VethPair, datagrams: u64) -> Vec<Value> {
    let pid = std::process::id().to_string();
    let mut cmd = testnet::with_tracefs(common::ZCNET);
    cmd.args(["observe", "--pid", &pid, "--json", "--interval", "0.2"])
        .args(["--duration", "3"]);
    let (mut child, first, mut rest) = start_reading(&mut cmd);
    if datagrams > 0 {
        pair.b.run(|| {
            let sock = UdpSocket::bind((pair.b_v4, 0)).expect("bind sender");
            for i in 0..datagrams {
                sock.send_to(&i.to_le_bytes(), (pair.a_v4, PORT))
                    .expect("send");
                sleep(Duration::from_millis(5));
            }
        });
    }
    let mut text = first;
    rest.read_to_string(&mut text).expect("read observe");
    let status = child.wait().expect("wait");
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).ok();
    assert!(status.success(), "observe: {status}: {err}\n{text}");
    json_lines(&text)
}

/// `ss -f xdp -a -e` prints the same six counters for `inode`.
fn compare_with_ss(pair: &VethPair, inode: u64, stats: &Statistics) {
    let Some(text) = ss_xdp(pair) else {
        testnet::adapted(TEST, "ss has no AF_XDP support: not compared with ss");
        return;
    };
    let ss = ss_stats(&text, inode).unwrap_or_else(|| panic!("ss lists no {inode}: {text}"));
    let theirs = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| ss.get(*n).copied())
            .unwrap_or_else(|| panic!("no {names:?} in {ss:?}"))
    };
    assert_eq!(theirs(&["rx dropped"]), stats.rx_dropped, "{ss:?}");
    assert_eq!(theirs(&["rx invalid"]), stats.rx_invalid_descs, "{ss:?}");
    assert_eq!(theirs(&["rx queue full"]), stats.rx_ring_full, "{ss:?}");
    assert_eq!(
        theirs(&["rx fill ring empty", "fill ring empty"]),
        stats.rx_fill_ring_empty_descs,
        "{ss:?}"
    );
    assert_eq!(theirs(&["tx invalid"]), stats.tx_invalid_descs, "{ss:?}");
    assert_eq!(
        theirs(&["tx ring empty"]),
        stats.tx_ring_empty_descs,
        "{ss:?}"
    );
}

#[test]
fn ss_stats_are_read_for_the_right_inode() {
    let text = "u_xdp UNCONN 0 0 zc1a:q0 * ino:123 sk:1\n\tstats(rx dropped:5,rx invalid:0,rx queue full:1,rx fill ring empty:7,tx invalid:0,tx ring empty:2)\n\
                u_xdp UNCONN 0 0 zc1a:q1 * ino:12 sk:2\n\tstats(rx dropped:9,rx invalid:0,rx queue full:0,rx fill ring empty:0,tx invalid:0,tx ring empty:0)\n";
    assert_eq!(ss_stats(text, 123).unwrap()["rx fill ring empty"], 7);
    assert_eq!(ss_stats(text, 12).unwrap()["rx dropped"], 9);
    assert!(ss_stats(text, 1).is_none());
}
