//! ptxed: reconstruct the executed instructions from an Intel PT trace and the code
//! image, compatible with libipt's ptxed (options and output).

use pt_decoder::driver::{BlockItem, Decoder, FlowErrorKind, Granularity, Item, Resync, SkipItem};
use pt_decoder::error::ErrorCode;
use pt_decoder::event::{Event, EventKind};
use pt_decoder::file::TraceFile;
use pt_decoder::flow::{Block, InsnInfo};
use pt_decoder::image::Image;
use pt_decoder::insn;
use pt_decoder::listing::{Listing, ListingOptions, Syntax};
use pt_decoder::packet::recover::ResumeKind;
use pt_decoder::pevent::PeventFile;
use pt_encoder::ExecMode;
use std::io::{self, Write};

mod args;
mod perf;
use pt_decoder::sideband;

use args::{parse_args, Parsed};

#[derive(Clone, Copy, Debug, Default)]
struct Options {
    /// AT&T syntax (`--att`).
    att: bool,
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
    /// `--libipt-resync`: libipt's error handling instead of [`Resync::Recover`].
    libipt_resync: bool,
    /// `--runaway-limit` (`None`: the library's default).
    runaway_limit: Option<u64>,
    insn_decoder: bool,
    /// Threads for `--quiet` decoding (0: one per core).
    threads: u64,
    /// The smallest piece of the trace worth a thread of its own.
    min_piece: u64,
}

