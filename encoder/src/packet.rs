//! The typed model of every Intel PT packet (SDM Vol. 3, "Intel Processor Trace").
//!
//! This module is the single description of the wire format: the encoder writes these
//! types, and the decoder's first-byte table is derived from [`opcode::classify`], so the
//! two cannot drift apart. All values are small and `Copy`.

/// Opcode bytes and the first-byte classification shared by encoder and decoder.
pub mod opcode {
    /// PAD.
    pub const PAD: u8 = 0x00;
    /// Escape byte of the extended opcodes.
    pub const EXT: u8 = 0x02;
    /// TIP (low five bits; IPBytes in bits 7:5).
    pub const TIP: u8 = 0x0d;
    /// TIP.PGE (low five bits).
    pub const TIP_PGE: u8 = 0x11;
    /// TIP.PGD (low five bits).
    pub const TIP_PGD: u8 = 0x01;
    /// FUP (low five bits).
    pub const FUP: u8 = 0x1d;
    /// MODE.
    pub const MODE: u8 = 0x99;
    /// TSC.
    pub const TSC: u8 = 0x19;
    /// MTC.
    pub const MTC: u8 = 0x59;
    /// TRIG.
    pub const TRIG: u8 = 0xd9;
    /// Low two bits of a CYC packet.
    pub const CYC: u8 = 0x03;
    /// An opcode the SDM leaves undefined; handy to inject a decode fault.
    pub const BAD: u8 = 0xc9;

    /// Second byte of the extended packets.
    pub mod ext {
        /// PSB (repeated `02 82` eight times).
        pub const PSB: u8 = 0x82;
        /// TNT-64.
        pub const TNT64: u8 = 0xa3;
        /// PIP.
        pub const PIP: u8 = 0x43;
        /// OVF.
        pub const OVF: u8 = 0xf3;
        /// PSBEND.
        pub const PSBEND: u8 = 0x23;
        /// CBR.
        pub const CBR: u8 = 0x03;
        /// TMA.
        pub const TMA: u8 = 0x73;
        /// TraceStop.
        pub const STOP: u8 = 0x83;
        /// VMCS.
        pub const VMCS: u8 = 0xc8;
        /// Second escape (`02 c3`), followed by [`MNT`].
        pub const EXT2: u8 = 0xc3;
        /// Third byte of MNT after `02 c3`.
        pub const MNT: u8 = 0x88;
        /// EXSTOP without IP.
        pub const EXSTOP: u8 = 0x62;
        /// EXSTOP with IP (a FUP follows).
        pub const EXSTOP_IP: u8 = 0xe2;
        /// MWAIT.
        pub const MWAIT: u8 = 0xc2;
        /// PWRE.
        pub const PWRE: u8 = 0x22;
        /// PWRX.
        pub const PWRX: u8 = 0xa2;
        /// PTW: low five bits of the second byte.
        pub const PTW: u8 = 0x12;
        /// CFE.
        pub const CFE: u8 = 0x13;
        /// EVD.
        pub const EVD: u8 = 0x53;
        /// BBP.
        pub const BBP: u8 = 0x63;
        /// BEP without IP.
        pub const BEP: u8 = 0x33;
        /// BEP with IP (a FUP follows).
        pub const BEP_IP: u8 = 0xb3;
    }

