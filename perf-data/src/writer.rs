//! Writing perf.data: file mode for a recorder that streams records in as it records
//! ([`PerfFileWriter`]), and pipe mode ([`PipeWriter`]).
//!
//! File layout (as perf writes it): header, the ids of every event, the attrs (each
//! followed by its ids section), the data, then the feature table and the features.
//!
//! Interruption: perf leaves the header's data size 0 until `perf record` exits, and a
//! file whose data size is 0 yields no records in perf (it warns "data size field is 0"
//! and processes nothing). So [`PerfFileWriter::checkpoint`] makes the file on disk
//! complete at any moment: it writes the buffered records, the features after them and
//! then the header with the data size. The writer checkpoints by itself whenever its
//! 1 MiB buffer fills; a recorder checkpoints when it has drained its ring buffers (and
//! on Ctrl-C finishes). Until the next checkpoint the header describes the previous one;
//! just before records overwrite the old features, the header is rewritten without them
//! (so a kill in that short window loses the features, never the records). A recorder
//! killed at any point leaves a file perf reads up to the last checkpoint. Dropping an
//! unfinished writer makes a last checkpoint.
//!
//! A write that fails (a full disk, a file-size limit) leaves the file as the last
//! checkpoint left it: records that were to replace the features could not be written,
//! so the features go back where they were (those bytes are already the file's) and
//! the header names them again. The writer then writes nothing more, not even on drop.

use crate::attr::{EventDesc, EventTable, ATTR_SIZE};
use crate::bytes::Put;
use crate::error::{Error, ErrorKind, Result};
use crate::features::{feature_id, AuxtraceIndexEntry, Feature};
use crate::reader::{FileHeader, Section, FILE_HEADER_SIZE, MAGIC, PIPE_HEADER_SIZE};
use crate::records::{
    encode_auxtrace_header, encode_record, record_type, trailing_data_size, Auxtrace, Record,
    AUXTRACE_RECORD_SIZE,
};
use std::collections::BTreeMap;
use std::io::{Seek, SeekFrom, Write};

/// Bytes buffered before they are written out.
const BUFFER: usize = 1 << 20;

fn io(at: u64) -> impl Fn(std::io::Error) -> Error {
    move |e| Error::new(at, ErrorKind::Io(e.kind()))
}

/// A streaming file-mode perf.data writer.
pub struct PerfFileWriter<W: Write + Seek> {
    out: Option<W>,
    events: EventTable,
    header: FileHeader,
    /// Bytes of data on disk.
    written: u64,
    buf: Vec<u8>,
    features: BTreeMap<u16, Feature>,
    auxtrace_index: Vec<AuxtraceIndexEntry>,
    /// Whether the header on disk points at features that sit after `written`.
    features_on_disk: bool,
    /// The feature table and sections of the last checkpoint, as written after its
    /// data: put back when records that were to replace them fail to be written.
    last_features: Vec<u8>,
    /// A write failed: the file is left as it is (no last checkpoint on drop).
    broken: bool,
}

