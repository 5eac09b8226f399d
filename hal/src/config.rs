//! [`TraceConfig`]: what to trace, validated against [`Capabilities`].
//!
//! Validation is done on the register image ([`RtitRegs`]) so it is the same
//! check the hardware does on WRMSR: every combination that would #GP is a
//! named [`ConfigError`]. A simulator that receives raw register values runs
//! the same check through [`RtitRegs::validate`].

use crate::caps::Capabilities;
use crate::msr::{is_canonical, AddrCfg, RtitCr3Match, RtitCtl, MAX_ADDR_RANGES};

/// A configuration the hardware would reject (#GP on the MSR write).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Reserved IA32_RTIT_CTL bits are set.
    #[error("reserved IA32_RTIT_CTL bits {bits:#x} set")]
    ReservedCtlBits {
        /// The offending bits.
        bits: u64,
    },
    /// CYCEn or CycThresh without CPUID 14H EBX\[1\].
    #[error("CYC packets need CPUID 14H EBX[1] (configurable PSB and cycle-accurate mode)")]
    CycNotSupported,
    /// CycThresh encoding not in CPUID 14H.1 EBX\[15:0\].
    #[error("CycThresh {value} is not in the supported bitmap (CPUID 14H.1 EBX[15:0])")]
    CycThreshNotSupported {
        /// The encoding.
        value: u8,
    },
    /// PSBFreq ≠ 0 without CPUID 14H EBX\[1\].
    #[error("PSBFreq needs CPUID 14H EBX[1] (configurable PSB and cycle-accurate mode)")]
    PsbFreqNotConfigurable,
    /// PSBFreq encoding not in CPUID 14H.1 EBX\[31:16\].
    #[error("PSBFreq {value} is not in the supported bitmap (CPUID 14H.1 EBX[31:16])")]
    PsbFreqNotSupported {
        /// The encoding.
        value: u8,
    },
    /// MTCEn or MTCFreq without CPUID 14H EBX\[3\].
    #[error("MTC packets need CPUID 14H EBX[3]")]
    MtcNotSupported,
    /// MTCFreq encoding not in CPUID 14H.1 EAX\[31:16\].
    #[error("MTCFreq {value} is not in the supported bitmap (CPUID 14H.1 EAX[31:16])")]
    MtcFreqNotSupported {
        /// The encoding.
        value: u8,
    },
    /// BranchEn = 0 without CPUID 14H EBX\[3\] (COFI suppression).
    #[error("BranchEn = 0 needs CPUID 14H EBX[3] (COFI packet suppression)")]
    BranchEnRequired,
    /// PTWEn without CPUID 14H EBX\[4\].
    #[error("PTWEn needs CPUID 14H EBX[4] (PTWRITE)")]
    PtwriteNotSupported,
    /// FUPonPTW without CPUID 14H EBX\[4\].
    #[error("FUPonPTW needs CPUID 14H EBX[4] (PTWRITE)")]
    FupOnPtwNotSupported,
    /// PwrEvtEn without CPUID 14H EBX\[5\].
    #[error("PwrEvtEn needs CPUID 14H EBX[5] (power event trace)")]
    PowerEventsNotSupported,
    /// EventEn without CPUID 14H EBX\[7\].
    #[error("EventEn needs CPUID 14H EBX[7] (event trace)")]
    EventTraceNotSupported,
    /// DisTNT without CPUID 14H EBX\[8\].
    #[error("DisTNT needs CPUID 14H EBX[8] (TNT disable)")]
    TntDisableNotSupported,
    /// InjectPsbPmiOnEnable without CPUID 14H EBX\[6\].
    #[error("InjectPsbPmiOnEnable needs CPUID 14H EBX[6] (PSB and PMI preservation)")]
    InjectPsbPmiNotSupported,
    /// CR3Filter without CPUID 14H EBX\[0\].
    #[error("CR3Filter needs CPUID 14H EBX[0]")]
    Cr3FilterNotSupported,
    /// IA32_RTIT_CR3_MATCH bits 4:0 set.
    #[error("IA32_RTIT_CR3_MATCH {value:#x} sets reserved bits 4:0")]
    Cr3MatchReserved {
        /// The value.
        value: u64,
    },
    /// FabricEn without CPUID 14H ECX\[3\].
    #[error("FabricEn needs CPUID 14H ECX[3] (trace transport output)")]
    FabricNotSupported,
    /// ToPA = 1 without CPUID 14H ECX\[0\].
    #[error("ToPA output needs CPUID 14H ECX[0]")]
    TopaNotSupported,
    /// ToPA = 0 (single range) without CPUID 14H ECX\[2\].
    #[error("single-range output needs CPUID 14H ECX[2]")]
    SingleRangeNotSupported,
    /// ADDRn in use (or written) but the CPU has fewer range pairs.
    #[error("address range {n} used but CPUID 14H.1 EAX[2:0] reports {available} ranges")]
    AddrRangeNotSupported {
        /// The pair.
        n: u8,
        /// Pairs implemented.
        available: u8,
    },
    /// ADDRn_CFG holds a reserved encoding (3..15).
    #[error("ADDR{n}_CFG = {value} is reserved")]
    AddrCfgReserved {
        /// The pair.
        n: u8,
        /// The encoding.
        value: u8,
    },
    /// ADDRn_A/B is not canonical.
    #[error("ADDR{n}_{} = {addr:#x} is not canonical", if *is_b { "B" } else { "A" })]
    AddrNotCanonical {
        /// The pair.
        n: u8,
        /// The bound (false: A, true: B).
        is_b: bool,
        /// The address.
        addr: u64,
    },
}

