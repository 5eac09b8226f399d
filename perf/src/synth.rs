//! Samples from a perf.data session, as perf's intel-pt.c synthesizes them: the
//! queues' decoders ([`crate::decode`]) run in time order (perf's auxtrace heap),
//! each state becomes the samples `--itrace` asks for ([`Sample`]), and errors
//! become [`TraceError`]s.
//!
//! Between packets, the decoder hands out whole runs of states at once (the
//! fast path, [`Synth::set_fast_path`]). A consumer that implements
//! [`SampleSink`] ([`Synth::run_into`]) may take their samples in bulk as
//! well: runs of instruction samples ([`SampleSink::insns`]), runs of branch
//! samples ([`SampleSink::branches`]), or instruction samples as counts by
//! place in the code walker's cache ([`SampleSink::insn_counts`], for a sink
//! that only adds them up, as report does). A closure ([`Synth::run`]) gets
//! every sample one by one.
//!
//! ```no_run
//! use pt_perf::session::{Session, SessionOptions};
//! use pt_perf::itrace::SynthOpts;
//! use pt_perf::synth::{Event, Synth};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let file = pt_perf_data::MappedFile::open("perf.data")?;
//! let perf = file.parse()?;
//! let session = Session::new(&perf, SessionOptions::for_file("perf.data"))?;
//! let opts = SynthOpts::parse("i1i")?;
//! let mut synth = Synth::new(&session, opts);
//! synth.run(&mut |e: Event<'_>| {
//!     if let Event::Sample(s, _) = e {
//!         println!("{:x}", s.ip);
//!     }
//!     std::ops::ControlFlow::Continue(())
//! });
//! # Ok(())
//! # }
//! ```

use std::ops::ControlFlow;

use crate::session::Session;
use pt_decoder::image::Image;

use crate::auxtrace_heap::AuxtraceHeap;
use crate::code::{CodeWalker, ImageWalker};
use crate::decode::{self, sflags, ty, Buffer, Decoder, Params};
use crate::itrace::{self, PeriodType, SynthOpts};
use crate::sample::{flags, Kind, Sample, TraceError};

/// One entry of a synthesized branch stack (`--itrace=l`), perf's
/// `struct branch_entry` as intel-pt.c fills it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BranchEntry {
    /// Branch source.
    pub from: u64,
    /// Branch target.
    pub to: u64,
    /// In a transaction.
    pub in_tx: bool,
    /// A transaction abort.
    pub abort: bool,
}

/// A sample's call chain and branch stack (`--itrace=g`, `l`); empty unless asked
/// for.
#[derive(Clone, Debug, Default)]
pub struct Stacks {
    /// The sample's IP then the return addresses, innermost first (perf's chain
    /// without its context markers).
    pub callchain: Vec<u64>,
    /// The last branches, latest first.
    pub branches: Vec<BranchEntry>,
}

/// perf's thread stack (thread-stack.c) of one thread: the return addresses of
/// the calls seen, and a ring of the last branches.
#[derive(Default)]
struct ThreadStack {
    stack: Vec<(u64, bool)>,
    trace_nr: u64,
    br: Vec<BranchEntry>,
    br_pos: usize,
    br_nr: usize,
}

impl ThreadStack {
    fn flush(&mut self) {
        self.stack.clear();
        self.br_pos = 0;
        self.br_nr = 0;
    }

    fn pop(&mut self, ret_addr: u64) {
        if let Some(i) = self.stack.iter().rposition(|&(r, _)| r == ret_addr) {
            self.stack.truncate(i);
        }
    }

    fn pop_trace_end(&mut self) {
        while self.stack.last().is_some_and(|&(_, te)| te) {
            self.stack.pop();
        }
    }

    /// perf's `thread_stack__event`.
    #[allow(clippy::too_many_arguments)]
    fn event(
        &mut self,
        f: u32,
        from: u64,
        to: u64,
        insn_len: u8,
        trace_nr: u64,
        callstack: bool,
        br_sz: usize,
    ) {
        if trace_nr != self.trace_nr {
            if self.trace_nr != 0 {
                self.flush();
            }
            self.trace_nr = trace_nr;
        }
        if br_sz != 0 {
            if self.br.len() != br_sz {
                self.br = vec![BranchEntry::default(); br_sz];
            }
            if self.br_pos == 0 {
                self.br_pos = br_sz;
            }
            self.br_pos -= 1;
            self.br[self.br_pos] = BranchEntry {
                from,
                to,
                in_tx: f & flags::IN_TX != 0,
                abort: f & flags::TX_ABORT != 0,
            };
            if self.br_nr < br_sz {
                self.br_nr += 1;
            }
        }
        if !callstack {
            return;
        }
        if f & flags::CALL != 0 {
            if to == 0 {
                return;
            }
            let ret = from.wrapping_add(u64::from(insn_len));
            if ret == to {
                return;
            }
            self.stack.push((ret, f & flags::TRACE_END != 0));
        } else if f & flags::TRACE_BEGIN != 0 {
            self.pop(to);
            self.pop_trace_end();
        } else if f & flags::RETURN != 0 && from != 0 {
            self.pop(to);
        }
    }

    /// perf's `thread_stack__br_sample`.
    fn br_sample(&self, sz: usize, out: &mut Vec<BranchEntry>) {
        out.clear();
        if self.br_nr == 0 {
            return;
        }
        let nr = self.br_nr.min(sz);
        let first = (self.br.len() - self.br_pos).min(nr);
        out.extend_from_slice(&self.br[self.br_pos..self.br_pos + first]);
        if self.br_nr >= self.br.len() {
            let rest = self.br_pos.min(nr - first);
            out.extend_from_slice(&self.br[..rest]);
        }
    }

    /// perf's `thread_stack__sample` (user-space chains: no context markers).
    fn sample(&self, ip: u64, sz: usize, out: &mut Vec<u64>) {
        out.clear();
        if sz < 2 {
            return;
        }
        out.push(ip);
        let n = self.stack.len().min(sz - 2);
        out.extend(self.stack.iter().rev().take(n).map(|&(r, _)| r));
    }
}

/// What the synthesizer hands out.
#[derive(Clone, Copy, Debug)]
pub enum Event<'e> {
    /// A sample, with its call chain and branch stack.
    Sample(&'e Sample, &'e Stacks),
    /// A decoder error.
    Error(&'e TraceError),
}

/// The consumer's answer: go on or stop (a closed pipe).
pub type Flow = ControlFlow<()>;

