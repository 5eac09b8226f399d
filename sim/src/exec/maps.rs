//! Memory mappings (the side-band that tells a decoder where images live).

/// Access rights of a mapping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Perms {
    /// Readable.
    pub read: bool,
    /// Writable.
    pub write: bool,
    /// Executable.
    pub exec: bool,
    /// Shared (`s`) rather than private (`p`).
    pub shared: bool,
}

impl Perms {
    /// Packs into 4 bits: read, write, exec, shared (bit 0..3).
    pub fn bits(self) -> u8 {
        u8::from(self.read)
            | u8::from(self.write) << 1
            | u8::from(self.exec) << 2
            | u8::from(self.shared) << 3
    }

    /// Unpacks [`Perms::bits`]; `None` when bits above 3 are set.
    pub fn from_bits(b: u8) -> Option<Self> {
        (b < 16).then_some(Perms {
            read: b & 1 != 0,
            write: b & 2 != 0,
            exec: b & 4 != 0,
            shared: b & 8 != 0,
        })
    }
}

/// One line of `/proc/pid/maps`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Offset into the file.
    pub offset: u64,
    /// Access rights.
    pub perms: Perms,
    /// File path, or a pseudo name such as `[vdso]`, or empty for anonymous memory.
    pub path: String,
}

/// Error from parsing a maps line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed maps line {line}")]
pub struct MapsParseError {
    /// 1-based line number.
    pub line: usize,
}

/// Parses the text of `/proc/pid/maps`.
pub fn parse_maps(text: &str) -> Result<Vec<Mapping>, MapsParseError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| parse_line(l).ok_or(MapsParseError { line: i + 1 }))
        .collect()
}

