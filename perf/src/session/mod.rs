//! Decoding `perf record -e intel_pt//` recordings: from a perf.data to the AUX
//! queues, the threads that ran, the code they ran and a [`Decoder`] per queue, the
//! way perf's intel-pt.c does it.
//!
//! ```no_run
//! use pt_perf::session::{PerfItem, Session, SessionOptions};
//! use pt_decoder::{Granularity, Item};
//! use pt_perf_data::MappedFile;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let file = MappedFile::open("perf.data")?;
//! let perf = file.parse()?;
//! let session = Session::new(&perf, SessionOptions::for_file("perf.data"))?;
//! for w in session.warnings() {
//!     eprintln!("warning: {w}");
//! }
//! for (q, queue) in session.queues().iter().enumerate() {
//!     println!("queue {} cpu {:?} tid {:?}", queue.idx, queue.cpu, queue.tid);
//!     let mut dec = session.decoder(q).configure(|b| b.granularity(Granularity::Instructions));
//!     while let Some(item) = dec.next() {
//!         match item {
//!             PerfItem::Context(c) => println!("  now pid {:?} tid {:?}", c.pid, c.tid),
//!             PerfItem::Decoded(Item::Insn(i)) => println!("  {:x}", i.insn.ip),
//!             PerfItem::Decoded(Item::Error(e)) => {
//!                 let at = dec.file_offset(e.offset.unwrap_or(0));
//!                 eprintln!("  error at file offset {at:#x?}: {e}");
//!             }
//!             PerfItem::NoCode(n) => eprintln!("  {n}"),
//!             PerfItem::Lost(l) => eprintln!("  lost: {l}"),
//!             _ => {}
//!         }
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # What a session knows
//!
//! * The **queues** ([`Queue`]): one per AUX area (perf's mmap index), per CPU or per
//!   thread, with its AUXTRACE pieces and the segments they join into (snapshot
//!   overlaps removed, gaps and lost data marked: [`queues`]).
//! * The **threads** ([`Thread`]) and what runs on each CPU, from COMM, FORK, EXIT,
//!   ITRACE_START, SWITCH and SWITCH_CPU_WIDE: [`Session::running`],
//!   [`Session::thread`], [`Session::comm`].
//! * The **code**: every process's mappings over time from MMAP/MMAP2 (inherited at
//!   fork, dropped at exec), found on disk, under a sysroot or in the build-id cache
//!   (perf's layout), as [`Image`]s: [`Session::image`], [`Session::mapping`],
//!   [`Session::code_file`]; code in no file is reported, never decoded from thin air
//!   ([`MissingCode`]).
//! * The **decoder's configuration** from AUXTRACE_INFO and the CPUID feature (errata,
//!   MTC period, TSC/CTC ratio, maximum non-turbo ratio) and perf's TSC ↔ perf time
//!   conversion.
//!
//! # Decoding
//!
//! [`Session::decoder`] decodes one queue ([`QueueDecoder`]): its segments one after
//! the other, each with a [`Decoder`] over the segment's bytes (borrowed from the
//! file, or joined once when the segment spans several pieces). In a timed recording
//! the process (and so the image) changes where the trace's time passes a context
//! switch, an exec or a remapping, as in perf's timed decoding; in an untimed one a
//! queue is decoded with what its thread ever mapped, as perf's timeless decoding.
//! [`Session::timed_decoder`] interleaves several queues in time order, as perf does
//! before it synthesizes samples.
//!
//! Bad input never panics: what cannot be read is a [`Warning`] naming its file
//! offset, and decoding goes on with what can be. [`Session::skipped`] counts what
//! the damage took away ([`Skipped`]: records, bytes after a broken record, AUX
//! bytes per queue): the one tally every tool sums up at its end.

use pt_decoder::config::{Config, Cpu, Errata};
use pt_decoder::image::Image;
use pt_decoder::Decoder;
use pt_perf_data::{
    feature_id, AuxFlags, ErrorKind, Feature, IntelPtInfo, PerfFile, Record, SampleType,
};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

mod libipt;
pub mod maps;
pub mod overlap;
pub mod queues;
mod skipped;
pub mod tasks;

pub use libipt::{NoCode, PerfItem, QueueDecoder, TimedDecoder};
pub use maps::{short_name, CodeFile, Mapping, MappingKind, MissingCode};
pub use overlap::{find_overlap, Overlap};
pub use queues::{AuxPiece, Lost, LostKind, Part, Queue, Segment};
pub use skipped::Skipped;
pub use tasks::{CommChange, Context, Thread};

/// How to open a session.
#[derive(Clone, Debug, Default)]
pub struct SessionOptions {
    /// Look for the recorded files under this directory (perf's `--symfs`).
    pub sysroot: Option<PathBuf>,
    /// Build-id caches to search, in order (perf's `~/.debug` layout:
    /// `.build-id/xx/yyyy…/elf`).
    pub buildid_dirs: Vec<PathBuf>,
    /// Copies of the vdso to use when the build-id cache has none: (the name its
    /// MMAP records use, `[vdso]`, `[vdso32]` or `[vdsox32]`; the file).
    pub vdso: Vec<(String, PathBuf)>,
    /// Decode without timestamps even if the recording has them (perf's timeless
    /// decoding).
    pub timeless: bool,
    /// Only the AUX data of these CPUs (perf's `--cpu`); `None`: all.
    pub cpus: Option<Vec<u32>>,
}

