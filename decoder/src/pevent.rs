//! libipt's perf_event side-band (`--pevent:primary/secondary FILE`): files of raw
//! perf_event records, as `perf record` receives them from the kernel (an 8-byte
//! header, the record, the sample_id trailer of one sample_type), with no perf.data
//! header around them. The records are read by pt-perf-data (the one owner of perf's
//! record formats); this module adds what libipt's side-band adds: the perf time →
//! TSC conversion with libipt's configuration, the `tsc-offset` shift, the order of
//! several files by time, and libipt's text for a record (`--sb:compact`,
//! `--sb:verbose`).
//!
//! ```
//! use pt_decoder::pevent::{PeventConfig, PeventFile, SbFlags};
//!
//! // PERF_RECORD_ITRACE_START pid 1 tid 2, no sample fields.
//! let bytes = [12, 0, 0, 0, 0, 0, 16, 0, 1, 0, 0, 0, 2, 0, 0, 0];
//! let file = PeventFile::new("sb.pevent", &bytes, PeventConfig::default(), true);
//! let rec = file.records().next().unwrap().unwrap();
//! let mut out = Vec::new();
//! rec.print(&file, SbFlags::COMPACT, &mut out);
//! assert_eq!(String::from_utf8(out).unwrap(), "PERF_RECORD_ITRACE_START  1/2  { }\n");
//! ```

use crate::file::OptionError;
use pt_perf_data::records::{encode_record, misc, parse_record, record_type};
use pt_perf_data::{
    AttrFlags, AuxFlags, EventAttr, EventDesc, EventTable, IntelPtInfo, Record, SampleId,
    SampleType,
};
use std::fmt::Write as _;

/// How to read a side-band file (libipt's `pt_sb_pevent_config`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeventConfig {
    /// The sample_type of the records' trailers (`--pevent:sample-type`).
    pub sample_type: u64,
    /// The sample_type of the records whose last 8 bytes are one of these
    /// identifiers (`--pevent:sample-config ID:TYPE`); each must have
    /// PERF_SAMPLE_IDENTIFIER.
    pub sample_config: Vec<(u64, u64)>,
    /// perf_event_mmap_page.time_zero (`--pevent:time-zero`).
    pub time_zero: u64,
    /// perf_event_mmap_page.time_shift (`--pevent:time-shift`).
    pub time_shift: u16,
    /// perf_event_mmap_page.time_mult (`--pevent:time-mult`; default 1).
    pub time_mult: u32,
    /// Apply (and show) the records this many TSC ticks earlier
    /// (`--pevent:tsc-offset`; as a signed number, later).
    pub tsc_offset: u64,
}

impl Default for PeventConfig {
    fn default() -> Self {
        PeventConfig {
            sample_type: 0,
            sample_config: Vec::new(),
            time_zero: 0,
            time_shift: 0,
            time_mult: 1,
            tsc_offset: 0,
        }
    }
}

impl PeventConfig {
    /// The TSC of perf time `time` (libipt's `pev_time_to_tsc`): time 0 is the
    /// beginning of time (synthesized records); `None` with a zero `time_mult`.
    pub fn time_to_tsc(&self, time: u64) -> Option<u64> {
        if time == 0 {
            return Some(0);
        }
        if self.time_mult == 0 || self.time_shift > 63 {
            return None;
        }
        let mut conv = IntelPtInfo::new(0);
        conv.time_zero = self.time_zero;
        conv.time_shift = self.time_shift.into();
        conv.time_mult = self.time_mult.into();
        Some(conv.perf_time_to_tsc(time))
    }

    /// `tsc` shifted by the TSC offset, clamped at both ends (libipt applies a
    /// positive offset down to 0 and a negative one up to the end of time).
    fn shift(&self, tsc: u64) -> u64 {
        let off = self.tsc_offset;
        if off <= tsc {
            tsc - off
        } else if (off as i64) >= 0 {
            0
        } else {
            // A negative offset: later by -off, at most the end of time.
            tsc.saturating_add(off.wrapping_neg())
        }
    }
}

