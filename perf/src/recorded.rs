//! The samples a recording holds as PERF_RECORD_SAMPLEs, not synthesized from
//! a trace: `perf record -e cpu-clock`'s, `perf inject --itrace`'s output. They
//! come as [`Sample`]s of [`Kind::Recorded`] (the event's index in the file),
//! in perf's order (its ordered events: by time, round by round), so that the
//! tools print and count them as they do synthesized ones.
//!
//! ```no_run
//! use pt_perf::recorded::{self, Recorded};
//! use pt_perf::session::{Session, SessionOptions};
//! use pt_perf_data::MappedFile;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let file = MappedFile::open("perf.data")?;
//! let perf = file.parse()?;
//! let session = Session::without_trace(&perf, SessionOptions::for_file("perf.data"));
//! let stats = recorded::for_each(&perf, &session, |r: Recorded<'_>| {
//!     println!("{} {:x}", r.sample.tid, r.sample.ip);
//!     std::ops::ControlFlow::Continue(())
//! });
//! eprintln!("{} samples", stats.samples);
//! # Ok(())
//! # }
//! ```

use std::ops::ControlFlow;

use pt_perf_data::{PerfFile, Record, SampleType};

use crate::sample::{Kind, Sample};
use crate::session::Session;

/// perf's callchain context markers (`PERF_CONTEXT_*`, above this): not
/// addresses.
pub const PERF_CONTEXT_MAX: u64 = 0xffff_ffff_ffff_f000;

/// A recorded sample and its call chain (addresses only, innermost first;
/// empty without PERF_SAMPLE_CALLCHAIN).
#[derive(Clone, Debug)]
pub struct Recorded<'c> {
    /// The sample.
    pub sample: Sample,
    /// Its call chain.
    pub callchain: &'c [u64],
}

/// What [`for_each`] went through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Samples handed over.
    pub samples: u64,
    /// Records that could not be read (skipped).
    pub bad_records: u64,
}

/// Hands every PERF_RECORD_SAMPLE of `perf` to `f` as a [`Sample`], in perf's
/// order, until `f` breaks.
pub fn for_each<'a>(
    perf: &PerfFile<'a>,
    session: &Session<'a>,
    mut f: impl FnMut(Recorded<'_>) -> ControlFlow<()>,
) -> Stats {
    let mut stats = Stats::default();
    let mut chain: Vec<u64> = Vec::new();
    let events = perf.events();
    for r in perf.ordered_records() {
        let (_, r) = match r {
            Ok(r) => r,
            Err(_) => {
                stats.bad_records += 1;
                continue;
            }
        };
        let Record::Sample(s) = &r else { continue };
        let Some(ev) = perf.event_of(&r) else {
            stats.bad_records += 1;
            continue;
        };
        let idx = events.iter().position(|e| std::ptr::eq(e, ev)).unwrap_or(0);
        let time = if session.is_timed() { s.time } else { None };
        let pid = s.pid.map_or(-1, |p| p as i32);
        let ip = s.ip.unwrap_or(0);
        chain.clear();
        if let Some(c) = &s.callchain {
            chain.extend(c.iter().filter(|&a| a < PERF_CONTEXT_MAX));
        }
        let sample = Sample {
            kind: Kind::Recorded(idx.min(usize::from(u16::MAX)) as u16),
            ip,
            addr: s.addr.unwrap_or(0),
            flags: 0,
            time,
            tsc: 0,
            cpu: s.cpu.map_or(-1, |c| c as i32),
            pid,
            tid: s.tid.map_or(-1, |t| t as i32),
            // perf: the event's period where the sample has none.
            period: match s.period {
                Some(p) if ev.attr.sample_type.has(SampleType::PERIOD) => p,
                _ => ev.attr.sample_period,
            },
            insn_cnt: 0,
            cyc_cnt: 0,
            insn_len: 0,
            insn: [0; 16],
            payload: 0,
            aux: 0,
            depth: 0,
            queue: 0,
            code: session
                .image((pid >= 0).then_some(pid as u32), time)
                .stamp(),
        };
        stats.samples += 1;
        if f(Recorded {
            sample,
            callchain: &chain,
        })
        .is_break()
        {
            break;
        }
    }
    stats
}

/// Whether the recording holds samples (for a file without Intel PT trace:
/// whether there is anything to show).
pub fn has_samples(perf: &PerfFile<'_>) -> bool {
    perf.records()
        .any(|r| matches!(r, Ok((_, Record::Sample(_)))))
}

/// perf's `is_bts_event`: a hardware branch-instructions event sampled at
/// every branch; perf script prints its samples as branches (`ip => addr`).
pub fn is_bts_event(attr: &pt_perf_data::EventAttr) -> bool {
    attr.type_ == 0 && attr.config & 4 != 0 && attr.sample_period == 1
}
