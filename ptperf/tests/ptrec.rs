//! The ptrec command on the simulator: bad input gives a clear message; every
//! thread, fork and exec of a program is recorded by both sources and decodes
//! to its recorded execution; the trace of a crashed program, of an
//! interrupted recording (both sources) or of a killed one is kept and
//! decodes up to where it ends; a truncated execution log is named, never a
//! silent success; the recording speed counts the wall time.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use pt_decoder::{Config, Packet, PacketDecoder};
use pt_sim::sideband::Sideband;

fn ptrec() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ptrec"))
}

fn dir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("ptrec-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn build(name: &str, src: &str, flags: &[&str]) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(src);
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("ptrec-{name}"));
    let st = Command::new(pt_testkit::tool("cc", "gcc"))
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success(), "cc failed for {name}");
    out
}

const NOLIBC: &[&str] = &[
    "-O1",
    "-static",
    "-nostdlib",
    "-fno-stack-protector",
    "-fno-pie",
    "-no-pie",
];

fn tiny() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| build("tiny", "../sim/tests/programs/tiny.c", NOLIBC))
}

/// The two-thread C program, linked statically (fewer instructions to step).
fn threads() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        build(
            "threads",
            "../sim/tests/programs/threads.c",
            &["-O1", "-pthread", "-static"],
        )
    })
}

