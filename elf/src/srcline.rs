//! Source lines of code addresses, as perf 6.1 prints them (`perf script -F
//! srcline`, `perf report --sort srcline,srcfile`), from DWARF with gimli's
//! addr2line.
//!
//! perf 6.1 as Debian builds it (no libbfd) asks binutils' `addr2line -i -f` about
//! every address and keeps the first answer: the innermost (inlined) location.
//! What that answer is decides what perf prints, so this module follows binutils'
//! rules rather than only DWARF's:
//! * the address must lie in an allocated section of the file, else addr2line
//!   answers `??:0` and perf prints `short_name[address]` (the file's base name,
//!   the address in hex) — also for a file it cannot read, and for a dso whose
//!   name starts with `[` (`[vdso]`, the kernel);
//! * a line table row covering the address gives `file:line` (line 0 when the
//!   row has none), the file's base name unless `--full-source-path`;
//! * without one, binutils takes the nearest function symbol at or below the
//!   address in that section and, for the file, the `STT_FILE` symbol before it
//!   in the symbol table (only for local symbols once a file symbol followed
//!   another symbol): `libc-start.o:0`; with no such file `??:0`, which perf does
//!   not print; with no such symbol (and no DWARF function) `??:0` as above.
//!
//! Which file addr2line reads is perf's `symsrc_filename`: the first debug file
//! candidate with a symbol table ([`DebugSearch::symbol_file`]), else the
//! file as recorded. Addresses are perf's "objdump" addresses: the map-relative
//! address plus the runtime file's `.text` `sh_addr - sh_offset`.
//!
//! Every answer is cached per file and address: a long trace asks each address
//! once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::debug_file::DebugSearch;

use gimli::Reader as _;
use object::elf;
use object::read::elf::{ElfFile64, FileHeader, SectionHeader, Sym};
use object::{Endianness, Object, ObjectSection};

type Reader = gimli::EndianRcSlice<gimli::RunTimeEndian>;

/// What binutils' addr2line answers for one address (its first record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// `file:line` (line 0 for `?`): perf prints it.
    Line {
        /// The file as addr2line prints it (with its directories).
        file: Rc<str>,
        /// The line (0: unknown).
        line: u32,
    },
    /// Found, but no file (`??:?`): perf prints nothing.
    NoFile,
    /// Not found (`??:0`): perf prints `short_name[addr]`.
    NotFound,
}

/// The symbols binutils' `elf_find_function` looks at, by section.
struct FuncSyms {
    /// (section index, value, symbol-table order, size, is function, is typed,
    /// file name index), sorted by section, value, order.
    syms: Vec<FuncSym>,
    files: Vec<Rc<str>>,
}

#[derive(Clone, Copy)]
struct FuncSym {
    shndx: u32,
    value: u64,
    size: u64,
    function: bool,
    typed: bool,
    file: u32,
}

const NO_FILE: u32 = u32::MAX;

