//! TraceConfig → perf_event_attr mapping against fixture `format/` trees.

use std::path::{Path, PathBuf};

use pt_hal::config::{AddrRange, ConfigError, TraceConfig};
use pt_hal::msr::AddrCfg;
use pt_hal::perf::attr::{map_config, AttrError};
use pt_hal::sysfs::PmuInfo;

fn pmu(name: &str) -> PmuInfo {
    let root: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(name);
    PmuInfo::read(&root).unwrap()
}

#[test]
fn perf_default_matches_perf_tool() {
    // perf's default config `tsc,mtc,mtc_period=3,psb_period=3,pt,branch`.
    let a = map_config(&TraceConfig::perf_default(), &pmu("skylake-5.15"), None).unwrap();
    assert_eq!(a.pmu_type, 8);
    assert_eq!(a.config, 1 | 1 << 9 | 1 << 10 | 1 << 13 | 3 << 14 | 3 << 24);
    assert!(a.exclude_kernel && !a.exclude_user);
    assert_eq!(a.filter, "");
}

#[test]
fn every_term() {
    let cfg = TraceConfig {
        branch: false,
        dis_retc: true,
        cyc: Some(4),
        mtc: Some(6),
        psb_freq: 5,
        os: true,
        user: false,
        ..TraceConfig::default()
    };
    let a = map_config(&cfg, &pmu("skylake-5.15"), None).unwrap();
    // pt=1, branch=0, cyc, tsc, noretcomp, mtc, mtc_period=6, cyc_thresh=4, psb_period=5
    let want = 1 | 1 << 1 | 1 << 9 | 1 << 10 | 1 << 11 | 6 << 14 | 4 << 19 | 5 << 24;
    assert_eq!(a.config, want, "{:#x} vs {want:#x}", a.config);
    assert!(!a.exclude_kernel && a.exclude_user);
}

#[test]
fn features_beyond_the_cpu_are_rejected_before_the_kernel() {
    let skl = pmu("skylake-5.15");
    let ptw = TraceConfig {
        ptwrite: true,
        ..TraceConfig::default()
    };
    assert_eq!(
        map_config(&ptw, &skl, None),
        Err(AttrError::Invalid(ConfigError::PtwriteNotSupported))
    );
    let cr3 = TraceConfig {
        cr3_filter: Some(0x1000),
        ..TraceConfig::default()
    };
    assert_eq!(
        map_config(&cr3, &skl, None),
        Err(AttrError::DriverOwned { field: "CR3Filter" })
    );
    let none = TraceConfig {
        os: false,
        user: false,
        ..TraceConfig::default()
    };
    assert_eq!(map_config(&none, &skl, None), Err(AttrError::NothingTraced));
}

#[test]
fn old_kernel_without_terms() {
    let bdw = pmu("broadwell-old-kernel");
    // BranchEn stays forced on without asking for `pt`; TSC only.
    let a = map_config(&TraceConfig::default(), &bdw, None).unwrap();
    assert_eq!(a.config, 1 | 1 << 13 | 1 << 10);
    // Caps claim MTC support but the term is missing: a kernel-side gap.
    let mut p = bdw.clone();
    p.caps.insert("mtc".into(), 1);
    p.caps.insert("mtc_periods".into(), 0x249);
    p.format.remove("mtc");
    let m = TraceConfig {
        mtc: Some(3),
        ..TraceConfig::default()
    };
    assert_eq!(
        map_config(&m, &p, None),
        Err(AttrError::TermMissing { term: "mtc" })
    );
}

#[test]
fn address_filters() {
    let mut cfg = TraceConfig::default();
    cfg.ranges[0] = AddrRange {
        cfg: AddrCfg::Filter,
        start: 0x1000,
        end: 0x10ff,
    };
    cfg.ranges[1] = AddrRange {
        cfg: AddrCfg::TraceStop,
        start: 0x2000,
        end: 0x2000,
    };
    let a = map_config(&cfg, &pmu("skylake-5.15"), Some(Path::new("/bin/true"))).unwrap();
    assert_eq!(
        a.filter,
        "filter 0x1000/0x100@/bin/true,stop 0x2000/0x1@/bin/true"
    );
    cfg.ranges[1] = AddrRange {
        cfg: AddrCfg::Filter,
        start: 0x3000,
        end: 0x2000,
    };
    assert_eq!(
        map_config(&cfg, &pmu("skylake-5.15"), None),
        Err(AttrError::EmptyRange {
            start: 0x3000,
            end: 0x2000
        })
    );
    // Broadwell has no ranges at all.
    cfg.ranges[1] = AddrRange::default();
    assert!(matches!(
        map_config(&cfg, &pmu("broadwell-old-kernel"), None),
        Err(AttrError::Invalid(ConfigError::AddrRangeNotSupported {
            n: 0,
            available: 0
        }))
    ));
}
