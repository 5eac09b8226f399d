//! The block cache: straight-line runs of instructions, decoded once and reused.
//!
//! A [`CachedBlock`] is the run of instructions from a start IP up to and including the first
//! one that ends a block ([`Insn::ends_block`]: anything that can change the flow, plus
//! MOV CR3 and VMPTRLD, to which synchronous events bind), or up to the end of the
//! section that holds it. The instruction-flow decoder then handles a whole block with
//! one lookup: count its instructions, look at its last one, and move on.
//!
//! Blocks live in an arena and are named by [`BlockId`]. Each block remembers its
//! successors once they have been looked up ([`BlockCache::fall_through`],
//! [`BlockCache::taken`]), so a hot loop goes from block to block by array index
//! without hashing.
//!
//! The cache belongs to one [`CodeSource`] at a time: when the source's stamp changes
//! (a section was added or removed), everything is dropped and rebuilt on demand.
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

    /// The id as stored in compact tables.
    pub(crate) fn raw(self) -> u32 {
        self.0
    }

    /// An id [`Self::raw`] gave.
    pub(crate) fn from_raw(raw: u32) -> Self {
        BlockId(raw)
    }
}

/// No successor known yet.
const UNLINKED: u32 = u32::MAX;

/// Why a block ends where it ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockEnd {
    /// The last instruction ends the block ([`Insn::ends_block`]).
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

/// A run of instructions decoded once.
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

/// Decoded blocks keyed by (IP, execution mode).
pub struct BlockCache {
    blocks: Vec<CachedBlock>,
    /// Parallel to `blocks`.
    hot: Vec<BlockSummary>,
    sizes: Vec<u8>,
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
    /// An empty cache with the default block limit.
    pub fn new() -> Self {
        Self::with_max_insns(MAX_BLOCK_INSNS)
    }

    /// An empty cache whose blocks hold at most `max_insns` instructions (at least 1).
    pub fn with_max_insns(max_insns: u32) -> Self {
        Self {
            blocks: Vec::new(),
            hot: Vec::new(),
            sizes: Vec::new(),
            index: Default::default(),
            stamp: None,
            max_insns: max_insns.max(1),
            prefetch: PREFETCH_BLOCKS,
            stats: CacheStats::default(),
        }
    }

    /// Sets how many blocks along the fall-through chain a missed lookup decodes ahead
    /// (default [`PREFETCH_BLOCKS`]; 0 decodes only the block asked for).
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
        self.sizes.clear();
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

    /// The block at `id`.
    ///
    /// # Panics
    /// If `id` does not come from this cache since its last clear.
    #[inline]
    pub fn block(&self, id: BlockId) -> &CachedBlock {
        &self.blocks[id.index()]
    }

    /// The hot part of the block at `id`: instruction count, how it ends.
    ///
    /// # Panics
    /// If `id` does not come from this cache since its last clear.
    #[inline]
    pub fn summary(&self, id: BlockId) -> BlockSummary {
        self.hot[id.index()]
    }

    /// The block at `id`, or `None` if the id is stale.
    pub fn get(&self, id: BlockId) -> Option<&CachedBlock> {
        self.blocks.get(id.index())
    }

    /// The sizes of the block's instructions, in order.
    pub fn sizes(&self, id: BlockId) -> &[u8] {
        self.get(id)
            .and_then(|b| {
                let start = b.sizes as usize;
                self.sizes.get(start..start + b.ninsn as usize)
            })
            .unwrap_or_default()
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
        let link = hot.links[usize::from(taken)];
        if link != UNLINKED && self.stamp == Some(stamp) {
            self.stats.linked += 1;
            return Ok(BlockId(link));
        }
        let block = self
            .blocks
            .get(id.index())
            .ok_or(CodeError::new(ErrorCode::Internal, 0))?;
        let ip = if taken {
            block
                .last
                .target
                .ok_or(CodeError::new(ErrorCode::BadQuery, block.last.ip))?
        } else {
            block.fall_through()
        };
        let mode = block.mode;
        let before = self.stamp;
        let next = self.lookup(src, ip, mode)?;
        // Link only if the lookup did not drop the arena (and with it `id`).
        if before == Some(stamp) {
            if let Some(hot) = self.hot.get_mut(id.index()) {
                hot.links[usize::from(taken)] = next.0;
            }
        }
        Ok(next)
    }

    /// The successor of block `id` that [`Self::successor`] stored, if it did (no
    /// lookup; the caller makes sure the code source has not changed since).
    #[inline]
    pub fn linked(&self, id: BlockId, taken: bool) -> Option<BlockId> {
        let link = self.hot.get(id.index())?.links[usize::from(taken)];
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
        let first = self.build_one(src, &mut run, mode, section, slot)?;
        let mut prev = first;
        for _ in 0..self.prefetch {
            let block = self.block(prev);
            let falls_through = match block.end {
                BlockEnd::Limit => true,
                BlockEnd::Branch => matches!(
                    block.last.class,
                    InsnClass::CondJump | InsnClass::Call | InsnClass::Other | InsnClass::Ptwrite
                ),
                BlockEnd::SectionEnd | BlockEnd::BadInsn => false,
            };
            if !falls_through || block.truncated || run.at_end() {
                break;
            }
            let next = match self.index[slot].get(&run.ip()) {
                Some(&id) => BlockId(id),
                None => match self.build_one(src, &mut run, mode, section, slot) {
                    Ok(id) => id,
                    Err(_) => break,
                },
            };
            self.hot[prev.index()].links[0] = next.0;
            if next.index() + 1 != self.blocks.len() {
                break; // reached a block built before
            }
            prev = next;
        }
        Ok(first)
    }

    /// Decodes one block at `run`'s position.
    fn build_one<S: CodeSource + ?Sized>(
        &mut self,
        src: &S,
        run: &mut Run<'_>,
        mode: ExecMode,
        section: u32,
        slot: usize,
    ) -> Result<BlockId, CodeError> {
        let ip = run.ip();
        let id = u32::try_from(self.blocks.len())
            .ok()
            .filter(|&id| id != UNLINKED)
            .ok_or(CodeError::new(ErrorCode::NoMem, ip))?;
        let sizes_start =
            u32::try_from(self.sizes.len()).map_err(|_| CodeError::new(ErrorCode::NoMem, ip))?;
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
                Step::Truncated => match decode_at(src, run.ip(), mode) {
                    // The instruction continues in the next section.
                    Ok(insn) => {
                        truncated = true;
                        insn
                    }
                    Err(_) => break BlockEnd::BadInsn,
                },
                Step::Invalid => break BlockEnd::BadInsn,
            };
            self.sizes.push(insn.size);
            ninsn += 1;
            last = Some(insn);
            if insn.ends_block() {
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
        self.blocks.push(CachedBlock {
            ip,
            mode,
            section,
            ninsn,
            last,
            end,
            truncated,
            sizes: sizes_start,
        });
        self.hot.push(BlockSummary {
            ninsn,
            class: last.class,
            kind: last.kind,
            end,
            links: [UNLINKED; 2],
        });
        self.index[slot].insert(ip, id);
        self.stats.builds += 1;
        Ok(BlockId(id))
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
}
