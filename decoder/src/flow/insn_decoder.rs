//! The instruction-flow decoder: the block decoder's blocks, one instruction at a time.

use super::block::{next_ip, Block, BlockDecoder, Checkpoint, FlowOptions};
use super::{Progress, Status};
use crate::block_cache::BlockId;
use crate::config::Config;
use crate::error::ErrorCode;
use crate::event::Event;
use crate::image::Image;
use crate::insn::{self, InsnClass};
use crate::packet::recover::ResumePoint;
use pt_encoder::ExecMode;

/// One instruction of the flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InsnInfo {
    /// Its address.
    pub ip: u64,
    /// Its length in bytes (0 if it could not be decoded).
    pub size: u8,
    /// The execution mode.
    pub mode: ExecMode,
    /// Executed speculatively (inside a transaction).
    pub speculative: bool,
    /// Its image section (0 if unknown).
    pub isid: u32,
    /// Its class; `None` if it could not be decoded.
    pub class: Option<InsnClass>,
}

/// The instruction-flow decoder (libipt's `pt_insn_*` on top of its block decoder).
pub struct InsnDecoder<'a> {
    blk: BlockDecoder<'a>,
    /// The rest of the current block.
    block: Block,
    status: Result<Status, ErrorCode>,
    /// The current block's cache blocks with their instruction counts, and the
    /// position in them, when known (saves decoding each instruction again).
    segs: Vec<(BlockId, u32)>,
    seg: usize,
    idx: u32,
}

/// An instruction decoder's [`Checkpoint`] (see [`InsnDecoder::checkpoint`]).
#[derive(Clone, Debug)]
pub struct InsnCheckpoint<'a> {
    blk: Checkpoint<'a>,
    block: Block,
    status: Result<Status, ErrorCode>,
}

const EMPTY: Block = Block {
    ip: 0,
    end_ip: 0,
    mode: ExecMode::Unknown,
    ninsn: 0,
    speculative: false,
    truncated: false,
    isid: 0,
    class: None,
};

impl<'a> InsnDecoder<'a> {
    /// A decoder for `trace` with code from `image`.
    pub fn new(trace: &'a [u8], image: &'a Image, config: &Config, options: FlowOptions) -> Self {
        Self {
            blk: BlockDecoder::new(trace, image, config, options),
            block: EMPTY,
            status: Ok(Status::default()),
            segs: Vec::new(),
            seg: 0,
            idx: 0,
        }
    }

