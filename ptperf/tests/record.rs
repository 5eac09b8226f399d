//! `ptperf record` on the simulator: bad input gives a clear message; every
//! thread, fork and exec of a program is recorded by both sources into
//! perf.data and decodes to its recorded execution; the trace of a crashed
//! program, of an interrupted recording (both sources) or of a killed one is
//! kept and decodes up to where it ends; a truncated execution log is named,
//! never a silent success; the recording speed counts the wall time.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;
use std::time::Instant;

use common::*;
use pt_decoder::Packet;
use ptperf::verify::Recording;

/// libipt's ptxed decodes every piece of the recording without an error.
fn libipt_ptxed_decodes(data: &Path) {
    let ptxed = pt_testkit::env_path("PT_REFERENCE_PTXED", "libipt's ptxed, built with XED");
    let rec = Recording::read(data).unwrap();
    assert!(!rec.pieces.is_empty());
    for (i, p) in rec.pieces.iter().enumerate() {
        let trace = data.with_extension(format!("{i}.pt"));
        let out = std::process::Command::new(&ptxed)
            .args(ptxed_args(&rec, p, &trace))
            .arg("--no-inst")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            !text
                .lines()
                .any(|l| l.contains("error") && !l.contains("end of trace")),
            "{text}"
        );
    }
}

/// `ptperf record --decode` with these arguments: it must succeed and find
/// every trace identical to its recorded execution. Returns stderr.
fn record_and_decode(d: &Path, source: &str, cmd: &[&str]) -> String {
    let o = ptperf()
        .args([
            "record",
            "--backend",
            "sim",
            "--source",
            source,
            "--decode",
            "-o",
        ])
        .arg(d.join("t.data"))
        .arg("--")
        .args(cmd)
        .output()
        .unwrap();
    assert_recorded(source, &o);
    let err = stderr(&o);
    assert!(
        err.contains("identical to the recorded execution"),
        "{source}: {err}"
    );
    err
}

