//! NIC queue leases on a veth pair in a namespace: veth changes its channel count (RX and TX
//! queues) but has no ring parameters, RSS table or ntuple rules, so every such step is refused
//! (`EOPNOTSUPP`) after the channels changed, and the transaction must put the channels back. A
//! lease of channels alone holds, refuses a second lease of its queue, and is put back on drop.
//! The channel counts are read independently of zcnet, from the namespace's sysfs queue
//! directories.

use std::path::{Path, PathBuf};

use testnet::{VethConfig, VethPair};
use zcnet::queue_lease::{Lease, LeaseSpec, Step, records};

/// The RX and TX queue counts of `iface` as sysfs shows them inside its namespace.
fn queues(pair: &VethPair, iface: &str) -> (usize, usize) {
    let listing = pair
        .a
        .exec("ls", &[&format!("/sys/class/net/{iface}/queues")])
        .expect("ls queues");
    let count = |prefix: &str| {
        listing
            .split_whitespace()
            .filter(|q| q.starts_with(prefix))
            .count()
    };
    (count("rx-"), count("tx-"))
}

/// A fresh record directory for one test.
fn record_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("zcnet-lease-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn no_records(dir: &Path) -> bool {
    records(dir).unwrap().is_empty()
}

/// For a test that may run: a veth pair of four queues, an empty record directory, and a lease of
/// queue 1 that sets two channels (RX and TX) and nothing else.
fn setup(test: &str) -> Option<(VethPair, PathBuf, LeaseSpec)> {
    if !testnet::privileged(test) {
        return None;
    }
    let pair = VethPair::new(VethConfig {
        queues: 4,
        ..VethConfig::default()
    })
    .expect("veth pair");
    assert_eq!(queues(&pair, &pair.a_if), (4, 4));
    let mut spec = LeaseSpec::new(&pair.a_if, 1);
    spec.channels = Some(2);
    Some((pair, record_dir(test), spec))
}

#[test]
fn a_refused_step_puts_back_the_channels_already_changed() {
    let Some((pair, dir, base)) = setup("a_refused_step_puts_back_the_channels_already_changed")
    else {
        return;
    };
    let cases = [
        (
            {
                let mut spec = base.clone();
                spec.header_split = true;
                spec
            },
            Step::HeaderSplit,
        ),
        (
            {
                let mut spec = base.clone();
                spec.isolate = true;
                spec
            },
            Step::RssIsolate,
        ),
        (
            {
                let mut spec = base.clone();
                spec.flow = Some("tcp:9000".parse().unwrap());
                spec
            },
            Step::Ntuple,
        ),
    ];
    for (spec, refused) in cases {
        let err = pair
            .a
            .run(|| Lease::apply(&spec, &dir))
            .expect_err("veth has no such setting");
        eprintln!("{err}");
        assert_eq!(err.step, refused, "{err}");
        assert_eq!(err.raw_os_error(), Some(libc::EOPNOTSUPP), "{err}");
        assert_eq!(err.rolled_back, ["channels rx 4 tx 4"], "{err}");
        assert!(err.rollback_failed.is_empty(), "{err}");
        assert!(
            err.to_string().contains(&format!("step {refused} refused")),
            "{err}"
        );
        assert_eq!(queues(&pair, &pair.a_if), (4, 4), "channels put back");
        assert!(no_records(&dir), "no record left");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_held_lease_is_exclusive_and_put_back_on_drop() {
    let Some((pair, dir, spec)) = setup("a_held_lease_is_exclusive_and_put_back_on_drop") else {
        return;
    };
    let lease = pair.a.run(|| Lease::apply(&spec, &dir)).expect("lease");
    assert_eq!(lease.applied(), ["channels rx 2 tx 2"]);
    assert_eq!(queues(&pair, &pair.a_if), (2, 2));
    let text = std::fs::read_to_string(lease.record_path()).unwrap();
    assert!(text.contains("undo channels rx=4 tx=4\n"), "{text}");
    // A second lease of the same queue is refused while the first is held.
    let err = pair.a.run(|| Lease::apply(&spec, &dir)).unwrap_err();
    assert_eq!(
        (err.step, err.raw_os_error()),
        (Step::Snapshot, Some(libc::EBUSY)),
        "{err}"
    );
    assert_eq!(
        queues(&pair, &pair.a_if),
        (2, 2),
        "the refusal changed nothing"
    );
    // A queue beyond the count asked for does not exist: refused before any change is kept.
    let err = pair
        .a
        .run(|| {
            Lease::apply(
                &{
                    let mut spec = spec.clone();
                    spec.queue = 3;
                    spec
                },
                &dir,
            )
        })
        .unwrap_err();
    assert_eq!(err.step, Step::Snapshot, "{err}");
    assert_eq!(err.rolled_back, ["channels rx 2 tx 2"], "{err}");
    drop(lease);
    assert_eq!(queues(&pair, &pair.a_if), (4, 4), "put back on drop");
    assert!(no_records(&dir));
    let _ = std::fs::remove_dir_all(&dir);
}
