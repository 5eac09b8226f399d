//! Function symbols of the code files a recording mapped, found the way perf
//! finds them (tools/perf/util/symbol-elf.c), so that `sym+off (dso)` reads as
//! perf prints it.
//!
//! perf's rules, kept here because they decide which name an address gets:
//! * the symbols come from `.symtab`, else `.dynsym`: named functions, objects
//!   and untyped labels in `text`/`data` sections (objects too, because they
//!   stretch zero-sized neighbours and shape the tree below);
//! * they are moved to file offsets (the `p_vaddr - p_offset` of the runtime
//!   file's segment holding them); an address is looked up as
//!   `ip - map start + map pgoff`;
//! * a symbol of size 0 reaches the next symbol (the last one the next page but
//!   one); of several symbols at one address one is kept (sized over unsized, not
//!   weak over weak, global over local, fewer leading underscores, longer name);
//! * an address gets the symbol perf's red-black tree search finds (module `tree`):
//!   where symbols overlap (a stretched `_init` over the `.plt` entries) that is
//!   not always the symbol that covers it, and sometimes none;
//! * `.plt` entries are named `name@plt` from `.rela.plt` (an IRELATIVE entry,
//!   which names no symbol, is perf 6.1's bare `@plt`);
//! * names are demangled as perf demangles them ([`crate::demangle`]) unless
//!   [`SymbolOptions::demangle`] is off (perf's `--no-demangle`), before the
//!   duplicates are chosen (perf compares the demangled names).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use object::elf;
use object::read::elf::{ElfFile64, FileHeader, SectionHeader, Sym};
use object::{Endianness, ReadRef};

use crate::bias::LoadSegment;
use crate::debug_file::DebugSearch;

pub mod tree;

/// One symbol: `[start, end)` in the file's symbol space.
///
/// Its name is demangled on first use ([`Symbol::name`]): a library has
/// thousands of mangled names and a trace meets few of them, and demangling
/// them all when the table loads cost more than decoding a small trace.
#[derive(Clone, Debug)]
pub struct Symbol {
    /// Start (see the module docs for the address space).
    pub start: u64,
    /// End (exclusive, or equal to `start` for a point).
    pub end: u64,
    /// The name as the file has it (a `.plt` entry's with `@plt`).
    raw: Box<str>,
    /// How [`Self::name`] makes the name (demangle: `Some(suffix)`, the
    /// suffix, `@plt` or none, kept after the demangled part).
    demangle: Option<&'static str>,
    /// The demangled name, once made.
    demangled: std::cell::OnceCell<Box<str>>,
    binding: u8,
}

impl PartialEq for Symbol {
    fn eq(&self, o: &Self) -> bool {
        (self.start, self.end, self.name(), self.binding) == (o.start, o.end, o.name(), o.binding)
    }
}

impl Eq for Symbol {}

impl Symbol {
    /// A symbol of `[start, end)` named `name` as it is, with ELF binding
    /// `binding` (`STB_*`).
    pub fn new(start: u64, end: u64, name: impl Into<String>, binding: u8) -> Self {
        Symbol {
            start,
            end,
            raw: name.into().into_boxed_str(),
            demangle: None,
            demangled: std::cell::OnceCell::new(),
            binding,
        }
    }

    /// A symbol of the file's name `raw` (with `suffix` after it, `@plt` or
    /// ""), demangled on first use if `demangle`.
    fn of_file(
        start: u64,
        end: u64,
        raw: &[u8],
        suffix: &'static str,
        demangle: bool,
        binding: u8,
    ) -> Self {
        let base = String::from_utf8_lossy(raw);
        let mangled = demangle && (base.starts_with("_Z") || base.starts_with("_R"));
        let mut name = base.into_owned();
        name.push_str(suffix);
        Symbol {
            start,
            end,
            raw: name.into_boxed_str(),
            demangle: mangled.then_some(suffix),
            demangled: std::cell::OnceCell::new(),
            binding,
        }
    }

