//! `ptperf record`: perf record for Intel PT, on a machine with PT (the
//! kernel's `intel_pt` PMU through the perf backend) or without (the
//! simulated PT CPU running the program), into a perf.data that perf reads.
//!
//! ```text
//! ptperf record [-e intel_pt/TERMS/[u|k|uk]] [-S[e][SIZE]] [--filter FILTER] [-o FILE]
//!               [--backend auto|perf|sim] [--source qemu|valgrind|ptrace|log] [--limit N]
//!               [--exec-log[=LOG]] [--decode [--top N]] [-q]
//!               [-p PID | [--] CMD ARGS... | --source log LOG]
//! ```
//!
//! - `-e`: perf's event syntax ([`event`]): `intel_pt//u` by default. Without
//!   `u` or `k` both levels are asked for; where the kernel cannot be traced
//!   (the simulator's ptrace and valgrind sources see user mode only) the
//!   event falls back to user space, as perf falls back to `u`, with a note.
//! - `-S`: snapshot mode: each AUX area is a ring the trace overwrites;
//!   SIGUSR2 takes a snapshot, `-Se` one at the end too; SIZE bytes per
//!   snapshot (the AUX area is SIZE rounded up to a power of two of pages;
//!   4 MiB without SIZE).
//! - `--filter`: perf's address filters
//!   (`filter|start|stop|tracestop START[/SIZE][@FILE]`, symbols allowed).
//! - `-o`: the output, `perf.data` by default (an existing one becomes
//!   `perf.data.old`, as perf does). `-o -` writes perf's pipe mode to
//!   standard output (`ptperf record -o - -- CMD | perf script -i -`) and, as
//!   perf does, gives the program standard error for its standard output;
//!   the recording is made in a temporary file and streamed out when it ends
//!   ([`pt_perf_data::write_pipe`]), and the code in no file (the vDSO) goes
//!   to the user's build-id cache (`~/.debug`), where readers of a pipe look.
//! - `--backend`: `auto` uses perf where Intel PT works, else the simulator.
//! - `--source` (simulator): `qemu` runs the program in QEMU's user-mode
//!   emulator with our TCG plugin (the fastest), `valgrind` runs it under valgrind, `ptrace` single-steps it,
//!   `log` replays an execution log (one an earlier recording wrote with
//!   `--exec-log`) with this recording's configuration: the one argument is
//!   the log.
//!   Without `--source` the first of qemu, valgrind and ptrace that is
//!   installed records (ptrace with `--limit`), and the summary line says which.
//! - `--exec-log[=LOG]` (simulator): also writes the execution log, the
//!   ground truth of what ran (every block of every thread), to LOG
//!   (`OUT.log` by default): what `--decode` compares with, and what
//!   `--source log` replays. Without it (or `--decode`) no log is written and
//!   the recorder does no log work: writing it costs a quarter to a third of
//!   the recorder's time.
//! - `--decode`: decodes every thread's trace back and compares it with its
//!   recorded execution (exit status 1 on a difference), then prints branch
//!   counts and the `--top N` hottest functions. It writes the execution log
//!   (as `--exec-log` does) and keeps it.
//!
//! On the simulator, code that is in no file is kept as `OUT.debug` (see
//! [`pt_sim::record::PerfDataSink`]); `perf --buildid-dir OUT.debug script`
//! finds the vDSO there.
//!
//! Ctrl-C (SIGINT) or SIGTERM stops the recording; what was recorded is
//! kept. As perf record does, the command ends with the program's exit
//! status, or dies of the signal that killed the program (or stopped the
//! recording), after its closing lines on stderr.

pub mod event;
mod hw;
mod qemu_plugin;
mod sim;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use pt_sim::record::{FilterSpec, SnapshotOptions};

pub use event::PtEvent;