/// What to print on a side-band record (libipt's `--sb:*` flags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SbFlags(pub u32);

impl SbFlags {
    /// `--sb:compact` (and `--sb`): one line per record.
    pub const COMPACT: SbFlags = SbFlags(1);
    /// `--sb:verbose`: one line per field.
    pub const VERBOSE: SbFlags = SbFlags(2);
    /// `--sb:filename`: the side-band file's name first.
    pub const FILENAME: SbFlags = SbFlags(4);
    /// `--sb:offset`: the record's offset in its file first.
    pub const OFFSET: SbFlags = SbFlags(8);
    /// `--sb:time`: the record's TSC.
    pub const TIME: SbFlags = SbFlags(16);

    /// Whether all of `f` is set.
    pub fn has(self, f: SbFlags) -> bool {
        self.0 & f.0 == f.0
    }
}

impl std::ops::BitOr for SbFlags {
    type Output = SbFlags;
    fn bitor(self, o: SbFlags) -> SbFlags {
        SbFlags(self.0 | o.0)
    }
}

impl std::ops::BitOrAssign for SbFlags {
    fn bitor_assign(&mut self, o: SbFlags) {
        self.0 |= o.0;
    }
}

/// A side-band record that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{offset:016x} sideband error: {message}")]
pub struct PeventError {
    /// The file's name.
    pub file: String,
    /// The record's offset in the file's range.
    pub offset: u64,
    /// What is wrong.
    pub message: String,
}

/// One side-band file (or a range of one).
#[derive(Debug)]
pub struct PeventFile<'a> {
    name: String,
    bytes: &'a [u8],
    config: PeventConfig,
    events: EventTable,
    /// The tables of `config.sample_config`, by identifier.
    configured: Vec<(u64, EventTable)>,
    primary: bool,
}

/// A table of one event whose records carry `sample_type`.
fn one_event(sample_type: u64) -> EventTable {
    let attr = EventAttr {
        sample_type: SampleType(sample_type),
        flags: AttrFlags(AttrFlags::SAMPLE_ID_ALL),
        ..Default::default()
    };
    EventTable::new(vec![EventDesc {
        attr,
        ids: Vec::new(),
        name: None,
    }])
}

impl<'a> PeventFile<'a> {
    /// The records in `bytes` (the file's range), named `name` in messages.
    pub fn new(name: &str, bytes: &'a [u8], config: PeventConfig, primary: bool) -> Self {
        let events = one_event(config.sample_type);
        let configured = config
            .sample_config
            .iter()
            .map(|&(id, st)| (id, one_event(st)))
            .collect();
        PeventFile {
            name: name.to_string(),
            bytes,
            config,
            events,
            configured,
            primary,
        }
    }

    /// The file's name as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether it is the primary side-band (its context switches change the image).
    pub fn is_primary(&self) -> bool {
        self.primary
    }

    /// Its configuration.
    pub fn config(&self) -> &PeventConfig {
        &self.config
    }

    /// Its records in file order.
    pub fn records(&self) -> PeventRecords<'_, 'a> {
        PeventRecords { file: self, pos: 0 }
    }
}

/// One record of a side-band file.
#[derive(Clone, Debug)]
pub struct PeventRecord<'a> {
    /// Its offset in the file's range.
    pub offset: u64,
    /// Its TSC (the trailer's time, converted and shifted), if it has a time.
    pub tsc: Option<u64>,
    /// The record.
    pub record: Record<'a>,
    /// Its type and misc (for records pt-perf-data keeps raw).
    pub ty: u32,
    /// The header's misc.
    pub misc: u16,
    /// The sample_type of its trailer.
    pub sample_type: u64,
}

/// The records of a [`PeventFile`]; after an error, none.
pub struct PeventRecords<'f, 'a> {
    file: &'f PeventFile<'a>,
    pos: usize,
}

