//! ptxed with libipt's perf_event side-band (`--pevent:*`, `--sb:*`): three processes
//! map different code at the same address, so the listing is right only when the
//! side-band switches the image where libipt does (ITRACE_START at once; cpu-wide
//! and plain SWITCH, FORK + COMM.EXEC at the next event in or near the kernel; MMAP
//! and MMAP2 into the process's image, the vdso by the process's ABI, files under
//! `--pevent:sysroot`); a secondary file adds a mapping and its own records; and the
//! records libipt warns about (LOST, truncated AUX, anonymous, deleted, special and
//! missing files). Snapshots; the ignored test `same_output_as_libipt_ptxed` runs
//! libipt's ptxed (`PT_REFERENCE_PTXED`, with `PT_REFERENCE_LIBS` as its
//! `LD_LIBRARY_PATH`) on the same files and compares byte for byte: that is how the
//! snapshots were checked.

use pt_encoder::{ExecMode, IpCompression, ModeExec, Packet};
use pt_perf_data::records::misc;
use pt_perf_data::*;
use pt_testkit::trace::encode as bytes;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

/// Where `kernel.elf` loads.
const KERNEL: u64 = 0xffff_ffff_8100_0000;

/// An x86-64 ELF executable with one PT_LOAD of 16 nops at [`KERNEL`].
fn kernel_elf() -> Vec<u8> {
    let mut e = b"\x7fELF\x02\x01\x01".to_vec();
    e.resize(16, 0);
    e.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    e.extend_from_slice(&62u16.to_le_bytes()); // EM_X86_64
    e.extend_from_slice(&1u32.to_le_bytes());
    e.extend_from_slice(&KERNEL.to_le_bytes()); // entry
    e.extend_from_slice(&64u64.to_le_bytes()); // phoff
    e.extend_from_slice(&0u64.to_le_bytes()); // shoff
    e.extend_from_slice(&0u32.to_le_bytes());
    for v in [64u16, 56, 1, 64, 0, 0] {
        e.extend_from_slice(&v.to_le_bytes());
    }
    e.extend_from_slice(&1u32.to_le_bytes()); // PT_LOAD
    e.extend_from_slice(&5u32.to_le_bytes()); // R+X
    for v in [120u64, KERNEL, KERNEL, 16, 16, 1] {
        e.extend_from_slice(&v.to_le_bytes());
    }
    e.extend_from_slice(&[0x90; 16]);
    e
}

const TID_TIME: u64 = SampleType::TID | SampleType::TIME;

fn sid(pid: u32, time: u64) -> SampleId {
    SampleId {
        pid: Some(pid),
        tid: Some(pid),
        time: Some(time),
        cpu: Some(0),
        ..Default::default()
    }
}

fn mmap<'a>(
    cpumode: u16,
    pid: u32,
    start: u64,
    len: u64,
    pgoff: u64,
    file: &'a str,
    time: u64,
) -> Record<'a> {
    Record::Mmap(Mmap {
        misc: cpumode,
        pid,
        tid: pid,
        start,
        len,
        pgoff,
        filename: file.into(),
        sample_id: sid(pid, time),
    })
}

fn comm_exec(pid: u32, name: &str, time: u64) -> Record<'_> {
    Record::Comm(Comm {
        misc: misc::COMM_EXEC,
        pid,
        tid: pid,
        comm: name.into(),
        sample_id: sid(pid, time),
    })
}