impl<W: Write + Seek> PerfFileWriter<W> {
    /// Starts a file with `events` (every event of the recording, with the ids its
    /// records carry; names go to EVENT_DESC). Writes the header (data size 0), the ids
    /// and the attrs.
    pub fn new(mut out: W, events: Vec<EventDesc>) -> Result<Self> {
        if events.is_empty() {
            return Err(Error::new(0, ErrorKind::NoAttr));
        }
        let mut head = vec![0u8; FILE_HEADER_SIZE as usize];
        let mut id_sections = Vec::new();
        for e in &events {
            let offset = head.len() as u64;
            for &id in &e.ids {
                head.put_u64(id);
            }
            id_sections.push(Section {
                offset,
                size: e.ids.len() as u64 * 8,
            });
        }
        let attrs_offset = head.len() as u64;
        let entry = ATTR_SIZE as u64 + 16;
        for (e, ids) in events.iter().zip(&id_sections) {
            let mut a = e.attr;
            a.size = ATTR_SIZE;
            head.extend_from_slice(&a.to_bytes());
            head.put_u64(ids.offset);
            head.put_u64(ids.size);
        }
        let data_offset = head.len() as u64;
        let header = FileHeader {
            size: FILE_HEADER_SIZE,
            attr_size: entry,
            attrs: Section {
                offset: attrs_offset,
                size: entry * events.len() as u64,
            },
            data: Section {
                offset: data_offset,
                size: 0,
            },
            ..Default::default()
        };
        head[..FILE_HEADER_SIZE as usize].copy_from_slice(&header.encode());
        out.seek(SeekFrom::Start(0)).map_err(io(0))?;
        out.write_all(&head).map_err(io(0))?;
        Ok(PerfFileWriter {
            out: Some(out),
            events: EventTable::new(events),
            header,
            written: 0,
            buf: Vec::with_capacity(BUFFER),
            features: BTreeMap::new(),
            auxtrace_index: Vec::new(),
            features_on_disk: false,
            last_features: Vec::new(),
            broken: false,
        })
    }

    /// The events.
    pub fn events(&self) -> &[EventDesc] {
        self.events.events()
    }

    /// Sets a feature (replacing one of the same number). EVENT_DESC (from the events)
    /// and the AUXTRACE index (from the AUXTRACE records written) are added by the writer
    /// unless set here.
    pub fn set_feature(&mut self, f: Feature) {
        self.features.insert(f.id(), f);
    }

    /// The file offset the next record will have.
    pub fn offset(&self) -> u64 {
        self.header.data.offset + self.written + self.buf.len() as u64
    }

    /// Bytes of data so far.
    pub fn data_size(&self) -> u64 {
        self.written + self.buf.len() as u64
    }

    /// Appends a record; returns its file offset. Kernel records are encoded with the
    /// sample_type of the event their (trailer or sample) id names.
    pub fn write(&mut self, r: &Record<'_>) -> Result<u64> {
        let at = self.offset();
        encode_record(r, &self.events, &mut self.buf).map_err(|e| Error::new(at, e.kind))?;
        if r.record_type() == record_type::AUXTRACE {
            self.auxtrace_index.push(AuxtraceIndexEntry {
                file_offset: at,
                size: AUXTRACE_RECORD_SIZE as u64,
            });
        }
        self.spill()?;
        Ok(at)
    }

    /// Appends an AUXTRACE record whose data comes in pieces (a ring buffer that
    /// wrapped); `a.data` is ignored. The data is padded to 8 bytes.
    pub fn write_auxtrace(&mut self, a: &Auxtrace<'_>, parts: &[&[u8]]) -> Result<u64> {
        let at = self.offset();
        let size: u64 = parts.iter().map(|p| p.len() as u64).sum();
        let mut h = Vec::with_capacity(48);
        h.extend_from_slice(&record_type::AUXTRACE.to_le_bytes());
        h.put_u16(0);
        h.put_u16(AUXTRACE_RECORD_SIZE);
        encode_auxtrace_header(a, size, &mut h);
        self.buf.extend_from_slice(&h);
        let mut direct = false;
        for p in parts {
            if self.buf.len() + p.len() > BUFFER {
                self.spill_now()?;
                // Large pieces go straight out.
                self.write_out(p)?;
                direct = true;
            } else {
                self.buf.extend_from_slice(p);
            }
        }
        let pad = ((size + 7) & !7) - size;
        self.buf.resize(self.buf.len() + pad as usize, 0);
        self.auxtrace_index.push(AuxtraceIndexEntry {
            file_offset: at,
            size: AUXTRACE_RECORD_SIZE as u64,
        });
        if direct {
            self.checkpoint()?;
        } else {
            self.spill()?;
        }
        Ok(at)
    }

    fn out(&mut self) -> Result<&mut W> {
        let at = self.offset();
        self.out.as_mut().ok_or(Error::new(
            at,
            ErrorKind::Invalid("the writer has finished"),
        ))
    }

