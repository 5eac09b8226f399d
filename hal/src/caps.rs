//! Probing: CPUID leaves 0x14 (sub-leaves 0 and 1) and 0x15 as typed [`Capabilities`].
//!
//! The CPUID values come from a [`CpuidDump`]: either this machine (read with
//! the `cpuid` instruction through raw-cpuid) or a recorded text file, so the
//! capabilities of any CPU can be loaded and tested. Decoding of the leaves
//! goes through raw-cpuid's typed views, with the bits raw-cpuid does not name
//! (EBX\[8:6\] of leaf 0x14) taken from the registers directly.

use std::collections::BTreeMap;
use std::fmt;

use raw_cpuid::{CpuId, CpuIdResult};

/// CPUID leaf of the Intel PT enumeration.
pub const LEAF_PT: u32 = 0x14;
/// CPUID leaf of the TSC / core crystal clock ratio.
pub const LEAF_TSC: u32 = 0x15;
/// First hypervisor CPUID leaf (signature in EBX, ECX, EDX).
pub const LEAF_HYPERVISOR: u32 = 0x4000_0000;

/// The four output registers of one CPUID leaf/sub-leaf.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CpuidRegs {
    /// EAX
    pub eax: u32,
    /// EBX
    pub ebx: u32,
    /// ECX
    pub ecx: u32,
    /// EDX
    pub edx: u32,
}

impl CpuidRegs {
    /// Registers from `[eax, ebx, ecx, edx]`.
    pub const fn new(eax: u32, ebx: u32, ecx: u32, edx: u32) -> Self {
        Self { eax, ebx, ecx, edx }
    }
}

impl From<CpuIdResult> for CpuidRegs {
    fn from(r: CpuIdResult) -> Self {
        Self::new(r.eax, r.ebx, r.ecx, r.edx)
    }
}

impl From<CpuidRegs> for CpuIdResult {
    fn from(r: CpuidRegs) -> Self {
        CpuIdResult {
            eax: r.eax,
            ebx: r.ebx,
            ecx: r.ecx,
            edx: r.edx,
        }
    }
}

/// Why a CPUID dump text could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CpuidParseError {
    /// A line is not `LEAF SUBLEAF: eax=.. ebx=.. ecx=.. edx=..`.
    #[error("line {line}: expected `0xLEAF 0xSUB: eax=0x.. ebx=0x.. ecx=0x.. edx=0x..`")]
    Syntax {
        /// 1-based line number.
        line: usize,
    },
    /// A number does not parse as 32-bit hex.
    #[error("line {line}: bad hex number `{text}`")]
    BadNumber {
        /// 1-based line number.
        line: usize,
        /// The offending token.
        text: String,
    },
    /// The same leaf/sub-leaf appears twice.
    #[error("line {line}: leaf {leaf:#x} sub-leaf {subleaf:#x} appears twice")]
    Duplicate {
        /// 1-based line number.
        line: usize,
        /// Leaf.
        leaf: u32,
        /// Sub-leaf.
        subleaf: u32,
    },
}

/// Recorded CPUID values: a map from (leaf, sub-leaf) to registers.
///
/// Text form (also what `cpuid -r -1` prints, so its output loads as is):
///
/// ```text
/// # comment
/// 0x00000014 0x00: eax=0x00000001 ebx=0x0000000f ecx=0x00000007 edx=0x00000000
/// ```
///
/// Leaves that are absent read as zero, as the CPU does for unsupported
/// leaves below its maximum.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuidDump {
    entries: BTreeMap<(u32, u32), CpuidRegs>,
}

/// The leaves (and sub-leaves) the probe reads.
const PROBED: &[(u32, u32)] = &[
    (0, 0),
    (1, 0),
    (7, 0),
    (LEAF_PT, 0),
    (LEAF_PT, 1),
    (LEAF_TSC, 0),
    (LEAF_HYPERVISOR, 0),
];

impl CpuidDump {
    /// An empty dump (every leaf reads as zero).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets one leaf/sub-leaf.
    pub fn insert(&mut self, leaf: u32, subleaf: u32, regs: CpuidRegs) {
        self.entries.insert((leaf, subleaf), regs);
    }

