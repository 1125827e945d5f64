//! `zcnet probe --measure`: whether zero-copy pays on each path this host can measure, from a short
//! side-by-side run of the path's bench. Each path runs this binary's own `zcnet bench …` (the
//! command is in the output), so that the verdict comes from exactly the rows that bench prints; the
//! two modes run in alternating order (`bench tcp|udp --rounds 2` reverses them on its second round,
//! `bench rx` and `bench xdp` run twice with the order reversed). A path that cannot run here says
//! why, and every path says what only a run against another host can answer.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use rustix::thread::{CapabilitySet, capabilities};
use serde_json::{Value, json};

use crate::bench::run::child::Watched;
use crate::live;
use crate::probe::verdict::{Comparison, MARGIN_PCT, PER_MB};
use crate::report::{Row, outln};

/// One path: what it compares, the bench runs that measure it, and what they cannot show.
struct PathSpec {
    name: &'static str,
    what: &'static str,
    /// Capabilities the bench needs (namespaces, veth, XDP, AF_XDP and AF_PACKET sockets).
    needs: &'static [(CapabilitySet, &'static str)],
    /// The `zcnet` arguments of each bench run, in order (split at spaces).
    runs: &'static [&'static str],
    compare: Comparison,
    /// Why the rows came out as they did, from the rows.
    why: fn(&[Row], &Comparison) -> String,
    /// What only a run against another host answers, and the commands of that run.
    remote: (&'static str, &'static str),
}

/// What the bench harness of veth pairs and XDP programs needs.
const VETH: &[(CapabilitySet, &str)] = &[
    (CapabilitySet::SYS_ADMIN, "CAP_SYS_ADMIN"),
    (CapabilitySet::NET_ADMIN, "CAP_NET_ADMIN"),
];

/// ... and AF_XDP and AF_PACKET sockets besides.
const VETH_RAW: &[(CapabilitySet, &str)] = &[
    (CapabilitySet::SYS_ADMIN, "CAP_SYS_ADMIN"),
    (CapabilitySet::NET_ADMIN, "CAP_NET_ADMIN"),
    (CapabilitySet::NET_RAW, "CAP_NET_RAW"),
];

const PATHS: &[PathSpec] = &[
    PathSpec {
        name: "tcp_send",
        what: "TCP send over loopback: MSG_ZEROCOPY against copying sends",
        needs: &[],
        runs: &["bench tcp --mode copy,zerocopy --rounds 2 --duration 0.5"],
        compare: PER_MB,
        why: send_why,
        remote: (
            "whether a NIC sends the lent pages without a copy, and what that saves at line rate",
            "on the peer `zcnet bench tcp --listen 5201`, here `zcnet bench tcp --connect \
             PEER:5201 --mode copy,zerocopy,auto --rounds 4`",
        ),
    },
    PathSpec {
        name: "udp_gso_xdp_drop",
        what: "UDP GSO (56000-byte sends, 40 segments of 1400 bytes) into an XDP drop program on a \
               veth pair: MSG_ZEROCOPY against copying sends",
        needs: VETH,
        runs: &[
            "bench udp --sink xdp-drop --gso 1400 --mode copy,zerocopy --rounds 2 --duration 0.5",
        ],
        compare: PER_MB,
        why: send_why,
        remote: (
            "whether a NIC's driver sends GSO datagrams from the lent pages, and whether the peer \
             receives them all",
            "on the peer `zcnet bench udp --listen 5201`, here `zcnet bench udp --connect \
             PEER:5201 --gso 1400 --mode copy,zerocopy,auto --rounds 4`",
        ),
    },
    PathSpec {
        name: "tcp_receive",
        what: "TCP receive over loopback (MSS of one page, MSG_ZEROCOPY sender): TCP_ZEROCOPY_RECEIVE \
               mapping against recv copying, and what auto chose",
        needs: &[],
        runs: &[
            "bench rx --mode copy,zerocopy,auto --mib 512 --rounds 1",
            "bench rx --mode auto,zerocopy,copy --mib 512 --rounds 1",
        ],
        compare: PER_MB,
        why: rx_why,
        remote: (
            "what mapping costs on a NIC's page-sized segments from another host, with the sender's \
             CPU elsewhere",
            "here `zcnet bench rx --listen 5201 --mode copy,zerocopy,auto`, on the peer `for m in \
             copy zerocopy auto; do zcnet bench rx --connect HOST:5201 --mib 4096; done`",
        ),
    },
    PathSpec {
        name: "io_uring_send",
        what: "io_uring TCP send over loopback: IORING_OP_SEND_ZC against IORING_OP_SEND, from \
               registered buffers",
        needs: &[],
        runs: &["bench tcp --api io_uring --mode copy,zerocopy --rounds 2 --duration 0.5"],
        compare: PER_MB,
        why: send_why,
        remote: (
            "whether a NIC sends SEND_ZC's pages without a copy, and how io_uring compares with \
             sendmsg there",
            "on the peer `zcnet bench tcp --listen 5201`, here `zcnet bench tcp --connect \
             PEER:5201 --api sendmsg,io_uring --mode copy,zerocopy --rounds 4`",
        ),
    },
    PathSpec {
        name: "af_xdp_rx",
        what: "64-byte UDP frames received on a veth pair: AF_XDP rxdrop against an AF_PACKET \
               TPACKET_V3 ring",
        needs: VETH_RAW,
        runs: &[
            "bench xdp --path af_xdp,tpacket_v3 --duration 0.5",
            "bench xdp --path tpacket_v3,af_xdp --duration 0.5",
        ],
        compare: Comparison {
            mode_field: "path",
            copy: "tpacket_v3",
            zerocopy: "af_xdp",
            metric: "app_threads_ns_per_packet",
            weight: "packets",
            unit: "ns/packet",
            per: "packet",
        },
        why: xdp_why,
        remote: (
            "what XDP_ZEROCOPY saves on a NIC whose driver has it, fed by another host",
            "here `zcnet probe --iface IFACE --try-xsk-bind` (does it bind zero-copy?), then \
             `zcnet xdp rxdrop --iface IFACE --mode zerocopy --port 9100` while the peer runs \
             `zcnet bench udp --connect HOST:9100 --raw --mode copy --size 18 --duration 10`",
        ),
    },
];