fn parse_line(line: &str) -> Option<Mapping> {
    // address perms offset dev inode [path]; the path may contain spaces.
    let mut rest = line;
    let mut field = || {
        let t = rest.trim_start();
        let end = t.find(' ').unwrap_or(t.len());
        let (f, r) = t.split_at(end);
        rest = r;
        f
    };
    let range = field();
    let perms = field();
    let offset = field();
    let _dev = field();
    let _inode = field();
    let path = rest.trim_start().to_string();
    let (s, e) = range.split_once('-')?;
    let p = perms.as_bytes();
    if p.len() != 4 {
        return None;
    }
    Some(Mapping {
        start: u64::from_str_radix(s, 16).ok()?,
        end: u64::from_str_radix(e, 16).ok()?,
        offset: u64::from_str_radix(offset, 16).ok()?,
        perms: Perms {
            read: p[0] == b'r',
            write: p[1] == b'w',
            exec: p[2] == b'x',
            shared: p[3] == b's',
        },
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_typical_lines() {
        let text = "\
555555554000-555555556000 r--p 00000000 fd:01 1234   /usr/bin/true
555555556000-55555555a000 r-xp 00002000 fd:01 1234   /usr/bin/my prog
7ffff7fc1000-7ffff7fc5000 r--p 00000000 00:00 0      [vvar]
7ffff7ff0000-7ffff7ff1000 rw-s 00000000 00:00 0 
";
        let m = parse_maps(text).unwrap();
        assert_eq!(m.len(), 4);
        assert_eq!(m[1].start, 0x555555556000);
        assert_eq!(m[1].offset, 0x2000);
        assert!(m[1].perms.exec && m[1].perms.read && !m[1].perms.write);
        assert_eq!(m[1].path, "/usr/bin/my prog");
        assert_eq!(m[2].path, "[vvar]");
        assert_eq!(m[3].path, "");
        assert!(m[3].perms.shared);
        assert_eq!(Perms::from_bits(m[1].perms.bits()), Some(m[1].perms));
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(parse_maps("hello world\n"), Err(MapsParseError { line: 1 }));
        assert_eq!(
            parse_maps("1000-2000 r-x 0 0 0\n"),
            Err(MapsParseError { line: 1 })
        );
        assert_eq!(Perms::from_bits(16), None);
    }

    #[test]
    fn reads_own_maps() {
        let text = std::fs::read_to_string("/proc/self/maps").unwrap();
        let m = parse_maps(&text).unwrap();
        assert!(m.iter().any(|m| m.perms.exec));
    }
}

/// A loadable segment of an ELF file (its `PT_LOAD` program header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadSegment {
    /// `p_offset`.
    pub offset: u64,
    /// `p_filesz`.
    pub file_size: u64,
    /// Access rights (`p_flags`: R, W, X).
    pub perms: Perms,
}

/// The `PT_LOAD` segments of the ELF file at `path` (`None`: not an ELF
/// file, or unreadable).
pub fn load_segments(path: &std::path::Path) -> Option<Vec<LoadSegment>> {
    use object::read::elf::{FileHeader, ProgramHeader};
    let data = std::fs::read(path).ok()?;
    let elf = object::elf::FileHeader64::<object::Endianness>::parse(&*data).ok()?;
    let endian = elf.endian().ok()?;
    let headers = elf.program_headers(endian, &*data).ok()?;
    let segs = headers
        .iter()
        .filter(|p| p.p_type(endian) == object::elf::PT_LOAD)
        .map(|p| {
            let f = p.p_flags(endian);
            LoadSegment {
                offset: p.p_offset(endian),
                file_size: p.p_filesz(endian),
                perms: Perms {
                    read: f & object::elf::PF_R != 0,
                    write: f & object::elf::PF_W != 0,
                    exec: f & object::elf::PF_X != 0,
                    shared: false,
                },
            }
        })
        .collect();
    Some(segs)
}

/// A file mapping cut along the segments of its file: one mapping per
/// segment it holds (pages of the segment's file range; `offset` its
/// first page's, as `mmap` of the segment gives), with the segment's
/// rights. An emulator that maps a program's segments with the same host
/// rights shows them merged into one mapping at offset 0 (QEMU's user mode
/// does); perf's tools (and llvm-profgen) look for the executable
/// segment's own mapping. Parts of the mapping in no segment are left out;
/// a mapping that holds no executable segment is returned as it is.
pub fn split_by_segments(m: &Mapping, segs: &[LoadSegment]) -> Vec<Mapping> {
    const PAGE: u64 = 4096;
    let map_end_off = m.offset.saturating_add(m.end.saturating_sub(m.start));
    let mut out: Vec<Mapping> = Vec::new();
    for s in segs {
        let lo = (s.offset & !(PAGE - 1)).max(m.offset);
        let hi = (s
            .offset
            .saturating_add(s.file_size)
            .saturating_add(PAGE - 1)
            & !(PAGE - 1))
            .min(map_end_off);
        if lo >= hi {
            continue;
        }
        let mut start = m.start + (lo - m.offset);
        let end = m.start + (hi - m.offset);
        // Segments sharing a page: the page goes to the first.
        if let Some(prev) = out.last() {
            start = start.max(prev.end);
        }
        if start >= end {
            continue;
        }
        out.push(Mapping {
            start,
            end,
            offset: lo + (start - (m.start + (lo - m.offset))),
            perms: Perms {
                shared: m.perms.shared,
                ..s.perms
            },
            path: m.path.clone(),
        });
    }
    if out.iter().any(|o| o.perms.exec) {
        out
    } else {
        vec![m.clone()]
    }
}

#[cfg(test)]
mod segment_tests {
    use super::*;

    #[test]
    fn a_merged_mapping_is_cut_along_the_segments() {
        let rx = |read, exec| Perms {
            read,
            write: false,
            exec,
            shared: false,
        };
        // /usr/bin/cat's segments: R, R E, R, RW.
        let segs = [
            LoadSegment {
                offset: 0,
                file_size: 0x14a0,
                perms: rx(true, false),
            },
            LoadSegment {
                offset: 0x2000,
                file_size: 0x4609,
                perms: rx(true, true),
            },
            LoadSegment {
                offset: 0x7000,
                file_size: 0x1e30,
                perms: rx(true, false),
            },
            LoadSegment {
                offset: 0x9d10,
                file_size: 0x4f0,
                perms: Perms {
                    write: true,
                    ..rx(true, false)
                },
            },
        ];
        let m = Mapping {
            start: 0x40_0000_0000,
            end: 0x40_0000_a000,
            offset: 0,
            perms: rx(true, true),
            path: "/usr/bin/cat".into(),
        };
        let got: Vec<(u64, u64, u64, bool)> = split_by_segments(&m, &segs)
            .iter()
            .map(|m| {
                (
                    m.start - 0x40_0000_0000,
                    m.end - 0x40_0000_0000,
                    m.offset,
                    m.perms.exec,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (0, 0x2000, 0, false),
                (0x2000, 0x7000, 0x2000, true),
                (0x7000, 0x9000, 0x7000, false),
                (0x9000, 0xa000, 0x9000, false),
            ]
        );
        // A mapping of the data only stays as it is.
        let data = Mapping {
            start: 0x40_0000_a000,
            end: 0x40_0000_b000,
            offset: 0xa000,
            ..m.clone()
        };
        assert_eq!(split_by_segments(&data, &segs), vec![data.clone()]);
    }
}
