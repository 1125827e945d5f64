//! Generic socket options and process facts (resource usage, limits, kernel release) shared by every
//! mechanism above `sys`.

use std::ffi::CStr;
use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// `socket(domain, kind | SOCK_CLOEXEC, protocol)`: a new socket owned by the caller.
pub fn socket(domain: i32, kind: i32, protocol: i32) -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes no pointers.
    let raw = syscall!(socket(domain, kind | libc::SOCK_CLOEXEC, protocol))?;
    // SAFETY: `raw` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Waits up to `timeout_ms` (-1 = forever) for `events` on `fd` (`poll(2)`); returns the revents, 0 on
/// timeout. `POLLERR` and `POLLHUP` are reported whatever `events` asks. Polling an AF_XDP socket also
/// wakes the driver when its fill ring needs it.
///
/// A signal handled while waiting makes `poll` fail with `EINTR` (whatever `SA_RESTART` says); the
/// call is repeated with the time left until the deadline, so signals never stretch the wait.
pub fn poll(fd: BorrowedFd<'_>, events: i16, timeout_ms: i32) -> io::Result<i16> {
    let mut pfd = [libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    }];
    poll_all(&mut pfd, timeout_ms)?;
    Ok(pfd[0].revents)
}

/// [`poll`] over several descriptors at once: waits up to `timeout_ms` until `events` (or an error)
/// is ready on any of `fds`; returns whether one is.
pub fn poll_any(fds: &[BorrowedFd<'_>], events: i16, timeout_ms: i32) -> io::Result<bool> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events,
            revents: 0,
        })
        .collect();
    poll_all(&mut pfds, timeout_ms)?;
    Ok(pfds.iter().any(|p| p.revents != 0))
}

/// [`poll`] over several descriptors at once, each with its own events; `None` entries are left
/// out (the kernel skips a negative descriptor). Waits up to `timeout_ms` until one is ready;
/// returns each entry's revents, in order (0 for those left out and on timeout).
pub fn poll_each(fds: &[Option<(BorrowedFd<'_>, i16)>], timeout_ms: i32) -> io::Result<Vec<i16>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|entry| {
            let (fd, events) = entry.map_or((-1, 0), |(fd, events)| (fd.as_raw_fd(), events));
            libc::pollfd {
                fd,
                events,
                revents: 0,
            }
        })
        .collect();
    poll_all(&mut pfds, timeout_ms)?;
    Ok(pfds.iter().map(|p| p.revents).collect())
}

/// `poll(2)` on `pfds`, repeated after `EINTR` with the time left until the deadline.
fn poll_all(pfds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<()> {
    let deadline = u64::try_from(timeout_ms)
        .ok()
        .map(|ms| Instant::now() + Duration::from_millis(ms));
    super::retry_if_interrupted(|| {
        let wait_ms = match deadline {
            None => -1,
            Some(d) => poll_ms(d.saturating_duration_since(Instant::now())),
        };
        // SAFETY: `pfds` is a live, writable slice of pollfds and the count passed is its length.
        syscall!(poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, wait_ms))
    })
    .map(drop)
}

/// A wait of `timeout` (`None`: no limit) as `poll`'s milliseconds, rounded up and capped at
/// `i32::MAX` (-1 for no limit).
pub fn poll_timeout(timeout: Option<Duration>) -> i32 {
    timeout.map_or(-1, poll_ms)
}

/// `left` in whole milliseconds for `poll`, rounded up so that a wait never ends before its deadline
/// (at most the `timeout_ms` the caller gave, which fits an `i32`).
fn poll_ms(left: Duration) -> i32 {
    let ms = left.as_nanos().div_ceil(1_000_000);
    i32::try_from(ms).unwrap_or(i32::MAX)
}

/// `setsockopt(fd, level, name, &value, sizeof(int))` for the many options that take a C `int`.
pub fn set_int_option(fd: BorrowedFd<'_>, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: `value` is a live `c_int` and the length passed is exactly its size.
    syscall!(setsockopt(
        fd.as_raw_fd(),
        level,
        name,
        (&value as *const i32).cast(),
        mem::size_of::<i32>() as libc::socklen_t,
    ))
    .map(drop)
}

/// Makes the socket's last close reset the connection instead of ending it: `SO_LINGER` on with a
/// zero timeout, under which `tcp_close` discards what is unsent and sends RST rather than FIN, so
/// that the peer reads `ECONNRESET`, not the end of a whole stream.
pub fn reset_on_close(fd: BorrowedFd<'_>) -> io::Result<()> {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `linger` is a live `struct linger` and the length passed is exactly its size.
    syscall!(setsockopt(
        fd.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_LINGER,
        (&linger as *const libc::linger).cast(),
        mem::size_of::<libc::linger>() as libc::socklen_t,
    ))
    .map(drop)
}

