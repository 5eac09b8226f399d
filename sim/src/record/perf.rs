//! A simulated recording as the perf.data file `perf record -e intel_pt//u`
//! would write, so that perf itself (`perf script`, `perf report`) decodes it.
//!
//! # How the simulation maps to perf.data
//! - **Per-thread AUX areas** (perf's `--per-thread` layout: AUXTRACE_INFO's
//!   per_cpu_mmaps is 0): each thread's trace unit is one AUX area with its
//!   own `idx` (the order threads started in); its AUXTRACE records carry
//!   that idx, the thread's `tid` and cpu -1, and `offset` is the position in
//!   the thread's stream. The simulated CPU runs one thread at a time and
//!   switches trace units with the threads, so no context-switch records are
//!   needed (have_sched_switch 0). ITRACE_START opens each thread's trace.
//! - **Side-band** from the recorder's task events: COMM with the exec flag
//!   (a program starts), MMAP2 of every executable mapping, FORK, EXIT (not
//!   for threads still alive when the recording stopped). A thread's trace up
//!   to an event is written before the event's record (the pending AUX data
//!   of every thread is flushed first), so in file order each AUXTRACE chunk
//!   precedes the side-band that came after it.
//! - **Times**: with `tsc` the events sample TIME, and perf time is the TSC
//!   converted with AUXTRACE_INFO's time_shift/mult/zero (also in TIME_CONV):
//!   a [`crate::clock::ClockParams`] TSC of `nom_freq × 100 MHz`, time_zero 0.
//!   AUXTRACE `reference` is the TSC when the data was copied out (after
//!   every TSC in it), as perf record stores rdtsc there.
//! - **The CPU**: CPUID feature [`SIM_CPUID`] (an Ice Lake-like part with
//!   none of the errata perf works around), one CPU; TSC:CTC ratio and the
//!   max non-turbo ratio from the clock parameters.
//! - **Code in no file**: the vDSO is MMAP2'd as `[vdso]` and its code
//!   (the pages the program ran, merged over processes) is written to a
//!   build-id cache beside the file, `OUT.debug/[vdso]/BUILDID/vdso` with
//!   the link `OUT.debug/.build-id/BU/ILDID`, and named in the BUILD_ID
//!   feature: `perf --buildid-dir OUT.debug script` decodes through it.
//!   BUILDID is the vDSO's own note when its first page was captured, else
//!   a hash of the bytes. Other code in no file (anonymous executable
//!   memory, deleted files, scripted code) is dumped to
//!   `OUT.debug/anon/PID-START` and MMAP2'd from that file at offset 0, so
//!   any reader maps it as a file.
//! - **Snapshot mode** (`-S`): each thread's AUX area is a ring of
//!   [`SnapshotOptions::aux_size`] bytes the trace overwrites; a snapshot
//!   copies what each ring gained since the last one (as much of it as the
//!   ring still holds, at most [`SnapshotOptions::size`] bytes) at its
//!   offset in the thread's trace stream: snapshots never overlap, and
//!   AUXTRACE_INFO says snapshot_mode, as perf writes it.
//!
//! Checkpoints make the file on disk complete (perf reads a killed
//! recording up to the last one).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use pt_perf_data::intel_pt::{config as pt_config, intel_pt_attr, tracking_attr};
use pt_perf_data::{
    misc, AttrFlags, Aux, AuxFlags, Auxtrace, BuildId, BuildIdEntry, Comm, EventDesc, Feature,
    IntelPtInfo, IntelPtMtc, ItraceStart, Mmap2, Mmap2File, Record, RecordingSetup,
    RecordingWriter, SampleId, Task,
};

use super::error::io_at;
use super::{
    FilterSpec, ProcessMemory, RecordError, RecordSink, RecordSummary, SimRecording, TaskEvent,
};
use super::{ThreadStart, Timed};
use crate::exec::{Mapping, ThreadId};
use crate::pt::SimParams;

/// The CPUID feature of a simulated recording: what the simulated CPU is to
/// perf (family 6 model 126, Ice Lake client; perf applies no erratum to it).
pub const SIM_CPUID: &str = "GenuineIntel,6,126,5";

/// The id of the intel_pt event's records.
const PT_ID: u64 = 1;
/// The id of the tracking (dummy) event's records.
const TRACK_ID: u64 = 2;
/// Pending AUX data of a thread is written out at this size.
const FLUSH_AT: usize = 256 << 10;

