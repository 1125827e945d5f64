//! A datapath: created with chosen user features and upcall dispatch (and deleted, with everything in
//! it, when its creator drops it), or opened by name or ifindex without taking it over; its stats,
//! vports, flows with their masks and actions, packets executed on it.

use std::collections::BTreeMap;

use crate::IfIndex;
use crate::sys::netlink::{Attributes, Request};
use crate::sys::ovs::{
    OvsDpStats, OvsVportStats, action_attr, cmd, dp_attr, dp_feature, flow_attr, packet_attr,
    packet_cmd, userspace_attr, vport_attr, vport_type,
};

use super::client::{Client, Family, reply_body};
use super::error::OvsError;
use super::flow_dump::{FlowActions, FlowInfo, flow_info};
use super::odp::DpFlow;
use super::upcall::UpcallSocket;

/// How the kernel chooses the socket an upcall goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dispatch {
    /// Each vport names its socket (`OVS_VPORT_ATTR_UPCALL_PID`).
    PerVport,
    /// The CPU that handled the packet picks the socket (`OVS_DP_F_DISPATCH_UPCALL_PER_CPU` and
    /// `OVS_DP_ATTR_PER_CPU_PIDS`, kernel 5.16 and later); zcnet registers one socket for every CPU.
    PerCpu,
}

/// How a datapath is created.
///
/// Start from [`Default`] and set the fields that differ
/// ([configs](crate#configs-and-growing-enums): it is `#[non_exhaustive]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DatapathConfig {
    /// Declare `OVS_DP_F_UNALIGNED`: upcalls carry the packet without a copy into the message.
    pub unaligned: bool,
    /// Upcall dispatch.
    pub dispatch: Dispatch,
}

impl Default for DatapathConfig {
    fn default() -> Self {
        DatapathConfig {
            unaligned: true,
            dispatch: Dispatch::PerVport,
        }
    }
}

impl DatapathConfig {
    /// The `OVS_DP_F_*` bits this configuration asks for.
    pub fn user_features(&self) -> u32 {
        let mut f = 0;
        if self.unaligned {
            f |= dp_feature::UNALIGNED;
        }
        if self.dispatch == Dispatch::PerCpu {
            f |= dp_feature::DISPATCH_UPCALL_PER_CPU;
        }
        f
    }
}

/// A datapath as `OVS_DP_CMD_GET` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatapathInfo {
    /// Name of its internal device.
    pub name: String,
    /// Ifindex of its internal device.
    pub ifindex: IfIndex,
    /// Hit, missed, lost and flow counts.
    pub stats: OvsDpStats,
    /// `OVS_DP_F_*` bits in effect.
    pub user_features: u32,
    /// Mask lookups and masks in use, from `OVS_DP_ATTR_MEGAFLOW_STATS`.
    pub masks: Option<MaskStats>,
}

/// A datapath's megaflow mask counters ([`DatapathInfo::masks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MaskStats {
    /// Masks looked up to find packets' flows (`n_mask_hit`).
    pub hits: u64,
    /// Masks in use (`n_masks`).
    pub masks: u32,
}

/// A vport as `OVS_VPORT_CMD_GET` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VportInfo {
    /// Port number in the datapath (0 is the datapath's own internal port).
    pub port_no: u32,
    /// Device name.
    pub name: String,
    /// `OVS_VPORT_TYPE_*`.
    pub kind: u32,
    /// Packet and byte counters.
    pub stats: OvsVportStats,
}

/// Milliseconds of `CLOCK_MONOTONIC` now, the clock of [`super::FlowInfo::used_ms`].
#[cfg(feature = "bench-internals")]
pub fn monotonic_ms() -> u64 {
    crate::sys::socket::monotonic_time().map_or(0, |d| d.as_millis() as u64)
}

/// What to do with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Send it out of a port.
    Output(u32),
    /// Send it to user space as an ACTION upcall to `port_id`, with `cookie` as its userdata.
    Userspace {
        /// Netlink port id of the receiving socket.
        port_id: u32,
        /// Returned in the upcall's `OVS_PACKET_ATTR_USERDATA`.
        cookie: u64,
    },
}

