//! End to end: real programs (/bin/true and a small C program built here with
//! gcc) recorded once by single-stepping, replayed through the PT logic in six
//! configurations; every trace must decode packet by packet, match the ground
//! truth branch by branch (a small flow walk over the recorded instructions),
//! hold no packet of a disabled feature, and, when libipt's ptxed is named by
//! PT_REFERENCE_PTXED, make ptxed print exactly the traced instructions.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use pt_decoder::{Config, LastIp, Packet, PacketDecoder};
use pt_encoder::packet::IpPacketKind;
use pt_hal::config::TraceConfig;
use pt_hal::msr::AddrCfg;
use pt_sim::exec::log::LogReader;
use pt_sim::exec::ptrace::{TraceOptions, Tracer};
use pt_sim::exec::{collect, BranchClass, Event, ExecItem, Mapping};
use pt_sim::pt::{SimParams, TntPolicy};
use pt_sim::record::{record_perf_data, FilterSpec, PerfDataOptions, SimRecording};
use ptperf::verify::Recording;

struct Recorded {
    dir: PathBuf,
    log: PathBuf,
    items: Vec<ExecItem>,
    program: PathBuf,
}

fn tmp(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("sim-trace-{name}"));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn record(name: &str, program: &Path, args: &[&str]) -> Recorded {
    let dir = tmp(name);
    let log = dir.join("exec.log");
    let mut t = Tracer::spawn(program, args, TraceOptions::default()).expect("spawn");
    let mut rec = SimRecording::new(TraceConfig::perf_default());
    rec.log = Some(log.clone());
    let opts = PerfDataOptions::new(dir.join("first.data"));
    let s = record_perf_data(&mut t, &rec, &opts, |_| {}).expect("record");
    assert!(s.source_error.is_none(), "{:?}", s.source_error);
    let items = collect(&mut LogReader::open(&log).unwrap()).unwrap();
    Recorded {
        dir,
        log,
        items,
        program: std::fs::canonicalize(program).unwrap(),
    }
}

fn true_run() -> &'static Recorded {
    static R: OnceLock<Recorded> = OnceLock::new();
    R.get_or_init(|| record("true", Path::new("/bin/true"), &[]))
}

fn sample_run() -> &'static Recorded {
    static R: OnceLock<Recorded> = OnceLock::new();
    R.get_or_init(|| {
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs/sample.c");
        let bin = tmp("sample-bin").join("sample");
        let st = Command::new(pt_testkit::tool("gcc", "gcc"))
            .args(["-O1", "-fno-inline-small-functions", "-o"])
            .arg(&bin)
            .arg(&src)
            .status()
            .expect("run gcc");
        assert!(st.success());
        record("sample", &bin, &[])
    })
}

/// The executable mapping of the program itself (first one seen).
fn main_text(r: &Recorded) -> (u64, u64) {
    for it in &r.items {
        if let ExecItem::Event(Event::Mappings(maps)) = it {
            let m: &Mapping = maps
                .iter()
                .find(|m| m.perms.exec && Path::new(&m.path) == r.program)
                .expect("program text mapped");
            return (m.start, m.end);
        }
    }
    panic!("no mappings");
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    Bit(bool),
    Tip(u64),
    Pge(u64),
    Pgd(Option<u64>),
    Fup(u64),
}

struct Decoded {
    packets: Vec<Packet>,
    flow: Vec<Flow>,
}

/// Decodes every packet (no error allowed) and keeps the control-flow ones.
fn decode(trace: &[u8]) -> Decoded {
    let mut d = PacketDecoder::new(trace, &Config::default());
    d.sync_forward().expect("a PSB");
    let mut packets = Vec::new();
    let mut flow = Vec::new();
    let mut last = LastIp::new();
    let mut in_psb = false;
    for r in d {
        let (off, p) = r.unwrap_or_else(|e| panic!("packet decode error: {e}"));
        let _ = off;
        match p {
            Packet::Psb => {
                last.reset();
                in_psb = true;
            }
            Packet::Psbend | Packet::Ovf => in_psb = false,
            Packet::Tnt8(t) | Packet::Tnt64(t) => flow.extend(t.iter().map(Flow::Bit)),
            Packet::Ip(kind, payload) => {
                let ip = last.update(payload);
                if in_psb {
                    // Status FUP of PSB+.
                } else {
                    flow.push(match (kind, ip) {
                        (IpPacketKind::Tip, Some(ip)) => Flow::Tip(ip),
                        (IpPacketKind::TipPge, Some(ip)) => Flow::Pge(ip),
                        (IpPacketKind::TipPgd, ip) => Flow::Pgd(ip),
                        (IpPacketKind::Fup, Some(ip)) => Flow::Fup(ip),
                        other => panic!("unexpected IP packet {other:?}"),
                    });
                }
            }
            _ => {}
        }
        packets.push(p);
    }
    Decoded { packets, flow }
}

