//! Instruction text as XED prints it: libipt's ptxed formats every instruction with
//! XED's `xed_format_generic` (default options, the instruction's address as the runtime
//! address, Intel syntax or with `--att` AT&T syntax).
//!
//! XED prints what its operand model holds: the operands its tables mark explicit or
//! implicit, never the suppressed ones (except the memory operands of string
//! instructions, and the segment of a suppressed memory operand where it is not the
//! default). iced-x86 decodes; this module prints the decoded instruction under XED's
//! rules: operand order, memory operand sizes (`byte` … `zmmword`, nothing for other
//! sizes), displacement and immediate widths, segment overrides only where they differ
//! from the default, AVX-512 decorations, and the prefixes XED names (`rep`, `lock`,
//! `bnd`, `notrack`, branch hints, `data16`/`addr32` where no operand shows the size).
//! Where XED's operand model differs from iced-x86's for one instruction form, the table
//! in [`super::fixup`] says how.

use core::fmt::Write;

use iced_x86::{
    Code, Decoder, DecoderOptions, FormatMnemonicOptions, Formatter, Instruction,
    InstructionInfoFactory, IntelFormatter, MandatoryPrefix, MemorySize, OpCodeOperandKind, OpKind,
    Register, RoundingControl,
};

use super::fixup::{self, Rule, Show};

/// The syntax to print in (libipt's ptxed: Intel, or AT&T with `--att`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Syntax {
    /// Intel syntax (ptxed's default).
    #[default]
    Intel,
    /// AT&T syntax (ptxed's `--att`).
    Att,
}

/// The iced-x86 decoder options that decode as XED does by default: XED decodes the
/// `F3`-prefixed forms of `BSF`, `BSR` and `WBINVD` as those instructions, not as
/// `TZCNT`, `LZCNT` and `WBNOINVD`.
pub(crate) const DECODER_OPTIONS: u32 =
    DecoderOptions::NO_MPFX_0FBC | DecoderOptions::NO_MPFX_0FBD | DecoderOptions::NO_WBNOINVD;

/// Formats decoded instructions the way XED does.
pub(crate) struct XedPrinter {
    mnemonics: IntelFormatter,
    info: InstructionInfoFactory,
    mnemonic: String,
}

impl XedPrinter {
    pub(crate) fn new() -> Self {
        use iced_x86::{CC_a, CC_ae, CC_b, CC_be, CC_e, CC_g, CC_ge, CC_l, CC_le, CC_ne};
        let mut f = IntelFormatter::new();
        let o = f.options_mut();
        o.set_uppercase_mnemonics(false);
        o.set_use_pseudo_ops(false);
        o.set_cc_b(CC_b::b);
        o.set_cc_ae(CC_ae::nb);
        o.set_cc_e(CC_e::z);
        o.set_cc_ne(CC_ne::nz);
        o.set_cc_be(CC_be::be);
        o.set_cc_a(CC_a::nbe);
        o.set_cc_l(CC_l::l);
        o.set_cc_ge(CC_ge::nl);
        o.set_cc_le(CC_le::le);
        o.set_cc_g(CC_g::nle);
        Self {
            mnemonics: f,
            info: InstructionInfoFactory::new(),
            mnemonic: String::new(),
        }
    }

