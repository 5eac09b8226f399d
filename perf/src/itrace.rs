//! perf's `--itrace` options (tools/perf/Documentation/itrace.txt): what to
//! synthesize from an instruction trace.

use std::fmt;

/// How the instruction sampling period is counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PeriodType {
    /// Instructions (`i`).
    #[default]
    Instructions,
    /// TSC ticks (`t`).
    Ticks,
    /// Nanoseconds (`ns`, `us`, `ms`, converted).
    Nanosecs,
}

/// perf's `struct itrace_synth_opts`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SynthOpts {
    /// `--itrace` was given.
    pub set: bool,
    /// `i`.
    pub instructions: bool,
    /// `b` (and `c`, `r`).
    pub branches: bool,
    /// `x`.
    pub transactions: bool,
    /// `w`.
    pub ptwrites: bool,
    /// `p`.
    pub pwr_events: bool,
    /// `o`.
    pub other_events: bool,
    /// `I`.
    pub intr_events: bool,
    /// `e`.
    pub errors: bool,
    /// `e` flags to leave out (`-o`: overflow, `-l`: data lost).
    pub error_minus_flags: u32,
    /// `d`.
    pub log: bool,
    /// `c`.
    pub calls: bool,
    /// `r`.
    pub returns: bool,
    /// `g`.
    pub callchain: bool,
    /// `G`.
    pub add_callchain: bool,
    /// Call chain size.
    pub callchain_sz: u32,
    /// `l`.
    pub last_branch: bool,
    /// `L`.
    pub add_last_branch: bool,
    /// Branch stack size.
    pub last_branch_sz: u32,
    /// `s`: events to skip first.
    pub initial_skip: u64,
    /// `q` (counted).
    pub quick: u32,
    /// `A`.
    pub approx_ipc: bool,
    /// `Z`.
    pub timeless_decoding: bool,
    /// The thread stack is kept (callindent).
    pub thread_stack: bool,
    /// The period.
    pub period: u64,
    /// Its unit.
    pub period_type: PeriodType,
}

/// perf's default instruction period (`PERF_ITRACE_DEFAULT_PERIOD`).
pub const DEFAULT_PERIOD: u64 = 100_000;
/// perf's default call chain size.
pub const DEFAULT_CALLCHAIN_SZ: u32 = 16;
/// perf's largest call chain.
pub const MAX_CALLCHAIN_SZ: u32 = 1024;
/// perf's default branch stack size.
pub const DEFAULT_LAST_BRANCH_SZ: u32 = 64;
/// perf's largest branch stack.
pub const MAX_LAST_BRANCH_SZ: u32 = 1024;

/// Error-flag bits of `e`.
pub const ERR_FLG_OVERFLOW: u32 = 1 << (b'o' - b'a');
/// `e-l`: leave out "Lost trace data".
pub const ERR_FLG_DATA_LOST: u32 = 1 << (b'l' - b'a');

/// A bad `--itrace` string: perf's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadItrace(pub String);

impl fmt::Display for BadItrace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bad Instruction Tracing options '{}'", self.0)
    }
}

impl std::error::Error for BadItrace {}

impl SynthOpts {
    /// perf's defaults (`itrace_synth_opts__set_default`); `no_sample`: as for
    /// `perf script` (calls instead of instruction samples).
    pub fn default_for(no_sample: bool) -> Self {
        let mut o = SynthOpts {
            branches: true,
            transactions: true,
            ptwrites: true,
            pwr_events: true,
            other_events: true,
            intr_events: true,
            errors: true,
            callchain_sz: DEFAULT_CALLCHAIN_SZ,
            last_branch_sz: DEFAULT_LAST_BRANCH_SZ,
            ..Default::default()
        };
        if no_sample {
            o.period_type = PeriodType::Instructions;
            o.period = 1;
            o.calls = true;
        } else {
            o.instructions = true;
            o.period_type = PeriodType::Nanosecs;
            o.period = DEFAULT_PERIOD;
        }
        o
    }

