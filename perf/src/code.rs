//! The code a queue runs, walked the way perf's decoder asks for it
//! ([`crate::decode::Walker`]): from an IP to the next branch perf knows, cached per
//! image as runs of instructions ("perf blocks").
//!
//! A block is the run of instructions from a start IP up to and including the
//! first one perf calls a branch, within one image section (perf's walk goes on
//! into the next mapping; so does this one, block after block). The block keeps
//! its instructions' bytes, so a walk that stops early (an instruction sample
//! every N instructions, a FUP's IP) steps through them without decoding again,
//! and [`CodeWalker::block_insns`] hands out a block's instruction IPs. Blocks are
//! cached per image and execution mode ([`CodeWalker::set_mode`], from the
//! decoder's MODE.Exec): a block is keyed on (IP, mode).
//!
//! # One block cache, two policies
//!
//! The cache is `pt_decoder::block_cache::BlockCache`, the one libipt's flow
//! decoder uses (its arena, (IP, mode) index, successor links, hot records, stats
//! and build loop), with perf's policy, [`PerfBlocks`]. The policies differ in:
//!
//! * what ends a block: here what perf's decoder calls a branch
//!   ([`crate::decode::insn::classify`]: INT1, VMCALL, UIRET and ERET are none, far
//!   branches are indirect); libipt's `Insn::ends_block` there (every change of
//!   flow, plus MOV CR3 and VMPTRLD, to which events bind);
//! * what a block keeps: here every instruction's bytes (perf's `insn` field, the
//!   fast path's plain instruction steps) and a [`WalkBlock`]; there only their
//!   sizes and a `CachedBlock`;
//! * the hot record: here the branch's IP, target, length and perf operation
//!   (what [`CodeWalker::follow_tnt`] reads), there libipt's class and kind.
//!
//! # The TNT fast path stays here
//!
//! [`CodeWalker::follow_tnt`], for perf's [`crate::decode::Decoder::take_run`],
//! follows TNT bits from block to block over the shared cache's links. libipt's
//! counting fast path (`pt_decoder`'s `flow/block/skip.rs`) walks the same links
//! but yields only instruction counts and the return stack, and memoises whole TNT
//! runs; this one yields one [`Step`] per branch (each becomes a sample) and keeps
//! perf's rules at every bit (its loop check on jumps with no plain instructions,
//! return compression only with a return address on perf's stack, a stop where a
//! branch leaves the kernel). A single loop would test at every bit which engine it
//! runs for, in the loop that both engines spend their time in.

use pt_decoder::block_cache::{BlockCache, BlockEnd, BlockId, BlockPolicy, BlockShape, NO_BLOCK};
use pt_decoder::image::Image;
use pt_decoder::insn::Insn;
use pt_encoder::ExecMode;

use crate::decode::insn::{classify, Branch, Op, PerfInsn, INSN_BUF};
use crate::decode::{PlainInsn, RunBlock, Step, TntWalk, WalkError, Walker};

/// Why a block ends where it ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// In a branch (its last instruction).
    Branch,
    /// At the end of its section (or after the most instructions a block holds):
    /// the walk goes on in whatever is mapped next.
    SectionEnd,
    /// Before an instruction that does not decode (or is not mapped).
    Bad,
}

/// A run of instructions up to a branch, decoded once.
#[derive(Clone, Copy, Debug)]
pub struct WalkBlock {
    /// The first instruction's IP.
    pub ip: u64,
    /// How many instructions (0 only for a block of nothing at `End::Bad`).
    pub ninsn: u32,
    /// The last instruction's IP.
    pub last_ip: u64,
    /// The last instruction, as perf sees it (a branch if `end` is `Branch`).
    pub last: PerfInsn,
    /// Why the block ends.
    pub end: End,
    /// Where its instructions start in the cache's arena.
    first: u32,
    /// The mode it was decoded in.
    mode: ExecMode,
}

/// How a block's branch takes TNT bits ([`CodeWalker::follow_tnt`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HotKind {
    /// A conditional branch: a bit.
    Cond,
    /// A direct jump (or a call to the next instruction): no bit.
    Jump,
    /// A direct call: no bit, its return address onto the stack.
    Call,
    /// A return: a bit, if compressed.
    Ret,
    /// Anything else (an indirect branch, no branch): not followed.
    Stop,
}

