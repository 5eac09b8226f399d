//! `ptperf record` writes as perf record does: in rounds during the recording
//! (FINISHED_ROUND), the header made consistent after each, so that a
//! recorder killed outright leaves a file perf 6.1 and `ptperf script` read
//! without complaint, and a write that fails (a full disk, a file-size
//! limit) stops the recording with one line naming the file, the file kept
//! readable up to its last round.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use std::ffi::OsStr;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;

use common::*;
use pt_perf_data::{MappedFile, Record};

/// Record names of `data` as our reader sees them, with its warnings.
fn records(data: &Path) -> (Vec<&'static str>, Vec<String>) {
    let file = MappedFile::open(data).unwrap();
    let perf = file.parse().unwrap();
    let names = perf.records().map(|r| r.unwrap().1.name()).collect();
    let warnings = perf.warnings().iter().map(|w| w.to_string()).collect();
    (names, warnings)
}

/// `perf script --itrace=b -F ip,addr` on `data`: its branch lines.
fn perf_branches(data: &Path) -> (Vec<String>, String) {
    let (out, err) = perf(&[
        OsStr::new("script"),
        OsStr::new("-i"),
        data.as_os_str(),
        OsStr::new("--itrace=b"),
        OsStr::new("-F"),
        OsStr::new("ip,addr"),
    ]);
    (out.lines().map(str::to_string).collect(), err)
}

#[test]
fn a_killed_recording_leaves_rounds_perf_reads() {
    let d = dir("record-rounds-sigkill");
    let data = d.join("t.data");
    let child = start_spin(&["--source", "ptrace"], &data);
    // Two rounds with trace on disk, then SIGKILL: nothing of ours runs after it.
    wait_for_auxtrace(&data, 2);
    signal(&child, libc::SIGKILL);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.signal(), Some(libc::SIGKILL));

    // The header covers whole rounds: no warning, the last record ends a round.
    let (names, warnings) = records(&data);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(names.first(), Some(&"AUXTRACE_INFO"));
    assert_eq!(names.last(), Some(&"FINISHED_ROUND"), "{names:?}");
    assert!(names.iter().filter(|&&n| n == "AUXTRACE").count() >= 2);

    // perf reads it as a finished recording: branches, no complaint.
    let (perf_lines, err) = perf_branches(&data);
    assert!(!err.contains("data size field is 0"), "{err}");
    assert!(!err.contains("properly terminated"), "{err}");
    assert!(perf_lines.len() > 100, "{} lines: {err}", perf_lines.len());

    // And so does ours, branch for branch.
    let o = ptperf()
        .args(["script", "--itrace=b", "-F", "ip,addr", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let ours: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(ours.len(), perf_lines.len(), "{}", stderr(&o));
    let norm = |l: &String| l.split_whitespace().collect::<Vec<_>>().join(" ");
    let first_diff = ours
        .iter()
        .zip(&perf_lines)
        .position(|(a, b)| norm(a) != norm(b));
    assert_eq!(first_diff, None, "ours and perf's branches differ");
}

/// Replays `log` into `out` with the file size limited to `limit` bytes
/// (SIGXFSZ ignored, so a write past it fails with EFBIG, as one on a full
/// disk fails with ENOSPC).
fn replay_limited(log: &Path, out: &Path, limit: u64) -> std::process::Output {
    let mut c = ptperf();
    c.args(["record", "--source", "log", "-o"])
        .arg(out)
        .arg(log);
    // SAFETY: async-signal-safe calls only, between fork and exec.
    unsafe {
        c.pre_exec(move || {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c.output().unwrap()
}

#[test]
fn a_full_disk_names_the_file_and_keeps_the_rounds_before() {
    let d = dir("record-rounds-full");
    let data = record_logged(&d, "sample", &[], &[sample().as_os_str()]);
    let log = log_of(&data);
    // The replay's layout, unlimited: where its rounds end, and the features
    // after the data.
    let whole = d.join("whole.data");
    let o = replay_limited(&log, &whole, libc::RLIM_INFINITY);
    assert!(o.status.success(), "{}", stderr(&o));
    let file = MappedFile::open(&whole).unwrap();
    let perf = file.parse().unwrap();
    let ends: Vec<u64> = perf
        .records()
        .map(Result::unwrap)
        .filter(|(_, r)| matches!(r, Record::FinishedRound))
        .map(|(at, _)| at + 8)
        .collect();
    let features = std::fs::metadata(&whole).unwrap().len() - ends.last().unwrap();
    assert!(ends.len() >= 2, "{ends:?}");
    let (before, last) = (ends[ends.len() - 2], ends[ends.len() - 1]);
    assert!(last - before > 256, "{ends:?}");
    // Room for every round but the last (and the features after it).
    let limit = before + features + (last - before) / 2;
    // As long a name as the unlimited one's (HEADER_CMDLINE holds it).
    let out = d.join("limit.data");
    let o = replay_limited(&log, &out, limit);
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    // One line: what failed, on which file.
    let line = err.lines().find(|l| l.contains("too large")).unwrap_or("");
    assert!(line.starts_with("ptperf record: "), "{err}");
    assert!(
        line.contains(&format!("{}: ", out.display())),
        "the file is not named: {err}"
    );
    // What is on disk reads as whole rounds.
    let (names, warnings) = records(&out);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(names.last(), Some(&"FINISHED_ROUND"), "{names:?}");
    let rounds = names.iter().filter(|&&n| n == "FINISHED_ROUND").count();
    assert_eq!(rounds, ends.len() - 1, "{names:?}");
    assert!(std::fs::metadata(&out).unwrap().len() <= limit);
    let (_, perf_err) = perf_branches(&out);
    assert!(!perf_err.contains("data size field is 0"), "{perf_err}");
}

/// The recording's records end with rounds: FINISHED_INIT after the
/// synthesized start, FINISHED_ROUND at each checkpoint, one at the end.
#[test]
fn a_finished_recording_is_written_in_rounds() {
    let d = dir("record-rounds-finished");
    let data = record(&d, "sample", &[], &[sample().as_os_str()]);
    let (names, warnings) = records(&data);
    assert!(warnings.is_empty(), "{warnings:?}");
    let init = names.iter().position(|&n| n == "FINISHED_INIT").unwrap();
    assert_eq!(&names[..init], ["AUXTRACE_INFO", "TIME_CONV"]);
    assert_eq!(names.last(), Some(&"FINISHED_ROUND"));
    let rounds = names.iter().filter(|&&n| n == "FINISHED_ROUND").count();
    assert!(rounds >= 2, "{names:?}");
}
