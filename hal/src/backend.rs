//! The backend trait: one API over the Linux perf driver and the simulator.
//!
//! The life cycle is configure → start → stop → read (or snapshot while
//! running). Nothing here mentions perf, so an in-process simulator can
//! implement it: trace bytes come out as [`TraceItem::Data`] at their position
//! in the trace stream, and anything the backend could not deliver becomes a
//! [`TraceItem::Lost`] record at the position where it went missing.

use crate::caps::Capabilities;
use crate::config::TraceConfig;

/// Why trace data is missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossKind {
    /// The buffer was full: output stopped until space was freed (perf AUX TRUNCATED).
    Truncated,
    /// Older data was overwritten (snapshot/ring mode, perf AUX OVERWRITE).
    Overwritten,
    /// The record contains gaps, e.g. tracing was off in VMX root (perf AUX PARTIAL).
    Partial,
    /// Another user of the trace hardware collided with ours (perf AUX COLLISION).
    Collision,
    /// Side-band records were dropped (perf RECORD_LOST).
    SidebandRecords {
        /// How many.
        count: u64,
    },
}

/// One piece of backend output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceItem {
    /// Trace bytes starting at `offset` in the trace stream.
    Data {
        /// Stream position of the first byte.
        offset: u64,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// Data went missing at `offset`.
    Lost {
        /// Stream position where the loss was noticed.
        offset: u64,
        /// Bytes affected, when known.
        size: Option<u64>,
        /// Why.
        kind: LossKind,
    },
}

/// A source of Intel PT trace: hardware through an OS driver, or a simulator.
pub trait TraceBackend {
    /// The backend's error type.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The capabilities trace configurations are checked against.
    fn capabilities(&self) -> Capabilities;

    /// Applies a configuration (before `start`). Invalid ones are rejected here.
    fn configure(&mut self, config: &TraceConfig) -> Result<(), Self::Error>;

    /// Starts tracing (TraceEn = 1).
    fn start(&mut self) -> Result<(), Self::Error>;

    /// Stops tracing (TraceEn = 0); buffered output is flushed.
    fn stop(&mut self) -> Result<(), Self::Error>;

    /// Appends the output produced since the last read; returns the number of
    /// trace bytes appended.
    fn read(&mut self, out: &mut Vec<TraceItem>) -> Result<usize, Self::Error>;

    /// Captures the newest buffer contents without ending the session (ring or
    /// snapshot mode); returns the number of trace bytes appended.
    fn snapshot(&mut self, out: &mut Vec<TraceItem>) -> Result<usize, Self::Error>;
}