    /// The recorded registers of one leaf/sub-leaf, if present.
    pub fn get(&self, leaf: u32, subleaf: u32) -> Option<CpuidRegs> {
        self.entries.get(&(leaf, subleaf)).copied()
    }

    /// Reads the leaves the probe needs from this CPU.
    ///
    /// Returns an empty dump on non-x86 targets.
    pub fn from_host() -> Self {
        let mut dump = Self::new();
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        {
            use raw_cpuid::{CpuIdReader, CpuIdReaderNative};
            let native = CpuIdReaderNative;
            let max_basic = native.cpuid2(0, 0).eax;
            let hv_present = native.cpuid2(1, 0).ecx & (1 << 31) != 0;
            for &(leaf, sub) in PROBED {
                let basic_ok = leaf < LEAF_HYPERVISOR && leaf <= max_basic;
                let hv_ok = leaf == LEAF_HYPERVISOR && hv_present;
                if basic_ok || hv_ok {
                    dump.insert(leaf, sub, native.cpuid2(leaf, sub).into());
                }
            }
        }
        dump
    }

    /// Parses the text form. Blank lines, lines starting with `#` and
    /// lines without `eax=` (such as `CPU:` headers) are skipped.
    pub fn parse(text: &str) -> Result<Self, CpuidParseError> {
        let mut dump = Self::new();
        for (i, raw) in text.lines().enumerate() {
            let line_no = i + 1;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') || !line.contains("eax=") {
                continue;
            }
            let (head, regs) = line
                .split_once(':')
                .ok_or(CpuidParseError::Syntax { line: line_no })?;
            let mut head_it = head.split_whitespace();
            let leaf = parse_hex(head_it.next(), line_no)?;
            let sub = parse_hex(head_it.next(), line_no)?;
            if head_it.next().is_some() {
                return Err(CpuidParseError::Syntax { line: line_no });
            }
            let mut vals = [None; 4];
            for tok in regs.split_whitespace() {
                let (name, value) = tok
                    .split_once('=')
                    .ok_or(CpuidParseError::Syntax { line: line_no })?;
                let idx = match name {
                    "eax" => 0,
                    "ebx" => 1,
                    "ecx" => 2,
                    "edx" => 3,
                    _ => return Err(CpuidParseError::Syntax { line: line_no }),
                };
                vals[idx] = Some(parse_hex(Some(value), line_no)?);
            }
            let [Some(eax), Some(ebx), Some(ecx), Some(edx)] = vals else {
                return Err(CpuidParseError::Syntax { line: line_no });
            };
            if dump.entries.contains_key(&(leaf, sub)) {
                return Err(CpuidParseError::Duplicate {
                    line: line_no,
                    leaf,
                    subleaf: sub,
                });
            }
            dump.insert(leaf, sub, CpuidRegs::new(eax, ebx, ecx, edx));
        }
        Ok(dump)
    }

    /// The text form, one line per entry, sorted by leaf.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for (&(leaf, sub), r) in &self.entries {
            out.push_str(&format!(
                "0x{leaf:08x} 0x{sub:02x}: eax=0x{:08x} ebx=0x{:08x} ecx=0x{:08x} edx=0x{:08x}\n",
                r.eax, r.ebx, r.ecx, r.edx
            ));
        }
        out
    }

    /// A raw-cpuid reader over this dump (absent leaves read as zero).
    fn reader(&self) -> impl Fn(u32, u32) -> CpuIdResult + Clone {
        let entries = self.entries.clone();
        move |leaf, sub| {
            entries
                .get(&(leaf, sub))
                .copied()
                .unwrap_or_default()
                .into()
        }
    }
}

fn parse_hex(tok: Option<&str>, line: usize) -> Result<u32, CpuidParseError> {
    let tok = tok.ok_or(CpuidParseError::Syntax { line })?;
    let digits = tok
        .strip_prefix("0x")
        .or_else(|| tok.strip_prefix("0X"))
        .unwrap_or(tok);
    u32::from_str_radix(digits, 16).map_err(|_| CpuidParseError::BadNumber {
        line,
        text: tok.to_string(),
    })
}

