//! The coverage decoder: a trace and its code → an edge bitmap, and on request the
//! exact edges and basic blocks.
//!
//! It reads events from pt-decoder's event decoder (so it accepts what the flow
//! decoder accepts: PSB+, return compression, timing packets, OVF, TIP.PGE/PGD,
//! asynchronous branches, several sections) and walks the code on its own
//! graph (`graph.rs`) of nodes: one per run of code up to a branch that needs
//! trace. Its analysis stays across calls, for thousands of runs of one binary;
//! the bitmap is reset with one `fill`.
//!
//! Between events, where the event decoder allows it ([`EventDecoder::handoff`]),
//! a fast lane reads the plain packets (TNT, TIP, PAD, MTC, CYC, TSC) straight
//! from the bytes and hands back at the first other packet: TNT-8 packets go
//! through a memo of (node, byte) → map bytes, return-stack effect and end node
//! (calls and compressed returns included; a compressed return to an address
//! pushed before the byte splits it: the rest of its bits are looked up from the
//! return's target as a shorter byte), TIPs through a memo of (node, target)
//! → target node and map byte, so that the warm decoder does no hashing of
//! addresses and no lookup per branch.
//!
//! The flow is the flow decoder's, edge by edge: the differential tests
//! (`tests/differential.rs`) hold it to [`crate::reference`], which derives edges
//! and blocks from [`pt_decoder::Decoder`]'s instructions.

use pt_decoder::block_cache::BlockCache;
use pt_decoder::event::{EventDecoder, EventKind, Options as EventOptions};
use pt_decoder::flow::AddrFilter;
use pt_decoder::image::Image;
use pt_decoder::{Config, ErrorCode};
use pt_encoder::hash::IntMap;
use pt_encoder::{ExecMode, Packet};

use crate::bitmap::EdgeHash;
use crate::edge::{BasicBlock, Edge, EdgeKind};
use crate::error::{CoverageError, ErrorKind};
use crate::graph::{slot as slot_of, BuildCtx, Code, Graph, NodeKind, NONE};

/// Calls to the page-fetch callback: where to copy the 4 KiB page at an address.
pub const PAGE_SIZE: usize = 4096;

/// Steps through [`NodeKind::Continue`] nodes without trace before giving up.
const MAX_CONTINUES: u32 = 64;

/// Return addresses kept for compressed returns (as the hardware's stack).
const RETSTACK_SIZE: usize = 64;

/// Entries of the TNT-8 memo (a power of two): 1.25 MB.
const MEMO_SIZE: usize = 1 << 14;

/// Misses of a (node, byte) whose [`Memo`] entry could not be made before it is
/// tried again.
const MEMO_RETRY: u8 = 32;

/// Return addresses a [`Memo`] entry leaves on the stack at most.
const MEMO_PUSHES: usize = 2;

/// [`Memo::peak`]'s flag: the entry stops at a compressed return to an address
/// pushed before its byte ([`Memo::left`] bits not walked).
const PARTIAL: u8 = 0x80;

/// Entries of the TIP memo (a power of two): 192 KB.
const TIP_MEMO_SIZE: usize = 1 << 13;

/// Errors kept per [`CoverageDecoder::reset`] (the count goes on).
const MAX_KEPT_ERRORS: usize = 256;

/// How the decoder counts (see [`CoverageDecoder::new`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Bytes in the edge bitmap: a power of two (AFL's default 65536).
    pub map_size: usize,
    /// The formula of an edge's byte.
    pub hash: EdgeHash,
    /// Keep the exact edges and basic blocks with their counts (slower: a hash-map
    /// update per edge and block), besides the bitmap.
    pub collect: bool,
    /// The trace's configuration (CPU errata, MTC frequency).
    pub config: Config,
    /// IP filter ranges as libxdc takes them: a direct branch that leaves them ends
    /// the walk (tracing stops there). Leave unconfigured to follow all code.
    pub filter: AddrFilter,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            map_size: 1 << 16,
            hash: EdgeHash::Afl,
            collect: false,
            config: Config::default(),
            filter: AddrFilter::default(),
        }
    }
}

/// What one [`CoverageDecoder::decode`] call found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Edges counted in the bitmap.
    pub edges: u64,
    /// Errors met (decoding went on at the next PSB after each).
    pub errors: u64,
    /// The first of them.
    pub first_error: Option<CoverageError>,
}

/// The code of the page-fetch mode: pages the callback gave so far.
struct Pages<'f> {
    image: &'f mut Image,
    fetch: &'f mut dyn FnMut(u64, &mut [u8; PAGE_SIZE]) -> bool,
    buf: Box<[u8; PAGE_SIZE]>,
    failed: u64,
}

impl Code for Pages<'_> {
    fn image(&self) -> &Image {
        self.image
    }

    fn fetch(&mut self, ip: u64) -> bool {
        let page = ip & !(PAGE_SIZE as u64 - 1);
        if !(self.fetch)(page, &mut self.buf) {
            self.failed = page;
            return false;
        }
        self.image
            .add_bytes(page, self.buf.to_vec(), "page")
            .is_ok()
    }
}

struct Fixed<'i>(&'i Image);

impl Code for Fixed<'_> {
    fn image(&self) -> &Image {
        self.0
    }

    fn fetch(&mut self, _ip: u64) -> bool {
        false
    }
}

/// Where [`CoverageDecoder::enter`] stops counting a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// At its end.
    None,
    /// Before the instruction at the IP (an asynchronous event there).
    Before(u64),
    /// After the direct branch to the IP, without its edge (a TIP.PGD naming it).
    Target(u64),
    /// After the first MOV CR3 if there is one (a TIP.PGD without an IP).
    Cr3,
}

/// Where the walk is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pos {
    /// Tracing is off, or the IP is not known.
    Off,
    /// At an IP whose node is not looked up yet (its mode may still change).
    At(u64),
    /// At the start of a node.
    Node(u32),
}

/// Exact edges and blocks with their counts ([`Options::collect`]).
#[derive(Default)]
struct Collected {
    edges: IntMap<(u64, u64), (EdgeKind, u64)>,
    blocks: IntMap<(u64, u64), u64>,
}

impl Collected {
    #[inline]
    fn edge(&mut self, from: u64, to: u64, kind: EdgeKind) {
        self.edges.entry((from, to)).or_insert((kind, 0)).1 += 1;
    }

    #[inline]
    fn block(&mut self, start: u64, end: u64) {
        if start != end {
            *self.blocks.entry((start, end)).or_insert(0) += 1;
        }
    }
}

/// The coverage decoder. See the [module docs](self) and the [crate docs](crate).
pub struct CoverageDecoder {
    options: Options,
    mask: u32,
    map: Vec<u8>,
    cache: BlockCache,
    graph: Graph,
    /// The stamp of the image the graph was built from (`None`: pages).
    stamp: Option<u64>,
    pages: Image,
    collected: Collected,
    errors: Vec<CoverageError>,
    /// TNT-8 packets walked before, by (node, byte): see [`Memo`].
    memo: Box<[Memo]>,
    /// TIP targets by (node, IP): see [`TipMemo`].
    tip_memo: Box<[TipMemo]>,
}

impl CoverageDecoder {
    /// A decoder with an empty map of `options.map_size` bytes (rounded up to a power
    /// of two, at least 1).
    pub fn new(options: Options) -> Self {
        let size = options.map_size.max(1).next_power_of_two();
        CoverageDecoder {
            options: Options {
                map_size: size,
                ..options
            },
            mask: (size - 1) as u32,
            map: vec![0; size],
            cache: BlockCache::new(),
            graph: Graph::default(),
            stamp: None,
            pages: Image::new(),
            collected: Collected::default(),
            errors: Vec::new(),
            memo: vec![Memo::EMPTY; MEMO_SIZE].into_boxed_slice(),
            tip_memo: vec![TipMemo::EMPTY; TIP_MEMO_SIZE].into_boxed_slice(),
        }
    }

    /// The options in force.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The edge bitmap: raw counts (see [`crate::bitmap`]).
    pub fn map(&self) -> &[u8] {
        &self.map
    }

    /// The edge bitmap, e.g. to classify it in place.
    pub fn map_mut(&mut self) -> &mut [u8] {
        &mut self.map
    }

    /// Clears the bitmap, the collected edges and blocks and the errors; the analysis
    /// of the code stays.
    pub fn reset(&mut self) {
        self.map.fill(0);
        self.collected.edges.clear();
        self.collected.blocks.clear();
        self.errors.clear();
    }

