//! `ptperf export sqlite|postgres`: perf's
//! `perf script -s export-to-sqlite.py|export-to-postgresql.py DB [branches|all] [calls] [callchains]`
//! as one command over a perf.data.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use pt_perf::session::{Session, SessionOptions, Skipped};

use super::feed::{default_itrace, export_session_with, FeedStats};
use super::postgres::PostgresSink;
use super::sqlite::SqliteSink;
use super::tables::Table;
use super::{ExportError, ExportOptions, Exporter, Sink, Summary};
use crate::input;
use pt_perf::itrace::SynthOpts;

const USAGE: &str = "\
usage: ptperf export sqlite OUT.db [branches|all] [calls] [callchains] [OPTIONS]
       ptperf export postgres CONNINFO [branches|all] [calls] [callchains] [OPTIONS]

Exports the samples of an Intel PT perf.data into a database with perf's
schema (that of perf's export-to-sqlite.py and export-to-postgresql.py).

  sqlite OUT.db      a new SQLite file (written beside it, renamed when complete)
  postgres CONNINFO  a new PostgreSQL database: its name, or a libpq connection
                     string ('host=/run/postgresql port=5432 dbname=pt') or URI
  branches           the samples table without period, weight, transaction and
                     data_src (default: all columns)
  calls              the calls and call_paths tables (calls and returns)
  callchains         the call_paths table and the samples' call chains (adds
                     'g' to the --itrace options)

      --itrace OPTS     the samples to export, as perf script's --itrace: 'b'
                        branches, 'iNUNIT' instructions, 'w' PTWRITE, 'p'
                        power events, 'g' call chains (default: perf script's,
                        as perf's scripts are documented to run: calls as
                        branch samples, PTWRITE, power events; 'g' with
                        callchains; perf gives call chains to all samples
                        but branches, e.g. --itrace=bpwi100ig)
  -i, --input FILE      the perf.data (default: perf.data)
  -f, --force           replace an existing SQLite file
      --symfs DIR       look for the recorded files under DIR
      --buildid-dir DIR a build-id cache to search first
  -q, --quiet           no summary
";

/// The command's name in messages.
const CMD: &str = "ptperf export";

/// What the command line asked for.
#[derive(Debug)]
struct Args {
    target: Target,
    opts: ExportOptions,
    input: PathBuf,
    force: bool,
    symfs: Option<PathBuf>,
    buildid_dirs: Vec<PathBuf>,
    quiet: bool,
    itrace: SynthOpts,
}

#[derive(Debug)]
enum Target {
    Sqlite(PathBuf),
    Postgres(String),
}

