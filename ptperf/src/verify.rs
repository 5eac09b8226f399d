//! Decodes a simulated recording (perf.data) with the project's own
//! instruction-flow decoder (pt-decoder) and compares every thread's decoded
//! instructions with its recorded execution: the ground truth of the
//! execution log, restricted by [`TracedFilter`] to what the configuration
//! traces.
//!
//! The recording is read with pt-perf's session: each thread's AUX queue, cut
//! where the thread execs (the trace unit restarts there with a PSB+), each
//! piece decoded with the image its process's MMAP2 records describe (the vDSO
//! and code in no file come from the build-id cache and the dumps beside the
//! file, see [`pt_sim::record::PerfDataSink`]). The simulator writes a thread's
//! trace before the side-band that follows it, so file order (the records'
//! offsets the session keeps) tells which program a chunk of trace belongs to.
//! Snapshot recordings are not checked here.

use std::path::{Path, PathBuf};

use pt_decoder::event::EventKind;
use pt_decoder::image::Image;
use pt_decoder::{Config, Decoder, Granularity, Item};
use pt_hal::config::TraceConfig;
use pt_perf::session::{Session, SessionOptions};
use pt_perf_data::MappedFile;
use pt_sim::exec::log::LogReader;
use pt_sim::exec::{ExecutionSource, ThreadId};
use pt_sim::record::FilterSpec;
pub use pt_sim::traced::TracedFilter;

use crate::profile::{MapLine, Profile, Profiler};
use crate::Error;

/// What decoding one trace found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowSummary {
    /// Instructions the decoder reconstructed.
    pub decoded: u64,
    /// Instructions of the recording that were traced (in the IP filter).
    pub expected: u64,
    /// Index and IPs (decoded, expected) of the first difference, if any.
    pub first_difference: Option<(u64, u64, u64)>,
    /// Tracing enabled (TIP.PGE) events.
    pub enables: u64,
    /// Tracing disabled (TIP.PGD, also asynchronous) events.
    pub disables: u64,
    /// Asynchronous disables (FUP+TIP.PGD: interrupts, faults).
    pub async_disables: u64,
    /// Overflows.
    pub overflows: u64,
    /// Decode errors (each followed by a resync), with the first message.
    pub errors: u64,
    /// The first error.
    pub first_error: Option<String>,
    /// Image sections loaded.
    pub sections: usize,
    /// Why the execution log could not be read to its end (cut short or
    /// corrupt, with the offset): the comparison covers what came before.
    pub log_error: Option<String>,
}

impl FlowSummary {
    /// Whether the decoded flow is exactly the recorded one.
    pub fn identical(&self) -> bool {
        self.errors == 0
            && self.first_difference.is_none()
            && self.decoded == self.expected
            && self.log_error.is_none()
    }
}

/// One thread's trace while it ran one program, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceCheck {
    /// The thread.
    pub thread: ThreadId,
    /// Execs of the thread before this trace (the first program of the
    /// recording counts as one).
    pub execs: u32,
    /// The program's command name (COMM), if one was recorded.
    pub comm: String,
    /// Trace bytes.
    pub bytes: u64,
    /// What decoding found.
    pub flow: FlowSummary,
}

/// One piece of a thread's trace: its AUX data while it ran one program.
#[derive(Clone, Debug)]
pub struct TracePiece {
    /// The thread.
    pub thread: ThreadId,
    /// Its execs before the piece (the recording's first program counts).
    pub execs: u32,
    /// The program's command name.
    pub comm: String,
    /// The trace.
    pub data: Vec<u8>,
    /// The executable mappings of its process (the last seen at each address).
    pub maps: Vec<MapLine>,
}

impl TracePiece {
    /// The image to decode the piece with: its process's executable mappings.
    pub fn image(&self) -> Image {
        image_of(&self.maps)
    }
}

/// A full-trace recording of the simulator, read back for checking through
/// pt-perf's session.
#[derive(Clone, Debug)]
pub struct Recording {
    /// The configuration of the intel_pt event.
    pub config: TraceConfig,
    /// Its address filters.
    pub filters: Vec<FilterSpec>,
    /// The decoder's configuration (MTC, CTC and TSC ratios).
    pub decoder: Config,
    /// Snapshot mode: the pieces hold the snapshots one after the other.
    pub snapshot: bool,
    /// Every thread's trace, one piece per program it ran, in file order.
    pub pieces: Vec<TracePiece>,
}

impl Recording {
    /// Reads the simulated recording `path` (see the module docs).
    pub fn read(path: &Path) -> Result<Self, Error> {
        read_recording(path)
    }
}

