//! `ptperf report`: perf report's `--stdio` table of an Intel PT recording
//! (overhead by command, shared object and symbol) from the samples
//! [`pt_perf::synth`] synthesizes, and `--folded` stacks for flame graphs, drawn
//! as SVG by `--flamegraph` (module `flame`, through the `inferno` crate).
//!
//! As perf 6.1 does it:
//! - without `--itrace`, perf report's own defaults: instructions every 100us
//!   with call chains, the power and other events, no branches;
//! - samples without call chains: one Overhead table per event (module `hist`, the
//!   fast path: a few nanoseconds a sample);
//! - samples with call chains: the Children/Self table of perf's cumulative mode
//!   (module `children`), unless `--no-children`; with `-g none` children are self,
//!   as perf resolves no chains then;
//! - below each entry of samples with call chains, its call graph as `-g` says
//!   (module `callgraph`: graph, fractal, flat or folded; threshold, print limit,
//!   caller or callee order, function or address key, percent, period or count);
//! - entries are perf's: the same percentages, columns and order (children, then
//!   callers first within a thread, then self, then the sort keys as perf
//!   compares them, unknown symbols by address), the header's counts too;
//!   perf's random closing tip is left out.

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use pt_perf::session::{Session, SessionOptions};

use crate::input::{self, Outcome};
use crate::script::{Plan, Printer};
use hist::{FxMap, Hists, SymKey};
use pt_perf::code::CodeWalker;
use pt_perf::decode::PlainInsn;
use pt_perf::itrace::SynthOpts;
use pt_perf::sample::Sample;
use pt_perf::synth::{Event, Flow, SampleSink, Stacks, Synth};

/// `ptperf report`'s command line.
#[derive(Parser, Debug)]
#[command(
    name = "ptperf report",
    about = "Read perf.data and display the profile of its Intel PT trace as perf report --stdio does",
    after_help = crate::input::EXIT_STATUS
)]
pub struct Args {
    /// input file name
    #[arg(short = 'i', long = "input", default_value = "perf.data")]
    pub input: String,
    /// Instruction Tracing options (default as perf report's: instructions every
    /// 100us with call chains, and the other events)
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub itrace: Option<String>,
    /// sort by key(s): comm, dso, sym (in any order, comma separated)
    #[arg(short = 's', long = "sort", default_value = "comm,dso,sym")]
    pub sort: String,
    /// Use the stdio interface (the only one)
    #[arg(long = "stdio")]
    pub stdio: bool,
    /// Call graph display, perf's
    /// `print_type,threshold[,print_limit],order,sort_key,value`.
    #[arg(
        short = 'g',
        long = "call-graph",
        num_args = 0..=1,
        default_missing_value = "",
        action = clap::ArgAction::Append,
        help = "Call graph display, perf's print_type,threshold[,print_limit],order,sort_key,value: \
                graph|flat|fractal|folded|none, minimum percentage, most nodes a level, \
                caller|callee, function|address, percent|period|count (default \
                graph,0.5,caller,function,percent); needs call chains (--itrace=...g, or no --itrace)"
    )]
    pub call_graph: Vec<String>,
    /// No call graph (as -g none)
    #[arg(long = "no-call-graph")]
    pub no_call_graph: bool,
    /// Call graphs caller first (an alias of -g caller)
    #[arg(short = 'G', long = "inverted")]
    pub inverted: bool,
    /// Accumulate callers' entries from their callees' samples (the default with
    /// call chains)
    #[arg(long = "children", overrides_with = "no_children")]
    pub children: bool,
    /// Self overhead only
    #[arg(long = "no-children", overrides_with = "children")]
    pub no_children: bool,
    /// Folded stacks (comm;outer;...;inner count), one line each, for flame graphs
    #[arg(long = "folded")]
    pub folded: bool,
    /// Disable symbol demangling
    #[arg(long = "no-demangle")]
    pub no_demangle: bool,
    /// Write the folded stacks as a flame graph (SVG) to this file ('-': stdout)
    #[arg(long = "flamegraph", value_name = "FILE")]
    pub flamegraph: Option<String>,
    /// Draw the flame graph top down (an icicle graph)
    #[arg(long = "icicle", requires = "flamegraph")]
    pub icicle: bool,
}

mod callgraph;
mod children;
mod flame;
mod hist;
mod table;

