//! The topologies really exist while owned, carry traffic, and vanish afterwards.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use testnet::{Netns, Offloads, VethConfig, VethPair};

fn namespaces() -> String {
    testnet::run_checked("ip", &["netns", "list"]).unwrap()
}

#[test]
fn veth_pair_carries_ipv4_and_ipv6_and_is_removed_on_drop() {
    if !testnet::privileged("veth_pair_carries_ipv4_and_ipv6_and_is_removed_on_drop") {
        return;
    }
    let pair = VethPair::new(VethConfig {
        mtu: 4000,
        queues: 1,
        offloads: Offloads {
            tso: false,
            gro: false,
            ..Offloads::default()
        },
    })
    .unwrap();
    let (a_name, b_name) = (pair.a.name().to_string(), pair.b.name().to_string());
    assert!(a_name.starts_with(&format!("zc{}-", std::process::id())));
    assert!(namespaces().contains(&a_name) && namespaces().contains(&b_name));
    let link = pair.a.ip(&["link", "show", &pair.a_if]).unwrap();
    assert!(link.contains("mtu 4000"), "{link}");
    let features = pair.a.exec("ethtool", &["-k", &pair.a_if]).unwrap();
    assert!(
        features.contains("tcp-segmentation-offload: off"),
        "{features}"
    );

    for server in [
        SocketAddr::from((pair.b_v4, 7000)),
        SocketAddr::from((pair.b_v6, 7001)),
    ] {
        let listener = pair.b.run(|| TcpListener::bind(server).unwrap());
        let echo = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 5];
            s.read_exact(&mut buf).unwrap();
            s.write_all(&buf).unwrap();
        });
        pair.a.run(|| {
            let mut s = TcpStream::connect_timeout(&server, Duration::from_secs(5)).unwrap();
            s.write_all(b"hello").unwrap();
            let mut back = [0u8; 5];
            s.read_exact(&mut back).unwrap();
            assert_eq!(&back, b"hello");
        });
        echo.join().unwrap();
    }
    // The host's namespace cannot see the pair's interfaces.
    assert!(!std::path::Path::new(&format!("/sys/class/net/{}", pair.a_if)).exists());
    drop(pair);
    let left = namespaces();
    assert!(!left.contains(&a_name) && !left.contains(&b_name), "{left}");
}

#[test]
fn namespace_sysctls_are_per_namespace() {
    if !testnet::privileged("namespace_sysctls_are_per_namespace") {
        return;
    }
    let ns = Netns::create("s").unwrap();
    ns.set_sysctl("net.core.optmem_max", "4096").unwrap();
    let inside = ns.run(|| std::fs::read_to_string("/proc/sys/net/core/optmem_max").unwrap());
    assert_eq!(inside.trim(), "4096");
    let host = std::fs::read_to_string("/proc/sys/net/core/optmem_max").unwrap();
    assert_ne!(host.trim(), "4096");
}

#[test]
fn sweeper_removes_namespace_of_killed_process() {
    if !testnet::privileged("sweeper_removes_namespace_of_killed_process") {
        return;
    }
    // A process that names a namespace after itself, as testnet does, and is then killed with SIGKILL
    // (no handler runs).
    let mut child = Command::new("sh")
        .args(["-c", "ip netns add zc$$-0k && echo ready && exec sleep 60"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = [0u8; 6];
    child.stdout.take().unwrap().read_exact(&mut ready).unwrap();
    let name = format!("zc{}-0k", child.id());
    assert!(namespaces().contains(&name));
    child.kill().unwrap();
    child.wait().unwrap();
    // Tests running at the same time sweep too when they set up a harness: whichever sweep ran, the
    // dead process's namespace must be gone once this one returns.
    let removed = testnet::sweep().unwrap();
    assert!(
        !namespaces().contains(&name),
        "{name} survived; removed {removed:?}"
    );
}

#[test]
fn sigint_removes_namespaces_of_the_interrupted_process() {
    if !testnet::privileged("sigint_removes_namespaces_of_the_interrupted_process") {
        return;
    }
    let bin = env!("CARGO_BIN_EXE_testnet-hold");
    let mut child = Command::new(bin).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    {
        use std::io::BufRead;
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut line).unwrap();
    }
    let name = line.trim().to_string();
    assert!(namespaces().contains(&name), "{name}");
    let pid = child.id().to_string();
    testnet::run_checked("kill", &["-INT", &pid]).unwrap();
    child.wait().unwrap();
    assert!(!namespaces().contains(&name), "{name} survived SIGINT");
}