    /// Appends the text of `instr`, decoded from `bytes` (exactly its encoding) in
    /// `bitness`-bit code.
    pub(crate) fn format(
        &mut self,
        instr: &Instruction,
        bytes: &[u8],
        bitness: u32,
        syntax: Syntax,
        out: &mut String,
    ) {
        let mut rule = fixup::rule(instr.code());
        let mut reserved = Instruction::default();
        let mut instr = instr;
        if rule.reserved_nop {
            // XED decodes this opcode as the reserved NOP it was before the extension.
            let mut d = Decoder::new(
                bitness,
                bytes,
                DECODER_OPTIONS | DecoderOptions::FORCE_RESERVED_NOP,
            );
            d.decode_out(&mut reserved);
            if !reserved.is_invalid() && reserved.len() == instr.len() {
                instr = &reserved;
                rule = fixup::rule(instr.code());
            }
        }
        let shown = Shown::of(instr, &rule, bitness);
        let mut p = Print {
            instr,
            bytes,
            bitness,
            rule: &rule,
            syntax,
            out,
            emitted: false,
        };
        let lp = LegacyPrefixes::scan(bytes, bitness == 64);
        p.prefixes(&lp, &shown);
        self.mnemonic.clear();
        match rule.mnemonic {
            Some(m) => self.mnemonic.push_str(m),
            None => self.mnemonics.format_mnemonic_options(
                instr,
                &mut self.mnemonic,
                FormatMnemonicOptions::NO_PREFIXES,
            ),
        }
        match syntax {
            Syntax::Intel => p.out.push_str(&self.mnemonic),
            Syntax::Att => {
                p.out.push_str(rule.att_mnemonic.unwrap_or(&self.mnemonic));
                if let Some(suffix) = size_name(p.att_suffix_size(&mut self.info), Syntax::Att) {
                    p.out.push_str(suffix);
                }
            }
        }
        let listed = !shown.is_empty()
            || rule
                .suppressed
                .unwrap_or_else(|| has_implicit_operands(&mut self.info, instr));
        if listed {
            p.out.push(' ');
        }
        match syntax {
            Syntax::Intel => shown.iter().enumerate().for_each(|(i, &s)| {
                p.operand(s, i);
                if i == 0 && p.vsib_mask() {
                    p.spacer();
                    p.reg(p.instr.op_mask());
                }
            }),
            Syntax::Att if rule.att_intel_order => {
                shown.iter().enumerate().for_each(|(i, &s)| p.operand(s, i))
            }
            Syntax::Att => shown.iter().enumerate().rev().for_each(|(i, &s)| {
                if i == 0 && p.vsib_mask() {
                    p.spacer();
                    p.reg(p.instr.op_mask());
                }
                p.operand(s, i);
            }),
        }
    }
}

/// Whether XED's operand list holds operands it does not print (registers, flags or
/// memory the instruction uses implicitly): then a blank follows the mnemonic even when
/// nothing else does.
fn has_implicit_operands(factory: &mut InstructionInfoFactory, instr: &Instruction) -> bool {
    let info = factory.info(instr);
    !info.used_registers().is_empty()
        || !info.used_memory().is_empty()
        || instr.rflags_read() != 0
        || instr.rflags_written() != 0
        || instr.rflags_cleared() != 0
        || instr.rflags_set() != 0
        || instr.rflags_undefined() != 0
        || instr.flow_control() != iced_x86::FlowControl::Next
}

/// The operands XED prints, in its (Intel) order.
struct Shown {
    list: [Show; 6],
    len: usize,
}

impl Shown {
    fn of(instr: &Instruction, rule: &Rule, bitness: u32) -> Self {
        let mut s = Self {
            list: [Show::Op(0); 6],
            len: 0,
        };
        let has_memory = (0..instr.op_count()).any(|n| is_memory(instr.op_kind(n)));
        match rule.mem_ops.filter(|_| has_memory).or(rule.ops) {
            Some(list) => {
                for &op in list {
                    s.push(op);
                }
            }
            None => {
                let op_code = instr.op_code();
                for n in 0..instr.op_count().min(6) {
                    // The x87 stack top where the form names it (`D8 C0+i` and the
                    // like) is XED's implicit `st`.
                    if op_code.op_kind(n) == OpCodeOperandKind::st0 {
                        s.push(Show::St);
                    } else {
                        s.push(Show::Op(n as u8));
                    }
                }
            }
        }
        let _ = bitness;
        s
    }

    fn push(&mut self, show: Show) {
        if let Some(slot) = self.list.get_mut(self.len) {
            *slot = show;
            self.len += 1;
        }
    }

    fn iter(&self) -> core::slice::Iter<'_, Show> {
        self.list[..self.len].iter()
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }
}

