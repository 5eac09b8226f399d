//! The packet layer: a zero-copy decoder over `&[u8]` yielding `(offset, Packet)`.
//!
//! Dispatch is by a 256-entry table derived from [`pt_encoder::packet::opcode::classify`],
//! the same description the encoder writes from. Nothing is allocated per packet.

use crate::config::{Config, Errata};
use crate::error::{DecodeError, ErrorCode};
use pt_encoder::packet::opcode::{self, ext, FirstByte};
use pt_encoder::packet::{IpCompression, IpPacketKind, IpPayload, PSB_SIZE};
use pt_encoder::{ModeExec, ModeTsx, Packet, PtwSize, Tnt, WakeReason};

mod record;
pub mod recover;
pub use record::{PacketKind, PacketRecord};

const FIRST_BYTE: [FirstByte; 256] = {
    let mut t = [FirstByte::Undefined; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = opcode::classify(i as u8);
        i += 1;
    }
    t
};

/// The PSB payload pattern as a little-endian 64-bit word, at either byte phase.
const PSB_WORDS: [u64; 2] = [0x8202_8202_8202_8202, 0x0282_0282_0282_0282];

/// Read `n` (≤ 8) little-endian bytes. The caller has checked the bounds.
#[inline(always)]
fn le(b: &[u8], n: usize) -> u64 {
    let mut v = 0u64;
    let mut i = 0;
    while i < n {
        v |= (b[i] as u64) << (8 * i);
        i += 1;
    }
    v
}

/// Decode context the packet layer needs beyond the bytes themselves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketContext {
    /// Inside a PEBS block (after BBP, before BEP): `Some(sz4)` where `sz4` says BIPs
    /// carry four bytes. There, a byte with bits 2:0 = 100b is a BIP, not a TNT-8.
    pub pebs: Option<bool>,
}

/// IPBytes → (compression, packet size, payload mask); `None` for the reserved encodings.
const IP_FORMS: [Option<(IpCompression, usize, u64)>; 8] = {
    let mut t = [None; 8];
    let mut i = 0;
    while i < 8 {
        if let Some(c) = IpCompression::from_bits(i as u8) {
            t[i] = Some((c, 1 + c.payload_size(), c.payload_mask()));
        }
        i += 1;
    }
    t
};

/// Whether all eight bytes of `w` are TNT-8 packets: even, and neither `00` (PAD) nor
/// `02` (extended opcode), i.e. some bit of 7:2 set in every byte.
#[inline(always)]
const fn all_tnt8(w: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let upper = w & 0xfcfc_fcfc_fcfc_fcfc;
    // The classic "has a zero byte" test on the bits that must not all be clear.
    let has_zero = upper.wrapping_sub(ONES) & !upper & HIGHS;
    (w & ONES) | has_zero == 0
}

/// For an odd first byte with bit 1 clear, bits 4:2 say which IP packet it is, if any.
const IP_KIND: [Option<IpPacketKind>; 8] = {
    let mut t = [None; 8];
    let mut i = 0;
    while i < 8 {
        if let FirstByte::Tip(k) = opcode::classify((i as u8) << 2 | 1) {
            t[i] = Some(k);
        }
        i += 1;
    }
    t
};

/// A form the decode loop hands packets out in: the typed [`Packet`] or the flat
/// [`PacketRecord`].
trait Decoded: Sized {
    /// A TNT-8 byte.
    fn tnt8(b0: u8) -> Self;
    /// A common packet from a 16-byte window (`word0`/`word1`: its words at offsets 0
    /// and 1) and its size; `None` for the general decoder.
    fn common(win: &[u8], word0: u64, word1: u64, skd007: bool) -> Option<(Self, usize)>;
    /// A packet the general decoder read, `size` bytes on the wire.
    fn general(p: Packet, size: usize) -> Self;
}

impl Decoded for Packet {
    #[inline(always)]
    fn tnt8(b0: u8) -> Self {
        Packet::Tnt8(Tnt::from_tnt8_byte(b0))
    }
    #[inline(always)]
    fn common(win: &[u8], _: u64, _: u64, skd007: bool) -> Option<(Self, usize)> {
        decode_common(win, skd007)
    }
    #[inline(always)]
    fn general(p: Packet, _: usize) -> Self {
        p
    }
}

impl Decoded for PacketRecord {
    #[inline(always)]
    fn tnt8(b0: u8) -> Self {
        PacketRecord::new(PacketKind::Tnt8, 1, u64::from(b0 >> 1), 0)
    }
    #[inline(always)]
    fn common(_: &[u8], word0: u64, word1: u64, skd007: bool) -> Option<(Self, usize)> {
        decode_record_common(word0, word1, skd007).map(|r| (r, r.size()))
    }
    #[inline(always)]
    fn general(p: Packet, size: usize) -> Self {
        PacketRecord::from(p).with_size(size)
    }
}

/// The little-endian words at offsets 0 and 1 of a window of at least 9 bytes (zero
/// otherwise, which no caller passes).
#[inline(always)]
fn window_words(win: &[u8]) -> (u64, u64) {
    let word = |at: usize| {
        win.get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes)
    };
    (word(0), word(1))
}

/// How the record decoder reads a packet that starts with a given byte: its kind and
/// size, and where its payload sits. With `word0`/`word1` the little-endian words at the
/// packet and one byte later, the payload is
/// `(word0 >> shift) & low | (word0 >> 4) & high | word1 & mask`: TNT-8 is bits 7:1 of
/// the first byte, a CYC bits 7:3 of the first and (two-byte CYC) 7:1 of the second, the
/// other fast packets bytes after the first.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct FastEntry {
    mask: u64,
    high: u16,
    low: u8,
    shift: u8,
    kind: PacketKind,
    size: u8,
    aux: u8,
    /// Bit 0: not a fast packet. Bit 1: a two-byte CYC, unless the second byte says
    /// otherwise (it continues, or SKD007 applies).
    flags: u8,
}

const SLOW: u8 = 1;
const CYC2: u8 = 2;

