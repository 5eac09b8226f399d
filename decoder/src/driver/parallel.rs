//! The PSB-parallel decode: the items of one thread, from several.
//!
//! The trace is cut at PSBs into pieces, a few per thread, which the threads take in
//! order, each piece decoded from its PSB on. The decoder of the piece before goes on
//! past that PSB until it meets one of the piece's first checkpoints (the same place in
//! the trace and the code, in the same state: see [`BlockDecoder::checkpoint`]). From
//! there on both report the same, so the earlier decoder stops and the later one's
//! items are taken from that checkpoint on. Where they do not meet, or where no thread
//! has started the later piece yet, the earlier decoder decodes that piece too, as one
//! thread would have. No thread waits for another.
//!
//! One thing a checkpoint leaves out can change the result: a return compressed to a
//! call from before the PSB, which hardware does not do, but a broken trace might.
//! The later decoder then fails with "compressed return without call" where the
//! earlier one would have gone on; after such an error the decode is not joined (the
//! caller decodes the whole trace again on one thread).
//!
//! The machinery is generic over what a piece produces (a list of [`Item`]s with the
//! counts at each), so the same join serves any item stream whose items do not depend
//! on where the decode started; the [`Decoder`](super::Decoder) uses it for counts,
//! where that holds.
//!
//! [`BlockDecoder::checkpoint`]: crate::flow::BlockDecoder::checkpoint

use super::{Engine, EngineSettings, Env, Item, Step, Tally, Watch};
use crate::error::{ErrorCode, Status};
use crate::flow::FlowOptions;
use crate::parallel::split_at_psbs;
use core::ops::ControlFlow;
use crossbeam::utils::CachePadded;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Checkpoints each piece takes for the piece before it to meet. The two usually meet
/// at the first branch after the PSB+; this leaves room for tracing that is off
/// around the PSB and for code the later decoder has not seen yet.
const MARKS: usize = 64;

/// Pieces per thread, at most.
const PIECES_PER_THREAD: usize = 8;

/// Pieces smaller than this are not worth a thread (by default).
pub const MIN_PIECE: u64 = 256 << 10;

/// The threads to use by default: one per core, at most 8.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
}

/// The start of one piece, as the decoders of earlier pieces see it. Padded to a cache
/// line: a decoder polls the next piece's checkpoints while another thread claims the
/// piece after it.
struct Lane<M> {
    /// The PSB the piece starts at.
    psb: u64,
    /// The piece's first checkpoints with the trace offset at each, once known.
    marks: OnceLock<Vec<(u64, M)>>,
    /// [`WAITING`], [`TAKEN`] by a thread, or [`TAKEN_OVER`] by the decoder of an
    /// earlier piece.
    state: AtomicU8,
}

const WAITING: u8 = 0;
const TAKEN: u8 = 1;
const TAKEN_OVER: u8 = 2;

impl<M> Lane<M> {
    /// Claim the piece for `how` if nobody has yet.
    fn claim(&self, how: u8) -> bool {
        self.state
            .compare_exchange(WAITING, how, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// What one piece's decoder produced.
struct Piece<T> {
    /// Its items, each with the counts before it.
    out: Vec<(Tally, T)>,
    /// The counts at its end.
    total: Tally,
    /// Items and counts at each of its own checkpoints.
    at: Vec<(usize, Tally)>,
    /// Checkpoints taken before the last "compressed return without call" (`None`:
    /// there was none; `usize::MAX`: after the last checkpoint).
    retstack_error: Option<usize>,
    /// Where it stopped: at checkpoint `.1` of piece `.0`.
    met: Option<(usize, usize)>,
}

/// The [`Watch`] of one piece.
struct PieceWatch<'s, M, T> {
    /// The PSB to start at (`None`: the start of the trace).
    start: Option<u64>,
    /// Where this piece's checkpoints go (`None` for the first piece).
    own: Option<&'s Lane<M>>,
    marks: Vec<(u64, M)>,
    recording: bool,
    out: Vec<(Tally, T)>,
    at: Vec<(usize, Tally)>,
    /// The pieces after this one; `next` is the one to meet.
    later: &'s [CachePadded<Lane<M>>],
    next: usize,
    /// Past the next piece's PSB: looking for its checkpoints.
    overlap: bool,
    retstack_error: Option<usize>,
    met: Option<(usize, usize)>,
}

impl<M, T> PieceWatch<'_, M, T> {
    fn publish(&mut self) {
        if self.recording {
            self.recording = false;
            if let Some(lane) = self.own {
                let _ = lane.marks.set(std::mem::take(&mut self.marks));
            }
        }
    }
}

impl<M, T> Drop for PieceWatch<'_, M, T> {
    /// Also when the decode ends early: the piece before looks for the checkpoints.
    fn drop(&mut self) {
        self.publish();
    }
}

