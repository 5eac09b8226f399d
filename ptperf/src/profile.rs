//! A profile of a decoded flow: branch counts by kind and instructions per
//! function, resolved through the ELF symbols of the mapped files.
//!
//! [`Profiler`] is fed every decoded instruction (in trace order) and the
//! tracing-disabled events between them; [`Profiler::finish`] turns the
//! counters into a [`Profile`]. Instructions are attributed one by one, so a
//! block that runs from one function into the next is split correctly.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSection};
use pt_decoder::flow::InsnInfo;
use pt_decoder::image::Image;
use pt_decoder::insn::{decode_at, InsnClass, InsnKind};
use pt_decoder::{Config, Packet, PacketDecoder};

/// An executable mapping: where a file's bytes are mapped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapLine {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Offset of `start` in the file.
    pub file_offset: u64,
    /// `r-xp` style permissions.
    pub perms: String,
    /// The file.
    pub path: PathBuf,
}

/// Branches of the decoded flow, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BranchCounts {
    /// Conditional branches taken.
    pub cond_taken: u64,
    /// Conditional branches not taken.
    pub cond_not_taken: u64,
    /// Direct near jumps.
    pub jump_direct: u64,
    /// Indirect near jumps.
    pub jump_indirect: u64,
    /// Direct near calls.
    pub call_direct: u64,
    /// Indirect near calls.
    pub call_indirect: u64,
    /// Near returns.
    pub returns: u64,
    /// Near returns sent as one TNT bit (return compression): the TNT bits
    /// of the trace less the conditional branches that used one.
    pub returns_compressed: u64,
    /// Far transfers: far calls/jumps/returns, software interrupts, SYSCALL…
    pub far: u64,
    /// Of those, SYSCALL and SYSENTER.
    pub syscalls: u64,
}

impl BranchCounts {
    /// Conditional branches.
    pub fn conditional(&self) -> u64 {
        self.cond_taken + self.cond_not_taken
    }

    /// All branches.
    pub fn total(&self) -> u64 {
        self.conditional()
            + self.jump_direct
            + self.jump_indirect
            + self.call_direct
            + self.call_indirect
            + self.returns
            + self.far
    }
}

/// Instructions executed in one function (or in the unsymbolized code of one file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionCount {
    /// The symbol; `None` for code of `file` no symbol covers.
    pub name: Option<String>,
    /// The file (its last path component), or `?` for unmapped code.
    pub file: String,
    /// Instructions.
    pub insns: u64,
}

impl FunctionCount {
    /// `symbol` or `file (no symbol)`.
    pub fn label(&self) -> String {
        match &self.name {
            Some(n) => n.clone(),
            None => format!("[{} without symbol]", self.file),
        }
    }
}

/// What [`Profiler::finish`] returns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Profile {
    /// Instructions counted.
    pub insns: u64,
    /// Branches by kind.
    pub branches: BranchCounts,
    /// Instructions per function, most first (ties by name).
    pub functions: Vec<FunctionCount>,
}

/// One address range attributed to one counter.
#[derive(Clone, Copy, Debug)]
struct Range {
    start: u64,
    end: u64,
    slot: usize,
    /// File offset of `start` (mapping ranges).
    file_offset: u64,
}

use pt_encoder::hash::IpMap as AddrMap;

/// Address → function table built from the side-band mappings.
#[derive(Debug, Default)]
pub struct FunctionMap {
    /// Symbol ranges, sorted, non-overlapping.
    syms: Vec<Range>,
    /// Mapping ranges (the fallback: one slot per file), sorted.
    maps: Vec<Range>,
    /// (name, file) per slot; the last slot is unmapped code.
    slots: Vec<(Option<String>, String)>,
}

