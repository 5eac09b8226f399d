//! The valgrind source against the single-step tracer on the same programs.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::path::PathBuf;
use std::sync::OnceLock;

use pt_sim::exec::log::{LogReader, LogWriter};
use pt_sim::exec::ptrace::{TraceOptions, Tracer};
use pt_sim::exec::valgrind::{ValgrindOptions, ValgrindSource};
use pt_sim::exec::{
    check_continuity, collect, Event, ExecError, ExecItem, ExecutionSource, ExitKind, Retired,
};

fn tiny() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs/tiny.c");
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pt-sim-vg-tiny");
        pt_testkit::compile_c(src, out, pt_testkit::NOLIBC, &[])
    })
}

fn valgrind() -> ValgrindOptions {
    ValgrindOptions {
        valgrind: pt_testkit::tool("valgrind", "valgrind").into_os_string(),
        ..ValgrindOptions::default()
    }
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

/// Signals and the exit, which both sources must agree on.
fn flow_events(items: &[ExecItem]) -> Vec<Event> {
    items
        .iter()
        .filter_map(|i| match i {
            ExecItem::Event(e @ (Event::Signal { .. } | Event::Exit(_))) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

fn both(mode: &str) -> (Vec<ExecItem>, Vec<ExecItem>) {
    let mut t = Tracer::spawn(tiny(), [mode], TraceOptions::default()).unwrap();
    let native = collect(&mut t).unwrap();
    let mut v = ValgrindSource::record(tiny(), [mode], valgrind()).unwrap();
    let vg = collect(&mut v).unwrap();
    (native, vg)
}

#[test]
fn same_instructions_as_single_stepping() {
    // plain, write, REP MOVSB, handled signals, signal during pause(), crash
    for mode in ["x", "w", "r", "s", "p", "c"] {
        let (native, vg) = both(mode);
        check_continuity(&vg)
            .unwrap_or_else(|i| panic!("mode {mode}: discontinuity at {i}: {:?}", vg.get(i)));
        let (a, b) = (insns(&native), insns(&vg));
        let first_diff = a.iter().zip(&b).position(|(x, y)| x != y);
        assert!(
            a.len() == b.len() && first_diff.is_none(),
            "mode {mode}: {} vs {} instructions, first difference at {first_diff:?}: {:?} vs {:?}",
            a.len(),
            b.len(),
            first_diff.and_then(|i| a.get(i)),
            first_diff.and_then(|i| b.get(i)),
        );
        assert_eq!(flow_events(&native), flow_events(&vg), "mode {mode}");
    }
}

#[test]
fn system_calls_and_log_round_trip() {
    let mut v = ValgrindSource::record(tiny(), ["w"], valgrind()).unwrap();
    let mut w = LogWriter::new(Vec::new()).unwrap();
    let mut items = Vec::new();
    while let Some(item) = v.next_item().unwrap() {
        w.write_item(&item, v.memory()).unwrap();
        items.push(item);
    }
    assert!(items.contains(&ExecItem::Event(Event::SyscallExit { nr: 1, ret: 3 })));
    assert!(items
        .iter()
        .any(|i| matches!(i, ExecItem::Event(Event::SyscallEnter { nr: 1, args }) if args[0] == 1 && args[2] == 3)));
    assert_eq!(
        items.last(),
        Some(&ExecItem::Event(Event::Exit(ExitKind::Exited(13))))
    );
    let bytes = w.finish().unwrap();
    assert_eq!(collect(&mut LogReader::new(bytes).unwrap()).unwrap(), items);
}

#[test]
fn dynamically_linked_program() {
    let mut v = ValgrindSource::record("/bin/true", Vec::<String>::new(), valgrind()).unwrap();
    let items = collect(&mut v).unwrap();
    check_continuity(&items).unwrap();
    assert!(insns(&items).len() > 20_000);
    assert_eq!(
        items.last(),
        Some(&ExecItem::Event(Event::Exit(ExitKind::Exited(0))))
    );
    let maps = v.mappings();
    for r in insns(&items) {
        assert!(
            maps.iter()
                .any(|m| m.perms.exec && (m.start..m.end).contains(&r.ip)),
            "{:#x}",
            r.ip
        );
    }
}

#[test]
fn refusals_are_clear() {
    let e = ValgrindSource::record(
        "no-such-program-pt-sim",
        Vec::<String>::new(),
        ValgrindOptions::default(),
    )
    .err();
    assert!(matches!(e, Some(ExecError::CommandNotFound(_))));
    let opts = ValgrindOptions {
        valgrind: "no-such-valgrind-pt-sim".into(),
        ..ValgrindOptions::default()
    };
    let e = ValgrindSource::record(tiny(), ["x"], opts).err();
    assert!(matches!(e, Some(ExecError::CommandNotFound(c)) if c == "no-such-valgrind-pt-sim"));
}

/// A script starts in its interpreter's mode (as the kernel runs it); a file that is
/// neither ELF nor a script is refused as the kernel would refuse it.
#[test]
fn scripts_run_under_their_interpreter() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let script = dir.join("pt-sim-vg-script.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 3\n").unwrap();
    let junk = dir.join("pt-sim-vg-junk");
    std::fs::write(&junk, "not a program\n").unwrap();
    for p in [&script, &junk] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut v = ValgrindSource::record(&script, Vec::<String>::new(), valgrind()).unwrap();
    let items = collect(&mut v).unwrap();
    check_continuity(&items).unwrap();
    assert!(insns(&items).len() > 10_000);
    assert_eq!(
        items.last(),
        Some(&ExecItem::Event(Event::Exit(ExitKind::Exited(3))))
    );
    let e = ValgrindSource::record(&junk, Vec::<String>::new(), valgrind()).err();
    assert!(
        matches!(&e, Some(ExecError::ExecFailed { source, .. }) if source.raw_os_error() == Some(libc::ENOEXEC)),
        "{e:?}"
    );
}