/// Usage text.
pub const USAGE: &str = "\
 Usage: ptperf record [<options>] [<command>]
    or: ptperf record [<options>] -- <command> [<options>]

    -e, --event <event>   event selector: intel_pt/TERMS/[u|k|uk] (default intel_pt//u)
        --filter <filter>
                          address filters: filter|start|stop|tracestop <start> [/ <size>] [@<file>]
    -o, --output <file>   output file name (default perf.data)
    -S, --snapshot[=<opts>]
                          AUX area tracing snapshot mode: [e][SIZE]; SIGUSR2 takes a snapshot
    -p, --pid <pid>       record an existing process (perf backend)
        --backend <auto|perf|sim>
                          Intel PT hardware through perf, or the simulated PT CPU
        --source <qemu|valgrind|ptrace|log>
                          simulator: QEMU with our plugin, valgrind, single-step, or replay
                          an execution log (default: the first of qemu, valgrind, ptrace installed)
        --limit <n>       simulator (ptrace): stop after n instructions
        --exec-log[=<file>]
                          simulator: also write the execution log (what ran, block by
                          block) to <file> (default <output>.log): the ground truth that
                          --decode compares with and that --source log replays
        --decode          decode every thread and compare it with its recorded execution
                          (writes the execution log, as --exec-log does)
        --top <n>         with --decode: the n hottest functions (default 10)
    -q, --quiet           no summary or closing lines (warnings are still printed)
";

/// Which backend records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// perf where Intel PT works, else the simulator.
    Auto,
    /// The kernel's intel_pt PMU.
    Perf,
    /// The simulated PT CPU.
    Sim,
}

/// The simulator's execution source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The first of qemu, valgrind and ptrace that is installed.
    Auto,
    /// QEMU user mode with the plugin.
    Qemu,
    /// Single-stepping with ptrace.
    Ptrace,
    /// valgrind.
    Valgrind,
    /// An execution log replayed.
    Log,
}

/// `ptperf record`'s options.
#[derive(Clone, Debug)]
pub struct Options {
    /// The event.
    pub event: PtEvent,
    /// Whether `-e` was given (else the default applies).
    pub event_given: bool,
    /// `--filter`, as typed.
    pub filter: Option<String>,
    /// Address filters, resolved.
    pub filters: Vec<FilterSpec>,
    /// `-S`.
    pub snapshot: Option<SnapshotOptions>,
    /// `-o`.
    pub output: PathBuf,
    /// `-p`.
    pub pid: Option<i32>,
    /// `--backend`.
    pub backend: Backend,
    /// `--source`.
    pub source: Source,
    /// `--limit`.
    pub limit: Option<u64>,
    /// `--exec-log`: where the execution log goes (see
    /// [`Options::exec_log_path`]).
    pub exec_log: Option<ExecLog>,
    /// `--decode`.
    pub decode: bool,
    /// `--top`.
    pub top: usize,
    /// `-q`.
    pub quiet: bool,
    /// The command (or, with `--source log`, the log).
    pub command: Vec<OsString>,
    /// The whole command line (HEADER_CMDLINE).
    pub cmdline: Vec<String>,
}

/// Where `--exec-log` writes the execution log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecLog {
    /// `OUT.log`, beside the output ([`log_path`]).
    BesideOutput,
    /// `--exec-log=FILE`.
    File(PathBuf),
}

impl Options {
    /// The execution log this recording writes: `--exec-log`'s, or with
    /// `--decode` (which compares with it) `OUT.log`; none otherwise, nor
    /// when a log is replayed.
    pub fn exec_log_path(&self) -> Option<PathBuf> {
        if self.source == Source::Log {
            return None;
        }
        match &self.exec_log {
            Some(ExecLog::File(f)) => Some(f.clone()),
            Some(ExecLog::BesideOutput) => Some(log_path(&self.output)),
            None => self.decode.then(|| log_path(&self.output)),
        }
    }
}

