//! How much of a recorded execution a decoder recovers from a damaged trace.
//!
//! A simulated recording (trace, side-band, execution log) is damaged the ways traces
//! get damaged in practice ([`Damage`]: bytes flipped, a stretch zeroed or lost, the
//! end cut off), decoded, and every decoded instruction is checked against the
//! recorded execution ([`Truth`]): an instruction counts as recovered only if it is
//! the right one at the right place ([`Scorer`]).
//!
//! The decoded flow comes in *segments*: runs the decoder reports as one continuous
//! flow, broken at its errors and resynchronizations. Each segment is placed in the
//! recorded execution by its start (the trace offset the decoder was at, and the
//! instructions that follow); from there on its instructions count while they agree
//! with the recording, and while the decoder is near where the undamaged decode was
//! in the trace (`SLACK`). After the first disagreement the segment is wrong (the
//! decoder took a wrong turn without noticing) until the decoder passes the next PSB:
//! there, where its flow agrees with the PSB+, it may have found its way again, and
//! its instructions are placed anew. Each recorded instruction counts once.
//!
//! [`decode_ours`] runs this crate's decoder with a given [`Resync`] policy,
//! [`decode_libipt`] libipt's ptxed (whose runaways it cuts short).

use crate::Error;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use pt_decoder::image::Image;
use pt_decoder::{Config, Decoder, Item, Resync};

/// A kind of damage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Damage {
    /// This many bytes at random places replaced by other random values.
    Flip(u32),
    /// [`HOLE`] bytes at a random place overwritten with zeros.
    ZeroHole,
    /// [`HOLE`] bytes at a random place removed.
    CutHole,
    /// The trace cut off at a random place.
    Truncate,
}

/// The size of a hole.
pub const HOLE: usize = 4096;

impl Damage {
    /// The kinds the benchmark runs.
    pub const ALL: [Damage; 6] = [
        Damage::Flip(1),
        Damage::Flip(10),
        Damage::Flip(100),
        Damage::ZeroHole,
        Damage::CutHole,
        Damage::Truncate,
    ];

    /// A short name.
    pub fn name(self) -> String {
        match self {
            Damage::Flip(n) => format!("flip {n}"),
            Damage::ZeroHole => "4 KiB zeroed".into(),
            Damage::CutHole => "4 KiB cut out".into(),
            Damage::Truncate => "truncated".into(),
        }
    }

    /// `trace` damaged with the random choices of `seed`.
    pub fn apply(self, trace: &[u8], seed: u64) -> Damaged {
        let mut rng = SplitMix(seed ^ 0x005e_ed0f_da3a_9e00);
        let len = trace.len() as u64;
        let mut bytes = trace.to_vec();
        let mut cut = None;
        let what = match self {
            Damage::Flip(n) => {
                let mut at = Vec::new();
                for _ in 0..n.min(trace.len() as u32) {
                    let pos = loop {
                        let p = rng.below(len) as usize;
                        if !at.contains(&p) {
                            break p;
                        }
                    };
                    at.push(pos);
                    // Any other value.
                    bytes[pos] ^= 1 + rng.below(255) as u8;
                }
                at.sort_unstable();
                let shown: Vec<String> = at.iter().take(4).map(|p| format!("{p:#x}")).collect();
                format!(
                    "flipped {}{}",
                    shown.join(" "),
                    if at.len() > 4 { " …" } else { "" }
                )
            }
            Damage::ZeroHole | Damage::CutHole => {
                let from = rng.below(len.saturating_sub(HOLE as u64).max(1)) as usize;
                let to = (from + HOLE).min(trace.len());
                if self == Damage::ZeroHole {
                    bytes[from..to].fill(0);
                    format!("zeroed {from:#x}-{to:#x}")
                } else {
                    bytes.drain(from..to);
                    cut = Some((from as u64, (to - from) as u64));
                    format!("cut out {from:#x}-{to:#x}")
                }
            }
            Damage::Truncate => {
                let at = rng.below(len.max(1)) as usize;
                bytes.truncate(at);
                format!("truncated at {at:#x}")
            }
        };
        Damaged { bytes, cut, what }
    }
}

