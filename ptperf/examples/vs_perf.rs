//! `ptperf script`/`report` against perf's own on the same perf.data: both run
//! one after the other, output to /dev/null, best of N runs (interleaved), CPU
//! time (user + system, from the children's rusage) and wall time.
//!
//! ```text
//! cargo build --release -p ptperf
//! cargo run --release -p ptperf --example vs_perf -- [perf.data] [RUNS]
//! ```
//!
//! A recording of ≥ 40M instructions: without one, gzip compressing the first
//! 200 KB of the C library (some 50M instructions), recorded once on the
//! simulated PT CPU with `ptperf record --source valgrind` into
//! `target/vs-perf/gzip.data` and reused. Any other recording serves too, e.g.
//! `perf record -e intel_pt//u` where PT works. The outputs are compared too
//! (their digests), so a speed-up never hides a difference.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

fn cpu_of_children() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

/// Runs `cmd` with stdout to /dev/null: (CPU seconds, wall seconds).
fn time(cmd: &mut Command) -> (f64, f64) {
    let c0 = cpu_of_children();
    let t0 = Instant::now();
    let st = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .env("PERF_PAGER", "cat")
        .status()
        .expect("run");
    assert!(st.success(), "{cmd:?} failed");
    (cpu_of_children() - c0, t0.elapsed().as_secs_f64())
}

/// A digest of what `cmd` prints.
fn digest(cmd: &mut Command) -> (usize, u64) {
    let out = cmd
        .stderr(Stdio::null())
        .env("PERF_PAGER", "cat")
        .output()
        .expect("run");
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in &out.stdout {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (out.stdout.len(), h)
}

/// The gzip recording in `target/vs-perf/`, made with `ptperf` if missing.
fn gzip_recording(ptperf: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new("."));
    let dir = root.join("target/vs-perf");
    let data = dir.join("gzip.data");
    if data.exists() {
        return data;
    }
    std::fs::create_dir_all(&dir).expect("target/vs-perf");
    let libc = ["/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("no C library to compress");
    let bytes = std::fs::read(libc).expect("read the C library");
    let input = dir.join("input.bin");
    std::fs::write(&input, &bytes[..bytes.len().min(200_000)]).expect("write input.bin");
    eprintln!("recording gzip on the simulated PT CPU (valgrind), once");
    let part = dir.join("gzip.data.part");
    let st = Command::new(ptperf)
        .args([
            "record",
            "--backend",
            "sim",
            "--source",
            "valgrind",
            "-q",
            "-o",
        ])
        .arg(&part)
        .args(["--", "gzip", "-c"])
        .arg(&input)
        .stdout(Stdio::null())
        .status()
        .expect("run ptperf record");
    assert!(st.success(), "ptperf record failed");
    std::fs::rename(&part, &data).expect("keep gzip.data");
    data
}

fn main() {
    let mut args = std::env::args().skip(1).peekable();
    let ptperf = std::env::current_exe()
        .ok()
        .and_then(|p| Some(p.parent()?.parent()?.join("ptperf")))
        .filter(|p| p.exists())
        .expect("build ptperf first: cargo build --release -p ptperf");
    let file = match args.next_if(|a| a.parse::<usize>().is_err()) {
        Some(f) => PathBuf::from(f),
        None => gzip_recording(&ptperf),
    };
    let runs: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(3);
    println!("{}", file.display());
    let cases: &[(&str, &[&str])] = &[
        ("script", &["--itrace=i1i", "-F", "ip"]),
        ("script", &["--itrace=b"]),
        ("script", &["--itrace=i1i"]),
        ("report", &["--itrace=i1i", "--stdio"]),
    ];
    let cmd = |tool: &Path, sub: &str, a: &[&str]| {
        let mut c = Command::new(tool);
        c.arg(sub).arg("-i").arg(&file).args(a);
        c
    };
    let perf = Path::new("perf");
    for (sub, a) in cases {
        let same = if *sub == "script" {
            let d1 = digest(&mut cmd(perf, sub, a));
            let d2 = digest(&mut cmd(&ptperf, sub, a));
            if d1 == d2 {
                "identical output"
            } else {
                "OUTPUT DIFFERS"
            }
        } else {
            "rows compared by the tests"
        };
        let (mut best_p, mut best_o) = ((f64::MAX, f64::MAX), (f64::MAX, f64::MAX));
        for _ in 0..runs {
            let p = time(&mut cmd(perf, sub, a));
            let o = time(&mut cmd(&ptperf, sub, a));
            best_p = (best_p.0.min(p.0), best_p.1.min(p.1));
            best_o = (best_o.0.min(o.0), best_o.1.min(o.1));
        }
        println!(
            "{sub} {}: perf {:.2} s CPU ({:.2} s wall), ptperf {:.2} s CPU ({:.2} s wall): {:.1}x; {same}",
            a.join(" "),
            best_p.0,
            best_p.1,
            best_o.0,
            best_o.1,
            best_p.0 / best_o.0
        );
    }
}