/// Where [`Synth::run_into`] hands out what it synthesizes.
pub trait SampleSink {
    /// A sample or an error.
    fn event(&mut self, e: Event<'_>) -> Flow;

    /// An instruction sample (`first`) and, right after it, one more for each
    /// of `more`: each the same as `first` but for its IP, instruction length
    /// and bytes (`ip`, `insn_len`, `insn`), with a period of 1 and no IPC
    /// counts. By default, each handed to [`SampleSink::event`] in turn.
    fn insns(&mut self, first: &Sample, stacks: &Stacks, more: &[decode::PlainInsn]) -> Flow {
        each_insn(first, more, |s| self.event(Event::Sample(s, stacks)))
    }

    /// Branch samples of period 1 without IPC counts, one for each of `steps`
    /// (branches taken: each a [`decode::Step`] with its branch state): each
    /// the same as `like` but for its source and target (`ip`, `addr`), its
    /// instruction (`insn_len`, `insn`) and flags (its operation's added to
    /// `like`'s). By default, each handed to [`SampleSink::event`] in turn.
    fn branches(&mut self, like: &Sample, stacks: &Stacks, steps: &[decode::Step]) -> Flow {
        each_branch(like, steps, |s| self.event(Event::Sample(s, stacks)))
    }

    /// Whether the sink takes instruction samples of period 1 as counts by
    /// place ([`SampleSink::insn_counts`]), in any order with its other
    /// samples. Asked once, when the run starts.
    fn takes_counts(&self) -> bool {
        false
    }

    /// Instruction samples of period 1, one at each of the walker's
    /// instructions `spans` name (`[cache, first, n]`: `n` from its `first`,
    /// [`CodeWalker::plain_insns`]), for a sink that counts samples by place
    /// ([`SampleSink::takes_counts`]): of each, only the IP, instruction length
    /// and bytes are its own; the event, thread, process, CPU, time and code
    /// image are `like`'s; flags, target and IPC counts are not given (a
    /// branch's instruction sample has its flags and target in perf's, not
    /// here). By default, each as `like` but for those to [`SampleSink::insns`].
    fn insn_counts(&mut self, like: &Sample, walker: &CodeWalker, spans: &[[u32; 3]]) -> Flow {
        for &[ci, first, n] in spans {
            let insns = walker.plain_insns([ci, first], n);
            if let Some((p, more)) = insns.split_first() {
                let mut s = *like;
                (s.ip, s.insn_len, s.insn, s.period) = (p.ip, p.len, p.bytes, 1);
                (s.insn_cnt, s.cyc_cnt) = (0, 0);
                self.insns(&s, &Stacks::default(), more)?;
            }
        }
        Flow::Continue(())
    }
}

/// The samples a run of branch samples stands for ([`SampleSink::branches`]),
/// one by one to `f`.
pub fn each_branch(
    like: &Sample,
    steps: &[decode::Step],
    mut f: impl FnMut(&Sample) -> Flow,
) -> Flow {
    for step in steps {
        f(&branch_sample(like, step))?;
    }
    Flow::Continue(())
}

/// The branch sample of `step` ([`SampleSink::branches`]): `like` but for the
/// branch's source, target, instruction and flags.
pub fn branch_sample(like: &Sample, step: &decode::Step) -> Sample {
    let mut s = *like;
    (s.ip, s.addr) = (step.from_ip, step.to_ip);
    s.flags = like.flags | decode::insn::op_flags(step.op);
    (s.insn_len, s.insn) = (step.len, step.insn);
    s
}

/// The samples a run of instruction samples stands for ([`SampleSink::insns`]),
/// one by one to `f`.
pub fn each_insn(
    first: &Sample,
    more: &[decode::PlainInsn],
    mut f: impl FnMut(&Sample) -> Flow,
) -> Flow {
    f(first)?;
    let mut s = *first;
    s.period = 1;
    s.insn_cnt = 0;
    s.cyc_cnt = 0;
    for p in more {
        s.ip = p.ip;
        s.insn_len = p.len;
        s.insn = p.bytes;
        f(&s)?;
    }
    Flow::Continue(())
}

/// A closure as a [`SampleSink`] of one sample at a time.
struct EachSample<'f>(&'f mut dyn FnMut(Event<'_>) -> Flow);

impl SampleSink for EachSample<'_> {
    fn event(&mut self, e: Event<'_>) -> Flow {
        (self.0)(e)
    }
}

/// The fields of a decoder state the samples take (a small copy of it).
#[derive(Clone, Copy)]
struct Brief {
    type_: u32,
    flags: u32,
    cbr: u32,
    from_ip: u64,
    to_ip: u64,
    tot_insn_cnt: u64,
    tot_cyc_cnt: u64,
    cycles: u64,
    trace_nr: u64,
    cbr_payload: u64,
    psb_offset: u64,
    ptw_payload: u64,
    mwait_payload: u64,
    pwre_payload: u64,
    pwrx_payload: u64,
}

impl Brief {
    fn of(s: &decode::State) -> Self {
        Brief {
            type_: s.type_,
            flags: s.flags,
            cbr: s.cbr,
            from_ip: s.from_ip,
            to_ip: s.to_ip,
            tot_insn_cnt: s.tot_insn_cnt,
            tot_cyc_cnt: s.tot_cyc_cnt,
            cycles: s.cycles,
            trace_nr: s.trace_nr,
            cbr_payload: s.cbr_payload,
            psb_offset: s.psb_offset,
            ptw_payload: s.ptw_payload,
            mwait_payload: s.mwait_payload,
            pwre_payload: s.pwre_payload,
            pwrx_payload: s.pwrx_payload,
        }
    }
}

/// One queue's decoding (perf's `struct intel_pt_queue`).
struct PtQueue<'s> {
    /// The session's queue index.
    idx: usize,
    dec: Decoder<'s>,

    have_sample: bool,
    timestamp: u64,
    flags: u32,
    insn_len: u8,
    insn: [u8; 16],
    last_insn_cnt: u64,
    ipc_insn_cnt: u64,
    ipc_cyc_cnt: u64,
    sample_ipc: bool,
    last_in_insn_cnt: u64,
    last_in_cyc_cnt: u64,
    last_br_insn_cnt: u64,
    last_br_cyc_cnt: u64,
    cbr_seen: u32,
    pid: i32,
    tid: i32,
    cpu: i32,
    image: &'s Image,
    /// perf time at which the thread or its code changes next.
    next_change: Option<u64>,
    /// The time the context was last looked up at (`Some(None)`: without a time).
    ctx_time: Option<Option<u64>>,
    /// The TSC it was checked at last.
    ctx_tsc: u64,
    /// The last TSC converted to perf time, and the time.
    time_of: (u64, u64),
}

