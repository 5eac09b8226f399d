//! Function symbols of the code files a recording mapped, found the way perf
//! finds them (tools/perf/util/symbol-elf.c), so that `sym+off (dso)` reads as
//! perf prints it.
//!
//! perf's rules, kept here because they decide which name an address gets:
//! * the symbols come from `.symtab`, else `.dynsym`: named functions
//!   (`STT_FUNC`) and untyped labels in code sections;
//! * an `ET_EXEC` file's symbols are moved to file offsets (its segments'
//!   `p_vaddr - p_offset`), a shared object's are kept as they are; an address
//!   is looked up as `ip - map start + map pgoff`;
//! * a symbol of size 0 reaches the next symbol (the last one the next page but
//!   one); of several symbols at one address one is kept (sized over unsized, not
//!   weak over weak, global over local, fewer leading underscores, longer name);
//! * `.plt` entries are named `name@plt` from `.rela.plt`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use object::elf;
use object::read::elf::{ElfFile64, FileHeader, ProgramHeader, SectionHeader, Sym};
use object::{Endianness, ReadRef};

/// One symbol: `[start, end)` in the file's symbol space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// Start (see the module docs for the address space).
    pub start: u64,
    /// End (exclusive, or equal to `start` for a point).
    pub end: u64,
    /// The name.
    pub name: String,
    binding: u8,
}

/// The symbols of one file, sorted by start.
#[derive(Clone, Debug, Default)]
pub struct SymbolTable {
    syms: Vec<Symbol>,
    /// `.plt` entries: perf inserts them after the others into its tree, below
    /// them, so a symbol of the table that covers an entry (`_init` stretched to
    /// the next symbol) is found first.
    plt: Vec<Symbol>,
}

impl SymbolTable {
    /// The symbol holding `addr` (perf's `symbols__find`).
    pub fn find(&self, addr: u64) -> Option<&Symbol> {
        Self::find_in(&self.syms, addr).or_else(|| Self::find_in(&self.plt, addr))
    }

    fn find_in(syms: &[Symbol], addr: u64) -> Option<&Symbol> {
        let i = syms.partition_point(|s| s.start <= addr);
        // perf's tree search finds the last symbol starting at or before the address
        // if it covers it; a point symbol covers its own address.
        let mut j = i;
        while j > 0 {
            j -= 1;
            let s = &syms[j];
            if addr < s.end || (addr == s.end && s.start == s.end) {
                return Some(s);
            }
            if s.start != syms[i - 1].start {
                break;
            }
        }
        None
    }

