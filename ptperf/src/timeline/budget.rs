//! Keeping big recordings viewable: calls shorter than a threshold are left
//! out, each counted in the nearest caller that stays ([`Dropper`]); under a
//! budget of events (`--max-events`) the threshold is the smallest that fits,
//! found from a histogram of the calls' durations ([`Histogram::threshold`]).
//! Until the threshold is known the calls wait in a temporary file
//! ([`Spool`]), so that memory holds only what is written.

use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Read, Seek, Write};

use super::stacks::Slice;

/// Buckets of durations: exact below 64 ns, then 64 a power of two (within
/// 1/64, so that the threshold chosen fills the budget to within a few percent).
const SUB_BITS: u32 = 6;
const SUB: u32 = 1 << SUB_BITS;
const BUCKETS: usize = (SUB as usize) * (65 - SUB_BITS as usize);

/// How many calls last how long (in buckets of a 64th of a power of two).
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
        }
    }
}

/// The bucket of a duration.
fn bucket(d: u64) -> usize {
    if d < u64::from(SUB) {
        return d as usize;
    }
    let e = 63 - d.leading_zeros(); // >= SUB_BITS
    let m = (d >> (e - SUB_BITS)) & u64::from(SUB - 1);
    (SUB * (e - SUB_BITS + 1) + m as u32) as usize
}

/// The shortest duration of a bucket.
fn bucket_start(b: usize) -> u64 {
    let b = b as u32;
    if b < SUB {
        return u64::from(b);
    }
    let e = b / SUB + SUB_BITS - 1;
    let m = u64::from(b % SUB);
    (u64::from(SUB) + m) << (e - SUB_BITS)
}

impl Histogram {
    /// Counts a call of duration `d` (ns).
    pub fn add(&mut self, d: u64) {
        if let Some(c) = self.counts.get_mut(bucket(d)) {
            *c += 1;
            self.total += 1;
        }
    }

    /// Calls counted.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The smallest threshold (ns) that keeps at most `budget` calls (calls at
    /// least that long are kept), and how many it keeps.
    pub fn threshold(&self, budget: u64) -> (u64, u64) {
        if self.total <= budget {
            return (0, self.total);
        }
        let mut kept = 0u64;
        for b in (0..self.counts.len()).rev() {
            if kept + self.counts[b] > budget {
                // Everything from the next bucket up fits.
                return (bucket_start(b + 1), kept);
            }
            kept += self.counts[b];
        }
        (0, kept)
    }
}

/// Leaves out the calls shorter than a threshold, counting them in their
/// callers: calls end innermost first, so a caller is met after every call
/// it made, and only callers still to come hold a count.
#[derive(Debug, Default)]
pub struct Dropper {
    min: u64,
    pending: HashMap<u64, u64>,
    /// Calls left out.
    pub dropped: u64,
}

impl Dropper {
    /// Leaves out calls shorter than `min` ns.
    pub fn new(min: u64) -> Self {
        Dropper {
            min,
            ..Default::default()
        }
    }

    /// `s` with the count of the calls below it left out, or `None` if it is
    /// left out itself (then it and its count go to its caller).
    pub fn take(&mut self, mut s: Slice) -> Option<Slice> {
        let below = self.pending.remove(&s.id).unwrap_or(0);
        if s.duration() < self.min {
            self.dropped += 1;
            if s.parent != 0 {
                *self.pending.entry(s.parent).or_default() += below + 1;
            }
            return None;
        }
        s.dropped = below;
        Some(s)
    }
}

/// Calls written to a temporary file as they come, with the histogram of
/// their durations, read back in the same order.
pub struct Spool {
    file: BufWriter<std::fs::File>,
    /// Their durations.
    pub hist: Histogram,
}

const RECORD: usize = 56;

impl Spool {
    /// An empty spool in the system's temporary directory.
    pub fn new() -> std::io::Result<Self> {
        Ok(Spool {
            file: BufWriter::with_capacity(1 << 16, tempfile::tempfile()?),
            hist: Histogram::default(),
        })
    }

    /// Adds a call.
    pub fn push(&mut self, s: &Slice) -> std::io::Result<()> {
        self.hist.add(s.duration());
        let mut r = [0u8; RECORD];
        r[0..4].copy_from_slice(&s.track.to_le_bytes());
        r[4..8].copy_from_slice(&s.depth.to_le_bytes());
        r[8..12].copy_from_slice(&s.frame.to_le_bytes());
        r[12..16].copy_from_slice(&s.flags.to_le_bytes());
        r[16..24].copy_from_slice(&s.begin.to_le_bytes());
        r[24..32].copy_from_slice(&s.end.to_le_bytes());
        r[32..40].copy_from_slice(&s.id.to_le_bytes());
        r[40..48].copy_from_slice(&s.parent.to_le_bytes());
        r[48..56].copy_from_slice(&s.seq.to_le_bytes());
        self.file.write_all(&r)
    }

