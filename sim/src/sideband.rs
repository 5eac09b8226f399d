//! The side-band file `ptrec` writes next to a simulated trace: what a
//! decoder needs besides the packets.
//!
//! A UTF-8 text file, one record per line, fields separated by one space; a
//! path is always the last field and runs to the end of the line. Lines
//! starting with `#` are comments. Numbers are decimal unless written `0x…`.
//!
//! | record | fields | meaning |
//! |---|---|---|
//! | `ptsim-sideband 1` | version | first line |
//! | `backend sim` | | who produced the trace |
//! | `cpu none` | `none` or `F/M[/S]` | errata to apply (the simulator models none) |
//! | `mtc-freq N` | IA32_RTIT_CTL.MTCFreq | |
//! | `nom-freq N` | `MSR_PLATFORM_INFO[15:8]` | |
//! | `cpuid-0x15.eax N`, `cpuid-0x15.ebx N` | CPUID 0x15 | TSC/CTC ratio |
//! | `cbr N`, `cycles-per-insn N`, `kernel-cycles N`, `tsc-start N` | clock model | |
//! | `rtit-ctl 0x…` | IA32_RTIT_CTL as programmed (TraceEn set) | |
//! | `addr N 0x…A 0x…B` | IA32_RTIT_ADDRn_A/B | |
//! | `cr3-match 0x…` | IA32_RTIT_CR3_MATCH | |
//! | `pid N` | traced process; its CR3 stand-in is `pid << 12` | |
//! | `image OFFSET` | the following `map` lines are the code image from trace byte OFFSET on | replaces the previous image |
//! | `map START END FILE-OFFSET PERMS PATH` | `[START, END)` holds PATH's bytes from FILE-OFFSET | one per executable mapping |
//! | `tid N` | the thread whose trace this is (per-thread traces) | |
//! | `execs N` | the trace starts after the thread's N-th exec of the recording | |
//! | `exit KIND VALUE` | `exited CODE` or `killed SIGNAL` | how the thread ended |
//! | `end BYTES` | trace size; absent if the recording was cut short | |
//! | `thread PID TID PARENT KIND EXECS FILE` | first side-band: every trace file of the recording | `PARENT` `pid/tid` or `-`; `KIND` `thread`, `fork`, `vfork` or `-` |
//! | `task TSC WHAT ...` | first side-band: task events (`comm`, `mmap`, `fork`, `exit`) | see [`crate::record::TaskEvent`] |
//!
//! Code that is not in a file (the vDSO, anonymous executable memory) is
//! dumped from the recorded code pages to `TRACE.code-START` and mapped from
//! there with file offset 0.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::clock::ClockParams;
use crate::exec::{CloneKind, Mapping, ThreadId};

/// First line of the file.
pub const HEADER: &str = "ptsim-sideband 1";

/// One image (set of executable mappings) and where in the trace it starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Image {
    /// Trace byte offset from which this image applies.
    pub offset: u64,
    /// Executable mappings.
    pub maps: Vec<MapLine>,
}

/// One `map` record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapLine {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Offset of `start` in the file.
    pub file_offset: u64,
    /// `r-xp` style permissions.
    pub perms: String,
    /// The file.
    pub path: PathBuf,
}

/// The parsed side-band file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sideband {
    /// `key value` parameters in file order (everything but images and maps).
    pub params: Vec<(String, String)>,
    /// Images in trace order.
    pub images: Vec<Image>,
}

/// One trace file of a recording (a `thread` record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceFile {
    /// The thread.
    pub thread: ThreadId,
    /// Its creator, if it was created during the recording.
    pub parent: Option<ThreadId>,
    /// How it was created.
    pub kind: Option<CloneKind>,
    /// The thread's execs before this trace starts.
    pub execs: u32,
    /// The trace file (its side-band is beside it).
    pub path: PathBuf,
}

/// A malformed side-band file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SidebandError {
    /// The first line is not [`HEADER`].
    #[error("not a ptsim side-band file (first line must be `{HEADER}`)")]
    BadHeader,
    /// A line does not parse.
    #[error("line {line}: {what}")]
    BadLine {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        what: &'static str,
    },
}

