//! [`PacketRecord`]: a packet as a flat 16-byte record (kind, size, payload), the shape of
//! libipt's `struct pt_packet`.
//!
//! The typed [`Packet`] enum is what consumers match on. The record holds the same
//! information, losslessly, in a fixed layout: the common packets decode into it without
//! a branch per kind (a table lookup gives kind, size and where the payload sits), which
//! is what makes [`PacketDecoder::decode_records_with`](super::PacketDecoder) the fastest
//! way through a trace. [`PacketRecord::packet`] gives the typed packet back.

use pt_encoder::packet::{IpCompression, IpPacketKind, IpPayload};
use pt_encoder::{ModeExec, ModeTsx, Packet, PtwSize, Tnt, WakeReason};

/// Which packet a [`PacketRecord`] holds (one per [`Packet`] variant, the four IP packets
/// apart).
#[allow(missing_docs)] // The names are the SDM's packet names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum PacketKind {
    Pad,
    Psb,
    Psbend,
    Ovf,
    Stop,
    Tnt8,
    Tnt64,
    Tip,
    TipPge,
    TipPgd,
    Fup,
    ModeExec,
    ModeTsx,
    Pip,
    Vmcs,
    Tsc,
    Mtc,
    Tma,
    Cyc,
    Cbr,
    Mnt,
    Ptw,
    Exstop,
    Mwait,
    Pwre,
    Pwrx,
    Cfe,
    Evd,
    Trig,
    Bbp,
    Bip,
    Bep,
    /// A packet corrupted by erratum SKZ84 (see [`Packet::Invalid`]).
    Invalid,
}

impl PacketKind {
    /// The IP packet kind, for TIP, TIP.PGE, TIP.PGD and FUP.
    pub const fn ip_kind(self) -> Option<IpPacketKind> {
        match self {
            Self::Tip => Some(IpPacketKind::Tip),
            Self::TipPge => Some(IpPacketKind::TipPge),
            Self::TipPgd => Some(IpPacketKind::TipPgd),
            Self::Fup => Some(IpPacketKind::Fup),
            _ => None,
        }
    }

    /// The record kind of an IP packet.
    pub const fn of_ip(kind: IpPacketKind) -> Self {
        match kind {
            IpPacketKind::Tip => Self::Tip,
            IpPacketKind::TipPge => Self::TipPge,
            IpPacketKind::TipPgd => Self::TipPgd,
            IpPacketKind::Fup => Self::Fup,
        }
    }
}

/// One decoded packet as a flat record: its kind, its size on the wire, a 64-bit payload
/// and two small fields whose meaning depends on the kind.
///
/// Built by the decoder or from a [`Packet`]; [`packet`](Self::packet) turns it back into
/// the typed form. The layout (16 bytes, no padding to speak of) makes records cheap to
/// pass, store and index in bulk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PacketRecord {
    payload: u64,
    kind: PacketKind,
    size: u8,
    aux: u16,
    extra: u32,
}

const _: () = assert!(core::mem::size_of::<PacketRecord>() == 16);

impl PacketRecord {
    #[inline(always)]
    pub(crate) const fn new(kind: PacketKind, size: u8, payload: u64, aux: u16) -> Self {
        Self {
            payload,
            kind,
            size,
            aux,
            extra: 0,
        }
    }

    /// The same record with its size on the wire set to `size` (a decoder may meet
    /// encodings longer than the shortest, which [`From<Packet>`] assumes).
    #[inline]
    pub(crate) fn with_size(mut self, size: usize) -> Self {
        self.size = size.min(usize::from(u8::MAX)) as u8;
        self
    }

    /// The packet kind.
    #[inline]
    pub const fn kind(&self) -> PacketKind {
        self.kind
    }

    /// Size on the wire, in bytes (for a record made [`From<Packet>`], the size of the
    /// packet's shortest encoding, which is what the encoder writes).
    #[inline]
    pub const fn size(&self) -> usize {
        self.size as usize
    }

