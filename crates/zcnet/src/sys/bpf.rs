//! The `bpf(2)` system call, typed eBPF instructions, and the pieces of `union bpf_attr` that zcnet uses:
//! map creation, update and deletion, a walk over a map's entries, program load (with the verifier log),
//! object ids, and `BPF_LINK_CREATE` (for XDP and for tracepoints opened as perf events) and
//! `BPF_LINK_DETACH`.
//!
//! All layouts and numbers come from `include/uapi/linux/bpf.h`. The kernel accepts an attribute block
//! shorter than its own `union bpf_attr` and treats the missing tail as zero, so each command has its own
//! `#[repr(C)]` prefix struct here, passed with its exact size.
//!
//! Every descriptor `bpf()` returns has `O_CLOEXEC` set by the kernel.

use std::ffi::CStr;
use std::fmt;
use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `BPF_MAP_CREATE` (`enum bpf_cmd`).
const BPF_MAP_CREATE: libc::c_int = 0;
/// `BPF_MAP_UPDATE_ELEM`.
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
/// `BPF_MAP_DELETE_ELEM`.
const BPF_MAP_DELETE_ELEM: libc::c_int = 3;
/// `BPF_PROG_LOAD`.
const BPF_PROG_LOAD: libc::c_int = 5;
/// `BPF_LINK_CREATE`.
const BPF_LINK_CREATE: libc::c_int = 28;
/// `BPF_RAW_TRACEPOINT_OPEN`.
const BPF_RAW_TRACEPOINT_OPEN: libc::c_int = 17;
/// `BPF_LINK_DETACH` (kernel 5.9+).
const BPF_LINK_DETACH: libc::c_int = 34;
/// `BPF_MAP_LOOKUP_ELEM`.
const BPF_MAP_LOOKUP_ELEM: libc::c_int = 1;
/// `BPF_MAP_GET_NEXT_KEY`.
const BPF_MAP_GET_NEXT_KEY: libc::c_int = 4;
/// `BPF_PROG_GET_NEXT_ID`.
const BPF_PROG_GET_NEXT_ID: libc::c_int = 11;
/// `BPF_OBJ_GET_INFO_BY_FD`.
const BPF_OBJ_GET_INFO_BY_FD: libc::c_int = 15;

/// `BPF_MAP_TYPE_PERCPU_HASH`: a hash table with one value per possible CPU for each key.
pub const BPF_MAP_TYPE_PERCPU_HASH: u32 = 5;
/// `BPF_MAP_TYPE_PERCPU_ARRAY`: an array with one value per possible CPU for each index.
const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
/// `BPF_MAP_TYPE_LRU_PERCPU_HASH`: an LRU hash table with one value per possible CPU for each key.
const BPF_MAP_TYPE_LRU_PERCPU_HASH: u32 = 10;
/// `BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE`: per-cgroup storage with one value per possible CPU.
const BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE: u32 = 21;
/// `BPF_MAP_TYPE_LRU_HASH`: a hash table shared by all CPUs that evicts its least recently used
/// element when full.
pub const BPF_MAP_TYPE_LRU_HASH: u32 = 9;
/// `BPF_PROG_TYPE_TRACEPOINT`: a program run at a tracepoint, its context the event's record.
pub const BPF_PROG_TYPE_TRACEPOINT: u32 = 5;
/// `BPF_PROG_TYPE_RAW_TRACEPOINT`: a program run at a tracepoint without a record, its context the
/// tracepoint's arguments as `u64 args[]` (kernel 4.17+).
pub const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;
/// `BPF_PROG_TYPE_KPROBE`: a program run at a kprobe, its context the probed CPU's `struct pt_regs`.
pub const BPF_PROG_TYPE_KPROBE: u32 = 2;
/// `BPF_PERF_EVENT` (`enum bpf_attach_type`, kernel 5.15+): attach a program to a perf event (a
/// tracepoint or kprobe opened with `perf_event_open`) through a link.
pub const BPF_PERF_EVENT: u32 = 41;
/// `BPF_NOEXIST` map update flag: create the element only if it does not exist.
pub const BPF_NOEXIST: u64 = 1;
/// `BPF_PROG_TYPE_CGROUP_SOCKOPT` (kernel 5.3+): a program run in `getsockopt`/`setsockopt` of the
/// sockets of a cgroup, its context a `struct bpf_sockopt`; it must return 1, or the call fails with
/// `EPERM`. Loading needs CAP_NET_ADMIN (or CAP_SYS_ADMIN).
pub const BPF_PROG_TYPE_CGROUP_SOCKOPT: u32 = 25;
/// `BPF_CGROUP_GETSOCKOPT` (`enum bpf_attach_type`): run as `getsockopt` returns, with its result.
pub const BPF_CGROUP_GETSOCKOPT: u32 = 21;

/// `BPF_MAP_TYPE_XSKMAP` (`enum bpf_map_type`): an array of AF_XDP sockets indexed by queue.
pub const BPF_MAP_TYPE_XSKMAP: u32 = 17;
/// `BPF_PROG_TYPE_XDP` (`enum bpf_prog_type`).
pub const BPF_PROG_TYPE_XDP: u32 = 6;
/// `BPF_XDP` (`enum bpf_attach_type`): attach an XDP program to a network device through a link.
pub const BPF_XDP: u32 = 37;
/// `BPF_ANY` map update flag: create or replace the element.
pub const BPF_ANY: u64 = 0;

/// `XDP_FLAGS_SKB_MODE` (`include/uapi/linux/if_link.h`): generic XDP, run after the skb is built.
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: native XDP, run by the driver before any skb exists.
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// XDP program return codes (`enum xdp_action`).
pub mod xdp_action {
    /// `XDP_DROP`: drop the frame.
    pub const DROP: i32 = 1;
    /// `XDP_PASS`: hand the frame to the network stack.
    pub const PASS: i32 = 2;
}

