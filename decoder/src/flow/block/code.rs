//! Finding the code: the block cache block at an IP, through the hints that save its
//! hash lookups (the successor link just taken, the last target of a return or
//! indirect branch, a small direct-mapped table by IP), the section of the code, and
//! what libipt's own block cache would know by now ([`Marks`]), which decides where
//! blocks end in code seen for the first time.

use super::BlockDecoder;
use crate::block_cache::BlockId;
use crate::error::ErrorCode;
use crate::image::Image;
use pt_encoder::ExecMode;

/// The parts of a cache block the walk needs.
#[derive(Clone, Copy)]
pub(super) struct BlockView {
    pub(super) ip: u64,
    pub(super) ninsn: u32,
    pub(super) truncated: bool,
}

/// Where a branch went: the cache block at `ip` in `mode` (ids stay valid: the
/// decoder's image cannot change under it).
#[derive(Clone, Copy, Debug)]
pub(super) struct Target {
    ip: u64,
    mode: ExecMode,
    id: Option<BlockId>,
}

impl Target {
    pub(super) const NONE: Target = Target {
        ip: 0,
        mode: ExecMode::Unknown,
        id: None,
    };

    pub(super) fn new(ip: u64, mode: ExecMode, id: BlockId) -> Self {
        Target {
            ip,
            mode,
            id: Some(id),
        }
    }

    /// The block if this is where `ip` in `mode` is.
    #[inline]
    pub(super) fn hit(&self, ip: u64, mode: ExecMode) -> Option<BlockId> {
        if self.ip == ip && self.mode == mode {
            self.id
        } else {
            None
        }
    }
}

/// Entries of the block decoder's direct-mapped target table (a power of two).
pub(super) const TARGET_SLOTS: usize = 1024;

/// The target table slot of `ip`.
#[inline]
pub(super) fn target_slot(ip: u64) -> usize {
    let h = (ip ^ (ip >> 10) ^ (ip >> 20) ^ (ip >> 40)) as usize;
    h & (TARGET_SLOTS - 1)
}

/// Instructions libipt's own block cache walks at most before it ends a block while
/// learning new code.
pub(super) const FILL_STEPS: u32 = 0x400;

/// A bit per code byte of each section: the instruction there is known.
#[derive(Default)]
pub(super) struct Marks {
    /// `(first address, end address, bits)` per section seen.
    sections: Vec<(u64, u64, Vec<u64>)>,
    cur: usize,
}

impl Marks {
    fn slot(&mut self, image: &Image, ip: u64) -> Option<usize> {
        if let Some((lo, hi, _)) = self.sections.get(self.cur) {
            if *lo <= ip && ip < *hi {
                return Some(self.cur);
            }
        }
        if let Some(i) = self
            .sections
            .iter()
            .position(|(lo, hi, _)| *lo <= ip && ip < *hi)
        {
            self.cur = i;
            return Some(i);
        }
        let s = image.find(ip)?;
        let len = s.len();
        let words = usize::try_from(len.div_ceil(64)).ok()?;
        self.sections
            .push((s.vaddr(), s.vaddr().saturating_add(len), vec![0; words]));
        self.cur = self.sections.len() - 1;
        Some(self.cur)
    }

    pub(super) fn valid(&mut self, image: &Image, ip: u64) -> bool {
        let Some(i) = self.slot(image, ip) else {
            return false;
        };
        let (lo, _, bits) = &self.sections[i];
        let at = (ip - lo) as usize;
        bits.get(at / 64).is_some_and(|w| w >> (at % 64) & 1 != 0)
    }

    pub(super) fn mark(&mut self, image: &Image, ip: u64) {
        if let Some(i) = self.slot(image, ip) {
            let (lo, _, bits) = &mut self.sections[i];
            let at = (ip - *lo) as usize;
            if let Some(w) = bits.get_mut(at / 64) {
                *w |= 1 << (at % 64);
            }
        }
    }
}

impl BlockDecoder<'_> {
    /// The block cache block at `ip`, following the stored link if it matches.
    #[inline]
    pub(super) fn cache_block_at(&mut self, ip: u64) -> Result<BlockId, ErrorCode> {
        if let Some(link) = self.link.take() {
            if link.ip == ip {
                return self
                    .cache
                    .successor(self.image, link.block, link.taken)
                    .map_err(|e| e.code);
            }
        }
        // After a return or an indirect branch: the target it went to last time?
        let from = self.came_from.take();
        if let Some(from) = from {
            if let Some(id) = self
                .last_target
                .get(from.index())
                .and_then(|t| t.hit(ip, self.mode))
            {
                return Ok(id);
            }
        }
        // Else a small direct-mapped table by IP before the cache's hash index (an
        // indirect branch with many targets misses the last-target entry).
        let slot = target_slot(ip);
        let id = match self.targets.get(slot).and_then(|t| t.hit(ip, self.mode)) {
            Some(id) => id,
            None => {
                let id = self
                    .cache
                    .lookup(self.image, ip, self.mode)
                    .map_err(|e| e.code)?;
                if let Some(t) = self.targets.get_mut(slot) {
                    *t = Target::new(ip, self.mode, id);
                }
                id
            }
        };
        if let Some(from) = from {
            if self.last_target.len() <= from.index() {
                self.last_target.resize(from.index() + 1, Target::NONE);
            }
            self.last_target[from.index()] = Target::new(ip, self.mode, id);
        }
        Ok(id)
    }

    #[inline]
    pub(super) fn section_id(&mut self, ip: u64) -> u32 {
        let (lo, hi, id) = self.section;
        if lo <= ip && ip < hi {
            return id;
        }
        match self.image.find(ip) {
            Some(s) => {
                let lo = s.vaddr();
                self.section = (lo, lo.saturating_add(s.len()), s.id());
                s.id()
            }
            None => 0,
        }
    }

    /// Whether `ip` lies in the section of the last cache block.
    #[inline]
    pub(super) fn in_section(&self, ip: u64) -> bool {
        self.section.0 <= ip && ip < self.section.1
    }

    /// Walk cache block `id` instruction by instruction as libipt would, marking what
    /// its cache learns. All but the last instruction are handled here; returns
    /// `Some((count, ip, next))` if libipt ends its block after `count` instructions
    /// of this run (the last at `ip`, going on at `next`). Leaves `fill` as it is
    /// before the last instruction's own step.
    pub(super) fn walk_unknown(
        &mut self,
        id: BlockId,
        b: &BlockView,
        fill: &mut Option<u32>,
    ) -> Option<(u32, u64, u64)> {
        let image = self.image;
        let sizes = self.cache.sizes(id);
        let mut ip = b.ip;
        let mut known = true;
        for (k, &size) in sizes.iter().enumerate() {
            if fill.is_none() && !self.marks.valid(image, ip) {
                *fill = Some(0);
            }
            let last = k + 1 == sizes.len();
            if let Some(n) = *fill {
                self.marks.mark(image, ip);
                if !last {
                    let nip = ip.wrapping_add(u64::from(size));
                    if self.marks.valid(image, nip) {
                        *fill = None;
                    } else if n + 1 == FILL_STEPS {
                        return Some((k as u32 + 1, ip, nip));
                    } else {
                        *fill = Some(n + 1);
                    }
                }
            }
            known &= self.marks.valid(image, ip);
            ip = ip.wrapping_add(u64::from(size));
        }
        if known {
            if self.warm.len() <= id.index() {
                self.warm.resize(id.index() + 1, false);
            }
            self.warm[id.index()] = true;
        }
        None
    }
}
