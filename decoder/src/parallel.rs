//! Parallel packet decoding: a PSB carries everything needed to start decoding afresh, so
//! a trace split at PSBs decodes on several threads at once.

use crate::config::Config;
use crate::error::DecodeError;
use crate::packet::{decode_records_pair, find_psb_forward, PacketDecoder, PacketRecord, PairStop};
use core::ops::{ControlFlow, Range};
use pt_encoder::Packet;

/// Split `trace` into at most `pieces` ranges of similar size that each start at a PSB
/// (except the first, which starts at 0 and holds whatever precedes the first PSB).
/// The ranges are in order and cover the whole trace.
pub fn split_at_psbs(trace: &[u8], pieces: usize) -> Vec<Range<usize>> {
    let pieces = pieces.max(1);
    let step = trace.len().div_ceil(pieces).max(1);
    let mut starts = vec![0];
    for i in 1..pieces {
        let Some(psb) = find_psb_forward(trace, i * step) else {
            break;
        };
        if psb > *starts.last().unwrap_or(&0) {
            starts.push(psb);
        }
    }
    let mut ranges: Vec<Range<usize>> = starts.windows(2).map(|w| w[0]..w[1]).collect();
    ranges.push(*starts.last().unwrap_or(&0)..trace.len());
    ranges
}

/// What one piece of a parallel decode produced.
#[derive(Debug)]
pub struct Piece<T> {
    /// The bytes this piece covered.
    pub range: Range<usize>,
    /// The folded value.
    pub value: T,
    /// Errors met (each followed by a resync at the next PSB inside the piece).
    pub errors: Vec<DecodeError>,
}

