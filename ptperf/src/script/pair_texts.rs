//! Branch lines' texts by branch: perf script's `--itrace=b` lines repeat the
//! same (source, target) text again and again, so each is formatted once and
//! copied afterwards.
//!
//! The texts live in one arena, each after its key, in the order they were
//! first printed; a small two-way table of (tag, offset) finds them. A hit
//! reads one table line and then the record's lines in a row, which the
//! prefetcher follows: the few thousand branches of a hot loop stay in the
//! second-level cache. (A table of keys with a separate allocation per text
//! took two cache misses a line.)

/// What a branch text depends on: code image, pid, source, target. (The
/// fields printed are the same for every branch line of a session; the
/// cache keeps texts of one selection of fields at a time.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PairKey {
    pub code: u64,
    pub pid: i32,
    pub ip: u64,
    pub addr: u64,
}

impl PairKey {
    fn hash(&self) -> u64 {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        (self.ip.rotate_left(17) ^ self.addr ^ self.code.wrapping_mul(K)).wrapping_mul(K)
    }
}

/// The arena's unit: a record is a header chunk (code, source, target, then
/// pid and the text's length), then its text padded with spaces to whole
/// chunks, copied a chunk at a time.
type Chunk = [u8; CHUNK];
const CHUNK: usize = 32;

fn header(key: &PairKey, n: u32) -> Chunk {
    let mut h = [0; CHUNK];
    h[0..8].copy_from_slice(&key.code.to_ne_bytes());
    h[8..16].copy_from_slice(&key.ip.to_ne_bytes());
    h[16..24].copy_from_slice(&key.addr.to_ne_bytes());
    h[24..28].copy_from_slice(&key.pid.to_ne_bytes());
    h[28..32].copy_from_slice(&n.to_ne_bytes());
    h
}

/// A table way: the hash's low 32 bits and the record's first chunk.
#[derive(Clone, Copy, Debug)]
struct Way {
    tag: u32,
    at: u32,
}

const EMPTY: Way = Way {
    tag: 0,
    at: u32::MAX,
};

/// Where a missed text goes ([`PairTexts::insert`]).
#[derive(Clone, Copy, Debug)]
pub struct Miss {
    set: usize,
    tag: u32,
}

/// Branch texts by [`PairKey`]: a two-way set-associative table over one
/// arena of records, cleared whole when the arena reaches its limit (memory
/// stays flat however many branches a trace has) or the fields change.
pub struct PairTexts {
    sets: Vec<[Way; 2]>,
    /// `sets.len() - 1`.
    mask: usize,
    arena: Vec<Chunk>,
    /// Chunks kept at most.
    limit: usize,
    /// The fields the texts are printed with.
    fields: u64,
}

impl PairTexts {
    /// A cache of 2^`set_bits` sets whose arena holds at most about `limit`
    /// bytes.
    pub fn new(set_bits: u32, limit: usize) -> Self {
        Self {
            sets: vec![[EMPTY; 2]; 1 << set_bits],
            mask: (1 << set_bits) - 1,
            arena: Vec::new(),
            limit: (limit / CHUNK).min(u32::MAX as usize / 2),
            fields: 0,
        }
    }

    /// Appends `key`'s text (for `fields`) to `buf`; a [`Miss`] (nothing
    /// written) if it is not cached.
    #[inline]
    pub fn put(&self, key: &PairKey, fields: u64, buf: &mut Vec<u8>) -> Result<(), Miss> {
        let h = key.hash();
        let (set, tag) = ((h >> 32) as usize & self.mask, h as u32);
        let miss = Miss { set, tag };
        if fields != self.fields {
            return Err(miss);
        }
        let [w0, w1] = self.sets[set];
        let text = match self.text_at(w0, tag, key) {
            Some(t) => t,
            None => self.text_at(w1, tag, key).ok_or(miss)?,
        };
        put_chunks(buf, text.0, text.1);
        Ok(())
    }

    /// The record `way` names if it is `key`'s: its text in whole chunks,
    /// and the text's length.
    #[inline(always)]
    fn text_at(&self, way: Way, tag: u32, key: &PairKey) -> Option<(&[u8], usize)> {
        if way.tag != tag {
            return None;
        }
        let (head, text) = self.arena.get(way.at as usize..)?.split_first()?;
        let word = |i: usize| u64::from_ne_bytes(*head[8 * i..].first_chunk().unwrap_or(&[0; 8]));
        let pid_n = word(3);
        if word(0) != key.code
            || word(1) != key.ip
            || word(2) != key.addr
            || pid_n as u32 != key.pid as u32
        {
            return None;
        }
        let n = (pid_n >> 32) as usize;
        let chunks = text.get(..n.div_ceil(CHUNK))?;
        Some((chunks.as_flattened(), n))
    }