const FAST: [FastEntry; 256] = {
    let slow = FastEntry {
        mask: 0,
        high: 0,
        low: 0,
        shift: 0,
        kind: PacketKind::Invalid,
        size: 0,
        aux: 0,
        flags: SLOW,
    };
    let mut t = [slow; 256];
    let mut i = 0;
    while i < 256 {
        let fast = FastEntry { flags: 0, ..slow };
        t[i] = match FIRST_BYTE[i] {
            FirstByte::Pad => FastEntry {
                kind: PacketKind::Pad,
                size: 1,
                ..fast
            },
            FirstByte::Tnt8 => FastEntry {
                kind: PacketKind::Tnt8,
                size: 1,
                shift: 1,
                low: 0x7f,
                ..fast
            },
            FirstByte::Cyc if i & 4 == 0 => FastEntry {
                kind: PacketKind::Cyc,
                size: 1,
                shift: 3,
                low: 0x1f,
                ..fast
            },
            FirstByte::Cyc => FastEntry {
                kind: PacketKind::Cyc,
                size: 2,
                shift: 3,
                low: 0x1f,
                high: 0x7f << 5,
                flags: CYC2,
                ..fast
            },
            FirstByte::Tsc => FastEntry {
                kind: PacketKind::Tsc,
                size: 8,
                mask: 0x00ff_ffff_ffff_ffff,
                ..fast
            },
            FirstByte::Mtc => FastEntry {
                kind: PacketKind::Mtc,
                size: 2,
                mask: 0xff,
                ..fast
            },
            FirstByte::Tip(k) => match IP_FORMS[i >> 5] {
                Some((c, size, mask)) => FastEntry {
                    kind: PacketKind::of_ip(k),
                    size: size as u8,
                    mask,
                    aux: c as u8,
                    ..fast
                },
                None => slow,
            },
            _ => slow,
        };
        i += 1;
    }
    t
};

/// [`decode_common`] into a [`PacketRecord`], without a branch per packet kind: the table
/// entry of the first byte says it all, but for whether a two-byte CYC really is one.
/// `word0`/`word1` are the little-endian words at the packet and one byte later (both
/// within a 16-byte window). `None`: use the general decoder.
#[inline(always)]
fn decode_record_common(word0: u64, word1: u64, skd007: bool) -> Option<PacketRecord> {
    let b1 = word1 as u8;
    let e = FAST[word0 as u8 as usize];
    // A third CYC byte, or (SKD007) an OVF behind the first one: the general decoder.
    let beyond = e.flags >> 1 & (b1 | u8::from(skd007 && b1 == opcode::EXT));
    if (e.flags | beyond) & 1 != 0 {
        return None;
    }
    let payload =
        (word0 >> e.shift & u64::from(e.low)) | (word0 >> 4 & u64::from(e.high)) | (word1 & e.mask);
    Some(PacketRecord::new(e.kind, e.size, payload, e.aux as u16))
}

/// The packets the event decoder's branch hand-over walks, as
/// [`PacketDecoder::next_hot`] returns them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HotPacket {
    /// PAD.
    Pad,
    /// CYC with its value.
    Cyc(u64),
    /// MTC with its CTC payload.
    Mtc(u8),
    /// TNT-8 or TNT-64.
    Tnt(Tnt),
    /// TIP.
    Tip(IpPayload),
    /// Any other packet.
    Other,
}

impl HotPacket {
    /// `packet` as one of these.
    #[inline(always)]
    pub(crate) fn of(packet: &Packet) -> Self {
        match *packet {
            Packet::Pad => HotPacket::Pad,
            Packet::Cyc { value } => HotPacket::Cyc(value),
            Packet::Mtc { ctc } => HotPacket::Mtc(ctc),
            Packet::Tnt8(t) | Packet::Tnt64(t) => HotPacket::Tnt(t),
            Packet::Ip(IpPacketKind::Tip, p) => HotPacket::Tip(p),
            _ => HotPacket::Other,
        }
    }
}

/// The hot subset of [`decode_packet`]: TNT-8, PAD, the IP packets, short CYC, TSC and MTC,
/// decoded from a window of at least 16 bytes (so no bounds checks). `None` means "use
/// the general decoder": anything else, including every error.
#[inline(always)]
fn decode_common(win: &[u8], skd007: bool) -> Option<(Packet, usize)> {
    let w: &[u8; 16] = win.get(..16)?.try_into().ok()?;
    let b0 = w[0];
    // TNT-8 first: in most traces it is the most frequent packet by far.
    if b0 & 1 == 0 && b0 > opcode::EXT {
        return Some((Packet::Tnt8(Tnt::from_tnt8_byte(b0)), 1));
    }
    // CYC next: with cycle-accurate tracing it precedes most other packets.
    if b0 & 3 == 3 {
        return if b0 & 4 == 0 {
            let value = (b0 >> 3) as u64;
            Some((Packet::Cyc { value }, 1))
        } else if w[1] & 1 == 0 && !(skd007 && w[1] == opcode::EXT) {
            let value = (b0 >> 3) as u64 | ((w[1] >> 1) as u64) << 5;
            Some((Packet::Cyc { value }, 2))
        } else {
            None
        };
    }
    let word1 = u64::from_le_bytes([w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8]]);
    // The four IP packets differ only in data (the kind), so they share one path.
    if let Some(kind) = IP_KIND[(b0 >> 2 & 7) as usize] {
        if b0 & 3 == 1 {
            let (compression, size, mask) = IP_FORMS[(b0 >> 5) as usize]?;
            let ip = IpPayload {
                compression,
                ip: word1 & mask,
            };
            return Some((Packet::Ip(kind, ip), size));
        }
    }
    Some(match FIRST_BYTE[b0 as usize] {
        FirstByte::Pad => (Packet::Pad, 1),
        FirstByte::Tsc => (
            Packet::Tsc {
                tsc: word1 & 0x00ff_ffff_ffff_ffff,
            },
            8,
        ),
        FirstByte::Mtc => (Packet::Mtc { ctc: w[1] }, 2),
        _ => return None,
    })
}