    /// How many symbols.
    pub fn len(&self) -> usize {
        self.syms.len() + self.plt.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The symbols of the ELF file `data` (an empty table if it is no ELF file).
    pub fn from_elf(data: &[u8]) -> Self {
        match ElfFile64::<Endianness>::parse(data) {
            Ok(f) => {
                let mut t = Self::load_syms(f.elf_header(), f.endian(), data).unwrap_or_default();
                t.add_plt(f.elf_header(), f.endian(), data);
                t
            }
            Err(_) => SymbolTable::default(),
        }
    }

    fn load_syms(hdr: &elf::FileHeader64<Endianness>, e: Endianness, data: &[u8]) -> Option<Self> {
        let sections = hdr.sections(e, data).ok()?;
        let exec = hdr.e_type(e) == elf::ET_EXEC;
        let phdrs = hdr.program_headers(e, data).ok()?;
        let mut symtab = sections.symbols(e, data, elf::SHT_SYMTAB).ok()?;
        if symtab.is_empty() {
            symtab = sections.symbols(e, data, elf::SHT_DYNSYM).ok()?;
        }
        let mut syms = Vec::new();
        for sym in symtab.iter() {
            let st_type = sym.st_type();
            let shndx = sym.st_shndx(e);
            if sym.st_name(e) == 0 || shndx == elf::SHN_UNDEF {
                continue;
            }
            let is_func = st_type == elf::STT_FUNC || st_type == elf::STT_GNU_IFUNC;
            let vis = sym.st_other() & 3;
            let is_label = st_type == elf::STT_NOTYPE
                && shndx != elf::SHN_ABS
                && vis != elf::STV_HIDDEN
                && vis != elf::STV_INTERNAL;
            if !is_func && !is_label {
                continue;
            }
            if is_label {
                let Ok(sec) = sections.section(object::SectionIndex(usize::from(shndx))) else {
                    continue;
                };
                if sec.sh_flags(e) & u64::from(elf::SHF_EXECINSTR) == 0 {
                    continue;
                }
            }
            let mut value = sym.st_value(e);
            if exec {
                let ph = phdrs.iter().find(|p| {
                    p.p_type(e) == elf::PT_LOAD
                        && value >= p.p_vaddr(e)
                        && value < p.p_vaddr(e).wrapping_add(p.p_memsz(e))
                });
                let Some(ph) = ph else { continue };
                value = value.wrapping_sub(ph.p_vaddr(e).wrapping_sub(ph.p_offset(e)));
            }
            let Ok(name) = symtab.symbol_name(e, sym) else {
                continue;
            };
            let size = sym.st_size(e);
            syms.push(Symbol {
                start: value,
                end: value.wrapping_add(size),
                name: String::from_utf8_lossy(name).into_owned(),
                binding: sym.st_bind(),
            });
        }
        // Sorted by start, ties in table order (perf's tree puts equal keys right).
        syms.sort_by_key(|s| s.start);
        fixup_end(&mut syms);
        Some(SymbolTable {
            syms: fixup_duplicate(syms),
            plt: Vec::new(),
        })
    }

    /// Adds `.plt` symbols from the runtime file.
    fn add_plt(&mut self, hdr: &elf::FileHeader64<Endianness>, e: Endianness, data: &[u8]) {
        self.plt = plt_symbols(hdr, e, data).unwrap_or_default();
        self.plt.sort_by_key(|s| s.start);
    }
}

/// perf's `symbols__fixup_end`.
fn fixup_end(syms: &mut [Symbol]) {
    for i in 1..syms.len() {
        if syms[i - 1].end == syms[i - 1].start {
            syms[i - 1].end = syms[i].start;
        }
    }
    if let Some(last) = syms.last_mut() {
        if last.end == last.start {
            last.end = (last.start.div_ceil(4096) * 4096).wrapping_add(4096);
        }
    }
}

fn underscores(s: &str) -> usize {
    s.bytes().take_while(|&b| b == b'_').count()
}

/// perf's `choose_best_symbol`: whether `a` wins over `b`.
fn a_is_best(a: &Symbol, b: &Symbol) -> bool {
    let (la, lb) = (a.end - a.start, b.end - b.start);
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
    let (ua, ub) = (underscores(&a.name), underscores(&b.name));
    if ua != ub {
        return ua < ub;
    }
    a.name.len() >= b.name.len()
}

/// perf's `symbols__fixup_duplicate`.
fn fixup_duplicate(syms: Vec<Symbol>) -> Vec<Symbol> {
    let mut out: Vec<Symbol> = Vec::with_capacity(syms.len());
    for s in syms {
        match out.last_mut() {
            Some(cur) if cur.start == s.start => {
                if !a_is_best(cur, &s) {
                    *cur = s;
                }
            }
            _ => out.push(s),
        }
    }
    out
}

/// perf's `dso__synthesize_plt_symbols`: `name@plt` for each `.rela.plt` entry, at
/// `.plt`'s file offset past its header.
fn plt_symbols(
    hdr: &elf::FileHeader64<Endianness>,
    e: Endianness,
    data: &[u8],
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
        out.push(Symbol {
            start: off,
            end: off.wrapping_add(entsize),
            name: format!("{}@plt", String::from_utf8_lossy(name)),
            binding: elf::STB_GLOBAL,
        });
        off = off.wrapping_add(entsize);
    }
    Some(out)
}

/// A file's bytes, mapped.
fn map(path: &Path) -> Option<memmap2::Mmap> {
    let f = std::fs::File::open(path).ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    // SAFETY: the file is only read; a file changed under us gives wrong symbols,
    // and `object` checks every offset it reads.
    unsafe { memmap2::Mmap::map(&f) }.ok()
}

/// Whether an ELF file has a `.symtab` with contents (not a stripped one's).
fn has_symtab(data: &[u8]) -> bool {
    let Ok(f) = ElfFile64::<Endianness>::parse(data) else {
        return false;
    };
    let (hdr, e) = (f.elf_header(), f.endian());
    hdr.sections(e, data).is_ok_and(|secs| {
        secs.iter()
            .any(|s| s.sh_type(e) == elf::SHT_SYMTAB && s.sh_size(e) > 0)
    })
}

/// The `.gnu_debuglink` file name of an ELF file.
fn debuglink(data: &[u8]) -> Option<String> {
    let f = ElfFile64::<Endianness>::parse(data).ok()?;
    let (hdr, e) = (f.elf_header(), f.endian());
    let secs = hdr.sections(e, data).ok()?;
    let s = secs
        .iter()
        .find(|s| secs.section_name(e, s).ok() == Some(b".gnu_debuglink"))?;
    let bytes = s.data(e, data).ok()?;
    let n = bytes.iter().position(|&b| b == 0)?;
    Some(String::from_utf8_lossy(&bytes[..n]).into_owned())
}

