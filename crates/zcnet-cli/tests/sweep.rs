//! `zcnet bench … --sizes` and `--plot`: a short sweep over loopback gives a row per size and mode,
//! every byte verified, the modes' order alternating from one size to the next, and a crossover
//! that agrees with the rows; with `--connect` the receiver takes a stream per size and mode; the
//! picture is an SVG with its axes, units and legend, and headless Chromium draws it as a picture
//! that is not blank.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ZCNET, json_rows, listen_command, sigint, start_listener, stdout_of, u};
use serde_json::Value;

/// The rows of a run and its crossover objects, apart.
fn rows_and_crossovers(stdout: &str) -> (Vec<Value>, Vec<Value>) {
    json_rows(stdout)
        .into_iter()
        .filter(|r| r.get("total").is_none())
        .partition(|r| r.get("crossover").is_none())
}

/// The crossover computed here from the rows alone: per size the mean CPU per MB of each mode over
/// its rows, and the smallest size from which zerocopy's is below copy's at every size on.
fn crossover_of(rows: &[Value]) -> Option<u64> {
    let sizes: BTreeSet<u64> = rows.iter().map(|r| u(r, "size")).collect();
    let mean = |mode: &str, size: u64| {
        let of: Vec<f64> = rows
            .iter()
            .filter(|r| r["mode"] == mode && u(r, "size") == size)
            .map(|r| r["cpu_us_per_mb"].as_f64().unwrap())
            .collect();
        of.iter().sum::<f64>() / of.len() as f64
    };
    let mut from = None;
    for &size in sizes.iter().rev() {
        if mean("zerocopy", size) < mean("copy", size) {
            from = Some(size);
        } else {
            break;
        }
    }
    from
}

/// The one crossover object agrees with [`crossover_of`] the rows.
fn check_crossover(rows: &[Value], crossovers: &[Value], bench: &str) {
    assert_eq!(crossovers.len(), 1, "{crossovers:?}");
    let c = &crossovers[0];
    assert_eq!(c["bench"], bench, "{c}");
    let from = crossover_of(rows);
    assert_eq!(
        c["zerocopy_cheaper_from"].as_u64(),
        from,
        "{c} against {rows:?}"
    );
    let said = c["crossover"].as_str().unwrap();
    match from {
        // Sizes print as the flag takes them: K or M when whole, bytes otherwise (14000).
        Some(size) => {
            let size = match size {
                s if s % (1 << 20) == 0 => format!("{}M", s >> 20),
                s if s % (1 << 10) == 0 => format!("{}K", s >> 10),
                s => s.to_string(),
            };
            assert_eq!(said, format!("zero-copy cheaper from {size}"), "{c}")
        }
        None => assert_eq!(said, "zero-copy never cheaper on this path", "{c}"),
    }
}

/// Each row's size and mode, in order.
fn cells(rows: &[Value]) -> Vec<(u64, &str)> {
    rows.iter()
        .map(|r| (u(r, "size"), r["mode"].as_str().unwrap()))
        .collect()
}

/// Each size's first mode: the order of the modes must alternate from one size to the next.
fn first_modes(rows: &[Value]) -> Vec<(u64, String)> {
    let mut firsts: Vec<(u64, String)> = Vec::new();
    for r in rows {
        let size = u(r, "size");
        if firsts.last().is_none_or(|(s, _)| *s != size) {
            firsts.push((size, r["mode"].as_str().unwrap().to_string()));
        }
    }
    firsts
}

/// A fresh directory for a test's files, removed with its contents at the end of the test.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("zcnet-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A short tcp sweep into `plot`: 1K, 4K and 16K sends, every mode, 0.2 s each.
fn tcp_sweep(plot: &Path) -> String {
    let mut cmd = Command::new(ZCNET);
    cmd.args(["bench", "tcp", "--sizes", "1K,4K,16K"])
        .args(["--mode", "copy,zerocopy,auto", "--duration", "0.2"])
        .args(["--interval", "0", "--json", "--plot"])
        .arg(plot);
    stdout_of(&mut cmd, "zcnet bench tcp --sizes")
}

#[test]
fn tcp_sweep_has_a_row_per_size_and_mode_in_alternating_order_and_its_crossover() {
    let dir = TempDir::new("tcp-sweep");
    let plot = dir.0.join("sweep.svg");
    let (rows, crossovers) = rows_and_crossovers(&tcp_sweep(&plot));
    assert_eq!(
        cells(&rows),
        [
            (1024, "copy"),
            (1024, "zerocopy"),
            (1024, "auto"),
            (4096, "auto"),
            (4096, "zerocopy"),
            (4096, "copy"),
            (16384, "copy"),
            (16384, "zerocopy"),
            (16384, "auto"),
        ]
    );
    for r in &rows {
        assert!(u(r, "bytes") > 0, "{r}");
        assert_eq!(u(r, "received_bytes"), u(r, "bytes"), "{r}");
        assert_eq!(u(r, "data_errors"), 0, "{r}");
    }
    check_crossover(&rows, &crossovers, "tcp");
    check_svg(&plot, &["tcp", "loopback"], &["copy", "zerocopy", "auto"]);
}

