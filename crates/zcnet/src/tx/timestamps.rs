//! Joining a socket's transmit timestamps to its sends and their zero-copy completions, so that
//! each send gets the times of its own way ([`super::latency::Joined`]). Pure: it sees keys, ids and
//! times, never a socket, and is tested on any order of them.
//!
//! Two numberings meet here. A timestamp names a key: on a stream the offset of the last byte of
//! the send call it stamps (bytes counted from 0 when timestamps were turned on), on a datagram
//! socket the count of datagrams (one per send call, but one for all the calls a corked socket
//! appends to one datagram: the call that starts it takes the key). A zero-copy completion names an inclusive range of ids, one per
//! zero-copy call (copied calls take none). Each send is registered with both, in order.
//!
//! Kernel behaviour relied on (Documentation/networking/timestamping.rst, msg_zerocopy.rst): a
//! send's timestamps are queued on the error queue before the completion that gives its buffer
//! back — the device is handed the packet, and TCP stamps the ACK, before the packet holding the
//! pages is freed — and the queue is read in order. So once a completion is read, no timestamp is
//! still to come for that send or any send before it. On a stream the kernel stamps only the last
//! send whose bytes a socket buffer carries (a later send appended to the same buffer moves the
//! key to its own last byte), and the ACK of a byte acknowledges every byte before it: a stamp for
//! a send also stands for the sends before it that got none of that kind. A retransmission may
//! stamp a key again; a stamp for a send already joined is counted as unmatched.

use std::collections::VecDeque;

use super::latency::Joined;
use super::tracker::Completion;
use crate::sys::timestamping::{SCM_TSTAMP_ACK, SCM_TSTAMP_SCHED, SCM_TSTAMP_SND};

/// Sends waiting for their timestamps beyond which the oldest is joined with what it has: a
/// kernel that drops timestamps (the error queue over the socket's receive buffer) must not make
/// the sender keep every send.
const MAX_WAITING: usize = 4096;

/// How a socket's timestamp keys count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keys {
    /// The offset of the last byte of a send (TCP).
    Bytes,
    /// One per datagram (UDP): per send call, or per corked datagram.
    Datagrams,
}

/// A send waiting for the rest of its timestamps or its completion.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    key: u32,
    /// The zero-copy completion id, for a zero-copy send.
    id: Option<u32>,
    joined: Joined,
    /// No timestamp can come for it any more (a later send's completion was read).
    closed: bool,
}

impl Waiting {
    fn slot(&mut self, kind: u32) -> Option<&mut Option<u64>> {
        match kind {
            SCM_TSTAMP_SCHED => Some(&mut self.joined.scheduled),
            SCM_TSTAMP_SND => Some(&mut self.joined.sent),
            SCM_TSTAMP_ACK => Some(&mut self.joined.acked),
            _ => None,
        }
    }
}

/// Sends in order, each waiting for its timestamps and, when zero-copy, its completion.
#[derive(Debug)]
pub(crate) struct TimestampJoin {
    keys: Keys,
    /// The key the next send takes (datagrams) or the offset of its first byte (bytes).
    next: u32,
    waiting: VecDeque<Waiting>,
    /// Timestamps that matched no waiting send.
    pub(crate) unmatched: u64,
    /// Datagrams: the socket is corked (`UDP_CORK`).
    corked: bool,
    /// Datagrams: a call since the cork started the datagram, whose key the later calls share.
    started: bool,
}

impl TimestampJoin {
    pub(crate) fn new(keys: Keys) -> Self {
        TimestampJoin {
            keys,
            next: 0,
            waiting: VecDeque::new(),
            unmatched: 0,
            corked: false,
            started: false,
        }
    }

    /// The socket was corked (`true`) or uncorked: while it is, the send calls append to one
    /// datagram, which takes one key.
    pub(crate) fn corked(&mut self, corked: bool) {
        self.corked = corked;
        self.started &= corked;
    }

    /// Registers a send call that took `len` bytes at `queued`, zero-copy under completion `id`.
    /// A stream call of no bytes takes no key and is not registered.
    pub(crate) fn sent(
        &mut self,
        queued: u64,
        len: usize,
        id: Option<u32>,
        out: &mut impl FnMut(Joined),
    ) {
        let key = match self.keys {
            Keys::Bytes if len == 0 => return,
            Keys::Bytes => {
                self.next = self.next.wrapping_add(len as u32);
                self.next.wrapping_sub(1)
            }
            Keys::Datagrams if self.started => self.next.wrapping_sub(1),
            Keys::Datagrams => {
                self.started = self.corked;
                self.next = self.next.wrapping_add(1);
                self.next.wrapping_sub(1)
            }
        };
        if self.waiting.len() == MAX_WAITING {
            let oldest = self.waiting.pop_front().expect("full");
            out(oldest.joined);
        }
        self.waiting.push_back(Waiting {
            key,
            id,
            joined: Joined {
                queued,
                ..Joined::default()
            },
            closed: false,
        });
    }

