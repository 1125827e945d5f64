//! ethtool: the `ethtool` generic netlink family (channels, rings, RSS read) and the `SIOCETHTOOL`
//! ioctl for what netlink lacks on the kernels zcnet supports (setting the RSS indirection table,
//! ntuple rules).
//!
//! Values from include/uapi/linux/ethtool_netlink_generated.h (message and attribute numbers) and
//! include/uapi/linux/ethtool.h (ioctl commands, `struct ethtool_rxnfc`, `struct ethtool_rxfh_indir`).

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, OwnedFd};

use super::netlink::{GenlSocket, Request, attributes};

/// `ETHTOOL_FAMILY_NAME`.
const ETHTOOL_FAMILY_NAME: &str = "ethtool";
/// `ETHTOOL_MSG_RINGS_GET` / `_SET`.
const MSG_RINGS_GET: u8 = 15;
const MSG_RINGS_SET: u8 = 16;
/// `ETHTOOL_MSG_CHANNELS_GET` / `_SET`.
const MSG_CHANNELS_GET: u8 = 17;
const MSG_CHANNELS_SET: u8 = 18;
/// `ETHTOOL_MSG_RSS_GET` (Linux 6.7).
const MSG_RSS_GET: u8 = 38;

/// `ETHTOOL_A_*_HEADER`: the request header nest (attribute 1 of every message).
const A_HEADER: u16 = 1;
/// `ETHTOOL_A_HEADER_DEV_INDEX` (u32).
const A_HEADER_DEV_INDEX: u16 = 1;

/// `ETHTOOL_A_CHANNELS_*`.
mod channels_attr {
    pub const RX_MAX: u16 = 2;
    pub const TX_MAX: u16 = 3;
    pub const OTHER_MAX: u16 = 4;
    pub const COMBINED_MAX: u16 = 5;
    pub const RX_COUNT: u16 = 6;
    pub const TX_COUNT: u16 = 7;
    pub const OTHER_COUNT: u16 = 8;
    pub const COMBINED_COUNT: u16 = 9;
}

/// `ETHTOOL_A_RINGS_*`.
mod rings_attr {
    pub const RX: u16 = 6;
    pub const TCP_DATA_SPLIT: u16 = 11;
    pub const HDS_THRESH: u16 = 17;
    pub const HDS_THRESH_MAX: u16 = 18;
}

/// `ETHTOOL_A_RSS_INDIR` (binary: an array of u32 queue numbers).
const A_RSS_INDIR: u16 = 4;

/// `enum ethtool_tcp_data_split`.
pub mod tcp_data_split {
    /// `ETHTOOL_TCP_DATA_SPLIT_UNKNOWN`: the driver does not report it (no header split).
    pub const UNKNOWN: u8 = 0;
    /// `ETHTOOL_TCP_DATA_SPLIT_DISABLED`.
    pub const DISABLED: u8 = 1;
    /// `ETHTOOL_TCP_DATA_SPLIT_ENABLED`.
    pub const ENABLED: u8 = 2;
}

/// A device's channel counts and maxima (`ETHTOOL_MSG_CHANNELS_GET_REPLY`); an attribute the driver
/// does not report reads as 0, as ethtool prints it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Channels {
    /// Maxima: rx, tx, other, combined.
    pub max: [u32; 4],
    /// Counts: rx, tx, other, combined.
    pub count: [u32; 4],
}

/// The counts that a `CHANNELS_SET` changes: `None` leaves a count as it is.
pub type ChannelCounts = [Option<u32>; 4];

/// The ring parameters zcnet reads and sets (`ETHTOOL_MSG_RINGS_GET_REPLY`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rings {
    /// RX ring size (`rx`).
    pub rx: u32,
    /// `tcp-data-split` ([`tcp_data_split`]); `UNKNOWN` when the driver does not report it.
    pub tcp_data_split: u8,
    /// `hds-thresh` and its maximum; `None` when the driver does not report them (the kernel sends
    /// both only when the maximum is not 0).
    pub hds_thresh: Option<(u32, u32)>,
}

fn u32_of(p: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(p.get(..4)?.try_into().ok()?))
}

/// An ethtool netlink socket with the family resolved.
#[derive(Debug)]
pub struct EthtoolNl {
    sock: GenlSocket,
    family: u16,
}