/// Synthesizes the samples of a session (see the [module docs](self)).
pub struct Synth<'s, 'a> {
    session: &'s Session<'a>,
    opts: SynthOpts,
    walker: CodeWalker,
    queues: Vec<PtQueue<'s>>,
    timeless: bool,
    branches_filter: u32,
    num_events: u64,
    kernel_start: u64,
    cbr2khz: u64,
    max_non_turbo_ratio: u32,
    cap_event_trace: bool,
    use_thread_stack: bool,
    callstack: bool,
    br_stack_sz: usize,
    threads: std::collections::HashMap<i32, ThreadStack>,
    stacks: Stacks,
    /// Called now and then with (trace bytes decoded, trace bytes in all).
    progress: Option<Box<dyn FnMut(u64, u64) + 's>>,
    total_bytes: u64,
    ticks: u32,
    /// The fast path for samples of every instruction applies.
    fast_runs: bool,
    run: Vec<decode::Step>,
    /// States that came through the fast path.
    fast_states: u64,
    /// The sink takes instruction samples as counts ([`SampleSink::takes_counts`]).
    counting: bool,
    /// Spans of counted instruction samples, reused from run to run.
    spans: Vec<[u32; 3]>,
    /// Decoder states with an error (whether `--itrace` shows them or not).
    trace_errors: u64,
}

/// Nanoseconds to TSC ticks with the session's conversion (perf's
/// `intel_pt_ns_to_ticks`).
fn ns_to_ticks(session: &Session<'_>, ns: u64) -> u64 {
    let info = session.info();
    if info.time_mult == 0 {
        return 0;
    }
    let shift = info.time_shift.min(63);
    let quot = ns / info.time_mult;
    let rem = ns % info.time_mult;
    (quot << shift).wrapping_add((rem << shift) / info.time_mult)
}

/// perf's PT config bits used here.
const CFG_PASS_THRU: u64 = 1 << 0;
const CFG_BRANCH_EN: u64 = 1 << 13;

/// Decoder states taken at once on the fast path ([`Decoder::take_run`]): few
/// enough that a run's steps stay in the first-level cache between the decoder
/// writing them and the samples reading them.
const RUN_STEPS: usize = 256;

/// IPC of a sample (perf's `intel_pt_synth_*_sample`): the cycles and the
/// instructions since the last sample of its kind that had cycles (`last`:
/// instructions, cycles), counted only when cycles moved on; `last` moves on then.
fn ipc_since(last: (&mut u64, &mut u64), insns: u64, cyc: u64, sample_ipc: bool) -> (u64, u64) {
    let cyc_cnt = if sample_ipc {
        cyc.wrapping_sub(*last.1)
    } else {
        0
    };
    if cyc_cnt == 0 {
        return (0, 0);
    }
    let insn_cnt = insns.wrapping_sub(*last.0);
    (*last.0, *last.1) = (insns, cyc);
    (cyc_cnt, insn_cnt)
}

impl<'s, 'a> Synth<'s, 'a> {
    /// A synthesizer of `session`'s samples for `opts` (perf's defaults for `perf
    /// script` if `opts.set` is false).
    pub fn new(session: &'s Session<'a>, opts: SynthOpts) -> Self {
        let mut opts = if opts.set {
            opts
        } else {
            let mut d = SynthOpts::default_for(true);
            d.thread_stack = opts.thread_stack;
            d
        };
        let timeless = !session.is_timed() || opts.timeless_decoding;
        if timeless && opts.period_type == PeriodType::Nanosecs {
            // perf has no time to count in: it samples every instruction.
            opts.period = opts.period.max(1);
        }
        let mut branches_filter = 0;
        if opts.calls {
            branches_filter |= flags::CALL | flags::ASYNC | flags::TRACE_END;
        }
        if opts.returns {
            branches_filter |= flags::RETURN | flags::TRACE_BEGIN;
        }
        let max_non_turbo_ratio = u32::from(session.config().nom_freq);
        let tsc_freq = ns_to_ticks(session, 1_000_000_000);
        let cbr2khz = if max_non_turbo_ratio != 0 {
            tsc_freq / u64::from(max_non_turbo_ratio) / 1000
        } else {
            0
        };
        let kernel_start = session
            .mappings()
            .iter()
            .filter(|m| m.kind == crate::session::MappingKind::Kernel)
            .map(|m| m.start)
            .min()
            .unwrap_or(1 << 63);
        let mut s = Synth {
            session,
            opts,
            walker: CodeWalker::new(),
            queues: Vec::new(),
            timeless,
            branches_filter,
            num_events: 0,
            kernel_start,
            cbr2khz,
            max_non_turbo_ratio,
            cap_event_trace: session.info().cap_event_trace.unwrap_or(0) != 0,
            use_thread_stack: opts.callchain || opts.thread_stack || opts.last_branch,
            callstack: opts.callchain || opts.thread_stack,
            br_stack_sz: if opts.last_branch {
                opts.last_branch_sz as usize
            } else {
                0
            },
            threads: Default::default(),
            stacks: Stacks::default(),
            fast_runs: false,
            run: Vec::new(),
            fast_states: 0,
            counting: false,
            spans: Vec::new(),
            trace_errors: 0,
            progress: None,
            total_bytes: session
                .queues()
                .iter()
                .flat_map(|q| q.pieces.iter())
                .map(|p| p.data.len() as u64)
                .sum(),
            ticks: 0,
        };
        s.fast_runs = s.fast_path_applies();
        s.setup_queues();
        s
    }

    /// Every instruction sampled or none, and nothing asked of a sample but
    /// itself (no call chain, branch stack or thread stack): the decoder may hand
    /// out runs of states at once.
    fn fast_path_applies(&self) -> bool {
        let o = &self.opts;
        let p = self.params();
        (!o.instructions || (p.period_type == decode::PeriodType::Instructions && p.period == 1))
            && o.initial_skip == 0
            && o.quick == 0
            && !o.callchain
            && !o.last_branch
            && !o.thread_stack
            && !o.approx_ipc
    }

    /// Turns the fast path off, or back on where it applies. The samples are
    /// the same either way (the tests compare them); off, every state goes
    /// through perf's step-by-step decode.
    pub fn set_fast_path(&mut self, on: bool) {
        self.fast_runs = on && self.fast_path_applies();
    }

    /// How many decoder states came through the fast path so far.
    pub fn fast_states(&self) -> u64 {
        self.fast_states
    }

    /// Calls `f` now and then with the trace bytes decoded so far and the bytes
    /// in all (for a progress bar).
    pub fn on_progress(&mut self, f: impl FnMut(u64, u64) + 's) {
        self.progress = Some(Box::new(f));
    }

    fn tick(&mut self) {
        self.ticks = self.ticks.wrapping_add(1);
        if self.ticks & 0xffff != 0 {
            return;
        }
        let done: u64 = self.queues.iter().map(|q| q.dec.position().pos).sum();
        let total = self.total_bytes;
        if let Some(p) = &mut self.progress {
            p(done.min(total), total);
        }
    }

    /// The trace bytes of all queues.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// The options in effect.
    pub fn opts(&self) -> &SynthOpts {
        &self.opts
    }

