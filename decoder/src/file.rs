//! Trace files as libipt's tools take them: `<file>[:<from>[-<to>]]` ([`split_range`],
//! [`TraceFile`]), mapped where possible, read with a bound from a pipe, devices that
//! never end refused; and numbers as libipt's tools read them ([`parse_u64`], C's
//! `strtoull` with base 0), and the refusal of an option's value ([`OptionError`]).
//! ptdump, ptxed and the side-band options share them.

use std::fs::File;
use std::io::{self, Read};
use std::ops::Range;
use std::path::Path;

/// `strtoull(s, &end, 0)` with `*end == 0` required: leading blanks, an optional sign,
/// `0x` hex, `0` octal or decimal. `None` if anything is left over or it overflows.
pub fn parse_u64(s: &str) -> Option<u64> {
    let t = s.trim_start();
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        if h.is_empty() || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u64::from_str_radix(h, 16).ok()?
    } else if t.len() > 1 && t.starts_with('0') {
        if !t.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
            return None;
        }
        u64::from_str_radix(&t[1..], 8).ok()?
    } else {
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        t.parse().ok()?
    };
    Some(if neg { v.wrapping_neg() } else { v })
}

/// The operating system's reason for `e`, without Rust's ` (os error N)`.
pub fn os_reason(e: &io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(at) if text.ends_with(')') => text[..at].to_string(),
        _ => text,
    }
}

/// An option of libipt's tools (or of ours beside them) refused: libipt's
/// message, without the program name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OptionError {
    /// The value is not what the option takes.
    #[error("{option}: bad argument: {value}.")]
    Bad {
        /// The option.
        option: String,
        /// Its value.
        value: String,
    },
    /// The value is larger than the option's field.
    #[error("{option}: value too big: {value}.")]
    TooBig {
        /// The option.
        option: String,
        /// Its value.
        value: String,
    },
    /// `--pevent:sample-config` takes `<id>:<sample type>`.
    #[error("bad sample config {0}: invalid argument.")]
    SampleConfig(String),
    /// A second `--perf` file (the files given).
    #[error("--perf: duplicate perf.data files: {0}.")]
    DuplicatePerf(String),
    /// Not an option of this tool.
    #[error("unknown option: {0}.")]
    Unknown(String),
}

impl OptionError {
    /// [`OptionError::Bad`] of `option` and `value`.
    pub fn bad(option: &str, value: &str) -> Self {
        OptionError::Bad {
            option: option.to_string(),
            value: value.to_string(),
        }
    }

    /// A list of numbers: `<n>[,<n>...]`.
    pub fn parse_list(option: &str, value: &str) -> Result<Vec<u32>, OptionError> {
        value
            .split(',')
            .map(|s| s.trim().parse().map_err(|_| Self::bad(option, value)))
            .collect()
    }
}

/// Why a trace file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// The file could not be opened or read.
    #[error("failed to open {path}: {reason}.")]
    Open {
        /// The file.
        path: String,
        /// The operating system's reason.
        reason: String,
    },
    /// The file is a directory.
    #[error("failed to open {path}: it is a directory.")]
    Directory {
        /// The file.
        path: String,
    },
    /// The file is a device (`/dev/zero`, `/dev/urandom`): it has no size and may
    /// never end, so it is refused as libipt's tools refuse it.
    #[error("failed to open {path}: it is {what}, not a trace file.")]
    Device {
        /// The file.
        path: String,
        /// What it is ("a character device").
        what: &'static str,
    },
    /// A pipe gave more than [`STREAM_LIMIT`] bytes.
    #[error("failed to read {path}: the pipe gave more than {limit:#x} bytes; give the trace as a file.")]
    TooLong {
        /// The file.
        path: String,
        /// The limit.
        limit: u64,
    },
    /// The `:<from>[-<to>]` suffix is no byte range.
    #[error("bad range in {arg}: {why}.")]
    BadRange {
        /// The argument as given.
        arg: String,
        /// What is wrong with it.
        why: String,
    },
    /// The range starts at or beyond the end of the file.
    #[error("bad offset {offset:#x} into {path}: the file has {size:#x} bytes.")]
    BadOffset {
        /// The file.
        path: String,
        /// The first byte asked for.
        offset: u64,
        /// The file's size.
        size: u64,
    },
    /// The range ends beyond the end of the file.
    #[error("bad range {end:#x} in {path}: the file has {size:#x} bytes.")]
    BadEnd {
        /// The file.
        path: String,
        /// The end asked for.
        end: u64,
        /// The file's size.
        size: u64,
    },
}

