//! What zcnet's tests need beyond the throwaway networks of [`benchnet`] (re-exported here, so that a
//! test reaches everything through this crate): skipping, with the reason printed, a test that needs
//! root ([`privileged`]) — or failing it when `ZCNET_PRIV_TESTS=1` demands that it run; the
//! locked-memory budget that tests depending on root's exemption from it ask for ([`memlock_budget`],
//! [`adapted`]); `/proc/self/smaps` fields; and a check of the vsock loopback transport.
//!
//! The `testnet-seccomp` helper binary (a seccomp filter installed for a confined child) holds this
//! crate's only `unsafe` code.
#![deny(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations)]

mod privilege;
mod smaps;
mod tracefs;
mod vsock_check;

pub use benchnet::{
    Netns, Offloads, VethConfig, VethPair, cpu, frame, run_checked, sweep, termination_flag,
};
pub use privilege::{
    MemlockTurn, adapted, may_trace, memlock_budget, memlock_turn, privileged, skip,
};
pub use smaps::{anon_huge_kib, smaps_field};
pub use tracefs::with_tracefs;
pub use vsock_check::{LoopbackError, LoopbackReport, loopback_check};