impl EthtoolNl {
    /// Opens a socket and resolves the `ethtool` family (`ENOENT`: a kernel before 5.6, or built
    /// without `CONFIG_ETHTOOL_NETLINK`).
    pub fn open() -> io::Result<EthtoolNl> {
        let mut sock = GenlSocket::open()?;
        let family = sock.family_id(ETHTOOL_FAMILY_NAME)?;
        Ok(EthtoolNl { sock, family })
    }

    fn request(&self, cmd: u8, ifindex: u32) -> Request {
        let mut req = Request::new(self.family, 0, cmd, 1);
        req.nested(A_HEADER, |r| {
            r.u32(A_HEADER_DEV_INDEX, ifindex);
        });
        req
    }

    /// The one reply's attributes of a GET request.
    fn get(&mut self, cmd: u8, ifindex: u32) -> io::Result<Vec<(u16, Vec<u8>)>> {
        let req = self.request(cmd, ifindex);
        let replies = self.sock.request(req)?;
        let reply = replies
            .first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no ethtool reply"))?;
        Ok(attributes(&reply.payload)
            .map(|(ty, p)| (ty, p.to_vec()))
            .collect())
    }

    /// `ETHTOOL_MSG_CHANNELS_GET`.
    pub fn channels(&mut self, ifindex: u32) -> io::Result<Channels> {
        use channels_attr::*;
        let mut ch = Channels::default();
        for (ty, p) in self.get(MSG_CHANNELS_GET, ifindex)? {
            let slot = match ty {
                RX_MAX => &mut ch.max[0],
                TX_MAX => &mut ch.max[1],
                OTHER_MAX => &mut ch.max[2],
                COMBINED_MAX => &mut ch.max[3],
                RX_COUNT => &mut ch.count[0],
                TX_COUNT => &mut ch.count[1],
                OTHER_COUNT => &mut ch.count[2],
                COMBINED_COUNT => &mut ch.count[3],
                _ => continue,
            };
            *slot = u32_of(&p).unwrap_or(0);
        }
        Ok(ch)
    }

    /// `ETHTOOL_MSG_CHANNELS_SET` of the counts given.
    pub fn set_channels(&mut self, ifindex: u32, counts: ChannelCounts) -> io::Result<()> {
        use channels_attr::*;
        let mut req = self.request(MSG_CHANNELS_SET, ifindex);
        for (ty, value) in [RX_COUNT, TX_COUNT, OTHER_COUNT, COMBINED_COUNT]
            .into_iter()
            .zip(counts)
        {
            if let Some(v) = value {
                req.u32(ty, v);
            }
        }
        self.sock.request(req).map(drop)
    }

    /// `ETHTOOL_MSG_RINGS_GET`.
    pub fn rings(&mut self, ifindex: u32) -> io::Result<Rings> {
        use rings_attr::*;
        let mut rings = Rings::default();
        let mut thresh = None;
        let mut thresh_max = None;
        for (ty, p) in self.get(MSG_RINGS_GET, ifindex)? {
            match ty {
                RX => rings.rx = u32_of(&p).unwrap_or(0),
                TCP_DATA_SPLIT => rings.tcp_data_split = p.first().copied().unwrap_or(0),
                HDS_THRESH => thresh = u32_of(&p),
                HDS_THRESH_MAX => thresh_max = u32_of(&p),
                _ => {}
            }
        }
        rings.hds_thresh = thresh.zip(thresh_max);
        Ok(rings)
    }

    /// `ETHTOOL_MSG_RINGS_SET` of `tcp-data-split` and/or `hds-thresh`.
    pub fn set_rings(
        &mut self,
        ifindex: u32,
        tcp_data_split: Option<u8>,
        hds_thresh: Option<u32>,
    ) -> io::Result<()> {
        let mut req = self.request(MSG_RINGS_SET, ifindex);
        if let Some(v) = tcp_data_split {
            req.attr(rings_attr::TCP_DATA_SPLIT, &[v]);
        }
        if let Some(v) = hds_thresh {
            req.u32(rings_attr::HDS_THRESH, v);
        }
        self.sock.request(req).map(drop)
    }

