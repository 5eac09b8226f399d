//! The records of a perf.data data section: one typed model that the reader hands out
//! (borrowing the file's bytes) and the writer takes.
//!
//! Kernel records (types below 64) carry their header's `misc` and, when their event has
//! `sample_id_all`, a [`SampleId`] trailer decoded with that event's sample_type. User
//! records (64 and up) are perf's own. Kinds this layer does not type are kept as
//! [`RawRecord`]s, never an error.

use crate::attr::{read_format, EventAttr, EventTable, SampleType, BRANCH_HW_INDEX};
use crate::bytes::{align8, until_nul, CStr, Cursor, Put, U64s};
use crate::error::{Error, ErrorKind, Result};
use crate::features::Feature;
use crate::intel_pt::IntelPtInfo;

/// Record type numbers (`perf_event_type` and perf's `perf_user_event_type`).
#[allow(missing_docs)]
pub mod record_type {
    pub const MMAP: u32 = 1;
    pub const LOST: u32 = 2;
    pub const COMM: u32 = 3;
    pub const EXIT: u32 = 4;
    pub const THROTTLE: u32 = 5;
    pub const UNTHROTTLE: u32 = 6;
    pub const FORK: u32 = 7;
    pub const READ: u32 = 8;
    pub const SAMPLE: u32 = 9;
    pub const MMAP2: u32 = 10;
    pub const AUX: u32 = 11;
    pub const ITRACE_START: u32 = 12;
    pub const LOST_SAMPLES: u32 = 13;
    pub const SWITCH: u32 = 14;
    pub const SWITCH_CPU_WIDE: u32 = 15;
    pub const NAMESPACES: u32 = 16;
    pub const KSYMBOL: u32 = 17;
    pub const BPF_EVENT: u32 = 18;
    pub const CGROUP: u32 = 19;
    pub const TEXT_POKE: u32 = 20;
    pub const AUX_OUTPUT_HW_ID: u32 = 21;
    /// First of perf's own (user) record types.
    pub const USER_TYPE_START: u32 = 64;
    pub const HEADER_ATTR: u32 = 64;
    pub const HEADER_EVENT_TYPE: u32 = 65;
    pub const HEADER_TRACING_DATA: u32 = 66;
    pub const HEADER_BUILD_ID: u32 = 67;
    pub const FINISHED_ROUND: u32 = 68;
    pub const ID_INDEX: u32 = 69;
    pub const AUXTRACE_INFO: u32 = 70;
    pub const AUXTRACE: u32 = 71;
    pub const AUXTRACE_ERROR: u32 = 72;
    pub const THREAD_MAP: u32 = 73;
    pub const CPU_MAP: u32 = 74;
    pub const STAT_CONFIG: u32 = 75;
    pub const STAT: u32 = 76;
    pub const STAT_ROUND: u32 = 77;
    pub const EVENT_UPDATE: u32 = 78;
    pub const TIME_CONV: u32 = 79;
    pub const HEADER_FEATURE: u32 = 80;
    pub const COMPRESSED: u32 = 81;
    pub const FINISHED_INIT: u32 = 82;

    /// perf's name of a record type (as `perf script -D` prints it).
    pub fn name(ty: u32) -> &'static str {
        match ty {
            MMAP => "MMAP",
            LOST => "LOST",
            COMM => "COMM",
            EXIT => "EXIT",
            THROTTLE => "THROTTLE",
            UNTHROTTLE => "UNTHROTTLE",
            FORK => "FORK",
            READ => "READ",
            SAMPLE => "SAMPLE",
            MMAP2 => "MMAP2",
            AUX => "AUX",
            ITRACE_START => "ITRACE_START",
            LOST_SAMPLES => "LOST_SAMPLES",
            SWITCH => "SWITCH",
            SWITCH_CPU_WIDE => "SWITCH_CPU_WIDE",
            NAMESPACES => "NAMESPACES",
            KSYMBOL => "KSYMBOL",
            BPF_EVENT => "BPF_EVENT",
            CGROUP => "CGROUP",
            TEXT_POKE => "TEXT_POKE",
            AUX_OUTPUT_HW_ID => "AUX_OUTPUT_HW_ID",
            HEADER_ATTR => "ATTR",
            HEADER_EVENT_TYPE => "EVENT_TYPE",
            HEADER_TRACING_DATA => "TRACING_DATA",
            HEADER_BUILD_ID => "BUILD_ID",
            FINISHED_ROUND => "FINISHED_ROUND",
            ID_INDEX => "ID_INDEX",
            AUXTRACE_INFO => "AUXTRACE_INFO",
            AUXTRACE => "AUXTRACE",
            AUXTRACE_ERROR => "AUXTRACE_ERROR",
            THREAD_MAP => "THREAD_MAP",
            CPU_MAP => "CPU_MAP",
            STAT_CONFIG => "STAT_CONFIG",
            STAT => "STAT",
            STAT_ROUND => "STAT_ROUND",
            EVENT_UPDATE => "EVENT_UPDATE",
            TIME_CONV => "TIME_CONV",
            HEADER_FEATURE => "FEATURE",
            COMPRESSED => "COMPRESSED",
            FINISHED_INIT => "FINISHED_INIT",
            _ => "UNKNOWN",
        }
    }
}

/// `PERF_RECORD_MISC_*` bits of a record header's `misc`.
#[allow(missing_docs)]
pub mod misc {
    pub const CPUMODE_MASK: u16 = 7;
    pub const CPUMODE_UNKNOWN: u16 = 0;
    pub const KERNEL: u16 = 1;
    pub const USER: u16 = 2;
    pub const HYPERVISOR: u16 = 3;
    pub const GUEST_KERNEL: u16 = 4;
    pub const GUEST_USER: u16 = 5;
    pub const PROC_MAP_PARSE_TIMEOUT: u16 = 1 << 12;
    pub const MMAP_DATA: u16 = 1 << 13;
    pub const COMM_EXEC: u16 = 1 << 13;
    pub const FORK_EXEC: u16 = 1 << 13;
    pub const SWITCH_OUT: u16 = 1 << 13;
    pub const EXACT_IP: u16 = 1 << 14;
    pub const SWITCH_OUT_PREEMPT: u16 = 1 << 14;
    pub const MMAP_BUILD_ID: u16 = 1 << 14;
    pub const EXT_RESERVED: u16 = 1 << 15;
    /// HEADER_BUILD_ID / BUILD_ID feature entries: the build id's size byte is valid.
    pub const BUILD_ID_SIZE: u16 = 1 << 15;
}

/// The sample_id trailer of a non-sample kernel record (fields absent from the event's
/// sample_type are `None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct SampleId {
    /// Process id (PERF_SAMPLE_TID).
    pub pid: Option<u32>,
    /// Thread id (PERF_SAMPLE_TID).
    pub tid: Option<u32>,
    /// Timestamp (PERF_SAMPLE_TIME).
    pub time: Option<u64>,
    /// Event instance id (PERF_SAMPLE_ID, else PERF_SAMPLE_IDENTIFIER).
    pub id: Option<u64>,
    /// Stream id (PERF_SAMPLE_STREAM_ID).
    pub stream_id: Option<u64>,
    /// CPU (PERF_SAMPLE_CPU).
    pub cpu: Option<u32>,
    /// PERF_SAMPLE_IDENTIFIER where it differs from `id` (the kernel writes the same
    /// value in both; libipt's side-band tests do not, and its tools print both).
    /// `None`: the identifier is `id`.
    pub identifier: Option<u64>,
}

impl SampleId {
    fn parse(c: &mut Cursor<'_>, st: SampleType) -> Result<SampleId> {
        let mut s = SampleId::default();
        if st.has(SampleType::TID) {
            s.pid = Some(c.u32()?);
            s.tid = Some(c.u32()?);
        }
        if st.has(SampleType::TIME) {
            s.time = Some(c.u64()?);
        }
        if st.has(SampleType::ID) {
            s.id = Some(c.u64()?);
        }
        if st.has(SampleType::STREAM_ID) {
            s.stream_id = Some(c.u64()?);
        }
        if st.has(SampleType::CPU) {
            s.cpu = Some(c.u32()?);
            c.u32()?;
        }
        if st.has(SampleType::IDENTIFIER) {
            let v = c.u64()?;
            match s.id {
                Some(id) if id != v => s.identifier = Some(v),
                _ => s.id = Some(v),
            }
        }
        Ok(s)
    }