fn parse(args: &[OsString]) -> Result<Option<Args>, String> {
    let mut it = args.iter();
    let mut words: Vec<String> = Vec::new();
    let mut input = PathBuf::from("perf.data");
    let mut force = false;
    let mut quiet = false;
    let mut symfs = None;
    let mut buildid_dirs = Vec::new();
    let mut target_arg: Option<OsString> = None;
    let mut itrace: Option<String> = None;
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        let mut value = |name: &str| -> Result<OsString, String> {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match s.as_ref() {
            "-h" | "--help" => return Ok(None),
            "-i" | "--input" => input = value("-i")?.into(),
            "-f" | "--force" => force = true,
            "-q" | "--quiet" => quiet = true,
            "--symfs" => symfs = Some(value("--symfs")?.into()),
            "--buildid-dir" => buildid_dirs.push(value("--buildid-dir")?.into()),
            "--itrace" => itrace = Some(value("--itrace")?.to_string_lossy().into_owned()),
            _ if s.starts_with("--itrace=") => itrace = Some(s["--itrace=".len()..].to_string()),
            _ if s.starts_with("--input=") => input = PathBuf::from(&s["--input=".len()..]),
            _ if s.starts_with('-') && s.len() > 1 => return Err(format!("unknown option '{s}'")),
            _ => {
                if words.len() == 1 && target_arg.is_none() {
                    // The file name as given (it need not be UTF-8).
                    target_arg = Some(a.clone());
                }
                words.push(s.into_owned());
            }
        }
    }
    let (kind, rest) = match words.split_first() {
        Some((k, rest)) => (k.as_str(), rest),
        None => return Err("which database? sqlite or postgres".into()),
    };
    let Some((_, flags)) = rest.split_first() else {
        return Err(format!("{kind}: where to? give the database"));
    };
    let target = match kind {
        "sqlite" => Target::Sqlite(target_arg.map(PathBuf::from).unwrap_or_default()),
        "postgres" | "postgresql" => Target::Postgres(rest[0].clone()),
        _ => return Err(format!("unknown database '{kind}' (sqlite or postgres)")),
    };
    let mut opts = ExportOptions::default();
    for f in flags {
        match f.as_str() {
            "branches" => opts.all = false,
            "all" => opts.all = true,
            "calls" => opts.calls = true,
            "callchains" => opts.callchains = true,
            _ => {
                return Err(format!(
                    "unknown argument '{f}' (branches, all, calls or callchains)"
                ))
            }
        }
    }
    let itrace = match itrace {
        None => default_itrace(&opts),
        Some(i) => {
            let mut o = SynthOpts::parse(&i).map_err(|e| e.to_string())?;
            o.callchain |= opts.callchains;
            o
        }
    };
    Ok(Some(Args {
        itrace,
        target,
        opts,
        input,
        force,
        symfs,
        buildid_dirs,
        quiet,
    }))
}

/// Runs `ptperf export ARGS`.
pub fn main(args: &[OsString]) -> ExitCode {
    if let [only] = args {
        if only == "--version" {
            crate::print_version();
            return ExitCode::SUCCESS;
        }
    }
    let args = match parse(args) {
        Ok(Some(a)) => a,
        // perf's `-h`: usage on stderr, exit status 129.
        Ok(None) => {
            eprint!("{USAGE}\n{}\n", input::EXIT_STATUS);
            return ExitCode::from(129);
        }
        Err(e) => {
            // As perf and the other subcommands exit on bad options.
            eprintln!("ptperf export: {e}\n\n{USAGE}");
            return ExitCode::from(129);
        }
    };
    match run(&args) {
        Ok((summary, stats, skipped)) => {
            if !args.quiet {
                let mut line = format!(
                    "ptperf export: {} samples of {} instructions",
                    summary.samples(),
                    stats.insns
                );
                if args.opts.calls {
                    line.push_str(&format!(
                        ", {} calls",
                        summary.rows(Table::Calls).saturating_sub(1)
                    ));
                }
                match &args.target {
                    Target::Sqlite(p) => line.push_str(&format!(" into {}", p.display())),
                    Target::Postgres(c) => line.push_str(&format!(" into {c}")),
                }
                eprintln!("{line}");
            }
            let outcome = input::end(CMD, &args.input.to_string_lossy(), &skipped);
            std::process::Termination::report(outcome)
        }
        Err(e) => {
            eprintln!("ptperf export: {e}");
            ExitCode::from(1)
        }
    }
}

fn report_problems(stats: &FeedStats) {
    const SHOWN: usize = 10;
    for p in stats.problems.iter().take(SHOWN) {
        eprintln!("warning: {p}");
    }
    if stats.problems.len() > SHOWN {
        eprintln!(
            "warning: … and {} more decode errors, lost data or missing code",
            stats.problems.len() - SHOWN
        );
    }
}

