//! Packets as perf's decoder sees them: a kind, a count and a payload (perf's
//! `struct intel_pt_pkt`), taken from pt-decoder's packet decoder.
//!
//! perf's state machine keys on these three fields (a TNT's results left-aligned
//! at bit 63 with their number in `count`, an IP packet's IPBytes in `count`, a
//! TMA's fast counter in `count`, …), so the typed packets are turned into them
//! here, once. A packet that does not decode is `Bad` and one byte long, as perf
//! steps over it.

use pt_decoder::packet::PacketDecoder;
use pt_decoder::Config;
use pt_encoder::{IpPacketKind, Packet, PtwSize};

/// perf's packet types (`enum intel_pt_pkt_type`).
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Bad,
    Pad,
    Tnt,
    TipPgd,
    TipPge,
    Tsc,
    TraceStop,
    ModeExec,
    ModeTsx,
    Mtc,
    Tma,
    Cbr,
    Cyc,
    Vmcs,
    Pip,
    Ovf,
    Psb,
    Psbend,
    Tip,
    Fup,
    Mnt,
    Ptwrite,
    PtwriteIp,
    Exstop,
    ExstopIp,
    Mwait,
    Pwre,
    Pwrx,
    Bbp,
    Bip,
    Bep,
    BepIp,
    Cfe,
    CfeIp,
    Evd,
}

/// One packet: what perf's decoder looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pkt {
    /// The packet type.
    pub kind: Kind,
    /// IPBytes of an IP packet, results of a TNT, fast counter of a TMA, MODE.Exec's
    /// byte (IF in bit 2), PTWRITE's size code, a CFE's type, an EVD's type, a BIP's id,
    /// a BBP's size bit.
    pub count: u32,
    /// The packet's value (see perf's packet decoder for each kind).
    pub payload: u64,
}

impl Pkt {
    /// perf's `INTEL_PT_BAD` packet.
    pub const BAD: Pkt = Pkt {
        kind: Kind::Bad,
        count: 0,
        payload: 0,
    };
}

/// Little-endian value of up to 8 bytes.
fn le(bytes: &[u8]) -> u64 {
    let mut v = 0u64;
    for (i, b) in bytes.iter().take(8).enumerate() {
        v |= u64::from(*b) << (8 * i);
    }
    v
}

/// The packet at the start of `buf` in perf's terms, with its size; `None` if it does
/// not decode (or does not end in `buf`).
pub fn decode(dec: &mut PacketDecoder<'_>, buf: &[u8], at: usize) -> Option<(Pkt, usize)> {
    if dec.sync_set(at as u64).is_err() {
        return None;
    }
    next(dec, buf)
}

/// A short TNT packet (one byte) in perf's terms, or `None` if `b` is not one:
/// the packet walk's fast path, for the most common packet.
#[inline]
pub fn tnt8(b: u8) -> Option<Pkt> {
    // Bit 0 clear; the stop bit (the highest set) above bit 1: 0x00 is a PAD,
    // 0x02 the extended opcodes.
    if b & 1 != 0 || b < 4 {
        return None;
    }
    let n = 6 - b.leading_zeros();
    let bits = (u64::from(b) >> 1) & ((1 << n) - 1);
    Some(Pkt {
        kind: Kind::Tnt,
        count: n,
        payload: bits << (64 - n),
    })
}

/// A TIP packet at `at` in `buf` in perf's terms, with its size, or `None` if
/// there is none (or it does not end in `buf`): the packet walk's fast path
/// for indirect branches.
#[inline]
pub fn tip_at(buf: &[u8], at: usize) -> Option<(Pkt, usize)> {
    let &h = buf.get(at)?;
    if h & 0x1f != 0x0d {
        return None;
    }
    let ipbytes = u32::from(h >> 5);
    // Payload bytes by IPBytes (5 and 7 are reserved).
    let n = [0usize, 2, 4, 6, 6, usize::MAX, 8, usize::MAX][ipbytes as usize];
    let raw = buf.get(at + 1..)?.get(..n)?;
    Some((
        Pkt {
            kind: Kind::Tip,
            count: ipbytes,
            payload: le(raw),
        },
        1 + n,
    ))
}

