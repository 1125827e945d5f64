//! The examples run as a user would run them (`cargo run --release --example …`) and say what they
//! promise: the blocking one moves all its bytes, the stream hasher's hash matches its sender's, the
//! object server's clients verify every object and its bench prints a row per mode and connection
//! count, and the io_uring sender's count of bytes is what its receiver read, from each source
//! (and from a pool on huge pages).

mod tx_common;

use std::io::ErrorKind;
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;

/// Runs `cargo run --release --example name -- args` for this package; returns its standard output.
/// When this user may not run the cargo that built the test (a test binary built by another user
/// whose toolchain it cannot reach, as CI's run as a normal user is), it runs the example binary
/// that build made beside this test (`target/release/examples/NAME`) instead, and says so.
fn run_example(name: &str, args: &[&str]) -> String {
    let cargo = env!("CARGO");
    let ran = Command::new(cargo)
        .args([
            "run",
            "--quiet",
            "--release",
            "-p",
            "zcnet",
            "--example",
            name,
            "--",
        ])
        .args(args)
        .output();
    let out = match ran {
        Ok(out) => out,
        Err(e) if matches!(e.kind(), ErrorKind::PermissionDenied | ErrorKind::NotFound) => {
            let exe = std::env::current_exe().expect("this test's path");
            let built = exe
                .parent()
                .and_then(Path::parent)
                .expect("target/release/deps")
                .join("examples")
                .join(name);
            assert!(
                built.is_file(),
                "cannot run {cargo} ({e}) and no {} (build it with cargo test --release --no-run)",
                built.display()
            );
            testnet::adapted(
                &format!("example {name}"),
                &format!("cannot run {cargo} ({e}): running {}", built.display()),
            );
            Command::new(&built)
                .args(args)
                .output()
                .unwrap_or_else(|e| panic!("run {}: {e}", built.display()))
        }
        Err(e) => panic!("run {cargo}: {e}"),
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "example {name} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{stdout}");
    stdout
}

#[test]
fn blocking_example_sends_every_byte() {
    let out = run_example("blocking", &[]);
    assert!(out.contains("received 67108864 bytes"), "{out}");
}

#[test]
fn stream_hasher_example_hashes_what_was_sent() {
    let out = run_example("stream_hasher", &[]);
    assert!(out.contains("hash matches the sender's"), "{out}");
    assert!(out.contains("mmap'ed"), "{out}");
}

#[test]
fn object_server_example_serves_verified_objects_and_benches() {
    let out = run_example(
        "object_server",
        &[
            "--clients",
            "8",
            "--requests",
            "4",
            "--object-mib",
            "1",
            "--mode",
            "zerocopy",
        ],
    );
    assert!(out.contains("8 clients verified 4 objects each"), "{out}");
    assert!(out.contains("ids zero-copied"), "{out}");
    let out = run_example(
        "object_server",
        &[
            "--bench",
            "--rounds",
            "1",
            "--mib",
            "32",
            "--connections",
            "1,4",
        ],
    );
    for row in [
        "mode zerocopy, 1 connections",
        "mode zerocopy, 4 connections",
        "mode auto, 4 connections",
    ] {
        assert!(out.contains(row), "{row} missing: {out}");
    }
}

#[test]
fn uring_send_example_counts_what_its_receiver_reads_from_each_source() {
    let test = "uring_send_example_counts_what_its_receiver_reads_from_each_source";
    if !tx_common::io_uring_available(test) {
        return;
    }
    for source in ["pool", "one", "frozen:3", "pool huge", "unaligned:2048"] {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let reader = std::thread::spawn(move || {
            let (conn, _) = listener.accept().expect("accept");
            tx_common::read_checksum(conn).len
        });
        let mut args = vec![addr.as_str(), "65536", "0.3"];
        args.extend(source.split(' '));
        let out = run_example("uring_send", &args);
        let bytes: u64 = out
            .split_whitespace()
            .skip_while(|w| *w != "bytes")
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{source}: no byte count in {out}"));
        assert!(bytes > 0, "{source}: {out}");
        assert_eq!(reader.join().expect("reader"), bytes, "{source}: {out}");
    }
}
