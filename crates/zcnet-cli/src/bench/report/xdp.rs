//! Report: the rows of `zcnet bench xdp` as a table (or JSON), and for rxdrop AF_XDP's cost per
//! packet against TPACKET_V3's.

use serde_json::{Value, json};

use crate::bench::args::xdp::BenchXdpArgs;
use crate::report::{self, Row};
use crate::xdp::feed::Feed;

/// Prints `rows` as `args` asks.
pub(crate) fn print(rows: &[Row], args: &BenchXdpArgs) {
    report::print_rows(
        rows,
        &[
            ("app", "app"),
            ("path", "path"),
            ("feed", "feed"),
            ("mode", "mode"),
            ("packets", "packets"),
            ("seconds", "s"),
            ("mpps", "Mpps"),
            ("cpu_user_s", "user s"),
            ("cpu_sys_s", "sys s"),
            ("sys_cpu_ns_per_packet", "sys ns/pkt"),
            ("app_cpu_ns_per_packet", "app CPU ns/pkt"),
            ("app_threads_ns_per_packet", "app threads ns/pkt"),
            ("generator_mpps", "gen Mpps"),
            ("rx_dropped", "rx_dropped"),
            ("veth_dropped", "veth_dropped"),
            ("invalid_descs", "invalid"),
            ("kernel_copied_per_byte", "kernel copied/B"),
        ],
        args.json,
    );
    if !args.json {
        print_receiver_ratio(rows, args.feed);
    }
    print_copy_reasons(rows);
}

/// Why rows have no `kernel_copied_per_byte`, once per reason with the paths it holds for (on
/// standard error, also under `--json`).
fn print_copy_reasons(rows: &[Row]) {
    let mut reasons: Vec<(&str, Vec<String>)> = Vec::new();
    for row in rows {
        let Some(why) = row.get("kernel_copied_reason").and_then(Value::as_str) else {
            continue;
        };
        let name = |key| row.get(key).and_then(Value::as_str).unwrap_or("?");
        let path = format!("{} {}", name("app"), name("path"));
        match reasons.iter_mut().find(|(w, _)| *w == why) {
            Some((_, paths)) => paths.push(path),
            None => reasons.push((why, vec![path])),
        }
    }
    for (why, paths) in reasons {
        eprintln!("zcnet: kernel copied/B of {}: {why}", paths.join(", "));
    }
}

/// For rxdrop: AF_XDP's receiving-CPU cost per packet as a multiple of TPACKET_V3's.
fn print_receiver_ratio(rows: &[Row], feed: Feed) {
    let cost = |path: &str, field: &str| {
        rows.iter()
            .find(|r| r.get("app") == Some(&json!("rxdrop")) && r.get("path") == Some(&json!(path)))
            .and_then(|r| r.get(field))
            .and_then(Value::as_f64)
    };
    for (field, what) in [
        ("app_cpu_ns_per_packet", "busy time of the receiving CPU"),
        (
            "app_threads_ns_per_packet",
            "CPU time of the receiving threads (app, NAPI, ksoftirqd)",
        ),
    ] {
        if let (Some(xdp), Some(v3)) = (cost("af_xdp", field), cost("tpacket_v3", field)) {
            report::emit(&format!(
                "rxdrop (--feed {}): AF_XDP / TPACKET_V3 per packet, {what}: {:.2}x ({xdp:.0} vs \
                 {v3:.0} ns)\n",
                feed.as_str(),
                xdp / v3
            ));
        }
    }
}
