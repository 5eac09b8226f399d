//! The side-band file: perf records the decoder needs next to the trace.
//!
//! Layout (all little-endian):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `PTSIDEB1` |
//! | 8 | 4 | header size in bytes (48 for this version) |
//! | 12 | 4 | `attr.type` of the intel_pt PMU |
//! | 16 | 8 | `attr.config` |
//! | 24 | 8 | `attr.sample_type` (what the `sample_id` trailer of each record holds) |
//! | 32 | 2 | `time_shift` of the mmap page |
//! | 34 | 2 | flags: bit 0 = `cap_user_time_zero` (time fields valid) |
//! | 36 | 4 | `time_mult` |
//! | 40 | 8 | `time_zero` |
//!
//! Then the raw perf records, back to back, exactly as in the data ring:
//! an 8-byte `perf_event_header` (u32 type, u16 misc, u16 size) and its body
//! (MMAP2, COMM, SWITCH(_CPU_WIDE), ITRACE_START, AUX, LOST, …). With
//! `sample_id_all` each record ends in the trailer `sample_type` describes
//! (TID: u32 pid, u32 tid; TIME: u64; CPU: u32 cpu, u32 res), in that order.
//!
//! The trace file beside it is the AUX data concatenated in stream order; the
//! AUX records give each chunk's stream offset, size and loss flags.

/// File magic.
pub const MAGIC: &[u8; 8] = b"PTSIDEB1";
/// Header size of this version.
pub const HEADER_SIZE: u32 = 48;

/// The file header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SidebandHeader {
    /// `attr.type`.
    pub pmu_type: u32,
    /// `attr.config`.
    pub config: u64,
    /// `attr.sample_type`.
    pub sample_type: u64,
    /// `time_shift`.
    pub time_shift: u16,
    /// `cap_user_time_zero`: the time conversion fields are valid.
    pub time_valid: bool,
    /// `time_mult`.
    pub time_mult: u32,
    /// `time_zero`.
    pub time_zero: u64,
}

impl SidebandHeader {
    /// The header bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEADER_SIZE as usize);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&HEADER_SIZE.to_le_bytes());
        b.extend_from_slice(&self.pmu_type.to_le_bytes());
        b.extend_from_slice(&self.config.to_le_bytes());
        b.extend_from_slice(&self.sample_type.to_le_bytes());
        b.extend_from_slice(&self.time_shift.to_le_bytes());
        b.extend_from_slice(&u16::from(self.time_valid).to_le_bytes());
        b.extend_from_slice(&self.time_mult.to_le_bytes());
        b.extend_from_slice(&self.time_zero.to_le_bytes());
        b
    }
}

/// A side-band file that does not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SidebandError {
    /// Wrong magic.
    #[error("not a side-band file (bad magic)")]
    BadMagic,
    /// The header is cut short or its size field is too small.
    #[error("truncated or invalid header")]
    BadHeader,
    /// A record's size field is < 8 or runs past the end.
    #[error("record at offset {offset}: bad size {size}")]
    BadRecord {
        /// File offset of the record.
        offset: usize,
        /// Its size field.
        size: u16,
    },
}

/// One record borrowed from a side-band file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SidebandRecord<'a> {
    /// File offset of the record.
    pub offset: usize,
    /// `perf_event_header.type`.
    pub kind: u32,
    /// `perf_event_header.misc`.
    pub misc: u16,
    /// The body after the header.
    pub body: &'a [u8],
}

/// Reads a side-band file from memory.
#[derive(Clone, Debug)]
pub struct SidebandReader<'a> {
    /// The header.
    pub header: SidebandHeader,
    data: &'a [u8],
    pos: usize,
}

impl<'a> SidebandReader<'a> {
    /// Parses the header; records are read by iterating.
    pub fn new(data: &'a [u8]) -> Result<Self, SidebandError> {
        if data.get(..8) != Some(&MAGIC[..]) {
            return Err(SidebandError::BadMagic);
        }
        let u16_at = |o: usize| data.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
        let u32_at = |o: usize| {
            data.get(o..o + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        let u64_at = |o: usize| {
            data.get(o..o + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
        };
        let hs = u32_at(8).ok_or(SidebandError::BadHeader)? as usize;
        if hs < HEADER_SIZE as usize || data.len() < hs {
            return Err(SidebandError::BadHeader);
        }
        let header = (|| {
            Some(SidebandHeader {
                pmu_type: u32_at(12)?,
                config: u64_at(16)?,
                sample_type: u64_at(24)?,
                time_shift: u16_at(32)?,
                time_valid: u16_at(34)? & 1 != 0,
                time_mult: u32_at(36)?,
                time_zero: u64_at(40)?,
            })
        })()
        .ok_or(SidebandError::BadHeader)?;
        Ok(SidebandReader {
            header,
            data,
            pos: hs,
        })
    }
}

impl<'a> Iterator for SidebandReader<'a> {
    type Item = Result<SidebandRecord<'a>, SidebandError>;

    fn next(&mut self) -> Option<Self::Item> {
        let offset = self.pos;
        let hdr = self.data.get(offset..)?;
        if hdr.is_empty() {
            return None;
        }
        let Some(h) = hdr.get(..8) else {
            self.pos = self.data.len();
            return Some(Err(SidebandError::BadRecord { offset, size: 0 }));
        };
        let kind = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let misc = u16::from_le_bytes([h[4], h[5]]);
        let size = u16::from_le_bytes([h[6], h[7]]);
        let Some(rec) = hdr.get(..usize::from(size)).filter(|_| size >= 8) else {
            self.pos = self.data.len();
            return Some(Err(SidebandError::BadRecord { offset, size }));
        };
        self.pos += usize::from(size);
        Some(Ok(SidebandRecord {
            offset,
            kind,
            misc,
            body: &rec[8..],
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let h = SidebandHeader {
            pmu_type: 8,
            config: 0x2001,
            sample_type: 0x80 | 0x2 | 0x4,
            time_shift: 31,
            time_valid: true,
            time_mult: 123,
            time_zero: 456,
        };
        let mut file = h.to_bytes();
        assert_eq!(file.len(), HEADER_SIZE as usize);
        // COMM-like record: type 3, body 16 bytes.
        file.extend_from_slice(&3u32.to_le_bytes());
        file.extend_from_slice(&0x2000u16.to_le_bytes());
        file.extend_from_slice(&24u16.to_le_bytes());
        file.extend_from_slice(&[7; 16]);
        let mut r = SidebandReader::new(&file).unwrap();
        assert_eq!(r.header, h);
        let rec = r.next().unwrap().unwrap();
        assert_eq!(
            (rec.offset, rec.kind, rec.misc, rec.body),
            (48, 3, 0x2000, &[7u8; 16][..])
        );
        assert!(r.next().is_none());
        // Truncated record.
        file.extend_from_slice(&[1, 0, 0, 0, 0, 0, 64, 0]);
        let errs: Vec<_> = SidebandReader::new(&file)
            .unwrap()
            .filter_map(Result::err)
            .collect();
        assert_eq!(
            errs,
            vec![SidebandError::BadRecord {
                offset: 72,
                size: 64
            }]
        );
        assert_eq!(
            SidebandReader::new(b"nope").unwrap_err(),
            SidebandError::BadMagic
        );
        assert_eq!(
            SidebandReader::new(&file[..20]).unwrap_err(),
            SidebandError::BadHeader
        );
    }
}
