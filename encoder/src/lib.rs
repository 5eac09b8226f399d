//! Byte-exact Intel PT packet encoder: every packet of the SDM (Vol. 3C, 33.4),
//! written as the processor writes it.
//!
//! # API structure
//!
//! - [`packet`]: the typed model of every packet ([`Packet`]), its opcodes and the IP
//!   compression kinds ([`IpCompression`], [`LastIp`]). The decoder reads packets into
//!   the same types, so the two cannot drift apart.
//! - [`encode`] writes one packet into a caller's buffer; [`encode_to_vec`] appends it.
//! - [`Encoder`] writes a stream and keeps the last-IP state, so that
//!   [`Encoder::ip_packet`] compresses each IP the way hardware does.
//! - [`hash`]: the workspace's one hasher for integer keys (code addresses above all),
//!   here because every layer builds on this crate.
//!
//! A trace is what a newcomer follows through the workspace: this crate writes it (the
//! simulator, `pt-sim`, writes it for real programs), `pt-decoder` reads it back into
//! packets, events and instructions, `pt-perf-data` carries it in a perf.data file.
//!
//! # Example usage
//!
//! A PSB+ (with the execution mode), tracing enabled at a function, two conditional
//! branches (taken, not taken), tracing disabled near where it started:
//!
//! ```
//! use pt_encoder::{encode, Encoder, IpPacketKind, ModeExec, Packet, Tnt};
//!
//! # fn main() -> Result<(), pt_encoder::EncodeError> {
//! let mut buf = [0u8; 64];
//! let mut e = Encoder::new(&mut buf);
//! e.next(&Packet::Psb)?;
//! e.next(&Packet::ModeExec(ModeExec { csl: true, csd: false, iflag: false }))?;
//! e.next(&Packet::Psbend)?;
//! e.ip_packet(IpPacketKind::TipPge, 0x40_1000)?;
//! e.next(&Packet::Tnt8(Tnt::from_results([true, false]).expect("two bits")))?;
//! // Only the low two bytes differ from the last IP: a 3-byte TIP.PGD.
//! assert_eq!(e.ip_packet(IpPacketKind::TipPgd, 0x40_1020)?, 3);
//! let trace = e.written();
//! assert_eq!(&trace[..16], &[0x02, 0x82].repeat(8)[..]); // PSB
//!
//! // One packet alone.
//! let mut one = [0u8; 16];
//! let n = encode(&Packet::Psbend, &mut one)?;
//! assert_eq!(&one[..n], &[0x02, 0x23]);
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

pub mod hash;
pub mod packet;

pub use packet::{
    ExecMode, IpCompression, IpPacketKind, IpPayload, LastIp, ModeExec, ModeTsx, Packet, PtwSize,
    Tnt, WakeReason,
};

use packet::opcode::{self, ext};

/// Why a packet could not be encoded.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The output buffer is too small for the packet.
    #[error("output buffer too small: need {need} bytes, have {have}")]
    BufferTooSmall {
        /// Bytes the packet needs.
        need: usize,
        /// Bytes left in the buffer.
        have: usize,
    },
    /// A field holds a value its encoding cannot represent.
    #[error("{packet}: {field} out of range")]
    FieldOutOfRange {
        /// The packet's name.
        packet: &'static str,
        /// The field.
        field: &'static str,
    },
    /// The packet has no encoding (a decoder-only artifact).
    #[error("{0} has no encoding")]
    NotEncodable(&'static str),
}

fn check(ok: bool, packet: &'static str, field: &'static str) -> Result<(), EncodeError> {
    if ok {
        Ok(())
    } else {
        Err(EncodeError::FieldOutOfRange { packet, field })
    }
}

fn put_le(out: &mut [u8], v: u64, n: usize) {
    for (i, b) in out[..n].iter_mut().enumerate() {
        *b = (v >> (8 * i)) as u8;
    }
}