    /// The main payload: the TNT payload with its stop bit, the IP bits of an IP packet,
    /// the value of TSC, CYC, MTC, CBR, VMCS, MNT, PTW, EVD and BIP, CR3 of a PIP, the CTC
    /// of a TMA, EAX | ECX << 32 of an MWAIT; 0 otherwise.
    #[inline]
    pub const fn payload(&self) -> u64 {
        self.payload
    }

    /// The payload of an IP packet.
    #[inline]
    pub fn ip_payload(&self) -> Option<IpPayload> {
        self.kind.ip_kind()?;
        Some(IpPayload {
            compression: IpCompression::from_bits(self.aux as u8)?,
            ip: self.payload,
        })
    }

    /// The results of a TNT-8 or TNT-64.
    #[inline]
    pub fn tnt(&self) -> Option<Tnt> {
        match self.kind {
            PacketKind::Tnt8 | PacketKind::Tnt64 => Tnt::from_payload(self.payload),
            _ => None,
        }
    }

    fn flag(&self, bit: u32) -> bool {
        self.aux >> bit & 1 != 0
    }

    /// The typed packet. A record that no decoder or [`From<Packet>`] could have built
    /// (impossible through this API) comes back as [`Packet::Invalid`].
    pub fn packet(&self) -> Packet {
        let (p, aux, lo, hi) = (
            self.payload,
            self.aux,
            self.aux as u8,
            (self.aux >> 8) as u8,
        );
        match self.kind {
            PacketKind::Pad => Packet::Pad,
            PacketKind::Psb => Packet::Psb,
            PacketKind::Psbend => Packet::Psbend,
            PacketKind::Ovf => Packet::Ovf,
            PacketKind::Stop => Packet::Stop,
            PacketKind::Invalid => Packet::Invalid,
            PacketKind::Tnt8 => Tnt::from_payload(p)
                .map(Packet::Tnt8)
                .unwrap_or(Packet::Invalid),
            PacketKind::Tnt64 => Tnt::from_payload(p)
                .map(Packet::Tnt64)
                .unwrap_or(Packet::Invalid),
            PacketKind::Tip | PacketKind::TipPge | PacketKind::TipPgd | PacketKind::Fup => {
                match (self.kind.ip_kind(), self.ip_payload()) {
                    (Some(k), Some(ip)) => Packet::Ip(k, ip),
                    _ => Packet::Invalid,
                }
            }
            PacketKind::ModeExec => Packet::ModeExec(ModeExec {
                csl: self.flag(0),
                csd: self.flag(1),
                iflag: self.flag(2),
            }),
            PacketKind::ModeTsx => Packet::ModeTsx(ModeTsx {
                intx: self.flag(0),
                abrt: self.flag(1),
            }),
            PacketKind::Pip => Packet::Pip {
                cr3: p,
                nr: self.flag(0),
            },
            PacketKind::Vmcs => Packet::Vmcs { base: p },
            PacketKind::Tsc => Packet::Tsc { tsc: p },
            PacketKind::Mtc => Packet::Mtc { ctc: p as u8 },
            PacketKind::Tma => Packet::Tma {
                ctc: p as u16,
                fc: aux,
            },
            PacketKind::Cyc => Packet::Cyc { value: p },
            PacketKind::Cbr => Packet::Cbr { ratio: p as u8 },
            PacketKind::Mnt => Packet::Mnt { payload: p },
            PacketKind::Ptw => Packet::Ptw {
                size: if self.flag(0) {
                    PtwSize::Eight
                } else {
                    PtwSize::Four
                },
                payload: p,
                ip: self.flag(1),
            },
            PacketKind::Exstop => Packet::Exstop { ip: self.flag(0) },
            PacketKind::Mwait => Packet::Mwait {
                hints: p as u32,
                ext: (p >> 32) as u32,
            },
            PacketKind::Pwre => Packet::Pwre {
                state: lo,
                sub_state: hi,
                hw: self.extra != 0,
            },
            PacketKind::Pwrx => Packet::Pwrx {
                last: lo,
                deepest: hi,
                wake: WakeReason {
                    interrupt: self.extra & 1 != 0,
                    store: self.extra & 2 != 0,
                    autonomous: self.extra & 4 != 0,
                },
            },
            PacketKind::Cfe => Packet::Cfe {
                ty: lo,
                vector: hi,
                ip: self.extra != 0,
            },
            PacketKind::Evd => Packet::Evd { ty: lo, payload: p },
            PacketKind::Trig => Packet::Trig {
                trbv: lo,
                ip: self.flag(8),
                mult: self.flag(9),
                icnt: self.flag(10).then_some(self.extra as u16),
            },
            PacketKind::Bbp => Packet::Bbp {
                sz4: self.flag(8),
                ty: lo,
            },
            PacketKind::Bip => Packet::Bip {
                id: lo,
                payload: p,
                sz4: self.flag(8),
            },
            PacketKind::Bep => Packet::Bep { ip: self.flag(0) },
        }
    }
}

