//! The README's main job: ptdemo on the bundled example and on a file given by path.

use std::process::Command;

#[test]
fn bundled_demo_dumps_and_matches_its_expectation() {
    let out = Command::new(env!("CARGO_BIN_EXE_ptdemo")).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("tip.pgd    0: ????????????????"),
        "{stdout}"
    );
    assert!(
        stdout.contains("ptdump output matches demo-ptdump.exp"),
        "{stdout}"
    );
    assert!(stdout.contains("tnt.8      3"), "{stdout}");
}

#[test]
fn a_wrong_expectation_fails() {
    let dir = std::env::temp_dir().join(format!("ptdemo-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = "org 0x1000\nbits 64\n; @pt p1: psb()\n; @pt p2: psbend()\n\
               ; @pt .exp(ptdump)\n;%0p1  psb\n;%0p2  pad\n";
    let file = dir.join("wrong.ptt");
    std::fs::write(&file, src).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ptdemo"))
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("expected `0000000000000010 pad`"));
    std::fs::remove_dir_all(&dir).ok();
}
