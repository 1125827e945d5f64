//! The observer's BPF programs, one per tracepoint, assembled here from the running kernel's record
//! layouts (tracefs `format` files) and register layout (its BTF).
//!
//! Every program starts with the scope test (the current task's tgid or cgroup), then adds to this
//! CPU's value of the counters map under the key `{ tgid: u32, fd: i32 }` (fd -1: the process as a
//! whole). Sends and receives are seen where the kernel's socket layer returns from them (the raw
//! `sock_send_length` and `sock_recv_length` tracepoints), so no other system call runs a program;
//! the call that made one, its descriptor and its arguments are in the task's saved registers, and
//! the tracepoint gives the result: no state kept between a call's entry and its exit. Kernel
//! memory (the saved registers, the task's credentials and limits) is read through pointers the
//! kernel's BTF types (`bpf_get_current_task_btf`), with plain loads the verifier checks, not copies.
//! The stack frame: the counters key at -8, an io_uring request key at -16, a word at -32, a zeroed
//! counters value below it, user-memory copies at [`USER_A`] and [`USER_B`], and the current task's
//! pointer at [`TASK`]. A helper call is dear (tens of ns each on a host with return-stack
//! mitigations): what a plain load of a BTF-typed pointer can read is read that way.

use std::io;
use std::ops::RangeInclusive;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::Scope;
use super::asm::{Asm, Label};
use super::counters::{Counter, Counters};
use super::tracefs::Event;
use crate::sys::bpf::{BPF_ANY, BPF_NOEXIST, Insn, Reg, helper, sockopt};

/// `MSG_ZEROCOPY` (`include/linux/socket.h`).
const MSG_ZEROCOPY: i32 = 0x0400_0000;
/// `MSG_ERRQUEUE`.
const MSG_ERRQUEUE: i32 = 0x2000;
/// `MSG_TRUNC`.
const MSG_TRUNC: i32 = 0x20;
/// `SOCK_STREAM`.
const SOCK_STREAM: i32 = 1;
/// `SOL_TCP` / `IPPROTO_TCP`.
const SOL_TCP: i32 = 6;
/// `TCP_ZEROCOPY_RECEIVE` (`include/uapi/linux/tcp.h`).
const TCP_ZEROCOPY_RECEIVE: i32 = 35;
/// `IORING_OP_SEND_ZC` (`enum io_uring_op`, `include/uapi/linux/io_uring.h`).
const IORING_OP_SEND_ZC: i32 = 47;
/// `IORING_OP_SENDMSG_ZC`.
const IORING_OP_SENDMSG_ZC: i32 = 48;
/// `IORING_CQE_F_NOTIF`: the CQE is a zero-copy notification.
const IORING_CQE_F_NOTIF: i32 = 1 << 3;
/// Bit 31 of a 32-bit value: the sign of an `int`, and `IORING_NOTIF_USAGE_ZC_COPIED` in a
/// notification's result.
const BIT31: i32 = i32::MIN;
/// `SO_EE_ORIGIN_ZEROCOPY` (`include/uapi/linux/errqueue.h`).
const SO_EE_ORIGIN_ZEROCOPY: i32 = 5;
/// `SO_EE_CODE_ZEROCOPY_COPIED`.
const SO_EE_CODE_ZEROCOPY_COPIED: i32 = 1;

const KEY: i16 = -8;
/// The key of the io_uring requests map (a request's address).
const REQUEST_KEY: i16 = -16;
/// 16 bytes: the requests map's value, a word read from the kernel.
const WORD: i16 = -32;
const ZERO: i16 = WORD - Counters::SIZE as i16;
/// 64 bytes for a copy of user memory (a `struct user_msghdr`, a `struct tcp_zerocopy_receive`).
const USER_A: i16 = ZERO - 64;
/// 32 bytes for a second copy (a `struct cmsghdr` and the `struct sock_extended_err` after it).
const USER_B: i16 = USER_A - 32;
/// The current task's BTF pointer, kept by [`Prog::saved_registers`] for the loads that name the
/// process (its tgid) without a helper call.
const TASK: i16 = USER_B - 8;

/// `struct user_msghdr`: `msg_control` and `msg_controllen` (after name, namelen, iov, iovlen).
const MSGHDR_CONTROL: i16 = 32;
const MSGHDR_CONTROLLEN: i16 = 40;
const MSGHDR_SIZE: i32 = 56;
/// A `struct cmsghdr` (16 bytes) and `struct sock_extended_err` after it: `ee_errno` (u32),
/// `ee_origin`, `ee_type`, `ee_code`, `ee_pad` (u8 each), `ee_info`, `ee_data` (u32).
const CMSG_EE_ERRNO: i16 = 16;
const CMSG_EE_ORIGIN: i16 = 20;
const CMSG_EE_CODE: i16 = 22;
const CMSG_EE_INFO: i16 = 24;
const CMSG_EE_DATA: i16 = 28;
const CMSG_EE_END: i32 = 32;
/// `struct tcp_zerocopy_receive`: `length` (u32 at 8) and `copybuf_len` (s32 at 32).
const ZC_LENGTH: i16 = 8;
const ZC_COPYBUF_LEN: i16 = 32;
const ZC_READ: i32 = 40;

/// The observer's maps, as the programs refer to them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Maps<'a> {
    /// Per-CPU hash `{tgid, fd}` -> `[u64; Counter::ALL.len()]`.
    pub counters: BorrowedFd<'a>,
    /// Hash `tgid` -> `{pages: u64, peak: u64, uid: u32, exempt: u32, limit: u64}`: the locked
    /// memory of the process's user at its last zero-copy completion, the most seen, and what the
    /// kernel holds it to; with where to read them (`None` when the kernel's BTF does not say).
    pub locked: Option<(BorrowedFd<'a>, LockedLayout)>,
}

/// Where a task's user's locked memory and the limit it is held to are (offsets from the kernel's
/// BTF): `task_struct.cred`, `cred.uid` (the real uid, a `kuid_t`: as the initial namespace
/// names it), `cred.user`, `user_struct.locked_vm`; `cred.cap_effective`,
/// `cred.user_ns`, `user_namespace.level` (`CAP_IPC_LOCK` exempts only in the initial namespace,
/// level 0); `task_struct.signal` and `signal_struct.rlim` (`RLIMIT_MEMLOCK`'s `rlim_cur`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LockedLayout {
    pub cred: i16,
    pub uid: i16,
    pub user: i16,
    pub locked_vm: i16,
    pub cap_effective: i16,
    pub user_ns: i16,
    pub ns_level: i16,
    pub signal: i16,
    pub rlim: i16,
}

