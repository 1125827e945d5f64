//! No mapping or descriptor outlives its receiver: 10,000 connections opened, received and closed
//! (every 100th from the MSG_ZEROCOPY sender, so that pages are mapped when the receiver goes) leave
//! /proc/self/maps and /proc/self/fd as they were.

mod rx_util;

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};

use rx_util::{SendWith, send_writes};
use zcnet::rx::{ChunkKind, Receiver, RxConfig, sender};

fn maps_lines() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .expect("read /proc/self/maps")
        .lines()
        .count()
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("list /proc/self/fd")
        .count()
}

fn receive_all(rx: &mut Receiver) -> u64 {
    let mut total = 0;
    while let Some(chunk) = rx.recv().expect("receive") {
        total += chunk.len() as u64;
    }
    total
}

#[test]
fn ten_thousand_connections_leave_no_mapping_or_fd() {
    let listener =
        sender::bind_page_mss(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let payload = vec![0x5au8; 5000];
    let mut config = RxConfig::default();
    config.window = 64 << 10;
    config.copy_buffer = 16 << 10;

    // The counters must see live receivers, or the test below could not fail.
    let (maps_before, fds_before) = (maps_lines(), open_fds());
    let held: Vec<Receiver> = (0..8)
        .map(|_| {
            let _client = TcpStream::connect(addr).unwrap();
            let (server, _) = listener.accept().unwrap();
            Receiver::new(server, config.clone()).unwrap()
        })
        .collect();
    assert!(
        maps_lines() >= maps_before + 8,
        "windows not visible in /proc/self/maps"
    );
    assert!(open_fds() >= fds_before + 8);
    drop(held);

    let pages = vec![0xa5u8; 64 << 10];
    let (maps_before, fds_before) = (maps_lines(), open_fds());
    let mut mapped = 0;
    for i in 0..10_000u32 {
        let mut client = TcpStream::connect(addr).unwrap();
        let (server, _) = listener.accept().unwrap();
        let mut rx = Receiver::new(server, config.clone()).unwrap();
        if i % 100 == 0 {
            send_writes(client, &pages, &[(pages.len(), false)], SendWith::ZeroCopy);
            // Take one chunk and drop the receiver with its pages (if mapped) still in the window.
            let chunk = rx.recv().unwrap().unwrap();
            if chunk.kind() == ChunkKind::Mapped {
                mapped += chunk.len();
            }
            continue;
        }
        client
            .write_all(&payload[..1 + (i as usize % payload.len())])
            .unwrap();
        drop(client);
        assert_eq!(
            receive_all(&mut rx),
            1 + u64::from(i) % payload.len() as u64
        );
    }
    assert!(mapped > 0, "no connection had pages mapped");
    assert_eq!(maps_lines(), maps_before, "mappings leaked");
    assert_eq!(open_fds(), fds_before, "descriptors leaked");
}