    fn encode(&self, st: SampleType, record: &'static str, out: &mut Vec<u8>) -> Result<()> {
        let need = |v: Option<u64>, field| {
            v.ok_or(Error::new(0, ErrorKind::MissingField { record, field }))
        };
        if st.has(SampleType::TID) {
            out.put_u32(need(self.pid.map(u64::from), "pid")? as u32);
            out.put_u32(need(self.tid.map(u64::from), "tid")? as u32);
        }
        if st.has(SampleType::TIME) {
            out.put_u64(need(self.time, "time")?);
        }
        if st.has(SampleType::ID) {
            out.put_u64(need(self.id, "id")?);
        }
        if st.has(SampleType::STREAM_ID) {
            out.put_u64(need(self.stream_id, "stream_id")?);
        }
        if st.has(SampleType::CPU) {
            out.put_u32(need(self.cpu.map(u64::from), "cpu")? as u32);
            out.put_u32(0);
        }
        if st.has(SampleType::IDENTIFIER) {
            out.put_u64(need(self.identifier.or(self.id), "id")?);
        }
        Ok(())
    }
}

/// A build id as MMAP2 and BUILD_ID records store it (up to 20 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BuildId {
    /// Its length (at most 20 in use; the stored byte is kept as it was).
    pub len: u8,
    /// The bytes (the first `len` are the id).
    pub bytes: [u8; 20],
}

impl BuildId {
    /// A build id of `id` (at most 20 bytes are kept).
    pub fn new(id: &[u8]) -> Self {
        let mut bytes = [0; 20];
        let n = id.len().min(20);
        bytes[..n].copy_from_slice(&id[..n]);
        BuildId {
            len: n as u8,
            bytes,
        }
    }

    /// The id's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..(self.len as usize).min(20)]
    }
}

impl std::fmt::Debug for BuildId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// PERF_RECORD_MMAP: an executable (or, with MMAP_DATA, data) mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Mmap<'a> {
    /// Header misc (cpumode, MMAP_DATA).
    pub misc: u16,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Start address.
    pub start: u64,
    /// Length.
    pub len: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// The mapped file (or `//anon`, `[vdso]`, …).
    pub filename: CStr<'a>,
    /// The trailer.
    pub sample_id: SampleId,
}

/// How an MMAP2 record identifies its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mmap2File {
    /// Device and inode (the classic form).
    Inode {
        /// Device major.
        maj: u32,
        /// Device minor.
        min: u32,
        /// Inode.
        ino: u64,
        /// Inode generation.
        ino_generation: u64,
    },
    /// The build id (misc has MMAP_BUILD_ID; attr.build_id was set).
    BuildId(BuildId),
}

impl Default for Mmap2File {
    fn default() -> Self {
        Mmap2File::Inode {
            maj: 0,
            min: 0,
            ino: 0,
            ino_generation: 0,
        }
    }
}

/// PERF_RECORD_MMAP2: a mapping with its file's identity and protection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Mmap2<'a> {
    /// Header misc (cpumode, MMAP_DATA; MMAP_BUILD_ID follows `file`).
    pub misc: u16,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Start address.
    pub start: u64,
    /// Length.
    pub len: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// The file's identity.
    pub file: Mmap2File,
    /// PROT_* bits.
    pub prot: u32,
    /// MAP_* bits.
    pub flags: u32,
    /// The mapped file.
    pub filename: CStr<'a>,
    /// The trailer.
    pub sample_id: SampleId,
}

/// PERF_RECORD_COMM: a thread's name (at exec when misc has COMM_EXEC).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Comm<'a> {
    /// Header misc (COMM_EXEC).
    pub misc: u16,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// The name (at most 16 bytes from the kernel).
    pub comm: CStr<'a>,
    /// The trailer.
    pub sample_id: SampleId,
}

impl Comm<'_> {
    /// Whether the name changed because of an exec.
    pub fn is_exec(&self) -> bool {
        self.misc & misc::COMM_EXEC != 0
    }
}

/// PERF_RECORD_FORK and PERF_RECORD_EXIT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Task {
    /// Header misc.
    pub misc: u16,
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Thread id.
    pub tid: u32,
    /// Parent thread id.
    pub ptid: u32,
    /// Timestamp.
    pub time: u64,
    /// The trailer.
    pub sample_id: SampleId,
}

/// PERF_RECORD_LOST: records the kernel dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Lost {
    /// Header misc.
    pub misc: u16,
    /// The event's id.
    pub id: u64,
    /// How many were lost.
    pub lost: u64,
    /// The trailer.
    pub sample_id: SampleId,
}

/// PERF_RECORD_LOST_SAMPLES: samples the kernel dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LostSamples {
    /// Header misc.
    pub misc: u16,
    /// How many were lost.
    pub lost: u64,
    /// The trailer.
    pub sample_id: SampleId,
}

/// PERF_RECORD_THROTTLE and PERF_RECORD_UNTHROTTLE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Throttle {
    /// Header misc.
    pub misc: u16,
    /// Timestamp.
    pub time: u64,
    /// The event's id.
    pub id: u64,
    /// Its stream id.
    pub stream_id: u64,
    /// The trailer.
    pub sample_id: SampleId,
}

/// `PERF_AUX_FLAG_*` bits of an AUX record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct AuxFlags(pub u64);

#[allow(missing_docs)]
impl AuxFlags {
    pub const TRUNCATED: u64 = 0x01;
    pub const OVERWRITE: u64 = 0x02;
    pub const PARTIAL: u64 = 0x04;
    pub const COLLISION: u64 = 0x08;
    pub const PMU_FORMAT_TYPE_MASK: u64 = 0xff00;

    /// The record was truncated to fit the buffer: AUX data was lost.
    pub fn truncated(self) -> bool {
        self.0 & Self::TRUNCATED != 0
    }
    /// A snapshot from overwrite mode.
    pub fn overwrite(self) -> bool {
        self.0 & Self::OVERWRITE != 0
    }
    /// The record contains gaps.
    pub fn partial(self) -> bool {
        self.0 & Self::PARTIAL != 0
    }
    /// The sample collided with another.
    pub fn collision(self) -> bool {
        self.0 & Self::COLLISION != 0
    }
}

/// PERF_RECORD_AUX: the kernel wrote AUX data (`aux_offset`, `aux_size` in the AUX area).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Aux {
    /// Header misc.
    pub misc: u16,
    /// Offset in the AUX area.
    pub aux_offset: u64,
    /// Size written.
    pub aux_size: u64,
    /// Truncated / overwrite / partial / collision.
    pub flags: AuxFlags,
    /// The trailer.
    pub sample_id: SampleId,
}

/// PERF_RECORD_ITRACE_START: tracing started for a thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ItraceStart {
    /// Header misc.
    pub misc: u16,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// The trailer.
    pub sample_id: SampleId,
}

/// PERF_RECORD_SWITCH: the traced thread was switched in or out (misc SWITCH_OUT,
/// SWITCH_OUT_PREEMPT).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Switch {
    /// Header misc.
    pub misc: u16,
    /// The trailer.
    pub sample_id: SampleId,
}

/// PERF_RECORD_SWITCH_CPU_WIDE: a context switch on a traced CPU, with the other side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SwitchCpuWide {
    /// Header misc (SWITCH_OUT, SWITCH_OUT_PREEMPT).
    pub misc: u16,
    /// Next (switch out) or previous (switch in) process id.
    pub next_prev_pid: u32,
    /// Next or previous thread id.
    pub next_prev_tid: u32,
    /// The trailer.
    pub sample_id: SampleId,
}

impl Switch {
    /// Switched out (else in).
    pub fn is_out(&self) -> bool {
        self.misc & misc::SWITCH_OUT != 0
    }
    /// Switched out while runnable (preempted).
    pub fn is_preempt(&self) -> bool {
        self.misc & misc::SWITCH_OUT_PREEMPT != 0
    }
}

impl SwitchCpuWide {
    /// Switched out (else in).
    pub fn is_out(&self) -> bool {
        self.misc & misc::SWITCH_OUT != 0
    }
    /// Switched out while runnable (preempted).
    pub fn is_preempt(&self) -> bool {
        self.misc & misc::SWITCH_OUT_PREEMPT != 0
    }
}

/// PERF_RECORD_AUX_OUTPUT_HW_ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AuxOutputHwId {
    /// Header misc.
    pub misc: u16,
    /// The hardware id.
    pub hw_id: u64,
    /// The trailer.
    pub sample_id: SampleId,
}

/// A sample's branch stack (PERF_SAMPLE_BRANCH_STACK).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct BranchStack<'a> {
    /// hw_idx, when the event has PERF_SAMPLE_BRANCH_HW_INDEX.
    pub hw_idx: Option<u64>,
    /// The entries: 24 bytes each (from, to, flags).
    pub entries: &'a [u8],
}