fn put_actions(req: &mut Request, ty: u16, actions: &[Action]) {
    req.nested(ty, |req| {
        for action in actions {
            match *action {
                Action::Output(port) => {
                    req.u32(action_attr::OUTPUT, port);
                }
                Action::Userspace { port_id, cookie } => {
                    req.nested(action_attr::USERSPACE, |req| {
                        req.u32(userspace_attr::PID, port_id);
                        req.attr(userspace_attr::USERDATA, &cookie.to_ne_bytes());
                    });
                }
            }
        }
    });
}

fn string_of(p: &[u8]) -> String {
    String::from_utf8_lossy(p.split(|b| *b == 0).next().unwrap_or(&[])).into_owned()
}

fn u32_of(p: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(p.try_into().ok()?))
}

fn datapath_info(reply: &crate::sys::netlink::Reply) -> Option<DatapathInfo> {
    let (header, attrs) = reply_body(reply)?;
    let mut info = DatapathInfo {
        name: String::new(),
        ifindex: IfIndex::from_ovs(header.dp_ifindex),
        stats: OvsDpStats::default(),
        user_features: 0,
        masks: None,
    };
    for (ty, p) in Attributes::new(attrs).map_while(Result::ok) {
        match ty {
            dp_attr::MEGAFLOW_STATS if p.len() >= 12 => {
                let hit = u64::from_ne_bytes(p[..8].try_into().ok()?);
                info.masks = Some(MaskStats {
                    hits: hit,
                    masks: u32_of(&p[8..12])?,
                });
            }
            dp_attr::NAME => info.name = string_of(p),
            dp_attr::STATS => info.stats = OvsDpStats::read(p)?,
            dp_attr::USER_FEATURES => info.user_features = u32_of(p)?,
            _ => {}
        }
    }
    Some(info)
}

fn vport_info(reply: &crate::sys::netlink::Reply) -> Option<VportInfo> {
    let (_, attrs) = reply_body(reply)?;
    let mut info = VportInfo {
        port_no: u32::MAX,
        name: String::new(),
        kind: 0,
        stats: OvsVportStats::default(),
    };
    for (ty, p) in Attributes::new(attrs).map_while(Result::ok) {
        match ty {
            vport_attr::PORT_NO => info.port_no = u32_of(p)?,
            vport_attr::NAME => info.name = string_of(p),
            vport_attr::TYPE => info.kind = u32_of(p)?,
            vport_attr::STATS => info.stats = OvsVportStats::read(p)?,
            _ => {}
        }
    }
    (info.port_no != u32::MAX).then_some(info)
}

/// Every datapath of this network namespace.
pub fn datapaths() -> Result<Vec<DatapathInfo>, OvsError> {
    let mut client = Client::open()?;
    list(&mut client)
}

fn list(client: &mut Client) -> Result<Vec<DatapathInfo>, OvsError> {
    let req = client.request(Family::Datapath, libc::NLM_F_DUMP as u16, cmd::GET, 0);
    let replies = client.send(req, "OVS_DP_CMD_GET dump")?;
    Ok(replies.iter().filter_map(datapath_info).collect())
}

/// Sets the user features of the datapath whose internal device has `ifindex`, from a client of its
/// own, as another tool opening the datapath does (`ovs-dpctl` turns on
/// `OVS_DP_F_DISPATCH_UPCALL_PER_CPU` without naming per-CPU sockets). Needs CAP_NET_ADMIN.
pub fn set_user_features(ifindex: IfIndex, user_features: u32) -> Result<(), OvsError> {
    let mut client = Client::open()?;
    let mut req = client.request(Family::Datapath, 0, cmd::SET, ifindex.to_ovs());
    req.u32(dp_attr::USER_FEATURES, user_features);
    client.send(req, "OVS_DP_CMD_SET user features").map(drop)
}

/// `OVS_DP_ATTR_PER_CPU_PIDS` naming `port` for every CPU this process may run on (the kernel sends
/// the upcalls of a CPU beyond the list to the pid at its index modulo the list's length).
fn per_cpu_pids(port: u32) -> Vec<u8> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (0..cpus).flat_map(|_| port.to_ne_bytes()).collect()
}