/// The primary side-band (perf times = TSC: time-mult 1, shift 0).
fn primary<'a>() -> Vec<Record<'a>> {
    vec![
        comm_exec(1, "a", 0),
        mmap(misc::USER, 1, 0x1000, 0x10, 0, "/a.bin", 0),
        Record::Mmap2(Mmap2 {
            misc: misc::USER,
            pid: 2,
            tid: 2,
            start: 0x1000,
            len: 0x10,
            pgoff: 0,
            file: Mmap2File::Inode {
                maj: 8,
                min: 1,
                ino: 2,
                ino_generation: 0,
            },
            prot: 5,
            flags: 2,
            filename: "/b.bin".into(),
            sample_id: sid(2, 0),
        }),
        // Ignored: the kernel comes from kcore in libipt.
        mmap(misc::KERNEL, 1, 0x1000, 0x10, 0, "/b.bin", 0),
        mmap(misc::USER, 1, 0x7000, 0x1000, 0, "//anon", 0),
        mmap(misc::USER, 1, 0x8000, 0x1000, 0, "/gone (deleted)", 0),
        mmap(misc::USER, 1, 0x9000, 0x1000, 0, "[heap]", 0),
        mmap(misc::USER, 1, 0xa000, 0x1000, 0, "/missing.bin", 0),
        // No ABI known for pid 2: no vdso.
        mmap(misc::USER, 2, 0x5000, 0x10, 0, "[vdso]", 0),
        Record::ItraceStart(ItraceStart {
            misc: 0,
            pid: 1,
            tid: 1,
            sample_id: sid(1, 1),
        }),
        // Out of pid 1 into pid 2.
        Record::SwitchCpuWide(SwitchCpuWide {
            misc: misc::SWITCH_OUT,
            next_prev_pid: 2,
            next_prev_tid: 2,
            sample_id: sid(1, 3),
        }),
        // pid 2 forks pid 3, which execs c.elf (64-bit: the x64 vdso).
        Record::Fork(Task {
            misc: 0,
            pid: 3,
            ppid: 2,
            tid: 3,
            ptid: 2,
            time: 5,
            sample_id: sid(2, 5),
        }),
        comm_exec(3, "c", 5),
        mmap(misc::USER, 3, 0x1000, 0x10, 0x40, "/c.elf", 5),
        mmap(misc::USER, 3, 0x5000, 0x10, 0, "[vdso]", 5),
        Record::Lost(Lost {
            misc: 0,
            id: 1,
            lost: 3,
            sample_id: sid(3, 7),
        }),
        Record::Aux(Aux {
            misc: 0,
            aux_offset: 0x1000,
            aux_size: 0x800,
            flags: AuxFlags(AuxFlags::TRUNCATED),
            sample_id: sid(3, 7),
        }),
        // Back to pid 1 (a switch-out is ignored; the switch-in counts).
        Record::Switch(Switch {
            misc: misc::SWITCH_OUT,
            sample_id: sid(3, 9),
        }),
        Record::Switch(Switch {
            misc: 0,
            sample_id: sid(1, 9),
        }),
    ]
}

/// The secondary side-band: pid 1 maps more code; its trace-start, switch and
/// truncated AUX are not for this trace.
fn secondary<'a>() -> Vec<Record<'a>> {
    vec![
        mmap(misc::USER, 1, 0x2000, 0x10, 0, "/b.bin", 2),
        Record::ItraceStart(ItraceStart {
            misc: 0,
            pid: 2,
            tid: 2,
            sample_id: sid(2, 4),
        }),
        Record::Switch(Switch {
            misc: 0,
            sample_id: sid(2, 9),
        }),
        Record::Aux(Aux {
            misc: 0,
            aux_offset: 0,
            aux_size: 0x10,
            flags: AuxFlags(AuxFlags::TRUNCATED),
            sample_id: sid(2, 9),
        }),
    ]
}

/// The primary records with an identifier: 1 (sample_type TID|TIME|IDENTIFIER) and 7
/// (with CPU too) in turn, for `--pevent:sample-config 7:0x10086`.
fn mixed() -> Vec<u8> {
    let mut out = Vec::new();
    for (n, mut r) in primary().into_iter().enumerate() {
        let (id, st) = if n % 2 == 0 {
            (1, TID_TIME | SampleType::IDENTIFIER)
        } else {
            (7, TID_TIME | SampleType::CPU | SampleType::IDENTIFIER)
        };
        if let Some(s) = common::sample_id_mut(&mut r) {
            s.identifier = Some(id);
        }
        out.extend(common::encode(&[r], st));
    }
    out
}

/// Enabled at `ip` at time `tsc`, one instruction, disabled.
fn run_at(tsc: u64, ip: u64, next: u64) -> Vec<Packet> {
    vec![
        Packet::Tsc { tsc },
        Packet::tip_pge(IpCompression::Sext48, ip),
        Packet::fup(IpCompression::Sext48, next),
        Packet::tip_pgd(IpCompression::Suppressed, 0),
    ]
}