    /// Writes bytes at the data's end (the file position is kept there).
    fn write_out(&mut self, b: &[u8]) -> Result<()> {
        if self.features_on_disk {
            // Records are about to overwrite the features: take them out of the header
            // first so that the file stays readable.
            let mut h = self.header;
            h.data.size = self.written;
            h.features = [0; 4];
            self.put_header(&h)?;
            self.features_on_disk = false;
        }
        let at = self.header.data.offset + self.written;
        let out = self.out()?;
        // At the data's end even after a write that failed part way.
        out.seek(SeekFrom::Start(at)).map_err(io(at))?;
        if let Err(e) = out.write_all(b) {
            self.failed();
            return Err(io(at)(e));
        }
        self.written += b.len() as u64;
        Ok(())
    }

    /// A write failed (a full disk, a file-size limit): the file goes back to the last
    /// checkpoint. The bytes its features held are still the file's (records written
    /// over them are past the header's data size), so they go back as they were, with
    /// the header naming them.
    fn failed(&mut self) {
        self.broken = true;
        if !self.features_on_disk && !self.last_features.is_empty() {
            let _ = self.restore_features();
        }
    }

    /// Writes the last checkpoint's features back after its data, and its header.
    fn restore_features(&mut self) -> Result<()> {
        let end = self.header.data.offset + self.header.data.size;
        let features = std::mem::take(&mut self.last_features);
        let out = self.out()?;
        out.seek(SeekFrom::Start(end)).map_err(io(end))?;
        let r = out.write_all(&features).map_err(io(end));
        self.last_features = features;
        r?;
        let h = self.header;
        self.put_header(&h)?;
        self.out()?.flush().map_err(io(0))?;
        self.features_on_disk = true;
        Ok(())
    }

    fn put_header(&mut self, h: &FileHeader) -> Result<()> {
        let end = self.header.data.offset + self.written;
        let out = self.out()?;
        out.seek(SeekFrom::Start(0)).map_err(io(0))?;
        out.write_all(&h.encode()).map_err(io(0))?;
        out.seek(SeekFrom::Start(end)).map_err(io(end))?;
        Ok(())
    }

    /// Writes the buffer out once it is full, as a checkpoint: the file on disk stays
    /// complete (features and header follow every write of records).
    fn spill(&mut self) -> Result<()> {
        if self.buf.len() >= BUFFER {
            self.checkpoint()?;
        }
        Ok(())
    }

    fn spill_now(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let buf = std::mem::take(&mut self.buf);
        let r = self.write_out(&buf);
        self.buf = buf;
        self.buf.clear();
        r
    }

    /// The features as they will be written.
    fn feature_list(&self) -> Vec<Feature> {
        let mut all = self.features.clone();
        all.entry(feature_id::EVENT_DESC)
            .or_insert_with(|| Feature::EventDesc(self.events.events().to_vec()));
        if !self.auxtrace_index.is_empty() {
            all.entry(feature_id::AUXTRACE)
                .or_insert_with(|| Feature::Auxtrace(self.auxtrace_index.clone()));
        }
        all.into_values().collect()
    }

    /// Makes the file on disk complete: records so far, the features, and a header with
    /// the data size. See the module docs.
    pub fn checkpoint(&mut self) -> Result<()> {
        let r = self.checkpoint_now();
        if r.is_err() {
            self.failed();
        }
        r
    }

    fn checkpoint_now(&mut self) -> Result<()> {
        self.spill_now()?;
        let features = self.feature_list();
        let data_end = self.header.data.offset + self.written;
        let mut table = Vec::with_capacity(features.len() * 16);
        let mut body = Vec::new();
        let mut bits = [0u64; 4];
        let body_start = data_end + features.len() as u64 * 16;
        for f in &features {
            let start = body.len();
            f.encode(&mut body);
            table.put_u64(body_start + start as u64);
            table.put_u64((body.len() - start) as u64);
            let id = f.id();
            bits[id as usize / 64] |= 1 << (id % 64);
        }
        let out = self.out()?;
        out.seek(SeekFrom::Start(data_end)).map_err(io(data_end))?;
        out.write_all(&table).map_err(io(data_end))?;
        out.write_all(&body).map_err(io(body_start))?;
        out.flush().map_err(io(data_end))?;
        self.header.data.size = self.written;
        self.header.features = bits;
        let h = self.header;
        self.put_header(&h)?;
        self.out()?.flush().map_err(io(0))?;
        self.features_on_disk = true;
        self.last_features = table;
        self.last_features.extend_from_slice(&body);
        Ok(())
    }