/// A datapath this process created — dropping it deletes it, and with it every vport and flow — or
/// one it opened, which dropping leaves alone.
#[derive(Debug)]
pub struct Datapath {
    client: Client,
    name: String,
    ifindex: i32,
    /// Netlink port id the vports it adds send upcalls to (0 for an opened datapath: no upcalls).
    upcall_port: u32,
    /// Delete it on drop.
    owned: bool,
}

fn invalid(call: &'static str, what: &'static str) -> OvsError {
    OvsError::new(
        call,
        std::io::Error::new(std::io::ErrorKind::InvalidData, what),
    )
}

impl Datapath {
    /// Creates datapath `name` (at most 15 bytes: it names a network device; a `%d` in it becomes
    /// the first free number, and [`Datapath::name`] says which) whose upcalls go to `upcalls`.
    /// Needs CAP_NET_ADMIN.
    pub fn create(
        name: &str,
        config: DatapathConfig,
        upcalls: &UpcallSocket,
    ) -> Result<Datapath, OvsError> {
        let mut client = Client::open()?;
        let port = upcalls.port_id();
        let flags = (libc::NLM_F_CREATE | libc::NLM_F_EXCL | libc::NLM_F_ECHO) as u16;
        let mut req = client.request(Family::Datapath, flags, cmd::NEW, 0);
        req.string(dp_attr::NAME, name)
            .u32(dp_attr::UPCALL_PID, port)
            .u32(dp_attr::USER_FEATURES, config.user_features());
        if config.dispatch == Dispatch::PerCpu {
            req.attr(dp_attr::PER_CPU_PIDS, &per_cpu_pids(port));
        }
        let replies = client.send(req, "OVS_DP_CMD_NEW")?;
        let info = replies.iter().find_map(datapath_info).ok_or_else(|| {
            OvsError::new(
                "OVS_DP_CMD_NEW",
                std::io::Error::new(std::io::ErrorKind::InvalidData, "no reply with ifindex"),
            )
        })?;
        // The name the kernel gave its device: a `%d` in `name` is replaced by a number, as for
        // any network device.
        let name = if info.name.is_empty() {
            name.to_string()
        } else {
            info.name
        };
        Ok(Datapath {
            client,
            name,
            ifindex: info.ifindex.to_ovs(),
            upcall_port: port,
            owned: true,
        })
    }

    /// Opens the existing datapath `name` (made by zcnet, `ovs-dpctl` or ovs-vswitchd) without taking
    /// it over: dropping the handle leaves it, [`Datapath::delete`] deletes it. Reading works for
    /// every user; changing flows or ports needs CAP_NET_ADMIN. `ENODEV`: no datapath of that name.
    pub fn open(name: &str) -> Result<Datapath, OvsError> {
        let client = Client::open()?;
        let mut req = client.request(Family::Datapath, 0, cmd::GET, 0);
        req.string(dp_attr::NAME, name);
        Self::opened(client, req)
    }

    /// Opens the existing datapath whose internal device has `ifindex` (see [`Datapath::open`]).
    /// `ENODEV` ([`super::OvsErrorKind::DatapathGone`]): no datapath has that ifindex (any more).
    pub fn open_ifindex(ifindex: IfIndex) -> Result<Datapath, OvsError> {
        let client = Client::open()?;
        let req = client.request(Family::Datapath, 0, cmd::GET, ifindex.to_ovs());
        Self::opened(client, req).map_err(|e| e.gone_if_enodev(&format!("of ifindex {ifindex}")))
    }

    fn opened(mut client: Client, req: Request) -> Result<Datapath, OvsError> {
        let replies = client.send(req, "OVS_DP_CMD_GET")?;
        let info = replies
            .iter()
            .find_map(datapath_info)
            .ok_or_else(|| invalid("OVS_DP_CMD_GET", "no datapath in reply"))?;
        Ok(Datapath {
            client,
            name: info.name,
            ifindex: info.ifindex.to_ovs(),
            upcall_port: 0,
            owned: false,
        })
    }