/// Snapshot mode (perf's `-S`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotOptions {
    /// Bytes of each AUX area (a power of two of pages).
    pub aux_size: u64,
    /// Most bytes a snapshot copies of one area (≤ `aux_size`).
    pub size: u64,
    /// Take a snapshot at the end too (perf's `-Se`).
    pub on_exit: bool,
}

impl SnapshotOptions {
    /// perf's sizes for `-S[SIZE]`: the AUX area is SIZE rounded up to a
    /// power of two of pages (4 MiB when SIZE is 0: perf's default for a
    /// privileged user); a snapshot copies SIZE bytes (the whole area for 0).
    pub fn perf(size: u64, on_exit: bool) -> Self {
        const PAGE: u64 = 4096;
        let (aux, size) = if size == 0 {
            (4 << 20, 4 << 20)
        } else {
            (size.div_ceil(PAGE).next_power_of_two() * PAGE, size)
        };
        SnapshotOptions {
            aux_size: aux,
            size,
            on_exit,
        }
    }
}

/// How a simulated recording is written (see the module docs).
#[derive(Clone, Debug)]
pub struct PerfDataOptions {
    /// The perf.data file.
    pub path: PathBuf,
    /// The intel_pt event's config (perf's format bits, which mirror
    /// IA32_RTIT_CTL); `None`: the recording's configuration's
    /// ([`pt_hal::perf::attr::standard_config`]).
    pub config: Option<u64>,
    /// The event's name in EVENT_DESC; `None`: `intel_pt//u`, `intel_pt//k`
    /// or `intel_pt//` after the configuration's privilege levels.
    pub event_name: Option<String>,
    /// Snapshot mode.
    pub snapshot: Option<SnapshotOptions>,
    /// The recorder's command line (HEADER_CMDLINE).
    pub cmdline: Vec<String>,
    /// The CPU the program ran on when it is not the simulated one's
    /// ([`SIM_CPUID`]): perf's CPUID string and the CPU's description
    /// (the qemu source: the CPU QEMU emulates).
    pub cpu: Option<(String, String)>,
}

impl PerfDataOptions {
    /// A full-trace recording into `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        PerfDataOptions {
            path: path.into(),
            config: None,
            event_name: None,
            snapshot: None,
            cmdline: Vec::new(),
            cpu: None,
        }
    }

    /// The build-id cache and code dumps beside the file: `OUT.debug`.
    pub fn debug_dir(&self) -> PathBuf {
        debug_dir(&self.path)
    }
}

/// `OUT.debug`: the directory beside a perf.data that holds code in no file.
pub fn debug_dir(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".debug");
    PathBuf::from(s)
}

/// The PMU type a simulated recording gives intel_pt: this machine's, if it
/// has one (perf's lookups then agree), else one no PMU of it uses.
pub fn sim_pmu_type() -> u32 {
    let mut used = Vec::new();
    for d in std::fs::read_dir("/sys/bus/event_source/devices")
        .into_iter()
        .flatten()
        .flatten()
    {
        let Some(ty) = std::fs::read_to_string(d.path().join("type"))
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
        else {
            continue;
        };
        if d.file_name() == "intel_pt" {
            return ty;
        }
        used.push(ty);
    }
    (8..).find(|t| !used.contains(t)).unwrap_or(8)
}

/// One thread's AUX area in snapshot mode: a ring the trace overwrites, and
/// where the last snapshot ended.
struct Ring {
    buf: Vec<u8>,
    /// Bytes written ever.
    written: u64,
    /// `written` at the last snapshot.
    prev: u64,
}

