//! Recording on the simulator: an execution source in; one trace stream per
//! thread, the task events between them, and (optionally) the execution log
//! out. This is `ptrec`'s simulator path, usable from tests.
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
//! What happened to the tasks comes out as [`TaskEvent`]s stamped with the
//! TSC ([`Timed`]): command names, executable mappings, threads and
//! processes created and ended, the side-band perf writes as COMM, MMAP2,
//! FORK and EXIT records. A [`RecordSink`] takes the streams and the events;
//! [`FileSink`] writes the files `ptrec` writes today (a trace and a
//! side-band file per thread), a perf.data writer implements the same calls.
//!
//! Everything reaches the sink as it is produced and is made durable at each
//! checkpoint, so a recording that is killed leaves traces that decode up to
//! where they end.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use pt_hal::backend::{TraceBackend, TraceItem};
use pt_hal::config::{AddrRange, TraceConfig};
use pt_hal::msr::AddrCfg;

use crate::backend::{SimBackend, SimOutput};
use crate::clock::Clock;
use crate::exec::log::LogWriter;
use crate::exec::{
    CloneKind, CodeMemory, Event, ExecItem, ExecutionSource, ExitKind, Mapping, StopReason,
    ThreadCursor, ThreadId,
};
use crate::pt::{PtError, SimParams};

mod files;
pub use files::{sideband_path, thread_trace_path, FileSink};

/// An address filter as given on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterSpec {
    /// FilterEn range (`filter`) or TraceStop range (`stop`).
    pub cfg: AddrCfg,
    /// Start address (in the object's ELF address space when `object` is set).
    pub start: u64,
    /// Size in bytes (≥ 1).
    pub size: u64,
    /// The object the addresses refer to.
    pub object: Option<PathBuf>,
}

impl FilterSpec {
    /// Parses perf's syntax (`filter 0x1000/0x100@/bin/ls`, `stop …`; several
    /// separated by `,`) or a plain `START-END` (END exclusive).
    pub fn parse_list(s: &str) -> Result<Vec<Self>, String> {
        let num = |t: &str| -> Result<u64, String> {
            let t = t.trim();
            let r = match t.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => t.parse(),
            };
            r.map_err(|_| format!("bad number `{t}` in filter"))
        };
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if let Some((a, b)) = part.split_once('-').filter(|_| !part.contains(' ')) {
                let (start, end) = (num(a)?, num(b)?);
                if end <= start {
                    return Err(format!("empty filter range `{part}`"));
                }
                out.push(FilterSpec {
                    cfg: AddrCfg::Filter,
                    start,
                    size: end - start,
                    object: None,
                });
                continue;
            }
            let (kind, rest) = part.split_once(' ').ok_or_else(|| {
                format!("filter `{part}`: expected `filter|stop START/SIZE[@FILE]`")
            })?;
            let cfg = match kind {
                "filter" => AddrCfg::Filter,
                "stop" => AddrCfg::TraceStop,
                _ => return Err(format!("filter `{part}`: unknown action `{kind}`")),
            };
            let (range, object) = match rest.split_once('@') {
                Some((r, o)) => (r, Some(PathBuf::from(o.trim()))),
                None => (rest, None),
            };
            let (start, size) = match range.split_once('/') {
                Some((a, b)) => (num(a)?, num(b)?),
                None => (num(range)?, 1),
            };
            if size == 0 {
                return Err(format!("filter `{part}`: size 0"));
            }
            out.push(FilterSpec {
                cfg,
                start,
                size,
                object,
            });
        }
        Ok(out)
    }
}

