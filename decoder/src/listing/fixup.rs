//! Where XED's operand model differs from iced-x86's, one instruction form at a time.
//!
//! The general rules live in [`super::xed`]; this table holds the forms where XED's
//! tables disagree with iced-x86's decode: another mnemonic, operands XED shows that
//! iced-x86 keeps implicit (or the other way round), a register at another width, a
//! memory operand without a size.

use iced_x86::{Code, Register};

/// An operand as XED prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Show {
    /// iced-x86's operand `n`.
    Op(u8),
    /// iced-x86's register operand `n`, as the general-purpose register of that number
    /// at the given width in bits.
    OpW(u8, u16),
    /// The x87 stack top, which XED names `st` where it is implicit.
    St,
    /// A register XED lists where iced-x86 keeps it implicit.
    Reg(Register),
    /// The ModRM `rm` field taken as a general-purpose register (XED's operand of the
    /// reserved NOPs `0F 1A` and `0F 1B` with a memory operand).
    RmGpr,
    /// The segment of a memory operand XED does not print, where it is not the default.
    Seg,
    /// The `ES` of a suppressed `ES:[rDI]` destination (not in 64-bit code).
    EsSeg,
}

/// How XED prints one instruction form, where it differs from iced-x86.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Rule {
    /// XED's mnemonic.
    pub mnemonic: Option<&'static str>,
    /// XED's AT&T mnemonic, where it differs from the Intel one.
    pub att_mnemonic: Option<&'static str>,
    /// The operands XED shows, in its order.
    pub ops: Option<&'static [Show]>,
    /// The operands XED shows for the form with a memory operand, where they differ.
    pub mem_ops: Option<&'static [Show]>,
    /// Whether XED lists operands it does not show (then a blank follows the mnemonic).
    pub suppressed: Option<bool>,
    /// The memory operand's size as XED gives it, in bytes (0: none).
    pub mem_size: Option<u8>,
    /// The size XED's AT&T suffix comes from (its first memory operand), in bytes.
    pub att_suffix: Option<u8>,
    /// The memory operand is an address computation (no size, no segment).
    pub agen: bool,
    /// XED takes F2/F3 as a REP prefix.
    pub rep: bool,
    /// XED ignores an operand-size prefix (66) here: no `data16`.
    pub osz_immune: bool,
    /// XED decodes the opcode as the reserved NOP it was before the extension.
    pub reserved_nop: bool,
    /// AT&T keeps the Intel operand order.
    pub att_intel_order: bool,
    /// The whole immediate byte (iced-x86 keeps 4 bits of it).
    pub raw_imm8: bool,
    /// iced-x86's operand `.0` names a block of `.1 + 1` registers (`xmm4+3`).
    pub multi_reg: Option<(u8, u8)>,
    /// The memory operand has no `ptr` (AMX tiles).
    pub no_ptr: bool,
}

const R: Rule = Rule {
    mnemonic: None,
    att_mnemonic: None,
    ops: None,
    mem_ops: None,
    suppressed: None,
    mem_size: None,
    att_suffix: None,
    agen: false,
    rep: false,
    osz_immune: false,
    reserved_nop: false,
    att_intel_order: false,
    raw_imm8: false,
    multi_reg: None,
    no_ptr: false,
};

const fn mnemonic(m: &'static str) -> Rule {
    Rule {
        mnemonic: Some(m),
        ..R
    }
}

const fn ops(list: &'static [Show]) -> Rule {
    Rule {
        ops: Some(list),
        ..R
    }
}

/// A memory operand without a size in Intel syntax (XED's prefetch width), 64 bytes (a
/// cache line) for the AT&T suffix.
const fn line() -> Rule {
    Rule {
        mem_size: Some(0),
        att_suffix: Some(64),
        ..R
    }
}

/// AT&T's suffix from `size` bytes.
const fn att_suffix(size: u8) -> Rule {
    Rule {
        att_suffix: Some(size),
        ..R
    }
}

/// No operands at all: no blank after the mnemonic.
const fn bare() -> Rule {
    Rule {
        suppressed: Some(false),
        ..R
    }
}

use Show::{EsSeg, Op, OpW, RmGpr, Seg, St};

