//! The files a simulated recording is kept in until perf.data takes over:
//! per thread a trace file and a side-band file (see [`crate::sideband`]),
//! named from the first thread's trace `OUT`:
//!
//! - `OUT`, `OUT.sideband`: the first thread (the program started);
//! - `OUT.TID`, `OUT.TID.sideband`: every other thread;
//! - `….execN` (and its `.sideband`): a thread's trace after its N-th exec
//!   in the recording (a program loaded at the same addresses as the one
//!   before needs an image of its own: one file per program);
//! - `OUT.code-START` (`OUT.code-PID-START` for other processes): code that
//!   is in no file (the vDSO), dumped for the side-bands to map.
//!
//! Each side-band holds its thread's `pid`, `tid`, `execs` (how many execs
//! of the thread came before its trace, for the check against the execution
//! log), images (trace offsets of its own file) and `exit`; the first one
//! also lists every trace file (`thread PID TID PARENT KIND EXECS FILE`) and
//! the task events (`task TSC ...`). Side-bands are rewritten at checkpoints
//! and at the end.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::{ProcessMemory, RecordSink, RecordSummary, TaskEvent, ThreadStart, Timed};
use crate::exec::{CloneKind, ExitKind, Mapping, ThreadId};
use crate::sideband::SidebandWriter;

/// The side-band file next to a trace.
pub fn sideband_path(trace: &Path) -> PathBuf {
    let mut s = trace.as_os_str().to_owned();
    s.push(".sideband");
    PathBuf::from(s)
}

/// The trace file of a thread other than the first: `OUT.TID`.
pub fn thread_trace_path(trace: &Path, thread: ThreadId) -> PathBuf {
    let mut s = trace.as_os_str().to_owned();
    s.push(format!(".{}", thread.tid));
    PathBuf::from(s)
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{}: {e}", path.display())
}

/// One trace file of a thread: its trace while it ran one program.
struct Segment {
    path: PathBuf,
    out: Option<BufWriter<File>>,
    written: u64,
    /// The thread's execs before it.
    execs: u32,
    /// Images by trace offset.
    images: Vec<(u64, Vec<Mapping>)>,
    dirty: bool,
}

/// One thread's files.
struct ThreadFiles {
    /// Its first trace file; later ones add `.execN`.
    base: PathBuf,
    /// The side-band's header (the recording parameters, `pid`, `tid`).
    head: SidebandWriter,
    segments: Vec<Segment>,
    exit: Option<ExitKind>,
    ended: bool,
}

impl ThreadFiles {
    fn open_segment(&mut self, execs: u32, maps: Vec<Mapping>) -> Result<(), String> {
        let path = match self.segments.len() {
            0 => self.base.clone(),
            n => {
                let mut s = self.base.as_os_str().to_owned();
                s.push(format!(".exec{n}"));
                PathBuf::from(s)
            }
        };
        let file = File::create(&path).map_err(io(&path))?;
        self.segments.push(Segment {
            path,
            out: Some(BufWriter::with_capacity(1 << 20, file)),
            written: 0,
            execs,
            images: vec![(0, maps)],
            dirty: true,
        });
        Ok(())
    }

    fn close_segment(&mut self) -> Result<(), String> {
        if let Some(s) = self.segments.last_mut() {
            if let Some(mut o) = s.out.take() {
                o.flush().map_err(io(&s.path))?;
            }
            s.dirty = true;
        }
        Ok(())
    }
}

/// Writes a recording as trace and side-band files (see the module docs).
pub struct FileSink {
    trace: PathBuf,
    threads: HashMap<ThreadId, ThreadFiles>,
    order: Vec<ThreadId>,
    /// Execs of each thread so far.
    execs: HashMap<ThreadId, u32>,
    /// Executable mappings of each process now.
    maps: HashMap<u32, Vec<Mapping>>,
    /// Creator and kind of each thread.
    origin: HashMap<ThreadId, (Option<ThreadId>, Option<CloneKind>)>,
    /// `task` lines of the first side-band.
    tasks: Vec<String>,
    dirty: bool,
}

impl FileSink {
    /// Files named from `trace`, the first thread's trace (its directory is
    /// created if needed, as `perf record -o` does).
    pub fn new(trace: &Path) -> Result<Self, String> {
        if let Some(dir) = trace.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        // The first thread's trace exists from the start (even if it never runs).
        File::create(trace).map_err(io(trace))?;
        Ok(FileSink {
            trace: trace.to_path_buf(),
            threads: HashMap::new(),
            order: Vec::new(),
            execs: HashMap::new(),
            maps: HashMap::new(),
            origin: HashMap::new(),
            tasks: Vec::new(),
            dirty: false,
        })
    }

