//! The code image: sections of code bytes at linear addresses.
//!
//! An [`Image`] is what the instruction-flow decoder reads instructions from. Sections
//! come from raw files (ptxed's `--raw`), from the `PT_LOAD` segments of ELF files
//! (`--elf`) or from bytes in memory (JIT code, the vdso). Files are memory-mapped and
//! never copied; [`Image::bytes_at`] hands out the bytes from an address to the end of
//! its section without copying.
//!
//! Overlapping sections follow libipt's `pt_image_add`: a section added later hides the
//! overlapped part of earlier ones, which keep the parts that remain visible.
//!
//! Every change gives the image a new [`Image::stamp`], so caches built from its bytes
//! (the [`crate::block_cache::BlockCache`]) can tell that they are stale.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use memmap2::Mmap;

use crate::error::ErrorCode;

/// An error at a code address: nothing mapped there ([`ErrorCode::NoMap`]), an
/// instruction that cannot be decoded ([`ErrorCode::BadInsn`]), and the like.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{ip:#x}: {code}")]
pub struct CodeError {
    /// What went wrong.
    pub code: ErrorCode,
    /// The linear address (IP) where it went wrong.
    pub ip: u64,
}

impl CodeError {
    /// An error `code` at `ip`.
    pub const fn new(code: ErrorCode, ip: u64) -> Self {
        Self { code, ip }
    }

    /// Nothing is mapped at `ip`.
    pub const fn no_map(ip: u64) -> Self {
        Self::new(ErrorCode::NoMap, ip)
    }
}

/// Why a section could not be loaded from a file or a command-line argument.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be opened, inspected or mapped.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The requested file offset is at or beyond the end of the file.
    #[error("bad offset {offset:#x} into {} (file size {file_size:#x})", path.display())]
    BadOffset {
        /// The file.
        path: PathBuf,
        /// The requested offset.
        offset: u64,
        /// The file's size.
        file_size: u64,
    },
    /// A `--raw`/`--elf` argument that does not parse.
    #[error("{message}: '{arg}'")]
    BadArgument {
        /// The argument as given.
        arg: String,
        /// What is wrong with it.
        message: &'static str,
    },
    /// The file is a directory.
    #[error("{} is a directory", path.display())]
    Directory {
        /// The file.
        path: PathBuf,
    },
    /// The file does not start with the ELF magic.
    #[error("{}: not an ELF file", path.display())]
    NotElf {
        /// The file.
        path: PathBuf,
    },
    /// The ELF headers are malformed.
    #[error("{}: bad ELF file: {reason}", path.display())]
    BadElf {
        /// The file.
        path: PathBuf,
        /// What the ELF parser found wrong.
        reason: String,
    },
    /// The section would run past the end of the 64-bit address space.
    #[error("section at {vaddr:#x} of size {size:#x} wraps around the address space")]
    Wraps {
        /// Its first address.
        vaddr: u64,
        /// Its size.
        size: u64,
    },
}

impl LoadError {
    /// The libipt error code closest to this error (for libipt-style messages).
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Io { .. } | Self::Directory { .. } => ErrorCode::BadFile,
            Self::BadOffset { .. } | Self::BadArgument { .. } | Self::Wraps { .. } => {
                ErrorCode::Invalid
            }
            Self::NotElf { .. } | Self::BadElf { .. } => ErrorCode::BadConfig,
        }
    }
}

/// Where a section's bytes live.
enum Backing {
    Mapped(Mmap),
    Owned(Box<[u8]>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Self::Mapped(map) => map,
            Self::Owned(bytes) => bytes,
        }
    }
}

impl core::fmt::Debug for Backing {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Mapped(map) => write!(f, "Mapped({} bytes)", map.len()),
            Self::Owned(bytes) => write!(f, "Owned({} bytes)", bytes.len()),
        }
    }
}

