//! Recording on the simulator: an execution source in; one trace stream per
//! thread, the task events between them, and (optionally) the execution log
//! out. This is `ptperf record`'s simulator path, usable from tests.
//!
//! # The model
//! One simulated logical processor runs the threads of the execution one at
//! a time, in the order the source gives their items. Each thread has a
//! trace unit of its own ([`SimBackend`]: MSRs, output area, PT logic), as
//! perf's per-thread mode gives each thread its own AUX area: switching to
//! another thread clears TraceEn of the one that leaves (FUP and TIP.PGD if
//! packets were on) and sets it for the one that comes (PSB+ with TSC, then
//! TIP.PGE at its next instruction). The TSC is shared: a thread switched
//! out catches up with the time the others ran
//! ([`crate::backend::SimCpu::catch_up`]). Each thread's stream therefore
//! decodes to exactly that thread's instructions.
//!
//! Address filters are applied as the kernel applies perf's: resolved in
//! the thread's process when its trace unit starts and again whenever that
//! process's mappings change (the trace unit restarts with the new ranges).
//!
//! What happened to the tasks comes out as [`TaskEvent`]s stamped with the
//! TSC ([`Timed`]): command names, executable mappings, threads and
//! processes created and ended, the side-band perf writes as COMM, MMAP2,
//! FORK and EXIT records. A [`RecordSink`] takes the streams and the events;
//! [`PerfDataSink`] writes them as a perf.data file that perf itself decodes,
//! [`MemorySink`] keeps them in memory. Errors are [`RecordError`]s; those of
//! files name the file.
//!
//! Everything reaches the sink as it is produced and is made durable at each
//! checkpoint, so a recording that is killed leaves a file that decodes up
//! to where it ends. A snapshot request ([`SimRecording::snapshot_requests`],
//! perf's SIGUSR2 in `-S` mode) stops tracing for a moment, as perf disables
//! the event, and has the sink copy its AUX areas out ([`RecordSink::snapshot`]).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pt_hal::backend::{TraceBackend, TraceItem};
use pt_hal::config::TraceConfig;

use crate::backend::{SimBackend, SimOutput};
use crate::clock::Clock;
use crate::exec::log::LogWriter;
use crate::exec::{
    BlockRun, BlockTable, CloneKind, CodeMemory, Event, ExecError, ExecItem, ExecutionSource,
    ExitKind, Mapping, RunView, Step, StopReason, ThreadCursor, ThreadId,
};
use crate::pt::{PtError, SimParams};
use pt_encoder::hash::IntMap;

mod error;
mod filter;
mod memory;
mod perf;
use error::io_at;
pub use error::RecordError;
pub use filter::{resolve_filters, FilterError, FilterSpec, MAX_FILTERS};
pub use memory::MemorySink;
pub use perf::{
    debug_dir, sim_pmu_type, PerfDataOptions, PerfDataSink, SnapshotOptions, SIM_CPUID,
};

/// What to record.
#[derive(Clone, Debug)]
pub struct SimRecording {
    /// The trace configuration (address ranges come from `filters`).
    pub config: TraceConfig,
    /// Address filters, resolved when the program is mapped.
    pub filters: Vec<FilterSpec>,
    /// Clock and logic parameters.
    pub params: SimParams,
    /// The simulated output area (one per thread).
    pub output: SimOutput,
    /// Where to keep the execution log (None: not kept).
    pub log: Option<std::path::PathBuf>,
    /// Set (by a signal handler, another thread) to request a snapshot: the
    /// recorder clears it and calls [`RecordSink::snapshot`].
    pub snapshot_requests: Option<Arc<AtomicBool>>,
}

impl SimRecording {
    /// A recording with `config`, no filters, the default clock, output area
    /// and no execution log.
    pub fn new(config: TraceConfig) -> Self {
        SimRecording {
            config,
            filters: Vec::new(),
            params: SimParams::default(),
            output: SimOutput::default(),
            log: None,
            snapshot_requests: None,
        }
    }
}

/// One thread of a recording.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadSummary {
    /// The thread.
    pub id: ThreadId,
    /// Its creator (`None` for the first thread).
    pub parent: Option<ThreadId>,
    /// How it was created.
    pub kind: Option<CloneKind>,
    /// Its command name at the end (the file name of the last program its
    /// process ran, as Linux's `comm`).
    pub comm: String,
    /// Instructions it retired.
    pub instructions: u64,
    /// How it ended, if it did.
    pub exit: Option<ExitKind>,
}

/// What a recording produced.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecordSummary {
    /// Retired instructions (all threads).
    pub instructions: u64,
    /// Of which traced (PacketEn = 1).
    pub traced: u64,
    /// Trace bytes written (all threads).
    pub trace_bytes: u64,
    /// Bytes lost (overwritten or stopped).
    pub lost_bytes: u64,
    /// PSB+ sequences.
    pub psbs: u64,
    /// OVF packets.
    pub overflows: u64,
    /// How the first thread ended, if it did.
    pub exit: Option<ExitKind>,
    /// Why the recording ended early, if it did.
    pub stopped: Option<StopReason>,
    /// The error that ended the execution source early, if any.
    pub source_error: Option<String>,
    /// Every thread, in the order they appeared (the first thread first).
    pub threads: Vec<ThreadSummary>,
    /// Threads and processes that ran unrecorded (one line each).
    pub warnings: Vec<String>,
    /// Seconds spent in the recorder (not counting what the source did
    /// before it yielded its first item).
    pub seconds: f64,
}

