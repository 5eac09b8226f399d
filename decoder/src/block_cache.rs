//! The block cache: straight-line runs of instructions, decoded once and reused, for
//! both flow engines (libipt's here, perf's in `pt_perf::code`).
//!
//! # Map
//!
//! * [`BlockCache`] is the machinery: blocks in an arena named by [`BlockId`], an index
//!   keyed on (IP, [`ExecMode`]), successor links, a hot record per block, the stamp
//!   of the [`CodeSource`] its blocks come from (when it changes, everything is dropped
//!   and rebuilt on demand), [`CacheStats`], and the build loop that decodes a block
//!   and prefetches along its fall-through chain.
//! * A [`BlockPolicy`] says what ends a block and what is kept: per instruction (one
//!   arena, block after block), per block, and in the hot record. One policy per
//!   engine:
//!   * [`LibiptBlocks`] (the default: `BlockCache` alone means
//!     `BlockCache<LibiptBlocks>`), for libipt's flow decoder: a [`CachedBlock`] ends at
//!     the first instruction that [`Insn::ends_block`] (anything that can change the
//!     flow, plus MOV CR3 and VMPTRLD, to which synchronous events bind); it keeps the
//!     sizes of its instructions and a 16-byte [`BlockSummary`] as its hot record;
//!   * `pt_perf::code::PerfBlocks`, for perf's code walker: a block ends at what perf's
//!     decoder calls a branch, keeps every instruction's bytes (perf's `insn` field)
//!     and the branch's target in its hot record.
//!
//! A block also ends at the end of the section that holds it, at an invalid
//! instruction, and at the cache's instruction limit ([`BlockEnd`]), whatever the
//! policy. The instruction-flow decoder then handles a whole block with one lookup:
//! count its instructions, look at its last one, and move on. Each block remembers its
//! successors once they have been looked up ([`BlockCache::fall_through`],
//! [`BlockCache::taken`], and for indirect branches the last two targets,
//! [`BlockCache::lookup_from`]), so a hot loop goes from block to block by array index
//! without hashing.
//!
//! # TNT fast paths: one per engine
//!
//! Both engines follow runs of TNT bits from block to block over these links, but each
//! in its own room: libipt's in `flow/block/skip.rs` (it yields only counts and the
//! return stack, and memoises whole TNT runs), perf's in `pt_perf::code` (it yields one
//! step per branch, each a sample, and applies perf's own rules: its loop check, its
//! return compression, the kernel-start check). What they share is this cache; what
//! they compute per bit differs, and one loop serving both would test at every bit
//! which engine it runs for.
//!
//! A flow decoder's inner loop, with TNT bits from the trace:
//!
//! ```
//! use pt_decoder::block_cache::BlockCache;
//! use pt_decoder::image::Image;
//! use pt_decoder::insn::InsnClass;
//! use pt_encoder::packet::ExecMode;
//!
//! // 0x1000: mov ecx, 3; 0x1005: dec ecx; jnz 0x1005; ret
//! let code = vec![0xb9, 3, 0, 0, 0, 0xff, 0xc9, 0x75, 0xfc, 0xc3];
//! let mut image = Image::new();
//! image.add_bytes(0x1000, code, "code")?;
//! let mut cache = BlockCache::new();
//! let mut id = cache.lookup(&image, 0x1000, ExecMode::Bit64)?;
//! let mut tnt = [true, true, false].into_iter();
//! let mut count = 0;
//! loop {
//!     let block = cache.summary(id);
//!     count += block.ninsn;
//!     id = match block.class {
//!         InsnClass::CondJump => cache.successor(&image, id, tnt.next().unwrap())?,
//!         // Straight-line code cut at a section end, MOV CR3, PTWRITE: go on.
//!         InsnClass::Other | InsnClass::Ptwrite => cache.fall_through(&image, id)?,
//!         // Returns and indirect branches need the return stack or a TIP.
//!         _ => break,
//!     };
//! }
//! // mov, dec, jnz (taken); dec, jnz (taken); dec, jnz (not taken); ret
//! assert_eq!(count, 8);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use pt_encoder::packet::ExecMode;

use crate::error::ErrorCode;
pub use crate::image::CodeError;
use crate::image::CodeSource;
use crate::insn::{decode_at, Insn, InsnClass, InsnKind, Run, Step};

/// Default cap on the instructions in one block (long straight-line code is split).
pub const MAX_BLOCK_INSNS: u32 = 0xffff;

/// Default number of fall-through blocks decoded ahead of a missed lookup.
pub const PREFETCH_BLOCKS: u32 = 8;

/// Names a block in a [`BlockCache`]. Valid until the cache is cleared: by
/// [`BlockCache::clear`] or by the first call after the code source's stamp changed
/// (look the current IP up again after changing the image).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(u32);

impl BlockId {
    /// The arena index.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The id as stored in compact tables (never [`NO_BLOCK`]).
    pub fn raw(self) -> u32 {
        self.0
    }

    /// An id [`Self::raw`] gave.
    pub fn from_raw(raw: u32) -> Self {
        BlockId(raw)
    }
}

/// A successor link that is not known yet (a raw [`BlockId`] never takes this value).
pub const NO_BLOCK: u32 = u32::MAX;

/// No successor known yet.
const UNLINKED: u32 = NO_BLOCK;

/// Why a block ends where it ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockEnd {
    /// The last instruction ends the block ([`BlockPolicy::ends_block`];
    /// for [`LibiptBlocks`], [`Insn::ends_block`]).
    Branch,
    /// The section ends after the last instruction; the next one, if any, lies in
    /// another section (or nothing is mapped there: looking it up gives
    /// [`ErrorCode::NoMap`]).
    SectionEnd,
    /// The instruction after the last one is invalid: looking it up gives
    /// [`ErrorCode::BadInsn`].
    BadInsn,
    /// The block reached the instruction limit; it simply goes on at the fall-through
    /// address.
    Limit,
}

