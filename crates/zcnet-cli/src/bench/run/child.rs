//! Run: A process of this binary that a one-process bench starts for the other side of its stream (the
//! `bench tcp|udp` receiver, the `bench rx` sender), watched so that no wait for it is unbounded: its
//! output is read on a thread of its own, a child stopped (SIGSTOP, a debugger) for
//! [`STOPPED_WAIT`] ends the run, and a failed child's error names its exit status and carries its
//! standard error.

use std::io::{BufRead, BufReader, Read};
use std::net::{Shutdown, TcpStream};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rustix::process::{Pid, Signal, kill_process};

use crate::live;

/// How long the child may stay stopped before the run ends.
pub const STOPPED_WAIT: Duration = Duration::from_secs(2);

/// A started child, its standard output read line by line.
#[derive(Debug)]
pub struct Watched {
    child: Child,
    /// Held open when piped: a child run with `--exit-with-parent` exits when it closes.
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<std::io::Result<String>>,
    /// What the child is, for messages ("the receiver process").
    what: &'static str,
    /// Whether Ctrl-C of this process is passed on to the child ([`Watched::pass_interrupts`]), and
    /// whether it has been.
    pass: (bool, bool),
}

impl Watched {
    /// Starts `cmd` with standard output and error piped (standard input as `cmd` sets it).
    pub fn spawn(cmd: &mut Command, what: &'static str) -> Result<Watched> {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {what}"))?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().context("the child's output")?);
        let (lines_tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in stdout.lines() {
                if line.is_err() || lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Watched {
            child,
            stdin,
            lines,
            what,
            pass: (false, false),
        })
    }

    /// Passes Ctrl-C (SIGINT or SIGTERM to this process, [`live::interrupted`]) on to the child as
    /// SIGINT while [`next_line`](Self::next_line) waits, so that a child that shares no process
    /// group with a terminal, or was not sent the signal, ends its run as soon as this process.
    pub fn pass_interrupts(&mut self) {
        self.pass.0 = true;
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The child's next line of output (`None` at its end), waiting until `deadline`; fails, saying
    /// why, when the deadline passes or the child stays stopped for [`STOPPED_WAIT`].
    pub fn next_line(&mut self, deadline: Instant) -> std::result::Result<Option<String>, String> {
        let mut stopped = StoppedFor::default();
        loop {
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(Ok(line)) => return Ok(Some(line)),
                Ok(Err(_)) | Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(None),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            if self.pass == (true, false) && live::interrupted() {
                self.pass.1 = true;
                // The child is ours, signalled by its pid; one that already exited is reaped
                // by `wait`.
                if let Some(pid) = Pid::from_raw(self.id() as i32) {
                    let _ = kill_process(pid, Signal::INT);
                }
            }
            stopped.check(self.id())?;
            if Instant::now() > deadline {
                return Err("did not report in time".into());
            }
        }
    }

    /// Waits for the child to exit (its output read to the end first), failing as
    /// [`next_line`](Self::next_line) does.
    pub fn wait(&mut self, deadline: Instant) -> std::result::Result<ExitStatus, String> {
        let mut stopped = StoppedFor::default();
        loop {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                return Ok(status);
            }
            stopped.check(self.id())?;
            if Instant::now() > deadline {
                return Err("did not exit in time".into());
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the child has exited, and how.
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }

    /// Watches the child while this process reads `stream` from it: a child stopped for
    /// [`STOPPED_WAIT`] gets `stream` shut down, so that the read ends; [`StreamGuard::finish`] says
    /// whether that happened.
    pub fn guard(&self, stream: &TcpStream) -> std::io::Result<StreamGuard> {
        let stream = stream.try_clone()?;
        let pid = self.id();
        let done = Arc::new(AtomicBool::new(false));
        let thread = {
            let done = done.clone();
            thread::spawn(move || {
                let mut stopped = StoppedFor::default();
                while !done.load(Ordering::Relaxed) {
                    if let Err(why) = stopped.check(pid) {
                        let _ = stream.shutdown(Shutdown::Both);
                        return Some(why);
                    }
                    thread::sleep(Duration::from_millis(100));
                }
                None
            })
        };
        Ok(StreamGuard {
            done,
            thread: Some(thread),
        })
    }

    /// Ends the child (it is ours: stopped by its pid) and turns `what` happened into the run's
    /// error, with the child's standard error.
    pub fn failure(mut self, what: &str) -> anyhow::Error {
        let _ = self.child.kill();
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let _ = self.child.wait();
        drop(self.stdin.take());
        match err.trim() {
            "" => anyhow::anyhow!("{} {what} (it wrote nothing on stderr)", self.what),
            err => anyhow::anyhow!("{} {what}: {err}", self.what),
        }
    }

    /// Ends the child (the run failed on this side).
    pub fn abandon(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The watch of [`Watched::guard`]. Its thread holds a handle on the stream and polls the child
/// until the watch ends: by [`finish`](Self::finish), or when the guard is dropped (a run that
/// returned early, or panicked), so that neither the thread nor the stream outlives the run.
#[derive(Debug)]
#[must_use = "the watch runs until finished or dropped"]
pub struct StreamGuard {
    done: Arc<AtomicBool>,
    /// `None` once the watch has ended.
    thread: Option<thread::JoinHandle<Option<String>>>,
}

impl StreamGuard {
    /// Ends the watch; why the stream was shut down, if it was.
    pub fn finish(mut self) -> Option<String> {
        self.end()
    }

    fn end(&mut self) -> Option<String> {
        self.done.store(true, Ordering::Relaxed);
        self.thread.take()?.join().ok().flatten()
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.end();
    }
}

/// Since when a child has been stopped.
#[derive(Default)]
struct StoppedFor(Option<Instant>);

impl StoppedFor {
    fn check(&mut self, pid: u32) -> std::result::Result<(), String> {
        if !process_stopped(pid) {
            self.0 = None;
        } else if self.0.get_or_insert_with(Instant::now).elapsed() > STOPPED_WAIT {
            return Err(format!(
                "was stopped (by a signal or a debugger) for over {STOPPED_WAIT:?}"
            ));
        }
        Ok(())
    }
}

/// Whether process `pid` is stopped (state `T`, or `t`: stopped by a tracer), from
/// `/proc/PID/stat`, whose third field, after the parenthesised command name, is the state.
pub fn process_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| matches!(state, 'T' | 't'))
    })
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    use std::process::Command;
    use std::time::Duration;

    use super::Watched;

    /// A guard dropped without `finish` (a run that returned early, or panicked) ends its watch:
    /// it lets go of its handle on the stream, so the stream closes when its owner drops it.
    #[test]
    fn a_guard_dropped_unfinished_lets_go_of_the_stream() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let ours = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut theirs, _) = listener.accept().unwrap();
        let child = Watched::spawn(Command::new("sleep").arg("60"), "a sleeping child").unwrap();
        drop(child.guard(&ours).unwrap());
        drop(ours);
        // Only a guard still holding the stream reaches this bound (the end of the stream comes
        // at once otherwise).
        theirs
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let read = theirs.read(&mut [0u8; 1]);
        // The child is this test's: ended by its pid.
        child.abandon();
        assert_eq!(read.ok(), Some(0), "the stream is still open");
    }
}
