//! ptperf on a closed or full stdout. Its own output (`--help`) ends as a
//! Unix tool's does: quietly on EPIPE, with one line and a non-zero exit on
//! ENOSPC. `ptperf record`'s reports go to stderr, so a traced program that
//! writes to a closed stdout meets the closed pipe itself (and dies of
//! SIGPIPE, its default), while the recorder records that and goes on.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;

use common::*;

#[test]
fn record_leaves_stdout_to_the_program() {
    let d = dir("record-stdout-errors");
    // The program writes "hi" to a pipe nobody reads.
    let o = ptperf()
        .args(["record", "--backend", "sim", "--decode", "-o"])
        .arg(d.join("t.data"))
        .arg("--")
        .arg(tiny())
        .arg("w")
        .stdout(Stdio::from(pt_testkit::closed_pipe()))
        .output()
        .unwrap();
    let err = stderr(&o);
    // perf record ends as its program did: here, of SIGPIPE.
    assert_eq!(o.status.signal(), Some(libc::SIGPIPE), "{err}");
    assert!(err.contains("killed by signal 13 (SIGPIPE)"), "{err}");
    assert!(err.contains("identical to the recorded execution"), "{err}");
}

#[test]
fn help() {
    pt_testkit::assert_stdout_errors(|| {
        let mut c = ptperf();
        c.arg("--help");
        c
    });
}