    fn task(&mut self, tsc: u64, what: String) {
        self.tasks.push(format!("{tsc:#x} {what}"));
        self.dirty = true;
    }

    /// Where code in no file of process `pid` is dumped.
    fn dump_base(&self, pid: u32) -> std::ffi::OsString {
        let mut s = self.trace.as_os_str().to_owned();
        if self.order.first().is_some_and(|f| f.pid != pid) {
            s.push(format!(".code-{pid}-"));
        } else {
            s.push(".code-");
        }
        s
    }

    /// Rewrites the side-band files that changed; `complete`: the recording
    /// ended normally (each gets its `end` line).
    fn write_sidebands(&mut self, memory: ProcessMemory<'_>, complete: bool) -> Result<(), String> {
        let first = self.order.first().copied();
        let mut listing = Vec::new();
        for id in &self.order {
            let Some(t) = self.threads.get(id) else {
                continue;
            };
            let (parent, kind) = self.origin.get(id).copied().unwrap_or_default();
            let parent = parent.map_or_else(|| "-".to_string(), |p| p.to_string());
            let kind = match kind {
                None => "-",
                Some(CloneKind::Thread) => "thread",
                Some(CloneKind::Fork) => "fork",
                Some(CloneKind::Vfork) => "vfork",
            };
            for s in &t.segments {
                listing.push(format!(
                    "{} {} {parent} {kind} {} {}",
                    id.pid,
                    id.tid,
                    s.execs,
                    s.path.display()
                ));
            }
        }
        for id in self.order.clone() {
            let is_first = Some(id) == first;
            let dump_base = self.dump_base(id.pid);
            let Some(t) = self.threads.get_mut(&id) else {
                continue;
            };
            let last = t.segments.len().saturating_sub(1);
            for (n, s) in t.segments.iter_mut().enumerate() {
                let head_changed = is_first && n == 0 && self.dirty;
                if !(s.dirty || head_changed || complete) {
                    continue;
                }
                if let Some(o) = &mut s.out {
                    o.flush().map_err(io(&s.path))?;
                }
                let mut w = t.head.clone();
                w.line("execs", &s.execs.to_string());
                let mem = memory(id.pid);
                for (offset, maps) in &s.images {
                    w.image(*offset, maps, |start, end| {
                        let mem = mem?;
                        let mut p = dump_base.clone();
                        p.push(format!("{start:x}"));
                        let p = PathBuf::from(p);
                        let len = usize::try_from(end.wrapping_sub(start)).ok()?.min(1 << 24);
                        let mut bytes = vec![0u8; len];
                        let mut any = false;
                        let mut a = 0;
                        while a < len {
                            let got =
                                mem.read(start + a as u64, &mut bytes[a..(a + 4096).min(len)]);
                            any |= got > 0;
                            a += 4096;
                        }
                        if !any {
                            return None;
                        }
                        std::fs::write(&p, &bytes).ok()?;
                        Some(p)
                    });
                }
                if n == last {
                    match t.exit {
                        Some(ExitKind::Exited(c)) => w.line("exit", &format!("exited {c}")),
                        Some(ExitKind::Killed(s)) => w.line("exit", &format!("killed {s}")),
                        None => {}
                    }
                }
                if complete {
                    w.line("end", &s.written.to_string());
                }
                if is_first && n == 0 {
                    for l in &listing {
                        w.line("thread", l);
                    }
                    for l in &self.tasks {
                        w.line("task", l);
                    }
                }
                let sb = sideband_path(&s.path);
                std::fs::write(&sb, w.text()).map_err(io(&sb))?;
                s.dirty = false;
            }
        }
        self.dirty = false;
        Ok(())
    }
}

impl RecordSink for FileSink {
    fn open_thread(&mut self, start: &ThreadStart<'_>) -> Result<(), String> {
        let base = if start.first {
            self.trace.clone()
        } else {
            thread_trace_path(&self.trace, start.id)
        };
        let mut head =
            SidebandWriter::new(&start.params.clock, &start.config.to_regs(), start.id.pid);
        head.line("tid", &start.id.tid.to_string());
        let mut t = ThreadFiles {
            base,
            head,
            segments: Vec::new(),
            exit: None,
            ended: false,
        };
        let execs = self.execs.get(&start.id).copied().unwrap_or(0);
        t.open_segment(execs, start.maps.to_vec())?;
        self.maps.insert(start.id.pid, start.maps.to_vec());
        self.threads.insert(start.id, t);
        self.order.push(start.id);
        self.dirty = true;
        Ok(())
    }

