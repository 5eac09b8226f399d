//! The perf.data a subcommand reads (script, report, inject, export): opening it,
//! what the reader found wrong in it, and the closing summary of what it skipped.
//!
//! Every subcommand goes through here so that they all say the same thing about the
//! same file: the session's warnings ([`pt_perf::session::Warning`]) when it opens,
//! one line summing up what the damage took away ([`pt_perf::session::Skipped`]) at
//! the end, and the exit status [`EXIT_STATUS`] documents.

use std::process::{ExitCode, Termination};

use pt_perf::session::{Session, SessionOptions, Skipped};

use crate::Error;
use pt_perf_data::{MappedFile, PerfFile};

use pt_perf::synth::Synth;

/// The exit status convention of the subcommands that read a perf.data, for their help.
pub const EXIT_STATUS: &str = "\
Exit status:
  0    the whole recording was read
  1    nothing was done: the input is not a readable Intel PT perf.data, or the
       output cannot be written (one line on stderr says why)
  2    the recording is damaged: what could be read was processed, the warnings
       say where, and the last line on stderr sums up what was skipped
  129  bad options
Reports go to stderr. A file of '-' is standard input (perf's pipe mode, or a
whole perf.data sent through a pipe).";

/// Warnings shown before the rest are counted in one line.
const SHOWN: usize = 20;

/// How a subcommand's run over a perf.data ended (its exit status, see
/// [`EXIT_STATUS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The whole recording was read.
    Whole,
    /// The recording is damaged; what could be read was.
    Damaged,
}

impl Termination for Outcome {
    fn report(self) -> ExitCode {
        match self {
            Outcome::Whole => ExitCode::SUCCESS,
            Outcome::Damaged => ExitCode::from(2),
        }
    }
}

/// Opens the perf.data at `path` (`-`: standard input) for subcommand `cmd` (e.g.
/// `ptperf script`); the error is the line to print, naming the file and what it is.
pub fn open(cmd: &str, path: &str) -> Result<MappedFile, Error> {
    let file = if path == "-" {
        MappedFile::read_stream(std::io::stdin().lock(), "standard input")
    } else {
        MappedFile::open(path)
    };
    file.map_err(|source| Error::Open {
        cmd: cmd.into(),
        path: path.into(),
        source,
    })
}

/// Reads the header of `file` (see [`open`]).
pub fn parse<'a>(cmd: &str, path: &str, file: &'a MappedFile) -> Result<PerfFile<'a>, Error> {
    file.parse().map_err(|source| Error::PerfData {
        cmd: cmd.into(),
        path: path.into(),
        source,
    })
}

/// The decoding session of `perf`; its warnings go to stderr (the first `SHOWN`,
/// then their count).
pub fn session<'a>(
    cmd: &str,
    path: &str,
    perf: &PerfFile<'a>,
    options: SessionOptions,
) -> Result<Session<'a>, Error> {
    let session = Session::new(perf, options).map_err(|source| Error::Session {
        cmd: cmd.into(),
        path: path.into(),
        source,
    })?;
    Ok(warned(cmd, path, session))
}

/// [`session`], or for a recording without Intel PT trace that holds samples
/// (`perf record -e cpu-clock`'s, `perf inject --itrace`'s output) its
/// side-band ([`Session::without_trace`]): script and report show those
/// samples, as perf does.
pub fn session_or_samples<'a>(
    cmd: &str,
    path: &str,
    perf: &PerfFile<'a>,
    options: SessionOptions,
) -> Result<Session<'a>, Error> {
    match Session::new(perf, options.clone()) {
        Err(pt_perf::session::SessionError::NotIntelPt) if pt_perf::recorded::has_samples(perf) => {
            Ok(warned(cmd, path, Session::without_trace(perf, options)))
        }
        r => r
            .map(|s| warned(cmd, path, s))
            .map_err(|source| Error::Session {
                cmd: cmd.into(),
                path: path.into(),
                source,
            }),
    }
}

/// `session` after its warnings went to stderr.
fn warned<'a>(cmd: &str, path: &str, session: Session<'a>) -> Session<'a> {
    let warnings = session.warnings();
    for w in warnings.iter().take(SHOWN) {
        eprintln!("{cmd}: {path}: warning: {w}");
    }
    if warnings.len() > SHOWN {
        eprintln!(
            "{cmd}: {path}: warning: … and {} more warnings",
            warnings.len() - SHOWN
        );
    }
    session
}

/// What the trace's decoding lost that the output does not show: decoder errors
/// `--itrace` leaves out (perf shows them only with `e`).
pub fn trace_warnings(cmd: &str, path: &str, synth: &Synth<'_, '_>) {
    hidden_errors_warning(cmd, path, hidden_errors(synth));
}

/// How many of `synth`'s decoder errors its `--itrace` options leave out.
pub fn hidden_errors(synth: &Synth<'_, '_>) -> u64 {
    if synth.opts().errors {
        0
    } else {
        synth.trace_errors()
    }
}

/// The warning for `n` decoder errors the output does not show.
pub fn hidden_errors_warning(cmd: &str, path: &str, n: u64) {
    if n > 0 {
        let s = if n == 1 { "" } else { "s" };
        eprintln!(
            "{cmd}: {path}: warning: {n} trace decode error{s} (not shown: add 'e' to --itrace)"
        );
    }
}

/// The end of a run over `session`: a last stderr line summing up what the
/// recording's damage took away, if anything, and the outcome.
pub fn finish(cmd: &str, path: &str, session: &Session<'_>) -> Outcome {
    end(cmd, path, session.skipped())
}

/// [`finish`] with the session's tally taken before.
pub fn end(cmd: &str, path: &str, skipped: &Skipped) -> Outcome {
    if skipped.is_empty() {
        return Outcome::Whole;
    }
    eprintln!("{cmd}: {path}: damaged recording: {skipped}; the output covers the rest");
    Outcome::Damaged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_exit_statuses() {
        assert_eq!(Outcome::Whole.report(), ExitCode::SUCCESS);
        assert_eq!(Outcome::Damaged.report(), ExitCode::from(2));
        assert!(EXIT_STATUS.contains("  2 "));
    }

    #[test]
    fn what_the_input_is() {
        let dir = std::env::temp_dir();
        let e = open("ptperf script", dir.to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a directory"), "{e}");
        let e = open("ptperf script", "/dev/zero").unwrap_err().to_string();
        assert!(
            e.contains("a character device") && e.contains("magic"),
            "{e}"
        );
        let e = open("ptperf script", "/dev/null").unwrap_err().to_string();
        assert!(e.contains("gave no data"), "{e}");
    }
}
