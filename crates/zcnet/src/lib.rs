//! zcnet: Linux zero-copy networking made practical from user space.
//!
//! The kernel's zero-copy paths each come with rules that are easy to break: a buffer handed to a
//! MSG_ZEROCOPY send must not change until its completion arrives on the error queue, pages mapped by
//! TCP_ZEROCOPY_RECEIVE must be released before the window is reused, an AF_XDP frame belongs either to
//! user space or to the kernel. zcnet encodes those rules in types, falls back to copying when the
//! kernel cannot do better (and records why), and measures what each path really costs.
//!
//! - [`tx`]: MSG_ZEROCOPY senders for TCP, UDP and AF_VSOCK, with buffer loans and completion tracking.
//! - [`rx`]: TCP zero-copy receive into a mapped window.
//! - [`xdp`]: AF_XDP sockets, UMEM, rings and the embedded XDP programs that feed them.
//! - [`ovs`]: Open vSwitch datapath client: flows, vports, and upcalls whose packets are not copied.
//! - [`probe`]: what this host supports, each feature measured by doing it.
//! - [`Fallback`]: why a zero-copy path is not used (the call, its errno, what to do), shared by all.
//! - [`sys`]: the kernel boundary; the only module with `unsafe` code.
#![deny(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations)]

mod fallback;
pub mod ovs;
pub mod probe;
pub mod rx;
pub mod sys;
pub mod tx;
pub mod xdp;

pub use fallback::{Cause, Fallback};