/// What happened to the traced tasks; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskEvent {
    /// `thread` runs a new program: its first one (the start of the
    /// recording) or one it exec'd. perf: COMM with `PERF_RECORD_MISC_COMM_EXEC`.
    /// The thread's trace unit was switched off before (its trace goes on
    /// with a PSB+ at its next instruction).
    Comm {
        /// The thread (its process's, after an exec).
        thread: ThreadId,
        /// The command name (the file name of `path`, at most 15 bytes).
        comm: String,
        /// The program.
        path: String,
    },
    /// An executable mapping appeared in the process of `thread`. perf:
    /// MMAP2 (perf records executable mappings only, by default).
    Mmap {
        /// The thread whose system call (or exec) mapped it.
        thread: ThreadId,
        /// The mapping.
        mapping: Mapping,
    },
    /// The executable mappings of process `pid` are now these (after any
    /// change, unmapping included): what a sink that keys images to trace
    /// offsets needs. perf.data has no such record (MMAP2 covers it).
    Image {
        /// The process.
        pid: u32,
        /// Its executable mappings.
        maps: Vec<Mapping>,
    },
    /// `parent` created `child`. perf: FORK.
    Fork {
        /// The creator.
        parent: ThreadId,
        /// The new thread.
        child: ThreadId,
        /// Thread or process.
        kind: CloneKind,
    },
    /// A thread ended (its trace stream is complete). perf: EXIT.
    Exit {
        /// The thread.
        thread: ThreadId,
        /// How; `None` when the recording was stopped with the thread alive.
        how: Option<ExitKind>,
    },
}

/// A [`TaskEvent`] with the TSC at which it happened: after every trace
/// byte of an earlier time, before every byte of a later one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timed {
    /// Time stamp (TSC).
    pub tsc: u64,
    /// What happened.
    pub event: TaskEvent,
}

/// What a sink learns of a thread whose trace starts.
#[derive(Clone, Debug)]
pub struct ThreadStart<'a> {
    /// The thread.
    pub id: ThreadId,
    /// The first thread of the recording.
    pub first: bool,
    /// The configuration of its trace unit (address ranges resolved in its
    /// process).
    pub config: &'a TraceConfig,
    /// The simulation parameters (clock).
    pub params: &'a SimParams,
    /// The executable mappings of its process now.
    pub maps: &'a [Mapping],
    /// When its trace starts.
    pub tsc: u64,
}

/// Code bytes of a process, by pid (for code in no file, which a sink may
/// have to dump).
pub type ProcessMemory<'a> = &'a dyn Fn(u32) -> Option<&'a CodeMemory>;

/// Where a recording goes (see the module docs). Calls come in time order;
/// `tsc` is the TSC when the call is made (at or after the time of
/// everything delivered before); errors end the recording.
pub trait RecordSink {
    /// A thread's trace starts (before its first byte): perf's AUX area of
    /// the thread (and its ITRACE_START).
    fn open_thread(&mut self, start: &ThreadStart<'_>) -> Result<(), RecordError>;

    /// Bytes of `thread`'s trace, appended to its stream.
    fn trace(&mut self, thread: ThreadId, bytes: &[u8], tsc: u64) -> Result<(), RecordError>;

    /// `size` bytes of `thread`'s trace were lost (its output area was
    /// overwritten before they were read): perf's AUX record with the
    /// truncated flag.
    fn lost(&mut self, thread: ThreadId, size: u64, tsc: u64) -> Result<(), RecordError>;

    /// Something happened to the tasks. Every thread's trace up to this time
    /// has been delivered.
    fn task_event(&mut self, event: &Timed) -> Result<(), RecordError>;

    /// A snapshot was requested (every thread's trace up to now has been
    /// delivered and tracing is stopped): perf's `-S` mode copies its AUX
    /// areas out here. Other sinks ignore it.
    fn snapshot(&mut self, tsc: u64) -> Result<(), RecordError> {
        let _ = tsc;
        Ok(())
    }

    /// A checkpoint: make durable what was delivered, so that a recording
    /// killed later keeps a decodable prefix.
    fn checkpoint(&mut self, memory: ProcessMemory<'_>, tsc: u64) -> Result<(), RecordError>;

    /// The end; `summary` says how the recording went.
    fn finish(
        &mut self,
        summary: &RecordSummary,
        memory: ProcessMemory<'_>,
        tsc: u64,
    ) -> Result<(), RecordError>;
}

/// Instructions between checkpoints (progress report, files flushed).
pub const CHECKPOINT: u64 = 1 << 16;

/// The command name Linux gives a program: its file name, at most 15 bytes.
pub fn comm_of(path: &str) -> String {
    let name = path.rsplit('/').next().unwrap_or(path);
    let mut end = name.len().min(15);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_string()
}

fn exec_maps(maps: &[Mapping]) -> Vec<Mapping> {
    maps.iter().filter(|m| m.perms.exec).cloned().collect()
}

/// A thread the recorder follows.
struct Tracked {
    summary: ThreadSummary,
    /// Its trace unit, from its first instruction on.
    backend: Option<SimBackend>,
    /// The trace unit's configuration (address filters resolved).
    config: TraceConfig,
    ended: bool,
}

/// A process the recorder follows.
#[derive(Clone, Debug, Default)]
struct Proc {
    maps: Vec<Mapping>,
    path: String,
}

/// The recorder's state (see [`record_into`]).
struct Recorder<'r> {
    rec: &'r SimRecording,
    sink: &'r mut dyn RecordSink,
    threads: IntMap<ThreadId, Tracked>,
    order: Vec<ThreadId>,
    procs: IntMap<u32, Proc>,
    /// The thread whose trace unit is on (TraceEn = 1).
    on: Option<ThreadId>,
    /// Core cycles of the shared clock when no trace unit is on.
    now: u64,
    items: Vec<TraceItem>,
    summary: RecordSummary,
}

impl Recorder<'_> {
    #[inline]
    fn thread(&mut self, id: ThreadId) -> &mut Tracked {
        if !self.threads.contains_key(&id) {
            self.order.push(id);
        }
        let procs = &self.procs;
        // The name is made only for a new thread (this runs per instruction).
        self.threads.entry(id).or_insert_with(|| Tracked {
            summary: ThreadSummary {
                id,
                parent: None,
                kind: None,
                comm: procs
                    .get(&id.pid)
                    .map(|p| comm_of(&p.path))
                    .unwrap_or_default(),
                instructions: 0,
                exit: None,
            },
            backend: None,
            config: TraceConfig::default(),
            ended: false,
        })
    }