impl<'a> Iterator for PeventRecords<'_, 'a> {
    type Item = Result<PeventRecord<'a>, PeventError>;

    /// The next record. Like libipt, the stream ends quietly where fewer than a
    /// header's bytes are left, at a record of type 0 and at one that runs past the
    /// end; a record whose size is not what its fields and trailer take is an error
    /// (`decoder out of sync`), a string without its NUL too (`unknown packet`).
    fn next(&mut self) -> Option<Self::Item> {
        use crate::error::ErrorCode;
        let f = self.file;
        let bytes: &'a [u8] = f.bytes;
        let at = self.pos;
        let rest = bytes.get(at..)?;
        let head = rest.get(..8)?;
        let ty = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let misc = u16::from_le_bytes([head[4], head[5]]);
        let size = usize::from(u16::from_le_bytes([head[6], head[7]]));
        let mut fail = |code: ErrorCode| {
            self.pos = bytes.len();
            Some(Err(PeventError {
                file: f.name.clone(),
                offset: at as u64,
                message: code.message().to_string(),
            }))
        };
        if size < 8 {
            return fail(ErrorCode::NoSync);
        }
        if ty == 0 || size > rest.len() {
            self.pos = bytes.len();
            return None;
        }
        let body = &rest[8..size];
        // A name (MMAP, MMAP2, COMM) must end in a NUL before the record does.
        let name_at = match ty {
            record_type::MMAP => Some(32),
            record_type::MMAP2 => Some(64),
            record_type::COMM => Some(8),
            _ => None,
        };
        if let Some(n) = name_at {
            if !body.get(n..).unwrap_or_default().contains(&0) {
                return fail(ErrorCode::BadPacket);
            }
        }
        // With `--pevent:sample-config`, the last 8 bytes name the event (libipt
        // looks there whenever the record has 8 bytes past its header).
        let mut events = &f.events;
        if let Some(last) = body.len().checked_sub(8).map(|i| &body[i..]) {
            let id = u64::from_le_bytes(last.try_into().unwrap_or([0; 8]));
            if let Some((_, table)) = f.configured.iter().find(|(i, _)| *i == id) {
                let st = table.events()[0].attr.sample_type;
                if !st.has(SampleType::IDENTIFIER) {
                    return fail(ErrorCode::BadConfig);
                }
                events = table;
            }
        }
        let Ok(record) = parse_record(ty, misc, body, &[], at as u64, events) else {
            return fail(ErrorCode::NoSync);
        };
        // The record must be exactly its fields and trailer: what encoding it again
        // takes (pt-perf-data pads strings to 8 bytes as the kernel does).
        if record.sample_id().is_some() {
            let mut again = Vec::new();
            let fits = encode_record(&record, events, &mut again).is_ok() && again.len() == size;
            if !fits {
                return fail(ErrorCode::NoSync);
            }
        }
        let tsc = match record.sample_id().and_then(|s| s.time) {
            Some(time) => match f.config.time_to_tsc(time) {
                Some(t) => Some(f.config.shift(t)),
                None => return fail(ErrorCode::BadConfig),
            },
            None => None,
        };
        self.pos = at + size;
        Some(Ok(PeventRecord {
            offset: at as u64,
            tsc,
            record,
            ty,
            misc,
            sample_type: events.events()[0].attr.sample_type.0,
        }))
    }
}

