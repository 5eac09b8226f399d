//! Intel PT in perf.data: the typed private part of AUXTRACE_INFO, the `intel_pt` PMU's
//! config bits, and the attrs perf uses for an `intel_pt//` recording.

use crate::attr::{attr_type, read_format, sw_config, AttrFlags, EventAttr, SampleType, ATTR_SIZE};
use crate::bytes::{Cursor, Put};
use crate::error::{Error, ErrorKind, Result};

/// The private u64 words of an intel_pt AUXTRACE_INFO. The base words are always there;
/// the later groups are present when the record is long enough, as perf detects them.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct IntelPtInfo {
    /// The intel_pt PMU's type: an event whose attr.type equals it is the trace event.
    pub pmu_type: u64,
    /// perf time from TSC: time_shift.
    pub time_shift: u64,
    /// time_mult.
    pub time_mult: u64,
    /// time_zero.
    pub time_zero: u64,
    /// Whether the conversion is valid (cap_user_time_zero).
    pub cap_user_time_zero: u64,
    /// The config bit of `tsc`.
    pub tsc_bit: u64,
    /// The config bit of `noretcomp`.
    pub noretcomp_bit: u64,
    /// Whether sched_switch (or context_switch) side-band was recorded.
    pub have_sched_switch: u64,
    /// Snapshot mode (`-S`).
    pub snapshot_mode: u64,
    /// Per-cpu AUX areas (else per thread).
    pub per_cpu_mmaps: u64,
    /// The MTC/CYC group.
    pub mtc: Option<IntelPtMtc>,
    /// max_nonturbo_ratio (needs `mtc`).
    pub max_non_turbo_ratio: Option<u64>,
    /// The address filter string's bytes (needs `max_non_turbo_ratio`; `Some(vec![])`
    /// for a zero length).
    pub filter: Option<Vec<u8>>,
    /// Whether event tracing is supported (the word after the filter, perf 5.18+).
    pub cap_event_trace: Option<u64>,
}

/// The MTC/CYC group of [`IntelPtInfo`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct IntelPtMtc {
    /// The config bit of `mtc`.
    pub mtc_bit: u64,
    /// The config bits of `mtc_period` (a mask).
    pub mtc_freq_bits: u64,
    /// TSC:CTC ratio numerator (CPUID 0x15 EBX).
    pub tsc_ctc_ratio_n: u64,
    /// TSC:CTC ratio denominator (CPUID 0x15 EAX).
    pub tsc_ctc_ratio_d: u64,
    /// The config bit of `cyc`.
    pub cyc_bit: u64,
}

/// Number of u64 words up to and including per_cpu_mmaps.
const BASE_WORDS: usize = 10;

impl IntelPtInfo {
    /// An info for a recording on the PMU of type `pmu_type`: the config bits are those of
    /// [`config`] (perf reads them from the PMU's format), every optional group present,
    /// and the TSC conversion (`time_*`, `cap_user_time_zero`) left for the caller.
    pub fn new(pmu_type: u32) -> Self {
        IntelPtInfo {
            pmu_type: pmu_type as u64,
            tsc_bit: config::TSC,
            noretcomp_bit: config::NORETCOMP,
            mtc: Some(IntelPtMtc {
                mtc_bit: config::MTC,
                mtc_freq_bits: config::MTC_PERIOD_MASK,
                tsc_ctc_ratio_n: 0,
                tsc_ctc_ratio_d: 0,
                cyc_bit: config::CYC,
            }),
            max_non_turbo_ratio: Some(0),
            filter: Some(Vec::new()),
            cap_event_trace: Some(0),
            ..Default::default()
        }
    }