/// `RLIMIT_MEMLOCK` and the size of a `struct rlimit` (`rlim_cur`, `rlim_max`).
const RLIMIT_MEMLOCK: i16 = 8;
const RLIMIT_SIZE: i16 = 16;
/// Bit of `CAP_IPC_LOCK` in a capability set.
const CAP_IPC_LOCK: i32 = 14;

/// Offsets in the locked memory map's value.
pub(super) const LOCKED_PAGES: usize = 0;
pub(super) const LOCKED_PEAK: usize = 8;
pub(super) const LOCKED_UID: usize = 16;
pub(super) const LOCKED_EXEMPT: usize = 20;
pub(super) const LOCKED_LIMIT: usize = 24;
/// Bytes of the locked memory map's value.
pub(super) const LOCKED_VALUE: u32 = 32;

/// How much to add to a counter.
#[derive(Debug, Clone, Copy)]
enum Amount {
    One,
    Reg(Reg),
}

/// A program being built: the assembler and the label of its common exit.
struct Prog<'a> {
    asm: Asm,
    maps: Maps<'a>,
    exit: Label,
    scope: Scope,
    /// Once [`Prog::saved_registers`] has kept the task's pointer at [`TASK`]: the offset of `tgid`
    /// in `struct task_struct`.
    task_tgid: Option<i16>,
}

