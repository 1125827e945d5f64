//! `zcnet observe --pid` against an independent reference: Debian's bpftrace, on the system call
//! tracepoints (`syscalls:sys_enter/exit_sendmsg` and `_sendto`; zcnet reads the same calls at the
//! raw `sys_exit` tracepoint), counts for the same process the
//! `sendmsg`/`sendto` calls with `MSG_ZEROCOPY` that returned > 0 and the sum of what they returned,
//! and the same for the calls without it. Both observe a `zcnet bench tcp --connect` sender in a
//! network namespace from before its first system call to after its exit, so their totals must be
//! equal; the sender's own row must agree with them too.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{ChildStdout, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::observing::{start_observer, totals_of};
use common::{Reaped, held_sender, sender_row, sigint, u};
use serde_json::Value;

/// The reference program. `$1` is the observed process, `$2` this test's process, whose own sends
/// on a socket pair prove each of the four tracepoints' programs attached (the program that counts
/// is the one that prints). A send's entry remembers, per thread, whether it asked for
/// `MSG_ZEROCOPY` (0x4000000); its exit counts it when it returned > 0.
const REFERENCE: &str = r#"
tracepoint:syscalls:sys_enter_sendmsg,
tracepoint:syscalls:sys_enter_sendto
/pid == $1 || pid == $2/
{
    if (pid == $2) {
        printf("attached %s\n", probe);
    } else {
        @kind[tid] = (args->flags & 0x4000000) != 0 ? 1 : 2;
    }
}

tracepoint:syscalls:sys_exit_sendmsg,
tracepoint:syscalls:sys_exit_sendto
/pid == $1 || pid == $2/
{
    if (pid == $2) {
        printf("attached %s\n", probe);
    } else {
        $kind = @kind[tid];
        delete(@kind[tid]);
        if ($kind == 1 && args->ret > 0) {
            @zc_sends = count();
            @zc_bytes = sum(args->ret);
        }
        if ($kind == 2 && args->ret > 0) {
            @copy_sends = count();
            @copy_bytes = sum(args->ret);
        }
    }
}

END { clear(@kind); }
"#;

/// The tracepoints whose programs must say they are attached before the sender starts.
const TRACEPOINTS: [&str; 4] = [
    "tracepoint:syscalls:sys_enter_sendmsg",
    "tracepoint:syscalls:sys_enter_sendto",
    "tracepoint:syscalls:sys_exit_sendmsg",
    "tracepoint:syscalls:sys_exit_sendto",
];

/// The counters both observers give, under the names of `zcnet observe --json` and of the
/// reference's maps (without `@`).
const COUNTERS: [&str; 4] = ["zc_sends", "zc_bytes", "copy_sends", "copy_bytes"];

/// The `bpftrace` binary, where Debian installs it (also looked for on `PATH`).
fn bpftrace_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/usr/sbin", "/bin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join("bpftrace"))
        .find(|p| p.is_file())
}

/// A running reference: the process, its stdout lines as they come, and its stderr when it ends.
struct Reference {
    process: Reaped,
    lines: Receiver<String>,
    stderr: Option<JoinHandle<String>>,
}

impl Reference {
    /// Starts `bpftrace` (tracefs reachable) on the reference program for `pid` and waits until
    /// each of its programs on the send tracepoints has run for this test's own marker sends.
    fn start(bpftrace: &Path, pid: u32) -> Reference {
        let mut cmd = testnet::with_tracefs(bpftrace.to_str().expect("a UTF-8 path"));
        cmd.args(["-B", "line", "-e", REFERENCE])
            .arg(pid.to_string())
            .arg(std::process::id().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start bpftrace");
        let stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let process = Reaped(child);
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let mut reference = Reference {
            process,
            lines,
            stderr: Some(stderr),
        };
        reference.wait_attached();
        reference
    }

    /// Sends on a socket pair (`sendto` and `sendmsg`) until the reference has printed that each of
    /// the four tracepoints' programs ran for this process. Panics, with bpftrace's stderr, if it
    /// ends first or has not after a minute.
    fn wait_attached(&mut self) {
        let (a, _b) = UnixDatagram::pair().expect("socket pair");
        let mut seen = BTreeSet::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while seen.len() < TRACEPOINTS.len() {
            marker_sends(&a);
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    if let Some(tp) = line.strip_prefix("attached ") {
                        seen.insert(tp.to_string());
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("bpftrace ended before attaching: {}", self.stderr())
                }
            }
            assert!(
                Instant::now() < deadline,
                "bpftrace attached only {seen:?} in a minute: {}",
                self.stderr_so_far()
            );
        }
        let expected: BTreeSet<String> = TRACEPOINTS.iter().map(|t| t.to_string()).collect();
        assert_eq!(seen, expected, "bpftrace's marker lines");
    }

    /// Interrupts bpftrace (it then prints its maps) and returns them: map name (without `@`) to
    /// value, a map never written being absent.
    fn finish(mut self) -> BTreeMap<String, u64> {
        sigint(&self.process.0);
        let mut maps = BTreeMap::new();
        let mut text = String::new();
        for line in self.lines.iter() {
            if let Some((name, value)) = line
                .strip_prefix('@')
                .and_then(|l| l.split_once(": "))
                .filter(|(name, _)| COUNTERS.contains(name))
            {
                let value = value.trim().parse().unwrap_or_else(|_| panic!("{line:?}"));
                maps.insert(name.to_string(), value);
            }
            text.push_str(&line);
            text.push('\n');
        }
        let stderr = self.stderr();
        self.process
            .wait_success("bpftrace", &format!("{text}{stderr}"));
        eprintln!("bpftrace printed:\n{text}");
        maps
    }

