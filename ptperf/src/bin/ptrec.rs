//! ptrec: record a program's Intel PT trace with the perf backend where the
//! hardware and kernel allow it, else with the simulator.
//!
//! ```text
//! ptrec [--backend auto|perf|sim] [--source ptrace|valgrind] [TERMS...]
//!       [--filter SPEC] [-n LIMIT] -o OUT -- CMD ARGS...
//! ptrec --replay OUT.log [TERMS...] [--filter SPEC] -o OUT2
//! ```
//!
//! TERMS are perf's intel_pt terms, applied over perf's default
//! (`tsc,mtc,mtc_period=3,psb_period=3,branch`, user space): `tsc`, `mtc`,
//! `mtc_period=N`, `cyc`, `cyc_thresh=N`, `noretcomp`, `psb_period=N`,
//! `branch`, `ptw`, `fup_on_ptw`, `notnt`, each also as `term=0`; `u` / `k`
//! / `uk` (or `:u`, `:k`, `:uk`) select user / kernel / both. Commas
//! separate terms too. The simulator traces the kernel only in executions
//! that show it (a replayed log of a scripted one); its ptrace and valgrind
//! sources see user mode only, so `k` and `uk` are refused there.
//! `--filter` takes perf's `filter START/SIZE@FILE` (or `stop …`) or a plain
//! `START-END` (END exclusive).
//!
//! Both simulator sources follow every thread the program creates, the
//! processes it forks and the programs they exec; a thread or process they
//! cannot follow is named in a warning. Each thread gets a trace of its own
//! (perf's per-thread mode), cut at each exec.
//!
//! `--decode` decodes every simulated trace with pt-decoder, compares each
//! with its thread's recorded execution (exit status 1 when any differs) and
//! prints branch counts by kind and the `--top N` hottest functions by
//! instructions, named from the ELF symbols of the mapped files. Reports go
//! to stderr; stdout is the traced program's.
//!
//! Ctrl-C (SIGINT) or SIGTERM stops the recording; everything recorded up to
//! there is kept and decodes (a second one during valgrind's replay ends the
//! replay there).
//!
//! With the simulator, OUT is the first thread's trace, `OUT.sideband` its
//! side-band (see `pt_sim::sideband`; it lists every trace file and the task
//! events), `OUT.TID` the trace of thread TID, `….execN` a thread's trace
//! after its N-th exec, and `OUT.log` the execution log of all threads,
//! which `--replay` turns into traces again with another configuration.
//! Our ptxed decodes a trace T with `ptxed --sideband T.sideband --pt T`;
//! `--ptxed-args T` prints the equivalent plain options (for libipt's).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use pt_hal::config::TraceConfig;
use pt_sim::exec::log::LogReader;
use pt_sim::exec::ptrace::{TraceOptions, Tracer};
use pt_sim::exec::valgrind::{ValgrindOptions, ValgrindSource};
use pt_sim::exec::{ExecError, ExecutionSource, ExitKind, StopReason};
use pt_sim::record::{record_sim, sideband_path, FilterSpec, RecordSummary, SimRecording};
use ptperf::profile::Profile;

static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();