/// What following TNT bits needs of a block, in one small record (half a
/// cache line: the walk from block to block reads nothing else; a step's
/// branch bytes and instructions are the block's own, read apart).
#[derive(Clone, Copy, Debug)]
#[repr(align(32))]
pub struct PerfHot {
    /// The branch's IP.
    last_ip: u64,
    /// A direct branch's target.
    target: u64,
    /// The blocks after it (not taken, taken), once known: the cache's links.
    next: [u32; 2],
    /// How many instructions.
    ninsn: u32,
    kind: HotKind,
    /// The branch's length and operation.
    len: u8,
    op: Op,
}

/// Instructions per block at most (long straight-line code is split).
const MAX_BLOCK: u32 = 4096;

/// perf's blocks, as a [`BlockPolicy`] of the shared block cache: they end at what
/// perf calls a branch, keep every instruction (IP, length, bytes) as a
/// [`PlainInsn`], a [`WalkBlock`] per block and a [`PerfHot`] hot record.
#[derive(Clone, Copy, Debug, Default)]
pub struct PerfBlocks;

impl BlockPolicy for PerfBlocks {
    type Insn = PlainInsn;
    type Block = WalkBlock;
    type Hot = PerfHot;

    const MAX_INSNS: u32 = MAX_BLOCK;
    // perf's walk decodes only what it is asked for.
    const PREFETCH: u32 = 0;

    #[inline]
    fn ends_block(insn: &Insn) -> bool {
        classify(insn.kind).1 != Branch::None
    }

    #[inline]
    fn keep(insn: &Insn, bytes: &[u8]) -> PlainInsn {
        let mut buf = [0u8; INSN_BUF];
        let n = usize::from(insn.size).min(bytes.len()).min(INSN_BUF);
        buf[..n].copy_from_slice(&bytes[..n]);
        PlainInsn {
            ip: insn.ip,
            len: insn.size,
            bytes: buf,
        }
    }

    fn block(shape: &BlockShape, insns: &[PlainInsn]) -> (WalkBlock, PerfHot) {
        let bytes = insns.last().map_or(&[][..], |i| &i.bytes[..]);
        let last = PerfInsn::from_pt(&shape.last, bytes);
        let last_ip = shape.last.ip;
        let end = match shape.end {
            BlockEnd::Branch => End::Branch,
            BlockEnd::SectionEnd | BlockEnd::Limit => End::SectionEnd,
            BlockEnd::BadInsn => End::Bad,
        };
        let block = WalkBlock {
            ip: shape.ip,
            ninsn: shape.ninsn,
            last_ip,
            last,
            end,
            first: shape.first,
            mode: shape.mode,
        };
        let kind = match (end, last.branch, last.op) {
            (End::Branch, _, Op::Ret) => HotKind::Ret,
            (End::Branch, Branch::Conditional, _) => HotKind::Cond,
            (End::Branch, Branch::Unconditional, Op::Call) if last.rel != 0 => HotKind::Call,
            (End::Branch, Branch::Unconditional, _) => HotKind::Jump,
            _ => HotKind::Stop,
        };
        let next_ip = last_ip.wrapping_add(u64::from(last.length));
        let hot = PerfHot {
            last_ip,
            target: next_ip.wrapping_add(last.rel as i64 as u64),
            next: [NO_BLOCK; 2],
            ninsn: shape.ninsn,
            kind,
            len: last.length,
            op: last.op,
        };
        (block, hot)
    }

    #[inline]
    fn ip(block: &WalkBlock) -> u64 {
        block.ip
    }

    #[inline]
    fn mode(block: &WalkBlock) -> ExecMode {
        block.mode
    }

    #[inline]
    fn last_ip(block: &WalkBlock) -> u64 {
        block.last_ip
    }

    #[inline]
    fn span(block: &WalkBlock) -> (u32, u32) {
        (block.first, block.ninsn)
    }

    #[inline]
    fn next_ip(block: &WalkBlock, taken: bool) -> Option<u64> {
        let next = block.last_ip.wrapping_add(u64::from(block.last.length));
        match block.last.branch {
            _ if !taken => Some(next),
            // A direct branch: its displacement is kept (perf's `rel`).
            Branch::Conditional | Branch::Unconditional => {
                Some(next.wrapping_add(block.last.rel as i64 as u64))
            }
            _ => None,
        }
    }

