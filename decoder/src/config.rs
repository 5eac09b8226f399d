//! Decoder configuration: the CPU (for errata workarounds) and the timing parameters
//! that were in effect when the trace was recorded.

use core::fmt;
use core::str::FromStr;

/// A CPU identified by family/model/stepping, as `--cpu f/m[/s]` gives it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Cpu {
    /// Display family.
    pub family: u16,
    /// Display model.
    pub model: u8,
    /// Stepping.
    pub stepping: u8,
}

/// Why a `--cpu` argument is not a CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad cpu: expected family/model[/stepping]")]
pub struct ParseCpuError;

/// `strtol(s, &end, 0)`: leading blanks, an optional sign, then `0x` hex, `0` octal or
/// decimal digits. Returns the value and the rest, or `None` if no digits were read.
fn strtol(s: &str) -> Option<(i64, &str)> {
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (radix, digits) = if (t.starts_with("0x") || t.starts_with("0X"))
        && t[2..].starts_with(|c: char| c.is_ascii_hexdigit())
    {
        (16, &t[2..])
    } else if t.starts_with('0') {
        (8, t)
    } else {
        (10, t)
    };
    let len = digits
        .find(|c: char| !c.is_digit(radix))
        .unwrap_or(digits.len());
    if len == 0 {
        return None;
    }
    let v = i64::from_str_radix(&digits[..len], radix).ok()?;
    Some((if neg { -v } else { v }, &digits[len..]))
}

impl FromStr for Cpu {
    type Err = ParseCpuError;

    /// Parses `family/model[/stepping]` exactly as libipt's `pt_cpu_parse` does.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (family, rest) = strtol(s).ok_or(ParseCpuError)?;
        let rest = rest.strip_prefix('/').ok_or(ParseCpuError)?;
        let (model, rest) = strtol(rest).ok_or(ParseCpuError)?;
        let stepping = match rest {
            "" => 0,
            _ => {
                let rest = rest.strip_prefix('/').ok_or(ParseCpuError)?;
                // libipt reads the stepping without checking that digits were there.
                match strtol(rest) {
                    Some((v, "")) => v,
                    None if rest.trim_start().is_empty() => 0,
                    _ => return Err(ParseCpuError),
                }
            }
        };
        let in_range = |v: i64, max: i64| (0..=max).contains(&v);
        if !in_range(family, u16::MAX as i64) || !in_range(model, 0xff) || !in_range(stepping, 0xff)
        {
            return Err(ParseCpuError);
        }
        Ok(Cpu {
            family: family as u16,
            model: model as u8,
            stepping: stepping as u8,
        })
    }
}

impl fmt::Display for Cpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.family, self.model, self.stepping)
    }
}

/// Intel PT errata the decoders work around (names from Intel's specification updates).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Errata {
    /// BDM70: PSB+ before TIP.PGE may hold FUP and MODE.Exec.
    pub bdm70: bool,
    /// BDM64: wrong branch target right before a TSX abort.
    pub bdm64: bool,
    /// SKD007: an OVF may replace the rest of a multi-byte CYC.
    pub skd007: bool,
    /// SKD022: VM entry clearing TraceEn emits FUP before TIP.PGD.
    pub skd022: bool,
    /// SKD010: FUP missing after OVF.
    pub skd010: bool,
    /// SKL014: TIP.PGD without IP after a direct branch leaving the filter.
    pub skl014: bool,
    /// APL12: FUP after OVF while disabled.
    pub apl12: bool,
    /// APL11: TIP.PGD after OVF.
    pub apl11: bool,
    /// SKL168: CYC (and maybe MTC) dropped before PSB.
    pub skl168: bool,
    /// SKZ84: TSC offsetting/scaling in a guest corrupts TMA.
    pub skz84: bool,
}

/// The CPU is not in the errata table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown cpu")]
pub struct UnknownCpu;