impl<'a> Prog<'a> {
    /// The start of every program: keep the context in r6, leave at once outside `scope`.
    fn new(scope: Scope, maps: Maps<'a>) -> Prog<'a> {
        let mut asm = Asm::default();
        let exit = asm.label();
        asm.push([Insn::mov64_reg(Reg::R6, Reg::R1)]);
        let mut prog = Prog {
            asm,
            maps,
            exit,
            scope,
            task_tgid: None,
        };
        match scope {
            Scope::Process(tgid) => {
                prog.asm.push([
                    Insn::call(helper::GET_CURRENT_PID_TGID),
                    Insn::rsh64_imm(Reg::R0, 32),
                ]);
                prog.asm.push(Insn::load_imm64(Reg::R1, u64::from(tgid)));
                prog.exit_if(Insn::jump_if_not_equal_reg(Reg::R0, Reg::R1, 0));
            }
            Scope::Cgroup(id) => {
                prog.asm.push([Insn::call(helper::GET_CURRENT_CGROUP_ID)]);
                prog.asm.push(Insn::load_imm64(Reg::R1, id));
                prog.exit_if(Insn::jump_if_not_equal_reg(Reg::R0, Reg::R1, 0));
            }
            Scope::All => {}
        }
        prog
    }

    fn finish(self) -> Vec<Insn> {
        self.finish_returning(0)
    }

    /// Ends the program: every path leaves through the common exit, returning `ret`.
    fn finish_returning(mut self, ret: i32) -> Vec<Insn> {
        self.asm.bind(self.exit);
        self.asm.push([Insn::mov64_imm(Reg::R0, ret), Insn::exit()]);
        self.asm.finish()
    }

    fn exit_if(&mut self, jump: Insn) {
        let exit = self.exit;
        self.asm.jump(jump, exit);
    }

    /// Leaves unless `reg` (64-bit, signed) is greater than `imm`.
    fn exit_unless_greater(&mut self, reg: Reg, imm: i32) {
        let go = self.asm.label();
        self.asm.jump(Insn::jump_if_signed_greater(reg, imm, 0), go);
        self.exit_if(Insn::jump(0));
        self.asm.bind(go);
    }

    /// Leaves unless `reg`, a raw tracepoint's zero-extended `int` result, is a positive count.
    fn exit_unless_sent(&mut self, reg: Reg) {
        self.exit_if(Insn::jump_if_equal(reg, 0, 0));
        self.exit_if(Insn::jump_if_any_bit(reg, BIT31, 0));
    }

    /// r6 = the current task's saved user registers (`bpf_task_pt_regs(bpf_get_current_task_btf())`,
    /// a `struct pt_regs` the verifier knows the type of), r8 = the system call's number; leaves
    /// unless the call is of the 64-bit ABI (see [`SyscallRegs::native`]). The task's pointer is
    /// kept at [`TASK`] for the code after. r7 and r9 survive.
    fn saved_registers(&mut self, regs: &SyscallRegs) {
        let (native, abi) = regs.native;
        self.task_tgid = Some(regs.task_tgid);
        self.asm.push([
            Insn::call(helper::GET_CURRENT_TASK_BTF),
            Insn::store_u64(Reg::R10, TASK, Reg::R0),
            Insn::mov64_reg(Reg::R1, Reg::R0),
            Insn::call(helper::TASK_PT_REGS),
            Insn::mov64_reg(Reg::R6, Reg::R0),
            Insn::load_u16(Reg::R1, Reg::R6, native),
        ]);
        self.exit_if(Insn::jump_if_not_equal(Reg::R1, abi, 0));
        self.asm.push([Insn::load_u64(Reg::R8, Reg::R6, regs.nr)]);
    }

    /// `dst` = the record field `name` of `event` (zero-extended to 64 bits).
    fn field(&mut self, dst: Reg, event: &Event, name: &str) -> io::Result<()> {
        let (off, size) = event.field(name)?;
        let load = match size {
            8 => Insn::load_u64(dst, Reg::R6, off),
            4 => Insn::load_u32(dst, Reg::R6, off),
            2 => Insn::load_u16(dst, Reg::R6, off),
            1 => Insn::load_u8(dst, Reg::R6, off),
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("field {name} of {} is {size} bytes", event.name),
                ));
            }
        };
        self.asm.push([load]);
        Ok(())
    }

    /// `r1 = map` (two slots).
    fn map(&mut self, reg: Reg, map: BorrowedFd<'_>) {
        self.asm.push(Insn::load_map_fd(reg, map.as_raw_fd()));
    }

    /// `reg = r10 + off`: a pointer into the stack.
    fn stack_ptr(&mut self, reg: Reg, off: i16) {
        self.asm.push([
            Insn::mov64_reg(reg, Reg::R10),
            Insn::add64_imm(reg, i32::from(off)),
        ]);
    }

    /// r0 = the current task's BTF pointer: the one kept at [`TASK`] when there is one, else
    /// `bpf_get_current_task_btf()`.
    fn current_task(&mut self) {
        match self.task_tgid {
            Some(_) => self.asm.push([Insn::load_u64(Reg::R0, Reg::R10, TASK)]),
            None => self.asm.push([Insn::call(helper::GET_CURRENT_TASK_BTF)]),
        }
    }

    /// r0 = the calling process's tgid: the scope's own for a [`Scope::Process`], else loaded from
    /// the task kept at [`TASK`] when there is one, else `bpf_get_current_pid_tgid() >> 32`.
    fn current_tgid(&mut self) {
        match (self.scope, self.task_tgid) {
            (Scope::Process(tgid), _) => self.asm.push([Insn::mov64_imm(Reg::R0, tgid as i32)]),
            (_, Some(tgid)) => {
                self.current_task();
                self.asm.push([Insn::load_u32(Reg::R0, Reg::R0, tgid)]);
            }
            (_, None) => self.asm.push([
                Insn::call(helper::GET_CURRENT_PID_TGID),
                Insn::rsh64_imm(Reg::R0, 32),
            ]),
        }
    }

    /// The counters key of the socket whose descriptor is in `fd` (or, with `None`, of the process).
    fn owner_key(&mut self, fd: Option<Reg>) {
        self.current_tgid();
        self.asm.push([Insn::store_u32(Reg::R10, KEY, Reg::R0)]);
        match fd {
            Some(fd) => self.asm.push([Insn::store_u32(Reg::R10, KEY + 4, fd)]),
            None => self.asm.push([
                Insn::mov64_imm(Reg::R1, -1),
                Insn::store_u32(Reg::R10, KEY + 4, Reg::R1),
            ]),
        }
    }

    /// Adds to this CPU's counters under the key at [`KEY`], creating the entry (zeroed) first if
    /// the map has none; leaves when the map is full. Registers r6..r9 survive.
    fn add(&mut self, amounts: &[(Counter, Amount)]) {
        let counters = self.maps.counters;
        let found = self.asm.label();
        self.lookup(counters, KEY);
        self.asm.jump(Insn::jump_if_not_equal(Reg::R0, 0, 0), found);
        for word in 0..Counter::ALL.len() as i16 {
            self.asm
                .push([Insn::store_u64_imm(Reg::R10, ZERO + 8 * word, 0)]);
        }
        self.map(Reg::R1, counters);
        self.stack_ptr(Reg::R2, KEY);
        self.stack_ptr(Reg::R3, ZERO);
        self.asm.push([
            Insn::mov64_imm(Reg::R4, BPF_NOEXIST as i32),
            Insn::call(helper::MAP_UPDATE_ELEM),
        ]);
        self.lookup(counters, KEY);
        self.exit_if(Insn::jump_if_equal(Reg::R0, 0, 0));
        self.asm.bind(found);
        for &(counter, amount) in amounts {
            let off = 8 * counter as i16;
            match amount {
                Amount::One => self.asm.push([
                    Insn::mov64_imm(Reg::R1, 1),
                    Insn::atomic_add_u64(Reg::R0, off, Reg::R1),
                ]),
                Amount::Reg(src) => self.asm.push([Insn::atomic_add_u64(Reg::R0, off, src)]),
            }
        }
    }

    /// `r0 = lookup(map, r10 + key)`.
    fn lookup(&mut self, map: BorrowedFd<'_>, key: i16) {
        self.map(Reg::R1, map);
        self.stack_ptr(Reg::R2, key);
        self.asm.push([Insn::call(helper::MAP_LOOKUP_ELEM)]);
    }

    /// Records the locked memory of the current task's user (`current->cred->user->locked_vm`, the
    /// pages the kernel charges against `RLIMIT_MEMLOCK`, MSG_ZEROCOPY's among them) under the
    /// process, the most seen, and the limit the kernel holds the task to (`RLIMIT_MEMLOCK`, or
    /// none with `CAP_IPC_LOCK` in the initial user namespace); uses the stack at [`USER_A`] and
    /// [`REQUEST_KEY`]. The task's fields are loaded through its BTF-typed pointer
    /// (`bpf_get_current_task_btf`): the verifier checks each load against the kernel's types, and
    /// one that would fault reads 0. A pointer on the way that is NULL (`cred` is `__rcu`) ends the
    /// sample. Goes on after it in any case; registers r6..r9 survive.
    fn sample_locked_memory(&mut self) {
        let Some((map, layout)) = self.maps.locked else {
            return;
        };
        let done = self.asm.label();
        let at = |off: usize| USER_A + off as i16;
        // r0: the task, r1: its cred, r2: a pointer on the way, r3 and r4: values.
        self.current_task();
        self.asm
            .push([Insn::load_u64(Reg::R1, Reg::R0, layout.cred)]);
        self.asm.jump(Insn::jump_if_equal(Reg::R1, 0, 0), done);
        self.asm
            .push([Insn::load_u64(Reg::R2, Reg::R1, layout.user)]);
        self.asm.jump(Insn::jump_if_equal(Reg::R2, 0, 0), done);
        self.asm.push([
            Insn::load_u32(Reg::R3, Reg::R1, layout.uid),
            Insn::store_u32(Reg::R10, at(LOCKED_UID), Reg::R3),
            Insn::load_u64(Reg::R3, Reg::R2, layout.locked_vm),
            Insn::store_u64(Reg::R10, at(LOCKED_PAGES), Reg::R3),
            // exempt = CAP_IPC_LOCK effective and the initial user namespace (level 0).
            Insn::load_u64(Reg::R3, Reg::R1, layout.cap_effective),
            Insn::rsh64_imm(Reg::R3, CAP_IPC_LOCK),
            Insn::and64_imm(Reg::R3, 1),
            Insn::load_u64(Reg::R2, Reg::R1, layout.user_ns),
        ]);
        self.asm.jump(Insn::jump_if_equal(Reg::R2, 0, 0), done);
        self.asm.push([
            Insn::load_u32(Reg::R4, Reg::R2, layout.ns_level),
            Insn::jump_if_equal(Reg::R4, 0, 1),
            Insn::mov64_imm(Reg::R3, 0),
            Insn::store_u32(Reg::R10, at(LOCKED_EXEMPT), Reg::R3),
            Insn::load_u64(Reg::R2, Reg::R0, layout.signal),
        ]);
        self.asm.jump(Insn::jump_if_equal(Reg::R2, 0, 0), done);
        self.asm.push([
            Insn::load_u64(Reg::R3, Reg::R2, layout.rlim + RLIMIT_MEMLOCK * RLIMIT_SIZE),
            Insn::store_u64(Reg::R10, at(LOCKED_LIMIT), Reg::R3),
        ]);
        self.current_tgid();
        self.asm
            .push([Insn::store_u32(Reg::R10, REQUEST_KEY, Reg::R0)]);
        self.lookup(map, REQUEST_KEY);
        let create = self.asm.label();
        self.asm.jump(Insn::jump_if_equal(Reg::R0, 0, 0), create);
        for (off, wide) in [
            (LOCKED_UID, false),
            (LOCKED_EXEMPT, false),
            (LOCKED_LIMIT, true),
            (LOCKED_PAGES, true),
        ] {
            let (load, store) = match wide {
                true => (
                    Insn::load_u64(Reg::R1, Reg::R10, at(off)),
                    Insn::store_u64(Reg::R0, off as i16, Reg::R1),
                ),
                false => (
                    Insn::load_u32(Reg::R1, Reg::R10, at(off)),
                    Insn::store_u32(Reg::R0, off as i16, Reg::R1),
                ),
            };
            self.asm.push([load, store]);
        }
        // r1 holds the pages: the peak grows to them.
        self.asm
            .push([Insn::load_u64(Reg::R2, Reg::R0, LOCKED_PEAK as i16)]);
        self.asm
            .jump(Insn::jump_if_greater_reg(Reg::R2, Reg::R1, 0), done);
        self.asm
            .push([Insn::store_u64(Reg::R0, LOCKED_PEAK as i16, Reg::R1)]);
        self.asm.jump(Insn::jump(0), done);
        self.asm.bind(create);
        self.asm.push([
            Insn::load_u64(Reg::R1, Reg::R10, at(LOCKED_PAGES)),
            Insn::store_u64(Reg::R10, at(LOCKED_PEAK), Reg::R1),
        ]);
        self.map(Reg::R1, map);
        self.stack_ptr(Reg::R2, REQUEST_KEY);
        self.stack_ptr(Reg::R3, USER_A);
        self.asm.push([
            Insn::mov64_imm(Reg::R4, BPF_ANY as i32),
            Insn::call(helper::MAP_UPDATE_ELEM),
        ]);
        self.asm.bind(done);
    }

    /// Copies `len` bytes of user memory at `src` to the stack at `to`; leaves if the read fails.
    fn read_user(&mut self, to: i16, len: i32, src: Reg) {
        self.stack_ptr(Reg::R1, to);
        self.asm.push([
            Insn::mov64_imm(Reg::R2, len),
            Insn::mov64_reg(Reg::R3, src),
            Insn::call(helper::PROBE_READ_USER),
        ]);
        self.exit_if(Insn::jump_if_not_equal(Reg::R0, 0, 0));
    }
}

