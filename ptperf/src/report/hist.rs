//! The histogram behind `ptperf report`: samples added up by (event, command,
//! shared object, symbol), perf's finest rows, at a few nanoseconds a sample.
//!
//! A sample's row depends on its event, its thread's name and where its IP is.
//! Consecutive samples nearly always share all three, so each is checked
//! against the last sample's: the event and command by the name's identity, the
//! place by the span of addresses that resolve the same way (one symbol, or one
//! 1024-byte block of code perf names address by address, whose periods are
//! added up in an array by address and turned into rows at the end). Only when
//! the IP leaves that span is it looked up again, first in a direct-mapped cache
//! of spans by 64-byte line, and only then resolved through the mappings and the
//! symbol tables. Nothing is allocated per sample.

use std::rc::Rc;

use pt_perf::session::Session;

use pt_elf::{SymbolOptions, Symbols, TableId};
use pt_perf::code::CodeWalker;
use pt_perf::decode::PlainInsn;
use pt_perf::sample::{Kind, Sample};

pub(crate) use pt_encoder::hash::{IntMap as FxMap, IpHasher as FxHasher};

/// What a row's symbol column is: a symbol (its name and start), or an address
/// perf has no symbol for (in the dso's address space when mapped, else the IP).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SymKey {
    /// A symbol: its name, and its start in the dso.
    Named(Rc<str>, u64),
    /// No symbol: the address.
    Addr(u64),
}

/// Where samples landed, as a report row sees it: the shared object's short name
/// (`None`: outside any mapping) and the symbol.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Loc {
    /// The shared object's short name.
    pub dso: Option<Rc<str>>,
    /// The symbol.
    pub sym: SymKey,
}

/// One row: a command and a location of one event, and what landed there.
#[derive(Clone, Copy, Debug)]
pub struct Row {
    /// The command ([`Hists::comm`]).
    pub comm: u32,
    /// The location ([`Hists::loc`]).
    pub loc: u32,
    /// Sum of the samples' periods.
    pub period: u64,
}

/// One event's rows.
#[derive(Debug)]
pub struct Hist {
    /// Which event.
    pub kind: Kind,
    /// Its rows (after [`Hists::finish`]).
    pub rows: Vec<Row>,
    /// Sum of all periods.
    pub total: u64,
    /// How many samples.
    pub nr: u64,
}

/// No entry (in the `u32` tables).
const NONE: u32 = u32::MAX;
/// Bytes of a block of code whose addresses are named one by one.
const BLOCK: u64 = 1024;
/// Lines of the span cache (a power of two), and the line size's bits.
const SPAN_SLOTS: usize = 1 << 12;
const LINE_BITS: u32 = 6;
/// Entries of the cache of call chain locations: 2^this.
const LOC_CACHE_BITS: u32 = 14;

/// Addresses `[lo, lo + len)` of one code image that resolve the same way, for
/// one (event, command) pair: into row `row`, or (`row` [`NONE`]) address by
/// address into `periods[ip + index]` (`index` wraps: the block's first period's
/// index minus its first address).
#[derive(Clone, Copy, Debug)]
struct Span {
    code: u64,
    pid: i32,
    ctx: u32,
    row: u32,
    lo: u64,
    len: u64,
    index: u64,
}

/// Periods by address of [`BLOCK`] bytes of code perf names by address, for one
/// (event, command) pair.
struct Block {
    hist: u32,
    comm: u32,
    ctx: u32,
    /// The first address (a multiple of [`BLOCK`]).
    base: u64,
    /// The shared object ([`NONE`]: none) and what turns an IP into its address
    /// there.
    dso: u32,
    bias: u64,
    /// Where its periods start in [`Hists::periods`].
    first: usize,
}

/// Where the addresses around one are, as [`Hists::resolve`] finds them.
enum Place {
    /// One location for all.
    Loc(u32),
    /// Named by address: the shared object ([`NONE`]: none) and the bias.
    ByAddr(u32, u64),
}