/// Check that `p` is encodable: every field fits its encoding.
#[inline]
pub fn validate(p: &Packet) -> Result<(), EncodeError> {
    let name = p.name();
    match *p {
        Packet::Tnt8(t) => check(t.len() <= Tnt::MAX_SHORT, name, "result count"),
        Packet::Tnt64(t) => check(t.len() <= Tnt::MAX_LONG, name, "result count"),
        Packet::Ip(_, ip) => check(ip.ip & !ip.compression.payload_mask() == 0, name, "ip"),
        Packet::Pip { cr3, .. } => check(cr3 & 0x1f == 0 && cr3 >> 52 == 0, name, "cr3"),
        Packet::Vmcs { base } => check(base & 0xfff == 0 && base >> 52 == 0, name, "base"),
        Packet::Tsc { tsc } => check(tsc >> 56 == 0, name, "tsc"),
        // Decoders (libipt's too) accept at most eight extension bytes: 61 bits.
        Packet::Cyc { value } => check(value >> 61 == 0, name, "value"),
        Packet::Tma { fc, .. } => check(fc >> 9 == 0, name, "fc"),
        Packet::Ptw { size, payload, .. } => check(
            size == PtwSize::Eight || payload >> 32 == 0,
            name,
            "payload",
        ),
        Packet::Pwre {
            state, sub_state, ..
        } => check(state < 16 && sub_state < 16, name, "c-state"),
        Packet::Pwrx { last, deepest, .. } => check(last < 16 && deepest < 16, name, "c-state"),
        Packet::Cfe { ty, .. } => check(ty < 32, name, "type"),
        Packet::Evd { ty, .. } => check(ty < 32, name, "type"),
        Packet::Bbp { ty, .. } => check(ty < 32, name, "type"),
        Packet::Bip {
            id, payload, sz4, ..
        } => {
            check(id < 32, name, "id")?;
            check(!sz4 || payload >> 32 == 0, name, "payload")
        }
        Packet::Invalid => Err(EncodeError::NotEncodable(name)),
        _ => Ok(()),
    }
}

/// Encode one packet into the start of `out`; returns the number of bytes written.
///
/// The bytes are exactly those the hardware (and libipt's encoder) produce. Fields that do
/// not fit their encoding are an error, never silently truncated.
#[inline]
pub fn encode(p: &Packet, out: &mut [u8]) -> Result<usize, EncodeError> {
    validate(p)?;
    let size = p.size();
    let have = out.len();
    let out = out
        .get_mut(..size)
        .ok_or(EncodeError::BufferTooSmall { need: size, have })?;
    match *p {
        Packet::Pad => out[0] = opcode::PAD,
        Packet::Psb => out.copy_from_slice(&packet::PSB_BYTES),
        Packet::Psbend => ext2(out, ext::PSBEND),
        Packet::Ovf => ext2(out, ext::OVF),
        Packet::Stop => ext2(out, ext::STOP),
        Packet::Tnt8(t) => out[0] = (t.payload() << 1) as u8,
        Packet::Tnt64(t) => {
            ext2(out, ext::TNT64);
            put_le(&mut out[2..], t.payload(), 6);
        }
        Packet::Ip(kind, ip) => {
            out[0] = kind.opcode() | (ip.compression as u8) << 5;
            put_le(&mut out[1..], ip.ip, ip.compression.payload_size());
        }
        Packet::ModeExec(m) => {
            out[0] = opcode::MODE;
            out[1] = (m.csl as u8) | (m.csd as u8) << 1 | (m.iflag as u8) << 2;
        }
        Packet::ModeTsx(m) => {
            out[0] = opcode::MODE;
            out[1] = 1 << 5 | (m.intx as u8) | (m.abrt as u8) << 1;
        }
        Packet::Pip { cr3, nr } => {
            ext2(out, ext::PIP);
            put_le(&mut out[2..], (cr3 >> 5) << 1 | nr as u64, 6);
        }
        Packet::Vmcs { base } => {
            ext2(out, ext::VMCS);
            put_le(&mut out[2..], base >> 12, 5);
        }
        Packet::Tsc { tsc } => {
            out[0] = opcode::TSC;
            put_le(&mut out[1..], tsc, 7);
        }
        Packet::Mtc { ctc } => {
            out[0] = opcode::MTC;
            out[1] = ctc;
        }
        Packet::Tma { ctc, fc } => {
            ext2(out, ext::TMA);
            put_le(&mut out[2..], ctc as u64, 2);
            out[4] = 0;
            put_le(&mut out[5..], fc as u64, 2);
        }
        Packet::Cyc { value } => {
            let more = |rest: u64| if rest != 0 { 1 } else { 0 };
            let mut rest = value >> 5;
            out[0] = opcode::CYC | (more(rest) << 2) | ((value as u8 & 0x1f) << 3);
            let mut i = 1;
            while rest != 0 {
                let bits = rest as u8 & 0x7f;
                rest >>= 7;
                out[i] = bits << 1 | more(rest);
                i += 1;
            }
        }
        Packet::Cbr { ratio } => {
            ext2(out, ext::CBR);
            out[2] = ratio;
            out[3] = 0;
        }
        Packet::Mnt { payload } => {
            ext2(out, ext::EXT2);
            out[2] = ext::MNT;
            put_le(&mut out[3..], payload, 8);
        }
        Packet::Ptw { size, payload, ip } => {
            out[0] = opcode::EXT;
            out[1] = ext::PTW | size.bits() << 5 | (ip as u8) << 7;
            put_le(&mut out[2..], payload, size.bytes());
        }
        Packet::Exstop { ip } => ext2(out, if ip { ext::EXSTOP_IP } else { ext::EXSTOP }),
        Packet::Mwait { hints, ext: e } => {
            ext2(out, ext::MWAIT);
            put_le(&mut out[2..], hints as u64, 4);
            put_le(&mut out[6..], e as u64, 4);
        }
        Packet::Pwre {
            state,
            sub_state,
            hw,
        } => {
            ext2(out, ext::PWRE);
            out[2] = (hw as u8) << 7;
            out[3] = state << 4 | sub_state;
        }
        Packet::Pwrx {
            last,
            deepest,
            wake,
        } => {
            ext2(out, ext::PWRX);
            out[2] = last << 4 | deepest;
            out[3] = wake.interrupt as u8 | (wake.store as u8) << 2 | (wake.autonomous as u8) << 3;
            out[4..7].fill(0);
        }
        Packet::Cfe { ty, vector, ip } => {
            ext2(out, ext::CFE);
            out[2] = ty | (ip as u8) << 7;
            out[3] = vector;
        }
        Packet::Evd { ty, payload } => {
            ext2(out, ext::EVD);
            out[2] = ty;
            put_le(&mut out[3..], payload, 8);
        }
        Packet::Trig {
            trbv,
            ip,
            mult,
            icnt,
        } => {
            out[0] = opcode::TRIG;
            out[1] = (ip as u8) << 7 | (icnt.is_some() as u8) << 6 | (mult as u8) << 5;
            out[2] = trbv;
            if let Some(n) = icnt {
                put_le(&mut out[3..], n as u64, 2);
            }
        }
        Packet::Bbp { sz4, ty } => {
            ext2(out, ext::BBP);
            out[2] = (sz4 as u8) << 7 | ty;
        }
        Packet::Bip { id, payload, sz4 } => {
            out[0] = id << 3 | 0b100;
            put_le(&mut out[1..], payload, if sz4 { 4 } else { 8 });
        }
        Packet::Bep { ip } => ext2(out, if ip { ext::BEP_IP } else { ext::BEP }),
        Packet::Invalid => unreachable!("rejected by validate"),
    }
    Ok(size)
}

