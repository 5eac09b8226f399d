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

use super::filter::AddrFilter;
use super::retstack::RetStack;
use crate::block_cache::{BlockCache, BlockId};
use crate::config::Config;
use crate::error::ErrorCode;
use crate::event::{self, Event, EventDecoder, EventKind, Timestamp};
use crate::image::Image;
use crate::insn::{self, Insn, InsnClass, MAX_INSN_SIZE};
use pt_encoder::ExecMode;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

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

/// What the caller should do next, as libipt's `pt_status_flag` bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// An event is pending: call `event()` before the next `next()`.
    pub event_pending: bool,
    /// Tracing is disabled: the next block's IP is not known.
    pub ip_suppressed: bool,
    /// The trace ends here (while no event is pending).
    pub eos: bool,
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
/// the next instruction, or a direct jump's or call's target; `BadQuery` if trace is
/// needed.
#[inline]
pub fn next_ip(insn: &Insn) -> Result<u64, ErrorCode> {
    match insn.class {
        InsnClass::Other | InsnClass::Ptwrite => Ok(insn.next_ip()),
        InsnClass::Jump | InsnClass::Call => insn.target.ok_or(ErrorCode::BadQuery),
        _ => Err(ErrorCode::BadQuery),
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

/// The event's IP, for the kinds that have one (`None` for the others).
pub fn event_ip(kind: &EventKind) -> Option<u64> {
    use EventKind::*;
    match *kind {
        Enabled { ip, .. }
        | Disabled { ip }
        | AsyncDisabled { ip, .. }
        | AsyncPaging { ip, .. }
        | Overflow { ip }
        | ExecMode { ip, .. }
        | Tsx { ip, .. }
        | AsyncVmcs { ip, .. }
        | Exstop { ip }
        | Mwait { ip, .. }
        | Ptwrite { ip, .. }
        | Tick { ip }
        | Tip { ip }
        | Iflags { ip, .. }
        | Interrupt { ip, .. }
        | Iret { ip }
        | Smi { ip }
        | Rsm { ip }
        | Init { ip }
        | Vmentry { ip }
        | Vmexit { ip, .. }
        | Shutdown { ip }
        | Uintr { ip, .. }
        | Uiret { ip }
        | Trig { ip, .. }
        | Swintr { ip, .. }
        | Syscall { ip } => Some(ip),
        AsyncBranch { from, .. } => Some(from),
        _ => None,
    }
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
    tsc: u64,
    has_tsc: bool,
    lost_mtc: u32,
    lost_cyc: u32,
    cbr: Option<u32>,
    icnt: u32,
    has_icnt: bool,
    cr3: u64,
    vmcs: u64,
    retstack: RetStack,
    /// An instruction whose events are being reported before proceeding past it.
    postponed: Option<Insn>,
    bound: u8,
    /// The cache block at `ip` is this link of that block (saves a hash lookup).
    link: Option<(BlockId, bool, u64)>,
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
    /// Return addresses the memoized runs leave on the return stack.
    run_pushes: Vec<u64>,
    /// Whether the event after the current one is a TNT or TIP (see
    /// [`Self::next_is_branch`]); `None` until asked.
    branch_next: Option<bool>,
    /// Scratch return stack of [`Self::walk_tnt_run`].
    run_stack: Vec<u64>,
    /// Per cache block: the chain that starts there, once known.
    chains: Vec<Chain>,
    /// Return addresses pushed by the calls of chains.
    chain_pushes: Vec<u64>,
    /// Memoized runs of TNT bits: (start block, bit pattern) → where they lead.
    runs: HashMap<(u32, u64), TntRun, BuildHasherDefault<KeyHasher>>,
}

/// The parts of a cache block the walk needs.
#[derive(Clone, Copy)]
struct BlockView {
    ip: u64,
    ninsn: u32,
    truncated: bool,
}

/// Where a run of conditional branches leads, for [`BlockDecoder::skip_blocks`].
#[derive(Clone, Copy, Debug)]
struct TntRun {
    /// The last block of the run and whether its branch was taken (`None` if it
    /// ended in a return).
    link: Option<(BlockId, bool)>,
    /// Where the run ends.
    ip: u64,
    insns: u64,
    /// TNT bits (= blocks) used.
    used: u8,
    /// Return addresses of calls still open at the end: `run_pushes[start..][..len]`.
    pushes: (u32, u8),
    /// Most calls open at once during the run (the return stack must have room).
    depth: u8,
}

/// TNT events with fewer bits than this are walked block by block
/// ([`BlockDecoder::skip_chains`]) rather than looked up in the run memo.
const MEMO_MIN_BITS: u8 = 8;

/// A chain of warm cache blocks that make up one block up to an instruction that needs
/// trace ([`BlockDecoder::build_chain`]), in 32 bytes: [`BlockDecoder::skip_chains`]
/// goes from one to the next, so that each step touches one cache line.
#[derive(Clone, Copy, Debug, Default)]
struct Chain {
    /// The address after the last instruction.
    fall_through: u64,
    /// The last instruction's target minus `fall_through` (a conditional jump's).
    target: i32,
    /// The cache block whose last instruction needs trace.
    end: u32,
    /// Return addresses its calls push, in order: `chain_pushes[pushes..][..npush]`.
    pushes: u32,
    /// Instructions in the chain (at most [`MAX_BLOCK_INSNS`]).
    insns: u16,
    npush: u8,
    /// What the last instruction needs: one of the `CHAIN_*` values.
    kind: u8,
    /// `end`'s successors as far as known: `[fall-through, taken]`
    /// ([`BlockCache::linked`]), [`NO_LINK`] if not yet.
    links: [u32; 2],
}

/// [`Chain::kind`]: not built (or the walk failed last time).
const CHAIN_NONE: u8 = 0;
/// [`Chain::kind`]: ends in a conditional jump.
const CHAIN_COND: u8 = 1;
/// [`Chain::kind`]: ends in a near return.
const CHAIN_RET: u8 = 2;
/// [`Chain::kind`]: ends in a near indirect jump or call.
const CHAIN_IND: u8 = 3;
/// [`Chain::kind`]: ends in an instruction the fast path leaves to `next`.
const CHAIN_OTHER: u8 = 4;
/// [`Chain::links`]: not known yet.
const NO_LINK: u32 = u32::MAX;

/// Most memoized TNT runs before the memo starts anew.
const MAX_RUNS: usize = 1 << 20;

/// A cheap hash for the run memo's keys.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    fn write_u64(&mut self, v: u64) {
        let h = (self.0 ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = h ^ (h >> 29);
    }
}

/// Where a branch went: the cache block at `ip` in `mode` (ids stay valid: the
/// decoder's image cannot change under it).
#[derive(Clone, Copy, Debug)]
struct Target {
    ip: u64,
    mode: ExecMode,
    id: Option<BlockId>,
}

impl Target {
    const NONE: Target = Target {
        ip: 0,
        mode: ExecMode::Unknown,
        id: None,
    };

    fn new(ip: u64, mode: ExecMode, id: BlockId) -> Self {
        Target {
            ip,
            mode,
            id: Some(id),
        }
    }

    /// The block if this is where `ip` in `mode` is.
    #[inline]
    fn hit(&self, ip: u64, mode: ExecMode) -> Option<BlockId> {
        if self.ip == ip && self.mode == mode {
            self.id
        } else {
            None
        }
    }
}

/// Entries of the block decoder's direct-mapped target table (a power of two).
const TARGET_SLOTS: usize = 1024;

/// The target table slot of `ip`.
#[inline]
fn target_slot(ip: u64) -> usize {
    let h = (ip ^ (ip >> 10) ^ (ip >> 20) ^ (ip >> 40)) as usize;
    h & (TARGET_SLOTS - 1)
}

/// Instructions libipt's own block cache walks at most before it ends a block while
/// learning new code.
const FILL_STEPS: u32 = 0x400;

/// A bit per code byte of each section: the instruction there is known.
#[derive(Default)]
struct Marks {
    /// `(first address, end address, bits)` per section seen.
    sections: Vec<(u64, u64, Vec<u64>)>,
    cur: usize,
}

impl Marks {
    fn slot(&mut self, image: &Image, ip: u64) -> Option<usize> {
        if let Some((lo, hi, _)) = self.sections.get(self.cur) {
            if *lo <= ip && ip < *hi {
                return Some(self.cur);
            }
        }
        if let Some(i) = self
            .sections
            .iter()
            .position(|(lo, hi, _)| *lo <= ip && ip < *hi)
        {
            self.cur = i;
            return Some(i);
        }
        let s = image.find(ip)?;
        let len = s.len();
        let words = usize::try_from(len.div_ceil(64)).ok()?;
        self.sections
            .push((s.vaddr(), s.vaddr().saturating_add(len), vec![0; words]));
        self.cur = self.sections.len() - 1;
        Some(self.cur)
    }

    fn valid(&mut self, image: &Image, ip: u64) -> bool {
        let Some(i) = self.slot(image, ip) else {
            return false;
        };
        let (lo, _, bits) = &self.sections[i];
        let at = (ip - lo) as usize;
        bits.get(at / 64).is_some_and(|w| w >> (at % 64) & 1 != 0)
    }

    fn mark(&mut self, image: &Image, ip: u64) {
        if let Some(i) = self.slot(image, ip) {
            let (lo, _, bits) = &mut self.sections[i];
            let at = (ip - *lo) as usize;
            if let Some(w) = bits.get_mut(at / 64) {
                *w |= 1 << (at % 64);
            }
        }
    }
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
            tsc: 0,
            has_tsc: false,
            lost_mtc: 0,
            lost_cyc: 0,
            cbr: None,
            icnt: 0,
            has_icnt: false,
            cr3: 0,
            vmcs: 0,
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
            runs: HashMap::default(),
            chains: Vec::new(),
            chain_pushes: Vec::new(),
            run_pushes: Vec::new(),
            run_stack: Vec::new(),
            branch_next: None,
            failed: None,
            last_resync: None,
            segs: Vec::new(),
            segs_ok: false,
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

    /// Offset of the PSB the decoder last synchronized at.
    pub fn sync_offset(&self) -> Option<u64> {
        self.evdec.sync_offset()
    }

    /// The time of the last event consumed: TSC (if known), lost MTC and CYC packets.
    pub fn time(&self) -> (Option<u64>, u32, u32) {
        (
            self.has_tsc.then_some(self.tsc),
            self.lost_mtc,
            self.lost_cyc,
        )
    }

    /// The last core:bus ratio seen.
    pub fn core_bus_ratio(&self) -> Option<u32> {
        self.cbr
    }

    /// The current CR3 and VMCS base (from paging and VMCS events).
    pub fn asid(&self) -> (u64, u64) {
        (self.cr3, self.vmcs)
    }

    /// The block cache's counters.
    pub fn cache_stats(&self) -> crate::block_cache::CacheStats {
        self.cache.stats()
    }

    fn reset(&mut self) {
        self.tsc = 0;
        self.lost_mtc = 0;
        self.lost_cyc = 0;
        self.cbr = None;
        self.icnt = 0;
        self.mode = ExecMode::Unknown;
        self.ip = 0;
        self.status = Err(ErrorCode::NoSync);
        self.enabled = false;
        self.speculative = false;
        self.has_tsc = false;
        self.has_icnt = false;
        self.postponed = None;
        self.bound = 0;
        self.event = NO_EVENT;
        self.retstack.clear();
        self.cr3 = 0;
        self.vmcs = 0;
        self.link = None;
        self.came_from = None;
        self.branch_next = None;
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

    /// [`EventDecoder::next_is_branch`], asked once per event.
    #[inline]
    fn next_is_branch(&mut self) -> bool {
        match self.branch_next {
            Some(b) => b,
            None => {
                let b = self.evdec.next_is_branch();
                self.branch_next = Some(b);
                b
            }
        }
    }

    fn load_next_event(&mut self) {
        self.branch_next = None;
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
        let t = self.event.time;
        self.tsc = t.tsc.unwrap_or(0);
        self.has_tsc = t.tsc.is_some();
        self.lost_mtc = t.lost_mtc;
        self.lost_cyc = t.lost_cyc;
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
        if self.options.tick_events && self.event.time.tsc.unwrap_or(0) != self.tsc {
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
                self.branch_next = None;
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
    /// [`ErrorCode::EventIgnored`]: call [`event`](Self::event), then this again.
    pub fn resync(&mut self) -> Result<Status, ErrorCode> {
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
                return self.sync_set(at);
            }
            let pending = self.status_flags(true);
            match ev.kind {
                // Without an IP the event cannot be processed, and reporting it again
                // would fail again (libipt's ptxed loops forever here): skip it.
                Enabled { .. } if ev.ip_suppressed => {}
                Enabled { .. } => {
                    self.enabled = false;
                    return Ok(self.status_flags(true));
                }
                Disabled { .. } => {
                    self.enabled = true;
                    self.ip = 0;
                    self.process_disabled(&ev)?;
                    return self.resync_at_event();
                }
                AsyncDisabled { at, .. } => {
                    self.ip = at;
                    if self.config.errata.skd022 && self.handle_skd022()? {
                        // Now a synchronous disable: look at it again.
                        self.fetch_event()?;
                        continue;
                    }
                    return Ok(self.status_flags(true));
                }
                AsyncBranch { from, .. } => {
                    self.ip = from;
                    return Ok(self.status_flags(true));
                }
                AsyncPaging { ip, .. } if !ev.ip_suppressed => {
                    self.ip = ip;
                    return Ok(self.status_flags(true));
                }
                AsyncPaging { .. } | Paging { .. } => self.process_paging(&ev),
                Overflow { .. } => return Ok(pending),
                ExecMode { ip, .. } | Tsx { ip, .. } | Iflags { ip, .. } | Interrupt { ip, .. } => {
                    if ev.ip_suppressed {
                        self.enabled = false;
                    } else {
                        self.enabled = true;
                        self.ip = ip;
                    }
                    return Ok(self.status_flags(true));
                }
                AsyncVmcs { ip, .. } if !ev.ip_suppressed => {
                    self.ip = ip;
                    return Ok(self.status_flags(true));
                }
                AsyncVmcs { .. } | Vmcs { .. } => self.process_vmcs(&ev),
                Ptwrite { ip, .. } | Vmentry { ip } | Uiret { ip } => {
                    if ev.ip_suppressed {
                        if matches!(ev.kind, Ptwrite { .. }) {
                            return Err(ErrorCode::EventIgnored);
                        }
                    } else {
                        self.ip = ip;
                        // Reported after the instruction.
                        return Ok(self.status_flags(false));
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
                    return Ok(self.status_flags(true));
                }
                Tip { ip } => {
                    self.ip = ip;
                    return self.resync_at_event();
                }
                _ => {}
            }
            self.fetch_event()?;
        }
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

    /// Proceed without trace until an instruction for which `pred` holds (`Ok(true)`),
    /// or the block is full or would switch sections (`Ok(false)`). `BadQuery` if
    /// trace is needed first; `last` then holds that instruction.
    fn proceed_to_insn(
        &mut self,
        block: &mut Block,
        last: &mut Option<Insn>,
        pred: Pred,
    ) -> Result<bool, ErrorCode> {
        loop {
            if !self.proceed_one_insn(block, last)? {
                return Ok(false);
            }
            let insn = last.ok_or(ErrorCode::Internal)?;
            if pred.test(&insn) {
                return Ok(true);
            }
            self.ip = next_ip(&insn)?;
            if self.ends_on_request(&insn) {
                return Ok(false);
            }
        }
    }

    /// Proceed without trace until `ip` is reached (`Ok(true)`).
    fn proceed_to_ip(
        &mut self,
        block: &mut Block,
        last: &mut Option<Insn>,
        ip: u64,
    ) -> Result<bool, ErrorCode> {
        loop {
            if self.ip == ip {
                return Ok(true);
            }
            if !self.proceed_one_insn(block, last)? {
                return Ok(false);
            }
            let insn = last.ok_or(ErrorCode::Internal)?;
            self.ip = next_ip(&insn)?;
            if self.ends_on_request(&insn) {
                return Ok(self.ip == ip);
            }
        }
    }

    /// SKL014: a TIP.PGD without IP may also come from a direct branch leaving the
    /// filter; find the branch whose target the filter rejects.
    fn proceed_skl014(
        &mut self,
        block: &mut Block,
        last: &mut Option<Insn>,
    ) -> Result<bool, ErrorCode> {
        loop {
            if !self.proceed_to_insn(block, last, Pred::Skl014)? {
                return Ok(false);
            }
            let insn = last.ok_or(ErrorCode::Internal)?;
            if insn.changes_cr3() {
                return Ok(true);
            }
            let ip = next_ip(&insn)?;
            if !self.options.filter.allows(ip) {
                return Ok(true);
            }
            self.ip = ip;
            if self.ends_on_request(&insn) {
                return Ok(false);
            }
        }
    }

    fn proceed_to_disabled(
        &mut self,
        block: &mut Block,
        last: &mut Option<Insn>,
        ev: &Event,
        ip: u64,
    ) -> Result<bool, ErrorCode> {
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
    ) -> Result<bool, ErrorCode> {
        if ev.ip_suppressed {
            return self.proceed_to_insn(block, last, pred);
        }
        let ip = event_ip(&ev.kind).ok_or(ErrorCode::Internal)?;
        if !self.proceed_to_ip(block, last, ip)? {
            return Ok(false);
        }
        self.proceed_one_insn(block, last)
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
    ) -> Result<bool, ErrorCode> {
        if self.event.ip_suppressed {
            return Ok(true);
        }
        self.provide_trig_anchor()?;
        let EventKind::Trig { ip, icnt, .. } = self.event.kind else {
            return Err(ErrorCode::Internal);
        };
        if !self.enabled {
            return if icnt == 0 {
                Err(ErrorCode::Internal)
            } else {
                Ok(true)
            };
        }
        if !self.proceed_to_ip(block, last, ip)? {
            return Ok(false);
        }
        loop {
            let EventKind::Trig { icnt, .. } = self.event.kind else {
                return Err(ErrorCode::Internal);
            };
            if icnt == 0 {
                return Ok(true);
            }
            if !self.proceed_one_insn(block, last)? {
                return Ok(false);
            }
            let insn = last.ok_or(ErrorCode::Internal)?;
            self.ip = next_ip(&insn)?;
            let dip = self.ip;
            if let EventKind::Trig { ip, icnt, .. } = &mut self.event.kind {
                *ip = dip;
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
                Ok(ip) => self.ip = ip,
                Err(ErrorCode::BadQuery) => self.proceed_with_trace(&insn)?,
                Err(e) => return Err(e),
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
                    match self.proceed_to_disabled(block, &mut last, &ev, ip) {
                        Ok(true) => {}
                        Ok(false) => return Ok(self.status_flags(false)),
                        // It also binds to the next branch that would need trace.
                        Err(ErrorCode::BadQuery) => self.set_disable_resume_ip(last.as_ref()),
                        Err(e) => return Err(e),
                    }
                }
                true
            }
            AsyncDisabled { at, .. } => {
                if !self.proceed_to_ip(block, &mut last, at)? {
                    return Ok(Status::default());
                }
                if self.config.errata.skd022 && self.handle_skd022()? {
                    return self.proceed_event(block);
                }
                true
            }
            AsyncBranch { from, .. } => self.proceed_to_ip(block, &mut last, from)?,
            Paging { .. } | Vmcs { .. } => {
                if enabled {
                    let (pred, flag) = if matches!(ev.kind, Paging { .. }) {
                        (Pred::BindsToPip, bound::PAGING)
                    } else {
                        (Pred::BindsToVmcs, bound::VMCS)
                    };
                    if !self.proceed_to_insn(block, &mut last, pred)? {
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
                    self.proceed_to_ip(block, &mut last, ip)?
                }
            }
            Exstop { ip } | Mwait { ip, .. } => {
                if !enabled || ev.ip_suppressed {
                    true
                } else {
                    self.proceed_to_ip(block, &mut last, ip)?
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
                    if !self.proceed_past_bound(block, &mut last, &ev, pred)? {
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
                    let reached = if ev.ip_suppressed {
                        self.proceed_to_insn(block, &mut last, pred)?
                    } else {
                        self.proceed_to_ip(block, &mut last, ip)?
                    };
                    if !reached {
                        return Ok(Status::default());
                    }
                    self.bound |= flag;
                    return self.postpone_insn(last);
                }
                true
            }
            Trig { .. } => self.proceed_to_trig(block, &mut last)?,
            Tip { .. } | Tnt { .. } => return Err(ErrorCode::Internal),
        };
        if !reached {
            return Ok(Status::default());
        }
        Ok(self.status_flags(true))
    }

    /// The block cache block at `ip`, following the stored link if it matches.
    #[inline]
    fn cache_block_at(&mut self, ip: u64) -> Result<BlockId, ErrorCode> {
        if let Some((id, taken, at)) = self.link.take() {
            if at == ip {
                return self
                    .cache
                    .successor(self.image, id, taken)
                    .map_err(|e| e.code);
            }
        }
        // After a return or an indirect branch: the target it went to last time?
        let from = self.came_from.take();
        if let Some(from) = from {
            if let Some(id) = self
                .last_target
                .get(from.index())
                .and_then(|t| t.hit(ip, self.mode))
            {
                return Ok(id);
            }
        }
        // Else a small direct-mapped table by IP before the cache's hash index (an
        // indirect branch with many targets misses the last-target entry).
        let slot = target_slot(ip);
        let id = match self.targets.get(slot).and_then(|t| t.hit(ip, self.mode)) {
            Some(id) => id,
            None => {
                let id = self
                    .cache
                    .lookup(self.image, ip, self.mode)
                    .map_err(|e| e.code)?;
                if let Some(t) = self.targets.get_mut(slot) {
                    *t = Target::new(ip, self.mode, id);
                }
                id
            }
        };
        if let Some(from) = from {
            if self.last_target.len() <= from.index() {
                self.last_target.resize(from.index() + 1, Target::NONE);
            }
            self.last_target[from.index()] = Target::new(ip, self.mode, id);
        }
        Ok(id)
    }

    #[inline]
    fn section_id(&mut self, ip: u64) -> u32 {
        let (lo, hi, id) = self.section;
        if lo <= ip && ip < hi {
            return id;
        }
        match self.image.find(ip) {
            Some(s) => {
                let lo = s.vaddr();
                self.section = (lo, lo.saturating_add(s.len()), s.id());
                s.id()
            }
            None => 0,
        }
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
                Ok(ip) => {
                    let taken = insn.class != InsnClass::Other && insn.class != InsnClass::Ptwrite;
                    self.link = Some((id, taken, ip));
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
                Err(ErrorCode::BadQuery) => {
                    self.proceed_with_trace(&insn)?;
                    if insn.class == InsnClass::CondJump {
                        let taken = Some(self.ip) == insn.target;
                        self.link = Some((id, taken, self.ip));
                    } else {
                        self.came_from = Some(id);
                    }
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Whether `ip` lies in the section of the last cache block.
    #[inline]
    fn in_section(&self, ip: u64) -> bool {
        self.section.0 <= ip && ip < self.section.1
    }

    /// Walk cache block `id` instruction by instruction as libipt would, marking what
    /// its cache learns. All but the last instruction are handled here; returns
    /// `Some((count, ip, next))` if libipt ends its block after `count` instructions
    /// of this run (the last at `ip`, going on at `next`). Leaves `fill` as it is
    /// before the last instruction's own step.
    fn walk_unknown(
        &mut self,
        id: BlockId,
        b: &BlockView,
        fill: &mut Option<u32>,
    ) -> Option<(u32, u64, u64)> {
        let image = self.image;
        let sizes = self.cache.sizes(id);
        let mut ip = b.ip;
        let mut known = true;
        for (k, &size) in sizes.iter().enumerate() {
            if fill.is_none() && !self.marks.valid(image, ip) {
                *fill = Some(0);
            }
            let last = k + 1 == sizes.len();
            if let Some(n) = *fill {
                self.marks.mark(image, ip);
                if !last {
                    let nip = ip.wrapping_add(u64::from(size));
                    if self.marks.valid(image, nip) {
                        *fill = None;
                    } else if n + 1 == FILL_STEPS {
                        return Some((k as u32 + 1, ip, nip));
                    } else {
                        *fill = Some(n + 1);
                    }
                }
            }
            known &= self.marks.valid(image, ip);
            ip = ip.wrapping_add(u64::from(size));
        }
        if known {
            if self.warm.len() <= id.index() {
                self.warm.resize(id.index() + 1, false);
            }
            self.warm[id.index()] = true;
        }
        None
    }

    /// One instruction at a time (a block that would overflow the instruction limit).
    fn proceed_no_event_slow(&mut self, block: &mut Block) -> Result<(), ErrorCode> {
        let mut last = None;
        match self.proceed_to_insn(block, &mut last, Pred::Never) {
            Ok(_) => Ok(()),
            Err(ErrorCode::BadQuery) => {
                let insn = last.ok_or(ErrorCode::BadQuery)?;
                self.proceed_with_trace(&insn)
            }
            Err(e) => Err(e),
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
            match self.decode(at).and_then(|d| next_ip(&d.insn)) {
                Ok(n) => at = n,
                Err(_) => break false,
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
                    || ev.time.tsc == Some(self.tsc);
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
                    Ok(n) => self.ip = n,
                    Err(ErrorCode::BadQuery) => {
                        self.set_disable_resume_ip(Some(&insn));
                        return pending(self);
                    }
                    Err(e) => return Err(e),
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

    /// Skips whole blocks whose only trace is a bit of the current TNT event, as many
    /// as [`next`](Self::next) would return one by one with nothing else to report,
    /// keeping the event's last bit for `next`. Returns the instructions and blocks
    /// skipped. For callers that only count (ptxed `--quiet`); call it only where
    /// `next` may be called. Runs of bits are memoized per start block, so a hot loop
    /// costs one lookup per TNT packet.
    pub fn skip_blocks(&mut self) -> (u64, u64) {
        if self.status.is_err()
            || !self.enabled
            || self.postponed.is_some()
            || self.options.tick_events
        {
            return (0, 0);
        }
        let (mut insns, mut blocks) = (0, 0);
        loop {
            let (i, b) = match self.event.kind {
                // Long runs of bits in one lookup; short ones block by block.
                EventKind::Tnt { size, .. } if size >= MEMO_MIN_BITS => match self.skip_tnt_run() {
                    (_, 0) => self.skip_chains(),
                    r => r,
                },
                EventKind::Tnt { .. } | EventKind::Tip { .. } => self.skip_chains(),
                _ => (0, 0),
            };
            if b == 0 {
                return (insns, blocks);
            }
            insns += i;
            blocks += b;
        }
    }

    /// The chain of warm cache blocks that [`next`](Self::next) would take as one
    /// block from cache block `start` on, up to the first instruction that needs
    /// trace: [`Self::proceed_no_event`]'s walk over warm blocks (memoized per start
    /// block in `chains`, since warm code does not change). `None` where that walk
    /// would end the block otherwise (another section, the instruction limit, a
    /// truncated instruction, `end_on_call`/`end_on_jump`) or meets code that is not
    /// warm yet.
    fn build_chain(&mut self, start: BlockId) -> Option<Chain> {
        let first = self.chain_pushes.len();
        let isid = self.section_id(self.cache.get(start)?.ip);
        let mut id = start;
        let mut insns = 0u32;
        let chain = loop {
            if !self.warm.get(id.index()).copied().unwrap_or(false) {
                break None;
            }
            let b = self.cache.block(id);
            let (ip0, ninsn, truncated, last) = (b.ip, b.ninsn, b.truncated, b.last);
            if truncated || insns + ninsn > MAX_BLOCK_INSNS || self.section_id(ip0) != isid {
                break None;
            }
            insns += ninsn;
            if last.pushes_return() {
                self.chain_pushes.push(last.next_ip());
            }
            match next_ip(&last) {
                Ok(ip) => {
                    if self.ends_on_request(&last) || !self.in_section(ip) {
                        break None;
                    }
                    let taken = last.class != InsnClass::Other && last.class != InsnClass::Ptwrite;
                    match self.cache.successor(self.image, id, taken) {
                        Ok(next) => id = next,
                        Err(_) => break None,
                    }
                }
                Err(ErrorCode::BadQuery) => {
                    let fall_through = last.next_ip();
                    let target = last
                        .target
                        .and_then(|t| i32::try_from(t.wrapping_sub(fall_through) as i64).ok());
                    let kind = match (last.class, target) {
                        (InsnClass::CondJump, Some(_)) => CHAIN_COND,
                        (InsnClass::Return, _) => CHAIN_RET,
                        (InsnClass::Jump | InsnClass::Call, _) if !last.is_direct() => CHAIN_IND,
                        _ => CHAIN_OTHER,
                    };
                    let (Ok(insns), Ok(npush)) = (
                        u16::try_from(insns),
                        u8::try_from(self.chain_pushes.len() - first),
                    ) else {
                        break None;
                    };
                    let link = |taken| self.cache.linked(id, taken).map_or(NO_LINK, BlockId::raw);
                    break Some(Chain {
                        fall_through,
                        target: target.unwrap_or(0),
                        end: id.raw(),
                        pushes: first as u32,
                        insns,
                        npush,
                        kind,
                        links: [link(false), link(true)],
                    });
                }
                Err(_) => break None,
            }
        };
        if chain.is_none() {
            self.chain_pushes.truncate(first);
        }
        chain
    }

    /// Moves on from the TNT or TIP event that the block just skipped used up, if
    /// the next event is a TNT or TIP too (else nothing changes): as
    /// [`Self::fetch_event`] would.
    #[inline(always)]
    fn next_branch_event(&mut self) -> bool {
        let t = self.event.time;
        if !self.evdec.next_branch_into(&mut self.event) {
            return false;
        }
        self.tsc = t.tsc.unwrap_or(0);
        self.has_tsc = t.tsc.is_some();
        self.lost_mtc = t.lost_mtc;
        self.lost_cyc = t.lost_cyc;
        // The TRIG anchor of a TNT or TIP with an IP.
        self.has_icnt = true;
        self.icnt = 0;
        self.branch_next = None;
        true
    }

    /// One block as [`next`](Self::next) would return it, counting only: a chain of
    /// warm cache blocks ([`Self::build_chain`]) ending in a conditional branch or a
    /// compressed return on a bit of the current TNT, or in a near indirect jump or
    /// call or an uncompressed return on the current TIP. A block that uses up the
    /// event is only taken when the next event is a TNT or TIP again (so that
    /// nothing would be reported after it).
    fn skip_chains(&mut self) -> (u64, u64) {
        let (mut insns, mut blocks) = (0, 0);
        let Some(mut id) = self.block_for_skip() else {
            return (0, 0);
        };
        // Out of `self` while in use, so that chains are read and updated in place.
        let mut chains = std::mem::take(&mut self.chains);
        loop {
            if let EventKind::Tnt { bits, size } = self.event.kind {
                if (2..MEMO_MIN_BITS).contains(&size) {
                    match self.take_cond_chains(&mut chains, id, bits, size) {
                        (Some(next), i, b) => {
                            id = next;
                            insns += i;
                            blocks += b;
                        }
                        (None, i, b) => {
                            insns += i;
                            blocks += b;
                            break;
                        }
                    }
                }
            }
            let at = id.index();
            if chains.get(at).is_none_or(|c| c.kind == CHAIN_NONE) {
                let Some(c) = self.build_chain(id) else {
                    break;
                };
                if chains.len() <= at {
                    chains.resize(at + 1, Chain::default());
                }
                chains[at] = c;
            }
            let Some(c) = chains.get_mut(at) else {
                break;
            };
            // `take_chain` replaces the hints when it takes the block, and leaves them
            // for `next` when it does not.
            let Some(next) = self.take_chain(c) else {
                break;
            };
            insns += u64::from(c.insns);
            blocks += 1;
            if matches!(self.event.kind, EventKind::Tnt { size, .. } if size >= MEMO_MIN_BITS) {
                break;
            }
            id = match next.or_else(|| self.block_for_skip()) {
                Some(id) => id,
                None => break,
            };
        }
        self.chains = chains;
        (insns, blocks)
    }

    /// [`Self::take_chain`] over a run of chains that end in conditional jumps and make
    /// no calls, on the bits of the current TNT event (`bits`, `size` of them left)
    /// other than its last: the state stays in registers and is written back once.
    /// Returns where to go on (`None`: nowhere known, stop skipping), and the
    /// instructions and blocks taken.
    #[inline(always)]
    fn take_cond_chains(
        &mut self,
        chains: &mut [Chain],
        mut id: BlockId,
        bits: u64,
        mut size: u8,
    ) -> (Option<BlockId>, u64, u64) {
        let (mut insns, mut blocks) = (0u64, 0u64);
        let has_icnt = self.has_icnt;
        let mut icnt = self.icnt;
        // The last chain taken: its end block, which way it went, and where.
        let mut last: Option<(u32, bool, u64)> = None;
        let mut next = Some(id);
        while size >= 2 {
            let Some(c) = chains.get_mut(id.index()) else {
                break;
            };
            if c.kind != CHAIN_COND || c.npush != 0 {
                break;
            }
            if has_icnt {
                match icnt.checked_add(u32::from(c.insns)) {
                    Some(i) => icnt = i,
                    None => break,
                }
            }
            let taken = (bits >> (size - 1)) & 1 != 0;
            size -= 1;
            let target = c.fall_through.wrapping_add(c.target as i64 as u64);
            let ip = if taken { target } else { c.fall_through };
            // A jump to the next instruction goes the taken way either way.
            let taken = ip == target;
            last = Some((c.end, taken, ip));
            insns += u64::from(c.insns);
            blocks += 1;
            let link = &mut c.links[usize::from(taken)];
            next = if *link != NO_LINK {
                Some(BlockId::from_raw(*link))
            } else {
                let n = self.cache.linked(BlockId::from_raw(c.end), taken);
                if let Some(n) = n {
                    *link = n.raw();
                }
                n
            };
            match next {
                Some(n) => id = n,
                None => break,
            }
        }
        let Some((end, taken, ip)) = last else {
            return (Some(id), 0, 0);
        };
        if let EventKind::Tnt { size: s, .. } = &mut self.event.kind {
            *s = size;
        }
        self.icnt = icnt;
        self.ip = ip;
        self.link = Some((BlockId::from_raw(end), taken, ip));
        self.came_from = None;
        let next = next.or_else(|| self.block_for_skip());
        (next, insns, blocks)
    }

    /// The cache block at the current IP for [`Self::skip_chains`], leaving the hints
    /// as they are.
    #[inline]
    fn block_for_skip(&mut self) -> Option<BlockId> {
        if let Some(id) = self.hinted_block_at(self.ip) {
            return Some(id);
        }
        let saved = (self.link, self.came_from);
        let r = self.cache_block_at(self.ip).ok();
        (self.link, self.came_from) = saved;
        r
    }

    /// The cache block at `ip` if the hints ([`Self::link`], [`Self::came_from`] and
    /// the target table) know it; leaves the hints as they are.
    #[inline]
    fn hinted_block_at(&mut self, ip: u64) -> Option<BlockId> {
        if let Some((id, taken, at)) = self.link {
            if at == ip {
                return self.cache.linked(id, taken);
            }
        }
        let from = self.came_from?;
        if let Some(id) = self
            .last_target
            .get(from.index())
            .and_then(|t| t.hit(ip, self.mode))
        {
            return Some(id);
        }
        let t = *self.targets.get(target_slot(ip))?;
        let id = t.hit(ip, self.mode)?;
        if let Some(last) = self.last_target.get_mut(from.index()) {
            *last = t;
        }
        Some(id)
    }

    /// Takes chain `c` as one block if the current event decides its last
    /// instruction (see [`Self::skip_chains`]). `None` if it does not; else the cache
    /// block where execution goes on, if the hints know it.
    #[inline]
    fn take_chain(&mut self, c: &mut Chain) -> Option<Option<BlockId>> {
        let icnt = if self.has_icnt {
            self.icnt.checked_add(u32::from(c.insns))?
        } else {
            self.icnt
        };
        let pushes = c.pushes as usize..c.pushes as usize + usize::from(c.npush);
        let end = BlockId::from_raw(c.end);
        let next = match self.event.kind {
            EventKind::Tnt { bits, size } => {
                if size == 0 {
                    return None;
                }
                let taken = (bits >> (size - 1)) & 1 != 0;
                let ret = match c.kind {
                    CHAIN_COND => false,
                    // A compressed return needs a return address (a not-taken bit is
                    // an error `next` reports).
                    CHAIN_RET if taken && (c.npush > 0 || !self.retstack.is_empty()) => true,
                    _ => return None,
                };
                if size == 1 {
                    if !self.next_branch_event() {
                        return None;
                    }
                } else if let EventKind::Tnt { size, .. } = &mut self.event.kind {
                    *size -= 1;
                    self.icnt = icnt;
                }
                let pushed = self.chain_pushes.get(pushes).unwrap_or_default();
                if ret {
                    if let Some((&own, older)) = pushed.split_last() {
                        // The return goes back to the chain's own last call: no need
                        // to go through the stack for it.
                        for &ip in older {
                            self.retstack.push(ip);
                        }
                        self.retstack.push_pop();
                        self.ip = own;
                    } else if let Ok(ip) = self.retstack.pop() {
                        // Not empty: checked above.
                        self.ip = ip;
                    }
                    self.link = None;
                    self.came_from = Some(end);
                    self.hinted_block_at(self.ip)
                } else {
                    for &ip in pushed {
                        self.retstack.push(ip);
                    }
                    let target = c.fall_through.wrapping_add(c.target as i64 as u64);
                    self.ip = if taken { target } else { c.fall_through };
                    // A jump to the next instruction goes the taken way either way.
                    let taken = self.ip == target;
                    self.link = Some((end, taken, self.ip));
                    self.came_from = None;
                    let link = &mut c.links[usize::from(taken)];
                    if *link != NO_LINK {
                        Some(BlockId::from_raw(*link))
                    } else {
                        let next = self.cache.linked(end, taken);
                        if let Some(next) = next {
                            *link = next.raw();
                        }
                        next
                    }
                }
            }
            EventKind::Tip { ip } => {
                if !matches!(c.kind, CHAIN_RET | CHAIN_IND)
                    || self.event.ip_suppressed
                    || !self.next_branch_event()
                {
                    return None;
                }
                for &ip in self.chain_pushes.get(pushes).unwrap_or_default() {
                    self.retstack.push(ip);
                }
                self.ip = ip;
                self.link = None;
                self.came_from = Some(end);
                self.hinted_block_at(ip)
            }
            _ => return None,
        };
        Some(next)
    }

    /// Skips blocks on the bits of the current TNT event (see [`skip_blocks`]).
    ///
    /// [`skip_blocks`]: Self::skip_blocks
    fn skip_tnt_run(&mut self) -> (u64, u64) {
        let EventKind::Tnt { bits, size } = self.event.kind else {
            return (0, 0);
        };
        // The last bit too when the next event is a branch again: then nothing is
        // reported after the block that uses it.
        let all = self.next_is_branch();
        let n = if all { size } else { size.saturating_sub(1) };
        if n == 0 {
            return (0, 0);
        }
        let Ok(start) = self.cache_block_at(self.ip) else {
            return (0, 0);
        };
        // The bits to use, oldest highest, with a stop bit above them.
        let pattern = ((bits >> (size - n)) & ((1u64 << n) - 1)) | (1u64 << n);
        let key = (start.index() as u32, pattern);
        let (run, keep) = match self.runs.get(&key) {
            Some(run) => (*run, true),
            None => {
                if self.runs.len() >= MAX_RUNS {
                    self.runs.clear();
                    self.run_pushes.clear();
                }
                let Some(run) = self.walk_tnt_run(start, bits, size, n) else {
                    self.link = None;
                    return (0, 0);
                };
                // Short runs are cheap to walk again.
                let keep = n >= 3;
                if keep {
                    self.runs.insert(key, run);
                }
                (run, keep)
            }
        };
        let r = self.apply_run(run);
        if !keep {
            self.run_pushes.truncate(run.pushes.0 as usize);
        }
        // All bits used (only with `all`): move on to the next event as `next` would
        // after the block. A TNT event always has an IP, so its TRIG anchor is fine.
        if r.1 > 0 && matches!(self.event.kind, EventKind::Tnt { size: 0, .. }) {
            let _ = self.fetch_event();
        }
        r
    }

    fn apply_run(&mut self, run: TntRun) -> (u64, u64) {
        // A full return stack would drop entries on the way: take the long way then.
        if self.retstack.len() + usize::from(run.depth) > super::retstack::RETSTACK_SIZE {
            self.link = None;
            return (0, 0);
        }
        if self.has_icnt {
            match u32::try_from(run.insns)
                .ok()
                .and_then(|i| self.icnt.checked_add(i))
            {
                Some(icnt) => self.icnt = icnt,
                None => {
                    self.link = None;
                    return (0, 0);
                }
            }
        }
        if let EventKind::Tnt { size, .. } = &mut self.event.kind {
            *size -= run.used;
        }
        self.ip = run.ip;
        self.link = run.link.map(|(id, taken)| (id, taken, run.ip));
        let (start, len) = (run.pushes.0 as usize, usize::from(run.pushes.1));
        for i in start..start + len {
            if let Some(&ip) = self.run_pushes.get(i) {
                self.retstack.push(ip);
            }
        }
        (run.insns, u64::from(run.used))
    }

    /// Follows up to `n` bits of `bits` (oldest at `size - 1`) from block `id` through
    /// known code, as whole blocks that end in a conditional branch or a compressed
    /// return (direct jumps and calls inside them are followed, as libipt's warm cache
    /// does). Returns pop only calls made in the run, so the result depends on the
    /// start block and the bits alone; the calls still open at the end are recorded
    /// in `run_pushes`.
    fn walk_tnt_run(&mut self, mut id: BlockId, bits: u64, size: u8, n: u8) -> Option<TntRun> {
        let mut run: Option<TntRun> = None;
        let mut insns = 0u64;
        let mut in_block = 0u32;
        let mut used = 0u8;
        // Reused between walks (short runs are walked again and again).
        let mut stack = std::mem::take(&mut self.run_stack);
        stack.clear();
        let mut depth = 0usize;
        let start = self.run_pushes.len();
        loop {
            if !self.warm.get(id.index()).copied().unwrap_or(false) {
                break;
            }
            let b = self.cache.block(id);
            let (last, ninsn, truncated, ip0) = (b.last, b.ninsn, b.truncated, b.ip);
            if truncated || in_block + ninsn > MAX_BLOCK_INSNS {
                break;
            }
            in_block += ninsn;
            let section = self.section_id(ip0);
            let (next_ip, taken, ends) = match last.class {
                InsnClass::CondJump => {
                    let taken = (bits >> (size - 1 - used)) & 1 != 0;
                    let ip = match (taken, last.target) {
                        (true, Some(t)) => t,
                        _ => last.next_ip(),
                    };
                    (ip, Some(taken), true)
                }
                InsnClass::Return => {
                    // Compressed (taken bit) and returning to a call of this run.
                    if (bits >> (size - 1 - used)) & 1 == 0 {
                        break;
                    }
                    let Some(ip) = stack.pop() else {
                        break;
                    };
                    (ip, None, true)
                }
                InsnClass::Other | InsnClass::Ptwrite => (last.next_ip(), Some(false), false),
                InsnClass::Jump if last.is_direct() && !self.options.end_on_jump => {
                    (last.target?, Some(true), false)
                }
                InsnClass::Call if last.is_direct() && !self.options.end_on_call => {
                    if last.pushes_return() {
                        if stack.len() == super::retstack::RETSTACK_SIZE {
                            break;
                        }
                        stack.push(last.next_ip());
                        depth = depth.max(stack.len());
                    }
                    (last.target?, Some(true), false)
                }
                _ => break,
            };
            if ends {
                insns += u64::from(in_block);
                in_block = 0;
                used += 1;
                self.run_pushes.truncate(start);
                self.run_pushes.extend_from_slice(&stack);
                run = Some(TntRun {
                    link: taken.map(|t| (id, t)),
                    ip: next_ip,
                    insns,
                    used,
                    pushes: (start as u32, stack.len() as u8),
                    depth: depth as u8,
                });
                if used == n {
                    break;
                }
            } else if self.image.find(next_ip).map(|s| s.id()) != Some(section) {
                // libipt ends its block where the code leaves the section.
                break;
            }
            let next = match taken {
                Some(t) => self.cache.successor(self.image, id, t),
                None => self.cache.lookup(self.image, next_ip, self.mode),
            };
            match next {
                Ok(next) => id = next,
                Err(_) => break,
            }
        }
        if run.is_none() {
            self.run_pushes.truncate(start);
        }
        self.run_stack = stack;
        run
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
            self.cr3 = cr3;
        }
    }

    fn process_vmcs(&mut self, ev: &Event) {
        if let EventKind::Vmcs { base } | EventKind::AsyncVmcs { base, .. } = ev.kind {
            self.vmcs = base;
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
                    Some(t) if self.options.tick_events && t != self.tsc => t,
                    _ => return Err(ErrorCode::BadQuery),
                };
                let tick = Event {
                    kind: Tick { ip: self.ip },
                    ip_suppressed: false,
                    status_update: false,
                    time: ev.time,
                    offset: ev.offset,
                };
                self.has_tsc = true;
                self.tsc = tsc;
                self.lost_mtc = ev.time.lost_mtc;
                self.lost_cyc = ev.time.lost_cyc;
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
