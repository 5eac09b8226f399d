//! The branch hand-over: the one interface the flow decoders' counting fast path
//! ([`crate::flow::BlockDecoder::skip_blocks`]) has to the event decoder.
//!
//! The fast path takes whole blocks on a TNT bit or a TIP. To use up an event's last
//! bit or its TIP it must know that nothing would be reported between that block and
//! the next one: that the next event is a TNT or TIP again, with only PAD, MTC and CYC
//! packets before it. Two calls answer that, without going through the general event
//! handling:
//!
//! * [`EventDecoder::next_is_branch`] looks ahead without moving;
//! * [`EventDecoder::next_branch_into`] moves to that branch event in one pass over
//!   the packets (applying the timing packets on the way), or changes nothing.
//!
//! Both decode the common packets inline ([`crate::packet::PacketDecoder`]'s
//! `next_hot`), so that their fields stay in registers.

use super::{apply_cyc, apply_mtc, apply_timing, stamp, Current, EventDecoder};
use crate::event::{Event, EventKind};
use crate::packet::{HotPacket, PacketDecoder};
use pt_encoder::{IpCompression, IpPacketKind, IpPayload, Packet, Tnt};

impl<'a> EventDecoder<'a> {
    /// Whether the next event will be a TNT with at least one bit or a TIP, with only
    /// PAD, MTC and CYC packets before it that apply without error (tried on copies of
    /// the time model; nothing is queued and no tick events are asked for, so nothing
    /// else can happen on the way). Looks ahead without moving. Lets the flow
    /// decoders' counting mode use up a TNT or TIP without their general event
    /// handling: nothing can be reported in between.
    pub(crate) fn next_is_branch(&mut self) -> bool {
        if !self.enabled || !self.evq.is_empty() || self.options.tick_events {
            return false;
        }
        let Current::Packet { packet, .. } = self.cur else {
            return false;
        };
        if !self.bound {
            // Most often the packet at hand says it.
            match packet {
                Packet::Tnt8(t) | Packet::Tnt64(t) => return !t.is_empty(),
                Packet::Ip(IpPacketKind::Tip, _) => return true,
                Packet::Pad | Packet::Mtc { .. } | Packet::Cyc { .. } => {}
                _ => return false,
            }
        }
        let mut pkt = self.pkt.clone();
        let mut packet = if self.bound {
            // A TIP already reported: the packets after it.
            if !matches!(packet, Packet::Ip(IpPacketKind::Tip, _)) {
                return false;
            }
            match pkt.next_packet() {
                Ok((offset, p)) => {
                    self.peeked = Some((pkt.clone(), offset, p));
                    p
                }
                Err(_) => return false,
            }
        } else {
            packet
        };
        let (mut time, mut tcal) = (self.time, self.tcal);
        loop {
            match packet {
                Packet::Tnt8(t) | Packet::Tnt64(t) => return !t.is_empty(),
                Packet::Ip(IpPacketKind::Tip, _) => return true,
                Packet::Pad => {}
                Packet::Mtc { .. } | Packet::Cyc { .. } => {
                    if apply_timing(&mut time, &mut tcal, &self.config, &packet, false).is_err() {
                        return false;
                    }
                }
                _ => return false,
            }
            packet = match pkt.next_packet() {
                Ok((_, p)) => p,
                Err(_) => return false,
            };
        }
    }

    /// For the flow decoders' counting fast path, once the event reported last (a TNT
    /// or TIP) is used up: if the next event is a TNT with at least one bit or a TIP
    /// with an IP, with only PAD, MTC and CYC packets before it that apply without
    /// error (nothing queued, no tick events asked for), moves to it exactly as
    /// [`next_into`](Self::next_into) would, writes it into `out` and returns `true`.
    /// Otherwise changes nothing and returns `false`, so that the caller can leave
    /// the last block to its general path. One pass over the packets, no look-ahead
    /// kept.
    #[inline(always)]
    pub(crate) fn next_branch_into(&mut self, out: &mut Event) -> bool {
        if !self.enabled || !self.evq.is_empty() || self.options.tick_events {
            return false;
        }
        // The common cases: the branch packet right after a TIP, or at hand after a TNT.
        let Current::Packet { offset, packet } = self.cur else {
            return false;
        };
        if self.bound {
            if !matches!(packet, Packet::Ip(IpPacketKind::Tip, _)) || self.peeked.is_some() {
                return self.next_branch_slow(out);
            }
            // The decoder moves on in place, a copy kept to undo that: copying it back
            // after `next_packet` would wait for that call's stores to reach the cache
            // (they do not forward to the wider loads of a copy).
            let saved = self.pkt.clone();
            // The common packets are decoded inline, their fields in registers.
            let (offset, hot) = match self.pkt.next_hot() {
                (_, HotPacket::Other) => match self.pkt.next_packet() {
                    Ok((offset, packet)) => (offset, HotPacket::of(&packet)),
                    Err(_) => {
                        self.pkt = saved;
                        return false;
                    }
                },
                r => r,
            };
            match hot {
                HotPacket::Tnt(t) if !t.is_empty() => {
                    self.take_tnt(out, offset, t);
                    true
                }
                HotPacket::Tip(p) if p.compression != IpCompression::Suppressed => {
                    self.cur = Current::Packet {
                        offset,
                        packet: Packet::Ip(IpPacketKind::Tip, p),
                    };
                    self.take_tip(out, offset, p);
                    true
                }
                hot => self.next_branch_from(out, saved, offset, hot),
            }
        } else {
            match packet {
                Packet::Tnt8(t) | Packet::Tnt64(t) if !t.is_empty() => {
                    self.take_tnt(out, offset, t);
                    true
                }
                Packet::Ip(IpPacketKind::Tip, p) if p.compression != IpCompression::Suppressed => {
                    self.take_tip(out, offset, p);
                    true
                }
                _ => self.next_branch_from(out, self.pkt.clone(), offset, HotPacket::of(&packet)),
            }
        }
    }

