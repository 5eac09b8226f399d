//! `.exp` sections: the expected output of a tool, kept in comments after
//! `; @pt .exp(tool)`, with `%label` references replaced by addresses and offsets.
//!
//! From the first `.exp` directive on, every line that has a comment contributes the
//! text after its first `;`, cut at the first `#` and without trailing blanks; lines
//! without a comment contribute nothing. Another `.exp(tool)` line starts a new section.
//!
//! References (label characters are ASCII letters, digits and `_`):
//! - `%name` – an assembler label as bare lower-case hex (`1000`), else a packet label
//!   or `eos` as bare hex;
//! - `%0name` – the same, zero-padded to 16 digits;
//! - `%name.n` / `%0name.n` – an assembler label cut to its low `n` bytes (n ≤ 8);
//! - `%?name.n` – 16 digits with the upper `8-n` bytes shown as `??`.

use std::fmt::Write as _;

use crate::cstr::{is_c_space, strtoull};
use crate::labels::{Labels, LABEL_MAX};
use crate::ptt::{find_directive, Marker, ScanError};

/// The expected output of one tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpSection {
    /// The tool named in `.exp(tool)` (lower case; may be empty).
    pub tool: String,
    /// The text, one `\n`-terminated line per commented source line.
    pub text: String,
}

/// Why a line of an expectation could not be expanded.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExpReason {
    /// `%` not followed by a known label.
    #[error("no such label '%{0}'")]
    NoLabel(String),
    /// A label name of 256 characters or more.
    #[error("label name is too long")]
    LabelTooLong,
    /// `.n` after a label is not a number from 0 to 8.
    #[error("bad byte count after '%{0}.'")]
    BadMask(String),
    /// A malformed directive line inside the section.
    #[error("{0}")]
    Directive(ScanError),
}

/// An error in an expectation section.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct ExpError {
    /// 1-based source line.
    pub line: usize,
    /// The tool of the section being written.
    pub tool: String,
    /// What is wrong.
    pub reason: ExpReason,
}

/// Expand the sections that start at `lines[first]`, whose `.exp` names `tool`.
pub fn expand(
    lines: &[&str],
    first: usize,
    tool: &str,
    labels: &Labels,
) -> Result<Vec<ExpSection>, ExpError> {
    let mut sections = vec![ExpSection {
        tool: tool.to_string(),
        text: String::new(),
    }];
    for (index, line) in lines.iter().enumerate().skip(first + 1) {
        let fail = |tool: &str, reason| ExpError {
            line: index + 1,
            tool: tool.to_string(),
            reason,
        };
        let current_tool = sections.last().map(|s| s.tool.clone()).unwrap_or_default();
        match find_directive(line) {
            Err(e) => return Err(fail(&current_tool, ExpReason::Directive(e))),
            Ok(Some(d)) if d.marker == Marker::Pt && d.name == ".exp" => {
                sections.push(ExpSection {
                    tool: d.payload,
                    text: String::new(),
                });
                continue;
            }
            Ok(_) => {}
        }
        let Some(text) = comment_text(line) else {
            continue;
        };
        let expanded = expand_line(text, labels).map_err(|r| fail(&current_tool, r))?;
        if let Some(s) = sections.last_mut() {
            s.text.push_str(&expanded);
            s.text.push('\n');
        }
    }
    Ok(sections)
}

/// The part of a line that goes into an expectation: after the first `;`, before the
/// first `#`, without trailing blanks. `None` for a line without a comment.
pub fn comment_text(line: &str) -> Option<&str> {
    let (_, text) = line.split_once(';')?;
    let text = text.split('#').next().unwrap_or_default();
    Some(text.trim_end_matches(|c: char| c.is_ascii() && is_c_space(c as u8)))
}