    /// Keeps `text` as `key`'s (for `fields`), in the first way of the set
    /// `miss` names (what was there moves to the second).
    pub fn insert(&mut self, miss: Miss, key: &PairKey, fields: u64, text: &[u8]) {
        let chunks = text.chunks(CHUNK);
        if self.arena.len() + 1 + chunks.len() > self.limit || fields != self.fields {
            self.clear();
            self.fields = fields;
        }
        let at = self.arena.len();
        self.arena.push(header(key, text.len() as u32));
        for c in chunks {
            let mut chunk = [b' '; CHUNK];
            chunk[..c.len()].copy_from_slice(c);
            self.arena.push(chunk);
        }
        let ways = &mut self.sets[miss.set];
        ways[1] = ways[0];
        ways[0] = Way {
            tag: miss.tag,
            at: at as u32,
        };
    }

    /// Forgets every text.
    fn clear(&mut self) {
        self.arena.clear();
        self.sets.fill([EMPTY; 2]);
    }
}

/// Appends the first `n` bytes of `chunks` (whole 32-byte chunks, at least
/// `n` bytes) to `buf`, a chunk at a time: a few vector moves instead of a
/// memcpy call for a length known only at run time.
#[inline]
pub fn put_chunks(buf: &mut Vec<u8>, chunks: &[u8], n: usize) {
    let total = chunks.len();
    assert!(
        n <= total && total % CHUNK == 0,
        "a text longer than its chunks"
    );
    buf.reserve(total);
    let start = buf.len();
    let src = chunks.as_ptr();
    // SAFETY: `reserve` made room for `total` bytes after `start`, and
    // `chunks` holds `total` bytes, whole chunks: the loop copies at most
    // that many; a vector's spare capacity never overlaps another slice; the
    // `n` bytes `set_len` makes part of `buf` were all written.
    unsafe {
        let dst = buf.as_mut_ptr().add(start);
        let mut i = 0;
        while i < n {
            std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), CHUNK);
            i += CHUNK;
        }
        buf.set_len(start + n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIELDS: u64 = 3;

    fn key(ip: u64, addr: u64) -> PairKey {
        PairKey {
            code: 7,
            pid: 42,
            ip,
            addr,
        }
    }

    fn fetch(p: &PairTexts, k: &PairKey) -> Option<Vec<u8>> {
        let mut buf = b"head ".to_vec();
        p.put(k, FIELDS, &mut buf).ok()?;
        Some(buf)
    }

    fn keep(p: &mut PairTexts, k: &PairKey, text: &[u8]) {
        let miss = p.put(k, FIELDS, &mut Vec::new()).unwrap_err();
        p.insert(miss, k, FIELDS, text);
    }

    #[test]
    fn texts_come_back_as_stored_and_only_for_their_key() {
        let mut p = PairTexts::new(4, 1 << 20);
        for (i, len) in [0usize, 1, 31, 32, 33, 200].into_iter().enumerate() {
            let k = key(0x1000 + i as u64, 0x2000);
            let text: Vec<u8> = (0..len).map(|j| b'a' + (j % 26) as u8).collect();
            keep(&mut p, &k, &text);
            let mut want = b"head ".to_vec();
            want.extend_from_slice(&text);
            assert_eq!(fetch(&p, &k), Some(want), "length {len}");
        }
        // Every field of the key tells texts apart.
        let k = key(0x1000, 0x2000);
        for other in [
            PairKey { code: 8, ..k },
            PairKey { pid: 43, ..k },
            PairKey { ip: 0x1001, ..k },
            PairKey { addr: 0x2001, ..k },
        ] {
            if other != key(0x1001, 0x2000) {
                assert_eq!(fetch(&p, &other), None, "{other:?}");
            }
        }
        // Texts of other fields are not these: keeping one forgets them.
        let miss = p.put(&k, FIELDS + 1, &mut Vec::new()).unwrap_err();
        p.insert(miss, &k, FIELDS + 1, b"other fields");
        assert_eq!(fetch(&p, &k), None);
        let mut buf = Vec::new();
        assert!(p.put(&k, FIELDS + 1, &mut buf).is_ok());
        assert_eq!(buf, b"other fields");
    }

    #[test]
    fn a_set_keeps_the_two_newest() {
        // One set: every key lands in it.
        let mut p = PairTexts::new(0, 1 << 20);
        for ip in 0..3u64 {
            keep(&mut p, &key(ip, 0), format!("text {ip}").as_bytes());
        }
        assert_eq!(fetch(&p, &key(0, 0)), None);
        assert_eq!(fetch(&p, &key(1, 0)), Some(b"head text 1".to_vec()));
        assert_eq!(fetch(&p, &key(2, 0)), Some(b"head text 2".to_vec()));
    }

    #[test]
    fn the_arena_stays_under_its_limit() {
        let mut p = PairTexts::new(8, 4096);
        let text = [b'x'; 100];
        for ip in 0..1000u64 {
            let k = key(ip, ip + 1);
            if let Err(miss) = p.put(&k, FIELDS, &mut Vec::new()) {
                p.insert(miss, &k, FIELDS, &text);
            }
            assert!(p.arena.len() * CHUNK <= 4096, "{}", p.arena.len());
            let mut want = b"head ".to_vec();
            want.extend_from_slice(&text);
            assert_eq!(fetch(&p, &k), Some(want));
        }
    }
}
