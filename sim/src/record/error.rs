//! Why a recording failed: the recorder's and its sinks' one error type.

use std::path::PathBuf;

use crate::backend::SimError;
use crate::exec::{ExecError, ThreadId};
use crate::pt::PtError;

/// A recording could not go on. Errors of files name the file; errors of the
/// layers below (the perf.data writer, the simulated trace unit, the build-id
/// cache) are kept as sources.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// A file or folder of the recording could not be made or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The execution log could not be written (the recording ends there; see
    /// [`super::RecordSummary::source_error`]).
    #[error("execution log {}: {source}", path.display())]
    ExecutionLog {
        /// The log file.
        path: PathBuf,
        /// What went wrong.
        source: ExecError,
    },
    /// The perf.data writer failed (its error names the file and the offset).
    #[error(transparent)]
    PerfData(#[from] pt_perf_data::RecordingError),
    /// The simulated trace unit refused a configuration or an MSR access.
    #[error(transparent)]
    TraceUnit(#[from] SimError),
    /// The PT logic cannot model the request (kernel tracing with a source
    /// that sees user mode only).
    #[error(transparent)]
    Pt(#[from] PtError),
    /// A build-id cache entry (code in no file, the vDSO) could not be written.
    #[error("build-id cache: {0}")]
    BuildIdCache(#[from] pt_elf::Error),
    /// More address filters than the trace unit has address ranges.
    #[error("at most {max} address filters")]
    TooManyFilters {
        /// The trace unit's address ranges.
        max: usize,
    },
    /// The sink was used after [`super::RecordSink::finish`].
    #[error("{}: the recording has finished", path.display())]
    Finished {
        /// The sink's file.
        path: PathBuf,
    },
    /// Trace bytes came for a thread whose trace was never opened.
    #[error("trace bytes of thread {thread}, which has no trace")]
    NoTrace {
        /// The thread.
        thread: ThreadId,
    },
    /// A sink of another crate failed (see [`RecordError::sink`]).
    #[error(transparent)]
    Sink(Box<dyn std::error::Error + Send + Sync>),
}

impl RecordError {
    /// An I/O error of `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        RecordError::Io {
            path: path.into(),
            source,
        }
    }

    /// The error of a [`super::RecordSink`] implemented elsewhere (a test's,
    /// another file format's), kept as the source.
    pub fn sink(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        RecordError::Sink(e.into())
    }
}

/// A maker of [`RecordError::Io`] for `path`, for `map_err`.
pub(crate) fn io_at(path: &std::path::Path) -> impl Fn(std::io::Error) -> RecordError + '_ {
    move |e| RecordError::io(path, e)
}
