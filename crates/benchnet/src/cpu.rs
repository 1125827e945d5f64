//! Where a benchmark's threads run and what they cost: pinning threads (and the kernel's threaded-NAPI
//! workers) to CPUs with `taskset`, and per-CPU busy time from `/proc/stat`, so that a receiver's cost
//! can be measured on a CPU of its own, apart from the generator feeding it.

use std::fs;
use std::io;

use crate::command::run_checked;

/// The kernel thread id of the calling thread (`/proc/thread-self` links to `<pid>/task/<tid>`).
pub fn current_thread_id() -> io::Result<u32> {
    let link = fs::read_link("/proc/thread-self")?;
    link.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| io::Error::other(format!("unexpected /proc/thread-self: {link:?}")))
}

/// Restricts thread (or process) `tid` to CPU `cpu` (`taskset -p -c`).
pub fn pin(tid: u32, cpu: usize) -> io::Result<()> {
    run_checked("taskset", &["-p", "-c", &cpu.to_string(), &tid.to_string()]).map(drop)
}

/// Restricts the calling thread to CPU `cpu`.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    pin(current_thread_id()?, cpu)
}

/// The kernel threads of `iface`'s threaded NAPI instances (named `napi/<iface>-<id>`, truncated to
/// the 15 characters of a task name). Empty when the interface has no threaded NAPI.
pub fn napi_threads(iface: &str) -> io::Result<Vec<u32>> {
    let prefix: String = format!("napi/{iface}-").chars().take(15).collect();
    threads_named(|comm| comm.starts_with(&prefix))
}

/// The kernel thread that runs CPU `cpu`'s softirqs when they are deferred (`ksoftirqd/<cpu>`): network
/// receive work raised on that CPU outside a NAPI thread, such as RPS backlog processing, runs there
/// or in whatever task the softirq interrupted.
pub fn softirq_thread(cpu: usize) -> io::Result<u32> {
    let name = format!("ksoftirqd/{cpu}");
    threads_named(|comm| comm == name)?
        .first()
        .copied()
        .ok_or_else(|| io::Error::other(format!("no {name} thread")))
}

/// Processes (kernel threads included) whose task name passes `wanted`.
fn threads_named(wanted: impl Fn(&str) -> bool) -> io::Result<Vec<u32>> {
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc")? {
        let entry = entry?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // A process may end between the listing and the read.
        if let Ok(comm) = fs::read_to_string(entry.path().join("comm"))
            && wanted(comm.trim_end())
        {
            found.push(pid);
        }
    }
    Ok(found)
}

/// Seconds CPU `cpu` has spent busy since boot: user, nice, system, irq, softirq and steal time from
/// its `/proc/stat` line (USER_HZ = 100 on Linux); idle and iowait are not busy.
pub fn busy_seconds(cpu: usize) -> io::Result<f64> {
    let stat = fs::read_to_string("/proc/stat")?;
    let name = format!("cpu{cpu}");
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))
        .ok_or_else(|| io::Error::other(format!("no {name} line in /proc/stat")))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let busy: u64 = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|&i| ticks.get(i))
        .sum();
    Ok(busy as f64 / 100.0)
}

/// Seconds of CPU thread `tid` has used (user + system: `utime` and `stime` of
/// `/proc/<tid>/task/<tid>/stat`, USER_HZ = 100), wherever it ran. Softirq work done while the thread
/// was running counts as its own. (`/proc/<tid>/stat` would not do: for a process's main thread it
/// sums every thread of the process.)
pub fn thread_seconds(tid: u32) -> io::Result<f64> {
    let stat = fs::read_to_string(format!("/proc/{tid}/task/{tid}/stat"))?;
    // The command name (field 2) may hold spaces; the fields after its closing parenthesis are fixed.
    let rest = stat.rsplit_once(')').map(|(_, rest)| rest).ok_or_else(|| {
        io::Error::other(format!("unexpected /proc/{tid}/task/{tid}/stat: {stat}"))
    })?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line: indices 11 and 12 after the parenthesis.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok((ticks(11) + ticks(12)) as f64 / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A process's main thread is charged its own time only: another thread spinning for 0.2 s of
    /// CPU adds nothing to it (here the main thread is the idle test harness).
    #[test]
    fn cpu_0_has_a_softirq_thread() {
        let tid = softirq_thread(0).unwrap();
        let comm = fs::read_to_string(format!("/proc/{tid}/comm")).unwrap();
        assert_eq!(comm.trim_end(), "ksoftirqd/0");
    }

    #[test]
    fn thread_seconds_counts_one_thread_only() {
        let main = std::process::id();
        let before = thread_seconds(main).unwrap();
        let spinner = std::thread::spawn(|| {
            let tid = current_thread_id().unwrap();
            let start = Instant::now();
            while thread_seconds(tid).unwrap() < 0.2 && start.elapsed() < Duration::from_secs(20) {
                for _ in 0..100_000 {
                    std::hint::spin_loop();
                }
            }
            thread_seconds(tid).unwrap()
        });
        let spun = spinner.join().unwrap();
        assert!(spun >= 0.2, "the spinner used {spun} s");
        let after = thread_seconds(main).unwrap();
        assert!(
            after - before < 0.1,
            "main thread charged {} s",
            after - before
        );
    }
}
