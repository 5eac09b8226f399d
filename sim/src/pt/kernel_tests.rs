//! Kernel-mode tracing: a little scripted "OS" (two user processes, a system
//! call path that switches CR3, interrupt and exception handlers) traced in
//! several configurations. Each trace is checked packet by packet against
//! the SDM's rules and decoded with pt-decoder's instruction flow decoder;
//! the decoded instructions must be exactly the script's ground truth
//! restricted to what the configuration traces ([`TracedFilter`]).

use super::*;
use crate::exec::script::{Directive, Script};
use crate::exec::{check_continuity, collect, ExecutionSource};
use crate::traced::TracedFilter;
use pt_decoder::event::EventKind;
use pt_decoder::image::Image;
use pt_decoder::{Config, Decoder, Granularity, Item, PacketDecoder};
use pt_hal::config::AddrRange;

/// Kernel code base (the kernel half of the address space).
const K: u64 = 0xffff_ffff_8100_0000;
/// Process A's code.
const A: u64 = 0x40_1000;
/// Process B's code.
const B: u64 = 0x50_1000;
const PID_A: u32 = 1;
const PID_B: u32 = 2;

fn cr3_a() -> u64 {
    cr3_of_pid(PID_A)
}

fn cr3_b() -> u64 {
    cr3_of_pid(PID_B)
}

/// Process A makes a system call that switches to process B (MOV CR3) and
/// returns there with SYSRETQ; a timer interrupt in B switches back to A
/// (IRETQ to A's system call return). A calls again (no switch this time),
/// raises INT 0x80, and takes a page fault whose handler returns to the
/// faulting instruction. The execution ends at A's INT3 (no directive left).
fn little_os() -> Script {
    let a = [
        0xb9, 0x02, 0, 0, 0, // A+0x00: mov ecx, 2
        0xe8, 0x16, 0, 0, 0, // A+0x05: call A+0x20
        0xff, 0xc9, // A+0x0a: dec ecx
        0x75, 0xf7, // A+0x0c: jnz A+0x05
        0x0f, 0x05, // A+0x0e: syscall
        0x90, // A+0x10: nop
        0x0f, 0x05, // A+0x11: syscall
        0x90, // A+0x13: nop
        0x90, // A+0x14: nop
        0xcd, 0x80, // A+0x15: int 0x80
        0x90, // A+0x17: nop
        0x90, // A+0x18: nop (faults once)
        0xcc, // A+0x19: int3
    ];
    let b = [
        0x90, // B+0x00: nop
        0x90, // B+0x01: nop (interrupted)
        0xeb, 0xfc, // B+0x02: jmp B
    ];
    let syscall_entry = [
        0xe8, 0x3b, 0, 0, 0, // K+0x00: call K+0x40
        0x85, 0xc0, // K+0x05: test eax, eax
        0x74, 0x07, // K+0x07: jz K+0x10
        0x0f, 0x22, 0xd8, // K+0x09: mov cr3, rax
        // A branch between MOV CR3 and SYSRETQ: without one, a TIP.PGD() of
        // the SYSRETQ would directly follow the PIP, and decoders (libipt's
        // rule, ours too) bind it to the MOV CR3 instead.
        0x85, 0xc0, // K+0x0c: test eax, eax
        0x75, 0x00, // K+0x0e: jnz K+0x10
        0x48, 0x0f, 0x07, // K+0x10: sysretq
    ];
    Script::new(A, ExecMode::Bit64)
        .kernel_from(K)
        .code(A, &a)
        .code(A + 0x20, &[0xc3]) // ret
        .code(B, &b)
        .code(K, &syscall_entry)
        .code(K + 0x40, &[0xc3]) // ret
        // Interrupt handler: nop; mov cr3, rax; test eax, eax; jnz +0; iretq.
        .code(
            K + 0x80,
            &[0x90, 0x0f, 0x22, 0xd8, 0x85, 0xc0, 0x75, 0x00, 0x48, 0xcf],
        )
        // Page fault handler: iretq.
        .code(K + 0xc0, &[0x48, 0xcf])
        .directives([
            Directive::Event(Event::Exec {
                pid: PID_A,
                path: "/a".into(),
            }),
            Directive::Taken,
            Directive::NotTaken,
            Directive::Target(K), // syscall
            Directive::NotTaken,  // jz: switch
            Directive::Cr3(cr3_b()),
            Directive::NotTaken,
            Directive::Target(B), // sysretq
            Directive::IntoKernel {
                at: B + 1,
                vector: 32,
                handler: K + 0x80,
            },
            Directive::Cr3(cr3_a()),
            Directive::NotTaken,
            Directive::Target(A + 0x10), // iretq
            Directive::Target(K),        // syscall
            Directive::Taken,            // jz: no switch
            Directive::Target(A + 0x13), // sysretq
            Directive::Target(K + 0x80), // int 0x80
            Directive::Cr3(cr3_a()),
            Directive::NotTaken,
            Directive::Target(A + 0x17), // iretq
            Directive::IntoKernel {
                at: A + 0x18,
                vector: 14,
                handler: K + 0xc0,
            },
            Directive::Target(A + 0x18), // iretq: the faulting nop again
        ])
}

