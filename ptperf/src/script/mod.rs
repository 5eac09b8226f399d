//! `ptperf script`: perf script's text for an Intel PT recording, from the
//! samples [`pt_perf::synth`] synthesizes, byte for byte as perf 6.1 prints them.

pub mod fields;
mod pair_texts;
pub(crate) mod print;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use pt_perf::session::SessionOptions;

use crate::input::{self, Outcome};
use fields::Selection;
pub use print::Printer;
pub mod xed;
use pt_perf::code::CodeWalker;
use pt_perf::decode::{PlainInsn, Step};
use pt_perf::itrace::SynthOpts;
use pt_perf::sample::Sample;
use pt_perf::synth::{each_branch, each_insn, Event, Flow, SampleSink, Stacks, Synth};

/// `ptperf script`'s command line (perf script's options for Intel PT).
#[derive(Parser, Debug)]
#[command(
    name = "ptperf script",
    about = "Read perf.data and display its Intel PT trace as perf script does",
    after_help = crate::input::EXIT_STATUS
)]
pub struct Args {
    /// input file name
    #[arg(short = 'i', long = "input", default_value = "perf.data")]
    pub input: String,
    /// Instruction Tracing options (perf's --itrace letters: i b c r x w p e d g l s q A Z)
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub itrace: Option<String>,
    /// comma separated output fields; +field adds, -field removes
    #[arg(short = 'F', long = "fields", allow_hyphen_values = true)]
    pub fields: Vec<String>,
    /// Decode instructions from itrace (raw: bytes; disasm: XED's text)
    #[arg(long = "insn-trace", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub insn_trace: Option<String>,
    /// Show instruction bytes as XED's AT&T text (perf pipes through `xed`; ours is built in)
    #[arg(long = "xed")]
    pub xed: bool,
    /// Decode calls from itrace
    #[arg(long = "call-trace")]
    pub call_trace: bool,
    /// Decode calls and returns from itrace
    #[arg(long = "call-ret-trace")]
    pub call_ret_trace: bool,
    /// Use 9 decimal places when displaying time
    #[arg(long = "ns")]
    pub ns: bool,
    /// Show time stamps relative to start
    #[arg(long = "reltime")]
    pub reltime: bool,
    /// Show time stamps relative to previous event
    #[arg(long = "deltatime")]
    pub deltatime: bool,
    /// list of cpus to profile
    #[arg(short = 'C', long = "cpu")]
    pub cpu: Option<String>,
    /// only consider events for these comma separated thread ids
    #[arg(long = "tid")]
    pub tid: Option<String>,
    /// only consider events for these comma separated process ids
    #[arg(long = "pid")]
    pub pid: Option<String>,
    /// Time span of interest (start,stop)
    #[arg(long = "time")]
    pub time: Option<String>,
    /// look for files under this directory
    #[arg(long = "symfs")]
    pub symfs: Option<String>,
    /// Show full source file name path for source lines
    #[arg(long = "full-source-path")]
    pub full_source_path: bool,
    /// Disable symbol demangling
    #[arg(long = "no-demangle")]
    pub no_demangle: bool,
    /// One JSON object per sample (and per error) instead of perf's text
    #[arg(long = "json")]
    pub json: bool,
    /// The order `--insn-trace`, `--call-trace`, `--call-ret-trace`,
    /// `--itrace` and each `-F` came in ([`Args::parse_ordered`]); empty:
    /// that order.
    #[arg(skip)]
    pub order: Vec<Ordered>,
}

/// An option perf applies where it stands on the command line: a later one
/// changes what an earlier one chose ("The arguments are processed in the
/// order received", perf-script(1) of `-F`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ordered {
    /// `--insn-trace`.
    InsnTrace,
    /// `--call-trace`.
    CallTrace,
    /// `--call-ret-trace`.
    CallRetTrace,
    /// `--itrace`.
    Itrace,
    /// The `-F` of this number.
    Fields(usize),
}

impl Args {
    /// `argv` parsed, with the order of the options perf applies in order.
    pub fn parse_ordered(argv: Vec<OsString>) -> Result<Self, clap::Error> {
        use clap::{CommandFactory, FromArgMatches};
        let m = Self::command().try_get_matches_from(argv)?;
        let mut a = Self::from_arg_matches(&m)?;
        let mut at: Vec<(usize, Ordered)> = Vec::new();
        for (id, o) in [
            ("insn_trace", Ordered::InsnTrace),
            ("call_trace", Ordered::CallTrace),
            ("call_ret_trace", Ordered::CallRetTrace),
            ("itrace", Ordered::Itrace),
        ] {
            // A flag not given has its default's index (none).
            if m.value_source(id) == Some(clap::parser::ValueSource::CommandLine) {
                if let Some(i) = m.index_of(id) {
                    at.push((i, o));
                }
            }
        }
        if let Some(ix) = m.indices_of("fields") {
            at.extend(ix.enumerate().map(|(k, i)| (i, Ordered::Fields(k))));
        }
        at.sort_by_key(|&(i, _)| i);
        a.order = at.into_iter().map(|(_, o)| o).collect();
        Ok(a)
    }

