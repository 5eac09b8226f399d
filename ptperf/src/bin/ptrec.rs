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
//! `--decode` decodes the simulated trace with pt-decoder, compares it with
//! the recorded execution and prints branch counts by kind and the `--top N`
//! hottest functions by instructions, named from the ELF symbols of the
//! mapped files.
//!
//! With the simulator, OUT is the trace, `OUT.sideband` the side-band (see
//! `pt_sim::sideband`) and `OUT.log` the execution log, which `--replay`
//! turns into a trace again with another configuration.
//! Our ptxed decodes OUT with `ptxed --sideband OUT.sideband --pt OUT`;
//! `--ptxed-args OUT` prints the equivalent plain options (for libipt's).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use pt_hal::config::TraceConfig;
use pt_sim::exec::log::LogReader;
use pt_sim::exec::ptrace::{TraceOptions, Tracer};
use pt_sim::exec::valgrind::{ValgrindOptions, ValgrindSource};
use pt_sim::exec::{ExecError, ExecutionSource, ExitKind, StopReason};
use pt_sim::record::{record_sim, sideband_path, FilterSpec, SimRecording};

static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();

extern "C" fn on_sigint(_: libc::c_int) {
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
--decode: decode the trace with pt-decoder, compare it with the recorded execution and
          print branch counts and the hottest functions (ELF symbols)
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

fn run_sim(a: &Args) -> Result<ExitCode, String> {
    let out = a.out.clone().unwrap_or_default();
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let t0 = std::time::Instant::now();
    let mut shown = false;
    let mut last_shown = 0.0f64;
    let mut progress = |n: u64| {
        let now = t0.elapsed().as_secs_f64();
        if tty && now - last_shown >= 0.5 {
            last_shown = now;
            shown = true;
            eprint!(
                "\rptrec: {:.2} M instructions, {:.0} k/s ",
                n as f64 / 1e6,
                n as f64 / now.max(1e-9) / 1e3
            );
        }
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
    let mut source: Box<dyn ExecutionSource> = if let Some(log) = &a.replay {
        eprintln!("ptrec: replaying {} on the simulator", log.display());
        Box::new(LogReader::open(log).map_err(|e| format!("{}: {e}", log.display()))?)
    } else {
        rec.log = Some(log_path.clone());
        let (prog, args) = a.command.split_first().ok_or("no command")?;
        let res: Result<Box<dyn ExecutionSource>, ExecError> = if a.valgrind {
            eprintln!("ptrec: recording {prog} on the simulator (valgrind source)");
            ValgrindSource::record(prog, args, ValgrindOptions::default())
                .map(|s| Box::new(s) as Box<dyn ExecutionSource>)
        } else {
            eprintln!("ptrec: recording {prog} on the simulator (ptrace single-step source)");
            let flag = STOP
                .get_or_init(|| Arc::new(AtomicBool::new(false)))
                .clone();
            // SAFETY: installing a handler that only stores to an atomic.
            unsafe {
                libc::signal(
                    libc::SIGINT,
                    on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t,
                );
            }
            Tracer::spawn(
                prog,
                args,
                TraceOptions {
                    step_limit: a.limit,
                    stop_flag: Some(flag),
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
    let s = record_sim(source.as_mut(), &rec, &mut progress)?;
    if shown {
        eprintln!();
    }
    eprintln!(
        "ptrec: {} instructions ({} traced), {} trace bytes, {} PSB{}{}{} in {:.2} s ({:.2} M instructions/s)",
        s.instructions,
        s.traced,
        s.trace_bytes,
        s.psbs,
        if s.psbs == 1 { "" } else { "s" },
        match s.overflows {
            0 => String::new(),
            1 => ", 1 overflow".to_string(),
            n => format!(", {n} overflows"),
        },
        if s.lost_bytes > 0 { format!(", {} bytes lost", s.lost_bytes) } else { String::new() },
        s.seconds,
        s.instructions as f64 / s.seconds.max(1e-9) / 1e6
    );
    eprintln!(
        "ptrec: wrote {}, {}{}",
        out.display(),
        sideband_path(&out).display(),
        if rec.log.is_some() {
            format!(", {}", log_path.display())
        } else {
            String::new()
        }
    );
    if a.decode {
        let log = a.replay.clone().unwrap_or_else(|| log_path.clone());
        let t1 = std::time::Instant::now();
        let mut shown = false;
        let mut progress = |n: u64| {
            if tty {
                shown = true;
                eprint!(
                    "\rptrec: decoding: {:.2} M instructions, {:.1} s ",
                    n as f64 / 1e6,
                    t1.elapsed().as_secs_f64()
                );
            }
        };
        let (v, prof) =
            ptperf::verify::verify_profile(&out, &sideband_path(&out), &log, &mut progress)?;
        if shown {
            eprintln!();
        }
        println!(
            "decoded flow: {} instructions ({} recorded in the traced range) from {} image sections",
            v.decoded, v.expected, v.sections
        );
        println!(
            "  tracing enabled {} times, disabled {} times ({} asynchronously: interrupts, faults), {} overflows",
            v.enables, v.disables, v.async_disables, v.overflows
        );
        if v.identical() {
            println!("  identical to the recorded execution, instruction by instruction");
        } else {
            if let Some((i, got, want)) = v.first_difference {
                println!("  DIFFERS at instruction {i}: decoded {got:#x}, recorded {want:#x}");
            }
            if let Some(e) = &v.first_error {
                println!("  {} decode errors, the first: {e}", v.errors);
            }
            if v.decoded != v.expected {
                println!("  instruction counts differ");
            }
        }
        print!("{}", prof.report(a.top));
    }
    if let Some(e) = &s.source_error {
        eprintln!("ptrec: the recording ended early: {e}; the trace is kept up to there");
    }
    match s.stopped {
        Some(StopReason::Interrupted) => {
            eprintln!("ptrec: interrupted; the trace ends where the program was stopped")
        }
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
    Ok(ExitCode::SUCCESS)
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
