//! `zcnet bench udp --api af_xdp`: rows of the AF_XDP UDP endpoint beside sendmsg and io_uring in
//! one run into the XDP drop sink, every datagram the endpoint sent counted by the receiving veth
//! end, and a per-packet CPU cost on every row; the endpoint as a `--listen` receiver on both queues
//! of a veth end, every datagram of a `--connect` run accounted for and verified. Rates are only
//! checked to be positive.

mod common;

use std::io::BufReader;
use std::process::{Child, ChildStdout, Command};

use common::{ZCNET, json_rows, modes_and_apis, start_reading, stdout_of, u};
use serde_json::Value;
use testnet::{VethConfig, VethPair};

/// Frames the receiving end may count beyond the bench's datagrams: what the sending namespace's
/// own stack sends while a run lasts (IPv6 router solicitations, MLD reports).
const STRAY_FRAMES: u64 = 16;

fn bench(args: &[&str]) -> Vec<Value> {
    let mut cmd = Command::new(ZCNET);
    cmd.args(["bench", "udp", "--sink", "xdp-drop"])
        .args(args)
        .args(["--duration", "0.3", "--json", "--interval", "0"]);
    json_rows(&stdout_of(&mut cmd, &format!("zcnet bench udp {args:?}")))
}

/// Checks every row of a run of `size`-byte datagrams; returns the af_xdp rows.
fn check_rows(rows: &[Value], size: u64) -> Vec<&Value> {
    for row in rows {
        assert_eq!(row["path"], "xdp-drop", "{row}");
        assert!(u(row, "datagrams") > 0, "{row}");
        assert_eq!(u(row, "bytes"), u(row, "datagrams") * size, "{row}");
        assert!(row["cpu_ns_per_packet"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["cpu_us_per_mb"].as_f64().unwrap() > 0.0, "{row}");
    }
    let af_xdp: Vec<&Value> = rows.iter().filter(|r| r["api"] == "af_xdp").collect();
    for row in &af_xdp {
        let (sent, seen) = (u(row, "datagrams"), u(row, "sink_frames"));
        assert!(
            seen >= sent && seen <= sent + STRAY_FRAMES,
            "the sink counted {seen} frames for {sent} datagrams: {row}"
        );
        assert_eq!(u(row, "lost"), 0, "{row}");
        // veth has no AF_XDP zero-copy (kernel-facts.md): every mode binds in copy mode.
        assert_eq!(row["xdp_mode"], "copy", "{row}");
        // Copy mode hands UDP checksums to the kernel where it registers TX metadata room.
        let offload = zcnet::xdp::probe_tx_metadata_umem().is_ok_and(|refused| refused.is_none());
        assert_eq!(row["checksum_offload"], offload, "{row}");
    }
    af_xdp
}

#[test]
fn af_xdp_rows_beside_the_socket_apis_every_datagram_counted() {
    if !testnet::privileged("af_xdp_rows_beside_the_socket_apis_every_datagram_counted") {
        return;
    }
    let rows = bench(&[
        "--api",
        "sendmsg,io_uring,af_xdp",
        "--mode",
        "copy,zerocopy",
        "--size",
        "64",
    ]);
    assert_eq!(
        modes_and_apis(&rows),
        [
            ("copy", "sendmsg"),
            ("copy", "io_uring"),
            ("copy", "af_xdp"),
            ("zerocopy", "sendmsg"),
            ("zerocopy", "io_uring"),
            ("zerocopy", "af_xdp"),
        ]
    );
    let af_xdp = check_rows(&rows, 64);
    // Zero-copy was asked for and refused: the row says why.
    let why = af_xdp[1]["why"].as_str().unwrap();
    assert!(why.contains("XDP_ZEROCOPY"), "{}", af_xdp[1]);
}

#[test]
fn af_xdp_over_ipv6_at_1400_bytes() {
    if !testnet::privileged("af_xdp_over_ipv6_at_1400_bytes") {
        return;
    }
    let rows = bench(&[
        "--api", "af_xdp", "--mode", "copy", "--size", "1400", "--ipv6",
    ]);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["ip"], "v6", "{}", rows[0]);
    check_rows(&rows, 1400);
}

/// For a privileged `test`: a veth pair with two queues on each end, the receiving end `b`'s
/// addresses pinned as neighbours of `a`. AF_XDP carries no checksum status: the kernel sender must
/// put whole checksums in, so transmit checksum offload is off.
fn listener_pair(test: &str) -> Option<VethPair> {
    if !testnet::privileged(test) {
        return None;
    }
    let pair = VethPair::new(VethConfig::full_checksums(2)).expect("veth harness");
    pair.pin_b_neighbours().expect("static neighbours");
    Some(pair)
}

/// `zcnet bench udp --listen ADDR --api af_xdp --once` on `b`'s end, once it says it listens; its
/// stdout after that line.
fn af_xdp_listener(
    pair: &VethPair,
    addr: &str,
    ip: Option<&str>,
) -> (Child, BufReader<ChildStdout>) {
    let mut cmd = pair.b.command(ZCNET);
    cmd.args(["bench", "udp", "--listen", addr, "--api", "af_xdp"])
        .args(["--iface", &pair.b_if, "--once", "--json", "--interval", "0"])
        .args(ip);
    let (child, line, stdout) = start_reading(&mut cmd);
    assert!(line.contains("listening"), "{line:?}");
    (child, stdout)
}

