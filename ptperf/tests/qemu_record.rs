//! `ptperf record --source qemu`: programs run in QEMU's user-mode emulator
//! with our plugin. perf judges: for each program and configuration
//! `perf script --itrace=i1i -F tid,ip` lists exactly the ground truth
//! (the execution log of the blocks QEMU ran) and exactly what our decoder
//! decodes, thread by thread, and `perf report` is quiet. Bad input ends
//! with one clear line and no perf.data.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::*;

/// QEMU's user-mode emulator must be there (`.ci/run` installs it).
fn need_qemu() {
    pt_testkit::tool("qemu-x86_64", "qemu-user");
}

/// `record` with the qemu source, and its execution log (the ground truth).
fn qemu_record(d: &Path, name: &str, args: &[&str], cmd: &[&OsStr]) -> PathBuf {
    need_qemu();
    let mut a = vec!["--source", "qemu", "--exec-log"];
    a.extend_from_slice(args);
    record(d, name, &a, cmd)
}

/// perf's instructions equal the ground truth and our decoder's, thread by
/// thread; perf report is quiet.
fn check_exact(what: &str, data: &Path) -> BTreeMap<u32, Vec<u64>> {
    let got = perf_instructions(data);
    let want = truth(data, &log_of(data));
    assert!(
        !want.is_empty() && want.values().all(|v| !v.is_empty()),
        "{what}: {want:?}"
    );
    assert_same_threads(what, &got, &want);
    let ours = our_instructions(data);
    assert_same_threads(&format!("{what}, our decoder"), &ours, &got);
    perf_report_quiet(data);
    got
}

fn program(name: &str, src: &str, flags: &[&str]) -> PathBuf {
    build(&format!("qemu-{name}"), src, flags)
}

fn signals() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| program("signals", "tests/programs/signals.c", &["-O1"]))
}

fn dlopen() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| program("dlopen", "tests/programs/dlopen.c", &["-O1"]))
}

fn exception() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs/exception.cc");
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("prog-qemu-exception");
        let st = Command::new(pt_testkit::tool("g++", "g++"))
            .args(["-O1", "-o"])
            .arg(&out)
            .arg(&src)
            .status()
            .unwrap();
        assert!(st.success(), "g++ failed");
        out
    })
}

#[test]
fn single_threaded_program_in_every_configuration() {
    let d = dir("qemu-sample");
    let sample = sample().display().to_string();
    let filter = format!("filter main @ {sample}");
    let cases: [(&str, Vec<&str>); 5] = [
        ("default", vec![]),
        ("noretcomp", vec!["-e", "intel_pt/noretcomp/u"]),
        ("psb-2k", vec!["-e", "intel_pt/psb_period=0/u"]),
        (
            "tsc-mtc-cyc",
            vec!["-e", "intel_pt/tsc,mtc,mtc_period=0,cyc,cyc_thresh=1/u"],
        ),
        ("filter-main", vec!["--filter", &filter]),
    ];
    let mut full = 0;
    for (name, args) in cases {
        let data = qemu_record(&d, name, &args, &[sample.as_ref()]);
        let got = check_exact(name, &data);
        let n: usize = got.values().map(Vec::len).sum();
        assert_eq!(got.len(), 1, "{name}: one thread");
        if name == "filter-main" {
            assert!(n > 100 && n < full / 10, "{name}: {n} of {full}");
        } else {
            assert!(n > 100_000, "{name}: {n}");
            full = full.max(n);
        }
    }
}

#[test]
fn two_threads() {
    let d = dir("qemu-threads");
    let data = qemu_record(&d, "threads", &[], &[threads().as_os_str()]);
    let got = check_exact("threads", &data);
    assert_eq!(got.len(), 2);
}

#[test]
fn fork_and_exec() {
    let d = dir("qemu-shell");
    let t = tiny().display().to_string();
    let script = format!("{t} x; exec {t} w");
    let data = qemu_record(
        &d,
        "shell",
        &[],
        &[OsStr::new("sh"), OsStr::new("-c"), OsStr::new(&script)],
    );
    let got = check_exact("fork and exec", &data);
    assert_eq!(got.len(), 2, "the shell and its child");
    // Both ran tiny after their exec: its code is in both threads' flows.
    let (out, _) = perf(&[
        OsStr::new("script"),
        OsStr::new("-i"),
        data.as_os_str(),
        OsStr::new("--itrace=i1i"),
        OsStr::new("-F"),
        OsStr::new("tid,comm"),
    ]);
    let tiny_tids: std::collections::BTreeSet<&str> = out
        .lines()
        .filter(|l| l.contains("tiny"))
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert_eq!(tiny_tids.len(), 2, "{tiny_tids:?}");
}