    /// Forgets the analysis of the code as well (e.g. before decoding traces of
    /// another program with the page-fetch callback).
    pub fn forget_code(&mut self) {
        self.graph.clear();
        self.memo.fill(Memo::EMPTY);
        self.tip_memo.fill(TipMemo::EMPTY);
        self.cache.clear();
        self.pages = Image::new();
        self.stamp = None;
    }

    /// The errors since the last reset (the first 256).
    pub fn errors(&self) -> &[CoverageError] {
        &self.errors
    }

    /// The edges since the last reset with how often each was taken
    /// ([`Options::collect`]; empty otherwise), in no particular order.
    pub fn edges(&self) -> impl Iterator<Item = (Edge, u64)> + '_ {
        self.collected
            .edges
            .iter()
            .map(|(&(from, to), &(kind, n))| (Edge { from, to, kind }, n))
    }

    /// The basic blocks since the last reset with how often each ran
    /// ([`Options::collect`]; empty otherwise), in no particular order.
    pub fn blocks(&self) -> impl Iterator<Item = (BasicBlock, u64)> + '_ {
        self.collected
            .blocks
            .iter()
            .map(|(&(start, end), &n)| (BasicBlock { start, end }, n))
    }

    /// Decodes `trace` (from its first PSB) over the code in `image`, adding to the
    /// bitmap (and the collected edges and blocks). Errors are counted and kept; the
    /// edges before each are kept and decoding goes on at the next PSB.
    pub fn decode(&mut self, trace: &[u8], image: &Image) -> Outcome {
        if self.stamp != Some(image.stamp()) {
            self.graph.clear();
            self.memo.fill(Memo::EMPTY);
            self.tip_memo.fill(TipMemo::EMPTY);
            self.stamp = Some(image.stamp());
        }
        let mut code = Fixed(image);
        self.run(trace, &mut code)
    }

    /// [`decode`](Self::decode) with the code read on demand, as libxdc reads it:
    /// `fetch(page, buf)` copies the 4 KiB page at `page` into `buf` and says
    /// whether it could. Pages are kept across calls (until
    /// [`forget_code`](Self::forget_code)). A page it cannot supply is an error
    /// ([`ErrorKind::NoMap`] at an IP in that page).
    pub fn decode_with_pages(
        &mut self,
        trace: &[u8],
        fetch: &mut dyn FnMut(u64, &mut [u8; PAGE_SIZE]) -> bool,
    ) -> Outcome {
        if self.stamp.is_some() {
            self.graph.clear();
            self.memo.fill(Memo::EMPTY);
            self.tip_memo.fill(TipMemo::EMPTY);
            self.stamp = None;
        }
        let mut image = std::mem::take(&mut self.pages);
        let mut code = Pages {
            image: &mut image,
            fetch,
            buf: Box::new([0; PAGE_SIZE]),
            failed: 0,
        };
        let out = self.run(trace, &mut code);
        self.pages = image;
        out
    }

    fn error(&mut self, out: &mut Outcome, kind: ErrorKind, offset: u64, ip: u64) {
        let e = CoverageError { kind, offset, ip };
        out.errors += 1;
        out.first_error.get_or_insert(e);
        if self.errors.len() < MAX_KEPT_ERRORS {
            self.errors.push(e);
        }
    }

    fn run(&mut self, trace: &[u8], code: &mut dyn Code) -> Outcome {
        let mut out = Outcome::default();
        let mut ev = EventDecoder::new(trace, &self.options.config, EventOptions::default());
        let mut walk = Walk::new(ExecMode::Unknown);
        // Synchronize (again after an error) at the next PSB.
        'sync: loop {
            match ev.sync_forward() {
                Ok(_) => {}
                Err(e) if e.code == ErrorCode::Eos => break,
                Err(e) => {
                    self.error(&mut out, ErrorKind::Trace(e.code), e.offset, 0);
                    break;
                }
            }
            walk.pos = Pos::Off;
            walk.len = 0;
            walk.pending = None;
            walk.last_edge = None;
            walk.deferred_tip = None;
            loop {
                let event = match ev.next() {
                    Ok(event) => event,
                    Err(e) => {
                        // As the flow decoder: the flow ends with the last branch
                        // whose outcome the trace gave, and what follows its target
                        // is not known to have run: neither is that last edge.
                        self.undo_last_edge(&mut walk);
                        walk.pos = Pos::Off;
                        if e.code == ErrorCode::Eos {
                            break 'sync;
                        }
                        self.error(&mut out, ErrorKind::Trace(e.code), e.offset, 0);
                        continue 'sync;
                    }
                };
                if let Err((kind, ip)) = self.event(&mut walk, code, &ev, &event, &mut out) {
                    self.error(&mut out, kind, event.offset, ip);
                    walk.pos = Pos::Off;
                    continue 'sync;
                }
                let Some((at, ip)) = ev.handoff() else {
                    continue;
                };
                let (at, ip) = match self.lane(&mut walk, code, &mut ev, at as usize, ip, &mut out)
                {
                    LaneEnd::At(at, ip) => (at, ip),
                    LaneEnd::Walk(kind, walk_ip, at, ip) => {
                        // Where the event path would be after the packet's event.
                        if ev.resume_at(at as u64, true, ip).is_ok() {
                            let _ = ev.next();
                        }
                        self.error(&mut out, kind, at as u64, walk_ip);
                        walk.pos = Pos::Off;
                        continue 'sync;
                    }
                    LaneEnd::Trace(e, at, ip) => {
                        // Where the event path would be at the packet's error.
                        let _ = ev.resume_at(at as u64, true, ip);
                        self.undo_last_edge(&mut walk);
                        walk.pos = Pos::Off;
                        self.error(&mut out, ErrorKind::Trace(e.code), e.offset, 0);
                        continue 'sync;
                    }
                };
                if let Err(e) = ev.resume_at(at as u64, true, ip) {
                    self.undo_last_edge(&mut walk);
                    walk.pos = Pos::Off;
                    self.error(&mut out, ErrorKind::Trace(e.code), e.offset, 0);
                    continue 'sync;
                }
            }
        }
        out
    }

    fn ctx<'c>(
        cache: &'c mut BlockCache,
        code: &'c mut dyn Code,
        options: &'c Options,
        mask: u32,
    ) -> BuildCtx<'c> {
        BuildCtx {
            cache,
            code,
            filter: &options.filter,
            hash: options.hash,
            mask,
        }
    }

    /// The node at the walk's position, looked up now if needed.
    #[inline]
    fn resolve(&mut self, walk: &mut Walk, code: &mut dyn Code) -> Option<u32> {
        match walk.pos {
            Pos::Off => None,
            Pos::Node(id) => Some(id),
            Pos::At(ip) => {
                let mut ctx = Self::ctx(&mut self.cache, code, &self.options, self.mask);
                let id = self.graph.node(&mut ctx, ip, walk.mode);
                walk.pos = Pos::Node(id);
                Some(id)
            }
        }
    }

    /// Counts node `id`'s runs and pushes its calls' return addresses; resolves a
    /// pending asynchronous edge. With a `stop`, only up to it; returns whether it
    /// was reached.
    #[inline]
    fn enter(&mut self, walk: &mut Walk, id: u32, stop: Stop) -> bool {
        // Only the fields the common case needs (the node is 100 bytes).
        let (start, push, npush) = {
            let n = &self.graph.nodes[id as usize];
            (n.start, n.push, n.npush)
        };
        walk.last_edge = None;
        if let Some((from, kind)) = walk.pending.take() {
            self.edge(walk, from, start, kind);
            walk.last_edge = None;
        }
        if !self.options.collect && (stop == Stop::None || stop == Stop::Cr3 && npush == 0) {
            for &ip in &self.graph.pushes[push as usize..][..npush as usize] {
                walk.push(ip);
            }
            return false;
        }
        let node = self.graph.nodes[id as usize];
        let mut push = node.push as usize;
        for i in 0..node.nseg {
            let seg = self.graph.segs[(node.seg + i) as usize];
            if let Stop::Before(at) = stop {
                if seg.start <= at && at < seg.end {
                    if self.options.collect {
                        self.collected.block(seg.start, at);
                    }
                    return true;
                }
            }
            if stop == Stop::Cr3 && seg.cr3_end != 0 {
                if self.options.collect {
                    self.collected.block(seg.start, seg.cr3_end);
                }
                return true;
            }
            if self.options.collect {
                self.collected.block(seg.start, seg.end);
            }
            if matches!(seg.kind, EdgeKind::Jump | EdgeKind::Call) {
                if stop == Stop::Target(seg.to) {
                    // Tracing stopped with this branch: where it went did not run
                    // in the trace.
                    return true;
                }
                if self.options.collect {
                    self.collected.edge(seg.branch, seg.to, seg.kind);
                }
                if seg.push {
                    walk.push(self.graph.pushes[push]);
                    push += 1;
                }
                if stop == Stop::Before(seg.to) {
                    return true;
                }
            }
        }
        stop == Stop::Before(node.start)
    }

    /// Counts an edge the trace decided (in the map if [`EdgeHash::counts`] it).
    #[inline]
    fn edge(&mut self, walk: &mut Walk, from: u64, to: u64, kind: EdgeKind) -> u64 {
        let i = if self.options.hash.counts(kind) {
            let i = (self.options.hash.index(from, to) & self.mask) as usize;
            self.map[i] = self.map[i].wrapping_add(1);
            i as u32
        } else {
            NONE
        };
        if self.options.collect {
            self.collected.edge(from, to, kind);
        }
        walk.last_edge = Some(LastEdge::Edge(i, from, to));
        u64::from(i != NONE)
    }

    /// Takes back the last edge counted if nothing ran after it.
    fn undo_last_edge(&mut self, walk: &mut Walk) {
        let (i, from, to) = match walk.last_edge.take() {
            None => return,
            Some(LastEdge::Edge(i, from, to)) => (i, from, to),
            Some(LastEdge::Tip(id, i, to)) => (i, self.graph.nodes[id as usize].cofi, to),
            Some(LastEdge::Cond(id, t)) => {
                let node = &self.graph.nodes[id as usize];
                let t = usize::from(t);
                let to = if t == 1 { node.target } else { node.fall };
                (node.idx[t], node.cofi, to)
            }
        };
        if i != NONE {
            let b = &mut self.map[i as usize];
            *b = b.wrapping_sub(1);
        }
        if self.options.collect {
            if let Some(e) = self.collected.edges.get_mut(&(from, to)) {
                e.1 -= 1;
                if e.1 == 0 {
                    self.collected.edges.remove(&(from, to));
                }
            }
        }
    }

    fn event(
        &mut self,
        walk: &mut Walk,
        code: &mut dyn Code,
        ev: &EventDecoder<'_>,
        event: &pt_decoder::Event,
        out: &mut Outcome,
    ) -> Result<(), (ErrorKind, u64)> {
        match event.kind {
            EventKind::Tnt { bits, size } => {
                self.tnt(walk, code, Ahead::Ev(ev), bits, size, out)?
            }
            EventKind::Tip { .. } if walk.deferred_tip == Some(event.offset) => {
                // Taken already, for the branch it was deferred from.
                walk.deferred_tip = None;
            }
            EventKind::Tip { ip } => {
                if event.ip_suppressed {
                    // Checked after the node, as the flow decoder does.
                    let id = self.at_trace_node(walk, code)?;
                    let node = &self.graph.nodes[id as usize];
                    return Err(match node.kind {
                        NodeKind::Ret
                        | NodeKind::IndirectJump
                        | NodeKind::IndirectCall
                        | NodeKind::Far => (ErrorKind::Trace(ErrorCode::IpSuppressed), node.cofi),
                        _ => (ErrorKind::Mismatch, node.cofi),
                    });
                }
                self.tip(walk, code, ip, out)?;
            }
            EventKind::Enabled { ip, .. } => {
                if event.status_update && walk.pos != Pos::Off {
                    // PSB+ while tracing: the flow goes on where it is.
                    return Ok(());
                }
                walk.pending = None;
                walk.pos = if event.ip_suppressed {
                    Pos::Off
                } else {
                    Pos::At(ip)
                };
            }
            EventKind::Disabled { ip } => {
                if !event.status_update {
                    // TIP.PGD: at the next branch that needs trace, or at a direct
                    // one to the IP it names.
                    if let Some(id) = self.resolve(walk, code) {
                        let stop = if event.ip_suppressed {
                            Stop::Cr3
                        } else {
                            Stop::Target(ip)
                        };
                        self.enter(walk, id, stop);
                    }
                }
                walk.pending = None;
                walk.pos = Pos::Off;
            }
            EventKind::AsyncDisabled { at, .. } => {
                self.walk_to(walk, code, at)?;
                walk.pending = None;
                walk.pos = Pos::Off;
            }
            EventKind::AsyncBranch { from, to } => {
                self.walk_to(walk, code, from)?;
                if event.ip_suppressed {
                    walk.pos = Pos::Off;
                    walk.pending = None;
                } else {
                    walk.pending = Some((from, EdgeKind::Async));
                    walk.pos = Pos::At(to);
                }
            }
            EventKind::Overflow { ip } => {
                // Lost trace: the last branch's target may not have run.
                self.undo_last_edge(walk);
                walk.pending = None;
                walk.len = 0;
                walk.pos = if event.ip_suppressed {
                    Pos::Off
                } else {
                    Pos::At(ip)
                };
            }
            EventKind::ExecMode { mode, .. } if mode != walk.mode => {
                walk.mode = mode;
                if let Pos::Node(id) = walk.pos {
                    walk.pos = Pos::At(self.graph.nodes[id as usize].start);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The node at the position, through `Continue` nodes and fetching code for
    /// `Stuck` ones: the one whose last instruction takes the next TNT bit or TIP.
    #[inline(always)]
    fn at_trace_node(
        &mut self,
        walk: &mut Walk,
        code: &mut dyn Code,
    ) -> Result<u32, (ErrorKind, u64)> {
        if let Pos::Node(id) = walk.pos {
            if !matches!(
                self.graph.nodes[id as usize].kind,
                NodeKind::Continue | NodeKind::Stuck(_)
            ) {
                return Ok(id);
            }
        }
        self.at_trace_node_slow(walk, code)
    }

    #[inline(never)]
    fn at_trace_node_slow(
        &mut self,
        walk: &mut Walk,
        code: &mut dyn Code,
    ) -> Result<u32, (ErrorKind, u64)> {
        let mut continues = 0;
        loop {
            let Some(id) = self.resolve(walk, code) else {
                return Err((ErrorKind::Trace(ErrorCode::NoEnable), 0));
            };
            if !matches!(
                self.graph.nodes[id as usize].kind,
                NodeKind::Continue | NodeKind::Stuck(_)
            ) {
                return Ok(id);
            }
            let node = self.graph.nodes[id as usize];
            match node.kind {
                NodeKind::Continue => {
                    continues += 1;
                    if continues > MAX_CONTINUES {
                        return Err((ErrorKind::Runaway, node.cofi));
                    }
                    self.enter(walk, id, Stop::None);
                    let next = match node.next[0] {
                        NONE => {
                            let mut ctx =
                                Self::ctx(&mut self.cache, code, &self.options, self.mask);
                            let next = self.graph.node(&mut ctx, node.fall, node.mode);
                            self.graph.link(id, 0, next);
                            next
                        }
                        next => next,
                    };
                    walk.pos = Pos::Node(next);
                }
                NodeKind::Stuck(kind) => {
                    // The code may have come since (a page fetched for another node).
                    let mut ctx = Self::ctx(&mut self.cache, code, &self.options, self.mask);
                    if kind == ErrorKind::NoMap
                        && ctx.code.image().find(node.fall).is_none()
                        && ctx.code.fetch(node.fall)
                    {
                        self.graph.rebuild(&mut ctx, id);
                        continue;
                    }
                    if kind == ErrorKind::NoMap && ctx.code.image().find(node.fall).is_some() {
                        self.graph.rebuild(&mut ctx, id);
                        if self.graph.nodes[id as usize].kind != node.kind {
                            continue;
                        }
                    }
                    self.enter(walk, id, Stop::None);
                    return Err((kind, node.fall));
                }
                _ => return Ok(id),
            }
        }
    }

    /// A TNT packet's `size` bits (`bits`, the oldest at `size - 1`).
    #[inline]
    fn tnt(
        &mut self,
        walk: &mut Walk,
        code: &mut dyn Code,
        ahead: Ahead<'_, '_>,
        bits: u64,
        size: u8,
        out: &mut Outcome,
    ) -> Result<(), (ErrorKind, u64)> {
        let mut left = size;
        while left > 0 {
            left = self.tnt_run(walk, bits, left, out);
            if left > 0 {
                left -= 1;
                self.tnt_bit(walk, code, ahead, bits >> left & 1 != 0, out)?;
            }
        }
        Ok(())
    }

    /// The fast lane: from a [handoff](EventDecoder::handoff) at `pos` with last IP
    /// `ip`, the plain packets (TNT-8, TNT-64, TIP with an IP, PAD, MTC, CYC, TSC)
    /// straight from the trace bytes, 16 at a time (so no bounds check per packet),
    /// until one it does not take or the last 15 bytes (left to the event decoder).
    /// The walk is the event path's, packet for packet. TSC packets move the event
    /// decoder's time model ([`EventDecoder::apply_time`]); MTC and CYC packets only
    /// where they could fail in it ([`EventDecoder::mtc_cyc_can_fail`]), else they
    /// are taken by their length alone (coverage reads no time).
    fn lane(
        &mut self,
        walk: &mut Walk,
        code: &mut dyn Code,
        ev: &mut EventDecoder<'_>,
        mut pos: usize,
        mut ip: u64,
        out: &mut Outcome,
    ) -> LaneEnd {
        let trace = ev.buffer();
        let skd007 = self.options.config.errata.skd007;
        // Coverage reads no time: MTC and CYC only move the time model where they
        // could fail in it (as they would in the flow decoder), which with the MTC
        // frequencies the hardware can set they cannot.
        let time = ev.mtc_cyc_can_fail();
        loop {
            let Some(w) = trace.get(pos..).and_then(|r| r.first_chunk::<16>()) else {
                return LaneEnd::At(pos, ip);
            };
            let b0 = w[0];
            if b0 & 1 == 0 {
                // TNT-8: an even byte above 2; its payload holds a stop bit.
                if b0 > 2 {
                    let run = self.memo_run(walk, trace, pos, out);
                    if run > pos {
                        pos = run;
                        continue;
                    }
                    pos += 1;
                    let left = self.tnt8_memo(walk, b0, out);
                    if left == 0 {
                        continue;
                    }
                    let payload = u64::from(b0 >> 1);
                    let ahead = Ahead::At(ev, pos as u64, ip);
                    if let Err((kind, at)) = self.tnt(walk, code, ahead, payload, left, out) {
                        return LaneEnd::Walk(kind, at, pos - 1, ip);
                    }
                    continue;
                }
                if b0 == 0 {
                    pos += 1;
                    continue;
                }
                // TNT-64 (02 a3, six bytes of payload with a stop bit).
                if w[1] == 0xa3 {
                    let payload = u64::from_le_bytes([w[2], w[3], w[4], w[5], w[6], w[7], 0, 0]);
                    if payload < 2 {
                        return LaneEnd::At(pos, ip);
                    }
                    let size = (63 - payload.leading_zeros()) as u8;
                    let ahead = Ahead::At(ev, (pos + 8) as u64, ip);
                    if let Err((kind, at)) = self.tnt(walk, code, ahead, payload, size, out) {
                        return LaneEnd::Walk(kind, at, pos, ip);
                    }
                    pos += 8;
                    continue;
                }
                return LaneEnd::At(pos, ip);
            }
            if b0 & 3 == 3 {
                let Some((value, n)) = cyc(w, skd007) else {
                    return LaneEnd::At(pos, ip);
                };
                if time {
                    if let Err(e) = ev.apply_cyc(pos as u64, value) {
                        return LaneEnd::Trace(e, pos, ip);
                    }
                }
                pos += n;
                continue;
            }
            let word1 = u64::from_le_bytes([w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8]]);
            match b0 {
                0x59 => {
                    if time {
                        if let Err(e) = ev.apply_mtc(pos as u64, w[1]) {
                            return LaneEnd::Trace(e, pos, ip);
                        }
                    }
                    pos += 2;
                    continue;
                }
                0x19 => {
                    let tsc = word1 & 0x00ff_ffff_ffff_ffff;
                    if let Err(e) = ev.apply_time(pos as u64, &Packet::Tsc { tsc }) {
                        return LaneEnd::Trace(e, pos, ip);
                    }
                    pos += 8;
                    continue;
                }
                _ => {}
            }
            // TIP: IP bytes in bits 7:5; none (suppressed) and the reserved forms go
            // to the event decoder.
            if b0 & 0x1f != 0x0d {
                return LaneEnd::At(pos, ip);
            }
            let form = IP_FORMS[usize::from(b0 >> 5)];
            if form.len == 0 {
                return LaneEnd::At(pos, ip);
            }
            let (next_ip, n) = (form.apply(ip, word1), form.len);
            let before = ip;
            ip = next_ip;
            if self.tip_memo_hit(walk, ip, out) {
                pos += n;
                continue;
            }
            if walk.deferred_tip == Some(pos as u64) {
                // Taken already, for the branch it was deferred from.
                walk.deferred_tip = None;
            } else if let Err((kind, at)) = self.tip(walk, code, ip, out) {
                return LaneEnd::Walk(kind, at, pos, before);
            }
            pos += n;
        }
    }

    /// TNT-8 packets from `pos` on through the [`Memo`] while it has them, the walk
    /// in registers; returns where it stopped (`pos` if at once).
    #[inline(always)]
    fn memo_run(
        &mut self,
        walk: &mut Walk,
        trace: &[u8],
        mut pos: usize,
        out: &mut Outcome,
    ) -> usize {
        let Pos::Node(mut id) = walk.pos else {
            return pos;
        };
        if self.options.collect || walk.pending.is_some() {
            return pos;
        }
        let start = pos;
        let (memo, map) = (&self.memo[..], &mut self.map[..]);
        let mut last = &Memo::EMPTY;
        let mut edges = 0u64;
        while let Some(&byte) = trace.get(pos) {
            if byte & 1 != 0 || byte <= 2 {
                break;
            }
            let m = &memo[Memo::slot(id, byte)];
            if m.from != id || m.byte != byte {
                break;
            }
            if m.peak != 0 {
                if m.peak & PARTIAL != 0 || !m.fits(walk) {
                    break;
                }
                walk.apply(m);
            }
            for k in 0..usize::from(m.n) {
                let b = &mut map[m.idx[k] as usize];
                *b = b.wrapping_add(m.cnt[k]);
            }
            id = m.end;
            last = m;
            edges += u64::from(m.edges);
            pos += 1;
        }
        if pos > start {
            walk.pos = Pos::Node(id);
            walk.last_edge = Some(last.last_edge());
            out.edges += edges;
        }
        pos
    }

    /// A TNT-8 packet (`byte`) through the [`Memo`]: returns the bits left for the
    /// caller to walk the long way (the packet's size if nothing was done, 0 if all
    /// were). On a miss it is walked through the [`Graph::hot`] links and
    /// remembered if they carry its bits. An entry that stops at a compressed
    /// return to an address pushed before the byte ([`PARTIAL`]) is followed by
    /// that return (the walk's stack and the [`TipMemo`]) and then by the entry of
    /// the bits after it, from the return's target, as if they were a shorter
    /// packet of their own.
    #[inline]
    fn tnt8_memo(&mut self, walk: &mut Walk, byte: u8, out: &mut Outcome) -> u8 {
        let payload = byte >> 1;
        let size = 7 - payload.leading_zeros() as u8;
        if self.options.collect || walk.pending.is_some() {
            return size;
        }
        let (mut left, mut sub) = (size, byte);
        loop {
            let Pos::Node(id) = walk.pos else {
                return left;
            };
            let Some(slot) = self.memo_entry(walk, id, sub) else {
                return left;
            };
            // Applied in place (no copy of the entry).
            let m = &self.memo[slot];
            walk.apply(m);
            for k in 0..usize::from(m.n) {
                let b = &mut self.map[m.idx[k] as usize];
                *b = b.wrapping_add(m.cnt[k]);
            }
            walk.pos = Pos::Node(m.end);
            if m.left != left {
                // It walked a bit (not one that stopped at once).
                walk.last_edge = Some(m.last_edge());
            }
            out.edges += u64::from(m.edges);
            if m.peak & PARTIAL == 0 {
                return 0;
            }
            left = m.left;
            // The compressed return it stopped at: to the top of the stack.
            let Some(to) = walk.peek() else {
                return left;
            };
            let end = m.end;
            let t = &self.tip_memo[TipMemo::slot(end, to)];
            if t.from != end || t.ip != to || t.mode != walk.mode {
                return left;
            }
            walk.pop();
            if t.idx != NONE {
                let b = &mut self.map[t.idx as usize];
                *b = b.wrapping_add(1);
                out.edges += 1;
            }
            walk.last_edge = Some(LastEdge::Tip(end, t.idx, to));
            walk.pos = Pos::Node(t.to);
            left -= 1;
            if left == 0 {
                return 0;
            }
            sub = Memo::sub_byte(payload, left);
        }
    }

    /// The slot of the [`Memo`] entry of TNT-8 `byte` from node `id` that fits the
    /// walk, made on a miss if it can be (`None` otherwise: nothing done).
    #[inline]
    fn memo_entry(&mut self, walk: &Walk, id: u32, byte: u8) -> Option<usize> {
        let slot = Memo::slot(id, byte);
        let m = &mut self.memo[slot];
        if m.from == id {
            if m.byte == byte && m.fits(walk) {
                return Some(slot);
            }
            if m.byte == !byte {
                // Failed before: try again only now and then (its nodes may have
                // been linked since).
                m.edges = m.edges.wrapping_sub(1);
                if m.edges != 0 {
                    return None;
                }
            }
        }
        let Some(memo) = self.build_memo(walk, id, byte) else {
            // An entry that no TNT-8 byte matches (odd), so that the next misses
            // skip the walk.
            self.memo[slot] = Memo {
                from: id,
                byte: !byte,
                edges: MEMO_RETRY,
                ..Memo::EMPTY
            };
            return None;
        };
        self.memo[slot] = memo;
        memo.fits(walk).then_some(slot)
    }

    /// The [`Memo`] entry of TNT-8 `byte` from node `id`, walked through the
    /// [`Graph::hot`] links, with the return addresses its nodes' direct calls push
    /// and the compressed returns that pop them again (through the [`TipMemo`]),
    /// up to a compressed return to an address pushed before the byte, where it
    /// stops ([`PARTIAL`]); `None` if a bit needs more (a node not linked yet, too
    /// many return addresses).
    fn build_memo(&self, walk: &Walk, id: u32, byte: u8) -> Option<Memo> {
        let payload = byte >> 1;
        let size = 7 - payload.leading_zeros() as u8;
        let mut memo = Memo {
            from: id,
            byte,
            mode: walk.mode,
            ..Memo::EMPTY
        };
        // The return addresses pushed in the byte and still on the stack.
        let mut stack = [0u64; 8];
        let mut depth = 0usize;
        let mut at = id;
        for k in 0..size {
            let h = &self.graph.hot[at as usize];
            let t = usize::from(payload >> (size - 1 - k) & 1);
            for &ip in &self.graph.pushes[h.push as usize..][..h.npush as usize] {
                *stack.get_mut(depth)? = ip;
                depth += 1;
                memo.peak = memo.peak.max(depth as u8);
            }
            let (i, next) = if h.next[t] != NONE {
                memo.last_t = t as u8;
                (h.idx[t], h.next[t])
            } else if h.ret && t == 1 && depth == 0 {
                // To an address from before the byte: the caller takes it.
                memo.peak |= PARTIAL;
                memo.left = size - k;
                break;
            } else if h.ret && t == 1 {
                depth -= 1;
                let to = stack[depth];
                let m = &self.tip_memo[TipMemo::slot(at, to)];
                if m.from != at || m.ip != to || m.mode != walk.mode {
                    return None;
                }
                memo.last_t = 2;
                memo.last_to = to;
                memo.last_idx = m.idx;
                (m.idx, m.to)
            } else {
                return None;
            };
            memo.last = at;
            at = next;
            if i == NONE {
                // A return whose edge is not in the map (libxdc's choice of edges).
                continue;
            }
            memo.edges += 1;
            // Each map byte once, with its count (a loop's edge repeats).
            let n = usize::from(memo.n);
            match memo.idx[..n].iter().position(|&j| j == i) {
                Some(j) => memo.cnt[j] += 1,
                None => {
                    memo.idx[n] = i;
                    memo.cnt[n] = 1;
                    memo.n += 1;
                }
            }
        }
        if depth > MEMO_PUSHES {
            return None;
        }
        memo.pushes[..depth].copy_from_slice(&stack[..depth]);
        memo.npush = depth as u8;
        memo.end = at;
        Some(memo)
    }

    /// The hot loop: TNT bits `left - 1` down to 0 of `bits` through linked
    /// conditional nodes ([`Graph::hot`]: 24 bytes a node, no test of its kind);
    /// returns the bits left for [`Self::tnt_bit`] (a node of another
    /// kind, not linked yet, or collecting).
    #[inline]
    fn tnt_run(&mut self, walk: &mut Walk, bits: u64, mut left: u8, out: &mut Outcome) -> u8 {
        let Pos::Node(mut id) = walk.pos else {
            return left;
        };
        if self.options.collect || walk.pending.is_some() {
            return left;
        }
        let start = left;
        let hot = &self.graph.hot[..];
        let pushes = &self.graph.pushes[..];
        let tip_memo = &self.tip_memo[..];
        let map = &mut self.map[..];
        // The last edge: a conditional's (node and bit) unless a return came last.
        let (mut prev, mut prev_t) = (NONE, 0usize);
        let mut ret_last = None;
        // Returns whose edge is not in the map (libxdc's choice of edges).
        let mut uncounted = 0u64;
        while left > 0 {
            let h = &hot[id as usize];
            let t = (bits >> (left - 1) & 1) as usize;
            let next = h.next[t];
            if next != NONE {
                if h.npush != 0 {
                    for &ip in &pushes[h.push as usize..][..h.npush as usize] {
                        walk.push(ip);
                    }
                }
                let i = h.idx[t] as usize;
                map[i] = map[i].wrapping_add(1);
                prev = id;
                prev_t = t;
                id = next;
                left -= 1;
                continue;
            }
            // A compressed return, where the TIP memo knows its target's node.
            if !h.ret || t == 0 {
                break;
            }
            let to = match h.npush {
                0 => match walk.peek() {
                    Some(to) => to,
                    None => break,
                },
                n => pushes[(h.push + n - 1) as usize],
            };
            let m = &tip_memo[TipMemo::slot(id, to)];
            if m.from != id || m.ip != to || m.mode != walk.mode {
                break;
            }
            for &ip in &pushes[h.push as usize..][..h.npush as usize] {
                walk.push(ip);
            }
            walk.pop();
            if m.idx != NONE {
                map[m.idx as usize] = map[m.idx as usize].wrapping_add(1);
            } else {
                uncounted += 1;
            }
            ret_last = Some((left, LastEdge::Tip(id, m.idx, to)));
            id = m.to;
            left -= 1;
        }
        if left != start {
            // The return if it came after the last conditional.
            walk.last_edge = match ret_last {
                Some((at, edge)) if prev == NONE || at <= left + 1 => Some(edge),
                _ => Some(LastEdge::Cond(prev, prev_t as u8)),
            };
            out.edges += u64::from(start - left) - uncounted;
        }
        walk.pos = Pos::Node(id);
        left
    }

    /// A TIP to `ip` through the [`TipMemo`] alone, where the walk is at the start of
    /// a node whose branch took it before: applied and `true` on a hit (`false`,
    /// nothing done, otherwise: the caller takes [`Self::tip`]). A hit means the node
    /// ends in a branch that takes a TIP (only those make entries), so no look at
    /// its kind is needed.
    #[inline(always)]
    fn tip_memo_hit(&mut self, walk: &mut Walk, ip: u64, out: &mut Outcome) -> bool {
        let Pos::Node(id) = walk.pos else {
            return false;
        };
        if self.options.collect || walk.pending.is_some() || walk.deferred_tip.is_some() {
            return false;
        }
        let m = &self.tip_memo[TipMemo::slot(id, ip)];
        if m.from != id || m.ip != ip || m.mode != walk.mode {
            return false;
        }
        let (to, i, icall) = (m.to, m.idx, m.icall);
        let h = &self.graph.hot[id as usize];
        for &ret in &self.graph.pushes[h.push as usize..][..h.npush as usize] {
            walk.push(ret);
        }
        if icall {
            walk.push(self.graph.nodes[id as usize].fall);
        }
        if i != NONE {
            let b = &mut self.map[i as usize];
            *b = b.wrapping_add(1);
            out.edges += 1;
        }
        walk.last_edge = Some(LastEdge::Tip(id, i, ip));
        walk.pos = Pos::Node(to);
        true
    }

    /// A TIP's edge from the branch that needs it.
    #[inline]
    fn tip(
        &mut self,
        walk: &mut Walk,
        code: &mut dyn Code,
        ip: u64,
        out: &mut Outcome,
    ) -> Result<(), (ErrorKind, u64)> {
        let id = self.at_trace_node(walk, code)?;
        let (nkind, cofi, fall) = {
            let n = &self.graph.nodes[id as usize];
            (n.kind, n.cofi, n.fall)
        };
        let kind = match nkind {
            NodeKind::Ret => EdgeKind::Return,
            NodeKind::IndirectJump => EdgeKind::IndirectJump,
            NodeKind::IndirectCall => EdgeKind::IndirectCall,
            NodeKind::Far => EdgeKind::Far,
            _ => return Err((ErrorKind::Mismatch, cofi)),
        };
        if self.options.collect || walk.pending.is_some() {
            self.enter(walk, id, Stop::None);
        } else {
            let h = self.graph.hot[id as usize];
            for &ip in &self.graph.pushes[h.push as usize..][..h.npush as usize] {
                walk.push(ip);
            }
        }
        if kind == EdgeKind::IndirectCall {
            walk.push(fall);
        }
        self.go_to(walk, code, out, id, cofi, ip, kind);
        Ok(())
    }

    /// Counts the edge from node `id`'s branch at `cofi` to `ip` (a TIP's, or a
    /// compressed return's) and goes there: the target's node and the edge's map
    /// byte come from the [`TipMemo`] when it has them.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn go_to(
        &mut self,
        walk: &mut Walk,
        code: &mut dyn Code,
        out: &mut Outcome,
        id: u32,
        cofi: u64,
        ip: u64,
        kind: EdgeKind,
    ) {
        let slot = TipMemo::slot(id, ip);
        let m = self.tip_memo[slot];
        let (to, i) = if m.from == id && m.ip == ip && m.mode == walk.mode {
            (m.to, m.idx)
        } else {
            let i = if self.options.hash.counts(kind) {
                self.options.hash.index(cofi, ip) & self.mask
            } else {
                NONE
            };
            if slot_of(walk.mode).is_none() {
                // No node without a mode: looked up when one comes.
                self.count_tip(walk, out, i, cofi, ip, kind);
                walk.pos = Pos::At(ip);
                return;
            }
            let mut ctx = Self::ctx(&mut self.cache, code, &self.options, self.mask);
            let to = self.graph.node(&mut ctx, ip, walk.mode);
            self.tip_memo[slot] = TipMemo {
                ip,
                from: id,
                to,
                idx: i,
                mode: walk.mode,
                icall: kind == EdgeKind::IndirectCall,
            };
            (to, i)
        };
        self.count_tip(walk, out, i, cofi, ip, kind);
        walk.pos = Pos::Node(to);
    }

    /// Counts a TIP's edge at map byte `i` (`NONE`: not in the map).
    #[inline(always)]
    fn count_tip(
        &mut self,
        walk: &mut Walk,
        out: &mut Outcome,
        i: u32,
        from: u64,
        to: u64,
        kind: EdgeKind,
    ) {
        if i != NONE {
            let b = &mut self.map[i as usize];
            *b = b.wrapping_add(1);
            out.edges += 1;
        }
        if self.options.collect {
            self.collected.edge(from, to, kind);
        }
        walk.last_edge = Some(LastEdge::Edge(i, from, to));
    }

    #[inline]
    fn tnt_bit(
        &mut self,
        walk: &mut Walk,
        code: &mut dyn Code,
        ahead: Ahead<'_, '_>,
        taken: bool,
        out: &mut Outcome,
    ) -> Result<(), (ErrorKind, u64)> {
        let id = self.at_trace_node(walk, code)?;
        let node = self.graph.nodes[id as usize];
        match node.kind {
            NodeKind::Cond => {
                if walk.pending.is_some() || node.npush != 0 || self.options.collect {
                    self.enter(walk, id, Stop::None);
                }
                let t = usize::from(taken);
                let i = node.idx[t] as usize;
                self.map[i] = self.map[i].wrapping_add(1);
                out.edges += 1;
                let to = if taken { node.target } else { node.fall };
                if self.options.collect {
                    self.collected.edge(node.cofi, to, EdgeKind::Cond);
                }
                walk.last_edge = Some(LastEdge::Edge(i as u32, node.cofi, to));
                walk.pos = match node.next[t] {
                    NONE => {
                        let mut ctx = Self::ctx(&mut self.cache, code, &self.options, self.mask);
                        let next = self.graph.node(&mut ctx, to, node.mode);
                        self.graph.link(id, t, next);
                        Pos::Node(next)
                    }
                    next => Pos::Node(next),
                };
                Ok(())
            }
            NodeKind::Ret => {
                if !taken {
                    return Err((ErrorKind::Mismatch, node.cofi));
                }
                self.enter(walk, id, Stop::None);
                let Some(to) = walk.pop() else {
                    return Err((ErrorKind::EmptyReturnStack, node.cofi));
                };
                self.go_to(walk, code, out, id, node.cofi, to, EdgeKind::Return);
                Ok(())
            }
            NodeKind::IndirectJump | NodeKind::IndirectCall if walk.deferred_tip.is_none() => {
                // The hardware may send the TIP of an indirect branch after TNT
                // packets of the branches that follow it: look for it.
                let Some((ip, offset)) = ahead.deferred_tip() else {
                    return Err((ErrorKind::Mismatch, node.cofi));
                };
                walk.deferred_tip = Some(offset);
                self.enter(walk, id, Stop::None);
                if node.kind == NodeKind::IndirectCall {
                    walk.push(node.fall);
                }
                let kind = if node.kind == NodeKind::IndirectCall {
                    EdgeKind::IndirectCall
                } else {
                    EdgeKind::IndirectJump
                };
                out.edges += self.edge(walk, node.cofi, ip, kind);
                walk.pos = Pos::At(ip);
                self.tnt_bit(walk, code, ahead, taken, out)
            }
            _ => Err((ErrorKind::Mismatch, node.cofi)),
        }
    }

    /// Walks without trace from the position to `ip`, where an asynchronous event
    /// happened, counting what ran before it.
    fn walk_to(
        &mut self,
        walk: &mut Walk,
        code: &mut dyn Code,
        ip: u64,
    ) -> Result<(), (ErrorKind, u64)> {
        let mut continues = 0;
        loop {
            let Some(id) = self.resolve(walk, code) else {
                // Not tracing (or lost): the event's IP is where the flow is.
                return Ok(());
            };
            if self.enter(walk, id, Stop::Before(ip)) {
                return Ok(());
            }
            let node = self.graph.nodes[id as usize];
            if node.kind != NodeKind::Continue || continues >= MAX_CONTINUES {
                return Err((ErrorKind::Mismatch, ip));
            }
            continues += 1;
            walk.pos = Pos::At(node.fall);
        }
    }
}

/// Where to look for a deferred TIP: the event decoder after the current TNT packet,
/// or (in the [fast lane](CoverageDecoder::lane)) the event decoder as it was at the
/// handoff, to be resumed after the TNT packet at the offset with the last IP.
#[derive(Clone, Copy)]
enum Ahead<'e, 'a> {
    Ev(&'e EventDecoder<'a>),
    At(&'e EventDecoder<'a>, u64, u64),
}

impl Ahead<'_, '_> {
    fn deferred_tip(self) -> Option<(u64, u64)> {
        match self {
            Ahead::Ev(ev) => deferred_tip(ev),
            Ahead::At(ev, offset, ip) => {
                let mut ev = ev.clone();
                ev.resume_at(offset, true, ip).ok()?;
                deferred_tip(&ev)
            }
        }
    }
}

/// The next TIP after TNT packets (IP and offset), for a deferred TIP.
fn deferred_tip(ev: &EventDecoder<'_>) -> Option<(u64, u64)> {
    let mut ahead = ev.clone();
    for _ in 0..4096 {
        let e = ahead.next().ok()?;
        match e.kind {
            EventKind::Tip { ip } if !e.ip_suppressed => return Some((ip, e.offset)),
            EventKind::Tnt { .. } | EventKind::Cbr { .. } | EventKind::Mnt { .. } => {}
            EventKind::Paging { .. } | EventKind::Vmcs { .. } | EventKind::Ptwrite { .. } => {}
            _ => return None,
        }
    }
    None
}

/// How a TIP's IP payload updates the last IP, by IPBytes (bits 7:5 of its first
/// byte), without a branch on the form (the forms follow one another unpredictably
/// in a trace): the bits of the last IP kept, the bits of the payload taken, the
/// shift that sign-extends bit 47, and the packet's length (0: IP suppressed or a
/// reserved form, left to the event decoder).
#[derive(Clone, Copy)]
struct IpForm {
    keep: u64,
    take: u64,
    sext: u32,
    len: usize,
}

impl IpForm {
    const NONE: IpForm = IpForm {
        keep: 0,
        take: 0,
        sext: 0,
        len: 0,
    };

    /// The new last IP from the last one and the (little-endian) payload bytes.
    #[inline(always)]
    fn apply(self, last: u64, payload: u64) -> u64 {
        ((((last & self.keep) | (payload & self.take)) << self.sext) as i64 >> self.sext) as u64
    }
}

const fn ip_form(keep: u64, take: u64, sext: u32, len: usize) -> IpForm {
    IpForm {
        keep,
        take,
        sext,
        len,
    }
}

/// [`IpForm`] by IPBytes (SDM: IP compression).
const IP_FORMS: [IpForm; 8] = [
    IpForm::NONE,
    ip_form(!0xffff, 0xffff, 0, 3),
    ip_form(!0xffff_ffff, 0xffff_ffff, 0, 5),
    ip_form(0, 0xffff_ffff_ffff, 16, 7),
    ip_form(!0xffff_ffff_ffff, 0xffff_ffff_ffff, 0, 7),
    IpForm::NONE,
    ip_form(0, !0, 0, 9),
    IpForm::NONE,
];

/// The CYC packet at the start of `w` (SDM: its header's bits 7:3, then 7 bits from
/// each extension byte while bit 0 of the byte before is set): its cycle count and
/// length, or `None` where the packet layer reports an error (a count past 64 bits)
/// or, with SKD007, an OVF behind the header: left to the event decoder.
///
/// One and two bytes (the counts below 4096) without a branch on which: CYCs of
/// both lengths follow one another in no order the branch predictor could learn.
#[inline(always)]
fn cyc(w: &[u8; 16], skd007: bool) -> Option<(u64, usize)> {
    let (b0, b1) = (w[0], w[1]);
    // 1: the header's Exp bit, one extension byte at least.
    let ext = b0 >> 2 & 1;
    if ext & b1 & 1 != 0 {
        return cyc_long(w);
    }
    if skd007 & (ext != 0) & (b1 == 0x02) & (w[2] == 0xf3) {
        return None;
    }
    let tail = u64::from(b1 >> 1) << 5 & 0u64.wrapping_sub(u64::from(ext));
    Some((u64::from(b0 >> 3) | tail, 1 + usize::from(ext)))
}

/// [`cyc`] with three bytes or more (counts of 4096 cycles and up).
#[cold]
fn cyc_long(w: &[u8; 16]) -> Option<(u64, usize)> {
    let mut value = u64::from(w[0] >> 3);
    // The packet layer refuses a ninth extension byte (past 64 bits).
    for (k, &b) in w[1..=8].iter().enumerate() {
        value |= u64::from(b >> 1) << (5 + 7 * k);
        if b & 1 == 0 {
            return Some((value, k + 2));
        }
    }
    None
}

/// How the [fast lane](CoverageDecoder::lane) ended: each with the offset of the
/// packet it stopped at and the last IP before it.
enum LaneEnd {
    /// At a packet it leaves to the event decoder.
    At(usize, u64),
    /// The walk failed (the error and its IP) at a packet.
    Walk(ErrorKind, u64, usize, u64),
    /// A timing packet's error.
    Trace(pt_decoder::DecodeError, usize, u64),
}

/// A TNT-8 packet's walk from a node, remembered (as libxdc and iptr-edge-analyzer
/// cache theirs): the map bytes its bits count, the return addresses it leaves on
/// the stack and the node it ends at. Kept only for walks through the
/// [`Graph::hot`] links (conditional nodes, never changed once made) and through
/// compressed returns to addresses pushed in the same byte (their targets through
/// the [`TipMemo`]), so that a hit is exact: the walk does not depend on the
/// stack below. A walk that meets a compressed return to an address pushed
/// before the byte stops there ([`PARTIAL`]): the caller pops it, and looks up
/// the bits after it as a byte of their own (from the return's target), so that
/// one entry serves every caller. Direct mapped by (node, byte); a collision replaces the entry.
#[derive(Clone, Copy, Debug)]
struct Memo {
    /// The node the walk starts at (`NONE`: empty).
    from: u32,
    /// The node it ends at.
    end: u32,
    /// The TNT-8 byte (its complement, odd: the walk could not be remembered).
    byte: u8,
    /// Edges it counts in the map (misses until the next try to remember it).
    edges: u8,
    /// The map bytes it counts, each once: `idx[..n]`, by `cnt[..n]`.
    n: u8,
    /// The last edge: from node `last`, a conditional's bit (0, 1), or 2 for a
    /// return to `last_to` at map byte `last_idx` (for [`LastEdge`]).
    last_t: u8,
    /// Return addresses it pushes: the most at a time (0: it leaves the stack
    /// alone), and those still there at its end, `pushes[..npush]`.
    peak: u8,
    npush: u8,
    /// The bits it leaves, from the compressed return it stops at ([`PARTIAL`]).
    left: u8,
    /// The mode its returns' targets were looked up in.
    mode: ExecMode,
    last: u32,
    last_idx: u32,
    idx: [u32; 6],
    cnt: [u8; 6],
    last_to: u64,
    pushes: [u64; MEMO_PUSHES],
}

impl Memo {
    const EMPTY: Memo = Memo {
        from: NONE,
        end: NONE,
        byte: 0,
        edges: 0,
        n: 0,
        last_t: 0,
        peak: 0,
        npush: 0,
        left: 0,
        mode: ExecMode::Unknown,
        last: NONE,
        last_idx: NONE,
        idx: [0; 6],
        cnt: [0; 6],
        last_to: 0,
        pushes: [0; MEMO_PUSHES],
    };

    #[inline]
    fn slot(from: u32, byte: u8) -> usize {
        let key = u64::from(from) << 8 | u64::from(byte);
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - MEMO_SIZE.trailing_zeros())) as usize
    }

    /// The TNT-8 byte of the last `left` bits (1 to 6) of a TNT-8 byte's `payload`,
    /// as a packet of their own: with their stop bit.
    #[inline(always)]
    fn sub_byte(payload: u8, left: u8) -> u8 {
        (1 << left | payload & ((1 << left) - 1)) << 1
    }

    /// Whether the entry gives the walk's own result: its returns' targets are in
    /// the walk's mode.
    #[inline(always)]
    fn fits(&self, walk: &Walk) -> bool {
        self.peak == 0 || self.mode == walk.mode
    }

    #[inline(always)]
    fn last_edge(&self) -> LastEdge {
        if self.last_t == 2 {
            LastEdge::Tip(self.last, self.last_idx, self.last_to)
        } else {
            LastEdge::Cond(self.last, self.last_t)
        }
    }
}