impl SessionOptions {
    /// The options for the recording at `path`: the build-id caches beside it
    /// (`<path>.debug`, `<dir>/.debug`) and the user's (`$PERF_BUILDID_DIR`, else
    /// `~/.debug`).
    pub fn for_file(path: impl AsRef<Path>) -> Self {
        let path = path.as_ref();
        let mut dirs = Vec::new();
        let mut beside = path.as_os_str().to_owned();
        beside.push(".debug");
        dirs.push(PathBuf::from(beside));
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        dirs.push(dir.unwrap_or(Path::new(".")).join(".debug"));
        dirs.extend(default_buildid_dir());
        SessionOptions {
            buildid_dirs: dirs,
            ..Default::default()
        }
    }
}

/// perf's build-id cache: `$PERF_BUILDID_DIR`, else `~/.debug`.
pub fn default_buildid_dir() -> Option<PathBuf> {
    pt_elf::BuildIdCache::user().map(|c| c.dir().to_path_buf())
}

/// Why a perf.data cannot be decoded at all.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The file has no intel_pt AUXTRACE_INFO: it was not recorded with `intel_pt//`.
    #[error("no intel_pt AUXTRACE_INFO record: not an Intel PT recording")]
    NotIntelPt,
    /// The header's data size is 0 (perf record was killed before it finished the
    /// file) and the records there hold no intel_pt AUXTRACE_INFO.
    #[error("unfinished recording: the header's data size is 0 (was perf record properly terminated?) and no intel_pt AUXTRACE_INFO was found")]
    Unfinished,
    /// Reading the records stopped at a broken one (perf's "failed to process type")
    /// before any intel_pt AUXTRACE_INFO.
    #[error("no intel_pt AUXTRACE_INFO record before a broken record where reading stops: {0}")]
    Broken(pt_perf_data::Error),
    /// The AUXTRACE_INFO record cannot be read.
    #[error("{0}")]
    BadInfo(pt_perf_data::Error),
}

/// Something wrong in the recording that did not stop the session.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Warning {
    /// A record could not be read: it is skipped, or (a broken record frame) reading
    /// stops there.
    Record(pt_perf_data::Error),
    /// The file's header is unusual (see [`pt_perf_data::Warning`]).
    File(pt_perf_data::Warning),
    /// An AUXTRACE record of a queue names another CPU or thread than the queue's
    /// first (perf keeps the first).
    QueueMismatch {
        /// The record's file offset.
        offset: u64,
        /// The queue.
        idx: u32,
        /// The queue's (cpu, tid).
        queue: (Option<u32>, Option<u32>),
        /// The record's (cpu, tid).
        record: (Option<u32>, Option<u32>),
    },
    /// The file ends inside an AUXTRACE record's data: the part there is decoded.
    CutOff {
        /// The record's file offset.
        offset: u64,
        /// Bytes it claims.
        size: u64,
        /// Bytes the file holds.
        have: u64,
    },
    /// No event of the recording is of the intel_pt PMU's type.
    NoTraceEvent {
        /// The PMU type AUXTRACE_INFO names.
        pmu_type: u64,
    },
    /// The CPUID feature names a CPU without errata in the table, or cannot be read.
    Cpuid(String),
    /// perf's AUXTRACE_ERROR record (an error perf met while recording).
    AuxtraceError {
        /// The record's file offset.
        offset: u64,
        /// perf's message.
        message: String,
    },
    /// Records that arrived later than their time allows (perf's "out of order
    /// events").
    OutOfOrder(u64),
    /// Samples with AUX data (sampling mode) are not decoded.
    AuxSamples,
    /// Trace bytes of a queue in which no PSB was found: nothing of them decodes.
    NoPsb {
        /// The queue.
        idx: u32,
        /// Its trace bytes without a PSB.
        bytes: u64,
    },
    /// The kernel lost samples (LOST_SAMPLES).
    LostSamples {
        /// The record's file offset.
        offset: u64,
        /// How many.
        count: u64,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::Record(e) => write!(f, "{e}"),
            Warning::File(w) => write!(f, "{w}"),
            Warning::QueueMismatch {
                offset,
                idx,
                queue,
                record,
            } => write!(
                f,
                "file offset {offset:#x}: AUXTRACE of queue {idx} names cpu {} tid {}, the queue's is cpu {} tid {}",
                show(record.0),
                show(record.1),
                show(queue.0),
                show(queue.1)
            ),
            Warning::CutOff { offset, size, have } => write!(
                f,
                "file offset {offset:#x}: AUXTRACE claims {size:#x} bytes of data but the file ends after {have:#x}; decoding those"
            ),
            Warning::NoTraceEvent { pmu_type } => {
                write!(f, "no event has the intel_pt PMU type {pmu_type} that AUXTRACE_INFO names")
            }
            Warning::Cpuid(s) => write!(f, "CPUID feature: {s}; decoding without errata workarounds"),
            Warning::AuxtraceError { offset, message } => {
                write!(f, "file offset {offset:#x}: perf recorded an error: {message}")
            }
            Warning::OutOfOrder(n) => write!(f, "{n} records out of time order"),
            Warning::AuxSamples => f.write_str("samples with AUX data (sampling mode) are not decoded"),
            Warning::NoPsb { idx, bytes } => write!(
                f,
                "queue {idx}: {bytes:#x} bytes of trace hold no PSB: they cannot be decoded"
            ),
            Warning::LostSamples { offset, count } => {
                write!(f, "file offset {offset:#x}: {count} samples lost")
            }
        }
    }
}

fn show(v: Option<u32>) -> String {
    v.map_or("-1".into(), |v| v.to_string())
}