/// A block as the build loop found it, whatever the policy: what a [`BlockPolicy`]
/// makes its records of ([`BlockPolicy::block`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockShape {
    /// The first instruction's address.
    pub ip: u64,
    /// The execution mode it was decoded in.
    pub mode: ExecMode,
    /// The id of the section that holds it ([`CodeSource::section_id`]).
    pub section: u32,
    /// How many instructions it holds (at least one).
    pub ninsn: u32,
    /// Where its instructions start in the cache's instruction arena
    /// ([`BlockCache::insn_arena`]).
    pub first: u32,
    /// The last instruction.
    pub last: Insn,
    /// Why the block ends there.
    pub end: BlockEnd,
    /// The last instruction runs past the end of its section and was completed from
    /// the next one.
    pub truncated: bool,
}

/// What a [`BlockCache`] keeps and where its blocks end: one implementation per flow
/// engine ([`LibiptBlocks`], perf's `PerfBlocks`).
pub trait BlockPolicy {
    /// What is kept of each instruction, in one arena, block after block.
    type Insn: Copy;
    /// What is kept of each block.
    type Block: Copy;
    /// What a walk from block to block reads of each block, with its two successor
    /// links ([`Self::links`]), kept apart from [`Self::Block`] so that the walk touches
    /// little memory.
    type Hot: Copy;

    /// The default cap on the instructions of a block.
    const MAX_INSNS: u32;
    /// The default number of fall-through blocks decoded ahead of a missed lookup.
    const PREFETCH: u32;

    /// Whether `insn` ends a block (it is then the block's last instruction).
    fn ends_block(insn: &Insn) -> bool;
    /// What is kept of `insn`, whose bytes are `bytes` (exactly its size).
    fn keep(insn: &Insn, bytes: &[u8]) -> Self::Insn;
    /// The records of a block just built; `insns` are its instructions' records.
    fn block(shape: &BlockShape, insns: &[Self::Insn]) -> (Self::Block, Self::Hot);

    /// The block's first address.
    fn ip(block: &Self::Block) -> u64;
    /// The execution mode the block was decoded in (its successors' too).
    fn mode(block: &Self::Block) -> ExecMode;
    /// The block's last instruction's address.
    fn last_ip(block: &Self::Block) -> u64;
    /// Where the block's instructions start in the arena, and how many there are.
    fn span(block: &Self::Block) -> (u32, u32);
    /// Where execution goes after the block: its fall-through address if not
    /// `taken`, else its last instruction's direct target (`None` if it has none).
    fn next_ip(block: &Self::Block, taken: bool) -> Option<u64>;
    /// The successor links, `[fall-through, taken]` as raw ids ([`NO_BLOCK`]: not yet).
    fn links(hot: &Self::Hot) -> [u32; 2];
    /// The successor links, to store them.
    fn links_mut(hot: &mut Self::Hot) -> &mut [u32; 2];
}

/// libipt's blocks (the flow decoder's, and the default policy of [`BlockCache`]):
/// they end where [`Insn::ends_block`] says, keep their instructions' sizes, and a
/// [`CachedBlock`] with a [`BlockSummary`] as its hot record.
#[derive(Clone, Copy, Debug, Default)]
pub struct LibiptBlocks;

/// A run of instructions decoded once ([`LibiptBlocks`]' block record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CachedBlock {
    /// The first instruction's address.
    pub ip: u64,
    /// The execution mode it was decoded in.
    pub mode: ExecMode,
    /// The id of the section that holds it ([`CodeSource::section_id`], libipt's isid;
    /// a truncated last instruction continues in the next section).
    pub section: u32,
    /// How many instructions it holds (at least one).
    pub ninsn: u32,
    /// The last instruction: its class, kind and direct target say where to go next.
    pub last: Insn,
    /// Why the block ends there.
    pub end: BlockEnd,
    /// The last instruction runs past the end of its section and was completed from
    /// the next one (libipt's `truncated`).
    pub truncated: bool,
    /// Start of this block's instruction sizes in the cache's size arena.
    sizes: u32,
}

/// What the hot loop of a flow decoder needs from a block, in 16 bytes (kept apart
/// from the full [`CachedBlock`] so that the walk touches little memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockSummary {
    /// How many instructions the block holds.
    pub ninsn: u32,
    /// The last instruction's class.
    pub class: InsnClass,
    /// The last instruction's kind.
    pub kind: InsnKind,
    /// Why the block ends there.
    pub end: BlockEnd,
    /// Successor ids once known: `[fall-through, taken]`.
    links: [u32; 2],
}

impl CachedBlock {
    /// The address after the last instruction.
    pub fn fall_through(&self) -> u64 {
        self.last.next_ip()
    }

    /// Bytes covered by the block.
    pub fn byte_len(&self) -> u64 {
        self.fall_through().wrapping_sub(self.ip)
    }
}

impl BlockSummary {
    /// Whether the last instruction is a direct near branch (its target is known
    /// without trace: [`BlockCache::taken`] works).
    pub fn is_direct(&self) -> bool {
        matches!(
            self.kind,
            InsnKind::CallRel
                | InsnKind::JmpRel
                | InsnKind::Jcc
                | InsnKind::Jrcxz
                | InsnKind::Loop
                | InsnKind::Loope
                | InsnKind::Loopne
        )
    }
}

impl BlockPolicy for LibiptBlocks {
    type Insn = u8;
    type Block = CachedBlock;
    type Hot = BlockSummary;

    const MAX_INSNS: u32 = MAX_BLOCK_INSNS;
    const PREFETCH: u32 = PREFETCH_BLOCKS;

    #[inline]
    fn ends_block(insn: &Insn) -> bool {
        insn.ends_block()
    }

    #[inline]
    fn keep(insn: &Insn, _bytes: &[u8]) -> u8 {
        insn.size
    }