/// A command-line error: the message (perf's lines where perf has them) and
/// whether the usage follows.
#[derive(Debug)]
struct ArgError(String, bool);

fn bad(msg: impl Into<String>) -> ArgError {
    ArgError(msg.into(), true)
}

fn number(s: &str) -> Option<u64> {
    if let Some(h) = s.strip_prefix("0x").or(s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else {
        s.parse().ok()
    }
}

/// `-S` options: `[e][SIZE]`.
fn snapshot_opts(s: &str) -> Result<SnapshotOptions, ArgError> {
    let (on_exit, size) = match s.strip_prefix('e') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let size = if size.is_empty() {
        0
    } else {
        number(size).ok_or_else(|| {
            ArgError(
                format!("Invalid snapshot option: '{s}' (failed to parse AUX area tracing snapshot options: [e][SIZE])"),
                false,
            )
        })?
    };
    Ok(SnapshotOptions::perf(size, on_exit))
}

fn parse_args(args: &[OsString]) -> Result<Options, ArgError> {
    let mut o = Options {
        event: PtEvent::default_user(),
        event_given: false,
        filter: None,
        filters: Vec::new(),
        snapshot: None,
        output: PathBuf::from("perf.data"),
        pid: None,
        backend: Backend::Auto,
        source: Source::Auto,
        limit: None,
        exec_log: None,
        decode: false,
        top: 10,
        quiet: false,
        command: Vec::new(),
        cmdline: std::iter::once("ptperf".to_string())
            .chain(std::iter::once("record".to_string()))
            .chain(args.iter().map(|a| a.to_string_lossy().into_owned()))
            .collect(),
    };
    let mut i = 0;
    while i < args.len() {
        let Some(arg) = args[i].to_str() else {
            o.command = args[i..].to_vec();
            break;
        };
        i += 1;
        if arg == "--" {
            o.command = args[i..].to_vec();
            break;
        }
        if !arg.starts_with('-') || arg == "-" {
            // perf stops at the first word that is not an option.
            o.command = args[i - 1..].to_vec();
            break;
        }
        // `--name=value`, `--name value`, `-xVALUE`, `-x VALUE`.
        let (name, inline): (&str, Option<&str>) = if let Some(long) = arg.strip_prefix("--") {
            match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            }
        } else {
            let (n, v) = arg[1..].split_at(1.min(arg.len() - 1));
            (n, (!v.is_empty()).then_some(v))
        };
        let mut value = |what: &str| -> Result<String, ArgError> {
            if let Some(v) = inline {
                return Ok(v.to_string());
            }
            let v = args
                .get(i)
                .and_then(|a| a.to_str())
                .ok_or_else(|| bad(format!("switch `{name}' requires a value ({what})")))?;
            i += 1;
            Ok(v.to_string())
        };
        match name {
            "h" | "help" => return Err(ArgError(String::new(), true)),
            "e" | "event" => {
                let ev = value("an event")?;
                o.event = event::parse(&ev).map_err(|e| ArgError(e.0, false))?;
                o.event_given = true;
            }
            "filter" => o.filter = Some(value("a filter")?),
            "o" | "output" => o.output = PathBuf::from(value("a file")?),
            "S" | "snapshot" => o.snapshot = Some(snapshot_opts(inline.unwrap_or(""))?),
            "p" | "pid" => {
                let v = value("a pid")?;
                o.pid = Some(v.parse().map_err(|_| bad(format!("invalid pid `{v}'")))?);
            }
            "backend" => {
                o.backend = match value("auto|perf|sim")?.as_str() {
                    "auto" => Backend::Auto,
                    "perf" => Backend::Perf,
                    "sim" => Backend::Sim,
                    b => return Err(bad(format!("unknown backend `{b}' (auto, perf or sim)"))),
                }
            }
            "source" => {
                o.source = match value("qemu|valgrind|ptrace|log")?.as_str() {
                    "qemu" => Source::Qemu,
                    "ptrace" => Source::Ptrace,
                    "valgrind" => Source::Valgrind,
                    "log" => Source::Log,
                    s => {
                        return Err(bad(format!(
                            "unknown source `{s}' (qemu, valgrind, ptrace or log)"
                        )))
                    }
                }
            }
            "limit" => {
                let v = value("a count")?;
                o.limit = Some(number(&v).ok_or_else(|| bad(format!("invalid limit `{v}'")))?);
            }
            "exec-log" => {
                o.exec_log = Some(inline.map_or(ExecLog::BesideOutput, |f| ExecLog::File(f.into())))
            }
            "decode" => o.decode = true,
            "top" => {
                let v = value("a count")?;
                o.top = v.parse().map_err(|_| bad(format!("invalid count `{v}'")))?;
                o.decode = true;
            }
            "q" | "quiet" => o.quiet = true,
            "per-thread" => {}
            _ => return Err(bad(format!("unknown option `{name}'"))),
        }
    }
    if o.exec_log.is_some() && o.source == Source::Log {
        return Err(bad(
            "--exec-log: --source log replays an execution log and writes none",
        ));
    }
    match &o.exec_log {
        Some(ExecLog::File(f)) if f.as_os_str().is_empty() => {
            return Err(bad("--exec-log= needs a file name"));
        }
        // With `-o -` the default log would land in the pipe's temporary
        // folder and go with it: `--exec-log` asks to keep it.
        Some(ExecLog::BesideOutput) if o.output.as_os_str() == "-" => {
            return Err(bad("--exec-log with -o - needs a file: --exec-log=FILE"));
        }
        _ => {}
    }
    if let Some(f) = &o.filter {
        o.filters = FilterSpec::parse_list(f).map_err(|e| ArgError(e.0, false))?;
    }
    if o.pid.is_some() && !o.command.is_empty() {
        return Err(bad("either -p PID or a command, not both"));
    }
    if o.pid.is_none() && o.command.is_empty() {
        return Err(bad(if o.source == Source::Log {
            "--source log needs the execution log to replay"
        } else {
            "no command given (and system-wide recording is not supported)"
        }));
    }
    Ok(o)
}

