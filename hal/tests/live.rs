//! Live recording through perf, on a machine with Intel PT: ignored by default (no
//! machine of ours has PT); `cargo test -p pt-hal --test live -- --ignored` runs it,
//! and it fails with the probe's reason where PT cannot be used.

use std::process::Command;

use pt_hal::backend::{TraceBackend, TraceItem};
use pt_hal::config::TraceConfig;
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
    let data = dir.join("perf.data");
    be.write_perf_data(&items, &data, &["live".into()]).unwrap();
    let file = pt_perf_data::MappedFile::open(&data).unwrap();
    let perf = file.parse().unwrap();
    let mut comm = false;
    let mut trace = 0;
    for r in perf.records() {
        match r.unwrap().1 {
            pt_perf_data::Record::Comm(_) | pt_perf_data::Record::ItraceStart(_) => comm = true,
            pt_perf_data::Record::Auxtrace(a) => trace += a.data.len(),
            _ => {}
        }
    }
    // COMM or ITRACE_START marks the traced task; the trace is all there.
    assert!(comm);
    assert_eq!(trace, bytes);
    let _ = std::fs::remove_dir_all(&dir);
}
