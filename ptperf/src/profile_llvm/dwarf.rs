//! What a sample profile needs from DWARF: for a code address, its chain of
//! inlined frames (outermost first), each with the function's name and start
//! line, and where the next frame was inlined; and the address's line and
//! discriminator from the line table.
//!
//! Only what LLVM's sample profile keys on is read: `DW_TAG_subprogram` and
//! `DW_TAG_inlined_subroutine` DIEs with their ranges, `DW_AT_linkage_name` /
//! `DW_AT_name` and `DW_AT_decl_line` (through `DW_AT_abstract_origin` and
//! `DW_AT_specification`), `DW_AT_call_line` and `DW_AT_GNU_discriminator` of
//! inlined calls, and the line programs.
//!
//! Read here with gimli rather than through the `addr2line` crate: its frames
//! carry neither `DW_AT_decl_line` nor line discriminators, and a sample
//! profile is keyed on both (line offsets from the function's start,
//! duplication factors). (Where debug files are found is [`pt_elf`]'s.)

use std::borrow::Cow;
use std::collections::HashMap;

use gimli::{AttributeValue, EndianSlice, RunTimeEndian, UnitOffset};
use object::{Object, ObjectSection};

type Reader<'a> = EndianSlice<'a, RunTimeEndian>;

/// A function body (out of line or inlined) covering some address ranges.
#[derive(Clone, Debug)]
struct Scope {
    /// Index into [`DebugInfo::names`].
    name: u32,
    /// The function's `DW_AT_decl_line` (0 if not given).
    decl_line: u32,
    /// For an inlined copy: the line and discriminator of the call in the
    /// enclosing scope's function.
    call_line: u32,
    call_discriminator: u32,
    /// Ranges `[start, end)`, link-time addresses.
    ranges: Vec<(u64, u64)>,
    /// Inlined calls directly inside this scope.
    children: Vec<u32>,
}

/// One frame of an address's inline chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The function's linkage name (or name).
    pub name: &'a str,
    /// The line the function starts at (`DW_AT_decl_line`).
    pub decl_line: u32,
    /// In the innermost frame, the address's line; in the others, the line of
    /// the call the next frame was inlined at.
    pub line: u32,
    /// The discriminator that goes with `line` (as encoded in DWARF).
    pub discriminator: u32,
}

/// One row of the line tables: from `address` on, `line` (0: no line, e.g. the
/// end of a sequence).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Row {
    address: u64,
    line: u32,
    discriminator: u32,
}

/// The functions, inlined calls and line tables of one ELF file.
#[derive(Debug, Default)]
pub struct DebugInfo {
    names: Vec<String>,
    scopes: Vec<Scope>,
    /// Out-of-line functions: (start, end, scope), sorted by start.
    top: Vec<(u64, u64, u32)>,
    /// Line table rows of all sequences, sorted by address.
    rows: Vec<Row>,
}

/// Why an ELF file's DWARF could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DwarfError {
    /// Not an object file `object` reads.
    #[error("not an ELF file: {0}")]
    Object(#[from] object::Error),
    /// Malformed DWARF.
    #[error("bad DWARF at {offset:#x}: {error}")]
    Gimli {
        /// The error.
        error: gimli::Error,
        /// Where (an offset into .debug_info or the section gimli read).
        offset: u64,
    },
}