impl BranchStack<'_> {
    /// (from, to, flags) of every entry.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.entries.chunks_exact(24).map(|e| {
            let v = U64s::new(e);
            (
                v.get(0).unwrap_or(0),
                v.get(1).unwrap_or(0),
                v.get(2).unwrap_or(0),
            )
        })
    }
}

/// Sampled registers (PERF_SAMPLE_REGS_USER / REGS_INTR).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Regs<'a> {
    /// The ABI (0: none, and no registers follow).
    pub abi: u64,
    /// The registers of the event's mask, in bit order.
    pub regs: U64s<'a>,
}

/// A sampled user stack (PERF_SAMPLE_STACK_USER).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct StackUser<'a> {
    /// The dumped bytes (empty: none, and no dyn_size follows).
    pub data: &'a [u8],
    /// The bytes of it that are valid.
    pub dyn_size: u64,
}

/// PERF_RECORD_SAMPLE, decoded by its event's sample_type (fields absent from it are
/// `None`). Variable parts are views into the file.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Sample<'a> {
    /// Header misc (cpumode, EXACT_IP).
    pub misc: u16,
    pub id: Option<u64>,
    pub ip: Option<u64>,
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub time: Option<u64>,
    pub addr: Option<u64>,
    pub stream_id: Option<u64>,
    pub cpu: Option<u32>,
    pub period: Option<u64>,
    /// The read values as laid out by the event's read_format.
    pub read: Option<U64s<'a>>,
    /// The callchain's addresses.
    pub callchain: Option<U64s<'a>>,
    /// Raw data (its 4-byte size excluded; 4 + its length is a multiple of 8).
    pub raw: Option<&'a [u8]>,
    pub branch_stack: Option<BranchStack<'a>>,
    pub regs_user: Option<Regs<'a>>,
    pub stack_user: Option<StackUser<'a>>,
    /// PERF_SAMPLE_WEIGHT or WEIGHT_STRUCT (one u64 either way).
    pub weight: Option<u64>,
    pub data_src: Option<u64>,
    pub transaction: Option<u64>,
    pub regs_intr: Option<Regs<'a>>,
    pub phys_addr: Option<u64>,
    pub cgroup: Option<u64>,
    pub data_page_size: Option<u64>,
    pub code_page_size: Option<u64>,
    /// AUX area sample data.
    pub aux: Option<&'a [u8]>,
}

/// AUXTRACE_INFO: what the AUX area traces and how to decode it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuxtraceInfo<'a> {
    /// The auxtrace type ([`auxtrace_type`]).
    pub kind: u32,
    /// The type's private data.
    pub private: AuxtracePrivate<'a>,
}

/// `PERF_AUXTRACE_*` types of AUXTRACE_INFO.
#[allow(missing_docs)]
pub mod auxtrace_type {
    pub const UNKNOWN: u32 = 0;
    pub const INTEL_PT: u32 = 1;
    pub const INTEL_BTS: u32 = 2;
    pub const CS_ETM: u32 = 3;
    pub const ARM_SPE: u32 = 4;
    pub const S390_CPUMSF: u32 = 5;
    pub const HISI_PTT: u32 = 6;
}

/// The private part of AUXTRACE_INFO.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuxtracePrivate<'a> {
    /// Intel PT's fields, typed.
    IntelPt(IntelPtInfo),
    /// Another tracer's u64 words.
    Raw(U64s<'a>),
}

/// AUXTRACE: a piece of AUX area data, which follows the 48-byte record in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Auxtrace<'a> {
    /// Offset of the data in the AUX area's stream (for snapshots: the head).
    pub offset: u64,
    /// The TSC when the data was copied out (perf record reads it with rdtsc). Writers of
    /// timed intel_pt recordings must fill it in: perf's decoder completes the trace's
    /// 7-byte TSC packets from it, and without it never gets a timestamp.
    pub reference: u64,
    /// The index of the mmap it came from.
    pub idx: u32,
    /// The traced thread (-1 as u32 for per-cpu recording).
    pub tid: u32,
    /// The CPU (-1 as u32 for per-thread recording).
    pub cpu: u32,
    /// The data (from the mapped file: not copied).
    pub data: &'a [u8],
}

/// AUXTRACE_ERROR: an error perf met while reading or decoding AUX data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AuxtraceError<'a> {
    /// PERF_AUXTRACE_ERROR_ITRACE (1) or _MAX.
    pub kind: u32,
    /// Decoder error code.
    pub code: u32,
    /// CPU.
    pub cpu: u32,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Format (1 adds time, 2 machine_pid and vcpu).
    pub fmt: u32,
    /// IP.
    pub ip: u64,
    /// Time.
    pub time: u64,
    /// Message (64 bytes in the record).
    pub msg: CStr<'a>,
    /// (machine_pid, vcpu) when the record has them.
    pub machine: Option<(u32, u32)>,
}

/// One ID_INDEX entry: where an event id was opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct IdIndexEntry {
    /// The id.
    pub id: u64,
    /// The mmap index.
    pub idx: u64,
    /// The CPU (-1: any).
    pub cpu: u64,
    /// The thread (-1: any).
    pub tid: u64,
    /// (machine_pid, vcpu) of the extended form.
    pub machine: Option<(u64, u64)>,
}

/// THREAD_MAP entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ThreadMapEntry<'a> {
    /// Thread id.
    pub pid: u64,
    /// Its name (16 bytes in the record).
    pub comm: CStr<'a>,
}

/// CPU_MAP contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CpuMap {
    /// A list of CPUs.
    Cpus(Vec<u16>),
    /// A bitmap (`long_size` 4 or 8 bytes per word), as 64-bit words.
    Mask {
        /// 4 or 8.
        long_size: u16,
        /// The words.
        words: Vec<u64>,
    },
    /// A range, and whether the "any CPU" (-1) entry is present.
    Range {
        /// The any-CPU entry.
        any_cpu: bool,
        /// First CPU.
        start: u16,
        /// Last CPU.
        end: u16,
    },
}

/// TIME_CONV: how to turn TSC into perf time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TimeConv {
    /// time_shift.
    pub time_shift: u64,
    /// time_mult.
    pub time_mult: u64,
    /// time_zero.
    pub time_zero: u64,
    /// The fields newer perf writes (absent from 32-byte records).
    pub ext: Option<TimeConvExt>,
}

/// The extended fields of TIME_CONV.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TimeConvExt {
    /// time_cycles.
    pub time_cycles: u64,
    /// time_mask.
    pub time_mask: u64,
    /// cap_user_time_zero.
    pub cap_user_time_zero: bool,
    /// cap_user_time_short.
    pub cap_user_time_short: bool,
}

/// HEADER_BUILD_ID (pipe mode) and the BUILD_ID feature's entries: a DSO's build id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct BuildIdRecord<'a> {
    /// Header misc (cpumode; BUILD_ID_SIZE).
    pub misc: u16,
    /// Process id (-1 for the kernel).
    pub pid: i32,
    /// The build id.
    pub build_id: BuildId,
    /// The DSO's path.
    pub filename: CStr<'a>,
}