/// Where perf looks for the symbols of the file recorded as `name` (found at
/// `path`), in perf's order (`dso__load`'s binary types): the debuglink file, the
/// build-id cache's debug file, Fedora's and Ubuntu's debug directories, the
/// build-id debug directory, and the file itself.
fn candidates(path: &Path, name: &str, build_id: Option<&[u8]>) -> Vec<PathBuf> {
    let mut v = Vec::new();
    let data = map(path);
    // perf reads the build id from the file when the recording names none.
    let own_id: Option<Vec<u8>> = data.as_deref().and_then(|d| {
        use object::Object;
        object::File::parse(d)
            .ok()?
            .build_id()
            .ok()?
            .map(<[u8]>::to_vec)
    });
    let build_id = build_id.or(own_id.as_deref());
    if let Some(link) = data.as_deref().and_then(debuglink) {
        let dir = Path::new(name).parent().unwrap_or(Path::new("/"));
        v.push(PathBuf::from(&link));
        v.push(dir.join(&link));
        v.push(dir.join(".debug").join(&link));
        v.push(PathBuf::from(format!(
            "/usr/lib/debug{}/{link}",
            dir.display()
        )));
    }
    let hex: Option<String> =
        build_id.map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>());
    if let Some(h) = hex.as_deref().filter(|h| h.len() > 2) {
        if let Some(home) = std::env::var_os("HOME") {
            v.push(
                Path::new(&home)
                    .join(".debug/.build-id")
                    .join(&h[..2])
                    .join(&h[2..])
                    .join("debug"),
            );
        }
    }
    v.push(PathBuf::from(format!("/usr/lib/debug{name}.debug")));
    v.push(PathBuf::from(format!("/usr/lib/debug{name}")));
    if let Some(h) = hex.as_deref().filter(|h| h.len() > 2) {
        v.push(PathBuf::from(format!(
            "/usr/lib/debug/.build-id/{}/{}.debug",
            &h[..2],
            &h[2..]
        )));
    }
    v.push(path.to_path_buf());
    v
}

/// Symbol tables by file, loaded once.
#[derive(Default)]
pub struct Symbols {
    files: HashMap<PathBuf, SymbolTable>,
}

impl Symbols {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The symbols of the file at `path` only (empty if it cannot be read).
    pub fn of(&mut self, path: &Path) -> &SymbolTable {
        self.files.entry(path.to_path_buf()).or_insert_with(|| {
            map(path)
                .map(|m| SymbolTable::from_elf(&m))
                .unwrap_or_default()
        })
    }

    /// The symbols of the code recorded as `name` and found at `path`, from the
    /// first file perf would take them from (see [`candidates`]), with `.plt`
    /// entries named from the file itself.
    pub fn of_dso(&mut self, path: &Path, name: &str, build_id: Option<&[u8]>) -> &SymbolTable {
        self.files.entry(path.to_path_buf()).or_insert_with(|| {
            let runtime = map(path);
            for c in candidates(path, name, build_id) {
                let Some(m) = map(&c) else { continue };
                if !has_symtab(&m) {
                    continue;
                }
                let mut t = match ElfFile64::<Endianness>::parse(&*m) {
                    Ok(f) => {
                        SymbolTable::load_syms(f.elf_header(), f.endian(), &m).unwrap_or_default()
                    }
                    Err(_) => continue,
                };
                if let Some(r) = runtime.as_deref() {
                    if let Ok(f) = ElfFile64::<Endianness>::parse(r) {
                        t.add_plt(f.elf_header(), f.endian(), r);
                    }
                }
                return t;
            }
            runtime
                .map(|m| SymbolTable::from_elf(&m))
                .unwrap_or_default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(start: u64, end: u64, name: &str, binding: u8) -> Symbol {
        Symbol {
            start,
            end,
            name: name.into(),
            binding,
        }
    }

    #[test]
    fn sizes_and_duplicates() {
        let mut v = vec![
            sym(0x10, 0x10, "a", elf::STB_GLOBAL),
            sym(0x20, 0x30, "_b", elf::STB_GLOBAL),
            sym(0x20, 0x30, "b", elf::STB_WEAK),
            sym(0x20, 0x30, "bb", elf::STB_GLOBAL),
            sym(0x40, 0x40, "c", elf::STB_LOCAL),
        ];
        fixup_end(&mut v);
        let t = SymbolTable {
            syms: fixup_duplicate(v),
            plt: Vec::new(),
        };
        assert_eq!(t.find(0x18).unwrap().name, "a");
        assert_eq!(t.find(0x25).unwrap().name, "bb");
        assert!(t.find(0x35).is_none());
        assert_eq!(t.find(0x1fff).unwrap().name, "c");
    }
}
