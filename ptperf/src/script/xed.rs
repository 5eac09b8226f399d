//! `--xed`: instruction bytes shown as XED's AT&T text, as perf shows them.
//!
//! perf 6.1's `script --xed` does not disassemble: it pipes its output through
//! Intel's `xed -F insn: -A -64` (a line filter from XED's examples), and prints
//! nothing useful where `xed` is not installed. We have XED's text built in
//! ([`pt_decoder::listing::Formatter`], the one ptxed prints), so this module is
//! that filter, applied to our own output: where `xed` is installed, the result is
//! byte-identical to perf's; where it is not, the user still gets the listing.
//!
//! The filter's rules, which we keep because its output is what users compare:
//! - input is read in pieces of at most `PIECE` bytes (the C filter's line
//!   buffer), each ending at a newline or where the buffer is full;
//! - a piece without `insn:` passes unchanged;
//! - otherwise the hex numbers after `insn:` are the instruction's bytes (each
//!   read as C's `strtoul` reads it, truncated to a byte); the buffer is padded with
//!   zeros to `BYTES`, so a cut-off instruction decodes as XED sees it;
//! - the address is the first run of at least eight hex digits followed by white
//!   space anywhere in the piece (perf's IP column);
//! - the piece is printed up to `insn:`, then two tabs, the text (or XED's error
//!   name), then the rest of the piece after the bytes.

use pt_decoder::listing::{Formatter, Syntax};
use pt_encoder::ExecMode;
use std::io::{self, Write};

/// The filter's line buffer holds this many bytes (its `fgets` reads one less).
const PIECE: usize = 1023;
/// Bytes handed to the decoder per instruction.
const BYTES: usize = 32;
/// What introduces the instruction bytes (perf's `insn` field).
const PREFIX: &[u8] = b"insn:";

/// A writer that rewrites `insn:` fields as [`xed`](self) does, or passes
/// everything through unchanged.
pub struct XedFilter<W: Write> {
    inner: W,
    on: bool,
    formatter: Formatter,
    /// The unfinished piece.
    piece: Vec<u8>,
    /// The rewritten piece.
    line: Vec<u8>,
    text: String,
}

impl<W: Write> XedFilter<W> {
    /// A filter over `inner`, rewriting only when `on`.
    pub fn new(inner: W, on: bool) -> Self {
        XedFilter {
            inner,
            on,
            formatter: Formatter::new(Syntax::Att),
            piece: Vec::with_capacity(PIECE),
            line: Vec::with_capacity(PIECE + 64),
            text: String::new(),
        }
    }

    fn emit(&mut self) -> io::Result<()> {
        let piece = std::mem::take(&mut self.piece);
        let result = match find(&piece, PREFIX) {
            None => self.inner.write_all(&piece),
            Some(at) => {
                self.rewrite(&piece, at);
                self.inner.write_all(&self.line)
            }
        };
        self.piece = piece;
        self.piece.clear();
        result
    }

    /// Builds in `self.line` the output for `piece`, whose `insn:` is at `at`.
    fn rewrite(&mut self, piece: &[u8], at: usize) {
        let mut bytes = [0u8; BYTES];
        let mut pos = at + PREFIX.len();
        for b in bytes.iter_mut() {
            match strtoul(piece, pos) {
                Some((v, end)) => {
                    *b = v as u8;
                    pos = end;
                }
                // No number: the C filter stores a zero and stays where it is.
                None => *b = 0,
            }
        }
        self.text.clear();
        // BYTES zero-padded bytes always hold a whole instruction, so XED's only
        // error here is an opcode it does not know.
        let ip = get_ip(piece).unwrap_or(0);
        if ip < u64::MAX {
            if let Err(e) = self
                .formatter
                .format(&bytes, ip, ExecMode::Bit64, &mut self.text)
            {
                self.text.clear();
                self.text.push_str(e.name);
            }
        }
        self.line.clear();
        self.line.extend_from_slice(&piece[..at]);
        self.line.extend_from_slice(b"\t\t");
        self.line.extend_from_slice(self.text.as_bytes());
        self.line.extend_from_slice(&piece[pos..]);
    }
}

