//! Intel Processor Trace decoders, from trace bytes to the executed instructions.
//!
//! # Packets of a trace
//!
//! A [`PacketDecoder`] reads the packets of a trace (a byte slice, e.g. a mapped file)
//! from its first PSB on, without copying:
//!
//! ```
//! use pt_decoder::{Config, Packet, PacketDecoder};
//! use pt_encoder::{encode_to_vec, Tnt};
//!
//! let mut trace = Vec::new();
//! for p in [Packet::Psb, Packet::Psbend, Packet::Tnt8(Tnt::from_results([true, false]).unwrap())] {
//!     encode_to_vec(&p, &mut trace).unwrap();
//! }
//! let mut packets = PacketDecoder::new(&trace, &Config::default());
//! packets.sync_forward().unwrap();
//! let names: Vec<_> = packets.map(|r| r.unwrap().1.name()).collect();
//! assert_eq!(names, ["psb", "psbend", "tnt.8"]);
//! ```
//!
//! # Instructions of a trace
//!
//! A [`Decoder`] reconstructs the flow from the trace and the code it ran
//! (an [`Image`]: raw bytes, ELF files, memory): blocks or instructions, with the
//! events, errors and statuses met on the way ([`Item`]).
//!
//! ```
//! use pt_decoder::{Config, Decoder, EventKind, Granularity, Image, Item};
//! use pt_encoder::{encode_to_vec, ExecMode, IpCompression, IpPacketKind, IpPayload,
//!     ModeExec, Packet, Tnt};
//!
//! // 1000: add rax, 1   1004: call 100a   1009: ret   100a: jnz 1000   100c: ret
//! let code = [0x48, 0x83, 0xc0, 0x01, 0xe8, 0x01, 0x00, 0x00, 0x00, 0xc3, 0x75, 0xf4, 0xc3];
//! let mut image = Image::new();
//! image.add_bytes(0x1000, code.to_vec(), "code").unwrap();
//!
//! // Enabled at 1000; the jnz taken, then not; the ret at 100c compressed (a taken
//! // bit, back to 1009); tracing disabled at the ret there (TIP.PGD).
//! let ip = |kind, ip| Packet::Ip(kind, IpPayload::new(IpCompression::Full, ip));
//! let mut trace = Vec::new();
//! for p in [
//!     Packet::Psb,
//!     Packet::Psbend,
//!     Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)),
//!     ip(IpPacketKind::TipPge, 0x1000),
//!     Packet::Tnt8(Tnt::from_results([true, false, true]).unwrap()),
//!     ip(IpPacketKind::TipPgd, 0),
//! ] {
//!     encode_to_vec(&p, &mut trace).unwrap();
//! }
//!
//! let decoder = Decoder::builder(&trace, &image)
//!     .config(&Config::default())
//!     .granularity(Granularity::Instructions)
//!     .build();
//! let mut flow = Vec::new();
//! for item in decoder {
//!     match item {
//!         Item::Insn(i) => flow.push(format!("{:x}", i.insn.ip)),
//!         Item::Event(e) if !e.event.status_update => match e.event.kind {
//!             EventKind::Enabled { .. } => flow.push("enabled".into()),
//!             EventKind::Disabled { .. } => flow.push("disabled".into()),
//!             _ => {}
//!         },
//!         Item::Error(e) => panic!("{e}"),
//!         _ => {}
//!     }
//! }
//! assert_eq!(
//!     flow,
//!     ["enabled", "1000", "1004", "100a", "1000", "1004", "100a", "100c", "1009", "disabled"]
//! );
//! ```
//!
//! Code from an ELF file goes into the image at its load address (`no_run`: it needs
//! the file and its trace):
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use pt_decoder::{Config, Decoder, Image, Item};
//!
//! let mut image = Image::new();
//! image.add_elf("program", 0)?; // its PT_LOAD segments, at their addresses
//! let trace = std::fs::read("program.pt")?;
//! let mut dec = Decoder::builder(&trace, &image).count_only(true).threads(0).build();
//! for item in &mut dec {
//!     if let Item::Error(e) = item {
//!         eprintln!("{e}");
//!     }
//! }
//! println!("{} instructions", dec.counts().insns);
//! # Ok(())
//! # }
//! ```
//!
//! # The layers
//!
//! Each layer calls only the one below it:
//!
//! * [`packet`]: bytes → [`Packet`]s (table-driven, PSB sync, errata), and
//!   [`parallel`] packet decoding split at PSBs;
//! * [`event`]: packets → [`Event`]s with their time ([`time`]: TSC, MTC, CYC, CBR),
//!   libipt's event decoder; [`query`]: libipt's query decoder on top of it;
//! * [`image`], [`insn`], [`block_cache`]: the code, its instructions and the blocks
//!   of straight-line code decoded once;
//! * [`flow`]: events + code → blocks ([`flow::BlockDecoder`]) or instructions
//!   ([`flow::InsnDecoder`]), libipt's flow decoders, with the counting fast path;
//! * [`driver`]: the decode loop over them ([`Decoder`]), one thread or several;
//! * [`listing`]: instructions as libipt's ptxed prints them (XED's Intel or AT&T
//!   text), formatted once per address;
//! * [`pevent`]: libipt's perf_event side-band files, and [`sideband`]: the image
//!   switching between processes they drive (libipt's `pt_sb`);
//! * [`dump`]: packets printed as libipt's ptdump prints them (text or JSON lines);
//!   [`file`](mod@file): trace files and byte ranges as libipt's tools take them. The tools'
//!   command lines live in their binaries (`src/bin/ptdump`, `src/bin/ptxed`).
//!
//! Errors are typed ([`ErrorCode`], [`DecodeError`] with the trace offset,
//! [`FlowError`] with the offset and IP) and implement [`std::error::Error`].
#![deny(missing_docs)]

pub mod block_cache;
pub mod config;
pub mod driver;
pub mod dump;
pub mod error;
pub mod event;
pub mod file;
pub mod flow;
pub mod image;
pub mod insn;
pub mod listing;
pub mod packet;
pub mod parallel;
pub mod pevent;
pub mod query;
pub mod sideband;
pub mod time;

pub use config::{Config, Cpu, Errata};
pub use driver::{
    BlockIps, BlockItem, Counts, Decoder, DecoderBuilder, EventItem, FlowError, FlowErrorKind,
    Granularity, InsnItem, Item, Resync, SkipItem,
};
pub use error::{DecodeError, ErrorCode, Status};
pub use event::{Event, EventKind, Timestamp};
pub use flow::{Block, FlowOptions, InsnInfo};
pub use image::Image;
pub use packet::PacketDecoder;
pub use pt_encoder::packet::{IpPacketKind, LastIp, Packet};
