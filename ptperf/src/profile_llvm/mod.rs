//! LLVM sample profiles (AutoFDO) from a decoded flow, written directly: the
//! text format `llvm-profdata merge --sample` reads and clang's
//! `-fprofile-sample-use` takes once converted (or as it is).
//!
//! A PT trace holds every executed instruction, so the counts here are exact
//! execution counts rather than the estimates a sampled LBR profile gives:
//!
//! 1. [`Collector`] counts the decoded blocks (each distinct block's
//!    instruction addresses are taken once, then only counted) and the taken
//!    calls and jumps with their targets.
//! 2. [`LlvmProfile::build`] maps every executed address through the DWARF of
//!    its file ([`dwarf`]) to its chain of inlined frames and its line and
//!    discriminator, as LLVM's sample profile keys them:
//!    - a function's samples are keyed by line offsets from the function's
//!      first line (`DW_AT_decl_line`), with the base discriminator;
//!    - a line's count is the largest count of its instructions, scaled by
//!      the duplication factor of unrolled or vectorized copies (LLVM takes
//!      a block's weight as its hottest instruction's: summing the
//!      instructions of a line would count a line of five instructions five
//!      times);
//!    - inlined code goes under its call site in the caller's profile, as a
//!      nested profile of the inlined function;
//!    - a call instruction's line lists the functions it called with counts;
//!    - a function's total is the instructions executed in it (inlined code
//!      included), its head count the calls (and tail jumps) to its entry.
//! 3. [`LlvmProfile::write_text`] writes the text format:
//!
//! ```text
//! main:1200:1
//!  3: 100
//!  4.1: 100 work:100
//!  5: helper:300
//!   1: 100
//! ```

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use pt_decoder::driver::BlockItem;
use pt_decoder::flow::Block;
use pt_decoder::image::Image;
use pt_decoder::insn::{decode_at, InsnClass};

pub mod cli;
pub mod dwarf;
pub mod perf;

use dwarf::{base_discriminator, duplication_factor, DebugInfo, Frame};

/// Counts of a decoded flow by instruction address, and its taken calls and jumps.
#[derive(Debug, Default)]
pub struct Collector {
    /// Distinct blocks, by (first IP, last IP, instructions): their slot.
    slots: HashMap<(u64, u64, u32), u32>,
    /// Per slot: its addresses and the direct calls and jumps it follows
    /// inside, as ranges of `ips` and `inner`, and its count.
    spans: Vec<Span>,
    ips: Vec<u64>,
    /// Taken direct branches inside blocks: (branch IP, target, is a call).
    inner: Vec<(u64, u64, bool)>,
    /// (branch IP, target) → (calls, jumps), for the branches that end blocks.
    edges: HashMap<(u64, u64), (u64, u64)>,
    /// Instructions counted.
    insns: u64,
}

#[derive(Clone, Copy, Debug)]
struct Span {
    ips: (u32, u32),
    inner: (u32, u32),
    count: u64,
}

/// The counts of a [`Collector`]: per address, and per taken call or jump.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddrCounts {
    /// (address, executions), sorted by address.
    pub insns: Vec<(u64, u64)>,
    /// Taken near calls and jumps: (branch address, target, calls, jumps), sorted.
    pub edges: Vec<(u64, u64, u64, u64)>,
}

impl Collector {
    /// An empty collector.
    pub fn new() -> Self {
        Self::default()
    }

    /// Instructions counted so far.
    pub fn insns(&self) -> u64 {
        self.insns
    }

    /// One decoded block, from `image`. A block seen for the first time is
    /// walked in `image` for its instruction addresses and the direct calls and
    /// jumps inside it (a block goes on through them); after that it is only
    /// counted.
    pub fn block(&mut self, item: &BlockItem, image: &Image) {
        let b = &item.block;
        if b.ninsn == 0 {
            return;
        }
        self.insns += u64::from(b.ninsn);
        let key = (b.ip, b.end_ip, b.ninsn);
        let slot = match self.slots.get(&key) {
            Some(&s) => s,
            None => {
                let (got, inner) = walk(image, b);
                let inner_start = self.inner.len() as u32;
                self.inner.extend_from_slice(&inner);
                let s = self.spans.len() as u32;
                self.spans.push(Span {
                    ips: (self.ips.len() as u32, got.len() as u32),
                    inner: (inner_start, self.inner.len() as u32 - inner_start),
                    count: 0,
                });
                self.ips.extend_from_slice(&got);
                self.slots.insert(key, s);
                s
            }
        };
        if let Some(span) = self.spans.get_mut(slot as usize) {
            span.count += 1;
        }
        if let (Some(class @ (InsnClass::Call | InsnClass::Jump)), Some(to)) =
            (b.class, item.next_ip)
        {
            let e = self.edges.entry((b.end_ip, to)).or_default();
            if class == InsnClass::Call {
                e.0 += 1;
            } else {
                e.1 += 1;
            }
        }
    }

