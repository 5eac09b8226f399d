//! Simulated Intel PT: a software model of the trace hardware and the
//! execution sources that feed it retired instructions.
//!
//! # API structure
//!
//! - [`exec`]: execution sources (QEMU with our TCG plugin, valgrind, ptrace
//!   single-stepping, the compact execution log, scripted programs): each is
//!   an [`exec::ExecutionSource`] handing out retired instructions and task
//!   events.
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
//! The data path: a source's instructions → [`pt`] (configured by `pt-hal`'s
//! `TraceConfig`) → packets in each thread's output area → a perf.data
//! (through `pt-perf-data`'s one Intel PT writer) that `perf script`,
//! `ptperf` and `pt-decoder` read.
//!
//! The model depends on the packet encoder, the HAL and the perf.data
//! format only; decoding its traces (checking them against the recording,
//! profiling them, `ptperf`) lives in the `ptperf` crate.
//!
//! # Example usage
//!
//! A scripted loop (`dec ecx; jnz`, taken once) recorded with perf's default
//! configuration into a perf.data, read back:
//!
//! ```
//! use pt_hal::config::TraceConfig;
//! use pt_perf_data::{MappedFile, Record};
//! use pt_sim::exec::script::{Directive, Script};
//! use pt_sim::exec::ExecMode;
//! use pt_sim::record::{record_perf_data, PerfDataOptions, SimRecording};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut program = Script::new(0x1000, ExecMode::Bit64)
//!     .code(0x1000, &[0xff, 0xc9, 0x75, 0xfc]) // 1000: dec ecx; jnz 1000
//!     .directives([Directive::Taken, Directive::NotTaken, Directive::Stop]);
//! let path = std::env::temp_dir().join(format!("pt-sim-doc-{}.data", std::process::id()));
//! let rec = SimRecording::new(TraceConfig::perf_default());
//! let summary = record_perf_data(&mut program, &rec, &PerfDataOptions::new(&path), |_| {})?;
//! assert_eq!(summary.instructions, 4);
//!
//! let file = MappedFile::open(&path)?;
//! let perf = file.parse()?;
//! let trace: usize = perf
//!     .records()
//!     .filter_map(|r| match r {
//!         Ok((_, Record::Auxtrace(a))) => Some(a.data.len()),
//!         _ => None,
//!     })
//!     .sum();
//! assert!(trace > 16, "a PSB and more");
//! # drop(file);
//! # std::fs::remove_file(&path)?;
//! # let _ = std::fs::remove_dir_all(pt_sim::record::debug_dir(&path));
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

pub mod backend;
pub mod clock;
pub mod exec;
pub mod pt;
pub mod record;
pub mod traced;