    /// The options perf applies in order, in the order given.
    fn ordered(&self) -> Vec<Ordered> {
        if !self.order.is_empty() {
            return self.order.clone();
        }
        let mut v = Vec::new();
        v.extend(self.insn_trace.is_some().then_some(Ordered::InsnTrace));
        v.extend(self.call_trace.then_some(Ordered::CallTrace));
        v.extend(self.call_ret_trace.then_some(Ordered::CallRetTrace));
        v.extend(self.itrace.is_some().then_some(Ordered::Itrace));
        v.extend((0..self.fields.len()).map(Ordered::Fields));
        v
    }
}

/// A comma-separated list of numbers (perf's cpu/tid lists, `a-b` ranges too).
pub(crate) fn parse_list(s: &str, what: &str) -> Result<Vec<u32>, String> {
    let mut v = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let bad = || format!("Invalid {what} list: '{s}'");
        match part.split_once('-') {
            Some((a, b)) => {
                let a: u32 = a.trim().parse().map_err(|_| bad())?;
                let b: u32 = b.trim().parse().map_err(|_| bad())?;
                if b < a {
                    return Err(bad());
                }
                v.extend(a..=b);
            }
            None => v.push(part.trim().parse().map_err(|_| bad())?),
        }
    }
    Ok(v)
}

/// What a sample line's time counts from (perf script's `--reltime` and
/// `--deltatime`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimeFrom {
    /// The recording's clock, as recorded.
    #[default]
    Clock,
    /// The first sample printed.
    FirstSample,
    /// The sample printed before (0 for the first).
    PreviousSample,
}

/// A `--time` range: start and end in perf time (ns), either open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeRange {
    /// Start (0: open).
    pub start: u64,
    /// End (0: open).
    pub end: u64,
}

/// `sec.frac` seconds to ns (perf's `parse_nsec_time`).
fn parse_nsec(s: &str) -> Option<u64> {
    let (sec, frac) = s.split_once('.').unwrap_or((s, ""));
    let sec: u64 = sec.parse().ok()?;
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut ns = 0u64;
    if !frac.is_empty() {
        ns = frac.parse().ok()?;
        for _ in frac.len()..9 {
            ns *= 10;
        }
    }
    sec.checked_mul(1_000_000_000)?.checked_add(ns)
}

/// Parses perf's `--time start,stop` (absolute times; either may be empty).
pub fn parse_time(s: &str) -> Result<TimeRange, crate::Error> {
    time_range(s).map_err(crate::Error::Usage)
}

fn time_range(s: &str) -> Result<TimeRange, String> {
    let bad = || format!("Invalid time string '{s}'");
    let (a, b) = s.split_once(',').ok_or_else(bad)?;
    let start = if a.trim().is_empty() {
        0
    } else {
        parse_nsec(a.trim()).ok_or_else(bad)?
    };
    let end = if b.trim().is_empty() {
        0
    } else {
        parse_nsec(b.trim()).ok_or_else(bad)?
    };
    if end != 0 && end < start {
        return Err(bad());
    }
    Ok(TimeRange { start, end })
}

/// Runs `ptperf script ARGS` (the arguments after `script`).
pub fn main(args: &[OsString]) -> ExitCode {
    crate::reading_with("ptperf script", args, Args::parse_ordered, |a| run(&a))
}

/// What `ptperf script` was asked for, checked.
pub struct Plan {
    /// The --itrace options.
    pub opts: SynthOpts,
    /// The fields.
    pub sel: Selection,
    /// Nanosecond times.
    pub ns: bool,
    /// What the time column counts from (`--reltime`, `--deltatime`).
    pub time_from: TimeFrom,
    /// Only these threads.
    pub tids: Option<Vec<u32>>,
    /// Only these processes.
    pub pids: Option<Vec<u32>>,
    /// Only these CPUs.
    pub cpus: Option<Vec<u32>>,
    /// The time range.
    pub time: Option<TimeRange>,
    /// Pad dso names to 50 columns (`--call-trace`).
    pub pad_dso: bool,
    /// How symbols are loaded and named (`--no-demangle`, `--symfs`).
    pub symbols: pt_elf::SymbolOptions,
    /// Instruction bytes disassembled (`--xed`, `--insn-trace=disasm`).
    pub xed: bool,
    /// What perf warns of while reading the options (stderr).
    pub warnings: Vec<String>,
}

