use super::*;
use crate::exec::script::{Directive, Script};
use crate::exec::{collect, ExecutionSource};
use pt_decoder::{Config, PacketDecoder};
use pt_encoder::packet::IpCompression as C;
use pt_hal::config::AddrRange;

/// 0x1000: mov ecx, 3; 0x1005: dec ecx; 0x1007: jnz 0x1005; 0x1009: call 0x1020;
/// 0x100e: jmp rax; 0x1020: ret; 0x1030: syscall.
fn program() -> Script {
    Script::new(0x1000, ExecMode::Bit64)
        .code(0x1000, &[0xb9, 3, 0, 0, 0, 0xff, 0xc9, 0x75, 0xfc])
        .code(0x1009, &[0xe8, 0x12, 0, 0, 0, 0xff, 0xe0])
        .code(0x1020, &[0xc3])
        .code(0x1030, &[0x0f, 0x05])
        .directives([
            Directive::Event(Event::Exec {
                pid: 7,
                path: "/x".into(),
            }),
            Directive::Taken,
            Directive::Taken,
            Directive::NotTaken,
            Directive::Target(0x1030),
            Directive::ExitGroup(0),
        ])
}

fn base_cfg() -> TraceConfig {
    TraceConfig {
        os: false,
        ..TraceConfig::default()
    }
}

/// Runs `script` through fresh logic (enabled before the first item) and
/// decodes the output; `hook` runs after each item.
fn run_with(
    script: Script,
    cfg: TraceConfig,
    params: SimParams,
    mut hook: impl FnMut(&mut PtLogic, &ExecItem),
) -> (Vec<Packet>, PtLogic) {
    let mut s = script;
    let items = collect(&mut s).unwrap();
    let mem = s.memory().clone();
    let mut l = PtLogic::new(cfg, params).unwrap();
    l.enable();
    for it in &items {
        l.item(it, &mem);
        hook(&mut l, it);
    }
    l.finish();
    let mut bytes = Vec::new();
    l.drain_into(&mut bytes);
    let mut d = PacketDecoder::new(&bytes, &Config::default());
    d.sync_forward().unwrap();
    let packets = d.map(|r| r.unwrap().1).collect();
    (packets, l)
}

fn run(script: Script, cfg: TraceConfig) -> Vec<Packet> {
    run_with(script, cfg, SimParams::default(), |_, _| {}).0
}

fn tnt(s: &str) -> Tnt {
    Tnt::from_results(s.chars().map(|c| c == '!')).unwrap()
}

fn head() -> Vec<Packet> {
    let c = Clock::new(ClockParams::default());
    vec![
        Packet::Psb,
        Packet::Tsc { tsc: c.tsc() },
        Packet::Cbr { ratio: 32 },
        Packet::Psbend,
    ]
}

fn mode64() -> Packet {
    Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64))
}

#[test]
fn packets_per_operation() {
    let mut want = head();
    want.extend([
        mode64(),
        Packet::tip_pge(C::Update16, 0x1000),
        // jnz taken, taken, not taken; the compressed ret.
        Packet::Tnt8(tnt("!!.!")),
        Packet::tip(C::Update16, 0x1030),
        // SYSCALL with OS = 0: ContextEn drops, no IP.
        Packet::Ip(IpPacketKind::TipPgd, IpPayload::SUPPRESSED),
    ]);
    assert_eq!(run(program(), base_cfg()), want);
}

#[test]
fn noretcomp_disables_return_compression() {
    let cfg = TraceConfig {
        dis_retc: true,
        ..base_cfg()
    };
    let p = run(program(), cfg);
    assert_eq!(
        &p[4..8],
        &[
            mode64(),
            Packet::tip_pge(C::Update16, 0x1000),
            Packet::Tnt8(tnt("!!.")),
            Packet::tip(C::Update16, 0x100e),
        ]
    );
}

