//! The ptrec command on the simulator: bad input gives a clear message, and
//! the trace of a crashed program or a killed recording is kept and decodes
//! up to where it ends.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

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

fn tiny() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sim/tests/programs/tiny.c");
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ptrec-tiny");
        let st = Command::new("cc")
            .args([
                "-O1",
                "-static",
                "-nostdlib",
                "-fno-stack-protector",
                "-fno-pie",
                "-no-pie",
                "-o",
            ])
            .arg(&out)
            .arg(&src)
            .status()
            .unwrap();
        assert!(st.success());
        out
    })
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

fn ptxed_matches_count(trace: &Path) {
    let Some(ptxed) = std::env::var_os("PT_REFERENCE_PTXED") else {
        eprintln!("skipping the libipt ptxed run: PT_REFERENCE_PTXED is not set");
        return;
    };
    let sb_path = pt_sim::record::sideband_path(trace);
    let sb = Sideband::read(&sb_path).unwrap();
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

#[test]
fn crashing_program_keeps_its_trace() {
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
    ptxed_matches_count(&t);
}

#[test]
fn interrupted_and_killed_recordings_keep_a_decodable_trace() {
    for (sig, name) in [(libc::SIGINT, "sigint"), (libc::SIGKILL, "sigkill")] {
        let d = dir(name);
        let t = d.join("t.pt");
        let child = ptrec()
            .args(["--backend", "sim", "-o"])
            .arg(&t)
            .arg("--")
            .arg(tiny())
            .arg("l")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Long enough for a few checkpoints.
        let mut waited = 0;
        while waited < 100 {
            std::thread::sleep(Duration::from_millis(100));
            waited += 1;
            let len = std::fs::metadata(&t).map(|m| m.len()).unwrap_or(0);
            if len > 2000 {
                break;
            }
        }
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, sig) };
        let o = child.wait_with_output().unwrap();
        if sig == libc::SIGINT {
            assert!(o.status.success(), "{}", stderr(&o));
            assert!(stderr(&o).contains("interrupted"), "{}", stderr(&o));
        }
        let p = decode_prefix(&t);
        assert!(p.iter().filter(|q| matches!(q, Packet::Tnt8(_))).count() > 10);
        // The execution log replays with another configuration.
        let log = d.join("t.pt.log");
        let t2 = d.join("t2.pt");
        let o = ptrec()
            .arg("--replay")
            .arg(&log)
            .args(["noretcomp,psb_period=0", "cyc", "-o"])
            .arg(&t2)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let p2 = decode_prefix(&t2);
        assert!(p2.iter().any(|q| matches!(q, Packet::Cyc { .. })));
        ptxed_matches_count(&t2);
    }
}

#[test]
fn valgrind_source_and_decode() {
    if Command::new("valgrind").arg("--version").output().is_err() {
        eprintln!("skipping: valgrind is not installed");
        return;
    }
    let d = dir("valgrind");
    let o = ptrec()
        .args(["--backend", "sim", "--source", "valgrind", "--decode", "-o"])
        .arg(d.join("t.pt"))
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("identical to the recorded execution"),
        "{out}{}",
        stderr(&o)
    );
}

#[test]
fn perf_backend_without_pt_says_why() {
    if std::path::Path::new("/sys/bus/event_source/devices/intel_pt").exists() {
        eprintln!("skipping: this machine has Intel PT");
        return;
    }
    let d = dir("perf");
    let o = ptrec()
        .args(["--backend", "perf", "-o"])
        .arg(d.join("t.pt"))
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
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

#[test]
fn compat_mode_program_with_int80_decodes_to_its_execution() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sim/tests/programs/tiny32.c");
    let bin = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ptrec-tiny32");
    let built = Command::new("cc")
        .args([
            "-m32",
            "-O1",
            "-static",
            "-nostdlib",
            "-fno-stack-protector",
            "-fno-pie",
            "-no-pie",
            "-o",
        ])
        .arg(&bin)
        .arg(&src)
        .status()
        .is_ok_and(|s| s.success());
    if !built {
        eprintln!("skipping: cc -m32 cannot build here");
        return;
    }
    let d = dir("compat32");
    let t = d.join("t.pt");
    let o = ptrec()
        .args(["--backend", "sim", "--decode", "-o"])
        .arg(&t)
        .arg("--")
        .arg(&bin)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("identical to the recorded execution"), "{out}");
    // 32-bit code: MODE.Exec with CS.D; INT 0x80 is FUP + TIP.PGD().
    let p = decode_prefix(&t);
    assert!(p.iter().any(|q| matches!(
        q,
        Packet::ModeExec(m) if m.csd && !m.csl
    )));
    ptxed_matches_count(&t);
}
