//! Reading a perf.data held in memory (a mapped file or a buffer): the header, the
//! events, the features, and the records in file or time order. Nothing is copied: the
//! records borrow the bytes.

use crate::attr::{EventAttr, EventDesc, EventTable};
use crate::bytes::{Cursor, U64s};
use crate::error::{Error, ErrorKind, Result, Warning};
use crate::features::{feature_id, Feature};
use crate::intel_pt::IntelPtInfo;
use crate::ordered::RoundQueue;
use crate::records::{
    parse_record, record_type, trailing_data_size, Auxtrace, AuxtracePrivate, Record,
};
use std::ops::Range;
use std::path::Path;

/// `PERFILE2` as the little-endian u64 perf compares.
pub const MAGIC: u64 = u64::from_le_bytes(*b"PERFILE2");
/// The byte-swapped magic of a big-endian file.
const MAGIC_SWAPPED: u64 = u64::from_be_bytes(*b"PERFILE2");
/// Size of the file-mode header.
pub const FILE_HEADER_SIZE: u64 = 104;
/// Size of the pipe-mode header.
pub const PIPE_HEADER_SIZE: u64 = 16;
/// Number of feature bits of the header.
pub const FEATURE_BITS: u16 = 256;

/// A (offset, size) section of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Section {
    /// File offset.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
}

impl Section {
    /// The end offset, if it does not overflow.
    pub fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.size)
    }
}

/// The file-mode header (`struct perf_file_header`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FileHeader {
    /// Header size (104).
    pub size: u64,
    /// Size of each attrs entry (attr + ids section).
    pub attr_size: u64,
    /// The attrs section.
    pub attrs: Section,
    /// The data section.
    pub data: Section,
    /// The (ignored) event_types section.
    pub event_types: Section,
    /// The feature bitmap (bit n: feature n has a section).
    pub features: [u64; 4],
}

impl FileHeader {
    /// Whether feature `id` is flagged.
    pub fn has_feature(&self, id: u16) -> bool {
        id < FEATURE_BITS && self.features[id as usize / 64] >> (id % 64) & 1 != 0
    }

    /// The flagged features in order.
    pub fn feature_ids(&self) -> impl Iterator<Item = u16> + '_ {
        (0..FEATURE_BITS).filter(|&i| self.has_feature(i))
    }

    pub(crate) fn encode(&self) -> [u8; FILE_HEADER_SIZE as usize] {
        let mut v = Vec::with_capacity(FILE_HEADER_SIZE as usize);
        for w in [
            MAGIC,
            self.size,
            self.attr_size,
            self.attrs.offset,
            self.attrs.size,
            self.data.offset,
            self.data.size,
            self.event_types.offset,
            self.event_types.size,
            self.features[0],
            self.features[1],
            self.features[2],
            self.features[3],
        ] {
            v.extend_from_slice(&w.to_le_bytes());
        }
        let mut a = [0; FILE_HEADER_SIZE as usize];
        a.copy_from_slice(&v);
        a
    }
}

/// Checks the magic and returns the header's size field.
pub(crate) fn check_magic(first16: &[u8]) -> Result<u64> {
    let mut c = Cursor::new(first16, 0, "perf.data header");
    let magic = c.u64()?;
    if magic == MAGIC_SWAPPED {
        return Err(Error::new(0, ErrorKind::BigEndian));
    }
    if magic != MAGIC {
        return Err(Error::new(0, ErrorKind::BadMagic(magic)));
    }
    c.u64()
}

/// A perf.data file in memory, mapped (a regular file) or read whole (a pipe, a
/// terminal, a device: what cannot be mapped); [`MappedFile::parse`] reads it.
pub struct MappedFile {
    bytes: Held,
}

/// How a [`MappedFile`] holds its bytes.
enum Held {
    Empty,
    Map(memmap2::Mmap),
    Read(Vec<u8>),
}

