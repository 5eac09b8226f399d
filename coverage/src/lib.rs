//! Coverage from Intel PT traces, for fuzzers and testers: AFL/AFL++ edge bitmaps and
//! the exact edges and basic blocks of a run.
//!
//! # Map
//!
//! * [`CoverageDecoder`] ([`decoder`]): a trace (a slice: a raw file, a perf.data AUX
//!   queue) and its code (an [`Image`](pt_decoder::Image) of raw bytes or ELF files,
//!   or a page-fetch callback like libxdc's, with optional filter ranges) → an edge
//!   bitmap, and with [`Options::collect`] the exact [`Edge`]s and [`BasicBlock`]s
//!   with their counts. It keeps its analysis of the code across calls and is
//!   allocation-free per trace once warm.
//! * [`bitmap`]: which byte an edge counts in (documented formula, or libxdc's), and
//!   AFL++'s hit-count classes.
//! * [`reference`](mod@reference): the same edges and blocks derived from pt-decoder's instruction
//!   flow, slowly: the spec the fast decoder is tested against.
//! * `graph` (private): the decoder's own graph of code over the shared block cache.
//!
//! # Example
//!
//! ```
//! use pt_coverage::{CoverageDecoder, EdgeKind, Options};
//! use pt_decoder::Image;
//! use pt_encoder::{encode_to_vec, ExecMode, IpCompression, IpPacketKind, IpPayload,
//!     ModeExec, Packet, Tnt};
//!
//! // 1000: add rax, 1   1004: call 100a   1009: ret   100a: jnz 1000   100c: ret
//! let code = [0x48, 0x83, 0xc0, 0x01, 0xe8, 0x01, 0x00, 0x00, 0x00, 0xc3, 0x75, 0xf4, 0xc3];
//! let mut image = Image::new();
//! image.add_bytes(0x1000, code.to_vec(), "code").unwrap();
//! let ip = |kind, ip| Packet::Ip(kind, IpPayload::new(IpCompression::Full, ip));
//! let mut trace = Vec::new();
//! for p in [
//!     Packet::Psb,
//!     Packet::Psbend,
//!     Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)),
//!     ip(IpPacketKind::TipPge, 0x1000),
//!     // jnz taken, jnz not taken, ret at 100c compressed (back to 1009)
//!     Packet::Tnt8(Tnt::from_results([true, false, true]).unwrap()),
//!     ip(IpPacketKind::TipPgd, 0),
//! ] {
//!     encode_to_vec(&p, &mut trace).unwrap();
//! }
//!
//! let mut cov = CoverageDecoder::new(Options { collect: true, ..Options::default() });
//! let outcome = cov.decode(&trace, &image);
//! assert_eq!(outcome.errors, 0);
//! assert_eq!(outcome.edges, 3); // jnz taken, jnz not taken, ret
//! let mut edges: Vec<_> = cov.edges().map(|(e, n)| (e.from, e.to, e.kind, n)).collect();
//! edges.sort();
//! assert_eq!(edges, [
//!     (0x1004, 0x100a, EdgeKind::Call, 2),
//!     (0x100a, 0x1000, EdgeKind::Cond, 1),
//!     (0x100a, 0x100c, EdgeKind::Cond, 1),
//!     (0x100c, 0x1009, EdgeKind::Return, 1),
//! ]);
//! assert_eq!(cov.map().iter().map(|&b| u32::from(b)).sum::<u32>(), 3);
//! ```
#![deny(missing_docs)]

pub mod bitmap;
pub mod decoder;
pub mod edge;
pub mod error;
mod graph;
pub mod reference;

pub use bitmap::{classify_counts, count_class, EdgeHash};
pub use decoder::{CoverageDecoder, Options, Outcome, PAGE_SIZE};
pub use edge::{BasicBlock, Edge, EdgeKind};
pub use error::{CoverageError, ErrorKind};
