//! Ring-buffer logic of the perf mmap areas, on plain byte slices.
//!
//! Positions (`data_head`, `aux_head`, …) are ever-increasing byte counts;
//! the buffer index is `pos % len` (len is a power of two). Keeping this
//! apart from the mmap code lets it be tested on in-memory rings.

use crate::backend::{LossKind, TraceItem};

/// `PERF_RECORD_LOST`.
pub const PERF_RECORD_LOST: u32 = 2;
/// `PERF_RECORD_AUX`.
pub const PERF_RECORD_AUX: u32 = 11;
/// `PERF_AUX_FLAG_TRUNCATED`.
pub const AUX_TRUNCATED: u64 = 0x01;
/// `PERF_AUX_FLAG_OVERWRITE`.
pub const AUX_OVERWRITE: u64 = 0x02;
/// `PERF_AUX_FLAG_PARTIAL`.
pub const AUX_PARTIAL: u64 = 0x04;
/// `PERF_AUX_FLAG_COLLISION`.
pub const AUX_COLLISION: u64 = 0x08;

/// A malformed ring or record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RingError {
    /// The ring length is not a non-zero power of two.
    #[error("ring length {len} is not a power of two")]
    BadLength {
        /// The length.
        len: usize,
    },
    /// head − tail exceeds the ring (or head < tail).
    #[error("positions tail {tail} / head {head} do not fit a ring of {len} bytes")]
    BadPositions {
        /// Tail.
        tail: u64,
        /// Head.
        head: u64,
        /// Ring length.
        len: usize,
    },
    /// A record header is shorter than 8 bytes or runs past the head.
    #[error("record at position {pos}: size {size} invalid ({avail} bytes available)")]
    BadRecord {
        /// Stream position of the record.
        pos: u64,
        /// Its size field.
        size: u16,
        /// Bytes up to the head.
        avail: u64,
    },
}

fn check_len(len: usize) -> Result<(), RingError> {
    if len == 0 || !len.is_power_of_two() {
        return Err(RingError::BadLength { len });
    }
    Ok(())
}

/// Copies ring positions `[from, to)` into `out`, unwrapping at the end.
pub fn copy_out(ring: &[u8], from: u64, to: u64, out: &mut Vec<u8>) -> Result<(), RingError> {
    check_len(ring.len())?;
    let len = ring.len() as u64;
    if to < from || to - from > len {
        return Err(RingError::BadPositions {
            tail: from,
            head: to,
            len: ring.len(),
        });
    }
    let start = (from % len) as usize;
    let n = (to - from) as usize;
    let first = n.min(ring.len() - start);
    out.extend_from_slice(&ring[start..start + first]);
    out.extend_from_slice(&ring[..n - first]);
    Ok(())
}

/// Full-trace mode: the bytes between `tail` (already consumed) and `head`.
///
/// Returns the item and the new tail (= head) the caller stores in `aux_tail`.
pub fn read_aux(ring: &[u8], tail: u64, head: u64) -> Result<(Option<TraceItem>, u64), RingError> {
    if head == tail {
        check_len(ring.len())?;
        return Ok((None, tail));
    }
    let mut bytes = Vec::with_capacity((head.saturating_sub(tail)) as usize);
    copy_out(ring, tail, head, &mut bytes)?;
    Ok((
        Some(TraceItem::Data {
            offset: tail,
            bytes,
        }),
        head,
    ))
}

/// Snapshot (overwrite) mode: the newest data ending at `head`.
///
/// `last` is the head of the previous snapshot. When more than a ring's
/// worth was written since, the whole ring is taken and the older part is
/// reported as overwritten; the decoder then syncs at the first PSB.
pub fn read_snapshot(ring: &[u8], last: u64, head: u64) -> Result<Vec<TraceItem>, RingError> {
    check_len(ring.len())?;
    let len = ring.len() as u64;
    if head < last {
        return Err(RingError::BadPositions {
            tail: last,
            head,
            len: ring.len(),
        });
    }
    let mut items = Vec::new();
    let from = if head - last > len {
        let from = head - len;
        items.push(TraceItem::Lost {
            offset: last,
            size: Some(from - last),
            kind: LossKind::Overwritten,
        });
        from
    } else {
        last
    };
    if head > from {
        let mut bytes = Vec::with_capacity((head - from) as usize);
        copy_out(ring, from, head, &mut bytes)?;
        items.push(TraceItem::Data {
            offset: from,
            bytes,
        });
    }
    Ok(items)
}