impl FuncSyms {
    /// The symbols of an ELF file: `.symtab`, else `.dynsym` (addr2line's
    /// `slurp_symtab`).
    fn of(hdr: &elf::FileHeader64<Endianness>, e: Endianness, data: &[u8]) -> Self {
        let mut out = FuncSyms {
            syms: Vec::new(),
            files: Vec::new(),
        };
        let Ok(secs) = hdr.sections(e, data) else {
            return out;
        };
        let table = match secs.symbols(e, data, elf::SHT_SYMTAB) {
            Ok(t) if t.len() > 1 => t,
            _ => match secs.symbols(e, data, elf::SHT_DYNSYM) {
                Ok(t) => t,
                Err(_) => return out,
            },
        };
        // binutils: the last file symbol seen, and whether a file symbol came
        // after some other symbol (then global symbols get no file).
        let mut file: Option<u32> = None;
        let (mut seen_sym, mut file_after_sym) = (false, false);
        for (i, s) in table.iter().enumerate() {
            if i == 0 {
                continue;
            }
            let ty = s.st_type();
            if ty == elf::STT_FILE {
                let name = table.symbol_name(e, s).unwrap_or_default();
                out.files
                    .push(String::from_utf8_lossy(name).into_owned().into());
                file = Some(out.files.len() as u32 - 1);
                if seen_sym {
                    file_after_sym = true;
                }
                continue;
            }
            seen_sym = true;
            let shndx = u32::from(s.st_shndx(e));
            if matches!(
                ty,
                elf::STT_SECTION | elf::STT_OBJECT | elf::STT_TLS | elf::STT_COMMON
            ) || shndx == u32::from(elf::SHN_UNDEF)
                || shndx >= u32::from(elf::SHN_LORESERVE)
            {
                continue;
            }
            let local = s.st_bind() == elf::STB_LOCAL;
            let size = s.st_size(e);
            // annobin's hidden, local, untyped markers are no functions.
            if size == 0 && local && ty == elf::STT_NOTYPE && s.st_visibility() == elf::STV_HIDDEN {
                continue;
            }
            let f = match file {
                Some(f) if local || !file_after_sym => f,
                _ => NO_FILE,
            };
            out.syms.push(FuncSym {
                shndx,
                value: s.st_value(e),
                size: size.max(1),
                function: matches!(ty, elf::STT_FUNC | elf::STT_GNU_IFUNC),
                typed: ty != elf::STT_NOTYPE,
                file: f,
            });
        }
        // Stable: symbols of one value stay in table order.
        out.syms.sort_by_key(|s| (s.shndx, s.value));
        out
    }

    /// binutils' `elf_find_function`: the nearest symbol at or below `addr` in
    /// section `shndx` (whether it reaches `addr` or not), ties settled as
    /// binutils' `better_fit` settles them; its file if it has one.
    fn find(&self, shndx: u32, addr: u64) -> Option<Option<Rc<str>>> {
        let end = self
            .syms
            .partition_point(|s| (s.shndx, s.value) <= (shndx, addr));
        let last = self.syms[..end].last().filter(|s| s.shndx == shndx)?;
        let start = self.syms[..end].partition_point(|s| (s.shndx, s.value) < (shndx, last.value));
        let mut best = self.syms[start];
        for s in &self.syms[start + 1..end] {
            let better = if best.value + best.size <= addr {
                s.size > best.size
            } else if s.value + s.size <= addr {
                false
            } else if best.function != s.function {
                s.function
            } else if best.typed != s.typed {
                s.typed
            } else {
                s.size < best.size
            };
            if better {
                best = *s;
            }
        }
        Some(self.files.get(best.file as usize).cloned())
    }
}

/// The line rows of one file's DWARF, all units together: sequences sorted by
/// start, rows sorted by address.
///
/// gimli decodes the line programs; the rows and file names are made here as
/// binutils makes them, not through the `addr2line` crate, because perf prints
/// binutils' answers and the crate follows DWARF where binutils does not: for
/// DWARF 5 binutils puts directory entry 0 under `DW_AT_comp_dir`
/// (`./csu/./csu/init-first.c` for Debian's libc, where the crate says
/// `./csu/init-first.c`: 586 of 1280 probed addresses of libc's debug file
/// differed with `--full-source-path` when the crate was tried) and starts each
/// sequence in file 0, not 1.
#[derive(Default)]
struct LineTable {
    /// (start, end, first row, row count).
    sequences: Vec<(u64, u64, u32, u32)>,
    /// (address, file index into `files`, line).
    rows: Vec<(u64, u32, u32)>,
    files: Vec<Rc<str>>,
}

impl LineTable {
    fn load(dwarf: &gimli::Dwarf<Reader>) -> Self {
        let mut t = LineTable::default();
        let mut units = dwarf.units();
        while let Ok(Some(h)) = units.next() {
            let Ok(unit) = dwarf.unit(h) else { continue };
            let Some(program) = unit.line_program.clone() else {
                continue;
            };
            t.add_unit(dwarf, &unit, program);
        }
        t.sequences.sort_by_key(|s| (s.0, s.1));
        t
    }

