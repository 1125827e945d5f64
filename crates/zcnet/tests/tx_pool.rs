//! Pool buffers from the outside: a buffer's next user never sees what the previous one wrote (a
//! server whose pool serves many clients must not send one client's bytes to another), and hostile
//! sizes and lengths give clamped buffers or clean errors, never a panic or a slice past the slot.

mod tx_common;

use std::io::Read;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::Duration;

use proptest::prelude::*;
use tx_common::{pool, sender_config};
use zcnet::tx::{BufferPool, FrozenBuf, Mode, PoolConfig, PooledBuf, TcpSender};

#[test]
fn a_buffer_taken_again_shows_nothing_its_previous_user_wrote() {
    let pool = pool(8192, 1);
    let mut first = pool.take().unwrap();
    first.fill_with(8192, |b| b.fill(0xAB));
    drop(first);

    let mut next = pool.take().expect("the same buffer, back");
    next.set_len(6000);
    let seen = next.iter().filter(|&&b| b != 0).count();
    assert_eq!(seen, 0, "set_len exposed {seen} bytes of the previous user");
    drop(next);

    let mut again = pool.take().unwrap();
    let mut before = Vec::new();
    again.fill_with(8192, |b| before.extend_from_slice(b));
    let seen = before.iter().filter(|&&b| b != 0).count();
    assert_eq!(
        seen, 0,
        "fill_with showed {seen} bytes of the previous user"
    );
}

#[test]
fn a_frozen_buffer_leaves_nothing_for_the_next_user() {
    let pool = pool(4096, 1);
    let mut buf = pool.take().unwrap();
    buf.fill_with(4096, |b| b.fill(0x5C));
    let frozen: FrozenBuf = buf.freeze();
    let copies = [frozen.clone(), frozen.clone()];
    drop(frozen);
    drop(copies);
    let mut next = pool.take().expect("back after the last clone");
    next.set_len(4096);
    assert!(next.iter().all(|&b| b == 0));
}

/// The case that matters: one client's bytes lent to the kernel, the buffer released by the
/// completion, then taken for another client and grown without writing.
#[test]
fn a_buffer_released_by_a_completion_shows_nothing_of_the_client_it_carried() {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    let pool = pool(64 << 10, 1);
    let mut tx = TcpSender::new(client, sender_config(Mode::ZeroCopy));
    let mut buf = pool.take().unwrap();
    buf.fill_with(64 << 10, |b| b.fill(b's'));
    tx.send(buf).expect("send");
    let mut got = vec![0u8; 64 << 10];
    peer.read_exact(&mut got).unwrap();
    tx.flush(Duration::from_secs(10)).expect("flush");

    let mut next = pool.take().expect("released by the completion");
    next.set_len(64 << 10);
    assert!(
        !next.contains(&b's'),
        "the previous client's bytes are visible"
    );
}

#[test]
fn a_user_keeps_its_own_bytes_when_it_shrinks_and_grows_its_buffer() {
    let pool = pool(4096, 1);
    let mut buf = pool.take().unwrap();
    buf.fill_with(100, |b| b.fill(1));
    buf.set_len(10);
    buf.set_len(300);
    assert!(buf[..100].iter().all(|&b| b == 1), "its own bytes are kept");
    assert!(buf[100..].iter().all(|&b| b == 0));
}

#[test]
fn a_pool_keeping_contents_shows_what_the_previous_user_left() {
    let pool = BufferPool::new_keeping_contents(PoolConfig::new(4096, 1)).unwrap();
    let mut buf = pool.take().unwrap();
    buf.fill_with(4096, |b| b.fill(7));
    drop(buf);
    let mut again = pool.take().unwrap();
    again.set_len(4096);
    assert!(
        again.iter().all(|&b| b == 7),
        "filled once, sent many times"
    );
}

#[test]
fn hostile_pool_sizes_are_refused_cleanly() {
    for (buf_size, count) in [
        (usize::MAX, 1),
        (usize::MAX - 4095, 1),
        (1, usize::MAX),
        (4096, usize::MAX / 4096 + 1),
        (1 << 40, 1 << 20),
        (usize::MAX, usize::MAX),
    ] {
        let mut config = PoolConfig::default();
        config.buf_size = buf_size;
        config.count = count;
        config.huge_pages = true;
        let err = BufferPool::new(config).expect_err("no such pool can be mapped");
        assert!(
            matches!(
                err.kind(),
                std::io::ErrorKind::InvalidInput | std::io::ErrorKind::OutOfMemory
            ),
            "{buf_size} x {count}: {err}"
        );
    }
    let empty = BufferPool::new(PoolConfig::new(0, 0)).expect("an empty pool");
    assert_eq!((empty.capacity(), empty.available()), (0, 0));
    assert!(empty.take().is_none());
}

