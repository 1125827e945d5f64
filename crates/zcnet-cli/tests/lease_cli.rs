//! `zcnet lease` on a veth pair in a namespace: a refused step is named and the channels already
//! changed are put back; a holder killed with SIGKILL leaves its record, `lease show` calls it
//! abandoned and `lease restore` puts the channels back; `--for` puts them back by itself. Channel
//! counts are read from the namespace's sysfs, not through zcnet. `zcnet probe` names what zcrx
//! lacks on veth and what holds each queue.

mod common;

use std::io::BufRead;
use std::path::PathBuf;
use std::process::Command;

use common::{ZCNET, start_reading, stdout_of};
use testnet::{VethConfig, VethPair};
use zcnet::xdp::{Mode, Socket, Umem, UmemConfig};

/// `zcnet lease ARGS… --records DIR` inside the pair's namespace `a`.
fn lease(pair: &VethPair, dir: &PathBuf, args: &[&str]) -> Command {
    let mut cmd = pair.a.command(ZCNET);
    cmd.arg("lease").args(args).arg("--records").arg(dir);
    cmd
}

/// (RX, TX) queues of `a`'s end, from sysfs inside the namespace.
fn queues(pair: &VethPair) -> (usize, usize) {
    let listing = pair
        .a
        .exec("ls", &[&format!("/sys/class/net/{}/queues", pair.a_if)])
        .expect("ls queues");
    let count = |p: &str| {
        listing
            .split_whitespace()
            .filter(|q| q.starts_with(p))
            .count()
    };
    (count("rx-"), count("tx-"))
}

#[test]
fn a_killed_holder_is_put_back_by_lease_restore_and_refusals_are_named() {
    let test = "a_killed_holder_is_put_back_by_lease_restore_and_refusals_are_named";
    if !testnet::privileged(test) {
        return;
    }
    let pair = VethPair::new(VethConfig {
        queues: 4,
        ..VethConfig::default()
    })
    .expect("veth pair");
    let dir = std::env::temp_dir().join(format!("zcnet-lease-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let a_if = pair.a_if.clone();
    let apply = ["apply", "--iface", &a_if, "--queue", "1", "--channels", "2"];

    // Refused: veth has no header split; the channels it had set go back.
    let out = lease(&pair, &dir, &[&apply[..], &["--zcrx"]].concat())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("step header-split refused") && err.contains("EOPNOTSUPP"),
        "{err}"
    );
    assert!(err.contains("rolled back: channels rx 4 tx 4"), "{err}");
    assert_eq!(queues(&pair), (4, 4));

    // Held, then killed outright: the record stays and `restore` puts the channels back.
    let (mut holder, first, mut rest) = start_reading(&mut lease(&pair, &dir, &apply));
    assert_eq!(first.trim(), "applied: channels rx 2 tx 2");
    let mut holding = String::new();
    rest.read_line(&mut holding).unwrap();
    assert!(
        holding.starts_with(&format!("holding {a_if} queue 1")),
        "{holding}"
    );
    assert_eq!(queues(&pair), (2, 2));
    holder.kill().unwrap(); // SIGKILL
    holder.wait().unwrap();
    assert_eq!(queues(&pair), (2, 2), "nothing put back by a killed holder");
    let shown = stdout_of(&mut lease(&pair, &dir, &["show"]), "lease show");
    assert!(shown.contains(&format!("{a_if} queue 1")), "{shown}");
    assert!(
        shown.contains(&format!("pid {} abandoned", holder.id())),
        "{shown}"
    );
    assert!(shown.contains("undo channels rx=4 tx=4"), "{shown}");
    let restored = stdout_of(&mut lease(&pair, &dir, &["restore"]), "lease restore");
    assert!(
        restored.contains(&format!("restored lease of {a_if} queue 1")),
        "{restored}"
    );
    assert!(restored.contains("channels rx 4 tx 4"), "{restored}");
    assert_eq!(queues(&pair), (4, 4));
    let shown = stdout_of(&mut lease(&pair, &dir, &["show"]), "lease show");
    assert!(shown.starts_with("no lease records"), "{shown}");

    // Held for a while, then put back by the holder itself.
    let out = stdout_of(
        &mut lease(&pair, &dir, &[&apply[..], &["--for", "0.2"]].concat()),
        "lease apply --for",
    );
    assert!(out.contains("restored: channels rx 4 tx 4"), "{out}");
    assert_eq!(queues(&pair), (4, 4));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn probe_says_what_zcrx_lacks_on_each_queue_of_a_veth() {
    if !testnet::privileged("probe_says_what_zcrx_lacks_on_each_queue_of_a_veth") {
        return;
    }
    let pair = VethPair::new(VethConfig {
        queues: 4,
        ..VethConfig::default()
    })
    .expect("veth pair");
    let mut cmd = pair.a.command(ZCNET);
    cmd.args(["probe", "--iface", &pair.a_if]);
    let out = stdout_of(&mut cmd, "probe --iface");
    let row = |feature: &str| {
        out.lines()
            .find(|l| l.starts_with(feature))
            .unwrap_or_else(|| panic!("no {feature} row: {out}"))
            .to_string()
    };
    let split = row("zcrx.header_split");
    assert!(
        split.contains(" no ") && split.contains("EOPNOTSUPP"),
        "{split}"
    );
    assert!(row("zcrx.hds_thresh").contains(" no "), "{out}");
    let q = row("zcrx.queues");
    assert!(
        q.contains("4 RX queue(s) listed by netdev queue-get"),
        "{q}"
    );
    assert!(q.contains("none held"), "{q}");
    // An AF_XDP socket on queue 2: netdev queue-get names it as the queue's holder.
    let held = pair.a.run(|| {
        let mut umem = Umem::new(UmemConfig::default()).expect("umem");
        let socket = Socket::bind(&mut umem, &pair.a_if, 2, Mode::Copy).expect("bind copy");
        (umem, socket)
    });
    let out = stdout_of(&mut cmd, "probe --iface, a socket on queue 2");
    let q = out.lines().find(|l| l.starts_with("zcrx.queues")).unwrap();
    assert!(
        q.contains("rx 2: AF_XDP socket") && !q.contains("rx 1:"),
        "{q}"
    );
    drop(held);
}
