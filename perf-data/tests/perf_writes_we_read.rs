//! perf.data files that perf 6.1 itself writes (`perf record` in file and pipe mode,
//! system-wide with context switches, `perf inject`) read back through our reader with
//! every record's meaning intact: compared with perf's own dump (`perf script -D`, which
//! also shows perf's time-ordered delivery) and with linux-perf-data's reader.
mod common;
use common::*;
use pt_perf_data::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A workload that runs long enough (tens of ms) for task-clock samples.
const BUSY: [&str; 3] = [
    "sh",
    "-c",
    "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done",
];

/// `perf record` into `name` (`-o -` when `pipe`): returns the file.
fn record(dir: &Path, name: &str, pipe: bool, args: &[&str]) -> PathBuf {
    let perf = pt_testkit::tool("perf", "linux-perf");
    let out = dir.join(name);
    let mut cmd = Command::new(perf);
    cmd.arg("record").arg("-q");
    if pipe {
        cmd.args(["-o", "-"]);
    } else {
        cmd.arg("-o").arg(&out);
    }
    let r = cmd.args(args).output().unwrap();
    assert!(
        r.status.success(),
        "perf record {args:?}: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    if pipe {
        std::fs::write(&out, &r.stdout).unwrap();
    }
    out
}

/// One record line of `perf script -D`.
#[derive(Debug)]
struct Dumped {
    offset: u64,
    size: u64,
    time: Option<u64>,
    name: String,
    text: String,
}

fn dump(path: &Path) -> Vec<Dumped> {
    let (out, _) = perf(&["script", "-D", "-i", path.to_str().unwrap()]);
    out.lines()
        .filter_map(|l| {
            let (head, rest) = l.split_once("]: PERF_RECORD_")?;
            let (pre, size) = head.rsplit_once(" [0x")?;
            let mut toks: Vec<&str> = pre.split_whitespace().collect();
            let off = toks.pop()?;
            let offset = match off.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).ok()?,
                None => off.parse().ok()?,
            };
            let time = toks.last().and_then(|t| t.parse::<u64>().ok());
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            Some(Dumped {
                offset,
                size: u64::from_str_radix(size, 16).ok()?,
                time,
                name,
                text: rest.to_string(),
            })
        })
        .collect()
}

