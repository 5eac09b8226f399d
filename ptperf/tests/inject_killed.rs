//! `ptperf inject` leaves nothing behind however it ends: its output has no
//! name until it is complete (an unnamed file where the file system allows), so
//! a SIGKILL in the middle leaves neither the output nor a temporary file.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

#[test]
fn killed_inject_leaves_nothing() {
    let d = common::dir("inject_killed");
    let data = common::record(&d, "sample", &[], &[common::sample().as_os_str()]);
    let before: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let out = d.join("injected.data");
    // An instruction sample with a call chain per instruction: long enough to
    // be killed in the middle.
    let mut child = common::ptperf()
        .args(["inject", "--itrace=i1ig", "-i"])
        .arg(&data)
        .arg("-o")
        .arg(&out)
        .spawn()
        .unwrap();
    // The whole run takes about 2 s (debug build); the output is open by now.
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap();
    let st = child.wait().unwrap();
    assert_eq!(
        st.signal(),
        Some(libc::SIGKILL),
        "inject ended before the kill: {st}"
    );
    let after: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(before, after, "inject left files behind");
}
