//! `ptxed --perf` and `ptdump --perf` on a small perf.data built here: two threads
//! of one process (per-thread AUX areas), code from a file under a sysroot and an
//! anonymous mapping, a gap between two AUXTRACE pieces, and a full AUX buffer.
//! The output is snapshot-tested; bad files give one line with the offset.

use pt_encoder::packet::IpPacketKind::{TipPgd, TipPge};
use pt_encoder::Packet;
use pt_perf_data::*;
use pt_testkit::trace::{encode, ip, mode64, tnt};
use std::path::{Path, PathBuf};
use std::process::Command;

const PMU: u32 = 8;
const PT_ID: u64 = 11;
const TRACK_ID: u64 = 12;
const PID: u32 = 100;

/// `L: add rax, 1; jnz L; jmp 0x2000` at 0x1000.
const CODE: &[u8] = &[
    0x48, 0x83, 0xc0, 0x01, // 1000: add rax, 1
    0x75, 0xfa, // 1004: jnz 1000
    0xe9, 0xf5, 0x0f, 0x00, 0x00, // 1006: jmp 2000
];

fn psb(tsc: u64) -> Vec<Packet> {
    vec![Packet::Psb, Packet::Tsc { tsc }, mode64(), Packet::Psbend]
}

/// Thread 100: around the loop twice, out of it, then on into the anonymous code,
/// where tracing stops.
fn trace_main() -> Vec<u8> {
    let mut p = psb(1000);
    p.push(ip(TipPge, 0x1000));
    p.push(tnt(&[true, true, false]));
    p.push(ip(TipPgd, 0x2010));
    encode(&p)
}

/// Thread 101, first piece: once round the loop, then tracing stops at 0x1000.
fn trace_second_a() -> Vec<u8> {
    let mut p = psb(2000);
    p.extend([ip(TipPge, 0x1000), tnt(&[true]), ip(TipPgd, 0x1000)]);
    encode(&p)
}

/// Its second piece, after a gap.
fn trace_second_b() -> Vec<u8> {
    let mut p = psb(3000);
    p.extend([ip(TipPge, 0x1000), tnt(&[false]), ip(TipPgd, 0x1006)]);
    encode(&p)
}

fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("perf_cli")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("root")).unwrap();
    d
}