/// A `#!/bin/sh` wrapper that runs a child in `$(...)` and then execs the
/// program, as pyenv's `python3` shim does: the shell waits for its child
/// while the recorder holds the child's records until it has given the
/// fork (the parent hands its words over right after the fork returns, and
/// a held connection whose process ended is taken once nothing else can
/// release it). The recording ends, in time, and is exact.
#[test]
fn shell_wrapper_that_waits_for_a_child_then_execs() {
    need_qemu();
    let d = dir("qemu-wrapper");
    let busy = program("rounds", "tests/programs/rounds.c", &["-O1"]);
    let wrapper = d.join("wrapper");
    // The child writes a long trace (300,000 blocks and more), more than
    // the recorder reads ahead of a connection it holds.
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nn=$({b} 300000)\nexec {b} 1000 \"$n\"\n",
            b = busy.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = d.join("wrapper.data");
    let mut child = ptperf()
        .args(["record", "--source", "qemu", "--exec-log", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&wrapper)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("ptperf record of a shell wrapper did not end in 5 minutes");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let o = child.wait_with_output().unwrap();
    assert_recorded("wrapper", &o);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = check_exact("shell wrapper", &data);
    assert_eq!(got.len(), 2, "the shell (then rounds) and its child");
}

/// The block path (QEMU's block runs straight into the PT logic) writes the
/// trace the per-instruction path writes: the recording's execution log,
/// replayed instruction by instruction (`--source log`), gives
/// byte-identical AUX streams, thread by thread (where the two cut their
/// AUXTRACE records, and so their padding, may differ).
#[test]
fn block_path_equals_per_instruction_replay() {
    let d = dir("qemu-block-path");
    let timing = [
        "-e",
        "intel_pt/tsc,mtc,mtc_period=0,cyc,cyc_thresh=1,psb_period=0/u",
    ];
    let cases: [(&str, &[&str], &PathBuf); 4] = [
        ("sample", &[], sample()),
        ("sample-timing", &timing, sample()),
        ("threads-timing", &timing, threads()),
        ("signals", &[], signals()),
    ];
    for (name, args, prog) in cases {
        let data = qemu_record(&d, name, args, &[prog.as_os_str()]);
        let again = replay(&d, &format!("{name}-replay"), args, &log_of(&data));
        let (blocks, insns) = (aux_stream_by_thread(&data), aux_stream_by_thread(&again));
        assert!(!blocks.is_empty(), "{name}: no trace");
        assert_eq!(
            blocks.keys().collect::<Vec<_>>(),
            insns.keys().collect::<Vec<_>>(),
            "{name}: threads"
        );
        for (tid, a) in &blocks {
            let b = &insns[tid];
            let first = a.iter().zip(b).position(|(x, y)| x != y);
            assert!(
                a == b,
                "{name}, thread {tid}: {} and {} bytes, first difference at {first:?}",
                a.len(),
                b.len()
            );
        }
    }
}

#[test]
fn signal_handlers() {
    let d = dir("qemu-signals");
    let data = qemu_record(&d, "signals", &[], &[signals().as_os_str()]);
    let got = check_exact("signals", &data);
    // The handler ran four times for SIGUSR1: its loop is in the flow.
    assert!(got.values().next().unwrap().len() > 1000);
}

#[test]
fn dlopen_code() {
    let d = dir("qemu-dlopen");
    let data = qemu_record(&d, "dlopen", &[], &[dlopen().as_os_str()]);
    check_exact("dlopen", &data);
    let (out, _) = perf(&[
        OsStr::new("script"),
        OsStr::new("-i"),
        data.as_os_str(),
        OsStr::new("--itrace=i1i"),
        OsStr::new("-F"),
        OsStr::new("ip,dso"),
    ]);
    assert!(
        out.lines().filter(|l| l.contains("libm")).count() > 100,
        "libm's code was not named"
    );
}

#[test]
fn static_binary() {
    let d = dir("qemu-static");
    let data = qemu_record(&d, "clock", &[], &[clock().as_os_str()]);
    check_exact("static", &data);
}

/// A program built without PIE lies below 4 GiB and calls into libc far
/// above it; a PSB+ every 2 KiB lands in its loop after a last IP in libc.
#[test]
fn program_below_4g_calling_libc() {
    let d = dir("qemu-nopie");
    let p = program(
        "libc-calls",
        "tests/programs/libc_calls.c",
        &["-O1", "-no-pie"],
    );
    let data = qemu_record(
        &d,
        "psb-2k",
        &["-e", "intel_pt/psb_period=0/u"],
        &[p.as_os_str()],
    );
    check_exact("no PIE, PSB+ every 2 KiB", &data);
}

#[test]
fn cxx_exception() {
    let d = dir("qemu-exception");
    let data = qemu_record(&d, "exception", &[], &[exception().as_os_str()]);
    check_exact("C++ exception", &data);
}

#[test]
fn snapshot_at_exit() {
    let d = dir("qemu-snapshot");
    let data = qemu_record(
        &d,
        "snapshot",
        &["-e", "intel_pt/psb_period=0/u", "-Se4096"],
        &[sample().as_os_str()],
    );
    assert_snapshot_is_the_end(&data, &log_of(&data));
}

#[test]
fn snapshots_on_sigusr2_then_ctrl_c() {
    need_qemu();
    let d = dir("qemu-sigusr2");
    let data = d.join("loop.data");
    let child = start_spin(
        &[
            "--source",
            "qemu",
            "--exec-log",
            "-e",
            "intel_pt/psb_period=0/u",
            "-S65536",
        ],
        &data,
    );
    for n in 1..=2 {
        signal(&child, libc::SIGUSR2);
        wait_for_auxtrace(&data, n);
    }
    signal(&child, libc::SIGINT);
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(o.status.signal(), Some(libc::SIGINT), "{err}");
    assert!(err.contains("[ perf record: Captured and wrote"), "{err}");
    assert_eq!(auxtrace_count(&data), 2, "two snapshots, no more");
    let got = perf_instructions(&data);
    let want = truth(&data, &log_of(&data));
    let (tid, g) = got.iter().next().unwrap();
    let w = &want[tid];
    assert!(
        g.len() > 1000 && g.len() <= w.len(),
        "{} of {}",
        g.len(),
        w.len()
    );
    assert_eq!(
        g[..],
        w[..g.len()],
        "the snapshots are not the execution up to the second"
    );
    assert_same_threads("snapshots, our decoder", &our_instructions(&data), &got);
}

#[test]
fn default_source_is_qemu() {
    need_qemu();
    let d = dir("qemu-default");
    let data = d.join("tiny.data");
    let o = ptperf()
        .args(["record", "--backend", "sim", "-o"])
        .arg(&data)
        .arg("--")
        .arg(tiny())
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(err.contains(", qemu source)"), "{err}");
    assert!(err.contains("[ perf record: Captured and wrote"), "{err}");
}

/// `ptperf record` fails with one line naming the problem, and leaves no perf.data.
fn refused(what: &str, env: Option<(&str, &str)>, cmd: &OsStr, want: &str) {
    let d = dir(&format!("qemu-bad-{what}"));
    let data = d.join("bad.data");
    let mut c = ptperf();
    c.args(["record", "--backend", "sim", "--source", "qemu", "-o"])
        .arg(&data)
        .arg("--")
        .arg(cmd);
    if let Some((k, v)) = env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    let err = stderr(&o);
    assert!(!o.status.success(), "{what}: {err}");
    let ours: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("ptperf record:") && !l.contains("recording on the simulated"))
        .collect();
    assert_eq!(ours.len(), 1, "{what}: {err}");
    assert!(ours[0].contains(want), "{what}: {err}");
    assert!(!data.exists(), "{what}: a perf.data was left");
}

