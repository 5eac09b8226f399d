//! ptxed: reconstruct the executed instructions from an Intel PT trace and the code
//! image, compatible with libipt's ptxed (options and output).

use pt_decoder::error::ErrorCode;
use pt_decoder::event::{Event, EventKind};
use pt_decoder::flow::{
    Block, BlockDecoder, Checkpoint, InsnCheckpoint, InsnDecoder, InsnInfo, Status,
};
use pt_decoder::image::Image;
use pt_decoder::insn;
use pt_decoder::listing::{Listing, ListingOptions, Syntax};
use pt_encoder::ExecMode;
use std::io::{self, Write};
use std::ops::ControlFlow;

mod args;
mod parallel;

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
    insn_decoder: bool,
    /// Threads for `--quiet` decoding (0: one per core).
    threads: u64,
    /// The smallest piece of the trace worth a thread of its own.
    min_piece: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Stats {
    insn: u64,
    blocks: u64,
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

/// The address after the instruction at `ip`, following direct branches (as ptxed
/// does with XED's branch displacement).
fn xed_next_ip(image: &Image, ip: u64, mode: ExecMode) -> Option<u64> {
    let d = insn::decode_at(image, ip, mode).ok()?;
    Some(d.target.unwrap_or_else(|| d.next_ip()))
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

/// What [`block_error_ip`] looks at in `block`.
fn blame(block: &Block) -> (bool, u64, ExecMode) {
    let empty = block.ninsn == 0;
    (
        empty,
        if empty { block.ip } else { block.end_ip },
        block.mode,
    )
}

/// The IP to blame for an error after `block` (ptxed's rules: the instruction after
/// the last one, unless the trace did not match the last one itself).
fn block_error_ip(image: &Image, block: &Block, code: ErrorCode) -> u64 {
    if block.ninsn == 0 {
        return block.ip;
    }
    if code == ErrorCode::BadQuery {
        return block.end_ip;
    }
    xed_next_ip(image, block.end_ip, block.mode).unwrap_or(block.end_ip)
}

/// What ptxed's decode loop needs from a flow decoder. The block and the instruction
/// decoder are driven the same way (sync, events, errors, resync); they differ only
/// in how one step is decoded, counted, printed and checked. Generic, not dynamic,
/// so the hot path stays monomorphic.
trait Driver {
    /// Whether an offset error while printing an event met during resync fails the
    /// resync (block decoder) or prints offset 0 (instruction decoder), as ptxed does.
    const STRICT_RESYNC_OFFSET: bool;
    fn sync_forward(&mut self) -> Result<Status, ErrorCode>;
    fn sync_set(&mut self, offset: u64) -> Result<Status, ErrorCode>;
    fn resync(&mut self) -> Result<Status, ErrorCode>;
    fn offset(&self) -> Result<u64, ErrorCode>;
    fn event(&mut self) -> Result<(Event, Status), ErrorCode>;
    /// Forget the last block or instruction before a new sync.
    fn reset(&mut self);
    /// The IP to blame for `code` after the last block or instruction.
    fn error_ip(&self, image: &Image, code: ErrorCode) -> u64;
    /// Decode, count, print and check one block or instruction; `fast`: skip through
    /// warm code first where nothing is printed.
    fn step<W: Write>(
        &mut self,
        p: &mut Printer<'_, W>,
        stats: &mut Stats,
        offset: u64,
        time: u64,
        fast: bool,
    ) -> Result<Status, ErrorCode>;
    /// The decoder's state between two steps, where the output from here on depends on
    /// nothing else (see [`BlockDecoder::checkpoint`]); `None` where it cannot be taken.
    type Mark: Send;
    fn mark(&self) -> Option<Self::Mark>;
    /// Whether the decoder is where `mark` was taken, in the same state.
    fn reached(&self, mark: &Self::Mark) -> bool;
}

/// The `Driver` calls both drivers pass straight to their flow decoder `dec`.
macro_rules! forward_to_decoder {
    () => {
        fn sync_forward(&mut self) -> Result<Status, ErrorCode> {
            self.dec.sync_forward()
        }
        fn sync_set(&mut self, offset: u64) -> Result<Status, ErrorCode> {
            self.dec.sync_set(offset)
        }
        fn resync(&mut self) -> Result<Status, ErrorCode> {
            self.dec.resync()
        }
        fn offset(&self) -> Result<u64, ErrorCode> {
            self.dec.offset()
        }
        fn event(&mut self) -> Result<(Event, Status), ErrorCode> {
            self.dec.event()
        }
    };
}

struct BlockDriver<'a> {
    dec: BlockDecoder<'a>,
    block: Block,
    ips: Vec<u64>,
}

impl<'a> Driver for BlockDriver<'a> {
    const STRICT_RESYNC_OFFSET: bool = true;

    forward_to_decoder!();

    /// With what an error right after it would blame ([`block_error_ip`]).
    type Mark = (Checkpoint<'a>, (bool, u64, ExecMode));

    fn mark(&self) -> Option<Self::Mark> {
        Some((self.dec.checkpoint(), blame(&self.block)))
    }

    fn reached(&self, mark: &Self::Mark) -> bool {
        blame(&self.block) == mark.1 && self.dec.reached(&mark.0)
    }

    fn reset(&mut self) {
        self.block.ip = 0;
        self.block.ninsn = 0;
    }

    fn error_ip(&self, image: &Image, code: ErrorCode) -> u64 {
        block_error_ip(image, &self.block, code)
    }

    #[inline]
    fn step<W: Write>(
        &mut self,
        p: &mut Printer<'_, W>,
        stats: &mut Stats,
        offset: u64,
        time: u64,
        fast: bool,
    ) -> Result<Status, ErrorCode> {
        let opts = p.opts;
        if opts.quiet && !opts.check && fast {
            let (insns, blocks) = self.dec.skip_blocks();
            stats.insn += insns;
            stats.blocks += blocks;
        }
        let r = self.dec.next(&mut self.block);
        if opts.print_stats {
            stats.insn += u64::from(self.block.ninsn);
            stats.blocks += 1;
        }
        if !opts.quiet {
            self.ips.clear();
            let known = self.dec.block_ips(&mut self.ips);
            let ips = known.then_some(&self.ips[..]);
            if let Some(ip) = print_block(p, &self.block, ips, stats, offset, time) {
                // libipt's ptxed names the decoder's offset here, --offset or not.
                p.diagnose(
                    self.dec.offset(),
                    ip,
                    "reconstruct error",
                    ErrorCode::NoSync,
                );
            }
        }
        if opts.check {
            check_block(p, &self.block, offset);
        }
        r
    }
}

struct InsnDriver<'a> {
    dec: InsnDecoder<'a>,
    insn: InsnInfo,
}

impl<'a> Driver for InsnDriver<'a> {
    const STRICT_RESYNC_OFFSET: bool = false;

    forward_to_decoder!();

    /// With the last instruction, which an error right after it would blame.
    type Mark = (InsnCheckpoint<'a>, InsnInfo);

    fn mark(&self) -> Option<Self::Mark> {
        Some((self.dec.checkpoint()?, self.insn))
    }

    fn reached(&self, mark: &Self::Mark) -> bool {
        self.insn == mark.1 && self.dec.reached(&mark.0)
    }

    fn reset(&mut self) {
        self.insn.ip = 0;
        self.insn.class = None;
    }

    fn error_ip(&self, image: &Image, code: ErrorCode) -> u64 {
        insn_error_ip(image, &self.insn, code)
    }

    #[inline]
    fn step<W: Write>(
        &mut self,
        p: &mut Printer<'_, W>,
        stats: &mut Stats,
        offset: u64,
        time: u64,
        fast: bool,
    ) -> Result<Status, ErrorCode> {
        let opts = p.opts;
        if opts.quiet && !opts.check && fast {
            stats.insn += self.dec.skip_blocks();
        }
        let r = match self.dec.next(&mut self.insn) {
            // An event that could not be bound to the instruction: report it first.
            Err(ErrorCode::EventIgnored) => {
                return Ok(Status {
                    event_pending: true,
                    ..Status::default()
                })
            }
            Err(e) if self.insn.class.is_none() => return Err(e),
            r => r,
        };
        let insn = &self.insn;
        if !opts.quiet {
            let _ = p.insn_decoder_line(insn, offset, time);
        }
        if opts.print_stats {
            stats.insn += 1;
        }
        if opts.check {
            check_insn(p, insn, offset);
        }
        r
    }
}

/// Take the pending event, remember its time and print it unless it only updates
/// the status.
fn take_event<D: Driver, W: Write>(
    dec: &mut D,
    p: &mut Printer<'_, W>,
    time: &mut u64,
    offset: u64,
) -> Result<Status, ErrorCode> {
    let (ev, status) = dec.event()?;
    *time = ev.time.tsc.unwrap_or(0);
    if !p.opts.quiet && !ev.status_update {
        let _ = p.event(&ev, offset);
    }
    Ok(status)
}

/// Where a decode starts, and what it sees of its progress: the whole trace, or one
/// piece of a parallel decode ([`parallel`]).
trait Watch<D: Driver> {
    /// Whether steps may skip through warm code (nothing is printed there).
    fn fast(&self) -> bool {
        true
    }
    /// The first synchronization.
    fn first_sync(&mut self, dec: &mut D) -> Result<Status, ErrorCode> {
        dec.sync_forward()
    }
    /// Between two steps, with `written` bytes of output so far; `Break` ends the
    /// decode here.
    fn between_steps(&mut self, _dec: &D, _written: usize, _stats: &Stats) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }
    /// An error was reported.
    fn error(&mut self, _code: ErrorCode) {}
}

/// The whole trace on one thread.
struct Whole;

impl<D: Driver> Watch<D> for Whole {}

/// How much output a sink took so far (only pieces of a parallel decode ask).
trait Sink: Write {
    fn written(&self) -> usize {
        0
    }
}

impl<W: Write> Sink for io::BufWriter<W> {}

impl Sink for Vec<u8> {
    fn written(&self) -> usize {
        self.len()
    }
}

/// Decode the whole trace with `dec`: sync, then alternate events and steps until
/// the end, reporting errors and (with `--resync-on-error`) resyncing after them.
fn run_decoder<D: Driver, W: Sink, T: Watch<D>>(
    dec: &mut D,
    image: &Image,
    p: &mut Printer<'_, W>,
    stats: &mut Stats,
    watch: &mut T,
) {
    let opts = p.opts;
    let mut sync = 0u64;
    let mut time = 0u64;
    let mut first = true;
    loop {
        dec.reset();
        let synced = if first {
            first = false;
            watch.first_sync(dec)
        } else {
            dec.sync_forward()
        };
        let mut status = match synced {
            Ok(s) => s,
            Err(ErrorCode::Eos) => break,
            Err(e) => {
                watch.error(e);
                p.diagnose(dec.offset(), dec.error_ip(image, e), "sync error", e);
                match dec.offset() {
                    Ok(new) if new > sync => {
                        sync = new;
                        continue;
                    }
                    _ => break,
                }
            }
        };
        loop {
            let err = 'inner: loop {
                // Events first.
                while status.event_pending {
                    let offset = if opts.print_offset {
                        dec.offset()
                    } else {
                        Ok(0)
                    };
                    let r = offset.and_then(|offset| take_event(dec, p, &mut time, offset));
                    match r {
                        Ok(s) => status = s,
                        Err(e) => break 'inner e,
                    }
                }
                if status.eos {
                    if !status.ip_suppressed && !opts.quiet {
                        let _ = p.out.write_all(b"[end of trace]\n");
                    }
                    return;
                }
                if watch.between_steps(dec, p.out.written(), stats).is_break() {
                    return;
                }
                let offset = if opts.print_offset || opts.check {
                    match dec.offset() {
                        Ok(o) => o,
                        Err(e) => break 'inner e,
                    }
                } else {
                    0
                };
                match dec.step(p, stats, offset, time, watch.fast()) {
                    Ok(s) => status = s,
                    Err(e) => break 'inner e,
                }
            };
            if err == ErrorCode::Eos {
                return;
            }
            watch.error(err);
            p.diagnose(dec.offset(), dec.error_ip(image, err), "error", err);
            if !opts.resync_on_error {
                break;
            }
            match resync(dec, p, &mut time) {
                Ok(s) => status = s,
                Err(e) => {
                    watch.error(e);
                    p.diagnose(dec.offset(), dec.error_ip(image, e), "resync error", e);
                    break;
                }
            }
        }
    }
}

