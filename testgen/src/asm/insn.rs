//! Instruction encoding: matches a parsed instruction against iced-x86's opcode
//! tables and picks the encoding yasm would pick.
//!
//! Every iced `Code` whose mnemonic, mode and operand kinds fit is encoded; the
//! shortest wins, ties go to the earlier opcode (which is how nasm and yasm
//! prefer `89 /r` over `8B /r` for `mov reg, reg`). On top of that come the
//! rules yasm follows where several sizes fit:
//!
//! * without a sized operand the operand size is the mode's default (64 for
//!   stack and branch instructions in 64-bit mode, else 32; 16/32 in those
//!   modes), except `retf`, which yasm makes 64-bit in 64-bit mode;
//! * an immediate that is an address (a label not cancelled by another) keeps
//!   its full-size field: no sign-extended imm8 form;
//! * a memory operand without a size is an error when the size matters.

use super::expr::{EvalError, Expr, Value};
use super::parse::{AsmInsn, JumpKind, Mem, Operand, Prefix};
use iced_x86::{
    Code, Encoder, EncodingKind, Instruction, MandatoryPrefix, MemorySize, Mnemonic,
    OpCodeOperandKind as K, OpCodeTableKind, OpKind, Register,
};
use std::collections::HashMap;
use std::sync::OnceLock;

/// Condition-code spellings nasm accepts beside iced's canonical ones.
const CC_ALIASES: [(&str, &str); 14] = [
    ("z", "e"),
    ("nz", "ne"),
    ("c", "b"),
    ("nae", "b"),
    ("nc", "ae"),
    ("nb", "ae"),
    ("na", "be"),
    ("nbe", "a"),
    ("pe", "p"),
    ("po", "np"),
    ("nge", "l"),
    ("nl", "ge"),
    ("ng", "le"),
    ("nle", "g"),
];

fn table() -> &'static super::NameMap<Vec<Code>> {
    static TABLE: OnceLock<super::NameMap<Vec<Code>>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut map: super::NameMap<Vec<Code>> = super::NameMap::default();
        for code in Code::values() {
            let info = code.op_code();
            // Encodings that only decode under a special option (486
            // `cmpxchg`, `loadall`, ...) are never what an assembler means.
            if !info.is_instruction()
                || !matches!(info.encoding(), EncodingKind::Legacy | EncodingKind::VEX)
                || info.decoder_option() != 0
            {
                continue;
            }
            let name = format!("{:?}", code.mnemonic()).to_ascii_lowercase();
            map.entry(name).or_default().push(code);
        }
        let get =
            |map: &super::NameMap<Vec<Code>>, n: &str| map.get(n).cloned().unwrap_or_default();
        // nasm's `iret`, `pushf`, ... take the mode's operand size; the
        // suffixed forms pin it. iced names the 16-bit forms without suffix.
        for (plain, w, d, q) in [
            ("iret", "iretw", "iretd", "iretq"),
            ("pushf", "pushfw", "pushfd", "pushfq"),
            ("popf", "popfw", "popfd", "popfq"),
            ("pusha", "pushaw", "pushad", ""),
            ("popa", "popaw", "popad", ""),
        ] {
            let word = get(&map, plain);
            let mut all = word.clone();
            all.extend(get(&map, d));
            all.extend(get(&map, q));
            map.insert(w.to_string(), word);
            map.insert(plain.to_string(), all);
        }
        for prefix in ["j", "set", "cmov"] {
            for (alias, canon) in CC_ALIASES {
                let codes = get(&map, &format!("{prefix}{canon}"));
                map.insert(format!("{prefix}{alias}"), codes);
            }
        }
        // yasm encodes `sal` as `shl` (/4), not as the /6 alias.
        let shl = get(&map, "shl");
        map.insert("sal".into(), shl);
        let int1 = get(&map, "int1");
        map.insert("icebp".into(), int1);
        let ret = get(&map, "ret");
        map.insert("retn".into(), ret);
        map
    })
}

/// True if `lower` is a mnemonic we can encode.
pub fn is_mnemonic(lower: &str) -> bool {
    table().contains_key(lower)
}

/// The encoder's name for the mnemonic `lower`, if it can encode it.
pub fn mnemonic(lower: &str) -> Option<&'static str> {
    table().get_key_value(lower).map(|(name, _)| name.as_str())
}

/// An operand after its expressions are evaluated.
#[derive(Debug, Clone)]
enum Resolved<'a> {
    Reg(Register),
    Mem {
        mem: &'a Mem,
        disp: Value,
        has_disp: bool,
        disp_varies: bool,
        rel: bool,
    },
    Imm {
        value: Value,
        size: Option<u32>,
        jump: Option<JumpKind>,
        strict: bool,
    },
    Far {
        seg: Value,
        off: Value,
    },
}

/// How one operand of an iced instruction is filled in.
#[derive(Debug, Clone, Copy)]
enum Fill {
    Reg(Register),
    Mem,
    Imm(OpKind, u64),
    Branch(OpKind, u64),
    FarBranch(OpKind, u16, u32),
    Implicit(OpKind),
    /// `xlat`'s `[rBX+al]`, by address size.
    Xlat(u32),
}

/// What the layout needs to encode one instruction.
#[derive(Debug, Clone, Copy)]
pub struct Context {
    /// 16, 32 or 64.
    pub bits: u32,
    /// Address of the instruction.
    pub ip: u64,
    /// `default rel` in effect.
    pub default_rel: bool,
    /// Length chosen in the previous layout pass: encodings only grow, so the
    /// relaxation of branches converges as yasm's does.
    pub floor: usize,
}

fn is_gpr_kind(k: K) -> bool {
    matches!(
        k,
        K::r8_or_mem
            | K::r8_reg
            | K::r8_opcode
            | K::r16_or_mem
            | K::r16_reg
            | K::r16_reg_mem
            | K::r16_rm
            | K::r16_opcode
            | K::r32_or_mem
            | K::r32_reg
            | K::r32_reg_mem
            | K::r32_rm
            | K::r32_opcode
            | K::r32_vvvv
            | K::r64_or_mem
            | K::r64_reg
            | K::r64_reg_mem
            | K::r64_rm
            | K::r64_opcode
            | K::r64_vvvv
            | K::al
            | K::ax
            | K::eax
            | K::rax
    )
}

fn reg_matches(k: K, r: Register) -> bool {
    match k {
        K::r8_or_mem | K::r8_reg | K::r8_opcode => r.is_gpr8(),
        K::r16_or_mem | K::r16_reg | K::r16_reg_mem | K::r16_rm | K::r16_opcode => r.is_gpr16(),
        K::r32_or_mem | K::r32_reg | K::r32_reg_mem | K::r32_rm | K::r32_opcode | K::r32_vvvv => {
            r.is_gpr32()
        }
        K::r64_or_mem | K::r64_reg | K::r64_reg_mem | K::r64_rm | K::r64_opcode | K::r64_vvvv => {
            r.is_gpr64()
        }
        K::seg_reg => r.is_segment_register(),
        K::cr_reg => r.is_cr(),
        K::dr_reg => r.is_dr(),
        K::tr_reg => r.is_tr(),
        K::k_reg | K::k_rm | K::k_vvvv | K::k_or_mem => r.is_k(),
        K::mm_reg | K::mm_rm | K::mm_or_mem => r.is_mm(),
        K::xmm_reg | K::xmm_rm | K::xmm_vvvv | K::xmm_is4 | K::xmm_is5 | K::xmm_or_mem => {
            r.is_xmm()
        }
        K::ymm_reg | K::ymm_rm | K::ymm_vvvv | K::ymm_is4 | K::ymm_is5 | K::ymm_or_mem => {
            r.is_ymm()
        }
        K::bnd_reg | K::bnd_or_mem_mpx => r.is_bnd(),
        K::tmm_reg | K::tmm_rm | K::tmm_vvvv => r.is_tmm(),
        K::sti_opcode => r.is_st(),
        K::st0 => r == Register::ST0,
        K::es => r == Register::ES,
        K::cs => r == Register::CS,
        K::ss => r == Register::SS,
        K::ds => r == Register::DS,
        K::fs => r == Register::FS,
        K::gs => r == Register::GS,
        K::al => r == Register::AL,
        K::cl => r == Register::CL,
        K::ax => r == Register::AX,
        K::dx => r == Register::DX,
        K::eax => r == Register::EAX,
        K::rax => r == Register::RAX,
        _ => false,
    }
}