impl Ring {
    fn new(size: u64) -> Self {
        Ring {
            buf: vec![0; size as usize],
            written: 0,
            prev: 0,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        let len = self.buf.len();
        if bytes.len() > len {
            self.written += (bytes.len() - len) as u64;
            bytes = &bytes[bytes.len() - len..];
        }
        let at = (self.written % len as u64) as usize;
        let first = bytes.len().min(len - at);
        self.buf[at..at + first].copy_from_slice(&bytes[..first]);
        self.buf[..bytes.len() - first].copy_from_slice(&bytes[first..]);
        self.written += bytes.len() as u64;
    }

    /// A snapshot: the trace written since the last one that the ring still
    /// holds, at most `max` bytes, the newest; (its stream offset, bytes), or
    /// None when nothing is new.
    ///
    /// An AUXTRACE record's size is a multiple of 8 (perf pads the data with
    /// zeros): the stream is padded with PAD packets (zeros) to a multiple of
    /// 8 here, so that the padding is trace and the next snapshot starts
    /// after it.
    ///
    /// perf copies the whole ring once it has wrapped (the kernel does not
    /// say how much is new) and numbers it from the adjusted head, so that
    /// snapshots taken close together overlap and the reader has to find
    /// and cut the overlap. The simulator knows what is new: its snapshots
    /// are consecutive pieces of one stream whose offsets never overlap.
    fn snapshot(&mut self, max: u64) -> Option<(u64, Vec<u8>)> {
        let len = self.buf.len() as u64;
        let pad = (self.written.wrapping_neg() % 8) as usize;
        if pad != 0 && self.written != self.prev {
            self.push(&[0; 8][..pad]);
        }
        let size = (self.written - self.prev).min(len).min(max) & !7;
        self.prev = self.written;
        if size == 0 {
            return None;
        }
        let offset = self.written - size;
        let head = (self.written % len) as usize;
        let size = size as usize;
        let mut data = Vec::with_capacity(size);
        if size > head {
            data.extend_from_slice(&self.buf[self.buf.len() - (size - head)..]);
            data.extend_from_slice(&self.buf[..head]);
        } else {
            data.extend_from_slice(&self.buf[head - size..head]);
        }
        Some((offset, data))
    }
}

/// One thread's AUX area.
struct Area {
    idx: u32,
    /// Stream position of the next byte (full-trace mode).
    pos: u64,
    /// Bytes not written yet (full-trace mode).
    pending: Vec<u8>,
    /// The TSC when the last pending bytes came.
    last_tsc: u64,
    ring: Option<Ring>,
}

/// Code in no file that is dumped beside the perf.data.
struct Dump {
    pid: u32,
    start: u64,
    end: u64,
    path: PathBuf,
}

/// Writes a simulated recording as perf.data (see the module docs).
pub struct PerfDataSink {
    w: Option<RecordingWriter>,
    path: PathBuf,
    debug: PathBuf,
    info: IntelPtInfo,
    /// Records sample TIME.
    time: bool,
    snapshot: Option<SnapshotOptions>,
    areas: HashMap<ThreadId, Area>,
    order: Vec<ThreadId>,
    parent: HashMap<ThreadId, ThreadId>,
    dumps: Vec<Dump>,
    /// The vDSO mappings seen: (pid, start, end).
    vdsos: Vec<(u32, u64, u64)>,
    /// BUILD_ID entries by file name.
    build_ids: BTreeMap<String, BuildId>,
    /// Files whose build id was looked up.
    looked_up: HashSet<String>,
}

impl PerfDataSink {
    /// Starts the file for `rec` (its directory is created, as `perf record
    /// -o` does; an existing file is replaced).
    pub fn create(rec: &SimRecording, opts: &PerfDataOptions) -> Result<Self, RecordError> {
        let path = opts.path.clone();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io_at(dir))?;
        }
        // Absolute: MMAP2 records name the dumps in it, as the kernel names files.
        let debug = std::path::absolute(opts.debug_dir()).map_err(io_at(&path))?;
        if debug.exists() {
            std::fs::remove_dir_all(&debug).map_err(io_at(&debug))?;
        }
        let cfg = &rec.config;
        let config = opts
            .config
            .unwrap_or_else(|| pt_hal::perf::attr::standard_config(cfg));
        let pmu = sim_pmu_type();
        let time = config & pt_config::TSC != 0;
        let mut pt = intel_pt_attr(pmu, config, !cfg.os, false);
        if !cfg.user {
            pt.flags = AttrFlags(pt.flags.0 | AttrFlags::EXCLUDE_USER);
        }
        let track = tracking_attr(true, false, false, time);
        let name = opts.event_name.clone().unwrap_or_else(|| {
            match (cfg.user, cfg.os) {
                (true, false) => "intel_pt//u",
                (false, true) => "intel_pt//k",
                _ => "intel_pt//",
            }
            .to_string()
        });
        let trace = EventDesc {
            attr: pt,
            ids: vec![PT_ID],
            name: Some(name),
        };
        let info = intel_pt_info(pmu, &rec.params, opts.snapshot.is_some(), &rec.filters);
        let mut setup = RecordingSetup::new(trace, info.clone());
        setup.tracking = Some(EventDesc {
            attr: track,
            ids: vec![TRACK_ID],
            name: Some("dummy:u".into()),
        });
        setup.time_conv = true;
        setup.perf_version = format!("6.1 (ptperf {})", env!("CARGO_PKG_VERSION"));
        setup.cmdline = opts.cmdline.clone();
        let mut w = RecordingWriter::create(&path, setup)?;
        // The simulated CPU, not the host's.
        match &opts.cpu {
            Some((cpuid, desc)) => {
                w.set_feature(Feature::CpuId(cpuid.clone()));
                w.set_feature(Feature::CpuDesc(desc.clone()));
            }
            None => {
                w.set_feature(Feature::CpuId(SIM_CPUID.into()));
                w.set_feature(Feature::CpuDesc("Simulated Intel PT CPU (pt-sim)".into()));
            }
        }
        w.set_feature(Feature::NrCpus {
            available: 1,
            online: 1,
        });
        let mut sink = PerfDataSink {
            w: Some(w),
            path,
            debug,
            info,
            time,
            snapshot: opts.snapshot,
            areas: HashMap::new(),
            order: Vec::new(),
            parent: HashMap::new(),
            dumps: Vec::new(),
            vdsos: Vec::new(),
            build_ids: BTreeMap::new(),
            looked_up: HashSet::new(),
        };
        sink.writer()?.finish_init()?;
        Ok(sink)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The AUXTRACE_INFO written.
    pub fn info(&self) -> &IntelPtInfo {
        &self.info
    }

