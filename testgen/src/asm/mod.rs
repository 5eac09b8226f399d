//! A yasm-compatible assembler (nasm syntax, `-f bin` output) built on
//! iced-x86, for the assembly half of libipt's .ptt test files.
//!
//! [`assemble`] turns source text into the flat binary `yasm -f bin` writes,
//! byte for byte, plus the label addresses pttc would derive from yasm's
//! listing, per-line addresses and a listing in yasm's style.
//!
//! Layers: [`parse`] (lexer and line parser), [`expr`] (expressions),
//! [`insn`] (instruction selection and encoding), [`layout`] (addresses,
//! relaxation, sections, the binary) and [`listing`].

pub mod expr;
pub mod insn;
pub mod layout;
pub mod listing;
pub mod parse;

use std::collections::BTreeMap;

/// The result of assembling one source file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assembly {
    /// The flat binary, exactly as `yasm -f bin` writes it.
    pub bytes: Vec<u8>,
    /// The (first) org address: the address of `bytes[0]`.
    pub org: u64,
    /// Every label and its (virtual) address, plus pttc's special labels
    /// `org`, `section_<name>_start`, `section_<name>_vstart` and
    /// `section_<name>_length`.
    pub labels: BTreeMap<String, u64>,
    /// Sections in declaration order.
    pub sections: Vec<SectionInfo>,
    /// One entry per source line, in order.
    pub lines: Vec<LineInfo>,
    /// A listing in the style of `yasm -L nasm -l file.lst`.
    pub listing: String,
}

/// Where a section ended up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionInfo {
    /// The name, e.g. `.text`.
    pub name: String,
    /// Virtual address of the section's first byte.
    pub vstart: u64,
    /// File offset of the section's first byte.
    pub offset: u64,
    /// Length in bytes.
    pub size: u64,
}

/// Where one source line's bytes went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineInfo {
    /// 1-based line number.
    pub line: usize,
    /// Virtual address at the start of the line.
    pub addr: u64,
    /// File offset of the line's bytes.
    pub offset: u64,
    /// Number of bytes the line emitted.
    pub len: usize,
}

/// An assembly error: where and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {message}")]
pub struct AsmError {
    /// The file name given to [`assemble`].
    pub file: String,
    /// 1-based line number (0 when the error is not tied to a line).
    pub line: usize,
    /// What went wrong.
    pub message: String,
}

/// Assembles nasm-syntax source into a flat binary, as `yasm -f bin` would.
pub fn assemble(source: &str, file_name: &str) -> Result<Assembly, AsmError> {
    let mut parser = parse::Parser::new();
    let mut lines = Vec::new();
    for (text, number) in source.lines().zip(1..) {
        let line = parser
            .parse_line(number, text)
            .map_err(|message| AsmError {
                file: file_name.to_string(),
                line: number,
                message,
            })?;
        lines.push(line);
    }
    let mut out = layout::layout(&lines, file_name)?;
    // yasm lists `l1: align 16` as a label line followed by the directive, so
    // pttc gives such a label the address after the padding.
    for (line, info) in lines.iter().zip(&out.lines) {
        if let (parse::Stmt::Align { .. }, Some(name)) = (&line.stmt, &line.label) {
            out.labels.insert(name.clone(), info.addr + info.len as u64);
        }
    }
    // pttc knows a local label by the name written in the listing (`.loop`);
    // offer that name too where it is unambiguous.
    let mut written: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for line in &lines {
        if let (Some(w), Some(full)) = (&line.label_written, &line.label) {
            if w != full {
                written.entry(w.as_str()).or_default().push(full.as_str());
            }
        }
    }
    for (w, fulls) in written {
        if let ([full], false) = (fulls.as_slice(), out.labels.contains_key(w)) {
            if let Some(addr) = out.labels.get(*full).copied() {
                out.labels.insert(w.to_string(), addr);
            }
        }
    }
    let listing = listing::render(file_name, &lines, &out.emitted);
    Ok(Assembly {
        bytes: out.bytes,
        org: out.org,
        labels: out.labels,
        sections: out.sections,
        lines: out.lines,
        listing,
    })
}