/// The register image of a trace configuration (everything written before TraceEn).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RtitRegs {
    /// IA32_RTIT_CTL.
    pub ctl: RtitCtl,
    /// IA32_RTIT_CR3_MATCH.
    pub cr3_match: RtitCr3Match,
    /// IA32_RTIT_ADDRn_A / _B.
    pub addr: [(u64, u64); MAX_ADDR_RANGES as usize],
}

impl RtitRegs {
    /// The hardware's checks, in the order of the IA32_RTIT_CTL bits.
    ///
    /// `la_width` is the linear-address width (48, or 57 with 5-level paging).
    pub fn validate(&self, caps: &Capabilities, la_width: u8) -> Result<(), ConfigError> {
        let c = self.ctl;
        if c.reserved_bits() != 0 {
            return Err(ConfigError::ReservedCtlBits {
                bits: c.reserved_bits(),
            });
        }
        if (c.cyc_en() || c.cyc_thresh() != 0) && !caps.psb_cyc {
            return Err(ConfigError::CycNotSupported);
        }
        if c.cyc_thresh() != 0 && !caps.cyc_thresh_ok(c.cyc_thresh()) {
            return Err(ConfigError::CycThreshNotSupported {
                value: c.cyc_thresh(),
            });
        }
        if c.psb_freq() != 0 {
            if !caps.psb_cyc {
                return Err(ConfigError::PsbFreqNotConfigurable);
            }
            if !caps.psb_period_ok(c.psb_freq()) {
                return Err(ConfigError::PsbFreqNotSupported {
                    value: c.psb_freq(),
                });
            }
        }
        if (c.mtc_en() || c.mtc_freq() != 0) && !caps.mtc {
            return Err(ConfigError::MtcNotSupported);
        }
        if c.mtc_en() && !caps.mtc_period_ok(c.mtc_freq()) {
            return Err(ConfigError::MtcFreqNotSupported {
                value: c.mtc_freq(),
            });
        }
        if !c.branch_en() && !caps.mtc {
            return Err(ConfigError::BranchEnRequired);
        }
        if c.pwr_evt_en() && !caps.power_event_trace {
            return Err(ConfigError::PowerEventsNotSupported);
        }
        if c.fup_on_ptw() && !caps.ptwrite {
            return Err(ConfigError::FupOnPtwNotSupported);
        }
        if c.ptw_en() && !caps.ptwrite {
            return Err(ConfigError::PtwriteNotSupported);
        }
        if c.fabric_en() && !caps.trace_transport {
            return Err(ConfigError::FabricNotSupported);
        }
        if c.cr3_filter() && !caps.cr3_filtering {
            return Err(ConfigError::Cr3FilterNotSupported);
        }
        if self.cr3_match.0 & RtitCr3Match::RESERVED != 0 {
            return Err(ConfigError::Cr3MatchReserved {
                value: self.cr3_match.0,
            });
        }
        if c.topa() && !caps.topa_output {
            return Err(ConfigError::TopaNotSupported);
        }
        if !c.topa() && !c.fabric_en() && !caps.single_range_output {
            return Err(ConfigError::SingleRangeNotSupported);
        }
        if c.event_en() && !caps.event_trace {
            return Err(ConfigError::EventTraceNotSupported);
        }
        if c.dis_tnt() && !caps.tnt_disable {
            return Err(ConfigError::TntDisableNotSupported);
        }
        if c.inject_psb_pmi_on_enable() && !caps.psb_pmi_preservation {
            return Err(ConfigError::InjectPsbPmiNotSupported);
        }
        for n in 0..MAX_ADDR_RANGES {
            let cfg = c.addr_cfg(n).unwrap_or(AddrCfg::Unused);
            let (a, b) = self.addr[usize::from(n)];
            let used = cfg != AddrCfg::Unused || a != 0 || b != 0;
            if used && n >= caps.num_address_ranges {
                return Err(ConfigError::AddrRangeNotSupported {
                    n,
                    available: caps.num_address_ranges,
                });
            }
            if let AddrCfg::Reserved(value) = cfg {
                return Err(ConfigError::AddrCfgReserved { n, value });
            }
            for (is_b, addr) in [(false, a), (true, b)] {
                if !is_canonical(addr, la_width) {
                    return Err(ConfigError::AddrNotCanonical { n, is_b, addr });
                }
            }
        }
        Ok(())
    }
}