    /// What the first byte of a packet says about it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum FirstByte {
        /// `00`.
        Pad,
        /// `02`: look at the second byte.
        Ext,
        /// Even byte other than `00`/`02`: TNT-8 (or BIP inside a PEBS block).
        Tnt8,
        /// `xxxx_xx11`.
        Cyc,
        /// TIP family; the payload is IPBytes (bits 7:5).
        Tip(super::IpPacketKind),
        /// `19`.
        Tsc,
        /// `59`.
        Mtc,
        /// `99`.
        Mode,
        /// `d9`.
        Trig,
        /// No packet starts with this byte.
        Undefined,
    }

    /// Classify a first byte. `const`, so decoders can build a 256-entry table from it.
    pub const fn classify(b: u8) -> FirstByte {
        use super::IpPacketKind as K;
        if b == PAD {
            return FirstByte::Pad;
        }
        if b == EXT {
            return FirstByte::Ext;
        }
        if b & 1 == 0 {
            return FirstByte::Tnt8;
        }
        if b & 3 == 3 {
            return FirstByte::Cyc;
        }
        match b & 0x1f {
            TIP => return FirstByte::Tip(K::Tip),
            TIP_PGE => return FirstByte::Tip(K::TipPge),
            TIP_PGD => return FirstByte::Tip(K::TipPgd),
            FUP => return FirstByte::Tip(K::Fup),
            _ => {}
        }
        match b {
            TSC => FirstByte::Tsc,
            MTC => FirstByte::Mtc,
            MODE => FirstByte::Mode,
            TRIG => FirstByte::Trig,
            _ => FirstByte::Undefined,
        }
    }
}

/// Size of a PSB packet in bytes.
pub const PSB_SIZE: usize = 16;
/// A PSB packet's bytes (`02 82` eight times): what searches for a sync point look for.
pub const PSB_BYTES: [u8; PSB_SIZE] = {
    let mut b = [0; PSB_SIZE];
    let mut i = 0;
    while i < PSB_SIZE {
        b[i] = opcode::EXT;
        b[i + 1] = opcode::ext::PSB;
        i += 2;
    }
    b
};
/// The largest packet any encoder or decoder here handles (a 15-byte CYC).
pub const MAX_PACKET_SIZE: usize = 16;
/// Maximum number of bytes libipt accepts for one CYC packet.
pub const MAX_CYC_SIZE: usize = 15;

/// The four packets that carry an IP payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpPacketKind {
    /// TIP: target of an indirect branch, far transfer or interrupt.
    Tip,
    /// TIP.PGE: packet generation enabled at this IP.
    TipPge,
    /// TIP.PGD: packet generation disabled.
    TipPgd,
    /// FUP: source IP of an asynchronous event.
    Fup,
}

impl IpPacketKind {
    /// The low five bits of the opcode.
    pub const fn opcode(self) -> u8 {
        match self {
            Self::Tip => opcode::TIP,
            Self::TipPge => opcode::TIP_PGE,
            Self::TipPgd => opcode::TIP_PGD,
            Self::Fup => opcode::FUP,
        }
    }
}

/// IP compression (the IPBytes field, B0\[7:5\], of TIP/TIP.PGE/TIP.PGD/FUP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum IpCompression {
    /// No payload: IP out of context or unknown.
    Suppressed = 0,
    /// IP\[15:0\]; upper bits from the last IP.
    Update16 = 1,
    /// IP\[31:0\]; upper bits from the last IP.
    Update32 = 2,
    /// IP\[47:0\], sign-extended from bit 47.
    Sext48 = 3,
    /// IP\[47:0\]; upper bits from the last IP.
    Update48 = 4,
    /// IP\[63:0\].
    Full = 6,
}

impl IpCompression {
    /// All valid encodings, for tests.
    pub const ALL: [IpCompression; 6] = [
        Self::Suppressed,
        Self::Update16,
        Self::Update32,
        Self::Sext48,
        Self::Update48,
        Self::Full,
    ];

    /// Decode the IPBytes field; `None` for the reserved encodings 5 and 7.
    pub const fn from_bits(bits: u8) -> Option<Self> {
        Some(match bits {
            0 => Self::Suppressed,
            1 => Self::Update16,
            2 => Self::Update32,
            3 => Self::Sext48,
            4 => Self::Update48,
            6 => Self::Full,
            _ => return None,
        })
    }

    /// Number of payload bytes.
    pub const fn payload_size(self) -> usize {
        match self {
            Self::Suppressed => 0,
            Self::Update16 => 2,
            Self::Update32 => 4,
            Self::Sext48 | Self::Update48 => 6,
            Self::Full => 8,
        }
    }

