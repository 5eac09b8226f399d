//! Simulated Intel PT: a software model of the trace hardware and the
//! execution sources that feed it retired instructions.
#![deny(missing_docs)]

pub mod backend;
pub mod clock;
pub mod exec;
pub mod pt;
pub mod record;
pub mod sideband;
pub mod verify;