/// One raw record of the data (side-band) ring: header and body as in the ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawRecord {
    /// `perf_event_header.type`.
    pub kind: u32,
    /// `perf_event_header.misc`.
    pub misc: u16,
    /// The whole record, header included.
    pub bytes: Vec<u8>,
}

impl RawRecord {
    /// The body after the 8-byte header.
    pub fn body(&self) -> &[u8] {
        self.bytes.get(8..).unwrap_or(&[])
    }

    /// The `i`-th u64 of the body.
    pub fn u64_at(&self, i: usize) -> Option<u64> {
        let b = self.body().get(i * 8..i * 8 + 8)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    /// What this record says about lost data, if anything: AUX records with
    /// TRUNCATED/OVERWRITE/PARTIAL/COLLISION flags and LOST records.
    pub fn losses(&self) -> Vec<TraceItem> {
        let mut out = Vec::new();
        match self.kind {
            PERF_RECORD_AUX => {
                let (Some(offset), Some(size), Some(flags)) =
                    (self.u64_at(0), self.u64_at(1), self.u64_at(2))
                else {
                    return out;
                };
                for (bit, kind) in [
                    (AUX_TRUNCATED, LossKind::Truncated),
                    (AUX_OVERWRITE, LossKind::Overwritten),
                    (AUX_PARTIAL, LossKind::Partial),
                    (AUX_COLLISION, LossKind::Collision),
                ] {
                    if flags & bit != 0 {
                        // TRUNCATED: the loss starts where this chunk ends.
                        let at = if bit == AUX_TRUNCATED {
                            offset + size
                        } else {
                            offset
                        };
                        out.push(TraceItem::Lost {
                            offset: at,
                            size: None,
                            kind,
                        });
                    }
                }
            }
            PERF_RECORD_LOST => {
                if let Some(count) = self.u64_at(1) {
                    out.push(TraceItem::Lost {
                        offset: 0,
                        size: None,
                        kind: LossKind::SidebandRecords { count },
                    });
                }
            }
            _ => {}
        }
        out
    }
}

/// Parses the records between `tail` and `head` of the data ring; a record
/// may wrap around the end. Returns the records and the new tail.
pub fn read_records(ring: &[u8], tail: u64, head: u64) -> Result<(Vec<RawRecord>, u64), RingError> {
    check_len(ring.len())?;
    if head < tail || head - tail > ring.len() as u64 {
        return Err(RingError::BadPositions {
            tail,
            head,
            len: ring.len(),
        });
    }
    let mut pos = tail;
    let mut out = Vec::new();
    let mut hdr = Vec::with_capacity(8);
    while pos < head {
        let avail = head - pos;
        hdr.clear();
        if avail < 8 {
            return Err(RingError::BadRecord {
                pos,
                size: 0,
                avail,
            });
        }
        copy_out(ring, pos, pos + 8, &mut hdr)?;
        let kind = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
        let misc = u16::from_le_bytes([hdr[4], hdr[5]]);
        let size = u16::from_le_bytes([hdr[6], hdr[7]]);
        if size < 8 || u64::from(size) > avail {
            return Err(RingError::BadRecord { pos, size, avail });
        }
        let mut bytes = Vec::with_capacity(usize::from(size));
        copy_out(ring, pos, pos + u64::from(size), &mut bytes)?;
        out.push(RawRecord { kind, misc, bytes });
        pos += u64::from(size);
    }
    Ok((out, pos))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring_with(len: usize, start_pos: u64, data: &[u8]) -> Vec<u8> {
        let mut ring = vec![0u8; len];
        for (i, &b) in data.iter().enumerate() {
            ring[((start_pos + i as u64) % len as u64) as usize] = b;
        }
        ring
    }

    fn record(kind: u32, body: &[u64]) -> Vec<u8> {
        let size = 8 + 8 * body.len() as u16;
        let mut r = kind.to_le_bytes().to_vec();
        r.extend_from_slice(&0u16.to_le_bytes());
        r.extend_from_slice(&size.to_le_bytes());
        for v in body {
            r.extend_from_slice(&v.to_le_bytes());
        }
        r
    }

    #[test]
    fn aux_without_wrap() {
        let ring = ring_with(16, 0, b"abcdefgh");
        let (item, tail) = read_aux(&ring, 2, 6).unwrap();
        assert_eq!(
            item,
            Some(TraceItem::Data {
                offset: 2,
                bytes: b"cdef".to_vec()
            })
        );
        assert_eq!(tail, 6);
        assert_eq!(read_aux(&ring, 6, 6).unwrap(), (None, 6));
    }

    #[test]
    fn aux_wraps() {
        // 10 bytes written from position 28 of a 16-byte ring: 4 at the end, 6 at the start.
        let ring = ring_with(16, 28, b"0123456789");
        let (item, tail) = read_aux(&ring, 28, 38).unwrap();
        assert_eq!(
            item,
            Some(TraceItem::Data {
                offset: 28,
                bytes: b"0123456789".to_vec()
            })
        );
        assert_eq!(tail, 38);
        // Exactly one full ring.
        let full = ring_with(8, 5, b"ABCDEFGH");
        let (item, _) = read_aux(&full, 5, 13).unwrap();
        assert_eq!(
            item,
            Some(TraceItem::Data {
                offset: 5,
                bytes: b"ABCDEFGH".to_vec()
            })
        );
        assert!(matches!(
            read_aux(&full, 5, 14),
            Err(RingError::BadPositions { .. })
        ));
        assert!(matches!(
            read_aux(&full, 9, 5),
            Err(RingError::BadPositions { .. })
        ));
        assert_eq!(
            read_aux(&[0u8; 12], 0, 4),
            Err(RingError::BadLength { len: 12 })
        );
    }

    #[test]
    fn snapshot_overwrite() {
        // 20 bytes written into an 8-byte ring: only the newest 8 survive.
        let data: Vec<u8> = (0..20).collect();
        let ring = ring_with(8, 0, &data);
        let items = read_snapshot(&ring, 0, 20).unwrap();
        assert_eq!(
            items,
            vec![
                TraceItem::Lost {
                    offset: 0,
                    size: Some(12),
                    kind: LossKind::Overwritten
                },
                TraceItem::Data {
                    offset: 12,
                    bytes: (12..20).collect()
                },
            ]
        );
        // Less than a ring since the last snapshot: just the new part.
        let items = read_snapshot(&ring, 15, 20).unwrap();
        assert_eq!(
            items,
            vec![TraceItem::Data {
                offset: 15,
                bytes: (15..20).collect()
            }]
        );
        assert_eq!(read_snapshot(&ring, 20, 20).unwrap(), vec![]);
    }

    #[test]
    fn records_wrap_and_losses() {
        let mut stream = record(PERF_RECORD_AUX, &[0, 100, AUX_TRUNCATED]);
        stream.extend(record(PERF_RECORD_LOST, &[7, 3]));
        stream.extend(record(
            PERF_RECORD_AUX,
            &[100, 50, AUX_OVERWRITE | AUX_PARTIAL],
        ));
        // Start near the end of a 64-byte ring so the second record wraps.
        let ring = ring_with(128, 100, &stream);
        let (recs, tail) = read_records(&ring, 100, 100 + stream.len() as u64).unwrap();
        assert_eq!(tail, 100 + stream.len() as u64);
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[1].bytes, record(PERF_RECORD_LOST, &[7, 3]));
        let losses: Vec<TraceItem> = recs.iter().flat_map(|r| r.losses()).collect();
        assert_eq!(
            losses,
            vec![
                TraceItem::Lost {
                    offset: 100,
                    size: None,
                    kind: LossKind::Truncated
                },
                TraceItem::Lost {
                    offset: 0,
                    size: None,
                    kind: LossKind::SidebandRecords { count: 3 }
                },
                TraceItem::Lost {
                    offset: 100,
                    size: None,
                    kind: LossKind::Overwritten
                },
                TraceItem::Lost {
                    offset: 100,
                    size: None,
                    kind: LossKind::Partial
                },
            ]
        );
        // A header claiming more than is there.
        let mut bad = record(PERF_RECORD_AUX, &[0, 0, 0]);
        bad[6] = 200;
        let ring = ring_with(64, 0, &bad);
        assert!(matches!(
            read_records(&ring, 0, bad.len() as u64),
            Err(RingError::BadRecord {
                pos: 0,
                size: 200,
                ..
            })
        ));
        let ring = ring_with(64, 0, &[0; 8]);
        assert!(matches!(
            read_records(&ring, 0, 8),
            Err(RingError::BadRecord { size: 0, .. })
        ));
    }
}
