//! `kernel.io_uring_disabled` and `kernel.io_uring_group`, live (inside the guest: both are host-wide,
//! so the host suite checks their reasons only in unit tests). Under each setting `zcnet::probe`'s
//! `syscall.io_uring_setup` row names the sysctl that refuses io_uring and the remedy, never a
//! missing feature; an io_uring sender falls back to sendmsg naming the same sysctl and delivers
//! every byte; a process in the group, or holding `CAP_SYS_ADMIN` in the initial user namespace,
//! is let through. A process without that capability is this binary run again under busybox's
//! `unshare -U -r`, as a rootless container runs (its root counts only in its own namespace).
//! Both settings are put back (0 and -1) before returning.

use std::io::Read;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use zcnet::probe::{Finding, ProbeOptions, Support, probe};
use zcnet::tx::{Mode, SendPath, Sender, SenderConfig};

use crate::outcome::Outcome;
use crate::pattern;

const DISABLED: &str = "/proc/sys/kernel/io_uring_disabled";
const GROUP: &str = "/proc/sys/kernel/io_uring_group";
/// Bytes each case sends: 64 sends of 64 KiB.
const SENDS: usize = 64;
const SEND: usize = 64 << 10;

/// What one case expects of io_uring under its setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Expect {
    /// Refused by `kernel.io_uring_disabled = 2`.
    RefusedAll,
    /// Refused by `kernel.io_uring_disabled = 1` outside `kernel.io_uring_group`.
    RefusedOutsideGroup,
    /// Let through: the row says the call reaches the kernel and the sender uses io_uring.
    Allowed,
}

impl Expect {
    /// The words of the sysctl that refuses io_uring, as the probe and the fallback say them.
    fn refused_by(self) -> Option<&'static str> {
        match self {
            Expect::RefusedAll => Some("kernel.io_uring_disabled = 2"),
            Expect::RefusedOutsideGroup => Some("kernel.io_uring_disabled = 1"),
            Expect::Allowed => None,
        }
    }

    fn arg(self) -> &'static str {
        match self {
            Expect::RefusedAll => "refused-all",
            Expect::RefusedOutsideGroup => "refused-outside-group",
            Expect::Allowed => "allowed",
        }
    }
}

/// Runs every case and puts both sysctls back.
pub fn run() -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new("uring-sysctl");
    let cases: [(&str, u8, i64, bool, Expect); 4] = [
        ("disabled-2", 2, -1, false, Expect::RefusedAll),
        ("disabled-1-cap-sys-admin", 1, -1, false, Expect::Allowed),
        (
            "disabled-1-outside-group",
            1,
            -1,
            true,
            Expect::RefusedOutsideGroup,
        ),
        ("disabled-1-in-group-0", 1, 0, true, Expect::Allowed),
    ];
    let result = (|| -> anyhow::Result<()> {
        for (name, disabled, group, user_namespace, expect) in cases {
            set(GROUP, group)?;
            set(DISABLED, i64::from(disabled))?;
            let (ok, what) = if user_namespace {
                in_user_namespace(expect)?
            } else {
                case(expect)
            };
            outcome.check(name, ok, &what);
        }
        Ok(())
    })();
    let restored = set(DISABLED, 0).and(set(GROUP, -1));
    result?;
    restored?;
    Ok(outcome)
}

/// The child's side of a case run under `unshare -U -r`: prints the checks and `ok`/`not ok`.
pub fn child(expect: Expect) -> bool {
    let (ok, what) = case(expect);
    println!("{} {what}", if ok { "ok" } else { "not ok" });
    ok
}

fn set(path: &str, value: i64) -> anyhow::Result<()> {
    std::fs::write(path, format!("{value}\n")).with_context(|| format!("write {value} to {path}"))
}

/// Runs this binary's `uring-sysctl-child` in a new user namespace mapping root; its last line
/// says whether its checks held.
fn in_user_namespace(expect: Expect) -> anyhow::Result<(bool, String)> {
    let exe = std::env::current_exe().context("current_exe")?;
    let mut command = Command::new("unshare");
    command
        .args(["-U", "-r"])
        .arg(exe)
        .args(["uring-sysctl-child", "--expect", expect.arg()]);
    let out = command.output().context("run unshare -U -r")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or("").to_string();
    let ok = out.status.success() && last.starts_with("ok ");
    Ok((
        ok,
        format!(
            "in a user namespace: {last} {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    ))
}

/// Checks the probe's row and an io_uring sender against `expect`.
fn case(expect: Expect) -> (bool, String) {
    let Some(row) = setup_row() else {
        return (false, "no syscall.io_uring_setup row".into());
    };
    let (mut ok, mut what) = match expect.refused_by() {
        Some(by) => (
            row.support == Support::No
                && row.reason.contains(by)
                && row.reason.contains("sysctl kernel.io_uring_disabled=0")
                && !row.reason.contains("not supported"),
            format!("row says {}: {}", row.support, row.reason),
        ),
        None => (
            row.support == Support::Yes && row.reason.contains("reaches the kernel"),
            format!("row says {}: {}", row.support, row.reason),
        ),
    };
    match send_over_loopback() {
        Ok((status, uring)) => {
            ok &= match expect.refused_by() {
                Some(by) => !uring && status.as_deref().is_some_and(|s| s.contains(by)),
                None => uring && status.is_none(),
            };
            what += &format!(
                "; {} bytes intact, sent with {}, status {status:?}",
                SENDS * SEND,
                if uring { "io_uring" } else { "sendmsg" }
            );
        }
        Err(e) => {
            ok = false;
            what += &format!("; send: {e:#}");
        }
    }
    (ok, what)
}

fn setup_row() -> Option<Finding> {
    let mut opts = ProbeOptions::default();
    opts.ifaces = Some(vec!["lo".into()]);
    opts.try_xsk_bind = false;
    probe(&opts)
        .into_iter()
        .find(|r| r.feature == "syscall.io_uring_setup")
}

/// Sends [`SENDS`] x [`SEND`] pattern bytes over TCP loopback with a zero-copy sender asking for
/// io_uring and checks every byte; returns the path status (`None`: io_uring is used) and
/// whether io_uring sent them.
fn send_over_loopback() -> anyhow::Result<(Option<String>, bool)> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let addr = listener.local_addr()?;
    let sink = std::thread::spawn(move || -> std::io::Result<Vec<u8>> {
        let (mut stream, _) = listener.accept()?;
        let mut got = Vec::new();
        stream.read_to_end(&mut got)?;
        Ok(got)
    });
    let mut config = SenderConfig::with_mode(Mode::ZeroCopy);
    config.path = SendPath::IO_URING;
    let mut tx = Sender::new(TcpStream::connect(addr)?, config);
    let status = tx.path_status().err().map(|f| f.to_string());
    let uring = tx.path() == SendPath::IO_URING;
    for k in 0..SENDS {
        let mut buf = vec![0; SEND];
        pattern::fill(&mut buf, (k * SEND) as u64);
        tx.send(buf)?;
    }
    tx.flush(Duration::from_secs(60))?;
    drop(tx.close(Duration::from_secs(10))?);
    let got = sink.join().expect("the reading thread")?;
    anyhow::ensure!(
        got.len() == SENDS * SEND,
        "{} of {} bytes arrived",
        got.len(),
        SENDS * SEND
    );
    let bad = pattern::mismatches(&got, 0);
    anyhow::ensure!(bad == 0, "{bad} bytes differ");
    Ok((status, uring))
}