    #[inline]
    fn links(hot: &PerfHot) -> [u32; 2] {
        hot.next
    }

    #[inline]
    fn links_mut(hot: &mut PerfHot) -> &mut [u32; 2] {
        &mut hot.next
    }
}

/// What a cache is for: an image (its stamp) and the execution mode its code is
/// decoded in. A block is thus keyed on (IP, mode) within its image.
type Key = (u64, ExecMode);

/// The blocks of one image in one execution mode.
struct Cache {
    /// The mode its instructions are decoded in.
    mode: ExecMode,
    blocks: BlockCache<PerfBlocks>,
}

impl Cache {
    fn new(mode: ExecMode) -> Self {
        Cache {
            mode,
            blocks: BlockCache::with_policy(),
        }
    }

    /// The block at `ip` (`None` if no instruction decodes there).
    #[inline]
    fn lookup(&mut self, image: &Image, ip: u64) -> Option<u32> {
        self.blocks
            .lookup(image, ip, self.mode)
            .ok()
            .map(BlockId::raw)
    }

    /// The block at `ip`, reached from block `from` (a hint: the blocks last
    /// reached from it are tried first, then the hash map). The cache's blocks
    /// come from one image stamp, so they are never stale: the recent targets
    /// need no stamp check.
    #[inline(always)]
    fn lookup_from(&mut self, image: &Image, from: u32, ip: u64) -> Option<u32> {
        let from = BlockId::from_raw(from);
        if let Some(id) = self.blocks.recent(from, ip) {
            return Some(id.raw());
        }
        let id = self.blocks.lookup(image, ip, self.mode).ok()?;
        self.blocks.remember(from, ip, id);
        Some(id.raw())
    }

    #[inline(always)]
    fn block(&self, id: u32) -> &WalkBlock {
        self.blocks.block(BlockId::from_raw(id))
    }

    #[inline(always)]
    fn insns(&self) -> &[PlainInsn] {
        self.blocks.insn_arena()
    }
}

/// Where the last walk stopped inside a block, so that the next one (the next
/// instruction of an instruction-by-instruction walk) starts there.
#[derive(Clone, Copy, Debug)]
struct Cursor {
    /// The cache's key (image stamp, mode).
    key: Key,
    block: u32,
    /// Index of the next instruction in the block.
    index: u32,
    /// Its IP.
    ip: u64,
}

/// perf's instruction walk over one process's code, with a block cache per image
/// and execution mode.
pub struct CodeWalker {
    /// Caches by image stamp and mode (few: a short list, the last one used first).
    caches: Vec<(Key, Cache)>,
    last: usize,
    /// The key of `caches[last]` (stamp 0: none yet).
    last_key: Key,
    /// The mode the code is decoded in from now on ([`CodeWalker::set_mode`]).
    mode: ExecMode,
    cursor: Option<Cursor>,
    /// The block the last walk ended in (cache index, block): where the next
    /// walk most likely comes from.
    prev: (usize, u32),
    /// Instructions walked in total.
    pub walked: u64,
}

impl Default for CodeWalker {
    fn default() -> Self {
        CodeWalker {
            caches: Vec::new(),
            last: 0,
            last_key: (0, ExecMode::Bit64),
            mode: ExecMode::Bit64,
            cursor: None,
            prev: (0, 0),
            walked: 0,
        }
    }
}

impl CodeWalker {
    /// A walker with empty caches, decoding 64-bit code until told otherwise.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes the code walked from now on in `mode` (the decoder's MODE.Exec):
    /// blocks are cached per mode, so the same bytes walked in two modes are two
    /// blocks.
    pub fn set_mode(&mut self, mode: ExecMode) {
        self.mode = mode;
    }

    /// The mode code is decoded in.
    pub fn mode(&self) -> ExecMode {
        self.mode
    }

    #[inline]
    fn cache_index(&mut self, stamp: u64) -> usize {
        let key = (stamp, self.mode);
        if key == self.last_key && self.last < self.caches.len() {
            return self.last;
        }
        self.find_cache(key)
    }

    #[cold]
    fn find_cache(&mut self, key: Key) -> usize {
        let i = match self.caches.iter().position(|c| c.0 == key) {
            Some(i) => i,
            None => {
                self.caches.push((key, Cache::new(key.1)));
                self.caches.len() - 1
            }
        };
        self.last = i;
        self.last_key = key;
        i
    }