/// A perf.data recording of Intel PT, ready to decode. See the [module docs](self).
pub struct Session<'a> {
    info: IntelPtInfo,
    pt_config: u64,
    config: Config,
    timed: bool,
    have_tsc: bool,
    queues: Vec<Queue<'a>>,
    tasks: tasks::Tasks,
    maps: maps::Maps,
    warnings: Vec<Warning>,
    skipped: Skipped,
    /// The order perf's timeless decoding takes the queues in.
    timeless_order: Vec<usize>,
    /// The timed records perf's decoder is shown, in its order.
    event_times: Vec<EventTime>,
    /// An Intel PT recording (see [`Session::without_trace`]).
    traced: bool,
}

/// A timed record as perf's Intel PT decoder sees it go by: every record of the
/// ordered stream (side-band and samples, not AUXTRACE and the other user
/// records) whose time is known. perf decodes every queue up to each such time
/// before it handles the record, which decides where a queue stops, and so the
/// order of samples of different threads that share a timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventTime {
    /// perf time of the record.
    pub time: u64,
    /// Its offset in the file.
    pub record_offset: u64,
}

impl fmt::Debug for Session<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("queues", &self.queues.len())
            .field("timed", &self.timed)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The value a mask's bits hold (perf's config field extraction).
fn field(config: u64, mask: u64) -> u64 {
    if mask == 0 {
        0
    } else {
        (config & mask) >> mask.trailing_zeros()
    }
}

/// `GenuineIntel,6,142,10` → family 6, model 142, stepping 10.
fn parse_cpuid(s: &str) -> Option<Cpu> {
    let mut it = s.split(',');
    let vendor = it.next()?;
    if vendor != "GenuineIntel" {
        return None;
    }
    let family: u16 = it.next()?.trim().parse().ok()?;
    let model: u8 = it.next()?.trim().parse().ok()?;
    let stepping: u8 = it.next().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    Some(Cpu {
        family,
        model,
        stepping,
    })
}

fn opt(v: u32) -> Option<u32> {
    (v != u32::MAX).then_some(v)
}

impl<'a> Session<'a> {
    /// Reads the recording: queues, side-band, configuration. Fails only when the
    /// file is not an Intel PT recording; everything else wrong is a [`Warning`].
    pub fn new(perf: &PerfFile<'a>, options: SessionOptions) -> Result<Self, SessionError> {
        let mut info = match perf.intel_pt_info() {
            None if perf
                .warnings()
                .iter()
                .any(|w| matches!(w, pt_perf_data::Warning::DataSizeZero { .. })) =>
            {
                return Err(SessionError::Unfinished)
            }
            None => {
                let mut records = perf.records();
                while let Some(r) = records.next() {
                    if let Err(e) = r {
                        if records.offset() == e.offset {
                            return Err(SessionError::Broken(e));
                        }
                    }
                }
                return Err(SessionError::NotIntelPt);
            }
            Some(Err(e)) => return Err(SessionError::BadInfo(e)),
            Some(Ok(i)) => i,
        };
        let mut warnings: Vec<Warning> =
            perf.warnings().iter().copied().map(Warning::File).collect();
        let mut skipped = Skipped::default();
        for w in perf.warnings() {
            match *w {
                pt_perf_data::Warning::DataSizeZero { .. } => skipped.unfinished = true,
                pt_perf_data::Warning::DataPastEnd {
                    claimed_end,
                    file_size,
                } => {
                    skipped.past_end = match claimed_end {
                        u64::MAX => u64::MAX,
                        end => end.saturating_sub(file_size),
                    }
                }
                pt_perf_data::Warning::BadFeature { .. } => skipped.features += 1,
                _ => {}
            }
        }
        let events = perf.events();
        let pt_events: Vec<_> = events
            .iter()
            .filter(|e| u64::from(e.attr.type_) == info.pmu_type)
            .collect();
        if pt_events.is_empty() {
            warnings.push(Warning::NoTraceEvent {
                pmu_type: info.pmu_type,
            });
        }
        let pt_config = pt_events.first().map_or(0, |e| e.attr.config);
        // perf's intel_pt_timeless_decoding and intel_pt_have_tsc.
        let have_tsc = info.tsc_bit != 0
            && !pt_events.is_empty()
            && pt_events.iter().all(|e| e.attr.config & info.tsc_bit != 0);
        let timed = !options.timeless
            && have_tsc
            && info.cap_user_time_zero != 0
            && events
                .iter()
                .all(|e| e.attr.sample_type.has(SampleType::TIME));
        if !timed && info.time_mult == 0 {
            info.time_mult = 1;
        }
        if events
            .iter()
            .any(|e| e.attr.sample_type.has(SampleType::AUX))
        {
            warnings.push(Warning::AuxSamples);
        }

        // The decoder's configuration.
        let mut config = Config::default();
        match perf.feature(feature_id::CPUID) {
            // Another vendor's CPU (QEMU's emulated AuthenticAMD under the
            // simulated PT CPU): no Intel erratum applies, as in perf, which
            // reads only Intel's (GenuineIntel,6,92: FUP with NLIP).
            Some(Ok(Feature::CpuId(s)))
                if s.split(',').next().is_some_and(|v| {
                    v != "GenuineIntel"
                        && v.len() == 12
                        && v.bytes().all(|b| b.is_ascii_alphanumeric())
                }) => {}
            Some(Ok(Feature::CpuId(s))) => match parse_cpuid(&s) {
                Some(cpu) => {
                    config.cpu = Some(cpu);
                    match Errata::for_cpu(cpu) {
                        Ok(e) => config.errata = e,
                        Err(_) => warnings.push(Warning::Cpuid(format!("no errata known for {s}"))),
                    }
                }
                None => warnings.push(Warning::Cpuid(format!("cannot read {s:?}"))),
            },
            Some(Err(e)) => {
                skipped.features += 1;
                warnings.push(Warning::Record(e));
            }
            _ => {}
        }
        if let Some(m) = info.mtc {
            config.mtc_freq = field(pt_config, m.mtc_freq_bits) as u8;
            config.cpuid_0x15_eax = m.tsc_ctc_ratio_d as u32;
            config.cpuid_0x15_ebx = m.tsc_ctc_ratio_n as u32;
        }
        let mut nom = info.max_non_turbo_ratio.unwrap_or(0);
        if nom == 0 && info.time_mult != 0 && info.cap_user_time_zero != 0 {
            // perf: the maximum non-turbo ratio is the TSC frequency / 100 MHz.
            let tsc_hz = info
                .perf_time_to_tsc(info.time_zero.wrapping_add(1_000_000_000))
                .wrapping_sub(info.perf_time_to_tsc(info.time_zero));
            nom = (tsc_hz + 50_000_000) / 100_000_000;
        }
        config.nom_freq = nom.min(255) as u8;

        let mut finder = maps::Finder {
            sysroot: options.sysroot.clone(),
            buildid_dirs: options.buildid_dirs.clone(),
            vdso: options.vdso.clone(),
        };
        finder.buildid_dirs.dedup();
        let mut s = Session {
            info,
            pt_config,
            config,
            timed,
            have_tsc,
            queues: Vec::new(),
            tasks: tasks::Tasks::default(),
            maps: maps::Maps::new(finder),
            warnings,
            skipped,
            timeless_order: Vec::new(),
            event_times: Vec::new(),
            traced: true,
        };
        s.read_queues(perf, &options);
        let build_ids = s.read_build_ids(perf);
        s.read_side_band(perf, &build_ids);
        let snapshot = s.info.snapshot_mode != 0;
        let have_tsc = s.have_tsc;
        for q in &mut s.queues {
            q.build_segments(snapshot, have_tsc);
            q.lost.sort_by_key(|l| l.time.unwrap_or(0));
            let missing = q
                .pieces
                .iter()
                .fold(0u64, |n, p| n.saturating_add(p.cut_off));
            if missing > 0 {
                s.skipped.aux.push((q.idx, missing));
            }
        }
        s.find_unsynced();
        Ok(s)
    }

