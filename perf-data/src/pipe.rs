//! Pipe mode from any `Read` (`perf record -o - | …`, `perf inject -o -`): records
//! stream in, events arrive as HEADER_ATTR records and features as HEADER_FEATURE ones.
//! Each record is read into one reused buffer and handed out borrowing it.

use crate::attr::{EventDesc, EventTable};
use crate::error::{Error, ErrorKind, Result};
use crate::features::{feature_id, Feature};
use crate::reader::{check_magic, PIPE_HEADER_SIZE};
use crate::records::{parse_record, trailing_data_size, Record};
use std::io::Read;

/// A streaming pipe-mode reader.
pub struct PipeReader<R> {
    input: R,
    buf: Vec<u8>,
    offset: u64,
    events: EventTable,
    done: bool,
}

fn io_err(at: u64, e: std::io::Error) -> Error {
    Error::new(at, ErrorKind::Io(e.kind()))
}

/// Reads exactly `n` bytes into `buf` (appending), growing it only as bytes arrive so
/// that a bogus size cannot make it allocate more than the input holds. Returns the
/// bytes read.
fn read_up_to(input: &mut impl Read, n: u64, buf: &mut Vec<u8>) -> std::io::Result<u64> {
    input.take(n).read_to_end(buf).map(|k| k as u64)
}

impl<R: Read> PipeReader<R> {
    /// Reads and checks the 16-byte pipe header.
    pub fn new(mut input: R) -> Result<Self> {
        let mut h = Vec::with_capacity(16);
        let got = read_up_to(&mut input, 16, &mut h).map_err(|e| io_err(0, e))?;
        if got < 8 {
            return Err(Error::new(
                0,
                ErrorKind::Truncated {
                    what: "perf.data header",
                    need: 16,
                    have: got,
                },
            ));
        }
        let size = check_magic(&h)?;
        if size != PIPE_HEADER_SIZE {
            // A file-mode header needs seeking: that is PerfFile's job.
            return Err(Error::new(8, ErrorKind::HeaderSize(size)));
        }
        Ok(PipeReader {
            input,
            buf: Vec::new(),
            offset: PIPE_HEADER_SIZE,
            events: EventTable::default(),
            done: false,
        })
    }

    /// The events announced so far.
    pub fn events(&self) -> &[EventDesc] {
        self.events.events()
    }

    /// The stream offset of the next record.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The next record and its stream offset; `None` at the end of the stream. After an
    /// error in a record's contents the stream goes on; after a broken frame or an I/O
    /// error it ends.
    pub fn next_record(&mut self) -> Result<Option<(u64, Record<'_>)>> {
        if self.done {
            return Ok(None);
        }
        let at = self.offset;
        self.buf.clear();
        let got = read_up_to(&mut self.input, 8, &mut self.buf).map_err(|e| {
            self.done = true;
            io_err(at, e)
        })?;
        if got == 0 {
            self.done = true;
            return Ok(None);
        }
        let fail = |s: &mut Self, e: Error| -> Result<Option<(u64, Record<'_>)>> {
            s.done = true;
            Err(e)
        };
        if got < 8 {
            return fail(
                self,
                Error::new(
                    at,
                    ErrorKind::Truncated {
                        what: "record header",
                        need: 8,
                        have: got,
                    },
                ),
            );
        }
        let ty = u32::from_le_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
        let misc = u16::from_le_bytes([self.buf[4], self.buf[5]]);
        let size = u16::from_le_bytes([self.buf[6], self.buf[7]]);
        if size < 8 {
            return fail(self, Error::new(at, ErrorKind::RecordTooSmall { ty, size }));
        }
        let body_len = size as u64 - 8;
        let got = match read_up_to(&mut self.input, body_len, &mut self.buf) {
            Ok(n) => n,
            Err(e) => return fail(self, io_err(at, e)),
        };
        if got < body_len {
            return fail(
                self,
                Error::new(
                    at,
                    ErrorKind::RecordPastEnd {
                        ty,
                        size: size as u64,
                        left: 8 + got,
                    },
                ),
            );
        }
        let extra = trailing_data_size(ty, &self.buf[8..]);
        let got = match read_up_to(&mut self.input, extra, &mut self.buf) {
            Ok(n) => n,
            Err(e) => return fail(self, io_err(at, e)),
        };
        if got < extra {
            return fail(
                self,
                Error::new(
                    at,
                    ErrorKind::RecordPastEnd {
                        ty,
                        size: (size as u64).saturating_add(extra),
                        left: size as u64 + got,
                    },
                ),
            );
        }
        self.offset = self
            .offset
            .saturating_add(size as u64)
            .saturating_add(extra);
        let (body, extra) = self.buf[8..].split_at(size as usize - 8);
        let rec = parse_record(ty, misc, body, extra, at, &self.events)?;
        match &rec {
            Record::HeaderAttr { attr, ids } => self.events.push(EventDesc {
                attr: *attr,
                ids: ids.iter().collect(),
                name: None,
            }),
            Record::HeaderFeature { feature, data }
                if *feature == feature_id::EVENT_DESC as u64 =>
            {
                if let Ok(Feature::EventDesc(descs)) =
                    Feature::parse(feature_id::EVENT_DESC, data, at + 16, None)
                {
                    for (e, d) in self.events.events_mut().iter_mut().zip(descs) {
                        e.name = e.name.take().or(d.name);
                    }
                }
            }
            _ => {}
        }
        Ok(Some((at, rec)))
    }
}