    fn block(shape: &BlockShape, _insns: &[u8]) -> (CachedBlock, BlockSummary) {
        let block = CachedBlock {
            ip: shape.ip,
            mode: shape.mode,
            section: shape.section,
            ninsn: shape.ninsn,
            last: shape.last,
            end: shape.end,
            truncated: shape.truncated,
            sizes: shape.first,
        };
        let hot = BlockSummary {
            ninsn: shape.ninsn,
            class: shape.last.class,
            kind: shape.last.kind,
            end: shape.end,
            links: [UNLINKED; 2],
        };
        (block, hot)
    }

    #[inline]
    fn ip(block: &CachedBlock) -> u64 {
        block.ip
    }

    #[inline]
    fn mode(block: &CachedBlock) -> ExecMode {
        block.mode
    }

    #[inline]
    fn last_ip(block: &CachedBlock) -> u64 {
        block.last.ip
    }

    #[inline]
    fn span(block: &CachedBlock) -> (u32, u32) {
        (block.sizes, block.ninsn)
    }

    #[inline]
    fn next_ip(block: &CachedBlock, taken: bool) -> Option<u64> {
        if taken {
            block.last.target
        } else {
            Some(block.fall_through())
        }
    }

    #[inline]
    fn links(hot: &BlockSummary) -> [u32; 2] {
        hot.links
    }

    #[inline]
    fn links_mut(hot: &mut BlockSummary) -> &mut [u32; 2] {
        &mut hot.links
    }
}

/// Counts, for reports and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Blocks decoded.
    pub builds: u64,
    /// Lookups by address that found a cached block.
    pub hits: u64,
    /// Successor lookups answered by a stored link (no hashing).
    pub linked: u64,
    /// Times the cache was dropped because the code source changed.
    pub flushes: u64,
}

type IpMap = pt_encoder::hash::IpMap<u32>;

/// Decoded blocks keyed by (IP, execution mode), kept as the policy `P` says
/// ([`LibiptBlocks`] unless named).
pub struct BlockCache<P: BlockPolicy = LibiptBlocks> {
    blocks: Vec<P::Block>,
    /// Parallel to `blocks`.
    hot: Vec<P::Hot>,
    /// Parallel to `blocks`: the last two blocks reached from each by an indirect
    /// branch or a return, as (IP, raw id), the latest first ([`Self::lookup_from`]).
    recent: Vec<[(u64, u32); 2]>,
    /// What is kept of each instruction, block after block.
    insns: Vec<P::Insn>,
    /// One map per decodable mode (16, 32, 64-bit).
    index: [IpMap; 3],
    stamp: Option<u64>,
    max_insns: u32,
    prefetch: u32,
    stats: CacheStats,
}

impl Default for BlockCache {
    fn default() -> Self {
        Self::new()
    }
}

fn mode_slot(mode: ExecMode, ip: u64) -> Result<usize, CodeError> {
    match mode {
        ExecMode::Bit16 => Ok(0),
        ExecMode::Bit32 => Ok(1),
        ExecMode::Bit64 => Ok(2),
        ExecMode::Unknown => Err(CodeError::new(ErrorCode::BadInsn, ip)),
    }
}

impl BlockCache {
    /// An empty cache of libipt's blocks with the default block limit.
    pub fn new() -> Self {
        Self::with_max_insns(MAX_BLOCK_INSNS)
    }

    /// An empty cache of libipt's blocks that hold at most `max_insns` instructions
    /// (at least 1).
    pub fn with_max_insns(max_insns: u32) -> Self {
        Self::with_policy_limit(max_insns)
    }

    /// The sizes of the block's instructions, in order.
    pub fn sizes(&self, id: BlockId) -> &[u8] {
        self.insns_of(id)
    }

    /// The block's instructions as `(ip, size)` pairs.
    pub fn insns(&self, id: BlockId) -> impl Iterator<Item = (u64, u8)> + '_ {
        let mut ip = self.get(id).map_or(0, |b| b.ip);
        self.sizes(id).iter().map(move |&size| {
            let at = ip;
            ip = ip.wrapping_add(u64::from(size));
            (at, size)
        })
    }

    /// The position of the instruction at `ip` in the block, if one starts there
    /// (to stop inside a block at an event's IP).
    pub fn index_of(&self, id: BlockId, ip: u64) -> Option<usize> {
        let block = self.get(id)?;
        let mut at = block.ip;
        for (i, &size) in self.sizes(id).iter().enumerate() {
            if at == ip {
                return Some(i);
            }
            at = at.wrapping_add(u64::from(size));
        }
        None
    }
}

impl<P: BlockPolicy> BlockCache<P> {
    /// An empty cache with the policy's block limit and prefetch.
    pub fn with_policy() -> Self {
        Self::with_policy_limit(P::MAX_INSNS)
    }

    /// An empty cache whose blocks hold at most `max_insns` instructions (at least 1).
    pub fn with_policy_limit(max_insns: u32) -> Self {
        Self {
            blocks: Vec::new(),
            hot: Vec::new(),
            recent: Vec::new(),
            insns: Vec::new(),
            index: Default::default(),
            stamp: None,
            max_insns: max_insns.max(1),
            prefetch: P::PREFETCH,
            stats: CacheStats::default(),
        }
    }

    /// Sets how many blocks along the fall-through chain a missed lookup decodes ahead
    /// (default [`BlockPolicy::PREFETCH`]; 0 decodes only the block asked for).
    pub fn set_prefetch(&mut self, blocks: u32) {
        self.prefetch = blocks;
    }

    /// Number of cached blocks.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether no block is cached.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Counters since creation.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// Drops every block (ids become invalid).
    pub fn clear(&mut self) {
        self.blocks.clear();
        self.hot.clear();
        self.recent.clear();
        self.insns.clear();
        for map in &mut self.index {
            map.clear();
        }
    }

