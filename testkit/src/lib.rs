//! Test support shared by the workspace's tests (a dev-dependency only).
//!
//! A test that needs an external tool or data set asks for it here. What `.ci/run`
//! installs (valgrind, yasm, perf, a C compiler, PostgreSQL, …) is required: when it is
//! missing the test fails with a line naming what to install, so that no test passes by
//! skipping its work. What no machine of ours can be given (PT hardware, a reference build
//! of libipt) belongs in tests marked `#[ignore = "needs …"]`, which ask for it here too.
//!
//! Headless Chromium ([`chromium`]) and speedscope's web app from npm ([`speedscope`])
//! are required the same way.
//!
//! It also holds what tests and fuzz targets would otherwise each copy: a seeded RNG
//! ([`Rng`]), trace builders ([`trace`]), the C test programs' build ([`compile_c`]),
//! and a loopback file server for pages a browser opens ([`serve`]).
//!
//! With the `recordings` feature, `recording` makes perf.data recordings of real
//! programs on the simulator, laid out as `perf record -e intel_pt//u` lays them out,
//! and compares perf's decoding of them with ours (for pt-perf, ptperf and pt-tools).
//! With `postgres`, `pg_server` runs a throwaway PostgreSQL server.
//!
//! # API structure
//!
//! - tools: [`tool`] (required, with the package that provides it), [`find_tool`],
//!   [`in_ci`], and the big ones ([`postgres_bin`], [`chromium`], [`speedscope`]);
//! - programs: [`compile_c`] and [`NOLIBC`] for the C programs tests record;
//! - data: [`Rng`], [`trace`] (packets to bytes, a steerable code image), [`corpus`];
//! - behaviour every tool shares: [`closed_pipe`], [`assert_stdout_errors`].
//!
//! # Example usage
//!
//! A random run of conditional branches as a trace, reproducible from its seed:
//!
//! ```
//! use pt_encoder::{IpPacketKind, Packet};
//! use pt_testkit::trace::{encode, ip, mode64, tnt};
//! use pt_testkit::Rng;
//!
//! let mut rng = Rng::new(7);
//! let taken: Vec<bool> = (0..6).map(|_| rng.bit()).collect();
//! let bytes = encode(&[
//!     Packet::Psb,
//!     mode64(),
//!     Packet::Psbend,
//!     ip(IpPacketKind::TipPge, 0x1000),
//!     tnt(&taken),
//! ]);
//! assert_eq!(&bytes[..16], &[0x02, 0x82].repeat(8)[..]);
//! assert_eq!(Rng::new(7).next(), Rng::new(7).next());
//! ```
#![deny(missing_docs)]

use std::ffi::OsStr;

#[cfg(feature = "postgres")]
pub mod pg_server;
#[cfg(feature = "recordings")]
pub mod recording;
pub mod serve;
pub mod trace;

/// xorshift64*: a small deterministic generator, so that a failing test reproduces
/// from its seed.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// A generator from `seed` (0 is replaced by a fixed constant: xorshift stays at 0).
    pub fn new(seed: u64) -> Self {
        Rng(if seed == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            seed
        })
    }

    /// The next 64 random bits.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform-ish in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A random bit.
    pub fn bit(&mut self) -> bool {
        self.next() & 1 == 1
    }
}
use std::path::{Path, PathBuf};

/// The workspace root (the parent of this crate's folder).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// cargo's scratch directory for tests (`target/tmp`, what `CARGO_TARGET_TMPDIR`
/// names to an integration test), found from the running executable
/// (`target/<profile>/deps/<test>` or `target/<profile>/examples/<name>`).
pub fn target_tmp() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.join("tmp")))
        .unwrap_or_else(|| std::env::temp_dir().join("pt-testkit"))
}

/// Whether the tests run in CI (`CI=true`, as `.ci/run` and most CI services set it).
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| v == "true" || v == "1")
}