extern "C" fn on_interrupt(_: libc::c_int) {
    if let Some(f) = STOP.get() {
        f.store(true, Ordering::Relaxed);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Auto,
    Perf,
    Sim,
}

struct Args {
    backend: Backend,
    valgrind: bool,
    config: TraceConfig,
    filters: Vec<FilterSpec>,
    out: Option<PathBuf>,
    replay: Option<PathBuf>,
    limit: Option<u64>,
    decode: bool,
    top: usize,
    command: Vec<String>,
}

const USAGE: &str = "usage: ptrec [--backend auto|perf|sim] [--source ptrace|valgrind] [TERMS...] [--filter SPEC] [-n LIMIT] [--decode] [--top N] -o OUT -- CMD ARGS...
       ptrec --replay OUT.log [TERMS...] [--filter SPEC] [--decode] [--top N] -o OUT2
       ptrec --ptxed-args OUT     (print libipt ptxed options for a simulated trace;
                                   our ptxed takes --sideband OUT.sideband --pt OUT)
--decode: decode every thread's trace with pt-decoder, compare it with the recorded
          execution (exit status 1 if any differs) and print branch counts and the
          hottest functions (ELF symbols); reports go to stderr
--top N:  how many functions to list (default 10; implies --decode)
TERMS: tsc mtc mtc_period=N cyc cyc_thresh=N noretcomp psb_period=N branch ptw fup_on_ptw notnt (term=0 to clear), u, k, uk
       (k and uk trace the kernel: the perf backend, or a replayed log that shows the kernel;
        the ptrace and valgrind sources see user mode only)";

/// perf's terms: MTCEn/MTCFreq and CYCEn/CycThresh are separate terms, folded
/// into the [`TraceConfig`] at the end.
struct Terms {
    cfg: TraceConfig,
    mtc: bool,
    mtc_period: u8,
    cyc: bool,
    cyc_thresh: u8,
}

impl Terms {
    fn new(cfg: TraceConfig) -> Self {
        Terms {
            cfg,
            mtc: cfg.mtc.is_some(),
            mtc_period: cfg.mtc.unwrap_or(3),
            cyc: cfg.cyc.is_some(),
            cyc_thresh: cfg.cyc.unwrap_or(0),
        }
    }

    fn config(&self) -> TraceConfig {
        TraceConfig {
            mtc: self.mtc.then_some(self.mtc_period),
            cyc: self.cyc.then_some(self.cyc_thresh),
            ..self.cfg
        }
    }

    fn apply(&mut self, term: &str) -> Result<(), String> {
        let (name, value) = match term.split_once('=') {
            Some((n, v)) => {
                let v = v.trim();
                let parsed = match v.strip_prefix("0x") {
                    Some(h) => u64::from_str_radix(h, 16),
                    None => v.parse(),
                };
                (n, parsed.map_err(|_| format!("term `{term}`: bad value"))?)
            }
            None => (term, 1),
        };
        let small = |v: u64| -> Result<u8, String> {
            u8::try_from(v)
                .ok()
                .filter(|&v| v <= 15)
                .ok_or(format!("term `{term}`: value out of range"))
        };
        let on = value != 0;
        let cfg = &mut self.cfg;
        match name {
            "tsc" => cfg.tsc = on,
            "mtc" => self.mtc = on,
            "mtc_period" => self.mtc_period = small(value)?,
            "cyc" => self.cyc = on,
            "cyc_thresh" => self.cyc_thresh = small(value)?,
            "noretcomp" => cfg.dis_retc = on,
            "psb_period" => cfg.psb_freq = small(value)?,
            "branch" => cfg.branch = on,
            "ptw" => cfg.ptwrite = on,
            "fup_on_ptw" => cfg.fup_on_ptw = on,
            "notnt" => cfg.dis_tnt = on,
            "pt" => {}
            "u" | ":u" => {
                cfg.user = true;
                cfg.os = false;
            }
            "k" | ":k" => {
                cfg.os = true;
                cfg.user = false;
            }
            "uk" | "ku" | ":uk" | ":ku" => {
                cfg.os = true;
                cfg.user = true;
            }
            _ => return Err(format!("unknown term `{term}`\n{USAGE}")),
        }
        Ok(())
    }
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        backend: Backend::Auto,
        valgrind: false,
        config: TraceConfig::perf_default(),
        filters: Vec::new(),
        out: None,
        replay: None,
        limit: None,
        decode: false,
        top: 10,
        command: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    let mut terms = Terms::new(a.config);
    while let Some(arg) = it.next() {
        let mut value = |what: &str| it.next().ok_or(format!("{arg} needs {what}"));
        match arg.as_str() {
            "-h" | "--help" => return Err(USAGE.to_string()),
            "--backend" => {
                a.backend = match value("auto|perf|sim")?.as_str() {
                    "auto" => Backend::Auto,
                    "perf" => Backend::Perf,
                    "sim" => Backend::Sim,
                    b => return Err(format!("unknown backend `{b}`")),
                }
            }
            "--source" => {
                a.valgrind = match value("ptrace|valgrind")?.as_str() {
                    "ptrace" => false,
                    "valgrind" => true,
                    s => return Err(format!("unknown source `{s}`")),
                }
            }
            "--filter" => a
                .filters
                .extend(FilterSpec::parse_list(&value("a filter")?)?),
            "-o" | "--output" => a.out = Some(PathBuf::from(value("a file")?)),
            "--decode" => a.decode = true,
            "--top" => {
                a.top = value("a count")?
                    .parse()
                    .map_err(|_| "--top needs a count".to_string())?;
                a.decode = true;
            }
            "--ptxed-args" => {
                let t = PathBuf::from(value("a trace file")?);
                let sb = pt_sim::sideband::Sideband::read(&sideband_path(&t))?;
                let mut args = sb.ptxed_args();
                args.push("--pt".into());
                args.push(t.display().to_string());
                println!("{}", args.join(" "));
                std::process::exit(0);
            }
            "--replay" => a.replay = Some(PathBuf::from(value("a log file")?)),
            "-n" | "--limit" => {
                a.limit = Some(
                    value("a count")?
                        .parse()
                        .map_err(|_| "bad instruction limit".to_string())?,
                )
            }
            "--" => {
                a.command = it.by_ref().collect();
                break;
            }
            s if s.starts_with('-') && s != "-" => {
                return Err(format!("unknown option `{s}`\n{USAGE}"))
            }
            words => {
                for t in words.split(',').map(str::trim).filter(|t| !t.is_empty()) {
                    terms.apply(t)?;
                }
            }
        }
    }
    a.config = terms.config();
    if a.out.is_none() {
        return Err(format!("-o OUT is required\n{USAGE}"));
    }
    if a.replay.is_none() && a.command.is_empty() {
        return Err(format!("no command given\n{USAGE}"));
    }
    Ok(a)
}

fn signame(s: i32) -> String {
    let names = [
        (1, "SIGHUP"),
        (2, "SIGINT"),
        (4, "SIGILL"),
        (5, "SIGTRAP"),
        (6, "SIGABRT"),
        (7, "SIGBUS"),
        (8, "SIGFPE"),
        (9, "SIGKILL"),
        (11, "SIGSEGV"),
        (13, "SIGPIPE"),
        (15, "SIGTERM"),
    ];
    names
        .iter()
        .find(|(n, _)| *n == s)
        .map_or(format!("signal {s}"), |(_, name)| {
            format!("signal {s} ({name})")
        })
}

/// Installs the SIGINT and SIGTERM handler: the first stops the recording
/// (what was recorded is kept); waits are interrupted (no SA_RESTART) so
/// that a program blocked in a system call does not hold the recorder.
fn catch_interrupts() -> Arc<AtomicBool> {
    let flag = STOP
        .get_or_init(|| Arc::new(AtomicBool::new(false)))
        .clone();
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a handler that only stores to an atomic and records the signal.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = 0;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    flag
}

/// Progress on a terminal, every half second at most: instructions and
/// their rate, both counted from the start of the recording (`t0`), as the
/// final figure is.
struct Progress {
    t0: Instant,
    tty: bool,
    shown: bool,
    last: f64,
}

impl Progress {
    fn show(&mut self, what: &str, n: u64) {
        let now = self.t0.elapsed().as_secs_f64();
        if !self.tty || now - self.last < 0.5 {
            return;
        }
        self.last = now;
        self.shown = true;
        eprint!(
            "\r\x1b[Kptrec: {what} {:.2} M instructions in {:.1} s ({:.0} k/s)",
            n as f64 / 1e6,
            now,
            n as f64 / now.max(1e-9) / 1e3
        );
    }

    fn done(&mut self) {
        if self.shown {
            eprintln!();
            self.shown = false;
        }
    }
}

fn run_sim(a: &Args) -> Result<ExitCode, String> {
    let out = a.out.clone().unwrap_or_default();
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // The recording's figures count from here: the source starts the program.
    let mut progress = Progress {
        t0: Instant::now(),
        tty,
        shown: false,
        last: 0.0,
    };
    let mut log_path = out.as_os_str().to_owned();
    log_path.push(".log");
    let log_path = PathBuf::from(log_path);
    let mut rec = SimRecording {
        config: a.config,
        filters: a.filters.clone(),
        params: pt_sim::pt::SimParams::default(),
        output: pt_sim::backend::SimOutput::default(),
        trace: out.clone(),
        log: None,
    };
    if a.config.os && a.replay.is_none() {
        // Refused before the program starts (record_sim checks replayed logs).
        return Err(pt_sim::pt::PtError::KernelTracing.to_string());
    }
    let flag = catch_interrupts();
    let mut source: Box<dyn ExecutionSource> = if let Some(log) = &a.replay {
        eprintln!("ptrec: replaying {} on the simulator", log.display());
        Box::new(LogReader::open(log).map_err(|e| format!("{}: {e}", log.display()))?)
    } else {
        rec.log = Some(log_path.clone());
        let (prog, args) = a.command.split_first().ok_or("no command")?;
        let res: Result<Box<dyn ExecutionSource>, ExecError> = if a.valgrind {
            eprintln!("ptrec: recording {prog} on the simulator (valgrind source)");
            let opts = ValgrindOptions {
                stop_flag: Some(flag.clone()),
                ..ValgrindOptions::default()
            };
            let r = ValgrindSource::record_with_progress(prog, args, opts, &mut |n| {
                progress.show("valgrind ran", n)
            });
            progress.done();
            if let Ok(v) = &r {
                eprintln!(
                    "ptrec: valgrind ran {} instructions in {:.2} s{}; simulating the trace",
                    v.superblocks(),
                    progress.t0.elapsed().as_secs_f64(),
                    if flag.load(Ordering::Relaxed) || v.was_stopped() {
                        " (interrupted: keeping what it did so far)"
                    } else {
                        ""
                    }
                );
            }
            r.map(|s| Box::new(s) as Box<dyn ExecutionSource>)
        } else {
            eprintln!("ptrec: recording {prog} on the simulator (ptrace single-step source)");
            Tracer::spawn(
                prog,
                args,
                TraceOptions {
                    step_limit: a.limit,
                    stop_flag: Some(flag.clone()),
                    ..TraceOptions::default()
                },
            )
            .map(|s| Box::new(s) as Box<dyn ExecutionSource>)
        };
        match res {
            Ok(s) => s,
            Err(ExecError::CommandNotFound(c)) => {
                eprintln!("ptrec: {c}: command not found");
                return Ok(ExitCode::from(127));
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    let s = record_sim(source.as_mut(), &rec, |n| progress.show("recorded", n))?;
    progress.done();
    let seconds = progress.t0.elapsed().as_secs_f64();
    let threads = s.threads.len();
    let processes = {
        let mut p: Vec<u32> = s.threads.iter().map(|t| t.id.pid).collect();
        p.sort_unstable();
        p.dedup();
        p.len()
    };
    eprintln!(
        "ptrec: {} instructions ({} traced) in {} thread{} of {} process{}, {} trace bytes, {} PSB{}{}{} in {:.2} s ({:.2} M instructions/s)",
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
        s.instructions as f64 / seconds.max(1e-9) / 1e6
    );
    let others = if threads > 1 {
        format!(
            " (and a trace and side-band per other thread: {}.TID)",
            out.display()
        )
    } else {
        String::new()
    };
    eprintln!(
        "ptrec: wrote {}, {}{}{others}",
        out.display(),
        sideband_path(&out).display(),
        if rec.log.is_some() {
            format!(", {}", log_path.display())
        } else {
            String::new()
        }
    );
    for w in &s.warnings {
        eprintln!("ptrec: warning: not recorded: {w}");
    }
    let mut status = ExitCode::SUCCESS;
    if a.decode {
        let log = a.replay.clone().unwrap_or_else(|| log_path.clone());
        if !decode_threads(a, &out, &log, &s, tty)? {
            status = ExitCode::FAILURE;
        }
    }
    if let Some(e) = &s.source_error {
        eprintln!("ptrec: the recording ended early: {e}; the trace is kept up to there");
    }
    match s.stopped {
        Some(StopReason::Interrupted) => eprintln!(
            "ptrec: interrupted; the recording ends where the program was stopped, everything before it is kept"
        ),
        Some(StopReason::StepLimit) => eprintln!("ptrec: instruction limit reached"),
        _ => {}
    }
    match s.exit {
        Some(ExitKind::Killed(sig)) => {
            eprintln!(
                "ptrec: the program was killed by {}; the trace ends there",
                signame(sig)
            )
        }
        Some(ExitKind::Exited(c)) if c != 0 => {
            eprintln!("ptrec: the program exited with status {c}")
        }
        _ => {}
    }
    Ok(status)
}

/// `--decode`: every thread's trace decoded and compared with its recorded
/// execution; the profile of all of them. Reports on stderr; `false` when a
/// decoded flow differs from the recording.
fn decode_threads(
    a: &Args,
    out: &Path,
    log: &Path,
    s: &RecordSummary,
    tty: bool,
) -> Result<bool, String> {
    let t1 = Instant::now();
    let mut shown = false;
    let mut total = ptperf::verify::FlowSummary::default();
    let mut profile: Option<Profile> = None;
    let mut all_identical = true;
    let mut decoded_before = 0;
    if !sideband_path(out).exists() {
        eprintln!("ptrec: nothing was traced: no instruction was recorded");
        return Ok(s.instructions == 0 && s.source_error.is_none());
    }
    // The first side-band lists every trace file: one per thread and program.
    let mut traces: Vec<(pt_sim::exec::ThreadId, String, PathBuf)> =
        pt_sim::sideband::Sideband::read(&sideband_path(out))?
            .traces()
            .into_iter()
            .map(|f| {
                let comm = s
                    .threads
                    .iter()
                    .find(|t| t.id == f.thread)
                    .map(|t| t.comm.clone())
                    .unwrap_or_default();
                (f.thread, comm, f.path)
            })
            .collect();
    if traces.is_empty() {
        let first = s.threads.first();
        traces.push((
            first.map(|t| t.id).unwrap_or_default(),
            first.map(|t| t.comm.clone()).unwrap_or_default(),
            out.to_path_buf(),
        ));
    }
    let several = traces.len() > 1;
    for (id, comm, trace) in &traces {
        let mut progress = |n: u64| {
            if tty {
                shown = true;
                eprint!(
                    "\r\x1b[Kptrec: decoding: {:.2} M instructions, {:.1} s",
                    (decoded_before + n) as f64 / 1e6,
                    t1.elapsed().as_secs_f64()
                );
            }
        };
        let (v, prof) =
            ptperf::verify::verify_profile(trace, &sideband_path(trace), log, &mut progress)?;
        decoded_before += v.decoded;
        if several {
            if shown {
                eprintln!();
                shown = false;
            }
            eprintln!(
                "thread {id} ({comm}, {}): {} instructions decoded, {} recorded{}",
                trace.file_name().unwrap_or_default().to_string_lossy(),
                v.decoded,
                v.expected,
                if v.identical() {
                    ", identical"
                } else {
                    ", DIFFERENT"
                }
            );
        }
        if !v.identical() {
            all_identical = false;
            report_difference(id, &v);
        }
        total.decoded += v.decoded;
        total.expected += v.expected;
        total.sections = total.sections.max(v.sections);
        total.enables += v.enables;
        total.disables += v.disables;
        total.async_disables += v.async_disables;
        total.overflows += v.overflows;
        total.errors += v.errors;
        profile = Some(match profile {
            None => prof,
            Some(p) => merge_profiles(p, prof),
        });
    }
    if shown {
        eprintln!();
    }
    eprintln!(
        "decoded flow: {} instructions ({} recorded in the traced range){} from {} image sections",
        total.decoded,
        total.expected,
        if several {
            format!(" in {} traces of {} threads", traces.len(), s.threads.len())
        } else {
            String::new()
        },
        total.sections
    );
    eprintln!(
        "  tracing enabled {} times, disabled {} times ({} asynchronously: interrupts, faults, thread switches), {} overflows",
        total.enables, total.disables, total.async_disables, total.overflows
    );
    if all_identical {
        eprintln!(
            "  identical to the recorded execution, instruction by instruction{}",
            if several { ", in every thread" } else { "" }
        );
    } else {
        eprintln!("ptrec: the decoded flow differs from the recorded execution");
    }
    if let Some(p) = &profile {
        eprint!("{}", p.report(a.top));
    }
    Ok(all_identical)
}

fn report_difference(thread: &pt_sim::exec::ThreadId, v: &ptperf::verify::FlowSummary) {
    if let Some((i, got, want)) = v.first_difference {
        eprintln!(
            "  thread {thread}: DIFFERS at instruction {i}: decoded {got:#x}, recorded {want:#x}"
        );
    }
    if let Some(e) = &v.first_error {
        eprintln!(
            "  thread {thread}: {} decode errors, the first: {e}",
            v.errors
        );
    }
    if v.decoded != v.expected {
        eprintln!(
            "  thread {thread}: {} instructions decoded, {} recorded",
            v.decoded, v.expected
        );
    }
    if let Some(e) = &v.log_error {
        eprintln!("  thread {thread}: {e}");
    }
}

/// The profile of several threads: counts added, functions merged.
fn merge_profiles(mut a: Profile, b: Profile) -> Profile {
    a.insns += b.insns;
    let (x, y) = (&mut a.branches, &b.branches);
    x.cond_taken += y.cond_taken;
    x.cond_not_taken += y.cond_not_taken;
    x.jump_direct += y.jump_direct;
    x.jump_indirect += y.jump_indirect;
    x.call_direct += y.call_direct;
    x.call_indirect += y.call_indirect;
    x.returns += y.returns;
    x.returns_compressed += y.returns_compressed;
    x.far += y.far;
    x.syscalls += y.syscalls;
    for f in b.functions {
        match a
            .functions
            .iter_mut()
            .find(|g| g.name == f.name && g.file == f.file)
        {
            Some(g) => g.insns += f.insns,
            None => a.functions.push(f),
        }
    }
    a.functions.sort_by(|p, q| {
        q.insns
            .cmp(&p.insns)
            .then_with(|| p.label().cmp(&q.label()))
    });
    a
}

fn run_perf(a: &Args) -> Result<ExitCode, String> {
    use pt_hal::backend::{TraceBackend, TraceItem};
    use pt_hal::perf::{PerfBackend, PerfOptions, Target};
    let out = a.out.clone().unwrap_or_default();
    let (prog, args) = a.command.split_first().ok_or("no command")?;
    let mut cfg = a.config;
    let mut opts = PerfOptions::default();
    for (slot, f) in cfg.ranges.iter_mut().zip(&a.filters) {
        *slot = pt_hal::config::AddrRange {
            cfg: f.cfg,
            start: f.start,
            end: f.start + f.size - 1,
        };
        if let Some(o) = &f.object {
            opts.filter_object = Some(o.clone());
        }
    }
    let mut cmd = std::process::Command::new(prog);
    cmd.args(args);
    eprintln!("ptrec: recording {prog} with the perf backend (Intel PT hardware)");
    let mut b = PerfBackend::new(Target::Command(cmd), opts).map_err(|e| e.to_string())?;
    b.configure(&cfg).map_err(|e| e.to_string())?;
    b.start().map_err(|e| e.to_string())?;
    let mut items: Vec<TraceItem> = Vec::new();
    // Drain the AUX area while the workload runs (it is small); the workload is
    // our only child, so waitid(P_ALL, WNOWAIT) tells when it ended without
    // reaping it.
    loop {
        b.read(&mut items).map_err(|e| e.to_string())?;
        // SAFETY: siginfo_t is plain data; waitid only writes it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid out pointer; WNOWAIT leaves the child to PerfBackend::wait.
        let rc = unsafe {
            libc::waitid(
                libc::P_ALL,
                0,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: si_pid is valid when waitid returned a child.
        if rc != 0 || unsafe { info.si_pid() } != 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let status = b.wait().map_err(|e| e.to_string())?;
    b.stop().map_err(|e| e.to_string())?;
    b.read(&mut items).map_err(|e| e.to_string())?;
    let lost: u64 = items
        .iter()
        .map(|i| match i {
            TraceItem::Lost { size, .. } => size.unwrap_or(0),
            _ => 0,
        })
        .sum();
    if lost > 0 {
        eprintln!("ptrec: {lost} bytes of trace were lost (AUX area full)");
    }
    b.write_files(&items, &out, &sideband_path(&out))
        .map_err(|e| format!("{}: {e}", out.display()))?;
    let bytes: usize = items
        .iter()
        .map(|i| match i {
            TraceItem::Data { bytes, .. } => bytes.len(),
            _ => 0,
        })
        .sum();
    eprintln!(
        "ptrec: wrote {} ({bytes} bytes) and {}; program {:?}",
        out.display(),
        sideband_path(&out).display(),
        status
    );
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    pt_cli::init();
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ptrec: {e}");
            return ExitCode::from(2);
        }
    };
    let backend = match a.backend {
        Backend::Auto if a.replay.is_some() => Backend::Sim,
        Backend::Auto => {
            let (_, _, ready) = pt_hal::probe::Readiness::host();
            if ready.can_trace() {
                Backend::Perf
            } else {
                eprintln!("ptrec: {}; using the simulator", ready.summary());
                Backend::Sim
            }
        }
        b => b,
    };
    let r = match backend {
        Backend::Perf if a.replay.is_some() => Err("--replay needs the simulator".to_string()),
        Backend::Perf => run_perf(&a),
        _ => run_sim(&a),
    };
    match r {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ptrec: {e}");
            ExitCode::FAILURE
        }
    }
}
