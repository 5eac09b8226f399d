//! A hasher for the simulator's per-instruction maps (code pages by
//! address, threads by id, processes by pid): their keys are a few machine
//! integers, not attacker-chosen strings, and std's SipHash was the largest
//! cost of a recording (a lookup per retired instruction).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Multiply-rotate hashing of integer words (the scheme of rustc's FxHash).
#[derive(Clone, Copy, Debug, Default)]
pub struct IntHasher(u64);

const K: u64 = 0x517c_c1b7_2722_0a95;

impl IntHasher {
    #[inline]
    fn add(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(K);
    }
}

impl Hasher for IntHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
    }
    #[inline]
    fn write_u32(&mut self, x: u32) {
        self.add(u64::from(x));
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.add(x);
    }
    #[inline]
    fn write_usize(&mut self, x: usize) {
        self.add(x as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A map keyed by integers, hashed with [`IntHasher`].
pub type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_page_addresses() {
        let mut m: IntMap<u64, u64> = IntMap::default();
        for i in 0..10_000u64 {
            m.insert(0x4000_0000 + i * 4096, i);
        }
        assert_eq!(m.len(), 10_000);
        assert_eq!(m[&(0x4000_0000 + 77 * 4096)], 77);
        let h = |x: u64| {
            let mut s = IntHasher::default();
            s.write_u64(x);
            s.finish()
        };
        assert_ne!(h(0x1000), h(0x2000));
    }
}
