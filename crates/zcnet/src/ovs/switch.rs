//! An L2 learning switch on the kernel datapath: every miss upcall teaches the source MAC's port,
//! installs an exact-match flow built from the upcall's key (so the flow's later packets stay in the
//! kernel) and executes the packet; unknown unicast destinations are flooded without a flow, so that
//! the flow is installed once the destination has been learnt.
//!
//! The switch is bounded (see [`SwitchLimits`]) and lives beside other tools: once a second it reads
//! the datapath's user features and follows its upcall dispatch — another tool opening the datapath
//! (`ovs-dpctl`, even `dump-dps`) turns on `OVS_DP_F_DISPATCH_UPCALL_PER_CPU` without naming per-CPU
//! sockets, after which the kernel sends every miss to netlink port 0 and counts it lost until the
//! switch registers its socket with `OVS_DP_ATTR_PER_CPU_PIDS` (and with each vport when per-CPU
//! dispatch is turned off). In the same pass it dumps the flows and deletes those whose packet count
//! has not grown for the idle time. A failed kernel call (install, execute, delete, dump) is counted
//! and reported as a [`SwitchEvent`]; the switch goes on.

use std::time::{Duration, Instant};

use super::datapath::{Action, Datapath, DatapathConfig, Dispatch};
use super::error::OvsError;
use super::switch_table::{FlowTable, MacTable, SwitchLimits};
use super::upcall::{Received, Upcall, UpcallCounters, UpcallKind, UpcallSocket};
use crate::sys::ovs::{OvsKeyEthernet, dp_feature};

/// How often the switch reads the datapath's features and sweeps its flows.
const MAINTENANCE: Duration = Duration::from_secs(1);
/// Events kept until taken; later ones are only counted.
const MAX_EVENTS: usize = 64;

/// What the switch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SwitchCounters {
    /// Miss upcalls handled.
    pub misses: u64,
    /// Flows installed.
    pub flows_installed: u64,
    /// Packets flooded to every other port.
    pub flooded: u64,
    /// Upcalls ignored (no in_port or Ethernet key, action upcalls).
    pub ignored: u64,
    /// Times the switch re-registered its upcall socket because the datapath's dispatch changed.
    pub dispatch_changes: u64,
    /// MAC addresses forgotten to stay under [`SwitchLimits::max_macs`].
    pub macs_evicted: u64,
    /// Flows deleted to stay under [`SwitchLimits::max_flows`].
    pub flows_evicted: u64,
    /// Flows deleted after [`SwitchLimits::flow_idle`] without a packet.
    pub flows_expired: u64,
    /// Kernel calls that failed (each reported as [`SwitchEvent::Failed`] while few are pending).
    pub failed_calls: u64,
}

add_counters! {
    /// The counts of several switches (one per datapath) added up.
    SwitchCounters {
        misses,
        flows_installed,
        flooded,
        ignored,
        dispatch_changes,
        macs_evicted,
        flows_evicted,
        flows_expired,
        failed_calls,
    }
}

/// How a [`LearningSwitch`]'s upcall socket is registered ([`LearningSwitch::dispatch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SwitchDispatch {
    /// The dispatch the socket is registered for.
    pub dispatch: Dispatch,
    /// The datapath's `OVS_DP_F_*` user features as the switch last read them.
    pub user_features: u32,
}

/// What a [`LearningSwitch`] holds now ([`LearningSwitch::table_sizes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableSizes {
    /// MAC addresses remembered.
    pub macs: usize,
    /// Flows installed.
    pub flows: usize,
}

/// Something the switch's user should hear about.
#[derive(Debug)]
#[non_exhaustive]
pub enum SwitchEvent {
    /// The datapath's upcall dispatch changed (another tool set its user features) and the switch
    /// registered its socket for the new one.
    Dispatch {
        /// The user features read.
        user_features: u32,
        /// The dispatch now registered.
        dispatch: Dispatch,
    },
    /// A kernel call failed; the switch went on.
    Failed(OvsError),
}

/// The switch's forwarding decisions, without a datapath: MAC table and flow record, both bounded.
#[derive(Debug)]
pub(crate) struct Forwarding {
    ports: Vec<u32>,
    macs: MacTable,
    flows: FlowTable,
}

/// What to do with one miss.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Decision {
    /// Actions for the packet (and the flow); empty drops.
    pub(crate) actions: Vec<Action>,
    /// Install them as the flow of the upcall's key.
    pub(crate) install: bool,
    /// Flows to delete first, to stay under the limit.
    pub(crate) evict: Vec<Vec<u8>>,
}