/// A run of code bytes mapped at a linear address.
///
/// Cloning is cheap: the bytes are shared.
#[derive(Clone, Debug)]
pub struct Section {
    backing: Arc<Backing>,
    /// First byte of this section in `backing`.
    start: usize,
    len: usize,
    vaddr: u64,
    name: Arc<str>,
    /// The id given when the section was added; pieces left by an overlay keep it.
    id: u32,
    /// Offset of `start` in the file the bytes came from (0 for in-memory bytes).
    file_offset: u64,
}

impl Section {
    fn new(
        backing: Arc<Backing>,
        start: usize,
        len: usize,
        vaddr: u64,
        name: Arc<str>,
        file_offset: u64,
    ) -> Result<Self, LoadError> {
        if len == 0 {
            return Err(LoadError::BadArgument {
                arg: name.to_string(),
                message: "empty section",
            });
        }
        // The last byte must be addressable: vaddr + len - 1 <= u64::MAX.
        if vaddr.checked_add(len as u64 - 1).is_none() {
            return Err(LoadError::Wraps {
                vaddr,
                size: len as u64,
            });
        }
        Ok(Self {
            backing,
            start,
            len,
            vaddr,
            name,
            id: 0,
            file_offset,
        })
    }

    /// Copies `bytes` into a new section at `vaddr`, named `name` (for diagnostics).
    pub fn from_bytes(
        vaddr: u64,
        bytes: impl Into<Box<[u8]>>,
        name: &str,
    ) -> Result<Self, LoadError> {
        let bytes = bytes.into();
        let len = bytes.len();
        Self::new(
            Arc::new(Backing::Owned(bytes)),
            0,
            len,
            vaddr,
            Arc::from(name),
            0,
        )
    }

    /// Maps `size` bytes of `path` from `offset` (to the end of the file if `size` is
    /// `None` or runs past it) at `vaddr`, as libipt's `pt_section_mk` does.
    pub fn from_file(
        path: &Path,
        offset: u64,
        size: Option<u64>,
        vaddr: u64,
    ) -> Result<Self, LoadError> {
        let map = map_file(path)?;
        Self::from_map(map, path, offset, size, vaddr)
    }

    fn from_map(
        map: Arc<Backing>,
        path: &Path,
        offset: u64,
        size: Option<u64>,
        vaddr: u64,
    ) -> Result<Self, LoadError> {
        let file_size = map.bytes().len() as u64;
        if offset >= file_size {
            return Err(LoadError::BadOffset {
                path: path.to_path_buf(),
                offset,
                file_size,
            });
        }
        let avail = file_size - offset;
        let len = size.map_or(avail, |size| size.min(avail));
        // Both fit in usize: they are bounded by the mapped length.
        Self::new(
            map,
            offset as usize,
            len as usize,
            vaddr,
            Arc::from(path.to_string_lossy().as_ref()),
            offset,
        )
    }

    /// The first linear address.
    pub fn vaddr(&self) -> u64 {
        self.vaddr
    }

    /// The number of bytes.
    #[allow(clippy::len_without_is_empty)] // sections are never empty
    pub fn len(&self) -> u64 {
        self.len as u64
    }

    /// The last linear address (inclusive; cannot overflow).
    pub fn last(&self) -> u64 {
        self.vaddr + (self.len as u64 - 1)
    }

    /// Whether `ip` lies in this section.
    pub fn contains(&self, ip: u64) -> bool {
        ip >= self.vaddr && ip <= self.last()
    }

    /// The file name or label the bytes came from.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The id [`Image::add`] gave the section; the pieces an overlay leaves share it.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The offset of the first byte in its file (0 for in-memory sections).
    pub fn file_offset(&self) -> u64 {
        self.file_offset
    }

    /// The whole file (or buffer) the section is part of (e.g. to read its build id).
    pub fn file_bytes(&self) -> &[u8] {
        self.backing.bytes()
    }

    /// All bytes of the section.
    pub fn bytes(&self) -> &[u8] {
        // In bounds by construction: start + len <= backing length.
        &self.backing.bytes()[self.start..self.start + self.len]
    }