struct Print<'a> {
    instr: &'a Instruction,
    bytes: &'a [u8],
    bitness: u32,
    rule: &'a Rule,
    syntax: Syntax,
    out: &'a mut String,
    /// Whether an operand was printed (the next one needs a separator).
    emitted: bool,
}

/// `0x` and `v` in lower-case hex, cut to `bits`.
fn hex(out: &mut String, v: u64, bits: u32) {
    let v = if bits >= 64 {
        v
    } else {
        v & ((1u64 << bits) - 1)
    };
    let _ = write!(out, "0x{v:x}");
}

/// XED's name for a memory operand of `size` bytes (Intel: `dword ` …; AT&T: the
/// mnemonic suffix `l ` …), if it has one.
fn size_name(size: usize, syntax: Syntax) -> Option<&'static str> {
    let (intel, att) = match size {
        1 => ("byte ", "b "),
        2 => ("word ", "w "),
        4 => ("dword ", "l "),
        8 => ("qword ", "q "),
        16 => ("xmmword ", "x "),
        32 => ("ymmword ", "y "),
        64 => ("zmmword ", "z "),
        _ => return None,
    };
    Some(match syntax {
        Syntax::Intel => intel,
        Syntax::Att => att,
    })
}

/// The operand kinds that are memory operands.
fn is_memory(kind: OpKind) -> bool {
    matches!(
        kind,
        OpKind::Memory
            | OpKind::MemorySegSI
            | OpKind::MemorySegESI
            | OpKind::MemorySegRSI
            | OpKind::MemorySegDI
            | OpKind::MemorySegEDI
            | OpKind::MemorySegRDI
            | OpKind::MemoryESDI
            | OpKind::MemoryESEDI
            | OpKind::MemoryESRDI
    )
}

/// The near branches that take a `BND` prefix (XED's MPX-able branches).
fn takes_bnd(code: Code) -> bool {
    use Code::*;
    code.is_jcc_near()
        || code.is_jcc_short()
        || matches!(
            code,
            Call_rel16
                | Call_rel32_32
                | Call_rel32_64
                | Call_rm16
                | Call_rm32
                | Call_rm64
                | Jmp_rel16
                | Jmp_rel32_32
                | Jmp_rel32_64
                | Jmp_rm16
                | Jmp_rm32
                | Jmp_rm64
                | Retnw
                | Retnd
                | Retnq
                | Retnw_imm16
                | Retnd_imm16
                | Retnq_imm16
        )
}

/// The indirect near branches that take CET's `NOTRACK` prefix.
fn takes_notrack(code: Code) -> bool {
    use Code::*;
    matches!(
        code,
        Call_rm16 | Call_rm32 | Call_rm64 | Jmp_rm16 | Jmp_rm32 | Jmp_rm64
    )
}

