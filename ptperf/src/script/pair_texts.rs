//! Branch lines' texts by branch: perf script's `--itrace=b` lines repeat the
//! same (source, target) text again and again, so each is formatted once and
//! copied afterwards.
//!
//! The texts live in one arena, each after a header with its key, in the
//! order they were first printed; a two-way table of (tag, record) finds
//! them. Each header also names the record printed after it last time: a
//! loop prints its branches in the same order again, so the next line's
//! record is mostly known without the table (four lines in five on a
//! CPython recording), and a hit costs the record's own cache lines only.

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

/// The arena's unit. A record is a header chunk, then its text padded with
/// spaces to whole chunks (so that every header starts a chunk).
type Chunk = [u8; CHUNK];
const CHUNK: usize = 32;

/// A record's header: the key (the code image's stamp in 32 bits: keys of
/// larger stamps are not kept), the text's length, and the record printed
/// after this one last time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    ip: u64,
    addr: u64,
    code: u32,
    pid: i32,
    n: u32,
    next: u32,
}

impl Header {
    fn to_chunk(self) -> Chunk {
        let mut h = [0; CHUNK];
        h[0..8].copy_from_slice(&self.ip.to_ne_bytes());
        h[8..16].copy_from_slice(&self.addr.to_ne_bytes());
        h[16..20].copy_from_slice(&self.code.to_ne_bytes());
        h[20..24].copy_from_slice(&self.pid.to_ne_bytes());
        h[24..28].copy_from_slice(&self.n.to_ne_bytes());
        h[28..32].copy_from_slice(&self.next.to_ne_bytes());
        h
    }

    /// Whether the header `h` is `key`'s: its text's length if so.
    #[inline(always)]
    fn matches(h: &Chunk, key: &PairKey) -> Option<usize> {
        let word = |i: usize| u64::from_ne_bytes(*h[8 * i..].first_chunk().unwrap_or(&[0; 8]));
        let code_pid = u64::from(key.code as u32) | u64::from(key.pid as u32) << 32;
        (word(0) == key.ip && word(1) == key.addr && word(2) == code_pid)
            .then(|| word(3) as u32 as usize)
    }
}

/// Where the next record's index sits in a header.
const NEXT: std::ops::Range<usize> = 28..32;

/// No record.
const NONE: u32 = u32::MAX;

/// A table way: the hash's low 32 bits and the record's first chunk.
#[derive(Clone, Copy, Debug)]
struct Way {
    tag: u32,
    at: u32,
}

const EMPTY: Way = Way { tag: 0, at: NONE };

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
    /// The record printed last ([`NONE`]: none yet).
    last: u32,
}

impl PairTexts {
    /// A cache of 2^`set_bits` sets whose arena holds at most about `limit`
    /// bytes.
    pub fn new(set_bits: u32, limit: usize) -> Self {
        Self {
            sets: vec![[EMPTY; 2]; 1 << set_bits],
            mask: (1 << set_bits) - 1,
            arena: Vec::new(),
            limit: (limit / CHUNK).min(NONE as usize / 2),
            fields: 0,
            last: NONE,
        }
    }

    /// Appends `key`'s text (for `fields`) to `buf`; a [`Miss`] (nothing
    /// written) if it is not cached.
    #[inline(always)]
    pub fn put(&mut self, key: &PairKey, fields: u64, buf: &mut Vec<u8>) -> Result<(), Miss> {
        // Keys of stamps past 32 bits are never kept (nor matched).
        let kept = fields == self.fields && key.code <= u64::from(u32::MAX);
        // The record that followed the last one last time.
        let next = self.header(self.last).map_or(NONE, next_of);
        if kept {
            if let Some(n) = self.header(next).and_then(|h| Header::matches(h, key)) {
                self.copy(next, n, buf);
                self.last = next;
                return Ok(());
            }
        }
        self.put_found(key, kept, buf)
    }

    /// [`PairTexts::put`] of a record found through the table.
    #[inline(never)]
    fn put_found(&mut self, key: &PairKey, kept: bool, buf: &mut Vec<u8>) -> Result<(), Miss> {
        let h = key.hash();
        let (set, tag) = ((h >> 32) as usize & self.mask, h as u32);
        let miss = Miss { set, tag };
        if !kept {
            return Err(miss);
        }
        let [w0, w1] = self.sets[set];
        let (at, n) = match self.find(w0, tag, key) {
            Some(found) => found,
            None => self.find(w1, tag, key).ok_or(miss)?,
        };
        self.copy(at, n, buf);
        self.follow(at);
        Ok(())
    }

    /// The record `way` names if it is `key`'s, and its text's length.
    #[inline(always)]
    fn find(&self, way: Way, tag: u32, key: &PairKey) -> Option<(u32, usize)> {
        if way.tag != tag {
            return None;
        }
        let n = Header::matches(self.header(way.at)?, key)?;
        Some((way.at, n))
    }

    #[inline(always)]
    fn header(&self, at: u32) -> Option<&Chunk> {
        self.arena.get(at as usize)
    }

    /// Appends the `n` bytes of text of the record at `at`.
    #[inline(always)]
    fn copy(&self, at: u32, n: usize, buf: &mut Vec<u8>) {
        let text = self.arena.get(at as usize + 1..).unwrap_or_default();
        buf.extend_from_slice(text.as_flattened().get(..n).unwrap_or_default());
    }

