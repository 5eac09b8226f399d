//! Reader for the side-band file the PT simulator's `ptrec` writes next to a
//! trace (`TRACE.sideband`, format `ptsim-sideband 1`): the recording
//! parameters a decoder needs and the executable mappings of the traced
//! process.
//!
//! The format, as far as a decoder cares: UTF-8 text, one record per line,
//! fields separated by single spaces, a path always last and running to the
//! end of the line; `#` starts a comment line; numbers are decimal or `0x`
//! hex. The first line is `ptsim-sideband 1`. Records read here:
//!
//! - `cpu none|F/M[/S]`, `mtc-freq N`, `nom-freq N`, `cpuid-0x15.eax N`,
//!   `cpuid-0x15.ebx N`: decoder configuration;
//! - `image OFFSET`: a new set of mappings, valid from trace byte OFFSET on;
//! - `map START END FILE-OFFSET PERMS PATH`: `[START, END)` holds PATH's
//!   bytes from FILE-OFFSET (code that is in no file was dumped to a file
//!   of its own, mapped from offset 0).
//!
//! Other records are kept as plain `key value` parameters. This reader is
//! independent of the simulator crate (which depends on this one).

use std::path::{Path, PathBuf};

use crate::config::{Config, Cpu, Errata};
use crate::image::{Image, LoadError};

/// The first line of a side-band file.
pub const HEADER: &str = "ptsim-sideband 1";

/// What is wrong with a side-band file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SidebandError {
    /// The file cannot be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The first line is not [`HEADER`].
    #[error("line 1: not a ptsim side-band file (expected `{HEADER}`)")]
    BadHeader,
    /// A line does not parse.
    #[error("line {line}: {what}")]
    BadLine {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        what: String,
    },
    /// A mapped file cannot be loaded into the image.
    #[error("line {line}: {source}")]
    Load {
        /// 1-based line number of the `map` record.
        line: usize,
        /// Why.
        source: LoadError,
    },
}

/// One `map` record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// File offset of `start`.
    pub file_offset: u64,
    /// `r-xp`-style permissions.
    pub perms: String,
    /// The file, as written.
    pub path: PathBuf,
    /// 1-based line number of the record.
    pub line: usize,
}

/// One `image` record and its mappings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SidebandImage {
    /// Trace byte offset from which the mappings apply.
    pub offset: u64,
    /// The mappings.
    pub maps: Vec<Mapping>,
}

/// A parsed side-band file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sideband {
    /// `cpu`: `None` for `none` or when absent.
    pub cpu: Option<Cpu>,
    /// `mtc-freq`.
    pub mtc_freq: Option<u8>,
    /// `nom-freq`.
    pub nom_freq: Option<u8>,
    /// `cpuid-0x15.eax`.
    pub cpuid_0x15_eax: Option<u32>,
    /// `cpuid-0x15.ebx`.
    pub cpuid_0x15_ebx: Option<u32>,
    /// Every other record, in file order, as `(key, rest of the line)`.
    pub params: Vec<(String, String)>,
    /// The images in trace order.
    pub images: Vec<SidebandImage>,
    /// Directory of the file, for relative paths.
    pub base_dir: Option<PathBuf>,
}

fn number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) if !h.is_empty() => u64::from_str_radix(h, 16).ok(),
        Some(_) => None,
        None => s.parse().ok(),
    }
}

impl Sideband {
    /// Parses side-band text.
    pub fn parse(text: &str) -> Result<Self, SidebandError> {
        let mut lines = text.lines();
        if lines.next().map(str::trim_end) != Some(HEADER) {
            return Err(SidebandError::BadHeader);
        }
        let mut sb = Sideband::default();
        for (i, line) in lines.enumerate() {
            let line_no = i + 2;
            let bad = |what: String| SidebandError::BadLine {
                line: line_no,
                what,
            };
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
            let num = |what: &str, max: u64| -> Result<u64, SidebandError> {
                number(rest.trim_end())
                    .filter(|&v| v <= max)
                    .ok_or_else(|| bad(format!("{key}: bad {what} `{rest}`")))
            };
            match key {
                "cpu" => {
                    sb.cpu = match rest.trim_end() {
                        "none" => None,
                        c => Some(c.parse::<Cpu>().map_err(|_| {
                            bad(format!("cpu: expected none or F/M[/S], got `{c}`"))
                        })?),
                    }
                }
                "mtc-freq" => sb.mtc_freq = Some(num("value", 0xff)? as u8),
                "nom-freq" => sb.nom_freq = Some(num("value", 0xff)? as u8),
                "cpuid-0x15.eax" => sb.cpuid_0x15_eax = Some(num("value", 0xffff_ffff)? as u32),
                "cpuid-0x15.ebx" => sb.cpuid_0x15_ebx = Some(num("value", 0xffff_ffff)? as u32),
                "image" => sb.images.push(SidebandImage {
                    offset: num("trace offset", u64::MAX)?,
                    maps: Vec::new(),
                }),
                "map" => {
                    let mut f = rest.splitn(5, ' ');
                    let mut field = |what: &str| {
                        f.next().filter(|s| !s.is_empty()).ok_or_else(|| {
                            bad(format!(
                                "map: missing {what} (need START END FILE-OFFSET PERMS PATH)"
                            ))
                        })
                    };
                    let mut addr = |what: &str| -> Result<u64, SidebandError> {
                        let s = field(what)?;
                        number(s).ok_or_else(|| bad(format!("map: bad {what} `{s}`")))
                    };
                    let start = addr("start")?;
                    let end = addr("end")?;
                    let file_offset = addr("file offset")?;
                    let perms = field("permissions")?.to_string();
                    let path = PathBuf::from(field("path")?);
                    if end <= start {
                        return Err(bad(format!(
                            "map: end {end:#x} is not above start {start:#x}"
                        )));
                    }
                    let img = sb
                        .images
                        .last_mut()
                        .ok_or_else(|| bad("map before any image record".to_string()))?;
                    img.maps.push(Mapping {
                        start,
                        end,
                        file_offset,
                        perms,
                        path,
                        line: line_no,
                    });
                }
                _ => sb.params.push((key.to_string(), rest.to_string())),
            }
        }
        Ok(sb)
    }