/// The context of the last sample: event and command.
#[derive(Clone, Copy)]
struct Ctx {
    kind: Kind,
    /// The command name's address (names are borrowed from the session).
    comm_ptr: *const u8,
    comm_len: usize,
    /// The (event, command) pair's number.
    id: u32,
    hist: u32,
    comm: u32,
    /// The last sample's thread and time (`u64::MAX`: none): the command is the
    /// same while they are.
    tid: i32,
    time: u64,
}

/// Instruction samples counted by place in the code walker's cache
/// ([`Hists::add_counts`]) before they are added up: a difference array over
/// the cache's instructions (a run of them adds one at its first and takes one
/// off after its last), and the range of it in use.
struct Tally<'s> {
    /// A sample of them: event, thread, time, process and code image.
    like: Sample,
    comm: Option<&'s str>,
    /// The walker's cache.
    ci: u32,
    diff: Vec<i64>,
    lo: usize,
    hi: usize,
}

/// Tallies kept at once (one per command, process and image at work; the
/// oldest is added up when another is needed).
const TALLIES: usize = 8;

/// Samples added up into rows.
pub struct Hists<'s, 'a> {
    session: &'s Session<'a>,
    symbols: Symbols,
    /// Every mapping's first and last-plus-one address, sorted: between two
    /// neighbours the set of mappings holding an address does not change.
    cuts: Vec<u64>,
    /// The histograms, by event in the order first seen.
    pub hists: Vec<Hist>,
    comms: Vec<Rc<str>>,
    comm_ids: FxMap<Rc<str>, u32>,
    /// (event, command) pairs by number.
    ctx_ids: FxMap<(u32, u32), u32>,
    locs: Vec<Loc>,
    loc_ids: FxMap<Loc, u32>,
    /// Shared objects' short names, by number, by recorded name and by short
    /// name (one number a short name: perf tells dsos apart by it).
    dsos: Vec<Rc<str>>,
    dso_ids: FxMap<String, u32>,
    short_ids: FxMap<Rc<str>, u32>,
    /// Locations named by address, by (dso, address).
    addr_locs: FxMap<(u32, u64), u32>,
    sym_names: FxMap<(usize, u32), Rc<str>>,
    /// Symbol tables by mapping (its address in the session), `None`: no code.
    tables: FxMap<usize, Option<TableId>>,
    /// Rows by ((event, command) pair, location), numbered across events.
    rows: FxMap<(u32, u32), u32>,
    /// By row: (event, command, location), and the sum of its periods.
    row_info: Vec<(u32, u32, u32)>,
    row_periods: Vec<u64>,
    blocks: Vec<Block>,
    /// The blocks' periods by address, one block after the other.
    periods: Vec<u64>,
    block_ids: FxMap<(u32, u64, i32, u64), u32>,
    /// Where in `periods` samples of period 0 landed.
    zero_hits: Vec<usize>,
    span: Span,
    spans: Vec<Span>,
    /// Locations of call chain addresses by (code, pid, ip): as a sample's and
    /// as a chain entry's.
    loc_cache: Vec<(u64, i32, u64, u32, u32)>,
    ctx: Ctx,
    /// The current event's period and sample count since its last change.
    total: u64,
    nr: u64,
    /// Instruction samples counted by place, not added up yet.
    tallies: Vec<Tally<'s>>,
}

const EMPTY: Span = Span {
    code: u64::MAX,
    pid: i32::MIN,
    ctx: NONE,
    row: NONE,
    lo: 0,
    len: 0,
    index: 0,
};

