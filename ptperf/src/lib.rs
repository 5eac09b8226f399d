//! Tools on top of the decoder and the simulated PT CPU.
//!
//! - [`verify`]: decode a simulated trace with pt-decoder and compare the
//!   decoded instructions with the recorded execution.
//! - [`profile`]: branch counts and the hottest functions of a decoded flow.
//! - [`export`]: samples into SQLite or PostgreSQL with perf's schema.
//! - [`profile_llvm`]: LLVM sample profiles (AutoFDO) of a decoded flow.
//!
//! The `ptrec` binary records a program (perf where PT works, else the
//! simulator) and, with `--decode`, checks and profiles the recording.
#![deny(missing_docs)]

pub mod export;
pub mod profile;
pub mod profile_llvm;
pub mod verify;