/// A trace file argument `<file>[:<from>[-<to>]]` split into the file and the byte
/// range (`to` exclusive; `None`: to the end), without opening anything but to check
/// whether a `:` belongs to the file name.
///
/// The suffix after the last `:` is a range where it reads as one (C numbers: `0x` hex,
/// `0` octal or decimal), unless the whole argument names an existing file. Where it
/// does not read as a range, the `:` belongs to the file name, unless the part before
/// it names an existing file and the whole does not: then the range is bad.
pub fn split_range(arg: &str) -> Result<(&str, u64, Option<u64>), FileError> {
    let bad = |why: String| FileError::BadRange {
        arg: arg.to_string(),
        why,
    };
    let Some((name, range)) = arg.rsplit_once(':') else {
        return Ok((arg, 0, None));
    };
    if range.is_empty() || Path::new(arg).exists() {
        return Ok((arg, 0, None));
    }
    let (from, to) = match range.split_once('-') {
        // A leading '-' is a sign, not the separator.
        Some((f, t)) if !f.trim_start().is_empty() => (f, Some(t)),
        _ => (range, None),
    };
    let (Some(begin), to) = (parse_u64(from), to.map(|t| (t, parse_u64(t)))) else {
        if Path::new(name).exists() {
            return Err(bad(format!(
                "'{range}' is no offset or range (<from>[-<to>])"
            )));
        }
        return Ok((arg, 0, None));
    };
    match to {
        None => Ok((name, begin, None)),
        Some((_, Some(end))) if end > begin => Ok((name, begin, Some(end))),
        Some((_, Some(end))) => Err(bad(format!(
            "the end {end:#x} is not after the start {begin:#x}"
        ))),
        Some((t, None)) => {
            if Path::new(name).exists() {
                Err(bad(format!("'{t}' is no end offset")))
            } else {
                Ok((arg, 0, None))
            }
        }
    }
}

/// A trace file opened (mapped where possible) and the byte range of it to decode.
pub struct TraceFile {
    trace: Trace,
    range: Range<usize>,
    path: String,
}

impl TraceFile {
    /// Opens `arg`, `<file>[:<from>[-<to>]]` (see [`split_range`]), and checks the range
    /// against the file.
    pub fn open(arg: &str) -> Result<Self, FileError> {
        let (path, from, to) = split_range(arg)?;
        let trace = load(path)?;
        let size = trace.bytes().len() as u64;
        if from >= size {
            return Err(FileError::BadOffset {
                path: path.to_string(),
                offset: from,
                size,
            });
        }
        let end = match to {
            Some(end) if end > size => {
                return Err(FileError::BadEnd {
                    path: path.to_string(),
                    end,
                    size,
                })
            }
            Some(end) => end,
            None => size,
        };
        Ok(Self {
            trace,
            // Both are at most the size of a file in memory.
            range: from as usize..end as usize,
            path: path.to_string(),
        })
    }

    /// The bytes of the range.
    pub fn bytes(&self) -> &[u8] {
        self.trace
            .bytes()
            .get(self.range.clone())
            .unwrap_or_default()
    }

    /// The file's name (without the range).
    pub fn path(&self) -> &str {
        &self.path
    }
}

/// The trace bytes: a memory map of the file, or its contents read into memory where a
/// map is not possible (pipes, special files).
pub enum Trace {
    /// A read-only memory map.
    Mapped(memmap2::Mmap),
    /// Bytes read from the file.
    Read(Vec<u8>),
}

impl Trace {
    /// The whole trace.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Trace::Mapped(m) => m,
            Trace::Read(v) => v,
        }
    }
}

/// The most a trace read from a pipe (or socket) may hold: such a stream has no size,
/// and one that never ends must not take all memory.
pub const STREAM_LIMIT: u64 = 1 << 30;

/// Open `path`; map it if it is a regular non-empty file, read it (at most
/// [`STREAM_LIMIT`] bytes) if it is a pipe or socket; refuse a directory or a device.
fn load(path: &str) -> Result<Trace, FileError> {
    load_within(path, STREAM_LIMIT)
}

