//! The AUX queues of a recording: the AUXTRACE pieces of each AUX area (one per CPU,
//! or one per thread), how they join into streams that decode as one, and what was
//! lost between them.
//!
//! perf queues each AUXTRACE record by its mmap index (`idx`); a queue's CPU and
//! thread are those of its first piece. In full-trace mode a piece continues the one
//! before it when its AUX offset is where that one ended (perf pads each piece's data
//! to eight bytes, so the next offset may lie up to seven bytes before the padded
//! end: those bytes are padding and are cut off when joining, so that a packet split
//! between the pieces is whole again). A later offset means data was lost in
//! between. In snapshot mode each piece is a snapshot of the whole AUX area; where it
//! continues the one before is found in the data ([`super::overlap`]).
//!
//! A run of pieces that continue each other is a [`Segment`], decoded as one trace:
//! a single piece is borrowed from the file as it is; several are joined into one
//! buffer when the segment is first decoded (perf decodes piece by piece instead,
//! and on 64-bit hosts does not join a packet split between two pieces).

use super::overlap::find_overlap;
use std::sync::OnceLock;

/// One AUXTRACE record's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuxPiece<'a> {
    /// File offset of the AUXTRACE record.
    pub record_offset: u64,
    /// File offset of its data.
    pub data_offset: u64,
    /// Offset of the data in the AUX area's stream (for snapshots: the head minus
    /// the size).
    pub aux_offset: u64,
    /// The TSC when the data was copied out (it completes the trace's 7-byte TSCs).
    pub reference: u64,
    /// The data (a view of the file), as far as the file holds it.
    pub data: &'a [u8],
    /// Bytes the record claims beyond the end of the file (0 for a whole piece).
    pub cut_off: u64,
}

impl AuxPiece<'_> {
    /// The AUX stream offset one past the data the record claims.
    pub fn aux_end(&self) -> u64 {
        self.aux_offset
            .saturating_add(self.data.len() as u64)
            .saturating_add(self.cut_off)
    }
}

/// A part of a segment: bytes of one piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    /// The piece (index in [`Queue::pieces`]).
    pub piece: usize,
    /// The first byte of the piece's data used.
    pub skip: usize,
    /// Bytes used.
    pub len: usize,
    /// Where they start in the segment.
    pub at: usize,
}

/// A run of data that decodes as one trace.
#[derive(Debug)]
pub struct Segment {
    /// Its parts in order.
    pub parts: Vec<Part>,
    /// Trace data was lost (or could not be joined) before it.
    pub lost_before: Option<LostKind>,
    joined: OnceLock<Box<[u8]>>,
}

impl Segment {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.parts.last().map_or(0, |p| p.at + p.len)
    }

    /// Whether it holds no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The part that holds segment offset `at`.
    pub fn part_at(&self, at: u64) -> Option<&Part> {
        let i = self.parts.partition_point(|p| (p.at as u64) <= at);
        self.parts.get(i.checked_sub(1)?)
    }
}

/// Why trace data is missing.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostKind {
    /// The next piece starts later in the AUX stream than the last one ended: this
    /// many bytes were never written to the file.
    Gap {
        /// Bytes missing.
        bytes: u64,
    },
    /// The next piece starts before the last one ended (by more than padding): the
    /// data overlaps and cannot be joined; decoding starts afresh.
    Overlap {
        /// Bytes the pieces share.
        bytes: u64,
    },
    /// A snapshot that does not continue the one before (the AUX area wrapped
    /// between them, or the first one had no PSB+ with a TSC): what happened in
    /// between is not in the trace.
    SnapshotGap,
    /// An AUX record says the buffer was full and data was dropped (PERF_AUX_FLAG_TRUNCATED).
    Truncated,
    /// An AUX record says a sample collided with another (PERF_AUX_FLAG_COLLISION).
    Collision,
    /// An AUX record says the data has gaps (PERF_AUX_FLAG_PARTIAL).
    Partial,
    /// A LOST record: the kernel dropped this many side-band records (context
    /// switches, mappings among them).
    Records {
        /// How many.
        count: u64,
    },
    /// The file ends inside an AUXTRACE record: this many bytes of its data are
    /// missing.
    CutOff {
        /// Bytes missing.
        bytes: u64,
    },
}

impl std::fmt::Display for LostKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LostKind::Gap { bytes } => {
                write!(
                    f,
                    "{bytes:#x} bytes of trace missing between AUXTRACE pieces"
                )
            }
            LostKind::Overlap { bytes } => write!(
                f,
                "AUXTRACE piece overlaps the one before by {bytes:#x} bytes: decoding afresh"
            ),
            LostKind::SnapshotGap => {
                f.write_str("snapshot does not continue the one before: trace in between is lost")
            }
            LostKind::Truncated => f.write_str("AUX buffer full: trace data lost (truncated)"),
            LostKind::Collision => f.write_str("AUX sample collision: trace data lost"),
            LostKind::Partial => f.write_str("AUX data with gaps (partial)"),
            LostKind::Records { count } => {
                write!(
                    f,
                    "{count} side-band records lost: thread and code information may be incomplete"
                )
            }
            LostKind::CutOff { bytes } => {
                write!(
                    f,
                    "file ends inside the AUXTRACE data: {bytes:#x} bytes missing"
                )
            }
        }
    }
}