fn trace() -> Vec<u8> {
    let mut p = vec![
        Packet::Psb,
        Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)),
        Packet::Tsc { tsc: 1 },
        Packet::fup(IpCompression::Sext48, 0x1000),
        Packet::Psbend,
        Packet::fup(IpCompression::Sext48, 0x1002),
        Packet::tip_pgd(IpCompression::Suppressed, 0),
    ];
    // pid 2 (b.bin: 3-byte instructions), then the secondary's mapping in pid 1's
    // image is not pid 2's: 0x2000 is not mapped there.
    p.extend(run_at(4, 0x1000, 0x1003));
    // pid 3: c.elf jumps into the vdso.
    p.extend(run_at(6, 0x1000, 0x5001));
    p.extend(run_at(8, 0x5000, 0x5001));
    // pid 1 again, with b.bin at 0x2000 from the secondary file.
    p.extend(run_at(10, 0x2000, 0x2003));
    p.extend(run_at(11, 0x1000, 0x1001));
    // The kernel (from `--pevent:kcore`, in every process's image).
    p.extend(run_at(12, KERNEL, KERNEL + 2));
    bytes(&p)
}

/// The test's files: `trace.pt`, `primary.sb`, `secondary.sb` and the code:
/// `kernel.elf`, `root/a.bin` (one-byte nops), `root/b.bin` (three-byte moves), `root/c.elf` (an
/// x86-64 ELF header, then a jump to the vdso at 0x5000), `vdso64.bin` (nops).
fn files() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(write_files).clone()
}

fn write_files() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ptxed_pevent");
    std::fs::create_dir_all(dir.join("root")).unwrap();
    std::fs::write(dir.join("trace.pt"), trace()).unwrap();
    std::fs::write(dir.join("primary.sb"), common::encode(&primary(), TID_TIME)).unwrap();
    std::fs::write(dir.join("mixed.sb"), mixed()).unwrap();
    let st = TID_TIME | SampleType::CPU;
    std::fs::write(dir.join("secondary.sb"), common::encode(&secondary(), st)).unwrap();
    std::fs::write(dir.join("root/a.bin"), [0x90u8; 16]).unwrap();
    let b: Vec<u8> = [0x48u8, 0x89, 0xc0]
        .repeat(5)
        .into_iter()
        .chain([0x90])
        .collect();
    std::fs::write(dir.join("root/b.bin"), b).unwrap();
    let mut c = vec![0u8; 0x40];
    c[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
    c[16] = 2;
    c[18] = 62;
    // jmp 0x5000 from 0x1000.
    c.extend_from_slice(&[0xe9, 0xfb, 0x3f, 0, 0]);
    c.extend_from_slice(&[0x90; 11]);
    std::fs::write(dir.join("root/c.elf"), c).unwrap();
    std::fs::write(dir.join("vdso64.bin"), [0x90u8; 16]).unwrap();
    std::fs::write(dir.join("kernel.elf"), kernel_elf()).unwrap();
    dir
}

const SB: &str = "--pevent:sysroot root --pevent:vdso-x64 vdso64.bin \
    --pevent:sample-type 0x6 --pevent:primary primary.sb \
    --pevent:sample-type 0x86 --pevent:secondary secondary.sb";

