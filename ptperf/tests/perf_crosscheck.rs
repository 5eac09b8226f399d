//! perf itself judges what `ptperf record` writes on the simulated PT CPU:
//! for real programs in several configurations, `perf script --itrace=i1i
//! -F tid,ip` lists exactly the recorded ground truth (the execution log,
//! restricted to what the configuration traces) and exactly what our
//! decoder's perf.data session decodes, thread by thread, and `perf report
//! --stdio` runs without a warning. Snapshot recordings list a
//! window of it: the end of the execution for `-Se`, what came before each
//! SIGUSR2 otherwise.
//!
//! One ptrace recording of the libc sample is replayed (`--source log`) in
//! the other configurations, which keeps the test fast.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::*;

/// The sample recorded once with perf's default configuration.
fn sample_recording() -> &'static (PathBuf, PathBuf) {
    static R: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    R.get_or_init(|| {
        let d = dir("perf-crosscheck-sample");
        let data = record_logged(&d, "default", &[], &[sample().as_os_str()]);
        (d, data)
    })
}

/// perf's instructions equal the ground truth and our decoder's, thread by
/// thread; perf report is quiet.
fn check_exact(what: &str, data: &Path, log: &Path) -> BTreeMap<u32, Vec<u64>> {
    let got = perf_instructions(data);
    let want = truth(data, log);
    assert!(want.values().all(|v| !v.is_empty()), "{what}: {want:?}");
    assert_same_threads(what, &got, &want);
    let ours = our_instructions(data);
    assert_same_threads(&format!("{what}, our decoder"), &ours, &got);
    perf_report_quiet(data);
    got
}

#[test]
fn default_configuration() {
    let (_, data) = sample_recording();
    let got = check_exact("default", data, &log_of(data));
    assert!(got.values().next().unwrap().len() > 100_000);
}

#[test]
fn replayed_configurations() {
    let (d, data) = sample_recording();
    let log = log_of(data);
    let sample = sample().display().to_string();
    let filter = format!("filter main @ {sample}");
    let cases: [(&str, Vec<&str>); 4] = [
        ("noretcomp", vec!["-e", "intel_pt/noretcomp/u"]),
        ("psb-2k", vec!["-e", "intel_pt/psb_period=0/u"]),
        (
            "tsc-mtc-cyc",
            vec!["-e", "intel_pt/tsc,mtc,mtc_period=0,cyc,cyc_thresh=1/u"],
        ),
        ("filter-main", vec!["--filter", &filter]),
    ];
    let full = truth(data, &log);
    for (name, args) in cases {
        let out = replay(d, name, &args, &log);
        let got = check_exact(name, &out, &log);
        let n: usize = got.values().map(Vec::len).sum();
        if name == "filter-main" {
            // Only main's instructions: fewer than the whole run, and all in main.
            assert!(n > 100 && n < full.values().map(Vec::len).sum::<usize>() / 10);
        } else {
            assert_eq!(got, full, "{name}");
        }
    }
}

#[test]
fn snapshot_at_exit() {
    // A 4 KiB AUX area and a PSB every 2 KiB: the ring wraps many times and
    // keeps the end of the run, from its first PSB on.
    let (d, data) = sample_recording();
    let log = log_of(data);
    let out = replay(
        d,
        "snapshot",
        &["-e", "intel_pt/psb_period=0/u", "-Se4096"],
        &log,
    );
    assert_snapshot_is_the_end(&out, &log);
    perf_report_quiet(&out);
}

#[test]
fn snapshots_on_sigusr2() {
    // An endless loop; two snapshots on SIGUSR2, then Ctrl-C (no exit
    // snapshot without `e`). The ring never wraps: the snapshots together
    // are the execution up to the second one.
    let d = dir("perf-crosscheck-sigusr2");
    let data = d.join("loop.data");
    let log = log_of(&data);
    let child = start_spin(
        &["--exec-log", "-e", "intel_pt/psb_period=0/u", "-S65536"],
        &data,
    );
    // Each snapshot is on disk once taken: wait for it before the next.
    for n in 1..=2 {
        signal(&child, libc::SIGUSR2);
        wait_for_auxtrace(&data, n);
    }
    signal(&child, libc::SIGINT);
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    // perf record dies of the signal that stopped it, after its closing lines.
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(o.status.signal(), Some(libc::SIGINT), "{err}");
    assert!(err.contains("[ perf record: Captured and wrote"), "{err}");
    assert_eq!(auxtrace_count(&data), 2, "two snapshots, no more");
    let got = perf_instructions(&data);
    let want = truth(&data, &log);
    let (tid, g) = got.iter().next().unwrap();
    let w = &want[tid];
    assert!(
        g.len() > 1000 && g.len() < w.len(),
        "{} of {}",
        g.len(),
        w.len()
    );
    assert_eq!(
        g[..],
        w[..g.len()],
        "the snapshots are not the execution up to the second"
    );
    assert_same_threads("snapshots, our decoder", &our_instructions(&data), &got);
    snapshots_start_at_psbs(&data);
    perf_report_quiet(&data);
}

