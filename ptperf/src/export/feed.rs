//! Where the exported samples come from: a perf.data decoded as perf decodes
//! it, the samples `ptperf script --itrace=…` synthesizes (perf's
//! intel-pt.c: [`pt_perf::synth`]; by default those of `perf script` without
//! `--itrace`, as perf's export scripts get them when run as their documentation
//! shows), each resolved to its thread, file and symbol
//! as perf resolves them, with the recording's context switches in time
//! order. [`Exporter`] only sees [`ExportSample`]s.

use std::collections::HashMap;

use pt_perf::session::{Context, MappingKind, Session, Thread};
use pt_perf_data::{AttrFlags, EventAttr, PerfFile, Record};

use super::{
    ContextSwitch, DsoRef, EventRef, ExportError, ExportSample, Exporter, Loc, Sink, SymRef,
    ThreadRef,
};

/// What the export met besides samples.
#[derive(Clone, Debug, Default)]
pub struct FeedStats {
    /// Samples exported.
    pub samples: u64,
    /// Instructions decoded.
    pub insns: u64,
    /// Decode errors, lost data and missing code, one line each.
    pub problems: Vec<String>,
    /// Decoder errors the `--itrace` options leave out (no `e`).
    pub hidden_errors: u64,
}

/// A file of code as the export names it, with its symbol table (the one
/// `ptperf script` names addresses with).
#[derive(Debug)]
struct CodeFile {
    short_name: String,
    long_name: String,
    build_id: String,
    syms: Option<pt_elf::TableId>,
}

use pt_perf::session::short_name;

/// A thread with no side-band: perf's unknown thread -1.
static NO_COMMS: [pt_perf::session::CommChange; 0] = [];

/// Resolves addresses and threads of a session, caching what it read.
struct Resolver<'s, 'a> {
    session: &'s Session<'a>,
    /// By mapping (its index in the session's mappings).
    files: HashMap<usize, Option<usize>>,
    /// Loaded files, by path.
    by_path: HashMap<String, usize>,
    loaded: Vec<CodeFile>,
    symbols: pt_elf::Symbols,
}

impl<'s, 'a> Resolver<'s, 'a> {
    fn new(session: &'s Session<'a>) -> Self {
        Resolver {
            session,
            files: HashMap::new(),
            by_path: HashMap::new(),
            loaded: Vec::new(),
            symbols: pt_elf::Symbols::new(pt_elf::SymbolOptions::default()),
        }
    }

    /// The loaded file of the mapping at `ip` in `pid` and the address perf
    /// looks symbols up with (`map__map_ip`).
    fn file_of(&mut self, pid: Option<u32>, ip: u64, time: Option<u64>) -> Option<(usize, u64)> {
        let m = self.session.mapping(pid, ip, time)?;
        let base = self.session.mappings().as_ptr() as usize;
        let idx = (m as *const _ as usize - base) / std::mem::size_of_val(m);
        let file_addr = match m.kind {
            MappingKind::Kernel => ip,
            _ => ip.wrapping_sub(m.start).wrapping_add(m.pgoff),
        };
        if let Some(f) = self.files.get(&idx) {
            return f.map(|f| (f, file_addr));
        }
        let key = m.filename.clone();
        let f = match self.by_path.get(&key) {
            Some(&f) => Some(f),
            None => {
                let code = self.session.code_file(m).ok();
                let recorded = m.build_id.filter(|b| b.len > 0);
                let recorded = recorded.as_ref().map(|b| b.as_bytes());
                let syms = self.session.symbol_table(m, &mut self.symbols);
                // perf reads the build id from the file when the recording
                // names none.
                let build_id = match recorded {
                    Some(b) => pt_elf::build_id::hex(b),
                    None => code
                        .and_then(|c| std::fs::read(&c.path).ok())
                        .and_then(|d| pt_elf::build_id::build_id(&d).map(pt_elf::build_id::hex))
                        .unwrap_or_default(),
                };
                let f = self.loaded.len();
                self.loaded.push(CodeFile {
                    short_name: short_name(&key).to_string(),
                    long_name: key.clone(),
                    build_id,
                    syms,
                });
                self.by_path.insert(key, f);
                Some(f)
            }
        };
        self.files.insert(idx, f);
        f.map(|f| (f, file_addr))
    }