impl Plan {
    /// The plan for `a` (perf's error line for bad options).
    pub fn new(a: &Args) -> Result<Self, crate::Error> {
        Self::checked(a).map_err(crate::Error::Usage)
    }

    fn checked(a: &Args) -> Result<Self, String> {
        let mut sel = Selection::default();
        let mut opts = SynthOpts::default();
        let mut ns = a.ns;
        let mut xed = a.xed;
        let mut warnings = Vec::new();
        for o in a.ordered() {
            match o {
                Ordered::InsnTrace => {
                    match a.insn_trace.as_deref().unwrap_or("") {
                        "" | "raw" => {}
                        // perf 6.1 disassembles with capstone, where it was
                        // built with it; we print XED's text, as for `--xed`.
                        "disasm" => xed = true,
                        _ => return Err("Only accept raw|disasm".into()),
                    }
                    sel.parse("+insn,-event,-period").map_err(|e| e.0)?;
                    opts.parse_into("i0nse").map_err(|e| e.to_string())?;
                    ns = true;
                }
                Ordered::CallTrace => {
                    sel.parse("-ip,-addr,-event,-period,+callindent")
                        .map_err(|e| e.0)?;
                    opts.parse_into("cewp").map_err(|e| e.to_string())?;
                    ns = true;
                }
                Ordered::CallRetTrace => {
                    sel.parse("-ip,-addr,-event,-period,+callindent,+flags")
                        .map_err(|e| e.0)?;
                    opts.parse_into("crewp").map_err(|e| e.to_string())?;
                    ns = true;
                }
                Ordered::Itrace => match a.itrace.as_deref().unwrap_or("") {
                    "" => {
                        let set = SynthOpts::default_for(true);
                        opts = SynthOpts { set: true, ..set };
                    }
                    s => opts.parse_into(s).map_err(|e| e.to_string())?,
                },
                Ordered::Fields(k) => {
                    let f = &a.fields[k];
                    warnings.extend(sel.override_warning(f));
                    sel.parse(f).map_err(|e| e.0)?;
                }
            }
        }
        if sel
            .out
            .iter()
            .any(|o| o.fields & fields::f::CALLINDENT != 0)
        {
            opts.thread_stack = true;
        }
        let tids = a.tid.as_deref().map(|s| parse_list(s, "tid")).transpose()?;
        let pids = a.pid.as_deref().map(|s| parse_list(s, "pid")).transpose()?;
        let cpus = a.cpu.as_deref().map(|s| parse_list(s, "cpu")).transpose()?;
        let time = a.time.as_deref().map(parse_time).transpose()?;
        let time_from = match (a.reltime, a.deltatime) {
            (true, true) => return Err("reltime and deltatime - the two don't get along well. Please limit to --reltime or --deltatime.".into()),
            // perf takes --time as relative then, from the first sample time
            // of a header feature that neither perf nor we write for Intel PT.
            (true, false) if time.is_some() => return Err("--time with --reltime: this perf.data has no first sample time (perf says the same)".into()),
            (true, false) => TimeFrom::FirstSample,
            (false, true) => TimeFrom::PreviousSample,
            (false, false) => TimeFrom::Clock,
        };
        let symbols = pt_elf::SymbolOptions {
            demangle: !a.no_demangle,
            search: pt_elf::DebugSearch {
                symfs: a.symfs.as_ref().map(Into::into),
            },
        };
        Ok(Plan {
            symbols,
            pad_dso: a.call_trace,
            opts,
            sel,
            ns,
            time_from,
            tids,
            pids,
            cpus,
            time,
            xed,
            warnings,
        })
    }
}

/// The decoding options of `plan` for `input` (with `--symfs`), and this
/// machine's vdso copy they name (keep it while decoding).
pub(crate) fn session_options(
    input: &str,
    plan: &Plan,
    symfs: Option<&str>,
) -> (SessionOptions, Option<pt_elf::vdso::OwnVdso>) {
    let mut so = SessionOptions::for_file(input);
    so.timeless = plan.opts.timeless_decoding;
    so.cpus = plan.cpus.clone();
    if let Some(s) = symfs {
        so.sysroot = Some(s.into());
    }
    // As perf does, this machine's own vdso stands in for a recorded one no
    // build-id cache holds.
    let vdso = pt_elf::vdso::OwnVdso::new();
    if let Some(v) = &vdso {
        so.vdso.push(("[vdso]".into(), v.path().to_path_buf()));
    }
    (so, vdso)
}

