//! The kernel side of probing: the `intel_pt` PMU under
//! `/sys/bus/event_source/devices`, `perf_event_paranoid` and the mlock limit.
//!
//! Every path is taken relative to a root directory, so tests run on fixture
//! trees (`root/sys/bus/...`, `root/proc/sys/kernel/...`); the live root is `/`.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::caps::{Capabilities, TscRatio};

/// Directory of the PMU, relative to the root.
pub const PMU_DIR: &str = "sys/bus/event_source/devices/intel_pt";
/// `kernel.perf_event_paranoid`, relative to the root.
pub const PARANOID_FILE: &str = "proc/sys/kernel/perf_event_paranoid";
/// `kernel.perf_event_mlock_kb`, relative to the root.
pub const MLOCK_KB_FILE: &str = "proc/sys/kernel/perf_event_mlock_kb";

/// Errors while reading the sysfs tree.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SysfsError {
    /// The PMU directory does not exist: no `intel_pt` PMU.
    #[error("no intel_pt PMU at {0}")]
    NoPmu(PathBuf),
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A file does not hold what it should.
    #[error("{path}: cannot parse `{text}`: expected {expected}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Its (trimmed) content.
        text: String,
        /// What was expected.
        expected: &'static str,
    },
}

/// Which `perf_event_attr` word a format term lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigWord {
    /// `attr.config`
    Config,
    /// `attr.config1`
    Config1,
    /// `attr.config2`
    Config2,
    /// `attr.config3`
    Config3,
}

/// One `format/<name>` term: the bits of a config word that hold its value.
///
/// The value's bits fill the listed ranges from the lowest range up, as the
/// kernel's `perf_pmu__format_bits` does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatTerm {
    /// The config word.
    pub word: ConfigWord,
    /// Inclusive bit ranges `(lo, hi)`, in the order listed.
    pub ranges: Vec<(u8, u8)>,
}

impl FormatTerm {
    /// Parses `config:0-3,8` (kernel `format/` syntax).
    pub fn parse(text: &str) -> Option<Self> {
        let (word, bits) = text.trim().split_once(':')?;
        let word = match word {
            "config" => ConfigWord::Config,
            "config1" => ConfigWord::Config1,
            "config2" => ConfigWord::Config2,
            "config3" => ConfigWord::Config3,
            _ => return None,
        };
        let mut ranges = Vec::new();
        for part in bits.split(',') {
            let (lo, hi) = match part.split_once('-') {
                Some((lo, hi)) => (lo.trim().parse::<u8>().ok()?, hi.trim().parse::<u8>().ok()?),
                None => {
                    let b = part.trim().parse::<u8>().ok()?;
                    (b, b)
                }
            };
            if lo > hi || hi > 63 {
                return None;
            }
            ranges.push((lo, hi));
        }
        (!ranges.is_empty()).then_some(FormatTerm { word, ranges })
    }

    /// Total width in bits.
    pub fn width(&self) -> u32 {
        self.ranges
            .iter()
            .map(|&(lo, hi)| u32::from(hi - lo) + 1)
            .sum()
    }

    /// Places `value` into the term's bits; None when it does not fit.
    pub fn encode(&self, value: u64) -> Option<u64> {
        if self.width() < 64 && value >> self.width() != 0 {
            return None;
        }
        let mut out = 0u64;
        let mut v = value;
        for &(lo, hi) in &self.ranges {
            let w = u32::from(hi - lo) + 1;
            let mask = if w == 64 { u64::MAX } else { (1u64 << w) - 1 };
            out |= (v & mask) << lo;
            v = if w == 64 { 0 } else { v >> w };
        }
        Some(out)
    }

    /// Extracts the term's value from a config word.
    pub fn decode(&self, word: u64) -> u64 {
        let mut out = 0u64;
        let mut shift = 0u32;
        for &(lo, hi) in &self.ranges {
            let w = u32::from(hi - lo) + 1;
            let mask = if w == 64 { u64::MAX } else { (1u64 << w) - 1 };
            out |= ((word >> lo) & mask) << shift;
            shift += w;
        }
        out
    }
}

