//! `ptperf record` with the perf backend: the kernel's intel_pt PMU traces
//! the program (or `-p PID`), one per-thread AUX area, written as perf.data
//! by [`pt_hal::perf::data`] (the kernel's side-band records as they are,
//! AUX flags included). Snapshot mode (`-S`) maps the AUX area read-only, so
//! the kernel overwrites it; SIGUSR2 takes a snapshot, as with perf.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use pt_hal::backend::{TraceBackend, TraceItem};
use pt_hal::config::{AddrRange, TraceConfig};
use pt_hal::perf::attr::trace_config_of;
use pt_hal::perf::data::{rdtsc, PerfDataRecorder};
use pt_hal::perf::{PerfBackend, PerfOptions, Target};

use super::{
    catch_interrupts, catch_snapshot_signal, closing_lines, stop_signal, Options, Outcome,
    ProgramEnd,
};

/// The configuration and filter object for the kernel: perf's filters with
/// a file are offsets in that one file (the kernel maps them).
fn kernel_config(o: &Options) -> Result<(TraceConfig, Option<std::path::PathBuf>), String> {
    let mut cfg = trace_config_of(o.event.config, o.event.exclude_kernel, o.event.exclude_user)
        .map_err(|e| e.to_string())?;
    let mut object = None;
    for (slot, f) in cfg.ranges.iter_mut().zip(&o.filters) {
        if let Some(obj) = &f.object {
            if object.as_ref().is_some_and(|o| o != obj) {
                return Err(
                    "the perf backend takes address filters in one file at most".to_string()
                );
            }
            object = Some(obj.clone());
        }
        *slot = AddrRange {
            cfg: f.cfg,
            start: f.start,
            end: f.start + f.size.max(1) - 1,
        };
    }
    if o.filters.len() > cfg.ranges.len() {
        return Err(format!(
            "{} address filters: the trace unit has {}",
            o.filters.len(),
            cfg.ranges.len()
        ));
    }
    Ok((cfg, object))
}

/// Records with the kernel's intel_pt PMU.
pub(super) fn record(o: &Options) -> Result<Outcome, String> {
    let (_, _, ready) = pt_hal::probe::Readiness::host();
    if !ready.can_trace() {
        return Err(format!(
            "the perf backend cannot record here: {} (--backend sim records on the simulated PT CPU)",
            ready.summary()
        ));
    }
    let (cfg, object) = kernel_config(o)?;
    let target = match o.pid {
        Some(p) => Target::Pid(p),
        None => {
            let (prog, args) = o.command.split_first().ok_or("no command")?;
            let mut c = Command::new(prog);
            c.args(args);
            Target::Command(c)
        }
    };
    let mut opts = PerfOptions {
        filter_object: object,
        ..PerfOptions::default()
    };
    if let Some(s) = &o.snapshot {
        opts.snapshot = true;
        opts.aux_pages = (s.aux_size / 4096).max(1) as usize;
    }
    let mut be = PerfBackend::new(target, opts).map_err(|e| e.to_string())?;
    be.configure(&cfg).map_err(|e| e.to_string())?;
    let session = be.session_info().map_err(|e| e.to_string())?;
    // Errors name the file (the recorder's writer does).
    let io = |e: &pt_hal::perf::data::PerfDataError| e.to_string();
    let mut w = PerfDataRecorder::create(&o.output, &session, &o.cmdline).map_err(|e| io(&e))?;
    let area = be.aux_area();
    let stop = catch_interrupts();
    let snap = catch_snapshot_signal();
    be.start().map_err(|e| e.to_string())?;
    let mut items: Vec<TraceItem> = Vec::new();
    let mut wakeups = 0u64;
    // Side-band first, then the trace read with it, as perf record writes
    // them; written as they come, so memory stays flat.
    let mut flush = |be: &mut PerfBackend, items: &mut Vec<TraceItem>| -> Result<(), String> {
        for r in be.take_sideband() {
            w.side_band(&r).map_err(|e| io(&e))?;
        }
        for it in items.iter() {
            if let TraceItem::Lost { kind, offset, .. } = it {
                eprintln!("ptperf record: warning: trace lost at AUX offset {offset:#x}: {kind:?}");
            }
        }
        w.trace(&area, items, rdtsc()).map_err(|e| io(&e))?;
        items.clear();
        w.round().map_err(|e| io(&e))
    };
    let status = loop {
        if stop.load(Ordering::Relaxed) {
            break None;
        }
        if o.snapshot.is_some() {
            if snap.swap(false, Ordering::Relaxed) {
                be.snapshot(&mut items).map_err(|e| e.to_string())?;
                wakeups += 1;
            }
        } else if be.read(&mut items).map_err(|e| e.to_string())? > 0 {
            wakeups += 1;
        }
        if !items.is_empty() {
            flush(&mut be, &mut items)?;
        }
        match be.try_wait().map_err(|e| e.to_string())? {
            Some(st) => break Some(st),
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    let _ = be.stop();
    match o.snapshot {
        Some(s) if s.on_exit => {
            be.snapshot(&mut items).map_err(|e| e.to_string())?;
        }
        Some(_) => {}
        None => {
            be.read(&mut items).map_err(|e| e.to_string())?;
        }
    }
    flush(&mut be, &mut items)?;
    w.finish().map_err(|e| io(&e))?;
    wakeups += 1;
    if !o.quiet {
        closing_lines(&o.output, wakeups);
    }
    let interrupted = status.is_none().then(stop_signal).flatten();
    let status = match status {
        Some(st) => match (st.code(), st.signal()) {
            (Some(c), _) => ProgramEnd::Exited(c),
            (_, Some(s)) => ProgramEnd::Killed(s),
            _ => ProgramEnd::Unknown,
        },
        None => ProgramEnd::Unknown,
    };
    Ok(Outcome {
        status,
        interrupted,
        decoded_ok: true,
    })
}