#[test]
fn two_threads() {
    let d = dir("perf-crosscheck-threads");
    let data = record_logged(&d, "threads", &[], &[threads().as_os_str()]);
    let got = check_exact("threads", &data, &log_of(&data));
    assert_eq!(got.len(), 2);
}

#[test]
fn fork_and_exec() {
    let d = dir("perf-crosscheck-shell");
    let t = tiny().display().to_string();
    let script = format!("{t} x; exec {t} w");
    let data = record_logged(
        &d,
        "shell",
        &[],
        &[OsStr::new("sh"), OsStr::new("-c"), OsStr::new(&script)],
    );
    let got = check_exact("fork and exec", &data, &log_of(&data));
    assert_eq!(got.len(), 2, "the shell and its child");
}

#[test]
fn vdso_code_through_the_build_id_cache() {
    let d = dir("perf-crosscheck-vdso");
    // QEMU 7.2 gives x86-64 programs no vDSO: a source that runs the
    // program on the host's kernel.
    let data = record_logged(&d, "clock", &["--source", "ptrace"], &[clock().as_os_str()]);
    let got = check_exact("vdso", &data, &log_of(&data));
    // Some of it ran in the vDSO, which perf read from OUT.debug.
    let (out, _) = perf(&[
        OsStr::new("--buildid-dir"),
        debug_of(&data).as_os_str(),
        OsStr::new("script"),
        OsStr::new("-i"),
        data.as_os_str(),
        OsStr::new("--itrace=i1i"),
        OsStr::new("-F"),
        OsStr::new("ip,dso"),
    ]);
    let vdso = out.lines().filter(|l| l.contains("[vdso]")).count();
    assert!(
        vdso > 10,
        "{vdso} vDSO instructions of {}",
        got.values().map(Vec::len).sum::<usize>()
    );
}

/// A recording as our reader understands it, in file order, without what
/// depends on the layout of the file (offsets of records, padding, round
/// markers): the events' attributes and names, AUXTRACE_INFO, and every
/// side-band and trace record (AUXTRACE data by content).
fn meaning(data: &Path) -> Vec<String> {
    use pt_perf_data::{MappedFile, Record};
    let file = MappedFile::open(data).unwrap();
    let perf = file.parse().unwrap();
    let mut out = Vec::new();
    for e in perf.events() {
        let a = &e.attr;
        out.push(format!(
            "attr type {} config {:#x} sample_type {:?} flags {:?} ids {} name {:?}",
            a.type_,
            a.config,
            a.sample_type,
            a.flags,
            e.ids.len(),
            e.name
        ));
    }
    if let Some(info) = perf.intel_pt_info() {
        out.push(format!("intel_pt {:?}", info.unwrap()));
    }
    for r in perf.records() {
        let (_, r) = r.unwrap();
        let line = match r {
            Record::Comm(c) => format!(
                "comm {}/{} {} misc {:#x} {:?}",
                c.pid,
                c.tid,
                c.comm.to_str_lossy(),
                c.misc,
                c.sample_id
            ),
            Record::Mmap2(m) => format!(
                "mmap2 {}/{} {:#x}+{:#x} @{:#x} prot {} flags {} {} misc {:#x} {:?}",
                m.pid,
                m.tid,
                m.start,
                m.len,
                m.pgoff,
                m.prot,
                m.flags,
                m.filename.to_str_lossy(),
                m.misc,
                m.sample_id
            ),
            Record::Fork(t) => format!("fork {t:?}"),
            Record::Exit(t) => format!("exit {t:?}"),
            Record::ItraceStart(s) => format!("itrace_start {s:?}"),
            Record::Aux(a) => format!("aux {a:?}"),
            Record::Auxtrace(a) => format!(
                "auxtrace offset {:#x} reference {:#x} idx {} tid {} cpu {} {} bytes {:#x}",
                a.offset,
                a.reference,
                a.idx,
                a.tid,
                a.cpu,
                a.data.len(),
                a.data
                    .iter()
                    .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b))
                        .wrapping_mul(0x100_0000_01b3))
            ),
            Record::Switch(s) => format!("switch {s:?}"),
            Record::Lost(l) => format!("lost {l:?}"),
            Record::TimeConv(t) => format!("time_conv {t:?}"),
            _ => continue,
        };
        out.push(line);
    }
    out
}