    /// A timestamp of `kind` (`SCM_TSTAMP_*`) for `key` at `at`: it lands on the sends of that key
    /// alone (several calls of one corked datagram share it; see [`TimestampJoin::retire`] for the sends of a stream it also stands for). The last
    /// stamp a send can get — the ACK on a stream (it acknowledges every byte before too), the
    /// hand-over to the device for a datagram (datagrams leave in order) — also means that no
    /// stamp is to come for the sends before it.
    pub(crate) fn stamp(&mut self, kind: u32, key: u32, at: u64, out: &mut impl FnMut(Joined)) {
        let Some(pos) = self.waiting.iter().position(|w| w.key == key) else {
            self.unmatched += 1;
            return;
        };
        let mut landed = false;
        for w in self.waiting.range_mut(pos..).filter(|w| w.key == key) {
            if let Some(slot @ None) = w.slot(kind) {
                *slot = Some(at);
                landed = true;
            }
        }
        if !landed {
            self.unmatched += 1;
        }
        if kind == self.last_kind() {
            for w in self.waiting.range_mut(..pos) {
                w.closed = true;
            }
        }
        self.retire(out);
    }

    /// The last stamp a send of this socket gets.
    fn last_kind(&self) -> u32 {
        match self.keys {
            Keys::Bytes => SCM_TSTAMP_ACK,
            Keys::Datagrams => SCM_TSTAMP_SND,
        }
    }

    /// A zero-copy completion read at `at` (copied or not: either way the buffer is back).
    pub(crate) fn completed(&mut self, c: Completion, at: u64, out: &mut impl FnMut(Joined)) {
        let (lo, span) = (c.lo, c.hi.wrapping_sub(c.lo));
        let mut last = None;
        for (i, w) in self.waiting.iter_mut().enumerate() {
            if let Some(id) = w.id
                && id.wrapping_sub(lo) <= span
                && w.joined.freed.is_none()
            {
                w.joined.freed = Some(at);
                last = Some(i);
            }
        }
        if let Some(last) = last {
            for w in self.waiting.range_mut(..=last) {
                w.closed = true;
            }
        }
        self.retire(out);
    }