impl<'a, S: Step<'a>, T> Watch<S> for PieceWatch<'_, S::Mark, T> {
    fn fast(&self) -> bool {
        !self.recording && !self.overlap
    }

    fn first_sync(&mut self, dec: &mut S) -> Result<Status, ErrorCode> {
        match self.start {
            Some(psb) => dec.sync_set(psb),
            None => dec.sync_forward(),
        }
    }

    fn start(&self) -> u64 {
        self.start.unwrap_or(0)
    }

    fn between_steps(&mut self, dec: &S, tally: Tally) -> ControlFlow<()> {
        let Some(offset) = dec.offset() else {
            return ControlFlow::Continue(());
        };
        if self.recording {
            let beyond = self.later.first().is_some_and(|l| offset >= l.psb);
            if !beyond {
                if let Some(m) = dec.mark() {
                    self.marks.push((offset, m));
                    self.at.push((self.out.len(), tally));
                }
            }
            if beyond || self.marks.len() == MARKS {
                self.publish();
            }
        }
        while let Some(lane) = self.later.get(self.next) {
            if offset < lane.psb {
                return ControlFlow::Continue(());
            }
            // A piece no thread has started yet is decoded here instead.
            // (It has no checkpoints then, for other decoders that come this far.)
            if lane.claim(TAKEN_OVER) {
                let _ = lane.marks.set(Vec::new());
                self.next += 1;
                continue;
            }
            self.overlap = true;
            // Never wait: go on (step by step) until they are there.
            let Some(marks) = lane.marks.get() else {
                return ControlFlow::Continue(());
            };
            if let Some(j) = marks
                .iter()
                .position(|(o, m)| *o == offset && dec.reached(m))
            {
                self.met = Some((self.next, j));
                return ControlFlow::Break(());
            }
            if marks.last().is_some_and(|(o, _)| *o >= offset) {
                return ControlFlow::Continue(());
            }
            // Past all of them: this decoder takes that piece too.
            self.next += 1;
            self.overlap = false;
        }
        ControlFlow::Continue(())
    }

    fn error(&mut self, code: ErrorCode) {
        if code == ErrorCode::RetstackEmpty {
            self.retstack_error = Some(if self.recording {
                self.marks.len()
            } else {
                usize::MAX
            });
        }
    }
}

/// What the pieces produced together: the items of one decoder over the whole trace,
/// each with the counts before it, and the counts at the end.
pub(super) struct Joined<T> {
    out: Vec<(Tally, T)>,
    pub(super) total: Tally,
}

impl Joined<Item> {
    /// The items as one decoder in count-only mode hands them out: the counts since
    /// the last item before each item, and at the end.
    pub(super) fn items(self) -> Vec<Item> {
        let mut items = Vec::with_capacity(self.out.len() * 2 + 1);
        let mut last = Tally::default();
        let mut counts = |items: &mut Vec<Item>, t: Tally| {
            if t != last {
                items.push(Item::Counts(super::Counts {
                    insns: t.minus(last).insns,
                    blocks: None,
                }));
                last = t;
            }
        };
        for (t, item) in self.out {
            counts(&mut items, t);
            items.push(item);
        }
        counts(&mut items, self.total);
        items
    }
}

/// Decode `trace` on up to `threads` threads with a decoder of kind `S` per thread
/// (kept from piece to piece, so that each thread learns the code once), as
/// [`Engine`] would on one. `None` if the trace is too small to share out, or if the
/// pieces cannot be joined exactly (see the module docs): decode it on one thread then.
pub(super) fn decode<'a, S>(
    env: &Env<'a>,
    flow: FlowOptions,
    settings: EngineSettings,
    threads: usize,
    min_piece: u64,
) -> Option<Joined<Item>>
where
    S: Step<'a>,
{
    let trace = env.trace;
    // Several pieces per thread: how long a piece takes varies a lot (code seen for the
    // first time is slow), and a thread that is done early takes the next one.
    let most = threads.saturating_mul(PIECES_PER_THREAD) as u64;
    let pieces = (trace.len() as u64 / min_piece.max(1)).min(most) as usize;
    if threads < 2 || pieces < 2 {
        return None;
    }
    let ranges = split_at_psbs(trace, pieces);
    if ranges.len() < 2 {
        return None;
    }
    let lanes: Vec<CachePadded<Lane<S::Mark>>> = ranges
        .iter()
        .map(|r| {
            CachePadded::new(Lane {
                psb: r.start as u64,
                marks: OnceLock::new(),
                state: AtomicU8::new(WAITING),
            })
        })
        .collect();
    let run_piece = |engine: &mut Engine<'a, S>, k: usize| -> Piece<Item> {
        let mut watch = PieceWatch {
            start: (k > 0).then_some(lanes[k].psb),
            own: (k > 0).then(|| &*lanes[k]),
            marks: Vec::new(),
            recording: k > 0,
            out: Vec::new(),
            at: Vec::new(),
            later: &lanes[k + 1..],
            next: 0,
            overlap: false,
            retstack_error: None,
            met: None,
        };
        engine.restart();
        let mut item = Item::default();
        while engine.next_item(&mut watch, &mut item) {
            if !matches!(item, Item::Counts(_)) {
                watch.out.push((engine.tally, item));
            }
        }
        watch.publish();
        Piece {
            out: std::mem::take(&mut watch.out),
            total: engine.tally,
            at: std::mem::take(&mut watch.at),
            retstack_error: watch.retstack_error,
            // Later pieces' indices count from this one's successor.
            met: watch.met.map(|(i, j)| (k + 1 + i, j)),
        }
    };
    // No thread ever waits for another (see `between_steps`).
    let taken = CachePadded::new(AtomicUsize::new(0));
    let work = || {
        let mut engine = Engine::new(
            S::new(trace, env.image, &env.config, flow),
            env.clone(),
            settings,
        );
        let mut done = Vec::new();
        loop {
            let k = taken.fetch_add(1, Ordering::Relaxed);
            let Some(lane) = lanes.get(k) else {
                return done;
            };
            if lane.claim(TAKEN) {
                done.push((k, run_piece(&mut engine, k)));
            }
        }
    };
    let mut results: Vec<Option<Piece<Item>>> = (0..lanes.len()).map(|_| None).collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = (1..threads.min(lanes.len()))
            .map(|_| s.spawn(work))
            .collect();
        for (k, piece) in work() {
            results[k] = Some(piece);
        }
        for h in handles {
            match h.join() {
                Ok(done) => {
                    for (k, piece) in done {
                        results[k] = Some(piece);
                    }
                }
                Err(e) => std::panic::resume_unwind(e),
            }
        }
    });
    join(results)
}

