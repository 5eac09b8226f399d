//! Runs the pttestgen binary on the .ptt files in tests/data and checks every file it
//! writes, what it prints, and that errors leave nothing behind.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh, empty directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("pttestgen-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create temp dir");
        Self(dir)
    }

    fn entries(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(&self.0)
            .expect("read temp dir")
            .map(|e| {
                e.expect("dir entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        names
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// Run pttestgen with `args` in `cwd`.
fn run(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pttestgen"))
        .current_dir(cwd)
        .args(args)
        .output()
        .expect("run pttestgen")
}

fn stdout_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

const BASIC_PTDUMP: &str = "\
0000000000000000  psb
0000000000000010  mode.exec  cs.l
0000000000000012  fup        3: 0000000000200000
0000000000000019  psbend
000000000000001b  tnt.8      !.
000000000000001c  tip.pgd    1: ????????????0002
000000000000001f  pad
[end at 20]
";

const BASIC_PTXED: &str = "0000000000200000\n0000000000000002\n";

fn basic_trace() -> Vec<u8> {
    let mut pt = [0x02, 0x82].repeat(8);
    pt.extend([0x99, 0x01]); // mode.exec 64-bit
    pt.extend([0x7d, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00]); // fup sext-48
    pt.extend([0x02, 0x23]); // psbend
    pt.push(0x0c); // tnt.8 taken, not taken
    pt.extend([0x21, 0x02, 0x00]); // tip.pgd update-16
    pt.push(0x00); // pad
    pt
}

#[test]
fn writes_all_files_in_the_current_directory() {
    let dir = TempDir::new("cwd");
    let ptt = data("basic.ptt");
    let out = run(&dir.0, &[ptt.to_str().expect("utf-8 path")]);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty());
    assert_eq!(stdout_lines(&out), ["basic-ptdump.exp", "basic-ptxed.exp"]);
    assert_eq!(
        dir.entries(),
        [
            "basic-ptdump.exp",
            "basic-ptxed.exp",
            "basic.bin",
            "basic.lst",
            "basic.pt"
        ]
    );
    let read = |n: &str| fs::read(dir.0.join(n)).expect(n);
    assert_eq!(read("basic.pt"), basic_trace());
    assert_eq!(read("basic.bin"), [0x90, 0x90, 0xf4]);
    assert_eq!(
        String::from_utf8_lossy(&read("basic-ptdump.exp")),
        BASIC_PTDUMP
    );
    assert_eq!(
        String::from_utf8_lossy(&read("basic-ptxed.exp")),
        BASIC_PTXED
    );
    let lst = String::from_utf8_lossy(&read("basic.lst")).into_owned();
    assert!(lst.contains("finish: hlt"), "listing: {lst}");
}

#[test]
fn cpu_names_the_expectations() {
    let dir = TempDir::new("cpu");
    let ptt = data("basic.ptt");
    let ptt = ptt.to_str().expect("utf-8 path");
    let out = run(&dir.0, &["--cpu", "6/158", ptt]);
    assert!(out.status.success());
    assert_eq!(
        stdout_lines(&out),
        ["basic-ptdump-cpu_6_158.exp", "basic-ptxed-cpu_6_158.exp"]
    );
    let out = run(&dir.0, &["--cpu", "0x6/0x8e/9", ptt]);
    assert_eq!(
        stdout_lines(&out),
        [
            "basic-ptdump-cpu_6_142_9.exp",
            "basic-ptxed-cpu_6_142_9.exp"
        ]
    );
    let exp = fs::read_to_string(dir.0.join("basic-ptxed-cpu_6_142_9.exp")).expect("exp");
    assert_eq!(exp, BASIC_PTXED);
    let out = run(&dir.0, &["--cpu", "none", ptt]);
    assert_eq!(stdout_lines(&out), ["basic-ptdump.exp", "basic-ptxed.exp"]);

    let before = dir.entries();
    let out = run(&dir.0, &["--cpu", "6", ptt]);
    assert!(!out.status.success());
    assert_eq!(dir.entries(), before);
}

#[test]
fn output_dir_option() {
    let cwd = TempDir::new("odir-cwd");
    let dest = TempDir::new("odir-dest");
    let ptt = data("basic.ptt");
    let out = run(
        &cwd.0,
        &[
            "-o",
            dest.0.to_str().expect("utf-8 path"),
            ptt.to_str().expect("utf-8 path"),
        ],
    );
    assert!(out.status.success());
    assert!(cwd.entries().is_empty());
    assert_eq!(dest.entries().len(), 5);
    let printed = stdout_lines(&out);
    assert_eq!(printed.len(), 2);
    assert_eq!(Path::new(&printed[0]), dest.0.join("basic-ptdump.exp"));
    assert_eq!(fs::read_to_string(&printed[1]).expect("exp"), BASIC_PTXED);
}

/// Run on a bad file: exactly one `pttestgen: file:line: ` error line, failure, no files.
fn assert_rejected(name: &str, line: usize, message: &str) {
    let dir = TempDir::new(name);
    let ptt = data(name);
    let ptt = ptt.to_str().expect("utf-8 path");
    let out = run(&dir.0, &[ptt]);
    assert!(!out.status.success(), "{name} was accepted");
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "stderr: {stderr}");
    let prefix = format!("pttestgen: {ptt}:{line}: ");
    assert!(
        lines[0].starts_with(&prefix),
        "{} does not start with {prefix}",
        lines[0]
    );
    assert!(
        lines[0].contains(message),
        "{} does not mention {message}",
        lines[0]
    );
    assert!(dir.entries().is_empty(), "left behind: {:?}", dir.entries());
}

#[test]
fn bad_directive_is_one_error_line_and_no_files() {
    assert_rejected(
        "bad_directive.ptt",
        5,
        "fup: parsing failed (ipc missing or has invalid value)",
    );
}

#[test]
fn bad_expectation_is_one_error_line_and_no_files() {
    assert_rejected("bad_expectation.ptt", 9, "no such label '%nowhere'");
}

#[test]
fn bad_instruction_is_one_error_line_and_no_files() {
    assert_rejected("bad_instruction.ptt", 5, "");
}

#[test]
fn missing_input_fails_cleanly() {
    let dir = TempDir::new("missing");
    let out = run(&dir.0, &["no-such-file.ptt"]);
    assert!(!out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
    assert!(dir.entries().is_empty());
}

#[test]
fn all_cpus_writes_one_set_per_cpu_line() {
    let dir = TempDir::new("allcpus");
    let ptt = data("cpus.ptt");
    let out = run(&dir.0, &["--all-cpus", ptt.to_str().expect("utf-8 path")]);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout_lines(&out),
        ["cpus-ptdump-cpu_6_142.exp", "cpus-ptdump-cpu_6_158_10.exp"]
    );
    let want = "0000000000000000  psb\n0000000000000010  psbend\n";
    for name in stdout_lines(&out) {
        assert_eq!(fs::read_to_string(dir.0.join(&name)).expect("exp"), want);
    }
    assert_eq!(fs::read(dir.0.join("cpus.bin")).expect("bin"), [0xc3]);

    // Without cpu lines, --all-cpus is a plain run.
    let ptt = data("basic.ptt");
    let out = run(&dir.0, &["--all-cpus", ptt.to_str().expect("utf-8 path")]);
    assert_eq!(stdout_lines(&out), ["basic-ptdump.exp", "basic-ptxed.exp"]);
    // It cannot be combined with --cpu.
    let out = run(
        &dir.0,
        &[
            "--all-cpus",
            "--cpu",
            "6/1",
            ptt.to_str().expect("utf-8 path"),
        ],
    );
    assert!(!out.status.success());
}

#[test]
fn missing_org_is_rejected() {
    assert_rejected("no_org.ptt", 0, "'org' directive is required");
}

#[test]
fn sideband_streams_are_written_and_listed() {
    let dir = TempDir::new("sideband");
    let out = run(&dir.0, &[data("sideband.ptt").to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let pevent = "sideband-pevent-primary,sample-type=0x2,time-zero=0x0,time-shift=0x0,\
                  time-mult=0x1.sb";
    assert_eq!(
        stdout_lines(&out),
        ["sideband-ptdump.exp", "sideband-raw-secondary.sb", pevent]
    );
    assert_eq!(
        dir.entries(),
        [
            pevent,
            "sideband-ptdump.exp",
            "sideband-raw-secondary.sb",
            "sideband.bin",
            "sideband.lst",
            "sideband.pt",
        ]
    );
    assert_eq!(
        fs::read(dir.0.join("sideband-raw-secondary.sb")).unwrap(),
        [0x5a]
    );
    // PERF_RECORD_COMM, 32 bytes: header, pid/tid, "x" padded to 8, the tid sample.
    let mut comm = vec![3, 0, 0, 0, 0, 0, 32, 0, 1, 0, 0, 0, 2, 0, 0, 0, b'x'];
    comm.extend([0; 7]);
    comm.extend([1, 0, 0, 0, 2, 0, 0, 0]);
    assert_eq!(fs::read(dir.0.join(pevent)).unwrap(), comm);
    assert_eq!(
        fs::read_to_string(dir.0.join("sideband-ptdump.exp")).unwrap(),
        "0000000000000000 psb\n0000000000000000 comm\n"
    );
}

#[test]
fn devices_and_directories_are_refused_at_once() {
    let tmp = TempDir::new("devices");
    let dir = tmp.0.to_str().unwrap().to_string();
    for (path, what) in [
        ("/dev/zero", "a character device"),
        ("/dev/urandom", "a character device"),
        (dir.as_str(), "a directory"),
    ] {
        let t = std::time::Instant::now();
        let out = run(&tmp.0, &[path]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{path}: {err}");
        assert_eq!(
            err.trim_end(),
            format!("pttestgen: {path}: cannot read: it is {what}, not a .ptt file")
        );
        assert!(t.elapsed() < std::time::Duration::from_secs(10), "{path}");
    }
    assert!(tmp.entries().is_empty());
}
