//! Address filters as perf takes them (`--filter`), and as the kernel applies
//! them to a process.
//!
//! perf's syntax: `filter|start|stop|tracestop START [/ SIZE] [@FILE]`, several
//! separated by spaces or commas. START and SIZE are numbers or function
//! symbols of FILE (a symbol surrounded by spaces; `#n` picks the n'th of that
//! name, `#g` the global one; `*` is the whole file). perf resolves symbols and
//! hands the kernel `filter 0xOFF/0xSIZE@/real/path` (`tracestop` becomes a
//! `stop` range). With `@FILE`, START is an offset in the file (symbols of an
//! executable are turned into file offsets as perf does); the kernel maps it
//! through the process's mappings of that file. Without a file START is a
//! virtual address.
//!
//! Intel PT takes address ranges only: `start`, and `stop` with no size, are
//! refused as the kernel refuses them.

use std::path::{Path, PathBuf};

use pt_hal::config::AddrRange;
use pt_hal::msr::AddrCfg;

use crate::exec::Mapping;

/// An address filter as the kernel takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterSpec {
    /// FilterEn range (`filter`) or TraceStop range (`stop`, `tracestop`).
    pub cfg: AddrCfg,
    /// Start: an offset in `object`, or a virtual address without one.
    pub start: u64,
    /// Size in bytes (≥ 1).
    pub size: u64,
    /// The object the start is an offset in (its real path).
    pub object: Option<PathBuf>,
}

/// Why a filter string is refused: perf's error lines (without a trailing
/// newline), the filter as typed included.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FilterError(pub String);

/// Why a filter's symbols cannot be resolved, in perf's words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum Unresolved {
    #[error("File '{0}' not found or has no symbols.\nFailed to load symbols from: {0}")]
    NoSymbols(String),
    #[error("{}", ambiguous(.name, .matches))]
    Ambiguous {
        name: String,
        /// (start, global) of each symbol of that name.
        matches: Vec<(u64, bool)>,
    },
    #[error("N'th occurrence (N={n}) of symbol '{name}' not found.\nNote that symbols must be functions.")]
    NoNth { name: String, n: i64 },
    #[error("Global symbol '{0}' not found.\nNote that symbols must be functions.")]
    NoGlobal(String),
    #[error("Symbol '{0}' not found.\nNote that symbols must be functions.")]
    NotFound(String),
    #[error("Kernel addresses are restricted. Unable to resolve kernel symbols.")]
    Kernel,
    #[error("Failed to determine filter for {0}\nCannot determine file size.")]
    FileSize(String),
    #[error("Symbol '{name}' ({start:#x}) comes before '{from}' ({addr:#x})")]
    BeforeSymbol {
        name: String,
        start: u64,
        from: String,
        addr: u64,
    },
    #[error("Symbol '{name}' ({start:#x}) comes before address {addr:#x})")]
    BeforeAddress { name: String, start: u64, addr: u64 },
}

/// perf's list of the symbols a name matches, and how to pick one.
fn ambiguous(name: &str, matches: &[(u64, bool)]) -> String {
    let mut e = format!("Multiple symbols with name '{name}'\n");
    for (i, (start, global)) in matches.iter().enumerate() {
        let bind = if *global { 'g' } else { 'l' };
        e.push_str(&format!("#{}\t{start:#x}\t{bind}\t{name}\n", i + 1));
    }
    e.push_str(&format!(
        "Disambiguate symbol name by inserting #n after the name e.g. {name} #2\n"
    ));
    e.push_str("Or select a global symbol by inserting #0 or #g or #G");
    e
}

/// One filter as typed, before symbols are resolved.
#[derive(Debug, Default)]
struct Parsed {
    action: String,
    /// `filter` and `tracestop`, and anything with a `/SIZE`.
    range: bool,
    /// `filter` and `start` (else a stop).
    start: bool,
    addr: u64,
    sym_from: Option<(String, Option<i64>)>,
    size: u64,
    sym_to: Option<(String, Option<i64>)>,
    filename: Option<String>,
}

