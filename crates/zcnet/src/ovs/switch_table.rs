//! The learning switch's bounded state, free of any datapath: the MAC table and the record of the
//! flows the switch installed, each capped with least-recently-used eviction, and the idle-flow rule
//! driven by the packet counts of flow dumps.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// The switch's bounds (a limit of 0 counts as 1).
///
/// Start from [`Default`] and set the fields that differ
/// ([configs](crate#configs-and-growing-enums): it is `#[non_exhaustive]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SwitchLimits {
    /// MAC addresses remembered; learning one more forgets the least recently seen.
    pub max_macs: usize,
    /// Flows the switch keeps installed; installing one more deletes the least recently hit.
    pub max_flows: usize,
    /// A flow whose packet count has not grown for this long is deleted.
    pub flow_idle: Duration,
}

impl Default for SwitchLimits {
    /// 4096 MACs, 8192 flows, 10 s idle (Open vSwitch's default `max-idle`).
    fn default() -> Self {
        SwitchLimits {
            max_macs: 4096,
            max_flows: 8192,
            flow_idle: Duration::from_secs(10),
        }
    }
}

/// A map capped at `max` entries that forgets the least recently touched one first.
#[derive(Debug)]
struct Lru<K, V> {
    map: HashMap<K, (V, u64)>,
    order: BTreeMap<u64, K>,
    next: u64,
    max: usize,
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    fn new(max: usize) -> Self {
        Lru {
            map: HashMap::new(),
            order: BTreeMap::new(),
            next: 0,
            max: max.max(1),
        }
    }

    /// Sets `key` to `value` as the most recent entry; returns the keys evicted to stay at `max`.
    fn put(&mut self, key: K, value: V) -> Vec<K> {
        let stamp = self.next;
        self.next += 1;
        if let Some((_, old)) = self.map.insert(key.clone(), (value, stamp)) {
            self.order.remove(&old);
        }
        self.order.insert(stamp, key);
        let mut evicted = Vec::new();
        while self.map.len() > self.max {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.map.remove(&oldest);
            evicted.push(oldest);
        }
        evicted
    }

    fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key).map(|(v, _)| v)
    }

    fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.map.get_mut(key).map(|(v, _)| v)
    }

    fn remove(&mut self, key: &K) -> Option<V> {
        let (v, stamp) = self.map.remove(key)?;
        self.order.remove(&stamp);
        Some(v)
    }

    fn len(&self) -> usize {
        self.map.len()
    }
}

/// MAC address → port, at most `max_macs` of them.
#[derive(Debug)]
pub(crate) struct MacTable {
    lru: Lru<[u8; 6], u32>,
    evicted: u64,
}

impl MacTable {
    pub(crate) fn new(max: usize) -> MacTable {
        MacTable {
            lru: Lru::new(max),
            evicted: 0,
        }
    }

    /// `mac` was seen on `port`.
    pub(crate) fn learn(&mut self, mac: [u8; 6], port: u32) {
        self.evicted += self.lru.put(mac, port).len() as u64;
    }

    /// The port `mac` was last seen on.
    pub(crate) fn port_of(&self, mac: &[u8; 6]) -> Option<u32> {
        self.lru.get(mac).copied()
    }

    pub(crate) fn len(&self) -> usize {
        self.lru.len()
    }

    /// MACs forgotten to stay under the limit.
    pub(crate) fn evicted(&self) -> u64 {
        self.evicted
    }
}

/// When a flow was last seen to carry packets.
#[derive(Debug, Clone, Copy)]
struct FlowUse {
    packets: u64,
    last_hit: Instant,
}

/// The flows the switch installed (their key attributes), at most `max_flows`, least recently hit
/// first out, and the idle rule.
#[derive(Debug)]
pub(crate) struct FlowTable {
    lru: Lru<Vec<u8>, FlowUse>,
    idle: Duration,
}

impl FlowTable {
    pub(crate) fn new(limits: &SwitchLimits) -> FlowTable {
        FlowTable {
            lru: Lru::new(limits.max_flows),
            idle: limits.flow_idle,
        }
    }

