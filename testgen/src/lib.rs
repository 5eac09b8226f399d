//! pttestgen: reads libipt's .ptt format and writes .bin, .pt, .lst and .exp files.
#![deny(missing_docs)]

pub mod asm;
mod cstr;
pub mod directive;
pub mod exp;
pub mod gen;
pub mod labels;
pub mod ptt;
