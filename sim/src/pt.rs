//! The PT logic: retired instructions and events in, the packets the
//! processor would write for the configuration out.
//!
//! [`PtLogic`] follows the SDM's "packets per operation" rules (spec §2.7):
//! TNT bits for conditional branches and compressed returns, TIP for indirect
//! branches and uncompressed returns, TIP.PGE/TIP.PGD where PacketEn changes
//! (CPL, IP filter, CR3 filter), FUP before the TIP or TIP.PGD of interrupts
//! and exceptions, MODE.Exec before a TIP.PGE or a far-branch TIP when
//! the mode changed or none was sent since the last PSB, PIP on MOV CR3 and
//! in PSB+ (OS = 1 and ContextEn), PSB+ every PSBFreq bytes of output, timing
//! packets from the [`Clock`], PTW and MODE.TSX on request, TraceStop ranges,
//! and an internal buffer that overflows (OVF) when output cannot drain fast
//! enough.
//!
//! # Privilege levels
//! ContextEn is `(CPL 0 ? OS : USER) && (!CR3Filter || CR3 == CR3_MATCH)`.
//! A source that [shows the kernel](crate::exec::ExecutionSource::shows_kernel)
//! gives kernel instructions ([`Retired::kernel`]) and CR3 writes
//! ([`Event::MovCr3`]): SYSCALL, SYSRET, IRET and interrupts are far
//! transfers whose packets depend on the context on both sides (`TIP`,
//! `TIP.PGE(target)`, or `TIP.PGD()` when ContextEn drops), and MOV CR3 gives
//! `PIP(new CR3)` while ContextEn holds, `TIP.PGD()` when it drops and
//! `PIP, TIP.PGE(NLIP)` when it rises.
//!
//! The real sources see user mode only. For them the kernel runs unseen
//! between a kernel entry and the next user instruction (a kernel entry
//! followed by an event or a user instruction): it is treated as untraced,
//! which is right for OS = 0 only. A configuration with OS = 1 therefore
//! needs a source that shows the kernel; [`crate::record::record_into`]
//! refuses others ([`PtError::KernelTracing`]). There the pid stands in for
//! CR3 ([`cr3_of_pid`]), set by [`Event::Exec`] without a PIP.
//!
//! Output bytes accumulate in [`PtLogic::output`]; the owner drains them.

use pt_encoder::packet::{sext48, IpCompression, IpPacketKind, IpPayload, LastIp, ModeExec};
use pt_encoder::{encode, ExecMode, ModeTsx, Packet, PtwSize, Tnt};
use pt_hal::config::TraceConfig;
use pt_hal::msr::AddrCfg;

use crate::clock::{Clock, ClockError, ClockParams};
use crate::exec::insn::{decode_at, KernelEntry};
use crate::exec::{
    BlockInsn, BlockRun, BlockTable, BranchClass, CodeBlock, CodeMemory, Event, ExecItem, Retired,
    RunView,
};

/// Depth of the return-compression call stack (the decoders' stack depth).
pub const RET_STACK_DEPTH: usize = 64;

/// A return-compression call stack: the last [`RET_STACK_DEPTH`] return
/// addresses pushed (the oldest dropped when full).
#[derive(Clone, Debug)]
struct RetStack {
    ips: [u64; RET_STACK_DEPTH],
    top: usize,
    len: usize,
}

impl RetStack {
    fn new() -> Self {
        RetStack {
            ips: [0; RET_STACK_DEPTH],
            top: 0,
            len: 0,
        }
    }

    fn push(&mut self, ip: u64) {
        self.top = (self.top + 1) % RET_STACK_DEPTH;
        self.ips[self.top] = ip;
        self.len = (self.len + 1).min(RET_STACK_DEPTH);
    }

    fn top(&self) -> Option<u64> {
        (self.len > 0).then(|| self.ips[self.top])
    }

    fn pop(&mut self) {
        if self.len > 0 {
            self.top = (self.top + RET_STACK_DEPTH - 1) % RET_STACK_DEPTH;
            self.len -= 1;
        }
    }

    fn clear(&mut self) {
        self.len = 0;
    }
}

/// CR3 bits a PIP carries (51:5).
const PIP_CR3_MASK: u64 = 0x000f_ffff_ffff_ffe0;

/// The CR3 value that stands for a process.
pub const fn cr3_of_pid(pid: u32) -> u64 {
    (pid as u64) << 12
}

/// How conditional-branch results are packed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TntPolicy {
    /// A TNT-8 as soon as six results are pending (what most cores do).
    #[default]
    Short,
    /// Up to 47 results per TNT-64; a flush of six or fewer uses TNT-8.
    Long,
}

/// The internal output buffer between packet generation and memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FifoModel {
    /// Capacity in bytes.
    pub capacity: u32,
    /// Bytes written to memory per 100 core cycles.
    pub drain_per_100_cycles: u32,
}

/// Everything besides the [`TraceConfig`] that shapes the packets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimParams {
    /// The clocks.
    pub clock: ClockParams,
    /// TNT packing.
    pub tnt: TntPolicy,
    /// The internal buffer; `None`: output never stalls.
    pub fifo: Option<FifoModel>,
}

/// A configuration the PT logic cannot model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PtError {
    /// OS = 1 with an execution source that sees user mode only.
    #[error(
        "kernel tracing (OS=1) cannot be simulated with this execution source: it sees user mode only"
    )]
    KernelTracing,
    /// The clock parameters are invalid.
    #[error(transparent)]
    Clock(#[from] ClockError),
}

/// Counters of what the logic produced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PtStats {
    /// Retired instructions seen.
    pub instructions: u64,
    /// Instructions retired while PacketEn was 1.
    pub traced: u64,
    /// Packets written.
    pub packets: u64,
    /// PSB+ sequences.
    pub psbs: u64,
    /// Overflows (OVF packets).
    pub overflows: u64,
    /// Bytes dropped by overflows.
    pub dropped_bytes: u64,
    /// Kernel entries into a kernel the source did not show (user-mode
    /// sources); with OS = 1 the trace lacks what that kernel would add.
    pub unseen_kernel_entries: u64,
}

