//! `ptperf report`: perf report's `--stdio` table of an Intel PT recording
//! (overhead by command, shared object and symbol) from the samples
//! [`crate::synth`] synthesizes, and `--folded` stacks for flame graphs.
//!
//! The rows are perf's: the same percentages, columns and order (by period, then
//! command, shared object and symbol name as perf's sort keys compare them,
//! unknown symbols by address). The header's counts are perf's too; perf's
//! random closing tip is left out.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;
use std::rc::Rc;

use clap::Parser;
use pt_decoder::perf::{Session, SessionOptions};
use pt_perf_data::MappedFile;

use crate::itrace::SynthOpts;
use crate::sample::Kind;
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

/// A sort key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SortKey {
    Comm,
    Dso,
    Sym,
}

/// A symbol column entry: named, or an address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum SymKey {
    Named(Rc<str>, u64),
    Addr(u64),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    comm: Rc<str>,
    /// The short name, `None` outside any mapping.
    dso: Option<Rc<str>>,
    sym: SymKey,
}

fn short(dso: &str) -> &str {
    if dso.starts_with('[') {
        return dso;
    }
    dso.rsplit('/').next().unwrap_or(dso)
}

/// (event, comm, code image, pid, ip): what decides a sample's row.
type RowKey = (usize, usize, u64, i32, u64);