#[test]
fn missing_command() {
    let d = dir("record-missing");
    let o = ptperf()
        .args(["record", "--backend", "sim", "-o"])
        .arg(d.join("t.data"))
        .args(["--", "/no/such/program"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("'/no/such/program' workload: No such file or directory"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bad_events_and_options_are_rejected() {
    let d = dir("record-bad");
    let out = d.join("t.data");
    let run = |args: &[&str]| {
        let o = ptperf()
            .arg("record")
            .args(["--backend", "sim", "-o"])
            .arg(&out)
            .args(args)
            .args(["--", "/bin/true"])
            .output()
            .unwrap();
        assert!(!o.status.success(), "{args:?}");
        assert!(!out.exists(), "{args:?}: nothing is written");
        stderr(&o)
    };
    let e = run(&["-e", "intel_pt/bogus/u"]);
    assert!(e.contains("unknown term 'bogus' for pmu 'intel_pt'"), "{e}");
    let e = run(&["-e", "intel_pt/mtc_period=16/u"]);
    assert!(e.contains("value too big for format, maximum is 15"), "{e}");
    let e = run(&["-e", "cycles"]);
    assert!(e.contains("not an intel_pt event"), "{e}");
    let e = run(&["--filter", "filter nosuchfunction @ /bin/true"]);
    assert!(e.contains("nosuchfunction"), "{e}");
    let e = run(&["-Sbig"]);
    assert!(e.contains("Invalid snapshot option: 'big'"), "{e}");
    let e = run(&["--backend", "gpu"]);
    assert!(e.contains("unknown backend `gpu'"), "{e}");
    let e = run(&["--frobnicate"]);
    assert!(e.contains("unknown option `frobnicate'"), "{e}");
    // Kernel only: the ptrace source cannot see the kernel.
    let e = run(&["-e", "intel_pt//k"]);
    assert!(
        e.contains("kernel tracing (OS=1) cannot be simulated"),
        "{e}"
    );
}

/// Both sources: the program's two threads, each its own AUX stream.
#[test]
fn a_two_thread_program_decodes_with_both_sources() {
    valgrind_installed();
    for source in ["ptrace", "valgrind"] {
        let d = dir(&format!("record-threads-{source}"));
        let prog = threads().to_str().unwrap();
        let err = record_and_decode(&d, source, &[prog]);
        assert!(err.contains("in every thread"), "{source}: {err}");
        let data = d.join("t.data");
        let rec = Recording::read(&data).unwrap();
        let p = &rec.pieces;
        assert_eq!(p.len(), 2, "{source}: {p:?}");
        assert_eq!(p[0].thread.pid, p[1].thread.pid);
        assert_ne!(p[0].thread.tid, p[1].thread.tid);
        let tasks = task_records(&data);
        let (a, b) = (p[0].thread, p[1].thread);
        let fork = format!("fork {}/{} from {}/{}", b.pid, b.tid, a.pid, a.tid);
        assert!(tasks.contains(&fork), "{source}: {tasks:?}");
        for (tid, aux) in aux_by_thread(&data) {
            assert!(decode_prefix(&aux).len() > 10, "{source}: thread {tid}");
        }
    }
}

/// Both sources: `sh -c` runs a program in a child and execs another; each
/// process gets a trace per program it ran.
#[test]
fn a_shell_that_forks_and_execs_decodes_with_both_sources() {
    valgrind_installed();
    let t = tiny().display().to_string();
    let script = format!("{t} x; exec {t} w");
    for source in ["ptrace", "valgrind"] {
        let d = dir(&format!("record-shell-{source}"));
        let err = record_and_decode(&d, source, &["sh", "-c", &script]);
        assert!(err.contains("2 threads of 2 processes"), "{source}: {err}");
        let data = d.join("t.data");
        let p = Recording::read(&data).unwrap().pieces;
        // The shell before and after its exec; the child before and after its exec.
        assert_eq!(p.len(), 4, "{source}: {p:?}");
        let (shell, child) = (p[0].thread, p[1].thread);
        assert_ne!(shell.pid, child.pid);
        let tasks = task_records(&data);
        let want = [
            format!(
                "fork {}/{} from {}/{}",
                child.pid, child.tid, shell.pid, shell.tid
            ),
            format!("comm {}/{} prog-tiny exec", child.pid, child.tid),
            format!("comm {}/{} prog-tiny exec", shell.pid, shell.tid),
            format!("exit {}/{}", child.pid, child.tid),
            format!("exit {}/{}", shell.pid, shell.tid),
            format!("mmap2 {} {t}", child.pid),
        ];
        for w in want {
            assert!(tasks.contains(&w), "{source}: no `{w}` in {tasks:#?}");
        }
    }
}

#[test]
fn crashing_program_keeps_its_trace() {
    let data = crashed_recording();
    let aux = aux_by_thread(&data);
    assert_eq!(aux.len(), 1);
    let p = decode_prefix(aux.values().next().unwrap());
    // The fault: FUP at the faulting instruction, then TIP.PGD().
    let p: Vec<Packet> = p
        .into_iter()
        .filter(|q| matches!(q, Packet::Ip(..)))
        .collect();
    let n = p.len();
    assert!(matches!(
        p[n - 1],
        Packet::Ip(pt_encoder::IpPacketKind::TipPgd, _)
    ));
    assert!(matches!(
        p[n - 2],
        Packet::Ip(pt_encoder::IpPacketKind::Fup, _)
    ));
    assert!(task_records(&data).iter().any(|t| t.starts_with("exit ")));
}

#[test]
#[ignore = "needs libipt's ptxed (PT_REFERENCE_PTXED)"]
fn crashing_program_keeps_its_trace_for_libipt_ptxed() {
    libipt_ptxed_decodes(&crashed_recording());
}

fn crashed_recording() -> PathBuf {
    let d = dir("record-crash");
    let data = d.join("t.data");
    let o = ptperf()
        .args(["record", "--backend", "sim", "-o"])
        .arg(&data)
        .arg("--")
        .arg(tiny())
        .arg("c")
        .output()
        .unwrap();
    let err = stderr(&o);
    // As perf record does, ptperf dies of the signal that killed the program.
    assert_eq!(o.status.signal(), Some(libc::SIGSEGV), "{err}");
    assert!(err.contains("killed by signal 11 (SIGSEGV)"), "{err}");
    assert!(err.contains("[ perf record: Captured and wrote"), "{err}");
    data
}

/// Starts `ptperf record` on an endless program, waits until the program
/// has run its first part (it says so on stdout), and sends the recorder
/// `sig`; returns its output.
fn interrupt(d: &Path, source: &str, sig: i32, decode: bool) -> Output {
    let data = d.join("t.data");
    // The log is the ground truth of what follows (a replay).
    let mut args = vec!["--source", source, "--exec-log"];
    if decode {
        args.push("--decode");
    }
    let child = start_spin(&args, &data);
    if sig == libc::SIGKILL {
        // Only what reached the disk survives: wait for a checkpoint with trace.
        wait_for_auxtrace(&data, 1);
    }
    signal(&child, sig);
    child.wait_with_output().unwrap()
}

/// SIGINT and SIGTERM stop a recording with either source; what was
/// recorded is kept, with a line saying so, and decodes to the recorded
/// execution.
#[test]
fn interrupted_recordings_keep_a_decodable_prefix_with_both_sources() {
    valgrind_installed();
    for (source, sig) in [
        ("ptrace", libc::SIGINT),
        ("valgrind", libc::SIGINT),
        ("ptrace", libc::SIGTERM),
    ] {
        let d = dir(&format!("record-interrupt-{source}-{sig}"));
        let o = interrupt(&d, source, sig, true);
        let err = stderr(&o);
        // perf record dies of the signal that stopped it, after its lines.
        assert_eq!(o.status.signal(), Some(sig), "{source}: {err}");
        assert!(err.contains("interrupted"), "{source}: {err}");
        assert!(
            err.contains("everything before it is kept"),
            "{source}: {err}"
        );
        assert!(
            err.contains("identical to the recorded execution"),
            "{source}: {err}"
        );
        assert!(err.contains("[ perf record: Captured and wrote"), "{err}");
        let aux = aux_by_thread(&d.join("t.data"));
        let p = decode_prefix(aux.values().next().unwrap());
        assert!(p.iter().filter(|q| matches!(q, Packet::Tnt8(_))).count() > 10);
    }
}

/// A recorder killed outright: the perf.data reads and its trace decodes up
/// to where it ends, and its execution log (cut short) replays with another
/// configuration, saying where it ends.
#[test]
fn a_killed_recording_keeps_a_decodable_trace_and_log() {
    let d = dir("record-sigkill");
    let o = interrupt(&d, "ptrace", libc::SIGKILL, false);
    assert!(!o.status.success());
    let aux = aux_by_thread(&d.join("t.data"));
    let p = decode_prefix(aux.values().next().expect("a trace"));
    assert!(p.iter().filter(|q| matches!(q, Packet::Tnt8(_))).count() > 10);
    let t2 = replay_killed_log(&d);
    let aux = aux_by_thread(&t2);
    let p2 = decode_prefix(aux.values().next().unwrap());
    assert!(p2.iter().any(|q| matches!(q, Packet::Cyc { .. })));
}

#[test]
#[ignore = "needs libipt's ptxed (PT_REFERENCE_PTXED)"]
fn a_killed_recording_replays_for_libipt_ptxed() {
    let d = dir("record-sigkill-libipt");
    interrupt(&d, "ptrace", libc::SIGKILL, false);
    libipt_ptxed_decodes(&replay_killed_log(&d));
}

fn replay_killed_log(d: &Path) -> PathBuf {
    let log = log_of(&d.join("t.data"));
    let t2 = d.join("t2.data");
    let o = ptperf()
        .args(["record", "--source", "log"])
        .args(["-e", "intel_pt/noretcomp,psb_period=0,cyc/u", "-o"])
        .arg(&t2)
        .arg(&log)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("execution log cut short at byte"), "{err}");
    t2
}

/// A plain recording writes the perf.data and no execution log (perf
/// record writes no side file); `--exec-log` writes one (`--exec-log=FILE`
/// where asked) that `--source log` replays and `--decode` finds identical;
/// `--decode` writes one too, its ground truth.
#[test]
fn the_execution_log_is_written_only_when_asked_for() {
    let d = dir("record-exec-log");
    let cmd = [tiny().as_os_str(), "w".as_ref()];
    let plain = record(&d, "plain", &[], &cmd);
    assert!(plain.is_file());
    let left: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".log"))
        .collect();
    assert!(left.is_empty(), "a plain record left {left:?}");

    let logged = record_logged(&d, "logged", &[], &cmd);
    let log = log_of(&logged);
    assert!(std::fs::metadata(&log).unwrap().len() > 0);
    let named = d.join("elsewhere.log");
    let mut flag = std::ffi::OsString::from("--exec-log=");
    flag.push(&named);
    let o = ptperf()
        .args(["record", "--backend", "sim", "-o"])
        .arg(d.join("named.data"))
        .arg(&flag)
        .arg("--")
        .args(cmd)
        .output()
        .unwrap();
    assert_recorded("--exec-log=FILE", &o);
    let tiny_status = o.status.code().unwrap();
    assert!(std::fs::metadata(&named).unwrap().len() > 0);
    assert!(!log_of(&d.join("named.data")).exists());

    // The log replays, with another configuration, to the same execution.
    for truth in [&log, &named] {
        let o = ptperf()
            .args([
                "record",
                "--source",
                "log",
                "-e",
                "intel_pt/noretcomp/u",
                "--decode",
                "-o",
            ])
            .arg(d.join("replayed.data"))
            .arg(truth)
            .output()
            .unwrap();
        let err = stderr(&o);
        // The program's exit status (tiny's own), not a difference.
        assert_eq!(o.status.code(), Some(tiny_status), "{err}");
        assert!(err.contains("identical to the recorded execution"), "{err}");
        // A replay writes no log of its own.
        assert!(!log_of(&d.join("replayed.data")).exists());
    }

    // --decode compares with the log: it writes it, and keeps it.
    let decoded = d.join("decoded.data");
    let o = ptperf()
        .args(["record", "--backend", "sim", "--decode", "-o"])
        .arg(&decoded)
        .arg("--")
        .args(cmd)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(tiny_status), "{err}");
    assert!(err.contains("identical to the recorded execution"), "{err}");
    assert!(log_of(&decoded).is_file());
}

