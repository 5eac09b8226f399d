//! Snapshot buffers overlap: where the next one's new data starts.
//!
//! In snapshot mode (`perf record -S`) every AUXTRACE record holds the whole AUX area
//! as it was when the snapshot was taken, so two snapshots taken close together share
//! data. perf's intel-pt.c finds where the later buffer's unseen data starts and
//! decodes the pair as one stream when they join up; [`find_overlap`] does the same,
//! by the same two methods:
//!
//! * with TSC packets: the last PSB+ with a TSC in the first buffer, and the PSB+
//!   with the same TSC in the second; the data after the first buffer's end lies as
//!   far from that PSB in the second buffer;
//! * without: the second buffer's data from a PSB must appear at the end of the first
//!   buffer, byte for byte.
//!
//! Data is only worth decoding from a PSB on, so the second buffer's data before its
//! first PSB is dropped either way. The first buffer may end in up to seven bytes of
//! padding (perf pads AUXTRACE data to eight bytes), which the second buffer holds as
//! real trace: the join point is moved back over them and the padding is reported, so
//! that it can be cut off instead of being decoded in the middle of the stream.

use pt_decoder::config::Config;
use pt_decoder::packet::PacketDecoder;
use pt_encoder::packet::{PSB_BYTES as PSB, PSB_SIZE};
use pt_encoder::Packet;

/// perf pads AUXTRACE data to a multiple of this.
const ALIGN: usize = 8;

/// Where a later snapshot buffer's data goes on from an earlier one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overlap {
    /// The first byte of the second buffer worth decoding (its length: none).
    pub start: usize,
    /// The second buffer continues the first from `start` on: they decode as one
    /// stream (the first one's last `padding` bytes cut off).
    pub consecutive: bool,
    /// Bytes at the end of the first buffer that are padding, not trace (only when
    /// `consecutive`).
    pub padding: usize,
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if needle.is_empty() {
        return Some(from.min(hay.len()));
    }
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// The first PSB at or after `from`.
pub(crate) fn next_psb(buf: &[u8], from: usize) -> Option<usize> {
    find(buf, &PSB, from)
}

/// The last PSB that starts before `end` and lies wholly in `buf[..end]`.
fn last_psb(buf: &[u8], end: usize) -> Option<usize> {
    let end = end.min(buf.len());
    buf[..end].windows(PSB_SIZE).rposition(|w| w == PSB)
}

/// The TSC in the PSB+ at `psb`, and how many bytes of `buf` are left from that TSC
/// packet on (perf's `rem`). `None` if the PSB+ ends (PSBEND) or the buffer ends or a
/// packet cannot be decoded before a TSC.
fn psb_tsc(buf: &[u8], psb: usize) -> Option<(u64, usize)> {
    let mut pkts = PacketDecoder::new(buf, &Config::default());
    pkts.sync_set(psb as u64).ok()?;
    loop {
        let (at, p) = pkts.next_packet().ok()?;
        match p {
            Packet::Tsc { tsc } => return Some((tsc, buf.len() - at as usize)),
            Packet::Psbend => return None,
            _ => {}
        }
    }
}

/// Compares 7-byte TSC values that may have wrapped (the nearer way round wins).
fn tsc_cmp(a: u64, b: u64) -> core::cmp::Ordering {
    use core::cmp::Ordering::*;
    const HALF: u64 = 1 << 55;
    if a == b {
        Equal
    } else if a < b {
        if b - a < HALF {
            Less
        } else {
            Greater
        }
    } else if a - b < HALF {
        Greater
    } else {
        Less
    }
}

/// Moves the join point `start` in `b` back over the bytes where `a`'s last bytes (its
/// padding) differ from `b`'s: returns the new start and the padding.
fn adjust_for_padding(a: &[u8], b: &[u8], start: usize) -> (usize, usize) {
    let pad = (ALIGN - 1).min(start).min(a.len());
    let mut p = start - pad;
    let mut q = a.len() - pad;
    let mut left = pad;
    while left > 0 && b[p] == a[q] {
        p += 1;
        q += 1;
        left -= 1;
    }
    (p, left)
}

/// The overlap by TSC: `a` and `b` both start at a PSB (perf decides by TSC alone
/// when the trace has them).
fn by_tsc(a: &[u8], b: &[u8]) -> Overlap {
    let no_overlap = Overlap {
        start: 0,
        consecutive: false,
        padding: 0,
    };
    let Some(last) = last_psb(a, a.len()) else {
        return no_overlap;
    };
    // The last PSB+ may be cut short by the end of the buffer: then the one before.
    let found = psb_tsc(a, last).or_else(|| psb_tsc(a, last_psb(a, last)?));
    // `rem_a`: bytes from that TSC to the end of `a`.
    let Some((tsc_a, rem_a)) = found else {
        return no_overlap;
    };
    let mut at = 0;
    loop {
        if let Some((tsc_b, rem_b)) = psb_tsc(b, at) {
            match tsc_cmp(tsc_a, tsc_b) {
                core::cmp::Ordering::Equal if rem_b >= rem_a => {
                    let start = b.len() - (rem_b - rem_a);
                    let (start, padding) = adjust_for_padding(a, b, start);
                    return Overlap {
                        start,
                        consecutive: true,
                        padding,
                    };
                }
                core::cmp::Ordering::Less => return no_overlap,
                _ => {}
            }
        }
        match next_psb(b, at + 1) {
            Some(n) => at = n,
            None => {
                return Overlap {
                    start: b.len(),
                    consecutive: false,
                    padding: 0,
                }
            }
        }
    }
}