    fn writer(&mut self) -> Result<&mut RecordingWriter, RecordError> {
        self.w.as_mut().ok_or_else(|| RecordError::Finished {
            path: self.path.clone(),
        })
    }

    fn write(&mut self, r: &Record<'_>) -> Result<(), RecordError> {
        // The writer's errors name the file.
        self.writer()?.write(r)?;
        Ok(())
    }

    fn perf_time(&self, tsc: u64) -> Option<u64> {
        self.time.then(|| self.info.tsc_to_perf_time(tsc))
    }

    fn sid(&self, t: ThreadId, id: u64, tsc: u64) -> SampleId {
        SampleId {
            pid: Some(t.pid),
            tid: Some(t.tid),
            time: self.perf_time(tsc),
            id: Some(id),
            ..Default::default()
        }
    }

    /// Writes a thread's pending AUX data: the kernel's AUX record, then
    /// perf's AUXTRACE copy of the data.
    fn flush(&mut self, t: ThreadId) -> Result<(), RecordError> {
        let Some(a) = self.areas.get_mut(&t) else {
            return Ok(());
        };
        if a.pending.is_empty() {
            return Ok(());
        }
        let data = std::mem::take(&mut a.pending);
        let (idx, pos, tsc) = (a.idx, a.pos, a.last_tsc);
        a.pos += data.len() as u64;
        let sample_id = self.sid(t, PT_ID, tsc);
        self.write(&Record::Aux(Aux {
            misc: 0,
            aux_offset: pos,
            aux_size: data.len() as u64,
            flags: AuxFlags(0),
            sample_id,
        }))?;
        self.write(&Record::Auxtrace(Auxtrace {
            offset: pos,
            reference: tsc,
            idx,
            tid: t.tid,
            cpu: u32::MAX,
            data: &data,
        }))?;
        if let Some(a) = self.areas.get_mut(&t) {
            // Keep the allocation for the next data.
            a.pending = data;
            a.pending.clear();
        }
        Ok(())
    }

    fn flush_all(&mut self) -> Result<(), RecordError> {
        for t in self.order.clone() {
            self.flush(t)?;
        }
        Ok(())
    }