/// Skips spaces.
fn skip(s: &str) -> &str {
    s.trim_start_matches(' ')
}

/// A number (C syntax, as strtoull with base 0) or a string up to one of `delims`.
enum Token {
    Num(u64),
    Str(String),
}

fn num_or_str<'a>(s: &'a str, delims: &[char]) -> Option<(Token, &'a str)> {
    let s = skip(s);
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        let (radix, body) = if let Some(h) = s.strip_prefix("0x").or(s.strip_prefix("0X")) {
            (16, h)
        } else if s.len() > 1 && s.starts_with('0') {
            (8, &s[1..])
        } else {
            (10, s)
        };
        let end = body
            .find(|c: char| !c.is_digit(radix))
            .unwrap_or(body.len());
        let v = if end == 0 {
            // "0x" with no digits reads as 0 followed by "x", as strtoull does.
            if radix == 16 {
                return Some((Token::Num(0), &s[1..]));
            }
            0
        } else {
            u64::from_str_radix(&body[..end], radix).ok()?
        };
        Some((Token::Num(v), &body[end..]))
    } else {
        let n = s.find(|c| delims.contains(&c)).unwrap_or(s.len());
        if n == 0 {
            return None;
        }
        let rest = &s[n..];
        // The delimiter is consumed.
        let rest = rest.get(1..).unwrap_or("");
        Some((Token::Str(s[..n].to_string()), rest))
    }
}

/// `#n`, `#g` after a symbol: Some(n) (0: global only); None: any.
fn sym_idx(s: &str) -> Option<(Option<i64>, &str)> {
    let s = skip(s);
    let Some(r) = s.strip_prefix('#') else {
        return Some((None, s));
    };
    if let Some(r) = r.strip_prefix(['g', 'G']) {
        return Some((Some(0), r));
    }
    let end = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
    let n: i64 = r[..end].parse().ok()?;
    Some((Some(n), &r[end..]))
}

fn parse_one(s: &str) -> Option<(Parsed, &str)> {
    let mut p = Parsed::default();
    let (Token::Str(action), s) = num_or_str(s, &[' '])? else {
        return None;
    };
    match action.as_str() {
        "filter" => {
            p.start = true;
            p.range = true;
        }
        "start" => p.start = true,
        "stop" => {}
        "tracestop" => p.range = true,
        _ => return None,
    }
    p.action = if action == "tracestop" {
        "stop".into()
    } else {
        action
    };
    let addr_size = |s| -> Option<(Token, Option<i64>, &str)> {
        let (t, rest) = num_or_str(s, &[' '])?;
        match t {
            Token::Str(_) => {
                let (idx, rest) = sym_idx(rest)?;
                Some((t, idx, rest))
            }
            Token::Num(_) => Some((t, None, rest)),
        }
    };
    let (t, idx, mut s) = addr_size(s)?;
    match t {
        Token::Num(n) => p.addr = n,
        Token::Str(name) => p.sym_from = Some((name, idx)),
    }
    s = skip(s);
    if let Some(r) = s.strip_prefix('/') {
        let (t, idx, rest) = addr_size(r)?;
        match t {
            Token::Num(n) => p.size = n,
            Token::Str(name) => p.sym_to = Some((name, idx)),
        }
        p.range = true;
        s = rest;
    }
    s = skip(s);
    if let Some(r) = s.strip_prefix('@') {
        let (Token::Str(f), rest) = num_or_str(r, &[' ', ','])? else {
            return None;
        };
        p.filename = Some(f);
        s = rest;
    }
    Some((p, s.trim_start_matches([' ', ','])))
}

/// A function symbol of an ELF file, its start as perf takes it (a file
/// offset for executables), its size and whether it is global.
struct Sym {
    name: String,
    start: u64,
    size: u64,
    global: bool,
}

