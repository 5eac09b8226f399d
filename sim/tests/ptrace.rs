//! Traces real programs: /bin/true and small programs compiled here with cc.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use pt_sim::exec::insn::decode_at;
use pt_sim::exec::log::{LogReader, LogWriter};
use pt_sim::exec::ptrace::{TraceOptions, Tracer};
use pt_sim::exec::{
    check_continuity, collect, BranchClass, Event, ExecError, ExecItem, ExecMode, ExecutionSource,
    ExitKind, Retired, StopReason,
};

fn build(name: &str, extra: &[&str]) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}.c"));
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("pt-sim-{name}"));
    let flags: Vec<&str> = pt_testkit::NOLIBC.iter().chain(extra).copied().collect();
    pt_testkit::compile_c(src, out, &flags, &[])
}

fn tiny() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| build("tiny", &[]))
}

struct Run {
    items: Vec<ExecItem>,
    log: Vec<u8>,
}

/// Traces, writing the log on the fly (as a recorder would).
fn trace(path: &PathBuf, args: &[&str], opts: TraceOptions) -> Run {
    let mut t = Tracer::spawn(path, args, opts).expect("spawn");
    let mut w = LogWriter::new(Vec::new()).unwrap();
    let mut items = Vec::new();
    while let Some(item) = t.next_item().expect("trace") {
        w.write_item(&item, t.memory()).expect("log");
        items.push(item);
    }
    Run {
        items,
        log: w.finish().unwrap(),
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

fn events(items: &[ExecItem]) -> Vec<&Event> {
    items
        .iter()
        .filter_map(|i| match i {
            ExecItem::Event(e) => Some(e),
            _ => None,
        })
        .collect()
}

fn replays_exactly(run: &Run) {
    let mut r = LogReader::new(&run.log[..]).unwrap();
    let back = collect(&mut r).unwrap();
    assert!(!r.is_truncated());
    assert_eq!(back.len(), run.items.len());
    assert!(back == run.items, "replay differs from the recording");
}

/// Every retired instruction lies in an executable mapping of its time.
fn in_executable_mappings(items: &[ExecItem]) {
    let mut maps: &[pt_sim::exec::Mapping] = &[];
    for item in items {
        match item {
            ExecItem::Event(Event::Mappings(m)) => maps = m,
            ExecItem::Insn(r) => assert!(
                maps.iter()
                    .any(|m| m.perms.exec && (m.start..m.end).contains(&r.ip)),
                "{:#x} outside executable mappings",
                r.ip
            ),
            _ => {}
        }
    }
}

fn count(items: &[Retired], class: BranchClass) -> usize {
    items.iter().filter(|r| r.class == class).count()
}

#[test]
fn tiny_program_is_deterministic_consistent_and_replays() {
    let a = trace(tiny(), &["x"], TraceOptions::default());
    let b = trace(tiny(), &["x"], TraceOptions::default());
    let ia = insns(&a.items);
    assert!((500..5000).contains(&ia.len()), "{} instructions", ia.len());
    assert_eq!(ia, insns(&b.items), "two runs differ");
    check_continuity(&a.items).unwrap();
    in_executable_mappings(&a.items);
    replays_exactly(&a);

    // start_c is called and never returns; f and g return to their callers.
    let calls = count(&ia, BranchClass::DirectCall) + count(&ia, BranchClass::IndirectCall);
    assert_eq!(count(&ia, BranchClass::Return), calls - 1);
    // 17 of the 50 iterations call f directly; the others call g through fp.
    assert_eq!(count(&ia, BranchClass::IndirectCall), 33);
    assert!(ia.iter().all(|r| r.mode == ExecMode::Bit64));
    let ev = events(&a.items);
    assert!(matches!(ev[0], Event::Exec { path, .. } if path.ends_with("pt-sim-tiny")));
    assert!(
        matches!(ev[1], Event::Mappings(m) if m.iter().any(|m| m.perms.exec && m.path.ends_with("pt-sim-tiny")))
    );
    assert_eq!(ev.last(), Some(&&Event::Exit(ExitKind::Exited(13))));
    // exit_group is the last instruction.
    let last = ia.last().unwrap();
    assert_eq!(last.class, BranchClass::KernelEntry);
    assert!(matches!(ev[ev.len() - 2], Event::SyscallEnter { nr: 231, args } if args[0] == 13));
}

#[test]
fn system_call_events() {
    let run = trace(tiny(), &["w"], TraceOptions::default());
    check_continuity(&run.items).unwrap();
    let pos = run
        .items
        .iter()
        .position(|i| matches!(i, ExecItem::Event(Event::SyscallEnter { nr: 1, .. })))
        .expect("write syscall");
    let ExecItem::Insn(sc) = run.items[pos - 1] else {
        panic!("no instruction before the syscall event")
    };
    assert_eq!(sc.class, BranchClass::KernelEntry);
    assert_eq!(sc.len, 2);
    assert_eq!(sc.next_ip, sc.fall_through());
    assert!(
        matches!(&run.items[pos], ExecItem::Event(Event::SyscallEnter { args, .. }) if args[0] == 1 && args[2] == 3)
    );
    assert_eq!(
        run.items[pos + 1],
        ExecItem::Event(Event::SyscallExit { nr: 1, ret: 3 })
    );
    assert!(matches!(run.items[pos + 2], ExecItem::Insn(r) if r.ip == sc.next_ip));
    replays_exactly(&run);
}

#[test]
fn signal_handler_is_an_async_branch() {
    let run = trace(tiny(), &["s"], TraceOptions::default());
    check_continuity(&run.items).unwrap();
    let sigs: Vec<usize> = run
        .items
        .iter()
        .enumerate()
        .filter(|(_, i)| matches!(i, ExecItem::Event(Event::Signal { .. })))
        .map(|(n, _)| n)
        .collect();
    assert_eq!(sigs.len(), 2);
    for &n in &sigs {
        let ExecItem::Event(Event::Signal {
            signo,
            from_ip,
            handler: Some(h),
        }) = run.items[n]
        else {
            panic!("signal without handler")
        };
        assert_eq!(signo, 10);
        // Delivered on return from kill(): resumes after the SYSCALL.
        let before = run.items[..n].iter().rev().find_map(|i| match i {
            ExecItem::Insn(r) => Some(*r),
            _ => None,
        });
        assert_eq!(before.map(|r| r.fall_through()), Some(from_ip));
        assert!(matches!(run.items[n + 1], ExecItem::Insn(r) if r.ip == h));
        // The handler returns through rt_sigreturn to the interrupted context.
        let sigreturn = run.items[n..]
            .iter()
            .position(|i| matches!(i, ExecItem::Event(Event::SyscallEnter { nr: 15, .. })))
            .unwrap();
        let ExecItem::Insn(r) = run.items[n + sigreturn - 1] else {
            panic!()
        };
        assert_eq!(r.next_ip, from_ip);
    }
    assert_eq!(
        events(&run.items).last(),
        Some(&&Event::Exit(ExitKind::Exited(15)))
    );
    replays_exactly(&run);
}

#[test]
fn ignored_signal_changes_no_flow() {
    let run = trace(tiny(), &["i"], TraceOptions::default());
    check_continuity(&run.items).unwrap();
    let n = events(&run.items)
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Signal {
                    signo: 10,
                    handler: None,
                    ..
                }
            )
        })
        .count();
    assert_eq!(n, 2);
    assert_eq!(
        events(&run.items).last(),
        Some(&&Event::Exit(ExitKind::Exited(13)))
    );
}

