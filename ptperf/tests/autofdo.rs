//! AutoFDO end to end: a C program built with clang -O2 -g, recorded on the
//! simulator; the LLVM sample profile of its decoded flow is checked against
//! the recorded execution (the ground truth) and the program's known counts,
//! read by llvm-profdata, and used by clang to build the program again.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use pt_perf::session::{Session, SessionOptions};
use pt_perf_data::MappedFile;
use pt_sim::exec::log::LogReader;
use pt_sim::exec::{ExecItem, ExecutionSource};
use ptperf::profile_llvm::{perf, LlvmProfile};

/// Calls of `work` the test run makes.
const N: u64 = 3000;

fn source() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs/autofdo.c")
}

/// The line holding `marker` in the test program.
fn line_of(marker: &str) -> u32 {
    let text = std::fs::read_to_string(source()).unwrap();
    let i = text.lines().position(|l| l.contains(marker)).unwrap();
    i as u32 + 1
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn clang() -> PathBuf {
    pt_testkit::tool("clang", "clang")
}

#[test]
fn llvm_profile_of_a_recorded_clang_program() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("autofdo-llvm");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("autofdo");
    run(Command::new(clang())
        .args(["-O2", "-g", "-fdebug-info-for-profiling", "-o"])
        .arg(&bin)
        .arg(source()));
    let want_out = run(Command::new(&bin).arg(N.to_string()));

    // Record on the simulator into perf.data (its execution log beside it:
    // `--exec-log`),
    // with the default source (QEMU where installed): its mappings are the
    // program's segments, the executable one where llvm-profgen looks.
    let data = dir.join("perf.data");
    let out = Command::new(env!("CARGO_BIN_EXE_ptperf"))
        .args(["record", "--backend", "sim", "--exec-log", "-q", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&bin)
        .arg(N.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The counts per address are the recorded execution's.
    let mapped = MappedFile::open(&data).unwrap();
    let parsed = mapped.parse().unwrap();
    let session = Session::new(&parsed, SessionOptions::for_file(&data)).unwrap();
    let (procs, problems) = perf::collect(&session);
    assert!(problems.lines.is_empty(), "{:?}", problems.lines);
    let mut procs: Vec<_> = procs
        .into_iter()
        .filter(|p| !p.counts.insns.is_empty())
        .collect();
    assert_eq!(procs.len(), 1, "one process");
    let proc_ = procs.remove(0);
    let (counts, modules) = (proc_.counts, proc_.modules);
    let log = PathBuf::from(format!("{}.log", data.display()));
    let mut truth: HashMap<u64, u64> = HashMap::new();
    let mut r = LogReader::open(&log).unwrap();
    while let Some(item) = r.next_item().unwrap() {
        if let ExecItem::Insn(i) = item {
            *truth.entry(i.ip).or_default() += 1;
        }
    }
    let mut truth: Vec<(u64, u64)> = truth.into_iter().collect();
    truth.sort_unstable();
    assert_eq!(counts.insns, truth);

    check_llvm_profgen(&dir, &data, &bin);

    let p = LlvmProfile::build(&counts, &modules);
    let mut text = Vec::new();
    p.write_text(&mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    // `ptperf profile --llvm` writes the same profile, to a file or stdout.
    let prof = dir.join("autofdo.prof");
    run(Command::new(env!("CARGO_BIN_EXE_ptperf"))
        .args(["profile", "--llvm", "-q", "-i"])
        .arg(&data)
        .arg("-o")
        .arg(&prof));
    assert_eq!(std::fs::read_to_string(&prof).unwrap(), text);
    let piped = run(Command::new(env!("CARGO_BIN_EXE_ptperf"))
        .args(["profile", "--llvm", "-q", "-i"])
        .arg(&data));
    assert_eq!(piped, text);
    check_profile(&p, &text);
    check_with_llvm(&dir, &p, &text, &want_out);
}

/// The program's known counts in the profile.
fn check_profile(p: &LlvmProfile, text: &str) {
    // Only the program has DWARF: its two functions, work the hottest.
    let hottest: Vec<&str> = p.hottest().iter().map(|f| f.name.as_str()).collect();
    assert_eq!(hottest, ["work", "main"], "{text}");
    let work = &p.functions["work"];
    let main = &p.functions["main"];
    assert_eq!(work.head, N, "{text}");
    assert_eq!(main.head, 1, "{text}");
    // work's loop body runs 8 times per call: unrolled, each copy of it runs
    // once per call and stands for 8 iterations (its duplication factor).
    let decl_work = line_of("static int work(");
    let body = work
        .body
        .iter()
        .filter(|(loc, _)| loc.offset == line_of("L_WORK_BODY") - decl_work)
        .map(|(_, s)| s.count)
        .max();
    assert_eq!(body, Some(8 * N), "{text}");
    // The call line: N executions, N calls of work.
    let decl_main = line_of("int main(");
    let call = main
        .body
        .iter()
        .find(|(loc, _)| loc.offset == line_of("L_CALL") - decl_main)
        .map(|(_, s)| s)
        .unwrap_or_else(|| panic!("no call line\n{text}"));
    assert_eq!(call.count, N, "{text}");
    assert_eq!(call.calls.get("work"), Some(&N), "{text}");
    // Every instruction of the functions is in their totals.
    assert!(work.total >= 8 * N, "{text}");
}

fn check_with_llvm(dir: &Path, p: &LlvmProfile, text: &str, want_out: &str) {
    let profdata = pt_testkit::tool("llvm-profdata-14", "llvm-14");
    let prof = dir.join("autofdo.prof");
    let merged = dir.join("autofdo.profdata");
    run(Command::new(&profdata)
        .args(["merge", "--sample", "-o"])
        .arg(&merged)
        .arg(&prof));
    let shown = run(Command::new(&profdata)
        .args(["show", "--sample", "--function=work"])
        .arg(&merged));
    assert!(
        shown.starts_with(&format!(
            "Function: work: {}, {N}, ",
            p.functions["work"].total
        )),
        "{shown}\n{text}"
    );
    // LLVM's reader and writer give back our text as it was.
    let back = run(Command::new(&profdata)
        .args(["merge", "--sample", "--text", "-o", "-"])
        .arg(&merged));
    assert_eq!(back, text);

    // clang builds the program with the profile, and takes its counts: work's
    // entry count is its head samples plus one.
    let ir = dir.join("autofdo.ll");
    run(Command::new(clang())
        .args([
            "-O2",
            "-g",
            "-fdebug-info-for-profiling",
            "-S",
            "-emit-llvm",
            "-o",
        ])
        .arg(&ir)
        .arg(format!("-fprofile-sample-use={}", merged.display()))
        .arg(source()));
    let ir = std::fs::read_to_string(&ir).unwrap();
    assert!(
        ir.contains(&format!("!{{!\"function_entry_count\", i64 {}}}", N + 1)),
        "no entry count {} in the IR",
        N + 1
    );
    let rebuilt = dir.join("autofdo-fdo");
    run(Command::new(clang())
        .args(["-O2", "-g", "-o"])
        .arg(&rebuilt)
        .arg(format!("-fprofile-sample-use={}", merged.display()))
        .arg(source()));
    assert_eq!(run(Command::new(&rebuilt).arg(N.to_string())), want_out);
}

/// AutoFDO through perf's path: `ptperf inject --itrace=i…usle` (instruction
/// samples with branch stacks, as perf inject writes them) read by
/// llvm-profgen `--perfdata` (which runs perf script on it). The period is
/// 1 µs: the simulated run lasts well under a millisecond, where perf's usual
/// i100us would sample nothing (perf inject's own output alike).
fn check_llvm_profgen(dir: &Path, data: &Path, bin: &Path) {
    let profgen = pt_testkit::tool("llvm-profgen-14", "llvm-14");
    let injected = dir.join("injected.data");
    run(Command::new(env!("CARGO_BIN_EXE_ptperf"))
        .args(["inject", "--itrace=i1usle", "-i"])
        .arg(data)
        .arg("-o")
        .arg(&injected));
    let prof = dir.join("profgen.prof");
    run(Command::new(profgen)
        .arg(format!("--perfdata={}", injected.display()))
        .arg(format!("--binary={}", bin.display()))
        .arg(format!("--output={}", prof.display()))
        .arg("--format=text"));
    let text = std::fs::read_to_string(&prof).unwrap();
    // work is the hottest function, called from main.
    assert!(text.starts_with("work:"), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("main:")) && text.contains(" work:"),
        "{text}"
    );
}