    /// The datapath's name (that of its internal device).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The ifindex of its internal device.
    pub fn ifindex(&self) -> IfIndex {
        IfIndex::from_ovs(self.ifindex)
    }

    /// Its current description: stats and the user features in effect.
    /// [`super::OvsErrorKind::DatapathGone`] once the datapath is deleted.
    pub fn info(&mut self) -> Result<DatapathInfo, OvsError> {
        let req = self
            .client
            .request(Family::Datapath, 0, cmd::GET, self.ifindex);
        let replies = self.send_on_datapath(req, "OVS_DP_CMD_GET")?;
        replies.iter().find_map(datapath_info).ok_or_else(|| {
            OvsError::new(
                "OVS_DP_CMD_GET",
                std::io::Error::new(std::io::ErrorKind::InvalidData, "no datapath in reply"),
            )
        })
    }

    /// Adds network device `device` as a vport whose upcalls go to this datapath's upcall socket;
    /// returns its port number. The device stops delivering to the host's stack while it is a port.
    pub fn add_netdev(&mut self, device: &str) -> Result<u32, OvsError> {
        let flags = (libc::NLM_F_CREATE | libc::NLM_F_EXCL | libc::NLM_F_ECHO) as u16;
        let mut req = self
            .client
            .request(Family::Vport, flags, cmd::NEW, self.ifindex);
        req.string(vport_attr::NAME, device)
            .u32(vport_attr::TYPE, vport_type::NETDEV)
            .u32(vport_attr::UPCALL_PID, self.upcall_port);
        let replies = self.client.send(req, "OVS_VPORT_CMD_NEW")?;
        replies
            .iter()
            .find_map(vport_info)
            .map(|v| v.port_no)
            .ok_or_else(|| {
                OvsError::new(
                    "OVS_VPORT_CMD_NEW",
                    std::io::Error::new(std::io::ErrorKind::InvalidData, "no port number in reply"),
                )
            })
    }

    /// Removes vport `port_no`; its device returns to the host's stack.
    pub fn remove_vport(&mut self, port_no: u32) -> Result<(), OvsError> {
        let mut req = self
            .client
            .request(Family::Vport, 0, cmd::DEL, self.ifindex);
        req.u32(vport_attr::PORT_NO, port_no);
        self.client.send(req, "OVS_VPORT_CMD_DEL").map(drop)
    }

    /// Every vport with its counters. [`super::OvsErrorKind::DatapathGone`] once the datapath is
    /// deleted (the kernel ends the dump with `ENODEV`), never an empty list.
    pub fn vports(&mut self) -> Result<Vec<VportInfo>, OvsError> {
        let req = self.client.request(
            Family::Vport,
            libc::NLM_F_DUMP as u16,
            cmd::GET,
            self.ifindex,
        );
        let replies = self.send_on_datapath(req, "OVS_VPORT_CMD_GET dump")?;
        Ok(replies.iter().filter_map(vport_info).collect())
    }

    /// Installs (or updates) the flow `key` — the nested key attributes of an upcall — as an exact
    /// match (no mask) with `actions`; an empty list drops matching packets.
    pub fn install_flow(&mut self, key: &[u8], actions: &[Action]) -> Result<(), OvsError> {
        // Without NLM_F_CREATE (and NLM_F_EXCL) the kernel creates the flow or, when an upcall queued
        // before the first install asks again, replaces its actions instead of failing with EEXIST.
        let mut req = self.client.request(Family::Flow, 0, cmd::NEW, self.ifindex);
        req.attr(flow_attr::KEY | crate::sys::netlink::NLA_F_NESTED, key);
        put_actions(&mut req, flow_attr::ACTIONS, actions);
        self.client.send(req, "OVS_FLOW_CMD_NEW").map(drop)
    }