    /// The decoder's state between two blocks, as [`BlockDecoder::checkpoint`] takes
    /// it; `None` inside a block, where the block decoder underneath is ahead of the
    /// instructions handed out so far.
    pub fn checkpoint(&self) -> Option<InsnCheckpoint<'a>> {
        (self.block.ninsn == 0).then(|| InsnCheckpoint {
            blk: self.blk.checkpoint(),
            block: self.block,
            status: self.status,
        })
    }

    /// Whether this decoder is where `c` was taken, in the same state (see
    /// [`BlockDecoder::reached`]).
    pub fn reached(&self, c: &InsnCheckpoint<'_>) -> bool {
        self.block == c.block && self.status == c.status && self.blk.reached(&c.blk)
    }

    /// Decodes with the code of `image` from the next instruction on (see
    /// [`BlockDecoder::set_image`]).
    pub fn set_image(&mut self, image: &'a Image) {
        self.blk.set_image(image);
        // The cache blocks of the current block belong to the old image's cache: the
        // rest of the block is decoded from the new image.
        self.segs.clear();
        self.seg = 0;
        self.idx = 0;
    }

    /// The block decoder underneath.
    pub fn block_decoder(&self) -> &BlockDecoder<'a> {
        &self.blk
    }

    /// Offset of the next packet the event decoder looks at.
    pub fn offset(&self) -> Result<u64, ErrorCode> {
        self.blk.offset()
    }

    fn restart(&mut self, r: Result<Status, ErrorCode>) -> Result<Status, ErrorCode> {
        self.block = EMPTY;
        self.segs.clear();
        let status = r?;
        self.status = Ok(status);
        Ok(status)
    }

    /// Synchronize at the next PSB.
    pub fn sync_forward(&mut self) -> Result<Status, ErrorCode> {
        let r = self.blk.sync_forward();
        self.restart(r)
    }

    /// Synchronize at the PSB at `offset`.
    pub fn sync_set(&mut self, offset: u64) -> Result<Status, ErrorCode> {
        let r = self.blk.sync_set(offset);
        self.restart(r)
    }

    /// Go on after an error (see [`BlockDecoder::resync`]).
    pub fn resync(&mut self) -> Result<Progress, ErrorCode> {
        match self.blk.resync() {
            Ok(Progress::EventFirst) => {
                self.block = EMPTY;
                self.segs.clear();
                Ok(Progress::EventFirst)
            }
            Ok(Progress::Done(status)) => self.restart(Ok(status)).map(Progress::Done),
            Err(e) => self.restart(Err(e)).map(Progress::Done),
        }
    }

    /// Let the decoder see the trace up to `end` only (see
    /// [`BlockDecoder::set_end`]).
    pub fn set_end(&mut self, end: u64) {
        self.blk.set_end(end);
    }

    /// After damage, go on at `at` (see [`BlockDecoder::resume_at`]).
    pub fn resume_at(&mut self, at: &ResumePoint) -> Result<Progress, ErrorCode> {
        match self.blk.resume_at(at) {
            Ok(Progress::EventFirst) => {
                self.block = EMPTY;
                self.segs.clear();
                Ok(Progress::EventFirst)
            }
            Ok(Progress::Done(status)) => self.restart(Ok(status)).map(Progress::Done),
            Err(e) => self.restart(Err(e)).map(Progress::Done),
        }
    }

    /// The next instruction, written to `out` (also on errors, as far as known:
    /// `out.class` is `None` if there is none). [`Progress::EventFirst`] if an event is
    /// pending before the next instruction.
    pub fn next(&mut self, out: &mut InsnInfo) -> Result<Progress, ErrorCode> {
        let fill = |out: &mut InsnInfo, b: &Block| {
            *out = InsnInfo {
                ip: b.ip,
                size: 0,
                mode: b.mode,
                speculative: b.speculative,
                isid: b.isid,
                class: None,
            }
        };
        fill(out, &self.block);
        while self.block.ninsn == 0 {
            let status = self.status?;
            if status.event_pending {
                return Ok(Progress::EventFirst);
            }
            let r = self.blk.next(&mut self.block);
            self.status = r;
            fill(out, &self.block);
            self.segs.clear();
            if let Some(segs) = self.blk.segments() {
                self.segs.extend_from_slice(segs);
            }
            self.seg = 0;
            self.idx = 0;
            if self.block.ninsn != 0 {
                break;
            }
            let status = r?;
            if status.event_pending {
                return Ok(Progress::EventFirst);
            }
        }
        if let Some(&(id, count)) = self.segs.get(self.seg) {
            return self.next_cached(out, id, count).map(Progress::Done);
        }
        let d = insn::decode_at(self.blk.image(), self.block.ip, self.block.mode)
            .map_err(|e| e.code)?;
        out.size = d.size;
        out.class = Some(d.class);
        self.block.ninsn -= 1;
        if self.block.ninsn != 0 {
            // More instructions in the block, but this one needs trace: the trace does
            // not match the code.
            self.block.ip = next_ip(&d).ok_or(ErrorCode::BadQuery)?;
            return Ok(Progress::Done(Status::default()));
        }
        if self.block.ip != self.block.end_ip {
            return Err(ErrorCode::Internal);
        }
        self.status.map(Progress::Done)
    }

    /// Skips whole blocks that need nothing but TNT bits (see
    /// [`BlockDecoder::skip_blocks`]); returns the instructions skipped. Only between
    /// blocks and when no event is pending.
    pub fn skip_blocks(&mut self) -> u64 {
        match self.status {
            Ok(s) if self.block.ninsn == 0 && !s.event_pending && !s.eos => {
                self.blk.skip_blocks().0
            }
            _ => 0,
        }
    }

    /// The next instruction from the cache block `id`, of which `count` belong to
    /// the current block.
    #[inline]
    fn next_cached(
        &mut self,
        out: &mut InsnInfo,
        id: BlockId,
        count: u32,
    ) -> Result<Status, ErrorCode> {
        let cache = self.blk.cache();
        let b = cache.get(id).ok_or(ErrorCode::Internal)?;
        let size = *cache
            .sizes(id)
            .get(self.idx as usize)
            .ok_or(ErrorCode::Internal)?;
        out.size = size;
        out.class = Some(if self.idx + 1 == b.ninsn {
            b.last.class
        } else {
            InsnClass::Other
        });
        self.block.ninsn -= 1;
        self.idx += 1;
        if self.block.ninsn == 0 {
            if self.block.ip != self.block.end_ip {
                return Err(ErrorCode::Internal);
            }
            return self.status;
        }
        if self.idx < count {
            self.block.ip = self.block.ip.wrapping_add(u64::from(size));
        } else {
            self.seg += 1;
            self.idx = 0;
            let &(next, _) = self.segs.get(self.seg).ok_or(ErrorCode::Internal)?;
            self.block.ip = cache.get(next).ok_or(ErrorCode::Internal)?.ip;
        }
        Ok(Status::default())
    }

    /// The pending event.
    pub fn event(&mut self) -> Result<(Event, Status), ErrorCode> {
        if self.block.ninsn != 0 {
            return Err(ErrorCode::BadQuery);
        }
        let (ev, status) = self.blk.event()?;
        self.status = Ok(status);
        Ok((ev, status))
    }
}