    /// Parses the private words (`at`: their file offset).
    pub fn parse(words: &[u8], at: u64) -> Result<IntelPtInfo> {
        let n = words.len() / 8;
        if n < BASE_WORDS {
            return Err(Error::new(
                at,
                ErrorKind::Invalid("intel_pt AUXTRACE_INFO is shorter than its 10 base fields"),
            ));
        }
        let mut c = Cursor::new(words, at, "intel_pt AUXTRACE_INFO");
        let mut info = IntelPtInfo {
            pmu_type: c.u64()?,
            time_shift: c.u64()?,
            time_mult: c.u64()?,
            time_zero: c.u64()?,
            cap_user_time_zero: c.u64()?,
            tsc_bit: c.u64()?,
            noretcomp_bit: c.u64()?,
            have_sched_switch: c.u64()?,
            snapshot_mode: c.u64()?,
            per_cpu_mmaps: c.u64()?,
            ..Default::default()
        };
        if n >= 15 {
            info.mtc = Some(IntelPtMtc {
                mtc_bit: c.u64()?,
                mtc_freq_bits: c.u64()?,
                tsc_ctc_ratio_n: c.u64()?,
                tsc_ctc_ratio_d: c.u64()?,
                cyc_bit: c.u64()?,
            });
        }
        if n >= 16 {
            info.max_non_turbo_ratio = Some(c.u64()?);
        }
        if n >= 17 {
            let len = c.u64()?;
            let filter = if len == 0 {
                Vec::new()
            } else {
                let at = c.offset();
                let padded = len
                    .checked_add(8)
                    .map(|l| l & !7)
                    .filter(|&l| l <= c.remaining() as u64)
                    .ok_or(Error::new(
                        at,
                        ErrorKind::Invalid("intel_pt filter string length runs past the record"),
                    ))?;
                let b = c.bytes64(padded)?;
                if b.get(len as usize) != Some(&0) {
                    return Err(Error::new(
                        at,
                        ErrorKind::Invalid("intel_pt filter string is not NUL-terminated"),
                    ));
                }
                b[..len as usize].to_vec()
            };
            info.filter = Some(filter);
            if c.remaining() >= 8 {
                info.cap_event_trace = Some(c.u64()?);
            }
        }
        Ok(info)
    }

    /// Appends the private words (groups up to the last present one; missing earlier
    /// groups are written as zeros).
    pub fn encode(&self, out: &mut Vec<u8>) {
        for v in [
            self.pmu_type,
            self.time_shift,
            self.time_mult,
            self.time_zero,
            self.cap_user_time_zero,
            self.tsc_bit,
            self.noretcomp_bit,
            self.have_sched_switch,
            self.snapshot_mode,
            self.per_cpu_mmaps,
        ] {
            out.put_u64(v);
        }
        let want_max = self.max_non_turbo_ratio.is_some()
            || self.filter.is_some()
            || self.cap_event_trace.is_some();
        if self.mtc.is_some() || want_max {
            let m = self.mtc.unwrap_or_default();
            for v in [
                m.mtc_bit,
                m.mtc_freq_bits,
                m.tsc_ctc_ratio_n,
                m.tsc_ctc_ratio_d,
                m.cyc_bit,
            ] {
                out.put_u64(v);
            }
        }
        if want_max {
            out.put_u64(self.max_non_turbo_ratio.unwrap_or(0));
        }
        if self.filter.is_some() || self.cap_event_trace.is_some() {
            let f = self.filter.as_deref().unwrap_or(&[]);
            out.put_u64(f.len() as u64);
            if !f.is_empty() {
                // The string as it is (NUL included), padded to 8 bytes.
                out.extend_from_slice(f);
                out.resize(out.len() + (f.len() + 1).div_ceil(8) * 8 - f.len(), 0);
            }
        }
        if let Some(v) = self.cap_event_trace {
            out.put_u64(v);
        }
    }

    /// Whether the TSC-to-perf-time conversion is usable.
    pub fn has_time_conv(&self) -> bool {
        self.cap_user_time_zero != 0 && self.time_mult != 0
    }

