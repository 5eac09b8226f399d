//! ptdump: one line per packet, in the text format of libipt's `ptdump` (column layout,
//! packet formats, tracking columns and diagnostics), or one JSON object per line.
//!
//! [`dump`] drives the packet decoder the way ptdump does: synchronize at the first PSB
//! (or at offset 0 with `no_sync`), print packets until an error, print the error as
//! `[offset: text: reason]`, resynchronize at the next PSB with fresh tracking state, and
//! stop at the end of the trace. Output goes through one reusable byte buffer that is
//! handed to the writer in large chunks.

mod field;
mod json;
pub mod perf;

use std::io::{self, Write};
use std::ops::ControlFlow;

use crate::config::Config;
use crate::error::{DecodeError, ErrorCode};
use crate::packet::{PacketDecoder, PacketKind};
use crate::pevent::{SbFlags, SbSession};
use crate::time::{Time, TimeCal, FCR_SHIFT};
use field::{hex16_padded, pad16, push_hex, put, put_spaces, Field};
use pt_encoder::packet::{sext48, ExecMode, IpCompression, IpPacketKind, LastIpError};
use pt_encoder::{LastIp, Packet};

/// What to print; the fields mirror ptdump's options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DumpOptions {
    /// Print the offset column (`--no-offset` clears it).
    pub show_offset: bool,
    /// Print the raw packet bytes (`--raw`).
    pub show_raw_bytes: bool,
    /// Track and print the last IP on IP packets (`--lastip`).
    pub show_last_ip: bool,
    /// Print the execution mode on MODE.Exec (`--exec-mode`).
    pub show_exec_mode: bool,
    /// Track time (set by `--time` and `--tcal`).
    pub track_time: bool,
    /// Print the estimated TSC on timing packets (`--time`).
    pub show_time: bool,
    /// Print the calibration on timing packets (`--tcal`).
    pub show_tcal: bool,
    /// Print time and calibration as deltas (`--time-delta`).
    pub show_time_as_delta: bool,
    /// Keep the calibration across OVF (`--keep-tcal-on-ovf`).
    pub keep_tcal_on_ovf: bool,
    /// Print only diagnostics (`--quiet`).
    pub quiet: bool,
    /// Hide PAD packets (`--no-pad`).
    pub no_pad: bool,
    /// Start decoding at offset 0 instead of the first PSB (`--no-sync`).
    pub no_sync: bool,
    /// Do not calibrate (`--no-tcal`).
    pub no_tcal: bool,
    /// Do not require a TSC to print time (`--no-wall-clock`).
    pub no_wall_clock: bool,
    /// Hide timing packets (`--no-timing`).
    pub no_timing: bool,
    /// Hide CYC packets and ignore them for timing (`--no-cyc`).
    pub no_cyc: bool,
    /// One JSON object per line instead of ptdump's text (`--json`).
    pub json: bool,
}

impl Default for DumpOptions {
    fn default() -> Self {
        Self {
            show_offset: true,
            show_raw_bytes: false,
            show_last_ip: false,
            show_exec_mode: false,
            track_time: false,
            show_time: false,
            show_tcal: false,
            show_time_as_delta: false,
            keep_tcal_on_ovf: false,
            quiet: false,
            no_pad: false,
            no_sync: false,
            no_tcal: false,
            no_wall_clock: false,
            no_timing: false,
            no_cyc: false,
            json: false,
        }
    }
}

/// Flush the output buffer to the writer beyond this many bytes.
const FLUSH_AT: usize = 1 << 16;

/// Column widths of ptdump's text layout (the C buffer sizes, terminator included).
const OFFSET_WIDTH: usize = 17;
const RAW_WIDTH: usize = 33;
const OPCODE_WIDTH: usize = 10;
const PAYLOAD_WIDTH: usize = 25;
const ID_WIDTH: usize = 5;
/// Longest standard payload, extended payload (TNT, TRIG) and tracking value.
const PAYLOAD_CAP: usize = 24;
const EXT_PAYLOAD_CAP: usize = 47;
const TRACK_CAP: usize = 16;