/// Why execution of the current context leaves user mode.
enum Leave {
    /// A far transfer (SYSCALL, SYSENTER): TIP.PGD().
    FarBranch,
    /// An interrupt, exception or software interrupt at `ip`: FUP(ip), TIP.PGD().
    Interrupt(u64),
}

/// The simulated trace logic of one logical processor.
pub struct PtLogic {
    cfg: TraceConfig,
    params: SimParams,
    clock: Clock,
    out: Vec<u8>,
    /// Bytes produced since the start (the stream offset of the next byte).
    produced: u64,
    since_psb: u64,
    psb_period: u64,
    last_ip: LastIp,
    force_full_ip: bool,
    tnt_bits: u64,
    tnt_n: u32,
    tnt_max: u32,
    trace_en: bool,
    stopped: bool,
    error: bool,
    packet_en: bool,
    /// CPL 0: the current instruction is kernel code, or an unseen kernel
    /// runs (between a kernel entry and the next user instruction).
    in_kernel: bool,
    cr3: u64,
    mode: Option<ExecMode>,
    mode_sent: Option<ExecMode>,
    /// Return compression as libipt's decoders model it: a RET pops only
    /// when it is compressed.
    ret_libipt: RetStack,
    /// Return compression as perf's decoder models it: every traced RET pops.
    ret_perf: RetStack,
    /// A traced far transfer's target, waiting for the context and mode of
    /// the next instruction.
    pending_far: Option<u64>,
    /// A kernel entry from user mode whose destination is not known yet:
    /// kernel code (if the next item is a kernel instruction) or an unseen
    /// kernel. Holds its `next_ip`.
    pending_entry: Option<u64>,
    /// Where the next user instruction is expected (for FUPs at the end).
    next_ip: Option<u64>,
    tsx: ModeTsx,
    filters: Vec<(u64, u64)>,
    stops: Vec<(u64, u64)>,
    /// Next core cycle at which an MTC is due.
    next_mtc_cycle: u64,
    mtc_period_ctc: u64,
    /// CTC >> MTCFreq at the last MTC (or at enable).
    last_mtc_period: u64,
    last_cyc_cycle: u64,
    /// While set, CYC packets count cycles only up to here (an MTC edge).
    cyc_limit: Option<u64>,
    cyc_thresh: u64,
    fifo_level: u64,
    overflowing: bool,
    fifo_checked_cycle: u64,
    stats: PtStats,
}

impl PtLogic {
    /// Logic for a configuration; tracing is off until [`Self::enable`].
    pub fn new(cfg: TraceConfig, params: SimParams) -> Result<Self, PtError> {
        params.clock.validate()?;
        let filters = cfg
            .ranges
            .iter()
            .filter(|r| r.cfg == AddrCfg::Filter)
            .map(|r| (r.start, r.end))
            .collect();
        let stops = cfg
            .ranges
            .iter()
            .filter(|r| r.cfg == AddrCfg::TraceStop)
            .map(|r| (r.start, r.end))
            .collect();
        let cyc_thresh = match cfg.cyc {
            Some(0) | None => 0,
            Some(n) => 1u64 << (n - 1).min(62),
        };
        Ok(PtLogic {
            cfg,
            params,
            clock: Clock::new(params.clock),
            out: Vec::with_capacity(4096),
            produced: 0,
            since_psb: 0,
            psb_period: 2048u64 << cfg.psb_freq.min(15),
            last_ip: LastIp::new(),
            force_full_ip: false,
            tnt_bits: 0,
            tnt_n: 0,
            tnt_max: match params.tnt {
                TntPolicy::Short => Tnt::MAX_SHORT,
                TntPolicy::Long => Tnt::MAX_LONG,
            },
            trace_en: false,
            stopped: false,
            error: false,
            packet_en: false,
            in_kernel: true,
            cr3: 0,
            mode: None,
            mode_sent: None,
            ret_libipt: RetStack::new(),
            ret_perf: RetStack::new(),
            pending_far: None,
            pending_entry: None,
            next_ip: None,
            tsx: ModeTsx::default(),
            filters,
            stops,
            next_mtc_cycle: u64::MAX,
            mtc_period_ctc: 1u64 << cfg.mtc.unwrap_or(0).min(15),
            last_mtc_period: 0,
            last_cyc_cycle: 0,
            cyc_limit: None,
            cyc_thresh,
            fifo_level: 0,
            overflowing: false,
            fifo_checked_cycle: 0,
            stats: PtStats::default(),
        })
    }

    /// Replaces the configuration while TraceEn = 0 (WRMSR IA32_RTIT_CTL and
    /// friends); the clock, mode and process state carry over.
    pub fn set_config(&mut self, cfg: TraceConfig) -> Result<(), PtError> {
        let mut fresh = PtLogic::new(cfg, self.params)?;
        fresh.clock = self.clock;
        fresh.produced = self.produced;
        fresh.since_psb = self.since_psb;
        fresh.in_kernel = self.in_kernel;
        fresh.pending_entry = self.pending_entry;
        fresh.cr3 = self.cr3;
        fresh.mode = self.mode;
        fresh.next_ip = self.next_ip;
        fresh.tsx = self.tsx;
        fresh.stopped = self.stopped;
        fresh.error = self.error;
        fresh.stats = self.stats;
        fresh.out = std::mem::take(&mut self.out);
        *self = fresh;
        Ok(())
    }

    /// The configuration.
    pub fn config(&self) -> &TraceConfig {
        &self.cfg
    }

    /// The simulation parameters.
    pub fn params(&self) -> &SimParams {
        &self.params
    }

    /// The clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Counters.
    pub fn stats(&self) -> PtStats {
        self.stats
    }

    /// Bytes produced since the start: the trace offset of the next byte.
    pub fn produced(&self) -> u64 {
        self.produced
    }

    /// Output not yet taken by the owner.
    pub fn output(&self) -> &[u8] {
        &self.out
    }

    /// Takes the pending output (appends it to `dst`).
    pub fn drain_into(&mut self, dst: &mut Vec<u8>) {
        dst.extend_from_slice(&self.out);
        self.out.clear();
    }