/// Output scheme selected by IA32_RTIT_CTL.ToPA.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutputKind {
    /// ToPA tables (ToPA = 1).
    #[default]
    Topa,
    /// One contiguous region (ToPA = 0).
    SingleRange,
}

/// One address range pair: ADDRn_CFG with its inclusive bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddrRange {
    /// What the range does.
    pub cfg: AddrCfg,
    /// ADDRn_A: first byte (inclusive).
    pub start: u64,
    /// ADDRn_B: last byte (inclusive).
    pub end: u64,
}

impl Default for AddrRange {
    fn default() -> Self {
        AddrRange {
            cfg: AddrCfg::Unused,
            start: 0,
            end: 0,
        }
    }
}

/// What to trace: the typed form of the IA32_RTIT_* configuration.
///
/// Shared by the perf backend (mapped to `perf_event_attr`) and the simulator
/// (mapped to [`RtitRegs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceConfig {
    /// BranchEn: COFI packets.
    pub branch: bool,
    /// OS: trace CPL 0.
    pub os: bool,
    /// User: trace CPL > 0.
    pub user: bool,
    /// TSCEn: TSC packets.
    pub tsc: bool,
    /// DisRETC: no RET compression.
    pub dis_retc: bool,
    /// CYCEn with this CycThresh encoding.
    pub cyc: Option<u8>,
    /// MTCEn with this MTCFreq encoding.
    pub mtc: Option<u8>,
    /// PSBFreq encoding (0 = 2 KiB, the default).
    pub psb_freq: u8,
    /// PTWEn.
    pub ptwrite: bool,
    /// FUPonPTW.
    pub fup_on_ptw: bool,
    /// PwrEvtEn.
    pub power_events: bool,
    /// EventEn.
    pub event_trace: bool,
    /// DisTNT.
    pub dis_tnt: bool,
    /// CR3Filter with this CR3 value.
    pub cr3_filter: Option<u64>,
    /// ADDR0..ADDR3.
    pub ranges: [AddrRange; MAX_ADDR_RANGES as usize],
    /// ToPA or single range.
    pub output: OutputKind,
    /// FabricEn.
    pub fabric: bool,
    /// InjectPsbPmiOnEnable.
    pub inject_psb_pmi_on_enable: bool,
}

impl Default for TraceConfig {
    /// Branch tracing of user and kernel code with TSC, ToPA output: valid on
    /// every PT CPU, Broadwell included.
    fn default() -> Self {
        TraceConfig {
            branch: true,
            os: true,
            user: true,
            tsc: true,
            dis_retc: false,
            cyc: None,
            mtc: None,
            psb_freq: 0,
            ptwrite: false,
            fup_on_ptw: false,
            power_events: false,
            event_trace: false,
            dis_tnt: false,
            cr3_filter: None,
            ranges: [AddrRange::default(); MAX_ADDR_RANGES as usize],
            output: OutputKind::Topa,
            fabric: false,
            inject_psb_pmi_on_enable: false,
        }
    }
}