impl Forwarding {
    pub(crate) fn new(ports: Vec<u32>, limits: &SwitchLimits) -> Forwarding {
        Forwarding {
            ports,
            macs: MacTable::new(limits.max_macs),
            flows: FlowTable::new(limits),
        }
    }

    /// A miss on `in_port` of a frame with Ethernet addresses `eth` and flow key `key`, at `now`.
    pub(crate) fn miss(
        &mut self,
        in_port: u32,
        eth: &OvsKeyEthernet,
        key: &[u8],
        now: Instant,
    ) -> Decision {
        if eth.eth_src[0] & 1 == 0 {
            self.macs.learn(eth.eth_src, in_port);
        }
        let flood = || {
            self.ports
                .iter()
                .filter(|p| **p != in_port)
                .map(|p| Action::Output(*p))
                .collect()
        };
        let (actions, install) = if eth.eth_dst[0] & 1 != 0 {
            (flood(), true)
        } else {
            match self.macs.port_of(&eth.eth_dst) {
                // Learnt on the port it came in on: the destination is on that segment, drop.
                Some(port) if port == in_port => (Vec::new(), true),
                Some(port) => (vec![Action::Output(port)], true),
                // Unknown unicast: flood without a flow, so that the flow is installed once learnt.
                None => (flood(), false),
            }
        };
        let evict = if install {
            self.flows.installing(key, now)
        } else {
            Vec::new()
        };
        Decision {
            actions,
            install,
            evict,
        }
    }
}

/// A learning switch owning its datapath (deleted on drop) and upcall socket.
#[derive(Debug)]
pub struct LearningSwitch {
    upcalls: UpcallSocket,
    core: Core,
}

/// Everything but the upcall socket, so that a handled upcall can borrow the socket's buffer.
#[derive(Debug)]
struct Core {
    datapath: Datapath,
    ports: Vec<(u32, String)>,
    forwarding: Forwarding,
    counters: SwitchCounters,
    dispatch: Dispatch,
    user_features: u32,
    last_maintenance: Instant,
    events: Vec<SwitchEvent>,
}

impl LearningSwitch {
    /// Creates datapath `name` with `config` and adds each of `devices` as a port; `limits` bound
    /// its MAC table and flows.
    ///
    /// # Errors
    ///
    /// [`OvsError`] naming the refused call: no `openvswitch` module (`ENOENT`), no CAP_NET_ADMIN
    /// (`EPERM`), a datapath of that name already there (`EEXIST`), a device that cannot be a port.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use zcnet::ovs::{DatapathConfig, LearningSwitch, SwitchLimits};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let mut switch =
    ///     LearningSwitch::new("zc0", DatapathConfig::default(), &["veth0", "veth1"], SwitchLimits::default())?;
    /// loop {
    ///     switch.serve(Duration::from_secs(1), |upcall| println!("miss: {} bytes", upcall.packet.len()))?;
    /// }
    /// # }
    /// ```
    pub fn new(
        name: &str,
        config: DatapathConfig,
        devices: &[&str],
        limits: SwitchLimits,
    ) -> Result<LearningSwitch, OvsError> {
        let upcalls = UpcallSocket::open()?;
        let mut datapath = Datapath::create(name, config, &upcalls)?;
        let mut ports = Vec::new();
        for device in devices {
            ports.push((datapath.add_netdev(device)?, device.to_string()));
        }
        let forwarding = Forwarding::new(ports.iter().map(|(p, _)| *p).collect(), &limits);
        Ok(LearningSwitch {
            upcalls,
            core: Core {
                datapath,
                ports,
                forwarding,
                counters: SwitchCounters::default(),
                dispatch: config.dispatch,
                user_features: config.user_features(),
                last_maintenance: Instant::now(),
                events: Vec::new(),
            },
        })
    }

    /// The datapath, for stats, flow dumps and deletion.
    pub fn datapath(&mut self) -> &mut Datapath {
        &mut self.core.datapath
    }

    /// The ports: (port number, device).
    pub fn ports(&self) -> &[(u32, String)] {
        &self.core.ports
    }

    /// The upcall socket (to size its queue).
    pub fn upcall_socket(&self) -> &UpcallSocket {
        &self.upcalls
    }

    /// What the switch did so far.
    pub fn counters(&self) -> SwitchCounters {
        SwitchCounters {
            macs_evicted: self.core.forwarding.macs.evicted(),
            ..self.core.counters
        }
    }

    /// The dispatch the switch's socket is registered for, and the user features it last read.
    pub fn dispatch(&self) -> SwitchDispatch {
        SwitchDispatch {
            dispatch: self.core.dispatch,
            user_features: self.core.user_features,
        }
    }

