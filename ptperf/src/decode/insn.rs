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
pub struct Insn {
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

impl Insn {
    /// perf's view of `insn`, whose bytes start `bytes`.
    pub fn from_pt(insn: &PtInsn, bytes: &[u8]) -> Insn {
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
        Insn {
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

    fn perf(bytes: &[u8]) -> Insn {
        let i = decode(bytes, 0x1000, ExecMode::Bit64).unwrap();
        Insn::from_pt(&i, bytes)
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
}
