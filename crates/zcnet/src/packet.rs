//! AF_PACKET, the copying paths AF_XDP replaces, for comparing with them: a raw packet socket bound to
//! one interface ([`open`], [`send`], [`recv_nonblocking`]), the TPACKET_V3 receive ring
//! ([`RxRingV3`]: blocks of packets the kernel fills and hands over whole), the TPACKET_V2 transmit
//! ring ([`TxRingV2`], qdisc bypassed) and batched `recvmmsg`/`sendmmsg` ([`RecvBatch`],
//! [`send_copies`], [`send_chunks`]). `zcnet bench xdp` and `zcnet bench udp` measure AF_XDP
//! against these.
//!
//! Every packet the kernel hands over through these is a copy (into the ring, or into the caller's
//! buffer). Opening a packet socket needs CAP_NET_RAW. Ring sizes are checked before a socket is
//! opened (`InvalidInput`); the rx ring checks every offset and length the kernel wrote against the
//! block it handed over before reading through it, and the rings hand a block or slot back only
//! after its last use.

pub use crate::sys::packet::{
    RecvBatch, RxRingV3, TxRingV2, open, recv_nonblocking, send, send_chunks, send_copies,
};
