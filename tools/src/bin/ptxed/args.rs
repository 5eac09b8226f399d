//! ptxed's command line: libipt's ptxed options, in libipt's order and meaning (the
//! side-band options `--sb:*` and `--pevent:*` aside), plus ours (`--perf`,
//! `--threads`). Errors say what is wrong, with the argument or file concerned, on one
//! line, and exit with 1.

use std::io::Write;

use pt_decoder::config::{Config, Cpu, Errata};
use pt_decoder::file::{os_reason, parse_u64, FileError, OptionError, TraceFile};
use pt_decoder::flow::FlowOptions;
use pt_decoder::image::{Image, LoadError};

use super::perf::PerfArgs;
use super::{Options, Stats};
use pt_decoder::pevent::SbOptions;

pub(super) const HELP: &str = "usage: {prog} [<options>]

options:
  --help|-h                            this text.
  --version                            display version information and exit.
  --att                                print instructions in att format.
  --no-inst                            do not print instructions (only addresses).
  --quiet|-q                           do not print anything (except errors).
  --offset                             print the offset into the trace file.
  --time                               print the current timestamp.
  --raw-insn                           print the raw bytes of each instruction.
  --check                              perform checks (expensive).
  --resync-on-error                    resync on decode errors more aggressively (libipt's
                                       way: at the next event with an ip).
  --libipt-resync                      handle decode errors as libipt does: resync at the next
                                       psb (or with --resync-on-error at the next ip), report
                                       neither truncation nor holes. by default decoding
                                       goes on at the nearest psb or ip packet whose address
                                       is known (whole, or completed from the code and
                                       confirmed up to the next psb), says what it skipped,
                                       and reports a trace that ends inside a packet and
                                       holes (runs of zeros).
  --runaway-limit <n>                  end a flow that runs on for <n> instructions without
                                       using trace with an error (default: 2^24 or twice the
                                       code size; 0: never).
  --iscache-limit <size>               set the image section cache limit to <size> bytes.
                                       accepted for compatibility: code is mapped from its
                                       files, there is no section cache to limit.
  --event:time                         print the tsc for events if available.
  --event:ip                           print the ip of events if available.
  --event:tick                         request tick events.
  --event:iflags                       request iflags events.
  --filter:addr<n>_cfg <cfg>           set IA32_RTIT_CTL.ADDRn_CFG to <cfg>.
  --filter:addr<n>_a <base>            set IA32_RTIT_ADDRn_A to <base>.
  --filter:addr<n>_b <limit>           set IA32_RTIT_ADDRn_B to <limit>.
  --stat                               print statistics (even when quiet).
                                       collects all statistics unless one or more are selected.
  --stat:insn                          collect number of instructions.
  --stat:blocks                        collect number of blocks.
  --threads <n>                        with --quiet, decode pieces of the trace between PSBs
                                       on <n> threads (default: one per core; 1: one thread).
                                       the output is the same; not with --check, --event:tick
                                       or block statistics.
  --threads:min-piece <n>              give each thread at least <n> bytes of the trace
                                       (default: 256 KiB).
  --verbose|-v                         print various information (even when quiet): the
                                       segments of the ELF files (--elf) loaded after it.
  --pt <file>[:<from>[-<to>]]          load the processor trace data from <file>.
                                       an optional offset or range can be given.
  --elf <<file>[:<base>]               load an ELF from <file> at address <base>.
                                       use the default load address if <base> is omitted.
  --raw <file>[:<from>[-<to>]]:<base>  load a raw binary from <file> at address <base>.
                                       an optional offset or range can be given.
  --cpu none|f/m[/s]                   set cpu to the given value and decode according to:
                                         none     spec (default)
                                         f/m[/s]  family/model[/stepping]
  --mtc-freq <n>                       set the MTC frequency (IA32_RTIT_CTL[17:14]) to <n>.
  --nom-freq <n>                       set the nominal frequency (MSR_PLATFORM_INFO[15:8]) to <n>.
  --cpuid-0x15.eax                     set the value of cpuid[0x15].eax.
  --cpuid-0x15.ebx                     set the value of cpuid[0x15].ebx.
  --insn-decoder                       use the instruction flow decoder.
  --insn:keep-tcal-on-ovf              preserve timing calibration on overflow.
  --block-decoder                      use the block decoder (default).
  --block:show-blocks                  show blocks in the output.
  --block:end-on-call                  set the end-on-call block decoder flag.
  --block:end-on-jump                  set the end-on-jump block decoder flag.
  --block:keep-tcal-on-ovf             preserve timing calibration on overflow.

You must specify at least one binary or ELF file (--raw|--elf).
You must specify exactly one processor trace file (--pt).
";