impl Errata {
    /// The errata that apply to `cpu` (libipt's table, keyed by family/model).
    pub fn for_cpu(cpu: Cpu) -> Result<Self, UnknownCpu> {
        let mut e = Errata::default();
        match (cpu.family, cpu.model) {
            (0x6, 0x3d | 0x47 | 0x4f | 0x56) => {
                e.bdm70 = true;
                e.bdm64 = true;
            }
            (0x6, 0x4e | 0x5e | 0x8e | 0x9e | 0xa5 | 0xa6) => {
                e.bdm70 = true;
                e.skd007 = true;
                e.skd022 = true;
                e.skd010 = true;
                e.skl014 = true;
                e.skl168 = true;
            }
            (0x6, 0x55 | 0x6a | 0x6c) => {
                e.bdm70 = true;
                e.skl014 = true;
                e.skd022 = true;
                e.skz84 = true;
            }
            (0x6, 0x8f | 0xcf | 0xad | 0xae) | (0x13, 0x01) => {
                e.bdm70 = true;
                e.skd022 = true;
                e.skz84 = true;
            }
            (0x6, 0x66 | 0x7d | 0x7e | 0x8c | 0x8d | 0xa7 | 0xa8) => {
                e.bdm70 = true;
                e.skl014 = true;
                e.skd022 = true;
            }
            (
                0x6,
                0x97 | 0x9a | 0xba | 0xb7 | 0xbf | 0xc5 | 0xc6 | 0xb5 | 0xaa | 0xac | 0xbd | 0xcc
                | 0xd5,
            )
            | (0x12, 0x01 | 0x03) => {
                e.bdm70 = true;
                e.skd022 = true;
                e.apl11 = true;
            }
            (0x6, 0x5c | 0x5f) => {
                e.apl12 = true;
                e.apl11 = true;
            }
            (0x6, 0x7a | 0x86 | 0x96 | 0x9c | 0xb6 | 0xaf | 0xdd) => {
                e.apl11 = true;
            }
            _ => return Err(UnknownCpu),
        }
        Ok(e)
    }
}

/// Everything a decoder needs to know about how the trace was recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// The CPU the trace was recorded on, if known.
    pub cpu: Option<Cpu>,
    /// Errata workarounds to apply (usually `Errata::for_cpu`).
    pub errata: Errata,
    /// IA32_RTIT_CTL.MTCFreq (MTC period 2^n CTC ticks).
    pub mtc_freq: u8,
    /// MSR_PLATFORM_INFO bits 15:8, the nominal core:bus ratio; 0 if unknown.
    pub nom_freq: u8,
    /// CPUID 0x15 EAX: TSC/CTC ratio denominator; 0 if unknown.
    pub cpuid_0x15_eax: u32,
    /// CPUID 0x15 EBX: TSC/CTC ratio numerator; 0 if unknown.
    pub cpuid_0x15_ebx: u32,
}

impl Config {
    /// This configuration (e.g. a recording's) with what `given` sets explicitly
    /// winning: its CPU (with its errata) when it names one, and every non-zero
    /// frequency or CPUID 0x15 value.
    pub fn overridden_by(mut self, given: &Config) -> Config {
        if given.cpu.is_some() {
            self.cpu = given.cpu;
            self.errata = given.errata;
        }
        if given.mtc_freq != 0 {
            self.mtc_freq = given.mtc_freq;
        }
        if given.nom_freq != 0 {
            self.nom_freq = given.nom_freq;
        }
        if given.cpuid_0x15_eax != 0 {
            self.cpuid_0x15_eax = given.cpuid_0x15_eax;
        }
        if given.cpuid_0x15_ebx != 0 {
            self.cpuid_0x15_ebx = given.cpuid_0x15_ebx;
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_like_strtol() {
        assert_eq!(
            "6/158".parse::<Cpu>(),
            Ok(Cpu {
                family: 6,
                model: 158,
                stepping: 0
            })
        );
        assert_eq!(
            "0x6/0x9e/10".parse::<Cpu>(),
            Ok(Cpu {
                family: 6,
                model: 0x9e,
                stepping: 10
            })
        );
        assert!("6".parse::<Cpu>().is_err());
        // libipt's quirks: an empty stepping is 0, blanks may lead a number but not
        // trail it.
        assert_eq!("6/94/".parse::<Cpu>().map(|c| c.stepping), Ok(0));
        assert_eq!("6/ 94".parse::<Cpu>().map(|c| c.model), Ok(94));
        assert!("6 /94".parse::<Cpu>().is_err());
        assert!("-1/2".parse::<Cpu>().is_err());
        assert_eq!(
            "010/0x10".parse::<Cpu>().map(|c| (c.family, c.model)),
            Ok((8, 16))
        );
        assert!("6/256".parse::<Cpu>().is_err());
        assert!("6/1/2/3".parse::<Cpu>().is_err());
    }

    #[test]
    fn errata_table() {
        let skl = Errata::for_cpu("6/94".parse().unwrap()).unwrap();
        assert!(skl.skd010 && skl.skl014 && skl.skl168 && skl.skd007 && !skl.skz84);
        let bdw = Errata::for_cpu("6/61".parse().unwrap()).unwrap();
        assert!(bdw.bdm64 && bdw.bdm70 && !bdw.skd022);
        assert_eq!(Errata::for_cpu("0/0".parse().unwrap()), Err(UnknownCpu));
    }
}