/// State that follows the trace: last IP and time.
#[derive(Clone, Copy, Debug, Default)]
struct Tracking {
    last_ip: LastIp,
    tcal: TimeCal,
    time: Time,
    /// The last printed TSC and calibration (for deltas).
    tsc: u64,
    fcr: u64,
    /// Inside PSB+.
    in_header: bool,
}

/// The columns of one output line (libipt's `ptdump_buffer`).
struct Line {
    /// The opcode name, blank-padded to 16 bytes, and its length.
    opcode: (&'static [u8; 16], usize),
    payload: Field<48>,
    id: &'static str,
    track: Field<17>,
    skip: bool,
    skip_time: bool,
    skip_tcal: bool,
}

impl Line {
    fn new() -> Self {
        Self {
            opcode: (&BLANK16, 0),
            payload: Field::with_cap(PAYLOAD_CAP),
            id: "",
            track: Field::with_cap(TRACK_CAP),
            skip: false,
            skip_time: false,
            skip_tcal: false,
        }
    }

    #[inline]
    fn reset(&mut self) {
        self.opcode = (&BLANK16, 0);
        self.payload.clear(PAYLOAD_CAP);
        self.id = "";
        self.track.clear(TRACK_CAP);
        self.skip = false;
        self.skip_time = false;
        self.skip_tcal = false;
    }
}

/// The dumper: options, configuration, tracking state and the output buffer.
struct Dumper<'a, W: Write> {
    trace: &'a [u8],
    config: &'a Config,
    opts: &'a DumpOptions,
    tracking: Tracking,
    line: Line,
    out: Vec<u8>,
    sink: W,
    /// Side-band records to print in time order between the packets.
    sb: Option<(&'a mut SbSession<'a, 'a>, SbFlags)>,
}

/// Dump `trace` as libipt's ptdump would (or as JSON lines with `opts.json`).
///
/// Decoding problems are part of the output (as ptdump prints them); only write errors
/// are returned.
pub fn dump<W: Write>(
    trace: &[u8],
    config: &Config,
    opts: &DumpOptions,
    sink: W,
) -> io::Result<()> {
    dump_with_sideband(trace, config, opts, None, sink)
}

/// [`dump`], with the records of side-band files printed where the trace's time
/// passes theirs (libipt's ptdump with `--pevent:*`; `opts.track_time` must be set)
/// and the rest at the end.
pub fn dump_with_sideband<'a, W: Write>(
    trace: &'a [u8],
    config: &'a Config,
    opts: &'a DumpOptions,
    sb: Option<(&'a mut SbSession<'a, 'a>, SbFlags)>,
    sink: W,
) -> io::Result<()> {
    let mut d = Dumper {
        trace,
        config,
        opts,
        tracking: Tracking::default(),
        line: Line::new(),
        out: Vec::with_capacity(FLUSH_AT + 4096),
        sink,
        sb,
    };
    if let Some((sb, _)) = &mut d.sb {
        // Errors met reading the first records come first, as libipt loads the files
        // before it dumps.
        sb.dump_errors(&mut d.out);
    }
    d.run()?;
    if let Some((sb, flags)) = &mut d.sb {
        sb.dump(u64::MAX, *flags, &mut d.out);
    }
    d.flush()?;
    d.sink.flush()
}

/// Print a diagnostic line the way ptdump does, for callers outside the packet loop
/// (e.g. the CLI's errata lookup).
pub fn write_diag<W: Write>(
    mut w: W,
    json: bool,
    offset: u64,
    text: &str,
    code: Option<ErrorCode>,
) -> io::Result<()> {
    let mut v = Vec::new();
    diag_into(&mut v, json, offset, text, code);
    w.write_all(&v)
}

fn diag_into(out: &mut Vec<u8>, json: bool, offset: u64, text: &str, code: Option<ErrorCode>) {
    if json {
        json::diag(out, offset, text, code);
        return;
    }
    out.push(b'[');
    push_hex(out, offset);
    out.extend_from_slice(b": ");
    out.extend_from_slice(text.as_bytes());
    if let Some(code) = code {
        out.extend_from_slice(b": ");
        out.extend_from_slice(code.message().as_bytes());
    }
    out.extend_from_slice(b"]\n");
}

impl<W: Write> Dumper<'_, W> {
    fn flush(&mut self) -> io::Result<()> {
        self.sink.write_all(&self.out)?;
        self.out.clear();
        Ok(())
    }