/// The other way: a perf.data that perf itself wrote from ours (`perf
/// inject`, which reads every record and writes it anew) reads back through
/// our reader with the same meaning, record for record.
#[test]
fn perf_inject_output_reads_back_unchanged() {
    let d = dir("perf-crosscheck-inject");
    let ours = record(&d, "threads", &[], &[threads().as_os_str()]);
    let theirs = d.join("theirs.data");
    let (_, err) = perf(&[
        OsStr::new("inject"),
        OsStr::new("-i"),
        ours.as_os_str(),
        OsStr::new("-o"),
        theirs.as_os_str(),
    ]);
    assert_quiet("perf inject", &err);
    let (a, b) = (meaning(&ours), meaning(&theirs));
    assert!(a.iter().filter(|l| l.starts_with("auxtrace ")).count() >= 2);
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_eq!(x, y, "record {i}");
    }
    assert_eq!(a.len(), b.len());
    // And our session decodes perf's file to the same instructions.
    assert_same_threads(
        "perf inject",
        &our_instructions(&theirs),
        &our_instructions(&ours),
    );
}

/// The side-band records `perf script --show-task-events --show-mmap-events`
/// prints, as (kind, pid, tid, detail).
fn perf_side_band(data: &Path) -> Vec<String> {
    let (out, err) = perf(&[
        OsStr::new("script"),
        OsStr::new("-i"),
        data.as_os_str(),
        OsStr::new("--show-task-events"),
        OsStr::new("--show-mmap-events"),
    ]);
    assert_quiet("perf script", &err);
    let mut v = Vec::new();
    for l in out.lines() {
        if let Some((_, rest)) = l.split_once("PERF_RECORD_MMAP2 ") {
            // PID/TID: [0xSTART(0xLEN) @ 0xPGOFF ...]: PROT FILE
            let (ids, rest) = rest.split_once(": [").unwrap();
            let (start, rest) = rest.split_once('(').unwrap();
            let (len, rest) = rest.split_once(") @ ").unwrap();
            let (pgoff, _) = rest.split_once(' ').unwrap();
            // perf prints offset 0 as `0`.
            let pgoff = u64::from_str_radix(pgoff.trim_start_matches("0x"), 16).unwrap();
            let file = l.rsplit(' ').next().unwrap();
            v.push(format!("mmap2 {ids} {start}+{len} @{pgoff:#x} {file}"));
        } else if let Some((_, rest)) = l.split_once("PERF_RECORD_COMM") {
            // [ exec]: NAME:PID/TID
            let (_, rest) = rest.split_once(": ").unwrap();
            let (name, ids) = rest.rsplit_once(':').unwrap();
            v.push(format!("comm {ids} {name}"));
        } else if let Some((_, rest)) = l.split_once("PERF_RECORD_EXIT(") {
            let (pid, rest) = rest.split_once(':').unwrap();
            let (tid, _) = rest.split_once(')').unwrap();
            v.push(format!("exit {pid}/{tid}"));
        }
    }
    v
}

/// The same from our reader.
fn our_side_band(data: &Path) -> Vec<String> {
    use pt_perf_data::{MappedFile, Record};
    let file = MappedFile::open(data).unwrap();
    let perf = file.parse().unwrap();
    let mut v = Vec::new();
    for r in perf.records() {
        match r.unwrap().1 {
            Record::Mmap2(m) => v.push(format!(
                "mmap2 {}/{} {:#x}+{:#x} @{:#x} {}",
                m.pid,
                m.tid,
                m.start,
                m.len,
                m.pgoff,
                m.filename.to_str_lossy()
            )),
            Record::Comm(c) => v.push(format!(
                "comm {}/{} {}",
                c.pid,
                c.tid,
                c.comm.to_str_lossy()
            )),
            Record::Exit(t) => v.push(format!("exit {}/{}", t.pid, t.tid)),
            _ => {}
        }
    }
    v
}