impl Print<'_> {
    fn prefixes(&mut self, lp: &LegacyPrefixes, shown: &Shown) {
        let i = self.instr;
        let code = i.code();
        let mut names: [&str; 6] = [""; 6];
        let mut n = 0;
        let mut pre = |s: &'static str| {
            names[n] = s;
            n += 1;
        };
        if takes_bnd(code) && lp.last_f2f3 == 0xf2 {
            pre("bnd");
        }
        if i.has_xacquire_prefix() {
            pre("xacquire");
        }
        if i.has_xrelease_prefix() {
            pre("xrelease");
        }
        if lp.lock {
            pre("lock");
        }
        let real_rep = (i.is_string_instruction() || self.rule.rep) && lp.last_f2f3 != 0;
        if real_rep {
            pre(if lp.last_f2f3 == 0xf3 { "rep" } else { "repne" });
        } else if code.is_jcc_short_or_near() && lp.hint == 0x2e {
            pre("hint-not-taken");
        } else if code.is_jcc_short_or_near() && lp.hint == 0x3e {
            pre("hint-taken");
        } else if takes_notrack(code) && lp.hint == 0x3e {
            pre("notrack");
        }
        let explicit_mem = shown.iter().any(|&s| match s {
            Show::Op(n) | Show::OpW(n, _) => is_memory(i.op_kind(u32::from(n))),
            _ => false,
        }) || self.rule.agen;
        if lp.asz && !explicit_mem {
            pre(if self.bitness == 32 {
                "addr16"
            } else {
                "addr32"
            });
        }
        let explicit = shown.iter().any(|&s| !matches!(s, Show::Seg | Show::EsSeg));
        let osz = lp.osz
            && !self.rule.osz_immune
            && i.op_code().mandatory_prefix() != MandatoryPrefix::P66;
        if osz && !explicit {
            pre(if self.bitness == 16 {
                "data32"
            } else {
                "data16"
            });
        }
        for name in &names[..n] {
            self.out.push_str(name);
            self.out.push(' ');
        }
    }

    /// The size XED's first memory operand gives an AT&T mnemonic as its suffix.
    fn att_suffix_size(&self, factory: &mut InstructionInfoFactory) -> usize {
        if let Some(size) = self.rule.att_suffix {
            return usize::from(size);
        }
        let i = self.instr;
        if self.rule.agen {
            return 0;
        }
        for n in 0..i.op_count() {
            if is_memory(i.op_kind(n)) {
                return self.memory_size();
            }
        }
        // An implicit memory operand (the stack, a string): the first XED lists.
        let info = factory.info(i);
        info.used_memory()
            .first()
            .map_or(0, |m| m.memory_size().size())
    }

    fn spacer(&mut self) {
        if self.emitted {
            self.out.push_str(", ");
        }
        self.emitted = true;
    }

    fn reg(&mut self, reg: Register) {
        if self.syntax == Syntax::Att {
            self.out.push('%');
        }
        self.out.push_str(reg_name(reg));
    }

    fn imm(&mut self, v: u64, bits: u32) {
        if self.syntax == Syntax::Att {
            self.out.push('$');
        }
        hex(self.out, v, bits);
    }

    /// Prints operand `show`, the `index`th in XED's (Intel) order.
    fn operand(&mut self, show: Show, index: usize) {
        let i = self.instr;
        match show {
            Show::Seg | Show::EsSeg => {
                let seg = if show == Show::EsSeg {
                    if self.bitness == 64 {
                        // XED keeps no segment for it in 64-bit code.
                        if self.syntax == Syntax::Att {
                            self.spacer();
                            self.out.push_str("invalid:");
                        }
                        return;
                    }
                    Register::ES
                } else {
                    i.memory_segment()
                };
                let default = default_segment(i.memory_base());
                if seg != default && !(self.bitness == 64 && is_legacy_segment(seg)) {
                    self.spacer();
                    self.out.push_str(reg_name(seg));
                    if self.syntax == Syntax::Att {
                        self.out.push(':');
                    }
                }
                return;
            }
            _ => {}
        }
        self.spacer();
        match show {
            Show::St => {
                self.out.push_str(if self.syntax == Syntax::Att {
                    "%st"
                } else {
                    "st"
                });
            }
            Show::Reg(reg) => self.reg(reg),
            Show::RmGpr => {
                let reg = rm_gpr(self.bytes, i, self.bitness);
                self.reg(reg);
            }
            Show::OpW(n, bits) if i.op_kind(u32::from(n)) == OpKind::Register => {
                let reg = i.op_register(u32::from(n));
                self.reg(gpr_of_width(reg, bits));
            }
            Show::OpW(n, _) => self.iced_operand(u32::from(n), index),
            Show::Op(n) => self.iced_operand(u32::from(n), index),
            Show::Seg | Show::EsSeg => {}
        }
    }

    fn iced_operand(&mut self, n: u32, index: usize) {
        let i = self.instr;
        match i.op_kind(n) {
            OpKind::Register => {
                self.reg(i.op_register(n));
                if index == 0 {
                    self.mask_decorations();
                }
                if let Some(extra) = self.rule.multi_reg {
                    if n == u32::from(extra.0) {
                        let _ = write!(self.out, "+{}", extra.1);
                    }
                }
            }
            OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64 => {
                let bits = if self.bitness == 64 { 64 } else { 32 };
                hex(self.out, i.near_branch_target(), bits);
            }
            OpKind::FarBranch16 | OpKind::FarBranch32 => {
                let (offset, bits) = if i.op_kind(n) == OpKind::FarBranch16 {
                    (u64::from(i.far_branch16()), 16)
                } else {
                    (u64::from(i.far_branch32()), 32)
                };
                let selector = u64::from(i.far_branch_selector());
                match self.syntax {
                    Syntax::Intel => {
                        hex(self.out, offset, bits);
                        self.out.push_str(", ");
                        hex(self.out, selector, 16);
                    }
                    Syntax::Att => {
                        self.imm(selector, 16);
                        self.out.push_str(", ");
                        self.imm(offset, bits);
                    }
                }
            }
            OpKind::Immediate8 | OpKind::Immediate8_2nd => {
                let v = if self.rule.raw_imm8 {
                    u64::from(self.bytes.last().copied().unwrap_or(0))
                } else {
                    i.immediate(n)
                };
                self.imm(v, 8);
            }
            OpKind::Immediate16 => self.imm(i.immediate(n), 16),
            OpKind::Immediate32 => self.imm(i.immediate(n), 32),
            OpKind::Immediate64 => self.imm(i.immediate(n), 64),
            OpKind::Immediate8to16 => self.imm(i.immediate(n), 16),
            OpKind::Immediate8to32 => self.imm(i.immediate(n), 32),
            OpKind::Immediate8to64 | OpKind::Immediate32to64 => self.imm(i.immediate(n), 64),
            kind => self.memory(kind, index),
        }
    }

    /// `{k1}{z}` and the rounding control, after the first operand.
    fn mask_decorations(&mut self) {
        let i = self.instr;
        if i.op_mask() != Register::None && !self.vsib_mask() {
            self.out.push('{');
            self.reg(i.op_mask());
            self.out.push('}');
        }
        if i.zeroing_masking() {
            self.out.push_str("{z}");
        }
        if i.op_code().ignores_rounding_control() {
            return;
        }
        self.out.push_str(match i.rounding_control() {
            RoundingControl::None if i.suppress_all_exceptions() => "{sae}",
            RoundingControl::None => "",
            RoundingControl::RoundToNearest => "{rne-sae}",
            RoundingControl::RoundDown => "{rd-sae}",
            RoundingControl::RoundUp => "{ru-sae}",
            RoundingControl::RoundTowardZero => "{rz-sae}",
        });
    }

    /// Whether the mask of an EVEX gather or scatter is an operand of its own (XED
    /// lists it after the first operand).
    fn vsib_mask(&self) -> bool {
        let i = self.instr;
        i.op_mask() != Register::None
            && i.encoding() == iced_x86::EncodingKind::EVEX
            && i.memory_index().is_vector_register()
    }

    /// The size of the memory operand as XED gives it, in bytes.
    fn memory_size(&self) -> usize {
        if let Some(size) = self.rule.mem_size {
            return usize::from(size);
        }
        let m = self.instr.memory_size();
        if self.instr.is_broadcast() {
            m.element_size()
        } else {
            m.size()
        }
    }

    fn memory(&mut self, kind: OpKind, index: usize) {
        let i = self.instr;
        let (seg, base, idx, scale, default) = match kind {
            OpKind::MemorySegSI | OpKind::MemorySegESI | OpKind::MemorySegRSI => {
                let base = match kind {
                    OpKind::MemorySegSI => Register::SI,
                    OpKind::MemorySegESI => Register::ESI,
                    _ => Register::RSI,
                };
                (i.memory_segment(), base, Register::None, 1, Register::DS)
            }
            OpKind::MemorySegDI | OpKind::MemorySegEDI | OpKind::MemorySegRDI => {
                let base = match kind {
                    OpKind::MemorySegDI => Register::DI,
                    OpKind::MemorySegEDI => Register::EDI,
                    _ => Register::RDI,
                };
                (i.memory_segment(), base, Register::None, 1, Register::DS)
            }
            OpKind::MemoryESDI | OpKind::MemoryESEDI | OpKind::MemoryESRDI => {
                let base = match kind {
                    OpKind::MemoryESDI => Register::DI,
                    OpKind::MemoryESEDI => Register::EDI,
                    _ => Register::RDI,
                };
                (Register::ES, base, Register::None, 1, Register::ES)
            }
            _ => {
                let base = i.memory_base();
                (
                    i.memory_segment(),
                    base,
                    i.memory_index(),
                    i.memory_index_scale(),
                    default_segment(base),
                )
            }
        };
        let seg_shown = seg != default
            && seg != Register::None
            && !self.rule.agen
            && !(self.bitness == 64 && is_legacy_segment(seg));
        let (disp, disp_bits) = if kind == OpKind::Memory {
            self.displacement()
        } else {
            (0, 0)
        };
        let no_base_index = base == Register::None && idx == Register::None;
        match self.syntax {
            Syntax::Intel => {
                if !self.rule.agen {
                    if let Some(name) = size_name(self.memory_size(), Syntax::Intel) {
                        self.out.push_str(name);
                    }
                }
                if !self.rule.no_ptr {
                    self.out.push_str("ptr ");
                }
                if seg_shown {
                    self.out.push_str(reg_name(seg));
                    self.out.push(':');
                }
                self.out.push('[');
                let mut started = false;
                if base != Register::None {
                    self.out.push_str(reg_name(base));
                    started = true;
                }
                if idx != Register::None {
                    if started {
                        self.out.push('+');
                    }
                    started = true;
                    let _ = write!(self.out, "{}*{scale}", reg_name(idx));
                }
                if disp_bits != 0 && (disp != 0 || no_base_index) {
                    if started {
                        if disp < 0 {
                            self.out.push('-');
                            hex(self.out, disp.unsigned_abs(), 64);
                        } else {
                            self.out.push('+');
                            hex(self.out, disp as u64, 64);
                        }
                    } else {
                        hex(self.out, disp as u64, self.absolute_bits(disp, disp_bits));
                    }
                }
                self.out.push(']');
            }
            Syntax::Att => {
                if seg_shown {
                    self.out.push('%');
                    self.out.push_str(reg_name(seg));
                    self.out.push(':');
                }
                if disp_bits != 0 && disp != 0 {
                    if disp < 0 && !no_base_index {
                        self.out.push('-');
                        hex(self.out, disp.unsigned_abs(), 64);
                    } else if no_base_index {
                        hex(self.out, disp as u64, self.absolute_bits(disp, disp_bits));
                    } else {
                        hex(self.out, disp as u64, 64);
                    }
                }
                if !no_base_index {
                    self.out.push('(');
                    if base != Register::None {
                        self.out.push('%');
                        self.out.push_str(reg_name(base));
                    }
                    if idx != Register::None {
                        let _ = write!(self.out, ",%{},{scale}", reg_name(idx));
                    }
                    self.out.push(')');
                }
            }
        }
        if index == 0 {
            self.mask_decorations();
        }
        if i.is_broadcast() {
            let _ = write!(self.out, "{{1to{}}}", broadcast_count(i.memory_size()));
        }
    }

    /// The width in which XED prints a displacement without base or index: negative
    /// ones in 64-bit addressing at 64 bits, else at their own width.
    fn absolute_bits(&self, disp: i64, disp_bits: u32) -> u32 {
        if disp < 0 && self.address_bits() == 64 {
            64
        } else {
            disp_bits
        }
    }

    /// The signed displacement and its width in bits (0: none).
    fn displacement(&self) -> (i64, u32) {
        let i = self.instr;
        if i.is_ip_rel_memory_operand() {
            let d = i.memory_displacement64().wrapping_sub(i.next_ip()) as i32;
            return (i64::from(d), 32);
        }
        let raw = i.memory_displacement64();
        let abits = self.address_bits();
        match i.memory_displ_size() {
            0 => (0, 0),
            // EVEX scales an 8-bit displacement (disp8*N).
            1 => {
                let v = sign_extend(raw, abits);
                (v, if (-128..=127).contains(&v) { 8 } else { abits })
            }
            2 => (sign_extend(raw, 16), 16),
            4 => (sign_extend(raw, 32), 32),
            _ => (raw as i64, 64),
        }
    }

    /// The address size of the memory operand, in bits.
    fn address_bits(&self) -> u32 {
        let i = self.instr;
        let base = i.memory_base();
        let reg = if base != Register::None {
            base
        } else {
            i.memory_index()
        };
        match reg {
            Register::RIP => 64,
            Register::EIP => 32,
            Register::None => {
                let asz = LegacyPrefixes::scan(self.bytes, self.bitness == 64).asz;
                match (self.bitness, asz) {
                    (64, false) => 64,
                    (64, true) | (32, false) | (16, true) => 32,
                    _ => 16,
                }
            }
            r if r.is_vector_register() => {
                // VSIB: the address size is the mode's (or 67's).
                let asz = LegacyPrefixes::scan(self.bytes, self.bitness == 64).asz;
                match (self.bitness, asz) {
                    (64, false) => 64,
                    _ => 32,
                }
            }
            r => (r.size() * 8) as u32,
        }
    }
}

