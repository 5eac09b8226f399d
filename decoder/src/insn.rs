//! Instruction classification: decode one instruction (iced-x86) and say how it can
//! change the flow, the way libipt's instruction-length decoder (`pt_ild`) does.
//!
//! Classes follow libipt's `enum pt_insn_class`; [`InsnKind`] is the finer
//! `pti_inst` detail (which encoding, which special instruction). Direct branch
//! targets are computed as libipt computes them: the address after the instruction plus
//! the sign-extended displacement, wrapping in 64 bits (no truncation to the operand
//! size in 16- and 32-bit code).
//!
//! The text of instructions (ptxed's listing) is the [`crate::listing`] module's.

use iced_x86::{Code, Decoder, DecoderError, DecoderOptions, Instruction, OpKind, Register};
use pt_encoder::packet::ExecMode;

use crate::error::ErrorCode;
pub use crate::image::CodeError;
use crate::image::CodeSource;

/// The longest x86 instruction, in bytes.
pub const MAX_INSN_SIZE: usize = 15;

/// How an instruction can change the flow (libipt's `pt_insn_class`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InsnClass {
    /// Does not change the flow (as far as the trace is concerned).
    Other,
    /// Near call (direct or indirect).
    Call,
    /// Near return.
    Return,
    /// Near unconditional jump (direct or indirect).
    Jump,
    /// Near conditional jump, including JrCXZ and the LOOP family.
    CondJump,
    /// Call-like far transfer: far CALL, INT n/INT3/INT1/INTO, SYSCALL, SYSENTER,
    /// VMCALL.
    FarCall,
    /// Return-like far transfer: far RET, IRET, SYSRET, SYSEXIT, VMLAUNCH, VMRESUME,
    /// UIRET, ERETS, ERETU.
    FarReturn,
    /// Far JMP.
    FarJump,
    /// PTWRITE.
    Ptwrite,
}

/// Which instruction, in the detail the flow decoder needs (libipt's `pti_inst`).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InsnKind {
    /// Nothing special.
    Other,
    /// `CALL rel16/rel32` (E8).
    CallRel,
    /// `CALL r/m` (FF /2).
    CallIndirect,
    /// `CALL m16:16/32/64` (FF /3).
    CallFarIndirect,
    /// `CALL ptr16:16/32` (9A), not in 64-bit mode.
    CallFarDirect,
    /// `JMP rel8/rel16/rel32` (EB, E9).
    JmpRel,
    /// `JMP r/m` (FF /4).
    JmpIndirect,
    /// `JMP m16:16/32/64` (FF /5).
    JmpFarIndirect,
    /// `JMP ptr16:16/32` (EA), not in 64-bit mode.
    JmpFarDirect,
    /// `JMPABS imm64` (REX2 A1): direct, but reported with a TIP.
    Jmpabs,
    /// `Jcc rel8/rel16/rel32` (70-7F, 0F 80-8F).
    Jcc,
    /// `JCXZ/JECXZ/JRCXZ rel8` (E3).
    Jrcxz,
    /// `LOOP rel8` (E2).
    Loop,
    /// `LOOPE rel8` (E1).
    Loope,
    /// `LOOPNE rel8` (E0).
    Loopne,
    /// `RET` (C3).
    Ret,
    /// `RET imm16` (C2).
    RetImm,
    /// `RETF` (CB).
    RetFar,
    /// `RETF imm16` (CA).
    RetFarImm,
    /// `INT imm8` (CD).
    Int,
    /// `INT3` (CC).
    Int3,
    /// `INT1` (F1).
    Int1,
    /// `INTO` (CE), not in 64-bit mode.
    Into,
    /// `IRET/IRETD/IRETQ` (CF).
    Iret,
    /// `SYSCALL` (0F 05).
    Syscall,
    /// `SYSRET` (0F 07).
    Sysret,
    /// `SYSENTER` (0F 34).
    Sysenter,
    /// `SYSEXIT` (0F 35).
    Sysexit,
    /// `VMCALL` (0F 01 C1).
    Vmcall,
    /// `VMLAUNCH` (0F 01 C2).
    Vmlaunch,
    /// `VMRESUME` (0F 01 C3).
    Vmresume,
    /// `VMPTRLD m64` (0F C7 /6 with a memory operand). As in libipt's ILD, which
    /// ignores the prefix, this also covers VMCLEAR (66) and VMXON (F3) on the same
    /// opcode: a pending VMCS event binds to them too.
    Vmptrld,
    /// `UIRET` (F3 0F 01 EC).
    Uiret,
    /// `ERETS` (F2 0F 01 CA).
    Erets,
    /// `ERETU` (F3 0F 01 CA).
    Eretu,
    /// `MOV CR3, r` (0F 22 /3).
    MovCr3,
    /// `PTWRITE r/m32/64` (F3 0F AE /4).
    Ptwrite,
    /// `XBEGIN rel` (C7 F8): class [`InsnClass::Other`], as in libipt.
    Xbegin,
    /// `XEND` (0F 01 D5): class [`InsnClass::Other`].
    Xend,
    /// `XABORT imm8` (C6 F8): class [`InsnClass::Other`].
    Xabort,
    /// `WRMSR` (0F 30) and `WRMSRNS`: class [`InsnClass::Other`].
    Wrmsr,
}

