//! A listing in the layout of `yasm -L nasm -l file.lst`, line for line.
//!
//! yasm's listing starts with a `%line` marker, so source line N is usually
//! listing line N+1. Long byte runs continue on extra listing lines (ending
//! in `-`), and a label on a directive line is listed on its own between
//! `%line` markers; both shift the numbers of the lines after them. Lines
//! that emit nothing through `times 0` or `resb 0` are left out. Addresses
//! are offsets within the section: pttc adds the org or section vstart back.
//!
//! Like yasm, a relative branch shows its displacement minus the length of
//! the whole line (the value before yasm's final fix-up), not the bytes in
//! the binary; pttc only looks at addresses, and this keeps the listing
//! identical to the one yasm writes.

use super::layout::Emitted;
use super::parse::{Line, Stmt};
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

/// Listing writer: keeps the running listing line number.
struct Writer<'a> {
    out: String,
    n: usize,
    file: &'a str,
}

impl Writer<'_> {
    fn text(&mut self, text: &str) {
        self.n += 1;
        let _ = writeln!(self.out, "{:6}{:33}{text}", self.n, "");
    }

    fn marker(&mut self, line: usize, step: usize) {
        let text = format!("%line {line}+{step} {}", self.file);
        self.text(&text);
    }

    /// A line with an address and a bytes field split over listing lines.
    fn bytes(&mut self, offset: u64, field: &[String], text: &str) {
        for (i, chunk) in field.iter().enumerate() {
            self.n += 1;
            let more = if i + 1 < field.len() { '-' } else { ' ' };
            if i == 0 {
                let _ = writeln!(
                    self.out,
                    "{:6} {offset:08X} {chunk:<18}{more}    {text}",
                    self.n
                );
            } else {
                let _ = writeln!(self.out, "{:6} {offset:08X} {chunk:<18}{more}", self.n);
            }
        }
    }
}

/// The bytes column of one line: chunks of hex, `<rept>` after the first
/// repetition, `<gap>` for reserved space.
fn byte_field(e: &Emitted) -> Vec<String> {
    if e.reserve {
        return vec!["<gap>".to_string()];
    }
    let unit = e.rept_unit.map_or(e.bytes.len(), |u| u as usize);
    let mut shown = e.bytes.get(..unit).unwrap_or_default().to_vec();
    if let Some(d) = e.branch_disp {
        // yasm lists the displacement less the length of the whole line.
        let total = (unit as u64).wrapping_mul(e.count) as i64;
        if let Some(field) = shown
            .len()
            .checked_sub(usize::from(d))
            .and_then(|at| shown.get_mut(at..))
        {
            let mut v = 0i64;
            for (i, b) in field.iter().enumerate() {
                v |= i64::from(*b) << (8 * i);
            }
            let v = v.wrapping_sub(total);
            for (i, b) in field.iter_mut().enumerate() {
                *b = (v >> (8 * i)) as u8;
            }
        }
    }
    let mut chunks: Vec<String> = shown.chunks(BYTES_PER_LINE).map(hex).collect();
    if e.rept_unit.is_some() {
        match chunks.last_mut() {
            Some(last) => last.push_str("<rept>"),
            None => chunks.push("<rept>".to_string()),
        }
    }
    chunks
}

fn is_directive(stmt: &Stmt) -> bool {
    matches!(
        stmt,
        Stmt::Org(_)
            | Stmt::Bits(_)
            | Stmt::Section(_)
            | Stmt::Align { .. }
            | Stmt::DefaultRel(_)
            | Stmt::Ignored
    )
}

/// Renders the listing.
pub fn render(file_name: &str, lines: &[Line], emitted: &[Emitted]) -> String {
    let mut w = Writer {
        out: String::new(),
        n: 0,
        file: file_name,
    };
    w.marker(1, 1);
    for (line, e) in lines.iter().zip(emitted) {
        let text = &line.listing_text;
        let fill_align = matches!(line.stmt, Stmt::Align { fill: Some(_), .. });
        let emits = matches!(line.stmt, Stmt::Emit { .. });
        if (emits && e.bytes.is_empty() && (e.count == 0 || e.reserve))
            || (fill_align && e.bytes.is_empty() && line.label.is_none())
        {
            // `times 0` and `resb 0` leave no trace in yasm's listing.
            continue;
        }
        if is_directive(&line.stmt) {
            if let Some(label) = &line.label_written {
                let label = if line.label_colon {
                    format!("{label}: ")
                } else {
                    format!("{label} :")
                };
                w.text(&label);
                w.marker(line.number, 0);
            }
            if fill_align {
                let field = if e.bytes.is_empty() {
                    vec!["<gap>".to_string()]
                } else {
                    byte_field(e)
                };
                w.bytes(e.offset, &field, text);
            } else {
                w.text(text);
            }
            if line.label_written.is_some() {
                w.marker(line.number + 1, 1);
            }
            continue;
        }
        if e.bytes.is_empty() && !e.reserve {
            w.text(text);
            continue;
        }
        let field = byte_field(e);
        w.bytes(e.offset, &field, text);
    }
    w.out
}

#[cfg(test)]
mod tests {
    use crate::asm::assemble;

    fn listing(src: &str) -> Vec<String> {
        assemble(src, "t.asm")
            .unwrap()
            .listing
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn layout_of_lines() {
        let l = listing("org 0x1000\nbits 64\nl0: nop ; comment\n\n  times 3 nop\nl1: db 1,2,3,4,5,6,7,8,9,10\n");
        assert_eq!(
            l[0],
            "     1                                 %line 1+1 t.asm"
        );
        assert_eq!(l[1], "     2                                 [org 0x1000]");
        assert_eq!(l[3], "     4 00000000 90                     l0: nop");
        assert_eq!(l[4], "     5                                 ");
        assert_eq!(l[5], "     6 00000001 90<rept>                times 3 nop");
        assert_eq!(
            l[6],
            "     7 00000004 010203040506070809-    l1: db 1,2,3,4,5,6,7,8,9,10"
        );
        assert_eq!(l[7], "     8 00000004 0A                 ");
    }

    #[test]
    fn branches_show_yasm_values() {
        // Real displacement 0, listed as 0 - 2; with `times 2`, FE less 4.
        let l = listing("bits 64\njmp l1\nl1: times 2 jmp l1\n");
        assert_eq!(l[2], "     3 00000000 EBFE                   jmp l1");
        assert_eq!(
            l[3],
            "     4 00000002 EBFA<rept>             l1: times 2 jmp l1"
        );
    }

    #[test]
    fn labels_on_directives_and_empty_lines() {
        let l = listing("bits 32\nnop\nl5: align 4\nx: times 0 nop\nresb 2\n");
        assert_eq!(l[3], "     4                                 l5: ");
        assert_eq!(
            l[4],
            "     5                                 %line 3+0 t.asm"
        );
        assert_eq!(l[5], "     6                                 [align 4]");
        assert_eq!(
            l[6],
            "     7                                 %line 4+1 t.asm"
        );
        // `times 0` is left out; `resb` shows a gap.
        assert_eq!(l[7], "     8 00000004 <gap>                  resb 2");
        assert_eq!(l.len(), 8);
    }
}
