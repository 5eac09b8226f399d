//! perf's event syntax for Intel PT: `intel_pt/TERMS/MODIFIERS`.
//!
//! As perf does, the PMU's default config (`tsc,mtc,mtc_period=3,
//! psb_period=3,pt,branch`) comes first and each term sets or clears its
//! format bits; a term alone means 1 (an error for multi-bit terms).
//! Modifiers: `u` (user only), `k` (kernel only), both or none (both).
//! Errors are one line with perf's words: the event, the column of the
//! offending place, the reason, and for unknown terms the list of valid
//! ones.

use pt_perf_data::intel_pt::config as bits;

/// The `intel_pt` PMU's format terms: name, first bit, width.
pub const FORMAT: [(&str, u32, u32); 14] = [
    ("branch", 13, 1),
    ("cyc", 1, 1),
    ("cyc_thresh", 19, 4),
    ("event", 31, 1),
    ("fup_on_ptw", 5, 1),
    ("mtc", 9, 1),
    ("mtc_period", 14, 4),
    ("noretcomp", 11, 1),
    ("notnt", 55, 1),
    ("psb_period", 24, 4),
    ("pt", 0, 1),
    ("ptw", 12, 1),
    ("pwr_evt", 4, 1),
    ("tsc", 10, 1),
];

/// perf's own config terms (valid on any event; listed after the PMU's).
const STATIC_TERMS: &str = "config,config1,config2,name,period,freq,branch_type,time,call-graph,stack-size,no-inherit,inherit,max-stack,nr,overwrite,no-overwrite,driver-config,percore,aux-output,aux-sample-size,metric-id";

/// A parsed `intel_pt` event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtEvent {
    /// attr.config.
    pub config: u64,
    /// attr.exclude_kernel.
    pub exclude_kernel: bool,
    /// attr.exclude_user.
    pub exclude_user: bool,
    /// The event's name as perf shows it (`intel_pt//u`, or a `name=` term).
    pub name: String,
}

impl PtEvent {
    /// `intel_pt//u`: perf's default config, user space.
    pub fn default_user() -> Self {
        PtEvent {
            config: bits::DEFAULT,
            exclude_kernel: true,
            exclude_user: false,
            name: "intel_pt//u".into(),
        }
    }
}

/// perf's error for an event string, in one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventError(pub String);

impl std::fmt::Display for EventError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EventError {}

/// An error in one line: perf's words (`event syntax error: 'EVENT'`, the
/// reason), the column perf's pointer would show (1-based) and the help
/// perf prints below, in parentheses.
fn error(event: &str, at: usize, msg: &str, help: Option<&str>) -> EventError {
    let help = help.map_or(String::new(), |h| format!(" ({h})"));
    EventError(format!(
        "event syntax error: '{event}', column {}: {msg}{help}",
        at + 1
    ))
}

