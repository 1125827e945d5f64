//! Ring halves. Each AF_XDP ring has one producer and one consumer, each side owning one free-running
//! `u32` index that only it writes; the other side reads it. Indices wrap (all arithmetic is
//! `wrapping_*`), and an index selects slot `index & (entries - 1)`.
//!
//! - User space produces into the fill and tx rings and consumes from the rx and completion rings.
//! - Slots between the consumer and the producer index belong to the consumer; the others belong to the
//!   producer. A side publishes its index with a `Release` store, after it has finished with the slots
//!   it hands over, and reads the other side's index with an `Acquire` load, before it touches the slots
//!   that index handed to it. The kernel does the same (`smp_load_acquire`/`smp_store_release` in
//!   `net/xdp/xsk_queue.h`).
//! - Work is done in batches through guards: a [`Reservation`] (producer) or a [`Batch`] (consumer).
//!   Nothing is published until `submit`/`release`; dropping a guard instead rolls the batch back.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering, fence};

use crate::sys::xdp::{
    DescSlot, RingMmap, RingWord, XDP_PKT_CONTD, XDP_RING_NEED_WAKEUP, XDP_TX_METADATA, xdp_desc,
};

/// A value carried by a ring: a UMEM address (fill, completion) or a descriptor (rx, tx).
pub(crate) trait Entry: Copy + private::Sealed {
    /// The shared-memory slot holding one value.
    type Slot: RingWord;
    /// Reads a slot (relaxed: the index load before it gives the ordering).
    fn load(slot: &Self::Slot) -> Self;
    /// Writes a slot (relaxed: the index store after it publishes it).
    fn store(self, slot: &Self::Slot);
}

mod private {
    pub trait Sealed {}
    impl Sealed for u64 {}
    impl Sealed for super::Desc {}
}

impl Entry for u64 {
    type Slot = AtomicU64;
    fn load(slot: &AtomicU64) -> u64 {
        slot.load(Ordering::Relaxed)
    }
    fn store(self, slot: &AtomicU64) {
        slot.store(self, Ordering::Relaxed)
    }
}

/// An rx or tx descriptor (`struct xdp_desc`): a packet at UMEM address `addr` of `len` bytes.
/// Descriptors read from a ring are untrusted until the UMEM turns them into frame tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Desc {
    addr: u64,
    len: u32,
    /// Option bits (`XDP_PKT_CONTD` for multi-buffer packets, `XDP_TX_METADATA` for a packet to
    /// send with a TX metadata request; zero otherwise).
    options: u32,
}

impl Desc {
    /// A single-buffer packet of `len` bytes at `addr`.
    pub fn new(addr: u64, len: u32) -> Desc {
        Desc {
            addr,
            len,
            options: 0,
        }
    }

    /// Address of the packet's first byte in the UMEM.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Packet length in bytes.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the packet continues in the next descriptor (`XDP_PKT_CONTD`, multi-buffer).
    pub fn continues(&self) -> bool {
        self.options & XDP_PKT_CONTD != 0
    }

    /// The same descriptor, marked as continued by the next one when `continues`.
    pub fn continuing(mut self, continues: bool) -> Desc {
        match continues {
            true => self.options |= XDP_PKT_CONTD,
            false => self.options &= !XDP_PKT_CONTD,
        }
        self
    }

    /// The same descriptor, marked as carrying TX metadata (`XDP_TX_METADATA`) when `metadata`.
    pub fn with_tx_metadata(mut self, metadata: bool) -> Desc {
        if metadata {
            self.options |= XDP_TX_METADATA;
        }
        self
    }
}

impl Entry for Desc {
    type Slot = DescSlot;
    fn load(slot: &DescSlot) -> Desc {
        let d = slot.load();
        Desc {
            addr: d.addr,
            len: d.len,
            options: d.options,
        }
    }
    fn store(self, slot: &DescSlot) {
        slot.store(xdp_desc {
            addr: self.addr,
            len: self.len,
            options: self.options,
        })
    }
}

/// The producing half of a ring (user space fills the fill and tx rings).
#[derive(Debug)]
pub(crate) struct Producer<T: Entry> {
    ring: Arc<RingMmap<T::Slot>>,
    /// Our index: everything before it is published.
    producer: u32,
    /// Last seen consumer index (refreshed when the cached view shows too little room).
    consumer: u32,
}

impl<T: Entry> Producer<T> {
    /// The producer half of `ring`, starting from the indices it holds now.
    pub fn new(ring: Arc<RingMmap<T::Slot>>) -> Producer<T> {
        let producer = ring.producer().load(Ordering::Relaxed);
        let consumer = ring.consumer().load(Ordering::Acquire);
        Producer {
            ring,
            producer,
            consumer,
        }
    }

