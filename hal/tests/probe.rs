//! Probe tests on recorded CPUID values and fixture sysfs trees.

use std::path::{Path, PathBuf};

use pt_hal::caps::{Capabilities, CpuidDump, CpuidProbe, TscRatio, Vendor};
use pt_hal::probe::{Blocker, ProcessLimits, Readiness};
use pt_hal::sysfs::{KernelProbe, PmuInfo, SysfsError};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

fn cpuid(name: &str) -> CpuidProbe {
    let text = std::fs::read_to_string(fixture(&format!("cpuid/{name}.cpuid"))).unwrap();
    CpuidProbe::from_dump(&CpuidDump::parse(&text).unwrap())
}

fn unprivileged() -> ProcessLimits {
    ProcessLimits {
        perfmon: false,
        ipc_lock: false,
        memlock: Some(64 * 1024),
        online_cpus: 4,
    }
}

#[test]
fn broadwell() {
    let p = cpuid("broadwell-e-i7-6900k");
    assert_eq!(p.identity.vendor, Vendor::Intel);
    assert_eq!((p.identity.family, p.identity.model), (6, 0x4f));
    assert!(p.identity.pt_supported && !p.identity.under_hypervisor);
    let c = p.caps.unwrap();
    assert_eq!(
        c,
        Capabilities {
            max_subleaf: 0,
            cr3_filtering: true,
            topa_output: true,
            ..Capabilities::default()
        }
    );
    // No sub-leaf 1: no ranges, no MTC/CYC/PSB encodings; no leaf 15H.
    assert_eq!(c.num_address_ranges, 0);
    assert_eq!(c.tsc_ratio, None);
}

#[test]
fn skylake() {
    let p = cpuid("skylake-kbl-r-i5-8350u");
    assert_eq!(
        (p.identity.family, p.identity.model, p.identity.stepping),
        (6, 0x8e, 0xa)
    );
    let c = p.caps.unwrap();
    assert_eq!(c.max_subleaf, 1);
    assert!(c.cr3_filtering && c.psb_cyc && c.ip_filtering && c.mtc);
    assert!(!c.ptwrite && !c.power_event_trace && !c.event_trace && !c.tnt_disable);
    assert!(c.topa_output && c.topa_multiple_entries && c.single_range_output);
    assert!(!c.trace_transport && !c.lip);
    assert_eq!(c.num_address_ranges, 2);
    assert_eq!(
        (c.mtc_periods, c.cycle_thresholds, c.psb_periods),
        (0x249, 0x3fff, 0x3f)
    );
    assert_eq!(
        c.tsc_ratio,
        Some(TscRatio {
            numerator: 158,
            denominator: 2,
            crystal_hz: None
        })
    );
}

#[test]
fn alder_lake() {
    let p = cpuid("alderlake-p-i7-12700h");
    assert_eq!((p.identity.family, p.identity.model), (6, 0x9a));
    let c = p.caps.unwrap();
    assert!(c.ptwrite && c.psb_pmi_preservation && c.mtc && c.ip_filtering);
    assert!(!c.power_event_trace && !c.event_trace && !c.tnt_disable);
    assert_eq!(c.num_address_ranges, 2);
    assert_eq!(
        (c.mtc_periods, c.cycle_thresholds, c.psb_periods),
        (0x249, 0x3f, 0x3f)
    );
    assert_eq!(
        c.tsc_ratio,
        Some(TscRatio {
            numerator: 0x8c,
            denominator: 2,
            crystal_hz: Some(38_400_000)
        })
    );
}

#[test]
fn without_pt() {
    let hsw = cpuid("haswell-kvm-guest");
    assert_eq!(hsw.identity.vendor, Vendor::Intel);
    assert!(!hsw.identity.pt_supported && hsw.identity.under_hypervisor);
    assert_eq!(hsw.identity.hypervisor.as_deref(), Some("KVMKVMKVM"));
    assert_eq!(hsw.caps, None);
    let amd = cpuid("amd-epyc-kvm-guest");
    assert_eq!(amd.identity.vendor, Vendor::Amd);
    assert_eq!(amd.caps, None);
}

#[test]
fn sysfs_caps_match_cpuid() {
    let pmu = PmuInfo::read(&fixture("sysfs/skylake-5.15")).unwrap();
    assert_eq!(pmu.pmu_type, 8);
    assert_eq!(pmu.format.len(), 14);
    assert_eq!(pmu.nr_addr_filters, Some(2));
    assert_eq!(pmu.tsc_art_ratio, Some((158, 2)));
    let from_cpuid = cpuid("skylake-kbl-r-i5-8350u").caps.unwrap();
    assert_eq!(pmu.capabilities(), from_cpuid);

    let bdw = PmuInfo::read(&fixture("sysfs/broadwell-old-kernel")).unwrap();
    assert!(!bdw.format.contains_key("ptw"));
    assert_eq!(
        bdw.capabilities(),
        cpuid("broadwell-e-i7-6900k").caps.unwrap()
    );
}

