//! Streams to a TCP receiver with zcnet's sender on its io_uring path for a while, and prints one line:
//! bytes sent, seconds, MB/s (MiB per second), zero-copied and copied ids.
//!
//! Sources, all from a pool registered with the ring (fixed sends, unless `huge`):
//! - `pool` (the default): every send lends the next free buffer of the pool, as a stream of distinct
//!   data would;
//! - `one`: one pool buffer, frozen ([`zcnet::tx::FrozenBuf`]), lent to every send while the others
//!   are in flight, as the kernel's `io_uring_zerocopy_tx` sends its one registered buffer over and
//!   over. Its bytes stay in the CPU's cache; a pool's buffers in flight (a socket buffer's worth) do
//!   not, and over loopback, where the kernel copies what it delivers, that costs per byte;
//! - `frozen:N`: N frozen pool buffers sent in turn (`one` is `frozen:1`), which shows what that
//!   cost comes to as the bytes in turn outgrow the cache;
//! - `unaligned:N`: one buffer of the heap, not the pool (so sent unregistered, its pages pinned
//!   per request), whose bytes start N bytes (0-4095) past a page start, lent to every send as
//!   `one` is. Each page a send's bytes touch is one fragment of the kernel's socket buffer, which
//!   holds at most `net.core.max_skb_frags` (17): 65435 bytes starting 2048 bytes into a page touch
//!   all 17, and each such send leaves as one segment short of loopback's MSS. With Nagle's
//!   algorithm on they ran at about a third of the rate of page-aligned ones; the io_uring path
//!   turns it off on a TCP socket it owns (docs/measurements.md, "Side by side with the kernel's
//!   tools").
//!
//! With `huge` the pool is on transparent huge pages, which zcnet does not register (a fixed send
//! from a huge page is charged to the socket as up to the whole page): its sends pin their pages
//! per request instead. Over loopback on a VM, 64 KiB sends from a pool ran faster so, 4 KiB sends
//! slower (docs/measurements.md, "Side by side with the kernel's tools").
//!
//! ```sh
//! msg_zerocopy -4 -r -D 127.0.0.1 -p 8000 -t 4 tcp &     # the kernel selftest's receiver
//! cargo run --release --example uring_send -- 127.0.0.1:8000 4096 2 one
//! ```
//!
//! `scripts/compare/uring.sh` runs it beside the kernel's `io_uring_zerocopy_tx` against that receiver.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use zcnet::tx::{BufferPool, Mode, PoolConfig, SendPath, SenderConfig, TcpSender};

const PAGE: usize = 4096;

/// What the sends lend (see the module docs).
#[derive(Clone, Copy)]
enum Source {
    /// The next free pool buffer per send.
    Pool,
    /// This many frozen pool buffers, in turn.
    Frozen(usize),
    /// One heap buffer starting this many bytes past a page start.
    Unaligned(usize),
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: uring_send HOST:PORT SIZE SECONDS [pool|one|frozen:N|unaligned:N] [huge]";
    let [addr, size, seconds, options @ ..] = &args[..] else {
        return Err(usage.into());
    };
    let (mut source, mut huge_pages) = (None, false);
    for option in options {
        match option.as_str() {
            "huge" if !huge_pages => huge_pages = true,
            word if source.is_none() => source = Some(parse_source(word).ok_or(usage)?),
            _ => return Err(usage.into()),
        }
    }
    let source = source.unwrap_or(Source::Pool);
    if huge_pages && matches!(source, Source::Unaligned(_)) {
        return Err(usage.into());
    }
    let size: usize = size.parse()?;
    let duration = Duration::from_secs_f64(seconds.parse()?);
    // A socket buffer's worth of buffers in flight (4 MiB, the default most of tcp_wmem), at least
    // 64; each keeps what it held before.
    let pool = BufferPool::new_keeping_contents({
        let mut config = PoolConfig::default();
        config.buf_size = size;
        config.count = 64.max((4 << 20) / size.max(1));
        config.huge_pages = huge_pages;
        config
    })?;
    let mut config = SenderConfig::with_mode(Mode::ZeroCopy);
    config.path = SendPath::IO_URING;
    let stream = TcpStream::connect(addr.as_str())?;
    let mut tx = TcpSender::new(stream, config);
    // This example measures io_uring: a sender that fell back to sendmsg would measure the wrong
    // path.
    if let Err(why) = tx.path_status() {
        return Err(format!("no io_uring: {why}").into());
    }
    if huge_pages && let Err(why) = pool.huge_pages() {
        return Err(format!("no huge pages: {why}").into());
    }
    if !matches!(source, Source::Unaligned(_)) {
        if let Err(why) = tx.register_pool(&pool) {
            eprintln!("unregistered buffers: {why}");
        }
        // Every buffer written once, as the selftest writes its payload once (the pool keeps
        // contents): a page never written maps the kernel's shared zero page, and sends pinning
        // their pages per request (`huge`) would all read that one page.
        let mut all = Vec::with_capacity(pool.capacity());
        while let Some(mut buf) = pool.take() {
            buf.fill_with(size, |b| b.fill(b'z'));
            all.push(buf);
        }
    }
    let start = Instant::now();
    // The clock is read once every 8 sends, as the selftest reads it once per 8 requests.
    let mut sends = 0u64;
    let mut running = || {
        sends += 1;
        sends % 8 != 1 || start.elapsed() < duration
    };
    match source {
        Source::Unaligned(offset) => {
            // Leaked: the sends borrow it for as long as the kernel may read it.
            let heap: &'static [u8] = Box::leak(vec![b'z'; size + 2 * PAGE].into_boxed_slice());
            let start = heap.as_ptr().align_offset(PAGE) + offset;
            let buf: &'static [u8] = &heap[start..start + size];
            while running() {
                tx.send(buf)?;
            }
        }
        Source::Frozen(n) => {
            let mut bufs = Vec::with_capacity(n);
            for _ in 0..n {
                let mut buf = pool
                    .take()
                    .ok_or("fewer pool buffers than frozen:N asks for")?;
                buf.set_len(size);
                bufs.push(buf.freeze());
            }
            for buf in bufs.iter().cycle() {
                if !running() {
                    break;
                }
                tx.send(buf.clone())?;
            }
        }
        Source::Pool => {
            while running() {
                match pool.take() {
                    Some(mut buf) => {
                        // The bytes written before the run (the selftest never rewrites its
                        // payload either).
                        buf.set_len(size);
                        tx.send(buf)?;
                    }
                    None => drop(tx.wait_completions(Duration::from_millis(100))?),
                }
            }
        }
    }
    tx.flush(Duration::from_secs(10))?;
    let seconds = start.elapsed().as_secs_f64();
    let s = tx.stats();
    println!(
        "bytes {} seconds {seconds:.3} MB/s {:.1} zc_ids {} copied_ids {}",
        s.bytes,
        s.bytes as f64 / seconds / f64::from(1 << 20),
        s.zc_ids,
        s.copied_ids
    );
    Ok(())
}

/// A source named on the command line (see the module docs).
fn parse_source(word: &str) -> Option<Source> {
    match word {
        "pool" => Some(Source::Pool),
        "one" => Some(Source::Frozen(1)),
        other => match other.split_once(':')? {
            ("frozen", n) => n.parse().ok().filter(|&n| n > 0).map(Source::Frozen),
            ("unaligned", offset) => offset
                .parse()
                .ok()
                .filter(|&offset| offset < PAGE)
                .map(Source::Unaligned),
            _ => None,
        },
    }
}
