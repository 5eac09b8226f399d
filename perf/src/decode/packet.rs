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
    let at = dec.offset().ok()? as usize;
    let (off, p) = match dec.next_packet() {
        Ok(next) => next,
        Err(_) => return perf_only(buf.get(at..)?),
    };
    let start = off as usize;
    let end = dec.offset().ok()? as usize;
    let raw = buf.get(start..end)?;
    let pkt = convert(&p, raw)?;
    Some((pkt, end - start))
}

/// The packet at the start of `raw` where pt-decoder's packet decoder (which
/// keeps libipt's rules) refuses it but perf's reads it (intel-pt-pkt-decoder.c
/// checks fewer bits): a TMA with reserved bits set (perf reads the CTC and the
/// fast counter's nine bits), a CYC of ten bytes (its count wider than 64 bits:
/// perf keeps the low 64), and a long TNT without a stop bit (no results, which
/// perf's walk skips). `None`: perf calls it bad too, or it does not end in
/// `raw`.
fn perf_only(raw: &[u8]) -> Option<(Pkt, usize)> {
    let pkt = |kind, count, payload, n| {
        Some((
            Pkt {
                kind,
                count,
                payload,
            },
            n,
        ))
    };
    match *raw {
        [0x02, 0x73, ..] => {
            let r = raw.get(..7)?;
            let fc = u32::from(r[5]) | (u32::from(r[6]) & 1) << 8;
            pkt(Kind::Tma, fc, le(&r[2..4]), 7)
        }
        [0x02, 0xa3, ..] => {
            let mut payload = le(raw.get(..8)?);
            let mut count = 47;
            while count != 0 && payload & 1 << 63 == 0 {
                payload <<= 1;
                count -= 1;
            }
            pkt(Kind::Tnt, count, payload << 1, 8)
        }
        [b0, ..] if b0 & 3 == 3 => {
            // CYC: seven more bits a byte while bit 0 says more, ten bytes at most.
            let mut payload = u64::from(b0 >> 3);
            let mut more = b0 & 4 != 0;
            let mut n = 1;
            let mut shift = 5;
            while more {
                if n > 9 {
                    return None;
                }
                let b = *raw.get(n)?;
                n += 1;
                more = b & 1 != 0;
                payload |= u64::from(b >> 1) << shift;
                shift += 7;
            }
            pkt(Kind::Cyc, 0, payload, n)
        }
        _ => None,
    }
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
        // InTX and TXAbort both set: perf calls the packet bad.
        Packet::ModeTsx(m) if m.intx && m.abrt => None,
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
        // perf's type is six bits of the byte (the SDM's five and one reserved).
        Packet::Evd { payload, .. } => pkt(Kind::Evd, u32::from(*raw.get(2)?) & 0x3f, payload),
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

    /// The packet of `bytes` (and the bytes it takes), as the decoder reads it.
    fn raw(bytes: &[u8]) -> Option<(Pkt, usize)> {
        let mut d = decoder(bytes);
        decode(&mut d, bytes, 0)
    }

    /// Where perf's packet decoder and libipt's rules part ways, perf's
    /// reading (intel-pt-pkt-decoder.c): it checks fewer reserved bits, takes
    /// CYCs of up to ten bytes, a long TNT without a stop bit as a TNT of no
    /// results, and refuses a MODE.TSX with both InTX and TXAbort set.
    #[test]
    fn packets_as_perf_reads_them() {
        let tma = |count, payload| Pkt {
            kind: Kind::Tma,
            count,
            payload,
        };
        // TMA: reserved byte 4 and bits 7:1 of byte 6 set.
        assert_eq!(
            raw(&[0x02, 0x73, 0x01, 0x02, 0xff, 0x03, 0xff]),
            Some((tma(0x103, 0x0201), 7))
        );
        assert_eq!(
            raw(&[0x02, 0x73, 0x01, 0x02, 0x00, 0x03, 0x01]),
            Some((tma(0x103, 0x0201), 7))
        );
        // A TMA cut short is bad.
        assert_eq!(raw(&[0x02, 0x73, 0x01, 0x02, 0xff, 0x03]), None);
        // CYC of ten bytes: nine of seven bits after five; bits past 63 dropped.
        let mut cyc = vec![0x0f];
        cyc.extend([0x03; 8]);
        cyc.push(0xfe);
        let low: u64 = 1 + (0..8).map(|k| 1u64 << (5 + 7 * k)).sum::<u64>();
        let cyc_pkt = |payload| Pkt {
            kind: Kind::Cyc,
            count: 0,
            payload,
        };
        assert_eq!(raw(&cyc), Some((cyc_pkt(low | 0x7f << 61), 10)));
        // Eleven bytes: bad to perf too.
        let mut long = cyc.clone();
        long[9] = 0x03;
        long.push(0x00);
        assert_eq!(raw(&long), None);
        // Short CYCs as before.
        assert_eq!(raw(&[0x07, 0x02]), Some((cyc_pkt(32), 2)));
        // A long TNT whose payload has no stop bit: no results.
        let (t, n) = raw(&[0x02, 0xa3, 0, 0, 0, 0, 0, 0]).unwrap();
        assert_eq!((t.kind, t.count, n), (Kind::Tnt, 0, 8));
        // MODE.TSX: InTX and TXAbort both set is bad; each alone is not.
        assert_eq!(raw(&[0x99, 0x23]), None);
        assert_eq!(raw(&[0x99, 0x21]).map(|(p, _)| p.payload), Some(1));
        assert_eq!(raw(&[0x99, 0x22]).map(|(p, _)| p.payload), Some(2));
        // EVD's type: six bits.
        let evd = [0x02, 0x53, 0xff, 8, 7, 6, 5, 4, 3, 2, 1];
        let (e, n) = raw(&evd).unwrap();
        assert_eq!(
            (e.kind, e.count, e.payload, n),
            (Kind::Evd, 0x3f, 0x0102_0304_0506_0708, 11)
        );
    }

    /// Packets whose fields perf reads whole, reserved bits included.
    #[test]
    fn payloads_as_perf_reads_them() {
        let p = |bytes: &[u8]| raw(bytes).map(|(p, n)| (p.kind, p.count, p.payload, n));
        // CBR: two bytes (the ratio is the low one).
        assert_eq!(
            p(&[0x02, 0x03, 0x12, 0xff]),
            Some((Kind::Cbr, 0, 0xff12, 4))
        );
        // PIP: six bytes, NR in bit 0.
        assert_eq!(
            p(&[0x02, 0x43, 0x01, 0x20, 0x30, 0x40, 0x50, 0x60]),
            Some((Kind::Pip, 0, 0x6050_4030_2001, 8))
        );
        // VMCS: five bytes, count 5.
        assert_eq!(
            p(&[0x02, 0xc8, 1, 2, 3, 4, 5]),
            Some((Kind::Vmcs, 5, 0x05_0403_0201, 7))
        );
        // TSC: seven bytes.
        assert_eq!(
            p(&[0x19, 1, 2, 3, 4, 5, 6, 7]),
            Some((Kind::Tsc, 0, 0x07_0605_0403_0201, 8))
        );
        // MTC: one byte.
        assert_eq!(p(&[0x59, 0xab]), Some((Kind::Mtc, 0, 0xab, 2)));
        // MODE.Exec: the byte in count (IF in bit 2), the bitness in payload.
        assert_eq!(p(&[0x99, 0x06]), Some((Kind::ModeExec, 6, 32, 2)));
        assert_eq!(p(&[0x99, 0x00]), Some((Kind::ModeExec, 0, 16, 2)));
        // PWRE, PWRX, MWAIT: two, five and eight bytes.
        assert_eq!(
            p(&[0x02, 0x22, 0x80, 0x21]),
            Some((Kind::Pwre, 0, 0x2180, 4))
        );
        assert_eq!(
            p(&[0x02, 0xa2, 0x25, 0x01, 0, 0, 0]),
            Some((Kind::Pwrx, 0, 0x0125, 7))
        );
        assert_eq!(
            p(&[0x02, 0xc2, 1, 0, 0, 0, 2, 0, 0, 0]),
            Some((Kind::Mwait, 0, 0x2_0000_0001, 10))
        );
        // CFE: type in count, vector in payload; the IP bit picks the kind.
        assert_eq!(
            p(&[0x02, 0x13, 0x81, 0x20]),
            Some((Kind::CfeIp, 1, 0x20, 4))
        );
        assert_eq!(p(&[0x02, 0x13, 0x01, 0x20]), Some((Kind::Cfe, 1, 0x20, 4)));
        // PTWRITE: 4 or 8 bytes (count 0 or 1); sizes 2 and 3 are bad.
        assert_eq!(
            p(&[0x02, 0x32, 1, 2, 3, 4, 5, 6, 7, 8]),
            Some((Kind::Ptwrite, 1, 0x0807_0605_0403_0201, 10))
        );
        assert_eq!(
            p(&[0x02, 0x92, 1, 2, 3, 4]),
            Some((Kind::PtwriteIp, 0, 0x0403_0201, 6))
        );
        assert_eq!(p(&[0x02, 0x52, 1, 2, 3, 4, 5, 6, 7, 8]), None);
        // IPBytes 5 and 7 are reserved: bad.
        assert_eq!(p(&[0xad, 1, 2, 3, 4, 5, 6, 7, 8]), None);
        assert_eq!(p(&[0xed, 1, 2, 3, 4, 5, 6, 7, 8]), None);
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
