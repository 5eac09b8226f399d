//! Linux perf's Intel PT semantics as a library: what `perf script`, `perf report`
//! and friends make of a `perf record -e intel_pt//` recording, decided the way
//! perf's `intel-pt.c` and `util/intel-pt-decoder/` decide it.
//!
//! pt-decoder is libipt's decoder (ptdump, ptxed); this crate is perf's. Both read
//! the same packets (pt-decoder's packet layer) and the same code (its [`Image`]s);
//! their state machines differ where perf and libipt differ: how they sync, keep
//! time, recover from errors and which instructions end a walk.
//!
//! # Example
//!
//! perf's decoder on a hand-made trace: the code, the packets, and the states perf's
//! decoder hands to its sample synthesis (a branch from each jump taken):
//!
//! ```
//! use pt_decoder::image::Image;
//! use pt_encoder::{encode_to_vec, ExecMode, IpCompression, IpPacketKind, IpPayload,
//!     ModeExec, Packet, Tnt};
//! use pt_perf::code::{CodeWalker, ImageWalker};
//! use pt_perf::decode::{ty, Buffer, Decoder, Error, Params};
//!
//! // 1000: nop   1001: jz 1000   1003: jmp rax
//! let mut image = Image::new();
//! image.add_bytes(0x1000, vec![0x90, 0x74, 0xfd, 0xff, 0xe0], "code").unwrap();
//!
//! // Enabled at 1000; the jz taken, then not; the jmp rax goes to itself, then
//! // tracing stops there (TIP.PGD, its IP suppressed).
//! let ip = |kind, ip| Packet::Ip(kind, IpPayload::new(IpCompression::Full, ip));
//! let mut trace = Vec::new();
//! for p in [
//!     Packet::Psb,
//!     Packet::Psbend,
//!     Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)),
//!     ip(IpPacketKind::TipPge, 0x1000),
//!     Packet::Tnt8(Tnt::from_results([true, false]).unwrap()),
//!     ip(IpPacketKind::Tip, 0x1003),
//!     Packet::Ip(IpPacketKind::TipPgd, IpPayload::new(IpCompression::Suppressed, 0)),
//! ] {
//!     encode_to_vec(&p, &mut trace).unwrap();
//! }
//!
//! let params = Params { branch_enable: true, return_compression: true, ..Params::default() };
//! let buffer = Buffer { data: &trace, consecutive: false, reference: 0, trace_nr: 1 };
//! let mut decoder = Decoder::new(params, vec![buffer]);
//! let mut cache = CodeWalker::new();
//! let mut walker = ImageWalker::new(&mut cache, &image);
//! let mut branches = Vec::new();
//! loop {
//!     let state = decoder.decode(&mut walker);
//!     match state.err {
//!         Some(Error::NoData) => break,
//!         Some(e) => panic!("{}", e.message()),
//!         None if state.type_ & ty::BRANCH != 0 => {
//!             branches.push((state.from_ip, state.to_ip))
//!         }
//!         None => {}
//!     }
//! }
//! assert_eq!(
//!     branches,
//!     [(0, 0x1000), (0x1001, 0x1000), (0x1003, 0x1003), (0x1003, 0)]
//! );
//! ```
//!
//! A recording goes from a perf.data to samples through a [`Session`] and a
//! [`synth::Synth`] (`no_run`: it needs a recording):
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use pt_perf::itrace::SynthOpts;
//! use pt_perf::synth::{Event, Synth};
//! use pt_perf::{Session, SessionOptions};
//!
//! let file = pt_perf_data::MappedFile::open("perf.data")?;
//! let perf = file.parse()?;
//! let session = Session::new(&perf, SessionOptions::for_file("perf.data"))?;
//! let mut synth = Synth::new(&session, SynthOpts::parse("i1i")?);
//! synth.run(&mut |e: Event<'_>| {
//!     if let Event::Sample(s, _) = e {
//!         println!("{:x}", s.ip);
//!     }
//!     std::ops::ControlFlow::Continue(())
//! });
//! # Ok(())
//! # }
//! ```
//!
//! # The layers
//!
//! Each calls only the ones above it in this list (and pt-decoder below them all):
//!
//! * [`session`]: the perf.data as perf's `intel-pt.c` reads it: the AUX queues
//!   and their segments (snapshot overlaps, lost data), the threads, every process's
//!   mappings and the [`Image`]s they make, the decoder's parameters from
//!   AUXTRACE_INFO; and a libipt decoder per queue ([`session::QueueDecoder`], what
//!   `ptxed --perf` prints).
//! * [`decode`]: perf's decoder state machine (`intel-pt-decoder.c`): packets in,
//!   [`decode::State`]s out, the code reached through the [`decode::Walker`] trait,
//!   as perf's decoder reaches it through its `walk_insn` callback. One module per
//!   concern: packets and sync, timing, FUP/TIP handling, the fast path.
//! * [`code`]: the walker perf's `intel-pt.c` gives the decoder: instructions from
//!   an [`Image`], walked once and cached per block.
//! * [`itrace`]: the `--itrace` options; [`sample`]: the samples perf synthesizes;
//!   [`synth`]: states into samples, queue after queue in time order
//!   ([`auxtrace_heap`], ties broken as perf's heap breaks them).
//! * [`recorded`]: the samples a recording without trace holds (`perf record -e
//!   cpu-clock`, `perf inject --itrace`'s output) as [`sample::Sample`]s, for
//!   a session [`session::Session::without_trace`].
//!
//! Bad input never panics: a session's problems are [`session::Warning`]s naming
//! their file offsets, a decoder's are states with an [`decode::Error`], and
//! decoding goes on where perf's would.
//!
//! [`Image`]: pt_decoder::image::Image
#![deny(missing_docs)]

pub mod auxtrace_heap;
pub mod code;
pub mod decode;
pub mod itrace;
pub mod recorded;
pub mod sample;
pub mod session;
pub mod synth;

pub use session::{PerfItem, Session, SessionError, SessionOptions};