    /// Mask of the IP bits the payload carries.
    pub const fn payload_mask(self) -> u64 {
        match self {
            Self::Suppressed => 0,
            Self::Update16 => 0xffff,
            Self::Update32 => 0xffff_ffff,
            Self::Sext48 | Self::Update48 => 0xffff_ffff_ffff,
            Self::Full => u64::MAX,
        }
    }
}

/// The payload of a TIP, TIP.PGE, TIP.PGD or FUP packet: the compression and the raw
/// (compressed) IP bits as they are on the wire. Use [`LastIp`] to reconstruct the IP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpPayload {
    /// How the IP is compressed.
    pub compression: IpCompression,
    /// The payload bits; only the bits of [`IpCompression::payload_mask`] are meaningful.
    pub ip: u64,
}

impl IpPayload {
    /// A payload carrying `ip` with the given compression (masked to the payload bits).
    pub const fn new(compression: IpCompression, ip: u64) -> Self {
        Self {
            compression,
            ip: ip & compression.payload_mask(),
        }
    }

    /// A suppressed IP.
    pub const SUPPRESSED: Self = Self {
        compression: IpCompression::Suppressed,
        ip: 0,
    };
}

/// The last-IP state that IP compression works against (SDM: "last IP").
///
/// Both the encoder (to pick a compression) and the decoder (to reconstruct IPs) keep one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LastIp {
    ip: u64,
    have_ip: bool,
    suppressed: bool,
}

/// Why [`LastIp::query`] has no IP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LastIpError {
    /// No IP has been seen since the last reset (PSB).
    NoIp,
    /// The most recent IP packet suppressed its payload.
    Suppressed,
}

impl LastIp {
    /// A fresh state, as after a PSB.
    pub const fn new() -> Self {
        Self {
            ip: 0,
            have_ip: false,
            suppressed: false,
        }
    }

    /// Reset at a PSB: hardware compresses the next IP against zero.
    pub fn reset(&mut self) {
        *self = Self::new();
    }

    /// Apply an IP packet's payload; returns the reconstructed IP, if any.
    // Decoders call this once per TIP: always inline, and pick the result by mask rather
    // than by a branch per compression.
    #[inline(always)]
    pub fn update(&mut self, p: IpPayload) -> Option<u64> {
        if p.compression == IpCompression::Suppressed {
            self.suppressed = true;
            return None;
        }
        // The payload's bits replace the last IP's; the rest stay.
        let payload = p.compression.payload_mask();
        let merged = (self.ip & !payload) | (p.ip & payload);
        let ip = if p.compression == IpCompression::Sext48 {
            sext48(p.ip)
        } else {
            merged
        };
        self.ip = ip;
        self.have_ip = true;
        self.suppressed = false;
        Some(ip)
    }

    /// The current IP, or why there is none.
    pub fn query(&self) -> Result<u64, LastIpError> {
        if !self.have_ip {
            Err(LastIpError::NoIp)
        } else if self.suppressed {
            Err(LastIpError::Suppressed)
        } else {
            Ok(self.ip)
        }
    }

    /// The raw last-IP bits, regardless of suppression (what compression works against).
    pub fn bits(&self) -> u64 {
        self.ip
    }

    /// The most compact payload that reproduces `ip` from this state.
    pub fn compress(&self, ip: u64) -> IpPayload {
        let last = self.ip;
        let c = if ip >> 16 == last >> 16 {
            IpCompression::Update16
        } else if ip >> 32 == last >> 32 {
            IpCompression::Update32
        } else if ip >> 48 == last >> 48 {
            IpCompression::Update48
        } else if sext48(ip) == ip {
            IpCompression::Sext48
        } else {
            IpCompression::Full
        };
        IpPayload::new(c, ip)
    }
}

