//! The perf.data session against perf itself: real programs recorded on the
//! simulator, written as perf.data in perf's layouts, decoded by `perf script
//! --itrace=i1i -F tid,ip` and by the session. Thread by thread, the instruction
//! addresses must be the same.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use pt_perf::session::SessionOptions;
use pt_testkit::recording::*;

fn parent() -> std::path::PathBuf {
    program("perf_parent", NOLIBC)
}

fn child() -> std::path::PathBuf {
    program("perf_child", NOLIBC)
}

/// Records `args` with `layout`, decodes with perf and with the session; returns
/// our flows and notes after checking that they match perf's.
fn cross_check(
    name: &str,
    prog: &std::path::Path,
    args: &[&str],
    layout: Layout,
) -> (Flows, Vec<String>) {
    let dir = scratch(name);
    let (file, _) = record(&dir, prog, args, layout);
    let theirs = perf_flows(&file, None);
    let (ours, notes) = our_flows(&file, SessionOptions::for_file(&file));
    if let Err(e) = compare(&ours, &theirs) {
        panic!("{name}: {e}\nnotes:\n{}", notes.join("\n"));
    }
    assert!(!ours.is_empty(), "{name}: nothing decoded");
    (ours, notes)
}

#[test]
fn per_thread_fork_exec_timed() {
    let c = child();
    let (flows, notes) = cross_check(
        "fork_exec_timed",
        &parent(),
        &[c.to_str().unwrap()],
        Layout::default(),
    );
    assert_eq!(flows.len(), 2, "{notes:?}");
}

fn threads() -> std::path::PathBuf {
    program("perf_threads", &["-O1", "-static", "-pthread"])
}

/// PSBs every 2 KiB (the smallest period), so that traces have several.
fn frequent_psbs() -> pt_hal::config::TraceConfig {
    pt_hal::config::TraceConfig {
        psb_freq: 0,
        ..pt_hal::config::TraceConfig::perf_default()
    }
}

/// The child program linked elsewhere: its code does not overlap the parent's.
fn child_elsewhere() -> std::path::PathBuf {
    const FLAGS: &[&str] = &[
        "-O1",
        "-static",
        "-nostdlib",
        "-fno-stack-protector",
        "-fno-pie",
        "-no-pie",
        "-Wl,-Ttext-segment=0x800000",
    ];
    program_as("perf_child_elsewhere", "perf_child", FLAGS)
}

/// Untimed, a thread's code is what its process ever mapped (perf's timeless
/// decoding): the exec'd program must not overlap the one before.
#[test]
fn per_thread_fork_exec_untimed() {
    let c = child_elsewhere();
    cross_check(
        "fork_exec_untimed",
        &parent(),
        &[c.to_str().unwrap()],
        Layout {
            timed: false,
            ..Layout::default()
        },
    );
}

#[test]
fn per_cpu_fork_exec() {
    let c = child();
    let (flows, notes) = cross_check(
        "fork_exec_per_cpu",
        &parent(),
        &[c.to_str().unwrap()],
        Layout {
            per_cpu: true,
            ..Layout::default()
        },
    );
    assert_eq!(flows.len(), 2, "{notes:?}");
    // The CPU switched between the two processes more than once.
    let switches = notes.iter().filter(|n| n.starts_with("context")).count();
    assert!(switches >= 3, "{notes:?}");
}

#[test]
fn threads_vdso_and_pieces() {
    let (flows, notes) = cross_check(
        "threads",
        &threads(),
        &[],
        Layout {
            piece: 3000,
            vdso_cache: true,
            config: frequent_psbs(),
            ..Layout::default()
        },
    );
    assert_eq!(flows.len(), 3, "{notes:?}");
    assert!(
        !notes
            .iter()
            .any(|n| n.starts_with("error") || n.starts_with("nocode")),
        "{notes:?}"
    );
}

#[test]
fn threads_per_cpu() {
    let (flows, notes) = cross_check(
        "threads_per_cpu",
        &threads(),
        &[],
        Layout {
            per_cpu: true,
            piece: 5000,
            vdso_cache: true,
            config: frequent_psbs(),
            ..Layout::default()
        },
    );
    assert_eq!(flows.len(), 3, "{notes:?}");
}

#[test]
fn snapshots() {
    let (_, notes) = cross_check(
        "snapshots",
        &threads(),
        &[],
        Layout {
            piece: 3000,
            snapshot_overlap: Some(100_000),
            vdso_cache: true,
            config: frequent_psbs(),
            ..Layout::default()
        },
    );
    // Every snapshot continues the one before: nothing is lost.
    assert!(!notes.iter().any(|n| n.starts_with("lost")), "{notes:?}");
}

