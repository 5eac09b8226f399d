//! Layout: assigns addresses to every line, relaxes branches and other
//! value-dependent encodings over several passes, places sections and writes
//! the flat binary the way `yasm -f bin` does.
//!
//! Passes start optimistic (forward references point at the referencing line,
//! so branches start short) and encodings only grow from one pass to the next;
//! the fixed point reached is the one yasm's span-based optimiser reaches.

use super::expr::{self, Expr, Scope, Symbol, Value};
use super::insn::{self, Context};
use super::parse::{Body, DataItem, Line, SectionDecl, Stmt};
use super::{AsmError, LineInfo, SectionInfo};
use std::collections::{BTreeMap, HashMap};

/// Upper bound on relaxation passes before giving up.
const MAX_PASSES: usize = 500;

/// Largest output (file or one line) we produce: 64 MiB.
const MAX_OUTPUT: u64 = 64 << 20;

/// yasm's default alignment of a section that follows another in `-f bin`.
const DEFAULT_SECTION_ALIGN: u64 = 4;

/// A section as the layout sees it.
#[derive(Debug, Clone)]
struct Section {
    name: String,
    start: Option<u64>,
    vstart: Option<u64>,
    follows: Option<String>,
    align: u64,
    nobits: bool,
    /// Load address (file position + org).
    lma: u64,
    /// Virtual address of offset 0.
    vma: u64,
    size: u64,
    /// Line of the first `section` directive naming it (0 for the default).
    line: usize,
}

impl Section {
    fn new(name: &str) -> Self {
        Section {
            line: 0,
            name: name.to_string(),
            start: None,
            vstart: None,
            follows: None,
            align: DEFAULT_SECTION_ALIGN,
            nobits: name == ".bss",
            lma: 0,
            vma: 0,
            size: 0,
        }
    }
}

/// A line's bytes: inline up to 16, which every instruction fits, so that a
/// layout pass allocates nothing per instruction line; data and `times` lines
/// longer than that spill to the heap.
pub type LineBytes = smallvec::SmallVec<[u8; 16]>;

/// What one line produced.
#[derive(Debug, Clone, Default)]
pub struct Emitted {
    /// Index of the section the line belongs to.
    pub section: usize,
    /// Offset of the line's first byte within its section.
    pub offset: u64,
    /// Virtual address at the start of the line.
    pub addr: u64,
    /// The bytes.
    pub bytes: LineBytes,
    /// Length of one repetition when `times` repeated the body more than once
    /// (at most a line's 64 MiB).
    pub rept_unit: Option<u32>,
    /// True for the NOP padding of an `align` without fill value (the
    /// listing shows no bytes for it).
    pub padding: bool,
    /// The `times` count (1 without `times`).
    pub count: u64,
    /// True for `resb` and friends (the listing shows `<gap>`).
    pub reserve: bool,
    /// Size in bytes of the relative displacement ending each repetition, if any.
    pub branch_disp: Option<u8>,
    /// `bits` in effect on the line.
    pub bits: u32,
    /// `default rel` in effect on the line.
    pub default_rel: bool,
}

/// The result of layout.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The flat binary.
    pub bytes: Vec<u8>,
    /// The origin.
    pub org: u64,
    /// Label addresses, plus pttc's special labels.
    pub labels: BTreeMap<String, u64>,
    /// Sections, in declaration order.
    pub sections: Vec<SectionInfo>,
    /// Per-line addresses.
    pub lines: Vec<LineInfo>,
    /// Per-line emitted bytes, for the listing.
    pub emitted: Vec<Emitted>,
}

/// A symbol's definition: a place in a section, or an `equ` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sym {
    /// A label: section index and offset. Its address follows the section
    /// when sections move between passes.
    Loc { section: usize, offset: u64 },
    /// An `equ`: value and whether it is an address.
    Equ(i64, bool),
}

/// Every label and `equ` name of the source, numbered once in line order:
/// passes then keep their definitions in a vector indexed by that number
/// instead of building a name table again each time.
#[derive(Default)]
struct Names<'a> {
    ids: HashMap<&'a str, usize, pt_encoder::hash::IpBuildHasher>,
    names: Vec<&'a str>,
    /// The line defining each name (the first, where a name is defined twice).
    line: Vec<usize>,
    /// The number of each line's label, if it has one.
    of_line: Vec<Option<usize>>,
    /// By the parser's [`Symbol::number`], this table's number of the name
    /// ([`UNDEFINED`] for a name no line defines): expressions are looked up
    /// by index on every pass, the names hashed once here.
    by_number: Vec<u32>,
}

/// [`Names::by_number`] of a name that no line defines.
const UNDEFINED: u32 = u32::MAX;

impl<'a> Names<'a> {
    fn new(lines: &'a [Line]) -> Self {
        let mut n = Names::default();
        for (i, line) in lines.iter().enumerate() {
            let id = line.label.as_deref().map(|name| {
                *n.ids.entry(name).or_insert_with(|| {
                    n.names.push(name);
                    n.line.push(i);
                    n.names.len() - 1
                })
            });
            n.of_line.push(id);
        }
        let mut number = |e: &Expr| {
            e.for_each_symbol(&mut |s| {
                if s.number == Symbol::UNNUMBERED {
                    return;
                }
                let k = s.number as usize;
                if n.by_number.len() <= k {
                    n.by_number.resize(k + 1, UNDEFINED);
                }
                if let Some(slot) = n.by_number.get_mut(k).filter(|v| **v == UNDEFINED) {
                    *slot = n
                        .ids
                        .get(s.name.as_str())
                        .map_or(UNDEFINED, |&id| id as u32);
                }
            })
        };
        for line in lines {
            super::cycles::line_exprs(line, &mut number);
            if let Stmt::Equ(e) = &line.stmt {
                number(e);
            }
        }
        n
    }

    /// This table's number of `symbol`, if a line defines it.
    fn id_of(&self, symbol: &Symbol) -> Option<usize> {
        match self.by_number.get(symbol.number as usize) {
            Some(&UNDEFINED) => None,
            Some(&id) => Some(id as usize),
            // Not numbered by the parser that read these lines.
            None => self.ids.get(symbol.name.as_str()).copied(),
        }
    }
}

/// One pass's definitions, indexed by [`Names`] number.
type Symbols = Vec<Option<Sym>>;