    /// Drops everything if `src` is not the source the blocks were built from.
    #[inline]
    fn sync<S: CodeSource + ?Sized>(&mut self, src: &S) {
        let stamp = src.stamp();
        if self.stamp != Some(stamp) {
            if !self.blocks.is_empty() {
                self.stats.flushes += 1;
            }
            self.clear();
            self.stamp = Some(stamp);
        }
    }

    /// The block starting at `ip` in `mode`, decoded now if it is not cached.
    ///
    /// Errors: [`ErrorCode::NoMap`] if nothing is mapped at `ip`,
    /// [`ErrorCode::BadInsn`] if the first instruction is invalid (or `mode` is
    /// [`ExecMode::Unknown`]).
    #[inline]
    pub fn lookup<S: CodeSource + ?Sized>(
        &mut self,
        src: &S,
        ip: u64,
        mode: ExecMode,
    ) -> Result<BlockId, CodeError> {
        self.sync(src);
        let slot = mode_slot(mode, ip)?;
        if let Some(&id) = self.index[slot].get(&ip) {
            self.stats.hits += 1;
            return Ok(BlockId(id));
        }
        self.build(src, ip, mode, slot)
    }

    /// The block at `ip`, reached from block `from` by an indirect branch or a
    /// return, in `mode`: the last two blocks reached from `from` this way are
    /// tried first (no hashing, [`Self::recent`]), then [`Self::lookup`].
    #[inline]
    pub fn lookup_from<S: CodeSource + ?Sized>(
        &mut self,
        src: &S,
        from: BlockId,
        ip: u64,
        mode: ExecMode,
    ) -> Result<BlockId, CodeError> {
        let fresh = self.stamp == Some(src.stamp());
        if fresh {
            if let Some(id) = self.recent(from, ip) {
                self.stats.linked += 1;
                return Ok(id);
            }
        }
        let id = self.lookup(src, ip, mode)?;
        // Remember only if the lookup did not drop the arena (and with it `from`).
        if fresh && self.stamp == Some(src.stamp()) {
            self.remember(from, ip, id);
        }
        Ok(id)
    }

    /// The block at `ip` if it is one of the last two that [`Self::remember`] stored
    /// as reached from block `from` (no lookup; the caller makes sure that the code
    /// source has not changed since, as for [`Self::linked`]).
    #[inline(always)]
    pub fn recent(&mut self, from: BlockId, ip: u64) -> Option<BlockId> {
        let r = self.recent.get_mut(from.index())?;
        if r[0].0 == ip && r[0].1 != UNLINKED {
            return Some(BlockId(r[0].1));
        }
        if r[1].0 == ip && r[1].1 != UNLINKED {
            r.swap(0, 1);
            return Some(BlockId(r[0].1));
        }
        None
    }

    /// Stores `next`, at `ip`, as the block last reached from block `from` by an
    /// indirect branch or a return (the one before it stays, as the second).
    #[inline]
    pub fn remember(&mut self, from: BlockId, ip: u64, next: BlockId) {
        if let Some(r) = self.recent.get_mut(from.index()) {
            r[1] = r[0];
            r[0] = (ip, next.0);
        }
    }

    /// The block at `id`.
    ///
    /// # Panics
    /// If `id` does not come from this cache since its last clear.
    #[inline]
    pub fn block(&self, id: BlockId) -> &P::Block {
        &self.blocks[id.index()]
    }

    /// The hot record of the block at `id` (for [`LibiptBlocks`], its instruction
    /// count and how it ends).
    ///
    /// # Panics
    /// If `id` does not come from this cache since its last clear.
    #[inline]
    pub fn summary(&self, id: BlockId) -> P::Hot {
        self.hot[id.index()]
    }

    /// The hot record of the block at `id`, or `None` if the id is stale.
    #[inline]
    pub fn hot(&self, id: BlockId) -> Option<&P::Hot> {
        self.hot.get(id.index())
    }

    /// The block at `id`, or `None` if the id is stale.
    #[inline]
    pub fn get(&self, id: BlockId) -> Option<&P::Block> {
        self.blocks.get(id.index())
    }

    /// What is kept of the block's instructions, in order.
    #[inline]
    pub fn insns_of(&self, id: BlockId) -> &[P::Insn] {
        self.get(id)
            .and_then(|b| {
                let (first, n) = P::span(b);
                self.insns.get(first as usize..)?.get(..n as usize)
            })
            .unwrap_or_default()
    }

    /// What is kept of every instruction of every block, block after block
    /// ([`BlockShape::first`] says where a block's start).
    #[inline]
    pub fn insn_arena(&self) -> &[P::Insn] {
        &self.insns
    }

    /// The block at the fall-through address of block `id` (where execution goes if
    /// its last instruction is not a branch or a conditional branch is not taken).
    /// After the first call this is an array access.
    #[inline]
    pub fn fall_through<S: CodeSource + ?Sized>(
        &mut self,
        src: &S,
        id: BlockId,
    ) -> Result<BlockId, CodeError> {
        self.successor(src, id, false)
    }

    /// The block at the direct target of block `id`'s last instruction (a taken
    /// conditional jump, a direct jump or call). Errors with [`ErrorCode::BadQuery`]
    /// if the last instruction has no direct target.
    #[inline]
    pub fn taken<S: CodeSource + ?Sized>(
        &mut self,
        src: &S,
        id: BlockId,
    ) -> Result<BlockId, CodeError> {
        self.successor(src, id, true)
    }

