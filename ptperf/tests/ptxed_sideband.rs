//! Our ptxed decodes a simulated recording from its side-band file alone
//! (`--sideband OUT.sideband --pt OUT`): the same instructions as the
//! recorded execution, IP by IP, and the same count as `verify`.
//!
//! ptxed is pt-decoder's binary, which this package's tests do not get
//! built; it is built here with the cargo running the tests, in a target
//! directory of its own.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use pt_sim::exec::log::LogReader;
use pt_sim::exec::{ExecItem, ExecutionSource};
use pt_sim::record::sideband_path;

fn ptxed() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        // A target directory of its own: rebuilding pt-decoder in the shared
        // one under the running tests would replace the library that this
        // package's test binaries and doctests were linked against.
        let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ptxed-build");
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../decoder/Cargo.toml");
        let st = Command::new(std::env::var_os("CARGO").unwrap_or("cargo".into()))
            .args(["build", "--quiet", "--bin", "ptxed", "--manifest-path"])
            .arg(&manifest)
            .env("CARGO_TARGET_DIR", &target)
            .status()
            .expect("run cargo");
        assert!(st.success(), "building ptxed failed");
        let p = target.join("debug/ptxed");
        assert!(p.is_file(), "{} missing", p.display());
        p
    })
}

/// The gcc-built sample recorded with ptrec (ptrace source): the trace.
fn recording() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ptxed-sideband");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs/sample.c");
        let bin = dir.join("sample");
        let st = Command::new(pt_testkit::tool("gcc", "gcc"))
            .args(["-O1", "-fno-inline-small-functions", "-o"])
            .arg(&bin)
            .arg(&src)
            .status()
            .expect("run gcc");
        assert!(st.success());
        let trace = dir.join("t.pt");
        let o = Command::new(env!("CARGO_BIN_EXE_ptrec"))
            .args(["--backend", "sim", "-o"])
            .arg(&trace)
            .arg("--")
            .arg(&bin)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        trace
    })
}

fn run_ptxed(args: &[&str]) -> Output {
    Command::new(ptxed()).args(args).output().unwrap()
}

fn log_of(trace: &Path) -> PathBuf {
    let mut p = trace.as_os_str().to_owned();
    p.push(".log");
    PathBuf::from(p)
}

#[test]
fn decodes_the_recorded_instructions() {
    let trace = recording();
    let sb = sideband_path(trace);
    let (t, s) = (trace.to_str().unwrap(), sb.to_str().unwrap());

    // The recorded execution: every instruction is traced (no filter; the
    // sample's only kernel entries are system calls, which decoders show).
    let mut want = Vec::new();
    let mut r = LogReader::open(log_of(trace)).unwrap();
    while let Ok(Some(item)) = r.next_item() {
        if let ExecItem::Insn(i) = item {
            want.push(i.ip);
        }
    }
    let v = ptperf::verify::verify(trace, &sb, &log_of(trace)).unwrap();
    assert!(v.identical(), "{v:?}");
    assert_eq!(v.decoded, want.len() as u64);

    for decoder in ["--block-decoder", "--insn-decoder"] {
        let o = run_ptxed(&[decoder, "--sideband", s, "--pt", t, "--quiet", "--stat"]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(
            out.contains(&format!("insn: {}.", want.len())),
            "{decoder}: {out}"
        );

        let o = run_ptxed(&[decoder, "--sideband", s, "--pt", t, "--no-inst"]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(!out.contains("error"), "{out}");
        let got: Vec<u64> = out
            .lines()
            .filter(|l| l.len() == 16)
            .filter_map(|l| u64::from_str_radix(l, 16).ok())
            .collect();
        assert_eq!(got.len(), want.len(), "{decoder}");
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            panic!(
                "{decoder}: instruction {i}: decoded {:#x}, recorded {:#x}",
                got[i], want[i]
            );
        }
    }
}

#[test]
fn explicit_options_win_and_bad_files_are_named() {
    let trace = recording();
    let sb = sideband_path(trace);
    let t = trace.to_str().unwrap();
    // Without the side-band there is no image: the decoder stops at once.
    let o = run_ptxed(&["--pt", t, "--quiet", "--stat"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("insn: 0."));
    // The side-band's cpu applies unless --cpu is given: an unknown one is a
    // config error, `--cpu none` overrides it.
    let dir = trace.parent().unwrap();
    let text = std::fs::read_to_string(&sb).unwrap();
    assert!(text.contains("\ncpu none\n"));
    let odd = dir.join("odd-cpu.sideband");
    std::fs::write(&odd, text.replace("\ncpu none\n", "\ncpu 99/1\n")).unwrap();
    let odd = odd.to_str().unwrap();
    let o = run_ptxed(&["--sideband", odd, "--pt", t, "--quiet", "--stat"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("config error: unknown cpu"), "{out}");
    let o = run_ptxed(&[
        "--cpu",
        "none",
        "--sideband",
        odd,
        "--pt",
        t,
        "--quiet",
        "--stat",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains("config error"), "{out}");
    assert!(!out.contains("insn: 0."), "{out}");

    let bad = dir.join("bad.sideband");
    std::fs::write(
        &bad,
        "ptsim-sideband 1\nmtc-freq 3\nimage 0\nmap 0x1000 0x2000 0 r-xp /no/such/file\n",
    )
    .unwrap();
    let o = run_ptxed(&["--sideband", bad.to_str().unwrap(), "--pt", t]);
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("bad.sideband: line 4: /no/such/file"), "{e}");
    std::fs::write(&bad, "ptsim-sideband 1\nmtc-freq x\n").unwrap();
    let o = run_ptxed(&["--sideband", bad.to_str().unwrap(), "--pt", t]);
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("bad.sideband: line 2: mtc-freq: bad value `x`"),
        "{e}"
    );
}

/// A two-thread program: ptxed decodes each thread's trace (with its own
/// side-band) to exactly that thread's recorded instructions.
#[test]
fn decodes_each_thread_of_a_recording() {
    pt_testkit::tool("valgrind", "valgrind");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ptxed-sideband-threads");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sim/tests/programs/threads.c");
    let bin = dir.join("threads");
    let st = Command::new(pt_testkit::tool("gcc", "gcc"))
        .args(["-O1", "-pthread", "-static", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success());
    let trace = dir.join("t.pt");
    let o = Command::new(env!("CARGO_BIN_EXE_ptrec"))
        .args(["--backend", "sim", "--source", "valgrind", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&bin)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let files = pt_sim::sideband::Sideband::read(&sideband_path(&trace))
        .unwrap()
        .traces();
    assert_eq!(files.len(), 2, "{files:?}");
    let mut all = LogReader::open(log_of(&trace)).unwrap();
    let items = pt_sim::exec::collect(&mut all).unwrap();
    for f in &files {
        let want: Vec<u64> = pt_sim::exec::thread_items(&items, f.thread)
            .iter()
            .filter_map(|i| match i {
                ExecItem::Insn(r) => Some(r.ip),
                _ => None,
            })
            .collect();
        let sb = sideband_path(&f.path);
        let o = run_ptxed(&[
            "--sideband",
            sb.to_str().unwrap(),
            "--pt",
            f.path.to_str().unwrap(),
            "--no-inst",
        ]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(!out.contains("error"), "{out}");
        let got: Vec<u64> = out
            .lines()
            .filter(|l| l.len() == 16)
            .filter_map(|l| u64::from_str_radix(l, 16).ok())
            .collect();
        assert!(
            got == want,
            "thread {}: {} decoded, {} recorded",
            f.thread,
            got.len(),
            want.len()
        );
    }
}