/// `getsockopt` for an option whose value is a C `int`.
pub fn get_int_option(fd: BorrowedFd<'_>, level: i32, name: i32) -> io::Result<i32> {
    let mut value: i32 = 0;
    let mut len = mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live locals; the kernel writes at most `len` bytes into `value`.
    syscall!(getsockopt(
        fd.as_raw_fd(),
        level,
        name,
        (&mut value as *mut i32).cast(),
        &mut len,
    ))?;
    Ok(value)
}

/// Sends at once what Nagle's algorithm holds back on a TCP socket, by turning `TCP_NODELAY` on
/// and off again: turning it on pushes the pending segments (`__tcp_sock_set_nodelay` calls
/// `tcp_push_pending_frames`, past Nagle's algorithm and `TCP_CORK`), turning it off again leaves
/// later writes to the algorithm as before. Does nothing when the option is on (nothing is held
/// back for it then) or no byte waits unsent (`SIOCOUTQNSD`). Another descriptor of the socket that
/// turns the option on between the read and the two writes finds it off again.
pub fn push_held_segments(fd: BorrowedFd<'_>) -> io::Result<()> {
    if get_int_option(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY)? != 0 {
        return Ok(());
    }
    let mut unsent: libc::c_int = 0;
    // SAFETY: the ioctl writes one int through the pointer, which points at a live local.
    syscall!(ioctl(fd.as_raw_fd(), libc::SIOCOUTQNSD, &mut unsent))?;
    if unsent == 0 {
        return Ok(());
    }
    set_int_option(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)?;
    set_int_option(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 0)
}

/// The identity of the kernel socket behind `fd`: the device and inode number of its sockfs inode
/// (`fstat`). Every descriptor of one socket — `dup`, `try_clone`, one received over `SCM_RIGHTS` —
/// gives the same pair, and two sockets alive at once give different ones, except when the kernel's
/// 32-bit inode counter (`get_next_ino`) wrapped around during the older one's life.
pub fn socket_identity(fd: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    // SAFETY: `stat` is plain old data; all-zero is a valid value.
    let mut st: libc::stat = unsafe { mem::zeroed() };
    // SAFETY: `st` is a live, writable `stat` and `fd` a descriptor borrowed for the call.
    syscall!(fstat(fd.as_raw_fd(), &mut st))?;
    Ok((st.st_dev, st.st_ino))
}

/// Reads socket option `level`/`name` into a `T` that starts all-zero; returns it and how many
/// bytes of it the kernel filled in.
///
/// # Safety
/// `T` must be plain old data (a kernel struct of integers) for which every bit pattern, all
/// zeroes included, is a valid value.
pub(crate) unsafe fn get_struct_option<T>(
    fd: BorrowedFd<'_>,
    level: i32,
    name: i32,
) -> io::Result<(T, usize)> {
    // SAFETY: the caller promises all-zero is a valid `T`.
    let mut value: T = unsafe { mem::zeroed() };
    let mut len = mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live locals; the kernel writes at most `len` bytes into
    // `value`, and any bytes it writes make a valid `T` (the caller's promise).
    syscall!(getsockopt(
        fd.as_raw_fd(),
        level,
        name,
        (&mut value as *mut T).cast(),
        &mut len,
    ))?;
    Ok((value, len as usize))
}

/// The socket's `TCP_INFO` and how many bytes of it the kernel filled in (older kernels fill less).
fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<(libc::tcp_info, usize)> {
    // SAFETY: `tcp_info` is integers only: every bit pattern is valid.
    unsafe { get_struct_option(fd, libc::IPPROTO_TCP, libc::TCP_INFO) }
}

/// Whether a TCP socket is closed (`tcpi_state` is `TCP_CLOSE`): after a reset or a timeout, or
/// once both sides finished. A connected socket that only received the peer's FIN is in
/// `CLOSE_WAIT`.
pub fn tcp_closed(fd: BorrowedFd<'_>) -> io::Result<bool> {
    const TCP_CLOSE: u8 = 7;
    Ok(tcp_info(fd)?.0.tcpi_state == TCP_CLOSE)
}