/// Memory size (bytes) an r/m kind implies, or None for "any / from the table".
fn rm_mem_size(k: K) -> Option<Option<u32>> {
    Some(match k {
        K::r8_or_mem => Some(1),
        K::r16_or_mem | K::r16_reg_mem => Some(2),
        K::r32_or_mem | K::r32_reg_mem => Some(4),
        K::r64_or_mem | K::r64_reg_mem => Some(8),
        K::mm_or_mem => Some(8),
        K::xmm_or_mem | K::ymm_or_mem | K::k_or_mem | K::mem => None,
        _ => return None,
    })
}

fn far_offset_bits(ms: MemorySize) -> Option<u32> {
    match ms {
        MemorySize::SegPtr16 => Some(16),
        MemorySize::SegPtr32 => Some(32),
        MemorySize::SegPtr64 => Some(64),
        _ => None,
    }
}

/// yasm checks the written value, not its truncation to the operand size:
/// `add eax, 0xffffffff` keeps an imm32.
fn fits_signed8(v: i64) -> bool {
    (-128..=127).contains(&v)
}

fn match_imm(k: K, v: Value, size: Option<u32>, strict: bool) -> Option<Fill> {
    let x = v.value;
    let address = !v.is_absolute();
    let allowed = |want: &[u32]| size.is_none_or(|s| want.contains(&s));
    // yasm shrinks a sized immediate to a sign-extended imm8 unless `strict`;
    // an address shrinks only when written `byte`.
    let sex8 = if size == Some(8) {
        true
    } else {
        !strict && !address && !v.foreign
    };
    Some(match k {
        // An address is cut to its field (yasm warns, we follow its bytes).
        K::imm8 if allowed(&[8]) && (address || (-128..=255).contains(&x)) => {
            Fill::Imm(OpKind::Immediate8, x as u8 as u64)
        }
        K::imm8_const_1 if size.is_none() && !address && x == 1 => Fill::Imm(OpKind::Immediate8, 1),
        K::imm8sex16 if sex8 && fits_signed8(x) => {
            Fill::Imm(OpKind::Immediate8to16, x as u8 as u64)
        }
        K::imm8sex32 if sex8 && fits_signed8(x) => {
            Fill::Imm(OpKind::Immediate8to32, x as u8 as u64)
        }
        K::imm8sex64 if sex8 && fits_signed8(x) => {
            Fill::Imm(OpKind::Immediate8to64, x as u8 as u64)
        }
        K::imm16 if allowed(&[16]) && (address || (-0x8000..=0xffff).contains(&x)) => {
            Fill::Imm(OpKind::Immediate16, x as u16 as u64)
        }
        K::imm32 if allowed(&[32]) && (address || (-0x8000_0000..=0xffff_ffff).contains(&x)) => {
            Fill::Imm(OpKind::Immediate32, x as u32 as u64)
        }
        K::imm32sex64 if allowed(&[32]) && (address || i32::try_from(x).is_ok()) => {
            Fill::Imm(OpKind::Immediate32to64, x as u64)
        }
        K::imm64 if allowed(&[64]) => Fill::Imm(OpKind::Immediate64, x as u64),
        _ => return None,
    })
}

fn match_branch(k: K, v: Value, jump: Option<JumpKind>, bits: u32) -> Option<Fill> {
    let short = matches!(k, K::br16_1 | K::br32_1 | K::br64_1);
    let near = matches!(
        k,
        K::br16_2 | K::br32_4 | K::br64_4 | K::xbegin_2 | K::xbegin_4
    );
    match jump {
        Some(JumpKind::Short) if !short => return None,
        Some(JumpKind::Near) if !near => return None,
        Some(JumpKind::Far) => return None,
        _ => {}
    }
    let t = v.value as u64;
    Some(match k {
        K::br16_1 | K::br16_2 => Fill::Branch(OpKind::NearBranch16, t & 0xffff),
        K::br32_1 | K::br32_4 => Fill::Branch(OpKind::NearBranch32, t & 0xffff_ffff),
        K::br64_1 | K::br64_4 => Fill::Branch(OpKind::NearBranch64, t),
        K::xbegin_2 | K::xbegin_4 if bits == 64 => Fill::Branch(OpKind::NearBranch64, t),
        K::xbegin_2 | K::xbegin_4 => Fill::Branch(OpKind::NearBranch32, t & 0xffff_ffff),
        _ => return None,
    })
}

fn fixed_register(k: K) -> Option<Register> {
    Some(match k {
        K::al => Register::AL,
        K::ax => Register::AX,
        K::eax => Register::EAX,
        K::rax => Register::RAX,
        K::dx => Register::DX,
        _ => return None,
    })
}

fn implicit_kind(k: K, addr_bits: u32) -> Option<OpKind> {
    Some(match (k, addr_bits) {
        (K::seg_rSI, 16) => OpKind::MemorySegSI,
        (K::seg_rSI, 32) => OpKind::MemorySegESI,
        (K::seg_rSI, _) => OpKind::MemorySegRSI,
        (K::es_rDI, 16) => OpKind::MemoryESDI,
        (K::es_rDI, 32) => OpKind::MemoryESEDI,
        (K::es_rDI, _) => OpKind::MemoryESRDI,
        (K::seg_rDI, 16) => OpKind::MemorySegDI,
        (K::seg_rDI, 32) => OpKind::MemorySegEDI,
        (K::seg_rDI, _) => OpKind::MemorySegRDI,
        _ => return None,
    })
}

/// One successful encoding.
struct Candidate {
    code: Code,
    bytes: InsnBytes,
    branch_disp: Option<usize>,
    op_size: u32,
    mem_size: usize,
    defines_size: bool,
    /// Uses a sign-extended imm8: yasm prefers it over an equally long
    /// accumulator form (`66 83 D0 02` rather than `66 15 02 00`).
    imm8_sex: bool,
}

/// An encoding, held inline: an assembler tries several forms of every
/// instruction on every pass, and a heap allocation for each would cost more
/// than the encoding.
#[derive(Clone, Copy)]
struct InsnBytes {
    buf: [u8; 16],
    len: u8,
}

impl From<&[u8]> for InsnBytes {
    fn from(b: &[u8]) -> Self {
        let mut buf = [0u8; 16];
        let len = b.len().min(buf.len());
        buf[..len].copy_from_slice(&b[..len]);
        InsnBytes {
            buf,
            len: len as u8,
        }
    }
}

impl std::ops::Deref for InsnBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }
}

impl std::ops::DerefMut for InsnBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..usize::from(self.len)]
    }
}

impl InsnBytes {
    fn remove(&mut self, i: usize) {
        let len = usize::from(self.len);
        if i < len {
            self.buf.copy_within(i + 1..len, i);
            self.len -= 1;
        }
    }

    fn insert(&mut self, i: usize, b: u8) {
        let len = usize::from(self.len);
        if i <= len && len < self.buf.len() {
            self.buf.copy_within(i..len, i + 1);
            self.buf[i] = b;
            self.len += 1;
        }
    }
}

