//! Nothing is left in the temporary folder after any exit of the commands that
//! read a recording: `ptperf script` and `report` hand the decoder this
//! machine's vDSO (as perf does) without a named file that could outlive them,
//! whether they end normally, of SIGPIPE on a closed pipe (`| head -1`), or on
//! a full stdout.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use std::path::Path;

use common::*;

/// The names in `dir`.
fn left_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn script_and_report_leave_no_temporary_files() {
    let d = dir("temp-files");
    let data = record(&d, "tiny", &[], &[tiny().as_os_str()]);
    let tmp = d.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    for args in [
        &["script", "--itrace=i1i"][..],
        &["script", "--itrace=b", "-F", "ip,sym"],
        &["report", "--stdio"],
    ] {
        let make = || {
            let mut c = ptperf();
            c.args(args).arg("-i").arg(&data).env("TMPDIR", &tmp);
            c
        };
        // A normal run writes something (the closed pipe and /dev/full must
        // be met), then the closed pipe and the full stdout.
        let o = make().output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        assert!(!o.stdout.is_empty(), "{args:?}: no output");
        assert_eq!(left_in(&tmp), Vec::<String>::new(), "{args:?}: normal exit");
        pt_testkit::assert_stdout_errors(make);
        assert_eq!(
            left_in(&tmp),
            Vec::<String>::new(),
            "{args:?}: after SIGPIPE and ENOSPC"
        );
    }
}