/// What the `intel_pt` PMU directory holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PmuInfo {
    /// `type`: the dynamic PMU type for `perf_event_attr.type`.
    pub pmu_type: u32,
    /// `format/*`: the config terms the driver accepts.
    pub format: BTreeMap<String, FormatTerm>,
    /// `caps/*`: raw values (hex in the files).
    pub caps: BTreeMap<String, u32>,
    /// `nr_addr_filters`, when present.
    pub nr_addr_filters: Option<u32>,
    /// `max_nonturbo_ratio`, when present.
    pub max_nonturbo_ratio: Option<u32>,
    /// `tsc_art_ratio` as (numerator, denominator), when present.
    pub tsc_art_ratio: Option<(u32, u32)>,
}

impl PmuInfo {
    /// Reads the PMU under `root` (`root` = `/` for the live system).
    pub fn read(root: &Path) -> Result<Self, SysfsError> {
        let dir = root.join(PMU_DIR);
        if !dir.is_dir() {
            return Err(SysfsError::NoPmu(dir));
        }
        let type_path = dir.join("type");
        let pmu_type = parse_file(&type_path, "a decimal PMU type", |t| t.parse::<u32>().ok())?;
        let mut format = BTreeMap::new();
        for (name, path) in list_dir(&dir.join("format"))? {
            let term = parse_file(&path, "`config:<bits>`", FormatTerm::parse)?;
            format.insert(name, term);
        }
        let mut caps = BTreeMap::new();
        for (name, path) in list_dir(&dir.join("caps"))? {
            let v = parse_file(&path, "a hex value", parse_hex_u32)?;
            caps.insert(name, v);
        }
        let nr_addr_filters = optional(&dir.join("nr_addr_filters"), "a decimal count", |t| {
            t.parse().ok()
        })?;
        let max_nonturbo_ratio =
            optional(&dir.join("max_nonturbo_ratio"), "a decimal ratio", |t| {
                t.parse().ok()
            })?;
        let tsc_art_ratio = optional(&dir.join("tsc_art_ratio"), "`numerator:denominator`", |t| {
            let (n, d) = t.split_once(':')?;
            Some((n.trim().parse().ok()?, d.trim().parse().ok()?))
        })?;
        Ok(PmuInfo {
            pmu_type,
            format,
            caps,
            nr_addr_filters,
            max_nonturbo_ratio,
            tsc_art_ratio,
        })
    }

    /// A `caps/<name>` value, 0 when absent (older kernels lack newer caps).
    pub fn cap(&self, name: &str) -> u32 {
        self.caps.get(name).copied().unwrap_or(0)
    }

    /// The capabilities as the kernel exports them in `caps/`.
    ///
    /// `psb_pmi_preservation` is not exported and reads false.
    pub fn capabilities(&self) -> Capabilities {
        let b = |n: &str| self.cap(n) != 0;
        Capabilities {
            max_subleaf: self.cap("max_subleaf"),
            cr3_filtering: b("cr3_filtering"),
            psb_cyc: b("psb_cyc"),
            ip_filtering: b("ip_filtering"),
            mtc: b("mtc"),
            ptwrite: b("ptwrite"),
            power_event_trace: b("power_event_trace"),
            psb_pmi_preservation: false,
            event_trace: b("event_trace"),
            tnt_disable: b("tnt_disable"),
            topa_output: b("topa_output"),
            topa_multiple_entries: b("topa_multiple_entries"),
            single_range_output: b("single_range_output"),
            trace_transport: b("output_subsys"),
            lip: b("payloads_lip"),
            num_address_ranges: self.cap("num_address_ranges").min(7) as u8,
            mtc_periods: self.cap("mtc_periods") as u16,
            cycle_thresholds: self.cap("cycle_thresholds") as u16,
            psb_periods: self.cap("psb_periods") as u16,
            tsc_ratio: self
                .tsc_art_ratio
                .filter(|&(n, d)| n != 0 && d != 0)
                .map(|(n, d)| TscRatio {
                    numerator: n,
                    denominator: d,
                    crystal_hz: None,
                }),
        }
    }
}