/// An iced encoder and the buffer it writes into.
type Reused = (Encoder, Vec<u8>);

/// One iced encoder per mode and its output buffer, reused by every encoding
/// of this thread.
fn with_encoder<R>(bits: u32, f: impl FnOnce(&mut Reused) -> R) -> R {
    thread_local! {
        static ENCODERS: std::cell::RefCell<Vec<(u32, Reused)>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }
    ENCODERS.with(|e| {
        let mut e = e.borrow_mut();
        let i = match e.iter().position(|(b, _)| *b == bits) {
            Some(i) => i,
            None => {
                e.push((bits, (Encoder::new(bits), Vec::with_capacity(16))));
                e.len() - 1
            }
        };
        f(&mut e[i].1)
    })
}

/// Why an instruction cannot be encoded, in yasm's words (its messages are
/// free text: the operand combination, the value out of range, the mode).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EncodeError(pub String);

/// Encodes an instruction at `ctx.ip`.
pub fn encode(
    insn: &AsmInsn,
    ctx: &Context,
    eval: &mut dyn FnMut(&Expr) -> Result<Value, EvalError>,
) -> Result<Vec<u8>, EncodeError> {
    encode_detailed(insn, ctx, eval).map(|e| e.bytes.to_vec())
}

/// An encoded instruction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    /// The bytes (inline: an instruction is at most 15, so copying one out
    /// of the memo allocates nothing).
    pub bytes: super::layout::LineBytes,
    /// Size of the relative branch displacement that ends the instruction,
    /// if it has one (the listing shows it the way yasm does).
    pub branch_disp: Option<usize>,
}

/// Encodes an instruction at `ctx.ip`, with details about the encoding.
pub fn encode_detailed(
    insn: &AsmInsn,
    ctx: &Context,
    eval: &mut dyn FnMut(&Expr) -> Result<Value, EvalError>,
) -> Result<Encoded, EncodeError> {
    encode_remembered(insn, ctx, eval, None).map_err(EncodeError)
}

/// What an instruction's encoding depends on besides its text: the values
/// of its operands, the mode, the floor and (when an operand could be
/// relative to it) its address.
#[derive(Clone, Copy, PartialEq, Eq)]
struct MemoKey {
    bits: u32,
    default_rel: bool,
    floor: usize,
    ip: u64,
    values: [Option<Value>; 4],
}

/// Encodings already made, one per instruction line. Layout passes encode
/// every line again; a line whose `MemoKey` did not change since the last
/// pass encodes the same, and matching it against every form of its
/// mnemonic again is most of an assembler's time.
#[derive(Default)]
pub struct EncodeMemo {
    /// Indexed by line: passes walk the lines in order, so this is read
    /// sequentially (a hash table of a 200k-line file misses the cache).
    lines: Vec<Option<(MemoKey, Encoded)>>,
    /// Relative branches by what their bytes depend on (mnemonic and
    /// displacement), shared by every line: a new line with the same
    /// distance to its target (the common case in long generated tests) is
    /// not matched against every form again.
    branches: HashMap<BranchKey, Encoded, pt_encoder::hash::IpBuildHasher>,
    /// Instructions whose bytes depend on nothing but their text and mode
    /// (`nop`, `push rax`, `mov eax, 5`), by a hash of that: a file of a
    /// million `nop`s keeps one encoding, not one per line.
    fixed: pt_encoder::hash::IntMap<u64, Vec<(FixedKey, Encoded)>>,
    /// Encodings made from scratch (misses).
    chosen: usize,
}

impl EncodeMemo {
    /// How many encodings were made from scratch, not found here.
    pub fn chosen(&self) -> usize {
        self.chosen
    }
}

/// What a layout-free instruction's bytes depend on: the memo stores the
/// instruction (`I = AsmInsn`), a lookup borrows it (`I = &AsmInsn`, which
/// hashes the same), so that a hit copies nothing.
#[derive(Clone, PartialEq, Eq, Hash)]
struct FixedKey<I = AsmInsn> {
    insn: I,
    bits: u32,
    default_rel: bool,
    floor: usize,
}

impl FixedKey {
    fn matches(&self, key: &FixedKey<&AsmInsn>) -> bool {
        self.bits == key.bits
            && self.default_rel == key.default_rel
            && self.floor == key.floor
            && self.insn == *key.insn
    }
}

/// True if `insn`'s bytes cannot depend on its address or on any label: no
/// operand value depends on the layout, no memory operand can be
/// RIP-relative, and no immediate can be a branch target.
fn layout_free(insn: &AsmInsn, codes: &[Code]) -> bool {
    insn.operands.iter().all(|o| match o {
        Operand::Reg(_) => true,
        Operand::Mem(m) => {
            (m.base.is_some() || m.index.is_some())
                && !m.disp.as_ref().is_some_and(Expr::depends_on_layout)
        }
        Operand::Imm(i) => {
            !i.expr.depends_on_layout()
                && !codes
                    .iter()
                    .any(|c| c.op_code().op_kinds().iter().any(|k| is_target(*k)))
        }
        Operand::Far { .. } => false,
    })
}

/// What a 64-bit relative branch's bytes depend on: the mnemonic, the
/// displacement from the instruction's address and the target's flags, the
/// floor and the written size keywords. (In 16- and 32-bit modes targets wrap
/// at the mode's width, so there the address itself matters.)
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct BranchKey {
    mnemonic: &'static str,
    floor: usize,
    distance: i64,
    relocs: i32,
    provisional: bool,
    foreign: bool,
    size: Option<u32>,
    jump: Option<JumpKind>,
    strict: bool,
}

/// The mnemonics whose immediate operand can only be a branch target (no
/// form of theirs takes an immediate).
fn branch_only(codes: &[Code]) -> bool {
    codes.iter().all(|c| {
        !c.op_code().op_kinds().iter().any(|k| {
            matches!(
                k,
                K::imm4_m2z
                    | K::imm8
                    | K::imm8_const_1
                    | K::imm8sex16
                    | K::imm8sex32
                    | K::imm8sex64
                    | K::imm16
                    | K::imm32
                    | K::imm32sex64
                    | K::imm64
            )
        })
    }) && codes.iter().any(|c| {
        c.op_code()
            .op_kinds()
            .iter()
            .any(|k| is_target(*k) && !matches!(k, K::xbegin_2 | K::xbegin_4))
    })
}

/// True for the operand kinds of a relative branch target (`xbegin`'s too).
fn is_target(k: K) -> bool {
    matches!(
        k,
        K::br16_1
            | K::br32_1
            | K::br64_1
            | K::br16_2
            | K::br32_4
            | K::br64_4
            | K::xbegin_2
            | K::xbegin_4
    )
}

/// [`encode_detailed`], remembering the result for line `line` in `memo`.
pub fn encode_memo(
    insn: &AsmInsn,
    ctx: &Context,
    eval: &mut dyn FnMut(&Expr) -> Result<Value, EvalError>,
    memo: &mut EncodeMemo,
    line: usize,
) -> Result<Encoded, EncodeError> {
    encode_remembered(insn, ctx, eval, Some((memo, line))).map_err(EncodeError)
}

