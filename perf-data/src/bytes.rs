//! Little-endian reading over borrowed bytes (with the file offset of every read, for
//! errors) and writing into a `Vec`, plus the views the records hand out.

use crate::error::{Error, ErrorKind, Result};

/// A bounds-checked little-endian cursor over a record or section, that knows the file
/// offset of its first byte.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    base: u64,
    what: &'static str,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(data: &'a [u8], base: u64, what: &'static str) -> Self {
        Cursor {
            data,
            pos: 0,
            base,
            what,
        }
    }

    pub(crate) fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    pub(crate) fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    pub(crate) fn truncated(&self, need: u64) -> Error {
        Error::new(
            self.offset(),
            ErrorKind::Truncated {
                what: self.what,
                need,
                have: self.remaining() as u64,
            },
        )
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.truncated(n as u64));
        }
        let b = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(b)
    }

    /// `n` bytes given as a u64 count (checked before any conversion).
    pub(crate) fn bytes64(&mut self, n: u64) -> Result<&'a [u8]> {
        if n > self.remaining() as u64 {
            return Err(self.truncated(n));
        }
        self.bytes(n as usize)
    }

    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let b = &self.data[self.pos..];
        self.pos = self.data.len();
        b
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let b = self.bytes(N)?;
        let mut a = [0; N];
        a.copy_from_slice(b);
        Ok(a)
    }

    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// perf's feature string: u32 length (including the NUL and padding), then the bytes.
    pub(crate) fn perf_string(&mut self) -> Result<String> {
        let len = self.u32()?;
        let b = self.bytes64(len as u64)?;
        Ok(String::from_utf8_lossy(until_nul(b)).into_owned())
    }

    /// A count of entries of at least `min_entry` bytes each, checked against what is
    /// left so that nothing is allocated for a count the input cannot hold.
    pub(crate) fn count(&mut self, n: u64, min_entry: u64, what: &'static str) -> Result<usize> {
        let room = self.remaining() as u64;
        if !matches!(n.checked_mul(min_entry), Some(need) if need <= room) {
            return Err(Error::new(
                self.offset(),
                ErrorKind::CountOverflow {
                    what,
                    count: n,
                    room,
                },
            ));
        }
        Ok(n as usize)
    }
}

/// The bytes before the first NUL (all of them when there is none).
pub(crate) fn until_nul(b: &[u8]) -> &[u8] {
    match b.iter().position(|&c| c == 0) {
        Some(n) => &b[..n],
        None => b,
    }
}

pub(crate) fn align8(n: usize) -> usize {
    (n + 7) & !7
}

/// Appends little-endian values to a buffer.
pub(crate) trait Put {
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
    /// A NUL-terminated string padded with NULs to a multiple of `align` bytes.
    fn put_cstr(&mut self, s: &[u8], align: usize);
    /// perf's feature string: u32 length (padded to 64, NUL included), then the bytes.
    fn put_perf_string(&mut self, s: &str);
}

impl Put for Vec<u8> {
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_cstr(&mut self, s: &[u8], align: usize) {
        let s = until_nul(s);
        let len = (s.len() + 1).div_ceil(align) * align;
        self.extend_from_slice(s);
        self.resize(self.len() + len - s.len(), 0);
    }
    fn put_perf_string(&mut self, s: &str) {
        let s = until_nul(s.as_bytes());
        let len = (s.len() + 1).div_ceil(64) * 64;
        self.put_u32(len as u32);
        self.put_cstr(s, 64);
    }
}

/// A zero-copy view of little-endian u64 values (unaligned: records need not be).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct U64s<'a>(&'a [u8]);

impl<'a> U64s<'a> {
    /// A view of `bytes`, whose length must be a multiple of 8 (extra bytes are ignored).
    pub fn new(bytes: &'a [u8]) -> Self {
        U64s(&bytes[..bytes.len() & !7])
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        self.0.len() / 8
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value at `i`.
    pub fn get(&self, i: usize) -> Option<u64> {
        let b = self.0.get(i * 8..i * 8 + 8)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    /// The values in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = u64> + 'a {
        self.0
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }
}

impl std::fmt::Debug for U64s<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|v| format!("{v:#x}")))
            .finish()
    }
}

/// A NUL-terminated name or path as stored in a record: raw bytes (paths need not be UTF-8).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct CStr<'a>(pub &'a [u8]);

impl<'a> CStr<'a> {
    /// The bytes (without the NUL).
    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }

    /// The text, with invalid UTF-8 replaced.
    pub fn to_str_lossy(&self) -> std::borrow::Cow<'a, str> {
        String::from_utf8_lossy(self.0)
    }
}

impl<'a> From<&'a str> for CStr<'a> {
    fn from(s: &'a str) -> Self {
        CStr(s.as_bytes())
    }
}

impl<'a> From<&'a [u8]> for CStr<'a> {
    fn from(s: &'a [u8]) -> Self {
        CStr(s)
    }
}

impl std::fmt::Debug for CStr<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.to_str_lossy())
    }
}

impl std::fmt::Display for CStr<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_str_lossy())
    }
}
