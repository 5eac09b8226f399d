//! The block path against the per-instruction path: the same executions,
//! handed over as block runs ([`Step::Block`], batched as [`Step::Blocks`])
//! and spelled out as retired
//! instructions ([`pt_sim::exec::RunView::retired`]), give byte-identical PT (the PT
//! logic alone and whole recordings, every configuration the logic takes)
//! and byte-identical execution logs.

use std::collections::{HashMap, VecDeque};

use proptest::prelude::*;
use pt_hal::config::{AddrRange, TraceConfig};
use pt_hal::msr::AddrCfg;
use pt_sim::clock::ClockParams;
use pt_sim::exec::log::LogWriter;
use pt_sim::exec::{
    BlockId, BlockRun, BlockTable, CodeBlock, CodeMemory, Event, ExecError, ExecItem,
    ExecutionSource, ExitKind, Step, ThreadId,
};
use pt_sim::pt::{FifoModel, PtLogic, SimParams, TntPolicy};
use pt_sim::record::{record_into, MemorySink, RecordSummary, SimRecording};

const BASE: u64 = 0x10000;
const SPACING: u64 = 0x100;
const BLOCKS: usize = 8;

/// How a block ends.
#[derive(Clone, Copy, Debug)]
enum End {
    Jz,
    Jmp,
    Call,
    Ret,
    JmpRax,
    Syscall,
    /// Cut by its size: a non-branch.
    Plain,
    /// UD2: faults, never retires.
    Ud2,
}

const ENDS: [End; 8] = [
    End::Jz,
    End::Jmp,
    End::Call,
    End::Ret,
    End::JmpRax,
    End::Syscall,
    End::Plain,
    End::Ud2,
];

fn start(i: usize) -> u64 {
    BASE + i as u64 * SPACING
}

/// Blocks at `start(i)`: a body of non-branches (nop, mov eax, imm32;
/// add rax, rbx), then the end; direct branches go to other blocks.
struct Program {
    mem: CodeMemory,
    table: BlockTable,
    blocks: Vec<(BlockId, End)>,
}

fn program(shapes: &[(Vec<u8>, u8)]) -> Program {
    let mut page = vec![0xccu8; 4096];
    let mut blocks = Vec::new();
    let mut table = BlockTable::new();
    for (i, (body, end)) in shapes.iter().enumerate() {
        let at = start(i);
        let mut code = Vec::new();
        for k in body {
            match k % 3 {
                0 => code.push(0x90),
                1 => code.extend_from_slice(&[0xb8, 1, 0, 0, 0]),
                _ => code.extend_from_slice(&[0x48, 0x01, 0xd8]),
            }
        }
        let end = ENDS[*end as usize % ENDS.len()];
        let rel = |code: &Vec<u8>, len: u64, to: usize| {
            let after = at + code.len() as u64 + len;
            (start(to).wrapping_sub(after) as u32).to_le_bytes()
        };
        match end {
            End::Jz => {
                let r = rel(&code, 6, (i + 1) % BLOCKS);
                code.extend_from_slice(&[0x0f, 0x84]);
                code.extend_from_slice(&r);
            }
            End::Jmp => {
                let r = rel(&code, 5, (i + 2) % BLOCKS);
                code.push(0xe9);
                code.extend_from_slice(&r);
            }
            End::Call => {
                let r = rel(&code, 5, (i + 3) % BLOCKS);
                code.push(0xe8);
                code.extend_from_slice(&r);
            }
            End::Ret => code.push(0xc3),
            End::JmpRax => code.extend_from_slice(&[0xff, 0xe0]),
            End::Syscall => code.extend_from_slice(&[0x0f, 0x05]),
            End::Plain => code.push(0x90),
            End::Ud2 => code.extend_from_slice(&[0x0f, 0x0b]),
        }
        assert!(code.len() as u64 <= SPACING);
        let off = (at - BASE) as usize;
        page[off..off + code.len()].copy_from_slice(&code);
        blocks.push((table.push(CodeBlock::decode(at, &code).unwrap()), end));
    }
    let mut mem = CodeMemory::new();
    mem.set_page(BASE, &page);
    Program { mem, table, blocks }
}