    /// The file an executable mapping is read from in perf: its own path,
    /// `[vdso]`, or a dump beside the perf.data for code in no file.
    fn map_file(&mut self, pid: u32, m: &Mapping) -> Option<(String, u64)> {
        // Not a mapping of the process (the kernel's emulated page): the
        // kernel has no MMAP2 for it.
        if m.path == "[vsyscall]" {
            return None;
        }
        if m.path == "[vdso]" {
            if !self.vdsos.contains(&(pid, m.start, m.end)) {
                self.vdsos.push((pid, m.start, m.end));
            }
            return Some((m.path.clone(), 0));
        }
        if m.path.starts_with('/') && Path::new(&m.path).is_file() {
            if !self.looked_up.contains(&m.path) {
                self.looked_up.insert(m.path.clone());
                let data = std::fs::read(&m.path).ok();
                if let Some(b) = data.as_deref().and_then(pt_elf::build_id::build_id) {
                    self.build_ids.insert(m.path.clone(), BuildId::new(b));
                }
            }
            return Some((m.path.clone(), m.offset));
        }
        let path = self.debug.join("anon").join(format!("{pid}-{:x}", m.start));
        if !self.dumps.iter().any(|d| d.path == path) {
            self.dumps.push(Dump {
                pid,
                start: m.start,
                end: m.end,
                path: path.clone(),
            });
        }
        Some((path.display().to_string(), 0))
    }

    /// Writes the code in no file that the memory holds now: dumps and the
    /// vDSO's build-id cache entry.
    fn write_code(&mut self, memory: ProcessMemory<'_>) -> Result<(), RecordError> {
        for d in &self.dumps {
            let Some(mem) = memory(d.pid) else { continue };
            let Some(bytes) = read_range(mem, d.start, d.end) else {
                continue;
            };
            if let Some(dir) = d.path.parent() {
                std::fs::create_dir_all(dir).map_err(io_at(dir))?;
            }
            std::fs::write(&d.path, &bytes).map_err(io_at(&d.path))?;
        }
        if self.vdsos.is_empty() {
            return Ok(());
        }
        // Every process maps the same vDSO: merge the pages each one ran.
        let size = self
            .vdsos
            .iter()
            .map(|v| v.2 - v.1)
            .max()
            .unwrap_or(0)
            .min(1 << 20);
        let mut merged = vec![0u8; size as usize];
        let mut read = vec![false; size.div_ceil(4096) as usize];
        for &(pid, start, end) in &self.vdsos {
            let Some(mem) = memory(pid) else { continue };
            let mut page = [0u8; 4096];
            let mut off = 0;
            while off < (end - start).min(size) {
                if mem.read(start + off, &mut page) == page.len() {
                    merged[off as usize..off as usize + 4096].copy_from_slice(&page);
                    read[(off / 4096) as usize] = true;
                }
                off += 4096;
            }
        }
        if !read.contains(&true) {
            return Ok(());
        }
        complete_vdso(&mut merged, &read, pt_elf::vdso::own_vdso());
        // Its own build id, else a stand-in hashed from the code.
        let bid = match pt_elf::build_id::build_id(&merged) {
            Some(b) => BuildId::new(b),
            None => BuildId::new(&pt_elf::build_id::stand_in(&merged)),
        };
        let cache = pt_elf::BuildIdCache::new(&self.debug);
        let vdso = pt_elf::EntryKind::Vdso;
        if self.build_ids.get("[vdso]") != Some(&bid) {
            if let Some(old) = self.build_ids.insert("[vdso]".into(), bid) {
                // A fuller merge replaces the entry of an earlier checkpoint.
                cache.remove("[vdso]", old.as_bytes(), vdso);
            }
        }
        cache.add("[vdso]", bid.as_bytes(), vdso, &merged)?;
        Ok(())
    }

    fn set_build_ids(&mut self) -> Result<(), RecordError> {
        let entries = self
            .build_ids
            .iter()
            .map(|(name, id)| BuildIdEntry {
                misc: misc::USER | misc::BUILD_ID_SIZE,
                pid: -1,
                build_id: *id,
                filename: name.as_bytes().to_vec(),
            })
            .collect();
        self.writer()?.set_feature(Feature::BuildId(entries));
        Ok(())
    }

