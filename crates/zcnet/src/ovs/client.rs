//! The control connection: one generic netlink socket with the four datapath families resolved, and
//! the request shapes they share (an `ovs_header` after the `genlmsghdr`).

use crate::sys::netlink::{GENL_HDRLEN, GenlSocket, Reply, Request};
use crate::sys::ovs::{self, OvsHeader};

use super::error::{Call, OvsError};

/// Which family a request goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    Datapath,
    Vport,
    Flow,
    Packet,
}

/// A control socket with the datapath families resolved.
#[derive(Debug)]
pub(crate) struct Client {
    sock: GenlSocket,
    ids: [u16; 4],
}

impl Client {
    /// Opens a socket and resolves the families (`ENOENT`: the openvswitch module is not loaded).
    pub(crate) fn open() -> Result<Client, OvsError> {
        let mut sock = GenlSocket::open().call("open a generic netlink socket")?;
        let mut ids = [0u16; 4];
        for (id, name) in ids.iter_mut().zip([
            ovs::DATAPATH_FAMILY,
            ovs::VPORT_FAMILY,
            ovs::FLOW_FAMILY,
            ovs::PACKET_FAMILY,
        ]) {
            *id = sock.family_id(name).call("resolve the ovs_* families")?;
        }
        Ok(Client { sock, ids })
    }

    /// A request to `family` for datapath `dp_ifindex` (0: none yet, or every datapath in a dump).
    pub(crate) fn request(&self, family: Family, flags: u16, cmd: u8, dp_ifindex: i32) -> Request {
        let version = match family {
            Family::Datapath => ovs::DATAPATH_VERSION,
            _ => ovs::VERSION,
        };
        Request::new(
            self.ids[family as usize],
            flags | libc::NLM_F_ACK as u16,
            cmd,
            version,
        )
        .header(&OvsHeader { dp_ifindex }.to_bytes())
    }

    /// Sends `req` and collects its replies (see `GenlSocket::request`).
    pub(crate) fn send(
        &mut self,
        req: Request,
        call: &'static str,
    ) -> Result<Vec<Reply>, OvsError> {
        self.sock.request(req).call(call)
    }

    /// Sends `req` followed by attribute `ty` whose payload is `trailer`, gathered from the caller's
    /// memory rather than copied into the request, and waits for the acknowledgement.
    pub(crate) fn send_with_trailer(
        &mut self,
        req: Request,
        ty: u16,
        trailer: &[u8],
        call: &'static str,
    ) -> Result<(), OvsError> {
        let seq = self.sock.next_seq();
        let (head, pad) = req.finish_with_trailer(seq, ty, trailer.len()).call(call)?;
        self.sock
            .send_gathered(&[&head, trailer, &[0u8; 3][..pad]])
            .call(call)?;
        self.sock.collect_replies(seq, false).call(call).map(drop)
    }
}

/// The `ovs_header` and attributes of a reply payload (after its `genlmsghdr`).
pub(crate) fn reply_body(reply: &Reply) -> Option<(OvsHeader, &[u8])> {
    let body = reply.payload.get(GENL_HDRLEN..)?;
    Some((OvsHeader::read(body)?, &body[4..]))
}