/// An execution: block runs of two threads and the events between them.
fn execution(p: &Program, walk: &[(u8, u8)]) -> Vec<Step> {
    let main = ThreadId::main_of(7);
    let other = ThreadId { pid: 7, tid: 8 };
    let mut steps = vec![Step::Item(ExecItem::Event(Event::Exec {
        pid: 7,
        path: "/bin/prog".into(),
    }))];
    let mut calls: HashMap<ThreadId, Vec<u64>> = HashMap::new();
    let mut cur = main;
    let mut started_other = false;
    let mut i = 0usize;
    for &(choice, extra) in walk {
        let (block, end) = &p.blocks[i % p.blocks.len()];
        let last = *p.table.get(*block).unwrap().last();
        let ft = last.fall_through();
        let pick = start(usize::from(choice) % BLOCKS);
        let stack = calls.entry(cur).or_default();
        let (next_ip, retire_last) = match end {
            End::Jz if choice % 2 == 0 => (last.target, true),
            End::Jz | End::Syscall | End::Plain => (ft, true),
            End::Jmp => (last.target, true),
            End::Call => {
                stack.push(ft);
                (last.target, true)
            }
            End::Ret => (
                stack.pop().filter(|_| choice % 5 != 0).unwrap_or(pick),
                true,
            ),
            End::JmpRax => (pick, true),
            End::Ud2 => (last.ip, false),
        };
        steps.push(Step::Block(BlockRun {
            block: *block,
            next_ip,
            retire_last,
        }));
        let mut next = next_ip;
        if matches!(end, End::Syscall) {
            steps.push(Step::Item(ExecItem::Event(Event::SyscallEnter {
                nr: 39,
                args: [0; 6],
            })));
            steps.push(Step::Item(ExecItem::Event(Event::SyscallExit {
                nr: 39,
                ret: 7,
            })));
        }
        if matches!(end, End::Ud2) || extra % 11 == 0 {
            // A signal: its handler is some block.
            next = start(usize::from(extra) % BLOCKS);
            steps.push(Step::Item(ExecItem::Event(Event::Signal {
                signo: 11,
                from_ip: next_ip,
                handler: Some(next),
            })));
        }
        if extra % 7 == 0 {
            // The other thread runs next (it is created the first time).
            let to = if cur == main { other } else { main };
            if !started_other {
                started_other = true;
                steps.push(Step::Item(ExecItem::Event(Event::Clone {
                    child: other,
                    kind: pt_sim::exec::CloneKind::Thread,
                })));
            }
            steps.push(Step::Item(ExecItem::Event(Event::Switch(to))));
            cur = to;
        }
        // The next block is the one at `next` if there is one there, else any.
        i = (0..BLOCKS)
            .find(|&b| start(b) == next)
            .unwrap_or(usize::from(extra));
    }
    steps.push(Step::Item(ExecItem::Event(Event::Exit(ExitKind::Exited(
        0,
    )))));
    steps
}

/// The same execution as items only.
fn spelled(steps: &[Step], table: &BlockTable) -> Vec<ExecItem> {
    let mut v = Vec::new();
    for s in steps {
        match s {
            Step::Item(i) => v.push(i.clone()),
            Step::Block(run) => v.extend(table.run(run).unwrap().retired().map(ExecItem::Insn)),
            Step::Blocks(runs) => {
                for run in runs {
                    v.extend(table.run(run).unwrap().retired().map(ExecItem::Insn));
                }
            }
        }
    }
    v
}

/// The same execution with consecutive block runs in batches of up to `n`.
fn batched(steps: &[Step], n: usize) -> Vec<Step> {
    let mut v: Vec<Step> = Vec::new();
    for s in steps {
        match (s, v.last_mut()) {
            (Step::Block(run), Some(Step::Blocks(runs))) if runs.len() < n => runs.push(*run),
            (Step::Block(run), _) => v.push(Step::Blocks(vec![*run])),
            (s, _) => v.push(s.clone()),
        }
    }
    v
}

fn config(
    (tsc, mtc, cyc, psb_freq, dis_retc, ranges): (bool, Option<u8>, Option<u8>, u8, bool, u8),
) -> TraceConfig {
    let mut cfg = TraceConfig::perf_default();
    cfg.tsc = tsc;
    // MTC periods and CYC thresholds the simulated CPU offers.
    cfg.mtc = mtc.map(|m| [0, 3, 6, 9][usize::from(m) % 4]);
    cfg.cyc = cyc;
    cfg.psb_freq = psb_freq;
    cfg.dis_retc = dis_retc;
    let range = |cfg, a: usize, b: usize| AddrRange {
        cfg,
        start: start(a),
        end: start(b) - 1,
    };
    match ranges % 4 {
        1 => cfg.ranges[0] = range(AddrCfg::Filter, 0, BLOCKS / 2),
        2 => cfg.ranges[0] = range(AddrCfg::TraceStop, BLOCKS - 1, BLOCKS),
        3 => {
            // A filter that starts and ends inside blocks.
            cfg.ranges[0] = AddrRange {
                cfg: AddrCfg::Filter,
                start: start(1) + 3,
                end: start(5) + 2,
            }
        }
        _ => {}
    }
    cfg
}