/// The output of one decoder over the whole trace, from the pieces: each piece up to
/// where it met a later one, that one from the checkpoint met on.
fn join<T>(mut pieces: Vec<Option<Piece<T>>>) -> Option<Joined<T>> {
    let first = pieces.first_mut()?.take()?;
    let mut met = first.met;
    let mut joined = Joined {
        out: first.out,
        total: first.total,
    };
    while let Some((k, j)) = met {
        let piece = pieces.get_mut(k)?.take()?;
        let &(written, at) = piece.at.get(j)?;
        if piece.retstack_error.is_some_and(|m| m > j) {
            return None;
        }
        if written > piece.out.len() {
            return None;
        }
        let base = joined.total;
        for (t, item) in piece.out.into_iter().skip(written) {
            joined.out.push((base.plus(t.minus(at)), item));
        }
        joined.total = base.plus(piece.total.minus(at));
        met = piece.met;
    }
    Some(joined)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(insns: u64) -> Tally {
        Tally { insns, blocks: 0 }
    }

    fn piece(
        out: &[(u64, &'static str)],
        total: u64,
        at: &[(usize, u64)],
        met: Option<(usize, usize)>,
    ) -> Piece<&'static str> {
        Piece {
            out: out.iter().map(|&(n, s)| (t(n), s)).collect(),
            total: t(total),
            at: at.iter().map(|&(w, i)| (w, t(i))).collect(),
            retstack_error: None,
            met,
        }
    }

    #[test]
    fn pieces_join_at_the_checkpoints_met() {
        // Piece 0 met piece 1 at its checkpoint 1, which took over piece 2 and met piece
        // 3 at its checkpoint 0; piece 2's own items are not used.
        let pieces = vec![
            Some(piece(&[(4, "a")], 10, &[], Some((1, 1)))),
            Some(piece(
                &[(1, "x"), (9, "b")],
                25,
                &[(0, 0), (1, 5)],
                Some((3, 0)),
            )),
            Some(piece(&[(0, "unused")], 99, &[(0, 0)], None)),
            Some(piece(&[(3, "c")], 7, &[(0, 0)], None)),
        ];
        let j = join(pieces).expect("joined");
        let out: Vec<_> = j.out.iter().map(|&(t, s)| (t.insns, s)).collect();
        // "b" came 4 instructions after piece 1's checkpoint, which is where piece 0
        // (10 instructions) ended; "c" 3 after piece 3's start, 20 after the meeting.
        assert_eq!(out, [(4, "a"), (14, "b"), (33, "c")]);
        assert_eq!(j.total.insns, 10 + (25 - 5) + 7);
    }

    #[test]
    fn a_compressed_return_without_call_after_the_meeting_point_undoes_the_join() {
        let make = |err| {
            let mut later = piece(&[], 5, &[(0, 0), (0, 1), (0, 2)], None);
            later.retstack_error = err;
            vec![Some(piece(&[], 1, &[], Some((1, 1)))), Some(later)]
        };
        // Before checkpoint 1 (one checkpoint taken): those items are not used.
        assert!(join(make(Some(1))).is_some());
        // After it: the later decoder may have parted ways with one thread's.
        assert!(join(make(Some(2))).is_none());
        assert!(join(make(Some(usize::MAX))).is_none());
        assert!(join(make(None)).is_some());
    }

    #[test]
    fn joined_items_carry_the_counts_between_them() {
        let j = Joined {
            out: vec![(t(3), Item::EndOfTrace), (t(3), Item::Disabled)],
            total: t(8),
        };
        let c = |insns| {
            Item::Counts(super::super::Counts {
                insns,
                blocks: None,
            })
        };
        assert_eq!(j.items(), [c(3), Item::EndOfTrace, Item::Disabled, c(5)]);
    }
}
