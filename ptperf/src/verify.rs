//! Decodes a simulated trace with the project's own instruction-flow decoder
//! (pt-decoder) and compares the decoded instructions with the recorded
//! execution: the ground truth, restricted by [`TracedFilter`] to what the
//! configuration traces.

use std::path::Path;

use pt_decoder::event::EventKind;
use pt_decoder::image::Image;
use pt_decoder::{Config, Decoder, Granularity, Item};
use pt_sim::exec::log::LogReader;
use pt_sim::exec::ExecutionSource;
use pt_sim::sideband::Sideband;
pub use pt_sim::traced::TracedFilter;

use crate::profile::{Profile, Profiler};

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
    /// Why the execution log could not be read to its end (cut short or
    /// corrupt, with the offset): the comparison covers what came before.
    pub log_error: Option<String>,
}

impl FlowSummary {
    /// Whether the decoded flow is exactly the recorded one.
    pub fn identical(&self) -> bool {
        self.errors == 0
            && self.first_difference.is_none()
            && self.decoded == self.expected
            && self.log_error.is_none()
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

pub(crate) fn config_of(sb: &Sideband) -> Config {
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
    let filter = TracedFilter::from_sideband(&sb);
    let mut truth = LogReader::open(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut truth_filter = filter.clone();
    let log_error = std::cell::Cell::new(None);
    let log_error_ref = &log_error;
    let mut next_truth = move || -> Option<u64> {
        loop {
            match truth.next_item() {
                Ok(Some(item)) => {
                    if let Some(ip) = truth_filter.shown(&item, truth.memory()) {
                        return Some(ip);
                    }
                }
                Ok(None) => return None,
                Err(e) => {
                    log_error_ref.set(Some(format!("{}: {e}", log.display())));
                    return None;
                }
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
    s.log_error = log_error.take();
    Ok(s)
}