    /// Deletes the flow `key`, or every flow when `key` is `None`.
    pub fn delete_flows(&mut self, key: Option<&[u8]>) -> Result<(), OvsError> {
        let mut req = self.client.request(Family::Flow, 0, cmd::DEL, self.ifindex);
        if let Some(key) = key {
            req.attr(flow_attr::KEY | crate::sys::netlink::NLA_F_NESTED, key);
        }
        self.client.send(req, "OVS_FLOW_CMD_DEL").map(drop)
    }

    /// Every installed flow with its mask, actions and counters. A flow whose actions the dump left
    /// out (too long for its message: see [`FlowActions`]) is read again on its own
    /// (`OVS_FLOW_CMD_GET` by UFID or key): [`FlowActions::Refetched`], or
    /// [`FlowActions::Unknown`] with that request's error when it fails (the flow deleted since the
    /// dump). [`super::OvsErrorKind::DatapathGone`] once the datapath is deleted (the kernel ends the
    /// dump with `ENODEV`), never an empty list.
    pub fn flows(&mut self) -> Result<Vec<FlowInfo>, OvsError> {
        let mut flows = self.dumped_flows()?;
        for flow in flows.iter_mut() {
            if let FlowActions::Unknown(left_out) = &flow.actions {
                flow.actions = match self.flow_actions(flow) {
                    Ok(actions) => FlowActions::Refetched(actions),
                    Err(e) => FlowActions::Unknown(format!("{left_out}; read again: {e}")),
                };
            }
        }
        Ok(flows)
    }

    /// The flows as the dump gives them, with the actions it left out unknown.
    pub(crate) fn dumped_flows(&mut self) -> Result<Vec<FlowInfo>, OvsError> {
        let req = self.client.request(
            Family::Flow,
            libc::NLM_F_DUMP as u16,
            cmd::GET,
            self.ifindex,
        );
        let replies = self.send_on_datapath(req, "OVS_FLOW_CMD_GET dump")?;
        Ok(replies.iter().filter_map(flow_info).collect())
    }

    /// The actions of the dumped `flow`, read by `OVS_FLOW_CMD_GET` of that flow alone: by the
    /// UFID the dump named it by, else by the unmasked key it gave.
    fn flow_actions(&mut self, flow: &FlowInfo) -> Result<Vec<u8>, OvsError> {
        let req = self.request_for_flow(cmd::GET, flow);
        let replies = self.send_on_datapath(req, "OVS_FLOW_CMD_GET")?;
        replies
            .iter()
            .filter_map(flow_info)
            .find_map(|f| f.actions.bytes().map(<[u8]>::to_vec))
            .ok_or_else(|| invalid("OVS_FLOW_CMD_GET", "no actions in the reply"))
    }

    /// A flow request `command` naming the dumped `flow` as the dump did: by its UFID when it has
    /// one, else by its key.
    fn request_for_flow(&self, command: u8, flow: &FlowInfo) -> Request {
        let mut req = self.client.request(Family::Flow, 0, command, self.ifindex);
        match &flow.ufid {
            Some(ufid) => req.attr(flow_attr::UFID, ufid),
            None => req.attr(
                flow_attr::KEY | crate::sys::netlink::NLA_F_NESTED,
                &flow.key,
            ),
        };
        req
    }

    /// Sends a request whose only device is this datapath: `ENODEV` means it is gone.
    fn send_on_datapath(
        &mut self,
        req: Request,
        call: &'static str,
    ) -> Result<Vec<crate::sys::netlink::Reply>, OvsError> {
        self.client
            .send(req, call)
            .map_err(|e| e.gone_if_enodev(&self.name))
    }

    /// Installs `flow` (key, mask and actions as given; an existing flow of that match gets the
    /// new actions). The key is masked first, as the kernel keeps it, so that the key a dump prints
    /// deletes the flow again.
    pub fn install(&mut self, flow: &DpFlow) -> Result<(), OvsError> {
        let mut req = self.client.request(Family::Flow, 0, cmd::NEW, self.ifindex);
        req.attr(
            flow_attr::KEY | crate::sys::netlink::NLA_F_NESTED,
            &flow.key,
        );
        if let Some(mask) = &flow.mask {
            req.attr(flow_attr::MASK | crate::sys::netlink::NLA_F_NESTED, mask);
        }
        req.attr(
            flow_attr::ACTIONS | crate::sys::netlink::NLA_F_NESTED,
            &flow.actions,
        );
        self.client.send(req, "OVS_FLOW_CMD_NEW").map(drop)
    }