fn params((cpi, fifo, long): (u32, bool, bool)) -> SimParams {
    SimParams {
        clock: ClockParams {
            cycles_per_insn: cpi,
            ..ClockParams::default()
        },
        tnt: if long {
            TntPolicy::Long
        } else {
            TntPolicy::Short
        },
        fifo: fifo.then_some(FifoModel {
            capacity: 64,
            drain_per_100_cycles: 40,
        }),
    }
}

/// How the PT logic is given the block runs.
#[derive(Clone, Copy, Debug)]
enum Path {
    /// Instruction by instruction (`PtLogic::retire`).
    PerInsn,
    /// Run by run (`PtLogic::retire_block`).
    Blocks,
    /// Consecutive runs at once (`PtLogic::retire_blocks`), stopping when
    /// the output reaches this many bytes.
    Batches(usize),
}

/// The PT logic's output and counters for an execution, one logic for all
/// threads, switched off and on where a thread switch is (as the recorder does).
fn logic_output(
    steps: &[Step],
    table: &BlockTable,
    mem: &CodeMemory,
    cfg: TraceConfig,
    params: SimParams,
    how: Path,
) -> (Vec<u8>, pt_sim::pt::PtStats) {
    let mut l = PtLogic::new(cfg, params).unwrap();
    l.enable();
    let mut out = Vec::new();
    let mut batch: Vec<BlockRun> = Vec::new();
    let run_batch = |l: &mut PtLogic, batch: &mut Vec<BlockRun>, out: &mut Vec<u8>, limit| {
        let mut at = 0;
        while at < batch.len() {
            let (k, n) = l.retire_blocks(&batch[at..], table, mem, limit);
            assert!(k >= 1);
            let want: usize = batch[at..at + k]
                .iter()
                .map(|r| table.run(r).unwrap().count())
                .sum();
            assert_eq!(n, want as u64);
            at += k;
            if l.output().len() >= limit {
                l.drain_into(out);
            }
        }
        batch.clear();
    };
    for s in steps {
        match (s, how) {
            (Step::Block(run), Path::Batches(_)) => batch.push(*run),
            (Step::Block(run), Path::Blocks) => l.retire_block(table.run(run).unwrap(), mem),
            (Step::Block(run), Path::PerInsn) => {
                for r in table.run(run).unwrap().retired() {
                    l.retire(&r, mem);
                }
            }
            (Step::Item(item), _) => {
                if let Path::Batches(limit) = how {
                    run_batch(&mut l, &mut batch, &mut out, limit);
                }
                if matches!(item, ExecItem::Event(Event::Switch(_))) {
                    l.disable();
                    l.enable();
                }
                l.item(item, mem);
            }
            (Step::Blocks(_), _) => unreachable!("not batched here"),
        }
    }
    if let Path::Batches(limit) = how {
        run_batch(&mut l, &mut batch, &mut out, limit);
    }
    l.finish();
    l.drain_into(&mut out);
    (out, l.stats())
}

fn log_bytes(steps: &[Step], table: &BlockTable, mem: &CodeMemory, blocks: bool) -> Vec<u8> {
    let mut w = LogWriter::new(Vec::new()).unwrap();
    for s in steps {
        match s {
            Step::Block(run) if blocks => w.write_block(table.run(run).unwrap(), mem).unwrap(),
            Step::Block(run) => {
                for r in table.run(run).unwrap().retired() {
                    w.write_item(&ExecItem::Insn(r), mem).unwrap();
                }
            }
            Step::Item(i) => w.write_item(i, mem).unwrap(),
            Step::Blocks(_) => unreachable!("not batched here"),
        }
    }
    w.finish().unwrap()
}

/// A source of fixed steps: as block runs or spelled out.
struct Steps {
    steps: VecDeque<Step>,
    table: BlockTable,
    mem: CodeMemory,
}

impl ExecutionSource for Steps {
    fn next_item(&mut self) -> Result<Option<ExecItem>, ExecError> {
        Ok(self.steps.pop_front().map(|s| match s {
            Step::Item(i) => i,
            Step::Block(_) | Step::Blocks(_) => unreachable!("spelled out before"),
        }))
    }
    fn next_step(&mut self) -> Result<Option<Step>, ExecError> {
        Ok(self.steps.pop_front())
    }
    fn blocks(&self) -> &BlockTable {
        &self.table
    }
    fn memory(&self) -> &CodeMemory {
        &self.mem
    }
}

