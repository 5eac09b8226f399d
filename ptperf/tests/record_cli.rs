//! `ptperf record`'s command line, as perf record's: `-e intel_pt/TERMS/MODS`
//! sets the event's config (read back from the perf.data written), `-S`
//! snapshot mode, `--filter` in perf's syntax with `@file`, `-o` (an existing
//! file becomes `FILE.old`), `-p`, `--backend`. Bad input: one line on stderr
//! naming what is wrong, a non-zero exit, no file written.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::*;
use pt_perf_data::intel_pt::config as bits;
use pt_perf_data::{AttrFlags, IntelPtInfo, MappedFile};

/// The small program's execution log, recorded once.
fn log() -> &'static PathBuf {
    static L: OnceLock<PathBuf> = OnceLock::new();
    L.get_or_init(|| {
        let d = dir("record-cli-log");
        log_of(&record_logged(&d, "tiny", &[], &[tiny().as_os_str()]))
    })
}

/// The intel_pt event's config and exclude_{kernel,user}, and AUXTRACE_INFO.
fn event_of(data: &Path) -> (u64, bool, bool, IntelPtInfo) {
    let file = MappedFile::open(data).unwrap();
    let perf = file.parse().unwrap();
    let info = perf.intel_pt_info().unwrap().unwrap();
    let ev = perf
        .events()
        .iter()
        .find(|e| u64::from(e.attr.type_) == info.pmu_type)
        .unwrap();
    let f = ev.attr.flags;
    (
        ev.attr.config,
        f.has(AttrFlags::EXCLUDE_KERNEL),
        f.has(AttrFlags::EXCLUDE_USER),
        info,
    )
}

#[test]
fn event_terms_set_the_config_perf_reads() {
    let d = dir("record-cli-terms");
    let base = bits::DEFAULT;
    let cases: [(&str, u64); 9] = [
        ("intel_pt//u", base),
        ("intel_pt/noretcomp/u", base | bits::NORETCOMP),
        ("intel_pt/tsc=0,mtc=0/u", base & !bits::TSC & !bits::MTC),
        (
            "intel_pt/cyc,cyc_thresh=1/u",
            base | bits::CYC | bits::cyc_thresh(1),
        ),
        ("intel_pt/psb_period=0/u", base & !bits::PSB_PERIOD_MASK),
        (
            "intel_pt/ptw,fup_on_ptw/u",
            base | bits::PTW | bits::FUP_ON_PTW,
        ),
        ("intel_pt/notnt/u", base | bits::NOTNT),
        ("intel_pt/branch=0/u", base & !bits::BRANCH),
        ("intel_pt/config=0x2401/u", 0x2401),
    ];
    for (i, (event, want)) in cases.iter().enumerate() {
        let data = replay(&d, &format!("e{i}"), &["-e", event], log());
        let (config, no_kernel, no_user, _) = event_of(&data);
        assert_eq!(config, *want, "{event}");
        assert!(no_kernel && !no_user, "{event}");
    }
    // The replayed log shows no kernel: `k` is refused, `uk` (and no
    // modifier) fall back to user space with a note, as perf falls back to `u`.
    let o = ptperf()
        .args(["record", "--backend", "sim", "-e", "intel_pt//", "-o"])
        .arg(d.join("both.data"))
        .arg("--")
        .arg(tiny())
        .output()
        .unwrap();
    assert_recorded("intel_pt//", &o);
    assert!(
        stderr(&o).contains("tracing user space (intel_pt//u)"),
        "{}",
        stderr(&o)
    );
    assert!(event_of(&d.join("both.data")).1);
}

/// Runs `ptperf record ARGS -o DIR/bad.data -- tiny`: it must fail with one
/// line naming `what`, exit non-zero and write nothing.
fn refused(d: &Path, args: &[&str], what: &str) {
    let out = d.join("bad.data");
    let o = ptperf()
        .arg("record")
        .args(args)
        .arg("-o")
        .arg(&out)
        .arg("--")
        .arg(tiny())
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(!o.status.success(), "{args:?}: {err}");
    assert!(!out.exists(), "{args:?}: a file was written");
    let first = err.lines().next().unwrap_or("");
    assert!(first.starts_with("ptperf record: "), "{args:?}: {err}");
    assert!(first.contains(what), "{args:?}: `{what}` not in {first}");
}