/// A program's builder, given the io_uring requests map: an LRU hash of the zero-copy requests in
/// flight (`struct io_kiocb *` -> 0), which only these programs use.
type Build = fn(Scope, Maps<'_>, BorrowedFd<'_>, &Event) -> io::Result<Vec<Insn>>;

/// Each tracepoint (group, event) opened as a perf event, and the program the observer runs there.
pub(super) const TRACEPOINTS: [(&str, &str, Build); 2] = [
    ("io_uring", "io_uring_submit_req", uring_submit),
    ("io_uring", "io_uring_complete", uring_complete),
];

/// Where the socket programs find the system call's number and arguments among the task's saved
/// user registers (offsets in `struct pt_regs`, from the kernel's BTF), and the numbers of the calls
/// they count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SyscallRegs {
    /// The call's number (`orig_ax` on x86-64).
    pub nr: i16,
    /// The first four arguments (`di`, `si`, `dx`, `r10`).
    pub args: [i16; 4],
    /// A register and the value it holds only for a call of the 64-bit ABI (`cs` and `__USER_CS`):
    /// a 32-bit task's calls have other numbers.
    pub native: (i16, i32),
    /// `sendmsg`, `sendto`, `sendmmsg`, `recvmsg`, `getsockopt`.
    pub numbers: SyscallNumbers,
    /// The offset of `tgid` in `struct task_struct`: the programs that read the saved registers
    /// name the calling process by a load from the task rather than a helper call.
    pub task_tgid: i16,
}

/// The system call numbers of the architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SyscallNumbers {
    pub sendmsg: i32,
    pub sendto: i32,
    pub sendmmsg: i32,
    pub recvmsg: i32,
    pub getsockopt: i32,
}

/// The raw `sock_send_length` tracepoint (arguments: the `struct sock *`, the `int` result and
/// flags the kernel passes as 0), which `sock_sendmsg` fires as each send returns: counts the
/// sends of the `sendmsg`, `sendto` and `sendmmsg` calls (one per message) that sent bytes,
/// zero-copy when the call's flags asked for `MSG_ZEROCOPY`. The call, its descriptor and flags
/// come from the task's saved registers, typed by the kernel's BTF (`bpf_task_pt_regs` of
/// `bpf_get_current_task_btf`), which the program loads in place; a send made for another system
/// call (`write`, an io_uring request) is left out, as is a 32-bit task's (its code segment is not
/// `__USER_CS`). A failed send leaves before any helper runs.
pub(super) fn socket_send(scope: Scope, maps: Maps<'_>, regs: &SyscallRegs) -> Vec<Insn> {
    let numbers = regs.numbers;
    let mut p = Prog::new(scope, maps);
    p.asm.push([Insn::load_u64(Reg::R9, Reg::R6, 8)]);
    p.exit_unless_sent(Reg::R9);
    p.saved_registers(regs);
    let (flags_in_dx, flags_in_r10) = (p.asm.label(), p.asm.label());
    p.asm.jump(
        Insn::jump_if_equal(Reg::R8, numbers.sendmsg, 0),
        flags_in_dx,
    );
    for nr in [numbers.sendto, numbers.sendmmsg] {
        p.asm
            .jump(Insn::jump_if_equal(Reg::R8, nr, 0), flags_in_r10);
    }
    p.exit_if(Insn::jump(0));
    p.asm.bind(flags_in_dx);
    p.asm.push([Insn::load_u64(Reg::R8, Reg::R6, regs.args[2])]);
    let send = p.asm.label();
    p.asm.jump(Insn::jump(0), send);
    p.asm.bind(flags_in_r10);
    p.asm.push([Insn::load_u64(Reg::R8, Reg::R6, regs.args[3])]);
    p.asm.bind(send);
    p.asm.push([Insn::load_u64(Reg::R7, Reg::R6, regs.args[0])]);
    count_send(&mut p);
    p.finish()
}