    fn cache(&mut self, image: &Image) -> &mut Cache {
        let i = self.cache_index(image.stamp());
        &mut self.caches[i].1
    }

    /// The block that starts at `ip` in `image` (a block of no instructions that
    /// ends [`End::Bad`] if none decodes there).
    pub fn block(&mut self, image: &Image, ip: u64) -> WalkBlock {
        let c = self.cache(image);
        match c.lookup(image, ip) {
            Some(id) => *c.block(id),
            None => WalkBlock {
                ip,
                ninsn: 0,
                last_ip: ip,
                last: PerfInsn::default(),
                end: End::Bad,
                first: 0,
                mode: c.mode,
            },
        }
    }

    /// The instruction IPs of `block` (one of this walker's for `image`), first to
    /// last, into `out`.
    pub fn block_insns(&mut self, image: &Image, block: &WalkBlock, out: &mut Vec<u64>) {
        let c = self.cache(image);
        let insns = c.insns().get(block.first as usize..).unwrap_or_default();
        let insns = insns.get(..block.ninsn as usize).unwrap_or_default();
        out.extend(insns.iter().map(|i| i.ip));
    }

    /// perf's walk (see [`Walker::walk`]) in `image`.
    pub fn walk(
        &mut self,
        image: &Image,
        insn: &mut PerfInsn,
        ip: &mut u64,
        to_ip: u64,
        max_insn_cnt: u64,
    ) -> Result<u64, WalkError> {
        insn.length = 0;
        insn.op = Default::default();
        if to_ip != 0 && *ip == to_ip {
            return Ok(0);
        }
        let stamp = image.stamp();
        let key = (stamp, self.mode);
        let mut cnt = 0u64;
        loop {
            // Start in the block the last walk stopped in, or at a block of its own.
            let ci = self.cache_index(stamp);
            let (bid, mut index) = match self.cursor {
                Some(c) if c.key == key && c.ip == *ip => (Some(c.block), c.index),
                _ => {
                    let c = &mut self.caches[ci].1;
                    let id = if self.prev.0 == ci {
                        c.lookup_from(image, self.prev.1, *ip)
                    } else {
                        c.lookup(image, *ip)
                    };
                    (id, 0)
                }
            };
            self.cursor = None;
            // No instruction decodes at `ip`.
            let bid = bid.ok_or(WalkError::NoCode)?;
            self.prev = (ci, bid);
            let c = &mut self.caches[ci].1;
            let b = *c.block(bid);
            let left = u64::from(b.ninsn - index);
            // The whole rest of the block, if nothing stops the walk inside it.
            if to_ip == 0
                && b.end == End::Branch
                && (max_insn_cnt == 0 || cnt + left <= max_insn_cnt)
            {
                cnt += left;
                self.walked += left;
                *ip = b.last_ip;
                *insn = b.last;
                return Ok(cnt);
            }
            let insns = &c.insns()[b.first as usize..][..b.ninsn as usize];
            let mut at = *ip;
            while index < b.ninsn {
                let pi = insns[index as usize];
                cnt += 1;
                self.walked += 1;
                let is_last = index + 1 == b.ninsn;
                if is_last && b.end == End::Branch {
                    *ip = at;
                    *insn = b.last;
                    return Ok(cnt);
                }
                if max_insn_cnt != 0 && cnt >= max_insn_cnt {
                    *ip = at;
                    *insn = if is_last {
                        b.last
                    } else {
                        // A plain instruction: its length and bytes are in the block.
                        PerfInsn {
                            length: pi.len,
                            buf: pi.bytes,
                            ..PerfInsn::default()
                        }
                    };
                    self.cursor = Some(Cursor {
                        key,
                        block: bid,
                        index: index + 1,
                        ip: at.wrapping_add(u64::from(pi.len)),
                    });
                    return Ok(cnt);
                }
                at = at.wrapping_add(u64::from(pi.len));
                index += 1;
                if to_ip != 0 && at == to_ip {
                    *ip = at;
                    insn.length = 0;
                    insn.op = Default::default();
                    if index < b.ninsn {
                        self.cursor = Some(Cursor {
                            key,
                            block: bid,
                            index,
                            ip: at,
                        });
                    }
                    return Ok(cnt);
                }
            }
            *ip = at;
            if b.end == End::Bad {
                return Err(WalkError::NoCode);
            }
        }
    }
}