/// Sign-extend bit 47 of `v`.
#[inline]
pub const fn sext48(v: u64) -> u64 {
    (((v << 16) as i64) >> 16) as u64
}

/// A run of conditional-branch results (TNT-8 or TNT-64).
///
/// Stored as on the wire: the results below a stop bit; the oldest result sits
/// directly below the stop bit.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tnt {
    payload: u64,
}

impl Tnt {
    /// Most results a TNT-8 holds.
    pub const MAX_SHORT: u32 = 6;
    /// Most results a TNT-64 holds.
    pub const MAX_LONG: u32 = 47;

    /// From the wire payload (stop bit included); `None` if it holds no result.
    pub const fn from_payload(payload: u64) -> Option<Self> {
        if payload < 2 {
            None
        } else {
            Some(Self { payload })
        }
    }

    /// From a TNT-8 byte: any even byte other than `00` and `02`.
    #[inline]
    pub const fn from_tnt8_byte(b0: u8) -> Self {
        debug_assert!(b0 & 1 == 0 && b0 > 2);
        // An even byte above 2 shifted right is at least 2: it holds a stop bit.
        Self {
            payload: (b0 >> 1) as u64,
        }
    }

    /// From results given oldest first (`true` = taken). `None` if empty or more than 47.
    pub fn from_results<I: IntoIterator<Item = bool>>(results: I) -> Option<Self> {
        let mut payload = 1u64;
        let mut n = 0;
        for taken in results {
            n += 1;
            if n > Self::MAX_LONG {
                return None;
            }
            payload = (payload << 1) | taken as u64;
        }
        Self::from_payload(payload)
    }

    /// The wire payload, stop bit included.
    pub const fn payload(self) -> u64 {
        self.payload
    }

    /// Number of results.
    pub const fn len(self) -> u32 {
        63 - self.payload.leading_zeros()
    }

    /// Never true: a valid TNT holds at least one result.
    pub const fn is_empty(self) -> bool {
        false
    }

    /// The result bits without the stop bit; bit `len-1` is the oldest.
    pub const fn bits(self) -> u64 {
        self.payload & !(1u64 << self.len())
    }

    /// Result `i`, counting from the oldest (0).
    pub const fn taken(self, i: u32) -> bool {
        (self.payload >> (self.len() - 1 - i)) & 1 == 1
    }

    /// Results, oldest first.
    pub fn iter(self) -> impl Iterator<Item = bool> {
        (0..self.len()).map(move |i| self.taken(i))
    }
}

impl core::fmt::Debug for Tnt {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Tnt(")?;
        for t in self.iter() {
            f.write_str(if t { "!" } else { "." })?;
        }
        f.write_str(")")
    }
}

/// Execution mode from CS.L and CS.D.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExecMode {
    /// CS.L=0, CS.D=0.
    Bit16,
    /// CS.L=0, CS.D=1.
    Bit32,
    /// CS.L=1, CS.D=0.
    Bit64,
    /// CS.L=1, CS.D=1: reserved.
    Unknown,
}

impl ExecMode {
    /// The code's bitness (an instruction decoder's mode): 16, 32 or 64; `None` for the
    /// reserved mode.
    pub const fn bits(self) -> Option<u32> {
        match self {
            ExecMode::Bit16 => Some(16),
            ExecMode::Bit32 => Some(32),
            ExecMode::Bit64 => Some(64),
            ExecMode::Unknown => None,
        }
    }
}

/// MODE.Exec payload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ModeExec {
    /// CS.L: 64-bit code segment.
    pub csl: bool,
    /// CS.D: default operand size 32.
    pub csd: bool,
    /// RFLAGS.IF (meaningful with Event Trace).
    pub iflag: bool,
}

impl ModeExec {
    /// The execution mode these bits select.
    pub const fn mode(self) -> ExecMode {
        match (self.csl, self.csd) {
            (false, false) => ExecMode::Bit16,
            (false, true) => ExecMode::Bit32,
            (true, false) => ExecMode::Bit64,
            (true, true) => ExecMode::Unknown,
        }
    }

