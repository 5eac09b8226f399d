//! The block decoder: events + code image → blocks of sequential instructions.
//!
//! This follows the behaviour of libipt's block decoder (`pt_blk_*`): a block is a run
//! of instructions that execute one after the other, ending where trace is needed to go
//! on (a conditional branch, an indirect branch, a return, a far transfer), where an
//! event binds, where the code switches sections, or after 0xffff instructions. Between
//! blocks, [`BlockDecoder::next`] and [`BlockDecoder::event`] alternate as the returned
//! [`Status`] says.
//!
//! Hot code is decoded once: the walk goes over [`crate::block_cache`] blocks (one hash
//! lookup or one array access per straight-line run), and conditional branches follow
//! the cache's successor links.
//!
//! The counting fast path ([`BlockDecoder::skip_blocks`]) is a module of its own
//! (`block/skip.rs`), with its own state; checkpoints for the parallel decode are in
//! `block/checkpoint.rs`.

use super::filter::AddrFilter;
use super::retstack::RetStack;
use super::Progress;
use crate::block_cache::{BlockCache, BlockId};
use crate::config::Config;
use crate::error::{ErrorCode, Status};
use crate::event::{self, Event, EventDecoder, EventKind, Timestamp};
use crate::image::Image;
use crate::insn::{self, Insn, InsnClass, MAX_INSN_SIZE};
use crate::packet::recover::{ResumeKind, ResumePoint};
use pt_encoder::ExecMode;

/// Most instructions in one block (libipt counts them in 16 bits).
pub const MAX_BLOCK_INSNS: u32 = 0xffff;

/// Steps BDM64's workaround takes to see whether the event IP is reachable.
const BDM64_MAX_STEPS: usize = 0x100;

/// Flow decoder options (libipt's `pt_conf_flags` for the block and instruction
/// decoders, plus the IP filter configuration).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowOptions {
    /// End a block after a direct near call.
    pub end_on_call: bool,
    /// End a block after a direct near jump.
    pub end_on_jump: bool,
    /// Report tick events when a TNT or TIP carries a new timestamp.
    pub tick_events: bool,
    /// Report interrupt-flag changes (Event Trace).
    pub iflags_events: bool,
    /// Keep the timing calibration over an overflow.
    pub keep_tcal_on_ovf: bool,
    /// The IP filter ranges the trace was recorded with (for erratum SKL014).
    pub filter: AddrFilter,
}

/// The address space the flow runs in, as paging and VMCS events last said (libipt's
/// `pt_asid`; 0 where not known).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Asid {
    /// CR3 (from PIP).
    pub cr3: u64,
    /// The VMCS base address (from VMCS packets).
    pub vmcs: u64,
}

/// A block of sequential instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// The first instruction's IP.
    pub ip: u64,
    /// The last instruction's IP.
    pub end_ip: u64,
    /// The execution mode of all instructions.
    pub mode: ExecMode,
    /// Number of instructions (0 for an empty block).
    pub ninsn: u32,
    /// The instructions executed speculatively (inside a transaction).
    pub speculative: bool,
    /// The last instruction runs past the end of its section.
    pub truncated: bool,
    /// The image section of the instructions (0 if unknown).
    pub isid: u32,
    /// The last instruction's class, if the block has one.
    pub class: Option<InsnClass>,
}

impl Block {
    fn start(ip: u64, mode: ExecMode, speculative: bool) -> Self {
        Block {
            ip,
            end_ip: 0,
            mode,
            ninsn: 0,
            speculative,
            truncated: false,
            isid: 0,
            class: None,
        }
    }
}

mod checkpoint;
mod code;
mod images;
use code::{BlockView, Marks, Target, FILL_STEPS, TARGET_SLOTS};
mod skip;

pub use checkpoint::Checkpoint;

/// Events bound to the postponed instruction (at most one of each kind).
mod bound {
    pub const PAGING: u8 = 1 << 0;
    pub const VMCS: u8 = 1 << 1;
    pub const PTWRITE: u8 = 1 << 2;
    pub const IRET: u8 = 1 << 3;
    pub const VMENTRY: u8 = 1 << 4;
    pub const UIRET: u8 = 1 << 5;
    pub const SWINTR: u8 = 1 << 6;
    pub const SYSCALL: u8 = 1 << 7;
}

/// Instruction predicates for [`BlockDecoder::proceed_to_insn`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pred {
    Never,
    ChangesCr3,
    BindsToPip,
    BindsToVmcs,
    Ptwrite,
    Iret,
    Vmentry,
    Uiret,
    Swint,
    Syscall,
    Skl014,
}

impl Pred {
    fn test(self, insn: &Insn) -> bool {
        match self {
            Pred::Never => false,
            Pred::ChangesCr3 => insn.changes_cr3(),
            Pred::BindsToPip => insn.binds_to_pip(),
            Pred::BindsToVmcs => insn.binds_to_vmcs(),
            Pred::Ptwrite => insn.class == InsnClass::Ptwrite,
            Pred::Iret => insn.is_iret(),
            Pred::Vmentry => insn.is_vmentry(),
            Pred::Uiret => insn.is_uiret(),
            Pred::Swint => insn.is_swint(),
            Pred::Syscall => insn.is_syscall(),
            Pred::Skl014 => match insn.class {
                InsnClass::Jump | InsnClass::Call => insn.is_direct(),
                InsnClass::Other => insn.changes_cr3(),
                _ => false,
            },
        }
    }
}

/// Where execution goes after `insn` without trace (libipt's `pt_insn_next_ip`):
/// the next instruction, or a direct jump's or call's target; `None` if trace is
/// needed (a conditional or indirect branch, a return, a far transfer).
#[inline]
pub fn next_ip(insn: &Insn) -> Option<u64> {
    match insn.class {
        InsnClass::Other | InsnClass::Ptwrite => Some(insn.next_ip()),
        InsnClass::Jump | InsnClass::Call => insn.target,
        _ => None,
    }
}

/// How a walk without trace towards the instruction an event binds to ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Walk {
    /// At the instruction or IP looked for.
    Reached,
    /// The block ended first (full, truncated, another section, end-on-call/jump).
    Stopped,
    /// An instruction that needs trace came first (the walk's `last` holds it).
    NeedsTrace,
}

impl Walk {
    /// Whether the walk got there; a branch that needs trace before the event's
    /// instruction means the trace does not match the code (libipt's "bad query").
    fn reached(self) -> Result<bool, ErrorCode> {
        match self {
            Walk::Reached => Ok(true),
            Walk::Stopped => Ok(false),
            Walk::NeedsTrace => Err(ErrorCode::BadQuery),
        }
    }
}

/// A decoded instruction with where it lives.
#[derive(Clone, Copy, Debug)]
struct Decoded {
    insn: Insn,
    isid: u32,
    truncated: bool,
}

/// Decodes the instruction at `ip` in `image`: its section id and whether it runs past
/// the end of that section (completed from the next one).
fn decode_in(image: &Image, ip: u64, mode: ExecMode) -> Result<Decoded, ErrorCode> {
    let section = image.find(ip).ok_or(ErrorCode::NoMap)?;
    let skip = ip.wrapping_sub(section.vaddr()) as usize;
    let bytes = section.bytes().get(skip..).ok_or(ErrorCode::NoMap)?;
    if bytes.len() >= MAX_INSN_SIZE {
        let insn = insn::decode(bytes, ip, mode).map_err(|e| e.code)?;
        return Ok(Decoded {
            insn,
            isid: section.id(),
            truncated: false,
        });
    }
    let insn = insn::decode_at(image, ip, mode).map_err(|e| e.code)?;
    Ok(Decoded {
        insn,
        isid: section.id(),
        truncated: usize::from(insn.size) > bytes.len(),
    })
}

