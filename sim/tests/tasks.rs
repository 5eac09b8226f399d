//! Threads, forks and execs, recorded by both sources: a two-thread C program
//! and a shell that forks a program and execs another. Every thread's items
//! keep the ordering contract, thread creation comes before the new thread's
//! items, each thread ends with its exit, and the execution log replays it
//! all. The programs without libc must give the same instructions under both
//! sources.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use pt_sim::exec::log::{LogReader, LogWriter};
use pt_sim::exec::ptrace::{TraceOptions, Tracer};
use pt_sim::exec::valgrind::{ValgrindOptions, ValgrindSource};
use pt_sim::exec::{
    check_continuity, collect, thread_items, CloneKind, Event, ExecItem, ExecutionSource, ExitKind,
    Retired, StopReason, ThreadCursor, ThreadId,
};

fn tmp() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

fn build(name: &str, flags: &[&str]) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}.c"));
    pt_testkit::compile_c(src, tmp().join(format!("tasks-{name}")), flags, &[])
}

/// The two-thread program, linked statically (fewer instructions to step).
fn threads() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| build("threads", &["-O1", "-pthread", "-static"]))
}

fn tiny() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        build(
            "tiny",
            &[
                "-O1",
                "-static",
                "-nostdlib",
                "-fno-stack-protector",
                "-fno-pie",
                "-no-pie",
            ],
        )
    })
}

fn valgrind() -> ValgrindOptions {
    ValgrindOptions {
        valgrind: pt_testkit::tool("valgrind", "valgrind").into_os_string(),
        ..ValgrindOptions::default()
    }
}

/// The shell command: a child runs tiny, then the shell execs tiny.
fn shell_command() -> String {
    let t = tiny().display().to_string();
    format!("{t} x; exec {t} w")
}

/// Drains a source, writing its log as a recorder would; checks that the log
/// replays exactly.
fn record(source: &mut dyn ExecutionSource) -> Vec<ExecItem> {
    let mut w = LogWriter::new(Vec::new()).unwrap();
    let mut items = Vec::new();
    while let Some(item) = source.next_item().expect("source") {
        w.write_item(&item, source.memory()).expect("log");
        items.push(item);
    }
    let log = w.finish().unwrap();
    let back = collect(&mut LogReader::new(&log[..]).unwrap()).expect("replay");
    assert!(back == items, "the log does not replay the recording");
    items
}

/// The threads of a recording in order of appearance, each with its items.
fn by_thread(items: &[ExecItem]) -> Vec<(ThreadId, Vec<ExecItem>)> {
    let mut c = ThreadCursor::new();
    let mut seen = Vec::new();
    for item in items {
        let t = c.follow(item);
        if !seen.contains(&t) {
            seen.push(t);
        }
    }
    seen.into_iter()
        .map(|t| (t, thread_items(items, t)))
        .collect()
}

fn insns(items: &[ExecItem]) -> Vec<Retired> {
    items
        .iter()
        .filter_map(|i| match i {
            ExecItem::Insn(r) => Some(*r),
            _ => None,
        })
        .collect()
}

/// The contract for creations and exits: a thread's first item comes after
/// the clone event that named it (but for the first thread), and its exit
/// is its last item.
fn check_lifetimes(items: &[ExecItem]) {
    let mut c = ThreadCursor::new();
    let mut announced: HashSet<ThreadId> = HashSet::new();
    let mut ended: HashSet<ThreadId> = HashSet::new();
    let mut first = None;
    for (i, item) in items.iter().enumerate() {
        let t = c.follow(item);
        let first = *first.get_or_insert(t);
        if matches!(item, ExecItem::Event(Event::Switch(_))) {
            continue;
        }
        assert!(
            t == first || announced.contains(&t),
            "item {i} of {t} before its clone"
        );
        assert!(!ended.contains(&t), "item {i} of {t} after its exit");
        match item {
            ExecItem::Event(Event::Clone { child, .. }) => {
                assert!(announced.insert(*child), "{child} created twice");
            }
            ExecItem::Event(Event::Exit(_)) => {
                ended.insert(t);
            }
            _ => {}
        }
    }
}

