//! Runs the project's own `.ptt` suite (always) and, when
//! `PT_CONFORMANCE_CORPUS` names a directory, that corpus against the
//! committed baseline `conformance/baseline/libipt-ptt.txt`.
//!
//! `PTTC_REFERENCE=/path/to/pttc` also checks pttestgen's output files
//! against libipt's generator.
//!
//! The tools are rebuilt first (`cargo build -p pt-testgen -p pt-decoder
//! --bins`) so that stale binaries are never tested; `PTTESTGEN`, `PTDUMP`
//! and `PTXED` override them. Use `--nocapture` to see the tables.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use pt_conformance::report::{table, totals, totals_line, totals_text};
use pt_conformance::{
    list_ptt_files, own_suite_dir, Baseline, BuildPolicy, Outcome, Runner, TestResult, ToolKind,
    ToolPath, Tools,
};

fn tools() -> Tools {
    static TOOLS: OnceLock<Tools> = OnceLock::new();
    TOOLS
        .get_or_init(|| {
            let tools = Tools::discover(BuildPolicy::Always);
            for kind in ToolKind::ALL {
                match tools.get(kind) {
                    ToolPath::Found(path) => eprintln!("{kind}: {}", path.display()),
                    ToolPath::Missing(why) => eprintln!("{kind}: missing: {why}"),
                }
            }
            tools
        })
        .clone()
}

/// With `PTTC_REFERENCE=/path/to/pttc`, pttestgen's outputs are also
/// compared with libipt's (extra results under tool `pttestgen=ref`).
fn run(files: &[PathBuf]) -> Vec<TestResult> {
    let reference = std::env::var_os("PTTC_REFERENCE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    Runner::new(tools())
        .with_reference_generator(reference)
        .run_files(files, &|_| {})
}

fn baseline_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("baseline/libipt-ptt.txt")
}

#[test]
fn own_suite_passes() {
    let files = list_ptt_files(&own_suite_dir()).expect("conformance/tests is listable");
    assert!(
        files.len() >= 40,
        "own suite has only {} files",
        files.len()
    );
    let results = run(&files);
    assert!(!results.is_empty(), "the own suite produced no results");
    println!("{}", table(&results, false));
    print!("{}", totals_text(&results));

    let bad: Vec<&TestResult> = results
        .iter()
        .filter(|r| match &r.outcome {
            Outcome::Pass => false,
            Outcome::NotRun { .. } => r.tool != "ptxed",
            Outcome::Fail { .. } | Outcome::Error { .. } => true,
        })
        .collect();
    let (_, all) = totals(&results);
    eprintln!("own suite: {}", totals_line("total", &all));
    if !bad.is_empty() {
        let report: Vec<String> = bad
            .iter()
            .map(|r| {
                format!(
                    "{} {} {}: {}\n{}",
                    r.file,
                    r.tool,
                    r.cpu_label(),
                    r.outcome.label(),
                    r.outcome.detail().unwrap_or("")
                )
            })
            .collect();
        panic!(
            "{} of {} own results did not pass:\n{}",
            bad.len(),
            results.len(),
            report.join("\n")
        );
    }
    assert!(
        results
            .iter()
            .any(|r| r.tool == "ptdump" && r.outcome.is_pass()),
        "no ptdump result passed"
    );
}

#[test]
fn corpus_against_baseline() {
    let Some(corpus) = std::env::var_os("PT_CONFORMANCE_CORPUS").filter(|v| !v.is_empty()) else {
        eprintln!("PT_CONFORMANCE_CORPUS not set: corpus run skipped");
        return;
    };
    // A relative path is meant from the workspace root (where CI and the README run
    // cargo), not from this crate's directory, which is where tests run.
    let mut corpus = std::path::PathBuf::from(corpus);
    if corpus.is_relative() && !corpus.is_dir() {
        corpus = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(corpus);
    }
    let files = list_ptt_files(&corpus).unwrap_or_else(|e| {
        panic!(
            "PT_CONFORMANCE_CORPUS={} cannot be listed: {e}",
            corpus.display()
        )
    });
    assert!(!files.is_empty(), "no .ptt files in {}", corpus.display());
    let results = run(&files);
    println!("{}", table(&results, false));
    print!("{}", totals_text(&results));

    let (per_tool, _) = totals(&results);
    let summary: Vec<String> = per_tool
        .iter()
        .map(|(tool, c)| totals_line(tool, c))
        .collect();
    eprintln!("corpus: {}", summary.join("; "));

    let path = baseline_path();
    let baseline = if path.is_file() {
        Baseline::load(&path).expect("baseline parses")
    } else {
        eprintln!("no baseline at {}: every pass is new", path.display());
        Baseline::default()
    };
    let cmp = baseline.compare(&results);
    if !cmp.new_passes.is_empty() {
        eprintln!(
            "{} new passes not in the baseline; update it with \
             `ptconformance --corpus {} --write-baseline {}`",
            cmp.new_passes.len(),
            Path::new(&corpus).display(),
            path.display()
        );
        for key in &cmp.new_passes {
            eprintln!("  new pass: {key}");
        }
    }
    if !cmp.regressions.is_empty() {
        let lines: Vec<String> = cmp
            .regressions
            .iter()
            .map(|(key, now)| {
                let detail = results
                    .iter()
                    .find(|r| pt_conformance::Key::of(r) == *key)
                    .and_then(|r| r.outcome.detail())
                    .unwrap_or("");
                format!("{key}: was passing, now {now}\n{detail}")
            })
            .collect();
        panic!(
            "{} regressions against the baseline:\n{}",
            lines.len(),
            lines.join("\n")
        );
    }
}