    #[inline]
    fn maybe_flush(&mut self) -> io::Result<()> {
        if self.out.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    fn diag(&mut self, offset: u64, text: &str, code: Option<ErrorCode>) {
        diag_into(&mut self.out, self.opts.json, offset, text, code);
    }

    /// ptdump's `dump_sync`: sync, dump until an error, resync, until the end.
    fn run(&mut self) -> io::Result<()> {
        let mut decoder = PacketDecoder::new(self.trace, self.config);
        let synced = if self.opts.no_sync {
            decoder.sync_set(0)
        } else {
            decoder.sync_forward().map(|_| ())
        };
        match synced {
            Ok(()) => {}
            Err(e) if e.code == ErrorCode::Eos && !self.opts.no_sync => return Ok(()),
            Err(e) => {
                self.diag(0, "sync error", Some(e.code));
                return Ok(());
            }
        }
        loop {
            if !self.dump_packets(&mut decoder)? {
                break;
            }
            match decoder.sync_forward() {
                Ok(_) => {}
                Err(e) if e.code == ErrorCode::Eos => break,
                Err(e) => {
                    self.diag(0, "sync error", Some(e.code));
                    break;
                }
            }
            self.tracking = Tracking::default();
        }
        Ok(())
    }

    /// Dump packets from the decoder's position; `Ok(true)` after a decode error (resync
    /// wanted), `Ok(false)` at the end of the trace.
    fn dump_packets(&mut self, decoder: &mut PacketDecoder<'_>) -> io::Result<bool> {
        let Ok(start) = decoder.offset() else {
            return Ok(false);
        };
        // Nothing but diagnostics can come out: decode as fast as possible.
        let silent = self.opts.quiet && !self.opts.show_last_ip && !self.opts.track_time;
        // libipt reports a packet at the decoder's position before decoding it, which
        // differs from the packet's own offset only where SKD007 hid an OVF in a CYC.
        let mut next = start;
        let mut io_err = None;
        let mut unknown = None;
        let mut bad_size = None;
        if silent {
            // Flat records decode fastest; all that matters is where an error is.
            let r = decoder.decode_records_with(|off, r| {
                if matches!(
                    r.kind(),
                    PacketKind::Bbp | PacketKind::Bip | PacketKind::Bep
                ) {
                    unknown = Some(off);
                    return ControlFlow::Break(());
                }
                ControlFlow::Continue(())
            });
            return Ok(self.outcome(r, None, unknown));
        }
        let r = decoder.decode_with(|off, p| {
            if matches!(
                p,
                Packet::Bbp { .. } | Packet::Bip { .. } | Packet::Bep { .. }
            ) {
                // libipt knows no PEBS packets: to it these are unknown opcodes.
                unknown = Some(off);
                return ControlFlow::Break(());
            }
            let at = next;
            let size = wire_size(self.trace, off, &p);
            next = off + size;
            if silent {
                return ControlFlow::Continue(());
            }
            if !self.packet(at, size, &p) {
                bad_size = Some(at);
                return ControlFlow::Break(());
            }
            if let Err(e) = self.maybe_flush() {
                io_err = Some(e);
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        });
        if let Some(e) = io_err {
            return Err(e);
        }
        Ok(self.outcome(r, bad_size, unknown))
    }

    /// How a run of [`Self::dump_packets`] ended: the diagnostic to print for a packet
    /// with a bad size, a PEBS packet (unknown to libipt) or a decode error, and whether
    /// to resync (`true`) or stop at the end of the trace (`false`).
    fn outcome(
        &mut self,
        r: Result<bool, DecodeError>,
        bad_size: Option<u64>,
        unknown: Option<u64>,
    ) -> bool {
        if let Some(off) = bad_size {
            self.diag(off, "bad packet size", Some(ErrorCode::BadPacket));
            return true;
        }
        if let Some(off) = unknown {
            self.diag(off, "error decoding packet", Some(ErrorCode::BadOpcode));
            return true;
        }
        match r {
            Ok(_) => false,
            Err(DecodeError {
                code: ErrorCode::Eos,
                ..
            }) => false,
            Err(e) => {
                self.diag(e.offset, "error decoding packet", Some(e.code));
                true
            }
        }
    }

    /// One packet: format its columns, update tracking (printing diagnostics as they
    /// arise), then print the line. `false` if the packet's raw bytes run past the end of
    /// the trace (only an SKZ84 `<invalid>` packet can), which ptdump treats as an error.
    fn packet(&mut self, offset: u64, size: u64, p: &Packet) -> bool {
        if self.opts.show_raw_bytes && offset.saturating_add(size) > self.trace.len() as u64 {
            return false;
        }
        self.line.reset();
        self.format_packet(offset, p);
        if self.line.skip || self.opts.quiet {
            return true;
        }
        if self.opts.json {
            json::packet(&mut self.out, offset, size, p, self.trace, &self.line);
        } else {
            self.print_line(offset, size);
        }
        true
    }

    #[inline]
    fn print_line(&mut self, offset: u64, size: u64) {
        let out = &mut self.out;
        let line = &self.line;
        let mut sep = 0;
        if self.opts.show_offset {
            put(out, &hex16_padded(offset), OFFSET_WIDTH);
            sep = 1;
        }
        if self.opts.show_raw_bytes {
            let begin = offset as usize;
            let end = begin.saturating_add(size as usize);
            let bytes = self.trace.get(begin..end).unwrap_or(&[]);
            put_spaces(out, sep);
            let mut raw = Field::<33>::with_cap(32);
            for &b in bytes {
                raw.hex(b as u64, 2);
            }
            let (buf, n) = raw.raw();
            put(out, buf, n);
            put_spaces(out, RAW_WIDTH.saturating_sub(n));
            sep = 1;
        }
        put_spaces(out, sep);
        let (payload, plen) = line.payload.raw();
        let (opcode, olen) = line.opcode;
        if plen == 0 {
            put(out, opcode, olen);
        } else {
            put(out, opcode, olen.max(OPCODE_WIDTH));
        }
        if !line.id.is_empty() {
            put_spaces(out, 1);
            put(out, payload, plen);
            put_spaces(out, PAYLOAD_WIDTH.saturating_sub(plen) + 1);
            let id = line.id.as_bytes();
            out.extend_from_slice(id);
            put_spaces(out, ID_WIDTH.saturating_sub(id.len()));
            out.extend_from_slice(line.track.as_bytes());
        } else if plen != 0 {
            put_spaces(out, 1);
            put(out, payload, plen);
        }
        out.push(b'\n');
    }

    /// ptdump's `print_packet`.
    fn format_packet(&mut self, offset: u64, p: &Packet) {
        let opts = self.opts;
        let line = &mut self.line;
        line.opcode = opcode(p);
        match *p {
            Packet::Psb => {
                if opts.track_time {
                    self.tracking.tcal.update_psb(self.config);
                }
                self.tracking.in_header = true;
            }
            Packet::Psbend => self.tracking.in_header = false,
            Packet::Pad => line.skip = opts.no_pad,
            Packet::Ovf if opts.track_time => {
                if opts.keep_tcal_on_ovf {
                    self.tracking.tcal.update_ovf();
                } else {
                    self.tracking.tcal = TimeCal::new();
                }
            }
            Packet::Ovf | Packet::Stop | Packet::Invalid => {}
            Packet::Ip(_, ip) => {
                format_ip(&mut line.payload, ip.compression, ip.ip);
                if opts.show_last_ip {
                    self.track_last_ip(offset, p);
                }
            }
            Packet::Pip { cr3, nr } => {
                line.payload.hex(cr3, 0);
                if nr {
                    line.payload.str(", nr");
                }
                line.id = "cr3";
                line.track.hex(cr3, 16);
            }
            Packet::Vmcs { base } => {
                line.payload.hex(base, 0);
                line.id = "vmcs";
                line.track.hex(base, 16);
            }
            Packet::Tnt8(tnt) | Packet::Tnt64(tnt) => {
                line.payload.clear(EXT_PAYLOAD_CAP);
                for taken in tnt.iter() {
                    line.payload.push(if taken { b'!' } else { b'.' });
                }
            }
            Packet::ModeExec(m) => {
                let mut sep = false;
                for (on, s) in [(m.csd, "cs.d"), (m.csl, "cs.l"), (m.iflag, "if")] {
                    if on {
                        if sep {
                            line.payload.str(", ");
                        }
                        line.payload.str(s);
                        sep = true;
                    }
                }
                if opts.show_exec_mode {
                    line.id = "em";
                    line.track.str(match m.mode() {
                        ExecMode::Bit64 => "64-bit",
                        ExecMode::Bit32 => "32-bit",
                        ExecMode::Bit16 => "16-bit",
                        ExecMode::Unknown => "unknown",
                    });
                }
            }
            Packet::ModeTsx(m) => {
                if m.intx {
                    line.payload.str("intx");
                }
                if m.abrt {
                    line.payload.str(if m.intx { ", abrt" } else { "abrt" });
                }
            }
            Packet::Tsc { tsc } => {
                line.payload.hex(tsc, 0);
                if opts.track_time {
                    self.track_tsc(offset, tsc);
                }
                self.line.skip |= opts.no_timing;
            }
            Packet::Cbr { ratio } => {
                line.payload.hex(ratio as u64, 0);
                if opts.track_time {
                    self.track_cbr(offset, ratio);
                }
                self.line.skip |= opts.no_timing;
            }
            Packet::Tma { ctc, fc } => {
                line.payload.hex(ctc as u64, 0).str(", ").hex(fc as u64, 0);
                if opts.track_time {
                    self.track_tma(offset, ctc, fc);
                }
                self.line.skip |= opts.no_timing;
            }
            Packet::Mtc { ctc } => {
                line.payload.hex(ctc as u64, 0);
                if opts.track_time {
                    self.track_mtc(offset, ctc);
                }
                self.line.skip |= opts.no_timing;
            }
            Packet::Cyc { value } => {
                line.payload.hex(value, 0);
                if opts.track_time && !opts.no_cyc {
                    self.track_cyc(offset, value);
                }
                self.line.skip |= opts.no_timing || opts.no_cyc;
            }
            Packet::Mnt { payload } => {
                line.payload.hex(payload, 0);
            }
            Packet::Exstop { ip: true } => {
                line.payload.str("ip");
            }
            Packet::Exstop { ip: false } => {}
            Packet::Mwait { hints, ext } => {
                line.payload
                    .hex(hints as u64, 8)
                    .str(", ")
                    .hex(ext as u64, 8);
            }
            Packet::Pwre {
                state,
                sub_state,
                hw,
            } => {
                line.payload.str("c").dec(((state + 1) & 0xf) as u64);
                line.payload.str(".").dec(((sub_state + 1) & 0xf) as u64);
                // The packet layer takes the HW flag from the SDM's bit or libipt's.
                if hw {
                    line.payload.str(", hw");
                }
            }
            Packet::Pwrx {
                last,
                deepest,
                wake,
            } => {
                let n = wake.interrupt as u8 + wake.store as u8 + wake.autonomous as u8;
                let wr = match n {
                    1 if wake.interrupt => "int",
                    1 if wake.store => " st",
                    1 => " hw",
                    _ => "bad",
                };
                line.payload
                    .str(wr)
                    .str(": c")
                    .dec(((last + 1) & 0xf) as u64);
                line.payload.str(", c").dec(((deepest + 1) & 0xf) as u64);
            }
            Packet::Ptw { size, payload, ip } => {
                line.payload
                    .hex(size.bits() as u64, 0)
                    .str(": ")
                    .hex(payload, 0);
                if ip {
                    line.payload.str(", ip");
                }
            }
            Packet::Cfe { ty, vector, ip } => {
                line.id = "type";
                line.track.str(cfe_type_name(ty));
                line.payload.dec(ty as u64);
                match ty {
                    // intr, vmexit_intr, uintr, swintr: decimal vector.
                    1 | 9 | 12 | 14 => {
                        line.payload.str(": ").dec(vector as u64);
                    }
                    // sipi: hex vector.
                    5 => {
                        line.payload.str(": ").hex(vector as u64, 0);
                    }
                    _ => {}
                }
                if ip {
                    line.payload.str(", ip");
                }
            }
            Packet::Evd { ty, payload } => {
                line.payload.dec(ty as u64).str(": ").hex(payload, 0);
                line.id = "type";
                line.track.str(match ty {
                    0 => "cr2",
                    1 => "vmxq",
                    2 => "vmxr",
                    _ => "unknown",
                });
            }
            Packet::Trig {
                trbv,
                ip,
                mult,
                icnt,
            } => {
                line.payload.clear(EXT_PAYLOAD_CAP);
                line.payload.hex(trbv as u64, 2);
                if ip {
                    line.payload.str(", ip");
                }
                if mult {
                    line.payload.str(", mult");
                }
                if let Some(icnt) = icnt {
                    line.payload.str(", icnt: ").dec(icnt as u64);
                }
            }
            // Filtered out by the caller (libipt has no PEBS packets); keep the name.
            Packet::Bbp { .. } | Packet::Bip { .. } | Packet::Bep { .. } => {}
            // `Packet` is non-exhaustive: a kind this dump does not know prints its name.
            _ => {}
        }
    }

    fn track_last_ip(&mut self, offset: u64, p: &Packet) {
        let Packet::Ip(_, ip) = *p else { return };
        let line = &mut self.line;
        line.id = "ip";
        self.tracking.last_ip.update(ip);
        match self.tracking.last_ip.query() {
            Ok(v) => {
                line.track.hex(v, 16);
            }
            Err(LastIpError::Suppressed) => {
                line.track.str("<suppressed>");
            }
            Err(LastIpError::NoIp) => {
                line.track.str("<unavailable>");
                self.diag(offset, "error tracking last-ip", Some(ErrorCode::NoIp));
            }
        }
    }

    fn track_tsc(&mut self, offset: u64, tsc: u64) {
        if !self.opts.no_tcal {
            if self.tracking.in_header {
                if let Err(e) = self.tracking.tcal.header_tsc(tsc) {
                    self.diag(offset, "error calibrating time", Some(e));
                }
            } else {
                self.tracking.tcal.update_tsc(tsc);
            }
        }
        self.tracking.time.update_tsc(tsc);
        self.track_time(offset);
    }

    fn track_cbr(&mut self, offset: u64, ratio: u8) {
        if !self.opts.no_tcal {
            let r = if self.tracking.in_header {
                self.tracking.tcal.header_cbr(ratio, self.config)
            } else {
                self.tracking.tcal.update_cbr(ratio, self.config)
            };
            if let Err(e) = r {
                self.diag(offset, "error calibrating time", Some(e));
            }
        }
        if let Err(e) = self.tracking.time.update_cbr(ratio) {
            self.diag(offset, "error updating time", Some(e));
        }
        self.line.skip_time = true;
        self.track_time(offset);
    }

    fn track_tma(&mut self, offset: u64, ctc: u16, fc: u16) {
        if !self.opts.no_tcal {
            self.tracking.tcal.update_tma();
        }
        if let Err(e) = self.tracking.time.update_tma(ctc, fc, self.config) {
            self.diag(offset, "error updating time", Some(e));
        }
        self.line.skip_tcal = true;
        self.track_time(offset);
    }

    fn track_mtc(&mut self, offset: u64, ctc: u8) {
        if !self.opts.no_tcal {
            if let Err(e) = self.tracking.tcal.update_mtc(ctc, self.config) {
                self.diag(offset, "error calibrating time", Some(e));
            }
        }
        if let Err(e) = self.tracking.time.update_mtc(ctc, self.config) {
            self.diag(offset, "error updating time", Some(e));
        }
        self.track_time(offset);
    }

    fn track_cyc(&mut self, offset: u64, value: u64) {
        let mut fcr = 0;
        if !self.opts.no_tcal {
            match self.tracking.tcal.fcr() {
                Ok(f) => fcr = f,
                Err(e) => self.diag(offset, "calibration error", Some(e)),
            }
            self.tracking.tcal.update_cyc(value);
        }
        match self.tracking.time.update_cyc(value, self.config, fcr) {
            Err(e) => self.diag(offset, "error updating time", Some(e)),
            Ok(()) if fcr == 0 => self.diag(offset, "error updating time: no calibration", None),
            Ok(()) => {}
        }
        self.line.skip_tcal = true;
        self.track_time(offset);
    }

    fn track_time(&mut self, offset: u64) {
        if self.opts.show_tcal && !self.line.skip_tcal {
            self.print_tcal(offset);
        }
        if self.opts.show_time && !self.line.skip_time {
            self.print_time(offset);
        }
        if let Some((sb, flags)) = &mut self.sb {
            // The estimate, with or without a TSC yet (as libipt queries it).
            sb.dump(self.tracking.time.tsc(), *flags, &mut self.out);
        }
    }

    fn print_time(&mut self, offset: u64) {
        self.line.id = "tsc";
        let tsc = match self.tracking.time.query_tsc() {
            Ok(t) => t,
            Err(ErrorCode::NoTime) if self.opts.no_wall_clock => self.tracking.time.tsc(),
            Err(e) => {
                self.diag(offset, "error printing time", Some(e));
                self.line.track.str("<unavailable>");
                return;
            }
        };
        let track = &mut self.line.track;
        if self.opts.show_time_as_delta {
            let old = self.tracking.tsc;
            if old <= tsc {
                track.str("+").hex(tsc - old, 0);
            } else {
                track.str("-").hex(old - tsc, 0);
            }
            self.tracking.tsc = tsc;
        } else {
            track.hex(tsc, 16);
        }
    }

    fn print_tcal(&mut self, offset: u64) {
        self.line.id = "fcr";
        let fcr = match self.tracking.tcal.fcr() {
            Ok(f) => f,
            Err(e) => {
                self.line.track.str("<unavailable>");
                self.diag(offset, "error printing time", Some(e));
                return;
            }
        };
        let scale = (1u64 << FCR_SHIFT) as f64;
        let dfcr = fcr as f64 / scale;
        let mut tmp = [0u8; 64];
        let mut cur = io::Cursor::new(&mut tmp[..]);
        // A float needs std's formatter; this only runs with --tcal, once per packet.
        let _ = if self.opts.show_time_as_delta {
            let old = self.tracking.fcr as f64 / scale;
            self.tracking.fcr = fcr;
            write!(cur, "{:+.3}", dfcr - old)
        } else {
            write!(cur, "{dfcr:.3}")
        };
        let n = cur.position() as usize;
        for &b in &tmp[..n] {
            self.line.track.push(b);
        }
    }
}

const BLANK16: [u8; 16] = [b' '; 16];

/// ptdump's opcode column for `p`, blank-padded.
#[inline]
fn opcode(p: &Packet) -> (&'static [u8; 16], usize) {
    macro_rules! op {
        ($s:literal) => {{
            const P: [u8; 16] = pad16($s);
            (&P, $s.len())
        }};
    }
    match p {
        Packet::Pad => op!("pad"),
        Packet::Psb => op!("psb"),
        Packet::Psbend => op!("psbend"),
        Packet::Ovf => op!("ovf"),
        Packet::Stop => op!("stop"),
        Packet::Tnt8(_) => op!("tnt.8"),
        Packet::Tnt64(_) => op!("tnt.64"),
        Packet::Ip(IpPacketKind::Tip, _) => op!("tip"),
        Packet::Ip(IpPacketKind::TipPge, _) => op!("tip.pge"),
        Packet::Ip(IpPacketKind::TipPgd, _) => op!("tip.pgd"),
        Packet::Ip(IpPacketKind::Fup, _) => op!("fup"),
        Packet::ModeExec(_) => op!("mode.exec"),
        Packet::ModeTsx(_) => op!("mode.tsx"),
        Packet::Pip { .. } => op!("pip"),
        Packet::Vmcs { .. } => op!("vmcs"),
        Packet::Tsc { .. } => op!("tsc"),
        Packet::Mtc { .. } => op!("mtc"),
        Packet::Tma { .. } => op!("tma"),
        Packet::Cyc { .. } => op!("cyc"),
        Packet::Cbr { .. } => op!("cbr"),
        Packet::Mnt { .. } => op!("mnt"),
        Packet::Ptw { .. } => op!("ptw"),
        Packet::Exstop { .. } => op!("exstop"),
        Packet::Mwait { .. } => op!("mwait"),
        Packet::Pwre { .. } => op!("pwre"),
        Packet::Pwrx { .. } => op!("pwrx"),
        Packet::Cfe { .. } => op!("cfe"),
        Packet::Evd { .. } => op!("evd"),
        Packet::Trig { .. } => op!("trig"),
        Packet::Invalid => op!("<invalid>"),
        // PEBS packets never get here (libipt does not know them); any other kind is
        // what libipt calls an unknown packet.
        _ => op!("<unknown>"),
    }
}

/// The packet's size on the wire. Only CYC can differ from [`Packet::size`] (which is
/// the minimal encoding): hardware may pad it with zero extension bytes.
#[inline]
fn wire_size(trace: &[u8], off: u64, p: &Packet) -> u64 {
    if !matches!(p, Packet::Cyc { .. }) {
        return p.size() as u64;
    }
    let Some(bytes) = trace.get(off as usize..) else {
        return p.size() as u64;
    };
    let mut n = 1;
    let mut more = bytes.first().is_some_and(|b| b & 4 != 0);
    while more {
        more = bytes.get(n).is_some_and(|b| b & 1 != 0);
        n += 1;
    }
    n as u64
}

/// ptdump's IP payload: `<ipc>: ` and the payload with `?` for the bits it does not carry.
fn format_ip<const N: usize>(f: &mut Field<N>, c: IpCompression, ip: u64) {
    f.hex(c as u64, 0).str(": ");
    match c {
        IpCompression::Suppressed => {
            f.str("????????????????");
        }
        IpCompression::Update16 => {
            f.str("????????????").hex(ip, 4);
        }
        IpCompression::Update32 => {
            f.str("????????").hex(ip, 8);
        }
        IpCompression::Update48 => {
            f.str("????").hex(ip, 12);
        }
        IpCompression::Sext48 => {
            f.hex(sext48(ip), 16);
        }
        IpCompression::Full => {
            f.hex(ip, 16);
        }
    }
}

/// libipt's names of the CFE types.
fn cfe_type_name(ty: u8) -> &'static str {
    match ty {
        1 => "intr",
        2 => "iret",
        3 => "smi",
        4 => "rsm",
        5 => "sipi",
        6 => "init",
        7 => "vmentry",
        8 => "vmexit",
        9 => "vmexit_intr",
        10 => "shutdown",
        12 => "uintr",
        13 => "uiret",
        14 => "swintr",
        15 => "syscall",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests;