    /// Deletes the installed flow whose match prints as `flow`'s does (as `ovs-dpctl dump-flows`
    /// shows it): by its UFID when it was installed with one, else by its key. The kernel finds a
    /// flow by key only through the key it was installed with, which for a flow installed unmasked
    /// by another tool differs from the masked key a dump shows; the UFID avoids that.
    /// `ENOENT` when no flow matches.
    pub fn remove(&mut self, flow: &DpFlow) -> Result<(), OvsError> {
        let want = flow.key_text();
        let found = self
            .dumped_flows()?
            .into_iter()
            .find(|f| f.key_text() == want)
            .ok_or_else(|| {
                OvsError::new(
                    "OVS_FLOW_CMD_DEL",
                    std::io::Error::from_raw_os_error(libc::ENOENT),
                )
            })?;
        let req = self.request_for_flow(cmd::DEL, &found);
        self.client.send(req, "OVS_FLOW_CMD_DEL").map(drop)
    }

    /// Applies `actions` to `packet` (`OVS_PACKET_CMD_EXECUTE`) with the metadata of `key` (an upcall's
    /// key: in_port and the rest). The packet bytes go to the kernel straight from the caller's memory
    /// — an upcall's borrowed buffer — without a copy into the request.
    pub fn execute(
        &mut self,
        packet: &[u8],
        key: &[u8],
        actions: &[Action],
    ) -> Result<(), OvsError> {
        let mut req = self
            .client
            .request(Family::Packet, 0, packet_cmd::EXECUTE, self.ifindex);
        req.attr(packet_attr::KEY | crate::sys::netlink::NLA_F_NESTED, key);
        put_actions(&mut req, packet_attr::ACTIONS, actions);
        self.client
            .send_with_trailer(req, packet_attr::PACKET, packet, "OVS_PACKET_CMD_EXECUTE")
    }

    /// The datapath's local port, brought up, to send frames into the datapath (they arrive as
    /// received on port 0, `OVSP_LOCAL`).
    pub fn local_port(&self) -> Result<super::LocalPort, OvsError> {
        super::LocalPort::open(&self.name, self.ifindex)
    }

    /// Points per-CPU upcalls at this datapath's upcall socket (`OVS_DP_CMD_SET` with
    /// `OVS_DP_ATTR_PER_CPU_PIDS`), keeping `user_features`: the kernel sets the user features to
    /// exactly what a SET carries (none when it carries none) and takes the pids only when
    /// `OVS_DP_F_DISPATCH_UPCALL_PER_CPU` is among them.
    pub fn set_per_cpu_upcalls(&mut self, user_features: u32) -> Result<(), OvsError> {
        let mut req = self
            .client
            .request(Family::Datapath, 0, cmd::SET, self.ifindex);
        req.u32(dp_attr::USER_FEATURES, user_features)
            .attr(dp_attr::PER_CPU_PIDS, &per_cpu_pids(self.upcall_port));
        self.client
            .send(req, "OVS_DP_CMD_SET per-CPU pids")
            .map(drop)
    }

    /// Points the upcalls of vport `port_no` at this datapath's upcall socket (`OVS_VPORT_CMD_SET`
    /// with `OVS_VPORT_ATTR_UPCALL_PID`: used while per-CPU dispatch is off).
    pub fn set_vport_upcalls(&mut self, port_no: u32) -> Result<(), OvsError> {
        let mut req = self
            .client
            .request(Family::Vport, 0, cmd::SET, self.ifindex);
        req.u32(vport_attr::PORT_NO, port_no)
            .u32(vport_attr::UPCALL_PID, self.upcall_port);
        self.client
            .send(req, "OVS_VPORT_CMD_SET upcall pid")
            .map(drop)
    }