    /// binutils' name of file `i` of a line program header: the name, under its
    /// directory, under the unit's `DW_AT_comp_dir` while still relative.
    fn file_name(
        dwarf: &gimli::Dwarf<Reader>,
        unit: &gimli::Unit<Reader>,
        header: &gimli::LineProgramHeader<Reader>,
        i: u64,
    ) -> Option<String> {
        let f = header.file(i)?;
        let s = |v: gimli::AttributeValue<Reader>| -> Option<String> {
            let r = dwarf.attr_string(unit, v).ok()?;
            Some(String::from_utf8_lossy(&r.to_slice().ok()?).into_owned())
        };
        let name = s(f.path_name())?;
        if name.starts_with('/') {
            return Some(name);
        }
        let comp = unit
            .comp_dir
            .as_ref()
            .and_then(|d| d.to_string_lossy().ok().map(|c| c.into_owned()));
        let dir = f.directory(header).and_then(s);
        let mut out = String::new();
        match (dir, comp) {
            (Some(d), _) if d.starts_with('/') => out.push_str(&d),
            (Some(d), Some(c)) => {
                out.push_str(&c);
                out.push('/');
                out.push_str(&d);
            }
            (Some(d), None) => out.push_str(&d),
            (None, Some(c)) => out.push_str(&c),
            (None, None) => return Some(name),
        }
        out.push('/');
        out.push_str(&name);
        Some(out)
    }

    /// Runs a unit's line program (DWARF's state machine, as far as rows'
    /// addresses, files and lines go).
    fn add_unit(
        &mut self,
        dwarf: &gimli::Dwarf<Reader>,
        unit: &gimli::Unit<Reader>,
        program: gimli::IncompleteLineProgram<Reader>,
    ) {
        use gimli::LineInstruction as I;
        let header = program.header().clone();
        let v5 = header.version() >= 5;
        let base = self.files.len() as u64;
        let nfiles = header.file_names().len() as u64;
        let first_file = if v5 { 0 } else { 1 };
        for i in 0..nfiles {
            let n = Self::file_name(dwarf, unit, &header, i + first_file)
                .unwrap_or_else(|| "<unknown>".into());
            self.files.push(n.into());
        }
        let file_id = |f: u64| -> u32 {
            let f = f.wrapping_sub(first_file);
            if f < nfiles {
                (base + f) as u32
            } else {
                u32::MAX
            }
        };
        let min_len = u64::from(header.minimum_instruction_length());
        let line_base = i64::from(header.line_base());
        let line_range = u64::from(header.line_range()).max(1);
        let opcode_base = u64::from(header.opcode_base());
        // binutils starts each sequence in the first entry of a DWARF 5 file
        // table (index 0), not in file 1 as DWARF says: rows before the first
        // DW_LNS_set_file name the unit's primary file.
        let initial_file = if v5 { 0 } else { 1 };
        let (mut addr, mut file, mut line) = (0u64, initial_file, 1u64);
        let mut seq_start = self.rows.len();
        let mut insts = header.instructions();
        let push = |t: &mut LineTable, addr: u64, file: u64, line: u64| {
            t.rows.push((addr, file_id(file), line as u32));
        };
        while let Ok(Some(inst)) = insts.next_instruction(&header) {
            match inst {
                I::Special(op) => {
                    let adj = u64::from(op).saturating_sub(opcode_base);
                    addr = addr.wrapping_add(min_len * (adj / line_range));
                    line = (line as i64 + line_base + (adj % line_range) as i64) as u64;
                    push(self, addr, file, line);
                }
                I::Copy => push(self, addr, file, line),
                I::AdvancePc(n) => addr = addr.wrapping_add(min_len * n),
                I::AdvanceLine(n) => line = (line as i64).wrapping_add(n) as u64,
                I::SetFile(f) => file = f,
                I::ConstAddPc => {
                    let adj = 255u64.saturating_sub(opcode_base);
                    addr = addr.wrapping_add(min_len * (adj / line_range));
                }
                I::FixedAddPc(n) => addr = addr.wrapping_add(u64::from(n)),
                I::SetAddress(a) => addr = a,
                I::EndSequence => {
                    let rows = &mut self.rows[seq_start..];
                    if !rows.is_empty() {
                        // Rows at one address: the last one stands.
                        rows.sort_by_key(|r| r.0);
                        let mut keep: Vec<(u64, u32, u32)> = Vec::with_capacity(rows.len());
                        for &r in rows.iter() {
                            match keep.last_mut() {
                                Some(k) if k.0 == r.0 => *k = r,
                                _ => keep.push(r),
                            }
                        }
                        self.rows.truncate(seq_start);
                        let start = keep[0].0;
                        if addr > start {
                            self.sequences
                                .push((start, addr, seq_start as u32, keep.len() as u32));
                            self.rows.extend(keep);
                        }
                    }
                    seq_start = self.rows.len();
                    (addr, file, line) = (0, initial_file, 1);
                }
                _ => {}
            }
        }
        self.rows.truncate(seq_start);
    }

