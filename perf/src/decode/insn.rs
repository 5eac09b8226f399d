//! Instructions as perf's decoder classifies them (intel-pt-insn-decoder.c): an
//! operation (`call`, `ret`, `jcc`, …) and how the trace reports the branch
//! (conditional, unconditional direct, indirect, or none).
//!
//! perf classifies by opcode, a little differently from libipt: INT1, VMCALL,
//! UIRET and the ERET pair are no branches to perf, far calls and jumps are
//! indirect, and an instruction's class comes from its first opcode byte after
//! the prefixes.

use pt_decoder::insn::{Insn as PtInsn, InsnKind};

/// perf's `enum intel_pt_insn_op`.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    #[default]
    Other,
    Call,
    Ret,
    Jcc,
    Jmp,
    Loop,
    Iret,
    Int,
    Syscall,
    Sysret,
    Vmentry,
}

/// perf's `enum intel_pt_insn_branch`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Branch {
    /// Not a branch.
    #[default]
    None,
    /// The target comes from a TIP (or the return stack).
    Indirect,
    /// Taken or not, as a TNT bit says.
    Conditional,
    /// A direct jump or call: the target is in the code.
    Unconditional,
}

/// The longest instruction perf keeps (`INTEL_PT_INSN_BUF_SZ`).
pub const INSN_BUF: usize = 16;

/// perf's `struct intel_pt_insn`: one classified instruction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerfInsn {
    /// The operation.
    pub op: Op,
    /// The branch kind.
    pub branch: Branch,
    /// A PTWRITE emulated by a two-byte JMP (not detected: always false).
    pub emulated_ptwrite: bool,
    /// Length in bytes (0 where perf's walk stopped at a given IP).
    pub length: u8,
    /// Displacement of a direct branch.
    pub rel: i32,
    /// The instruction's bytes.
    pub buf: [u8; INSN_BUF],
}

/// perf's operation and branch kind of an instruction libipt's way classified.
pub fn classify(kind: InsnKind) -> (Op, Branch) {
    use Branch as B;
    use InsnKind as K;
    match kind {
        K::CallRel => (Op::Call, B::Unconditional),
        K::CallIndirect | K::CallFarIndirect | K::CallFarDirect => (Op::Call, B::Indirect),
        K::JmpRel => (Op::Jmp, B::Unconditional),
        K::JmpIndirect | K::JmpFarIndirect | K::JmpFarDirect => (Op::Jmp, B::Indirect),
        K::Jcc | K::Jrcxz => (Op::Jcc, B::Conditional),
        K::Loop | K::Loope | K::Loopne => (Op::Loop, B::Conditional),
        K::Ret | K::RetImm | K::RetFar | K::RetFarImm => (Op::Ret, B::Indirect),
        K::Iret => (Op::Iret, B::Indirect),
        K::Int | K::Int3 | K::Into => (Op::Int, B::Indirect),
        K::Syscall | K::Sysenter => (Op::Syscall, B::Indirect),
        K::Sysret | K::Sysexit => (Op::Sysret, B::Indirect),
        K::Vmlaunch | K::Vmresume => (Op::Vmentry, B::Indirect),
        _ => (Op::Other, B::None),
    }
}

impl PerfInsn {
    /// perf's view of `insn`, whose bytes start `bytes`.
    pub fn from_pt(insn: &PtInsn, bytes: &[u8]) -> PerfInsn {
        let (op, branch) = classify(insn.kind);
        let rel = match (branch, insn.target) {
            (Branch::Conditional | Branch::Unconditional, Some(t)) => {
                t.wrapping_sub(insn.next_ip()) as i64 as i32
            }
            _ => 0,
        };
        let mut buf = [0u8; INSN_BUF];
        let n = usize::from(insn.size).min(bytes.len()).min(INSN_BUF);
        buf[..n].copy_from_slice(&bytes[..n]);
        PerfInsn {
            op,
            branch,
            emulated_ptwrite: false,
            length: insn.size,
            rel,
            buf,
        }
    }
}