/// The symbols of `path` as perf loads them for a filter ([`pt_elf`]'s table:
/// file offsets, zero sizes stretched, duplicates dropped, `.plt` entries,
/// demangled names), in address order.
fn functions(path: &Path) -> Result<Vec<Sym>, Unresolved> {
    let not_found = || Unresolved::NoSymbols(path.display().to_string());
    if !path.is_file() {
        return Err(not_found());
    }
    let mut symbols = pt_elf::Symbols::new(pt_elf::SymbolOptions::default());
    let id = symbols.dso_table(path, &path.to_string_lossy(), None);
    let table = symbols.table(id);
    if table.is_empty() {
        return Err(not_found());
    }
    let mut syms: Vec<Sym> = table
        .iter()
        .map(|s| Sym {
            name: s.name().to_string(),
            start: s.start,
            size: s.end.saturating_sub(s.start),
            global: s.binding() == object::elf::STB_GLOBAL,
        })
        .collect();
    // perf walks its tree: by start, equal starts in insertion order.
    syms.sort_by_key(|s| s.start);
    Ok(syms)
}

/// perf's lookup of `name` (`idx`: None any, Some(0) global, Some(n) the n'th):
/// (start, size).
fn find_sym(syms: &[Sym], name: &str, idx: Option<i64>) -> Result<(u64, u64), Unresolved> {
    let matches: Vec<&Sym> = syms
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| idx != Some(0) || s.global)
        .collect();
    let pick = match idx {
        Some(n) if n > 0 => matches.get(n as usize - 1).copied(),
        _ if matches.len() > 1 => {
            return Err(Unresolved::Ambiguous {
                name: name.to_string(),
                matches: matches.iter().map(|s| (s.start, s.global)).collect(),
            });
        }
        _ => matches.first().copied(),
    };
    match pick {
        Some(s) => Ok((s.start, s.size)),
        None => Err(match idx {
            Some(n) if n > 0 => Unresolved::NoNth {
                name: name.to_string(),
                n,
            },
            Some(_) => Unresolved::NoGlobal(name.to_string()),
            None => Unresolved::NotFound(name.to_string()),
        }),
    }
}

fn resolve(p: &mut Parsed) -> Result<(), Unresolved> {
    if p.sym_from.is_none() && p.sym_to.is_none() {
        return Ok(());
    }
    let Some(file) = &p.filename else {
        return Err(Unresolved::Kernel);
    };
    let path = PathBuf::from(file);
    if p.sym_from.as_ref().is_some_and(|(n, _)| n == "*") {
        let len = std::fs::metadata(&path)
            .map_err(|_| Unresolved::FileSize(file.clone()))?
            .len();
        p.addr = 0;
        p.size = len;
        return Ok(());
    }
    let syms = functions(&path)?;
    if let Some((name, idx)) = &p.sym_from {
        let (start, size) = find_sym(&syms, name, *idx)?;
        p.addr = start;
        if p.range && p.size == 0 && p.sym_to.is_none() {
            p.size = size;
        }
    }
    if let Some((name, idx)) = &p.sym_to {
        let (start, size) = find_sym(&syms, name, *idx)?;
        if start + size < p.addr {
            return Err(match &p.sym_from {
                Some((from, _)) => Unresolved::BeforeSymbol {
                    name: name.clone(),
                    start,
                    from: from.clone(),
                    addr: p.addr,
                },
                None => Unresolved::BeforeAddress {
                    name: name.clone(),
                    start,
                    addr: p.addr,
                },
            });
        }
        p.size = start + size - p.addr;
    }
    Ok(())
}

/// Most address ranges the simulated CPU has (CPUID 0x14 sub-leaf 1).
pub const MAX_FILTERS: usize = 2;