    /// perf time of a TSC value (perf's tsc_to_perf_time).
    pub fn tsc_to_perf_time(&self, tsc: u64) -> u64 {
        let shift = self.time_shift.min(63);
        let quot = tsc >> shift;
        let rem = tsc & ((1u64 << shift) - 1);
        self.time_zero
            .wrapping_add(quot.wrapping_mul(self.time_mult))
            .wrapping_add(rem.wrapping_mul(self.time_mult) >> shift)
    }

    /// The TSC value of a perf time (perf's perf_time_to_tsc).
    pub fn perf_time_to_tsc(&self, ns: u64) -> u64 {
        if self.time_mult == 0 {
            return ns;
        }
        let shift = self.time_shift.min(63);
        let t = ns.wrapping_sub(self.time_zero);
        let quot = t / self.time_mult;
        let rem = t % self.time_mult;
        (quot << shift).wrapping_add((rem << shift) / self.time_mult)
    }
}

/// Bits of the `intel_pt` PMU's config (the PMU's `format/` files; they mirror
/// IA32_RTIT_CTL's bit positions).
pub mod config {
    /// `pt`: trace enable (perf sets it by default).
    pub const PT: u64 = 1 << 0;
    /// `cyc`: cycle-accurate mode.
    pub const CYC: u64 = 1 << 1;
    /// `pwr_evt`: power event trace.
    pub const PWR_EVT: u64 = 1 << 4;
    /// `fup_on_ptw`: FUP after PTWRITE.
    pub const FUP_ON_PTW: u64 = 1 << 5;
    /// `mtc`: MTC packets.
    pub const MTC: u64 = 1 << 9;
    /// `tsc`: TSC packets.
    pub const TSC: u64 = 1 << 10;
    /// `noretcomp`: disable return compression.
    pub const NORETCOMP: u64 = 1 << 11;
    /// `ptw`: PTWRITE packets.
    pub const PTW: u64 = 1 << 12;
    /// `branch`: branch tracing (COFI packets).
    pub const BRANCH: u64 = 1 << 13;
    /// `mtc_period` (bits 14-17).
    pub const MTC_PERIOD_MASK: u64 = 0xf << 14;
    /// `cyc_thresh` (bits 19-22).
    pub const CYC_THRESH_MASK: u64 = 0xf << 19;
    /// `psb_period` (bits 24-27).
    pub const PSB_PERIOD_MASK: u64 = 0xf << 24;
    /// `event`: event trace.
    pub const EVENT: u64 = 1 << 31;
    /// `notnt`: TNT disable.
    pub const NOTNT: u64 = 1 << 55;

    /// `mtc_period=n`.
    pub const fn mtc_period(n: u64) -> u64 {
        (n & 0xf) << 14
    }
    /// `cyc_thresh=n`.
    pub const fn cyc_thresh(n: u64) -> u64 {
        (n & 0xf) << 19
    }
    /// `psb_period=n`.
    pub const fn psb_period(n: u64) -> u64 {
        (n & 0xf) << 24
    }

    /// perf's default for `intel_pt//`: tsc, mtc, mtc_period=3, psb_period=3, pt, branch.
    pub const DEFAULT: u64 = TSC | MTC | mtc_period(3) | psb_period(3) | PT | BRANCH;
}

/// The attr perf opens for `intel_pt/<config>/` (`user_only`: the `u` modifier;
/// `per_cpu`: AUX areas per CPU, which adds PERF_SAMPLE_CPU). Time is sampled when
/// config has `tsc`.
pub fn intel_pt_attr(pmu_type: u32, config: u64, user_only: bool, per_cpu: bool) -> EventAttr {
    let mut st = SampleType::IP | SampleType::TID | SampleType::IDENTIFIER;
    if config & config::TSC != 0 {
        st |= SampleType::TIME;
    }
    if per_cpu {
        st |= SampleType::CPU;
    }
    let mut flags = AttrFlags::DISABLED
        | AttrFlags::INHERIT
        | AttrFlags::ENABLE_ON_EXEC
        | AttrFlags::SAMPLE_ID_ALL
        | AttrFlags::EXCLUDE_GUEST;
    if user_only {
        flags |= AttrFlags::EXCLUDE_KERNEL | AttrFlags::EXCLUDE_HV;
    }
    EventAttr {
        type_: pmu_type,
        size: ATTR_SIZE,
        config,
        sample_period: 1,
        sample_type: SampleType(st),
        read_format: read_format::ID,
        flags: AttrFlags(flags),
        ..Default::default()
    }
}

