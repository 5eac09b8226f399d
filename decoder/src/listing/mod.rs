//! The instruction listing: instructions as libipt's ptxed prints them through XED.
//!
//! libipt's ptxed prints every instruction with Intel's XED disassembler; users compare
//! listings between tools, so ours must match it character for character. Two layers:
//!
//! - [`Formatter`] turns one instruction's bytes into XED's text, in Intel syntax or
//!   AT&T syntax (ptxed's `--att`). iced-x86 decodes (with the options that decode as
//!   XED does); the printer applies XED's rules, and a table holds the instruction forms
//!   where XED's operand model differs from iced-x86's.
//! - [`Listing`] renders whole listing lines (address, optional raw bytes, text) and
//!   keeps them per address: programs run the same few thousand instructions over and
//!   over, so each is formatted once and its line reused. The cache is keyed by address
//!   and execution mode and dropped whenever the code source's
//!   [`stamp`](crate::image::CodeSource::stamp) changes, so changed code is never
//!   printed with stale text.
//!
//! ```
//! use pt_decoder::image::Image;
//! use pt_decoder::listing::{Listing, ListingOptions, Syntax};
//! use pt_encoder::ExecMode;
//!
//! let mut image = Image::new();
//! // lea rax, [rip+0x10]; rep stosb; ret
//! image.add_bytes(0x1000, vec![0x48, 0x8d, 0x05, 0x10, 0, 0, 0, 0xf3, 0xaa, 0xc3], "code")?;
//! let mut listing = Listing::new(ListingOptions::default());
//! let line = listing.line(&image, 0x1000, ExecMode::Bit64);
//! assert_eq!(line.text(), b"0000000000001000  lea rax, ptr [rip+0x10]\n");
//! let next = line.next_ip();
//! let line = listing.line(&image, next, ExecMode::Bit64);
//! assert_eq!(line.text(), b"0000000000001007  rep stosb byte ptr [rdi]\n");
//!
//! let mut att = Listing::new(ListingOptions { syntax: Syntax::Att, ..Default::default() });
//! let line = att.line(&image, 0x1009, ExecMode::Bit64);
//! assert_eq!(line.text(), b"0000000000001009  retq  \n");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cache;
mod fixup;
mod xed;

pub use cache::{Line, LineError, Listing, ListingOptions};
pub use xed::Syntax;

use iced_x86::{Decoder, DecoderError, Instruction, OpKind};
use pt_encoder::ExecMode;

use crate::insn::{decode_jmpabs, fwait_size, MAX_INSN_SIZE};
use core::fmt::Write as _;

/// Why XED would not decode an instruction (ptxed prints `[xed decode error: (2)
/// GENERAL_ERROR]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[error("({code}) {name}")]
pub struct XedError {
    /// XED's error number (`xed_error_enum_t`).
    pub code: u8,
    /// XED's name for it.
    pub name: &'static str,
}

impl XedError {
    /// The bytes end inside the instruction.
    pub const BUFFER_TOO_SHORT: Self = Self {
        code: 1,
        name: "BUFFER_TOO_SHORT",
    };
    /// Not an instruction XED knows.
    pub const GENERAL_ERROR: Self = Self {
        code: 2,
        name: "GENERAL_ERROR",
    };
    /// No execution mode to decode in.
    pub const INVALID_MODE: Self = Self {
        code: 17,
        name: "INVALID_MODE",
    };
}

/// What [`Formatter::format`] decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The instruction's length in bytes.
    pub size: u8,
    /// Where ptxed goes on from it when it walks a block: after it, or to its target if
    /// it has a branch displacement (as libipt's ptxed computes it with XED).
    pub next_ip: u64,
}

/// Formats single instructions in XED's text.
pub struct Formatter {
    printer: xed::XedPrinter,
    instr: Instruction,
    syntax: Syntax,
}

impl Default for Formatter {
    fn default() -> Self {
        Self::new(Syntax::Intel)
    }
}