/// perf's dump names of our records where they differ from perf's type names.
fn dump_name(r: &Record<'_>) -> &'static str {
    match r {
        Record::HeaderAttr { .. } => "ATTR",
        Record::HeaderFeature { .. } => "FEATURE",
        r => r.name(),
    }
}

/// C's `%#x`: `0` for zero.
fn hex(v: u64) -> String {
    if v == 0 {
        "0".into()
    } else {
        format!("{v:#x}")
    }
}

/// What perf's dump line says about a record, in perf's words.
fn expected_text(r: &Record<'_>) -> Option<String> {
    Some(match r {
        Record::Comm(c) => format!(
            "COMM{}: {}:{}/{}",
            if c.is_exec() { " exec" } else { "" },
            c.comm,
            c.pid,
            c.tid
        ),
        Record::Mmap2(m) => format!(
            "MMAP2 {}/{}: [{}({}) @ {}",
            m.pid as i32,
            m.tid as i32,
            hex(m.start),
            hex(m.len),
            hex(m.pgoff)
        ),
        Record::Mmap(m) => format!(
            "MMAP {}/{}: [{}({}) @ {}]",
            m.pid as i32,
            m.tid as i32,
            hex(m.start),
            hex(m.len),
            hex(m.pgoff)
        ),
        Record::Fork(t) | Record::Exit(t) => {
            format!("{}({}:{}):({}:{})", r.name(), t.pid, t.tid, t.ppid, t.ptid)
        }
        Record::Sample(s) => format!(
            "{}/{}: {} period: {}",
            s.pid.unwrap() as i32,
            s.tid.unwrap() as i32,
            hex(s.ip.unwrap()),
            s.period.unwrap()
        ),
        Record::Switch(s) => format!("SWITCH {}", if s.is_out() { "OUT" } else { "IN" }),
        Record::SwitchCpuWide(s) => {
            format!("SWITCH_CPU_WIDE {}", if s.is_out() { "OUT" } else { "IN " })
        }
        Record::ThreadMap(v) => format!("THREAD_MAP nr: {}", v.len()),
        Record::IdIndex(v) => format!("ID_INDEX nr: {}", v.len()),
        _ => return None,
    })
}

/// Every record of `path`, in perf's delivery order, against perf's dump: offset, size,
/// type, time, and the fields perf prints.
fn check_against_dump(path: &Path) -> usize {
    let file = MappedFile::open(path).unwrap();
    let f = file.parse().unwrap();
    assert!(f.warnings().is_empty(), "{:?}", f.warnings());
    let pipe_base = if f.is_pipe() { 16 } else { 0 };
    let theirs = dump(path);
    let ours: Vec<(u64, Record<'_>)> = f.ordered_records().map(|r| r.unwrap()).collect();
    assert_eq!(ours.len(), theirs.len(), "record counts of {path:?}");
    for ((at, r), d) in ours.iter().zip(&theirs) {
        let ctx = format!("{path:?} {at:#x} {r:?} vs {d:?}");
        // perf counts pipe offsets from the end of the pipe header (its first is 0).
        if !matches!(r, Record::HeaderAttr { .. }) {
            assert_eq!(*at, d.offset + pipe_base, "{ctx}");
        }
        let size = u16::from_le_bytes([f.bytes()[*at as usize + 6], f.bytes()[*at as usize + 7]]);
        assert_eq!(size as u64, d.size, "{ctx}");
        assert_eq!(dump_name(r), d.name, "{ctx}");
        if let (Some(t), Some(dt)) = (r.time(), d.time) {
            assert_eq!(t, dt, "{ctx}");
        }
        if let Some(want) = expected_text(r) {
            assert!(
                d.text.starts_with(&want) || d.text.contains(&want),
                "{ctx}: want {want:?}"
            );
        }
        if let Record::Mmap2(m) = r {
            assert!(
                d.text.trim_end().ends_with(&*m.filename.to_str_lossy()),
                "{ctx}"
            );
        }
    }
    ours.len()
}

/// Our records against linux-perf-data's, for the kinds both type: as sorted lists of
/// what each says.
fn check_against_linux_perf_data(path: &Path) {
    use linux_perf_data::linux_perf_event_reader::{EventRecord, Mmap2FileId};
    use linux_perf_data::{PerfFileReader, PerfFileRecord};

    let file = MappedFile::open(path).unwrap();
    let f = file.parse().unwrap();
    let mut ours = Vec::new();
    for r in f.records() {
        let (_, r) = r.unwrap();
        let t = r.time();
        let s = match &r {
            Record::Comm(c) => format!("COMM {} {} {} {} {t:?}", c.pid, c.tid, c.comm, c.is_exec()),
            Record::Fork(x) | Record::Exit(x) => format!(
                "{} {} {} {} {} {} {t:?}",
                r.name(),
                x.pid,
                x.ppid,
                x.tid,
                x.ptid,
                x.time
            ),
            Record::Mmap(m) => format!(
                "MMAP {} {} {:#x} {:#x} {:#x} {} {t:?}",
                m.pid as i32, m.tid as i32, m.start, m.len, m.pgoff, m.filename
            ),
            Record::Mmap2(m) => format!(
                "MMAP2 {} {} {:#x} {:#x} {:#x} {:?} {} {} {} {t:?}",
                m.pid as i32,
                m.tid as i32,
                m.start,
                m.len,
                m.pgoff,
                match m.file {
                    Mmap2File::Inode { ino, .. } => ino,
                    Mmap2File::BuildId(_) => 0,
                },
                m.prot,
                m.flags,
                m.filename
            ),
            Record::Sample(s) => format!(
                "SAMPLE {:?} {:?} {:?} {:?} {:?} {:?}",
                s.ip,
                s.pid.map(|p| p as i32),
                s.tid.map(|p| p as i32),
                s.time,
                s.period,
                s.cpu
            ),
            Record::Switch(s) => format!("SWITCH {} {t:?}", s.is_out()),
            Record::SwitchCpuWide(s) => format!(
                "SWITCH {} {} {} {t:?}",
                s.is_out(),
                s.next_prev_pid as i32,
                s.next_prev_tid as i32
            ),
            _ => continue,
        };
        ours.push(s);
    }

    let reader = std::io::BufReader::new(std::fs::File::open(path).unwrap());
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = if f.is_pipe() {
        PerfFileReader::parse_pipe(reader).unwrap()
    } else {
        PerfFileReader::parse_file(reader).unwrap()
    };
    let mut theirs = Vec::new();
    while let Some(rec) = record_iter.next_record(&mut perf_file).unwrap() {
        let PerfFileRecord::EventRecord { record, .. } = rec else {
            continue;
        };
        let t = record.timestamp();
        let s = match record.parse().unwrap() {
            EventRecord::Comm(c) => format!(
                "COMM {} {} {} {} {t:?}",
                c.pid,
                c.tid,
                String::from_utf8_lossy(&c.name.as_slice()),
                c.is_execve
            ),
            EventRecord::Fork(x) => {
                format!(
                    "FORK {} {} {} {} {} {t:?}",
                    x.pid, x.ppid, x.tid, x.ptid, x.timestamp
                )
            }
            EventRecord::Exit(x) => {
                format!(
                    "EXIT {} {} {} {} {} {t:?}",
                    x.pid, x.ppid, x.tid, x.ptid, x.timestamp
                )
            }
            EventRecord::Mmap(m) => format!(
                "MMAP {} {} {:#x} {:#x} {:#x} {} {t:?}",
                m.pid,
                m.tid,
                m.address,
                m.length,
                m.page_offset,
                String::from_utf8_lossy(&m.path.as_slice())
            ),
            EventRecord::Mmap2(m) => format!(
                "MMAP2 {} {} {:#x} {:#x} {:#x} {:?} {} {} {} {t:?}",
                m.pid,
                m.tid,
                m.address,
                m.length,
                m.page_offset,
                match &m.file_id {
                    Mmap2FileId::InodeAndVersion(i) => i.inode,
                    Mmap2FileId::BuildId(_) => 0,
                },
                m.protection,
                m.flags,
                String::from_utf8_lossy(&m.path.as_slice())
            ),
            EventRecord::Sample(s) => format!(
                "SAMPLE {:?} {:?} {:?} {:?} {:?} {:?}",
                s.ip, s.pid, s.tid, s.timestamp, s.period, s.cpu
            ),
            EventRecord::ContextSwitch(c) => {
                use linux_perf_data::linux_perf_event_reader::ContextSwitchRecord as C;
                match c {
                    C::In {
                        prev_pid: Some(p),
                        prev_tid: Some(t2),
                    } => format!("SWITCH false {p} {t2} {t:?}"),
                    C::Out {
                        next_pid: Some(p),
                        next_tid: Some(t2),
                        ..
                    } => format!("SWITCH true {p} {t2} {t:?}"),
                    C::In { .. } => format!("SWITCH false {t:?}"),
                    C::Out { .. } => format!("SWITCH true {t:?}"),
                }
            }
            _ => continue,
        };
        theirs.push(s);
    }
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs, "{path:?}");
}

/// The record kinds of a file with their counts.
fn kinds(path: &Path) -> HashMap<&'static str, usize> {
    let file = MappedFile::open(path).unwrap();
    let f = file.parse().unwrap();
    let mut m = HashMap::new();
    for r in f.records() {
        *m.entry(r.unwrap().1.name()).or_insert(0) += 1;
    }
    m
}

