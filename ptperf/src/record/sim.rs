//! `ptperf record` on the simulated PT CPU.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use pt_hal::perf::attr::trace_config_of;
use pt_sim::exec::log::LogReader;
use pt_sim::exec::ptrace::{TraceOptions, Tracer};
use pt_sim::exec::qemu::{QemuError, QemuOptions, QemuSource};
use pt_sim::exec::valgrind::{ValgrindOptions, ValgrindSource};
use pt_sim::exec::{ExecError, ExecutionSource, ExitKind, StopReason};
use pt_sim::record::{record_perf_data, PerfDataOptions, RecordSummary, SimRecording};

use super::{
    catch_interrupts, catch_snapshot_signal, closing_lines, signame, stop_signal, Options, Outcome,
    ProgramEnd, Source,
};

/// Progress on a terminal (pt_cli's indicatif counter; nothing otherwise):
/// what ran so far and its rate, from the start of the recording (`t0`).
struct Progress {
    t0: Instant,
    bar: Option<pt_cli::progress::ProgressBar>,
}

impl Progress {
    fn new() -> Self {
        Progress {
            t0: Instant::now(),
            bar: None,
        }
    }

    /// Shows `n` instructions (a counter starts, or starts again after
    /// [`Self::done`], at the first call).
    fn show(&mut self, what: &str, n: u64) {
        if self.bar.is_none() {
            self.bar = pt_cli::progress::counter(
                "{spinner} ptperf record: {msg} {human_pos} instructions in {elapsed} ({per_sec})",
            );
        }
        if let Some(b) = &self.bar {
            if b.message() != what {
                b.set_message(what.to_string());
            }
            b.set_position(n);
        }
    }

    fn done(&mut self) {
        pt_cli::progress::finish(self.bar.take());
    }
}