/// XED's rule for `code`.
pub(crate) fn rule(code: Code) -> Rule {
    use Code::*;
    match code {
        Lea_r16_m | Lea_r32_m | Lea_r64_m => Rule { agen: true, ..R },

        // String instructions: XED shows their memory operands only; the I/O ones show
        // nothing but a segment override.
        Lodsb_AL_m8 | Lodsw_AX_m16 | Lodsd_EAX_m32 | Lodsq_RAX_m64 => ops(&[Op(1)]),
        Scasb_AL_m8 | Scasw_AX_m16 | Scasd_EAX_m32 | Scasq_RAX_m64 => ops(&[Op(1)]),
        Stosb_m8_AL | Stosw_m16_AX | Stosd_m32_EAX | Stosq_m64_RAX => ops(&[Op(0)]),
        Insb_m8_DX | Insw_m16_DX | Insd_m32_DX => ops(&[]),
        Outsb_DX_m8 | Outsw_DX_m16 | Outsd_DX_m32 => ops(&[Seg]),
        Xlat_m8 => ops(&[Seg]),
        Maskmovq_rDI_mm_mm | Maskmovdqu_rDI_xmm_xmm | VEX_Vmaskmovdqu_rDI_xmm_xmm => {
            ops(&[Op(1), Op(2), Seg])
        }
        Movdir64b_r16_m512 | Movdir64b_r32_m512 | Movdir64b_r64_m512 => ops(&[Op(0), Op(1), EsSeg]),

        // x87: XED shows the stack top where iced-x86 keeps it implicit, except for
        // FADD's memory forms.
        Fld_m32fp | Fld_m64fp | Fld_m80fp | Fild_m16int | Fild_m32int | Fild_m64int
        | Fbld_m80bcd | Fcom_m32fp | Fcom_m64fp | Fcomp_m32fp | Fcomp_m64fp | Fdiv_m32fp
        | Fdiv_m64fp | Fdivr_m32fp | Fdivr_m64fp | Fiadd_m16int | Fiadd_m32int | Ficom_m16int
        | Ficom_m32int | Ficomp_m16int | Ficomp_m32int | Fidiv_m16int | Fidiv_m32int
        | Fidivr_m16int | Fidivr_m32int | Fimul_m16int | Fimul_m32int | Fisub_m16int
        | Fisub_m32int | Fisubr_m16int | Fisubr_m32int | Fmul_m32fp | Fmul_m64fp | Fsub_m32fp
        | Fsub_m64fp | Fsubr_m32fp | Fsubr_m64fp => ops(&[St, Op(0)]),
        Fst_m32fp | Fst_m64fp | Fstp_m32fp | Fstp_m64fp | Fstp_m80fp | Fist_m16int
        | Fist_m32int | Fistp_m16int | Fistp_m32int | Fistp_m64int | Fisttp_m16int
        | Fisttp_m32int | Fisttp_m64int | Fbstp_m80bcd => ops(&[Op(0), St]),
        Fld_sti => ops(&[St, Op(0)]),
        Fst_sti | Fstp_sti | Fstp_sti_DFD0 | Fstp_sti_DFD8 | Fstpnce_sti => ops(&[Op(0), St]),
        Fneni => mnemonic("feni8087_nop"),
        Fndisi => mnemonic("fdisi8087_nop"),
        Fnsetpm => mnemonic("fsetpm287_nop"),

        // Reserved NOPs: 0F 18 and 0F 1F show the r/m operand only; 0F 1A and 0F 1B
        // with a memory operand show the r/m field as a register first.
        Reservednop_rm16_r16_0F18
        | Reservednop_rm32_r32_0F18
        | Reservednop_rm64_r64_0F18
        | Reservednop_rm16_r16_0F1F
        | Reservednop_rm32_r32_0F1F
        | Reservednop_rm64_r64_0F1F => Rule {
            mnemonic: Some("nop"),
            ops: Some(&[Op(0)]),
            ..R
        },
        Reservednop_rm16_r16_0F1A
        | Reservednop_rm32_r32_0F1A
        | Reservednop_rm64_r64_0F1A
        | Reservednop_rm16_r16_0F1B
        | Reservednop_rm32_r32_0F1B
        | Reservednop_rm64_r64_0F1B => Rule {
            mnemonic: Some("nop"),
            mem_ops: Some(&[RmGpr, Op(0)]),
            ..R
        },
        Reservednop_rm16_r16_0F0D
        | Reservednop_rm32_r32_0F0D
        | Reservednop_rm64_r64_0F0D
        | Reservednop_rm16_r16_0F19
        | Reservednop_rm32_r32_0F19
        | Reservednop_rm64_r64_0F19
        | Reservednop_rm16_r16_0F1C
        | Reservednop_rm32_r32_0F1C
        | Reservednop_rm64_r64_0F1C
        | Reservednop_rm16_r16_0F1D
        | Reservednop_rm32_r32_0F1D
        | Reservednop_rm64_r64_0F1D
        | Reservednop_rm16_r16_0F1E
        | Reservednop_rm32_r32_0F1E
        | Reservednop_rm64_r64_0F1E => mnemonic("nop"),
        // F3 90 (PAUSE, whatever REX says) too.
        Nopw | Nopd | Nopq | Pause => Rule {
            mnemonic: Some("nop"),
            suppressed: Some(false),
            ..R
        },
        // Extensions in the reserved-NOP space that XED leaves as NOPs.
        Endbr32 | Endbr64 | Rdsspd_r32 | Rdsspq_r64 | Cldemote_m8 | Prefetchit0_m8
        | Prefetchit1_m8 => Rule {
            reserved_nop: true,
            ..R
        },

        // Prefetches and cache-line operations: the memory operand has no size.
        Prefetchnta_m8 | Prefetcht0_m8 | Prefetcht1_m8 | Prefetcht2_m8 | Prefetchw_m8
        | Prefetchwt1_m8 | Clflush_m8 | Clflushopt_m8 | Clwb_m8 => line(),
        Prefetch_m8 => Rule {
            mnemonic: Some("prefetch"),
            ..line()
        },
        Prefetchreserved3_m8 => Rule {
            mnemonic: Some("prefetchw"),
            ..line()
        },
        Prefetchreserved4_m8 | Prefetchreserved5_m8 | Prefetchreserved6_m8
        | Prefetchreserved7_m8 => Rule {
            mnemonic: Some("prefetch_reserved"),
            ..line()
        },
        Invlpg_m => Rule {
            mem_size: Some(1),
            att_intel_order: true,
            ..R
        },
        Umonitor_r16 | Umonitor_r32 | Umonitor_r64 => att_suffix(0),

        // Far transfers: AT&T's `lcall` and `ljmp` (XED names far returns `lcall` too);
        // the suffix comes from the stack slots they pop or push.
        Call_m1616 | Call_m1632 | Call_m1664 => Rule {
            att_mnemonic: Some("lcall"),
            ..R
        },
        Jmp_m1616 | Jmp_m1632 | Jmp_m1664 | Jmp_ptr1616 | Jmp_ptr1632 => Rule {
            att_mnemonic: Some("ljmp"),
            ..R
        },
        Call_ptr1616 | Retfw | Retfw_imm16 => Rule {
            att_mnemonic: Some("lcall"),
            att_suffix: Some(4),
            ..R
        },
        Call_ptr1632 | Retfd | Retfd_imm16 => Rule {
            att_mnemonic: Some("lcall"),
            att_suffix: Some(8),
            ..R
        },
        Retfq | Retfq_imm16 => Rule {
            att_mnemonic: Some("lcall"),
            att_suffix: Some(16),
            ..R
        },
        Iretw => Rule {
            att_mnemonic: Some("iret"),
            att_suffix: Some(0),
            ..R
        },
        Iretd | Iretq => att_suffix(0),
        Pushaw | Popaw => att_suffix(16),
        Pushad | Popad => att_suffix(32),
        Enterw_imm16_imm8 | Enterd_imm16_imm8 | Enterq_imm16_imm8 => Rule {
            att_intel_order: true,
            ..R
        },
        Extrq_xmm_xmm | Extrq_xmm_imm8_imm8 | Insertq_xmm_xmm | Insertq_xmm_xmm_imm8_imm8 => Rule {
            att_intel_order: true,
            ..R
        },

        // Registers XED gives another width.
        Mov_Sreg_r32m16 | Mov_Sreg_r64m16 => ops(&[Op(0), OpW(1, 16)]),
        Lldt_r32m16 | Lldt_r64m16 | Ltr_r32m16 | Ltr_r64m16 | Verr_r32m16 | Verr_r64m16
        | Verw_r32m16 | Verw_r64m16 | Lmsw_r32m16 | Lmsw_r64m16 => ops(&[OpW(0, 16)]),
        Arpl_r32m16_r32 => ops(&[OpW(0, 16), OpW(1, 16)]),
        Lsl_r64_r64m16 => ops(&[Op(0), OpW(1, 32)]),
        Pmovmskb_r64_mm | Movmskps_r64_xmm | Movmskpd_r64_xmm | Pmovmskb_r64_xmm => {
            ops(&[OpW(0, 32), Op(1)])
        }
        Pextrw_r64_mm_imm8 | Pextrw_r64_xmm_imm8 => ops(&[OpW(0, 32), Op(1), Op(2)]),
        Pinsrw_mm_r64m16_imm8 | Pinsrw_xmm_r64m16_imm8 | Pinsrb_xmm_r64m8_imm8 => {
            ops(&[Op(0), OpW(1, 32), Op(2)])
        }
        // W1 forms whose general-purpose register XED names at 32 bits.
        VEX_Vmovmskpd_r64_xmm
        | VEX_Vmovmskpd_r64_ymm
        | VEX_Vmovmskps_r64_xmm
        | VEX_Vmovmskps_r64_ymm
        | VEX_Vpmovmskb_r64_xmm
        | VEX_Vpmovmskb_r64_ymm => ops(&[OpW(0, 32), Op(1)]),
        Tpause_r64 | Umwait_r64 => ops(&[OpW(0, 32)]),
        Extractps_r64m32_xmm_imm8
        | Pextrb_r64m8_xmm_imm8
        | Pextrw_r64m16_xmm_imm8
        | VEX_Vextractps_r64m32_xmm_imm8
        | VEX_Vpextrb_r64m8_xmm_imm8
        | VEX_Vpextrw_r64_xmm_imm8
        | VEX_Vpextrw_r64m16_xmm_imm8
        | EVEX_Vextractps_r64m32_xmm_imm8
        | EVEX_Vpextrb_r64m8_xmm_imm8
        | EVEX_Vpextrw_r64m16_xmm_imm8
        | EVEX_Vpextrw_r64_xmm_imm8 => ops(&[OpW(0, 32), Op(1), Op(2)]),
        EVEX_Vmovw_r64m16_xmm => ops(&[OpW(0, 32), Op(1)]),
        EVEX_Vmovw_xmm_r64m16 => ops(&[Op(0), OpW(1, 32)]),
        VEX_Vpinsrb_xmm_xmm_r64m8_imm8
        | VEX_Vpinsrw_xmm_xmm_r64m16_imm8
        | EVEX_Vpinsrb_xmm_xmm_r64m8_imm8
        | EVEX_Vpinsrw_xmm_xmm_r64m16_imm8 => ops(&[Op(0), Op(1), OpW(2, 32), Op(3)]),
        Lkgs_r32m16 | Lkgs_r64m16 => ops(&[OpW(0, 16)]),
        Ud0_r16_rm16 | Ud0_r64_rm64 | Ud1_r16_rm16 | Ud1_r64_rm64 => Rule {
            ops: Some(&[OpW(0, 32), OpW(1, 32)]),
            mem_size: Some(4),
            ..R
        },

        // Other mnemonics.
        Loope_rel8_16_CX | Loope_rel8_32_CX | Loope_rel8_16_ECX | Loope_rel8_32_ECX
        | Loope_rel8_64_ECX | Loope_rel8_64_RCX => mnemonic("loope"),
        Loopne_rel8_16_CX | Loopne_rel8_32_CX | Loopne_rel8_16_ECX | Loopne_rel8_32_ECX
        | Loopne_rel8_64_ECX | Loopne_rel8_64_RCX => mnemonic("loopne"),
        Pcmpestri64_xmm_xmmm128_imm8 => mnemonic("pcmpestri"),
        Pcmpestrm64_xmm_xmmm128_imm8 => mnemonic("pcmpestrm"),
        VEX_Vpcmpestri64_xmm_xmmm128_imm8 => mnemonic("vpcmpestri"),
        VEX_Vpcmpestrm64_xmm_xmmm128_imm8 => mnemonic("vpcmpestrm"),
        Sysretq => mnemonic("sysret"),
        Sysexitq => mnemonic("sysexit"),
        Getsecq => mnemonic("getsec"),
        Vmgexit | Vmgexit_F2 => Rule {
            mnemonic: Some("vmmcall"),
            suppressed: Some(false),
            ..R
        },
        Rmpquery => mnemonic("rdpru"),

        // No operands at all in XED.
        Clts | Ud2 | VEX_Vzeroall | VEX_Vzeroupper | Vmmcall | Vmsavew | Vmsaved | Vmsaveq => {
            bare()
        }
        Swapgs => Rule {
            suppressed: Some(true),
            ..R
        },
        Erets | Eretu => att_suffix(0),
        Uiret => att_suffix(4),
        Seamcall => Rule {
            osz_immune: true,
            ..R
        },
        Syscall | Retnq => Rule {
            osz_immune: true,
            ..R
        },

        // Implicit operands XED shows.
        Psmash => ops(&[Show::Reg(Register::RAX)]),
        Invlpgaw => ops(&[Show::Reg(Register::AX), Show::Reg(Register::ECX)]),
        Invlpgad => ops(&[Show::Reg(Register::EAX), Show::Reg(Register::ECX)]),
        Invlpgaq => ops(&[Show::Reg(Register::RAX), Show::Reg(Register::ECX)]),
        Vmrunw | Vmloadw => ops(&[Show::Reg(Register::AX)]),
        Vmrund | Vmloadd => ops(&[Show::Reg(Register::EAX)]),
        Vmrunq | Vmloadq => ops(&[Show::Reg(Register::RAX)]),
        Skinit => ops(&[Show::Reg(Register::EAX)]),
        Rmpupdate => Rule {
            ops: Some(&[Show::Reg(Register::RAX), Show::Reg(Register::RCX)]),
            att_suffix: Some(0),
            ..R
        },
        Rmpadjust => ops(&[
            Show::Reg(Register::RAX),
            Show::Reg(Register::RCX),
            Show::Reg(Register::RDX),
        ]),
        Pvalidatew | Pvalidated | Pvalidateq => ops(&[
            Show::Reg(Register::RAX),
            Show::Reg(Register::ECX),
            Show::Reg(Register::EDX),
        ]),

        // VIA PadLock: F3 is a REP prefix.
        Xcryptecb_16 | Xcryptecb_32 | Xcryptecb_64 | Xcryptcbc_16 | Xcryptcbc_32 | Xcryptcbc_64
        | Xcryptctr_16 | Xcryptctr_32 | Xcryptctr_64 | Xcryptcfb_16 | Xcryptcfb_32
        | Xcryptcfb_64 | Xcryptofb_16 | Xcryptofb_32 | Xcryptofb_64 => Rule {
            rep: true,
            ops: Some(&[Seg]),
            att_suffix: Some(1),
            ..R
        },
        Xsha1_16 | Xsha1_32 | Xsha1_64 | Xsha256_16 | Xsha256_32 | Xsha256_64 | Xstore_16
        | Xstore_32 | Xstore_64 => Rule {
            rep: true,
            ops: Some(&[]),
            att_suffix: Some(1),
            ..R
        },
        Montmul_16 | Montmul_32 | Montmul_64 => Rule {
            rep: true,
            ops: Some(&[]),
            att_suffix: Some(0),
            ..R
        },

        VEX_Vpermil2ps_xmm_xmm_xmmm128_xmm_imm4
        | VEX_Vpermil2ps_ymm_ymm_ymmm256_ymm_imm4
        | VEX_Vpermil2pd_xmm_xmm_xmmm128_xmm_imm4
        | VEX_Vpermil2pd_ymm_ymm_ymmm256_ymm_imm4
        | VEX_Vpermil2ps_xmm_xmm_xmm_xmmm128_imm4
        | VEX_Vpermil2ps_ymm_ymm_ymm_ymmm256_imm4
        | VEX_Vpermil2pd_xmm_xmm_xmm_xmmm128_imm4
        | VEX_Vpermil2pd_ymm_ymm_ymm_ymmm256_imm4 => Rule {
            raw_imm8: true,
            ..R
        },
        EVEX_V4fmaddps_zmm_k1z_zmmp3_m128
        | EVEX_V4fnmaddps_zmm_k1z_zmmp3_m128
        | EVEX_V4fmaddss_xmm_k1z_xmmp3_m128
        | EVEX_V4fnmaddss_xmm_k1z_xmmp3_m128
        | EVEX_Vp4dpwssd_zmm_k1z_zmmp3_m128
        | EVEX_Vp4dpwssds_zmm_k1z_zmmp3_m128 => Rule {
            multi_reg: Some((1, 3)),
            ..R
        },
        EVEX_Vp2intersectd_kp1_xmm_xmmm128b32
        | EVEX_Vp2intersectd_kp1_ymm_ymmm256b32
        | EVEX_Vp2intersectd_kp1_zmm_zmmm512b32
        | EVEX_Vp2intersectq_kp1_xmm_xmmm128b64
        | EVEX_Vp2intersectq_kp1_ymm_ymmm256b64
        | EVEX_Vp2intersectq_kp1_zmm_zmmm512b64 => Rule {
            multi_reg: Some((0, 1)),
            ..R
        },
        // AMX tiles: the memory operand has neither size nor `ptr`.
        VEX_Tileloadd_tmm_sibmem | VEX_Tileloaddt1_tmm_sibmem | VEX_Tilestored_sibmem_tmm => Rule {
            mem_size: Some(0),
            no_ptr: true,
            ..R
        },

        _ => R,
    }
}