/// Trace data lost or cut, with where it happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lost {
    /// What.
    pub kind: LostKind,
    /// File offset of the record that tells (the AUXTRACE piece after a gap, the
    /// AUX or LOST record).
    pub record_offset: u64,
    /// Where in the queue's AUX stream, when known.
    pub aux_offset: Option<u64>,
    /// When (perf time), when known.
    pub time: Option<u64>,
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "file offset {:#x}", self.record_offset)?;
        if let Some(a) = self.aux_offset {
            write!(f, ", AUX offset {a:#x}")?;
        }
        if let Some(t) = self.time {
            write!(f, ", time {t}")?;
        }
        write!(f, ": {}", self.kind)
    }
}

/// One AUX queue: an AUX area's data.
#[derive(Debug)]
pub struct Queue<'a> {
    /// perf's queue number (the AUXTRACE records' mmap index).
    pub idx: u32,
    /// The CPU, for per-CPU AUX areas.
    pub cpu: Option<u32>,
    /// The thread, for per-thread AUX areas.
    pub tid: Option<u32>,
    /// The AUXTRACE pieces in file order.
    pub pieces: Vec<AuxPiece<'a>>,
    /// The pieces as runs that decode as one trace.
    pub segments: Vec<Segment>,
    /// AUX/LOST records for this queue, in time order.
    pub lost: Vec<Lost>,
}

fn opt(v: u32) -> Option<u32> {
    (v != u32::MAX).then_some(v)
}

impl<'a> Queue<'a> {
    pub(crate) fn new(idx: u32, cpu: u32, tid: u32) -> Self {
        Queue {
            idx,
            cpu: opt(cpu),
            tid: opt(tid),
            pieces: Vec::new(),
            segments: Vec::new(),
            lost: Vec::new(),
        }
    }

    /// The bytes of `segment`: borrowed from the file for one piece, joined (once)
    /// for several.
    pub fn segment_bytes(&self, segment: usize) -> &[u8] {
        let Some(s) = self.segments.get(segment) else {
            return &[];
        };
        let slice = |p: &Part| -> &[u8] {
            self.pieces
                .get(p.piece)
                .and_then(|pc| pc.data.get(p.skip..p.skip + p.len))
                .unwrap_or(&[])
        };
        match s.parts.as_slice() {
            [] => &[],
            [one] => slice(one),
            parts => s.joined.get_or_init(|| {
                let mut v = Vec::with_capacity(s.len());
                for p in parts {
                    v.extend_from_slice(slice(p));
                }
                v.into_boxed_slice()
            }),
        }
    }

    /// What was lost before `segment`, with where: the AUXTRACE record after the gap.
    pub fn lost_before(&self, segment: usize) -> Option<Lost> {
        let seg = self.segments.get(segment)?;
        let kind = seg.lost_before?;
        let first = seg.parts.first().and_then(|p| self.pieces.get(p.piece));
        Some(Lost {
            kind,
            record_offset: first.map_or(0, |p| p.record_offset),
            aux_offset: first.map(|p| p.aux_offset),
            time: None,
        })
    }

    /// Frees the joined buffers (they are built again when needed).
    pub fn release(&mut self) {
        for s in &mut self.segments {
            s.joined.take();
        }
    }

    /// The file offset of byte `at` of `segment`.
    pub fn file_offset(&self, segment: usize, at: u64) -> Option<u64> {
        let p = self.segments.get(segment)?.part_at(at)?;
        let pc = self.pieces.get(p.piece)?;
        Some(pc.data_offset + p.skip as u64 + (at - p.at as u64))
    }

    /// The AUX stream offset of byte `at` of `segment`.
    pub fn aux_offset(&self, segment: usize, at: u64) -> Option<u64> {
        let p = self.segments.get(segment)?.part_at(at)?;
        let pc = self.pieces.get(p.piece)?;
        Some(pc.aux_offset + p.skip as u64 + (at - p.at as u64))
    }

    /// The segment and offset in it of AUX stream offset `aux` (full-trace mode):
    /// the byte there, or the end of the last part before it.
    pub fn position_of(&self, aux: u64) -> Option<(usize, u64)> {
        let mut best = None;
        for (si, s) in self.segments.iter().enumerate() {
            for p in &s.parts {
                let pc = &self.pieces[p.piece];
                let lo = pc.aux_offset + p.skip as u64;
                let hi = lo + p.len as u64;
                if lo <= aux && aux < hi {
                    return Some((si, p.at as u64 + (aux - lo)));
                }
                if hi <= aux {
                    best = Some((si, (p.at + p.len) as u64));
                }
            }
        }
        best
    }

    /// The reference TSC of the piece that holds byte `at` of `segment`.
    pub fn reference(&self, segment: usize, at: u64) -> u64 {
        self.segments
            .get(segment)
            .and_then(|s| s.part_at(at))
            .and_then(|p| self.pieces.get(p.piece))
            .map_or(0, |p| p.reference)
    }

