//! ptrec on a closed or full stdout. Its own output (`--ptxed-args`) ends as a
//! Unix tool's does: quietly on EPIPE, with one line and a non-zero exit on
//! ENOSPC. Its reports go to stderr, so a traced program that writes to a closed
//! stdout meets the closed pipe itself (and dies of SIGPIPE, its default), while
//! ptrec records that and goes on.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::path::PathBuf;
use std::process::{Command, Stdio};

fn tiny() -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sim/tests/programs/tiny.c");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("stdout-errors-tiny");
    let st = Command::new(pt_testkit::tool("cc", "gcc"))
        .args(["-O1", "-static", "-nostdlib", "-fno-stack-protector"])
        .args(["-fno-pie", "-no-pie", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success());
    out
}

#[test]
fn ptrec() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ptrec-stdout-errors");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("t.pt");
    let tiny = tiny();

    // The program writes "hi" to a pipe nobody reads.
    let o = Command::new(env!("CARGO_BIN_EXE_ptrec"))
        .args(["--backend", "sim", "--decode", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&tiny)
        .arg("w")
        .stdout(Stdio::from(pt_testkit::closed_pipe()))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("killed by signal 13 (SIGPIPE)"), "{err}");
    assert!(err.contains("identical to the recorded execution"), "{err}");

    pt_testkit::assert_stdout_errors(|| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ptrec"));
        c.arg("--ptxed-args").arg(&trace);
        c
    });
}