fn ext2(out: &mut [u8], code: u8) {
    out[0] = opcode::EXT;
    out[1] = code;
}

/// A stream encoder: writes packets one after another into a buffer and tracks last IP.
#[derive(Debug)]
pub struct Encoder<'a> {
    buf: &'a mut [u8],
    pos: usize,
    last_ip: LastIp,
}

impl<'a> Encoder<'a> {
    /// An encoder writing from the start of `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        Self {
            buf,
            pos: 0,
            last_ip: LastIp::new(),
        }
    }

    /// Bytes written so far (the offset of the next packet).
    pub fn offset(&self) -> usize {
        self.pos
    }

    /// The last-IP state after the packets written so far.
    pub fn last_ip(&self) -> &LastIp {
        &self.last_ip
    }

    /// Write one packet as given; returns its size. PSB resets the last IP, IP packets
    /// update it, as the hardware's state does.
    pub fn next(&mut self, p: &Packet) -> Result<usize, EncodeError> {
        let n = encode(p, &mut self.buf[self.pos..])?;
        self.pos += n;
        match *p {
            Packet::Psb => self.last_ip.reset(),
            Packet::Ip(_, ip) => {
                self.last_ip.update(ip);
            }
            _ => {}
        }
        Ok(n)
    }

    /// Write an IP packet for `ip`, compressed as tightly as the last IP allows.
    pub fn ip_packet(&mut self, kind: IpPacketKind, ip: u64) -> Result<usize, EncodeError> {
        let payload = self.last_ip.compress(ip);
        self.next(&Packet::Ip(kind, payload))
    }

    /// The bytes written so far.
    pub fn written(&self) -> &[u8] {
        &self.buf[..self.pos]
    }
}

