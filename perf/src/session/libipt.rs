//! Decoding the queues of a session: [`QueueDecoder`] (one queue, with the thread and
//! its code switched where the trace's time passes a change) and [`TimedDecoder`]
//! (several queues in time order).

use super::maps::{Mapping, MissingCode};
use super::queues::Lost;
use super::tasks::Context;
use super::Session;
use crate::decode::tsc_8b;
use pt_decoder::driver::{Counts, Decoder, DecoderBuilder, Item};
use pt_decoder::error::ErrorCode;
use pt_decoder::image::Image;
use std::collections::VecDeque;
use std::fmt;

/// One step of a queue's decode.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PerfItem {
    /// What the decoder returned. Its trace offsets are offsets into the current
    /// segment: [`QueueDecoder::file_offset`] turns them into file offsets.
    Decoded(Item),
    /// From here on this thread runs and its process's code is decoded: at the
    /// start of the queue and wherever it changes.
    Context(Context),
    /// Trace data is missing here (a gap between pieces, a full AUX buffer, lost
    /// records): the decoder goes on at the next PSB.
    Lost(Lost),
    /// The decoder found no code at an address (the `NoMap` error just returned):
    /// what is there instead.
    NoCode(NoCode),
}

/// Code the decoder did not find, explained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoCode {
    /// The address.
    pub ip: u64,
    /// The process.
    pub pid: Option<u32>,
    /// The mapping that holds the address, if any.
    pub mapping: Option<Mapping>,
    /// Why its code is not there.
    pub why: MissingCode,
}

impl fmt::Display for NoCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no code at {:#x}", self.ip)?;
        if let Some(p) = self.pid {
            write!(f, " in pid {p}")?;
        }
        if let Some(m) = &self.mapping {
            write!(
                f,
                ": {} mapped at {:#x}-{:#x} (pgoff {:#x})",
                m.filename,
                m.start,
                m.end(),
                m.pgoff
            )?;
        }
        write!(f, ": {}", self.why)
    }
}

type Configure<'s> = Box<dyn Fn(DecoderBuilder<'s>) -> DecoderBuilder<'s> + 's>;

/// A queue's decode: its segments in order, each with a [`Decoder`], and the items
/// the session adds ([`PerfItem`]).
pub struct QueueDecoder<'s, 'a> {
    session: &'s Session<'a>,
    queue: usize,
    configure: Configure<'s>,
    /// The next segment to open.
    next_segment: usize,
    /// The segment being decoded and its decoder.
    segment: usize,
    dec: Option<Decoder<'s>>,
    ctx: Option<Context>,
    image: Option<&'s Image>,
    /// When the context next changes (perf time).
    next_change: Option<u64>,
    /// The time of the last item with one (perf time).
    time: Option<u64>,
    out: VecDeque<PerfItem>,
    /// Lost data at a trace position: (segment, offset), in order.
    lost_at: VecDeque<(usize, u64, Lost)>,
    /// Lost data at a time only, in time order.
    lost_timed: VecDeque<Lost>,
    counts: Counts,
    /// A switch due after the item just returned (applied before the decoder goes on,
    /// so that the item's block can still be listed with its own image).
    pending: Option<Option<u64>>,
    /// The queue's code may change while decoding.
    switches: bool,
    done: bool,
    /// The AUXTRACE reference of the part last looked up: its byte range in the
    /// current segment and the reference (items come in trace order, so most fall in
    /// the part of the one before).
    reference: (u64, u64, u64),
}

impl<'s, 'a> QueueDecoder<'s, 'a> {
    pub(super) fn new(session: &'s Session<'a>, queue: usize) -> Self {
        let mut lost_at = Vec::new();
        let mut lost_timed = VecDeque::new();
        if let Some(q) = session.queues().get(queue) {
            for l in &q.lost {
                match l.aux_offset.and_then(|a| q.position_of(a)) {
                    Some((s, o)) if !session.snapshot() => lost_at.push((s, o, *l)),
                    _ if l.time.is_some() => lost_timed.push_back(*l),
                    // Neither a place nor a time: at the start.
                    _ => lost_at.push((0, 0, *l)),
                }
            }
        }
        lost_at.sort_by_key(|&(s, o, _)| (s, o));
        let switches = session.is_timed();
        QueueDecoder {
            session,
            queue,
            configure: Box::new(|b| b),
            next_segment: 0,
            segment: 0,
            dec: None,
            ctx: None,
            image: None,
            next_change: None,
            time: None,
            out: VecDeque::new(),
            lost_at: lost_at.into(),
            lost_timed,
            counts: Counts::default(),
            pending: None,
            switches,
            done: false,
            reference: (0, 0, 0),
        }
    }