    /// Number of slots.
    pub fn entries(&self) -> u32 {
        self.ring.entries()
    }

    /// Free slots, refreshing the consumer index when the cached one shows fewer than `wanted`.
    pub fn free(&mut self, wanted: u32) -> u32 {
        let free = self.cached_free();
        if free >= wanted {
            return free;
        }
        // Acquire pairs with the consumer's Release store: it has finished reading the slots it
        // handed back before we overwrite them.
        self.consumer = self.ring.consumer().load(Ordering::Acquire);
        self.cached_free()
    }

    /// Free slots as the cached indices show them. A consumer index the kernel never could have
    /// written (ahead of our producer index, or more than a ring behind it) reads as a full ring:
    /// clamped, never an underflow, so nothing is overwritten that the consumer may still read.
    fn cached_free(&self) -> u32 {
        self.entries()
            .saturating_sub(self.producer.wrapping_sub(self.consumer))
    }

    /// Reserves up to `wanted` slots (fewer when the ring has less room; possibly none).
    pub fn reserve(&mut self, wanted: u32) -> Reservation<'_, T> {
        let len = wanted.min(self.free(wanted));
        Reservation {
            start: self.producer,
            len,
            written: 0,
            producer: self,
        }
    }

    /// Whether the kernel asked to be woken (`XDP_RING_NEED_WAKEUP` in the ring flags; only set when the
    /// socket was bound with `XDP_USE_NEED_WAKEUP`).
    pub fn needs_wakeup(&self) -> bool {
        // A full fence keeps this read after the Release publish of our producer index: reading a stale
        // "no wakeup needed" from before the publish could leave the new entries unprocessed.
        fence(Ordering::SeqCst);
        self.ring.flags().load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }

    /// Number of entries published and not yet consumed (the consumer index read now).
    pub fn outstanding(&mut self) -> u32 {
        self.entries() - self.free(self.entries())
    }
}

/// Slots reserved in a producer ring. Write them in order with [`Reservation::push`], then
/// [`Reservation::submit`] publishes what was written; dropping it publishes nothing.
#[must_use = "nothing is published unless the reservation is submitted"]
#[derive(Debug)]
pub(crate) struct Reservation<'a, T: Entry> {
    producer: &'a mut Producer<T>,
    start: u32,
    len: u32,
    written: u32,
}

impl<T: Entry> Reservation<'_, T> {
    /// Number of slots reserved.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Slots still unwritten.
    pub fn remaining(&self) -> u32 {
        self.len - self.written
    }

    /// Writes the next reserved slot; gives `value` back when all are written.
    pub fn push(&mut self, value: T) -> Result<(), T> {
        if self.written == self.len {
            return Err(value);
        }
        let slots = self.producer.ring.slots();
        let index = self.start.wrapping_add(self.written) & (slots.len() as u32 - 1);
        value.store(&slots[index as usize]);
        self.written += 1;
        Ok(())
    }

    /// Publishes the written slots and returns how many.
    pub fn submit(self) -> u32 {
        let n = self.written;
        self.producer.producer = self.start.wrapping_add(n);
        // Release: our slot writes become visible before the consumer can see the new index.
        self.producer
            .ring
            .producer()
            .store(self.producer.producer, Ordering::Release);
        n
    }
}

/// The consuming half of a ring (user space reads the rx and completion rings).
#[derive(Debug)]
pub(crate) struct Consumer<T: Entry> {
    ring: Arc<RingMmap<T::Slot>>,
    /// Our index: everything before it is released.
    consumer: u32,
    /// Last seen producer index.
    producer: u32,
}

impl<T: Entry> Consumer<T> {
    /// The consumer half of `ring`, starting from the indices it holds now.
    pub fn new(ring: Arc<RingMmap<T::Slot>>) -> Consumer<T> {
        let consumer = ring.consumer().load(Ordering::Relaxed);
        let producer = ring.producer().load(Ordering::Acquire);
        Consumer {
            ring,
            consumer,
            producer,
        }
    }

    /// Number of slots.
    pub fn entries(&self) -> u32 {
        self.ring.entries()
    }

    /// Entries ready to read, refreshing the producer index when the cached one shows fewer than
    /// `wanted`.
    pub fn available(&mut self, wanted: u32) -> u32 {
        let ready = self.cached_ready();
        if ready >= wanted {
            return ready;
        }
        // Acquire pairs with the producer's Release store: the slots it published are visible.
        self.producer = self.ring.producer().load(Ordering::Acquire);
        self.cached_ready()
    }