impl<W: Write> Write for XedFilter<W> {
    fn write(&mut self, mut buf: &[u8]) -> io::Result<usize> {
        if !self.on {
            return self.inner.write(buf);
        }
        let n = buf.len();
        while !buf.is_empty() {
            let room = PIECE - self.piece.len();
            let take = buf
                .iter()
                .take(room)
                .position(|&c| c == b'\n')
                .map_or(room.min(buf.len()), |i| i + 1);
            self.piece.extend_from_slice(&buf[..take]);
            buf = &buf[take..];
            if self.piece.last() == Some(&b'\n') || self.piece.len() == PIECE {
                self.emit()?;
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.on && !self.piece.is_empty() {
            self.emit()?;
        }
        self.inner.flush()
    }
}

impl<W: Write> Drop for XedFilter<W> {
    fn drop(&mut self) {
        if self.on && !self.piece.is_empty() {
            let _ = self.emit();
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// C's `isspace` in the C locale.
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// C's `strtoul(s + pos, &end, 16)`: the value (saturated at `u64::MAX`) and
/// where the number ends, or None where no digits follow (then `end` would be
/// `pos`).
fn strtoul(s: &[u8], pos: usize) -> Option<(u64, usize)> {
    let mut i = pos;
    while s.get(i).copied().is_some_and(is_space) {
        i += 1;
    }
    let negative = match s.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    // "0x" counts only when a hex digit follows; else the "0" is the number.
    if s.get(i) == Some(&b'0')
        && matches!(s.get(i + 1), Some(b'x' | b'X'))
        && s.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
    {
        i += 2;
    }
    let start = i;
    let mut v: u64 = 0;
    let mut overflow = false;
    while let Some(d) = s.get(i).and_then(|&c| (c as char).to_digit(16)) {
        match v.checked_mul(16).and_then(|x| x.checked_add(u64::from(d))) {
            Some(x) => v = x,
            None => overflow = true,
        }
        i += 1;
    }
    if i == start {
        return None;
    }
    let v = if overflow {
        u64::MAX
    } else if negative {
        v.wrapping_neg()
    } else {
        v
    };
    Some((v, i))
}

/// The filter's instruction address: the first place where at least eight hex
/// digits are followed by white space.
fn get_ip(line: &[u8]) -> Option<u64> {
    (0..line.len()).find_map(|i| {
        let run = line[i..]
            .iter()
            .take_while(|c| c.is_ascii_hexdigit())
            .count();
        (run >= 8 && line.get(i + run).copied().is_some_and(is_space))
            .then(|| strtoul(line, i).map_or(0, |(v, _)| v))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(input: &[u8]) -> String {
        let mut out = Vec::new();
        {
            let mut f = XedFilter::new(&mut out, true);
            f.write_all(input).unwrap();
            f.flush().unwrap();
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn insn_fields_become_att_text() {
        let got = filter(
            b"  ls 1 [000] 1.0:  4002829b70 _start+0x0 (/lib/ld.so) insn: 48 89 e7\n\
              no bytes here\n\
              \x20 ls 1 [000] 1.0:  4002829b73 _start+0x3 (/lib/ld.so) insn: e8 f8 0b 00 00\n",
        );
        assert_eq!(
            got,
            "  ls 1 [000] 1.0:  4002829b70 _start+0x0 (/lib/ld.so) \t\tmov %rsp, %rdi\n\
             no bytes here\n\
             \x20 ls 1 [000] 1.0:  4002829b73 _start+0x3 (/lib/ld.so) \t\tcallq  0x400282a770\n"
        );
    }

    #[test]
    fn pieces_split_where_the_c_buffer_is_full() {
        let long = format!("{} insn: 90\n", "x".repeat(2000));
        let got = filter(long.as_bytes());
        // The prefix is in the second piece, which is rewritten on its own.
        assert_eq!(got.len(), long.len() - "insn: 90".len() + "\t\tnop".len());
        assert!(got.ends_with("\t\tnop\n"), "{got:?}");
    }

    #[test]
    fn cut_off_bytes_decode_with_zeros_after_them() {
        // As Intel's xed 2026.07 filter prints these lines.
        let got = filter(b"0badc0de insn: 0f ff\n12345678 insn: 0f 0b\n");
        assert_eq!(got, "0badc0de \t\tud0l  (%rax), %eax\n12345678 \t\tud2\n");
    }

    #[test]
    fn strtoul_reads_as_c_does() {
        assert_eq!(strtoul(b"  e8 f8", 0), Some((0xe8, 4)));
        assert_eq!(strtoul(b"\n", 0), None);
        assert_eq!(strtoul(b"0x", 0), Some((0, 1)));
        assert_eq!(strtoul(b"fffffffffffffffff ", 0), Some((u64::MAX, 17)));
        assert_eq!(
            get_ip(b"md5sum 11481 1.789569706:  4002829b70 f"),
            Some(0x4002829b70)
        );
        assert_eq!(get_ip(b"short 1234567 x"), None);
    }

    #[test]
    fn off_passes_everything() {
        let mut out = Vec::new();
        XedFilter::new(&mut out, false)
            .write_all(b"x insn: 90\n")
            .unwrap();
        assert_eq!(out, b"x insn: 90\n");
    }
}
