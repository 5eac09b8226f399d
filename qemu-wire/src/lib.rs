//! The stream the QEMU plugin (`pt-qemu-plugin`) writes to `ptperf record
//! --source qemu`: one connection per guest process (a fork opens its own,
//! an exec'd program's QEMU opens a new one), a sequence of records.
//!
//! This crate is the one owner of the format: the plugin (a cdylib that
//! ptperf's build script compiles with rustc alone) and the reader
//! (`pt_sim::exec::qemu::QemuSource`) both depend on it. It has no
//! dependencies.
//!
//! A record is a tag byte, a payload length (u32 LE) and the payload;
//! numbers are little-endian.
//!
//! | tag | record | payload |
//! |-----|--------|---------|
//! | 1 | hello | u32 format version, i32 QEMU's minimum and current plugin API versions, u32 pid, u32 parent pid (0: none), u8 flags ([`HELLO_EXEC`]), path |
//! | 2 | block  | u32 id, u64 guest address, the block's code bytes (a translation block: its instructions, in order) |
//! | 3 | page   | u64 guest address (page aligned), the page's 4096 bytes |
//! | 4 | map    | u64 start, u64 end, u64 file offset, u8 perms (bit 0 read, 1 write, 2 execute, 3 shared: `pt_sim::exec::Perms::bits`), path |
//! | 5 | run    | u32 tid, then u32 words: what the thread executed, in order (below) |
//! | 6 | native exec | u32 tid, path: an exec QEMU runs natively (not recorded) |
//! | 7 | end    | u8 1 if an exit call ended the process (then i32 status), else 0 |
//! | 8 | warn   | text: something the plugin could not follow |
//! | 9 | ring   | u32 tid, path: the file where the thread's words wait before a run record takes them (u32 count, the words): read after a process died without its end record |
//!
//! A run's words: a block id (below [`MARK`]) for each block executed, or
//! [`MARK`] `|` a kind, followed by its arguments (u64 as two words, low first):
//! [`MARK_SYSCALL`] (nr and six arguments), [`MARK_SYSRET`] (nr, result),
//! [`MARK_EXIT`] (status: the thread ended in `exit`). For `clone3` the
//! sixth argument is the flags word of its structure (clone3 has two), for
//! `rt_sigaction` with a new action the handler of that action (it has four).
//!
//! ```
//! use pt_qemu_wire::{header, Payload, HEADER, TAG_RUN};
//!
//! // A run record: thread 7 executed blocks 0 and 1.
//! let mut rec = Vec::new();
//! header(&mut rec, TAG_RUN, 12);
//! for w in [7u32, 0, 1] {
//!     rec.extend_from_slice(&w.to_le_bytes());
//! }
//! assert_eq!(rec[0], TAG_RUN);
//! let mut p = Payload(&rec[HEADER..]);
//! assert_eq!(p.u32(), Some(7));
//! assert_eq!(p.rest().len(), 8);
//! assert_eq!(p.u32(), None);
//! ```

#![deny(missing_docs)]

/// Version of this format (the plugin's hello says which it writes).
pub const FORMAT_VERSION: u32 = 1;

/// The QEMU plugin API version the plugin speaks (QEMU 7.2's, Debian 12).
pub const PLUGIN_API_VERSION: i32 = 1;

/// The process's first record.
pub const TAG_HELLO: u8 = 1;
/// A translation block.
pub const TAG_BLOCK: u8 = 2;
/// A code page.
pub const TAG_PAGE: u8 = 3;
/// A mapping that holds code.
pub const TAG_MAP: u8 = 4;
/// A thread's executed blocks and system calls.
pub const TAG_RUN: u8 = 5;
/// An exec the plugin cannot follow.
pub const TAG_NATIVE_EXEC: u8 = 6;
/// The process ends.
pub const TAG_END: u8 = 7;
/// A warning.
pub const TAG_WARN: u8 = 8;
/// A thread's ring file.
pub const TAG_RING: u8 = 9;

/// Hello flag: this QEMU was started by an exec of the process it names.
pub const HELLO_EXEC: u8 = 1;

/// Run words at or above this are markers.
pub const MARK: u32 = 0x8000_0000;
/// A system call entered: nr, 6 arguments (u64 each).
pub const MARK_SYSCALL: u32 = MARK | 1;
/// A system call returned: nr, result (u64 each).
pub const MARK_SYSRET: u32 = MARK | 2;
/// The thread ended in `exit`: status (one word).
pub const MARK_EXIT: u32 = MARK | 3;

/// Words a marker's arguments take.
pub const fn mark_words(mark: u32) -> usize {
    match mark {
        MARK_SYSCALL => 14,
        MARK_SYSRET => 4,
        MARK_EXIT => 1,
        _ => 0,
    }
}

/// Bytes of a record header (tag, length).
pub const HEADER: usize = 5;

/// Appends a record header for a payload of `len` bytes.
pub fn header(out: &mut Vec<u8>, tag: u8, len: usize) {
    out.push(tag);
    out.extend_from_slice(&(len as u32).to_le_bytes());
}

/// A little-endian reader over a payload; reads past the end give `None`.
#[derive(Clone, Copy, Debug)]
pub struct Payload<'a>(pub &'a [u8]);

impl<'a> Payload<'a> {
    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    /// A u8.
    pub fn u8(&mut self) -> Option<u8> {
        self.bytes(1).map(|b| b[0])
    }
    /// A u32.
    pub fn u32(&mut self) -> Option<u32> {
        self.bytes(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// A u64.
    pub fn u64(&mut self) -> Option<u64> {
        let lo = self.u32()?;
        let hi = self.u32()?;
        Some(u64::from(lo) | u64::from(hi) << 32)
    }
    /// What is left.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.0)
    }
}