/// CPU vendor from CPUID leaf 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Vendor {
    /// "GenuineIntel"
    Intel,
    /// "AuthenticAMD" or "HygonGenuine"
    Amd,
    /// Anything else (the 12-character string), or empty when leaf 0 is absent.
    Other(String),
}

impl fmt::Display for Vendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Vendor::Intel => f.write_str("GenuineIntel"),
            Vendor::Amd => f.write_str("AMD"),
            Vendor::Other(s) if s.is_empty() => f.write_str("unknown"),
            Vendor::Other(s) => f.write_str(s),
        }
    }
}

/// Who the CPU is and whether CPUID announces Intel PT at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuIdentity {
    /// Vendor string of leaf 0.
    pub vendor: Vendor,
    /// Display family (base + extended).
    pub family: u16,
    /// Display model (base + extended).
    pub model: u8,
    /// Stepping.
    pub stepping: u8,
    /// Highest basic leaf (leaf 0 EAX).
    pub max_basic_leaf: u32,
    /// CPUID.1:ECX\[31\], set when running under a hypervisor.
    pub under_hypervisor: bool,
    /// Hypervisor signature of leaf 0x4000_0000 (e.g. "KVMKVMKVM").
    pub hypervisor: Option<String>,
    /// CPUID.(EAX=07H,ECX=0):EBX\[25\]: Intel PT supported.
    pub pt_supported: bool,
}

/// Intel PT capabilities, one field per CPUID 14H / 15H bit or field.
///
/// Field names follow the SDM (and the Linux `caps/` names in the docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// 14H.0 EAX: highest sub-leaf (`max_subleaf`).
    pub max_subleaf: u32,
    /// 14H.0 EBX\[0\]: CR3 filtering (`cr3_filtering`).
    pub cr3_filtering: bool,
    /// 14H.0 EBX\[1\]: configurable PSB and cycle-accurate mode (`psb_cyc`).
    pub psb_cyc: bool,
    /// 14H.0 EBX\[2\]: IP filtering, TraceStop, MSRs kept across warm reset (`ip_filtering`).
    pub ip_filtering: bool,
    /// 14H.0 EBX\[3\]: MTC and COFI suppression, i.e. BranchEn=0 allowed (`mtc`).
    pub mtc: bool,
    /// 14H.0 EBX\[4\]: PTWRITE (`ptwrite`).
    pub ptwrite: bool,
    /// 14H.0 EBX\[5\]: power event trace (`power_event_trace`).
    pub power_event_trace: bool,
    /// 14H.0 EBX\[6\]: PSB and PMI preservation (InjectPsbPmiOnEnable).
    pub psb_pmi_preservation: bool,
    /// 14H.0 EBX\[7\]: event trace (`event_trace`).
    pub event_trace: bool,
    /// 14H.0 EBX\[8\]: TNT disable (`tnt_disable`).
    pub tnt_disable: bool,
    /// 14H.0 ECX\[0\]: ToPA output (`topa_output`).
    pub topa_output: bool,
    /// 14H.0 ECX\[1\]: ToPA tables with many output entries (`topa_multiple_entries`).
    pub topa_multiple_entries: bool,
    /// 14H.0 ECX\[2\]: single-range output (`single_range_output`).
    pub single_range_output: bool,
    /// 14H.0 ECX\[3\]: output to the trace transport subsystem (`output_subsys`).
    pub trace_transport: bool,
    /// 14H.0 ECX\[31\]: IP payloads are LIPs, including the CS base (`payloads_lip`).
    pub lip: bool,
    /// 14H.1 EAX\[2:0\]: number of ADDRn range pairs (`num_address_ranges`).
    pub num_address_ranges: u8,
    /// 14H.1 EAX\[31:16\]: bitmap of supported MTCFreq encodings (`mtc_periods`).
    pub mtc_periods: u16,
    /// 14H.1 EBX\[15:0\]: bitmap of supported CycThresh encodings (`cycle_thresholds`).
    pub cycle_thresholds: u16,
    /// 14H.1 EBX\[31:16\]: bitmap of supported PSBFreq encodings (`psb_periods`).
    pub psb_periods: u16,
    /// 15H: TSC / core crystal clock ratio, when enumerated.
    pub tsc_ratio: Option<TscRatio>,
}

