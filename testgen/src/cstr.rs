//! Number and token scanning with the exact semantics of the C library calls that pttc's
//! parser is built on (`strtoull`, `strtol`, `strtok`, `sscanf`).
//!
//! .ptt files are written against pttc, so the corner cases matter: base 0 means a `0x`
//! prefix selects hex and a leading `0` selects octal, leading blanks and a sign are
//! accepted, `strtok` never yields empty tokens, and so on.

/// C's `isspace` in the "C" locale.
pub(crate) fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// The outcome of an unsigned conversion that consumed at least one digit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Scanned {
    /// The value, already negated (modulo 2^64) for a leading `-`; `u64::MAX` on overflow.
    pub value: u64,
    /// Bytes consumed, including leading blanks, sign and base prefix.
    pub end: usize,
    /// The digits did not fit 64 bits (`errno == ERANGE`).
    pub overflow: bool,
}

/// Magnitude, sign and extent of a number, before C's range rules are applied.
struct Raw {
    magnitude: u64,
    negative: bool,
    end: usize,
    overflow: bool,
}

fn digit(b: u8, base: u32) -> Option<u64> {
    let d = (b as char).to_digit(36)?;
    (d < base).then_some(d as u64)
}

fn scan_raw(s: &str, base: u32) -> Option<Raw> {
    let b = s.as_bytes();
    let at = |i: usize| b.get(i).copied().unwrap_or(0);
    let mut i = 0;
    while is_c_space(at(i)) {
        i += 1;
    }
    let negative = at(i) == b'-';
    if matches!(at(i), b'+' | b'-') {
        i += 1;
    }
    let mut base = base;
    if (base == 0 || base == 16)
        && at(i) == b'0'
        && matches!(at(i + 1), b'x' | b'X')
        && digit(at(i + 2), 16).is_some()
    {
        base = 16;
        i += 2;
    } else if base == 0 {
        base = if at(i) == b'0' { 8 } else { 10 };
    }
    let start = i;
    let mut magnitude = 0u64;
    let mut overflow = false;
    while let Some(d) = digit(at(i), base) {
        match magnitude
            .checked_mul(base as u64)
            .and_then(|m| m.checked_add(d))
        {
            Some(m) => magnitude = m,
            None => overflow = true,
        }
        i += 1;
    }
    (i > start).then_some(Raw {
        magnitude,
        negative,
        end: i,
        overflow,
    })
}

/// `strtoull(s, &end, base)` for base 0, 8, 10 or 16; `None` if nothing was converted.
pub(crate) fn strtoull(s: &str, base: u32) -> Option<Scanned> {
    let r = scan_raw(s, base)?;
    let value = if r.overflow {
        u64::MAX
    } else if r.negative {
        r.magnitude.wrapping_neg()
    } else {
        r.magnitude
    };
    Some(Scanned {
        value,
        end: r.end,
        overflow: r.overflow,
    })
}

/// `strtol(s, &end, base)`: the value clamped to the `long` range and the bytes consumed;
/// `None` if nothing was converted.
pub(crate) fn strtol(s: &str, base: u32) -> Option<(i64, usize)> {
    let r = scan_raw(s, base)?;
    let value = match (r.negative, r.overflow) {
        (false, true) => i64::MAX,
        (true, true) => i64::MIN,
        (false, false) => i64::try_from(r.magnitude).unwrap_or(i64::MAX),
        (true, false) => 0i64.checked_sub_unsigned(r.magnitude).unwrap_or(i64::MIN),
    };
    Some((value, r.end))
}

/// Why a number could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NumError {
    /// Not a number, or text follows it.
    Parse,
    /// The number does not fit the field.
    TooBig,
}

/// A whole token as an unsigned number of at most `bits` bits (base 0): pttc's
/// `str_to_uint64` and its narrower siblings.
pub(crate) fn token_to_uint(token: &str, bits: u32) -> Result<u64, NumError> {
    let s = strtoull(token, 0).ok_or(NumError::Parse)?;
    if s.overflow {
        return Err(NumError::TooBig);
    }
    if s.end != token.len() {
        return Err(NumError::Parse);
    }
    if bits < 64 && s.value >> bits != 0 {
        return Err(NumError::TooBig);
    }
    Ok(s.value)
}

