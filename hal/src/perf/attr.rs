//! [`TraceConfig`] → `perf_event_attr.config` through the PMU's `format/` terms.

use std::path::Path;

use crate::config::{ConfigError, TraceConfig};
use crate::msr::AddrCfg;
use crate::sysfs::{ConfigWord, PmuInfo};

/// Why a configuration cannot be expressed to the perf driver.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AttrError {
    /// The configuration is invalid for this CPU.
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    /// The kernel's PMU lacks a format term the configuration needs.
    #[error("the intel_pt PMU has no `{term}` format term (kernel too old?)")]
    TermMissing {
        /// The term.
        term: &'static str,
    },
    /// A value does not fit its format term.
    #[error("value {value} does not fit the `{term}` format term")]
    ValueTooWide {
        /// The term.
        term: &'static str,
        /// The value.
        value: u64,
    },
    /// A format term lives outside `attr.config`, which this mapping does not use.
    #[error("format term `{term}` is not in attr.config")]
    NotInConfig {
        /// The term.
        term: &'static str,
    },
    /// The driver owns this IA32_RTIT_CTL field and never sets it.
    #[error("the perf driver cannot set {field}")]
    DriverOwned {
        /// The field (SDM name).
        field: &'static str,
    },
    /// An address range ends before it starts.
    #[error("address range {start:#x}..={end:#x} is empty")]
    EmptyRange {
        /// ADDRn_A.
        start: u64,
        /// ADDRn_B.
        end: u64,
    },
    /// OS = 0 and User = 0: nothing would be traced.
    #[error("neither OS nor User is set: nothing would be traced")]
    NothingTraced,
}

/// The perf side of a [`TraceConfig`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerfAttr {
    /// `attr.type`: the PMU type.
    pub pmu_type: u32,
    /// `attr.config`.
    pub config: u64,
    /// `attr.exclude_kernel` (= !OS).
    pub exclude_kernel: bool,
    /// `attr.exclude_user` (= !User).
    pub exclude_user: bool,
    /// The address filter string for `PERF_EVENT_IOC_SET_FILTER` (empty: none).
    pub filter: String,
}

/// Maps `cfg` to perf terms of `pmu`.
///
/// The configuration is first validated against the PMU's exported
/// capabilities. Address ranges become perf address filters
/// (`filter`/`stop START/SIZE`, with `@object` when `object` is given, in
/// which case the addresses are offsets in that file). The output scheme is
/// the driver's choice and is not mapped.
pub fn map_config(
    cfg: &TraceConfig,
    pmu: &PmuInfo,
    object: Option<&Path>,
) -> Result<PerfAttr, AttrError> {
    cfg.validate(&pmu.capabilities())?;
    if cfg.cr3_filter.is_some() {
        return Err(AttrError::DriverOwned { field: "CR3Filter" });
    }
    if cfg.fabric {
        return Err(AttrError::DriverOwned { field: "FabricEn" });
    }
    if cfg.inject_psb_pmi_on_enable {
        return Err(AttrError::DriverOwned {
            field: "InjectPsbPmiOnEnable",
        });
    }
    if !cfg.os && !cfg.user {
        return Err(AttrError::NothingTraced);
    }
    let mut config = 0u64;
    let mut set = |term: &'static str, value: u64| -> Result<(), AttrError> {
        let t = pmu
            .format
            .get(term)
            .ok_or(AttrError::TermMissing { term })?;
        if t.word != ConfigWord::Config {
            return Err(AttrError::NotInConfig { term });
        }
        config |= t
            .encode(value)
            .ok_or(AttrError::ValueTooWide { term, value })?;
        Ok(())
    };
    // `pt` lets BranchEn follow the `branch` term; without it the driver
    // forces BranchEn on, so only BranchEn = 0 strictly needs the terms.
    let has_pt_terms = pmu.format.contains_key("pt") && pmu.format.contains_key("branch");
    if !cfg.branch || has_pt_terms {
        set("pt", 1)?;
        set("branch", u64::from(cfg.branch))?;
    }
    if cfg.tsc {
        set("tsc", 1)?;
    }
    if cfg.dis_retc {
        set("noretcomp", 1)?;
    }
    if let Some(t) = cfg.cyc {
        set("cyc", 1)?;
        if t != 0 {
            set("cyc_thresh", u64::from(t))?;
        }
    }
    if let Some(p) = cfg.mtc {
        set("mtc", 1)?;
        set("mtc_period", u64::from(p))?;
    }
    if cfg.psb_freq != 0 {
        set("psb_period", u64::from(cfg.psb_freq))?;
    }
    if cfg.ptwrite {
        set("ptw", 1)?;
    }
    if cfg.fup_on_ptw {
        set("fup_on_ptw", 1)?;
    }
    if cfg.power_events {
        set("pwr_evt", 1)?;
    }
    if cfg.event_trace {
        set("event", 1)?;
    }
    if cfg.dis_tnt {
        set("notnt", 1)?;
    }
    let mut filters = Vec::new();
    for r in &cfg.ranges {
        let action = match r.cfg {
            AddrCfg::Filter => "filter",
            AddrCfg::TraceStop => "stop",
            _ => continue,
        };
        if r.end < r.start {
            return Err(AttrError::EmptyRange {
                start: r.start,
                end: r.end,
            });
        }
        let size = (r.end - r.start).saturating_add(1);
        let mut f = format!("{action} {:#x}/{:#x}", r.start, size);
        if let Some(obj) = object {
            f.push('@');
            f.push_str(&obj.display().to_string());
        }
        filters.push(f);
    }
    Ok(PerfAttr {
        pmu_type: pmu.pmu_type,
        config,
        exclude_kernel: !cfg.os,
        exclude_user: !cfg.user,
        filter: filters.join(","),
    })
}