    /// The piece `[from, to]` (inclusive linear addresses inside the section).
    fn piece(&self, from: u64, to: u64) -> Self {
        let skip = (from - self.vaddr) as usize;
        Self {
            backing: Arc::clone(&self.backing),
            start: self.start + skip,
            len: (to - from) as usize + 1,
            vaddr: from,
            name: Arc::clone(&self.name),
            id: self.id,
            file_offset: self.file_offset + skip as u64,
        }
    }
}

fn map_file(path: &Path) -> Result<Arc<Backing>, LoadError> {
    let io = |source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if meta.is_dir() {
        return Err(LoadError::Directory {
            path: path.to_path_buf(),
        });
    }
    let file_size = meta.len();
    if file_size == 0 {
        // Nothing to map (and mapping zero bytes fails on some systems).
        return Ok(Arc::new(Backing::Owned(Box::default())));
    }
    // SAFETY: the map is read-only. Like every tool that maps its input, we rely on
    // nobody truncating the file while it is mapped.
    let map = unsafe { Mmap::map(&file) }.map_err(io)?;
    Ok(Arc::new(Backing::Mapped(map)))
}

/// Source of code bytes for the instruction and block decoders.
///
/// [`Image`] is the standard implementation; implement it for other providers (e.g. a
/// process's memory read on demand into an owned buffer) to use the block cache with
/// them.
pub trait CodeSource {
    /// The bytes from `ip` to the end of the contiguous run that contains it (at least
    /// one byte), or [`ErrorCode::NoMap`].
    fn bytes_at(&self, ip: u64) -> Result<&[u8], CodeError>;

    /// A value that changes whenever the bytes at any address may have changed.
    fn stamp(&self) -> u64;

    /// A non-zero id of the section that holds `ip` (libipt's isid), or `None` if
    /// nothing is mapped there. The default gives every mapped address id 1.
    fn section_id(&self, ip: u64) -> Option<u32> {
        self.bytes_at(ip).ok().map(|_| 1)
    }

    /// Copies bytes from `ip` into `buf`, crossing from one run into the next, until
    /// `buf` is full or the next address is unmapped. Returns how many bytes were
    /// copied (at least one), or [`ErrorCode::NoMap`] if nothing is mapped at `ip`.
    fn read(&self, ip: u64, buf: &mut [u8]) -> Result<usize, CodeError> {
        let mut done = 0;
        let mut at = ip;
        while done < buf.len() {
            let bytes = match self.bytes_at(at) {
                Ok(bytes) => bytes,
                Err(err) if done == 0 => return Err(err),
                Err(_) => break,
            };
            let n = bytes.len().min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&bytes[..n]);
            done += n;
            match at.checked_add(n as u64) {
                Some(next) => at = next,
                None => break,
            }
        }
        Ok(done)
    }
}

static NEXT_STAMP: AtomicU64 = AtomicU64::new(1);

fn next_stamp() -> u64 {
    NEXT_STAMP.fetch_add(1, Ordering::Relaxed)
}

/// A memory image: non-overlapping sections sorted by address.
#[derive(Clone, Debug)]
pub struct Image {
    sections: Vec<Section>,
    stamp: u64,
    next_id: u32,
}

impl Default for Image {
    fn default() -> Self {
        Self::new()
    }
}

/// One `PT_LOAD` segment that [`Image::add_elf`] mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElfSegment {
    /// `p_offset`: where its bytes start in the file.
    pub offset: u64,
    /// `p_filesz`: how many bytes were mapped.
    pub size: u64,
    /// `p_vaddr` as written in the file.
    pub vaddr: u64,
    /// Where it was mapped (`p_vaddr` relocated by the load base).
    pub load_vaddr: u64,
    /// The section id in the image.
    pub id: u32,
}