/// BPF helper function ids (`enum bpf_func_id`, `__BPF_FUNC_MAPPER`).
pub mod helper {
    /// `bpf_redirect(ifindex, flags)`: returns `XDP_REDIRECT`, and the frame is sent out of interface
    /// `ifindex` (through its `ndo_xdp_xmit`) when the program returns.
    pub const REDIRECT: i32 = 23;
    /// `bpf_redirect_map(map, key, flags)`: the low two bits of `flags` are the action returned when
    /// `key` has no entry (kernel 5.6+).
    pub const REDIRECT_MAP: i32 = 51;
    /// `bpf_map_lookup_elem(map, key)`: a pointer to the value (this CPU's, in a per-CPU map) or NULL.
    pub const MAP_LOOKUP_ELEM: i32 = 1;
    /// `bpf_map_update_elem(map, key, value, flags)`.
    pub const MAP_UPDATE_ELEM: i32 = 2;
    /// `bpf_map_delete_elem(map, key)`.
    pub const MAP_DELETE_ELEM: i32 = 3;
    /// `bpf_get_current_pid_tgid()`: `tgid << 32 | pid` of the current task.
    pub const GET_CURRENT_PID_TGID: i32 = 14;
    /// `bpf_get_current_task_btf()`: the current `struct task_struct *`, typed by the kernel's BTF
    /// (5.11+), so that a program loads its fields directly, each load checked by the verifier
    /// against the kernel's types and reading 0 where it would fault.
    pub const GET_CURRENT_TASK_BTF: i32 = 158;
    /// `bpf_task_pt_regs(task)`: the task's saved user registers, a BTF-typed `struct pt_regs *`
    /// (5.15+).
    pub const TASK_PT_REGS: i32 = 175;
    /// `bpf_get_current_cgroup_id()`: the id of the current task's cgroup v2 (its directory's inode).
    pub const GET_CURRENT_CGROUP_ID: i32 = 80;
    /// `bpf_probe_read_user(dst, size, user_ptr)`: 0, or a negative errno with `dst` zeroed.
    pub const PROBE_READ_USER: i32 = 112;
    /// `bpf_get_stack(ctx, buf, size, flags)`: the kernel stack's return addresses (flags 0), the
    /// probed address first; the rest of `buf` zeroed; bytes written or a negative errno.
    pub const GET_STACK: i32 = 67;
    /// `bpf_probe_read_kernel(dst, size, kernel_ptr)`: 0, or a negative errno with `dst` zeroed.
    pub const PROBE_READ_KERNEL: i32 = 113;
}

/// Offsets in `struct bpf_sockopt` (`include/uapi/linux/bpf.h`): `optval` and `optval_end` bound the
/// option's value (a packet pointer pair), then the `int`s `level`, `optname`, `optlen`, `retval`.
pub mod sockopt {
    /// `optval`: the option's value; for `TCP_ZEROCOPY_RECEIVE`, the kernel's own copy of the struct.
    pub const OPTVAL: i16 = 8;
    /// `optval_end`: one past its last byte.
    pub const OPTVAL_END: i16 = 16;
    /// `level`.
    pub const LEVEL: i16 = 24;
    /// `optname`.
    pub const OPTNAME: i16 = 28;
    /// `retval`: what the kernel's `getsockopt` returned (0 or a negative errno).
    pub const RETVAL: i16 = 36;
}

/// Offset of `data` in `struct xdp_md`: the first byte of the frame (a packet pointer).
pub const XDP_MD_DATA: i16 = 0;
/// Offset of `data_end` in `struct xdp_md`: one past the frame's last byte.
pub const XDP_MD_DATA_END: i16 = 4;

/// Offset of `rx_queue_index` in `struct xdp_md` (`u32 data, data_end, data_meta, ingress_ifindex,
/// rx_queue_index`).
pub const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

// Instruction classes, sizes, modes, operations and sources (`include/uapi/linux/bpf_common.h`, `bpf.h`).
const BPF_LD: u8 = 0x00;
const BPF_LDX: u8 = 0x01;
const BPF_ST: u8 = 0x02;
const BPF_STX: u8 = 0x03;
const BPF_ALU: u8 = 0x04;
const BPF_JMP: u8 = 0x05;
const BPF_ALU64: u8 = 0x07;
const BPF_JMP_JA: u8 = 0x00;
const BPF_JEQ: u8 = 0x10;
const BPF_JGT: u8 = 0x20;
const BPF_JNE: u8 = 0x50;
const BPF_JSET: u8 = 0x40;
const BPF_JSGT: u8 = 0x60;
const BPF_ADD: u8 = 0x00;
const BPF_SUB: u8 = 0x10;
const BPF_RSH: u8 = 0x70;
const BPF_AND: u8 = 0x50;
const BPF_X: u8 = 0x08;
const BPF_W: u8 = 0x00;
const BPF_H: u8 = 0x08;
const BPF_B: u8 = 0x10;
const BPF_DW: u8 = 0x18;
const BPF_IMM: u8 = 0x00;
const BPF_MEM: u8 = 0x60;
const BPF_ATOMIC: u8 = 0xc0;
const BPF_MOV: u8 = 0xb0;
const BPF_K: u8 = 0x00;
const BPF_CALL: u8 = 0x80;
const BPF_EXIT: u8 = 0x90;
/// `BPF_PSEUDO_MAP_FD`: the `src_reg` of a 64-bit immediate load whose immediate is a map descriptor.
const BPF_PSEUDO_MAP_FD: u8 = 1;

/// An eBPF register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Reg {
    /// Return value, and helper return value.
    R0 = 0,
    /// First argument (the program context on entry).
    R1 = 1,
    /// Second argument.
    R2 = 2,
    /// Third argument.
    R3 = 3,
    /// Fourth argument.
    R4 = 4,
    /// Fifth argument.
    R5 = 5,
    /// Callee-saved: kept across helper calls.
    R6 = 6,
    /// Callee-saved.
    R7 = 7,
    /// Callee-saved.
    R8 = 8,
    /// Callee-saved.
    R9 = 9,
    /// The read-only frame pointer: the top of the program's 512-byte stack.
    R10 = 10,
}

/// One eBPF instruction, `struct bpf_insn` (`include/uapi/linux/bpf.h`): 8 bytes, `dst_reg` in the low
/// nibble of the register byte and `src_reg` in the high one (little-endian layout).
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

const _: () = assert!(mem::size_of::<Insn>() == 8);