    /// Drops the pending output (the owner copied it from [`Self::output`]).
    pub fn clear_output(&mut self) {
        self.out.clear();
    }

    /// PacketEn: control-flow packets are being generated.
    pub fn packet_en(&self) -> bool {
        self.packet_en
    }

    /// TriggerEn: TraceEn and neither Stopped nor Error.
    #[inline]
    pub fn trigger_en(&self) -> bool {
        self.trace_en && !self.stopped && !self.error
    }

    /// Status.Error: an operational error (bad output configuration) stops
    /// packet generation until software clears it.
    pub fn set_error(&mut self, error: bool) {
        self.error = error;
        if error {
            self.packet_en = false;
        }
    }

    /// Status.Error.
    pub fn error(&self) -> bool {
        self.error
    }

    /// Status.Stopped (TraceStop range or ToPA STOP).
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// ContextEn for the current privilege level and CR3.
    #[inline]
    pub fn context_en(&self) -> bool {
        let cpl_ok = if self.in_kernel {
            self.cfg.os
        } else {
            self.cfg.user
        };
        cpl_ok && self.cr3_ok()
    }

    /// The current CR3.
    pub fn cr3(&self) -> u64 {
        self.cr3
    }

    /// FilterEn for an IP.
    #[inline]
    pub fn filter_en(&self, ip: u64) -> bool {
        self.filters.is_empty() || self.filters.iter().any(|&(a, b)| a <= ip && ip <= b)
    }

    #[inline]
    fn cr3_ok(&self) -> bool {
        self.cfg
            .cr3_filter
            .map_or(true, |m| m & !0x1f == self.cr3 & !0x1f)
    }

    #[inline]
    fn want_packet_en(&self, ip: u64) -> bool {
        self.trigger_en() && self.context_en() && self.filter_en(ip) && self.cfg.branch
    }

    // ---- output ----

    /// Writes one packet (or drops it during an overflow). Returns whether
    /// it was written. Inlined: at each call the packet's kind is known, and
    /// its encoding reduces to the few bytes of that kind.
    #[inline]
    fn put(&mut self, p: &Packet) -> bool {
        if self.overflowing {
            self.stats.dropped_bytes += p.size() as u64;
            return false;
        }
        let mut buf = [0u8; pt_encoder::packet::MAX_PACKET_SIZE];
        let Ok(n) = encode(p, &mut buf) else {
            // Every packet built here fits its fields; nothing to write otherwise.
            return false;
        };
        if let Some(f) = self.params.fifo {
            self.drain_fifo();
            if self.fifo_level + n as u64 > u64::from(f.capacity) {
                self.overflowing = true;
                self.stats.dropped_bytes += n as u64;
                return false;
            }
            self.fifo_level += n as u64;
        }
        // Byte by byte: packets are a few bytes (most one), where a slice
        // copy would call memcpy.
        for &b in &buf[..n] {
            self.out.push(b);
        }
        self.produced += n as u64;
        self.since_psb += n as u64;
        self.stats.packets += 1;
        true
    }

    fn drain_fifo(&mut self) {
        if let Some(f) = self.params.fifo {
            let now = self.clock.cycles();
            let dt = now.saturating_sub(self.fifo_checked_cycle);
            let drained = dt.saturating_mul(u64::from(f.drain_per_100_cycles)) / 100;
            if drained > 0 {
                self.fifo_level = self.fifo_level.saturating_sub(drained);
                // Keep the remainder of the cycles that drained nothing yet.
                self.fifo_checked_cycle = now;
            }
        }
    }

    /// A CYC before a CYC-eligible packet, once the threshold is reached.
    fn cyc(&mut self) {
        self.cyc_upto(self.cyc_limit.unwrap_or(self.clock.cycles()));
    }

    /// A CYC counting the cycles up to `now`.
    fn cyc_upto(&mut self, now: u64) {
        if self.cfg.cyc.is_none() {
            return;
        }
        let n = now.saturating_sub(self.last_cyc_cycle);
        if n > 0
            && n >= self.cyc_thresh
            && self.put(&Packet::Cyc {
                value: n & ((1 << 61) - 1),
            })
        {
            self.last_cyc_cycle = now;
        }
    }

    fn ip_packet(&mut self, kind: IpPacketKind, ip: Option<u64>) {
        self.cyc();
        let payload = match ip {
            None => IpPayload::SUPPRESSED,
            Some(ip) if self.force_full_ip => uncompressed(ip),
            Some(ip) => self.last_ip.compress(ip),
        };
        if self.put(&Packet::Ip(kind, payload)) && ip.is_some() {
            self.last_ip.update(payload);
            self.force_full_ip = false;
        }
    }

    fn flush_tnt(&mut self) {
        if self.tnt_n == 0 {
            return;
        }
        let payload = (1u64 << self.tnt_n) | self.tnt_bits;
        self.tnt_n = 0;
        self.tnt_bits = 0;
        let Some(t) = Tnt::from_payload(payload) else {
            return;
        };
        self.cyc();
        if t.len() <= Tnt::MAX_SHORT {
            self.put(&Packet::Tnt8(t));
        } else {
            self.put(&Packet::Tnt64(t));
        }
    }

    fn tnt(&mut self, taken: bool) {
        self.tnt_bits = self.tnt_bits << 1 | u64::from(taken);
        self.tnt_n += 1;
        if self.tnt_n >= self.tnt_max {
            self.flush_tnt();
        }
    }

    fn mode_exec(&mut self, mode: ExecMode) {
        self.cyc();
        if self.put(&Packet::ModeExec(ModeExec::from_mode(mode))) {
            self.mode_sent = Some(mode);
        }
    }

    fn ret_push(&mut self, ip: u64) {
        self.ret_libipt.push(ip);
        self.ret_perf.push(ip);
    }

    /// A traced RET to `ip`: whether it is compressed. libipt and perf
    /// disagree on the call stack (perf pops at every RET, libipt at
    /// compressed ones only) and compression is optional, so a RET is
    /// compressed only where both decoders' stacks return to `ip`; every
    /// decoder then follows the trace.
    fn ret_compressed(&mut self, ip: u64) -> bool {
        let compress = self.ret_libipt.top() == Some(ip) && self.ret_perf.top() == Some(ip);
        self.ret_perf.pop();
        if compress {
            self.ret_libipt.pop();
        }
        compress
    }

