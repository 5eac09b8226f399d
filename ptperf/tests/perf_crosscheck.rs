//! perf itself judges what `ptperf record` writes on the simulated PT CPU:
//! for real programs in several configurations, `perf script --itrace=i1i
//! -F tid,ip` lists exactly the recorded ground truth (the execution log,
//! restricted to what the configuration traces), thread by thread, and
//! `perf report --stdio` runs without a warning. Snapshot recordings list a
//! window of it: the end of the execution for `-Se`, what came before each
//! SIGUSR2 otherwise.
//!
//! One ptrace recording of the libc sample is replayed (`--source log`) in
//! the other configurations, which keeps the test fast.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::*;

/// The sample recorded once with perf's default configuration.
fn sample_recording() -> &'static (PathBuf, PathBuf) {
    static R: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    R.get_or_init(|| {
        let d = dir("perf-crosscheck-sample");
        let data = record(&d, "default", &[], &[sample().as_os_str()]);
        (d, data)
    })
}

/// perf's instructions equal the ground truth, thread by thread; perf
/// report is quiet.
fn check_exact(what: &str, data: &Path, log: &Path) -> BTreeMap<u32, Vec<u64>> {
    let got = perf_instructions(data);
    let want = truth(data, log);
    assert!(want.values().all(|v| !v.is_empty()), "{what}: {want:?}");
    assert_same_threads(what, &got, &want);
    perf_report_quiet(data);
    got
}

#[test]
fn default_configuration() {
    let (_, data) = sample_recording();
    let got = check_exact("default", data, &log_of(data));
    assert!(got.values().next().unwrap().len() > 100_000);
}

#[test]
fn replayed_configurations() {
    let (d, data) = sample_recording();
    let log = log_of(data);
    let sample = sample().display().to_string();
    let filter = format!("filter main @ {sample}");
    let cases: [(&str, Vec<&str>); 4] = [
        ("noretcomp", vec!["-e", "intel_pt/noretcomp/u"]),
        ("psb-2k", vec!["-e", "intel_pt/psb_period=0/u"]),
        (
            "tsc-mtc-cyc",
            vec!["-e", "intel_pt/tsc,mtc,mtc_period=0,cyc,cyc_thresh=1/u"],
        ),
        ("filter-main", vec!["--filter", &filter]),
    ];
    let full = truth(data, &log);
    for (name, args) in cases {
        let out = replay(d, name, &args, &log);
        let got = check_exact(name, &out, &log);
        let n: usize = got.values().map(Vec::len).sum();
        if name == "filter-main" {
            // Only main's instructions: fewer than the whole run, and all in main.
            assert!(n > 100 && n < full.values().map(Vec::len).sum::<usize>() / 10);
        } else {
            assert_eq!(got, full, "{name}");
        }
    }
}

#[test]
fn snapshot_at_exit() {
    // A 4 KiB AUX area and a PSB every 2 KiB: the ring wraps many times and
    // keeps the end of the run, from its first PSB on.
    let (d, data) = sample_recording();
    let log = log_of(data);
    let out = replay(
        d,
        "snapshot",
        &["-e", "intel_pt/psb_period=0/u", "-Se4096"],
        &log,
    );
    let got = perf_instructions(&out);
    let want = truth(&out, &log);
    assert_eq!(got.len(), 1);
    let (tid, g) = got.iter().next().unwrap();
    let w = &want[tid];
    assert!(
        g.len() > 1000 && g.len() < w.len() / 2,
        "{} of {}",
        g.len(),
        w.len()
    );
    assert_eq!(
        g[..],
        w[w.len() - g.len()..],
        "not the end of the execution"
    );
    perf_report_quiet(&out);
}

#[test]
fn snapshots_on_sigusr2() {
    // An endless loop; two snapshots on SIGUSR2, then Ctrl-C (no exit
    // snapshot without `e`). The ring never wraps: the snapshots together
    // are the execution up to the second one.
    let d = dir("perf-crosscheck-sigusr2");
    let data = d.join("loop.data");
    let log = log_of(&data);
    let child = start_spin(&["-e", "intel_pt/psb_period=0/u", "-S65536"], &data);
    // Each snapshot is on disk once taken: wait for it before the next.
    for n in 1..=2 {
        signal(&child, libc::SIGUSR2);
        wait_for_auxtrace(&data, n);
    }
    signal(&child, libc::SIGINT);
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    // perf record dies of the signal that stopped it, after its closing lines.
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(o.status.signal(), Some(libc::SIGINT), "{err}");
    assert!(err.contains("[ perf record: Captured and wrote"), "{err}");
    assert_eq!(auxtrace_count(&data), 2, "two snapshots, no more");
    let got = perf_instructions(&data);
    let want = truth(&data, &log);
    let (tid, g) = got.iter().next().unwrap();
    let w = &want[tid];
    assert!(
        g.len() > 1000 && g.len() < w.len(),
        "{} of {}",
        g.len(),
        w.len()
    );
    assert_eq!(
        g[..],
        w[..g.len()],
        "the snapshots are not the execution up to the second"
    );
    perf_report_quiet(&data);
}

#[test]
fn two_threads() {
    let d = dir("perf-crosscheck-threads");
    let data = record(&d, "threads", &[], &[threads().as_os_str()]);
    let got = check_exact("threads", &data, &log_of(&data));
    assert_eq!(got.len(), 2);
}

#[test]
fn fork_and_exec() {
    let d = dir("perf-crosscheck-shell");
    let t = tiny().display().to_string();
    let script = format!("{t} x; exec {t} w");
    let data = record(
        &d,
        "shell",
        &[],
        &[OsStr::new("sh"), OsStr::new("-c"), OsStr::new(&script)],
    );
    let got = check_exact("fork and exec", &data, &log_of(&data));
    assert_eq!(got.len(), 2, "the shell and its child");
}

#[test]
fn vdso_code_through_the_build_id_cache() {
    let d = dir("perf-crosscheck-vdso");
    let data = record(&d, "clock", &[], &[clock().as_os_str()]);
    let got = check_exact("vdso", &data, &log_of(&data));
    // Some of it ran in the vDSO, which perf read from OUT.debug.
    let (out, _) = perf(&[
        OsStr::new("--buildid-dir"),
        debug_of(&data).as_os_str(),
        OsStr::new("script"),
        OsStr::new("-i"),
        data.as_os_str(),
        OsStr::new("--itrace=i1i"),
        OsStr::new("-F"),
        OsStr::new("ip,dso"),
    ]);
    let vdso = out.lines().filter(|l| l.contains("[vdso]")).count();
    assert!(
        vdso > 10,
        "{vdso} vDSO instructions of {}",
        got.values().map(Vec::len).sum::<usize>()
    );
}
