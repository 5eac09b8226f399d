//! AFL-style edge bitmaps: which byte an edge counts in, and AFL++'s hit-count classes.
//!
//! An edge `(from, to)` (the branch instruction's address and where it went, see
//! [`crate::Edge`]) is counted in byte `index(from, to) & (size - 1)` of a map whose
//! size is a power of two. Like AFL's `cur_location ^ (prev_location >> 1)`, the index
//! mixes the two ends asymmetrically, so that A→B and B→A differ:
//!
//! * [`EdgeHash::Afl`] (the default): `h(x) = high 32 bits of x · 0x9e3779b97f4a7c15`
//!   (Knuth's multiplicative hash, mod 2⁶⁴), `index = h(to) ^ (h(from) >> 1)`;
//! * [`EdgeHash::Libxdc`]: libxdc's own formula, so that maps compare bit for bit with
//!   libxdc's on the same trace: `m(x) = (x ^ (x >> 31)) · 0x7fb5d329728ea185`
//!   (mod 2⁶⁴), `index = low 32 bits of (m(to) ^ (m(from) >> 1))`.
//!
//! Which edges count ([`EdgeHash::counts`]):
//!
//! * with [`EdgeHash::Afl`], the edges the trace decides ([`crate::EdgeKind::is_decided`]:
//!   conditional branches both ways, indirect branches, returns, far and asynchronous
//!   transfers); direct jumps and calls follow from them;
//! * with [`EdgeHash::Libxdc`], conditional branches only, taken or not, as libxdc's
//!   fuzzing mode (`libxdc_decode`) counts them: libxdc reports the edges of TIPs
//!   (indirect branches, returns, far transfers) only to the edge callback of its
//!   trace mode, never in the bitmap, so a map compares bit for bit with libxdc's.
//!
//! Counts are raw bytes that wrap at 256, like AFL's instrumentation and libxdc;
//! [`classify_counts`] turns them into AFL++'s hit-count classes (1, 2, 3, 4-7, 8-15,
//! 16-31, 32-127, 128+ → 1, 2, 4, 8, 16, 32, 64, 128) before a fuzzer compares maps.

/// The formula that picks an edge's byte in the map (see the [module docs](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EdgeHash {
    /// Knuth's multiplicative hash of both ends.
    #[default]
    Afl,
    /// libxdc's formula, and libxdc's choice of edges (conditional branches only).
    Libxdc,
}

impl EdgeHash {
    /// The edge's index before masking with the map size.
    #[inline]
    pub fn index(self, from: u64, to: u64) -> u32 {
        match self {
            EdgeHash::Afl => {
                let h = |x: u64| (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as u32;
                h(to) ^ (h(from) >> 1)
            }
            EdgeHash::Libxdc => {
                let m = |x: u64| (x ^ (x >> 31)).wrapping_mul(0x7fb5_d329_728e_a185);
                (m(to) ^ (m(from) >> 1)) as u32
            }
        }
    }
}

impl EdgeHash {
    /// Whether an edge of `kind` counts in the map (see the [module docs](self)).
    #[inline]
    pub fn counts(self, kind: crate::EdgeKind) -> bool {
        match self {
            EdgeHash::Afl => kind.is_decided(),
            EdgeHash::Libxdc => kind == crate::EdgeKind::Cond,
        }
    }
}

/// AFL++'s hit-count class of a raw count (its `count_class_lookup8`).
pub const fn count_class(count: u8) -> u8 {
    match count {
        0 => 0,
        1 => 1,
        2 => 2,
        3 => 4,
        4..=7 => 8,
        8..=15 => 16,
        16..=31 => 32,
        32..=127 => 64,
        _ => 128,
    }
}

const CLASSES: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = count_class(i as u8);
        i += 1;
    }
    t
};

/// Replaces each raw count in `map` by its AFL++ hit-count class.
pub fn classify_counts(map: &mut [u8]) {
    for b in map {
        *b = CLASSES[usize::from(*b)];
    }
}

/// Counts one edge in `map` (whose length is a power of two) with `hash`: the
/// reference the decoder's precomputed indices are tested against.
pub fn count_edge(map: &mut [u8], hash: EdgeHash, from: u64, to: u64) {
    let mask = map.len().wrapping_sub(1);
    if let Some(b) = map.get_mut(hash.index(from, to) as usize & mask) {
        *b = b.wrapping_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_afl_plus_plus_buckets() {
        let got: Vec<u8> = [0u8, 1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 127, 128, 255]
            .iter()
            .map(|&c| count_class(c))
            .collect();
        assert_eq!(got, [0, 1, 2, 4, 8, 8, 16, 16, 32, 32, 64, 64, 128, 128]);
        let mut map = [3u8, 200, 0];
        classify_counts(&mut map);
        assert_eq!(map, [4, 128, 0]);
    }

    #[test]
    fn edges_are_directed() {
        for h in [EdgeHash::Afl, EdgeHash::Libxdc] {
            assert_ne!(h.index(0x401000, 0x401020), h.index(0x401020, 0x401000));
        }
    }

    #[test]
    fn libxdc_formula_by_hand() {
        // m(0) = 0, so the index of (0, to) is m(to)'s low half.
        let m = |x: u64| (x ^ (x >> 31)).wrapping_mul(0x7fb5_d329_728e_a185);
        assert_eq!(EdgeHash::Libxdc.index(0, 0x1234), m(0x1234) as u32);
        assert_eq!(EdgeHash::Libxdc.index(0x10, 0), (m(0x10) >> 1) as u32);
        let mut map = vec![0u8; 1 << 16];
        for _ in 0..257 {
            count_edge(&mut map, EdgeHash::Libxdc, 0x10, 0x20);
        }
        let i = EdgeHash::Libxdc.index(0x10, 0x20) as usize & 0xffff;
        assert_eq!(map[i], 1, "counts wrap at 256");
    }
}
