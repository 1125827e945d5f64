//! A small assembler for the observer's programs: eBPF instructions with named forward and backward
//! jump targets, resolved when the program is finished.

use crate::sys::bpf::Insn;

/// A jump target inside one [`Asm`] program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Label(usize);

/// A program being written: instructions, the labels bound so far, and the jumps waiting for them.
#[derive(Debug, Default)]
pub(super) struct Asm {
    insns: Vec<Insn>,
    bound: Vec<Option<usize>>,
    jumps: Vec<(usize, Label)>,
}

impl Asm {
    /// A new label, bound later with [`Asm::bind`].
    pub fn label(&mut self) -> Label {
        self.bound.push(None);
        Label(self.bound.len() - 1)
    }

    /// Binds `label` to the next instruction.
    pub fn bind(&mut self, label: Label) {
        assert!(self.bound[label.0].is_none(), "label bound twice");
        self.bound[label.0] = Some(self.insns.len());
    }

    /// Appends instructions.
    pub fn push(&mut self, insns: impl IntoIterator<Item = Insn>) {
        self.insns.extend(insns);
    }

    /// Appends the jump `insn` (its offset ignored), to land on `target`.
    pub fn jump(&mut self, insn: Insn, target: Label) {
        assert!(insn.is_jump(), "not a jump: {insn:?}");
        self.jumps.push((self.insns.len(), target));
        self.insns.push(insn);
    }

    /// The finished program, every jump's offset set to its label.
    pub fn finish(mut self) -> Vec<Insn> {
        for (at, label) in self.jumps {
            let target = self.bound[label.0].expect("jump to an unbound label");
            let off = target as isize - (at as isize + 1);
            let off = i16::try_from(off).expect("jump farther than an eBPF offset reaches");
            self.insns[at] = self.insns[at].with_offset(off);
        }
        self.insns
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::bpf::{Reg, disassemble};

    #[test]
    fn labels_resolve_forward_and_backward() {
        let mut asm = Asm::default();
        let top = asm.label();
        let end = asm.label();
        asm.bind(top);
        asm.jump(Insn::jump_if_equal(Reg::R1, 0, 0), end);
        asm.push([Insn::mov64_imm(Reg::R0, 1)]);
        asm.jump(Insn::jump(0), top);
        asm.bind(end);
        asm.push([Insn::exit()]);
        assert_eq!(
            disassemble(&asm.finish()),
            "0: if r1 == 0x0 goto +2\n1: r0 = 1\n2: goto -3\n3: exit\n"
        );
    }
}