/// CPUID leaf 15H: TSC frequency = crystal × numerator / denominator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TscRatio {
    /// EBX: numerator.
    pub numerator: u32,
    /// EAX: denominator.
    pub denominator: u32,
    /// ECX: nominal core crystal clock in Hz (None when not enumerated).
    pub crystal_hz: Option<u32>,
}

impl Capabilities {
    /// Builds the capabilities from raw register values: leaf 14H sub-leaf
    /// 0, sub-leaf 1 (None when EAX of sub-leaf 0 is 0), and leaf 15H.
    pub fn from_registers(
        sub0: CpuidRegs,
        sub1: Option<CpuidRegs>,
        leaf15: Option<CpuidRegs>,
    ) -> Self {
        let mut dump = CpuidDump::new();
        dump.insert(0, 0, CpuidRegs::new(LEAF_TSC, 0, 0, 0));
        dump.insert(LEAF_PT, 0, sub0);
        if let Some(s1) = sub1 {
            dump.insert(LEAF_PT, 1, s1);
        }
        if let Some(l15) = leaf15 {
            dump.insert(LEAF_TSC, 0, l15);
        }
        Self::decode(&dump)
    }

    /// Decodes leaves 14H and 15H of a dump (zero when absent).
    fn decode(dump: &CpuidDump) -> Self {
        let cpuid = CpuId::with_cpuid_reader(dump.reader());
        let mut caps = Capabilities::default();
        let sub0 = dump.get(LEAF_PT, 0).unwrap_or_default();
        caps.max_subleaf = sub0.eax;
        if let Some(pt) = cpuid.get_processor_trace_info() {
            caps.cr3_filtering = pt.has_rtit_cr3_match();
            caps.psb_cyc = pt.has_configurable_psb_and_cycle_accurate_mode();
            caps.ip_filtering = pt.has_ip_tracestop_filtering();
            caps.mtc = pt.has_mtc_timing_packet_coefi_suppression();
            caps.ptwrite = pt.has_ptwrite();
            caps.power_event_trace = pt.has_power_event_trace();
            caps.topa_output = pt.has_topa();
            caps.topa_multiple_entries = pt.has_topa_maximum_entries();
            caps.single_range_output = pt.has_single_range_output_scheme();
            caps.trace_transport = pt.has_trace_transport_subsystem();
            caps.lip = pt.has_lip_with_cs_base();
            caps.num_address_ranges = pt.configurable_address_ranges();
            caps.mtc_periods = pt.supported_mtc_period_encodings();
            caps.cycle_thresholds = pt.supported_cycle_threshold_value_encodings();
            caps.psb_periods = pt.supported_psb_frequency_encodings();
        }
        // raw-cpuid names EBX[5:0] only; the newer bits come from the register.
        caps.psb_pmi_preservation = sub0.ebx & (1 << 6) != 0;
        caps.event_trace = sub0.ebx & (1 << 7) != 0;
        caps.tnt_disable = sub0.ebx & (1 << 8) != 0;
        if let Some(tsc) = cpuid.get_tsc_info() {
            if tsc.numerator() != 0 && tsc.denominator() != 0 {
                caps.tsc_ratio = Some(TscRatio {
                    numerator: tsc.numerator(),
                    denominator: tsc.denominator(),
                    crystal_hz: (tsc.nominal_frequency() != 0).then(|| tsc.nominal_frequency()),
                });
            }
        }
        caps
    }

    /// Whether MTCFreq encoding `n` is allowed.
    pub fn mtc_period_ok(&self, n: u8) -> bool {
        n < 16 && self.mtc_periods & (1 << n) != 0
    }

    /// Whether CycThresh encoding `n` is allowed.
    pub fn cyc_thresh_ok(&self, n: u8) -> bool {
        n < 16 && self.cycle_thresholds & (1 << n) != 0
    }

    /// Whether PSBFreq encoding `n` is allowed.
    pub fn psb_period_ok(&self, n: u8) -> bool {
        n < 16 && self.psb_periods & (1 << n) != 0
    }

