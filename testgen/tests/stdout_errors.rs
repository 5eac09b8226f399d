//! pttestgen on a closed or full stdout: quiet on EPIPE, one line and a non-zero
//! exit on ENOSPC, never a panic.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn pttestgen() {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pttestgen-stdout-errors");
    std::fs::create_dir_all(&out).unwrap();
    let ptt = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/basic.ptt");
    pt_testkit::assert_stdout_errors(|| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_pttestgen"));
        c.arg("-o").arg(&out).arg(&ptt);
        c
    });
    pt_testkit::assert_stdout_errors(|| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_pttestgen"));
        c.arg("--version");
        c
    });
}