    fn ret_clear(&mut self) {
        self.ret_libipt.clear();
        self.ret_perf.clear();
    }

    // ---- timing ----

    fn schedule_mtc(&mut self) {
        if self.cfg.mtc.is_none() {
            self.next_mtc_cycle = u64::MAX;
            return;
        }
        let ctc = self.clock.ctc();
        let next = (ctc / self.mtc_period_ctc + 1) * self.mtc_period_ctc;
        self.next_mtc_cycle = self.clock.cycle_of_tsc(self.clock.tsc_of_ctc(next));
    }

    /// Advances the clock and writes the MTCs of the crystal periods that began.
    fn advance(&mut self, cycles: u64) {
        self.clock.advance(cycles);
        if self.clock.cycles() >= self.next_mtc_cycle {
            self.mtcs();
        }
    }

    #[cold]
    fn mtcs(&mut self) {
        let last = self.clock.ctc() / self.mtc_period_ctc;
        if self.trigger_en() && last > self.last_mtc_period {
            // Cycles up to the first crystal edge go before the MTC (with any
            // pending TNT), so that decoders never see time run backwards.
            let edge = self.next_mtc_cycle;
            self.cyc_limit = Some(edge);
            self.flush_tnt();
            self.cyc_upto(edge);
            self.cyc_limit = None;
            // More than 256 periods in a row cannot be told apart: send the last 256.
            let from = (self.last_mtc_period + 1).max(last.saturating_sub(255));
            for p in from..=last {
                self.put(&Packet::Mtc { ctc: p as u8 });
            }
        }
        self.last_mtc_period = last;
        self.schedule_mtc();
    }

    // ---- PSB+ ----

    fn psb_plus(&mut self) {
        self.flush_tnt();
        if !self.put(&Packet::Psb) {
            return;
        }
        self.stats.psbs += 1;
        self.since_psb = 0;
        self.last_ip.reset();
        self.ret_clear();
        self.mode_sent = None;
        if self.cfg.tsc {
            self.put(&Packet::Tsc {
                tsc: self.clock.tsc() & ((1 << 56) - 1),
            });
            if self.cfg.mtc.is_some() {
                let (ctc, fc) = self.clock.tma();
                self.put(&Packet::Tma { ctc, fc });
            }
        }
        if self.cfg.os && self.context_en() {
            self.pip();
        }
        self.put(&Packet::Cbr {
            ratio: self.params.clock.cbr,
        });
        if self.context_en() && self.cfg.branch && self.tsx.intx {
            self.put(&Packet::ModeTsx(self.tsx));
        }
        if self.packet_en {
            if let (Some(m), Some(ip)) = (self.mode, self.next_ip) {
                if self.put(&Packet::ModeExec(ModeExec::from_mode(m))) {
                    self.mode_sent = Some(m);
                }
                // The PSB+ FUP does not lean on the last IP: perf reads its
                // compressed IP against the last IP from before the PSB
                // (`intel_pt_psb_with_fup`), libipt against 0. A sign-extended
                // or full IP means the same to both.
                let payload = uncompressed(ip);
                if self.put(&Packet::Ip(IpPacketKind::Fup, payload)) {
                    self.last_ip.update(payload);
                }
            }
        }
        self.put(&Packet::Psbend);
    }

    // ---- control ----

    /// WRMSR IA32_RTIT_CTL.TraceEn 0→1: a PSB+ with TSC, TMA and CBR, then
    /// tracing starts at the next instruction (MODE.Exec, TIP.PGE) if it is
    /// in context.
    pub fn enable(&mut self) {
        if self.trace_en {
            return;
        }
        self.trace_en = true;
        self.since_psb = 0;
        self.last_cyc_cycle = self.clock.cycles();
        self.last_mtc_period = self.clock.ctc() / self.mtc_period_ctc;
        self.schedule_mtc();
        if self.trigger_en() {
            self.psb_plus();
        }
    }

    /// WRMSR IA32_RTIT_CTL.TraceEn 1→0: pending TNT, then FUP(next IP) and
    /// TIP.PGD() if packets were enabled.
    pub fn disable(&mut self) {
        if let Some(t) = self.pending_entry.take() {
            self.settle_entry(t, false);
        }
        if !self.trace_en {
            return;
        }
        self.flush_tnt();
        if self.packet_en {
            if let Some(far) = self.pending_far.take() {
                self.ip_packet(IpPacketKind::Tip, Some(far));
            }
            if let Some(ip) = self.next_ip {
                self.ip_packet(IpPacketKind::Fup, Some(ip));
            }
            self.ip_packet(IpPacketKind::TipPgd, None);
            self.packet_en = false;
        }
        self.trace_en = false;
    }

    /// Time passed while TraceEn was 0 (the logical processor ran other
    /// threads): the clock moves on to core cycle `cycles`. Ignored while
    /// tracing and for a time in the past: the clock never runs backwards.
    pub fn catch_up(&mut self, cycles: u64) {
        let now = self.clock.cycles();
        if !self.trace_en && cycles > now {
            self.clock.advance(cycles - now);
        }
    }

    /// Sets Status.Stopped (ToPA STOP region full): generation stops silently.
    pub fn set_stopped(&mut self) {
        self.stopped = true;
        self.packet_en = false;
        self.tnt_n = 0;
        self.tnt_bits = 0;
    }

    /// Clears Status.Stopped (software rewrote IA32_RTIT_STATUS while TraceEn = 0).
    pub fn clear_stopped(&mut self) {
        self.stopped = false;
    }

    /// Bytes of output towards the next PSB (Status.PacketByteCnt).
    pub fn packet_byte_cnt(&self) -> u64 {
        self.since_psb
    }

    /// Sets Status.PacketByteCnt (0 makes the next enable write a PSB+, as always here).
    pub fn set_packet_byte_cnt(&mut self, n: u64) {
        self.since_psb = n;
    }

