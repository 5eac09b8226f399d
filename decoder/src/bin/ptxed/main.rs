//! ptxed: reconstruct the executed instructions from an Intel PT trace and the code
//! image, compatible with libipt's ptxed (options and output).

use pt_decoder::config::{Config, Cpu, Errata};
use pt_decoder::driver::{BlockItem, Decoder, FlowErrorKind, Granularity, Item, Resync};
use pt_decoder::dump::cli::{load, Trace};
use pt_decoder::error::ErrorCode;
use pt_decoder::event::{Event, EventKind};
use pt_decoder::flow::{Block, FlowOptions, InsnInfo};
use pt_decoder::image::{Image, LoadError};
use pt_decoder::insn::{self, Disassembler};
use pt_decoder::sideband::{Explicit, Sideband, SidebandError};
use pt_encoder::ExecMode;
use std::io::{self, Write};

#[derive(Clone, Copy, Debug, Default)]
struct Options {
    no_inst: bool,
    quiet: bool,
    print_stats: bool,
    show_blocks: bool,
    print_offset: bool,
    print_time: bool,
    print_raw_insn: bool,
    check: bool,
    event_time: bool,
    event_ip: bool,
    resync_on_error: bool,
    insn_decoder: bool,
    /// Threads for `--quiet` decoding (0: one per core).
    threads: u64,
    /// The smallest piece of the trace worth a thread of its own.
    min_piece: u64,
}

#[derive(Clone, Copy, Debug, Default)]
/// The statistics asked for (`--stat`).
struct Stats {
    want_insn: bool,
    want_blocks: bool,
}

const HELP: &str = "usage: {prog} [<options>]

options:
  --help|-h                            this text.
  --version                            display version information and exit.
  --no-inst                            do not print instructions (only addresses).
  --quiet|-q                           do not print anything (except errors).
  --offset                             print the offset into the trace file.
  --time                               print the current timestamp.
  --raw-insn                           print the raw bytes of each instruction.
  --check                              perform checks (expensive).
  --resync-on-error                    resync on decode errors more aggressively.
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
  --pt <file>[:<from>[-<to>]]          load the processor trace data from <file>.
                                       an optional offset or range can be given.
  --elf <<file>[:<base>]               load an ELF from <file> at address <base>.
                                       use the default load address if <base> is omitted.
  --raw <file>[:<from>[-<to>]]:<base>  load a raw binary from <file> at address <base>.
                                       an optional offset or range can be given.
  --sideband <file>                    load the code image and the recording parameters (cpu,
                                       mtc-freq, nom-freq, cpuid-0x15) from the side-band file
                                       of a trace recorded on the PT simulator (ptrec);
                                       explicit options win over its parameters.
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

/// strtoull(…, 0): 0x hex, leading-0 octal, else decimal; the whole string.
fn parse_u64(s: &str) -> Option<u64> {
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else if s.len() > 1 && s.starts_with('0') {
        u64::from_str_radix(&s[1..], 8).ok()
    } else {
        s.parse().ok()
    }
}

/// Splits `file[:from[-to]]` into the file name and the byte range.
fn split_range(arg: &str) -> Result<(&str, u64, Option<u64>), ()> {
    let Some((name, range)) = arg.rsplit_once(':') else {
        return Ok((arg, 0, None));
    };
    match range.split_once('-') {
        None => match parse_u64(range) {
            Some(from) => Ok((name, from, None)),
            None => Ok((arg, 0, None)),
        },
        Some((a, b)) => match (parse_u64(a), parse_u64(b)) {
            (Some(from), Some(to)) if to > from => Ok((name, from, Some(to))),
            (Some(_), Some(_)) => Err(()),
            _ => Ok((arg, 0, None)),
        },
    }
}

/// What the command line asked for.
struct Setup {
    opts: Options,
    stats: Stats,
    config: Config,
    flow: FlowOptions,
    image: Image,
    trace: TraceFile,
}

enum Parsed {
    Run(Box<Setup>),
    Exit(i32),
}

/// The trace file (mapped where possible) and the range of it to decode.
struct TraceFile {
    file: Trace,
    range: std::ops::Range<usize>,
}

impl TraceFile {
    fn bytes(&self) -> &[u8] {
        self.file
            .bytes()
            .get(self.range.clone())
            .unwrap_or_default()
    }
}