impl PeventRecord<'_> {
    /// The record as libipt's tools print it with `flags` (nothing without
    /// [`SbFlags::COMPACT`] or [`SbFlags::VERBOSE`] but the prefixes), with a newline.
    pub fn print(&self, file: &PeventFile<'_>, flags: SbFlags, out: &mut Vec<u8>) {
        let mut s = String::new();
        match (flags.has(SbFlags::FILENAME), flags.has(SbFlags::OFFSET)) {
            (true, true) => {
                let _ = write!(s, "{}:{:016x}  ", file.name, self.offset);
            }
            (true, false) => {
                let _ = write!(s, "{}  ", file.name);
            }
            (false, true) => {
                let _ = write!(s, "{:016x}  ", self.offset);
            }
            (false, false) => {}
        }
        if flags.has(SbFlags::TIME) {
            if let Some(t) = self.tsc {
                let _ = write!(s, "{t:016x}  ");
            }
        }
        let compact = flags.has(SbFlags::COMPACT);
        let verbose = flags.has(SbFlags::VERBOSE);
        let mut c = String::new();
        let mut v = String::new();
        self.describe(compact.then_some(&mut c), verbose.then_some(&mut v));
        s.push_str(&c);
        s.push_str(&v);
        let st = SampleType(self.sample_type);
        if let Some(sid) = self.record.sample_id() {
            if compact {
                samples_compact(sid, st, &mut s);
            }
            if verbose {
                samples_verbose(sid, st, &mut s);
            }
        } else if compact {
            s.push_str("  { }");
        }
        if flags.0 != 0 {
            s.push('\n');
        }
        out.extend_from_slice(s.as_bytes());
    }

    /// libipt's compact and verbose text of the record itself.
    fn describe(&self, c: Option<&mut String>, v: Option<&mut String>) {
        let mut c = c;
        let mut v = v;
        macro_rules! both {
            (c: $($ca:tt)*) => {
                if let Some(c) = c.as_deref_mut() {
                    let _ = write!(c, $($ca)*);
                }
            };
        }
        macro_rules! verbose {
            ($($va:tt)*) => {
                if let Some(v) = v.as_deref_mut() {
                    let _ = write!(v, $($va)*);
                }
            };
        }
        match &self.record {
            Record::Mmap(m) => {
                both!(c: "PERF_RECORD_MMAP  {:x}/{:x}, {:x}, {:x}, {:x}, {}", m.pid, m.tid,
                    m.start, m.len, m.pgoff, m.filename.to_str_lossy());
                verbose!("PERF_RECORD_MMAP\n  pid: {:x}\n  tid: {:x}\n  addr: {:x}\n  len: {:x}\n  pgoff: {:x}\n  filename: {}",
                    m.pid, m.tid, m.start, m.len, m.pgoff, m.filename.to_str_lossy());
            }
            Record::Lost(l) => {
                both!(c: "PERF_RECORD_LOST  {:x}, {:x}", l.id, l.lost);
                verbose!("PERF_RECORD_LOST\n  id: {:x}\n  lost: {:x}", l.id, l.lost);
            }
            Record::Comm(r) => {
                let sfx = if r.misc & misc::COMM_EXEC != 0 {
                    ".EXEC"
                } else {
                    ""
                };
                both!(c: "PERF_RECORD_COMM{sfx}  {:x}/{:x}, {}", r.pid, r.tid, r.comm.to_str_lossy());
                verbose!(
                    "PERF_RECORD_COMM{sfx}\n  pid: {:x}\n  tid: {:x}\n  comm: {}",
                    r.pid,
                    r.tid,
                    r.comm.to_str_lossy()
                );
            }
            Record::Exit(t) | Record::Fork(t) => {
                let name = if matches!(self.record, Record::Exit(_)) {
                    "EXIT"
                } else {
                    "FORK"
                };
                both!(c: "PERF_RECORD_{name}  {:x}/{:x}, {:x}/{:x}, {:x}", t.pid, t.tid, t.ppid, t.ptid, t.time);
                verbose!("PERF_RECORD_{name}\n  pid: {:x}\n  ppid: {:x}\n  tid: {:x}\n  ptid: {:x}\n  time: {:x}",
                    t.pid, t.ppid, t.tid, t.ptid, t.time);
            }
            Record::Throttle(t) | Record::Unthrottle(t) => {
                let name = if matches!(self.record, Record::Throttle(_)) {
                    "THROTTLE"
                } else {
                    "UNTHROTTLE"
                };
                both!(c: "PERF_RECORD_{name}  {:x}, {:x}, {:x}", t.time, t.id, t.stream_id);
                verbose!(
                    "PERF_RECORD_{name}\n  time: {:x}\n  id: {:x}\n  stream_id: {:x}",
                    t.time,
                    t.id,
                    t.stream_id
                );
            }
            Record::Mmap2(m) => {
                let (maj, min, ino, gen) = match m.file {
                    pt_perf_data::Mmap2File::Inode {
                        maj,
                        min,
                        ino,
                        ino_generation,
                    } => (maj, min, ino, ino_generation),
                    // libipt reads the build id's bytes as these fields.
                    pt_perf_data::Mmap2File::BuildId(_) => (0, 0, 0, 0),
                };
                let name = m.filename.to_str_lossy();
                both!(c: "PERF_RECORD_MMAP2  {:x}/{:x}, {:x}, {:x}, {:x}, {maj:x}, {min:x}, {ino:x}, {gen:x}, {:x}, {:x}, {name}",
                    m.pid, m.tid, m.start, m.len, m.pgoff, m.prot, m.flags);
                verbose!("PERF_RECORD_MMAP2\n  pid: {:x}\n  tid: {:x}\n  addr: {:x}\n  len: {:x}\n  pgoff: {:x}\n  maj: {maj:x}\n  min: {min:x}\n  ino: {ino:x}\n  ino_generation: {gen:x}\n  prot: {:x}\n  flags: {:x}\n  filename: {name}",
                    m.pid, m.tid, m.start, m.len, m.pgoff, m.prot, m.flags);
            }
            Record::Aux(a) => {
                let sfx = if a.flags.0 & AuxFlags::TRUNCATED != 0 {
                    ".TRUNCATED"
                } else {
                    ""
                };
                both!(c: "PERF_RECORD_AUX{sfx}  {:x}, {:x}, {:x}", a.aux_offset, a.aux_size, a.flags.0);
                verbose!(
                    "PERF_RECORD_AUX{sfx}\n  aux offset: {:x}\n  aux size: {:x}\n  flags: {:x}",
                    a.aux_offset,
                    a.aux_size,
                    a.flags.0
                );
            }
            Record::ItraceStart(i) => {
                both!(c: "PERF_RECORD_ITRACE_START  {:x}/{:x}", i.pid, i.tid);
                verbose!(
                    "PERF_RECORD_ITRACE_START\n  pid: {:x}\n  tid: {:x}",
                    i.pid,
                    i.tid
                );
            }
            Record::LostSamples(l) => {
                both!(c: "PERF_RECORD_LOST_SAMPLES  {:x}", l.lost);
                verbose!("PERF_RECORD_LOST_SAMPLES\n  lost: {:x}", l.lost);
            }
            Record::Switch(w) => {
                let sfx = if w.misc & misc::SWITCH_OUT != 0 {
                    "OUT"
                } else {
                    "IN"
                };
                both!(c: "PERF_RECORD_SWITCH.{sfx}");
                verbose!("PERF_RECORD_SWITCH.{sfx}");
            }
            Record::SwitchCpuWide(w) => {
                let (sfx, pfx) = if w.misc & misc::SWITCH_OUT != 0 {
                    ("OUT", "next")
                } else {
                    ("IN", "prev")
                };
                both!(c: "PERF_RECORD_SWITCH_CPU_WIDE.{sfx}  {:x}/{:x}", w.next_prev_pid, w.next_prev_tid);
                verbose!(
                    "PERF_RECORD_SWITCH_CPU_WIDE.{sfx}\n  {pfx} pid: {:x}\n  {pfx} tid: {:x}",
                    w.next_prev_pid,
                    w.next_prev_tid
                );
            }
            _ => {
                both!(c: "UNKNOWN ({:x}, {:x})", self.ty, self.misc);
                verbose!("UNKNOWN\n  type: {:x}\n  misc: {:x}", self.ty, self.misc);
            }
        }
    }
}