impl CodeWalker {
    /// See [`Walker::next_block`]: the block at `ip` in the image whose cache
    /// is `ci` ([`CodeWalker::cache_of`]; the rest of the block the last walk
    /// stopped in, if it stopped there).
    #[inline(always)]
    pub fn next_block(&mut self, image: &Image, ci: usize, ip: u64, rb: &mut RunBlock) -> bool {
        let key = self.caches[ci].0;
        let c = &mut self.caches[ci].1;
        let (bid, index) = match self.cursor {
            Some(k) if k.key == key && k.ip == ip => (Some(k.block), k.index),
            _ if self.prev.0 == ci => (c.lookup_from(image, self.prev.1, ip), 0),
            _ => (c.lookup(image, ip), 0),
        };
        let Some(bid) = bid else { return false };
        let b = c.block(bid);
        if b.end != End::Branch || index >= b.ninsn {
            return false;
        }
        rb.ninsn = b.ninsn - index;
        rb.last_ip = b.last_ip;
        rb.last = b.last;
        rb.handle = [bid, index];
        rb.plain_at = [ci as u32, b.first + index];
        self.walked += u64::from(rb.ninsn);
        self.cursor = None;
        self.prev = (ci, bid);
        true
    }

    /// See [`Walker::follow_tnt`], in the image whose cache is `ci`.
    pub fn follow_tnt(
        &mut self,
        image: &Image,
        ci: usize,
        w: &mut TntWalk<'_>,
        max: usize,
        out: &mut Vec<Step>,
    ) {
        if w.every_insn {
            self.follow::<true>(image, ci, w, max, out);
        } else {
            self.follow::<false>(image, ci, w, max, out);
        }
    }

