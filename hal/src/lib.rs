//! Intel PT hardware abstraction: what the processor can do, how a trace is
//! configured, and the backends that record one.
//!
//! # API structure
//!
//! - [`caps`]: CPUID 14H/15H probing into typed [`caps::Capabilities`].
//! - [`sysfs`]: the kernel side (the `intel_pt` PMU, `perf_event_paranoid`, mlock limits).
//! - [`probe`]: both together, and why tracing is or is not possible here.
//! - [`msr`]: the IA32_RTIT_* registers, every field named as in the SDM.
//! - [`topa`]: ToPA tables and single-range output.
//! - [`config`]: [`config::TraceConfig`], the one typed configuration that mirrors
//!   IA32_RTIT_CTL, validated against the capabilities; the simulator and the decoder
//!   take the same type.
//! - [`backend`]: the [`backend::TraceBackend`] trait shared by perf and the simulator
//!   (`pt-sim`'s `SimBackend`).
//! - [`perf`]: the Linux perf backend, and ([`perf::data`]) its recording written as
//!   perf.data through `pt-perf-data`'s one Intel PT writer.
//!
//! The data path: a [`config::TraceConfig`] → the register image ([`config::RtitRegs`])
//! or perf's event config ([`perf::attr`]) → a backend's [`backend::TraceItem`]s →
//! perf.data, which `pt-decoder` and `ptperf` read.
//!
//! # Example usage
//!
//! perf's default `intel_pt//u` as the registers a kernel driver would load, and back:
//!
//! ```
//! use pt_hal::config::TraceConfig;
//!
//! let cfg = TraceConfig::perf_default();
//! let regs = cfg.to_regs();
//! assert!(regs.ctl.trace_en() && regs.ctl.branch_en() && regs.ctl.tsc_en());
//! assert!(regs.ctl.user() && !regs.ctl.os());
//! assert_eq!(regs.ctl.psb_freq(), 3);
//! assert_eq!(TraceConfig::from_regs(&regs).unwrap(), cfg);
//!
//! // Whether this machine can trace, and if not why (no PT, no PMU, permissions).
//! let (_, _, ready) = pt_hal::probe::Readiness::host();
//! println!("{}", ready.summary());
//! ```
#![deny(missing_docs)]

pub mod backend;
pub mod caps;
pub mod config;
pub mod msr;
pub mod perf;
pub mod probe;
pub mod sysfs;
pub mod topa;
