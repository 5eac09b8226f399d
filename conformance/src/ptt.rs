//! The few facts the test protocol reads straight from a `.ptt` file.
//!
//! libipt's `script/test.bash` does not parse the assembly: it greps the
//! file for `; cpu …`, `; opt:ptdump …` and `; opt:ptxed …` comment lines
//! and for an `org` line. This module reproduces those greps (including their
//! quirks, e.g. a match anywhere in a line) so that a result here means what
//! it means there. It also lists the `@pt .exp(tool)` sections so that a
//! failing generator can be charged to the tools the file tests.

/// What the runner needs to know about one `.ptt` file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PttInfo {
    /// CPUs from `; cpu f/m[/s]` lines, in order; empty means "run once without `--cpu`".
    pub cpus: Vec<String>,
    /// Words of all `; opt:ptdump` lines.
    pub ptdump_opts: Vec<String>,
    /// Words of all `; opt:ptxed` lines.
    pub ptxed_opts: Vec<String>,
    /// Words of the load address from the `org` line(s), if there is one.
    pub org: Option<Vec<String>>,
    /// Tools named by `@pt .exp(tool)` sections, in order, without duplicates.
    pub exp_tools: Vec<String>,
}

impl PttInfo {
    /// Reads the directives out of the text of a `.ptt` file.
    pub fn parse(text: &str) -> Self {
        let mut info = PttInfo::default();
        let mut org_lines: Vec<&str> = Vec::new();
        for line in text.lines() {
            if let Some(words) = comment_directive(line, "cpu") {
                info.cpus.extend(words);
            }
            if let Some(words) = comment_directive(line, "opt:ptdump") {
                info.ptdump_opts.extend(words);
            }
            if let Some(words) = comment_directive(line, "opt:ptxed") {
                info.ptxed_opts.extend(words);
            }
            if line
                .get(..3)
                .is_some_and(|head| head.eq_ignore_ascii_case("org"))
            {
                org_lines.push(line);
            }
            if let Some(tool) = exp_directive(line) {
                if !info.exp_tools.iter().any(|t| t == tool) {
                    info.exp_tools.push(tool.to_string());
                }
            }
        }
        if !org_lines.is_empty() {
            info.org = Some(org_words(&org_lines));
        }
        info
    }
}

/// Whitespace as `sed`'s `[ \t]` sees it.
fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// Emulates `sed -n 's/[ \t]*;[ \t]*KEY[ \t][ \t]*\(.*\)[ \t]*/\1/p'` and the
/// shell word splitting of its output.
///
/// The pattern is unanchored: it matches at the first `;` that is followed by
/// optional blanks, `key` and at least one blank. Text before that `;` (minus
/// the blanks right before it) is kept, as sed keeps the unmatched prefix.
fn comment_directive(line: &str, key: &str) -> Option<Vec<String>> {
    for (semi, _) in line.match_indices(';') {
        let rest = line.get(semi + 1..)?.trim_start_matches(is_blank);
        let Some(after_key) = rest.strip_prefix(key) else {
            continue;
        };
        if !after_key.starts_with(is_blank) {
            continue;
        }
        let value = after_key.trim_start_matches(is_blank);
        let prefix = line.get(..semi)?.trim_end_matches(is_blank);
        let joined = format!("{prefix}{value}");
        return Some(joined.split_whitespace().map(str::to_string).collect());
    }
    None
}

/// Emulates ``addr=`echo $(grep -i ^org FILE) | sed "s/org *//"` `` and the
/// word splitting of `--raw $bin:$addr`.
fn org_words(lines: &[&str]) -> Vec<String> {
    // `echo $line` joins all matching lines' words with single spaces.
    let joined = lines
        .iter()
        .flat_map(|l| l.split_whitespace())
        .collect::<Vec<_>>()
        .join(" ");
    // sed's `s/org *//` is case-sensitive and replaces the first match only.
    let stripped = match joined.find("org") {
        Some(at) => {
            let tail = joined.get(at + 3..).unwrap_or("").trim_start_matches(' ');
            format!("{}{}", joined.get(..at).unwrap_or(""), tail)
        }
        None => joined,
    };
    stripped.split_whitespace().map(str::to_string).collect()
}

/// The tool of a `@pt [label:] .exp(tool)` directive on this line, if any.
fn exp_directive(line: &str) -> Option<&str> {
    let comment = line.get(line.find(';')? + 1..)?;
    let directive = comment.get(comment.find("@pt")? + 3..)?.trim_start();
    // An optional `label:` comes before the directive itself.
    let directive = match directive.find(':') {
        Some(colon) if !directive.get(..colon)?.contains('(') => {
            directive.get(colon + 1..)?.trim_start()
        }
        _ => directive,
    };
    let args = directive
        .strip_prefix(".exp")?
        .trim_start()
        .strip_prefix('(')?;
    Some(args.get(..args.find(')')?)?.trim())
}

/// The tool an `.exp` file is for, from its name, as `test.bash` derives it:
/// strip `.exp`, then the `<base>-` prefix, then everything from `-cpu_` on.
pub fn exp_tool(exp_name: &str, base: &str) -> String {
    let stem = exp_name.strip_suffix(".exp").unwrap_or(exp_name);
    let stem = stem
        .strip_prefix(base)
        .and_then(|s| s.strip_prefix('-'))
        .unwrap_or(stem);
    match stem.find("-cpu_") {
        Some(at) => stem.get(..at).unwrap_or(stem).to_string(),
        None => stem.to_string(),
    }
}

