//! `ptperf report`: perf report's `--stdio` table of an Intel PT recording
//! (overhead by command, shared object and symbol) from the samples
//! [`crate::synth`] synthesizes, and `--folded` stacks for flame graphs.
//!
//! The rows are perf's: the same percentages, columns and order (by period, then
//! command, shared object and symbol name as perf's sort keys compare them,
//! unknown symbols by address). The header's counts are perf's too; perf's
//! random closing tip is left out.

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use pt_decoder::perf::{Session, SessionOptions};
use pt_perf_data::MappedFile;

use crate::itrace::SynthOpts;
use hist::{FxMap, Hists, SymKey};
use crate::script::{Plan, Printer};
use crate::synth::{Event, Flow, Synth};

/// `ptperf report`'s command line.
#[derive(Parser, Debug)]
#[command(
    name = "ptperf report",
    about = "Read perf.data and display the profile of its Intel PT trace as perf report --stdio does"
)]
pub struct Args {
    /// input file name
    #[arg(short = 'i', long = "input", default_value = "perf.data")]
    pub input: String,
    /// Instruction Tracing options (default: i1i)
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub itrace: Option<String>,
    /// sort by key(s): comm, dso, sym (in any order, comma separated)
    #[arg(short = 's', long = "sort", default_value = "comm,dso,sym")]
    pub sort: String,
    /// Use the stdio interface (the only one)
    #[arg(long = "stdio")]
    pub stdio: bool,
    /// Call chains (needs --itrace=...g; printed with --folded)
    #[arg(short = 'g', long = "call-graph", num_args = 0..=1, default_missing_value = "")]
    pub call_graph: Option<String>,
    /// Folded stacks (comm;outer;...;inner count), one line each, for flame graphs
    #[arg(long = "folded")]
    pub folded: bool,
}

mod hist;
mod table;

/// A sort key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SortKey {
    Comm,
    Dso,
    Sym,
}

/// Runs `ptperf report ARGS`.
pub fn main(args: &[OsString]) -> ExitCode {
    crate::command::<Args>("ptperf report", args, |a| run(&a))
}

fn run(a: &Args) -> Result<(), String> {
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
    let mut opts = SynthOpts::default();
    match a.itrace.as_deref() {
        None | Some("") => opts.parse_into("i1i").map_err(|e| e.to_string())?,
        Some(s) => opts.parse_into(s).map_err(|e| e.to_string())?,
    }
    if a.call_graph.is_some() && !opts.callchain {
        opts.callchain = true;
        opts.callchain_sz = crate::itrace::DEFAULT_CALLCHAIN_SZ;
    }
    let file =
        MappedFile::open(&a.input).map_err(|e| format!("ptperf report: {}: {e}", a.input))?;
    let perf = file
        .parse()
        .map_err(|e| format!("ptperf report: {}: {e}", a.input))?;
    let mut so = SessionOptions::for_file(&a.input);
    so.timeless = opts.timeless_decoding;
    let session =
        Session::new(&perf, so).map_err(|e| format!("ptperf report: {}: {e}", a.input))?;
    let plan = Plan {
        opts,
        sel: Default::default(),
        ns: false,
        tids: None,
        pids: None,
        cpus: None,
        time: None,
        pad_dso: false,
    };
    let mut synth = Synth::new(&session, opts);
    let mut printer = Printer::new(&session, &perf, &plan, synth.opts())?;
    let names = printer.event_names();
    let mut hists = Hists::new(&session);
    let mut last_comm: ((i32, Option<u64>), Option<&str>) = ((i32::MIN, None), None);
    let mut folded: FxMap<String, u64> = FxMap::default();
    let bar = crate::progress::bar(synth.total_bytes());
    crate::progress::attach(&mut synth, bar.as_ref());
    let _ = synth.run(&mut |e: Event<'_>| -> Flow {
        let Event::Sample(s, st) = e else {
            return Flow::Continue(());
        };
        // Most samples are the last one's thread at the last one's time.
        let comm = if (s.tid, s.time) == last_comm.0 {
            last_comm.1
        } else {
            let c = printer.comm(s.tid, s.time);
            last_comm = ((s.tid, s.time), c);
            c
        };
        if a.folded {
            let mut line = String::from(comm.unwrap_or(":-1"));
            let chain: &[u64] = if st.callchain.is_empty() {
                std::slice::from_ref(&s.ip)
            } else {
                &st.callchain
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
            *folded.entry(line).or_default() += s.period;
            return Flow::Continue(());
        }
        hists.add(s, comm);
        Flow::Continue(())
    });
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    hists.finish();

    let mut out = std::io::BufWriter::new(pt_cli::stdout());
    if a.folded {
        let mut lines: Vec<(String, u64)> = folded.into_iter().collect();
        lines.sort();
        for (l, n) in lines {
            let _ = writeln!(out, "{l} {n}");
        }
        return Ok(());
    }
    table::write(&mut out, &hists, &names, &keys);
    Ok(())
}

/// perf's sample count in the header (`123K`).
fn samples(n: u64) -> String {
    if n >= 1_000_000 {
        format!("{}M", n / 1_000_000)
    } else if n >= 1000 {
        format!("{}K", n / 1000)
    } else {
        n.to_string()
    }
}