    /// The bits for an execution mode (IF clear).
    pub const fn from_mode(mode: ExecMode) -> Self {
        let (csl, csd) = match mode {
            ExecMode::Bit16 => (false, false),
            ExecMode::Bit32 => (false, true),
            ExecMode::Bit64 => (true, false),
            ExecMode::Unknown => (true, true),
        };
        Self {
            csl,
            csd,
            iflag: false,
        }
    }
}

/// MODE.TSX payload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ModeTsx {
    /// In a transaction.
    pub intx: bool,
    /// The transaction aborted.
    pub abrt: bool,
}

/// PTW payload size (B1\[6:5\], "PayloadBytes").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PtwSize {
    /// Four bytes (encoding 0).
    Four,
    /// Eight bytes (encoding 1).
    Eight,
}

impl PtwSize {
    /// The two-bit encoding ("plc" in libipt).
    pub const fn bits(self) -> u8 {
        match self {
            Self::Four => 0,
            Self::Eight => 1,
        }
    }

    /// Payload bytes.
    pub const fn bytes(self) -> usize {
        match self {
            Self::Four => 4,
            Self::Eight => 8,
        }
    }
}

/// PWRX wake reasons (one-hot in the SDM; several may be set in a bad packet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WakeReason {
    /// Woken by an interrupt (bit 0).
    pub interrupt: bool,
    /// Woken by a store to the monitored address (bit 2).
    pub store: bool,
    /// Autonomous (hardware) wake, e.g. HDC (bit 3).
    pub autonomous: bool,
}

