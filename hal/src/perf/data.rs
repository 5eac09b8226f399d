//! What the perf backend recorded, written as the perf.data `perf record -e
//! intel_pt//` writes, so that perf itself and our decoder read it.
//!
//! - **One event**, the intel_pt event as opened: its type, config, privilege
//!   levels, and the side-band flags the backend asks the kernel for (mmap,
//!   mmap2, comm with exec, task, context switches), with the sample_id
//!   trailer layout of the records the kernel wrote (TID, TIME, CPU,
//!   IDENTIFIER).
//! - **Side-band**: the kernel's own records from the data ring, byte for
//!   byte (COMM, MMAP2, FORK, EXIT, ITRACE_START, SWITCH, LOST, and the AUX
//!   records whose flags say TRUNCATED, OVERWRITE, PARTIAL or COLLISION):
//!   nothing is re-encoded, so nothing the kernel said is lost.
//! - **Trace**: one AUXTRACE record per chunk of an AUX area, with perf's
//!   fields: the position in the area's stream (`offset`), the area's `idx`,
//!   its CPU (per-CPU areas) or thread (per-thread areas), and `reference`,
//!   the TSC when the data was copied out, as perf record stores rdtsc there
//!   (perf's decoder needs it to extend TSC packets).
//! - **AUXTRACE_INFO** from the event and the user page: PMU type, the time
//!   conversion (time_shift, time_mult, time_zero), the TSC, noretcomp, MTC
//!   and CYC bits, CPUID 0x15's TSC:CTC ratio, snapshot and per-CPU mode,
//!   have_sched_switch as perf record sets it (3 for timed per-CPU areas,
//!   which need the context switch records; else 0), and the address filter.
//!
//! The private `PTSIDEB1` side-band file this replaces is gone.

use std::fs::File;
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};

use pt_perf_data::intel_pt::config as pt_config;
use pt_perf_data::{
    AttrFlags, Auxtrace, EventAttr, EventDesc, IntelPtInfo, IntelPtMtc, RawRecord as FileRaw,
    Record, RecordingError, RecordingSetup, RecordingWriter, SampleType,
};

use super::ring::RawRecord;
use crate::backend::TraceItem;

/// The session a perf.data describes (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionInfo {
    /// The intel_pt PMU's type.
    pub pmu_type: u32,
    /// The event's config (perf's format bits).
    pub config: u64,
    /// attr.exclude_kernel.
    pub exclude_kernel: bool,
    /// attr.exclude_user.
    pub exclude_user: bool,
    /// The event's id (PERF_EVENT_IOC_ID).
    pub id: u64,
    /// The user page's time conversion: (time_shift, time_mult, time_zero),
    /// when the kernel offers it (cap_user_time_zero).
    pub time: Option<(u16, u32, u64)>,
    /// Snapshot (AUX overwrite) mode.
    pub snapshot: bool,
    /// AUX areas per CPU (else per thread).
    pub per_cpu: bool,
    /// The address filter given to the kernel (perf's syntax), or empty.
    pub filter: String,
    /// CPUID 0x15: (EAX, EBX) = TSC:CTC ratio denominator and numerator.
    pub tsc_ctc: Option<(u32, u32)>,
    /// The maximum non-turbo ratio (MSR_PLATFORM_INFO bits 15:8), if known.
    pub max_non_turbo_ratio: Option<u64>,
    /// The event's name, e.g. `intel_pt//u`.
    pub name: String,
}

/// The sample_id trailer the backend asks the kernel for: TID, TIME, CPU and
/// IDENTIFIER (perf needs the id to tell the records of its own synthesized
/// events from the intel_pt event's).
pub const SAMPLE_ID: u64 =
    SampleType::TID | SampleType::TIME | SampleType::CPU | SampleType::IDENTIFIER;

impl SessionInfo {
    /// The event as the file describes it.
    pub fn attr(&self) -> EventAttr {
        let mut flags = AttrFlags::DISABLED
            | AttrFlags::ENABLE_ON_EXEC
            | AttrFlags::SAMPLE_ID_ALL
            | AttrFlags::MMAP
            | AttrFlags::MMAP2
            | AttrFlags::COMM
            | AttrFlags::COMM_EXEC
            | AttrFlags::TASK
            | AttrFlags::CONTEXT_SWITCH
            | AttrFlags::EXCLUDE_HV;
        if self.exclude_kernel {
            flags |= AttrFlags::EXCLUDE_KERNEL;
        }
        if self.exclude_user {
            flags |= AttrFlags::EXCLUDE_USER;
        }
        EventAttr {
            type_: self.pmu_type,
            size: pt_perf_data::ATTR_SIZE,
            config: self.config,
            sample_period: 1,
            // IP for the samples perf synthesizes from the trace (not part of
            // the sample_id trailer, whose layout stays the kernel's).
            sample_type: SampleType(SAMPLE_ID | SampleType::IP),
            flags: AttrFlags(flags),
            ..Default::default()
        }
    }

    /// The recording as [`RecordingWriter`] writes it: the event, AUXTRACE_INFO,
    /// TIME_CONV when the kernel gives the time conversion.
    pub fn setup(&self, cmdline: &[String]) -> RecordingSetup {
        let trace = EventDesc {
            attr: self.attr(),
            ids: vec![self.id],
            name: Some(self.name.clone()),
        };
        let mut s = RecordingSetup::new(trace, self.intel_pt_info());
        s.time_conv = self.time.is_some();
        s.perf_version = format!("6.1 (ptperf {})", env!("CARGO_PKG_VERSION"));
        s.cmdline = cmdline.to_vec();
        s
    }

