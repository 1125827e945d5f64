//! The receiver as a `BufRead` over loopback (MSS of one page, `zcnet::tx`'s MSG_ZEROCOPY sender):
//! a length-prefixed protocol is parsed with `fill_buf`/`consume` alone — headers cut across chunks
//! joined, payloads checked in place in parts, every byte verified — on the mapped path (pages map,
//! and each mapped chunk's pages are zapped once consumed) and on the copy path; `recv` after a
//! partial `consume` hands out the rest of that chunk at the right offset; `Read` copies the same
//! bytes.

mod rx_util;

use std::io::{BufRead, Read};
use std::net::{IpAddr, Ipv4Addr};
use std::thread;

use rx_util::{SendWith, send_writes, stream_bytes};
use zcnet::rx::{Receiver, RxConfig, RxMode, sender};

const V4: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Payload sizes: whole pages (which map), odd sizes, a header's worth, and empty frames.
const PAYLOADS: [usize; 9] = [16384, 12288, 1000, 0, 65536, 7, 4096 * 9, 3, 200_000];

/// The stream of `rounds` × [`PAYLOADS`] frames (a 4-byte big-endian length, then the payload) and
/// its writes: each header a `MSG_EOR` record, so that the payload after it starts a page.
fn frames(rounds: usize) -> (Vec<u8>, Vec<(usize, bool)>) {
    let mut bytes = Vec::new();
    let mut writes = Vec::new();
    for round in 0..rounds {
        for (i, &len) in PAYLOADS.iter().enumerate() {
            bytes.extend_from_slice(&(len as u32).to_be_bytes());
            bytes.extend_from_slice(&stream_bytes(len, (round * 100 + i) as u64));
            writes.push((4, true));
            if len > 0 {
                writes.push((len, false));
            }
        }
    }
    (bytes, writes)
}

/// Reads exactly `out.len()` bytes with `fill_buf`/`consume`, joining across chunks.
fn take_exact(rx: &mut Receiver, out: &mut [u8]) -> bool {
    let mut at = 0;
    while at < out.len() {
        let lent = rx.fill_buf().expect("fill_buf");
        if lent.is_empty() {
            assert_eq!(at, 0, "the stream ended inside a header");
            return false;
        }
        let n = lent.len().min(out.len() - at);
        out[at..at + n].copy_from_slice(&lent[..n]);
        rx.consume(n);
        at += n;
    }
    true
}

/// Parses every frame, checking each payload in place against the sent one; returns the frames read.
fn parse_frames(rx: &mut Receiver, rounds: usize) -> usize {
    let mut frames = 0;
    let mut header = [0u8; 4];
    while take_exact(rx, &mut header) {
        let len = u32::from_be_bytes(header) as usize;
        let (round, i) = (frames / PAYLOADS.len(), frames % PAYLOADS.len());
        assert!(round < rounds, "more frames than sent");
        assert_eq!(len, PAYLOADS[i], "frame {frames}'s length");
        let expected = stream_bytes(len, (round * 100 + i) as u64);
        let mut at = 0;
        while at < len {
            let lent = rx.fill_buf().expect("fill_buf");
            assert!(!lent.is_empty(), "the stream ended inside a payload");
            let n = lent.len().min(len - at);
            assert!(lent[..n] == expected[at..at + n], "frame {frames} at {at}");
            rx.consume(n);
            at += n;
        }
        frames += 1;
    }
    frames
}

#[test]
fn a_framed_protocol_parses_in_place_on_the_mapped_and_copy_paths() {
    let rounds = 6;
    for mode in [RxMode::ZeroCopy, RxMode::Copy] {
        let (bytes, writes) = frames(rounds);
        let (client, server) = sender::connect_page_mss(V4).expect("loopback pair");
        let writer =
            thread::spawn(move || send_writes(client, &bytes, &writes, SendWith::ZeroCopy));
        let mut config = RxConfig::default();
        config.mode = mode;
        config.give_up_after = None;
        let mut rx = Receiver::new(server, config).expect("receiver");
        assert_eq!(parse_frames(&mut rx, rounds), rounds * PAYLOADS.len());
        writer.join().unwrap();
        assert_eq!(rx.fill_buf().unwrap(), b"", "the end, again");
        let stats = *rx.stats();
        assert_eq!(
            rx.offset(),
            stats.bytes(),
            "{mode:?}: every byte consumed once"
        );
        match mode {
            RxMode::Copy => assert_eq!(stats.mapped_bytes, 0, "{stats:?}"),
            _ => {
                assert!(stats.mapped_bytes > 0, "{stats:?}");
                assert!(
                    stats.zaps > 0,
                    "consumed mapped chunks give their pages back"
                );
            }
        }
    }
}

#[test]
fn recv_after_a_partial_consume_hands_out_the_rest_and_read_copies_the_same_bytes() {
    let (bytes, writes) = frames(2);
    let expected = bytes.clone();
    let (client, server) = sender::connect_page_mss(V4).expect("loopback pair");
    let writer = thread::spawn(move || send_writes(client, &bytes, &writes, SendWith::ZeroCopy));
    let mut rx = Receiver::new(server, RxConfig::default()).expect("receiver");
    let mut got = Vec::new();
    // Alternate: half of what fill_buf lends, then recv (the rest of that chunk), then Read.
    loop {
        let lent = rx.fill_buf().unwrap();
        if lent.is_empty() {
            break;
        }
        let half = lent.len().div_ceil(2);
        got.extend_from_slice(&lent[..half]);
        rx.consume(half);
        if let Some(rest) = rx.recv().unwrap() {
            assert_eq!(
                rest.offset(),
                got.len() as u64,
                "the rest starts where consume stopped"
            );
            got.extend_from_slice(&rest);
        }
        let mut small = [0u8; 777];
        let n = rx.read(&mut small).unwrap();
        got.extend_from_slice(&small[..n]);
    }
    writer.join().unwrap();
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "every byte once, in order");
    assert_eq!(rx.offset(), expected.len() as u64);
}

#[test]
fn into_inner_gives_the_stream_back_only_once_every_received_byte_is_handed_out() {
    let (mut client, server) = sender::connect_page_mss(V4).expect("loopback pair");
    std::io::Write::write_all(&mut client, b"hello").unwrap();
    let mut rx = Receiver::new(server, RxConfig::default()).expect("receiver");
    assert_eq!(rx.fill_buf().unwrap(), b"hello");
    rx.consume(2);
    let mut rx = rx.into_inner().expect_err("three bytes not handed out");
    assert_eq!(rx.fill_buf().unwrap(), b"llo");
    rx.consume(3);
    let mut stream = rx.into_inner().expect("nothing held");
    std::io::Write::write_all(&mut stream, b"back").unwrap();
    let mut answer = [0u8; 4];
    client.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"back");
}