    fn loc(&self, ip: u64, file: Option<(usize, u64)>) -> Loc<'_> {
        let Some((f, file_addr)) = file else {
            return Loc {
                ip,
                file_addr: ip,
                dso: None,
                sym: None,
            };
        };
        let f = &self.loaded[f];
        Loc {
            ip,
            file_addr,
            dso: Some(DsoRef {
                short_name: &f.short_name,
                long_name: &f.long_name,
                build_id: &f.build_id,
            }),
            sym: f
                .syms
                .and_then(|t| self.symbols.table(t).find(file_addr))
                .map(|s| SymRef {
                    start: s.start,
                    end: s.end,
                    binding: s.binding(),
                    name: s.name(),
                }),
        }
    }

    fn thread(&self, ctx: &Context, time: Option<u64>) -> (ThreadRef<'s>, Option<ThreadRef<'s>>) {
        let session = self.session;
        let of = |t: &'s Thread, tid: u32| ThreadRef {
            key: t as *const Thread as u64,
            pid: t.pid.or(ctx.pid).map_or(-1, |p| p as i32),
            tid: tid as i32,
            comms: &t.comms,
        };
        let Some(tid) = ctx.tid else {
            let t = ThreadRef {
                key: u64::MAX,
                pid: ctx.pid.map_or(-1, |p| p as i32),
                tid: -1,
                comms: &NO_COMMS,
            };
            return (t, None);
        };
        let t = match session.thread(tid, time) {
            Some(t) => of(t, tid),
            None => ThreadRef {
                key: u64::MAX - 1 - u64::from(tid),
                pid: ctx.pid.map_or(-1, |p| p as i32),
                tid: tid as i32,
                comms: &NO_COMMS,
            },
        };
        let main = match ctx.pid.or(u32::try_from(t.pid).ok()) {
            Some(pid) if pid == tid => Some(t),
            Some(pid) => session.thread(pid, time).map(|m| of(m, pid)),
            None => None,
        };
        (t, main)
    }
}

/// A sample, before resolution.
#[derive(Clone, Copy, Debug)]
struct Raw {
    kind: pt_perf::sample::Kind,
    ip: u64,
    addr: u64,
    flags: u32,
    insn_len: u8,
    period: u64,
    /// A synthesized event's payload and its [`pt_perf::sample::Sample::aux`].
    payload: u64,
    aux: u32,
}

/// The name perf gives its synthesized `event` of a recording whose trace
/// event is `attr` (perf's evsel name: the event and the modifiers of the
/// attr's exclude bits, e.g. `branches:uH` for `intel_pt//u`).
pub fn event_name(event: &str, attr: Option<&EventAttr>) -> String {
    let Some(attr) = attr else {
        return event.to_string();
    };
    let f = attr.flags;
    let mut m = String::new();
    let ex = |b| f.has(b);
    let (ku, kk, kh) = (
        ex(AttrFlags::EXCLUDE_USER),
        ex(AttrFlags::EXCLUDE_KERNEL),
        ex(AttrFlags::EXCLUDE_HV),
    );
    let mut guest_default = false;
    if ku || kk || kh {
        for (excluded, c) in [(kk, 'k'), (ku, 'u'), (kh, 'h')] {
            if !excluded {
                m.push(c);
            }
        }
        guest_default = true;
    }
    for _ in 0..f.precise_ip() {
        m.push('p');
    }
    let (xhost, xguest) = (ex(AttrFlags::EXCLUDE_HOST), ex(AttrFlags::EXCLUDE_GUEST));
    if xhost || xguest == guest_default {
        if !xhost {
            m.push('H');
        }
        if !xguest {
            m.push('G');
        }
    }
    if m.is_empty() {
        event.to_string()
    } else {
        format!("{event}:{m}")
    }
}

/// The intel_pt event of `perf` (the one of the session's PMU type).
pub fn trace_attr<'p>(perf: &'p PerfFile<'_>, session: &Session<'_>) -> Option<&'p EventAttr> {
    let pmu = session.info().pmu_type;
    perf.events()
        .iter()
        .find(|e| u64::from(e.attr.type_) == pmu)
        .map(|e| &e.attr)
}

/// A context switch record (PERF_RECORD_SWITCH, SWITCH_CPU_WIDE).
#[derive(Clone, Copy, Debug)]
struct SwitchRec {
    time: u64,
    cpu: Option<u32>,
    out: bool,
    preempt: bool,
    /// The thread the record is about (pid, tid).
    thread: (Option<u32>, Option<u32>),
    /// SWITCH_CPU_WIDE's other side.
    other: Option<(u32, u32)>,
}

