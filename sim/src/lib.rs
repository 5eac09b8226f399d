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
//! - [`record`]: a recording end to end (what `ptrec` runs on the simulator).
//! - [`profile`]: branch counts and the hottest functions of a decoded flow.
//! - [`sideband`]: the side-band file written next to a simulated trace.
//! - [`verify`]: decode a simulated trace with pt-decoder and compare it with
//!   the recorded execution.
#![deny(missing_docs)]

pub mod backend;
pub mod clock;
pub mod exec;
pub mod profile;
pub mod pt;
pub mod record;
pub mod sideband;
pub mod verify;