#[derive(Clone, Copy)]
struct PassScope<'a> {
    /// Index of the section being laid out.
    section: usize,
    names: &'a Names<'a>,
    current: &'a Symbols,
    previous: &'a Symbols,
    bases: &'a [u64],
    here: i64,
    section_start: i64,
    provisional: bool,
}

impl PassScope<'_> {
    fn get(&self, name: &str) -> Option<&Sym> {
        self.definition(*self.names.ids.get(name)?)
    }

    /// The definition of the name numbered `id` in [`Names`]: from this pass
    /// if it came by already, else from the previous one.
    fn definition(&self, id: usize) -> Option<&Sym> {
        match self.current.get(id) {
            Some(Some(s)) => Some(s),
            _ => self.previous.get(id)?.as_ref(),
        }
    }

    fn value(&self, sym: &Sym) -> (i64, bool, bool) {
        match *sym {
            Sym::Loc { section, offset } => (
                self.bases
                    .get(section)
                    .copied()
                    .unwrap_or(0)
                    .wrapping_add(offset) as i64,
                true,
                section != self.section,
            ),
            Sym::Equ(v, loc) => (v, loc, false),
        }
    }
}

impl Scope for PassScope<'_> {
    fn symbol(&self, name: &str) -> Option<(i64, bool)> {
        self.lookup(name).map(|(v, loc, _)| (v, loc))
    }
    fn lookup_symbol(&self, symbol: &Symbol) -> Option<(i64, bool, bool)> {
        Some(self.value(self.definition(self.names.id_of(symbol)?)?))
    }
    fn lookup(&self, name: &str) -> Option<(i64, bool, bool)> {
        Some(self.value(self.get(name)?))
    }
    fn here(&self) -> i64 {
        self.here
    }
    fn foreign(&self, name: &str) -> bool {
        matches!(
            self.get(name),
            Some(Sym::Loc { section, .. }) if *section != self.section
        )
    }
    fn section_start(&self) -> i64 {
        self.section_start
    }
    fn provisional(&self) -> bool {
        self.provisional
    }
}

/// The scope of the minimal layout (yasm's first optimiser step): every
/// label of the current section is at distance zero, so every relaxable
/// field takes its shortest form.
struct MinimalScope<'a> {
    inner: &'a PassScope<'a>,
    /// By [`Names`] number: the section of each label (None for `equ`s).
    labels: &'a [Option<usize>],
}

impl MinimalScope<'_> {
    /// The section of the label numbered `id`; None for an `equ` name.
    fn label_section(&self, id: usize) -> Option<usize> {
        self.labels.get(id).copied().flatten()
    }

    fn by_id(&self, id: Option<usize>) -> Option<usize> {
        self.label_section(id?)
    }
}

impl Scope for MinimalScope<'_> {
    fn symbol(&self, name: &str) -> Option<(i64, bool)> {
        self.lookup(name).map(|(v, loc, _)| (v, loc))
    }
    fn here(&self) -> i64 {
        self.inner.here
    }
    /// `$$` is a location too: at distance zero like the labels.
    #[allow(clippy::misnamed_getters)]
    fn section_start(&self) -> i64 {
        self.inner.here
    }
    fn provisional(&self) -> bool {
        true
    }
    fn foreign(&self, name: &str) -> bool {
        self.by_id(self.inner.names.ids.get(name).copied())
            .is_some_and(|s| s != self.inner.section)
    }
    fn lookup(&self, name: &str) -> Option<(i64, bool, bool)> {
        match self.by_id(self.inner.names.ids.get(name).copied()) {
            Some(s) => Some((self.inner.here, true, s != self.inner.section)),
            None => self.inner.lookup(name).map(|(v, loc, _)| (v, loc, false)),
        }
    }
    fn lookup_symbol(&self, symbol: &Symbol) -> Option<(i64, bool, bool)> {
        let id = self.inner.names.id_of(symbol);
        match self.by_id(id) {
            Some(s) => Some((self.inner.here, true, s != self.inner.section)),
            None => {
                let (v, loc, _) = self.inner.value(self.inner.definition(id?)?);
                Some((v, loc, false))
            }
        }
    }
}

struct PassResult {
    symbols: Symbols,
    emitted: Vec<Emitted>,
    sections: Vec<Section>,
    org: u64,
    org_seen: bool,
}

struct Assembler<'a> {
    lines: &'a [Line],
    file: &'a str,
    floors: Vec<usize>,
    /// While measuring: the length of each instruction line, used instead of
    /// encoding it.
    fixed: Option<Vec<usize>>,
    /// Section index of every label, known from the source order alone.
    label_sections: Vec<Option<usize>>,
    /// While measuring for the minimal layout: every label reads as the
    /// referencing line's own address.
    minimal: bool,
    /// Each instruction line's last encoding.
    memo: std::cell::RefCell<insn::EncodeMemo>,
    /// Label and `equ` names.
    names: Names<'a>,
    /// Passes over the lines so far (a file's cost is lines times this).
    passes: usize,
}

/// Defines symbol `id` (if the line has one); true if it was defined before.
fn define(symbols: &mut Symbols, id: Option<usize>, sym: Sym) -> bool {
    match id.and_then(|i| symbols.get_mut(i)) {
        Some(slot) => slot.replace(sym).is_some(),
        None => false,
    }
}

fn err(file: &str, line: usize, message: impl Into<String>) -> AsmError {
    AsmError {
        file: file.to_string(),
        line,
        message: message.into(),
    }
}

fn align_up(v: u64, a: u64) -> u64 {
    if a <= 1 {
        v
    } else {
        v.div_ceil(a).saturating_mul(a)
    }
}