#[test]
fn sysfs_errors() {
    assert!(matches!(
        PmuInfo::read(&fixture("sysfs/no-pmu")),
        Err(SysfsError::NoPmu(_))
    ));
    match PmuInfo::read(&fixture("sysfs/malformed")) {
        Err(SysfsError::Parse { path, text, .. }) => {
            assert!(path.ends_with("format/tsc"));
            assert_eq!(text, "config:ten");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn readiness_reasons() {
    let limits = unprivileged();
    let ok = Readiness::assess(
        &cpuid("skylake-kbl-r-i5-8350u"),
        &KernelProbe::read(&fixture("sysfs/skylake-5.15")),
        &limits,
        true,
    );
    assert!(ok.can_trace(), "{ok:?}");
    assert!(ok.notes.iter().any(|n| n.contains("user space")));

    let bdw = Readiness::assess(
        &cpuid("broadwell-e-i7-6900k"),
        &KernelProbe::read(&fixture("sysfs/broadwell-old-kernel")),
        &limits,
        true,
    );
    assert_eq!(bdw.blockers, vec![Blocker::Paranoid { level: 3 }]);
    let root = ProcessLimits {
        perfmon: true,
        ..limits
    };
    assert!(Readiness::assess(
        &cpuid("broadwell-e-i7-6900k"),
        &KernelProbe::read(&fixture("sysfs/broadwell-old-kernel")),
        &root,
        true
    )
    .can_trace());

    let hsw = Readiness::assess(
        &cpuid("haswell-kvm-guest"),
        &KernelProbe::read(&fixture("sysfs/no-pmu")),
        &limits,
        true,
    );
    assert_eq!(
        hsw.blockers[0],
        Blocker::HiddenByHypervisor {
            hypervisor: Some("KVMKVMKVM".into())
        }
    );
    assert!(matches!(hsw.blockers[1], Blocker::NoPmu { .. }));
    assert!(hsw.summary().contains("hypervisor"));

    let amd = Readiness::assess(
        &cpuid("amd-epyc-kvm-guest"),
        &KernelProbe::read(&fixture("sysfs/no-pmu")),
        &limits,
        true,
    );
    assert!(matches!(&amd.blockers[0], Blocker::NotIntel { vendor } if vendor == "AMD"));

    let tiny = Readiness::assess(
        &cpuid("skylake-kbl-r-i5-8350u"),
        &KernelProbe::read(&fixture("sysfs/tiny-mlock")),
        &limits,
        true,
    );
    assert!(
        matches!(tiny.blockers[..], [Blocker::MlockLimit { .. }]),
        "{tiny:?}"
    );
    let lock = ProcessLimits {
        ipc_lock: true,
        ..limits
    };
    assert!(Readiness::assess(
        &cpuid("skylake-kbl-r-i5-8350u"),
        &KernelProbe::read(&fixture("sysfs/tiny-mlock")),
        &lock,
        true
    )
    .can_trace());

    let bare = Readiness::assess(
        &cpuid("skylake-kbl-r-i5-8350u"),
        &KernelProbe::read(&fixture("sysfs/skylake-5.15")),
        &limits,
        false,
    );
    assert_eq!(bare.blockers, vec![Blocker::NotX86]);
}

#[test]
fn ptprobe_explains_here() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ptprobe"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let (_, _, r) = Readiness::host();
    if r.can_trace() {
        assert!(text.contains("tracing is possible"), "{text}");
    } else {
        assert!(text.contains("not possible"), "{text}");
        assert!(text.contains("simulator"), "{text}");
        for b in &r.blockers {
            assert!(text.contains(&b.to_string()), "{text}");
        }
    }
    let fixture_run = std::process::Command::new(env!("CARGO_BIN_EXE_ptprobe"))
        .arg("--cpuid")
        .arg(fixture("cpuid/alderlake-p-i7-12700h.cpuid"))
        .arg("--root")
        .arg(fixture("sysfs/skylake-5.15"))
        .output()
        .unwrap();
    let text = String::from_utf8(fixture_run.stdout).unwrap();
    assert!(text.contains("ptwrite                yes"), "{text}");
    assert!(
        text.contains("psb_periods            0x003f {0,1,2,3,4,5}"),
        "{text}"
    );
}