    /// The name perf prints: demangled (unless the table was loaded without),
    /// `@plt` after a `.plt` entry's.
    pub fn name(&self) -> &str {
        let Some(suffix) = self.demangle else {
            return &self.raw;
        };
        self.demangled.get_or_init(|| {
            let base = &self.raw[..self.raw.len() - suffix.len()];
            match crate::demangle::demangle(base) {
                Some(d) => format!("{d}{suffix}").into_boxed_str(),
                None => self.raw.clone(),
            }
        })
    }

    /// Its ELF binding (`STB_LOCAL`, `STB_GLOBAL`, `STB_WEAK`, …).
    pub fn binding(&self) -> u8 {
        self.binding
    }
}

/// A symbol's index in its [`SymbolTable`] ([`SymbolTable::symbol`]).
pub type SymbolId = u32;

/// What [`SymbolTable::lookup`] finds: the symbol (if any) and the stretch of
/// addresses around the one looked up that get the same answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lookup {
    /// The symbol perf names the address with.
    pub sym: Option<SymbolId>,
    /// First address with this answer.
    pub start: u64,
    /// One past the last (`u64::MAX`: up to the top).
    pub end: u64,
}

/// No symbol (in [`SymbolTable`]'s spans).
const NO_SYM: u32 = u32::MAX;

/// The symbols of one file, and perf's answer for every address.
#[derive(Clone, Debug, Default)]
pub struct SymbolTable {
    /// Every symbol read, by id (insertion order into perf's tree); duplicates
    /// perf drops stay here but are never an answer.
    syms: Vec<Symbol>,
    /// How many are kept.
    kept: usize,
    /// Whether each of `syms` is kept.
    live: Vec<bool>,
    /// perf's lookup result as a step function: from each start (ascending) up to
    /// the next, the symbol perf's tree search finds ([`NO_SYM`]: none).
    spans: Vec<(u64, u32)>,
}

impl SymbolTable {
    /// perf's symbols of a file: `syms` in the order of its symbol table, then the
    /// `.plt` entries synthesized from the runtime file. As perf's `dso__load`:
    /// the symbols go into its tree, zero sizes are stretched to the next symbol
    /// (`symbols__fixup_end`), duplicates dropped (`symbols__fixup_duplicate`),
    /// then the `.plt` entries are inserted, and lookups walk that tree.
    pub fn build(syms: Vec<Symbol>, plt: Vec<Symbol>) -> Self {
        let mut t = tree::Tree::new();
        let mut all = syms;
        for s in &all {
            t.insert(s.start, s.end);
        }
        let order = t.in_order();
        // symbols__fixup_end, over the symbols in tree order.
        for w in order.windows(2) {
            let (p, c) = (w[0] as usize, w[1] as usize);
            if all[p].end == all[p].start {
                all[p].end = all[c].start;
                t.set_end(p as u32, all[p].end);
            }
        }
        if let Some(&l) = order.last() {
            let last = &mut all[l as usize];
            if last.end == last.start {
                last.end = (last.start.div_ceil(4096) * 4096).wrapping_add(4096);
                t.set_end(l, last.end);
            }
        }
        // symbols__fixup_duplicate: erasing in the order perf's walk does.
        let mut i = 0;
        let mut dropped = 0;
        while i < order.len() {
            let cur = order[i];
            let mut j = i + 1;
            let mut keep = cur;
            while j < order.len() && all[order[j] as usize].start == all[keep as usize].start {
                let next = order[j];
                if a_is_best(&all[keep as usize], &all[next as usize]) {
                    t.erase(next);
                } else {
                    t.erase(keep);
                    keep = next;
                }
                dropped += 1;
                j += 1;
            }
            i = j;
        }
        // perf synthesizes them only when the file had symbols.
        let plt = if all.is_empty() { Vec::new() } else { plt };
        for s in plt {
            t.insert(s.start, s.end);
            all.push(s);
        }
        // The answer changes only where a comparison of the search does: at a
        // start, an end, and past a point symbol.
        let mut cuts: Vec<u64> = vec![0];
        for (id, s) in all.iter().enumerate() {
            if t.is_erased(id as u32) {
                continue;
            }
            cuts.push(s.start);
            if s.end == s.start {
                cuts.push(s.start.wrapping_add(1));
            } else {
                cuts.push(s.end);
            }
        }
        cuts.sort_unstable();
        cuts.dedup();
        let mut spans: Vec<(u64, u32)> = Vec::with_capacity(cuts.len());
        for c in cuts {
            let sym = t.find(c).unwrap_or(NO_SYM);
            if spans.last().map_or(true, |&(_, s)| s != sym) {
                spans.push((c, sym));
            }
        }
        let kept = all.len() - dropped;
        let live = (0..all.len()).map(|i| !t.is_erased(i as u32)).collect();
        SymbolTable {
            syms: all,
            kept,
            live,
            spans,
        }
    }