    /// The row covering `addr`: its file and line.
    fn find(&self, addr: u64) -> Option<(Rc<str>, u32)> {
        let i = self.sequences.partition_point(|s| s.0 <= addr);
        // The sequence starting last at or below `addr` that reaches it.
        let s = self.sequences[..i]
            .iter()
            .rev()
            .take(4)
            .find(|s| addr < s.1)?;
        let rows = &self.rows[s.2 as usize..(s.2 + s.3) as usize];
        let j = rows.partition_point(|r| r.0 <= addr);
        let r = rows.get(j.checked_sub(1)?)?;
        let file = self.files.get(r.1 as usize)?.clone();
        Some((file, r.2))
    }
}

/// One file addr2line reads: its sections, DWARF lines and symbols.
struct A2lFile {
    /// Allocated sections: (index, address, size, executable), in header order.
    sections: Vec<(u32, u64, u64, bool)>,
    lines: LineTable,
    syms: FuncSyms,
}

impl A2lFile {
    fn open(path: &Path) -> Option<Self> {
        let file = std::fs::File::open(path).ok()?;
        // SAFETY: a read-only private mapping; a file changed under it while
        // the tool runs gives wrong answers, never unsoundness in safe code
        // beyond what every mmap reader accepts.
        let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
        let data: &[u8] = &map;
        let f = ElfFile64::<Endianness>::parse(data).ok()?;
        let (hdr, e) = (f.elf_header(), f.endian());
        let mut sections = Vec::new();
        if let Ok(secs) = hdr.sections(e, data) {
            for (i, s) in secs.iter().enumerate() {
                if s.sh_flags(e) & u64::from(elf::SHF_ALLOC) != 0 && s.sh_size(e) > 0 {
                    let x = s.sh_flags(e) & u64::from(elf::SHF_EXECINSTR) != 0;
                    sections.push((i as u32, s.sh_addr(e), s.sh_size(e), x));
                }
            }
        }
        let syms = FuncSyms::of(hdr, e, data);
        let endian = if f.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let lines = if f.section_by_name(".debug_line").is_some() {
            let load = |id: gimli::SectionId| -> Result<Reader, gimli::Error> {
                let bytes = section_bytes(&f, id.name()).unwrap_or_else(|| Rc::from(&[][..]));
                Ok(gimli::EndianRcSlice::new(bytes, endian))
            };
            gimli::Dwarf::load(load)
                .map(|d| LineTable::load(&d))
                .unwrap_or_default()
        } else {
            LineTable::default()
        };
        Some(A2lFile {
            sections,
            lines,
            syms,
        })
    }