    /// Makes `at` the record printed last, and the one that follows the one
    /// before.
    #[inline(always)]
    fn follow(&mut self, at: u32) {
        if let Some(h) = self.arena.get_mut(self.last as usize) {
            h[NEXT].copy_from_slice(&at.to_ne_bytes());
        }
        self.last = at;
    }

    /// Keeps `text` as `key`'s (for `fields`), in the first way of the set
    /// `miss` names (what was there moves to the second).
    pub fn insert(&mut self, miss: Miss, key: &PairKey, fields: u64, text: &[u8]) {
        let (Ok(code), Ok(n)) = (u32::try_from(key.code), u32::try_from(text.len())) else {
            return;
        };
        let chunks = text.chunks(CHUNK);
        if 1 + chunks.len() > self.limit {
            return;
        }
        if self.arena.len() + 1 + chunks.len() > self.limit || fields != self.fields {
            self.clear();
            self.fields = fields;
        }
        let at = self.arena.len() as u32;
        let head = Header {
            ip: key.ip,
            addr: key.addr,
            code,
            pid: key.pid,
            n,
            next: NONE,
        };
        self.arena.push(head.to_chunk());
        for c in chunks {
            let mut chunk = [b' '; CHUNK];
            chunk[..c.len()].copy_from_slice(c);
            self.arena.push(chunk);
        }
        let ways = &mut self.sets[miss.set];
        ways[1] = ways[0];
        ways[0] = Way { tag: miss.tag, at };
        self.follow(at);
    }

    /// Forgets every text.
    fn clear(&mut self) {
        self.arena.clear();
        self.sets.fill([EMPTY; 2]);
        self.last = NONE;
    }
}

/// The record a header names as the one printed after it.
#[inline(always)]
fn next_of(h: &Chunk) -> u32 {
    u32::from_ne_bytes(*h[NEXT.start..].first_chunk().unwrap_or(&[0xff; 4]))
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

    fn fetch(p: &mut PairTexts, k: &PairKey) -> Option<Vec<u8>> {
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
            assert_eq!(fetch(&mut p, &k), Some(want), "length {len}");
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
                assert_eq!(fetch(&mut p, &other), None, "{other:?}");
            }
        }
        // Texts of other fields are not these: keeping one forgets them.
        let miss = p.put(&k, FIELDS + 1, &mut Vec::new()).unwrap_err();
        p.insert(miss, &k, FIELDS + 1, b"other fields");
        assert_eq!(fetch(&mut p, &k), None);
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
        assert_eq!(fetch(&mut p, &key(0, 0)), None);
        assert_eq!(fetch(&mut p, &key(1, 0)), Some(b"head text 1".to_vec()));
        assert_eq!(fetch(&mut p, &key(2, 0)), Some(b"head text 2".to_vec()));
    }

    #[test]
    fn the_record_that_followed_last_time_is_found_without_the_table() {
        // Two sets of two ways: X alone in one, A, B and C in the other,
        // whose ways keep the last two.
        let mut p = PairTexts::new(1, 1 << 20);
        let set = |k: &PairKey| (k.hash() >> 32) & 1;
        let of_set = |s: u64| (0x100..).map(|ip| key(ip, 0)).filter(move |k| set(k) == s);
        let x = of_set(1).next().unwrap();
        let abc: Vec<PairKey> = of_set(0).take(3).collect();
        keep(&mut p, &x, b"x");
        for (k, text) in abc.iter().zip(["a", "b", "c"]) {
            keep(&mut p, k, text.as_bytes());
        }
        // A followed X when it was printed: after X, A is found although its
        // set has forgotten it; after A, B.
        assert_eq!(fetch(&mut p, &x), Some(b"head x".to_vec()));
        assert_eq!(fetch(&mut p, &abc[0]), Some(b"head a".to_vec()));
        assert_eq!(fetch(&mut p, &abc[1]), Some(b"head b".to_vec()));
        // Not after C (nothing has followed C).
        assert_eq!(fetch(&mut p, &abc[2]), Some(b"head c".to_vec()));
        assert_eq!(fetch(&mut p, &abc[0]), None);
        // A stamp past 32 bits is not taken for the one it truncates to.
        keep(&mut p, &key(4, 0), b"four");
        let far = PairKey {
            code: 7 + (1 << 32),
            ..key(4, 0)
        };
        assert_eq!(fetch(&mut p, &far), None);
        let miss = p.put(&far, FIELDS, &mut Vec::new()).unwrap_err();
        p.insert(miss, &far, FIELDS, b"far");
        assert_eq!(fetch(&mut p, &far), None);
        assert_eq!(fetch(&mut p, &key(4, 0)), Some(b"head four".to_vec()));
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
            assert_eq!(fetch(&mut p, &k), Some(want));
        }
        // A text longer than the whole arena is not kept.
        let k = key(5000, 0);
        let miss = p.put(&k, FIELDS, &mut Vec::new()).unwrap_err();
        p.insert(miss, &k, FIELDS, &[b'y'; 5000]);
        assert!(p.arena.len() * CHUNK <= 4096);
        assert_eq!(fetch(&mut p, &k), None);
    }
}