    /// The capability table as `(name, value)` rows, names as in Linux `caps/`.
    pub fn table(&self) -> Vec<(&'static str, String)> {
        let b = |v: bool| if v { "yes" } else { "no" }.to_string();
        let mut rows = vec![
            ("max_subleaf", self.max_subleaf.to_string()),
            ("cr3_filtering", b(self.cr3_filtering)),
            ("psb_cyc", b(self.psb_cyc)),
            ("ip_filtering", b(self.ip_filtering)),
            ("mtc", b(self.mtc)),
            ("ptwrite", b(self.ptwrite)),
            ("power_event_trace", b(self.power_event_trace)),
            ("psb_pmi_preservation", b(self.psb_pmi_preservation)),
            ("event_trace", b(self.event_trace)),
            ("tnt_disable", b(self.tnt_disable)),
            ("topa_output", b(self.topa_output)),
            ("topa_multiple_entries", b(self.topa_multiple_entries)),
            ("single_range_output", b(self.single_range_output)),
            ("output_subsys", b(self.trace_transport)),
            ("payloads_lip", b(self.lip)),
            ("num_address_ranges", self.num_address_ranges.to_string()),
            ("mtc_periods", bitmap_list(self.mtc_periods)),
            ("cycle_thresholds", bitmap_list(self.cycle_thresholds)),
            ("psb_periods", bitmap_list(self.psb_periods)),
        ];
        rows.push((
            "tsc_art_ratio",
            match self.tsc_ratio {
                Some(r) => match r.crystal_hz {
                    Some(hz) => format!("{}:{} (crystal {} Hz)", r.numerator, r.denominator, hz),
                    None => format!("{}:{}", r.numerator, r.denominator),
                },
                None => "not enumerated".to_string(),
            },
        ));
        rows
    }
}

/// `0x249 -> "0x0249 {0,3,6,9}"`.
fn bitmap_list(bits: u16) -> String {
    let set: Vec<String> = (0..16)
        .filter(|i| bits & (1 << i) != 0)
        .map(|i| i.to_string())
        .collect();
    format!("{bits:#06x} {{{}}}", set.join(","))
}

/// What the CPUID side says: identity plus PT capabilities (None without PT).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuidProbe {
    /// Vendor, family/model and the PT feature bit.
    pub identity: CpuIdentity,
    /// Leaf 14H capabilities, present when CPUID.07H:EBX\[25\] is set and
    /// the maximum basic leaf reaches 14H.
    pub caps: Option<Capabilities>,
}

impl CpuidProbe {
    /// Probes this machine.
    pub fn host() -> Self {
        Self::from_dump(&CpuidDump::from_host())
    }