    fn delete_now(&mut self) -> Result<(), OvsError> {
        let req = self
            .client
            .request(Family::Datapath, 0, cmd::DEL, self.ifindex);
        self.client.send(req, "OVS_DP_CMD_DEL").map(drop)
    }

    /// Deletes the datapath now, with its vports and flows (dropping a datapath this process created
    /// does the same, ignoring errors; dropping an opened one does not).
    pub fn delete(mut self) -> Result<(), OvsError> {
        let result = self.delete_now();
        self.ifindex = 0;
        result
    }
}

impl Drop for Datapath {
    fn drop(&mut self) {
        if self.owned && self.ifindex != 0 {
            let _ = self.delete_now();
        }
    }
}

/// Deletes the datapaths named `<prefix><pid>…` whose pid is no longer running (no `/proc/<pid>`: left
/// by a killed run); returns their names.
pub fn remove_stale(prefix: &str) -> Result<Vec<String>, OvsError> {
    let mut client = Client::open()?;
    let mut removed = Vec::new();
    let by_name: BTreeMap<String, IfIndex> = list(&mut client)?
        .into_iter()
        .map(|d| (d.name, d.ifindex))
        .collect();
    for (name, ifindex) in by_name {
        let Some(pid) = stale_pid(&name, prefix) else {
            continue;
        };
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let req = client.request(Family::Datapath, 0, cmd::DEL, ifindex.to_ovs());
        if client.send(req, "OVS_DP_CMD_DEL").is_ok() {
            removed.push(name);
        }
    }
    Ok(removed)
}

/// The pid in a name `<prefix><digits>…`, if it has that shape.
fn stale_pid(name: &str, prefix: &str) -> Option<i32> {
    let rest = name.strip_prefix(prefix)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_dead_runs_parse_to_their_pid() {
        assert_eq!(stale_pid("zc4242-sw", "zc"), Some(4242));
        assert_eq!(stale_pid("zc17", "zc"), Some(17));
        assert_eq!(stale_pid("zcx1", "zc"), None);
        assert_eq!(stale_pid("ovs-system", "zc"), None);
    }

    #[test]
    fn actions_nest_as_the_header_describes() {
        let mut req = Request::new(0x20, 0, cmd::NEW, 1);
        put_actions(
            &mut req,
            flow_attr::ACTIONS,
            &[
                Action::Output(3),
                Action::Userspace {
                    port_id: 77,
                    cookie: 9,
                },
            ],
        );
        let msg = req.finish(1).unwrap();
        let body = &msg[crate::sys::netlink::NLMSG_HDRLEN + crate::sys::netlink::GENL_HDRLEN..];
        let attrs: Vec<_> = Attributes::new(body).map(Result::unwrap).collect();
        assert_eq!(attrs.len(), 1);
        assert_eq!(attrs[0].0, flow_attr::ACTIONS);
        assert_eq!(
            u16::from_ne_bytes([body[2], body[3]]) & crate::sys::netlink::NLA_F_NESTED,
            crate::sys::netlink::NLA_F_NESTED
        );
        let actions: Vec<_> = Attributes::new(attrs[0].1).map(Result::unwrap).collect();
        assert_eq!(actions[0], (action_attr::OUTPUT, &3u32.to_ne_bytes()[..]));
        assert_eq!(actions[1].0, action_attr::USERSPACE);
        let user: Vec<_> = Attributes::new(actions[1].1).map(Result::unwrap).collect();
        assert_eq!(user[0], (userspace_attr::PID, &77u32.to_ne_bytes()[..]));
        assert_eq!(user[1], (userspace_attr::USERDATA, &9u64.to_ne_bytes()[..]));
    }

    #[test]
    fn features_follow_the_configuration() {
        let c = DatapathConfig {
            unaligned: true,
            dispatch: Dispatch::PerCpu,
        };
        assert_eq!(
            c.user_features(),
            dp_feature::UNALIGNED | dp_feature::DISPATCH_UPCALL_PER_CPU
        );
        assert_eq!(
            DatapathConfig {
                unaligned: false,
                dispatch: Dispatch::PerVport
            }
            .user_features(),
            0
        );
    }
}
