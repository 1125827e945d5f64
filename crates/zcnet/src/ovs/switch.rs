//! An L2 learning switch on the kernel datapath: every miss upcall teaches the source MAC's port,
//! installs an exact-match flow built from the upcall's key (so the flow's later packets stay in the
//! kernel) and executes the packet; unknown unicast destinations are flooded without a flow, so that
//! the flow is installed once the destination has been learnt.

use std::collections::HashMap;
use std::time::Duration;

use super::datapath::{Action, Datapath, DatapathConfig};
use super::error::OvsError;
use super::upcall::{Received, Upcall, UpcallCounters, UpcallKind, UpcallSocket};
use crate::sys::ovs::OvsKeyEthernet;

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
}

/// A learning switch owning its datapath (deleted on drop) and upcall socket.
#[derive(Debug)]
pub struct LearningSwitch {
    datapath: Datapath,
    upcalls: UpcallSocket,
    ports: Vec<(u32, String)>,
    macs: HashMap<[u8; 6], u32>,
    counters: SwitchCounters,
}

impl LearningSwitch {
    /// Creates datapath `name` with `config` and adds each of `devices` as a port.
    pub fn new(
        name: &str,
        config: DatapathConfig,
        devices: &[&str],
    ) -> Result<LearningSwitch, OvsError> {
        let upcalls = UpcallSocket::open()?;
        let mut datapath = Datapath::create(name, config, &upcalls)?;
        let mut ports = Vec::new();
        for device in devices {
            ports.push((datapath.add_netdev(device)?, device.to_string()));
        }
        Ok(LearningSwitch {
            datapath,
            upcalls,
            ports,
            macs: HashMap::new(),
            counters: SwitchCounters::default(),
        })
    }

    /// The datapath, for stats, flow dumps and deletion.
    pub fn datapath(&mut self) -> &mut Datapath {
        &mut self.datapath
    }

    /// The ports: (port number, device).
    pub fn ports(&self) -> &[(u32, String)] {
        &self.ports
    }

    /// The upcall socket (to size its queue).
    pub fn upcall_socket(&self) -> &UpcallSocket {
        &self.upcalls
    }

    /// What the switch did so far.
    pub fn counters(&self) -> SwitchCounters {
        self.counters
    }

    /// What the upcall socket received so far (overflows included).
    pub fn upcall_counters(&self) -> UpcallCounters {
        self.upcalls.counters()
    }

    /// Waits up to `timeout` for upcalls, then handles every queued one; `inspect` sees each upcall
    /// before it is handled. Returns how many upcalls were handled.
    pub fn serve(
        &mut self,
        timeout: Duration,
        mut inspect: impl FnMut(&Upcall<'_>),
    ) -> Result<usize, OvsError> {
        if !self.upcalls.wait(timeout)? {
            return Ok(0);
        }
        let mut handled = 0;
        loop {
            let up = match self.upcalls.recv()? {
                None => return Ok(handled),
                Some(Received::Upcall(up)) => up,
                Some(Received::Overflow | Received::Rejected(_)) => continue,
            };
            inspect(&up);
            handle(
                &mut self.datapath,
                &self.ports,
                &mut self.macs,
                &mut self.counters,
                &up,
            )?;
            handled += 1;
        }
    }
}

/// What the switch does with a miss: the actions, and whether to install them as the flow's.
fn decide(
    in_port: u32,
    eth: &OvsKeyEthernet,
    ports: &[(u32, String)],
    macs: &mut HashMap<[u8; 6], u32>,
) -> (Vec<Action>, bool) {
    if eth.eth_src[0] & 1 == 0 {
        macs.insert(eth.eth_src, in_port);
    }
    let flood = || {
        ports
            .iter()
            .filter(|(p, _)| *p != in_port)
            .map(|(p, _)| Action::Output(*p))
            .collect()
    };
    if eth.eth_dst[0] & 1 != 0 {
        return (flood(), true);
    }
    match macs.get(&eth.eth_dst) {
        // Learnt on the port it came in on: the destination is on that segment, drop.
        Some(&port) if port == in_port => (Vec::new(), true),
        Some(&port) => (vec![Action::Output(port)], true),
        // Unknown unicast: flood without a flow, so that the flow is installed once learnt.
        None => (flood(), false),
    }
}

fn handle(
    datapath: &mut Datapath,
    ports: &[(u32, String)],
    macs: &mut HashMap<[u8; 6], u32>,
    counters: &mut SwitchCounters,
    up: &Upcall<'_>,
) -> Result<(), OvsError> {
    let (Some(in_port), Some(eth), UpcallKind::Miss) = (up.key.in_port, up.key.ethernet, up.kind)
    else {
        counters.ignored += 1;
        return Ok(());
    };
    counters.misses += 1;
    let (actions, install) = decide(in_port, &eth, ports, macs);
    if install {
        datapath.install_flow(up.key.raw(), &actions)?;
        counters.flows_installed += 1;
    } else {
        counters.flooded += 1;
    }
    if !actions.is_empty() {
        datapath.execute(up.packet, up.key.raw(), &actions)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn broadcasts_flood_with_a_flow_unknown_unicast_floods_without_and_learnt_ones_go_out_one_port()
    {
        let ports = vec![
            (1, "a".to_string()),
            (2, "b".to_string()),
            (3, "c".to_string()),
        ];
        let mut macs = HashMap::new();
        let flood_from_1 = vec![Action::Output(2), Action::Output(3)];
        assert_eq!(
            decide(1, &eth(A, BROADCAST), &ports, &mut macs),
            (flood_from_1.clone(), true)
        );
        assert_eq!(macs.get(&A), Some(&1), "the source is learnt");
        assert_eq!(
            decide(1, &eth(A, B), &ports, &mut macs),
            (flood_from_1, false),
            "B is not known yet"
        );
        assert_eq!(
            decide(2, &eth(B, A), &ports, &mut macs),
            (vec![Action::Output(1)], true)
        );
        assert_eq!(
            decide(1, &eth(A, B), &ports, &mut macs),
            (vec![Action::Output(2)], true)
        );
        assert_eq!(
            decide(2, &eth(A, B), &ports, &mut macs),
            (Vec::new(), true),
            "A moved to port 2 and B is there: drop"
        );
        assert_eq!(macs.get(&A), Some(&2));
    }
}