/// What [`Image::add_elf`] did.
#[derive(Debug, Default)]
pub struct ElfLoad {
    /// The segments that were mapped, in program-header order.
    pub segments: Vec<ElfSegment>,
    /// Segments that could not be mapped: program-header index and why (libipt's ptxed
    /// warns about these and goes on).
    pub skipped: Vec<(usize, LoadError)>,
}

impl Image {
    /// An empty image.
    pub fn new() -> Self {
        Self {
            sections: Vec::new(),
            stamp: next_stamp(),
            next_id: 1,
        }
    }

    /// Identifies the current contents; changes with every modification.
    pub fn stamp(&self) -> u64 {
        self.stamp
    }

    /// The sections, sorted by address, after overlays.
    pub fn sections(&self) -> &[Section] {
        &self.sections
    }

    /// Whether no byte is mapped.
    pub fn is_empty(&self) -> bool {
        self.sections.is_empty()
    }

    /// Adds `section`, hiding whatever earlier sections it overlaps. Returns the id
    /// given to it.
    pub fn add(&mut self, mut section: Section) -> u32 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        section.id = id;
        self.unmap(section.vaddr, section.last());
        let at = self.sections.partition_point(|s| s.vaddr < section.vaddr);
        self.sections.insert(at, section);
        self.stamp = next_stamp();
        id
    }

    /// Removes everything mapped in `[first, last]` (inclusive), keeping the parts of
    /// sections outside it.
    fn unmap(&mut self, first: u64, last: u64) {
        // Sections are sorted and disjoint, so those overlapping the range are
        // contiguous: from the first whose end reaches `first` up to the last that
        // starts at or before `last`.
        let lo = self.sections.partition_point(|s| s.last() < first);
        let hi = self.sections.partition_point(|s| s.vaddr <= last);
        if lo >= hi {
            return;
        }
        let mut keep = Vec::with_capacity(2);
        if let Some(s) = self.sections.get(lo) {
            if s.vaddr < first {
                keep.push(s.piece(s.vaddr, first - 1));
            }
        }
        if let Some(s) = self.sections.get(hi - 1) {
            if s.last() > last {
                keep.push(s.piece(last + 1, s.last()));
            }
        }
        self.sections.splice(lo..hi, keep);
    }

    /// Copies `bytes` into a new section at `vaddr`. Returns its id.
    pub fn add_bytes(
        &mut self,
        vaddr: u64,
        bytes: impl Into<Box<[u8]>>,
        name: &str,
    ) -> Result<u32, LoadError> {
        Ok(self.add(Section::from_bytes(vaddr, bytes, name)?))
    }

    /// Maps `size` bytes (all if `None`; clamped to the file) of `path` from `offset` at
    /// `vaddr`. Returns the section id.
    pub fn add_file(
        &mut self,
        path: impl AsRef<Path>,
        offset: u64,
        size: Option<u64>,
        vaddr: u64,
    ) -> Result<u32, LoadError> {
        Ok(self.add(Section::from_file(path.as_ref(), offset, size, vaddr)?))
    }

    /// Removes every section whose name is `name` (libipt's
    /// `pt_image_remove_by_filename`). Returns how many pieces were removed.
    pub fn remove_by_name(&mut self, name: &str) -> usize {
        let before = self.sections.len();
        self.sections.retain(|s| s.name() != name);
        let removed = before - self.sections.len();
        if removed != 0 {
            self.stamp = next_stamp();
        }
        removed
    }

    /// Loads a file as ptxed's `--raw <file>[:<from>[-<to>]]:<base>` does: the bytes
    /// from file offset `from` (default 0) up to `to` (exclusive; default: end of file)
    /// mapped at `base`. Numbers are C literals (`0x` hex, `0` octal, or decimal).
    pub fn add_raw_arg(&mut self, arg: &str) -> Result<u32, LoadError> {
        let raw = RawArg::parse(arg)?;
        self.add_file(&raw.path, raw.offset, raw.size, raw.base)
    }

    /// Loads an ELF file as ptxed's `--elf <file>[:<base>]` does; see
    /// [`Image::add_elf`].
    pub fn add_elf_arg(&mut self, arg: &str) -> Result<ElfLoad, LoadError> {
        let (path, base) = split_base(arg).unwrap_or((arg, 0));
        self.add_elf(path, base)
    }

    /// Maps the non-empty (`p_filesz` > 0) `PT_LOAD` segments of an ELF file (32- or
    /// 64-bit) at their `p_vaddr`, in program-header order, as libipt's ptxed does. A
    /// non-zero `base` relocates them so that the lowest `p_vaddr` of a `PT_LOAD`
    /// segment lands at `base` (for PIE and shared objects).
    pub fn add_elf(&mut self, path: impl AsRef<Path>, base: u64) -> Result<ElfLoad, LoadError> {
        let path = path.as_ref();
        let map = map_file(path)?;
        let segments = elf_load_segments(map.bytes(), path)?;
        let bias = if base == 0 {
            0
        } else {
            let min = segments.iter().map(|s| s.vaddr).min().unwrap_or(u64::MAX);
            base.wrapping_sub(min)
        };
        let mut load = ElfLoad::default();
        for seg in &segments {
            if seg.size == 0 {
                continue;
            }
            let load_vaddr = seg.vaddr.wrapping_add(bias);
            match Section::from_map(
                Arc::clone(&map),
                path,
                seg.offset,
                Some(seg.size),
                load_vaddr,
            ) {
                Ok(section) => {
                    let id = self.add(section);
                    load.segments.push(ElfSegment {
                        offset: seg.offset,
                        size: seg.size,
                        vaddr: seg.vaddr,
                        load_vaddr,
                        id,
                    });
                }
                Err(err) => load.skipped.push((seg.index, err)),
            }
        }
        Ok(load)
    }

    /// The mapped addresses whose low `bits` bits are those of `low` (what a
    /// compressed IP packet may stand for when its upper bits are unknown), into
    /// `out`, in order; their number, or `None` if there are more than `out` holds.
    /// For resuming after damage at an IP packet whose last IP was lost.
    pub fn completions(&self, low: u64, bits: u32, out: &mut [u64]) -> Option<usize> {
        if bits >= 64 {
            return match self.find(low) {
                Some(_) if !out.is_empty() => {
                    out[0] = low;
                    Some(1)
                }
                Some(_) => None,
                None => Some(0),
            };
        }
        let low = low & ((1u64 << bits) - 1);
        let mut n = 0;
        for s in &self.sections {
            let (first, last) = (s.vaddr(), s.last());
            // One candidate per 2^bits window the section touches.
            let (lo, hi) = (first >> bits, last >> bits);
            if hi - lo > out.len() as u64 {
                return None;
            }
            for upper in lo..=hi {
                let ip = (upper << bits) | low;
                if (first..=last).contains(&ip) {
                    *out.get_mut(n)? = ip;
                    n += 1;
                }
            }
        }
        Some(n)
    }

    /// The section that contains `ip`.
    pub fn find(&self, ip: u64) -> Option<&Section> {
        let at = self.sections.partition_point(|s| s.vaddr <= ip);
        let section = self.sections.get(at.checked_sub(1)?)?;
        section.contains(ip).then_some(section)
    }

    /// The bytes from `ip` to the end of its section, without copying.
    pub fn bytes_at(&self, ip: u64) -> Result<&[u8], CodeError> {
        let section = self.find(ip).ok_or(CodeError::no_map(ip))?;
        let skip = (ip - section.vaddr) as usize;
        section.bytes().get(skip..).ok_or(CodeError::no_map(ip))
    }

    /// Copies bytes from `ip` into `buf`, crossing into adjacent sections, until `buf`
    /// is full or the next address is unmapped. Returns how many bytes were copied
    /// (at least one), or [`ErrorCode::NoMap`] if nothing is mapped at `ip`.
    pub fn read(&self, ip: u64, buf: &mut [u8]) -> Result<usize, CodeError> {
        CodeSource::read(self, ip, buf)
    }
}

