//! The .ptt file format: lines, the `@pt` directives in their comments, and the names
//! of the files generated from a .ptt file.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use crate::cstr::{is_c_space, strtol};

/// Split a source text into lines as pttc does: `\n` and `\r\n` end a line, a final line
/// ending does not start another line, and a lone `\r` at the very end is dropped.
pub fn split_lines(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    body.split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect()
}

/// Which marker introduced a directive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    /// `@pt `: a trace packet or `.exp` directive.
    Pt,
    /// `@sb `: a sideband directive.
    Sb,
}

/// A directive as found in a comment, before its arguments are interpreted.
///
/// The whole line is lower-cased first (pttc does so), so `name` and `payload` are too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawDirective {
    /// The marker that introduced it.
    pub marker: Marker,
    /// Everything between the marker (blanks skipped) and the first `(`, including an
    /// optional `label:` prefix; trailing blanks are kept.
    pub name: String,
    /// Everything between that `(` and the next `)`.
    pub payload: String,
}

/// A directive marker without a well-formed argument list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScanError {
    /// No `(` after the directive name.
    #[error("invalid syntax (missing '(')")]
    MissingOpenPar,
    /// No `)` after the `(`.
    #[error("invalid syntax (missing ')')")]
    MissingClosePar,
}

const PT_MARKER: &str = "@pt ";
const SB_MARKER: &str = "@sb ";

/// Find the directive in one source line: `Ok(None)` if the line has no comment or no
/// marker in its comment.
pub fn find_directive(line: &str) -> Result<Option<RawDirective>, ScanError> {
    let line = line.to_ascii_lowercase();
    let Some(comment) = line.find(';') else {
        return Ok(None);
    };
    let comment = &line[comment + 1..];
    let (marker, at) = match comment.find(PT_MARKER) {
        Some(at) => (Marker::Pt, at + PT_MARKER.len()),
        None => match comment.find(SB_MARKER) {
            Some(at) => (Marker::Sb, at + SB_MARKER.len()),
            None => return Ok(None),
        },
    };
    let rest = comment[at..].trim_start_matches(|c: char| c.is_ascii() && is_c_space(c as u8));
    let open = rest.find('(').ok_or(ScanError::MissingOpenPar)?;
    let close = rest[open..]
        .find(')')
        .map(|c| open + c)
        .ok_or(ScanError::MissingClosePar)?;
    Ok(Some(RawDirective {
        marker,
        name: rest[..open].to_string(),
        payload: rest[open + 1..close].to_string(),
    }))
}

/// A processor, as given to `--cpu`: family/model[/stepping].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cpu {
    /// Family.
    pub family: u16,
    /// Model.
    pub model: u8,
    /// Stepping; 0 if not given.
    pub stepping: u8,
}

/// A `--cpu` argument that is not `f/m[/s]`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cpu must be specified as f/m[/s], not '{0}'")]
pub struct CpuParseError(pub String);

impl FromStr for Cpu {
    type Err = CpuParseError;

    /// Parse `f/m[/s]` with libipt's rules: C integers (base 0), family up to 65535,
    /// model and stepping up to 255.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || CpuParseError(s.to_string());
        let (family, end) = strtol(s, 0).ok_or_else(err)?;
        let rest = s[end..].strip_prefix('/').ok_or_else(err)?;
        let family = u16::try_from(family).map_err(|_| err())?;
        let (model, end) = strtol(rest, 0).ok_or_else(err)?;
        let model = u8::try_from(model).map_err(|_| err())?;
        let rest = &rest[end..];
        let stepping = if rest.is_empty() {
            0
        } else {
            let rest = rest.strip_prefix('/').ok_or_else(err)?;
            // libipt accepts an empty stepping as 0 but nothing after the number.
            let (stepping, end) = strtol(rest, 0).unwrap_or((0, 0));
            if end != rest.len() {
                return Err(err());
            }
            u8::try_from(stepping).map_err(|_| err())?
        };
        Ok(Self {
            family,
            model,
            stepping,
        })
    }
}

impl fmt::Display for Cpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.family, self.model)?;
        if self.stepping != 0 {
            write!(f, "/{}", self.stepping)?;
        }
        Ok(())
    }
}

fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// The words of the `; <key> <words>` comment lines, as libipt's test script reads them
/// (`sed 's/[ \t]*;[ \t]*KEY[ \t][ \t]*\(.*\)/\1/p'` and shell word splitting): the
/// first `;` followed by optional blanks, `key` and a blank matches anywhere in a line,
/// and text before that `;` stays part of the value.
pub fn comment_words(source: &str, key: &str) -> Vec<String> {
    let mut words = Vec::new();
    for line in split_lines(source) {
        let found = line.match_indices(';').find_map(|(semi, _)| {
            let rest = line[semi + 1..].trim_start_matches(is_blank);
            let value = rest.strip_prefix(key)?;
            value.starts_with(is_blank).then(|| {
                let prefix = line[..semi].trim_end_matches(is_blank);
                format!("{prefix}{}", value.trim_start_matches(is_blank))
            })
        });
        if let Some(value) = found {
            words.extend(value.split_whitespace().map(str::to_string));
        }
    }
    words
}

/// The processors named by `; cpu f/m[/s]` lines; the test runs once per processor.
pub fn cpu_lines(source: &str) -> Vec<String> {
    comment_words(source, "cpu")
}

/// Extra command-line words for `tool` from `; opt:<tool> ...` lines.
pub fn tool_options(source: &str, tool: &str) -> Vec<String> {
    comment_words(source, &format!("opt:{tool}"))
}