    /// The output (tests look at what is on disk).
    #[cfg(test)]
    pub(crate) fn out_ref(&self) -> &W {
        self.out.as_ref().expect("the writer has not finished")
    }

    /// Finishes the file (a last checkpoint) and hands back the output.
    pub fn finish(mut self) -> Result<W> {
        self.checkpoint()?;
        let at = self.offset();
        self.out.take().ok_or(Error::new(
            at,
            ErrorKind::Invalid("the writer has finished"),
        ))
    }
}

impl<W: Write + Seek> Drop for PerfFileWriter<W> {
    fn drop(&mut self) {
        if self.out.is_some() && !self.broken {
            // Best effort: an unfinished writer (an early return, a panic) still leaves a
            // file perf reads.
            let _ = self.checkpoint();
        }
    }
}

/// A pipe-mode writer: the 16-byte header, then records (events as HEADER_ATTR records,
/// features as HEADER_FEATURE records, both written by the caller in perf's order:
/// attrs first).
pub struct PipeWriter<W: Write> {
    out: W,
    events: EventTable,
    offset: u64,
    buf: Vec<u8>,
}

impl<W: Write> PipeWriter<W> {
    /// Writes the pipe header.
    pub fn new(mut out: W) -> Result<Self> {
        let mut h = Vec::with_capacity(16);
        h.put_u64(MAGIC);
        h.put_u64(PIPE_HEADER_SIZE);
        out.write_all(&h).map_err(io(0))?;
        Ok(PipeWriter {
            out,
            events: EventTable::default(),
            offset: PIPE_HEADER_SIZE,
            buf: Vec::new(),
        })
    }

    /// Writes a record (a HEADER_ATTR also registers its event for the records after it).
    pub fn write(&mut self, r: &Record<'_>) -> Result<u64> {
        let at = self.offset;
        self.buf.clear();
        encode_record(r, &self.events, &mut self.buf).map_err(|e| Error::new(at, e.kind))?;
        self.out.write_all(&self.buf).map_err(io(at))?;
        self.offset += self.buf.len() as u64;
        if let Record::HeaderAttr { attr, ids } = r {
            self.events.push(EventDesc {
                attr: *attr,
                ids: ids.iter().collect(),
                name: None,
            });
        }
        Ok(at)
    }

    /// Writes a record's frame as it is (its header, body and any data after it,
    /// such as an AUXTRACE record's trace), encoded for the events written before.
    pub fn write_frame(&mut self, frame: &[u8]) -> Result<u64> {
        let at = self.offset;
        self.out.write_all(frame).map_err(io(at))?;
        self.offset += frame.len() as u64;
        Ok(at)
    }

    /// Flushes and hands back the output.
    pub fn finish(mut self) -> Result<W> {
        self.out.flush().map_err(io(self.offset))?;
        Ok(self.out)
    }
}

