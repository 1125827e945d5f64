//! One named network namespace, removed on drop.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::panic;
use std::process::Command;
use std::sync::Once;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::command::{run_checked, system_command};
use crate::{signals, sweep};

static NEXT_ID: AtomicU32 = AtomicU32::new(0);
static SWEEP_ONCE: Once = Once::new();

/// A network namespace named `zc<pid>-<n><role>`, bind-mounted under `/run/netns` so that
/// `ip netns exec` and child processes can enter it. Dropping it deletes the namespace; interfaces
/// inside it (such as the ends of a veth pair) go with it.
#[derive(Debug)]
pub struct Netns {
    name: String,
    file: File,
}

impl Netns {
    /// Creates a new, empty namespace with its loopback up. `role` is a short tag (`a`, `b`) that
    /// ends the name. Sweeps leftovers of dead processes the first time a process calls it.
    pub fn create(role: &str) -> io::Result<Netns> {
        SWEEP_ONCE.call_once(|| {
            if let Err(e) = sweep() {
                eprintln!("benchnet: sweeping old namespaces failed: {e}");
            }
        });
        let name = format!(
            "zc{}-{}{role}",
            std::process::id(),
            NEXT_ID.fetch_add(1, Ordering::Relaxed)
        );
        run_checked("ip", &["netns", "add", &name])?;
        signals::register(&name);
        let file = match File::open(format!("/run/netns/{name}")) {
            Ok(file) => file,
            Err(e) => {
                let _ = run_checked("ip", &["netns", "del", &name]);
                signals::unregister(&name);
                return Err(e);
            }
        };
        let ns = Netns { name, file };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name, as `ip netns list` shows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n <name> args…` (an iproute2 command inside this namespace).
    pub fn ip(&self, args: &[&str]) -> io::Result<String> {
        let mut full = vec!["-n", self.name.as_str()];
        full.extend_from_slice(args);
        run_checked("ip", &full)
    }

    /// `ip -d link show IFACE` once no XDP program shows on it, or after two seconds. Closing a BPF
    /// link's last descriptor detaches its program, but a child that another thread of this process
    /// forks at that moment holds a copy of every descriptor until it execs (close-on-exec), which
    /// under load can take a while.
    pub fn link_once_xdp_detached(&self, iface: &str) -> io::Result<String> {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let shown = self.ip(&["-d", "link", "show", iface])?;
            if !shown.contains("prog/xdp") || Instant::now() > deadline {
                return Ok(shown);
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Runs `program args…` inside this namespace and returns its standard output.
    pub fn exec(&self, program: &str, args: &[&str]) -> io::Result<String> {
        let mut full = vec!["netns", "exec", self.name.as_str(), program];
        full.extend_from_slice(args);
        run_checked("ip", &full)
    }

    /// A `Command` that starts `program` inside this namespace (through `ip netns exec`).
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = system_command("ip");
        cmd.args(["netns", "exec", &self.name, program]);
        cmd
    }

    /// Runs `f` on a new thread that has entered this namespace, and returns its result. Sockets
    /// created by `f` belong to the namespace. A panic in `f` is resumed on the caller's thread.
    pub fn run<R: Send, F: FnOnce() -> R + Send>(&self, f: F) -> R {
        thread::scope(|s| {
            let handle = s.spawn(|| {
                enter(self.file.as_fd()).expect("setns into the test namespace");
                f()
            });
            handle.join().unwrap_or_else(|p| panic::resume_unwind(p))
        })
    }

    /// Starts `f` on a new thread inside this namespace and returns its handle.
    pub fn spawn<R, F>(&self, f: F) -> io::Result<thread::JoinHandle<R>>
    where
        R: Send + 'static,
        F: FnOnce() -> R + Send + 'static,
    {
        let file = self.file.try_clone()?;
        thread::Builder::new()
            .name(format!("in-{}", self.name))
            .spawn(move || {
                enter(file.as_fd()).expect("setns into the test namespace");
                drop(file);
                f()
            })
    }

    /// Writes a sysctl of this namespace (`net.core.optmem_max` and the other per-namespace `net.*`
    /// keys), from a thread inside it: `/proc/sys/net` shows the namespace of the task that opens it.
    pub fn set_sysctl(&self, key: &str, value: &str) -> io::Result<()> {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        self.run(|| std::fs::write(&path, value))
            .map_err(|e| io::Error::new(e.kind(), format!("writing {key} in {}: {e}", self.name)))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = run_checked("ip", &["netns", "del", &self.name]) {
            eprintln!("benchnet: removing namespace {}: {e}", self.name);
        }
        signals::unregister(&self.name);
    }
}

/// Moves the calling thread into the network namespace `ns` refers to (`setns(CLONE_NEWNET)`): sockets
/// it creates from then on belong to that namespace. Other threads are not affected.
fn enter(ns: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};
    move_into_link_name_space(ns, Some(LinkNameSpaceType::Network)).map_err(io::Error::from)
}