fn load_pt(prog: &str, arg: &str, err: &mut impl Write) -> Result<TraceFile, ()> {
    let Ok((name, from, to)) = split_range(arg) else {
        let _ = writeln!(err, "{prog}: bad file {arg}: invalid argument.");
        return Err(());
    };
    let data = match load(name) {
        Ok(d) => d,
        Err(e) => {
            let _ = writeln!(
                err,
                "{prog}: failed to open {name}: {}.",
                e.raw_os_error().unwrap_or(0)
            );
            return Err(());
        }
    };
    let len = data.bytes().len() as u64;
    if from >= len {
        let _ = writeln!(err, "{prog}: bad offset 0x{from:x} into {name}.");
        return Err(());
    }
    let end = match to {
        Some(to) if to > len => {
            let _ = writeln!(err, "{prog}: bad range 0x{to:x} in {name}.");
            return Err(());
        }
        Some(to) => to,
        None => len,
    };
    Ok(TraceFile {
        file: data,
        range: from as usize..end as usize,
    })
}

fn parse_args(prog: &str, args: &[String], out: &mut impl Write, err: &mut impl Write) -> Parsed {
    let mut opts = Options::default();
    let mut stats = Stats::default();
    let mut config = Config::default();
    let mut flow = FlowOptions::default();
    let (mut keep_tcal_insn, mut keep_tcal_block) = (false, false);
    let mut image = Image::new();
    let mut trace: Option<TraceFile> = None;
    let mut cpu: Option<Cpu> = None;
    let mut explicit = Explicit::default();
    let mut sideband: Option<Sideband> = None;
    let mut i = 0;
    macro_rules! fail {
        ($($t:tt)*) => {{
            let _ = writeln!(err, $($t)*);
            return Parsed::Exit(1);
        }};
    }
    macro_rules! value {
        ($opt:expr, $max:expr) => {{
            let arg = args.get(i).map(String::as_str);
            i += 1;
            match arg {
                None | Some("") => fail!("{prog}: {}: missing argument.", $opt),
                Some(a) if a.starts_with("--") => fail!("{prog}: {}: missing argument.", $opt),
                Some(a) => match parse_u64(a) {
                    None => fail!("{prog}: {}: bad argument: {a}.", $opt),
                    Some(v) if v > $max => fail!("{prog}: {}: value too big: {a}.", $opt),
                    Some(v) => v,
                },
            }
        }};
    }
    while i < args.len() {
        let arg = args[i].as_str();
        i += 1;
        match arg {
            "--help" | "-h" => {
                let _ = out.write_all(HELP.replace("{prog}", prog).as_bytes());
                return Parsed::Exit(0);
            }
            "--version" => {
                let v = env!("CARGO_PKG_VERSION");
                let _ = writeln!(out, "{prog}-{v} / pt-decoder-{v}");
                return Parsed::Exit(0);
            }
            "--pt" => {
                let Some(file) = args.get(i) else {
                    let _ = writeln!(err, "{prog}: --pt: missing argument.");
                    return Parsed::Exit(0);
                };
                i += 1;
                if trace.is_some() {
                    fail!("{prog}: duplicate pt sources: {file}.");
                }
                if let Some(c) = cpu {
                    match Errata::for_cpu(c) {
                        Ok(e) => config.errata = e,
                        Err(_) => {
                            let _ = writeln!(out, "[0, 0: config error: unknown cpu]");
                        }
                    }
                }
                config.cpu = cpu;
                match load_pt(prog, file, err) {
                    Ok(t) => trace = Some(t),
                    Err(()) => return Parsed::Exit(1),
                }
            }
            "--raw" | "--elf" => {
                let Some(file) = args.get(i) else {
                    let _ = writeln!(err, "{prog}: {arg}: missing argument.");
                    return Parsed::Exit(0);
                };
                i += 1;
                let r = if arg == "--raw" {
                    image.add_raw_arg(file).map(|_| ())
                } else {
                    image.add_elf_arg(file).map(|_| ())
                };
                if let Err(e) = r {
                    // libipt names the file without its range and load address.
                    let (rest, base) = match file.rsplit_once(':') {
                        Some((rest, base)) if parse_u64(base).is_some() => {
                            (rest, parse_u64(base).unwrap_or(0))
                        }
                        _ => (file.as_str(), 0),
                    };
                    let name = split_range(rest).map_or(rest, |(name, _, _)| name);
                    if arg == "--raw" && !matches!(e, LoadError::BadArgument { .. }) {
                        let _ = writeln!(
                            err,
                            "{prog}: failed to add {name} at 0x{base:x}: {}.",
                            e.code().message()
                        );
                    } else {
                        let _ = writeln!(err, "{prog}: {e}.");
                    }
                    fail!("{prog}: {arg}: failed to load '{name}'.");
                }
            }
            "--sideband" => {
                let Some(file) = args.get(i) else {
                    fail!("{prog}: --sideband: missing argument.");
                };
                i += 1;
                if sideband.is_some() {
                    fail!("{prog}: duplicate side-band files: {file}.");
                }
                let sb = match Sideband::read(std::path::Path::new(file)) {
                    Ok(sb) => sb,
                    // An I/O error names the file itself.
                    Err(e @ SidebandError::Io { .. }) => fail!("{prog}: {e}."),
                    Err(e) => fail!("{prog}: {file}: {e}."),
                };
                if let Err(e) = sb.load(&mut image) {
                    fail!("{prog}: {file}: {e}.");
                }
                sideband = Some(sb);
            }
            // AT&T syntax is not offered; accept the flag and print Intel syntax.
            "--att" => {}
            "--no-inst" => opts.no_inst = true,
            "--quiet" | "-q" => opts.quiet = true,
            "--offset" => opts.print_offset = true,
            "--time" => opts.print_time = true,
            "--raw-insn" => opts.print_raw_insn = true,
            "--event:time" => opts.event_time = true,
            "--event:ip" => opts.event_ip = true,
            "--event:tick" => flow.tick_events = true,
            "--event:iflags" => flow.iflags_events = true,
            "--check" => opts.check = true,
            "--resync-on-error" => opts.resync_on_error = true,
            "--threads" => opts.threads = value!("--threads", 1024).max(1),
            "--threads:min-piece" => opts.min_piece = value!("--threads:min-piece", u64::MAX),
            "--iscache-limit" => {
                value!(arg, u64::MAX);
            }
            "--verbose" | "-v" => {}
            "--stat" => opts.print_stats = true,
            "--stat:insn" => {
                opts.print_stats = true;
                stats.want_insn = true;
            }
            "--stat:blocks" => {
                opts.print_stats = true;
                stats.want_blocks = true;
            }
            "--cpu" => {
                if trace.is_some() {
                    fail!("{prog}: please specify cpu before the pt source file.");
                }
                let Some(c) = args.get(i) else {
                    let _ = writeln!(err, "{prog}: --cpu: missing argument.");
                    return Parsed::Exit(0);
                };
                i += 1;
                explicit.cpu = true;
                if c == "none" {
                    cpu = None;
                } else {
                    match c.parse::<Cpu>() {
                        Ok(c) => cpu = Some(c),
                        Err(_) => fail!("{prog}: cpu must be specified as f/m[/s]"),
                    }
                }
            }
            "--mtc-freq" => {
                config.mtc_freq = value!("--mtc-freq", 0xff) as u8;
                explicit.mtc_freq = true;
            }
            "--nom-freq" => {
                config.nom_freq = value!("--nom-freq", 0xff) as u8;
                explicit.nom_freq = true;
            }
            "--cpuid-0x15.eax" => {
                config.cpuid_0x15_eax = value!("--cpuid-0x15.eax", 0xffff_ffff) as u32;
                explicit.cpuid_0x15_eax = true;
            }
            "--cpuid-0x15.ebx" => {
                config.cpuid_0x15_ebx = value!("--cpuid-0x15.ebx", 0xffff_ffff) as u32;
                explicit.cpuid_0x15_ebx = true;
            }
            "--insn-decoder" | "--block-decoder" => {
                if trace.is_some() {
                    fail!("{arg}: please specify {prog} before the pt source file.");
                }
                opts.insn_decoder = arg == "--insn-decoder";
            }
            // Each applies to its own decoder only, as in libipt.
            "--insn:keep-tcal-on-ovf" => keep_tcal_insn = true,
            "--block:keep-tcal-on-ovf" => keep_tcal_block = true,
            "--block:show-blocks" => opts.show_blocks = true,
            "--block:end-on-call" => flow.end_on_call = true,
            "--block:end-on-jump" => flow.end_on_jump = true,
            _ => {
                let filter = arg.strip_prefix("--filter:addr").and_then(|rest| {
                    let (n, field) = rest.split_once('_')?;
                    let n: usize = n.parse().ok().filter(|&n| n < 4)?;
                    matches!(field, "cfg" | "a" | "b").then_some((n, field))
                });
                let Some((n, field)) = filter else {
                    fail!("{prog}: unknown option: {arg}.");
                };
                if trace.is_some() {
                    fail!("{prog}: please specify {arg} before --pt.");
                }
                match field {
                    "cfg" => flow.filter.cfg[n] = value!(arg, 15) as u8,
                    "a" => flow.filter.a[n] = value!(arg, u64::MAX),
                    _ => flow.filter.b[n] = value!(arg, u64::MAX),
                }
            }
        }
    }
    let Some(trace) = trace else {
        fail!("{prog}: no pt file.");
    };
    if let Some(sb) = &sideband {
        if sb.configure(&mut config, explicit).is_err() {
            let _ = writeln!(out, "[0, 0: config error: unknown cpu]");
        }
    }
    if opts.print_stats && !stats.want_insn && !stats.want_blocks {
        stats.want_insn = true;
        stats.want_blocks = !opts.insn_decoder;
    }
    flow.keep_tcal_on_ovf = if opts.insn_decoder {
        keep_tcal_insn
    } else {
        keep_tcal_block
    };
    Parsed::Run(Box::new(Setup {
        opts,
        stats,
        config,
        flow,
        image,
        trace,
    }))
}