    /// The symbol holding `addr` (perf's `symbols__find`).
    pub fn find(&self, addr: u64) -> Option<&Symbol> {
        self.lookup(addr).sym.map(|i| &self.syms[i as usize])
    }

    /// perf's symbol for `addr` and the addresses around it with the same one.
    pub fn lookup(&self, addr: u64) -> Lookup {
        let i = self.spans.partition_point(|&(s, _)| s <= addr);
        // The spans start at 0: `i` is at least 1 unless there are none.
        let Some(&(start, sym)) = i.checked_sub(1).and_then(|j| self.spans.get(j)) else {
            return Lookup {
                sym: None,
                start: 0,
                end: u64::MAX,
            };
        };
        Lookup {
            sym: (sym != NO_SYM).then_some(sym),
            start,
            end: self.spans.get(i).map_or(u64::MAX, |&(s, _)| s),
        }
    }

    /// perf's answers over `[lo, hi)`, in address order: each stretch that
    /// one symbol names, clipped to the range (stretches without a symbol
    /// left out). The stretches do not overlap, though symbols may.
    pub fn answers(&self, lo: u64, hi: u64) -> Vec<(u64, u64, &Symbol)> {
        let mut out = Vec::new();
        let first = self
            .spans
            .partition_point(|&(s, _)| s <= lo)
            .saturating_sub(1);
        for (i, &(start, sym)) in self.spans.iter().enumerate().skip(first) {
            if start >= hi {
                break;
            }
            let end = self.spans.get(i + 1).map_or(u64::MAX, |&(s, _)| s);
            let (a, b) = (start.max(lo), end.min(hi));
            if sym != NO_SYM && a < b {
                out.push((a, b, &self.syms[sym as usize]));
            }
        }
        out
    }

    /// Symbol `id` (of a [`Lookup`]).
    pub fn symbol(&self, id: SymbolId) -> &Symbol {
        &self.syms[id as usize]
    }

    /// How many symbols perf keeps.
    pub fn len(&self) -> usize {
        self.kept
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every symbol perf keeps, in the order they were read.
    pub fn iter(&self) -> impl Iterator<Item = &Symbol> + '_ {
        self.syms
            .iter()
            .zip(&self.live)
            .filter(|(_, &live)| live)
            .map(|(s, _)| s)
    }

    /// The symbols of the ELF file `data` (an empty table if it is no ELF
    /// file), named as `demangle` says.
    pub fn from_elf(data: &[u8], demangle: bool) -> Self {
        match ElfFile64::<Endianness>::parse(data) {
            Ok(f) => {
                let segs = LoadSegment::of(data);
                let syms = load_syms(f.elf_header(), f.endian(), data, &segs, demangle)
                    .unwrap_or_default();
                let plt =
                    plt_symbols(f.elf_header(), f.endian(), data, demangle).unwrap_or_default();
                Self::build(syms, plt)
            }
            Err(_) => SymbolTable::default(),
        }
    }
}