/// One decoded, classified instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Insn {
    /// Its linear address.
    pub ip: u64,
    /// Its length in bytes (1..=15).
    pub size: u8,
    /// How it can change the flow.
    pub class: InsnClass,
    /// Which instruction it is, in more detail.
    pub kind: InsnKind,
    /// The target of a direct near call, jump or conditional jump, which a flow
    /// decoder can follow without trace. `None` for everything else, including
    /// JMPABS (libipt takes its destination from the TIP).
    pub target: Option<u64>,
}

impl Insn {
    /// The address of the next instruction in memory.
    pub fn next_ip(&self) -> u64 {
        self.ip.wrapping_add(u64::from(self.size))
    }

    /// Direct near call, jump or conditional jump (the target is in the code).
    pub fn is_direct(&self) -> bool {
        self.target.is_some()
    }

    /// Any branch: near or far call, return, jump or conditional jump.
    pub fn is_branch(&self) -> bool {
        !matches!(self.class, InsnClass::Other | InsnClass::Ptwrite)
    }

    /// Far call, far return or far jump (these bind to FUP/TIP pairs, PIP and VMCS).
    pub fn is_far_branch(&self) -> bool {
        matches!(
            self.class,
            InsnClass::FarCall | InsnClass::FarReturn | InsnClass::FarJump
        )
    }

    /// A near call whose return address goes on the return stack: every near call
    /// except a direct call to the next instruction (the position-independent-code
    /// idiom `call next; next: pop reg`), which libipt ignores.
    pub fn pushes_return(&self) -> bool {
        self.class == InsnClass::Call && self.target != Some(self.next_ip())
    }

    /// May change the CPL (software interrupts, IRET, SYSCALL/SYSENTER/SYSEXIT/SYSRET).
    pub fn changes_cpl(&self) -> bool {
        use InsnKind::*;
        matches!(
            self.kind,
            Int | Int3 | Int1 | Into | Iret | Syscall | Sysenter | Sysexit | Sysret
        )
    }

    /// Writes CR3.
    pub fn changes_cr3(&self) -> bool {
        self.kind == InsnKind::MovCr3
    }

    /// A PIP packet (paging event) binds to this instruction.
    pub fn binds_to_pip(&self) -> bool {
        self.is_far_branch()
            || matches!(
                self.kind,
                InsnKind::MovCr3 | InsnKind::Vmlaunch | InsnKind::Vmresume
            )
    }

    /// A VMCS packet binds to this instruction.
    pub fn binds_to_vmcs(&self) -> bool {
        self.is_far_branch()
            || matches!(
                self.kind,
                InsnKind::Vmptrld | InsnKind::Vmlaunch | InsnKind::Vmresume
            )
    }

    /// IRET-like: IRET, SYSRET, SYSEXIT, ERETS, ERETU.
    pub fn is_iret(&self) -> bool {
        use InsnKind::*;
        matches!(self.kind, Iret | Sysret | Sysexit | Erets | Eretu)
    }

    /// VM entry: VMLAUNCH, VMRESUME.
    pub fn is_vmentry(&self) -> bool {
        matches!(self.kind, InsnKind::Vmlaunch | InsnKind::Vmresume)
    }

    /// UIRET.
    pub fn is_uiret(&self) -> bool {
        self.kind == InsnKind::Uiret
    }

    /// Software interrupt: INT n, INT3, INT1, INTO.
    pub fn is_swint(&self) -> bool {
        use InsnKind::*;
        matches!(self.kind, Int | Int3 | Int1 | Into)
    }

    /// SYSCALL or SYSENTER.
    pub fn is_syscall(&self) -> bool {
        matches!(self.kind, InsnKind::Syscall | InsnKind::Sysenter)
    }

    /// Whether a block of straight-line code ends with this instruction: it can
    /// change the flow (any class but [`InsnClass::Other`]) or a synchronous event can
    /// bind to it (MOV CR3, VMPTRLD).
    pub fn ends_block(&self) -> bool {
        self.class != InsnClass::Other || matches!(self.kind, InsnKind::MovCr3 | InsnKind::Vmptrld)
    }
}