/// `v` as 16 lower-case hex digits (`%016x`), without the formatting machinery.
fn hex16(v: u64) -> [u8; 16] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 16];
    for (i, d) in out.iter_mut().enumerate() {
        *d = DIGITS[((v >> (60 - 4 * i)) & 0xf) as usize];
    }
    out
}

/// Output with a reusable line buffer.
struct Printer<'a, W: Write> {
    out: W,
    opts: Options,
    image: &'a Image,
    dis: Disassembler,
    text: String,
}

fn mode_name(mode: ExecMode) -> &'static str {
    match mode {
        ExecMode::Bit16 => "16-bit",
        ExecMode::Bit32 => "32-bit",
        ExecMode::Bit64 => "64-bit",
        ExecMode::Unknown => "<unknown>",
    }
}

/// Brings the disassembler's text closer to XED's as ptxed prints it: XED ends an
/// instruction without operands with a blank and writes far memory operands as
/// `far ptr [...]`.
fn xed_style(text: &mut String, bytes: &[u8], ip: u64, mode: ExecMode) {
    for size in ["far fword ptr ", "far dword ptr ", "far tbyte ptr "] {
        if let Some(at) = text.find(size) {
            text.replace_range(at..at + size.len(), "far ptr ");
        }
    }
    if let Some(rest) = text.strip_prefix("data64 ") {
        *text = rest.to_string();
    }
    // XED shows the hint NOPs 0F 18 and 0F 1F with their r/m operand only.
    if text.starts_with("nop ") && is_nop_0f18_0f1f(bytes) {
        if let Some(at) = text.rfind(", ") {
            text.truncate(at);
        }
    }
    // `imul r, r/m, imm` with r/m = r: XED names the register twice.
    if let Some(ops) = text.strip_prefix("imul ") {
        if let Some((reg, imm)) = ops.split_once(", ") {
            let is_imm = imm.starts_with("0x") || imm.starts_with('-');
            if is_imm && !reg.contains(' ') && !imm.contains(", ") {
                *text = format!("imul {reg}, {reg}, {imm}");
            }
        }
    }
    if text.contains(' ') && text != "ret far" {
        return;
    }
    // XED lists implicit operands too (suppressed in the text, but followed by the
    // separator blank): only instructions without any operand end without one.
    let bitness = mode.bits().unwrap_or(64);
    let mut decoder =
        iced_x86::Decoder::with_ip(bitness, bytes, ip, iced_x86::DecoderOptions::NONE);
    let instr = decoder.decode();
    let mut factory = iced_x86::InstructionInfoFactory::new();
    let info = factory.info(&instr);
    let implicit = !info.used_registers().is_empty()
        || !info.used_memory().is_empty()
        || instr.rflags_read() != 0
        || instr.rflags_written() != 0
        || instr.rflags_cleared() != 0
        || instr.rflags_set() != 0
        || instr.rflags_undefined() != 0
        || instr.flow_control() != iced_x86::FlowControl::Next;
    if implicit {
        text.push(' ');
    }
}