/// A damaged trace.
#[derive(Clone, Debug)]
pub struct Damaged {
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// The bytes removed: (offset, length).
    cut: Option<(u64, u64)>,
    /// What was done, for a report.
    pub what: String,
}

impl Damaged {
    /// The offset in the undamaged trace of `offset` in this one.
    pub fn original_offset(&self, offset: u64) -> u64 {
        match self.cut {
            Some((at, n)) if offset >= at => offset + n,
            _ => offset,
        }
    }
}

/// A small seeded generator (SplitMix64).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A recording: its trace, the code image and configuration from its side-band, and
/// the libipt ptxed options that load the same.
pub struct Recording {
    /// The trace.
    pub trace: Vec<u8>,
    /// The code.
    pub image: Image,
    /// The decoder configuration.
    pub config: Config,
    /// libipt ptxed's options for the image and configuration (without `--pt`).
    pub ptxed_args: Vec<String>,
}

/// A recording of `ptperf record` on the simulator (a perf.data) with the execution
/// log it was recorded from: the trace of the thread with the most trace (it must
/// have run one program), and its recorded instructions.
pub fn open_perf_data(perf_data: &Path, log: &Path) -> Result<(Recording, Vec<u64>), Error> {
    let rec = crate::verify::Recording::read(perf_data)?;
    let piece = rec
        .pieces
        .iter()
        .max_by_key(|p| p.data.len())
        .ok_or_else(|| Error::recording(perf_data, "no trace"))?;
    if rec
        .pieces
        .iter()
        .filter(|p| p.thread == piece.thread)
        .count()
        > 1
    {
        return Err(Error::recording(
            perf_data,
            format_args!(
                "thread {} ran several programs: record one",
                piece.thread.tid
            ),
        ));
    }
    let mut truth = crate::verify::ground_truth(log, &rec.config, &rec.filters)?;
    let ips = truth.remove(&piece.thread).unwrap_or_default();
    let c = &rec.decoder;
    let mut ptxed_args: Vec<String> = vec!["--cpu".into(), "none".into()];
    for (opt, v) in [
        ("--mtc-freq", u32::from(c.mtc_freq)),
        ("--nom-freq", u32::from(c.nom_freq)),
        ("--cpuid-0x15.eax", c.cpuid_0x15_eax),
        ("--cpuid-0x15.ebx", c.cpuid_0x15_ebx),
    ] {
        ptxed_args.extend([opt.to_string(), v.to_string()]);
    }
    for m in &piece.maps {
        raw_arg(&mut ptxed_args, &m.path, m.file_offset, m.start, m.end);
    }
    let recording = Recording {
        trace: piece.data.clone(),
        image: piece.image(),
        config: rec.decoder,
        ptxed_args,
    };
    Ok((recording, ips))
}

/// libipt ptxed's `--raw` option for a mapping of `file` at `start..end` from
/// `offset` on (none if the file does not reach there).
fn raw_arg(args: &mut Vec<String>, file: &Path, offset: u64, start: u64, end: u64) {
    // A mapping's last page may reach past the end of the file.
    let size = std::fs::metadata(file).map_or(0, |md| md.len());
    let to = (offset + (end - start)).min(size);
    if to > offset {
        args.push("--raw".into());
        args.push(format!(
            "{}:{:#x}-{:#x}:{:#x}",
            file.display(),
            offset,
            to,
            start
        ));
    }
}

/// `path` with `suffix` appended (`x.pt` → `x.pt.sideband`).
pub fn with_suffix(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    p.into()
}

/// What one decoder reported, as the [`Scorer`] takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// An instruction at `ip`, decoded with the decoder at trace `offset` (of the
    /// damaged trace).
    Insn {
        /// Its address.
        ip: u64,
        /// Where the decoder was in the trace.
        offset: u64,
    },
    /// The flow breaks: an error, a resynchronization.
    Break,
}