    /// [`CodeWalker::follow_tnt`] with every instruction a state (`EVERY`) or
    /// only branches.
    fn follow<const EVERY: bool>(
        &mut self,
        image: &Image,
        ci: usize,
        w: &mut TntWalk<'_>,
        max: usize,
        out: &mut Vec<Step>,
    ) {
        use crate::decode::ty::{BRANCH, INSTRUCTION};
        let key = self.caches[ci].0;
        let c = &mut self.caches[ci].1;
        let (bid, index) = match self.cursor {
            Some(k) if k.key == key && k.ip == w.ip => (Some(k.block), k.index),
            _ if self.prev.0 == ci => (c.lookup_from(image, self.prev.1, w.ip), 0),
            _ => (c.lookup(image, w.ip), 0),
        };
        // NO_BLOCK (no code there) stops the walk where a block's hot record is read.
        let mut bid = bid.unwrap_or(NO_BLOCK);
        let Some(stack) = w.stack.take() else { return };
        // The walk's state in locals (registers) while the loop runs.
        let (mut payload, mut count, mut cont) = (w.payload, w.count, w.cont);
        let (mut no_progress, mut ret_addr, mut tot) = (w.no_progress, w.ret_addr, w.tot);
        let (kernel_start, retcomp) = (w.kernel_start, w.return_compression);
        let mut updated = w.updated;
        let tot_start = tot;
        // The last block followed, and where its branch went (0: not taken).
        let (mut last, mut last_to) = (NO_BLOCK, 0u64);
        let (ahead, mut taken) = (w.ahead, w.taken);
        // Room for every step, so that no push reallocates.
        out.reserve(max.saturating_sub(out.len()));
        // The walk starts `index` instructions into its first block.
        let mut skip = index;
        while out.len() < max {
            if count == 0 {
                // The next short TNT packet, if that is what follows.
                let Some(next) = ahead[taken..].iter().position(|&b| b != 0) else {
                    break;
                };
                let Some(p) = crate::decode::packet::tnt8(ahead[taken + next]) else {
                    break;
                };
                taken += next + 1;
                (payload, count, cont) = (p.payload, p.count, false);
            }
            let Some(h) = c.blocks.hot(BlockId::from_raw(bid)) else {
                break;
            };
            if skip >= h.ninsn {
                break;
            }
            let n = h.ninsn - skip;
            let crosses = |to: u64| h.last_ip >= kernel_start && to < kernel_start;
            // Where the branch goes (0: not taken), the block there if known,
            // and its successor slot (2: none kept).
            // Tested in order of frequency as plain branches (a jump table's
            // indirect jump predicts worse).
            let (to_ip, next, slot) = if h.kind == HotKind::Cond {
                let bit = payload & (1 << 63) != 0;
                if bit && crosses(h.target) {
                    break;
                }
                payload <<= 1;
                count -= 1;
                cont = true;
                no_progress = 0;
                if bit {
                    (h.target, h.next[1], 1)
                } else {
                    (0, h.next[0], 0)
                }
            } else if h.kind == HotKind::Jump || h.kind == HotKind::Call {
                // perf's loop check: plain instructions walked one by one
                // reset it.
                if no_progress != 0 && !(EVERY && n > 1) || crosses(h.target) {
                    break;
                }
                if h.kind == HotKind::Call {
                    stack.push(h.last_ip.wrapping_add(u64::from(h.len)));
                }
                no_progress = 1;
                (h.target, h.next[1], 1)
            } else if h.kind == HotKind::Ret {
                let top = stack.last().copied().unwrap_or(0);
                if !retcomp || top == 0 || payload & (1 << 63) == 0 || crosses(top) {
                    break;
                }
                ret_addr = stack.pop().unwrap_or(0);
                payload <<= 1;
                count -= 1;
                cont = true;
                no_progress = 0;
                (top, NO_BLOCK, 2)
            } else {
                break;
            };
            tot += u64::from(n);
            if EVERY || to_ip != 0 {
                let b = c.block(bid);
                let type_ = match (EVERY, to_ip != 0) {
                    (true, true) => BRANCH | INSTRUCTION,
                    (true, false) => INSTRUCTION,
                    _ => BRANCH,
                };
                out.push(Step {
                    plain: if EVERY { n - 1 } else { 0 },
                    plain_at: [ci as u32, b.first + skip],
                    from_ip: h.last_ip,
                    to_ip,
                    tot_insn_cnt: tot,
                    type_,
                    op: h.op,
                    len: h.len,
                    insn: b.last.buf,
                });
                updated |= cont;
            } else if count == 0 {
                updated = true;
            }
            (last, last_to) = (bid, to_ip);
            skip = 0;
            bid = if next != NO_BLOCK {
                next
            } else {
                let ip = if to_ip != 0 {
                    to_ip
                } else {
                    h.last_ip.wrapping_add(u64::from(h.len))
                };
                let id = if slot < 2 {
                    let id = c.lookup(image, ip);
                    if let Some(id) = id {
                        let (from, to) = (BlockId::from_raw(bid), BlockId::from_raw(id));
                        c.blocks.link(from, slot == 1, to);
                    }
                    id
                } else {
                    c.lookup_from(image, bid, ip)
                };
                id.unwrap_or(NO_BLOCK)
            };
        }
        w.stack = Some(stack);
        if let Some(&h) = c.blocks.hot(BlockId::from_raw(last)) {
            let insn = c.block(last).last.buf;
            w.tail = (!EVERY && last_to == 0).then_some((h.op, h.len, insn));
            w.ip = if last_to != 0 {
                last_to
            } else {
                h.last_ip.wrapping_add(u64::from(h.len))
            };
            w.blocks += 1;
            self.cursor = None;
            self.prev = (ci, last);
        }
        (w.payload, w.count, w.cont) = (payload, count, cont);
        (w.no_progress, w.ret_addr, w.tot, w.updated) = (no_progress, ret_addr, tot, updated);
        w.taken = taken;
        self.walked += tot - tot_start;
    }

    /// See [`Walker::stop_in_block`].
    pub fn stop_in_block(&mut self, rb: &RunBlock, count: u32) {
        let ([bid, index], [ci, first]) = (rb.handle, rb.plain_at);
        let count = count.min(rb.ninsn);
        self.walked -= u64::from(rb.ninsn - count);
        let (key, c) = &self.caches[ci as usize];
        self.cursor = c.insns().get((first + count) as usize).map(|next| Cursor {
            key: *key,
            block: bid,
            index: index + count,
            ip: next.ip,
        });
    }

    /// The index of `image`'s cache (for [`CodeWalker::next_block`]).
    pub fn cache_of(&mut self, image: &Image) -> usize {
        self.cache_index(image.stamp())
    }