    /// The side-band of a recording without Intel PT trace (`perf record -e
    /// cycles`, `perf inject --itrace`'s output): threads, their names and
    /// their code, no queue; for the PERF_RECORD_SAMPLEs it holds
    /// ([`crate::recorded`]). Timed when every event's samples carry TIME.
    pub fn without_trace(perf: &PerfFile<'a>, options: SessionOptions) -> Self {
        let warnings: Vec<Warning> = perf.warnings().iter().copied().map(Warning::File).collect();
        let mut skipped = Skipped::default();
        for w in perf.warnings() {
            match *w {
                pt_perf_data::Warning::DataSizeZero { .. } => skipped.unfinished = true,
                pt_perf_data::Warning::BadFeature { .. } => skipped.features += 1,
                _ => {}
            }
        }
        let events = perf.events();
        let timed = !options.timeless
            && !events.is_empty()
            && events
                .iter()
                .all(|e| e.attr.sample_type.has(SampleType::TIME));
        let mut info = IntelPtInfo::new(u32::MAX);
        info.time_mult = 1;
        info.mtc = None;
        let mut finder = maps::Finder {
            sysroot: options.sysroot.clone(),
            buildid_dirs: options.buildid_dirs.clone(),
            vdso: options.vdso.clone(),
        };
        finder.buildid_dirs.dedup();
        let mut s = Session {
            info,
            pt_config: 0,
            config: Config::default(),
            timed,
            have_tsc: false,
            queues: Vec::new(),
            tasks: tasks::Tasks::default(),
            maps: maps::Maps::new(finder),
            warnings,
            skipped,
            timeless_order: Vec::new(),
            event_times: Vec::new(),
            traced: false,
        };
        let build_ids = s.read_build_ids(perf);
        s.read_side_band(perf, &build_ids);
        s
    }

    /// Whether the recording holds Intel PT trace (false for a session
    /// [`Session::without_trace`]).
    pub fn traced(&self) -> bool {
        self.traced
    }

    /// The segments whose trace holds no PSB: a decoder cannot start anywhere in
    /// them, so their bytes are lost (a zeroed or overwritten trace).
    fn find_unsynced(&mut self) {
        use pt_decoder::packet::find_psb_forward;
        for q in &self.queues {
            let mut lost = 0u64;
            for (i, seg) in q.segments.iter().enumerate() {
                let in_a_part = seg.parts.iter().any(|p| {
                    let data = q.pieces.get(p.piece).map_or(&[][..], |pc| pc.data);
                    data.get(p.skip..p.skip + p.len)
                        .is_some_and(|b| find_psb_forward(b, 0).is_some())
                });
                if !in_a_part && find_psb_forward(q.segment_bytes(i), 0).is_none() {
                    lost += seg.len() as u64;
                }
            }
            if lost > 0 {
                self.skipped.no_psb.push((q.idx, lost));
                self.warnings.push(Warning::NoPsb {
                    idx: q.idx,
                    bytes: lost,
                });
            }
        }
    }

    fn queue_index(&self, idx: u32) -> Option<usize> {
        self.queues.binary_search_by_key(&idx, |q| q.idx).ok()
    }