/// Whether `bytes` start with opcode 0F 18 or 0F 1F (after prefixes and REX).
fn is_nop_0f18_0f1f(bytes: &[u8]) -> bool {
    let at = bytes
        .iter()
        .take_while(|&&b| {
            matches!(
                b,
                0x66 | 0x67 | 0x2e | 0x3e | 0x26 | 0x36 | 0x64 | 0x65 | 0xf2 | 0xf3 | 0x40..=0x4f
            )
        })
        .count();
    matches!(bytes.get(at..at + 2), Some([0x0f, 0x18 | 0x1f]))
}

impl<W: Write> Printer<'_, W> {
    fn ip_field(&mut self, key: &str, ip: u64) -> io::Result<()> {
        if self.opts.event_ip {
            write!(self.out, ", {key}: {ip:016x}")?;
        }
        Ok(())
    }

    fn event(&mut self, ev: &Event, offset: u64) -> io::Result<()> {
        use EventKind::*;
        let o = &mut self.out;
        o.write_all(b"[")?;
        if self.opts.print_offset {
            write!(o, "{offset:016x}  ")?;
        }
        if self.opts.event_time {
            if let Some(tsc) = ev.time.tsc {
                write!(o, "{tsc:016x}  ")?;
            }
        }
        let sup = ev.ip_suppressed;
        // `, ip: …` unless the IP is suppressed.
        let mut ip_opt: Option<u64> = None;
        match ev.kind {
            Enabled { ip, resumed } => {
                o.write_all(if resumed { b"resumed" } else { b"enabled" })?;
                ip_opt = Some(ip);
                if sup {
                    // ptxed prints the enabled IP regardless.
                }
            }
            Disabled { ip } => {
                o.write_all(b"disabled")?;
                ip_opt = (!sup).then_some(ip);
            }
            AsyncDisabled { at, ip } => {
                o.write_all(b"disabled")?;
                self.ip_field("at", at)?;
                ip_opt = (!sup).then_some(ip);
            }
            AsyncBranch { from, to } => {
                o.write_all(b"interrupt")?;
                self.ip_field("from", from)?;
                if !sup {
                    self.ip_field("to", to)?;
                }
            }
            Paging { cr3, non_root } => {
                write!(
                    o,
                    "paging, cr3: {cr3:016x}{}",
                    if non_root { ", nr" } else { "" }
                )?;
            }
            AsyncPaging { cr3, non_root, ip } => {
                write!(
                    o,
                    "paging, cr3: {cr3:016x}{}",
                    if non_root { ", nr" } else { "" }
                )?;
                ip_opt = Some(ip);
            }
            Overflow { ip } => {
                o.write_all(b"overflow")?;
                ip_opt = (!sup).then_some(ip);
            }
            ExecMode { mode, ip } => {
                write!(o, "exec mode: {}", mode_name(mode))?;
                ip_opt = (!sup).then_some(ip);
            }
            Tsx {
                ip,
                speculative,
                aborted,
            } => {
                o.write_all(if aborted {
                    b"aborted" as &[u8]
                } else if speculative {
                    b"begin transaction"
                } else {
                    b"committed"
                })?;
                ip_opt = (!sup).then_some(ip);
            }
            Stop => o.write_all(b"stopped")?,
            Vmcs { base } => write!(o, "vmcs, base: {base:016x}")?,
            AsyncVmcs { base, ip } => {
                write!(o, "vmcs, base: {base:016x}")?;
                ip_opt = Some(ip);
            }
            Exstop { ip } => {
                o.write_all(b"exstop")?;
                ip_opt = (!sup).then_some(ip);
            }
            Mwait { ip, hints, ext } => {
                write!(o, "mwait {hints:x} {ext:x}")?;
                ip_opt = (!sup).then_some(ip);
            }
            Pwre {
                state,
                sub_state,
                hw,
            } => {
                write!(
                    o,
                    "pwre c{}.{}{}",
                    (state.wrapping_add(1)) & 0xf,
                    (sub_state.wrapping_add(1)) & 0xf,
                    if hw { " hw" } else { "" }
                )?;
            }
            Pwrx {
                last,
                deepest,
                interrupt,
                store,
                autonomous,
            } => {
                o.write_all(b"pwrx ")?;
                if interrupt {
                    o.write_all(b"int: ")?;
                }
                if store {
                    o.write_all(b"st: ")?;
                }
                if autonomous {
                    o.write_all(b"hw: ")?;
                }
                write!(
                    o,
                    "c{} (c{})",
                    last.wrapping_add(1) & 0xf,
                    deepest.wrapping_add(1) & 0xf
                )?;
            }
            Ptwrite { ip, payload, .. } => {
                write!(o, "ptwrite: {payload:x}")?;
                ip_opt = (!sup).then_some(ip);
            }
            Tick { ip } => {
                o.write_all(b"tick")?;
                ip_opt = (!sup).then_some(ip);
            }
            Cbr { ratio } => write!(o, "cbr: {ratio:x}")?,
            Mnt { payload } => write!(o, "mnt: {payload:x}")?,
            Tip { ip } => write!(o, "tip: {ip:x}")?,
            Tnt { bits, size } => {
                o.write_all(b"tnt: ")?;
                for i in (0..size).rev() {
                    o.write_all(if (bits >> i) & 1 != 0 { b"!" } else { b"." })?;
                }
            }
            Iflags { iflag, ip } => {
                write!(
                    o,
                    "interrupts {}",
                    if iflag { "enabled" } else { "disabled" }
                )?;
                ip_opt = (!sup).then_some(ip);
            }
            Interrupt { vector, cr2, ip } => {
                write!(o, "interrupt {vector}")?;
                if let Some(cr2) = cr2 {
                    write!(o, ", cr2: {cr2:016x}")?;
                }
                ip_opt = (!sup).then_some(ip);
            }
            Iret { ip } => {
                o.write_all(b"iret")?;
                ip_opt = (!sup).then_some(ip);
            }
            Smi { ip } => {
                o.write_all(b"smi")?;
                ip_opt = (!sup).then_some(ip);
            }
            Rsm { ip } => {
                o.write_all(b"rsm")?;
                ip_opt = (!sup).then_some(ip);
            }
            Sipi { vector } => write!(o, "sipi: {vector:x}")?,
            Init { ip } => {
                o.write_all(b"init")?;
                ip_opt = (!sup).then_some(ip);
            }
            Vmentry { ip } => {
                o.write_all(b"vmentry")?;
                ip_opt = (!sup).then_some(ip);
            }
            Vmexit {
                vector,
                vmxr,
                vmxq,
                ip,
            } => {
                o.write_all(b"vmexit")?;
                if let Some(v) = vector {
                    write!(o, ", intr: {v}")?;
                }
                if let Some(v) = vmxr {
                    write!(o, ", vmxr: {v:016x}")?;
                }
                if let Some(v) = vmxq {
                    write!(o, ", vmxq: {v:016x}")?;
                }
                ip_opt = (!sup).then_some(ip);
            }
            Shutdown { ip } => {
                o.write_all(b"shutdown")?;
                ip_opt = (!sup).then_some(ip);
            }
            Uintr { vector, ip } => {
                write!(o, "uintr {vector}")?;
                ip_opt = (!sup).then_some(ip);
            }
            Uiret { ip } => {
                o.write_all(b"uiret")?;
                ip_opt = (!sup).then_some(ip);
            }
            Trig {
                trbv,
                icnt,
                ip,
                mult,
            } => {
                write!(o, "trig {trbv:02x}")?;
                if mult {
                    o.write_all(b", mult")?;
                }
                if !sup {
                    self.ip_field("ip", ip)?;
                }
                if icnt != 0 {
                    write!(self.out, ", icnt: {icnt}")?;
                }
            }
            Swintr { vector, ip } => {
                write!(o, "swintr {vector}")?;
                ip_opt = (!sup).then_some(ip);
            }
            Syscall { ip } => {
                o.write_all(b"syscall")?;
                ip_opt = (!sup).then_some(ip);
            }
            _ => o.write_all(b"<unknown event>")?,
        }
        if let Some(ip) = ip_opt {
            self.ip_field("ip", ip)?;
        }
        self.out.write_all(b"]\n")
    }

    /// One instruction line (without the newline); `false` if the instruction could
    /// not be read.
    fn insn_line(
        &mut self,
        ip: u64,
        mode: ExecMode,
        speculative: bool,
        offset: u64,
        time: u64,
    ) -> io::Result<Option<usize>> {
        let o = &mut self.out;
        if self.opts.print_offset {
            write!(o, "{offset:016x}  ")?;
        }
        if self.opts.print_time {
            write!(o, "{time:016x}  ")?;
        }
        if speculative {
            o.write_all(b"? ")?;
        }
        o.write_all(&hex16(ip))?;
        if self.opts.no_inst && !self.opts.print_raw_insn {
            return Ok(Some(0));
        }
        let mut raw = [0u8; 15];
        let n = match self.image.read(ip, &mut raw) {
            Ok(n) => n,
            Err(e) => {
                write!(self.out, " [fetch error: {}]", e.code.message())?;
                return Ok(None);
            }
        };
        self.text.clear();
        match self.dis.format(&raw[..n], ip, mode, &mut self.text) {
            Ok(len) => {
                if self.opts.print_raw_insn {
                    for b in &raw[..len.min(n)] {
                        write!(self.out, " {b:02x}")?;
                    }
                    for _ in len.min(n)..15 {
                        self.out.write_all(b"   ")?;
                    }
                }
                if !self.opts.no_inst {
                    xed_style(&mut self.text, &raw[..n], ip, mode);
                    write!(self.out, "  {}", self.text)?;
                }
                Ok(Some(len))
            }
            Err(_) => {
                for b in &raw[..n] {
                    write!(self.out, " {b:02x}")?;
                }
                for _ in n..15 {
                    self.out.write_all(b"   ")?;
                }
                self.out
                    .write_all(b" [xed decode error: (1) BUFFER_TOO_SHORT]")?;
                Ok(None)
            }
        }
    }

    fn diagnose(&mut self, offset: Result<u64, ErrorCode>, ip: u64, kind: &str, code: ErrorCode) {
        let _ = match offset {
            Ok(pos) => writeln!(self.out, "[{pos:x}, {ip:x}: {kind}: {}]", code.message()),
            Err(e) => writeln!(
                self.out,
                "could not determine offset: {}\n[?, {ip:x}: {kind}: {}]",
                e.message(),
                code.message()
            ),
        };
    }
}