    /// The default RSS context's indirection table (`ETHTOOL_MSG_RSS_GET`): one queue number per
    /// entry; empty when the device has no table. `EOPNOTSUPP` from a driver without RSS.
    pub fn rss_indir(&mut self, ifindex: u32) -> io::Result<Vec<u32>> {
        let attrs = self.get(MSG_RSS_GET, ifindex)?;
        Ok(attrs
            .iter()
            .find(|(ty, _)| *ty == A_RSS_INDIR)
            .map(|(_, p)| p.chunks_exact(4).filter_map(u32_of).collect())
            .unwrap_or_default())
    }
}

/// `SIOCETHTOOL` (include/uapi/linux/sockios.h).
const SIOCETHTOOL: libc::c_ulong = 0x8946;
/// `ETHTOOL_GRXCLSRLCNT`: rule count, table size and special-location support.
const ETHTOOL_GRXCLSRLCNT: u32 = 0x2e;
/// `ETHTOOL_GRXCLSRULE`: one rule by location.
const ETHTOOL_GRXCLSRULE: u32 = 0x2f;
/// `ETHTOOL_GRXCLSRLALL`: every rule's location.
const ETHTOOL_GRXCLSRLALL: u32 = 0x30;
/// `ETHTOOL_SRXCLSRLDEL`: delete the rule at `fs.location`.
const ETHTOOL_SRXCLSRLDEL: u32 = 0x31;
/// `ETHTOOL_SRXCLSRLINS`: insert `fs`; the kernel writes back the location it used.
const ETHTOOL_SRXCLSRLINS: u32 = 0x32;
/// `ETHTOOL_SRXFHINDIR`: set the default context's indirection table (size 0: back to the default
/// spread, which also forgets that the user configured it).
const ETHTOOL_SRXFHINDIR: u32 = 0x39;

/// `RX_CLS_LOC_SPECIAL`: in `GRXCLSRLCNT`'s `data`, the driver chooses locations itself.
pub const RX_CLS_LOC_SPECIAL: u64 = 0x8000_0000;
/// `RX_CLS_LOC_ANY`: let the driver choose the rule's location.
pub const RX_CLS_LOC_ANY: u32 = 0xffff_ffff;
/// `TCP_V4_FLOW` / `UDP_V4_FLOW` (`flow_type`).
pub const TCP_V4_FLOW: u32 = 0x01;
/// `UDP_V4_FLOW`.
pub const UDP_V4_FLOW: u32 = 0x02;

/// `struct ethtool_tcpip4_spec` inside `union ethtool_flow_union` (52 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowUnion {
    /// `ip4src`, `ip4dst` (network order).
    pub ip4src: u32,
    /// Destination address, network order.
    pub ip4dst: u32,
    /// `psrc`, network order.
    pub psrc: u16,
    /// `pdst`, network order.
    pub pdst: u16,
    /// `tos`.
    pub tos: u8,
    rest: [u8; 39],
}

impl FlowUnion {
    /// All zero.
    pub const ZERO: FlowUnion = FlowUnion {
        ip4src: 0,
        ip4dst: 0,
        psrc: 0,
        pdst: 0,
        tos: 0,
        rest: [0; 39],
    };
}

/// `struct ethtool_flow_ext` (20 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlowExt {
    padding: [u8; 2],
    h_dest: [u8; 6],
    vlan_etype: u16,
    vlan_tci: u16,
    data: [u32; 2],
}

/// `struct ethtool_rx_flow_spec` (168 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxFlowSpec {
    /// `flow_type` (`TCP_V4_FLOW`, …).
    pub flow_type: u32,
    /// Values to match.
    pub h_u: FlowUnion,
    /// Extension values.
    pub h_ext: FlowExt,
    /// Masks: a set bit is compared.
    pub m_u: FlowUnion,
    /// Extension masks.
    pub m_ext: FlowExt,
    /// The queue (or `RX_CLS_FLOW_DISC`).
    pub ring_cookie: u64,
    /// The rule's location in the device's table.
    pub location: u32,
}

/// `struct ethtool_rxnfc` up to `rule_locs` (192 bytes with its tail padding).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct Rxnfc {
    cmd: u32,
    flow_type: u32,
    data: u64,
    fs: RxFlowSpec,
    rule_cnt: u32,
}

const _: () = assert!(mem::size_of::<FlowUnion>() == 52);
const _: () = assert!(mem::size_of::<FlowExt>() == 20);
const _: () = assert!(mem::size_of::<RxFlowSpec>() == 168);
const _: () = assert!(mem::size_of::<Rxnfc>() == 192);
/// `offsetof(struct ethtool_rxnfc, rule_locs)`: where GRXCLSRLALL writes the locations.
const RULE_LOCS_OFFSET: usize = 188;

