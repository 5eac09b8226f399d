//! ptxed's command line: help, version, argument errors and their exit codes. The
//! messages are libipt's ptxed's where those say what is wrong, and say more where
//! libipt's do not (which file, which offset, why); every argument error exits with 1.

use std::process::{Command, Output};

fn ptxed(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ptxed"))
        .args(args)
        .output()
        .expect("run ptxed")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).replace(env!("CARGO_BIN_EXE_ptxed"), "ptxed")
}

fn temp_file(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("ptxed-cli-{}-{name}", std::process::id()));
    std::fs::write(&path, bytes).expect("write");
    path
}

#[test]
fn help_and_version() {
    let o = ptxed(&["--help"]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    for flag in [
        "--pt <file>",
        "--raw <file>",
        "--block:show-blocks",
        "--insn-decoder",
        "--filter:addr<n>_cfg",
    ] {
        assert!(text.contains(flag), "help lacks {flag}");
    }
    let o = ptxed(&["--version"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains(env!("CARGO_PKG_VERSION")));
}

#[test]
fn argument_errors() {
    let o = ptxed(&[]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o), "ptxed: no pt file.\n");

    let o = ptxed(&["--frobnicate"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o), "ptxed: unknown option: --frobnicate.\n");

    let o = ptxed(&["--mtc-freq"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o), "ptxed: --mtc-freq: missing argument.\n");

    let o = ptxed(&["--mtc-freq", "256"]);
    assert_eq!(stderr(&o), "ptxed: --mtc-freq: value too big: 256.\n");

    let o = ptxed(&["--nom-freq", "x"]);
    assert_eq!(stderr(&o), "ptxed: --nom-freq: bad argument: x.\n");

    let o = ptxed(&["--runaway-limit", "many"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o), "ptxed: --runaway-limit: bad argument: many.\n");

    let o = ptxed(&["--cpu", "6"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "ptxed: --cpu 6: cpu must be specified as f/m[/s] (family/model[/stepping]).\n"
    );

    // A missing value is an error (libipt's ptxed exits with 0 here).
    for opt in [
        "--pt",
        "--raw",
        "--elf",
        "--cpu",
        "--pevent:primary",
        "--perf",
        "--iscache-limit",
    ] {
        let o = ptxed(&[opt]);
        assert_eq!(o.status.code(), Some(1), "{opt}");
        assert_eq!(stderr(&o), format!("ptxed: {opt}: missing argument.\n"));
    }

    let o = ptxed(&["--iscache-limit", "x"]);
    assert_eq!(stderr(&o), "ptxed: --iscache-limit: bad argument: x.\n");

    let o = ptxed(&["--threads", "0"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "ptxed: --threads: value too small: 0 (at least 1).\n"
    );

    let o = ptxed(&["--filter:addr0_cfg", "16"]);
    assert_eq!(
        stderr(&o),
        "ptxed: --filter:addr0_cfg: value too big: 16.\n"
    );

    let o = ptxed(&["--filter:addr4_cfg", "1"]);
    assert_eq!(stderr(&o), "ptxed: unknown option: --filter:addr4_cfg.\n");

    let o = ptxed(&["--threads"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o), "ptxed: --threads: missing argument.\n");

    let o = ptxed(&["--threads", "2000"]);
    assert_eq!(stderr(&o), "ptxed: --threads: value too big: 2000.\n");

    let o = ptxed(&["--threads:min-piece", "many"]);
    assert_eq!(
        stderr(&o),
        "ptxed: --threads:min-piece: bad argument: many.\n"
    );
}

#[test]
fn file_errors() {
    let o = ptxed(&["--pt", "/nonexistent/trace.pt"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).starts_with("ptxed: failed to open /nonexistent/trace.pt: "));

    let pt = temp_file("t.pt", &[0x02, 0x82]);
    let pt = pt.to_str().expect("utf-8 path");
    let o = ptxed(&["--pt", &format!("{pt}:0x10")]);
    assert_eq!(
        stderr(&o),
        format!("ptxed: bad offset 0x10 into {pt}: the file has 0x2 bytes.\n")
    );
    let o = ptxed(&["--pt", &format!("{pt}:1-0x10")]);
    assert_eq!(
        stderr(&o),
        format!("ptxed: bad range 0x10 in {pt}: the file has 0x2 bytes.\n")
    );
    // A range that is none, after an existing file: not a file name with a ':'.
    let o = ptxed(&["--pt", &format!("{pt}:zz")]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!("ptxed: bad range in {pt}:zz: 'zz' is no offset or range (<from>[-<to>]).\n")
    );
    let o = ptxed(&["--pt", &format!("{pt}:2-1")]);
    assert_eq!(
        stderr(&o),
        format!("ptxed: bad range in {pt}:2-1: the end 0x1 is not after the start 0x2.\n")
    );
    let dir = std::env::temp_dir();
    let dir = dir.to_str().expect("utf-8 path");
    let o = ptxed(&["--pt", dir]);
    assert_eq!(
        stderr(&o),
        format!("ptxed: failed to open {dir}: it is a directory.\n")
    );

    let o = ptxed(&["--pt", pt, "--pt", pt]);
    assert_eq!(stderr(&o), format!("ptxed: duplicate pt sources: {pt}.\n"));

    let o = ptxed(&["--pt", pt, "--cpu", "6/94"]);
    assert_eq!(
        stderr(&o),
        "ptxed: please specify cpu before the pt source file.\n"
    );

    let empty = temp_file("empty.bin", &[]);
    let empty = empty.to_str().expect("utf-8 path");
    let o = ptxed(&["--raw", &format!("{empty}:0x1000"), "--pt", pt]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!("ptxed: --raw {empty}:0x1000: {empty} is empty.\n")
    );
    let o = ptxed(&["--raw", pt, "--pt", pt]);
    assert_eq!(
        stderr(&o),
        format!("ptxed: --raw {pt}: no base address (<file>[:<from>[-<to>]]:<base>).\n")
    );
    let o = ptxed(&["--raw", &format!("{pt}:4-2:0x1000"), "--pt", pt]);
    assert_eq!(
        stderr(&o),
        format!("ptxed: --raw {pt}:4-2:0x1000: bad range: the end is not after the start.\n")
    );
    let o = ptxed(&["--raw", &format!("{pt}:0x10:0x1000"), "--pt", pt]);
    assert_eq!(
        stderr(&o),
        format!(
            "ptxed: --raw {pt}:0x10:0x1000: bad offset 0x10 into {pt}: the file has 0x2 bytes.\n"
        )
    );
    let o = ptxed(&["--raw", "/nonexistent/code.bin:0x1000", "--pt", pt]);
    assert_eq!(
        stderr(&o),
        "ptxed: --raw /nonexistent/code.bin:0x1000: failed to open /nonexistent/code.bin: \
         No such file or directory.\n"
    );
    let o = ptxed(&["--elf", dir, "--pt", pt]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!("ptxed: --elf {dir}: {dir} is a directory.\n")
    );
    let o = ptxed(&["--elf", pt, "--pt", pt]);
    assert_eq!(stderr(&o), format!("ptxed: --elf {pt}: not an ELF file.\n"));
}

#[test]
fn unknown_cpu_is_a_config_error_line() {
    // A lone PSB: nothing to decode, but the cpu is checked when the trace is loaded.
    let mut psb = Vec::new();
    for _ in 0..8 {
        psb.extend_from_slice(&[0x02, 0x82]);
    }
    psb.extend_from_slice(&[0x02, 0x23]);
    let pt = temp_file("psb.pt", &psb);
    let o = ptxed(&["--cpu", "0/0", "--pt", pt.to_str().expect("utf-8 path")]);
    assert!(o.status.success());
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "[0, 0: config error: unknown cpu]\n"
    );
}
