//! Damage at the packet layer: holes in a trace, and where decoding can soundly go on
//! after an error (for [`crate::Resync::Recover`]).
//!
//! * A *hole* ([`find_holes`]) is a run of at least [`HOLE_MIN`] zero bytes with more
//!   trace after it: trace that was overwritten or never written (a lost buffer, a
//!   zeroed page). Zero bytes are PAD packets, so without this a decoder walks through
//!   the hole and goes on with whatever follows it, usually the middle of a packet.
//!   No packet is that long and no PT implementation pads that much.
//! * A *resume point* ([`find_resume`]) is a packet from which the flow is known
//!   again without anything before it: a PSB (the processor's own sync point), or an
//!   IP packet — a TIP (execution goes on at its target), a TIP.PGE (tracing enabled
//!   there) or a FUP followed by its TIP or TIP.PGD (an asynchronous branch or
//!   disable) — whose whole address the caller accepts ([`Candidate`]). An address of
//!   IPBytes 011 (sign-extended 48 bits) or 110 (64 bits) is whole; a compressed one
//!   takes its upper bits from the last IP, which the damage may have changed, so
//!   the caller must complete it itself: the decode driver tries each address of the
//!   image's code with those low bits on a second decoder, up to and through the next
//!   PSB+, and takes the one whose flow agrees with all the trace up to there.
//!
//! Bytes after damage may not start at a packet boundary, so an IP packet found byte
//! by byte is taken only if its address is code the caller knows and the packets
//! from it decode cleanly up to the next PSB (or the end of the trace, at most
//! [`WALK_MAX`] bytes on).

use super::{find_psb_forward, le, PacketDecoder};
use crate::config::Config;
use crate::error::ErrorCode;
use pt_encoder::packet::{opcode, sext48};
use pt_encoder::{IpCompression, IpPacketKind, Packet};

/// The shortest run of zero bytes that is a hole.
pub const HOLE_MIN: usize = 256;

/// The longest packet (a PSB): a packet that starts before a hole may run this far
/// into it (the zero bytes at its end may be its own).
pub const PACKET_MAX: u64 = 16;

/// How far the packets after an IP packet found byte by byte must decode cleanly
/// when no PSB comes first.
pub const WALK_MAX: usize = 64 << 10;

/// The holes of `trace`: runs of at least [`HOLE_MIN`] zero bytes that more trace
/// follows (a run at the very end is padding, not a hole), as `(start, end)` offsets,
/// in order.
pub fn find_holes(trace: &[u8]) -> Vec<(u64, u64)> {
    // A run of HOLE_MIN zero bytes holds a whole 8-byte word at some multiple of
    // half that: look only there, then measure the run.
    const STRIDE: usize = HOLE_MIN / 2;
    let mut holes = Vec::new();
    let mut pos = 0;
    while pos + 8 <= trace.len() {
        if trace[pos..pos + 8] != [0; 8] {
            pos += STRIDE;
            continue;
        }
        let mut start = pos;
        while start > 0 && trace[start - 1] == 0 {
            start -= 1;
        }
        let mut end = pos + 8;
        while end < trace.len() && trace[end] == 0 {
            end += 1;
        }
        if end - start >= HOLE_MIN && end < trace.len() {
            holes.push((start as u64, end as u64));
        }
        pos = (end / STRIDE + 1) * STRIDE;
    }
    holes
}

/// What a [`ResumePoint`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResumeKind {
    /// A PSB: synchronize there.
    Psb,
    /// A TIP: execution goes on at its target.
    Tip,
    /// A TIP.PGE: tracing is enabled there.
    TipPge,
    /// A FUP, with its TIP or TIP.PGD after it.
    Fup,
}

impl ResumeKind {
    /// The packet's name, as ptdump prints it.
    pub fn name(self) -> &'static str {
        match self {
            ResumeKind::Psb => "psb",
            ResumeKind::Tip => "tip",
            ResumeKind::TipPge => "tip.pge",
            ResumeKind::Fup => "fup",
        }
    }
}

/// A packet from which decoding can soundly go on (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ResumePoint {
    /// The packet's offset.
    pub offset: u64,
    /// What it is.
    pub kind: ResumeKind,
    /// The address an IP packet stands for, its upper bits completed if it is
    /// compressed (0 for a PSB).
    pub ip: u64,
}