/// ptxed's side-band options beyond ptdump's.
const SB_HELP_PTXED: &str =
    "  --sb:switch               print the new image name on context switches.
  --pevent:kernel-start <val> the start address of the kernel.
  --pevent:sysroot <path>   prepend <path> to sideband filenames.
  --pevent:kcore <file>     load the kernel from a core dump.
  --pevent:vdso-x64 <file>  use <file> as 64-bit vdso.
  --pevent:vdso-x32 <file>  use <file> as x32 vdso.
  --pevent:vdso-ia32 <file> use <file> as 32-bit vdso.
";

/// What the command line asked for.
pub(super) struct Setup {
    pub opts: Options,
    pub stats: Stats,
    pub config: Config,
    pub flow: FlowOptions,
    pub image: Image,
    /// The trace (`--pt`); `None` with `--perf`.
    pub trace: Option<TraceFile>,
    /// The perf.data options (`--perf*`).
    pub perf: PerfArgs,
    /// libipt's side-band options (`--sb:*`, `--pevent:*`).
    pub sb: SbOptions,
}

pub(super) enum Parsed {
    Run(Box<Setup>),
    Exit(i32),
}

/// What is wrong with the command line.
#[derive(Debug, thiserror::Error)]
enum ArgError {
    #[error("{0}: missing argument.")]
    Missing(String),
    #[error("{opt}: bad argument: {arg}.")]
    Bad { opt: String, arg: String },
    #[error("{opt}: value too big: {arg}.")]
    TooBig { opt: String, arg: String },
    #[error("{opt}: value too small: {arg} (at least {min}).")]
    TooSmall { opt: String, arg: String, min: u64 },
    #[error("unknown option: {0}.")]
    Unknown(String),
    #[error("no pt file.")]
    NoPt,
    #[error("duplicate pt sources: {0}.")]
    DuplicatePt(String),
    #[error("please specify {0} before the pt source file.")]
    AfterPt(String),
    #[error("--cpu {0}: cpu must be specified as f/m[/s] (family/model[/stepping]).")]
    BadCpu(String),
    #[error("{0}")]
    Trace(FileError),
    #[error("{opt} {arg}: {why}.")]
    Load {
        opt: &'static str,
        arg: String,
        why: String,
    },
    #[error(transparent)]
    Perf(#[from] OptionError),
}

/// Why a file could not be mapped, in words.
fn describe(e: &LoadError) -> String {
    match e {
        LoadError::Io { path, source } => {
            format!("failed to open {}: {}", path.display(), os_reason(source))
        }
        LoadError::BadOffset {
            path, file_size: 0, ..
        } => format!("{} is empty", path.display()),
        LoadError::BadOffset {
            path,
            offset,
            file_size,
        } => format!(
            "bad offset {offset:#x} into {}: the file has {file_size:#x} bytes",
            path.display()
        ),
        LoadError::BadArgument { message, .. } => message.to_string(),
        LoadError::NotElf { .. } => "not an ELF file".to_string(),
        LoadError::BadElf { reason, .. } => format!("bad ELF file: {reason}"),
        e => e.to_string(),
    }
}

/// The parse state: what the options so far set.
struct Parser<'a> {
    prog: &'a str,
    args: &'a [String],
    /// The next argument.
    at: usize,
    opts: Options,
    stats: Stats,
    config: Config,
    flow: FlowOptions,
    keep_tcal: (bool, bool),
    image: Image,
    trace: Option<TraceFile>,
    cpu: Option<Cpu>,
    verbose: bool,
    perf: PerfArgs,
    sb: SbOptions,
}

