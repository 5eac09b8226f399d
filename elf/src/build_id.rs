//! GNU build ids: the `NT_GNU_BUILD_ID` note of an ELF file, read through
//! `object`'s note iterator, and stand-in ids for code that has none.

use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};
use object::{elf, FileKind};

/// The longest build id perf keeps (`BUILD_ID_SIZE`: a SHA-1).
pub const MAX_LEN: usize = 20;

/// The GNU build id of the ELF file `data` (32- or 64-bit, either byte order):
/// from its note sections, else from its `PT_NOTE` segments (a memory image
/// such as a vDSO captured page by page may have lost its section headers).
/// `None` for no ELF file or one without the note.
pub fn build_id(data: &[u8]) -> Option<&[u8]> {
    match FileKind::parse(data).ok()? {
        FileKind::Elf32 => of::<elf::FileHeader32<object::Endianness>>(data),
        FileKind::Elf64 => of::<elf::FileHeader64<object::Endianness>>(data),
        _ => None,
    }
}

fn of<H: FileHeader<Endian = object::Endianness>>(data: &[u8]) -> Option<&[u8]> {
    let hdr = H::parse(data).ok()?;
    let e = hdr.endian().ok()?;
    if let Ok(sections) = hdr.sections(e, data) {
        for s in sections.iter() {
            if let Some(id) = s.notes(e, data).ok().flatten().and_then(|n| in_notes(n, e)) {
                return Some(id);
            }
        }
    }
    for p in hdr.program_headers(e, data).ok()? {
        if let Some(id) = p.notes(e, data).ok().flatten().and_then(|n| in_notes(n, e)) {
            return Some(id);
        }
    }
    None
}

/// The build id among `notes`, if one is.
fn in_notes<'d, H: FileHeader>(
    mut notes: object::read::elf::NoteIterator<'d, H>,
    e: H::Endian,
) -> Option<&'d [u8]> {
    while let Ok(Some(n)) = notes.next() {
        if n.name() == elf::ELF_NOTE_GNU && n.n_type(e) == elf::NT_GNU_BUILD_ID {
            return Some(n.desc());
        }
    }
    None
}

/// The build id among raw notes in this machine's byte order, as the kernel
/// shows its own in `/sys/kernel/notes` (4-byte aligned).
pub fn of_notes(data: &[u8]) -> Option<&[u8]> {
    let e = object::Endianness::default();
    let notes =
        object::read::elf::NoteIterator::<elf::FileHeader64<object::Endianness>>::new(e, 4, data)
            .ok()?;
    in_notes(notes, e)
}

/// A stand-in build id for code without one (a JIT dump, a vDSO image without
/// the note): the SHA-1 of its bytes, as `ld --build-id=sha1` would give a file
/// of them. Stable across Rust releases and machines, so a cache entry written
/// today is found tomorrow.
pub fn stand_in(data: &[u8]) -> [u8; MAX_LEN] {
    use sha1::Digest;
    sha1::Sha1::digest(data).into()
}

/// A build id in lower-case hex, as perf names it in paths and listings.
pub fn hex(id: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(id.len() * 2);
    for b in id {
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal 64-bit little-endian ELF image with one PT_NOTE segment and no
    /// section headers.
    pub(crate) fn image_with_note(id: &[u8]) -> Vec<u8> {
        let mut d = vec![0u8; 0x40 + 0x38];
        d[..6].copy_from_slice(b"\x7fELF\x02\x01");
        d[6] = 1;
        d[0x10..0x12].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
        d[0x12..0x14].copy_from_slice(&62u16.to_le_bytes()); // x86-64
        d[0x14..0x18].copy_from_slice(&1u32.to_le_bytes());
        d[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes()); // e_phoff
        d[0x34..0x36].copy_from_slice(&0x40u16.to_le_bytes());
        d[0x36..0x38].copy_from_slice(&0x38u16.to_le_bytes());
        d[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        let note_at = d.len() as u64;
        let mut note = Vec::new();
        note.extend_from_slice(&4u32.to_le_bytes());
        note.extend_from_slice(&(id.len() as u32).to_le_bytes());
        note.extend_from_slice(&3u32.to_le_bytes());
        note.extend_from_slice(b"GNU\0");
        note.extend_from_slice(id);
        while note.len() % 4 != 0 {
            note.push(0);
        }
        let ph = 0x40;
        d[ph..ph + 4].copy_from_slice(&elf::PT_NOTE.to_le_bytes());
        d[ph + 8..ph + 16].copy_from_slice(&note_at.to_le_bytes());
        d[ph + 0x20..ph + 0x28].copy_from_slice(&(note.len() as u64).to_le_bytes());
        d[ph + 0x28..ph + 0x30].copy_from_slice(&(note.len() as u64).to_le_bytes());
        d[ph + 0x30..ph + 0x38].copy_from_slice(&4u64.to_le_bytes());
        d.extend_from_slice(&note);
        d
    }

    #[test]
    fn from_segments_without_sections() {
        let id: Vec<u8> = (1..=20).collect();
        assert_eq!(build_id(&image_with_note(&id)), Some(&id[..]));
    }

    #[test]
    fn own_executable_matches_object() {
        use object::Object;
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let want = object::File::parse(&*exe).unwrap().build_id().unwrap();
        assert_eq!(build_id(&exe), want);
    }

    #[test]
    fn garbage_has_none() {
        assert_eq!(build_id(b""), None);
        assert_eq!(build_id(b"\x7fELF\x02\x01\x01"), None);
        let mut broken = image_with_note(&[7; 20]);
        broken.truncate(broken.len() - 10);
        assert_eq!(build_id(&broken), None);
    }

    #[test]
    fn stand_in_is_sha1() {
        // SHA-1 of "abc" (FIPS 180-1's example).
        assert_eq!(
            hex(&stand_in(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
    }
}
