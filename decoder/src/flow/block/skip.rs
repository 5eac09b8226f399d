//! The counting fast path: whole blocks taken without building them, for callers
//! that only count (ptxed `--quiet`, [`crate::Decoder`]'s count-only mode).
//!
//! [`BlockDecoder::skip_blocks`] takes, one after the other, the blocks that
//! [`BlockDecoder::next`] would return with nothing else to report, and counts them:
//!
//! * a block is a *chain* of warm cache blocks (through direct jumps and calls) up to
//!   the instruction that needs trace, memoized per start block with its instruction
//!   count and the return addresses its calls push ([`Chain`], 32 bytes: one cache
//!   line per step);
//! * a step takes one chain on a bit of the current TNT (conditional branch,
//!   compressed return popping the return stack) or on the current TIP (indirect
//!   jump or call, uncompressed return) and goes on at the next chain through the
//!   cache links or the target tables, without going back to the caller; runs of
//!   call-free conditional chains on one TNT are taken in a tight loop with the
//!   state in registers ([`BlockDecoder::take_cond_chains`]);
//! * TNT events of eight bits or more use a memo of runs of bits per start block
//!   (through direct calls and returns to calls made in the run), so a hot loop
//!   costs one lookup per TNT-64 packet.
//!
//! Its own state is [`Skip`] (the chain table and the run memo). It works on the
//! block decoder's flow state (IP, return stack, current event, instruction count
//! for TRIG, the block cache and its hints) and leaves it exactly as `next` would
//! have; the differential tests in `flow::tests` run it side by side with `next`.
//!
//! Its one interface to the event decoder is the branch hand-over
//! ([`crate::event::EventDecoder::next_is_branch`] and `next_branch_into`): a step
//! uses up a TNT's last bit or a TIP only when the event decoder can move on to a
//! TNT or TIP right away (past PAD, MTC and CYC), so that `next` would have had
//! nothing to report after the block either.
//!
//! perf's engine (the pt-perf crate) follows TNT runs over the same
//! [`crate::block_cache::BlockCache`] with perf's policy (`pt_perf::code::PerfBlocks`:
//! blocks end where perf's decoder says a branch is and keep the instructions'
//! bytes). Its fast path stays in its own room, `pt_perf::code`: it yields a state
//! per branch and applies perf's rules at every bit, where this one only counts
//! (the block cache's module doc says more).

use super::code::target_slot;
use super::{next_ip, BlockDecoder, Link, MAX_BLOCK_INSNS};
use crate::block_cache::BlockId;
use crate::event::EventKind;
use crate::flow::retstack::RETSTACK_SIZE;
use crate::insn::InsnClass;
use pt_encoder::hash::IntMap;

/// The fast path's own state: what it memoized about the code and the trace.
#[derive(Default)]
pub(super) struct Skip {
    /// Return addresses the memoized runs leave on the return stack.
    run_pushes: Vec<u64>,
    /// Scratch return stack of [`Self::walk_tnt_run`].
    run_stack: Vec<u64>,
    /// Per cache block: the chain that starts there, once known.
    chains: Vec<Chain>,
    /// Return addresses pushed by the calls of chains.
    chain_pushes: Vec<u64>,
    /// Memoized runs of TNT bits: (start block, bit pattern) → where they lead.
    runs: IntMap<(u32, u64), TntRun>,
}

/// Where a run of conditional branches leads, for [`BlockDecoder::skip_blocks`].
#[derive(Clone, Copy, Debug)]
struct TntRun {
    /// The last block of the run and which way its branch went (`None` if it ended in
    /// a return): the [`Link`] to [`TntRun::ip`]. Kept apart from `ip` (not as a
    /// `Link`): a run is copied out of the memo field by field, and loading a `Link`
    /// whole right after that stalls on store forwarding (a tenth of the time on TNT
    /// loops).
    link: Option<(BlockId, bool)>,
    /// Where the run ends.
    ip: u64,
    insns: u64,
    /// TNT bits (= blocks) used.
    used: u8,
    /// Return addresses of calls still open at the end: `run_pushes[start..][..len]`.
    pushes: (u32, u8),
    /// Most calls open at once during the run (the return stack must have room).
    depth: u8,
}

/// TNT events with fewer bits than this are walked block by block
/// ([`BlockDecoder::skip_chains`]) rather than looked up in the run memo.
const MEMO_MIN_BITS: u8 = 8;

