//! Per-send latency (`SenderConfig::timestamps`) on both paths, from the kernel's own transmit
//! timestamps joined to each send (on io_uring through `SOCKET_URING_OP_TX_TIMESTAMP`, Linux
//! 6.17): a TCP socket paced by `SO_MAX_PACING_RATE` at two rates takes as much longer from send to
//! acknowledgement as the pacing predicts; on TCP and UDP every zero-copy send gets its steps and
//! no timestamp is left unmatched (keys counted as the kernel counts them: bytes on TCP, calls on
//! UDP), every byte delivered.

mod tx_common;

use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::time::Duration;

use testnet::Netns;
use tx_common::{Checksum, cap_pacing_rate, path_config, tcp_pair, udp_sink};
use zcnet::tx::{Mode, SendPath, Sender, TxStats};

const WAIT: Duration = Duration::from_secs(20);

/// Whether `path` reads timestamps on this kernel: the io_uring path needs Linux 6.17
/// (`SOCKET_URING_OP_TX_TIMESTAMP`); [`testnet::skip`]s `test` saying so when it is older.
fn path_has_timestamps(path: SendPath, test: &str) -> bool {
    if path == SendPath::SENDMSG {
        return true;
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut numbers = release.split(|c: char| !c.is_ascii_digit());
    let mut next = || {
        numbers
            .next()
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0)
    };
    let version = (next(), next());
    if version >= (6, 17) {
        return true;
    }
    testnet::skip(
        &format!("{test}::io_uring"),
        &format!(
            "kernel {} has no SOCKET_URING_OP_TX_TIMESTAMP (Linux 6.17)",
            release.trim()
        ),
    );
    false
}

/// Runs `f` in a fresh network namespace (its own loopback, no other test's traffic), or, for a
/// process that may not make one, on this namespace's loopback, saying so.
fn in_netns<R: Send>(test: &str, f: impl FnOnce() -> R + Send) -> R {
    match Netns::create("a") {
        Ok(ns) => ns.run(f),
        Err(e) => {
            testnet::adapted(
                test,
                &format!("no network namespace ({e}): on this namespace's loopback"),
            );
            f()
        }
    }
}

/// `sends` zero-copy sends of `size` bytes over loopback TCP paced at `rate` bytes per second,
/// each flushed (its buffer back) before the next, so that each starts on an idle connection.
fn paced_tcp(path: SendPath, rate: u64, sends: usize, size: usize) -> TxStats {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let (stream, sink) = tcp_pair(listener);
    cap_pacing_rate(&stream, rate);
    let mut config = path_config(path, Mode::ZeroCopy);
    config.timestamps = true;
    let mut tx = Sender::new(stream, config);
    tx.path_status().expect("the configured path");
    tx.zerocopy_status().expect("zero-copy on TCP");
    let mut sent = Checksum::default();
    for i in 0..sends {
        let buf: Vec<u8> = (0..size).map(|k| (i * 31 + k) as u8).collect();
        sent.update(&buf);
        tx.send(buf).expect("send");
        tx.flush(WAIT).expect("flush");
    }
    let stats = tx.stats().clone();
    drop(tx.close(Duration::from_secs(1)).expect("close"));
    assert_eq!(sink.join().expect("sink"), sent, "bytes delivered");
    stats
}

each_path! {
    fn pacing_stretches_the_step_from_send_to_acknowledgement_as_predicted(path: SendPath) {
        let test = "pacing_stretches_the_step_from_send_to_acknowledgement_as_predicted";
        if path_has_timestamps(path, test) {
            paced(path, test);
        }
    }
}