    /// Instructions walked so far (all queues).
    pub fn walked(&self) -> u64 {
        self.walker.walked
    }

    fn params(&self) -> Params {
        let s = self.session;
        let info = s.info();
        let config = s.pt_config();
        let mut p = Params {
            return_compression: info.noretcomp_bit == 0 || config & info.noretcomp_bit == 0,
            branch_enable: !(config & CFG_PASS_THRU != 0 && config & CFG_BRANCH_EN == 0),
            ctl: config,
            max_non_turbo_ratio: self.max_non_turbo_ratio,
            mtc_period: u32::from(s.config().mtc_freq),
            tsc_ctc_ratio_n: info.mtc.map_or(0, |m| m.tsc_ctc_ratio_n as u32),
            tsc_ctc_ratio_d: info.mtc.map_or(0, |m| m.tsc_ctc_ratio_d as u32),
            quick: self.opts.quick,
            ..Params::default()
        };
        if self.opts.instructions {
            if self.opts.period != 0 {
                match self.opts.period_type {
                    PeriodType::Instructions => {
                        p.period_type = decode::PeriodType::Instructions;
                        p.period = self.opts.period;
                    }
                    PeriodType::Ticks => {
                        p.period_type = decode::PeriodType::Ticks;
                        p.period = self.opts.period;
                    }
                    PeriodType::Nanosecs => {
                        p.period_type = decode::PeriodType::Ticks;
                        p.period = ns_to_ticks(s, self.opts.period);
                    }
                }
            }
            if p.period == 0 {
                p.period_type = decode::PeriodType::Instructions;
                p.period = 1;
            }
        }
        p
    }

    fn setup_queues(&mut self) {
        let params = self.params();
        let snapshot = self.session.snapshot();
        // perf numbers the AUXTRACE buffers in file order, over all queues.
        let mut offsets: Vec<u64> = self
            .session
            .queues()
            .iter()
            .flat_map(|q| q.pieces.iter().map(|p| p.record_offset))
            .collect();
        offsets.sort_unstable();
        for (idx, q) in self.session.queues().iter().enumerate() {
            if q.pieces.is_empty() {
                continue;
            }
            let bufs: Vec<Buffer<'s>> = q
                .pieces
                .iter()
                .enumerate()
                .map(|(i, p)| Buffer {
                    data: p.data,
                    consecutive: i > 0 && !snapshot,
                    reference: p.reference,
                    trace_nr: offsets.partition_point(|&o| o < p.record_offset) as u64 + 1,
                })
                .collect();
            let ctx = self.session.running(idx, None);
            self.queues.push(PtQueue {
                idx,
                dec: Decoder::new(params, bufs),
                have_sample: false,
                timestamp: 0,
                flags: 0,
                insn_len: 0,
                insn: [0; 16],
                last_insn_cnt: 0,
                ipc_insn_cnt: 0,
                ipc_cyc_cnt: 0,
                sample_ipc: false,
                last_in_insn_cnt: 0,
                last_in_cyc_cnt: 0,
                last_br_insn_cnt: 0,
                last_br_cyc_cnt: 0,
                cbr_seen: u32::MAX,
                pid: ctx.pid.map_or(-1, |p| p as i32),
                tid: ctx.tid.map_or(-1, |t| t as i32),
                cpu: q.cpu.map_or(-1, |c| c as i32),
                image: self.session.image(ctx.pid, None),
                next_change: None,
                ctx_time: None,
                ctx_tsc: 0,
                time_of: (u64::MAX, 0),
            });
        }
    }

    /// The thread and code of queue `qi` at its current time.
    fn update_context(&mut self, qi: usize) {
        let s = self.session;
        let q = &mut self.queues[qi];
        if q.ctx_time.is_some() && q.ctx_tsc == q.timestamp {
            return;
        }
        q.ctx_tsc = q.timestamp;
        let time = (!self.timeless && q.timestamp != 0).then(|| s.tsc_to_time(q.timestamp));
        // Still valid: looked up at a time, and no change since (untimed: once).
        let valid = match (q.ctx_time, time) {
            (Some(None), None) => true,
            (Some(Some(_)), Some(t)) => q.next_change.map_or(true, |n| t < n),
            _ => false,
        };
        if valid {
            return;
        }
        let ctx = s.running(q.idx, time);
        q.pid = ctx.pid.map_or(-1, |p| p as i32);
        q.tid = ctx.tid.map_or(-1, |t| t as i32);
        if q.cpu < 0 {
            if let Some(c) = ctx.cpu {
                q.cpu = c as i32;
            }
        }
        q.image = s.image(ctx.pid, time);
        q.next_change = time.and_then(|t| s.next_change(q.idx, &ctx, t));
        q.ctx_time = Some(time);
    }

    /// Decodes the queue's next state (perf's `ptq->state` is the decoder's).
    fn decode(&mut self, qi: usize) {
        self.update_context(qi);
        let q = &mut self.queues[qi];
        let mut code = ImageWalker::new(&mut self.walker, q.image);
        q.dec.decode(&mut code);
        match q.dec.state().err {
            None | Some(decode::Error::NoData) => {}
            Some(_) => self.trace_errors += 1,
        }
    }

    /// The decoder's errors so far, those `--itrace` leaves out too (perf shows
    /// them only with `e`; a tool says how many there were).
    pub fn trace_errors(&self) -> u64 {
        self.trace_errors
    }

    /// The walker of the code (whose caches [`SampleSink::insn_counts`] names).
    pub fn walker(&self) -> &CodeWalker {
        &self.walker
    }