/// What a recording ended with.
pub struct Outcome {
    /// How the program ended: exit code or killing signal.
    pub status: ProgramEnd,
    /// The signal that stopped the recording, if one did.
    pub interrupted: Option<i32>,
    /// Whether `--decode` found every thread identical (true without it).
    pub decoded_ok: bool,
}

/// How the recorded program ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgramEnd {
    /// Exited with this code.
    Exited(i32),
    /// Killed by this signal.
    Killed(i32),
    /// Unknown (still running, or replayed).
    Unknown,
}

static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();
static STOP_SIGNAL: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
static SNAPSHOT: OnceLock<Arc<AtomicBool>> = OnceLock::new();

extern "C" fn on_interrupt(sig: libc::c_int) {
    STOP_SIGNAL.store(sig, Ordering::Relaxed);
    if let Some(f) = STOP.get() {
        f.store(true, Ordering::Relaxed);
    }
}

extern "C" fn on_snapshot(_: libc::c_int) {
    if let Some(f) = SNAPSHOT.get() {
        f.store(true, Ordering::Relaxed);
    }
}

fn install(sig: libc::c_int, handler: extern "C" fn(libc::c_int)) {
    // SAFETY: handlers that only store to atomics; no SA_RESTART, so that a
    // wait is interrupted and the recorder sees the flag.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as libc::sighandler_t;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0;
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

/// SIGINT and SIGTERM stop the recording: the flag they set.
pub(crate) fn catch_interrupts() -> Arc<AtomicBool> {
    let flag = STOP
        .get_or_init(|| Arc::new(AtomicBool::new(false)))
        .clone();
    install(libc::SIGINT, on_interrupt);
    install(libc::SIGTERM, on_interrupt);
    flag
}

/// SIGUSR2 requests a snapshot: the flag it sets.
pub(crate) fn catch_snapshot_signal() -> Arc<AtomicBool> {
    let flag = SNAPSHOT
        .get_or_init(|| Arc::new(AtomicBool::new(false)))
        .clone();
    install(libc::SIGUSR2, on_snapshot);
    flag
}

/// The signal that stopped the recording, if any.
pub(crate) fn stop_signal() -> Option<i32> {
    match STOP_SIGNAL.load(Ordering::Relaxed) {
        0 => None,
        s => Some(s),
    }
}

/// `OUT.log`: the simulator's execution log beside the output (written
/// with `--exec-log` or `--decode`).
pub fn log_path(out: &Path) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".log");
    PathBuf::from(s)
}