    /// See [`Walker::plain_insns`]: e.g. the plain instructions of a run's
    /// [`Step`] (`plain` of them at `plain_at`).
    #[inline]
    pub fn plain_insns(&self, at: [u32; 2], n: u32) -> &[PlainInsn] {
        let [ci, first] = at;
        self.caches
            .get(ci as usize)
            .and_then(|(_, c)| c.insns().get(first as usize..)?.get(..n as usize))
            .unwrap_or(&[])
    }
}

/// A [`CodeWalker`] over one image, as the decoder's [`Walker`].
pub struct ImageWalker<'w, 'i> {
    walker: &'w mut CodeWalker,
    image: &'i Image,
    /// The image's cache in the walker, once looked up.
    cache: Option<usize>,
}

impl<'w, 'i> ImageWalker<'w, 'i> {
    /// `walker` over `image`.
    pub fn new(walker: &'w mut CodeWalker, image: &'i Image) -> Self {
        ImageWalker {
            walker,
            image,
            cache: None,
        }
    }

    #[inline(always)]
    fn cache(&mut self) -> usize {
        match self.cache {
            Some(ci) => ci,
            None => *self.cache.insert(self.walker.cache_of(self.image)),
        }
    }
}

impl Walker for ImageWalker<'_, '_> {
    fn walk(
        &mut self,
        insn: &mut PerfInsn,
        ip: &mut u64,
        to_ip: u64,
        max_insn_cnt: u64,
        _nr: bool,
    ) -> Result<u64, WalkError> {
        self.walker.walk(self.image, insn, ip, to_ip, max_insn_cnt)
    }

    #[inline]
    fn set_exec_mode(&mut self, mode: ExecMode) {
        if mode != self.walker.mode {
            self.walker.set_mode(mode);
            self.cache = None;
        }
    }

    #[inline(always)]
    fn next_block(&mut self, ip: u64, block: &mut RunBlock) -> bool {
        let ci = self.cache();
        self.walker.next_block(self.image, ci, ip, block)
    }

    #[inline(always)]
    fn stop_in_block(&mut self, block: &RunBlock, count: u32) {
        self.walker.stop_in_block(block, count);
    }

    #[inline]
    fn follow_tnt(&mut self, walk: &mut TntWalk<'_>, max: usize, out: &mut Vec<Step>) {
        let ci = self.cache();
        self.walker.follow_tnt(self.image, ci, walk, max, out);
    }