fn sign_extend(v: u64, bits: u32) -> i64 {
    if bits >= 64 {
        v as i64
    } else {
        let shift = 64 - bits;
        ((v << shift) as i64) >> shift
    }
}

/// The segment a memory operand with base `base` uses by default.
fn default_segment(base: Register) -> Register {
    match base {
        Register::BP | Register::EBP | Register::ESP | Register::RBP | Register::RSP => {
            Register::SS
        }
        _ => Register::DS,
    }
}

/// ES, CS, SS and DS, whose overrides 64-bit code ignores.
fn is_legacy_segment(seg: Register) -> bool {
    matches!(
        seg,
        Register::ES | Register::CS | Register::SS | Register::DS
    )
}

/// The number of elements a broadcast memory operand of `size` fills.
fn broadcast_count(size: MemorySize) -> usize {
    // iced-x86 names broadcasts `Broadcast<vector bits>_<element>`.
    let vector_bits = format!("{size:?}")
        .strip_prefix("Broadcast")
        .and_then(|rest| rest.split('_').next())
        .and_then(|bits| bits.parse::<usize>().ok())
        .unwrap_or(0);
    vector_bits / 8 / size.element_size().max(1)
}

/// The general-purpose register named by the ModRM `rm` field (with REX.B), at the
/// operand size.
fn rm_gpr(bytes: &[u8], i: &Instruction, bitness: u32) -> Register {
    let mut at = 0;
    let mut rex_b = 0;
    let mut osz = false;
    while let Some(&b) = bytes.get(at) {
        match b {
            0x66 => osz = true,
            0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 | 0x67 | 0xf0 | 0xf2 | 0xf3 => {}
            0x40..=0x4f if bitness == 64 => {
                rex_b = usize::from(b & 1) * 8;
                at += 1;
                break;
            }
            _ => break,
        }
        at += 1;
    }
    // 0F xx ModRM.
    let rm = bytes.get(at + 2).map_or(0, |m| usize::from(m & 7)) + rex_b;
    let bits = match i.op_register(1).size() {
        2 => 16,
        8 => 64,
        4 => 32,
        _ => match (bitness, osz) {
            (16, false) | (32, true) | (64, true) => 16,
            _ => 32,
        },
    };
    gpr_of_width(
        Register::try_from(Register::RAX as usize + rm).unwrap_or(Register::RAX),
        bits,
    )
}