/// A truncated execution log is named with its offset; checking a trace
/// against it fails.
#[test]
fn a_truncated_log_is_named_never_a_silent_success() {
    let d = dir("record-truncated");
    let data = record_logged(&d, "t", &[], &[tiny().as_os_str(), "w".as_ref()]);
    let bytes = std::fs::read(log_of(&data)).unwrap();
    // Without its last record (the end record) and a bit of the one before.
    let len = bytes.len() - 3;
    let cut = d.join("cut.log");
    std::fs::write(&cut, &bytes[..len]).unwrap();
    let o = ptperf()
        .args(["record", "--source", "log", "--decode", "-o"])
        .arg(d.join("t2.data"))
        .arg(&cut)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("cut short at byte") && err.contains(&format!("of {len}")),
        "{err}"
    );
    assert!(
        !err.contains("identical to the recorded execution"),
        "{err}"
    );
}

#[test]
fn valgrind_source_and_decode() {
    valgrind_installed();
    let d = dir("record-valgrind");
    record_and_decode(&d, "valgrind", &["/bin/true"]);
}

/// The recording speed is over the wall time: for the valgrind source, the
/// time valgrind ran counts.
#[test]
fn recording_speed_counts_the_wall_time() {
    valgrind_installed();
    let d = dir("record-speed");
    let started = Instant::now();
    let o = ptperf()
        .args(["record", "--backend", "sim", "--source", "valgrind", "-o"])
        .arg(d.join("t.data"))
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    let wall = started.elapsed().as_secs_f64();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("instructions/s"))
        .unwrap_or_else(|| panic!("{err}"));
    let secs: f64 = line
        .split(" in ")
        .last()
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    // The report has two decimals: it may be rounded up past the wall time.
    assert!(
        secs <= wall + 0.005 && secs >= 0.7 * wall,
        "{secs} s reported, {wall} s wall: {line}"
    );
}