/// The symbols of a file as perf's `dso__load_sym` reads them, in table order:
/// functions, objects and labels (untyped, visible symbols in a section whose
/// name has `text` or `data`), of allocated sections, moved to file offsets by
/// the `PT_LOAD` segment of the runtime file (`segs`: its segments) holding
/// them, else by their section; demangled if `demangle`.
fn load_syms(
    hdr: &elf::FileHeader64<Endianness>,
    e: Endianness,
    data: &[u8],
    segs: &[LoadSegment],
    demangle: bool,
) -> Option<Vec<Symbol>> {
    let sections = hdr.sections(e, data).ok()?;
    let mut symtab = sections.symbols(e, data, elf::SHT_SYMTAB).ok()?;
    if symtab.is_empty() {
        symtab = sections.symbols(e, data, elf::SHT_DYNSYM).ok()?;
    }
    let mut syms = Vec::new();
    for sym in symtab.iter() {
        let st_type = sym.st_type();
        let shndx = sym.st_shndx(e);
        if sym.st_name(e) == 0 || shndx == elf::SHN_UNDEF || shndx == elf::SHN_ABS {
            continue;
        }
        let is_func = st_type == elf::STT_FUNC || st_type == elf::STT_GNU_IFUNC;
        let vis = sym.st_other() & 3;
        let is_label =
            st_type == elf::STT_NOTYPE && vis != elf::STV_HIDDEN && vis != elf::STV_INTERNAL;
        if !is_func && !is_label && st_type != elf::STT_OBJECT {
            continue;
        }
        let Ok(sec) = sections.section(object::SectionIndex(usize::from(shndx))) else {
            continue;
        };
        if sec.sh_flags(e) & u64::from(elf::SHF_ALLOC) == 0 {
            continue;
        }
        if is_label {
            let name = sections.section_name(e, sec).unwrap_or(b"");
            let has = |w: &[u8]| name.windows(w.len()).any(|x| x == w);
            if !has(b"text") && !has(b"data") {
                continue;
            }
        }
        let value = sym.st_value(e);
        let value = match LoadSegment::holding(segs, value) {
            Some(seg) => seg.file_offset(value),
            None => value.wrapping_sub(sec.sh_addr(e).wrapping_sub(sec.sh_offset(e))),
        };
        let Ok(name) = symtab.symbol_name(e, sym) else {
            continue;
        };
        let size = sym.st_size(e);
        let end = value.wrapping_add(size);
        syms.push(Symbol::of_file(
            value,
            end,
            name,
            "",
            demangle,
            sym.st_bind(),
        ));
    }
    Some(syms)
}

/// Whether two symbols' names demangle alike without demangling them (which
/// costs more than loading the table: a C++ library has thousands of aliases
/// at one address): the same raw name, or two Itanium names that differ only
/// in a constructor's or destructor's variant (`C1`/`C2`, `D1`/`D2`), which
/// the demangled name does not show. Names with `SyS` in them are left to the
/// full comparison.
fn same_demangled(a: &Symbol, b: &Symbol) -> bool {
    let (ra, rb) = (a.raw.as_bytes(), b.raw.as_bytes());
    if a.demangle != b.demangle || ra.len() != rb.len() || a.raw.contains("SyS") {
        return false;
    }
    if ra == rb {
        return true;
    }
    if a.demangle.is_none() || !a.raw.starts_with("_Z") {
        return false;
    }
    let mut diffs = (0..ra.len()).filter(|&i| ra[i] != rb[i]);
    let (Some(i), None) = (diffs.next(), diffs.next()) else {
        return false;
    };
    i > 0
        && matches!(ra[i - 1], b'C' | b'D')
        && matches!(ra[i], b'0'..=b'4')
        && matches!(rb[i], b'0'..=b'4')
        && matches!(ra.get(i + 1), Some(b'E' | b'I' | b'B'))
}

fn underscores(s: &str) -> usize {
    s.bytes().take_while(|&b| b == b'_').count()
}

/// perf's `choose_best_symbol`: whether `a` wins over `b`.
fn a_is_best(a: &Symbol, b: &Symbol) -> bool {
    // perf compares the lengths as signed numbers.
    let la = a.end.wrapping_sub(a.start) as i64;
    let lb = b.end.wrapping_sub(b.start) as i64;
    if lb == 0 && la > 0 {
        return true;
    }
    if la == 0 && lb > 0 {
        return false;
    }
    let (wa, wb) = (a.binding == elf::STB_WEAK, b.binding == elf::STB_WEAK);
    if wb && !wa {
        return true;
    }
    if wa && !wb {
        return false;
    }
    let (ga, gb) = (a.binding == elf::STB_GLOBAL, b.binding == elf::STB_GLOBAL);
    if ga && !gb {
        return true;
    }
    if gb && !ga {
        return false;
    }
    if same_demangled(a, b) {
        // Equal names: the rules below end in the syscall-alias test, which
        // no such name meets (`same_demangled` leaves those out).
        return true;
    }
    let (na, nb) = (a.name(), b.name());
    let (ua, ub) = (underscores(na), underscores(nb));
    if ua != ub {
        return ua < ub;
    }
    if na.len() != nb.len() {
        return na.len() > nb.len();
    }
    // perf's x86 tie-break: not a kernel syscall alias.
    !(na.starts_with("SyS") || na.starts_with("compat_SyS"))
}

