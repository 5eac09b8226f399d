//! ptdump with libipt's perf_event side-band (`--pevent:*`, `--sb:*`): side-band files
//! written here with pt-perf-data's encoder (every record kind libipt prints, with
//! every sample field), printed between the packets where the trace's time passes
//! theirs. Snapshots; the ignored test `same_output_as_libipt_ptdump` runs libipt's
//! ptdump (`PT_REFERENCE_PTDUMP`, with `PT_REFERENCE_LIBS` as its `LD_LIBRARY_PATH`)
//! on the same files and compares byte for byte: that is how the snapshots were
//! checked.

use pt_encoder::Packet;
use pt_perf_data::records::misc;
use pt_perf_data::*;
use pt_testkit::trace::encode as bytes;
use std::path::{Path, PathBuf};

mod common;

const ALL: u64 = SampleType::TID
    | SampleType::TIME
    | SampleType::ID
    | SampleType::STREAM_ID
    | SampleType::CPU
    | SampleType::IDENTIFIER;

fn sid(time: u64, n: u64) -> SampleId {
    SampleId {
        pid: Some(1),
        tid: Some(2),
        time: Some(time),
        id: Some(n),
        stream_id: Some(n + 1),
        cpu: Some(3),
        identifier: Some(n + 2),
    }
}

/// Every record kind libipt prints, at perf times 0 to 9.
fn records<'a>() -> Vec<Record<'a>> {
    vec![
        Record::Comm(Comm {
            misc: misc::COMM_EXEC,
            pid: 1,
            tid: 2,
            comm: "prog".into(),
            sample_id: sid(0, 10),
        }),
        Record::Mmap(Mmap {
            misc: misc::USER,
            pid: 1,
            tid: 2,
            start: 0x40_0000,
            len: 0x2000,
            pgoff: 0x1000,
            filename: "/usr/bin/prog".into(),
            sample_id: sid(0, 10),
        }),
        Record::Mmap2(Mmap2 {
            misc: misc::USER,
            pid: 1,
            tid: 2,
            start: 0x7f00_0000_0000,
            len: 0x1_0000,
            pgoff: 0,
            file: Mmap2File::Inode {
                maj: 8,
                min: 1,
                ino: 0x1234,
                ino_generation: 7,
            },
            prot: 5,
            flags: 2,
            filename: "/lib/libc.so.6".into(),
            sample_id: sid(1, 10),
        }),
        Record::ItraceStart(ItraceStart {
            misc: 0,
            pid: 1,
            tid: 2,
            sample_id: sid(2, 10),
        }),
        Record::Fork(Task {
            misc: 0,
            pid: 4,
            ppid: 1,
            tid: 4,
            ptid: 2,
            time: 3,
            sample_id: sid(3, 10),
        }),
        Record::Aux(Aux {
            misc: 0,
            aux_offset: 0x1000,
            aux_size: 0x800,
            flags: AuxFlags(AuxFlags::TRUNCATED),
            sample_id: sid(4, 10),
        }),
        Record::Switch(Switch {
            misc: misc::SWITCH_OUT,
            sample_id: sid(5, 10),
        }),
        Record::SwitchCpuWide(SwitchCpuWide {
            misc: 0,
            next_prev_pid: 4,
            next_prev_tid: 4,
            sample_id: sid(5, 10),
        }),
        Record::Lost(Lost {
            misc: 0,
            id: 10,
            lost: 3,
            sample_id: sid(6, 10),
        }),
        Record::LostSamples(LostSamples {
            misc: 0,
            lost: 9,
            sample_id: sid(7, 10),
        }),
        Record::Throttle(Throttle {
            misc: 0,
            time: 8,
            id: 10,
            stream_id: 11,
            sample_id: sid(8, 10),
        }),
        Record::Exit(Task {
            misc: 0,
            pid: 4,
            ppid: 1,
            tid: 4,
            ptid: 2,
            time: 9,
            sample_id: sid(9, 10),
        }),
    ]
}

fn sideband(sample_type: u64) -> Vec<u8> {
    let mut records = records();
    if sample_type & SampleType::IDENTIFIER == 0 || sample_type & SampleType::ID == 0 {
        // Without both, there is one id.
        for r in &mut records {
            if let Some(s) = common::sample_id_mut(r) {
                s.identifier = None;
            }
        }
    }
    common::encode(&records, sample_type)
}