/// A placeholder event while none is loaded.
const NO_EVENT: Event = Event {
    kind: EventKind::Stop,
    ip_suppressed: true,
    status_update: false,
    time: Timestamp {
        tsc: None,
        lost_mtc: 0,
        lost_cyc: 0,
    },
    offset: 0,
};

/// The block decoder. See the [module docs](self).
pub struct BlockDecoder<'a> {
    evdec: EventDecoder<'a>,
    image: &'a Image,
    cache: BlockCache,
    options: FlowOptions,
    config: Config,
    /// The current event (valid while `status` is `Ok`).
    event: Event,
    /// A deferred event decoder error.
    status: Result<(), ErrorCode>,
    ip: u64,
    mode: ExecMode,
    enabled: bool,
    speculative: bool,
    /// The time of the last event used up.
    time: Timestamp,
    cbr: Option<u32>,
    icnt: u32,
    has_icnt: bool,
    asid: Asid,
    retstack: RetStack,
    /// An instruction whose events are being reported before proceeding past it.
    postponed: Option<Insn>,
    bound: u8,
    /// The cache block at `ip` is this link of that block (saves a hash lookup).
    link: Option<Link>,
    /// The cache block whose return or indirect branch brought us to `ip`.
    came_from: Option<BlockId>,
    /// Per cache block ending in a return or indirect branch: where it went last
    /// time, and that block's id.
    last_target: Vec<Target>,
    /// Block ids by IP, direct-mapped ([`target_slot`]): cache blocks that a return or
    /// indirect branch led to.
    targets: Box<[Target]>,
    /// The section that holds the last cache block: `[lo, hi)` and its id.
    section: (u64, u64, u32),
    /// The instructions libipt's block cache would know by now.
    marks: Marks,
    /// Per cache block: all its instructions are in `marks`.
    warm: Vec<bool>,
    /// The last event [`Self::event`] failed on, and how often in a row.
    failed: Option<(Event, u8)>,
    /// The cache blocks of the last block returned, and whether the list is complete.
    segs: Vec<(BlockId, u32)>,
    segs_ok: bool,
    /// The state the last resync started from.
    last_resync: Option<(Option<u64>, Event, u64, bool)>,
    /// The counting fast path's own state ([`skip`]).
    skip: skip::Skip,
    /// What was learnt about the code of other images ([`images`]).
    stash: images::Stash,
}

/// A successor link of a cache block: the block execution goes on at after `block`'s
/// last instruction went the `taken` way (or fell through), to `ip`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Link {
    block: BlockId,
    taken: bool,
    ip: u64,
}

fn code(e: crate::error::DecodeError) -> ErrorCode {
    e.code
}

impl<'a> BlockDecoder<'a> {
    /// A decoder for `trace` with code from `image`. Call
    /// [`sync_forward`](Self::sync_forward) first.
    pub fn new(trace: &'a [u8], image: &'a Image, config: &Config, options: FlowOptions) -> Self {
        let evopts = event::Options {
            tick_events: false,
            keep_tcal_on_ovf: options.keep_tcal_on_ovf,
            iflags_events: options.iflags_events,
        };
        let mut d = Self {
            evdec: EventDecoder::new(trace, config, evopts),
            image,
            cache: BlockCache::new(),
            options,
            config: *config,
            event: NO_EVENT,
            status: Err(ErrorCode::NoSync),
            ip: 0,
            mode: ExecMode::Unknown,
            enabled: false,
            speculative: false,
            time: Timestamp::default(),
            cbr: None,
            icnt: 0,
            has_icnt: false,
            asid: Asid::default(),
            retstack: RetStack::new(),
            postponed: None,
            bound: 0,
            link: None,
            section: (1, 0, 0),
            came_from: None,
            last_target: Vec::new(),
            targets: vec![Target::NONE; TARGET_SLOTS].into_boxed_slice(),
            marks: Marks::default(),
            warm: Vec::new(),
            skip: skip::Skip::default(),
            failed: None,
            last_resync: None,
            segs: Vec::new(),
            segs_ok: false,
            stash: images::Stash::default(),
        };
        d.reset();
        d
    }