impl std::fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = match self.bytes {
            Held::Empty => "empty",
            Held::Map(_) => "mapped",
            Held::Read(_) => "read",
        };
        f.debug_struct("MappedFile")
            .field("bytes", &self.bytes().len())
            .field("held", &how)
            .finish()
    }
}

/// What a path names, in the words of an error message.
fn kind_of(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a pipe (FIFO)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

impl MappedFile {
    /// Opens the file at `path`: a regular file is mapped (read-only); a directory is
    /// refused; anything else (a FIFO, a device) is read as a stream, see
    /// [`MappedFile::read_stream`]. The error says what `path` is.
    pub fn open(path: impl AsRef<Path>) -> std::io::Result<MappedFile> {
        let f = std::fs::File::open(path)?;
        let meta = f.metadata()?;
        let t = meta.file_type();
        if t.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "is a directory, not a perf.data file",
            ));
        }
        if !t.is_file() {
            return Self::read_stream(f, kind_of(t));
        }
        if meta.len() == 0 {
            return Ok(MappedFile { bytes: Held::Empty });
        }
        // SAFETY: the map is read-only; like every reader of perf.data (perf included) we
        // assume the file is not truncated while it is mapped.
        let map = unsafe { memmap2::Mmap::map(&f)? };
        Ok(MappedFile {
            bytes: Held::Map(map),
        })
    }

    /// Reads a perf.data from a stream (`what` names it in errors: "standard input",
    /// "a pipe (FIFO)"): its first eight bytes must be perf.data's magic, so that a
    /// stream of something else (`/dev/zero`, `/dev/urandom`) is refused at once
    /// instead of being read forever; then the whole stream (pipe mode, or a file-mode
    /// perf.data sent through a pipe, which perf itself cannot read) is read into
    /// memory.
    pub fn read_stream(mut input: impl std::io::Read, what: &str) -> std::io::Result<MappedFile> {
        use std::io::Read;
        let mut bytes = Vec::new();
        (&mut input).take(8).read_to_end(&mut bytes)?;
        let refuse = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
        if bytes.is_empty() {
            return Err(refuse(format!("{what} that gave no data, not a perf.data")));
        }
        if bytes.len() < 8 || check_magic(&[&bytes[..], &[0; 8]].concat()).is_err() {
            return Err(refuse(format!(
                "{what} whose data does not start with perf.data's magic (PERFILE2)"
            )));
        }
        input.read_to_end(&mut bytes)?;
        Ok(MappedFile {
            bytes: Held::Read(bytes),
        })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.bytes {
            Held::Empty => &[],
            Held::Map(m) => m,
            Held::Read(v) => v,
        }
    }

    /// Reads the header, events and feature table.
    pub fn parse(&self) -> Result<PerfFile<'_>> {
        PerfFile::parse(self.bytes())
    }
}

/// A perf.data file (file or pipe mode) over borrowed bytes.
#[derive(Clone, Debug)]
pub struct PerfFile<'a> {
    bytes: &'a [u8],
    header: Option<FileHeader>,
    events: EventTable,
    data: Range<usize>,
    features: Vec<(u16, Section)>,
    pipe_features: Vec<(u16, Range<usize>)>,
    warnings: Vec<Warning>,
}

