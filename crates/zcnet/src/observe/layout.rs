//! Struct offsets of the running kernel for the observer's programs, read from its BTF
//! (`/sys/kernel/btf/vmlinux`, parsed once per observer, when a program first needs it); a kernel
//! without them is a [`BlindSpot`] saying which.

use std::cell::OnceCell;
use std::io;

use super::BlindSpot;
use crate::btf::Btf;

/// The kernel's BTF, read at most once.
pub(super) type KernelBtf = OnceCell<io::Result<Btf>>;

/// The kernel's BTF, or why `what` cannot be seen without it.
pub(super) fn vmlinux<'a>(btf: &'a KernelBtf, what: &'static str) -> Result<&'a Btf, BlindSpot> {
    btf.get_or_init(Btf::vmlinux)
        .as_ref()
        .map_err(|e| BlindSpot {
            what,
            why: format!("cannot read the kernel's BTF (/sys/kernel/btf/vmlinux): {e}"),
        })
}

/// The byte offset of `member` in `struct strukt`, or why `what` cannot be seen.
pub(super) fn offset<T: TryFrom<usize>>(
    btf: &Btf,
    what: &'static str,
    strukt: &str,
    member: &str,
) -> Result<T, BlindSpot> {
    btf.struct_layout(strukt)
        .and_then(|s| s.offset_of(member))
        .and_then(|o| T::try_from(o).ok())
        .ok_or_else(|| BlindSpot {
            what,
            why: format!("the kernel's BTF has no {member} in struct {strukt}"),
        })
}