/// A sort key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SortKey {
    Comm,
    Dso,
    Sym,
}

/// One sample's line of the folded stacks (`comm;outer;…;inner`), its call
/// chain (innermost first; the sample's IP when it has none) named as the
/// report names locations.
fn folded_line(
    hists: &mut Hists,
    comm: Option<&str>,
    s: &pt_perf::sample::Sample,
    callchain: &[u64],
) -> String {
    let mut line = String::from(comm.unwrap_or(":-1"));
    let chain: &[u64] = if callchain.is_empty() {
        std::slice::from_ref(&s.ip)
    } else {
        callchain
    };
    for &ip in chain.iter().rev() {
        let id = hists.locate(s.code, s.pid, ip, s.time);
        let loc = hists.loc(id);
        line.push(';');
        match (&loc.sym, &loc.dso) {
            (SymKey::Named(n, _), _) => line.push_str(n),
            (SymKey::Addr(_), Some(d)) => {
                line.push('[');
                line.push_str(d);
                line.push(']');
            }
            (SymKey::Addr(_), None) => line.push_str("[unknown]"),
        }
    }
    line
}

/// Runs `ptperf report ARGS`.
pub fn main(args: &[OsString]) -> ExitCode {
    crate::reading::<Args>("ptperf report", args, |a| run(&a))
}