impl Formatter {
    /// A formatter for `syntax`.
    pub fn new(syntax: Syntax) -> Self {
        Self {
            printer: xed::XedPrinter::new(),
            instr: Instruction::default(),
            syntax,
        }
    }

    /// The syntax it prints.
    pub fn syntax(&self) -> Syntax {
        self.syntax
    }

    /// Decodes the instruction at the start of `bytes` (the code at `ip`, at most 15
    /// bytes are looked at) and appends XED's text for it to `out`.
    pub fn format(
        &mut self,
        bytes: &[u8],
        ip: u64,
        mode: ExecMode,
        out: &mut String,
    ) -> Result<Decoded, XedError> {
        let bitness = match mode {
            ExecMode::Bit16 => 16,
            ExecMode::Bit32 => 32,
            ExecMode::Bit64 => 64,
            ExecMode::Unknown => return Err(XedError::INVALID_MODE),
        };
        let mut bytes = bytes.get(..MAX_INSN_SIZE).unwrap_or(bytes);
        for _ in 0..2 {
            let mut decoder = Decoder::try_with_ip(bitness, bytes, ip, xed::DECODER_OPTIONS)
                .map_err(|_| XedError::GENERAL_ERROR)?;
            decoder.decode_out(&mut self.instr);
            if self.instr.is_invalid() {
                if bitness == 64 {
                    if let Some((size, target)) = decode_jmpabs(bytes) {
                        // APX JMPABS, which iced-x86 does not know.
                        out.push_str(match self.syntax {
                            Syntax::Intel => "jmpabs 0x",
                            Syntax::Att => "jmpabs $0x",
                        });
                        let _ = write!(out, "{target:x}");
                        return Ok(Decoded {
                            size: size as u8,
                            next_ip: ip.wrapping_add(size as u64),
                        });
                    }
                }
                return Err(match decoder.last_error() {
                    DecoderError::NoMoreBytes => XedError::BUFFER_TOO_SHORT,
                    _ => XedError::GENERAL_ERROR,
                });
            }
            if self.instr.op_code().fwait() {
                // FWAIT is an instruction of its own for XED.
                bytes = bytes.get(..fwait_size(bytes)).unwrap_or(bytes);
                continue;
            }
            break;
        }
        let len = self.instr.len();
        let encoding = bytes.get(..len).unwrap_or(bytes);
        if xed::rejects(&self.instr, encoding, bitness) {
            return Err(XedError::GENERAL_ERROR);
        }
        self.printer
            .format(&self.instr, encoding, bitness, self.syntax, out);
        let branch = (0..self.instr.op_count()).any(|n| {
            matches!(
                self.instr.op_kind(n),
                OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64
            )
        });
        let next_ip = if branch {
            xed_branch_target(&self.instr, ip)
        } else {
            ip.wrapping_add(len as u64)
        };
        Ok(Decoded {
            size: len as u8,
            next_ip,
        })
    }
}

/// The address after the instruction plus its branch displacement, in 64 bits (as
/// libipt's ptxed adds XED's displacement, without truncation to the operand size).
fn xed_branch_target(instr: &Instruction, ip: u64) -> u64 {
    let next = ip.wrapping_add(instr.len() as u64);
    // iced-x86 gives the target cut to the operand size; recover the displacement.
    let target = instr.near_branch_target();
    let bits = match instr.op_kind(0) {
        OpKind::NearBranch16 => 16,
        OpKind::NearBranch32 => 32,
        _ => 64,
    };
    let disp = if bits == 64 {
        target.wrapping_sub(next) as i64
    } else {
        let mask = (1u64 << bits) - 1;
        let raw = target.wrapping_sub(next) & mask;
        let shift = 64 - bits;
        ((raw << shift) as i64) >> shift
    };
    next.wrapping_add(disp as u64)
}

#[cfg(test)]
mod tests;
