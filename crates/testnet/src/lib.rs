//! Throwaway network topologies for zcnet's tests and benchmarks.
//!
//! Everything this crate creates is named with a `zc` prefix and the creating process's pid
//! (`zc4242-1a`), lives inside network namespaces of its own, and is removed when its owner is dropped,
//! while a panic unwinds, or when the process receives SIGINT/SIGTERM. Whatever a killed process left
//! behind is removed by [`sweep`], which runs before the first namespace of every process is created.
//! Nothing is ever attached to an interface of the host's own namespace.
//!
//! It also holds what only zcnet's tests and benchmarks need: UDP frame builders ([`frame`]) and CPU
//! placement ([`cpu`]). (The AF_PACKET sockets and rings AF_XDP is compared with are zcnet's own,
//! `zcnet::packet`.) The signal handler holds this crate's only `unsafe` code.
//!
//! Creating namespaces needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_NET_RAW); tests call
//! [`privileged`] first, which prints why they skip, or fails them when `ZCNET_PRIV_TESTS=1` demands
//! that they run. Tests whose checks depend on root's exemption from the locked-memory limit ask
//! [`memlock_budget`] and say how they adapted ([`adapted`]).
#![deny(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations)]

mod command;
pub mod cpu;
pub mod frame;
mod netns;
mod privilege;
mod signals;
mod smaps;
mod sweep;
mod termination;
mod veth;
mod vsock_check;

pub use command::{run_checked, with_tracefs};
pub use netns::Netns;
pub use privilege::{
    MemlockTurn, adapted, may_trace, memlock_budget, memlock_turn, privileged, skip,
};
pub use smaps::{anon_huge_kib, smaps_field};
pub use sweep::sweep;
pub use termination::termination_flag;
pub use veth::{Offloads, VethConfig, VethPair};
pub use vsock_check::{LoopbackError, LoopbackReport, loopback_check};
