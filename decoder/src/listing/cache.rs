//! Listing lines, formatted once per address and reused.

use std::fmt::Write as _;

use pt_encoder::ExecMode;

use super::{Formatter, Syntax, XedError};
use crate::image::{CodeError, CodeSource};
use crate::insn::MAX_INSN_SIZE;

/// What a listing line holds besides the address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ListingOptions {
    /// Intel (default) or AT&T syntax (ptxed's `--att`).
    pub syntax: Syntax,
    /// The instruction's bytes before its text (ptxed's `--raw-insn`).
    pub raw_insn: bool,
    /// The address only (ptxed's `--no-inst`); instructions are still decoded, to walk
    /// blocks and to report what XED could not decode.
    pub no_inst: bool,
}

/// Why a line holds no instruction text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// Nothing could be read at the address.
    #[error("fetch error: {0}")]
    Fetch(CodeError),
    /// XED would not decode the bytes there.
    #[error("xed decode error: {0}")]
    Xed(XedError),
}

/// One rendered listing line.
#[derive(Clone, Copy, Debug)]
pub struct Line<'a> {
    text: &'a [u8],
    size: u8,
    next_ip: u64,
    error: Option<LineError>,
}

impl<'a> Line<'a> {
    /// The line as ptxed prints it after its offset, time and speculation columns: the
    /// address (16 hex digits), then the raw bytes and text as configured, or the
    /// error; with the newline.
    pub fn text(&self) -> &'a [u8] {
        self.text
    }

    /// The instruction's length (0 after an error).
    pub fn size(&self) -> u8 {
        self.size
    }

    /// Where ptxed's block walk goes next (see [`super::Decoded::next_ip`]).
    pub fn next_ip(&self) -> u64 {
        self.next_ip
    }

    /// Why there is no instruction, if there is none (the text says it, as ptxed does).
    pub fn error(&self) -> Option<LineError> {
        self.error
    }
}

/// Slots of the line cache (direct-mapped by address).
const SLOTS: usize = 1 << 15;
/// The longest line a slot holds; longer ones are rendered each time.
const LINE_CAP: usize = 174;

/// One cached line.
#[derive(Clone)]
struct Slot {
    ip: u64,
    next_ip: u64,
    /// The execution mode plus one; 0: empty.
    mode: u8,
    size: u8,
    len: u8,
    line: [u8; LINE_CAP],
}

const EMPTY: Slot = Slot {
    ip: 0,
    next_ip: 0,
    mode: 0,
    size: 0,
    len: 0,
    line: [0; LINE_CAP],
};

fn mode_tag(mode: ExecMode) -> u8 {
    match mode {
        ExecMode::Unknown => 1,
        ExecMode::Bit16 => 2,
        ExecMode::Bit32 => 3,
        ExecMode::Bit64 => 4,
    }
}

/// `v` as 16 lower-case hex digits (`%016x`).
pub(crate) fn hex16(v: u64) -> [u8; 16] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 16];
    for (i, d) in out.iter_mut().enumerate() {
        *d = DIGITS[((v >> (60 - 4 * i)) & 0xf) as usize];
    }
    out
}

/// Listing lines for the instructions of a code source, each formatted once per
/// address and mode and then reused until the code source's stamp changes.
pub struct Listing {
    formatter: Formatter,
    options: ListingOptions,
    /// Allocated with the first line.
    slots: Vec<Slot>,
    /// The stamp of the code source the slots were filled from.
    stamp: Option<u64>,
    text: String,
    /// A line that is not cached (too long, or an error).
    overflow: Vec<u8>,
}

impl Listing {
    /// An empty listing that renders lines as `options` say.
    pub fn new(options: ListingOptions) -> Self {
        Self {
            formatter: Formatter::new(options.syntax),
            options,
            slots: Vec::new(),
            stamp: None,
            text: String::with_capacity(128),
            overflow: Vec::with_capacity(256),
        }
    }

    /// What the lines hold.
    pub fn options(&self) -> ListingOptions {
        self.options
    }

