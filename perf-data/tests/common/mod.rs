//! Shared by the perf cross-check tests: a tiny traced program, an intel_pt perf.data
//! of it written by our writer, and running perf.
#![allow(dead_code)]

use object::{Object, ObjectSegment, ObjectSymbol};
use pt_encoder::{Encoder, IpPacketKind, ModeExec, Packet, Tnt};
use pt_perf_data::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The traced function: ten instructions on its path (a taken `je`, a not-taken `jne`, a
/// direct `jmp`), two skipped `nop`s.
const PROGRAM: &str = r#"
__asm__(
    ".text\n"
    ".globl work\n"
    ".type work,@function\n"
    "work:\n"
    "  nop\n"
    "  mov $1, %eax\n"
    "  cmp $1, %eax\n"
    "  je 1f\n"
    "  nop\n"
    "1: add $2, %eax\n"
    "  cmp $3, %eax\n"
    "  jne 2f\n"
    "  nop\n"
    "2: jmp 3f\n"
    "  nop\n"
    "3: ret\n"
    ".size work, .-work\n");
int work(void);
int main(void) { return work() == 3 ? 0 : 1; }
"#;

/// A scratch directory under the target dir, fresh for `name`.
pub fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The compiled program and what the trace walks.
pub struct Traced {
    /// The executable.
    pub exe: PathBuf,
    /// Its executable segment: (vaddr, size, file offset).
    pub text: (u64, u64, u64),
    /// Address of `work`.
    pub work: u64,
    /// Address of `main` (for the return's target, a TIP.PGD).
    pub ret_to: u64,
    /// The addresses of the instructions the trace executes, in order.
    pub path: Vec<u64>,
}

/// Compiles the program (non-PIE, so that addresses are those of the file).
pub fn compile(dir: &Path) -> Traced {
    let src = dir.join("work.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let exe = pt_testkit::compile_c(&src, dir.join("work"), &["-O1", "-no-pie"], &[]);
    let data = std::fs::read(&exe).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let sym = |name: &str| {
        obj.symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap_or_else(|| panic!("no symbol {name}"))
            .address()
    };
    let work = sym("work");
    let main = sym("main");
    let seg = obj
        .segments()
        .find(|s| {
            let (a, n) = (s.address(), s.size());
            a <= work && work < a + n
        })
        .unwrap();
    let text = (seg.address(), seg.size(), seg.file_range().0);
    // Instruction sizes of the asm above: nop 1, mov 5, cmp $imm8 3, je rel8 2,
    // add $imm8 3, jne rel8 2, jmp rel8 2, ret 1.
    let mut path = Vec::new();
    let mut ip = work;
    for (size, skip_after) in [
        (1, 0), // nop
        (5, 0), // mov
        (3, 0), // cmp
        (2, 1), // je (taken over a nop)
        (3, 0), // add
        (3, 0), // cmp
        (2, 0), // jne (not taken)
        (1, 0), // nop
        (2, 1), // jmp (over a nop)
        (1, 0), // ret
    ] {
        path.push(ip);
        ip += size + skip_after;
    }
    Traced {
        exe,
        text,
        work,
        ret_to: main,
        path,
    }
}

/// A PT trace of one call of `work`: PSB+, TIP.PGE at work, TNT(taken, not taken), and
/// the return as TIP.PGD.
pub fn pt_trace(t: &Traced) -> Vec<u8> {
    pt_trace_at(t, None)
}

/// The trace, with a TSC packet in its PSB+ when `tsc` is given.
pub fn pt_trace_at(t: &Traced, tsc: Option<u64>) -> Vec<u8> {
    let mut buf = [0u8; 256];
    let mut e = Encoder::new(&mut buf);
    e.next(&Packet::Psb).unwrap();
    if let Some(tsc) = tsc {
        e.next(&Packet::Tsc { tsc }).unwrap();
    }
    let mode = ModeExec {
        csl: true,
        csd: false,
        iflag: false,
    };
    e.next(&Packet::ModeExec(mode)).unwrap();
    e.next(&Packet::Psbend).unwrap();
    e.ip_packet(IpPacketKind::TipPge, t.work).unwrap();
    let tnt = Tnt::from_results([true, false]).unwrap();
    e.next(&Packet::Tnt8(tnt)).unwrap();
    e.ip_packet(IpPacketKind::TipPgd, t.ret_to).unwrap();
    e.written().to_vec()
}

/// The intel_pt PMU type our files use (any number; perf checks only that the attr and
/// AUXTRACE_INFO agree).
pub const PT_PMU: u32 = 11;
/// Ids of the two events.
pub const PT_ID: u64 = 101;
/// The tracking (side-band) event's id.
pub const TRACK_ID: u64 = 102;
pub const PID: u32 = 4242;

/// Writes an intel_pt recording of one run of `work` (per-thread, no timestamps) with
/// our writer. Returns the records written, in order, for comparisons.
pub fn write_intel_pt(path: &Path, t: &Traced, trace: &[u8]) {
    write_intel_pt_timed(path, t, trace, None)
}

/// As [`write_intel_pt`]; with `times` = (comm, mmap2, itrace_start, exit) perf times,
/// the recording has `tsc` and perf time equals TSC (time_mult 1, shift 0, zero 0).
pub fn write_intel_pt_timed(path: &Path, t: &Traced, trace: &[u8], times: Option<[u64; 4]>) {
    write_intel_pt_mode(path, t, trace, times, None)
}

/// As [`write_intel_pt_timed`]; `per_cpu`: AUX area of that CPU (else per thread).
pub fn write_intel_pt_mode(
    path: &Path,
    t: &Traced,
    trace: &[u8],
    times: Option<[u64; 4]>,
    per_cpu: Option<u32>,
) {
    let tsc = times.is_some();
    let mut config = intel_pt::config::PT | intel_pt::config::BRANCH;
    if tsc {
        config |= intel_pt::config::TSC;
    }
    let pt = intel_pt_attr(PT_PMU, config, true, per_cpu.is_some());
    let track = tracking_attr(true, per_cpu.is_some(), false, tsc);
    let mut info = IntelPtInfo::new(PT_PMU);
    info.cap_user_time_zero = tsc as u64;
    info.time_mult = tsc as u64;
    info.per_cpu_mmaps = per_cpu.is_some() as u64;
    let trace_event = EventDesc {
        attr: pt,
        ids: vec![PT_ID],
        name: Some("intel_pt//u".into()),
    };
    let mut setup = RecordingSetup::new(trace_event, info);
    setup.tracking = Some(EventDesc {
        attr: track,
        ids: vec![TRACK_ID],
        name: Some("dummy:u".into()),
    });
    setup.perf_version = "6.1.187".into();
    setup.cmdline = vec!["pt-perf-data-test".into()];
    let mut w = RecordingWriter::create(path, setup).unwrap();
    let at = |i: usize| times.map(|t| t[i]);
    let sid = |id, time: Option<u64>| SampleId {
        pid: Some(PID),
        tid: Some(PID),
        id: Some(id),
        time,
        cpu: per_cpu,
        ..Default::default()
    };
    let exe = t.exe.to_str().unwrap();
    let recs = [
        Record::Comm(Comm {
            misc: misc::COMM_EXEC,
            pid: PID,
            tid: PID,
            comm: "work".into(),
            sample_id: sid(TRACK_ID, at(0)),
        }),
        Record::Mmap2(Mmap2 {
            misc: misc::USER,
            pid: PID,
            tid: PID,
            start: t.text.0 & !0xfff,
            len: (t.text.1 + (t.text.0 & 0xfff) + 0xfff) & !0xfff,
            pgoff: t.text.2 & !0xfff,
            file: Mmap2File::Inode {
                maj: 0,
                min: 0,
                ino: 0,
                ino_generation: 0,
            },
            prot: 5,
            flags: 2,
            filename: exe.into(),
            sample_id: sid(TRACK_ID, at(1)),
        }),
        Record::ItraceStart(ItraceStart {
            misc: 0,
            pid: PID,
            tid: PID,
            sample_id: sid(PT_ID, at(2)),
        }),
        Record::Aux(Aux {
            misc: 0,
            aux_offset: 0,
            aux_size: trace.len() as u64,
            flags: AuxFlags(0),
            sample_id: sid(PT_ID, at(3)),
        }),
        Record::Exit(Task {
            misc: 0,
            pid: PID,
            ppid: PID,
            tid: PID,
            ptid: PID,
            time: at(3).unwrap_or(0),
            sample_id: sid(TRACK_ID, at(3)),
        }),
    ];
    for r in &recs {
        w.write(r).unwrap();
    }
    w.write(&Record::Auxtrace(Auxtrace {
        offset: 0,
        // perf record stores the TSC at the time it copied the data here; perf's decoder
        // takes the upper bytes of the trace's TSC packets from it, and with tsc on and a
        // reference of 0 it never gets a timestamp (and 6.1 crashes looking for one).
        reference: at(3).unwrap_or(0),
        idx: 0,
        tid: if per_cpu.is_some() { u32::MAX } else { PID },
        cpu: per_cpu.unwrap_or(u32::MAX),
        data: trace,
    }))
    .unwrap();
    w.finish_round().unwrap();
    w.finish().unwrap();
}

/// Runs perf with `args`; returns (stdout, stderr); panics when it fails.
pub fn perf(args: &[&str]) -> (String, String) {
    let perf = pt_testkit::tool("perf", "linux-perf");
    let out = Command::new(perf)
        .args(args)
        .env("PERF_PAGER", "cat")
        .env("HOME", std::env::temp_dir())
        .output()
        .unwrap();
    let so = String::from_utf8_lossy(&out.stdout).into_owned();
    let se = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "perf {args:?} failed: {}\n{se}\n{so}",
        out.status
    );
    (so, se)
}