/// Arguments every bench run gets: rows as JSON, no interval lines.
const JSON_ARGS: &[&str] = &["--json", "--interval", "0"];

/// Longest a bench run may take before it counts as failed (each runs for about two seconds).
const RUN_WAIT: Duration = Duration::from_secs(20);

/// Why a path was not measured.
#[derive(Debug)]
enum Unmeasured {
    /// This process lacks capabilities the bench needs.
    Capabilities(Vec<&'static str>),
    /// A bench run failed.
    Failed {
        /// The errno name the error gives, if any.
        errno: Option<String>,
        error: String,
        command: String,
    },
    /// The runs gave no rows of one of the two modes.
    NoRows { command: String },
    /// Ctrl-C (SIGINT or SIGTERM) stopped the probe before or during this path.
    Interrupted,
}

impl Unmeasured {
    fn json(&self) -> Value {
        match self {
            Unmeasured::Capabilities(missing) => json!({
                "kind": "capability",
                "missing": missing,
                "remedy": self.remedy(),
            }),
            Unmeasured::Failed { errno, error, .. } => json!({
                "kind": "bench_failed",
                "errno": errno,
                "error": error,
                "remedy": self.remedy(),
            }),
            Unmeasured::NoRows { .. } => json!({"kind": "no_rows", "remedy": self.remedy()}),
            Unmeasured::Interrupted => json!({"kind": "interrupted", "remedy": self.remedy()}),
        }
    }

    fn remedy(&self) -> String {
        match self {
            Unmeasured::Capabilities(missing) => format!(
                "run as root (`sudo zcnet probe --measure`) or with {} granted",
                missing.join(", ")
            ),
            Unmeasured::Failed { command, .. } | Unmeasured::NoRows { command } => {
                format!("run `{command}` alone to see its whole output")
            }
            Unmeasured::Interrupted => "run `zcnet probe --measure` again".into(),
        }
    }