/// The lowest PT_LOAD virtual address of an ELF file, page aligned.
fn elf_first_load(path: &Path) -> Option<u64> {
    let d = std::fs::read(path).ok()?;
    let u16_at = |o: usize| d.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| {
        d.get(o..o + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
    };
    let u64_at = |o: usize| {
        d.get(o..o + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    if d.get(..4)? != b"\x7fELF" {
        return None;
    }
    let is64 = *d.get(4)? == 2;
    let (phoff, phentsize, phnum) = if is64 {
        (
            u64_at(0x20)? as usize,
            u16_at(0x36)? as usize,
            u16_at(0x38)?,
        )
    } else {
        (
            u32_at(0x1c)? as usize,
            u16_at(0x2a)? as usize,
            u16_at(0x2c)?,
        )
    };
    let mut lowest: Option<u64> = None;
    for i in 0..usize::from(phnum) {
        let o = phoff + i * phentsize;
        if u32_at(o)? != 1 {
            continue;
        }
        let vaddr = if is64 {
            u64_at(o + 0x10)?
        } else {
            u64::from(u32_at(o + 8)?)
        };
        lowest = Some(lowest.map_or(vaddr, |l| l.min(vaddr)));
    }
    lowest.map(|v| v & !0xfff)
}

/// Turns filters into absolute address ranges using the process's mappings.
pub fn resolve_filters(filters: &[FilterSpec], maps: &[Mapping]) -> Result<Vec<AddrRange>, String> {
    filters
        .iter()
        .map(|f| {
            let bias = match &f.object {
                None => 0,
                Some(obj) => {
                    let canon = std::fs::canonicalize(obj).unwrap_or_else(|_| obj.clone());
                    let m = maps
                        .iter()
                        .find(|m| m.offset == 0 && Path::new(&m.path) == canon)
                        .ok_or_else(|| format!("filter object {} is not mapped", obj.display()))?;
                    let first = elf_first_load(&canon)
                        .ok_or_else(|| format!("{}: not an ELF file", canon.display()))?;
                    m.start.wrapping_sub(first)
                }
            };
            let start = f.start.wrapping_add(bias);
            Ok(AddrRange {
                cfg: f.cfg,
                start,
                end: start.wrapping_add(f.size - 1),
            })
        })
        .collect()
}

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
    /// The trace file of the first thread (see [`FileSink`] for the others
    /// and the side-band files).
    pub trace: PathBuf,
    /// Where to keep the execution log (None: not kept).
    pub log: Option<PathBuf>,
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
/// errors end the recording.
pub trait RecordSink {
    /// A thread's trace starts (before its first byte): perf's AUX area of
    /// the thread (and its ITRACE_START).
    fn open_thread(&mut self, start: &ThreadStart<'_>) -> Result<(), String>;

    /// Bytes of `thread`'s trace, appended to its stream.
    fn trace(&mut self, thread: ThreadId, bytes: &[u8]) -> Result<(), String>;

    /// `size` bytes of `thread`'s trace were lost (its output area was
    /// overwritten before they were read): perf's AUX record with the
    /// truncated flag.
    fn lost(&mut self, thread: ThreadId, size: u64) -> Result<(), String>;

    /// Something happened to the tasks. Every thread's trace up to this time
    /// has been delivered.
    fn task_event(&mut self, event: &Timed) -> Result<(), String>;

    /// A checkpoint: make durable what was delivered, so that a recording
    /// killed later keeps a decodable prefix.
    fn checkpoint(&mut self, memory: ProcessMemory<'_>) -> Result<(), String>;

    /// The end; `summary` says how the recording went.
    fn finish(&mut self, summary: &RecordSummary, memory: ProcessMemory<'_>) -> Result<(), String>;
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
    threads: HashMap<ThreadId, Tracked>,
    order: Vec<ThreadId>,
    procs: HashMap<u32, Proc>,
    /// The thread whose trace unit is on (TraceEn = 1).
    on: Option<ThreadId>,
    /// Core cycles of the shared clock when no trace unit is on.
    now: u64,
    items: Vec<TraceItem>,
    summary: RecordSummary,
}

impl Recorder<'_> {
    fn thread(&mut self, id: ThreadId) -> &mut Tracked {
        if !self.threads.contains_key(&id) {
            self.order.push(id);
        }
        let comm = self
            .procs
            .get(&id.pid)
            .map(|p| comm_of(&p.path))
            .unwrap_or_default();
        self.threads.entry(id).or_insert_with(|| Tracked {
            summary: ThreadSummary {
                id,
                parent: None,
                kind: None,
                comm,
                instructions: 0,
                exit: None,
            },
            backend: None,
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

    fn event(&mut self, event: TaskEvent) -> Result<(), String> {
        // Trace bytes of an earlier time go first.
        if let Some(t) = self.on {
            self.drain(t)?;
        }
        let tsc = self.tsc();
        self.sink.task_event(&Timed { tsc, event })
    }

    /// Moves a thread's new trace bytes to the sink.
    fn drain(&mut self, id: ThreadId) -> Result<(), String> {
        let Some(b) = self.threads.get_mut(&id).and_then(|t| t.backend.as_mut()) else {
            return Ok(());
        };
        b.read(&mut self.items).map_err(|e| e.to_string())?;
        for it in self.items.drain(..) {
            match it {
                TraceItem::Data { bytes, .. } => {
                    self.summary.trace_bytes += bytes.len() as u64;
                    self.sink.trace(id, &bytes)?;
                }
                TraceItem::Lost { size, .. } => {
                    let size = size.unwrap_or(0);
                    self.summary.lost_bytes += size;
                    self.sink.lost(id, size)?;
                }
            }
        }
        Ok(())
    }

    /// Clears TraceEn of the thread that is on, if any.
    fn switch_out(&mut self) -> Result<(), String> {
        let Some(id) = self.on.take() else {
            return Ok(());
        };
        if let Some(b) = self.threads.get_mut(&id).and_then(|t| t.backend.as_mut()) {
            b.stop().map_err(|e| e.to_string())?;
            self.now = self.now.max(b.cpu_ref().logic().clock().cycles());
        }
        self.drain(id)
    }

    /// Makes `id` the thread that is on: its trace unit is set up at its
    /// first instruction, and catches up with the shared clock.
    fn switch_in(&mut self, id: ThreadId, mem: &CodeMemory) -> Result<(), String> {
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
        let t = self.thread(id);
        if t.backend.is_none() {
            let mut cfg = rec.config;
            let ranges = match resolve_filters(&rec.filters, &maps) {
                Ok(r) => r,
                // Another process may not map the filter's object: nothing of
                // it is traced then.
                Err(_) if !first => rec
                    .filters
                    .iter()
                    .map(|f| AddrRange {
                        cfg: f.cfg,
                        start: 0,
                        end: 0,
                    })
                    .collect(),
                Err(e) => return Err(e),
            };
            if ranges.len() > cfg.ranges.len() {
                return Err(format!("at most {} address filters", cfg.ranges.len()));
            }
            for (slot, r) in cfg.ranges.iter_mut().zip(ranges) {
                *slot = r;
            }
            let mut b = SimBackend::new(rec.params, rec.output).map_err(|e| e.to_string())?;
            b.configure(&cfg).map_err(|e| e.to_string())?;
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
        b.start().map_err(|e| e.to_string())?;
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
    fn end_thread(&mut self, id: ThreadId, how: Option<ExitKind>) -> Result<(), String> {
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

    fn item(
        &mut self,
        thread: ThreadId,
        item: &ExecItem,
        mem: &CodeMemory,
        shows_kernel: bool,
    ) -> Result<(), String> {
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
                    self.procs.entry(*pid).or_default().path = path.clone();
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
                    p.maps = maps.clone();
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
) -> Result<RecordSummary, String> {
    let started = std::time::Instant::now();
    if rec.config.os && !source.shows_kernel() {
        return Err(PtError::KernelTracing.to_string());
    }
    let shows_kernel = source.shows_kernel();
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |e: std::io::Error| format!("{}: {e}", p.display())
    };
    let mut log = match &rec.log {
        Some(p) => {
            if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(io(dir))?;
            }
            let out = BufWriter::new(File::create(p).map_err(io(p))?);
            Some(LogWriter::with_kernel(out, shows_kernel).map_err(io(p))?)
        }
        None => None,
    };
    let mut r = Recorder {
        rec,
        sink,
        threads: HashMap::new(),
        order: Vec::new(),
        procs: HashMap::new(),
        on: None,
        now: 0,
        items: Vec::new(),
        summary: RecordSummary::default(),
    };
    let mut cursor = ThreadCursor::new();
    let mut next_checkpoint = CHECKPOINT;
    loop {
        let item = match source.next_item() {
            Ok(Some(i)) => i,
            Ok(None) => break,
            Err(e) => {
                r.summary.source_error = Some(e.to_string());
                break;
            }
        };
        if let Some(l) = &mut log {
            if let Err(e) = l.write_item(&item, source.memory()) {
                r.summary.source_error = Some(format!("execution log: {e}"));
                break;
            }
        }
        let thread = cursor.follow(&item);
        r.item(thread, &item, source.memory(), shows_kernel)?;
        if r.summary.instructions >= next_checkpoint {
            // A checkpoint: what was traced so far reaches the files, so a
            // recording killed later keeps a decodable prefix.
            next_checkpoint = r.summary.instructions + CHECKPOINT;
            progress(r.summary.instructions);
            if let Some(t) = r.on {
                r.drain(t)?;
            }
            let mem = |pid| source.process_memory(pid);
            r.sink.checkpoint(&mem)?;
            if let Some(l) = &mut log {
                l.flush().map_err(|e| e.to_string())?;
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
    if let Some(l) = log {
        l.finish().map_err(|e| e.to_string())?;
    }
    r.summary.threads = r
        .order
        .iter()
        .filter_map(|id| r.threads.get(id).map(|t| t.summary.clone()))
        .collect();
    r.summary.seconds = started.elapsed().as_secs_f64();
    let summary = r.summary;
    let mem = |pid| source.process_memory(pid);
    r.sink.finish(&summary, &mem)?;
    Ok(summary)
}

/// Runs `source` through the simulator into the files of [`FileSink`]:
/// `rec.trace` (the first thread's trace), the other threads' traces and
/// the side-band files beside it, and the execution log `rec.log`.
pub fn record_sim(
    source: &mut dyn ExecutionSource,
    rec: &SimRecording,
    progress: impl FnMut(u64),
) -> Result<RecordSummary, String> {
    if rec.config.os && !source.shows_kernel() {
        return Err(PtError::KernelTracing.to_string());
    }
    let mut sink = FileSink::new(&rec.trace)?;
    record_into(source, rec, &mut sink, progress)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::Perms;

    #[test]
    fn filter_syntax() {
        let f = FilterSpec::parse_list("filter 0x1000/0x100@/bin/true, stop 0x2000").unwrap();
        assert_eq!(
            f,
            vec![
                FilterSpec {
                    cfg: AddrCfg::Filter,
                    start: 0x1000,
                    size: 0x100,
                    object: Some(PathBuf::from("/bin/true")),
                },
                FilterSpec {
                    cfg: AddrCfg::TraceStop,
                    start: 0x2000,
                    size: 1,
                    object: None,
                },
            ]
        );
        let f = FilterSpec::parse_list("0x401000-0x402000").unwrap();
        assert_eq!((f[0].start, f[0].size), (0x401000, 0x1000));
        for bad in ["0x2000-0x1000", "jump 1/2", "filter 1/0", "filter x/1"] {
            assert!(FilterSpec::parse_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn object_filters_follow_the_load_address() {
        let exe = std::fs::canonicalize("/bin/true").unwrap();
        let first = elf_first_load(&exe).expect("an ELF");
        let maps = vec![Mapping {
            start: 0x5555_5555_4000,
            end: 0x5555_5555_6000,
            offset: 0,
            perms: Perms {
                read: true,
                ..Perms::default()
            },
            path: exe.display().to_string(),
        }];
        let f = FilterSpec::parse_list(&format!("filter {:#x}/0x10@/bin/true", first + 0x2000))
            .unwrap();
        let r = resolve_filters(&f, &maps).unwrap();
        assert_eq!((r[0].start, r[0].end), (0x5555_5555_6000, 0x5555_5555_600f));
        let missing = FilterSpec::parse_list("filter 0/1@/bin/sh").unwrap();
        assert!(resolve_filters(&missing, &maps).is_err());
    }
}

#[cfg(test)]
mod sink_tests {
    //! The recorder's output as a sink sees it: one stream per thread, each
    //! starting with a PSB, and task events in time order, consistent with
    //! the TSC of the streams.
    use std::collections::VecDeque;

    use super::*;
    use crate::exec::{ExecError, ExecMode, InsnClass, Retired};

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

    #[derive(Default)]
    struct Collect {
        starts: Vec<(ThreadId, u64)>,
        streams: HashMap<ThreadId, Vec<u8>>,
        events: Vec<Timed>,
        finished: bool,
    }

    impl RecordSink for Collect {
        fn open_thread(&mut self, start: &ThreadStart<'_>) -> Result<(), String> {
            self.starts.push((start.id, start.tsc));
            Ok(())
        }
        fn trace(&mut self, thread: ThreadId, bytes: &[u8]) -> Result<(), String> {
            self.streams
                .entry(thread)
                .or_default()
                .extend_from_slice(bytes);
            Ok(())
        }
        fn lost(&mut self, _: ThreadId, _: u64) -> Result<(), String> {
            Ok(())
        }
        fn task_event(&mut self, event: &Timed) -> Result<(), String> {
            self.events.push(event.clone());
            Ok(())
        }
        fn checkpoint(&mut self, _: ProcessMemory<'_>) -> Result<(), String> {
            Ok(())
        }
        fn finish(&mut self, _: &RecordSummary, _: ProcessMemory<'_>) -> Result<(), String> {
            self.finished = true;
            Ok(())
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
            v.push(insn(0x1000, 1, InsnClass::Other, 0x1001));
            v.push(insn(0x1001, 2, InsnClass::Other, 0x1003));
            let next = if i + 1 < n { 0x1000 } else { 0x1005 };
            v.push(insn(0x1003, 2, InsnClass::CondBranch, next));
        }
        v
    }

    #[test]
    fn one_stream_per_thread_and_timed_task_events() {
        let mut page = vec![0xcc; 4096];
        page[..5].copy_from_slice(&[0x90, 0xff, 0xc9, 0x75, 0xfb]);
        let mut mem = CodeMemory::new();
        mem.set_page(0x1000, &page);
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
        let rec = SimRecording {
            config: TraceConfig::perf_default(),
            filters: Vec::new(),
            params: SimParams::default(),
            output: SimOutput::default(),
            trace: PathBuf::from("unused"),
            log: None,
        };
        let mut sink = Collect::default();
        let s = record_into(&mut src, &rec, &mut sink, |_| {}).unwrap();
        assert!(sink.finished);
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
}