/// The recorded execution: the instructions the trace holds, in order, each with the
/// trace offset a correct decode is at when it decodes it.
pub struct Truth {
    /// Instruction addresses by id.
    table: Vec<u64>,
    /// Each instruction's address id.
    ids: Vec<u32>,
    /// Each instruction's trace offset (non-decreasing).
    offsets: Vec<u32>,
    /// The offsets of the PSBs in the trace.
    psbs: Vec<u64>,
}

impl Truth {
    /// The recorded instructions `next_truth` hands out, placed in `rec`'s trace by a
    /// decode of the undamaged trace, which must agree with them one by one.
    pub fn of(
        rec: &Recording,
        mut next_truth: impl FnMut() -> Option<u64>,
    ) -> Result<Truth, Error> {
        let mut index = std::collections::HashMap::new();
        let mut truth = Truth {
            table: Vec::new(),
            ids: Vec::new(),
            offsets: Vec::new(),
            psbs: Vec::new(),
        };
        let mut at = 0;
        while let Some(p) = pt_decoder::packet::find_psb_forward(&rec.trace, at) {
            truth.psbs.push(p as u64);
            at = p + 1;
        }
        let mut bad = None;
        decode_ours(rec, &rec.trace, Resync::NextPsb, &mut |d| {
            if bad.is_some() {
                return;
            }
            match d {
                Decoded::Insn { ip, offset } => {
                    let n = truth.ids.len();
                    if next_truth() != Some(ip) {
                        bad = Some(format!(
                            "the decode differs from the log at instruction {n}"
                        ));
                        return;
                    }
                    let id = *index.entry(ip).or_insert_with(|| {
                        truth.table.push(ip);
                        truth.table.len() as u32 - 1
                    });
                    truth.ids.push(id);
                    truth
                        .offsets
                        .push(u32::try_from(offset).unwrap_or(u32::MAX));
                }
                Decoded::Break => bad = Some("the undamaged trace does not decode".into()),
            }
        });
        if let Some(b) = bad {
            return Err(Error::Nothing(b));
        }
        if next_truth().is_some() {
            return Err(Error::Nothing("the decode ends before the log".into()));
        }
        Ok(truth)
    }

    /// The recorded instructions.
    pub fn len(&self) -> u64 {
        self.ids.len() as u64
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    fn ip(&self, j: usize) -> Option<u64> {
        self.ids.get(j).map(|&id| self.table[id as usize])
    }
}

/// Where a segment may start: this many bytes of trace either side of its offset.
const WINDOW: u64 = 4096;

/// How far from where the undamaged decode was in the trace a decoder may be when
/// it decodes an instruction for it to count: an instruction counts only if it was
/// decoded from the right part of the trace. (Decoding on through damaged or lost
/// bytes, as libipt does through a zeroed hole, reads bits that belong elsewhere;
/// the instructions so guessed are right about half the time per branch, by luck.)
const SLACK: u64 = 512;

/// Most places a segment's start is followed from at once.
const MAX_CANDIDATES: usize = 256;

/// Counts the instructions of a decoded flow that agree with the [`Truth`].
pub struct Scorer<'t> {
    truth: &'t Truth,
    /// Recorded instructions already counted.
    counted: Vec<u64>,
    /// Where the current segment may be in the recording: the indices it started at
    /// that still agree.
    alive: Vec<usize>,
    /// Instructions of the current segment so far.
    k: usize,
    /// At the start of a segment.
    fresh: bool,
    /// The segment went wrong: place it anew at this offset (the next PSB).
    lost_until: Option<u64>,
    /// The last candidate to die, and how far it agreed.
    best_dead: Option<(usize, usize)>,
    /// The segment's start offset (in the undamaged trace).
    start_offset: u64,
    score: Score,
}

/// What a decoder recovered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Score {
    /// Recorded instructions decoded right.
    pub recovered: u64,
    /// Instructions decoded.
    pub decoded: u64,
    /// Breaks in the flow (errors, resynchronizations).
    pub breaks: u64,
    /// The decoder ran away (decoded endlessly without trace) and was stopped.
    pub runaway: bool,
}