/// perf's `dso__synthesize_plt_symbols`: `name@plt` for each `.rela.plt` entry, at
/// `.plt`'s file offset past its header (the name demangled if `demangle`).
fn plt_symbols(
    hdr: &elf::FileHeader64<Endianness>,
    e: Endianness,
    data: &[u8],
    demangle: bool,
) -> Option<Vec<Symbol>> {
    let sections = hdr.sections(e, data).ok()?;
    let by_name = |n: &[u8]| {
        sections
            .iter()
            .enumerate()
            .find(|(_, s)| sections.section_name(e, s).ok() == Some(n))
    };
    let (_, rela) = by_name(b".rela.plt")?;
    let dynsym_idx = sections
        .iter()
        .position(|s| s.sh_type(e) == elf::SHT_DYNSYM)?;
    if rela.sh_link(e) as usize != dynsym_idx {
        return None;
    }
    let (_, plt) = by_name(b".plt")?;
    let dynsyms = sections.symbols(e, data, elf::SHT_DYNSYM).ok()?;
    let entsize = plt.sh_entsize(e);
    let mut off = plt.sh_offset(e).wrapping_add(entsize);
    let relas: &[elf::Rela64<Endianness>] = data
        .read_slice_at(rela.sh_offset(e), (rela.sh_size(e) / 24).try_into().ok()?)
        .ok()?;
    let mut out = Vec::new();
    for r in relas {
        let idx = r.r_sym(e, false);
        let name = dynsyms
            .symbol(object::SymbolIndex(idx as usize))
            .ok()
            .and_then(|s| dynsyms.symbol_name(e, s).ok())
            .unwrap_or(b"");
        let end = off.wrapping_add(entsize);
        out.push(Symbol::of_file(
            off,
            end,
            name,
            "@plt",
            demangle,
            elf::STB_GLOBAL,
        ));
        off = off.wrapping_add(entsize);
    }
    Some(out)
}

/// Whether an ELF file has a `.symtab` with contents (not a stripped one's).
pub(crate) fn has_symtab(data: &[u8]) -> bool {
    let Ok(f) = ElfFile64::<Endianness>::parse(data) else {
        return false;
    };
    let (hdr, e) = (f.elf_header(), f.endian());
    hdr.sections(e, data).is_ok_and(|secs| {
        secs.iter()
            .any(|s| s.sh_type(e) == elf::SHT_SYMTAB && s.sh_size(e) > 0)
    })
}

/// How [`Symbols`] loads tables.
#[derive(Clone, Debug)]
pub struct SymbolOptions {
    /// Demangle names as perf does (perf's default; `--no-demangle` turns it off).
    pub demangle: bool,
    /// Where debug files are looked for (perf's `--symfs`).
    pub search: DebugSearch,
}

impl Default for SymbolOptions {
    fn default() -> Self {
        SymbolOptions {
            demangle: true,
            search: DebugSearch::default(),
        }
    }
}

/// Symbol tables by file, loaded once.
#[derive(Default)]
pub struct Symbols {
    options: SymbolOptions,
    files: HashMap<PathBuf, usize>,
    tables: Vec<SymbolTable>,
}

/// A table's number in its [`Symbols`] ([`Symbols::table`]).
pub type TableId = usize;

impl Symbols {
    /// An empty cache that loads tables as `options` say.
    pub fn new(options: SymbolOptions) -> Self {
        Symbols {
            options,
            ..Default::default()
        }
    }

    /// The options tables are loaded with.
    pub fn options(&self) -> &SymbolOptions {
        &self.options
    }