/// Walks the ground truth against the flow packets, as a decoder would.
/// Returns (traced instructions' IPs, compressed returns).
fn check_flow(items: &[ExecItem], flow: &[Flow], cfg: &TraceConfig) -> (Vec<u64>, u64) {
    let ranges: Vec<(u64, u64)> = cfg
        .ranges
        .iter()
        .filter(|r| r.cfg == AddrCfg::Filter)
        .map(|r| (r.start, r.end))
        .collect();
    let in_range = |ip: u64| ranges.is_empty() || ranges.iter().any(|&(a, b)| a <= ip && ip <= b);
    let mut pos = 0usize;
    let mut next = |what: &str, i: usize| -> Flow {
        let f = *flow
            .get(pos)
            .unwrap_or_else(|| panic!("item {i}: trace ends, expected {what}"));
        pos += 1;
        f
    };
    let mut enabled = false;
    let mut stack: Vec<u64> = Vec::new();
    let mut traced = Vec::new();
    let mut compressed = 0u64;
    let mut last_next = None;
    for (i, item) in items.iter().enumerate() {
        match item {
            ExecItem::Insn(r) => {
                if !in_range(r.ip) {
                    assert!(!enabled, "item {i}: {:#x} out of range while enabled", r.ip);
                    continue;
                }
                if !enabled {
                    assert_eq!(next("TIP.PGE", i), Flow::Pge(r.ip), "item {i}");
                    enabled = true;
                }
                traced.push(r.ip);
                last_next = Some(r.next_ip);
                let ft = r.fall_through();
                let leaving = !in_range(r.next_ip);
                let leave = |f: &mut dyn FnMut(&str, usize) -> Flow, target: Option<u64>| {
                    assert_eq!(
                        f("TIP.PGD", i),
                        Flow::Pgd(target),
                        "item {i} leaves the range"
                    );
                };
                match r.class {
                    BranchClass::CondBranch if leaving => {
                        leave(&mut next, None);
                        enabled = false;
                    }
                    BranchClass::CondBranch => {
                        if !cfg.dis_tnt {
                            assert_eq!(next("TNT", i), Flow::Bit(r.next_ip != ft), "item {i}");
                        }
                    }
                    BranchClass::DirectCall | BranchClass::DirectJump | BranchClass::Other => {
                        if r.class == BranchClass::DirectCall && r.next_ip != ft {
                            stack.push(ft);
                        }
                        if leaving {
                            leave(&mut next, Some(r.next_ip));
                            enabled = false;
                        }
                    }
                    BranchClass::IndirectCall | BranchClass::IndirectJump => {
                        if r.class == BranchClass::IndirectCall {
                            stack.push(ft);
                        }
                        if leaving {
                            leave(&mut next, Some(r.next_ip));
                            enabled = false;
                        } else {
                            assert_eq!(next("TIP", i), Flow::Tip(r.next_ip), "item {i}");
                        }
                    }
                    BranchClass::Return => {
                        if leaving {
                            leave(&mut next, Some(r.next_ip));
                            enabled = false;
                        } else {
                            match next("TNT or TIP", i) {
                                Flow::Bit(true) => {
                                    assert!(!cfg.dis_retc, "item {i}: compressed with noretcomp");
                                    assert_eq!(stack.pop(), Some(r.next_ip), "item {i}");
                                    compressed += 1;
                                }
                                f => assert_eq!(f, Flow::Tip(r.next_ip), "item {i}"),
                            }
                        }
                    }
                    BranchClass::FarBranch => {
                        assert_eq!(next("TIP", i), Flow::Tip(r.next_ip), "item {i}");
                    }
                    BranchClass::KernelEntry => {
                        let mut f = next("TIP.PGD", i);
                        if f == Flow::Fup(r.ip) {
                            f = next("TIP.PGD", i);
                        }
                        assert_eq!(f, Flow::Pgd(None), "item {i}: kernel entry");
                        enabled = false;
                    }
                }
            }
            ExecItem::Event(Event::Signal { from_ip, .. }) if enabled => {
                assert_eq!(next("FUP", i), Flow::Fup(*from_ip), "item {i}");
                assert_eq!(next("TIP.PGD", i), Flow::Pgd(None), "item {i}");
                enabled = false;
            }
            _ => {}
        }
    }
    if enabled {
        assert_eq!(next("FUP", items.len()), Flow::Fup(last_next.unwrap()));
        assert_eq!(next("TIP.PGD", items.len()), Flow::Pgd(None));
    }
    assert_eq!(
        pos,
        flow.len(),
        "packets left over: {:?}",
        &flow[pos..flow.len().min(pos + 8)]
    );
    (traced, compressed)
}