impl CodeSource for Image {
    fn bytes_at(&self, ip: u64) -> Result<&[u8], CodeError> {
        Image::bytes_at(self, ip)
    }

    fn stamp(&self) -> u64 {
        self.stamp
    }

    fn section_id(&self, ip: u64) -> Option<u32> {
        self.find(ip).map(Section::id)
    }
}

/// A `PT_LOAD` program header, as far as loading goes.
struct LoadSegment {
    index: usize,
    offset: u64,
    size: u64,
    vaddr: u64,
}

fn elf_load_segments(data: &[u8], path: &Path) -> Result<Vec<LoadSegment>, LoadError> {
    use object::read::elf::{FileHeader, ProgramHeader};

    fn collect<H: FileHeader>(data: &[u8]) -> object::read::Result<Vec<LoadSegment>> {
        let header = H::parse(data)?;
        let endian = header.endian()?;
        let mut out = Vec::new();
        for (index, ph) in header.program_headers(endian, data)?.iter().enumerate() {
            if ph.p_type(endian) != object::elf::PT_LOAD {
                continue;
            }
            out.push(LoadSegment {
                index,
                offset: ph.p_offset(endian).into(),
                size: ph.p_filesz(endian).into(),
                vaddr: ph.p_vaddr(endian).into(),
            });
        }
        Ok(out)
    }

    if data.get(..4) != Some(&object::elf::ELFMAG[..]) {
        return Err(LoadError::NotElf {
            path: path.to_path_buf(),
        });
    }
    // Byte 4 of e_ident is EI_CLASS.
    let result = match data.get(4) {
        Some(&object::elf::ELFCLASS32) => {
            collect::<object::elf::FileHeader32<object::Endianness>>(data)
        }
        Some(&object::elf::ELFCLASS64) => {
            collect::<object::elf::FileHeader64<object::Endianness>>(data)
        }
        other => {
            return Err(LoadError::BadElf {
                path: path.to_path_buf(),
                reason: format!("unsupported ELF class {:?}", other.copied()),
            })
        }
    };
    result.map_err(|err| LoadError::BadElf {
        path: path.to_path_buf(),
        reason: err.to_string(),
    })
}

