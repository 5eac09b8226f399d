//! `ptperf script` and `ptperf report` on recordings of samples without Intel PT
//! trace, as perf reads them: `perf record -e cpu-clock:u -e task-clock:u` of
//! a program the test builds, and the output of `ptperf inject --itrace` and
//! `perf inject --itrace` of a simulated Intel PT recording. perf 6.1 judges:
//! the same bytes for the default fields, `-F` selections (and their errors)
//! and `report --stdio`.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::*;

fn busy() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| build("busy", "tests/programs/busy.c", &["-O1"]))
}

fn perf_cmd() -> Command {
    let mut c = Command::new(pt_testkit::tool("perf", "linux-perf"));
    c.env("PERF_PAGER", "cat").env("HOME", std::env::temp_dir());
    c
}

fn run(mut c: Command) -> Output {
    c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"))
}

/// perf's report without its closing tip (`#`, `# (Tip: …)`, `#`).
fn without_tip(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    let n = lines.len();
    let cut = if n >= 3 && lines[n - 2].starts_with("# (Tip:") && lines[n - 1] == "#" {
        n - 3
    } else {
        n
    };
    lines[..cut].iter().map(|l| format!("{l}\n")).collect()
}

/// `ptperf script ARGS -i DATA` and `perf script ARGS -i DATA`: the same
/// stdout, and where perf refuses the fields, the same message and failure.
fn same_script(data: &Path, args: &[&str]) -> usize {
    let mut p = perf_cmd();
    p.arg("script").args(args).arg("-i").arg(data);
    let theirs = run(p);
    let mut o = ptperf();
    o.arg("script").args(args).arg("-i").arg(data);
    let ours = run(o);
    let (t, u) = (
        String::from_utf8_lossy(&theirs.stdout),
        String::from_utf8_lossy(&ours.stdout),
    );
    if theirs.status.success() {
        assert!(ours.status.success(), "{args:?}: {}", stderr(&ours));
        if let Some(i) = t.lines().zip(u.lines()).position(|(a, b)| a != b) {
            panic!(
                "{} {args:?}: line {i} differs:\nperf: {:?}\nours: {:?}",
                data.display(),
                t.lines().nth(i),
                u.lines().nth(i)
            );
        }
        assert_eq!(t.lines().count(), u.lines().count(), "{args:?}");
        assert_eq!(t, u, "{args:?}");
        t.lines().count()
    } else {
        assert!(!ours.status.success(), "{args:?}: perf refused, we did not");
        let msg = String::from_utf8_lossy(&theirs.stderr);
        let first = msg.lines().next().unwrap_or_default();
        assert!(
            stderr(&ours).contains(first),
            "{args:?}: perf: {msg}\nours: {}",
            stderr(&ours)
        );
        0
    }
}

/// `report --stdio -i DATA`: the same text.
fn same_report(data: &Path) {
    same_report_with(data, &[]);
}

/// `report --stdio ARGS -i DATA`: the same text.
fn same_report_with(data: &Path, args: &[&str]) {
    let mut p = perf_cmd();
    p.args(["report", "--stdio"]).args(args).arg("-i").arg(data);
    let theirs = run(p);
    assert!(theirs.status.success(), "{}", stderr(&theirs));
    let mut o = ptperf();
    o.args(["report", "--stdio"]).args(args).arg("-i").arg(data);
    let ours = run(o);
    assert!(ours.status.success(), "{}", stderr(&ours));
    assert_eq!(
        String::from_utf8_lossy(&ours.stdout),
        without_tip(&String::from_utf8_lossy(&theirs.stdout)),
        "{}",
        data.display()
    );
}

/// The `-F` selections both tools are compared on.
const FIELDS: &[&str] = &[
    "ip,sym",
    "comm,tid,time,ip,sym,dso",
    "tid,ip,sym,symoff,dso,period",
    "-period",
    "+pid",
    "+srcline",
    "+addr",
    "+cpu",
    "tid,ip,addr",
];

fn compare_all(data: &Path) {
    assert!(
        same_script(data, &[]) > 10,
        "{}: too few samples",
        data.display()
    );
    for f in FIELDS {
        same_script(data, &["-F", f]);
    }
    same_script(data, &["--ns"]);
    same_report(data);
}