/// An IP packet that may be a resume point, as [`find_resume`] shows it to its
/// caller: found at a byte that may or may not start a packet, with the packets
/// after it decoding cleanly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The packet's offset.
    pub offset: u64,
    /// What it is.
    pub kind: ResumeKind,
    /// How its address is compressed (never [`IpCompression::Suppressed`]).
    pub compression: IpCompression,
    /// Its payload: the low bits of the address.
    pub raw: u64,
}

impl Candidate {
    /// The address, if the packet holds all of it (sign-extended 48 bits or 64 bits).
    pub fn whole_ip(&self) -> Option<u64> {
        match self.compression {
            IpCompression::Sext48 => Some(sext48(self.raw)),
            IpCompression::Full => Some(self.raw),
            _ => None,
        }
    }

    /// How many low bits of the address the packet gives.
    pub fn bits(&self) -> u32 {
        match self.compression {
            IpCompression::Update16 => 16,
            IpCompression::Update32 => 32,
            IpCompression::Sext48 | IpCompression::Update48 => 48,
            _ => 64,
        }
    }
}

/// The first resume point at or after `from` in `trace` (see the [module
/// docs](self)): the next PSB, unless an IP packet comes first that `accept` takes
/// (it returns the whole address the packet stands for; accept none for PSBs only).
/// `None` if there is none before the end.
pub fn find_resume(
    trace: &[u8],
    from: u64,
    config: &Config,
    mut accept: impl FnMut(&Candidate) -> Option<u64>,
) -> Option<ResumePoint> {
    let from = usize::try_from(from).ok()?;
    if from >= trace.len() {
        return None;
    }
    let psb = find_psb_forward(trace, from);
    let end = psb.unwrap_or(trace.len());
    for p in from..end {
        let b = trace[p];
        let kind = match b & 0x1f {
            opcode::TIP => ResumeKind::Tip,
            opcode::TIP_PGE => ResumeKind::TipPge,
            opcode::FUP => ResumeKind::Fup,
            _ => continue,
        };
        let (compression, n) = match b >> 5 {
            1 => (IpCompression::Update16, 2),
            2 => (IpCompression::Update32, 4),
            3 => (IpCompression::Sext48, 6),
            4 => (IpCompression::Update48, 6),
            6 => (IpCompression::Full, 8),
            _ => continue,
        };
        let Some(payload) = trace.get(p + 1..p + 1 + n) else {
            break;
        };
        let candidate = Candidate {
            offset: p as u64,
            kind,
            compression,
            raw: le(payload, n),
        };
        if !decodes_cleanly(trace, p, end, kind == ResumeKind::Fup, config) {
            continue;
        }
        if let Some(ip) = accept(&candidate) {
            return Some(ResumePoint {
                offset: p as u64,
                kind,
                ip,
            });
        }
    }
    psb.map(|p| ResumePoint {
        offset: p as u64,
        kind: ResumeKind::Psb,
        ip: 0,
    })
}

/// Where the PSB+ of the PSB at `psb` ends: the offset after its PSBEND (`None` if
/// the trace ends first or a packet in it does not decode).
pub fn psb_end(trace: &[u8], psb: u64, config: &Config) -> Option<u64> {
    let mut pkt = PacketDecoder::new(trace, config);
    pkt.resume_at(psb).ok()?;
    loop {
        let (offset, p) = pkt.next_packet().ok()?;
        if matches!(p, Packet::Psbend) {
            return Some(offset + 2);
        }
    }
}

