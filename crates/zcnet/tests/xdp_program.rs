//! Embedded XDP programs: load, attach through a BPF link on a veth interface, detach on drop.

use std::net::UdpSocket;
use std::os::fd::AsFd;
use std::time::Duration;

use testnet::VethPair;
use testnet::frame::{UdpFrame, check_payload};
use zcnet::packet;
use zcnet::xdp::{AttachMode, FrameMatch, ProgramKind, XdpProgram, interface_index};

/// `ip -d link show IF` in the namespace that holds it.
fn link_details(ns: &testnet::Netns, iface: &str) -> String {
    ns.ip(&["-d", "link", "show", iface])
        .expect("ip -d link show")
}

#[test]
fn drop_program_attaches_in_driver_mode_and_detaches_on_drop() {
    if !testnet::privileged("drop_program_attaches_in_driver_mode_and_detaches_on_drop") {
        return;
    }
    let pair = VethPair::one_queue().expect("veth pair");
    assert!(!link_details(&pair.a, &pair.a_if).contains("prog/xdp"));
    let link = pair.a.run(|| {
        let ifindex = interface_index(&pair.a_if).expect("ifindex");
        XdpProgram::drop_all()
            .expect("load drop program")
            .attach(ifindex, AttachMode::Driver)
            .expect("attach in driver mode")
    });
    assert_eq!(link.mode(), AttachMode::Driver);
    assert_eq!(link.interface(), pair.a_if);
    let shown = link_details(&pair.a, &pair.a_if);
    assert!(shown.contains("prog/xdp id"), "{shown}");
    assert!(
        shown.contains("xdp "),
        "driver mode is shown as `xdp`: {shown}"
    );
    drop(link);
    let shown = pair
        .a
        .link_once_xdp_detached(&pair.a_if)
        .expect("ip -d link show");
    assert!(!shown.contains("prog/xdp"), "still attached: {shown}");
}

#[test]
fn redirect_program_attaches_in_generic_mode_and_detaches_on_drop() {
    if !testnet::privileged("redirect_program_attaches_in_generic_mode_and_detaches_on_drop") {
        return;
    }
    let pair = VethPair::one_queue().expect("veth pair");
    let (program, link) = pair.b.run(|| {
        let program =
            XdpProgram::redirect_to_xsk(1, FrameMatch::All).expect("load redirect program");
        let link = program
            .attach_to(&pair.b_if, AttachMode::Generic)
            .expect("attach in generic mode");
        (program, link)
    });
    assert_eq!(program.kind(), ProgramKind::RedirectToXsk(FrameMatch::All));
    assert_eq!(program.xsk_map().map(|m| m.entries()), Some(1));
    let shown = link_details(&pair.b, &pair.b_if);
    assert!(shown.contains("xdpgeneric"), "{shown}");
    // With no socket in the map the program passes frames to the stack: UDP still arrives.
    let receiver = pair
        .b
        .run(|| UdpSocket::bind((pair.b_v4, 0)).expect("bind receiver"));
    receiver
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let to = receiver.local_addr().expect("addr");
    pair.a.run(|| {
        let sender = UdpSocket::bind((pair.a_v4, 0)).expect("bind sender");
        sender.send_to(b"through XDP_PASS", to).expect("send");
    });
    let mut buf = [0u8; 64];
    let n = receiver
        .recv(&mut buf)
        .expect("datagram passed by the fallback");
    assert_eq!(&buf[..n], b"through XDP_PASS");
    drop(link);
    let shown = pair
        .b
        .link_once_xdp_detached(&pair.b_if)
        .expect("ip -d link show");
    assert!(!shown.contains("prog/xdp"), "still attached: {shown}");
}

#[test]
fn second_attach_is_busy_and_names_the_interface() {
    if !testnet::privileged("second_attach_is_busy_and_names_the_interface") {
        return;
    }
    let pair = VethPair::one_queue().expect("veth pair");
    pair.a.run(|| {
        let program = XdpProgram::drop_all().expect("load");
        let _link = program
            .attach_to(&pair.a_if, AttachMode::Driver)
            .expect("attach");
        let err = program
            .attach_to(&pair.a_if, AttachMode::Driver)
            .expect_err("second attach");
        assert_eq!(err.raw_os_error(), Some(libc::EBUSY), "{err}");
        assert!(err.to_string().contains(&pair.a_if), "{err}");
    });
    assert!(!link_details(&pair.a, &pair.a_if).contains("prog/xdp"));
}