/// Writes the recording; the code goes to `<dir>/root/code.bin` (named `/code.bin`).
fn write(dir: &Path) -> PathBuf {
    std::fs::write(dir.join("root/code.bin"), CODE).unwrap();
    let config = intel_pt::config::PT | intel_pt::config::BRANCH | intel_pt::config::TSC;
    let mut info = IntelPtInfo::new(PMU);
    info.cap_user_time_zero = 1;
    info.time_mult = 1;
    let trace_event = EventDesc {
        attr: intel_pt_attr(PMU, config, true, false),
        ids: vec![PT_ID],
        name: Some("intel_pt//u".into()),
    };
    let mut setup = RecordingSetup::new(trace_event, info);
    setup.tracking = Some(EventDesc {
        attr: tracking_attr(true, false, false, true),
        ids: vec![TRACK_ID],
        name: Some("dummy:u".into()),
    });
    let path = dir.join("perf.data");
    let mut w = RecordingWriter::create(&path, setup).unwrap();
    w.set_feature(Feature::PmuMappings(vec![(PMU, "intel_pt".into())]));
    w.set_feature(Feature::CpuId("GenuineIntel,6,94,3".into()));
    let sid = |tid: u32, id: u64, time: u64| SampleId {
        pid: Some(PID),
        tid: Some(tid),
        id: Some(id),
        time: Some(time),
        ..Default::default()
    };
    let mmap = |start: u64, len: u64, name: &'static str, time: u64| {
        Record::Mmap2(Mmap2 {
            misc: misc::USER,
            pid: PID,
            tid: PID,
            start,
            len,
            pgoff: 0,
            file: Mmap2File::default(),
            prot: 5,
            flags: 2,
            filename: name.into(),
            sample_id: sid(PID, TRACK_ID, time),
        })
    };
    let task = |tid: u32, time: u64| Task {
        misc: 0,
        pid: PID,
        ppid: PID,
        tid,
        ptid: PID,
        time,
        sample_id: sid(tid, TRACK_ID, time),
    };
    let records = [
        Record::Comm(Comm {
            misc: misc::COMM_EXEC,
            pid: PID,
            tid: PID,
            comm: "looper".into(),
            sample_id: sid(PID, TRACK_ID, 900),
        }),
        mmap(0x1000, 0x1000, "/code.bin", 900),
        mmap(0x2000, 0x1000, "//anon", 900),
        Record::ItraceStart(ItraceStart {
            misc: 0,
            pid: PID,
            tid: PID,
            sample_id: sid(PID, PT_ID, 950),
        }),
        Record::Fork(task(PID + 1, 1500)),
        Record::Aux(Aux {
            misc: 0,
            aux_offset: 0,
            aux_size: 0x40,
            flags: AuxFlags(AuxFlags::TRUNCATED),
            sample_id: sid(PID + 1, PT_ID, 2500),
        }),
        Record::Exit(task(PID + 1, 3500)),
        Record::Exit(task(PID, 4000)),
    ];
    for r in &records {
        w.write(r).unwrap();
    }
    // The data goes separately (write_auxtrace pads it).
    let aux = |idx: u32, tid: u32, offset: u64| Auxtrace {
        offset,
        reference: 4000,
        idx,
        tid,
        cpu: u32::MAX,
        data: &[],
    };
    let (a, b, c) = (trace_main(), trace_second_a(), trace_second_b());
    for (rec, data) in [
        (aux(0, PID, 0), &a),
        (aux(1, PID + 1, 0), &b),
        (aux(1, PID + 1, 0x100), &c),
    ] {
        w.write_auxtrace(&rec, &[data]).unwrap();
    }
    w.finish_round().unwrap();
    w.finish().unwrap();
    path
}

fn run(exe: &str, dir: &Path, args: &[&str]) -> (String, String, i32) {
    let out = Command::new(exe)
        .args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .output()
        .unwrap();
    // The tools name themselves by argv[0], as libipt's do: the snapshots hold
    // the file name, not this checkout's path.
    let name = Path::new(exe).file_name().unwrap().to_str().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).replace(exe, name),
        out.status.code().unwrap_or(-1),
    )
}

const PTXED: &str = env!("CARGO_BIN_EXE_ptxed");
const PTDUMP: &str = env!("CARGO_BIN_EXE_ptdump");

