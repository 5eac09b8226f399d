//! Instruction length and control-flow class from the bytes (iced-x86).

use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind, Register};

use super::{CodeMemory, ExecError, ExecMode};

/// Control-flow class of an instruction, as the simulator's PT logic needs it to
/// choose packets (direct or indirect, call or return, far, kernel entry): not
/// the decoder's `pt_decoder::insn::InsnClass`, libipt's classes for following a
/// trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BranchClass {
    /// Not a control transfer: control goes to the next instruction.
    Other,
    /// Jcc, LOOP/LOOPcc, JrCXZ: taken or not (one TNT bit).
    CondBranch,
    /// Near JMP with the target in the instruction.
    DirectJump,
    /// Near JMP through a register or memory.
    IndirectJump,
    /// Near CALL with the target in the instruction.
    DirectCall,
    /// Near CALL through a register or memory.
    IndirectCall,
    /// Near RET.
    Return,
    /// Far JMP/CALL/RET, IRET, SYSRET, SYSEXIT: a far transfer (within one
    /// privilege level, or from the kernel back to user mode).
    FarBranch,
    /// SYSCALL, SYSENTER, INT n, INT3, INT1, INTO: control passes to the kernel.
    KernelEntry,
}

impl BranchClass {
    /// Whether the instruction can change the flow of control.
    pub fn is_branch(self) -> bool {
        self != BranchClass::Other
    }

    /// Whether the target is not in the instruction (indirect, return, far).
    pub fn is_indirect(self) -> bool {
        matches!(
            self,
            BranchClass::IndirectJump
                | BranchClass::IndirectCall
                | BranchClass::Return
                | BranchClass::FarBranch
                | BranchClass::KernelEntry
        )
    }
}

/// Which instruction entered the kernel (selects the system call ABI).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelEntry {
    /// SYSCALL.
    Syscall,
    /// SYSENTER.
    Sysenter,
    /// INT n (`INT 0x80` is the i386 system call gate).
    Int(u8),
    /// INT3 (breakpoint).
    Int3,
    /// INT1 / ICEBP.
    Int1,
    /// INTO.
    Into,
}

/// What one decoded instruction tells the execution sources.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DecodedInsn {
    /// Length in bytes.
    pub len: u8,
    /// Control-flow class.
    pub class: BranchClass,
    /// Target of a direct near jump, call or conditional branch.
    pub target: Option<u64>,
    /// Set for kernel entries: which instruction.
    pub kernel_entry: Option<KernelEntry>,
    /// MOV to CR3 (class [`BranchClass::Other`]; privileged).
    pub mov_cr3: bool,
    /// A string instruction with a REP/REPNE prefix: single-stepping stops
    /// after every iteration with the IP unchanged.
    pub rep_string: bool,
}

/// The decoder bitness for an execution mode (64 for the reserved one).
pub fn bitness(mode: ExecMode) -> u32 {
    mode.bits().unwrap_or(64)
}