    /// Flow `key` is being installed at `now`; returns the flows to delete from the datapath
    /// (before installing it) to stay under the limit.
    pub(crate) fn installing(&mut self, key: &[u8], now: Instant) -> Vec<Vec<u8>> {
        let packets = self.lru.get(&key.to_vec()).map_or(0, |u| u.packets);
        self.lru.put(
            key.to_vec(),
            FlowUse {
                packets,
                last_hit: now,
            },
        )
    }

    /// Takes a dump of the datapath's flows, (key, packet count) at `now`: a recorded flow whose
    /// count grew was hit; a recorded flow missing from the dump is forgotten (deleted by another
    /// tool); flows the switch did not install are left alone. Returns the recorded flows idle for the
    /// idle time, forgotten and to be deleted.
    pub(crate) fn sweep<'a>(
        &mut self,
        dump: impl IntoIterator<Item = (&'a [u8], u64)>,
        now: Instant,
    ) -> Vec<Vec<u8>> {
        let mut seen = HashSet::new();
        for (key, packets) in dump {
            let key = key.to_vec();
            if let Some(u) = self.lru.get_mut(&key) {
                if u.packets != packets {
                    *u = FlowUse {
                        packets,
                        last_hit: now,
                    };
                }
                seen.insert(key);
            }
        }
        let stale: Vec<Vec<u8>> = self
            .lru
            .map
            .iter()
            .filter(|(k, (u, _))| {
                !seen.contains(*k) || now.saturating_duration_since(u.last_hit) >= self.idle
            })
            .map(|(k, _)| k.clone())
            .collect();
        stale
            .into_iter()
            .filter(|key| {
                self.lru.remove(key);
                seen.contains(key)
            })
            .collect()
    }

    /// Flow `key` was deleted from the datapath.
    pub(crate) fn deleted(&mut self, key: &[u8]) {
        self.lru.remove(&key.to_vec());
    }

    pub(crate) fn len(&self) -> usize {
        self.lru.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_touched_entry_goes_first() {
        let mut lru = Lru::new(2);
        assert!(lru.put(1, 'a').is_empty());
        assert!(lru.put(2, 'b').is_empty());
        assert!(lru.put(1, 'A').is_empty(), "1 is touched, not added");
        assert_eq!(lru.put(3, 'c'), vec![2]);
        assert_eq!(lru.get(&1), Some(&'A'));
        assert_eq!(lru.len(), 2);
    }

    #[test]
    fn flows_idle_for_the_idle_time_are_deleted_and_hit_ones_kept() {
        let limits = SwitchLimits {
            max_flows: 10,
            flow_idle: Duration::from_secs(10),
            ..SwitchLimits::default()
        };
        let mut flows = FlowTable::new(&limits);
        let t0 = Instant::now();
        let (a, b) = (vec![1u8], vec![2u8]);
        flows.installing(&a, t0);
        flows.installing(&b, t0);
        let at = |s| t0 + Duration::from_secs(s);
        assert!(flows.sweep([(&a[..], 0), (&b[..], 0)], at(5)).is_empty());
        assert!(
            flows.sweep([(&a[..], 3), (&b[..], 0)], at(9)).is_empty(),
            "a is hit at 9 s"
        );
        assert_eq!(flows.sweep([(&a[..], 3), (&b[..], 0)], at(10)), vec![b]);
        assert!(flows.sweep([(&a[..], 3)], at(18)).is_empty());
        assert_eq!(flows.sweep([(&a[..], 3)], at(19)), vec![a]);
        assert_eq!(flows.len(), 0);
    }

    #[test]
    fn a_dump_leaves_flows_of_other_tools_alone_and_forgets_vanished_ones() {
        let limits = SwitchLimits {
            max_flows: 2,
            flow_idle: Duration::from_secs(10),
            ..SwitchLimits::default()
        };
        let mut flows = FlowTable::new(&limits);
        let t0 = Instant::now();
        flows.installing(&[1], t0);
        flows.installing(&[2], t0);
        let later = t0 + Duration::from_secs(60);
        let delete = flows.sweep([(&[1u8][..], 0), (&[3][..], 0), (&[4][..], 0)], later);
        assert_eq!(
            delete,
            vec![vec![1u8]],
            "only the switch's own idle flow; 2 vanished"
        );
        assert_eq!(flows.len(), 0);
        assert!(flows.installing(&[5], later).is_empty());
    }
}