    /// The AUXTRACE records, in file order, into queues.
    fn read_queues(&mut self, perf: &PerfFile<'a>, options: &SessionOptions) {
        let bytes = perf.bytes();
        let data_end = perf.data_range().end as usize;
        let add = |s: &mut Self, a: pt_perf_data::Auxtrace<'a>, at: u64, cut_off: u64| {
            if let (Some(cpus), Some(cpu)) = (&options.cpus, opt(a.cpu)) {
                if !cpus.contains(&cpu) {
                    return;
                }
            }
            let i = match s.queue_index(a.idx) {
                Some(i) => i,
                None => {
                    let at_ = s.queues.partition_point(|q| q.idx < a.idx);
                    s.queues.insert(at_, Queue::new(a.idx, a.cpu, a.tid));
                    at_
                }
            };
            let q = &mut s.queues[i];
            if (q.cpu, q.tid) != (opt(a.cpu), opt(a.tid)) {
                s.warnings.push(Warning::QueueMismatch {
                    offset: at,
                    idx: a.idx,
                    queue: (q.cpu, q.tid),
                    record: (opt(a.cpu), opt(a.tid)),
                });
            }
            q.pieces.push(AuxPiece {
                record_offset: at,
                data_offset: at + u64::from(pt_perf_data::records::AUXTRACE_RECORD_SIZE),
                aux_offset: a.offset,
                reference: a.reference,
                data: a.data,
                cut_off,
            });
        };
        let mut records = perf.records();
        while let Some(r) = records.next() {
            match r {
                Ok((at, Record::Auxtrace(a))) => add(self, a, at, 0),
                Ok((at, Record::AuxtraceError(e))) => self.warnings.push(Warning::AuxtraceError {
                    offset: at,
                    message: e.msg.to_str_lossy().trim().to_string(),
                }),
                Ok(_) => {}
                Err(e) => {
                    // An AUXTRACE whose data runs past the end: decode what is there.
                    if let ErrorKind::RecordPastEnd { ty, .. } = e.kind {
                        if ty == pt_perf_data::record_type::AUXTRACE {
                            if let Some((a, size)) =
                                cut_auxtrace(bytes, e.offset as usize, data_end)
                            {
                                self.warnings.push(Warning::CutOff {
                                    offset: e.offset,
                                    size,
                                    have: a.data.len() as u64,
                                });
                                let missing = size - a.data.len() as u64;
                                add(self, a, e.offset, missing);
                                continue;
                            }
                        }
                    }
                    if records.offset() == e.offset {
                        // A broken frame: the records after it cannot be found.
                        let unread = (data_end as u64).saturating_sub(e.offset);
                        self.skipped.stopped = Some((e.offset, unread));
                    } else {
                        self.skipped.records += 1;
                    }
                    self.warnings.push(Warning::Record(e));
                }
            }
        }
    }

    /// The side-band records in perf's time order.
    fn read_side_band(
        &mut self,
        perf: &PerfFile<'a>,
        build_ids: &HashMap<String, pt_perf_data::BuildId>,
    ) {
        let timed = self.timed;
        let time = |t: Option<u64>| if timed { t } else { None };
        let per_cpu = self.info.per_cpu_mmaps != 0;
        let cpu_wide = self.info.have_sched_switch == 3;
        // Queues by cpu and by tid, for AUX and LOST records.
        let by_cpu: HashMap<u32, usize> = self
            .queues
            .iter()
            .enumerate()
            .filter_map(|(i, q)| Some((q.cpu?, i)))
            .collect();
        let by_tid: HashMap<u32, usize> = self
            .queues
            .iter()
            .enumerate()
            .filter_map(|(i, q)| Some((q.tid?, i)))
            .collect();
        let mut exits: Vec<(u64, u32)> = Vec::new();
        let mut records = perf.ordered_records();
        let mut seq = 0u64;
        for r in &mut records {
            let Ok((at, r)) = r else { continue };
            seq += 1;
            let t = time(r.time());
            if let Some(time) = t.filter(|&t| t != 0 && t != u64::MAX && !r.is_user()) {
                self.event_times.push(EventTime {
                    time,
                    record_offset: at,
                });
            }
            let sid = r.sample_id().copied().unwrap_or_default();
            match r {
                Record::Comm(c) => {
                    let comm = c.comm.to_str_lossy();
                    self.tasks.comm(c.pid, c.tid, &comm, c.is_exec(), t, at);
                    if c.is_exec() {
                        self.maps.exec(c.pid, t);
                    }
                }
                Record::Fork(f) => {
                    self.tasks.fork(f.pid, f.tid, f.ptid, t, at);
                    self.maps.fork(f.pid, f.ppid, t);
                }
                Record::Exit(e) => {
                    self.tasks.exit(e.pid, e.tid, t);
                    exits.push((seq, e.tid));
                }
                Record::Mmap(m) if m.misc & pt_perf_data::misc::MMAP_DATA == 0 => {
                    let name = m.filename.to_str_lossy().into_owned();
                    let id = build_ids.get(&name).copied();
                    self.map(
                        m.misc, m.pid, m.start, m.len, m.pgoff, name, id, None, t, at,
                    );
                }
                Record::Mmap2(m) if m.misc & pt_perf_data::misc::MMAP_DATA == 0 => {
                    let name = m.filename.to_str_lossy().into_owned();
                    let id = match m.file {
                        pt_perf_data::Mmap2File::BuildId(b) => Some(b),
                        _ => build_ids.get(&name).copied(),
                    };
                    self.map(
                        m.misc,
                        m.pid,
                        m.start,
                        m.len,
                        m.pgoff,
                        name,
                        id,
                        Some(m.prot),
                        t,
                        at,
                    );
                }
                Record::ItraceStart(i) => {
                    self.tasks.seen(i.pid, i.tid);
                    if per_cpu {
                        if let Some(cpu) = sid.cpu {
                            self.tasks.switch_to(cpu, i.pid, i.tid, t);
                        }
                    }
                }
                Record::Switch(sw) => {
                    if let (Some(cpu), false, true) = (sid.cpu, sw.is_out(), per_cpu) {
                        self.tasks.switch_to(
                            cpu,
                            sid.pid.unwrap_or(u32::MAX),
                            sid.tid.unwrap_or(u32::MAX),
                            t,
                        );
                    }
                }
                Record::SwitchCpuWide(sw) => {
                    if let Some(cpu) = sid.cpu.filter(|_| per_cpu) {
                        if sw.is_out() && cpu_wide {
                            self.tasks
                                .switch_to(cpu, sw.next_prev_pid, sw.next_prev_tid, t);
                        } else if !sw.is_out() {
                            self.tasks.switch_to(
                                cpu,
                                sid.pid.unwrap_or(u32::MAX),
                                sid.tid.unwrap_or(u32::MAX),
                                t,
                            );
                        }
                    }
                }
                Record::Aux(a) => {
                    let kinds = [
                        (AuxFlags::TRUNCATED, LostKind::Truncated),
                        (AuxFlags::COLLISION, LostKind::Collision),
                        (AuxFlags::PARTIAL, LostKind::Partial),
                    ];
                    let q = if per_cpu {
                        sid.cpu.and_then(|c| by_cpu.get(&c))
                    } else {
                        sid.tid.and_then(|t| by_tid.get(&t))
                    };
                    for (bit, kind) in kinds {
                        if a.flags.0 & bit == 0 {
                            continue;
                        }
                        let lost = Lost {
                            kind,
                            record_offset: at,
                            aux_offset: (!a.flags.overwrite())
                                .then(|| a.aux_offset.saturating_add(a.aux_size)),
                            time: t,
                        };
                        match q {
                            Some(&q) => self.queues[q].lost.push(lost),
                            None => self.warnings.push(Warning::Record(pt_perf_data::Error::new(
                                at,
                                ErrorKind::Invalid("AUX record with lost data names no AUX queue"),
                            ))),
                        }
                    }
                }
                Record::Lost(l) => {
                    let q = if per_cpu {
                        sid.cpu.and_then(|c| by_cpu.get(&c))
                    } else {
                        sid.tid.and_then(|t| by_tid.get(&t))
                    };
                    let lost = Lost {
                        kind: LostKind::Records { count: l.lost },
                        record_offset: at,
                        aux_offset: None,
                        time: t,
                    };
                    match q {
                        Some(&q) => self.queues[q].lost.push(lost),
                        // Side-band of no particular queue: every queue may miss it.
                        None => {
                            for q in &mut self.queues {
                                q.lost.push(lost);
                            }
                        }
                    }
                }
                Record::LostSamples(l) => self.warnings.push(Warning::LostSamples {
                    offset: at,
                    count: l.lost,
                }),
                _ => {}
            }
        }
        let ooo = records.out_of_order();
        if ooo > 0 {
            self.warnings.push(Warning::OutOfOrder(ooo));
        }
        self.tasks.finish();
        // perf's timeless decoding: a per-thread queue is decoded at its thread's EXIT,
        // the rest at the end in queue order.
        let mut order: Vec<usize> = Vec::new();
        for (_, tid) in exits {
            for (i, q) in self.queues.iter().enumerate() {
                if q.tid == Some(tid) && !order.contains(&i) {
                    order.push(i);
                }
            }
        }
        for i in 0..self.queues.len() {
            if !order.contains(&i) {
                order.push(i);
            }
        }
        self.timeless_order = order;
    }

    #[allow(clippy::too_many_arguments)]
    fn map(
        &mut self,
        misc: u16,
        pid: u32,
        start: u64,
        len: u64,
        pgoff: u64,
        filename: String,
        build_id: Option<pt_perf_data::BuildId>,
        prot: Option<u32>,
        time: Option<u64>,
        at: u64,
    ) {
        let mode = misc & pt_perf_data::misc::CPUMODE_MASK;
        let kernel = mode == pt_perf_data::misc::KERNEL || mode == pt_perf_data::misc::GUEST_KERNEL;
        let pid = if kernel || pid == u32::MAX {
            None
        } else {
            Some(pid)
        };
        let kind = MappingKind::of(&filename, kernel);
        self.maps.map(Mapping {
            pid,
            start,
            len,
            pgoff,
            filename,
            build_id,
            prot,
            time,
            record_offset: at,
            kind,
        });
    }

    /// AUXTRACE_INFO's intel_pt fields.
    pub fn info(&self) -> &IntelPtInfo {
        &self.info
    }

    /// The intel_pt event's `perf_event_attr.config` (the `intel_pt/…/` terms).
    pub fn pt_config(&self) -> u64 {
        self.pt_config
    }

    /// The decoder's configuration (CPU and errata from the CPUID feature, MTC
    /// period, TSC/CTC ratio, maximum non-turbo ratio).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Whether the recording is decoded with timestamps (perf's timed decoding): the
    /// trace has TSC packets and every event samples the time.
    pub fn is_timed(&self) -> bool {
        self.timed
    }

    /// Per-CPU AUX areas (else per thread).
    pub fn per_cpu(&self) -> bool {
        self.info.per_cpu_mmaps != 0
    }

    /// Snapshot mode (`perf record -S`).
    pub fn snapshot(&self) -> bool {
        self.info.snapshot_mode != 0
    }

    /// perf time of a TSC value.
    pub fn tsc_to_time(&self, tsc: u64) -> u64 {
        self.info.tsc_to_perf_time(tsc)
    }

    /// TSC value of a perf time.
    pub fn time_to_tsc(&self, time: u64) -> u64 {
        self.info.perf_time_to_tsc(time)
    }

    /// The queues, by perf's queue number.
    pub fn queues(&self) -> &[Queue<'a>] {
        &self.queues
    }

    /// Frees the buffers segments of several pieces were joined into.
    pub fn release_joined(&mut self) {
        for q in &mut self.queues {
            q.release();
        }
    }

    /// The queues in the order perf's timeless decoding takes them (per-thread queues
    /// at their thread's EXIT, the rest at the end).
    pub fn timeless_order(&self) -> &[usize] {
        &self.timeless_order
    }

    /// The timed records perf's decoder sees go by, in its order (empty when the
    /// recording is not timed).
    pub fn event_times(&self) -> &[EventTime] {
        &self.event_times
    }

    /// What was wrong in the recording.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// What the recording's damage took away, counted (empty for a whole file): what
    /// a tool sums up at its end.
    pub fn skipped(&self) -> &Skipped {
        &self.skipped
    }

    /// Thread `tid` at `time` (`None`: its last lifetime).
    pub fn thread(&self, tid: u32, time: Option<u64>) -> Option<&Thread> {
        self.tasks.thread(tid, time)
    }

    /// Every thread lifetime the side-band records name.
    pub fn threads(&self) -> impl Iterator<Item = &Thread> {
        self.tasks.threads()
    }

    /// The name of thread `tid` at `time`.
    pub fn comm(&self, tid: u32, time: Option<u64>) -> Option<&str> {
        self.tasks.thread(tid, time)?.comm_at(time)
    }

    /// Which thread runs on queue `queue` at `time` (`None`: the latest known; for
    /// an untimed per-CPU queue that is what perf's timeless decoding uses too).
    pub fn running(&self, queue: usize, time: Option<u64>) -> Context {
        let Some(q) = self.queues.get(queue) else {
            return Context::default();
        };
        let time = if self.timed { time } else { None };
        if let Some(tid) = q.tid {
            let pid = self
                .tasks
                .thread(tid, time)
                .and_then(|t| t.pid)
                .or_else(|| self.maps.has(tid).then_some(tid));
            return Context {
                pid,
                tid: Some(tid),
                cpu: q.cpu,
                since: None,
            };
        }
        let Some(cpu) = q.cpu else {
            return Context::default();
        };
        // Before the first switch on the CPU, the first thread that ran there.
        let sw = self
            .tasks
            .on_cpu(cpu, time)
            .or_else(|| self.tasks.first_on_cpu(cpu));
        match sw {
            Some(sw) => Context {
                pid: sw
                    .pid
                    .or_else(|| sw.tid.and_then(|t| self.tasks.thread(t, time)?.pid)),
                tid: sw.tid,
                cpu: Some(cpu),
                since: Some(sw.time),
            },
            None => Context {
                cpu: Some(cpu),
                ..Default::default()
            },
        }
    }

    /// When what runs on `queue` (its thread, or that thread's code) next changes
    /// after `time` (timed recordings only).
    pub fn next_change(&self, queue: usize, ctx: &Context, time: u64) -> Option<u64> {
        if !self.timed {
            return None;
        }
        let q = self.queues.get(queue)?;
        let sched = match (q.tid, q.cpu) {
            (None, Some(cpu)) => self.tasks.next_on_cpu(cpu, time),
            _ => None,
        };
        let epoch = ctx.pid.and_then(|p| self.maps.next_epoch(p, time));
        match (sched, epoch) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The code of process `pid` at `time`: its mappings then, found on disk. For an
    /// untimed recording (or `time` `None`) every mapping the process ever had, later
    /// ones on top, as perf's timeless decoding sees it. An unknown process has an
    /// empty image.
    pub fn image(&self, pid: Option<u32>, time: Option<u64>) -> &Image {
        self.maps.image(pid, if self.timed { time } else { None })
    }

    /// The mapping that holds `ip` in process `pid` at `time` (the kernel's if none of
    /// the process's does), as perf's `thread__find_map`.
    pub fn mapping(&self, pid: Option<u32>, ip: u64, time: Option<u64>) -> Option<&Mapping> {
        let t = if self.timed { time } else { None };
        let id = self.maps.mapping(pid, ip, t)?;
        self.maps.mappings.get(id as usize)
    }

    /// Every mapping, in the order of the records.
    pub fn mappings(&self) -> &[Mapping] {
        &self.maps.mappings
    }

    /// The symbol table perf names the addresses of mapping `m` with, loaded into
    /// `symbols`: for the kernel its kallsyms list ([`pt_elf::kallsyms`]), for the
    /// rest the symbols of the file its code was found in.
    pub fn symbol_table(
        &self,
        m: &Mapping,
        symbols: &mut pt_elf::Symbols,
    ) -> Option<pt_elf::TableId> {
        if m.kind == MappingKind::Kernel && m.dso_name() == "[kernel.kallsyms]" {
            return self
                .maps
                .finder
                .kallsyms(m)
                .map(|p| symbols.kallsyms_table(&p));
        }
        let file = self.code_file(m).ok()?;
        let bid = m.build_id.filter(|b| b.len > 0);
        Some(symbols.dso_table(&file.path, &m.filename, bid.as_ref().map(|b| b.as_bytes())))
    }

    /// Where the code of `mapping` (one of [`Session::mappings`]) was found, or why
    /// it was not.
    pub fn code_file(&self, mapping: &Mapping) -> Result<&CodeFile, &MissingCode> {
        let id = self
            .maps
            .mappings
            .iter()
            .position(|m| core::ptr::eq(m, mapping))
            .or_else(|| self.maps.mappings.iter().position(|m| m == mapping));
        match id {
            Some(i) => self.maps.file(i as u32).as_ref(),
            None => Err(&MissingCode::NotMapped),
        }
    }

    /// Why there is no code at `ip` in process `pid` at `time`.
    pub fn why_no_code(&self, pid: Option<u32>, ip: u64, time: Option<u64>) -> NoCode {
        let t = if self.timed { time } else { None };
        match self.maps.mapping(pid, ip, t) {
            Some(id) => {
                let m = &self.maps.mappings[id as usize];
                let why = match self.maps.file(id) {
                    Err(e) => e.clone(),
                    // Found, but the address lies beyond the file's end.
                    Ok(f) => MissingCode::Unreadable {
                        path: f.path.clone(),
                        error: format!(
                            "file offset {:#x} is past the end of the file",
                            m.file_offset(ip)
                        ),
                    },
                };
                NoCode {
                    ip,
                    pid,
                    mapping: Some(m.clone()),
                    why,
                }
            }
            None => NoCode {
                ip,
                pid,
                mapping: None,
                why: MissingCode::NotMapped,
            },
        }
    }

    /// A decoder of queue `queue` (an index into [`Session::queues`]).
    pub fn decoder(&self, queue: usize) -> QueueDecoder<'_, 'a> {
        QueueDecoder::new(self, queue)
    }

    /// The queues `queues` decoded together in time order (perf's timed decoding);
    /// `configure` sets up each queue's decoder.
    pub fn timed_decoder<'s>(
        &'s self,
        queues: &[usize],
        configure: impl Fn(pt_decoder::DecoderBuilder<'s>) -> pt_decoder::DecoderBuilder<'s>
            + Clone
            + 's,
    ) -> TimedDecoder<'s, 'a> {
        TimedDecoder::new(
            queues
                .iter()
                .map(|&q| self.decoder(q).configure(configure.clone()))
                .collect(),
        )
    }

    /// A [`Decoder`] builder for `trace` with the session's configuration (for
    /// callers that cut the trace themselves).
    pub fn builder<'s>(
        &'s self,
        trace: &'s [u8],
        image: &'s Image,
    ) -> pt_decoder::DecoderBuilder<'s> {
        Decoder::builder(trace, image).config(&self.config)
    }
}

