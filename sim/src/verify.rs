//! Decodes a simulated trace with the project's own instruction-flow decoder
//! (pt-decoder) and compares the decoded instructions with the recorded
//! execution: the ground truth, restricted by [`TracedFilter`] to what the
//! configuration traces.

use std::path::Path;

use pt_decoder::event::EventKind;
use pt_decoder::image::Image;
use pt_decoder::{Config, Decoder, Granularity, Item};
use pt_hal::config::TraceConfig;
use pt_hal::msr::{AddrCfg, RtitCtl};

use crate::exec::insn::{decode_at, KernelEntry};
use crate::exec::log::LogReader;
use crate::exec::{CodeMemory, Event, ExecItem, ExecutionSource, InsnClass, Retired};
use crate::profile::{Profile, Profiler};
use crate::pt::cr3_of_pid;
use crate::sideband::Sideband;

/// Whether a decoder shows the instruction as executed. INT n, INT3 and
/// INTO are reported with FUP(their IP) + TIP/TIP.PGD, which decoders take
/// as an interrupt before the instruction (libipt's convention): they are
/// not shown.
fn shown(r: &Retired, mem: &CodeMemory) -> bool {
    if r.class != InsnClass::KernelEntry {
        return true;
    }
    matches!(
        decode_at(mem, r.ip, r.mode)
            .ok()
            .and_then(|d| d.kernel_entry),
        Some(KernelEntry::Syscall | KernelEntry::Sysenter)
    )
}

/// Which recorded instructions a configuration traces and a decoder shows,
/// decided from each instruction's privilege level, the CR3 at the time
/// (from [`Event::Exec`] and [`Event::MovCr3`]) and its IP; independent of
/// the PT logic, so it can check it. TraceStop ranges are not followed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracedFilter {
    os: bool,
    user: bool,
    branch: bool,
    cr3_match: Option<u64>,
    ranges: Vec<(u64, u64)>,
    cr3: u64,
}

impl TracedFilter {
    /// The filter of a configuration.
    pub fn new(cfg: &TraceConfig) -> Self {
        TracedFilter {
            os: cfg.os,
            user: cfg.user,
            branch: cfg.branch,
            cr3_match: cfg.cr3_filter,
            ranges: cfg
                .ranges
                .iter()
                .filter(|r| r.cfg == AddrCfg::Filter)
                .map(|r| (r.start, r.end))
                .collect(),
            cr3: 0,
        }
    }

    /// Takes the next item in program order; returns the instruction if it
    /// retired with PacketEn = 1 (its CPL, the CR3 and its IP traced).
    pub fn traced<'i>(&mut self, item: &'i ExecItem) -> Option<&'i Retired> {
        match item {
            ExecItem::Insn(r) => {
                let cpl_ok = if r.kernel { self.os } else { self.user };
                let cr3_ok = self
                    .cr3_match
                    .map_or(true, |m| m & !0x1f == self.cr3 & !0x1f);
                let in_range = self.ranges.is_empty()
                    || self.ranges.iter().any(|&(a, b)| a <= r.ip && r.ip <= b);
                (self.branch && cpl_ok && cr3_ok && in_range).then_some(r)
            }
            ExecItem::Event(Event::Exec { pid, .. }) => {
                self.cr3 = cr3_of_pid(*pid);
                None
            }
            ExecItem::Event(Event::MovCr3 { cr3 }) => {
                self.cr3 = *cr3;
                None
            }
            ExecItem::Event(_) => None,
        }
    }

    /// [`Self::traced`], and shown by a decoder (not an INT n, which is
    /// reported as an interrupt before it): the IP the decoded flow holds.
    pub fn shown(&mut self, item: &ExecItem, mem: &CodeMemory) -> Option<u64> {
        self.traced(item).filter(|r| shown(r, mem)).map(|r| r.ip)
    }
}

/// What decoding found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowSummary {
    /// Instructions the decoder reconstructed.
    pub decoded: u64,
    /// Instructions of the recording that were traced (in the IP filter).
    pub expected: u64,
    /// Index and IPs (decoded, expected) of the first difference, if any.
    pub first_difference: Option<(u64, u64, u64)>,
    /// Tracing enabled (TIP.PGE) events.
    pub enables: u64,
    /// Tracing disabled (TIP.PGD, also asynchronous) events.
    pub disables: u64,
    /// Asynchronous disables (FUP+TIP.PGD: interrupts, faults).
    pub async_disables: u64,
    /// Overflows.
    pub overflows: u64,
    /// Decode errors (each followed by a resync), with the first message.
    pub errors: u64,
    /// The first error.
    pub first_error: Option<String>,
    /// Image sections loaded.
    pub sections: usize,
}

impl FlowSummary {
    /// Whether the decoded flow is exactly the recorded one.
    pub fn identical(&self) -> bool {
        self.errors == 0 && self.first_difference.is_none() && self.decoded == self.expected
    }
}

/// Decodes `trace` with the image and parameters of its side-band file and
/// compares it with the execution log `log`.
pub fn verify(trace: &Path, sideband: &Path, log: &Path) -> Result<FlowSummary, String> {
    verify_with(trace, sideband, log, None, &mut |_| {})
}

