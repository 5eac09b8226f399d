//! `ptperf record --decode` on a gcc-built C program: the decoded flow's branch
//! counts equal the recorded execution's, and its own functions show up by
//! name among the hottest ones.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use pt_sim::exec::insn::BranchClass;
use pt_sim::exec::log::LogReader;
use pt_sim::exec::{ExecItem, ExecutionSource};

use common::*;

#[test]
fn decoded_flow_profile_of_a_c_program() {
    let d = dir("profile-sample");
    let data = d.join("t.data");
    let out = ptperf()
        .args([
            "record",
            "--backend",
            "sim",
            "--decode",
            "--top",
            "30",
            "-o",
        ])
        .arg(&data)
        .arg("--")
        .arg(sample())
        .output()
        .unwrap();
    let report = stderr(&out);
    assert!(out.status.success(), "{report}");
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
    let name = sample().file_name().unwrap().to_string_lossy().into_owned();
    for f in ["fib", "classify", "cmp", "main"] {
        assert!(
            listed
                .iter()
                .any(|l| l.contains(&format!("  {f}  ({name})"))),
            "{f} missing:\n{report}"
        );
    }

    // The same numbers through the library, against the ground truth.
    let log = log_of(&data);
    let (checks, prof) = ptperf::verify::verify_profile(&data, &log, &mut |_| {}).unwrap();
    assert_eq!(checks.len(), 1);
    let summary = &checks[0].flow;
    assert!(summary.identical(), "{summary:?}");
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
            BranchClass::CondBranch if i.next_ip == i.fall_through() => want.cond_not_taken += 1,
            BranchClass::CondBranch => want.cond_taken += 1,
            BranchClass::DirectJump => want.jump_direct += 1,
            BranchClass::IndirectJump => want.jump_indirect += 1,
            BranchClass::DirectCall => want.call_direct += 1,
            BranchClass::IndirectCall => want.call_indirect += 1,
            BranchClass::Return => want.returns += 1,
            BranchClass::FarBranch => want.far += 1,
            BranchClass::KernelEntry => {
                want.far += 1;
                want.syscalls += 1;
            }
            BranchClass::Other => {}
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