impl DebugInfo {
    /// Reads the DWARF of the ELF file `data`. A file without DWARF gives an
    /// empty table.
    pub fn parse(data: &[u8]) -> Result<Self, DwarfError> {
        let obj = object::File::parse(data)?;
        let endian = if obj.is_little_endian() {
            RunTimeEndian::Little
        } else {
            RunTimeEndian::Big
        };
        let mut sections: HashMap<gimli::SectionId, Cow<'_, [u8]>> = HashMap::new();
        for id in [
            gimli::SectionId::DebugAbbrev,
            gimli::SectionId::DebugAddr,
            gimli::SectionId::DebugInfo,
            gimli::SectionId::DebugLine,
            gimli::SectionId::DebugLineStr,
            gimli::SectionId::DebugRanges,
            gimli::SectionId::DebugRngLists,
            gimli::SectionId::DebugStr,
            gimli::SectionId::DebugStrOffsets,
        ] {
            if let Some(s) = obj.section_by_name(id.name()) {
                if let Ok(d) = s.uncompressed_data() {
                    sections.insert(id, d);
                }
            }
        }
        let dwarf = gimli::Dwarf::load(|id| -> Result<Reader<'_>, gimli::Error> {
            Ok(EndianSlice::new(
                sections.get(&id).map_or(&[][..], |d| &d[..]),
                endian,
            ))
        })
        .map_err(|error| DwarfError::Gimli { error, offset: 0 })?;
        let mut info = DebugInfo::default();
        let mut name_ids: HashMap<String, u32> = HashMap::new();
        let mut units = dwarf.units();
        loop {
            let header = match units.next() {
                Ok(Some(h)) => h,
                Ok(None) => break,
                Err(error) => return Err(DwarfError::Gimli { error, offset: 0 }),
            };
            let at = header
                .offset()
                .as_debug_info_offset()
                .map_or(0, |o| o.0 as u64);
            let err = |error| DwarfError::Gimli { error, offset: at };
            let unit = dwarf.unit(header).map_err(err)?;
            info.read_unit(&dwarf, &unit, &mut name_ids).map_err(err)?;
            info.read_lines(&unit).map_err(err)?;
        }
        info.top.sort_unstable_by_key(|t| (t.0, t.1));
        // Stable: for rows at one address, the later one (a sequence's start after
        // another's end) wins.
        info.rows.sort_by_key(|r| r.address);
        let mut rows: Vec<Row> = Vec::with_capacity(info.rows.len());
        for r in info.rows.drain(..) {
            match rows.last_mut() {
                Some(last) if last.address == r.address => {
                    if r.line != 0 || last.line == 0 {
                        *last = r;
                    }
                }
                _ => rows.push(r),
            }
        }
        info.rows = rows;
        Ok(info)
    }

    /// Whether the file had no functions in its DWARF.
    pub fn is_empty(&self) -> bool {
        self.top.is_empty()
    }

    fn name_id(&mut self, ids: &mut HashMap<String, u32>, name: &str) -> u32 {
        if let Some(&i) = ids.get(name) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(name.to_string());
        ids.insert(name.to_string(), i);
        i
    }

    fn read_unit(
        &mut self,
        dwarf: &gimli::Dwarf<Reader<'_>>,
        unit: &gimli::Unit<Reader<'_>>,
        ids: &mut HashMap<String, u32>,
    ) -> gimli::Result<()> {
        // The scope open at each depth of the DIE tree (None: not a function).
        let mut open: Vec<Option<u32>> = Vec::new();
        let mut depth: isize = 0;
        let mut entries = unit.entries();
        while let Some((delta, entry)) = entries.next_dfs()? {
            depth += delta;
            let d = depth.max(0) as usize;
            open.truncate(d);
            let parent = open.iter().rev().find_map(|s| *s);
            let tag = entry.tag();
            let mut this = None;
            if tag == gimli::DW_TAG_subprogram || tag == gimli::DW_TAG_inlined_subroutine {
                let mut ranges = Vec::new();
                let mut it = dwarf.die_ranges(unit, entry)?;
                while let Some(r) = it.next()? {
                    if r.begin < r.end {
                        ranges.push((r.begin, r.end));
                    }
                }
                let inlined = tag == gimli::DW_TAG_inlined_subroutine;
                // Abstract or declared-only subprograms have no code: skip them
                // (their names are found through the concrete DIEs' origins).
                if !ranges.is_empty() && (!inlined || parent.is_some()) {
                    let (name, decl_line) = self.origin(dwarf, unit, entry.offset())?;
                    let name = name.unwrap_or_else(|| "<unnamed>".to_string());
                    let name = self.name_id(ids, &name);
                    let udata = |at| -> gimli::Result<u32> {
                        Ok(entry
                            .attr_value(at)?
                            .and_then(|v| v.udata_value())
                            .unwrap_or(0) as u32)
                    };
                    let (call_line, call_discriminator) = if inlined {
                        (
                            udata(gimli::DW_AT_call_line)?,
                            udata(gimli::DW_AT_GNU_discriminator)?,
                        )
                    } else {
                        (0, 0)
                    };
                    let id = self.scopes.len() as u32;
                    if !inlined {
                        for &(s, e) in &ranges {
                            self.top.push((s, e, id));
                        }
                    }
                    self.scopes.push(Scope {
                        name,
                        decl_line,
                        call_line,
                        call_discriminator,
                        ranges,
                        children: Vec::new(),
                    });
                    if let (true, Some(p)) = (inlined, parent) {
                        if let Some(p) = self.scopes.get_mut(p as usize) {
                            p.children.push(id);
                        }
                    }
                    this = Some(id);
                }
            }
            open.resize(d, None);
            open.push(this);
        }
        Ok(())
    }

    /// The name (a linkage name anywhere on the way preferred) and decl line of
    /// the DIE at `offset`, following `DW_AT_abstract_origin` and
    /// `DW_AT_specification` (within the unit).
    fn origin(
        &self,
        dwarf: &gimli::Dwarf<Reader<'_>>,
        unit: &gimli::Unit<Reader<'_>>,
        offset: UnitOffset,
    ) -> gimli::Result<(Option<String>, u32)> {
        let mut linkage = None;
        let mut plain = None;
        let mut decl_line = 0;
        let mut at = offset;
        for _ in 0..8 {
            let entry = unit.entry(at)?;
            let string = |a| -> gimli::Result<Option<String>> {
                Ok(match entry.attr_value(a)? {
                    Some(v) => dwarf
                        .attr_string(unit, v)
                        .ok()
                        .map(|s| String::from_utf8_lossy(s.slice()).into_owned()),
                    None => None,
                })
            };
            if linkage.is_none() {
                linkage = match string(gimli::DW_AT_linkage_name)? {
                    Some(n) => Some(n),
                    None => string(gimli::DW_AT_MIPS_linkage_name)?,
                };
            }
            if plain.is_none() {
                plain = string(gimli::DW_AT_name)?;
            }
            if decl_line == 0 {
                decl_line = entry
                    .attr_value(gimli::DW_AT_decl_line)?
                    .and_then(|v| v.udata_value())
                    .unwrap_or(0) as u32;
            }
            if linkage.is_some() && decl_line != 0 {
                break;
            }
            let next = match entry.attr_value(gimli::DW_AT_abstract_origin)? {
                Some(AttributeValue::UnitRef(o)) => Some(o),
                _ => match entry.attr_value(gimli::DW_AT_specification)? {
                    Some(AttributeValue::UnitRef(o)) => Some(o),
                    _ => None,
                },
            };
            match next {
                Some(o) => at = o,
                None => break,
            }
        }
        Ok((linkage.or(plain), decl_line))
    }

    fn read_lines(&mut self, unit: &gimli::Unit<Reader<'_>>) -> gimli::Result<()> {
        let Some(program) = unit.line_program.clone() else {
            return Ok(());
        };
        let mut rows = program.rows();
        while let Some((_, row)) = rows.next_row()? {
            let line = if row.end_sequence() {
                0
            } else {
                row.line()
                    .map_or(0, |l| l.get().min(u64::from(u32::MAX)) as u32)
            };
            self.rows.push(Row {
                address: row.address(),
                line,
                discriminator: row.discriminator() as u32,
            });
        }
        Ok(())
    }

    /// The line and discriminator of `addr` (link-time), if the line tables
    /// cover it with a line.
    pub fn line(&self, addr: u64) -> Option<(u32, u32)> {
        let i = self.rows.partition_point(|r| r.address <= addr);
        let r = self.rows.get(i.checked_sub(1)?)?;
        (r.line != 0).then_some((r.line, r.discriminator))
    }

    /// The inline chain at `addr` (link-time), outermost frame first, into
    /// `out` (cleared first). Empty if no function covers `addr`; the last
    /// frame's line is 0 if the line tables do not cover it.
    pub fn frames<'s>(&'s self, addr: u64, out: &mut Vec<Frame<'s>>) {
        out.clear();
        let i = self.top.partition_point(|t| t.0 <= addr);
        // Ranges may nest or overlap (rarely): take the closest start that covers it.
        let Some(&(_, _, top)) = self.top[..i].iter().rev().take(8).find(|t| addr < t.1) else {
            return;
        };
        let mut scope = top;
        loop {
            let Some(s) = self.scopes.get(scope as usize) else {
                return;
            };
            let inner = s.children.iter().copied().find(|&c| {
                self.scopes
                    .get(c as usize)
                    .is_some_and(|c| c.ranges.iter().any(|&(b, e)| b <= addr && addr < e))
            });
            let (line, discriminator) = match inner.and_then(|c| self.scopes.get(c as usize)) {
                Some(c) => (c.call_line, c.call_discriminator),
                None => self.line(addr).unwrap_or((0, 0)),
            };
            out.push(Frame {
                name: self.names.get(s.name as usize).map_or("", String::as_str),
                decl_line: s.decl_line,
                line,
                discriminator,
            });
            match inner {
                Some(c) => scope = c,
                None => return,
            }
        }
    }

    /// The out-of-line function whose code starts at `addr` (link-time), by name.
    pub fn function_at(&self, addr: u64) -> Option<&str> {
        let i = self.top.partition_point(|t| t.0 < addr);
        let &(start, _, s) = self.top.get(i)?;
        (start == addr).then(|| {
            self.scopes
                .get(s as usize)
                .and_then(|s| self.names.get(s.name as usize))
                .map_or("", String::as_str)
        })
    }

    /// The out-of-line function covering `addr` (link-time): its name and start.
    pub fn function_covering(&self, addr: u64) -> Option<(&str, u64)> {
        let i = self.top.partition_point(|t| t.0 <= addr);
        let &(start, _, s) = self.top[..i].iter().rev().take(8).find(|t| addr < t.1)?;
        let name = self
            .scopes
            .get(s as usize)
            .and_then(|s| self.names.get(s.name as usize))?;
        Some((name, start))
    }
}