impl<'t> Scorer<'t> {
    /// A scorer against `truth`.
    pub fn new(truth: &'t Truth) -> Self {
        Scorer {
            truth,
            counted: vec![0; truth.ids.len().div_ceil(64)],
            alive: Vec::new(),
            k: 0,
            fresh: true,
            lost_until: None,
            best_dead: None,
            start_offset: 0,
            score: Score::default(),
        }
    }

    /// Take one decoded instruction (`offset` in the undamaged trace) or a break.
    pub fn take(&mut self, d: Decoded) {
        match d {
            Decoded::Break => {
                self.score.breaks += 1;
                self.end_segment();
            }
            Decoded::Insn { ip, offset } => {
                self.score.decoded += 1;
                if self.fresh || self.lost_until.is_some_and(|o| offset >= o) {
                    self.fresh = false;
                    self.lost_until = None;
                    self.start(ip, offset);
                }
                if self.alive.is_empty() {
                    if self.lost_until.is_none() {
                        self.lose(offset);
                    }
                    return;
                }
                let k = self.k;
                let truth = self.truth;
                let mut last = None;
                self.alive.retain(|&j| {
                    let ok = truth.ip(j + k) == Some(ip)
                        && truth
                            .offsets
                            .get(j + k)
                            .is_some_and(|&o| u64::from(o).abs_diff(offset) <= SLACK);
                    if !ok {
                        last = Some(j);
                    }
                    ok
                });
                if self.alive.is_empty() {
                    if let Some(j) = last {
                        self.best_dead = Some((j, k));
                    }
                    self.end_segment();
                    self.fresh = false;
                    self.lose(offset);
                    return;
                }
                self.k += 1;
            }
        }
    }

    /// The candidates for a segment starting with `ip` at `offset`: recorded
    /// instructions at that address near that offset, nearest first.
    fn start(&mut self, ip: u64, offset: u64) {
        self.start_offset = offset;
        self.k = 0;
        self.best_dead = None;
        let t = self.truth;
        let lo = t
            .offsets
            .partition_point(|&o| u64::from(o) < offset.saturating_sub(WINDOW));
        let hi = t
            .offsets
            .partition_point(|&o| u64::from(o) <= offset.saturating_add(WINDOW));
        let mut c: Vec<(u64, usize)> = (lo..hi)
            .filter(|&j| t.ip(j) == Some(ip))
            .map(|j| (u64::from(t.offsets[j]).abs_diff(offset), j))
            .collect();
        c.sort_unstable();
        c.truncate(MAX_CANDIDATES);
        self.alive = c.into_iter().map(|(_, j)| j).collect();
    }

    /// The segment is wrong from `offset` on, up to the next PSB.
    fn lose(&mut self, offset: u64) {
        let psbs = &self.truth.psbs;
        let next = psbs.partition_point(|&p| p <= offset);
        self.lost_until = Some(psbs.get(next).copied().unwrap_or(u64::MAX));
    }

    fn is_counted(&self, j: usize) -> bool {
        self.counted[j / 64] & (1 << (j % 64)) != 0
    }

    /// Credit the current segment: the place that agreed longest (the nearest to the
    /// segment's offset among equals).
    fn end_segment(&mut self) {
        let run = match (self.alive.first(), self.best_dead) {
            (Some(&j), _) => Some((j, self.k)),
            (None, best) => best,
        };
        if let Some((j, n)) = run {
            for i in j..j + n {
                if !self.is_counted(i) {
                    self.counted[i / 64] |= 1 << (i % 64);
                    self.score.recovered += 1;
                }
            }
        }
        self.alive.clear();
        self.best_dead = None;
        self.k = 0;
        self.fresh = true;
        self.lost_until = None;
    }

    /// The score.
    pub fn finish(mut self) -> Score {
        self.end_segment();
        self.score
    }

    /// Mark the decoder as stopped in a runaway.
    pub fn runaway(&mut self) {
        self.score.runaway = true;
    }
}