/// The raw `sock_recv_length` tracepoint (arguments: the `struct sock *`, the `int` result and the
/// receive's flags), which `sock_recvmsg` fires as each receive returns: the bytes a receive
/// returned are the bytes it copied to the process (counted under the process). With `MSG_TRUNC`
/// a stream socket's receive discards bytes without copying them, and is left out; a datagram
/// socket's returns the datagram's length, counted as copied (more than the copy only when the
/// datagram did not fit). The socket's type is read at `sk_type` (its offset in `struct sock`; a
/// `MSG_TRUNC` receive is left out without it). With `errqueue`, an error-queue read
/// (`MSG_ERRQUEUE`) by a `recvmsg` call is read for the zero-copy completion it took (see
/// [`count_completions`]); without, it is left out. Everything but a completion or a `MSG_TRUNC`
/// receive is decided from the tracepoint's arguments alone, before any helper runs.
pub(super) fn socket_receive(
    scope: Scope,
    maps: Maps<'_>,
    sk_type: Option<i32>,
    errqueue: Option<&SyscallRegs>,
) -> Vec<Insn> {
    let mut p = Prog::new(scope, maps);
    // The kernel passes each `int` zero-extended (`__CAST_TO_U64`): bit 31 is a negative one.
    p.asm.push([
        Insn::load_u64(Reg::R9, Reg::R6, 8),
        Insn::load_u64(Reg::R8, Reg::R6, 16),
    ]);
    p.exit_if(Insn::jump_if_any_bit(Reg::R9, BIT31, 0));
    let (completion, truncating, count) = (p.asm.label(), p.asm.label(), p.asm.label());
    p.asm
        .jump(Insn::jump_if_any_bit(Reg::R8, MSG_ERRQUEUE, 0), completion);
    p.exit_if(Insn::jump_if_equal(Reg::R9, 0, 0));
    p.asm
        .jump(Insn::jump_if_any_bit(Reg::R8, MSG_TRUNC, 0), truncating);
    p.asm.bind(count);
    p.owner_key(None);
    p.add(&[(Counter::RxCopiedBytes, Amount::Reg(Reg::R9))]);
    p.exit_if(Insn::jump(0));
    p.asm.bind(truncating);
    match sk_type {
        Some(off) => {
            p.stack_ptr(Reg::R1, WORD);
            p.asm.push([
                Insn::mov64_imm(Reg::R2, 2),
                Insn::load_u64(Reg::R3, Reg::R6, 0),
                Insn::add64_imm(Reg::R3, off),
                Insn::call(helper::PROBE_READ_KERNEL),
            ]);
            p.exit_if(Insn::jump_if_not_equal(Reg::R0, 0, 0));
            p.asm.push([Insn::load_u16(Reg::R1, Reg::R10, WORD)]);
            p.exit_if(Insn::jump_if_equal(Reg::R1, SOCK_STREAM, 0));
            p.asm.jump(Insn::jump(0), count);
        }
        None => p.exit_if(Insn::jump(0)),
    }
    p.asm.bind(completion);
    if let Some(regs) = errqueue {
        p.saved_registers(regs);
        p.exit_if(Insn::jump_if_not_equal(Reg::R8, regs.numbers.recvmsg, 0));
        p.asm.push([
            Insn::load_u64(Reg::R7, Reg::R6, regs.args[0]),
            Insn::load_u64(Reg::R8, Reg::R6, regs.args[1]),
        ]);
        count_completions(&mut p);
    }
    p.finish()
}

/// What a `getsockopt` cgroup program returns to leave the call's result and value as the kernel
/// made them (0 would fail the call with `EPERM`).
const SOCKOPT_LEAVE: i32 = 1;

/// `getsockopt`'s cgroup hook (`BPF_CGROUP_GETSOCKOPT`), which the kernel runs for
/// `TCP_ZEROCOPY_RECEIVE` after the receive, under the socket's lock, with its own copy of the
/// struct as the value (`do_tcp_getsockopt`) and the receive's result as `retval`; for any other
/// option, after the call with a copy of the caller's value. For a `TCP_ZEROCOPY_RECEIVE` that
/// succeeded, counts what it mapped (`length`) and copied into the copy buffer (`copybuf_len`,
/// when the caller's struct reaches it and it is not an error); the descriptor comes from the task's
/// saved registers, when the call is the `getsockopt` system call. Every other call leaves on the
/// option's level and name, before any helper but the scope test. Returns 1 on every path.
pub(super) fn zc_receive_hook(scope: Scope, maps: Maps<'_>, regs: &SyscallRegs) -> Vec<Insn> {
    let mut p = Prog::new(scope, maps);
    for (field, value) in [
        (sockopt::LEVEL, SOL_TCP),
        (sockopt::OPTNAME, TCP_ZEROCOPY_RECEIVE),
        (sockopt::RETVAL, 0),
    ] {
        p.asm.push([Insn::load_u32(Reg::R1, Reg::R6, field)]);
        p.exit_if(Insn::jump_if_not_equal(Reg::R1, value, 0));
    }
    p.asm.push([Insn::mov64_reg(Reg::R7, Reg::R6)]);
    p.saved_registers(regs);
    p.exit_if(Insn::jump_if_not_equal(Reg::R8, regs.numbers.getsockopt, 0));
    // r1: the struct, r2: its end (the verifier checks each load against it).
    let end_of = |field: i16| field + 4;
    p.asm.push([
        Insn::load_u64(Reg::R1, Reg::R7, sockopt::OPTVAL),
        Insn::load_u64(Reg::R2, Reg::R7, sockopt::OPTVAL_END),
        Insn::mov64_reg(Reg::R3, Reg::R1),
        Insn::add64_imm(Reg::R3, i32::from(end_of(ZC_LENGTH))),
    ]);
    p.exit_if(Insn::jump_if_greater_reg(Reg::R3, Reg::R2, 0));
    p.asm.push([
        Insn::load_u32(Reg::R8, Reg::R1, ZC_LENGTH),
        Insn::mov64_imm(Reg::R9, 0),
        Insn::mov64_reg(Reg::R3, Reg::R1),
        Insn::add64_imm(Reg::R3, i32::from(end_of(ZC_COPYBUF_LEN))),
        Insn::jump_if_greater_reg(Reg::R3, Reg::R2, 1),
        Insn::load_u32(Reg::R9, Reg::R1, ZC_COPYBUF_LEN),
        Insn::load_u64(Reg::R7, Reg::R6, regs.args[0]),
    ]);
    count_zc_receive(&mut p);
    p.finish_returning(SOCKOPT_LEAVE)
}