impl From<Packet> for PacketRecord {
    fn from(packet: Packet) -> Self {
        let size = packet.size() as u8;
        let b = |v: bool| u16::from(v);
        let pair = |lo: u8, hi: u8| u16::from(lo) | u16::from(hi) << 8;
        let (kind, payload, aux, extra) = match packet {
            Packet::Pad => (PacketKind::Pad, 0, 0, 0),
            Packet::Psb => (PacketKind::Psb, 0, 0, 0),
            Packet::Psbend => (PacketKind::Psbend, 0, 0, 0),
            Packet::Ovf => (PacketKind::Ovf, 0, 0, 0),
            Packet::Stop => (PacketKind::Stop, 0, 0, 0),
            Packet::Invalid => (PacketKind::Invalid, 0, 0, 0),
            Packet::Tnt8(t) => (PacketKind::Tnt8, t.payload(), 0, 0),
            Packet::Tnt64(t) => (PacketKind::Tnt64, t.payload(), 0, 0),
            Packet::Ip(k, ip) => (PacketKind::of_ip(k), ip.ip, ip.compression as u16, 0),
            Packet::ModeExec(m) => (
                PacketKind::ModeExec,
                0,
                b(m.csl) | b(m.csd) << 1 | b(m.iflag) << 2,
                0,
            ),
            Packet::ModeTsx(m) => (PacketKind::ModeTsx, 0, b(m.intx) | b(m.abrt) << 1, 0),
            Packet::Pip { cr3, nr } => (PacketKind::Pip, cr3, b(nr), 0),
            Packet::Vmcs { base } => (PacketKind::Vmcs, base, 0, 0),
            Packet::Tsc { tsc } => (PacketKind::Tsc, tsc, 0, 0),
            Packet::Mtc { ctc } => (PacketKind::Mtc, u64::from(ctc), 0, 0),
            Packet::Tma { ctc, fc } => (PacketKind::Tma, u64::from(ctc), fc, 0),
            Packet::Cyc { value } => (PacketKind::Cyc, value, 0, 0),
            Packet::Cbr { ratio } => (PacketKind::Cbr, u64::from(ratio), 0, 0),
            Packet::Mnt { payload } => (PacketKind::Mnt, payload, 0, 0),
            Packet::Ptw { size, payload, ip } => (
                PacketKind::Ptw,
                payload,
                b(size == PtwSize::Eight) | b(ip) << 1,
                0,
            ),
            Packet::Exstop { ip } => (PacketKind::Exstop, 0, b(ip), 0),
            Packet::Mwait { hints, ext } => (
                PacketKind::Mwait,
                u64::from(hints) | u64::from(ext) << 32,
                0,
                0,
            ),
            Packet::Pwre {
                state,
                sub_state,
                hw,
            } => (PacketKind::Pwre, 0, pair(state, sub_state), u32::from(hw)),
            Packet::Pwrx {
                last,
                deepest,
                wake,
            } => (
                PacketKind::Pwrx,
                0,
                pair(last, deepest),
                u32::from(wake.interrupt)
                    | u32::from(wake.store) << 1
                    | u32::from(wake.autonomous) << 2,
            ),
            Packet::Cfe { ty, vector, ip } => (PacketKind::Cfe, 0, pair(ty, vector), u32::from(ip)),
            Packet::Evd { ty, payload } => (PacketKind::Evd, payload, u16::from(ty), 0),
            Packet::Trig {
                trbv,
                ip,
                mult,
                icnt,
            } => (
                PacketKind::Trig,
                0,
                u16::from(trbv) | b(ip) << 8 | b(mult) << 9 | b(icnt.is_some()) << 10,
                u32::from(icnt.unwrap_or(0)),
            ),
            Packet::Bbp { sz4, ty } => (PacketKind::Bbp, 0, u16::from(ty) | b(sz4) << 8, 0),
            Packet::Bip { id, payload, sz4 } => {
                (PacketKind::Bip, payload, u16::from(id) | b(sz4) << 8, 0)
            }
            Packet::Bep { ip } => (PacketKind::Bep, 0, b(ip), 0),
            // `Packet` is non-exhaustive; a packet added there needs a kind here.
            _ => (PacketKind::Invalid, 0, 0, 0),
        };
        Self {
            payload,
            kind,
            size,
            aux,
            extra,
        }
    }
}

