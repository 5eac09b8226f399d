//! ptprobe on a closed or full stdout: quiet on EPIPE, one line and a non-zero
//! exit on ENOSPC, never a panic.

use std::process::Command;

#[test]
fn ptprobe() {
    for args in [&[][..], &["--dump-cpuid"], &["--help"]] {
        pt_testkit::assert_stdout_errors(|| {
            let mut c = Command::new(env!("CARGO_BIN_EXE_ptprobe"));
            c.args(args);
            c
        });
    }
}