    fn trace(&mut self, thread: ThreadId, bytes: &[u8]) -> Result<(), String> {
        let Some(s) = self
            .threads
            .get_mut(&thread)
            .and_then(|t| t.segments.last_mut())
        else {
            return Err(format!(
                "trace bytes of thread {thread}, which has no trace"
            ));
        };
        let Some(out) = &mut s.out else {
            return Err(format!("trace bytes of thread {thread} after its end"));
        };
        out.write_all(bytes).map_err(io(&s.path))?;
        s.written += bytes.len() as u64;
        Ok(())
    }

    fn lost(&mut self, _thread: ThreadId, _size: u64) -> Result<(), String> {
        // The trace file simply goes on; the summary counts the loss.
        Ok(())
    }

    fn task_event(&mut self, event: &Timed) -> Result<(), String> {
        let tsc = event.tsc;
        match &event.event {
            TaskEvent::Comm { thread, comm, path } => {
                self.task(
                    tsc,
                    format!("comm {} {} {comm} {path}", thread.pid, thread.tid),
                );
                let execs = self.execs.entry(*thread).or_insert(0);
                *execs += 1;
                let execs = *execs;
                let maps = self.maps.get(&thread.pid).cloned().unwrap_or_default();
                // The new program's trace goes to a file of its own.
                if let Some(t) = self.threads.get_mut(thread).filter(|t| !t.ended) {
                    t.close_segment()?;
                    t.open_segment(execs, maps)?;
                    self.dirty = true;
                }
            }
            TaskEvent::Mmap { thread, mapping: m } => self.task(
                tsc,
                format!(
                    "mmap {} {} {:#x} {:#x} {:#x} {}",
                    thread.pid, thread.tid, m.start, m.end, m.offset, m.path
                ),
            ),
            TaskEvent::Image { pid, maps } => {
                self.maps.insert(*pid, maps.clone());
                for (id, t) in self.threads.iter_mut() {
                    if id.pid != *pid || t.ended {
                        continue;
                    }
                    if let Some(s) = t.segments.last_mut() {
                        if s.images.last().is_some_and(|(o, _)| *o == s.written) {
                            s.images.pop();
                        }
                        s.images.push((s.written, maps.clone()));
                        s.dirty = true;
                    }
                }
            }
            TaskEvent::Fork {
                parent,
                child,
                kind,
            } => {
                self.origin.insert(*child, (Some(*parent), Some(*kind)));
                if *kind != CloneKind::Thread {
                    if let Some(m) = self.maps.get(&parent.pid).cloned() {
                        self.maps.insert(child.pid, m);
                    }
                }
                let kind = match kind {
                    CloneKind::Thread => "thread",
                    CloneKind::Fork => "fork",
                    CloneKind::Vfork => "vfork",
                };
                self.task(
                    tsc,
                    format!(
                        "fork {} {} {} {} {kind}",
                        parent.pid, parent.tid, child.pid, child.tid
                    ),
                );
            }
            TaskEvent::Exit { thread, how } => {
                let how_text = match how {
                    Some(ExitKind::Exited(c)) => format!("exited {c}"),
                    Some(ExitKind::Killed(s)) => format!("killed {s}"),
                    None => "alive".to_string(),
                };
                self.task(
                    tsc,
                    format!("exit {} {} {how_text}", thread.pid, thread.tid),
                );
                if let Some(t) = self.threads.get_mut(thread) {
                    t.exit = *how;
                    t.ended = true;
                    t.close_segment()?;
                }
            }
        }
        Ok(())
    }

    fn checkpoint(&mut self, memory: ProcessMemory<'_>) -> Result<(), String> {
        for t in self.threads.values_mut() {
            for s in &mut t.segments {
                if let Some(o) = &mut s.out {
                    o.flush().map_err(io(&s.path))?;
                }
            }
        }
        let dirty = self.dirty
            || self
                .threads
                .values()
                .any(|t| t.segments.iter().any(|s| s.dirty));
        if dirty {
            self.write_sidebands(memory, false)?;
        }
        Ok(())
    }

    fn finish(&mut self, summary: &RecordSummary, memory: ProcessMemory<'_>) -> Result<(), String> {
        for t in self.threads.values_mut() {
            t.close_segment()?;
        }
        let complete = summary.stopped.is_none() && summary.source_error.is_none();
        self.write_sidebands(memory, complete)
    }
}