/// Looks `name` up on `PATH` (an absolute or relative path is taken as it is).
pub fn find_tool(name: impl AsRef<OsStr>) -> Option<PathBuf> {
    let name = Path::new(name.as_ref());
    if name.components().count() > 1 {
        return is_executable(name).then(|| name.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The tool `name` from `PATH`, which the test cannot do without: panics with a line
/// saying which package provides it (`.ci/run` installs it) when it is missing.
#[track_caller]
pub fn tool(name: &str, package: &str) -> PathBuf {
    match find_tool(name) {
        Some(p) => p,
        None => panic!(
            "this test needs `{name}` on PATH (Debian package `{package}`; .ci/run installs it)"
        ),
    }
}

/// Flags of a static program without libc (it brings its own `_start`), as the test
/// programs that must run few instructions are built.
pub const NOLIBC: &[&str] = &[
    "-O1",
    "-static",
    "-nostdlib",
    "-fno-stack-protector",
    "-fno-pie",
    "-no-pie",
];

/// Compiles the C program `src` into `out` with the system's C compiler (`cc`, from
/// gcc's package, which `.ci/run` installs): `flags` go before the source, `libs`
/// after it (the linker takes a library for the objects before it). Returns `out`;
/// panics with the compiler's messages when it fails.
#[track_caller]
pub fn compile_c(
    src: impl AsRef<Path>,
    out: impl AsRef<Path>,
    flags: &[&str],
    libs: &[&str],
) -> PathBuf {
    let (src, out) = (src.as_ref(), out.as_ref());
    let o = std::process::Command::new(tool("cc", "gcc"))
        .args(flags)
        .arg("-o")
        .arg(out)
        .arg(src)
        .args(libs)
        .output()
        .unwrap_or_else(|e| panic!("cannot run cc: {e}"));
    assert!(
        o.status.success(),
        "cc {flags:?} {} {libs:?} failed ({}):\n{}",
        src.display(),
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out.to_path_buf()
}

/// The folder of PostgreSQL's server programs (`initdb`, `pg_ctl`): Debian keeps them
/// outside `PATH`, in `/usr/lib/postgresql/VERSION/bin`; the newest installed version
/// is taken. `None` when no server is installed.
pub fn find_postgres_bin() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let version: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            is_executable(&bin.join("initdb")).then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

/// [`find_postgres_bin`], which the test cannot do without: panics with a line naming
/// the package when no server is installed.
#[track_caller]
pub fn postgres_bin() -> PathBuf {
    find_postgres_bin().unwrap_or_else(|| {
        panic!("this test needs PostgreSQL's initdb and pg_ctl (Debian package `postgresql`; .ci/run installs it)")
    })
}

/// Debian's `chromium` (headless, for the tests that look at pages); panics naming the
/// package when it is missing (`.ci/run` installs it), as [`tool`] does.
#[track_caller]
pub fn chromium() -> PathBuf {
    find_tool("chromium")
        .or_else(|| find_tool("chromium-browser"))
        .unwrap_or_else(|| {
            panic!("this test needs `chromium` on PATH (Debian package `chromium`; .ci/run installs it)")
        })
}

/// speedscope's built web app (the npm package `speedscope`'s `dist/release`, with its
/// `index.html`): `PT_SPEEDSCOPE_DIR`, else where `.ci/run` installs it,
/// `target/speedscope/node_modules/speedscope/dist/release` in the workspace. Panics
/// saying how to install it when it is not there.
#[track_caller]
pub fn speedscope() -> PathBuf {
    let dir = match std::env::var_os("PT_SPEEDSCOPE_DIR") {
        Some(d) => PathBuf::from(d),
        None => workspace_root().join("target/speedscope/node_modules/speedscope/dist/release"),
    };
    if !dir.join("index.html").is_file() {
        panic!(
            "this test needs speedscope's web app at {} (`npm install --prefix target/speedscope speedscope@1.25.0`, as .ci/run does, or set PT_SPEEDSCOPE_DIR)",
            dir.display()
        );
    }
    dir
}

/// Runs headless `chromium` on `url` with `args` (e.g. `--dump-dom`,
/// `--screenshot=FILE`) in a fresh profile, the page's own time limited to
/// `virtual_ms`; killed after two minutes. Returns its output.
pub fn headless(
    chromium: &Path,
    args: &[&str],
    url: &str,
    virtual_ms: u32,
) -> std::process::Output {
    use std::process::{Command, Stdio};
    let profile = std::env::temp_dir().join(format!(
        "pt-testkit-chromium-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
        ])
        .args(["--enable-unsafe-swiftshader", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--virtual-time-budget={virtual_ms}"))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", chromium.display()));
    // Read both pipes while it runs (a full pipe would stall it).
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let o = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut out, &mut v);
        v
    });
    let e = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut err, &mut v);
        v
    });
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("chromium") {
            break st;
        }
        if start.elapsed() > std::time::Duration::from_secs(120) {
            let _ = child.kill();
            break child.wait().expect("chromium");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let _ = std::fs::remove_dir_all(&profile);
    std::process::Output {
        status,
        stdout: o.join().unwrap_or_default(),
        stderr: e.join().unwrap_or_default(),
    }
}