    /// bpftrace's stderr, once it has ended.
    fn stderr(&mut self) -> String {
        let _ = self.process.0.wait();
        self.stderr
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default()
    }

    /// bpftrace's stderr after killing it (it has failed to attach in time).
    fn stderr_so_far(&mut self) -> String {
        let _ = self.process.0.kill();
        self.stderr()
    }
}

/// One `sendto` and one `sendmsg` of a byte on `sock` (not waiting: a full queue fails the call,
/// which the tracepoints still see).
fn marker_sends(sock: &UnixDatagram) {
    let byte = [0u8; 1];
    // SAFETY: a valid socket and a one-byte buffer that outlives both calls.
    unsafe {
        libc::sendto(
            sock.as_raw_fd(),
            byte.as_ptr().cast(),
            1,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        );
        let mut iov = libc::iovec {
            iov_base: byte.as_ptr() as *mut _,
            iov_len: 1,
        };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_DONTWAIT);
    }
}

/// `zcnet observe --pid PID --json --interval 0` once it said it attached
/// ([`common::observing::start_observer`]); returns it and the rest of its stdout.
fn observe_pid(pid: u32) -> (Reaped, BufReader<ChildStdout>) {
    let (observer, _, stdout) = start_observer(&["--pid", &pid.to_string()]);
    (observer, stdout)
}

/// What each observer and the sender itself saw of one run.
struct Run {
    /// `zcnet observe`'s totals for the sender's pid (its `process` line's counters).
    observe: Value,
    /// The reference's maps.
    bpftrace: BTreeMap<String, u64>,
    /// The sender's own `--json` row.
    row: Value,
}

/// Runs a `bench tcp --connect` sender with `args` in `ns` against a listener there, observed by
/// pid by `zcnet observe` and by the reference, both attached before the sender's first system
/// call and stopped after it exited.
fn observed_run(ns: &testnet::Netns, bpftrace: &Path, args: &[&str]) -> Run {
    let held = held_sender(ns, args);
    let (mut listener, mut sender) = (Reaped(held.listener), Reaped(held.sender));
    let (pid, go, mut out) = (held.pid, held.go, held.stdout);
    // `ip netns exec` and the shell exec in place: the pid observed is the process started.
    assert_eq!(pid, sender.pid());

    let (mut observer, mut observed) = observe_pid(pid);
    let reference = Reference::start(bpftrace, pid);

    writeln!(&go, "go").unwrap();
    drop(go);
    let mut rows = String::new();
    out.read_to_string(&mut rows).unwrap();
    sender.wait_success("the sender", &rows);
    listener.wait_success("the listener", "");

    sigint(&observer.0);
    let mut summary = String::new();
    observed.read_to_string(&mut summary).unwrap();
    observer.wait_success("zcnet observe", &summary);
    Run {
        bpftrace: reference.finish(),
        observe: totals_of(&summary, u64::from(pid)),
        row: sender_row(&rows),
    }
}

/// `zcnet observe`'s four send counters equal the reference's, a counter the reference never
/// wrote being 0; returns them.
fn observers_agree(run: &Run, mode: &str) -> BTreeMap<&'static str, u64> {
    let mut agreed = BTreeMap::new();
    for counter in COUNTERS {
        let observe = u(&run.observe, counter);
        let reference = run.bpftrace.get(counter).copied().unwrap_or(0);
        assert_eq!(
            observe, reference,
            "{mode} sender, {counter}: zcnet observe counted {observe}, bpftrace {reference} \
             (observe {}, bpftrace {:?})",
            run.observe, run.bpftrace
        );
        agreed.insert(counter, observe);
    }
    eprintln!(
        "{mode} sender: zcnet observe and bpftrace both counted {agreed:?}; the sender reported \
         zc_calls {}, bytes {}",
        run.row["zc_calls"], run.row["bytes"]
    );
    agreed
}

#[test]
fn observe_pid_send_totals_equal_bpftraces_on_the_syscall_tracepoints() {
    let test = "observe_pid_send_totals_equal_bpftraces_on_the_same_tracepoints";
    let Some(bpftrace) = bpftrace_binary() else {
        testnet::skip(
            test,
            "bpftrace is not installed (scripts/install-deps installs it as root)",
        );
        return;
    };
    if !testnet::may_trace(test) || !testnet::privileged(test) {
        return;
    }
    let ns = testnet::Netns::create("obsbt").expect("namespace");

    let run = observed_run(&ns, &bpftrace, &["--mode", "zerocopy", "--api", "sendmsg"]);
    let zc = observers_agree(&run, "zero-copy");
    assert!(zc["zc_sends"] > 0, "no zero-copy send counted: {zc:?}");
    // The sender's payload went in zero-copy sends, each counted in its row; its stream's header
    // and end mark went by copy (two sends, whatever the mode).
    assert_eq!(zc["zc_sends"], u(&run.row, "zc_calls"), "{}", run.row);
    assert_eq!(zc["zc_bytes"], u(&run.row, "bytes"), "{}", run.row);
    assert_eq!(zc["copy_sends"], 2, "the header and end mark: {zc:?}");
    let (framing_sends, framing_bytes) = (zc["copy_sends"], zc["copy_bytes"]);

    let run = observed_run(&ns, &bpftrace, &["--mode", "copy", "--api", "sendmsg"]);
    let copy = observers_agree(&run, "copying");
    assert_eq!((copy["zc_sends"], copy["zc_bytes"]), (0, 0), "{copy:?}");
    // Every send copies: the payload's (the row's calls and bytes) and the same header and end mark.
    assert_eq!(
        copy["copy_sends"],
        u(&run.row, "calls") + framing_sends,
        "{}",
        run.row
    );
    assert_eq!(
        copy["copy_bytes"],
        u(&run.row, "bytes") + framing_bytes,
        "{}",
        run.row
    );
}