impl<'s, 'a> Hists<'s, 'a> {
    /// Empty histograms over `session`'s samples, their symbols loaded as
    /// `symbols` says.
    pub fn new(session: &'s Session<'a>, symbols: SymbolOptions) -> Self {
        let mut cuts: Vec<u64> = session
            .mappings()
            .iter()
            .flat_map(|m| [m.start, m.end()])
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        Hists {
            session,
            symbols: Symbols::new(symbols),
            cuts,
            hists: Vec::new(),
            comms: Vec::new(),
            comm_ids: FxMap::default(),
            ctx_ids: FxMap::default(),
            locs: Vec::new(),
            loc_ids: FxMap::default(),
            dsos: Vec::new(),
            dso_ids: FxMap::default(),
            short_ids: FxMap::default(),
            addr_locs: FxMap::default(),
            sym_names: FxMap::default(),
            tables: FxMap::default(),
            rows: FxMap::default(),
            row_info: Vec::new(),
            row_periods: Vec::new(),
            blocks: Vec::new(),
            periods: Vec::new(),
            block_ids: FxMap::default(),
            zero_hits: Vec::new(),
            span: EMPTY,
            spans: vec![EMPTY; SPAN_SLOTS],
            loc_cache: vec![(0, 0, 0, NONE, NONE); 1 << LOC_CACHE_BITS],
            ctx: Ctx {
                kind: Kind::Instructions,
                comm_ptr: std::ptr::null(),
                comm_len: usize::MAX,
                id: NONE,
                hist: NONE,
                comm: NONE,
                tid: i32::MIN,
                time: 0,
            },
            total: 0,
            nr: 0,
            tallies: Vec::new(),
        }
    }

    /// Command `id`'s name.
    pub fn comm(&self, id: u32) -> &Rc<str> {
        &self.comms[id as usize]
    }

    /// Location `id`.
    pub fn loc(&self, id: u32) -> &Loc {
        &self.locs[id as usize]
    }