/// A sample that is filtered or printed as JSON, or an error.
#[inline(never)]
fn other_event(
    printer: &mut Printer<'_, '_>,
    e: Event<'_>,
    json: bool,
    keep: &dyn Fn(i32, i32, Option<u64>) -> bool,
    errors: &mut u64,
) {
    match e {
        Event::Sample(s, st) => {
            if keep(s.tid, s.pid, s.time) {
                if json {
                    printer.json(s, st);
                } else {
                    printer.sample_with(s, st);
                }
            }
        }
        Event::Error(e) => {
            *errors += 1;
            if keep(e.tid, e.pid, (e.time != 0).then_some(e.time)) {
                if json {
                    printer.json_error(e);
                } else {
                    printer.error(e);
                }
            }
        }
    }
}

/// Where `ptperf script` takes the samples: the printer, straight or through
/// the filters.
struct ScriptSink<'p, 's, 'a, W: Write> {
    printer: &'p mut Printer<'s, 'a>,
    out: &'p mut W,
    errors: &'p mut u64,
    keep: &'p dyn Fn(i32, i32, Option<u64>) -> bool,
    /// No filter and no JSON: sample lines go straight to the printer.
    plain: bool,
    json: bool,
}

impl<W: Write> ScriptSink<'_, '_, '_, W> {
    #[inline]
    fn flushed(&mut self) -> Flow {
        if self.printer.buf.len() >= 1 << 16 {
            flush(self.out, &mut self.printer.buf);
        }
        Flow::Continue(())
    }
}

impl<W: Write> SampleSink for ScriptSink<'_, '_, '_, W> {
    // The hot path is the plain sample line: everything else is out of line,
    // so that this stays small (few registers to save per call).
    fn event(&mut self, e: Event<'_>) -> Flow {
        match e {
            Event::Sample(s, st) if self.plain => self.printer.sample_with(s, st),
            e => other_event(self.printer, e, self.json, self.keep, self.errors),
        }
        self.flushed()
    }

    fn insns(&mut self, first: &Sample, st: &Stacks, more: &[PlainInsn]) -> Flow {
        if !(self.plain && self.printer.ip_lines(first, more)) {
            each_insn(first, more, |s| self.event(Event::Sample(s, st)))?;
        }
        self.flushed()
    }

    fn takes_counts(&self) -> bool {
        // `-F ip` alone: an instruction sample's line is its IP's.
        self.plain && self.printer.ip_only()
    }

    fn insn_counts(&mut self, _: &Sample, walker: &CodeWalker, spans: &[[u32; 3]]) -> Flow {
        for &[ci, first, n] in spans {
            let insns = walker.plain_insns([ci, first], n);
            self.printer.ip_run(insns.iter().map(|p| p.ip), insns.len());
            self.flushed()?;
        }
        Flow::Continue(())
    }

    fn branches(&mut self, like: &Sample, st: &Stacks, steps: &[Step]) -> Flow {
        if self.plain && self.printer.branch_lines(like, steps) {
            return self.flushed();
        }
        each_branch(like, steps, |s| self.event(Event::Sample(s, st)))
    }
}

/// Writes out the printed lines (errors end the process as `pt_cli::stdout` does).
#[inline(never)]
fn flush(out: &mut impl Write, buf: &mut Vec<u8>) {
    let _ = out.write_all(buf);
    buf.clear();
}