    /// [`Self::taken`] if `taken`, else [`Self::fall_through`]: the step for one TNT
    /// bit at a block ending in a conditional jump.
    #[inline]
    pub fn successor<S: CodeSource + ?Sized>(
        &mut self,
        src: &S,
        id: BlockId,
        taken: bool,
    ) -> Result<BlockId, CodeError> {
        let stamp = src.stamp();
        let hot = self
            .hot
            .get(id.index())
            .ok_or(CodeError::new(ErrorCode::Internal, 0))?;
        let link = P::links(hot)[usize::from(taken)];
        if link != UNLINKED && self.stamp == Some(stamp) {
            self.stats.linked += 1;
            return Ok(BlockId(link));
        }
        let block = self
            .blocks
            .get(id.index())
            .ok_or(CodeError::new(ErrorCode::Internal, 0))?;
        let ip = P::next_ip(block, taken)
            .ok_or(CodeError::new(ErrorCode::BadQuery, P::last_ip(block)))?;
        let mode = P::mode(block);
        let before = self.stamp;
        let next = self.lookup(src, ip, mode)?;
        // Link only if the lookup did not drop the arena (and with it `id`).
        if before == Some(stamp) {
            self.link(id, taken, next);
        }
        Ok(next)
    }

    /// Stores `next` as block `id`'s successor (`taken` or fall-through), as
    /// [`Self::successor`] does (for a walk that looked it up itself).
    #[inline]
    pub fn link(&mut self, id: BlockId, taken: bool, next: BlockId) {
        if let Some(hot) = self.hot.get_mut(id.index()) {
            P::links_mut(hot)[usize::from(taken)] = next.0;
        }
    }

    /// The successor of block `id` that [`Self::successor`] stored, if it did (no
    /// lookup; the caller makes sure the code source has not changed since).
    #[inline]
    pub fn linked(&self, id: BlockId, taken: bool) -> Option<BlockId> {
        let link = P::links(self.hot.get(id.index())?)[usize::from(taken)];
        (link != UNLINKED).then_some(BlockId(link))
    }

    /// Decodes the block at `ip`, then, with the same decoder, up to `prefetch` blocks
    /// along its fall-through chain (the not-taken side of conditional jumps, the
    /// return address of calls), linked in as they are built: setting up a decoder
    /// costs about as much as decoding a few instructions.
    fn build<S: CodeSource + ?Sized>(
        &mut self,
        src: &S,
        ip: u64,
        mode: ExecMode,
        slot: usize,
    ) -> Result<BlockId, CodeError> {
        let bytes = src.bytes_at(ip)?;
        // Every block decoded from `run` lies in the section that holds `ip`.
        let section = src.section_id(ip).unwrap_or(0);
        let mut run = Run::new(bytes, ip, mode)?;
        let code = Code { src, bytes, ip };
        let (first, mut last) = self.build_one(&code, &mut run, mode, section, slot)?;
        let mut prev = first;
        for _ in 0..self.prefetch {
            let (insn, end, truncated) = last;
            let falls_through = match end {
                BlockEnd::Limit => true,
                BlockEnd::Branch => matches!(
                    insn.class,
                    InsnClass::CondJump | InsnClass::Call | InsnClass::Other | InsnClass::Ptwrite
                ),
                BlockEnd::SectionEnd | BlockEnd::BadInsn => false,
            };
            if !falls_through || truncated || run.at_end() {
                break;
            }
            if let Some(&id) = self.index[slot].get(&run.ip()) {
                // Reached a block built before.
                self.link(prev, false, BlockId(id));
                break;
            }
            let Ok((next, ended)) = self.build_one(&code, &mut run, mode, section, slot) else {
                break;
            };
            self.link(prev, false, next);
            (prev, last) = (next, ended);
        }
        Ok(first)
    }

    /// Decodes one block at `run`'s position; returns it with its last instruction,
    /// how it ends and whether that instruction is truncated.
    fn build_one<S: CodeSource + ?Sized>(
        &mut self,
        code: &Code<'_, S>,
        run: &mut Run<'_>,
        mode: ExecMode,
        section: u32,
        slot: usize,
    ) -> Result<(BlockId, (Insn, BlockEnd, bool)), CodeError> {
        let ip = run.ip();
        let id = u32::try_from(self.blocks.len())
            .ok()
            .filter(|&id| id != UNLINKED)
            .ok_or(CodeError::new(ErrorCode::NoMem, ip))?;
        let first =
            u32::try_from(self.insns.len()).map_err(|_| CodeError::new(ErrorCode::NoMem, ip))?;
        let mut ninsn = 0u32;
        let mut last = None;
        let mut truncated = false;
        let end = loop {
            if ninsn == self.max_insns {
                break BlockEnd::Limit;
            }
            if run.at_end() {
                break BlockEnd::SectionEnd;
            }
            let insn = match run.step() {
                Step::Insn(insn) => insn,
                Step::Truncated => match decode_at(code.src, run.ip(), mode) {
                    // The instruction continues in the next section.
                    Ok(insn) => {
                        truncated = true;
                        insn
                    }
                    Err(_) => break BlockEnd::BadInsn,
                },
                Step::Invalid => break BlockEnd::BadInsn,
            };
            self.insns.push(code.keep::<P>(&insn, truncated));
            ninsn += 1;
            last = Some(insn);
            if P::ends_block(&insn) {
                break BlockEnd::Branch;
            }
            if truncated {
                break BlockEnd::SectionEnd;
            }
        };
        let Some(last) = last else {
            // Not even one instruction: the first one is bad.
            return Err(CodeError::new(ErrorCode::BadInsn, ip));
        };
        let shape = BlockShape {
            ip,
            mode,
            section,
            ninsn,
            first,
            last,
            end,
            truncated,
        };
        let insns = self.insns.get(first as usize..).unwrap_or_default();
        let (block, hot) = P::block(&shape, insns);
        self.blocks.push(block);
        self.hot.push(hot);
        self.recent.push([(0, UNLINKED); 2]);
        self.index[slot].insert(ip, id);
        self.stats.builds += 1;
        Ok((BlockId(id), (last, end, truncated)))
    }
}

/// The code a build decodes: the section bytes from `ip` on, in `src`.
struct Code<'a, S: ?Sized> {
    src: &'a S,
    bytes: &'a [u8],
    ip: u64,
}

