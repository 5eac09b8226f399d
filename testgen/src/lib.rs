//! pttestgen: reads libipt's .ptt format and writes .bin, .pt, .lst, .exp and .sb files.
//!
//! A .ptt file is assembly whose comments carry `@pt` directives (one packet each), `@sb`
//! directives (side-band records) and, after `@pt .exp(tool)`, the expected output of a
//! tool.
//!
//! # API structure
//!
//! - [`asm`] assembles the source: image, labels, listing;
//! - [`ptt`] finds directives in lines and names the generated files;
//! - [`directive`] turns one `@pt` directive into a packet (or raw bytes), written by
//!   `pt-encoder`;
//! - [`labels`] resolves `%label` references against the assembled image;
//! - [`sideband`] turns the `@sb` directives into side-band streams (`.sb` files);
//! - [`exp`] expands the `%label` references of the expectation sections;
//! - [`gen`] runs the whole file ([`gen::generate`]) and writes the outputs without
//!   leaving partial files.
//!
//! The data path: .ptt source → [`asm`] (image and labels) → each `@pt` line through
//! [`directive`] → the trace (`.pt`) and expectations, which `pt-conformance` hands to
//! ptdump and ptxed (`pt-decoder`) and compares.
//!
//! The argument syntax follows libipt's pttc exactly (C integer syntax, which blanks
//! matter, what is ignored), so that libipt's test files produce the same trace and
//! expectations.
//!
//! # Example usage
//!
//! ```
//! use std::path::Path;
//!
//! let source = "\
//! org 0x1000
//! bits 64
//! ; @pt psb()
//! ; @pt mode.exec(64bit)
//! ; @pt psbend()
//! ; @pt tip.pge(3: %start)
//! start: nop
//! ; @pt tip.pgd(0: %end)
//! end: nop
//! ";
//! let out = pt_testgen::gen::generate(source, Path::new("two-nops.ptt"), None)?;
//! assert_eq!(out.bin, [0x90, 0x90]);
//! assert_eq!(&out.trace.bytes[..16], &[0x02, 0x82].repeat(8)[..]); // the PSB
//! let names: Vec<String> = out.files().into_iter().map(|(name, _)| name).collect();
//! assert_eq!(names, ["two-nops.bin", "two-nops.pt", "two-nops.lst"]);
//! # Ok::<(), pt_testgen::gen::GenError>(())
//! ```
#![deny(missing_docs)]

pub mod asm;
mod cstr;
pub mod directive;
pub mod exp;
pub mod gen;
pub mod labels;
pub mod ptt;
pub mod sideband;