/// Decodes the instruction at `ip` from `bytes` (which start at `ip`).
pub fn decode_bytes(bytes: &[u8], ip: u64, mode: ExecMode) -> Result<DecodedInsn, ExecError> {
    let mut decoder = Decoder::with_ip(bitness(mode), bytes, ip, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    decoder.decode_out(&mut insn);
    if insn.is_invalid() {
        // Too few bytes shows up as invalid too; callers tell the cases apart.
        return Err(ExecError::InvalidInsn { ip });
    }
    Ok(classify(&insn))
}

/// Decodes the instruction at `ip` from captured code.
pub fn decode_at(mem: &CodeMemory, ip: u64, mode: ExecMode) -> Result<DecodedInsn, ExecError> {
    let mut buf = [0u8; 15];
    let n = mem.read(ip, &mut buf);
    if n == 0 {
        return Err(ExecError::NoCode { ip });
    }
    match decode_bytes(&buf[..n], ip, mode) {
        Err(ExecError::InvalidInsn { .. }) if n < buf.len() => Err(ExecError::NoCode {
            ip: ip.wrapping_add(n as u64),
        }),
        r => r,
    }
}

fn classify(insn: &Instruction) -> DecodedInsn {
    let near_target = || match insn.op0_kind() {
        OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64 => {
            Some(insn.near_branch_target())
        }
        _ => None,
    };
    let mnemonic = insn.mnemonic();
    let (class, target, kernel_entry) = match insn.flow_control() {
        FlowControl::Next | FlowControl::XbeginXabortXend | FlowControl::Exception => {
            (BranchClass::Other, None, None)
        }
        FlowControl::ConditionalBranch => (BranchClass::CondBranch, near_target(), None),
        FlowControl::UnconditionalBranch => {
            if insn.is_jmp_far() {
                (BranchClass::FarBranch, None, None)
            } else {
                (BranchClass::DirectJump, near_target(), None)
            }
        }
        FlowControl::IndirectBranch => {
            if insn.is_jmp_far_indirect() {
                (BranchClass::FarBranch, None, None)
            } else {
                (BranchClass::IndirectJump, None, None)
            }
        }
        FlowControl::Call => match mnemonic {
            Mnemonic::Syscall => (BranchClass::KernelEntry, None, Some(KernelEntry::Syscall)),
            Mnemonic::Sysenter => (BranchClass::KernelEntry, None, Some(KernelEntry::Sysenter)),
            Mnemonic::Call if insn.is_call_far() => (BranchClass::FarBranch, None, None),
            Mnemonic::Call => (BranchClass::DirectCall, near_target(), None),
            // VMCALL and friends fault in user mode.
            _ => (BranchClass::KernelEntry, None, None),
        },
        FlowControl::IndirectCall => {
            if insn.is_call_far_indirect() {
                (BranchClass::FarBranch, None, None)
            } else {
                (BranchClass::IndirectCall, None, None)
            }
        }
        FlowControl::Return => match mnemonic {
            Mnemonic::Ret => (BranchClass::Return, None, None),
            // SYSRET and SYSEXIT fault in user mode; at CPL 0 they return to it.
            Mnemonic::Retf
            | Mnemonic::Iret
            | Mnemonic::Iretd
            | Mnemonic::Iretq
            | Mnemonic::Sysret
            | Mnemonic::Sysretq
            | Mnemonic::Sysexit
            | Mnemonic::Sysexitq => (BranchClass::FarBranch, None, None),
            // RSM and the like: privileged, they fault in user mode.
            _ => (BranchClass::KernelEntry, None, None),
        },
        FlowControl::Interrupt => {
            let which = match mnemonic {
                Mnemonic::Int3 => KernelEntry::Int3,
                Mnemonic::Int1 => KernelEntry::Int1,
                Mnemonic::Into => KernelEntry::Into,
                _ => KernelEntry::Int(insn.immediate8()),
            };
            (BranchClass::KernelEntry, None, Some(which))
        }
    };
    let rep_string = (insn.has_rep_prefix() || insn.has_repne_prefix())
        && matches!(
            mnemonic,
            Mnemonic::Movsb
                | Mnemonic::Movsw
                | Mnemonic::Movsd
                | Mnemonic::Movsq
                | Mnemonic::Stosb
                | Mnemonic::Stosw
                | Mnemonic::Stosd
                | Mnemonic::Stosq
                | Mnemonic::Lodsb
                | Mnemonic::Lodsw
                | Mnemonic::Lodsd
                | Mnemonic::Lodsq
                | Mnemonic::Cmpsb
                | Mnemonic::Cmpsw
                | Mnemonic::Cmpsd
                | Mnemonic::Cmpsq
                | Mnemonic::Scasb
                | Mnemonic::Scasw
                | Mnemonic::Scasd
                | Mnemonic::Scasq
                | Mnemonic::Insb
                | Mnemonic::Insw
                | Mnemonic::Insd
                | Mnemonic::Outsb
                | Mnemonic::Outsw
                | Mnemonic::Outsd
        )
        // MOVSD/CMPSD with operands are the SSE2 forms, not string moves.
        && insn.op_count() <= 2
        && (0..insn.op_count()).all(|i| {
            matches!(
                insn.op_kind(i),
                OpKind::MemorySegSI
                    | OpKind::MemorySegESI
                    | OpKind::MemorySegRSI
                    | OpKind::MemoryESDI
                    | OpKind::MemoryESEDI
                    | OpKind::MemoryESRDI
                    | OpKind::Register
            )
        });
    let mov_cr3 = mnemonic == Mnemonic::Mov
        && insn.op0_kind() == OpKind::Register
        && insn.op0_register() == Register::CR3;
    DecodedInsn {
        len: insn.len() as u8,
        class,
        target,
        kernel_entry,
        mov_cr3,
        rep_string,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(bytes: &[u8]) -> DecodedInsn {
        decode_bytes(bytes, 0x1000, ExecMode::Bit64).unwrap()
    }

    #[test]
    fn classes() {
        assert_eq!(d(&[0x90]).class, BranchClass::Other);
        let jz = d(&[0x74, 0x10]);
        assert_eq!(
            (jz.class, jz.len, jz.target),
            (BranchClass::CondBranch, 2, Some(0x1012))
        );
        let jmp = d(&[0xeb, 0xfe]);
        assert_eq!(
            (jmp.class, jmp.target),
            (BranchClass::DirectJump, Some(0x1000))
        );
        assert_eq!(d(&[0xff, 0xe0]).class, BranchClass::IndirectJump); // jmp rax
        let call = d(&[0xe8, 0, 0, 0, 0]);
        assert_eq!(
            (call.class, call.target),
            (BranchClass::DirectCall, Some(0x1005))
        );
        assert_eq!(d(&[0xff, 0xd0]).class, BranchClass::IndirectCall); // call rax
        assert_eq!(d(&[0xc3]).class, BranchClass::Return);
        assert_eq!(d(&[0xf3, 0xc3]).class, BranchClass::Return); // rep ret
        assert!(!d(&[0xf3, 0xc3]).rep_string);
        assert_eq!(d(&[0x48, 0xcf]).class, BranchClass::FarBranch); // iretq
        let sc = d(&[0x0f, 0x05]);
        assert_eq!(
            (sc.class, sc.kernel_entry),
            (BranchClass::KernelEntry, Some(KernelEntry::Syscall))
        );
        assert_eq!(d(&[0xcd, 0x80]).kernel_entry, Some(KernelEntry::Int(0x80)));
        assert_eq!(d(&[0xcc]).kernel_entry, Some(KernelEntry::Int3));
        assert_eq!(d(&[0xe2, 0xfe]).class, BranchClass::CondBranch); // loop
        assert_eq!(d(&[0xe3, 0x00]).class, BranchClass::CondBranch); // jrcxz
        assert_eq!(d(&[0x48, 0x0f, 0x07]).class, BranchClass::FarBranch); // sysretq
        assert_eq!(d(&[0x0f, 0x35]).class, BranchClass::FarBranch); // sysexit
        let mov = d(&[0x0f, 0x22, 0xd8]); // mov cr3, rax
        assert!(mov.mov_cr3 && mov.class == BranchClass::Other);
        assert!(!d(&[0x0f, 0x20, 0xd8]).mov_cr3); // mov rax, cr3
        assert!(!d(&[0x0f, 0x22, 0xe0]).mov_cr3); // mov cr4, rax
    }

    #[test]
    fn rep_string_detection() {
        assert!(d(&[0xf3, 0xa4]).rep_string); // rep movsb
        assert!(d(&[0xf3, 0x48, 0xab]).rep_string); // rep stosq
        assert!(d(&[0xf2, 0xae]).rep_string); // repne scasb
        assert!(!d(&[0xa4]).rep_string); // movsb
                                         // movsd xmm0, xmm1 (F2 0F 10 C1) is an SSE move, not a string op.
        assert!(!d(&[0xf2, 0x0f, 0x10, 0xc1]).rep_string);
    }

    #[test]
    fn short_and_missing_bytes() {
        let mut m = CodeMemory::new();
        let mut page = vec![0x90u8; 4096];
        page[4095] = 0xe8; // call rel32 cut by the page end
        m.set_page(0x1000, &page);
        assert!(matches!(
            decode_at(&m, 0x1ffe, ExecMode::Bit64),
            Ok(DecodedInsn { len: 1, .. })
        ));
        assert!(matches!(
            decode_at(&m, 0x1fff, ExecMode::Bit64),
            Err(ExecError::NoCode { ip: 0x2000 })
        ));
        assert!(matches!(
            decode_at(&m, 0x3000, ExecMode::Bit64),
            Err(ExecError::NoCode { ip: 0x3000 })
        ));
        assert!(matches!(
            decode_bytes(&[0x0f, 0x0b], 0, ExecMode::Bit64),
            Ok(DecodedInsn {
                class: BranchClass::Other,
                ..
            })
        )); // ud2 decodes; it never retires
        assert!(matches!(
            decode_bytes(&[0x06], 0, ExecMode::Bit64),
            Err(ExecError::InvalidInsn { .. })
        )); // push es
        assert!(decode_bytes(&[0x06], 0, ExecMode::Bit32).is_ok());
    }
}
