//! Loading XDP programs while signals arrive: the verifier gives up with `EAGAIN` when a signal is
//! pending (`do_check` tests `signal_pending` as it walks the program), so a process that takes
//! signals (a profiler's timer, a child's SIGCHLD, an async runtime's wakeups) must still load its
//! programs.
#![allow(unsafe_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use zcnet::xdp::{FrameMatch, XdpProgram};

static HANDLED: AtomicU64 = AtomicU64::new(0);

extern "C" fn count_signal(_sig: libc::c_int) {
    // An atomic add is async-signal-safe.
    HANDLED.fetch_add(1, Ordering::Relaxed);
}

#[test]
fn programs_load_while_signals_keep_arriving() {
    if !testnet::privileged("programs_load_while_signals_keep_arriving") {
        return;
    }
    // SAFETY: `sigaction` is plain old data; all-zero is a valid starting value.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = count_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: `action` is a valid sigaction whose handler only adds to an atomic; a null old-action
    // pointer is allowed.
    let rc = unsafe { libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "sigaction: {}", std::io::Error::last_os_error());
    // SAFETY: pthread_self has no preconditions.
    let loader = unsafe { libc::pthread_self() };
    let stop = Arc::new(AtomicBool::new(false));
    let storm = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                thread::sleep(Duration::from_micros(STORM_US));
                // SAFETY: `loader` is the test thread, alive until it sets `stop` and joins us.
                let rc = unsafe { libc::pthread_kill(loader, libc::SIGUSR1) };
                assert_eq!(rc, 0);
            }
        })
    };
    // At least LOADS loads and SIGNALS signals (the storm's thread may start late on a busy
    // machine), within a bound.
    let (mut loads, mut failed) = (0, Vec::new());
    let end = Instant::now() + Duration::from_secs(20);
    while (loads < LOADS || HANDLED.load(Ordering::Relaxed) < SIGNALS) && Instant::now() < end {
        if let Err(e) = XdpProgram::redirect_to_xsk(4, FrameMatch::UdpPort(4791)) {
            failed.push(e.to_string());
        }
        loads += 1;
    }
    stop.store(true, Ordering::Relaxed);
    storm.join().unwrap();
    let handled = HANDLED.load(Ordering::Relaxed);
    eprintln!(
        "{loads} loads, {handled} signals handled, {} failed",
        failed.len()
    );
    assert!(handled >= SIGNALS, "only {handled} signals arrived");
    assert!(
        failed.is_empty(),
        "{} of {loads} loads failed, first: {}",
        failed.len(),
        failed[0]
    );
}

/// Loads at least, and signals handled at least, in a run.
const LOADS: usize = 300;
const SIGNALS: u64 = 50;
/// The storm's pace: without the retry about a fifth of the loads fail with `EAGAIN` at this pace.
const STORM_US: u64 = 50;