    /// The counts per address and per branch.
    pub fn finish(mut self) -> AddrCounts {
        let mut per: HashMap<u64, u64> = HashMap::new();
        for span in &self.spans {
            let range = |(s, n): (u32, u32)| s as usize..s as usize + n as usize;
            for &ip in self.ips.get(range(span.ips)).unwrap_or(&[]) {
                *per.entry(ip).or_default() += span.count;
            }
            for &(from, to, call) in self.inner.get(range(span.inner)).unwrap_or(&[]) {
                let e = self.edges.entry((from, to)).or_default();
                if call {
                    e.0 += span.count;
                } else {
                    e.1 += span.count;
                }
            }
        }
        let mut insns: Vec<(u64, u64)> = per.into_iter().collect();
        insns.sort_unstable();
        let mut edges: Vec<(u64, u64, u64, u64)> = self
            .edges
            .into_iter()
            .map(|((f, t), (c, j))| (f, t, c, j))
            .collect();
        edges.sort_unstable();
        AddrCounts { insns, edges }
    }
}

/// The instruction addresses of `b` and the direct calls and jumps it follows
/// inside, walked in `image` from its first instruction; just its two ends if
/// the walk does not end at its last one (code changed, or missing).
#[allow(clippy::type_complexity)]
fn walk(image: &Image, b: &Block) -> (Vec<u64>, Vec<(u64, u64, bool)>) {
    let mut ips = Vec::with_capacity(b.ninsn as usize);
    let mut inner = Vec::new();
    let mut ip = b.ip;
    for k in 0..b.ninsn {
        ips.push(ip);
        if k + 1 == b.ninsn {
            break;
        }
        let Ok(insn) = decode_at(image, ip, b.mode) else {
            break;
        };
        ip = match (insn.class, insn.target) {
            (InsnClass::Call, Some(t)) => {
                inner.push((insn.ip, t, true));
                t
            }
            (InsnClass::Jump, Some(t)) => {
                inner.push((insn.ip, t, false));
                t
            }
            _ => insn.next_ip(),
        };
    }
    if ips.len() == b.ninsn as usize && ips.last() == Some(&b.end_ip) {
        return (ips, inner);
    }
    let ends = if b.ip == b.end_ip {
        vec![b.ip]
    } else {
        vec![b.ip, b.end_ip]
    };
    (ends, Vec::new())
}

/// A file mapped into the traced address space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// The file.
    pub path: PathBuf,
    /// Where the mapping starts and ends (exclusive).
    pub start: u64,
    /// End of the mapping.
    pub end: u64,
    /// The file offset mapped at `start`.
    pub file_offset: u64,
}

/// A line location in a function: the line's offset from the function's first
/// line and its base discriminator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LineLoc {
    /// Line offset (LLVM keeps 16 bits of it).
    pub offset: u32,
    /// Base discriminator.
    pub discriminator: u32,
}

impl std::fmt::Display for LineLoc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.discriminator == 0 {
            write!(f, "{}", self.offset)
        } else {
            write!(f, "{}.{}", self.offset, self.discriminator)
        }
    }
}

/// The samples at one line location.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BodySample {
    /// Executions of the line (its hottest instruction's count).
    pub count: u64,
    /// Functions called from the line, with counts.
    pub calls: BTreeMap<String, u64>,
}

