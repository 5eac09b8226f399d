//! `ptperf script --xed` and `--insn-trace=disasm`: instruction bytes shown as
//! XED's AT&T text. perf 6.1 pipes its output through Intel's `xed -F insn: -A
//! -64`; ours is built in. Where XED is at hand (`PT_XED`, the path of the `xed`
//! program built from intelxed/xed), perf piped through it and ours must be byte
//! for byte the same.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// A libc program's recording: ld.so and libc's string functions give the
/// disassembler SSE, AVX2 and the usual integer forms.
fn recording() -> &'static PathBuf {
    static F: OnceLock<PathBuf> = OnceLock::new();
    F.get_or_init(|| {
        let d = common::dir("script_xed");
        common::record(&d, "sample", &[], &[common::sample().as_os_str()])
    })
}

fn ours(args: &[&str]) -> String {
    let o = common::ptperf()
        .arg("script")
        .arg("-i")
        .arg(recording())
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", common::stderr(&o));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn instruction_bytes_become_xed_text() {
    let raw = ours(&["--insn-trace"]);
    let xed = ours(&["--insn-trace", "--xed"]);
    assert_eq!(xed, ours(&["--insn-trace=disasm"]));
    assert_eq!(raw.lines().count(), xed.lines().count());
    assert!(raw.lines().count() > 10_000, "a short recording");
    for (r, x) in raw.lines().zip(xed.lines()) {
        let (head, _) = r.split_once("insn:").expect("an insn field");
        let text = x
            .strip_prefix(head)
            .and_then(|t| t.strip_prefix("\t\t"))
            .unwrap_or_else(|| panic!("{x:?} does not continue {head:?}"));
        assert!(
            !text.is_empty() && !text.contains("ERROR"),
            "no text for {r:?}: {x:?}"
        );
    }
    // Lines without the field pass unchanged.
    assert_eq!(ours(&["--itrace=b", "--xed"]), ours(&["--itrace=b"]));
}

#[test]
fn insn_trace_takes_raw_or_disasm() {
    let o = common::ptperf()
        .args(["script", "--insn-trace=cooked", "-i"])
        .arg(recording())
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        common::stderr(&o).contains("Only accept raw|disasm"),
        "{}",
        common::stderr(&o)
    );
}

#[test]
#[ignore = "needs Intel's xed (PT_XED=path of xed built from intelxed/xed)"]
fn same_text_as_perf_piped_through_xed() {
    let xed = PathBuf::from(std::env::var_os("PT_XED").expect("PT_XED"));
    let dir = xed.parent().unwrap();
    let path = std::env::join_paths(std::iter::once(dir.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let o = Command::new(pt_testkit::tool("perf", "linux-perf"))
        .arg("--buildid-dir")
        .arg(common::debug_of(recording()))
        .args([
            OsStr::new("script"),
            OsStr::new("-i"),
            recording().as_os_str(),
        ])
        .args(["--insn-trace", "--xed"])
        .env("PATH", path)
        .env("HOME", std::env::temp_dir())
        .output()
        .unwrap();
    let theirs = String::from_utf8(o.stdout.clone()).unwrap();
    let mine = ours(&["--insn-trace", "--xed"]);
    assert!(theirs.lines().count() > 10_000, "{}", common::stderr(&o));
    if let Some((i, (t, m))) = theirs
        .lines()
        .zip(mine.lines())
        .enumerate()
        .find(|(_, (t, m))| t != m)
    {
        panic!("line {}: perf+xed {t:?}\nours     {m:?}", i + 1);
    }
    assert_eq!(theirs.lines().count(), mine.lines().count());
}