impl Insn {
    const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            regs: (src << 4) | (dst & 0x0f),
            off,
            imm,
        }
    }

    /// `dst = imm` (64-bit move of a sign-extended 32-bit immediate).
    pub const fn mov64_imm(dst: Reg, imm: i32) -> Insn {
        Insn::new(BPF_ALU64 | BPF_MOV | BPF_K, dst as u8, 0, 0, imm)
    }

    /// `dst = src` (64-bit register move).
    pub const fn mov64_reg(dst: Reg, src: Reg) -> Insn {
        Insn::new(BPF_ALU64 | BPF_MOV | BPF_X, dst as u8, src as u8, 0, 0)
    }

    /// `dst += imm` (64-bit).
    pub const fn add64_imm(dst: Reg, imm: i32) -> Insn {
        Insn::new(BPF_ALU64 | BPF_ADD | BPF_K, dst as u8, 0, 0, imm)
    }

    /// `dst = (u32)dst - (u32)src` (32-bit, the result zero-extended).
    pub const fn sub32_reg(dst: Reg, src: Reg) -> Insn {
        Insn::new(BPF_ALU | BPF_SUB | BPF_X, dst as u8, src as u8, 0, 0)
    }

    /// `dst >>= imm` (64-bit, logical).
    pub const fn rsh64_imm(dst: Reg, imm: i32) -> Insn {
        Insn::new(BPF_ALU64 | BPF_RSH | BPF_K, dst as u8, 0, 0, imm)
    }

    /// `dst = *(u64 *)(src + off)`.
    pub const fn load_u64(dst: Reg, src: Reg, off: i16) -> Insn {
        Insn::new(BPF_LDX | BPF_MEM | BPF_DW, dst as u8, src as u8, off, 0)
    }

    /// `*(u64 *)(dst + off) = src`.
    pub const fn store_u64(dst: Reg, off: i16, src: Reg) -> Insn {
        Insn::new(BPF_STX | BPF_MEM | BPF_DW, dst as u8, src as u8, off, 0)
    }

    /// `*(u32 *)(dst + off) = src`.
    pub const fn store_u32(dst: Reg, off: i16, src: Reg) -> Insn {
        Insn::new(BPF_STX | BPF_MEM | BPF_W, dst as u8, src as u8, off, 0)
    }

    /// `*(u64 *)(dst + off) = imm` (sign-extended).
    pub const fn store_u64_imm(dst: Reg, off: i16, imm: i32) -> Insn {
        Insn::new(BPF_ST | BPF_MEM | BPF_DW, dst as u8, 0, off, imm)
    }

    /// `lock *(u64 *)(dst + off) += src` (an atomic add, kernel 5.12+ encoding `BPF_ATOMIC`/`BPF_ADD`).
    pub const fn atomic_add_u64(dst: Reg, off: i16, src: Reg) -> Insn {
        Insn::new(
            BPF_STX | BPF_ATOMIC | BPF_DW,
            dst as u8,
            src as u8,
            off,
            BPF_ADD as i32,
        )
    }

    /// `if dst & imm goto +off`.
    pub const fn jump_if_any_bit(dst: Reg, imm: i32, off: i16) -> Insn {
        Insn::new(BPF_JMP | BPF_JSET | BPF_K, dst as u8, 0, off, imm)
    }

    /// `if (s64)dst > imm goto +off`.
    pub const fn jump_if_signed_greater(dst: Reg, imm: i32, off: i16) -> Insn {
        Insn::new(BPF_JMP | BPF_JSGT | BPF_K, dst as u8, 0, off, imm)
    }

    /// `if dst != src goto +off`.
    pub const fn jump_if_not_equal_reg(dst: Reg, src: Reg, off: i16) -> Insn {
        Insn::new(BPF_JMP | BPF_JNE | BPF_X, dst as u8, src as u8, off, 0)
    }

    /// `dst = imm` for a full 64-bit immediate: two instruction slots.
    pub const fn load_imm64(dst: Reg, imm: u64) -> [Insn; 2] {
        [
            Insn::new(
                BPF_LD | BPF_DW | BPF_IMM,
                dst as u8,
                0,
                0,
                imm as u32 as i32,
            ),
            Insn::new(0, 0, 0, 0, (imm >> 32) as u32 as i32),
        ]
    }

    /// Whether this is a jump with a relative offset (not a call or an exit).
    pub const fn is_jump(&self) -> bool {
        self.code & 0x07 == BPF_JMP && self.code & 0xf0 != BPF_CALL && self.code & 0xf0 != BPF_EXIT
    }

    /// `dst &= imm` (64-bit).
    pub const fn and64_imm(dst: Reg, imm: i32) -> Insn {
        Insn::new(BPF_ALU64 | BPF_AND | BPF_K, dst as u8, 0, 0, imm)
    }

    /// `dst = *(u32 *)(src + off)`.
    pub const fn load_u32(dst: Reg, src: Reg, off: i16) -> Insn {
        Insn::new(BPF_LDX | BPF_MEM | BPF_W, dst as u8, src as u8, off, 0)
    }

    /// `dst = *(u16 *)(src + off)` (host byte order).
    pub const fn load_u16(dst: Reg, src: Reg, off: i16) -> Insn {
        Insn::new(BPF_LDX | BPF_MEM | BPF_H, dst as u8, src as u8, off, 0)
    }

    /// `dst = *(u8 *)(src + off)`.
    pub const fn load_u8(dst: Reg, src: Reg, off: i16) -> Insn {
        Insn::new(BPF_LDX | BPF_MEM | BPF_B, dst as u8, src as u8, off, 0)
    }

    /// `goto +off` (relative to the next instruction).
    pub const fn jump(off: i16) -> Insn {
        Insn::new(BPF_JMP | BPF_JMP_JA, 0, 0, off, 0)
    }

    /// `if dst > src goto +off` (unsigned, 64-bit).
    pub const fn jump_if_greater_reg(dst: Reg, src: Reg, off: i16) -> Insn {
        Insn::new(BPF_JMP | BPF_JGT | BPF_X, dst as u8, src as u8, off, 0)
    }

    /// `if dst == imm goto +off`.
    pub const fn jump_if_equal(dst: Reg, imm: i32, off: i16) -> Insn {
        Insn::new(BPF_JMP | BPF_JEQ | BPF_K, dst as u8, 0, off, imm)
    }

    /// `if dst != imm goto +off`.
    pub const fn jump_if_not_equal(dst: Reg, imm: i32, off: i16) -> Insn {
        Insn::new(BPF_JMP | BPF_JNE | BPF_K, dst as u8, 0, off, imm)
    }

    /// The same instruction with jump offset `off`.
    pub const fn with_offset(self, off: i16) -> Insn {
        Insn { off, ..self }
    }

    /// `dst = map` for the map descriptor `map_fd`: a 64-bit immediate load, two instruction slots; the
    /// verifier replaces the descriptor with the map's address.
    pub const fn load_map_fd(dst: Reg, map_fd: i32) -> [Insn; 2] {
        [
            Insn::new(
                BPF_LD | BPF_DW | BPF_IMM,
                dst as u8,
                BPF_PSEUDO_MAP_FD,
                0,
                map_fd,
            ),
            Insn::new(0, 0, 0, 0, 0),
        ]
    }

    /// `call helper` (arguments in r1..r5, result in r0).
    pub const fn call(helper: i32) -> Insn {
        Insn::new(BPF_JMP | BPF_CALL, 0, 0, 0, helper)
    }

    /// `exit` (return r0).
    pub const fn exit() -> Insn {
        Insn::new(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)
    }

    fn dst(&self) -> u8 {
        self.regs & 0x0f
    }

    fn src(&self) -> u8 {
        self.regs >> 4
    }
}