/// One record of a perf.data file.
// SAMPLE is the largest variant; boxing it would allocate per sample, where records are
// otherwise handed out without allocating.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Record<'a> {
    Mmap(Mmap<'a>),
    Mmap2(Mmap2<'a>),
    Comm(Comm<'a>),
    Fork(Task),
    Exit(Task),
    Lost(Lost),
    LostSamples(LostSamples),
    Throttle(Throttle),
    Unthrottle(Throttle),
    Sample(Sample<'a>),
    Aux(Aux),
    ItraceStart(ItraceStart),
    Switch(Switch),
    SwitchCpuWide(SwitchCpuWide),
    AuxOutputHwId(AuxOutputHwId),
    /// Pipe mode: an event's attr and ids.
    HeaderAttr {
        attr: EventAttr,
        ids: U64s<'a>,
    },
    /// Pipe mode: a tracepoint event type (deprecated).
    HeaderEventType {
        event_id: u64,
        name: CStr<'a>,
    },
    /// Pipe mode: tracing data (follows the record, padded to 8).
    HeaderTracingData {
        data: &'a [u8],
    },
    /// Pipe mode: a build id.
    HeaderBuildId(BuildIdRecord<'a>),
    /// Pipe mode: a header feature (`feature` number, its bytes as in the file header's
    /// section); [`Record::feature`] decodes it.
    HeaderFeature {
        feature: u64,
        data: &'a [u8],
    },
    /// Events before this one may be delivered in time order (see [`crate::ordered`]).
    FinishedRound,
    /// perf finished synthesizing the initial state.
    FinishedInit,
    IdIndex(Vec<IdIndexEntry>),
    AuxtraceInfo(AuxtraceInfo<'a>),
    Auxtrace(Auxtrace<'a>),
    AuxtraceError(AuxtraceError<'a>),
    ThreadMap(Vec<ThreadMapEntry<'a>>),
    CpuMap(CpuMap),
    TimeConv(TimeConv),
    /// Any other record, kept as it is (body after the 8-byte header, trailer included).
    Raw(RawRecord<'a>),
}

/// A record kept as bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RawRecord<'a> {
    /// Its type.
    pub ty: u32,
    /// Header misc.
    pub misc: u16,
    /// The bytes after the header.
    pub body: &'a [u8],
}

impl<'a> Record<'a> {
    /// The record type number.
    pub fn record_type(&self) -> u32 {
        use record_type::*;
        match self {
            Record::Mmap(_) => MMAP,
            Record::Mmap2(_) => MMAP2,
            Record::Comm(_) => COMM,
            Record::Fork(_) => FORK,
            Record::Exit(_) => EXIT,
            Record::Lost(_) => LOST,
            Record::LostSamples(_) => LOST_SAMPLES,
            Record::Throttle(_) => THROTTLE,
            Record::Unthrottle(_) => UNTHROTTLE,
            Record::Sample(_) => SAMPLE,
            Record::Aux(_) => AUX,
            Record::ItraceStart(_) => ITRACE_START,
            Record::Switch(_) => SWITCH,
            Record::SwitchCpuWide(_) => SWITCH_CPU_WIDE,
            Record::AuxOutputHwId(_) => AUX_OUTPUT_HW_ID,
            Record::HeaderAttr { .. } => HEADER_ATTR,
            Record::HeaderEventType { .. } => HEADER_EVENT_TYPE,
            Record::HeaderTracingData { .. } => HEADER_TRACING_DATA,
            Record::HeaderBuildId(_) => HEADER_BUILD_ID,
            Record::HeaderFeature { .. } => HEADER_FEATURE,
            Record::FinishedRound => FINISHED_ROUND,
            Record::FinishedInit => FINISHED_INIT,
            Record::IdIndex(_) => ID_INDEX,
            Record::AuxtraceInfo(_) => AUXTRACE_INFO,
            Record::Auxtrace(_) => AUXTRACE,
            Record::AuxtraceError(_) => AUXTRACE_ERROR,
            Record::ThreadMap(_) => THREAD_MAP,
            Record::CpuMap(_) => CPU_MAP,
            Record::TimeConv(_) => TIME_CONV,
            Record::Raw(r) => r.ty,
        }
    }

    /// perf's name of the record's type.
    pub fn name(&self) -> &'static str {
        record_type::name(self.record_type())
    }

    /// The header's misc field.
    pub fn misc(&self) -> u16 {
        match self {
            Record::Mmap(r) => r.misc,
            Record::Mmap2(r) => r.misc,
            Record::Comm(r) => r.misc,
            Record::Fork(r) | Record::Exit(r) => r.misc,
            Record::Lost(r) => r.misc,
            Record::LostSamples(r) => r.misc,
            Record::Throttle(r) | Record::Unthrottle(r) => r.misc,
            Record::Sample(r) => r.misc,
            Record::Aux(r) => r.misc,
            Record::ItraceStart(r) => r.misc,
            Record::Switch(r) => r.misc,
            Record::SwitchCpuWide(r) => r.misc,
            Record::AuxOutputHwId(r) => r.misc,
            Record::HeaderBuildId(r) => r.misc,
            Record::Raw(r) => r.misc,
            _ => 0,
        }
    }

    /// The sample_id trailer of a non-sample kernel record.
    pub fn sample_id(&self) -> Option<&SampleId> {
        Some(match self {
            Record::Mmap(r) => &r.sample_id,
            Record::Mmap2(r) => &r.sample_id,
            Record::Comm(r) => &r.sample_id,
            Record::Fork(r) | Record::Exit(r) => &r.sample_id,
            Record::Lost(r) => &r.sample_id,
            Record::LostSamples(r) => &r.sample_id,
            Record::Throttle(r) | Record::Unthrottle(r) => &r.sample_id,
            Record::Aux(r) => &r.sample_id,
            Record::ItraceStart(r) => &r.sample_id,
            Record::Switch(r) => &r.sample_id,
            Record::SwitchCpuWide(r) => &r.sample_id,
            Record::AuxOutputHwId(r) => &r.sample_id,
            _ => return None,
        })
    }

    /// The record's timestamp as perf orders by it: a sample's time, another kernel
    /// record's trailer time.
    pub fn time(&self) -> Option<u64> {
        match self {
            Record::Sample(s) => s.time,
            r => r.sample_id().and_then(|s| s.time),
        }
    }

    /// The CPU, from a sample or a trailer (or AUXTRACE's cpu field).
    pub fn cpu(&self) -> Option<u32> {
        match self {
            Record::Sample(s) => s.cpu,
            Record::Auxtrace(a) => Some(a.cpu),
            r => r.sample_id().and_then(|s| s.cpu),
        }
    }

    /// The event instance id, from a sample or a trailer.
    pub fn id(&self) -> Option<u64> {
        match self {
            Record::Sample(s) => s.id,
            r => r.sample_id().and_then(|s| s.id),
        }
    }

    /// Whether this is one of perf's own (user) records, which perf never time-orders.
    pub fn is_user(&self) -> bool {
        self.record_type() >= record_type::USER_TYPE_START
    }

    /// A HEADER_FEATURE's decoded feature.
    pub fn feature(&self) -> Option<Result<Feature>> {
        match self {
            Record::HeaderFeature { feature, data } => {
                Some(Feature::parse(*feature as u16, data, 0, None))
            }
            _ => None,
        }
    }
}

/// The size of AUXTRACE's record (without its data).
pub const AUXTRACE_RECORD_SIZE: u16 = 48;

/// Bytes that follow a record's header-counted bytes (AUXTRACE data, tracing data):
/// perf skips them after the record.
pub(crate) fn trailing_data_size(ty: u32, body: &[u8]) -> u64 {
    let word = |at: usize, n: usize| -> u64 {
        body.get(at..at + n).map_or(0, |b| {
            let mut a = [0u8; 8];
            a[..n].copy_from_slice(b);
            u64::from_le_bytes(a)
        })
    };
    match ty {
        record_type::AUXTRACE => word(0, 8),
        record_type::HEADER_TRACING_DATA => align8(word(0, 4) as usize) as u64,
        _ => 0,
    }
}

fn too_short(record: &'static str, size: usize, need: usize, offset: u64) -> Error {
    Error::new(
        offset,
        ErrorKind::RecordTooShort {
            record,
            size: size as u64 + 8,
            need: need as u64 + 8,
        },
    )
}

/// Decodes one record: `ty`/`misc` from its header, `body` the bytes after the header
/// (header size - 8), `extra` the data that follows AUXTRACE and TRACING_DATA records,
/// `offset` the record's file offset, `events` the file's events (for trailers and
/// samples).
pub fn parse_record<'a>(
    ty: u32,
    misc: u16,
    body: &'a [u8],
    extra: &'a [u8],
    offset: u64,
    events: &EventTable,
) -> Result<Record<'a>> {
    use record_type as t;
    let name = t::name(ty);
    if ty < t::USER_TYPE_START {
        if !matches!(
            ty,
            t::MMAP
                | t::MMAP2
                | t::COMM
                | t::FORK
                | t::EXIT
                | t::LOST
                | t::LOST_SAMPLES
                | t::THROTTLE
                | t::UNTHROTTLE
                | t::SAMPLE
                | t::AUX
                | t::ITRACE_START
                | t::SWITCH
                | t::SWITCH_CPU_WIDE
                | t::AUX_OUTPUT_HW_ID
        ) {
            return Ok(Record::Raw(RawRecord { ty, misc, body }));
        }
        let ev = events.event_for(ty, body, offset)?;
        let attr = &events.events()[ev].attr;
        if ty == t::SAMPLE {
            return parse_sample(misc, body, offset, attr).map(Record::Sample);
        }
        let (fields, sample_id) = if attr.sample_id_all() {
            let st = attr.sample_type;
            let n = st.id_trailer_size();
            // perf reads the trailer as the last whole u64 words (a body whose size is
            // not a multiple of 8 has its odd bytes before nothing).
            let whole = body.len() / 8 * 8;
            if whole < n {
                return Err(too_short(name, body.len(), n, offset));
            }
            let (f, tr) = body[..whole].split_at(whole - n);
            let mut c = Cursor::new(tr, offset + 8 + f.len() as u64, "sample_id trailer");
            (f, SampleId::parse(&mut c, st)?)
        } else {
            (body, SampleId::default())
        };
        let mut c = Cursor::new(fields, offset + 8, name);
        let short = |_| too_short(name, body.len(), fixed_size(ty), offset);
        return parse_kernel(ty, misc, &mut c, sample_id).map_err(short);
    }
    let mut c = Cursor::new(body, offset + 8, name);
    let short = |e: Error| match e.kind {
        ErrorKind::Truncated { .. } => too_short(name, body.len(), fixed_size(ty), offset),
        _ => e,
    };
    parse_user(ty, misc, &mut c, extra, offset).map_err(short)
}

/// The fixed part of a record type's body (for error messages).
fn fixed_size(ty: u32) -> usize {
    use record_type as t;
    match ty {
        t::MMAP => 32,
        t::MMAP2 => 64,
        t::COMM => 8,
        t::FORK | t::EXIT => 24,
        t::LOST | t::AUX_OUTPUT_HW_ID => 16,
        t::LOST_SAMPLES => 8,
        t::THROTTLE | t::UNTHROTTLE | t::AUX => 24,
        t::ITRACE_START | t::SWITCH_CPU_WIDE => 8,
        t::AUXTRACE => 40,
        t::AUXTRACE_INFO => 8,
        t::AUXTRACE_ERROR => 104,
        t::TIME_CONV => 24,
        t::ID_INDEX | t::THREAD_MAP | t::HEADER_FEATURE | t::HEADER_TRACING_DATA => 8,
        t::HEADER_EVENT_TYPE => 72,
        t::HEADER_BUILD_ID => 28,
        t::HEADER_ATTR => 64,
        t::CPU_MAP => 2,
        _ => 0,
    }
}

fn parse_kernel<'a>(
    ty: u32,
    misc: u16,
    c: &mut Cursor<'a>,
    sample_id: SampleId,
) -> Result<Record<'a>> {
    use record_type as t;
    Ok(match ty {
        t::MMAP => Record::Mmap(Mmap {
            misc,
            pid: c.u32()?,
            tid: c.u32()?,
            start: c.u64()?,
            len: c.u64()?,
            pgoff: c.u64()?,
            filename: CStr(until_nul(c.rest())),
            sample_id,
        }),
        t::MMAP2 => {
            let (pid, tid, start, len, pgoff) = (c.u32()?, c.u32()?, c.u64()?, c.u64()?, c.u64()?);
            let file = if misc & misc::MMAP_BUILD_ID != 0 {
                let len = c.u8()?;
                c.bytes(3)?;
                Mmap2File::BuildId(BuildId {
                    len,
                    bytes: c.array()?,
                })
            } else {
                Mmap2File::Inode {
                    maj: c.u32()?,
                    min: c.u32()?,
                    ino: c.u64()?,
                    ino_generation: c.u64()?,
                }
            };
            Record::Mmap2(Mmap2 {
                misc,
                pid,
                tid,
                start,
                len,
                pgoff,
                file,
                prot: c.u32()?,
                flags: c.u32()?,
                filename: CStr(until_nul(c.rest())),
                sample_id,
            })
        }
        t::COMM => Record::Comm(Comm {
            misc,
            pid: c.u32()?,
            tid: c.u32()?,
            comm: CStr(until_nul(c.rest())),
            sample_id,
        }),
        t::FORK | t::EXIT => {
            let task = Task {
                misc,
                pid: c.u32()?,
                ppid: c.u32()?,
                tid: c.u32()?,
                ptid: c.u32()?,
                time: c.u64()?,
                sample_id,
            };
            if ty == t::FORK {
                Record::Fork(task)
            } else {
                Record::Exit(task)
            }
        }
        t::LOST => Record::Lost(Lost {
            misc,
            id: c.u64()?,
            lost: c.u64()?,
            sample_id,
        }),
        t::LOST_SAMPLES => Record::LostSamples(LostSamples {
            misc,
            lost: c.u64()?,
            sample_id,
        }),
        t::THROTTLE | t::UNTHROTTLE => {
            let th = Throttle {
                misc,
                time: c.u64()?,
                id: c.u64()?,
                stream_id: c.u64()?,
                sample_id,
            };
            if ty == t::THROTTLE {
                Record::Throttle(th)
            } else {
                Record::Unthrottle(th)
            }
        }
        t::AUX => Record::Aux(Aux {
            misc,
            aux_offset: c.u64()?,
            aux_size: c.u64()?,
            flags: AuxFlags(c.u64()?),
            sample_id,
        }),
        t::ITRACE_START => Record::ItraceStart(ItraceStart {
            misc,
            pid: c.u32()?,
            tid: c.u32()?,
            sample_id,
        }),
        t::SWITCH => Record::Switch(Switch { misc, sample_id }),
        t::SWITCH_CPU_WIDE => Record::SwitchCpuWide(SwitchCpuWide {
            misc,
            next_prev_pid: c.u32()?,
            next_prev_tid: c.u32()?,
            sample_id,
        }),
        t::AUX_OUTPUT_HW_ID => Record::AuxOutputHwId(AuxOutputHwId {
            misc,
            hw_id: c.u64()?,
            sample_id,
        }),
        _ => unreachable!("parse_kernel is called for typed kernel records only"),
    })
}

fn parse_regs<'a>(c: &mut Cursor<'a>, mask: u64) -> Result<Regs<'a>> {
    let abi = c.u64()?;
    let regs = if abi != 0 {
        U64s::new(c.bytes(mask.count_ones() as usize * 8)?)
    } else {
        U64s::default()
    };
    Ok(Regs { abi, regs })
}

/// Bytes of a sample's read values under `rf`, given the first word (nr for groups).
fn read_size(rf: u64, first: u64, c: &Cursor<'_>) -> Result<u64> {
    let per = 1 + (rf & read_format::ID != 0) as u64 + (rf & read_format::LOST != 0) as u64;
    let times = (rf & read_format::TOTAL_TIME_ENABLED != 0) as u64
        + (rf & read_format::TOTAL_TIME_RUNNING != 0) as u64;
    if rf & read_format::GROUP != 0 {
        let room = c.remaining() as u64;
        let values = first.checked_mul(per * 8).filter(|&n| n <= room);
        match values {
            Some(v) => Ok(8 + times * 8 + v),
            None => Err(Error::new(
                c.offset(),
                ErrorKind::CountOverflow {
                    what: "SAMPLE read group",
                    count: first,
                    room,
                },
            )),
        }
    } else {
        Ok((times + per) * 8)
    }
}

fn parse_sample<'a>(
    misc: u16,
    body: &'a [u8],
    offset: u64,
    attr: &EventAttr,
) -> Result<Sample<'a>> {
    let st = attr.sample_type;
    let mut c = Cursor::new(body, offset + 8, "SAMPLE");
    let mut s = Sample {
        misc,
        ..Default::default()
    };
    let opt = |c: &mut Cursor<'a>, bit: u64| -> Result<Option<u64>> {
        if st.has(bit) {
            Ok(Some(c.u64()?))
        } else {
            Ok(None)
        }
    };
    if st.has(SampleType::IDENTIFIER) {
        s.id = Some(c.u64()?);
    }
    s.ip = opt(&mut c, SampleType::IP)?;
    if st.has(SampleType::TID) {
        s.pid = Some(c.u32()?);
        s.tid = Some(c.u32()?);
    }
    s.time = opt(&mut c, SampleType::TIME)?;
    s.addr = opt(&mut c, SampleType::ADDR)?;
    if st.has(SampleType::ID) {
        s.id = Some(c.u64()?);
    }
    s.stream_id = opt(&mut c, SampleType::STREAM_ID)?;
    if st.has(SampleType::CPU) {
        s.cpu = Some(c.u32()?);
        c.u32()?;
    }
    s.period = opt(&mut c, SampleType::PERIOD)?;
    if st.has(SampleType::READ) {
        let first = c.clone().u64()?;
        let n = read_size(attr.read_format, first, &c)?;
        s.read = Some(U64s::new(c.bytes64(n)?));
    }
    if st.has(SampleType::CALLCHAIN) {
        let nr = c.u64()?;
        let n = c.count(nr, 8, "SAMPLE callchain")?;
        s.callchain = Some(U64s::new(c.bytes(n * 8)?));
    }
    if st.has(SampleType::RAW) {
        let n = c.u32()?;
        s.raw = Some(c.bytes64(n as u64)?);
    }
    if st.has(SampleType::BRANCH_STACK) {
        let nr = c.u64()?;
        let hw_idx = if attr.branch_sample_type & BRANCH_HW_INDEX != 0 {
            Some(c.u64()?)
        } else {
            None
        };
        let n = c.count(nr, 24, "SAMPLE branch stack")?;
        s.branch_stack = Some(BranchStack {
            hw_idx,
            entries: c.bytes(n * 24)?,
        });
    }
    if st.has(SampleType::REGS_USER) {
        s.regs_user = Some(parse_regs(&mut c, attr.sample_regs_user)?);
    }
    if st.has(SampleType::STACK_USER) {
        let n = c.u64()?;
        s.stack_user = Some(if n == 0 {
            StackUser::default()
        } else {
            let data = c.bytes64(n)?;
            StackUser {
                data,
                dyn_size: c.u64()?,
            }
        });
    }
    if st.0 & (SampleType::WEIGHT | SampleType::WEIGHT_STRUCT) != 0 {
        s.weight = Some(c.u64()?);
    }
    s.data_src = opt(&mut c, SampleType::DATA_SRC)?;
    s.transaction = opt(&mut c, SampleType::TRANSACTION)?;
    if st.has(SampleType::REGS_INTR) {
        s.regs_intr = Some(parse_regs(&mut c, attr.sample_regs_intr)?);
    }
    s.phys_addr = opt(&mut c, SampleType::PHYS_ADDR)?;
    s.cgroup = opt(&mut c, SampleType::CGROUP)?;
    s.data_page_size = opt(&mut c, SampleType::DATA_PAGE_SIZE)?;
    s.code_page_size = opt(&mut c, SampleType::CODE_PAGE_SIZE)?;
    if st.has(SampleType::AUX) {
        let n = c.u64()?;
        s.aux = Some(c.bytes64(n)?);
    }
    Ok(s)
}