/// [`verify`], also profiling the decoded flow (see [`crate::profile`]);
/// `progress` is called with the instructions decoded so far, every 2^20.
pub fn verify_profile(
    trace: &Path,
    sideband: &Path,
    log: &Path,
    progress: &mut dyn FnMut(u64),
) -> Result<(FlowSummary, Profile), String> {
    let sb = Sideband::read(sideband)?;
    let mut p = Profiler::new(&sb.merged_maps());
    let s = verify_with(trace, sideband, log, Some(&mut p), progress)?;
    let bytes = std::fs::read(trace).map_err(|e| format!("{}: {e}", trace.display()))?;
    Ok((s, p.finish(&bytes, &config_of(&sb))))
}

fn config_of(sb: &Sideband) -> Config {
    let num = |k: &str| -> u64 {
        sb.param(k)
            .and_then(|v| match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => v.parse().ok(),
            })
            .unwrap_or(0)
    };
    Config {
        mtc_freq: num("mtc-freq") as u8,
        nom_freq: num("nom-freq") as u8,
        cpuid_0x15_eax: num("cpuid-0x15.eax") as u32,
        cpuid_0x15_ebx: num("cpuid-0x15.ebx") as u32,
        ..Config::default()
    }
}

fn verify_with(
    trace: &Path,
    sideband: &Path,
    log: &Path,
    mut profiler: Option<&mut Profiler>,
    progress: &mut dyn FnMut(u64),
) -> Result<FlowSummary, String> {
    let sb = Sideband::read(sideband)?;
    let bytes = std::fs::read(trace).map_err(|e| format!("{}: {e}", trace.display()))?;
    let num = |k: &str| -> u64 {
        sb.param(k)
            .and_then(|v| match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => v.parse().ok(),
            })
            .unwrap_or(0)
    };
    let config = config_of(&sb);
    let mut image = Image::new();
    let args = sb.ptxed_args();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--raw" {
            if let Some(v) = it.next() {
                image
                    .add_raw_arg(v)
                    .map_err(|e| format!("side-band image {v}: {e}"))?;
            }
        }
    }
    // The configuration the trace was recorded with: what the recording should show.
    let ctl = RtitCtl(num("rtit-ctl"));
    let mut ranges = Vec::new();
    for (k, v) in &sb.params {
        if k != "addr" {
            continue;
        }
        let f: Vec<u64> = v
            .split(' ')
            .filter_map(|x| match x.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => x.parse().ok(),
            })
            .collect();
        if let [n, a, b] = f[..] {
            if ctl.addr_cfg(n as u8) == Some(AddrCfg::Filter) {
                ranges.push((a, b));
            }
        }
    }
    let filter = TracedFilter {
        os: ctl.os(),
        user: ctl.user(),
        branch: ctl.branch_en(),
        cr3_match: ctl.cr3_filter().then(|| num("cr3-match")),
        ranges,
        cr3: cr3_of_pid(num("pid") as u32),
    };
    let mut truth = LogReader::open(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut truth_filter = filter.clone();
    let mut next_truth = move || -> Option<u64> {
        loop {
            match truth.next_item() {
                Ok(Some(item)) => {
                    if let Some(ip) = truth_filter.shown(&item, truth.memory()) {
                        return Some(ip);
                    }
                }
                _ => return None,
            }
        }
    };

    let mut s = FlowSummary {
        sections: image.sections().len(),
        ..FlowSummary::default()
    };
    let dec = Decoder::builder(&bytes, &image)
        .config(&config)
        .granularity(Granularity::Instructions)
        .build();
    if let Some(p) = profiler.as_deref_mut() {
        p.break_flow();
    }
    for item in dec {
        match item {
            Item::Insn(i) => {
                let insn = i.insn;
                let want = next_truth();
                if s.first_difference.is_none() && want != Some(insn.ip) {
                    s.first_difference = Some((s.decoded, insn.ip, want.unwrap_or(0)));
                }
                s.decoded += 1;
                if let Some(p) = profiler.as_deref_mut() {
                    p.insn(&insn, &image);
                }
                if s.decoded & 0xf_ffff == 0 {
                    progress(s.decoded);
                }
            }
            Item::Event(e) if !e.event.status_update => {
                let p = profiler.as_deref_mut();
                match e.event.kind {
                    EventKind::Enabled { .. } => s.enables += 1,
                    EventKind::Disabled { ip } => {
                        s.disables += 1;
                        if let Some(p) = p {
                            p.disabled(Some(ip));
                        }
                    }
                    EventKind::AsyncDisabled { at, .. } => {
                        s.disables += 1;
                        s.async_disables += 1;
                        if let Some(p) = p {
                            p.flow_at(at);
                        }
                    }
                    EventKind::AsyncBranch { from, .. } => {
                        if let Some(p) = p {
                            p.flow_at(from);
                        }
                    }
                    EventKind::Overflow { .. } => {
                        s.overflows += 1;
                        if let Some(p) = p {
                            p.break_flow();
                        }
                    }
                    _ => {}
                }
            }
            // The decoder goes on at the next PSB: the flow breaks there.
            Item::Error(e) => {
                s.errors += 1;
                s.first_error.get_or_insert_with(|| e.to_string());
                if let Some(p) = profiler.as_deref_mut() {
                    p.break_flow();
                }
            }
            _ => {}
        }
    }
    s.expected = s.decoded;
    if s.first_difference.is_none() {
        while next_truth().is_some() {
            s.expected += 1;
        }
    } else {
        s.expected = 0;
        let mut t = LogReader::open(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let mut f = filter;
        while let Ok(Some(item)) = t.next_item() {
            if f.shown(&item, t.memory()).is_some() {
                s.expected += 1;
            }
        }
    }
    Ok(s)
}
