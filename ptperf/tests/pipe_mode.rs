//! perf's pipe mode: `ptperf record -o -` writes it to standard output (the
//! program's own output going to standard error, as perf does), `perf script
//! -i -` decodes it as it decodes the same recording in a file, and `ptperf
//! script -i -` / `ptperf report -i -` read pipes: ours, `perf inject -o -`'s
//! and `perf record -o -`'s (of a software event: perf cannot record Intel PT
//! here), printing what perf prints.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::*;

fn perf_cmd() -> Command {
    let mut c = Command::new(pt_testkit::tool("perf", "linux-perf"));
    c.env("PERF_PAGER", "cat").env("HOME", std::env::temp_dir());
    c
}

/// Runs `cmd` with `input` written to its standard input through a pipe (perf
/// reads a regular file given as `-` otherwise than a pipe).
fn piped(mut cmd: Command, input: &[u8]) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    let data = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&data);
    });
    let o = child.wait_with_output().unwrap();
    writer.join().unwrap();
    o
}

fn text(o: &Output, what: &str) -> String {
    assert!(o.status.success(), "{what}: {}", stderr(o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn perf_script(args: &[&str], file: &Path) -> String {
    let o = perf_cmd()
        .arg("script")
        .args(args)
        .arg("-i")
        .arg(file)
        .output()
        .unwrap();
    text(&o, "perf script FILE")
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

/// The same execution (a log replayed) recorded into a file and into a pipe:
/// perf decodes the pipe as the file; ptperf reads the pipe as perf reads the
/// file; perf inject's pipe of the file reads as perf reads it.
#[test]
fn our_pipe_reads_as_the_file() {
    let d = dir("pipe-mode");
    let first = record_logged(&d, "sample", &[], &[sample().as_os_str()]);
    let log = log_of(&first);
    let file = replay(&d, "file", &[], &log);
    let o = ptperf()
        .args(["record", "--backend", "sim", "--source", "log", "-o", "-"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("Captured and wrote 0.000 MB - ]"),
        "{}",
        stderr(&o)
    );
    let pipe = o.stdout;
    assert_eq!(&pipe[..8], b"PERFILE2");
    for args in [
        &[][..],
        &["--itrace=i1i", "-F", "tid,ip"][..],
        &["--itrace=bei100i"][..],
    ] {
        let want = perf_script(args, &file);
        assert!(want.lines().count() > 100, "{args:?}");
        let mut p = perf_cmd();
        p.arg("script").args(args).args(["-i", "-"]);
        assert_eq!(
            text(&piped(p, &pipe), "perf script -i -"),
            want,
            "perf, {args:?}"
        );
        let mut c = ptperf();
        c.arg("script").args(args).args(["-i", "-"]);
        assert_eq!(
            text(&piped(c, &pipe), "ptperf script -i -"),
            want,
            "ours, {args:?}"
        );
    }
    let o = perf_cmd()
        .args(["report", "--stdio", "-i"])
        .arg(&file)
        .output()
        .unwrap();
    let want = without_tip(&text(&o, "perf report"));
    let mut c = ptperf();
    c.args(["report", "--stdio", "-i", "-"]);
    assert_eq!(text(&piped(c, &pipe), "ptperf report -i -"), want);

    // perf inject's pipe of the file.
    let o = perf_cmd()
        .args(["inject", "-o", "-", "-i"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "perf inject: {}", stderr(&o));
    let theirs = o.stdout;
    for args in [&[][..], &["--itrace=i1i", "-F", "tid,ip"][..]] {
        let mut p = perf_cmd();
        p.arg("script").args(args).args(["-i", "-"]);
        let want = text(&piped(p, &theirs), "perf script -i - (perf inject's pipe)");
        let mut c = ptperf();
        c.arg("script").args(args).args(["-i", "-"]);
        assert_eq!(
            text(&piped(c, &theirs), "ptperf script -i -"),
            want,
            "{args:?}"
        );
    }
}

/// `ptperf record -o - -- CMD | perf script -i -`, as one pipeline: perf
/// decodes what came through; the program's output went to standard error.
#[test]
fn record_into_perf_script() {
    let mut rec = ptperf()
        .args(["record", "--backend", "sim", "-o", "-", "--"])
        .arg(sample())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let into = rec.stdout.take().unwrap();
    let script = perf_cmd()
        .args(["script", "--itrace=i1i", "-F", "ip,sym", "-i", "-"])
        .stdin(Stdio::from(into))
        .output()
        .unwrap();
    let r = rec.wait_with_output().unwrap();
    assert!(r.status.success(), "{}", stderr(&r));
    let out = text(&script, "perf script -i -");
    assert!(out.lines().count() > 10_000, "{}", out.lines().count());
    assert!(out.contains(" main"), "no main in perf's decoding");
    // sample.c writes its result line to its standard output: perf record's
    // workload writes it to standard error in pipe mode.
    let err = stderr(&r);
    assert!(
        err.lines().any(|l| l.split(' ').count() == 2
            && l.chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit() || c == '-')),
        "{err}"
    );
    assert!(!stderr(&script).contains("rror"), "{}", stderr(&script));
}

/// `perf record -o -` of a software event (samples, no trace): ptperf script
/// and report read the pipe as perf does.
#[test]
fn perf_record_pipe_of_samples() {
    let busy = build("busy", "tests/programs/busy.c", &["-O1"]);
    let o = perf_cmd()
        .args(["record", "-q", "-e", "cpu-clock:u", "-o", "-", "--"])
        .arg(busy)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "perf record -o - -e cpu-clock failed (perf_event_open for a software event is needed): {}",
        stderr(&o)
    );
    let pipe = o.stdout;
    let mut p = perf_cmd();
    p.args(["script", "-i", "-"]);
    let want = text(&piped(p, &pipe), "perf script -i -");
    let mut c = ptperf();
    c.args(["script", "-i", "-"]);
    assert!(want.lines().count() > 10, "{want}");
    assert_eq!(text(&piped(c, &pipe), "ptperf script -i -"), want);
    let mut p = perf_cmd();
    p.args(["report", "--stdio", "-i", "-"]);
    let want = without_tip(&text(&piped(p, &pipe), "perf report -i -"));
    let mut c = ptperf();
    c.args(["report", "--stdio", "-i", "-"]);
    assert_eq!(text(&piped(c, &pipe), "ptperf report -i -"), want);
}
