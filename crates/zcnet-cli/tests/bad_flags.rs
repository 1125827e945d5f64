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
    (&["bench", "tcp", "--listen", "nowhere"], "--listen"),
    (&["bench", "tcp", "--connect", "no-port"], "--connect"),
    (&["bench", "udp", "--size", "70000"], "--size"),
    (&["bench", "udp", "--gso", "0"], "--gso"),
    (
        &["bench", "udp", "--gso", "1000", "--size", "65000"],
        "--size",
    ),
    (&["bench", "udp", "--duration", "inf"], "--duration"),
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
    (&["bench", "vsock", "--bytes", "0"], "--bytes"),
    (&["bench", "vsock", "--buf-size", "12Q"], "--buf-size"),
    (&["bench", "vsock", "--vsk-size=-1"], "--vsk-size"),
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
];

#[test]
fn bad_values_are_usage_errors_naming_the_flag() {
    let mut failures = Vec::new();
    for (args, flag) in TABLE {
        let out = Command::new(env!("CARGO_BIN_EXE_zcnet"))
            .args(*args)
            .output()
            .expect("run zcnet");
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.code() != Some(2) || !err.contains(flag) || err.contains("panicked") {
            failures.push(format!("{args:?}: {} {err}", out.status));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