    /// The TSC now.
    fn tsc(&self) -> u64 {
        let cycles = self
            .on
            .and_then(|t| self.threads.get(&t))
            .and_then(|t| t.backend.as_ref())
            .map_or(self.now, |b| b.cpu_ref().logic().clock().cycles());
        let mut c = Clock::new(self.rec.params.clock);
        c.advance(cycles);
        c.tsc()
    }

    fn event(&mut self, event: TaskEvent) -> Result<(), RecordError> {
        // Trace bytes of an earlier time go first.
        if let Some(t) = self.on {
            self.drain(t)?;
        }
        let tsc = self.tsc();
        self.sink.task_event(&Timed { tsc, event })
    }

    /// Moves a thread's new trace bytes to the sink.
    fn drain(&mut self, id: ThreadId) -> Result<(), RecordError> {
        let Some(b) = self.threads.get_mut(&id).and_then(|t| t.backend.as_mut()) else {
            return Ok(());
        };
        b.read(&mut self.items)?;
        let tsc = self.tsc();
        let mut items = std::mem::take(&mut self.items);
        for it in items.drain(..) {
            match it {
                TraceItem::Data { bytes, .. } => {
                    self.summary.trace_bytes += bytes.len() as u64;
                    self.sink.trace(id, &bytes, tsc)?;
                }
                TraceItem::Lost { size, .. } => {
                    let size = size.unwrap_or(0);
                    self.summary.lost_bytes += size;
                    self.sink.lost(id, size, tsc)?;
                }
            }
        }
        self.items = items;
        Ok(())
    }

    /// The configuration of a thread's trace unit: the recording's, with the
    /// address filters resolved in the thread's process as it is mapped now.
    fn config_for(&self, pid: u32) -> Result<TraceConfig, RecordError> {
        let mut cfg = self.rec.config;
        if self.rec.filters.len() > cfg.ranges.len() {
            return Err(RecordError::TooManyFilters {
                max: cfg.ranges.len(),
            });
        }
        let maps = self.procs.get(&pid).map(|p| &p.maps[..]).unwrap_or(&[]);
        for (slot, r) in cfg
            .ranges
            .iter_mut()
            .zip(resolve_filters(&self.rec.filters, maps))
        {
            *slot = r;
        }
        Ok(cfg)
    }

