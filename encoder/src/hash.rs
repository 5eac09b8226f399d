//! The hasher of every integer-keyed table of the workspace: code addresses (the
//! block caches of both decoders, the perf walker's, the simulator's code pages,
//! profiles), and tuples and small records of integers (thread ids, TNT-run
//! memos, report tallies). It lives in this crate, the one every layer builds
//! on, so that there is one.
//!
//! Such keys are already well spread; SipHash, std's default, would cost more
//! than the lookup. This is Knuth's multiplicative hashing by the golden ratio:
//! one xor and one multiply per word, the high half folded into the low one at
//! the end, since hash tables index by the low bits, which a product alone
//! mixes poorly. Not for keys an adversary chooses.
//!
//! ```
//! use pt_encoder::hash::IpMap;
//! let mut blocks: IpMap<u32> = IpMap::default();
//! blocks.insert(0x401000, 7);
//! assert_eq!(blocks.get(&0x401000), Some(&7));
//! ```

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Knuth's multiplier: 2^64 divided by the golden ratio.
const K: u64 = 0x9e37_79b9_7f4a_7c15;

/// The hasher (see the [module docs](self)).
#[derive(Clone, Copy, Debug, Default)]
pub struct IpHasher(u64);

impl Hasher for IpHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }

    #[inline]
    fn write_u16(&mut self, v: u16) {
        self.write_u64(u64::from(v));
    }

    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    #[inline]
    fn write_i32(&mut self, v: i32) {
        self.write_u64(u64::from(v as u32));
    }

    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }

    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(K);
    }
}

/// Builds [`IpHasher`]s.
pub type IpBuildHasher = BuildHasherDefault<IpHasher>;

/// A table keyed by code address.
pub type IpMap<V> = HashMap<u64, V, IpBuildHasher>;

/// A table keyed by integers, tuples or small records of them.
pub type IntMap<K, V> = HashMap<K, V, IpBuildHasher>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn hash<T: Hash>(v: T) -> u64 {
        IpBuildHasher::default().hash_one(v)
    }

    /// Addresses 16 bytes apart spread over the low bits (the table's index) about
    /// as random values would (1024 of them fill some 650 of 1024 slots); without
    /// the fold, the product's low bits would take 64 values.
    #[test]
    fn spreads_nearby_addresses() {
        let mut low: Vec<u64> = (0..1024u64)
            .map(|i| hash(0x40_0000 + i * 16) & 1023)
            .collect();
        low.sort_unstable();
        low.dedup();
        assert!(low.len() > 500, "{} distinct slots of 1024", low.len());
    }

    /// The same value hashes alike whatever width it is written with, and a
    /// tuple depends on each part.
    #[test]
    fn widths_and_tuples() {
        assert_eq!(hash(7u32), hash(7u64));
        assert_ne!(hash((1u32, 2u64)), hash((2u32, 1u64)));
        assert_ne!(hash("ab"), hash("ba"));
    }
}