#[test]
fn perf_record_file_mode_reads_back_as_perf_dumps_it() {
    let dir = scratch("writes_record_file");
    let data = record(
        &dir,
        "task.data",
        false,
        &["-e", "task-clock", "--", BUSY[0], BUSY[1], BUSY[2]],
    );
    let n = check_against_dump(&data);
    assert!(n > 5);
    check_against_linux_perf_data(&data);
    let file = MappedFile::open(&data).unwrap();
    let f = file.parse().unwrap();
    assert_eq!(f.events()[0].name.as_deref(), Some("task-clock"));
    assert!(matches!(
        f.feature(feature_id::VERSION),
        Some(Ok(Feature::Version(v))) if v.starts_with("6.1")
    ));
    assert!(matches!(
        f.feature(feature_id::CMDLINE),
        Some(Ok(Feature::Cmdline(v))) if v.iter().any(|a| a == "task-clock")
    ));
    let k = kinds(&data);
    for kind in ["COMM", "MMAP2", "SAMPLE", "EXIT", "FINISHED_ROUND"] {
        assert!(k.contains_key(kind), "{kind} missing: {k:?}");
    }
}

#[test]
fn perf_record_pipe_mode_reads_back_as_perf_dumps_it() {
    let dir = scratch("writes_record_pipe");
    let data = record(
        &dir,
        "pipe.data",
        true,
        &["-e", "task-clock", "--", BUSY[0], BUSY[1], BUSY[2]],
    );
    check_against_dump(&data);
    check_against_linux_perf_data(&data);
    // The streaming reader agrees with the mapped one.
    let bytes = std::fs::read(&data).unwrap();
    let f = PerfFile::parse(&bytes).unwrap();
    assert!(f.is_pipe());
    let mapped: Vec<String> = f.records().map(|r| format!("{:?}", r.unwrap())).collect();
    let mut p =
        PipeReader::new(std::io::BufReader::new(std::fs::File::open(&data).unwrap())).unwrap();
    let mut streamed = Vec::new();
    while let Some(r) = p.next_record().unwrap() {
        streamed.push(format!("{r:?}"));
    }
    assert_eq!(mapped, streamed);
    assert_eq!(p.events()[0].name.as_deref(), Some("task-clock"));
}

