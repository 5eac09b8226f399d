//! A listing in the layout of `yasm -L nasm -l file.lst`.
//!
//! yasm's listing starts with a `%line` marker, so source line N is listing
//! line N+1; long byte runs continue on extra listing lines (ending in `-`),
//! which shift the numbers of the lines after them. Addresses are offsets
//! within the section: pttc adds the org or section vstart back.
//!
//! One difference from yasm: for relative branches yasm prints the
//! displacement before its final fix-up; we print the bytes in the binary.

use super::layout::Emitted;
use super::parse::Line;
use std::fmt::Write;

/// Bytes shown per listing line.
const BYTES_PER_LINE: usize = 9;

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02X}");
            s
        })
}

/// Renders the listing.
pub fn render(file_name: &str, lines: &[Line], emitted: &[Emitted]) -> String {
    let mut out = String::new();
    let mut n = 1usize;
    let _ = writeln!(out, "{n:6}{:33}%line 1+1 {file_name}", "");
    for (line, e) in lines.iter().zip(emitted) {
        n += 1;
        let text = &line.listing_text;
        if e.bytes.is_empty() || e.padding {
            let _ = writeln!(out, "{n:6}{:33}{text}", "");
            continue;
        }
        if let Some(unit) = e.rept_unit {
            let first = e.bytes.get(..unit.min(BYTES_PER_LINE)).unwrap_or_default();
            let field = format!("{}<rept>", hex(first));
            let _ = writeln!(out, "{n:6} {:08X} {field:<18}     {text}", e.offset);
            continue;
        }
        let mut chunks = e.bytes.chunks(BYTES_PER_LINE).peekable();
        let mut first = true;
        while let Some(chunk) = chunks.next() {
            let more = if chunks.peek().is_some() { '-' } else { ' ' };
            if first {
                let _ = writeln!(
                    out,
                    "{n:6} {:08X} {:<18}{more}    {text}",
                    e.offset,
                    hex(chunk)
                );
                first = false;
            } else {
                n += 1;
                let _ = writeln!(out, "{n:6} {:08X} {:<18}{more}", e.offset, hex(chunk));
            }
        }
    }
    out
}