impl fmt::Debug for Insn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Insn {{ code: {:#04x}, dst: r{}, src: r{}, off: {}, imm: {} }}",
            self.code,
            self.dst(),
            self.src(),
            self.off,
            self.imm
        )
    }
}

/// The C type of a load's or store's size bits.
fn size_name(code: u8) -> &'static str {
    match code & 0x18 {
        BPF_W => "u32",
        BPF_H => "u16",
        BPF_B => "u8",
        _ => "u64",
    }
}

/// Disassembles a program in the kernel verifier's notation, one instruction per line, prefixed with its
/// slot number; the second slot of a 64-bit immediate load is folded into the first.
pub fn disassemble(insns: &[Insn]) -> String {
    let mut out = String::new();
    let mut slot = 0;
    while slot < insns.len() {
        let i = insns[slot];
        let (text, width) = match i.code {
            c if c == BPF_ALU64 | BPF_MOV | BPF_K => (format!("r{} = {}", i.dst(), i.imm), 1),
            c if c == BPF_ALU64 | BPF_MOV | BPF_X => (format!("r{} = r{}", i.dst(), i.src()), 1),
            c if c == BPF_ALU64 | BPF_ADD | BPF_K => (format!("r{} += {}", i.dst(), i.imm), 1),
            c if c == BPF_ALU64 | BPF_AND | BPF_K => (format!("r{} &= {:#x}", i.dst(), i.imm), 1),
            c if c & 0x07 == BPF_LDX && c & 0xe0 == BPF_MEM => {
                let text = format!(
                    "r{} = *({} *)(r{} {:+})",
                    i.dst(),
                    size_name(c),
                    i.src(),
                    i.off
                );
                (text, 1)
            }
            c if c & 0x07 == BPF_STX && c & 0xe0 == BPF_MEM => {
                let text = format!(
                    "*({} *)(r{} {:+}) = r{}",
                    size_name(c),
                    i.dst(),
                    i.off,
                    i.src()
                );
                (text, 1)
            }
            c if c & 0x07 == BPF_ST && c & 0xe0 == BPF_MEM => {
                let text = format!(
                    "*({} *)(r{} {:+}) = {}",
                    size_name(c),
                    i.dst(),
                    i.off,
                    i.imm
                );
                (text, 1)
            }
            c if c == BPF_STX | BPF_ATOMIC | BPF_DW && i.imm == BPF_ADD as i32 => (
                format!("lock *(u64 *)(r{} {:+}) += r{}", i.dst(), i.off, i.src()),
                1,
            ),
            c if c == BPF_ALU | BPF_SUB | BPF_X => (format!("w{} -= w{}", i.dst(), i.src()), 1),
            c if c == BPF_ALU64 | BPF_RSH | BPF_K => (format!("r{} >>= {}", i.dst(), i.imm), 1),
            c if c == BPF_JMP | BPF_JSET | BPF_K => (
                format!("if r{} & {:#x} goto {:+}", i.dst(), i.imm, i.off),
                1,
            ),
            c if c == BPF_JMP | BPF_JSGT | BPF_K => {
                (format!("if r{} s> {} goto {:+}", i.dst(), i.imm, i.off), 1)
            }
            c if c == BPF_JMP | BPF_JNE | BPF_X => (
                format!("if r{} != r{} goto {:+}", i.dst(), i.src(), i.off),
                1,
            ),
            c if c == BPF_JMP | BPF_JMP_JA => (format!("goto {:+}", i.off), 1),
            c if c == BPF_JMP | BPF_JGT | BPF_X => (
                format!("if r{} > r{} goto {:+}", i.dst(), i.src(), i.off),
                1,
            ),
            c if c == BPF_JMP | BPF_JEQ | BPF_K => (
                format!("if r{} == {:#x} goto {:+}", i.dst(), i.imm, i.off),
                1,
            ),
            c if c == BPF_JMP | BPF_JNE | BPF_K => (
                format!("if r{} != {:#x} goto {:+}", i.dst(), i.imm, i.off),
                1,
            ),
            c if c == BPF_LD | BPF_DW | BPF_IMM && i.src() == BPF_PSEUDO_MAP_FD => {
                (format!("r{} = map[fd {}] ll", i.dst(), i.imm), 2)
            }
            c if c == BPF_LD | BPF_DW | BPF_IMM => {
                let hi = insns.get(slot + 1).map_or(0, |n| n.imm as u32 as u64);
                let v = (hi << 32) | i.imm as u32 as u64;
                (format!("r{} = {v:#x} ll", i.dst()), 2)
            }
            c if c == BPF_JMP | BPF_CALL => (format!("call {}", i.imm), 1),
            c if c == BPF_JMP | BPF_EXIT => ("exit".to_string(), 1),
            _ => (format!("{i:?}"), 1),
        };
        out.push_str(&format!("{slot}: {text}\n"));
        slot += width;
    }
    out
}

/// `bpf(cmd, attr, size_of::<A>())`, returning the kernel's non-negative result.
///
/// # Safety
/// `attr` must be the attribute prefix the kernel expects for `cmd`, and every pointer stored in it must
/// be valid for the access the kernel makes through it (reads of inputs, writes of outputs) for the whole
/// call.
unsafe fn bpf<A>(cmd: libc::c_int, attr: &mut A) -> io::Result<libc::c_long> {
    // SAFETY: the caller guarantees `attr` matches `cmd`; its size is passed exactly.
    syscall!(syscall(
        libc::SYS_bpf,
        cmd,
        (attr as *mut A).cast::<libc::c_void>(),
        mem::size_of::<A>() as libc::c_uint,
    ))
}