    /// Reads and parses a file; relative paths in it are taken relative to
    /// its directory when they do not exist as given.
    pub fn read(path: &Path) -> Result<Self, SidebandError> {
        let text = std::fs::read_to_string(path).map_err(|source| SidebandError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut sb = Self::parse(&text)?;
        sb.base_dir = path.parent().map(Path::to_path_buf);
        Ok(sb)
    }

    /// The value of another parameter.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The mappings for decoding the whole trace with one image: those of the
    /// last image, plus those of earlier images that overlap none of them
    /// (code that was unmapped later). Sorted by address.
    pub fn merged_maps(&self) -> Vec<&Mapping> {
        let mut out: Vec<&Mapping> = Vec::new();
        for img in self.images.iter().rev() {
            for m in &img.maps {
                if !out.iter().any(|o| o.start < m.end && m.start < o.end) {
                    out.push(m);
                }
            }
        }
        out.sort_by_key(|m| m.start);
        out
    }

    /// Where a mapping's file is: as written, or relative to the side-band
    /// file's directory.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        match &self.base_dir {
            Some(dir) if path.is_relative() && !path.exists() => dir.join(path),
            _ => path.to_path_buf(),
        }
    }

    /// Adds the merged mappings' code to `image`. A mapping that starts at
    /// or beyond the end of its file (nothing of it is in the file) is
    /// skipped. Returns the number of sections added.
    pub fn load(&self, image: &mut Image) -> Result<usize, SidebandError> {
        let mut n = 0;
        for m in self.merged_maps() {
            let path = self.resolve(&m.path);
            match image.add_file(&path, m.file_offset, Some(m.end - m.start), m.start) {
                Ok(_) => n += 1,
                Err(LoadError::BadOffset { .. }) => {}
                Err(source) => {
                    return Err(SidebandError::Load {
                        line: m.line,
                        source,
                    })
                }
            }
        }
        Ok(n)
    }

    /// Applies the recording parameters to `config`, each unless `keep`
    /// says it was set explicitly. The errata follow the CPU; an unknown
    /// CPU keeps the errata unchanged and is reported as `Err`.
    pub fn configure(&self, config: &mut Config, keep: Explicit) -> Result<(), Cpu> {
        if !keep.mtc_freq {
            if let Some(v) = self.mtc_freq {
                config.mtc_freq = v;
            }
        }
        if !keep.nom_freq {
            if let Some(v) = self.nom_freq {
                config.nom_freq = v;
            }
        }
        if !keep.cpuid_0x15_eax {
            if let Some(v) = self.cpuid_0x15_eax {
                config.cpuid_0x15_eax = v;
            }
        }
        if !keep.cpuid_0x15_ebx {
            if let Some(v) = self.cpuid_0x15_ebx {
                config.cpuid_0x15_ebx = v;
            }
        }
        if !keep.cpu {
            config.cpu = self.cpu;
            if let Some(c) = self.cpu {
                config.errata = Errata::for_cpu(c).map_err(|_| c)?;
            }
        }
        Ok(())
    }
}

/// Which decoder parameters were given explicitly (and so win over the
/// side-band's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Explicit {
    /// `--cpu`.
    pub cpu: bool,
    /// `--mtc-freq`.
    pub mtc_freq: bool,
    /// `--nom-freq`.
    pub nom_freq: bool,
    /// `--cpuid-0x15.eax`.
    pub cpuid_0x15_eax: bool,
    /// `--cpuid-0x15.ebx`.
    pub cpuid_0x15_ebx: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = "ptsim-sideband 1