fn parse_user<'a>(
    ty: u32,
    misc: u16,
    c: &mut Cursor<'a>,
    extra: &'a [u8],
    offset: u64,
) -> Result<Record<'a>> {
    use record_type as t;
    Ok(match ty {
        t::HEADER_ATTR => {
            let body = c.rest();
            let attr = EventAttr::parse(body, offset + 8)?;
            let ids = &body[attr.stored_size().min(body.len())..];
            Record::HeaderAttr {
                attr,
                ids: U64s::new(ids),
            }
        }
        t::HEADER_EVENT_TYPE => Record::HeaderEventType {
            event_id: c.u64()?,
            name: CStr(until_nul(c.bytes(64)?)),
        },
        t::HEADER_TRACING_DATA => {
            let size = c.u32()?;
            c.u32()?;
            Record::HeaderTracingData {
                data: &extra[..(size as usize).min(extra.len())],
            }
        }
        t::HEADER_BUILD_ID => Record::HeaderBuildId(parse_build_id(misc, c)?),
        t::HEADER_FEATURE => Record::HeaderFeature {
            feature: c.u64()?,
            data: c.rest(),
        },
        t::FINISHED_ROUND => Record::FinishedRound,
        t::FINISHED_INIT => Record::FinishedInit,
        t::ID_INDEX => {
            let nr = c.u64()?;
            let room = c.remaining() as u64;
            let n = c.count(nr, 32, "ID_INDEX")?;
            let extended = nr.checked_mul(48).is_some_and(|need| need <= room);
            let mut entries = Vec::with_capacity(n);
            for _ in 0..n {
                entries.push(IdIndexEntry {
                    id: c.u64()?,
                    idx: c.u64()?,
                    cpu: c.u64()?,
                    tid: c.u64()?,
                    machine: None,
                });
            }
            if extended {
                for e in &mut entries {
                    e.machine = Some((c.u64()?, c.u64()?));
                }
            }
            Record::IdIndex(entries)
        }
        t::AUXTRACE_INFO => {
            let kind = c.u32()?;
            c.u32()?;
            let priv_start = c.offset();
            let words = c.rest();
            let private = if kind == auxtrace_type::INTEL_PT {
                AuxtracePrivate::IntelPt(IntelPtInfo::parse(words, priv_start)?)
            } else {
                AuxtracePrivate::Raw(U64s::new(words))
            };
            Record::AuxtraceInfo(AuxtraceInfo { kind, private })
        }
        t::AUXTRACE => {
            let size = c.u64()?;
            let a = Auxtrace {
                offset: c.u64()?,
                reference: c.u64()?,
                idx: c.u32()?,
                tid: c.u32()?,
                cpu: c.u32()?,
                data: &extra[..(size.min(extra.len() as u64)) as usize],
            };
            c.u32()?;
            Record::Auxtrace(a)
        }
        t::AUXTRACE_ERROR => {
            let mut e = AuxtraceError {
                kind: c.u32()?,
                code: c.u32()?,
                cpu: c.u32()?,
                pid: c.u32()?,
                tid: c.u32()?,
                fmt: c.u32()?,
                ip: c.u64()?,
                time: c.u64()?,
                msg: CStr(until_nul(c.bytes(64)?)),
                machine: None,
            };
            if c.remaining() >= 8 {
                e.machine = Some((c.u32()?, c.u32()?));
            }
            Record::AuxtraceError(e)
        }
        t::THREAD_MAP => {
            let nr = c.u64()?;
            let n = c.count(nr, 24, "THREAD_MAP")?;
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(ThreadMapEntry {
                    pid: c.u64()?,
                    comm: CStr(until_nul(c.bytes(16)?)),
                });
            }
            Record::ThreadMap(v)
        }
        t::CPU_MAP => Record::CpuMap(parse_cpu_map(c)?),
        t::TIME_CONV => {
            let (time_shift, time_mult, time_zero) = (c.u64()?, c.u64()?, c.u64()?);
            let ext = if c.remaining() >= 24 {
                let (time_cycles, time_mask) = (c.u64()?, c.u64()?);
                let b = c.array::<8>()?;
                Some(TimeConvExt {
                    time_cycles,
                    time_mask,
                    cap_user_time_zero: b[0] != 0,
                    cap_user_time_short: b[1] != 0,
                })
            } else {
                None
            };
            Record::TimeConv(TimeConv {
                time_shift,
                time_mult,
                time_zero,
                ext,
            })
        }
        _ => Record::Raw(RawRecord {
            ty,
            misc,
            body: c.rest(),
        }),
    })
}