impl<'a> PerfFile<'a> {
    /// Reads the header, the events (attrs and ids, or a pipe file's HEADER_ATTR
    /// records) and the feature table. Records are read by [`PerfFile::records`].
    pub fn parse(bytes: &'a [u8]) -> Result<PerfFile<'a>> {
        if bytes.is_empty() {
            return Err(Error::new(0, ErrorKind::Empty));
        }
        let size = check_magic(bytes)?;
        match size {
            PIPE_HEADER_SIZE => Self::parse_pipe(bytes),
            FILE_HEADER_SIZE => Self::parse_file(bytes),
            s => Err(Error::new(8, ErrorKind::HeaderSize(s))),
        }
    }

    fn parse_file(bytes: &'a [u8]) -> Result<PerfFile<'a>> {
        let len = bytes.len() as u64;
        let mut c = Cursor::new(bytes, 0, "perf.data file header");
        c.u64()?;
        let mut h = FileHeader {
            size: c.u64()?,
            attr_size: c.u64()?,
            ..Default::default()
        };
        let sect = |c: &mut Cursor<'_>| -> Result<Section> {
            Ok(Section {
                offset: c.u64()?,
                size: c.u64()?,
            })
        };
        h.attrs = sect(&mut c)?;
        h.data = sect(&mut c)?;
        h.event_types = sect(&mut c)?;
        for w in &mut h.features {
            *w = c.u64()?;
        }
        let within = |what: &'static str, s: Section| -> Result<Range<usize>> {
            match s.end() {
                Some(end) if end <= len => Ok(s.offset as usize..end as usize),
                end => Err(Error::new(
                    s.offset.min(len),
                    ErrorKind::SectionPastEnd {
                        what,
                        start: s.offset,
                        end: end.unwrap_or(u64::MAX),
                        file_size: len,
                    },
                )),
            }
        };

        // Attrs and their ids.
        let attrs = within("attrs", h.attrs)?;
        if h.attr_size < crate::attr::ATTR_SIZE_VER0 as u64 + 16 {
            return Err(Error::new(24, ErrorKind::AttrEntrySize(h.attr_size)));
        }
        let n = h.attrs.size / h.attr_size;
        let mut events = Vec::new();
        for i in 0..n {
            let at = h.attrs.offset + i * h.attr_size;
            let entry = &bytes[attrs.start + (i * h.attr_size) as usize..][..h.attr_size as usize];
            let (attr_bytes, ids_sect) = entry.split_at(entry.len() - 16);
            let attr = EventAttr::parse(attr_bytes, at)?;
            let mut ic = Cursor::new(ids_sect, at + attr_bytes.len() as u64, "attr ids section");
            let ids = Section {
                offset: ic.u64()?,
                size: ic.u64()?,
            };
            let r = within("attr ids", ids)?;
            events.push(EventDesc {
                attr,
                ids: U64s::new(&bytes[r]).iter().collect(),
                name: None,
            });
        }

        // The data.
        let mut warnings = Vec::new();
        let data_start = h.data.offset.min(len);
        let data_end = match h.data.end() {
            _ if h.data.size == 0 => {
                warnings.push(Warning::DataSizeZero {
                    data_offset: h.data.offset,
                });
                len
            }
            Some(end) if end <= len => end,
            end => {
                warnings.push(Warning::DataPastEnd {
                    claimed_end: end.unwrap_or(u64::MAX),
                    file_size: len,
                });
                len
            }
        };

        // The feature table follows the data.
        let mut features = Vec::new();
        let nfeat = h.feature_ids().count() as u64;
        let data_whole = warnings.is_empty();
        if nfeat > 0 && data_whole {
            let table = Section {
                offset: h.data.end().unwrap_or(u64::MAX),
                size: nfeat * 16,
            };
            match within("feature table", table) {
                Ok(r) => {
                    let mut fc = Cursor::new(&bytes[r], table.offset, "feature table");
                    for id in h.feature_ids() {
                        let s = Section {
                            offset: fc.u64()?,
                            size: fc.u64()?,
                        };
                        match within("feature", s) {
                            Ok(_) => features.push((id, s)),
                            Err(error) => warnings.push(Warning::BadFeature { feature: id, error }),
                        }
                    }
                }
                Err(error) => warnings.push(Warning::BadFeature { feature: 0, error }),
            }
        }
        let mut f = PerfFile {
            bytes,
            header: Some(h),
            events: EventTable::new(events),
            data: data_start as usize..data_end.max(data_start) as usize,
            features,
            pipe_features: Vec::new(),
            warnings,
        };
        f.name_events();
        Ok(f)
    }