backend sim
cpu 6/85/4
mtc-freq 3
nom-freq 0x20
cpuid-0x15.eax 2
cpuid-0x15.ebx 100
# a comment
rtit-ctl 0x2c0a
pid 42
image 0
map 0x1000 0x2000 0x0 r-xp CODE_A
map 0x5000 0x6000 0x10 r-xp CODE B
image 512
map 0x1000 0x1800 0x0 r-xp CODE_C
end 4096
";

    #[test]
    fn reads_parameters_and_images() {
        let sb = Sideband::parse(FIXTURE).unwrap();
        assert_eq!(
            sb.cpu,
            Some(Cpu {
                family: 6,
                model: 85,
                stepping: 4
            })
        );
        assert_eq!(sb.mtc_freq, Some(3));
        assert_eq!(sb.nom_freq, Some(0x20));
        assert_eq!((sb.cpuid_0x15_eax, sb.cpuid_0x15_ebx), (Some(2), Some(100)));
        assert_eq!(sb.param("pid"), Some("42"));
        assert_eq!(sb.param("end"), Some("4096"));
        assert_eq!(sb.images.len(), 2);
        assert_eq!(sb.images[1].offset, 512);
        let b = &sb.images[0].maps[1];
        assert_eq!(b.path, PathBuf::from("CODE B"));
        assert_eq!(
            (b.start, b.end, b.file_offset, b.line),
            (0x5000, 0x6000, 0x10, 13)
        );
        // The later image's mapping hides the earlier one it overlaps.
        let merged: Vec<&str> = sb
            .merged_maps()
            .iter()
            .map(|m| m.path.to_str().unwrap())
            .collect();
        assert_eq!(merged, ["CODE_C", "CODE B"]);

        let mut config = Config::default();
        let keep = Explicit {
            mtc_freq: true,
            ..Explicit::default()
        };
        config.mtc_freq = 9;
        sb.configure(&mut config, keep).unwrap();
        assert_eq!(config.mtc_freq, 9);
        assert_eq!(config.nom_freq, 0x20);
        assert_eq!(config.cpuid_0x15_ebx, 100);
        assert_eq!(config.cpu, sb.cpu);
    }

    #[test]
    fn loads_mapped_files_relative_to_the_sideband() {
        let dir = std::env::temp_dir().join(format!("pt-sideband-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("CODE_A"), [0x90u8; 0x100]).unwrap();
        std::fs::write(dir.join("CODE B"), [0xc3u8; 0x20]).unwrap();
        std::fs::write(dir.join("CODE_C"), [0xccu8; 0x10]).unwrap();
        let file = dir.join("t.pt.sideband");
        std::fs::write(&file, FIXTURE).unwrap();
        let sb = Sideband::read(&file).unwrap();
        let mut image = Image::new();
        assert_eq!(sb.load(&mut image).unwrap(), 2);
        // CODE_C (0x10 bytes) at 0x1000; CODE B from offset 0x10 at 0x5000.
        assert_eq!(image.bytes_at(0x1000).unwrap().len(), 0x10);
        assert_eq!(image.bytes_at(0x1000).unwrap()[0], 0xcc);
        assert_eq!(image.bytes_at(0x5000).unwrap(), &[0xc3; 0x10]);
        assert!(image.bytes_at(0x1010).is_err());
        // A missing file: the line of its map record.
        std::fs::remove_file(dir.join("CODE B")).unwrap();
        let e = sb.load(&mut Image::new()).unwrap_err();
        assert!(e.to_string().starts_with("line 13: "), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn malformed_input_names_the_line() {
        let err = |text: &str| Sideband::parse(text).unwrap_err().to_string();
        assert_eq!(
            err("ptsim-sideband 2\n"),
            "line 1: not a ptsim side-band file (expected `ptsim-sideband 1`)"
        );
        assert_eq!(err(""), err("ptsim-sideband 2"));
        assert_eq!(
            err("ptsim-sideband 1\nmtc-freq 3\nmap 0x1000 0x2000 0 r-xp /bin/true\n"),
            "line 3: map before any image record"
        );
        assert_eq!(
            err("ptsim-sideband 1\nimage 0\nmap 0x1000 0x2000 0 r-xp\n"),
            "line 3: map: missing path (need START END FILE-OFFSET PERMS PATH)"
        );
        assert_eq!(
            err("ptsim-sideband 1\nimage 0\nmap 0x1000 zz 0 r-xp /x\n"),
            "line 3: map: bad end `zz`"
        );
        assert_eq!(
            err("ptsim-sideband 1\nimage 0\nmap 0x2000 0x1000 0 r-xp /x\n"),
            "line 3: map: end 0x1000 is not above start 0x2000"
        );
        assert_eq!(
            err("ptsim-sideband 1\n\nmtc-freq 300\n"),
            "line 3: mtc-freq: bad value `300`"
        );
        assert_eq!(
            err("ptsim-sideband 1\ncpu six\n"),
            "line 2: cpu: expected none or F/M[/S], got `six`"
        );
        assert_eq!(
            err("ptsim-sideband 1\nimage 0x\n"),
            "line 2: image: bad trace offset `0x`"
        );
    }
}