fn run(a: &Args) -> Result<Outcome, String> {
    const CMD: &str = "ptperf script";
    let plan = Plan::new(a)?;
    for w in &plan.warnings {
        eprintln!("{w}");
    }
    let file = input::open(CMD, &a.input)?;
    let perf = input::parse(CMD, &a.input, &file)?;
    let (so, _vdso) = session_options(&a.input, &plan, a.symfs.as_deref());
    let session = input::session_or_samples(CMD, &a.input, &perf, so)?;
    if !session.traced() {
        return recorded(a, &plan, &perf, &session);
    }
    let mut synth = Synth::new(&session, plan.opts);
    let mut printer = Printer::new(&session, &perf, &plan, synth.opts())?;
    printer.cbr2khz = synth.cbr2khz();
    printer.full_source_path = a.full_source_path;
    let mut out =
        std::io::BufWriter::with_capacity(1 << 16, xed::XedFilter::new(pt_cli::stdout(), plan.xed));
    let mut errors = 0u64;
    let tids = plan.tids.clone();
    let pids = plan.pids.clone();
    let time = plan.time;
    let json = a.json;
    let filtered = tids.is_some() || pids.is_some() || time.is_some();
    let keep = |tid: i32, pid: i32, t: Option<u64>| {
        tids.as_ref().map_or(true, |v| v.contains(&(tid as u32)))
            && pids.as_ref().map_or(true, |v| v.contains(&(pid as u32)))
            && time.map_or(true, |r| {
                t.map_or(true, |t| t >= r.start && (r.end == 0 || t <= r.end))
            })
    };
    let bar = crate::progress::bar(synth.total_bytes());
    crate::progress::attach(&mut synth, bar.as_ref());
    let mut sink = ScriptSink {
        printer: &mut printer,
        out: &mut out,
        errors: &mut errors,
        keep: &keep,
        plain: !filtered && !json,
        json,
    };
    let _ = synth.run_into(&mut sink);
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let _ = out.write_all(&printer.buf);
    drop(out);
    if errors > 0 {
        eprintln!("Warning:\n{errors} instruction trace errors");
    }
    input::trace_warnings(CMD, &a.input, &synth);
    Ok(input::finish(CMD, &a.input, &session))
}

/// `ptperf script` on a recording of samples without trace (`perf record -e
/// cpu-clock`'s, `perf inject --itrace`'s output): its PERF_RECORD_SAMPLEs
/// printed as perf prints them, through the same printer and filters.
fn recorded(
    a: &Args,
    plan: &Plan,
    perf: &pt_perf_data::PerfFile<'_>,
    session: &pt_perf::session::Session<'_>,
) -> Result<Outcome, String> {
    const CMD: &str = "ptperf script";
    let mut printer = Printer::new(session, perf, plan, &plan.opts)?;
    printer.full_source_path = a.full_source_path;
    let mut out =
        std::io::BufWriter::with_capacity(1 << 16, xed::XedFilter::new(pt_cli::stdout(), plan.xed));
    let keep = |s: &Sample| {
        plan.tids
            .as_ref()
            .map_or(true, |v| v.contains(&(s.tid as u32)))
            && plan
                .pids
                .as_ref()
                .map_or(true, |v| v.contains(&(s.pid as u32)))
            && plan
                .cpus
                .as_ref()
                .map_or(true, |v| v.contains(&(s.cpu as u32)))
            && plan.time.map_or(true, |r| {
                s.time
                    .map_or(true, |t| t >= r.start && (r.end == 0 || t <= r.end))
            })
    };
    let mut stacks = Stacks::default();
    let stats = pt_perf::recorded::for_each(perf, session, |r| {
        if keep(&r.sample) {
            stacks.callchain.clear();
            stacks.callchain.extend_from_slice(r.callchain);
            if a.json {
                printer.json(&r.sample, &stacks);
            } else {
                printer.sample_with(&r.sample, &stacks);
            }
            if printer.buf.len() >= 1 << 16 {
                flush(&mut out, &mut printer.buf);
            }
        }
        std::ops::ControlFlow::Continue(())
    });
    let _ = out.write_all(&printer.buf);
    drop(out);
    let outcome = input::finish(CMD, &a.input, session);
    if stats.bad_records > 0 {
        eprintln!(
            "{CMD}: {}: damaged recording: {} records could not be read; the output covers the rest",
            a.input, stats.bad_records
        );
        return Ok(Outcome::Damaged);
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Args {
        let argv = std::iter::once("script")
            .chain(v.iter().copied())
            .map(OsString::from)
            .collect();
        Args::parse_ordered(argv).unwrap()
    }

    #[test]
    fn options_apply_in_the_order_given() {
        let a = args(&["-F", "ip", "--itrace=b", "--call-trace", "-F", "+addr"]);
        assert_eq!(
            a.order,
            [
                Ordered::Fields(0),
                Ordered::Itrace,
                Ordered::CallTrace,
                Ordered::Fields(1)
            ]
        );
        // --call-trace after -F set fields: perf warns when a later list
        // replaces them, not when it edits them.
        let p = Plan::new(&a).unwrap();
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        let p = Plan::new(&args(&["--call-trace", "-F", "tid,ip"])).unwrap();
        assert_eq!(
            p.warnings,
            ["Overriding previous field request for all events."]
        );
        // Built without a command line: the fixed order.
        let b = Args {
            order: Vec::new(),
            ..args(&["-F", "ip", "--call-trace"])
        };
        assert_eq!(b.ordered(), [Ordered::CallTrace, Ordered::Fields(0)]);
    }
}