/// The base discriminator of an LLVM-encoded DWARF discriminator (LLVM packs a
/// duplication factor and a copy id after it, each in a prefix encoding).
pub fn base_discriminator(d: u32) -> u32 {
    prefix_decode(d)
}

/// The duplication factor of an LLVM-encoded discriminator (1 if none): how
/// many source iterations one execution of an unrolled or vectorized copy stands
/// for.
pub fn duplication_factor(d: u32) -> u32 {
    prefix_decode(next_component(d)).max(1)
}

/// One component: bit 0 set means 0; else 5 bits, or 12 bits when bit 6 says so.
fn prefix_decode(u: u32) -> u32 {
    if u & 1 != 0 {
        return 0;
    }
    let u = u >> 1;
    if u & 0x20 != 0 {
        ((u >> 1) & 0xfe0) | (u & 0x1f)
    } else {
        u & 0x1f
    }
}

/// The discriminator with its first component removed.
fn next_component(d: u32) -> u32 {
    if d & 1 == 0 {
        d >> if d & 0x40 != 0 { 14 } else { 7 }
    } else {
        d >> 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LLVM's encoding of one component, to test the decoding against.
    fn encode(c: u32) -> (u32, u32) {
        if c == 0 {
            return (1, 1);
        }
        let c = c & 0xfff;
        let p = if c > 0x1f {
            ((c & 0xfe0) << 1) | (c & 0x1f) | 0x20
        } else {
            c
        };
        (p << 1, if c > 0x1f { 14 } else { 7 })
    }

    #[test]
    fn discriminator_components() {
        for base in [0, 1, 2, 5, 31, 32, 100, 4095] {
            for dup in [0, 1, 2, 4, 8, 40] {
                let (b, bb) = encode(base);
                let (f, _) = encode(dup);
                let d = b | (f << bb);
                assert_eq!(base_discriminator(d), base, "{base} {dup} {d:#x}");
                assert_eq!(duplication_factor(d), dup.max(1), "{base} {dup} {d:#x}");
            }
        }
        assert_eq!(base_discriminator(0), 0);
        assert_eq!(duplication_factor(0), 1);
    }

    #[test]
    fn line_rows_end_sequences_and_later_starts() {
        let info = DebugInfo {
            rows: vec![
                Row {
                    address: 0x10,
                    line: 3,
                    discriminator: 0,
                },
                Row {
                    address: 0x14,
                    line: 4,
                    discriminator: 2,
                },
                Row {
                    address: 0x20,
                    line: 0,
                    discriminator: 0,
                },
                Row {
                    address: 0x30,
                    line: 9,
                    discriminator: 0,
                },
            ],
            ..DebugInfo::default()
        };
        assert_eq!(info.line(0x0f), None);
        assert_eq!(info.line(0x10), Some((3, 0)));
        assert_eq!(info.line(0x1f), Some((4, 2)));
        assert_eq!(info.line(0x20), None);
        assert_eq!(info.line(0x31), Some((9, 0)));
    }
}