    fn parse_pipe(bytes: &'a [u8]) -> Result<PerfFile<'a>> {
        let mut f = PerfFile {
            bytes,
            header: None,
            events: EventTable::default(),
            data: PIPE_HEADER_SIZE as usize..bytes.len(),
            features: Vec::new(),
            pipe_features: Vec::new(),
            warnings: Vec::new(),
        };
        // A pass over the record headers to collect the events and features, which
        // perf puts at the start of the stream.
        let mut pos = f.data.start;
        while let Ok(Some(frame)) = frame_at(bytes, pos, f.data.end) {
            let body = &bytes[frame.body.clone()];
            match frame.ty {
                record_type::HEADER_ATTR => {
                    if let Ok(Record::HeaderAttr { attr, ids }) =
                        parse_record(frame.ty, frame.misc, body, &[], pos as u64, &f.events)
                    {
                        f.events.push(EventDesc {
                            attr,
                            ids: ids.iter().collect(),
                            name: None,
                        });
                    }
                }
                record_type::HEADER_FEATURE if body.len() >= 8 => {
                    let id = u64::from_le_bytes(body[..8].try_into().unwrap_or([0; 8]));
                    if id < FEATURE_BITS as u64 {
                        f.pipe_features
                            .push((id as u16, frame.body.start + 8..frame.body.end));
                    }
                }
                record_type::EVENT_UPDATE => name_from_event_update(&mut f.events, body),
                _ => {}
            }
            pos = frame.next;
        }
        f.name_events();
        Ok(f)
    }

    /// Names the events from EVENT_DESC.
    fn name_events(&mut self) {
        if let Some(Ok(Feature::EventDesc(descs))) = self.feature(feature_id::EVENT_DESC) {
            let evs = self.events.events_mut();
            for (i, d) in descs.into_iter().enumerate() {
                let by_id = d
                    .ids
                    .first()
                    .and_then(|id| evs.iter().position(|e| e.ids.contains(id)));
                let j = by_id.unwrap_or(i);
                if let Some(e) = evs.get_mut(j) {
                    if e.name.is_none() {
                        e.name = d.name;
                    }
                }
            }
        }
    }

    /// Whether the file is in pipe mode (`perf record -o -`).
    pub fn is_pipe(&self) -> bool {
        self.header.is_none()
    }

    /// The file-mode header.
    pub fn header(&self) -> Option<&FileHeader> {
        self.header.as_ref()
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The events (attr, ids, name).
    pub fn events(&self) -> &[EventDesc] {
        self.events.events()
    }

    /// The event table (for the id lookup).
    pub fn event_table(&self) -> &EventTable {
        &self.events
    }

    /// What was unusual but did not stop reading.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// The file range of the records.
    pub fn data_range(&self) -> Range<u64> {
        self.data.start as u64..self.data.end as u64
    }

    /// The numbers of the features present.
    pub fn feature_ids(&self) -> Vec<u16> {
        let mut v: Vec<u16> = self.features.iter().map(|f| f.0).collect();
        v.extend(self.pipe_features.iter().map(|f| f.0));
        v
    }

    fn nr_cpus(&self) -> Option<u32> {
        match self.feature_raw(feature_id::NRCPUS) {
            Some((b, at)) => match Feature::parse(feature_id::NRCPUS, b, at, None) {
                Ok(Feature::NrCpus { available, .. }) => Some(available),
                _ => None,
            },
            None => None,
        }
    }

    /// A feature's section bytes and file offset.
    pub fn feature_raw(&self, id: u16) -> Option<(&'a [u8], u64)> {
        if let Some((_, s)) = self.features.iter().find(|f| f.0 == id) {
            return Some((
                &self.bytes[s.offset as usize..(s.offset + s.size) as usize],
                s.offset,
            ));
        }
        self.pipe_features
            .iter()
            .find(|f| f.0 == id)
            .map(|(_, r)| (&self.bytes[r.clone()], r.start as u64))
    }

    /// Feature `id`, decoded, if present.
    pub fn feature(&self, id: u16) -> Option<Result<Feature>> {
        let (b, at) = self.feature_raw(id)?;
        let cpus = if id == feature_id::CPU_TOPOLOGY {
            self.nr_cpus()
        } else {
            None
        };
        Some(Feature::parse(id, b, at, cpus))
    }

    /// Every present feature, decoded.
    pub fn features(&self) -> Vec<(u16, Result<Feature>)> {
        self.feature_ids()
            .into_iter()
            .filter_map(|id| Some((id, self.feature(id)?)))
            .collect()
    }

    /// The records in file order, with their file offsets. After an error in a record's
    /// contents reading goes on with the next record; after a broken record frame (size
    /// below 8 or past the end) it stops.
    pub fn records(&self) -> Records<'a, '_> {
        Records {
            bytes: self.bytes,
            pos: self.data.start,
            end: self.data.end,
            events: &self.events,
            done: false,
        }
    }

    /// The records in time order as perf delivers them (see [`crate::ordered`]).
    pub fn ordered_records(&self) -> OrderedRecords<'a, '_> {
        OrderedRecords {
            records: self.records(),
            queue: RoundQueue::new(),
            ended: false,
        }
    }

    /// The AUXTRACE records (AUX area data with its cpu, tid, idx and offset in the AUX
    /// stream), with their file offsets, in file order; errors end the walk.
    pub fn auxtrace_records(&self) -> impl Iterator<Item = (u64, Auxtrace<'a>)> + '_ {
        self.records()
            .map_while(|r| r.ok())
            .filter_map(|(at, r)| match r {
                Record::Auxtrace(a) => Some((at, a)),
                _ => None,
            })
    }

    /// The event a record belongs to (by its sample or trailer id, as perf finds it; the
    /// first event for records without one).
    pub fn event_of(&self, r: &Record<'_>) -> Option<&EventDesc> {
        let i = match r.id() {
            Some(id) if id != 0 && self.events.events().len() > 1 => self.events.index_of_id(id)?,
            _ => 0,
        };
        self.events.events().get(i)
    }

    /// The intel_pt AUXTRACE_INFO, if the file has one (found by a walk over the record
    /// frames; perf writes it near the start).
    pub fn intel_pt_info(&self) -> Option<Result<IntelPtInfo>> {
        let mut pos = self.data.start;
        while let Ok(Some(frame)) = frame_at(self.bytes, pos, self.data.end) {
            if frame.ty == record_type::AUXTRACE_INFO {
                let r = parse_record(
                    frame.ty,
                    frame.misc,
                    &self.bytes[frame.body],
                    &[],
                    pos as u64,
                    &self.events,
                );
                match r {
                    Ok(Record::AuxtraceInfo(a)) => {
                        if let AuxtracePrivate::IntelPt(pt) = a.private {
                            return Some(Ok(pt));
                        }
                    }
                    Ok(_) => {}
                    Err(e) => return Some(Err(e)),
                }
            }
            pos = frame.next;
        }
        None
    }
}

fn name_from_event_update(events: &mut EventTable, body: &[u8]) {
    // EVENT_UPDATE: u64 type (2 = NAME), u64 id, then the name.
    if body.len() < 16 {
        return;
    }
    let ty = u64::from_le_bytes(body[..8].try_into().unwrap_or([0; 8]));
    let id = u64::from_le_bytes(body[8..16].try_into().unwrap_or([0; 8]));
    if ty != 2 {
        return;
    }
    if let Some(i) = events.index_of_id(id) {
        let name = crate::bytes::until_nul(&body[16..]);
        events.events_mut()[i].name = Some(String::from_utf8_lossy(name).into_owned());
    }
}

/// The frame of one record: where its parts lie.
pub(crate) struct Frame {
    pub ty: u32,
    pub misc: u16,
    pub body: Range<usize>,
    pub extra: Range<usize>,
    pub next: usize,
}

/// The record frame at `pos` (before `end`), `None` at the end.
pub(crate) fn frame_at(bytes: &[u8], pos: usize, end: usize) -> Result<Option<Frame>> {
    let left = end - pos;
    if left == 0 {
        return Ok(None);
    }
    let at = pos as u64;
    if left < 8 {
        return Err(Error::new(
            at,
            ErrorKind::Truncated {
                what: "record header",
                need: 8,
                have: left as u64,
            },
        ));
    }
    let h = &bytes[pos..pos + 8];
    let ty = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
    let misc = u16::from_le_bytes([h[4], h[5]]);
    let size = u16::from_le_bytes([h[6], h[7]]);
    if size < 8 {
        return Err(Error::new(at, ErrorKind::RecordTooSmall { ty, size }));
    }
    if size as usize > left {
        return Err(Error::new(
            at,
            ErrorKind::RecordPastEnd {
                ty,
                size: size as u64,
                left: left as u64,
            },
        ));
    }
    let body = pos + 8..pos + size as usize;
    let extra = trailing_data_size(ty, &bytes[body.clone()]);
    let room = (end - body.end) as u64;
    if extra > room {
        return Err(Error::new(
            at,
            ErrorKind::RecordPastEnd {
                ty,
                size: (size as u64).saturating_add(extra),
                left: left as u64,
            },
        ));
    }
    let extra = body.end..body.end + extra as usize;
    Ok(Some(Frame {
        ty,
        misc,
        next: extra.end,
        body,
        extra,
    }))
}

/// The records of a [`PerfFile`] in file order: `(file offset, record)`.
pub struct Records<'a, 'f> {
    bytes: &'a [u8],
    pos: usize,
    end: usize,
    events: &'f EventTable,
    done: bool,
}

impl<'a> Records<'a, '_> {
    /// The file offset of the next record.
    pub fn offset(&self) -> u64 {
        self.pos as u64
    }
}

impl<'a> Iterator for Records<'a, '_> {
    type Item = Result<(u64, Record<'a>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let frame = match frame_at(self.bytes, self.pos, self.end) {
            Ok(Some(f)) => f,
            Ok(None) => {
                self.done = true;
                return None;
            }
            Err(e) => {
                self.done = true;
                return Some(Err(e));
            }
        };
        let at = self.pos as u64;
        self.pos = frame.next;
        Some(
            parse_record(
                frame.ty,
                frame.misc,
                &self.bytes[frame.body],
                &self.bytes[frame.extra],
                at,
                self.events,
            )
            .map(|r| (at, r)),
        )
    }
}

/// The records of a [`PerfFile`] in perf's time order (FINISHED_ROUND rounds).
pub struct OrderedRecords<'a, 'f> {
    records: Records<'a, 'f>,
    queue: RoundQueue<Result<(u64, Record<'a>)>>,
    ended: bool,
}

impl<'a> OrderedRecords<'a, '_> {
    /// Records that arrived below a time already delivered.
    pub fn out_of_order(&self) -> u64 {
        self.queue.out_of_order()
    }
}

impl<'a> Iterator for OrderedRecords<'a, '_> {
    type Item = Result<(u64, Record<'a>)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(r) = self.queue.pop() {
                return Some(r);
            }
            if self.ended {
                return None;
            }
            match self.records.next() {
                None => {
                    self.ended = true;
                    self.queue.finish();
                }
                Some(Ok((at, r))) => {
                    if let Record::FinishedRound = r {
                        // The round's end first, then what it releases (perf's order).
                        self.queue.push(None, Ok((at, r)));
                        self.queue.finished_round();
                    } else {
                        let t = if r.is_user() { None } else { r.time() };
                        self.queue.push(t, Ok((at, r)));
                    }
                }
                Some(Err(e)) => self.queue.push(None, Err(e)),
            }
        }
    }
}
