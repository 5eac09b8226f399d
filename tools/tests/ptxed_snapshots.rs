//! Snapshot tests of ptxed's output for the flag sets that matter, on traces and code
//! built here and on a program recorded with the simulator. The ignored test
//! `same_output_as_libipt_ptxed` runs libipt's ptxed (`PT_REFERENCE_PTXED`, with
//! `PT_REFERENCE_LIBS` as its `LD_LIBRARY_PATH` if it needs one) on the same inputs and
//! compares: that is how the snapshots were checked.

use pt_encoder::packet::{
    ExecMode, IpCompression, IpPacketKind, IpPayload, ModeExec, ModeTsx, Packet, PtwSize, Tnt,
};
use pt_testkit::trace::encode as bytes;
use std::path::{Path, PathBuf};
use std::process::Command;

const BASE: u64 = 0x40_1000;

/// ```text
/// 00: mov eax, 3
/// 05: call f          ; f = 0x20
/// 0a: dec eax
/// 0c: jnz 05
/// 0e: lea rbx, [rip+0x19]   ; 0x30
/// 15: jmp rbx
/// 20: f: add ecx, 1
/// 23: ret
/// 30: nop
/// 31: xbegin 0x40 (6)
/// 37: ptwrite eax (4)
/// 3b: xend (3)
/// 3e: jmp rax
/// 50: nop
/// 51: 0f a7 c2 (a VIA PadLock opcode XED does not know)
/// 54: nop
/// 55: nop
/// ```
fn code() -> Vec<u8> {
    let mut c = vec![0xcc; 0x60];
    c[0x50..0x56].copy_from_slice(&[0x90, 0x0f, 0xa7, 0xc2, 0x90, 0x90]);
    c[0x00..0x05].copy_from_slice(&[0xb8, 0x03, 0x00, 0x00, 0x00]);
    c[0x05..0x0a].copy_from_slice(&[0xe8, 0x16, 0x00, 0x00, 0x00]);
    c[0x0a..0x0c].copy_from_slice(&[0xff, 0xc8]);
    c[0x0c..0x0e].copy_from_slice(&[0x75, 0xf7]);
    c[0x0e..0x15].copy_from_slice(&[0x48, 0x8d, 0x1d, 0x1b, 0x00, 0x00, 0x00]);
    c[0x15..0x17].copy_from_slice(&[0xff, 0xe3]);
    c[0x20..0x23].copy_from_slice(&[0x83, 0xc1, 0x01]);
    c[0x23] = 0xc3;
    c[0x30] = 0x90;
    c[0x31..0x37].copy_from_slice(&[0xc7, 0xf8, 0x09, 0x00, 0x00, 0x00]);
    c[0x37..0x3b].copy_from_slice(&[0xf3, 0x0f, 0xae, 0xe0]);
    c[0x3b..0x3e].copy_from_slice(&[0x0f, 0x01, 0xd5]);
    c[0x3e..0x40].copy_from_slice(&[0xff, 0xe0]);
    c
}

fn ip(kind: IpPacketKind, ip: u64) -> Packet {
    Packet::Ip(kind, IpPayload::new(IpCompression::Full, ip))
}

fn tnt(bits: &str) -> Tnt {
    Tnt::from_results(bits.chars().map(|c| c == '!')).expect("tnt")
}

fn trace() -> Vec<u8> {
    bytes(&[
        Packet::Psb,
        Packet::Tsc { tsc: 0x1000 },
        Packet::Cbr { ratio: 0x20 },
        Packet::Psbend,
        Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)),
        ip(IpPacketKind::TipPge, BASE),
        Packet::Tnt8(tnt("!!!!!.")),
        Packet::Tsc { tsc: 0x2000 },
        ip(IpPacketKind::Tip, BASE + 0x30),
        Packet::ModeTsx(ModeTsx {
            intx: true,
            abrt: false,
        }),
        ip(IpPacketKind::Fup, BASE + 0x37),
        Packet::Ptw {
            size: PtwSize::Four,
            payload: 0xabcd,
            ip: true,
        },
        ip(IpPacketKind::Fup, BASE + 0x37),
        Packet::ModeTsx(ModeTsx {
            intx: false,
            abrt: false,
        }),
        ip(IpPacketKind::Fup, BASE + 0x3e),
        Packet::Ip(IpPacketKind::TipPgd, IpPayload::SUPPRESSED),
    ])
}

/// A trace that runs into unmapped code, then goes on with a TIP.
fn bad_trace() -> Vec<u8> {
    bytes(&[
        Packet::Psb,
        Packet::Psbend,
        Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)),
        ip(IpPacketKind::TipPge, BASE + 0x1000),
        ip(IpPacketKind::Tip, BASE + 0x20),
        Packet::Tnt8(tnt("!")),
        Packet::Psb,
        ip(IpPacketKind::Fup, BASE + 0x30),
        Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)),
        Packet::Psbend,
        ip(IpPacketKind::TipPgd, BASE + 0x37),
    ])
}

