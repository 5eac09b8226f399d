//! The event decoder: packets → [`Event`]s, following libipt's `pt_evt` rules.
//!
//! # How packets become events
//!
//! * **Synchronization.** Decoding starts at a PSB. PSB+ is read at once; its FUP,
//!   MODE, PIP, VMCS, CBR packets become *status updates* (`status_update`), delivered
//!   at the PSBEND: first `Enabled { ip }` (a FUP with an IP in PSB+) or `Disabled`
//!   (none; IP suppressed), then ExecMode/Iflags/Tsx/AsyncPaging/AsyncVmcs (at the FUP's
//!   IP, or suppressed), Cbr, and Mnt (not a status update). Timing packets in PSB+ only
//!   update the time.
//! * **FUP binding.** Packets that announce an event whose IP follows in a FUP (MODE.TSX,
//!   EXSTOP/MWAIT/PTW/TRIG/CFE with IP bit, OVF, …) wait for that FUP; the event is
//!   reported at the FUP with its IP. A FUP nobody waits for is the source of an
//!   asynchronous branch whose target comes with the next TIP (→ `AsyncBranch`), or
//!   TIP.PGD (→ `AsyncDisabled`).
//! * **TIP binding.** MODE.Exec, and PIP/VMCS between the FUP and TIP of an
//!   asynchronous branch, wait for the next TIP/TIP.PGE/TIP.PGD and take its IP. The
//!   branch event (`Tip`, `AsyncBranch`, `Enabled`) is reported *first*, then the events
//!   bound to it, in order.
//! * **Standalone events** (`Tnt`, `Paging`, `Vmcs`, `Cbr`, `Mnt`, `Stop`, …) are
//!   reported at their packet.
//! * **Overflow.** OVF resumes where the next FUP says (`Overflow { ip }`), or with the
//!   IP suppressed when tracing resumes disabled; errata SKD010, APL11 and APL12 are
//!   handled by looking ahead.
//!
//! Every event carries the time at its packet and the offset of the packet at which it
//! is reported: the binding FUP/TIP/PSBEND for queued events, but always the OVF for
//! overflows.
//!
//! # Where this differs from libipt 2.3
//!
//! Checked event by event against libipt's `pt_evt_next` on its own test traces and on
//! some 30 000 generated and mutated ones (same events, IPs, flags, timestamps and error
//! codes), except:
//!
//! * a MODE.Exec that changes nothing (or only IF without iflags events), or an Iflags
//!   event, before a TIP.PGD is accepted (libipt: "unexpected packet context");
//! * when an event that waits for another packet (EVD data, MWAIT, PWRE) was queued
//!   before the FUP of an asynchronous branch, libipt's reordering at the TIP hands out
//!   the wrong event and fails with "internal error"; we report the branch.

use super::queue::{Binding, EventQueue};
use super::{Event, EventKind, Timestamp};
use crate::config::Config;
use crate::error::{DecodeError, ErrorCode};
use crate::packet::HotPacket;
use crate::packet::PacketDecoder;
use crate::time::{Time, TimeCal};
use pt_encoder::packet::LastIpError;
use pt_encoder::{IpCompression, IpPacketKind, IpPayload, LastIp, ModeTsx, Packet};

mod branch;
mod checkpoint;

/// Event decoder options (libipt's `pt_conf_flags` for the event layer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Report `Tick` events: while tracing is enabled, each TSC, MTC or CYC packet
    /// that moves the time estimate yields `Tick { ip }` with the last IP seen in the
    /// packet stream (suppressed if there is none). Note that libipt's flow decoders
    /// synthesize their tick events themselves from the timestamps of `Tnt`/`Tip`
    /// events; this option is for consumers of the event stream itself.
    pub tick_events: bool,
    /// On OVF keep the core:bus ratio calibration instead of starting anew.
    pub keep_tcal_on_ovf: bool,
    /// Report `Iflags` events for changes of MODE.Exec's IF bit (Event Trace).
    pub iflags_events: bool,
}

/// What a packet handler did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Nothing to report: go on with the next packet.
    Next,
    /// An event is in `out`.
    Event,
}

/// The packet being processed, or why there is none.
#[derive(Clone, Copy, Debug)]
enum Current {
    Packet {
        offset: u64,
        packet: Packet,
    },
    Error(DecodeError),
    /// The state was dropped at an OVF at `offset` that could not be resolved; only a
    /// new synchronization helps.
    Lost {
        offset: u64,
    },
}

/// The MODE.Exec bits last seen.
#[derive(Clone, Copy, Debug, Default)]
struct ExecState {
    csl: bool,
    csd: bool,
    iflag: bool,
}

/// The event decoder. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct EventDecoder<'a> {
    pkt: PacketDecoder<'a>,
    config: Config,
    options: Options,
    cur: Current,
    ip: LastIp,
    time: Time,
    tcal: TimeCal,
    evq: EventQueue,
    out: Option<Event>,
    exec: Option<ExecState>,
    /// Tracing is enabled.
    enabled: bool,
    /// The current packet has been bound to an event already and must not be taken
    /// again as a packet of its own (set until the decoder moves on).
    bound: bool,
    /// The packet after the current one and the packet decoder just past it, when
    /// [`Self::next_is_branch`] looked ahead: the next [`Self::fetch`] takes it from
    /// here instead of decoding it again.
    peeked: Option<(PacketDecoder<'a>, u64, Packet)>,
}

const fn mk(kind: EventKind) -> Event {
    Event {
        kind,
        ip_suppressed: false,
        status_update: false,
        time: Timestamp {
            tsc: None,
            lost_mtc: 0,
            lost_cyc: 0,
        },
        offset: 0,
    }
}

/// Errors the time model reports that libipt's decoders ignore: a missing CPUID 0x15
/// or nominal frequency only makes the estimate coarser.
fn time_ok(r: Result<(), ErrorCode>) -> Result<(), ErrorCode> {
    match r {
        Err(ErrorCode::BadConfig) => Ok(()),
        r => r,
    }
}

/// Apply a timing packet (outside PSB+ unless `header`) to `time` and `tcal`.
/// Other packets are left alone.
fn apply_timing(
    time: &mut Time,
    tcal: &mut TimeCal,
    config: &Config,
    packet: &Packet,
    header: bool,
) -> Result<(), ErrorCode> {
    match *packet {
        Packet::Tsc { tsc } => {
            if header {
                time_ok(tcal.header_tsc(tsc))?;
            } else {
                tcal.update_tsc(tsc);
            }
            time.update_tsc(tsc);
        }
        Packet::Cbr { ratio } => {
            if header {
                time_ok(tcal.header_cbr(ratio, config))?;
            } else {
                time_ok(tcal.update_cbr(ratio, config))?;
            }
            time_ok(time.update_cbr(ratio))?;
        }
        Packet::Tma { ctc, fc } => {
            tcal.update_tma();
            time_ok(time.update_tma(ctc, fc, config))?;
        }
        Packet::Mtc { ctc } => apply_mtc(time, tcal, config, ctc)?,
        Packet::Cyc { value } => apply_cyc(time, tcal, config, value)?,
        _ => {}
    }
    Ok(())
}

/// [`apply_timing`] for an MTC packet.
#[inline]
fn apply_mtc(
    time: &mut Time,
    tcal: &mut TimeCal,
    config: &Config,
    ctc: u8,
) -> Result<(), ErrorCode> {
    time_ok(tcal.update_mtc(ctc, config))?;
    time_ok(time.update_mtc(ctc, config))
}

/// [`apply_timing`] for a CYC packet.
#[inline]
fn apply_cyc(
    time: &mut Time,
    tcal: &mut TimeCal,
    config: &Config,
    value: u64,
) -> Result<(), ErrorCode> {
    tcal.update_cyc(value);
    let fcr = match tcal.fcr() {
        Ok(f) => f,
        Err(ErrorCode::NoTime) => 0,
        Err(e) => return Err(e),
    };
    time_ok(time.update_cyc(value, config, fcr))
}

fn stamp(time: &Time) -> Timestamp {
    let (lost_mtc, lost_cyc) = time.lost();
    Timestamp {
        tsc: time.query_tsc().ok(),
        lost_mtc,
        lost_cyc,
    }
}

/// Look ahead in PSB+ (from just after the PSB) for a FUP: its payload, `None` if PSB+
/// (or an OVF) ends first.
fn find_header_fup(mut pkt: PacketDecoder<'_>) -> Result<Option<IpPayload>, DecodeError> {
    loop {
        let (offset, p) = pkt.next_packet()?;
        match p {
            Packet::Ip(IpPacketKind::Fup, ip) => return Ok(Some(ip)),
            Packet::ModeExec(_)
            | Packet::ModeTsx(_)
            | Packet::Pip { .. }
            | Packet::Vmcs { .. }
            | Packet::Mnt { .. }
            | Packet::Tsc { .. }
            | Packet::Cbr { .. }
            | Packet::Tma { .. }
            | Packet::Mtc { .. }
            | Packet::Cyc { .. }
            | Packet::Pad
            | Packet::Invalid => {}
            Packet::Psbend | Packet::Ovf => return Ok(None),
            _ => {
                return Err(DecodeError {
                    code: ErrorCode::BadContext,
                    offset,
                })
            }
        }
    }
}