/// The `syscalls:sys_exit_getsockopt` tracepoint (a perf event: the kernel runs the program only
/// for `getsockopt`, and not for a 32-bit task's calls, which it leaves untraced on x86-64), where
/// [`zc_receive_hook`] cannot attach: for a `TCP_ZEROCOPY_RECEIVE` that succeeded, counts what it
/// mapped and copied (see [`count_zc_receive`]), read from the caller's struct; the level, option,
/// descriptor and struct come from the task's saved registers.
pub(super) fn zc_receive(
    scope: Scope,
    maps: Maps<'_>,
    regs: &SyscallRegs,
    event: &Event,
) -> io::Result<Vec<Insn>> {
    let mut p = Prog::new(scope, maps);
    p.field(Reg::R9, event, "ret")?;
    p.exit_if(Insn::jump_if_not_equal(Reg::R9, 0, 0));
    p.saved_registers(regs);
    let arg = |n: usize, dst: Reg| Insn::load_u64(dst, Reg::R6, regs.args[n]);
    p.asm.push([arg(1, Reg::R1)]);
    p.exit_if(Insn::jump_if_not_equal(Reg::R1, SOL_TCP, 0));
    p.asm.push([arg(2, Reg::R1)]);
    p.exit_if(Insn::jump_if_not_equal(Reg::R1, TCP_ZEROCOPY_RECEIVE, 0));
    p.asm.push([arg(0, Reg::R7), arg(3, Reg::R8)]);
    p.read_user(USER_A, ZC_READ, Reg::R8);
    p.asm.push([
        Insn::load_u32(Reg::R8, Reg::R10, USER_A + ZC_LENGTH),
        Insn::load_u32(Reg::R9, Reg::R10, USER_A + ZC_COPYBUF_LEN),
    ]);
    count_zc_receive(&mut p);
    Ok(p.finish())
}

/// A send on descriptor r7 with flags r8 that sent r9 bytes: zero-copy when it asked for
/// `MSG_ZEROCOPY`.
fn count_send(p: &mut Prog<'_>) {
    p.owner_key(Some(Reg::R7));
    let copy = p.asm.label();
    p.asm
        .jump(Insn::jump_if_any_bit(Reg::R8, MSG_ZEROCOPY, 0), copy);
    p.add(&[
        (Counter::CopySends, Amount::One),
        (Counter::CopyBytes, Amount::Reg(Reg::R9)),
    ]);
    p.exit_if(Insn::jump(0));
    p.asm.bind(copy);
    p.add(&[
        (Counter::ZcSends, Amount::One),
        (Counter::ZcBytes, Amount::Reg(Reg::R9)),
    ]);
}

/// An error-queue read on descriptor r7 into the `msghdr` at r8 that succeeded: reads the first
/// control message the kernel wrote and, for a zero-copy completion (`ee_origin` 5, `ee_errno`
/// 0), counts the notification, the ids of its range `ee_info..=ee_data`, and whether it says
/// copied. The kernel has written the control message to the caller's buffer (`put_cmsg`) by the
/// time the receive returns; the caller's `msghdr` still holds the buffer's start and size (the
/// written length replaces the size only as the system call returns).
fn count_completions(p: &mut Prog<'_>) {
    p.read_user(USER_A, MSGHDR_SIZE, Reg::R8);
    p.asm.push([
        Insn::load_u64(Reg::R8, Reg::R10, USER_A + MSGHDR_CONTROL),
        Insn::load_u64(Reg::R1, Reg::R10, USER_A + MSGHDR_CONTROLLEN),
    ]);
    p.exit_unless_greater(Reg::R1, CMSG_EE_END - 1);
    p.read_user(USER_B, CMSG_EE_END, Reg::R8);
    p.asm
        .push([Insn::load_u8(Reg::R1, Reg::R10, USER_B + CMSG_EE_ORIGIN)]);
    p.exit_if(Insn::jump_if_not_equal(Reg::R1, SO_EE_ORIGIN_ZEROCOPY, 0));
    p.asm
        .push([Insn::load_u32(Reg::R1, Reg::R10, USER_B + CMSG_EE_ERRNO)]);
    p.exit_if(Insn::jump_if_not_equal(Reg::R1, 0, 0));
    p.asm.push([
        Insn::load_u32(Reg::R8, Reg::R10, USER_B + CMSG_EE_DATA),
        Insn::load_u32(Reg::R1, Reg::R10, USER_B + CMSG_EE_INFO),
        Insn::sub32_reg(Reg::R8, Reg::R1),
        Insn::add64_imm(Reg::R8, 1),
        Insn::load_u8(Reg::R9, Reg::R10, USER_B + CMSG_EE_CODE),
    ]);
    p.sample_locked_memory();
    p.owner_key(Some(Reg::R7));
    let copied = p.asm.label();
    p.asm.jump(
        Insn::jump_if_any_bit(Reg::R9, SO_EE_CODE_ZEROCOPY_COPIED, 0),
        copied,
    );
    p.add(&[
        (Counter::Notifications, Amount::One),
        (Counter::Completions, Amount::Reg(Reg::R8)),
    ]);
    p.exit_if(Insn::jump(0));
    p.asm.bind(copied);
    p.add(&[
        (Counter::Notifications, Amount::One),
        (Counter::Completions, Amount::Reg(Reg::R8)),
        (Counter::CopiedNotifications, Amount::One),
        (Counter::CopiedCompletions, Amount::Reg(Reg::R8)),
    ]);
}

/// A `TCP_ZEROCOPY_RECEIVE` on descriptor r7 that succeeded, its `length` in r8 and `copybuf_len`
/// in r9: counts the bytes it mapped and copied into the copy buffer (`copybuf_len` unless it is a
/// negative errno).
fn count_zc_receive(p: &mut Prog<'_>) {
    p.asm.push([
        Insn::jump_if_any_bit(Reg::R9, BIT31, 1),
        Insn::jump(1),
        Insn::mov64_imm(Reg::R9, 0),
    ]);
    p.owner_key(Some(Reg::R7));
    p.add(&[
        (Counter::RxZcCalls, Amount::One),
        (Counter::RxMappedBytes, Amount::Reg(Reg::R8)),
        (Counter::RxCopybufBytes, Amount::Reg(Reg::R9)),
    ]);
}