impl Options {
    /// What to do after an error: by default recover as much as can soundly be
    /// decoded; libipt's resync at the next PSB (or, with `--resync-on-error`, at the
    /// next IP) with `--libipt-resync` or `--resync-on-error`.
    fn resync(&self) -> Resync {
        if self.resync_on_error {
            Resync::NextIp
        } else if self.libipt_resync {
            Resync::NextPsb
        } else {
            Resync::Recover
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
/// The statistics asked for (`--stat`).
struct Stats {
    want_insn: bool,
    want_blocks: bool,
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

/// Output: events, diagnostics and the instruction listing.
struct Printer<'a, W: Write> {
    out: W,
    opts: Options,
    image: &'a Image,
    listing: Listing,
}

fn mode_name(mode: ExecMode) -> &'static str {
    match mode {
        ExecMode::Bit16 => "16-bit",
        ExecMode::Bit32 => "32-bit",
        ExecMode::Bit64 => "64-bit",
        ExecMode::Unknown => "<unknown>",
    }
}

impl<'a, W: Write> Printer<'a, W> {
    fn new(out: W, opts: Options, image: &'a Image) -> Self {
        let listing = Listing::new(ListingOptions {
            syntax: if opts.att { Syntax::Att } else { Syntax::Intel },
            raw_insn: opts.print_raw_insn,
            no_inst: opts.no_inst,
        });
        Self {
            out,
            opts,
            image,
            listing,
        }
    }

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

    /// One instruction line: the offset, time and speculation columns, then the
    /// listing's line (address, raw bytes, text). Returns where a block walk goes on
    /// after the instruction, or `None` if it could not be read or decoded (the line
    /// says why).
    #[inline]
    fn insn_line(
        &mut self,
        ip: u64,
        mode: ExecMode,
        speculative: bool,
        offset: u64,
        time: u64,
    ) -> io::Result<Option<u64>> {
        let o = &mut self.out;
        if self.opts.print_offset {
            o.write_all(&hex16(offset))?;
            o.write_all(b"  ")?;
        }
        if self.opts.print_time {
            o.write_all(&hex16(time))?;
            o.write_all(b"  ")?;
        }
        if speculative {
            o.write_all(b"? ")?;
        }
        let line = self.listing.line(self.image, ip, mode);
        o.write_all(line.text())?;
        Ok(line.error().is_none().then(|| line.next_ip()))
    }

    /// An instruction line of the instruction flow decoder: XED sees the instruction's
    /// bytes only, and with `--no-inst` the instruction is not decoded at all.
    #[inline]
    fn insn_decoder_line(&mut self, insn: &InsnInfo, offset: u64, time: u64) -> io::Result<()> {
        let o = &mut self.out;
        if self.opts.print_offset {
            o.write_all(&hex16(offset))?;
            o.write_all(b"  ")?;
        }
        if self.opts.print_time {
            o.write_all(&hex16(time))?;
            o.write_all(b"  ")?;
        }
        if insn.speculative {
            o.write_all(b"? ")?;
        }
        if self.opts.no_inst {
            o.write_all(&hex16(insn.ip))?;
            return o.write_all(b"\n");
        }
        let line = self
            .listing
            .line_sized(self.image, insn.ip, insn.mode, insn.size);
        o.write_all(line.text())
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
    // libipt's ptxed names the decoder's offset in a reconstruct error, --offset or not.
    let here = Ok(b.offset);
    for &ip in ips.ips {
        match p.insn_line(ip, block.mode, block.speculative, offset, time) {
            Ok(Some(_)) => {}
            // An instruction that cannot be read or decoded ends the block's listing;
            // unless it was the last one, a reconstruct error follows.
            Ok(None) => {
                if ip != block.end_ip {
                    p.diagnose(here, ip, "reconstruct error", ErrorCode::NoSync);
                }
                return;
            }
            Err(_) => return,
        }
    }
    if let Some(e) = ips.error {
        p.diagnose(here, e.ip, "reconstruct error", e.code);
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

/// The line for trace skipped after an error ([`Resync::Recover`]), printed even when
/// quiet, as errors are: `[skipped <from>-<to> (<n> bytes): resync at tip <ip>]`.
fn print_skipped(o: &mut impl Write, s: &SkipItem) -> io::Result<()> {
    if s.to > s.from {
        write!(
            o,
            "[skipped {:x}-{:x} ({} bytes): ",
            s.from,
            s.to,
            s.to - s.from
        )?;
    } else {
        write!(o, "[{:x}: ", s.to)?;
    }
    match s.at {
        Some(at) if at.kind == ResumeKind::Psb => o.write_all(b"resync at psb]\n"),
        Some(at) => writeln!(o, "resync at {} {:x}]", at.kind.name(), at.ip),
        None => o.write_all(b"end of trace]\n"),
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
    if setup.perf.file.is_some() {
        if setup.sb.any() {
            // perf.data carries its own side-band records.
            let _ = writeln!(
                io::stderr(),
                "{prog}: --pevent:* side-band files do not go with --perf."
            );
            return 1;
        }
        return perf::run(prog, &setup, &setup.perf, out);
    }
    let Some(trace) = &setup.trace else {
        return 1;
    };
    // libipt's side-band files (`--pevent:*`), in the order given.
    let mut sb_files = Vec::new();
    for (arg, _, _) in &setup.sb.files {
        match TraceFile::open(arg) {
            Ok(f) => sb_files.push(f),
            Err(e) => {
                let _ = writeln!(io::stderr(), "{prog}: error loading {arg}: {e}");
                return 1;
            }
        }
    }
    let pevents: Vec<_> = sb_files
        .iter()
        .zip(&setup.sb.files)
        .map(|(f, (_, primary, conf))| PeventFile::new(f.path(), f.bytes(), conf.clone(), *primary))
        .collect();
    let mut kernel = Image::new();
    for arg in &setup.sb.kcore {
        if let Err(e) = kernel.add_elf_arg(arg) {
            let _ = writeln!(io::stderr(), "{prog}: --pevent:kcore {arg}: {e}.");
            return 1;
        }
    }
    let plan = sideband::Plan::new(&pevents, &setup.sb, kernel);
    let mut sb_out = Vec::new();
    let mut sb =
        (!pevents.is_empty()).then(|| sideband::Live::new(&pevents, &plan, &setup.sb, &mut sb_out));
    let stats = setup.stats;
    let mut p = Printer::new(out, setup.opts, &setup.image);
    let _ = p.out.write_all(&sb_out);
    let opts = setup.opts;
    let count_only = opts.quiet && !opts.check;
    // Block counts depend on where pieces start, and side-band switches the image
    // on the way: only one thread then.
    let share = count_only && (opts.insn_decoder || !stats.want_blocks) && sb.is_none();
    let mut dec = Decoder::builder(trace.bytes(), &setup.image)
        .config(&setup.config)
        .flow(setup.flow)
        .granularity(if opts.insn_decoder {
            Granularity::Instructions
        } else {
            Granularity::Blocks
        })
        .resync(opts.resync())
        .count_only(count_only)
        .threads(if share {
            usize::try_from(opts.threads).unwrap_or(1)
        } else {
            1
        })
        .min_piece(opts.min_piece);
    if let Some(n) = opts.runaway_limit {
        dec = dec.runaway_limit(n);
    }
    let mut dec = dec.build();
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
                    let _ = p.insn_decoder_line(insn, offset, time);
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
                if let Some(sb) = &mut sb {
                    sb_out.clear();
                    if let Some(v) = sb.event(&e.event, &mut sb_out) {
                        let image = plan.image(v);
                        dec.set_image(image);
                        p.image = image;
                    }
                    let _ = p.out.write_all(&sb_out);
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
            Item::Skipped(s) => {
                let _ = print_skipped(&mut p.out, &s);
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
