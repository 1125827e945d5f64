//! io_uring zero-copy receive (zcrx) findings: the opcode, what the kernel's zcrx query says, whether a
//! device-less instance registers, the 7.2 events and statistics, and the refill ring's header.
//! Per-interface facts (header split, `hds-thresh`, queue holders) are not probed here.

use super::{Finding, Support, refusal};
use crate::sys::zcrx::{
    self, Bind, EventLayout, QueryZcrx, Setup, ZCRX_FEATURE_EVENT, ZCRX_REG_NODEV, ZcrxQueue,
};

/// The zcrx rows, in a stable order.
/// The rows [`zcrx`] gives.
pub(super) const FEATURES: [&str; 3] = [
    "io_uring.zcrx",
    "io_uring.zcrx_nodev",
    "io_uring.zcrx_events",
];

pub(super) fn zcrx() -> Vec<Finding> {
    if !zcrx::recv_zc_supported() {
        let why = "no IORING_OP_RECV_ZC (io_uring zero-copy receive is Linux 6.15+)";
        return FEATURES
            .into_iter()
            .map(|f| Finding::new(f, Support::No, why))
            .collect();
    }
    let query = match zcrx::query_zcrx() {
        Ok(Some(q)) => Ok(q),
        Ok(None) => Err("the kernel's IORING_REGISTER_QUERY has no zcrx query".to_string()),
        Err(e) => Err(format!("IORING_REGISTER_QUERY: {}", refusal(&e))),
    };
    let mut rows = vec![match &query {
        Ok(q) => Finding::new(
            "io_uring.zcrx",
            Support::Yes,
            format!(
                "IORING_OP_RECV_ZC; query: register flags {:#x}, features {:#x}, {} control opcodes, \
                 refill header {} bytes aligned {}; a NIC queue needs header split (tcp-data-split on, \
                 hds-thresh 0) and a driver with queue management",
                q.register_flags, q.features, q.nr_ctrl_opcodes, q.rq_hdr_size, q.rq_hdr_alignment
            ),
        ),
        Err(why) => Finding::new(
            "io_uring.zcrx",
            Support::Yes,
            format!("IORING_OP_RECV_ZC; {why}"),
        ),
    }];
    rows.push(nodev(query.as_ref().ok()));
    rows.push(events(query.as_ref().ok()));
    rows
}

/// Whether a device-less instance registers here: the query's flags, and a registration tried.
fn nodev(query: Option<&QueryZcrx>) -> Finding {
    const FEATURE: &str = "io_uring.zcrx_nodev";
    let listed = query.is_some_and(|q| q.register_flags & u64::from(ZCRX_REG_NODEV) != 0);
    let setup = Setup {
        bind: Bind::NoDevice,
        area_len: 64 << 10,
        huge_pages: false,
        rx_buf_len: 0,
        refill_entries: 64,
        ring_entries: 8,
        events: None,
    };
    let tried = match ZcrxQueue::new(&setup) {
        Ok(q) => Ok(q.rx_buf_len()),
        Err((_, e)) => Err(refusal(&e)),
    };
    let flags = query.map_or("no zcrx query".to_string(), |q| {
        format!("query's register flags {:#x}", q.register_flags)
    });
    match (listed, tried) {
        (_, Ok(buf)) => Finding::new(
            FEATURE,
            Support::Yes,
            format!(
                "a device-less instance registered ({flags}; buffers of {buf} bytes): every byte \
                 copied"
            ),
        ),
        (true, Err(e)) => Finding::new(
            FEATURE,
            Support::No,
            format!("the {flags} list ZCRX_REG_NODEV, but registering one failed: {e}"),
        ),
        (false, Err(e)) => Finding::new(
            FEATURE,
            Support::No,
            format!(
                "no ZCRX_REG_NODEV ({flags}; device-less zcrx is Linux 7.1+); registering one: {e}"
            ),
        ),
    }
}

/// The copy and allocation-failure events and the statistics (7.2), with their layout from BTF.
fn events(query: Option<&QueryZcrx>) -> Finding {
    const FEATURE: &str = "io_uring.zcrx_events";
    if query.is_none_or(|q| q.features & ZCRX_FEATURE_EVENT == 0) {
        return Finding::new(
            FEATURE,
            Support::No,
            "the query lists no ZCRX_FEATURE_EVENT (copy events and statistics are Linux 7.2+)",
        );
    }
    match EventLayout::from_kernel() {
        Ok(layout) => Finding::new(FEATURE, Support::Yes, layout.summary()),
        Err(why) => Finding::new(FEATURE, Support::No, why),
    }
}