#[test]
fn ptxed_perf() {
    let dir = scratch("ptxed");
    write(&dir);
    let (out, err, code) = run(
        PTXED,
        &dir,
        &["--perf", "perf.data", "--perf:sysroot", "root"],
    );
    assert_eq!(code, 0, "{err}");
    insta::assert_snapshot!("ptxed_perf", format!("{out}\n--- stderr\n{err}"));
    let (out, err, code) = run(
        PTXED,
        &dir,
        &[
            "--perf",
            "perf.data",
            "--perf:sysroot",
            "root",
            "--perf:tid",
            "101",
            "--offset",
        ],
    );
    assert_eq!(code, 0, "{err}");
    insta::assert_snapshot!(
        "ptxed_perf_tid_offsets",
        format!("{out}\n--- stderr\n{err}")
    );
    let (out, err, code) = run(
        PTXED,
        &dir,
        &[
            "--perf",
            "perf.data",
            "--perf:sysroot",
            "root",
            "--quiet",
            "--stat",
        ],
    );
    assert_eq!(code, 0, "{err}");
    insta::assert_snapshot!("ptxed_perf_quiet_stat", format!("{out}\n--- stderr\n{err}"));
    // Without the sysroot the code file is missing: named, nothing decoded from it.
    let (out, _, code) = run(PTXED, &dir, &["--perf", "perf.data", "--perf:tid", "100"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("[no code at 0x1000 in pid 100: /code.bin mapped at 0x1000-0x2000 (pgoff 0x0): file not found (tried /code.bin)]"),
        "{out}"
    );
}

#[test]
fn ptdump_perf() {
    let dir = scratch("ptdump");
    write(&dir);
    let (out, err, code) = run(PTDUMP, &dir, &["--perf", "perf.data"]);
    assert_eq!(code, 0, "{err}");
    insta::assert_snapshot!("ptdump_perf", format!("{out}\n--- stderr\n{err}"));
    let (out, err, code) = run(
        PTDUMP,
        &dir,
        &["--perf", "perf.data", "--perf:tid", "100", "--no-offset"],
    );
    assert_eq!(code, 0, "{err}");
    insta::assert_snapshot!("ptdump_perf_tid", format!("{out}\n--- stderr\n{err}"));
}

#[test]
fn bad_files_give_one_line_with_the_offset() {
    let dir = scratch("bad");
    let path = write(&dir);
    let bytes = std::fs::read(&path).unwrap();
    // Not a perf.data.
    std::fs::write(dir.join("junk"), b"not a perf.data file at all").unwrap();
    for exe in [PTXED, PTDUMP] {
        let (out, err, code) = run(exe, &dir, &["--perf", "junk"]);
        assert_eq!(code, 1);
        assert!(out.is_empty());
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("junk: perf.data offset 0x0: bad magic"),
            "{err}"
        );
    }
    // No AUXTRACE_INFO: not an Intel PT recording.
    let perf = PerfFile::parse(&bytes).unwrap();
    let (info_at, _) = perf
        .records()
        .map(Result::unwrap)
        .find(|(_, r)| matches!(r, Record::AuxtraceInfo(_)))
        .unwrap();
    let mut no_info = bytes.clone();
    // Turn it into a record type perf ignores (keeping its size).
    no_info[info_at as usize..info_at as usize + 4].copy_from_slice(&200u32.to_le_bytes());
    std::fs::write(dir.join("noinfo"), &no_info).unwrap();
    let (_, err, code) = run(PTXED, &dir, &["--perf", "noinfo"]);
    assert_eq!(code, 1);
    assert_eq!(
        err.trim(),
        format!("ptxed: noinfo: no intel_pt AUXTRACE_INFO record: not an Intel PT recording.")
    );
    // An AUXTRACE whose size points past the end: a warning with its offset, the rest
    // decoded.
    let (at, _) = perf.auxtrace_records().last().unwrap();
    let mut past = bytes.clone();
    past[at as usize + 8..at as usize + 16].copy_from_slice(&0x10_0000u64.to_le_bytes());
    std::fs::write(dir.join("past"), &past).unwrap();
    let (out, err, code) = run(PTXED, &dir, &["--perf", "past", "--perf:sysroot", "root"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!(
            "file offset {at:#x}: AUXTRACE claims 0x100000 bytes of data but the file ends after"
        )),
        "{err}"
    );
    assert!(out.contains("add rax, 0x1"), "{out}");
    // An AUXTRACE of queue 1 that names another thread: a warning, decoded with its queue.
    let mut mixed = bytes.clone();
    mixed[at as usize + 36..at as usize + 40].copy_from_slice(&(PID + 7).to_le_bytes());
    std::fs::write(dir.join("mixed"), &mixed).unwrap();
    let (_, err, code) = run(
        PTXED,
        &dir,
        &["--perf", "mixed", "--perf:sysroot", "root", "-q"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&format!("file offset {at:#x}: AUXTRACE of queue 1 names cpu -1 tid 107, the queue's is cpu -1 tid 101")), "{err}");
    // A truncated file anywhere: never a panic, at most one line per problem.
    for cut in (0..bytes.len()).step_by(7) {
        std::fs::write(dir.join("cut"), &bytes[..cut]).unwrap();
        for exe in [PTXED, PTDUMP] {
            let (_, err, code) = run(exe, &dir, &["--perf", "cut", "-q"]);
            assert!(
                code == 0 || code == 1,
                "{exe} on {cut} bytes: {code}\n{err}"
            );
            assert!(!err.contains("panicked"), "{exe} on {cut} bytes: {err}");
        }
    }
}