/// One event's rows.
struct Hist {
    kind: Kind,
    index: HashMap<Key, usize>,
    rows: Vec<(Key, u64)>,
    total: u64,
    nr: u64,
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
    // By event: rows (key → period, samples), totals.
    let mut hists: Vec<Hist> = Vec::new();
    // The row of a (event, comm, code image, pid, ip): a direct-mapped cache in
    // front of the rows' map, so that most samples neither resolve nor hash a key.
    let mut row_cache: Vec<Option<(RowKey, usize)>> = vec![None; 1 << 15];
    let mut folded: HashMap<String, u64> = HashMap::new();
    let unknown_comm: Rc<str> = ":-1".into();
    let mut comms: HashMap<String, Rc<str>> = HashMap::new();
    let mut dsos: HashMap<Rc<str>, Rc<str>> = HashMap::new();
    let bar = crate::progress::bar(synth.total_bytes());
    crate::progress::attach(&mut synth, bar.as_ref());
    let _ = synth.run(&mut |e: Event<'_>| -> Flow {
        let Event::Sample(s, st) = e else {
            return Flow::Continue(());
        };
        let comm = match printer.comm(s.tid, s.time) {
            Some(c) => match comms.get(c) {
                Some(r) => r.clone(),
                None => {
                    let r: Rc<str> = c.into();
                    comms.insert(c.to_string(), r.clone());
                    r
                }
            },
            None => unknown_comm.clone(),
        };
        if a.folded {
            let mut line = String::from(&*comm);
            for &ip in st.callchain.iter().rev() {
                let r = printer.resolve(s.code, s.pid, ip, s.time);
                line.push(';');
                match &r.sym {
                    Some((n, _)) => line.push_str(n),
                    None => line.push_str(&format!("[{}]", short(&r.dso))),
                }
            }
            if st.callchain.is_empty() {
                let r = printer.resolve(s.code, s.pid, s.ip, s.time);
                line.push(';');
                match &r.sym {
                    Some((n, _)) => line.push_str(n),
                    None => line.push_str(&format!("[{}]", short(&r.dso))),
                }
            }
            *folded.entry(line).or_default() += s.period;
            return Flow::Continue(());
        }
        let hi = match hists.iter().position(|h| h.kind == s.kind) {
            Some(i) => i,
            None => {
                hists.push(Hist {
                    kind: s.kind,
                    index: HashMap::new(),
                    rows: Vec::new(),
                    total: 0,
                    nr: 0,
                });
                hists.len() - 1
            }
        };
        let rk: RowKey = (hi, comm.as_ptr() as usize, s.code, s.pid, s.ip);
        let slot = (s.ip ^ s.code.wrapping_mul(31) ^ (comm.as_ptr() as u64) ^ (hi as u64) << 40)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            >> 49;
        let h = &mut hists[hi];
        h.total += s.period;
        h.nr += 1;
        if let Some((k, row)) = &row_cache[slot as usize] {
            if *k == rk {
                h.rows[*row].1 += s.period;
                return Flow::Continue(());
            }
        }
        let r = printer.resolve(s.code, s.pid, s.ip, s.time);
        let dso = r.mapped.then(|| match dsos.get(&r.dso) {
            Some(d) => d.clone(),
            None => {
                let d: Rc<str> = short(&r.dso).into();
                dsos.insert(r.dso.clone(), d.clone());
                d
            }
        });
        let sym = match &r.sym {
            Some((n, off)) => SymKey::Named(n.clone(), r.addr - off),
            None => SymKey::Addr(if r.mapped { r.addr } else { s.ip }),
        };
        let key = Key { comm, dso, sym };
        let h = &mut hists[hi];
        let row = match h.index.get(&key) {
            Some(&i) => i,
            None => {
                h.rows.push((key.clone(), 0));
                h.index.insert(key, h.rows.len() - 1);
                h.rows.len() - 1
            }
        };
        h.rows[row].1 += s.period;
        row_cache[slot as usize] = Some((rk, row));
        Flow::Continue(())
    });
    if let Some(b) = &bar {
        b.finish_and_clear();
    }

    let mut out = std::io::BufWriter::new(pt_cli::stdout());
    if a.folded {
        let mut lines: Vec<(String, u64)> = folded.into_iter().collect();
        lines.sort();
        for (l, n) in lines {
            let _ = writeln!(out, "{l} {n}");
        }
        return Ok(());
    }
    // Events in perf's order (the order they were synthesized in).
    hists.sort_by_key(|h| names.iter().position(|(k, _)| *k == h.kind));
    let _ = writeln!(
        out,
        "# To display the perf.data header info, please use --header/--header-only options.\n#"
    );
    for Hist {
        kind,
        rows,
        total,
        nr,
        ..
    } in hists
    {
        let name = names
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(kind.name().to_string(), |(_, n)| n.clone());
        let _ = writeln!(out, "#\n# Total Lost Samples: 0\n#");
        let _ = writeln!(out, "# Samples: {} of event '{name}'", samples(nr));
        let _ = writeln!(out, "# Event count (approx.): {total}\n#");
        let mut rows = rows;
        rows.sort_by(|(ka, pa), (kb, pb)| {
            pb.cmp(pa).then_with(|| {
                for k in &keys {
                    let o = match k {
                        SortKey::Comm => ka.comm.cmp(&kb.comm),
                        SortKey::Dso => match (&ka.dso, &kb.dso) {
                            (Some(x), Some(y)) => x.cmp(y),
                            (Some(_), None) => std::cmp::Ordering::Less,
                            (None, Some(_)) => std::cmp::Ordering::Greater,
                            (None, None) => std::cmp::Ordering::Equal,
                        },
                        SortKey::Sym => match (&ka.sym, &kb.sym) {
                            (SymKey::Named(x, xs), SymKey::Named(y, ys)) => {
                                x.cmp(y).then(xs.cmp(ys))
                            }
                            (SymKey::Named(..), SymKey::Addr(_)) => std::cmp::Ordering::Less,
                            (SymKey::Addr(_), SymKey::Named(..)) => std::cmp::Ordering::Greater,
                            (SymKey::Addr(x), SymKey::Addr(y)) => x.cmp(y),
                        },
                    };
                    if o.is_ne() {
                        return o;
                    }
                }
                std::cmp::Ordering::Equal
            })
        });
        let sym_text = |k: &Key| match &k.sym {
            SymKey::Named(n, _) => format!("[.] {n}"),
            SymKey::Addr(0) => "[.] 0000000000000000".to_string(),
            SymKey::Addr(x) => format!("[.] {x:#018x}"),
        };
        let col = |k: &Key, key: SortKey| -> String {
            match key {
                SortKey::Comm => k.comm.to_string(),
                SortKey::Dso => k.dso.as_deref().unwrap_or("[unknown]").to_string(),
                SortKey::Sym => sym_text(k),
            }
        };
        let header = |key: SortKey| match key {
            SortKey::Comm => "Command",
            SortKey::Dso => "Shared Object",
            SortKey::Sym => "Symbol",
        };
        // perf widens the dso column to 16 (an address's digits) when some symbol
        // is unresolved.
        let unresolved = rows.iter().any(|(k, _)| matches!(k.sym, SymKey::Addr(_)));
        let widths: Vec<usize> = keys
            .iter()
            .map(|&key| {
                let w = rows
                    .iter()
                    .map(|(k, _)| col(k, key).len())
                    .chain([header(key).len()])
                    .max()
                    .unwrap_or(0);
                match key {
                    SortKey::Dso if unresolved => w.max(16),
                    SortKey::Sym if unresolved => w.max(22),
                    _ => w,
                }
            })
            .collect();
        let mut h1 = String::from("# Overhead");
        let mut h2 = String::from("# ........");
        for (i, &key) in keys.iter().enumerate() {
            h1.push_str(&format!("  {:<w$}", header(key), w = widths[i]));
            h2.push_str(&format!("  {}", ".".repeat(widths[i])));
        }
        let _ = writeln!(out, "{h1}\n{h2}\n#");
        for (k, period) in &rows {
            let pct = if total == 0 {
                0.0
            } else {
                100.0 * *period as f64 / total as f64
            };
            let mut line = format!("  {:>8}", format!("{pct:.2}%"));
            for (i, &key) in keys.iter().enumerate() {
                let c = col(k, key);
                if i + 1 == keys.len() {
                    line.push_str(&format!("  {c}"));
                } else {
                    line.push_str(&format!("  {c:<w$}", w = widths[i]));
                }
            }
            let _ = writeln!(out, "{line}");
        }
        let _ = writeln!(out, "\n");
    }
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