#[test]
fn perf_record_with_context_switches_reads_back_as_perf_dumps_it() {
    let dir = scratch("writes_record_switch");
    let data = record(
        &dir,
        "switch.data",
        false,
        &[
            "-e",
            "task-clock",
            "--switch-events",
            "--",
            "sh",
            "-c",
            "sleep 0.01; /bin/true",
        ],
    );
    check_against_dump(&data);
    check_against_linux_perf_data(&data);
    let k = kinds(&data);
    for kind in ["SWITCH", "FORK", "COMM"] {
        assert!(k.contains_key(kind), "{kind} missing: {k:?}");
    }
}

#[test]
fn perf_record_system_wide_reads_back_in_perfs_time_order() {
    // Several CPUs, several rounds: our time-ordered delivery must be perf's.
    let dir = scratch("writes_record_system_wide");
    let data = record(
        &dir,
        "all.data",
        false,
        &[
            "-a",
            "-e",
            "task-clock",
            "--switch-events",
            "--",
            "sleep",
            "0.05",
        ],
    );
    check_against_dump(&data);
    check_against_linux_perf_data(&data);
    let k = kinds(&data);
    assert!(k.contains_key("SWITCH_CPU_WIDE"), "{k:?}");
    let file = MappedFile::open(&data).unwrap();
    let f = file.parse().unwrap();
    assert!(
        f.records()
            .any(|r| r.unwrap().1.cpu().is_some_and(|c| c > 0))
            || num_cpus() == 1
    );
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[test]
fn perf_inject_output_reads_back_as_perf_dumps_it() {
    let dir = scratch("writes_inject");
    let data = record(
        &dir,
        "task.data",
        false,
        &["-e", "task-clock", "--", BUSY[0], BUSY[1], BUSY[2]],
    );
    let injected = dir.join("injected.data");
    perf(&[
        "inject",
        "-i",
        data.to_str().unwrap(),
        "-o",
        injected.to_str().unwrap(),
    ]);
    check_against_dump(&injected);
    check_against_linux_perf_data(&injected);

    // And an intel_pt file perf inject rewrote: AUXTRACE_INFO and AUXTRACE intact.
    let t = compile(&dir);
    let ours = dir.join("pt.data");
    let trace = pt_trace(&t);
    write_intel_pt(&ours, &t, &trace);
    let theirs = dir.join("pt-injected.data");
    perf(&[
        "inject",
        "-i",
        ours.to_str().unwrap(),
        "-o",
        theirs.to_str().unwrap(),
    ]);
    check_against_dump(&theirs);
    let file = MappedFile::open(&theirs).unwrap();
    let f = file.parse().unwrap();
    let info = f.intel_pt_info().unwrap().unwrap();
    assert_eq!(info.pmu_type, PT_PMU as u64);
    let aux: Vec<_> = f
        .records()
        .filter_map(|r| match r.unwrap().1 {
            Record::Auxtrace(a) => Some(a),
            _ => None,
        })
        .collect();
    assert_eq!(aux.len(), 1);
    assert_eq!(&aux[0].data[..trace.len()], &trace[..]);
    assert_eq!((aux[0].tid, aux[0].cpu as i32), (PID, -1));
}