    fn take_snapshot(&mut self, tsc: u64) -> Result<(), RecordError> {
        let Some(opts) = self.snapshot else {
            return Ok(());
        };
        for t in self.order.clone() {
            let Some(a) = self.areas.get_mut(&t) else {
                continue;
            };
            let idx = a.idx;
            let Some((offset, data)) = a.ring.as_mut().and_then(|r| r.snapshot(opts.size)) else {
                continue;
            };
            let sample_id = self.sid(t, PT_ID, tsc);
            self.write(&Record::Aux(Aux {
                misc: 0,
                aux_offset: offset,
                aux_size: data.len() as u64,
                flags: AuxFlags(AuxFlags::OVERWRITE),
                sample_id,
            }))?;
            self.write(&Record::Auxtrace(Auxtrace {
                offset,
                reference: tsc,
                idx,
                tid: t.tid,
                cpu: u32::MAX,
                data: &data,
            }))?;
        }
        self.write(&Record::FinishedRound)
    }
}

/// The bytes of `[start, end)` (at most 16 MiB) the memory holds; None if
/// it holds none of them.
fn read_range(mem: &crate::exec::CodeMemory, start: u64, end: u64) -> Option<Vec<u8>> {
    let len = usize::try_from(end.wrapping_sub(start)).ok()?.min(1 << 24);
    let mut bytes = vec![0u8; len];
    let mut any = false;
    let mut a = 0;
    while a < len {
        let n = (len - a).min(4096);
        any |= mem.read(start + a as u64, &mut bytes[a..a + n]) > 0;
        a += n;
    }
    any.then_some(bytes)
}

/// AUXTRACE_INFO for a simulated recording (see the module docs).
fn intel_pt_info(
    pmu: u32,
    params: &SimParams,
    snapshot: bool,
    filters: &[FilterSpec],
) -> IntelPtInfo {
    let c = &params.clock;
    let tsc_hz = u64::from(c.nom_freq) * 100_000_000;
    let shift = 31;
    let mut info = IntelPtInfo::new(pmu);
    info.time_shift = shift;
    info.time_mult = ((1_000_000_000u128 << shift) / u128::from(tsc_hz.max(1))) as u64;
    info.time_zero = 0;
    info.cap_user_time_zero = 1;
    info.snapshot_mode = u64::from(snapshot);
    info.per_cpu_mmaps = 0;
    info.mtc = Some(IntelPtMtc {
        mtc_bit: pt_config::MTC,
        mtc_freq_bits: pt_config::MTC_PERIOD_MASK,
        tsc_ctc_ratio_n: u64::from(c.cpuid_15_ebx),
        tsc_ctc_ratio_d: u64::from(c.cpuid_15_eax),
        cyc_bit: pt_config::CYC,
    });
    info.max_non_turbo_ratio = Some(u64::from(c.nom_freq));
    info.filter = Some(FilterSpec::list_to_perf(filters).into_bytes());
    info
}

fn prot_flags(m: &Mapping) -> (u32, u32) {
    let p = m.perms;
    let prot = u32::from(p.read) | u32::from(p.write) << 1 | u32::from(p.exec) << 2;
    let flags = if p.shared { 1 } else { 2 };
    (prot, flags)
}

impl RecordSink for PerfDataSink {
    fn open_thread(&mut self, start: &ThreadStart<'_>) -> Result<(), RecordError> {
        let idx = self.order.len() as u32;
        self.order.push(start.id);
        self.areas.insert(
            start.id,
            Area {
                idx,
                pos: 0,
                pending: Vec::new(),
                last_tsc: start.tsc,
                ring: self.snapshot.map(|s| Ring::new(s.aux_size)),
            },
        );
        let sample_id = self.sid(start.id, PT_ID, start.tsc);
        self.write(&Record::ItraceStart(ItraceStart {
            misc: 0,
            pid: start.id.pid,
            tid: start.id.tid,
            sample_id,
        }))
    }

    fn trace(&mut self, thread: ThreadId, bytes: &[u8], tsc: u64) -> Result<(), RecordError> {
        let Some(a) = self.areas.get_mut(&thread) else {
            return Err(RecordError::NoTrace { thread });
        };
        a.last_tsc = tsc;
        if let Some(r) = &mut a.ring {
            r.push(bytes);
            return Ok(());
        }
        a.pending.extend_from_slice(bytes);
        if a.pending.len() >= FLUSH_AT {
            self.flush(thread)?;
        }
        Ok(())
    }

