//! The observer's BPF programs, one per tracepoint, assembled here from the running kernel's record
//! layouts (tracefs `format` files).
//!
//! Every program starts with the scope test (the current task's tgid or cgroup), then adds to this
//! CPU's value of the counters map under the key `{ tgid: u32, fd: i32 }` (fd -1: the process as a
//! whole). A system call is seen at its entry (descriptor, flags, user pointers) and its exit (the
//! result): the entry leaves what the exit needs in a scratch map keyed by the thread (`pid_tgid`).
//! The stack frame: the counters key at -8, the scratch key at -16, the scratch value at -32 (fd,
//! kind, pointer), a zeroed counters value below it, and user-memory copies at [`USER_A`] and
//! [`USER_B`].

use std::io;
use std::ops::RangeInclusive;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::Scope;
use super::asm::{Asm, Label};
use super::counters::{Counter, Counters};
use super::tracefs::Event;
use crate::sys::bpf::{BPF_ANY, BPF_NOEXIST, Insn, Reg, helper};

/// `MSG_ZEROCOPY` (`include/linux/socket.h`).
const MSG_ZEROCOPY: i32 = 0x0400_0000;
/// `MSG_ERRQUEUE`.
const MSG_ERRQUEUE: i32 = 0x2000;
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

/// Scratch kinds: what the entry of a system call saw (none: the exit took it already).
const KIND_NONE: i32 = 0;
const KIND_ZC_SEND: i32 = 1;
const KIND_COPY_SEND: i32 = 2;
const KIND_ERRQUEUE: i32 = 3;
const KIND_ZC_RECEIVE: i32 = 4;

const KEY: i16 = -8;
const SCRATCH_KEY: i16 = -16;
const SCRATCH: i16 = -32;
const ZERO: i16 = SCRATCH - Counters::SIZE as i16;
/// 64 bytes for a copy of user memory (a `struct user_msghdr`, a `struct tcp_zerocopy_receive`).
const USER_A: i16 = ZERO - 64;
/// 32 bytes for a second copy (a `struct cmsghdr` and the `struct sock_extended_err` after it).
const USER_B: i16 = USER_A - 32;

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
    /// LRU hash `pid_tgid` -> `{fd: u32, kind: u32, ptr: u64}`.
    pub scratch: BorrowedFd<'a>,
    /// LRU hash of in-flight io_uring zero-copy requests (`struct io_kiocb *` -> 0).
    pub uring: BorrowedFd<'a>,
}

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
}

