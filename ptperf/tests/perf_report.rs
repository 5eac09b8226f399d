//! `ptperf report --stdio` against `perf report --stdio` (perf 6.1, the judge) on
//! recordings of real programs made on the simulator, and symbol names where
//! perf's symbol tree decides them (`.plt`, `.plt.got`).
//!
//! What is compared byte for byte:
//! - without call graph lines (`-g none`, `--no-children`, no call chains): the
//!   whole output but perf's closing tip;
//! - with call graphs (perf's default with call chains): the header and entry
//!   lines (Children, Self and the sort keys, in perf's order); the graph lines
//!   perf prints below each entry are not printed by ptperf.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

#[path = "../../decoder/tests/perf_support/mod.rs"]
mod perf_support;

use perf_support::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The C program: calls, returns, loops, recursion, indirect calls, a syscall.
fn demo() -> PathBuf {
    program("script_demo", &["-O1", "-g", "-static"])
}

/// The demo recorded once (timed, per thread: perf record's default layout).
fn demo_data() -> &'static PathBuf {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| record(&scratch("r_demo"), &demo(), &[], Layout::default()).0)
}

/// Runs perf or ptperf `cmd` with `args` on `file` (HOME in the scratch tree and
/// perf's build-id directory beside the file, so that no cache is read).
fn run(tool: &Path, cmd: &str, file: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(tool);
    if tool.ends_with("perf") {
        let mut beside = file.as_os_str().to_owned();
        beside.push(".debug");
        c.arg("--buildid-dir").arg(beside);
    }
    c.arg(cmd)
        .arg("-i")
        .arg(file)
        .args(args)
        .env("PERF_PAGER", "cat")
        .env("HOME", tmp())
        .output()
        .unwrap()
}

fn ptperf() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ptperf"))
}

fn perf() -> PathBuf {
    pt_testkit::tool("perf", "linux-perf")
}

/// Both tools' stdout for `report --stdio ARGS` (both must succeed).
fn both(file: &Path, args: &[&str]) -> (String, String) {
    let mut a = vec!["--stdio"];
    a.extend_from_slice(args);
    let out = |tool: &Path| {
        let o = run(tool, "report", file, &a);
        assert!(
            o.status.success(),
            "{} report {args:?}: {}",
            tool.display(),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    (out(&perf()), out(&ptperf()))
}

/// perf's output without its closing tip (`#`, `# (Tip: …)`, `#`).
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

/// The same output, whole; returns the number of entry lines.
fn same_whole(file: &Path, args: &[&str]) -> usize {
    let (theirs, ours) = both(file, args);
    assert_eq!(without_tip(&theirs), ours, "report {args:?}");
    entries(&ours).len()
}

/// The header and entry lines (no graph lines).
fn entries(s: &str) -> Vec<&str> {
    s.lines()
        .filter(|l| {
            let t = l.trim_start();
            (l.starts_with("# ") && !l.starts_with("# (Tip:"))
                || (l.starts_with("  ")
                    && t.split_whitespace().next().is_some_and(|w| {
                        w.ends_with('%') && w[..w.len() - 1].parse::<f64>().is_ok()
                    }))
        })
        .collect()
}

/// The same header and entry lines; returns the number of entries.
fn same_entries(file: &Path, args: &[&str]) -> usize {
    let (theirs, ours) = both(file, args);
    let (t, o) = (entries(&theirs), entries(&ours));
    assert_eq!(t, o, "report {args:?}");
    o.iter().filter(|l| !l.starts_with('#')).count()
}

#[test]
fn children_and_self_as_perf() {
    let file = demo_data();
    let mut n = 0;
    // Call chains, graph off: children are self (perf resolves no chains).
    n += same_whole(file, &["--itrace=i100ig", "-g", "none"]);
    n += same_whole(file, &["--itrace=i100ig", "-g", "none", "--no-children"]);
    n += same_whole(file, &["--itrace=i1ig", "-g", "none", "--sort", "dso,sym"]);
    // Call graphs on: Children accumulated from the chains, callers first.
    let (_, ours) = both(file, &["--itrace=i10ig"]);
    let first = ours.lines().find(|l| l.starts_with("   100.00% "));
    assert!(
        first.is_some_and(|l| !l.starts_with("   100.00%   100.00%")),
        "no children accumulated:\n{ours}"
    );
    n += same_entries(file, &["--itrace=i10ig"]);
    n += same_entries(file, &["--itrace=i100ig"]);
    n += same_entries(file, &["--itrace=i10ig", "--sort", "sym"]);
    n += same_entries(file, &["--itrace=i10ig", "--sort", "comm,dso"]);
    n += same_entries(file, &["--itrace=i10ig", "--no-children"]);
    assert!(n > 150, "only {n} entries");
}

#[test]
fn defaults_as_perf() {
    let file = demo_data();
    // No --itrace: perf report's own defaults (instructions every 100us with call
    // chains, power events, no branches), several events, one lost-samples line.
    same_entries(file, &[]);
    same_whole(file, &["-g", "none"]);
    // Several events without call chains, whole.
    let n = same_whole(file, &["--itrace=ibp"]);
    assert!(n > 20);
    // Overhead tables with other sort keys: comm and dso columns are padded.
    same_whole(file, &["--itrace=i1i", "--sort", "dso"]);
    same_whole(file, &["--itrace=i1i", "--sort", "comm,dso"]);
}

#[test]
fn call_graph_needs_call_chains() {
    let file = demo_data();
    let theirs = run(
        &perf(),
        "report",
        file,
        &["--stdio", "--itrace=i100i", "-g"],
    );
    let ours = run(
        &ptperf(),
        "report",
        file,
        &["--stdio", "--itrace=i100i", "-g"],
    );
    // perf prints its error and an empty report, and exits 0; ptperf fails.
    assert!(!ours.status.success());
    let msg = "Selected -g or --branch-history.";
    assert!(String::from_utf8_lossy(&theirs.stderr).contains(msg));
    assert!(String::from_utf8_lossy(&ours.stderr).contains(msg));
    assert!(ours.stdout.is_empty());
}

/// A position-independent program calling through `.plt` and `.plt.got` (a
/// function whose address is also taken): perf names those addresses by walking
/// its symbol tree, where the zero-sized `_init` stretched over both sections and
/// the synthesized `name@plt` entries overlap.
#[test]
fn plt_addresses_named_as_perf() {
    let prog = program("pltgot", &["-O1", "-g"]);
    let (file, _) = record(&scratch("r_pltgot"), &prog, &[], Layout::default());
    let args = ["--itrace=b", "-F", "ip,sym,symoff,dso"];
    let theirs = run(&perf(), "script", &file, &args);
    let ours = run(&ptperf(), "script", &file, &args);
    assert!(theirs.status.success() && ours.status.success());
    let (t, o) = (
        String::from_utf8(theirs.stdout).unwrap(),
        String::from_utf8(ours.stdout).unwrap(),
    );
    let name = prog.file_name().unwrap().to_str().unwrap();
    let in_plt = t
        .lines()
        .filter(|l| l.contains("_init+0x") && l.contains(name))
        .count();
    assert!(in_plt >= 4, "the .plt/.plt.got was not run:\n{t}");
    assert_eq!(t, o);
}