#[test]
fn disabled_features_produce_nothing() {
    let p = run(
        program(),
        TraceConfig {
            dis_tnt: true,
            tsc: false,
            ..base_cfg()
        },
    );
    assert!(!p
        .iter()
        .any(|p| matches!(p, Packet::Tnt8(_) | Packet::Tnt64(_) | Packet::Tsc { .. })));
    assert!(p.contains(&Packet::tip(C::Update16, 0x100e)));
    let p = run(
        program(),
        TraceConfig {
            branch: false,
            ..base_cfg()
        },
    );
    assert_eq!(p, head());
    // CR3 filter: pid 7 matches, pid 8 does not.
    let on = run(
        program(),
        TraceConfig {
            cr3_filter: Some(cr3_of_pid(7)),
            ..base_cfg()
        },
    );
    assert!(on.len() > 4);
    let off = run(
        program(),
        TraceConfig {
            cr3_filter: Some(cr3_of_pid(8)),
            ..base_cfg()
        },
    );
    assert_eq!(off, head());
}

#[test]
fn ip_filter_enters_and_leaves() {
    // Only the ret at 0x1020 is inside: the call enters (TIP.PGE at the
    // target), the ret leaves (TIP.PGD with the target).
    let mut cfg = base_cfg();
    cfg.ranges[0] = AddrRange {
        cfg: AddrCfg::Filter,
        start: 0x1020,
        end: 0x1020,
    };
    let p = run(program(), cfg);
    assert_eq!(
        &p[4..],
        &[
            mode64(),
            Packet::tip_pge(C::Update16, 0x1020),
            Packet::tip_pgd(C::Update16, 0x100e),
        ]
    );
}

#[test]
fn trace_stop_range() {
    let mut cfg = base_cfg();
    cfg.ranges[1] = AddrRange {
        cfg: AddrCfg::TraceStop,
        start: 0x1020,
        end: 0x102f,
    };
    let (p, l) = run_with(program(), cfg, SimParams::default(), |_, _| {});
    assert_eq!(
        &p[4..],
        &[
            mode64(),
            Packet::tip_pge(C::Update16, 0x1000),
            Packet::Tnt8(tnt("!!.")),
            Packet::tip_pgd(C::Update16, 0x1020),
            Packet::Stop,
        ]
    );
    assert!(l.stopped() && !l.trigger_en());
}

#[test]
fn interrupts_and_int3() {
    // 0x1000: nop; 0x1001: int3; 0x1002: nop. A signal arrives before 0x1001
    // and runs a handler at 0x2000 (ret back is not modeled: the handler
    // jumps with an indirect jmp).
    let s = Script::new(0x1000, ExecMode::Bit64)
        .code(0x1000, &[0x90, 0xcc, 0x90, 0x0f, 0x05])
        .code(0x2000, &[0xff, 0xe0])
        .directives([
            Directive::Interrupt {
                at: 0x1001,
                signo: 10,
                handler: 0x2000,
            },
            Directive::Target(0x1001),
            Directive::Syscall {
                nr: 0,
                ret: 0,
                resume: None,
            },
            Directive::ExitGroup(0),
        ]);
    let p = run(s, base_cfg());
    let pgd = Packet::Ip(IpPacketKind::TipPgd, IpPayload::SUPPRESSED);
    assert_eq!(
        &p[4..],
        &[
            mode64(),
            Packet::tip_pge(C::Update16, 0x1000),
            // The signal: FUP at the interrupted instruction, then the handler.
            Packet::fup(C::Update16, 0x1001),
            pgd,
            Packet::tip_pge(C::Update16, 0x2000),
            Packet::tip(C::Update16, 0x1001),
            // INT3 is an exception-like entry: FUP at the INT3 itself.
            Packet::fup(C::Update16, 0x1001),
            pgd,
            Packet::tip_pge(C::Update16, 0x1002),
            pgd,
        ]
    );
}

