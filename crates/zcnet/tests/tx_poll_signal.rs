//! Waiting for completions while signals arrive: a handled signal interrupts `poll` (`EINTR`, whatever
//! `SA_RESTART` says), and the wait must go on for the time left only — a process that takes a signal
//! every few milliseconds (a profiler's timer, a child's SIGCHLD) must still see its timeouts end.
#![allow(unsafe_code)]

use std::net::{Ipv4Addr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use zcnet::tx::errqueue::poll_socket;

static HANDLED: AtomicU64 = AtomicU64::new(0);

extern "C" fn count_signal(_sig: libc::c_int) {
    // An atomic add is async-signal-safe.
    HANDLED.fetch_add(1, Ordering::Relaxed);
}

/// Installs a SIGUSR1 handler without `SA_RESTART` (for `poll` it makes no difference: a handled
/// signal always ends it with `EINTR`).
fn install_handler() {
    // SAFETY: `sigaction` is plain old data; all-zero is a valid starting value.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = count_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: `action` is a valid sigaction whose handler only adds to an atomic; a null old-action
    // pointer is allowed.
    let rc = unsafe { libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "sigaction: {}", std::io::Error::last_os_error());
}

#[test]
fn a_wait_interrupted_by_signals_ends_at_its_timeout() {
    install_handler();
    // Nothing ever arrives on this socket's error queue, and POLLOUT is not asked for.
    let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    // SAFETY: pthread_self has no preconditions.
    let waiter = unsafe { libc::pthread_self() };
    let stop = Arc::new(AtomicBool::new(false));
    let storm = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            // Signals every 20 ms for up to 5 s: far longer than the 300 ms wait below.
            let end = Instant::now() + Duration::from_secs(5);
            while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                thread::sleep(Duration::from_millis(20));
                // SAFETY: `waiter` is the test thread, alive until it sets `stop` and joins us.
                let rc = unsafe { libc::pthread_kill(waiter, libc::SIGUSR1) };
                assert_eq!(rc, 0);
            }
        })
    };
    let timeout = Duration::from_millis(300);
    let start = Instant::now();
    let ready = poll_socket(socket.as_fd(), false, timeout).expect("poll");
    let waited = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    storm.join().unwrap();
    let handled = HANDLED.load(Ordering::Relaxed);
    assert!(
        !ready.error && !ready.writable && !ready.hangup,
        "{ready:?}"
    );
    assert!(
        handled >= 5,
        "only {handled} signals handled during the wait"
    );
    assert!(waited >= timeout, "returned early, after {waited:?}");
    // Restarting with the full timeout after each signal would wait until the signals stop (5 s).
    assert!(
        waited < Duration::from_secs(2),
        "a 300 ms wait took {waited:?} under {handled} signals"
    );
}