/// Without PT hardware the perf backend says why and `auto` falls back to
/// the simulator; with it, the perf backend records.
#[test]
fn perf_backend_says_why_or_records() {
    let d = dir("record-perf");
    let has_pt = Path::new("/sys/bus/event_source/devices/intel_pt").exists();
    let o = ptperf()
        .args(["record", "--backend", "perf", "-o"])
        .arg(d.join("t.data"))
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    if has_pt {
        assert!(o.status.success(), "{}", stderr(&o));
        return;
    }
    assert!(!o.status.success());
    assert!(stderr(&o).contains("intel_pt"), "{}", stderr(&o));
    // auto falls back to the simulator and says so.
    let o = ptperf()
        .args(["record", "-o"])
        .arg(d.join("t.data"))
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    assert_recorded("auto", &o);
    assert!(
        stderr(&o).contains("recording on the simulated PT CPU"),
        "{}",
        stderr(&o)
    );
}

fn tiny32() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let mut flags = vec!["-m32"];
        flags.extend_from_slice(NOLIBC);
        build("tiny32", "../sim/tests/programs/tiny32.c", &flags)
    })
}

#[test]
fn compat_mode_program_with_int80_decodes_to_its_execution() {
    let d = dir("record-compat32");
    let err = record_and_decode(&d, "ptrace", &[tiny32().to_str().unwrap()]);
    assert!(err.contains("identical to the recorded execution"), "{err}");
    // 32-bit code: MODE.Exec with CS.D; INT 0x80 is FUP + TIP.PGD().
    let aux = aux_by_thread(&d.join("t.data"));
    let p = decode_prefix(aux.values().next().unwrap());
    assert!(p.iter().any(|q| matches!(
        q,
        Packet::ModeExec(m) if m.csd && !m.csl
    )));
}

#[test]
#[ignore = "needs libipt's ptxed (PT_REFERENCE_PTXED)"]
fn compat_mode_program_decodes_with_libipt_ptxed() {
    let d = dir("record-compat32-libipt");
    let data = record(&d, "t", &[], &[tiny32().as_os_str()]);
    libipt_ptxed_decodes(&data);
}