fn num(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

impl Sideband {
    /// Parses the text.
    pub fn parse(text: &str) -> Result<Self, SidebandError> {
        let mut lines = text.lines().enumerate();
        if lines.next().map(|(_, l)| l.trim_end()) != Some(HEADER) {
            return Err(SidebandError::BadHeader);
        }
        let mut sb = Sideband::default();
        for (i, line) in lines {
            let line_no = i + 1;
            let bad = |what| SidebandError::BadLine {
                line: line_no,
                what,
            };
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
            match key {
                "image" => sb.images.push(Image {
                    offset: num(rest).ok_or(bad("bad image offset"))?,
                    maps: Vec::new(),
                }),
                "map" => {
                    let mut f = rest.splitn(5, ' ');
                    let mut next = || f.next().ok_or(bad("map needs 5 fields"));
                    let start = num(next()?).ok_or(bad("bad map start"))?;
                    let end = num(next()?).ok_or(bad("bad map end"))?;
                    let file_offset = num(next()?).ok_or(bad("bad map offset"))?;
                    let perms = next()?.to_string();
                    let path = PathBuf::from(next()?);
                    let img = sb.images.last_mut().ok_or(bad("map before any image"))?;
                    img.maps.push(MapLine {
                        start,
                        end,
                        file_offset,
                        perms,
                        path,
                    });
                }
                _ => sb.params.push((key.to_string(), rest.to_string())),
            }
        }
        Ok(sb)
    }

    /// Reads a file.
    pub fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The trace files of the recording, listed in the first thread's
    /// side-band (empty for a side-band of one trace only).
    pub fn traces(&self) -> Vec<TraceFile> {
        let id = |s: &str| {
            let (p, t) = s.split_once('/')?;
            Some(ThreadId {
                pid: p.parse().ok()?,
                tid: t.parse().ok()?,
            })
        };
        self.params
            .iter()
            .filter(|(k, _)| k == "thread")
            .filter_map(|(_, v)| {
                let mut f = v.splitn(6, ' ');
                let pid = f.next()?.parse().ok()?;
                let tid = f.next()?.parse().ok()?;
                let parent = id(f.next()?);
                let kind = match f.next()? {
                    "thread" => Some(CloneKind::Thread),
                    "fork" => Some(CloneKind::Fork),
                    "vfork" => Some(CloneKind::Vfork),
                    _ => None,
                };
                let execs = f.next()?.parse().ok()?;
                Some(TraceFile {
                    thread: ThreadId { pid, tid },
                    parent,
                    kind,
                    execs,
                    path: PathBuf::from(f.next()?),
                })
            })
            .collect()
    }

    /// The value of a parameter.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The mappings of all images: those of the last image, plus earlier ones
    /// that overlap none of them (code mapped and later unmapped).
    pub fn merged_maps(&self) -> Vec<MapLine> {
        let mut out: Vec<MapLine> = Vec::new();
        for img in self.images.iter().rev() {
            for m in &img.maps {
                if !out.iter().any(|o| o.start < m.end && m.start < o.end) {
                    out.push(m.clone());
                }
            }
        }
        out.sort_by_key(|m| m.start);
        out
    }

    /// libipt-style ptxed options for the merged image and the timing
    /// parameters: `--cpu`, `--mtc-freq`, `--nom-freq`, `--cpuid-0x15.*`,
    /// one `--raw FILE:FROM-TO:BASE` per mapping (clipped to the file size).
    pub fn ptxed_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for (key, opt) in [
            ("cpu", "--cpu"),
            ("mtc-freq", "--mtc-freq"),
            ("nom-freq", "--nom-freq"),
            ("cpuid-0x15.eax", "--cpuid-0x15.eax"),
            ("cpuid-0x15.ebx", "--cpuid-0x15.ebx"),
        ] {
            if let Some(v) = self.param(key) {
                args.push(opt.to_string());
                args.push(v.to_string());
            }
        }
        for m in self.merged_maps() {
            {
                let size = std::fs::metadata(&m.path).map(|md| md.len()).unwrap_or(0);
                let m = &m;
                let to = (m.file_offset + (m.end - m.start)).min(size);
                if to <= m.file_offset {
                    continue;
                }
                args.push("--raw".into());
                args.push(format!(
                    "{}:{:#x}-{:#x}:{:#x}",
                    m.path.display(),
                    m.file_offset,
                    to,
                    m.start
                ));
            }
        }
        args
    }
}

/// Builds the side-band text as a recording goes on.
#[derive(Clone, Debug, Default)]
pub struct SidebandWriter {
    text: String,
}

