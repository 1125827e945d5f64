//! The copies the kernel makes *after* a zero-copy send: a kprobe on `skb_copy_ubufs`, the function
//! that replaces a packet's lent pages with copies, with the cause named by its caller.
//!
//! # Kernel behaviour relied on
//! - `skb_copy_ubufs(struct sk_buff *skb, gfp_t gfp)` is where the kernel copies the pages of a
//!   packet that still points at user memory (MSG_ZEROCOPY, io_uring `SEND_ZC`): it is called
//!   through `skb_orphan_frags_rx` on the receive path ([`RECEIVE_CALLERS`]: by
//!   `__netif_receive_skb_core` before a packet is handed to a packet socket on the receiving
//!   interface and, in older kernels, to a local socket; by `ip_local_deliver_finish` and
//!   `ip6_input_finish` before local delivery in newer ones, 7.3 among them), and by
//!   `dev_queue_xmit_nit` for the clone it hands to a packet socket tapping the sending interface
//!   (inline `deliver_skb`); other callers (a transmit timestamp's clone, `tun`) are counted without
//!   a cause. A device without
//!   scatter-gather never gets here: TCP and UDP copy at send time for such a route, and the
//!   completion says so.
//! - The probe is a kprobe at the function's entry (see `kprobe`), where the first argument is in
//!   `di` (x86-64 calling convention). `bpf_get_stack` gives the kernel stack's return addresses,
//!   the probed address first, then the caller's.
//! - The offsets of `di` in `struct pt_regs` and of `data_len` in `struct sk_buff` come from the
//!   kernel's BTF (`/sys/kernel/btf/vmlinux`); the callers' addresses from `/proc/kallsyms`.
//! - The copy runs in softirq context: on loopback and veth that is usually the sending task on its
//!   way out of the send (the copy is counted against it), under load `ksoftirqd`.

use std::ffi::CStr;

use super::kallsyms::Kallsyms;
use super::kprobe::{self, At};
use super::programs::{self, LateCopyProbe, Maps};
use super::{Attachment, BlindSpot, Scope, layout};

/// The probed function.
const FUNCTION: &CStr = c"skb_copy_ubufs";
/// What is not seen when the probe cannot be attached.
const WHAT: &str =
    "bytes copied after a zero-copy send, and the cause (local delivery, a tap on the interface)";
/// The functions whose calls of `skb_copy_ubufs` are on the receive path (a static helper may be
/// inlined into its caller, which then makes the call: both are listed).
const RECEIVE_CALLERS: [&str; 5] = [
    "__netif_receive_skb_core",
    "ip_local_deliver_finish",
    "ip_local_deliver",
    "ip6_input_finish",
    "ip6_input",
];
/// The function whose call is for a tap on the sending interface.
const TAP_CALLER: &str = "dev_queue_xmit_nit";

/// Attaches the probe, or says why it cannot: `Ok` with a blind spot when it runs but cannot tell
/// the causes apart.
pub(super) fn attach(
    scope: Scope,
    maps: Maps<'_>,
    btf: &layout::KernelBtf,
) -> Result<(Attachment, Option<BlindSpot>), BlindSpot> {
    let site = kprobe::site(btf, WHAT, FUNCTION, At::Entry)?;
    let data_len: i16 = layout::offset(site.btf, WHAT, "sk_buff", "data_len")?;
    let (receive, tap, causes) = match Kallsyms::read() {
        Ok(k) if !k.hidden() => {
            let receive: Vec<_> = RECEIVE_CALLERS.iter().flat_map(|f| k.ranges(f)).collect();
            let tap = k.ranges(TAP_CALLER);
            let missing = if receive.is_empty() || tap.is_empty() {
                Some(BlindSpot {
                    what: "some causes of late copies",
                    why: format!(
                        "/proc/kallsyms lists none of {} or none of {TAP_CALLER}",
                        RECEIVE_CALLERS.join(", ")
                    ),
                })
            } else {
                None
            };
            (receive, tap, missing)
        }
        Ok(_) => (
            Vec::new(),
            Vec::new(),
            Some(BlindSpot {
                what: "the cause of late copies",
                why: "/proc/kallsyms shows this process no addresses (kernel.kptr_restrict; needs CAP_SYSLOG)"
                    .to_string(),
            }),
        ),
        Err(e) => (
            Vec::new(),
            Vec::new(),
            Some(BlindSpot {
                what: "the cause of late copies",
                why: format!("cannot read /proc/kallsyms: {e}"),
            }),
        ),
    };
    let probe = LateCopyProbe {
        arg0: site.register,
        data_len: i32::from(data_len),
        receive,
        tap,
    };
    let insns = programs::late_copy(scope, maps, &probe);
    let attachment = kprobe::attach(
        site.pmu_type,
        FUNCTION,
        At::Entry,
        &insns,
        "zcnet_late_copy",
    )
    .map_err(|why| BlindSpot { what: WHAT, why })?;
    Ok((attachment, causes))
}