#[test]
fn crash_records_the_signal_and_ends() {
    let run = trace(tiny(), &["c"], TraceOptions::default());
    check_continuity(&run.items).unwrap();
    let ev = events(&run.items);
    assert_eq!(ev[ev.len() - 1], &Event::Exit(ExitKind::Killed(11)));
    let Event::Signal {
        signo: 11,
        from_ip,
        handler: None,
    } = ev[ev.len() - 2]
    else {
        panic!("no SIGSEGV event: {:?}", ev[ev.len() - 2])
    };
    // The faulting store did not retire: the last instruction led to it.
    let last = insns(&run.items).last().copied().unwrap();
    assert_eq!(last.next_ip, *from_ip);
    replays_exactly(&run);
}

#[test]
fn rep_string_retires_once() {
    let plain = insns(&trace(tiny(), &["x"], TraceOptions::default()).items);
    let mut t = Tracer::spawn(tiny(), ["r"], TraceOptions::default()).unwrap();
    let items = collect(&mut t).unwrap();
    let stats = t.stats();
    let rep: Vec<Retired> = insns(&items)
        .into_iter()
        .filter(|r| decode_at(t.memory(), r.ip, r.mode).unwrap().rep_string)
        .collect();
    assert_eq!(rep.len(), 1, "rep movsb retires once");
    // 64 iterations, each a single-step stop.
    assert!(stats.stops >= stats.retired + 63, "{stats:?}");
    assert!(insns(&items).len() > plain.len());
    check_continuity(&items).unwrap();
}