fn run(args: &Args) -> Result<(Summary, FeedStats, Skipped), ExportError> {
    let input = &args.input;
    let name = input.to_string_lossy();
    // The messages of `input` start with the command's name, which main adds.
    let err = |e: crate::Error| {
        let e = e.to_string();
        ExportError::Io(
            e.strip_prefix(CMD)
                .map_or(&*e, |s| s.trim_start_matches(": "))
                .to_string(),
        )
    };
    let file = input::open(CMD, &name).map_err(err)?;
    let perf = input::parse(CMD, &name, &file).map_err(err)?;
    let mut so = SessionOptions::for_file(input);
    so.sysroot = args.symfs.clone();
    for (i, d) in args.buildid_dirs.iter().enumerate() {
        so.buildid_dirs.insert(i, d.clone());
    }
    let session = input::session(CMD, &name, &perf, so).map_err(err)?;
    let layout = args.opts.layout();
    // The database is made only once the input is known to be good.
    let (summary, stats) = match &args.target {
        Target::Sqlite(path) => {
            let sink = SqliteSink::create(path, args.force, &layout)?;
            export(&perf, &session, sink, args)
        }
        Target::Postgres(conninfo) => {
            let sink = PostgresSink::create(conninfo, &layout)?;
            export(&perf, &session, sink, args)
        }
    }?;
    report_problems(&stats);
    input::hidden_errors_warning(CMD, &name, stats.hidden_errors);
    let trace: usize = session
        .queues()
        .iter()
        .flat_map(|q| &q.segments)
        .map(|s| s.len())
        .sum();
    if stats.insns == 0 && trace > 0 {
        // The feed's errors are those --itrace shows: say that the trace gave nothing.
        eprintln!("{CMD}: {name}: warning: no instruction decoded from {trace:#x} bytes of trace");
    }
    Ok((summary, stats, session.skipped().clone()))
}

fn export<S: Sink>(
    perf: &pt_perf_data::PerfFile<'_>,
    session: &Session<'_>,
    sink: S,
    args: &Args,
) -> Result<(Summary, FeedStats), ExportError> {
    let mut ex = Exporter::new(sink, args.opts)?;
    let stats = export_session_with(perf, session, &mut ex, args.itrace)?;
    let summary = ex.finish()?;
    Ok((summary, stats))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Result<Option<Args>, String> {
        let v: Vec<OsString> = s.split_whitespace().map(OsString::from).collect();
        parse(&v)
    }

    #[test]
    fn perfs_arguments() {
        let a = args("sqlite pt.db branches calls -i x.data")
            .unwrap()
            .unwrap();
        assert!(matches!(&a.target, Target::Sqlite(p) if p == &PathBuf::from("pt.db")));
        assert!(!a.opts.all && a.opts.calls && !a.opts.callchains);
        assert_eq!(a.input, PathBuf::from("x.data"));
        let a = args("postgres dbname=pt callchains").unwrap().unwrap();
        assert!(matches!(&a.target, Target::Postgres(c) if c == "dbname=pt"));
        assert!(a.opts.all && a.opts.callchains);
        assert!(args("sqlite").is_err());
        assert!(args("sqlite pt.db calls bogus").is_err());
        assert!(args("mysql pt.db").is_err());
        assert!(args("sqlite pt.db --bogus").is_err());
        assert!(args("--help").unwrap().is_none());
    }

    #[test]
    fn itrace_options() {
        // By default perf script's (calls as branch samples, PTWRITE, power
        // events); chains with callchains.
        let a = args("sqlite pt.db").unwrap().unwrap();
        let i = a.itrace;
        assert!(i.branches && i.calls && !i.returns && i.ptwrites && i.pwr_events);
        assert!(!i.instructions && !i.callchain);
        let a = args("sqlite pt.db calls callchains").unwrap().unwrap();
        assert!(a.itrace.branches && a.itrace.callchain);
        // As given, with g added for callchains.
        let a = args("sqlite pt.db callchains --itrace=i100i")
            .unwrap()
            .unwrap();
        let i = a.itrace;
        assert!(i.instructions && i.period == 100 && !i.branches && i.callchain);
        let a = args("sqlite pt.db --itrace b").unwrap().unwrap();
        assert!(a.itrace.branches && !a.itrace.pwr_events && !a.itrace.callchain);
        assert!(args("sqlite pt.db --itrace=Q").is_err());
        assert!(args("sqlite pt.db --itrace").is_err());
    }
}