impl<'a> Prog<'a> {
    /// The start of every program: keep the context in r6, leave at once outside `scope`.
    fn new(scope: Scope, maps: Maps<'a>) -> Prog<'a> {
        let mut asm = Asm::default();
        let exit = asm.label();
        asm.push([Insn::mov64_reg(Reg::R6, Reg::R1)]);
        let mut prog = Prog { asm, maps, exit };
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

    fn finish(mut self) -> Vec<Insn> {
        self.asm.bind(self.exit);
        self.asm.push([Insn::mov64_imm(Reg::R0, 0), Insn::exit()]);
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

    /// The counters key of the socket whose descriptor is in `fd` (or, with `None`, of the process).
    fn owner_key(&mut self, fd: Option<Reg>) {
        self.asm.push([
            Insn::call(helper::GET_CURRENT_PID_TGID),
            Insn::rsh64_imm(Reg::R0, 32),
            Insn::store_u32(Reg::R10, KEY, Reg::R0),
        ]);
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

    /// Stores `{fd: r7, kind: r9, ptr: r8}` for this thread's system call exit: in place when the
    /// thread has an entry already (a lookup costs less than an update of an LRU map), else as a
    /// new entry.
    fn scratch_put(&mut self) {
        let scratch = self.maps.scratch;
        self.asm.push([
            Insn::call(helper::GET_CURRENT_PID_TGID),
            Insn::store_u64(Reg::R10, SCRATCH_KEY, Reg::R0),
        ]);
        self.lookup(scratch, SCRATCH_KEY);
        let create = self.asm.label();
        self.asm.jump(Insn::jump_if_equal(Reg::R0, 0, 0), create);
        self.asm.push([
            Insn::store_u32(Reg::R0, 0, Reg::R7),
            Insn::store_u32(Reg::R0, 4, Reg::R9),
            Insn::store_u64(Reg::R0, 8, Reg::R8),
        ]);
        self.exit_if(Insn::jump(0));
        self.asm.bind(create);
        self.asm.push([
            Insn::store_u32(Reg::R10, SCRATCH, Reg::R7),
            Insn::store_u32(Reg::R10, SCRATCH + 4, Reg::R9),
            Insn::store_u64(Reg::R10, SCRATCH + 8, Reg::R8),
        ]);
        self.map(Reg::R1, scratch);
        self.stack_ptr(Reg::R2, SCRATCH_KEY);
        self.stack_ptr(Reg::R3, SCRATCH);
        self.asm.push([
            Insn::mov64_imm(Reg::R4, BPF_ANY as i32),
            Insn::call(helper::MAP_UPDATE_ELEM),
        ]);
    }

    /// Takes this thread's scratch entry: fd in r7, pointer in r8, kind in r9; the entry stays, its
    /// kind cleared (`KIND_NONE`), for the thread's next call. Leaves when there is none.
    fn scratch_take(&mut self) {
        let scratch = self.maps.scratch;
        self.asm.push([
            Insn::call(helper::GET_CURRENT_PID_TGID),
            Insn::store_u64(Reg::R10, SCRATCH_KEY, Reg::R0),
        ]);
        self.lookup(scratch, SCRATCH_KEY);
        self.exit_if(Insn::jump_if_equal(Reg::R0, 0, 0));
        self.asm.push([
            Insn::load_u32(Reg::R7, Reg::R0, 0),
            Insn::load_u32(Reg::R9, Reg::R0, 4),
            Insn::load_u64(Reg::R8, Reg::R0, 8),
            Insn::mov64_imm(Reg::R1, KIND_NONE),
            Insn::store_u32(Reg::R0, 4, Reg::R1),
        ]);
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

/// A program's builder.
type Build = fn(Scope, Maps<'_>, &Event) -> io::Result<Vec<Insn>>;

/// Each tracepoint (group, event) and the program the observer runs there.
pub(super) const TRACEPOINTS: [(&str, &str, Build); 11] = [
    ("syscalls", "sys_enter_sendmsg", send_enter),
    ("syscalls", "sys_exit_sendmsg", send_exit),
    ("syscalls", "sys_enter_sendto", send_enter),
    ("syscalls", "sys_exit_sendto", send_exit),
    ("syscalls", "sys_enter_recvmsg", errqueue_enter),
    ("syscalls", "sys_exit_recvmsg", errqueue_exit),
    ("syscalls", "sys_enter_getsockopt", zc_receive_enter),
    ("syscalls", "sys_exit_getsockopt", zc_receive_exit),
    ("io_uring", "io_uring_submit_req", uring_submit),
    ("io_uring", "io_uring_complete", uring_complete),
    ("skb", "skb_copy_datagram_iovec", receive_copy),
];

/// `sys_enter_sendmsg`/`sendto`: remembers the descriptor and whether `MSG_ZEROCOPY` was asked.
fn send_enter(scope: Scope, maps: Maps<'_>, event: &Event) -> io::Result<Vec<Insn>> {
    let mut p = Prog::new(scope, maps);
    p.field(Reg::R7, event, "fd")?;
    p.field(Reg::R8, event, "flags")?;
    p.asm.push([
        Insn::mov64_imm(Reg::R9, KIND_ZC_SEND),
        Insn::jump_if_any_bit(Reg::R8, MSG_ZEROCOPY, 1),
        Insn::mov64_imm(Reg::R9, KIND_COPY_SEND),
        Insn::mov64_imm(Reg::R8, 0),
    ]);
    p.scratch_put();
    Ok(p.finish())
}

/// `sys_exit_sendmsg`/`sendto`: counts a send that sent bytes, zero-copy or not.
fn send_exit(scope: Scope, maps: Maps<'_>, event: &Event) -> io::Result<Vec<Insn>> {
    let mut p = Prog::new(scope, maps);
    p.scratch_take();
    p.field(Reg::R8, event, "ret")?;
    p.exit_unless_greater(Reg::R8, 0);
    p.owner_key(Some(Reg::R7));
    let copy = p.asm.label();
    p.asm
        .jump(Insn::jump_if_not_equal(Reg::R9, KIND_ZC_SEND, 0), copy);
    p.add(&[
        (Counter::ZcSends, Amount::One),
        (Counter::ZcBytes, Amount::Reg(Reg::R8)),
    ]);
    p.exit_if(Insn::jump(0));
    p.asm.bind(copy);
    p.exit_if(Insn::jump_if_not_equal(Reg::R9, KIND_COPY_SEND, 0));
    p.add(&[
        (Counter::CopySends, Amount::One),
        (Counter::CopyBytes, Amount::Reg(Reg::R8)),
    ]);
    Ok(p.finish())
}

/// `sys_enter_recvmsg` with `MSG_ERRQUEUE`: remembers the descriptor and the `msghdr`.
fn errqueue_enter(scope: Scope, maps: Maps<'_>, event: &Event) -> io::Result<Vec<Insn>> {
    let mut p = Prog::new(scope, maps);
    p.field(Reg::R8, event, "flags")?;
    let go = p.asm.label();
    p.asm
        .jump(Insn::jump_if_any_bit(Reg::R8, MSG_ERRQUEUE, 0), go);
    p.exit_if(Insn::jump(0));
    p.asm.bind(go);
    p.field(Reg::R7, event, "fd")?;
    p.field(Reg::R8, event, "msg")?;
    p.asm.push([Insn::mov64_imm(Reg::R9, KIND_ERRQUEUE)]);
    p.scratch_put();
    Ok(p.finish())
}

/// `sys_exit_recvmsg` of an error-queue read: reads the first control message the kernel wrote
/// and, for a zero-copy completion (`ee_origin` 5, `ee_errno` 0), counts the notification, the ids
/// of its range `ee_info..=ee_data`, and whether it says copied.
fn errqueue_exit(scope: Scope, maps: Maps<'_>, event: &Event) -> io::Result<Vec<Insn>> {
    let mut p = Prog::new(scope, maps);
    p.scratch_take();
    p.exit_if(Insn::jump_if_not_equal(Reg::R9, KIND_ERRQUEUE, 0));
    p.field(Reg::R1, event, "ret")?;
    p.exit_unless_greater(Reg::R1, -1);
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
    Ok(p.finish())
}

/// `sys_enter_getsockopt(SOL_TCP, TCP_ZEROCOPY_RECEIVE)`: remembers the descriptor and the struct.
fn zc_receive_enter(scope: Scope, maps: Maps<'_>, event: &Event) -> io::Result<Vec<Insn>> {
    let mut p = Prog::new(scope, maps);
    p.field(Reg::R1, event, "level")?;
    p.exit_if(Insn::jump_if_not_equal(Reg::R1, SOL_TCP, 0));
    p.field(Reg::R1, event, "optname")?;
    p.exit_if(Insn::jump_if_not_equal(Reg::R1, TCP_ZEROCOPY_RECEIVE, 0));
    p.field(Reg::R7, event, "fd")?;
    p.field(Reg::R8, event, "optval")?;
    p.asm.push([Insn::mov64_imm(Reg::R9, KIND_ZC_RECEIVE)]);
    p.scratch_put();
    Ok(p.finish())
}

/// `sys_exit_getsockopt` of a `TCP_ZEROCOPY_RECEIVE` that succeeded: counts the bytes it mapped
/// (`length`) and copied into the copy buffer (`copybuf_len`, when not an error).
fn zc_receive_exit(scope: Scope, maps: Maps<'_>, event: &Event) -> io::Result<Vec<Insn>> {
    let mut p = Prog::new(scope, maps);
    p.scratch_take();
    p.exit_if(Insn::jump_if_not_equal(Reg::R9, KIND_ZC_RECEIVE, 0));
    p.field(Reg::R1, event, "ret")?;
    p.exit_if(Insn::jump_if_not_equal(Reg::R1, 0, 0));
    p.read_user(USER_A, ZC_READ, Reg::R8);
    p.asm.push([
        Insn::load_u32(Reg::R8, Reg::R10, USER_A + ZC_LENGTH),
        Insn::load_u32(Reg::R9, Reg::R10, USER_A + ZC_COPYBUF_LEN),
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
    Ok(p.finish())
}

/// `io_uring:io_uring_submit_req` of a `SEND_ZC` or `SENDMSG_ZC`: counts it and remembers the
/// request, whose result the completion adds as bytes.
fn uring_submit(scope: Scope, maps: Maps<'_>, event: &Event) -> io::Result<Vec<Insn>> {
    let mut p = Prog::new(scope, maps);
    p.field(Reg::R1, event, "opcode")?;
    let zc = p.asm.label();
    p.asm
        .jump(Insn::jump_if_equal(Reg::R1, IORING_OP_SEND_ZC, 0), zc);
    p.exit_if(Insn::jump_if_not_equal(Reg::R1, IORING_OP_SENDMSG_ZC, 0));
    p.asm.bind(zc);
    p.field(Reg::R7, event, "req")?;
    p.asm.push([
        Insn::store_u64(Reg::R10, SCRATCH_KEY, Reg::R7),
        Insn::store_u64_imm(Reg::R10, SCRATCH + 8, 0),
    ]);
    p.map(Reg::R1, maps.uring);
    p.stack_ptr(Reg::R2, SCRATCH_KEY);
    p.stack_ptr(Reg::R3, SCRATCH + 8);
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
fn uring_complete(scope: Scope, maps: Maps<'_>, event: &Event) -> io::Result<Vec<Insn>> {
    let mut p = Prog::new(scope, maps);
    p.field(Reg::R7, event, "req")?;
    p.field(Reg::R8, event, "res")?;
    p.field(Reg::R9, event, "cflags")?;
    let result = p.asm.label();
    p.asm
        .push([Insn::jump_if_any_bit(Reg::R9, IORING_CQE_F_NOTIF, 1)]);
    p.asm.jump(Insn::jump(0), result);
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
        .push([Insn::store_u64(Reg::R10, SCRATCH_KEY, Reg::R7)]);
    p.lookup(maps.uring, SCRATCH_KEY);
    p.exit_if(Insn::jump_if_equal(Reg::R0, 0, 0));
    p.map(Reg::R1, maps.uring);
    p.stack_ptr(Reg::R2, SCRATCH_KEY);
    p.asm.push([Insn::call(helper::MAP_DELETE_ELEM)]);
    p.exit_if(Insn::jump_if_any_bit(Reg::R8, BIT31, 0));
    p.owner_key(None);
    p.add(&[(Counter::UringZcBytes, Amount::Reg(Reg::R8))]);
    Ok(p.finish())
}

/// `skb:skb_copy_datagram_iovec`: bytes a socket receive copies to the process.
fn receive_copy(scope: Scope, maps: Maps<'_>, event: &Event) -> io::Result<Vec<Insn>> {
    let mut p = Prog::new(scope, maps);
    p.field(Reg::R8, event, "len")?;
    p.exit_if(Insn::jump_if_any_bit(Reg::R8, BIT31, 0));
    p.owner_key(None);
    p.add(&[(Counter::RxCopiedBytes, Amount::Reg(Reg::R8))]);
    Ok(p.finish())
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
    p.stack_ptr(Reg::R1, SCRATCH);
    p.asm.push([
        Insn::mov64_imm(Reg::R2, 4),
        Insn::call(helper::PROBE_READ_KERNEL),
        Insn::load_u32(Reg::R8, Reg::R10, SCRATCH),
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
    const LAYOUTS: [&str; 11] = [
        "fd:16:8 msg:24:8 flags:32:8",
        "ret:16:8",
        "fd:16:8 buff:24:8 len:32:8 flags:40:8",
        "ret:16:8",
        "fd:16:8 msg:24:8 flags:32:8",
        "ret:16:8",
        "fd:16:8 level:24:8 optname:32:8 optval:40:8",
        "ret:16:8",
        "ctx:8:8 req:16:8 user_data:24:8 opcode:32:1",
        "ctx:8:8 req:16:8 user_data:24:8 res:32:4 cflags:36:4",
        "skbaddr:8:8 len:16:4",
    ];

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
        let (stdin, stdout, stderr) = (std::io::stdin(), std::io::stdout(), std::io::stderr());
        let maps = Maps {
            counters: stdin.as_fd(),
            scratch: stdout.as_fd(),
            uring: stderr.as_fd(),
        };
        let mut text = String::new();
        for ((group, name, build), layout) in TRACEPOINTS.iter().zip(LAYOUTS) {
            let event = Event::parse(&format!("{group}:{name}"), 0, &format(layout));
            let insns = build(scope, maps, &event).expect("build");
            text.push_str(&format!("{}:\n{}", event.name, disassemble(&insns)));
        }
        let probe = LateCopyProbe {
            arg0: 112,
            data_len: 132,
            receive: vec![0xffff_ffff_8100_0200..=0xffff_ffff_8100_03ff],
            tap: vec![0xffff_ffff_8100_0500..=0xffff_ffff_8100_057f],
        };
        let insns = late_copy(scope, maps, &probe);
        text.push_str(&format!("kprobe:skb_copy_ubufs:\n{}", disassemble(&insns)));
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
        assert_eq!(count(&process, "3: r1 = 0x1092 ll\n5: if r0 != r1"), 12);
        let cgroup = disassembly(Scope::Cgroup(77));
        assert_eq!(
            count(&cgroup, "1: call 80\n2: r1 = 0x4d ll\n4: if r0 != r1"),
            12
        );
        assert_eq!(count(&disassembly(Scope::All), "if r0 != r1"), 0);
    }

    #[test]
    fn a_missing_field_is_an_error_naming_it() {
        let (stdin, stdout, stderr) = (std::io::stdin(), std::io::stdout(), std::io::stderr());
        let maps = Maps {
            counters: stdin.as_fd(),
            scratch: stdout.as_fd(),
            uring: stderr.as_fd(),
        };
        let event = Event::parse("skb:skb_copy_datagram_iovec", 0, &format("skbaddr:8:8"));
        let err = receive_copy(Scope::All, maps, &event).unwrap_err();
        assert!(err.to_string().contains("no field len"), "{err}");
    }
}