/// iced-x86's bitness for an execution mode.
pub(crate) fn bitness(mode: ExecMode, ip: u64) -> Result<u32, CodeError> {
    mode.bits()
        .ok_or_else(|| CodeError::new(ErrorCode::BadInsn, ip))
}

/// Sign-extends the little-endian displacement in the last `width` bytes of `bytes`.
fn trailing_disp(bytes: &[u8], width: usize) -> Option<i64> {
    let tail = bytes.get(bytes.len().checked_sub(width)?..)?;
    Some(match *tail {
        [b] => i64::from(b as i8),
        [a, b] => i64::from(i16::from_le_bytes([a, b])),
        [a, b, c, d] => i64::from(i32::from_le_bytes([a, b, c, d])),
        _ => return None,
    })
}

/// Classifies `instr`, whose encoding is `bytes` (exactly its length) at `ip`.
#[inline]
pub(crate) fn classify(instr: &Instruction, bytes: &[u8], ip: u64) -> Insn {
    use InsnClass as C;
    use InsnKind as K;

    let code = instr.code();
    let (class, kind) = match code {
        _ if code.is_jcc_short_or_near() => (C::CondJump, K::Jcc),
        _ if code.is_jcx_short() => (C::CondJump, K::Jrcxz),
        _ if code.is_loop() => (C::CondJump, K::Loop),
        _ if code.is_loopcc() => match instr.mnemonic() {
            iced_x86::Mnemonic::Loope => (C::CondJump, K::Loope),
            _ => (C::CondJump, K::Loopne),
        },
        Code::Call_rel16 | Code::Call_rel32_32 | Code::Call_rel32_64 => (C::Call, K::CallRel),
        Code::Call_rm16 | Code::Call_rm32 | Code::Call_rm64 => (C::Call, K::CallIndirect),
        Code::Call_m1616 | Code::Call_m1632 | Code::Call_m1664 => (C::FarCall, K::CallFarIndirect),
        Code::Call_ptr1616 | Code::Call_ptr1632 => (C::FarCall, K::CallFarDirect),
        Code::Jmp_rel8_16
        | Code::Jmp_rel8_32
        | Code::Jmp_rel8_64
        | Code::Jmp_rel16
        | Code::Jmp_rel32_32
        | Code::Jmp_rel32_64 => (C::Jump, K::JmpRel),
        Code::Jmp_rm16 | Code::Jmp_rm32 | Code::Jmp_rm64 => (C::Jump, K::JmpIndirect),
        Code::Jmp_m1616 | Code::Jmp_m1632 | Code::Jmp_m1664 => (C::FarJump, K::JmpFarIndirect),
        Code::Jmp_ptr1616 | Code::Jmp_ptr1632 => (C::FarJump, K::JmpFarDirect),
        Code::Retnw | Code::Retnd | Code::Retnq => (C::Return, K::Ret),
        Code::Retnw_imm16 | Code::Retnd_imm16 | Code::Retnq_imm16 => (C::Return, K::RetImm),
        Code::Retfw | Code::Retfd | Code::Retfq => (C::FarReturn, K::RetFar),
        Code::Retfw_imm16 | Code::Retfd_imm16 | Code::Retfq_imm16 => (C::FarReturn, K::RetFarImm),
        Code::Int_imm8 => (C::FarCall, K::Int),
        Code::Int3 => (C::FarCall, K::Int3),
        Code::Int1 => (C::FarCall, K::Int1),
        Code::Into => (C::FarCall, K::Into),
        Code::Iretw | Code::Iretd | Code::Iretq => (C::FarReturn, K::Iret),
        Code::Syscall => (C::FarCall, K::Syscall),
        Code::Sysretd | Code::Sysretq => (C::FarReturn, K::Sysret),
        Code::Sysenter => (C::FarCall, K::Sysenter),
        Code::Sysexitd | Code::Sysexitq => (C::FarReturn, K::Sysexit),
        Code::Vmcall => (C::FarCall, K::Vmcall),
        Code::Vmlaunch => (C::FarReturn, K::Vmlaunch),
        Code::Vmresume => (C::FarReturn, K::Vmresume),
        Code::Uiret => (C::FarReturn, K::Uiret),
        Code::Erets => (C::FarReturn, K::Erets),
        Code::Eretu => (C::FarReturn, K::Eretu),
        Code::Vmptrld_m64 | Code::Vmclear_m64 | Code::Vmxon_m64 => (C::Other, K::Vmptrld),
        Code::Mov_cr_r32 | Code::Mov_cr_r64 if instr.op0_register() == Register::CR3 => {
            (C::Other, K::MovCr3)
        }
        Code::Ptwrite_rm32 | Code::Ptwrite_rm64 => (C::Ptwrite, K::Ptwrite),
        Code::Xbegin_rel16 | Code::Xbegin_rel32 => (C::Other, K::Xbegin),
        Code::Xend => (C::Other, K::Xend),
        Code::Xabort_imm8 => (C::Other, K::Xabort),
        Code::Wrmsr | Code::Wrmsrns => (C::Other, K::Wrmsr),
        _ => (C::Other, K::Other),
    };

    let size = bytes.len() as u8;
    let next = ip.wrapping_add(u64::from(size));
    let target = match kind {
        K::Jcc | K::Jrcxz | K::Loop | K::Loope | K::Loopne | K::CallRel | K::JmpRel => {
            // rel8 for the short forms, else rel16 or rel32 by operand size; the
            // displacement is always the last field of the encoding.
            let width = if code.is_jcc_short()
                || code.is_jmp_short()
                || matches!(kind, K::Jrcxz | K::Loop | K::Loope | K::Loopne)
            {
                1
            } else if instr.op0_kind() == OpKind::NearBranch16 {
                2
            } else {
                4
            };
            trailing_disp(bytes, width).map(|disp| next.wrapping_add(disp as u64))
        }
        _ => None,
    };
    Insn {
        ip,
        size,
        class,
        kind,
        target,
    }
}

