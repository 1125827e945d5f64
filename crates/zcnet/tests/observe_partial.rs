//! The observers `zcnet bench` starts (late copies only, receive copies only) create only the map
//! their programs count in: the process holds one new BPF map, the per-CPU counters, and asking
//! them for locked memory gives none rather than an error.

use std::fs;

use zcnet::observe::{ObserveError, Observer, Scope};

/// `BPF_MAP_TYPE_PERCPU_HASH` (`include/uapi/linux/bpf.h`): the counters map's type.
const PERCPU_HASH: u32 = 5;

/// The type of each BPF map this process holds a descriptor of (`map_type` in
/// `/proc/self/fdinfo/<fd>`), sorted.
fn map_types() -> Vec<u32> {
    let mut types: Vec<u32> = fs::read_dir("/proc/self/fdinfo")
        .expect("/proc/self/fdinfo")
        .filter_map(|entry| fs::read_to_string(entry.ok()?.path()).ok())
        .filter_map(|info| {
            let line = info.lines().find_map(|l| l.strip_prefix("map_type:"))?;
            line.trim().parse().ok()
        })
        .collect();
    types.sort_unstable();
    types
}

/// Starts an observer with `attach` and checks the maps it made; `false` when the kernel does not
/// let it attach (the `skb_copy_ubufs` kprobe on a kernel without kprobes).
fn only_the_counters_map(attach: fn(Scope) -> Result<Observer, ObserveError>) -> bool {
    let before = map_types();
    let observer = match attach(Scope::Process(std::process::id())) {
        Ok(observer) => observer,
        Err(ObserveError::NotSeen { what, why }) => {
            println!("not attached ({what}): {why}");
            return false;
        }
        Err(e) => panic!("attach: {e}"),
    };
    let mut expected = before;
    expected.push(PERCPU_HASH);
    expected.sort_unstable();
    assert_eq!(map_types(), expected, "the maps held after attaching");
    assert_eq!(observer.locked_memory().expect("locked memory"), []);
    observer.snapshot().expect("snapshot");
    true
}

#[test]
fn partial_observers_create_only_the_counters_map() {
    let test = "partial_observers_create_only_the_counters_map";
    if !testnet::may_trace(test) {
        return;
    }
    assert!(only_the_counters_map(Observer::attach_receive_copies));
    only_the_counters_map(Observer::attach_late_copies);
}