impl Rxnfc {
    fn new(cmd: u32) -> Rxnfc {
        Rxnfc {
            cmd,
            flow_type: 0,
            data: 0,
            fs: RxFlowSpec {
                flow_type: 0,
                h_u: FlowUnion::ZERO,
                h_ext: FlowExt::default(),
                m_u: FlowUnion::ZERO,
                m_ext: FlowExt::default(),
                ring_cookie: 0,
                location: 0,
            },
            rule_cnt: 0,
        }
    }
}

/// An `AF_INET` datagram socket for `SIOCETHTOOL` on device `name` (of this process's network
/// namespace).
#[derive(Debug)]
pub struct EthtoolIoctl {
    sock: OwnedFd,
    name: [libc::c_char; libc::IFNAMSIZ],
}

impl EthtoolIoctl {
    /// For device `name`; `EINVAL` for a name that cannot be a device's.
    pub fn new(name: &str) -> io::Result<EthtoolIoctl> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.as_bytes().contains(&0) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let mut buf = [0 as libc::c_char; libc::IFNAMSIZ];
        for (dst, src) in buf.iter_mut().zip(name.bytes()) {
            *dst = src as libc::c_char;
        }
        let sock = super::socket::socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
        Ok(EthtoolIoctl { sock, name: buf })
    }

    /// `SIOCETHTOOL` with `data` (the command's structure, its first u32 the command).
    fn call(&self, data: *mut libc::c_void) -> io::Result<()> {
        // SAFETY: all-zero is a valid `ifreq`.
        let mut req: libc::ifreq = unsafe { mem::zeroed() };
        req.ifr_name = self.name;
        req.ifr_ifru.ifru_data = data.cast();
        // SAFETY: `req` is a live `ifreq` with a NUL-terminated name and `ifru_data` pointing at a
        // live structure of the size the command implies (each caller's comment says which); the
        // kernel reads and writes only that structure during the call.
        syscall!(ioctl(self.sock.as_raw_fd(), SIOCETHTOOL, &mut req)).map(drop)
    }

    /// `ETHTOOL_GRXCLSRLCNT`: (rules in use, table size, whether the driver picks locations).
    pub fn rule_count(&self) -> io::Result<(u32, u32, bool)> {
        let mut nfc = Rxnfc::new(ETHTOOL_GRXCLSRLCNT);
        // The kernel reads and writes one `struct ethtool_rxnfc`.
        self.call((&mut nfc as *mut Rxnfc).cast())?;
        Ok((
            nfc.rule_cnt,
            nfc.data as u32,
            nfc.data & RX_CLS_LOC_SPECIAL != 0,
        ))
    }

    /// `ETHTOOL_GRXCLSRLALL`: the locations of the rules in use (at most `count`).
    pub fn rule_locations(&self, count: u32) -> io::Result<Vec<u32>> {
        // A `struct ethtool_rxnfc` followed by `count` u32 locations, in u64s for alignment.
        let words = (RULE_LOCS_OFFSET + 4 * count as usize).div_ceil(8);
        let mut buf = vec![0u64; words.max(mem::size_of::<Rxnfc>() / 8)];
        let mut head = Rxnfc::new(ETHTOOL_GRXCLSRLALL);
        head.rule_cnt = count;
        // SAFETY: `buf` holds at least 192 bytes, 8-aligned: room for one `Rxnfc`.
        unsafe { buf.as_mut_ptr().cast::<Rxnfc>().write(head) };
        // The kernel reads the head (rule_cnt: the room) and writes at most `rule_cnt` locations
        // from offset 188, inside `buf`.
        self.call(buf.as_mut_ptr().cast())?;
        // SAFETY: `buf` holds an `Rxnfc` at its start (written above, updated by the kernel).
        let written = unsafe { buf.as_ptr().cast::<Rxnfc>().read() }
            .rule_cnt
            .min(count);
        let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
        Ok(
            bytes[RULE_LOCS_OFFSET..RULE_LOCS_OFFSET + 4 * written as usize]
                .chunks_exact(4)
                .filter_map(u32_of)
                .collect(),
        )
    }

    /// `ETHTOOL_GRXCLSRULE`: the rule at `location`.
    pub fn rule(&self, location: u32) -> io::Result<RxFlowSpec> {
        let mut nfc = Rxnfc::new(ETHTOOL_GRXCLSRULE);
        nfc.fs.location = location;
        // One `struct ethtool_rxnfc`, read and written.
        self.call((&mut nfc as *mut Rxnfc).cast())?;
        Ok(nfc.fs)
    }

    /// `ETHTOOL_SRXCLSRLINS`: inserts `spec`; returns the location the kernel used.
    pub fn insert_rule(&self, spec: &RxFlowSpec) -> io::Result<u32> {
        let mut nfc = Rxnfc::new(ETHTOOL_SRXCLSRLINS);
        nfc.fs = *spec;
        // One `struct ethtool_rxnfc`, read, and written back with the location.
        self.call((&mut nfc as *mut Rxnfc).cast())?;
        Ok(nfc.fs.location)
    }

    /// `ETHTOOL_SRXCLSRLDEL`: deletes the rule at `location`.
    pub fn delete_rule(&self, location: u32) -> io::Result<()> {
        let mut nfc = Rxnfc::new(ETHTOOL_SRXCLSRLDEL);
        nfc.fs.location = location;
        // One `struct ethtool_rxnfc`, read.
        self.call((&mut nfc as *mut Rxnfc).cast())
    }

    /// `ETHTOOL_SRXFHINDIR`: sets the default RSS context's indirection table to `table`, or back to
    /// the kernel's default spread when `table` is empty.
    pub fn set_rxfh_indir(&self, table: &[u32]) -> io::Result<()> {
        let size =
            u32::try_from(table.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // `struct ethtool_rxfh_indir { u32 cmd; u32 size; u32 ring_index[]; }`.
        let mut buf = Vec::with_capacity(2 + table.len());
        buf.extend_from_slice(&[ETHTOOL_SRXFHINDIR, size]);
        buf.extend_from_slice(table);
        // The kernel reads `cmd`, `size` and `size` entries: all inside `buf`.
        self.call(buf.as_mut_ptr().cast())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rxnfc_layout_matches_linux_ethtool_h() {
        assert_eq!(mem::offset_of!(FlowUnion, ip4dst), 4);
        assert_eq!(mem::offset_of!(FlowUnion, psrc), 8);
        assert_eq!(mem::offset_of!(FlowUnion, pdst), 10);
        assert_eq!(mem::offset_of!(FlowUnion, tos), 12);
        assert_eq!(mem::offset_of!(FlowExt, h_dest), 2);
        assert_eq!(mem::offset_of!(FlowExt, vlan_etype), 8);
        assert_eq!(mem::offset_of!(FlowExt, data), 12);
        assert_eq!(mem::offset_of!(RxFlowSpec, h_u), 4);
        assert_eq!(mem::offset_of!(RxFlowSpec, h_ext), 56);
        assert_eq!(mem::offset_of!(RxFlowSpec, m_u), 76);
        assert_eq!(mem::offset_of!(RxFlowSpec, m_ext), 128);
        assert_eq!(mem::offset_of!(RxFlowSpec, ring_cookie), 152);
        assert_eq!(mem::offset_of!(RxFlowSpec, location), 160);
        assert_eq!(mem::offset_of!(Rxnfc, data), 8);
        assert_eq!(mem::offset_of!(Rxnfc, fs), 16);
        assert_eq!(mem::offset_of!(Rxnfc, rule_cnt), 184);
        assert_eq!(RULE_LOCS_OFFSET, 188);
    }

    #[test]
    fn names_that_cannot_be_devices_are_refused() {
        for name in ["", "a-name-longer-than-ifnamsiz", "nul\0"] {
            let e = EthtoolIoctl::new(name).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{name:?}");
        }
    }

    #[test]
    fn loopback_reads_over_netlink_or_names_its_errno() {
        // Reading is unprivileged; loopback has no RSS and fixed rings.
        let mut nl = match EthtoolNl::open() {
            Ok(nl) => nl,
            Err(e) => return assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}"),
        };
        match nl.channels(1) {
            Ok(ch) => assert_eq!(ch.count, [0; 4], "loopback has no channels to report"),
            Err(e) => assert!(e.raw_os_error().is_some(), "{e}"),
        }
        let e = nl.rss_indir(1).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}");
    }
}