struct Run {
    bytes: Vec<u8>,
    items: Vec<ExecItem>,
    mem: CodeMemory,
    stats: PtStats,
}

/// Runs the script through fresh logic: the events before the first
/// instruction set the process state, then tracing is enabled (in the
/// kernel, as by perf) and stays on to the end.
fn run(script: Script, cfg: TraceConfig) -> Run {
    let mut s = script;
    assert!(s.shows_kernel());
    let items = collect(&mut s).unwrap();
    check_continuity(&items).unwrap();
    let mem = s.memory().clone();
    let mut l = PtLogic::new(cfg, SimParams::default()).unwrap();
    let first = items
        .iter()
        .position(|i| matches!(i, ExecItem::Insn(_)))
        .unwrap();
    for it in &items[..first] {
        l.item(it, &mem);
    }
    l.enable();
    for it in &items[first..] {
        l.item(it, &mem);
    }
    l.finish();
    let mut bytes = Vec::new();
    l.drain_into(&mut bytes);
    Run {
        bytes,
        items,
        mem,
        stats: l.stats(),
    }
}

/// The packets that matter here, one short string each (timing packets left out).
fn flow(bytes: &[u8]) -> Vec<String> {
    let mut d = PacketDecoder::new(bytes, &Config::default());
    d.sync_forward().unwrap();
    let mut last = LastIp::new();
    let mut out = Vec::new();
    for r in d {
        let (_, p) = r.unwrap();
        let s = match p {
            Packet::Psb => {
                last.reset();
                "psb".to_string()
            }
            Packet::Psbend => "psbend".into(),
            Packet::Pip { cr3, nr } => {
                assert!(!nr);
                format!("pip {cr3:x}")
            }
            Packet::ModeExec(m) => format!("mode {:?}", m.mode()),
            Packet::Tnt8(t) | Packet::Tnt64(t) => {
                let bits: String = t.iter().map(|b| if b { '!' } else { '.' }).collect();
                format!("tnt {bits}")
            }
            Packet::Ip(kind, payload) => {
                let name = match kind {
                    IpPacketKind::Tip => "tip",
                    IpPacketKind::TipPge => "pge",
                    IpPacketKind::TipPgd => "pgd",
                    IpPacketKind::Fup => "fup",
                };
                match last.update(payload) {
                    Some(ip) => format!("{name} {ip:x}"),
                    None => name.to_string(),
                }
            }
            _ => continue,
        };
        out.push(s);
    }
    out
}

fn k(off: u64) -> String {
    format!("{:x}", K + off)
}

/// Expected packets, written with `K+off` for kernel addresses.
fn want(spec: &[&str]) -> Vec<String> {
    spec.iter()
        .map(|s| {
            let mut parts = s.splitn(2, ' ');
            let name = parts.next().unwrap();
            match parts.next() {
                Some(arg) => match arg.strip_prefix("K+") {
                    Some(off) => format!("{name} {}", k(u64::from_str_radix(off, 16).unwrap())),
                    None => format!("{name} {arg}"),
                },
                None => name.to_string(),
            }
        })
        .collect()
}

/// Decodes with pt-decoder's instruction flow decoder over the script's
/// code; returns the instructions and the non-status events, in order.
fn decode(run: &Run) -> (Vec<u64>, Vec<EventKind>) {
    let mut image = Image::new();
    for base in run.mem.page_bases() {
        image
            .add_bytes(base, run.mem.page(base).unwrap().to_vec(), "code")
            .unwrap();
    }
    let config = Config::default();
    let dec = Decoder::builder(&run.bytes, &image)
        .config(&config)
        .granularity(Granularity::Instructions)
        .build();
    let mut ips = Vec::new();
    let mut events = Vec::new();
    for item in dec {
        match item {
            Item::Insn(i) => ips.push(i.insn.ip),
            Item::Event(e) if !e.event.status_update => events.push(e.event.kind),
            Item::Error(e) => panic!("{e} after {ips:x?}"),
            _ => {}
        }
    }
    (ips, events)
}