fn run(a: &Args) -> Result<Outcome, String> {
    const CMD: &str = "ptperf report";
    let mut keys = Vec::new();
    for k in a.sort.split(',').filter(|k| !k.is_empty()) {
        keys.push(match k {
            "comm" => SortKey::Comm,
            "dso" => SortKey::Dso,
            "sym" | "symbol" => SortKey::Sym,
            _ => {
                return Err(format!(
                    "Error: Invalid --sort key: `{k}' (ptperf report knows comm, dso, sym)"
                ))
            }
        });
    }
    if keys.is_empty() {
        return Err("Error: no --sort keys".into());
    }
    let opts = synth_opts(a.itrace.as_deref())?;
    let mut opts = opts;
    let cg = callgraph::Setting::parse(&a.call_graph, a.no_call_graph)?;
    let graph = !cg.none;
    let folded_only = a.folded || a.flamegraph.is_some();
    if folded_only && !opts.callchain {
        opts.callchain = true;
        opts.callchain_sz = pt_perf::itrace::DEFAULT_CALLCHAIN_SZ;
    }
    let mut children = opts.callchain && !a.no_children && !folded_only;
    // Call graphs below the entries.
    let mut trees = opts.callchain && graph && !folded_only;
    let mut params = cg.params;
    if a.inverted || (!a.no_children && !cg.params.order_set) {
        params.order = callgraph::Order::Caller;
    }
    let mut layout = table::Layout {
        children,
        graph,
        caller: params.order == callgraph::Order::Caller,
    };
    let file = input::open(CMD, &a.input)?;
    let perf = input::parse(CMD, &a.input, &file)?;
    let mut so = SessionOptions::for_file(&a.input);
    so.timeless = opts.timeless_decoding;
    // As perf does, this machine's own vdso stands in for a recorded one no
    // build-id cache holds.
    let vdso = pt_elf::vdso::OwnVdso::new();
    if let Some(v) = &vdso {
        so.vdso.push(("[vdso]".into(), v.path().to_path_buf()));
    }
    let session = input::session_or_samples(CMD, &a.input, &perf, so)?;
    // Call chains: synthesized from the trace (`--itrace=…g`), or recorded
    // with the samples (`perf record -g`).
    let recorded_chains = !session.traced()
        && perf
            .events()
            .iter()
            .any(|e| e.attr.sample_type.has(pt_perf_data::SampleType::CALLCHAIN));
    if !session.traced() {
        if folded_only && !recorded_chains {
            return Err(format!("{CMD}: {}: --folded and --flamegraph need call chains: this recording holds samples without them", a.input));
        }
        opts = SynthOpts::default();
        children = recorded_chains && !a.no_children && !folded_only;
        trees = recorded_chains && graph && !folded_only;
        layout.children = children;
    }
    if cg.given && graph && !opts.callchain && !recorded_chains {
        // perf says so and prints an empty report.
        eprintln!("Error:\nSelected -g or --branch-history.\nBut no callchain or branch data.\nDid you call 'perf record' without -g or -b?");
        let mut out = pt_cli::stdout();
        let _ = out.write_all(HEADER.as_bytes());
        return Ok(Outcome::Whole);
    }
    let plan = Plan {
        opts,
        sel: Default::default(),
        ns: false,
        time_from: Default::default(),
        tids: None,
        pids: None,
        cpus: None,
        time: None,
        pad_dso: false,
        symbols: pt_elf::SymbolOptions {
            demangle: !a.no_demangle,
            ..Default::default()
        },
        xed: false,
        warnings: Vec::new(),
    };
    let mut synth = Synth::new(&session, opts);
    let mut printer = Printer::new(&session, &perf, &plan, synth.opts())?;
    let names = printer.event_names();
    let mut hists = Hists::new(&session, plan.symbols.clone());
    // The last sample's (thread, time) and its command (a time of u64::MAX
    // stands for none: no sample has that time).
    let mut last_comm: ((i32, u64), Option<&str>) = ((i32::MIN, 0), None);
    let mut folded: FxMap<String, u64> = FxMap::default();
    let graphs = trees.then(|| children::Graphs {
        forest: Default::default(),
        frames: callgraph::Frames::new(params.key, &session, dso_order(&perf, &session)),
        order: params.order,
    });
    // perf folds recorded call chains into children even with `-g none`;
    // synthesized ones only with a call graph.
    let accumulate = children && (graph || recorded_chains);
    let mut acc = children::Children::new(&keys, accumulate, graphs);
    let bar = crate::progress::bar(synth.total_bytes());
    crate::progress::attach(&mut synth, bar.as_ref());
    let mut comm_of = |s: &pt_perf::sample::Sample| {
        // Most samples are the last one's thread at the last one's time.
        let key = (s.tid, s.time.unwrap_or(u64::MAX));
        if key != last_comm.0 {
            last_comm = (key, printer.comm(s.tid, s.time));
        }
        last_comm.1
    };
    let mut kinds: Vec<pt_perf::sample::Kind> = Vec::new();
    let mut recorded_damage = false;
    if !session.traced() {
        // perf report on a recording of samples: each PERF_RECORD_SAMPLE, with
        // its recorded call chain.
        let bad = pt_perf::recorded::for_each(&perf, &session, |r| {
            let s = &r.sample;
            if !kinds.contains(&s.kind) {
                kinds.push(s.kind);
            }
            if folded_only {
                let line = folded_line(&mut hists, comm_of(s), s, r.callchain);
                *folded.entry(line).or_default() += s.period;
            } else if children || trees {
                let comm = comm_of(s);
                acc.add(&mut hists, s, comm, r.callchain);
            } else {
                hists.add(s, || comm_of(s));
            }
            std::ops::ControlFlow::Continue(())
        })
        .bad_records;
        if bad > 0 {
            eprintln!(
                "{CMD}: {}: damaged recording: {bad} records could not be read; the output covers the rest",
                a.input
            );
            recorded_damage = true;
        }
    } else if folded_only {
        let _ = synth.run(&mut |e: Event<'_>| -> Flow {
            let Event::Sample(s, st) = e else {
                return Flow::Continue(());
            };
            if !kinds.contains(&s.kind) {
                kinds.push(s.kind);
            }
            let line = folded_line(&mut hists, comm_of(s), s, &st.callchain);
            *folded.entry(line).or_default() += s.period;
            Flow::Continue(())
        });
    } else if children || trees {
        let _ = synth.run(&mut |e: Event<'_>| -> Flow {
            if let Event::Sample(s, st) = e {
                let comm = comm_of(s);
                acc.add(&mut hists, s, comm, &st.callchain);
            }
            Flow::Continue(())
        });
    } else {
        let _ = synth.run_into(&mut Plain {
            hists: &mut hists,
            printer: &mut printer,
        });
    }
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    hists.add_tallies(synth.walker());
    input::trace_warnings(CMD, &a.input, &synth);
    hists.finish();

    let mut out = std::io::BufWriter::new(pt_cli::stdout());
    if folded_only {
        let mut lines: Vec<(String, u64)> = folded.into_iter().collect();
        lines.sort();
        if a.folded {
            for (l, n) in &lines {
                let _ = writeln!(out, "{l} {n}");
            }
            let _ = out.flush();
        }
        if let Some(path) = &a.flamegraph {
            let count_name = match kinds.as_slice() {
                [k] => names
                    .iter()
                    .find(|(n, _)| n == k)
                    .map_or_else(|| k.name().to_string(), |(_, n)| n.clone()),
                _ => "period".to_string(),
            };
            let graph = flame::Graph {
                title: format!("ptperf report: {}", a.input),
                count_name,
                icicle: a.icicle,
            };
            graph.write(path, &lines)?;
        }
        drop(out);
        return Ok(input::finish(CMD, &a.input, &session));
    }
    let tables = if children || trees {
        acc.tables(&hists)
    } else {
        table::of_hists(&hists, &keys)
    };
    let printer = acc.graphs().map(|g| callgraph::Printer {
        forest: &g.forest,
        frames: &g.frames,
        params,
        skip_first: a.sort.starts_with("sym"),
    });
    table::write(&mut out, tables, &names, &keys, layout, printer.as_ref());
    drop(out);
    let outcome = input::finish(CMD, &a.input, &session);
    Ok(if recorded_damage {
        Outcome::Damaged
    } else {
        outcome
    })
}