struct Files {
    dir: PathBuf,
}

impl Files {
    fn new(name: &str, trace: &[u8]) -> Self {
        let dir = std::env::temp_dir().join(format!("ptxed-snap-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(dir.join("t.pt"), trace).expect("write trace");
        std::fs::write(dir.join("t.bin"), code()).expect("write code");
        Files { dir }
    }

    fn run(&self, exe: &Path, flags: &str) -> String {
        let mut args: Vec<String> = vec!["--raw".into(), format!("t.bin:{BASE:#x}")];
        args.extend(flags.split_whitespace().map(String::from));
        args.extend(["--pt".into(), "t.pt".into()]);
        run(exe, &args, &self.dir)
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `exe args` in `dir`: its standard output.
fn run(exe: &Path, args: &[String], dir: &Path) -> String {
    let out = Command::new(exe)
        .args(args)
        .current_dir(dir)
        .env(
            "LD_LIBRARY_PATH",
            std::env::var_os("PT_REFERENCE_LIBS").unwrap_or_default(),
        )
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ours() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ptxed"))
}

fn ptxed(name: &str, trace: &[u8], flags: &str) -> String {
    Files::new(name, trace).run(ours(), flags)
}

/// The runs over the traces built here: (name, trace, flags).
fn cases() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let (t, bad) = (trace(), bad_trace());
    vec![
        ("default", t.clone(), ""),
        (
            "offsets",
            t.clone(),
            "--no-inst --offset --event:ip --event:time --time",
        ),
        ("blocks", t.clone(), "--no-inst --block:show-blocks --stat"),
        (
            "blocks-end",
            t.clone(),
            "--no-inst --block:show-blocks --block:end-on-call --block:end-on-jump --stat:blocks",
        ),
        ("insn", t.clone(), "--insn-decoder"),
        ("quiet", t.clone(), "--insn-decoder --quiet --stat"),
        ("quiet-block", t.clone(), "--quiet --stat --stat:insn"),
        ("tick", t.clone(), "--no-inst --event:tick --event:time"),
        ("err", bad.clone(), "--no-inst"),
        ("err-libipt", bad.clone(), "--no-inst --libipt-resync"),
        ("resync", bad.clone(), "--no-inst --resync-on-error"),
        (
            "resync-insn",
            bad,
            "--no-inst --resync-on-error --insn-decoder",
        ),
        ("cpu", t, "--no-inst --cpu 0/0"),
    ]
}

#[test]
fn default_output_with_disassembly() {
    insta::assert_snapshot!(ptxed("default", &trace(), ""));
}

#[test]
fn att_syntax_and_raw_bytes() {
    insta::assert_snapshot!(ptxed("att", &trace(), "--att"));
    insta::assert_snapshot!(ptxed("raw", &trace(), "--raw-insn"));
    insta::assert_snapshot!(ptxed(
        "insn-raw-att",
        &trace(),
        "--insn-decoder --raw-insn --att --offset"
    ));
    // Raw bytes go with the text: not printed with --no-inst, as in libipt's ptxed.
    insta::assert_snapshot!(ptxed("no-inst-raw", &trace(), "--no-inst --raw-insn"));
}

/// Straight-line code with an instruction XED does not decode, left at 0x56.
fn xed_error_trace() -> Vec<u8> {
    bytes(&[
        Packet::Psb,
        Packet::Psbend,
        Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)),
        ip(IpPacketKind::TipPge, BASE + 0x50),
        ip(IpPacketKind::Fup, BASE + 0x56),
        Packet::Ip(IpPacketKind::TipPgd, IpPayload::SUPPRESSED),
    ])
}

#[test]
fn xed_decode_error_ends_the_block() {
    insta::assert_snapshot!(ptxed("xed-error", &xed_error_trace(), ""));
    insta::assert_snapshot!(ptxed(
        "xed-error-insn",
        &xed_error_trace(),
        "--insn-decoder --raw-insn"
    ));
}

#[test]
fn addresses_only_with_offsets_and_event_details() {
    insta::assert_snapshot!(ptxed(
        "offsets",
        &trace(),
        "--no-inst --offset --event:ip --event:time --time"
    ));
}

#[test]
fn blocks_and_statistics() {
    insta::assert_snapshot!(ptxed(
        "blocks",
        &trace(),
        "--no-inst --block:show-blocks --stat"
    ));
    insta::assert_snapshot!(ptxed(
        "blocks-end",
        &trace(),
        "--no-inst --block:show-blocks --block:end-on-call --block:end-on-jump --stat:blocks"
    ));
}

#[test]
fn instruction_decoder_and_quiet_statistics() {
    let insn = ptxed("insn", &trace(), "--insn-decoder");
    let block = ptxed("block", &trace(), "");
    assert_eq!(insn, block, "both decoders print the same flow");
    insta::assert_snapshot!(ptxed("quiet", &trace(), "--insn-decoder --quiet --stat"));
    insta::assert_snapshot!(ptxed("quiet-block", &trace(), "--quiet --stat --stat:insn"));
}

#[test]
fn ticks() {
    insta::assert_snapshot!(ptxed(
        "tick",
        &trace(),
        "--no-inst --event:tick --event:time"
    ));
}

#[test]
fn errors_and_resync() {
    // Ours: going on at the TIP after the error, saying so.
    insta::assert_snapshot!(ptxed("err", &bad_trace(), "--no-inst"));
    // libipt's: at the next PSB.
    insta::assert_snapshot!(ptxed(
        "err-libipt",
        &bad_trace(),
        "--no-inst --libipt-resync"
    ));
    insta::assert_snapshot!(ptxed("resync", &bad_trace(), "--no-inst --resync-on-error"));
    insta::assert_snapshot!(ptxed(
        "resync-insn",
        &bad_trace(),
        "--no-inst --resync-on-error --insn-decoder"
    ));
}

#[test]
fn unknown_cpu_is_reported_and_ignored() {
    insta::assert_snapshot!(ptxed("cpu", &trace(), "--no-inst --cpu 0/0"));
}

/// The recorded program (see `ptxed_data/README.md`) and its arguments after `flags`.
fn recorded_args(flags: &str) -> Vec<String> {
    let mut args: Vec<String> = flags.split_whitespace().map(String::from).collect();
    args.extend(["--raw".into(), "switch.bin:0x401000".into()]);
    args.extend(["--pt".into(), "switch.pt".into()]);
    args
}

fn recorded_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ptxed_data"))
}