/// The context switches of `perf`, in time order (unreadable records are
/// the session's warnings already).
fn switches(perf: &PerfFile<'_>) -> Vec<SwitchRec> {
    let mut v = Vec::new();
    for r in perf.records().flatten() {
        let (sid, out, preempt, other) = match &r.1 {
            Record::Switch(s) => (s.sample_id, s.is_out(), s.is_preempt(), None),
            Record::SwitchCpuWide(s) => (
                s.sample_id,
                s.is_out(),
                s.is_preempt(),
                Some((s.next_prev_pid, s.next_prev_tid)),
            ),
            _ => continue,
        };
        v.push(SwitchRec {
            time: sid.time.unwrap_or(0),
            cpu: sid.cpu,
            out,
            preempt,
            thread: (sid.pid, sid.tid),
            other,
        });
    }
    v.sort_by_key(|s| s.time);
    v
}

/// Where samples are resolved and handed to the exporter, with the context
/// switches between them in time order.
struct Feed<'s, 'a> {
    res: Resolver<'s, 'a>,
    /// perf's names of the synthesized events, by [`event_index`].
    names: Vec<String>,
    /// The most entries of a call chain (`--itrace=gN`: the IP and N - 1
    /// return addresses).
    chain_depth: usize,
    /// A call chain taken from the exporter's call/return stacks.
    chain: Vec<u64>,
    /// kHz per unit of core-to-bus ratio (perf's `cbr2khz`).
    cbr2khz: u64,
    /// A trace without `pwr_evt`: the first event's `attr.type` and
    /// `attr.config` (its name the last of `names`).
    no_pwr_evt: Option<(u32, u64)>,
    /// Context switches not yet exported (perf exports them in time order
    /// with the samples).
    switches: std::collections::VecDeque<SwitchRec>,
    stats: FeedStats,
}

impl Feed<'_, '_> {
    /// Exports the context switches up to `time`.
    fn switches_until<S: Sink>(
        &mut self,
        ex: &mut Exporter<S>,
        time: u64,
    ) -> Result<(), ExportError> {
        while self.switches.front().is_some_and(|s| s.time <= time) {
            let Some(sw) = self.switches.pop_front() else {
                break;
            };
            let at = Some(sw.time);
            let side = |pid: Option<u32>, tid: Option<u32>| {
                let ctx = Context {
                    pid,
                    tid,
                    cpu: sw.cpu,
                    since: None,
                };
                self.res.thread(&ctx, at)
            };
            let thread = sw.thread.1.map(|_| side(sw.thread.0, sw.thread.1));
            let other = sw.other.map(|(p, t)| side(Some(p), Some(t)));
            ex.context_switch(&ContextSwitch {
                time: sw.time,
                cpu: sw.cpu.map_or(-1, |c| c as i32),
                out: sw.out,
                preempt: sw.preempt,
                thread,
                other,
            })?;
        }
        Ok(())
    }