/// Where `b`'s data not already in `a` starts (see the [module docs](self));
/// `have_tsc`: the trace has TSC packets to compare.
pub fn find_overlap(a: &[u8], b: &[u8], have_tsc: bool) -> Overlap {
    let Some(b0) = next_psb(b, 0) else {
        return Overlap {
            start: b.len(),
            consecutive: false,
            padding: 0,
        };
    };
    let no_overlap = Overlap {
        start: b0,
        consecutive: false,
        padding: 0,
    };
    let Some(a0) = next_psb(a, 0) else {
        return no_overlap;
    };
    let a = &a[a0..];
    let b = &b[b0..];
    if have_tsc {
        let o = by_tsc(a, b);
        return Overlap {
            start: o.start + b0,
            ..o
        };
    }
    // `b` cannot end inside `a`: compare from the PSB of `a` where at most `b.len()`
    // bytes are left.
    let mut at = 0;
    while a.len() - at > b.len() {
        match next_psb(a, at + 1) {
            Some(n) => at = n,
            None => return no_overlap,
        }
    }
    loop {
        let tail = &a[at..];
        if b[..tail.len()] == *tail {
            let (start, padding) = adjust_for_padding(a, b, tail.len());
            return Overlap {
                start: start + b0,
                consecutive: true,
                padding,
            };
        }
        match next_psb(a, at + 1) {
            Some(n) => at = n,
            None => return no_overlap,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pt_encoder::encode_to_vec;

    fn psb_plus(tsc: Option<u64>, out: &mut Vec<u8>) {
        encode_to_vec(&Packet::Psb, out).unwrap();
        if let Some(tsc) = tsc {
            encode_to_vec(&Packet::Tsc { tsc }, out).unwrap();
        }
        encode_to_vec(&Packet::Psbend, out).unwrap();
    }

    /// A stream of `n` PSB+ (TSC 100, 200, ...) each followed by `filler` TNT bytes.
    fn stream(n: u64, tsc: bool, filler: usize) -> Vec<u8> {
        let mut v = Vec::new();
        for i in 1..=n {
            psb_plus(tsc.then_some(i * 100), &mut v);
            for k in 0..filler {
                // TNT-8 bytes with a varying pattern (even, above 2).
                v.push(0x04 | ((i as u8 + k as u8) << 3));
            }
        }
        v
    }

    #[test]
    fn snapshots_sharing_data_join_where_the_new_data_starts() {
        for tsc in [true, false] {
            let all = stream(6, tsc, 20);
            // Snapshot a: the stream up to 70% of it; b: from 30% to the end.
            let a = &all[..all.len() * 7 / 10];
            let cut = all.len() * 3 / 10;
            let b = &all[cut..];
            let o = find_overlap(a, b, tsc);
            assert!(o.consecutive, "tsc {tsc}");
            assert_eq!(o.padding, 0);
            // a, then b from the join point, is the whole stream.
            let mut joined = a.to_vec();
            joined.extend_from_slice(&b[o.start..]);
            assert_eq!(joined, all, "tsc {tsc}");
        }
    }

    #[test]
    fn padding_at_the_end_of_the_first_buffer_is_found_and_cut() {
        let all = stream(4, true, 13);
        let end = all.len() * 3 / 4;
        let mut a = all[..end].to_vec();
        a.extend_from_slice(&[0, 0, 0]);
        let b = &all[all.len() / 4..];
        let o = find_overlap(&a, b, true);
        assert!(o.consecutive);
        assert_eq!(o.padding, 3);
        let mut joined = a[..a.len() - o.padding].to_vec();
        joined.extend_from_slice(&b[o.start..]);
        assert_eq!(joined, all);
        // Without TSC, by the bytes: the padding does not match, so the tail of `a`
        // from its last PSB is not found in `b` unless the comparison allows it;
        // perf's byte method then finds no overlap.
        let o = find_overlap(&a, b, false);
        assert!(!o.consecutive);
        assert_eq!(o.start, next_psb(b, 0).unwrap());
    }

    #[test]
    fn disjoint_snapshots_and_odd_buffers() {
        let a = stream(3, true, 10);
        let mut b = Vec::new();
        for i in 10..13 {
            psb_plus(Some(i * 100), &mut b);
            b.extend_from_slice(&[0x0c; 10]);
        }
        let o = find_overlap(&a, &b, true);
        assert_eq!(
            o,
            Overlap {
                start: 0,
                consecutive: false,
                padding: 0
            }
        );
        // No PSB in b: nothing worth decoding.
        assert_eq!(find_overlap(&a, &[0x0c; 40], true).start, 40);
        // No PSB in a: b from its first PSB.
        let mut b2 = vec![0x0c; 5];
        b2.extend_from_slice(&b);
        assert_eq!(find_overlap(&[0x0c; 40], &b2, true).start, 5);
        assert_eq!(find_overlap(&[], &[], false).start, 0);
        // b entirely inside a: nothing new.
        let o = find_overlap(&a, &a[a.len() / 2..], true);
        assert!(o.start == a.len() / 2 || o.start >= a.len() - a.len() / 2);
    }
}