/// The flag sets the recorded program's output is pinned down for.
const RECORDED_FLAGS: [&str; 7] = [
    "",
    "--block:show-blocks --stat",
    "--insn-decoder --offset --time --no-inst",
    "--no-inst --block:end-on-call --block:end-on-jump --block:show-blocks --stat",
    "--quiet --stat",
    "--quiet --stat --insn-decoder",
    "--quiet --stat --insn-decoder --resync-on-error",
];

/// A program recorded with the simulator (see `ptxed_data/README.md`): the whole
/// output, with disassembly, block boundaries, offsets and times, was identical to
/// libipt's ptxed. Each long output is a snapshot of its own (a failure shows the
/// lines that differ); the default output is the block output without its `[block]`
/// and statistics lines.
#[test]
fn recorded_program() {
    let run = |flags: &str| run(ours(), &recorded_args(flags), recorded_dir());
    let blocks = run("--block:show-blocks --stat");
    insta::assert_snapshot!("recorded_blocks", blocks);
    let plain: String = blocks
        .lines()
        .filter(|l| {
            !l.starts_with("[block ") && !l.starts_with("insn:") && !l.starts_with("blocks:")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(
        run("") == plain,
        "the default output is not the block output without [block] lines"
    );
    insta::assert_snapshot!(
        "recorded_insn_offset_time",
        run("--insn-decoder --offset --time --no-inst")
    );
    insta::assert_snapshot!(
        "recorded_end_on_call_jump",
        run("--no-inst --block:end-on-call --block:end-on-jump --block:show-blocks --stat")
    );
    let quiet: Vec<String> = RECORDED_FLAGS[4..]
        .iter()
        .map(|flags| format!("[{flags}] {}", run(flags).trim_end().replace('\n', " | ")))
        .collect();
    insta::assert_snapshot!("recorded_quiet", quiet.join("\n"));
}

/// Every run of this file, with libipt's ptxed in place of ours: the same output.
#[test]
#[ignore = "needs libipt's ptxed (PT_REFERENCE_PTXED=/path/to/ptxed)"]
fn same_output_as_libipt_ptxed() {
    let reference = pt_testkit::env_path("PT_REFERENCE_PTXED", "libipt's ptxed, built with XED");
    // Ours with libipt's error handling (its own is the default).
    let libipt = |flags: &str| format!("{flags} --libipt-resync");
    for (name, trace, flags) in cases() {
        let files = Files::new(name, &trace);
        assert_eq!(
            files.run(ours(), &libipt(flags)),
            files.run(&reference, &flags.replace("--libipt-resync", "")),
            "{name}: differs from {} with {flags}",
            reference.display()
        );
    }
    for flags in RECORDED_FLAGS {
        let args = recorded_args(flags);
        assert_eq!(
            run(ours(), &recorded_args(&libipt(flags)), recorded_dir()),
            run(&reference, &args, recorded_dir()),
            "recorded program: differs from {} with {flags}",
            reference.display()
        );
    }
}