    /// Exports one sample of the thread `ctx` names; `ipc`: its instruction
    /// and cycle counts (perf's, where the trace has cycles); `chain`: its
    /// call chain, innermost first (empty: none).
    fn export<S: Sink>(
        &mut self,
        ex: &mut Exporter<S>,
        ctx: Context,
        r: Raw,
        time: Option<u64>,
        ipc: (u64, u64),
        chain: &[u64],
    ) -> Result<(), ExportError> {
        self.switches_until(ex, time.unwrap_or(0))?;
        let pid = ctx.pid;
        let Some((mut index, mut attr_type, mut config)) = event_index(r.kind) else {
            return Ok(());
        };
        let mut raw = synth_raw(r, self.cbr2khz);
        if let Some((first_type, first_config)) = self.no_pwr_evt {
            use pt_perf::sample::Kind;
            if matches!(r.kind, Kind::Mwait | Kind::Pwre | Kind::Exstop | Kind::Pwrx) {
                // Without pwr_evt perf makes no events for these, yet
                // synthesizes their samples: id 0, which perf takes for its
                // first event, and no table row.
                (index, attr_type, config) = (EVENT_NAMES.len(), first_type, first_config);
                raw = None;
            }
        }
        // perf resolves the target only of its branches event (a BTS-like
        // event: `sample_addr_correlates_sym`).
        let branch = r.kind == pt_perf::sample::Kind::Branches;
        let from_file = (r.ip != 0)
            .then(|| self.res.file_of(pid, r.ip, time))
            .flatten();
        let to_file = (branch && r.addr != 0)
            .then(|| self.res.file_of(pid, r.addr, time))
            .flatten();
        // Once perf's call/return processing (`calls`) has a thread's stack,
        // the chains of the thread's samples are made from it, not from the
        // stack the synthesis keeps (thread-stack.c: one stack per thread).
        let (thread, _) = self.res.thread(&ctx, time);
        let cpu = ctx.cpu.map_or(-1, |c| c as i32);
        let mut own = std::mem::take(&mut self.chain);
        let chain = if !chain.is_empty()
            && ex.calls_chain(&thread, cpu, r.ip, self.chain_depth, &mut own)
        {
            &own[..]
        } else {
            chain
        };
        // The chain's files (perf resolves each entry in the sample's thread).
        let chain_files: Vec<(u64, Option<(usize, u64)>)> = chain
            .iter()
            .map(|&ip| (ip, self.res.file_of(pid, ip, time)))
            .collect();
        let res = &self.res;
        let chain_locs: Vec<Loc<'_>> = chain_files.iter().map(|&(ip, f)| res.loc(ip, f)).collect();
        let name = &self.names[index];
        let (thread, main_thread) = res.thread(&ctx, time);
        let s = ExportSample {
            event: EventRef {
                index,
                name,
                attr_type,
                config,
            },
            thread,
            main_thread,
            cpu: ctx.cpu.map_or(-1, |c| c as i32),
            time: time.unwrap_or(0),
            from: res.loc(r.ip, from_file),
            to: branch.then(|| res.loc(r.addr, to_file)),
            addr: r.addr,
            period: r.period,
            weight: 0,
            transaction: 0,
            data_src: 0,
            flags: r.flags,
            insn_len: r.insn_len,
            // perf counts instructions (and cycles) per sample only where the
            // trace has cycle counts (CYC) to give IPC; without, both are 0.
            insn_cnt: ipc.0,
            cyc_cnt: ipc.1,
            raw: raw.as_ref().map_or(&[][..], |r| &r[..]),
            callchain: &chain_locs,
        };
        ex.sample(&s)?;
        self.chain = own;
        Ok(())
    }
}

/// The exported events: their index among the names [`Feed`] keeps (see
/// [`EVENT_NAMES`]), perf's `attr.type` and `attr.config`: the hardware
/// events instructions and branches (PERF_COUNT_HW_INSTRUCTIONS,
/// PERF_COUNT_HW_BRANCH_INSTRUCTIONS) and intel_pt's synthesized events
/// (PERF_SYNTH_INTEL_*).
fn event_index(kind: pt_perf::sample::Kind) -> Option<(usize, u32, u64)> {
    use super::PERF_TYPE_SYNTH as SYNTH;
    use pt_perf::sample::Kind;
    Some(match kind {
        Kind::Instructions => (0, 0, 1),
        Kind::Branches => (1, 0, 4),
        Kind::Ptwrite => (2, SYNTH, 0),
        Kind::Mwait => (3, SYNTH, 1),
        Kind::Pwre => (4, SYNTH, 2),
        Kind::Exstop => (5, SYNTH, 3),
        Kind::Pwrx => (6, SYNTH, 4),
        Kind::Cbr => (7, SYNTH, 5),
        Kind::Psb => (8, SYNTH, 6),
        _ => return None,
    })
}

/// perf's names of the events of [`event_index`] (the synthesized events'
/// names carry no modifiers).
const EVENT_NAMES: [&str; 9] = [
    "instructions",
    "branches",
    "ptwrite",
    "mwait",
    "pwre",
    "exstop",
    "pwrx",
    "cbr",
    "psb",
];

/// The raw data of a synthesized event as intel-pt.c lays it out (its
/// `perf_synth_intel_*` structure after the padding): flags (or CBR's ratio
/// bytes), then the payload (CBR: the frequency in kHz), 12 bytes in all.
fn synth_raw(r: Raw, cbr2khz: u64) -> Option<[u8; 12]> {
    use pt_perf::sample::Kind;
    let mut raw = [0u8; 12];
    let (flags, payload): (u32, u64) = match r.kind {
        // Bit 0: the event has an IP (a FUP).
        Kind::Ptwrite | Kind::Exstop => (r.aux & 1, r.payload),
        Kind::Mwait | Kind::Pwre | Kind::Pwrx => (0, r.payload),
        Kind::Cbr => {
            let cbr = r.payload & 0xff;
            let flags = cbr as u32 | ((r.aux & 0xff) << 16);
            // A 32-bit field in perf's structure.
            (flags, u64::from((cbr * cbr2khz) as u32))
        }
        Kind::Psb => (0, r.payload),
        _ => return None,
    };
    raw[..4].copy_from_slice(&flags.to_le_bytes());
    raw[4..].copy_from_slice(&payload.to_le_bytes());
    Some(raw)
}