    /// Sets up each segment's decoder: `configure` gets a builder with the session's
    /// configuration (granularity, resync policy, count-only, flow options, …). A
    /// queue whose code may change is decoded on one thread.
    pub fn configure(
        mut self,
        configure: impl Fn(DecoderBuilder<'s>) -> DecoderBuilder<'s> + 's,
    ) -> Self {
        self.configure = Box::new(configure);
        self
    }

    /// The queue (an index into [`Session::queues`]).
    pub fn queue(&self) -> usize {
        self.queue
    }

    /// The segment being decoded.
    pub fn segment(&self) -> usize {
        self.segment
    }

    /// Who runs now.
    pub fn context(&self) -> Option<Context> {
        self.ctx
    }

    /// The time of the last item that had one (perf time).
    pub fn time(&self) -> Option<u64> {
        self.time
    }

    /// The image decoded with now.
    pub fn image(&self) -> Option<&'s Image> {
        self.image
    }

    /// The current segment's decoder (e.g. for [`Decoder::block_ips`] after an
    /// [`Item::Block`]); `None` between segments.
    pub fn decoder(&mut self) -> Option<&mut Decoder<'s>> {
        self.dec.as_mut()
    }

    /// Instructions (and blocks) decoded so far, over all segments.
    pub fn counts(&self) -> Counts {
        let mut c = self.counts;
        if let Some(d) = &self.dec {
            let n = d.counts();
            c.insns += n.insns;
            c.blocks = match (c.blocks, n.blocks) {
                (Some(a), Some(b)) => Some(a + b),
                (a, b) => a.or(b),
            };
        }
        c
    }

    /// The file offset of trace offset `offset` of the current segment (what the
    /// decoder's items and errors report).
    pub fn file_offset(&self, offset: u64) -> Option<u64> {
        self.session
            .queues()
            .get(self.queue)?
            .file_offset(self.segment, offset)
    }

    /// The AUX stream offset of trace offset `offset` of the current segment.
    pub fn aux_offset(&self, offset: u64) -> Option<u64> {
        self.session
            .queues()
            .get(self.queue)?
            .aux_offset(self.segment, offset)
    }

    /// The perf time of a decoder timestamp at trace offset `offset`.
    fn perf_time(&mut self, tsc: u64, offset: u64) -> u64 {
        let (lo, hi, mut r) = self.reference;
        if !(lo..hi).contains(&offset) {
            let q = &self.session.queues()[self.queue];
            let part = q.segments.get(self.segment).and_then(|s| s.part_at(offset));
            r = part
                .and_then(|p| q.pieces.get(p.piece))
                .map_or(0, |pc| pc.reference);
            self.reference =
                part.map_or((0, 0, 0), |p| (p.at as u64, p.at as u64 + p.len as u64, r));
        }
        self.session.tsc_to_time(tsc_8b(tsc, r))
    }

    /// Switches to what runs at `time`, queueing a [`PerfItem::Context`] if the thread
    /// changed.
    fn switch_to(&mut self, time: Option<u64>) {
        let s = self.session;
        let ctx = s.running(self.queue, time);
        let image = s.image(ctx.pid, time);
        if let (Some(dec), Some(old)) = (&mut self.dec, self.image) {
            if !core::ptr::eq(old, image) {
                dec.set_image(image);
            }
        }
        self.image = Some(image);
        let changed = self
            .ctx
            .map_or(true, |c| (c.pid, c.tid) != (ctx.pid, ctx.tid));
        self.ctx = Some(ctx);
        if changed {
            self.out.push_back(PerfItem::Context(ctx));
        }
        self.next_change = time.and_then(|t| s.next_change(self.queue, &ctx, t));
    }

    /// Opens the next segment; `false` at the end.
    fn open(&mut self) -> bool {
        let s = self.session;
        let Some(q) = s.queues().get(self.queue) else {
            return false;
        };
        let i = self.next_segment;
        if i >= q.segments.len() {
            return false;
        }
        self.next_segment += 1;
        self.segment = i;
        self.reference = (0, 0, 0);
        if let Some(lost) = q.lost_before(i) {
            self.out.push_back(PerfItem::Lost(lost));
        }
        let trace = q.segment_bytes(i);
        // The time the segment starts at: its first PSB+'s TSC.
        let start = if s.is_timed() {
            super::overlap::next_psb(trace, 0)
                .and_then(|p| first_tsc(trace, p))
                .map(|tsc| self.perf_time(tsc, 0))
        } else {
            None
        };
        if start.is_some() {
            self.time = start;
        }
        self.dec = None;
        self.switch_to(start.or(self.time));
        let image = self.image.unwrap_or_else(|| s.image(None, None));
        let mut b = (self.configure)(s.builder(trace, image));
        if self.switches {
            b = b.threads(1);
        }
        self.dec = Some(b.build());
        true
    }

    /// Lost data due before trace offset `offset` of the current segment (or all of
    /// the segment's, at its end).
    fn take_lost(&mut self, offset: Option<u64>) {
        while let Some(&(s, o, l)) = self.lost_at.front() {
            let due = s < self.segment || (s == self.segment && offset.map_or(true, |x| o <= x));
            if !due {
                break;
            }
            self.lost_at.pop_front();
            self.out.push_back(PerfItem::Lost(l));
        }
    }

    fn take_lost_timed(&mut self, time: Option<u64>) {
        while let Some(l) = self.lost_timed.front() {
            if time.is_some_and(|t| l.time.map_or(true, |lt| lt <= t)) {
                let l = *l;
                self.lost_timed.pop_front();
                self.out.push_back(PerfItem::Lost(l));
            } else {
                break;
            }
        }
    }

    /// The next item.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<PerfItem> {
        loop {
            if let Some(x) = self.out.pop_front() {
                return Some(x);
            }
            if let Some(t) = self.pending.take() {
                self.switch_to(t);
                continue;
            }
            if self.done {
                return None;
            }
            let Some(dec) = &mut self.dec else {
                if !self.open() {
                    self.done = true;
                    self.take_lost(None);
                    self.segment = usize::MAX;
                    self.take_lost(None);
                    while let Some(l) = self.lost_timed.pop_front() {
                        self.out.push_back(PerfItem::Lost(l));
                    }
                }
                continue;
            };
            let Some(item) = dec.next() else {
                let c = dec.counts();
                self.counts.insns += c.insns;
                self.counts.blocks = match (self.counts.blocks, c.blocks) {
                    (Some(a), Some(b)) => Some(a + b),
                    (a, b) => a.or(b),
                };
                self.dec = None;
                // What is due in this segment and was not passed.
                let seg = self.segment;
                while self.lost_at.front().is_some_and(|&(s, _, _)| s == seg) {
                    if let Some((_, _, l)) = self.lost_at.pop_front() {
                        self.out.push_back(PerfItem::Lost(l));
                    }
                }
                continue;
            };
            let (offset, tsc, is_event) = match &item {
                Item::Block(b) => (Some(b.offset), b.time.tsc, false),
                Item::Insn(i) => (Some(i.offset), i.time.tsc, false),
                Item::Event(e) => (Some(e.offset), e.event.time.tsc, true),
                Item::Error(e) => (e.offset, None, false),
                _ => (None, None, false),
            };
            self.take_lost(offset);
            let time = tsc.map(|t| self.perf_time(t, offset.unwrap_or(0)));
            if let Some(t) = time {
                self.time = Some(self.time.map_or(t, |old| old.max(t)));
            }
            self.take_lost_timed(time);
            let crossed = time.is_some_and(|t| self.next_change.is_some_and(|n| t >= n));
            if crossed && is_event {
                self.switch_to(time);
            }
            let no_map = match &item {
                Item::Error(e) if e.code == ErrorCode::NoMap => Some(e.ip),
                _ => None,
            };
            // The common case: nothing else is due, the item goes out directly.
            if self.out.is_empty() && !crossed && no_map.is_none() {
                return Some(PerfItem::Decoded(item));
            }
            self.out.push_back(PerfItem::Decoded(item));
            if crossed && !is_event {
                self.pending = Some(time);
            }
            if let Some(ip) = no_map {
                let pid = self.ctx.and_then(|c| c.pid);
                let n = self.session.why_no_code(pid, ip, self.time);
                self.out.push_back(PerfItem::NoCode(n));
            }
        }
    }
}

