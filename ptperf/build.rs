//! Builds the QEMU plugin (`qemu-plugin/`, no dependencies) with rustc and
//! leaves it in OUT_DIR: `ptperf record --source qemu` embeds it, so the
//! plugin always matches the recorder that reads its stream, and a
//! `cargo run -p ptperf` has it without building another crate.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let src = dir.join("../qemu-plugin/src/lib.rs");
    println!("cargo:rerun-if-changed=../qemu-plugin/src");
    println!("cargo:rerun-if-changed=../sim/src/exec/qemu/wire.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"))
        .join("libpt_qemu_plugin.so");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut cmd = Command::new(rustc);
    cmd.args([
        "--edition=2021",
        "--crate-type=cdylib",
        "--crate-name=pt_qemu_plugin",
        "-C",
        "opt-level=3",
        "-C",
        "panic=abort",
        "-C",
        "strip=symbols",
        "--cap-lints=allow",
    ]);
    if let Ok(target) = std::env::var("TARGET") {
        cmd.args(["--target", &target]);
    }
    cmd.arg("-o").arg(&out).arg(&src);
    let status = cmd.status().expect("running rustc for the QEMU plugin");
    assert!(status.success(), "building the QEMU plugin failed");
}