#[test]
fn far_branch_mode_change_and_disable() {
    let mem = CodeMemory::new();
    let mut l = PtLogic::new(base_cfg(), SimParams::default()).unwrap();
    l.enable();
    let r = |ip, next_ip, class, mode| Retired {
        ip,
        next_ip,
        len: 2,
        class,
        mode,
        kernel: false,
    };
    l.retire(
        &r(0x1000, 0x2000, BranchClass::FarBranch, ExecMode::Bit64),
        &mem,
    );
    l.retire(
        &r(0x2000, 0x2002, BranchClass::Other, ExecMode::Bit32),
        &mem,
    );
    l.disable();
    let mut bytes = Vec::new();
    l.drain_into(&mut bytes);
    let mut d = PacketDecoder::new(&bytes, &Config::default());
    d.sync_forward().unwrap();
    let p: Vec<Packet> = d.map(|r| r.unwrap().1).collect();
    assert_eq!(
        &p[4..],
        &[
            mode64(),
            Packet::tip_pge(C::Update16, 0x1000),
            Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit32)),
            Packet::tip(C::Update16, 0x2000),
            // WRMSR TraceEn 1→0: FUP at the next instruction, TIP.PGD().
            Packet::fup(C::Update16, 0x2002),
            Packet::Ip(IpPacketKind::TipPgd, IpPayload::SUPPRESSED),
        ]
    );
}

/// 0x1000: jmp rax, looping `n` times through TIPs (3 bytes each).
fn tip_loop(n: usize) -> Script {
    Script::new(0x1000, ExecMode::Bit64)
        .code(0x1000, &[0xff, 0xe0])
        .directives(std::iter::repeat_n(Directive::Target(0x1000), n))
        .max_instructions(10_000_000)
}

#[test]
fn tsx_and_ptwrite() {
    let cfg = TraceConfig {
        ptwrite: true,
        fup_on_ptw: true,
        psb_freq: 0,
        ..base_cfg()
    };
    let mut i = 0;
    let (p, _) = run_with(tip_loop(1000), cfg, SimParams::default(), |l, _| {
        i += 1;
        match i {
            2 => l.tsx_begin(0x1000),
            3 => l.ptwrite(0x1000, 0xdead_beef_cafe, PtwSize::Eight),
            5 => l.tsx_commit(0x1000),
            10 => l.tsx_begin(0x1000),
            12 => l.tsx_abort(0x1000, 0x1000),
            20 => l.tsx_begin(0x1000),
            _ => {}
        }
    });
    let intx = Packet::ModeTsx(ModeTsx {
        intx: true,
        abrt: false,
    });
    let find = |want: &Packet| p.iter().position(|q| q == want).unwrap();
    let b = find(&intx);
    assert_eq!(p[b + 1], Packet::fup(C::Update16, 0x1000));
    let w = find(&Packet::Ptw {
        size: PtwSize::Eight,
        payload: 0xdead_beef_cafe,
        ip: true,
    });
    assert_eq!(p[w + 1], Packet::fup(C::Update16, 0x1000));
    let c = find(&Packet::ModeTsx(ModeTsx::default()));
    assert_eq!(p[c + 1], Packet::fup(C::Update16, 0x1000));
    let a = find(&Packet::ModeTsx(ModeTsx {
        intx: false,
        abrt: true,
    }));
    assert_eq!(p[a + 1], Packet::fup(C::Update16, 0x1000));
    assert_eq!(p[a + 2], Packet::tip(C::Update16, 0x1000));
    // Later PSB+ report the open transaction.
    let psb2 = p.iter().rposition(|q| *q == Packet::Psb).unwrap();
    assert!(psb2 > 0);
    let end = psb2 + p[psb2..].iter().position(|q| *q == Packet::Psbend).unwrap();
    assert!(p[psb2..end].contains(&intx));
    // No PTW without PTWEn.
    let (p, _) = run_with(tip_loop(10), base_cfg(), SimParams::default(), |l, _| {
        l.ptwrite(0x1000, 1, PtwSize::Four)
    });
    assert!(!p.iter().any(|q| matches!(q, Packet::Ptw { .. })));
}

#[test]
fn psb_plus_every_period_with_state() {
    let cfg = TraceConfig {
        psb_freq: 0,
        mtc: Some(3),
        ..base_cfg()
    };
    let (p, l) = run_with(tip_loop(3000), cfg, SimParams::default(), |_, _| {});
    assert!(l.stats().psbs >= 4, "{:?}", l.stats());
    // Each PSB+ after the first: TSC, TMA, CBR, MODE.Exec, FUP(current IP), PSBEND.
    let second = p.iter().skip(1).position(|q| *q == Packet::Psb).unwrap() + 1;
    assert!(matches!(p[second + 1], Packet::Tsc { .. }));
    assert!(matches!(p[second + 2], Packet::Tma { .. }));
    assert_eq!(p[second + 3], Packet::Cbr { ratio: 32 });
    assert_eq!(p[second + 4], mode64());
    // Not compressed: perf would read it against the IP before the PSB.
    assert_eq!(p[second + 5], Packet::fup(C::Sext48, 0x1000));
    assert_eq!(p[second + 6], Packet::Psbend);
}