/// libipt's `{ pid/tid time id cpu-N stream identifier }`.
fn samples_compact(s: &SampleId, st: SampleType, out: &mut String) {
    out.push_str("  {");
    if let (Some(p), Some(t)) = (s.pid, s.tid) {
        let _ = write!(out, " {p:x}/{t:x}");
    }
    if let Some(t) = s.time {
        let _ = write!(out, " {t:x}");
    }
    let (id, identifier) = id_fields(s, st);
    if let Some(i) = id {
        let _ = write!(out, " {i:x}");
    }
    if let Some(c) = s.cpu {
        let _ = write!(out, " cpu-{c:x}");
    }
    if let Some(x) = s.stream_id {
        let _ = write!(out, " {x:x}");
    }
    if let Some(i) = identifier {
        let _ = write!(out, " {i:x}");
    }
    out.push_str(" }");
}

fn samples_verbose(s: &SampleId, st: SampleType, out: &mut String) {
    if let (Some(p), Some(t)) = (s.pid, s.tid) {
        let _ = write!(out, "\n  pid: {p:x}\n  tid: {t:x}");
    }
    if let Some(t) = s.time {
        let _ = write!(out, "\n  time: {t:x}");
    }
    let (id, identifier) = id_fields(s, st);
    if let Some(i) = id {
        let _ = write!(out, "\n  id: {i:x}");
    }
    if let Some(c) = s.cpu {
        let _ = write!(out, "\n  cpu: {c:x}");
    }
    if let Some(x) = s.stream_id {
        let _ = write!(out, "\n  stream id: {x:x}");
    }
    if let Some(i) = identifier {
        let _ = write!(out, "\n  identifier: {i:x}");
    }
}