#[test]
fn af_xdp_listen_receives_every_datagram_verified() {
    let Some(pair) = listener_pair("af_xdp_listen_receives_every_datagram_verified") else {
        return;
    };
    for (addr, ip) in [
        (format!("{}:5301", pair.b_v4), None),
        (format!("[{}]:5302", pair.b_v6), Some("--ipv6")),
    ] {
        let (child, stdout) = af_xdp_listener(&pair, &addr, ip);
        let mut sender = pair.a.command(ZCNET);
        sender
            .args([
                "bench",
                "udp",
                "--connect",
                &addr,
                "--json",
                "--mode",
                "copy",
            ])
            .args(["--size", "1000", "--duration", "0.3"])
            .args(ip);
        let sent = json_rows(&stdout_of(&mut sender, "the sender"));
        let rest = std::io::read_to_string(stdout).unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let rows = json_rows(&rest);
        assert_eq!(rows.len(), 1, "{rows:?} {stderr}");
        let got = &rows[0];
        eprintln!("{got}");
        assert_eq!(got["api"], "af_xdp", "{got}");
        assert_eq!(got["xdp_mode"], "copy", "{got}");
        assert_eq!(got["verified"], true, "{got}");
        assert_eq!(got["data_errors"], 0, "{got}");
        assert_eq!(
            (u(got, "malformed"), u(got, "bad_checksum")),
            (0, 0),
            "{got}"
        );
        let sent_datagrams = u(&sent[0], "datagrams");
        assert_eq!(u(got, "sent_datagrams"), sent_datagrams, "{got}");
        // Every datagram sent arrived or is counted lost (the rx ring may overflow under a flood;
        // the receiver then fails the run, naming the loss).
        assert_eq!(
            u(got, "datagrams") + u(got, "lost"),
            sent_datagrams,
            "{got}"
        );
        assert_eq!(u(got, "bytes"), u(got, "datagrams") * 1000, "{got}");
        assert!(got["cpu_ns_per_packet"].as_f64().unwrap() > 0.0, "{got}");
        if u(got, "lost") == 0 {
            assert!(out.status.success(), "{got} {stderr}");
        } else {
            assert_eq!(out.status.code(), Some(1), "{got} {stderr}");
            assert!(stderr.contains("datagrams lost"), "{stderr}");
        }
    }
}

/// An AF_XDP listener bound to every address answers a header from the address it was sent to: a
/// sender connected to the receiving end's second address (whose socket takes datagrams from that
/// address only) hears the acceptance.
#[test]
fn af_xdp_listen_on_every_address_answers_from_the_address_sent_to() {
    let test = "af_xdp_listen_on_every_address_answers_from_the_address_sent_to";
    let Some(pair) = listener_pair(test) else {
        return;
    };
    let second = "10.77.0.3";
    pair.b
        .ip(&["addr", "add", &format!("{second}/24"), "dev", &pair.b_if])
        .expect("a second address on the receiving end");
    let b_mac = pair.mac(&pair.b_if).expect("the receiving end's MAC");
    let lladdr = b_mac.map(|b| format!("{b:02x}")).join(":");
    pair.a
        .ip(&[
            "neigh",
            "replace",
            second,
            "lladdr",
            &lladdr,
            "dev",
            &pair.a_if,
            "nud",
            "permanent",
        ])
        .expect("a neighbour entry for the second address");
    let (child, stdout) = af_xdp_listener(&pair, "0.0.0.0:5304", None);
    // A header of a verified copy run of 1000-byte datagrams (crate::wire's layout), offered until
    // answered (the receiving end may first have to resolve the sender's address), then an end of
    // no datagrams, which ends the --once run.
    let mut header = b"ZCNETBH1".to_vec();
    header.extend([2, 0, 1, 0]);
    header.extend(1000u32.to_le_bytes());
    header.extend(1000u64.to_le_bytes());
    header.extend(0u64.to_le_bytes());
    let mut end = b"ZCNETEN1".to_vec();
    end.extend([0u8; 16]);
    let to = format!("{second}:5304");
    let answer = pair.a.run(move || {
        let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        socket.connect(&to).unwrap();
        socket
            .set_read_timeout(Some(std::time::Duration::from_millis(300)))
            .unwrap();
        let mut buf = [0u8; 512];
        let mut answer = None;
        for _ in 0..10 {
            socket.send(&header).unwrap();
            if let Ok(n) = socket.recv(&mut buf) {
                answer = Some(buf[..n].to_vec());
                break;
            }
        }
        socket.send(&end).unwrap();
        answer
    });
    let rest = std::io::read_to_string(stdout).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        answer.as_deref(),
        Some(&b"ZCNETOK1"[..]),
        "no acceptance from {second}; receiver: {rest} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