/// The samples of one function, or of one inlined copy of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FunctionSamples {
    /// The function's linkage name.
    pub name: String,
    /// Instructions executed in it (in inlined code too).
    pub total: u64,
    /// Calls to its entry (out-of-line functions only).
    pub head: u64,
    /// Line counts.
    pub body: BTreeMap<LineLoc, BodySample>,
    /// Inlined calls: per call site, the inlined functions' samples by name.
    pub inlined: BTreeMap<LineLoc, BTreeMap<String, FunctionSamples>>,
}

impl FunctionSamples {
    fn new(name: &str) -> Self {
        FunctionSamples {
            name: name.to_string(),
            ..Default::default()
        }
    }

    /// Adds `other`'s samples (of the same function) to these.
    pub fn merge(&mut self, other: FunctionSamples) {
        self.total += other.total;
        self.head += other.head;
        for (loc, b) in other.body {
            let mine = self.body.entry(loc).or_default();
            mine.count += b.count;
            for (callee, n) in b.calls {
                *mine.calls.entry(callee).or_default() += n;
            }
        }
        for (loc, callees) in other.inlined {
            let mine = self.inlined.entry(loc).or_default();
            for (name, f) in callees {
                match mine.get_mut(&name) {
                    Some(m) => m.merge(f),
                    None => {
                        mine.insert(name, f);
                    }
                }
            }
        }
    }

    fn write(&self, w: &mut dyn Write, depth: usize) -> io::Result<()> {
        if depth == 0 {
            writeln!(w, "{}:{}:{}", self.name, self.total, self.head)?;
        } else {
            writeln!(w, "{}:{}", self.name, self.total)?;
        }
        let pad = depth + 1;
        // Body lines and inlined call sites, each in location order.
        for (loc, s) in &self.body {
            write!(w, "{:pad$}{loc}: {}", "", s.count)?;
            for (callee, n) in &s.calls {
                write!(w, " {callee}:{n}")?;
            }
            writeln!(w)?;
        }
        for (loc, callees) in &self.inlined {
            for f in callees.values() {
                write!(w, "{:pad$}{loc}: ", "")?;
                f.write(w, depth + 1)?;
            }
        }
        Ok(())
    }

    /// The body sample at `line` (an absolute source line) and discriminator,
    /// in this function (`decl_line` is its first line).
    pub fn at_line(&self, line: u32, decl_line: u32, discriminator: u32) -> Option<&BodySample> {
        self.body.get(&line_loc(line, decl_line, discriminator))
    }
}

fn line_loc(line: u32, decl_line: u32, discriminator: u32) -> LineLoc {
    LineLoc {
        offset: line.wrapping_sub(decl_line) & 0xffff,
        discriminator: base_discriminator(discriminator),
    }
}

/// An LLVM sample profile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LlvmProfile {
    /// Out-of-line functions by name.
    pub functions: BTreeMap<String, FunctionSamples>,
    /// Executed instructions no DWARF described (no file, no debug info, no
    /// function): left out of the profile.
    pub unattributed: u64,
}

/// A module's debug information and where it is loaded.
struct Loaded {
    start: u64,
    end: u64,
    /// Run-time address minus link-time address.
    bias: u64,
    info: usize,
}

/// The modules of an address space with their DWARF, each file read once.
struct AddressSpace {
    loaded: Vec<Loaded>,
    infos: Vec<DebugInfo>,
}

/// The DWARF of the ELF file `data` (at `path`): its own, else a separate
/// debug file's ([`pt_elf::DebugSearch::dwarf`]).
fn debug_info(path: &Path, data: &[u8]) -> Option<DebugInfo> {
    pt_elf::DebugSearch::default().dwarf(path, data, |d| {
        DebugInfo::parse(d).ok().filter(|i| !i.is_empty())
    })
}

impl AddressSpace {
    fn new(modules: &[Module]) -> Self {
        let mut s = AddressSpace {
            loaded: Vec::new(),
            infos: Vec::new(),
        };
        let mut by_path: HashMap<&Path, Option<(usize, Vec<u8>)>> = HashMap::new();
        for m in modules {
            let entry = by_path.entry(&m.path).or_insert_with(|| {
                let data = std::fs::read(&m.path).ok()?;
                let info = debug_info(&m.path, &data)?;
                s.infos.push(info);
                Some((s.infos.len() - 1, data))
            });
            let Some((info, data)) = entry else { continue };
            let Ok(obj) = object::File::parse(&data[..]) else {
                continue;
            };
            if let Some(bias) = pt_elf::bias::load_bias(&obj, m.start, m.file_offset) {
                s.loaded.push(Loaded {
                    start: m.start,
                    end: m.end,
                    bias,
                    info: *info,
                });
            }
        }
        s.loaded.sort_by_key(|l| l.start);
        s
    }

