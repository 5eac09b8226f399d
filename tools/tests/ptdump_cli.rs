//! The ptdump binary: argument errors, file ranges, exit codes.

use std::path::PathBuf;
use std::process::Command;

use pt_encoder::{encode_to_vec, Packet};

fn trace_file(name: &str) -> PathBuf {
    let mut v = Vec::new();
    for p in [
        Packet::Psb,
        Packet::Pad,
        Packet::Psbend,
        Packet::Tsc { tsc: 0x42 },
    ] {
        encode_to_vec(&p, &mut v).unwrap();
    }
    let dir = std::env::temp_dir().join(format!("ptdump-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, v).unwrap();
    path
}

fn ptdump(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ptdump"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn dumps_a_file_and_a_range() {
    let f = trace_file("a.pt");
    let f = f.to_str().unwrap();
    let (code, out, err) = ptdump(&[f]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(
        out,
        "0000000000000000  psb\n0000000000000010  pad\n0000000000000011  psbend\n\
         0000000000000013  tsc        42\n"
    );
    // From offset 0x11, without sync: offsets are relative to the range.
    let (code, out, _) = ptdump(&["--no-sync", "--no-offset", &format!("{f}:0x11-0x13")]);
    assert_eq!((code, out.as_str()), (0, "psbend\n"));
    let (code, out, _) = ptdump(&["--cpu", "0/0", "--quiet", f]);
    assert_eq!(
        (code, out.as_str()),
        (0, "[0: failed to determine errata: unknown cpu]\n")
    );
}

#[test]
fn errors_are_one_line_on_stderr() {
    let f = trace_file("b.pt");
    let f = f.to_str().unwrap();
    let dir = std::env::temp_dir();
    let dir = dir.to_str().unwrap();
    let zz = format!("{f}:zz");
    let extra = [f, "more"];
    let cases: [(&[&str], i32, &str); 10] = [
        (&[], 1, "No processor trace file specified."),
        (&["--mtc-freq", f], 1, "--mtc-freq: bad argument:"),
        (
            &["--time", "--tcal", f],
            1,
            "specify either --time or --tcal.",
        ),
        (&["--frobnicate", f], 1, "unknown option: --frobnicate."),
        (
            &[&format!("{f}:8-4")],
            1,
            "the end 0x4 is not after the start 0x8.",
        ),
        (&[&format!("{f}:0x100")], 1, "bad offset 0x100 into"),
        (&[&zz], 1, "'zz' is no offset or range (<from>[-<to>])."),
        (&[dir], 1, "it is a directory."),
        (
            &["/nonexistent/t.pt"],
            1,
            "failed to open /nonexistent/t.pt: No such file or directory.",
        ),
        (&extra, 1, "more: one trace file, after the options"),
    ];
    for (args, want_code, want_err) in cases {
        let (code, out, err) = ptdump(args);
        assert_eq!(code, want_code, "{args:?}");
        assert_eq!(out, "", "{args:?}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want_err), "{args:?}: {err}");
    }
    let (code, _, err) = ptdump(&["/nonexistent/trace.pt"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("failed to open /nonexistent/trace.pt"),
        "{err}"
    );
}

#[test]
fn help_and_version() {
    let (code, out, _) = ptdump(&["--help"]);
    assert_eq!(code, 0);
    for flag in [
        "--no-sync",
        "--tcal",
        "--keep-tcal-on-ovf",
        "--cpuid-0x15.ebx",
        "--json",
    ] {
        assert!(out.contains(flag), "{flag}");
    }
    let (code, out, _) = ptdump(&["--version"]);
    assert_eq!(code, 0);
    assert!(out.contains("pt-decoder"));
}

/// Devices that never end are refused at once, by ptdump and ptxed alike, as
/// libipt's tools refuse them (they need a file's size).
#[test]
fn devices_are_refused_at_once() {
    for dev in ["/dev/zero", "/dev/urandom"] {
        let (code, out, err) = ptdump(&[dev]);
        assert_eq!(code, 1, "{err}");
        assert!(out.is_empty());
        assert!(
            err.ends_with(&format!(
                "failed to open {dev}: it is a character device, not a trace file.\n"
            )),
            "{err}"
        );
        let o = Command::new(env!("CARGO_BIN_EXE_ptxed"))
            .args(["--pt", dev])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains("it is a character device, not a trace file"),
            "{err}"
        );
    }
}
