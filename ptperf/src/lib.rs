//! Tools on top of the decoder and the simulated PT CPU, and perf's Intel PT
//! commands that read perf.data.
//!
//! - [`verify`]: decode a simulated trace with pt-decoder and compare the
//!   decoded instructions with the recorded execution.
//! - [`profile`]: branch counts and the hottest functions of a decoded flow.
//! - [`decode`]: perf's Intel PT decoder semantics (the states intel-pt-decoder.c
//!   hands to intel-pt.c), over pt-decoder's packets and [`code`]'s walk.
//!
//! The `ptrec` binary records a program (perf where PT works, else the
//! simulator) and, with `--decode`, checks and profiles the recording.
#![deny(missing_docs)]

pub mod code;
pub mod decode;
pub mod inject;
pub mod itrace;
pub mod profile;
pub mod progress;
pub mod report;
pub mod sample;
pub mod script;
pub mod symbols;
pub mod synth;
pub mod verify;