/// After an OVF: the end offset of the FUP that says where tracing resumes, `None` if
/// a packet shows first that there is none; `BadContext` if a packet that needs an
/// IP comes first.
fn find_ovf_fup(mut pkt: PacketDecoder<'_>) -> Result<Option<u64>, DecodeError> {
    loop {
        let (offset, p) = pkt.next_packet()?;
        match p {
            Packet::Ip(IpPacketKind::Fup, _) => return pkt.offset().map(Some),
            Packet::Pad
            | Packet::Mnt { .. }
            | Packet::Cbr { .. }
            | Packet::Tsc { .. }
            | Packet::Tma { .. }
            | Packet::Mtc { .. }
            | Packet::Cyc { .. }
            | Packet::Invalid
            | Packet::Bbp { .. }
            | Packet::Bip { .. }
            | Packet::Bep { .. } => {}
            Packet::Psbend
            | Packet::Ip(IpPacketKind::Tip | IpPacketKind::TipPgd, _)
            | Packet::Tnt8(_)
            | Packet::Tnt64(_) => {
                return Err(DecodeError {
                    code: ErrorCode::BadContext,
                    offset,
                })
            }
            _ => return Ok(None),
        }
    }
}

impl<'a> EventDecoder<'a> {
    /// A decoder for `trace`. It starts unsynchronized: call
    /// [`sync_forward`](Self::sync_forward) first.
    pub fn new(trace: &'a [u8], config: &Config, options: Options) -> Self {
        Self {
            pkt: PacketDecoder::new(trace, config),
            config: *config,
            options,
            cur: Current::Error(DecodeError {
                code: ErrorCode::NoSync,
                offset: 0,
            }),
            ip: LastIp::new(),
            time: Time::new(),
            tcal: TimeCal::new(),
            evq: EventQueue::new(),
            out: None,
            exec: None,
            enabled: false,
            bound: false,
            peeked: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The options.
    pub fn options(&self) -> Options {
        self.options
    }

    /// The trace buffer.
    pub fn buffer(&self) -> &'a [u8] {
        self.pkt.buffer()
    }

    /// Offset of the packet the decoder will look at next (libipt's
    /// `pt_evt_get_offset`); `NoSync` before synchronizing.
    pub fn offset(&self) -> Result<u64, DecodeError> {
        match self.cur {
            Current::Packet { offset, .. } | Current::Lost { offset } => Ok(offset),
            Current::Error(_) => self.pkt.offset(),
        }
    }

    /// Offset of the PSB the decoder last synchronized at.
    pub fn sync_offset(&self) -> Option<u64> {
        self.pkt.sync_offset()
    }

    /// Position just after the current packet (for the query decoder's start-up).
    pub(crate) fn pos(&self) -> Option<u64> {
        self.pkt.offset().ok()
    }

    /// The time model at the current position (after the packets decoded so far).
    pub fn time(&self) -> &Time {
        &self.time
    }

    /// The timestamp events would get now.
    pub fn timestamp(&self) -> Timestamp {
        stamp(&self.time)
    }

    /// Tracing is enabled at the current position.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    fn reset(&mut self) {
        self.cur = Current::Error(DecodeError {
            code: ErrorCode::NoSync,
            offset: 0,
        });
        self.ip.reset();
        self.time = Time::new();
        self.tcal = TimeCal::new();
        self.evq.clear();
        self.out = None;
        self.exec = None;
        self.enabled = false;
        self.bound = false;
        self.peeked = None;
    }

    /// Synchronize at the next PSB and read its PSB+; returns the PSB's offset.
    pub fn sync_forward(&mut self) -> Result<u64, DecodeError> {
        self.reset();
        let at = self.pkt.sync_forward()?;
        self.start()?;
        Ok(at)
    }

    /// Synchronize at the last PSB before the current position (the end of the trace
    /// if not synchronized yet) whose PSB+ also ends before it; returns its offset.
    pub fn sync_backward(&mut self) -> Result<u64, DecodeError> {
        let len = self.pkt.buffer().len() as u64;
        let start = self.pos().unwrap_or(len);
        let mut sync = start;
        loop {
            self.reset();
            let at = loop {
                let at = self.pkt.sync_backward()?;
                if at < sync {
                    break at;
                }
            };
            sync = at;
            let r = self.start();
            if self.pos().unwrap_or(len) < start {
                if r.is_err() {
                    // Stay at this PSB so that the next call goes further back.
                    self.pkt.sync_set(at)?;
                }
                return r.map(|()| at);
            }
        }
    }

    /// Let the decoder see the trace up to `end` only (see
    /// [`PacketDecoder::set_end`]). Call it before synchronizing.
    pub fn set_end(&mut self, end: u64) {
        self.pkt.set_end(end);
    }

    /// Go on at the IP packet at `offset` (a resume point after damage: see
    /// [`crate::packet::recover`]) with tracing `enabled` or not, as if the packets
    /// before it had never been seen, but keeping the time and the execution state
    /// learned so far; `ip` is the address the packet stands for (the last IP a
    /// compressed packet's low bits update).
    pub fn resume_at(&mut self, offset: u64, enabled: bool, ip: u64) -> Result<(), DecodeError> {
        let (time, tcal, exec) = (self.time, self.tcal, self.exec);
        self.reset();
        (self.time, self.tcal, self.exec) = (time, tcal, exec);
        self.ip.update(IpPayload::new(IpCompression::Full, ip));
        self.pkt.resume_at(offset)?;
        self.enabled = enabled;
        self.fetch();
        Ok(())
    }

    /// Where a consumer's own loop over the plain packets (TNT, TIP, PAD, timing) may
    /// take over from the decoder: the offset of the next packet not taken yet and the
    /// last IP, while tracing is enabled, no event waits for a later packet and the
    /// last IP is known. The consumer hands back with [`resume_at`](Self::resume_at)
    /// at the first packet it does not take (meaning what `next` would have made of
    /// the packets in between), after passing timing packets to
    /// [`apply_time`](Self::apply_time) (or, reading no time, only those that
    /// [`mtc_cyc_can_fail`](Self::mtc_cyc_can_fail) does not cover). pt-coverage's
    /// fast path.
    pub fn handoff(&self) -> Option<(u64, u64)> {
        if !self.enabled
            || !self.evq.is_empty()
            || self.out.is_some()
            || self.peeked.is_some()
            || self.pkt.in_pebs()
        {
            return None;
        }
        let ip = self.ip.query().ok()?;
        match self.cur {
            // A TIP reported (and nothing bound to it): go on after it.
            Current::Packet {
                packet: Packet::Ip(IpPacketKind::Tip, _),
                ..
            } if self.bound => Some((self.pkt.offset().ok()?, ip)),
            // A plain packet not taken yet.
            Current::Packet {
                offset,
                packet:
                    Packet::Tnt8(_)
                    | Packet::Tnt64(_)
                    | Packet::Ip(IpPacketKind::Tip, _)
                    | Packet::Mtc { .. }
                    | Packet::Cyc { .. },
            } if !self.bound => Some((offset, ip)),
            _ => None,
        }
    }

    /// A timing packet (TSC, TMA, MTC, CYC) taken by a consumer's own loop after a
    /// [`handoff`](Self::handoff), at `offset`: the time model moves as
    /// [`next`](Self::next) would move it (no `Tick` events), and its errors are
    /// the same. Other packets are ignored.
    pub fn apply_time(&mut self, offset: u64, packet: &Packet) -> Result<(), DecodeError> {
        apply_timing(&mut self.time, &mut self.tcal, &self.config, packet, false)
            .map_err(|code| DecodeError { code, offset })
    }

    /// Whether an MTC or CYC packet can make [`apply_time`](Self::apply_time) (or
    /// [`next`](Self::next)) fail under this decoder's configuration. Not with an MTC
    /// frequency the hardware can set (IA32_RTIT_CTL.MTCFreq has 4 bits): CTC values
    /// then fit `mtc_freq + 8 <= 23` bits, so that two of them are never more than one
    /// wrap apart and their difference in TSC ticks (below 2^23 * 2^32 / 1) never
    /// overflows the calibration's fixed point; a missing CPUID 0x15 or nominal
    /// frequency is no error. Nor do the other timing packets' errors depend on them
    /// (a TSC's 56 bits never wrap twice; TMA checks TSC and TMA). A consumer that
    /// reads no time may then take MTC and CYC packets after a
    /// [`handoff`](Self::handoff) by their length alone (the time model then lags,
    /// which only event time stamps show).
    pub fn mtc_cyc_can_fail(&self) -> bool {
        self.config.mtc_freq > 15
    }

    /// [`apply_time`](Self::apply_time) for a CYC packet at `offset` with cycle count
    /// `value`, without building the [`Packet`]: the same model and errors, for a
    /// consumer's loop that meets a CYC before most packets (inlined there).
    #[inline]
    pub fn apply_cyc(&mut self, offset: u64, value: u64) -> Result<(), DecodeError> {
        apply_cyc(&mut self.time, &mut self.tcal, &self.config, value)
            .map_err(|code| DecodeError { code, offset })
    }