/// [`load`] with a stream read up to `limit` bytes.
fn load_within(path: &str, limit: u64) -> Result<Trace, FileError> {
    use std::os::unix::fs::FileTypeExt;
    let open = |e: io::Error| FileError::Open {
        path: path.to_string(),
        reason: os_reason(&e),
    };
    let mut f = File::open(path).map_err(open)?;
    let meta = f.metadata().map_err(open)?;
    let t = meta.file_type();
    if t.is_dir() {
        return Err(FileError::Directory {
            path: path.to_string(),
        });
    }
    if t.is_char_device() || t.is_block_device() {
        let what = if t.is_char_device() {
            "a character device"
        } else {
            "a block device"
        };
        return Err(FileError::Device {
            path: path.to_string(),
            what,
        });
    }
    if meta.is_file() && meta.len() > 0 {
        // SAFETY: the map is read-only and private to this process; like every reader
        // of a trace file we assume nobody truncates the file while we decode it.
        if let Ok(m) = unsafe { memmap2::Mmap::map(&f) } {
            return Ok(Trace::Mapped(m));
        }
    }
    let mut v = Vec::new();
    (&mut f).take(limit + 1).read_to_end(&mut v).map_err(open)?;
    if v.len() as u64 > limit {
        return Err(FileError::TooLong {
            path: path.to_string(),
            limit,
        });
    }
    Ok(Trace::Read(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn numbers_like_strtoull() {
        assert_eq!(parse_u64("10"), Some(10));
        assert_eq!(parse_u64("0x1f"), Some(31));
        assert_eq!(parse_u64("010"), Some(8));
        assert_eq!(parse_u64("0"), Some(0));
        assert_eq!(parse_u64(" 7"), Some(7));
        assert_eq!(parse_u64("-1"), Some(u64::MAX));
        assert_eq!(parse_u64("1x"), None);
        assert_eq!(parse_u64(""), None);
        assert_eq!(parse_u64("08"), None);
    }

    #[test]
    fn file_ranges() {
        let dir = std::env::temp_dir().join(format!("ptdump-ranges-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("t.pt");
        std::fs::write(&f, [1, 2, 3, 4, 5]).unwrap();
        let f = f.to_str().unwrap();
        let colon = dir.join("c:t.pt");
        std::fs::write(&colon, [9]).unwrap();
        let colon = colon.to_str().unwrap();
        let r = |s: &str| split_range(s).map(|(n, a, b)| (n.to_string(), a, b));
        assert_eq!(r(f).unwrap(), (f.to_string(), 0, None));
        assert_eq!(r(&format!("{f}:0x1")).unwrap(), (f.to_string(), 1, None));
        assert_eq!(r(&format!("{f}:1-3")).unwrap(), (f.to_string(), 1, Some(3)));
        // A ':' in a file name, or before nothing.
        assert_eq!(r(colon).unwrap(), (colon.to_string(), 0, None));
        assert_eq!(r(&format!("{f}:")).unwrap(), (format!("{f}:"), 0, None));
        assert_eq!(
            r("/no/such:zz").unwrap(),
            ("/no/such:zz".to_string(), 0, None)
        );
        // A range that is none, after an existing file.
        let e = r(&format!("{f}:zz")).unwrap_err().to_string();
        assert!(
            e.ends_with("'zz' is no offset or range (<from>[-<to>])."),
            "{e}"
        );
        let e = r(&format!("{f}:5-3")).unwrap_err().to_string();
        assert!(
            e.ends_with("the end 0x3 is not after the start 0x5."),
            "{e}"
        );
        let t = TraceFile::open(&format!("{f}:2-4")).unwrap();
        assert_eq!(t.bytes(), &[3, 4]);
        let e = TraceFile::open(&format!("{f}:5"))
            .err()
            .unwrap()
            .to_string();
        assert_eq!(
            e,
            format!("bad offset 0x5 into {f}: the file has 0x5 bytes.")
        );
        let e = TraceFile::open(&format!("{f}:1-6"))
            .err()
            .unwrap()
            .to_string();
        assert_eq!(e, format!("bad range 0x6 in {f}: the file has 0x5 bytes."));
        let d = dir.to_str().unwrap();
        let e = TraceFile::open(d).err().unwrap().to_string();
        assert_eq!(e, format!("failed to open {d}: it is a directory."));
        let e = TraceFile::open("/no/such").err().unwrap().to_string();
        assert_eq!(e, "failed to open /no/such: No such file or directory.");
        // A pipe is read, up to a bound.
        let fifo = dir.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        let feed = |n: usize| {
            let fifo = fifo.clone();
            std::thread::spawn(move || {
                let mut w = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
                let _ = w.write_all(&vec![0x55; n]);
            })
        };
        let fifo_s = fifo.to_str().unwrap();
        let t = feed(16);
        assert_eq!(load_within(fifo_s, 16).unwrap().bytes(), &[0x55; 16]);
        t.join().unwrap();
        let t = feed(17);
        let e = load_within(fifo_s, 16).err().unwrap().to_string();
        t.join().unwrap();
        assert!(
            e.ends_with("the pipe gave more than 0x10 bytes; give the trace as a file."),
            "{e}"
        );
        // Devices that never end are refused at once.
        for dev in ["/dev/zero", "/dev/urandom"] {
            let e = TraceFile::open(dev).err().unwrap().to_string();
            assert_eq!(
                e,
                format!("failed to open {dev}: it is a character device, not a trace file.")
            );
        }
    }
}