pub(crate) fn parse_build_id<'a>(misc: u16, c: &mut Cursor<'a>) -> Result<BuildIdRecord<'a>> {
    let pid = c.u32()? as i32;
    let bytes: [u8; 20] = c.array()?;
    let size = c.u8()?;
    c.bytes(3)?;
    let len = if misc & misc::BUILD_ID_SIZE != 0 {
        size
    } else {
        20
    };
    Ok(BuildIdRecord {
        misc,
        pid,
        build_id: BuildId { len, bytes },
        filename: CStr(until_nul(c.rest())),
    })
}

fn parse_cpu_map(c: &mut Cursor<'_>) -> Result<CpuMap> {
    Ok(match c.u16()? {
        0 => {
            let nr = c.u16()?;
            let n = c.count(nr as u64, 2, "CPU_MAP cpus")?;
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(c.u16()?);
            }
            CpuMap::Cpus(v)
        }
        1 => {
            let nr = c.u16()?;
            let long_size = c.u16()?;
            let words = match long_size {
                4 => {
                    let n = c.count(nr as u64, 4, "CPU_MAP mask")?;
                    (0..n)
                        .map(|_| c.u32().map(u64::from))
                        .collect::<Result<_>>()?
                }
                8 => {
                    c.bytes(4)?;
                    let n = c.count(nr as u64, 8, "CPU_MAP mask")?;
                    (0..n).map(|_| c.u64()).collect::<Result<_>>()?
                }
                _ => {
                    return Err(Error::new(
                        c.offset(),
                        ErrorKind::Invalid("CPU_MAP mask long_size is neither 4 nor 8"),
                    ))
                }
            };
            CpuMap::Mask { long_size, words }
        }
        2 => {
            let any_cpu = c.u8()? != 0;
            c.u8()?;
            CpuMap::Range {
                any_cpu,
                start: c.u16()?,
                end: c.u16()?,
            }
        }
        _ => {
            return Err(Error::new(
                c.offset(),
                ErrorKind::Invalid("CPU_MAP type is not 0 (cpus), 1 (mask) or 2 (range)"),
            ))
        }
    })
}

// ---------------------------------------------------------------------------------------
// Encoding