/// The SVG parses as XML and holds its title (naming each of `title_words`), both axes with their
/// units, the size labels, a legend entry for each of `modes` and the crossover sentence.
fn check_svg(file: &Path, title_words: &[&str], modes: &[&str]) {
    let text = std::fs::read_to_string(file).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("the plot is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(|t| t.trim().to_string())
        .collect();
    let has = |want: &str| texts.iter().any(|t| t.contains(want));
    let title = texts
        .iter()
        .find(|t| t.starts_with("zcnet bench"))
        .unwrap_or_else(|| panic!("no title in {texts:?}"));
    for word in title_words {
        assert!(title.contains(word), "{title}");
    }
    for want in [
        "Gbit/s",
        "CPU µs per MB",
        "bytes per send (log2 scale)",
        "1K",
        "4K",
        "16K",
    ] {
        assert!(has(want), "{want:?} missing from {texts:?}");
    }
    for mode in modes {
        assert!(
            texts.iter().any(|t| t == mode),
            "no legend for {mode} in {texts:?}"
        );
    }
    assert!(
        has("zero-copy cheaper from") || has("zero-copy never cheaper on this path"),
        "{texts:?}"
    );
}

/// UDP with GSO: each size is the bytes of one send, cut into 1400-byte datagrams. Unverified: a
/// flood over loopback loses datagrams in the receiver's socket (a normal user cannot enlarge its
/// buffer past `rmem_max`), and a verified run that loses some fails; the receiver still counts
/// every datagram by its sequence number.
#[test]
fn udp_gso_sweep_over_loopback_counts_every_datagram() {
    let mut cmd = Command::new(ZCNET);
    cmd.args(["bench", "udp", "--gso", "1400", "--sizes", "1400,14000"])
        .args(["--mode", "copy,zerocopy", "--duration", "0.2"])
        .args(["--interval", "0", "--json", "--no-verify"]);
    let (rows, crossovers) = rows_and_crossovers(&stdout_of(&mut cmd, "zcnet bench udp --sizes"));
    let sizes: Vec<u64> = rows.iter().map(|r| u(r, "size")).collect();
    assert_eq!(sizes, [1400, 1400, 14000, 14000]);
    assert_eq!(
        first_modes(&rows),
        [(1400, "copy".to_string()), (14000, "zerocopy".to_string())]
    );
    for r in &rows {
        assert_eq!(u(r, "gso"), 1400, "{r}");
        // Every send of `size` bytes leaves as whole 1400-byte datagrams.
        assert_eq!(u(r, "sent_datagrams") * 1400, u(r, "bytes"), "{r}");
        let received = u(r, "received_datagrams") - u(r, "duplicated");
        assert_eq!(u(r, "lost"), u(r, "sent_datagrams") - received, "{r}");
    }
    check_crossover(&rows, &crossovers, "udp");
}

#[test]
fn rx_sweep_sums_its_rounds_per_size_and_mode() {
    let mut cmd = Command::new(ZCNET);
    cmd.args([
        "bench",
        "rx",
        "--sizes",
        "4K,64K",
        "--mode",
        "copy,zerocopy",
    ])
    .args(["--mib", "8", "--rounds", "2", "--interval", "0", "--json"]);
    let (rows, crossovers) = rows_and_crossovers(&stdout_of(&mut cmd, "zcnet bench rx --sizes"));
    assert_eq!(
        cells(&rows),
        [
            (4096, "copy"),
            (4096, "zerocopy"),
            (65536, "copy"),
            (65536, "zerocopy")
        ]
    );
    for r in &rows {
        assert_eq!(u(r, "rounds"), 2, "{r}");
        assert_eq!(u(r, "bytes"), 2 * (8 << 20), "{r}");
        assert_eq!(r["verified"], true, "{r}");
    }
    check_crossover(&rows, &crossovers, "rx");
}

/// With `--connect` the sender drives the sweep: its rows carry the sizes, and a `--listen` receiver
/// takes one stream per size and mode, each whole and verified, naming its size.
#[test]
fn tcp_and_rx_sweeps_apart_send_a_stream_per_size_and_mode() {
    for bench in ["tcp", "rx"] {
        let mut listen = listen_command(bench);
        if bench == "rx" {
            listen.args(["--mode", "copy,zerocopy"]);
        }
        let (mut child, addr, stdout) = start_listener(&mut listen);
        let mut send = Command::new(ZCNET);
        send.args(["bench", bench, "--connect", &addr.to_string()])
            .args(["--sizes", "4K,16K", "--mode", "copy,zerocopy", "--json"]);
        if bench == "rx" {
            send.args(["--mib", "4", "--rounds", "1"]);
        } else {
            send.args(["--duration", "0.2", "--interval", "0"]);
        }
        let out = send.output().unwrap();
        if !out.status.success() {
            // The receiver would wait for streams that never come.
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{bench}: the sweeping sender {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let sent = json_rows(&String::from_utf8_lossy(&out.stdout));
        let sent: Vec<&Value> = sent.iter().filter(|r| r.get("size").is_some()).collect();
        let sizes: Vec<u64> = sent.iter().map(|r| u(r, "size")).collect();
        assert_eq!(sizes, [4096, 4096, 16384, 16384], "{bench}: {sent:?}");
        // Each stream's row, as the receiver reports it once the stream is whole; Ctrl-C then
        // ends the receiver.
        let (lines, rest) = std::sync::mpsc::channel();
        let reading = std::thread::spawn(move || {
            for line in std::io::BufRead::lines(stdout) {
                let Ok(line) = line else { break };
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let mut received = Vec::new();
        while received.len() < 4 {
            let line = rest
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|e| panic!("{bench}: the receiver reported {received:?}: {e}"));
            let row: Value = serde_json::from_str(&line).unwrap();
            if row["role"] == "receiver" {
                received.push(row);
            }
        }
        drop(rest);
        sigint(&child);
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{bench} receiver: {}", out.status);
        reading.join().unwrap();
        let mut cells: Vec<(u64, String)> = received
            .iter()
            .map(|r| {
                assert_eq!(r["complete"], true, "{bench}: {r}");
                assert_eq!(r["data_errors"], 0, "{bench}: {r}");
                // The rx receiver reads each stream in its next --mode; the tcp one names the
                // sender's.
                let mode = r.get("mode").unwrap_or(&r["sender_mode"]);
                (u(r, "size"), mode.as_str().unwrap().to_string())
            })
            .collect();
        cells.sort();
        let expected: Vec<(u64, String)> = [4096, 16384]
            .into_iter()
            .flat_map(|size| ["copy", "zerocopy"].map(|m| (size, m.to_string())))
            .collect();
        assert_eq!(cells, expected, "{bench}");
    }
}

/// Chromium's headless screenshot of `svg` (a PNG in `dir`), or why it cannot be taken here.
fn screenshot(svg: &Path, dir: &Path) -> Result<PathBuf, String> {
    let chromium = ["/usr/bin/chromium", "/bin/chromium"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists())
        .ok_or("chromium is not installed (scripts/install-deps installs it as root)")?;
    let png = dir.join("shot.png");
    // Chromium needs a writable home and profile; --no-sandbox because root (and a container
    // without user namespaces) cannot use its sandbox.
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg(format!(
            "--user-data-dir={}",
            home.join("profile").display()
        ))
        .arg(format!("--screenshot={}", png.display()))
        .args(["--window-size=1280,540"])
        .arg(format!("file://{}", svg.display()))
        .env("HOME", &home)
        .env("TMPDIR", dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting chromium: {e}"))?;
    // A generous bound: a hung browser must not hang the suite.
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = child.wait_with_output().unwrap();
    assert!(
        status.success() && png.exists(),
        "chromium {status}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(png)
}

#[test]
fn a_sweep_plot_renders_in_headless_chromium_as_a_picture() {
    const TEST: &str = "a_sweep_plot_renders_in_headless_chromium_as_a_picture";
    let dir = TempDir::new("plot-render");
    let svg = dir.0.join("sweep.svg");
    let mut cmd = Command::new(ZCNET);
    cmd.args([
        "bench",
        "tcp",
        "--sizes",
        "4K,64K",
        "--mode",
        "copy,zerocopy",
    ])
    .args(["--duration", "0.1", "--interval", "0", "--plot"])
    .arg(&svg);
    stdout_of(&mut cmd, "zcnet bench tcp --sizes --plot");
    let png = match screenshot(&svg, &dir.0) {
        Ok(png) => png,
        Err(why) => {
            testnet::skip(TEST, &why);
            return;
        }
    };
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    assert!(channels >= 3, "{:?}", info.color_type);
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()]
        .chunks(channels)
        .map(|p| &p[..3])
        .collect();
    assert_eq!(pixels.len(), (info.width * info.height) as usize);
    let inked = pixels.iter().filter(|p| p.iter().any(|&c| c < 200)).count();
    let colours: BTreeSet<&[u8]> = pixels.iter().copied().collect();
    // Axes, grid, text and the lines: a few percent of the picture is ink, in many shades
    // (anti-aliased text and the modes' colours); a blank or failed page is one colour.
    assert!(
        inked * 100 > pixels.len(),
        "{inked} of {} pixels inked",
        pixels.len()
    );
    assert!(colours.len() > 50, "{} distinct colours", colours.len());
    // The modes' colours are there: copy's blue and zerocopy's red lines.
    let near = |want: [u8; 3]| {
        pixels.iter().any(|p| {
            p.iter()
                .zip(want)
                .all(|(&c, w)| (i16::from(c) - i16::from(w)).abs() < 24)
        })
    };
    assert!(near([31, 119, 180]), "no line of copy's colour");
    assert!(near([214, 39, 40]), "no line of zerocopy's colour");
}

/// A bad list is a usage error (exit status 2) naming `--sizes` and what is wrong with it, as the
/// bench's single-size flag would be.
#[test]
fn bad_size_lists_say_what_is_wrong() {
    let table: &[(&[&str], &str)] = &[
        (
            &["tcp", "--sizes", "1K", "--size", "4K"],
            "'--sizes <SIZES>' cannot be used with '--size <SIZE>'",
        ),
        (
            &["rx", "--sizes", "4K", "--write-kib", "4"],
            "'--sizes <SIZES>' cannot be used with '--write-kib",
        ),
        (
            &["vsock", "--sizes", "4K", "--buf-size", "4K"],
            "'--sizes <SIZES>' cannot be used with '--buf-size",
        ),
        (
            &["tcp", "--sizes", ""],
            "invalid value '' for '--sizes <SIZES>'",
        ),
        (
            &["tcp", "--sizes", "1K,0"],
            "invalid value '0' for '--sizes <SIZES>': must be at least 1",
        ),
        (&["tcp", "--sizes", "1K,4K,1K"], "--sizes lists 1K twice"),
        (
            &["tcp", "--sizes", "1K,32M"],
            "--sizes 33554432 is above the limit of 16777216",
        ),
        (
            &["udp", "--gso", "1400", "--sizes", "1K,90000"],
            "--sizes 90000 is above the limit of 89600",
        ),
        (
            &["udp", "--sizes", "1K,65536"],
            "--sizes 65536 is above the limit of 65507",
        ),
        (
            &["rx", "--sizes", "1500"],
            "--sizes 1500: the sender writes whole KiB",
        ),
        (
            &["rx", "--sizes", "4K,128M"],
            "--sizes 134217728 is above the limit of 67108864",
        ),
        (&["tcp", "--plot", "x.svg"], "--sizes <SIZES>"),
        // Refused before the sweep runs, not after it.
        (
            &["udp", "--sizes", "1K", "--plot", "/nonexistent/x.svg"],
            "--plot /nonexistent/x.svg: cannot write it",
        ),
        (
            &["rx", "--sizes", "4K", "--plot", "/proc/x.svg"],
            "--plot /proc/x.svg: cannot write it",
        ),
    ];
    let many: Vec<String> = (1..=65).map(|k| format!("{k}K")).collect();
    let many = many.join(",");
    let too_many = ["tcp", "--sizes", many.as_str()];
    let table = table
        .iter()
        .copied()
        .chain([(&too_many[..], "--sizes lists 65 sizes; at most 64")]);
    for (args, says) in table {
        let out = Command::new(ZCNET)
            .arg("bench")
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// Ctrl-C in the middle of a sweep: the rows so far are printed, the run that was going marked
/// interrupted, and neither a crossover nor a plot comes from part of a sweep.
#[test]
fn an_interrupted_sweep_gives_no_crossover_and_no_plot() {
    let dir = TempDir::new("interrupted-sweep");
    for bench in [
        &["tcp", "--sizes", "4K,64K", "--duration", "5"][..],
        &[
            "rx", "--sizes", "4K,64K", "--mib", "100000", "--rounds", "2",
        ],
    ] {
        let plot = dir.0.join(format!("{}.svg", bench[0]));
        let mut child = Command::new(ZCNET)
            .arg("bench")
            .args(bench)
            .args([
                "--mode",
                "copy,zerocopy",
                "--interval",
                "0",
                "--json",
                "--plot",
            ])
            .arg(&plot)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // In the first run of each.
        std::thread::sleep(Duration::from_millis(2500));
        let stdout = child.stdout.take().unwrap();
        let out = common::interrupt_and_finish(child, stdout);
        let lines = common::json_lines(&out);
        assert!(
            lines.iter().all(|l| l.get("crossover").is_none()),
            "{bench:?}: {out}"
        );
        assert!(
            lines.iter().any(|l| l["sweep"] == "cut short"),
            "{bench:?}: {out}"
        );
        assert!(
            lines.iter().any(|l| l["interrupted"] == true),
            "{bench:?}: {out}"
        );
        assert!(!plot.exists(), "{bench:?}: a plot of part of a sweep");
    }
}