    /// Every call, in the order pushed.
    pub fn drain(self, mut f: impl FnMut(Slice)) -> std::io::Result<()> {
        let mut file = self.file.into_inner().map_err(|e| e.into_error())?;
        file.rewind()?;
        let mut rd = BufReader::with_capacity(1 << 16, file);
        let mut r = [0u8; RECORD];
        let u32_at =
            |r: &[u8; RECORD], o: usize| u32::from_le_bytes([r[o], r[o + 1], r[o + 2], r[o + 3]]);
        let u64_at = |r: &[u8; RECORD], o: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&r[o..o + 8]);
            u64::from_le_bytes(b)
        };
        loop {
            match rd.read_exact(&mut r) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e),
            }
            f(Slice {
                track: u32_at(&r, 0),
                depth: u32_at(&r, 4),
                frame: u32_at(&r, 8),
                flags: u32_at(&r, 12),
                begin: u64_at(&r, 16),
                end: u64_at(&r, 24),
                id: u64_at(&r, 32),
                parent: u64_at(&r, 40),
                dropped: 0,
                seq: u64_at(&r, 48),
            });
        }
    }
}

/// Parses a duration: a number with `ns`, `us`, `ms` or `s` (plain: ns).
pub fn parse_duration(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = [("ns", 1.0), ("us", 1e3), ("ms", 1e6), ("s", 1e9)]
        .iter()
        .find_map(|&(u, m)| s.strip_suffix(u).map(|n| (n, m)))
        .unwrap_or((s, 1.0));
    let v: f64 = num.trim().parse().ok()?;
    (v.is_finite() && v >= 0.0).then(|| (v * mult).round() as u64)
}

/// A duration as a person reads it (`1.5us`, `250ns`).
pub fn show_duration(ns: u64) -> String {
    match ns {
        0..=999 => format!("{ns}ns"),
        1_000..=999_999 => format!("{}us", ns as f64 / 1e3),
        1_000_000..=999_999_999 => format!("{}ms", ns as f64 / 1e6),
        _ => format!("{}s", ns as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(id: u64, parent: u64, begin: u64, end: u64) -> Slice {
        Slice {
            track: 0,
            depth: 0,
            frame: 0,
            flags: 0,
            begin,
            end,
            id,
            parent,
            dropped: 0,
            seq: id,
        }
    }

    #[test]
    fn buckets_are_ordered_and_start_where_they_say() {
        let mut last = 0;
        for d in (0..5000u64).chain([1 << 20, (1 << 40) + 12345, u64::MAX]) {
            let b = bucket(d);
            assert!(b >= last || d < 5000, "{d}");
            assert!(
                bucket_start(b) <= d,
                "{d}: bucket {b} starts at {}",
                bucket_start(b)
            );
            if b + 1 < BUCKETS {
                assert!(bucket_start(b + 1) > d, "{d}");
            }
            last = b;
        }
    }

    #[test]
    fn threshold_keeps_at_most_the_budget() {
        let mut h = Histogram::default();
        for d in 1..=1000u64 {
            h.add(d);
        }
        for budget in [0, 1, 10, 100, 999, 1000, 5000] {
            let (t, kept) = h.threshold(budget);
            let real = (1..=1000u64).filter(|&d| d >= t).count() as u64;
            assert_eq!(real, kept, "budget {budget}");
            assert!(kept <= budget, "budget {budget}: {kept}");
            // Within an eighth: a lower threshold would not fit by much.
            if (10..1000).contains(&budget) {
                assert!(kept * 2 >= budget, "budget {budget}: only {kept}");
            }
        }
    }

    #[test]
    fn dropped_calls_are_counted_in_the_caller_that_stays() {
        // main(1) [0,100] calls a(2) [10,60] which calls b(3) [20,21], c(4) [30,31];
        // main then calls d(5) [70,72].
        let mut d = Dropper::new(5);
        let order = [
            slice(3, 2, 20, 21),
            slice(4, 2, 30, 31),
            slice(2, 1, 10, 60),
            slice(5, 1, 70, 72),
            slice(1, 0, 0, 100),
        ];
        let kept: Vec<Slice> = order.iter().filter_map(|&s| d.take(s)).collect();
        assert_eq!(
            kept.iter().map(|s| (s.id, s.dropped)).collect::<Vec<_>>(),
            [(2, 2), (1, 1)]
        );
        assert_eq!(d.dropped, 3);
        // A dropped caller takes its callees' count along.
        let mut d = Dropper::new(100);
        let kept: Vec<Slice> = order.iter().filter_map(|&s| d.take(s)).collect();
        assert_eq!(
            kept.iter().map(|s| (s.id, s.dropped)).collect::<Vec<_>>(),
            [(1, 4)]
        );
    }

    #[test]
    fn spool_gives_back_what_it_took() {
        let mut sp = Spool::new().unwrap();
        let v: Vec<Slice> = (0..1000)
            .map(|i| slice(i + 1, i / 3, i * 10, i * 10 + i))
            .collect();
        for s in &v {
            sp.push(s).unwrap();
        }
        assert_eq!(sp.hist.total(), 1000);
        let mut back = Vec::new();
        sp.drain(|s| back.push(s)).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn durations_parse_and_show() {
        assert_eq!(parse_duration("250"), Some(250));
        assert_eq!(parse_duration("1.5us"), Some(1500));
        assert_eq!(parse_duration("2ms"), Some(2_000_000));
        assert_eq!(parse_duration("1s"), Some(1_000_000_000));
        assert_eq!(parse_duration("-1us"), None);
        assert_eq!(parse_duration("fast"), None);
        assert_eq!(show_duration(1500), "1.5us");
        assert_eq!(show_duration(250), "250ns");
    }
}