    fn lost(&mut self, thread: ThreadId, _size: u64, tsc: u64) -> Result<(), RecordError> {
        self.flush(thread)?;
        let Some(a) = self.areas.get(&thread) else {
            return Ok(());
        };
        let pos = a.pos;
        let sample_id = self.sid(thread, PT_ID, tsc);
        self.write(&Record::Aux(Aux {
            misc: 0,
            aux_offset: pos,
            aux_size: 0,
            flags: AuxFlags(AuxFlags::TRUNCATED),
            sample_id,
        }))
    }

    fn task_event(&mut self, event: &Timed) -> Result<(), RecordError> {
        // The trace before the event goes first (see the module docs).
        self.flush_all()?;
        let tsc = event.tsc;
        match &event.event {
            TaskEvent::Comm { thread, comm, .. } => {
                let sample_id = self.sid(*thread, TRACK_ID, tsc);
                self.write(&Record::Comm(Comm {
                    misc: misc::COMM_EXEC,
                    pid: thread.pid,
                    tid: thread.tid,
                    comm: comm.as_str().into(),
                    sample_id,
                }))?;
            }
            TaskEvent::Mmap { thread, mapping: m } => {
                let Some((name, pgoff)) = self.map_file(thread.pid, m) else {
                    return Ok(());
                };
                let file = std::fs::metadata(&name)
                    .ok()
                    .filter(|_| name.starts_with('/'))
                    .map(|md| Mmap2File::Inode {
                        maj: libc::major(md.dev()),
                        min: libc::minor(md.dev()),
                        ino: md.ino(),
                        ino_generation: 0,
                    })
                    .unwrap_or(Mmap2File::Inode {
                        maj: 0,
                        min: 0,
                        ino: 0,
                        ino_generation: 0,
                    });
                let (prot, flags) = prot_flags(m);
                let sample_id = self.sid(*thread, TRACK_ID, tsc);
                self.write(&Record::Mmap2(Mmap2 {
                    misc: misc::USER,
                    pid: thread.pid,
                    tid: thread.tid,
                    start: m.start,
                    len: m.end - m.start,
                    pgoff,
                    file,
                    prot,
                    flags,
                    filename: name.as_str().into(),
                    sample_id,
                }))?;
            }
            TaskEvent::Image { .. } => {}
            TaskEvent::Fork { parent, child, .. } => {
                self.parent.insert(*child, *parent);
                let sample_id = self.sid(*parent, TRACK_ID, tsc);
                let time = self.info.tsc_to_perf_time(tsc);
                self.write(&Record::Fork(Task {
                    misc: 0,
                    pid: child.pid,
                    ppid: parent.pid,
                    tid: child.tid,
                    ptid: parent.tid,
                    time: if self.time { time } else { 0 },
                    sample_id,
                }))?;
            }
            TaskEvent::Exit { thread, how } => {
                // A thread the recording stopped is alive: perf has no EXIT for it.
                if how.is_none() {
                    return Ok(());
                }
                let parent = self.parent.get(thread).copied().unwrap_or(*thread);
                let sample_id = self.sid(*thread, TRACK_ID, tsc);
                let time = self.info.tsc_to_perf_time(tsc);
                self.write(&Record::Exit(Task {
                    misc: 0,
                    pid: thread.pid,
                    ppid: parent.pid,
                    tid: thread.tid,
                    ptid: parent.tid,
                    time: if self.time { time } else { 0 },
                    sample_id,
                }))?;
            }
        }
        Ok(())
    }

    fn snapshot(&mut self, tsc: u64) -> Result<(), RecordError> {
        self.take_snapshot(tsc)?;
        // On disk at once, as perf record writes a snapshot when it is
        // taken: a recording killed later keeps it.
        Ok(self.writer()?.checkpoint()?)
    }

    fn checkpoint(&mut self, memory: ProcessMemory<'_>, _tsc: u64) -> Result<(), RecordError> {
        self.flush_all()?;
        self.write_code(memory)?;
        self.set_build_ids()?;
        // A round: the file on disk is complete up to here (perf reads a
        // recording killed later up to this point).
        Ok(self.writer()?.finish_round()?)
    }