fn put_header(
    out: &mut Vec<u8>,
    start: usize,
    ty: u32,
    misc: u16,
    record: &'static str,
) -> Result<()> {
    let size = out.len() - start;
    if size > u16::MAX as usize {
        out.truncate(start);
        return Err(Error::new(
            0,
            ErrorKind::TooLarge {
                record,
                size: size as u64,
            },
        ));
    }
    out[start..start + 4].copy_from_slice(&ty.to_le_bytes());
    out[start + 4..start + 6].copy_from_slice(&misc.to_le_bytes());
    out[start + 6..start + 8].copy_from_slice(&(size as u16).to_le_bytes());
    Ok(())
}

/// The attr a record to be written belongs to: by its id, else the first event.
/// The attr a record of id `id` is written with: the event a reader finds, which
/// looks for the id where the first event's sample_type puts it (`sample`: in a
/// SAMPLE, else in the sample_id trailer) and takes the first event when that
/// layout has no id.
fn attr_for(events: &EventTable, id: Option<u64>, sample: bool) -> Result<&EventAttr> {
    let first = events.events().first().map(|e| &e.attr);
    let located = first.is_some_and(|a| {
        if sample {
            a.sample_type.id_pos().is_some()
        } else {
            a.sample_id_all() && a.sample_type.is_pos().is_some()
        }
    });
    let i = match id {
        Some(id) if id != 0 && located && events.events().len() > 1 => events
            .index_of_id(id)
            .ok_or(Error::new(0, ErrorKind::UnknownId { id }))?,
        _ => 0,
    };
    // A record a reader would refuse (or find under another event) is not written.
    if let (Some(f), Some(e)) = (first, events.events().get(i)) {
        let (a, b) = (f.sample_type, e.attr.sample_type);
        let same = if sample {
            a.id_pos() == b.id_pos()
        } else {
            a.is_pos() == b.is_pos() && f.sample_id_all() == e.attr.sample_id_all()
        };
        if !same {
            return Err(Error::new(
                0,
                ErrorKind::Invalid(
                    "the events disagree on where records carry their id (non matching sample_type)",
                ),
            ));
        }
    }
    events
        .events()
        .get(i)
        .map(|e| &e.attr)
        .ok_or(Error::new(0, ErrorKind::NoAttr))
}

/// Appends `r`'s bytes as perf writes them (header, fields, trailer; for AUXTRACE and
/// TRACING_DATA also their data, padded to 8) to `out`. Kernel records are encoded with
/// the sample_type of the event their id names (the first event when there is one id).
pub fn encode_record(r: &Record<'_>, events: &EventTable, out: &mut Vec<u8>) -> Result<()> {
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    let res = encode_body(r, events, out, start);
    if res.is_err() {
        out.truncate(start);
    }
    res
}

fn encode_body(r: &Record<'_>, events: &EventTable, out: &mut Vec<u8>, start: usize) -> Result<()> {
    let name = r.name();
    let ty = r.record_type();
    let mut misc = r.misc();
    // The trailer of kernel records.
    let trailer = |out: &mut Vec<u8>, sid: &SampleId| -> Result<()> {
        // The event a reader finds: by the identifier where it differs from the id
        // (the trailer's last word, where perf looks first).
        let attr = attr_for(events, sid.identifier.or(sid.id), false)?;
        if attr.sample_id_all() {
            sid.encode(attr.sample_type, name, out)?;
        }
        Ok(())
    };
    match r {
        Record::Mmap(m) => {
            out.put_u32(m.pid);
            out.put_u32(m.tid);
            out.put_u64(m.start);
            out.put_u64(m.len);
            out.put_u64(m.pgoff);
            out.put_cstr(m.filename.0, 8);
            trailer(out, &m.sample_id)?;
        }
        Record::Mmap2(m) => {
            out.put_u32(m.pid);
            out.put_u32(m.tid);
            out.put_u64(m.start);
            out.put_u64(m.len);
            out.put_u64(m.pgoff);
            match m.file {
                Mmap2File::Inode {
                    maj,
                    min,
                    ino,
                    ino_generation,
                } => {
                    misc &= !misc::MMAP_BUILD_ID;
                    out.put_u32(maj);
                    out.put_u32(min);
                    out.put_u64(ino);
                    out.put_u64(ino_generation);
                }
                Mmap2File::BuildId(b) => {
                    misc |= misc::MMAP_BUILD_ID;
                    out.push(b.len);
                    out.extend_from_slice(&[0; 3]);
                    out.extend_from_slice(&b.bytes);
                }
            }
            out.put_u32(m.prot);
            out.put_u32(m.flags);
            out.put_cstr(m.filename.0, 8);
            trailer(out, &m.sample_id)?;
        }
        Record::Comm(m) => {
            out.put_u32(m.pid);
            out.put_u32(m.tid);
            out.put_cstr(m.comm.0, 8);
            trailer(out, &m.sample_id)?;
        }
        Record::Fork(m) | Record::Exit(m) => {
            out.put_u32(m.pid);
            out.put_u32(m.ppid);
            out.put_u32(m.tid);
            out.put_u32(m.ptid);
            out.put_u64(m.time);
            trailer(out, &m.sample_id)?;
        }
        Record::Lost(m) => {
            out.put_u64(m.id);
            out.put_u64(m.lost);
            trailer(out, &m.sample_id)?;
        }
        Record::LostSamples(m) => {
            out.put_u64(m.lost);
            trailer(out, &m.sample_id)?;
        }
        Record::Throttle(m) | Record::Unthrottle(m) => {
            out.put_u64(m.time);
            out.put_u64(m.id);
            out.put_u64(m.stream_id);
            trailer(out, &m.sample_id)?;
        }
        Record::Aux(m) => {
            out.put_u64(m.aux_offset);
            out.put_u64(m.aux_size);
            out.put_u64(m.flags.0);
            trailer(out, &m.sample_id)?;
        }
        Record::ItraceStart(m) => {
            out.put_u32(m.pid);
            out.put_u32(m.tid);
            trailer(out, &m.sample_id)?;
        }
        Record::Switch(m) => trailer(out, &m.sample_id)?,
        Record::SwitchCpuWide(m) => {
            out.put_u32(m.next_prev_pid);
            out.put_u32(m.next_prev_tid);
            trailer(out, &m.sample_id)?;
        }
        Record::AuxOutputHwId(m) => {
            out.put_u64(m.hw_id);
            trailer(out, &m.sample_id)?;
        }
        Record::Sample(s) => encode_sample(s, attr_for(events, s.id, true)?, out)?,
        Record::HeaderAttr { attr, ids } => {
            out.extend_from_slice(&attr.to_bytes());
            out.extend_from_slice(ids.as_bytes());
        }
        Record::HeaderEventType { event_id, name } => {
            out.put_u64(*event_id);
            let mut n = [0u8; 64];
            let b = until_nul(name.0);
            let k = b.len().min(64);
            n[..k].copy_from_slice(&b[..k]);
            out.extend_from_slice(&n);
        }
        Record::HeaderTracingData { data } => {
            let size = u32::try_from(data.len()).map_err(|_| {
                Error::new(
                    0,
                    ErrorKind::TooLarge {
                        record: name,
                        size: data.len() as u64,
                    },
                )
            })?;
            out.put_u32(size);
            out.put_u32(0);
            put_header(out, start, ty, misc, name)?;
            out.extend_from_slice(data);
            out.resize(out.len() + align8(data.len()) - data.len(), 0);
            return Ok(());
        }
        Record::HeaderBuildId(b) => {
            misc = encode_build_id(b, out);
        }
        Record::HeaderFeature { feature, data } => {
            out.put_u64(*feature);
            out.extend_from_slice(data);
        }
        Record::FinishedRound | Record::FinishedInit => {}
        Record::IdIndex(v) => {
            out.put_u64(v.len() as u64);
            for e in v {
                out.put_u64(e.id);
                out.put_u64(e.idx);
                out.put_u64(e.cpu);
                out.put_u64(e.tid);
            }
            if v.iter().any(|e| e.machine.is_some()) {
                for e in v {
                    let (p, c) = e.machine.unwrap_or((0, 0));
                    out.put_u64(p);
                    out.put_u64(c);
                }
            }
        }
        Record::AuxtraceInfo(a) => {
            out.put_u32(a.kind);
            out.put_u32(0);
            match &a.private {
                AuxtracePrivate::IntelPt(pt) => pt.encode(out),
                AuxtracePrivate::Raw(w) => out.extend_from_slice(w.as_bytes()),
            }
        }
        Record::Auxtrace(a) => {
            encode_auxtrace_header(a, a.data.len() as u64, out);
            put_header(out, start, ty, misc, name)?;
            out.extend_from_slice(a.data);
            out.resize(out.len() + align8(a.data.len()) - a.data.len(), 0);
            return Ok(());
        }
        Record::AuxtraceError(e) => {
            for v in [e.kind, e.code, e.cpu, e.pid, e.tid, e.fmt] {
                out.put_u32(v);
            }
            out.put_u64(e.ip);
            out.put_u64(e.time);
            let mut m = [0u8; 64];
            let b = until_nul(e.msg.0);
            let k = b.len().min(64);
            m[..k].copy_from_slice(&b[..k]);
            out.extend_from_slice(&m);
            if let Some((p, v)) = e.machine {
                out.put_u32(p);
                out.put_u32(v);
            }
        }
        Record::ThreadMap(v) => {
            out.put_u64(v.len() as u64);
            for e in v {
                out.put_u64(e.pid);
                let mut n = [0u8; 16];
                let b = until_nul(e.comm.0);
                let k = b.len().min(16);
                n[..k].copy_from_slice(&b[..k]);
                out.extend_from_slice(&n);
            }
        }
        Record::CpuMap(m) => {
            match m {
                CpuMap::Cpus(v) => {
                    out.put_u16(0);
                    out.put_u16(v.len() as u16);
                    for &c in v {
                        out.put_u16(c);
                    }
                }
                CpuMap::Mask { long_size, words } => {
                    out.put_u16(1);
                    out.put_u16(words.len() as u16);
                    out.put_u16(*long_size);
                    if *long_size == 4 {
                        for &w in words {
                            out.put_u32(w as u32);
                        }
                    } else {
                        out.put_u32(0);
                        for &w in words {
                            out.put_u64(w);
                        }
                    }
                }
                CpuMap::Range {
                    any_cpu,
                    start: s,
                    end,
                } => {
                    out.put_u16(2);
                    out.push(*any_cpu as u8);
                    out.push(0);
                    out.put_u16(*s);
                    out.put_u16(*end);
                }
            }
            let n = out.len() - start;
            out.resize(start + align8(n), 0);
        }
        Record::TimeConv(tc) => {
            out.put_u64(tc.time_shift);
            out.put_u64(tc.time_mult);
            out.put_u64(tc.time_zero);
            if let Some(x) = tc.ext {
                out.put_u64(x.time_cycles);
                out.put_u64(x.time_mask);
                out.push(x.cap_user_time_zero as u8);
                out.push(x.cap_user_time_short as u8);
                out.extend_from_slice(&[0; 6]);
            }
        }
        Record::Raw(raw) => out.extend_from_slice(raw.body),
    }
    put_header(out, start, ty, misc, name)
}