/// The next packet of `dec` (positioned in `buf`) in perf's terms, with its size.
#[inline]
pub fn next(dec: &mut PacketDecoder<'_>, buf: &[u8]) -> Option<(Pkt, usize)> {
    let (off, p) = dec.next_packet().ok()?;
    let start = off as usize;
    let end = dec.offset().ok()? as usize;
    let raw = buf.get(start..end)?;
    let pkt = convert(&p, raw)?;
    Some((pkt, end - start))
}

/// `p`, whose bytes are `raw`, in perf's terms.
fn convert(p: &Packet, raw: &[u8]) -> Option<Pkt> {
    let pkt = |kind, count, payload| {
        Some(Pkt {
            kind,
            count,
            payload,
        })
    };
    match *p {
        Packet::Pad => pkt(Kind::Pad, 0, 0),
        Packet::Psb => pkt(Kind::Psb, 0, 0),
        Packet::Psbend => pkt(Kind::Psbend, 0, 0),
        Packet::Ovf => pkt(Kind::Ovf, 0, 0),
        Packet::Stop => pkt(Kind::TraceStop, 0, 0),
        Packet::Tnt8(t) | Packet::Tnt64(t) => {
            let n = t.len();
            // Oldest result at bit 63.
            let payload = t.bits() << (64 - n);
            pkt(Kind::Tnt, n, payload)
        }
        Packet::Ip(kind, ip) => {
            let k = match kind {
                IpPacketKind::Tip => Kind::Tip,
                IpPacketKind::TipPge => Kind::TipPge,
                IpPacketKind::TipPgd => Kind::TipPgd,
                IpPacketKind::Fup => Kind::Fup,
            };
            pkt(k, ip.compression as u32, ip.ip)
        }
        Packet::ModeExec(m) => {
            let byte = u32::from(*raw.get(1)?);
            let bits = match (m.csl, m.csd) {
                (false, false) => 16,
                (true, false) => 64,
                (false, true) => 32,
                // CS.L and CS.D both set: perf calls the packet bad.
                (true, true) => return None,
            };
            pkt(Kind::ModeExec, byte, bits)
        }
        Packet::ModeTsx(m) => pkt(Kind::ModeTsx, 0, u64::from(m.intx) | u64::from(m.abrt) << 1),
        Packet::Pip { .. } => pkt(Kind::Pip, 0, le(raw.get(2..8)?)),
        Packet::Vmcs { .. } => pkt(Kind::Vmcs, 5, le(raw.get(2..7)?)),
        Packet::Tsc { tsc } => pkt(Kind::Tsc, 0, tsc),
        Packet::Mtc { ctc } => pkt(Kind::Mtc, 0, u64::from(ctc)),
        Packet::Tma { .. } => {
            let ctc = le(raw.get(2..4)?);
            let fc = u32::from(*raw.get(5)?) | (u32::from(*raw.get(6)?) & 1) << 8;
            pkt(Kind::Tma, fc, ctc)
        }
        Packet::Cyc { value } => pkt(Kind::Cyc, 0, value),
        Packet::Cbr { .. } => pkt(Kind::Cbr, 0, le(raw.get(2..4)?)),
        Packet::Mnt { payload } => pkt(Kind::Mnt, 0, payload),
        Packet::Ptw { size, payload, ip } => {
            let count = match size {
                PtwSize::Four => 0,
                PtwSize::Eight => 1,
                #[allow(unreachable_patterns)]
                _ => return None,
            };
            let kind = if ip { Kind::PtwriteIp } else { Kind::Ptwrite };
            pkt(kind, count, payload)
        }
        Packet::Exstop { ip } => pkt(if ip { Kind::ExstopIp } else { Kind::Exstop }, 0, 0),
        Packet::Mwait { .. } => pkt(Kind::Mwait, 0, le(raw.get(2..10)?)),
        Packet::Pwre { .. } => pkt(Kind::Pwre, 0, le(raw.get(2..4)?)),
        Packet::Pwrx { .. } => pkt(Kind::Pwrx, 0, le(raw.get(2..7)?)),
        Packet::Cfe { ty, vector, ip } => pkt(
            if ip { Kind::CfeIp } else { Kind::Cfe },
            u32::from(ty),
            u64::from(vector),
        ),
        Packet::Evd { ty, payload } => pkt(Kind::Evd, u32::from(ty) & 0x3f, payload),
        Packet::Bbp { sz4, ty } => pkt(Kind::Bbp, u32::from(sz4), u64::from(ty)),
        Packet::Bip { id, payload, .. } => pkt(Kind::Bip, u32::from(id), payload),
        Packet::Bep { ip } => pkt(if ip { Kind::BepIp } else { Kind::Bep }, 0, 0),
        // TRIG, SKZ84's corrupted TMA and packets perf 6.1 does not know.
        _ => None,
    }
}