    /// The current instruction is about to execute at `ip` in `mode`, at CPL 0
    /// if `kernel`.
    #[inline]
    fn begin(&mut self, ip: u64, mode: ExecMode, kernel: bool) {
        self.in_kernel = kernel;
        if self.overflowing {
            self.resolve_overflow(ip);
        }
        let mode_changed = self.mode != Some(mode);
        self.mode = Some(mode);
        self.next_ip = Some(ip);
        if let Some(target) = self.pending_far.take() {
            self.flush_tnt();
            if self.want_packet_en(ip) {
                if mode_changed || self.mode_sent != Some(mode) {
                    self.mode_exec(mode);
                }
                self.ip_packet(IpPacketKind::Tip, Some(target));
            } else {
                // SDM: no IP when the transfer cleared ContextEn (CPL, CR3).
                let ip = self.context_en().then_some(target);
                self.ip_packet(IpPacketKind::TipPgd, ip);
                self.packet_en = false;
            }
        }
        if self.since_psb >= self.psb_period && self.trigger_en() {
            self.psb_plus();
        }
        if !self.stops.is_empty() && self.trigger_en() && self.in_stop_range(ip) {
            self.trace_stop(ip);
        }
        let want = self.want_packet_en(ip);
        if want != self.packet_en {
            if want {
                self.flush_tnt();
                if self.mode_sent != Some(mode) {
                    self.mode_exec(mode);
                }
                self.ip_packet(IpPacketKind::TipPge, Some(ip));
            } else {
                // Only a linear step out of a filter range gets here.
                self.flush_tnt();
                self.ip_packet(IpPacketKind::TipPgd, Some(ip));
            }
            self.packet_en = want;
        }
    }

    fn in_stop_range(&self, ip: u64) -> bool {
        self.stops.iter().any(|&(a, b)| a <= ip && ip <= b)
    }

    #[cold]
    fn trace_stop(&mut self, ip: u64) {
        self.flush_tnt();
        if self.packet_en {
            self.ip_packet(IpPacketKind::TipPgd, Some(ip));
            self.packet_en = false;
        }
        self.cyc();
        self.put(&Packet::Stop);
        self.stopped = true;
    }

    #[cold]
    fn resolve_overflow(&mut self, ip: u64) {
        self.drain_fifo();
        if self.fifo_level > 0 {
            return;
        }
        self.overflowing = false;
        self.stats.overflows += 1;
        self.tnt_n = 0;
        self.tnt_bits = 0;
        self.ret_clear();
        // A far branch whose TIP was lost: the FUP below says where execution is.
        self.pending_far = None;
        self.cyc();
        self.put(&Packet::Ovf);
        // The decoder restarts at the FUP: compress it against nothing.
        self.force_full_ip = true;
        let want = self.want_packet_en(ip);
        if want && self.packet_en {
            self.ip_packet(IpPacketKind::Fup, Some(ip));
        } else if want {
            // Enabled again by the overflow's end: the TIP.PGE below reports it.
        } else {
            self.packet_en = false;
        }
    }

    /// One retired instruction. `mem` holds its code (needed only to tell a
    /// SYSCALL from an INT n).
    #[inline]
    pub fn retire(&mut self, r: &Retired, mem: &CodeMemory) {
        self.stats.instructions += 1;
        if let Some(t) = self.pending_entry.take() {
            self.settle_entry(t, r.kernel);
        }
        self.begin(r.ip, r.mode, r.kernel);
        self.advance(u64::from(self.params.clock.cycles_per_insn));
        self.next_ip = Some(r.next_ip);
        if self.packet_en {
            self.stats.traced += 1;
        }
        self.retire_end(r, mem);
    }

    /// What a retired instruction writes once it ran (the clock advanced,
    /// `next_ip` set): its branch's packets, a kernel entry's start.
    #[inline]
    fn retire_end(&mut self, r: &Retired, mem: &CodeMemory) {
        if r.class == BranchClass::KernelEntry && !r.kernel {
            self.enter_kernel(r, mem);
            return;
        }
        if !self.packet_en {
            // A far branch changes nothing to report while disabled: the next
            // instruction's context decides about a TIP.PGE.
            return;
        }
        let ft = r.fall_through();
        let leaves_filter = !self.filters.is_empty() && !self.filter_en(r.next_ip);
        match r.class {
            BranchClass::Other => {
                if leaves_filter {
                    self.flush_tnt();
                    self.ip_packet(IpPacketKind::TipPgd, Some(r.next_ip));
                    self.packet_en = false;
                }
            }
            BranchClass::CondBranch => {
                if leaves_filter {
                    // SDM: the branch leaving the range gets a TIP.PGD without IP.
                    self.flush_tnt();
                    self.ip_packet(IpPacketKind::TipPgd, None);
                    self.packet_en = false;
                } else if !self.cfg.dis_tnt {
                    self.tnt(r.next_ip != ft);
                }
            }
            BranchClass::DirectJump | BranchClass::DirectCall => {
                if r.class == BranchClass::DirectCall && r.next_ip != ft {
                    self.ret_push(ft);
                }
                if leaves_filter {
                    self.flush_tnt();
                    self.ip_packet(IpPacketKind::TipPgd, Some(r.next_ip));
                    self.packet_en = false;
                }
            }
            BranchClass::IndirectJump | BranchClass::IndirectCall => {
                if r.class == BranchClass::IndirectCall {
                    self.ret_push(ft);
                }
                self.flush_tnt();
                if leaves_filter {
                    self.ip_packet(IpPacketKind::TipPgd, Some(r.next_ip));
                    self.packet_en = false;
                } else {
                    self.ip_packet(IpPacketKind::Tip, Some(r.next_ip));
                }
            }
            BranchClass::Return => {
                if leaves_filter {
                    // perf's decoder walks the RET (and pops) before the TIP.PGD.
                    self.ret_perf.pop();
                    self.flush_tnt();
                    self.ip_packet(IpPacketKind::TipPgd, Some(r.next_ip));
                    self.packet_en = false;
                } else if !self.cfg.dis_retc && !self.cfg.dis_tnt && self.ret_compressed(r.next_ip)
                {
                    self.tnt(true);
                } else {
                    self.flush_tnt();
                    self.ip_packet(IpPacketKind::Tip, Some(r.next_ip));
                }
            }
            BranchClass::FarBranch => {
                self.flush_tnt();
                self.pending_far = Some(r.next_ip);
            }
            BranchClass::KernelEntry => {
                // At CPL 0 (an INT n in the kernel): a far transfer within it.
                self.flush_tnt();
                if !is_syscall(r, mem) {
                    self.ip_packet(IpPacketKind::Fup, Some(r.ip));
                }
                self.pending_far = Some(r.next_ip);
            }
        }
    }