/// A TIP's target from a node, remembered: the target's node (in the mode it was
/// looked up in) and the edge's map byte. Direct mapped by (node, target).
#[derive(Clone, Copy, Debug)]
struct TipMemo {
    ip: u64,
    /// The node of the branch (`NONE`: empty).
    from: u32,
    to: u32,
    idx: u32,
    mode: ExecMode,
    /// An indirect call's edge (its return address goes on the stack).
    icall: bool,
}

impl TipMemo {
    const EMPTY: TipMemo = TipMemo {
        ip: 0,
        from: NONE,
        to: NONE,
        idx: NONE,
        mode: ExecMode::Unknown,
        icall: false,
    };

    #[inline]
    fn slot(from: u32, ip: u64) -> usize {
        let key = ip ^ u64::from(from).rotate_left(40);
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - TIP_MEMO_SIZE.trailing_zeros())) as usize
    }
}

/// The last edge counted: its map index (`NONE` if not in the map) and ends, a
/// conditional node and the bit taken from it, or a node, map index and target (the
/// branch's address looked up only if needed).
#[derive(Clone, Copy, Debug)]
enum LastEdge {
    Edge(u32, u64, u64),
    Cond(u32, u8),
    /// From a node's branch (map index, target).
    Tip(u32, u32, u64),
}