fn exits(items: &[ExecItem]) -> Vec<ExitKind> {
    items
        .iter()
        .filter_map(|i| match i {
            ExecItem::Event(Event::Exit(k)) => Some(*k),
            _ => None,
        })
        .collect()
}

fn execs(items: &[ExecItem]) -> Vec<String> {
    items
        .iter()
        .filter_map(|i| match i {
            ExecItem::Event(Event::Exec { path, .. }) => Some(
                Path::new(path)
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned(),
            ),
            _ => None,
        })
        .collect()
}

fn check_two_threads(items: &[ExecItem]) {
    check_continuity(items).unwrap_or_else(|i| panic!("discontinuity at {i}: {:?}", items[i]));
    check_lifetimes(items);
    let threads = by_thread(items);
    assert_eq!(
        threads.len(),
        2,
        "{:?}",
        threads.iter().map(|t| t.0).collect::<Vec<_>>()
    );
    let (main, main_items) = &threads[0];
    let (worker, worker_items) = &threads[1];
    assert_eq!(main.pid, main.tid);
    assert_eq!(worker.pid, main.pid);
    assert_ne!(worker.tid, main.tid);
    assert!(main_items.contains(&ExecItem::Event(Event::Clone {
        child: *worker,
        kind: CloneKind::Thread
    })));
    // The worker's loop: 500 calls through the pointer.
    assert!(
        insns(worker_items).len() > 3000,
        "{}",
        insns(worker_items).len()
    );
    assert_eq!(exits(worker_items), vec![ExitKind::Exited(0)]);
    assert_eq!(exits(main_items), vec![ExitKind::Exited(0)]);
    // Threads take turns (the join waits for the worker).
    let switches = items
        .iter()
        .filter(|i| matches!(i, ExecItem::Event(Event::Switch(_))))
        .count();
    assert!(switches >= 2, "{switches} switches");
}

#[test]
fn ptrace_follows_a_thread() {
    let mut t = Tracer::spawn(threads(), Vec::<String>::new(), TraceOptions::default()).unwrap();
    check_two_threads(&record(&mut t));
}

#[test]
fn valgrind_follows_a_thread() {
    let mut v = ValgrindSource::record(threads(), Vec::<String>::new(), valgrind()).unwrap();
    check_two_threads(&record(&mut v));
}

/// `sh -c 'tiny x; exec tiny w'`: the shell and its child.
fn check_shell(items: &[ExecItem]) -> Vec<(ThreadId, Vec<ExecItem>)> {
    check_continuity(items).unwrap_or_else(|i| panic!("discontinuity at {i}: {:?}", items[i]));
    check_lifetimes(items);
    assert!(
        !items
            .iter()
            .any(|i| matches!(i, ExecItem::Event(Event::Untraced { .. }))),
        "something was not followed"
    );
    let threads = by_thread(items);
    assert_eq!(
        threads.len(),
        2,
        "{:?}",
        threads.iter().map(|t| t.0).collect::<Vec<_>>()
    );
    let (shell, shell_items) = &threads[0];
    let (child, child_items) = &threads[1];
    assert_ne!(child.pid, shell.pid);
    assert!(shell_items.iter().any(|i| matches!(
        i,
        ExecItem::Event(Event::Clone { child: c, kind: CloneKind::Fork | CloneKind::Vfork }) if c == child
    )));
    let tiny_name = tiny().file_name().unwrap().to_string_lossy().into_owned();
    let shell_execs = execs(shell_items);
    assert_eq!(shell_execs.len(), 2, "{shell_execs:?}");
    assert_eq!(shell_execs[1], tiny_name);
    assert_eq!(execs(child_items), vec![tiny_name]);
    // tiny exits with a status of its own computation; both runs agree.
    let child_exit = exits(child_items);
    let shell_exit = exits(shell_items);
    assert_eq!(child_exit.len(), 1);
    assert_eq!(shell_exit.len(), 1);
    threads
}