/// A block's instructions (and its `[block]` line), as ptxed prints them; `blocks`:
/// the blocks so far, this one included.
fn print_block<W: Write>(
    p: &mut Printer<'_, W>,
    dec: &mut Decoder<'_>,
    b: &BlockItem,
    blocks: u64,
    offset: u64,
    time: u64,
) {
    let block = &b.block;
    if p.opts.show_blocks {
        if p.opts.print_stats {
            let _ = writeln!(p.out, "[block {blocks:x}]");
        } else {
            let _ = p.out.write_all(b"[block]\n");
        }
    }
    let Some(ips) = dec.block_ips() else {
        return;
    };
    for &ip in ips.ips {
        let line = p.insn_line(ip, block.mode, block.speculative, offset, time);
        let _ = p.out.write_all(b"\n");
        if !matches!(line, Ok(Some(_))) {
            return;
        }
    }
    if let Some(e) = ips.error {
        p.diagnose(Ok(offset), e.ip, "reconstruct error", e.code);
    }
}

/// `--check`: decode the block's instructions again, independently of the flow
/// decoder, and say where they disagree with it (ptxed's checks, with our own
/// instruction classification in place of XED's).
fn check_block<W: Write>(p: &mut Printer<'_, W>, block: &Block, offset: u64) {
    if block.ninsn == 0 {
        return;
    }
    if block.isid == 0 {
        let _ = writeln!(p.out, "[{offset:x}, {:x}: check error: bad isid]", block.ip);
    }
    let mut ip = block.ip;
    let mut last = None;
    for _ in 0..block.ninsn {
        match insn::decode_at(p.image, ip, block.mode) {
            Ok(d) => {
                last = Some(d);
                ip = d.target.unwrap_or_else(|| d.next_ip());
            }
            Err(e) => {
                let _ = writeln!(
                    p.out,
                    "[{offset:x}, {ip:x}: fetch error: {}]",
                    e.code.message()
                );
                return;
            }
        }
    }
    let Some(last) = last else {
        return;
    };
    if last.ip != block.end_ip {
        let _ = writeln!(
            p.out,
            "[{offset:x}, {:x}: error: did not reach end: {:x}]",
            last.ip, block.end_ip
        );
    }
    if let Some(class) = block.class {
        if class != last.class {
            let _ = writeln!(
                p.out,
                "[{offset:x}, {:x}: iclass error: iclass: {class:?}, decoded: {:?}]",
                last.ip, last.class
            );
        }
    }
}

