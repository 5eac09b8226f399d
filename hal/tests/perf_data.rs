//! The perf backend's perf.data, written from synthetic input (no machine of
//! ours has Intel PT): side-band records laid out as the kernel writes them
//! into the data ring (sample_id trailer TID, TIME, CPU) and AUX data read
//! from a per-thread or per-CPU area. Our reader reads them back with their
//! meaning (the AUX records' truncated and collision flags among it), and perf
//! itself decodes the trace to the instructions it encodes.

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::process::Command;

use pt_encoder::packet::IpPacketKind::{TipPgd, TipPge};
use pt_encoder::Packet;
use pt_hal::backend::TraceItem;
use pt_hal::perf::data::{AuxArea, PerfDataRecorder, SessionInfo};
use pt_hal::perf::ring::RawRecord;
use pt_perf_data::intel_pt::config as ptc;
use pt_perf_data::{misc, AuxFlags, MappedFile, PerfFile, Record};
use pt_testkit::trace::{encode, ip, mode64, tnt};

const PID: u32 = 4242;
const CPU: u32 = 3;
const PMU: u32 = 9;
const ID: u64 = 77;

/// `L: add rax, 1; jnz L; ret`, mapped at 0x1000.
const CODE: &[u8] = &[0x48, 0x83, 0xc0, 0x01, 0x75, 0xfa, 0xc3];

/// A record as the kernel writes it: header, body, sample_id (TID, TIME, CPU,
/// IDENTIFIER).
fn kernel_record(kind: u32, misc: u16, body: &[u8], time: u64) -> RawRecord {
    let mut b = Vec::new();
    b.extend_from_slice(&kind.to_le_bytes());
    b.extend_from_slice(&misc.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(body);
    for v in [PID, PID] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(&time.to_le_bytes());
    b.extend_from_slice(&CPU.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&ID.to_le_bytes());
    let size = b.len() as u16;
    b[6..8].copy_from_slice(&size.to_le_bytes());
    RawRecord {
        kind,
        misc,
        bytes: b,
    }
}

fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    while v.len() % 8 != 0 {
        v.push(0);
    }
    v
}

