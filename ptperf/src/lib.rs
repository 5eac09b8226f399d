//! `ptperf`: perf's Intel PT workflow (`record`, and the commands that read
//! what it writes) on any machine, and the checks behind it.
//!
//! - [`record`]: `ptperf record`, perf record for Intel PT: the perf backend
//!   where PT works, else the simulated PT CPU, into perf.data.
//! - [`verify`]: decode a simulated recording with pt-decoder and compare
//!   every thread's instructions with the recorded execution.
//! - [`damage`]: how much of a recorded execution a decoder recovers from a
//!   damaged trace (the damage benchmark).
//! - [`profile`]: branch counts and the hottest functions of a decoded flow.
//!
//! perf's semantics (the perf.data session, perf's decoder, the code walk, the
//! `--itrace` options and the samples perf synthesizes) are the library pt-perf's;
//! this crate is the tool over it: arguments, printing, output formats, progress.
//!
//! - [`script`], [`report`], [`inject`]: `ptperf script`, `report` and `inject`,
//!   byte for byte as perf prints and writes them; [`pt_elf::symbols`] finds the names
//!   perf gives addresses, [`pt_elf::srcline`] their source lines.
//! - [`export`]: samples into SQLite or PostgreSQL with perf's schema.
//! - [`input`]: how every reading subcommand opens its perf.data, reports what
//!   the reader found wrong and sums up what it skipped (exit status 2).
//! - [`profile_llvm`]: LLVM sample profiles (AutoFDO) of a decoded flow.
//! - [`timeline`]: every thread's calls over time for trace viewers (Chrome JSON, Perfetto).
//! - [`coverage`]: the code a recording covers per DSO; lcov, drcov and AFL bitmaps.
//!
//! The `ptperf` binary dispatches its subcommands to these modules.
#![deny(missing_docs)]

pub mod coverage;
pub use error::Error;

pub mod damage;
mod error;
pub mod export;
pub mod inject;
pub mod input;
pub mod profile;
pub mod profile_llvm;
pub mod progress;
pub mod record;
mod record_check;
pub mod report;
pub mod script;
pub mod timeline;
pub mod verify;

/// A subcommand's `main` on its clap arguments: help and usage errors on stderr with
/// exit status 129 (as perf's `-h` and bad options), `--version` alone on stdout, then
/// `run`'s error as one line on stderr with exit status 1.
#[allow(dead_code)] // For subcommands that read no perf.data; those that do use `reading`.
pub(crate) fn command<A: clap::Parser>(
    name: &str,
    args: &[std::ffi::OsString],
    run: impl FnOnce(A) -> Result<(), String>,
) -> std::process::ExitCode {
    reading::<A>(name, args, |a| run(a).map(|()| input::Outcome::Whole))
}

/// `ptperf version 0.1.0`, as `perf --version` prints perf's.
pub fn print_version() {
    println!("ptperf version {}", env!("CARGO_PKG_VERSION"));
}

/// [`command`] for a subcommand that reads a perf.data: its exit status is its
/// [`input::Outcome`]'s (2 for a damaged recording).
pub(crate) fn reading<A: clap::Parser>(
    name: &str,
    args: &[std::ffi::OsString],
    run: impl FnOnce(A) -> Result<input::Outcome, String>,
) -> std::process::ExitCode {
    reading_with(name, args, |argv| A::try_parse_from(argv), run)
}

/// [`reading`] with its own parser of the command line (`argv[0]` first).
pub(crate) fn reading_with<A>(
    name: &str,
    args: &[std::ffi::OsString],
    parse: impl FnOnce(Vec<std::ffi::OsString>) -> Result<A, clap::Error>,
    run: impl FnOnce(A) -> Result<input::Outcome, String>,
) -> std::process::ExitCode {
    use std::process::ExitCode;
    use std::process::Termination;
    if let [only] = args {
        if only == "--version" {
            print_version();
            return ExitCode::SUCCESS;
        }
    }
    let argv = std::iter::once(std::ffi::OsString::from(name))
        .chain(args.iter().cloned())
        .collect();
    let a = match parse(argv) {
        Ok(a) => a,
        Err(e) => {
            // perf's habit: usage and help on stderr, exit status 129.
            eprint!("{}", e.render());
            return ExitCode::from(129);
        }
    };
    match run(a) {
        Ok(r) => r.report(),
        Err(msg) => {
            eprintln!("{msg}");
            ExitCode::from(1)
        }
    }
}
