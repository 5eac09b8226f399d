//! Loading code from files: ptxed's `--raw` ranges and ELF `PT_LOAD` segments (built
//! by hand here, byte by byte from the System V ABI layout), plus a system binary.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use pt_decoder::block_cache::{BlockCache, BlockEnd};
use pt_decoder::image::{CodeError, Image, LoadError};
use pt_decoder::insn::InsnClass;
use pt_decoder::ErrorCode;
use pt_encoder::packet::ExecMode;

/// A file in a per-test scratch directory, removed at the end of the test.
struct Scratch(PathBuf);

impl Scratch {
    fn new(bytes: &[u8]) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("pt-image-test-{}-{n}.bin", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        Self(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;

/// A program header: (p_type, p_offset, p_vaddr, p_filesz, p_memsz).
type Phdr = (u32, u64, u64, u64, u64);

/// An ELF64 little-endian x86-64 executable with the given program headers and the
/// given bytes at file offset 0x1000.
fn elf64(phdrs: &[Phdr], body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
    f.extend_from_slice(&[0; 8]);
    f.extend_from_slice(&2u16.to_le_bytes()); // e_type: EXEC
    f.extend_from_slice(&62u16.to_le_bytes()); // e_machine: x86-64
    f.extend_from_slice(&1u32.to_le_bytes()); // e_version
    f.extend_from_slice(&0u64.to_le_bytes()); // e_entry
    f.extend_from_slice(&64u64.to_le_bytes()); // e_phoff
    f.extend_from_slice(&0u64.to_le_bytes()); // e_shoff
    f.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    f.extend_from_slice(&64u16.to_le_bytes()); // e_ehsize
    f.extend_from_slice(&56u16.to_le_bytes()); // e_phentsize
    f.extend_from_slice(&(phdrs.len() as u16).to_le_bytes());
    f.extend_from_slice(&64u16.to_le_bytes()); // e_shentsize
    f.extend_from_slice(&[0; 4]); // e_shnum, e_shstrndx
    assert_eq!(f.len(), 64);
    for &(ty, offset, vaddr, filesz, memsz) in phdrs {
        f.extend_from_slice(&ty.to_le_bytes());
        f.extend_from_slice(&5u32.to_le_bytes()); // p_flags: R+X
        for v in [offset, vaddr, vaddr, filesz, memsz, 0x1000] {
            f.extend_from_slice(&v.to_le_bytes());
        }
    }
    f.resize(0x1000, 0);
    f.extend_from_slice(body);
    f
}

/// The same as [`elf64`] for ELF32 i386.
fn elf32(phdrs: &[Phdr], body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&[0x7f, b'E', b'L', b'F', 1, 1, 1, 0]);
    f.extend_from_slice(&[0; 8]);
    f.extend_from_slice(&2u16.to_le_bytes()); // e_type
    f.extend_from_slice(&3u16.to_le_bytes()); // e_machine: i386
    f.extend_from_slice(&1u32.to_le_bytes()); // e_version
    f.extend_from_slice(&0u32.to_le_bytes()); // e_entry
    f.extend_from_slice(&52u32.to_le_bytes()); // e_phoff
    f.extend_from_slice(&0u32.to_le_bytes()); // e_shoff
    f.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    f.extend_from_slice(&52u16.to_le_bytes()); // e_ehsize
    f.extend_from_slice(&32u16.to_le_bytes()); // e_phentsize
    f.extend_from_slice(&(phdrs.len() as u16).to_le_bytes());
    f.extend_from_slice(&40u16.to_le_bytes()); // e_shentsize
    f.extend_from_slice(&[0; 4]);
    assert_eq!(f.len(), 52);
    for &(ty, offset, vaddr, filesz, memsz) in phdrs {
        f.extend_from_slice(&ty.to_le_bytes());
        for v in [offset, vaddr, vaddr, filesz, memsz] {
            f.extend_from_slice(&(v as u32).to_le_bytes());
        }
        f.extend_from_slice(&5u32.to_le_bytes()); // p_flags
        f.extend_from_slice(&0x1000u32.to_le_bytes()); // p_align
    }
    f.resize(0x1000, 0);
    f.extend_from_slice(body);
    f
}

/// 0x1000: text (nop; nop; jmp $), 0x1010: data.
fn body() -> Vec<u8> {
    let mut b = vec![0x90, 0x90, 0xeb, 0xfe];
    b.resize(0x10, 0xcc);
    b.extend_from_slice(b"data-data-data!!");
    b
}

fn segments() -> Vec<Phdr> {
    vec![
        (PT_NOTE, 0x1000, 0x9000, 4, 4),
        (PT_LOAD, 0x1000, 0x40_1000, 0x10, 0x10),
        (PT_LOAD, 0x1010, 0x40_3000, 0x10, 0x1000), // .bss-like tail is not mapped
        (PT_LOAD, 0, 0x40_5000, 0, 0x1000),         // nothing in the file: skipped
    ]
}

fn layout(image: &Image) -> Vec<(u64, u64)> {
    image
        .sections()
        .iter()
        .map(|s| (s.vaddr(), s.len()))
        .collect()
}

#[test]
fn elf64_load_segments_at_their_vaddr() {
    let file = Scratch::new(&elf64(&segments(), &body()));
    let mut image = Image::new();
    let load = image.add_elf(file.path(), 0).unwrap();
    assert!(load.skipped.is_empty());
    let offsets: Vec<_> = load.segments.iter().map(|s| (s.offset, s.size)).collect();
    assert_eq!(offsets, [(0x1000, 0x10), (0x1010, 0x10)]);
    assert_eq!(layout(&image), [(0x40_1000, 0x10), (0x40_3000, 0x10)]);
    assert_eq!(
        &image.bytes_at(0x40_1000).unwrap()[..4],
        &[0x90, 0x90, 0xeb, 0xfe]
    );
    assert_eq!(image.bytes_at(0x40_3000).unwrap(), b"data-data-data!!");
    assert_eq!(image.bytes_at(0x40_3010), Err(CodeError::no_map(0x40_3010)));
    assert_eq!(image.bytes_at(0x9000), Err(CodeError::no_map(0x9000)));
    assert_eq!(image.find(0x40_3004).unwrap().file_offset(), 0x1010);
    assert_eq!(image.find(0x40_3004).unwrap().name(), file.path());
}

#[test]
fn elf_base_relocates_the_lowest_segment_to_it() {
    let file = Scratch::new(&elf64(&segments(), &body()));
    let mut image = Image::new();
    let arg = format!("{}:0x7f0000000000", file.path());
    let load = image.add_elf_arg(&arg).unwrap();
    assert_eq!(load.segments[1].vaddr, 0x40_3000);
    assert_eq!(load.segments[1].load_vaddr, 0x7f00_0000_2000);
    assert_eq!(
        layout(&image),
        [(0x7f00_0000_0000, 0x10), (0x7f00_0000_2000, 0x10)]
    );
    // Without a base (or with base 0) the segments stay where they are.
    let mut image = Image::new();
    image.add_elf_arg(file.path()).unwrap();
    assert_eq!(layout(&image)[0], (0x40_1000, 0x10));
}

#[test]
fn elf32_loads_too() {
    let file = Scratch::new(&elf32(&segments(), &body()));
    let mut image = Image::new();
    let load = image.add_elf(file.path(), 0x1000_0000).unwrap();
    assert_eq!(load.segments.len(), 2);
    assert_eq!(layout(&image), [(0x1000_0000, 0x10), (0x1000_2000, 0x10)]);
    let mut cache = BlockCache::new();
    let id = cache.lookup(&image, 0x1000_0000, ExecMode::Bit32).unwrap();
    let block = *cache.block(id);
    assert_eq!((block.ninsn, block.last.class), (3, InsnClass::Jump));
    assert_eq!(block.last.target, Some(0x1000_0002));
}

#[test]
fn later_segments_overlay_earlier_ones() {
    let phdrs = [
        (PT_LOAD, 0x1000, 0x40_1000, 0x20, 0x20),
        (PT_LOAD, 0x1010, 0x40_1008, 0x4, 0x4),
    ];
    let file = Scratch::new(&elf64(&phdrs, &body()));
    let mut image = Image::new();
    image.add_elf(file.path(), 0).unwrap();
    assert_eq!(
        layout(&image),
        [(0x40_1000, 8), (0x40_1008, 4), (0x40_100c, 0x14)]
    );
    assert_eq!(&image.bytes_at(0x40_1008).unwrap(), b"data");
}

#[test]
fn segments_beyond_the_file_are_skipped() {
    let phdrs = [
        (PT_LOAD, 0x1000, 0x40_1000, 0x10, 0x10),
        (PT_LOAD, 0x9000, 0x40_9000, 0x10, 0x10),
    ];
    let file = Scratch::new(&elf64(&phdrs, &body()));
    let mut image = Image::new();
    let load = image.add_elf(file.path(), 0).unwrap();
    assert_eq!(load.segments.len(), 1);
    assert_eq!(load.skipped.len(), 1);
    assert_eq!(load.skipped[0].0, 1);
    assert!(matches!(load.skipped[0].1, LoadError::BadOffset { .. }));
}

#[test]
fn bad_elf_files() {
    let not_elf = Scratch::new(b"#!/bin/sh\necho hello\n");
    let mut image = Image::new();
    let err = image.add_elf(not_elf.path(), 0).unwrap_err();
    assert!(matches!(err, LoadError::NotElf { .. }), "{err}");
    assert_eq!(err.code(), ErrorCode::BadConfig);

    let mut cut = elf64(&segments(), &body());
    cut.truncate(80); // the program headers are missing
    let cut = Scratch::new(&cut);
    let err = image.add_elf(cut.path(), 0).unwrap_err();
    assert!(matches!(err, LoadError::BadElf { .. }), "{err}");

    let mut class = elf64(&segments(), &body());
    class[4] = 7;
    let class = Scratch::new(&class);
    assert!(matches!(
        image.add_elf(class.path(), 0),
        Err(LoadError::BadElf { .. })
    ));

    let err = image.add_elf("/nonexistent/pt-image-test", 0).unwrap_err();
    assert!(matches!(err, LoadError::Io { .. }));
    assert!(image.is_empty());
}

#[test]
fn raw_file_ranges() {
    let bytes: Vec<u8> = (0..=255).collect();
    let file = Scratch::new(&bytes);
    let mut image = Image::new();

    image
        .add_raw_arg(&format!("{}:0x10-0x20:0x4000", file.path()))
        .unwrap();
    assert_eq!(image.bytes_at(0x4000).unwrap(), &bytes[0x10..0x20]);
    assert_eq!(image.bytes_at(0x4010), Err(CodeError::no_map(0x4010)));

    image
        .add_raw_arg(&format!("{}:0x80:0x5000", file.path()))
        .unwrap();
    assert_eq!(image.bytes_at(0x5000).unwrap(), &bytes[0x80..]);

    image
        .add_raw_arg(&format!("{}:010:0x6000", file.path()))
        .unwrap();
    assert_eq!(image.bytes_at(0x6000).unwrap()[0], 8);

    image.add_raw_arg(&format!("{}:4096", file.path())).unwrap();
    assert_eq!(image.bytes_at(0x1000).unwrap(), &bytes[..]);

    // A range running past the end of the file is cut at the end of the file.
    image
        .add_raw_arg(&format!("{}:0xf0-0x200:0x7000", file.path()))
        .unwrap();
    assert_eq!(image.bytes_at(0x7000).unwrap().len(), 0x10);

    // Offsets at or past the end of the file are rejected.
    let err = image
        .add_raw_arg(&format!("{}:0x100:0x8000", file.path()))
        .unwrap_err();
    assert!(
        matches!(err, LoadError::BadOffset { offset: 0x100, .. }),
        "{err}"
    );
    // An empty range and a missing base are argument errors.
    for arg in [
        format!("{}:0x20-0x10:0x8000", file.path()),
        file.path().to_string(),
    ] {
        assert!(matches!(
            image.add_raw_arg(&arg),
            Err(LoadError::BadArgument { .. })
        ));
    }
    assert!(matches!(
        image.add_raw_arg("/nonexistent/pt-image-test:0x1000"),
        Err(LoadError::Io { .. })
    ));
    assert_eq!(image.sections().len(), 5);
}

#[test]
fn empty_file_cannot_be_mapped() {
    let file = Scratch::new(&[]);
    let mut image = Image::new();
    assert!(matches!(
        image.add_raw_arg(&format!("{}:0x1000", file.path())),
        Err(LoadError::BadOffset { .. })
    ));
}

/// A real binary, this test's own executable (a 64-bit ELF built here): its entry
/// point decodes into blocks.
#[test]
fn real_binary() {
    use object::read::elf::FileHeader;

    let path = std::env::current_exe().expect("the test's own executable");
    let data = std::fs::read(&path).unwrap();
    let header =
        object::elf::FileHeader64::<object::Endianness>::parse(&*data).expect("a 64-bit ELF");
    let endian = header.endian().unwrap();
    let entry = header.e_entry(endian);

    let mut image = Image::new();
    let load = image.add_elf(&path, 0).unwrap();
    assert!(!load.segments.is_empty());
    assert!(image.find(entry).is_some(), "entry {entry:#x} not mapped");
    let mut cache = BlockCache::new();
    let mut id = cache.lookup(&image, entry, ExecMode::Bit64).unwrap();
    // Follow fall-throughs for a few blocks: all decode, none is empty.
    for _ in 0..8 {
        let block = *cache.block(id);
        assert!(block.ninsn >= 1);
        if block.end != BlockEnd::Branch && block.end != BlockEnd::Limit {
            break;
        }
        match cache.fall_through(&image, id) {
            Ok(next) => id = next,
            Err(_) => break,
        }
    }
}