/// perf's backup of an existing output: `FILE.old`.
fn backup(out: &Path) -> Result<(), String> {
    match std::fs::metadata(out) {
        Ok(m) if m.len() > 0 || m.is_dir() => {
            let mut old = out.as_os_str().to_owned();
            old.push(".old");
            std::fs::rename(out, &old).map_err(|e| format!("{}: {e}", out.display()))
        }
        _ => Ok(()),
    }
}

/// Set in pipe mode (`-o -`): the output is standard output.
static PIPE: AtomicBool = AtomicBool::new(false);

/// perf's closing lines (in pipe mode perf names the output `-` and counts
/// no bytes).
pub(crate) fn closing_lines(out: &Path, wakeups: u64) {
    let pipe = PIPE.load(Ordering::Relaxed);
    let size = if pipe {
        0
    } else {
        std::fs::metadata(out).map_or(0, |m| m.len())
    };
    eprintln!("[ perf record: Woken up {wakeups} times to write data ]");
    eprintln!(
        "[ perf record: Captured and wrote {:.3} MB {} ]",
        size as f64 / 1024.0 / 1024.0,
        if pipe { Path::new("-") } else { out }.display()
    );
}

/// Pipe mode (`-o -`): the recording is made in a temporary folder, and
/// standard output is kept apart for it while the program writes its
/// standard output to standard error (as perf's workload does).
struct PipeOut {
    dir: PathBuf,
    stdout: std::os::fd::OwnedFd,
}

