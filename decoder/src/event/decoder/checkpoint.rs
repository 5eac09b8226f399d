//! Comparing two event decoders, for `BlockDecoder::checkpoint`.

use super::{Current, EventDecoder, ExecState};

impl EventDecoder<'_> {
    /// Whether `self` and `other` report the same events from here on, times aside:
    /// the same place in the same trace, the same last IP, the same events waiting and
    /// the same tracing state. The time model is left out on purpose: a decoder that
    /// started at a later PSB has seen fewer MTC and CYC packets to calibrate with,
    /// and that changes the times it reports, never the events.
    pub(crate) fn same_course(&self, other: &Self) -> bool {
        self.pkt.same_position(&other.pkt)
            && same_current(&self.cur, &other.cur)
            && self.ip == other.ip
            && self.evq.same_events(&other.evq)
            && self.out.map(|e| e.untimed()) == other.out.map(|e| e.untimed())
            && same_exec(self.exec, other.exec)
            && self.enabled == other.enabled
            && self.bound == other.bound
            && match (&self.peeked, &other.peeked) {
                (None, None) => true,
                (Some((pa, oa, a)), Some((pb, ob, b))) => {
                    pa.same_position(pb) && oa == ob && a == b
                }
                _ => false,
            }
    }
}

fn same_current(a: &Current, b: &Current) -> bool {
    match (a, b) {
        (
            Current::Packet {
                offset: oa,
                packet: pa,
            },
            Current::Packet {
                offset: ob,
                packet: pb,
            },
        ) => oa == ob && pa == pb,
        (Current::Error(a), Current::Error(b)) => a == b,
        (Current::Lost { offset: a }, Current::Lost { offset: b }) => a == b,
        _ => false,
    }
}

fn same_exec(a: Option<ExecState>, b: Option<ExecState>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.csl == b.csl && a.csd == b.csd && a.iflag == b.iflag,
        _ => false,
    }
}
