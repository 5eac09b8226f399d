//! Checkpoints: comparing a decoder with another one's earlier state, to tell when a
//! decoder that started at a later PSB has caught up with one that came from further
//! back (see [`BlockDecoder::checkpoint`]).

use super::BlockDecoder;
use crate::error::ErrorCode;
use crate::event::{Event, EventDecoder};
use crate::insn::Insn;
use pt_encoder::ExecMode;

/// A block decoder's place in the trace and in the code, with the state that decides
/// what it reports from there on. Taken with [`BlockDecoder::checkpoint`], compared
/// with [`BlockDecoder::reached`].
///
/// Left out on purpose, so that a decoder that synchronized at a PSB can meet one that
/// decoded the trace before it:
/// - **time** (the TSC estimate, MTC/CYC calibration, the core:bus ratio): the later
///   decoder has calibrated with fewer packets, which changes the times it reports
///   but never the instruction flow;
/// - **the return stack**: after a PSB, hardware compresses only returns to calls
///   made after it (SDM, RET compression), so in a valid trace the entries from
///   before the PSB are never popped. Where a trace breaks that rule, the later
///   decoder fails with [`ErrorCode::RetstackEmpty`] where the other would pop an old
///   entry: callers must take that error as the two parting ways;
/// - **what the block cache knows**: it decides where blocks end in code not seen
///   before (as libipt's cache does), so block counts may differ, never instructions;
/// - caches and hints, which only save work, and the guards against resynchronizing
///   forever at the same place.
#[derive(Clone, Debug)]
pub struct Checkpoint<'a> {
    evdec: EventDecoder<'a>,
    event: Event,
    status: Result<(), ErrorCode>,
    ip: u64,
    mode: ExecMode,
    enabled: bool,
    speculative: bool,
    icnt: (bool, u32),
    asid: super::Asid,
    postponed: Option<Insn>,
    bound: u8,
}

impl<'a> BlockDecoder<'a> {
    /// The decoder's state here, as far as it decides the instructions and events it
    /// reports from here on (see [`Checkpoint`] for what is left out).
    pub fn checkpoint(&self) -> Checkpoint<'a> {
        Checkpoint {
            evdec: self.evdec.clone(),
            event: self.event.untimed(),
            status: self.status,
            ip: self.ip,
            mode: self.mode,
            enabled: self.enabled,
            speculative: self.speculative,
            icnt: (self.has_icnt, self.icnt),
            asid: self.asid,
            postponed: self.postponed,
            bound: self.bound,
        }
    }

    /// Whether this decoder is where `c` was taken, in the same state: from here on it
    /// reports what the decoder `c` was taken of reported after it (times and, for a
    /// trace that breaks the return compression rule, returns aside: see
    /// [`Checkpoint`]). Cheap when it is not: the IP and the trace offset go first.
    pub fn reached(&self, c: &Checkpoint<'_>) -> bool {
        self.ip == c.ip
            && self.event.offset == c.event.offset
            && self.event.untimed() == c.event
            && self.status == c.status
            && self.mode == c.mode
            && self.enabled == c.enabled
            && self.speculative == c.speculative
            && (self.has_icnt, self.icnt) == c.icnt
            && self.asid == c.asid
            && self.postponed == c.postponed
            && self.bound == c.bound
            && self.evdec.same_course(&c.evdec)
    }
}