impl FilterSpec {
    /// Parses and resolves perf's filter syntax (see the module docs); the
    /// error is one line in perf's words.
    pub fn parse_list(s: &str) -> Result<Vec<Self>, FilterError> {
        // One line: what is wrong, perf's words, the syntax.
        let failed = |why: Option<String>| {
            let why = why.map(|w| w + ": ").unwrap_or_default();
            FilterError(format!(
                "{why}failed to parse address filter: '{s}' (filter|start|stop|tracestop <start symbol or address> [/ <end symbol or size>] [@<file name>], several separated by space or comma)"
            ))
        };
        let mut parsed = Vec::new();
        let mut rest = s;
        while !rest.is_empty() {
            let (p, r) = parse_one(rest).ok_or_else(|| failed(None))?;
            parsed.push(p);
            rest = r;
        }
        if parsed.len() > MAX_FILTERS {
            return Err(failed(Some(format!(
                "number of address filters ({}) exceeds maximum ({MAX_FILTERS})",
                parsed.len()
            ))));
        }
        let mut out = Vec::new();
        for mut p in parsed {
            resolve(&mut p).map_err(|e| failed(Some(e.to_string())))?;
            let object = match &p.filename {
                Some(f) => {
                    Some(std::fs::canonicalize(f).map_err(|e| failed(Some(format!("{f}: {e}"))))?)
                }
                None => None,
            };
            let shown = |p: &Parsed, object: &Option<PathBuf>| {
                let at = object
                    .as_ref()
                    .map(|o| format!("@{}", o.display()))
                    .unwrap_or_default();
                if p.range {
                    format!("{} {:#x}/{:#x}{at}", p.action, p.addr, p.size)
                } else {
                    format!("{} {:#x}{at}", p.action, p.addr)
                }
            };
            // Intel PT has address ranges only (the kernel's EOPNOTSUPP).
            if !p.range || p.size == 0 || p.action == "start" {
                return Err(FilterError(format!(
                    "failed to set filter \"{}\" on event intel_pt with 95 (Operation not supported)",
                    shown(&p, &object)
                )));
            }
            out.push(FilterSpec {
                cfg: if p.start {
                    AddrCfg::Filter
                } else {
                    AddrCfg::TraceStop
                },
                start: p.addr,
                size: p.size,
                object,
            });
        }
        Ok(out)
    }

    /// The filter as perf hands it to the kernel (and keeps it in
    /// AUXTRACE_INFO): `filter 0x1000/0x80@/usr/bin/ls`.
    pub fn to_perf(&self) -> String {
        let action = match self.cfg {
            AddrCfg::TraceStop => "stop",
            _ => "filter",
        };
        let at = self
            .object
            .as_ref()
            .map(|o| format!("@{}", o.display()))
            .unwrap_or_default();
        format!("{action} {:#x}/{:#x}{at}", self.start, self.size)
    }

