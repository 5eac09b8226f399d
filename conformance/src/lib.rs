//! Conformance runner for `.ptt` tests.
//!
//! Runs libipt-style `.ptt` files by the protocol of libipt's
//! `script/test.bash` (see `shared/conformance/README.md`): in a fresh
//! directory, `pttestgen [--cpu C] file.ptt` writes the image, the trace and
//! one `.exp` file per tool; each tool (`ptdump`, `ptxed`) then runs on the
//! trace and its stdout is compared with the `.exp` file as `diff -ub` would.
//!
//! Because the protocol is the same, the runner can check the project's own
//! tools and libipt's (`PTTESTGEN=…/pttc PTDUMP=…/ptdump`) alike.
//!
//! ```no_run
//! use pt_conformance::{list_ptt_files, own_suite_dir, BuildPolicy, Runner, Tools};
//!
//! let runner = Runner::new(Tools::discover(BuildPolicy::IfMissing));
//! let files = list_ptt_files(&own_suite_dir()).expect("suite exists");
//! let results = runner.run_files(&files, &|_| {});
//! print!("{}", pt_conformance::report::totals_text(&results));
//! ```

#![deny(missing_docs)]

use std::path::PathBuf;

pub mod baseline;
pub mod diff;
pub mod exec;
pub mod ptt;
mod reference;
pub mod report;
pub mod runner;
pub mod tools;

pub use baseline::{Baseline, Comparison, Key};
pub use runner::{list_ptt_files, own_suite_dir, Outcome, Progress, Runner, TestResult};
pub use tools::{BuildPolicy, ToolKind, ToolPath, Tools};

/// Errors of the runner itself (not of the tools under test).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConformanceError {
    /// A corpus directory could not be listed.
    #[error("cannot list {dir}: {source}")]
    ReadDir {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A baseline line is not `file<TAB>tool<TAB>cpu`.
    #[error("baseline line {line}: expected `file<TAB>tool<TAB>cpu`, found {text:?}")]
    BaselineSyntax {
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
    },
}