    /// The mappings of `pid` changed: the kernel applies perf's address
    /// filters again, restarting the trace units of its threads whose ranges
    /// moved (they come back on at their next instruction, with a PSB+).
    fn refilter(&mut self, pid: u32) -> Result<(), RecordError> {
        if self.rec.filters.iter().all(|f| f.object.is_none()) {
            return Ok(());
        }
        let cfg = self.config_for(pid)?;
        let ids: Vec<ThreadId> = self
            .threads
            .iter()
            .filter(|(id, t)| id.pid == pid && t.backend.is_some() && t.config != cfg)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if self.on == Some(id) {
                self.switch_out()?;
            }
            if let Some(t) = self.threads.get_mut(&id) {
                if let Some(b) = t.backend.as_mut() {
                    b.configure(&cfg)?;
                }
                t.config = cfg;
            }
        }
        Ok(())
    }

    /// A snapshot: tracing stops (perf disables the event while it copies
    /// the AUX areas), everything traced so far goes to the sink, which takes
    /// its snapshot; the running thread's trace unit comes back on at its
    /// next instruction.
    fn snapshot(&mut self) -> Result<(), RecordError> {
        self.switch_out()?;
        let tsc = self.tsc();
        self.sink.snapshot(tsc)
    }

    /// Clears TraceEn of the thread that is on, if any.
    fn switch_out(&mut self) -> Result<(), RecordError> {
        let Some(id) = self.on.take() else {
            return Ok(());
        };
        if let Some(b) = self.threads.get_mut(&id).and_then(|t| t.backend.as_mut()) {
            b.stop()?;
            self.now = self.now.max(b.cpu_ref().logic().clock().cycles());
        }
        self.drain(id)
    }

    /// Makes `id` the thread that is on: its trace unit is set up at its
    /// first instruction, and catches up with the shared clock.
    fn switch_in(&mut self, id: ThreadId, mem: &CodeMemory) -> Result<(), RecordError> {
        if self.on == Some(id) {
            return Ok(());
        }
        self.switch_out()?;
        let first = self.order.first() == Some(&id);
        let maps = self
            .procs
            .get(&id.pid)
            .map(|p| p.maps.clone())
            .unwrap_or_default();
        let now = self.now;
        let rec = self.rec;
        let cfg = self.config_for(id.pid)?;
        let t = self.thread(id);
        if t.backend.is_none() {
            t.config = cfg;
            let mut b = SimBackend::new(rec.params, rec.output)?;
            b.configure(&cfg)?;
            // The process of the thread (its CR3 stand-in).
            b.feed(
                &ExecItem::Event(Event::Exec {
                    pid: id.pid,
                    path: String::new(),
                }),
                mem,
            );
            t.backend = Some(b);
            let mut c = Clock::new(rec.params.clock);
            c.advance(now);
            let start = ThreadStart {
                id,
                first,
                config: &cfg,
                params: &rec.params,
                maps: &exec_maps(&maps),
                tsc: c.tsc(),
            };
            self.sink.open_thread(&start)?;
        }
        let Some(b) = self.threads.get_mut(&id).and_then(|t| t.backend.as_mut()) else {
            return Ok(());
        };
        b.cpu().catch_up(now);
        b.start()?;
        self.on = Some(id);
        Ok(())
    }

    /// Feeds an event to a thread's trace unit, if it has one (on or off:
    /// what an event changes in the logic holds either way).
    fn feed(&mut self, id: ThreadId, item: &ExecItem, mem: &CodeMemory) {
        if let Some(b) = self.threads.get_mut(&id).and_then(|t| t.backend.as_mut()) {
            b.feed(item, mem);
        }
    }

    /// The thread has ended (or the recording has): its stream is complete.
    fn end_thread(&mut self, id: ThreadId, how: Option<ExitKind>) -> Result<(), RecordError> {
        if self.on == Some(id) {
            self.switch_out()?;
        }
        let t = self.thread(id);
        if t.ended {
            return Ok(());
        }
        t.ended = true;
        t.summary.exit = how;
        // The trace unit's memory goes with it.
        let stats = t.backend.take().map(|b| b.cpu_ref().logic().stats());
        if let Some(st) = stats {
            self.summary.traced += st.traced;
            self.summary.psbs += st.psbs;
            self.summary.overflows += st.overflows;
        }
        self.event(TaskEvent::Exit { thread: id, how })
    }

    /// A block run of `thread` (the instructions [`RunView::retired`] spells out).
    fn block(
        &mut self,
        thread: ThreadId,
        run: RunView<'_>,
        mem: &CodeMemory,
    ) -> Result<(), RecordError> {
        if self.on != Some(thread) {
            self.switch_in(thread, mem)?;
        }
        let n = run.count() as u64;
        let t = match self.threads.get_mut(&thread) {
            Some(t) => t,
            None => self.thread(thread),
        };
        t.summary.instructions += n;
        if let Some(b) = t.backend.as_mut() {
            b.feed_block(run, mem);
            if b.unread() >= b.capacity() / 2 {
                self.drain(thread)?;
            }
        }
        self.summary.instructions += n;
        Ok(())
    }

    /// Block runs of `thread`, in order (as [`Self::block`] of each), their
    /// blocks in `table` (checked before: every run's block is there).
    fn blocks(
        &mut self,
        thread: ThreadId,
        runs: &[BlockRun],
        table: &BlockTable,
        mem: &CodeMemory,
    ) -> Result<(), RecordError> {
        if self.on != Some(thread) {
            self.switch_in(thread, mem)?;
        }
        let mut at = 0;
        while at < runs.len() {
            let t = match self.threads.get_mut(&thread) {
                Some(t) => t,
                None => self.thread(thread),
            };
            let Some(b) = t.backend.as_mut() else {
                // No trace unit: the instructions count.
                let n: u64 = runs[at..]
                    .iter()
                    .filter_map(|run| table.run(run))
                    .map(|run| run.count() as u64)
                    .sum();
                t.summary.instructions += n;
                self.summary.instructions += n;
                break;
            };
            let (k, n) = b.feed_blocks(&runs[at..], table, mem);
            at += k;
            let drain = b.unread() >= b.capacity() / 2;
            t.summary.instructions += n;
            self.summary.instructions += n;
            if drain {
                self.drain(thread)?;
            }
        }
        Ok(())
    }

    fn item(
        &mut self,
        thread: ThreadId,
        item: &ExecItem,
        mem: &CodeMemory,
        shows_kernel: bool,
    ) -> Result<(), RecordError> {
        match item {
            ExecItem::Insn(_) => {
                self.switch_in(thread, mem)?;
                let t = self.thread(thread);
                t.summary.instructions += 1;
                if let Some(b) = t.backend.as_mut() {
                    b.feed(item, mem);
                    if b.unread() >= b.capacity() / 2 {
                        self.drain(thread)?;
                    }
                }
                self.summary.instructions += 1;
            }
            ExecItem::Event(e) => match e {
                Event::Switch(_) => {
                    self.thread(thread);
                }
                Event::Exec { pid, path } => {
                    self.feed(thread, item, mem);
                    // The trace unit restarts after an exec (TraceEn 0, then
                    // 1: PSB+), so the new program's trace starts where a
                    // decoder can take it up with the new image.
                    if self.on == Some(thread) {
                        self.switch_out()?;
                    }
                    // The new program's address space is new: the mappings
                    // reported next are all its own (the kernel reports each,
                    // the loader and the vDSO too, even where they sit at the
                    // old program's addresses).
                    let p = self.procs.entry(*pid).or_default();
                    p.path = path.clone();
                    p.maps.clear();
                    let comm = comm_of(path);
                    self.thread(thread).summary.comm = comm.clone();
                    self.event(TaskEvent::Comm {
                        thread,
                        comm,
                        path: path.clone(),
                    })?;
                }
                Event::Mappings(maps) => {
                    let p = self.procs.entry(thread.pid).or_default();
                    let old = exec_maps(&p.maps);
                    let new = exec_maps(maps);
                    let changed = p.maps != *maps;
                    p.maps = maps.clone();
                    if changed {
                        self.refilter(thread.pid)?;
                    }
                    if old != new {
                        for m in new.iter().filter(|m| !old.contains(m)) {
                            self.event(TaskEvent::Mmap {
                                thread,
                                mapping: m.clone(),
                            })?;
                        }
                        self.event(TaskEvent::Image {
                            pid: thread.pid,
                            maps: new,
                        })?;
                    }
                }
                Event::Clone { child, kind } => {
                    if *kind != CloneKind::Thread {
                        let p = self.procs.get(&thread.pid).cloned().unwrap_or_default();
                        self.procs.insert(child.pid, p);
                    }
                    let c = self.thread(*child);
                    c.summary.parent = Some(thread);
                    c.summary.kind = Some(*kind);
                    self.event(TaskEvent::Fork {
                        parent: thread,
                        child: *child,
                        kind: *kind,
                    })?;
                }
                Event::Exit(k) => {
                    self.feed(thread, item, mem);
                    if self.order.first() == Some(&thread)
                        || self.summary.exit.is_none() && shows_kernel
                    {
                        self.summary.exit = Some(*k);
                    }
                    self.end_thread(thread, Some(*k))?;
                }
                Event::Untraced { thread: t, why } => {
                    self.summary.warnings.push(format!("{t}: {why}"));
                }
                Event::Stopped(r) => {
                    self.feed(thread, item, mem);
                    self.summary.stopped = Some(*r);
                }
                _ => self.feed(thread, item, mem),
            },
        }
        Ok(())
    }
}