/// No packet a disabled feature would produce.
fn check_features(packets: &[Packet], cfg: &TraceConfig) {
    for p in packets {
        let bad = match p {
            Packet::Tsc { .. } => !cfg.tsc,
            Packet::Tma { .. } => !(cfg.tsc && cfg.mtc.is_some()),
            Packet::Mtc { .. } => cfg.mtc.is_none(),
            Packet::Cyc { .. } => cfg.cyc.is_none(),
            Packet::Tnt8(_) | Packet::Tnt64(_) => cfg.dis_tnt || !cfg.branch,
            Packet::Ip(..) | Packet::ModeExec(_) | Packet::ModeTsx(_) => !cfg.branch,
            Packet::Ptw { .. } => !cfg.ptwrite,
            // OS = 0: no PIP; no power or event trace here.
            Packet::Pip { .. }
            | Packet::Vmcs { .. }
            | Packet::Exstop { .. }
            | Packet::Mwait { .. }
            | Packet::Pwre { .. }
            | Packet::Pwrx { .. }
            | Packet::Cfe { .. }
            | Packet::Evd { .. } => true,
            _ => false,
        };
        assert!(!bad, "{p:?} with {cfg:?}");
    }
}

/// PSBs come once PSBFreq's byte count is reached, and not much later.
fn check_psb_spacing(trace: &[u8], cfg: &TraceConfig) {
    let period = 2048usize << cfg.psb_freq;
    let psb = [0x02u8, 0x82];
    let offsets: Vec<usize> = (0..trace.len().saturating_sub(16))
        .filter(|&i| trace[i..i + 16].chunks(2).all(|c| c == psb))
        .collect();
    assert_eq!(offsets.first(), Some(&0));
    for w in offsets.windows(2) {
        let gap = w[1] - w[0];
        assert!(gap >= period, "PSB gap {gap} < {period}");
        // One instruction's worth of packets (plus a PSB+) at most beyond the period.
        assert!(gap < period + 256, "PSB gap {gap} ≫ {period}");
    }
    if trace.len() > period + 256 {
        assert!(offsets.len() >= 2, "no second PSB in {} bytes", trace.len());
    }
}

fn replay(
    r: &Recorded,
    name: &str,
    cfg: TraceConfig,
    filters: Vec<FilterSpec>,
    tnt: TntPolicy,
) -> (PathBuf, TraceConfig) {
    let data = r.dir.join(format!("{name}.data"));
    let rec = SimRecording {
        filters,
        params: SimParams {
            tnt,
            ..SimParams::default()
        },
        ..SimRecording::new(cfg)
    };
    let mut src = LogReader::open(&r.log).unwrap();
    let s = record_perf_data(&mut src, &rec, &PerfDataOptions::new(&data), |_| {}).expect("replay");
    assert_eq!(s.lost_bytes, 0);
    // The configuration with the ranges as resolved (virtual addresses here).
    let mut resolved = cfg;
    for (slot, f) in resolved.ranges.iter_mut().zip(&rec.filters) {
        assert!(f.object.is_none());
        *slot = pt_hal::config::AddrRange {
            cfg: f.cfg,
            start: f.start,
            end: f.start + f.size - 1,
        };
    }
    (data, resolved)
}

/// The one thread's trace of a recording.
fn trace_of(data: &Path) -> Vec<u8> {
    let rec = Recording::read(data).unwrap();
    assert_eq!(rec.pieces.len(), 1, "{}", data.display());
    rec.pieces[0].data.clone()
}

/// libipt's ptxed prints exactly the traced instructions.
fn reference_ptxed(ptxed: &Path, data: &Path, want: &[u64]) {
    let rec = Recording::read(data).unwrap();
    let trace = data.with_extension("pt");
    let out = Command::new(ptxed)
        .args(common::ptxed_args(&rec, &rec.pieces[0], &trace))
        .arg("--no-inst")
        .output()
        .expect("run ptxed");
    let text = String::from_utf8_lossy(&out.stdout);
    let errors: Vec<&str> = text.lines().filter(|l| l.contains("error")).collect();
    assert!(errors.is_empty(), "ptxed: {errors:?}");
    let got: Vec<u64> = text
        .lines()
        .filter(|l| l.len() == 16 && l.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(|l| u64::from_str_radix(l, 16).unwrap())
        .collect();
    assert_eq!(got.len(), want.len(), "instruction count");
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        panic!(
            "ptxed differs at instruction {i}: {:#x} vs {:#x}",
            got[i], want[i]
        );
    }
}