impl Session<'_> {
    /// Build ids of the BUILD_ID feature (and pipe mode's HEADER_BUILD_ID records), by
    /// file name.
    fn read_build_ids(&mut self, perf: &PerfFile<'_>) -> HashMap<String, pt_perf_data::BuildId> {
        let mut ids = HashMap::new();
        match perf.feature(feature_id::BUILD_ID) {
            Some(Ok(Feature::BuildId(v))) => {
                for e in v {
                    let name = String::from_utf8_lossy(&e.filename).into_owned();
                    ids.insert(name, e.build_id);
                }
            }
            Some(Err(e)) => {
                self.skipped.features += 1;
                self.warnings.push(Warning::Record(e));
            }
            _ => {}
        }
        if perf.is_pipe() {
            for r in perf.records().map_while(Result::ok) {
                if let (_, Record::HeaderBuildId(b)) = r {
                    ids.insert(b.filename.to_str_lossy().into_owned(), b.build_id);
                }
            }
        }
        ids
    }
}

/// The AUXTRACE record at `at` whose data runs past `end`: its fields and the data
/// up to `end`, with the size it claims.
fn cut_auxtrace(bytes: &[u8], at: usize, end: usize) -> Option<(pt_perf_data::Auxtrace<'_>, u64)> {
    let rec = bytes.get(at..at.checked_add(48)?)?;
    if at + 48 > end {
        return None;
    }
    let u64_at = |o: usize| u64::from_le_bytes(rec[o..o + 8].try_into().unwrap_or([0; 8]));
    let u32_at = |o: usize| u32::from_le_bytes(rec[o..o + 4].try_into().unwrap_or([0; 4]));
    let hsize = u16::from_le_bytes([rec[6], rec[7]]);
    if hsize != 48 {
        return None;
    }
    let size = u64_at(8);
    let data = bytes.get(at + 48..end)?;
    if (data.len() as u64) >= size {
        return None;
    }
    Some((
        pt_perf_data::Auxtrace {
            offset: u64_at(16),
            reference: u64_at(24),
            idx: u32_at(32),
            tid: u32_at(36),
            cpu: u32_at(40),
            data,
        },
        size,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuid_and_config_fields() {
        assert_eq!(
            parse_cpuid("GenuineIntel,6,142,10"),
            Some(Cpu {
                family: 6,
                model: 142,
                stepping: 10
            })
        );
        assert_eq!(parse_cpuid("AuthenticAMD,25,1,1"), None);
        assert_eq!(field(3 << 14, 0xf << 14), 3);
        assert_eq!(field(5, 0), 0);
    }

    #[test]
    fn eight_byte_tsc() {
        let r = 0x0100_0000_0000_0010;
        assert_eq!(crate::decode::tsc_8b(0x20, r), 0x0100_0000_0000_0020);
        // Wrapped below the reference's upper byte.
        assert_eq!(
            crate::decode::tsc_8b(0x00ff_ffff_ffff_fff0, r),
            0x00ff_ffff_ffff_fff0
        );
        assert_eq!(crate::decode::tsc_8b(0x30, 0), 0x30);
    }
}