/// The execution log a recording writes (the ground truth of `ptperf record
/// --decode`), with its file: every error names it (a full disk included).
struct ExecLog<W: Write> {
    w: LogWriter<W>,
    path: PathBuf,
}

impl ExecLog<BufWriter<File>> {
    /// Creates the log `path` (and its folder).
    fn create(path: &Path, shows_kernel: bool) -> Result<Self, RecordError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io_at(dir))?;
        }
        let out = BufWriter::new(File::create(path).map_err(io_at(path))?);
        ExecLog::new(out, path, shows_kernel)
    }
}

impl<W: Write> ExecLog<W> {
    fn new(out: W, path: &Path, shows_kernel: bool) -> Result<Self, RecordError> {
        let path = path.to_path_buf();
        match LogWriter::with_kernel(out, shows_kernel) {
            Ok(w) => Ok(ExecLog { w, path }),
            Err(e) => Err(RecordError::ExecutionLog {
                path,
                source: e.into(),
            }),
        }
    }

    fn fail(&self, e: impl Into<ExecError>) -> RecordError {
        RecordError::ExecutionLog {
            path: self.path.clone(),
            source: e.into(),
        }
    }

    fn item(&mut self, item: &ExecItem, mem: &CodeMemory) -> Result<(), RecordError> {
        self.w.write_item(item, mem).map_err(|e| self.fail(e))
    }

    fn block(&mut self, run: RunView<'_>, mem: &CodeMemory) -> Result<(), RecordError> {
        self.w.write_block(run, mem).map_err(|e| self.fail(e))
    }

    fn flush(&mut self) -> Result<(), RecordError> {
        self.w.flush().map_err(|e| self.fail(e))
    }

    fn finish(self) -> Result<W, RecordError> {
        let ExecLog { w, path } = self;
        w.finish().map_err(|e| RecordError::ExecutionLog {
            path,
            source: e.into(),
        })
    }
}