/// (ID, IDENTIFIER) as the trailer had them.
fn id_fields(s: &SampleId, st: SampleType) -> (Option<u64>, Option<u64>) {
    let has_id = st.has(SampleType::ID);
    let has_ident = st.has(SampleType::IDENTIFIER);
    let id = if has_id { s.id } else { None };
    let ident = if has_ident {
        s.identifier.or(s.id)
    } else {
        None
    };
    (id, ident)
}

/// Several side-band files read in time order, as libipt's side-band session
/// interleaves them: the record with the smallest TSC first (records without a time
/// at once); a file goes on with its records of the same TSC before another's.
pub struct SbSession<'f, 'a> {
    files: &'f [PeventFile<'a>],
    iters: Vec<PeventRecords<'f, 'a>>,
    /// The next record of each file still read, in order: (tsc, file, record).
    next: Vec<(u64, usize, PeventRecord<'a>)>,
    /// Errors met while fetching, to be printed with the next dump.
    errors: Vec<PeventError>,
    /// Files that stopped at an error (libipt removes their decoders).
    failed: Vec<bool>,
}

impl<'f, 'a> SbSession<'f, 'a> {
    /// A session over `files` (in the order given on the command line).
    pub fn new(files: &'f [PeventFile<'a>]) -> Self {
        let mut s = SbSession {
            files,
            iters: files.iter().map(|f| f.records()).collect(),
            next: Vec::new(),
            errors: Vec::new(),
            failed: vec![false; files.len()],
        };
        // libipt adds the files last to first, each before those of the same time.
        for i in (0..files.len()).rev() {
            s.fetch(i);
        }
        s
    }

    /// Reads file `i`'s next record into the order.
    fn fetch(&mut self, i: usize) {
        match self.iters[i].next() {
            Some(Ok(r)) => {
                let tsc = r.tsc.unwrap_or(0);
                let at = self.next.partition_point(|&(t, _, _)| t < tsc);
                self.next.insert(at, (tsc, i, r));
            }
            Some(Err(e)) => {
                self.errors.push(e);
                self.failed[i] = true;
            }
            None => {}
        }
    }

    /// The TSC of the next record, if any.
    pub fn next_tsc(&self) -> Option<u64> {
        self.next.first().map(|&(t, _, _)| t)
    }

    /// Takes the next record if its TSC is at most `tsc`, with its file.
    pub fn take(&mut self, tsc: u64) -> Option<(&'f PeventFile<'a>, PeventRecord<'a>)> {
        self.take_indexed(tsc).map(|(i, r)| (&self.files[i], r))
    }

    /// Like [`Self::take`], with the file's index (in the order given to [`Self::new`]).
    pub fn take_indexed(&mut self, tsc: u64) -> Option<(usize, PeventRecord<'a>)> {
        if self.next.first().is_none_or(|&(t, _, _)| t > tsc) {
            return None;
        }
        let (_, i, r) = self.next.remove(0);
        self.fetch(i);
        Some((i, r))
    }

    /// The files, in the order given to [`Self::new`].
    pub fn files(&self) -> &'f [PeventFile<'a>] {
        self.files
    }

    /// The files with a record still to take, the one to take next first.
    pub fn pending(&self) -> impl Iterator<Item = usize> + '_ {
        self.next.iter().map(|&(_, f, _)| f)
    }

    /// Whether file `i` has a record still to take.
    pub fn has_next(&self, i: usize) -> bool {
        self.next.iter().any(|&(_, f, _)| f == i)
    }

    /// Whether file `i` stopped at an error (its records end there).
    pub fn failed(&self, i: usize) -> bool {
        self.failed.get(i).copied().unwrap_or(false)
    }

    /// Errors met so far (a file stops at its first), taken.
    pub fn take_errors(&mut self) -> Vec<PeventError> {
        std::mem::take(&mut self.errors)
    }

    /// Prints (libipt's `pt_sb_dump`) every record up to `tsc` with `flags`, and the
    /// errors met on the way as `[file:offset sideband error: …]`.
    pub fn dump(&mut self, tsc: u64, flags: SbFlags, out: &mut Vec<u8>) {
        self.print_errors(out);
        while let Some((f, r)) = self.take(tsc) {
            r.print(f, flags, out);
            self.print_errors(out);
        }
    }

    /// Prints the errors met so far (see [`Self::dump`]).
    pub fn dump_errors(&mut self, out: &mut Vec<u8>) {
        self.print_errors(out);
    }

    fn print_errors(&mut self, out: &mut Vec<u8>) {
        for e in self.take_errors() {
            out.extend_from_slice(format!("[{e}]\n").as_bytes());
        }
    }
}