fn valgrind_installed() {
    pt_testkit::tool("valgrind", "valgrind");
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Decodes all packets; an error is allowed only in the last 16 bytes (a
/// packet cut by the end). Returns the packets.
fn decode_prefix(trace: &Path) -> Vec<Packet> {
    let bytes = std::fs::read(trace).unwrap();
    assert!(!bytes.is_empty(), "{} is empty", trace.display());
    let mut d = PacketDecoder::new(&bytes, &Config::default());
    d.sync_forward().expect("a PSB");
    let mut out = Vec::new();
    for r in d {
        match r {
            Ok((_, p)) => out.push(p),
            Err(e) => assert!(e.offset + 16 >= bytes.len() as u64, "{e:?}"),
        }
    }
    out
}

/// libipt's ptxed decodes the trace without an error.
fn libipt_ptxed_decodes(trace: &Path) {
    let ptxed = pt_testkit::env_path("PT_REFERENCE_PTXED", "libipt's ptxed, built with XED");
    let sb = Sideband::read(&pt_sim::record::sideband_path(trace)).unwrap();
    let out = Command::new(ptxed)
        .args(sb.ptxed_args())
        .args(["--no-inst", "--pt"])
        .arg(trace)
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

/// `ptrec --decode` with these arguments before `--`: it must succeed and
/// find every trace identical to its recorded execution. Returns stderr.
fn record_and_decode(d: &Path, source: &str, cmd: &[&str]) -> String {
    let o = ptrec()
        .args(["--backend", "sim", "--source", source, "--decode", "-o"])
        .arg(d.join("t.pt"))
        .arg("--")
        .args(cmd)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{source}: {err}");
    assert!(
        err.contains("identical to the recorded execution"),
        "{source}: {err}"
    );
    err
}

/// The trace files the first side-band lists.
fn traces(d: &Path) -> Vec<pt_sim::sideband::TraceFile> {
    Sideband::read(&d.join("t.pt.sideband")).unwrap().traces()
}

#[test]
fn missing_command() {
    let d = dir("missing");
    let o = ptrec()
        .args(["--backend", "sim", "-o"])
        .arg(d.join("t.pt"))
        .args(["--", "/no/such/program"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127));
    assert!(
        stderr(&o).contains("/no/such/program: command not found"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bad_terms_are_rejected() {
    let o = ptrec()
        .args([
            "--backend",
            "sim",
            "bogus",
            "-o",
            "/dev/null",
            "--",
            "/bin/true",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown term `bogus`"));
    let d = dir("kernel");
    let o = ptrec()
        .args(["--backend", "sim", "k", "-o"])
        .arg(d.join("t.pt"))
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("kernel tracing (OS=1) cannot be simulated"),
        "{}",
        stderr(&o)
    );
}

/// Both sources: the program's two threads, each its own trace.
#[test]
fn a_two_thread_program_decodes_with_both_sources() {
    valgrind_installed();
    for source in ["ptrace", "valgrind"] {
        let d = dir(&format!("threads-{source}"));
        let prog = threads().to_str().unwrap();
        let err = record_and_decode(&d, source, &[prog]);
        assert!(err.contains("in every thread"), "{source}: {err}");
        let t = traces(&d);
        assert_eq!(t.len(), 2, "{source}: {t:?}");
        assert_eq!(t[0].thread.pid, t[1].thread.pid);
        assert_eq!(t[1].parent, Some(t[0].thread));
        assert_eq!(t[1].kind, Some(pt_sim::exec::CloneKind::Thread));
        for f in &t {
            assert!(decode_prefix(&f.path).len() > 10, "{}", f.path.display());
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
        let d = dir(&format!("shell-{source}"));
        let err = record_and_decode(&d, source, &["sh", "-c", &script]);
        assert!(err.contains("2 threads of 2 processes"), "{source}: {err}");
        let t = traces(&d);
        // The shell before and after its exec; the child before and after its exec.
        assert_eq!(t.len(), 4, "{source}: {t:?}");
        assert!(t[2].parent == Some(t[0].thread), "{source}: {t:?}");
        assert_ne!(t[2].thread.pid, t[0].thread.pid);
        let sb = std::fs::read_to_string(d.join("t.pt.sideband")).unwrap();
        for what in [" fork ", " comm ", " exit ", " mmap "] {
            assert!(sb.contains(what), "{source}: no{what}task in\n{sb}");
        }
    }
}

#[test]
fn crashing_program_keeps_its_trace() {
    let t = crashed_recording();
    let p = decode_prefix(&t);
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
    let sb = std::fs::read_to_string(pt_sim::record::sideband_path(&t)).unwrap();
    assert!(sb.contains("exit killed 11"));
}

#[test]
#[ignore = "needs libipt's ptxed (PT_REFERENCE_PTXED)"]
fn crashing_program_keeps_its_trace_for_libipt_ptxed() {
    libipt_ptxed_decodes(&crashed_recording());
}

fn crashed_recording() -> PathBuf {
    let d = dir("crash");
    let t = d.join("t.pt");
    let o = ptrec()
        .args(["--backend", "sim", "-o"])
        .arg(&t)
        .arg("--")
        .arg(tiny())
        .arg("c")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("killed by signal 11 (SIGSEGV)"),
        "{}",
        stderr(&o)
    );
    t
}

/// Starts ptrec on an endless program and sends it `sig` once the trace has
/// grown (a few checkpoints); returns its output.
fn interrupt(d: &Path, source: &str, sig: i32, decode: bool) -> Output {
    let t = d.join("t.pt");
    let mut cmd = ptrec();
    cmd.args(["--backend", "sim", "--source", source]);
    if decode {
        cmd.arg("--decode");
    }
    let child = cmd
        .arg("-o")
        .arg(&t)
        .arg("--")
        .arg(tiny())
        .arg("l")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(100));
        // ptrace writes the trace as it goes; valgrind's run is read first.
        let grown = match source {
            "ptrace" => std::fs::metadata(&t).map_or(0, |m| m.len()) > 2000,
            _ => started.elapsed() > Duration::from_millis(1500),
        };
        if grown {
            break;
        }
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, sig) };
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
        let d = dir(&format!("interrupt-{source}-{sig}"));
        let o = interrupt(&d, source, sig, true);
        let err = stderr(&o);
        assert!(o.status.success(), "{source}: {err}");
        assert!(err.contains("interrupted"), "{source}: {err}");
        assert!(
            err.contains("everything before it is kept"),
            "{source}: {err}"
        );
        assert!(
            err.contains("identical to the recorded execution"),
            "{source}: {err}"
        );
        let p = decode_prefix(&d.join("t.pt"));
        assert!(p.iter().filter(|q| matches!(q, Packet::Tnt8(_))).count() > 10);
    }
}

/// A recorder killed outright: the trace decodes up to where it ends, and
/// its execution log (cut short) replays with another configuration, saying
/// where it ends.
#[test]
fn a_killed_recording_keeps_a_decodable_trace_and_log() {
    let d = dir("sigkill");
    let o = interrupt(&d, "ptrace", libc::SIGKILL, false);
    assert!(!o.status.success());
    let p = decode_prefix(&d.join("t.pt"));
    assert!(p.iter().filter(|q| matches!(q, Packet::Tnt8(_))).count() > 10);
    let t2 = replay_killed_log(&d);
    let p2 = decode_prefix(&t2);
    assert!(p2.iter().any(|q| matches!(q, Packet::Cyc { .. })));
}

#[test]
#[ignore = "needs libipt's ptxed (PT_REFERENCE_PTXED)"]
fn a_killed_recording_replays_for_libipt_ptxed() {
    let d = dir("sigkill-libipt");
    interrupt(&d, "ptrace", libc::SIGKILL, false);
    libipt_ptxed_decodes(&replay_killed_log(&d));
}

fn replay_killed_log(d: &Path) -> PathBuf {
    let log = d.join("t.pt.log");
    let t2 = d.join("t2.pt");
    let o = ptrec()
        .arg("--replay")
        .arg(&log)
        .args(["noretcomp,psb_period=0", "cyc", "-o"])
        .arg(&t2)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("execution log cut short at byte"), "{err}");
    t2
}

/// A truncated execution log is named with its offset; checking a trace
/// against it fails.
#[test]
fn a_truncated_log_is_named_never_a_silent_success() {
    let d = dir("truncated");
    let t = d.join("t.pt");
    let o = ptrec()
        .args(["--backend", "sim", "-o"])
        .arg(&t)
        .arg("--")
        .arg(tiny())
        .arg("w")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let log = d.join("t.pt.log");
    let bytes = std::fs::read(&log).unwrap();
    // Without its last record (the end record) and a bit of the one before.
    let len = bytes.len() - 3;
    let cut = d.join("cut.log");
    std::fs::write(&cut, &bytes[..len]).unwrap();
    let o = ptrec()
        .arg("--replay")
        .arg(&cut)
        .args(["--decode", "-o"])
        .arg(d.join("t2.pt"))
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
    let d = dir("valgrind");
    record_and_decode(&d, "valgrind", &["/bin/true"]);
}

/// The recording speed is over the wall time: for the valgrind source, the
/// time valgrind ran counts.
#[test]
fn recording_speed_counts_the_wall_time() {
    valgrind_installed();
    let d = dir("speed");
    let started = Instant::now();
    let o = ptrec()
        .args(["--backend", "sim", "--source", "valgrind", "-o"])
        .arg(d.join("t.pt"))
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
    assert!(
        secs <= wall && secs >= 0.7 * wall,
        "{secs} s reported, {wall} s wall: {line}"
    );
}

/// Without PT hardware the perf backend says why and `auto` falls back to
/// the simulator; with it, the perf backend records.
#[test]
fn perf_backend_says_why_or_records() {
    let d = dir("perf");
    let has_pt = Path::new("/sys/bus/event_source/devices/intel_pt").exists();
    let o = ptrec()
        .args(["--backend", "perf", "-o"])
        .arg(d.join("t.pt"))
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
    let o = ptrec()
        .args(["-o"])
        .arg(d.join("t.pt"))
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("using the simulator"), "{}", stderr(&o));
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
    let d = dir("compat32");
    let t = d.join("t.pt");
    let o = ptrec()
        .args(["--backend", "sim", "--decode", "-o"])
        .arg(&t)
        .arg("--")
        .arg(tiny32())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stderr(&o);
    assert!(out.contains("identical to the recorded execution"), "{out}");
    // 32-bit code: MODE.Exec with CS.D; INT 0x80 is FUP + TIP.PGD().
    let p = decode_prefix(&t);
    assert!(p.iter().any(|q| matches!(
        q,
        Packet::ModeExec(m) if m.csd && !m.csl
    )));
}

#[test]
#[ignore = "needs libipt's ptxed (PT_REFERENCE_PTXED)"]
fn compat_mode_program_decodes_with_libipt_ptxed() {
    let d = dir("compat32-libipt");
    let t = d.join("t.pt");
    let o = ptrec()
        .args(["--backend", "sim", "-o"])
        .arg(&t)
        .arg("--")
        .arg(tiny32())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    libipt_ptxed_decodes(&t);
}