impl Iterator for QueueDecoder<'_, '_> {
    type Item = PerfItem;

    fn next(&mut self) -> Option<PerfItem> {
        QueueDecoder::next(self)
    }
}

/// The TSC of the PSB+ at `psb`.
fn first_tsc(trace: &[u8], psb: usize) -> Option<u64> {
    let mut pkts = pt_decoder::packet::PacketDecoder::new(trace, &pt_decoder::Config::default());
    pkts.sync_set(psb as u64).ok()?;
    loop {
        match pkts.next_packet().ok()?.1 {
            pt_encoder::Packet::Tsc { tsc } => return Some(tsc),
            pt_encoder::Packet::Psbend => return None,
            _ => {}
        }
    }
}

/// Several queues decoded together in time order, as perf's timed decoding runs
/// them: the queue with the earliest time goes on.
pub struct TimedDecoder<'s, 'a> {
    queues: Vec<QueueDecoder<'s, 'a>>,
    done: Vec<bool>,
}

impl<'s, 'a> TimedDecoder<'s, 'a> {
    pub(super) fn new(queues: Vec<QueueDecoder<'s, 'a>>) -> Self {
        let done = vec![false; queues.len()];
        TimedDecoder { queues, done }
    }

    /// The queue decoders (in the order given).
    pub fn queues(&self) -> &[QueueDecoder<'s, 'a>] {
        &self.queues
    }

    /// The next item and the position of its queue in the order given.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<(usize, PerfItem)> {
        loop {
            let pick = (0..self.queues.len())
                .filter(|&i| !self.done[i])
                .min_by_key(|&i| self.queues[i].time().unwrap_or(0))?;
            match self.queues[pick].next() {
                Some(item) => return Some((pick, item)),
                None => self.done[pick] = true,
            }
        }
    }
}

impl Iterator for TimedDecoder<'_, '_> {
    type Item = (usize, PerfItem);

    fn next(&mut self) -> Option<(usize, PerfItem)> {
        TimedDecoder::next(self)
    }
}
