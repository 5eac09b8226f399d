//! ptdump and ptxed on a closed or full stdout: quiet on EPIPE, one line and a
//! non-zero exit on ENOSPC, never a panic.

use std::path::Path;
use std::process::Command;

fn data() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ptxed_data"))
}

#[test]
fn ptdump() {
    pt_testkit::assert_stdout_errors(|| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ptdump"));
        c.arg(data().join("switch.pt"));
        c
    });
}

#[test]
fn ptxed() {
    pt_testkit::assert_stdout_errors(|| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ptxed"));
        c.current_dir(data())
            .args(["--raw", "switch.bin:0x401000", "--pt", "switch.pt"]);
        c
    });
    pt_testkit::assert_stdout_errors(|| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ptxed"));
        c.arg("--help");
        c
    });
}