fn u32s(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn u64s(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The side-band of a program `prog` (its code in `code`) that ran once
/// through its loop; the AUX record says the area filled up (TRUNCATED) and
/// that another tracer collided (COLLISION).
fn side_band(code: &Path, trace_len: u64) -> Vec<RawRecord> {
    let mut comm = u32s(&[PID, PID]);
    comm.extend(cstr("prog"));
    let mut mmap2 = u32s(&[PID, PID]);
    mmap2.extend(u64s(&[0x1000, 0x1000, 0]));
    mmap2.extend(u32s(&[0, 0]));
    mmap2.extend(u64s(&[0, 0]));
    mmap2.extend(u32s(&[5, 2])); // prot r-x, MAP_PRIVATE
    mmap2.extend(cstr(&code.display().to_string()));
    let aux = u64s(&[0, trace_len, AuxFlags::TRUNCATED | AuxFlags::COLLISION]);
    vec![
        kernel_record(3, misc::COMM_EXEC, &comm, 10),
        kernel_record(10, 2, &mmap2, 20),
        kernel_record(12, 0, &u32s(&[PID, PID]), 30),
        kernel_record(11, 0, &aux, 40),
        kernel_record(
            4,
            0,
            &[u32s(&[PID, PID, PID, PID]), u64s(&[50])].concat(),
            50,
        ),
    ]
}

fn trace() -> Vec<u8> {
    encode(&[
        Packet::Psb,
        mode64(),
        Packet::Psbend,
        ip(TipPge, 0x1000),
        tnt(&[true, true, false]),
        ip(TipPgd, 0x3000),
    ])
}

fn session(per_cpu: bool) -> SessionInfo {
    SessionInfo {
        pmu_type: PMU,
        config: ptc::PT | ptc::BRANCH,
        exclude_kernel: true,
        exclude_user: false,
        id: ID,
        time: None,
        snapshot: false,
        per_cpu,
        filter: String::new(),
        tsc_ctc: Some((2, 200)),
        max_non_turbo_ratio: Some(24),
        name: "intel_pt//u".into(),
    }
}

fn area(per_cpu: bool) -> AuxArea {
    AuxArea {
        idx: 0,
        cpu: per_cpu.then_some(CPU),
        tid: (!per_cpu).then_some(PID),
    }
}

/// The file for `per_cpu` (the code written beside it under `dir`).
fn write(dir: &Path, per_cpu: bool) -> Vec<u8> {
    let code = dir.join("prog");
    std::fs::write(&code, CODE).unwrap();
    let t = trace();
    let mut w = PerfDataRecorder::new(
        Cursor::new(Vec::new()),
        "perf.data",
        &session(per_cpu),
        &["ptperf".into()],
    )
    .unwrap();
    for r in side_band(&code, t.len() as u64) {
        w.side_band(&r).unwrap();
    }
    let items = [TraceItem::Data {
        offset: 0,
        bytes: t,
    }];
    w.trace(&area(per_cpu), &items, 1000).unwrap();
    w.finish().unwrap().into_inner()
}

fn dir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn reads_back_with_the_kernels_meaning() {
    for per_cpu in [false, true] {
        let d = dir(&format!("hal-perf-data-read-{per_cpu}"));
        let bytes = write(&d, per_cpu);
        let perf = PerfFile::parse(&bytes).unwrap();
        let ev = &perf.events()[0];
        assert_eq!(
            (ev.attr.type_, ev.attr.config),
            (PMU, ptc::PT | ptc::BRANCH)
        );
        assert_eq!(ev.ids, vec![ID]);
        assert_eq!(ev.name.as_deref(), Some("intel_pt//u"));
        let info = perf.intel_pt_info().unwrap().unwrap();
        assert_eq!(info, session(per_cpu).intel_pt_info());
        assert_eq!(info.per_cpu_mmaps, u64::from(per_cpu));
        // Untimed: perf cannot use context switches (have_sched_switch 0).
        assert_eq!(info.have_sched_switch, 0);
        let mut kinds = Vec::new();
        for r in perf.records() {
            let (_, r) = r.unwrap();
            match r {
                Record::Comm(c) => {
                    assert_eq!(c.comm.to_str_lossy(), "prog");
                    assert!(c.misc & misc::COMM_EXEC != 0);
                    assert_eq!(
                        (c.sample_id.tid, c.sample_id.time, c.sample_id.cpu),
                        (Some(PID), Some(10), Some(CPU))
                    );
                    kinds.push("comm");
                }
                Record::Mmap2(m) => {
                    assert_eq!((m.start, m.len, m.prot), (0x1000, 0x1000, 5));
                    assert!(m.filename.to_str_lossy().ends_with("/prog"));
                    kinds.push("mmap2");
                }
                Record::ItraceStart(s) => {
                    assert_eq!((s.pid, s.tid), (PID, PID));
                    kinds.push("itrace_start");
                }
                Record::Aux(a) => {
                    assert!(a.flags.truncated() && a.flags.collision());
                    assert_eq!(a.aux_size, trace().len() as u64);
                    kinds.push("aux");
                }
                Record::Exit(e) => {
                    assert_eq!((e.pid, e.tid), (PID, PID));
                    kinds.push("exit");
                }
                Record::Auxtrace(a) => {
                    // perf pads AUXTRACE data to 8 bytes.
                    let t = trace();
                    assert_eq!(a.data.len(), t.len().next_multiple_of(8));
                    assert!(a.data.starts_with(&t));
                    assert_eq!((a.offset, a.reference, a.idx), (0, 1000, 0));
                    if per_cpu {
                        assert_eq!((a.cpu, a.tid), (CPU, u32::MAX));
                    } else {
                        assert_eq!((a.cpu, a.tid), (u32::MAX, PID));
                    }
                    kinds.push("auxtrace");
                }
                _ => {}
            }
        }
        assert_eq!(
            kinds,
            ["comm", "mmap2", "itrace_start", "aux", "exit", "auxtrace"]
        );
    }
}

/// perf decodes the per-thread file: the loop twice round, out, the RET.
#[test]
fn perf_decodes_the_trace() {
    let d = dir("hal-perf-data-perf");
    let file = d.join("perf.data");
    std::fs::write(&file, write(&d, false)).unwrap();
    assert!(MappedFile::open(&file).unwrap().parse().is_ok());
    let perf = pt_testkit::tool("perf", "linux-perf");
    let out = Command::new(perf)
        .args(["script", "--itrace=i1i", "-F", "tid,ip", "-i"])
        .arg(&file)
        .env("PERF_PAGER", "cat")
        .env("HOME", &d)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let want: Vec<String> = [0x1000, 0x1004, 0x1000, 0x1004, 0x1000, 0x1004, 0x1006]
        .iter()
        .map(|ip| format!("{PID} {ip:x}"))
        .collect();
    assert_eq!(lines, want, "{err}");
    // The kernel's AUX flags reach perf.
    assert!(err.contains("AUX data lost 1 times"), "{err}");
    assert!(err.contains("AUX data detected collision"), "{err}");
}