/// The error of a run whose block the source's table does not have.
fn unknown_block(run: &BlockRun) -> String {
    format!(
        "a block run of block {} that the source did not describe",
        run.block.0
    )
}

/// Runs `source` through the simulator into `sink` (see the module docs);
/// writes the execution log to `rec.log` if set (`rec.trace` is not used:
/// the sink decides where traces go). `progress(instructions)` is called at
/// every checkpoint ([`CHECKPOINT`] instructions). Kernel tracing (OS = 1)
/// needs a source that [shows the kernel](ExecutionSource::shows_kernel);
/// others are refused ([`PtError::KernelTracing`]).
pub fn record_into(
    source: &mut dyn ExecutionSource,
    rec: &SimRecording,
    sink: &mut dyn RecordSink,
    mut progress: impl FnMut(u64),
) -> Result<RecordSummary, RecordError> {
    let started = std::time::Instant::now();
    if rec.config.os && !source.shows_kernel() {
        return Err(PtError::KernelTracing.into());
    }
    let shows_kernel = source.shows_kernel();
    let mut log = match &rec.log {
        Some(p) => Some(ExecLog::create(p, shows_kernel)?),
        None => None,
    };
    let mut r = Recorder {
        rec,
        sink,
        threads: IntMap::default(),
        order: Vec::new(),
        procs: IntMap::default(),
        on: None,
        now: 0,
        items: Vec::new(),
        summary: RecordSummary::default(),
    };
    let mut cursor = ThreadCursor::new();
    let mut next_checkpoint = CHECKPOINT;
    loop {
        let step = match source.next_step() {
            Ok(Some(s)) => s,
            Ok(None) => break,
            Err(e) => {
                r.summary.source_error = Some(e.to_string());
                break;
            }
        };
        match &step {
            Step::Item(item) => {
                if let Some(Err(e)) = log.as_mut().map(|l| l.item(item, source.memory())) {
                    r.summary.source_error = Some(e.to_string());
                    log = None;
                    break;
                }
                let thread = cursor.follow(item);
                r.item(thread, item, source.memory(), shows_kernel)?;
            }
            Step::Block(run) => {
                let Some(run) = source.blocks().run(run) else {
                    r.summary.source_error = Some(unknown_block(run));
                    break;
                };
                // A run that retires nothing (one faulting instruction) is no item.
                if run.count() == 0 {
                    continue;
                }
                let mem = source.memory();
                if let Some(Err(e)) = log.as_mut().map(|l| l.block(run, mem)) {
                    r.summary.source_error = Some(e.to_string());
                    log = None;
                    break;
                }
                cursor.saw_insn();
                r.block(cursor.current(), run, mem)?;
            }
            Step::Blocks(runs) => {
                // (A run of a block the table lacks is skipped: checking
                // each run here would be a pass over every batch.)
                let table = source.blocks();
                // Runs that retire nothing (one faulting instruction each) are no items.
                let retires = |run: &BlockRun| table.run(run).is_some_and(|v| v.count() > 0);
                if runs.iter().any(retires) {
                    let mem = source.memory();
                    if let Some(Err(e)) = log.as_mut().map(|l| {
                        runs.iter()
                            .filter_map(|run| table.run(run))
                            .try_for_each(|run| l.block(run, mem))
                    }) {
                        r.summary.source_error = Some(e.to_string());
                        log = None;
                        break;
                    }
                    cursor.saw_insn();
                    r.blocks(cursor.current(), runs, table, mem)?;
                }
            }
        }
        if let Step::Blocks(runs) = step {
            source.recycle(runs);
        }
        if let Some(req) = &rec.snapshot_requests {
            if req.load(Ordering::Relaxed) && req.swap(false, Ordering::Relaxed) {
                r.snapshot()?;
            }
        }
        if r.summary.instructions >= next_checkpoint {
            // A checkpoint: what was traced so far reaches the files, so a
            // recording killed later keeps a decodable prefix.
            next_checkpoint = r.summary.instructions + CHECKPOINT;
            progress(r.summary.instructions);
            if let Some(t) = r.on {
                r.drain(t)?;
            }
            let mem = |pid| source.process_memory(pid);
            let tsc = r.tsc();
            r.sink.checkpoint(&mem, tsc)?;
            if let Some(Err(e)) = log.as_mut().map(ExecLog::flush) {
                // The recording ends here (its perf.data is completed), as
                // it would at a write error of the log.
                r.summary.source_error = Some(e.to_string());
                log = None;
                break;
            }
        }
    }
    // Threads still alive: the recording ends their streams.
    r.switch_out()?;
    for id in r.order.clone() {
        if !r.thread(id).ended {
            r.end_thread(id, None)?;
        }
    }
    if let Some(Err(e)) = log.map(ExecLog::finish) {
        r.summary.source_error.get_or_insert(e.to_string());
    }
    r.summary.threads = r
        .order
        .iter()
        .filter_map(|id| r.threads.get(id).map(|t| t.summary.clone()))
        .collect();
    r.summary.seconds = started.elapsed().as_secs_f64();
    let tsc = r.tsc();
    let summary = r.summary;
    let mem = |pid| source.process_memory(pid);
    r.sink.finish(&summary, &mem, tsc)?;
    Ok(summary)
}