impl<'a> Parser<'a> {
    /// The value of option `opt` (the next argument).
    fn value(&mut self, opt: &str) -> Result<&'a str, ArgError> {
        let arg = self.args.get(self.at).map(String::as_str);
        self.at += 1;
        match arg {
            Some(a) if !a.is_empty() && !a.starts_with("--") => Ok(a),
            _ => Err(ArgError::Missing(opt.to_string())),
        }
    }

    /// A number (`strtoull(…, 0)`) for option `opt`, at most `max`.
    fn number(&mut self, opt: &str, max: u64) -> Result<u64, ArgError> {
        let a = self.value(opt)?;
        let bad = |a: &str| ArgError::Bad {
            opt: opt.to_string(),
            arg: a.to_string(),
        };
        let v = parse_u64(a).filter(|_| !a.trim_start().starts_with('-'));
        match v {
            None => Err(bad(a)),
            Some(v) if v > max => Err(ArgError::TooBig {
                opt: opt.to_string(),
                arg: a.to_string(),
            }),
            Some(v) => Ok(v),
        }
    }

    fn parse(&mut self, out: &mut impl Write, err: &mut impl Write) -> Result<bool, ArgError> {
        let prog = self.prog;
        while let Some(arg) = self.args.get(self.at) {
            let arg = arg.as_str();
            self.at += 1;
            match arg {
                "--help" | "-h" => {
                    let _ = out.write_all(HELP.replace("{prog}", prog).as_bytes());
                    let _ = out.write_all(b"\nside-band:\n");
                    let _ = out.write_all(pt_decoder::pevent::SB_HELP.as_bytes());
                    let _ = out.write_all(SB_HELP_PTXED.as_bytes());
                    let _ = out.write_all(b"\nperf.data:\n");
                    let _ = out.write_all(super::perf::HELP.as_bytes());
                    return Ok(false);
                }
                "--version" => {
                    let v = env!("CARGO_PKG_VERSION");
                    let _ = writeln!(out, "{prog}-{v} / pt-decoder-{v}");
                    return Ok(false);
                }
                "--pt" => {
                    let file = self.value(arg)?.to_string();
                    if self.trace.is_some() {
                        return Err(ArgError::DuplicatePt(file));
                    }
                    if let Some(c) = self.cpu {
                        match Errata::for_cpu(c) {
                            Ok(e) => self.config.errata = e,
                            Err(_) => {
                                let _ = writeln!(out, "[0, 0: config error: unknown cpu]");
                            }
                        }
                    }
                    self.config.cpu = self.cpu;
                    self.trace = Some(TraceFile::open(&file).map_err(ArgError::Trace)?);
                }
                "--raw" => {
                    let file = self.value(arg)?.to_string();
                    if let Err(e) = self.image.add_raw_arg(&file) {
                        return Err(ArgError::Load {
                            opt: "--raw",
                            arg: file,
                            why: describe(&e),
                        });
                    }
                }
                "--elf" => {
                    let file = self.value(arg)?.to_string();
                    let load = self.image.add_elf_arg(&file).map_err(|e| ArgError::Load {
                        opt: "--elf",
                        arg: file.clone(),
                        why: describe(&e),
                    })?;
                    // libipt's ptxed warns about segments it cannot map and goes on.
                    for (index, e) in &load.skipped {
                        let _ = writeln!(
                            err,
                            "{prog}: warning: {file}: failed to create section for phdr {index}: {}.",
                            describe(e)
                        );
                    }
                    if load.segments.is_empty() {
                        let _ = writeln!(
                            err,
                            "{prog}: warning: {file}: did not find any load sections."
                        );
                    }
                    if self.verbose {
                        let name = file.rsplit_once(':').map_or(file.as_str(), |(name, base)| {
                            if parse_u64(base).is_some() {
                                name
                            } else {
                                &file
                            }
                        });
                        for s in &load.segments {
                            let _ = writeln!(
                                out,
                                "{name}: offset={:#x} size={:#x} vaddr={:#x}.",
                                s.offset, s.size, s.vaddr
                            );
                        }
                    }
                }
                "--att" => self.opts.att = true,
                "--no-inst" => self.opts.no_inst = true,
                "--quiet" | "-q" => self.opts.quiet = true,
                "--offset" => self.opts.print_offset = true,
                "--time" => self.opts.print_time = true,
                "--raw-insn" => self.opts.print_raw_insn = true,
                "--event:time" => self.opts.event_time = true,
                "--event:ip" => self.opts.event_ip = true,
                "--event:tick" => self.flow.tick_events = true,
                "--event:iflags" => self.flow.iflags_events = true,
                "--check" => self.opts.check = true,
                "--resync-on-error" => self.opts.resync_on_error = true,
                "--libipt-resync" => self.opts.libipt_resync = true,
                "--runaway-limit" => self.opts.runaway_limit = Some(self.number(arg, u64::MAX)?),
                "--threads" => {
                    let n = self.number(arg, 1024)?;
                    if n == 0 {
                        return Err(ArgError::TooSmall {
                            opt: arg.to_string(),
                            arg: "0".into(),
                            min: 1,
                        });
                    }
                    self.opts.threads = n;
                }
                "--threads:min-piece" => self.opts.min_piece = self.number(arg, u64::MAX)?,
                "--iscache-limit" => {
                    // Code is mapped from its files: no section cache to limit.
                    self.number(arg, u64::MAX)?;
                }
                "--verbose" | "-v" => self.verbose = true,
                "--stat" => self.opts.print_stats = true,
                "--stat:insn" => {
                    self.opts.print_stats = true;
                    self.stats.want_insn = true;
                }
                "--stat:blocks" => {
                    self.opts.print_stats = true;
                    self.stats.want_blocks = true;
                }
                "--cpu" => {
                    if self.trace.is_some() {
                        return Err(ArgError::AfterPt("cpu".into()));
                    }
                    let c = self.value(arg)?;
                    self.cpu = if c == "none" {
                        None
                    } else {
                        Some(
                            c.parse::<Cpu>()
                                .map_err(|_| ArgError::BadCpu(c.to_string()))?,
                        )
                    };
                }
                "--mtc-freq" => {
                    self.config.mtc_freq = self.number(arg, 0xff)? as u8;
                }
                "--nom-freq" => {
                    self.config.nom_freq = self.number(arg, 0xff)? as u8;
                }
                "--cpuid-0x15.eax" => {
                    self.config.cpuid_0x15_eax = self.number(arg, 0xffff_ffff)? as u32;
                }
                "--cpuid-0x15.ebx" => {
                    self.config.cpuid_0x15_ebx = self.number(arg, 0xffff_ffff)? as u32;
                }
                "--insn-decoder" | "--block-decoder" => {
                    if self.trace.is_some() {
                        return Err(ArgError::AfterPt(arg.to_string()));
                    }
                    self.opts.insn_decoder = arg == "--insn-decoder";
                }
                // Each applies to its own decoder only, as in libipt.
                "--insn:keep-tcal-on-ovf" => self.keep_tcal.0 = true,
                "--block:keep-tcal-on-ovf" => self.keep_tcal.1 = true,
                "--block:show-blocks" => self.opts.show_blocks = true,
                "--block:end-on-call" => self.flow.end_on_call = true,
                "--block:end-on-jump" => self.flow.end_on_jump = true,
                _ if SbOptions::takes(arg).is_some() => {
                    let value = match SbOptions::takes(arg) {
                        Some(true) => Some(self.value(arg)?),
                        _ => None,
                    };
                    self.sb.set(arg, value)?;
                }
                _ if PerfArgs::takes(arg).is_some() => {
                    let value = match PerfArgs::takes(arg) {
                        Some(true) => Some(self.value(arg)?),
                        _ => None,
                    };
                    self.perf.set(arg, value)?;
                }
                _ => {
                    let filter = arg.strip_prefix("--filter:addr").and_then(|rest| {
                        let (n, field) = rest.split_once('_')?;
                        let n: usize = n.parse().ok().filter(|&n| n < 4)?;
                        matches!(field, "cfg" | "a" | "b").then_some((n, field))
                    });
                    let Some((n, field)) = filter else {
                        return Err(ArgError::Unknown(arg.to_string()));
                    };
                    if self.trace.is_some() {
                        return Err(ArgError::AfterPt(arg.to_string()));
                    }
                    match field {
                        "cfg" => self.flow.filter.cfg[n] = self.number(arg, 15)? as u8,
                        "a" => self.flow.filter.a[n] = self.number(arg, u64::MAX)?,
                        _ => self.flow.filter.b[n] = self.number(arg, u64::MAX)?,
                    }
                }
            }
        }
        Ok(true)
    }
}

