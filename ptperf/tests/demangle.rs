//! C++ and Rust names as perf 6.1 prints them: a C++ program with templates,
//! a namespace, an exception and `.cold` parts (built here with g++) and a
//! Rust program (rustc), recorded on the simulator, then `perf script`/`report`
//! and ours on the same file, with and without `--no-demangle`: the output
//! must be byte for byte the same.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The C++ program, built with g++ -O2 (dynamically linked: libstdc++'s and
/// libgcc's names go through their .plt entries).
fn program() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/cxx_names.cpp");
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("prog-cxx_names");
        let st = Command::new(pt_testkit::tool("g++", "g++"))
            .args(["-O2", "-g", "-o"])
            .arg(&out)
            .arg(&src)
            .status()
            .unwrap();
        assert!(st.success(), "g++ failed");
        out
    })
}

/// The program's recording (the simulator takes a while: once).
fn recording() -> &'static PathBuf {
    static F: OnceLock<PathBuf> = OnceLock::new();
    F.get_or_init(|| {
        let d = common::dir("demangle");
        common::record(&d, "cxx", &[], &[program().as_os_str()])
    })
}

fn run(tool: &Path, cmd: &str, file: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(tool);
    if tool.ends_with("perf") {
        c.arg("--buildid-dir").arg(common::debug_of(file));
    }
    c.arg(cmd)
        .arg("-i")
        .arg(file)
        .args(args)
        .env("PERF_PAGER", "cat")
        .env("HOME", std::env::temp_dir())
        .output()
        .unwrap()
}

/// perf's and our stdout for `cmd args` (both must succeed).
fn both(cmd: &str, args: &[&str]) -> (String, String) {
    both_on(recording(), cmd, args)
}

/// [`both`] on `file`.
fn both_on(file: &Path, cmd: &str, args: &[&str]) -> (String, String) {
    let perf = pt_testkit::tool("perf", "linux-perf");
    let theirs = run(&perf, cmd, file, args);
    let ours = run(Path::new(env!("CARGO_BIN_EXE_ptperf")), cmd, file, args);
    assert!(
        theirs.status.success(),
        "perf {cmd} {args:?}: {}",
        common::stderr(&theirs)
    );
    assert!(
        ours.status.success(),
        "ptperf {cmd} {args:?}: {}",
        common::stderr(&ours)
    );
    (
        String::from_utf8_lossy(&theirs.stdout).into_owned(),
        String::from_utf8_lossy(&ours.stdout).into_owned(),
    )
}

/// perf report's closing tip (`#`, `# (Tip: …)`, `#`) is not ours to print.
fn without_tip(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    let n = lines.len();
    let cut = if n >= 3 && lines[n - 2].starts_with("# (Tip:") && lines[n - 1] == "#" {
        n - 3
    } else {
        n
    };
    lines[..cut].iter().map(|l| format!("{l}\n")).collect()
}

#[track_caller]
fn assert_same(what: &str, theirs: &str, ours: &str) {
    if theirs != ours {
        let (t, o): (Vec<&str>, Vec<&str>) = (theirs.lines().collect(), ours.lines().collect());
        let i = t.iter().zip(&o).take_while(|(a, b)| a == b).count();
        panic!(
            "{what} differs at line {} (perf {} lines, ptperf {}):\nperf:   {:?}\nptperf: {:?}",
            i + 1,
            t.len(),
            o.len(),
            t.get(i),
            o.get(i)
        );
    }
}

#[test]
fn script_names_cxx_symbols_as_perf() {
    for args in [
        &["--itrace=b", "-F", "ip,sym,symoff,dso,addr"][..],
        &["--itrace=i100ig"],
        &["--call-ret-trace"],
        &["--itrace=b", "--no-demangle"],
        &["--itrace=i100ig", "--no-demangle"],
    ] {
        let (theirs, ours) = both("script", args);
        assert!(theirs.lines().count() > 1000, "{args:?}: too little output");
        assert_same(&format!("script {args:?}"), &theirs, &ours);
        // What the program is about: its own demangled names, a `.cold`
        // part's (named as its function), libstdc++'s through the .plt.
        if args.contains(&"--no-demangle") {
            assert!(ours.contains("_Z7checkedi"), "{args:?}");
        } else if args[0] == "--itrace=b" {
            for name in [
                "twice<int>",
                "twice<double>",
                "shapes::Square::area",
                "guarded",
                "checked",
            ] {
                assert!(ours.contains(name), "{args:?}: {name} missing");
            }
            assert!(ours.contains("__cxa_throw@plt"), "{args:?}");
            assert!(!ours.contains("_Z7checkedi"), "{args:?}");
        }
    }
}

/// The `.cold` part of `checked` (where it throws) runs, and perf names it
/// `checked` too (libiberty without parameters drops clone suffixes).
#[test]
fn cold_part_is_named_as_its_function() {
    let (_, ours) = both("script", &["--itrace=b", "-F", "ip,sym", "--no-demangle"]);
    assert!(
        ours.contains("_Z7checkedi.cold"),
        "the .cold part did not run"
    );
    let (theirs, ours) = both("script", &["--itrace=b", "-F", "ip,sym"]);
    assert_same("script -F ip,sym", &theirs, &ours);
    assert!(!ours.contains(".cold"));
}

#[test]
fn report_names_cxx_symbols_as_perf() {
    for args in [
        &["--stdio"][..],
        &["--stdio", "--no-children", "--sort", "sym"],
        &["--stdio", "--no-demangle"],
    ] {
        let (theirs, ours) = both("report", args);
        assert_same(&format!("report {args:?}"), &without_tip(&theirs), &ours);
        assert!(ours.lines().count() > 20, "{args:?}");
    }
}

/// The Rust program, built with rustc -O (its own functions, std's generic
/// and closure names).
fn rust_recording() -> &'static PathBuf {
    static F: OnceLock<PathBuf> = OnceLock::new();
    F.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/rust_names.rs");
        let d = common::dir("demangle-rust");
        let prog = d.join("rust_names");
        let st = Command::new(pt_testkit::tool("rustc", "rustc"))
            .args(["-O", "-g", "-o"])
            .arg(&prog)
            .arg(&src)
            .status()
            .unwrap();
        assert!(st.success(), "rustc failed");
        common::record(&d, "rust", &[], &[prog.as_os_str()])
    })
}

#[test]
fn script_names_rust_symbols_as_perf() {
    for args in [
        &["--itrace=b", "-F", "ip,sym,symoff,dso"][..],
        &["--itrace=b", "-F", "ip,sym", "--no-demangle"],
    ] {
        let (theirs, ours) = both_on(rust_recording(), "script", args);
        assert_same(&format!("script {args:?}"), &theirs, &ours);
        if args.contains(&"--no-demangle") {
            assert!(ours.contains("_ZN") || ours.contains(" _R"), "{args:?}");
        } else {
            for name in [
                "rust_names::count",
                "rust_names::Pt::norm",
                "std::rt::lang_start_internal",
            ] {
                assert!(ours.contains(name), "{args:?}: {name} missing");
            }
            // No legacy hash is left.
            assert!(!ours.contains("::h0") && !ours.contains("17h"), "{args:?}");
        }
    }
}
