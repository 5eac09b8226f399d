//! Simulated Intel PT: a software model of the trace hardware and the
//! execution sources that feed it retired instructions.
//!
//! - [`exec`]: execution sources (ptrace single-stepping, valgrind, the
//!   compact execution log, scripted programs).
//! - [`pt`]: the PT logic: retired instructions and events in, the packets
//!   the processor would write out.
//! - [`clock`]: the modeled core, TSC and crystal clocks behind the timing packets.
//! - [`backend`]: the IA32_RTIT_* MSR file, simulated physical memory and
//!   ToPA/single-range output ([`backend::SimCpu`]), and [`backend::SimBackend`],
//!   the HAL's `TraceBackend` on top of it.
//! - [`record`]: a recording end to end (what `ptperf record` runs on the
//!   simulator): one trace stream per thread and the task events between
//!   them ([`record::TaskEvent`]) into a [`record::RecordSink`], such as
//!   [`record::PerfDataSink`], which writes the perf.data file perf reads.
//! - [`traced`]: which recorded instructions a configuration traces (the
//!   ground truth a decoded flow is compared with).
//!
//! The model depends on the packet encoder, the HAL and the perf.data
//! format only; decoding its traces (checking them against the recording,
//! profiling them, `ptperf`) lives in the `ptperf` crate.
#![deny(missing_docs)]

pub mod backend;
pub mod clock;
pub mod exec;
pub mod pt;
pub mod record;
pub mod traced;
