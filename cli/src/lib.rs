//! What every command-line tool of the workspace does when its standard
//! output fails, as Unix tools do:
//!
//! - a closed pipe (EPIPE, e.g. `ptdump trace | head -1`) ends the tool
//!   quietly: it dies of SIGPIPE, like a C tool, without a message;
//! - any other error (ENOSPC on `> /dev/full`, EIO) ends it with one line on
//!   stderr, `TOOL: standard output: ERROR`, and exit status 1;
//! - never a panic.
//!
//! A tool calls [`init`] first thing in `main` (it covers `print!` and
//! `println!`), and writes through [`stdout`] where it writes through a
//! writer of its own (errors that a `let _ = write!(…)` would drop are
//! caught there too).
//!
//! ```
//! use std::io::Write;
//!
//! fn main() {
//!     pt_cli::init();
//!     println!("a line");
//!     let mut out = std::io::BufWriter::new(pt_cli::stdout());
//!     let _ = writeln!(out, "another one");
//! }
//! ```
//!
//! Progress on long work is drawn by [`progress`]: on a terminal's stderr
//! only, never into a pipe or a file.
//!
//! # API structure
//!
//! - [`init`]: `print!`/`println!` end the tool quietly on a closed pipe;
//! - [`stdout`]: a locked, buffered standard output with the same rules;
//! - `parse` (feature `clap`): clap's parsing, with `--help` and `--version`
//!   written through [`stdout`];
//! - [`progress`]: indicatif bars and counters, on a terminal only.
//!
//! The tools (ptdump, ptxed, ptperf, pttestgen, ptconformance, ptprobe) are
//! thin `main`s over their libraries plus these few calls.
#![deny(missing_docs)]

pub mod progress;

use std::io::{self, Write};
use std::sync::Once;

/// Prefix of the panic message of `print!`/`println!` when stdout fails
/// (std's wording, stable since Rust 1.0).
const PRINT_PANIC: &str = "failed printing to stdout: ";

/// Makes `print!` and `println!` end the tool as the crate docs say instead
/// of panicking when stdout fails. Other panics are reported as before.
/// Calling it again does nothing.
pub fn init() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let msg = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
            match msg.and_then(|m| m.strip_prefix(PRINT_PANIC)) {
                Some(error) => end(error, error.contains(&epipe_suffix())),
                None => previous(info),
            }
        }));
    });
}

/// `(os error 32)`: how std's `io::Error` shows EPIPE.
fn epipe_suffix() -> String {
    format!("(os error {})", libc::EPIPE)
}

/// Parses the command line with clap ([`clap::Parser::parse`]), after
/// [`init`]; `--help` and `--version` text that goes to a file or pipe is
/// written through [`stdout`], so a failing stdout ends the tool here too
/// (clap itself would drop the error and exit 0).
#[cfg(feature = "clap")]
pub fn parse<P: clap::Parser>() -> P {
    init();
    P::try_parse().unwrap_or_else(|e| {
        if e.use_stderr() || std::io::IsTerminal::is_terminal(&io::stdout()) {
            e.exit()
        }
        let mut out = stdout();
        let _ = write!(out, "{}", e.render());
        drop(out);
        std::process::exit(e.exit_code())
    })
}

/// The tool's standard output, locked, as a writer whose errors end the tool
/// as the crate docs say (so a write through it never returns an error).
/// Buffer it (`BufWriter`) where output is large; dropping it flushes.
pub fn stdout() -> Stdout {
    init();
    Stdout {
        lock: io::stdout().lock(),
    }
}

/// See [`stdout`].
pub struct Stdout {
    lock: io::StdoutLock<'static>,
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.lock.write(buf).or_else(|e| fail(&e))
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.lock.write_all(buf).or_else(|e| fail(&e))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.lock.flush().or_else(|e| fail(&e))
    }
}

impl Drop for Stdout {
    fn drop(&mut self) {
        if let Err(e) = self.lock.flush() {
            fail(&e);
        }
    }
}

/// Ends the tool for a write error on stdout.
fn fail(e: &io::Error) -> ! {
    let text = e.to_string();
    end(&text, e.kind() == io::ErrorKind::BrokenPipe)
}

fn end(error: &str, broken_pipe: bool) -> ! {
    if broken_pipe {
        // As a C tool would have: the kernel's SIGPIPE, which Rust's runtime
        // ignores at start-up, so restore its default first.
        // SAFETY: plain signal calls; the process ends here either way.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::raise(libc::SIGPIPE);
            libc::_exit(128 + libc::SIGPIPE);
        }
    }
    let _ = writeln!(io::stderr(), "{}: standard output: {error}", tool_name());
    // std's own flush of stdout at exit ignores errors.
    std::process::exit(1)
}

/// The tool's name: the file name it was started as.
fn tool_name() -> String {
    std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "tool".to_string())
}