/// `perf record -e cpu-clock:u -e task-clock:u`: two software events.
#[test]
fn perf_record_software_events() {
    let d = dir("samples-only-cpu-clock");
    let data = d.join("cpu-clock.data");
    let mut p = perf_cmd();
    p.args([
        "record",
        "-q",
        "-e",
        "cpu-clock:u",
        "-e",
        "task-clock:u",
        "-o",
    ])
    .arg(&data)
    .arg("--")
    .arg(busy());
    let o = run(p);
    assert!(
        o.status.success(),
        "perf record -e cpu-clock failed (perf_event_open for a software event is needed): {}",
        stderr(&o)
    );
    compare_all(&data);
    // --json: one object a sample, named by its event.
    let o = run({
        let mut c = ptperf();
        c.args(["script", "--json", "-i"]).arg(&data);
        c
    });
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(text.lines().count(), same_script(&data, &[]));
    let mut events = std::collections::BTreeSet::new();
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"));
        events.insert(v["event"].as_str().unwrap_or_default().to_string());
    }
    assert_eq!(
        events.into_iter().collect::<Vec<_>>(),
        ["cpu-clock:u", "task-clock:u"]
    );
}

/// `perf record -e cpu-clock` without `:u`: kernel samples too, named from
/// the kernel's kallsyms (perf's copy in its build-id cache, or the running
/// kernel's) as `sym+off ([kernel.kallsyms])`, `[k]` in report.
#[test]
fn perf_record_kernel_samples() {
    let d = dir("samples-only-kernel");
    let data = d.join("cpu-clock.data");
    let mut p = perf_cmd();
    p.args(["record", "-q", "-e", "cpu-clock", "-c", "20000", "-o"])
        .arg(&data)
        .arg("--")
        .arg(busy());
    let o = run(p);
    assert!(
        o.status.success(),
        "perf record -e cpu-clock failed (perf_event_open of kernel samples is needed): {}",
        stderr(&o)
    );
    let mut s = perf_cmd();
    s.args(["script", "-F", "ip,sym,dso", "-i"]).arg(&data);
    let text = String::from_utf8_lossy(&run(s).stdout).into_owned();
    assert!(
        text.lines()
            .any(|l| l.contains("([kernel.kallsyms])") && !l.contains("[unknown]")),
        "no named kernel sample in perf's output:\n{text}"
    );
    compare_all(&data);
}

/// `perf record -g -e cpu-clock:u`: samples with their recorded call chains,
/// printed by script and folded into report's children and call graphs as perf
/// does.
#[test]
fn perf_record_call_chains() {
    let d = dir("samples-only-callchains");
    let data = d.join("callchains.data");
    let mut p = perf_cmd();
    p.args([
        "record",
        "-q",
        "-g",
        "-e",
        "cpu-clock:u",
        "-c",
        "50000",
        "-o",
    ])
    .arg(&data)
    .arg("--")
    .arg(busy());
    let o = run(p);
    assert!(o.status.success(), "perf record -g failed: {}", stderr(&o));
    assert!(same_script(&data, &[]) > 10, "too few samples");
    same_script(&data, &["-F", "comm,tid,ip,sym,dso"]);
    for args in [
        &[][..],
        &["--no-children"],
        &["-G"],
        &["--children", "-g", "caller"],
    ] {
        same_report_with(&data, args);
    }
}

/// A simulated Intel PT recording of the program, its samples injected by
/// `ptperf inject` and by `perf inject` (instructions; branches): each file
/// read back as perf reads it.
#[test]
fn injected_samples() {
    let d = dir("samples-only-inject");
    let pt = record(
        &d,
        "busy",
        &["-e", "intel_pt//u"],
        &[busy().as_os_str(), OsStr::new("short")],
    );
    for itrace in ["i100i", "b"] {
        let ours = d.join(format!("ours-{itrace}.data"));
        let o = run({
            let mut c = ptperf();
            c.arg("inject")
                .arg(format!("--itrace={itrace}"))
                .arg("-i")
                .arg(&pt)
                .arg("-o")
                .arg(&ours);
            c
        });
        assert!(o.status.success(), "{}", stderr(&o));
        compare_all(&ours);
        let theirs = d.join(format!("perf-{itrace}.data"));
        let mut p = perf_cmd();
        p.arg("--buildid-dir")
            .arg(debug_of(&pt))
            .arg("inject")
            .arg(format!("--itrace={itrace}"))
            .arg("-i")
            .arg(&pt)
            .arg("-o")
            .arg(&theirs);
        let o = run(p);
        assert!(o.status.success(), "perf inject: {}", stderr(&o));
        compare_all(&theirs);
    }
}
