//! ptdemo on a closed or full stdout: quiet on EPIPE, one line and a non-zero exit
//! on ENOSPC, never a panic.

use std::process::Command;

#[test]
fn ptdemo() {
    pt_testkit::assert_stdout_errors(|| Command::new(env!("CARGO_BIN_EXE_ptdemo")));
}