/// The walk's state during one trace.
struct Walk {
    pos: Pos,
    mode: ExecMode,
    /// The return stack: a ring of [`RETSTACK_SIZE`] entries (the oldest are
    /// overwritten, as the hardware's are).
    stack: [u64; RETSTACK_SIZE],
    top: usize,
    len: usize,
    /// An asynchronous transfer's source, for the edge to the node entered next.
    pending: Option<(u64, EdgeKind)>,
    /// The offset of a TIP taken ahead for an indirect branch (a deferred TIP).
    deferred_tip: Option<u64>,
    /// The last edge counted (its map index and ends), while nothing ran after it.
    last_edge: Option<LastEdge>,
}

impl Walk {
    /// A walk with tracing off, an empty return stack and the given mode.
    fn new(mode: ExecMode) -> Self {
        Walk {
            pos: Pos::Off,
            mode,
            stack: [0; RETSTACK_SIZE],
            top: 0,
            len: 0,
            pending: None,
            deferred_tip: None,
            last_edge: None,
        }
    }

    #[inline]
    fn push(&mut self, ip: u64) {
        self.top = (self.top + 1) % RETSTACK_SIZE;
        self.stack[self.top] = ip;
        self.len = (self.len + 1).min(RETSTACK_SIZE);
    }

    /// A [`Memo`] entry's pushes and pops: as each push on a full stack
    /// overwrites the oldest entry, the walk loses as many of its oldest entries
    /// as the entry's deepest point passes the stack's size, then gains the
    /// entry's pushes that are left at its end.
    #[inline(always)]
    fn apply(&mut self, m: &Memo) {
        let lost = (self.len + usize::from(m.peak & !PARTIAL)).saturating_sub(RETSTACK_SIZE);
        self.len -= lost;
        for &ip in &m.pushes[..usize::from(m.npush)] {
            self.push(ip);
        }
    }