impl From<PacketRecord> for Packet {
    fn from(r: PacketRecord) -> Self {
        r.packet()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips() {
        let packets = [
            Packet::Pad,
            Packet::Psb,
            Packet::Invalid,
            Packet::Tnt8(Tnt::from_payload(0b101).unwrap()),
            Packet::Tnt64(Tnt::from_payload(1 << 47 | 0x1234).unwrap()),
            Packet::fup(IpCompression::Update16, 0xbeef),
            Packet::tip_pgd(IpCompression::Suppressed, 0),
            Packet::ModeExec(ModeExec {
                csl: true,
                csd: false,
                iflag: true,
            }),
            Packet::ModeTsx(ModeTsx {
                intx: false,
                abrt: true,
            }),
            Packet::Pip {
                cr3: 0x1000,
                nr: true,
            },
            Packet::Tma {
                ctc: 0xabcd,
                fc: 0x1ff,
            },
            Packet::Ptw {
                size: PtwSize::Eight,
                payload: u64::MAX,
                ip: true,
            },
            Packet::Mwait {
                hints: 0xdead_beef,
                ext: 1,
            },
            Packet::Pwre {
                state: 3,
                sub_state: 7,
                hw: true,
            },
            Packet::Pwrx {
                last: 1,
                deepest: 15,
                wake: WakeReason {
                    interrupt: false,
                    store: true,
                    autonomous: true,
                },
            },
            Packet::Cfe {
                ty: 31,
                vector: 0xfe,
                ip: true,
            },
            Packet::Trig {
                trbv: 0x81,
                ip: false,
                mult: true,
                icnt: Some(0xffff),
            },
            Packet::Trig {
                trbv: 1,
                ip: true,
                mult: false,
                icnt: None,
            },
            Packet::Bbp { sz4: true, ty: 9 },
            Packet::Bip {
                id: 31,
                payload: 7,
                sz4: false,
            },
            Packet::Bep { ip: true },
        ];
        for p in packets {
            let r = PacketRecord::from(p);
            assert_eq!(r.packet(), p, "{r:?}");
            assert_eq!(r.size(), p.size());
        }
    }

    #[test]
    fn accessors_only_answer_for_their_kinds() {
        let r = PacketRecord::from(Packet::Cyc { value: 9 });
        assert_eq!(r.kind(), PacketKind::Cyc);
        assert_eq!(r.payload(), 9);
        assert_eq!(r.tnt(), None);
        assert_eq!(r.ip_payload(), None);
        let r = PacketRecord::from(Packet::tip(IpCompression::Update32, 0x1234_5678));
        assert_eq!(
            r.ip_payload(),
            Some(IpPayload::new(IpCompression::Update32, 0x1234_5678))
        );
    }
}