/// Decode one packet at the start of `buf`; returns it and its size.
///
/// Errors are [`ErrorCode::BadOpcode`] (no packet starts like this),
/// [`ErrorCode::BadPacket`] (reserved encoding or bad payload) and [`ErrorCode::Eos`]
/// (the packet is cut off by the end of the buffer).
#[inline]
pub fn decode_packet(
    buf: &[u8],
    errata: &Errata,
    ctx: PacketContext,
) -> Result<(Packet, usize), ErrorCode> {
    let Some(&b0) = buf.first() else {
        return Err(ErrorCode::Eos);
    };
    let need = |n: usize| {
        if buf.len() < n {
            Err(ErrorCode::Eos)
        } else {
            Ok(())
        }
    };
    if let Some(sz4) = ctx.pebs {
        if b0 & 0b111 == 0b100 {
            let n = if sz4 { 4 } else { 8 };
            need(1 + n)?;
            let packet = Packet::Bip {
                id: b0 >> 3,
                payload: le(&buf[1..], n),
                sz4,
            };
            return Ok((packet, 1 + n));
        }
    }
    match FIRST_BYTE[b0 as usize] {
        FirstByte::Tnt8 => {
            // b0 is even and neither 00 nor 02, so the payload holds a stop bit.
            Ok((Packet::Tnt8(Tnt::from_tnt8_byte(b0)), 1))
        }
        FirstByte::Pad => Ok((Packet::Pad, 1)),
        FirstByte::Tip(kind) => {
            let c = IpCompression::from_bits(b0 >> 5).ok_or(ErrorCode::BadPacket)?;
            let n = c.payload_size();
            // Away from the end of the buffer, one unaligned load and a mask replace the
            // variable-length byte loop (and its mispredicted exit branch).
            let ip = match buf.get(1..9) {
                Some(w) => {
                    let w: [u8; 8] = w.try_into().map_err(|_| ErrorCode::Internal)?;
                    u64::from_le_bytes(w) & c.payload_mask()
                }
                None => {
                    need(1 + n)?;
                    le(&buf[1..], n)
                }
            };
            let ip = IpPayload { compression: c, ip };
            Ok((Packet::Ip(kind, ip), 1 + n))
        }
        FirstByte::Cyc => decode_cyc(buf, errata),
        FirstByte::Ext => decode_ext(buf, errata),
        FirstByte::Tsc => {
            need(8)?;
            Ok((
                Packet::Tsc {
                    tsc: le(&buf[1..], 7),
                },
                8,
            ))
        }
        FirstByte::Mtc => {
            need(2)?;
            Ok((Packet::Mtc { ctc: buf[1] }, 2))
        }
        FirstByte::Mode => {
            need(2)?;
            let b1 = buf[1];
            let packet = match b1 >> 5 {
                0 => Packet::ModeExec(ModeExec {
                    csl: b1 & 1 != 0,
                    csd: b1 & 2 != 0,
                    iflag: b1 & 4 != 0,
                }),
                1 => Packet::ModeTsx(ModeTsx {
                    intx: b1 & 1 != 0,
                    abrt: b1 & 2 != 0,
                }),
                _ => return Err(ErrorCode::BadPacket),
            };
            Ok((packet, 2))
        }
        FirstByte::Trig => {
            need(3)?;
            let b1 = buf[1];
            let icntv = b1 & 0x40 != 0;
            let size = if icntv { 5 } else { 3 };
            need(size)?;
            let packet = Packet::Trig {
                trbv: buf[2],
                ip: b1 & 0x80 != 0,
                mult: b1 & 0x20 != 0,
                icnt: icntv.then(|| le(&buf[3..], 2) as u16),
            };
            Ok((packet, size))
        }
        FirstByte::Undefined => Err(ErrorCode::BadOpcode),
    }
}

fn decode_cyc(buf: &[u8], errata: &Errata) -> Result<(Packet, usize), ErrorCode> {
    let b0 = buf[0];
    let mut value = (b0 >> 3) as u64;
    let mut more = b0 & 4 != 0;
    let mut shift = 5u32;
    let mut pos = 1;
    while more {
        let b = *buf.get(pos).ok_or(ErrorCode::Eos)?;
        pos += 1;
        more = b & 1 != 0;
        value |= ((b >> 1) as u64) << shift;
        shift += 7;
        // libipt refuses counts that would not fit 64 bits.
        if shift > 64 {
            return Err(ErrorCode::BadPacket);
        }
    }
    // SKD007: a two-byte CYC whose second byte looks like an ext opcode, followed by the
    // OVF code, is really an OVF that overwrote the CYC's tail.
    if errata.skd007 && pos == 2 && buf[1] == opcode::EXT && buf.get(2) == Some(&ext::OVF) {
        return Err(ErrorCode::Overflow);
    }
    Ok((Packet::Cyc { value }, pos))
}