fn six_configs(r: &Recorded) -> Vec<(&'static str, TraceConfig, Vec<FilterSpec>, TntPolicy)> {
    let d = TraceConfig::perf_default();
    let (start, end) = main_text(r);
    vec![
        ("default", d, vec![], TntPolicy::Short),
        (
            "noretcomp",
            TraceConfig {
                dis_retc: true,
                ..d
            },
            vec![],
            TntPolicy::Short,
        ),
        (
            "psb2k-long-tnt",
            TraceConfig { psb_freq: 0, ..d },
            vec![],
            TntPolicy::Long,
        ),
        (
            "mtc-cyc",
            TraceConfig {
                mtc: Some(0),
                cyc: Some(0),
                ..d
            },
            vec![],
            TntPolicy::Short,
        ),
        (
            "ip-range",
            d,
            vec![FilterSpec {
                cfg: AddrCfg::Filter,
                start,
                size: end - start,
                object: None,
            }],
            TntPolicy::Short,
        ),
        (
            "user-only",
            TraceConfig {
                os: false,
                user: true,
                mtc: None,
                psb_freq: 1,
                ..TraceConfig::default()
            },
            vec![],
            TntPolicy::Short,
        ),
    ]
}

/// Every configuration: decoded packet by packet and by pt-decoder; by
/// libipt's ptxed too when `reference` names it.
fn run_all(r: &Recorded, reference: Option<&Path>) {
    let insns = r
        .items
        .iter()
        .filter(|i| matches!(i, ExecItem::Insn(_)))
        .count();
    let syscalls = r
        .items
        .iter()
        .filter(|i| matches!(i, ExecItem::Event(Event::SyscallEnter { .. })))
        .count();
    assert!(syscalls > 0);
    for (name, cfg, filters, tnt) in six_configs(r) {
        let (trace, cfg) = replay(r, name, cfg, filters, tnt);
        let bytes = trace_of(&trace);
        let d = decode(&bytes);
        check_features(&d.packets, &cfg);
        check_psb_spacing(&bytes, &cfg);
        let (traced, compressed) = check_flow(&r.items, &d.flow, &cfg);
        if name == "ip-range" {
            assert!(traced.len() < insns && !traced.is_empty());
        } else {
            assert_eq!(traced.len(), insns, "{name}");
        }
        if cfg.dis_retc {
            assert_eq!(compressed, 0);
        } else if name != "ip-range" {
            assert!(compressed > 0, "{name}: no compressed return");
        }
        let pges = d.flow.iter().filter(|f| matches!(f, Flow::Pge(_))).count();
        if name != "ip-range" {
            assert!(pges > syscalls / 2, "{name}: user-only: PGE after syscalls");
        }
        if name == "mtc-cyc" {
            assert!(d.packets.iter().any(|p| matches!(p, Packet::Cyc { .. })));
            assert!(d.packets.iter().any(|p| matches!(p, Packet::Mtc { .. })));
        }
        if tnt == TntPolicy::Long {
            assert!(d.packets.iter().any(|p| matches!(p, Packet::Tnt64(_))));
        }
        if let Some(ptxed) = reference {
            reference_ptxed(ptxed, &trace, &traced);
        }
        // pt-decoder's instruction flow decoder reproduces the recording.
        let checks = ptperf::verify::verify(&trace, &r.log).unwrap();
        assert_eq!(checks.len(), 1, "{name}");
        let v = &checks[0].flow;
        assert!(v.identical(), "{name}: {v:?}");
        assert_eq!(v.decoded as usize, traced.len());
    }
}

fn libipt_ptxed() -> PathBuf {
    pt_testkit::env_path("PT_REFERENCE_PTXED", "libipt's ptxed, built with XED")
}

#[test]
fn bin_true_decodes_to_the_ground_truth() {
    run_all(true_run(), None);
}

#[test]
#[ignore = "needs libipt's ptxed (PT_REFERENCE_PTXED)"]
fn bin_true_decodes_to_the_ground_truth_with_libipt_ptxed() {
    run_all(true_run(), Some(&libipt_ptxed()));
}