/// Decode `trace` (the recording's, or a damaged one) with this crate's decoder and
/// `resync` policy, handing each instruction and break to `sink`.
pub fn decode_ours(rec: &Recording, trace: &[u8], resync: Resync, sink: &mut dyn FnMut(Decoded)) {
    let mut dec = Decoder::builder(trace, &rec.image)
        .config(&rec.config)
        .resync(resync)
        .build();
    let mut item = Item::default();
    while dec.next_into(&mut item) {
        match item {
            Item::Block(b) => {
                let offset = b.offset;
                if let Some(ips) = dec.block_ips() {
                    for &ip in ips.ips {
                        sink(Decoded::Insn { ip, offset });
                    }
                }
            }
            Item::Error(_) => sink(Decoded::Break),
            _ => {}
        }
    }
}

/// Score this crate's decoder with `resync` on `damaged`.
pub fn score_ours(rec: &Recording, truth: &Truth, damaged: &Damaged, resync: Resync) -> Score {
    let mut s = Scorer::new(truth);
    decode_ours(rec, &damaged.bytes, resync, &mut |d| {
        s.take(match d {
            Decoded::Insn { ip, offset } => Decoded::Insn {
                ip,
                offset: damaged.original_offset(offset),
            },
            b => b,
        })
    });
    s.finish()
}

/// Score libipt's `ptxed` on `damaged` (written to `tmp`). A decode that goes on
/// past twice the recorded instructions is a runaway: it is stopped there.
pub fn score_libipt(
    ptxed: &Path,
    rec: &Recording,
    truth: &Truth,
    damaged: &Damaged,
    tmp: &Path,
) -> Result<Score, Error> {
    std::fs::File::create(tmp)
        .and_then(|mut f| f.write_all(&damaged.bytes))
        .map_err(|e| Error::io(tmp, e))?;
    let mut s = Scorer::new(truth);
    let limit = truth.len() * 2 + (1 << 20);
    decode_libipt(ptxed, rec, tmp, limit, &mut |d| {
        s.take(match d {
            Decoded::Insn { ip, offset } => Decoded::Insn {
                ip,
                offset: damaged.original_offset(offset),
            },
            b => b,
        })
    })
    .map(|ran_away| {
        if ran_away {
            s.runaway();
        }
    })?;
    Ok(s.finish())
}