/// The NOP patterns yasm 1.3 fills code alignment with, by mode and length.
fn nop_fill(bits: u32, len: usize) -> LineBytes {
    const F16: [&[u8]; 16] = [
        &[],
        &[0x90],
        &[0x89, 0xf6],
        &[0x8d, 0x74, 0x00],
        &[0x8d, 0xb4, 0x00, 0x00],
        &[0x90, 0x8d, 0xb4, 0x00, 0x00],
        &[0x89, 0xf6, 0x8d, 0xbd, 0x00, 0x00],
        &[0x8d, 0x74, 0x00, 0x8d, 0xbd, 0x00, 0x00],
        &[0x8d, 0xb4, 0x00, 0x00, 0x8d, 0xbd, 0x00, 0x00],
        &[0xeb, 0x07, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90],
        &[0xeb, 0x08, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90],
        &[
            0xeb, 0x09, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90,
        ],
        &[
            0xeb, 0x0a, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90,
        ],
        &[
            0xeb, 0x0b, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90,
        ],
        &[
            0xeb, 0x0c, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90,
        ],
        &[
            0xeb, 0x0d, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90,
            0x90,
        ],
    ];
    const F32: [&[u8]; 16] = [
        &[],
        &[0x90],
        &[0x66, 0x90],
        &[0x8d, 0x76, 0x00],
        &[0x8d, 0x74, 0x26, 0x00],
        &[0x90, 0x8d, 0x74, 0x26, 0x00],
        &[0x8d, 0xb6, 0x00, 0x00, 0x00, 0x00],
        &[0x8d, 0xb4, 0x26, 0x00, 0x00, 0x00, 0x00],
        &[0x90, 0x8d, 0xb4, 0x26, 0x00, 0x00, 0x00, 0x00],
        &[0xeb, 0x07, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90],
        &[0xeb, 0x08, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90],
        &[
            0xeb, 0x09, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90,
        ],
        &[
            0xeb, 0x0a, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90,
        ],
        &[
            0xeb, 0x0b, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90,
        ],
        &[
            0xeb, 0x0c, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90,
        ],
        &[
            0xeb, 0x0d, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90,
            0x90,
        ],
    ];
    // 64-bit mode: the long NOPs (0F 1F /0) with 66/2E padding.
    const F64: [&[u8]; 16] = [
        &[],
        &[0x90],
        &[0x66, 0x90],
        &[0x0f, 0x1f, 0x00],
        &[0x0f, 0x1f, 0x40, 0x00],
        &[0x0f, 0x1f, 0x44, 0x00, 0x00],
        &[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00],
        &[0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00],
        &[0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
        &[0x66, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
        &[0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
        &[
            0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00,
        ],
        &[
            0x66, 0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00,
        ],
        &[
            0x66, 0x66, 0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00,
        ],
        &[
            0x66, 0x66, 0x66, 0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00,
        ],
        &[
            0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00,
            0x00,
        ],
    ];
    let table = match bits {
        16 => &F16,
        32 => &F32,
        _ => &F64,
    };
    // Longest pattern first, then the remainder, as yasm does.
    let mut out = LineBytes::with_capacity(len);
    let mut left = len;
    while left > 0 {
        let n = left.min(15);
        out.extend_from_slice(table.get(n).copied().unwrap_or_default());
        left -= n;
    }
    out
}

impl<'a> Assembler<'a> {
    fn pass(&mut self, previous: &PassResult, final_pass: bool) -> Result<PassResult, AsmError> {
        self.passes += 1;
        let mut sections: Vec<Section> = previous.sections.clone();
        for s in &mut sections {
            s.size = 0;
        }
        let mut offsets = vec![0u64; sections.len()];
        let mut bases: Vec<u64> = sections.iter().map(|s| s.vma).collect();
        let mut cur = 0usize;
        let mut bits = 16u32;
        let mut default_rel = false;
        let mut symbols: Symbols = vec![None; self.names.names.len()];
        let mut emitted = Vec::with_capacity(self.lines.len());
        let mut org = previous.org;
        let mut org_seen = false;
        let mut total = 0u64;
        let file = self.file;

        for (idx, line) in self.lines.iter().enumerate() {
            let section = sections
                .get(cur)
                .ok_or_else(|| err(file, line.number, "internal: no section"))?;
            let offset = offsets.get(cur).copied().unwrap_or(0);
            let addr = section.vma.wrapping_add(offset);
            let section_start = section.vma;
            let mut out = Emitted {
                section: cur,
                offset,
                addr,
                count: 1,
                ..Emitted::default()
            };

            let id = self.names.of_line.get(idx).copied().flatten();
            if let Some(name) = &line.label {
                if !matches!(line.stmt, Stmt::Equ(_))
                    && define(
                        &mut symbols,
                        id,
                        Sym::Loc {
                            section: cur,
                            offset,
                        },
                    )
                {
                    return Err(err(file, line.number, format!("redefinition of `{name}'")));
                }
            }

            let scope = PassScope {
                section: cur,
                names: &self.names,
                current: &symbols,
                previous: &previous.symbols,
                bases: &bases,
                here: addr as i64,
                section_start: section_start as i64,
                provisional: !final_pass,
            };
            let number = line.number;
            let eval_abs = |e: &Expr, what: &str| -> Result<Value, AsmError> {
                let v = expr::eval(e, &scope).map_err(|m| err(file, number, m.to_string()))?;
                if !v.is_absolute() && !v.provisional {
                    return Err(err(file, number, format!("{what} must be a constant")));
                }
                Ok(v)
            };

            match &line.stmt {
                Stmt::Empty | Stmt::Ignored => {}
                Stmt::Equ(e) => {
                    let v = expr::eval(e, &scope).map_err(|m| err(file, number, m.to_string()))?;
                    if let Some(name) = &line.label {
                        if define(&mut symbols, id, Sym::Equ(v.value, !v.is_absolute())) {
                            return Err(err(file, number, format!("redefinition of `{name}'")));
                        }
                    }
                }
                Stmt::Org(e) => {
                    let v = eval_abs(e, "org")?;
                    if org_seen && v.value as u64 != org {
                        return Err(err(file, number, "program origin redefined"));
                    }
                    org = v.value as u64;
                    org_seen = true;
                }
                Stmt::Bits(b) => bits = *b,
                Stmt::DefaultRel(r) => default_rel = *r && bits == 64,
                Stmt::Section(decl) => {
                    cur = self.section(&mut sections, &mut offsets, decl, &scope, number)?;
                    let s = sections
                        .get(cur)
                        .ok_or_else(|| err(file, number, "internal: no section"))?;
                    if bases.len() < sections.len() {
                        bases.push(s.vma);
                    }
                    out.section = cur;
                    out.offset = offsets.get(cur).copied().unwrap_or(0);
                    out.addr = s.vma.wrapping_add(out.offset);
                }
                Stmt::Align { boundary, fill } => {
                    let n = eval_abs(boundary, "alignment")?.value;
                    if n <= 0 || (n & (n - 1)) != 0 {
                        return Err(err(file, number, "alignment must be a power of two"));
                    }
                    let n = n as u64;
                    let pad = (n - offset % n) % n;
                    if pad > MAX_OUTPUT {
                        return Err(err(file, number, "alignment too large"));
                    }
                    out.bytes = match fill {
                        Some(f) => {
                            LineBytes::from_elem(eval_abs(f, "fill")?.value as u8, pad as usize)
                        }
                        // yasm pads with NOPs in every section of a flat binary.
                        None => nop_fill(bits, pad as usize),
                    };
                    out.padding = fill.is_none();
                    if fill.is_some() {
                        out.count = pad;
                        out.rept_unit = (pad > 1).then_some(1);
                    }
                    // A section is at least as aligned as anything in it.
                    if let Some(s) = sections.get_mut(cur) {
                        s.align = s.align.max(n);
                    }
                }
                Stmt::Emit { times, body } => {
                    let count = match times {
                        None => 1,
                        Some(t) => {
                            let v = eval_abs(t, "times count")?;
                            if v.value < 0 {
                                if final_pass {
                                    return Err(err(file, number, "times count is negative"));
                                }
                                0
                            } else {
                                v.value as u64
                            }
                        }
                    };
                    let floor = self.floors.get(idx).copied().unwrap_or(0);
                    out.bits = bits;
                    out.default_rel = default_rel;
                    let fixed = match (&self.fixed, body) {
                        (Some(f), Body::Insn(_)) => f.get(idx).copied(),
                        _ => None,
                    };
                    let result = if let Some(len) = fixed {
                        let total = (len as u64).saturating_mul(count);
                        if total > MAX_OUTPUT {
                            return Err(err(file, number, "output too large"));
                        }
                        Ok((LineBytes::from_elem(0, total as usize), len, None))
                    } else if self.minimal {
                        // Every label at distance zero: the shortest forms.
                        let near = MinimalScope {
                            inner: &scope,
                            labels: &self.label_sections,
                        };
                        let at = EmitAt {
                            bits,
                            addr,
                            default_rel,
                            floor: 0,
                            line: idx,
                        };
                        emit_body(body, count, &at, &near, false, &self.memo)
                    } else {
                        let at = EmitAt {
                            bits,
                            addr,
                            default_rel,
                            floor,
                            line: idx,
                        };
                        emit_body(body, count, &at, &scope, final_pass, &self.memo)
                    };
                    match result {
                        Ok((bytes, unit, branch_disp)) => {
                            if let Some(f) = self.floors.get_mut(idx) {
                                *f = unit;
                            }
                            out.count = count;
                            out.reserve = matches!(body, Body::Reserve { .. });
                            out.branch_disp = branch_disp.and_then(|d| u8::try_from(d).ok());
                            out.rept_unit = (count > 1).then_some(unit as u32);
                            out.bytes = bytes;
                        }
                        Err(m) if final_pass => return Err(err(file, number, m)),
                        Err(_) => {
                            // Values are still settling: keep the last size.
                            let guess = (floor as u64).saturating_mul(count);
                            out.bytes = LineBytes::from_elem(
                                0,
                                if guess <= MAX_OUTPUT {
                                    guess as usize
                                } else {
                                    0
                                },
                            );
                        }
                    }
                }
            }
            let len = out.bytes.len() as u64;
            if let Some(o) = offsets.get_mut(out.section) {
                *o += len;
            }
            total += len;
            if total > MAX_OUTPUT {
                return Err(err(file, line.number, "output too large"));
            }
            emitted.push(out);
        }
        for (s, o) in sections.iter_mut().zip(&offsets) {
            s.size = *o;
        }
        Ok(PassResult {
            symbols,
            emitted,
            sections,
            org,
            org_seen,
        })
    }

    fn section(
        &self,
        sections: &mut Vec<Section>,
        offsets: &mut Vec<u64>,
        decl: &SectionDecl,
        scope: &PassScope<'_>,
        number: usize,
    ) -> Result<usize, AsmError> {
        let idx = match sections.iter().position(|s| s.name == decl.name) {
            Some(i) => i,
            None => {
                let mut s = Section::new(&decl.name);
                s.line = number;
                sections.push(s);
                offsets.push(0);
                sections.len() - 1
            }
        };
        let constant = |e: &Expr, what: &str| -> Result<u64, AsmError> {
            match expr::eval(e, scope) {
                Ok(v) if v.is_absolute() => Ok(v.value as u64),
                Ok(_) => Err(err(
                    self.file,
                    number,
                    format!("section {what} must be a constant"),
                )),
                Err(m) => Err(err(self.file, number, m.to_string())),
            }
        };
        let start = decl
            .start
            .as_ref()
            .map(|e| constant(e, "start"))
            .transpose()?;
        let vstart = decl
            .vstart
            .as_ref()
            .map(|e| constant(e, "vstart"))
            .transpose()?;
        let align = decl
            .align
            .as_ref()
            .map(|e| constant(e, "align"))
            .transpose()?;
        if let Some(a) = align {
            if a == 0 || (a & (a - 1)) != 0 {
                return Err(err(
                    self.file,
                    number,
                    "section alignment must be a power of two",
                ));
            }
        }
        let s = sections
            .get_mut(idx)
            .ok_or_else(|| err(self.file, number, "internal: no section"))?;
        if start.is_some() {
            s.start = start;
        }
        if vstart.is_some() {
            s.vstart = vstart;
        }
        if let Some(a) = align {
            s.align = a;
        }
        if decl.follows.is_some() {
            s.follows = decl.follows.clone();
        }
        if let Some(nb) = decl.nobits {
            s.nobits = nb;
        }
        Ok(idx)
    }

    /// Places sections after a pass: load addresses and virtual addresses.
    fn place(&self, sections: &mut [Section], org: u64) -> Result<(), AsmError> {
        // yasm puts every progbits section first, in declaration order, and
        // the nobits ones (`.bss`) after them.
        let order: Vec<usize> = (0..sections.len())
            .filter(|i| sections.get(*i).is_some_and(|s| !s.nobits))
            .chain((0..sections.len()).filter(|i| sections.get(*i).is_some_and(|s| s.nobits)))
            .collect();
        let mut placed = vec![false; sections.len()];
        let mut prev_end = org;
        for (k, &i) in order.iter().enumerate() {
            let Some(s) = sections.get(i) else { continue };
            let lma = if let Some(st) = s.start {
                st
            } else if let Some(f) = &s.follows {
                let target = sections
                    .iter()
                    .zip(&placed)
                    .find(|(t, done)| **done && &t.name == f)
                    .map(|(t, _)| t)
                    .ok_or_else(|| {
                        err(
                            self.file,
                            s.line,
                            format!("section `{f}' to follow is unknown or not earlier"),
                        )
                    })?;
                align_up(target.lma.saturating_add(target.size), s.align)
            } else if k == 0 {
                org
            } else {
                align_up(prev_end, s.align)
            };
            let vma = s.vstart.unwrap_or(lma);
            let size = s.size;
            if let Some(s) = sections.get_mut(i) {
                s.lma = lma;
                s.vma = vma;
            }
            if let Some(p) = placed.get_mut(i) {
                *p = true;
            }
            prev_end = lma.saturating_add(size);
        }
        Ok(())
    }
}

/// Where a line is emitted.
#[derive(Clone, Copy)]
struct EmitAt {
    bits: u32,
    addr: u64,
    default_rel: bool,
    floor: usize,
    /// The line's index (for the encoding memo).
    line: usize,
}

fn emit_body(
    body: &Body,
    count: u64,
    at: &EmitAt,
    scope: &dyn Scope,
    final_pass: bool,
    memo: &std::cell::RefCell<insn::EncodeMemo>,
) -> Result<(LineBytes, usize, Option<usize>), String> {
    let EmitAt {
        bits,
        addr,
        default_rel,
        floor,
        line,
    } = *at;
    match body {
        Body::Reserve { unit, count: n } => {
            let v = expr::eval(n, scope).map_err(|e| e.to_string())?;
            if !v.is_absolute() && !v.provisional {
                return Err("reserve count must be a constant".into());
            }
            let n = if v.value < 0 {
                if final_pass {
                    return Err("reserve count is negative".into());
                }
                0
            } else {
                v.value as u64
            };
            let unit_len = n.saturating_mul(u64::from(*unit));
            let total = unit_len
                .checked_mul(count)
                .filter(|t| *t <= MAX_OUTPUT)
                .ok_or("reserved space too large")?;
            Ok((
                LineBytes::from_elem(0, total as usize),
                unit_len as usize,
                None,
            ))
        }
        Body::Data { unit, items } => {
            // yasm evaluates `$` once, at the start of the line, for every
            // repetition, so data repeats unchanged.
            let one = encode_data(*unit, items, scope)?;
            let (bytes, unit) = repeat(LineBytes::from_vec(one), count, false, |_| Ok(Vec::new()))?;
            Ok((bytes, unit, None))
        }
        Body::Insn(insn) => {
            let ctx = Context {
                bits,
                ip: addr,
                default_rel,
                floor,
            };
            let mut eval = |e: &Expr| expr::eval(e, scope);
            let first = insn::encode_memo(insn, &ctx, &mut eval, &mut memo.borrow_mut(), line)
                .map_err(|e| e.0)?;
            let (one, branch_disp) = (first.bytes, first.branch_disp);
            let per_rep = insn.operands.iter().any(|o| match o {
                super::parse::Operand::Imm(i) => i.expr.depends_on_layout(),
                super::parse::Operand::Mem(m) => {
                    m.disp.as_ref().is_some_and(|d| d.depends_on_layout())
                }
                super::parse::Operand::Far { .. } => true,
                super::parse::Operand::Reg(_) => false,
            });
            let unit = one.len() as u64;
            repeat(one, count, per_rep, |k| {
                // Each copy sits at its own address; `$` stays the line start.
                let ctx = Context {
                    bits,
                    ip: addr.wrapping_add(k.wrapping_mul(unit)),
                    default_rel,
                    floor,
                };
                let mut eval = |e: &Expr| expr::eval(e, scope);
                insn::encode(insn, &ctx, &mut eval).map_err(|e| e.0)
            })
            .map(|(bytes, unit)| (bytes, unit, branch_disp))
        }
    }
}

fn encode_data(unit: u8, items: &[DataItem], scope: &dyn Scope) -> Result<Vec<u8>, String> {
    let unit = usize::from(unit);
    let mut one = Vec::new();
    for item in items {
        match item {
            DataItem::Bytes(b) => {
                one.extend_from_slice(b);
                one.extend(std::iter::repeat_n(0, (unit - b.len() % unit) % unit));
            }
            DataItem::Expr(e) => {
                let v = expr::eval(e, scope).map_err(|e| e.to_string())?;
                let le = (v.value as u64).to_le_bytes();
                one.extend_from_slice(le.get(..unit).unwrap_or(&le));
            }
        }
    }
    Ok(one)
}

/// Repeats one encoding `count` times; `again(k)` re-encodes repetition k
/// when its bytes depend on its own address.
fn repeat(
    one: LineBytes,
    count: u64,
    per_rep: bool,
    mut again: impl FnMut(u64) -> Result<Vec<u8>, String>,
) -> Result<(LineBytes, usize), String> {
    let unit = one.len();
    let total = (unit as u64)
        .checked_mul(count)
        .filter(|t| *t <= MAX_OUTPUT)
        .ok_or("times count too large")?;
    if count == 1 {
        return Ok((one, unit));
    }
    let mut out = LineBytes::with_capacity(total as usize);
    if count == 0 {
        return Ok((out, unit));
    }
    out.extend_from_slice(&one);
    for k in 1..count {
        if per_rep {
            let b = again(k)?;
            if b.len() != unit {
                return Err("repeated instruction changes size".into());
            }
            out.extend_from_slice(&b);
        } else {
            out.extend_from_slice(&one);
        }
    }
    Ok((out, unit))
}

/// Lays out parsed lines into a flat binary.
pub fn layout(lines: &[Line], file: &str) -> Result<Layout, AsmError> {
    layout_counted(lines, file).map(|(l, _)| l)
}

/// What laying out a file cost: passes over its lines and instructions
/// matched against their forms from scratch (the memo's misses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Work {
    passes: usize,
    chosen: usize,
}

fn layout_counted(lines: &[Line], file: &str) -> Result<(Layout, Work), AsmError> {
    super::cycles::check(lines, file)?;
    let names = Names::new(lines);
    let mut asm = Assembler {
        lines,
        file,
        floors: vec![0; lines.len()],
        fixed: None,
        label_sections: label_sections(lines, &names),
        minimal: false,
        memo: Default::default(),
        names,
        passes: 0,
    };
    let initial = PassResult {
        symbols: Symbols::new(),
        emitted: Vec::new(),
        sections: vec![Section::new(".text")],
        org: 0,
        org_seen: false,
    };
    let mut prev = match asm.relax(&initial) {
        Some(r) => r,
        None => {
            // Something the span model does not cover: plain passes.
            asm.floors = vec![0; lines.len()];
            initial
        }
    };
    // Relaxation usually leaves a settled layout: then one final pass that
    // reproduces it is the last pass (a 200k-line file saves a whole pass).
    // Otherwise, or where the final pass's stricter checks fail on values
    // still settling, plain passes until nothing moves, then the final one.
    let settled = match asm.pass(&prev, true) {
        Ok(mut next) => (asm.place(&mut next.sections, next.org).is_ok()
            && unchanged(&next, &prev))
        .then_some(next),
        Err(_) => None,
    };
    let fin = match settled {
        Some(fin) => fin,
        None => {
            let mut converged = false;
            for _ in 0..MAX_PASSES {
                let mut next = asm.pass(&prev, false)?;
                asm.place(&mut next.sections, next.org)?;
                let same = unchanged(&next, &prev);
                prev = next;
                if same {
                    converged = true;
                    break;
                }
            }
            if !converged {
                return Err(err(file, 0, "layout does not converge"));
            }
            let mut fin = asm.pass(&prev, true)?;
            asm.place(&mut fin.sections, fin.org)?;
            fin
        }
    };
    drop(prev);
    let _ = fin.org_seen;
    let work = Work {
        passes: asm.passes,
        chosen: asm.memo.borrow().chosen(),
    };
    finish(fin, &asm.names, file).map(|l| (l, work))
}

/// True if a pass laid everything out where the previous one did.
fn unchanged(next: &PassResult, prev: &PassResult) -> bool {
    next.symbols == prev.symbols
        && next.org == prev.org
        && next
            .sections
            .iter()
            .map(|s| (s.lma, s.vma, s.size))
            .eq(prev.sections.iter().map(|s| (s.lma, s.vma, s.size)))
        && next
            .emitted
            .iter()
            .map(|e| e.bytes.len())
            .eq(prev.emitted.iter().map(|e| e.bytes.len()))
}

/// For every line, the labels whose address is where its bytes end (those
/// whose last line before them that emits or aligns, in the same section, is
/// that line).
fn preceding_lines(lines: &[Line], ids: &Names) -> pt_encoder::hash::IntMap<usize, Vec<usize>> {
    let mut names = vec![".text".to_string()];
    let mut cur = 0;
    let mut last: Vec<Option<usize>> = vec![None];
    let mut out = pt_encoder::hash::IntMap::<usize, Vec<usize>>::default();
    for (i, line) in lines.iter().enumerate() {
        if let Stmt::Section(decl) = &line.stmt {
            cur = match names.iter().position(|n| *n == decl.name) {
                Some(k) => k,
                None => {
                    names.push(decl.name.clone());
                    last.push(None);
                    names.len() - 1
                }
            };
        }
        if let (Some(name), false) = (&line.label, matches!(line.stmt, Stmt::Equ(_))) {
            if let (Some(Some(p)), Some(&id)) = (last.get(cur), ids.ids.get(name.as_str())) {
                out.entry(*p).or_insert_with(Vec::new).push(id);
            }
        }
        if matches!(line.stmt, Stmt::Emit { .. } | Stmt::Align { .. }) {
            if let Some(l) = last.get_mut(cur) {
                *l = Some(i);
            }
        }
    }
    out
}

fn mentions_section_start(e: &Expr) -> bool {
    match e {
        Expr::SectionStart => true,
        Expr::Unary(_, x) => mentions_section_start(x),
        Expr::Binary(_, a, b) => mentions_section_start(a) || mentions_section_start(b),
        _ => false,
    }
}

/// The section of every label, from the order of `section` directives.
/// By [`Names`] number, the section of each label (None for an `equ` name).
fn label_sections(lines: &[Line], names: &Names) -> Vec<Option<usize>> {
    let mut sections = vec![".text".to_string()];
    let mut cur = 0;
    let mut of = vec![None; names.names.len()];
    for line in lines {
        if let Stmt::Section(decl) = &line.stmt {
            cur = match sections.iter().position(|n| *n == decl.name) {
                Some(i) => i,
                None => {
                    sections.push(decl.name.clone());
                    sections.len() - 1
                }
            };
        }
        if let Some(name) = &line.label {
            if let (false, Some(slot)) = (
                matches!(line.stmt, Stmt::Equ(_)),
                names.ids.get(name.as_str()).and_then(|&id| of.get_mut(id)),
            ) {
                *slot = Some(cur);
            }
        }
    }
    of
}

impl<'a> Assembler<'a> {
    /// Lays out with the given instruction lengths, until section placement
    /// settles.
    fn measure(&mut self, lengths: &[usize], prev: &PassResult) -> Option<PassResult> {
        self.fixed = Some(lengths.to_vec());
        let placement = |r: &PassResult| -> Vec<(u64, u64)> {
            r.sections.iter().map(|s| (s.lma, s.vma)).collect()
        };
        let result = (|| {
            let mut bases = placement(prev);
            let mut r = self.pass(prev, false).ok()?;
            self.place(&mut r.sections, r.org).ok()?;
            for _ in 0..16 {
                // Done once the pass used the section addresses it produced.
                if placement(&r) == bases {
                    return Some(r);
                }
                bases = placement(&r);
                let mut next = self.pass(&r, false).ok()?;
                self.place(&mut next.sections, next.org).ok()?;
                r = next;
            }
            None
        })();
        self.fixed = None;
        result
    }

    /// The longer length instruction line `i` needs in layout `lay`, if its
    /// current length `len` no longer fits its values.
    fn wants(&self, i: usize, lay: &PassResult, len: usize) -> Option<usize> {
        self.wants_with(i, lay, &lay.symbols, len)
    }

    /// [`Self::wants`] with label positions taken from `symbols`.
    fn wants_with(
        &self,
        i: usize,
        lay: &PassResult,
        symbols: &Symbols,
        len: usize,
    ) -> Option<usize> {
        let Stmt::Emit {
            body: Body::Insn(insn),
            ..
        } = &self.lines.get(i)?.stmt
        else {
            return None;
        };
        let e = lay.emitted.get(i)?;
        let bases: smallvec::SmallVec<[u64; 8]> = lay.sections.iter().map(|s| s.vma).collect();
        let empty = Symbols::new();
        let scope = PassScope {
            section: e.section,
            names: &self.names,
            current: symbols,
            previous: &empty,
            bases: &bases,
            here: e.addr as i64,
            section_start: bases.get(e.section).copied().unwrap_or(0) as i64,
            provisional: false,
        };
        let ctx = Context {
            bits: e.bits,
            ip: e.addr,
            default_rel: e.default_rel,
            floor: len,
        };
        let bytes = insn::encode_memo(
            insn,
            &ctx,
            &mut |x| expr::eval(x, &scope),
            &mut self.memo.borrow_mut(),
            i,
        )
        .ok()?
        .bytes;
        (bytes.len() > len).then_some(bytes.len())
    }

    /// yasm's optimiser: start from the shortest forms, grow every field
    /// that is out of range in that layout, then grow one field at a time in
    /// queue order, re-checking the others after each change. Alignment can
    /// shrink distances again, so the order matters for matching yasm.
    /// None if the layout cannot be measured this way.
    fn relax(&mut self, initial: &PassResult) -> Option<PassResult> {
        // 1a: shortest forms.
        self.minimal = true;
        let first = self.pass(initial, false);
        self.minimal = false;
        let mut first = first.ok()?;
        self.place(&mut first.sections, first.org).ok()?;
        let mut lengths = self.floors.clone();
        let relaxable: Vec<usize> = self
            .lines
            .iter()
            .enumerate()
            .filter(|(_, l)| match &l.stmt {
                Stmt::Emit {
                    body: Body::Insn(insn),
                    ..
                } => insn.operands.iter().any(|o| match o {
                    super::parse::Operand::Imm(i) => i.expr.depends_on_layout(),
                    super::parse::Operand::Mem(m) => {
                        m.disp.as_ref().is_some_and(Expr::depends_on_layout)
                    }
                    super::parse::Operand::Far { .. } | super::parse::Operand::Reg(_) => false,
                }),
                _ => false,
            })
            .map(|(i, _)| i)
            .collect();
        // The lines whose lengths a relaxable line's values depend on: from
        // the earliest to the latest of itself and the labels it names.
        let names = &self.names;
        let ranges: pt_encoder::hash::IntMap<usize, (usize, usize)> = relaxable
            .iter()
            .map(|&j| {
                let (mut lo, mut hi) = (j, j);
                if let Some(Stmt::Emit {
                    body: Body::Insn(insn),
                    ..
                }) = self.lines.get(j).map(|l| &l.stmt)
                {
                    let mut visit = |e: &Expr| {
                        if mentions_section_start(e) {
                            lo = 0;
                        }
                        e.for_each_symbol(&mut |name| match names
                            .id_of(name)
                            .and_then(|i| names.line.get(i))
                        {
                            Some(&k) => {
                                lo = lo.min(k);
                                hi = hi.max(k);
                            }
                            None => {
                                lo = 0;
                                hi = usize::MAX;
                            }
                        });
                    };
                    for o in &insn.operands {
                        match o {
                            super::parse::Operand::Imm(i) => visit(&i.expr),
                            super::parse::Operand::Mem(m) => {
                                if let Some(d) = &m.disp {
                                    visit(d);
                                }
                            }
                            super::parse::Operand::Far { seg, off } => {
                                visit(seg);
                                visit(off);
                            }
                            super::parse::Operand::Reg(_) => {}
                        }
                    }
                }
                (j, (lo, hi))
            })
            .collect();
        let mut lay = self.measure(&lengths, &first)?;
        // A pass result holds a record per line: keep no more than two.
        drop(first);
        // 1b: everything out of range in the shortest layout grows, in
        // order. Offsets stay those of the shortest layout, except that a
        // label sees the new length of the line just before it (yasm
        // measures a label as the end of its preceding bytecode).
        let preceding = preceding_lines(self.lines, &self.names);
        let mut symbols = lay.symbols.clone();
        for &i in &relaxable {
            let len = lengths.get(i).copied().unwrap_or(0);
            let Some(w) = self.wants_with(i, &lay, &symbols, len) else {
                continue;
            };
            if let Some(l) = lengths.get_mut(i) {
                *l = w;
            }
            let count = lay.emitted.get(i).map_or(1, |e| e.count);
            let delta = ((w - len) as u64).saturating_mul(count);
            for &id in preceding.get(&i).into_iter().flatten() {
                if let Some(Some(Sym::Loc { offset, .. })) = symbols.get_mut(id) {
                    *offset = offset.wrapping_add(delta);
                }
            }
        }
        lay = self.measure(&lengths, &lay)?;
        // 1d and 2: a queue, one growth at a time.
        let mut queued = vec![false; self.lines.len()];
        let mut queue = std::collections::VecDeque::new();
        for &i in &relaxable {
            if self
                .wants(i, &lay, lengths.get(i).copied().unwrap_or(0))
                .is_some()
            {
                queue.push_back(i);
                if let Some(q) = queued.get_mut(i) {
                    *q = true;
                }
            }
        }
        let mut steps = 0usize;
        while let Some(i) = queue.pop_front() {
            steps += 1;
            if steps > 4 * relaxable.len() + 16 {
                return None;
            }
            if let Some(q) = queued.get_mut(i) {
                *q = false;
            }
            let Some(w) = self.wants(i, &lay, lengths.get(i).copied().unwrap_or(0)) else {
                continue;
            };
            if let Some(l) = lengths.get_mut(i) {
                *l = w;
            }
            let next = self.measure(&lengths, &lay)?;
            // Only lines whose range holds a line that changed length (this
            // one, or alignment after it) can have new values.
            let changed: Vec<usize> = next
                .emitted
                .iter()
                .zip(&lay.emitted)
                .enumerate()
                .filter(|(_, (a, b))| a.bytes.len() != b.bytes.len() || a.section != b.section)
                .map(|(k, _)| k)
                .collect();
            let moved = next
                .sections
                .iter()
                .map(|s| s.vma)
                .ne(lay.sections.iter().map(|s| s.vma));
            lay = next;
            for &j in &relaxable {
                let (lo, hi) = ranges.get(&j).copied().unwrap_or((0, usize::MAX));
                let touched = moved || changed.iter().any(|&c| lo <= c && c <= hi);
                if touched
                    && queued.get(j) == Some(&false)
                    && self
                        .wants(j, &lay, lengths.get(j).copied().unwrap_or(0))
                        .is_some()
                {
                    queue.push_back(j);
                    if let Some(q) = queued.get_mut(j) {
                        *q = true;
                    }
                }
            }
        }
        self.floors = lengths;
        Some(lay)
    }
}

fn finish(fin: PassResult, names: &Names, file: &str) -> Result<Layout, AsmError> {
    let org = fin.org;
    // File image: every section with bytes, at its load address minus org.
    let mut image_len = 0u64;
    for s in fin.sections.iter().filter(|s| !s.nobits && s.size > 0) {
        let off = s.lma.checked_sub(org).ok_or_else(|| {
            err(
                file,
                0,
                format!("section `{}' starts before the origin", s.name),
            )
        })?;
        image_len = image_len.max(off.saturating_add(s.size));
    }
    if image_len > MAX_OUTPUT {
        return Err(err(file, 0, "output file too large"));
    }
    let live: Vec<&Section> = fin
        .sections
        .iter()
        .filter(|s| !s.nobits && s.size > 0)
        .collect();
    for (i, a) in live.iter().enumerate() {
        for b in live.iter().skip(i + 1) {
            if a.lma < b.lma.saturating_add(b.size) && b.lma < a.lma.saturating_add(a.size) {
                return Err(err(
                    file,
                    0,
                    format!("sections `{}' and `{}' overlap", a.name, b.name),
                ));
            }
        }
    }
    let mut bytes = vec![0u8; image_len as usize];
    let mut lines = Vec::with_capacity(fin.emitted.len());
    for (e, number) in fin.emitted.iter().zip(1..) {
        let s = fin
            .sections
            .get(e.section)
            .ok_or_else(|| err(file, number, "internal: no section"))?;
        let file_off = s.lma.wrapping_add(e.offset).wrapping_sub(org);
        if !s.nobits && !e.bytes.is_empty() {
            let dst = bytes
                .get_mut(file_off as usize..file_off as usize + e.bytes.len())
                .ok_or_else(|| err(file, number, "internal: line outside the image"))?;
            dst.copy_from_slice(&e.bytes);
        }
        lines.push(LineInfo {
            line: number,
            addr: e.addr,
            offset: file_off,
            len: e.bytes.len(),
        });
    }
    let mut labels: BTreeMap<String, u64> = BTreeMap::new();
    for (name, sym) in names.names.iter().zip(&fin.symbols) {
        let Some(sym) = *sym else { continue };
        match sym {
            Sym::Loc { section, offset } => {
                let base = fin.sections.get(section).map_or(0, |s| s.vma);
                labels.insert(name.to_string(), base.wrapping_add(offset));
            }
            Sym::Equ(v, true) => {
                labels.insert(name.to_string(), v as u64);
            }
            Sym::Equ(_, false) => {}
        }
    }
    labels.insert("org".into(), org);
    let mut sections = Vec::new();
    for s in &fin.sections {
        if let Some(v) = s.vstart {
            labels.insert(format!("section_{}_vstart", s.name), v);
        }
        if let Some(v) = s.start {
            labels.insert(format!("section_{}_start", s.name), v);
        }
        labels.insert(format!("section_{}_length", s.name), s.size);
        sections.push(SectionInfo {
            name: s.name.clone(),
            vstart: s.vma,
            offset: s.lma.wrapping_sub(org),
            size: s.size,
        });
    }
    Ok(Layout {
        bytes,
        org,
        labels,
        sections,
        lines,
        emitted: fin.emitted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nop_fill_matches_yasm() {
        assert_eq!(nop_fill(64, 3).as_slice(), [0x0f, 0x1f, 0x00]);
        assert_eq!(nop_fill(32, 2).as_slice(), [0x66, 0x90]);
        assert_eq!(nop_fill(16, 2).as_slice(), [0x89, 0xf6]);
        // 250 bytes: sixteen 15-byte NOPs and a 10-byte one.
        let f = nop_fill(64, 250);
        assert_eq!(f.len(), 250);
        assert_eq!(
            f.get(..7),
            Some(&[0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x2e][..])
        );
        assert_eq!(f.get(240..243), Some(&[0x66, 0x2e, 0x0f][..]));
    }

    fn work(source: &str) -> Work {
        let mut parser = super::super::parse::Parser::new();
        let lines: Vec<Line> = source
            .lines()
            .zip(1..)
            .map(|(t, n)| parser.parse_line(n, t).unwrap())
            .collect();
        layout_counted(&lines, "t.asm").unwrap().1
    }

    /// Layout costs a fixed number of passes however long the file, and a
    /// branch is matched against its forms once per distance, not once per
    /// line and pass: time grows with the lines, not faster.
    #[test]
    fn work_grows_with_the_lines_only() {
        let chain = |n: usize, ahead: usize| {
            let mut s = String::from("org 0x1000\nbits 64\n");
            for i in 0..n {
                s.push_str(&format!("l{i}: jmp l{}\nnop\n", (i + ahead).min(n - 1)));
            }
            s
        };
        for ahead in [1, 100] {
            let small = work(&chain(2_000, ahead));
            let large = work(&chain(20_000, ahead));
            assert_eq!(small.passes, large.passes, "ahead {ahead}");
            assert!(large.passes <= 12, "{large:?}");
            // One distance (plus the near forms near the end): a few forms.
            assert!(large.chosen <= small.chosen + 8, "{small:?} {large:?}");
        }
    }

    #[test]
    fn align_up_rounds() {
        assert_eq!(align_up(5, 4), 8);
        assert_eq!(align_up(8, 4), 8);
        assert_eq!(align_up(7, 1), 7);
    }
}
