//! Decodes a simulated recording (perf.data) with the project's own
//! instruction-flow decoder (pt-decoder) and compares every thread's decoded
//! instructions with its recorded execution: the ground truth of the
//! execution log, restricted by [`TracedFilter`] to what the configuration
//! traces.
//!
//! The recording is read with pt-perf-data: each thread's AUX stream (its
//! AUXTRACE records, by `idx`), cut where the thread execs (the trace unit
//! restarts there with a PSB+), each piece decoded with the image its
//! process's MMAP2 records describe (the vDSO and code in no file come from
//! the build-id cache and the dumps beside the file, see
//! [`pt_sim::record::PerfDataSink`]). The simulator writes a thread's trace
//! before the side-band that follows it, so file order tells which program
//! a chunk of trace belongs to. Snapshot recordings are not checked here.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use pt_decoder::event::EventKind;
use pt_decoder::image::Image;
use pt_decoder::{Config, Decoder, Granularity, Item};
use pt_hal::config::TraceConfig;
use pt_perf_data::{misc, Feature, MappedFile, Record};
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

/// A full-trace recording of the simulator, read back for checking (a small
/// reader of our own files; the decoder's perf.data session supersedes it).
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

/// The file an MMAP2 names, as the decoder loads it: `[vdso]` through the
/// build-id cache beside the perf.data.
fn image_file(name: &str, perf_data: &Path, build_ids: &HashMap<String, Vec<u8>>) -> PathBuf {
    if name == "[vdso]" {
        let cache = pt_elf::BuildIdCache::new(pt_sim::record::debug_dir(perf_data));
        if let Some(p) = build_ids
            .get(name)
            .and_then(|id| cache.linked(id, pt_elf::EntryKind::Vdso))
        {
            return p;
        }
    }
    PathBuf::from(name)
}

fn read_recording(path: &Path) -> Result<Recording, Error> {
    let err = |e: &dyn std::fmt::Display| Error::recording(path, e);
    let file = MappedFile::open(path).map_err(|e| err(&e))?;
    let perf = file.parse().map_err(|e| err(&e))?;
    let info = perf
        .intel_pt_info()
        .ok_or_else(|| err(&"no intel_pt AUXTRACE_INFO: not an Intel PT recording"))?
        .map_err(|e| err(&e))?;
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
    let mtc = info.mtc.unwrap_or_default();
    let decoder = Config {
        mtc_freq: config.mtc.unwrap_or(0),
        nom_freq: info.max_non_turbo_ratio.unwrap_or(0) as u8,
        cpuid_0x15_eax: mtc.tsc_ctc_ratio_d as u32,
        cpuid_0x15_ebx: mtc.tsc_ctc_ratio_n as u32,
        ..Config::default()
    };
    let mut build_ids = HashMap::new();
    if let Some(Ok(Feature::BuildId(v))) = perf.feature(pt_perf_data::feature_id::BUILD_ID) {
        for b in v {
            let name = String::from_utf8_lossy(&b.filename).into_owned();
            build_ids.insert(name, b.build_id.as_bytes().to_vec());
        }
    }
    // Per process: its executable mappings; per thread: execs, comm, the piece
    // being filled.
    let mut maps: HashMap<u32, Vec<MapLine>> = HashMap::new();
    let mut execs: HashMap<ThreadId, u32> = HashMap::new();
    let mut comms: HashMap<u32, String> = HashMap::new();
    let mut open: HashMap<ThreadId, usize> = HashMap::new();
    let mut pieces: Vec<TracePiece> = Vec::new();
    // Thread → process, from ITRACE_START (which comes before a thread's trace).
    let mut pids: HashMap<u32, u32> = HashMap::new();
    for r in perf.records() {
        let (_, r) = r.map_err(|e| err(&e))?;
        match r {
            Record::Comm(c) if c.misc & misc::COMM_EXEC != 0 => {
                let t = ThreadId {
                    pid: c.pid,
                    tid: c.tid,
                };
                *execs.entry(t).or_default() += 1;
                comms.insert(c.pid, c.comm.to_str_lossy().into_owned());
                maps.insert(c.pid, Vec::new());
                open.remove(&t);
            }
            Record::Mmap2(m) if m.prot & 4 != 0 => {
                let name = m.filename.to_str_lossy();
                let line = MapLine {
                    start: m.start,
                    end: m.start + m.len,
                    file_offset: m.pgoff,
                    perms: "r-xp".into(),
                    path: image_file(&name, path, &build_ids),
                };
                let v = maps.entry(m.pid).or_default();
                v.retain(|o| o.end <= line.start || o.start >= line.end);
                v.push(line);
                for (t, &i) in &open {
                    if t.pid == m.pid {
                        pieces[i].maps = v.clone();
                    }
                }
            }
            Record::Fork(f) if f.pid != f.ppid => {
                let m = maps.get(&f.ppid).cloned().unwrap_or_default();
                maps.insert(f.pid, m);
                if let Some(c) = comms.get(&f.ppid).cloned() {
                    comms.insert(f.pid, c);
                }
            }
            Record::ItraceStart(s) => {
                pids.insert(s.tid, s.pid);
            }
            Record::Auxtrace(a) => {
                let t = ThreadId {
                    pid: pids.get(&a.tid).copied().unwrap_or(a.tid),
                    tid: a.tid,
                };
                let i = *open.entry(t).or_insert_with(|| {
                    pieces.push(TracePiece {
                        thread: t,
                        execs: execs.get(&t).copied().unwrap_or(0),
                        comm: comms.get(&t.pid).cloned().unwrap_or_default(),
                        data: Vec::new(),
                        maps: maps.get(&t.pid).cloned().unwrap_or_default(),
                    });
                    pieces.len() - 1
                });
                pieces[i].data.extend_from_slice(a.data);
            }
            _ => {}
        }
    }
    Ok(Recording {
        config,
        filters,
        decoder,
        snapshot: info.snapshot_mode != 0,
        pieces,
    })
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