/// The general-purpose register of `reg`'s number at `bits` (16, 32 or 64).
fn gpr_of_width(reg: Register, bits: u16) -> Register {
    let number = reg.number();
    let base = match bits {
        16 => Register::AX,
        32 => Register::EAX,
        _ => Register::RAX,
    };
    if !reg.is_gpr() {
        return reg;
    }
    Register::try_from(base as usize + number).unwrap_or(reg)
}

/// What XED's prefix scanner keeps of the legacy prefixes.
#[derive(Default)]
pub(crate) struct LegacyPrefixes {
    /// An operand-size prefix (66).
    pub osz: bool,
    /// An address-size prefix (67).
    pub asz: bool,
    /// LOCK (F0).
    pub lock: bool,
    /// The last of F2 and F3 (0: neither).
    pub last_f2f3: u8,
    /// The segment prefix that gives a branch hint (2E, 3E; 0: none).
    pub hint: u8,
}

impl LegacyPrefixes {
    pub(crate) fn scan(bytes: &[u8], mode64: bool) -> Self {
        let mut p = Self::default();
        let mut seg = 0u8;
        for &b in bytes {
            match b {
                0x66 => p.osz = true,
                0x67 => p.asz = true,
                0xf0 => p.lock = true,
                0xf2 | 0xf3 => p.last_f2f3 = b,
                0x2e => {
                    if !mode64 || p.hint != 0x3e {
                        p.hint = b;
                    }
                    if !mode64 {
                        seg = b;
                    }
                }
                0x3e => {
                    if !mode64 || !matches!(seg, 0x64 | 0x65) {
                        p.hint = b;
                    }
                    if !mode64 {
                        seg = b;
                    }
                }
                0x26 | 0x36 => {
                    if !mode64 {
                        seg = b;
                        p.hint = 0;
                    }
                }
                0x64 | 0x65 => {
                    seg = b;
                    p.hint = 0;
                }
                0x40..=0x4f if mode64 => {}
                _ => break,
            }
        }
        p
    }
}