/// Legacy prefixes: segment overrides, operand and address size, LOCK, REP.
fn is_legacy_prefix(b: u8) -> bool {
    matches!(
        b,
        0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 | 0x66 | 0x67 | 0xf0 | 0xf2 | 0xf3
    )
}

/// Recognizes APX `JMPABS imm64` (REX2 with M0=0 and W=0, opcode A1, no 66/67
/// prefix) in 64-bit code, which iced-x86 does not know. Returns the instruction's
/// length and absolute target.
pub(crate) fn decode_jmpabs(bytes: &[u8]) -> Option<(usize, u64)> {
    let mut at = 0;
    let (mut osz, mut asz) = (false, false);
    while let Some(&b) = bytes.get(at) {
        if !is_legacy_prefix(b) {
            break;
        }
        osz |= b == 0x66;
        asz |= b == 0x67;
        at += 1;
    }
    let [0xd5, payload, 0xa1, ..] = *bytes.get(at..)? else {
        return None;
    };
    // REX2 payload: bit 7 is M0 (map select), bit 3 is W.
    if payload & 0x80 != 0 || payload & 0x08 != 0 || osz || asz {
        return None;
    }
    let imm = bytes.get(at + 3..at + 11)?;
    let size = at + 11;
    if size > MAX_INSN_SIZE {
        return None;
    }
    let mut raw = [0; 8];
    raw.copy_from_slice(imm);
    Some((size, u64::from_le_bytes(raw)))
}

/// The outcome of decoding at one position of a byte run.
pub(crate) enum Step {
    /// A complete instruction.
    Insn(Insn),
    /// The bytes end inside an instruction.
    Truncated,
    /// Not a valid instruction.
    Invalid,
}

/// Decodes instructions one after another from a run of bytes, reusing one decoder.
pub(crate) struct Run<'a> {
    decoder: Decoder<'a>,
    bytes: &'a [u8],
    ip: u64,
    bitness: u32,
    instr: Instruction,
}

impl<'a> Run<'a> {
    /// Starts decoding `bytes`, the code at `ip`.
    pub(crate) fn new(bytes: &'a [u8], ip: u64, mode: ExecMode) -> Result<Self, CodeError> {
        let bitness = bitness(mode, ip)?;
        let decoder = Decoder::try_with_ip(bitness, bytes, ip, DecoderOptions::NONE)
            .map_err(|_| CodeError::new(ErrorCode::Internal, ip))?;
        Ok(Self {
            decoder,
            bytes,
            ip,
            bitness,
            instr: Instruction::default(),
        })
    }

    /// The address of the next instruction to decode.
    pub(crate) fn ip(&self) -> u64 {
        self.ip
    }

    /// Whether all bytes have been consumed.
    pub(crate) fn at_end(&self) -> bool {
        !self.decoder.can_decode()
    }

    /// Decodes the next instruction. Does not advance on failure.
    #[inline]
    pub(crate) fn step(&mut self) -> Step {
        let pos = self.decoder.position();
        self.decoder.decode_out(&mut self.instr);
        let rest = self.bytes.get(pos..).unwrap_or_default();
        if self.instr.is_invalid() {
            let failure = match self.decoder.last_error() {
                DecoderError::NoMoreBytes => Step::Truncated,
                _ => Step::Invalid,
            };
            if self.bitness == 64 {
                if let Some((size, _)) = decode_jmpabs(rest) {
                    return self.jmpabs(pos, size);
                }
                if rest.len() < MAX_INSN_SIZE && looks_like_jmpabs_prefix(rest) {
                    return self.rewind(pos, Step::Truncated);
                }
            }
            return self.rewind(pos, failure);
        }
        let len = self.instr.len();
        if self.instr.op_code().fwait() {
            return self.fwait(pos);
        }
        let Some(raw) = rest.get(..len) else {
            return self.rewind(pos, Step::Invalid);
        };
        let insn = classify(&self.instr, raw, self.ip);
        self.ip = insn.next_ip();
        Step::Insn(insn)
    }

