//! pttestgen: reads libipt's .ptt format and writes .bin, .pt, .lst and .exp files.
#![deny(missing_docs)]

pub mod asm;