/// AUXTRACE's 40 bytes after the header, for `size` bytes of data (padded to 8).
pub(crate) fn encode_auxtrace_header(a: &Auxtrace<'_>, size: u64, out: &mut Vec<u8>) {
    out.put_u64((size + 7) & !7);
    out.put_u64(a.offset);
    out.put_u64(a.reference);
    out.put_u32(a.idx);
    out.put_u32(a.tid);
    out.put_u32(a.cpu);
    out.put_u32(0);
}

/// A build id entry's bytes after the header; returns the header misc to use.
pub(crate) fn encode_build_id(b: &BuildIdRecord<'_>, out: &mut Vec<u8>) -> u16 {
    out.put_u32(b.pid as u32);
    out.extend_from_slice(&b.build_id.bytes);
    out.push(b.build_id.len);
    out.extend_from_slice(&[0; 3]);
    out.put_cstr(b.filename.0, 64);
    // Without BUILD_ID_SIZE readers take all 20 bytes: flag any other length.
    if b.build_id.len == 20 {
        b.misc
    } else {
        b.misc | misc::BUILD_ID_SIZE
    }
}

fn encode_sample(s: &Sample<'_>, attr: &EventAttr, out: &mut Vec<u8>) -> Result<()> {
    let st = attr.sample_type;
    let missing = |field| {
        Error::new(
            0,
            ErrorKind::MissingField {
                record: "SAMPLE",
                field,
            },
        )
    };
    let put = |bit: u64, v: Option<u64>, field, out: &mut Vec<u8>| -> Result<()> {
        if st.has(bit) {
            out.put_u64(v.ok_or_else(|| missing(field))?);
        }
        Ok(())
    };
    put(SampleType::IDENTIFIER, s.id, "id", out)?;
    put(SampleType::IP, s.ip, "ip", out)?;
    if st.has(SampleType::TID) {
        out.put_u32(s.pid.ok_or_else(|| missing("pid"))?);
        out.put_u32(s.tid.ok_or_else(|| missing("tid"))?);
    }
    put(SampleType::TIME, s.time, "time", out)?;
    put(SampleType::ADDR, s.addr, "addr", out)?;
    put(SampleType::ID, s.id, "id", out)?;
    put(SampleType::STREAM_ID, s.stream_id, "stream_id", out)?;
    if st.has(SampleType::CPU) {
        out.put_u32(s.cpu.ok_or_else(|| missing("cpu"))?);
        out.put_u32(0);
    }
    put(SampleType::PERIOD, s.period, "period", out)?;
    if st.has(SampleType::READ) {
        out.extend_from_slice(s.read.ok_or_else(|| missing("read"))?.as_bytes());
    }
    if st.has(SampleType::CALLCHAIN) {
        let cc = s.callchain.ok_or_else(|| missing("callchain"))?;
        out.put_u64(cc.len() as u64);
        out.extend_from_slice(cc.as_bytes());
    }
    if st.has(SampleType::RAW) {
        let raw = s.raw.ok_or_else(|| missing("raw"))?;
        if (raw.len() + 4) % 8 != 0 {
            return Err(Error::new(
                0,
                ErrorKind::Invalid("SAMPLE raw data: 4 + its size must be a multiple of 8"),
            ));
        }
        out.put_u32(raw.len() as u32);
        out.extend_from_slice(raw);
    }
    if st.has(SampleType::BRANCH_STACK) {
        let bs = s.branch_stack.ok_or_else(|| missing("branch_stack"))?;
        out.put_u64((bs.entries.len() / 24) as u64);
        if attr.branch_sample_type & BRANCH_HW_INDEX != 0 {
            out.put_u64(bs.hw_idx.ok_or_else(|| missing("branch hw_idx"))?);
        }
        out.extend_from_slice(&bs.entries[..bs.entries.len() / 24 * 24]);
    }
    let regs = |r: Option<Regs<'_>>, mask: u64, field, out: &mut Vec<u8>| -> Result<()> {
        let r = r.ok_or_else(|| missing(field))?;
        out.put_u64(r.abi);
        if r.abi != 0 {
            if r.regs.len() != mask.count_ones() as usize {
                return Err(Error::new(
                    0,
                    ErrorKind::Invalid("SAMPLE registers do not match the event's register mask"),
                ));
            }
            out.extend_from_slice(r.regs.as_bytes());
        }
        Ok(())
    };
    if st.has(SampleType::REGS_USER) {
        regs(s.regs_user, attr.sample_regs_user, "regs_user", out)?;
    }
    if st.has(SampleType::STACK_USER) {
        let su = s.stack_user.ok_or_else(|| missing("stack_user"))?;
        out.put_u64(su.data.len() as u64);
        if !su.data.is_empty() {
            out.extend_from_slice(su.data);
            out.put_u64(su.dyn_size);
        }
    }
    if st.0 & (SampleType::WEIGHT | SampleType::WEIGHT_STRUCT) != 0 {
        out.put_u64(s.weight.ok_or_else(|| missing("weight"))?);
    }
    put(SampleType::DATA_SRC, s.data_src, "data_src", out)?;
    put(SampleType::TRANSACTION, s.transaction, "transaction", out)?;
    if st.has(SampleType::REGS_INTR) {
        regs(s.regs_intr, attr.sample_regs_intr, "regs_intr", out)?;
    }
    put(SampleType::PHYS_ADDR, s.phys_addr, "phys_addr", out)?;
    put(SampleType::CGROUP, s.cgroup, "cgroup", out)?;
    put(
        SampleType::DATA_PAGE_SIZE,
        s.data_page_size,
        "data_page_size",
        out,
    )?;
    put(
        SampleType::CODE_PAGE_SIZE,
        s.code_page_size,
        "code_page_size",
        out,
    )?;
    if st.has(SampleType::AUX) {
        let aux = s.aux.ok_or_else(|| missing("aux"))?;
        // As given: the kernel's AUX samples are padded to 8 bytes (padding counted in
        // the size); readers step by the size, whatever it is.
        out.put_u64(aux.len() as u64);
        out.extend_from_slice(aux);
    }
    Ok(())
}