fn read_recording(path: &Path) -> Result<Recording, Error> {
    let err = |e: &dyn std::fmt::Display| Error::recording(path, e);
    let file = MappedFile::open(path).map_err(|e| err(&e))?;
    let perf = file.parse().map_err(|e| err(&e))?;
    let session = Session::new(&perf, SessionOptions::for_file(path)).map_err(|e| err(&e))?;
    let info = session.info();
    let pt = perf
        .events()
        .iter()
        .find(|e| u64::from(e.attr.type_) == info.pmu_type)
        .ok_or_else(|| err(&"no intel_pt event"))?;
    let flags = pt.attr.flags;
    let config = pt_hal::perf::attr::trace_config_of(
        pt.attr.config,
        flags.has(pt_perf_data::AttrFlags::EXCLUDE_KERNEL),
        flags.has(pt_perf_data::AttrFlags::EXCLUDE_USER),
    )
    .map_err(|e| err(&e))?;
    let filter = String::from_utf8_lossy(info.filter.as_deref().unwrap_or(&[])).into_owned();
    let filters = FilterSpec::parse_list(&filter).map_err(|e| err(&e))?;
    let side = FileOrder::new(&session);
    let mut pieces: Vec<(u64, TracePiece)> = Vec::new();
    for q in session.queues() {
        let Some(tid) = q.tid else { continue };
        let thread = ThreadId {
            pid: side.pid(tid),
            tid,
        };
        // The thread's AUX data, cut where it execs (its trace unit restarts there).
        let execs = side.execs(tid);
        let mut open: Option<usize> = None;
        for p in &q.pieces {
            let at = p.record_offset;
            let n = execs.iter().filter(|&&x| x < at).count();
            let open_n = open.map(|i| pieces[i].1.execs);
            if open_n != Some(n as u32) {
                // Its program runs until the next exec of the thread (or the end).
                let until = execs.iter().copied().find(|&x| x > at).unwrap_or(u64::MAX);
                pieces.push((
                    at,
                    TracePiece {
                        thread,
                        execs: n as u32,
                        comm: side.comm(tid, at),
                        data: Vec::new(),
                        maps: side.maps(thread.pid, until, &session),
                    },
                ));
                open = Some(pieces.len() - 1);
            }
            if let Some(i) = open {
                pieces[i].1.data.extend_from_slice(p.data);
            }
        }
    }
    // In file order, as the threads' traces came.
    pieces.sort_by_key(|(at, _)| *at);
    Ok(Recording {
        config,
        filters,
        decoder: *session.config(),
        snapshot: session.snapshot(),
        pieces: pieces.into_iter().map(|(_, p)| p).collect(),
    })
}

/// The session's side-band taken in file order, as the kernel sees it (an exec
/// replaces the process's mappings, a fork copies them): the simulator writes a
/// thread's trace before the side-band that follows it, so a record's file offset
/// says which program a piece of trace belongs to.
struct FileOrder<'s> {
    threads: Vec<&'s pt_perf::session::Thread>,
}

impl<'s> FileOrder<'s> {
    fn new(session: &'s Session<'_>) -> Self {
        FileOrder {
            threads: session.threads().collect(),
        }
    }

    fn of(&self, tid: u32) -> impl Iterator<Item = &'s pt_perf::session::Thread> + '_ {
        self.threads.iter().copied().filter(move |t| t.tid == tid)
    }

    /// The process of `tid` (itself when no record said).
    fn pid(&self, tid: u32) -> u32 {
        self.of(tid).find_map(|t| t.pid).unwrap_or(tid)
    }