/// Kernel settings that gate perf use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelSettings {
    /// `kernel.perf_event_paranoid` (None when the file is absent).
    pub paranoid: Option<i32>,
    /// `kernel.perf_event_mlock_kb` (None when absent).
    pub mlock_kb: Option<u64>,
}

impl KernelSettings {
    /// Reads the settings under `root`.
    pub fn read(root: &Path) -> Result<Self, SysfsError> {
        Ok(KernelSettings {
            paranoid: optional(&root.join(PARANOID_FILE), "a decimal level", |t| {
                t.parse().ok()
            })?,
            mlock_kb: optional(&root.join(MLOCK_KB_FILE), "a decimal size in KiB", |t| {
                t.parse().ok()
            })?,
        })
    }
}

/// The kernel side of the probe.
#[derive(Debug)]
pub struct KernelProbe {
    /// The PMU, or why it could not be read.
    pub pmu: Result<PmuInfo, SysfsError>,
    /// `perf_event_paranoid` and `perf_event_mlock_kb`.
    pub settings: Result<KernelSettings, SysfsError>,
}

impl KernelProbe {
    /// Probes the tree under `root`.
    pub fn read(root: &Path) -> Self {
        KernelProbe {
            pmu: PmuInfo::read(root),
            settings: KernelSettings::read(root),
        }
    }
}

fn parse_hex_u32(t: &str) -> Option<u32> {
    let d = t.strip_prefix("0x").unwrap_or(t);
    u32::from_str_radix(d, 16).ok()
}

fn read_text(path: &Path) -> Result<String, SysfsError> {
    fs::read_to_string(path).map_err(|source| SysfsError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn parse_file<T>(
    path: &Path,
    expected: &'static str,
    f: impl Fn(&str) -> Option<T>,
) -> Result<T, SysfsError> {
    let text = read_text(path)?;
    let t = text.trim();
    f(t).ok_or_else(|| SysfsError::Parse {
        path: path.to_path_buf(),
        text: t.to_string(),
        expected,
    })
}

fn optional<T>(
    path: &Path,
    expected: &'static str,
    f: impl Fn(&str) -> Option<T>,
) -> Result<Option<T>, SysfsError> {
    if path.exists() {
        parse_file(path, expected, f).map(Some)
    } else {
        Ok(None)
    }
}

/// Regular files of a directory as (name, path), sorted; empty when absent.
fn list_dir(dir: &Path) -> Result<Vec<(String, PathBuf)>, SysfsError> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(SysfsError::Io {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut out = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|source| SysfsError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = ent.path();
        if path.is_file() {
            if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
                out.push((name.to_string(), path.clone()));
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_terms() {
        let t = FormatTerm::parse("config:14-17").unwrap();
        assert_eq!(t.width(), 4);
        assert_eq!(t.encode(3), Some(3 << 14));
        assert_eq!(t.encode(16), None);
        assert_eq!(t.decode(0xf << 14), 15);
        let split = FormatTerm::parse("config1:0-1,8").unwrap();
        assert_eq!(split.word, ConfigWord::Config1);
        assert_eq!(split.encode(0b111), Some(0b11 | 1 << 8));
        assert_eq!(split.decode(0b10 | 1 << 8), 0b110);
        assert_eq!(FormatTerm::parse("config:0").unwrap().encode(1), Some(1));
        for bad in [
            "config",
            "cfg:1",
            "config:3-1",
            "config:64",
            "config:",
            "config:a",
        ] {
            assert_eq!(FormatTerm::parse(bad), None, "{bad}");
        }
    }
}
