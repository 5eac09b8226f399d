//! ptconformance on a closed or full stdout: quiet on EPIPE, one line and a
//! non-zero exit on ENOSPC, never a panic.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn ptconformance() {
    // Tools that do not exist: every row is "not run", and the table still goes out.
    let ptt = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/err-truncated.ptt");
    pt_testkit::assert_stdout_errors(|| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ptconformance"));
        c.arg("--no-build")
            .arg(&ptt)
            .env("PTTESTGEN", "/nonexistent/pttestgen")
            .env("PTDUMP", "/nonexistent/ptdump")
            .env("PTXED", "/nonexistent/ptxed");
        c
    });
    pt_testkit::assert_stdout_errors(|| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ptconformance"));
        c.arg("--version");
        c
    });
}