    /// Report the TNT packet at `offset` (the current packet) as `next_into` does.
    #[inline(always)]
    fn take_tnt(&mut self, out: &mut Event, offset: u64, t: Tnt) {
        out.kind = EventKind::Tnt {
            bits: t.bits(),
            size: t.len() as u8,
        };
        out.ip_suppressed = false;
        out.status_update = false;
        out.time = stamp(&self.time);
        out.offset = offset;
        self.peeked = None;
        self.bound = false;
        self.fetch();
    }

    /// Report the TIP at `offset` (the current packet, with an IP) as `next_into` does.
    #[inline(always)]
    fn take_tip(&mut self, out: &mut Event, offset: u64, payload: IpPayload) {
        let ip = self.ip.update(payload).unwrap_or(0);
        out.kind = EventKind::Tip { ip };
        out.ip_suppressed = false;
        out.status_update = false;
        out.time = stamp(&self.time);
        out.offset = offset;
        self.peeked = None;
        self.bound = true;
    }

    /// [`Self::next_branch_into`] after a TIP with a packet peeked after it.
    #[inline(never)]
    fn next_branch_slow(&mut self, out: &mut Event) -> bool {
        let Current::Packet {
            packet: Packet::Ip(IpPacketKind::Tip, _),
            ..
        } = self.cur
        else {
            return false;
        };
        let Some((pkt, offset, packet)) = self.peeked.clone() else {
            return false;
        };
        let saved = std::mem::replace(&mut self.pkt, pkt);
        self.next_branch_from(out, saved, offset, HotPacket::of(&packet))
    }

    /// [`Self::next_branch_into`] past PAD and timing packets: `packet` at `offset` is
    /// the first packet after the current branch (or the current one, if not yet
    /// reported), the packet decoder is just past it, and `saved` is the packet
    /// decoder to go back to on failure. Moves on only on success.
    ///
    /// The packet decoder and the time model change in place, with copies kept to
    /// undo that: copying them back after the changes would wait for the changes'
    /// narrower stores to reach the cache (no store forwarding to wider loads).
    #[inline(never)]
    fn next_branch_from(
        &mut self,
        out: &mut Event,
        saved: PacketDecoder<'a>,
        mut offset: u64,
        mut packet: HotPacket,
    ) -> bool {
        enum Branch {
            Tnt(Tnt),
            Tip(IpPayload),
        }
        let (time, tcal) = (self.time, self.tcal);
        let branch = loop {
            let ok = match packet {
                HotPacket::Tnt(t) if !t.is_empty() => break Branch::Tnt(t),
                HotPacket::Tip(p) if p.compression != IpCompression::Suppressed => {
                    break Branch::Tip(p)
                }
                HotPacket::Pad => true,
                HotPacket::Cyc(value) => {
                    apply_cyc(&mut self.time, &mut self.tcal, &self.config, value).is_ok()
                }
                HotPacket::Mtc(ctc) => {
                    apply_mtc(&mut self.time, &mut self.tcal, &self.config, ctc).is_ok()
                }
                _ => false,
            };
            if !ok {
                (self.pkt, self.time, self.tcal) = (saved, time, tcal);
                return false;
            }
            (offset, packet) = match self.pkt.next_hot() {
                (_, HotPacket::Other) => match self.pkt.next_packet() {
                    Ok((o, p)) => (o, HotPacket::of(&p)),
                    Err(_) => {
                        (self.pkt, self.time, self.tcal) = (saved, time, tcal);
                        return false;
                    }
                },
                r => r,
            };
        };
        match branch {
            // `take_tnt` moves past the TNT at once.
            Branch::Tnt(t) => self.take_tnt(out, offset, t),
            Branch::Tip(payload) => {
                self.cur = Current::Packet {
                    offset,
                    packet: Packet::Ip(IpPacketKind::Tip, payload),
                };
                self.take_tip(out, offset, payload)
            }
        }
        true
    }
}