    fn finish(
        &mut self,
        _summary: &RecordSummary,
        memory: ProcessMemory<'_>,
        tsc: u64,
    ) -> Result<(), RecordError> {
        self.flush_all()?;
        if self.snapshot.is_some_and(|s| s.on_exit) {
            self.take_snapshot(tsc)?;
        } else {
            self.write(&Record::FinishedRound)?;
        }
        self.write_code(memory)?;
        self.set_build_ids()?;
        let w = self.w.take().ok_or_else(|| RecordError::Finished {
            path: self.path.clone(),
        })?;
        w.finish()?;
        Ok(())
    }
}

/// Fills the pages of a recorded vDSO image that the program never ran (its
/// section headers and symbol table lie after the code, in pages no instruction
/// reads) from `own`, this process's vDSO, when it is the same image: as large,
/// and equal in every page that was read. The kernel maps one vDSO into every
/// process, so a recording made on this machine gets it whole, and perf and our
/// loaders can name its functions (`__vdso_clock_gettime`). An image from
/// elsewhere (a replayed log) keeps its unread pages zeroed.
fn complete_vdso(merged: &mut [u8], read: &[bool], own: Option<&[u8]>) {
    let Some(own) = own.filter(|o| o.len() == merged.len()) else {
        return;
    };
    let same = merged
        .chunks(4096)
        .zip(own.chunks(4096))
        .zip(read)
        .all(|((m, o), &r)| !r || m == o);
    if same {
        merged.copy_from_slice(own);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Snapshots are the stream's consecutive pieces: what is new since the
    /// last one, the newest `max` bytes of it the ring still holds, at their
    /// stream offsets; never overlapping, none when nothing is new.
    #[test]
    fn ring_snapshots_never_overlap() {
        let stream: Vec<u8> = (0..10_000u32).map(|i| (i % 253) as u8).collect();
        let mut r = Ring::new(4096);
        assert_eq!(r.snapshot(4096), None);
        r.push(&stream[..100]);
        // Padded with PAD packets to a multiple of 8.
        let padded = |b: &[u8]| [b, &[0; 8][..b.len().wrapping_neg() % 8]].concat();
        assert_eq!(r.snapshot(4096), Some((0, padded(&stream[..100]))));
        assert_eq!(r.snapshot(4096), None);
        r.push(&stream[104..3000]);
        r.push(&stream[3000..5000]);
        // The ring wrapped: the last 4096 bytes, from offset 904.
        assert_eq!(r.snapshot(8192), Some((904, stream[904..5000].to_vec())));
        r.push(&stream[5000..5010]);
        assert_eq!(r.snapshot(4096), Some((5000, padded(&stream[5000..5010]))));
        // At most `max` bytes (a multiple of 8), the newest.
        r.push(&stream[5016..9000]);
        assert_eq!(r.snapshot(1003), Some((8000, stream[8000..9000].to_vec())));
        // One push larger than the ring.
        r.push(&stream[..]);
        let (off, data) = r.snapshot(4096).unwrap();
        assert_eq!(off, 9000 + 10_000 - 4096);
        assert_eq!(data, stream[10_000 - 4096..]);
    }

    /// A recorded vDSO gets this process's pages where it matches them, and
    /// only then.
    #[test]
    fn vdso_completed_from_the_same_image() {
        let own: Vec<u8> = (0..3 * 4096).map(|i| (i % 251) as u8).collect();
        let mut rec = vec![0u8; own.len()];
        rec[..4096].copy_from_slice(&own[..4096]);
        let read = [true, false, false];
        complete_vdso(&mut rec, &read, Some(&own));
        assert_eq!(rec, own);
        // A page that differs: another kernel's image stays as recorded.
        let mut rec = vec![0u8; own.len()];
        rec[..4096].copy_from_slice(&own[..4096]);
        rec[7] ^= 1;
        let before = rec.clone();
        complete_vdso(&mut rec, &read, Some(&own));
        assert_eq!(rec, before);
        // Another size, or no vDSO here: unchanged.
        let mut short = own[..4096].to_vec();
        complete_vdso(&mut short, &[true], Some(&own));
        assert_eq!(short, own[..4096]);
        complete_vdso(&mut rec, &read, None);
        assert_eq!(rec, before);
    }

    #[test]
    fn perfs_snapshot_sizes() {
        assert_eq!(SnapshotOptions::perf(0, false).aux_size, 4 << 20);
        let s = SnapshotOptions::perf(10000, true);
        assert_eq!((s.aux_size, s.size, s.on_exit), (16384, 10000, true));
    }
}
