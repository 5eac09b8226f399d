//! Fixed-capacity text fields with `snprintf`-like truncation, and hand-written number
//! formatting (no allocation, no `format!`).

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Two hex digits per byte value.
const HEX2: [[u8; 2]; 256] = {
    let mut t = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = [HEX[i >> 4], HEX[i & 0xf]];
        i += 1;
    }
    t
};

/// Blanks for padding.
pub(crate) const SPACES: [u8; 48] = [b' '; 48];

/// `s` padded with blanks to 16 bytes (for fixed-size copies of opcode names).
pub(crate) const fn pad16(s: &str) -> [u8; 16] {
    let b = s.as_bytes();
    let mut out = [b' '; 16];
    let mut i = 0;
    while i < b.len() && i < 16 {
        out[i] = b[i];
        i += 1;
    }
    out
}

/// Append the first `n` bytes of `src`. The copy has a size known at compile time (no
/// call to `memcpy` for a few bytes); the surplus is cut off again.
#[inline(always)]
pub(crate) fn put<const N: usize>(out: &mut Vec<u8>, src: &[u8; N], n: usize) {
    let n = n.min(N);
    out.extend_from_slice(src);
    let len = out.len();
    out.truncate(len - (N - n));
}

/// Append `n` blanks (at most 48).
#[inline(always)]
pub(crate) fn put_spaces(out: &mut Vec<u8>, n: usize) {
    put(out, &SPACES, n);
}

/// A text field that keeps at most `cap` bytes and silently drops the rest, as ptdump's
/// fixed-size columns do.
#[derive(Clone, Copy)]
pub(crate) struct Field<const N: usize> {
    buf: [u8; N],
    len: usize,
    cap: usize,
}

impl<const N: usize> Field<N> {
    /// An empty field holding at most `cap` (≤ N) bytes.
    pub(crate) const fn with_cap(cap: usize) -> Self {
        Self {
            buf: [0; N],
            len: 0,
            cap: if cap < N { cap } else { N },
        }
    }

    pub(crate) fn clear(&mut self, cap: usize) {
        self.len = 0;
        self.cap = cap.min(N);
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// The whole buffer and the length in use (for [`put`]).
    #[inline(always)]
    pub(crate) fn raw(&self) -> (&[u8; N], usize) {
        (&self.buf, self.len)
    }

    #[inline]
    pub(crate) fn push(&mut self, b: u8) {
        if self.len < self.cap {
            self.buf[self.len] = b;
            self.len += 1;
        }
    }

    #[inline]
    pub(crate) fn str(&mut self, s: &str) -> &mut Self {
        let room = self.cap - self.len;
        let n = s.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        self
    }

    /// `%0<width>x` (`width` 0 for plain `%x`).
    #[inline]
    pub(crate) fn hex(&mut self, v: u64, width: usize) -> &mut Self {
        let mut tmp = [0u8; 16];
        let n = hex_into(&mut tmp, v, width);
        let room = self.cap - self.len;
        let k = n.min(room);
        self.buf[self.len..self.len + k].copy_from_slice(&tmp[..k]);
        self.len += k;
        self
    }

    /// `%u`.
    pub(crate) fn dec(&mut self, v: u64) -> &mut Self {
        let mut tmp = [0u8; 20];
        let n = dec_into(&mut tmp, v);
        for &b in &tmp[20 - n..] {
            self.push(b);
        }
        self
    }
}

/// Number of hex digits of `v` (at least one).
#[inline]
fn hex_digits(v: u64) -> usize {
    (((64 - v.leading_zeros()) as usize).div_ceil(4)).max(1)
}

/// The two lower-case hex digits of `b`.
#[inline]
pub(crate) fn hex_byte(b: u8) -> [u8; 2] {
    HEX2[b as usize]
}

/// Write `v` as lower-case hex, zero-padded to `width` (≤ 16), at the start of `out`;
/// returns the length.
#[inline]
pub(crate) fn hex_into(out: &mut [u8; 16], v: u64, width: usize) -> usize {
    let n = hex_digits(v).max(width.min(16));
    for (i, slot) in out[..n].iter_mut().enumerate() {
        let shift = 4 * (n - 1 - i);
        *slot = HEX[((v >> shift) & 0xf) as usize];
    }
    n
}

/// Write `v` in decimal right-aligned in `out`; returns the number of digits.
pub(crate) fn dec_into(out: &mut [u8; 20], mut v: u64) -> usize {
    let mut i = 20;
    loop {
        i -= 1;
        out[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    20 - i
}

/// `v` as `%016x` followed by `pad` blanks (up to 16).
#[inline(always)]
pub(crate) fn hex16_padded(v: u64) -> [u8; 32] {
    let mut tmp = [b' '; 32];
    let be = v.to_be_bytes();
    for i in 0..8 {
        let [hi, lo] = HEX2[be[i] as usize];
        tmp[2 * i] = hi;
        tmp[2 * i + 1] = lo;
    }
    tmp
}

/// Append `v` as `%x`.
#[inline]
pub(crate) fn push_hex(out: &mut Vec<u8>, v: u64) {
    let mut tmp = [0u8; 16];
    let n = hex_into(&mut tmp, v, 0);
    out.extend_from_slice(&tmp[..n]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_and_dec() {
        let mut f = Field::<32>::with_cap(24);
        f.hex(0, 0)
            .str(",")
            .hex(0xabc, 4)
            .str(",")
            .hex(u64::MAX, 0)
            .str(",")
            .dec(1234);
        assert_eq!(f.as_bytes(), b"0,0abc,ffffffffffffffff,");
        let mut v = Vec::new();
        put(&mut v, &hex16_padded(0x12), 16);
        push_hex(&mut v, 0);
        assert_eq!(v, b"00000000000000120");
    }

    #[test]
    fn fields_truncate_like_snprintf() {
        let mut f = Field::<17>::with_cap(16);
        f.str("+").hex(u64::MAX, 0);
        assert_eq!(f.as_bytes(), b"+fffffffffffffff");
        let mut v = Vec::new();
        put(&mut v, b"abcdef", 4);
        put_spaces(&mut v, 2);
        put(&mut v, &pad16("xy"), 3);
        assert_eq!(v, b"abcd  xy ");
        assert_eq!(&hex16_padded(u64::MAX)[14..18], b"ff  ");
    }
}