/// A chain of warm cache blocks that make up one block up to an instruction that needs
/// trace ([`BlockDecoder::build_chain`]), in 32 bytes: [`BlockDecoder::skip_chains`]
/// goes from one to the next, so that each step touches one cache line.
#[derive(Clone, Copy, Debug, Default)]
struct Chain {
    /// The address after the last instruction.
    fall_through: u64,
    /// The last instruction's target minus `fall_through` (a conditional jump's).
    target: i32,
    /// The cache block whose last instruction needs trace.
    end: u32,
    /// Return addresses its calls push, in order: `chain_pushes[pushes..][..npush]`.
    pushes: u32,
    /// Instructions in the chain (at most [`MAX_BLOCK_INSNS`]).
    insns: u16,
    npush: u8,
    /// What the last instruction needs.
    kind: ChainKind,
    /// `end`'s successors as far as known: `[fall-through, taken]`
    /// ([`crate::block_cache::BlockCache::linked`]), [`NO_LINK`] if not yet.
    links: [u32; 2],
}

/// What the instruction that ends a [`Chain`] needs from the trace.
#[repr(u8)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum ChainKind {
    /// Not built (or the walk failed last time).
    #[default]
    None,
    /// A conditional jump: a TNT bit.
    Cond,
    /// A near return: a TNT bit (compressed) or a TIP.
    Ret,
    /// A near indirect jump or call: a TIP.
    Indirect,
    /// Something the fast path leaves to `next`.
    Other,
}

/// [`Chain::links`]: not known yet.
const NO_LINK: u32 = u32::MAX;

/// Most memoized TNT runs before the memo starts anew.
const MAX_RUNS: usize = 1 << 20;