    #[inline]
    fn plain_insns(&self, at: [u32; 2], n: u32) -> &[PlainInsn] {
        self.walker.plain_insns(at, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::insn::Op;

    // 1000: add rax,1 ; 1004: nop ; 1005: jnz 1000 ; 1007: ret
    fn image() -> Image {
        let mut im = Image::new();
        im.add_bytes(
            0x1000,
            vec![0x48, 0x83, 0xc0, 0x01, 0x90, 0x75, 0xf9, 0xc3],
            "t",
        )
        .unwrap();
        im
    }

    #[test]
    fn walks_to_the_branch() {
        let im = image();
        let mut w = CodeWalker::new();
        let mut insn = PerfInsn::default();
        let mut ip = 0x1000;
        let n = w.walk(&im, &mut insn, &mut ip, 0, 0).unwrap();
        assert_eq!((n, ip, insn.op, insn.rel), (3, 0x1005, Op::Jcc, -7));
    }

    /// The same bytes in 32-bit code: 0x48 is `dec eax` there, not a REX prefix;
    /// the walker caches the two modes' blocks apart.
    #[test]
    fn blocks_are_keyed_on_the_execution_mode() {
        let im = image();
        let mut w = CodeWalker::new();
        let mut insn = PerfInsn::default();
        let mut ip = 0x1000;
        assert_eq!(w.walk(&im, &mut insn, &mut ip, 0, 0), Ok(3));
        w.set_mode(ExecMode::Bit32);
        let mut ip = 0x1000;
        assert_eq!(w.walk(&im, &mut insn, &mut ip, 0, 0), Ok(4));
        assert_eq!((ip, insn.op), (0x1005, Op::Jcc));
        let b32 = w.block(&im, 0x1000);
        w.set_mode(ExecMode::Bit64);
        let b64 = w.block(&im, 0x1000);
        assert_eq!((b32.ninsn, b64.ninsn), (4, 3));
        let mut ips = Vec::new();
        w.set_mode(ExecMode::Bit32);
        w.block_insns(&im, &b32, &mut ips);
        assert_eq!(ips, [0x1000, 0x1001, 0x1004, 0x1005]);
    }

    #[test]
    fn walks_one_at_a_time() {
        let im = image();
        let mut w = CodeWalker::new();
        let mut insn = PerfInsn::default();
        let mut ips = Vec::new();
        let mut ip = 0x1000;
        for _ in 0..3 {
            let n = w.walk(&im, &mut insn, &mut ip, 0, 1).unwrap();
            assert_eq!(n, 1);
            ips.push((ip, insn.length));
            if insn.branch == Branch::None {
                ip += u64::from(insn.length);
            }
        }
        assert_eq!(ips, [(0x1000, 4), (0x1004, 1), (0x1005, 2)]);
    }

    #[test]
    fn stops_at_to_ip() {
        let im = image();
        let mut w = CodeWalker::new();
        let mut insn = PerfInsn::default();
        let mut ip = 0x1000;
        let n = w.walk(&im, &mut insn, &mut ip, 0x1004, 0).unwrap();
        assert_eq!((n, ip, insn.length), (1, 0x1004, 0));
        let n = w.walk(&im, &mut insn, &mut ip, 0x1004, 0).unwrap();
        assert_eq!((n, ip), (0, 0x1004));
    }

    #[test]
    fn no_code_is_an_error() {
        let im = image();
        let mut w = CodeWalker::new();
        let mut insn = PerfInsn::default();
        let mut ip = 0x2000;
        assert_eq!(
            w.walk(&im, &mut insn, &mut ip, 0, 0),
            Err(WalkError::NoCode)
        );
    }

    /// Blocks end where perf sees a branch: MOV CR3 and INT1 end libipt's blocks
    /// in the same cache design, not perf's.
    #[test]
    fn blocks_end_where_perf_sees_a_branch() {
        // 1000: mov cr3, rax ; 1003: int1 ; 1004: ret
        let mut im = Image::new();
        im.add_bytes(0x1000, vec![0x0f, 0x22, 0xd8, 0xf1, 0xc3], "t")
            .unwrap();
        let mut w = CodeWalker::new();
        let b = w.block(&im, 0x1000);
        assert_eq!(
            (b.ninsn, b.last_ip, b.last.op, b.end),
            (3, 0x1004, Op::Ret, End::Branch)
        );
        let mut ips = Vec::new();
        w.block_insns(&im, &b, &mut ips);
        assert_eq!(ips, [0x1000, 0x1003, 0x1004]);
        let mut libipt = pt_decoder::block_cache::BlockCache::new();
        let id = libipt.lookup(&im, 0x1000, ExecMode::Bit64).unwrap();
        assert_eq!(libipt.block(id).ninsn, 1);
        // Nothing mapped: a block of nothing.
        let none = w.block(&im, 0x2000);
        assert_eq!((none.ninsn, none.end), (0, End::Bad));
    }

    /// The plain instructions keep their bytes (perf's `insn` field), also for an
    /// instruction that runs into the next section.
    #[test]
    fn plain_instructions_keep_their_bytes() {
        // 1000: nop ; 1001: add rax, 1 (its last byte in the next section) ; 1005: ret
        let mut im = Image::new();
        im.add_bytes(0x1000, vec![0x90, 0x48, 0x83, 0xc0], "a")
            .unwrap();
        im.add_bytes(0x1004, vec![0x01, 0xc3], "b").unwrap();
        let mut w = CodeWalker::new();
        let first = w.block(&im, 0x1000);
        assert_eq!((first.ninsn, first.end), (2, End::SectionEnd));
        let ci = w.cache_of(&im);
        let insns = w.plain_insns([ci as u32, first.first], 2);
        assert_eq!(
            (insns[0].ip, insns[0].len, insns[0].bytes[0]),
            (0x1000, 1, 0x90)
        );
        assert_eq!((insns[1].ip, insns[1].len), (0x1001, 4));
        assert_eq!(&insns[1].bytes[..5], &[0x48, 0x83, 0xc0, 0x01, 0]);
        let mut insn = PerfInsn::default();
        let mut ip = 0x1000;
        assert_eq!(w.walk(&im, &mut insn, &mut ip, 0, 0), Ok(3));
        assert_eq!((ip, insn.op), (0x1005, Op::Ret));
    }
}