    /// AUXTRACE_INFO's intel_pt fields.
    pub fn intel_pt_info(&self) -> IntelPtInfo {
        let mut info = IntelPtInfo::new(self.pmu_type);
        if let Some((shift, mult, zero)) = self.time {
            info.time_shift = u64::from(shift);
            info.time_mult = u64::from(mult);
            info.time_zero = zero;
            info.cap_user_time_zero = 1;
        }
        info.tsc_bit = pt_config::TSC;
        info.noretcomp_bit = pt_config::NORETCOMP;
        // As perf record: per-CPU areas with timing (TSC) rely on the
        // context switch records of the CPU-wide event to tell threads apart
        // (3); per-thread areas name their thread and need none (0).
        info.have_sched_switch = if self.per_cpu && self.config & pt_config::TSC != 0 {
            3
        } else {
            0
        };
        info.snapshot_mode = u64::from(self.snapshot);
        info.per_cpu_mmaps = u64::from(self.per_cpu);
        let (d, n) = self.tsc_ctc.unwrap_or((0, 0));
        info.mtc = Some(IntelPtMtc {
            mtc_bit: pt_config::MTC,
            mtc_freq_bits: pt_config::MTC_PERIOD_MASK,
            tsc_ctc_ratio_n: u64::from(n),
            tsc_ctc_ratio_d: u64::from(d),
            cyc_bit: pt_config::CYC,
        });
        info.max_non_turbo_ratio = Some(self.max_non_turbo_ratio.unwrap_or(0));
        info.filter = Some(self.filter.clone().into_bytes());
        info
    }
}

/// An AUX area: its index in the file and whose trace it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuxArea {
    /// perf's `idx`: the area's place in the recording (0, 1, …).
    pub idx: u32,
    /// The CPU of a per-CPU area.
    pub cpu: Option<u32>,
    /// The thread of a per-thread area.
    pub tid: Option<u32>,
}

/// Why the perf.data could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PerfDataError {
    /// The writer failed (the file, the offset, what).
    #[error(transparent)]
    Write(#[from] RecordingError),
    /// A side-band record from the data ring is too short for its header.
    #[error("side-band record of {0} bytes: shorter than its header")]
    ShortRecord(usize),
}

/// Writes a perf backend session as perf.data (see the module docs), through
/// the one Intel PT recording writer ([`RecordingWriter`]): in rounds, each
/// leaving a complete file on disk.
pub struct PerfDataRecorder<W: Write + Seek = File> {
    w: RecordingWriter<W>,
}

impl PerfDataRecorder<File> {
    /// Creates the file `path` for `session`, with the `cmdline` that
    /// recorded it (see [`Self::new`]).
    pub fn create(
        path: impl AsRef<Path>,
        session: &SessionInfo,
        cmdline: &[String],
    ) -> Result<Self, PerfDataError> {
        let w = RecordingWriter::create(path, session.setup(cmdline))?;
        Self::start(w)
    }
}

impl<W: Write + Seek> PerfDataRecorder<W> {
    /// Starts the file for `session` in `out` (`path` names it in errors):
    /// header, event, features (with the `cmdline` that recorded it),
    /// AUXTRACE_INFO and TIME_CONV, and the first round.
    pub fn new(
        out: W,
        path: impl Into<PathBuf>,
        session: &SessionInfo,
        cmdline: &[String],
    ) -> Result<Self, PerfDataError> {
        let w = RecordingWriter::new(out, path, session.setup(cmdline))?;
        Self::start(w)
    }

    fn start(mut w: RecordingWriter<W>) -> Result<Self, PerfDataError> {
        w.finish_init()?;
        Ok(PerfDataRecorder { w })
    }

    /// A record of the data ring, as the kernel wrote it (header included).
    pub fn side_band(&mut self, r: &RawRecord) -> Result<(), PerfDataError> {
        if r.bytes.len() < 8 {
            return Err(PerfDataError::ShortRecord(r.bytes.len()));
        }
        self.w.write(&Record::Raw(FileRaw {
            ty: r.kind,
            misc: r.misc,
            body: r.body(),
        }))?;
        Ok(())
    }

    /// The trace the backend read from `area`: an AUXTRACE record per chunk
    /// of data; `reference` is the TSC when it was copied out. Losses are
    /// told by the kernel's AUX and LOST records (see [`Self::side_band`]).
    pub fn trace(
        &mut self,
        area: &AuxArea,
        items: &[TraceItem],
        reference: u64,
    ) -> Result<(), PerfDataError> {
        for it in items {
            if let TraceItem::Data { offset, bytes } = it {
                self.w.write(&Record::Auxtrace(Auxtrace {
                    offset: *offset,
                    reference,
                    idx: area.idx,
                    tid: area.tid.unwrap_or(u32::MAX),
                    cpu: area.cpu.unwrap_or(u32::MAX),
                    data: bytes,
                }))?;
            }
        }
        Ok(())
    }

    /// Everything before this may be ordered by time (FINISHED_ROUND), and
    /// the file on disk is complete up to here.
    pub fn round(&mut self) -> Result<(), PerfDataError> {
        Ok(self.w.finish_round()?)
    }

    /// Completes the file (a last round).
    pub fn finish(mut self) -> Result<W, PerfDataError> {
        self.w.finish_round()?;
        Ok(self.w.finish()?)
    }
}

/// The TSC now (AUXTRACE `reference`).
pub fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: RDTSC has no preconditions on x86-64.
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    0
}