    /// MAC addresses and flows the switch holds now.
    pub fn table_sizes(&self) -> TableSizes {
        TableSizes {
            macs: self.core.forwarding.macs.len(),
            flows: self.core.forwarding.flows.len(),
        }
    }

    /// What the upcall socket received so far (overflows included).
    pub fn upcall_counters(&self) -> UpcallCounters {
        self.upcalls.counters()
    }

    /// The events since the last call (at most 64; beyond them failures are only counted).
    pub fn take_events(&mut self) -> Vec<SwitchEvent> {
        std::mem::take(&mut self.core.events)
    }

    /// Waits up to `timeout` for upcalls, then handles queued ones until `timeout` has passed (at
    /// least one when any is queued); `inspect` sees each upcall before it is handled. Once a second
    /// it follows the datapath's dispatch and sweeps idle flows. Returns how many upcalls were
    /// handled. Only a failure of the upcall socket itself is an error; failed datapath calls are
    /// counted and reported as events.
    ///
    /// # Errors
    ///
    /// [`OvsError`] when the upcall socket fails (its `poll` or `recv`). The [`LearningSwitch::new`]
    /// example serves.
    pub fn serve(
        &mut self,
        timeout: Duration,
        mut inspect: impl FnMut(&Upcall<'_>),
    ) -> Result<usize, OvsError> {
        // A timeout too long for the clock to reach has no deadline.
        let deadline = Instant::now().checked_add(timeout);
        self.core.maintain_if_due();
        let left = deadline.map_or(Duration::MAX, |d| {
            d.saturating_duration_since(Instant::now())
        });
        if !self.upcalls.wait(left)? {
            return Ok(0);
        }
        let mut handled = 0;
        while handled == 0 || deadline.is_none_or(|d| Instant::now() < d) {
            self.core.maintain_if_due();
            let up = match self.upcalls.recv()? {
                None => break,
                Some(Received::Upcall(up)) => up,
                Some(Received::Overflow | Received::Rejected(_)) => continue,
            };
            inspect(&up);
            self.core.handle(&up);
            handled += 1;
        }
        Ok(handled)
    }
}

impl Core {
    fn failed(&mut self, e: OvsError) {
        self.counters.failed_calls += 1;
        if self.events.len() < MAX_EVENTS {
            self.events.push(SwitchEvent::Failed(e));
        }
    }

    fn handle(&mut self, up: &Upcall<'_>) {
        let (Some(in_port), Some(eth), UpcallKind::Miss) =
            (up.key.in_port, up.key.ethernet, up.kind)
        else {
            self.counters.ignored += 1;
            return;
        };
        self.counters.misses += 1;
        let decision = self
            .forwarding
            .miss(in_port, &eth, up.key.raw(), Instant::now());
        for key in &decision.evict {
            self.delete_flow(key);
            self.counters.flows_evicted += 1;
        }
        if decision.install {
            match self.datapath.install_flow(up.key.raw(), &decision.actions) {
                Ok(()) => self.counters.flows_installed += 1,
                Err(e) => {
                    self.forwarding.flows.deleted(up.key.raw());
                    self.failed(e);
                }
            }
        } else {
            self.counters.flooded += 1;
        }
        if !decision.actions.is_empty()
            && let Err(e) = self
                .datapath
                .execute(up.packet, up.key.raw(), &decision.actions)
        {
            self.failed(e);
        }
    }

    /// Deletes flow `key`; one already gone (`ENOENT`: deleted by another tool) is no failure.
    fn delete_flow(&mut self, key: &[u8]) {
        match self.datapath.delete_flows(Some(key)) {
            Err(e) if e.raw_os_error() != Some(libc::ENOENT) => self.failed(e),
            _ => {}
        }
    }

    fn maintain_if_due(&mut self) {
        if self.last_maintenance.elapsed() < MAINTENANCE {
            return;
        }
        self.last_maintenance = Instant::now();
        match self.datapath.info() {
            Ok(info) => self.follow_dispatch(info.user_features),
            Err(e) => self.failed(e),
        }
        match self.datapath.dumped_flows() {
            Ok(flows) => {
                let delete = self.forwarding.flows.sweep(
                    flows.iter().map(|f| (&f.key[..], f.stats.n_packets)),
                    Instant::now(),
                );
                self.counters.flows_expired += delete.len() as u64;
                for key in &delete {
                    self.delete_flow(key);
                }
            }
            Err(e) => self.failed(e),
        }
    }