#[test]
fn bad_events_are_one_line() {
    let d = dir("record-cli-bad-events");
    for (event, what) in [
        (
            "intel_pt/bogus/u",
            "unknown term 'bogus' for pmu 'intel_pt' (valid terms: branch,",
        ),
        (
            "intel_pt/mtc_period=16/u",
            "value too big for format, maximum is 15",
        ),
        ("intel_pt/psb_period/u", "no value assigned for term"),
        ("intel_pt/tsc=x/u", "expected numeric value"),
        ("intel_pt/cyc/x", "parser error"),
        ("intel_pt/cyc", "parser error"),
        ("cycles", "not an intel_pt event"),
        ("foo/cyc/", "Cannot find PMU `foo'"),
        ("intel_pt/period=1/u", "term 'period' is not supported"),
    ] {
        refused(&d, &["--backend", "sim", "-e", event], what);
        // Exactly one line: no usage dump after an event error.
        let o = ptperf()
            .args(["record", "-e", event, "--", "true"])
            .output()
            .unwrap();
        assert_eq!(stderr(&o).lines().count(), 1, "{event}: {}", stderr(&o));
        assert_eq!(o.status.code(), Some(129), "{event}");
    }
    // What the simulated CPU does not have (CPUID 14H), and kernel tracing.
    refused(
        &d,
        &["--backend", "sim", "-e", "intel_pt/pwr_evt/u"],
        "PwrEvtEn needs CPUID 14H EBX[5]",
    );
    refused(
        &d,
        &["--backend", "sim", "-e", "intel_pt//k"],
        "kernel tracing (OS=1) cannot be simulated",
    );
}

#[test]
fn snapshot_mode_and_its_size() {
    let d = dir("record-cli-snapshot");
    let data = replay(&d, "s", &["-S8192"], log());
    assert_eq!(event_of(&data).3.snapshot_mode, 1);
    let data = replay(&d, "full", &[], log());
    assert_eq!(event_of(&data).3.snapshot_mode, 0);
    for bad in ["-Sbig", "-Se0x", "--snapshot=e-1"] {
        refused(&d, &["--backend", "sim", bad], "Invalid snapshot option");
    }
}

#[test]
fn address_filters_in_perfs_syntax() {
    let d = dir("record-cli-filter");
    let prog = tiny().display().to_string();
    let real = std::fs::canonicalize(tiny()).unwrap().display().to_string();
    // A function of the program by name: its file offset and size.
    let data = replay(&d, "f", &["--filter", &format!("filter f @ {prog}")], log());
    let info = event_of(&data).3;
    let filter = String::from_utf8(info.filter.unwrap()).unwrap();
    assert!(
        filter.starts_with("filter 0x") && filter.ends_with(&format!("@{real}")),
        "{filter}"
    );
    // Decoded, only f's instructions: a handful per call.
    let got = perf_instructions(&data);
    let n: usize = got.values().map(Vec::len).sum();
    assert!(n > 0 && n < 400, "{n} instructions in f");
    // tracestop with an address range, two filters.
    let data = replay(
        &d,
        "two",
        &[
            "--filter",
            &format!("filter start_c @ {prog}, tracestop f @ {prog}"),
        ],
        log(),
    );
    let filter = String::from_utf8(event_of(&data).3.filter.unwrap()).unwrap();
    assert!(filter.contains(",stop 0x"), "{filter}");
    for (f, what) in [
        ("jump f", "failed to parse address filter: 'jump f'"),
        ("filter f @ /no/such/file", "/no/such/file"),
        ("filter nosuchfunction @ /bin/true", "nosuchfunction"),
        ("start 0x1000", "Operation not supported"),
        ("filter 1/1 filter 2/1 filter 3/1", "exceeds maximum"),
    ] {
        refused(&d, &["--backend", "sim", "--filter", f], what);
    }
}

#[test]
fn output_pid_and_backend() {
    let d = dir("record-cli-output");
    // An existing output becomes FILE.old, as perf does.
    let first = replay(&d, "out", &[], log());
    let size = std::fs::metadata(&first).unwrap().len();
    let again = replay(&d, "out", &["-e", "intel_pt/noretcomp/u"], log());
    assert_eq!(again, first);
    let old = d.join("out.data.old");
    assert_eq!(std::fs::metadata(&old).unwrap().len(), size);
    assert_eq!(event_of(&old).0, bits::DEFAULT);
    assert_eq!(event_of(&again).0, bits::DEFAULT | bits::NORETCOMP);
    // Without -o: perf.data in the working directory.
    let o = ptperf()
        .current_dir(&d)
        .args(["record", "--source", "log", "-q"])
        .arg(log())
        .output()
        .unwrap();
    // The replayed program's exit status; -q: no message at all.
    assert!(o.status.code().is_some(), "{}", stderr(&o));
    assert!(d.join("perf.data").is_file());
    assert_eq!(stderr(&o), "", "-q");
    // -p needs the perf backend; -p and a command exclude each other.
    refused(
        &d,
        &["--backend", "sim", "-p", "1"],
        "either -p PID or a command",
    );
    let o = ptperf()
        .args(["record", "--backend", "sim", "-p", "1"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("attaching to a running process (-p) needs Intel PT hardware"),
        "{}",
        stderr(&o)
    );
    refused(&d, &["-p", "x"], "invalid pid `x'");
    refused(&d, &["--backend", "gpu"], "unknown backend `gpu'");
    refused(&d, &["--source", "gdb"], "unknown source `gdb'");
    refused(&d, &["--frobnicate"], "unknown option `frobnicate'");
}