/// `io_uring:io_uring_submit_req` of a `SEND_ZC` or `SENDMSG_ZC`: counts it and remembers the
/// request, whose result the completion adds as bytes.
fn uring_submit(
    scope: Scope,
    maps: Maps<'_>,
    requests: BorrowedFd<'_>,
    event: &Event,
) -> io::Result<Vec<Insn>> {
    let mut p = Prog::new(scope, maps);
    p.field(Reg::R1, event, "opcode")?;
    let zc = p.asm.label();
    p.asm
        .jump(Insn::jump_if_equal(Reg::R1, IORING_OP_SEND_ZC, 0), zc);
    p.exit_if(Insn::jump_if_not_equal(Reg::R1, IORING_OP_SENDMSG_ZC, 0));
    p.asm.bind(zc);
    p.field(Reg::R7, event, "req")?;
    p.asm.push([
        Insn::store_u64(Reg::R10, REQUEST_KEY, Reg::R7),
        Insn::store_u64_imm(Reg::R10, WORD, 0),
    ]);
    p.map(Reg::R1, requests);
    p.stack_ptr(Reg::R2, REQUEST_KEY);
    p.stack_ptr(Reg::R3, WORD);
    p.asm.push([
        Insn::mov64_imm(Reg::R4, BPF_ANY as i32),
        Insn::call(helper::MAP_UPDATE_ELEM),
    ]);
    p.owner_key(None);
    p.add(&[(Counter::UringZcRequests, Amount::One)]);
    Ok(p.finish())
}

/// `io_uring:io_uring_complete`: a notification CQE (`IORING_CQE_F_NOTIF`) is counted, copied when
/// its result has bit 31; the result CQE of a remembered zero-copy request adds its bytes.
fn uring_complete(
    scope: Scope,
    maps: Maps<'_>,
    requests: BorrowedFd<'_>,
    event: &Event,
) -> io::Result<Vec<Insn>> {
    let mut p = Prog::new(scope, maps);
    p.field(Reg::R7, event, "req")?;
    p.field(Reg::R8, event, "res")?;
    p.field(Reg::R9, event, "cflags")?;
    let result = p.asm.label();
    p.asm
        .push([Insn::jump_if_any_bit(Reg::R9, IORING_CQE_F_NOTIF, 1)]);
    p.asm.jump(Insn::jump(0), result);
    p.sample_locked_memory();
    p.owner_key(None);
    let copied = p.asm.label();
    p.asm.jump(Insn::jump_if_any_bit(Reg::R8, BIT31, 0), copied);
    p.add(&[(Counter::UringNotifications, Amount::One)]);
    p.exit_if(Insn::jump(0));
    p.asm.bind(copied);
    p.add(&[
        (Counter::UringNotifications, Amount::One),
        (Counter::UringCopiedNotifications, Amount::One),
    ]);
    p.exit_if(Insn::jump(0));
    p.asm.bind(result);
    p.asm
        .push([Insn::store_u64(Reg::R10, REQUEST_KEY, Reg::R7)]);
    p.lookup(requests, REQUEST_KEY);
    p.exit_if(Insn::jump_if_equal(Reg::R0, 0, 0));
    p.map(Reg::R1, requests);
    p.stack_ptr(Reg::R2, REQUEST_KEY);
    p.asm.push([Insn::call(helper::MAP_DELETE_ELEM)]);
    p.exit_if(Insn::jump_if_any_bit(Reg::R8, BIT31, 0));
    p.owner_key(None);
    p.add(&[(Counter::UringZcBytes, Amount::Reg(Reg::R8))]);
    Ok(p.finish())
}

/// The return probe of `io_zcrx_copy_chunk`: counts a copy and its bytes, the function's result when
/// positive (read at `result` in `struct pt_regs`), against the current process.
pub(super) fn zcrx_copy(scope: Scope, maps: Maps<'_>, result: i16) -> Vec<Insn> {
    let mut p = Prog::new(scope, maps);
    p.asm.push([Insn::load_u64(Reg::R8, Reg::R6, result)]);
    p.exit_unless_greater(Reg::R8, 0);
    p.owner_key(None);
    p.add(&[
        (Counter::ZcrxCopies, Amount::One),
        (Counter::ZcrxCopiedBytes, Amount::Reg(Reg::R8)),
    ]);
    p.finish()
}

/// What the `skb_copy_ubufs` kprobe program needs of the running kernel: an offset from its BTF,
/// and the address ranges of the callers that name a cause (from `/proc/kallsyms`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LateCopyProbe {
    /// Offset in `struct pt_regs` of the register holding the first argument, the `struct sk_buff *`.
    pub arg0: i16,
    /// Offset of `data_len` (the bytes in pages) in `struct sk_buff`.
    pub data_len: i32,
    /// The callers on the receive path (`__netif_receive_skb_core`, `ip_local_deliver_finish`, …).
    pub receive: Vec<RangeInclusive<u64>>,
    /// The copies of `dev_queue_xmit_nit` (the clone for a tap on the sending interface).
    pub tap: Vec<RangeInclusive<u64>>,
}

/// Return addresses the kprobe program looks at: the probed address, the caller, and the caller's
/// caller (the caller may be a helper that is not inlined, such as `deliver_skb`).
const STACK_FRAMES: i16 = 3;