    fn sentence(&self) -> String {
        let what = match self {
            Unmeasured::Capabilities(missing) => format!("needs {}", missing.join(", ")),
            Unmeasured::Failed {
                errno: Some(errno),
                error,
                ..
            } => format!("{errno}: {error}"),
            Unmeasured::Failed { error, .. } => error.clone(),
            Unmeasured::NoRows { .. } => "the bench reported no rows of one of the modes".into(),
            Unmeasured::Interrupted => "interrupted".into(),
        };
        format!("not measured: {what}; {}", self.remedy())
    }
}

/// The errno a failed run's message names: an `E…` word (as zcnet's errors give them), or the
/// `os error N` of a plain I/O error, by name.
fn errno_in(message: &str) -> Option<String> {
    let word = message
        .split(|c: char| !c.is_ascii_alphanumeric())
        .find(|w| {
            w.len() >= 4
                && w.starts_with('E')
                && w.chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        });
    if let Some(word) = word {
        return Some(word.to_string());
    }
    let code: i32 = message
        .split("os error ")
        .nth(1)?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    let refusal = zcnet::probe::errno_refusal(&std::io::Error::from_raw_os_error(code));
    refusal.split(' ').next().map(str::to_string)
}

/// The capabilities of `needs` this process lacks.
fn missing(needs: &[(CapabilitySet, &'static str)]) -> Vec<&'static str> {
    let held = capabilities(None).map_or(CapabilitySet::empty(), |sets| sets.effective);
    needs
        .iter()
        .filter(|(cap, _)| !held.contains(*cap))
        .map(|(_, name)| *name)
        .collect()
}

/// The command line of a bench run, as a user would type it.
fn command_line(args: &str) -> String {
    format!("zcnet {args} {}", JSON_ARGS.join(" "))
}

/// Runs `zcnet args…` and returns its rows (not the totals of `bench tcp|udp`), each marked with
/// the number of the run; a failed run is its error, with the bench's own message.
fn bench_rows(args: &str, run: usize) -> Result<Vec<Row>, Unmeasured> {
    let failed = |error: String| Unmeasured::Failed {
        errno: errno_in(&error),
        error,
        command: command_line(args),
    };
    let exe = std::env::current_exe()
        .context("locating the zcnet binary")
        .map_err(|e| failed(format!("{e:#}")))?;
    let mut cmd = Command::new(exe);
    cmd.args(args.split_whitespace())
        .args(JSON_ARGS)
        .stdin(Stdio::null());
    let mut child = Watched::spawn(&mut cmd, "the bench").map_err(|e| failed(format!("{e:#}")))?;
    // A signal to this process alone (not to the terminal's process group) ends the bench too.
    child.pass_interrupts();
    let deadline = Instant::now() + RUN_WAIT;
    let mut rows = Vec::new();
    loop {
        match child.next_line(deadline) {
            Ok(Some(line)) => {
                if let Ok(Value::Object(mut row)) = serde_json::from_str::<Value>(&line)
                    && row.get("total").is_none()
                {
                    row.insert("run".into(), json!(run));
                    rows.push(row);
                }
            }
            Ok(None) => break,
            Err(why) => return Err(failed(format!("{:#}", child.failure(&why)))),
        }
    }
    match child.wait(deadline) {
        Ok(status) if status.success() => Ok(rows),
        Ok(status) => Err(failed(format!(
            "{:#}",
            child.failure(&format!("failed ({status})"))
        ))),
        Err(why) => Err(failed(format!("{:#}", child.failure(&why)))),
    }
}

/// Measures one path; its JSON object.
fn measure(spec: &PathSpec) -> Value {
    let start = Instant::now();
    let commands: Vec<String> = spec.runs.iter().map(|a| command_line(a)).collect();
    let mut rows = Vec::new();
    let outcome = (|| {
        let lacking = missing(spec.needs);
        if !lacking.is_empty() {
            return Err(Unmeasured::Capabilities(lacking));
        }
        for (i, args) in spec.runs.iter().enumerate() {
            if live::interrupted() {
                return Err(Unmeasured::Interrupted);
            }
            rows.extend(bench_rows(args, i + 1)?);
        }
        // A run cut short by Ctrl-C (which reaches the bench too) measured less than its time.
        if live::interrupted()
            || rows
                .iter()
                .any(|r| r.get("interrupted") == Some(&json!(true)))
        {
            return Err(Unmeasured::Interrupted);
        }
        spec.compare.verdict(&rows).ok_or(Unmeasured::NoRows {
            command: commands.join("; "),
        })
    })();
    let (pays, verdict, figures, why, unmeasured) = match &outcome {
        Ok(v) => (
            v.pays.name(),
            spec.compare.sentence(v),
            v.json(),
            json!((spec.why)(&rows, &spec.compare)),
            Value::Null,
        ),
        Err(u) => (
            "not measured",
            u.sentence(),
            Value::Null,
            Value::Null,
            u.json(),
        ),
    };
    json!({
        "path": spec.name,
        "what": spec.what,
        "measured": outcome.is_ok(),
        "pays": pays,
        "verdict": verdict,
        "why": why,
        "figures": figures,
        "compare": spec.compare.json(),
        "not_measured": unmeasured,
        "commands": commands,
        "seconds": start.elapsed().as_secs_f64(),
        "remote": {"question": spec.remote.0, "run": spec.remote.1},
        "rows": rows,
    })
}

/// Measures every path, one after another (never two at once: they would share the CPUs). Ctrl-C
/// (SIGINT, SIGTERM) ends the path that runs and leaves the rest unmeasured, each saying so.
pub fn run() -> anyhow::Result<Value> {
    live::watch_interrupts()?;
    let start = Instant::now();
    let paths: Vec<Value> = PATHS
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            // On standard error, so that standard output stays one table or one JSON object.
            if !live::interrupted() {
                eprintln!(
                    "zcnet: measuring {} ({} of {})",
                    spec.name,
                    i + 1,
                    PATHS.len()
                );
            }
            measure(spec)
        })
        .collect();
    Ok(json!({
        "margin_pct": MARGIN_PCT,
        "seconds": start.elapsed().as_secs_f64(),
        "paths": paths,
    }))
}

/// Prints the verdicts of [`run`] for people.
pub fn print(measured: &Value) {
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_string();
    outln!(
        "\nzero-copy against copy, side by side on this host ({:.1} s; a difference under {MARGIN_PCT}% \
         is no clear difference):",
        measured["seconds"].as_f64().unwrap_or(0.0)
    );
    for path in measured["paths"].as_array().into_iter().flatten() {
        outln!("\n{}: {}", text(path, "path"), text(path, "what"));
        match path["why"].as_str() {
            Some(why) => outln!("  {}: {why}", text(path, "verdict")),
            None => outln!("  {}", text(path, "verdict")),
        }
        let commands: Vec<&str> = path["commands"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        outln!(
            "  measured with ({:.1} s): {}",
            path["seconds"].as_f64().unwrap_or(0.0),
            commands.join("; ")
        );
        let remote = &path["remote"];
        outln!(
            "  only a remote peer answers {}: {}",
            text(remote, "question"),
            text(remote, "run")
        );
    }
}

/// The sum of `field` over the rows of `mode`.
fn sum(rows: &[Row], c: &Comparison, mode: &str, field: &str) -> f64 {
    rows.iter()
        .filter(|r| r.get(c.mode_field).and_then(Value::as_str) == Some(mode))
        .filter_map(|r| r.get(field).and_then(Value::as_f64))
        .sum()
}

/// The first text `field` of any row holds.
fn first_text<'a>(rows: &'a [Row], field: &str) -> Option<&'a str> {
    rows.iter()
        .find_map(|r| r.get(field).and_then(Value::as_str))
}

/// Senders: how many zero-copy sends the kernel copied after all, and a locked-memory shortfall.
fn send_why(rows: &[Row], c: &Comparison) -> String {
    let copied = sum(rows, c, c.zerocopy, "copied_ids") as u64;
    let sent = copied + sum(rows, c, c.zerocopy, "zc_ids") as u64;
    let mut why = if sent == 0 {
        "no zero-copy send completed as one (see the rows' zerocopy field)".to_string()
    } else if copied == sent {
        format!(
            "the kernel copied all {sent} zero-copy sends after all (their completions say so), as \
             it does with what it delivers to a local socket: zero-copy added pinning and \
             completions and saved no copy"
        )
    } else if copied == 0 {
        format!("the kernel sent all {sent} zero-copy sends from the lent pages, without a copy")
    } else {
        format!("the kernel copied {copied} of {sent} zero-copy sends after all")
    };
    for field in ["memlock_reason", "enobufs_reason"] {
        if let Some(reason) = first_text(rows, field) {
            why.push_str(&format!("; {reason}"));
        }
    }
    why
}

/// Receivers: the share mapped, and what auto chose and what it cost.
fn rx_why(rows: &[Row], c: &Comparison) -> String {
    let bytes = sum(rows, c, c.zerocopy, "bytes");
    let mapped = sum(rows, c, c.zerocopy, "mapped_bytes");
    let share = if bytes > 0.0 {
        mapped * 100.0 / bytes
    } else {
        0.0
    };
    let mut why = format!("zerocopy mapped {share:.1}% of its bytes");
    let choices: Vec<String> = rows
        .iter()
        .filter(|r| r.get(c.mode_field).and_then(Value::as_str) == Some("auto"))
        .filter_map(|r| r.get("auto_choice")?.as_object())
        .map(|choice| {
            let field = |k: &str| choice.get(k).and_then(Value::as_str).unwrap_or("?");
            format!("{} ({})", field("mode"), field("reason"))
        })
        .collect();
    let cheaper = c
        .cost(rows, c.copy)
        .zip(c.cost(rows, c.zerocopy))
        .map(|(a, b)| a.min(b));
    match (choices.is_empty(), c.cost(rows, "auto"), cheaper) {
        (false, Some(auto), Some(cheaper)) if cheaper > 0.0 => why.push_str(&format!(
            "; auto chose {}, at {auto:.1} {} ({:+.0}% against the cheaper mode)",
            choices.join(", then "),
            c.unit,
            (auto / cheaper - 1.0) * 100.0
        )),
        _ => why.push_str("; auto made no choice in these runs"),
    }
    why
}

/// AF_XDP: the data path it ran in, and the rates of both paths.
fn xdp_why(rows: &[Row], c: &Comparison) -> String {
    let xsk_mode = rows
        .iter()
        .filter(|r| r.get(c.mode_field).and_then(Value::as_str) == Some(c.zerocopy))
        .find_map(|r| r.get("mode").and_then(Value::as_str))
        .unwrap_or("?");
    let how = match xsk_mode {
        "copy" => {
            "AF_XDP ran in copy mode (this driver has no XDP_ZEROCOPY: the kernel copies each \
             frame into the UMEM, as TPACKET_V3 copies it into its ring, so what differs is the \
             socket buffer and stack path AF_XDP skips, not a copy)"
                .to_string()
        }
        mode => format!("AF_XDP ran in {mode} mode"),
    };
    let mpps = |path: &str| {
        let (packets, seconds) = (sum(rows, c, path, "packets"), sum(rows, c, path, "seconds"));
        if seconds > 0.0 {
            packets / seconds / 1e6
        } else {
            0.0
        }
    };
    format!(
        "{how}; CPU time of the receiving threads (application, NAPI, ksoftirqd) per packet, \
         received at {:.3} Mpps against {:.3} from a generator on the other CPU",
        mpps(c.zerocopy),
        mpps(c.copy)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_names_its_errno() {
        assert_eq!(
            errno_in("creating the ring: EPERM (Operation not permitted)").as_deref(),
            Some("EPERM")
        );
        assert_eq!(
            errno_in("binding: Permission denied (os error 13)").as_deref(),
            Some("EACCES")
        );
        assert_eq!(errno_in("the bench did not report in time"), None);
    }

    /// The `zcnet …` commands of `text`: each backquoted one, or the part of a shell line from
    /// `zcnet` to the next `;`.
    fn commands_in(text: &str) -> Vec<String> {
        text.split('`')
            .skip(1)
            .step_by(2)
            .filter_map(|quoted| {
                let from = quoted.find("zcnet ")?;
                Some(quoted[from..].split(';').next()?.to_string())
            })
            .collect()
    }

    #[test]
    fn every_command_a_path_names_is_one_zcnet_takes() {
        use clap::Parser;
        for spec in PATHS {
            let mut commands: Vec<String> = spec.runs.iter().map(|r| command_line(r)).collect();
            let remote = commands_in(spec.remote.1);
            assert!(!remote.is_empty(), "{}", spec.name);
            commands.extend(remote);
            for command in commands {
                let args = command
                    .split_whitespace()
                    .map(|a| a.replace("PEER", "192.0.2.1").replace("HOST", "192.0.2.2"))
                    .map(|a| a.replace("IFACE", "eth9"));
                if let Err(e) = crate::Cli::try_parse_from(args) {
                    panic!("{}: {command}: {e}", spec.name);
                }
            }
        }
    }

    #[test]
    fn every_path_alternates_its_modes_between_repetitions() {
        for spec in PATHS {
            let runs: Vec<Vec<&str>> = spec
                .runs
                .iter()
                .map(|run| run.split_whitespace().collect())
                .collect();
            let orders: Vec<Vec<&str>> = runs
                .iter()
                .map(|args| {
                    let flag = args
                        .iter()
                        .position(|a| *a == "--mode" || *a == "--path")
                        .expect("each run names its modes");
                    args[flag + 1].split(',').collect()
                })
                .collect();
            let rounds = runs[0]
                .iter()
                .position(|a| *a == "--rounds")
                .map(|i| runs[0][i + 1]);
            // bench tcp|udp reverses the modes on its even rounds; the others run twice, reversed.
            if spec.runs.len() == 1 {
                assert_eq!(rounds, Some("2"), "{}", spec.name);
            } else {
                let mut reversed = orders[0].clone();
                reversed.reverse();
                assert_eq!(orders[1], reversed, "{}", spec.name);
            }
            for order in &orders {
                assert!(order.contains(&spec.compare.copy), "{}", spec.name);
                assert!(order.contains(&spec.compare.zerocopy), "{}", spec.name);
            }
        }
    }
}
