//! `ptperf profile --llvm [-i perf.data] [-o FILE] [--pid PID]`: the LLVM
//! sample profile (AutoFDO) of a recording, exact counts from its whole trace,
//! in the text format `llvm-profdata merge --sample` reads and clang's
//! `-fprofile-sample-use` takes.
//!
//! Every AUX queue is decoded ([`super::perf::collect`]); each process's counts
//! are mapped through its files' DWARF and the profiles of all processes (or of
//! the one `--pid` names) are merged, as one binary's runs are. What decoding
//! met (errors, lost trace, code it could not find) is named on stderr.

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use pt_perf::session::{Session, SessionOptions};
use pt_perf_data::MappedFile;

use super::LlvmProfile;

/// `ptperf profile`'s command line.
#[derive(Parser, Debug)]
#[command(
    name = "ptperf profile",
    about = "Write the LLVM sample profile (AutoFDO) of an Intel PT perf.data, counted from its whole trace"
)]
pub struct Args {
    /// input file name
    #[arg(short = 'i', long = "input", default_value = "perf.data")]
    pub input: String,
    /// output file name ('-' or none: standard output)
    #[arg(short = 'o', long = "output", default_value = "-")]
    pub output: String,
    /// LLVM's text sample-profile format (the only format, and the default)
    #[arg(long = "llvm")]
    pub llvm: bool,
    /// only the process with this id
    #[arg(long = "pid")]
    pub pid: Option<u32>,
    /// do not print what decoding met on stderr
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,
}

/// Runs `ptperf profile ARGS`.
pub fn main(args: &[OsString]) -> ExitCode {
    crate::command::<Args>("ptperf profile", args, |a| run(&a))
}

fn run(a: &Args) -> Result<(), String> {
    let what = |e: &dyn std::fmt::Display| format!("ptperf profile: {}: {e}", a.input);
    let file = MappedFile::open(&a.input).map_err(|e| what(&e))?;
    let perf = file.parse().map_err(|e| what(&e))?;
    let session = Session::new(&perf, SessionOptions::for_file(&a.input)).map_err(|e| what(&e))?;
    let (procs, problems) = super::perf::collect(&session);
    if !a.quiet {
        for l in &problems.lines {
            eprintln!("ptperf profile: warning: {l}");
        }
    }
    let mut profile = LlvmProfile::default();
    let mut found = false;
    for p in procs {
        if a.pid.is_some() && p.pid != a.pid {
            continue;
        }
        found = true;
        profile.merge(LlvmProfile::build(&p.counts, &p.modules));
    }
    if let Some(pid) = a.pid.filter(|_| !found) {
        return Err(format!(
            "ptperf profile: {}: no trace of process {pid}",
            a.input
        ));
    }
    if profile.functions.is_empty() {
        return Err(format!(
            "ptperf profile: {}: no function with debug information was executed (build with -g; clang: -fdebug-info-for-profiling)",
            a.input
        ));
    }
    if profile.unattributed > 0 && !a.quiet {
        eprintln!(
            "ptperf profile: {} instructions ran in code without line information",
            profile.unattributed
        );
    }
    let mut text = Vec::new();
    profile
        .write_text(&mut text)
        .map_err(|e| format!("ptperf profile: {e}"))?;
    if a.output == "-" {
        let mut out = std::io::stdout().lock();
        out.write_all(&text)
            .and_then(|()| out.flush())
            .map_err(|e| format!("ptperf profile: standard output: {e}"))
    } else {
        std::fs::write(&a.output, &text).map_err(|e| format!("ptperf profile: {}: {e}", a.output))
    }
}
