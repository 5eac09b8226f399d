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
//! IP before the cache's hash index. For callers that only count (ptxed `--quiet`),
//! [`BlockDecoder::skip_blocks`] takes whole blocks without building them:
//!
//! * a block is a *chain* of warm cache blocks (through direct jumps and calls) up to
//!   the instruction that needs trace, memoized per start block with its instruction
//!   count and the return addresses its calls push;
//! * a step takes one chain on a bit of the current TNT (conditional branch,
//!   compressed return popping the return stack) or on the current TIP (indirect
//!   jump or call, uncompressed return) and goes on at the next chain through the
//!   cache links or the target tables, without going back to the caller;
//! * TNT events of eight bits or more use a memo of runs of bits per start block
//!   (through direct calls and returns to calls made in the run), so a hot loop
//!   costs one lookup per TNT-64 packet.
//!
//! A step uses up a TNT's last bit or a TIP only when the event decoder can move on
//! to a TNT or TIP right away (past PAD, MTC and CYC, applied to copies of the time
//! model until the branch is found), so that `next` would have had nothing to
//! report after the block either; the event decoder then hands the branch over in
//! the same pass (`next_branch_into`), without a look-ahead to keep.
//!
//! The event decoder hands TNT and TIP events straight from the packet into the
//! block decoder's current event (`next_into`); everything else takes the general
//! packet handlers.
//!
//! On this path the packet decoder and the time model change in place, with copies
//! kept to undo a failed look; results of the (outlined) `next_packet` are read
//! field by field. Copying a structure back whole right after narrower stores to it
//! stalls on store forwarding: that was a fifth of the time on TIP-heavy traces.
//!
//! # Where this differs from libipt
//!
//! Only on input where libipt's ptxed never ends: an enabled event without an IP, an
//! event that fails again after a resync, or a resync from the very same state is
//! skipped (or reported as `NoSync`) instead of being retried forever.

pub mod block;
pub mod filter;
pub mod insn;
pub mod retstack;

pub use block::{Block, BlockDecoder, Checkpoint, FlowOptions, Status, MAX_BLOCK_INSNS};
pub use filter::AddrFilter;
pub use insn::{InsnCheckpoint, InsnDecoder, InsnInfo};
pub use retstack::RetStack;

#[cfg(test)]
mod tests;