/// The sample flags of an operation (perf's `intel_pt_insn_type`).
pub fn op_flags(op: Op) -> u32 {
    use crate::sample::flags::*;
    match op {
        Op::Other => 0,
        Op::Call => BRANCH | CALL,
        Op::Ret => BRANCH | RETURN,
        Op::Jcc | Op::Loop => BRANCH | CONDITIONAL,
        Op::Jmp => BRANCH,
        Op::Iret => BRANCH | RETURN | INTERRUPT,
        Op::Int => BRANCH | CALL | INTERRUPT,
        Op::Syscall => BRANCH | CALL | SYSCALLRET,
        Op::Sysret => BRANCH | RETURN | SYSCALLRET,
        Op::Vmentry => BRANCH | CALL | VMENTRY,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pt_decoder::insn::decode;
    use pt_encoder::ExecMode;

    fn perf(bytes: &[u8]) -> PerfInsn {
        let i = decode(bytes, 0x1000, ExecMode::Bit64).unwrap();
        PerfInsn::from_pt(&i, bytes)
    }

    #[test]
    fn classes() {
        let c = perf(&[0xe8, 0x10, 0, 0, 0]);
        assert_eq!(
            (c.op, c.branch, c.rel, c.length),
            (Op::Call, Branch::Unconditional, 0x10, 5)
        );
        let j = perf(&[0x74, 0xfe]);
        assert_eq!((j.op, j.branch, j.rel), (Op::Jcc, Branch::Conditional, -2));
        assert_eq!(perf(&[0xf3, 0xc3]).op, Op::Ret);
        assert_eq!(perf(&[0x0f, 0x05]).op, Op::Syscall);
        assert_eq!(perf(&[0xff, 0xd0]).branch, Branch::Indirect);
        // INT1 is no branch to perf.
        assert_eq!(perf(&[0xf1]).branch, Branch::None);
        assert_eq!(perf(&[0x90]).op, Op::Other);
    }

    /// Every kind of branch as intel-pt-insn-decoder.c classifies it by its
    /// opcode: far transfers are indirect (the trace has their target), LOOP
    /// and JRCXZ take TNT bits, and INT1, VMCALL and PTWRITE are no branches.
    #[test]
    fn branches_as_perf_classifies_them() {
        use Branch::*;
        let class = |bytes: &[u8]| {
            let i = perf(bytes);
            (i.op, i.branch)
        };
        let cases: &[(&[u8], Op, Branch)] = &[
            (&[0xc2, 0x08, 0x00], Op::Ret, Indirect),
            (&[0xcb], Op::Ret, Indirect),
            (&[0xca, 0x08, 0x00], Op::Ret, Indirect),
            (&[0x48, 0xcf], Op::Iret, Indirect),
            (&[0xcc], Op::Int, Indirect),
            (&[0xcd, 0x80], Op::Int, Indirect),
            (&[0xf1], Op::Other, None),
            (&[0x0f, 0x05], Op::Syscall, Indirect),
            (&[0x0f, 0x34], Op::Syscall, Indirect),
            (&[0x48, 0x0f, 0x07], Op::Sysret, Indirect),
            (&[0x0f, 0x35], Op::Sysret, Indirect),
            (&[0x0f, 0x01, 0xc2], Op::Vmentry, Indirect),
            (&[0x0f, 0x01, 0xc3], Op::Vmentry, Indirect),
            (&[0x0f, 0x01, 0xc1], Op::Other, None),
            (&[0xe2, 0xfe], Op::Loop, Conditional),
            (&[0xe1, 0xfe], Op::Loop, Conditional),
            (&[0xe0, 0xfe], Op::Loop, Conditional),
            (&[0xe3, 0xfe], Op::Jcc, Conditional),
            (&[0x0f, 0x85, 0, 1, 0, 0], Op::Jcc, Conditional),
            (&[0xe9, 0, 1, 0, 0], Op::Jmp, Unconditional),
            (&[0xeb, 0x10], Op::Jmp, Unconditional),
            (&[0xff, 0x20], Op::Jmp, Indirect),
            (&[0xff, 0x28], Op::Jmp, Indirect),
            (&[0xff, 0x10], Op::Call, Indirect),
            (&[0xff, 0x18], Op::Call, Indirect),
            (&[0xe8, 0, 0, 0, 0], Op::Call, Unconditional),
            (&[0xf3, 0x0f, 0xae, 0xe0], Op::Other, None),
            (&[0x48, 0x83, 0xc0, 0x01], Op::Other, None),
        ];
        for &(bytes, op, branch) in cases {
            assert_eq!(class(bytes), (op, branch), "{bytes:02x?}");
        }
        // The displacement of a direct branch, its bytes and length.
        let j = perf(&[0x0f, 0x85, 0x00, 0x01, 0x00, 0x00]);
        assert_eq!((j.rel, j.length), (0x100, 6));
        assert_eq!(&j.buf[..7], &[0x0f, 0x85, 0x00, 0x01, 0x00, 0x00, 0x00]);
        assert_eq!(perf(&[0xe8, 0, 0, 0, 0]).rel, 0);
        assert_eq!(perf(&[0xeb, 0x80]).rel, -128);
        // Indirect branches have none.
        assert_eq!(perf(&[0xff, 0x20]).rel, 0);
    }

    /// The sample flags of each operation (perf's `intel_pt_insn_type`).
    #[test]
    fn sample_flags_of_each_operation() {
        use crate::sample::flags::*;
        assert_eq!(op_flags(Op::Other), 0);
        assert_eq!(op_flags(Op::Call), BRANCH | CALL);
        assert_eq!(op_flags(Op::Ret), BRANCH | RETURN);
        assert_eq!(op_flags(Op::Jcc), BRANCH | CONDITIONAL);
        assert_eq!(op_flags(Op::Loop), BRANCH | CONDITIONAL);
        assert_eq!(op_flags(Op::Jmp), BRANCH);
        assert_eq!(op_flags(Op::Iret), BRANCH | RETURN | INTERRUPT);
        assert_eq!(op_flags(Op::Int), BRANCH | CALL | INTERRUPT);
        assert_eq!(op_flags(Op::Syscall), BRANCH | CALL | SYSCALLRET);
        assert_eq!(op_flags(Op::Sysret), BRANCH | RETURN | SYSCALLRET);
        assert_eq!(op_flags(Op::Vmentry), BRANCH | CALL | VMENTRY);
    }
}