/// The runs of this file: flags (with file names relative to the test directory).
fn cases() -> Vec<(&'static str, String)> {
    vec![
        (
            "compact_switch_warn",
            format!("--sb:switch --sb:warn --sb {SB}"),
        ),
        (
            "offset_filename_time",
            format!("--sb:offset --sb:filename --sb:time --sb:switch {SB}"),
        ),
        (
            "verbose_insn_decoder",
            format!("--insn-decoder --sb:verbose --sb:warn --event:time {SB}"),
        ),
        ("images_only", format!("--block:show-blocks {SB}")),
        (
            "kcore",
            format!("--sb:switch --pevent:kcore kernel.elf {SB}"),
        ),
        (
            "tsc_offset_kernel_start",
            format!(
                "--sb --sb:time --sb:switch --pevent:kernel-start 0x1800 \
                 --pevent:tsc-offset 2 {SB}"
            ),
        ),
        (
            "two_primaries",
            "--sb --sb:switch --sb:warn --pevent:sysroot root --pevent:vdso-x64 vdso64.bin \
             --pevent:sample-type 0x6 --pevent:primary primary.sb \
             --pevent:sample-type 0x86 --pevent:primary secondary.sb"
                .to_string(),
        ),
        (
            "sample_config",
            "--sb --sb:switch --pevent:sysroot root --pevent:vdso-x64 vdso64.bin \
             --pevent:sample-type 0x10006 --pevent:sample-config 7:0x10086 \
             --pevent:primary mixed.sb"
                .to_string(),
        ),
        (
            "sample_config_without_identifier",
            "--sb --pevent:sysroot root --pevent:sample-type 0x10006 \
             --pevent:sample-config 7:0x86 --pevent:primary mixed.sb"
                .to_string(),
        ),
        (
            "range",
            "--sb --sb:offset --sb:switch --pevent:sample-type 0x6 \
             --pevent:sysroot root --pevent:primary primary.sb:0x258-0x398"
                .to_string(),
        ),
        (
            "range_out_of_sync",
            "--sb --pevent:sample-type 0x6 --pevent:primary primary.sb:0x1a8".to_string(),
        ),
    ]
}

fn run(exe: &Path, dir: &Path, flags: &str, libs: bool) -> String {
    let inputs = ["--raw", "root/a.bin:0x1000", "--pt", "trace.pt"];
    common::run(exe, dir, flags, &inputs, libs)
}

/// Ours, with libipt's handling of decode errors (resync at the next PSB, quietly).
fn ours(flags: &str) -> String {
    let flags = format!("--libipt-resync {flags}");
    run(
        Path::new(env!("CARGO_BIN_EXE_ptxed")),
        &files(),
        &flags,
        false,
    )
}

fn case(name: &str) -> String {
    let (_, flags) = cases().into_iter().find(|(n, _)| *n == name).unwrap();
    ours(&flags)
}

#[test]
fn compact_switch_warn() {
    insta::assert_snapshot!(case("compact_switch_warn"));
}

#[test]
fn offset_filename_time() {
    insta::assert_snapshot!(case("offset_filename_time"));
}

#[test]
fn verbose_insn_decoder() {
    insta::assert_snapshot!(case("verbose_insn_decoder"));
}

#[test]
fn images_only() {
    insta::assert_snapshot!(case("images_only"));
}

#[test]
fn kcore() {
    insta::assert_snapshot!(case("kcore"));
}

#[test]
fn tsc_offset_kernel_start() {
    insta::assert_snapshot!(case("tsc_offset_kernel_start"));
}

#[test]
fn two_primaries() {
    insta::assert_snapshot!(case("two_primaries"));
}

#[test]
fn sample_config() {
    insta::assert_snapshot!(case("sample_config"));
}

#[test]
fn sample_config_without_identifier() {
    insta::assert_snapshot!(case("sample_config_without_identifier"));
}

#[test]
fn range() {
    insta::assert_snapshot!(case("range"));
}

#[test]
fn range_out_of_sync() {
    insta::assert_snapshot!(case("range_out_of_sync"));
}

#[test]
fn missing_file_is_one_line() {
    let out = ours("--sb --pevent:primary nothing.sb");
    assert!(
        out.contains("error loading nothing.sb") && out.lines().count() == 1,
        "{out}"
    );
}

/// Every case with libipt's ptxed in place of ours: the same output.
#[test]
#[ignore = "needs libipt's ptxed (PT_REFERENCE_PTXED)"]
fn same_output_as_libipt_ptxed() {
    let reference = pt_testkit::env_path("PT_REFERENCE_PTXED", "libipt's ptxed with pevent");
    let dir = files();
    for (name, flags) in cases() {
        assert_eq!(
            ours(&flags),
            run(&reference, &dir, &flags, true),
            "{name}: ptxed {flags}"
        );
    }
}

#[test]
fn not_with_perf_data() {
    let out = Command::new(env!("CARGO_BIN_EXE_ptxed"))
        .args(["--perf", "perf.data", "--pevent:primary", "primary.sb"])
        .current_dir(files())
        .output()
        .expect("run ptxed");
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.ends_with("ptxed: --pevent:* side-band files do not go with --perf.\n")
            && err.lines().count() == 1,
        "{err}"
    );
}
