//! Snapshot tests of ptxed's output for the flag sets that matter, on traces and code
//! built here. With `PTXED_REFERENCE=/path/to/libipt/ptxed` each run is also compared
//! with that tool's output (which is how the snapshots were checked).

use pt_encoder::encode_to_vec;
use pt_encoder::packet::{
    ExecMode, IpCompression, IpPacketKind, IpPayload, ModeExec, ModeTsx, Packet, PtwSize, Tnt,
};
use std::path::PathBuf;
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

fn bytes(packets: &[Packet]) -> Vec<u8> {
    let mut v = Vec::new();
    for p in packets {
        encode_to_vec(p, &mut v).expect("encode");
    }
    v
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

    fn run(&self, exe: &str, flags: &str) -> String {
        let mut args: Vec<String> = vec!["--raw".into(), format!("t.bin:{BASE:#x}")];
        args.extend(flags.split_whitespace().map(String::from));
        args.extend(["--pt".into(), "t.pt".into()]);
        let out = Command::new(exe)
            .args(&args)
            .current_dir(&self.dir)
            .env(
                "LD_LIBRARY_PATH",
                std::env::var("PTXED_REFERENCE_LIBS").unwrap_or_default(),
            )
            .output()
            .expect("run ptxed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ptxed(name: &str, trace: &[u8], flags: &str) -> String {
    let files = Files::new(name, trace);
    let ours = files.run(env!("CARGO_BIN_EXE_ptxed"), flags);
    if let Ok(reference) = std::env::var("PTXED_REFERENCE") {
        assert_eq!(
            ours,
            files.run(&reference, flags),
            "differs from {reference} with {flags}"
        );
    }
    ours
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
    insta::assert_snapshot!(ptxed("err", &bad_trace(), "--no-inst"));
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

/// FNV-1a, to pin down long outputs in a snapshot.
fn fnv(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    format!("{} lines, fnv1a {h:016x}", text.lines().count())
}

/// A program recorded with the simulator (see `ptxed_data/README.md`): the whole
/// output, with disassembly and block boundaries, was identical to libipt's ptxed.
#[test]
fn recorded_program() {
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ptxed_data");
    let run = |flags: &str| {
        let mut args: Vec<String> = flags.split_whitespace().map(String::from).collect();
        args.extend(["--raw".into(), "switch.bin:0x401000".into()]);
        args.extend(["--pt".into(), "switch.pt".into()]);
        let out = Command::new(env!("CARGO_BIN_EXE_ptxed"))
            .args(&args)
            .current_dir(data)
            .output()
            .expect("run ptxed");
        let ours = String::from_utf8_lossy(&out.stdout).into_owned();
        if let Ok(reference) = std::env::var("PTXED_REFERENCE") {
            let theirs = Command::new(&reference)
                .args(&args)
                .current_dir(data)
                .env(
                    "LD_LIBRARY_PATH",
                    std::env::var("PTXED_REFERENCE_LIBS").unwrap_or_default(),
                )
                .output()
                .expect("run reference");
            assert_eq!(ours, String::from_utf8_lossy(&theirs.stdout), "{flags}");
        }
        ours
    };
    let summary: Vec<String> = [
        "",
        "--block:show-blocks --stat",
        "--insn-decoder --offset --time",
        "--no-inst --block:end-on-call --block:end-on-jump --block:show-blocks --stat",
        "--quiet --stat",
        "--quiet --stat --insn-decoder",
    ]
    .iter()
    .map(|flags| {
        let out = run(flags);
        let tail: Vec<&str> = out.lines().rev().take(2).collect();
        format!("[{flags}] {} | {}", fnv(&out), tail.join(" | "))
    })
    .collect();
    insta::assert_snapshot!(summary.join("\n"));
}