#[test]
fn timing_packets_follow_the_clock() {
    let cfg = TraceConfig {
        mtc: Some(0),
        cyc: Some(0),
        ..base_cfg()
    };
    let params = SimParams {
        clock: ClockParams {
            cycles_per_insn: 100,
            ..ClockParams::default()
        },
        ..SimParams::default()
    };
    let (p, l) = run_with(tip_loop(500), cfg, params, |_, _| {});
    // 500 instructions × 100 cycles × 24/32 = 37500 TSC ticks = 375 CTC ticks: ~375 MTCs.
    let mtcs: Vec<u8> = p
        .iter()
        .filter_map(|q| match q {
            Packet::Mtc { ctc } => Some(*ctc),
            _ => None,
        })
        .collect();
    assert!((370..=380).contains(&mtcs.len()), "{}", mtcs.len());
    for w in mtcs.windows(2) {
        assert_eq!(w[1], w[0].wrapping_add(1));
    }
    // CYC packets add up to the cycles up to the last one.
    let cyc: u64 = p
        .iter()
        .filter_map(|q| match q {
            Packet::Cyc { value } => Some(*value),
            _ => None,
        })
        .sum();
    assert_eq!(cyc, 500 * 100);
    assert_eq!(l.clock().cycles(), 500 * 100);
    // TMA after TSC matches the clock at enable.
    let c = Clock::new(params.clock);
    let (ctc, fc) = c.tma();
    assert_eq!(p[2], Packet::Tma { ctc, fc });
    // The first MTC carries the CTC period after the TMA's.
    assert_eq!(mtcs[0], (c.ctc() + 1) as u8);
}

#[test]
fn long_tnt() {
    // 0x1000: jnz 0x1000 taken 100 times.
    let s = Script::new(0x1000, ExecMode::Bit64)
        .code(0x1000, &[0x75, 0xfe, 0x0f, 0x05])
        .directives(
            std::iter::repeat_n(Directive::Taken, 100)
                .chain([Directive::NotTaken, Directive::ExitGroup(0)]),
        );
    let params = SimParams {
        tnt: TntPolicy::Long,
        ..SimParams::default()
    };
    let (p, _) = run_with(s.clone(), base_cfg(), params, |_, _| {});
    let lens: Vec<(bool, u32)> = p
        .iter()
        .filter_map(|q| match q {
            Packet::Tnt8(t) => Some((false, t.len())),
            Packet::Tnt64(t) => Some((true, t.len())),
            _ => None,
        })
        .collect();
    assert_eq!(lens, vec![(true, 47), (true, 47), (true, 7)]);
    let (p, _) = run_with(s, base_cfg(), SimParams::default(), |_, _| {});
    let n: u32 = p
        .iter()
        .filter_map(|q| match q {
            Packet::Tnt8(t) => Some(t.len()),
            Packet::Tnt64(_) => panic!("short policy"),
            _ => None,
        })
        .sum();
    assert_eq!(n, 101);
}

#[test]
fn overflow_when_output_cannot_drain() {
    let params = SimParams {
        fifo: Some(FifoModel {
            capacity: 64,
            drain_per_100_cycles: 50,
        }),
        ..SimParams::default()
    };
    let (p, l) = run_with(tip_loop(2000), base_cfg(), params, |_, _| {});
    assert!(l.stats().overflows > 0 && l.stats().dropped_bytes > 0);
    // Every OVF is followed by a FUP with a full (sign-extended) IP.
    let mut n = 0;
    for (i, q) in p.iter().enumerate() {
        if *q == Packet::Ovf {
            assert_eq!(
                p[i + 1],
                Packet::fup(C::Sext48, 0x1000),
                "{:?}",
                &p[i..i + 3]
            );
            n += 1;
        }
    }
    assert_eq!(n, l.stats().overflows);
}