    /// Adds sample `s`; `comm` names its thread (`None`: unknown), asked only
    /// when the thread or the time changed.
    #[inline(always)]
    pub fn add<'c>(&mut self, s: &Sample, comm: impl FnOnce() -> Option<&'c str>) {
        let t = s.time.unwrap_or(u64::MAX);
        let c = &self.ctx;
        if c.kind != s.kind || c.tid != s.tid || c.time != t {
            self.check_ctx(s.kind, s.tid, t, comm());
        }
        self.land(s, s.ip, s.period, 1);
    }

    /// Adds `nr` samples of `period` in all at `ip` (of sample `s`'s process,
    /// code and context).
    #[inline(always)]
    fn land(&mut self, s: &Sample, ip: u64, period: u64, nr: u64) {
        let sp = &self.span;
        if !(sp.code == s.code && sp.pid == s.pid && ip.wrapping_sub(sp.lo) < sp.len) {
            self.find_span(s, ip);
        }
        self.total += period;
        self.nr += nr;
        let sp = &self.span;
        if sp.row != NONE {
            self.row_periods[sp.row as usize] += period;
        } else {
            let i = ip.wrapping_add(sp.index) as usize;
            self.periods[i] += period;
            if period == 0 {
                self.zero_hits.push(i);
            }
        }
    }

    /// Adds instruction sample `s` and the run after it (as [`Self::add`] and
    /// [`Self::add_run`]); when the context is the last sample's and the whole
    /// run (one stretch of code, IPs going up) lies in the last span, at once.
    pub fn add_insns<'c>(
        &mut self,
        s: &Sample,
        more: &[PlainInsn],
        comm: impl FnOnce() -> Option<&'c str>,
    ) {
        let t = s.time.unwrap_or(u64::MAX);
        let c = &self.ctx;
        let sp = &self.span;
        let last_ip = more.last().map_or(s.ip, |p| p.ip);
        if c.kind == s.kind
            && c.tid == s.tid
            && c.time == t
            && sp.code == s.code
            && sp.pid == s.pid
            && s.ip.wrapping_sub(sp.lo) < sp.len
            && last_ip.wrapping_sub(sp.lo) < sp.len
            && s.period != 0
        {
            let n = more.len() as u64;
            self.total += s.period + n;
            self.nr += 1 + n;
            if sp.row != NONE {
                self.row_periods[sp.row as usize] += s.period + n;
            } else {
                let index = sp.index;
                self.periods[s.ip.wrapping_add(index) as usize] += s.period;
                for p in more {
                    self.periods[p.ip.wrapping_add(index) as usize] += 1;
                }
            }
            return;
        }
        self.add(s, comm);
        self.add_run(s, more);
    }

    /// Adds a run of instruction samples right after [`Self::add`] took `s`:
    /// one for each of `more`, each as `s` but for its IP and a period of 1
    /// ([`pt_perf::synth::SampleSink::insns`]).
    pub fn add_run(&mut self, s: &Sample, more: &[PlainInsn]) {
        let n = more.len() as u64;
        self.total += n;
        self.nr += n;
        let (code, pid) = (s.code, s.pid);
        // A run is one stretch of code, its IPs going up: with both ends in the
        // span, so is all of it.
        let sp = &self.span;
        if let (Some(first), Some(last)) = (more.first(), more.last()) {
            if sp.code == code
                && sp.pid == pid
                && first.ip.wrapping_sub(sp.lo) < sp.len
                && last.ip.wrapping_sub(sp.lo) < sp.len
            {
                if sp.row != NONE {
                    self.row_periods[sp.row as usize] += n;
                } else {
                    // No symbol: a period per address.
                    let index = sp.index;
                    for p in more {
                        self.periods[p.ip.wrapping_add(index) as usize] += 1;
                    }
                }
                return;
            }
        }
        // The span in registers; a symbol's count kept until the run leaves it.
        let mut sp = self.span;
        let mut pending = 0u64;
        for p in more {
            if p.ip.wrapping_sub(sp.lo) >= sp.len || sp.code != code || sp.pid != pid {
                if sp.row != NONE {
                    self.row_periods[sp.row as usize] += pending;
                }
                pending = 0;
                self.find_span(s, p.ip);
                sp = self.span;
            }
            if sp.row != NONE {
                pending += 1;
            } else {
                self.periods[p.ip.wrapping_add(sp.index) as usize] += 1;
            }
        }
        if sp.row != NONE {
            self.row_periods[sp.row as usize] += pending;
        }
    }

    /// Adds instruction samples as [`pt_perf::synth::SampleSink::insn_counts`]
    /// hands them over (`comm` names their thread): counted by place in
    /// `walker`'s caches, added up into rows by [`Self::add_tallies`].
    pub fn add_counts(
        &mut self,
        like: &Sample,
        comm: Option<&'s str>,
        walker: &CodeWalker,
        spans: &[[u32; 3]],
    ) {
        // The event's histogram exists from its first sample on (the tables
        // come in the order of their events' first samples).
        self.check_ctx(like.kind, like.tid, like.time.unwrap_or(u64::MAX), comm);
        let same = |t: &Tally, ci: u32| {
            t.ci == ci
                && t.like.kind == like.kind
                && t.like.code == like.code
                && t.like.pid == like.pid
                && t.comm.map(str::as_ptr) == comm.map(str::as_ptr)
                && t.comm.map(str::len) == comm.map(str::len)
        };
        let mut rest = spans;
        while let Some(&[ci, ..]) = rest.first() {
            let at = match self.tallies.iter().position(|t| same(t, ci)) {
                Some(i) => i,
                None => {
                    if self.tallies.len() >= TALLIES {
                        let t = self.tallies.remove(0);
                        self.add_tally(t, walker);
                    }
                    self.tallies.push(Tally {
                        like: *like,
                        comm,
                        ci,
                        diff: Vec::new(),
                        lo: usize::MAX,
                        hi: 0,
                    });
                    self.tallies.len() - 1
                }
            };
            // The spans in this cache (all of them, as a rule).
            let k = rest.iter().position(|s| s[0] != ci).unwrap_or(rest.len());
            let t = &mut self.tallies[at];
            let end = rest[..k]
                .iter()
                .map(|s| (s[1] + s[2]) as usize)
                .max()
                .unwrap_or(0);
            if t.diff.len() <= end {
                t.diff.resize(end + 1 + (end >> 2), 0);
            }
            let mut lo = t.lo;
            let diff = &mut t.diff[..=end];
            for &[_, first, n] in &rest[..k] {
                let first = first as usize;
                lo = lo.min(first);
                diff[first] += 1;
                diff[first + n as usize] -= 1;
            }
            t.lo = lo;
            t.hi = t.hi.max(end + 1);
            rest = &rest[k..];
        }
    }

    /// Adds up what [`Self::add_counts`] counted (call before [`Self::finish`]).
    pub fn add_tallies(&mut self, walker: &CodeWalker) {
        for t in std::mem::take(&mut self.tallies) {
            self.add_tally(t, walker);
        }
    }

    fn add_tally(&mut self, mut t: Tally<'s>, walker: &CodeWalker) {
        let like = t.like;
        self.check_ctx(like.kind, like.tid, like.time.unwrap_or(u64::MAX), t.comm);
        let mut count = 0i64;
        let hi = t.hi.min(t.diff.len());
        for i in t.lo..hi {
            count += std::mem::take(&mut t.diff[i]);
            if count > 0 {
                if let Some(p) = walker.plain_insns([t.ci, i as u32], 1).first() {
                    self.land(&like, p.ip, count as u64, count as u64);
                }
            }
        }
    }

    /// The location of `ip` of process `pid` running code image `code` at
    /// `time`, as a sample's row names it (no row is made).
    pub fn locate(&mut self, code: u64, pid: i32, ip: u64, time: Option<u64>) -> u32 {
        self.locations(code, pid, ip, time).0
    }

    /// Both locations of `ip`, through a direct-mapped cache by address: as
    /// [`Self::locate`], and as perf's cumulative entries name a call chain
    /// entry: the same, except that an address without a symbol is the IP
    /// itself, not its address in the dso (perf takes the chain node's IP).
    pub fn locations(&mut self, code: u64, pid: i32, ip: u64, time: Option<u64>) -> (u32, u32) {
        let slot = ((ip ^ code.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            >> (64 - LOC_CACHE_BITS)) as usize;
        let e = self.loc_cache[slot];
        if e.0 == code && e.1 == pid && e.2 == ip && e.3 != NONE {
            return (e.3, e.4);
        }
        let pair = match self.resolve(code, pid, ip, time).1 {
            Place::Loc(l) => (l, l),
            Place::ByAddr(dso, bias) => (self.addr_loc(ip, dso, bias), self.addr_loc(ip, dso, 0)),
        };
        self.loc_cache[slot] = (code, pid, ip, pair.0, pair.1);
        pair
    }

    /// The number of the command named `comm` (`None`: unknown, `:-1`).
    pub fn comm_id(&mut self, comm: Option<&str>) -> u32 {
        let name = comm.unwrap_or(":-1");
        match self.comm_ids.get(name) {
            Some(&i) => i,
            None => {
                let r: Rc<str> = name.into();
                self.comms.push(r.clone());
                self.comm_ids.insert(r, self.comms.len() as u32 - 1);
                self.comms.len() as u32 - 1
            }
        }
    }

    /// Makes the span of `ip` (of sample `s`'s process and code) the last one:
    /// from the cache of spans, else resolved.
    #[inline(never)]
    fn find_span(&mut self, s: &Sample, ip: u64) {
        let slot = ((ip >> LINE_BITS) ^ s.code.wrapping_mul(0x9e37_79b9_7f4a_7c15)) as usize
            & (SPAN_SLOTS - 1);
        let c = self.spans[slot];
        let ctx = self.ctx;
        if c.ctx == ctx.id && c.code == s.code && c.pid == s.pid && ip.wrapping_sub(c.lo) < c.len {
            self.span = c;
            return;
        }
        let ((lo, hi), place) = self.resolve(s.code, s.pid, ip, s.time);
        let mut span = Span {
            code: s.code,
            pid: s.pid,
            ctx: ctx.id,
            row: NONE,
            lo,
            len: hi.wrapping_sub(lo),
            index: 0,
        };
        match place {
            Place::Loc(loc) => span.row = self.row_of(ctx.hist, ctx.id, ctx.comm, loc),
            Place::ByAddr(dso, bias) => {
                // One block of them.
                let base = ip & !(BLOCK - 1);
                let lo = lo.max(base);
                let hi = hi.min(base.saturating_add(BLOCK));
                span.lo = lo;
                span.len = hi - lo;
                let key = (ctx.id, s.code, s.pid, base);
                let b = match self.block_ids.get(&key) {
                    Some(&b) => b,
                    None => {
                        self.blocks.push(Block {
                            hist: ctx.hist,
                            comm: ctx.comm,
                            ctx: ctx.id,
                            base,
                            dso,
                            bias,
                            first: self.periods.len(),
                        });
                        self.periods.resize(self.periods.len() + BLOCK as usize, 0);
                        let b = self.blocks.len() as u32 - 1;
                        self.block_ids.insert(key, b);
                        b
                    }
                };
                span.index = (self.blocks[b as usize].first as u64).wrapping_sub(base);
            }
        }
        self.spans[slot] = span;
        self.span = span;
    }

    /// Where `ip` is, through the mappings and the symbol tables, and the span
    /// of addresses around it that resolve the same way.
    #[cold]
    #[inline(never)]
    fn resolve(&mut self, code: u64, pid: i32, ip: u64, time: Option<u64>) -> ((u64, u64), Place) {
        let _ = code;
        let session = self.session;
        // Between two cuts, the same mappings hold every address.
        let i = self.cuts.partition_point(|&c| c <= ip);
        let mut lo = i.checked_sub(1).map_or(0, |j| self.cuts[j]);
        let mut hi = self.cuts.get(i).copied().unwrap_or(u64::MAX);
        let m = session.mapping((pid >= 0).then_some(pid as u32), ip, time);
        let Some(m) = m else {
            return ((lo, hi), Place::ByAddr(NONE, 0));
        };
        let dso = match self.dso_ids.get(&m.filename) {
            Some(&d) => d,
            None => {
                let sh = short(m.dso_name());
                let d = match self.short_ids.get(sh) {
                    Some(&d) => d,
                    None => {
                        let r: Rc<str> = sh.into();
                        self.dsos.push(r.clone());
                        let d = self.dsos.len() as u32 - 1;
                        self.short_ids.insert(r, d);
                        d
                    }
                };
                self.dso_ids.insert(m.filename.clone(), d);
                d
            }
        };
        // IP to the dso's address: `ip - start + pgoff`.
        let bias = m.pgoff.wrapping_sub(m.start);
        let addr = ip.wrapping_add(bias);
        // The mapping's symbol table (found once per mapping).
        let key = m as *const _ as usize;
        let tid = match self.tables.get(&key) {
            Some(&t) => t,
            None => {
                let t = session.symbol_table(m, &mut self.symbols);
                self.tables.insert(key, t);
                t
            }
        };
        let Some(tid) = tid else {
            return ((lo, hi), Place::ByAddr(dso, bias));
        };
        let key = tid;
        let table = self.symbols.table(tid);
        let l = table.lookup(addr);
        // The symbol's span, in IP space: as distances from the address, which
        // lies in both.
        let below = addr - l.start;
        if below < ip - lo {
            lo = ip - below;
        }
        let above = l.end.wrapping_sub(addr);
        if l.end != u64::MAX && above < hi.wrapping_sub(ip) {
            hi = ip + above;
        }
        let Some(id) = l.sym else {
            return ((lo, hi), Place::ByAddr(dso, bias));
        };
        let sy = table.symbol(id);
        let start = sy.start;
        let name = match self.sym_names.get(&(key, id)) {
            Some(n) => n.clone(),
            None => {
                let n: Rc<str> = sy.name().into();
                self.sym_names.insert((key, id), n.clone());
                n
            }
        };
        let loc = self.intern_loc(Loc {
            dso: Some(self.dsos[dso as usize].clone()),
            sym: SymKey::Named(name, start),
        });
        ((lo, hi), Place::Loc(loc))
    }

    /// The location of `ip` named by its address.
    fn addr_loc(&mut self, ip: u64, dso: u32, bias: u64) -> u32 {
        let addr = if dso == NONE {
            ip
        } else {
            ip.wrapping_add(bias)
        };
        if let Some(&l) = self.addr_locs.get(&(dso, addr)) {
            return l;
        }
        let loc = if dso == NONE {
            Loc {
                dso: None,
                sym: SymKey::Addr(ip),
            }
        } else {
            Loc {
                dso: Some(self.dsos[dso as usize].clone()),
                sym: SymKey::Addr(addr),
            }
        };
        let l = self.intern_loc(loc);
        self.addr_locs.insert((dso, addr), l);
        l
    }

    fn intern_loc(&mut self, loc: Loc) -> u32 {
        if let Some(&l) = self.loc_ids.get(&loc) {
            return l;
        }
        self.locs.push(loc.clone());
        let l = self.locs.len() as u32 - 1;
        self.loc_ids.insert(loc, l);
        l
    }

    /// The row of `loc` for (event, command) pair `ctx` (made if new).
    fn row_of(&mut self, hist: u32, ctx: u32, comm: u32, loc: u32) -> u32 {
        let (info, periods) = (&mut self.row_info, &mut self.row_periods);
        *self.rows.entry((ctx, loc)).or_insert_with(|| {
            info.push((hist, comm, loc));
            periods.push(0);
            info.len() as u32 - 1
        })
    }

    /// Adds the running totals to the current event's.
    fn flush_totals(&mut self) {
        if let Some(h) = self.hists.get_mut(self.ctx.hist as usize) {
            h.total += std::mem::take(&mut self.total);
            h.nr += std::mem::take(&mut self.nr);
        }
    }

    /// Takes a sample of `kind` by thread `tid` named `comm` at `time`.
    #[inline(never)]
    fn check_ctx(&mut self, kind: Kind, tid: i32, time: u64, comm: Option<&str>) {
        let (cp, cl) = comm.map_or((std::ptr::null(), 0), |c| (c.as_ptr(), c.len()));
        let c = &self.ctx;
        if c.kind != kind || c.comm_ptr != cp || c.comm_len != cl {
            self.new_ctx(kind, comm);
        }
        self.ctx.tid = tid;
        self.ctx.time = time;
    }

    #[cold]
    #[inline(never)]
    fn new_ctx(&mut self, kind: Kind, comm: Option<&str>) {
        self.flush_totals();
        let hist = match self.hists.iter().position(|h| h.kind == kind) {
            Some(i) => i,
            None => {
                self.hists.push(Hist {
                    kind,
                    rows: Vec::new(),
                    total: 0,
                    nr: 0,
                });
                self.hists.len() - 1
            }
        } as u32;
        let comm_id = self.comm_id(comm);
        let n = self.ctx_ids.len() as u32;
        let id = *self.ctx_ids.entry((hist, comm_id)).or_insert(n);
        let (cp, cl) = comm.map_or((std::ptr::null(), 0), |c| (c.as_ptr(), c.len()));
        self.ctx = Ctx {
            kind,
            comm_ptr: cp,
            comm_len: cl,
            id,
            hist,
            comm: comm_id,
            tid: i32::MIN,
            time: 0,
        };
        // The last span's row belongs to the last pair.
        self.span = EMPTY;
    }

    /// Turns the periods into each event's rows: call once all samples are in.
    pub fn finish(&mut self) {
        self.flush_totals();
        let mut zero: FxMap<usize, ()> = FxMap::default();
        for &i in &self.zero_hits {
            zero.insert(i, ());
        }
        let all = std::mem::take(&mut self.periods);
        for b in std::mem::take(&mut self.blocks) {
            let periods = &all[b.first..b.first + BLOCK as usize];
            for (off, &p) in periods.iter().enumerate() {
                if p == 0 && !zero.contains_key(&(b.first + off)) {
                    continue;
                }
                let loc = self.addr_loc(b.base + off as u64, b.dso, b.bias);
                let row = self.row_of(b.hist, b.ctx, b.comm, loc);
                self.row_periods[row as usize] += p;
            }
        }
        for (&(hist, comm, loc), &period) in self.row_info.iter().zip(&self.row_periods) {
            self.hists[hist as usize]
                .rows
                .push(Row { comm, loc, period });
        }
        self.row_info.clear();
        self.row_periods.clear();
        self.rows.clear();
        self.block_ids.clear();
        self.zero_hits.clear();
        self.spans.fill(EMPTY);
        self.span = EMPTY;
    }
}

/// A dso's short name (perf's; re-exported from `pt_perf::session::short_name`).
pub use pt_perf::session::short_name as short;
