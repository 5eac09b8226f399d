//! A yasm-compatible assembler (nasm syntax, `-f bin` output) built on
//! iced-x86, for the assembly half of libipt's .ptt test files.
//!
//! [`assemble`] turns source text into the flat binary `yasm -f bin` writes,
//! byte for byte, plus the label addresses pttc would derive from yasm's
//! listing, per-line addresses and a listing in yasm's style.
//!
//! Where yasm has a habit, we follow it: the encodings it picks among
//! equivalent ones, its prefix order, its NOP padding, its relaxation order
//! (see [`layout`]), the displacement it lists for a branch, and the label
//! values pttc reads from its listing. Known gaps: no macros or `%define`,
//! no `incbin`, no floating-point data, no EVEX encodings; and where yasm
//! 1.3 does not know an instruction (`int1`, `ptwrite`, `sysretq`) and
//! quietly takes the name for a label, we assemble the instruction.
//!
//! Layers: [`parse`] (lexer and line parser), [`expr`] (expressions),
//! [`insn`] (instruction selection and encoding), [`layout`] (addresses,
//! relaxation, sections, the binary), [`listing`] (yasm's listing) and
//! [`pttc`] (label addresses read from the listing the way pttc reads them).

mod cycles;
pub mod expr;
pub mod insn;
pub mod layout;
pub mod listing;
pub mod parse;
pub mod pttc;

use std::collections::BTreeMap;

/// A table keyed by names (labels, mnemonics, registers). The assembler looks
/// names up on every line of every pass; SipHash would be most of that cost,
/// and a source file is not an adversary of the machine it is assembled on.
type NameMap<V> = std::collections::HashMap<String, V, pt_encoder::hash::IpBuildHasher>;

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
    // Sized once: a `Line` is a few hundred bytes, and doubling a vector of
    // a million of them would hold half as many again in slack.
    let mut lines = Vec::with_capacity(source.lines().count());
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
            out.labels
                .insert(name.clone(), info.addr.wrapping_add(info.len as u64));
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
    // Where pttc can read the listing, its values are the ones .ptt files
    // were written against.
    if let Ok(read) = pttc::labels(&listing) {
        out.labels.extend(read);
    }
    Ok(Assembly {
        bytes: out.bytes,
        org: out.org,
        labels: out.labels,
        sections: out.sections,
        lines: out.lines,
        listing,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assembles_a_small_program() {
        let src = "org 0x100000\nbits 64\nl0: nop\nl1: jmp l3\nl2: hlt\nl3: call l0\n";
        let a = assemble(src, "t.ptt").unwrap();
        assert_eq!(
            a.bytes,
            [0x90, 0xeb, 0x01, 0xf4, 0xe8, 0xf7, 0xff, 0xff, 0xff]
        );
        assert_eq!(a.org, 0x100000);
        assert_eq!(a.labels.get("l3"), Some(&0x100004));
        assert_eq!(a.labels.get("org"), Some(&0x100000));
        assert_eq!(a.lines.len(), 6);
        assert_eq!(
            a.lines[3],
            LineInfo {
                line: 4,
                addr: 0x100001,
                offset: 1,
                len: 2
            }
        );
        // yasm lists a branch displacement less the instruction length.
        assert!(a
            .listing
            .contains("     5 00000001 EBFF                   l1: jmp l3"));
    }

    #[test]
    fn errors_name_file_and_line() {
        let e = assemble("bits 64\nnop\nfrobnicate rax\n", "x.ptt").unwrap_err();
        assert_eq!((e.file.as_str(), e.line), ("x.ptt", 3));
        assert_eq!(e.to_string(), "x.ptt:3: unknown instruction `frobnicate\'");
        let e = assemble("bits 64\njmp nowhere\n", "x.ptt").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("undefined symbol"), "{}", e.message);
        let e = assemble("bits 64\na: nop\na: nop\n", "x.ptt").unwrap_err();
        assert_eq!(e.line, 3);
    }

    #[test]
    fn branches_relax_across_passes() {
        // The first jump only needs a near form once the second one grew.
        let mut src = String::from("bits 64\na: jmp c\nb: jmp d\n");
        src.push_str(&"nop\n".repeat(124));
        src.push_str("c: nop\n");
        src.push_str(&"nop\n".repeat(3));
        src.push_str("d: nop\n");
        let a = assemble(&src, "r.asm").unwrap();
        // yasm: e9 81 00 00 00, e9 80 00 00 00.
        assert_eq!(
            a.bytes.get(..10),
            Some(&[0xe9, 0x81, 0, 0, 0, 0xe9, 0x80, 0, 0, 0][..])
        );
        assert_eq!(a.labels.get("c"), Some(&0x86));
    }

    #[test]
    fn sections_and_special_labels() {
        let src =
            "org 0x1000\nbits 64\nsection .text\nnop\nsection .data vstart=0x2000\nd0: dd 1\n";
        let a = assemble(src, "s.asm").unwrap();
        assert_eq!(a.labels.get("d0"), Some(&0x2000));
        assert_eq!(a.labels.get("section_.data_vstart"), Some(&0x2000));
        assert_eq!(a.labels.get("section_.data_length"), Some(&4));
        assert_eq!(
            a.sections[1],
            SectionInfo {
                name: ".data".into(),
                vstart: 0x2000,
                offset: 4,
                size: 4
            }
        );
        assert_eq!(a.bytes, [0x90, 0, 0, 0, 1, 0, 0, 0]);
    }

    /// Garbage lines from the tests' seeded generator.
    fn garbage(rng: &mut pt_testkit::Rng) -> String {
        const PIECES: [&str; 40] = [
            "nop",
            "jmp",
            "l1",
            "l1:",
            ":",
            ",",
            "[",
            "]",
            "rax",
            "eax",
            "+",
            "-",
            "*",
            "$",
            "$$",
            "0x",
            "0x10",
            "times",
            "db",
            "dd",
            "'a",
            "\"",
            "byte",
            "far",
            "short",
            "(",
            ")",
            "section",
            "vstart=",
            "align",
            "org",
            "bits",
            "64",
            "99999999999999999999",
            ".x",
            "equ",
            "mov",
            "cr3",
            "<<",
            "call",
        ];
        let mut s = String::new();
        let bits = rng.next();
        let n = (bits % 7) as usize;
        for k in 0..n {
            let i = ((bits >> (k * 5)) % PIECES.len() as u64) as usize;
            s.push_str(PIECES[i]);
            s.push(' ');
        }
        s
    }

    #[test]
    fn garbage_never_panics() {
        let mut rng = pt_testkit::Rng::new(0x2545_f491_4f6c_dd1d);
        for _ in 0..3000 {
            let src: String = (0..4).map(|_| garbage(&mut rng) + "\n").collect();
            let _ = assemble(&src, "g.asm");
        }
        for src in [
            "times 99999999999 nop",
            "align 0x40000000",
            "org 0xffffffffffffffff\nnop\nnop",
            "section .a start=0xffffffffffffff00\nnop",
            &"(".repeat(100000),
            &"1+".repeat(100000),
            "section .b follows=.b\nnop",
            "jmp $+0x7fffffffffffffff",
        ] {
            let _ = assemble(src, "g.asm");
        }
    }
}
