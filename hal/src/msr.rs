//! The IA32_RTIT_* registers, every field named as in the SDM.
//!
//! Each register is a `u64` newtype with a getter and a `set_` method per
//! field. Setters mask the value to the field width; the other bits are kept.
//! MSR numbers come from the `x86` crate.

use std::fmt;

/// MSR number of IA32_RTIT_CTL.
pub const IA32_RTIT_CTL: u32 = x86::msr::MSR_IA32_RTIT_CTL;
/// MSR number of IA32_RTIT_STATUS.
pub const IA32_RTIT_STATUS: u32 = x86::msr::MSR_IA32_RTIT_STATUS;
/// MSR number of IA32_RTIT_OUTPUT_BASE.
pub const IA32_RTIT_OUTPUT_BASE: u32 = x86::msr::MSR_IA32_RTIT_OUTPUT_BASE;
/// MSR number of IA32_RTIT_OUTPUT_MASK_PTRS.
pub const IA32_RTIT_OUTPUT_MASK_PTRS: u32 = x86::msr::MSR_IA32_RTIT_OUTPUT_MASK_PTRS;
/// MSR number of IA32_RTIT_CR3_MATCH.
pub const IA32_RTIT_CR3_MATCH: u32 = x86::msr::MSR_IA32_CR3_MATCH;

/// MSR number of IA32_RTIT_ADDRn_A (n = 0..3).
pub const fn ia32_rtit_addr_a(n: u8) -> u32 {
    x86::msr::MSR_IA32_ADDR0_START + 2 * n as u32
}

/// MSR number of IA32_RTIT_ADDRn_B (n = 0..3).
pub const fn ia32_rtit_addr_b(n: u8) -> u32 {
    x86::msr::MSR_IA32_ADDR0_END + 2 * n as u32
}

/// Highest number of address range pairs the architecture defines (ADDR0..ADDR3).
pub const MAX_ADDR_RANGES: u8 = 4;