/// The `dummy` software event perf adds to an intel_pt recording to carry the side-band
/// (mmap2, comm with exec, task, and with `context_switch` SWITCH records), with the
/// sample_type perf gives it.
pub fn tracking_attr(
    user_only: bool,
    per_cpu: bool,
    context_switch: bool,
    time: bool,
) -> EventAttr {
    let mut st = SampleType::IP | SampleType::TID | SampleType::IDENTIFIER;
    if time {
        st |= SampleType::TIME;
    }
    if per_cpu {
        st |= SampleType::CPU;
    }
    let mut flags = AttrFlags::DISABLED
        | AttrFlags::INHERIT
        | AttrFlags::MMAP
        | AttrFlags::COMM
        | AttrFlags::ENABLE_ON_EXEC
        | AttrFlags::TASK
        | AttrFlags::SAMPLE_ID_ALL
        | AttrFlags::MMAP2
        | AttrFlags::COMM_EXEC;
    if user_only {
        flags |= AttrFlags::EXCLUDE_KERNEL | AttrFlags::EXCLUDE_HV;
    }
    if context_switch {
        flags |= AttrFlags::CONTEXT_SWITCH;
    }
    EventAttr {
        type_: attr_type::SOFTWARE,
        size: ATTR_SIZE,
        config: sw_config::DUMMY,
        sample_period: 1,
        sample_type: SampleType(st),
        read_format: read_format::ID,
        flags: AttrFlags(flags),
        ..Default::default()
    }
}

/// PMU_MAPPINGS for an intel_pt recording: this machine's PMUs (from sysfs, as perf
/// lists them) plus `intel_pt` with `pmu_type` (a simulated recording has no intel_pt
/// PMU; perf needs the mapping to name the event).
pub fn pmu_mappings(pmu_type: u32) -> crate::features::Feature {
    let mut v: Vec<(u32, String)> = std::fs::read_dir("/sys/bus/event_source/devices")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|d| {
            let name = d.file_name().into_string().ok()?;
            let ty = std::fs::read_to_string(d.path().join("type")).ok()?;
            Some((ty.trim().parse().ok()?, name))
        })
        .filter(|(ty, name)| *ty != pmu_type && name != "intel_pt")
        .collect();
    if !v.iter().any(|(ty, _)| *ty == attr_type::SOFTWARE) {
        v.push((attr_type::SOFTWARE, "software".into()));
    }
    v.push((pmu_type, "intel_pt".into()));
    v.sort();
    crate::features::Feature::PmuMappings(v)
}