#[test]
fn lost_piece() {
    let (_, notes) = cross_check(
        "lost_piece",
        &threads(),
        &[],
        Layout {
            piece: 1000,
            drop_piece: Some(1),
            vdso_cache: true,
            config: frequent_psbs(),
            ..Layout::default()
        },
    );
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("lost") && n.contains("truncated")),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("lost") && n.contains("missing between")),
        "{notes:?}"
    );
}

/// Flows up to each thread's first error.
fn until_error(f: &Flows, errors_at: &std::collections::BTreeMap<u32, usize>) -> Flows {
    f.iter()
        .map(|(t, v)| {
            (
                *t,
                v[..errors_at.get(t).copied().unwrap_or(v.len()).min(v.len())].to_vec(),
            )
        })
        .collect()
}

/// Code that is not there: the exec'd program deleted after the recording, and the
/// vdso without a copy in any build-id cache. Both decoders stop at the same place;
/// ours says what is missing, and decodes what is there.
#[test]
fn missing_code_is_named() {
    let dir = scratch("missing_code");
    let gone = dir.join("child_copy");
    std::fs::copy(child_elsewhere(), &gone).unwrap();
    let (file, _) = record(
        &dir,
        &parent(),
        &[gone.to_str().unwrap()],
        Layout::default(),
    );
    std::fs::remove_file(&gone).unwrap();
    let theirs = perf_flows(&file, None);
    let (ours, notes) = our_flows(&file, SessionOptions::for_file(&file));
    let nocode: Vec<_> = notes.iter().filter(|n| n.starts_with("nocode")).collect();
    assert_eq!(nocode.len(), 1, "{notes:?}");
    assert!(
        nocode[0].contains("child_copy") && nocode[0].contains("file not found"),
        "{nocode:?}"
    );
    // The parent's flow is whole; the child's up to the exec is perf's.
    compare(&ours, &theirs).unwrap_or_else(|e| panic!("{e}\n{notes:?}"));

    // The vdso without a copy.
    let dir = scratch("missing_vdso");
    let (file, _) = record(&dir, &threads(), &[], Layout::default());
    let (ours, notes) = our_flows(&file, SessionOptions::for_file(&file));
    let nocode: Vec<_> = notes.iter().filter(|n| n.starts_with("nocode")).collect();
    assert!(!nocode.is_empty(), "{notes:?}");
    assert!(
        nocode
            .iter()
            .all(|n| n.contains("[vdso]") && n.contains("the vdso: no copy")),
        "{nocode:?}"
    );
    let theirs = perf_flows(&file, None);
    // Up to the first call into the vdso the flows agree.
    let main = *ours.keys().next().unwrap();
    let first_vdso = |f: &Flows| {
        f[&main]
            .iter()
            .position(|&ip| ip >= 0x7fff_0000_0000)
            .unwrap_or(f[&main].len())
    };
    let mut errs = std::collections::BTreeMap::new();
    errs.insert(main, first_vdso(&theirs));
    assert_eq!(
        until_error(&ours, &errs)[&main],
        until_error(&theirs, &errs)[&main]
    );
}

/// A recording cut short in an AUXTRACE record: its data up to the end of the file
/// is decoded, the cut is a warning with the record's offset and a lost-data item.
#[test]
fn cut_off_auxtrace() {
    let dir = scratch("cut_off");
    let c = child();
    let (file, _) = record(&dir, &parent(), &[c.to_str().unwrap()], Layout::default());
    let bytes = std::fs::read(&file).unwrap();
    // The file's last AUXTRACE record: cut in the middle of its data.
    let mapped = pt_perf_data::PerfFile::parse(&bytes).unwrap();
    let (at, last) = mapped.auxtrace_records().last().unwrap();
    let keep = at as usize + 48 + last.data.len() / 2;
    let cut = dir.join("cut.data");
    std::fs::write(&cut, &bytes[..keep]).unwrap();
    let (ours, notes) = our_flows(&cut, SessionOptions::for_file(&cut));
    assert!(
        notes.iter().any(|n| n.starts_with("warning")
            && n.contains(&format!("file offset {at:#x}: AUXTRACE claims"))),
        "{notes:?}"
    );
    assert!(ours.values().map(Vec::len).sum::<usize>() > 0, "{notes:?}");
}

#[test]
#[ignore]
fn show() {
    let name = std::env::var("SHOW").unwrap_or("threads".into());
    let file = tmp().join(&name).join("perf.data");
    let (flows, notes) = our_flows(&file, SessionOptions::for_file(&file));
    for (t, f) in &flows {
        eprintln!(
            "tid {t}: {} insns, first {:x?}",
            f.len(),
            &f[..5.min(f.len())]
        );
    }
    let theirs = perf_flows(&file, None);
    for (t, f) in &theirs {
        eprintln!(
            "perf tid {t}: {} insns, first {:x?}",
            f.len(),
            &f[..5.min(f.len())]
        );
    }
    eprintln!("{}", notes.join("\n"));
}