/// XED's name of `reg` (lower case).
pub(crate) fn reg_name(reg: Register) -> &'static str {
    static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        Register::values()
            .map(|r| {
                let name = format!("{r:?}").to_ascii_lowercase();
                if let Some(n) = name.strip_prefix("st") {
                    // ST0 … ST7 are XED's st(0) … st(7).
                    if n.len() == 1 {
                        return format!("st({n})");
                    }
                }
                // iced-x86's R8L … R15L are XED's r8b … r15b.
                match name.strip_suffix('l') {
                    Some(n) if n.starts_with('r') && n[1..].parse::<u8>().is_ok() => {
                        format!("{n}b")
                    }
                    _ => name,
                }
            })
            .collect()
    });
    names.get(reg as usize).map_or("", String::as_str)
}

/// Whether XED refuses an encoding iced-x86 decodes: the VIA/Zhaoxin opcodes `0F A6`
/// and `0F A7` with a ModRM byte or a prefix XED does not know them with, and
/// `INVLPGB` with 16-bit addressing.
pub(crate) fn rejects(instr: &Instruction, bytes: &[u8], bitness: u32) -> bool {
    if instr.code() == Code::Invlpgbw {
        return true;
    }
    if instr.encoding() != iced_x86::EncodingKind::Legacy {
        return false;
    }
    let at = bytes
        .iter()
        .position(|&b| {
            let prefix = matches!(
                b,
                0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 | 0x66 | 0x67 | 0xf0 | 0xf2 | 0xf3
            );
            let rex = bitness == 64 && (0x40..=0x4f).contains(&b);
            !(prefix || rex)
        })
        .unwrap_or(bytes.len());
    let (Some(&0x0f), Some(&opcode @ (0xa6 | 0xa7)), Some(&modrm)) =
        (bytes.get(at), bytes.get(at + 1), bytes.get(at + 2))
    else {
        return false;
    };
    let f2f3 = LegacyPrefixes::scan(bytes, bitness == 64).last_f2f3;
    let known = match (opcode, modrm) {
        (0xa6, 0xc0 | 0xc8 | 0xd0) => f2f3 == 0xf3,
        (0xa7, 0xc0) => f2f3 != 0xf2,
        (0xa7, 0xc8 | 0xd0 | 0xd8 | 0xe0 | 0xe8) => f2f3 == 0xf3,
        _ => false,
    };
    !known
}
