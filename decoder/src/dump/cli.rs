//! ptdump's command line, parsed the way libipt's ptdump parses it: options first (values
//! as separate arguments, numbers like `strtoull(…, 0)`), then one trace file that may
//! carry a `:from[-to]` byte range.

use std::fs::File;
use std::io::{self, Read, Write};

use super::{dump, write_diag, DumpOptions};
use crate::config::{Config, Cpu, Errata};
use crate::error::ErrorCode;

/// A parsed command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Args {
    /// What to print.
    pub options: DumpOptions,
    /// Decoder configuration (cpu, timing parameters); errata are filled in by [`run`].
    pub config: Config,
    /// The trace file name (range suffix removed).
    pub file: String,
    /// First byte of the range.
    pub offset: u64,
    /// Size of the range; 0 = to the end of the file.
    pub size: u64,
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

/// Split `file:from[-to]`. The suffix after the last `:` is a range only if it parses as
/// one; otherwise the colon belongs to the file name. `to <= from` is an error.
pub fn split_range(arg: &str) -> Result<(String, u64, u64), CliError> {
    let Some(colon) = arg.rfind(':') else {
        return Ok((arg.to_string(), 0, 0));
    };
    let (name, range) = (&arg[..colon], &arg[colon + 1..]);
    if range.is_empty() {
        return Ok((arg.to_string(), 0, 0));
    }
    let (from, to) = match range.split_once('-') {
        // A leading '-' is a sign, not the separator.
        Some((f, t)) if !f.trim_start().is_empty() => (f, Some(t)),
        _ => (range, None),
    };
    let Some(begin) = parse_u64(from) else {
        return Ok((arg.to_string(), 0, 0));
    };
    match to {
        None => Ok((name.to_string(), begin, 0)),
        Some(t) => {
            let Some(end) = parse_u64(t) else {
                return Ok((arg.to_string(), 0, 0));
            };
            if end <= begin {
                // ptdump exits with the error code's number here (pte_invalid).
                return Err(CliError {
                    message: format!("bad file {arg}: {}.", ErrorCode::Invalid.message()),
                    exit_code: 2,
                });
            }
            Ok((name.to_string(), begin, end - begin))
        }
    }
}

/// Parse ptdump's arguments (without the program name).
pub fn parse_args(args: &[String]) -> Result<Command, CliError> {
    let mut options = DumpOptions::default();
    let mut config = Config::default();
    let mut file = None;
    let mut idx = 0;
    while idx < args.len() {
        let a = args[idx].as_str();
        if !a.starts_with('-') {
            if idx + 1 < args.len() {
                return Err(cli_err(
                    "[<options>] <ptfile>.  Use --help or -h for help.".into(),
                ));
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
            _ => return Err(cli_err(format!("unknown option: {a}."))),
        }
        idx += 1;
    }
    let Some(file) = file else {
        return Err(cli_err("No processor trace file specified.".into()));
    };
    let (file, offset, size) = split_range(&file)?;
    Ok(Command::Dump(Box::new(Args {
        options,
        config,
        file,
        offset,
        size,
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
  <ptfile>[:<from>[-<to>]]  the trace file, optionally a byte range of it.\n"
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

/// Open `path`; map it if it is a regular non-empty file, else read it.
pub fn load(path: &str) -> io::Result<Trace> {
    let mut f = File::open(path)?;
    let meta = f.metadata()?;
    if meta.is_file() && meta.len() > 0 {
        // SAFETY: the map is read-only and private to this process; like every reader
        // of a trace file we assume nobody truncates the file while we decode it.
        if let Ok(m) = unsafe { memmap2::Mmap::map(&f) } {
            return Ok(Trace::Mapped(m));
        }
    }
    let mut v = Vec::new();
    f.read_to_end(&mut v)?;
    Ok(Trace::Read(v))
}

/// The byte range of `trace` that `args` selects, or ptdump's message why not.
pub fn select<'t>(trace: &'t [u8], args: &Args) -> Result<&'t [u8], CliError> {
    let len = trace.len() as u64;
    if args.offset >= len {
        return Err(cli_err(format!(
            "bad offset 0x{:x} into {}.",
            args.offset, args.file
        )));
    }
    let mut end = len;
    if args.size != 0 {
        let range_end = args.offset.saturating_add(args.size);
        if range_end > len {
            return Err(cli_err(format!(
                "bad range 0x{range_end:x} in {}.",
                args.file
            )));
        }
        end = range_end;
    }
    Ok(&trace[args.offset as usize..end as usize])
}

/// Run ptdump with `args` (without the program name); `prog` prefixes error lines.
/// Returns the process exit code.
pub fn run<O: Write, E: Write>(prog: &str, args: &[String], mut out: O, mut err: E) -> i32 {
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
    let trace = match load(&args.file) {
        Ok(t) => t,
        Err(e) => {
            let code = e.raw_os_error().unwrap_or(0);
            let _ = writeln!(err, "{prog}: failed to open {}: {code}.", args.file);
            return 1;
        }
    };
    let bytes = match select(trace.bytes(), &args) {
        Ok(b) => b,
        Err(e) => {
            let _ = writeln!(err, "{prog}: {e}");
            return 1;
        }
    };
    match dump(bytes, &args.config, &args.options, &mut out) {
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
        assert_eq!((a.file.as_str(), a.offset, a.size), ("t.pt", 0, 0));
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
        assert!(e("a b").contains("Use --help"));
        assert_eq!(parse_args(&args("--help")), Ok(Command::Help));
        let Command::Dump(a) = parse_args(&args("--cpu 6/94 --cpu none t")).unwrap() else {
            panic!("not a dump")
        };
        assert_eq!(a.config.cpu, None);
    }

    #[test]
    fn file_ranges() {
        assert_eq!(split_range("t.pt").unwrap(), ("t.pt".into(), 0, 0));
        assert_eq!(split_range("t.pt:0x10").unwrap(), ("t.pt".into(), 16, 0));
        assert_eq!(split_range("t.pt:16-32").unwrap(), ("t.pt".into(), 16, 16));
        assert_eq!(split_range("c:t.pt").unwrap(), ("c:t.pt".into(), 0, 0));
        assert_eq!(split_range("t.pt:").unwrap(), ("t.pt:".into(), 0, 0));
        assert!(split_range("t.pt:5-3").is_err());
        let a = Args {
            options: DumpOptions::default(),
            config: Config::default(),
            file: "t".into(),
            offset: 2,
            size: 2,
        };
        assert_eq!(select(&[1, 2, 3, 4, 5], &a).unwrap(), &[3, 4]);
        assert!(select(&[1, 2, 3], &a).is_err());
        assert!(select(
            &[],
            &Args {
                size: 0,
                offset: 0,
                ..a
            }
        )
        .is_err());
    }
}
