//! pttestgen: reads libipt's .ptt format and writes .bin, .pt, .lst, .exp and .sb files.
//!
//! A .ptt file is assembly whose comments carry `@pt` directives (one packet each), `@sb`
//! directives (side-band records) and, after `@pt .exp(tool)`, the expected output of a
//! tool. The layers:
//!
//! - [`asm`] assembles the source: image, labels, listing;
//! - [`ptt`] finds directives in lines and names the generated files;
//! - [`directive`] turns one `@pt` directive into a packet (or raw bytes);
//! - [`sideband`] turns the `@sb` directives into side-band streams (`.sb` files);
//! - [`exp`] expands the `%label` references of the expectation sections;
//! - [`gen`] runs the whole file and writes the outputs without leaving partial files.
//!
//! The argument syntax follows libipt's pttc exactly (C integer syntax, which blanks
//! matter, what is ignored), so that libipt's test files produce the same trace and
//! expectations.
#![deny(missing_docs)]

pub mod asm;
mod cstr;
pub mod directive;
pub mod exp;
pub mod gen;
pub mod labels;
pub mod ptt;
pub mod sideband;