/// A path given by the environment variable `var` that must exist (for the ignored
/// tests that compare with a reference build, e.g. `PT_REFERENCE_PTXED`); panics with
/// `what` when it is unset or names nothing.
#[track_caller]
pub fn env_path(var: &str, what: &str) -> PathBuf {
    match std::env::var_os(var).map(PathBuf::from) {
        Some(p) if p.exists() => p,
        Some(p) => panic!("{var}={} does not exist ({what})", p.display()),
        None => panic!("this test needs {var}: {what}"),
    }
}

/// libipt's .ptt corpus: `PT_CONFORMANCE_CORPUS` (relative paths from the workspace root),
/// else `../shared/conformance/libipt-ptt` beside the workspace. Panics when neither is
/// there, so that the conformance tests never pass without their corpus.
#[track_caller]
pub fn corpus() -> PathBuf {
    let root = workspace_root();
    let dir = match std::env::var_os("PT_CONFORMANCE_CORPUS") {
        Some(v) => root.join(v),
        None => root.join("../shared/conformance/libipt-ptt"),
    };
    if !dir.is_dir() {
        panic!(
            "the libipt conformance corpus is not at {} (set PT_CONFORMANCE_CORPUS)",
            dir.display()
        );
    }
    dir
}

/// The write end of a pipe whose read end is already closed: a process writing to
/// it gets EPIPE (or SIGPIPE) at its first write.
pub fn closed_pipe() -> std::os::fd::OwnedFd {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: a valid array of two fds to fill.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both fds were just created and are owned here only.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    write
}

/// Checks that the command `make` builds ends as a Unix tool should when its standard
/// output fails (see the `pt-cli` crate): run with a stdout pipe whose reader is already
/// gone (EPIPE) it dies of SIGPIPE without a word; run with stdout on `/dev/full`
/// (ENOSPC) it exits non-zero with one line on stderr naming the error; never a panic.
/// The command must write something to stdout.
#[track_caller]
pub fn assert_stdout_errors(make: impl Fn() -> std::process::Command) {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;

    let what = format!("{:?}", make());
    // EPIPE: the read end is closed before the tool starts, so its first write fails.
    let out = make()
        .stdout(Stdio::from(closed_pipe()))
        .stderr(Stdio::piped())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{what} on a closed pipe: {:?}, stderr:\n{err}",
        out.status
    );
    assert!(!err.contains("panicked"), "{what} on a closed pipe:\n{err}");
    assert!(
        !err.contains("Broken pipe"),
        "{what} on a closed pipe:\n{err}"
    );

    // ENOSPC.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let out = make()
        .stdout(Stdio::from(full))
        .stderr(Stdio::piped())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code();
    assert!(
        code.is_some_and(|c| c != 0 && c != 101),
        "{what} on /dev/full: {:?}, stderr:\n{err}",
        out.status
    );
    assert!(!err.contains("panicked"), "{what} on /dev/full:\n{err}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("No space left on device"))
        .collect();
    assert_eq!(lines.len(), 1, "{what} on /dev/full:\n{err}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_xorshift64_star() {
        let mut r = Rng(1);
        assert_eq!(r.next(), 0x47e4_ce4b_896c_dd1d);
        let mut z = Rng::new(0);
        assert_ne!(z.next(), 0);
        assert!((0..100).all(|_| r.below(7) < 7));
    }

    #[test]
    fn finds_sh_and_not_nonsense() {
        assert!(find_tool("sh").is_some());
        assert!(find_tool("no-such-tool-pt-testkit").is_none());
        assert!(find_tool("/bin/sh").is_some());
    }

    #[test]
    #[should_panic(expected = "needs `no-such-tool-pt-testkit`")]
    fn a_missing_tool_fails() {
        tool("no-such-tool-pt-testkit", "none");
    }

    #[test]
    fn the_corpus_is_found_from_the_workspace() {
        assert!(corpus().join("bad_cpu.ptt").exists() || corpus().read_dir().is_ok());
    }
}