    /// The return address a pop would give.
    #[inline]
    fn peek(&self) -> Option<u64> {
        (self.len > 0).then(|| self.stack[self.top])
    }

    #[inline]
    fn pop(&mut self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let ip = self.stack[self.top];
        self.top = (self.top + RETSTACK_SIZE - 1) % RETSTACK_SIZE;
        self.len -= 1;
        Some(ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pt_encoder::{encode_to_vec, IpCompression, IpPacketKind, IpPayload, LastIp};

    fn walk() -> Walk {
        Walk::new(ExecMode::Bit64)
    }

    fn drain(mut w: Walk) -> Vec<u64> {
        std::iter::from_fn(|| w.pop()).collect()
    }

    /// A memo entry's stack effect is that of its pushes and pops one by one, on
    /// a stack with room and on a full one (whose oldest entries pushes overwrite).
    #[test]
    fn memo_stack_effect_is_push_by_push() {
        // Push 0x10, 0x20; pop; push 0x30, 0x40, 0x50; pop; pop: left 0x10, 0x30,
        // three deep at most.
        let ops: [Option<u64>; 8] = [
            Some(0x10),
            Some(0x20),
            None,
            Some(0x30),
            Some(0x40),
            Some(0x50),
            None,
            None,
        ];
        let m = Memo {
            peak: 4,
            npush: 2,
            pushes: [0x10, 0x30],
            ..Memo::EMPTY
        };
        for before in [0usize, 5, 60, 61, 62, 63, 64, 100] {
            let (mut one_by_one, mut at_once) = (walk(), walk());
            for i in 0..before as u64 {
                one_by_one.push(i + 1);
                at_once.push(i + 1);
            }
            for op in ops {
                match op {
                    Some(ip) => one_by_one.push(ip),
                    None => {
                        one_by_one.pop();
                    }
                }
            }
            // The same entry stopped at a compressed return after them (its
            // flag is no depth).
            let mut partial = Walk {
                stack: at_once.stack,
                ..walk()
            };
            (partial.top, partial.len) = (at_once.top, at_once.len);
            partial.apply(&Memo {
                peak: m.peak | PARTIAL,
                ..m
            });
            at_once.apply(&m);
            let want = drain(one_by_one);
            assert_eq!(drain(partial), want, "{before} before, partial");
            assert_eq!(drain(at_once), want, "{before} before");
        }
    }

    /// A TNT-8 byte's last bits as a byte of their own: the same bits, oldest
    /// first, as the packet layer reads them (the whole byte for all its bits).
    #[test]
    fn sub_byte_holds_the_last_bits() {
        let bits = |byte: u8| {
            pt_encoder::Tnt::from_tnt8_byte(byte)
                .iter()
                .collect::<Vec<_>>()
        };
        for byte in (4u8..=254).step_by(2) {
            let payload = byte >> 1;
            let size = 7 - payload.leading_zeros() as u8;
            let all = bits(byte);
            assert_eq!(all.len(), usize::from(size), "{byte:#04x}");
            assert_eq!(Memo::sub_byte(payload, size), byte);
            for left in 1..=size {
                let sub = Memo::sub_byte(payload, left);
                assert_eq!(
                    bits(sub)[..],
                    all[usize::from(size - left)..],
                    "{byte:#04x}, last {left}"
                );
            }
        }
    }

    /// The fast lane's CYC lengths and counts are the packet layer's, and it leaves
    /// to the event decoder what the packet layer refuses or (SKD007) reads as an OVF.
    #[test]
    fn cyc_matches_packet_layer() {
        let mut cases: Vec<Vec<u8>> = Vec::new();
        for b0 in (3u8..=255).step_by(4) {
            for b1 in 0..=255u8 {
                cases.push(vec![b0, b1, 0xf3]);
                cases.push(vec![b0, b1, 0x55]);
            }
        }
        // Long counts: 2 to 9 bytes, and 10 (a ninth extension byte: past 64 bits).
        for n in 1..=9 {
            let mut bytes = vec![0xff];
            bytes.extend(std::iter::repeat_n(0xff, n - 1));
            bytes.push(0x7e);
            cases.push(bytes);
        }
        for skd007 in [false, true] {
            let mut config = pt_decoder::Config::default();
            config.errata.skd007 = skd007;
            for case in &cases {
                let mut w = [0u8; 16];
                w[..case.len()].copy_from_slice(case);
                let mut pkt = pt_decoder::PacketDecoder::new(&w, &config);
                pkt.resume_at(0).unwrap();
                let want = match pkt.next_packet() {
                    Ok((_, Packet::Cyc { value })) => Some((value, pkt.offset().unwrap() as usize)),
                    _ => None,
                };
                assert_eq!(cyc(&w, skd007), want, "{case:02x?} skd007 {skd007}");
            }
        }
    }

    /// The fast lane's IP forms update the last IP as the packet layer does.
    #[test]
    fn ip_forms_match_last_ip() {
        let ips = [
            0,
            0x1234,
            0x40_1000,
            0x7fff_0000_5a5a,
            0xffff_8000_0000_0010,
            0xffff_ffff_8100_002b,
            0x0000_8000_0000_0001,
            0xdead_beef_cafe_f00d,
        ];
        for &last in &ips {
            for &ip in &ips {
                for c in IpCompression::ALL {
                    let mut bytes = Vec::new();
                    let p = Packet::Ip(IpPacketKind::Tip, IpPayload::new(c, ip));
                    encode_to_vec(&p, &mut bytes).unwrap();
                    let len = bytes.len();
                    bytes.resize(16, 0);
                    let form = IP_FORMS[usize::from(bytes[0] >> 5)];
                    let mut state = LastIp::new();
                    state.update(IpPayload::new(IpCompression::Full, last));
                    let want = state.update(IpPayload::new(c, ip));
                    if c == IpCompression::Suppressed {
                        assert_eq!(form.len, 0);
                        continue;
                    }
                    assert_eq!(form.len, len, "{c:?}");
                    let word1 = u64::from_le_bytes(bytes[1..9].try_into().unwrap());
                    assert_eq!(Some(form.apply(last, word1)), want, "{c:?} {last:x} {ip:x}");
                }
            }
        }
        for reserved in [5u8, 7] {
            assert_eq!(IP_FORMS[usize::from(reserved)].len, 0);
        }
    }
}