/// `--resync-on-error`: find the next sync point, printing the events met on the way.
fn resync<D: Driver, W: Write>(
    dec: &mut D,
    p: &mut Printer<'_, W>,
    time: &mut u64,
) -> Result<Status, ErrorCode> {
    let opts = p.opts;
    let status = loop {
        match dec.resync() {
            Ok(s) => break s,
            Err(ErrorCode::EventIgnored) => {
                let offset = if !opts.print_offset {
                    0
                } else if D::STRICT_RESYNC_OFFSET {
                    dec.offset()?
                } else {
                    dec.offset().unwrap_or(0)
                };
                take_event(dec, p, time, offset)?;
            }
            Err(e) => return Err(e),
        }
    };
    if status.ip_suppressed && !opts.quiet {
        let _ = p.out.write_all(b"[disabled]\n");
    }
    Ok(status)
}

/// Prints `block` (and its `[block]` line); returns the IP of a reconstruct error, where
/// the listing did not reach the block's end.
fn print_block<W: Write>(
    p: &mut Printer<'_, W>,
    block: &Block,
    ips: Option<&[u64]>,
    stats: &Stats,
    offset: u64,
    time: u64,
) -> Option<u64> {
    if p.opts.show_blocks {
        if p.opts.print_stats {
            let _ = writeln!(p.out, "[block {:x}]", stats.blocks);
        } else {
            let _ = p.out.write_all(b"[block]\n");
        }
    }
    if block.ninsn == 0 {
        return None;
    }
    // As libipt's ptxed: an instruction that cannot be read or decoded ends the block's
    // listing; unless it was the last one, a reconstruct error follows.
    let mut ip = block.ip;
    if let Some(ips) = ips.filter(|ips| ips.len() == block.ninsn as usize) {
        for &at in ips {
            ip = at;
            match p.insn_line(ip, block.mode, block.speculative, offset, time) {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => return None,
            }
        }
    } else {
        let mut left = block.ninsn;
        while left > 0 {
            match p.insn_line(ip, block.mode, block.speculative, offset, time) {
                Ok(Some(next)) => {
                    left -= 1;
                    if left > 0 {
                        ip = next;
                    }
                }
                Ok(None) => break,
                Err(_) => return None,
            }
        }
    }
    (ip != block.end_ip).then_some(ip)
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

fn insn_error_ip(image: &Image, insn: &InsnInfo, code: ErrorCode) -> u64 {
    if code == ErrorCode::BadQuery || insn.class.is_none() {
        return insn.ip;
    }
    xed_next_ip(image, insn.ip, insn.mode).unwrap_or(insn.ip)
}

/// Print and count what a parallel decode produced.
fn take_joined<W: Write>(p: &mut Printer<'_, W>, stats: &mut Stats, j: parallel::Joined) {
    let _ = p.out.write_all(&j.out);
    stats.insn = j.insn;
    stats.blocks = j.blocks;
}

fn run(prog: &str, args: &[String]) -> i32 {
    let stdout = io::stdout();
    let mut out = io::BufWriter::with_capacity(1 << 16, stdout.lock());
    // Not held while decoding: threads of a parallel decode would wait on it forever.
    let parsed = parse_args(prog, args, &mut out, &mut io::stderr().lock());
    let setup = match parsed {
        Parsed::Exit(code) => {
            let _ = out.flush();
            return code;
        }
        Parsed::Run(s) => s,
    };
    let mut stats = setup.stats;
    let mut p = Printer::new(out, setup.opts, &setup.image);
    let (trace, image, config) = (setup.trace.bytes(), &setup.image, &setup.config);
    let opts = setup.opts;
    let threads = match opts.threads {
        0 => parallel::default_threads(),
        n => usize::try_from(n).unwrap_or(1),
    };
    // Only where the output cannot depend on where blocks end or on time (see
    // `parallel`).
    let share = threads > 1
        && opts.quiet
        && !opts.check
        && !setup.flow.tick_events
        && (opts.insn_decoder || !stats.want_blocks);
    if opts.insn_decoder {
        let make = || InsnDriver {
            dec: InsnDecoder::new(trace, image, config, setup.flow),
            insn: InsnInfo {
                ip: 0,
                size: 0,
                mode: ExecMode::Unknown,
                speculative: false,
                isid: 0,
                class: None,
            },
        };
        let joined = share
            .then(|| parallel::decode(trace, threads, make, image, opts, stats))
            .flatten();
        match joined {
            Some(j) => take_joined(&mut p, &mut stats, j),
            None => run_decoder(&mut make(), image, &mut p, &mut stats, &mut Whole),
        }
    } else {
        let make = || BlockDriver {
            dec: BlockDecoder::new(trace, image, config, setup.flow),
            block: Block {
                ip: 0,
                end_ip: 0,
                mode: ExecMode::Unknown,
                ninsn: 0,
                speculative: false,
                truncated: false,
                isid: 0,
                class: None,
            },
            ips: Vec::new(),
        };
        let joined = share
            .then(|| parallel::decode(trace, threads, make, image, opts, stats))
            .flatten();
        match joined {
            Some(j) => take_joined(&mut p, &mut stats, j),
            None => run_decoder(&mut make(), image, &mut p, &mut stats, &mut Whole),
        }
    }
    if setup.opts.print_stats {
        if stats.want_insn {
            let _ = writeln!(p.out, "insn: {}.", stats.insn);
        }
        if stats.want_blocks {
            let _ = writeln!(p.out, "blocks:\t{}.", stats.blocks);
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