    /// Adds the options of `s` (perf's `itrace_do_parse_synth_opts`).
    pub fn parse_into(&mut self, s: &str) -> Result<(), BadItrace> {
        let bad = || BadItrace(s.to_string());
        self.set = true;
        let b = s.as_bytes();
        let mut p = 0;
        let skip_sep = |p: &mut usize| {
            while matches!(b.get(*p), Some(b' ' | b',')) {
                *p += 1;
            }
        };
        let number = |p: &mut usize| -> Option<u64> {
            let start = *p;
            while b.get(*p).is_some_and(u8::is_ascii_digit) {
                *p += 1;
            }
            if start == *p {
                return None;
            }
            // strtoull saturates.
            Some(s[start..*p].parse::<u64>().unwrap_or(u64::MAX))
        };
        let mut period_type_set = false;
        let mut period_set = false;
        while let Some(&c) = b.get(p) {
            p += 1;
            match c {
                b'i' => {
                    self.instructions = true;
                    skip_sep(&mut p);
                    if let Some(n) = number(&mut p) {
                        self.period = n;
                        period_set = true;
                        skip_sep(&mut p);
                        let u = b.get(p).copied();
                        p += 1;
                        match u {
                            Some(b'i') => self.period_type = PeriodType::Instructions,
                            Some(b't') => self.period_type = PeriodType::Ticks,
                            Some(m @ (b'm' | b'u' | b'n')) => {
                                let mult = match m {
                                    b'm' => 1_000_000,
                                    b'u' => 1000,
                                    _ => 1,
                                };
                                self.period = self.period.wrapping_mul(mult);
                                if b.get(p) != Some(&b's') {
                                    return Err(bad());
                                }
                                p += 1;
                                self.period_type = PeriodType::Nanosecs;
                            }
                            None => break,
                            Some(_) => return Err(bad()),
                        }
                        period_type_set = true;
                    }
                }
                b'b' => self.branches = true,
                b'x' => self.transactions = true,
                b'w' => self.ptwrites = true,
                b'p' => self.pwr_events = true,
                b'o' => self.other_events = true,
                b'I' => self.intr_events = true,
                b'e' => {
                    self.errors = true;
                    let (_, minus) = flags(b, &mut p).ok_or_else(bad)?;
                    self.error_minus_flags |= minus;
                }
                b'd' => {
                    self.log = true;
                    flags(b, &mut p).ok_or_else(bad)?;
                }
                b'c' => {
                    self.branches = true;
                    self.calls = true;
                }
                b'r' => {
                    self.branches = true;
                    self.returns = true;
                }
                b'g' | b'G' => {
                    if c == b'G' {
                        self.add_callchain = true;
                    } else {
                        self.callchain = true;
                    }
                    self.callchain_sz = DEFAULT_CALLCHAIN_SZ;
                    skip_sep(&mut p);
                    if let Some(n) = number(&mut p) {
                        if n == 0 || n > u64::from(MAX_CALLCHAIN_SZ) {
                            return Err(bad());
                        }
                        self.callchain_sz = n as u32;
                    }
                }
                b'l' | b'L' => {
                    if c == b'L' {
                        self.add_last_branch = true;
                    } else {
                        self.last_branch = true;
                    }
                    self.last_branch_sz = DEFAULT_LAST_BRANCH_SZ;
                    skip_sep(&mut p);
                    if let Some(n) = number(&mut p) {
                        if n == 0 || n > u64::from(MAX_LAST_BRANCH_SZ) {
                            return Err(bad());
                        }
                        self.last_branch_sz = n as u32;
                    }
                }
                b's' => {
                    self.initial_skip = number(&mut p).ok_or_else(bad)?;
                }
                b'f' | b'm' | b't' | b'a' | b'M' => {}
                b'q' => self.quick += 1,
                b'A' => self.approx_ipc = true,
                b'Z' => self.timeless_decoding = true,
                b' ' | b',' => {}
                _ => return Err(bad()),
            }
        }
        if self.instructions {
            if !period_type_set {
                self.period_type = PeriodType::Nanosecs;
            }
            if !period_set {
                self.period = DEFAULT_PERIOD;
            }
        }
        Ok(())
    }

    /// `s` parsed on a fresh set of options.
    pub fn parse(s: &str) -> Result<Self, BadItrace> {
        let mut o = SynthOpts::default();
        o.parse_into(s)?;
        Ok(o)
    }
}

/// `+x-y` flag letters after `e` or `d` (perf's `get_flags`): (plus, minus).
fn flags(b: &[u8], p: &mut usize) -> Option<(u32, u32)> {
    let (mut plus, mut minus) = (0u32, 0u32);
    loop {
        match b.get(*p) {
            Some(b' ') => *p += 1,
            Some(b'+') => {
                *p += 1;
                plus |= flag(b, p)?;
            }
            Some(b'-') => {
                *p += 1;
                minus |= flag(b, p)?;
            }
            _ => return Some((plus, minus)),
        }
    }
}

fn flag(b: &[u8], p: &mut usize) -> Option<u32> {
    loop {
        match b.get(*p) {
            Some(&c @ b'a'..=b'z') => {
                *p += 1;
                return Some(1 << (c - b'a'));
            }
            Some(b' ') => *p += 1,
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods() {
        let o = SynthOpts::parse("i1i").unwrap();
        assert!(o.instructions);
        assert_eq!((o.period, o.period_type), (1, PeriodType::Instructions));
        let o = SynthOpts::parse("i10us").unwrap();
        assert_eq!((o.period, o.period_type), (10_000, PeriodType::Nanosecs));
        let o = SynthOpts::parse("i").unwrap();
        assert_eq!((o.period, o.period_type), (100_000, PeriodType::Nanosecs));
        let o = SynthOpts::parse("i100t").unwrap();
        assert_eq!((o.period, o.period_type), (100, PeriodType::Ticks));
    }

    #[test]
    fn letters() {
        let o = SynthOpts::parse("cre-o").unwrap();
        assert!(o.branches && o.calls && o.returns && o.errors);
        assert_eq!(o.error_minus_flags, ERR_FLG_OVERFLOW);
        assert_eq!(SynthOpts::parse("bs100").unwrap().initial_skip, 100);
        assert_eq!(SynthOpts::parse("qq").unwrap().quick, 2);
        assert_eq!(SynthOpts::parse("il8").unwrap().last_branch_sz, 8);
    }

    #[test]
    fn bad_strings() {
        for s in ["k", "i10x", "i10m", "s", "g0", "l2000", "e+"] {
            let e = SynthOpts::parse(s).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("Bad Instruction Tracing options '{s}'")
            );
        }
    }
}