    fn load(&mut self, path: &Path, make: impl FnOnce() -> SymbolTable) -> TableId {
        if let Some(&i) = self.files.get(path) {
            return i;
        }
        self.tables.push(make());
        self.files.insert(path.to_path_buf(), self.tables.len() - 1);
        self.tables.len() - 1
    }

    /// The symbols of the file at `path` only (empty if it cannot be read).
    pub fn of(&mut self, path: &Path) -> &SymbolTable {
        let demangle = self.options.demangle;
        let i = self.load(path, || {
            crate::map_file(path)
                .map(|m| SymbolTable::from_elf(&m, demangle))
                .unwrap_or_default()
        });
        &self.tables[i]
    }

    /// The symbols of the code recorded as `name` and found at `path`, from the
    /// first file perf would take them from ([`DebugSearch::candidates`]), with `.plt`
    /// entries named from the file itself.
    pub fn of_dso(&mut self, path: &Path, name: &str, build_id: Option<&[u8]>) -> &SymbolTable {
        let i = self.dso_table(path, name, build_id);
        &self.tables[i]
    }

    /// [`Self::of_dso`]'s table, by number (to be kept and looked up with
    /// [`Self::table`]).
    pub fn dso_table(&mut self, path: &Path, name: &str, build_id: Option<&[u8]>) -> TableId {
        let demangle = self.options.demangle;
        let search = self.options.search.clone();
        self.load(path, || {
            let runtime = crate::map_file(path);
            // perf moves symbols by the runtime file's segments.
            let segs = runtime.as_deref().map(LoadSegment::of).unwrap_or_default();
            for c in search.candidates(Some(path), name, build_id) {
                let Some(m) = crate::map_file(&c) else {
                    continue;
                };
                if !has_symtab(&m) {
                    continue;
                }
                let syms = match ElfFile64::<Endianness>::parse(&*m) {
                    Ok(f) => load_syms(f.elf_header(), f.endian(), &m, &segs, demangle)
                        .unwrap_or_default(),
                    Err(_) => continue,
                };
                let plt = runtime
                    .as_deref()
                    .and_then(|r| {
                        let f = ElfFile64::<Endianness>::parse(r).ok()?;
                        plt_symbols(f.elf_header(), f.endian(), r, demangle)
                    })
                    .unwrap_or_default();
                return SymbolTable::build(syms, plt);
            }
            runtime
                .map(|m| SymbolTable::from_elf(&m, demangle))
                .unwrap_or_default()
        })
    }

    /// The kernel's symbols from the kallsyms list at `path`
    /// ([`crate::kallsyms`]; empty if it cannot be read).
    pub fn kallsyms_table(&mut self, path: &Path) -> TableId {
        self.load(path, || {
            std::fs::read_to_string(path)
                .map(|t| crate::kallsyms::parse(&t))
                .unwrap_or_default()
        })
    }