/// Wraps a descriptor the kernel just returned from `bpf()`.
fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: `bpf()` returned this descriptor to us; nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) }
}

/// Copies `name` into a kernel object name (`BPF_OBJ_NAME_LEN` = 16, NUL-terminated, truncated).
fn object_name(name: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (o, b) in out.iter_mut().zip(name.bytes().take(15)) {
        *o = b;
    }
    out
}

/// The `BPF_MAP_CREATE` prefix of `union bpf_attr`.
#[repr(C)]
#[derive(Debug, Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

const _: () = assert!(mem::size_of::<MapCreateAttr>() == 44);

/// Creates a map with 4-byte keys and values (the shape of XSKMAP and array maps).
pub fn map_create(map_type: u32, max_entries: u32, name: &str) -> io::Result<OwnedFd> {
    map_create_sized(map_type, 4, 4, max_entries, name)
}

/// Creates a map of `map_type` whose keys are `key_size` and values `value_size` bytes.
pub fn map_create_sized(
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    name: &str,
) -> io::Result<OwnedFd> {
    let mut attr = MapCreateAttr {
        map_type,
        key_size,
        value_size,
        max_entries,
        map_name: object_name(name),
        ..Default::default()
    };
    // SAFETY: `attr` is the BPF_MAP_CREATE prefix and holds no pointers.
    unsafe { bpf(BPF_MAP_CREATE, &mut attr) }.map(owned)
}

/// The `BPF_MAP_*_ELEM` prefix of `union bpf_attr`.
#[repr(C)]
#[derive(Debug)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

const _: () = assert!(mem::size_of::<MapElemAttr>() == 32);

/// Runs the element command `cmd` on `map[key]` of a map with 4-byte keys and values, passing `value`
/// (none for a deletion) and `flags`.
fn map_elem_u32(
    cmd: libc::c_int,
    map: BorrowedFd<'_>,
    key: u32,
    value: Option<u32>,
    flags: u64,
) -> io::Result<()> {
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: &key as *const u32 as u64,
        value: value.as_ref().map_or(0, |v| v as *const u32 as u64),
        flags,
    };
    // SAFETY: `key` and `value` are live 4-byte locals the kernel only reads during the call.
    unsafe { bpf(cmd, &mut attr) }.map(drop)
}

/// Sets `map[key] = value` for a map with 4-byte keys and values (`BPF_MAP_UPDATE_ELEM`).
pub fn map_update_u32(map: BorrowedFd<'_>, key: u32, value: u32, flags: u64) -> io::Result<()> {
    map_elem_u32(BPF_MAP_UPDATE_ELEM, map, key, Some(value), flags)
}

/// Removes `map[key]` from a map with 4-byte keys (`BPF_MAP_DELETE_ELEM`); `ENOENT` when it has none.
pub fn map_delete_u32(map: BorrowedFd<'_>, key: u32) -> io::Result<()> {
    map_elem_u32(BPF_MAP_DELETE_ELEM, map, key, None, 0)
}

/// One entry of a map, as [`map_entries`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry {
    /// The key (the map's key size).
    pub key: Vec<u8>,
    /// The value (the map's value size) on each possible CPU, in CPU order, for a per-CPU map; the
    /// one value otherwise.
    pub values: Vec<Vec<u8>>,
}

/// The entries of a map, read one at a time ([`map_entries`]).
#[derive(Debug)]
pub struct MapEntries<'a> {
    map: BorrowedFd<'a>,
    /// The key last read (`None` before the first).
    key: Option<Vec<u8>>,
    key_size: usize,
    value_size: usize,
    /// The bytes the kernel gives each CPU's value in a lookup: the value size, rounded up to 8
    /// for a per-CPU map.
    stride: usize,
    /// The values a lookup gives: one per possible CPU for a per-CPU map, else one.
    values: usize,
    done: bool,
}

/// Walks the entries of `map` (`BPF_MAP_GET_NEXT_KEY`, then `BPF_MAP_LOOKUP_ELEM` for each key),
/// with keys and values of the sizes the kernel gives for the map (`BPF_OBJ_GET_INFO_BY_FD`).
///
/// For a per-CPU map (`PERCPU_HASH`, `PERCPU_ARRAY`, `LRU_PERCPU_HASH`, `PERCPU_CGROUP_STORAGE`) a
/// lookup copies the value of every possible CPU, each rounded up to 8 bytes, in CPU order
/// (`bpf_map_value_size`, `for_each_possible_cpu`): the entry holds one value per possible CPU
/// (`/sys/devices/system/cpu/possible`). An entry deleted between its key and its lookup is
/// passed over; when the key last read is deleted, a hash map starts again from its first key, so
/// a map changing during the walk may yield an entry twice.
pub fn map_entries(map: BorrowedFd<'_>) -> io::Result<MapEntries<'_>> {
    // `struct bpf_map_info` opens with `type`, `id`, `key_size`, `value_size`. On a descriptor that
    // is not a map, the element commands fail (`EINVAL`) before writing anything.
    let [map_type, _, key_size, value_size] = info_prefix::<4>(map)?;
    let (key_size, value_size) = (key_size as usize, value_size as usize);
    let per_cpu = matches!(
        map_type,
        BPF_MAP_TYPE_PERCPU_HASH
            | BPF_MAP_TYPE_PERCPU_ARRAY
            | BPF_MAP_TYPE_LRU_PERCPU_HASH
            | BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE
    );
    let (stride, values) = match per_cpu {
        true => (value_size.next_multiple_of(8), possible_cpus()?),
        false => (value_size, 1),
    };
    Ok(MapEntries {
        map,
        key: None,
        key_size,
        value_size,
        stride,
        values,
        done: false,
    })
}

impl MapEntries<'_> {
    /// Reads the key after the last one and its values: `None` after the last key, or when the
    /// entry went between the two calls.
    fn step(&mut self) -> io::Result<Option<MapEntry>> {
        let mut key = vec![0u8; self.key_size];
        if !map_next_key(self.map, self.key.as_deref(), &mut key)? {
            self.done = true;
            return Ok(None);
        }
        let mut value = vec![0u8; self.stride * self.values];
        let found = map_lookup(self.map, &key, &mut value)?;
        self.key = Some(key.clone());
        Ok(found.then(|| MapEntry {
            key,
            values: (0..self.values)
                .map(|cpu| value[cpu * self.stride..][..self.value_size].to_vec())
                .collect(),
        }))
    }
}