fn decode_ext(buf: &[u8], errata: &Errata) -> Result<(Packet, usize), ErrorCode> {
    let b1 = *buf.get(1).ok_or(ErrorCode::Eos)?;
    let need = |n: usize| {
        if buf.len() < n {
            Err(ErrorCode::Eos)
        } else {
            Ok(())
        }
    };
    let p = match b1 {
        ext::PSB => {
            need(PSB_SIZE)?;
            if !is_psb(&buf[..PSB_SIZE]) {
                return Err(ErrorCode::BadPacket);
            }
            (Packet::Psb, PSB_SIZE)
        }
        ext::PSBEND => (Packet::Psbend, 2),
        ext::OVF => (Packet::Ovf, 2),
        ext::STOP => (Packet::Stop, 2),
        ext::TNT64 => {
            need(8)?;
            let tnt = Tnt::from_payload(le(&buf[2..], 6)).ok_or(ErrorCode::BadPacket)?;
            (Packet::Tnt64(tnt), 8)
        }
        ext::PIP => {
            need(8)?;
            let p = le(&buf[2..], 6);
            let packet = Packet::Pip {
                cr3: (p >> 1) << 5,
                nr: p & 1 != 0,
            };
            (packet, 8)
        }
        ext::CBR => {
            need(4)?;
            (Packet::Cbr { ratio: buf[2] }, 4)
        }
        ext::TMA => {
            need(7)?;
            let fc = le(&buf[5..], 2) as u16;
            if buf[4] != 0 || fc >> 9 != 0 {
                // SKZ84 corrupts TMA and adds one bogus byte; report it as such.
                if errata.skz84 {
                    need(8)?;
                    return Ok((Packet::Invalid, 8));
                }
                return Err(ErrorCode::BadPacket);
            }
            let packet = Packet::Tma {
                ctc: le(&buf[2..], 2) as u16,
                fc,
            };
            (packet, 7)
        }
        ext::VMCS => {
            need(7)?;
            (
                Packet::Vmcs {
                    base: le(&buf[2..], 5) << 12,
                },
                7,
            )
        }
        ext::EXT2 => {
            let b2 = *buf.get(2).ok_or(ErrorCode::Eos)?;
            if b2 != ext::MNT {
                return Err(ErrorCode::BadOpcode);
            }
            need(11)?;
            (
                Packet::Mnt {
                    payload: le(&buf[3..], 8),
                },
                11,
            )
        }
        ext::EXSTOP => (Packet::Exstop { ip: false }, 2),
        ext::EXSTOP_IP => (Packet::Exstop { ip: true }, 2),
        ext::MWAIT => {
            need(10)?;
            let packet = Packet::Mwait {
                hints: le(&buf[2..], 4) as u32,
                ext: le(&buf[6..], 4) as u32,
            };
            (packet, 10)
        }
        ext::PWRE => {
            need(4)?;
            let packet = Packet::Pwre {
                state: buf[3] >> 4,
                sub_state: buf[3] & 0xf,
                // The SDM puts the HW flag in B2[7]; libipt (and so every trace its pttc
                // wrote) uses B2[3], which the SDM leaves reserved. Either means HW.
                hw: buf[2] & 0x88 != 0,
            };
            (packet, 4)
        }
        ext::PWRX => {
            need(7)?;
            let wr = buf[3];
            let packet = Packet::Pwrx {
                last: buf[2] >> 4,
                deepest: buf[2] & 0xf,
                wake: WakeReason {
                    interrupt: wr & 1 != 0,
                    store: wr & 4 != 0,
                    autonomous: wr & 8 != 0,
                },
            };
            (packet, 7)
        }
        ext::CFE => {
            need(4)?;
            let packet = Packet::Cfe {
                ty: buf[2] & 0x1f,
                vector: buf[3],
                ip: buf[2] & 0x80 != 0,
            };
            (packet, 4)
        }
        ext::EVD => {
            need(11)?;
            let packet = Packet::Evd {
                ty: buf[2] & 0x1f,
                payload: le(&buf[3..], 8),
            };
            (packet, 11)
        }
        ext::BBP => {
            need(3)?;
            let packet = Packet::Bbp {
                sz4: buf[2] & 0x80 != 0,
                ty: buf[2] & 0x1f,
            };
            (packet, 3)
        }
        ext::BEP => (Packet::Bep { ip: false }, 2),
        ext::BEP_IP => (Packet::Bep { ip: true }, 2),
        b if b & 0x1f == ext::PTW => {
            let size = match (b >> 5) & 3 {
                0 => PtwSize::Four,
                1 => PtwSize::Eight,
                _ => return Err(ErrorCode::BadPacket),
            };
            let n = size.bytes();
            need(2 + n)?;
            let packet = Packet::Ptw {
                size,
                payload: le(&buf[2..], n),
                ip: b & 0x80 != 0,
            };
            (packet, 2 + n)
        }
        _ => return Err(ErrorCode::BadOpcode),
    };
    Ok(p)
}

fn is_psb(b: &[u8]) -> bool {
    b.len() >= PSB_SIZE
        && b[..PSB_SIZE]
            .chunks_exact(2)
            .all(|p| p[0] == opcode::EXT && p[1] == ext::PSB)
}

/// A packet decoder over a borrowed trace buffer.
///
/// It starts unsynchronized: call [`sync_forward`](Self::sync_forward) (or
/// [`sync_set`](Self::sync_set)) first. After an error it stays where the failing packet
/// starts; synchronize again to go on.
#[derive(Clone, Debug)]
pub struct PacketDecoder<'a> {
    /// The trace as far as the decoder may read it ([`Self::set_end`]).
    buf: &'a [u8],
    /// The whole trace.
    full: &'a [u8],
    pos: Option<usize>,
    sync: Option<usize>,
    errata: Errata,
    ctx: PacketContext,
    /// Set once the iterator has reported an error, so it does not repeat it forever.
    stalled: bool,
}

impl<'a> PacketDecoder<'a> {
    /// A decoder for `trace`, configured by `config` (errata matter at this layer).
    pub fn new(trace: &'a [u8], config: &Config) -> Self {
        Self {
            buf: trace,
            full: trace,
            pos: None,
            sync: None,
            errata: config.errata,
            ctx: PacketContext::default(),
            stalled: false,
        }
    }