/// The script's instructions the configuration traces.
fn truth(run: &Run, cfg: &TraceConfig) -> Vec<u64> {
    let mut f = TracedFilter::new(cfg);
    run.items
        .iter()
        .filter_map(|i| f.shown(i, &run.mem))
        .collect()
}

/// Decodes and compares with the ground truth; returns the decoder's events.
fn check_decodes(run: &Run, cfg: &TraceConfig) -> Vec<EventKind> {
    let (ips, events) = decode(run);
    let expected = truth(run, cfg);
    assert!(!expected.is_empty());
    assert_eq!(ips, expected, "decoded vs recorded (hex)");
    // PacketEn per instruction, as the logic counted it.
    let mut f = TracedFilter::new(cfg);
    let traced = run.items.iter().filter(|i| f.traced(i).is_some()).count();
    assert_eq!(run.stats.traced, traced as u64);
    events
}

fn pips(events: &[EventKind]) -> Vec<u64> {
    events
        .iter()
        .filter_map(|e| match e {
            EventKind::Paging { cr3, .. } | EventKind::AsyncPaging { cr3, .. } => Some(*cr3),
            _ => None,
        })
        .collect()
}

fn cfg(os: bool, user: bool) -> TraceConfig {
    TraceConfig {
        os,
        user,
        ..TraceConfig::default()
    }
}

#[test]
fn sysret_to_compatibility_mode_reports_the_mode() {
    // Hand-made items: a far CALL through a call gate from 32-bit user code
    // (compatibility mode) into the 64-bit kernel, SYSRETL back; MODE.Exec
    // goes with the TIP or TIP.PGE of a transfer to a mode other than the
    // last one sent, never with a TIP.PGD.
    let mem = CodeMemory::new();
    let r = |ip, next_ip, class, mode, kernel| {
        ExecItem::Insn(Retired {
            ip,
            next_ip,
            len: 2,
            class,
            mode,
            kernel,
        })
    };
    let items = [
        r(0x1000, K, BranchClass::FarBranch, ExecMode::Bit32, false),
        r(K, K + 2, BranchClass::Other, ExecMode::Bit64, true),
        r(K + 2, 0x1002, BranchClass::FarBranch, ExecMode::Bit64, true),
        r(0x1002, 0x1004, BranchClass::Other, ExecMode::Bit32, false),
    ];
    let m32 = "mode Bit32";
    let m64 = "mode Bit64";
    for (os, user, expect) in [
        (
            true,
            true,
            vec![m32, "pge 1000", m64, "tip K+0", m32, "tip 1002"],
        ),
        (true, false, vec![m64, "pge K+0", "pgd"]),
        (false, true, vec![m32, "pge 1000", "pgd", "pge 1002"]),
    ] {
        let mut l = PtLogic::new(cfg(os, user), SimParams::default()).unwrap();
        l.enable();
        for it in &items {
            l.item(it, &mem);
        }
        let mut bytes = Vec::new();
        l.drain_into(&mut bytes);
        let f = flow(&bytes);
        let start = f.iter().position(|p| p == "psbend").unwrap() + 1;
        assert_eq!(f[start..], want(&expect)[..], "os={os} user={user}");
        assert_eq!(l.stats().unseen_kernel_entries, 0);
    }
}

#[test]
fn unseen_kernel_entries_are_counted() {
    // A user-mode-only execution: the kernel runs unseen at each SYSCALL.
    let s = Script::new(0x1000, ExecMode::Bit64)
        .code(0x1000, &[0x0f, 0x05, 0x0f, 0x05])
        .directives([
            Directive::Syscall {
                nr: 0,
                ret: 0,
                resume: None,
            },
            Directive::ExitGroup(0),
        ]);
    let mut s = s;
    assert!(!s.shows_kernel());
    let items = collect(&mut s).unwrap();
    let mut l = PtLogic::new(cfg(false, true), SimParams::default()).unwrap();
    l.enable();
    for it in &items {
        l.item(it, s.memory());
    }
    l.finish();
    assert_eq!(l.stats().unseen_kernel_entries, 2);
    // The little OS shows its kernel: none unseen.
    let r = run(little_os(), cfg(true, true));
    assert_eq!(r.stats.unseen_kernel_entries, 0);
}