/// A C number (decimal, `0x` hex, `0` octal).
fn number(s: &str) -> Option<u64> {
    if let Some(h) = s.strip_prefix("0x").or(s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else if s.len() > 1 && s.starts_with('0') {
        u64::from_str_radix(&s[1..], 8).ok()
    } else {
        s.parse().ok()
    }
}

/// Parses `intel_pt/TERMS/MODIFIERS` (see the module docs).
pub fn parse(event: &str) -> Result<PtEvent, EventError> {
    let (pmu, rest) = match event.split_once('/') {
        Some(x) => x,
        None => {
            let name = event.split(':').next().unwrap_or(event);
            return Err(error(
                event,
                0,
                &format!("ptperf records Intel PT only: '{name}' is not an intel_pt event"),
                Some("use -e intel_pt/TERMS/[u|k]"),
            ));
        }
    };
    if pmu != "intel_pt" {
        return Err(error(
            event,
            0,
            &format!("Cannot find PMU `{pmu}'. Missing kernel support?"),
            None,
        ));
    }
    let Some((terms, mods)) = rest.split_once('/') else {
        return Err(error(event, event.len(), "parser error", None));
    };
    let mut config = bits::DEFAULT;
    let mut name = None;
    let mut at = pmu.len() + 1;
    for term in terms.split(',') {
        let start = at;
        at += term.len() + 1;
        if term.is_empty() {
            if terms.is_empty() {
                break;
            }
            return Err(error(event, start, "parser error", None));
        }
        let (key, value) = match term.split_once('=') {
            Some((k, v)) => (k, Some((v, start + k.len() + 1))),
            None => (term, None),
        };
        if key == "name" {
            match value {
                Some((v, _)) if !v.is_empty() => name = Some(v.to_string()),
                _ => return Err(error(event, start, "parser error", None)),
            }
            continue;
        }
        let parsed = match value {
            Some((v, vat)) => match number(v) {
                Some(n) => Some(n),
                None => return Err(error(event, vat, "expected numeric value", None)),
            },
            None => None,
        };
        if key == "config" {
            config = parsed.unwrap_or(1);
            continue;
        }
        let Some(&(_, first, width)) = FORMAT.iter().find(|f| f.0 == key) else {
            if STATIC_TERMS.split(',').any(|t| t == key) {
                return Err(error(
                    event,
                    start,
                    &format!("term '{key}' is not supported for Intel PT by ptperf"),
                    None,
                ));
            }
            let formats: Vec<&str> = FORMAT.iter().map(|f| f.0).collect();
            return Err(error(
                event,
                start,
                &format!("unknown term '{key}' for pmu 'intel_pt'"),
                Some(&format!(
                    "valid terms: {},{STATIC_TERMS}",
                    formats.join(",")
                )),
            ));
        };
        let value = match parsed {
            Some(v) => v,
            None if width > 1 => {
                return Err(error(
                    event,
                    start + key.len(),
                    "no value assigned for term",
                    None,
                ))
            }
            None => 1,
        };
        let max = (1u64 << width) - 1;
        if value > max {
            let vat = value_at(start, key);
            return Err(error(
                event,
                vat,
                &format!("value too big for format, maximum is {max}"),
                None,
            ));
        }
        config = (config & !(max << first)) | (value << first);
    }
    let mods = mods.strip_prefix(':').unwrap_or(mods);
    let (mut user, mut kernel) = (false, false);
    for (i, c) in mods.char_indices() {
        match c {
            'u' => user = true,
            'k' => kernel = true,
            'h' | 'H' | 'G' | 'I' | 'S' | 'D' | 'W' => {}
            _ => {
                return Err(error(
                    event,
                    event.len() - mods.len() + i,
                    "parser error",
                    None,
                ))
            }
        }
    }
    // No modifier: both levels (perf falls back to `u` where the kernel is
    // out of reach, as the recorder does).
    let (exclude_kernel, exclude_user) = match (user, kernel) {
        (true, false) => (true, false),
        (false, true) => (false, true),
        _ => (false, false),
    };
    let name = name.unwrap_or_else(|| event.to_string());
    Ok(PtEvent {
        config,
        exclude_kernel,
        exclude_user,
        name,
    })
}

/// Where a term's value starts.
fn value_at(start: usize, key: &str) -> usize {
    start + key.len() + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perfs_defaults_and_terms() {
        let e = parse("intel_pt//u").unwrap();
        assert_eq!(e, PtEvent::default_user());
        let e = parse("intel_pt/noretcomp,psb_period=0,mtc=0/").unwrap();
        assert_eq!(
            e.config,
            bits::TSC | bits::PT | bits::BRANCH | bits::NORETCOMP | bits::mtc_period(3)
        );
        assert!(!e.exclude_kernel && !e.exclude_user);
        let e = parse("intel_pt/cyc,cyc_thresh=2,tsc=0,mtc_period=0x6/k").unwrap();
        assert_eq!(e.config & bits::TSC, 0);
        assert_eq!(e.config & bits::CYC_THRESH_MASK, bits::cyc_thresh(2));
        assert_eq!(e.config & bits::MTC_PERIOD_MASK, bits::mtc_period(6));
        assert!(e.exclude_user && !e.exclude_kernel);
        assert_eq!(parse("intel_pt/config=0x2001/u").unwrap().config, 0x2001);
        assert_eq!(parse("intel_pt/name=x/uk").unwrap().name, "x");
        assert_eq!(
            parse("intel_pt/notnt/").unwrap().config & bits::NOTNT,
            bits::NOTNT
        );
    }

    #[test]
    fn perfs_error_lines() {
        let e = parse("intel_pt/foo/u").unwrap_err().0;
        assert!(!e.contains('\n'), "{e}");
        assert!(
            e.starts_with(
                "event syntax error: 'intel_pt/foo/u', column 10: unknown term 'foo' for pmu 'intel_pt' (valid terms: branch,cyc,cyc_thresh,event,fup_on_ptw,mtc,mtc_period,noretcomp,notnt,psb_period,pt,ptw,pwr_evt,tsc,config,config1,"
            ),
            "{e}"
        );
        let e = parse("intel_pt/mtc_period=16/u").unwrap_err().0;
        assert_eq!(
            e,
            "event syntax error: 'intel_pt/mtc_period=16/u', column 21: value too big for format, maximum is 15"
        );
        let e = parse("intel_pt/psb_period/").unwrap_err().0;
        assert!(e.contains("no value assigned for term"), "{e}");
        let e = parse("intel_pt/tsc=x/").unwrap_err().0;
        assert!(e.contains("expected numeric value"), "{e}");
        let e = parse("cycles").unwrap_err().0;
        assert!(e.contains("not an intel_pt event"), "{e}");
        let e = parse("foo/x/").unwrap_err().0;
        assert!(
            e.contains("Cannot find PMU `foo'. Missing kernel support?"),
            "{e}"
        );
        let e = parse("intel_pt//q").unwrap_err().0;
        assert!(e.contains("parser error"), "{e}");
    }
}