    /// The code image.
    pub fn image(&self) -> &'a Image {
        self.image
    }

    /// The options.
    pub fn options(&self) -> &FlowOptions {
        &self.options
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Offset of the next packet the event decoder looks at (for diagnostics).
    pub fn offset(&self) -> Result<u64, ErrorCode> {
        self.evdec.offset().map_err(code)
    }

    /// Where the flow is: the IP of the next instruction (meaningful while tracing is
    /// enabled, i.e. when the last status did not say `ip_suppressed`).
    pub fn ip(&self) -> u64 {
        self.ip
    }

    /// Offset of the PSB the decoder last synchronized at.
    pub fn sync_offset(&self) -> Option<u64> {
        self.evdec.sync_offset()
    }

    /// The time of the last event used up (the TNT or TIP that ended the last block,
    /// or an event taken since).
    pub fn time(&self) -> Timestamp {
        self.time
    }

    /// The TSC of [`time`](Self::time), 0 if none is known (what libipt compares tick
    /// events with).
    fn tsc(&self) -> u64 {
        self.time.tsc.unwrap_or(0)
    }

    /// The last core:bus ratio seen.
    pub fn core_bus_ratio(&self) -> Option<u32> {
        self.cbr
    }

    /// The current CR3 and VMCS base (from paging and VMCS events).
    pub fn asid(&self) -> Asid {
        self.asid
    }

    /// The block cache's counters.
    pub fn cache_stats(&self) -> crate::block_cache::CacheStats {
        self.cache.stats()
    }

    fn reset(&mut self) {
        self.time = Timestamp::default();
        self.cbr = None;
        self.icnt = 0;
        self.mode = ExecMode::Unknown;
        self.ip = 0;
        self.status = Err(ErrorCode::NoSync);
        self.enabled = false;
        self.speculative = false;
        self.has_icnt = false;
        self.postponed = None;
        self.bound = 0;
        self.event = NO_EVENT;
        self.retstack.clear();
        self.asid = Asid::default();
        self.link = None;
        self.came_from = None;
        self.failed = None;
        self.last_resync = None;
    }

    fn status_flags(&self, event_pending: bool) -> Status {
        Status {
            event_pending,
            ip_suppressed: !self.enabled,
            eos: self.status == Err(ErrorCode::Eos),
        }
    }

    // ---- TRIG anchors ----

    fn find_trig_anchor(&mut self) -> Result<(), ErrorCode> {
        use EventKind::*;
        let ev = &self.event;
        let set = match ev.kind {
            Paging { .. }
            | Sipi { .. }
            | Cbr { .. }
            | Mnt { .. }
            | Stop
            | Vmcs { .. }
            | Mwait { .. }
            | Pwre { .. }
            | Pwrx { .. } => return Ok(()),
            Enabled { .. } | AsyncBranch { .. } | Tip { .. } | Tnt { .. } => {
                if ev.ip_suppressed {
                    return Err(ErrorCode::Internal);
                }
                true
            }
            Disabled { .. } | AsyncDisabled { .. } => false,
            Overflow { .. } => !ev.ip_suppressed,
            _ => {
                if ev.ip_suppressed {
                    return Ok(());
                }
                true
            }
        };
        self.has_icnt = set;
        self.icnt = 0;
        Ok(())
    }

    fn load_next_event(&mut self) {
        match self.evdec.next_into(&mut self.event) {
            Ok(()) => self.status = Ok(()),
            Err(e) => {
                self.event = NO_EVENT;
                self.status = Err(e.code);
            }
        }
    }

    /// Consume the current event and load the next one.
    fn fetch_event(&mut self) -> Result<(), ErrorCode> {
        self.time = self.event.time;
        // A bad anchor is reported, but the event is used up all the same: libipt
        // keeps it and then reports the same error over and over on resync.
        let anchor = if self.status.is_ok() {
            self.find_trig_anchor()
        } else {
            Ok(())
        };
        self.load_next_event();
        anchor
    }

    /// A TIP or TNT was used up: turn it into a tick event if asked for and its time is
    /// new, else move on to the next event.
    fn tick(&mut self, ip: u64) -> Result<(), ErrorCode> {
        if self.options.tick_events && self.event.time.tsc.unwrap_or(0) != self.tsc() {
            self.event.kind = EventKind::Tick { ip };
            return Ok(());
        }
        self.fetch_event()
    }

    /// Take an indirect branch's target from the trace.
    fn proceed_indirect(&mut self) -> Result<(), ErrorCode> {
        if self.status.is_err() {
            return Err(ErrorCode::BadQuery);
        }
        match self.event.kind {
            EventKind::Tip { ip } => {
                if self.event.ip_suppressed {
                    return Err(ErrorCode::BadPacket);
                }
                let from = self.ip;
                self.ip = ip;
                self.tick(from)
            }
            EventKind::Tnt { .. } => {
                // A deferred TIP may follow the TNT that is still in use.
                let saved = self.evdec.clone();
                match self.evdec.next() {
                    Ok(Event {
                        kind: EventKind::Tip { ip },
                        ..
                    }) => {
                        self.ip = ip;
                        Ok(())
                    }
                    _ => {
                        self.evdec = saved;
                        Err(ErrorCode::BadQuery)
                    }
                }
            }
            _ => Err(ErrorCode::BadQuery),
        }
    }

    /// Take one conditional branch result from the current TNT event.
    #[inline]
    fn cond_branch(&mut self) -> Result<bool, ErrorCode> {
        if self.status.is_err() {
            return Err(ErrorCode::BadQuery);
        }
        match &mut self.event.kind {
            EventKind::Tnt { bits, size } => {
                if *size == 0 {
                    return Err(ErrorCode::Internal);
                }
                *size -= 1;
                Ok((*bits >> *size) & 1 != 0)
            }
            _ => Err(ErrorCode::BadQuery),
        }
    }

    // ---- synchronization ----

    fn start(&mut self) -> Result<Status, ErrorCode> {
        // Learn the state from the PSB+ status updates without consuming them: the
        // caller gets them as events too.
        let pos = self.evdec.pos();
        let mut ahead = self.evdec.clone();
        loop {
            if ahead.pos() != pos {
                break;
            }
            match ahead.next() {
                Err(e) if e.code == ErrorCode::Eos => break,
                Err(e) => return Err(e.code),
                Ok(ev) => {
                    if !ev.status_update {
                        break;
                    }
                    if let EventKind::Enabled { ip, .. } = ev.kind {
                        self.enabled = true;
                        self.ip = ip;
                        break;
                    }
                }
            }
        }
        self.load_next_event();
        self.proceed_trailing_event(None)
    }

    /// Synchronize at the next PSB.
    pub fn sync_forward(&mut self) -> Result<Status, ErrorCode> {
        self.reset();
        self.evdec.sync_forward().map_err(code)?;
        self.start()
    }

    /// Synchronize at the PSB at `offset`.
    pub fn sync_set(&mut self, offset: u64) -> Result<Status, ErrorCode> {
        self.reset();
        self.evdec.sync_set(offset).map_err(code)?;
        self.start()
    }

    /// After an error, go on at the next point in the event stream where the IP is
    /// known again, without a new PSB where possible (libipt's `pt_blk_resync`).
    /// [`Progress::EventFirst`]: take the pending event ([`event`](Self::event)), then
    /// call this again.
    pub fn resync(&mut self) -> Result<Progress, ErrorCode> {
        use EventKind::*;
        // Resynchronizing twice from the very same state would fail the same way
        // forever (libipt's ptxed can loop there): give up and let the caller look
        // for the next PSB.
        let here = (self.evdec.offset().ok(), self.event, self.ip, self.enabled);
        if self.last_resync == Some(here) {
            self.last_resync = None;
            return Err(ErrorCode::NoSync);
        }
        self.last_resync = Some(here);
        self.clear_postponed();
        loop {
            self.status?;
            let ev = self.event;
            // An event that failed again after a resync would fail forever (libipt's
            // ptxed loops there): drop it.
            if matches!(self.failed, Some((f, n)) if f == ev && n >= 2) {
                self.failed = None;
                self.fetch_event()?;
                continue;
            }
            if ev.status_update {
                let at = self.sync_offset().ok_or(ErrorCode::NoSync)?;
                return self.sync_set(at).map(Progress::Done);
            }
            let pending = self.status_flags(true);
            match ev.kind {
                // Without an IP the event cannot be processed, and reporting it again
                // would fail again (libipt's ptxed loops forever here): skip it.
                Enabled { .. } if ev.ip_suppressed => {}
                Enabled { .. } => {
                    self.enabled = false;
                    return Ok(Progress::Done(self.status_flags(true)));
                }
                Disabled { .. } => {
                    self.enabled = true;
                    self.ip = 0;
                    self.process_disabled(&ev)?;
                    return self.resync_at_event().map(Progress::Done);
                }
                AsyncDisabled { at, .. } => {
                    self.ip = at;
                    if self.config.errata.skd022 && self.handle_skd022()? {
                        // Now a synchronous disable: look at it again.
                        self.fetch_event()?;
                        continue;
                    }
                    return Ok(Progress::Done(self.status_flags(true)));
                }
                AsyncBranch { from, .. } => {
                    self.ip = from;
                    return Ok(Progress::Done(self.status_flags(true)));
                }
                AsyncPaging { ip, .. } if !ev.ip_suppressed => {
                    self.ip = ip;
                    return Ok(Progress::Done(self.status_flags(true)));
                }
                AsyncPaging { .. } | Paging { .. } => self.process_paging(&ev),
                Overflow { .. } => return Ok(Progress::Done(pending)),
                ExecMode { ip, .. } | Tsx { ip, .. } | Iflags { ip, .. } | Interrupt { ip, .. } => {
                    if ev.ip_suppressed {
                        self.enabled = false;
                    } else {
                        self.enabled = true;
                        self.ip = ip;
                    }
                    return Ok(Progress::Done(self.status_flags(true)));
                }
                AsyncVmcs { ip, .. } if !ev.ip_suppressed => {
                    self.ip = ip;
                    return Ok(Progress::Done(self.status_flags(true)));
                }
                AsyncVmcs { .. } | Vmcs { .. } => self.process_vmcs(&ev),
                Ptwrite { ip, .. } | Vmentry { ip } | Uiret { ip } => {
                    if ev.ip_suppressed {
                        if matches!(ev.kind, Ptwrite { .. }) {
                            return Ok(Progress::EventFirst);
                        }
                    } else {
                        self.ip = ip;
                        // Reported after the instruction.
                        return Ok(Progress::Done(self.status_flags(false)));
                    }
                }
                Exstop { ip }
                | Mwait { ip, .. }
                | Tick { ip }
                | Iret { ip }
                | Smi { ip }
                | Rsm { ip }
                | Init { ip }
                | Vmexit { ip, .. }
                | Shutdown { ip }
                | Uintr { ip, .. }
                | Swintr { ip, .. }
                | Syscall { ip }
                    if !ev.ip_suppressed =>
                {
                    self.ip = ip;
                    return Ok(Progress::Done(self.status_flags(true)));
                }
                Tip { ip } => {
                    self.ip = ip;
                    return self.resync_at_event().map(Progress::Done);
                }
                _ => {}
            }
            self.fetch_event()?;
        }
    }

    /// Let the decoder see the trace up to `end` only (offsets stay those of the
    /// whole trace); there it meets the end of the trace. For stopping at a hole
    /// ([`crate::packet::recover::find_holes`]): call it before synchronizing.
    pub fn set_end(&mut self, end: u64) {
        self.evdec.set_end(end);
    }

    /// After damage, go on at `at` (see [`crate::packet::recover`]): synchronize at a
    /// PSB, or start anew at an IP packet with a whole address, keeping only the
    /// execution mode, the address space and the time learned before (the return
    /// stack starts empty, as at a PSB). [`Progress::EventFirst`]: take the pending
    /// event, as after [`resync`](Self::resync).
    pub fn resume_at(&mut self, at: &ResumePoint) -> Result<Progress, ErrorCode> {
        let context = (self.mode, self.asid, self.cbr, self.time);
        self.resume_with(at, context)
    }

    /// [`resume_at`](Self::resume_at) with the execution mode, address space and time
    /// `like` has learned (for trying a resume point on a second decoder).
    pub fn resume_like(
        &mut self,
        at: &ResumePoint,
        like: &BlockDecoder<'_>,
    ) -> Result<Progress, ErrorCode> {
        self.resume_with(at, (like.mode, like.asid, like.cbr, like.time))
    }

    fn resume_with(
        &mut self,
        at: &ResumePoint,
        context: (ExecMode, Asid, Option<u32>, Timestamp),
    ) -> Result<Progress, ErrorCode> {
        if at.kind == ResumeKind::Psb {
            return self.sync_set(at.offset).map(Progress::Done);
        }
        self.reset();
        (self.mode, self.asid, self.cbr, self.time) = context;
        // A TIP or an asynchronous branch comes with tracing on; a TIP.PGE turns it on.
        let enabled = at.kind != ResumeKind::TipPge;
        // The packet's address, completed: the last IP a compressed one builds on.
        self.evdec
            .resume_at(at.offset, enabled, at.ip)
            .map_err(code)?;
        self.enabled = enabled;
        self.load_next_event();
        self.resync()
    }

    /// Where the decoder is in the trace, as a number that changes whenever it uses
    /// up trace: a packet, an event or a TNT bit (for noticing a flow that goes on
    /// without trace).
    #[inline]
    pub fn trace_position(&self) -> u64 {
        let bits = match self.event.kind {
            EventKind::Tnt { size, .. } => u64::from(size),
            _ => 0,
        };
        self.evdec.offset().map_or(u64::MAX, |o| o << 6 | bits)
    }

    /// If the last error came at a status update of a PSB+ (the flow does not agree
    /// with what the PSB+ says, so it went wrong before it): that PSB's offset.
    pub fn failed_at_psb(&self) -> Option<u64> {
        if self.status.is_ok() && self.event.status_update {
            self.sync_offset()
        } else {
            None
        }
    }

    /// Whether the execution mode is known (decoding from an IP packet needs it).
    pub fn mode_known(&self) -> bool {
        self.mode != ExecMode::Unknown
    }

    fn resync_at_event(&mut self) -> Result<Status, ErrorCode> {
        self.fetch_event()?;
        self.proceed_trailing_event(None)
    }

    // ---- walking instructions ----

    fn decode(&self, ip: u64) -> Result<Decoded, ErrorCode> {
        decode_in(self.image, ip, self.mode)
    }

    /// Add the instruction at `ip` to `block` (libipt's `pt_blk_proceed_one_insn`).
    /// `Ok(false)`: it did not fit (block full, truncated, other section).
    fn proceed_one_insn(
        &mut self,
        block: &mut Block,
        last: &mut Option<Insn>,
    ) -> Result<bool, ErrorCode> {
        if block.ninsn >= MAX_BLOCK_INSNS || block.truncated {
            return Ok(false);
        }
        let d = self.decode(self.ip)?;
        self.segs_ok = false;
        if d.isid != block.isid {
            if block.ninsn != 0 {
                return Ok(false);
            }
            block.isid = d.isid;
        }
        if d.truncated {
            block.truncated = true;
        }
        if d.insn.pushes_return() {
            self.retstack.push(d.insn.next_ip());
        }
        block.class = Some(d.insn.class);
        block.end_ip = d.insn.ip;
        block.ninsn += 1;
        if self.has_icnt {
            self.icnt = self.icnt.checked_add(1).ok_or(ErrorCode::Overflow)?;
        }
        *last = Some(d.insn);
        Ok(true)
    }

    fn ends_on_request(&self, insn: &Insn) -> bool {
        (self.options.end_on_call && insn.class == InsnClass::Call)
            || (self.options.end_on_jump && insn.class == InsnClass::Jump)
    }

    /// Proceed without trace until an instruction for which `pred` holds, or the block
    /// ends. `last` holds the last instruction added.
    fn proceed_to_insn(
        &mut self,
        block: &mut Block,
        last: &mut Option<Insn>,
        pred: Pred,
    ) -> Result<Walk, ErrorCode> {
        loop {
            if !self.proceed_one_insn(block, last)? {
                return Ok(Walk::Stopped);
            }
            let insn = last.ok_or(ErrorCode::Internal)?;
            if pred.test(&insn) {
                return Ok(Walk::Reached);
            }
            let Some(ip) = next_ip(&insn) else {
                return Ok(Walk::NeedsTrace);
            };
            self.ip = ip;
            if self.ends_on_request(&insn) {
                return Ok(Walk::Stopped);
            }
        }
    }

    /// Proceed without trace until `ip` is reached, or the block ends.
    fn proceed_to_ip(
        &mut self,
        block: &mut Block,
        last: &mut Option<Insn>,
        ip: u64,
    ) -> Result<Walk, ErrorCode> {
        loop {
            if self.ip == ip {
                return Ok(Walk::Reached);
            }
            if !self.proceed_one_insn(block, last)? {
                return Ok(Walk::Stopped);
            }
            let insn = last.ok_or(ErrorCode::Internal)?;
            let Some(next) = next_ip(&insn) else {
                return Ok(Walk::NeedsTrace);
            };
            self.ip = next;
            if self.ends_on_request(&insn) {
                return Ok(if self.ip == ip {
                    Walk::Reached
                } else {
                    Walk::Stopped
                });
            }
        }
    }

    /// SKL014: a TIP.PGD without IP may also come from a direct branch leaving the
    /// filter; find the branch whose target the filter rejects.
    fn proceed_skl014(
        &mut self,
        block: &mut Block,
        last: &mut Option<Insn>,
    ) -> Result<Walk, ErrorCode> {
        loop {
            match self.proceed_to_insn(block, last, Pred::Skl014)? {
                Walk::Reached => {}
                other => return Ok(other),
            }
            let insn = last.ok_or(ErrorCode::Internal)?;
            if insn.changes_cr3() {
                return Ok(Walk::Reached);
            }
            let Some(ip) = next_ip(&insn) else {
                return Ok(Walk::NeedsTrace);
            };
            if !self.options.filter.allows(ip) {
                return Ok(Walk::Reached);
            }
            self.ip = ip;
            if self.ends_on_request(&insn) {
                return Ok(Walk::Stopped);
            }
        }
    }

    fn proceed_to_disabled(
        &mut self,
        block: &mut Block,
        last: &mut Option<Insn>,
        ev: &Event,
        ip: u64,
    ) -> Result<Walk, ErrorCode> {
        if ev.ip_suppressed {
            if self.options.filter.is_configured() && self.config.errata.skl014 {
                return self.proceed_skl014(block, last);
            }
            return self.proceed_to_insn(block, last, Pred::ChangesCr3);
        }
        self.proceed_to_ip(block, last, ip)
    }

    /// After a synchronous disable, guess where tracing resumes: after a call, at its
    /// return address.
    fn set_disable_resume_ip(&mut self, insn: Option<&Insn>) {
        self.ip = match insn {
            Some(i) if matches!(i.class, InsnClass::Call | InsnClass::FarCall) => i.next_ip(),
            _ => 0,
        };
    }

    /// Proceed to the instruction an event binds to and past it: the next one for
    /// which `pred` holds if the event has no IP, else the one at its IP.
    fn proceed_past_bound(
        &mut self,
        block: &mut Block,
        last: &mut Option<Insn>,
        ev: &Event,
        pred: Pred,
    ) -> Result<Walk, ErrorCode> {
        if ev.ip_suppressed {
            return self.proceed_to_insn(block, last, pred);
        }
        let ip = ev.kind.ip().ok_or(ErrorCode::Internal)?;
        match self.proceed_to_ip(block, last, ip)? {
            Walk::Reached => {}
            other => return Ok(other),
        }
        Ok(if self.proceed_one_insn(block, last)? {
            Walk::Reached
        } else {
            Walk::Stopped
        })
    }

    /// Give a TRIG event without an IP of its own the anchor IP and the remaining
    /// instruction count.
    fn provide_trig_anchor(&mut self) -> Result<(), ErrorCode> {
        if self.event.ip_suppressed {
            return Err(ErrorCode::Internal);
        }
        let (has_icnt, dicnt, dip) = (self.has_icnt, self.icnt, self.ip);
        match &mut self.event.kind {
            EventKind::Trig { ip, icnt, .. } => {
                if *ip != 0 {
                    return Ok(());
                }
                if !has_icnt || u32::from(*icnt) < dicnt {
                    return Err(ErrorCode::BadPacket);
                }
                *icnt -= dicnt as u16;
                *ip = dip;
                Ok(())
            }
            _ => Err(ErrorCode::Internal),
        }
    }

    fn proceed_to_trig(
        &mut self,
        block: &mut Block,
        last: &mut Option<Insn>,
    ) -> Result<Walk, ErrorCode> {
        if self.event.ip_suppressed {
            return Ok(Walk::Reached);
        }
        self.provide_trig_anchor()?;
        let EventKind::Trig { ip, icnt, .. } = self.event.kind else {
            return Err(ErrorCode::Internal);
        };
        if !self.enabled {
            return if icnt == 0 {
                Err(ErrorCode::Internal)
            } else {
                Ok(Walk::Reached)
            };
        }
        match self.proceed_to_ip(block, last, ip)? {
            Walk::Reached => {}
            other => return Ok(other),
        }
        loop {
            let EventKind::Trig { icnt, .. } = self.event.kind else {
                return Err(ErrorCode::Internal);
            };
            if icnt == 0 {
                return Ok(Walk::Reached);
            }
            if !self.proceed_one_insn(block, last)? {
                return Ok(Walk::Stopped);
            }
            let insn = last.ok_or(ErrorCode::Internal)?;
            let Some(next) = next_ip(&insn) else {
                return Ok(Walk::NeedsTrace);
            };
            self.ip = next;
            if let EventKind::Trig { ip, icnt, .. } = &mut self.event.kind {
                *ip = next;
                *icnt -= 1;
            }
        }
    }

    /// SKD022: an asynchronous disable at VMLAUNCH/VMRESUME may really be a synchronous
    /// one. Turns the current event into a `Disabled` if so.
    fn handle_skd022(&mut self) -> Result<bool, ErrorCode> {
        let EventKind::AsyncDisabled { at, ip } = self.event.kind else {
            return Err(ErrorCode::Internal);
        };
        match self.decode(at) {
            Ok(d) if d.insn.is_vmentry() => {
                self.event.kind = EventKind::Disabled { ip };
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn postpone_insn(&mut self, insn: Option<Insn>) -> Result<Status, ErrorCode> {
        if self.postponed.is_some() {
            return Err(ErrorCode::Internal);
        }
        self.postponed = Some(insn.ok_or(ErrorCode::Internal)?);
        Ok(self.status_flags(true))
    }

    fn clear_postponed(&mut self) {
        self.postponed = None;
        self.bound = 0;
    }

    fn proceed_postponed_insn(&mut self) -> Result<(), ErrorCode> {
        let Some(insn) = self.postponed else {
            return Ok(());
        };
        if self.enabled {
            match next_ip(&insn) {
                Some(ip) => self.ip = ip,
                None => self.proceed_with_trace(&insn)?,
            }
        }
        self.clear_postponed();
        Ok(())
    }

    /// The last instruction needs trace to go on: use it.
    fn proceed_with_trace(&mut self, insn: &Insn) -> Result<(), ErrorCode> {
        match insn.class {
            InsnClass::CondJump => {
                let taken = self.cond_branch()?;
                self.ip = match (taken, insn.target) {
                    (true, Some(t)) => t,
                    _ => insn.next_ip(),
                };
                return Ok(());
            }
            InsnClass::Return => match self.cond_branch() {
                Ok(true) => {
                    self.ip = self.retstack.pop()?;
                    return Ok(());
                }
                Ok(false) => return Err(ErrorCode::BadRetcomp),
                Err(ErrorCode::BadQuery) => {}
                Err(e) => return Err(e),
            },
            InsnClass::Jump | InsnClass::Call => {
                if insn.is_direct() {
                    return Err(ErrorCode::Internal);
                }
            }
            InsnClass::FarCall | InsnClass::FarReturn | InsnClass::FarJump => {}
            InsnClass::Other | InsnClass::Ptwrite => return Err(ErrorCode::Internal),
        }
        self.proceed_indirect()
    }

    // ---- events ----

    /// Proceed to the location of the current (non-TNT/TIP) event.
    fn proceed_event(&mut self, block: &mut Block) -> Result<Status, ErrorCode> {
        use EventKind::*;
        let ev = self.event;
        let mut last = None;
        let enabled = self.enabled;
        let reached = match ev.kind {
            Enabled { .. }
            | Overflow { .. }
            | Stop
            | Pwre { .. }
            | Pwrx { .. }
            | Tick { .. }
            | Cbr { .. }
            | Mnt { .. }
            | Rsm { .. }
            | Sipi { .. } => true,
            Disabled { ip } => {
                if !ev.status_update {
                    match self.proceed_to_disabled(block, &mut last, &ev, ip)? {
                        Walk::Reached => {}
                        Walk::Stopped => return Ok(self.status_flags(false)),
                        // It also binds to the next branch that would need trace.
                        Walk::NeedsTrace => self.set_disable_resume_ip(last.as_ref()),
                    }
                }
                true
            }
            AsyncDisabled { at, .. } => {
                if !self.proceed_to_ip(block, &mut last, at)?.reached()? {
                    return Ok(Status::default());
                }
                if self.config.errata.skd022 && self.handle_skd022()? {
                    return self.proceed_event(block);
                }
                true
            }
            AsyncBranch { from, .. } => self.proceed_to_ip(block, &mut last, from)?.reached()?,
            Paging { .. } | Vmcs { .. } => {
                if enabled {
                    let (pred, flag) = if matches!(ev.kind, Paging { .. }) {
                        (Pred::BindsToPip, bound::PAGING)
                    } else {
                        (Pred::BindsToVmcs, bound::VMCS)
                    };
                    if !self.proceed_to_insn(block, &mut last, pred)?.reached()? {
                        return Ok(Status::default());
                    }
                    self.bound |= flag;
                    return self.postpone_insn(last);
                }
                true
            }
            AsyncPaging { ip, .. }
            | AsyncVmcs { ip, .. }
            | ExecMode { ip, .. }
            | Tsx { ip, .. }
            | Iflags { ip, .. }
            | Interrupt { ip, .. }
            | Smi { ip }
            | Init { ip }
            | Vmexit { ip, .. }
            | Shutdown { ip }
            | Uintr { ip, .. } => {
                if ev.ip_suppressed {
                    true
                } else {
                    self.proceed_to_ip(block, &mut last, ip)?.reached()?
                }
            }
            Exstop { ip } | Mwait { ip, .. } => {
                if !enabled || ev.ip_suppressed {
                    true
                } else {
                    self.proceed_to_ip(block, &mut last, ip)?.reached()?
                }
            }
            Ptwrite { .. } | Iret { .. } | Vmentry { .. } | Uiret { .. } => {
                if enabled {
                    let (pred, flag) = match ev.kind {
                        Ptwrite { .. } => (Pred::Ptwrite, bound::PTWRITE),
                        Iret { .. } => (Pred::Iret, bound::IRET),
                        Vmentry { .. } => (Pred::Vmentry, bound::VMENTRY),
                        _ => (Pred::Uiret, bound::UIRET),
                    };
                    if !self
                        .proceed_past_bound(block, &mut last, &ev, pred)?
                        .reached()?
                    {
                        return Ok(Status::default());
                    }
                    self.bound |= flag;
                    return self.postpone_insn(last);
                }
                true
            }
            Swintr { ip, .. } | Syscall { ip } => {
                if enabled {
                    let (pred, flag) = if matches!(ev.kind, Swintr { .. }) {
                        (Pred::Swint, bound::SWINTR)
                    } else {
                        (Pred::Syscall, bound::SYSCALL)
                    };
                    let walk = if ev.ip_suppressed {
                        self.proceed_to_insn(block, &mut last, pred)?
                    } else {
                        self.proceed_to_ip(block, &mut last, ip)?
                    };
                    if !walk.reached()? {
                        return Ok(Status::default());
                    }
                    self.bound |= flag;
                    return self.postpone_insn(last);
                }
                true
            }
            Trig { .. } => self.proceed_to_trig(block, &mut last)?.reached()?,
            Tip { .. } | Tnt { .. } => return Err(ErrorCode::Internal),
        };
        if !reached {
            return Ok(Status::default());
        }
        Ok(self.status_flags(true))
    }

    /// Proceed to the next instruction that needs trace, a cache block at a time.
    ///
    /// Block boundaries follow libipt's, which depend on whether its own block cache
    /// already knows the code: while it walks code for the first time it also ends a
    /// block after a direct call, a backward direct jump and 0x400 instructions.
    /// `fill` mirrors that walk (`Some(count)` while walking unknown code) and
    /// [`Marks`] what libipt's cache would know.
    fn proceed_no_event(&mut self, block: &mut Block) -> Result<(), ErrorCode> {
        let mut fill: Option<u32> = None;
        loop {
            if block.ninsn >= MAX_BLOCK_INSNS || block.truncated {
                return Ok(());
            }
            let id = self.cache_block_at(self.ip)?;
            let b = self.cache.block(id);
            let b = BlockView {
                ip: b.ip,
                ninsn: b.ninsn,
                truncated: b.truncated,
            };
            let isid = self.section_id(b.ip);
            if isid != block.isid {
                if block.ninsn != 0 {
                    return Ok(());
                }
                block.isid = isid;
            }
            if block.ninsn + b.ninsn > MAX_BLOCK_INSNS {
                return self.proceed_no_event_slow(block);
            }
            let warm = self.warm.get(id.index()).copied().unwrap_or(false);
            let count = b.ninsn;
            if warm {
                fill = None;
            } else if let Some((k, ip, nip)) = self.walk_unknown(id, &b, &mut fill) {
                // libipt ends the block inside this run (0x400 new instructions).
                block.ninsn += k;
                self.segs.push((id, k));
                block.end_ip = ip;
                block.class = Some(InsnClass::Other);
                if self.has_icnt {
                    self.icnt = self.icnt.checked_add(k).ok_or(ErrorCode::Overflow)?;
                }
                self.ip = nip;
                return Ok(());
            }
            if self.has_icnt {
                self.icnt = self.icnt.checked_add(count).ok_or(ErrorCode::Overflow)?;
            }
            block.ninsn += count;
            self.segs.push((id, count));
            let insn = self.cache.block(id).last;
            block.end_ip = insn.ip;
            block.class = Some(insn.class);
            block.truncated = b.truncated;
            if insn.pushes_return() {
                self.retstack.push(insn.next_ip());
            }
            match next_ip(&insn) {
                Some(ip) => {
                    let taken = insn.class != InsnClass::Other && insn.class != InsnClass::Ptwrite;
                    self.link = Some(Link {
                        block: id,
                        taken,
                        ip,
                    });
                    self.ip = ip;
                    if self.ends_on_request(&insn) {
                        return Ok(());
                    }
                    if let Some(n) = fill {
                        let backward = insn.class == InsnClass::Jump && ip < insn.next_ip();
                        if insn.class == InsnClass::Call || backward {
                            return Ok(());
                        }
                        if !self.in_section(ip) {
                            return Ok(());
                        }
                        if self.marks.valid(self.image, ip) {
                            fill = None;
                        } else if n + 1 == FILL_STEPS {
                            return Ok(());
                        } else {
                            fill = Some(n + 1);
                        }
                    } else if !self.in_section(ip) {
                        return Ok(());
                    }
                }
                None => {
                    self.proceed_with_trace(&insn)?;
                    if insn.class == InsnClass::CondJump {
                        let taken = Some(self.ip) == insn.target;
                        self.link = Some(Link {
                            block: id,
                            taken,
                            ip: self.ip,
                        });
                    } else {
                        self.came_from = Some(id);
                    }
                    return Ok(());
                }
            }
        }
    }

    /// One instruction at a time (a block that would overflow the instruction limit).
    fn proceed_no_event_slow(&mut self, block: &mut Block) -> Result<(), ErrorCode> {
        let mut last = None;
        match self.proceed_to_insn(block, &mut last, Pred::Never)? {
            Walk::NeedsTrace => {
                let insn = last.ok_or(ErrorCode::Internal)?;
                self.proceed_with_trace(&insn)
            }
            Walk::Reached | Walk::Stopped => Ok(()),
        }
    }

    fn proceed(&mut self, block: &mut Block) -> Result<Status, ErrorCode> {
        if let Err(e) = self.status {
            if e != ErrorCode::Eos {
                return Err(e);
            }
            // Without trace we may still go on until trace is needed.
            if !self.enabled {
                return Err(ErrorCode::Eos);
            }
            self.proceed_no_event(block)?;
            return Ok(Status {
                event_pending: false,
                ip_suppressed: false,
                eos: true,
            });
        }
        match self.event.kind {
            EventKind::Tnt { .. } | EventKind::Tip { .. } => {
                if !self.enabled {
                    return Err(ErrorCode::NoEnable);
                }
                self.proceed_no_event(block)?;
                self.proceed_trailing_event(Some(block))
            }
            _ => self.proceed_event(block),
        }
    }

    /// BDM64: a TSX abort right after a branch that needed trace may come with a wrong
    /// branch target; if the abort IP cannot be reached, assume the branch went there.
    fn handle_bdm64(&mut self, block: &Block, ip: u64) -> Result<bool, ErrorCode> {
        if block.ninsn == 0 {
            return Ok(false);
        }
        let Ok(d) = decode_in(self.image, block.end_ip, block.mode) else {
            return Ok(false);
        };
        if !d.insn.is_branch() {
            return Ok(false);
        }
        // Can we get from here to the event without trace?
        let mut at = self.ip;
        let mut steps = BDM64_MAX_STEPS;
        let reachable = loop {
            if at == ip {
                break true;
            }
            if steps == 0 {
                break false;
            }
            steps -= 1;
            match self.decode(at).ok().and_then(|d| next_ip(&d.insn)) {
                Some(n) => at = n,
                None => break false,
            }
        };
        if reachable {
            return Ok(true);
        }
        self.ip = ip;
        Ok(true)
    }

    /// Whether a TSX event at the end of a block waits for a later block.
    fn postpone_trailing_tsx(&mut self, block: Option<&Block>) -> Result<bool, ErrorCode> {
        let ev = self.event;
        if ev.ip_suppressed {
            return Ok(false);
        }
        let EventKind::Tsx { ip, aborted, .. } = ev.kind else {
            return Err(ErrorCode::Internal);
        };
        if let Some(block) = block {
            if self.config.errata.bdm64 && aborted {
                // Errors here only mean the erratum does not apply.
                let _ = self.handle_bdm64(block, ip);
            }
        }
        Ok(self.ip != ip)
    }

    /// Report events that bind to the current IP (libipt's
    /// `pt_blk_proceed_trailing_event`).
    fn proceed_trailing_event(&mut self, block: Option<&Block>) -> Result<Status, ErrorCode> {
        use EventKind::*;
        if let Err(e) = self.status {
            self.proceed_postponed_insn()?;
            // Have the caller ask for the error as an event, unless it is the end.
            return Ok(self.status_flags(e != ErrorCode::Eos));
        }
        // The common cases first: more bits in the TNT that is in use, or a TIP (an
        // indirect branch needs it; nothing to report before).
        match self.event.kind {
            Tnt { size, .. }
                if size != 0 && !self.options.tick_events && self.postponed.is_none() =>
            {
                return Ok(Status {
                    event_pending: false,
                    ip_suppressed: !self.enabled,
                    eos: false,
                });
            }
            Tip { .. } => return self.finish_trailing(),
            _ => {}
        }
        let ev = self.event;
        let pending = |s: &Self| Ok(s.status_flags(true));
        let at_ip = |s: &Self, ip: u64| !ev.ip_suppressed && s.ip != ip;
        match ev.kind {
            Tnt { size, .. } => {
                let no_tick = !self.options.tick_events
                    || block.is_none()
                    || ev.time.tsc.is_none()
                    || ev.time.tsc == Some(self.tsc());
                if no_tick {
                    if size != 0 {
                        return self.finish_trailing();
                    }
                    self.fetch_event()?;
                    return self.proceed_trailing_event(block);
                }
                let class = block.and_then(|b| b.class);
                if class != Some(InsnClass::CondJump) && class != Some(InsnClass::Return) {
                    return self.finish_trailing();
                }
                pending(self)
            }
            Tip { .. } => self.finish_trailing(),
            Tick { .. }
            | Enabled { .. }
            | Overflow { .. }
            | Stop
            | Pwre { .. }
            | Pwrx { .. }
            | Cbr { .. }
            | Mnt { .. } => {
                self.proceed_postponed_insn()?;
                pending(self)
            }
            Disabled { ip } => {
                let Some(insn) = self.postponed else {
                    if ev.status_update {
                        return pending(self);
                    }
                    return self.finish_trailing();
                };
                if ev.ip_suppressed && insn.changes_cr3() {
                    return pending(self);
                }
                match next_ip(&insn) {
                    Some(n) => self.ip = n,
                    None => {
                        self.set_disable_resume_ip(Some(&insn));
                        return pending(self);
                    }
                }
                self.clear_postponed();
                if !ev.ip_suppressed && self.ip == ip {
                    return pending(self);
                }
                self.finish_trailing()
            }
            AsyncDisabled { at, .. } => {
                self.proceed_postponed_insn()?;
                if self.ip != at {
                    return self.finish_trailing();
                }
                if self.config.errata.skd022 && self.handle_skd022()? {
                    return self.finish_trailing();
                }
                pending(self)
            }
            AsyncBranch { from, .. } => {
                self.proceed_postponed_insn()?;
                if self.ip != from {
                    return self.finish_trailing();
                }
                pending(self)
            }
            Paging { .. } | Vmcs { .. } => {
                if !self.enabled {
                    return pending(self);
                }
                let (flag, binds) = match (ev.kind, self.postponed) {
                    (Paging { .. }, Some(i)) => (bound::PAGING, i.binds_to_pip()),
                    (_, Some(i)) => (bound::VMCS, i.binds_to_vmcs()),
                    (_, None) => return self.finish_trailing(),
                };
                if self.bound & flag != 0 || !binds {
                    return self.finish_trailing();
                }
                self.bound |= flag;
                pending(self)
            }
            AsyncPaging { ip, .. } | AsyncVmcs { ip, .. } => {
                self.proceed_postponed_insn()?;
                if at_ip(self, ip) {
                    return self.finish_trailing();
                }
                pending(self)
            }
            ExecMode { ip, .. } => {
                self.proceed_postponed_insn()?;
                if !self.enabled {
                    return pending(self);
                }
                if at_ip(self, ip) {
                    return self.finish_trailing();
                }
                pending(self)
            }
            Tsx { .. } => {
                self.proceed_postponed_insn()?;
                if self.postpone_trailing_tsx(block)? {
                    return self.finish_trailing();
                }
                pending(self)
            }
            Exstop { ip } | Mwait { ip, .. } => {
                self.proceed_postponed_insn()?;
                if self.enabled && at_ip(self, ip) {
                    return self.finish_trailing();
                }
                pending(self)
            }
            Iflags { ip, .. }
            | Interrupt { ip, .. }
            | Smi { ip }
            | Init { ip }
            | Vmexit { ip, .. }
            | Shutdown { ip }
            | Uintr { ip, .. } => {
                self.proceed_postponed_insn()?;
                if self.enabled && at_ip(self, ip) {
                    return self.finish_trailing();
                }
                pending(self)
            }
            Rsm { .. } | Sipi { .. } => {
                self.proceed_postponed_insn()?;
                if !ev.ip_suppressed {
                    return Err(ErrorCode::Internal);
                }
                pending(self)
            }
            Ptwrite { .. }
            | Iret { .. }
            | Vmentry { .. }
            | Uiret { .. }
            | Swintr { .. }
            | Syscall { .. } => {
                if !self.enabled {
                    return pending(self);
                }
                let Some(insn) = self.postponed else {
                    return self.finish_trailing();
                };
                let (flag, binds) = match ev.kind {
                    Ptwrite { .. } => (bound::PTWRITE, insn.class == InsnClass::Ptwrite),
                    Iret { .. } => (bound::IRET, insn.is_iret()),
                    Vmentry { .. } => (bound::VMENTRY, insn.is_vmentry()),
                    Uiret { .. } => (bound::UIRET, insn.is_uiret()),
                    Swintr { .. } => (bound::SWINTR, insn.is_swint()),
                    _ => (bound::SYSCALL, insn.is_syscall()),
                };
                if self.bound & flag != 0 || !ev.ip_suppressed || !binds {
                    return self.finish_trailing();
                }
                self.bound |= flag;
                pending(self)
            }
            Trig { .. } => {
                self.proceed_postponed_insn()?;
                if !self.enabled || ev.ip_suppressed {
                    return pending(self);
                }
                self.provide_trig_anchor()?;
                let EventKind::Trig { ip, icnt, .. } = self.event.kind else {
                    return Err(ErrorCode::Internal);
                };
                if icnt != 0 {
                    return self.finish_trailing();
                }
                if ip != self.ip {
                    return Err(ErrorCode::BadPacket);
                }
                pending(self)
            }
        }
    }

    /// No further events here: proceed past any postponed instruction.
    fn finish_trailing(&mut self) -> Result<Status, ErrorCode> {
        self.proceed_postponed_insn()?;
        Ok(self.status_flags(false))
    }

    /// The next block. `block` is filled in also when an error ends it early (it then
    /// holds the instructions decoded before the error).
    pub fn next(&mut self, block: &mut Block) -> Result<Status, ErrorCode> {
        *block = Block::start(self.ip, self.mode, self.speculative);
        self.segs.clear();
        self.segs_ok = true;
        self.proceed(block)
    }

    /// The cache blocks (and how many of their instructions) that make up the block
    /// [`next`](Self::next) returned last, if it was built from cached blocks only.
    pub(crate) fn segments(&self) -> Option<&[(BlockId, u32)]> {
        self.segs_ok.then_some(self.segs.as_slice())
    }

    /// Appends the addresses of the instructions of the block [`next`](Self::next)
    /// returned last to `out`, if they are known without decoding again (the block
    /// was built from cached blocks). Returns whether they were.
    pub fn block_ips(&self, out: &mut Vec<u64>) -> bool {
        let Some(segs) = self.segments() else {
            return false;
        };
        for &(id, count) in segs {
            let Some(b) = self.cache.get(id) else {
                return false;
            };
            let mut ip = b.ip;
            for &size in self.cache.sizes(id).iter().take(count as usize) {
                out.push(ip);
                ip = ip.wrapping_add(u64::from(size));
            }
        }
        true
    }

    /// The block cache.
    pub(crate) fn cache(&self) -> &BlockCache {
        &self.cache
    }

    // ---- processing events ----

    fn process_enabled(&mut self, ev: &Event, ip: u64) -> Result<(), ErrorCode> {
        if ev.status_update {
            return if self.enabled {
                Ok(())
            } else {
                Err(ErrorCode::BadStatusUpdate)
            };
        }
        if ev.ip_suppressed {
            return Err(ErrorCode::NoIp);
        }
        if self.enabled {
            return Err(ErrorCode::BadContext);
        }
        self.ip = ip;
        self.enabled = true;
        Ok(())
    }

    fn process_disabled(&mut self, ev: &Event) -> Result<(), ErrorCode> {
        if ev.status_update {
            return if self.enabled {
                Err(ErrorCode::BadStatusUpdate)
            } else {
                Ok(())
            };
        }
        if !self.enabled {
            return Err(ErrorCode::BadContext);
        }
        // Keep the IP: tracing may resume there ("resumed").
        self.enabled = false;
        self.icnt = 0;
        Ok(())
    }

    fn process_paging(&mut self, ev: &Event) {
        if let EventKind::Paging { cr3, .. } | EventKind::AsyncPaging { cr3, .. } = ev.kind {
            self.asid.cr3 = cr3;
        }
    }

    fn process_vmcs(&mut self, ev: &Event) {
        if let EventKind::Vmcs { base } | EventKind::AsyncVmcs { base, .. } = ev.kind {
            self.asid.vmcs = base;
        }
    }

    /// The pending event (call when the last status had `event_pending`).
    pub fn event(&mut self) -> Result<(Event, Status), ErrorCode> {
        self.status?;
        let current = self.event;
        let r = self.process_event();
        if r.is_err() {
            // Remember repeated failures of one event so that resync can drop it.
            self.failed = match self.failed {
                Some((ev, n)) if ev == current => Some((ev, n.saturating_add(1))),
                _ => Some((current, 1)),
            };
        }
        r
    }

    fn process_event(&mut self) -> Result<(Event, Status), ErrorCode> {
        use EventKind::*;
        self.link = None;
        self.came_from = None;
        let mut ev = self.event;
        let mismatch = |s: &Self, ip: u64| s.enabled && !ev.ip_suppressed && s.ip != ip;
        match ev.kind {
            Tnt { size, .. } => {
                // A tick at the first TNT bit used with a new timestamp.
                let tsc = match ev.time.tsc {
                    Some(t) if self.options.tick_events && t != self.tsc() => t,
                    _ => return Err(ErrorCode::BadQuery),
                };
                let tick = Event {
                    kind: Tick { ip: self.ip },
                    ip_suppressed: false,
                    status_update: false,
                    time: ev.time,
                    offset: ev.offset,
                };
                self.time = Timestamp {
                    tsc: Some(tsc),
                    ..ev.time
                };
                if size == 0 {
                    self.fetch_event()?;
                }
                let status = self.proceed_trailing_event(None)?;
                return Ok((tick, status));
            }
            Enabled { ip, .. } => {
                if ip == self.ip {
                    ev.kind = Enabled { ip, resumed: true };
                }
                self.process_enabled(&ev, ip)?;
            }
            AsyncDisabled { at, .. } => {
                if self.ip != at {
                    return Err(ErrorCode::BadQuery);
                }
                self.process_disabled(&ev)?;
            }
            Disabled { .. } => self.process_disabled(&ev)?,
            AsyncBranch { from, to } => {
                if self.ip != from {
                    return Err(ErrorCode::BadQuery);
                }
                if ev.status_update || !self.enabled {
                    return Err(ErrorCode::BadContext);
                }
                self.ip = to;
            }
            AsyncPaging { ip, .. } => {
                if !ev.ip_suppressed && self.ip != ip {
                    return Err(ErrorCode::BadQuery);
                }
                self.process_paging(&ev);
            }
            Paging { .. } => self.process_paging(&ev),
            AsyncVmcs { ip, .. } => {
                if !ev.ip_suppressed && self.ip != ip {
                    return Err(ErrorCode::BadQuery);
                }
                self.process_vmcs(&ev);
            }
            Vmcs { .. } => self.process_vmcs(&ev),
            Overflow { ip } => {
                if ev.status_update {
                    return Err(ErrorCode::BadContext);
                }
                if ev.ip_suppressed {
                    self.enabled = false;
                    self.ip = 0;
                } else {
                    self.enabled = true;
                    self.ip = ip;
                }
                self.speculative = false;
            }
            ExecMode { mode, ip } => {
                if mismatch(self, ip) {
                    return Err(ErrorCode::BadQuery);
                }
                if ev.status_update
                    && self.enabled
                    && self.mode != pt_encoder::ExecMode::Unknown
                    && self.mode != mode
                {
                    return Err(ErrorCode::BadStatusUpdate);
                }
                self.mode = mode;
            }
            Tsx {
                ip, speculative, ..
            } => {
                if !ev.ip_suppressed && self.ip != ip {
                    return Err(ErrorCode::BadQuery);
                }
                self.speculative = speculative;
            }
            Stop => {
                if ev.status_update || self.enabled {
                    return Err(ErrorCode::BadContext);
                }
            }
            Exstop { ip } | Mwait { ip, .. } => {
                if mismatch(self, ip) {
                    return Err(ErrorCode::BadQuery);
                }
            }
            Cbr { ratio } => self.cbr = Some(u32::from(ratio)),
            Tip { .. } => return Err(ErrorCode::BadQuery),
            Iflags { ip, .. }
            | Interrupt { ip, .. }
            | Smi { ip }
            | Init { ip }
            | Vmexit { ip, .. }
            | Shutdown { ip }
            | Uintr { ip, .. }
            | Trig { ip, .. }
            | Swintr { ip, .. }
            | Syscall { ip } => {
                if mismatch(self, ip) {
                    return Err(ErrorCode::BadQuery);
                }
            }
            Rsm { .. } | Sipi { .. } => {
                if !ev.ip_suppressed {
                    return Err(ErrorCode::Internal);
                }
            }
            Pwre { .. }
            | Pwrx { .. }
            | Ptwrite { .. }
            | Tick { .. }
            | Mnt { .. }
            | Iret { .. }
            | Vmentry { .. }
            | Uiret { .. } => {}
        }
        self.fetch_event()?;
        let status = self.proceed_trailing_event(None)?;
        Ok((ev, status))
    }
}