impl TraceConfig {
    /// perf's default: `tsc,mtc,mtc_period=3,psb_period=3,pt,branch`, user space.
    pub fn perf_default() -> Self {
        TraceConfig {
            os: false,
            mtc: Some(3),
            psb_freq: 3,
            ..TraceConfig::default()
        }
    }

    /// The register image, with TraceEn = 1.
    pub fn to_regs(&self) -> RtitRegs {
        let mut ctl = RtitCtl(0);
        ctl.set_trace_en(true)
            .set_branch_en(self.branch)
            .set_os(self.os)
            .set_user(self.user)
            .set_tsc_en(self.tsc)
            .set_dis_retc(self.dis_retc)
            .set_cyc_en(self.cyc.is_some())
            .set_cyc_thresh(self.cyc.unwrap_or(0))
            .set_mtc_en(self.mtc.is_some())
            .set_mtc_freq(self.mtc.unwrap_or(0))
            .set_psb_freq(self.psb_freq)
            .set_ptw_en(self.ptwrite)
            .set_fup_on_ptw(self.fup_on_ptw)
            .set_pwr_evt_en(self.power_events)
            .set_event_en(self.event_trace)
            .set_dis_tnt(self.dis_tnt)
            .set_cr3_filter(self.cr3_filter.is_some())
            .set_topa(self.output == OutputKind::Topa)
            .set_fabric_en(self.fabric)
            .set_inject_psb_pmi_on_enable(self.inject_psb_pmi_on_enable);
        let mut addr = [(0, 0); MAX_ADDR_RANGES as usize];
        for (n, r) in self.ranges.iter().enumerate() {
            ctl.set_addr_cfg(n as u8, r.cfg);
            addr[n] = (r.start, r.end);
        }
        RtitRegs {
            ctl,
            cr3_match: RtitCr3Match(self.cr3_filter.unwrap_or(0)),
            addr,
        }
    }

    /// The configuration a register image describes (TraceEn is ignored).
    ///
    /// Encodings that do not fit the typed form (reserved bits, reserved
    /// ADDRn_CFG) are errors; capability checks are [`Self::validate`]'s job.
    /// A CycThresh/MTCFreq set while CYCEn/MTCEn is clear is dropped.
    pub fn from_regs(regs: &RtitRegs) -> Result<Self, ConfigError> {
        let c = regs.ctl;
        if c.reserved_bits() != 0 {
            return Err(ConfigError::ReservedCtlBits {
                bits: c.reserved_bits(),
            });
        }
        let mut ranges = [AddrRange::default(); MAX_ADDR_RANGES as usize];
        for (n, r) in ranges.iter_mut().enumerate() {
            let cfg = c.addr_cfg(n as u8).unwrap_or(AddrCfg::Unused);
            if let AddrCfg::Reserved(value) = cfg {
                return Err(ConfigError::AddrCfgReserved { n: n as u8, value });
            }
            *r = AddrRange {
                cfg,
                start: regs.addr[n].0,
                end: regs.addr[n].1,
            };
        }
        Ok(TraceConfig {
            branch: c.branch_en(),
            os: c.os(),
            user: c.user(),
            tsc: c.tsc_en(),
            dis_retc: c.dis_retc(),
            cyc: c.cyc_en().then(|| c.cyc_thresh()),
            mtc: c.mtc_en().then(|| c.mtc_freq()),
            psb_freq: c.psb_freq(),
            ptwrite: c.ptw_en(),
            fup_on_ptw: c.fup_on_ptw(),
            power_events: c.pwr_evt_en(),
            event_trace: c.event_en(),
            dis_tnt: c.dis_tnt(),
            cr3_filter: c.cr3_filter().then_some(regs.cr3_match.0),
            ranges,
            output: if c.topa() {
                OutputKind::Topa
            } else {
                OutputKind::SingleRange
            },
            fabric: c.fabric_en(),
            inject_psb_pmi_on_enable: c.inject_psb_pmi_on_enable(),
        })
    }

    /// Checks the configuration against the capabilities (48-bit linear addresses).
    pub fn validate(&self, caps: &Capabilities) -> Result<(), ConfigError> {
        self.validate_la(caps, 48)
    }