/// Whether a TCP socket has never had data written to it: no data segment ever left it
/// (`tcpi_data_segs_out`, retransmissions included) and none waits to be sent
/// (`tcpi_notsent_bytes`), both from `TCP_INFO` (Linux 4.6+). `Ok(false)` when the kernel's
/// `tcp_info` is too short to say.
pub fn tcp_nothing_written(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let (info, len) = tcp_info(fd)?;
    let needed = mem::offset_of!(libc::tcp_info, tcpi_data_segs_out) + mem::size_of::<u32>();
    Ok(len >= needed && info.tcpi_data_segs_out == 0 && info.tcpi_notsent_bytes == 0)
}

#[cfg(any(feature = "io-uring", feature = "bench-internals"))]
/// How a TCP connection's sending side is faring, from `TCP_INFO`: what a sender that stopped
/// making progress needs to tell a peer that does not read from a path that drops its segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpSendState {
    /// Bytes the peer acknowledged (`tcpi_bytes_acked`, Linux 4.1+): grows while data flows.
    pub bytes_acked: u64,
    /// Segments sent and not yet acknowledged (`tcpi_unacked`).
    pub unacked: u32,
    /// Bytes written but not yet sent (`tcpi_notsent_bytes`, Linux 4.6+).
    pub notsent_bytes: u32,
    /// The peer's last advertised receive window, scaled (`tcpi_snd_wnd`, Linux 5.4+): 0 when the
    /// peer's receive buffer is full, that is when it does not read.
    pub snd_wnd: Option<u32>,
    /// The congestion window in bytes, `tcpi_snd_cwnd` segments of `tcpi_snd_mss` bytes: how much
    /// the connection may have sent and not yet acknowledged.
    pub congestion_window: u64,
    /// Retransmissions of the connection so far (`tcpi_total_retrans`).
    pub total_retrans: u32,
    /// Milliseconds since the last ACK arrived (`tcpi_last_ack_recv`).
    pub ms_since_ack: u32,
    /// Whether the connection is still established (`tcpi_state` is `TCP_ESTABLISHED`).
    pub established: bool,
}

#[cfg(any(feature = "io-uring", feature = "bench-internals"))]
/// `TCP_ESTABLISHED` of the kernel's `include/net/tcp_states.h` (libc does not define it).
const TCP_ESTABLISHED: u8 = 1;

#[cfg(any(feature = "io-uring", feature = "bench-internals"))]
/// The [`TcpSendState`] of a TCP socket (`getsockopt(TCP_INFO)`).
pub fn tcp_send_state(fd: BorrowedFd<'_>) -> io::Result<TcpSendState> {
    let (info, len) = tcp_info(fd)?;
    let snd_wnd_end = mem::offset_of!(libc::tcp_info, tcpi_snd_wnd) + mem::size_of::<u32>();
    Ok(TcpSendState {
        bytes_acked: info.tcpi_bytes_acked,
        unacked: info.tcpi_unacked,
        notsent_bytes: info.tcpi_notsent_bytes,
        snd_wnd: (len >= snd_wnd_end).then_some(info.tcpi_snd_wnd),
        congestion_window: u64::from(info.tcpi_snd_cwnd) * u64::from(info.tcpi_snd_mss),
        total_retrans: info.tcpi_total_retrans,
        ms_since_ack: info.tcpi_last_ack_recv,
        established: info.tcpi_state == TCP_ESTABLISHED,
    })
}

/// Which task's resource usage [`resource_usage`] reports.
#[cfg(feature = "bench-internals")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageOf {
    /// The calling thread only (`RUSAGE_THREAD`): the cost of one side of a benchmark.
    Thread,
    /// The whole process (`RUSAGE_SELF`).
    Process,
}

/// CPU time and context switches, as `getrusage(2)` reports them.
#[cfg(feature = "bench-internals")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResourceUsage {
    /// Time spent in user mode.
    pub user: Duration,
    /// Time spent in the kernel on this task's behalf.
    pub system: Duration,
    /// Voluntary context switches (the task blocked).
    pub voluntary_switches: u64,
    /// Involuntary context switches (the task was preempted).
    pub involuntary_switches: u64,
}

#[cfg(feature = "bench-internals")]
impl ResourceUsage {
    /// The usage accumulated between `earlier` and `self`.
    pub fn since(&self, earlier: &ResourceUsage) -> ResourceUsage {
        ResourceUsage {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
            voluntary_switches: self
                .voluntary_switches
                .saturating_sub(earlier.voluntary_switches),
            involuntary_switches: self
                .involuntary_switches
                .saturating_sub(earlier.involuntary_switches),
        }
    }

    /// All context switches, voluntary and not (tcp_mmap's "context switches").
    pub fn context_switches(&self) -> u64 {
        self.voluntary_switches + self.involuntary_switches
    }
}