/// Parses `args` (without the program name); help, version and the `--verbose` output
/// go to `out`, warnings and errors to `err`.
pub(super) fn parse_args(
    prog: &str,
    args: &[String],
    out: &mut impl Write,
    err: &mut impl Write,
) -> Parsed {
    let mut p = Parser {
        prog,
        args,
        at: 0,
        opts: Options::default(),
        stats: Stats::default(),
        config: Config::default(),
        flow: FlowOptions::default(),
        keep_tcal: (false, false),
        image: Image::new(),
        trace: None,
        cpu: None,
        verbose: false,
        perf: PerfArgs::default(),
        sb: SbOptions::default(),
    };
    let done = match p.parse(out, err) {
        Ok(true) => match p.trace.take() {
            Some(t) => Ok(Some(t)),
            None if p.perf.file.is_some() => Ok(None),
            None => Err(ArgError::NoPt),
        },
        Ok(false) => return Parsed::Exit(0),
        Err(e) => Err(e),
    };
    let trace = match done {
        Ok(trace) => trace,
        Err(e) => {
            let _ = writeln!(err, "{prog}: {e}");
            return Parsed::Exit(1);
        }
    };
    let Parser {
        opts,
        mut stats,
        config,
        mut flow,
        keep_tcal,
        image,
        perf,
        sb,
        ..
    } = p;
    if opts.print_stats && !stats.want_insn && !stats.want_blocks {
        stats.want_insn = true;
        stats.want_blocks = !opts.insn_decoder;
    }
    flow.keep_tcal_on_ovf = if opts.insn_decoder {
        keep_tcal.0
    } else {
        keep_tcal.1
    };
    Parsed::Run(Box::new(Setup {
        opts,
        stats,
        config,
        flow,
        image,
        trace,
        perf,
        sb,
    }))
}
