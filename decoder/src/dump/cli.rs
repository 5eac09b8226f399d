//! ptdump's command line, parsed the way libipt's ptdump parses it: options first (values
//! as separate arguments, numbers like `strtoull(…, 0)`), then one trace file that may
//! carry a `:from[-to]` byte range ([`TraceFile`], which ptxed's `--pt` shares).

use std::fs::File;
use std::io::{self, Read, Write};
use std::ops::Range;
use std::path::Path;

use super::{dump_with_sideband, write_diag, DumpOptions};
use crate::config::{Config, Cpu, Errata};
use crate::error::ErrorCode;

/// A parsed command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Args {
    /// What to print.
    pub options: DumpOptions,
    /// Decoder configuration (cpu, timing parameters); errata are filled in by [`run`].
    pub config: Config,
    /// The trace file as given: `<file>[:<from>[-<to>]]` (see [`TraceFile::open`]);
    /// empty with `--perf`.
    pub trace: String,
    /// `--perf*`: dump a perf.data's AUX data instead.
    pub perf: super::perf::PerfDumpArgs,
    /// `--sb:*`, `--pevent:*`: side-band records to print between the packets.
    pub sb: crate::pevent::SbOptions,
}

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Dump a trace.
    Dump(Box<Args>),
    /// Print the help text.
    Help,
    /// Print the version.
    Version,
}

/// A command-line problem: the one line to print on stderr (without the program name).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CliError {
    /// The message.
    pub message: String,
    /// The process exit code ptdump uses for it.
    pub exit_code: i32,
}

fn cli_err(message: String) -> CliError {
    CliError {
        message,
        exit_code: 1,
    }
}

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

fn arg_value<'a>(option: &str, arg: Option<&'a String>) -> Result<&'a str, CliError> {
    match arg {
        Some(a) if !a.is_empty() && !a.starts_with("--") => Ok(a),
        _ => Err(cli_err(format!("{option}: missing argument."))),
    }
}

fn arg_uint(option: &str, arg: Option<&String>, max: u64) -> Result<u64, CliError> {
    let a = arg_value(option, arg)?;
    let v = parse_u64(a).ok_or_else(|| cli_err(format!("{option}: bad argument: {a}.")))?;
    if v > max {
        return Err(cli_err(format!("{option}: value too big: {a}.")));
    }
    Ok(v)
}

