//! Nothing is left in the temporary folder after a recording with the valgrind
//! source, however it ends: to its end, interrupted (SIGINT), killed (SIGKILL).
//! valgrind's log folder goes (a watchdog removes it when the recorder dies
//! first) and its gdbserver FIFOs (vgdb-pipe-*) are never made.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

/// What is in `dir`.
fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// Waits (10 s at most) for `dir` to be empty; what is left if it is not.
fn emptied(dir: &Path) -> Vec<String> {
    let t = Instant::now();
    loop {
        let left = entries(dir);
        if left.is_empty() || t.elapsed() > Duration::from_secs(10) {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `ptperf record --source valgrind` of spin with TMPDIR at `tmp`, ended by `sig`
/// once the program is ready (`None`: tiny, run to its end).
fn record(d: &Path, tmp: &Path, sig: Option<i32>) {
    let program = if sig.is_some() { spin() } else { tiny() };
    let mut child = ptperf()
        .args(["record", "--backend", "sim", "--source", "valgrind", "-o"])
        .arg(d.join("t.data"))
        .arg("--")
        .arg(program)
        .env("TMPDIR", tmp)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(sig) = sig {
        let mut out = child.stdout.take().unwrap();
        let mut line = [0u8; 6];
        let ok = out.read_exact(&mut line).is_ok() && &line == b"ready\n";
        if !ok {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!("the program did not get ready: {}", stderr(&o));
        }
        signal(&child, sig);
    }
    let o = child.wait_with_output().unwrap();
    if sig.is_none() {
        assert_recorded("valgrind", &o);
    }
}

#[test]
fn valgrind_recordings_leave_nothing_in_the_temporary_folder() {
    valgrind_installed();
    for (name, sig) in [
        ("end", None),
        ("sigint", Some(libc::SIGINT)),
        ("sigkill", Some(libc::SIGKILL)),
    ] {
        let d = dir(&format!("leftovers-{name}"));
        let tmp = d.join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        record(&d, &tmp, sig);
        assert_eq!(
            emptied(&tmp),
            Vec::<String>::new(),
            "{name}: left in TMPDIR"
        );
    }
}