fn paced(path: SendPath, test: &str) {
    // 64 KiB at 4 MB/s leaves over ~16 ms, at 1 MB/s over ~64 ms: a ratio of 4.
    let (size, sends) = (64 << 10, 12);
    let (fast, slow) = (4_000_000u64, 1_000_000u64);
    let (f, s) = in_netns(test, || {
        (
            paced_tcp(path, fast, sends, size),
            paced_tcp(path, slow, sends, size),
        )
    });
    for (rate, stats) in [(fast, &f), (slow, &s)] {
        let l = &stats.latency;
        eprintln!(
            "{rate} B/s: {} sends joined, acked p50 {:?} p99 {:?} max {:?}, freed p50 {:?}, sent \
             p50 {:?}, unmatched {}",
            l.sends,
            l.acked.p50(),
            l.acked.p99(),
            l.acked.max(),
            l.freed.p50(),
            l.sent.p50(),
            l.unmatched
        );
        assert_eq!(l.sends, sends as u64, "every send joined");
        assert_eq!(l.acked.count(), sends as u64, "every send acknowledged");
        assert_eq!(l.freed.count(), sends as u64, "every buffer back");
        assert_eq!(
            l.sent.count(),
            sends as u64,
            "every send handed to the device"
        );
        // A retransmission (a tail loss probe of a loaded host) stamps a joined send's key again
        // (scheduled and sent: two stamps); keys numbered unlike the kernel's would leave every
        // send without its steps above.
        assert!(l.unmatched < sends as u64, "{} unmatched", l.unmatched);
        // The pacing bounds the step from below: the last byte cannot leave before size / rate.
        let predicted = size as f64 / rate as f64;
        let acked = l.acked.p50().unwrap().as_secs_f64();
        assert!(
            acked / predicted > 0.5,
            "acknowledged after {acked} s, the pacing predicts {predicted} s"
        );
    }
    let ratio =
        s.latency.acked.p50().unwrap().as_secs_f64() / f.latency.acked.p50().unwrap().as_secs_f64();
    let predicted = fast as f64 / slow as f64;
    eprintln!("slow / fast acked p50: {ratio:.2} (pacing predicts {predicted})");
    assert!(
        (predicted / 2.0..=predicted * 2.0).contains(&ratio),
        "queued → acknowledged grew {ratio:.2}x for a {predicted}x slower pacing"
    );
}

each_path! {
    /// UDP keys count send calls, copied ones too: with every other datagram below the threshold
    /// (copied, no completion id), every datagram still gets its own stamps and none is unmatched.
    fn udp_datagram_keys_join_zero_copy_and_copied_sends(path: SendPath) {
        let test = "udp_datagram_keys_join_zero_copy_and_copied_sends";
        if path_has_timestamps(path, test) {
            udp_keys(path, test);
        }
    }
}

fn udp_keys(path: SendPath, test: &str) {
    in_netns(test, || {
        let rx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let tx_socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        tx_socket.connect(rx.local_addr().unwrap()).unwrap();
        let sink = udp_sink(rx);
        let mut config = path_config(path, Mode::Auto);
        config.policy.threshold = 8 << 10;
        config.timestamps = true;
        let mut tx = Sender::new(tx_socket, config);
        let mut sent = Checksum::default();
        let datagrams = 64u64;
        for i in 0..datagrams {
            let size = if i % 2 == 0 { 16 << 10 } else { 1200 };
            let buf: Vec<u8> = (0..size).map(|k| (i as usize + k) as u8).collect();
            sent.update(&buf);
            tx.send(buf).expect("send");
            sink.throttle(sent.len);
        }
        tx.flush(WAIT).expect("flush");
        // The copied datagrams' stamps may still be queued: read them.
        std::thread::sleep(Duration::from_millis(50));
        tx.poll_completions().expect("poll");
        let stats = tx.stats().clone();
        drop(tx.close(Duration::from_secs(1)).expect("close"));
        let (got, got_datagrams) = sink.finish(sent.len);
        assert_eq!(
            (got, got_datagrams),
            (sent, datagrams),
            "datagrams delivered"
        );
        let l = &stats.latency;
        assert!(stats.zc_calls > 0 && stats.copy_small > 0, "{stats:?}");
        assert_eq!(l.unmatched, 0, "{l:?}");
        assert_eq!(l.sends, datagrams, "{l:?}");
        assert_eq!(l.sent.count(), datagrams, "{l:?}");
        assert_eq!(l.scheduled.count(), datagrams, "{l:?}");
        assert_eq!(l.freed.count(), stats.zc_calls, "{l:?}");
        assert_eq!(l.acked.count(), 0, "no ACK on UDP");
    });
}