    /// The trace buffer, as far as the decoder may read it ([`Self::set_end`]).
    pub fn buffer(&self) -> &'a [u8] {
        self.buf
    }

    /// Let the decoder see the trace up to `end` only (offsets stay those of the whole
    /// trace): there it meets the end of the trace. For stopping at a hole
    /// ([`recover::find_holes`]); [`u64::MAX`] shows the whole trace again.
    pub fn set_end(&mut self, end: u64) {
        let end = usize::try_from(end)
            .unwrap_or(usize::MAX)
            .min(self.full.len());
        self.buf = &self.full[..end];
    }

    /// Decode from `offset` on, whatever is there, keeping the last PSB as the sync
    /// point (for resuming at a packet other than a PSB after damage:
    /// [`recover::find_resume`]).
    pub fn resume_at(&mut self, offset: u64) -> Result<(), DecodeError> {
        if offset > self.buf.len() as u64 {
            return Err(self.eos());
        }
        self.pos = Some(offset as usize);
        self.ctx = PacketContext::default();
        self.stalled = false;
        Ok(())
    }

    /// Inside a PEBS block (between BBP and BEP), where packets decode differently.
    pub(crate) fn in_pebs(&self) -> bool {
        self.ctx.pebs.is_some()
    }

    /// Offset of the next packet, or `NoSync` before the first synchronization.
    pub fn offset(&self) -> Result<u64, DecodeError> {
        self.pos.map(|p| p as u64).ok_or(DecodeError {
            code: ErrorCode::NoSync,
            offset: 0,
        })
    }

    /// Offset of the PSB the decoder last synchronized at.
    pub fn sync_offset(&self) -> Option<u64> {
        self.sync.map(|s| s as u64)
    }

    fn eos(&self) -> DecodeError {
        DecodeError {
            code: ErrorCode::Eos,
            offset: self.buf.len() as u64,
        }
    }

    /// Move to the next PSB after the current position (a PSB that started up to 15
    /// bytes before it, partly consumed by a bad packet, counts too).
    pub fn sync_forward(&mut self) -> Result<u64, DecodeError> {
        let mut pos = self.pos.unwrap_or(0);
        if Some(pos) == self.sync {
            pos += PSB_SIZE;
        }
        let start = pos.min(self.buf.len()) - pos.min(self.buf.len()).min(PSB_SIZE - 1);
        let found = find_psb_forward(self.buf, start).ok_or_else(|| self.eos())?;
        self.set_sync(found);
        Ok(found as u64)
    }

    /// Move to the last PSB before the current position (the end if unsynchronized).
    pub fn sync_backward(&mut self) -> Result<u64, DecodeError> {
        let pos = self.pos.unwrap_or(self.buf.len());
        let found = find_psb_backward(self.buf, pos).ok_or(DecodeError {
            code: ErrorCode::Eos,
            offset: 0,
        })?;
        self.set_sync(found);
        Ok(found as u64)
    }

    /// Decode from `offset` on, whatever is there (libipt's `pt_pkt_sync_set`).
    pub fn sync_set(&mut self, offset: u64) -> Result<(), DecodeError> {
        if offset > self.buf.len() as u64 {
            return Err(self.eos());
        }
        self.set_sync(offset as usize);
        Ok(())
    }

    fn set_sync(&mut self, at: usize) {
        self.sync = Some(at);
        self.pos = Some(at);
        self.ctx = PacketContext::default();
        self.stalled = false;
    }

    /// Decode the next packet; returns its offset and the packet.
    ///
    /// At the end of the trace this is an `Eos` error at the trace's length.
    #[inline]
    pub fn next_packet(&mut self) -> Result<(u64, Packet), DecodeError> {
        // The common packets take the windowed fast path (see `decode_with`).
        if let (Some(pos), None) = (self.pos, self.ctx.pebs) {
            if let Some(win) = self.buf.get(pos..pos + 16) {
                if let Some((p, n)) = decode_common(win, self.errata.skd007) {
                    self.pos = Some(pos + n);
                    return Ok((pos as u64, p));
                }
            }
        }
        self.next_packet_general()
    }

    /// The next packet if it is one of those the event decoder's branch hand-over
    /// walks (PAD, CYC, MTC, TNT-8, TIP), decoded inline and moved past; else
    /// [`HotPacket::Other`] without moving (take it with
    /// [`next_packet`](Self::next_packet)). Inlined, the result stays in registers:
    /// a [`Packet`] returned from a call is read back from memory, and that waits on
    /// the callee's narrower stores.
    #[inline(always)]
    pub(crate) fn next_hot(&mut self) -> (u64, HotPacket) {
        let (Some(pos), None) = (self.pos, self.ctx.pebs) else {
            return (0, HotPacket::Other);
        };
        let Some(Ok(w)) = self.buf.get(pos..pos + 16).map(<&[u8; 16]>::try_from) else {
            return (0, HotPacket::Other);
        };
        let b0 = w[0];
        let (p, n) = if b0 & 1 == 0 && b0 > opcode::EXT {
            (HotPacket::Tnt(Tnt::from_tnt8_byte(b0)), 1)
        } else if b0 & 3 == 3 {
            if b0 & 4 == 0 {
                (HotPacket::Cyc((b0 >> 3) as u64), 1)
            } else if w[1] & 1 == 0 && !(self.errata.skd007 && w[1] == opcode::EXT) {
                let value = (b0 >> 3) as u64 | ((w[1] >> 1) as u64) << 5;
                (HotPacket::Cyc(value), 2)
            } else {
                return (0, HotPacket::Other);
            }
        } else if b0 == opcode::PAD {
            (HotPacket::Pad, 1)
        } else if b0 == opcode::MTC {
            (HotPacket::Mtc(w[1]), 2)
        } else if b0 & 0x1f == opcode::TIP {
            let Some((compression, size, mask)) = IP_FORMS[(b0 >> 5) as usize] else {
                return (0, HotPacket::Other);
            };
            let word1 = u64::from_le_bytes([w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8]]);
            let ip = IpPayload {
                compression,
                ip: word1 & mask,
            };
            (HotPacket::Tip(ip), size)
        } else {
            return (0, HotPacket::Other);
        };
        self.pos = Some(pos + n);
        (pos as u64, p)
    }

    /// The packet [`next_packet`](Self::next_packet) would return, without moving on
    /// (nor taking in its effects: a PSB does not become the sync point, a BBP does not
    /// open a PEBS block).
    #[inline]
    pub fn peek_packet(&self) -> Result<(u64, Packet), DecodeError> {
        if let (Some(pos), None) = (self.pos, self.ctx.pebs) {
            if let Some((p, _)) = self
                .buf
                .get(pos..pos + 16)
                .and_then(|win| decode_common(win, self.errata.skd007))
            {
                return Ok((pos as u64, p));
            }
        }
        self.decode_general().map(|(offset, p, _)| (offset, p))
    }

    /// Decode packets until the end of the trace, handing each to `f` with its offset.
    ///
    /// This is the fast way to walk a trace: the decoder loops internally, so each packet
    /// goes to `f` straight from the decoding code. Returns `Ok(true)` at the end of the
    /// trace, `Ok(false)` if `f` broke off, and the error (the decoder stays at the failing
    /// packet) otherwise.
    #[inline]
    pub fn decode_with<F>(&mut self, f: F) -> Result<bool, DecodeError>
    where
        F: FnMut(u64, Packet) -> core::ops::ControlFlow<()>,
    {
        self.decode_loop(f)
    }

    /// [`decode_with`](Self::decode_with), handing out each packet as a flat
    /// [`PacketRecord`]. The common packets decode without a branch per kind, so this is
    /// the fastest way through a trace when the consumer looks at few packet kinds (or
    /// stores records).
    #[inline]
    pub fn decode_records_with<F>(&mut self, f: F) -> Result<bool, DecodeError>
    where
        F: FnMut(u64, PacketRecord) -> core::ops::ControlFlow<()>,
    {
        self.decode_loop(f)
    }

    /// The loop behind [`decode_with`](Self::decode_with) and
    /// [`decode_records_with`](Self::decode_records_with), for either form of packet.
    #[inline(always)]
    fn decode_loop<T, F>(&mut self, mut f: F) -> Result<bool, DecodeError>
    where
        T: Decoded,
        F: FnMut(u64, T) -> core::ops::ControlFlow<()>,
    {
        let buf = self.buf;
        loop {
            let Some(mut pos) = self.pos else {
                return Err(DecodeError {
                    code: ErrorCode::NoSync,
                    offset: 0,
                });
            };
            // The common packets, away from the end of the buffer and outside PEBS
            // blocks, decode from a 16-byte window without bounds checks or state
            // updates. Anything else takes the general path below.
            if self.ctx.pebs.is_none() {
                while let Some(win) = buf.get(pos..pos + 16) {
                    let (word0, word1) = window_words(win);
                    // Eight TNT-8 bytes in a row (tight loops) go out without a test per
                    // byte.
                    if all_tnt8(word0) {
                        for i in 0..8 {
                            let b0 = (word0 >> (8 * i)) as u8;
                            if f((pos + i) as u64, T::tnt8(b0)).is_break() {
                                self.pos = Some(pos + i + 1);
                                return Ok(false);
                            }
                        }
                        pos += 8;
                        continue;
                    }
                    let Some((p, n)) = T::common(win, word0, word1, self.errata.skd007) else {
                        break;
                    };
                    let off = pos as u64;
                    pos += n;
                    if f(off, p).is_break() {
                        self.pos = Some(pos);
                        return Ok(false);
                    }
                }
                self.pos = Some(pos);
            }
            if pos >= buf.len() {
                return Ok(true);
            }
            let (off, p) = self.next_packet_general()?;
            if f(off, T::general(p, self.general_size(off))).is_break() {
                return Ok(false);
            }
        }
    }

    /// The wire size of a packet the general decoder just read at `off`: where the
    /// decoder went on, which for an unusual encoding is not the packet's usual size.
    fn general_size(&self, off: u64) -> usize {
        let end = self.pos.map_or(off, |pos| pos as u64);
        end.saturating_sub(off) as usize
    }

    #[inline(never)]
    fn next_packet_general(&mut self) -> Result<(u64, Packet), DecodeError> {
        let (offset, packet, next) = self.decode_general()?;
        self.pos = Some(next);
        match packet {
            Packet::Psb => self.sync = Some(offset as usize),
            Packet::Bbp { sz4, .. } => self.ctx.pebs = Some(sz4),
            Packet::Bep { .. } | Packet::Ovf => self.ctx.pebs = None,
            _ => {}
        }
        Ok((offset, packet))
    }

    /// The packet at the decoder's position through the general decoder: its offset,
    /// the packet and where the next one starts. Changes nothing.
    fn decode_general(&self) -> Result<(u64, Packet, usize), DecodeError> {
        let Some(pos) = self.pos else {
            return Err(DecodeError {
                code: ErrorCode::NoSync,
                offset: 0,
            });
        };
        let rest = self.buf.get(pos..).unwrap_or(&[]);
        match decode_packet(rest, &self.errata, self.ctx) {
            Ok((packet, size)) => Ok((pos as u64, packet, pos + size)),
            // SKD007: the OVF starts one byte into the apparent CYC.
            Err(ErrorCode::Overflow) => Ok((pos as u64 + 1, Packet::Ovf, pos + 3)),
            Err(code) => Err(DecodeError {
                code,
                offset: pos as u64,
            }),
        }
    }
}

