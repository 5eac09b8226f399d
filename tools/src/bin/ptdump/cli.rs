//! ptdump's command line, parsed the way libipt's ptdump parses it: options first (values
//! as separate arguments, numbers like `strtoull(…, 0)`), then one trace file that may
//! carry a `:from[-to]` byte range ([`TraceFile`], which ptxed's `--pt` shares).

use std::io::{self, Write};

use crate::perf::run_perf;
use pt_decoder::config::{Config, Cpu, Errata};
use pt_decoder::dump::perf::{PerfDumpArgs, HELP as PERF_HELP};
use pt_decoder::dump::{dump_with_sideband, write_diag, DumpOptions};
use pt_decoder::error::ErrorCode;
use pt_decoder::file::{parse_u64, TraceFile};
use pt_decoder::pevent::{PeventFile, SbOptions, SbSession, SB_HELP};

/// A parsed command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Args {
    /// What to print.
    pub options: DumpOptions,
    /// Decoder configuration (cpu, timing parameters); errata are filled in by [`run`].
    pub config: Config,
    /// The trace file as given: `<file>[:<from>[-<to>]]` (see [`TraceFile::open`]);
    /// empty with `--perf`.
    pub trace: String,
    /// `--perf*`: dump a perf.data's AUX data instead.
    pub perf: PerfDumpArgs,
    /// `--sb:*`, `--pevent:*`: side-band records to print between the packets.
    pub sb: SbOptions,
}

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Command {
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
pub(crate) struct CliError {
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

/// Parse ptdump's arguments (without the program name).
pub(crate) fn parse_args(args: &[String]) -> Result<Command, CliError> {
    let mut options = DumpOptions::default();
    let mut config = Config::default();
    let mut file = None;
    let mut perf = PerfDumpArgs::default();
    let mut sb = SbOptions::default();
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
            _ if SbOptions::takes(a).is_some() => {
                let value = if SbOptions::takes(a) == Some(true) {
                    idx += 1;
                    Some(arg_value(a, args.get(idx))?)
                } else {
                    None
                };
                sb.set(a, value).map_err(|e| cli_err(e.to_string()))?;
                if sb.any() {
                    // Side-band records are placed by the trace's time.
                    options.track_time = true;
                }
            }
            _ if PerfDumpArgs::takes(a) => {
                idx += 1;
                let v = arg_value(a, args.get(idx))?;
                perf.set(a, v).map_err(|e| cli_err(e.to_string()))?;
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
pub(crate) fn help(prog: &str) -> String {
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
        SB_HELP, PERF_HELP
    )
}

/// Run ptdump with `args` (without the program name); `prog` prefixes error lines.
/// Returns the process exit code.
pub(crate) fn run<O: Write, E: Write>(prog: &str, args: &[String], mut out: O, mut err: E) -> i32 {
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
        return run_perf(
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
        .map(|(f, (_, primary, conf))| PeventFile::new(f.path(), f.bytes(), conf.clone(), *primary))
        .collect();
    let mut session = SbSession::new(&pevents);
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
}