    /// A block run's instructions, as [`Self::retire`] of each of
    /// [`RunView::retired`] would give them, byte for byte. The block's
    /// straight-line body goes in one step where nothing can be written
    /// between its instructions (see `Self::retire_plain_run`); the rest,
    /// and every instruction where something can, take the general path.
    pub fn retire_block(&mut self, run: RunView<'_>, mem: &CodeMemory) {
        let n = run.count();
        if n == 0 {
            return;
        }
        let insns = &run.block.insns;
        if run.block.plain_body && n == insns.len() && self.quiet_for(run.block.start(), n) {
            self.retire_whole(run.block, run.next_ip, mem);
            return;
        }
        self.retire_block_stepwise(run, mem);
    }

    /// Block runs in order, each as [`Self::retire_block`] gives it, until
    /// the pending output reaches `out_limit` bytes (the owner moves it on
    /// then): returns how many runs were taken (at least one, if there are
    /// any) and the instructions they retired. Runs whose block `table`
    /// lacks are skipped. One call per batch, not per block: the loop keeps
    /// the logic's state at hand between blocks.
    pub fn retire_blocks(
        &mut self,
        runs: &[BlockRun],
        table: &BlockTable,
        mem: &CodeMemory,
        out_limit: usize,
    ) -> (usize, u64) {
        let cpi = u64::from(self.params.clock.cycles_per_insn);
        let mut insns = 0u64;
        // What `quiet_for` asks of the state that a quiet block leaves as
        // it is (all but the PSB and MTC deadlines), asked again after any
        // block that took another way.
        let mut quiet = self.quiet_state();
        for (k, run) in runs.iter().enumerate() {
            let Some(head) = table.head(run.block) else {
                continue;
            };
            let n = head.len as usize - usize::from(!run.retire_last);
            insns += n as u64;
            let steps = cpi * n as u64;
            if quiet
                && head.plain_body()
                && run.retire_last
                && self.since_psb < self.psb_period
                && (self.next_mtc_cycle == u64::MAX
                    || cpi == 0
                    || self.clock.cycles().saturating_add(steps) < self.next_mtc_cycle)
            {
                // As `retire_whole` (`quiet_for` holds: packets are on or
                // off for good, no filter), with the commonest last
                // instructions' packets written here.
                self.clock.advance(steps);
                self.stats.instructions += n as u64;
                let next_ip = run.next_ip;
                self.next_ip = Some(next_ip);
                let last = || Retired {
                    ip: head.last_ip,
                    next_ip,
                    len: head.last_len,
                    class: head.class,
                    mode: ExecMode::Bit64,
                    kernel: false,
                };
                if self.packet_en {
                    self.stats.traced += n as u64;
                    match head.class {
                        BranchClass::Other | BranchClass::DirectJump => {}
                        BranchClass::CondBranch if !self.cfg.dis_tnt => {
                            self.tnt(next_ip != head.fall_through());
                        }
                        BranchClass::DirectCall => {
                            let ft = head.fall_through();
                            if next_ip != ft {
                                self.ret_push(ft);
                            }
                        }
                        _ => {
                            self.retire_end(&last(), mem);
                            quiet = self.quiet_state();
                        }
                    }
                } else if head.class == BranchClass::KernelEntry {
                    self.retire_end(&last(), mem);
                    quiet = self.quiet_state();
                }
            } else if n > 0 {
                if let Some(view) = table.run(run) {
                    self.retire_block(view, mem);
                }
                quiet = self.quiet_state();
            }
            if self.out.len() >= out_limit {
                return (k + 1, insns);
            }
        }
        (runs.len(), insns)
    }

    /// The part of [`Self::quiet_at`] that a block retired in one step
    /// ([`Self::retire_whole`]) keeps as it is, unless its last
    /// instruction is a far transfer or kernel entry: with no filter
    /// configured, packet generation does not depend on the IP. The PSB
    /// deadline is asked only while TriggerEn, which such a block keeps too.
    #[inline]
    fn quiet_state(&self) -> bool {
        self.quiet_setup() && self.trigger_en() && self.want_packet_en(0) == self.packet_en
    }

    /// The conditions [`Self::quiet_at`] and [`Self::quiet_state`] share:
    /// nothing pending, 64-bit user mode, no overflow, no filter, stop
    /// range or output FIFO.
    #[inline]
    fn quiet_setup(&self) -> bool {
        !(self.pending_far.is_some()
            || self.pending_entry.is_some()
            || self.in_kernel
            || self.overflowing
            || self.params.fifo.is_some()
            || self.mode != Some(ExecMode::Bit64)
            || !self.filters.is_empty()
            || !self.stops.is_empty())
    }

    /// A whole block with a plain body in one step (its last instruction
    /// going to `next_ip`), where [`Self::quiet_for`] holds: nothing is due
    /// before its last instruction's end, which writes what it writes.
    #[inline(always)]
    fn retire_whole(&mut self, block: &CodeBlock, next_ip: u64, mem: &CodeMemory) {
        let n = block.insns.len() as u64;
        self.clock
            .advance(u64::from(self.params.clock.cycles_per_insn) * n);
        self.stats.instructions += n;
        if self.packet_en {
            self.stats.traced += n;
        }
        self.next_ip = Some(next_ip);
        self.retire_end(&block.last().retired(next_ip), mem);
    }

