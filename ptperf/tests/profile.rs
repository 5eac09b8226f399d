//! `ptrec --decode` on a gcc-built C program: the decoded flow's branch
//! counts equal the recorded execution's, and its own functions show up by
//! name among the hottest ones.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::path::PathBuf;
use std::process::Command;

use pt_sim::exec::insn::InsnClass;
use pt_sim::exec::log::LogReader;
use pt_sim::exec::{ExecItem, ExecutionSource};
use pt_sim::record::sideband_path;

fn sample(dir: &std::path::Path) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs/sample.c");
    let bin = dir.join("sample");
    let st = Command::new(pt_testkit::tool("gcc", "gcc"))
        .args(["-O1", "-fno-inline-small-functions", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("run gcc");
    assert!(st.success());
    bin
}

#[test]
fn decoded_flow_profile_of_a_c_program() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("profile-sample");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bin = sample(&dir);
    let trace = dir.join("t.pt");
    let out = Command::new(env!("CARGO_BIN_EXE_ptrec"))
        .args(["--backend", "sim", "--decode", "--top", "30", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&bin)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stderr);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        report.contains("identical to the recorded execution"),
        "{report}"
    );
    assert!(
        report.contains("hottest functions by instructions (top 30 of "),
        "{report}"
    );
    // The program's functions, named from its symbol table, in the list.
    let listed: Vec<&str> = report
        .lines()
        .skip_while(|l| !l.contains("hottest functions"))
        .skip(1)
        .collect();
    for f in ["fib", "classify", "cmp", "main"] {
        assert!(
            listed
                .iter()
                .any(|l| l.contains(&format!("  {f}  (sample)"))),
            "{f} missing:\n{report}"
        );
    }

    // The same numbers through the library, against the ground truth.
    let log = {
        let mut p = trace.as_os_str().to_owned();
        p.push(".log");
        PathBuf::from(p)
    };
    let (summary, prof) =
        ptperf::verify::verify_profile(&trace, &sideband_path(&trace), &log, &mut |_| {}).unwrap();
    assert!(summary.identical());
    assert_eq!(prof.insns, summary.expected);
    assert_eq!(
        prof.functions.iter().map(|f| f.insns).sum::<u64>(),
        prof.insns
    );
    let mut want = ptperf::profile::BranchCounts::default();
    let mut r = LogReader::open(&log).unwrap();
    while let Ok(Some(item)) = r.next_item() {
        let ExecItem::Insn(i) = item else { continue };
        match i.class {
            InsnClass::CondBranch if i.next_ip == i.fall_through() => want.cond_not_taken += 1,
            InsnClass::CondBranch => want.cond_taken += 1,
            InsnClass::DirectJump => want.jump_direct += 1,
            InsnClass::IndirectJump => want.jump_indirect += 1,
            InsnClass::DirectCall => want.call_direct += 1,
            InsnClass::IndirectCall => want.call_indirect += 1,
            InsnClass::Return => want.returns += 1,
            InsnClass::FarBranch => want.far += 1,
            InsnClass::KernelEntry => {
                want.far += 1;
                want.syscalls += 1;
            }
            InsnClass::Other => {}
        }
    }
    let mut got = prof.branches.clone();
    assert!(got.returns_compressed <= got.returns);
    // Most returns go back to their call: compressed.
    assert!(got.returns_compressed * 2 > got.returns, "{got:?}");
    got.returns_compressed = 0;
    assert_eq!(got, want);
    assert!(want.syscalls > 0 && want.call_indirect > 0 && want.cond_taken > 0);
    // fib(12) alone makes 465 calls of a function of a handful of instructions.
    let fib = prof
        .functions
        .iter()
        .find(|f| f.name.as_deref() == Some("fib"))
        .unwrap();
    assert!(fib.insns > 465 * 4, "{fib:?}");
}