    /// [`apply_time`](Self::apply_time) for an MTC packet at `offset` with CTC bits
    /// `ctc`, without building the [`Packet`].
    #[inline]
    pub fn apply_mtc(&mut self, offset: u64, ctc: u8) -> Result<(), DecodeError> {
        apply_mtc(&mut self.time, &mut self.tcal, &self.config, ctc)
            .map_err(|code| DecodeError { code, offset })
    }

    /// Synchronize at `offset`, which must hold a PSB.
    pub fn sync_set(&mut self, offset: u64) -> Result<(), DecodeError> {
        self.reset();
        self.pkt.sync_set(offset)?;
        self.start()
    }

    fn start(&mut self) -> Result<(), DecodeError> {
        self.fetch();
        match self.cur {
            Current::Packet {
                packet: Packet::Psb,
                ..
            } => self.decode_psb(),
            Current::Packet { offset, .. } | Current::Lost { offset } => Err(DecodeError {
                code: ErrorCode::NoSync,
                offset,
            }),
            Current::Error(e) => Err(e),
        }
    }

    /// The next event; an `Eos` error at the end of the trace.
    ///
    /// After any other error, synchronize again to go on.
    // libipt's shape (`pt_evt_next`): the end is an error code, not `None`.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Event, DecodeError> {
        let mut ev = mk(EventKind::Stop);
        self.next_into(&mut ev)?;
        Ok(ev)
    }

    /// [`next`](Self::next), writing the event into `out` (left as it was on an
    /// error). Saves copying the event on the flow decoders' hot path.
    #[inline]
    pub fn next_into(&mut self, out: &mut Event) -> Result<(), DecodeError> {
        // After a TIP was reported: the slow way would come back to the same packet
        // for events bound to it; with none waiting, just move on.
        if self.bound && self.evq.is_empty() {
            if let Current::Packet {
                packet: Packet::Ip(IpPacketKind::Tip, _),
                ..
            } = self.cur
            {
                if self.enabled {
                    self.bound = false;
                    self.fetch();
                }
            }
        }
        // The common case first: a TNT while tracing is enabled.
        if let Current::Packet {
            offset,
            packet: Packet::Tnt8(t) | Packet::Tnt64(t),
        } = self.cur
        {
            if self.enabled {
                out.kind = EventKind::Tnt {
                    bits: t.bits(),
                    size: t.len() as u8,
                };
                out.ip_suppressed = false;
                out.status_update = false;
                out.time = stamp(&self.time);
                out.offset = offset;
                self.fetch();
                return Ok(());
            }
        }
        // Next: a TIP with no event waiting for it. Reported as the slow way would; the
        // decoder stays at the packet (its offset is the TIP's) until the next call.
        if let Current::Packet {
            offset,
            packet: Packet::Ip(IpPacketKind::Tip, payload),
        } = self.cur
        {
            if self.enabled && !self.bound && self.evq.is_empty() {
                self.ip.update(payload);
                let (ip, ip_suppressed) = match self.ip.query() {
                    Ok(ip) => (ip, false),
                    Err(_) => (0, true),
                };
                out.kind = EventKind::Tip { ip };
                out.ip_suppressed = ip_suppressed;
                out.status_update = false;
                out.time = stamp(&self.time);
                out.offset = offset;
                self.bound = true;
                return Ok(());
            }
        }
        *out = self.next_slow()?;
        Ok(())
    }

    /// [`next`](Self::next) for everything but the common TNT and TIP packets.
    #[inline(never)]
    fn next_slow(&mut self) -> Result<Event, DecodeError> {
        loop {
            match self.decode_packet()? {
                Step::Event => {
                    return self.out.take().ok_or(DecodeError {
                        code: ErrorCode::Internal,
                        offset: self.cur_offset(),
                    })
                }
                Step::Next => {
                    if self.out.is_some() {
                        return Err(self.err(ErrorCode::Internal));
                    }
                    self.bound = false;
                    self.fetch();
                }
            }
        }
    }

    /// Load the next packet other than PAD into `cur`: the common packets inline,
    /// the rest through [`Self::fetch_slow`].
    #[inline(always)]
    fn fetch(&mut self) {
        if self.peeked.is_none() {
            let (offset, packet) = match self.pkt.next_hot() {
                (offset, HotPacket::Tnt(t)) => (offset, Packet::Tnt8(t)),
                (offset, HotPacket::Cyc(value)) => (offset, Packet::Cyc { value }),
                (offset, HotPacket::Mtc(ctc)) => (offset, Packet::Mtc { ctc }),
                (offset, HotPacket::Tip(p)) => (offset, Packet::Ip(IpPacketKind::Tip, p)),
                (_, HotPacket::Pad | HotPacket::Other) => return self.fetch_slow(),
            };
            self.cur = Current::Packet { offset, packet };
            return;
        }
        self.fetch_slow();
    }

    /// [`Self::fetch`] for the rest: a peeked packet, PAD, the less common packets.
    #[inline(never)]
    fn fetch_slow(&mut self) {
        if let Some((pkt, offset, packet)) = self.peeked.take() {
            self.pkt = pkt;
            if !matches!(packet, Packet::Pad) {
                self.cur = Current::Packet { offset, packet };
                return;
            }
        }
        // The common packets decoded inline, stored field by field.
        loop {
            let (offset, packet) = match self.pkt.next_hot() {
                (_, HotPacket::Pad) => continue,
                (offset, HotPacket::Tnt(t)) => (offset, Packet::Tnt8(t)),
                (offset, HotPacket::Cyc(value)) => (offset, Packet::Cyc { value }),
                (offset, HotPacket::Mtc(ctc)) => (offset, Packet::Mtc { ctc }),
                (offset, HotPacket::Tip(p)) => (offset, Packet::Ip(IpPacketKind::Tip, p)),
                (_, HotPacket::Other) => break,
            };
            self.cur = Current::Packet { offset, packet };
            return;
        }
        loop {
            match self.pkt.next_packet() {
                Ok((_, Packet::Pad)) => continue,
                Ok((offset, packet)) => self.cur = Current::Packet { offset, packet },
                Err(e) => self.cur = Current::Error(e),
            }
            return;
        }
    }

    fn cur_offset(&self) -> u64 {
        match self.cur {
            Current::Packet { offset, .. } | Current::Lost { offset } => offset,
            Current::Error(e) => e.offset,
        }
    }

    fn err(&self, code: ErrorCode) -> DecodeError {
        DecodeError {
            code,
            offset: self.cur_offset(),
        }
    }

    fn terr(&self, r: Result<(), ErrorCode>) -> Result<(), DecodeError> {
        r.map_err(|code| self.err(code))
    }

    /// Hand out `ev` at the current packet.
    fn publish(&mut self, mut ev: Event) -> Step {
        ev.offset = self.cur_offset();
        self.out = Some(ev);
        Step::Event
    }

    /// Set the event's IP from the last IP, or mark it suppressed.
    fn bind_ip(&self, ev: &mut Event) {
        match self.ip.query() {
            Ok(ip) => ev.kind.set_ip(ip),
            Err(_) => ev.ip_suppressed = true,
        }
    }

    fn stamp(&self, ev: &mut Event) {
        ev.time = stamp(&self.time);
    }

    fn push(&mut self, ev: Event, binding: Binding) -> Result<(), DecodeError> {
        if self.evq.push(ev, binding, false) {
            Ok(())
        } else {
            Err(self.err(ErrorCode::NoMem))
        }
    }

    fn push_ignore(&mut self, binding: Binding) -> Result<(), DecodeError> {
        if self.evq.push(mk(EventKind::Stop), binding, true) {
            Ok(())
        } else {
            Err(self.err(ErrorCode::NoMem))
        }
    }

    /// Report `kind` now with a suppressed IP (or none), then move past the packet.
    fn standalone(&mut self, kind: EventKind, suppressed: bool) -> Step {
        let mut ev = mk(kind);
        ev.ip_suppressed = suppressed;
        self.stamp(&mut ev);
        let step = self.publish(ev);
        self.fetch();
        step
    }

    fn update_ip(&mut self, payload: IpPayload) {
        self.ip.update(payload);
    }

    fn decode_packet(&mut self) -> Result<Step, DecodeError> {
        let packet = match self.cur {
            Current::Packet { packet, .. } => packet,
            Current::Error(e) => return Err(e),
            Current::Lost { offset } => {
                return Err(DecodeError {
                    code: ErrorCode::NoSync,
                    offset,
                })
            }
        };
        match packet {
            Packet::Tnt8(t) | Packet::Tnt64(t) => {
                if !self.enabled {
                    return Err(self.err(ErrorCode::BadContext));
                }
                Ok(self.standalone(
                    EventKind::Tnt {
                        bits: t.bits(),
                        size: t.len() as u8,
                    },
                    false,
                ))
            }
            Packet::Pad | Packet::Invalid | Packet::Bbp { .. } | Packet::Bip { .. } => {
                Ok(Step::Next)
            }
            Packet::Bep { ip } => {
                // The FUP after a PEBS block end gives the block's IP, not a branch.
                if ip {
                    self.push_ignore(Binding::FUP_BOUND)?;
                }
                Ok(Step::Next)
            }
            Packet::Ip(kind, payload) => match kind {
                IpPacketKind::Fup => self.decode_fup(payload),
                IpPacketKind::Tip => self.decode_tip(payload),
                IpPacketKind::TipPge => self.decode_tip_pge(payload),
                IpPacketKind::TipPgd => self.decode_tip_pgd(payload),
            },
            Packet::Tsc { .. } | Packet::Tma { .. } | Packet::Mtc { .. } | Packet::Cyc { .. } => {
                let before = stamp(&self.time);
                let r = apply_timing(&mut self.time, &mut self.tcal, &self.config, &packet, false);
                self.terr(r)?;
                if self.options.tick_events && self.enabled && stamp(&self.time) != before {
                    let mut ev = mk(EventKind::Tick { ip: 0 });
                    self.bind_ip(&mut ev);
                    self.stamp(&mut ev);
                    let step = self.publish(ev);
                    self.fetch();
                    return Ok(step);
                }
                Ok(Step::Next)
            }
            Packet::Cbr { ratio } => {
                let r = apply_timing(&mut self.time, &mut self.tcal, &self.config, &packet, false);
                self.terr(r)?;
                Ok(self.standalone(
                    EventKind::Cbr {
                        ratio: ratio as u16,
                    },
                    false,
                ))
            }
            Packet::ModeExec(m) => self.decode_mode_exec(m),
            Packet::ModeTsx(t) => self.decode_mode_tsx(t),
            Packet::Pip { cr3, nr } => {
                if self
                    .evq
                    .find(Binding::TIP, |k| matches!(k, EventKind::AsyncBranch { .. }))
                    .is_some()
                {
                    let ev = mk(EventKind::AsyncPaging {
                        cr3,
                        non_root: nr,
                        ip: 0,
                    });
                    self.push(ev, Binding::TIP)?;
                    return Ok(Step::Next);
                }
                Ok(self.standalone(EventKind::Paging { cr3, non_root: nr }, false))
            }
            Packet::Vmcs { base } => self.decode_vmcs(base),
            Packet::Ptw { size, payload, ip } => {
                let kind = EventKind::Ptwrite {
                    ip: 0,
                    size: size.bytes() as u8,
                    payload,
                };
                if ip {
                    self.push(mk(kind), Binding::FUP_BOUND)?;
                    return Ok(Step::Next);
                }
                Ok(self.standalone(kind, true))
            }
            Packet::Psb => {
                self.decode_psb()?;
                // Now at the PSBEND (or OVF) that ended PSB+.
                self.decode_packet()
            }
            Packet::Psbend => self.decode_psbend(),
            Packet::Exstop { ip } => self.decode_exstop(ip),
            Packet::Mwait { hints, ext } => {
                let ev = mk(EventKind::Mwait { ip: 0, hints, ext });
                self.push(ev, Binding::EXSTOP)?;
                Ok(Step::Next)
            }
            Packet::Pwre {
                state,
                sub_state,
                hw,
            } => {
                let mut ev = mk(EventKind::Pwre {
                    state,
                    sub_state,
                    hw,
                });
                self.stamp(&mut ev);
                self.push(ev, Binding::PWRX)?;
                Ok(Step::Next)
            }
            Packet::Pwrx {
                last,
                deepest,
                wake,
            } => {
                if let Some(e) = self.evq.pop(Binding::PWRX) {
                    if !matches!(e.event.kind, EventKind::Pwre { .. }) {
                        return Err(self.err(ErrorCode::Internal));
                    }
                    return Ok(self.publish(e.event));
                }
                Ok(self.standalone(
                    EventKind::Pwrx {
                        last,
                        deepest,
                        interrupt: wake.interrupt,
                        store: wake.store,
                        autonomous: wake.autonomous,
                    },
                    false,
                ))
            }
            Packet::Ovf => self.decode_ovf(),
            Packet::Stop => Ok(self.standalone(EventKind::Stop, false)),
            Packet::Mnt { payload } => Ok(self.standalone(EventKind::Mnt { payload }, false)),
            Packet::Cfe { ty, vector, ip } => self.decode_cfe(ty, vector, ip),
            Packet::Evd { ty, payload } => self.decode_evd(ty, payload),
            Packet::Trig {
                trbv,
                ip,
                mult,
                icnt,
            } => self.decode_trig(trbv, ip, mult, icnt),
            // Packets this layer does not know carry nothing it could report.
            _ => Ok(Step::Next),
        }
    }

    // ---- PSB+ ----

    fn decode_psb(&mut self) -> Result<(), DecodeError> {
        if self.evq.pending(Binding::ANY) {
            return Err(self.err(ErrorCode::BadContext));
        }
        self.ip.reset();
        self.enabled = false;
        // The enabled/disabled status goes first; its kind is known at the end.
        let mut status = mk(EventKind::Disabled { ip: 0 });
        status.status_update = true;
        self.push(status, Binding::PSBEND)?;
        loop {
            self.fetch();
            let packet = match self.cur {
                Current::Packet { packet, .. } => packet,
                Current::Error(e) => return Err(e),
                Current::Lost { .. } => return Err(self.err(ErrorCode::Internal)),
            };
            match packet {
                Packet::Ip(IpPacketKind::Fup, payload) => self.header_fup(payload)?,
                Packet::ModeExec(m) => self.header_mode_exec(m)?,
                Packet::ModeTsx(t) => {
                    let mut ev = mk(EventKind::Tsx {
                        ip: 0,
                        speculative: t.intx,
                        aborted: t.abrt,
                    });
                    ev.status_update = true;
                    self.push(ev, Binding::PSBEND)?;
                }
                Packet::Pip { cr3, nr } => {
                    let mut ev = mk(EventKind::AsyncPaging {
                        cr3,
                        non_root: nr,
                        ip: 0,
                    });
                    ev.status_update = true;
                    self.push(ev, Binding::PSBEND)?;
                }
                Packet::Vmcs { base } => {
                    let mut ev = mk(EventKind::AsyncVmcs { base, ip: 0 });
                    ev.status_update = true;
                    self.push(ev, Binding::PSBEND)?;
                }
                Packet::Mnt { payload } => {
                    self.push(mk(EventKind::Mnt { payload }), Binding::PSBEND)?;
                }
                Packet::Cbr { ratio } => {
                    let r =
                        apply_timing(&mut self.time, &mut self.tcal, &self.config, &packet, true);
                    self.terr(r)?;
                    let mut ev = mk(EventKind::Cbr {
                        ratio: ratio as u16,
                    });
                    ev.status_update = true;
                    self.push(ev, Binding::PSBEND)?;
                }
                Packet::Tsc { .. }
                | Packet::Tma { .. }
                | Packet::Mtc { .. }
                | Packet::Cyc { .. } => {
                    let r =
                        apply_timing(&mut self.time, &mut self.tcal, &self.config, &packet, true);
                    self.terr(r)?;
                }
                Packet::Psbend => {
                    self.set_psb_status();
                    return Ok(());
                }
                Packet::Ovf => {
                    if self.enabled {
                        self.set_psb_status();
                    } else {
                        // Nothing to report about a disabled state that is now lost.
                        self.evq.pop(Binding::PSBEND);
                    }
                    return Ok(());
                }
                Packet::Pad | Packet::Invalid => {}
                _ => return Err(self.err(ErrorCode::BadContext)),
            }
        }
    }

    /// Decide the PSB+ status event (the first PSBEND-bound entry).
    fn set_psb_status(&mut self) {
        let enabled = self.enabled;
        if let Some(i) = self.evq.find(Binding::PSBEND, |_| true) {
            if let Some(e) = self.evq.get_mut(i) {
                if enabled {
                    e.event.kind = EventKind::Enabled {
                        ip: 0,
                        resumed: false,
                    };
                } else {
                    e.event.ip_suppressed = true;
                }
            }
        }
    }

    fn header_fup(&mut self, payload: IpPayload) -> Result<(), DecodeError> {
        let mut enabled = payload.compression != IpCompression::Suppressed;
        if self.config.errata.bdm70 && self.check_bdm70()? {
            enabled = false;
        }
        self.enabled = enabled;
        if enabled {
            self.update_ip(payload);
        }
        Ok(())
    }

    /// BDM70: a PSB+ right before a TIP.PGE may hold the FUP of the enable. Is there a
    /// TIP.PGE right after this PSB+ (only other PSB+ and timing packets between)?
    fn check_bdm70(&self) -> Result<bool, DecodeError> {
        let mut pkt = self.pkt.clone();
        loop {
            let p = match pkt.next_packet() {
                Ok((_, p)) => p,
                Err(e) if e.code == ErrorCode::Eos => return Ok(false),
                Err(e) => return Err(e),
            };
            match p {
                Packet::Ip(IpPacketKind::TipPge, _) => return Ok(true),
                Packet::Pad
                | Packet::Tsc { .. }
                | Packet::Cbr { .. }
                | Packet::Psbend
                | Packet::Pip { .. }
                | Packet::ModeExec(_)
                | Packet::ModeTsx(_)
                | Packet::Vmcs { .. }
                | Packet::Tma { .. }
                | Packet::Mtc { .. }
                | Packet::Cyc { .. }
                | Packet::Mnt { .. } => {}
                _ => return Ok(false),
            }
        }
    }

    fn header_mode_exec(&mut self, m: pt_encoder::ModeExec) -> Result<(), DecodeError> {
        let iflags = self.options.iflags_events;
        match self.exec {
            Some(s) => {
                if (iflags && s.iflag != m.iflag) || s.csd != m.csd || s.csl != m.csl {
                    return Err(self.err(ErrorCode::BadStatusUpdate));
                }
            }
            None => {
                self.exec = Some(ExecState {
                    csl: m.csl,
                    csd: m.csd,
                    iflag: m.iflag,
                })
            }
        }
        let mut ev = mk(EventKind::ExecMode {
            mode: m.mode(),
            ip: 0,
        });
        ev.status_update = true;
        self.push(ev, Binding::PSBEND)?;
        if iflags {
            let mut ev = mk(EventKind::Iflags {
                iflag: m.iflag,
                ip: 0,
            });
            ev.status_update = true;
            self.push(ev, Binding::PSBEND)?;
        }
        Ok(())
    }

    fn decode_psbend(&mut self) -> Result<Step, DecodeError> {
        let Some(e) = self.evq.pop(Binding::PSBEND) else {
            return Ok(Step::Next);
        };
        let mut ev = e.event;
        match ev.kind {
            EventKind::Enabled { .. }
            | EventKind::ExecMode { .. }
            | EventKind::Iflags { .. }
            | EventKind::Tsx { .. }
            | EventKind::AsyncPaging { .. }
            | EventKind::AsyncVmcs { .. } => self.bind_ip(&mut ev),
            EventKind::Disabled { .. } | EventKind::Cbr { .. } | EventKind::Mnt { .. } => {}
            _ => return Err(self.err(ErrorCode::BadContext)),
        }
        self.stamp(&mut ev);
        Ok(self.publish(ev))
    }

    // ---- IP packets ----

    fn decode_fup(&mut self, payload: IpPayload) -> Result<Step, DecodeError> {
        self.update_ip(payload);
        if self.evq.pending(Binding::FUP_BOUND) {
            self.bound = true;
        }
        loop {
            let Some(e) = self.evq.pop(Binding::FUP.or(Binding::FUP_BOUND)) else {
                if self.bound {
                    return Ok(Step::Next);
                }
                // An asynchronous branch from here; its target comes with the TIP.
                let from = match self.ip.query() {
                    Ok(ip) => ip,
                    Err(LastIpError::NoIp) => return Err(self.err(ErrorCode::NoIp)),
                    Err(LastIpError::Suppressed) => return Err(self.err(ErrorCode::IpSuppressed)),
                };
                self.push(mk(EventKind::AsyncBranch { from, to: 0 }), Binding::TIP)?;
                return Ok(Step::Next);
            };
            if e.ignore {
                if self.evq.pending(Binding::FUP_BOUND) {
                    self.bound = true;
                }
                continue;
            }
            let mut ev = e.event;
            match ev.kind {
                EventKind::Overflow { .. } => {
                    self.bind_ip(&mut ev);
                    self.enabled = true;
                    // An overflow is reported at its OVF, not at the FUP.
                    let offset = ev.offset;
                    let step = self.publish(ev);
                    if let Some(out) = &mut self.out {
                        out.offset = offset;
                    }
                    return Ok(step);
                }
                EventKind::Tsx { .. }
                | EventKind::Exstop { .. }
                | EventKind::Mwait { .. }
                | EventKind::Ptwrite { .. }
                | EventKind::ExecMode { .. }
                | EventKind::Iflags { .. }
                | EventKind::Interrupt { .. }
                | EventKind::Iret { .. }
                | EventKind::Smi { .. }
                | EventKind::Init { .. }
                | EventKind::Vmentry { .. }
                | EventKind::Vmexit { .. }
                | EventKind::Shutdown { .. }
                | EventKind::Uintr { .. }
                | EventKind::Uiret { .. }
                | EventKind::Trig { .. }
                | EventKind::Swintr { .. }
                | EventKind::Syscall { .. } => {
                    self.stamp(&mut ev);
                    self.bind_ip(&mut ev);
                }
                EventKind::Rsm { .. } | EventKind::Sipi { .. } => {
                    self.stamp(&mut ev);
                    if !ev.ip_suppressed {
                        return Err(self.err(ErrorCode::Internal));
                    }
                }
                _ => return Err(self.err(ErrorCode::BadContext)),
            }
            return Ok(self.publish(ev));
        }
    }

    fn decode_tip(&mut self, payload: IpPayload) -> Result<Step, DecodeError> {
        if !self.enabled {
            return Err(self.err(ErrorCode::BadContext));
        }
        self.update_ip(payload);
        if !self.bound {
            // The branch itself goes first; events bound to it follow.
            self.bound = true;
            let async_branch = self
                .evq
                .find(Binding::TIP, |k| matches!(k, EventKind::AsyncBranch { .. }));
            let mut ev = match async_branch {
                Some(i) => {
                    let e = self
                        .evq
                        .pop_swapped(Binding::TIP, i)
                        .ok_or(self.err(ErrorCode::Internal))?;
                    if !matches!(e.event.kind, EventKind::AsyncBranch { .. }) {
                        return Err(self.err(ErrorCode::Internal));
                    }
                    e.event
                }
                None => mk(EventKind::Tip { ip: 0 }),
            };
            self.bind_ip(&mut ev);
            self.stamp(&mut ev);
            return Ok(self.publish(ev));
        }
        loop {
            let Some(e) = self.evq.pop(Binding::TIP) else {
                return Ok(Step::Next);
            };
            if e.ignore {
                continue;
            }
            let mut ev = e.event;
            match ev.kind {
                EventKind::ExecMode { .. }
                | EventKind::AsyncPaging { .. }
                | EventKind::AsyncVmcs { .. }
                | EventKind::Iflags { .. } => self.bind_ip(&mut ev),
                EventKind::AsyncBranch { .. } => return Err(self.err(ErrorCode::Internal)),
                _ => return Err(self.err(ErrorCode::BadContext)),
            }
            self.stamp(&mut ev);
            return Ok(self.publish(ev));
        }
    }

    fn decode_tip_pge(&mut self, payload: IpPayload) -> Result<Step, DecodeError> {
        self.update_ip(payload);
        if !self.bound {
            let mut ev = mk(EventKind::Enabled {
                ip: 0,
                resumed: false,
            });
            self.bind_ip(&mut ev);
            self.enabled = true;
            self.bound = true;
            self.stamp(&mut ev);
            return Ok(self.publish(ev));
        }
        loop {
            let Some(e) = self.evq.pop(Binding::TIP) else {
                return Ok(Step::Next);
            };
            if e.ignore {
                continue;
            }
            let mut ev = e.event;
            match ev.kind {
                EventKind::ExecMode { .. } | EventKind::Iflags { .. } => self.bind_ip(&mut ev),
                _ => return Err(self.err(ErrorCode::BadContext)),
            }
            self.stamp(&mut ev);
            return Ok(self.publish(ev));
        }
    }

    fn decode_tip_pgd(&mut self, payload: IpPayload) -> Result<Step, DecodeError> {
        self.update_ip(payload);
        loop {
            let Some(e) = self.evq.pop(Binding::TIP) else {
                if self.bound {
                    return Ok(Step::Next);
                }
                let mut ev = mk(EventKind::Disabled { ip: 0 });
                self.bind_ip(&mut ev);
                self.stamp(&mut ev);
                self.enabled = false;
                let step = self.publish(ev);
                self.fetch();
                return Ok(step);
            };
            // libipt fails on a placeholder here; an unchanged MODE.Exec before a
            // TIP.PGD is harmless, so skip it.
            if e.ignore {
                continue;
            }
            let mut ev = e.event;
            match ev.kind {
                EventKind::AsyncBranch { from, .. } => {
                    ev.kind = EventKind::AsyncDisabled { at: from, ip: 0 };
                    self.bind_ip(&mut ev);
                    self.enabled = false;
                    self.bound = true;
                }
                EventKind::AsyncPaging { .. } | EventKind::AsyncVmcs { .. } => {
                    if !self.bound {
                        return Err(self.err(ErrorCode::Internal));
                    }
                    ev.ip_suppressed = true;
                }
                // Tracing stops at the branch: these take effect out of the trace.
                EventKind::ExecMode { .. } | EventKind::Iflags { .. } => ev.ip_suppressed = true,
                _ => return Err(self.err(ErrorCode::BadContext)),
            }
            self.stamp(&mut ev);
            return Ok(self.publish(ev));
        }
    }

    // ---- MODE, VMCS ----

    fn decode_mode_exec(&mut self, m: pt_encoder::ModeExec) -> Result<Step, DecodeError> {
        let prev = self.exec;
        let mut state = prev.unwrap_or(ExecState {
            csl: m.csl,
            csd: m.csd,
            iflag: m.iflag,
        });
        let mut n = 0;
        let binding = Binding::TIP.or(Binding::FUP_BOUND);
        if prev.is_none_or(|s| s.csl != m.csl || s.csd != m.csd) {
            let ev = mk(EventKind::ExecMode {
                mode: m.mode(),
                ip: 0,
            });
            self.push(ev, binding)?;
            state.csl = m.csl;
            state.csd = m.csd;
            n += 1;
        }
        if self.options.iflags_events && prev.is_none_or(|s| s.iflag != m.iflag) {
            let ev = mk(EventKind::Iflags {
                iflag: m.iflag,
                ip: 0,
            });
            self.push(ev, binding)?;
            state.iflag = m.iflag;
            n += 1;
        }
        if n == 0 {
            // Still takes up the FUP or TIP that goes with it.
            self.push_ignore(binding)?;
        }
        self.exec = Some(state);
        Ok(Step::Next)
    }

    fn decode_mode_tsx(&mut self, t: ModeTsx) -> Result<Step, DecodeError> {
        let kind = EventKind::Tsx {
            ip: 0,
            speculative: t.intx,
            aborted: t.abrt,
        };
        if self.enabled {
            // An abort's FUP is also the source of the branch to the abort handler.
            let binding = if t.abrt {
                Binding::FUP
            } else {
                Binding::FUP_BOUND
            };
            self.push(mk(kind), binding)?;
            return Ok(Step::Next);
        }
        Ok(self.standalone(kind, true))
    }

    fn decode_vmcs(&mut self, base: u64) -> Result<Step, DecodeError> {
        // Between the FUP and TIP of an asynchronous branch, VMCS goes before PIP.
        if let Some(i) = self
            .evq
            .find(Binding::TIP, |k| matches!(k, EventKind::AsyncPaging { .. }))
        {
            let paging = self
                .evq
                .get_mut(i)
                .map(|e| e.event)
                .ok_or(self.err(ErrorCode::Internal))?;
            self.push(paging, Binding::TIP)?;
            if let Some(e) = self.evq.get_mut(i) {
                e.event = mk(EventKind::AsyncVmcs { base, ip: 0 });
            }
            return Ok(Step::Next);
        }
        if self
            .evq
            .find(Binding::TIP, |k| matches!(k, EventKind::AsyncBranch { .. }))
            .is_some()
        {
            self.push(mk(EventKind::AsyncVmcs { base, ip: 0 }), Binding::TIP)?;
            return Ok(Step::Next);
        }
        Ok(self.standalone(EventKind::Vmcs { base }, false))
    }

    // ---- power, ptwrite, trigger ----

    fn decode_exstop(&mut self, ip: bool) -> Result<Step, DecodeError> {
        if let Some(e) = self.evq.pop(Binding::EXSTOP) {
            if !matches!(e.event.kind, EventKind::Mwait { .. }) {
                return Err(self.err(ErrorCode::Internal));
            }
            if ip {
                // MWAIT and EXSTOP both take the IP of the FUP.
                self.push(e.event, Binding::FUP_BOUND)?;
            } else {
                let mut ev = e.event;
                ev.ip_suppressed = true;
                self.stamp(&mut ev);
                return Ok(self.publish(ev));
            }
        }
        if ip {
            self.push(mk(EventKind::Exstop { ip: 0 }), Binding::FUP_BOUND)?;
            return Ok(Step::Next);
        }
        Ok(self.standalone(EventKind::Exstop { ip: 0 }, true))
    }

    fn decode_trig(
        &mut self,
        trbv: u8,
        ip: bool,
        mult: bool,
        icnt: Option<u16>,
    ) -> Result<Step, DecodeError> {
        if ip {
            // The FUP gives the IP; the count must be valid and zero.
            if icnt != Some(0) {
                return Err(self.err(ErrorCode::BadPacket));
            }
            let ev = mk(EventKind::Trig {
                trbv,
                icnt: 0,
                ip: 0,
                mult,
            });
            self.push(ev, Binding::FUP_BOUND)?;
            return Ok(Step::Next);
        }
        let (icnt, suppressed) = match icnt {
            Some(n) => {
                if n != 0 && !self.enabled {
                    return Err(self.err(ErrorCode::BadPacket));
                }
                // The IP is `icnt` instructions on from the last one decoded.
                (n, false)
            }
            None => (0, true),
        };
        Ok(self.standalone(
            EventKind::Trig {
                trbv,
                icnt,
                ip: 0,
                mult,
            },
            suppressed,
        ))
    }

    // ---- Event Trace ----

    /// Queue `kind` for the FUP that follows (`ip`), or for the FUP of the asynchronous
    /// branch if tracing is enabled and `fup_if_enabled`; else report it now with its IP
    /// suppressed.
    fn cfe_event(
        &mut self,
        kind: EventKind,
        ip: bool,
        fup_if_enabled: bool,
    ) -> Result<Step, DecodeError> {
        if ip {
            self.push(mk(kind), Binding::FUP_BOUND)?;
            return Ok(Step::Next);
        }
        if fup_if_enabled && self.enabled {
            self.push(mk(kind), Binding::FUP)?;
            return Ok(Step::Next);
        }
        Ok(self.standalone(kind, true))
    }

    fn decode_cfe(&mut self, ty: u8, vector: u8, ip: bool) -> Result<Step, DecodeError> {
        let pending = self.evq.pop(Binding::CFE).map(|e| e.event.kind);
        let no_data = |s: &Self| {
            if pending.is_some() {
                Err(s.err(ErrorCode::BadContext))
            } else {
                Ok(())
            }
        };
        match ty {
            0x01 => {
                let cr2 = match pending {
                    None => None,
                    Some(EventKind::Interrupt { cr2, .. }) => cr2,
                    Some(_) => return Err(self.err(ErrorCode::BadContext)),
                };
                self.cfe_event(EventKind::Interrupt { vector, cr2, ip: 0 }, ip, true)
            }
            0x02 => {
                no_data(self)?;
                self.cfe_event(EventKind::Iret { ip: 0 }, ip, false)
            }
            0x03 => {
                no_data(self)?;
                self.cfe_event(EventKind::Smi { ip: 0 }, ip, true)
            }
            0x04 | 0x05 => {
                no_data(self)?;
                if ip {
                    return Err(self.err(ErrorCode::BadPacket));
                }
                let kind = if ty == 0x04 {
                    EventKind::Rsm { ip: 0 }
                } else {
                    EventKind::Sipi { vector }
                };
                if self.enabled {
                    let mut ev = mk(kind);
                    ev.ip_suppressed = true;
                    self.push(ev, Binding::FUP)?;
                    return Ok(Step::Next);
                }
                Ok(self.standalone(kind, true))
            }
            0x06 => {
                no_data(self)?;
                self.cfe_event(EventKind::Init { ip: 0 }, ip, true)
            }
            0x07 => {
                no_data(self)?;
                self.cfe_event(EventKind::Vmentry { ip: 0 }, ip, false)
            }
            0x08 | 0x09 => {
                let (mut vec, vmxr, vmxq) = match pending {
                    None => (None, None, None),
                    Some(EventKind::Vmexit {
                        vector, vmxr, vmxq, ..
                    }) => (vector, vmxr, vmxq),
                    Some(_) => return Err(self.err(ErrorCode::BadContext)),
                };
                if ty == 0x09 {
                    vec = Some(vector);
                }
                let kind = EventKind::Vmexit {
                    vector: vec,
                    vmxr,
                    vmxq,
                    ip: 0,
                };
                self.cfe_event(kind, ip, true)
            }
            0x0a => {
                no_data(self)?;
                self.cfe_event(EventKind::Shutdown { ip: 0 }, ip, false)
            }
            0x0c => {
                no_data(self)?;
                self.cfe_event(EventKind::Uintr { vector, ip: 0 }, ip, true)
            }
            0x0d => {
                no_data(self)?;
                self.cfe_event(EventKind::Uiret { ip: 0 }, ip, false)
            }
            0x0e => {
                no_data(self)?;
                self.cfe_event(EventKind::Swintr { vector, ip: 0 }, ip, true)
            }
            0x0f => {
                no_data(self)?;
                self.cfe_event(EventKind::Syscall { ip: 0 }, ip, false)
            }
            _ => {
                // Unknown type: its FUP is used up. Event data waiting for it is an
                // error (libipt calls it internal; so do we, for the same output).
                if pending.is_some() {
                    return Err(self.err(ErrorCode::Internal));
                }
                if ip {
                    self.push_ignore(Binding::FUP_BOUND)?;
                }
                Ok(Step::Next)
            }
        }
    }

    fn decode_evd(&mut self, ty: u8, payload: u64) -> Result<Step, DecodeError> {
        let pending = self.evq.find(Binding::CFE, |_| true);
        match ty {
            0x00 => {
                if pending.is_some() {
                    return Err(self.err(ErrorCode::BadContext));
                }
                let ev = mk(EventKind::Interrupt {
                    vector: 0,
                    cr2: Some(payload),
                    ip: 0,
                });
                self.push(ev, Binding::CFE)?;
            }
            0x01 | 0x02 => {
                let i = match pending {
                    Some(i) => i,
                    None => {
                        let ev = mk(EventKind::Vmexit {
                            vector: None,
                            vmxr: None,
                            vmxq: None,
                            ip: 0,
                        });
                        self.push(ev, Binding::CFE)?;
                        self.evq
                            .find(Binding::CFE, |_| true)
                            .ok_or(self.err(ErrorCode::Internal))?
                    }
                };
                let bad = self.err(ErrorCode::BadContext);
                let Some(e) = self.evq.get_mut(i) else {
                    return Err(bad);
                };
                let EventKind::Vmexit { vmxr, vmxq, .. } = &mut e.event.kind else {
                    return Err(bad);
                };
                let slot = if ty == 0x01 { vmxq } else { vmxr };
                if slot.is_some() {
                    return Err(bad);
                }
                *slot = Some(payload);
            }
            _ => {}
        }
        Ok(Step::Next)
    }

    // ---- OVF ----

    fn decode_ovf(&mut self) -> Result<Step, DecodeError> {
        // Status updates of a PSB+ that the OVF ended go out first.
        if self.decode_psbend()? == Step::Event {
            return Ok(Step::Event);
        }
        // While disabled, events that wait for an IP that never comes go out without.
        while !self.enabled {
            let any = Binding::FUP_BOUND
                .or(Binding::FUP)
                .or(Binding::TIP)
                .or(Binding::EXSTOP)
                .or(Binding::PWRX);
            let Some(e) = self.evq.pop(any) else {
                break;
            };
            if e.ignore {
                continue;
            }
            let mut ev = e.event;
            use EventKind::*;
            match ev.kind {
                Exstop { .. }
                | Mwait { .. }
                | Ptwrite { .. }
                | Tsx { .. }
                | ExecMode { .. }
                | Iflags { .. }
                | Interrupt { .. }
                | Iret { .. }
                | Smi { .. }
                | Init { .. }
                | Vmentry { .. }
                | Vmexit { .. }
                | Shutdown { .. }
                | Uintr { .. }
                | Uiret { .. }
                | Trig { .. }
                | Swintr { .. }
                | Syscall { .. } => {
                    ev.ip_suppressed = true;
                    return Ok(self.publish(ev));
                }
                Pwre { .. } | Rsm { .. } | Sipi { .. } => return Ok(self.publish(ev)),
                _ => continue,
            }
        }

        let ovf_offset = self.cur_offset();
        let (time, tcal) = (self.time, self.tcal);
        self.reset();
        self.cur = Current::Lost { offset: ovf_offset };
        self.time = time;
        if self.options.keep_tcal_on_ovf {
            self.tcal = tcal;
            self.tcal.update_ovf();
        }

        match find_ovf_fup(self.pkt.clone()) {
            Ok(Some(fup_end)) => {
                if self.config.errata.apl12 {
                    if let Some(step) = self.handle_apl12(fup_end, ovf_offset)? {
                        return Ok(step);
                    }
                }
                let mut ev = mk(EventKind::Overflow { ip: 0 });
                self.stamp(&mut ev);
                ev.offset = ovf_offset;
                self.push_at(ev, Binding::FUP_BOUND, ovf_offset)?;
                Ok(Step::Next)
            }
            r => {
                if self.config.errata.skd010 {
                    if let Some(step) = self.handle_skd010(ovf_offset)? {
                        return Ok(step);
                    }
                }
                if self.config.errata.apl11
                    && matches!(r, Err(e) if e.code == ErrorCode::BadContext)
                {
                    if let Some(step) = self.handle_apl11(ovf_offset)? {
                        return Ok(step);
                    }
                }
                if let Err(e) = r {
                    if e.code != ErrorCode::Eos {
                        return Err(e);
                    }
                }
                let mut ev = mk(EventKind::Overflow { ip: 0 });
                ev.ip_suppressed = true;
                self.stamp(&mut ev);
                ev.offset = ovf_offset;
                self.out = Some(ev);
                self.fetch();
                Ok(Step::Event)
            }
        }
    }

    fn push_at(&mut self, ev: Event, binding: Binding, offset: u64) -> Result<(), DecodeError> {
        if self.evq.push(ev, binding, false) {
            Ok(())
        } else {
            Err(DecodeError {
                code: ErrorCode::NoMem,
                offset,
            })
        }
    }

    /// Tracing resumed at `payload`'s IP: report the overflow there and continue from
    /// `pkt` (just after `cur`) with the time decoded so far.
    fn recover_ovf_at_ip(
        &mut self,
        pkt: PacketDecoder<'a>,
        cur: Current,
        payload: IpPayload,
        time: Time,
        tcal: TimeCal,
        ovf_offset: u64,
    ) {
        self.update_ip(payload);
        let mut ev = mk(EventKind::Overflow { ip: 0 });
        self.stamp(&mut ev);
        ev.offset = ovf_offset;
        self.pkt = pkt;
        self.peeked = None;
        self.cur = cur;
        self.time = time;
        self.tcal = tcal;
        self.enabled = true;
        self.bind_ip(&mut ev);
        self.out = Some(ev);
    }

    /// Tracing resumed disabled: report the overflow and continue from `pkt` (just
    /// after `cur`).
    fn recover_ovf_disabled(
        &mut self,
        pkt: PacketDecoder<'a>,
        cur: Current,
        time: Time,
        tcal: TimeCal,
        ovf_offset: u64,
    ) {
        let mut ev = mk(EventKind::Overflow { ip: 0 });
        ev.ip_suppressed = true;
        self.stamp(&mut ev);
        ev.offset = ovf_offset;
        self.pkt = pkt;
        self.peeked = None;
        self.cur = cur;
        self.time = time;
        self.tcal = tcal;
        self.out = Some(ev);
    }

    /// SKD010: the FUP after an OVF may be missing. Find where tracing resumed from the
    /// packets that follow. `None` if the erratum does not explain what follows.
    fn handle_skd010(&mut self, ovf_offset: u64) -> Result<Option<Step>, DecodeError> {
        let mut pkt = self.pkt.clone();
        let (mut time, mut tcal) = (self.time, self.tcal);
        let mut tsx: Option<ModeTsx> = None;
        loop {
            let (offset, p) = match pkt.next_packet() {
                Ok(x) => x,
                Err(e) if e.code == ErrorCode::Eos => return Ok(None),
                Err(e) => return Err(e),
            };
            let here = Current::Packet { offset, packet: p };
            match p {
                Packet::Ip(IpPacketKind::TipPge, _) | Packet::Tnt8(_) | Packet::Tnt64(_) => {
                    return Ok(None)
                }
                Packet::Ip(IpPacketKind::TipPgd, _) => {
                    self.recover_ovf_disabled(pkt, here, time, tcal, ovf_offset);
                    self.fetch();
                    return Ok(Some(Step::Event));
                }
                Packet::Pip { .. } | Packet::Vmcs { .. } | Packet::ModeExec(_) => {}
                Packet::ModeTsx(t) => {
                    if tsx.is_some() {
                        return Ok(None);
                    }
                    tsx = Some(t);
                }
                Packet::Ip(IpPacketKind::Fup, payload) => {
                    if let Some(t) = tsx {
                        let ev = mk(EventKind::Tsx {
                            ip: 0,
                            speculative: t.intx,
                            aborted: t.abrt,
                        });
                        self.push_at(ev, Binding::FUP_BOUND, offset)?;
                    }
                    self.recover_ovf_at_ip(pkt, here, payload, time, tcal, ovf_offset);
                    return Ok(Some(Step::Event));
                }
                Packet::Ip(IpPacketKind::Tip, payload) => {
                    self.recover_ovf_at_ip(pkt, here, payload, time, tcal, ovf_offset);
                    self.fetch();
                    return Ok(Some(Step::Event));
                }
                Packet::Psb => {
                    let fup = match find_header_fup(pkt.clone()) {
                        Ok(Some(fup)) => fup,
                        Ok(None) => return Ok(None),
                        Err(e) if e.code == ErrorCode::Eos => return Ok(None),
                        Err(e) => return Err(e),
                    };
                    // Resume at the PSB, which is decoded next as usual.
                    self.recover_ovf_at_ip(pkt, here, fup, time, tcal, ovf_offset);
                    return Ok(Some(Step::Event));
                }
                Packet::Psbend => {
                    return Err(DecodeError {
                        code: ErrorCode::BadContext,
                        offset,
                    })
                }
                Packet::Ovf | Packet::Stop | Packet::Mwait { .. } | Packet::Invalid => {
                    return Ok(None)
                }
                Packet::Exstop { ip }
                | Packet::Ptw { ip, .. }
                | Packet::Cfe { ip, .. }
                | Packet::Bep { ip } => {
                    if ip {
                        return Ok(None);
                    }
                }
                Packet::Pad
                | Packet::Mnt { .. }
                | Packet::Pwre { .. }
                | Packet::Pwrx { .. }
                | Packet::Evd { .. }
                | Packet::Trig { .. }
                | Packet::Bbp { .. }
                | Packet::Bip { .. } => {}
                Packet::Tsc { .. }
                | Packet::Cbr { .. }
                | Packet::Tma { .. }
                | Packet::Mtc { .. }
                | Packet::Cyc { .. } => {
                    apply_timing(&mut time, &mut tcal, &self.config, &p, false)
                        .map_err(|code| DecodeError { code, offset })?;
                }
                _ => return Ok(None),
            }
        }
    }

    /// APL11: after an OVF a TIP.PGD may come without the FUP.
    fn handle_apl11(&mut self, ovf_offset: u64) -> Result<Option<Step>, DecodeError> {
        let mut pkt = self.pkt.clone();
        let (mut time, mut tcal) = (self.time, self.tcal);
        loop {
            let (offset, p) = pkt.next_packet()?;
            match p {
                Packet::Ip(IpPacketKind::TipPgd, _) => {
                    let here = Current::Packet { offset, packet: p };
                    self.recover_ovf_disabled(pkt, here, time, tcal, ovf_offset);
                    self.fetch();
                    return Ok(Some(Step::Event));
                }
                Packet::Tsc { .. }
                | Packet::Cbr { .. }
                | Packet::Tma { .. }
                | Packet::Mtc { .. }
                | Packet::Cyc { .. } => {
                    apply_timing(&mut time, &mut tcal, &self.config, &p, false)
                        .map_err(|code| DecodeError { code, offset })?;
                }
                Packet::Pad
                | Packet::Mnt { .. }
                | Packet::Cfe { .. }
                | Packet::Evd { .. }
                | Packet::Trig { .. }
                | Packet::Bbp { .. }
                | Packet::Bip { .. }
                | Packet::Bep { .. } => {}
                _ => return Ok(None),
            }
        }
    }

    /// APL12: a FUP after an OVF while tracing was disabled is bogus if tracing then
    /// (re-)starts with a TIP.PGE, a PSB+ without FUP, or a TraceStop.
    fn handle_apl12(&mut self, fup_end: u64, ovf_offset: u64) -> Result<Option<Step>, DecodeError> {
        let mut pkt = self.pkt.clone();
        pkt.sync_set(fup_end)?;
        loop {
            let p = match pkt.next_packet() {
                Ok((_, p)) => p,
                Err(e) if e.code == ErrorCode::Eos => return Ok(None),
                Err(e) => return Err(e),
            };
            match p {
                Packet::Tnt8(_)
                | Packet::Tnt64(_)
                | Packet::Ip(IpPacketKind::Tip | IpPacketKind::TipPgd, _)
                | Packet::Psbend
                | Packet::Ovf
                | Packet::Invalid => return Ok(None),
                Packet::Psb => match find_header_fup(pkt.clone()) {
                    Ok(None) => return self.recover_ovf_at_offset(fup_end, ovf_offset).map(Some),
                    Ok(Some(_)) => return Ok(None),
                    Err(e) if e.code == ErrorCode::Eos => return Ok(None),
                    Err(e) => return Err(e),
                },
                Packet::Stop | Packet::Ip(IpPacketKind::TipPge, _) => {
                    return self.recover_ovf_at_offset(fup_end, ovf_offset).map(Some)
                }
                _ => {}
            }
        }
    }

    /// Skip the bogus FUP that ends at `fup_end`, applying the timing packets before
    /// it, and report the overflow with tracing disabled.
    fn recover_ovf_at_offset(
        &mut self,
        fup_end: u64,
        ovf_offset: u64,
    ) -> Result<Step, DecodeError> {
        self.peeked = None;
        loop {
            let (offset, p) = self.pkt.next_packet()?;
            let end = self.pkt.offset()?;
            if end >= fup_end {
                if end > fup_end {
                    return Err(DecodeError {
                        code: ErrorCode::Internal,
                        offset,
                    });
                }
                break;
            }
            match p {
                Packet::ModeExec(_)
                | Packet::ModeTsx(_)
                | Packet::Pip { .. }
                | Packet::Vmcs { .. }
                | Packet::Invalid => {
                    return Err(DecodeError {
                        code: ErrorCode::Internal,
                        offset,
                    })
                }
                _ => apply_timing(&mut self.time, &mut self.tcal, &self.config, &p, false)
                    .map_err(|code| DecodeError { code, offset })?,
            }
        }
        let mut ev = mk(EventKind::Overflow { ip: 0 });
        ev.ip_suppressed = true;
        self.stamp(&mut ev);
        ev.offset = ovf_offset;
        self.out = Some(ev);
        self.fetch();
        Ok(Step::Event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pt_encoder::{encode_to_vec, ExecMode, ModeExec, Tnt};

    /// MTC and CYC packets fail in the time model only where
    /// [`EventDecoder::mtc_cyc_can_fail`] says they can, and where they cannot, the
    /// other timing packets fail as they do without them: random sequences of timing
    /// packets, PSBs and overflows under extreme configurations.
    #[test]
    fn mtc_cyc_fail_only_where_said() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rand = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut failed_beyond = 0;
        for mtc_freq in [0u8, 1, 3, 7, 9, 10, 15, 16, 20, 23] {
            for (eax, ebx) in [
                (0, 0),
                (1, u32::MAX),
                (3, 7),
                (u32::MAX, 1),
                (2, 0x7fff_ffff),
            ] {
                for nom_freq in [0u8, 1, 255] {
                    let mut config = Config {
                        mtc_freq,
                        nom_freq,
                        cpuid_0x15_eax: eax,
                        cpuid_0x15_ebx: ebx,
                        ..Config::default()
                    };
                    config.errata.skl168 = nom_freq == 1;
                    let can_fail =
                        EventDecoder::new(&[], &config, Options::default()).mtc_cyc_can_fail();
                    assert_eq!(can_fail, mtc_freq > 15);
                    let (mut time, mut tcal) = (Time::new(), TimeCal::new());
                    // A model that MTC and CYC do not move (a consumer that takes
                    // them by their length): the other packets' errors are the same.
                    let (mut lag_time, mut lag_tcal) = (Time::new(), TimeCal::new());
                    for _ in 0..20_000 {
                        let r = rand();
                        let p = match r % 16 {
                            0 => Packet::Tsc { tsc: r >> 8 },
                            1 => Packet::Tma {
                                ctc: (r >> 8) as u16,
                                fc: (r >> 24) as u16 & 0x1ff,
                            },
                            2 => Packet::Cbr {
                                ratio: (r >> 8) as u8 | 1,
                            },
                            3 => {
                                tcal.update_psb(&config);
                                lag_tcal.update_psb(&config);
                                continue;
                            }
                            4 if r >> 60 == 0 => {
                                tcal.update_ovf();
                                lag_tcal.update_ovf();
                                continue;
                            }
                            5..=8 => Packet::Mtc {
                                ctc: (r >> 8) as u8,
                            },
                            _ => Packet::Cyc {
                                value: match r >> 62 {
                                    0 => (r >> 8) & 0x1f,
                                    1 => (r >> 8) & 0xfff,
                                    _ => r >> (8 + (r >> 56) % 56),
                                },
                            },
                        };
                        let header = r & 0x80 != 0;
                        let timing = matches!(p, Packet::Mtc { .. } | Packet::Cyc { .. });
                        let header = header && !timing;
                        let r = apply_timing(&mut time, &mut tcal, &config, &p, header);
                        if timing {
                            if let Err(e) = r {
                                assert!(can_fail, "{p:?} {e:?} under {config:?}");
                                failed_beyond += 1;
                            }
                        } else if !can_fail {
                            let lag =
                                apply_timing(&mut lag_time, &mut lag_tcal, &config, &p, header);
                            assert_eq!(r, lag, "{p:?} (header {header}) under {config:?}");
                        }
                    }
                }
            }
        }
        assert!(
            failed_beyond > 0,
            "no failure past the hardware's MTC frequencies"
        );
    }

    #[test]
    fn handoff_at_plain_packets_and_back() {
        let ip = |k, ip| Packet::Ip(k, IpPayload::new(IpCompression::Full, ip));
        let mut trace = Vec::new();
        let mut at = Vec::new();
        for p in [
            Packet::Psb,
            Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)),
            Packet::Psbend,
            ip(IpPacketKind::TipPge, 0x1000),
            Packet::Tnt8(Tnt::from_results([true]).unwrap()),
            ip(IpPacketKind::Tip, 0x2000),
            Packet::Mtc { ctc: 1 },
            Packet::Tnt8(Tnt::from_results([false]).unwrap()),
            ip(IpPacketKind::TipPgd, 0x3000),
        ] {
            at.push(trace.len() as u64);
            encode_to_vec(&p, &mut trace).unwrap();
        }
        let (tnt, tip, mtc, pgd) = (at[4], at[5], at[6], at[8]);
        let mut ev = EventDecoder::new(&trace, &Config::default(), Options::default());
        ev.sync_forward().unwrap();
        assert_eq!(ev.handoff(), None, "not enabled yet");
        // PSB+'s events, then the enable.
        loop {
            let e = ev.next().unwrap();
            if let EventKind::Enabled { ip, .. } = e.kind {
                assert_eq!(ip, 0x1000);
                break;
            }
        }
        let e = ev.next().unwrap();
        assert!(matches!(e.kind, EventKind::Tnt { size: 1, .. }), "{e:?}");
        assert_eq!(e.offset, tnt);
        // At the TIP, not taken yet, with the IP before it.
        assert_eq!(ev.handoff(), Some((tip, 0x1000)));
        let e = ev.next().unwrap();
        assert!(matches!(e.kind, EventKind::Tip { ip: 0x2000 }));
        // After the TIP reported.
        assert_eq!(ev.handoff(), Some((mtc, 0x2000)));
        // A consumer takes the MTC and the TNT and hands back at the TIP.PGD.
        ev.apply_time(mtc, &Packet::Mtc { ctc: 1 }).unwrap();
        ev.resume_at(pgd, true, 0x2000).unwrap();
        let e = ev.next().unwrap();
        assert!(
            matches!(e.kind, EventKind::Disabled { ip: 0x3000 }),
            "{e:?}"
        );
        assert_eq!(ev.handoff(), None, "disabled");
    }
}
