//! Changing the code image in the middle of a trace: another process runs on the
//! traced CPU, or a process executed a new program (libipt's `pt_blk_set_image`, which
//! its ptxed calls when side-band says the context changed).
//!
//! Everything the decoder learnt about an image's code (the block cache, the hints
//! into it, the counting fast path's memos) belongs to that image. It is put aside
//! when the image is switched out and taken up again when the image comes back, so
//! that a CPU switching between a few processes stays warm.

use super::code::{Marks, Target, TARGET_SLOTS};
use super::{skip, BlockDecoder};
use crate::block_cache::BlockCache;
use crate::image::Image;

/// Images whose code state is kept while they are switched out.
const KEEP: usize = 8;

/// What the decoder learnt about one image's code.
struct CodeState {
    cache: BlockCache,
    marks: Marks,
    warm: Vec<bool>,
    last_target: Vec<Target>,
    targets: Box<[Target]>,
    skip: skip::Skip,
}

/// The code states of images switched out, by image stamp, most recent last.
#[derive(Default)]
pub(super) struct Stash {
    states: Vec<(u64, CodeState)>,
}

impl<'a> BlockDecoder<'a> {
    /// Decodes with the code of `image` from here on (the next block is read from
    /// it). Nothing changes if it is the image in use. What was learnt about the
    /// previous image's code is kept for when it comes back.
    pub fn set_image(&mut self, image: &'a Image) {
        if core::ptr::eq(self.image, image) {
            return;
        }
        let old = CodeState {
            cache: core::mem::take(&mut self.cache),
            marks: core::mem::take(&mut self.marks),
            warm: core::mem::take(&mut self.warm),
            last_target: core::mem::take(&mut self.last_target),
            targets: core::mem::take(&mut self.targets),
            skip: core::mem::take(&mut self.skip),
        };
        let states = &mut self.stash.states;
        let old_stamp = self.image.stamp();
        states.retain(|(s, _)| *s != old_stamp);
        if states.len() >= KEEP {
            states.remove(0);
        }
        states.push((old_stamp, old));
        let stamp = image.stamp();
        let new = match states.iter().position(|(s, _)| *s == stamp) {
            Some(i) => states.remove(i).1,
            None => CodeState {
                cache: BlockCache::new(),
                marks: Marks::default(),
                warm: Vec::new(),
                last_target: Vec::new(),
                targets: vec![Target::NONE; TARGET_SLOTS].into_boxed_slice(),
                skip: skip::Skip::default(),
            },
        };
        self.cache = new.cache;
        self.marks = new.marks;
        self.warm = new.warm;
        self.last_target = new.last_target;
        self.targets = new.targets;
        self.skip = new.skip;
        self.image = image;
        // Hints into the old image's cache.
        self.link = None;
        self.came_from = None;
        self.section = (1, 0, 0);
        self.segs.clear();
        self.segs_ok = false;
    }
}