    /// iced-x86 decodes `FWAIT` and the x87 instruction after it as one instruction
    /// (`FSTSW AX` for `9B DF E0`); libipt and XED see two: `FWAIT` (with any
    /// prefixes before it) is an instruction of its own.
    fn fwait(&mut self, pos: usize) -> Step {
        let rest = self.bytes.get(pos..).unwrap_or_default();
        let size = fwait_size(rest);
        let insn = Insn {
            ip: self.ip,
            size: size as u8,
            class: InsnClass::Other,
            kind: InsnKind::Other,
            target: None,
        };
        self.reposition(pos + size);
        self.ip = insn.next_ip();
        Step::Insn(insn)
    }

    fn jmpabs(&mut self, pos: usize, size: usize) -> Step {
        let insn = Insn {
            ip: self.ip,
            size: size as u8,
            class: InsnClass::Jump,
            kind: InsnKind::Jmpabs,
            target: None,
        };
        self.reposition(pos + size);
        self.ip = insn.next_ip();
        Step::Insn(insn)
    }

    fn rewind(&mut self, pos: usize, step: Step) -> Step {
        self.reposition(pos);
        step
    }

    fn reposition(&mut self, pos: usize) {
        // `pos` never exceeds the data length, which is all set_position checks.
        let _ = self.decoder.set_position(pos);
        self.decoder.set_ip(self.ip);
    }
}

/// The size of the `FWAIT` (9B) at the start of `bytes`, with the prefixes before it.
pub(crate) fn fwait_size(bytes: &[u8]) -> usize {
    bytes.iter().position(|&b| b == 0x9b).map_or(1, |at| at + 1)
}

/// Whether `bytes` could be the start of a JMPABS cut short (so that reading more
/// bytes is worth it).
fn looks_like_jmpabs_prefix(bytes: &[u8]) -> bool {
    let at = bytes.iter().take_while(|&&b| is_legacy_prefix(b)).count();
    match bytes.get(at..) {
        Some([0xd5]) => true,
        Some([0xd5, payload, rest @ ..]) => {
            payload & 0x88 == 0 && (rest.is_empty() || rest[0] == 0xa1)
        }
        _ => false,
    }
}

/// Decodes and classifies the instruction at the start of `bytes`, which is the code
/// at `ip`. Errors with [`ErrorCode::BadInsn`] if the bytes are not a valid instruction
/// or end inside one.
pub fn decode(bytes: &[u8], ip: u64, mode: ExecMode) -> Result<Insn, CodeError> {
    let bytes = bytes.get(..MAX_INSN_SIZE).unwrap_or(bytes);
    let mut run = Run::new(bytes, ip, mode)?;
    match run.step() {
        Step::Insn(insn) => Ok(insn),
        Step::Truncated | Step::Invalid => Err(CodeError::new(ErrorCode::BadInsn, ip)),
    }
}