    /// [`Self::retire_block`] where the block cannot go in one step: its
    /// instructions one by one, straight-line stretches of the body at once.
    fn retire_block_stepwise(&mut self, run: RunView<'_>, mem: &CodeMemory) {
        let n = run.count();
        let insns = &run.block.insns;
        // The first instruction settles what the block was entered with
        // (a pending far transfer or kernel entry, a mode, a TIP.PGE).
        self.retire(&run.insn(0), mem);
        if n == 1 {
            return;
        }
        // Instructions 1..n-1 are the body's (the last may be a branch).
        let mut i = 1;
        if run.block.plain_body {
            while i < n - 1 {
                let k = self.retire_plain_run(&insns[i..n - 1]);
                i += k;
                if i < n - 1 {
                    // Something is due at this one: the general path.
                    self.retire(&run.insn(i), mem);
                    i += 1;
                }
            }
        }
        for j in i..n {
            self.retire(&run.insn(j), mem);
        }
    }

    /// The state-only conditions of a quiet run starting at `ip` (see
    /// [`Self::retire_plain_run`]): nothing pending, 64-bit user mode, no
    /// filter, stop range or FIFO, no PSB due, packet generation unchanged.
    #[inline]
    fn quiet_at(&self, ip: u64) -> bool {
        self.quiet_setup()
            && !(self.since_psb >= self.psb_period && self.trigger_en())
            && self.want_packet_en(ip) == self.packet_en
    }

    /// Whether `n` instructions from `ip` on (non-branches but the last, in
    /// 64-bit user mode) go through [`Self::retire`] with nothing written
    /// or changed before the last one's end but the clock, the counters and
    /// the next IP: the conditions of [`Self::retire_plain_run`], for all
    /// `n` (the clock stays before the next MTC edge after the last).
    #[inline]
    fn quiet_for(&self, ip: u64, n: usize) -> bool {
        if !self.quiet_at(ip) {
            return false;
        }
        let cpi = u64::from(self.params.clock.cycles_per_insn);
        self.next_mtc_cycle == u64::MAX
            || cpi == 0
            || self.clock.cycles().saturating_add(cpi * n as u64) < self.next_mtc_cycle
    }

    /// Retires the longest prefix of `body` (non-branches, each going to the
    /// next, in 64-bit user mode) during which [`Self::retire`] would write
    /// nothing and change nothing but the clock, the counters and the next
    /// IP; returns its length (0 when the next instruction needs the
    /// general path). That holds while no far transfer or kernel entry is
    /// pending, the logic is in 64-bit user mode already, no filter, stop
    /// range or output FIFO is configured (each can act at any IP), no PSB
    /// is due and the clock stays before the next MTC edge.
    #[inline]
    fn retire_plain_run(&mut self, body: &[BlockInsn]) -> usize {
        if body.is_empty() || !self.quiet_at(body[0].ip) {
            return 0;
        }
        let cpi = u64::from(self.params.clock.cycles_per_insn);
        let now = self.clock.cycles();
        // Instructions whose clock advance stays before the MTC edge.
        let k = match (cpi, self.next_mtc_cycle) {
            (0, _) | (_, u64::MAX) => body.len(),
            (c, edge) if edge > now => (((edge - now - 1) / c) as usize).min(body.len()),
            _ => 0,
        };
        if k == 0 {
            return 0;
        }
        self.clock.advance(cpi * k as u64);
        self.stats.instructions += k as u64;
        if self.packet_en {
            self.stats.traced += k as u64;
        }
        self.next_ip = Some(body[k - 1].fall_through());
        k
    }

    /// A kernel entry instruction (SYSCALL, SYSENTER, INT n...) retired in
    /// user mode: INT n and the like report their IP now (FUP(CLIP)); the
    /// rest waits for the next item, which tells where the entry went.
    fn enter_kernel(&mut self, r: &Retired, mem: &CodeMemory) {
        // (begin() resolved any far transfer before this instruction.)
        if self.packet_en {
            self.flush_tnt();
            if !is_syscall(r, mem) {
                self.ip_packet(IpPacketKind::Fup, Some(r.ip));
            }
        }
        self.pending_entry = Some(r.next_ip);
    }

    /// Completes a kernel entry from user mode: into the kernel code that
    /// follows (`to_kernel_code`), a far transfer to `target` resolved by
    /// that instruction's context; else into an unseen kernel, which is not
    /// traced: TIP.PGD().
    fn settle_entry(&mut self, target: u64, to_kernel_code: bool) {
        if to_kernel_code {
            if self.packet_en {
                self.pending_far = Some(target);
            }
            return;
        }
        if self.packet_en {
            self.ip_packet(IpPacketKind::TipPgd, None);
            self.packet_en = false;
        }
        self.stats.unseen_kernel_entries += 1;
        self.in_kernel = true;
        self.advance(u64::from(self.params.clock.kernel_cycles));
    }

    /// MOV to CR3 (the instruction retired; the next one is at `next_ip`).
    fn mov_cr3(&mut self, cr3: u64) {
        self.cr3 = cr3;
        let context = self.context_en();
        if self.trigger_en() && context && self.cfg.os {
            self.flush_tnt();
            self.pip();
        }
        if self.packet_en && !context {
            self.flush_tnt();
            self.ip_packet(IpPacketKind::TipPgd, None);
            self.packet_en = false;
        }
        // ContextEn rising: the next instruction's TIP.PGE(NLIP) follows the PIP.
    }

    fn pip(&mut self) {
        self.put(&Packet::Pip {
            cr3: self.cr3 & PIP_CR3_MASK,
            nr: false,
        });
    }

    /// An interrupt or exception before the instruction at `from_ip` (CPL 0
    /// if `from_kernel`), into kernel code at `handler`: FUP(from_ip), then
    /// the handler's context decides between TIP and TIP.PGD.
    fn interrupt(&mut self, from_ip: u64, from_kernel: bool, handler: u64) {
        self.in_kernel = from_kernel;
        if let Some(far) = self.pending_far.take() {
            // A far transfer whose target was interrupted before it ran: its
            // packet as the target's context says (the mode is not known).
            self.flush_tnt();
            if self.want_packet_en(from_ip) {
                self.ip_packet(IpPacketKind::Tip, Some(far));
            } else {
                let ip = self.context_en().then_some(far);
                self.ip_packet(IpPacketKind::TipPgd, ip);
                self.packet_en = false;
            }
        }
        if self.packet_en {
            self.flush_tnt();
            self.ip_packet(IpPacketKind::Fup, Some(from_ip));
            self.pending_far = Some(handler);
        }
        self.next_ip = Some(handler);
    }