impl PipeOut {
    fn start() -> Result<(Self, PathBuf), String> {
        use std::os::fd::FromRawFd;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!("ptperf-pipe-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        // SAFETY: duplicating our own standard descriptors.
        let saved = unsafe { libc::dup(1) };
        if saved < 0 || unsafe { libc::dup2(2, 1) } < 0 {
            let _ = std::fs::remove_dir(&dir);
            return Err(format!(
                "standard output: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: `saved` is a descriptor of ours that nothing else owns.
        let stdout = unsafe { std::os::fd::OwnedFd::from_raw_fd(saved) };
        let out = dir.join("perf.data");
        PIPE.store(true, Ordering::Relaxed);
        Ok((PipeOut { dir, stdout }, out))
    }

    /// Streams the recording out in pipe mode, keeps its code copies in the
    /// user's build-id cache, and removes the temporary folder.
    fn finish(self) -> Result<(), String> {
        let data = self.dir.join("perf.data");
        let r = Self::stream(&data, self.stdout);
        let mut debug = data.clone().into_os_string();
        debug.push(".debug");
        let debug = PathBuf::from(debug);
        let kept = match pt_perf::session::default_buildid_dir() {
            Some(cache) if debug.is_dir() => copy_tree(&debug, &cache)
                .map_err(|e| format!("build-id cache {}: {e}", cache.display())),
            _ => Ok(()),
        };
        let _ = std::fs::remove_dir_all(&self.dir);
        r.and(kept)
    }

    fn stream(data: &Path, stdout: std::os::fd::OwnedFd) -> Result<(), String> {
        let file =
            pt_perf_data::MappedFile::open(data).map_err(|e| format!("{}: {e}", data.display()))?;
        let perf = file
            .parse()
            .map_err(|e| format!("{}: {e}", data.display()))?;
        let out = std::io::BufWriter::with_capacity(1 << 16, std::fs::File::from(stdout));
        match pt_perf_data::write_pipe(&perf, out) {
            Ok(_) => Ok(()),
            // A reader that went away: perf ends quietly too.
            Err(e) if e.kind == pt_perf_data::ErrorKind::Io(std::io::ErrorKind::BrokenPipe) => {
                Ok(())
            }
            Err(e) => Err(format!("standard output: {e}")),
        }
    }
}

/// Copies the files and links under `from` into `to` (those `to` has are kept).
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let ty = e.file_type()?;
        if ty.is_dir() {
            copy_tree(&src, &dst)?;
        } else if std::fs::symlink_metadata(&dst).is_ok() {
            continue;
        } else if ty.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}

/// The name of a signal, for messages.
pub(crate) fn signame(s: i32) -> String {
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

/// Dies of `sig` (its default action), as perf record does when the
/// program was killed or the recording was interrupted.
fn die_of(sig: i32) -> ExitCode {
    // SAFETY: no core file (the signal is the program's or the user's, not
    // a fault of ours), the default action restored, the signal raised on
    // ourselves.
    unsafe {
        let none = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &none);
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
    // A signal whose default is to be ignored: exit as a shell reports it.
    ExitCode::from((128 + sig).clamp(0, 255) as u8)
}

/// Runs `ptperf record` with the arguments after `record`.
pub fn main(args: &[OsString]) -> ExitCode {
    if let [only] = args {
        if only == "--version" {
            crate::print_version();
            return ExitCode::SUCCESS;
        }
    }
    let mut o = match parse_args(args) {
        Ok(o) => o,
        Err(ArgError(msg, usage)) => {
            if !msg.is_empty() {
                eprintln!("ptperf record: {}", msg.trim_start());
            }
            if usage {
                if !msg.is_empty() {
                    eprintln!();
                }
                eprint!("{USAGE}");
            }
            return ExitCode::from(129);
        }
    };
    let backend = match o.backend {
        Backend::Auto if o.source == Source::Log => Backend::Sim,
        Backend::Auto => {
            let (_, _, ready) = pt_hal::probe::Readiness::host();
            if ready.can_trace() {
                Backend::Perf
            } else {
                // Informational: where PT cannot work, the simulator is the normal case.
                if !o.quiet {
                    eprintln!(
                        "ptperf record: {}; recording on the simulated PT CPU",
                        ready.summary()
                    );
                }
                Backend::Sim
            }
        }
        b => b,
    };
    let mut pipe = None;
    if o.output.as_os_str() == "-" {
        match PipeOut::start() {
            Ok((p, out)) => {
                o.output = out;
                pipe = Some(p);
            }
            Err(e) => {
                eprintln!("ptperf record: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    // As perf: the output's folder must exist (no folder is made).
    if let Some(dir) = o.output.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.is_dir() {
            eprintln!(
                "ptperf record: {}: cannot create it: folder {} does not exist",
                o.output.display(),
                dir.display()
            );
            return ExitCode::FAILURE;
        }
    }
    if let Err(e) = backup(&o.output) {
        eprintln!("ptperf record: {e}");
        return ExitCode::FAILURE;
    }
    let r = match backend {
        Backend::Perf if o.source == Source::Log => {
            Err("replaying an execution log (--source log) needs the simulator".to_string())
        }
        Backend::Perf => {
            if o.exec_log.is_some() {
                eprintln!("ptperf record: warning: --exec-log: Intel PT hardware records no execution log (the simulator does: --backend sim)");
            }
            hw::record(&o)
        }
        _ => sim::record(&o),
    };
    if let Some(p) = pipe {
        // What was recorded goes out, also when the recording failed late.
        if let Err(e) = p.finish() {
            if r.is_ok() {
                eprintln!("ptperf record: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let outcome = match r {
        Ok(x) => x,
        Err(e) => {
            eprintln!("ptperf record: {e}");
            return ExitCode::FAILURE;
        }
    };
    if !outcome.decoded_ok {
        return ExitCode::FAILURE;
    }
    if let Some(sig) = outcome.interrupted {
        return die_of(sig);
    }
    match outcome.status {
        ProgramEnd::Exited(c) => ExitCode::from(c.clamp(0, 255) as u8),
        ProgramEnd::Killed(sig) => die_of(sig),
        ProgramEnd::Unknown => ExitCode::SUCCESS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<OsString> {
        s.iter().map(OsString::from).collect()
    }

    #[test]
    fn perfs_option_syntax() {
        let o = parse_args(&args(&[
            "-e",
            "intel_pt/cyc/u",
            "-Se16384",
            "-otest.data",
            "ls",
            "-l",
        ]))
        .unwrap();
        assert_eq!(o.event.config & pt_perf_data::intel_pt::config::CYC, 2);
        let s = o.snapshot.unwrap();
        assert_eq!((s.aux_size, s.size, s.on_exit), (16384, 16384, true));
        assert_eq!(o.output, PathBuf::from("test.data"));
        assert_eq!(o.command, args(&["ls", "-l"]));
        let o = parse_args(&args(&["--snapshot", "--output=x", "--", "true"])).unwrap();
        assert_eq!(o.snapshot.unwrap().aux_size, 4 << 20);
        assert_eq!(o.output, PathBuf::from("x"));
        let o = parse_args(&args(&["-S", "true"])).unwrap();
        assert_eq!(o.command, args(&["true"]));
        assert!(parse_args(&args(&["--bogus", "true"])).is_err());
        assert!(parse_args(&args(&[])).is_err());
        assert!(parse_args(&args(&["-p", "1", "true"])).is_err());
        let e = parse_args(&args(&["-Sx", "true"])).unwrap_err().0;
        assert!(e.contains("Invalid snapshot option"), "{e}");
        let e = parse_args(&args(&["--filter", "jump 1", "true"]))
            .unwrap_err()
            .0;
        assert!(
            e.contains("failed to parse address filter: 'jump 1'"),
            "{e}"
        );
    }

    #[test]
    fn the_execution_log_is_written_only_when_asked_for() {
        let log = |a: &[&str]| parse_args(&args(a)).unwrap().exec_log_path();
        assert_eq!(log(&["-o", "x.data", "true"]), None);
        assert_eq!(
            log(&["-o", "x.data", "--exec-log", "true"]),
            Some(PathBuf::from("x.data.log"))
        );
        assert_eq!(
            log(&["--exec-log=/tmp/run.log", "-o", "x.data", "true"]),
            Some(PathBuf::from("/tmp/run.log"))
        );
        // --decode compares with the log: it writes one.
        assert_eq!(
            log(&["-o", "x.data", "--decode", "true"]),
            Some(PathBuf::from("x.data.log"))
        );
        assert_eq!(
            log(&["--top", "3", "true"]),
            Some(PathBuf::from("perf.data.log"))
        );
        // A replay writes none: the log it replays is the truth.
        assert_eq!(
            log(&["--source", "log", "--decode", "-o", "y", "x.data.log"]),
            None
        );
        let e = parse_args(&args(&["--source", "log", "--exec-log", "a.log"]))
            .unwrap_err()
            .0;
        assert!(e.contains("writes none"), "{e}");
        let e = parse_args(&args(&["-o", "-", "--exec-log", "true"]))
            .unwrap_err()
            .0;
        assert!(e.contains("--exec-log=FILE"), "{e}");
        assert!(parse_args(&args(&["--exec-log=", "true"])).is_err());
    }
}