/// Runs `source` through the simulator into a perf.data file (see
/// [`PerfDataSink`]), and the execution log `rec.log`.
pub fn record_perf_data(
    source: &mut dyn ExecutionSource,
    rec: &SimRecording,
    opts: &PerfDataOptions,
    progress: impl FnMut(u64),
) -> Result<RecordSummary, RecordError> {
    if rec.config.os && !source.shows_kernel() {
        return Err(PtError::KernelTracing.into());
    }
    // A configuration the simulated CPU refuses (its CPUID 14H) is refused
    // before anything is written.
    SimBackend::new(rec.params, rec.output).and_then(|mut b| b.configure(&rec.config))?;
    let mut sink = PerfDataSink::create(rec, opts)?;
    record_into(source, rec, &mut sink, progress)
}

#[cfg(test)]
mod sink_tests {
    //! The recorder's output as a sink sees it: one stream per thread, each
    //! starting with a PSB, and task events in time order, consistent with
    //! the TSC of the streams.
    use std::collections::VecDeque;

    use super::*;
    use crate::exec::{BranchClass, ExecError, ExecMode, Retired};

    /// A fixed list of items over fixed code.
    struct Items {
        items: VecDeque<ExecItem>,
        mem: CodeMemory,
    }

    impl ExecutionSource for Items {
        fn next_item(&mut self) -> Result<Option<ExecItem>, ExecError> {
            Ok(self.items.pop_front())
        }
        fn memory(&self) -> &CodeMemory {
            &self.mem
        }
    }

    /// `n` times: 0x1000 nop; 0x1001 dec ecx; 0x1003 jnz 0x1000 (the last falls through).
    fn loop_items(n: usize) -> Vec<ExecItem> {
        let insn = |ip, len, class, next_ip| {
            ExecItem::Insn(Retired {
                ip,
                next_ip,
                len,
                class,
                mode: ExecMode::Bit64,
                kernel: false,
            })
        };
        let mut v = Vec::new();
        for i in 0..n {
            v.push(insn(0x1000, 1, BranchClass::Other, 0x1001));
            v.push(insn(0x1001, 2, BranchClass::Other, 0x1003));
            let next = if i + 1 < n { 0x1000 } else { 0x1005 };
            v.push(insn(0x1003, 2, BranchClass::CondBranch, next));
        }
        v
    }

    /// Code at 0x1000: `nop; dec ecx; jnz 0x1000`, then int3s.
    fn loop_page() -> CodeMemory {
        let mut page = vec![0xcc; 4096];
        page[..5].copy_from_slice(&[0x90, 0xff, 0xc9, 0x75, 0xfb]);
        let mut mem = CodeMemory::new();
        mem.set_page(0x1000, &page);
        mem
    }