/// C's `strtok`: splits a string into non-empty tokens; each call may use other delimiters.
#[derive(Clone, Debug)]
pub(crate) struct Strtok<'a> {
    rest: &'a str,
}

impl<'a> Strtok<'a> {
    /// Start tokenizing `s`.
    pub fn new(s: &'a str) -> Self {
        Self { rest: s }
    }

    /// The next token ended by any byte of `delims` (all ASCII), or `None` at the end.
    pub fn next_token(&mut self, delims: &str) -> Option<&'a str> {
        let is_delim = |c: char| delims.contains(c);
        let Some(start) = self.rest.find(|c| !is_delim(c)) else {
            self.rest = "";
            return None;
        };
        let s = &self.rest[start..];
        match s.find(is_delim) {
            Some(end) => {
                // The delimiter is one ASCII byte; C overwrites it with NUL.
                self.rest = &s[end + 1..];
                Some(&s[..end])
            }
            None => {
                self.rest = "";
                Some(s)
            }
        }
    }
}

/// A cursor over a directive's payload, for the parsers that walk it token by token.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cursor<'a> {
    rest: &'a str,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `s`.
    pub fn new(s: &'a str) -> Self {
        Self { rest: s }
    }

    /// Skip blanks and tabs (pttc stays within the line), then take `token` if it is next.
    pub fn token(&mut self, token: &str) -> bool {
        let s = self.rest.trim_start_matches([' ', '\t']);
        match s.strip_prefix(token) {
            Some(rest) => {
                self.rest = rest;
                true
            }
            None => false,
        }
    }

    /// An unsigned number of at most `bits` bits (base 0, leading blanks allowed):
    /// `Ok(None)` if no number starts here.
    pub fn uint(&mut self, bits: u32) -> Result<Option<u64>, NumError> {
        let Some(s) = strtoull(self.rest, 0) else {
            return Ok(None);
        };
        if s.overflow || (bits < 64 && s.value >> bits != 0) {
            return Err(NumError::TooBig);
        }
        self.rest = &self.rest[s.end..];
        Ok(Some(s.value))
    }
}

