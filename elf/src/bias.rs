//! Load bias: how the addresses a program ran at relate to the addresses its
//! file was linked at, through the `PT_LOAD` segment that maps them.

/// The load bias of a mapping that starts at `start` with file offset
/// `file_offset`: run-time address minus link-time address, from the segment
/// of `obj` the mapping maps (`None`: no segment holds that offset).
///
/// The kernel maps a segment from its offset rounded down to a page, so a
/// mapping's offset can lie in the tail of the segment before (lld and rustc
/// binaries do not align segments in the file): the segment starting in the
/// mapping's first page is the one mapped; else the one holding the offset.
pub fn load_bias(obj: &object::File<'_>, start: u64, file_offset: u64) -> Option<u64> {
    use object::{Object, ObjectSegment};
    let bias = |s: &object::Segment<'_, '_>| {
        let off = s.file_range().0;
        // The segment's first byte runs at `start + (off - file_offset)`.
        start
            .wrapping_add(off)
            .wrapping_sub(file_offset)
            .wrapping_sub(s.address())
    };
    let mapped = obj.segments().find(|s| {
        let off = s.file_range().0;
        off >= file_offset && off - file_offset < PAGE
    });
    if let Some(s) = mapped {
        return Some(bias(&s));
    }
    obj.segments()
        .find(|s| {
            let (off, size) = s.file_range();
            off <= file_offset && file_offset < off.wrapping_add(size.max(1))
        })
        .map(|s| bias(&s))
}

/// The page size mappings are aligned to.
const PAGE: u64 = 4096;

/// One `PT_LOAD` segment: link-time address, size in memory, file offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadSegment {
    /// `p_vaddr`.
    pub vaddr: u64,
    /// `max(p_memsz, p_filesz)`.
    pub size: u64,
    /// `p_offset`.
    pub offset: u64,
}

impl LoadSegment {
    /// The loadable segments of the ELF file `data` (none if it has none).
    pub fn of(data: &[u8]) -> Vec<LoadSegment> {
        use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
        let Ok(f) = ElfFile64::<object::Endianness>::parse(data) else {
            return Vec::new();
        };
        let e = f.endian();
        let Ok(phdrs) = f.elf_header().program_headers(e, data) else {
            return Vec::new();
        };
        phdrs
            .iter()
            .filter(|p| p.p_type(e) == object::elf::PT_LOAD)
            .map(|p| LoadSegment {
                vaddr: p.p_vaddr(e),
                size: p.p_memsz(e).max(p.p_filesz(e)),
                offset: p.p_offset(e),
            })
            .filter(|s| s.size != 0)
            .collect()
    }

    /// The segment of `segs` holding link-time address `addr`.
    pub fn holding(segs: &[LoadSegment], addr: u64) -> Option<&LoadSegment> {
        segs.iter()
            .find(|s| addr >= s.vaddr && addr - s.vaddr < s.size)
    }

    /// `addr` (in this segment) as a file offset.
    pub fn file_offset(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.vaddr.wrapping_sub(self.offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_text_bias_is_the_mapping_bias() {
        let exe = std::env::current_exe().unwrap();
        let data = std::fs::read(&exe).unwrap();
        let obj = object::File::parse(&*data).unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let here = own_text_bias_is_the_mapping_bias as fn() as usize as u64;
        let line = maps
            .lines()
            .find(|l| {
                let r = l.split_whitespace().next().unwrap();
                let (a, b) = r.split_once('-').unwrap();
                let (a, b) = (
                    u64::from_str_radix(a, 16).unwrap(),
                    u64::from_str_radix(b, 16).unwrap(),
                );
                a <= here && here < b
            })
            .unwrap();
        let f: Vec<&str> = line.split_whitespace().collect();
        let start = u64::from_str_radix(f[0].split_once('-').unwrap().0, 16).unwrap();
        let off = u64::from_str_radix(f[2], 16).unwrap();
        let bias = load_bias(&obj, start, off).unwrap();
        // The function's link-time address is its symbol's.
        use object::{Object, ObjectSymbol};
        let linked = here - bias;
        assert!(obj
            .symbols()
            .any(|s| s.address() == linked && s.name().is_ok_and(|n| n.contains("own_text_bias"))));
        let segs = LoadSegment::of(&data);
        let seg = LoadSegment::holding(&segs, linked).unwrap();
        assert_eq!(seg.file_offset(linked), here - start + off);
    }
}