#[test]
fn missing_interface_is_named() {
    let err = interface_index("zcnet-nonexistent0").expect_err("no such interface");
    assert_eq!(err.raw_os_error(), Some(libc::ENODEV), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("zcnet-nonexistent0") && text.contains("ENODEV"),
        "{text}"
    );
}

/// The embedded programs' disassembly, compared with the reviewed copy in `xdp_programs.golden`: any
/// change to the bytecode shows up as a diff of that file.
#[test]
fn embedded_programs_match_golden_disassembly() {
    let mut text = String::new();
    for kind in [
        ProgramKind::DropAll,
        ProgramKind::RedirectToXsk(FrameMatch::All),
        ProgramKind::RedirectToXsk(FrameMatch::UdpPort(9)),
        ProgramKind::RedirectToInterface(zcnet::IfIndex::new(7)),
    ] {
        text.push_str(&format!("{}:\n", kind.name()));
        text.push_str(&kind.disassembly(3));
    }
    let golden = include_str!("xdp_programs.golden");
    assert_eq!(
        text, golden,
        "disassembly changed; review and update tests/xdp_programs.golden"
    );
}

/// `redirect_to_interface` on the far end of a second veth pair sends every frame on to the interface
/// it names (`b_if`) as XDP frames, which veth delivers to `b_if`'s peer `a_if` only when `a_if` has
/// NAPI (here: GRO on): without it the frames are dropped; with it every one arrives intact.
#[test]
fn redirect_to_interface_delivers_xdp_frames_to_the_named_pair() {
    if !testnet::privileged("redirect_to_interface_delivers_xdp_frames_to_the_named_pair") {
        return;
    }
    let pair = VethPair::one_queue().expect("veth pair");
    let pid = std::process::id();
    let (gen_if, fwd_if) = (format!("zc{pid}rg"), format!("zc{pid}rf"));
    pair.b
        .ip(&[
            "link", "add", &gen_if, "type", "veth", "peer", "name", &fwd_if,
        ])
        .expect("second veth pair");
    for iface in [&gen_if, &fwd_if] {
        pair.b.ip(&["link", "set", iface, "up"]).expect("up");
    }
    let (link, sender) = pair.b.run(|| {
        let target = interface_index(&pair.b_if).expect("ifindex");
        let program = XdpProgram::redirect_to_interface(target).expect("load");
        assert_eq!(program.kind(), ProgramKind::RedirectToInterface(target));
        let link = program
            .attach_to(&fwd_if, AttachMode::Driver)
            .expect("attach in driver mode");
        let ifindex = interface_index(&gen_if).expect("ifindex");
        let sender = packet::open(ifindex, libc::ETH_P_ALL as u16).expect("packet socket");
        (link, sender)
    });
    const PORT: u16 = 7013;
    let receiver = pair
        .a
        .run(|| UdpSocket::bind((pair.a_v4, PORT)).expect("bind receiver"));
    receiver
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    let spec = UdpFrame {
        src_mac: pair.mac(&pair.b_if).expect("mac"),
        dst_mac: pair.mac(&pair.a_if).expect("mac"),
        src_ip: pair.b_v4,
        dst_ip: pair.a_v4,
        src_port: PORT,
        dst_port: PORT,
    };
    let send = |seqs: std::ops::Range<u64>| {
        for seq in seqs {
            let mut frame = [0u8; 128];
            let len = spec.write(&mut frame, seq, 64).expect("frame");
            packet::send(sender.as_fd(), &frame[..len]).expect("send");
        }
    };
    let mut buf = [0u8; 2048];
    send(0..10);
    assert!(
        receiver.recv(&mut buf).is_err(),
        "a_if has no NAPI: veth refuses the redirected frames"
    );
    pair.a
        .exec("ethtool", &["-K", &pair.a_if, "gro", "on"])
        .expect("GRO on");
    const FRAMES: u64 = 200;
    let mut seen = std::collections::BTreeSet::new();
    // In bursts of 20, read before the next: the socket's receive buffer holds only so many.
    for burst in (100..100 + FRAMES).step_by(20) {
        send(burst..burst + 20);
        while let Ok(n) = receiver.recv(&mut buf) {
            let seq = check_payload(&buf[..n]).expect("payload intact");
            assert!(seen.insert(seq), "{seq} twice");
            if seq == burst + 19 {
                break;
            }
        }
    }
    let missing: Vec<u64> = (100..100 + FRAMES).filter(|s| !seen.contains(s)).collect();
    assert!(missing.is_empty(), "frames lost: {missing:?}");
    drop(link);
}