/// The overhead table's sink: samples into [`Hists`], runs of instruction
/// samples at once.
struct Plain<'r, 's, 'a> {
    hists: &'r mut Hists<'s, 'a>,
    printer: &'r mut Printer<'s, 'a>,
}

impl SampleSink for Plain<'_, '_, '_> {
    fn event(&mut self, e: Event<'_>) -> Flow {
        if let Event::Sample(s, _) = e {
            let printer = &mut *self.printer;
            self.hists.add(s, || printer.comm(s.tid, s.time));
        }
        Flow::Continue(())
    }

    fn insns(&mut self, first: &Sample, _: &Stacks, more: &[PlainInsn]) -> Flow {
        let printer = &mut *self.printer;
        self.hists
            .add_insns(first, more, || printer.comm(first.tid, first.time));
        Flow::Continue(())
    }

    fn takes_counts(&self) -> bool {
        true
    }

    fn insn_counts(&mut self, like: &Sample, walker: &CodeWalker, spans: &[[u32; 3]]) -> Flow {
        let comm = self.printer.comm(like.tid, like.time);
        self.hists.add_counts(like, comm, walker, spans);
        Flow::Continue(())
    }
}

/// The synthesis options of `--itrace` (`None`: absent) as perf report takes
/// them: absent, perf's defaults with instructions and call chains instead of
/// branches; empty, perf's defaults.
fn synth_opts(itrace: Option<&str>) -> Result<SynthOpts, String> {
    Ok(match itrace {
        None => {
            let mut o = SynthOpts {
                set: true,
                ..SynthOpts::default_for(false)
            };
            o.branches = false;
            o.callchain = true;
            o.add_callchain = true;
            o
        }
        Some("") => SynthOpts {
            set: true,
            ..SynthOpts::default_for(false)
        },
        Some(s) => {
            let mut o = SynthOpts::default();
            o.parse_into(s).map_err(|e| e.to_string())?;
            o
        }
    })
}

/// The report's first lines (before its tables, or alone).
const HEADER: &str =
    "# To display the perf.data header info, please use --header/--header-only options.\n#\n";

/// The files of `session`'s shared objects in the order perf makes them: those
/// of the build-id table first (read with the header), then as mapped.
fn dso_order(perf: &pt_perf_data::PerfFile<'_>, session: &Session<'_>) -> Vec<String> {
    let mut names = Vec::new();
    if let Some(Ok(pt_perf_data::Feature::BuildId(v))) =
        perf.feature(pt_perf_data::feature_id::BUILD_ID)
    {
        for e in v {
            names.push(String::from_utf8_lossy(&e.filename).into_owned());
        }
    }
    names.extend(session.mappings().iter().map(|m| m.filename.clone()));
    names
}

/// perf's sample count in the header (`convert_unit`: `276 `, `34K`, `48M`).
fn samples(n: u64) -> String {
    let mut v = n;
    let mut unit = ' ';
    for u in ['K', 'M', 'G'] {
        if v > 1000 {
            v /= 1000;
            unit = u;
        }
    }
    format!("{v}{unit}")
}