    /// The debug info and link-time address of `addr`.
    fn find(&self, addr: u64) -> Option<(&DebugInfo, u64)> {
        let i = self.loaded.partition_point(|l| l.start <= addr);
        let l = self.loaded.get(i.checked_sub(1)?)?;
        (addr < l.end).then(|| (&self.infos[l.info], addr.wrapping_sub(l.bias)))
    }
}

impl LlvmProfile {
    /// The profile of `counts`, whose addresses lie in `modules`.
    pub fn build(counts: &AddrCounts, modules: &[Module]) -> Self {
        let space = AddressSpace::new(modules);
        let mut p = LlvmProfile::default();
        let mut frames: Vec<Frame<'_>> = Vec::new();
        for &(addr, n) in &counts.insns {
            let Some((info, link)) = space.find(addr) else {
                p.unattributed += n;
                continue;
            };
            info.frames(link, &mut frames);
            let Some(node) = p.node(&frames, n) else {
                p.unattributed += n;
                continue;
            };
            let Some(leaf) = frames.last() else { continue };
            if leaf.line == 0 {
                continue;
            }
            let count = n.saturating_mul(u64::from(duplication_factor(leaf.discriminator)));
            let s = node
                .body
                .entry(line_loc(leaf.line, leaf.decl_line, leaf.discriminator))
                .or_default();
            s.count = s.count.max(count);
        }
        for &(from, to, calls, jumps) in &counts.edges {
            let Some((tinfo, tlink)) = space.find(to) else {
                continue;
            };
            let Some(callee) = tinfo.function_at(tlink) else {
                continue;
            };
            let callee = callee.to_string();
            let source = space.find(from).and_then(|(i, l)| {
                i.frames(l, &mut frames);
                frames.first().map(|f| f.name.to_string())
            });
            // Head samples: calls to the entry, and jumps into it from elsewhere
            // (tail calls), not a loop back to a function's first instruction.
            let head = calls
                + if source.as_deref() != Some(&callee) {
                    jumps
                } else {
                    0
                };
            if head > 0 {
                if let Some(f) = p.functions.get_mut(&callee) {
                    f.head += head;
                }
            }
            if calls == 0 || source.is_none() {
                continue;
            }
            // The call's line lists the callee.
            let (info, link) = match space.find(from) {
                Some(x) => x,
                None => continue,
            };
            info.frames(link, &mut frames);
            let Some(leaf) = frames.last().copied() else {
                continue;
            };
            if leaf.line == 0 {
                continue;
            }
            if let Some(node) = p.node(&frames, 0) {
                let s = node
                    .body
                    .entry(line_loc(leaf.line, leaf.decl_line, leaf.discriminator))
                    .or_default();
                *s.calls.entry(callee).or_default() += calls;
            }
        }
        p
    }