    /// After an exec, every mapping of the new program is reported, also those
    /// (the loader, the vDSO) at the same place as in the old one: the kernel
    /// reports them, and a decoder drops the old program's at the exec.
    #[test]
    fn exec_reports_all_new_mappings() {
        let mem = loop_page();
        let map = |start: u64, path: &str| crate::exec::maps::Mapping {
            start,
            end: start + 0x1000,
            offset: 0,
            perms: crate::exec::maps::Perms {
                read: true,
                write: false,
                exec: true,
                shared: false,
            },
            path: path.into(),
        };
        let mut items = Vec::new();
        for prog in ["/bin/a", "/bin/b"] {
            items.push(ExecItem::Event(Event::Exec {
                pid: 7,
                path: prog.into(),
            }));
            items.push(ExecItem::Event(Event::Mappings(vec![
                map(0x1000, prog),
                map(0x7000, "/lib/ld.so"),
                map(0x9000, "[vdso]"),
            ])));
            items.extend(loop_items(2));
        }
        items.push(ExecItem::Event(Event::Exit(ExitKind::Exited(0))));
        let mut src = Items {
            items: items.into(),
            mem,
        };
        let rec = SimRecording::new(TraceConfig::perf_default());
        let mut sink = MemorySink::default();
        record_into(&mut src, &rec, &mut sink, |_| {}).unwrap();
        let mmaps: Vec<&str> = sink
            .events
            .iter()
            .filter_map(|e| match &e.event {
                TaskEvent::Mmap { mapping, .. } => Some(mapping.path.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            mmaps,
            [
                "/bin/a",
                "/lib/ld.so",
                "[vdso]",
                "/bin/b",
                "/lib/ld.so",
                "[vdso]"
            ]
        );
    }

    #[test]
    fn one_stream_per_thread_and_timed_task_events() {
        let mem = loop_page();
        let main = ThreadId::main_of(7);
        let worker = ThreadId { pid: 7, tid: 8 };
        let mut items = vec![ExecItem::Event(Event::Exec {
            pid: 7,
            path: "/bin/prog".into(),
        })];
        let main_loop = loop_items(4);
        items.extend(main_loop[..9].iter().cloned());
        items.push(ExecItem::Event(Event::Clone {
            child: worker,
            kind: CloneKind::Thread,
        }));
        items.push(ExecItem::Event(Event::Switch(worker)));
        items.extend(loop_items(5));
        items.push(ExecItem::Event(Event::Exit(ExitKind::Exited(0))));
        items.push(ExecItem::Event(Event::Switch(main)));
        // The main thread goes on where it left the loop.
        items.extend(main_loop[9..].iter().cloned());
        items.push(ExecItem::Event(Event::Exit(ExitKind::Exited(1))));
        crate::exec::check_continuity(&items).unwrap();
        let mut src = Items {
            items: items.into(),
            mem,
        };
        let rec = SimRecording::new(TraceConfig::perf_default());
        let mut sink = MemorySink::default();
        let s = record_into(&mut src, &rec, &mut sink, |_| {}).unwrap();
        assert_eq!(sink.summary.as_ref(), Some(&s));
        assert_eq!(s.instructions, 9 + 15 + 3);
        assert_eq!(s.exit, Some(ExitKind::Exited(1)));
        assert_eq!(
            s.threads
                .iter()
                .map(|t| (t.id, t.instructions))
                .collect::<Vec<_>>(),
            vec![(main, 12), (worker, 15)]
        );
        assert_eq!(s.threads[1].parent, Some(main));
        // Each stream starts with a PSB; the main thread's has two (it was
        // switched out and in again).
        const PSB: [u8; 2] = [0x02, 0x82];
        let psbs = |b: &[u8]| {
            b.windows(16)
                .filter(|w| w.chunks(2).all(|c| c == PSB))
                .count()
        };
        for t in [main, worker] {
            let b = &sink.streams[&t];
            assert!(b.starts_with(&[PSB; 8].concat()), "{t}");
        }
        assert_eq!(psbs(&sink.streams[&main]), 2);
        assert_eq!(psbs(&sink.streams[&worker]), 1);
        // Events in time order: comm, fork, exit of the worker, exit of main.
        let kinds: Vec<&str> = sink
            .events
            .iter()
            .map(|e| match e.event {
                TaskEvent::Comm { .. } => "comm",
                TaskEvent::Fork { .. } => "fork",
                TaskEvent::Exit { .. } => "exit",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["comm", "fork", "exit", "exit"]);
        assert!(sink.events.windows(2).all(|w| w[0].tsc <= w[1].tsc));
        // The worker's trace starts after it was created, and its exit comes
        // after its trace: time runs on across threads.
        let fork_tsc = sink.events[1].tsc;
        let worker_start = sink.starts.iter().find(|s| s.0 == worker).unwrap().1;
        assert!(fork_tsc <= worker_start, "{fork_tsc:#x} {worker_start:#x}");
        assert!(sink.events[2].tsc > worker_start);
        assert!(sink.events[3].tsc > sink.events[2].tsc);
    }

    /// A writer that takes `room` bytes, then fails as a full disk does.
    struct Full {
        room: usize,
    }

    impl Write for Full {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if b.len() > self.room {
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
            }
            self.room -= b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The execution log's writer fails (a full disk): the error names the
    /// log file and keeps the OS error as its source.
    #[test]
    fn a_failing_execution_log_names_its_file() {
        let mem = loop_page();
        let path = Path::new("/some/where/exec.log");
        let mut log = ExecLog::new(Full { room: 4096 }, path, false).unwrap();
        let mut failed = None;
        for item in loop_items(20_000) {
            if let Err(e) = log.item(&item, &mem).and_then(|_| log.flush()) {
                failed = Some(e);
                break;
            }
        }
        let e = failed.expect("a full disk is noticed");
        assert!(matches!(&e, RecordError::ExecutionLog { path: p, .. } if p == path));
        let text = e.to_string();
        assert!(
            text.starts_with("execution log /some/where/exec.log: "),
            "{text}"
        );
        assert!(text.contains("(os error 28)"), "{text}");
        let source = std::error::Error::source(&e).expect("the log's error is kept");
        assert!(source.to_string().contains("os error 28"), "{source}");
        // At the start already.
        let e = ExecLog::new(Full { room: 3 }, path, false).err().unwrap();
        assert!(e
            .to_string()
            .starts_with("execution log /some/where/exec.log: "));
    }

    /// A recording whose log is on a full disk (`/dev/full`) ends where the
    /// log failed, the sink finished, and says which file it could not write.
    #[test]
    fn a_full_disk_under_the_execution_log_ends_the_recording_and_names_it() {
        // Linux's device that refuses every write with ENOSPC.
        let full = Path::new("/dev/full");
        let mut src = Items {
            items: loop_items(3 * CHECKPOINT as usize).into(),
            mem: loop_page(),
        };
        let mut rec = SimRecording::new(TraceConfig::perf_default());
        rec.log = Some(full.to_path_buf());
        let mut sink = MemorySink::default();
        let s = record_into(&mut src, &rec, &mut sink, |_| {}).unwrap();
        let e = s.source_error.as_deref().expect("the failure is reported");
        assert!(e.starts_with("execution log /dev/full: "), "{e}");
        assert!(e.contains("os error 28"), "{e}");
        assert!(s.instructions < 3 * 3 * CHECKPOINT, "it stopped early");
        assert!(sink.summary.is_some(), "the sink is finished");
    }
}