/// Decode `trace` on up to `threads` threads, folding each piece's packets into a value
/// made by `init` with `f(&mut value, offset, packet)`. Pieces come back in trace order,
/// so per-piece results combine into the same answer a single pass would give for
/// anything that does not depend on state carried across a PSB.
pub fn par_fold<T, I, F>(
    trace: &[u8],
    config: &Config,
    threads: usize,
    init: I,
    f: F,
) -> Vec<Piece<T>>
where
    T: Send,
    I: Fn() -> T + Sync,
    F: Fn(&mut T, u64, Packet) + Sync,
{
    let ranges = split_at_psbs(trace, threads);
    let run = |range: Range<usize>| {
        let mut value = init();
        let mut errors = Vec::new();
        let mut d = PacketDecoder::new(trace, config);
        let started = if range.start == 0 {
            // Like ptdump: bytes before the first PSB are skipped.
            d.sync_forward().is_ok()
        } else {
            d.sync_set(range.start as u64).is_ok()
        };
        let end = range.end as u64;
        if started {
            loop {
                let r = d.decode_with(|off, p| {
                    if off >= end {
                        return ControlFlow::Break(());
                    }
                    f(&mut value, off, p);
                    ControlFlow::Continue(())
                });
                match r {
                    Ok(_) => break,
                    Err(e) => {
                        if e.offset >= end {
                            break;
                        }
                        errors.push(e);
                        match d.sync_forward() {
                            Ok(at) if at < end => {}
                            _ => break,
                        }
                    }
                }
            }
        }
        Piece {
            range,
            value,
            errors,
        }
    };
    if ranges.len() == 1 {
        return ranges.into_iter().map(run).collect();
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = ranges
            .into_iter()
            .map(|r| {
                let run = &run;
                s.spawn(move || run(r))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h.join() {
                Ok(piece) => piece,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    })
}

/// One piece of a record fold in progress.
struct Chain<'a, T> {
    dec: PacketDecoder<'a>,
    range: Range<usize>,
    value: T,
    errors: Vec<DecodeError>,
    live: bool,
}

impl<'a, T> Chain<'a, T> {
    fn new(trace: &'a [u8], config: &Config, range: Range<usize>, value: T) -> Self {
        let mut dec = PacketDecoder::new(trace, config);
        let live = if range.start == 0 {
            dec.sync_forward().is_ok()
        } else {
            dec.sync_set(range.start as u64).is_ok()
        };
        Self {
            dec,
            range,
            value,
            errors: Vec::new(),
            live,
        }
    }

    /// Decoding stopped with `r`: the end of the piece, or an error to note and resync
    /// after (if another PSB starts inside the piece).
    fn stopped(&mut self, r: Result<bool, DecodeError>) {
        match r {
            Ok(_) => self.live = false,
            Err(e) if e.offset >= self.range.end as u64 => self.live = false,
            Err(e) => {
                self.errors.push(e);
                self.live = matches!(self.dec.sync_forward(), Ok(at) if at < self.range.end as u64);
            }
        }
    }

    /// The rest of the piece on its own.
    fn finish<F: Fn(&mut T, u64, PacketRecord)>(&mut self, f: &F) {
        let end = self.range.end as u64;
        while self.live {
            let value = &mut self.value;
            let r = self.dec.decode_records_with(|off, r| {
                if off >= end {
                    return ControlFlow::Break(());
                }
                f(value, off, r);
                ControlFlow::Continue(())
            });
            self.stopped(r);
        }
    }

    fn into_piece(self) -> Piece<T> {
        Piece {
            range: self.range,
            value: self.value,
            errors: self.errors,
        }
    }
}

/// Two adjacent pieces, decoded in turn on one thread (see [`decode_records_pair`]).
fn fold_pair<T, F: Fn(&mut T, u64, PacketRecord)>(
    a: &mut Chain<'_, T>,
    b: &mut Chain<'_, T>,
    f: &F,
) {
    let (end_a, end_b) = (a.range.end as u64, b.range.end as u64);
    while a.live && b.live {
        let (va, vb) = (&mut a.value, &mut b.value);
        let mut fa = |off, r| {
            if off >= end_a {
                return ControlFlow::Break(());
            }
            f(va, off, r);
            ControlFlow::Continue(())
        };
        let mut fb = |off, r| {
            if off >= end_b {
                return ControlFlow::Break(());
            }
            f(vb, off, r);
            ControlFlow::Continue(())
        };
        match decode_records_pair(&mut a.dec, &mut fa, &mut b.dec, &mut fb) {
            PairStop::First(r) => a.stopped(r),
            PairStop::Second(r) => b.stopped(r),
        }
    }
    a.finish(f);
    b.finish(f);
}

/// [`par_fold`] over [`PacketRecord`]s, the fastest way through a whole trace: the
/// trace is split at PSBs into two pieces per thread, and each thread decodes its two
/// pieces in turn, packet by packet, so that the core works on one while the other
/// waits for memory. Pieces come back in trace order, each folded in its own order.
pub fn par_fold_records<T, I, F>(
    trace: &[u8],
    config: &Config,
    threads: usize,
    init: I,
    f: F,
) -> Vec<Piece<T>>
where
    T: Send,
    I: Fn() -> T + Sync,
    F: Fn(&mut T, u64, PacketRecord) + Sync,
{
    let threads = threads.max(1);
    let ranges = split_at_psbs(trace, threads * 2);
    let run = |pair: &[Range<usize>]| -> Vec<Piece<T>> {
        let mut chains: Vec<Chain<'_, T>> = pair
            .iter()
            .map(|r| Chain::new(trace, config, r.clone(), init()))
            .collect();
        match chains.as_mut_slice() {
            [a, b] => fold_pair(a, b, &f),
            [a] => a.finish(&f),
            _ => {}
        }
        chains.into_iter().map(Chain::into_piece).collect()
    };
    let pairs: Vec<&[Range<usize>]> = ranges.chunks(2).collect();
    if pairs.len() == 1 {
        return run(pairs[0]);
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = pairs
            .into_iter()
            .map(|pair| {
                let run = &run;
                s.spawn(move || run(pair))
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| match h.join() {
                Ok(pieces) => pieces,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pt_encoder::{encode_to_vec, Tnt};

    fn trace() -> Vec<u8> {
        let mut v = vec![0x00, 0x00];
        for i in 0..100u64 {
            encode_to_vec(&Packet::Psb, &mut v).unwrap();
            encode_to_vec(&Packet::Tsc { tsc: i }, &mut v).unwrap();
            encode_to_vec(&Packet::Psbend, &mut v).unwrap();
            for _ in 0..i % 7 {
                encode_to_vec(&Packet::Tnt8(Tnt::from_payload(5).unwrap()), &mut v).unwrap();
            }
        }
        v
    }

    #[test]
    fn split_covers_the_trace_at_psbs() {
        let t = trace();
        for n in 1..12 {
            let r = split_at_psbs(&t, n);
            assert!(r.len() <= n);
            assert_eq!(r[0].start, 0);
            assert_eq!(r.last().unwrap().end, t.len());
            for w in r.windows(2) {
                assert_eq!(w[0].end, w[1].start);
                assert_eq!(&t[w[1].start..w[1].start + 2], &[0x02, 0x82]);
            }
        }
    }

    #[test]
    fn parallel_fold_sees_every_packet_once() {
        let t = trace();
        let single: Vec<(u64, Packet)> = {
            let mut d = PacketDecoder::new(&t, &Config::default());
            d.sync_forward().unwrap();
            d.map(|r| r.unwrap()).collect()
        };
        for threads in 1..6 {
            let pieces = par_fold(&t, &Config::default(), threads, Vec::new, |v, off, p| {
                v.push((off, p))
            });
            let all: Vec<_> = pieces.into_iter().flat_map(|p| p.value).collect();
            assert_eq!(all, single, "threads {threads}");
            let pieces =
                par_fold_records(&t, &Config::default(), threads, Vec::new, |v, off, r| {
                    v.push((off, r.packet()))
                });
            assert!(pieces.len() <= 2 * threads);
            assert!(pieces
                .windows(2)
                .all(|w| w[0].range.end == w[1].range.start));
            let all: Vec<_> = pieces.into_iter().flat_map(|p| p.value).collect();
            assert_eq!(all, single, "records, threads {threads}");
        }
    }

    #[test]
    fn errors_are_collected_per_piece() {
        let mut t = trace();
        let n = t.len();
        let tnt = (n / 2..n).find(|&i| t[i] == 0x0a).unwrap();
        t[tnt] = 0xc9;
        let pieces = par_fold(&t, &Config::default(), 3, || 0usize, |c, _, _| *c += 1);
        let errors: usize = pieces.iter().map(|p| p.errors.len()).sum();
        assert!(errors >= 1);
    }
}