/// A packet decoder for `buf`, with no errata that change packet boundaries (perf
/// has none).
pub fn decoder(buf: &[u8]) -> PacketDecoder<'_> {
    PacketDecoder::new(buf, &Config::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pt_encoder::{encode_to_vec, IpCompression, IpPayload, ModeExec, Tnt};

    fn one(p: Packet) -> (Pkt, usize) {
        let mut buf = Vec::new();
        encode_to_vec(&p, &mut buf).unwrap();
        let mut d = decoder(&buf);
        decode(&mut d, &buf, 0).unwrap()
    }

    #[test]
    fn tnt_results_are_left_aligned() {
        let (p, n) = one(Packet::Tnt8(
            Tnt::from_results([true, false, true]).unwrap(),
        ));
        assert_eq!((p.kind, p.count, n), (Kind::Tnt, 3, 1));
        assert_eq!(p.payload, 0b101 << 61);
    }

    #[test]
    fn ip_packets_keep_their_ipbytes() {
        let (p, n) = one(Packet::Ip(
            IpPacketKind::Tip,
            IpPayload::new(IpCompression::Update32, 0x1234_5678),
        ));
        assert_eq!(
            (p.kind, p.count, p.payload, n),
            (Kind::Tip, 2, 0x1234_5678, 5)
        );
    }

    #[test]
    fn mode_exec_bits() {
        let (p, _) = one(Packet::ModeExec(ModeExec {
            csl: true,
            csd: false,
            iflag: true,
        }));
        assert_eq!((p.kind, p.payload, p.count & 4), (Kind::ModeExec, 64, 4));
    }

    #[test]
    fn bad_bytes_do_not_decode() {
        let buf = [0x59u8]; // MTC cut short
        let mut d = decoder(&buf);
        assert!(decode(&mut d, &buf, 0).is_none());
    }
}

#[cfg(test)]
mod tnt8_tests {
    use super::*;

    /// The fast path reads every byte the way the packet decoder does.
    #[test]
    fn tnt8_is_the_decoders() {
        let mut seen = 0;
        for b in 0..=255u8 {
            let buf = [b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
            let mut pd = decoder(&buf);
            let full =
                decode(&mut pd, &buf, 0).filter(|(p, _)| p.kind == Kind::Tnt && p.count != 0);
            let fast = tnt8(b);
            match (full, fast) {
                (Some((p, 1)), Some(f)) => {
                    assert_eq!(p, f, "{b:#x}");
                    seen += 1;
                }
                (None, None) => {}
                (Some((p, n)), None) => assert!(n != 1, "{b:#x}: {p:?} missed"),
                (full, fast) => panic!("{b:#x}: {full:?} vs {fast:?}"),
            }
        }
        // Every even byte from 4 up is a short TNT.
        assert_eq!(seen, 126);
    }

    /// TIPs read straight from their bytes as the packet decoder reads them,
    /// for every header byte, with payload bytes of every kind, whole or cut.
    #[test]
    fn tip_at_is_the_decoders() {
        let mut seen = 0;
        for h in 0..=255u8 {
            for fill in [0x00u8, 0x7f, 0x80, 0xff] {
                for len in 1..=9 {
                    let mut buf = vec![h];
                    buf.extend((1..len).map(|i| fill ^ (i as u8).wrapping_mul(37)));
                    let mut pd = decoder(&buf);
                    let full = decode(&mut pd, &buf, 0).filter(|(p, _)| p.kind == Kind::Tip);
                    let fast = tip_at(&buf, 0);
                    assert_eq!(full, fast, "{buf:x?}");
                    seen += usize::from(fast.is_some());
                }
            }
        }
        assert!(seen > 100, "{seen}");
    }
}