    /// Runs every queue to its end, handing each sample and error to `sink` in
    /// perf's order; stops early if `sink` says so.
    pub fn run(&mut self, sink: &mut dyn FnMut(Event<'_>) -> Flow) -> Flow {
        self.run_into(&mut EachSample(sink))
    }

    /// As [`Synth::run`], to a [`SampleSink`] that may take runs of instruction
    /// samples at once ([`SampleSink::insns`]).
    pub fn run_into(&mut self, sink: &mut dyn SampleSink) -> Flow {
        self.counting = sink.takes_counts();
        if self.timeless {
            for (_, qi, time) in self.truncations() {
                self.lost_error(qi, time.unwrap_or(0), sink)?;
            }
            let order: Vec<usize> = self.session.timeless_order().to_vec();
            let mut done = vec![false; self.queues.len()];
            for idx in order {
                if let Some(qi) = self.queues.iter().position(|q| q.idx == idx) {
                    if !done[qi] {
                        done[qi] = true;
                        let mut ts = u64::MAX;
                        self.run_decoder(qi, &mut ts, sink)?;
                    }
                }
            }
            for (qi, done) in done.into_iter().enumerate() {
                if !done {
                    let mut ts = u64::MAX;
                    self.run_decoder(qi, &mut ts, sink)?;
                }
            }
            return Flow::Continue(());
        }
        // Each queue's first timestamp puts it on the heap (perf's
        // intel_pt_setup_queue).
        let mut heap = AuxtraceHeap::new();
        for qi in 0..self.queues.len() {
            loop {
                self.decode(qi);
                let st = self.queues[qi].dec.state();
                if let Some(e) = st.err {
                    if e == decode::Error::NoData {
                        break;
                    }
                    continue;
                }
                if st.timestamp != 0 {
                    let q = &mut self.queues[qi];
                    q.timestamp = q.dec.state().timestamp;
                    q.have_sample = true;
                    self.sample_flags(qi);
                    heap.add(qi, self.queues[qi].timestamp);
                    break;
                }
            }
        }
        // perf decodes every queue up to the time of each timed record before it
        // handles the record (intel_pt_process_event): where queues stop decides
        // which of two threads at the same timestamp the heap runs first. AUX
        // records that say data was lost are errors at their time (perf's
        // intel_pt_lost), between the samples before and after it.
        let truncations = self.truncations();
        // One without a time is an error before any sample.
        for &(_, qi, time) in &truncations {
            if time.is_none() {
                self.lost_error(qi, 0, sink)?;
            }
        }
        for i in 0..self.session.event_times().len() {
            let e = self.session.event_times()[i];
            let tsc = self.session.time_to_tsc(e.time);
            self.process_queues(&mut heap, tsc, sink)?;
            let first = truncations.partition_point(|t| t.0 < e.record_offset);
            for &(offset, qi, _) in &truncations[first..] {
                if offset != e.record_offset {
                    break;
                }
                self.lost_error(qi, e.time, sink)?;
            }
        }
        self.process_queues(&mut heap, u64::MAX, sink)
    }

    /// The AUX records with the truncated flag, by file offset: (record offset,
    /// queue, perf time).
    fn truncations(&self) -> Vec<(u64, usize, Option<u64>)> {
        let mut v = Vec::new();
        for (qi, q) in self.queues.iter().enumerate() {
            for l in &self.session.queues()[q.idx].lost {
                if l.kind == crate::session::LostKind::Truncated {
                    v.push((l.record_offset, qi, l.time));
                }
            }
        }
        v.sort();
        v
    }

    /// perf's `intel_pt_lost`: "Lost trace data" for the thread the AUX record names.
    fn lost_error(&mut self, qi: usize, time: u64, sink: &mut dyn SampleSink) -> Flow {
        if !self.opts.errors || self.opts.error_minus_flags & itrace::ERR_FLG_DATA_LOST != 0 {
            return Flow::Continue(());
        }
        let q = &self.queues[qi];
        let ctx = self.session.running(q.idx, Some(time));
        let e = TraceError {
            code: decode::Error::Lost.code(),
            msg: decode::Error::Lost.message(),
            cpu: ctx.cpu.map_or(-1, |c| c as i32),
            pid: ctx.pid.map_or(-1, |p| p as i32),
            tid: ctx.tid.map_or(-1, |t| t as i32),
            ip: 0,
            time,
            queue: q.idx as u32,
        };
        sink.event(Event::Error(&e))
    }

    /// perf's `intel_pt_process_queues`: runs the queues in time order until each
    /// has reached `timestamp`.
    fn process_queues(
        &mut self,
        heap: &mut AuxtraceHeap,
        timestamp: u64,
        sink: &mut dyn SampleSink,
    ) -> Flow {
        while let Some(top) = heap.top() {
            if top.ordinal >= timestamp {
                break;
            }
            heap.pop();
            let mut ts = match heap.top() {
                Some(next) => next.ordinal.saturating_add(1).min(timestamp),
                None => timestamp,
            };
            if self.run_decoder(top.queue, &mut ts, sink)? {
                heap.add(top.queue, ts);
            }
        }
        Flow::Continue(())
    }

    /// perf's `intel_pt_run_decoder`: samples and decodes until the queue's time
    /// reaches `*ts` (`true`, `*ts` set to it) or its trace ends (`false`).
    fn run_decoder(
        &mut self,
        qi: usize,
        ts: &mut u64,
        sink: &mut dyn SampleSink,
    ) -> ControlFlow<(), bool> {
        loop {
            let sampled = self.queues[qi].have_sample;
            self.sample(qi, sink)?;
            if sampled && self.fast_runs {
                self.runs(qi, sink)?;
                self.tick();
            }
            self.decode(qi);
            self.tick();
            let st = self.queues[qi].dec.state();
            if let Some(e) = st.err {
                if e == decode::Error::NoData {
                    return ControlFlow::Continue(false);
                }
                self.queues[qi].timestamp = self.queues[qi].dec.state().est_timestamp;
                if self.opts.errors {
                    self.synth_error(qi, sink)?;
                }
                continue;
            }
            let (from_ip, to_ip, timestamp, est) =
                (st.from_ip, st.to_ip, st.timestamp, st.est_timestamp);
            let kernel_start = self.kernel_start;
            let timeless = self.timeless;
            let q = &mut self.queues[qi];
            q.have_sample = true;
            self.sample_flags(qi);
            let q = &mut self.queues[qi];
            if !timeless
                && (from_ip >= kernel_start || from_ip == 0)
                && to_ip != 0
                && to_ip < kernel_start
            {
                q.timestamp = est;
            } else if timestamp > q.timestamp {
                q.timestamp = timestamp;
            }
            if !timeless && q.timestamp >= *ts {
                *ts = q.timestamp;
                return ControlFlow::Continue(true);
            }
        }
    }

    /// The fast path: the states the decoder would return one by one while it
    /// steps through the code between packets, taken at once
    /// ([`Decoder::take_run`]) and sampled as [`Synth::sample`] samples each
    /// (instruction and branch samples; nothing else happens in a run).
    fn runs(&mut self, qi: usize, sink: &mut dyn SampleSink) -> Flow {
        let mut run = std::mem::take(&mut self.run);
        let q = &mut self.queues[qi];
        let mut code = ImageWalker::new(&mut self.walker, q.image);
        let n = q
            .dec
            .take_run(&mut code, self.kernel_start, RUN_STEPS, &mut run);
        let r = if n == 0 {
            Flow::Continue(())
        } else if self.counting {
            self.count_run(qi, &run, sink)
        } else {
            self.sample_run(qi, &run, sink)
        };
        self.run = run;
        r
    }

    /// What a run's steps share, from the last one's state: its cycle count,
    /// whether samples take IPC, and the interrupt-disabled flag.
    fn run_shared(&self, qi: usize) -> (u64, bool, u32) {
        let st = self.queues[qi].dec.state();
        let iflag = if self.cap_event_trace && !st.to_iflag {
            flags::INTR_DISABLE
        } else {
            0
        };
        (st.tot_cyc_cnt, st.flags & sflags::SAMPLE_IPC != 0, iflag)
    }

    fn sample_run(&mut self, qi: usize, run: &[decode::Step], sink: &mut dyn SampleSink) -> Flow {
        if !self.opts.instructions && self.opts.branches && self.branches_filter == 0 {
            // Without instruction samples the decoder walks branch by branch:
            // every step is a branch and nothing else.
            debug_assert!(run.iter().all(|s| s.type_ == ty::BRANCH && s.plain == 0));
            return self.branch_run(qi, run, sink);
        }
        // What the steps share: the last one's state but for the step's fields.
        let (cyc, sample_ipc, iflag) = self.run_shared(qi);
        let (instructions, branches) = (self.opts.instructions, self.opts.branches);
        let filter = self.branches_filter;
        let mut s = self.prep(qi, Kind::Instructions);
        let q = &mut self.queues[qi];
        q.ipc_cyc_cnt = cyc;
        q.sample_ipc = sample_ipc;
        self.fast_states += run
            .iter()
            .map(|s| u64::from(s.plain) + u64::from(s.type_ != 0))
            .sum::<u64>();
        for step in run {
            if step.plain != 0 {
                // Plain instructions: instruction samples only, no flags, no IPC
                // but at the first after a change of the cycle count.
                s.kind = Kind::Instructions;
                s.addr = 0;
                s.flags = iflag;
                let insns = self.walker.plain_insns(step.plain_at, step.plain);
                if let Some((p, more)) = insns.split_first() {
                    // The first is sampled in full; the others follow it one
                    // instruction apart.
                    let tot = step.tot_before() + 1;
                    s.ip = p.ip;
                    s.insn_len = p.len;
                    s.insn = p.bytes;
                    s.period = tot.wrapping_sub(q.last_insn_cnt);
                    let last = (&mut q.last_in_insn_cnt, &mut q.last_in_cyc_cnt);
                    (s.cyc_cnt, s.insn_cnt) = ipc_since(last, tot, cyc, sample_ipc);
                    sink.insns(&s, &self.stacks, more)?;
                }
                let tot = step.tot_before() + insns.len() as u64;
                q.last_insn_cnt = tot;
                q.ipc_insn_cnt = tot;
            }
            if step.type_ == 0 {
                continue;
            }
            let tot = step.tot_insn_cnt;
            q.ipc_insn_cnt = tot;
            s.ip = step.from_ip;
            s.addr = step.to_ip;
            s.flags = crate::decode::insn::op_flags(step.op) | iflag;
            s.insn_len = step.len;
            s.insn = step.insn;
            if instructions && step.type_ & ty::INSTRUCTION != 0 {
                s.kind = Kind::Instructions;
                s.period = tot.wrapping_sub(q.last_insn_cnt);
                let last = (&mut q.last_in_insn_cnt, &mut q.last_in_cyc_cnt);
                (s.cyc_cnt, s.insn_cnt) = ipc_since(last, tot, cyc, sample_ipc);
                q.last_insn_cnt = tot;
                sink.event(Event::Sample(&s, &self.stacks))?;
            }
            if branches && step.type_ & ty::BRANCH != 0 && (filter == 0 || filter & s.flags != 0) {
                s.kind = Kind::Branches;
                s.period = 1;
                let last = (&mut q.last_br_insn_cnt, &mut q.last_br_cyc_cnt);
                (s.cyc_cnt, s.insn_cnt) = ipc_since(last, tot, cyc, sample_ipc);
                sink.event(Event::Sample(&s, &self.stacks))?;
            }
        }
        Flow::Continue(())
    }

    /// [`Synth::sample_run`] of a run of branch samples alone (no instruction
    /// samples, no filter): handed to the sink in stretches
    /// ([`SampleSink::branches`]) between the samples that have IPC counts.
    fn branch_run(&mut self, qi: usize, run: &[decode::Step], sink: &mut dyn SampleSink) -> Flow {
        let (cyc, sample_ipc, iflag) = self.run_shared(qi);
        let mut like = self.prep(qi, Kind::Branches);
        like.flags = iflag;
        (like.period, like.cyc_cnt, like.insn_cnt) = (1, 0, 0);
        self.fast_states += run.len() as u64;
        let q = &mut self.queues[qi];
        (q.ipc_cyc_cnt, q.sample_ipc) = (cyc, sample_ipc);
        let mut from = 0;
        for (i, step) in run.iter().enumerate() {
            // Cycles moved on since the last branch sample: this one has IPC
            // counts, and is a sample of its own.
            let q = &mut self.queues[qi];
            let last = (&mut q.last_br_insn_cnt, &mut q.last_br_cyc_cnt);
            let (cyc_cnt, insn_cnt) = ipc_since(last, step.tot_insn_cnt, cyc, sample_ipc);
            if cyc_cnt == 0 {
                continue;
            }
            sink.branches(&like, &self.stacks, &run[from..i])?;
            from = i + 1;
            let mut s = branch_sample(&like, step);
            (s.cyc_cnt, s.insn_cnt) = (cyc_cnt, insn_cnt);
            sink.event(Event::Sample(&s, &self.stacks))?;
        }
        if let Some(last) = run.last() {
            self.queues[qi].ipc_insn_cnt = last.tot_insn_cnt;
        }
        sink.branches(&like, &self.stacks, &run[from..])
    }

    /// [`Synth::sample_run`] for a sink that takes counts: every instruction
    /// sample of period 1 (the instructions of a step that follow the last one
    /// sampled) goes into one list of spans, handed over at the end of the run;
    /// the rest as `sample_run` samples it.
    fn count_run(&mut self, qi: usize, run: &[decode::Step], sink: &mut dyn SampleSink) -> Flow {
        let (cyc, sample_ipc, _) = self.run_shared(qi);
        let like = self.prep(qi, Kind::Instructions);
        let mut spans = std::mem::take(&mut self.spans);
        spans.clear();
        let mut r = self.count_steps(qi, run, &like, (cyc, sample_ipc), &mut spans, sink);
        if r.is_continue() {
            r = self.hand_counts(&like, &mut spans, sink);
        }
        self.spans = spans;
        r
    }

    /// [`Synth::count_run`]'s steps: spans into `spans`, the rest sampled as
    /// [`Synth::sample_run`] does, after the spans before them.
    fn count_steps(
        &mut self,
        qi: usize,
        run: &[decode::Step],
        like: &Sample,
        (cyc, sample_ipc): (u64, bool),
        spans: &mut Vec<[u32; 3]>,
        sink: &mut dyn SampleSink,
    ) -> Flow {
        let branches = self.opts.branches;
        let mut from = 0;
        let mut last_insn_cnt = self.queues[qi].last_insn_cnt;
        let mut states = 0u64;
        // IPC moves on at the first sample only (the cycle count is the run's).
        let mut ipc_taken = false;
        for (i, step) in run.iter().enumerate() {
            let n = step.plain + u32::from(step.type_ & ty::INSTRUCTION != 0);
            let tot = step.tot_before();
            if n == 0 || tot != last_insn_cnt {
                continue;
            }
            let branch = branches && step.type_ & ty::BRANCH != 0;
            if from < i || !ipc_taken {
                let q = &mut self.queues[qi];
                q.last_insn_cnt = last_insn_cnt;
                if from < i {
                    // Steps before it that are not counted, as sample_run takes
                    // them.
                    self.fast_states += std::mem::take(&mut states);
                    self.hand_counts(like, spans, sink)?;
                    self.sample_run(qi, &run[from..i], sink)?;
                }
                let q = &mut self.queues[qi];
                (q.ipc_cyc_cnt, q.sample_ipc) = (cyc, sample_ipc);
                let last = (&mut q.last_in_insn_cnt, &mut q.last_in_cyc_cnt);
                ipc_since(last, tot + 1, cyc, sample_ipc);
                ipc_taken = true;
            }
            from = i + 1;
            last_insn_cnt = tot + u64::from(n);
            // (A branch state's count is sample_run's, below.)
            states += u64::from(step.plain) + u64::from(step.type_ != 0 && !branch);
            spans.push([step.plain_at[0], step.plain_at[1], n]);
            if branch {
                // Its branch sample, as sample_run makes it (the instruction
                // sample is counted).
                let mut b = *step;
                b.type_ &= !ty::INSTRUCTION;
                b.plain = 0;
                let q = &mut self.queues[qi];
                (q.last_insn_cnt, q.ipc_insn_cnt) = (last_insn_cnt, last_insn_cnt);
                self.hand_counts(like, spans, sink)?;
                self.sample_run(qi, std::slice::from_ref(&b), sink)?;
            }
        }
        self.fast_states += states;
        let q = &mut self.queues[qi];
        q.last_insn_cnt = last_insn_cnt;
        if from != 0 {
            q.ipc_insn_cnt = last_insn_cnt;
        }
        if from < run.len() {
            self.hand_counts(like, spans, sink)?;
            self.sample_run(qi, &run[from..], sink)?;
        }
        Flow::Continue(())
    }

    /// Hands the counted spans to `sink` (if any).
    fn hand_counts(
        &mut self,
        like: &Sample,
        spans: &mut Vec<[u32; 3]>,
        sink: &mut dyn SampleSink,
    ) -> Flow {
        if spans.is_empty() {
            return Flow::Continue(());
        }
        let r = sink.insn_counts(like, &self.walker, spans);
        spans.clear();
        r
    }

    /// perf's `intel_pt_sample_flags`.
    fn sample_flags(&mut self, qi: usize) {
        let cap_event_trace = self.cap_event_trace;
        let q = &mut self.queues[qi];
        let st = q.dec.state();
        q.insn_len = 0;
        if st.flags & sflags::ABORT_TX != 0 {
            q.flags = flags::BRANCH | flags::TX_ABORT;
        } else if st.flags & sflags::ASYNC != 0 {
            q.flags = if st.to_ip == 0 {
                flags::BRANCH | flags::ASYNC | flags::TRACE_END
            } else if st.from_nr && !st.to_nr {
                flags::BRANCH | flags::CALL | flags::ASYNC | flags::VMEXIT
            } else {
                flags::BRANCH | flags::CALL | flags::ASYNC | flags::INTERRUPT
            };
        } else {
            q.flags = if st.from_ip != 0 {
                crate::decode::insn::op_flags(st.insn_op)
            } else {
                flags::BRANCH | flags::TRACE_BEGIN
            };
            if st.flags & sflags::IN_TX != 0 {
                q.flags |= flags::IN_TX;
            }
            q.insn_len = st.insn_len;
            q.insn = st.insn;
        }
        if st.type_ & ty::TRACE_BEGIN != 0 {
            q.flags |= flags::TRACE_BEGIN;
        }
        if st.type_ & ty::TRACE_END != 0 {
            q.flags |= flags::TRACE_END;
        }
        if cap_event_trace {
            if st.type_ & ty::IFLAG_CHG != 0 {
                if !st.from_iflag {
                    q.flags |= flags::INTR_DISABLE;
                }
                if st.from_iflag != st.to_iflag {
                    q.flags |= flags::INTR_TOGGLE;
                }
            } else if !st.to_iflag {
                q.flags |= flags::INTR_DISABLE;
            }
        }
    }

    fn skip_event(&mut self) -> bool {
        if self.opts.initial_skip == 0 {
            return false;
        }
        let skip = self.num_events < self.opts.initial_skip;
        self.num_events += 1;
        skip
    }

    /// A sample of `kind` from the queue's state (perf's `intel_pt_prep_b_sample`).
    fn prep(&mut self, qi: usize, kind: Kind) -> Sample {
        let timeless = self.timeless;
        let session = self.session;
        let q = &mut self.queues[qi];
        let time = if timeless {
            None
        } else {
            if q.time_of.0 != q.timestamp {
                q.time_of = (q.timestamp, session.tsc_to_time(q.timestamp));
            }
            Some(q.time_of.1)
        };
        Sample {
            kind,
            ip: q.dec.state().from_ip,
            addr: q.dec.state().to_ip,
            flags: q.flags,
            time,
            tsc: q.timestamp,
            cpu: q.cpu,
            pid: q.pid,
            tid: q.tid,
            period: 1,
            insn_cnt: 0,
            cyc_cnt: 0,
            insn_len: q.insn_len,
            insn: q.insn,
            payload: 0,
            aux: 0,
            depth: 0,
            queue: q.idx as u32,
            code: q.image.stamp(),
        }
    }

    /// perf's `intel_pt_prep_sample`: a sample with the thread's call chain and
    /// branch stack (when asked for) in `self.stacks`.
    fn prep_full(&mut self, qi: usize, kind: Kind) -> Sample {
        let s = self.prep(qi, kind);
        if !self.opts.callchain && !self.opts.last_branch {
            return s;
        }
        self.stacks.callchain.clear();
        self.stacks.branches.clear();
        let ts = self.threads.get(&self.queues[qi].tid);
        if self.opts.callchain {
            let sz = self.opts.callchain_sz as usize + 1;
            match ts {
                Some(ts) => ts.sample(s.ip, sz, &mut self.stacks.callchain),
                None if sz >= 2 => self.stacks.callchain.push(s.ip),
                None => {}
            }
        }
        if self.opts.last_branch {
            if let Some(ts) = ts {
                ts.br_sample(self.br_stack_sz, &mut self.stacks.branches);
            }
        }
        s
    }

    /// perf's `intel_pt_prep_p_sample`: power and PTWRITE events with no IP have no
    /// flags.
    fn prep_p(&mut self, qi: usize, kind: Kind) -> Sample {
        let mut s = self.prep_full(qi, kind);
        if s.ip == 0 {
            s.flags = 0;
        }
        s
    }

    /// perf's `intel_pt_sample`.
    fn sample(&mut self, qi: usize, sink: &mut dyn SampleSink) -> Flow {
        if !self.queues[qi].have_sample {
            return Flow::Continue(());
        }
        // The thread is the one running at the state's time (perf has processed the
        // side-band up to it before it samples).
        self.update_context(qi);
        let q = &mut self.queues[qi];
        q.have_sample = false;
        let st = Brief::of(q.dec.state());
        q.ipc_insn_cnt = st.tot_insn_cnt;
        if self.opts.approx_ipc {
            q.ipc_cyc_cnt = st.cycles;
            q.sample_ipc = true;
        } else {
            q.ipc_cyc_cnt = st.tot_cyc_cnt;
            q.sample_ipc = st.flags & sflags::SAMPLE_IPC != 0;
        }

        if self.opts.pwr_events {
            if st.type_ & ty::PSB_EVT != 0 && !self.skip_event() {
                let mut s = self.prep_p(qi, Kind::Psb);
                s.flags = 0;
                s.payload = st.psb_offset;
                sink.event(Event::Sample(&s, &self.stacks))?;
            }
            if st.cbr != self.queues[qi].cbr_seen {
                let skip_cbr =
                    self.opts.initial_skip != 0 && self.num_events + 4 < self.opts.initial_skip;
                if !skip_cbr {
                    self.queues[qi].cbr_seen = st.cbr;
                    let mut s = self.prep_p(qi, Kind::Cbr);
                    s.payload = st.cbr_payload & 0xffff;
                    s.aux = self.max_non_turbo_ratio;
                    sink.event(Event::Sample(&s, &self.stacks))?;
                }
            }
            let pwr = [
                (ty::MWAIT_OP, Kind::Mwait, st.mwait_payload),
                (ty::PWR_ENTRY, Kind::Pwre, st.pwre_payload),
                (ty::EX_STOP, Kind::Exstop, 0),
                (ty::PWR_EXIT, Kind::Pwrx, st.pwrx_payload),
            ];
            for (bit, kind, payload) in pwr {
                if st.type_ & bit != 0 && !self.skip_event() {
                    let mut s = self.prep_p(qi, kind);
                    s.payload = payload;
                    if kind == Kind::Exstop {
                        s.aux = u32::from(st.flags & sflags::FUP_IP != 0);
                    }
                    sink.event(Event::Sample(&s, &self.stacks))?;
                }
            }
        }

        if self.opts.instructions && st.type_ & ty::INSTRUCTION != 0 && !self.skip_event() {
            let mut s = self.prep_full(qi, Kind::Instructions);
            let q = &mut self.queues[qi];
            s.period = if self.opts.quick != 0 {
                1
            } else {
                st.tot_insn_cnt.wrapping_sub(q.last_insn_cnt)
            };
            let last = (&mut q.last_in_insn_cnt, &mut q.last_in_cyc_cnt);
            (s.cyc_cnt, s.insn_cnt) = ipc_since(last, q.ipc_insn_cnt, q.ipc_cyc_cnt, q.sample_ipc);
            q.last_insn_cnt = st.tot_insn_cnt;
            sink.event(Event::Sample(&s, &self.stacks))?;
        }

        if self.opts.transactions && st.type_ & ty::TRANSACTION != 0 && !self.skip_event() {
            let s = self.prep_full(qi, Kind::Transactions);
            sink.event(Event::Sample(&s, &self.stacks))?;
        }

        if self.opts.ptwrites && st.type_ & ty::PTW != 0 && !self.skip_event() {
            let mut s = self.prep_p(qi, Kind::Ptwrite);
            s.payload = st.ptw_payload;
            s.aux = u32::from(st.flags & sflags::FUP_IP != 0);
            sink.event(Event::Sample(&s, &self.stacks))?;
        }

        if st.type_ & ty::BRANCH == 0 {
            return Flow::Continue(());
        }

        let tid = self.queues[qi].tid;
        let mut depth = 0;
        if self.use_thread_stack {
            let (f, len) = (self.queues[qi].flags, self.queues[qi].insn_len);
            let ts = self.threads.entry(tid).or_insert_with(|| ThreadStack {
                trace_nr: st.trace_nr,
                ..Default::default()
            });
            ts.event(
                f,
                st.from_ip,
                st.to_ip,
                len,
                st.trace_nr,
                self.callstack,
                self.br_stack_sz,
            );
            depth = ts.stack.len() as u32;
        } else if let Some(ts) = self.threads.get_mut(&tid) {
            if st.trace_nr != ts.trace_nr {
                if ts.trace_nr != 0 {
                    ts.flush();
                }
                ts.trace_nr = st.trace_nr;
            }
        }

        if self.opts.branches {
            let f = self.queues[qi].flags;
            if (self.branches_filter == 0 || self.branches_filter & f != 0) && !self.skip_event() {
                let mut s = self.prep(qi, Kind::Branches);
                s.depth = depth;
                self.stacks.callchain.clear();
                self.stacks.branches.clear();
                let q = &mut self.queues[qi];
                let last = (&mut q.last_br_insn_cnt, &mut q.last_br_cyc_cnt);
                (s.cyc_cnt, s.insn_cnt) =
                    ipc_since(last, q.ipc_insn_cnt, q.ipc_cyc_cnt, q.sample_ipc);
                sink.event(Event::Sample(&s, &self.stacks))?;
            }
        }
        Flow::Continue(())
    }

    /// perf's `intel_ptq_synth_error`.
    fn synth_error(&mut self, qi: usize, sink: &mut dyn SampleSink) -> Flow {
        let st = self.queues[qi].dec.state();
        let Some(err) = st.err else {
            return Flow::Continue(());
        };
        let minus = self.opts.error_minus_flags;
        if (err == decode::Error::Ovr && minus & itrace::ERR_FLG_OVERFLOW != 0)
            || (err == decode::Error::Lost && minus & itrace::ERR_FLG_DATA_LOST != 0)
        {
            return Flow::Continue(());
        }
        let q = &self.queues[qi];
        let e = TraceError {
            code: err.code(),
            msg: err.message(),
            cpu: q.cpu,
            pid: q.pid,
            tid: q.tid,
            ip: st.from_ip,
            time: if self.timeless {
                0
            } else {
                self.session.tsc_to_time(q.timestamp)
            },
            queue: q.idx as u32,
        };
        sink.event(Event::Error(&e))
    }

    /// The CBR-to-kHz factor (TSC frequency / maximum non-turbo ratio / 1000).
    pub fn cbr2khz(&self) -> u64 {
        self.cbr2khz
    }
}