/// The kprobe at the entry of `skb_copy_ubufs(skb, gfp)`: counts the copy and the skb's paged
/// bytes against the current process, and the bytes again under the cause named by the nearer of
/// its caller and its caller's caller that is a known one. Unreadable kernel memory reads as zero
/// (no bytes), an unreadable stack as no cause.
pub(super) fn late_copy(scope: Scope, maps: Maps<'_>, probe: &LateCopyProbe) -> Vec<Insn> {
    let mut p = Prog::new(scope, maps);
    p.asm.push([Insn::mov64_reg(Reg::R1, Reg::R6)]);
    p.stack_ptr(Reg::R2, USER_A);
    p.asm.push([
        Insn::mov64_imm(Reg::R3, i32::from(8 * STACK_FRAMES)),
        Insn::mov64_imm(Reg::R4, 0),
        Insn::call(helper::GET_STACK),
        Insn::load_u64(Reg::R3, Reg::R6, probe.arg0),
        Insn::add64_imm(Reg::R3, probe.data_len),
    ]);
    p.stack_ptr(Reg::R1, WORD);
    p.asm.push([
        Insn::mov64_imm(Reg::R2, 4),
        Insn::call(helper::PROBE_READ_KERNEL),
        Insn::load_u32(Reg::R8, Reg::R10, WORD),
    ]);
    p.owner_key(None);
    p.add(&[
        (Counter::LateCopies, Amount::One),
        (Counter::LateCopiedBytes, Amount::Reg(Reg::R8)),
    ]);
    for frame in 1..STACK_FRAMES {
        p.asm
            .push([Insn::load_u64(Reg::R7, Reg::R10, USER_A + 8 * frame)]);
        for (ranges, counter) in [
            (&probe.receive, Counter::LateCopiedReceiveBytes),
            (&probe.tap, Counter::LateCopiedTapBytes),
        ] {
            for range in ranges {
                let next = p.asm.label();
                p.asm.push(Insn::load_imm64(Reg::R1, *range.start()));
                p.asm
                    .jump(Insn::jump_if_greater_reg(Reg::R1, Reg::R7, 0), next);
                p.asm.push(Insn::load_imm64(Reg::R1, *range.end()));
                p.asm
                    .jump(Insn::jump_if_greater_reg(Reg::R7, Reg::R1, 0), next);
                p.asm
                    .push([Insn::atomic_add_u64(Reg::R0, 8 * counter as i16, Reg::R8)]);
                p.exit_if(Insn::jump(0));
                p.asm.bind(next);
            }
        }
    }
    p.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::bpf::disassemble;
    use std::os::fd::AsFd;

    /// Each tracepoint's fields the programs read, at their offsets and sizes on Linux 6.18 (as its
    /// tracefs `format` files give them).
    const LAYOUTS: [&str; 2] = [
        "ctx:8:8 req:16:8 user_data:24:8 opcode:32:1",
        "ctx:8:8 req:16:8 user_data:24:8 res:32:4 cflags:36:4",
    ];

    /// `struct pt_regs` on x86-64 (`orig_ax`, `di`, `si`, `dx`, `r10`, `cs`) and its call numbers.
    fn x86_64_regs() -> SyscallRegs {
        SyscallRegs {
            nr: 120,
            args: [112, 104, 96, 56],
            native: (136, 0x33),
            numbers: SyscallNumbers {
                sendmsg: 46,
                sendto: 44,
                sendmmsg: 307,
                recvmsg: 47,
                getsockopt: 55,
            },
            task_tgid: 2496,
        }
    }

    /// A `format` file's text holding `fields` (`name:offset:size`, space-separated).
    fn format(fields: &str) -> String {
        fields
            .split(' ')
            .map(|f| {
                let [name, offset, size] = f.split(':').collect::<Vec<_>>()[..] else {
                    panic!("{f}")
                };
                format!("\tfield:long {name};\toffset:{offset};\tsize:{size};\tsigned:0;\n")
            })
            .collect()
    }

    /// Every program's disassembly for `scope`, the maps being descriptors 0, 1 and 2.
    fn disassembly(scope: Scope) -> String {
        let (stdin, stderr) = (std::io::stdin(), std::io::stderr());
        let stdout = std::io::stdout();
        let layout = LockedLayout {
            cred: 3008,
            uid: 8,
            user: 32,
            locked_vm: 24,
            cap_effective: 64,
            user_ns: 136,
            ns_level: 120,
            signal: 3056,
            rlim: 496,
        };
        let maps = Maps {
            counters: stdin.as_fd(),
            locked: Some((stdout.as_fd(), layout)),
        };
        let mut text = String::new();
        for ((group, name, build), layout) in TRACEPOINTS.iter().zip(LAYOUTS) {
            let event = Event::parse(&format!("{group}:{name}"), 0, &format(layout));
            let insns = build(scope, maps, stderr.as_fd(), &event).expect("build");
            text.push_str(&format!("{}:\n{}", event.name, disassemble(&insns)));
        }
        let regs = x86_64_regs();
        let insns = socket_send(scope, maps, &regs);
        text.push_str(&format!(
            "raw_tracepoint:sock_send_length:\n{}",
            disassemble(&insns)
        ));
        let insns = socket_receive(scope, maps, Some(16), Some(&regs));
        text.push_str(&format!(
            "raw_tracepoint:sock_recv_length:\n{}",
            disassemble(&insns)
        ));
        let event = Event::parse(
            "syscalls:sys_exit_getsockopt",
            0,
            &format("__syscall_nr:8:4 ret:16:8"),
        );
        let insns = zc_receive(scope, maps, &regs, &event).expect("build");
        text.push_str(&format!(
            "syscalls:sys_exit_getsockopt:\n{}",
            disassemble(&insns)
        ));
        let insns = zc_receive_hook(scope, maps, &regs);
        text.push_str(&format!("cgroup:getsockopt:\n{}", disassemble(&insns)));
        let probe = LateCopyProbe {
            arg0: 112,
            data_len: 132,
            receive: vec![0xffff_ffff_8100_0200..=0xffff_ffff_8100_03ff],
            tap: vec![0xffff_ffff_8100_0500..=0xffff_ffff_8100_057f],
        };
        let insns = late_copy(scope, maps, &probe);
        text.push_str(&format!("kprobe:skb_copy_ubufs:\n{}", disassemble(&insns)));
        let insns = zcrx_copy(scope, maps, 80);
        text.push_str(&format!(
            "kretprobe:io_zcrx_copy_chunk:\n{}",
            disassemble(&insns)
        ));
        text
    }

    /// The programs' disassembly, compared with the reviewed copy in `programs.golden`: any change
    /// to the bytecode shows up as a diff of that file.
    #[test]
    fn programs_match_golden_disassembly() {
        let text = disassembly(Scope::Process(4242));
        assert_eq!(
            text,
            include_str!("programs.golden"),
            "disassembly changed; review and update src/observe/programs.golden"
        );
    }

    #[test]
    fn every_program_opens_with_its_scope_test() {
        let count = |text: &str, what: &str| text.matches(what).count();
        let process = disassembly(Scope::Process(4242));
        assert_eq!(count(&process, "3: r1 = 0x1092 ll\n5: if r0 != r1"), 8);
        let cgroup = disassembly(Scope::Cgroup(77));
        assert_eq!(
            count(&cgroup, "1: call 80\n2: r1 = 0x4d ll\n4: if r0 != r1"),
            8
        );
        assert_eq!(count(&disassembly(Scope::All), "if r0 != r1"), 0);
    }

    #[test]
    fn a_missing_field_is_an_error_naming_it() {
        let (stdin, stderr) = (std::io::stdin(), std::io::stderr());
        let maps = Maps {
            counters: stdin.as_fd(),
            locked: None,
        };
        let format = format("ctx:8:8 req:16:8 user_data:24:8");
        let event = Event::parse("io_uring:io_uring_submit_req", 0, &format);
        let err = uring_submit(Scope::All, maps, stderr.as_fd(), &event).unwrap_err();
        assert!(err.to_string().contains("no field opcode"), "{err}");
    }
}
