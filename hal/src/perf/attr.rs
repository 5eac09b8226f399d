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