/// perf's event name for an intel_pt attr (`intel_pt//u` and the like), as EVENT_DESC
/// carries it.
pub fn intel_pt_event_name(user_only: bool) -> String {
    if user_only {
        "intel_pt//u".into()
    } else {
        "intel_pt//".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(v: &[u64]) -> Vec<u8> {
        v.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn optional_groups_are_detected_by_size_as_perf_does() {
        let base: Vec<u64> = (1..=10).collect();
        let i = IntelPtInfo::parse(&words(&base), 0).unwrap();
        assert_eq!((i.pmu_type, i.per_cpu_mmaps), (1, 10));
        assert_eq!(
            (i.mtc, i.max_non_turbo_ratio, i.filter.clone()),
            (None, None, None)
        );
        // A partial MTC group (11..14 words) is not a group.
        let mut w = base.clone();
        w.extend([11, 12, 13]);
        assert_eq!(IntelPtInfo::parse(&words(&w), 0).unwrap().mtc, None);
        w.extend([14, 15]);
        let i = IntelPtInfo::parse(&words(&w), 0).unwrap();
        assert_eq!(i.mtc.unwrap().cyc_bit, 15);
        w.push(16);
        assert_eq!(
            IntelPtInfo::parse(&words(&w), 0)
                .unwrap()
                .max_non_turbo_ratio,
            Some(16)
        );
        // Filter "filter 0x1000/0x10@/bin/ls": length, then the string padded to 8.
        let f = b"filter 0x1000/0x10@/bin/ls";
        let mut b = words(&w);
        b.extend((f.len() as u64).to_le_bytes());
        b.extend(f);
        b.resize(b.len() + (f.len() + 8) / 8 * 8 - f.len(), 0);
        let i = IntelPtInfo::parse(&b, 0).unwrap();
        assert_eq!(i.filter.as_deref(), Some(&f[..]));
        assert_eq!(i.cap_event_trace, None);
        b.extend(1u64.to_le_bytes());
        let i = IntelPtInfo::parse(&b, 0).unwrap();
        assert_eq!(i.cap_event_trace, Some(1));
        let mut again = Vec::new();
        i.encode(&mut again);
        assert_eq!(again, b);
    }

    #[test]
    fn bad_info_is_an_error_with_its_offset() {
        let e = IntelPtInfo::parse(&[0; 72], 100).unwrap_err();
        assert_eq!(e.offset, 100);
        let mut w = words(&[0; 16]);
        w.extend(1000u64.to_le_bytes());
        let e = IntelPtInfo::parse(&w, 100).unwrap_err();
        assert_eq!(e.offset, 100 + 17 * 8);
        let mut w = words(&[0; 16]);
        w.extend(3u64.to_le_bytes());
        w.extend(b"abcdefgh");
        assert!(IntelPtInfo::parse(&w, 0).is_err(), "not NUL-terminated");
    }

    #[test]
    fn perf_time_and_tsc_convert_both_ways() {
        let i = IntelPtInfo {
            time_shift: 31,
            time_mult: 0x2aaa_aaab,
            time_zero: 1_000_000,
            cap_user_time_zero: 1,
            ..Default::default()
        };
        assert!(i.has_time_conv());
        for tsc in [0u64, 1 << 20, 123_456_789_012, 1 << 45] {
            let ns = i.tsc_to_perf_time(tsc);
            let back = i.perf_time_to_tsc(ns);
            assert!(back.abs_diff(tsc) <= 2, "{tsc} -> {ns} -> {back}");
        }
    }

    #[test]
    fn perfs_default_config_and_attrs() {
        assert_eq!(config::DEFAULT, 0x300e601);
        let a = intel_pt_attr(8, config::DEFAULT, true, true);
        assert!(a
            .sample_type
            .has(SampleType::TIME | SampleType::CPU | SampleType::IDENTIFIER));
        assert!(a
            .flags
            .has(AttrFlags::EXCLUDE_KERNEL | AttrFlags::SAMPLE_ID_ALL));
        let a = intel_pt_attr(8, config::PT | config::BRANCH, false, false);
        assert!(!a.sample_type.has(SampleType::TIME) && !a.flags.has(AttrFlags::EXCLUDE_KERNEL));
        let t = tracking_attr(true, false, true, true);
        assert!(t
            .flags
            .has(AttrFlags::MMAP2 | AttrFlags::COMM_EXEC | AttrFlags::CONTEXT_SWITCH));
        assert_eq!((t.type_, t.config), (attr_type::SOFTWARE, sw_config::DUMMY));
        let crate::features::Feature::PmuMappings(m) = pmu_mappings(77) else {
            panic!()
        };
        assert!(m.contains(&(77, "intel_pt".into())) && m.contains(&(1, "software".into())));
        assert_eq!(m.iter().filter(|p| p.1 == "intel_pt").count(), 1);
    }
}
