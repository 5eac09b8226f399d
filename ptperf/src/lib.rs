//! `ptperf`: perf's Intel PT workflow (`record`, and the commands that read
//! what it writes) on any machine, and the checks behind it.
//!
//! - [`record`]: `ptperf record`, perf record for Intel PT: the perf backend
//!   where PT works, else the simulated PT CPU, into perf.data.
//! - [`verify`]: decode a simulated recording with pt-decoder and compare
//!   every thread's instructions with the recorded execution.
//! - [`profile`]: branch counts and the hottest functions of a decoded flow.
//!
//! The `ptperf` binary dispatches its subcommands to these modules.
#![deny(missing_docs)]

pub mod profile;
pub mod record;
mod record_check;
pub mod verify;