fn recording(
    steps: Vec<Step>,
    table: &BlockTable,
    mem: &CodeMemory,
    cfg: TraceConfig,
    params: SimParams,
) -> (MemorySink, RecordSummary) {
    let mut src = Steps {
        steps: steps.into(),
        table: table.clone(),
        mem: mem.clone(),
    };
    let mut rec = SimRecording::new(cfg);
    rec.params = params;
    let mut sink = MemorySink::default();
    let s = record_into(&mut src, &rec, &mut sink, |_| {}).unwrap();
    (sink, s)
}

fn shapes() -> impl Strategy<Value = Vec<(Vec<u8>, u8)>> {
    prop::collection::vec((prop::collection::vec(0u8..3, 0..12), 0u8..8), BLOCKS)
}

fn configs() -> impl Strategy<Value = (bool, Option<u8>, Option<u8>, u8, bool, u8)> {
    (
        any::<bool>(),
        prop::option::of(0u8..10),
        prop::option::of(0u8..6),
        0u8..3,
        any::<bool>(),
        0u8..4,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn block_path_writes_the_same_pt(
        shapes in shapes(),
        walk in prop::collection::vec((any::<u8>(), any::<u8>()), 1..300),
        cfg in configs(),
        params in (1u32..4, prop::bool::weighted(0.2), any::<bool>()),
        out_limit in 1usize..300,
    ) {
        let p = program(&shapes);
        let steps = execution(&p, &walk);
        let (cfg, params) = (config(cfg), self::params(params));
        let per_insn = logic_output(&steps, &p.table, &p.mem, cfg, params, Path::PerInsn);
        let blocks = logic_output(&steps, &p.table, &p.mem, cfg, params, Path::Blocks);
        prop_assert_eq!(&per_insn.0, &blocks.0);
        prop_assert_eq!(per_insn.1, blocks.1);
        let batches = logic_output(&steps, &p.table, &p.mem, cfg, params, Path::Batches(out_limit));
        prop_assert_eq!(&per_insn.0, &batches.0);
        prop_assert_eq!(per_insn.1, batches.1);
        prop_assert_eq!(log_bytes(&steps, &p.table, &p.mem, false), log_bytes(&steps, &p.table, &p.mem, true));
    }

    #[test]
    fn block_path_records_the_same_streams(
        shapes in shapes(),
        walk in prop::collection::vec((any::<u8>(), any::<u8>()), 1..200),
        cfg in configs(),
        params in (1u32..4, Just(false), any::<bool>()),
        batch in 1usize..40,
    ) {
        let p = program(&shapes);
        let steps = execution(&p, &walk);
        let (cfg, params) = (config(cfg), self::params(params));
        let items: Vec<Step> = spelled(&steps, &p.table).into_iter().map(Step::Item).collect();
        let (a, sa) = recording(items, &p.table, &p.mem, cfg, params);
        let in_batches = batched(&steps, batch);
        let (b, sb) = recording(steps, &p.table, &p.mem, cfg, params);
        prop_assert_eq!(sa.instructions, sb.instructions);
        prop_assert_eq!(sa.traced, sb.traced);
        prop_assert_eq!(&sa.threads, &sb.threads);
        prop_assert_eq!(&a.streams, &b.streams);
        prop_assert_eq!(&a.events, &b.events);
        let (c, sc) = recording(in_batches, &p.table, &p.mem, cfg, params);
        prop_assert_eq!(sa.instructions, sc.instructions);
        prop_assert_eq!(sa.traced, sc.traced);
        prop_assert_eq!(&sa.threads, &sc.threads);
        prop_assert_eq!(a.streams, c.streams);
        prop_assert_eq!(a.events, c.events);
    }
}

/// Long straight-line bodies across MTC edges and PSB periods: the fast
/// path stops where a packet is due.
#[test]
fn long_bodies_across_mtc_and_psb() {
    let shapes: Vec<(Vec<u8>, u8)> = (0..BLOCKS).map(|i| (vec![1; 19], (i % 3) as u8)).collect();
    let p = program(&shapes);
    let walk: Vec<(u8, u8)> = (0..20000u32).map(|i| ((i * 7) as u8, 1)).collect();
    let steps = execution(&p, &walk);
    for mtc in [None, Some(0), Some(3)] {
        let mut cfg = TraceConfig::perf_default();
        cfg.mtc = mtc;
        cfg.cyc = Some(0);
        cfg.psb_freq = 0;
        let params = self::params((3, false, false));
        let a = logic_output(&steps, &p.table, &p.mem, cfg, params, Path::PerInsn);
        let b = logic_output(&steps, &p.table, &p.mem, cfg, params, Path::Blocks);
        if mtc == Some(0) {
            assert!(a.1.psbs > 10, "{:?}", a.1);
        }
        assert_eq!(a, b);
        let c = logic_output(&steps, &p.table, &p.mem, cfg, params, Path::Batches(256));
        assert_eq!(a, c);
    }
}