    /// Entries ready as the cached indices show them. A producer index the kernel never could have
    /// written (more than a ring ahead of our consumer index, or behind it) is clamped to one ring
    /// every time it is used — the one read at construction and the one kept from the last refresh
    /// included — so no batch ever reads past one ring or runs the consumer index past the producer's
    /// by more than a ring.
    fn cached_ready(&self) -> u32 {
        self.producer
            .wrapping_sub(self.consumer)
            .min(self.entries())
    }

    /// Takes up to `wanted` ready entries (possibly none).
    pub fn peek(&mut self, wanted: u32) -> Batch<'_, T> {
        let len = wanted.min(self.available(wanted));
        Batch {
            start: self.consumer,
            len,
            consumer: self,
        }
    }
}

/// Entries taken from a consumer ring. [`Batch::release`] hands their slots back to the producer;
/// dropping the batch instead leaves them in the ring to be read again.
#[must_use = "the entries stay in the ring unless the batch is released"]
#[derive(Debug)]
pub(crate) struct Batch<'a, T: Entry> {
    consumer: &'a mut Consumer<T>,
    start: u32,
    len: u32,
}

impl<T: Entry> Batch<'_, T> {
    /// Number of entries.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the batch is empty.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Entry `i` of the batch (`i < len`).
    pub fn get(&self, i: u32) -> Option<T> {
        if i >= self.len {
            return None;
        }
        let slots = self.consumer.ring.slots();
        let index = self.start.wrapping_add(i) & (slots.len() as u32 - 1);
        Some(T::load(&slots[index as usize]))
    }

    /// The entries in order.
    pub fn iter(&self) -> impl Iterator<Item = T> + '_ {
        (0..self.len).filter_map(|i| self.get(i))
    }

    /// Hands the slots back to the producer.
    pub fn release(self) {
        self.consumer.consumer = self.start.wrapping_add(self.len);
        // Release: our reads of the slots complete before the producer may overwrite them.
        self.consumer
            .ring
            .consumer()
            .store(self.consumer.consumer, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A ring over anonymous memory with both indices preset to `start`, and its two halves.
    fn pair<T: Entry>(entries: u32, start: u32) -> (Producer<T>, Consumer<T>) {
        let ring = Arc::new(RingMmap::<T::Slot>::anonymous(entries).expect("anonymous ring"));
        ring.producer().store(start, Ordering::Relaxed);
        ring.consumer().store(start, Ordering::Relaxed);
        (Producer::new(ring.clone()), Consumer::new(ring))
    }

    fn produce(p: &mut Producer<u64>, values: impl IntoIterator<Item = u64>) -> u32 {
        let values: Vec<u64> = values.into_iter().collect();
        let mut r = p.reserve(values.len() as u32);
        for v in values {
            if r.push(v).is_err() {
                break;
            }
        }
        r.submit()
    }

    #[test]
    fn full_and_empty() {
        let (mut p, mut c) = pair::<u64>(4, 0);
        assert!(c.peek(4).is_empty());
        assert_eq!(produce(&mut p, 0..10), 4, "only one ring's worth fits");
        assert_eq!(p.reserve(1).len(), 0, "full");
        let b = c.peek(10);
        assert_eq!(b.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        b.release();
        assert_eq!(p.free(4), 4);
        assert!(c.peek(1).is_empty());
    }

    #[test]
    fn indices_wrap_past_u32_max() {
        let (mut p, mut c) = pair::<u64>(8, u32::MAX - 2);
        assert_eq!(produce(&mut p, 100..106), 6);
        let b = c.peek(6);
        assert_eq!(b.iter().collect::<Vec<_>>(), (100..106).collect::<Vec<_>>());
        b.release();
        assert_eq!(p.free(8), 8);
    }

    #[test]
    fn dropped_guards_roll_back() {
        let (mut p, mut c) = pair::<u64>(4, 0);
        {
            let mut r = p.reserve(2);
            r.push(7).expect("room");
        }
        assert!(c.peek(4).is_empty(), "unsubmitted writes are invisible");
        assert_eq!(produce(&mut p, [1, 2]), 2);
        {
            let b = c.peek(2);
            assert_eq!(b.len(), 2);
        }
        let b = c.peek(4);
        assert_eq!(
            b.iter().collect::<Vec<_>>(),
            vec![1, 2],
            "unreleased reads are re-read"
        );
        b.release();
    }

    #[test]
    fn batches_are_limited_to_what_was_asked_and_written() {
        let (mut p, mut c) = pair::<Desc>(8, 3);
        let mut r = p.reserve(5);
        assert_eq!(r.len(), 5);
        for i in 0..3 {
            r.push(Desc {
                addr: i * 2048,
                len: 60,
                options: 0,
            })
            .expect("room");
        }
        assert_eq!(r.remaining(), 2);
        assert_eq!(r.submit(), 3, "only the written prefix is published");
        let b = c.peek(2);
        assert_eq!(b.len(), 2);
        assert_eq!(b.get(1).map(|d| d.addr), Some(2048));
        assert_eq!(b.get(2), None);
        b.release();
        assert_eq!(c.peek(8).len(), 1);
    }

    #[test]
    fn a_hostile_consumer_index_reads_as_a_full_ring() {
        let (mut p, c) = pair::<u64>(4, 100);
        // A consumer index ahead of the producer's (or far behind it): no room, no underflow.
        for hostile in [101, 5000, 100u32.wrapping_sub(5)] {
            c.ring.consumer().store(hostile, Ordering::Release);
            // Asking for more than the cached view shows makes the producer read the index.
            assert_eq!(p.free(5), 0, "consumer {hostile}");
            assert_eq!(p.reserve(4).len(), 0);
            assert_eq!(p.outstanding(), 4);
        }
        c.ring.consumer().store(100, Ordering::Release);
        assert_eq!(p.free(4), 4, "a sane index again: the whole ring is free");
    }

    #[test]
    fn a_hostile_producer_index_is_clamped_to_one_ring() {
        let (_p, mut c) = pair::<u64>(4, 0);
        c.ring.producer().store(1000, Ordering::Release);
        assert_eq!(c.peek(u32::MAX).len(), 4);
        // The cached index stays hostile: a later batch that the cached view seems to cover (no
        // refresh) is clamped too.
        assert_eq!(c.peek(500).len(), 4);
        // So is an index read when the consumer half is made.
        let mut fresh = Consumer::<u64>::new(c.ring.clone());
        assert_eq!(fresh.peek(500).len(), 4);
        assert_eq!(fresh.available(1), 4);
    }

    proptest! {
        /// Whatever indices a hostile kernel writes, whenever it writes them, and however many entries
        /// the caller asks for (0, 1, `u32::MAX`...): no batch or reservation exceeds one ring, and
        /// every index stays within one ring of the other side's.
        #[test]
        fn hostile_indices_never_exceed_one_ring(
            start in any::<u32>(),
            ops in proptest::collection::vec(
                (0u8..4, prop_oneof![any::<u32>(), 0u32..10, Just(u32::MAX), Just(1u32 << 31)]),
                1..64,
            ),
        ) {
            let (mut p, mut c) = pair::<u64>(8, start);
            let ring = c.ring.clone();
            for (op, value) in ops {
                match op {
                    0 => ring.producer().store(start.wrapping_add(value), Ordering::Release),
                    1 => ring.consumer().store(start.wrapping_add(value), Ordering::Release),
                    2 => {
                        let b = c.peek(value);
                        prop_assert!(b.len() <= 8 && b.len() <= value);
                        let before = b.consumer.consumer;
                        b.release();
                        prop_assert!(c.consumer.wrapping_sub(before) <= 8);
                    }
                    _ => {
                        let r = p.reserve(value);
                        prop_assert!(r.len() <= 8 && r.len() <= value);
                        prop_assert!(r.len() <= r.producer.cached_free());
                    }
                }
            }
        }

        /// Random batch sizes from a random starting index behave like a FIFO of capacity `entries`.
        #[test]
        fn ring_is_a_bounded_fifo(start in any::<u32>(), ops in proptest::collection::vec((any::<bool>(), 0u32..12), 1..64)) {
            let (mut p, mut c) = pair::<u64>(8, start);
            let mut model = std::collections::VecDeque::new();
            let mut next = 0u64;
            for (is_produce, n) in ops {
                if is_produce {
                    let room = 8 - model.len() as u32;
                    let done = produce(&mut p, next..next + n as u64);
                    prop_assert_eq!(done, n.min(room));
                    for v in next..next + done as u64 { model.push_back(v); }
                    next += done as u64;
                } else {
                    let b = c.peek(n);
                    prop_assert_eq!(b.len() as usize, (n as usize).min(model.len()));
                    for v in b.iter() { prop_assert_eq!(Some(v), model.pop_front()); }
                    b.release();
                }
            }
        }
    }
}
