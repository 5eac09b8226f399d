//! pt-coverage's bitmap with libxdc's formula ([`EdgeHash::Libxdc`]) equals libxdc's,
//! byte for byte, on the same traces: generated runs of one program without return
//! compression and timing packets (what libxdc decodes), and, if given, the long
//! trace of a workload folder that `coverage_compare` exported from a recording.
//!
//! libxdc is never part of the repository: `benches/libxdc/compare.sh LIBXDC_SRC ...`
//! builds it and its harness in a scratch folder; point `LIBXDC_HARNESS` at that
//! harness (`WORK_DIR/harness`), and optionally `LIBXDC_WORKLOAD` at a workload
//! folder (`WORK_DIR/traces`).

use std::path::Path;
use std::process::Command;

use pt_benches::coverage::Workload;
use pt_benches::flow::{self, CallsMix};
use pt_coverage::{CoverageDecoder, EdgeHash, Options};

const MAP: usize = 1 << 16;

/// libxdc's map of `dir`'s long trace against ours; panics with the first bytes that
/// differ.
fn same_map(harness: &Path, dir: &Path, what: &str) {
    let status = Command::new(harness)
        .arg("--map")
        .arg(dir)
        .status()
        .expect("run the libxdc harness");
    assert!(status.success(), "{what}: libxdc failed ({status})");
    let theirs = std::fs::read(dir.join("long.libxdc.map")).expect("libxdc's map");
    let w = Workload::load(dir).expect("the workload");
    let mut cov = CoverageDecoder::new(Options {
        map_size: MAP,
        hash: EdgeHash::Libxdc,
        config: w.config,
        ..Options::default()
    });
    let out = cov.decode(&w.long, &w.image);
    assert_eq!(out.errors, 0, "{what}: {:?}", out.first_error);
    let differ: Vec<_> = (0..MAP)
        .filter(|&i| cov.map()[i] != theirs[i])
        .map(|i| (i, cov.map()[i], theirs[i]))
        .collect();
    assert!(
        differ.is_empty(),
        "{what}: {} of {MAP} bytes differ (index, ours, libxdc): {:?}",
        differ.len(),
        &differ[..differ.len().min(20)]
    );
    assert!(
        theirs.iter().filter(|&&b| b != 0).count() >= 20,
        "{what}: too few edges to compare"
    );
}

#[test]
#[ignore = "needs libxdc (benches/libxdc/compare.sh builds it)"]
fn bitmap_equals_libxdc() {
    let harness = pt_testkit::env_path(
        "LIBXDC_HARNESS",
        "the libxdc harness that benches/libxdc/compare.sh builds (WORK_DIR/harness)",
    );
    for seed in [1, 2, 3] {
        let t = flow::calls_mixed_run(400_000, CallsMix::NORETCOMP_UNTIMED, seed);
        let dir = pt_testkit::target_tmp().join(format!("libxdc-bitmap-{seed}"));
        Workload::of_trace(&t).export(&dir).expect("export");
        same_map(&harness, &dir, &format!("generated run {seed}"));
    }
    if let Some(dir) = std::env::var_os("LIBXDC_WORKLOAD") {
        same_map(&harness, Path::new(&dir), "LIBXDC_WORKLOAD");
    }
}
