//! Pools and transparent huge pages. The kernel registers a huge page with an io_uring as one
//! piece, and a fixed send from it is charged to the socket from the page's start to the send's
//! end; so the io_uring path declines to register a pool on huge pages, and sends its buffers
//! unregistered, each charged what it carries, as the sendmsg path does. A pool not on huge pages
//! is advised never to be (`MADV_NOHUGEPAGE`), so that THP enabled `always` cannot put it there.

mod tx_common;

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use tx_common::{Checksum, assert_stream_delivered, path_config};
use zcnet::Cause;
use zcnet::tx::{BufferPool, Mode, PoolConfig, SendPath, Sender};

const BUF: usize = 64 << 10;
/// One huge page of buffers.
const COUNT: usize = 32;

/// `SK_MEMINFO_WMEM_QUEUED` of `getsockopt(SO_MEMINFO)`: the socket memory charged for what its
/// send queue holds.
fn wmem_queued(fd: BorrowedFd<'_>) -> u32 {
    const SK_MEMINFO_WMEM_QUEUED: usize = 5;
    let mut info = [0u32; 9];
    let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: `info` and `len` are live and `len` is `info`'s size.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "SO_MEMINFO: {}", std::io::Error::last_os_error());
    info[SK_MEMINFO_WMEM_QUEUED]
}

/// Bytes in the send queue of a TCP socket, sent or not, not yet acknowledged (`SIOCOUTQ`).
fn send_queue_bytes(fd: BorrowedFd<'_>) -> u32 {
    let mut n: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (SIOCOUTQ) writes one int.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
    assert_eq!(rc, 0, "SIOCOUTQ: {}", std::io::Error::last_os_error());
    n as u32
}

#[test]
fn a_pool_not_on_huge_pages_is_advised_never_to_be() {
    let pool = tx_common::pool(BUF, 4);
    let buf = pool.take().unwrap();
    let flags = testnet::smaps_field(buf.as_ptr() as usize, "VmFlags");
    assert!(
        flags.split_whitespace().any(|f| f == "nh"),
        "VmFlags {flags}"
    );
}

each_path! {
    fn a_huge_page_pool_is_sent_unregistered_and_charged_what_it_carries(path: SendPath) {
        let test = format!(
            "a_huge_page_pool_is_sent_unregistered_and_charged_what_it_carries::{}",
            path.name()
        );
        let test = test.as_str();
        let pool = BufferPool::new({
            let mut config = PoolConfig::default();
            config.buf_size = BUF;
            config.count = COUNT;
            config.huge_pages = true;
            config
        })
        .expect("pool");
        if let Err(why) = pool.huge_pages() {
            testnet::skip(test, &format!("no transparent huge pages: {why}"));
            return;
        }
        // The whole huge page, in order: buffer k starts k * 64 KiB into it.
        let mut sent = Checksum::default();
        let bufs: Vec<_> = (0..COUNT)
            .map(|_| {
                let mut buf = pool.take().unwrap();
                sent.fill_next(&mut buf, BUF);
                buf
            })
            .collect();
        if testnet::anon_huge_kib(bufs[0].as_ptr() as usize) == 0 {
            let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
                .unwrap_or_default();
            testnet::skip(
                test,
                &format!("no huge page backs the pool (THP enabled: {})", thp.trim()),
            );
            return;
        }

        // The 32 sends pin 2 MiB at once, unregistered: under a normal user's locked-memory limit
        // the budget is this test's alone.
        let _turn = testnet::memlock_turn();
        // A receiver that does not read yet, with a small window: the bytes stay in the sender's
        // send queue, whose memory the kernel charges as it counts each send.
        let (stream, server) = tx_common::backlog_pair();

        let mut tx = Sender::new(stream, path_config(path, Mode::ZeroCopy));
        tx.path_status().expect("the configured path");
        let unregistered = tx
            .register_pool(&pool)
            .expect_err("a pool on huge pages is not registered");
        if matches!(path, SendPath::IoUring { .. }) {
            assert!(
                matches!(unregistered.cause(), Cause::Declined(_)),
                "{unregistered:?}"
            );
            assert!(unregistered.to_string().contains("huge pages"), "{unregistered}");
        }
        assert_eq!(tx.registration_status(), Err(unregistered));

        for buf in bufs {
            tx.send(buf).expect("send");
        }
        let total = (COUNT * BUF) as u64;
        let deadline = Instant::now() + Duration::from_secs(10);
        while tx.stats().bytes < total && Instant::now() < deadline {
            tx.poll_completions().expect("completions");
            std::thread::sleep(Duration::from_millis(5));
        }
        let fd = tx.get_ref().as_fd();
        let (charged, queued) = (wmem_queued(fd), send_queue_bytes(fd));
        assert_eq!(
            tx.stats().bytes,
            total,
            "the socket took {} of {total} bytes: its send buffer is full, {charged} bytes charged \
             for {queued} queued",
            tx.stats().bytes
        );
        assert!(
            u64::from(charged) <= 2 * u64::from(queued) + BUF as u64,
            "{charged} bytes of socket memory charged for {queued} bytes queued"
        );

        let sink = std::thread::spawn(move || tx_common::read_checksum(server));
        tx.flush(Duration::from_secs(20)).expect("flush");
        let stats = tx.stats().clone();
        // Every send zero-copy (pinned per request, none refused): one call each on sendmsg,
        // gathered several to a request on io_uring.
        assert!(stats.zc_calls > 0 && stats.zc_calls == stats.calls, "{stats:?}");
        drop(tx.close(Duration::from_secs(1)).expect("close"));
        assert_stream_delivered(sink, sent, &pool, &stats);
    }
}