/// `--check` for one instruction of the instruction decoder.
fn check_insn<W: Write>(p: &mut Printer<'_, W>, insn: &InsnInfo, offset: u64) {
    if insn.isid == 0 {
        let _ = writeln!(p.out, "[{offset:x}, {:x}: check error: bad isid]", insn.ip);
    }
    match insn::decode_at(p.image, insn.ip, insn.mode) {
        Ok(d) if Some(d.class) != insn.class && insn.class.is_some() => {
            let _ = writeln!(
                p.out,
                "[{offset:x}, {:x}: iclass error: iclass: {:?}, decoded: {:?}]",
                insn.ip, insn.class, d.class
            );
        }
        Ok(_) => {}
        Err(e) => {
            let _ = writeln!(
                p.out,
                "[{offset:x}, {:x}: xed error: {}]",
                insn.ip,
                e.code.message()
            );
        }
    }
}

/// The line ptxed prints for an error of `kind`.
fn error_label(kind: FlowErrorKind) -> &'static str {
    match kind {
        FlowErrorKind::Sync => "sync error",
        FlowErrorKind::Decode => "error",
        FlowErrorKind::Resync => "resync error",
    }
}

fn run(prog: &str, args: &[String]) -> i32 {
    let mut out = io::BufWriter::with_capacity(1 << 16, pt_cli::stdout());
    // Not held while decoding: threads of a parallel decode would wait on it forever.
    let parsed = parse_args(prog, args, &mut out, &mut io::stderr().lock());
    let setup = match parsed {
        Parsed::Exit(code) => {
            let _ = out.flush();
            return code;
        }
        Parsed::Run(s) => s,
    };
    let stats = setup.stats;
    let mut p = Printer {
        out,
        opts: setup.opts,
        image: &setup.image,
        dis: Disassembler::new(),
        text: String::with_capacity(128),
    };
    let opts = setup.opts;
    let count_only = opts.quiet && !opts.check;
    // Block counts depend on where pieces start: only one thread then.
    let share = count_only && (opts.insn_decoder || !stats.want_blocks);
    let mut dec = Decoder::builder(setup.trace.bytes(), &setup.image)
        .config(&setup.config)
        .flow(setup.flow)
        .granularity(if opts.insn_decoder {
            Granularity::Instructions
        } else {
            Granularity::Blocks
        })
        .resync(if opts.resync_on_error {
            Resync::NextIp
        } else {
            Resync::NextPsb
        })
        .count_only(count_only)
        .threads(if share {
            usize::try_from(opts.threads).unwrap_or(1)
        } else {
            1
        })
        .min_piece(opts.min_piece)
        .build();
    // The time of the last event, as ptxed prints it with instructions.
    let mut time = 0u64;
    let mut item = Item::default();
    while dec.next_into(&mut item) {
        match item {
            Item::Block(b) => {
                let offset = if opts.print_offset || opts.check {
                    b.offset
                } else {
                    0
                };
                if !opts.quiet {
                    let blocks = dec.counts().blocks.unwrap_or(0);
                    print_block(&mut p, &mut dec, &b, blocks, offset, time);
                }
                if opts.check {
                    check_block(&mut p, &b.block, offset);
                }
            }
            Item::Insn(i) => {
                let offset = if opts.print_offset || opts.check {
                    i.offset
                } else {
                    0
                };
                let insn = &i.insn;
                if !opts.quiet {
                    let _ = p.insn_line(insn.ip, insn.mode, insn.speculative, offset, time);
                    let _ = p.out.write_all(b"\n");
                }
                if opts.check {
                    check_insn(&mut p, insn, offset);
                }
            }
            Item::Event(e) => {
                time = e.event.time.tsc.unwrap_or(0);
                if !opts.quiet && !e.event.status_update {
                    let _ = p.event(&e.event, e.offset);
                }
            }
            Item::Error(e) => {
                let offset = e.offset.ok_or(ErrorCode::NoSync);
                p.diagnose(offset, e.ip, error_label(e.kind), e.code);
            }
            Item::EndOfTrace if !opts.quiet => {
                let _ = p.out.write_all(b"[end of trace]\n");
            }
            Item::Disabled if !opts.quiet => {
                let _ = p.out.write_all(b"[disabled]\n");
            }
            _ => {}
        }
    }
    if opts.print_stats {
        let counts = dec.counts();
        if stats.want_insn {
            let _ = writeln!(p.out, "insn: {}.", counts.insns);
        }
        if stats.want_blocks {
            let _ = writeln!(p.out, "blocks:\t{}.", counts.blocks.unwrap_or(0));
        }
    }
    let _ = p.out.flush();
    0
}

fn main() {
    let mut argv = std::env::args();
    let prog = argv.next().unwrap_or_else(|| "ptxed".to_string());
    let args: Vec<String> = argv.collect();
    let code = run(&prog, &args);
    std::process::exit(code);
}