#[test]
fn bad_input_one_line_no_perf_data() {
    need_qemu();
    refused(
        "no-qemu",
        Some(("PT_QEMU", "/nonexistent/qemu-x86_64")),
        tiny().as_os_str(),
        "apt install qemu-user",
    );
    let d = dir("qemu-bad-files");
    let elf32 = d.join("elf32");
    let mut h = vec![0u8; 128];
    h[..7].copy_from_slice(b"\x7fELF\x01\x01\x01");
    h[18] = 3;
    std::fs::write(&elf32, &h).unwrap();
    let broken = d.join("broken");
    let mut h = vec![0u8; 128];
    h[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
    h[16] = 2;
    h[18] = 62;
    std::fs::write(&broken, &h).unwrap();
    for f in [&elf32, &broken] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // A QEMU whose plugin loader refuses our API version (as a newer
    // QEMU's minimum would): its reason, and our version, in one line.
    let old_qemu = d.join("qemu-x86_64");
    std::fs::write(
        &old_qemu,
        "#!/bin/sh\necho 'qemu-x86_64: Could not load plugin: plugin needs API version 1, but this QEMU supports only 2 to 3' >&2\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&old_qemu, std::fs::Permissions::from_mode(0o755)).unwrap();
    refused(
        "refused",
        Some(("PT_QEMU", old_qemu.to_str().unwrap())),
        tiny().as_os_str(),
        "refused the plugin, which speaks QEMU plugin API version 1: qemu-x86_64: Could not load plugin",
    );
    refused("elf32", None, elf32.as_os_str(), "a 32-bit program");
    refused("broken", None, broken.as_os_str(), "could not run");
}