    /// The file offsets of the execs of `tid`, in order.
    fn execs(&self, tid: u32) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .of(tid)
            .flat_map(|t| t.comms.iter())
            .filter(|c| c.exec)
            .map(|c| c.record_offset)
            .collect();
        v.sort_unstable();
        v
    }

    /// The name of `tid` at file offset `at`: its last COMM before it.
    fn comm(&self, tid: u32, at: u64) -> String {
        self.of(tid)
            .flat_map(|t| t.comms.iter())
            .filter(|c| c.record_offset < at)
            .max_by_key(|c| c.record_offset)
            .map(|c| c.comm.clone())
            .unwrap_or_default()
    }

    /// The executable mappings of `pid` just before file offset `until`: those
    /// since its last exec, or else inherited at its fork, later ones replacing
    /// what they overlap.
    fn maps(&self, pid: u32, until: u64, session: &Session<'_>) -> Vec<MapLine> {
        let exec = self
            .threads
            .iter()
            .filter(|t| t.pid == Some(pid))
            .flat_map(|t| t.comms.iter())
            .filter(|c| c.exec && c.record_offset < until)
            .map(|c| c.record_offset)
            .max();
        // The process's fork: that of its main thread, from another process.
        let fork = self
            .of(pid)
            .filter_map(|t| Some((t.fork_offset?, t.parent_tid?)))
            .filter(|&(at, _)| at < until)
            .max_by_key(|&(at, _)| at)
            .map(|(at, ptid)| (at, self.pid(ptid)))
            .filter(|&(_, ppid)| ppid != pid);
        let (mut v, since) = match (exec, fork) {
            (Some(e), _) => (Vec::new(), e),
            (None, Some((f, ppid))) => (self.maps(ppid, f, session), f),
            (None, None) => (Vec::new(), 0),
        };
        for m in session.mappings() {
            let exec_prot = m.prot.is_some_and(|p| p & 4 != 0);
            let span = since..until;
            if m.pid != Some(pid) || !exec_prot || !span.contains(&m.record_offset) {
                continue;
            }
            let line = MapLine {
                start: m.start,
                end: m.end(),
                file_offset: m.pgoff,
                perms: "r-xp".into(),
                path: code_path(m, session),
            };
            v.retain(|o: &MapLine| o.end <= line.start || o.start >= line.end);
            v.push(line);
        }
        v
    }
}

/// The file a mapping's code is read from: the session's lookup (the vDSO and
/// dumps through the build-id cache beside the perf.data), else its own name.
fn code_path(m: &pt_perf::session::Mapping, session: &Session<'_>) -> PathBuf {
    match session.code_file(m) {
        Ok(c) => c.path.clone(),
        Err(_) => PathBuf::from(&m.filename),
    }
}

/// The instructions each thread's trace shows, in order: the ground truth
/// of the execution log `log` for a recording with `config` and `filters`
/// (every thread and program of it).
pub fn ground_truth(
    log: &Path,
    config: &TraceConfig,
    filters: &[FilterSpec],
) -> Result<std::collections::BTreeMap<ThreadId, Vec<u64>>, Error> {
    let mut r = LogReader::open(log).map_err(|e| Error::recording(log, e))?;
    let mut f = TracedFilter::new(config).filters(filters);
    let mut cursor = pt_sim::exec::ThreadCursor::new();
    let mut out: std::collections::BTreeMap<ThreadId, Vec<u64>> = Default::default();
    while let Some(item) = r.next_item().map_err(|e| Error::recording(log, e))? {
        let t = cursor.follow(&item);
        if let Some(ip) = f.shown(&item, r.memory()) {
            out.entry(t).or_default().push(ip);
        }
    }
    Ok(out)
}

/// Decodes every thread of the recording `perf_data` and compares each with
/// its recorded execution in `log`.
pub fn verify(perf_data: &Path, log: &Path) -> Result<Vec<TraceCheck>, Error> {
    verify_with(perf_data, log, None, None, &mut |_| {})
}

/// [`verify`] with the configuration the trace was recorded with given
/// (for what perf.data cannot say, such as CR3 filtering).
pub fn verify_config(
    perf_data: &Path,
    log: &Path,
    config: TraceConfig,
) -> Result<Vec<TraceCheck>, Error> {
    verify_with(perf_data, log, Some(config), None, &mut |_| {})
}

/// [`verify`], also profiling the decoded flow of all threads (see
/// [`crate::profile`]); `progress` is called with the instructions decoded
/// so far, every 2^20.
pub fn verify_profile(
    perf_data: &Path,
    log: &Path,
    progress: &mut dyn FnMut(u64),
) -> Result<(Vec<TraceCheck>, Profile), Error> {
    let mut prof = None;
    let checks = verify_with(perf_data, log, None, Some(&mut prof), progress)?;
    Ok((checks, prof.unwrap_or_default()))
}

fn verify_with(
    perf_data: &Path,
    log: &Path,
    config: Option<TraceConfig>,
    mut profile: Option<&mut Option<Profile>>,
    progress: &mut dyn FnMut(u64),
) -> Result<Vec<TraceCheck>, Error> {
    let rec = read_recording(perf_data)?;
    if rec.snapshot {
        return Err(Error::recording(
            perf_data,
            "a snapshot recording: its snapshots are not checked against the execution",
        ));
    }
    let config = config.unwrap_or(rec.config);
    let mut out = Vec::new();
    let mut decoded_before = 0;
    for p in &rec.pieces {
        let filter = TracedFilter::new(&config)
            .filters(&rec.filters)
            .thread(p.thread)
            .execs(p.execs);
        let mut profiler = profile.is_some().then(|| Profiler::new(&p.maps));
        let flow = check_piece(p, &rec.decoder, filter, log, profiler.as_mut(), &mut |n| {
            progress(decoded_before + n)
        })?;
        decoded_before += flow.decoded;
        if let (Some(slot), Some(pr)) = (profile.as_deref_mut(), profiler) {
            let pp = pr.finish(&p.data, &rec.decoder);
            *slot = Some(match slot.take() {
                None => pp,
                Some(acc) => acc.merge(pp),
            });
        }
        out.push(TraceCheck {
            thread: p.thread,
            execs: p.execs,
            comm: p.comm.clone(),
            bytes: p.data.len() as u64,
            flow,
        });
    }
    Ok(out)
}