/// The side-band options libipt's ptdump and ptxed share (`--sb:*`, `--pevent:*`),
/// in the order given: each `--pevent:primary/secondary` file takes the
/// `--pevent:*` settings given before it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SbOptions {
    /// What to print on records (`--sb:*`; none: records are not printed).
    pub flags: SbFlags,
    /// Print side-band warnings (`--sb:warn`).
    pub warn: bool,
    /// Print the new image's name on context switches (`--sb:switch`, ptxed).
    pub switch: bool,
    /// The files: (`file[:from[-to]]` as given, primary, their configuration).
    pub files: Vec<(String, bool, PeventConfig)>,
    /// The settings for the next file.
    pub config: PeventConfig,
    /// `--pevent:kernel-start` (ptxed).
    pub kernel_start: Option<u64>,
    /// `--pevent:sysroot` (ptxed).
    pub sysroot: Option<String>,
    /// `--pevent:vdso-x64/-x32/-ia32` (ptxed).
    pub vdso: [Option<String>; 3],
    /// `--pevent:kcore FILE[:base]` (ptxed): ELF files of the kernel image every
    /// process's image starts with.
    pub kcore: Vec<String>,
}

impl SbOptions {
    /// Whether `arg` is a side-band option, and whether it takes a value.
    pub fn takes(arg: &str) -> Option<bool> {
        match arg {
            "--sb" | "--sb:compact" | "--sb:verbose" | "--sb:filename" | "--sb:offset"
            | "--sb:time" | "--sb:switch" | "--sb:warn" => Some(false),
            "--pevent"
            | "--pevent:primary"
            | "--pevent:secondary"
            | "--pevent:sample-type"
            | "--pevent:sample-config"
            | "--pevent:time-zero"
            | "--pevent:time-shift"
            | "--pevent:time-mult"
            | "--pevent:tsc-offset"
            | "--pevent:kernel-start"
            | "--pevent:sysroot"
            | "--pevent:kcore"
            | "--pevent:vdso-x64"
            | "--pevent:vdso-x32"
            | "--pevent:vdso-ia32" => Some(true),
            _ => None,
        }
    }