/// One Intel PT packet.
///
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Packet {
    /// PAD: filler.
    Pad,
    /// PSB: synchronization boundary; starts PSB+.
    Psb,
    /// PSBEND: ends PSB+.
    Psbend,
    /// OVF: internal buffer overflow, packets lost.
    Ovf,
    /// TraceStop: a TraceStop range or ToPA STOP was hit.
    Stop,
    /// TNT-8 (short TNT), 1..6 results.
    Tnt8(Tnt),
    /// TNT-64 (long TNT), 1..47 results.
    Tnt64(Tnt),
    /// TIP, TIP.PGE, TIP.PGD or FUP.
    Ip(IpPacketKind, IpPayload),
    /// MODE.Exec.
    ModeExec(ModeExec),
    /// MODE.TSX.
    ModeTsx(ModeTsx),
    /// PIP: paging information (CR3).
    Pip {
        /// CR3\[51:5\] (bits 4:0 are zero).
        cr3: u64,
        /// VMX non-root.
        nr: bool,
    },
    /// VMCS: VMCS pointer.
    Vmcs {
        /// Pointer bits 51:12.
        base: u64,
    },
    /// TSC: time-stamp counter, 56 bits.
    Tsc {
        /// TSC\[55:0\].
        tsc: u64,
    },
    /// MTC: mini time counter, CTC[N+7:N].
    Mtc {
        /// Eight CTC bits.
        ctc: u8,
    },
    /// TMA: CTC and fast counter at the preceding TSC.
    Tma {
        /// CTC\[15:0\].
        ctc: u16,
        /// FastCounter\[8:0\].
        fc: u16,
    },
    /// CYC: core cycles since the previous CYC.
    Cyc {
        /// The cycle count.
        value: u64,
    },
    /// CBR: core:bus ratio.
    Cbr {
        /// The ratio.
        ratio: u8,
    },
    /// MNT: maintenance, model-specific.
    Mnt {
        /// 64-bit payload.
        payload: u64,
    },
    /// PTW: a PTWRITE operand.
    Ptw {
        /// Payload width.
        size: PtwSize,
        /// The operand.
        payload: u64,
        /// A FUP with the PTWRITE's IP follows.
        ip: bool,
    },
    /// EXSTOP: execution stopped.
    Exstop {
        /// A FUP follows.
        ip: bool,
    },
    /// MWAIT: hints and extensions of an MWAIT that entered a C-state.
    Mwait {
        /// EAX hints (libipt reads 32 bits).
        hints: u32,
        /// ECX extensions (libipt reads 32 bits).
        ext: u32,
    },
    /// PWRE: power entry.
    Pwre {
        /// Resolved thread C-state (MWAIT encoding).
        state: u8,
        /// Resolved thread sub C-state.
        sub_state: u8,
        /// Hardware-initiated (HDC).
        hw: bool,
    },
    /// PWRX: power exit.
    Pwrx {
        /// Last core C-state (MWAIT encoding).
        last: u8,
        /// Deepest core C-state (MWAIT encoding).
        deepest: u8,
        /// Why the core woke.
        wake: WakeReason,
    },
    /// CFE: control-flow event (Event Trace).
    Cfe {
        /// Event type, 5 bits.
        ty: u8,
        /// Vector, where the type has one.
        vector: u8,
        /// A FUP with the IP follows.
        ip: bool,
    },
    /// EVD: event data (Event Trace).
    Evd {
        /// Data type, 5 bits.
        ty: u8,
        /// 64-bit payload.
        payload: u64,
    },
    /// TRIG: trigger.
    Trig {
        /// TRBV: bit vector of triggers.
        trbv: u8,
        /// A FUP with the reference IP follows.
        ip: bool,
        /// Further triggers fired but were not reported.
        mult: bool,
        /// Instruction count, if valid (ICNTV).
        icnt: Option<u16>,
    },
    /// BBP: PEBS block begin.
    Bbp {
        /// SZ: BIPs carry 4-byte (true) or 8-byte (false) items.
        sz4: bool,
        /// Block type, 5 bits.
        ty: u8,
    },
    /// BIP: PEBS block item (only between BBP and BEP).
    Bip {
        /// Item ID, 5 bits.
        id: u8,
        /// 4- or 8-byte payload, as the BBP said.
        payload: u64,
        /// Four-byte payload.
        sz4: bool,
    },
    /// BEP: PEBS block end.
    Bep {
        /// A FUP follows.
        ip: bool,
    },
    /// A packet corrupted by erratum SKZ84 (a TMA with reserved bits and one bogus
    /// byte, 8 bytes in all). Only a decoder produces it; it has no encoding.
    Invalid,
}

impl Packet {
    /// A TIP.
    pub const fn tip(c: IpCompression, ip: u64) -> Self {
        Self::Ip(IpPacketKind::Tip, IpPayload::new(c, ip))
    }
    /// A TIP.PGE.
    pub const fn tip_pge(c: IpCompression, ip: u64) -> Self {
        Self::Ip(IpPacketKind::TipPge, IpPayload::new(c, ip))
    }
    /// A TIP.PGD.
    pub const fn tip_pgd(c: IpCompression, ip: u64) -> Self {
        Self::Ip(IpPacketKind::TipPgd, IpPayload::new(c, ip))
    }
    /// A FUP.
    pub const fn fup(c: IpCompression, ip: u64) -> Self {
        Self::Ip(IpPacketKind::Fup, IpPayload::new(c, ip))
    }