#[test]
fn mapping_changes_are_side_band() {
    let run = trace(tiny(), &["m"], TraceOptions::default());
    let ev = events(&run.items);
    let maps: Vec<usize> = ev
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, Event::Mappings(_)))
        .map(|(i, _)| i)
        .collect();
    // Initial map, then after mmap, mprotect and munmap.
    assert_eq!(maps.len(), 4, "{ev:?}");
    for &i in &maps[1..] {
        assert!(matches!(ev[i - 1], Event::SyscallExit { .. }));
    }
    let Event::SyscallExit { ret: addr, .. } = ev[maps[1] - 1] else {
        panic!()
    };
    let Event::Mappings(after_mmap) = ev[maps[1]] else {
        panic!()
    };
    assert!(after_mmap
        .iter()
        .any(|m| m.start == *addr as u64 && m.end - m.start == 8192 && m.perms.write));
    let Event::Mappings(after_unmap) = ev[maps[3]] else {
        panic!()
    };
    assert!(!after_unmap.iter().any(|m| m.start == *addr as u64));
    replays_exactly(&run);
}

#[test]
fn exec_starts_a_new_image() {
    let run = trace(tiny(), &["e"], TraceOptions::default());
    check_continuity(&run.items).unwrap();
    let ia = insns(&run.items);
    let pos = run
        .items
        .iter()
        .position(|i| matches!(i, ExecItem::Event(Event::SyscallEnter { nr: 59, .. })))
        .expect("execve");
    assert!(
        matches!(&run.items[pos + 1], ExecItem::Event(Event::Exec { path, .. }) if path.ends_with("pt-sim-tiny"))
    );
    assert_eq!(
        run.items[pos + 2],
        ExecItem::Event(Event::SyscallExit { nr: 59, ret: 0 })
    );
    // The new image is the same program: it starts at the same entry point.
    let ExecItem::Insn(execve) = run.items[pos - 1] else {
        panic!()
    };
    assert_eq!(execve.next_ip, ia[0].ip);
    let next = run.items[pos..].iter().find_map(|i| match i {
        ExecItem::Insn(r) => Some(*r),
        _ => None,
    });
    assert_eq!(next.map(|r| r.ip), Some(ia[0].ip));
    // And then runs the "w" path.
    assert!(run.items[pos..]
        .iter()
        .any(|i| matches!(i, ExecItem::Event(Event::SyscallExit { nr: 1, ret: 3 }))));
    in_executable_mappings(&run.items);
    replays_exactly(&run);
}

#[test]
fn compat_mode_program() {
    let path = build("tiny32", &["-m32"]);
    let run = trace(&path, &[], TraceOptions::default());
    check_continuity(&run.items).unwrap();
    let ia = insns(&run.items);
    assert!(ia.iter().all(|r| r.mode == ExecMode::Bit32));
    assert!(events(&run.items).contains(&&Event::SyscallExit { nr: 4, ret: 3 }));
    // sum of 3i+1 for i < 20 = 590; 590 & 0x7f = 78
    assert_eq!(
        events(&run.items).last(),
        Some(&&Event::Exit(ExitKind::Exited(78)))
    );
    replays_exactly(&run);
}

#[test]
fn step_limit_and_truncated_log() {
    let opts = TraceOptions {
        step_limit: Some(300),
        ..TraceOptions::default()
    };
    let run = trace(tiny(), &["l"], opts);
    assert_eq!(insns(&run.items).len(), 300);
    assert_eq!(
        run.items.last(),
        Some(&ExecItem::Event(Event::Stopped(StopReason::StepLimit)))
    );
    replays_exactly(&run);
    // A log cut anywhere replays a prefix of the recording, then says where it ends.
    for cut in (16..run.log.len()).step_by(97) {
        let mut r = LogReader::new(&run.log[..cut]).unwrap();
        let mut back = Vec::new();
        let err = loop {
            match r.next_item() {
                Ok(Some(i)) => back.push(i),
                Ok(None) => panic!("cut at {cut}: no error"),
                Err(e) => break e,
            }
        };
        assert_eq!(&run.items[..back.len()], &back[..]);
        assert!(
            matches!(err, ExecError::TruncatedLog { len, .. } if len == cut as u64),
            "{err:?}"
        );
    }
}

#[test]
fn stop_flag_interrupts_an_endless_program() {
    let flag = Arc::new(AtomicBool::new(false));
    let opts = TraceOptions {
        stop_flag: Some(flag.clone()),
        ..TraceOptions::default()
    };
    let setter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        flag.store(true, Ordering::Relaxed);
    });
    let run = trace(tiny(), &["l"], opts);
    setter.join().unwrap();
    assert_eq!(
        run.items.last(),
        Some(&ExecItem::Event(Event::Stopped(StopReason::Interrupted)))
    );
    assert!(insns(&run.items).len() > 100);
    replays_exactly(&run);
}