/// A parsed ptxed `--raw` argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawArg {
    /// The file.
    pub path: PathBuf,
    /// First file offset to map.
    pub offset: u64,
    /// Bytes to map (`None`: to the end of the file).
    pub size: Option<u64>,
    /// Where to map them.
    pub base: u64,
}

impl RawArg {
    /// Parses `<file>[:<from>[-<to>]]:<base>` the way ptxed does: the base after the
    /// last `:` is required; an optional range before it is taken only if it parses
    /// (otherwise the `:` belongs to the file name); `to` is an exclusive end offset and
    /// must exceed `from`.
    pub fn parse(arg: &str) -> Result<Self, LoadError> {
        let (rest, base) = split_base(arg).ok_or(LoadError::BadArgument {
            arg: arg.to_string(),
            message: "no base address (<file>[:<from>[-<to>]]:<base>)",
        })?;
        let (path, offset, size) = match rest.rsplit_once(':') {
            Some((file, range)) => match parse_range(range) {
                Some((from, None)) => (file, from, None),
                Some((from, Some(to))) => {
                    if to <= from {
                        return Err(LoadError::BadArgument {
                            arg: arg.to_string(),
                            message: "bad range: the end is not after the start",
                        });
                    }
                    (file, from, Some(to - from))
                }
                None => (rest, 0, None),
            },
            None => (rest, 0, None),
        };
        Ok(Self {
            path: PathBuf::from(path),
            offset,
            size,
            base,
        })
    }
}

/// Splits `<rest>:<number>` at the last `:`; `None` if there is no `:` or no number.
fn split_base(arg: &str) -> Option<(&str, u64)> {
    let (rest, num) = arg.rsplit_once(':')?;
    Some((rest, parse_c_number(num)?))
}