const fn mask(width: u32) -> u64 {
    if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

macro_rules! flag {
    ($(#[$m:meta])* $get:ident, $set:ident, $bit:expr) => {
        $(#[$m])*
        pub const fn $get(self) -> bool {
            self.0 >> $bit & 1 != 0
        }
        #[doc = concat!("Sets `", stringify!($get), "`.")]
        pub fn $set(&mut self, v: bool) -> &mut Self {
            self.0 = (self.0 & !(1u64 << $bit)) | ((v as u64) << $bit);
            self
        }
    };
}

macro_rules! field {
    ($(#[$m:meta])* $get:ident, $set:ident, $ty:ty, $lo:expr, $width:expr) => {
        $(#[$m])*
        pub const fn $get(self) -> $ty {
            (self.0 >> $lo & mask($width)) as $ty
        }
        #[doc = concat!("Sets `", stringify!($get), "` (masked to ", stringify!($width), " bits).")]
        pub fn $set(&mut self, v: $ty) -> &mut Self {
            self.0 = (self.0 & !(mask($width) << $lo)) | ((v as u64 & mask($width)) << $lo);
            self
        }
    };
}

macro_rules! register {
    ($(#[$m:meta])* $name:ident, $msr:expr) => {
        $(#[$m])*
        #[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
        pub struct $name(pub u64);

        impl $name {
            /// The MSR number.
            pub const MSR: u32 = $msr;

            /// The raw value.
            pub const fn bits(self) -> u64 {
                self.0
            }
        }

        impl From<u64> for $name {
            fn from(v: u64) -> Self {
                Self(v)
            }
        }

        impl From<$name> for u64 {
            fn from(v: $name) -> u64 {
                v.0
            }
        }
    };
}

/// ADDRn_CFG: what an address range pair does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddrCfg {
    /// 0: the range is unused.
    Unused,
    /// 1: FilterEn: trace only inside the range.
    Filter,
    /// 2: TraceStop: stop tracing when an instruction in the range retires.
    TraceStop,
    /// 3..15: reserved (writing them #GPs).
    Reserved(u8),
}

impl AddrCfg {
    /// The 4-bit encoding.
    pub const fn encoding(self) -> u8 {
        match self {
            AddrCfg::Unused => 0,
            AddrCfg::Filter => 1,
            AddrCfg::TraceStop => 2,
            AddrCfg::Reserved(v) => v & 0xf,
        }
    }

    /// From the 4-bit encoding.
    pub const fn from_encoding(v: u8) -> Self {
        match v & 0xf {
            0 => AddrCfg::Unused,
            1 => AddrCfg::Filter,
            2 => AddrCfg::TraceStop,
            r => AddrCfg::Reserved(r),
        }
    }
}

register!(
    /// IA32_RTIT_CTL (0x570): the trace control register.
    RtitCtl,
    IA32_RTIT_CTL
);

impl RtitCtl {
    /// Bits the SDM reserves: 18, 23, 30:28, 54:48, 63:57.
    pub const RESERVED: u64 = (1 << 18) | (1 << 23) | (0b111 << 28) | (0x7f << 48) | (0x7f << 57);

    flag!(
        /// Bit 0 TraceEn: tracing enabled.
        trace_en, set_trace_en, 0
    );
    flag!(
        /// Bit 1 CYCEn: CYC packets.
        cyc_en, set_cyc_en, 1
    );
    flag!(
        /// Bit 2 OS: trace CPL 0.
        os, set_os, 2
    );
    flag!(
        /// Bit 3 User: trace CPL > 0.
        user, set_user, 3
    );
    flag!(
        /// Bit 4 PwrEvtEn: power event packets.
        pwr_evt_en, set_pwr_evt_en, 4
    );
    flag!(
        /// Bit 5 FUPonPTW: FUP after each PTW.
        fup_on_ptw, set_fup_on_ptw, 5
    );
    flag!(
        /// Bit 6 FabricEn: output to the trace transport subsystem.
        fabric_en, set_fabric_en, 6
    );
    flag!(
        /// Bit 7 CR3Filter: CR3 filtering.
        cr3_filter, set_cr3_filter, 7
    );
    flag!(
        /// Bit 8 ToPA: 1 = ToPA output, 0 = single range.
        topa, set_topa, 8
    );
    flag!(
        /// Bit 9 MTCEn: MTC packets.
        mtc_en, set_mtc_en, 9
    );
    flag!(
        /// Bit 10 TSCEn: TSC packets.
        tsc_en, set_tsc_en, 10
    );
    flag!(
        /// Bit 11 DisRETC: disable RET compression.
        dis_retc, set_dis_retc, 11
    );
    flag!(
        /// Bit 12 PTWEn: PTW packets.
        ptw_en, set_ptw_en, 12
    );
    flag!(
        /// Bit 13 BranchEn: COFI packets (FUP, TIP*, TNT, MODE.*).
        branch_en, set_branch_en, 13
    );
    field!(
        /// Bits 17:14 MTCFreq: MTC period = 2^n CTC ticks.
        mtc_freq, set_mtc_freq, u8, 14, 4
    );
    field!(
        /// Bits 22:19 CycThresh: CYC threshold (0 → every cycle, n → 2^(n−1)).
        cyc_thresh, set_cyc_thresh, u8, 19, 4
    );
    field!(
        /// Bits 27:24 PSBFreq: PSB every ≈ 2 KiB << n of output.
        psb_freq, set_psb_freq, u8, 24, 4
    );
    flag!(
        /// Bit 31 EventEn: event trace.
        event_en, set_event_en, 31
    );
    flag!(
        /// Bit 55 DisTNT: no TNT packets.
        dis_tnt, set_dis_tnt, 55
    );
    flag!(
        /// Bit 56 InjectPsbPmiOnEnable: keep a pending PSB/ToPA PMI across disable.
        inject_psb_pmi_on_enable, set_inject_psb_pmi_on_enable, 56
    );

    /// ADDRn_CFG (bits 35+4n:32+4n), n = 0..3; None for n > 3.
    pub const fn addr_cfg(self, n: u8) -> Option<AddrCfg> {
        if n >= MAX_ADDR_RANGES {
            return None;
        }
        Some(AddrCfg::from_encoding(
            (self.0 >> (32 + 4 * n as u32) & 0xf) as u8,
        ))
    }

    /// Sets ADDRn_CFG; ignored for n > 3.
    pub fn set_addr_cfg(&mut self, n: u8, cfg: AddrCfg) -> &mut Self {
        if n < MAX_ADDR_RANGES {
            let lo = 32 + 4 * u32::from(n);
            self.0 = (self.0 & !(0xf << lo)) | (u64::from(cfg.encoding()) << lo);
        }
        self
    }

    /// The reserved bits that are set.
    pub const fn reserved_bits(self) -> u64 {
        self.0 & Self::RESERVED
    }
}

impl fmt::Debug for RtitCtl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RtitCtl")
            .field("raw", &format_args!("{:#018x}", self.0))
            .field("TraceEn", &self.trace_en())
            .field("CYCEn", &self.cyc_en())
            .field("OS", &self.os())
            .field("User", &self.user())
            .field("PwrEvtEn", &self.pwr_evt_en())
            .field("FUPonPTW", &self.fup_on_ptw())
            .field("FabricEn", &self.fabric_en())
            .field("CR3Filter", &self.cr3_filter())
            .field("ToPA", &self.topa())
            .field("MTCEn", &self.mtc_en())
            .field("TSCEn", &self.tsc_en())
            .field("DisRETC", &self.dis_retc())
            .field("PTWEn", &self.ptw_en())
            .field("BranchEn", &self.branch_en())
            .field("MTCFreq", &self.mtc_freq())
            .field("CycThresh", &self.cyc_thresh())
            .field("PSBFreq", &self.psb_freq())
            .field("EventEn", &self.event_en())
            .field("ADDR_CFG", &[0, 1, 2, 3].map(|n| self.addr_cfg(n)))
            .field("DisTNT", &self.dis_tnt())
            .field("InjectPsbPmiOnEnable", &self.inject_psb_pmi_on_enable())
            .finish()
    }
}

register!(
    /// IA32_RTIT_STATUS (0x571).
    #[derive(Debug)]
    RtitStatus,
    IA32_RTIT_STATUS
);

impl RtitStatus {
    /// Reserved bits: 3, 31:8, 63:49.
    pub const RESERVED: u64 = (1 << 3) | (0xff_ffff << 8) | (0x7fff << 49);

    flag!(
        /// Bit 0 FilterEn: the IP passes the IP filter (read-only).
        filter_en, set_filter_en, 0
    );
    flag!(
        /// Bit 1 ContextEn: the context is traced (read-only).
        context_en, set_context_en, 1
    );
    flag!(
        /// Bit 2 TriggerEn: tracing is active (read-only).
        trigger_en, set_trigger_en, 2
    );
    flag!(
        /// Bit 4 Error: operational error.
        error, set_error, 4
    );
    flag!(
        /// Bit 5 Stopped: ToPA STOP or TraceStop reached.
        stopped, set_stopped, 5
    );
    flag!(
        /// Bit 6 PendPSB: PSB pending across disable.
        pend_psb, set_pend_psb, 6
    );
    flag!(
        /// Bit 7 PendTopaPMI: ToPA PMI pending across disable.
        pend_topa_pmi, set_pend_topa_pmi, 7
    );
    field!(
        /// Bits 48:32 PacketByteCnt: output bytes toward the next PSB.
        packet_byte_cnt, set_packet_byte_cnt, u32, 32, 17
    );

    /// The reserved bits that are set.
    pub const fn reserved_bits(self) -> u64 {
        self.0 & Self::RESERVED
    }
}

register!(
    /// IA32_RTIT_OUTPUT_BASE (0x560): ToPA table or single-range region base.
    #[derive(Debug)]
    RtitOutputBase,
    IA32_RTIT_OUTPUT_BASE
);

impl RtitOutputBase {
    /// The base address (bits 6:0 masked off).
    pub const fn base(self) -> u64 {
        self.0 & !0x7f
    }

    /// Sets the base address; bits 6:0 of `addr` are dropped.
    pub fn set_base(&mut self, addr: u64) -> &mut Self {
        self.0 = (self.0 & 0x7f) | (addr & !0x7f);
        self
    }

    /// Reserved bits for a MAXPHYADDR: 6:0 and 63:MAXPHYADDR.
    pub const fn reserved_mask(maxphyaddr: u8) -> u64 {
        0x7f | !mask(maxphyaddr as u32)
    }
}

register!(
    /// IA32_RTIT_OUTPUT_MASK_PTRS (0x561).
    #[derive(Debug)]
    RtitOutputMaskPtrs,
    IA32_RTIT_OUTPUT_MASK_PTRS
);

impl RtitOutputMaskPtrs {
    field!(
        /// Bits 6:0 LowerMask: always 0x7F.
        lower_mask, set_lower_mask, u8, 0, 7
    );
    field!(
        /// Bits 31:7 MaskOrTableOffset: single range: (size − 1) >> 7; ToPA: entry index.
        mask_or_table_offset, set_mask_or_table_offset, u32, 7, 25
    );
    field!(
        /// Bits 63:32 OutputOffset: offset into the current region.
        output_offset, set_output_offset, u32, 32, 32
    );

    /// Single range: the region size mask (bits 31:0).
    pub const fn size_mask(self) -> u32 {
        self.0 as u32
    }
}

register!(
    /// IA32_RTIT_CR3_MATCH (0x572): CR3 value for CR3 filtering.
    #[derive(Debug)]
    RtitCr3Match,
    IA32_RTIT_CR3_MATCH
);

impl RtitCr3Match {
    /// Bits 4:0 are reserved.
    pub const RESERVED: u64 = 0x1f;

    field!(
        /// Bits 63:5 CR3: the value compared (stored shifted; see [`Self::cr3`]).
        cr3_bits, set_cr3_bits, u64, 5, 59
    );

    /// The CR3 value matched (bits 4:0 zero).
    pub const fn cr3(self) -> u64 {
        self.0 & !Self::RESERVED
    }
}

/// IA32_RTIT_ADDRn_A / IA32_RTIT_ADDRn_B: one bound of address range n.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RtitAddr {
    /// Which pair (0..3).
    pub n: u8,
    /// true for ADDRn_B (end), false for ADDRn_A (start).
    pub is_b: bool,
    /// The linear address (inclusive bound).
    pub value: u64,
}

impl RtitAddr {
    /// The MSR number, None for n > 3.
    pub const fn msr(self) -> Option<u32> {
        if self.n >= MAX_ADDR_RANGES {
            None
        } else if self.is_b {
            Some(ia32_rtit_addr_b(self.n))
        } else {
            Some(ia32_rtit_addr_a(self.n))
        }
    }
}

/// Whether `addr` is canonical for a linear-address width (48 or 57).
pub const fn is_canonical(addr: u64, la_width: u8) -> bool {
    let shift = 64 - la_width as u32;
    (((addr << shift) as i64) >> shift) as u64 == addr
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msr_numbers() {
        assert_eq!(RtitCtl::MSR, 0x570);
        assert_eq!(RtitStatus::MSR, 0x571);
        assert_eq!(RtitCr3Match::MSR, 0x572);
        assert_eq!(RtitOutputBase::MSR, 0x560);
        assert_eq!(RtitOutputMaskPtrs::MSR, 0x561);
        assert_eq!(ia32_rtit_addr_a(3), 0x586);
        assert_eq!(ia32_rtit_addr_b(1), 0x583);
        assert_eq!(
            RtitAddr {
                n: 4,
                is_b: false,
                value: 0
            }
            .msr(),
            None
        );
    }

    #[test]
    fn ctl_positions() {
        let mut c = RtitCtl::default();
        c.set_trace_en(true)
            .set_branch_en(true)
            .set_mtc_freq(3)
            .set_psb_freq(5);
        c.set_addr_cfg(2, AddrCfg::TraceStop).set_dis_tnt(true);
        assert_eq!(c.0, 1 | 1 << 13 | 3 << 14 | 5 << 24 | 2 << 40 | 1 << 55);
        assert_eq!(c.addr_cfg(2), Some(AddrCfg::TraceStop));
        assert_eq!(c.addr_cfg(4), None);
        c.set_mtc_freq(0x1f); // masked to 4 bits
        assert_eq!(c.mtc_freq(), 0xf);
        assert_eq!(
            RtitCtl(1 << 18 | 1 << 63).reserved_bits(),
            1 << 18 | 1 << 63
        );
    }

    #[test]
    fn canonical() {
        assert!(is_canonical(0x7fff_ffff_ffff, 48));
        assert!(is_canonical(0xffff_8000_0000_0000, 48));
        assert!(!is_canonical(0x8000_0000_0000, 48));
        assert!(is_canonical(0x8000_0000_0000, 57));
    }
}
