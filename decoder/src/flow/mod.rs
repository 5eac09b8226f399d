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
//! as the returned [`Status`] says, like libipt's `pt_blk_next`/`pt_blk_event`.

pub mod block;
pub mod filter;
pub mod insn;
pub mod retstack;

pub use block::{Block, BlockDecoder, FlowOptions, Status, MAX_BLOCK_INSNS};
pub use filter::AddrFilter;
pub use insn::{InsnDecoder, InsnInfo};
pub use retstack::RetStack;

#[cfg(test)]
mod tests;