/// The instructions of a thread after its last exec (tiny: no libc).
fn after_last_exec(items: &[ExecItem]) -> Vec<Retired> {
    let at = items
        .iter()
        .rposition(|i| matches!(i, ExecItem::Event(Event::Exec { .. })))
        .expect("an exec");
    insns(&items[at..])
}

#[test]
fn both_sources_follow_a_shell_that_forks_and_execs() {
    let cmd = shell_command();
    let mut t = Tracer::spawn("sh", ["-c", cmd.as_str()], TraceOptions::default()).unwrap();
    let native = check_shell(&record(&mut t));
    let mut v = ValgrindSource::record("sh", ["-c", cmd.as_str()], valgrind()).unwrap();
    let vg = check_shell(&record(&mut v));
    // tiny's instructions are the same under both sources, in the child and
    // in the shell that exec'd it.
    for k in 0..2 {
        let (a, b) = (after_last_exec(&native[k].1), after_last_exec(&vg[k].1));
        assert!(a.len() > 500);
        assert!(
            a == b,
            "thread {k}: {} vs {} instructions",
            a.len(),
            b.len()
        );
        assert_eq!(exits(&native[k].1), exits(&vg[k].1));
    }
}

/// A script whose interpreter execs other scripts and at last a program (as
/// pyenv's `python3` wrapper does): valgrind follows every exec.
#[test]
fn valgrind_follows_scripts_that_exec() {
    let dir = tmp().join("tasks-scripts");
    std::fs::create_dir_all(&dir).unwrap();
    let outer = dir.join("outer");
    let inner = dir.join("inner");
    std::fs::write(
        &outer,
        format!("#!/usr/bin/env sh\nexec {} \"$@\"\n", inner.display()),
    )
    .unwrap();
    std::fs::write(
        &inner,
        format!("#!/bin/sh\nexec {} \"$@\"\n", tiny().display()),
    )
    .unwrap();
    for p in [&outer, &inner] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut v = ValgrindSource::record(&outer, ["w"], valgrind()).unwrap();
    let items = record(&mut v);
    check_continuity(&items).unwrap();
    check_lifetimes(&items);
    let threads = by_thread(&items);
    assert_eq!(threads.len(), 1);
    // outer (env runs sh), inner (sh), tiny.
    let names = execs(&items);
    assert!(names.len() >= 3, "{names:?}");
    assert_eq!(
        names.last(),
        tiny()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .as_ref()
    );
    let mut t = Tracer::spawn(tiny(), ["w"], TraceOptions::default()).unwrap();
    let native = collect(&mut t).unwrap();
    assert!(after_last_exec(&items) == insns(&native));
    assert_eq!(exits(&items), exits(&native));
}

/// Ctrl-C while valgrind runs: what ran so far is kept and replays, and the
/// recording ends with the stop.
#[test]
fn valgrind_stop_flag_keeps_what_ran() {
    let flag = Arc::new(AtomicBool::new(false));
    let opts = ValgrindOptions {
        stop_flag: Some(flag.clone()),
        ..valgrind()
    };
    let setter = {
        let flag = flag.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            flag.store(true, Ordering::Relaxed);
        })
    };
    // An endless loop.
    let mut v = ValgrindSource::record(tiny(), ["l"], opts).unwrap();
    setter.join().unwrap();
    assert!(v.was_stopped());
    assert!(
        !flag.load(Ordering::Relaxed),
        "the served stop request is cleared"
    );
    let items = record(&mut v);
    check_continuity(&items).unwrap();
    assert!(insns(&items).len() > 1000, "{}", insns(&items).len());
    assert_eq!(
        items.last(),
        Some(&ExecItem::Event(Event::Stopped(StopReason::Interrupted)))
    );
}