    /// Encoded size in bytes.
    #[inline]
    pub fn size(&self) -> usize {
        match *self {
            Packet::Pad | Packet::Tnt8(_) => 1,
            Packet::Psb => PSB_SIZE,
            Packet::Psbend | Packet::Ovf | Packet::Stop | Packet::Exstop { .. } => 2,
            Packet::Bep { .. } => 2,
            Packet::Tnt64(_) => 8,
            Packet::Ip(_, p) => 1 + p.compression.payload_size(),
            Packet::ModeExec(_) | Packet::ModeTsx(_) | Packet::Mtc { .. } => 2,
            Packet::Pip { .. } => 8,
            Packet::Vmcs { .. } => 7,
            Packet::Tsc { .. } => 8,
            Packet::Tma { .. } => 7,
            Packet::Cyc { value } => cyc_size(value),
            Packet::Cbr { .. } => 4,
            Packet::Mnt { .. } => 11,
            Packet::Ptw { size, .. } => 2 + size.bytes(),
            Packet::Mwait { .. } => 10,
            Packet::Pwre { .. } => 4,
            Packet::Pwrx { .. } => 7,
            Packet::Cfe { .. } => 4,
            Packet::Evd { .. } => 11,
            Packet::Trig { icnt, .. } => {
                if icnt.is_some() {
                    5
                } else {
                    3
                }
            }
            Packet::Bbp { .. } => 3,
            Packet::Bip { sz4, .. } => {
                if sz4 {
                    5
                } else {
                    9
                }
            }
            Packet::Invalid => 8,
        }
    }

    /// libipt's name for the packet kind, as ptdump prints it.
    #[inline]
    pub fn name(&self) -> &'static str {
        match self {
            Packet::Pad => "pad",
            Packet::Psb => "psb",
            Packet::Psbend => "psbend",
            Packet::Ovf => "ovf",
            Packet::Stop => "stop",
            Packet::Tnt8(_) => "tnt.8",
            Packet::Tnt64(_) => "tnt.64",
            Packet::Ip(IpPacketKind::Tip, _) => "tip",
            Packet::Ip(IpPacketKind::TipPge, _) => "tip.pge",
            Packet::Ip(IpPacketKind::TipPgd, _) => "tip.pgd",
            Packet::Ip(IpPacketKind::Fup, _) => "fup",
            Packet::ModeExec(_) => "mode.exec",
            Packet::ModeTsx(_) => "mode.tsx",
            Packet::Pip { .. } => "pip",
            Packet::Vmcs { .. } => "vmcs",
            Packet::Tsc { .. } => "tsc",
            Packet::Mtc { .. } => "mtc",
            Packet::Tma { .. } => "tma",
            Packet::Cyc { .. } => "cyc",
            Packet::Cbr { .. } => "cbr",
            Packet::Mnt { .. } => "mnt",
            Packet::Ptw { .. } => "ptw",
            Packet::Exstop { .. } => "exstop",
            Packet::Mwait { .. } => "mwait",
            Packet::Pwre { .. } => "pwre",
            Packet::Pwrx { .. } => "pwrx",
            Packet::Cfe { .. } => "cfe",
            Packet::Evd { .. } => "evd",
            Packet::Trig { .. } => "trig",
            Packet::Bbp { .. } => "bbp",
            Packet::Bip { .. } => "bip",
            Packet::Bep { .. } => "bep",
            Packet::Invalid => "<invalid>",
        }
    }
}

