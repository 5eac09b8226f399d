//! perf's command-line habits, for every subcommand: `-h` prints the usage on
//! stderr and exits 129 (as `perf script -h`), an unknown option is a usage error
//! with 129, and `--version` prints the version on stdout.

mod common;

const SUBCOMMANDS: &[&str] = &[
    "record", "script", "report", "inject", "export", "profile", "timeline",
];

#[test]
fn help_goes_to_stderr_with_status_129() {
    for cmd in SUBCOMMANDS {
        for h in ["-h", "--help"] {
            let o = common::ptperf().args([cmd, &h]).output().unwrap();
            assert_eq!(o.status.code(), Some(129), "ptperf {cmd} {h}");
            assert!(o.stdout.is_empty(), "ptperf {cmd} {h} wrote on stdout");
            let err = common::stderr(&o);
            assert!(err.contains("sage"), "ptperf {cmd} {h}: {err}");
        }
        let o = common::ptperf()
            .args([cmd, "--no-such-option"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(129), "ptperf {cmd} --no-such-option");
        assert!(o.stdout.is_empty());
    }
}

#[test]
fn version_everywhere() {
    let want = format!("ptperf version {}\n", env!("CARGO_PKG_VERSION"));
    for args in [&["--version"][..], &["version"]].into_iter().chain(
        SUBCOMMANDS
            .iter()
            .map(|c| vec![*c, "--version"].leak() as &[&str]),
    ) {
        let o = common::ptperf().args(args).output().unwrap();
        assert!(o.status.success(), "ptperf {args:?}");
        assert_eq!(String::from_utf8_lossy(&o.stdout), want, "ptperf {args:?}");
    }
}

#[test]
fn quiet_record_says_nothing() {
    let d = common::dir("cli_habits_quiet");
    let data = d.join("q.data");
    let o = common::ptperf()
        .args(["record", "-q", "-o"])
        .arg(&data)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", common::stderr(&o));
    assert_eq!(common::stderr(&o), "", "record -q printed on stderr");
    assert!(data.exists());
}

#[test]
fn record_into_a_missing_folder_fails_as_perf() {
    let d = common::dir("cli_habits_missing");
    let data = d.join("no/such/folder/x.data");
    let o = common::ptperf()
        .args(["record", "-q", "-o"])
        .arg(&data)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = common::stderr(&o);
    assert!(err.contains("does not exist"), "{err}");
    assert!(!d.join("no").exists(), "a folder was made");
}