/// Run libipt's ptxed on the trace file `pt` with `rec`'s image, handing each
/// instruction and error to `sink`; stopped after `limit` instructions. Whether it
/// was stopped.
pub fn decode_libipt(
    ptxed: &Path,
    rec: &Recording,
    pt: &Path,
    limit: u64,
    sink: &mut dyn FnMut(Decoded),
) -> Result<bool, Error> {
    let mut child = Command::new(ptxed)
        .args(&rec.ptxed_args)
        .args(["--no-inst", "--offset", "--pt"])
        .arg(pt)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Error::io(ptxed, e))?;
    let out = child
        .stdout
        .take()
        .ok_or_else(|| Error::io(ptxed, std::io::Error::other("no standard output to read")))?;
    let mut r = BufReader::with_capacity(1 << 20, out);
    let mut line = Vec::new();
    let mut n = 0u64;
    let mut stopped = false;
    loop {
        line.clear();
        match r.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let l = line.strip_suffix(b"\n").unwrap_or(&line);
        if l.first() == Some(&b'[') {
            if l.windows(5).any(|w| w == b"error") {
                sink(Decoded::Break);
            }
            continue;
        }
        // "<offset>  <ip>"
        let mut f = l.split(|&b| b == b' ').filter(|s| !s.is_empty());
        let (Some(o), Some(ip)) = (f.next(), f.next()) else {
            continue;
        };
        let hex = |s: &[u8]| {
            std::str::from_utf8(s)
                .ok()
                .and_then(|s| u64::from_str_radix(s, 16).ok())
        };
        if let (Some(offset), Some(ip)) = (hex(o), hex(ip)) {
            sink(Decoded::Insn { ip, offset });
            n += 1;
            if n > limit {
                stopped = true;
                let _ = child.kill();
                break;
            }
        }
    }
    drop(r);
    let _ = child.wait();
    Ok(stopped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn truth(ips: &[(u64, u32)]) -> Truth {
        let mut t = Truth {
            table: Vec::new(),
            ids: Vec::new(),
            offsets: Vec::new(),
            psbs: vec![100],
        };
        for &(ip, off) in ips {
            let id = match t.table.iter().position(|&x| x == ip) {
                Some(i) => i,
                None => {
                    t.table.push(ip);
                    t.table.len() - 1
                }
            };
            t.ids.push(id as u32);
            t.offsets.push(off);
        }
        t
    }

    fn insn(ip: u64, offset: u64) -> Decoded {
        Decoded::Insn { ip, offset }
    }

    #[test]
    fn a_segment_counts_while_it_agrees() {
        let t = truth(&[(1, 0), (2, 0), (3, 10), (4, 10), (5, 20)]);
        let mut s = Scorer::new(&t);
        for d in [
            insn(1, 0),
            insn(2, 0),
            insn(9, 10),
            insn(4, 10),
            insn(5, 20),
        ] {
            s.take(d);
        }
        // 1, 2 right; then a wrong turn: 4 and 5 do not count.
        assert_eq!(s.finish().recovered, 2);
    }

    #[test]
    fn instructions_count_only_where_the_trace_says_them() {
        let t = truth(&[(1, 0), (2, 0), (3, 10), (4, 2000)]);
        let mut s = Scorer::new(&t);
        // Right addresses, but the last decoded from trace far from where it is: a
        // guess through a hole.
        for d in [insn(1, 0), insn(2, 0), insn(3, 10), insn(4, 10 + 4096)] {
            s.take(d);
        }
        assert_eq!(s.finish().recovered, 3);
    }

    #[test]
    fn a_wrong_segment_is_placed_anew_after_the_next_psb() {
        let t = truth(&[(1, 0), (2, 0), (3, 10), (4, 100), (5, 110)]);
        let mut s = Scorer::new(&t);
        for d in [
            insn(1, 0),
            insn(9, 0),
            insn(3, 10),
            insn(4, 100),
            insn(5, 110),
        ] {
            s.take(d);
        }
        // 1; then wrong up to the PSB at 100; 4 and 5 again.
        assert_eq!(s.finish().recovered, 3);
    }

    #[test]
    fn segments_start_where_their_offset_says_and_count_once() {
        let t = truth(&[(1, 0), (2, 0), (1, 50), (2, 50), (3, 60)]);
        let mut s = Scorer::new(&t);
        for d in [
            insn(1, 50),
            insn(2, 50),
            insn(3, 60),
            Decoded::Break,
            insn(1, 50),
            insn(2, 50),
        ] {
            s.take(d);
        }
        let score = s.finish();
        // The second segment is the first one again: nothing new. The first (1, 2)
        // never decoded.
        assert_eq!(score.recovered, 3);
        assert_eq!(score.breaks, 1);
        assert_eq!(score.decoded, 5);
    }

    #[test]
    fn in_a_loop_the_place_that_agrees_longest_counts() {
        // A loop of (1, 2) three times, then 3: a segment of one iteration and the
        // exit is at the last iteration.
        let t = truth(&[(1, 0), (2, 0), (1, 0), (2, 0), (1, 0), (2, 0), (3, 0)]);
        let mut s = Scorer::new(&t);
        for d in [insn(1, 0), insn(2, 0), insn(3, 0)] {
            s.take(d);
        }
        assert_eq!(s.finish().recovered, 3);
    }

    #[test]
    fn damage_is_reproducible_and_cuts_shift_offsets() {
        let trace: Vec<u8> = (0..20000u32).map(|i| i as u8).collect();
        for d in Damage::ALL {
            assert_eq!(d.apply(&trace, 7).bytes, d.apply(&trace, 7).bytes);
        }
        let flipped = Damage::Flip(10).apply(&trace, 1);
        let diff = trace
            .iter()
            .zip(&flipped.bytes)
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(diff, 10);
        let cut = Damage::CutHole.apply(&trace, 3);
        assert_eq!(cut.bytes.len(), trace.len() - HOLE);
        let (at, _) = cut.cut.unwrap();
        assert_eq!(cut.original_offset(at), at + HOLE as u64);
        assert_eq!(cut.original_offset(at - 1), at - 1);
    }
}
