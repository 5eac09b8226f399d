//! Code that is not in a file: a JIT-style code source implementing [`CodeSource`],
//! used by the instruction decoder and the block cache, and in-memory sections in an
//! [`Image`] (vdso-like) overlaying file-backed ones.

use pt_decoder::block_cache::{BlockCache, BlockEnd};
use pt_decoder::image::{CodeError, CodeSource, Image};
use pt_decoder::insn::{decode_at, InsnClass, InsnKind};
use pt_decoder::listing::{Listing, ListingOptions};
use pt_decoder::ErrorCode;
use pt_encoder::packet::ExecMode;

/// A JIT code buffer: one growing run of code at a fixed address, with a version
/// bumped on every write so that caches notice.
struct JitBuffer {
    base: u64,
    code: Vec<u8>,
    version: u64,
}

impl JitBuffer {
    fn emit(&mut self, bytes: &[u8]) -> u64 {
        let at = self.base + self.code.len() as u64;
        self.code.extend_from_slice(bytes);
        self.version += 1;
        at
    }

    fn patch(&mut self, ip: u64, bytes: &[u8]) {
        let at = (ip - self.base) as usize;
        self.code[at..at + bytes.len()].copy_from_slice(bytes);
        self.version += 1;
    }
}

impl CodeSource for JitBuffer {
    fn bytes_at(&self, ip: u64) -> Result<&[u8], CodeError> {
        ip.checked_sub(self.base)
            .and_then(|off| usize::try_from(off).ok())
            .and_then(|off| self.code.get(off..))
            .filter(|rest| !rest.is_empty())
            .ok_or(CodeError::no_map(ip))
    }

    fn stamp(&self) -> u64 {
        self.version
    }
}

#[test]
fn jit_code_through_the_block_cache() {
    let mut jit = JitBuffer {
        base: 0x7000_0000,
        code: Vec::new(),
        version: 0,
    };
    // f: xor eax, eax; inc eax; cmp eax, 10; jnz f+2; ret
    let f = jit.emit(&[0x31, 0xc0, 0xff, 0xc0, 0x83, 0xf8, 0x0a, 0x75, 0xf9, 0xc3]);
    let mut cache = BlockCache::new();
    let head = cache.lookup(&jit, f, ExecMode::Bit64).unwrap();
    assert_eq!(cache.block(head).ninsn, 4);
    assert_eq!(cache.block(head).last.target, Some(f + 2));

    // The loop body starts inside the first block: a block of its own.
    let body = cache.taken(&jit, head).unwrap();
    assert_eq!(cache.block(body).ip, f + 2);
    assert_eq!(cache.block(body).ninsn, 3);
    assert_eq!(cache.taken(&jit, body), Ok(body));
    let ret = cache.fall_through(&jit, body).unwrap();
    assert_eq!(cache.block(ret).last.class, InsnClass::Return);
    // Past the end of the emitted code nothing is mapped.
    assert_eq!(
        cache.lookup(&jit, f + 10, ExecMode::Bit64),
        Err(CodeError::no_map(f + 10))
    );

    // Emitting more code changes the stamp: blocks are rebuilt from the new bytes.
    jit.patch(f + 9, &[0x90]); // ret -> nop
    jit.emit(&[0xcc]); // int3
    let head = cache.lookup(&jit, f + 9, ExecMode::Bit64).unwrap();
    let block = *cache.block(head);
    assert_eq!((block.ninsn, block.last.kind), (2, InsnKind::Int3));
    assert_eq!(cache.stats().flushes, 1);
    assert_eq!(
        decode_at(&jit, f + 10, ExecMode::Bit64).unwrap().class,
        InsnClass::FarCall
    );
}

#[test]
fn vdso_bytes_overlay_a_file_section_and_blocks_follow() {
    let dir = std::env::temp_dir().join(format!("pt-image-provider-{}", std::process::id()));
    std::fs::write(&dir, [0x90u8; 64]).unwrap();
    let mut image = Image::new();
    image.add_file(&dir, 0, None, 0x1000).unwrap();
    // An in-memory section replaces part of the file's bytes: call 0x1020; nop.
    image
        .add_bytes(0x1010, vec![0xe8, 0x0b, 0x00, 0x00, 0x00, 0x90], "[vdso]")
        .unwrap();
    std::fs::remove_file(&dir).unwrap(); // the mapping stays valid

    let mut cache = BlockCache::new();
    let first = cache.lookup(&image, 0x1000, ExecMode::Bit64).unwrap();
    let b = *cache.block(first);
    // 16 nops up to the overlay: the block ends with the file's section.
    assert_eq!((b.ninsn, b.end), (16, BlockEnd::SectionEnd));
    let call = cache.fall_through(&image, first).unwrap();
    let c = *cache.block(call);
    assert_eq!((c.ip, c.ninsn, c.last.kind), (0x1010, 1, InsnKind::CallRel));
    assert!(c.last.pushes_return());
    let target = cache.taken(&image, call).unwrap();
    assert_eq!(cache.block(target).ip, 0x1020);
    assert_eq!(image.find(0x1020).unwrap().file_offset(), 0x16);
    let after = cache.fall_through(&image, call).unwrap();
    assert_eq!(cache.block(after).ip, 0x1015);
    assert_eq!(cache.block(after).end, BlockEnd::SectionEnd);
    // Reading across the overlay boundary works; past the file it does not.
    let mut listing = Listing::new(ListingOptions::default());
    let line = listing.line(&image, 0x1010, ExecMode::Bit64);
    assert_eq!(line.text(), b"0000000000001010  call 0x1020\n");
    assert_eq!(
        cache
            .lookup(&image, 0x1040, ExecMode::Bit64)
            .unwrap_err()
            .code,
        ErrorCode::NoMap
    );
}