/// The root of the generated file names: the .ptt file's name without directory and
/// without its last extension.
pub fn file_root(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match name.rfind('.') {
        Some(dot) => name[..dot].to_string(),
        None => name,
    }
}

/// The name of an expected-output file: `<root>-<tool>[-cpu_<f>_<m>[_<s>]].exp`
/// (`<root>-[-cpu_…].exp` for an empty tool name, as pttc writes it).
pub fn exp_file_name(root: &str, tool: &str, cpu: Option<Cpu>) -> String {
    let cpu = match cpu {
        None => String::new(),
        Some(c) if c.stepping != 0 => format!("-cpu_{}_{}_{}", c.family, c.model, c.stepping),
        Some(c) => format!("-cpu_{}_{}", c.family, c.model),
    };
    if tool.is_empty() {
        format!("{root}-{cpu}.exp")
    } else {
        format!("{root}-{tool}{cpu}.exp")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_like_pttc() {
        assert_eq!(split_lines(""), Vec::<&str>::new());
        assert_eq!(split_lines("a\nb\n"), vec!["a", "b"]);
        assert_eq!(split_lines("a\r\nb"), vec!["a", "b"]);
        assert_eq!(split_lines("a\n\n"), vec!["a", ""]);
        assert_eq!(split_lines("a\rb\r"), vec!["a\rb"]);
        assert_eq!(split_lines("\n"), vec![""]);
    }

    fn d(name: &str, payload: &str) -> Option<RawDirective> {
        Some(RawDirective {
            marker: Marker::Pt,
            name: name.into(),
            payload: payload.into(),
        })
    }

    #[test]
    fn directives_in_comments() {
        assert_eq!(find_directive("nop"), Ok(None));
        assert_eq!(find_directive("; plain comment"), Ok(None));
        assert_eq!(find_directive("; @ptx psb()"), Ok(None));
        assert_eq!(find_directive("; @pt psb()"), Ok(d("psb", "")));
        assert_eq!(
            find_directive("l1: jmp l2 ; @PT P3:  FUP(3: %L1) trailing"),
            Ok(d("p3:  fup", "3: %l1"))
        );
        assert_eq!(find_directive(";@pt  \ttnt(t.n)"), Ok(d("tnt", "t.n")));
        assert_eq!(find_directive("; @pt psb ( )"), Ok(d("psb ", " ")));
        assert_eq!(
            find_directive("; @pt .exp(ptdump)"),
            Ok(d(".exp", "ptdump"))
        );
        assert_eq!(find_directive("; @pt psb"), Err(ScanError::MissingOpenPar));
        assert_eq!(
            find_directive("; @pt tip(3: 0x10"),
            Err(ScanError::MissingClosePar)
        );
        // Only the comment counts; a marker before the semicolon is code.
        assert_eq!(find_directive("@pt psb() ; x"), Ok(None));
        let sb = find_directive("; @sb primary(pevent)").unwrap().unwrap();
        assert_eq!(sb.marker, Marker::Sb);
        assert_eq!(sb.name, "primary");
    }

    #[test]
    fn cpu_arguments() {
        let c = |s: &str| s.parse::<Cpu>();
        assert_eq!(
            c("6/158"),
            Ok(Cpu {
                family: 6,
                model: 158,
                stepping: 0
            })
        );
        assert_eq!(
            c("0x6/0x9e/10"),
            Ok(Cpu {
                family: 6,
                model: 158,
                stepping: 10
            })
        );
        assert_eq!(c("6/158/").map(|c| c.stepping), Ok(0));
        assert!(c("6").is_err());
        assert!(c("6/").is_err());
        assert!(c("6/256").is_err());
        assert!(c("65536/1").is_err());
        assert!(c("6/1/x").is_err());
        assert!(c("6/1x").is_err());
        assert!(c("-1/1").is_err());
        assert_eq!(c("6/142/9").unwrap().to_string(), "6/142/9");
    }

    #[test]
    fn cpu_and_option_lines() {
        let src = "; cpu 6/158\n;\tcpu  6/94 6/95 \nnop ; cpu 1/2\n; cpus 7/7\n;cpu\n\
                   ; opt:ptdump --no-pad\n; opt:ptxed --check\n; opt:ptdumpx 1\n";
        assert_eq!(cpu_lines(src), ["6/158", "6/94", "6/95", "nop1/2"]);
        assert_eq!(tool_options(src, "ptdump"), ["--no-pad"]);
        assert_eq!(tool_options(src, "ptxed"), ["--check"]);
        assert!(cpu_lines("nop\n").is_empty());
    }

    #[test]
    fn file_names() {
        assert_eq!(file_root(Path::new("../tests/foo-bar.ptt")), "foo-bar");
        assert_eq!(file_root(Path::new("a.b.ptt")), "a.b");
        assert_eq!(file_root(Path::new("noext")), "noext");
        let cpu = |s: &str| Some(s.parse::<Cpu>().unwrap());
        assert_eq!(exp_file_name("t", "ptdump", None), "t-ptdump.exp");
        assert_eq!(
            exp_file_name("t", "ptxed", cpu("6/158")),
            "t-ptxed-cpu_6_158.exp"
        );
        assert_eq!(
            exp_file_name("t", "ptxed", cpu("6/158/9")),
            "t-ptxed-cpu_6_158_9.exp"
        );
        assert_eq!(
            exp_file_name("t", "ptxed", cpu("6/158/0")),
            "t-ptxed-cpu_6_158.exp"
        );
        assert_eq!(exp_file_name("t", "", None), "t-.exp");
        assert_eq!(exp_file_name("t", "", cpu("6/1")), "t--cpu_6_1.exp");
    }
}