impl Iterator for MapEntries<'_> {
    type Item = io::Result<MapEntry>;

    fn next(&mut self) -> Option<io::Result<MapEntry>> {
        while !self.done {
            match self.step() {
                Ok(Some(entry)) => return Some(Ok(entry)),
                Ok(None) => {}
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}

/// Copies `map[key]` into `value` (`BPF_MAP_LOOKUP_ELEM`): `Ok(false)` when the map has no such key.
/// `key` must be the map's key size; `value` what the kernel copies for it (see [`map_entries`]).
fn map_lookup(map: BorrowedFd<'_>, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: key.as_ptr() as u64,
        value: value.as_mut_ptr() as u64,
        flags: 0,
    };
    // SAFETY: the kernel reads the map's key size from `key` and writes its value size (per CPU and
    // rounded, for a per-CPU map) into `value`; `map_entries` sized both from the map's info.
    match unsafe { bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) } {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The key after `key` in `map` (`BPF_MAP_GET_NEXT_KEY`; the first key when `key` is `None` or, in
/// a hash map, no longer in the map), written into `next`: `Ok(false)` after the last key. `key`
/// and `next` must be the map's key size.
fn map_next_key(map: BorrowedFd<'_>, key: Option<&[u8]>, next: &mut [u8]) -> io::Result<bool> {
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: key.map_or(0, |k| k.as_ptr() as u64),
        // The `next_key` member shares the `value` slot of the union.
        value: next.as_mut_ptr() as u64,
        flags: 0,
    };
    // SAFETY: `key` (when given) and `next` are the map's key size, as `map_entries` read it from
    // the map's info; the kernel reads the one and writes the other during the call.
    match unsafe { bpf(BPF_MAP_GET_NEXT_KEY, &mut attr) } {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The number of possible CPUs (`/sys/devices/system/cpu/possible`, the kernel's
/// `cpu_possible_mask`, such as `0-7` or `0,2-3`): a per-CPU map holds one value for each.
fn possible_cpus() -> io::Result<usize> {
    const POSSIBLE: &str = "/sys/devices/system/cpu/possible";
    let text = std::fs::read_to_string(POSSIBLE)
        .map_err(|e| io::Error::new(e.kind(), format!("{POSSIBLE}: {e}")))?;
    count_cpu_list(text.trim()).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{POSSIBLE} reads {text:?}"),
        )
    })
}

/// The CPUs in a kernel CPU list (`0-3,6`).
fn count_cpu_list(list: &str) -> Option<usize> {
    list.split(',').try_fold(0, |count, part| {
        let (first, last) = part.split_once('-').unwrap_or((part, part));
        let (first, last) = (first.parse::<usize>().ok()?, last.parse::<usize>().ok()?);
        Some(count + last.checked_sub(first)? + 1)
    })
}

/// The `BPF_PROG_GET_NEXT_ID` prefix of `union bpf_attr`.
#[repr(C)]
#[derive(Debug)]
struct GetNextIdAttr {
    start_id: u32,
    next_id: u32,
}

/// The id of the loaded program after `start_id` (`BPF_PROG_GET_NEXT_ID`, needs CAP_SYS_ADMIN), or
/// `None` after the last one.
pub fn prog_next_id(start_id: u32) -> io::Result<Option<u32>> {
    let mut attr = GetNextIdAttr {
        start_id,
        next_id: 0,
    };
    // SAFETY: `attr` is the BPF_PROG_GET_NEXT_ID prefix and holds no pointers.
    match unsafe { bpf(BPF_PROG_GET_NEXT_ID, &mut attr) } {
        Ok(_) => Ok(Some(attr.next_id)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The `BPF_OBJ_GET_INFO_BY_FD` prefix of `union bpf_attr`.
#[repr(C)]
#[derive(Debug)]
struct InfoByFdAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

const _: () = assert!(mem::size_of::<InfoByFdAttr>() == 16);

/// The kernel's id of the program or link `fd` (`BPF_OBJ_GET_INFO_BY_FD`): the second `u32` of both
/// `struct bpf_prog_info` (`type`, `id`) and `struct bpf_link_info` (`type`, `id`).
pub fn object_id(fd: BorrowedFd<'_>) -> io::Result<u32> {
    Ok(info_prefix::<2>(fd)?[1])
}

/// The first `N` `u32`s of the kernel's info on the object `fd` (`BPF_OBJ_GET_INFO_BY_FD`: a
/// `struct bpf_prog_info`, `bpf_map_info` or `bpf_link_info`). The kernel fills no more than the
/// `info_len` bytes offered.
fn info_prefix<const N: usize>(fd: BorrowedFd<'_>) -> io::Result<[u32; N]> {
    let mut info = [0u32; N];
    let mut attr = InfoByFdAttr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: mem::size_of_val(&info) as u32,
        info: info.as_mut_ptr() as u64,
    };
    // SAFETY: `info` is a live buffer of `info_len` bytes, which the kernel writes at most.
    unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }?;
    Ok(info)
}

/// The `BPF_PROG_LOAD` prefix of `union bpf_attr`, up to `expected_attach_type`.
#[repr(C)]
#[derive(Debug, Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

const _: () = assert!(mem::size_of::<ProgLoadAttr>() == 72);

/// Why [`prog_load`] failed: the errno and, when the verifier rejected the program, its log.
#[derive(Debug)]
pub struct LoadError {
    /// The `bpf(BPF_PROG_LOAD)` error.
    pub error: io::Error,
    /// The verifier log of a second load attempt with `log_level = 1` (empty if it produced none).
    pub verifier_log: String,
}

/// Size of the verifier log buffer for a failed load (the programs here are a handful of instructions).
const LOG_SIZE: usize = 64 * 1024;

/// `BPF_PROG_LOAD` flag (`linux/bpf.h`, kernel 5.18+): the XDP program handles multi-buffer frames
/// ("xdp.frags"), so drivers may hand it frames larger than one buffer.
pub const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;

/// How many times a load is tried while it answers `EAGAIN`: the verifier gives up when a signal is
/// pending (`do_check` tests `signal_pending` as it walks the program), and the signal is handled
/// on the way back to user space, so the next try starts without it. Under a signal every 50 µs a
/// fifth of the loads here met one; libbpf tries 5 times.
const LOAD_ATTEMPTS: usize = 100;

/// Loads a program (`BPF_PROG_LOAD`) of `prog_type`, with `expected_attach_type` and `prog_flags`
/// (such as [`BPF_F_XDP_HAS_FRAGS`]), under `license`, again while a signal interrupts the verifier
/// (`EAGAIN`, up to [`LOAD_ATTEMPTS`] tries). On failure the load is repeated with the verifier log
/// enabled and the log is returned.
pub fn prog_load(
    prog_type: u32,
    expected_attach_type: u32,
    prog_flags: u32,
    insns: &[Insn],
    license: &CStr,
    name: &str,
) -> Result<OwnedFd, LoadError> {
    // Checked, not truncated: the kernel would read a different count than the slice holds.
    let insn_cnt = u32::try_from(insns.len()).map_err(|_| LoadError {
        error: io::Error::from_raw_os_error(libc::E2BIG),
        verifier_log: String::new(),
    })?;
    let load_once = |log: Option<&mut Vec<u8>>| {
        let mut attr = ProgLoadAttr {
            prog_type,
            insn_cnt,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            prog_flags,
            prog_name: object_name(name),
            expected_attach_type,
            ..Default::default()
        };
        if let Some(buf) = log {
            attr.log_level = 1;
            // Never more than the buffer holds (a longer buffer is offered in part).
            attr.log_size = u32::try_from(buf.len()).unwrap_or(u32::MAX);
            attr.log_buf = buf.as_mut_ptr() as u64;
        }
        // SAFETY: `insns` (insn_cnt entries), `license` (NUL-terminated) and the log buffer (log_size
        // writable bytes) all outlive the call.
        unsafe { bpf(BPF_PROG_LOAD, &mut attr) }.map(owned)
    };
    let load = |mut log: Option<&mut Vec<u8>>| {
        let mut tries = 1;
        loop {
            match load_once(log.as_deref_mut()) {
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && tries < LOAD_ATTEMPTS => {
                    tries += 1;
                }
                done => return done,
            }
        }
    };
    load(None).map_err(|error| {
        let mut buf = vec![0u8; LOG_SIZE];
        let _ = load(Some(&mut buf));
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        LoadError {
            error,
            verifier_log: String::from_utf8_lossy(&buf[..end]).trim_end().to_string(),
        }
    })
}

/// The `BPF_LINK_CREATE` prefix of `union bpf_attr` (`prog_fd`, `target_ifindex`, `attach_type`, `flags`).
#[repr(C)]
#[derive(Debug)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

const _: () = assert!(mem::size_of::<LinkCreateAttr>() == 16);

/// Attaches an XDP program to the interface `ifindex` of the calling thread's network namespace through
/// a BPF link (`BPF_LINK_CREATE`, `BPF_XDP`). `xdp_flags` selects the mode ([`XDP_FLAGS_DRV_MODE`] or
/// [`XDP_FLAGS_SKB_MODE`]). The program stays attached exactly as long as the returned link descriptor
/// (and any duplicate of it) is open: the kernel detaches it when the last one closes, also when the
/// process dies.
pub fn xdp_link_create(prog: BorrowedFd<'_>, ifindex: u32, xdp_flags: u32) -> io::Result<OwnedFd> {
    link_create(prog, ifindex, BPF_XDP, xdp_flags)
}

/// `BPF_LINK_CREATE` of `prog` to `target` (an interface index, or a descriptor: `target_fd` shares
/// the slot of the union with `target_ifindex`) for `attach_type`, with `flags`.
fn link_create(
    prog: BorrowedFd<'_>,
    target: u32,
    attach_type: u32,
    flags: u32,
) -> io::Result<OwnedFd> {
    let mut attr = LinkCreateAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: target,
        attach_type,
        flags,
    };
    // SAFETY: `attr` is the BPF_LINK_CREATE prefix and holds no pointers.
    unsafe { bpf(BPF_LINK_CREATE, &mut attr) }.map(owned)
}

/// Attaches a `BPF_PROG_TYPE_CGROUP_SOCKOPT` program to the cgroup v2 directory `cgroup` for
/// `attach_type` ([`BPF_CGROUP_GETSOCKOPT`]) through a BPF link (`BPF_LINK_CREATE`, kernel 5.7+).
/// A link attaches as if with `BPF_F_ALLOW_MULTI`: the program runs for the sockets of the cgroup and
/// of every cgroup under it, beside any other program attached there, as long as the link descriptor
/// is open; closing it, also by the process's death, detaches it.
pub fn cgroup_link_create(
    prog: BorrowedFd<'_>,
    cgroup: BorrowedFd<'_>,
    attach_type: u32,
) -> io::Result<OwnedFd> {
    link_create(prog, cgroup.as_raw_fd() as u32, attach_type, 0)
}

/// Attaches a tracepoint program to the perf event `event` (a tracepoint opened with
/// `perf_event_open`) through a BPF link (`BPF_LINK_CREATE`, `BPF_PERF_EVENT`, kernel 5.15+). The
/// program runs at the tracepoint, on every CPU, as long as the link descriptor is open; closing it,
/// also by the process's death, detaches it.
pub fn perf_link_create(prog: BorrowedFd<'_>, event: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    link_create(prog, event.as_raw_fd() as u32, BPF_PERF_EVENT, 0)
}

/// The `raw_tracepoint` member of `union bpf_attr`: the tracepoint's name and the program.
#[repr(C)]
#[derive(Debug)]
struct RawTracepointOpenAttr {
    name: u64,
    prog_fd: u32,
    _pad: u32,
}

const _: () = assert!(mem::size_of::<RawTracepointOpenAttr>() == 16);

/// Attaches a raw tracepoint program to the tracepoint `name` (`sys_exit`, `skb_copy_datagram_iovec`:
/// the tracepoint's own name, without its group) through `BPF_RAW_TRACEPOINT_OPEN`, whose descriptor
/// is a link (kernel 5.7+): the program runs there, on every CPU, before any record is built, as long
/// as the descriptor is open; closing it, also by the process's death, detaches it. The kernel
/// copies the name during the call.
pub fn raw_tracepoint_open(prog: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    let mut attr = RawTracepointOpenAttr {
        name: name.as_ptr() as u64,
        prog_fd: prog.as_raw_fd() as u32,
        _pad: 0,
    };
    // SAFETY: `attr` is the BPF_RAW_TRACEPOINT_OPEN member; `name` is NUL-terminated and outlives
    // the call.
    unsafe { bpf(BPF_RAW_TRACEPOINT_OPEN, &mut attr) }.map(owned)
}

/// The `BPF_LINK_DETACH` prefix of `union bpf_attr`.
#[repr(C)]
#[derive(Debug)]
struct LinkDetachAttr {
    link_fd: u32,
}

/// Detaches the link `link` from its hook now (`BPF_LINK_DETACH`, kernel 5.9+), whoever else holds a
/// duplicate of its descriptor (a child forked meanwhile, before its `exec` closes it): the link stays,
/// defunct, until its last descriptor closes, but its program runs no more.
pub fn link_detach(link: BorrowedFd<'_>) -> io::Result<()> {
    let mut attr = LinkDetachAttr {
        link_fd: link.as_raw_fd() as u32,
    };
    // SAFETY: `attr` is the BPF_LINK_DETACH prefix and holds no pointers.
    unsafe { bpf(BPF_LINK_DETACH, &mut attr) }.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;
    use std::os::fd::AsFd;

    #[test]
    fn insn_layout_matches_linux_bpf_h() {
        assert_eq!(offset_of!(Insn, code), 0);
        assert_eq!(offset_of!(Insn, regs), 1);
        assert_eq!(offset_of!(Insn, off), 2);
        assert_eq!(offset_of!(Insn, imm), 4);
    }

    #[test]
    fn attr_layouts_match_linux_bpf_h() {
        assert_eq!(offset_of!(MapCreateAttr, max_entries), 12);
        assert_eq!(offset_of!(MapCreateAttr, numa_node), 24);
        assert_eq!(offset_of!(MapCreateAttr, map_name), 28);
        assert_eq!(offset_of!(MapElemAttr, key), 8);
        assert_eq!(offset_of!(MapElemAttr, value), 16);
        assert_eq!(offset_of!(MapElemAttr, flags), 24);
        assert_eq!(offset_of!(ProgLoadAttr, insns), 8);
        assert_eq!(offset_of!(ProgLoadAttr, license), 16);
        assert_eq!(offset_of!(ProgLoadAttr, log_level), 24);
        assert_eq!(offset_of!(ProgLoadAttr, log_buf), 32);
        assert_eq!(offset_of!(ProgLoadAttr, kern_version), 40);
        assert_eq!(offset_of!(ProgLoadAttr, prog_name), 48);
        assert_eq!(offset_of!(ProgLoadAttr, prog_ifindex), 64);
        assert_eq!(offset_of!(ProgLoadAttr, expected_attach_type), 68);
        assert_eq!(offset_of!(LinkCreateAttr, target_ifindex), 4);
        assert_eq!(offset_of!(LinkCreateAttr, attach_type), 8);
        assert_eq!(offset_of!(LinkCreateAttr, flags), 12);
        assert_eq!(offset_of!(GetNextIdAttr, next_id), 4);
        assert_eq!(offset_of!(InfoByFdAttr, info_len), 4);
        assert_eq!(offset_of!(InfoByFdAttr, info), 8);
    }

    #[test]
    fn instruction_encoding() {
        // Encodings as `llvm-objdump -d` prints them for the same instructions.
        let bytes = |i: Insn| -> [u8; 8] {
            let mut b = [0u8; 8];
            b[0] = i.code;
            b[1] = i.regs;
            b[2..4].copy_from_slice(&i.off.to_le_bytes());
            b[4..].copy_from_slice(&i.imm.to_le_bytes());
            b
        };
        assert_eq!(
            bytes(Insn::mov64_imm(Reg::R0, 2)),
            [0xb7, 0, 0, 0, 2, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::load_u32(Reg::R2, Reg::R1, 16)),
            [0x61, 0x12, 16, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::load_map_fd(Reg::R1, 7)[0]),
            [0x18, 0x11, 0, 0, 7, 0, 0, 0]
        );
        assert_eq!(bytes(Insn::call(51)), [0x85, 0, 0, 0, 51, 0, 0, 0]);
        assert_eq!(bytes(Insn::exit()), [0x95, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            bytes(Insn::atomic_add_u64(Reg::R0, 8, Reg::R1)),
            [0xdb, 0x10, 8, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::store_u64(Reg::R10, -8, Reg::R0)),
            [0x7b, 0x0a, 0xf8, 0xff, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::sub32_reg(Reg::R1, Reg::R2)),
            [0x1c, 0x21, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn map_entries_have_the_maps_sizes_and_a_value_per_cpu_where_it_is_per_cpu() {
        if !testnet::privileged(
            "map_entries_have_the_maps_sizes_and_a_value_per_cpu_where_it_is_per_cpu",
        ) {
            return;
        }
        let shared = map_create_sized(BPF_MAP_TYPE_LRU_HASH, 4, 4, 8, "zcnet_test").unwrap();
        for key in 1..=3 {
            map_update_u32(shared.as_fd(), key, key * 10, BPF_ANY).unwrap();
        }
        let word = |bytes: &[u8]| u32::from_ne_bytes(bytes.try_into().unwrap());
        let mut entries: Vec<(u32, u32)> = map_entries(shared.as_fd())
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                assert_eq!(e.values.len(), 1, "{e:?}");
                (word(&e.key), word(&e.values[0]))
            })
            .collect();
        entries.sort_unstable();
        assert_eq!(entries, [(1, 10), (2, 20), (3, 30)]);
        // Values of 12 bytes, which the kernel rounds up to 16 for each CPU.
        let per_cpu = map_create_sized(BPF_MAP_TYPE_PERCPU_ARRAY, 4, 12, 2, "zcnet_test").unwrap();
        let cpus = possible_cpus().unwrap();
        let entries: Vec<MapEntry> = map_entries(per_cpu.as_fd())
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(entries.len(), 2, "{entries:?}");
        for (index, entry) in (0u32..).zip(&entries) {
            assert_eq!(word(&entry.key), index);
            assert_eq!(entry.values, vec![vec![0u8; 12]; cpus]);
        }
    }

    #[test]
    fn cpu_lists_are_counted() {
        assert_eq!(count_cpu_list("0-1"), Some(2));
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list("0,2-5"), Some(5));
        assert_eq!(count_cpu_list("3-1"), None);
        assert_eq!(count_cpu_list("x"), None);
    }

    #[test]
    fn object_names_are_truncated_and_terminated() {
        assert_eq!(&object_name("xsk")[..4], b"xsk\0");
        let long = object_name("a_very_long_program_name");
        assert_eq!(long[15], 0);
        assert_eq!(&long[..15], b"a_very_long_pro");
    }
}