    /// Table `id`.
    pub fn table(&self, id: TableId) -> &SymbolTable {
        &self.tables[id]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(start: u64, end: u64, name: &str, binding: u8) -> Symbol {
        Symbol::new(start, end, name, binding)
    }

    #[test]
    fn ctor_variants_are_alike_without_demangling() {
        let of = |n: &str| Symbol::of_file(0, 8, n.as_bytes(), "", true, elf::STB_GLOBAL);
        let (c1, c2) = (
            of("_ZNSt14error_categoryC1Ev"),
            of("_ZNSt14error_categoryC2Ev"),
        );
        assert!(same_demangled(&c1, &c2));
        assert_eq!(c1.name(), c2.name());
        assert!(same_demangled(&of("_ZN1AD0Ev"), &of("_ZN1AD1Ev")));
        assert!(!same_demangled(&of("_Z4lvl1i"), &of("_Z4lvl2i")));
        assert!(!same_demangled(&of("_ZN3SySC1Ev"), &of("_ZN3SySC2Ev")));
    }

    #[test]
    fn sizes_and_duplicates() {
        let v = vec![
            sym(0x40, 0x40, "c", elf::STB_LOCAL),
            sym(0x20, 0x30, "_b", elf::STB_GLOBAL),
            sym(0x10, 0x10, "a", elf::STB_GLOBAL),
            sym(0x20, 0x30, "b", elf::STB_WEAK),
            sym(0x20, 0x30, "bb", elf::STB_GLOBAL),
        ];
        let t = SymbolTable::build(v, Vec::new());
        assert_eq!(t.len(), 3);
        assert_eq!(t.find(0x18).unwrap().name(), "a");
        assert_eq!(t.find(0x25).unwrap().name(), "bb");
        assert!(t.find(0x35).is_none());
        assert_eq!(t.find(0x1fff).unwrap().name(), "c");
        assert!(t.find(0x2000).is_none());
        let l = t.lookup(0x25);
        assert_eq!((l.start, l.end), (0x20, 0x30));
        assert_eq!(t.symbol(l.sym.unwrap()).name(), "bb");
        let l = t.lookup(0x35);
        assert_eq!((l.sym, l.start, l.end), (None, 0x30, 0x40));
        let a: Vec<(u64, u64, &str)> = t
            .answers(0x14, 0x45)
            .into_iter()
            .map(|(s, e, sym)| (s, e, sym.name()))
            .collect();
        assert_eq!(
            a,
            [(0x14, 0x20, "a"), (0x20, 0x30, "bb"), (0x40, 0x45, "c")]
        );
        assert_eq!(t.iter().count(), 3);
    }

    /// libm.so.6 (Debian 12): `_init` (size 0, at .init) is stretched over .plt
    /// and .plt.got to the first .text symbol; the .plt entries are inserted after.
    /// perf's search reaches the last .plt entry on its way to .plt.got's address,
    /// goes right past its end and finds nothing: `[unknown]`, not `_init+0x220`.
    #[test]
    fn stretched_init_over_plt_is_found_as_perf_finds_it() {
        let mut syms = vec![sym(0x10000, 0x10000, "_init", elf::STB_LOCAL)];
        for (i, n) in ["deregister_tm_clones", "register_tm_clones", "frame_dummy"]
            .iter()
            .enumerate()
        {
            syms.push(sym(
                0x10240 + 0x30 * i as u64,
                0x10240 + 0x30 * i as u64,
                n,
                1,
            ));
        }
        let plt: Vec<Symbol> = (0..31)
            .map(|i| {
                let s = 0x10030 + 0x10 * i;
                sym(s, s + 0x10, &format!("f{i}@plt"), elf::STB_GLOBAL)
            })
            .collect();
        let t = SymbolTable::build(syms, plt);
        assert_eq!(t.find(0x10010).unwrap().name(), "_init");
        assert_eq!(t.find(0x10035).unwrap().name(), "f0@plt");
        assert_eq!(t.find(0x10215).unwrap().name(), "f30@plt");
        assert!(t.find(0x10220).is_none());
        assert!(t.find(0x10228).is_none());
        assert_eq!(t.find(0x10240).unwrap().name(), "deregister_tm_clones");
    }

    /// The system's C++ library as perf 6.1 names it: `.plt` entries
    /// demangled then suffixed (`std::error_category::error_category@plt`);
    /// with demangling off, the mangled names.
    #[test]
    fn libstdcxx_plt_names_as_perf() {
        let lib = Path::new("/usr/lib/x86_64-linux-gnu/libstdc++.so.6");
        let data = std::fs::read(lib).expect("libstdc++ (Debian package libstdc++6)");
        let t = SymbolTable::from_elf(&data, true);
        let names: std::collections::HashSet<&str> = t.iter().map(|s| s.name()).collect();
        assert!(names.contains("std::error_category::error_category@plt"));
        assert!(names.contains("operator new"));
        let raw = SymbolTable::from_elf(&data, false);
        assert!(raw
            .iter()
            .any(|s| s.name() == "_ZNSt14error_categoryC2Ev@plt"));
        assert_eq!(raw.len(), t.len());
    }

    /// The C library's `strcmp` is an ifunc: perf names its resolver
    /// `strcmp`, as the C library's symbol table does; its IRELATIVE `.plt`
    /// entries (no symbol) are perf 6.1's bare `@plt`.
    #[test]
    fn ifunc_resolver_keeps_its_symbol_name() {
        let lib = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
        let data = std::fs::read(lib).expect("the C library");
        let f = ElfFile64::<Endianness>::parse(&*data).unwrap();
        let (hdr, e) = (f.elf_header(), f.endian());
        let secs = hdr.sections(e, &*data).unwrap();
        let dynsym = secs.symbols(e, &*data, elf::SHT_DYNSYM).unwrap();
        let strcmp = dynsym
            .iter()
            .find(|s| dynsym.symbol_name(e, s) == Ok(b"strcmp"))
            .unwrap();
        assert_eq!(strcmp.st_type(), elf::STT_GNU_IFUNC);
        let t = SymbolTable::from_elf(&data, true);
        let at = t
            .iter()
            .find(|s| s.name() == "strcmp")
            .expect("strcmp kept")
            .start;
        assert_eq!(t.find(at).unwrap().name(), "strcmp");
        assert!(t.iter().any(|s| s.name() == "@plt"));
    }

    /// The tests' seeded generator.
    fn rng(seed: &mut pt_testkit::Rng) -> u64 {
        seed.next()
    }

    #[test]
    fn tree_stays_balanced_through_inserts_and_erases() {
        let mut seed = pt_testkit::Rng::new(0x1234_5678_9abc_def1);
        for round in 0..200 {
            let mut t = tree::Tree::new();
            let n = 1 + round % 60;
            let mut live = Vec::new();
            for _ in 0..n {
                let k = rng(&mut seed) % 40;
                live.push(t.insert(k, k + 3));
                t.check();
            }
            while !live.is_empty() {
                let i = (rng(&mut seed) as usize) % live.len();
                t.erase(live.swap_remove(i));
                t.check();
                let order = t.in_order();
                assert_eq!(order.len(), live.len());
                assert!(order.windows(2).all(|w| t.range(w[0]).0 <= t.range(w[1]).0));
            }
        }
    }

    #[test]
    fn lookup_is_the_tree_search_at_every_address() {
        let mut seed = pt_testkit::Rng::new(0x0dd_c0ff_ee15_600d);
        for _ in 0..300 {
            let n = 1 + rng(&mut seed) % 25;
            let syms: Vec<Symbol> = (0..n)
                .map(|i| {
                    let s = rng(&mut seed) % 200;
                    let len = [0, 0, 1, 4, 16, 50][(rng(&mut seed) % 6) as usize];
                    sym(s, s + len, &format!("s{i}"), (rng(&mut seed) % 3) as u8)
                })
                .collect();
            let plt: Vec<Symbol> = (0..rng(&mut seed) % 6)
                .map(|i| sym(100 + 8 * i, 108 + 8 * i, &format!("p{i}@plt"), 1))
                .collect();
            // The tree as perf builds it, searched address by address.
            let t = SymbolTable::build(syms.clone(), plt.clone());
            let mut tr = tree::Tree::new();
            let mut all = syms;
            for s in &all {
                tr.insert(s.start, s.end);
            }
            let order = tr.in_order();
            for w in order.windows(2) {
                let (p, c) = (w[0] as usize, w[1] as usize);
                if all[p].end == all[p].start {
                    all[p].end = all[c].start;
                    tr.set_end(p as u32, all[p].end);
                }
            }
            let l = *order.last().unwrap() as usize;
            if all[l].end == all[l].start {
                all[l].end = all[l].start.div_ceil(4096) * 4096 + 4096;
                tr.set_end(l as u32, all[l].end);
            }
            let mut i = 0;
            while i < order.len() {
                let mut keep = order[i];
                let mut j = i + 1;
                while j < order.len() && all[order[j] as usize].start == all[keep as usize].start {
                    if a_is_best(&all[keep as usize], &all[order[j] as usize]) {
                        tr.erase(order[j]);
                    } else {
                        tr.erase(keep);
                        keep = order[j];
                    }
                    j += 1;
                }
                i = j;
            }
            for s in plt {
                tr.insert(s.start, s.end);
            }
            for a in 0..4200 {
                let want = tr.find(a);
                let got = t.lookup(a);
                assert_eq!(got.sym, want, "address {a}");
                assert!(got.start <= a && a < got.end);
            }
        }
    }
}