    /// Takes option `arg` (with its value); the error is libipt's message without the
    /// program name.
    pub fn set(&mut self, arg: &str, value: Option<&str>) -> Result<(), OptionError> {
        let v = value.unwrap_or("");
        let num = |max: u64| -> Result<u64, OptionError> {
            let n = crate::file::parse_u64(v).ok_or_else(|| OptionError::bad(arg, v))?;
            if n > max {
                return Err(OptionError::TooBig {
                    option: arg.to_string(),
                    value: v.to_string(),
                });
            }
            Ok(n)
        };
        match arg {
            "--sb" | "--sb:compact" => {
                self.flags.0 &= !SbFlags::VERBOSE.0;
                self.flags |= SbFlags::COMPACT;
            }
            "--sb:verbose" => {
                self.flags.0 &= !SbFlags::COMPACT.0;
                self.flags |= SbFlags::VERBOSE;
            }
            "--sb:filename" => self.flags |= SbFlags::FILENAME,
            "--sb:offset" => self.flags |= SbFlags::OFFSET,
            "--sb:time" => self.flags |= SbFlags::TIME,
            "--sb:switch" => self.switch = true,
            "--sb:warn" => self.warn = true,
            "--pevent" | "--pevent:primary" | "--pevent:secondary" => {
                let primary = arg != "--pevent:secondary";
                self.files
                    .push((v.to_string(), primary, self.config.clone()));
            }
            "--pevent:sample-type" => self.config.sample_type = num(u64::MAX)?,
            "--pevent:sample-config" => {
                let pair = v.split_once(':').and_then(|(id, st)| {
                    let id = crate::file::parse_u64(id).filter(|_| !id.is_empty())?;
                    Some((id, crate::file::parse_u64(st)?))
                });
                let Some(pair) = pair else {
                    return Err(OptionError::SampleConfig(v.to_string()));
                };
                self.config.sample_config.push(pair);
            }
            "--pevent:time-zero" => self.config.time_zero = num(u64::MAX)?,
            "--pevent:time-shift" => self.config.time_shift = num(u16::MAX.into())? as u16,
            "--pevent:time-mult" => self.config.time_mult = num(u32::MAX.into())? as u32,
            "--pevent:tsc-offset" => self.config.tsc_offset = num(u64::MAX)?,
            "--pevent:kernel-start" => self.kernel_start = Some(num(u64::MAX)?),
            "--pevent:sysroot" => self.sysroot = Some(v.to_string()),
            "--pevent:kcore" => self.kcore.push(v.to_string()),
            "--pevent:vdso-x64" => self.vdso[0] = Some(v.to_string()),
            "--pevent:vdso-x32" => self.vdso[1] = Some(v.to_string()),
            "--pevent:vdso-ia32" => self.vdso[2] = Some(v.to_string()),
            _ => return Err(OptionError::Unknown(arg.to_string())),
        }
        Ok(())
    }

    /// Whether side-band files were given.
    pub fn any(&self) -> bool {
        !self.files.is_empty()
    }
}

/// The help lines of [`SbOptions`].
pub const SB_HELP: &str = "  --sb:compact | --sb       show sideband records in compact format.
  --sb:verbose              show sideband records in verbose format.
  --sb:filename             show the filename on sideband records.
  --sb:offset               show the offset on sideband records.
  --sb:time                 show the time on sideband records.
  --sb:warn                 show sideband warnings.
  --pevent[:primary|:secondary] <file>[:<from>[-<to>]]
                            load a perf_event sideband stream from <file>.
  --pevent:sample-type <val>  set perf_event_attr.sample_type to <val> (default: 0).
  --pevent:sample-config <id>:<val>
                            set perf_event_attr.sample_type to <val> for event <id>.
  --pevent:time-zero <val>  set perf_event_mmap_page.time_zero to <val> (default: 0).
  --pevent:time-shift <val> set perf_event_mmap_page.time_shift to <val> (default: 0).
  --pevent:time-mult <val>  set perf_event_mmap_page.time_mult to <val> (default: 1).
  --pevent:tsc-offset <val> show perf events <val> ticks earlier.
";