/// `sscanf(s, " c%u.%u", &maj, &min)`: the return value (-1 for EOF) and both numbers.
pub(crate) fn scan_c_state(s: &str) -> (i32, u32, u32) {
    let b = s.as_bytes();
    let at = |i: usize| b.get(i).copied();
    let skip = |mut i: usize| {
        while at(i).is_some_and(is_c_space) {
            i += 1;
        }
        i
    };
    // %u: leading blanks, an optional sign, decimal digits; the value as C stores it.
    let conv = |i: usize| -> Result<(u32, usize), i32> {
        let i = skip(i);
        if at(i).is_none() {
            return Err(-1);
        }
        // glibc stores the converted unsigned long truncated to unsigned int.
        strtoull(&s[i..], 10)
            .map(|n| (n.value as u32, i + n.end))
            .ok_or(0)
    };
    let i = skip(0);
    match at(i) {
        None => return (-1, 0, 0),
        Some(b'c') => {}
        Some(_) => return (0, 0, 0),
    }
    let (maj, i) = match conv(i + 1) {
        Ok(v) => v,
        Err(r) => return (r, 0, 0),
    };
    if at(i) != Some(b'.') {
        return (1, maj, 0);
    }
    match conv(i + 1) {
        Ok((min, _)) => (2, maj, min),
        Err(_) => (1, maj, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strtoull_bases_and_prefixes() {
        let v = |s: &str| strtoull(s, 0).map(|r| (r.value, r.end));
        assert_eq!(v("0x10"), Some((16, 4)));
        assert_eq!(v("0X1f,"), Some((31, 4)));
        assert_eq!(v("010"), Some((8, 3)));
        assert_eq!(v("09"), Some((0, 1)));
        assert_eq!(v("0x"), Some((0, 1)));
        assert_eq!(v("  42x"), Some((42, 4)));
        assert_eq!(v("-1"), Some((u64::MAX, 2)));
        assert_eq!(v("+7"), Some((7, 2)));
        assert_eq!(v("x"), None);
        assert_eq!(v(""), None);
        assert_eq!(v("-"), None);
        assert_eq!(strtoull("ff", 16).map(|r| r.value), Some(255));
        assert_eq!(strtoull("0x", 16).map(|r| r.end), Some(1));
        let big = strtoull("0x1_0000_0000_0000_0000", 0).unwrap();
        assert_eq!(big.end, 3);
        let big = strtoull("0x10000000000000000", 0).unwrap();
        assert!(big.overflow);
        assert_eq!(big.value, u64::MAX);
        assert_eq!(big.end, 19);
    }

    #[test]
    fn strtol_clamps() {
        assert_eq!(strtol("-5", 0), Some((-5, 2)));
        assert_eq!(strtol("0x7fffffffffffffff", 0), Some((i64::MAX, 18)));
        assert_eq!(strtol("0x8000000000000000", 0).unwrap().0, i64::MAX);
        assert_eq!(strtol("-0x8000000000000000", 0).unwrap().0, i64::MIN);
        assert_eq!(strtol("-0x8000000000000001", 0).unwrap().0, i64::MIN);
        assert_eq!(strtol("q", 0), None);
    }

    #[test]
    fn whole_tokens() {
        assert_eq!(token_to_uint("0x100", 64), Ok(0x100));
        assert_eq!(token_to_uint("256", 8), Err(NumError::TooBig));
        assert_eq!(token_to_uint("255", 8), Ok(255));
        assert_eq!(token_to_uint("12 ", 64), Err(NumError::Parse));
        assert_eq!(token_to_uint("", 64), Err(NumError::Parse));
        assert_eq!(
            token_to_uint("0x10000000000000000", 64),
            Err(NumError::TooBig)
        );
        assert_eq!(token_to_uint("-1", 32), Err(NumError::TooBig));
    }

    #[test]
    fn strtok_like_c() {
        let mut t = Strtok::new("  3: %l1  ");
        assert_eq!(t.next_token(" :"), Some("3"));
        assert_eq!(t.next_token(" :"), Some("%l1"));
        assert_eq!(t.next_token(" "), None);
        assert_eq!(t.next_token(" "), None);
        let mut t = Strtok::new("a,,b");
        assert_eq!(t.next_token(","), Some("a"));
        assert_eq!(t.next_token(","), Some("b"));
        let mut t = Strtok::new("   ");
        assert_eq!(t.next_token(" "), None);
    }

    #[test]
    fn cursor_tokens_and_numbers() {
        let mut c = Cursor::new(" \t64bit, if");
        assert!(!c.token("32bit"));
        assert!(c.token("64bit"));
        assert!(c.token(","));
        assert!(c.token("if"));
        let mut c = Cursor::new(" 0x12: 7");
        assert_eq!(c.uint(8), Ok(Some(0x12)));
        assert!(c.token(":"));
        assert_eq!(c.uint(8), Ok(Some(7)));
        assert_eq!(c.uint(8), Ok(None));
        assert_eq!(Cursor::new("256").uint(8), Err(NumError::TooBig));
    }

    #[test]
    fn c_state_scan() {
        assert_eq!(scan_c_state("c1"), (1, 1, 0));
        assert_eq!(scan_c_state(" c3.2"), (2, 3, 2));
        assert_eq!(scan_c_state("c3."), (1, 3, 0));
        assert_eq!(scan_c_state("c3x"), (1, 3, 0));
        assert_eq!(scan_c_state("c"), (-1, 0, 0));
        assert_eq!(scan_c_state(""), (-1, 0, 0));
        assert_eq!(scan_c_state("x1"), (0, 0, 0));
        assert_eq!(scan_c_state("cx"), (0, 0, 0));
        assert_eq!(scan_c_state("c 4"), (1, 4, 0));
    }
}