impl BlockDecoder<'_> {
    /// Skips whole blocks whose only trace is a bit of the current TNT event, as many
    /// as [`next`](Self::next) would return one by one with nothing else to report,
    /// keeping the event's last bit for `next`. Returns the instructions and blocks
    /// skipped. For callers that only count (ptxed `--quiet`); call it only where
    /// `next` may be called. Runs of bits are memoized per start block, so a hot loop
    /// costs one lookup per TNT packet.
    pub fn skip_blocks(&mut self) -> (u64, u64) {
        if self.status.is_err()
            || !self.enabled
            || self.postponed.is_some()
            || self.options.tick_events
        {
            return (0, 0);
        }
        let (mut insns, mut blocks) = (0, 0);
        loop {
            let (i, b) = match self.event.kind {
                // Long runs of bits in one lookup; short ones block by block.
                EventKind::Tnt { size, .. } if size >= MEMO_MIN_BITS => match self.skip_tnt_run() {
                    (_, 0) => self.skip_chains(),
                    r => r,
                },
                EventKind::Tnt { .. } | EventKind::Tip { .. } => self.skip_chains(),
                _ => (0, 0),
            };
            if b == 0 {
                return (insns, blocks);
            }
            insns += i;
            blocks += b;
        }
    }

    /// The chain of warm cache blocks that [`next`](Self::next) would take as one
    /// block from cache block `start` on, up to the first instruction that needs
    /// trace: [`Self::proceed_no_event`]'s walk over warm blocks (memoized per start
    /// block in `chains`, since warm code does not change). `None` where that walk
    /// would end the block otherwise (another section, the instruction limit, a
    /// truncated instruction, `end_on_call`/`end_on_jump`) or meets code that is not
    /// warm yet.
    fn build_chain(&mut self, start: BlockId) -> Option<Chain> {
        let first = self.skip.chain_pushes.len();
        let isid = self.section_id(self.cache.get(start)?.ip);
        let mut id = start;
        let mut insns = 0u32;
        let chain = loop {
            if !self.warm.get(id.index()).copied().unwrap_or(false) {
                break None;
            }
            let b = self.cache.block(id);
            let (ip0, ninsn, truncated, last) = (b.ip, b.ninsn, b.truncated, b.last);
            if truncated || insns + ninsn > MAX_BLOCK_INSNS || self.section_id(ip0) != isid {
                break None;
            }
            insns += ninsn;
            if last.pushes_return() {
                self.skip.chain_pushes.push(last.next_ip());
            }
            match next_ip(&last) {
                Some(ip) => {
                    if self.ends_on_request(&last) || !self.in_section(ip) {
                        break None;
                    }
                    let taken = last.class != InsnClass::Other && last.class != InsnClass::Ptwrite;
                    match self.cache.successor(self.image, id, taken) {
                        Ok(next) => id = next,
                        Err(_) => break None,
                    }
                }
                None => {
                    let fall_through = last.next_ip();
                    let target = last
                        .target
                        .and_then(|t| i32::try_from(t.wrapping_sub(fall_through) as i64).ok());
                    let kind = match (last.class, target) {
                        (InsnClass::CondJump, Some(_)) => ChainKind::Cond,
                        (InsnClass::Return, _) => ChainKind::Ret,
                        (InsnClass::Jump | InsnClass::Call, _) if !last.is_direct() => {
                            ChainKind::Indirect
                        }
                        _ => ChainKind::Other,
                    };
                    let (Ok(insns), Ok(npush)) = (
                        u16::try_from(insns),
                        u8::try_from(self.skip.chain_pushes.len() - first),
                    ) else {
                        break None;
                    };
                    let link = |taken| self.cache.linked(id, taken).map_or(NO_LINK, BlockId::raw);
                    break Some(Chain {
                        fall_through,
                        target: target.unwrap_or(0),
                        end: id.raw(),
                        pushes: first as u32,
                        insns,
                        npush,
                        kind,
                        links: [link(false), link(true)],
                    });
                }
            }
        };
        if chain.is_none() {
            self.skip.chain_pushes.truncate(first);
        }
        chain
    }

    /// Moves on from the TNT or TIP event that the block just skipped used up, if
    /// the next event is a TNT or TIP too (else nothing changes): as
    /// [`Self::fetch_event`] would.
    #[inline(always)]
    fn next_branch_event(&mut self) -> bool {
        let t = self.event.time;
        if !self.evdec.next_branch_into(&mut self.event) {
            return false;
        }
        self.time = t;
        // The TRIG anchor of a TNT or TIP with an IP.
        self.has_icnt = true;
        self.icnt = 0;
        true
    }

    /// One block as [`next`](Self::next) would return it, counting only: a chain of
    /// warm cache blocks ([`Self::build_chain`]) ending in a conditional branch or a
    /// compressed return on a bit of the current TNT, or in a near indirect jump or
    /// call or an uncompressed return on the current TIP. A block that uses up the
    /// event is only taken when the next event is a TNT or TIP again (so that
    /// nothing would be reported after it).
    fn skip_chains(&mut self) -> (u64, u64) {
        let (mut insns, mut blocks) = (0, 0);
        let Some(mut id) = self.block_for_skip() else {
            return (0, 0);
        };
        // Out of `self` while in use, so that chains are read and updated in place.
        let mut chains = std::mem::take(&mut self.skip.chains);
        loop {
            if let EventKind::Tnt { bits, size } = self.event.kind {
                if (2..MEMO_MIN_BITS).contains(&size) {
                    match self.take_cond_chains(&mut chains, id, bits, size) {
                        (Some(next), i, b) => {
                            id = next;
                            insns += i;
                            blocks += b;
                        }
                        (None, i, b) => {
                            insns += i;
                            blocks += b;
                            break;
                        }
                    }
                }
            }
            let at = id.index();
            if chains.get(at).is_none_or(|c| c.kind == ChainKind::None) {
                let Some(c) = self.build_chain(id) else {
                    break;
                };
                if chains.len() <= at {
                    chains.resize(at + 1, Chain::default());
                }
                chains[at] = c;
            }
            let Some(c) = chains.get_mut(at) else {
                break;
            };
            // `take_chain` replaces the hints when it takes the block, and leaves them
            // for `next` when it does not.
            let Some(next) = self.take_chain(c) else {
                break;
            };
            insns += u64::from(c.insns);
            blocks += 1;
            if matches!(self.event.kind, EventKind::Tnt { size, .. } if size >= MEMO_MIN_BITS) {
                break;
            }
            id = match next.or_else(|| self.block_for_skip()) {
                Some(id) => id,
                None => break,
            };
        }
        self.skip.chains = chains;
        (insns, blocks)
    }

    /// [`Self::take_chain`] over a run of chains that end in conditional jumps and make
    /// no calls, on the bits of the current TNT event (`bits`, `size` of them left)
    /// other than its last: the state stays in registers and is written back once.
    /// Returns where to go on (`None`: nowhere known, stop skipping), and the
    /// instructions and blocks taken.
    #[inline(always)]
    fn take_cond_chains(
        &mut self,
        chains: &mut [Chain],
        mut id: BlockId,
        bits: u64,
        mut size: u8,
    ) -> (Option<BlockId>, u64, u64) {
        let (mut insns, mut blocks) = (0u64, 0u64);
        let has_icnt = self.has_icnt;
        let mut icnt = self.icnt;
        // The last chain taken: its end block, which way it went, and where.
        let mut last: Option<(u32, bool, u64)> = None;
        let mut next = Some(id);
        while size >= 2 {
            let Some(c) = chains.get_mut(id.index()) else {
                break;
            };
            if c.kind != ChainKind::Cond || c.npush != 0 {
                break;
            }
            if has_icnt {
                match icnt.checked_add(u32::from(c.insns)) {
                    Some(i) => icnt = i,
                    None => break,
                }
            }
            let taken = (bits >> (size - 1)) & 1 != 0;
            size -= 1;
            let target = c.fall_through.wrapping_add(c.target as i64 as u64);
            let ip = if taken { target } else { c.fall_through };
            // A jump to the next instruction goes the taken way either way.
            let taken = ip == target;
            last = Some((c.end, taken, ip));
            insns += u64::from(c.insns);
            blocks += 1;
            let link = &mut c.links[usize::from(taken)];
            next = if *link != NO_LINK {
                Some(BlockId::from_raw(*link))
            } else {
                let n = self.cache.linked(BlockId::from_raw(c.end), taken);
                if let Some(n) = n {
                    *link = n.raw();
                }
                n
            };
            match next {
                Some(n) => id = n,
                None => break,
            }
        }
        let Some((end, taken, ip)) = last else {
            return (Some(id), 0, 0);
        };
        if let EventKind::Tnt { size: s, .. } = &mut self.event.kind {
            *s = size;
        }
        self.icnt = icnt;
        self.ip = ip;
        self.link = Some(Link {
            block: BlockId::from_raw(end),
            taken,
            ip,
        });
        self.came_from = None;
        let next = next.or_else(|| self.block_for_skip());
        (next, insns, blocks)
    }

    /// The cache block at the current IP for [`Self::skip_chains`], leaving the hints
    /// as they are.
    #[inline]
    fn block_for_skip(&mut self) -> Option<BlockId> {
        if let Some(id) = self.hinted_block_at(self.ip) {
            return Some(id);
        }
        let saved = (self.link, self.came_from);
        let r = self.cache_block_at(self.ip).ok();
        (self.link, self.came_from) = saved;
        r
    }

    /// The cache block at `ip` if the hints ([`Self::link`], [`Self::came_from`] and
    /// the target table) know it; leaves the hints as they are.
    #[inline]
    fn hinted_block_at(&mut self, ip: u64) -> Option<BlockId> {
        if let Some(link) = self.link {
            if link.ip == ip {
                return self.cache.linked(link.block, link.taken);
            }
        }
        let from = self.came_from?;
        if let Some(id) = self
            .last_target
            .get(from.index())
            .and_then(|t| t.hit(ip, self.mode))
        {
            return Some(id);
        }
        let t = *self.targets.get(target_slot(ip))?;
        let id = t.hit(ip, self.mode)?;
        if let Some(last) = self.last_target.get_mut(from.index()) {
            *last = t;
        }
        Some(id)
    }

    /// Takes chain `c` as one block if the current event decides its last
    /// instruction (see [`Self::skip_chains`]). `None` if it does not; else the cache
    /// block where execution goes on, if the hints know it.
    #[inline]
    fn take_chain(&mut self, c: &mut Chain) -> Option<Option<BlockId>> {
        let icnt = if self.has_icnt {
            self.icnt.checked_add(u32::from(c.insns))?
        } else {
            self.icnt
        };
        let pushes = c.pushes as usize..c.pushes as usize + usize::from(c.npush);
        let end = BlockId::from_raw(c.end);
        let next = match self.event.kind {
            EventKind::Tnt { bits, size } => {
                if size == 0 {
                    return None;
                }
                let taken = (bits >> (size - 1)) & 1 != 0;
                let ret = match c.kind {
                    ChainKind::Cond => false,
                    // A compressed return needs a return address (a not-taken bit is
                    // an error `next` reports).
                    ChainKind::Ret if taken && (c.npush > 0 || !self.retstack.is_empty()) => true,
                    _ => return None,
                };
                if size == 1 {
                    if !self.next_branch_event() {
                        return None;
                    }
                } else if let EventKind::Tnt { size, .. } = &mut self.event.kind {
                    *size -= 1;
                    self.icnt = icnt;
                }
                let pushed = self.skip.chain_pushes.get(pushes).unwrap_or_default();
                if ret {
                    if let Some((&own, older)) = pushed.split_last() {
                        // The return goes back to the chain's own last call: no need
                        // to go through the stack for it.
                        for &ip in older {
                            self.retstack.push(ip);
                        }
                        self.retstack.push_pop();
                        self.ip = own;
                    } else if let Ok(ip) = self.retstack.pop() {
                        // Not empty: checked above.
                        self.ip = ip;
                    }
                    self.link = None;
                    self.came_from = Some(end);
                    self.hinted_block_at(self.ip)
                } else {
                    for &ip in pushed {
                        self.retstack.push(ip);
                    }
                    let target = c.fall_through.wrapping_add(c.target as i64 as u64);
                    self.ip = if taken { target } else { c.fall_through };
                    // A jump to the next instruction goes the taken way either way.
                    let taken = self.ip == target;
                    self.link = Some(Link {
                        block: end,
                        taken,
                        ip: self.ip,
                    });
                    self.came_from = None;
                    let link = &mut c.links[usize::from(taken)];
                    if *link != NO_LINK {
                        Some(BlockId::from_raw(*link))
                    } else {
                        let next = self.cache.linked(end, taken);
                        if let Some(next) = next {
                            *link = next.raw();
                        }
                        next
                    }
                }
            }
            EventKind::Tip { ip } => {
                if !matches!(c.kind, ChainKind::Ret | ChainKind::Indirect)
                    || self.event.ip_suppressed
                    || !self.next_branch_event()
                {
                    return None;
                }
                for &ip in self.skip.chain_pushes.get(pushes).unwrap_or_default() {
                    self.retstack.push(ip);
                }
                self.ip = ip;
                self.link = None;
                self.came_from = Some(end);
                self.hinted_block_at(ip)
            }
            _ => return None,
        };
        Some(next)
    }

    /// Skips blocks on the bits of the current TNT event (see [`skip_blocks`]).
    ///
    /// [`skip_blocks`]: Self::skip_blocks
    fn skip_tnt_run(&mut self) -> (u64, u64) {
        let EventKind::Tnt { bits, size } = self.event.kind else {
            return (0, 0);
        };
        // The last bit too when the next event is a branch again: then nothing is
        // reported after the block that uses it.
        let all = self.evdec.next_is_branch();
        let n = if all { size } else { size.saturating_sub(1) };
        if n == 0 {
            return (0, 0);
        }
        let Ok(start) = self.cache_block_at(self.ip) else {
            return (0, 0);
        };
        // The bits to use, oldest highest, with a stop bit above them.
        let pattern = ((bits >> (size - n)) & ((1u64 << n) - 1)) | (1u64 << n);
        let key = (start.index() as u32, pattern);
        let (run, keep) = match self.skip.runs.get(&key) {
            Some(run) => (*run, true),
            None => {
                if self.skip.runs.len() >= MAX_RUNS {
                    self.skip.runs.clear();
                    self.skip.run_pushes.clear();
                }
                let Some(run) = self.walk_tnt_run(start, bits, size, n) else {
                    self.link = None;
                    return (0, 0);
                };
                // Short runs are cheap to walk again.
                let keep = n >= 3;
                if keep {
                    self.skip.runs.insert(key, run);
                }
                (run, keep)
            }
        };
        let r = self.apply_run(run);
        if !keep {
            self.skip.run_pushes.truncate(run.pushes.0 as usize);
        }
        // All bits used (only with `all`): move on to the next event as `next` would
        // after the block. A TNT event always has an IP, so its TRIG anchor is fine.
        if r.1 > 0 && matches!(self.event.kind, EventKind::Tnt { size: 0, .. }) {
            let _ = self.fetch_event();
        }
        r
    }

    fn apply_run(&mut self, run: TntRun) -> (u64, u64) {
        // A full return stack would drop entries on the way: take the long way then.
        if self.retstack.len() + usize::from(run.depth) > RETSTACK_SIZE {
            self.link = None;
            return (0, 0);
        }
        if self.has_icnt {
            match u32::try_from(run.insns)
                .ok()
                .and_then(|i| self.icnt.checked_add(i))
            {
                Some(icnt) => self.icnt = icnt,
                None => {
                    self.link = None;
                    return (0, 0);
                }
            }
        }
        if let EventKind::Tnt { size, .. } = &mut self.event.kind {
            *size -= run.used;
        }
        self.ip = run.ip;
        self.link = run.link.map(|(block, taken)| Link {
            block,
            taken,
            ip: run.ip,
        });
        let (start, len) = (run.pushes.0 as usize, usize::from(run.pushes.1));
        for i in start..start + len {
            if let Some(&ip) = self.skip.run_pushes.get(i) {
                self.retstack.push(ip);
            }
        }
        (run.insns, u64::from(run.used))
    }

    /// Follows up to `n` bits of `bits` (oldest at `size - 1`) from block `id` through
    /// known code, as whole blocks that end in a conditional branch or a compressed
    /// return (direct jumps and calls inside them are followed, as libipt's warm cache
    /// does). Returns pop only calls made in the run, so the result depends on the
    /// start block and the bits alone; the calls still open at the end are recorded
    /// in `run_pushes`.
    fn walk_tnt_run(&mut self, mut id: BlockId, bits: u64, size: u8, n: u8) -> Option<TntRun> {
        let mut run: Option<TntRun> = None;
        let mut insns = 0u64;
        let mut in_block = 0u32;
        let mut used = 0u8;
        // Reused between walks (short runs are walked again and again).
        let mut stack = std::mem::take(&mut self.skip.run_stack);
        stack.clear();
        let mut depth = 0usize;
        let start = self.skip.run_pushes.len();
        loop {
            if !self.warm.get(id.index()).copied().unwrap_or(false) {
                break;
            }
            let b = self.cache.block(id);
            let (last, ninsn, truncated, ip0) = (b.last, b.ninsn, b.truncated, b.ip);
            if truncated || in_block + ninsn > MAX_BLOCK_INSNS {
                break;
            }
            in_block += ninsn;
            let section = self.section_id(ip0);
            let (next_ip, taken, ends) = match last.class {
                InsnClass::CondJump => {
                    let taken = (bits >> (size - 1 - used)) & 1 != 0;
                    let ip = match (taken, last.target) {
                        (true, Some(t)) => t,
                        _ => last.next_ip(),
                    };
                    (ip, Some(taken), true)
                }
                InsnClass::Return => {
                    // Compressed (taken bit) and returning to a call of this run.
                    if (bits >> (size - 1 - used)) & 1 == 0 {
                        break;
                    }
                    let Some(ip) = stack.pop() else {
                        break;
                    };
                    (ip, None, true)
                }
                InsnClass::Other | InsnClass::Ptwrite => (last.next_ip(), Some(false), false),
                InsnClass::Jump if last.is_direct() && !self.options.end_on_jump => {
                    (last.target?, Some(true), false)
                }
                InsnClass::Call if last.is_direct() && !self.options.end_on_call => {
                    if last.pushes_return() {
                        if stack.len() == RETSTACK_SIZE {
                            break;
                        }
                        stack.push(last.next_ip());
                        depth = depth.max(stack.len());
                    }
                    (last.target?, Some(true), false)
                }
                _ => break,
            };
            if ends {
                insns += u64::from(in_block);
                in_block = 0;
                used += 1;
                self.skip.run_pushes.truncate(start);
                self.skip.run_pushes.extend_from_slice(&stack);
                run = Some(TntRun {
                    link: taken.map(|t| (id, t)),
                    ip: next_ip,
                    insns,
                    used,
                    pushes: (start as u32, stack.len() as u8),
                    depth: depth as u8,
                });
                if used == n {
                    break;
                }
            } else if self.image.find(next_ip).map(|s| s.id()) != Some(section) {
                // libipt ends its block where the code leaves the section.
                break;
            }
            let next = match taken {
                Some(t) => self.cache.successor(self.image, id, t),
                None => self.cache.lookup(self.image, next_ip, self.mode),
            };
            match next {
                Ok(next) => id = next,
                Err(_) => break,
            }
        }
        if run.is_none() {
            self.skip.run_pushes.truncate(start);
        }
        self.skip.run_stack = stack;
        run
    }
}
