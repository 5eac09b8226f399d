//! The coverage decoder: a trace and its code → an edge bitmap, and on request the
//! exact edges and basic blocks.
//!
//! It reads events from pt-decoder's event decoder (so it accepts what the flow
//! decoder accepts: PSB+, return compression, timing packets, OVF, TIP.PGE/PGD,
//! asynchronous branches, several sections) and walks the code on its own
//! [graph](crate::graph) of nodes: one per run of code up to a branch that needs
//! trace. Its analysis stays across calls, for thousands of runs of one binary;
//! the bitmap is reset with one `fill`.
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
use pt_encoder::ExecMode;

use crate::bitmap::EdgeHash;
use crate::edge::{BasicBlock, Edge, EdgeKind};
use crate::error::{CoverageError, ErrorKind};
use crate::graph::{BuildCtx, Code, Graph, NodeKind, NONE};

/// Calls to the page-fetch callback: where to copy the 4 KiB page at an address.
pub const PAGE_SIZE: usize = 4096;

/// Steps through [`NodeKind::Continue`] nodes without trace before giving up.
const MAX_CONTINUES: u32 = 64;

/// Return addresses kept for compressed returns (as the hardware's stack).
const RETSTACK_SIZE: usize = 64;

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
        let mut walk = Walk {
            pos: Pos::Off,
            mode: ExecMode::Unknown,
            stack: [0; RETSTACK_SIZE],
            top: 0,
            len: 0,
            pending: None,
            deferred_tip: None,
            last_edge: None,
        };
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

    /// Counts an edge the trace decided.
    #[inline]
    fn edge(&mut self, walk: &mut Walk, from: u64, to: u64, kind: EdgeKind) {
        let i = (self.options.hash.index(from, to) & self.mask) as usize;
        self.map[i] = self.map[i].wrapping_add(1);
        if self.options.collect {
            self.collected.edge(from, to, kind);
        }
        walk.last_edge = Some((i as u32, from, to));
    }

    /// Takes back the last edge counted if nothing ran after it.
    fn undo_last_edge(&mut self, walk: &mut Walk) {
        let Some((i, from, to)) = walk.last_edge.take() else {
            return;
        };
        let b = &mut self.map[i as usize];
        *b = b.wrapping_sub(1);
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
                let mut left = size;
                while left > 0 {
                    left = self.tnt_run(walk, bits, left, out);
                    if left > 0 {
                        left -= 1;
                        self.tnt_bit(walk, code, ev, bits >> left & 1 != 0, out)?;
                    }
                }
            }
            EventKind::Tip { .. } if walk.deferred_tip == Some(event.offset) => {
                // Taken already, for the branch it was deferred from.
                walk.deferred_tip = None;
            }
            EventKind::Tip { ip } => {
                let id = self.at_trace_node(walk, code)?;
                let node = self.graph.nodes[id as usize];
                let kind = match node.kind {
                    NodeKind::Ret => EdgeKind::Return,
                    NodeKind::IndirectJump => EdgeKind::IndirectJump,
                    NodeKind::IndirectCall => EdgeKind::IndirectCall,
                    NodeKind::Far => EdgeKind::Far,
                    _ => return Err((ErrorKind::Mismatch, node.cofi)),
                };
                if event.ip_suppressed {
                    return Err((ErrorKind::Trace(ErrorCode::IpSuppressed), node.cofi));
                }
                self.enter(walk, id, Stop::None);
                if kind == EdgeKind::IndirectCall {
                    walk.push(node.fall);
                }
                self.edge(walk, node.cofi, ip, kind);
                out.edges += 1;
                walk.pos = Pos::At(ip);
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
    #[inline]
    fn at_trace_node(
        &mut self,
        walk: &mut Walk,
        code: &mut dyn Code,
    ) -> Result<u32, (ErrorKind, u64)> {
        let mut continues = 0;
        loop {
            let Some(id) = self.resolve(walk, code) else {
                return Err((ErrorKind::Trace(ErrorCode::NoEnable), 0));
            };
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
                            self.graph.nodes[id as usize].next[0] = next;
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

    /// The hot loop: TNT bits `left - 1` down to 0 of `bits` through linked
    /// conditional nodes that push nothing, in registers; returns the bits left for
    /// [`Self::tnt_bit`] (a node of another kind, not linked yet, or collecting).
    #[inline]
    fn tnt_run(&mut self, walk: &mut Walk, bits: u64, mut left: u8, out: &mut Outcome) -> u8 {
        let Pos::Node(mut id) = walk.pos else {
            return left;
        };
        if self.options.collect || walk.pending.is_some() {
            return left;
        }
        let mut last = None;
        let start = left;
        while left > 0 {
            let node = &self.graph.nodes[id as usize];
            if node.kind != NodeKind::Cond || node.npush != 0 {
                break;
            }
            let t = (bits >> (left - 1) & 1) as usize;
            let next = node.next[t];
            if next == NONE {
                break;
            }
            let i = node.idx[t] as usize;
            self.map[i] = self.map[i].wrapping_add(1);
            last = Some((id, t));
            id = next;
            left -= 1;
        }
        if let Some((from, t)) = last {
            let node = &self.graph.nodes[from as usize];
            let to = if t == 1 { node.target } else { node.fall };
            walk.last_edge = Some((node.idx[t], node.cofi, to));
            out.edges += u64::from(start - left);
        }
        walk.pos = Pos::Node(id);
        left
    }

    #[inline]
    fn tnt_bit(
        &mut self,
        walk: &mut Walk,
        code: &mut dyn Code,
        ev: &EventDecoder<'_>,
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
                walk.last_edge = Some((i as u32, node.cofi, to));
                walk.pos = match node.next[t] {
                    NONE => {
                        let mut ctx = Self::ctx(&mut self.cache, code, &self.options, self.mask);
                        let next = self.graph.node(&mut ctx, to, node.mode);
                        self.graph.nodes[id as usize].next[t] = next;
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
                self.edge(walk, node.cofi, to, EdgeKind::Return);
                out.edges += 1;
                walk.pos = Pos::At(to);
                Ok(())
            }
            NodeKind::IndirectJump | NodeKind::IndirectCall if walk.deferred_tip.is_none() => {
                // The hardware may send the TIP of an indirect branch after TNT
                // packets of the branches that follow it: look for it.
                let Some((ip, offset)) = deferred_tip(ev) else {
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
                self.edge(walk, node.cofi, ip, kind);
                out.edges += 1;
                walk.pos = Pos::At(ip);
                self.tnt_bit(walk, code, ev, taken, out)
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
    last_edge: Option<(u32, u64, u64)>,
}

impl Walk {
    #[inline]
    fn push(&mut self, ip: u64) {
        self.top = (self.top + 1) % RETSTACK_SIZE;
        self.stack[self.top] = ip;
        self.len = (self.len + 1).min(RETSTACK_SIZE);
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