/// The `--itrace` options the export synthesizes by default: every branch
/// (`b`), and the PTWRITE (`w`) and power events (`p`: cbr, psb, mwait, pwre,
/// exstop, pwrx) that perf's scripts synthesize by default and whose tables
/// the export fills; call chains (`g`) when the export stores them.
pub fn default_itrace(export: &super::ExportOptions) -> pt_perf::itrace::SynthOpts {
    // perf's scripts are documented as `perf script -s export-to-sqlite.py DB
    // branches calls`, with no --itrace: perf script's default, the calls
    // (and trace begins and ends) as branch samples, TSX, PTWRITE and power
    // events. perf gives its samples no call chains then; `callchains` asks
    // for them (perf needs `--itrace=…g`), so it adds g.
    let mut o = pt_perf::itrace::SynthOpts::default_for(true);
    o.callchain = export.callchains;
    o
}

/// Exports the samples of `session` (of the recording `perf`) into `ex`: those
/// `ptperf script` synthesizes (perf's intel-pt.c, [`pt_perf::synth`]) with
/// [`default_itrace`], with the recording's context switches.
pub fn export_session<S: Sink>(
    perf: &PerfFile<'_>,
    session: &Session<'_>,
    ex: &mut Exporter<S>,
) -> Result<FeedStats, ExportError> {
    let opts = default_itrace(&ex.options());
    export_session_with(perf, session, ex, opts)
}

/// Exports the samples `ptperf script --itrace=OPTS` synthesizes with `opts`:
/// instructions, branches, PTWRITE and power events (with their call chains
/// where `g` asks for them: perf gives them to all but its branches samples).
pub fn export_session_with<S: Sink>(
    perf: &PerfFile<'_>,
    session: &Session<'_>,
    ex: &mut Exporter<S>,
    opts: pt_perf::itrace::SynthOpts,
) -> Result<FeedStats, ExportError> {
    let attr = trace_attr(perf, session);
    let mut feed = Feed {
        res: Resolver::new(session),
        names: EVENT_NAMES
            .iter()
            .enumerate()
            .map(|(i, n)| {
                if i < 2 {
                    event_name(n, attr)
                } else {
                    n.to_string()
                }
            })
            .chain(std::iter::once(
                perf.events()
                    .first()
                    .and_then(|e| e.name.clone())
                    .unwrap_or_else(|| "intel_pt//".to_string()),
            ))
            .collect(),
        cbr2khz: 0,
        no_pwr_evt: attr
            .filter(|a| a.config & pt_perf_data::intel_pt::config::PWR_EVT == 0)
            .and_then(|_| perf.events().first())
            .map(|e| (e.attr.type_, e.attr.config)),
        chain_depth: opts.callchain_sz as usize,
        chain: Vec::new(),
        switches: switches(perf).into(),
        stats: FeedStats::default(),
    };
    let mut synth = pt_perf::synth::Synth::new(session, opts);
    feed.cbr2khz = synth.cbr2khz();
    let mut failed = None;
    let _ = synth.run(&mut |e| match e {
        pt_perf::synth::Event::Sample(s, stacks) => {
            let some = |v: i32| u32::try_from(v).ok();
            let ctx = Context {
                pid: some(s.pid),
                tid: some(s.tid),
                cpu: some(s.cpu),
                since: None,
            };
            let r = Raw {
                kind: s.kind,
                ip: s.ip,
                addr: s.addr,
                flags: s.flags,
                insn_len: s.insn_len,
                period: s.period,
                payload: s.payload,
                aux: s.aux,
            };
            let chain = &stacks.callchain;
            match feed.export(ex, ctx, r, s.time, (s.insn_cnt, s.cyc_cnt), chain) {
                Ok(()) => {
                    feed.stats.samples += u64::from(event_index(s.kind).is_some());
                    std::ops::ControlFlow::Continue(())
                }
                Err(e) => {
                    failed = Some(e);
                    std::ops::ControlFlow::Break(())
                }
            }
        }
        pt_perf::synth::Event::Error(t) => {
            feed.stats.problems.push(format!(
                "instruction trace error type 1 cpu {} pid {} tid {} ip {:#x} code {}: {}",
                t.cpu, t.pid, t.tid, t.ip, t.code, t.msg
            ));
            std::ops::ControlFlow::Continue(())
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    feed.switches_until(ex, u64::MAX)?;
    feed.stats.insns = synth.walked();
    feed.stats.hidden_errors = crate::input::hidden_errors(&synth);
    Ok(feed.stats)
}