/// Decodes the instruction at `ip` in `src`. An instruction that runs past the end of
/// its section is completed from the sections that follow, as libipt does for
/// partially overwritten code. Errors: [`ErrorCode::NoMap`] if nothing is mapped at
/// `ip`, [`ErrorCode::BadInsn`] if the bytes are no valid instruction.
pub fn decode_at<S: CodeSource + ?Sized>(
    src: &S,
    ip: u64,
    mode: ExecMode,
) -> Result<Insn, CodeError> {
    let bytes = src.bytes_at(ip)?;
    if bytes.len() >= MAX_INSN_SIZE {
        return decode(bytes, ip, mode);
    }
    let mut buf = [0; MAX_INSN_SIZE];
    let n = src.read(ip, &mut buf)?;
    decode(buf.get(..n).unwrap_or_default(), ip, mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ExecMode::{Bit16, Bit32, Bit64};
    use InsnClass as C;
    use InsnKind as K;

    fn check(mode: ExecMode, bytes: &[u8], class: C, kind: K, target: Option<u64>) {
        let ip = 0x1000;
        let insn = decode(bytes, ip, mode).unwrap_or_else(|e| panic!("{bytes:02x?}: {e}"));
        assert_eq!(
            (insn.size as usize, insn.class, insn.kind, insn.target),
            (bytes.len(), class, kind, target),
            "{mode:?} {bytes:02x?}"
        );
    }

    #[test]
    fn near_calls_and_jumps() {
        for mode in [Bit16, Bit32, Bit64] {
            check(mode, &[0xeb, 0xfe], C::Jump, K::JmpRel, Some(0x1000));
            check(mode, &[0x74, 0x10], C::CondJump, K::Jcc, Some(0x1012));
            check(
                mode,
                &[0x7f, 0x80],
                C::CondJump,
                K::Jcc,
                Some(0x1002 - 0x80),
            );
            check(mode, &[0xe3, 0x02], C::CondJump, K::Jrcxz, Some(0x1004));
            check(mode, &[0xe2, 0xfe], C::CondJump, K::Loop, Some(0x1000));
            check(mode, &[0xe1, 0x00], C::CondJump, K::Loope, Some(0x1002));
            check(mode, &[0xe0, 0x01], C::CondJump, K::Loopne, Some(0x1003));
            check(mode, &[0xc3], C::Return, K::Ret, None);
            check(mode, &[0xc2, 0x08, 0x00], C::Return, K::RetImm, None);
            check(mode, &[0xcb], C::FarReturn, K::RetFar, None);
            check(mode, &[0xca, 0x04, 0x00], C::FarReturn, K::RetFarImm, None);
            check(mode, &[0xcd, 0x80], C::FarCall, K::Int, None);
            check(mode, &[0xcc], C::FarCall, K::Int3, None);
            check(mode, &[0xf1], C::FarCall, K::Int1, None);
            check(mode, &[0xcf], C::FarReturn, K::Iret, None);
            check(mode, &[0x0f, 0x05], C::FarCall, K::Syscall, None);
            check(mode, &[0x0f, 0x34], C::FarCall, K::Sysenter, None);
            check(mode, &[0x0f, 0x01, 0xc1], C::FarCall, K::Vmcall, None);
            check(mode, &[0x0f, 0x01, 0xc2], C::FarReturn, K::Vmlaunch, None);
            check(mode, &[0x0f, 0x01, 0xc3], C::FarReturn, K::Vmresume, None);
            check(mode, &[0x0f, 0x30], C::Other, K::Wrmsr, None);
            check(mode, &[0x0f, 0x01, 0xd5], C::Other, K::Xend, None);
            check(mode, &[0xc6, 0xf8, 0x01], C::Other, K::Xabort, None);
            check(mode, &[0x90], C::Other, K::Other, None);
            // ptwrite dword ptr [eax] / [bx+si]
            check(
                mode,
                &[0xf3, 0x0f, 0xae, 0x20],
                C::Ptwrite,
                K::Ptwrite,
                None,
            );
            // call [eax] / [bx+si], jmp [eax] / [bx+si]
            check(mode, &[0xff, 0x10], C::Call, K::CallIndirect, None);
            check(mode, &[0xff, 0x20], C::Jump, K::JmpIndirect, None);
            check(mode, &[0xff, 0x18], C::FarCall, K::CallFarIndirect, None);
            check(mode, &[0xff, 0x28], C::FarJump, K::JmpFarIndirect, None);
            // vmptrld [eax] / [bx+si]
            check(mode, &[0x0f, 0xc7, 0x30], C::Other, K::Vmptrld, None);
            // vmclear [eax] / vmxon [eax] (bx+si in 16-bit code)
            check(mode, &[0x66, 0x0f, 0xc7, 0x30], C::Other, K::Vmptrld, None);
            check(mode, &[0xf3, 0x0f, 0xc7, 0x30], C::Other, K::Vmptrld, None);
            // rdrand eax: the register form is not VMPTRLD
            check(mode, &[0x0f, 0xc7, 0xf0], C::Other, K::Other, None);
            check(mode, &[0x0f, 0x35], C::FarReturn, K::Sysexit, None);
        }
        // CALL/JMP/Jcc rel16 in 16-bit code, rel32 in 32- and 64-bit code.
        check(
            Bit16,
            &[0xe8, 0xfd, 0xff],
            C::Call,
            K::CallRel,
            Some(0x1000),
        );
        check(Bit16, &[0xe9, 0x00, 0x01], C::Jump, K::JmpRel, Some(0x1103));
        check(
            Bit16,
            &[0x0f, 0x84, 0x10, 0x00],
            C::CondJump,
            K::Jcc,
            Some(0x1014),
        );
        for mode in [Bit32, Bit64] {
            let call = [0xe8, 0xfb, 0xff, 0xff, 0xff];
            check(mode, &call, C::Call, K::CallRel, Some(0x1000));
            let jmp = [0xe9, 0x00, 0x00, 0x01, 0x00];
            check(mode, &jmp, C::Jump, K::JmpRel, Some(0x11005));
            let jcc = [0x0f, 0x85, 0x00, 0xf0, 0xff, 0xff];
            check(mode, &jcc, C::CondJump, K::Jcc, Some(0x1006 - 0x1000));
        }
        // An operand-size prefix selects rel32 in 16-bit and rel16 in 32-bit code.
        let call32 = [0x66, 0xe8, 0x00, 0x00, 0x01, 0x00];
        check(Bit16, &call32, C::Call, K::CallRel, Some(0x11006));
        check(
            Bit32,
            &[0x66, 0xe8, 0x00, 0x01],
            C::Call,
            K::CallRel,
            Some(0x1104),
        );
        // Intel ignores 66h on near branches in 64-bit mode: still rel32.
        let call64 = [0x66, 0xe8, 0x00, 0x00, 0x01, 0x00];
        check(Bit64, &call64, C::Call, K::CallRel, Some(0x11006));
        // Targets wrap in 64 bits, not at the operand size (libipt does the same).
        let insn = decode(&[0xeb, 0x80], 0x10, Bit16).unwrap();
        assert_eq!(insn.target, Some(0x12u64.wrapping_sub(0x80)));
    }

    #[test]
    fn mode_specific_instructions() {
        for mode in [Bit16, Bit32] {
            let call = [0x9a, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00];
            let jmp = [0xea, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00];
            let n = if mode == Bit16 { 5 } else { 7 };
            check(mode, &call[..n], C::FarCall, K::CallFarDirect, None);
            check(mode, &jmp[..n], C::FarJump, K::JmpFarDirect, None);
            check(mode, &[0xce], C::FarCall, K::Into, None);
            check(mode, &[0x0f, 0x22, 0xd8], C::Other, K::MovCr3, None);
        }
        for bytes in [
            &[0x9a, 0, 0, 0, 0, 8, 0][..],
            &[0xea, 0, 0, 0, 0, 8, 0],
            &[0xce],
        ] {
            assert_eq!(
                decode(bytes, 0, Bit64).unwrap_err().code,
                ErrorCode::BadInsn
            );
        }
        check(Bit64, &[0x0f, 0x22, 0xd8], C::Other, K::MovCr3, None);
        check(Bit64, &[0x0f, 0x22, 0xc0], C::Other, K::Other, None); // mov cr0, rax
        check(Bit64, &[0x0f, 0x07], C::FarReturn, K::Sysret, None);
        check(Bit64, &[0x48, 0x0f, 0x07], C::FarReturn, K::Sysret, None);
        check(Bit64, &[0x48, 0xcf], C::FarReturn, K::Iret, None);
        check(Bit64, &[0x48, 0x0f, 0x35], C::FarReturn, K::Sysexit, None);
        check(
            Bit64,
            &[0xf3, 0x0f, 0x01, 0xec],
            C::FarReturn,
            K::Uiret,
            None,
        );
        check(
            Bit64,
            &[0xf3, 0x0f, 0x01, 0xca],
            C::FarReturn,
            K::Eretu,
            None,
        );
        check(
            Bit64,
            &[0xf2, 0x0f, 0x01, 0xca],
            C::FarReturn,
            K::Erets,
            None,
        );
        check(
            Bit64,
            &[0xf3, 0x48, 0x0f, 0xae, 0xe0],
            C::Ptwrite,
            K::Ptwrite,
            None,
        );
        check(Bit64, &[0xff, 0xd0], C::Call, K::CallIndirect, None); // call rax
        check(Bit64, &[0x41, 0xff, 0xe3], C::Jump, K::JmpIndirect, None); // jmp r11
        check(
            Bit64,
            &[0x48, 0xff, 0x18],
            C::FarCall,
            K::CallFarIndirect,
            None,
        );
        check(Bit32, &[0xc7, 0xf8, 0, 0, 0, 0], C::Other, K::Xbegin, None);
        check(
            Bit64,
            &[0xe8, 0x00, 0x00, 0x00, 0x00],
            C::Call,
            K::CallRel,
            Some(0x1005),
        );
        check(
            Bit64,
            &[0x67, 0xe3, 0x00],
            C::CondJump,
            K::Jrcxz,
            Some(0x1003),
        );
    }

    #[test]
    fn jmpabs() {
        let bytes = [0xd5, 0x00, 0xa1, 0x0d, 0x10, 0, 0, 0, 0, 0, 0];
        check(Bit64, &bytes, C::Jump, K::Jmpabs, None);
        // W=1, an operand-size prefix or the wrong map are not JMPABS.
        for bad in [
            &[0xd5, 0x08, 0xa1, 0, 0, 0, 0, 0, 0, 0, 0][..],
            &[0x66, 0xd5, 0x00, 0xa1, 0, 0, 0, 0, 0, 0, 0, 0],
            &[0xd5, 0x80, 0xa1, 0, 0, 0, 0, 0, 0, 0, 0],
            &bytes[..10],
        ] {
            assert!(decode(bad, 0, Bit64).is_err(), "{bad:02x?}");
        }
        // D5 is AAD outside 64-bit mode.
        check(Bit32, &[0xd5, 0x0a], C::Other, K::Other, None);
    }

    #[test]
    fn fwait_is_an_instruction_of_its_own() {
        // 9B DF E0 is FWAIT, then FNSTSW AX (libipt and XED), not FSTSW AX.
        check(Bit64, &[0x9b], C::Other, K::Other, None);
        let insn = decode(&[0x9b, 0xdf, 0xe0], 0x1000, Bit64).unwrap();
        assert_eq!(insn.size, 1);
        let insn = decode(&[0x66, 0x9b, 0xdb, 0xe3], 0x1000, Bit32).unwrap();
        assert_eq!(insn.size, 2);
        let insn = decode(&[0xdf, 0xe0], 0x1000, Bit64).unwrap();
        assert_eq!(insn.size, 2);
    }

    #[test]
    fn pushes_return() {
        let pic = decode(&[0xe8, 0, 0, 0, 0], 0x1000, Bit64).unwrap();
        assert!(!pic.pushes_return());
        let call = decode(&[0xe8, 1, 0, 0, 0], 0x1000, Bit64).unwrap();
        assert!(call.pushes_return());
        let ind = decode(&[0xff, 0xd0], 0x1000, Bit64).unwrap();
        assert!(ind.pushes_return() && !ind.is_direct());
        let jmp = decode(&[0xeb, 0], 0x1000, Bit64).unwrap();
        assert!(!jmp.pushes_return() && jmp.is_branch());
    }

    #[test]
    fn predicates() {
        let d = |b: &[u8]| decode(b, 0, Bit64).unwrap();
        assert!(d(&[0x0f, 0x05]).changes_cpl() && d(&[0x0f, 0x05]).is_syscall());
        assert!(d(&[0xcc]).is_swint() && d(&[0xcf]).is_iret());
        assert!(d(&[0x0f, 0x22, 0xd8]).binds_to_pip());
        assert!(d(&[0x0f, 0x22, 0xd8]).ends_block());
        assert!(d(&[0x0f, 0x01, 0xc2]).binds_to_vmcs() && d(&[0x0f, 0x01, 0xc3]).is_vmentry());
        assert!(d(&[0x0f, 0xc7, 0x30]).binds_to_vmcs() && !d(&[0x0f, 0xc7, 0x30]).binds_to_pip());
        assert!(d(&[0xcb]).is_far_branch() && d(&[0xcb]).binds_to_pip());
        assert!(!d(&[0x90]).ends_block() && !d(&[0x0f, 0x30]).ends_block());
        assert!(d(&[0xf3, 0x0f, 0xae, 0xe0]).ends_block());
    }

    #[test]
    fn bad_and_truncated() {
        assert_eq!(
            decode(&[0x0f, 0x0b + 0x0c], 7, Bit64), // 0f 17 /r needs a memory operand
            Err(CodeError::new(ErrorCode::BadInsn, 7))
        );
        assert_eq!(
            decode(&[0xe8, 0x00], 7, Bit64),
            Err(CodeError::new(ErrorCode::BadInsn, 7))
        );
        assert_eq!(
            decode(&[], 7, Bit64),
            Err(CodeError::new(ErrorCode::BadInsn, 7))
        );
        assert_eq!(
            decode(&[0x90], 7, ExecMode::Unknown),
            Err(CodeError::new(ErrorCode::BadInsn, 7))
        );
        // 16 prefixes: longer than any instruction.
        assert!(decode(&[0x66; 16], 7, Bit64).is_err());
    }

    #[test]
    fn decode_at_completes_instructions_across_sections() {
        let mut image = crate::image::Image::new();
        image
            .add_bytes(0x1000, vec![0x90, 0xe8, 0x10], "a")
            .unwrap();
        assert_eq!(
            decode_at(&image, 0x1001, Bit64),
            Err(CodeError::new(ErrorCode::BadInsn, 0x1001))
        );
        image
            .add_bytes(0x1003, vec![0x00, 0x00, 0x00], "b")
            .unwrap();
        let insn = decode_at(&image, 0x1001, Bit64).unwrap();
        assert_eq!((insn.size, insn.target), (5, Some(0x1016)));
        assert_eq!(
            decode_at(&image, 0x2000, Bit64),
            Err(CodeError::no_map(0x2000))
        );
    }
}