#[test]
fn missing_or_bad_commands_are_clear_errors() {
    let e = Tracer::spawn(
        "no-such-command-pt-sim",
        Vec::<String>::new(),
        TraceOptions::default(),
    )
    .err();
    assert!(matches!(e, Some(ExecError::CommandNotFound(c)) if c == "no-such-command-pt-sim"));
    // An executable file that is not a program: execve fails in the child.
    let bad = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pt-sim-not-a-program");
    std::fs::write(&bad, [0u8, 1, 2, 3]).unwrap();
    std::fs::set_permissions(&bad, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let e = Tracer::spawn(&bad, Vec::<String>::new(), TraceOptions::default()).err();
    assert!(matches!(e, Some(ExecError::ExecFailed { .. })), "{e:?}");
}

/// The real thing: a dynamically linked system binary (about 110k instructions, ~8 s).
#[test]
fn bin_true() {
    let run = trace(&PathBuf::from("/bin/true"), &[], TraceOptions::default());
    let ia = insns(&run.items);
    assert!(
        (20_000..2_000_000).contains(&ia.len()),
        "{} instructions",
        ia.len()
    );
    check_continuity(&run.items).unwrap();
    assert_eq!(
        events(&run.items).last(),
        Some(&&Event::Exit(ExitKind::Exited(0)))
    );
    // The dynamic loader maps libc: more than one executable file mapping.
    let maps = events(&run.items)
        .into_iter()
        .rev()
        .find_map(|e| match e {
            Event::Mappings(m) => Some(m),
            _ => None,
        })
        .unwrap();
    let exec_files = maps
        .iter()
        .filter(|m| m.perms.exec && m.path.starts_with('/'))
        .count();
    assert!(exec_files >= 3, "{maps:?}");
    in_executable_mappings(&run.items);
    replays_exactly(&run);
}

#[test]
fn signal_interrupting_a_blocking_call() {
    let run = trace(tiny(), &["p"], TraceOptions::default());
    check_continuity(&run.items).unwrap();
    let pause = run
        .items
        .iter()
        .position(|i| matches!(i, ExecItem::Event(Event::SyscallEnter { nr: 34, .. })))
        .expect("pause");
    let ExecItem::Insn(sc) = run.items[pause - 1] else {
        panic!()
    };
    let ExecItem::Event(Event::SyscallExit { nr: 34, .. }) = run.items[pause + 1] else {
        panic!()
    };
    let ExecItem::Event(Event::Signal {
        signo: 14,
        from_ip,
        handler: Some(_),
    }) = run.items[pause + 2]
    else {
        panic!("{:?}", run.items[pause + 2])
    };
    assert_eq!(from_ip, sc.fall_through());
    // The program saw pause() fail with EINTR and the handler run once.
    assert_eq!(
        events(&run.items).last(),
        Some(&&Event::Exit(ExitKind::Exited(15)))
    );
    replays_exactly(&run);
}

#[test]
fn program_sending_itself_sigtrap() {
    let run = trace(tiny(), &["t"], TraceOptions::default());
    check_continuity(&run.items).unwrap();
    // The first SIGTRAP reaches the program's handler, not the tracer's step
    // logic. (Single-stepping the handler makes the kernel reset the blocked
    // SIGTRAP to SIG_DFL, so the second one kills the program: a limit of
    // ptrace, recorded as it happened.)
    let ev = events(&run.items);
    let first = ev.iter().find(|e| matches!(e, Event::Signal { .. }));
    assert!(
        matches!(
            first,
            Some(Event::Signal {
                signo: 5,
                handler: Some(_),
                ..
            })
        ),
        "{first:?}"
    );
    // No phantom instruction for the stop that delivered nothing.
    assert!(insns(&run.items).iter().all(|r| r.next_ip != r.ip));
    replays_exactly(&run);
}

#[test]
fn breakpoint_instruction_raises_its_sigtrap() {
    let run = trace(tiny(), &["b"], TraceOptions::default());
    check_continuity(&run.items).unwrap();
    let ia = insns(&run.items);
    let int3 = ia.last().copied().unwrap();
    assert_eq!(int3.class, BranchClass::KernelEntry);
    assert_eq!(int3.len, 1);
    let ev = events(&run.items);
    assert_eq!(
        &ev[ev.len() - 2..],
        &[
            &Event::Signal {
                signo: 5,
                from_ip: int3.fall_through(),
                handler: None
            },
            &Event::Exit(ExitKind::Killed(5))
        ]
    );
}