    /// Groups the pieces into segments (`snapshot`: snapshot mode; `have_tsc`: the
    /// trace has TSC packets, for finding snapshot overlaps).
    pub(crate) fn build_segments(&mut self, snapshot: bool, have_tsc: bool) {
        let mut segments: Vec<Segment> = Vec::new();
        // The last piece used: its index and the bytes of it in use.
        let mut last: Option<(usize, usize, usize)> = None;
        for (i, pc) in self.pieces.iter().enumerate() {
            if pc.data.is_empty() {
                continue;
            }
            let mut start = 0usize;
            let mut join = false;
            let mut lost = None;
            if let Some((li, lskip, llen)) = last {
                let prev = &self.pieces[li];
                if snapshot {
                    let a = &prev.data[lskip..lskip + llen];
                    let o = find_overlap(a, pc.data, have_tsc);
                    start = o.start;
                    if o.consecutive {
                        join = true;
                        trim_last(&mut segments, o.padding);
                    } else {
                        lost = Some(LostKind::SnapshotGap);
                    }
                } else {
                    let end = prev.aux_end();
                    let shared = end.saturating_sub(pc.aux_offset);
                    let tail = &prev.data[prev.data.len().saturating_sub(shared as usize)..];
                    if prev.cut_off != 0 {
                        lost = Some(LostKind::CutOff {
                            bytes: prev.cut_off,
                        });
                    } else if pc.aux_offset > end {
                        lost = Some(LostKind::Gap {
                            bytes: pc.aux_offset - end,
                        });
                    } else if shared == 0 {
                        join = true;
                    } else if shared < 8 && tail.iter().all(|&b| b == 0) {
                        // The last piece's padding.
                        trim_last(&mut segments, shared as usize);
                        join = true;
                    } else if pc.data.get(..tail.len()) == Some(tail)
                        && tail.len() == shared as usize
                    {
                        // The same bytes twice: go on after them.
                        start = tail.len();
                        join = true;
                    } else {
                        lost = Some(LostKind::Overlap { bytes: shared });
                    }
                }
            }
            if start >= pc.data.len() {
                // Nothing new in this snapshot.
                continue;
            }
            let len = pc.data.len() - start;
            match segments.last_mut() {
                Some(s) if join => {
                    let at = s.len();
                    s.parts.push(Part {
                        piece: i,
                        skip: start,
                        len,
                        at,
                    });
                }
                _ => segments.push(Segment {
                    parts: vec![Part {
                        piece: i,
                        skip: start,
                        len,
                        at: 0,
                    }],
                    lost_before: lost,
                    joined: OnceLock::new(),
                }),
            }
            last = Some((i, start, len));
        }
        self.segments = segments;
    }
}

/// Cuts `n` bytes of padding off the last part of the last segment.
fn trim_last(segments: &mut [Segment], n: usize) {
    if let Some(p) = segments.last_mut().and_then(|s| s.parts.last_mut()) {
        p.len -= n.min(p.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(aux_offset: u64, data: &[u8]) -> AuxPiece<'_> {
        AuxPiece {
            record_offset: aux_offset,
            data_offset: 1000 + aux_offset * 2,
            aux_offset,
            reference: 0,
            data,
            cut_off: 0,
        }
    }

    #[test]
    fn consecutive_pieces_join_and_padding_is_cut() {
        let a = [1u8, 2, 3, 4, 5, 0, 0, 0]; // 5 bytes of trace, 3 of padding
        let b = [6u8, 7, 8, 9, 10, 11, 12, 13];
        let c = [20u8; 8];
        let mut q = Queue::new(0, 0, u32::MAX);
        q.pieces = vec![piece(0, &a), piece(5, &b), piece(13, &c)];
        q.build_segments(false, false);
        assert_eq!(q.segments.len(), 1);
        assert_eq!(
            q.segment_bytes(0),
            [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 20, 20, 20, 20, 20, 20, 20, 20]
        );
        assert_eq!(q.file_offset(0, 5), Some(1000 + 10));
        assert_eq!(q.aux_offset(0, 14), Some(14));
        assert_eq!(q.position_of(6), Some((0, 6)));
        assert_eq!(q.cpu, Some(0));
        assert_eq!(q.tid, None);
    }

    #[test]
    fn gaps_start_a_new_segment_and_say_how_much_was_lost() {
        let a = [1u8; 8];
        let b = [2u8; 8];
        let mut q = Queue::new(0, u32::MAX, 7);
        q.pieces = vec![piece(0, &a), piece(100, &b), piece(104, &a)];
        q.build_segments(false, false);
        assert_eq!(q.segments.len(), 3);
        assert_eq!(q.segments[1].lost_before, Some(LostKind::Gap { bytes: 92 }));
        assert_eq!(
            q.segments[2].lost_before,
            Some(LostKind::Overlap { bytes: 4 })
        );
        // One piece per segment: borrowed, not copied.
        assert!(core::ptr::eq(q.segment_bytes(1).as_ptr(), b.as_ptr()));
        assert_eq!(q.position_of(50), Some((0, 8)));
        assert_eq!(q.tid, Some(7));
    }
}