    fn slot_of(ip: u64) -> usize {
        (ip.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOTS.trailing_zeros())) as usize
    }

    /// The line of the instruction at `ip` in `src`, executed in `mode` (as ptxed prints
    /// the instructions of a block: up to 15 bytes are read).
    #[inline]
    pub fn line<S: CodeSource + ?Sized>(&mut self, src: &S, ip: u64, mode: ExecMode) -> Line<'_> {
        self.lookup(src, ip, mode, MAX_INSN_SIZE)
    }

    /// The line of the instruction of `size` bytes at `ip` (as ptxed prints what the
    /// instruction flow decoder gives: XED sees that many bytes, and an error shows
    /// them).
    #[inline]
    pub fn line_sized<S: CodeSource + ?Sized>(
        &mut self,
        src: &S,
        ip: u64,
        mode: ExecMode,
        size: u8,
    ) -> Line<'_> {
        self.lookup(src, ip, mode, usize::from(size).clamp(1, MAX_INSN_SIZE))
    }

    #[inline]
    fn lookup<S: CodeSource + ?Sized>(
        &mut self,
        src: &S,
        ip: u64,
        mode: ExecMode,
        limit: usize,
    ) -> Line<'_> {
        let stamp = src.stamp();
        if self.stamp != Some(stamp) {
            self.new_stamp(stamp);
        }
        let at = Self::slot_of(ip);
        let tag = mode_tag(mode);
        let hit = self
            .slots
            .get(at)
            .is_some_and(|s| s.mode == tag && s.ip == ip);
        if !hit {
            return self.render(src, ip, mode, at, limit);
        }
        let slot = &self.slots[at];
        Line {
            text: &slot.line[..usize::from(slot.len)],
            size: slot.size,
            next_ip: slot.next_ip,
            error: None,
        }
    }

    /// Forgets every line (the code may have changed).
    #[cold]
    fn new_stamp(&mut self, stamp: u64) {
        if self.slots.is_empty() {
            self.slots = vec![EMPTY; SLOTS];
        } else {
            self.slots.fill(EMPTY);
        }
        self.stamp = Some(stamp);
    }

    /// Formats the line of `ip` and caches it in slot `at` where it fits.
    #[cold]
    fn render<S: CodeSource + ?Sized>(
        &mut self,
        src: &S,
        ip: u64,
        mode: ExecMode,
        at: usize,
        limit: usize,
    ) -> Line<'_> {
        let (size, next_ip, error) = match self.render_into_overflow(src, ip, mode, limit) {
            Ok(decoded) => (decoded.size, decoded.next_ip, None),
            Err(e) => (0, ip, Some(e)),
        };
        let line = &self.overflow;
        if error.is_none() {
            if let (Some(slot), Ok(len)) = (self.slots.get_mut(at), u8::try_from(line.len())) {
                if usize::from(len) <= LINE_CAP {
                    slot.ip = ip;
                    slot.next_ip = next_ip;
                    slot.mode = mode_tag(mode);
                    slot.size = size;
                    slot.len = len;
                    slot.line[..line.len()].copy_from_slice(line);
                }
            }
        }
        Line {
            text: line,
            size,
            next_ip,
            error,
        }
    }

    /// Renders the line of `ip` into the overflow buffer.
    fn render_into_overflow<S: CodeSource + ?Sized>(
        &mut self,
        src: &S,
        ip: u64,
        mode: ExecMode,
        limit: usize,
    ) -> Result<super::Decoded, LineError> {
        let line = &mut self.overflow;
        line.clear();
        line.extend_from_slice(&hex16(ip));
        let mut raw = [0u8; MAX_INSN_SIZE];
        let n = match src.read(ip, &mut raw[..limit]) {
            Ok(n) => n,
            Err(e) => {
                let _ = writeln!(Text(line), " [fetch error: {}]", e.code.message());
                return Err(LineError::Fetch(e));
            }
        };
        let raw = &raw[..n];
        self.text.clear();
        let decoded = match self.formatter.format(raw, ip, mode, &mut self.text) {
            Ok(d) => d,
            Err(e) => {
                raw_bytes(line, raw);
                let _ = writeln!(Text(line), " [xed decode error: {e}]");
                return Err(LineError::Xed(e));
            }
        };
        if !self.options.no_inst {
            if self.options.raw_insn {
                raw_bytes(line, &raw[..usize::from(decoded.size).min(n)]);
            }
            line.extend_from_slice(b"  ");
            line.extend_from_slice(self.text.as_bytes());
        }
        line.push(b'\n');
        Ok(decoded)
    }
}

/// ` xx` for each byte, padded to 15 bytes (ptxed's `--raw-insn` column).
fn raw_bytes(line: &mut Vec<u8>, raw: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for &b in raw {
        line.extend_from_slice(&[
            b' ',
            DIGITS[usize::from(b >> 4)],
            DIGITS[usize::from(b & 0xf)],
        ]);
    }
    for _ in raw.len()..MAX_INSN_SIZE {
        line.extend_from_slice(b"   ");
    }
}

/// `fmt::Write` into a byte buffer.
struct Text<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Text<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}