/// Append the encoding of `p` to `out`.
pub fn encode_to_vec(p: &Packet, out: &mut Vec<u8>) -> Result<usize, EncodeError> {
    let mut tmp = [0u8; packet::MAX_PACKET_SIZE];
    let n = encode(p, &mut tmp)?;
    out.extend_from_slice(&tmp[..n]);
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(p: Packet) -> Vec<u8> {
        let mut v = Vec::new();
        encode_to_vec(&p, &mut v).unwrap();
        assert_eq!(v.len(), p.size());
        v
    }

    #[test]
    fn reference_encodings() {
        // The reference bytes from the spec (libipt's encoder).
        let tnt = |s: &str| Tnt::from_results(s.chars().map(|c| c == 't'));
        assert_eq!(bytes(Packet::Tnt8(tnt("ttn").unwrap())), [0x1c]);
        assert_eq!(bytes(Packet::Tnt8(tnt("tnnnt").unwrap())), [0x62]);
        assert_eq!(
            bytes(Packet::tip(IpCompression::Sext48, 0xffff_ffff_ffff_1000)),
            [0x6d, 0x00, 0x10, 0xff, 0xff, 0xff, 0xff]
        );
        assert_eq!(
            bytes(Packet::tip(IpCompression::Update16, 0x1002)),
            [0x2d, 0x02, 0x10]
        );
        assert_eq!(bytes(Packet::tip(IpCompression::Suppressed, 0)), [0x0d]);
        assert_eq!(
            bytes(Packet::Pip {
                cr3: 0xafafa0,
                nr: true
            }),
            [0x02, 0x43, 0xfb, 0xfa, 0x0a, 0, 0, 0]
        );
        assert_eq!(
            bytes(Packet::Tma {
                ctc: 0x12,
                fc: 0x34
            }),
            [0x02, 0x73, 0x12, 0, 0, 0x34, 0]
        );
        assert_eq!(bytes(Packet::Cyc { value: 0x57 }), [0xbf, 0x04]);
        assert_eq!(
            bytes(Packet::Ptw {
                size: PtwSize::Four,
                payload: 0x90abcdef,
                ip: true
            }),
            [0x02, 0x92, 0xef, 0xcd, 0xab, 0x90]
        );
        assert_eq!(
            bytes(Packet::Pwrx {
                last: 0,
                deepest: 5,
                wake: WakeReason {
                    interrupt: true,
                    ..Default::default()
                }
            }),
            [0x02, 0xa2, 0x05, 0x01, 0, 0, 0]
        );
        assert_eq!(
            bytes(Packet::Trig {
                trbv: 0xa1,
                ip: true,
                mult: true,
                icnt: Some(23)
            }),
            [0xd9, 0xe0, 0xa1, 0x17, 0x00]
        );
        let psb = bytes(Packet::Psb);
        assert_eq!(psb.len(), 16);
        assert!(psb.chunks(2).all(|c| c == [0x02, 0x82]));
    }

    #[test]
    fn tnt64_reference() {
        // 47 results whose payload is 0xc9324c9324cd (libipt reference bytes).
        let t = Tnt::from_payload(0xc932_4c93_24cd).unwrap();
        assert_eq!(t.len(), 47);
        assert_eq!(
            bytes(Packet::Tnt64(t)),
            [0x02, 0xa3, 0xcd, 0x24, 0x93, 0x4c, 0x32, 0xc9]
        );
    }

    #[test]
    fn rejects_unrepresentable_fields() {
        let t = Tnt::from_results([true; 7]).unwrap();
        assert!(matches!(
            encode(&Packet::Tnt8(t), &mut [0u8; 16]),
            Err(EncodeError::FieldOutOfRange { .. })
        ));
        assert!(encode(&Packet::Tsc { tsc: 1 << 56 }, &mut [0u8; 16]).is_err());
        assert!(encode(&Packet::Invalid, &mut [0u8; 16]).is_err());
        assert_eq!(
            encode(&Packet::Psb, &mut [0u8; 4]),
            Err(EncodeError::BufferTooSmall { need: 16, have: 4 })
        );
    }

    #[test]
    fn stream_encoder_compresses_against_last_ip() {
        let mut buf = [0u8; 64];
        let mut e = Encoder::new(&mut buf);
        e.next(&Packet::Psb).unwrap();
        assert_eq!(e.ip_packet(IpPacketKind::Fup, 0x401000).unwrap(), 5);
        assert_eq!(e.ip_packet(IpPacketKind::Tip, 0x401234).unwrap(), 3);
        assert_eq!(e.ip_packet(IpPacketKind::Tip, 0x7fff_0000_1000).unwrap(), 7);
        e.next(&Packet::Psb).unwrap();
        // After PSB the last IP is zero again.
        assert_eq!(e.last_ip().bits(), 0);
        assert_eq!(e.offset(), 16 + 5 + 3 + 7 + 16);
    }
}