/// The config bits the `intel_pt` PMU accepts (the kernel's PT_CONFIG_MASK): every term of
/// its `format/` directory, at the standard positions, which mirror IA32_RTIT_CTL.
pub const PT_CONFIG_MASK: u64 = {
    use pt_perf_data::intel_pt::config::*;
    PT | CYC
        | PWR_EVT
        | FUP_ON_PTW
        | MTC
        | TSC
        | NORETCOMP
        | PTW
        | BRANCH
        | MTC_PERIOD_MASK
        | CYC_THRESH_MASK
        | PSB_PERIOD_MASK
        | EVENT
        | NOTNT
};

/// The `intel_pt` config of `cfg` at the standard bit positions (every kernel's PMU uses
/// them; [`map_config`] reads them from sysfs instead): `pt` set, so that `branch`
/// follows BranchEn. Address ranges, CR3 filtering and the output scheme are not part of
/// the config (perf passes ranges as an address filter).
pub fn standard_config(cfg: &TraceConfig) -> u64 {
    use pt_perf_data::intel_pt::config::*;
    let mut c = PT;
    let mut set = |on: bool, bits: u64| {
        if on {
            c |= bits;
        }
    };
    set(cfg.branch, BRANCH);
    set(cfg.tsc, TSC);
    set(cfg.dis_retc, NORETCOMP);
    set(cfg.ptwrite, PTW);
    set(cfg.fup_on_ptw, FUP_ON_PTW);
    set(cfg.power_events, PWR_EVT);
    set(cfg.event_trace, EVENT);
    set(cfg.dis_tnt, NOTNT);
    if let Some(t) = cfg.cyc {
        c |= CYC | cyc_thresh(u64::from(t));
    }
    if let Some(p) = cfg.mtc {
        c |= MTC | mtc_period(u64::from(p));
    }
    c | psb_period(u64::from(cfg.psb_freq))
}

/// A config the `intel_pt` PMU does not accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("config bits {bits:#x} are not intel_pt format terms")]
pub struct UnknownConfigBits {
    /// The bits outside [`PT_CONFIG_MASK`].
    pub bits: u64,
}

/// What the `intel_pt` driver programs for an event with this config (standard bit
/// positions) and these exclude flags: the inverse of [`standard_config`]. As the
/// driver does, BranchEn follows `branch` only when `pt` (bit 0) is set and is on
/// otherwise; CYC thresholds and MTC periods are kept only with CYCEn and MTCEn.
pub fn trace_config_of(
    config: u64,
    exclude_kernel: bool,
    exclude_user: bool,
) -> Result<TraceConfig, UnknownConfigBits> {
    use pt_perf_data::intel_pt::config::*;
    if config & !PT_CONFIG_MASK != 0 {
        return Err(UnknownConfigBits {
            bits: config & !PT_CONFIG_MASK,
        });
    }
    let on = |bits: u64| config & bits != 0;
    let field = |mask: u64| ((config & mask) >> mask.trailing_zeros()) as u8;
    Ok(TraceConfig {
        branch: !on(PT) || on(BRANCH),
        os: !exclude_kernel,
        user: !exclude_user,
        tsc: on(TSC),
        dis_retc: on(NORETCOMP),
        cyc: on(CYC).then(|| field(CYC_THRESH_MASK)),
        mtc: on(MTC).then(|| field(MTC_PERIOD_MASK)),
        psb_freq: field(PSB_PERIOD_MASK),
        ptwrite: on(PTW),
        fup_on_ptw: on(FUP_ON_PTW),
        power_events: on(PWR_EVT),
        event_trace: on(EVENT),
        dis_tnt: on(NOTNT),
        ..TraceConfig::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_config_round_trips_and_follows_the_driver() {
        use pt_perf_data::intel_pt::config::*;
        let d = TraceConfig::perf_default();
        assert_eq!(standard_config(&d), DEFAULT);
        assert_eq!(trace_config_of(DEFAULT, true, false).unwrap(), d);
        let every = TraceConfig {
            branch: false,
            dis_retc: true,
            cyc: Some(4),
            mtc: Some(6),
            psb_freq: 5,
            ptwrite: true,
            fup_on_ptw: true,
            power_events: true,
            event_trace: true,
            dis_tnt: true,
            os: true,
            user: false,
            tsc: false,
            ..TraceConfig::default()
        };
        let c = standard_config(&every);
        assert_eq!(trace_config_of(c, false, true).unwrap(), every);
        // Without `pt` the driver keeps BranchEn on whatever `branch` says.
        assert!(trace_config_of(TSC, true, false).unwrap().branch);
        assert!(!trace_config_of(PT | TSC, true, false).unwrap().branch);
        assert_eq!(
            trace_config_of(1 << 6, true, false),
            Err(UnknownConfigBits { bits: 1 << 6 })
        );
    }
}
