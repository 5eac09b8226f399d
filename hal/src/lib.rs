//! Intel PT hardware abstraction.
//!
//! - [`caps`]: CPUID 14H/15H probing into typed [`caps::Capabilities`].
//! - [`sysfs`]: the kernel side (the `intel_pt` PMU, `perf_event_paranoid`, mlock limits).
//! - [`probe`]: both together, and why tracing is or is not possible here.
//! - [`msr`]: the IA32_RTIT_* registers, every field named as in the SDM.
//! - [`topa`]: ToPA tables and single-range output.
//! - [`config`]: [`config::TraceConfig`], validated against the capabilities.
//! - [`backend`]: the [`backend::TraceBackend`] trait shared by perf and the simulator.
//! - [`perf`]: the Linux perf backend.
#![deny(missing_docs)]

pub mod backend;
pub mod caps;
pub mod config;
pub mod msr;
pub mod perf;
pub mod probe;
pub mod sysfs;
pub mod topa;