    /// Like [`Self::validate`] with an explicit linear-address width.
    pub fn validate_la(&self, caps: &Capabilities, la_width: u8) -> Result<(), ConfigError> {
        // Values wider than their fields would be silently truncated by to_regs.
        for (v, is_cyc) in [(self.cyc, true), (self.mtc, false)] {
            if let Some(v) = v.filter(|&v| v > 15) {
                return Err(if is_cyc {
                    ConfigError::CycThreshNotSupported { value: v }
                } else {
                    ConfigError::MtcFreqNotSupported { value: v }
                });
            }
        }
        if self.psb_freq > 15 {
            return Err(ConfigError::PsbFreqNotSupported {
                value: self.psb_freq,
            });
        }
        self.to_regs().validate(caps, la_width)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything supported: Skylake values plus every optional feature.
    fn all() -> Capabilities {
        Capabilities {
            max_subleaf: 1,
            cr3_filtering: true,
            psb_cyc: true,
            ip_filtering: true,
            mtc: true,
            ptwrite: true,
            power_event_trace: true,
            psb_pmi_preservation: true,
            event_trace: true,
            tnt_disable: true,
            topa_output: true,
            topa_multiple_entries: true,
            single_range_output: true,
            trace_transport: true,
            lip: false,
            num_address_ranges: 2,
            mtc_periods: 0x249,
            cycle_thresholds: 0x3fff,
            psb_periods: 0x3f,
            tsc_ratio: None,
        }
    }

    #[test]
    fn default_is_valid_everywhere_with_pt() {
        let broadwell = Capabilities {
            cr3_filtering: true,
            topa_output: true,
            ..Capabilities::default()
        };
        assert_eq!(TraceConfig::default().validate(&broadwell), Ok(()));
        assert_eq!(TraceConfig::perf_default().validate(&all()), Ok(()));
        assert_eq!(
            TraceConfig::perf_default().validate(&broadwell),
            Err(ConfigError::PsbFreqNotConfigurable)
        );
    }

    /// Each SDM #GP case, one at a time, with its own error.
    #[test]
    fn every_invalid_combination_has_its_error() {
        type Case = (
            &'static str,
            fn(&mut Capabilities, &mut RtitRegs),
            ConfigError,
        );
        let cases: &[Case] = &[
            (
                "reserved bit 18",
                |_, r| r.ctl.0 |= 1 << 18,
                ConfigError::ReservedCtlBits { bits: 1 << 18 },
            ),
            (
                "reserved bit 63",
                |_, r| r.ctl.0 |= 1 << 63,
                ConfigError::ReservedCtlBits { bits: 1 << 63 },
            ),
            (
                "CYCEn w/o psb_cyc",
                |c, r| {
                    c.psb_cyc = false;
                    r.ctl.set_cyc_en(true);
                },
                ConfigError::CycNotSupported,
            ),
            (
                "CycThresh not in bitmap",
                |c, r| {
                    c.cycle_thresholds = 0x1;
                    r.ctl.set_cyc_en(true).set_cyc_thresh(5);
                },
                ConfigError::CycThreshNotSupported { value: 5 },
            ),
            (
                "PSBFreq w/o psb_cyc",
                |c, r| {
                    c.psb_cyc = false;
                    r.ctl.set_psb_freq(1);
                },
                ConfigError::PsbFreqNotConfigurable,
            ),
            (
                "PSBFreq not in bitmap",
                |_, r| {
                    r.ctl.set_psb_freq(9);
                },
                ConfigError::PsbFreqNotSupported { value: 9 },
            ),
            (
                "MTCEn w/o mtc",
                |c, r| {
                    c.mtc = false;
                    r.ctl.set_mtc_en(true);
                },
                ConfigError::MtcNotSupported,
            ),
            (
                "MTCFreq not in bitmap",
                |_, r| {
                    r.ctl.set_mtc_en(true).set_mtc_freq(1);
                },
                ConfigError::MtcFreqNotSupported { value: 1 },
            ),
            (
                "BranchEn=0 w/o COFI suppression",
                |c, r| {
                    c.mtc = false;
                    r.ctl.set_mtc_en(false).set_mtc_freq(0).set_branch_en(false);
                },
                ConfigError::BranchEnRequired,
            ),
            (
                "PwrEvtEn",
                |c, r| {
                    c.power_event_trace = false;
                    r.ctl.set_pwr_evt_en(true);
                },
                ConfigError::PowerEventsNotSupported,
            ),
            (
                "FUPonPTW",
                |c, r| {
                    c.ptwrite = false;
                    r.ctl.set_fup_on_ptw(true);
                },
                ConfigError::FupOnPtwNotSupported,
            ),
            (
                "PTWEn",
                |c, r| {
                    c.ptwrite = false;
                    r.ctl.set_ptw_en(true);
                },
                ConfigError::PtwriteNotSupported,
            ),
            (
                "FabricEn",
                |c, r| {
                    c.trace_transport = false;
                    r.ctl.set_fabric_en(true);
                },
                ConfigError::FabricNotSupported,
            ),
            (
                "CR3Filter",
                |c, r| {
                    c.cr3_filtering = false;
                    r.ctl.set_cr3_filter(true);
                },
                ConfigError::Cr3FilterNotSupported,
            ),
            (
                "CR3_MATCH[4:0]",
                |_, r| {
                    r.cr3_match.0 = 0x1003;
                },
                ConfigError::Cr3MatchReserved { value: 0x1003 },
            ),
            (
                "ToPA w/o topa_output",
                |c, _| {
                    c.topa_output = false;
                },
                ConfigError::TopaNotSupported,
            ),
            (
                "single range w/o support",
                |c, r| {
                    c.single_range_output = false;
                    r.ctl.set_topa(false);
                },
                ConfigError::SingleRangeNotSupported,
            ),
            (
                "EventEn",
                |c, r| {
                    c.event_trace = false;
                    r.ctl.set_event_en(true);
                },
                ConfigError::EventTraceNotSupported,
            ),
            (
                "DisTNT",
                |c, r| {
                    c.tnt_disable = false;
                    r.ctl.set_dis_tnt(true);
                },
                ConfigError::TntDisableNotSupported,
            ),
            (
                "InjectPsbPmiOnEnable",
                |c, r| {
                    c.psb_pmi_preservation = false;
                    r.ctl.set_inject_psb_pmi_on_enable(true);
                },
                ConfigError::InjectPsbPmiNotSupported,
            ),
            (
                "ADDR2_CFG with 2 ranges",
                |_, r| {
                    r.ctl.set_addr_cfg(2, AddrCfg::Filter);
                },
                ConfigError::AddrRangeNotSupported { n: 2, available: 2 },
            ),
            (
                "ADDR3_A written with 2 ranges",
                |_, r| {
                    r.addr[3].0 = 0x1000;
                },
                ConfigError::AddrRangeNotSupported { n: 3, available: 2 },
            ),
            (
                "ADDR1_CFG reserved",
                |_, r| {
                    r.ctl.set_addr_cfg(1, AddrCfg::Reserved(3));
                },
                ConfigError::AddrCfgReserved { n: 1, value: 3 },
            ),
            (
                "ADDR0_B not canonical",
                |_, r| {
                    r.ctl.set_addr_cfg(0, AddrCfg::Filter);
                    r.addr[0] = (0x1000, 0x0000_8000_0000_0000);
                },
                ConfigError::AddrNotCanonical {
                    n: 0,
                    is_b: true,
                    addr: 0x0000_8000_0000_0000,
                },
            ),
        ];
        let mut seen = Vec::new();
        for (name, mutate, want) in cases {
            let mut caps = all();
            let mut regs = TraceConfig::perf_default().to_regs();
            assert_eq!(
                regs.validate(&caps, 48),
                Ok(()),
                "{name}: base must be valid"
            );
            mutate(&mut caps, &mut regs);
            assert_eq!(regs.validate(&caps, 48), Err(*want), "{name}");
            let d = std::mem::discriminant(want);
            if !seen.contains(&d) {
                seen.push(d);
            }
        }
        // 22 distinct variants: each failure mode has its own error.
        assert_eq!(seen.len(), 22);
    }

    #[test]
    fn round_trip_through_registers() {
        let mut cfg = TraceConfig::perf_default();
        cfg.cyc = Some(2);
        cfg.cr3_filter = Some(0x1234_5000);
        cfg.ranges[1] = AddrRange {
            cfg: AddrCfg::TraceStop,
            start: 0x40_0000,
            end: 0x40_0fff,
        };
        cfg.output = OutputKind::SingleRange;
        assert_eq!(cfg.validate(&all()), Ok(()));
        assert_eq!(TraceConfig::from_regs(&cfg.to_regs()), Ok(cfg));
        let wide = TraceConfig {
            mtc: Some(16),
            ..cfg
        };
        assert_eq!(
            wide.validate(&all()),
            Err(ConfigError::MtcFreqNotSupported { value: 16 })
        );
    }
}