    /// Registers the upcall socket for the dispatch `user_features` name, if it is not already.
    fn follow_dispatch(&mut self, user_features: u32) {
        self.user_features = user_features;
        let dispatch = if user_features & dp_feature::DISPATCH_UPCALL_PER_CPU != 0 {
            Dispatch::PerCpu
        } else {
            Dispatch::PerVport
        };
        if dispatch == self.dispatch {
            return;
        }
        let registered = match dispatch {
            Dispatch::PerCpu => self.datapath.set_per_cpu_upcalls(user_features),
            Dispatch::PerVport => {
                let ports: Vec<u32> = self.ports.iter().map(|(p, _)| *p).collect();
                ports
                    .into_iter()
                    .try_for_each(|p| self.datapath.set_vport_upcalls(p))
            }
        };
        match registered {
            Ok(()) => {
                self.dispatch = dispatch;
                self.counters.dispatch_changes += 1;
                if self.events.len() < MAX_EVENTS {
                    self.events.push(SwitchEvent::Dispatch {
                        user_features,
                        dispatch,
                    });
                }
            }
            // Retried at the next pass.
            Err(e) => self.failed(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];
    const BROADCAST: [u8; 6] = [0xff; 6];

    fn eth(src: [u8; 6], dst: [u8; 6]) -> OvsKeyEthernet {
        OvsKeyEthernet {
            eth_src: src,
            eth_dst: dst,
        }
    }

    /// (actions, install) of a miss whose key is its addresses.
    fn decide(
        fwd: &mut Forwarding,
        in_port: u32,
        src: [u8; 6],
        dst: [u8; 6],
    ) -> (Vec<Action>, bool) {
        let key = [src, dst].concat();
        let d = fwd.miss(in_port, &eth(src, dst), &key, Instant::now());
        (d.actions, d.install)
    }

    #[test]
    fn broadcasts_flood_with_a_flow_unknown_unicast_floods_without_and_learnt_ones_go_out_one_port()
    {
        let mut fwd = Forwarding::new(vec![1, 2, 3], &SwitchLimits::default());
        let flood_from_1 = vec![Action::Output(2), Action::Output(3)];
        assert_eq!(
            decide(&mut fwd, 1, A, BROADCAST),
            (flood_from_1.clone(), true)
        );
        assert_eq!(fwd.macs.port_of(&A), Some(1), "the source is learnt");
        assert_eq!(
            decide(&mut fwd, 1, A, B),
            (flood_from_1, false),
            "B is not known yet"
        );
        assert_eq!(decide(&mut fwd, 2, B, A), (vec![Action::Output(1)], true));
        assert_eq!(decide(&mut fwd, 1, A, B), (vec![Action::Output(2)], true));
        assert_eq!(
            decide(&mut fwd, 2, A, B),
            (Vec::new(), true),
            "A moved to port 2 and B is there: drop"
        );
        assert_eq!(fwd.macs.port_of(&A), Some(2));
    }

    /// xorshift64*: a reproducible stream of random MACs.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    #[test]
    fn a_flood_of_random_macs_keeps_the_mac_table_and_the_installed_flows_under_their_limits() {
        let limits = SwitchLimits {
            max_macs: 256,
            max_flows: 512,
            ..SwitchLimits::default()
        };
        let mut fwd = Forwarding::new(vec![1, 2, 3], &limits);
        // The datapath's flows as the switch's decisions leave them.
        let mut installed = HashSet::new();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let (mut max_macs, mut max_flows, mut evicted) = (0, 0, 0);
        for i in 0..50_000u32 {
            let mac = |s: &mut u64| {
                let mut m = next(s).to_ne_bytes()[..6].try_into().unwrap_or([0; 6]);
                m[0] &= 0xfe;
                m
            };
            let src = mac(&mut state);
            // Half the frames go to a MAC learnt a moment ago, a quarter are broadcast.
            let dst = match i % 4 {
                0 => BROADCAST,
                1 => mac(&mut state),
                _ => src,
            };
            let in_port = 1 + (next(&mut state) % 3) as u32;
            let key = [&src[..], &dst[..], &in_port.to_ne_bytes()].concat();
            let d = fwd.miss(in_port, &eth(src, dst), &key, Instant::now());
            for k in &d.evict {
                assert!(installed.remove(k), "an evicted flow was installed");
                evicted += 1;
            }
            if d.install {
                installed.insert(key);
            }
            max_macs = max_macs.max(fwd.macs.len());
            max_flows = max_flows.max(installed.len());
            assert_eq!(fwd.flows.len(), installed.len());
        }
        assert_eq!(
            max_macs, limits.max_macs,
            "the table filled up to its limit"
        );
        assert_eq!(
            max_flows, limits.max_flows,
            "the flows filled up to their limit"
        );
        assert!(
            fwd.macs.evicted() > 40_000,
            "{} evicted",
            fwd.macs.evicted()
        );
        assert!(evicted > 20_000, "{evicted} flows evicted");
    }
}