    /// addr2line's first record for `addr`.
    fn answer(&self, addr: u64) -> Answer {
        let Some(&(shndx, _, _, _)) = self
            .sections
            .iter()
            .find(|&&(_, a, n, _)| addr >= a && addr - a < n)
        else {
            return Answer::NotFound;
        };
        if let Some((file, line)) = self.lines.find(addr) {
            return Answer::Line { file, line };
        }
        match self.syms.find(shndx, addr) {
            Some(Some(file)) => Answer::Line { file, line: 0 },
            Some(None) => Answer::NoFile,
            None => Answer::NotFound,
        }
    }
}

/// A section's bytes, zlib-compressed ones (`SHF_COMPRESSED`, `.zdebug`)
/// inflated; `None` for a section that is not there or cannot be read (zstd
/// among them: then the file has no line rows, as if it had no DWARF).
fn section_bytes(f: &ElfFile64<'_, Endianness>, name: &str) -> Option<Rc<[u8]>> {
    use std::io::Read;
    let c = f.section_by_name(name)?.compressed_data().ok()?;
    match c.format {
        object::CompressionFormat::None => Some(Rc::from(c.data)),
        object::CompressionFormat::Zlib => {
            // The header's size is a hint only (bad input must not allocate
            // gigabytes up front).
            let hint = usize::try_from(c.uncompressed_size)
                .unwrap_or(0)
                .min(1 << 26);
            let mut out = Vec::with_capacity(hint);
            flate2::read::ZlibDecoder::new(c.data)
                .read_to_end(&mut out)
                .ok()?;
            Some(out.into())
        }
        _ => None,
    }
}

/// A dso's source lines: the file addr2line reads, perf's address offset, and
/// the answers so far.
struct Dso {
    file: Option<A2lFile>,
    /// `.text`'s `sh_addr - sh_offset` in the runtime file (perf's `text_offset`).
    text_offset: u64,
    /// The recorded name's base name (perf's `short_name`).
    short: Rc<str>,
    /// srcline texts by map-relative address (`None`: perf prints nothing).
    lines: HashMap<u64, Option<Rc<str>>>,
}

/// The source lines of every dso a recording mapped, loaded on first use.
#[derive(Default)]
pub struct SrcLines {
    full_path: bool,
    search: DebugSearch,
    dsos: HashMap<(String, Vec<u8>), Dso>,
}

/// perf's `gnu_basename`.
fn basename(p: &str) -> &str {
    p.rsplit_once('/').map_or(p, |(_, b)| b)
}

/// `.text`'s `sh_addr - sh_offset` (0 without one).
fn text_offset(path: &Path) -> u64 {
    let Ok(data) = std::fs::read(path) else {
        return 0;
    };
    let Ok(f) = object::File::parse(&*data) else {
        return 0;
    };
    f.section_by_name(".text")
        .and_then(|s| Some(s.address().wrapping_sub(s.file_range()?.0)))
        .unwrap_or(0)
}

impl SrcLines {
    /// No dsos loaded yet; `full_path`: perf's `--full-source-path` (the file's
    /// directories too, not only its base name).
    pub fn new(full_path: bool) -> Self {
        SrcLines {
            full_path,
            search: DebugSearch::default(),
            dsos: HashMap::new(),
        }
    }

    /// Looks for debug files as `search` says (perf's `--symfs`).
    pub fn with_search(mut self, search: DebugSearch) -> Self {
        self.search = search;
        self
    }

    /// perf's srcline text for `addr` (the map-relative address, `ip - start +
    /// pgoff`) in the dso recorded as `name` with `build_id`, whose code was
    /// found at `path` (`None`: not found); `None` where perf prints nothing.
    pub fn srcline(
        &mut self,
        name: &str,
        path: Option<&Path>,
        build_id: Option<&[u8]>,
        addr: u64,
    ) -> Option<Rc<str>> {
        let full = self.full_path;
        let dso = self.dso(name, path, build_id);
        if let Some(v) = dso.lines.get(&addr) {
            return v.clone();
        }
        let (objdump, answer) = dso.answer(addr);
        let text: Option<Rc<str>> = match answer {
            Answer::Line { file, line } => {
                let file = if full { &*file } else { basename(&file) };
                if file == "??" && line == 0 {
                    None
                } else {
                    Some(format!("{file}:{line}").into())
                }
            }
            Answer::NoFile => None,
            Answer::NotFound => Some(format!("{}[{objdump:x}]", dso.short).into()),
        };
        dso.lines.insert(addr, text.clone());
        text
    }