    /// The profile node of the innermost of `frames`, adding `n` to the totals
    /// on the way.
    fn node(&mut self, frames: &[Frame<'_>], n: u64) -> Option<&mut FunctionSamples> {
        let (first, rest) = frames.split_first()?;
        let mut node = self
            .functions
            .entry(first.name.to_string())
            .or_insert_with(|| FunctionSamples::new(first.name));
        node.total += n;
        let mut caller = first;
        for f in rest {
            let loc = line_loc(caller.line, caller.decl_line, caller.discriminator);
            node = node
                .inlined
                .entry(loc)
                .or_default()
                .entry(f.name.to_string())
                .or_insert_with(|| FunctionSamples::new(f.name));
            node.total += n;
            caller = f;
        }
        Some(node)
    }

    /// Adds `other`'s samples to these (the profiles of several processes).
    pub fn merge(&mut self, other: LlvmProfile) {
        for (name, f) in other.functions {
            match self.functions.get_mut(&name) {
                Some(mine) => mine.merge(f),
                None => {
                    self.functions.insert(name, f);
                }
            }
        }
        self.unattributed += other.unattributed;
    }

    /// Out-of-line functions, hottest (most instructions) first.
    pub fn hottest(&self) -> Vec<&FunctionSamples> {
        let mut v: Vec<&FunctionSamples> = self.functions.values().collect();
        v.sort_by(|a, b| b.total.cmp(&a.total).then_with(|| a.name.cmp(&b.name)));
        v
    }

    /// Writes LLVM's text sample-profile format, hottest function first.
    pub fn write_text(&self, w: &mut dyn Write) -> io::Result<()> {
        for f in self.hottest() {
            f.write(w, 0)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pt_decoder::event::Timestamp;
    use pt_decoder::flow::Block;
    use pt_encoder::ExecMode;

    fn block(ip: u64, end_ip: u64, ninsn: u32, class: InsnClass, next: Option<u64>) -> BlockItem {
        BlockItem {
            block: Block {
                ip,
                end_ip,
                mode: ExecMode::Bit64,
                ninsn,
                speculative: false,
                truncated: false,
                isid: 0,
                class: Some(class),
            },
            offset: 0,
            time: Timestamp::default(),
            next_ip: next,
        }
    }

    #[test]
    fn counts_blocks_once_per_address_and_edges() {
        // 1000: mov eax, 1   1005: call 1020   100a: ret
        // 1020: add eax, 1   1023: jmp 1030    1030: ret
        let mut code = vec![0xcc; 0x31];
        code[..11].copy_from_slice(&[0xb8, 1, 0, 0, 0, 0xe8, 0x16, 0, 0, 0, 0xc3]);
        code[0x20..0x25].copy_from_slice(&[0x83, 0xc0, 0x01, 0xeb, 0x0b]);
        code[0x30] = 0xc3;
        let mut image = Image::new();
        image.add_bytes(0x1000, code, "code").unwrap();
        let mut c = Collector::new();
        // The block goes on through the call and the jump.
        for _ in 0..3 {
            c.block(
                &block(0x1000, 0x1030, 5, InsnClass::Return, Some(0x100a)),
                &image,
            );
        }
        c.block(
            &block(0x100a, 0x100a, 1, InsnClass::Return, Some(0x2000)),
            &image,
        );
        // Code that is not there: the block's ends.
        c.block(
            &block(0x3000, 0x3010, 4, InsnClass::Call, Some(0x1020)),
            &image,
        );
        assert_eq!(c.insns(), 20);
        let a = c.finish();
        assert_eq!(
            a.insns,
            [
                (0x1000, 3),
                (0x1005, 3),
                (0x100a, 1),
                (0x1020, 3),
                (0x1023, 3),
                (0x1030, 3),
                (0x3000, 1),
                (0x3010, 1)
            ]
        );
        assert_eq!(
            a.edges,
            [
                (0x1005, 0x1020, 3, 0),
                (0x1023, 0x1030, 0, 3),
                (0x3010, 0x1020, 1, 0)
            ]
        );
    }

    #[test]
    fn text_format_nests_inlined_calls() {
        let mut f = FunctionSamples::new("main");
        f.total = 1200;
        f.head = 1;
        f.body.insert(
            LineLoc {
                offset: 3,
                discriminator: 0,
            },
            BodySample {
                count: 100,
                calls: BTreeMap::new(),
            },
        );
        f.body.insert(
            LineLoc {
                offset: 4,
                discriminator: 1,
            },
            BodySample {
                count: 100,
                calls: [("work".to_string(), 100)].into(),
            },
        );
        let mut h = FunctionSamples::new("helper");
        h.total = 300;
        h.body.insert(
            LineLoc {
                offset: 1,
                discriminator: 0,
            },
            BodySample {
                count: 100,
                calls: BTreeMap::new(),
            },
        );
        f.inlined
            .entry(LineLoc {
                offset: 5,
                discriminator: 0,
            })
            .or_default()
            .insert("helper".into(), h);
        let p = LlvmProfile {
            functions: [("main".to_string(), f)].into(),
            unattributed: 0,
        };
        let mut out = Vec::new();
        p.write_text(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "main:1200:1\n 3: 100\n 4.1: 100 work:100\n 5: helper:300\n  1: 100\n"
        );
    }
}