/// Buffer sizes and counts a caller could pass: small ones, the edges of a page, of `u32` and of
/// the address space, and anything.
fn pool_size() -> impl Strategy<Value = usize> {
    prop_oneof![
        0usize..10_000,
        Just(4096),
        Just(4097),
        Just(u32::MAX as usize + 1),
        Just(isize::MAX as usize / 4096 + 1),
        Just(usize::MAX / 2 + 1),
        Just(usize::MAX - 4095),
        Just(usize::MAX),
        any::<usize>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Whatever sizes a caller asks for, the pool holds at least that many buffers of at least that
    /// size, or is refused cleanly (`InvalidInput`, or `OutOfMemory` when the address space or the
    /// overcommit policy has no room): never a wrapped size or a panic. Nothing is written, so the
    /// large pools this makes cost address space only.
    #[test]
    fn any_pool_size_makes_that_pool_or_a_clean_error(
        buf_size in pool_size(),
        count in pool_size(),
        huge_pages in any::<bool>(),
    ) {
        match BufferPool::new({
            let mut config = PoolConfig::default();
            config.buf_size = buf_size;
            config.count = count;
            config.huge_pages = huge_pages;
            config
        }) {
            Ok(pool) => {
                prop_assert!(pool.buf_size() >= buf_size && pool.buf_size().is_multiple_of(4096));
                prop_assert_eq!((pool.capacity(), pool.available()), (count, count));
                if let Some(mut buf) = pool.take() {
                    buf.set_len(usize::MAX);
                    prop_assert_eq!(buf.len(), pool.buf_size());
                }
            }
            Err(err) => prop_assert!(
                matches!(
                    err.kind(),
                    std::io::ErrorKind::InvalidInput | std::io::ErrorKind::OutOfMemory
                ),
                "{} x {}: {}",
                buf_size,
                count,
                err
            ),
        }
    }
}

/// One step on a pool: what a user can do with its buffers.
#[derive(Debug, Clone)]
enum Op {
    Take,
    Drop(usize),
    SetLen(usize, usize),
    Fill(usize, usize, u8),
    Write(usize, u8),
}

/// Lengths a caller might pass: zero, around the capacity, huge, and anything.
fn length(cap: usize) -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(cap.saturating_sub(1)),
        Just(cap),
        Just(cap + 1),
        Just(usize::MAX),
        Just(usize::MAX / 2 + 1),
        0..2 * cap + 2,
        any::<usize>(),
    ]
}

fn op(cap: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Take),
        2 => any::<usize>().prop_map(Op::Drop),
        3 => (any::<usize>(), length(cap)).prop_map(|(i, n)| Op::SetLen(i, n)),
        3 => (any::<usize>(), length(cap), 1u8..).prop_map(|(i, n, v)| Op::Fill(i, n, v)),
        2 => (any::<usize>(), 1u8..).prop_map(|(i, v)| Op::Write(i, v)),
    ]
}

/// A buffer in use and what it must hold: its user's writes, zero elsewhere, over its capacity.
struct Held {
    buf: PooledBuf,
    model: Vec<u8>,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever lengths users pass, a buffer holds exactly what its current user wrote (zero
    /// elsewhere), never more than its capacity, and every buffer comes back.
    #[test]
    fn every_buffer_shows_only_its_users_writes(
        (buf_size, count, ops) in (prop_oneof![Just(1usize), Just(4096), Just(5000), 1..9000usize], 1..4usize)
            .prop_flat_map(|(size, count)| {
                let cap = size.div_ceil(4096) * 4096;
                (Just(size), Just(count), proptest::collection::vec(op(cap), 0..60))
            })
    ) {
        let pool = BufferPool::new(PoolConfig::new(buf_size, count)).unwrap();
        let cap = pool.buf_size();
        prop_assert!(cap >= buf_size && cap.is_multiple_of(4096));
        let mut held: Vec<Held> = Vec::new();
        for op in ops {
            match op {
                Op::Take => match pool.take() {
                    Some(buf) => {
                        prop_assert_eq!(buf.len(), 0);
                        prop_assert_eq!(buf.capacity(), cap);
                        held.push(Held { buf, model: vec![0; cap] });
                    }
                    None => prop_assert_eq!(held.len(), count),
                },
                Op::Drop(i) if !held.is_empty() => {
                    held.swap_remove(i % held.len());
                }
                Op::SetLen(i, n) if !held.is_empty() => {
                    let n_held = held.len();
                    let h = &mut held[i % n_held];
                    h.buf.set_len(n);
                    prop_assert_eq!(h.buf.len(), n.min(cap));
                }
                Op::Fill(i, n, v) if !held.is_empty() => {
                    let n_held = held.len();
                    let h = &mut held[i % n_held];
                    let len = n.min(cap);
                    let mut before = Vec::new();
                    h.buf.fill_with(n, |b| {
                        before.extend_from_slice(b);
                        b.fill(v);
                    });
                    prop_assert_eq!(&before[..], &h.model[..len], "fill_with showed other bytes");
                    h.model[..len].fill(v);
                    prop_assert_eq!(h.buf.len(), len);
                }
                Op::Write(i, v) if !held.is_empty() => {
                    let n_held = held.len();
                    let h = &mut held[i % n_held];
                    let len = h.buf.len();
                    h.buf.fill(v);
                    h.model[..len].fill(v);
                }
                _ => {}
            }
            for h in &held {
                let len = h.buf.len();
                prop_assert!(len <= cap);
                prop_assert_eq!(&h.buf[..], &h.model[..len]);
            }
            prop_assert_eq!(pool.available() + held.len(), count);
        }
        drop(held);
        prop_assert_eq!(pool.available(), count);
    }
}
