//! The flow layer: events + code image → the executed instructions.
//!
//! * [`BlockDecoder`] reconstructs the flow a block of sequential instructions at a
//!   time, with libipt's block decoder semantics: return compression with a 64-entry
//!   [`RetStack`], events bound to the instructions they belong to, errata workarounds
//!   (BDM64, SKD022, SKL014), resynchronization after errors.
//! * [`InsnDecoder`] hands out the same flow one instruction at a time.
//! * [`AddrFilter`] describes the IP filter ranges the trace was recorded with.
//!
//! Both decoders alternate between `next()` (blocks or instructions) and `event()`
//! as the returned [`Status`] says, like libipt's `pt_blk_next`/`pt_blk_event`;
//! after an error, `resync()` goes on where the trace allows it.
//!
//! Blocks end where libipt's end, including the boundaries its block cache adds
//! while it learns new code (after direct calls, backward jumps and 0x400 new
//! instructions), so `ptxed --block:show-blocks` and `--stat:blocks` match.
//!
//! # Speed
//!
//! Code is decoded once into [`crate::block_cache`] blocks; conditional branches and
//! fall-throughs follow the cache's links, returns and indirect branches remember
//! their last target, and other targets are found in a small direct-mapped table by
//! IP before the cache's hash index.
//!
//! For callers that only count (ptxed `--quiet`, [`crate::Decoder`]'s count-only
//! mode), [`BlockDecoder::skip_blocks`] takes whole blocks without building them: the
//! counting fast path, in its own module (`flow/block/skip.rs`) with its own memo of
//! chains of warm blocks and of runs of TNT bits, and one interface to the event
//! decoder (the branch hand-over in `event/decoder/branch.rs`). The differential tests
//! in `flow/tests.rs` hold it to what [`BlockDecoder::next`] returns block by block.
//!
//! On the event decoder's hot path the packet decoder and the time model change in
//! place, with copies kept to undo a failed look; common packets are decoded inline.
//! Copying a structure back whole right after narrower stores to it stalls on store
//! forwarding: that was a fifth of the time on TIP-heavy traces.
//!
//! # Where this differs from libipt
//!
//! Only on input where libipt's ptxed never ends: an enabled event without an IP, an
//! event that fails again after a resync, or a resync from the very same state is
//! skipped (or reported as `NoSync`) instead of being retried forever.

pub mod block;
pub mod filter;
pub mod insn_decoder;
pub mod retstack;

pub use crate::error::Status;
pub use block::{Asid, Block, BlockDecoder, Checkpoint, FlowOptions, MAX_BLOCK_INSNS};

/// What a flow decoder's call did when it did not fail ([`InsnDecoder::next`],
/// [`BlockDecoder::resync`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Done; the status says what to do next.
    Done(Status),
    /// Nothing done yet: an event is pending. Take it (`event()`), then call again.
    EventFirst,
}
pub use filter::AddrFilter;
pub use insn_decoder::{InsnCheckpoint, InsnDecoder, InsnInfo};
pub use retstack::RetStack;

#[cfg(test)]
mod tests;