/// `<from>` or `<from>-<to>`.
fn parse_range(s: &str) -> Option<(u64, Option<u64>)> {
    match s.split_once('-') {
        None => Some((parse_c_number(s)?, None)),
        Some((from, to)) => Some((parse_c_number(from)?, Some(parse_c_number(to)?))),
    }
}

/// An unsigned C integer literal as `strtoull(s, .., 0)` reads it (whole string).
pub fn parse_c_number(s: &str) -> Option<u64> {
    let (digits, radix) = if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (hex, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    if digits.is_empty() || !digits.bytes().all(|b| (b as char).is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image_of(parts: &[(u64, &[u8])]) -> Image {
        let mut image = Image::new();
        for (i, (vaddr, bytes)) in parts.iter().enumerate() {
            image
                .add_bytes(*vaddr, bytes.to_vec(), &format!("s{i}"))
                .unwrap();
        }
        image
    }

    #[test]
    fn completions_of_a_compressed_ip() {
        let code = vec![0x90u8; 0x3000];
        let image = image_of(&[(0x7f00_0000_f000, &code), (0x40_1000, &code[..0x100])]);
        let mut out = [0u64; 4];
        // Low 16 bits 0x1010: in the first section's second window and the second
        // section.
        assert_eq!(image.completions(0x1010, 16, &mut out), Some(2));
        assert_eq!(out[..2], [0x40_1010, 0x7f00_0001_1010]);
        // 0xf800: only the first section's first window.
        assert_eq!(image.completions(0xf800, 16, &mut out), Some(1));
        assert_eq!(out[0], 0x7f00_0000_f800);
        assert_eq!(image.completions(0x5000, 16, &mut out), Some(0));
        // 32 bits: one each.
        assert_eq!(image.completions(0x0000_f010, 32, &mut out), Some(1));
        assert_eq!(out[0], 0x7f00_0000_f010);
        assert_eq!(image.completions(0x40_1010, 64, &mut out), Some(1));
        // More than fit: none.
        assert_eq!(image.completions(0x1010, 4, &mut out), None);
        assert_eq!(image.completions(0x1010, 16, &mut out[..1]), None);
    }

    #[test]
    fn bytes_at_is_bounded_by_the_section() {
        let image = image_of(&[(0x1000, &[1, 2, 3, 4])]);
        assert_eq!(image.bytes_at(0x1000).unwrap(), &[1, 2, 3, 4]);
        assert_eq!(image.bytes_at(0x1003).unwrap(), &[4]);
        assert_eq!(image.bytes_at(0x1004), Err(CodeError::no_map(0x1004)));
        assert_eq!(image.bytes_at(0xfff), Err(CodeError::no_map(0xfff)));
        assert_eq!(Image::new().bytes_at(0), Err(CodeError::no_map(0)));
    }

    #[test]
    fn overlay_splits_the_older_section() {
        let mut image = image_of(&[(0x1000, &[0xaa; 8])]);
        let stamp = image.stamp();
        image.add_bytes(0x1002, vec![0xbb; 2], "new").unwrap();
        assert_ne!(image.stamp(), stamp);
        let layout: Vec<_> = image
            .sections()
            .iter()
            .map(|s| (s.vaddr(), s.len(), s.name().to_string()))
            .collect();
        assert_eq!(
            layout,
            [
                (0x1000, 2, "s0".to_string()),
                (0x1002, 2, "new".to_string()),
                (0x1004, 4, "s0".to_string())
            ]
        );
        let mut buf = [0; 8];
        assert_eq!(image.read(0x1000, &mut buf), Ok(8));
        assert_eq!(buf, [0xaa, 0xaa, 0xbb, 0xbb, 0xaa, 0xaa, 0xaa, 0xaa]);
        // The back piece keeps its file offset relative to the original.
        assert_eq!(image.find(0x1005).unwrap().file_offset(), 4);
    }

    #[test]
    fn overlay_covering_several_sections() {
        let mut image = image_of(&[(0x10, &[1; 4]), (0x20, &[2; 4]), (0x30, &[3; 4])]);
        image.add_bytes(0x12, vec![9; 0x20], "big").unwrap();
        let layout: Vec<_> = image
            .sections()
            .iter()
            .map(|s| (s.vaddr(), s.len()))
            .collect();
        assert_eq!(layout, [(0x10, 2), (0x12, 0x20), (0x32, 2)]);
        assert_eq!(image.bytes_at(0x31).unwrap()[0], 9);
        assert_eq!(image.bytes_at(0x32).unwrap(), &[3, 3]);
    }

    #[test]
    fn identical_overlay_replaces() {
        let mut image = image_of(&[(0x10, &[1; 4])]);
        let id = image.add_bytes(0x10, vec![2; 4], "b").unwrap();
        assert_eq!(image.sections().len(), 1);
        assert_eq!(image.find(0x13).unwrap().id(), id);
        assert_eq!(image.remove_by_name("b"), 1);
        assert!(image.is_empty());
    }

    #[test]
    fn read_crosses_adjacent_sections_and_stops_at_gaps() {
        let image = image_of(&[(0x10, &[1, 2]), (0x12, &[3]), (0x14, &[5])]);
        let mut buf = [0; 8];
        assert_eq!(image.read(0x11, &mut buf), Ok(2));
        assert_eq!(&buf[..2], &[2, 3]);
        assert_eq!(image.read(0x13, &mut buf), Err(CodeError::no_map(0x13)));
    }

    #[test]
    fn section_at_the_top_of_the_address_space() {
        let image = image_of(&[(u64::MAX - 1, &[1, 2])]);
        assert_eq!(image.bytes_at(u64::MAX).unwrap(), &[2]);
        let mut buf = [0; 4];
        assert_eq!(image.read(u64::MAX - 1, &mut buf), Ok(2));
        assert!(matches!(
            Section::from_bytes(u64::MAX, vec![1, 2], "x"),
            Err(LoadError::Wraps { .. })
        ));
        assert!(Section::from_bytes(0, Vec::new(), "x").is_err());
    }

    #[test]
    fn images_can_be_shared_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<Image>();
        shared::<Section>();
        shared::<crate::block_cache::BlockCache>();
    }

    #[test]
    fn c_numbers() {
        assert_eq!(parse_c_number("0x1F"), Some(31));
        assert_eq!(parse_c_number("010"), Some(8));
        assert_eq!(parse_c_number("0"), Some(0));
        assert_eq!(parse_c_number("19"), Some(19));
        assert_eq!(parse_c_number("09"), None);
        assert_eq!(parse_c_number("0x"), None);
        assert_eq!(parse_c_number(""), None);
        assert_eq!(parse_c_number("1k"), None);
        assert_eq!(parse_c_number("0x10000000000000000"), None);
    }

    #[test]
    fn raw_arguments() {
        let p = |s: &str| RawArg::parse(s).map(|r| (r.path, r.offset, r.size, r.base));
        assert_eq!(
            p("a.bin:0x1000").unwrap(),
            ("a.bin".into(), 0, None, 0x1000)
        );
        assert_eq!(
            p("a.bin:0x10:0x1000").unwrap(),
            ("a.bin".into(), 0x10, None, 0x1000)
        );
        assert_eq!(
            p("a.bin:0x10-0x18:0x1000").unwrap(),
            ("a.bin".into(), 0x10, Some(8), 0x1000)
        );
        // A ':' that does not introduce a range belongs to the file name.
        assert_eq!(
            p("c:dir/a.bin:0x1000").unwrap(),
            ("c:dir/a.bin".into(), 0, None, 0x1000)
        );
        assert!(p("a.bin:0x18-0x10:0x1000").is_err());
        assert!(p("a.bin:0x10-0x10:0x1000").is_err());
        assert!(p("a.bin").is_err());
        assert!(p("a.bin:").is_err());
        assert!(p("a.bin:zz").is_err());
    }
}