    /// Joins the sends at the front that can get nothing more. On a stream, a send joined without a
    /// stamp of some kind takes that of the first later send that has one: the kernel stamped that
    /// send's last byte instead (its bytes shared a socket buffer), and it came before this send's
    /// completion.
    fn retire(&mut self, out: &mut impl FnMut(Joined)) {
        let last_kind = self.last_kind();
        while let Some(w) = self.waiting.front_mut() {
            let done = match w.id {
                Some(_) => w.joined.freed.is_some(),
                None => w.closed || w.slot(last_kind).is_some_and(|s| s.is_some()),
            };
            if !done {
                break;
            }
            let mut w = self.waiting.pop_front().expect("present");
            if self.keys == Keys::Bytes {
                for kind in [SCM_TSTAMP_SCHED, SCM_TSTAMP_SND, SCM_TSTAMP_ACK] {
                    let later = self
                        .waiting
                        .iter_mut()
                        .find_map(|l| *l.slot(kind).expect("a known kind"));
                    if let Some(slot @ None) = w.slot(kind) {
                        *slot = later;
                    }
                }
            }
            out(w.joined);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A join and what it joined, in order.
    struct Run {
        join: TimestampJoin,
        out: Vec<Joined>,
    }

    impl Run {
        fn new(keys: Keys) -> Run {
            Run {
                join: TimestampJoin::new(keys),
                out: Vec::new(),
            }
        }
        fn sent(&mut self, queued: u64, len: usize, id: Option<u32>) {
            let out = &mut self.out;
            self.join.sent(queued, len, id, &mut |j| out.push(j));
        }
        fn stamp(&mut self, kind: u32, key: u32, at: u64) {
            let out = &mut self.out;
            self.join.stamp(kind, key, at, &mut |j| out.push(j));
        }
        fn completed(&mut self, lo: u32, hi: u32, at: u64) {
            self.completion(
                Completion {
                    lo,
                    hi,
                    copied: false,
                },
                at,
            );
        }
        fn completion(&mut self, c: Completion, at: u64) {
            let out = &mut self.out;
            self.join.completed(c, at, &mut |j| out.push(j));
        }
    }

    fn joined(queued: u64, steps: [Option<u64>; 4]) -> Joined {
        Joined {
            queued,
            scheduled: steps[0],
            sent: steps[1],
            acked: steps[2],
            freed: steps[3],
        }
    }

    const SCHED: u32 = SCM_TSTAMP_SCHED;
    const SND: u32 = SCM_TSTAMP_SND;
    const ACK: u32 = SCM_TSTAMP_ACK;

    /// TCP: a zero-copy send of 100 bytes (id 0, key 99), a copied one of 50 (no id, key 149), a
    /// zero-copy one of 200 (id 1, key 349); their stamps in scrambled order, one completion range
    /// for both ids, copied. Every time lands on its own send.
    #[test]
    fn tcp_byte_keys_join_out_of_order_stamps_and_a_completion_range() {
        let mut r = Run::new(Keys::Bytes);
        r.sent(1000, 100, Some(0));
        r.sent(2000, 50, None);
        r.sent(3000, 200, Some(1));
        r.stamp(SND, 349, 3020);
        r.stamp(SCHED, 99, 1010);
        r.stamp(SCHED, 349, 3010);
        r.stamp(SND, 149, 2020);
        r.stamp(SCHED, 149, 2010);
        r.stamp(SND, 99, 1020);
        r.stamp(ACK, 99, 1100);
        assert!(r.out.is_empty(), "the first waits for its completion");
        r.stamp(ACK, 149, 2100);
        r.stamp(ACK, 349, 3100);
        let copied = Completion {
            lo: 0,
            hi: 1,
            copied: true,
        };
        r.completion(copied, 4000);
        assert_eq!(
            r.out,
            [
                joined(1000, [Some(1010), Some(1020), Some(1100), Some(4000)]),
                joined(2000, [Some(2010), Some(2020), Some(2100), None]),
                joined(3000, [Some(3010), Some(3020), Some(3100), Some(4000)]),
            ]
        );
        assert_eq!(r.join.unmatched, 0);
    }

    /// A stream send the kernel took in two calls (a partial send, then the rest): each call has
    /// its own key and id; a stamp for the first call's key is not the second's.
    #[test]
    fn a_split_stream_send_keys_each_call() {
        let mut r = Run::new(Keys::Bytes);
        r.sent(10, 60_000, Some(0));
        r.sent(20, 5_536, Some(1));
        r.stamp(SND, 59_999, 30);
        r.stamp(ACK, 59_999, 40);
        r.completed(0, 0, 50);
        assert_eq!(r.out, [joined(10, [None, Some(30), Some(40), Some(50)])]);
        r.stamp(SND, 65_535, 60);
        r.stamp(ACK, 65_535, 70);
        r.completed(1, 1, 80);
        assert_eq!(r.out[1], joined(20, [None, Some(60), Some(70), Some(80)]));
    }

    /// Two sends appended to one socket buffer: the kernel stamps only the second's key, which
    /// stands for the first too; a retransmission's stamp of a joined send is unmatched, and a
    /// stamp never lands on a later send than its key's.
    #[test]
    fn a_stamp_for_a_stream_key_stands_for_the_sends_before_it() {
        let mut r = Run::new(Keys::Bytes);
        r.sent(100, 10, Some(0));
        r.sent(110, 10, Some(1));
        r.sent(120, 10, Some(2));
        r.stamp(SND, 19, 130);
        r.stamp(ACK, 19, 140);
        r.completed(0, 1, 150);
        assert_eq!(
            r.out,
            [
                joined(100, [None, Some(130), Some(140), Some(150)]),
                joined(110, [None, Some(130), Some(140), Some(150)]),
            ]
        );
        r.stamp(SND, 19, 160);
        assert_eq!(r.join.unmatched, 1);
        r.stamp(SND, 29, 170);
        r.completed(2, 2, 180);
        assert_eq!(r.out[2], joined(120, [None, Some(170), None, Some(180)]));
    }

    /// Copied stream sends (no completion to close them) that shared a socket buffer: the ACK of
    /// the last one's key joins them all, with its times.
    #[test]
    fn an_ack_joins_the_copied_stream_sends_before_it() {
        let mut r = Run::new(Keys::Bytes);
        r.sent(1, 100, None);
        r.sent(2, 100, None);
        r.sent(3, 100, None);
        r.stamp(SND, 299, 10);
        assert!(r.out.is_empty());
        r.stamp(ACK, 299, 20);
        let steps = [None, Some(10), Some(20), None];
        assert_eq!(
            r.out,
            [joined(1, steps), joined(2, steps), joined(3, steps)]
        );
    }

    /// UDP: keys count calls (a copied call takes a key but no id); stamps and completions arrive
    /// out of order, completions as ranges (the later one first); a stamp for a key no send took
    /// is unmatched and lands nowhere.
    #[test]
    fn udp_datagram_keys_join_out_of_order_with_completion_ranges() {
        let mut r = Run::new(Keys::Datagrams);
        r.sent(100, 1400, Some(0)); // key 0
        r.sent(200, 1400, None); // key 1, copied
        r.sent(300, 1400, Some(1)); // key 2
        r.sent(400, 1400, Some(2)); // key 3
        r.stamp(SND, 2, 320);
        r.stamp(SCHED, 3, 410);
        r.stamp(SND, 0, 120);
        r.stamp(SND, 9, 999);
        r.stamp(SND, 3, 420);
        r.stamp(SCHED, 2, 310);
        r.stamp(SND, 1, 220);
        r.completed(1, 2, 500);
        assert!(r.out.is_empty(), "key 0 is still lent, and before the rest");
        r.completed(0, 0, 600);
        assert_eq!(
            r.out,
            [
                joined(100, [None, Some(120), None, Some(600)]),
                joined(200, [None, Some(220), None, None]),
                joined(300, [Some(310), Some(320), None, Some(500)]),
                joined(400, [Some(410), Some(420), None, Some(500)]),
            ]
        );
        assert_eq!(r.join.unmatched, 1);
    }

    /// Keys and ids that wrap around u32 join as well.
    #[test]
    fn keys_and_ids_wrap() {
        let mut r = Run::new(Keys::Bytes);
        r.join.next = u32::MAX - 4;
        r.sent(1, 10, Some(u32::MAX));
        r.sent(2, 10, Some(0));
        r.stamp(ACK, 4, 3);
        r.stamp(ACK, 14, 4);
        r.completed(u32::MAX, 0, 5);
        assert_eq!(
            r.out,
            [
                joined(1, [None, None, Some(3), Some(5)]),
                joined(2, [None, None, Some(4), Some(5)]),
            ]
        );
    }

    /// A copied send that never gets its last stamp is joined once a later send's completion shows
    /// none can come; without any, the oldest is joined when too many wait.
    #[test]
    fn sends_without_stamps_do_not_wait_forever() {
        let mut r = Run::new(Keys::Datagrams);
        r.sent(1, 1, None);
        r.sent(2, 1, Some(0));
        r.completed(0, 0, 3);
        assert_eq!(
            r.out,
            [joined(1, [None; 4]), joined(2, [None, None, None, Some(3)])]
        );
        let mut r = Run::new(Keys::Datagrams);
        for i in 0..=MAX_WAITING as u64 {
            r.sent(i, 1, None);
        }
        assert_eq!(r.out, [joined(0, [None; 4])]);
    }

    /// UDP corked: the kernel keys a datagram, not a call — three calls appended to one corked
    /// datagram share its key (1), and the datagram after the uncork takes the next (2). Its
    /// stamps land on each of its calls; none on the datagram after it.
    #[test]
    fn corked_calls_share_their_datagram_key() {
        let mut r = Run::new(Keys::Datagrams);
        r.sent(10, 100, None);
        r.join.corked(true);
        r.sent(20, 100, None);
        r.sent(30, 100, Some(0));
        r.sent(40, 100, None);
        r.join.corked(false);
        r.sent(50, 100, None);
        for (key, at) in [(0, 11), (1, 41), (2, 51)] {
            r.stamp(SCHED, key, at);
            r.stamp(SND, key, at + 1);
        }
        r.completed(0, 0, 60);
        let at = |queued, t| joined(queued, [Some(t), Some(t + 1), None, None]);
        let mut freed = at(30, 41);
        freed.freed = Some(60);
        assert_eq!(
            r.out,
            [at(10, 11), at(20, 41), freed, at(40, 41), at(50, 51)]
        );
        assert_eq!(r.join.unmatched, 0);
    }
}