    fn leave_user(&mut self, how: Leave) {
        self.flush_tnt();
        if self.packet_en {
            if let Some(far) = self.pending_far.take() {
                self.ip_packet(IpPacketKind::Tip, Some(far));
            }
            if let Leave::Interrupt(ip) = how {
                self.ip_packet(IpPacketKind::Fup, Some(ip));
            }
            // ContextEn drops with CPL 0 and OS = 0: the target is not exposed.
            self.ip_packet(IpPacketKind::TipPgd, None);
            self.packet_en = false;
        }
        self.in_kernel = true;
        self.advance(u64::from(self.params.clock.kernel_cycles));
    }

    /// An event between instructions.
    pub fn event(&mut self, e: &Event) {
        if let Some(t) = self.pending_entry.take() {
            // Only sources that show the kernel report interrupts: one here
            // came before the first instruction of the kernel code entered.
            self.settle_entry(t, matches!(e, Event::Interrupt { .. }));
        }
        match e {
            Event::Exec { pid, .. } => self.cr3 = cr3_of_pid(*pid),
            Event::Signal { from_ip, .. } => {
                if !self.in_kernel {
                    // Asynchronous: an interrupt (or a fault at `from_ip`) takes user mode away.
                    self.leave_user(Leave::Interrupt(*from_ip));
                }
                // Either way the kernel returns to the handler or `from_ip`: the
                // next instruction's TIP.PGE tells where.
            }
            // Threads are the owner's business: each has a logic of its own.
            Event::SyscallEnter { .. }
            | Event::SyscallExit { .. }
            | Event::Mappings(_)
            | Event::Switch(_)
            | Event::Clone { .. }
            | Event::Untraced { .. } => {}
            Event::Exit(_) => {
                if !self.in_kernel {
                    // Killed from outside while in user mode: an interrupt took it.
                    match self.next_ip {
                        Some(ip) => self.leave_user(Leave::Interrupt(ip)),
                        None => self.leave_user(Leave::FarBranch),
                    }
                }
                self.in_kernel = true;
                self.next_ip = None;
            }
            Event::Stopped(_) => {}
            Event::MovCr3 { cr3 } => self.mov_cr3(*cr3),
            Event::Interrupt {
                from_ip,
                from_kernel,
                handler,
                ..
            } => self.interrupt(*from_ip, *from_kernel, *handler),
        }
    }

    /// One item of an execution.
    #[inline]
    pub fn item(&mut self, item: &ExecItem, mem: &CodeMemory) {
        match item {
            ExecItem::Insn(r) => self.retire(r, mem),
            ExecItem::Event(e) => self.event(e),
        }
    }

    /// PTWRITE at `ip` with its operand: PTW (and FUP(ip) with FUPonPTW).
    pub fn ptwrite(&mut self, ip: u64, payload: u64, size: PtwSize) {
        if !(self.cfg.ptwrite && self.trigger_en() && self.context_en() && self.filter_en(ip)) {
            return;
        }
        self.flush_tnt();
        self.cyc();
        let payload = if size == PtwSize::Four {
            payload & 0xffff_ffff
        } else {
            payload
        };
        self.put(&Packet::Ptw {
            size,
            payload,
            ip: self.cfg.fup_on_ptw,
        });
        if self.cfg.fup_on_ptw {
            self.ip_packet(IpPacketKind::Fup, Some(ip));
        }
    }

    fn mode_tsx(&mut self, tsx: ModeTsx, ip: u64) {
        self.tsx = ModeTsx {
            intx: tsx.intx,
            abrt: false,
        };
        if !(self.trigger_en() && self.context_en() && self.cfg.branch) {
            return;
        }
        self.flush_tnt();
        self.cyc();
        self.put(&Packet::ModeTsx(tsx));
        if self.packet_en {
            self.ip_packet(IpPacketKind::Fup, Some(ip));
        }
    }

    /// XBEGIN at `ip` started a transaction: MODE.TSX(InTX), FUP(ip).
    pub fn tsx_begin(&mut self, ip: u64) {
        self.mode_tsx(
            ModeTsx {
                intx: true,
                abrt: false,
            },
            ip,
        );
    }

    /// XEND at `ip` committed: MODE.TSX(), FUP(ip).
    pub fn tsx_commit(&mut self, ip: u64) {
        self.mode_tsx(ModeTsx::default(), ip);
    }

    /// The transaction aborted at `ip`: MODE.TSX(TXAbort), FUP(ip), TIP(handler).
    pub fn tsx_abort(&mut self, ip: u64, handler: u64) {
        self.mode_tsx(
            ModeTsx {
                intx: false,
                abrt: true,
            },
            ip,
        );
        if self.packet_en {
            if self.filter_en(handler) {
                self.ip_packet(IpPacketKind::Tip, Some(handler));
            } else {
                self.ip_packet(IpPacketKind::TipPgd, Some(handler));
                self.packet_en = false;
            }
        }
        self.next_ip = Some(handler);
    }

    /// Ends the trace: pending packets are written and tracing is disabled.
    pub fn finish(&mut self) {
        self.disable();
    }
}

/// Whether a kernel entry is SYSCALL or SYSENTER (a far branch), not an
/// interrupt-like INT n, INT3, INTO (reported with FUP(CLIP)).
/// `ip` as an IP payload that needs no last IP: sign-extended from bit 47
/// where that gives it back, else full.
fn uncompressed(ip: u64) -> IpPayload {
    let how = if sext48(ip) == ip {
        IpCompression::Sext48
    } else {
        IpCompression::Full
    };
    IpPayload::new(how, ip)
}

fn is_syscall(r: &Retired, mem: &CodeMemory) -> bool {
    matches!(
        decode_at(mem, r.ip, r.mode)
            .ok()
            .and_then(|d| d.kernel_entry),
        Some(KernelEntry::Syscall | KernelEntry::Sysenter)
    )
}

#[cfg(test)]
mod kernel_tests;
#[cfg(test)]
mod tests;