/// `getrusage(2)` for the calling thread or process.
#[cfg(feature = "bench-internals")]
pub fn resource_usage(of: UsageOf) -> io::Result<ResourceUsage> {
    let who = match of {
        UsageOf::Thread => libc::RUSAGE_THREAD,
        UsageOf::Process => libc::RUSAGE_SELF,
    };
    // SAFETY: `rusage` is plain old data; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { mem::zeroed() };
    // SAFETY: `ru` is a live, writable `rusage`.
    syscall!(getrusage(who, &mut ru))?;
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    Ok(ResourceUsage {
        user: tv(ru.ru_utime),
        system: tv(ru.ru_stime),
        voluntary_switches: ru.ru_nvcsw as u64,
        involuntary_switches: ru.ru_nivcsw as u64,
    })
}

/// CPU time the calling thread has used so far (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`). Unlike
/// `getrusage`, whose figures advance at scheduler ticks, the kernel brings the running thread's
/// runtime up to date before answering, so two readings a few milliseconds apart differ by what ran.
pub fn thread_cpu_time() -> io::Result<Duration> {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// `CLOCK_MONOTONIC` now: the clock the Open vSwitch datapath stamps a flow's last use with
/// (`OVS_FLOW_ATTR_USED`, milliseconds).
#[cfg(feature = "bench-internals")]
pub fn monotonic_time() -> io::Result<Duration> {
    clock(libc::CLOCK_MONOTONIC)
}

fn clock(id: libc::clockid_t) -> io::Result<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live, writable `timespec`.
    syscall!(clock_gettime(id, &mut ts))?;
    Ok(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// The running kernel's release string (`uname -r`).
pub fn kernel_release() -> io::Result<String> {
    // SAFETY: `utsname` is plain old data; all-zero is a valid value.
    let mut uts: libc::utsname = unsafe { mem::zeroed() };
    // SAFETY: `uts` is a live, writable `utsname`.
    syscall!(uname(&mut uts))?;
    // SAFETY: the kernel NUL-terminates every `utsname` field.
    let release = unsafe { CStr::from_ptr(uts.release.as_ptr()) };
    Ok(release.to_string_lossy().into_owned())
}

/// The soft and hard `RLIMIT_MEMLOCK` in bytes (`None` = unlimited). Pages pinned by MSG_ZEROCOPY and
/// AF_XDP UMEMs are charged against it unless the process has CAP_IPC_LOCK.
pub fn memlock_limit() -> io::Result<(Option<u64>, Option<u64>)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a live, writable `rlimit`.
    syscall!(getrlimit(libc::RLIMIT_MEMLOCK, &mut lim))?;
    let conv = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v);
    Ok((conv(lim.rlim_cur), conv(lim.rlim_max)))
}

/// The process's effective group id followed by its supplementary groups, as this user namespace
/// numbers them.
pub fn groups() -> Vec<u32> {
    // SAFETY: getegid has no arguments and cannot fail.
    let mut out = vec![unsafe { libc::getegid() }];
    // SAFETY: a zero-length call only counts the groups.
    let Ok(n) = syscall!(getgroups(0, std::ptr::null_mut())) else {
        return out;
    };
    let mut list: Vec<libc::gid_t> = vec![0; n as usize];
    // SAFETY: `list` holds `n` writable gids.
    if let Ok(got) = syscall!(getgroups(n, list.as_mut_ptr())) {
        list.truncate(got as usize);
        out.extend(list);
    }
    out
}

/// The effective user id (0 = root); the library decides by capabilities, tests by uid.
#[cfg(test)]
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    #[test]
    fn int_options_round_trip() {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        set_int_option(sock.as_fd(), libc::SOL_SOCKET, libc::SO_RCVLOWAT, 1).unwrap();
        set_int_option(sock.as_fd(), libc::SOL_SOCKET, libc::SO_PRIORITY, 3).unwrap();
        assert_eq!(
            get_int_option(sock.as_fd(), libc::SOL_SOCKET, libc::SO_PRIORITY).unwrap(),
            3
        );
    }

    #[test]
    fn usage_grows_and_release_reads() {
        let a = resource_usage(UsageOf::Thread).unwrap();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(x);
        let b = resource_usage(UsageOf::Thread).unwrap();
        // Twenty million dependent multiply-adds take milliseconds of this thread's CPU time.
        let spent = b.since(&a).user + b.since(&a).system;
        assert!(spent > Duration::ZERO, "no CPU time counted: {spent:?}");
        assert!(
            kernel_release()
                .unwrap()
                .chars()
                .next()
                .unwrap()
                .is_ascii_digit()
        );
    }
}