impl Iterator for PacketDecoder<'_> {
    type Item = Result<(u64, Packet), DecodeError>;

    /// Internal iteration through [`PacketDecoder::decode_with`] (so `for_each`, `count`
    /// and friends run the fast loop).
    fn fold<B, G>(mut self, init: B, mut g: G) -> B
    where
        G: FnMut(B, Self::Item) -> B,
    {
        if self.stalled {
            return init;
        }
        let mut acc = Some(init);
        let r = self.decode_with(|off, p| {
            acc = Some(g(acc.take().expect("accumulator"), Ok((off, p))));
            core::ops::ControlFlow::Continue(())
        });
        let acc = acc.expect("accumulator");
        match r {
            Ok(_) => acc,
            Err(e) => g(acc, Err(e)),
        }
    }

    /// Packets until the end of the trace; an error is reported once, then the iterator
    /// ends until the decoder is synchronized again.
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        // The common packets return straight from the window decoder, so the item is
        // built once, in place.
        if let (Some(pos), None, false) = (self.pos, self.ctx.pebs, self.stalled) {
            if let Some(win) = self.buf.get(pos..pos + 16) {
                if let Some((p, n)) = decode_common(win, self.errata.skd007) {
                    self.pos = Some(pos + n);
                    return Some(Ok((pos as u64, p)));
                }
            }
        }
        self.next_uncommon()
    }
}

impl PacketDecoder<'_> {
    #[inline(never)]
    fn next_uncommon(&mut self) -> Option<Result<(u64, Packet), DecodeError>> {
        if self.stalled {
            return None;
        }
        match self.next_packet_general() {
            Ok(p) => Some(Ok(p)),
            Err(e) if e.code == ErrorCode::Eos && e.offset == self.buf.len() as u64 => {
                if self.pos == Some(self.buf.len()) {
                    None
                } else {
                    self.stalled = true;
                    Some(Err(DecodeError {
                        code: ErrorCode::Eos,
                        offset: self.pos.unwrap_or(0) as u64,
                    }))
                }
            }
            Err(e) => {
                self.stalled = true;
                Some(Err(e))
            }
        }
    }
}

/// The packets of a [`PacketDecoder`] as flat [`PacketRecord`]s, from
/// [`PacketDecoder::records`]. Ends like the decoder's own iterator: an error is reported
/// once, then nothing until the decoder is synchronized again.
#[derive(Debug)]
pub struct Records<'d, 'a> {
    dec: &'d mut PacketDecoder<'a>,
}

impl<'a> PacketDecoder<'a> {
    /// Iterate over the packets as flat [`PacketRecord`]s (see
    /// [`decode_records_with`](Self::decode_records_with) for the internal-iteration
    /// form, which `fold` and `for_each` use).
    pub fn records(&mut self) -> Records<'_, 'a> {
        Records { dec: self }
    }
}

impl Iterator for Records<'_, '_> {
    type Item = Result<(u64, PacketRecord), DecodeError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let d = &mut *self.dec;
        if let (Some(pos), None, false) = (d.pos, d.ctx.pebs, d.stalled) {
            if let Some(win) = d.buf.get(pos..pos + 16) {
                let (word0, word1) = window_words(win);
                if let Some(r) = decode_record_common(word0, word1, d.errata.skd007) {
                    d.pos = Some(pos + r.size());
                    return Some(Ok((pos as u64, r)));
                }
            }
        }
        let item = d.next_uncommon()?;
        Some(item.map(|(off, p)| (off, PacketRecord::general(p, d.general_size(off)))))
    }

    fn fold<B, G>(self, init: B, mut g: G) -> B
    where
        G: FnMut(B, Self::Item) -> B,
    {
        let d = self.dec;
        if d.stalled {
            return init;
        }
        let mut acc = Some(init);
        let r = d.decode_records_with(|off, r| {
            acc = acc.take().map(|a| g(a, Ok((off, r))));
            core::ops::ControlFlow::Continue(())
        });
        let Some(acc) = acc else {
            unreachable!("the accumulator is put back after every packet")
        };
        match r {
            Ok(_) => acc,
            Err(e) => {
                d.stalled = true;
                g(acc, Err(e))
            }
        }
    }
}

