//! The tool's errors: what a subcommand cannot do, each with what it needs to
//! name the file or argument at fault. A subcommand prints one as its single
//! line on stderr (see `ptperf::command`).

use std::path::PathBuf;

/// Why a ptperf subcommand (or the checks behind it) stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A command-line argument the subcommand cannot take: the line as perf
    /// words it.
    #[error("{0}")]
    Usage(String),
    /// The perf.data cannot be opened (`cmd` is the subcommand, e.g. `ptperf script`).
    #[error("{cmd}: {path}: {source}")]
    Open {
        /// The subcommand.
        cmd: String,
        /// The file as given.
        path: String,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// The perf.data's header or records cannot be read.
    #[error("{cmd}: {path}: {source}")]
    PerfData {
        /// The subcommand.
        cmd: String,
        /// The file as given.
        path: String,
        /// What the reader found, with its offset.
        #[source]
        source: pt_perf_data::Error,
    },
    /// pt-perf's session refuses the recording (not an Intel PT recording).
    #[error("{cmd}: {path}: {source}")]
    Session {
        /// The subcommand.
        cmd: String,
        /// The file as given.
        path: String,
        /// Why.
        #[source]
        source: pt_perf::SessionError,
    },
    /// A file that cannot be read, written or run.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// A recording (or the execution log beside it) that is not what the check
    /// needs: `what` says why.
    #[error("{}: {what}", path.display())]
    Recording {
        /// The perf.data or execution log.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// Nothing to draw, decode or write: `what` says which.
    #[error("{0}")]
    Nothing(String),
}

impl Error {
    /// An [`Error::Io`] on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// An [`Error::Recording`]: `path` and what is wrong with it.
    pub fn recording(path: impl Into<PathBuf>, what: impl std::fmt::Display) -> Self {
        Error::Recording {
            path: path.into(),
            what: what.to_string(),
        }
    }
}

/// The line a subcommand's `run` prints (its own steps report in lines).
impl From<Error> for String {
    fn from(e: Error) -> String {
        e.to_string()
    }
}
