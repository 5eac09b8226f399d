//! `ptconformance`: run `.ptt` conformance tests and report per-tool totals.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use pt_conformance::report::{json_result, json_summary, table, totals_text};
use pt_conformance::{
    list_ptt_files, own_suite_dir, Baseline, BuildPolicy, Progress, Runner, Tools,
};

/// Runs .ptt tests by the protocol of libipt's test.bash.
///
/// Tools come from $PTTESTGEN, $PTDUMP, $PTXED, else from beside this
/// executable; pttestgen/ptdump are built with cargo when missing.
/// Example against libipt's own tools:
/// `PTTESTGEN=/path/pttc PTDUMP=/path/ptdump ptconformance --corpus DIR`.
#[derive(Debug, Parser)]
#[command(name = "ptconformance", version)]
struct Args {
    /// Directory of .ptt files to run (repeatable).
    #[arg(long, value_name = "DIR")]
    corpus: Vec<PathBuf>,
    /// Run the project's own suite (the default when nothing else is given).
    #[arg(long)]
    own: bool,
    /// Individual .ptt files to run.
    #[arg(value_name = "FILE.ptt")]
    files: Vec<PathBuf>,
    /// Only run files whose name contains this text.
    #[arg(long, value_name = "SUBSTR")]
    filter: Option<String>,
    /// Parallel jobs (default: available cores).
    #[arg(long, short = 'j', value_name = "N")]
    jobs: Option<usize>,
    /// Run every file with these cpus instead of its `; cpu` lines
    /// (comma-separated, like test.bash's -c).
    #[arg(long, value_name = "CPU[,CPU]", value_delimiter = ',')]
    cpu: Vec<String>,
    /// Also compare pttestgen's output files with this reference generator's
    /// (libipt's pttc), reported as tool `pttestgen=ref`.
    #[arg(long, value_name = "PTTC")]
    reference_generator: Option<PathBuf>,
    /// Seconds before a tool invocation is killed.
    #[arg(long, value_name = "SECS", default_value_t = 20.0)]
    timeout: f64,
    /// Print JSON lines (one per result, then a summary) instead of a table.
    #[arg(long)]
    json: bool,
    /// Print the diff or error message under each failing row.
    #[arg(long)]
    show_diffs: bool,
    /// Compare with a baseline of passing results; regressions fail the run.
    #[arg(long, value_name = "FILE")]
    baseline: Option<PathBuf>,
    /// Write the passing results to FILE as a new baseline.
    #[arg(long, value_name = "FILE")]
    write_baseline: Option<PathBuf>,
    /// Never run cargo to build missing tools.
    #[arg(long, conflicts_with = "rebuild")]
    no_build: bool,
    /// Run `cargo build` for pttestgen/ptdump/ptxed first, even if present.
    #[arg(long)]
    rebuild: bool,
}

fn main() -> ExitCode {
    let args: Args = pt_cli::parse();
    match run(&args) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("ptconformance: {message}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &Args) -> Result<ExitCode, String> {
    let mut files = Vec::new();
    let own = args.own || (args.corpus.is_empty() && args.files.is_empty());
    if own {
        files.extend(list_ptt_files(&own_suite_dir()).map_err(|e| e.to_string())?);
    }
    for dir in &args.corpus {
        files.extend(list_ptt_files(dir).map_err(|e| e.to_string())?);
    }
    files.extend(args.files.iter().cloned());
    if let Some(filter) = &args.filter {
        files.retain(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().contains(filter.as_str()))
        });
    }
    if files.is_empty() {
        return Err("no .ptt files to run".into());
    }
    if !(args.timeout > 0.0 && args.timeout.is_finite()) {
        return Err("--timeout must be a positive number of seconds".into());
    }

    let policy = if args.no_build {
        BuildPolicy::Never
    } else if args.rebuild {
        BuildPolicy::Always
    } else {
        BuildPolicy::IfMissing
    };
    let tools = Tools::discover(policy);
    let mut runner = Runner::new(tools)
        .with_timeout(Duration::from_secs_f64(args.timeout))
        .with_cpus((!args.cpu.is_empty()).then(|| args.cpu.clone()))
        .with_reference_generator(args.reference_generator.clone());
    if let Some(jobs) = args.jobs {
        runner = runner.with_jobs(jobs);
    }
    if !args.json {
        for kind in pt_conformance::ToolKind::ALL {
            match runner.tools().get(kind) {
                pt_conformance::ToolPath::Found(p) => eprintln!("{kind}: {}", p.display()),
                pt_conformance::ToolPath::Missing(why) => eprintln!("{kind}: missing ({why})"),
            }
        }
    }

    let bar = pt_cli::progress::bar(files.len() as u64, "[{pos}/{len}] {wide_bar} {msg}");
    let progress = |p: &Progress<'_>| {
        if let Some(b) = &bar {
            let name = p
                .path
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default();
            b.set_length(p.total as u64);
            b.set_position(p.done as u64);
            b.set_message(name.into_owned());
        }
    };
    let results = runner.run_files(&files, &progress);
    pt_cli::progress::finish(bar);

    let mut out = pt_cli::stdout();
    let mut ok = !results.iter().any(|r| r.outcome.is_bad());
    if args.json {
        for r in &results {
            let _ = writeln!(out, "{}", json_result(r));
        }
        let _ = writeln!(out, "{}", json_summary(&results));
    } else {
        let _ = write!(out, "{}", table(&results, args.show_diffs));
        let _ = writeln!(out);
        let _ = write!(out, "{}", totals_text(&results));
    }

    if let Some(path) = &args.baseline {
        let mut baseline = Baseline::load(path).map_err(|e| e.to_string())?;
        if args.filter.is_some() {
            // Files left out by --filter are not regressions.
            baseline = baseline.restricted_to(results.iter().map(|r| r.file.as_str()));
        }
        let cmp = baseline.compare(&results);
        for (key, now) in &cmp.regressions {
            eprintln!("regression: {key} was passing, now {now}");
        }
        if !cmp.new_passes.is_empty() {
            eprintln!(
                "{} new passes not in {} (update with --write-baseline)",
                cmp.new_passes.len(),
                path.display()
            );
        }
        ok &= cmp.regressions.is_empty();
    }
    if let Some(path) = &args.write_baseline {
        let baseline = Baseline::from_results(&results);
        baseline.save(path).map_err(|e| e.to_string())?;
        eprintln!(
            "wrote {} passes to {}",
            baseline.passes.len(),
            path.display()
        );
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
