//! An L2 learning switch on the kernel datapath: every miss upcall teaches the source MAC's port,
//! installs an exact-match flow built from the upcall's key (so the flow's later packets stay in the
//! kernel) and executes the packet; unknown unicast destinations are flooded without a flow, so that
//! the flow is installed once the destination has been learnt.

use std::collections::HashMap;
use std::time::Duration;

use super::datapath::{Action, Datapath, DatapathConfig};
use super::error::OvsError;
use super::upcall::{Received, Upcall, UpcallCounters, UpcallKind, UpcallSocket};

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
    if eth.eth_src[0] & 1 == 0 {
        macs.insert(eth.eth_src, in_port);
    }
    let flood: Vec<Action> = ports
        .iter()
        .filter(|(p, _)| *p != in_port)
        .map(|(p, _)| Action::Output(*p))
        .collect();
    let (actions, install) = if eth.eth_dst[0] & 1 != 0 {
        (flood, true)
    } else {
        match macs.get(&eth.eth_dst) {
            Some(&port) if port == in_port => (Vec::new(), true),
            Some(&port) => (vec![Action::Output(port)], true),
            None => (flood, false),
        }
    };
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