/// The other way, for the records of a real kernel: a perf.data that `perf
/// record` wrote for a software event reads through our reader as perf
/// script reads it (the same comms, mappings and exits, in the same order).
/// It needs perf_event_open for a software event of its own process (root, or
/// kernel.perf_event_paranoid at 2 or less, and no seccomp filter against it):
/// where perf cannot record, perf's own message is the failure.
#[test]
fn perf_record_output_reads_as_perf_reads_it() {
    let d = dir("perf-crosscheck-dummy");
    let data = d.join("dummy.data");
    let (_, err) = perf(&[
        OsStr::new("record"),
        OsStr::new("-e"),
        OsStr::new("dummy"),
        OsStr::new("-o"),
        data.as_os_str(),
        OsStr::new("--"),
        OsStr::new("/bin/true"),
    ]);
    assert!(
        err.contains("Captured and wrote"),
        "perf record -e dummy failed (perf_event_open for a software event is needed): {err}"
    );
    let ours = our_side_band(&data);
    assert!(
        ours.iter()
            .any(|l| l.starts_with("comm ") && l.ends_with(" true")),
        "{ours:?}"
    );
    assert!(ours.iter().any(|l| l.ends_with("/true")), "{ours:?}");
    assert_eq!(ours, perf_side_band(&data));
    let file = pt_perf_data::MappedFile::open(&data).unwrap();
    let perf = file.parse().unwrap();
    let ev = &perf.events()[0];
    // PERF_TYPE_SOFTWARE, PERF_COUNT_SW_DUMMY.
    assert_eq!((ev.attr.type_, ev.attr.config), (1, 9));
    assert_eq!(ev.name.as_deref(), Some("dummy"));
}

/// Every SIGUSR2 takes a snapshot on the ptrace and valgrind sources too:
/// a program that runs until it is stopped, N signals half a second apart,
/// then Ctrl-C. N AUXTRACE records whose offsets never overlap (their
/// padded sizes included), together the execution up to the last signal
/// as perf decodes it, without a trace error, as our decoder does.
/// (Valgrind runs the program before the recorder replays it: a signal
/// is kept as the instruction count valgrind had reached, and the replay
/// takes its snapshot there.)
#[test]
fn repeated_snapshots_on_ptrace_and_valgrind() {
    valgrind_installed();
    let prog = build("bursts", "tests/programs/bursts.c", &["-O1"]);
    const N: usize = 4;
    for source in ["ptrace", "valgrind"] {
        let d = dir(&format!("perf-crosscheck-snapshots-{source}"));
        let data = d.join("bursts.data");
        let args = [
            "--exec-log",
            "--source",
            source,
            "-e",
            "intel_pt/psb_period=0/u",
            "-S",
        ];
        let child = start_recording(&prog, &args, &data);
        for n in 1..=N {
            std::thread::sleep(std::time::Duration::from_millis(500));
            signal(&child, libc::SIGUSR2);
            if source == "ptrace" {
                // Written at once, as perf record does.
                wait_for_auxtrace(&data, n);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        signal(&child, libc::SIGINT);
        let o = child.wait_with_output().unwrap();
        let err = stderr(&o);
        assert!(
            err.contains("[ perf record: Captured and wrote"),
            "{source}: {err}"
        );
        assert!(!err.contains("warning"), "{source}: {err}");
        // N snapshots whose offsets do not overlap.
        let mapped = pt_perf_data::MappedFile::open(&data).unwrap();
        let perf_file = mapped.parse().unwrap();
        let mut pieces: Vec<(u32, u64, u64)> = perf_file
            .records()
            .map(Result::unwrap)
            .filter_map(|(_, r)| match r {
                pt_perf_data::Record::Auxtrace(a) => Some((a.idx, a.offset, a.data.len() as u64)),
                _ => None,
            })
            .collect();
        assert_eq!(pieces.len(), N, "{source}: {pieces:x?}");
        pieces.sort();
        for w in pieces.windows(2) {
            let ((ia, oa, sa), (ib, ob, _)) = (w[0], w[1]);
            assert!(
                ia != ib || oa + sa <= ob,
                "{source}: snapshots overlap: {pieces:x?}"
            );
        }
        // perf decodes them without a trace error: the execution up to the
        // last snapshot, from its start.
        let (errors, _) = perf(&[
            OsStr::new("--buildid-dir"),
            debug_of(&data).as_os_str(),
            OsStr::new("script"),
            OsStr::new("--itrace=e"),
            OsStr::new("-i"),
            data.as_os_str(),
        ]);
        assert_eq!(errors, "", "{source}: perf's trace errors");
        let got = perf_instructions(&data);
        let want = truth(&data, &log_of(&data));
        assert_eq!(got.len(), 1, "{source}");
        let (tid, g) = got.iter().next().unwrap();
        let w = &want[tid];
        assert!(
            g.len() > 10_000 && g.len() < w.len(),
            "{source}: {} of {}",
            g.len(),
            w.len()
        );
        assert_eq!(
            g[..],
            w[..g.len()],
            "{source}: not the execution up to the last snapshot"
        );
        assert_same_threads(
            &format!("{source} snapshots, our decoder"),
            &our_instructions(&data),
            &got,
        );
        perf_report_quiet(&data);
    }
}