/// Whether the packets from `start` decode without an error up to `end` exactly (or
/// for [`WALK_MAX`] bytes); with `fup`, the IP packet there must be followed by a TIP
/// or TIP.PGD (only timing and mode packets between).
fn decodes_cleanly(trace: &[u8], start: usize, end: usize, fup: bool, config: &Config) -> bool {
    let mut pkt = PacketDecoder::new(&trace[..end], config);
    if pkt.resume_at(start as u64).is_err() {
        return false;
    }
    let limit = start.saturating_add(WALK_MAX) as u64;
    let mut first = true;
    let mut want_tip = fup;
    loop {
        match pkt.next_packet() {
            Ok((offset, p)) => {
                if first {
                    first = false;
                    continue;
                }
                if want_tip {
                    match p {
                        Packet::Ip(IpPacketKind::Tip | IpPacketKind::TipPgd, _) => want_tip = false,
                        Packet::Pad
                        | Packet::Cyc { .. }
                        | Packet::Mtc { .. }
                        | Packet::Tsc { .. }
                        | Packet::Tma { .. }
                        | Packet::Cbr { .. }
                        | Packet::ModeExec(_)
                        | Packet::ModeTsx(_) => {}
                        _ => return false,
                    }
                }
                if offset >= limit && !want_tip {
                    return true;
                }
            }
            // At `end` exactly (the PSB, or the end of the trace); a packet cut off
            // by the end of the trace is no sign of a wrong start.
            Err(e) if e.code == ErrorCode::Eos => {
                return !want_tip && (e.offset == end as u64 || end == trace.len())
            }
            Err(_) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pt_encoder::packet::{IpCompression, IpPayload};
    use pt_encoder::{encode_to_vec, Tnt};

    fn encode(packets: &[Packet]) -> Vec<u8> {
        let mut v = Vec::new();
        for p in packets {
            encode_to_vec(p, &mut v).unwrap();
        }
        v
    }

    fn ip(kind: IpPacketKind, c: IpCompression, ip: u64) -> Packet {
        Packet::Ip(kind, IpPayload::new(c, ip))
    }

    fn tnt() -> Packet {
        Packet::Tnt8(Tnt::from_results([true, false]).unwrap())
    }

    #[test]
    fn holes_are_long_zero_runs_with_trace_after_them() {
        let mut t = vec![0x55u8; 10_000];
        t[1000..1000 + HOLE_MIN].fill(0);
        t[3001..3001 + HOLE_MIN - 1].fill(0);
        t[5000..9000].fill(0);
        assert_eq!(
            find_holes(&t),
            [(1000, 1000 + HOLE_MIN as u64), (5000, 9000)]
        );
        // Zeros up to the end: padding.
        t[9500..].fill(0);
        assert_eq!(find_holes(&t).len(), 2);
        assert!(find_holes(&[]).is_empty());
        assert!(find_holes(&[0; 1000]).is_empty());
    }

    #[test]
    fn resume_at_a_whole_ip_before_the_next_psb() {
        let c = Config::default();
        let mut t = encode(&[
            tnt(),
            ip(IpPacketKind::Tip, IpCompression::Update16, 0x1000),
            ip(IpPacketKind::Tip, IpCompression::Sext48, 0x401000),
            tnt(),
            tnt(),
        ]);
        let psb = t.len() as u64;
        t.extend(encode(&[Packet::Psb, Packet::Psbend]));
        let at = find_resume(&t, 0, &c, |k| k.whole_ip().filter(|&ip| ip == 0x401000)).unwrap();
        assert_eq!((at.offset, at.kind, at.ip), (4, ResumeKind::Tip, 0x401000));
        // Not code we know: the PSB.
        let at = find_resume(&t, 0, &c, |_| None).unwrap();
        assert_eq!((at.offset, at.kind), (psb, ResumeKind::Psb));
        // From past it.
        assert_eq!(
            find_resume(&t, 5, &c, |k| k.whole_ip()).unwrap().offset,
            psb
        );
        assert_eq!(find_resume(&t, psb + 1, &c, |k| k.whole_ip()), None);
    }

    #[test]
    fn a_fup_needs_its_tip_and_the_packets_after_must_decode() {
        let c = Config::default();
        let fup = ip(IpPacketKind::Fup, IpCompression::Full, 0x2000);
        let t = encode(&[
            fup,
            tnt(),
            ip(IpPacketKind::TipPge, IpCompression::Full, 0x3000),
            tnt(),
        ]);
        // The FUP has no TIP: the TIP.PGE.
        let at = find_resume(&t, 0, &c, |k| k.whole_ip()).unwrap();
        assert_eq!((at.kind, at.ip), (ResumeKind::TipPge, 0x3000));
        let t = encode(&[
            fup,
            Packet::Pad,
            ip(IpPacketKind::Tip, IpCompression::Update16, 0x2010),
        ]);
        let at = find_resume(&t, 0, &c, |k| k.whole_ip()).unwrap();
        assert_eq!((at.offset, at.kind, at.ip), (0, ResumeKind::Fup, 0x2000));
        // An IP packet header followed by bytes that are no packets.
        let mut t = encode(&[ip(IpPacketKind::Tip, IpCompression::Full, 0x2000)]);
        t.extend([0x02, 0xff, 0xff]);
        assert_eq!(find_resume(&t, 0, &c, |k| k.whole_ip()), None);
    }
}