/// The operating system's reason for `e`, without Rust's ` (os error N)`.
pub fn os_reason(e: &io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(at) if text.ends_with(')') => text[..at].to_string(),
        _ => text,
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

/// Parse ptdump's arguments (without the program name).
pub fn parse_args(args: &[String]) -> Result<Command, CliError> {
    let mut options = DumpOptions::default();
    let mut config = Config::default();
    let mut file = None;
    let mut perf = super::perf::PerfDumpArgs::default();
    let mut sb = crate::pevent::SbOptions::default();
    let mut idx = 0;
    while idx < args.len() {
        let a = args[idx].as_str();
        if !a.starts_with('-') {
            if let Some(extra) = args.get(idx + 1) {
                return Err(cli_err(format!(
                    "{extra}: one trace file, after the options ([<options>] <ptfile>; see --help)."
                )));
            }
            file = Some(a.to_string());
            break;
        }
        match a {
            "-h" | "--help" => return Ok(Command::Help),
            "--version" => return Ok(Command::Version),
            "--no-sync" => options.no_sync = true,
            "--quiet" => options.quiet = true,
            "--no-pad" => options.no_pad = true,
            "--no-timing" => options.no_timing = true,
            "--no-cyc" => options.no_cyc = true,
            "--no-offset" => options.show_offset = false,
            "--raw" => options.show_raw_bytes = true,
            "--lastip" => options.show_last_ip = true,
            "--exec-mode" => options.show_exec_mode = true,
            "--json" => options.json = true,
            "--time" | "--tcal" => {
                let tcal = a == "--tcal";
                if (tcal && options.show_time) || (!tcal && options.show_tcal) {
                    return Err(cli_err("specify either --time or --tcal.".into()));
                }
                options.track_time = true;
                if tcal {
                    options.show_tcal = true;
                } else {
                    options.show_time = true;
                }
            }
            "--time-delta" => options.show_time_as_delta = true,
            "--no-tcal" => options.no_tcal = true,
            "--no-wall-clock" => options.no_wall_clock = true,
            "--keep-tcal-on-ovf" => options.keep_tcal_on_ovf = true,
            "--cpu" => {
                idx += 1;
                let Some(v) = args.get(idx) else {
                    return Err(cli_err("--cpu: missing argument.".into()));
                };
                if v == "none" {
                    config.cpu = None;
                } else {
                    let cpu: Cpu = v
                        .parse()
                        .map_err(|_| cli_err("cpu must be specified as f/m[/s]".into()))?;
                    config.cpu = Some(cpu);
                }
            }
            "--mtc-freq" | "--nom-freq" => {
                idx += 1;
                let v = arg_uint(a, args.get(idx), u8::MAX as u64)? as u8;
                if a == "--mtc-freq" {
                    config.mtc_freq = v;
                } else {
                    config.nom_freq = v;
                }
            }
            "--cpuid-0x15.eax" | "--cpuid-0x15.ebx" => {
                idx += 1;
                let v = arg_uint(a, args.get(idx), u32::MAX as u64)? as u32;
                if a.ends_with("eax") {
                    config.cpuid_0x15_eax = v;
                } else {
                    config.cpuid_0x15_ebx = v;
                }
            }
            _ if crate::pevent::SbOptions::takes(a).is_some() => {
                let value = if crate::pevent::SbOptions::takes(a) == Some(true) {
                    idx += 1;
                    Some(arg_value(a, args.get(idx))?)
                } else {
                    None
                };
                sb.set(a, value).map_err(cli_err)?;
                if sb.any() {
                    // Side-band records are placed by the trace's time.
                    options.track_time = true;
                }
            }
            _ if super::perf::PerfDumpArgs::takes(a) => {
                idx += 1;
                let v = arg_value(a, args.get(idx))?;
                perf.set(a, v).map_err(cli_err)?;
            }
            _ => return Err(cli_err(format!("unknown option: {a}."))),
        }
        idx += 1;
    }
    let trace = match file {
        Some(t) => t,
        None if perf.file.is_some() => String::new(),
        None => return Err(cli_err("No processor trace file specified.".into())),
    };
    Ok(Command::Dump(Box::new(Args {
        options,
        config,
        trace,
        perf,
        sb,
    })))
}

/// The help text.
pub fn help(prog: &str) -> String {
    format!(
        "usage: {prog} [<options>] <ptfile>[:<from>[-<to>]\n\n\
options:\n\
  --help|-h                 print this help and exit.\n\
  --version                 print the version and exit.\n\
  --no-sync                 decode from offset 0 instead of the first PSB.\n\
  --quiet                   print nothing but errors.\n\
  --no-pad                  hide PAD packets.\n\
  --no-timing               hide timing packets.\n\
  --no-cyc                  hide CYC packets and ignore them for timing.\n\
  --no-offset               do not print the offset column.\n\
  --raw                     print the packet bytes.\n\
  --lastip                  print the last IP on packets with an IP payload.\n\
  --exec-mode               print the execution mode on mode.exec packets.\n\
  --time                    print the estimated TSC on timing packets.\n\
  --tcal                    print the time calibration on timing packets.\n\
  --time-delta              print time and calibration as deltas.\n\
  --no-tcal                 do not calibrate (CYC packets then give errors).\n\
  --no-wall-clock           print time relative to the start without a TSC.\n\
  --keep-tcal-on-ovf        keep the time calibration across overflows.\n\
  --json                    print one JSON object per line instead of text.\n\
  --cpu none|f/m[/s]        the cpu (family/model[/stepping]) for errata; none: spec.\n\
  --mtc-freq <n>            IA32_RTIT_CTL.MTCFreq (bits 17:14) of the recording.\n\
  --nom-freq <n>            the nominal core:bus ratio (MSR_PLATFORM_INFO[15:8]).\n\
  --cpuid-0x15.eax <n>      CPUID 0x15 EAX (TSC:crystal ratio denominator).\n\
  --cpuid-0x15.ebx <n>      CPUID 0x15 EBX (TSC:crystal ratio numerator).\n\
  <ptfile>[:<from>[-<to>]]  the trace file, optionally a byte range of it.\n\n\
side-band:\n{}\n\
perf.data:\n{}",
        crate::pevent::SB_HELP,
        super::perf::HELP
    )
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

/// What dumps a perf.data for `--perf` (the arguments, the configuration and options
/// given, stdout, stderr; returns the exit code). This crate reads no perf.data: the
/// ptdump binary passes one over pt-perf's session.
pub type PerfDumper = fn(
    &str,
    &super::perf::PerfDumpArgs,
    &Config,
    &DumpOptions,
    &mut dyn Write,
    &mut dyn Write,
) -> i32;

/// Run ptdump with `args` (without the program name); `prog` prefixes error lines.
/// Returns the process exit code. `--perf` is refused: [`run_with_perf`] takes it.
pub fn run<O: Write, E: Write>(prog: &str, args: &[String], out: O, err: E) -> i32 {
    run_with_perf(prog, args, out, err, None)
}

/// [`run`], with `perf` dumping the perf.data of `--perf`.
pub fn run_with_perf<O: Write, E: Write>(
    prog: &str,
    args: &[String],
    mut out: O,
    mut err: E,
    perf: Option<PerfDumper>,
) -> i32 {
    let mut args = match parse_args(args) {
        Ok(Command::Help) => {
            let _ = out.write_all(help(prog).as_bytes());
            return 0;
        }
        Ok(Command::Version) => {
            let _ = writeln!(out, "{prog} (pt-decoder {})", env!("CARGO_PKG_VERSION"));
            return 0;
        }
        Ok(Command::Dump(a)) => a,
        Err(e) => {
            let _ = writeln!(err, "{prog}: {e}");
            return e.exit_code;
        }
    };
    if let Some(cpu) = args.config.cpu {
        match Errata::for_cpu(cpu) {
            Ok(e) => args.config.errata = e,
            Err(_) => {
                let json = args.options.json;
                let diag = "failed to determine errata";
                if write_diag(&mut out, json, 0, diag, Some(ErrorCode::BadCpu)).is_err() {
                    return 1;
                }
            }
        }
    }
    if args.perf.file.is_some() {
        let Some(perf) = perf else {
            let _ = writeln!(err, "{prog}: --perf: this build reads no perf.data.");
            return 1;
        };
        return perf(
            prog,
            &args.perf,
            &args.config,
            &args.options,
            &mut out,
            &mut err,
        );
    }
    let trace = match TraceFile::open(&args.trace) {
        Ok(t) => t,
        Err(e) => {
            let _ = writeln!(err, "{prog}: {e}");
            return 1;
        }
    };
    let mut sb_files = Vec::new();
    for (arg, _, _) in &args.sb.files {
        match TraceFile::open(arg) {
            Ok(f) => sb_files.push(f),
            Err(e) => {
                let _ = writeln!(err, "{prog}: error loading {arg}: {e}");
                return 1;
            }
        }
    }
    let pevents: Vec<_> = sb_files
        .iter()
        .zip(&args.sb.files)
        .map(|(f, (_, primary, conf))| {
            crate::pevent::PeventFile::new(f.path(), f.bytes(), conf.clone(), *primary)
        })
        .collect();
    let mut session = crate::pevent::SbSession::new(&pevents);
    let sb = (!pevents.is_empty()).then_some((&mut session, args.sb.flags));
    match dump_with_sideband(trace.bytes(), &args.config, &args.options, sb, &mut out) {
        Ok(()) => 0,
        // A closed pipe (e.g. `| head`) ends the dump quietly.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            let _ = writeln!(err, "{prog}: write error: {e}.");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

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
    fn options_with_separate_values() {
        let Command::Dump(a) =
            parse_args(&args("--mtc-freq 4 --nom-freq 0x10 --cpuid-0x15.eax 2 --cpuid-0x15.ebx 1 --cpu 6/94 --time --time-delta --no-offset t.pt"))
                .unwrap()
        else {
            panic!("not a dump")
        };
        assert_eq!(a.config.mtc_freq, 4);
        assert_eq!(a.config.nom_freq, 16);
        assert_eq!((a.config.cpuid_0x15_eax, a.config.cpuid_0x15_ebx), (2, 1));
        assert_eq!(a.config.cpu, Some("6/94".parse().unwrap()));
        assert!(a.options.show_time && a.options.track_time && a.options.show_time_as_delta);
        assert!(!a.options.show_offset);
        assert_eq!(a.trace, "t.pt");
    }

    #[test]
    fn argument_errors() {
        let e = |s: &str| parse_args(&args(s)).unwrap_err().message;
        assert_eq!(e("--time --tcal t"), "specify either --time or --tcal.");
        assert_eq!(e("--mtc-freq"), "--mtc-freq: missing argument.");
        assert_eq!(e("--mtc-freq --raw t"), "--mtc-freq: missing argument.");
        assert_eq!(e("--mtc-freq 256 t"), "--mtc-freq: value too big: 256.");
        assert_eq!(e("--nom-freq x t"), "--nom-freq: bad argument: x.");
        assert_eq!(e("--bogus t"), "unknown option: --bogus.");
        assert_eq!(e("--cpu 6 t"), "cpu must be specified as f/m[/s]");
        assert_eq!(e("--raw"), "No processor trace file specified.");
        assert!(e("a b").starts_with("b: one trace file"));
        assert_eq!(parse_args(&args("--help")), Ok(Command::Help));
        let Command::Dump(a) = parse_args(&args("--cpu 6/94 --cpu none t")).unwrap() else {
            panic!("not a dump")
        };
        assert_eq!(a.config.cpu, None);
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