fn file_label(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// The functions of the file mapped by `m` as perf names them (its symbol
/// table from [`pt_elf`], debug files included), as absolute ranges.
fn elf_functions(
    symbols: &mut pt_elf::Symbols,
    data: &[u8],
    m: &MapLine,
) -> Vec<(u64, u64, String)> {
    let Ok(obj) = object::File::parse(data) else {
        return Vec::new();
    };
    let Some(bias) = pt_elf::bias::load_bias(&obj, m.start, m.file_offset) else {
        return Vec::new();
    };
    let name = m.path.to_string_lossy();
    let id = symbols.dso_table(&m.path, &name, None);
    let table = symbols.table(id);
    // perf's answers over the mapping, file offsets to addresses.
    let len = m.end.saturating_sub(m.start);
    let mut syms: Vec<(u64, u64, String)> = table
        .answers(m.file_offset, m.file_offset.saturating_add(len))
        .into_iter()
        .map(|(s, e, sym)| (m.start + (s - m.file_offset), e - s, sym.name().to_string()))
        .collect();
    // Stripped files still describe every function's frame: the starts in
    // .eh_frame_hdr's search table mark functions without a symbol, named
    // `FILE+0xOFFSET` (the file offset of their start).
    if let Some(hdr) = obj.section_by_name(".eh_frame_hdr") {
        let label = file_label(&m.path);
        let mut starts: Vec<u64> = eh_frame_hdr_starts(hdr.data().unwrap_or(&[]), hdr.address())
            .into_iter()
            .map(|a| a.wrapping_add(bias))
            .filter(|&a| m.start <= a && a < m.end)
            .collect();
        starts.sort_unstable();
        let mut named = syms.iter().map(|s| s.0).peekable();
        let mut extra = Vec::new();
        for a in starts {
            // Only where no symbol starts at or covers the address.
            while named.peek().is_some_and(|&n| n < a) {
                named.next();
            }
            if named.peek() == Some(&a) {
                continue;
            }
            let covered = syms
                .partition_point(|s| s.0 <= a)
                .checked_sub(1)
                .and_then(|i| syms.get(i))
                .is_some_and(|s| s.1 > 0 && a < s.0 + s.1);
            if !covered {
                let off = a - m.start + m.file_offset;
                extra.push((a, 0, format!("{label}+{off:#x}")));
            }
        }
        syms.extend(extra);
        syms.sort_by_key(|&(a, size, _)| (a, size == 0));
        syms.dedup_by_key(|s| s.0);
    }
    let mut out = Vec::with_capacity(syms.len());
    for (i, (start, size, name)) in syms.iter().enumerate() {
        let next = syms.get(i + 1).map_or(m.end, |s| s.0);
        let end = if *size > 0 {
            (start + size).min(next)
        } else {
            next
        };
        out.push((*start, end, name.clone()));
    }
    out
}

/// The function start addresses in an `.eh_frame_hdr` section at `addr`
/// (link-time addresses). Only the usual encodings are read (a table of
/// 4-byte signed offsets from the section, `DW_EH_PE_datarel|sdata4`, and a
/// 4-byte count); anything else gives none.
fn eh_frame_hdr_starts(data: &[u8], addr: u64) -> Vec<u64> {
    const UDATA4: u8 = 0x03;
    const SDATA4: u8 = 0x0b;
    const DATAREL_SDATA4: u8 = 0x3b;
    let word = |at: usize| -> Option<[u8; 4]> { data.get(at..at + 4)?.try_into().ok() };
    let [1, ptr_enc, count_enc, table_enc, ..] = *data else {
        return Vec::new();
    };
    // The pointer to .eh_frame: 4 bytes in the usual encodings.
    if ptr_enc & 0x0f != SDATA4 || count_enc != UDATA4 || table_enc != DATAREL_SDATA4 {
        return Vec::new();
    }
    let Some(count) = word(8).map(u32::from_le_bytes) else {
        return Vec::new();
    };
    (0..count as usize)
        .map_while(|i| word(12 + 8 * i))
        .map(|w| addr.wrapping_add(i32::from_le_bytes(w) as i64 as u64))
        .collect()
}

impl FunctionMap {
    /// Reads the symbols of the files in `maps` (those that are not ELF
    /// files, like code dumps, get one counter per file).
    pub fn load(maps: &[MapLine]) -> Self {
        let mut t = FunctionMap::default();
        let mut file_slot: HashMap<PathBuf, usize> = HashMap::new();
        let mut elf_cache: HashMap<PathBuf, Option<Vec<u8>>> = HashMap::new();
        let mut symbols = pt_elf::Symbols::new(pt_elf::SymbolOptions::default());
        for m in maps {
            let label = file_label(&m.path);
            let fs = *file_slot.entry(m.path.clone()).or_insert_with(|| {
                t.slots.push((None, label.clone()));
                t.slots.len() - 1
            });
            t.maps.push(Range {
                start: m.start,
                end: m.end,
                slot: fs,
                file_offset: m.file_offset,
            });
            let data = elf_cache
                .entry(m.path.clone())
                .or_insert_with(|| std::fs::read(&m.path).ok());
            if let Some(data) = data {
                for (start, end, name) in elf_functions(&mut symbols, data, m) {
                    t.slots.push((Some(name), label.clone()));
                    t.syms.push(Range {
                        start,
                        end,
                        slot: t.slots.len() - 1,
                        file_offset: 0,
                    });
                }
            }
        }
        t.slots.push((None, "?".into()));
        t.syms.sort_by_key(|r| r.start);
        t.maps.sort_by_key(|r| r.start);
        t
    }

    fn unmapped(&self) -> usize {
        self.slots.len().saturating_sub(1)
    }

    /// The range holding `ip`: a symbol's, else a mapping's, else the
    /// unmapped range around it.
    fn lookup(&self, ip: u64) -> Range {
        if let Some(r) = find(&self.syms, ip) {
            return r;
        }
        // Not in a symbol: the gap between the symbols around `ip` (the
        // range is cached for the next instructions, so it must not cover one).
        let i = self.syms.partition_point(|r| r.start <= ip);
        let lo = i
            .checked_sub(1)
            .and_then(|i| self.syms.get(i))
            .map_or(0, |r| r.end);
        let hi = self.syms.get(i).map_or(u64::MAX, |r| r.start);
        find(&self.maps, ip)
            .map(|m| Range {
                start: m.start.max(lo),
                end: m.end.min(hi),
                file_offset: m.file_offset + (m.start.max(lo) - m.start),
                ..m
            })
            .unwrap_or(Range {
                start: ip,
                end: ip.wrapping_add(1),
                slot: self.unmapped(),
                file_offset: 0,
            })
    }

    /// Whether a counter is a symbol's (not a file's or the unmapped one).
    fn is_symbol(&self, slot: usize) -> bool {
        matches!(self.slots.get(slot), Some((Some(_), _)))
    }

    /// End of the last symbol starting at or below `ip` (0 if none).
    fn symbol_end_below(&self, ip: u64) -> u64 {
        let i = self.syms.partition_point(|r| r.start <= ip);
        i.checked_sub(1)
            .and_then(|i| self.syms.get(i))
            .map_or(0, |r| r.end)
    }
}

/// The range of `v` (sorted, non-overlapping) holding `ip`.
fn find(v: &[Range], ip: u64) -> Option<Range> {
    let i = v.partition_point(|r| r.start <= ip);
    i.checked_sub(1)
        .and_then(|i| v.get(i))
        .filter(|r| ip < r.end)
        .copied()
}

/// Counts the decoded flow.
#[derive(Debug)]
pub struct Profiler {
    symbols: FunctionMap,
    counts: Vec<u64>,
    /// The last range looked up (consecutive instructions mostly share one).
    cur: Range,
    /// `cur` is a symbol's.
    cur_named: bool,
    insns: u64,
    b: BranchCounts,
    /// Conditional branches that disabled tracing (TIP.PGD, no TNT bit).
    cond_pgd: u64,
    /// A conditional branch whose outcome the next instruction tells: (ip, fall-through).
    pending_cond: Option<(u64, u64)>,
    /// Per branch IP: direct (jumps, calls) or SYSCALL/SYSENTER (far transfers).
    kinds: AddrMap<bool>,
    /// Instructions per IP outside any symbol.
    unnamed: AddrMap<u64>,
    /// Targets of near calls (function entries where symbols are missing).
    call_targets: AddrMap<()>,
    /// The last instruction was a near call.
    after_call: bool,
}

impl Profiler {
    /// A profiler with the symbols of `maps`.
    pub fn new(maps: &[MapLine]) -> Self {
        Self::with_symbols(FunctionMap::load(maps))
    }

    fn with_symbols(symbols: FunctionMap) -> Self {
        let counts = vec![0; symbols.slots.len()];
        Profiler {
            symbols,
            counts,
            cur: Range {
                start: 1,
                end: 0,
                slot: 0,
                file_offset: 0,
            },
            cur_named: false,
            insns: 0,
            b: BranchCounts::default(),
            cond_pgd: 0,
            pending_cond: None,
            kinds: AddrMap::default(),
            unnamed: AddrMap::default(),
            call_targets: AddrMap::default(),
            after_call: false,
        }
    }

    /// Execution continued at `ip` without an instruction in between (an
    /// asynchronous event at `ip`): settles a pending conditional branch.
    pub fn flow_at(&mut self, ip: u64) {
        self.resolve_cond(ip);
    }

    fn resolve_cond(&mut self, next_ip: u64) {
        if let Some((_, ft)) = self.pending_cond.take() {
            if next_ip == ft {
                self.b.cond_not_taken += 1;
            } else {
                self.b.cond_taken += 1;
            }
        }
    }

    /// One decoded instruction; `image` is what it was decoded from.
    pub fn insn(&mut self, insn: &InsnInfo, image: &Image) {
        self.insns += 1;
        let ip = insn.ip;
        self.resolve_cond(ip);
        if self.after_call {
            self.after_call = false;
            self.call_targets.insert(ip, ());
        }
        if !(self.cur.start <= ip && ip < self.cur.end) {
            self.cur = self.symbols.lookup(ip);
            self.cur_named = self.symbols.is_symbol(self.cur.slot);
        }
        if self.cur_named {
            if let Some(c) = self.counts.get_mut(self.cur.slot) {
                *c += 1;
            }
        } else {
            *self.unnamed.entry(ip).or_default() += 1;
        }
        let Some(class) = insn.class else { return };
        let flag = |kinds: &mut AddrMap<bool>, f: fn(InsnKind, bool) -> bool| {
            *kinds.entry(ip).or_insert_with(|| {
                decode_at(image, ip, insn.mode)
                    .map(|d| f(d.kind, d.is_direct()))
                    .unwrap_or(false)
            })
        };
        match class {
            InsnClass::Other | InsnClass::Ptwrite => {}
            InsnClass::CondJump => {
                self.pending_cond = Some((ip, ip.wrapping_add(u64::from(insn.size))))
            }
            InsnClass::Jump => {
                if flag(&mut self.kinds, |_, direct| direct) {
                    self.b.jump_direct += 1
                } else {
                    self.b.jump_indirect += 1
                }
            }
            InsnClass::Call => {
                self.after_call = true;
                if flag(&mut self.kinds, |_, direct| direct) {
                    self.b.call_direct += 1
                } else {
                    self.b.call_indirect += 1
                }
            }
            InsnClass::Return => self.b.returns += 1,
            InsnClass::FarCall | InsnClass::FarReturn | InsnClass::FarJump => {
                self.b.far += 1;
                if flag(&mut self.kinds, |k, _| {
                    matches!(k, InsnKind::Syscall | InsnKind::Sysenter)
                }) {
                    self.b.syscalls += 1;
                }
            }
        }
    }

    /// Tracing was disabled after the last instruction, by a branch to `ip`
    /// if known.
    pub fn disabled(&mut self, ip: Option<u64>) {
        if self.pending_cond.is_some() {
            self.cond_pgd += 1;
            match ip {
                Some(ip) => self.resolve_cond(ip),
                None => self.pending_cond = None,
            }
        }
    }

    /// The decoder lost the flow (an error, an overflow): the next
    /// instruction does not follow the last one.
    pub fn break_flow(&mut self) {
        self.pending_cond = None;
        self.after_call = false;
    }

    /// The profile; `trace` is the trace (its TNT bits split the returns).
    pub fn finish(mut self, trace: &[u8], config: &Config) -> Profile {
        self.pending_cond = None;
        let mut tnt_bits = 0u64;
        let mut d = PacketDecoder::new(trace, config);
        if d.sync_forward().is_ok() {
            for (_, p) in d.flatten() {
                if let Packet::Tnt8(t) | Packet::Tnt64(t) = p {
                    tnt_bits += u64::from(t.len());
                }
            }
        }
        let cond_tnt = self.b.conditional().saturating_sub(self.cond_pgd);
        self.b.returns_compressed = tnt_bits.saturating_sub(cond_tnt).min(self.b.returns);
        let mut functions: HashMap<(Option<String>, String), u64> = HashMap::new();
        for (slot, &n) in self.counts.iter().enumerate() {
            if n == 0 {
                continue;
            }
            if let Some((name, file)) = self.symbols.slots.get(slot) {
                *functions.entry((name.clone(), file.clone())).or_default() += n;
            }
        }
        // Code no symbol covers: attributed to the closest call target below
        // it in the same mapping and gap between symbols, named `file+0xOFFSET`.
        let mut targets: Vec<u64> = self.call_targets.keys().copied().collect();
        targets.sort_unstable();
        let sym = &self.symbols;
        for (&ip, &n) in &self.unnamed {
            let (file, entry) = match find(&sym.maps, ip) {
                Some(m) => {
                    let floor = sym.symbol_end_below(ip).max(m.start);
                    let i = targets.partition_point(|&t| t <= ip);
                    let entry = i
                        .checked_sub(1)
                        .and_then(|i| targets.get(i))
                        .filter(|&&t| t >= floor)
                        .map(|&t| t - m.start + m.file_offset);
                    let file = sym.slots.get(m.slot).map_or("?", |s| s.1.as_str());
                    (file.to_string(), entry)
                }
                None => ("?".to_string(), None),
            };
            let name = entry.map(|off| format!("{file}+{off:#x}"));
            *functions.entry((name, file)).or_default() += n;
        }
        let mut functions: Vec<FunctionCount> = functions
            .into_iter()
            .map(|((name, file), insns)| FunctionCount { name, file, insns })
            .collect();
        functions.sort_by(|a, b| {
            b.insns
                .cmp(&a.insns)
                .then_with(|| a.name.cmp(&b.name))
                .then_with(|| a.file.cmp(&b.file))
        });
        Profile {
            insns: self.insns,
            branches: self.b,
            functions,
        }
    }
}

impl Profile {
    /// The profile of two flows together: counts added, functions merged.
    pub fn merge(mut self, b: Profile) -> Profile {
        self.insns += b.insns;
        let (x, y) = (&mut self.branches, &b.branches);
        x.cond_taken += y.cond_taken;
        x.cond_not_taken += y.cond_not_taken;
        x.jump_direct += y.jump_direct;
        x.jump_indirect += y.jump_indirect;
        x.call_direct += y.call_direct;
        x.call_indirect += y.call_indirect;
        x.returns += y.returns;
        x.returns_compressed += y.returns_compressed;
        x.far += y.far;
        x.syscalls += y.syscalls;
        for f in b.functions {
            match self
                .functions
                .iter_mut()
                .find(|g| g.name == f.name && g.file == f.file)
            {
                Some(g) => g.insns += f.insns,
                None => self.functions.push(f),
            }
        }
        self.functions.sort_by(|p, q| {
            q.insns
                .cmp(&p.insns)
                .then_with(|| p.label().cmp(&q.label()))
        });
        self
    }

    /// The branch summary and the `top` hottest functions as text lines.
    pub fn report(&self, top: usize) -> String {
        use std::fmt::Write as _;
        let b = &self.branches;
        let mut t = String::new();
        let _ = writeln!(
            t,
            "  branches: {} in all; conditional {} ({} taken, {} not taken)",
            b.total(),
            b.conditional(),
            b.cond_taken,
            b.cond_not_taken
        );
        let _ = writeln!(
            t,
            "    jumps {} direct, {} indirect; calls {} direct, {} indirect",
            b.jump_direct, b.jump_indirect, b.call_direct, b.call_indirect
        );
        let _ = writeln!(
            t,
            "    returns {} ({} compressed, {} as TIP); far transfers {} ({} syscalls)",
            b.returns,
            b.returns_compressed,
            b.returns - b.returns_compressed,
            b.far,
            b.syscalls
        );
        let shown = top.min(self.functions.len());
        let _ = writeln!(
            t,
            "  hottest functions by instructions (top {shown} of {}):",
            self.functions.len()
        );
        for f in self.functions.iter().take(shown) {
            let share = if self.insns == 0 {
                0.0
            } else {
                f.insns as f64 * 100.0 / self.insns as f64
            };
            // Symbols get their file; the other labels already name it.
            let _ = match &f.name {
                Some(n) if !n.starts_with(&format!("{}+0x", f.file)) => {
                    writeln!(t, "    {share:6.2}% {:>12}  {n}  ({})", f.insns, f.file)
                }
                _ => writeln!(t, "    {share:6.2}% {:>12}  {}", f.insns, f.label()),
            };
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pt_encoder::ExecMode;

    fn info(ip: u64, size: u8, class: InsnClass) -> InsnInfo {
        InsnInfo {
            ip,
            size,
            mode: ExecMode::Bit64,
            speculative: false,
            isid: 0,
            class: Some(class),
        }
    }

    #[test]
    fn code_between_symbols_does_not_hide_them() {
        let r = |start, end, slot| Range {
            start,
            end,
            slot,
            file_offset: 0,
        };
        let symbols = FunctionMap {
            syms: vec![r(0x1100, 0x1200, 1)],
            maps: vec![r(0x1000, 0x2000, 0)],
            slots: vec![
                (None, "f".into()),
                (Some("g".into()), "f".into()),
                (None, "?".into()),
            ],
        };
        let image = Image::new();
        let mut p = Profiler::with_symbols(symbols);
        for ip in [0x1000, 0x10ff, 0x1100, 0x11ff, 0x1200, 0x1fff, 0x2000] {
            p.insn(&info(ip, 1, InsnClass::Other), &image);
        }
        let prof = p.finish(&[], &Config::default());
        let f: Vec<(String, u64)> = prof
            .functions
            .iter()
            .map(|f| (f.label(), f.insns))
            .collect();
        assert_eq!(
            f,
            [
                ("[f without symbol]".to_string(), 4),
                ("g".to_string(), 2),
                ("[? without symbol]".to_string(), 1)
            ]
        );
    }

    #[test]
    fn reads_eh_frame_hdr_tables() {
        // version 1, pcrel|sdata4 pointer, udata4 count, datarel|sdata4 table.
        let mut hdr = vec![1, 0x1b, 0x03, 0x3b, 0, 0, 0, 0, 2, 0, 0, 0];
        for (loc, fde) in [(-0x100i32, 0x40i32), (0x20, 0x60)] {
            hdr.extend(loc.to_le_bytes());
            hdr.extend(fde.to_le_bytes());
        }
        assert_eq!(eh_frame_hdr_starts(&hdr, 0x5000), [0x4f00, 0x5020]);
        // A table cut short gives what is there; other encodings give none.
        assert_eq!(eh_frame_hdr_starts(&hdr[..20], 0x5000), [0x4f00]);
        hdr[3] = 0x1b;
        assert!(eh_frame_hdr_starts(&hdr, 0x5000).is_empty());
        assert!(eh_frame_hdr_starts(&[], 0).is_empty());
    }

    #[test]
    fn counts_per_mapping_and_branch_outcomes() {
        // No ELF behind the mappings: one counter per file, unmapped code apart.
        let maps = vec![
            MapLine {
                start: 0x1000,
                end: 0x2000,
                file_offset: 0,
                perms: "r-xp".into(),
                path: "/nonexistent/a".into(),
            },
            MapLine {
                start: 0x3000,
                end: 0x4000,
                file_offset: 0,
                perms: "r-xp".into(),
                path: "/nonexistent/b".into(),
            },
        ];
        let image = Image::new();
        let mut p = Profiler::new(&maps);
        p.insn(&info(0x1000, 2, InsnClass::CondJump), &image);
        p.insn(&info(0x1002, 2, InsnClass::CondJump), &image); // not taken
        p.insn(&info(0x3000, 1, InsnClass::Return), &image); // taken
        p.insn(&info(0x3001, 2, InsnClass::CondJump), &image);
        p.disabled(Some(0x9000)); // taken, out of the range
        p.insn(&info(0x9000, 1, InsnClass::Other), &image);
        p.break_flow();
        p.insn(&info(0x3003, 2, InsnClass::Call), &image);
        p.insn(&info(0x1800, 1, InsnClass::Other), &image);
        p.insn(&info(0x1801, 1, InsnClass::Other), &image);
        let prof = p.finish(&[], &Config::default());
        assert_eq!(prof.insns, 8);
        assert_eq!(prof.branches.cond_not_taken, 1);
        assert_eq!(prof.branches.cond_taken, 2);
        assert_eq!(prof.branches.returns, 1);
        assert_eq!(prof.branches.returns_compressed, 0);
        // No image to decode from: the call counts as indirect.
        assert_eq!(prof.branches.call_indirect, 1);
        let f: Vec<(String, u64)> = prof
            .functions
            .iter()
            .map(|f| (f.label(), f.insns))
            .collect();
        // The call target names the code after it; code before it stays unnamed.
        assert_eq!(
            f,
            [
                ("[b without symbol]".to_string(), 3),
                ("[a without symbol]".to_string(), 2),
                ("a+0x800".to_string(), 2),
                ("[? without symbol]".to_string(), 1)
            ]
        );
        let r = prof.report(2);
        assert!(r.contains("top 2 of 4"), "{r}");
        assert!(
            r.contains(" 37.50%            3  [b without symbol]\n"),
            "{r}"
        );
        assert!(!r.contains("a+0x800"), "{r}");
    }
}