    /// addr2line's answer for the same address as [`Self::srcline`] takes it,
    /// the file as perf prints it (its base name unless `full_path`); not
    /// cached (perf's call graphs ask each address once).
    pub fn answer(
        &mut self,
        name: &str,
        path: Option<&Path>,
        build_id: Option<&[u8]>,
        addr: u64,
    ) -> Answer {
        let full = self.full_path;
        match self.dso(name, path, build_id).answer(addr).1 {
            Answer::Line { file, line } if !full => Answer::Line {
                file: basename(&file).into(),
                line,
            },
            a => a,
        }
    }

    /// The dso recorded as `name` with `build_id` (loaded on first use).
    fn dso(&mut self, name: &str, path: Option<&Path>, build_id: Option<&[u8]>) -> &mut Dso {
        let key = (name.to_string(), build_id.unwrap_or_default().to_vec());
        let search = &self.search;
        self.dsos
            .entry(key)
            .or_insert_with(|| Dso::load(search, name, path, build_id))
    }

    /// perf report's `srcfile` of the same address: the srcline's file part
    /// (`None`: perf's `[unknown]`-like empty key).
    pub fn srcfile(
        &mut self,
        name: &str,
        path: Option<&Path>,
        build_id: Option<&[u8]>,
        addr: u64,
    ) -> Option<Rc<str>> {
        let s = self.srcline(name, path, build_id, addr)?;
        match s.rsplit_once(':') {
            Some((f, _)) if !f.is_empty() && !s.ends_with(']') => Some(f.into()),
            _ => None,
        }
    }
}

impl Dso {
    /// addr2line's answer for map-relative `addr`, with the address it asks
    /// for (objdump's: `addr` plus the text offset).
    fn answer(&self, addr: u64) -> (u64, Answer) {
        let objdump = addr.wrapping_add(self.text_offset);
        let answer = self
            .file
            .as_ref()
            .map_or(Answer::NotFound, |f| f.answer(objdump));
        (objdump, answer)
    }