impl<S: CodeSource + ?Sized> Code<'_, S> {
    /// What `P` keeps of `insn`, given its bytes (read across sections if `truncated`).
    #[inline]
    fn keep<P: BlockPolicy>(&self, insn: &Insn, truncated: bool) -> P::Insn {
        let size = usize::from(insn.size);
        let off = insn.ip.wrapping_sub(self.ip) as usize;
        if !truncated {
            if let Some(bytes) = self.bytes.get(off..).and_then(|b| b.get(..size)) {
                return P::keep(insn, bytes);
            }
        }
        let mut buf = [0u8; 16];
        let n = self
            .src
            .read(insn.ip, &mut buf[..size.min(16)])
            .unwrap_or(0);
        P::keep(insn, buf.get(..n).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::Image;
    use crate::insn::{InsnClass, InsnKind};

    fn image(parts: &[(u64, &[u8])]) -> Image {
        let mut image = Image::new();
        for (vaddr, bytes) in parts {
            image.add_bytes(*vaddr, bytes.to_vec(), "t").unwrap();
        }
        image
    }

    // 0x1000: nop; mov eax, 1; dec eax; jnz 0x1000; ret
    const LOOP: &[u8] = &[
        0x90, 0xb8, 0x01, 0x00, 0x00, 0x00, 0xff, 0xc8, 0x75, 0xf6, 0xc3,
    ];

    #[test]
    fn block_runs_to_the_first_branch() {
        let img = image(&[(0x1000, LOOP)]);
        let mut cache = BlockCache::new();
        let id = cache.lookup(&img, 0x1000, ExecMode::Bit64).unwrap();
        let b = *cache.block(id);
        assert_eq!(
            (b.ip, b.ninsn, b.end, b.truncated),
            (0x1000, 4, BlockEnd::Branch, false)
        );
        assert_eq!((b.last.ip, b.last.class), (0x1008, InsnClass::CondJump));
        assert_eq!(b.last.target, Some(0x1000));
        assert_eq!(b.fall_through(), 0x100a);
        assert_eq!(b.byte_len(), 10);
        assert_eq!(cache.sizes(id), &[1, 5, 2, 2]);
        let ips: Vec<_> = cache.insns(id).map(|(ip, _)| ip).collect();
        assert_eq!(ips, [0x1000, 0x1001, 0x1006, 0x1008]);
        assert_eq!(cache.index_of(id, 0x1006), Some(2));
        assert_eq!(cache.index_of(id, 0x1007), None);
        assert_eq!(cache.index_of(id, 0x100a), None);
    }

    #[test]
    fn lookups_hit_and_links_skip_hashing() {
        let img = image(&[(0x1000, LOOP)]);
        let mut cache = BlockCache::new();
        cache.set_prefetch(0);
        let head = cache.lookup(&img, 0x1000, ExecMode::Bit64).unwrap();
        assert_eq!(cache.lookup(&img, 0x1000, ExecMode::Bit64), Ok(head));
        assert_eq!(cache.stats().builds, 1);
        assert_eq!(cache.stats().hits, 1);
        // Taken goes back to the head; not taken reaches the ret.
        assert_eq!(cache.taken(&img, head), Ok(head));
        let tail = cache.fall_through(&img, head).unwrap();
        assert_eq!(cache.block(tail).last.kind, InsnKind::Ret);
        assert_eq!(cache.block(tail).ninsn, 1);
        let before = cache.stats();
        for _ in 0..10 {
            assert_eq!(cache.successor(&img, head, true), Ok(head));
        }
        assert_eq!(cache.successor(&img, head, false), Ok(tail));
        let after = cache.stats();
        assert_eq!(after.linked - before.linked, 11);
        assert_eq!(after.builds, before.builds);
        assert_eq!(after.hits, before.hits);
        // A ret has no direct target.
        assert_eq!(
            cache.taken(&img, tail).unwrap_err().code,
            ErrorCode::BadQuery
        );
        // A different mode is a different block: 16-bit decodes `b8 01 00` as mov ax, 1.
        let id16 = cache.lookup(&img, 0x1000, ExecMode::Bit16).unwrap();
        assert_ne!(id16, head);
        assert_eq!(cache.sizes(id16)[1], 3);
    }

    #[test]
    fn prefetch_builds_the_fall_through_chain() {
        // call +0; jz +0; nop; jmp $; nop (never reached by fall-through)
        let code = [0xe8, 0, 0, 0, 0, 0x74, 0x00, 0x90, 0xeb, 0xfe, 0x90];
        let img = image(&[(0x1000, &code)]);
        let mut cache = BlockCache::new();
        let a = cache.lookup(&img, 0x1000, ExecMode::Bit64).unwrap();
        // The call's and the jz's fall-through blocks came along; the jmp stops the
        // chain.
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.stats().builds, 3);
        let b = cache.fall_through(&img, a).unwrap();
        let c = cache.fall_through(&img, b).unwrap();
        assert_eq!(cache.block(b).ip, 0x1005);
        assert_eq!((cache.block(c).ip, cache.block(c).ninsn), (0x1007, 2));
        assert_eq!(cache.stats().linked, 2);
        assert_eq!(cache.stats().hits, 0);
        // A later chain stops at blocks that already exist and links to them.
        let mut cache = BlockCache::new();
        cache.set_prefetch(0);
        let c = cache.lookup(&img, 0x1007, ExecMode::Bit64).unwrap();
        cache.set_prefetch(8);
        let a = cache.lookup(&img, 0x1000, ExecMode::Bit64).unwrap();
        assert_eq!(cache.len(), 3);
        let b = cache.fall_through(&img, a).unwrap();
        assert_eq!(cache.fall_through(&img, b), Ok(c));
        assert_eq!(cache.stats().linked, 2);
    }

    #[test]
    fn summary_mirrors_the_block() {
        assert_eq!(std::mem::size_of::<BlockSummary>(), 16);
        let img = image(&[(0x1000, LOOP)]);
        let mut cache = BlockCache::new();
        let id = cache.lookup(&img, 0x1000, ExecMode::Bit64).unwrap();
        let (b, s) = (*cache.block(id), cache.summary(id));
        assert_eq!(
            (s.ninsn, s.class, s.kind, s.end),
            (b.ninsn, b.last.class, b.last.kind, b.end)
        );
    }

    #[test]
    fn blocks_stop_at_section_ends() {
        // nop; nop at 0x1000, then a gap.
        let img = image(&[(0x1000, &[0x90, 0x90])]);
        let mut cache = BlockCache::new();
        let id = cache.lookup(&img, 0x1000, ExecMode::Bit64).unwrap();
        let b = *cache.block(id);
        assert_eq!(
            (b.ninsn, b.end, b.last.class),
            (2, BlockEnd::SectionEnd, InsnClass::Other)
        );
        assert_eq!(cache.fall_through(&img, id), Err(CodeError::no_map(0x1002)));
        assert_eq!(
            cache.lookup(&img, 0x0fff, ExecMode::Bit64),
            Err(CodeError::no_map(0x0fff))
        );
    }

    #[test]
    fn adjacent_sections_give_adjacent_blocks() {
        let img = image(&[(0x1000, &[0x90, 0x90]), (0x1002, &[0x90, 0xc3])]);
        let mut cache = BlockCache::new();
        let a = cache.lookup(&img, 0x1000, ExecMode::Bit64).unwrap();
        let b = cache.fall_through(&img, a).unwrap();
        assert_eq!(cache.block(b).ip, 0x1002);
        assert_eq!(cache.block(a).section, img.find(0x1000).unwrap().id());
        assert_eq!(cache.block(b).section, img.find(0x1002).unwrap().id());
        assert_ne!(cache.block(a).section, cache.block(b).section);
        assert_eq!(cache.block(b).end, BlockEnd::Branch);
    }

    #[test]
    fn instruction_straddling_sections() {
        // nop, then a call whose displacement continues in the next section.
        let img = image(&[(0x1000, &[0x90, 0xe8, 0x10]), (0x1003, &[0, 0, 0, 0x90])]);
        let mut cache = BlockCache::new();
        let id = cache.lookup(&img, 0x1000, ExecMode::Bit64).unwrap();
        let b = *cache.block(id);
        assert_eq!((b.ninsn, b.end, b.truncated), (2, BlockEnd::Branch, true));
        assert_eq!(b.last.target, Some(0x1016));
        assert_eq!(b.fall_through(), 0x1006);
        // Without the second section the call is bad: the block stops before it.
        let img = image(&[(0x1000, &[0x90, 0xe8, 0x10])]);
        let id = cache.lookup(&img, 0x1000, ExecMode::Bit64).unwrap();
        assert_eq!(cache.block(id).end, BlockEnd::BadInsn);
        assert_eq!(cache.block(id).ninsn, 1);
        assert_eq!(
            cache.fall_through(&img, id).unwrap_err(),
            CodeError::new(ErrorCode::BadInsn, 0x1001)
        );
    }

    #[test]
    fn invalid_code_and_modes() {
        // nop; ud-encoding (0f 17 with a register operand is invalid)
        let img = image(&[(0x1000, &[0x90, 0x0f, 0x17, 0xc0])]);
        let mut cache = BlockCache::new();
        let id = cache.lookup(&img, 0x1000, ExecMode::Bit64).unwrap();
        assert_eq!(
            (cache.block(id).ninsn, cache.block(id).end),
            (1, BlockEnd::BadInsn)
        );
        assert_eq!(
            cache.lookup(&img, 0x1001, ExecMode::Bit64),
            Err(CodeError::new(ErrorCode::BadInsn, 0x1001))
        );
        assert_eq!(
            cache.lookup(&img, 0x1000, ExecMode::Unknown),
            Err(CodeError::new(ErrorCode::BadInsn, 0x1000))
        );
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn limit_splits_long_blocks() {
        let img = image(&[(0x1000, &[0x90; 10])]);
        let mut cache = BlockCache::with_max_insns(4);
        let a = cache.lookup(&img, 0x1000, ExecMode::Bit64).unwrap();
        assert_eq!(
            (cache.block(a).ninsn, cache.block(a).end),
            (4, BlockEnd::Limit)
        );
        let b = cache.fall_through(&img, a).unwrap();
        let c = cache.fall_through(&img, b).unwrap();
        assert_eq!(cache.block(c).ip, 0x1008);
        assert_eq!(
            (cache.block(c).ninsn, cache.block(c).end),
            (2, BlockEnd::SectionEnd)
        );
    }

    #[test]
    fn events_bind_at_mov_cr3_and_ptwrite() {
        // nop; mov cr3, rax; ptwrite eax; nop; ret
        let code = [0x90, 0x0f, 0x22, 0xd8, 0xf3, 0x0f, 0xae, 0xe0, 0x90, 0xc3];
        let img = image(&[(0x1000, &code)]);
        let mut cache = BlockCache::new();
        let a = cache.lookup(&img, 0x1000, ExecMode::Bit64).unwrap();
        assert_eq!(cache.block(a).last.kind, InsnKind::MovCr3);
        let b = cache.fall_through(&img, a).unwrap();
        assert_eq!(cache.block(b).last.class, InsnClass::Ptwrite);
        let c = cache.fall_through(&img, b).unwrap();
        assert_eq!(
            (cache.block(c).ninsn, cache.block(c).last.kind),
            (2, InsnKind::Ret)
        );
    }

    #[test]
    fn image_changes_flush_the_cache() {
        let mut img = image(&[(0x1000, LOOP)]);
        let mut cache = BlockCache::new();
        let head = cache.lookup(&img, 0x1000, ExecMode::Bit64).unwrap();
        cache.fall_through(&img, head).unwrap();
        assert_eq!(cache.len(), 2);
        // Patch the jnz into jmp: the loop never falls through.
        img.add_bytes(0x1008, vec![0xeb], "patch").unwrap();
        // The stale link is not followed: the new block is decoded from the new bytes.
        let next = cache.fall_through(&img, head).unwrap();
        assert_eq!(cache.stats().flushes, 1);
        assert_eq!(cache.block(next).ip, 0x100a);
        // The overlay split the section: the head block now ends where the patch
        // starts, and the patched jump straddles the patch and the original bytes.
        let head = cache.lookup(&img, 0x1000, ExecMode::Bit64).unwrap();
        assert_eq!(
            (cache.block(head).ninsn, cache.block(head).end),
            (3, BlockEnd::SectionEnd)
        );
        let jump = cache.fall_through(&img, head).unwrap();
        let b = *cache.block(jump);
        assert_eq!(
            (b.ip, b.last.kind, b.truncated),
            (0x1008, InsnKind::JmpRel, true)
        );
        assert_eq!(
            (b.last.class, b.last.target),
            (InsnClass::Jump, Some(0x1000))
        );
    }

    /// A policy of the test's own: blocks end only at returns, and keep each
    /// instruction's first byte.
    struct UpToRet;

    impl BlockPolicy for UpToRet {
        type Insn = u8;
        type Block = (BlockShape, u8);
        type Hot = [u32; 2];
        const MAX_INSNS: u32 = 100;
        const PREFETCH: u32 = 0;
        fn ends_block(insn: &Insn) -> bool {
            insn.kind == InsnKind::Ret
        }
        fn keep(_: &Insn, bytes: &[u8]) -> u8 {
            bytes[0]
        }
        fn block(shape: &BlockShape, insns: &[u8]) -> (Self::Block, [u32; 2]) {
            ((*shape, insns[0]), [NO_BLOCK; 2])
        }
        fn ip(b: &Self::Block) -> u64 {
            b.0.ip
        }
        fn mode(b: &Self::Block) -> ExecMode {
            b.0.mode
        }
        fn last_ip(b: &Self::Block) -> u64 {
            b.0.last.ip
        }
        fn span(b: &Self::Block) -> (u32, u32) {
            (b.0.first, b.0.ninsn)
        }
        fn next_ip(b: &Self::Block, taken: bool) -> Option<u64> {
            if taken {
                b.0.last.target
            } else {
                Some(b.0.last.next_ip())
            }
        }
        fn links(hot: &[u32; 2]) -> [u32; 2] {
            *hot
        }
        fn links_mut(hot: &mut [u32; 2]) -> &mut [u32; 2] {
            hot
        }
    }

    #[test]
    fn a_policy_says_what_ends_a_block_and_what_is_kept() {
        let img = image(&[(0x1000, LOOP)]);
        let mut cache = BlockCache::<UpToRet>::with_policy();
        let id = cache.lookup(&img, 0x1000, ExecMode::Bit64).unwrap();
        let (shape, first_byte) = *cache.block(id);
        // The jnz does not end the block: the ret does.
        assert_eq!((shape.ninsn, shape.end), (5, BlockEnd::Branch));
        assert_eq!((shape.last.kind, first_byte), (InsnKind::Ret, 0x90));
        assert_eq!(cache.insns_of(id), &[0x90, 0xb8, 0xff, 0x75, 0xc3]);
        // The limit comes from the policy, the (IP, mode) key from the cache.
        let straight = image(&[(0x1000, &[0x90; 150])]);
        let a = cache.lookup(&straight, 0x1000, ExecMode::Bit64).unwrap();
        assert_eq!(
            (cache.block(a).0.ninsn, cache.block(a).0.end),
            (100, BlockEnd::Limit)
        );
        let b = cache.fall_through(&straight, a).unwrap();
        assert_eq!(cache.block(b).0.ip, 0x1064);
        assert_eq!(cache.linked(a, false), Some(b));
        assert_ne!(cache.lookup(&straight, 0x1000, ExecMode::Bit32).unwrap(), a);
    }

    #[test]
    fn indirect_successors_are_remembered() {
        // 0x1000: ret; 0x1001: nop; ret; 0x1003: nop; nop; ret
        let img = image(&[(0x1000, &[0xc3, 0x90, 0xc3, 0x90, 0x90, 0xc3])]);
        let mut cache = BlockCache::new();
        let ret = cache.lookup(&img, 0x1000, ExecMode::Bit64).unwrap();
        let a = cache
            .lookup_from(&img, ret, 0x1001, ExecMode::Bit64)
            .unwrap();
        let b = cache
            .lookup_from(&img, ret, 0x1003, ExecMode::Bit64)
            .unwrap();
        assert_eq!((cache.block(a).ninsn, cache.block(b).ninsn), (2, 3));
        let linked = cache.stats().linked;
        // The last two are answered without hashing, in any order.
        for _ in 0..3 {
            assert_eq!(cache.lookup_from(&img, ret, 0x1001, ExecMode::Bit64), Ok(a));
            assert_eq!(cache.lookup_from(&img, ret, 0x1003, ExecMode::Bit64), Ok(b));
        }
        assert_eq!(cache.stats().linked - linked, 6);
        // A third target pushes the oldest out.
        let c = cache
            .lookup_from(&img, ret, 0x1004, ExecMode::Bit64)
            .unwrap();
        assert_eq!(cache.block(c).ninsn, 2);
        let (linked, hits) = (cache.stats().linked, cache.stats().hits);
        assert_eq!(cache.lookup_from(&img, ret, 0x1001, ExecMode::Bit64), Ok(a));
        assert_eq!(
            (cache.stats().linked, cache.stats().hits),
            (linked, hits + 1)
        );
        // Nothing mapped: an error, nothing remembered.
        assert_eq!(
            cache.lookup_from(&img, ret, 0x2000, ExecMode::Bit64),
            Err(CodeError::no_map(0x2000))
        );
    }
}