fn memo_key(ops: &[Resolved<'_>], ctx: &Context) -> Option<MemoKey> {
    let mut key = MemoKey {
        bits: ctx.bits,
        default_rel: ctx.default_rel,
        floor: ctx.floor,
        ip: 0,
        values: [None; 4],
    };
    let mut n = 0;
    let mut push = |v: Value| -> Option<()> {
        *key.values.get_mut(n)? = Some(v);
        n += 1;
        Some(())
    };
    let mut relative = false;
    for op in ops {
        match op {
            Resolved::Reg(_) => {}
            Resolved::Mem { disp, rel, .. } => {
                relative |= *rel;
                push(*disp)?;
            }
            Resolved::Imm { value, .. } => {
                // A branch target is relative to the address.
                relative = true;
                push(*value)?;
            }
            Resolved::Far { seg, off } => {
                push(*seg)?;
                push(*off)?;
            }
        }
    }
    if relative {
        key.ip = ctx.ip;
    }
    Some(key)
}

fn encode_remembered(
    insn: &AsmInsn,
    ctx: &Context,
    eval: &mut dyn FnMut(&Expr) -> Result<Value, EvalError>,
    mut memo: Option<(&mut EncodeMemo, usize)>,
) -> Result<Encoded, String> {
    let (mnemonic, codes) = table()
        .get_key_value(insn.mnemonic)
        .ok_or_else(|| format!("unknown instruction `{}'", insn.mnemonic))?;
    let mnemonic = mnemonic.as_str();
    // Inline: resolving is done on every layout pass of every line.
    let mut ops: smallvec::SmallVec<[Resolved<'_>; 4]> = smallvec::SmallVec::new();
    for op in &insn.operands {
        ops.push(match op {
            Operand::Reg(r) => Resolved::Reg(*r),
            Operand::Mem(m) => {
                let (disp, has_disp, varies) = match &m.disp {
                    Some(e) => (
                        eval(e).map_err(|e| e.to_string())?,
                        true,
                        e.varies_with_layout(),
                    ),
                    None => (Value::num(0), false, false),
                };
                let rel = m.rel.unwrap_or(ctx.default_rel) && m.base.is_none() && m.index.is_none();
                Resolved::Mem {
                    mem: m,
                    disp,
                    has_disp,
                    disp_varies: varies,
                    rel,
                }
            }
            Operand::Imm(i) => Resolved::Imm {
                value: eval(&i.expr).map_err(|e| e.to_string())?,
                size: i.size,
                jump: i.jump,
                strict: i.strict,
            },
            Operand::Far { seg, off } => Resolved::Far {
                seg: eval(seg).map_err(|e| e.to_string())?,
                off: eval(off).map_err(|e| e.to_string())?,
            },
        });
    }

    // `imul reg, imm` is nasm shorthand for `imul reg, reg, imm`.
    if insn.mnemonic == "imul" {
        if let [Resolved::Reg(r), Resolved::Imm { .. }] = ops.as_slice() {
            let r = *r;
            ops.insert(1, Resolved::Reg(r));
        }
    }
    for op in &ops {
        if let Resolved::Mem { mem, .. } = op {
            check_address(mem, ctx.bits)?;
        }
    }
    let mut opsize_prefix = None;
    let mut addr_prefix = None;
    for p in &insn.prefixes {
        match p {
            Prefix::OpSize(s) => opsize_prefix = Some(*s),
            Prefix::AddrSize(s) => addr_prefix = Some(*s),
            _ => {}
        }
    }
    match (addr_prefix, ctx.bits) {
        (Some(16), 64) | (Some(64), 16 | 32) => {
            return Err(format!(
                "address size prefix not valid in {}-bit mode",
                ctx.bits
            ));
        }
        _ => {}
    }
    if let (Some(64), 16 | 32) = (opsize_prefix, ctx.bits) {
        return Err(format!("o64 not valid in {}-bit mode", ctx.bits));
    }
    let fixed = memo.as_ref().filter(|_| layout_free(insn, codes)).map(|_| {
        let key = FixedKey {
            insn,
            bits: ctx.bits,
            default_rel: ctx.default_rel,
            floor: ctx.floor,
        };
        let hash =
            std::hash::BuildHasher::hash_one(&pt_encoder::hash::IpBuildHasher::default(), &key);
        (hash, key)
    });
    if let (Some((memo, _)), Some((hash, key))) = (&memo, &fixed) {
        if let Some((_, e)) = memo
            .fixed
            .get(hash)
            .and_then(|b| b.iter().find(|(k, _)| k.matches(key)))
        {
            return Ok(e.clone());
        }
    }
    let key = memo
        .as_ref()
        .filter(|_| fixed.is_none())
        .and_then(|_| memo_key(&ops, ctx));
    if let (Some((memo, line)), Some(key)) = (&memo, key) {
        if let Some(Some((k, e))) = memo.lines.get(*line) {
            if *k == key {
                return Ok(e.clone());
            }
        }
    }
    let branch = match (ops.as_slice(), ctx.bits, insn.prefixes.is_empty(), &memo) {
        (
            &[Resolved::Imm {
                value,
                size,
                jump,
                strict,
            }],
            64,
            true,
            Some(_),
        ) if branch_only(codes) => Some(BranchKey {
            mnemonic,
            floor: ctx.floor,
            distance: value.value.wrapping_sub(ctx.ip as i64),
            relocs: value.relocs,
            provisional: value.provisional,
            foreign: value.foreign,
            size,
            jump,
            strict,
        }),
        _ => None,
    };
    let shared = match (&memo, &branch) {
        (Some((memo, _)), Some(b)) => memo.branches.get(b).cloned(),
        _ => None,
    };
    let encoded = match shared {
        Some(e) => e,
        None => {
            if let Some((memo, _)) = memo.as_mut() {
                memo.chosen += 1;
            }
            choose(insn, ctx, &ops, codes, opsize_prefix, addr_prefix)?
        }
    };
    if let Some((memo, line)) = memo {
        if let Some((hash, key)) = fixed {
            memo.fixed.entry(hash).or_default().push((
                FixedKey {
                    insn: key.insn.clone(),
                    bits: key.bits,
                    default_rel: key.default_rel,
                    floor: key.floor,
                },
                encoded.clone(),
            ));
        }
        if let Some(key) = key {
            if memo.lines.len() <= line {
                memo.lines.resize(line + 1, None);
            }
            if let Some(slot) = memo.lines.get_mut(line) {
                *slot = Some((key, encoded.clone()));
            }
        }
        if let Some(b) = branch {
            memo.branches.entry(b).or_insert_with(|| encoded.clone());
        }
    }
    Ok(encoded)
}

/// The encoding yasm picks among the forms of `codes` that take `ops`.
fn choose(
    insn: &AsmInsn,
    ctx: &Context,
    ops: &[Resolved<'_>],
    codes: &[Code],
    opsize_prefix: Option<u32>,
    addr_prefix: Option<u32>,
) -> Result<Encoded, String> {
    let mut found = Vec::new();
    let mut last_error = None;
    collect(
        codes,
        ops,
        insn,
        ctx,
        addr_prefix,
        &mut found,
        &mut last_error,
    );
    if ops.len() == 2 && matches!(insn.mnemonic, "xchg" | "test") {
        // Both operand orders mean the same for these.
        let swapped = vec![ops[1].clone(), ops[0].clone()];
        collect(
            codes,
            &swapped,
            insn,
            ctx,
            addr_prefix,
            &mut found,
            &mut last_error,
        );
    }
    if found.is_empty() {
        return Err(match last_error {
            Some(e) => format!("cannot encode `{}': {e}", insn.mnemonic),
            None => format!(
                "invalid combination of opcode and operands for `{}'",
                insn.mnemonic
            ),
        });
    }

    // yasm only tries a short branch on a target in the same section; a plain
    // number or another section's label gets the near form unless `short` is
    // written (loop and jcxz, which have no near form, stay short).
    let far_target = ops.iter().any(|o| {
        matches!(o, Resolved::Imm { value, jump: None, .. } if value.is_absolute() || value.foreign)
    });
    if far_target && found.iter().any(|c| c.branch_disp.is_some_and(|d| d > 1)) {
        found.retain(|c| c.branch_disp != Some(1));
    }
    // `push word 1`: on push the size keyword is the operand size.
    let push_size = if insn.mnemonic == "push" {
        ops.iter().find_map(|o| match o {
            Resolved::Imm { size: Some(s), .. } if *s > 8 => Some(*s),
            _ => None,
        })
    } else {
        None
    };
    // Default operand size when no operand pins it.
    let want = |c: &Candidate| -> u32 {
        if let Some(s) = opsize_prefix.or(push_size) {
            return s;
        }
        let info = c.code.op_code();
        match ctx.bits {
            64 if insn.mnemonic == "retf" => 64,
            64 if info.default_op_size64() || info.force_op_size64() => 64,
            64 => 32,
            b => b,
        }
    };
    let sized: Vec<&Candidate> = found
        .iter()
        .filter(|c| c.defines_size || c.op_size == 0 || c.op_size == want(c))
        .collect();
    let pool: Vec<&Candidate> = if sized.is_empty() {
        found.iter().collect()
    } else {
        sized
    };

    let unsized_mem = ops
        .iter()
        .any(|o| matches!(o, Resolved::Mem { mem, .. } if mem.size.is_none() && !mem.far));
    if unsized_mem && !pool.iter().any(|c| c.defines_size) {
        let first = pool.first().map(|c| c.mem_size);
        if pool.iter().any(|c| Some(c.mem_size) != first) {
            return Err(format!(
                "operation size not specified for `{}'",
                insn.mnemonic
            ));
        }
    }

    let best = pool
        .iter()
        .filter(|c| c.bytes.len() >= ctx.floor)
        .min_by_key(|c| (c.bytes.len(), !c.imm8_sex))
        .or_else(|| pool.iter().max_by_key(|c| c.bytes.len()))
        .ok_or("no encoding")?;
    Ok(Encoded {
        bytes: super::layout::LineBytes::from_slice(&best.bytes),
        branch_disp: best.branch_disp,
    })
}

fn collect(
    codes: &[Code],
    ops: &[Resolved<'_>],
    insn: &AsmInsn,
    ctx: &Context,
    addr_prefix: Option<u32>,
    found: &mut Vec<Candidate>,
    last_error: &mut Option<String>,
) {
    for &code in codes {
        let info = code.op_code();
        let mode_ok = match ctx.bits {
            16 => info.mode16(),
            32 => info.mode32(),
            _ => info.mode64(),
        };
        if !mode_ok {
            continue;
        }
        let kinds = info.op_kinds();
        let string_op = kinds
            .iter()
            .any(|k| matches!(k, K::seg_rSI | K::es_rDI | K::seg_rDI | K::seg_rBX_al));
        // `stosb`, `lodsq`, `insb` ...: written without operands, their
        // accumulator and DX operands are implicit too.
        let implicit = |k: &K| {
            matches!(k, K::seg_rSI | K::es_rDI | K::seg_rDI | K::seg_rBX_al)
                || (string_op
                    && ops.is_empty()
                    && matches!(k, K::al | K::ax | K::eax | K::rax | K::dx))
        };
        // iced has at most five operands: a fixed array, no allocation per
        // candidate form.
        let mut explicit = [(0usize, K::None); 5];
        let mut n = 0;
        for (i, k) in kinds.iter().enumerate() {
            if !implicit(k) {
                if let Some(slot) = explicit.get_mut(n) {
                    *slot = (i, *k);
                }
                n += 1;
            }
        }
        if n != ops.len() || n > explicit.len() {
            continue;
        }
        let explicit = &explicit[..n];
        // In 64-bit mode 90 is NOP, so yasm encodes `xchg eax, eax` as 87 C0.
        if code == Code::Xchg_r32_EAX
            && ctx.bits == 64
            && matches!(
                ops,
                [Resolved::Reg(Register::EAX), Resolved::Reg(Register::EAX)]
            )
        {
            continue;
        }
        // Displacements that may change between passes also get a disp32
        // variant, so the floor can keep a grown encoding.
        let variants: &[bool] = if ops.iter().any(
            |o| matches!(o, Resolved::Mem { disp_varies: true, disp, .. } if disp.is_absolute()),
        ) {
            &[false, true]
        } else {
            &[false]
        };
        for &force_disp32 in variants {
            match build(
                code,
                kinds,
                explicit,
                ops,
                insn,
                ctx,
                addr_prefix,
                force_disp32,
            ) {
                Ok(Some(c)) => found.push(c),
                Ok(None) => {}
                Err(e) => *last_error = Some(e),
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn build(
    code: Code,
    kinds: &[K],
    explicit: &[(usize, K)],
    ops: &[Resolved<'_>],
    insn: &AsmInsn,
    ctx: &Context,
    addr_prefix: Option<u32>,
    force_disp32: bool,
) -> Result<Option<Candidate>, String> {
    // yasm writes these 16-bit-source instructions without operand-size
    // prefix or REX.W when the source is a register: the CPU ignores both.
    let code = match (code, ops.last()) {
        (_, Some(Resolved::Reg(_))) if ctx.bits != 16 => no_size_prefix_form(code),
        _ => code,
    };
    let ops_owned: Vec<Resolved<'_>>;
    let ops = if no_size_prefix_form(code) == code && is_r32m16(code) {
        ops_owned = ops
            .iter()
            .map(|o| match o {
                Resolved::Reg(r) if r.is_gpr() => Resolved::Reg(r.full_register32()),
                other => other.clone(),
            })
            .collect();
        &ops_owned[..]
    } else {
        ops
    };
    let info = code.op_code();
    let mut fills = [None::<Fill>; 5];
    let fills = fills.get_mut(..kinds.len()).ok_or("too many operands")?;
    let mut defines_size = false;
    let mut mem_op: Option<(&Mem, Value, bool, bool)> = None;
    for (&(slot, k), op) in explicit.iter().zip(ops) {
        let fill = match *op {
            Resolved::Reg(r) => {
                if !reg_matches(k, r) {
                    return Ok(None);
                }
                if is_gpr_kind(k) {
                    defines_size = true;
                }
                Fill::Reg(r)
            }
            Resolved::Mem {
                mem,
                disp,
                has_disp,
                rel,
                ..
            } => {
                let (disp, has_disp, rel) = (&disp, &has_disp, &rel);
                // Only far jmp/call need `far`; les/lds/lss take the same
                // pointer without it.
                let far_branch = matches!(code.mnemonic(), Mnemonic::Jmp | Mnemonic::Call);
                let far_bits = far_offset_bits(info.memory_size()).filter(|_| far_branch);
                if mem.far != far_bits.is_some() {
                    return Ok(None);
                }
                if k == K::mem_offs {
                    if mem.base.is_some() || mem.index.is_some() || *rel {
                        return Ok(None);
                    }
                } else if let Some(implied) = rm_mem_size(k) {
                    let table_size = info.memory_size().size() as u32;
                    let expect = implied.or((table_size != 0).then_some(table_size));
                    if let Some(s) = mem.size {
                        if let Some(fb) = far_bits {
                            if s != fb {
                                return Ok(None);
                            }
                        } else if expect.is_some_and(|e| e * 8 != s) {
                            return Ok(None);
                        }
                        defines_size = true;
                    }
                } else {
                    return Ok(None);
                }
                mem_op = Some((mem, *disp, *has_disp, *rel));
                Fill::Mem
            }
            Resolved::Imm {
                value,
                size,
                jump,
                strict,
            } => {
                let (value, size, jump) = (&value, &size, &jump);
                if is_target(k) {
                    match match_branch(k, *value, *jump, ctx.bits) {
                        Some(f) => f,
                        None => return Ok(None),
                    }
                } else {
                    if jump.is_some() {
                        return Ok(None);
                    }
                    match match_imm(k, *value, *size, strict) {
                        Some(f) => f,
                        None => return Ok(None),
                    }
                }
            }
            Resolved::Far { seg, off } => {
                let (seg, off) = (&seg, &off);
                let kind = match k {
                    K::farbr2_2 => OpKind::FarBranch16,
                    K::farbr4_2 => OpKind::FarBranch32,
                    _ => return Ok(None),
                };
                Fill::FarBranch(kind, seg.value as u16, off.value as u32)
            }
        };
        if let Some(f) = fills.get_mut(slot) {
            *f = Some(fill);
        }
    }
    let addr_bits = match (addr_prefix, mem_op) {
        (Some(a), _) => a,
        (None, _) => ctx.bits,
    };
    for (i, k) in kinds.iter().enumerate() {
        if let Some(f) = fills.get_mut(i) {
            if f.is_none() {
                *f = Some(if *k == K::seg_rBX_al {
                    Fill::Xlat(addr_bits)
                } else if let Some(r) = fixed_register(*k) {
                    Fill::Reg(r)
                } else {
                    Fill::Implicit(implicit_kind(*k, addr_bits).ok_or("unsupported operand kind")?)
                });
            }
        }
    }

    let mut instr = Instruction::default();
    instr.set_code(code);
    let mut second_imm8 = false;
    for (i, f) in fills.iter().enumerate() {
        let i = i as u32;
        match f {
            Some(Fill::Reg(r)) => {
                instr.set_op_kind(i, OpKind::Register);
                instr.set_op_register(i, *r);
            }
            Some(Fill::Mem) => {
                instr.set_op_kind(i, OpKind::Memory);
                if let Some((mem, disp, has_disp, rel)) = mem_op {
                    set_memory(
                        &mut instr,
                        mem,
                        disp,
                        has_disp,
                        rel,
                        ctx.bits,
                        addr_prefix,
                        force_disp32,
                    );
                }
            }
            Some(Fill::Imm(kind, v)) => {
                let kind = if *kind == OpKind::Immediate8 && second_imm8 {
                    OpKind::Immediate8_2nd
                } else {
                    *kind
                };
                instr.set_op_kind(i, kind);
                match kind {
                    OpKind::Immediate8 => instr.set_immediate8(*v as u8),
                    OpKind::Immediate8_2nd => instr.set_immediate8_2nd(*v as u8),
                    OpKind::Immediate8to16 => instr.set_immediate8to16(i16::from(*v as u8 as i8)),
                    OpKind::Immediate8to32 => instr.set_immediate8to32(i32::from(*v as u8 as i8)),
                    OpKind::Immediate8to64 => instr.set_immediate8to64(i64::from(*v as u8 as i8)),
                    OpKind::Immediate16 => instr.set_immediate16(*v as u16),
                    OpKind::Immediate32 => instr.set_immediate32(*v as u32),
                    OpKind::Immediate32to64 => instr.set_immediate32to64(*v as i64),
                    _ => instr.set_immediate64(*v),
                }
                second_imm8 = true;
            }
            Some(Fill::Branch(kind, t)) => {
                instr.set_op_kind(i, *kind);
                match kind {
                    OpKind::NearBranch16 => instr.set_near_branch16(*t as u16),
                    OpKind::NearBranch32 => instr.set_near_branch32(*t as u32),
                    _ => instr.set_near_branch64(*t),
                }
            }
            Some(Fill::FarBranch(kind, sel, off)) => {
                instr.set_op_kind(i, *kind);
                instr.set_far_branch_selector(*sel);
                match kind {
                    OpKind::FarBranch16 => instr.set_far_branch16(*off as u16),
                    _ => instr.set_far_branch32(*off),
                }
            }
            Some(Fill::Implicit(kind)) => instr.set_op_kind(i, *kind),
            Some(Fill::Xlat(a)) => {
                instr.set_op_kind(i, OpKind::Memory);
                instr.set_memory_base(match a {
                    16 => Register::BX,
                    32 => Register::EBX,
                    _ => Register::RBX,
                });
                instr.set_memory_index(Register::AL);
            }
            None => return Ok(None),
        }
    }
    for p in &insn.prefixes {
        match p {
            Prefix::Lock => instr.set_has_lock_prefix(true),
            Prefix::Rep | Prefix::Repe => instr.set_has_repe_prefix(true),
            Prefix::Repne => instr.set_has_repne_prefix(true),
            Prefix::OpSize(_) | Prefix::AddrSize(_) => {}
        }
    }
    let mut bytes = with_encoder(ctx.bits, |encoder| {
        let mut buf = std::mem::take(&mut encoder.1);
        buf.clear();
        encoder.0.set_buffer(buf);
        let r = encoder.0.encode(&instr, ctx.ip);
        encoder.1 = encoder.0.take_buffer();
        r.map(|_| InsnBytes::from(encoder.1.as_slice()))
    })
    .map_err(|e| e.to_string())?;
    if matches!(
        info.mandatory_prefix(),
        MandatoryPrefix::None | MandatoryPrefix::PNP
    ) {
        order_prefixes(&mut bytes);
    }
    // SETcc is 0F 90-9F in the legacy map (VEX's 0F 90-93 are kmov).
    if info.encoding() == EncodingKind::Legacy
        && info.table() == OpCodeTableKind::T0F
        && info.op_code() & 0xfff0 == 0x90
    {
        setcc_reg_field(&mut bytes);
    }
    // System instructions that always work on 16 bits: yasm writes no
    // operand-size prefix for their memory forms (nor ever for arpl).
    let always16 = matches!(
        code,
        Code::Mov_rm16_Sreg
            | Code::Mov_Sreg_rm16
            | Code::Lldt_rm16
            | Code::Ltr_rm16
            | Code::Verr_rm16
            | Code::Verw_rm16
            | Code::Lmsw_rm16
            | Code::Str_rm16
            | Code::Sldt_rm16
            | Code::Smsw_rm16
    );
    if ctx.bits != 16 && ((always16 && mem_op.is_some()) || code == Code::Arpl_rm16_r16) {
        let run = bytes
            .iter()
            .take_while(|b| {
                matches!(
                    b,
                    0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 | 0x66 | 0x67 | 0xf0 | 0xf2 | 0xf3
                )
            })
            .count();
        if let Some(i) = bytes
            .get(..run)
            .and_then(|p| p.iter().position(|b| *b == 0x66))
        {
            bytes.remove(i);
        }
    }
    // An explicit address-size prefix on an instruction without a memory
    // operand (e.g. `a32 loop`) is written as is.
    if let Some(a) = addr_prefix {
        if mem_op.is_none() && a != ctx.bits && bytes.first().is_none_or(|b| *b != 0x67) {
            bytes.insert(0, 0x67);
        }
    }
    Ok(Some(Candidate {
        code,
        op_size: info.operand_size(),
        mem_size: info.memory_size().size(),
        defines_size,
        branch_disp: kinds.iter().find_map(|k| match k {
            K::br16_1 | K::br32_1 | K::br64_1 => Some(1),
            K::br16_2 | K::xbegin_2 => Some(2),
            K::br32_4 | K::br64_4 | K::xbegin_4 => Some(4),
            _ => None,
        }),
        imm8_sex: kinds
            .iter()
            .any(|k| matches!(k, K::imm8sex16 | K::imm8sex32 | K::imm8sex64)),
        bytes,
    }))
}

fn no_size_prefix_form(code: Code) -> Code {
    match code {
        Code::Mov_Sreg_rm16 | Code::Mov_Sreg_r64m16 => Code::Mov_Sreg_r32m16,
        Code::Lldt_rm16 | Code::Lldt_r64m16 => Code::Lldt_r32m16,
        Code::Ltr_rm16 | Code::Ltr_r64m16 => Code::Ltr_r32m16,
        Code::Verr_rm16 | Code::Verr_r64m16 => Code::Verr_r32m16,
        Code::Verw_rm16 | Code::Verw_r64m16 => Code::Verw_r32m16,
        Code::Lmsw_rm16 | Code::Lmsw_r64m16 => Code::Lmsw_r32m16,
        other => other,
    }
}

fn is_r32m16(code: Code) -> bool {
    matches!(
        code,
        Code::Mov_Sreg_r32m16
            | Code::Lldt_r32m16
            | Code::Ltr_r32m16
            | Code::Verr_r32m16
            | Code::Verw_r32m16
            | Code::Lmsw_r32m16
    )
}

/// yasm encodes SETcc with 2 in the ModRM reg field (the CPU ignores it).
fn setcc_reg_field(bytes: &mut [u8]) {
    let at = bytes
        .windows(2)
        .position(|w| w[0] == 0x0f && (0x90..=0x9f).contains(&w[1]));
    if let Some(m) = at.and_then(|i| bytes.get_mut(i + 2)) {
        *m = (*m & 0xc7) | 0x10;
    }
}

/// Rejects effective addresses the CPU cannot express.
fn check_address(mem: &Mem, bits: u32) -> Result<(), String> {
    let regs: Vec<Register> = [mem.base, mem.index].into_iter().flatten().collect();
    let size = |r: &Register| {
        if r.is_gpr16() {
            Some(16)
        } else if r.is_gpr32() {
            Some(32)
        } else if r.is_gpr64() {
            Some(64)
        } else {
            None
        }
    };
    let sizes: Vec<Option<u32>> = regs.iter().map(size).collect();
    let bad = |why: &str| Err(format!("invalid effective address: {why}"));
    if sizes.iter().any(Option::is_none) {
        return bad("only general registers can address memory");
    }
    if sizes.windows(2).any(|w| w[0] != w[1]) {
        return bad("registers of different sizes");
    }
    match sizes.first().copied().flatten() {
        Some(64) if bits != 64 => return bad("64-bit registers outside 64-bit mode"),
        Some(16) if bits == 64 => return bad("16-bit addressing in 64-bit mode"),
        Some(16) => {
            let base_ok = mem.base.is_none_or(|b| {
                matches!(b, Register::BX | Register::BP | Register::SI | Register::DI)
            });
            let index_ok = mem.index.is_none_or(|i| {
                matches!(i, Register::SI | Register::DI)
                    && mem
                        .base
                        .is_some_and(|b| matches!(b, Register::BX | Register::BP))
            });
            if !base_ok || !index_ok || mem.scale > 1 {
                return bad("16-bit addressing takes BX or BP plus SI or DI");
            }
        }
        _ => {}
    }
    if mem
        .index
        .is_some_and(|i| matches!(i, Register::ESP | Register::RSP))
    {
        return bad("the stack pointer cannot be an index");
    }
    if !matches!(mem.scale, 1 | 2 | 4 | 8) {
        return bad("scale must be 1, 2, 4 or 8");
    }
    Ok(())
}

/// Puts legacy prefixes in yasm's order: segment, 67, 66, then lock/rep.
fn order_prefixes(bytes: &mut [u8]) {
    let rank = |b: u8| match b {
        0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 => Some(0),
        0x67 => Some(1),
        0x66 => Some(2),
        0xf0 | 0xf2 | 0xf3 => Some(3),
        _ => None,
    };
    let n = bytes.iter().take_while(|b| rank(**b).is_some()).count();
    if let Some(run) = bytes.get_mut(..n) {
        run.sort_by_key(|b| rank(*b));
    }
}

#[allow(clippy::too_many_arguments)]
fn set_memory(
    instr: &mut Instruction,
    mem: &Mem,
    disp: Value,
    has_disp: bool,
    rel: bool,
    bits: u32,
    addr_prefix: Option<u32>,
    force_disp32: bool,
) {
    if let Some(seg) = mem.seg {
        instr.set_segment_prefix(seg);
    }
    let index = mem.index.unwrap_or(Register::None);
    instr.set_memory_index(index);
    instr.set_memory_index_scale(mem.scale.max(1));
    if rel && bits == 64 {
        instr.set_memory_base(Register::RIP);
        instr.set_memory_displacement64(disp.value as u64);
        instr.set_memory_displ_size(8);
        return;
    }
    let base = mem.base.unwrap_or(Register::None);
    instr.set_memory_base(base);
    instr.set_memory_displacement64(disp.value as u64);
    let reg_addr_bits = [base, index]
        .iter()
        .find(|r| **r != Register::None)
        .map(|r| {
            if r.is_gpr16() {
                16
            } else if r.is_gpr32() {
                32
            } else {
                64
            }
        });
    let addr_bits = reg_addr_bits.or(addr_prefix).unwrap_or(bits);
    let full = addr_bits / 8;
    let size = if base == Register::None && index == Register::None {
        if addr_bits == 64 && instr.code().op_code().op_kinds().contains(&K::mem_offs) {
            8
        } else {
            full.max(2)
        }
    } else if !has_disp
        || (disp.value == 0
            && disp.is_absolute()
            && !force_disp32
            && !mem.disp.as_ref().is_some_and(Expr::varies_with_layout))
    {
        // A displacement computed from labels keeps at least a byte, as in
        // yasm, even when it comes out as zero.
        0
    } else if disp.is_absolute()
        && !disp.foreign
        && !force_disp32
        && (-128..=127).contains(&disp.value)
    {
        1
    } else {
        full
    };
    instr.set_memory_displ_size(size);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::asm::parse::{Body, Parser, Stmt};

    /// Assembles one instruction with no labels.
    fn enc(bits: u32, text: &str) -> Result<Vec<u8>, String> {
        let line = Parser::new().parse_line(1, text)?;
        let Stmt::Emit {
            body: Body::Insn(insn),
            ..
        } = line.stmt
        else {
            return Err("not an instruction".into());
        };
        let ctx = Context {
            bits,
            ip: 0x1000,
            default_rel: false,
            floor: 0,
        };
        encode(&insn, &ctx, &mut |e| match e {
            Expr::Num(n) => Ok(Value::num(*n)),
            _ => crate::asm::expr::eval(e, &Fixed),
        })
        .map_err(|e| e.0)
    }

    struct Fixed;
    impl crate::asm::expr::Scope for Fixed {
        fn symbol(&self, name: &str) -> Option<(i64, bool)> {
            (name == "far_away")
                .then_some((0x9000, true))
                .or((name == "lbl").then_some((0x1010, true)))
        }
        fn here(&self) -> i64 {
            0x1000
        }
        fn section_start(&self) -> i64 {
            0x1000
        }
        fn provisional(&self) -> bool {
            false
        }
    }

    fn hex(bits: u32, text: &str) -> String {
        enc(bits, text)
            .map(|b| b.iter().map(|x| format!("{x:02X}")).collect())
            .unwrap_or_else(|e| format!("error: {e}"))
    }

    #[test]
    fn yasm_picks_these_64bit_encodings() {
        // Each expectation is what yasm 1.3 writes for the line.
        assert_eq!(hex(64, "mov rax, 0x0"), "48C7C000000000");
        assert_eq!(hex(64, "mov rax, 0x80000000"), "48B80000008000000000");
        assert_eq!(hex(64, "mov rax, [rbx]"), "488B03");
        assert_eq!(hex(64, "mov rax, rbx"), "4889D8");
        assert_eq!(hex(64, "add rax, 0x1"), "4883C001");
        assert_eq!(hex(64, "add rax, 0x100"), "480500010000");
        assert_eq!(hex(64, "cmp rax, 0x7"), "4883F807");
        assert_eq!(hex(64, "test [rax], rbx"), "488518");
        assert_eq!(hex(64, "test eax, 0"), "A900000000");
        assert_eq!(hex(64, "mov cr3, rax"), "0F22D8");
        assert_eq!(hex(64, "retf"), "48CB");
        assert_eq!(hex(64, "iret"), "CF");
        assert_eq!(hex(64, "iretq"), "48CF");
        assert_eq!(hex(64, "sysret"), "0F07");
        assert_eq!(hex(64, "jmp far [rax]"), "FF28");
        assert_eq!(hex(64, "jmp far qword [rax]"), "48FF28");
        assert_eq!(hex(64, "call far [rax]"), "FF18");
        assert_eq!(hex(64, "call rax"), "FFD0");
        assert_eq!(hex(64, "int 42"), "CD2A");
        assert_eq!(hex(64, "int3"), "CC");
        assert_eq!(hex(64, "xchg rax, rbx"), "4893");
        assert_eq!(hex(64, "xchg eax, eax"), "87C0");
        assert_eq!(hex(64, "mov rax, [rax*2]"), "488B0400");
        assert_eq!(hex(64, "mov rax, [0x100]"), "488B042500010000");
        assert_eq!(hex(64, "push 1"), "6A01");
        assert_eq!(hex(64, "pushf"), "9C");
        assert_eq!(hex(64, "xabort 1"), "C6F801");
        assert_eq!(hex(64, "vmlaunch"), "0F01C2");
        assert_eq!(hex(64, "mwait"), "0F01C9");
    }

    #[test]
    fn addresses_keep_full_size_immediates() {
        assert_eq!(hex(64, "add rax, lbl"), "480510100000");
        assert_eq!(hex(64, "push lbl"), "6810100000");
        assert_eq!(hex(64, "mov rax, lbl"), "48C7C010100000");
        assert_eq!(hex(64, "mov rax, qword lbl"), "48B81010000000000000");
        assert_eq!(hex(64, "add rax, lbl-$"), "4883C010");
    }

    #[test]
    fn branches_pick_the_shortest_reaching_form() {
        // ip is 0x1000: lbl at 0x1010 is short, far_away is not.
        assert_eq!(hex(64, "jmp lbl"), "EB0E");
        assert_eq!(hex(64, "jmp far_away"), "E9FB7F0000");
        assert_eq!(hex(64, "jmp near lbl"), "E90B000000");
        assert_eq!(hex(64, "jz lbl"), "740E");
        assert_eq!(hex(64, "jnz far_away"), "0F85FA7F0000");
        assert_eq!(hex(64, "call lbl"), "E80B000000");
        assert!(hex(64, "jmp short far_away").starts_with("error"));
        assert_eq!(hex(32, "jmp far_away"), "E9FB7F0000");
        assert_eq!(hex(16, "jmp far_away"), "E9FD7F");
        assert_eq!(hex(16, "jz far_away"), "0F84FC7F");
        assert_eq!(hex(32, "jmp 0x10:0x2000"), "EA002000001000");
        // A plain-number target gets the near form unless `short` is written.
        assert_eq!(hex(64, "jmp 0x1004"), "E9FFFFFFFF");
        assert_eq!(hex(64, "jmp short 0x1004"), "EB02");
        assert_eq!(hex(64, "loop 0x1004"), "E202");
    }

    #[test]
    fn legacy_modes_use_their_default_sizes() {
        assert_eq!(hex(32, "ret"), "C3");
        assert_eq!(hex(32, "retf"), "CB");
        assert_eq!(hex(32, "iret"), "CF");
        assert_eq!(hex(16, "iret"), "CF");
        assert_eq!(hex(16, "iretd"), "66CF");
        assert_eq!(hex(32, "push 0x100"), "6800010000");
        assert_eq!(hex(16, "mov eax, 1"), "66B801000000");
        assert_eq!(hex(32, "mov eax, [0x100]"), "A100010000");
        assert_eq!(hex(16, "mov ax, [bx+si+2]"), "8B4002");
        assert_eq!(hex(32, "nop"), "90");
        assert_eq!(hex(16, "nop"), "90");
    }

    #[test]
    fn yasm_quirks() {
        // SETcc carries 2 in ModRM.reg.
        assert_eq!(hex(64, "setz al"), "0F94D0");
        assert_eq!(hex(64, "setne byte [rax]"), "0F9510");
        // The written value decides imm8 sign extension, not its truncation.
        assert_eq!(hex(64, "add eax, 0xffffffff"), "05FFFFFFFF");
        assert_eq!(hex(64, "add eax, -1"), "83C0FF");
        // Sized immediates still shrink unless `strict`.
        assert_eq!(hex(64, "add eax, dword 1"), "83C001");
        assert_eq!(hex(64, "add eax, strict dword 1"), "0501000000");
        assert_eq!(hex(32, "push word 1"), "666A01");
        // No operand-size prefix where the CPU ignores it.
        assert_eq!(hex(64, "mov ds, ax"), "8ED8");
        assert_eq!(hex(64, "mov ax, ds"), "668CD8");
        assert_eq!(hex(64, "lldt ax"), "0F00D0");
        assert_eq!(hex(32, "lldt word [eax]"), "0F0010");
        assert_eq!(hex(32, "mov word [eax], ds"), "8C18");
        assert_eq!(hex(32, "arpl [eax], bx"), "6318");
        assert_eq!(hex(32, "str ax"), "660F00C8");
        // Far pointers in memory: `far` for jmp/call only.
        assert_eq!(hex(32, "les eax, [ebx]"), "C403");
        assert!(hex(32, "jmp [eax]") == "FF20" && hex(32, "jmp far [eax]") == "FF28");
        // Prefix order: segment, 67, 66, lock/rep.
        assert_eq!(hex(16, "lock add [fs:eax], ebx"), "646766F00118");
        // Implicit operands, shorthand forms, no 486-only opcodes.
        assert_eq!(hex(64, "rep stosq"), "F348AB");
        assert_eq!(hex(64, "lodsb"), "AC");
        assert_eq!(hex(64, "imul eax, 3"), "6BC003");
        assert_eq!(hex(32, "cmpxchg [eax], ebx"), "0FB118");
    }

    #[test]
    fn size_errors() {
        assert!(hex(64, "inc [rax]").starts_with("error: operation size"));
        assert_eq!(hex(64, "inc dword [rax]"), "FF00");
        assert_eq!(hex(64, "push qword [rax]"), "FF30");
        assert_eq!(hex(64, "push [rax]"), "FF30");
        assert!(hex(64, "mov al, rbx").starts_with("error"));
        assert!(hex(64, "pusha").starts_with("error"));
        assert!(hex(64, "mov rax, [eax*3+ebx]").starts_with("error"));
        // Mixed or impossible address registers are errors, not panics.
        assert!(hex(64, "mov rax, [eax+rbx]").starts_with("error: invalid effective address"));
        assert!(hex(16, "mov eax, [rax]").starts_with("error: invalid effective address"));
        assert!(hex(64, "mov ax, [bx]").starts_with("error: invalid effective address"));
        assert!(hex(16, "mov ax, [bx+cx]").starts_with("error: invalid effective address"));
        assert!(hex(64, "mov rax, [xmm0]").starts_with("error: invalid effective address"));
        assert_eq!(hex(16, "mov ax, [si+bx]"), "8B00");
    }
}
