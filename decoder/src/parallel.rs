//! Parallel packet decoding: a PSB carries everything needed to start decoding afresh, so
//! a trace split at PSBs decodes on several threads at once.

use crate::config::Config;
use crate::error::DecodeError;
use crate::packet::{find_psb_forward, PacketDecoder, PacketRecord};
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
    fold_pieces(trace, config, threads, init, |d, value, end| {
        d.decode_with(|off, p| {
            if off >= end {
                return ControlFlow::Break(());
            }
            f(value, off, p);
            ControlFlow::Continue(())
        })
    })
}

/// [`par_fold`] over flat [`PacketRecord`]s (decoded by
/// [`PacketDecoder::decode_records_with`]), the fastest way through a whole trace.
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
    fold_pieces(trace, config, threads, init, |d, value, end| {
        d.decode_records_with(|off, r| {
            if off >= end {
                return ControlFlow::Break(());
            }
            f(value, off, r);
            ControlFlow::Continue(())
        })
    })
}

/// The trace split at PSBs, each piece on its own thread: `decode(decoder, value, end)`
/// folds packets into `value` until the piece's end or an error; after an error the
/// piece resyncs at its next PSB, if it has one.
fn fold_pieces<T, I, D>(
    trace: &[u8],
    config: &Config,
    threads: usize,
    init: I,
    decode: D,
) -> Vec<Piece<T>>
where
    T: Send,
    I: Fn() -> T + Sync,
    D: Fn(&mut PacketDecoder<'_>, &mut T, u64) -> Result<bool, DecodeError> + Sync,
{
    let run = |range: Range<usize>| {
        let mut value = init();
        let mut errors = Vec::new();
        let mut d = PacketDecoder::new(trace, config);
        let end = range.end as u64;
        // Like ptdump: bytes before the first PSB are skipped.
        let mut live = if range.start == 0 {
            d.sync_forward().is_ok()
        } else {
            d.sync_set(range.start as u64).is_ok()
        };
        while live {
            live = match decode(&mut d, &mut value, end) {
                Ok(_) => false,
                Err(e) if e.offset >= end => false,
                Err(e) => {
                    errors.push(e);
                    matches!(d.sync_forward(), Ok(at) if at < end)
                }
            };
        }
        Piece {
            range,
            value,
            errors,
        }
    };
    let ranges = split_at_psbs(trace, threads);
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
            assert!(pieces.len() <= threads);
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