#[test]
fn interrupt_before_the_first_kernel_instruction() {
    // SYSCALL, then an interrupt before the entry point's first instruction.
    let s = Script::new(A, ExecMode::Bit64)
        .kernel_from(K)
        .code(A, &[0x0f, 0x05, 0x90, 0xcc])
        .code(K, &[0x90, 0x48, 0x0f, 0x07]) // nop; sysretq
        .code(K + 0x80, &[0x48, 0xcf]) // iretq
        .directives([
            Directive::Event(Event::Exec {
                pid: PID_A,
                path: "/a".into(),
            }),
            Directive::Target(K),
            Directive::IntoKernel {
                at: K,
                vector: 32,
                handler: K + 0x80,
            },
            Directive::Target(K),
            Directive::Target(A + 2),
        ]);
    let c = cfg(true, true);
    let r = run(s, c);
    #[rustfmt::skip]
    let w = want(&[
        "psb", "pip 1000", "psbend",
        "mode Bit64", "pge 401000",
        "tip K+0", "fup K+0", "tip K+80", "tip K+0", "tip 401002",
        "fup 401003", "pgd",
    ]);
    assert_eq!(flow(&r.bytes), w);
    check_decodes(&r, &c);
    assert_eq!(r.stats.unseen_kernel_entries, 0);
}

#[test]
fn interrupt_before_a_far_transfer_target_runs() {
    // SYSRETQ to A+2, where an interrupt comes before the first instruction.
    let s = Script::new(A, ExecMode::Bit64)
        .kernel_from(K)
        .code(A, &[0x0f, 0x05, 0x90, 0xcc])
        .code(K, &[0x48, 0x0f, 0x07]) // sysretq
        .code(K + 0x80, &[0x48, 0xcf]) // iretq
        .directives([
            Directive::Event(Event::Exec {
                pid: PID_A,
                path: "/a".into(),
            }),
            Directive::Target(K),
            Directive::Target(A + 2),
            Directive::IntoKernel {
                at: A + 2,
                vector: 32,
                handler: K + 0x80,
            },
            Directive::Target(A + 2),
        ]);
    #[rustfmt::skip]
    let cases = [
        (true, true, vec![
            "mode Bit64", "pge 401000", "tip K+0",
            // The SYSRETQ's TIP, then the interrupt at its target.
            "tip 401002", "fup 401002", "tip K+80", "tip 401002",
            "fup 401003", "pgd",
        ]),
        // The SYSRETQ leaves ContextEn: TIP.PGD(), then TIP.PGE at the handler.
        (true, false, vec!["mode Bit64", "pge K+0", "pgd", "pge K+80", "pgd"]),
        (false, true, vec![
            "mode Bit64", "pge 401000", "pgd", "pge 401002",
            "fup 401003", "pgd",
        ]),
    ];
    for (os, user, expect) in cases {
        let c = cfg(os, user);
        let r = run(s.clone(), c);
        let f = flow(&r.bytes);
        let start = f.iter().position(|p| p == "psbend").unwrap() + 1;
        assert_eq!(f[start..], want(&expect)[..], "os={os} user={user}");
        check_decodes(&r, &c);
    }
}