#[test]
#[ignore = "needs libipt's ptxed (PT_REFERENCE_PTXED)"]
fn c_program_decodes_to_the_ground_truth_with_libipt_ptxed() {
    run_all(sample_run(), Some(&libipt_ptxed()));
}

#[test]
fn c_program_decodes_to_the_ground_truth() {
    run_all(sample_run(), None);
}

mod random {
    use super::*;
    use proptest::prelude::*;
    use pt_sim::exec::{CodeMemory, ExecMode, Retired};
    use pt_sim::pt::PtLogic;

    #[derive(Clone, Copy, Debug)]
    enum Step {
        Linear(u8),
        Cond(bool, u32),
        Jump(u32),
        Call(u32),
        IndirectJump(u32),
        IndirectCall(u32),
        Ret(bool, u32),
    }

    fn step() -> impl Strategy<Value = Step> {
        let addr = 0x1000u32..0x60000;
        prop_oneof![
            4 => (1u8..15).prop_map(Step::Linear),
            4 => (any::<bool>(), addr.clone()).prop_map(|(t, a)| Step::Cond(t, a)),
            1 => addr.clone().prop_map(Step::Jump),
            2 => addr.clone().prop_map(Step::Call),
            1 => addr.clone().prop_map(Step::IndirectJump),
            1 => addr.clone().prop_map(Step::IndirectCall),
            2 => (any::<bool>(), addr).prop_map(|(m, a)| Step::Ret(m, a)),
        ]
    }

    /// A consistent instruction stream from the steps (returns go back to
    /// their call when `matching` and a call is open).
    fn items(steps: &[Step]) -> Vec<ExecItem> {
        let mut ip = 0x2000u64;
        let mut calls: Vec<u64> = Vec::new();
        let mut out = Vec::new();
        for s in steps {
            let (len, class, next) = match *s {
                Step::Linear(n) => (n, BranchClass::Other, ip + u64::from(n)),
                Step::Cond(t, a) => (
                    2,
                    BranchClass::CondBranch,
                    if t { u64::from(a) } else { ip + 2 },
                ),
                Step::Jump(a) => (5, BranchClass::DirectJump, u64::from(a)),
                Step::Call(a) => {
                    calls.push(ip + 5);
                    (5, BranchClass::DirectCall, u64::from(a))
                }
                Step::IndirectJump(a) => (2, BranchClass::IndirectJump, u64::from(a)),
                Step::IndirectCall(a) => {
                    calls.push(ip + 2);
                    (2, BranchClass::IndirectCall, u64::from(a))
                }
                Step::Ret(matching, a) => {
                    let t = match (matching, calls.pop()) {
                        (true, Some(r)) => r,
                        _ => u64::from(a),
                    };
                    (1, BranchClass::Return, t)
                }
            };
            out.push(ExecItem::Insn(Retired {
                ip,
                next_ip: next,
                len,
                class,
                mode: ExecMode::Bit64,
                kernel: false,
            }));
            ip = next;
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn any_stream_decodes_to_itself(
            steps in proptest::collection::vec(step(), 1..600),
            noretcomp in any::<bool>(),
            long in any::<bool>(),
            psb in 0u8..2,
            filter in proptest::option::of((0x1000u64..0x30000, 0x100u64..0x30000)),
            cyc in any::<bool>(),
        ) {
            let mut cfg = TraceConfig {
                os: false,
                dis_retc: noretcomp,
                psb_freq: psb,
                mtc: Some(0),
                cyc: cyc.then_some(0),
                ..TraceConfig::default()
            };
            if let Some((start, size)) = filter {
                cfg.ranges[0] = pt_hal::config::AddrRange { cfg: AddrCfg::Filter, start, end: start + size };
            }
            let params = SimParams {
                tnt: if long { TntPolicy::Long } else { TntPolicy::Short },
                ..SimParams::default()
            };
            let items = items(&steps);
            let mem = CodeMemory::new();
            let mut l = PtLogic::new(cfg, params).unwrap();
            l.enable();
            for it in &items {
                l.item(it, &mem);
            }
            l.finish();
            let mut bytes = Vec::new();
            l.drain_into(&mut bytes);
            let d = decode(&bytes);
            check_features(&d.packets, &cfg);
            check_psb_spacing(&bytes, &cfg);
            let (traced, compressed) = check_flow(&items, &d.flow, &cfg);
            prop_assert_eq!(traced.len() as u64, l.stats().traced);
            if noretcomp {
                prop_assert_eq!(compressed, 0);
            }
        }
    }
}