/// A trace whose time runs from 2 to 7 (TSC 2, then MTCs of 2 ticks).
fn trace() -> Vec<u8> {
    bytes(&[
        Packet::Psb,
        Packet::Tsc { tsc: 2 },
        Packet::Psbend,
        Packet::Pad,
        Packet::Tsc { tsc: 5 },
        Packet::Pad,
        Packet::Tsc { tsc: 7 },
    ])
}

/// The test's files: `trace.pt`, `all.sb` (every sample field), `tid_time.sb`, and
/// `cut.sb` (all.sb with its last record cut short and a record of size 4).
fn files() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(write_files).clone()
}

fn write_files() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ptdump_pevent");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("trace.pt"), trace()).unwrap();
    let all = sideband(ALL);
    std::fs::write(dir.join("all.sb"), &all).unwrap();
    let tid_time = sideband(SampleType::TID | SampleType::TIME);
    std::fs::write(dir.join("tid_time.sb"), &tid_time).unwrap();
    let mut cut = tid_time[..tid_time.len() / 2].to_vec();
    cut.extend_from_slice(&[1, 0, 0, 0, 0, 0, 4, 0]);
    cut.extend_from_slice(&tid_time[..16]);
    std::fs::write(dir.join("cut.sb"), &cut).unwrap();
    dir
}

/// The runs of this file: flags (with file names relative to the test directory).
const CASES: &[(&str, &str)] = &[
    (
        "compact_offset_time",
        "--sb:compact --sb:offset --sb:time --pevent:sample-type 0x102c6 --pevent:primary all.sb",
    ),
    (
        "verbose_filename",
        "--sb:verbose --sb:filename --pevent:sample-type 0x102c6 --pevent:primary all.sb",
    ),
    (
        "two_files_time_conversion",
        "--sb --sb:time --pevent:sample-type 0x102c6 --pevent:primary all.sb \
         --pevent:sample-type 0x6 --pevent:time-mult 2 --pevent:time-shift 1 \
         --pevent:tsc-offset 1 --pevent:secondary tid_time.sb",
    ),
    (
        "range_and_errors",
        "--sb --sb:offset --sb:filename --pevent:sample-type 0x6 --pevent:primary tid_time.sb:0x40 \
         --pevent:secondary cut.sb --pevent:time-mult 0 --pevent:secondary tid_time.sb",
    ),
    (
        "not_printed",
        "--pevent:sample-type 0x6 --pevent:primary tid_time.sb",
    ),
];

fn run(exe: &Path, dir: &Path, flags: &str, libs: bool) -> String {
    common::run(exe, dir, flags, &["trace.pt"], libs)
}

fn ours(flags: &str) -> String {
    run(
        Path::new(env!("CARGO_BIN_EXE_ptdump")),
        &files(),
        flags,
        false,
    )
}

#[test]
fn compact_offset_time() {
    insta::assert_snapshot!(ours(CASES[0].1));
}

#[test]
fn verbose_filename() {
    insta::assert_snapshot!(ours(CASES[1].1));
}

#[test]
fn two_files_time_conversion() {
    insta::assert_snapshot!(ours(CASES[2].1));
}

#[test]
fn range_and_errors() {
    insta::assert_snapshot!(ours(CASES[3].1));
}

#[test]
fn not_printed() {
    insta::assert_snapshot!(ours(CASES[4].1));
}

#[test]
fn missing_file_is_one_line() {
    let out = ours("--sb --pevent:primary nothing.sb");
    assert!(
        out.contains("ptdump: error loading nothing.sb: failed to open nothing.sb")
            && out.lines().count() == 1,
        "{out}"
    );
}

/// Every case with libipt's ptdump in place of ours: the same output.
#[test]
#[ignore = "needs libipt's ptdump (PT_REFERENCE_PTDUMP=/path/to/ptdump)"]
fn same_output_as_libipt_ptdump() {
    let reference = pt_testkit::env_path("PT_REFERENCE_PTDUMP", "libipt's ptdump with pevent");
    let dir = files();
    for (name, flags) in CASES {
        assert_eq!(
            ours(flags),
            run(&reference, &dir, flags, true),
            "{name}: ptdump {flags}"
        );
    }
}