/// The tool arguments `test.bash` derives from a sideband file name
/// `<base>-[<src>-]<format>-<prio>[,<opt>=<val>…].sb`:
/// `--<format>:<opt> <val>`… then `--<format>:<prio> <file>`.
pub fn sideband_args(sb_name: &str, base: &str) -> Vec<String> {
    let sb_base = sb_name.strip_suffix(".sb").unwrap_or(sb_name);
    let sb_part = sb_base
        .strip_prefix(base)
        .and_then(|s| s.strip_prefix('-'))
        .unwrap_or(sb_base);
    let (prefix, options) = match sb_part.find(',') {
        Some(at) => sb_part.split_at(at),
        None => (sb_part, ""),
    };
    let prio = prefix.rsplit('-').next().unwrap_or(prefix);
    let prefix2 = prefix
        .strip_suffix(prio)
        .and_then(|p| p.strip_suffix('-'))
        .unwrap_or(prefix);
    let format = prefix2.rsplit('-').next().unwrap_or(prefix2);

    let opts = options
        .replace(',', &format!(" --{format}:"))
        .replace('=', " ");
    let mut args: Vec<String> = opts.split_whitespace().map(str::to_string).collect();
    args.push(format!("--{format}:{prio}"));
    args.push(sb_name.to_string());
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cpus_options_and_org() {
        let text = "\
; a comment about nothing
;   cpu 6/78
; cpu 6/94 6/142
; opt:ptdump --time --time-delta
; opt:ptdump --no-tcal
;   opt:ptxed --event:ip
ORG 0x100000
bits 64
; @pt p1: psb()
; @pt .exp(ptdump)
;%0p1  psb
; @pt .exp(ptxed)
; @pt .exp(ptdump)
";
        let info = PttInfo::parse(text);
        assert_eq!(info.cpus, ["6/78", "6/94", "6/142"]);
        assert_eq!(info.ptdump_opts, ["--time", "--time-delta", "--no-tcal"]);
        assert_eq!(info.ptxed_opts, ["--event:ip"]);
        // sed removes only a lower-case `org`, as test.bash does.
        assert_eq!(info.org, Some(vec!["ORG".into(), "0x100000".into()]));
        assert_eq!(info.exp_tools, ["ptdump", "ptxed"]);
    }

    #[test]
    fn directive_needs_blank_after_key() {
        assert_eq!(comment_directive("; cpus are fun", "cpu"), None);
        assert_eq!(comment_directive("; opt:ptdumpx --a", "opt:ptdump"), None);
        assert_eq!(comment_directive("; cpu", "cpu"), None);
        assert_eq!(
            comment_directive("\t;\tcpu\t6/78  ", "cpu"),
            Some(vec!["6/78".to_string()])
        );
    }

    #[test]
    fn directive_keeps_text_before_the_semicolon() {
        // sed substitutes only the matched part of the line.
        assert_eq!(
            comment_directive("nop ; cpu 6/78", "cpu"),
            Some(vec!["nop6/78".to_string()])
        );
        // The first `;` does not match, the second does.
        assert_eq!(
            comment_directive("; x ; opt:ptxed --a", "opt:ptxed"),
            Some(vec![";".to_string(), "x--a".to_string()])
        );
    }

    #[test]
    fn org_variants() {
        assert_eq!(
            PttInfo::parse("org 0x1000\n").org,
            Some(vec!["0x1000".to_string()])
        );
        assert_eq!(
            PttInfo::parse("org   0x1000   ; start\n").org,
            Some(vec!["0x1000".into(), ";".into(), "start".into()])
        );
        // Indented `org` is not matched by `grep ^org`.
        assert_eq!(PttInfo::parse("  org 0x1000\n").org, None);
        assert_eq!(PttInfo::parse("bits 64\n").org, None);
    }

    #[test]
    fn exp_directive_forms() {
        assert_eq!(exp_directive("; @pt .exp(ptdump)"), Some("ptdump"));
        assert_eq!(exp_directive(";@pt e1: .exp( ptxed )"), Some("ptxed"));
        assert_eq!(exp_directive("; @pt .exp()"), Some(""));
        assert_eq!(exp_directive("; @pt p1: fup(3: %l1)"), None);
        assert_eq!(exp_directive("@pt .exp(ptdump)"), None);
    }

    #[test]
    fn tool_from_exp_name() {
        assert_eq!(exp_tool("a-b-ptdump.exp", "a-b"), "ptdump");
        assert_eq!(exp_tool("a-b-ptxed-cpu_6_78.exp", "a-b"), "ptxed");
        assert_eq!(exp_tool("a-b-ptdump-cpu_6_78_3.exp", "a-b"), "ptdump");
        assert_eq!(exp_tool("a-b-.exp", "a-b"), "");
    }

    #[test]
    fn sideband_file_names() {
        assert_eq!(
            sideband_args("t-pevent-primary.sb", "t"),
            ["--pevent:primary", "t-pevent-primary.sb"]
        );
        let name = "t-cpu1-pevent-secondary,sample-type=0x4,time-zero=0x0.sb";
        assert_eq!(
            sideband_args(name, "t"),
            [
                "--pevent:sample-type",
                "0x4",
                "--pevent:time-zero",
                "0x0",
                "--pevent:secondary",
                name
            ]
        );
    }
}