fn is_label_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Replace every `%` reference in one line of expected output.
pub fn expand_line(text: &str, labels: &Labels) -> Result<String, ExpReason> {
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(pct) = rest.find('%') {
        out.push_str(&rest[..pct]);
        rest = &rest[pct + 1..];
        let (zero, qmark) = match rest.bytes().next() {
            None => return Err(ExpReason::NoLabel(String::new())),
            Some(b) if is_c_space(b) => return Err(ExpReason::NoLabel(String::new())),
            Some(b'0') => (true, false),
            Some(b'?') => (true, true),
            Some(_) => (false, false),
        };
        if zero {
            rest = &rest[1..];
        }
        let len = rest.bytes().take_while(|&b| is_label_char(b)).count();
        if len >= LABEL_MAX {
            return Err(ExpReason::LabelTooLong);
        }
        let name = &rest[..len];
        rest = &rest[len..];

        let Some(mut addr) = labels.asm(name) else {
            // Packet labels are offsets: no byte masks for them.
            let offset = labels
                .packet(name)
                .ok_or_else(|| ExpReason::NoLabel(name.to_string()))?;
            push_hex(&mut out, offset, zero);
            continue;
        };
        let mut hidden = 0;
        if let Some(after) = rest.strip_prefix('.') {
            let bad = || ExpReason::BadMask(name.to_string());
            let n = strtoull(after, 0).ok_or_else(bad)?;
            let ends_well = after
                .as_bytes()
                .get(n.end)
                .is_none_or(|&b| is_c_space(b) || b.is_ascii_punctuation());
            if !ends_well || n.value > 8 {
                return Err(bad());
            }
            if n.value < 8 {
                addr &= (1u64 << (n.value * 8)) - 1;
            }
            hidden = 8 - n.value as usize;
            rest = &after[n.end..];
        }
        if qmark {
            for _ in 0..hidden {
                out.push_str("??");
            }
            for i in hidden..8 {
                let byte = (addr >> ((7 - i) * 8)) as u8;
                let _ = write!(out, "{byte:02x}");
            }
        } else {
            push_hex(&mut out, addr, zero);
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn push_hex(out: &mut String, v: u64, zero: bool) {
    // Writing to a String cannot fail.
    let _ = if zero {
        write!(out, "{v:016x}")
    } else {
        write!(out, "{v:x}")
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn labels() -> Labels {
        let mut m = BTreeMap::new();
        m.insert("l1".to_string(), 0xffff_ff00_004c);
        m.insert("L2".to_string(), 0xc0001);
        m.insert("start_here".to_string(), 0x1000);
        let mut l = Labels::from_assembly(m, 0x1000, []);
        l.define_packet("p1", 0x10).unwrap();
        l.define_packet("eos", 0x2a).unwrap();
        l
    }

    fn x(text: &str) -> Result<String, ExpReason> {
        expand_line(text, &labels())
    }

    #[test]
    fn label_forms() {
        assert_eq!(x("%l1").unwrap(), "ffffff00004c");
        assert_eq!(x("%0l1").unwrap(), "0000ffffff00004c");
        assert_eq!(x("%l1.2").unwrap(), "4c");
        assert_eq!(x("%0l1.2").unwrap(), "000000000000004c");
        assert_eq!(x("%?L2.2").unwrap(), "????????????0001");
        assert_eq!(x("%?L2").unwrap(), "00000000000c0001");
        assert_eq!(x("%?L2.0").unwrap(), "????????????????");
        assert_eq!(x("%?l1.8").unwrap(), "0000ffffff00004c");
        assert_eq!(x("%?L2.3,").unwrap(), "??????????0c0001,");
        assert_eq!(x("%start_here:").unwrap(), "1000:");
        assert_eq!(x("%org").unwrap(), "1000");
    }

    #[test]
    fn packet_labels_are_hex_offsets() {
        assert_eq!(x("%p1  psb").unwrap(), "10  psb");
        assert_eq!(x("%0p1  psb").unwrap(), "0000000000000010  psb");
        assert_eq!(x("%?p1").unwrap(), "0000000000000010");
        // No masking for packet labels: the suffix stays.
        assert_eq!(x("%p1.2").unwrap(), "10.2");
        assert_eq!(x("%eos").unwrap(), "2a");
    }

    #[test]
    fn bad_references() {
        assert_eq!(x("50%"), Err(ExpReason::NoLabel(String::new())));
        assert_eq!(x("50% done"), Err(ExpReason::NoLabel(String::new())));
        assert_eq!(x("%nope"), Err(ExpReason::NoLabel("nope".into())));
        // Labels are case-sensitive in expectations.
        assert_eq!(x("%l2"), Err(ExpReason::NoLabel("l2".into())));
        assert_eq!(x("%l1.9"), Err(ExpReason::BadMask("l1".into())));
        assert_eq!(x("%l1.x"), Err(ExpReason::BadMask("l1".into())));
        assert_eq!(x("%l1.2x"), Err(ExpReason::BadMask("l1".into())));
        assert_eq!(
            x(&format!("%{}", "a".repeat(LABEL_MAX))),
            Err(ExpReason::LabelTooLong)
        );
    }

    #[test]
    fn comment_text_rules() {
        assert_eq!(comment_text("nop"), None);
        assert_eq!(comment_text("nop ; text  \t"), Some(" text"));
        assert_eq!(comment_text(";a;b # note"), Some("a;b"));
        assert_eq!(comment_text(";#all comment"), Some(""));
        assert_eq!(comment_text(";"), Some(""));
    }

    #[test]
    fn sections() {
        let src = [
            "; @pt .exp(ptdump)",
            ";%0p1  psb",
            "",
            "nop ; # nothing",
            ";%eos",
            "; @pt .EXP(ptxed)",
            ";%0l1 # addr",
            "; @pt psb()",
        ];
        let s = expand(&src, 0, "ptdump", &labels()).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].tool, "ptdump");
        assert_eq!(s[0].text, "0000000000000010  psb\n\n2a\n");
        assert_eq!(s[1].tool, "ptxed");
        assert_eq!(s[1].text, "0000ffffff00004c\n @pt psb()\n");
    }

    #[test]
    fn section_errors() {
        let src = ["; @pt .exp(ptdump)", ";ok", ";%bad"];
        let e = expand(&src, 0, "ptdump", &labels()).unwrap_err();
        assert_eq!(e.line, 3);
        assert_eq!(e.tool, "ptdump");
        assert_eq!(e.reason, ExpReason::NoLabel("bad".into()));
        let src = ["; @pt .exp(ptdump)", "; @pt .exp(ptxed"];
        let e = expand(&src, 0, "ptdump", &labels()).unwrap_err();
        assert_eq!(e.reason, ExpReason::Directive(ScanError::MissingClosePar));
    }
}
