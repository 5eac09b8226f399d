//! Intel PT decoders, layer by layer: [`packet`] (bytes → packets), then the timing
//! model ([`time`]) and the tools built on them. [`listing`] prints instructions as
//! libipt's ptxed does (XED's Intel or AT&T text, cached per address).
#![deny(missing_docs)]

pub mod block_cache;
pub mod config;
pub mod dump;
pub mod error;
pub mod event;
pub mod flow;
pub mod image;
pub mod insn;
pub mod listing;
pub mod packet;
pub mod parallel;
pub mod query;
pub mod sideband;
pub mod time;

pub use config::{Config, Cpu, Errata};
pub use error::{DecodeError, ErrorCode};
pub use packet::PacketDecoder;
pub use pt_encoder::packet::{IpPacketKind, LastIp, Packet};