#[test]
fn script_yields_kernel_code() {
    let mut s = little_os();
    let items = collect(&mut s).unwrap();
    let insns: Vec<&Retired> = items
        .iter()
        .filter_map(|i| match i {
            ExecItem::Insn(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(insns.len(), 42);
    assert!(insns.iter().all(|r| r.kernel == (r.ip >= K)));
    let syscall = insns[9];
    assert_eq!(
        (syscall.ip, syscall.next_ip, syscall.class),
        (A + 0xe, K, BranchClass::KernelEntry)
    );
    assert!(items.contains(&ExecItem::Event(Event::MovCr3 { cr3: cr3_b() })));
    assert!(items.contains(&ExecItem::Event(Event::Interrupt {
        vector: 32,
        from_ip: B + 1,
        from_kernel: false,
        handler: K + 0x80
    })));
    // The log keeps it all.
    let mut w = crate::exec::log::LogWriter::with_kernel(Vec::new(), true).unwrap();
    crate::exec::log::write_source(&mut little_os(), &mut w).unwrap();
    let bytes = w.finish().unwrap();
    let mut r = crate::exec::log::LogReader::new(bytes).unwrap();
    assert!(r.shows_kernel());
    assert_eq!(collect(&mut r).unwrap(), items);
}

#[test]
fn user_and_kernel() {
    let c = cfg(true, true);
    let r = run(little_os(), c);
    #[rustfmt::skip]
    let w = want(&[
        "psb", "pip 1000", "psbend",
        "mode Bit64", "pge 401000", "tnt !!!.",
        // SYSCALL: a far transfer that stays traced.
        "tip K+0",
        "tnt !.", "pip 2000",
        // SYSRETQ to process B.
        "tnt .", "tip 501000",
        // Timer interrupt: FUP(where B resumes), TIP(handler).
        "fup 501001", "tip K+80", "pip 1000",
        // IRETQ to A.
        "tnt .", "tip 401010",
        "tip K+0", "tnt !!", "tip 401013",
        // INT 0x80: FUP at the INT itself.
        "fup 401015", "tip K+80", "pip 1000", "tnt .", "tip 401017",
        // Page fault at A+0x18, its handler returns to it.
        "fup 401018", "tip K+c0", "tip 401018",
        // TraceEn 1→0.
        "fup 401019", "pgd",
    ]);
    assert_eq!(flow(&r.bytes), w);
    let events = check_decodes(&r, &c);
    assert_eq!(pips(&events), vec![cr3_b(), cr3_a(), cr3_a()]);
}

#[test]
fn kernel_only() {
    let c = cfg(true, false);
    let r = run(little_os(), c);
    #[rustfmt::skip]
    let w = want(&[
        "psb", "pip 1000", "psbend",
        // Entering the kernel: TIP.PGE(target); leaving it: TIP.PGD() without IP.
        "mode Bit64", "pge K+0", "tnt !.", "pip 2000", "tnt .", "pgd",
        // An interrupt from untraced user mode: TIP.PGE(handler), no FUP.
        "pge K+80", "pip 1000", "tnt .", "pgd",
        "pge K+0", "tnt !!", "pgd",
        "pge K+80", "pip 1000", "tnt .", "pgd",
        "pge K+c0", "pgd",
    ]);
    assert_eq!(flow(&r.bytes), w);
    let events = check_decodes(&r, &c);
    assert_eq!(pips(&events), vec![cr3_b(), cr3_a(), cr3_a()]);
}

#[test]
fn user_only_has_no_pip() {
    let c = cfg(false, true);
    let r = run(little_os(), c);
    #[rustfmt::skip]
    let w = want(&[
        "psb", "psbend",
        "mode Bit64", "pge 401000", "tnt !!!.",
        // SYSCALL leaves ContextEn: TIP.PGD() without IP.
        "pgd",
        "pge 501000",
        "fup 501001", "pgd",
        "pge 401010", "pgd",
        "pge 401013",
        "fup 401015", "pgd",
        "pge 401017",
        "fup 401018", "pgd",
        "pge 401018",
        "fup 401019", "pgd",
    ]);
    assert_eq!(flow(&r.bytes), w);
    let events = check_decodes(&r, &c);
    assert!(pips(&events).is_empty());
}

#[test]
fn cr3_filter_on_process_a() {
    let c = TraceConfig {
        cr3_filter: Some(cr3_a()),
        ..cfg(true, true)
    };
    let r = run(little_os(), c);
    #[rustfmt::skip]
    let w = want(&[
        "psb", "pip 1000", "psbend",
        "mode Bit64", "pge 401000", "tnt !!!.", "tip K+0", "tnt !.",
        // MOV CR3 to B clears ContextEn: TIP.PGD(), no PIP.
        "pgd",
        // MOV CR3 back to A in the handler: PIP, then TIP.PGE(NLIP) at the IRETQ.
        "pip 1000", "pge K+84",
        "tnt .", "tip 401010",
        "tip K+0", "tnt !!", "tip 401013",
        "fup 401015", "tip K+80", "pip 1000", "tnt .", "tip 401017",
        "fup 401018", "tip K+c0", "tip 401018",
        "fup 401019", "pgd",
    ]);
    assert_eq!(flow(&r.bytes), w);
    let events = check_decodes(&r, &c);
    assert_eq!(pips(&events), vec![cr3_a(), cr3_a()]);
}

#[test]
fn cr3_filter_on_process_b() {
    let c = TraceConfig {
        cr3_filter: Some(cr3_b()),
        ..cfg(true, true)
    };
    let r = run(little_os(), c);
    #[rustfmt::skip]
    let w = want(&[
        // Not in context at enable: no PIP in PSB+.
        "psb", "psbend",
        "pip 2000", "mode Bit64", "pge K+c",
        "tnt .", "tip 501000",
        "fup 501001", "tip K+80",
        "pgd",
    ]);
    assert_eq!(flow(&r.bytes), w);
    check_decodes(&r, &c);
}

#[test]
fn ip_filter_in_the_kernel() {
    let mut c = cfg(true, true);
    c.ranges[0] = AddrRange {
        cfg: AddrCfg::Filter,
        start: K,
        end: K + 0x3f,
    };
    let r = run(little_os(), c);
    #[rustfmt::skip]
    let w = want(&[
        // PIP needs ContextEn, not FilterEn.
        "psb", "pip 1000", "psbend",
        "mode Bit64", "pge K+0",
        // The call leaves the range, its return comes back.
        "pgd K+40", "pge K+5", "tnt .", "pip 2000",
        // SYSRETQ leaves the range but not the context: TIP.PGD(target).
        "tnt .", "pgd 501000",
        // MOV CR3 outside the range: PIP all the same.
        "pip 1000",
        "pge K+0", "pgd K+40", "pge K+5", "tnt !", "pgd 401013",
        "pip 1000",
    ]);
    assert_eq!(flow(&r.bytes), w);
    check_decodes(&r, &c);
}

#[test]
fn disabled_features_produce_nothing_in_the_kernel() {
    // BranchEn = 0: no control flow; PIP still (it needs ContextEn and OS only).
    let c = TraceConfig {
        branch: false,
        ..cfg(true, true)
    };
    let r = run(little_os(), c);
    assert_eq!(
        flow(&r.bytes),
        want(&["psb", "pip 1000", "psbend", "pip 2000", "pip 1000", "pip 1000"])
    );
    // DisTNT: no TNT, PIPs and far transfers unchanged (such a trace cannot
    // be decoded through conditional branches).
    let c = TraceConfig {
        dis_tnt: true,
        ..cfg(true, false)
    };
    let r = run(little_os(), c);
    let f = flow(&r.bytes);
    assert!(!f.iter().any(|p| p.starts_with("tnt")));
    assert_eq!(f.iter().filter(|p| p.starts_with("pip")).count(), 4);
    assert_eq!(f.iter().filter(|p| p.starts_with("pge")).count(), 5);
    // No return compression: the kernel's RET gets a TIP.
    let c = TraceConfig {
        dis_retc: true,
        ..cfg(true, false)
    };
    let r = run(little_os(), c);
    let f = flow(&r.bytes);
    assert_eq!(f[4..7], want(&["pge K+0", "tip K+5", "tnt ."])[..]);
    check_decodes(&r, &c);
}

#[test]
fn psb_plus_holds_pip_while_in_context() {
    // A PSB+ every 2 KiB: the loop (jmp rax, a TIP each time) writes enough
    // for several. PIP is there when ContextEn and OS: in user mode too.
    for (os, user, at, pip) in [
        (true, false, K, true),
        (true, true, A, true),
        (false, true, A, false),
    ] {
        let s = Script::new(at, ExecMode::Bit64)
            .kernel_from(K)
            .code(at, &[0xff, 0xe0])
            .directives(
                std::iter::once(Directive::Event(Event::Exec {
                    pid: 3,
                    path: "/k".into(),
                }))
                .chain(std::iter::repeat_n(Directive::Target(at), 3000)),
            );
        let r = run(s, cfg(os, user));
        let f = flow(&r.bytes);
        let psbs = f.iter().filter(|p| *p == "psb").count();
        assert!(psbs >= 4, "{psbs}");
        let with_pip = f
            .windows(2)
            .filter(|w| w[0] == "psb" && w[1] == format!("pip {:x}", cr3_of_pid(3)))
            .count();
        assert_eq!(with_pip, if pip { psbs } else { 0 }, "os={os} user={user}");
        // Later PSB+ also say where tracing is: MODE.Exec and FUP.
        let last = f.iter().rposition(|p| p == "psb").unwrap();
        let skip = usize::from(pip);
        assert_eq!(
            f[last + 1 + skip..last + 4 + skip],
            [
                "mode Bit64".to_string(),
                format!("fup {at:x}"),
                "psbend".into()
            ]
        );
    }
}