    /// Probes a recorded dump.
    pub fn from_dump(dump: &CpuidDump) -> Self {
        let cpuid = CpuId::with_cpuid_reader(dump.reader());
        let leaf0 = dump.get(0, 0).unwrap_or_default();
        let vendor = match cpuid.get_vendor_info() {
            Some(v) => match v.as_str() {
                "GenuineIntel" => Vendor::Intel,
                "AuthenticAMD" | "HygonGenuine" => Vendor::Amd,
                other => Vendor::Other(other.trim_end_matches('\0').to_string()),
            },
            None => Vendor::Other(String::new()),
        };
        // Family/model from the raw EAX: raw-cpuid's sum can overflow a u8.
        let leaf1 = dump.get(1, 0).unwrap_or_default();
        let base_family = ((leaf1.eax >> 8) & 0xf) as u16;
        let ext_family = ((leaf1.eax >> 20) & 0xff) as u16;
        let base_model = ((leaf1.eax >> 4) & 0xf) as u8;
        let ext_model = ((leaf1.eax >> 16) & 0xf) as u8;
        let family = if base_family == 0xf {
            base_family + ext_family
        } else {
            base_family
        };
        let model = if base_family == 0x6 || base_family == 0xf {
            (ext_model << 4) | base_model
        } else {
            base_model
        };
        let stepping = (leaf1.eax & 0xf) as u8;
        let under_hypervisor = cpuid.get_feature_info().is_some_and(|f| f.has_hypervisor());
        let hypervisor = dump.get(LEAF_HYPERVISOR, 0).and_then(|r| {
            let bytes: Vec<u8> = [r.ebx, r.ecx, r.edx]
                .iter()
                .flat_map(|w| w.to_le_bytes())
                .collect();
            let s: String = bytes
                .iter()
                .take_while(|&&c| c != 0)
                .map(|&c| {
                    if c.is_ascii_graphic() || c == b' ' {
                        c as char
                    } else {
                        '?'
                    }
                })
                .collect();
            let s = s.trim().to_string();
            (!s.is_empty()).then_some(s)
        });
        let pt_supported = cpuid
            .get_extended_feature_info()
            .is_some_and(|e| e.has_processor_trace());
        let identity = CpuIdentity {
            vendor,
            family,
            model,
            stepping,
            max_basic_leaf: leaf0.eax,
            under_hypervisor,
            hypervisor,
            pt_supported,
        };
        let caps = (pt_supported && leaf0.eax >= LEAF_PT).then(|| Capabilities::decode(dump));
        CpuidProbe { identity, caps }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_round_trip() {
        let text = "CPU:\n   0x00000014 0x00: eax=0x00000001 ebx=0x0000000f ecx=0x00000007 edx=0x00000000\n# c\n0x00000014 0x01: eax=0x02490002 ebx=0x003f3fff ecx=0x00000000 edx=0x00000000\n";
        let d = CpuidDump::parse(text).unwrap();
        assert_eq!(
            d.get(0x14, 1),
            Some(CpuidRegs::new(0x0249_0002, 0x003f_3fff, 0, 0))
        );
        assert_eq!(CpuidDump::parse(&d.to_text()).unwrap(), d);
    }

    #[test]
    fn parse_errors_carry_lines() {
        assert_eq!(
            CpuidDump::parse("\n0x14 0x0: eax=0x1 ebx=0x2 ecx=0x3\n"),
            Err(CpuidParseError::Syntax { line: 2 })
        );
        assert!(matches!(
            CpuidDump::parse("0x14 0x0: eax=0xZZ ebx=0 ecx=0 edx=0"),
            Err(CpuidParseError::BadNumber { line: 1, .. })
        ));
        assert!(matches!(
            CpuidDump::parse("0x14 0: eax=1 ebx=0 ecx=0 edx=0\n0x14 0: eax=1 ebx=0 ecx=0 edx=0"),
            Err(CpuidParseError::Duplicate {
                line: 2,
                leaf: 0x14,
                subleaf: 0
            })
        ));
    }

    #[test]
    fn from_registers_decodes_every_bit() {
        let caps = Capabilities::from_registers(
            CpuidRegs::new(1, 0x1ff, 0x8000_000f, 0),
            Some(CpuidRegs::new(0x0249_0003, 0x003f_1fff, 0, 0)),
            Some(CpuidRegs::new(2, 0x8c, 38_400_000, 0)),
        );
        assert!(caps.cr3_filtering && caps.psb_cyc && caps.ip_filtering && caps.mtc);
        assert!(caps.ptwrite && caps.power_event_trace && caps.psb_pmi_preservation);
        assert!(caps.event_trace && caps.tnt_disable);
        assert!(caps.topa_output && caps.topa_multiple_entries && caps.single_range_output);
        assert!(caps.trace_transport && caps.lip);
        assert_eq!(caps.num_address_ranges, 3);
        assert_eq!(caps.mtc_periods, 0x0249);
        assert_eq!(caps.cycle_thresholds, 0x1fff);
        assert_eq!(caps.psb_periods, 0x003f);
        assert!(caps.mtc_period_ok(3) && !caps.mtc_period_ok(1) && !caps.mtc_period_ok(16));
        assert_eq!(
            caps.tsc_ratio,
            Some(TscRatio {
                numerator: 0x8c,
                denominator: 2,
                crystal_hz: Some(38_400_000)
            })
        );
        let none = Capabilities::from_registers(CpuidRegs::default(), None, None);
        assert_eq!(none, Capabilities::default());
    }
}