/// Where a PSB that contains the PSB-pattern word at `at` starts: walk to the end of the
/// run of `02 82` pairs and step back one PSB (as libipt does).
fn psb_around(buf: &[u8], at: usize) -> Option<usize> {
    let mut pos = at;
    if buf.get(pos) != Some(&opcode::EXT) {
        pos += 1;
    }
    while pos + 1 < buf.len() && buf[pos] == opcode::EXT && buf[pos + 1] == ext::PSB {
        pos += 2;
    }
    let begin = pos.checked_sub(PSB_SIZE)?;
    is_psb(buf.get(begin..)?).then_some(begin)
}

fn word_at(buf: &[u8], at: usize) -> Option<u64> {
    let b = buf.get(at..at + 8)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

/// The first PSB starting at or after `start`, scanning 8-byte-aligned words.
pub fn find_psb_forward(buf: &[u8], start: usize) -> Option<usize> {
    let mut pos = start.div_ceil(8) * 8;
    while pos + 8 <= buf.len() {
        let cur = pos;
        pos += 8;
        let w = word_at(buf, cur)?;
        if w != PSB_WORDS[0] && w != PSB_WORDS[1] {
            continue;
        }
        match psb_around(buf, cur) {
            Some(p) if p >= start => return Some(p),
            _ => continue,
        }
    }
    None
}

/// The last PSB found scanning 8-byte-aligned words backward from `end`.
pub fn find_psb_backward(buf: &[u8], end: usize) -> Option<usize> {
    let mut pos = end.min(buf.len()) / 8 * 8;
    while pos >= 8 {
        pos -= 8;
        let w = word_at(buf, pos)?;
        if w != PSB_WORDS[0] && w != PSB_WORDS[1] {
            continue;
        }
        if let Some(p) = psb_around(buf, pos) {
            return Some(p);
        }
    }
    None
}

/// Comparing two decoders (see `BlockDecoder::checkpoint`).
impl PacketDecoder<'_> {
    /// Whether both decode the same trace from the same place in the same way.
    pub(crate) fn same_position(&self, other: &Self) -> bool {
        core::ptr::eq(self.buf, other.buf)
            && self.pos == other.pos
            && self.sync == other.sync
            && self.errata == other.errata
            && self.ctx == other.ctx
            && self.stalled == other.stalled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pt_encoder::{encode_to_vec, IpPacketKind};

    fn stream(packets: &[Packet]) -> Vec<u8> {
        let mut v = Vec::new();
        for p in packets {
            encode_to_vec(p, &mut v).unwrap();
        }
        v
    }

    fn all(buf: &[u8]) -> Vec<Result<(u64, Packet), DecodeError>> {
        let mut d = PacketDecoder::new(buf, &Config::default());
        d.sync_set(0).unwrap();
        d.collect()
    }

    #[test]
    fn decodes_a_stream_with_offsets() {
        let ps = [
            Packet::Psb,
            Packet::fup(IpCompression::Sext48, 0x1000),
            Packet::ModeExec(ModeExec {
                csl: true,
                ..Default::default()
            }),
            Packet::Psbend,
            Packet::Tnt8(Tnt::from_results([true, false]).unwrap()),
            Packet::Cyc { value: 0x1234 },
            Packet::Ip(IpPacketKind::Tip, IpPayload::SUPPRESSED),
        ];
        let buf = stream(&ps);
        let got: Vec<_> = all(&buf).into_iter().map(|r| r.unwrap()).collect();
        let mut off = 0;
        for (i, p) in ps.iter().enumerate() {
            assert_eq!(got[i], (off, *p));
            off += p.size() as u64;
        }
        assert_eq!(got.len(), ps.len());
    }

    #[test]
    fn errors_carry_offsets_and_stop_the_iterator() {
        let mut buf = stream(&[Packet::Pad, Packet::Pad]);
        buf.push(opcode::BAD);
        buf.push(0x00);
        let r = all(&buf);
        assert_eq!(r.len(), 3);
        assert_eq!(
            r[2],
            Err(DecodeError {
                code: ErrorCode::BadOpcode,
                offset: 2
            })
        );
        // Truncated TSC at the end.
        let r = all(&[0x00, opcode::TSC, 1, 2]);
        assert_eq!(
            r[1],
            Err(DecodeError {
                code: ErrorCode::Eos,
                offset: 1
            })
        );
        // Reserved IP compression 5.
        let r = all(&[0xad, 0, 0, 0, 0, 0, 0]);
        assert_eq!(r[0].unwrap_err().code, ErrorCode::BadPacket);
        // MODE leaf 2.
        assert_eq!(
            all(&[0x99, 0x40])[0].unwrap_err().code,
            ErrorCode::BadPacket
        );
        // TMA with reserved bits; with SKZ84 it is an 8-byte invalid packet.
        let tma = [0x02, 0x73, 0, 0, 1, 0, 0, 0];
        assert_eq!(all(&tma)[0].unwrap_err().code, ErrorCode::BadPacket);
        let cfg = Config {
            errata: Errata {
                skz84: true,
                ..Default::default()
            },
            ..Default::default()
        };
        let mut d = PacketDecoder::new(&tma, &cfg);
        d.sync_set(0).unwrap();
        assert_eq!(d.next_packet().unwrap(), (0, Packet::Invalid));
    }

    #[test]
    fn unsynchronized_decoder_says_so() {
        let mut d = PacketDecoder::new(&[0u8; 4], &Config::default());
        assert_eq!(d.next_packet().unwrap_err().code, ErrorCode::NoSync);
    }

    #[test]
    fn sync_forward_finds_psbs_at_any_alignment() {
        for lead in 0..20 {
            let mut buf = vec![0xc9u8; lead];
            buf.extend(stream(&[
                Packet::Psb,
                Packet::Psbend,
                Packet::Pad,
                Packet::Psb,
            ]));
            let mut d = PacketDecoder::new(&buf, &Config::default());
            assert_eq!(d.sync_forward().unwrap(), lead as u64, "lead {lead}");
            assert_eq!(d.next_packet().unwrap(), (lead as u64, Packet::Psb));
            // From inside the first PSB's successor, the next sync finds the second PSB.
            assert_eq!(d.sync_forward().unwrap(), lead as u64 + 19);
            assert_eq!(d.sync_forward().unwrap_err().code, ErrorCode::Eos);
            assert_eq!(d.sync_backward().unwrap(), lead as u64);
        }
    }

    #[test]
    fn sync_forward_after_error_resumes_at_next_psb() {
        let mut buf = stream(&[Packet::Psb, Packet::Psbend]);
        buf.extend([opcode::BAD, 1, 2, 3, 4, 5, 6, 7, 8]);
        let second = buf.len() as u64;
        buf.extend(stream(&[Packet::Psb, Packet::Ovf]));
        let mut d = PacketDecoder::new(&buf, &Config::default());
        d.sync_forward().unwrap();
        let r: Vec<_> = d.by_ref().collect();
        assert_eq!(r.last().unwrap().unwrap_err().offset, 18);
        assert_eq!(d.sync_forward().unwrap(), second);
        let r: Vec<_> = d.map(|r| r.unwrap().1).collect();
        assert_eq!(r, vec![Packet::Psb, Packet::Ovf]);
    }

    #[test]
    fn skd007_cyc_hides_an_ovf() {
        let buf = [0x07, 0x02, 0xf3, 0x00];
        let cfg = Config {
            errata: Errata {
                skd007: true,
                ..Default::default()
            },
            ..Default::default()
        };
        let mut d = PacketDecoder::new(&buf, &cfg);
        d.sync_set(0).unwrap();
        assert_eq!(d.next_packet().unwrap(), (1, Packet::Ovf));
        assert_eq!(d.next_packet().unwrap(), (3, Packet::Pad));
        // Without the erratum: a two-byte CYC, then f3 is a one-byte CYC.
        let r: Vec<_> = all(&buf).into_iter().map(|r| r.unwrap().1).collect();
        assert_eq!(
            r[..2],
            [Packet::Cyc { value: 0x20 }, Packet::Cyc { value: 0x1e }]
        );
    }

    #[test]
    fn pebs_context_turns_tnt_into_bip() {
        let buf = [
            0x02, 0x63, 0x81, // BBP sz4 type 1
            0x0c, 1, 2, 3, 4, // BIP id 1
            0x02, 0x33, // BEP
            0x0c, // TNT-8 again
        ];
        let r: Vec<_> = all(&buf).into_iter().map(|r| r.unwrap().1).collect();
        assert_eq!(
            r[1],
            Packet::Bip {
                id: 1,
                payload: 0x04030201,
                sz4: true
            }
        );
        assert!(matches!(r[3], Packet::Tnt8(_)));
    }

    fn records(buf: &[u8], cfg: &Config) -> Vec<(u64, PacketRecord)> {
        let mut d = PacketDecoder::new(buf, cfg);
        d.sync_set(0).unwrap();
        let mut v = Vec::new();
        d.decode_records_with(|off, r| {
            v.push((off, r));
            core::ops::ControlFlow::Continue(())
        })
        .unwrap();
        v
    }

    #[test]
    fn records_follow_skd007_and_the_pebs_context() {
        // Long enough that the windowed fast path runs.
        let mut buf = vec![0x07, 0x02, 0xf3];
        buf.extend([0u8; 20]);
        let cfg = Config {
            errata: Errata {
                skd007: true,
                ..Default::default()
            },
            ..Default::default()
        };
        let r = records(&buf, &cfg);
        assert_eq!(
            (r[0].0, r[0].1.packet(), r[0].1.size()),
            (1, Packet::Ovf, 2)
        );
        assert_eq!((r[1].0, r[1].1.kind()), (3, PacketKind::Pad));
        let r = records(&buf, &Config::default());
        assert_eq!(r[0].1.packet(), Packet::Cyc { value: 0x20 });
        assert_eq!((r[1].0, r[1].1.packet()), (2, Packet::Cyc { value: 0x1e }));

        let mut buf = vec![0x02, 0x63, 0x81, 0x0c, 1, 2, 3, 4, 0x02, 0x33, 0x0c];
        buf.extend([0x0c; 20]);
        let r = records(&buf, &Config::default());
        assert_eq!(r[1].1.kind(), PacketKind::Bip);
        assert_eq!(r[1].1.payload(), 0x04030201);
        assert!(r[3..].iter().all(|(_, r)| r.kind() == PacketKind::Tnt8));
        assert_eq!(r.len(), 3 + 21);
    }

    #[test]
    fn records_stop_where_the_consumer_breaks() {
        let mut buf = vec![0x0c; 40];
        buf.extend([0x19, 1, 2, 3, 4, 5, 6, 7, 0x59, 9]);
        buf.extend([0u8; 16]);
        for stop in [3usize, 39, 40, 41] {
            let mut d = PacketDecoder::new(&buf, &Config::default());
            d.sync_set(0).unwrap();
            let mut n = 0;
            let r = d.decode_records_with(|_, _| {
                n += 1;
                if n == stop {
                    core::ops::ControlFlow::Break(())
                } else {
                    core::ops::ControlFlow::Continue(())
                }
            });
            assert_eq!(r, Ok(false));
            let rest: Vec<_> = d.map(|r| r.unwrap().1).collect();
            assert_eq!(rest.len(), 40 + 2 + 16 - stop, "stop after {stop}");
        }
    }

    #[test]
    fn all_tnt8_matches_the_byte_rule() {
        let is_tnt = |b: u8| b & 1 == 0 && b > 2;
        let mut x = 0x1234_5678_9abc_def1u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Bias towards even bytes so that both answers occur.
            let w = x & 0xfefe_fefe_fefe_fefe | (x >> 3 & 0x0100_0000_0000_0001 & x);
            let want = (0..8).all(|i| is_tnt((w >> (8 * i)) as u8));
            assert_eq!(all_tnt8(w), want, "{w:#018x}");
        }
        assert!(all_tnt8(0x0404_0404_0404_0404));
        assert!(!all_tnt8(0x0404_0404_0402_0404));
        assert!(!all_tnt8(0x0004_0404_0404_0404));
    }

    #[test]
    fn cyc_longer_than_64_bits_is_rejected() {
        let mut buf = vec![0xff];
        buf.extend([0xffu8; 9]);
        buf.push(0x00);
        assert_eq!(all(&buf)[0].unwrap_err().code, ErrorCode::BadPacket);
    }
}