/// Records `o`'s command (or replays its log) on the simulator.
pub(super) fn record(o: &Options) -> Result<Outcome, String> {
    if o.pid.is_some() {
        return Err(
            "attaching to a running process (-p) needs Intel PT hardware (--backend perf); the simulator records the programs it starts"
                .into(),
        );
    }
    let replay = o.source == Source::Log;
    let kind = chosen_source(o);
    let mut event = o.event.clone();
    // The ptrace and valgrind sources see user mode only: as perf falls back
    // to `u` where the kernel is out of reach, so does the simulator.
    if !replay && !event.exclude_kernel {
        if event.exclude_user {
            return Err(pt_sim::pt::PtError::KernelTracing.to_string());
        }
        eprintln!(
            "ptperf record: the {} source sees user mode only: tracing user space ({}u)",
            source_name(kind),
            event.name.trim_end_matches(['u', 'k'])
        );
        event.exclude_kernel = true;
        event.name = format!("{}u", event.name.trim_end_matches(['u', 'k']));
    }
    let cfg = trace_config_of(event.config, event.exclude_kernel, event.exclude_user)
        .map_err(|e| e.to_string())?;
    let out = o.output.clone();
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut progress = Progress::new();
    // The ground truth is written only when asked for (`--exec-log`,
    // `--decode`): without it the recorder does no log work at all.
    let log = o.exec_log_path();
    let mut rec = SimRecording::new(cfg);
    rec.filters = o.filters.clone();
    let mut signalled = None;
    if o.snapshot.is_some() {
        let signal = catch_snapshot_signal();
        if matches!(kind, Source::Qemu | Source::Valgrind) && !replay {
            // The source hands requests on where its items reach the
            // moment they came (QEMU runs ahead of the recorder; valgrind
            // runs the program before the recorder replays it).
            let to_recorder = Arc::new(AtomicBool::new(false));
            rec.snapshot_requests = Some(to_recorder.clone());
            signalled = Some((signal, to_recorder));
        } else {
            rec.snapshot_requests = Some(signal);
        }
    }
    let flag = catch_interrupts();
    // The QEMU plugin lives as long as the recording.
    let mut plugin = None;
    let mut cpu = None;
    let mut source: Box<dyn ExecutionSource> = if replay {
        let path = &o.command[0];
        if !o.quiet {
            eprintln!(
                "ptperf record: replaying {} on the simulated PT CPU",
                path.to_string_lossy()
            );
        }
        Box::new(LogReader::open(path).map_err(|e| format!("{}: {e}", path.to_string_lossy()))?)
    } else {
        rec.log = log.clone();
        let (prog, args) = o.command.split_first().ok_or("no command")?;
        let res: Result<Box<dyn ExecutionSource>, ExecError> = if kind == Source::Qemu {
            plugin = Some(super::qemu_plugin::materialize()?);
            let opts = QemuOptions {
                qemu: qemu_program(),
                plugin: plugin.as_ref().map(|p| p.path.clone()).unwrap_or_default(),
                stop_flag: Some(flag.clone()),
                snapshots: signalled.take(),
            };
            pt_sim::exec::qemu::probe(&opts.qemu, &opts.plugin).map_err(|e| e.to_string())?;
            // The perf.data names the CPU QEMU emulates (what the program saw).
            cpu = match pt_sim::exec::qemu::emulated_cpu(&opts.qemu) {
                Ok(c) => Some((c.cpuid, c.brand)),
                Err(e) => {
                    eprintln!("ptperf record: warning: the CPU QEMU emulates is unknown ({e}): the perf.data names the simulated CPU");
                    None
                }
            };
            match QemuSource::spawn(prog, args, opts) {
                Ok(s) => Ok(Box::new(s) as Box<dyn ExecutionSource>),
                Err(QemuError::Exec(e)) => Err(e),
                Err(e) => return Err(e.to_string()),
            }
        } else if kind == Source::Valgrind {
            let opts = ValgrindOptions {
                stop_flag: Some(flag.clone()),
                snapshots: signalled.take(),
                ..ValgrindOptions::default()
            };
            let r = ValgrindSource::record_with_progress(prog, args, opts, &mut |n| {
                progress.show("valgrind ran", n)
            });
            progress.done();
            if let Ok(v) = &r {
                if flag.load(Ordering::Relaxed) || v.was_stopped() {
                    eprintln!("ptperf record: valgrind was interrupted: keeping what the program did so far");
                }
            }
            r.map(|s| Box::new(s) as Box<dyn ExecutionSource>)
        } else {
            Tracer::spawn(
                prog,
                args,
                TraceOptions {
                    step_limit: o.limit,
                    stop_flag: Some(flag.clone()),
                    ..TraceOptions::default()
                },
            )
            .map(|s| Box::new(s) as Box<dyn ExecutionSource>)
        };
        match res {
            Ok(s) => s,
            Err(ExecError::CommandNotFound(c)) => {
                // perf's words when the workload cannot be started.
                return Err(format!(
                    "Failed to collect '{}' for the '{c}' workload: No such file or directory",
                    event.name
                ));
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    let opts = PerfDataOptions {
        path: out.clone(),
        config: Some(event.config),
        event_name: Some(event.name.clone()),
        snapshot: o.snapshot,
        cmdline: o.cmdline.clone(),
        cpu,
    };
    let mut checkpoints = 0u64;
    let s = record_perf_data(source.as_mut(), &rec, &opts, |n| {
        checkpoints += 1;
        progress.show("recorded", n)
    })
    .map_err(|e| e.to_string())?;
    progress.done();
    drop(plugin);
    if !o.quiet {
        summary_line(&s, progress.t0.elapsed().as_secs_f64(), kind);
    }
    for w in &s.warnings {
        eprintln!("ptperf record: warning: not recorded: {w}");
    }
    let mut decoded_ok = true;
    if o.decode {
        let truth = match &log {
            Some(l) if !replay => l.clone(),
            _ => std::path::PathBuf::from(&o.command[0]),
        };
        decoded_ok = crate::record_check::decode(&out, &truth, &s, o.top, tty)?;
    }
    if let Some(e) = &s.source_error {
        eprintln!("ptperf record: the recording ended early: {e}; the trace is kept up to there");
    }
    match s.stopped {
        Some(StopReason::Interrupted) => eprintln!(
            "ptperf record: interrupted; the recording ends where the program was stopped, everything before it is kept"
        ),
        Some(StopReason::StepLimit) => eprintln!("ptperf record: instruction limit reached"),
        _ => {}
    }
    let status = match s.exit {
        Some(ExitKind::Killed(sig)) => {
            eprintln!(
                "ptperf record: the program was killed by {}; the trace ends there",
                signame(sig)
            );
            ProgramEnd::Killed(sig)
        }
        Some(ExitKind::Exited(c)) => ProgramEnd::Exited(c),
        None => ProgramEnd::Unknown,
    };
    if !o.quiet {
        closing_lines(&out, checkpoints + 1);
    }
    let interrupted = (s.stopped == Some(StopReason::Interrupted))
        .then(stop_signal)
        .flatten();
    Ok(Outcome {
        // An interrupted program was killed by the recorder: its status is not its own.
        status: if interrupted.is_some() {
            ProgramEnd::Unknown
        } else {
            status
        },
        interrupted,
        decoded_ok,
    })
}

/// The emulator `--source qemu` runs (`PT_QEMU` overrides it).
fn qemu_program() -> std::ffi::OsString {
    std::env::var_os("PT_QEMU").unwrap_or_else(|| "qemu-x86_64".into())
}

fn on_path(program: &std::ffi::OsStr) -> bool {
    let p = std::path::Path::new(program);
    if p.components().count() > 1 {
        return p.is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(p).is_file()))
}

/// The source that records: `--source`, else the fastest installed
/// (`--limit` counts single steps: ptrace).
fn chosen_source(o: &Options) -> Source {
    match o.source {
        Source::Auto if o.limit.is_some() => Source::Ptrace,
        Source::Auto if on_path(&qemu_program()) => Source::Qemu,
        Source::Auto if on_path("valgrind".as_ref()) => Source::Valgrind,
        Source::Auto => Source::Ptrace,
        s => s,
    }
}

fn source_name(s: Source) -> &'static str {
    match s {
        Source::Qemu => "qemu",
        Source::Valgrind => "valgrind",
        Source::Log => "log",
        Source::Ptrace | Source::Auto => "ptrace",
    }
}

/// What the simulator did, in one line.
fn summary_line(s: &RecordSummary, seconds: f64, source: Source) {
    let threads = s.threads.len();
    let processes = {
        let mut p: Vec<u32> = s.threads.iter().map(|t| t.id.pid).collect();
        p.sort_unstable();
        p.dedup();
        p.len()
    };
    eprintln!(
        "ptperf record: simulated {} instructions ({} traced) in {} thread{} of {} process{}, {} trace bytes, {} PSB{}{}{} in {:.2} s ({:.2} M instructions/s, {} source)",
        s.instructions,
        s.traced,
        threads,
        if threads == 1 { "" } else { "s" },
        processes,
        if processes == 1 { "" } else { "es" },
        s.trace_bytes,
        s.psbs,
        if s.psbs == 1 { "" } else { "s" },
        match s.overflows {
            0 => String::new(),
            1 => ", 1 overflow".to_string(),
            n => format!(", {n} overflows"),
        },
        if s.lost_bytes > 0 { format!(", {} bytes lost", s.lost_bytes) } else { String::new() },
        seconds,
        s.instructions as f64 / seconds.max(1e-9) / 1e6,
        source_name(source)
    );
}