impl SidebandWriter {
    /// The header and the recording parameters.
    pub fn new(clock: &ClockParams, regs: &pt_hal::config::RtitRegs, pid: u32) -> Self {
        let mut t = String::new();
        let _ = writeln!(t, "{HEADER}");
        let _ = writeln!(t, "backend sim");
        let _ = writeln!(t, "cpu none");
        let _ = writeln!(t, "mtc-freq {}", regs.ctl.mtc_freq());
        let _ = writeln!(t, "nom-freq {}", clock.nom_freq);
        let _ = writeln!(t, "cpuid-0x15.eax {}", clock.cpuid_15_eax);
        let _ = writeln!(t, "cpuid-0x15.ebx {}", clock.cpuid_15_ebx);
        let _ = writeln!(t, "cbr {}", clock.cbr);
        let _ = writeln!(t, "cycles-per-insn {}", clock.cycles_per_insn);
        let _ = writeln!(t, "kernel-cycles {}", clock.kernel_cycles);
        let _ = writeln!(t, "tsc-start {:#x}", clock.tsc_start);
        let _ = writeln!(t, "rtit-ctl {:#x}", regs.ctl.0);
        for (n, (a, b)) in regs.addr.iter().enumerate() {
            if *a != 0 || *b != 0 {
                let _ = writeln!(t, "addr {n} {a:#x} {b:#x}");
            }
        }
        if regs.ctl.cr3_filter() {
            let _ = writeln!(t, "cr3-match {:#x}", regs.cr3_match.0);
        }
        let _ = writeln!(t, "pid {pid}");
        SidebandWriter { text: t }
    }

    /// An image from trace offset `offset`: the executable mappings;
    /// `dump(start, end)` stores code that is not in a file and returns the
    /// file it went to.
    pub fn image(
        &mut self,
        offset: u64,
        maps: &[Mapping],
        mut dump: impl FnMut(u64, u64) -> Option<PathBuf>,
    ) {
        let _ = writeln!(self.text, "image {offset}");
        for m in maps.iter().filter(|m| m.perms.exec) {
            let p = m.perms;
            let perms = format!(
                "{}{}{}{}",
                if p.read { 'r' } else { '-' },
                if p.write { 'w' } else { '-' },
                if p.exec { 'x' } else { '-' },
                if p.shared { 's' } else { 'p' }
            );
            let (path, off) = if m.path.starts_with('/') && Path::new(&m.path).is_file() {
                (PathBuf::from(&m.path), m.offset)
            } else {
                match dump(m.start, m.end) {
                    Some(p) => (p, 0),
                    None => continue,
                }
            };
            let _ = writeln!(
                self.text,
                "map {:#x} {:#x} {:#x} {perms} {}",
                m.start,
                m.end,
                off,
                path.display()
            );
        }
    }

    /// Any other line.
    pub fn line(&mut self, key: &str, value: &str) {
        let _ = writeln!(self.text, "{key} {value}");
    }

    /// The text so far.
    pub fn text(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::Perms;

    #[test]
    fn round_trip() {
        let regs = pt_hal::config::TraceConfig::perf_default().to_regs();
        let mut w = SidebandWriter::new(&ClockParams::default(), &regs, 42);
        let maps = vec![
            Mapping {
                start: 0x400000,
                end: 0x401000,
                offset: 0x1000,
                perms: Perms {
                    read: true,
                    exec: true,
                    ..Perms::default()
                },
                path: "/bin/sh".into(),
            },
            Mapping {
                start: 0x7fff0000,
                end: 0x7fff2000,
                offset: 0,
                perms: Perms {
                    read: true,
                    exec: true,
                    ..Perms::default()
                },
                path: "[vdso]".into(),
            },
            Mapping {
                start: 0x500000,
                end: 0x501000,
                offset: 0,
                perms: Perms {
                    read: true,
                    write: true,
                    ..Perms::default()
                },
                path: "/bin/sh".into(),
            },
        ];
        w.image(0, &maps, |s, _| {
            Some(PathBuf::from(format!("/tmp/x.code-{s:x}")))
        });
        w.line("end", "123");
        let sb = Sideband::parse(w.text()).unwrap();
        assert_eq!(sb.param("mtc-freq"), Some("3"));
        assert_eq!(sb.param("pid"), Some("42"));
        assert_eq!(sb.param("end"), Some("123"));
        assert_eq!(sb.images.len(), 1);
        let m = &sb.images[0].maps;
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].file_offset, 0x1000);
        assert_eq!(m[1].path, PathBuf::from("/tmp/x.code-7fff0000"));
        assert_eq!(Sideband::parse("nope"), Err(SidebandError::BadHeader));
        assert!(matches!(
            Sideband::parse("ptsim-sideband 1\nmap 1 2 3 r-xp /x"),
            Err(SidebandError::BadLine { line: 2, .. })
        ));
    }
}
