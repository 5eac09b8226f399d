//! Live recording through perf, on a machine with Intel PT: ignored by default (no
//! machine of ours has PT); `cargo test -p pt-hal --test live -- --ignored` runs it,
//! and it fails with the probe's reason where PT cannot be used.

use std::process::Command;

use pt_hal::backend::{TraceBackend, TraceItem};
use pt_hal::config::TraceConfig;
use pt_hal::perf::sideband::SidebandReader;
use pt_hal::perf::{PerfBackend, PerfOptions, Target};
use pt_hal::probe::Readiness;

#[test]
#[ignore = "needs Intel PT hardware usable through perf (intel_pt PMU)"]
fn record_true() {
    let (_, _, readiness) = Readiness::host();
    assert!(
        readiness.can_trace(),
        "Intel PT cannot be used here: {}",
        readiness.summary()
    );
    let mut be = PerfBackend::new(
        Target::Command(Command::new("true")),
        PerfOptions::default(),
    )
    .unwrap();
    let cfg = TraceConfig {
        os: false,
        ..TraceConfig::default()
    };
    be.configure(&cfg).unwrap();
    be.start().unwrap();
    let status = be.wait().unwrap().unwrap();
    assert!(status.success());
    let mut items = Vec::new();
    be.read(&mut items).unwrap();
    let bytes: usize = items
        .iter()
        .map(|i| match i {
            TraceItem::Data { bytes, .. } => bytes.len(),
            _ => 0,
        })
        .sum();
    assert!(bytes > 0, "no trace recorded: {items:?}");
    let dir = std::env::temp_dir().join(format!("pt-hal-live-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    be.write_files(&items, &dir.join("trace.pt"), &dir.join("sideband.bin"))
        .unwrap();
    let sb = std::fs::read(dir.join("sideband.bin")).unwrap();
    let kinds: Vec<u32> = SidebandReader::new(&sb)
        .unwrap()
        .map(|r| r.unwrap().kind)
        .collect();
    // COMM (3) or ITRACE_START (12) marks the traced task.
    assert!(kinds.iter().any(|&k| k == 3 || k == 12), "{kinds:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