/// The image of a piece: its process's executable mappings.
fn image_of(maps: &[MapLine]) -> Image {
    let mut image = Image::new();
    for m in maps {
        // A file that cannot be read leaves a hole the decoder reports.
        let _ = image.add_file(&m.path, m.file_offset, Some(m.end - m.start), m.start);
    }
    image
}

fn check_piece(
    p: &TracePiece,
    config: &Config,
    filter: TracedFilter,
    log: &Path,
    mut profiler: Option<&mut Profiler>,
    progress: &mut dyn FnMut(u64),
) -> Result<FlowSummary, Error> {
    let image = image_of(&p.maps);
    let mut truth = LogReader::open(log).map_err(|e| Error::recording(log, e))?;
    let mut truth_filter = filter.clone();
    let log_error = std::cell::Cell::new(None);
    let log_error_ref = &log_error;
    let mut next_truth = move || -> Option<u64> {
        loop {
            match truth.next_item() {
                Ok(Some(item)) => {
                    if let Some(ip) = truth_filter.shown(&item, truth.memory()) {
                        return Some(ip);
                    }
                }
                Ok(None) => return None,
                Err(e) => {
                    log_error_ref.set(Some(Error::recording(log, e).to_string()));
                    return None;
                }
            }
        }
    };
    let mut s = FlowSummary {
        sections: image.sections().len(),
        ..FlowSummary::default()
    };
    let dec = Decoder::builder(&p.data, &image)
        .config(config)
        .granularity(Granularity::Instructions)
        .build();
    if let Some(pr) = profiler.as_deref_mut() {
        pr.break_flow();
    }
    for item in dec {
        match item {
            Item::Insn(i) => {
                let insn = i.insn;
                let want = next_truth();
                if s.first_difference.is_none() && want != Some(insn.ip) {
                    s.first_difference = Some((s.decoded, insn.ip, want.unwrap_or(0)));
                }
                s.decoded += 1;
                if let Some(pr) = profiler.as_deref_mut() {
                    pr.insn(&insn, &image);
                }
                if s.decoded & 0xf_ffff == 0 {
                    progress(s.decoded);
                }
            }
            Item::Event(e) if !e.event.status_update => {
                let pr = profiler.as_deref_mut();
                match e.event.kind {
                    EventKind::Enabled { .. } => s.enables += 1,
                    EventKind::Disabled { ip } => {
                        s.disables += 1;
                        if let Some(pr) = pr {
                            pr.disabled(Some(ip));
                        }
                    }
                    EventKind::AsyncDisabled { at, .. } => {
                        s.disables += 1;
                        s.async_disables += 1;
                        if let Some(pr) = pr {
                            pr.flow_at(at);
                        }
                    }
                    EventKind::AsyncBranch { from, .. } => {
                        if let Some(pr) = pr {
                            pr.flow_at(from);
                        }
                    }
                    EventKind::Overflow { .. } => {
                        s.overflows += 1;
                        if let Some(pr) = pr {
                            pr.break_flow();
                        }
                    }
                    _ => {}
                }
            }
            // The decoder goes on at the next PSB: the flow breaks there.
            Item::Error(e) => {
                s.errors += 1;
                s.first_error.get_or_insert_with(|| e.to_string());
                if let Some(pr) = profiler.as_deref_mut() {
                    pr.break_flow();
                }
            }
            _ => {}
        }
    }
    s.expected = s.decoded;
    if s.first_difference.is_none() {
        while next_truth().is_some() {
            s.expected += 1;
        }
    } else {
        s.expected = 0;
        let mut t = LogReader::open(log).map_err(|e| Error::recording(log, e))?;
        let mut f = filter;
        while let Ok(Some(item)) = t.next_item() {
            if f.shown(&item, t.memory()).is_some() {
                s.expected += 1;
            }
        }
    }
    s.log_error = log_error.take();
    Ok(s)
}