    fn load(search: &DebugSearch, name: &str, path: Option<&Path>, build_id: Option<&[u8]>) -> Dso {
        let short: Rc<str> = basename(name).into();
        let text_offset = path.map_or(0, text_offset);
        // perf's dso__name: no addr2line for `[vdso]`, the kernel, JIT maps.
        let file = if name.starts_with('[') || name.starts_with("/tmp/perf-") {
            None
        } else {
            search
                .symbol_file(path, name, build_id)
                .or_else(|| Some(PathBuf::from(name)))
                .and_then(|p| A2lFile::open(&p))
        };
        Dso {
            file,
            text_offset,
            short,
            lines: HashMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test binary's own source lines: rustc's DWARF, in the file itself.
    #[test]
    fn own_lines() {
        let exe = std::env::current_exe().unwrap();
        let f = A2lFile::open(&exe).unwrap();
        let here = own_lines as fn() as usize as u64;
        // The running address minus the load bias: the first PT_LOAD's
        // offset/vaddr relation holds for the test binary (PIE, bias from maps).
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let exe_s = exe.to_string_lossy();
        let (start, off) = maps
            .lines()
            .filter(|l| l.ends_with(&*exe_s))
            .find_map(|l| {
                let mut it = l.split_whitespace();
                let (a, b) = it.next()?.split_once('-')?;
                let (a, b) = (
                    u64::from_str_radix(a, 16).ok()?,
                    u64::from_str_radix(b, 16).ok()?,
                );
                let perms = it.next()?;
                let off = u64::from_str_radix(it.next()?, 16).ok()?;
                (perms.contains('x') && here >= a && here < b).then_some((a, off))
            })
            .unwrap();
        let addr = here - start + off + text_offset(&exe);
        match f.answer(addr) {
            Answer::Line { file, line } => {
                assert_eq!(basename(&file), "srcline.rs");
                assert!(line > 0);
            }
            a => panic!("{a:?}"),
        }
        assert_eq!(f.answer(u64::MAX - 5), Answer::NotFound);
    }

    /// binutils' `addr2line -i -f` first record for each address, as perf reads
    /// it (perf's trick: a `,` after each address ends the answer with `??:0`).
    fn binutils(file: &Path, addrs: &[u64]) -> Vec<Answer> {
        use std::io::{BufRead, Write};
        let mut child = std::process::Command::new(pt_testkit::tool("addr2line", "binutils"))
            .arg("-e")
            .arg(file)
            .args(["-i", "-f"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = String::new();
        for a in addrs {
            input.push_str(&format!("{a:016x}\n,\n"));
        }
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()).unwrap());
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut lines = out.lines().map(Result::unwrap);
        let mut v = Vec::new();
        for _ in addrs {
            let _func = lines.next().unwrap();
            let loc = lines.next().unwrap();
            if loc == "??:0" {
                v.push(Answer::NotFound);
                lines.next();
                lines.next();
                continue;
            }
            // Inlined callers, then the sentinel.
            loop {
                let _f = lines.next().unwrap();
                if lines.next().unwrap() == "??:0" {
                    break;
                }
            }
            let (file, line) = loc.split_once(':').unwrap();
            let digits: String = line.chars().take_while(char::is_ascii_digit).collect();
            let line = digits.parse().unwrap_or(0);
            v.push(if file == "??" {
                Answer::NoFile
            } else {
                Answer::Line {
                    file: file.into(),
                    line,
                }
            });
        }
        writer.join().unwrap();
        let _ = child.wait();
        v
    }

    /// Addresses spread over a file's code sections (and around them).
    fn probes(f: &A2lFile, per_section: u64) -> Vec<u64> {
        let mut v = Vec::new();
        for &(_, a, n, _) in f.sections.iter().filter(|s| s.3) {
            let step = (n / per_section).max(1);
            let mut x = a.saturating_sub(3);
            while x < a + n + 3 {
                v.push(x);
                x += step;
            }
        }
        v
    }

    fn same_as_binutils(path: &Path, per_section: u64) {
        let Some(f) = A2lFile::open(path) else {
            panic!("{}: no ELF file", path.display());
        };
        let addrs = probes(&f, per_section);
        let theirs = binutils(path, &addrs);
        let mut differ = Vec::new();
        for (a, t) in addrs.iter().zip(&theirs) {
            let ours = f.answer(*a);
            if &ours != t {
                differ.push(format!("{a:#x}: binutils {t:?}, ours {ours:?}"));
            }
        }
        assert!(
            differ.is_empty(),
            "{}: {} of {} addresses differ:\n{}",
            path.display(),
            differ.len(),
            addrs.len(),
            differ[..differ.len().min(60)].join("\n")
        );
    }

    /// Our answers are binutils' on a C program built with DWARF (static: the C
    /// library's objects have none, only file symbols), a stripped system tool
    /// and the C library's debug files where they are installed.
    #[test]
    fn answers_are_binutils() {
        let dir = tempfile::tempdir().unwrap();
        let src = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../ptperf/tests/programs/script_demo.c"
        );
        let exe = dir.path().join("script_demo");
        let exe = pt_testkit::compile_c(src, exe, &["-O2", "-g", "-static"], &[]);
        same_as_binutils(&exe, 3000);
        same_as_binutils(Path::new("/usr/bin/true"), 200);
        for lib in [
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
        ] {
            if let Some(p) = DebugSearch::default().symbol_file(Some(Path::new(lib)), lib, None) {
                same_as_binutils(&p, 400);
            }
        }
    }
}
