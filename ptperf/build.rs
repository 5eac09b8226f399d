//! Builds the QEMU plugin (`qemu-plugin/`, whose one dependency is the wire
//! format, `qemu-wire/`, which has none) with rustc and leaves it in OUT_DIR: `ptperf record --source qemu` embeds it, so the
//! plugin always matches the recorder that reads its stream, and a
//! `cargo run -p ptperf` has it without building another crate.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    println!("cargo:rerun-if-changed=../qemu-plugin/src");
    println!("cargo:rerun-if-changed=../qemu-wire/src");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    let wire = out_dir.join("libpt_qemu_wire.rlib");
    rustc(
        &["--crate-type=rlib", "--crate-name=pt_qemu_wire"],
        &dir.join("../qemu-wire/src/lib.rs"),
        &wire,
    );
    let mut extern_wire = std::ffi::OsString::from("pt_qemu_wire=");
    extern_wire.push(&wire);
    rustc(
        &[
            "--crate-type=cdylib",
            "--crate-name=pt_qemu_plugin",
            "-C",
            "strip=symbols",
            "--extern",
            extern_wire.to_str().expect("OUT_DIR is UTF-8"),
        ],
        &dir.join("../qemu-plugin/src/lib.rs"),
        &out_dir.join("libpt_qemu_plugin.so"),
    );
}

/// Compiles the crate at `src` into `out` (optimized, panics abort: the
/// plugin must not unwind into QEMU).
fn rustc(args: &[&str], src: &Path, out: &Path) {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut cmd = Command::new(rustc);
    cmd.args([
        "--edition=2021",
        "-C",
        "opt-level=3",
        "-C",
        "panic=abort",
        "--cap-lints=allow",
    ]);
    cmd.args(args);
    if let Ok(target) = std::env::var("TARGET") {
        cmd.args(["--target", &target]);
    }
    cmd.arg("-L").arg(out.parent().expect("a file in OUT_DIR"));
    cmd.arg("-o").arg(out).arg(src);
    let status = cmd.status().expect("running rustc for the QEMU plugin");
    assert!(status.success(), "building {} failed", src.display());
}