/// Bytes a CYC packet needs for `value`: 5 bits in the first byte, 7 per extension byte.
pub const fn cyc_size(value: u64) -> usize {
    let bits = 64 - value.leading_zeros() as usize;
    if bits <= 5 {
        1
    } else {
        1 + (bits - 5).div_ceil(7)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tnt_order_is_oldest_below_stop_bit() {
        let t = Tnt::from_results([true, true, false]).unwrap();
        assert_eq!(t.payload(), 0b1110);
        assert_eq!(t.len(), 3);
        assert_eq!(t.iter().collect::<Vec<_>>(), vec![true, true, false]);
        assert!(Tnt::from_payload(1).is_none());
        assert!(Tnt::from_results(core::iter::repeat_n(true, 48)).is_none());
    }

    #[test]
    fn last_ip_reconstruction() {
        let mut l = LastIp::new();
        assert_eq!(l.query(), Err(LastIpError::NoIp));
        assert_eq!(
            l.update(IpPayload::new(IpCompression::Sext48, 0xffff_ffff_1000)),
            Some(0xffff_ffff_ffff_1000)
        );
        assert_eq!(
            l.update(IpPayload::new(IpCompression::Update16, 0x2002)),
            Some(0xffff_ffff_ffff_2002)
        );
        assert_eq!(l.update(IpPayload::SUPPRESSED), None);
        assert_eq!(l.query(), Err(LastIpError::Suppressed));
        // A suppressed IP keeps the bits: a later update-16 still combines with them.
        assert_eq!(
            l.update(IpPayload::new(IpCompression::Update16, 0x3)),
            Some(0xffff_ffff_ffff_0003)
        );
    }

    #[test]
    fn last_ip_update_per_compression() {
        let last = 0x1234_5678_9abc_def0;
        let payload = 0xfedc_ba98_7654_3210;
        let want = [
            (IpCompression::Update16, 0x1234_5678_9abc_3210),
            (IpCompression::Update32, 0x1234_5678_7654_3210),
            (IpCompression::Update48, 0x1234_ba98_7654_3210),
            (IpCompression::Sext48, 0xffff_ba98_7654_3210),
            (IpCompression::Full, payload),
        ];
        for (c, ip) in want {
            let mut l = LastIp::new();
            l.update(IpPayload::new(IpCompression::Full, last));
            assert_eq!(
                l.update(IpPayload {
                    compression: c,
                    ip: payload
                }),
                Some(ip),
                "{c:?}"
            );
            assert_eq!(l.query(), Ok(ip));
        }
    }

    #[test]
    fn compress_picks_smallest_form() {
        let mut l = LastIp::new();
        l.update(IpPayload::new(IpCompression::Full, 0x7fff_1234_5678));
        assert_eq!(
            l.compress(0x7fff_1234_0000).compression,
            IpCompression::Update16
        );
        assert_eq!(
            l.compress(0x7fff_0000_0000).compression,
            IpCompression::Update32
        );
        assert_eq!(
            l.compress(0x1000_0000_0000).compression,
            IpCompression::Update48
        );
        assert_eq!(
            l.compress(0xffff_8000_0000_0000).compression,
            IpCompression::Sext48
        );
        assert_eq!(
            l.compress(0x1234_0000_0000_0000).compression,
            IpCompression::Full
        );
    }

    #[test]
    fn classify_matches_the_sdm_table() {
        use opcode::FirstByte as F;
        assert_eq!(opcode::classify(0x00), F::Pad);
        assert_eq!(opcode::classify(0x02), F::Ext);
        assert_eq!(opcode::classify(0x1c), F::Tnt8);
        assert_eq!(opcode::classify(0x03), F::Cyc);
        assert_eq!(opcode::classify(0xbf), F::Cyc);
        assert_eq!(opcode::classify(0x6d), F::Tip(IpPacketKind::Tip));
        assert_eq!(opcode::classify(0x11), F::Tip(IpPacketKind::TipPge));
        assert_eq!(opcode::classify(0xc1), F::Tip(IpPacketKind::TipPgd));
        assert_eq!(opcode::classify(0x1d), F::Tip(IpPacketKind::Fup));
        assert_eq!(opcode::classify(0x19), F::Tsc);
        assert_eq!(opcode::classify(0x59), F::Mtc);
        assert_eq!(opcode::classify(0x99), F::Mode);
        assert_eq!(opcode::classify(0xd9), F::Trig);
        assert_eq!(opcode::classify(0xc9), F::Undefined);
        assert_eq!(opcode::classify(0x05), F::Undefined);
    }

    #[test]
    fn cyc_sizes() {
        assert_eq!(cyc_size(0), 1);
        assert_eq!(cyc_size(0x1f), 1);
        assert_eq!(cyc_size(0x20), 2);
        assert_eq!(cyc_size(0xfff), 2);
        assert_eq!(cyc_size(0x1000), 3);
        assert_eq!(cyc_size(u64::MAX), 10);
        assert_eq!(cyc_size((1 << 61) - 1), 9);
    }
}