    /// Several filters as perf joins them.
    pub fn list_to_perf(filters: &[FilterSpec]) -> String {
        filters
            .iter()
            .map(FilterSpec::to_perf)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The range in a process with mappings `maps` (address order), as the
    /// kernel computes it: the first mapping of the object that the range
    /// touches gives the address. `None`: the object is not mapped there.
    pub fn resolve(&self, maps: &[Mapping]) -> Option<AddrRange> {
        let Some(obj) = &self.object else {
            return Some(AddrRange {
                cfg: self.cfg,
                start: self.start,
                end: self.start.wrapping_add(self.size - 1),
            });
        };
        let mut sorted: Vec<&Mapping> = maps
            .iter()
            .filter(|m| Path::new(&m.path) == obj.as_path())
            .collect();
        sorted.sort_by_key(|m| m.start);
        for m in sorted {
            let len = m.end - m.start;
            if self.start > m.offset + len || self.start + self.size < m.offset {
                continue;
            }
            let (start, size) = if self.start < m.offset {
                (m.start, len.min(self.size - (m.offset - self.start)))
            } else {
                let s = m.start + self.start - m.offset;
                (s, (m.end - s).min(self.size))
            };
            return Some(AddrRange {
                cfg: self.cfg,
                start,
                end: start + size.max(1) - 1,
            });
        }
        None
    }
}

/// The ranges of `filters` in a process with mappings `maps`; a filter whose
/// object is not mapped there becomes a range that holds no code (the kernel
/// leaves such a filter unset: nothing is traced through it).
pub fn resolve_filters(filters: &[FilterSpec], maps: &[Mapping]) -> Vec<AddrRange> {
    filters
        .iter()
        .map(|f| {
            f.resolve(maps).unwrap_or(AddrRange {
                cfg: f.cfg,
                start: 0,
                end: 0,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::Perms;

    #[test]
    fn perfs_syntax_with_numbers() {
        let t = std::fs::canonicalize("/bin/true").unwrap();
        let f =
            FilterSpec::parse_list("filter 0x1000/0x100@/bin/true, tracestop 0x2000/8").unwrap();
        assert_eq!(
            f,
            vec![
                FilterSpec {
                    cfg: AddrCfg::Filter,
                    start: 0x1000,
                    size: 0x100,
                    object: Some(t.clone()),
                },
                FilterSpec {
                    cfg: AddrCfg::TraceStop,
                    start: 0x2000,
                    size: 8,
                    object: None,
                },
            ]
        );
        assert_eq!(
            FilterSpec::list_to_perf(&f),
            format!("filter 0x1000/0x100@{},stop 0x2000/0x8", t.display())
        );
        // Space separated, octal and decimal as strtoull reads them.
        let f = FilterSpec::parse_list("filter 010 / 16 stop 0x10/0x1").unwrap();
        assert_eq!((f[0].start, f[0].size), (8, 16));
        assert_eq!(f[1].cfg, AddrCfg::TraceStop);
    }

    #[test]
    fn what_perf_and_the_kernel_refuse() {
        for (bad, why) in [
            ("jump 1/2", "failed to parse address filter: 'jump 1/2'"),
            ("filter 1/0", "(Operation not supported)"),
            ("start 0x1000", "(Operation not supported)"),
            ("stop 0x1000", "(Operation not supported)"),
            ("filter 1/1 filter 2/1 filter 3/1", "exceeds maximum (2)"),
            ("filter main", "Unable to resolve kernel symbols"),
            (
                "filter nosuchsym @ /bin/true",
                "Symbol 'nosuchsym' not found.",
            ),
            (
                "filter 1/1@/no/such/file",
                "/no/such/file: No such file or directory",
            ),
        ] {
            let e = FilterSpec::parse_list(bad).unwrap_err().0;
            assert!(e.contains(why), "{bad}: {e}");
        }
        let e = FilterSpec::parse_list("filter 1/0").unwrap_err().0;
        assert_eq!(
            e,
            "failed to set filter \"filter 0x1/0x0\" on event intel_pt with 95 (Operation not supported)"
        );
    }

    #[test]
    fn the_kernel_maps_file_offsets_through_the_mappings() {
        let obj = PathBuf::from("/x/lib.so");
        let m = |start, end, offset| Mapping {
            start,
            end,
            offset,
            perms: Perms::default(),
            path: "/x/lib.so".into(),
        };
        let maps = vec![
            m(0x7000_0000, 0x7000_1000, 0),
            m(0x7000_1000, 0x7000_5000, 0x1000),
        ];
        let f = FilterSpec {
            cfg: AddrCfg::Filter,
            start: 0x1800,
            size: 0x100,
            object: Some(obj.clone()),
        };
        let r = f.resolve(&maps).unwrap();
        assert_eq!((r.start, r.end), (0x7000_1800, 0x7000_18ff));
        // Clamped to the mapping it starts in.
        let f = FilterSpec { size: 0x10000, ..f };
        let r = f.resolve(&maps).unwrap();
        assert_eq!((r.start, r.end), (0x7000_1800, 0x7000_4fff));
        let other = FilterSpec {
            object: Some("/y".into()),
            ..f
        };
        assert_eq!(other.resolve(&maps), None);
        assert_eq!(resolve_filters(&[other], &maps)[0].end, 0);
    }
}