/// Writes the file-mode perf.data `perf` to `out` in pipe mode, as perf writes a
/// pipe (`perf record -o -`, `perf inject -o -`): the pipe header; a HEADER_ATTR
/// per event; a HEADER_FEATURE per header feature a pipe carries (all but
/// TRACING_DATA, BUILD_ID and the AUXTRACE index, whose file offsets a pipe does
/// not have), then the last-feature mark (no HEADER_BUILD_ID: perf 6.1 loses
/// its place in a pipe after one, and `perf inject -o -` writes none); then the
/// data's records as they are, in the order perf delivers them (time order),
/// each AUXTRACE record right after the AUX record that announced its data
/// (as `perf inject -o -` writes them), in one round: perf decodes a pipe's
/// trace as the records after it are delivered, so the code mapped before
/// the trace must come before it, and the whole trace before the round ends. A pipe-mode `perf` is
/// copied as it is. Nothing is written after a broken frame (the error names
/// it).
pub fn write_pipe<W: Write>(perf: &crate::PerfFile<'_>, out: W) -> Result<W> {
    let bytes = perf.bytes();
    let mut w = PipeWriter::new(out)?;
    let data = perf.data_range();
    if perf.is_pipe() {
        let start = (data.start as usize).max(PIPE_HEADER_SIZE as usize);
        if let Some(rest) = bytes.get(start..data.end as usize) {
            w.write_frame(rest)?;
        }
        return w.finish();
    }
    for e in perf.events() {
        let mut ids = Vec::with_capacity(e.ids.len() * 8);
        for &id in &e.ids {
            ids.put_u64(id);
        }
        let mut attr = e.attr;
        attr.size = ATTR_SIZE;
        w.write(&Record::HeaderAttr {
            attr,
            ids: crate::U64s::new(&ids),
        })?;
    }
    let skipped = [
        feature_id::TRACING_DATA,
        feature_id::BUILD_ID,
        feature_id::AUXTRACE,
    ];
    for id in perf.feature_ids() {
        if skipped.contains(&id) {
            continue;
        }
        if let Some((section, _)) = perf.feature_raw(id) {
            w.write(&Record::HeaderFeature {
                feature: u64::from(id),
                data: section,
            })?;
        }
    }
    w.write(&Record::HeaderFeature {
        feature: u64::from(feature_id::LAST),
        data: &[],
    })?;
    // The frames: (type, start, end).
    let mut frames = Vec::new();
    let mut at = data.start;
    while at + 8 <= data.end {
        let head = &bytes[at as usize..at as usize + 8];
        let ty = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let size = u64::from(u16::from_le_bytes([head[6], head[7]]));
        let body_end = at + size;
        if size < 8 || body_end > data.end {
            return Err(Error::new(
                at,
                ErrorKind::RecordPastEnd {
                    ty,
                    size,
                    left: data.end - at,
                },
            ));
        }
        let extra = trailing_data_size(ty, &bytes[at as usize + 8..body_end as usize]);
        let end = body_end.saturating_add(extra);
        if end > data.end {
            return Err(Error::new(
                at,
                ErrorKind::RecordPastEnd {
                    ty,
                    size: size + extra,
                    left: data.end - at,
                },
            ));
        }
        frames.push((ty, at as usize, end as usize));
        at = end;
    }
    let frame = |at: u64| {
        frames
            .binary_search_by_key(&(at as usize), |f| f.1)
            .ok()
            .map(|i| &bytes[frames[i].1..frames[i].2])
    };
    // The AUXTRACE records not written yet, in file order: (cpu, tid, offset,
    // file offset).
    let mut pending: Vec<(u32, u32, u64, u64)> = perf
        .auxtrace_records()
        .map(|(at, a)| (a.cpu, a.tid, a.offset, at))
        .collect();
    let has_aux = perf.records().any(|r| matches!(r, Ok((_, Record::Aux(_)))));
    for r in perf.ordered_records() {
        let (at, r) = r.map_err(|e| Error::new(e.offset, e.kind))?;
        match r {
            Record::Auxtrace(_) if has_aux => continue,
            // The records are in perf's order already: one round, ended
            // at the end (a round marker between an AUX record and the data
            // it announces would have perf decode the queue without it).
            Record::FinishedRound => continue,
            _ => {}
        }
        if let Some(f) = frame(at) {
            w.write_frame(f)?;
        }
        if let Record::Aux(x) = r {
            let end = x.aux_offset.saturating_add(x.aux_size);
            let (cpu, tid) = (x.sample_id.cpu, x.sample_id.tid);
            let mut i = 0;
            while i < pending.len() {
                let (c, t, offset, fat) = pending[i];
                let same = if c != u32::MAX {
                    Some(c) == cpu
                } else {
                    Some(t) == tid
                };
                if same && offset < end {
                    if let Some(f) = frame(fat) {
                        w.write_frame(f)?;
                    }
                    pending.remove(i);
                } else {
                    i += 1;
                }
            }
        }
    }
    if has_aux {
        // Trace no AUX record announced.
        for &(_, _, _, fat) in &pending {
            if let Some(f) = frame(fat) {
                w.write_frame(f)?;
            }
        }
    }
    w.write(&Record::FinishedRound)?;
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intel_pt::{config, intel_pt_attr};
    use crate::{Comm, IntelPtInfo, PerfFile, RecordingSetup, RecordingWriter, SampleId};
    use std::io::Cursor;

    /// A recording written in pipe mode reads as the same events, features and
    /// records, preceded by perf's pipe records (attrs, features, the last
    /// feature's mark).
    #[test]
    fn a_recording_written_as_a_pipe() {
        let pmu = 8;
        let trace = EventDesc {
            attr: intel_pt_attr(pmu, config::DEFAULT, true, false),
            ids: vec![7],
            name: Some("intel_pt//u".into()),
        };
        let mut setup = RecordingSetup::new(trace, IntelPtInfo::new(pmu));
        setup.cmdline = vec!["ptperf".into(), "record".into()];
        let mut w = RecordingWriter::new(Cursor::new(Vec::new()), "mem", setup).unwrap();
        w.finish_init().unwrap();
        w.write(&Record::Comm(Comm {
            misc: 0,
            pid: 5,
            tid: 5,
            comm: "x".into(),
            sample_id: SampleId {
                pid: Some(5),
                tid: Some(5),
                time: Some(1),
                id: Some(7),
                ..Default::default()
            },
        }))
        .unwrap();
        let psb = [0x02, 0x82].repeat(8);
        let aux = Auxtrace {
            offset: 0,
            reference: 0,
            idx: 0,
            tid: 5,
            cpu: u32::MAX,
            data: &psb,
        };
        w.write(&Record::Auxtrace(aux)).unwrap();
        w.finish_round().unwrap();
        let file = w.finish().unwrap().into_inner();
        let perf = PerfFile::parse(&file).unwrap();
        let pipe = write_pipe(&perf, Vec::new()).unwrap();
        let piped = PerfFile::parse(&pipe).unwrap();
        assert!(piped.is_pipe());
        assert!(piped.warnings().is_empty(), "{:?}", piped.warnings());
        let names = |p: &PerfFile<'_>| -> Vec<&'static str> {
            p.records().map(|r| r.unwrap().1.name()).collect()
        };
        let (a, b) = (names(&perf), names(&piped));
        let head = b.len() - a.len();
        // No AUX record: the trace where perf delivers it.
        assert_eq!(
            a,
            [
                "AUXTRACE_INFO",
                "FINISHED_INIT",
                "COMM",
                "AUXTRACE",
                "FINISHED_ROUND"
            ]
        );
        assert_eq!(
            b[head..],
            [
                "AUXTRACE_INFO",
                "FINISHED_INIT",
                "AUXTRACE",
                "COMM",
                "FINISHED_ROUND"
            ]
        );
        assert!(
            b[..head].iter().all(|n| ["ATTR", "FEATURE"].contains(n)),
            "{b:?}"
        );
        assert_eq!(piped.events()[0].attr, perf.events()[0].attr);
        assert_eq!(piped.events()[0].ids, [7]);
        assert_eq!(
            piped.feature(feature_id::CMDLINE).unwrap().unwrap(),
            perf.feature(feature_id::CMDLINE).unwrap().unwrap()
        );
        let trace: Vec<_> = piped
            .auxtrace_records()
            .map(|(_, a)| a.data.to_vec())
            .collect();
        assert_eq!(trace, [psb]);
        // A pipe goes through as it is.
        assert_eq!(write_pipe(&piped, Vec::new()).unwrap(), pipe);
    }
}
