//! The decode driver: a trace and its code image → a stream of blocks or instructions,
//! with the events, errors and statuses met on the way.
//!
//! [`Decoder`] owns the loop every tool runs over a flow decoder (libipt's ptxed loop):
//! synchronize at a PSB, take the pending events, decode the next block or
//! instruction, report an error with its trace offset and IP, resynchronize as the
//! [`Resync`] policy says, until the end of the trace. Each step is an [`Item`]:
//!
//! * [`Item::Block`] / [`Item::Insn`]: a block of sequential instructions or one
//!   instruction ([`Granularity`]), with the decoder's position in the trace and the
//!   time; [`Decoder::block_ips`] gives a block's instruction addresses;
//! * [`Item::Event`]: an event (enable/disable, asynchronous branch, paging, mode and
//!   TSX changes, PTWRITE, power events, …);
//! * [`Item::Error`]: a [`FlowError`] (sync, decode or resync error);
//! * [`Item::EndOfTrace`], [`Item::Disabled`]: statuses (the trace ended while
//!   tracing was on; tracing is off after a resync);
//! * [`Item::Counts`]: in count-only mode, the instructions (and blocks) passed since
//!   the last item (at least every 1024 steps, so that a caller sees progress);
//! * [`Item::Skipped`]: after an error, the trace skipped to where decoding goes on.
//!
//! After an error the default policy, [`Resync::Recover`], goes on at the nearest
//! packet from which the flow is known again (a PSB, or an IP packet whose address
//! is whole, or whose compressed address the image completes and a trial decode up
//! to the next PSB+ confirms: [`crate::packet::recover`]) and says what it skipped;
//! it also reports a trace that ends inside a packet and holes (long runs of zero
//! bytes). [`Resync::NextPsb`] and [`Resync::NextIp`] are libipt's ptxed's ways,
//! output for output. Under every policy the runaway guard
//! ([`DecoderBuilder::runaway_limit`]) turns a flow that goes on without using trace
//! into an error.
//!
//! In count-only mode ([`DecoderBuilder::count_only`]) the driver takes warm code
//! through the block decoder's counting fast path ([`crate::flow::BlockDecoder::skip_blocks`])
//! and reports neither blocks nor instructions nor events: only counts, errors and
//! statuses. There, with [`DecoderBuilder::threads`], it decodes pieces of the trace
//! between PSBs on several threads and joins them where the result is the same as
//! one thread's ([`parallel`]).
//!
//! ```
//! use pt_decoder::{Config, Decoder, Granularity, Image, Item};
//! use pt_decoder::flow::FlowOptions;
//! use pt_encoder::{encode_to_vec, ExecMode, IpCompression, IpPacketKind, IpPayload,
//!     ModeExec, Packet, Tnt};
//!
//! // The code: L: add rax, 1; jnz L
//! let mut image = Image::new();
//! image.add_bytes(0x1000, vec![0x48, 0x83, 0xc0, 0x01, 0x75, 0xfa], "loop").unwrap();
//! // Its trace: tracing on at L, the loop taken twice, then left.
//! let mut trace = Vec::new();
//! for p in [
//!     Packet::Psb,
//!     Packet::Psbend,
//!     Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)),
//!     Packet::Ip(IpPacketKind::TipPge, IpPayload::new(IpCompression::Full, 0x1000)),
//!     Packet::Tnt8(Tnt::from_results([true, true, false]).unwrap()),
//! ] {
//!     encode_to_vec(&p, &mut trace).unwrap();
//! }
//! let mut dec = Decoder::builder(&trace, &image)
//!     .granularity(Granularity::Instructions)
//!     .build();
//! let mut ips = Vec::new();
//! while let Some(item) = dec.next() {
//!     match item {
//!         Item::Insn(i) => ips.push(i.insn.ip),
//!         Item::Error(e) => panic!("{e}"),
//!         _ => {}
//!     }
//! }
//! assert_eq!(ips, [0x1000, 0x1004, 0x1000, 0x1004, 0x1000, 0x1004]);
//! assert_eq!(dec.counts().insns, 6);
//! ```

use crate::config::Config;
use crate::error::{ErrorCode, Status};
use crate::event::{Event, Timestamp};
use crate::flow::{
    Block, BlockDecoder, Checkpoint, FlowOptions, InsnCheckpoint, InsnDecoder, InsnInfo, Progress,
};
use crate::image::{CodeError, Image};
use crate::insn;
use crate::packet::recover::{self, ResumeKind, ResumePoint};
use core::ops::ControlFlow;
use pt_encoder::ExecMode;
use std::sync::Arc;

pub mod parallel;

/// What the stream is made of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Granularity {
    /// Blocks of sequential instructions ([`Item::Block`]), as libipt's block decoder
    /// returns them.
    #[default]
    Blocks,
    /// One instruction at a time ([`Item::Insn`]), as libipt's instruction decoder.
    Instructions,
}

/// Where decoding goes on after an error.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Resync {
    /// Synchronize at the next PSB (libipt's ptxed by default). What lies between the
    /// error and that PSB is lost.
    NextPsb,
    /// Go on at the next point in the event stream where the IP is known again (a
    /// TIP, a FUP of an asynchronous event, an enable), without a PSB where possible;
    /// the events met on the way are reported (libipt's ptxed `--resync-on-error`).
    NextIp,
    /// Lose as little as can soundly be decoded (the default): go on at the nearest
    /// packet from which the flow is known without anything before it
    /// ([`crate::packet::recover`]): an IP packet with a whole address (TIP, TIP.PGE,
    /// FUP with its TIP) or a PSB; after an error at a PSB+ that contradicts the
    /// flow, that very PSB. Say what was skipped ([`Item::Skipped`]). Also report
    /// damage libipt passes over: a trace that ends inside a packet
    /// ([`ErrorCode::Truncated`]) and holes, long runs of zero bytes
    /// ([`ErrorCode::Hole`]), which decoding skips.
    #[default]
    Recover,
}

/// A block, with where and when it was decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockItem {
    /// The block. It may be empty (`ninsn == 0`), e.g. when an event binds before
    /// its first instruction; after an error it holds the instructions decoded
    /// before it.
    pub block: Block,
    /// The decoder's position in the trace when the block was decoded: the offset of
    /// the next packet it was to look at (libipt's `pt_blk_get_offset`).
    pub offset: u64,
    /// The time of the last packet used up for the block (the branch that ended it,
    /// or an event before).
    pub time: Timestamp,
    /// Where execution goes on after the block, as far as the trace has told so far:
    /// the branch target or the next instruction. `None` if tracing is off after it
    /// or the block ended in an error. An event that follows may change it (an
    /// asynchronous branch, a disable).
    pub next_ip: Option<u64>,
}

/// One instruction, with where and when it was decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InsnItem {
    /// The instruction. After an error, the one the error came after.
    pub insn: InsnInfo,
    /// The decoder's position in the trace when it was decoded.
    pub offset: u64,
    /// The time of the last packet used up for the block it belongs to.
    pub time: Timestamp,
}

/// An event, with the decoder's position when it was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventItem {
    /// The event (its own `offset` is that of the packet that produced it).
    pub event: Event,
    /// The decoder's position in the trace when the event was taken (libipt's
    /// `pt_blk_get_offset` before `pt_blk_event`; what ptxed prints).
    pub offset: u64,
}

/// Trace skipped after an error ([`Resync::Recover`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SkipItem {
    /// Where the error left the decoder.
    pub from: u64,
    /// Where decoding goes on: the resume point, or the end of the trace. Before
    /// `from` when decoding goes back to the PSB whose PSB+ the flow did not agree
    /// with (the flow went wrong before it): nothing is skipped then.
    pub to: u64,
    /// What decoding goes on at; `None` at the end of the trace.
    pub at: Option<ResumePoint>,
}

/// Which step of the decode loop failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlowErrorKind {
    /// Synchronizing at a PSB.
    Sync,
    /// Decoding a block, an instruction or an event.
    Decode,
    /// Resynchronizing after an error ([`Resync::NextIp`]).
    Resync,
}

impl core::fmt::Display for FlowErrorKind {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            FlowErrorKind::Sync => "sync error",
            FlowErrorKind::Decode => "decode error",
            FlowErrorKind::Resync => "resync error",
        })
    }
}

/// An error of the decode loop, where it happened: the trace offset and the IP of the
/// instruction it blames. Decoding goes on as the [`Resync`] policy says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind} at {}, ip {ip:#x}: {code}", Offset(*.offset))]
pub struct FlowError {
    /// The step that failed.
    pub kind: FlowErrorKind,
    /// What went wrong.
    pub code: ErrorCode,
    /// The decoder's position in the trace (`None` before it first synchronized).
    pub offset: Option<u64>,
    /// The instruction to blame (ptxed's rules): the one after the last block or
    /// instruction decoded, unless the trace did not match that one itself; the
    /// block's first IP if it was empty.
    pub ip: u64,
}

/// Formats an optional offset for [`FlowError`]'s message.
struct Offset(Option<u64>);

impl core::fmt::Display for Offset {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(o) => write!(f, "offset {o:#x}"),
            None => f.write_str("an unknown offset"),
        }
    }
}

/// Instructions and blocks decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Counts {
    /// Instructions.
    pub insns: u64,
    /// Blocks, counted as libipt's ptxed counts them (every block returned, empty
    /// ones too). `None` at instruction granularity, and in a parallel decode, where
    /// blocks in code seen for the first time may end elsewhere than on one thread.
    pub blocks: Option<u64>,
}

/// One step of the decode loop (see the [module docs](self)).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    /// A block of sequential instructions ([`Granularity::Blocks`]).
    Block(BlockItem),
    /// One instruction ([`Granularity::Instructions`]).
    Insn(InsnItem),
    /// An event.
    Event(EventItem),
    /// An error; decoding goes on as the [`Resync`] policy says.
    Error(FlowError),
    /// The trace ended while tracing was enabled (ptxed's `[end of trace]`): the flow
    /// is cut off there, not ended by a disable.
    EndOfTrace,
    /// After a resynchronization, tracing is disabled (ptxed's `[disabled]`).
    Disabled,
    /// Count-only mode: what was decoded since the last item.
    Counts(Counts),
    /// After an error, the decoder skipped trace ([`Resync::Recover`]).
    Skipped(SkipItem),
}

impl Default for Item {
    /// A placeholder for [`Decoder::next_into`]'s slot.
    fn default() -> Self {
        Item::Counts(Counts::default())
    }
}

/// The instruction addresses of the last [`Item::Block`] ([`Decoder::block_ips`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockIps<'d> {
    /// The addresses, first to last: all of the block's, unless `error` says where
    /// finding them stopped.
    pub ips: &'d [u64],
    /// Why the addresses stop short: the instruction after the last one could not
    /// be decoded (`BadInsn` at its IP), or the walk did not end at the block's last
    /// IP (`NoSync` at the IP it ended at).
    pub error: Option<CodeError>,
}

/// Instruction and block counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    insns: u64,
    blocks: u64,
}

impl Tally {
    fn minus(self, other: Tally) -> Tally {
        Tally {
            insns: self.insns.wrapping_sub(other.insns),
            blocks: self.blocks.wrapping_sub(other.blocks),
        }
    }

    fn plus(self, other: Tally) -> Tally {
        Tally {
            insns: self.insns.wrapping_add(other.insns),
            blocks: self.blocks.wrapping_add(other.blocks),
        }
    }
}

/// The settings of a [`Decoder`].
#[derive(Clone, Copy, Debug)]
struct Settings {
    config: Config,
    flow: FlowOptions,
    granularity: Granularity,
    resync: Resync,
    count_only: bool,
    threads: usize,
    min_piece: u64,
    /// `None`: [`default_runaway_limit`].
    runaway_limit: Option<u64>,
}

/// Builds a [`Decoder`]: [`Decoder::builder`].
#[derive(Clone, Copy, Debug)]
#[must_use]
pub struct DecoderBuilder<'a> {
    trace: &'a [u8],
    image: &'a Image,
    settings: Settings,
}

impl<'a> DecoderBuilder<'a> {
    /// The recording's configuration (CPU errata, timing parameters); default:
    /// [`Config::default`].
    pub fn config(mut self, config: &Config) -> Self {
        self.settings.config = *config;
        self
    }

    /// The flow decoder options (block boundaries, tick and iflags events, the IP
    /// filter); default: none.
    pub fn flow(mut self, flow: FlowOptions) -> Self {
        self.settings.flow = flow;
        self
    }

    /// Blocks (default) or instructions.
    pub fn granularity(mut self, granularity: Granularity) -> Self {
        self.settings.granularity = granularity;
        self
    }

    /// Where to go on after an error (default: [`Resync::Recover`]).
    pub fn resync(mut self, resync: Resync) -> Self {
        self.settings.resync = resync;
        self
    }

    /// The runaway guard: after this many instructions without using any trace
    /// (no packet, no TNT bit), the flow is an error ([`ErrorCode::Runaway`]) and
    /// decoding goes on as the [`Resync`] policy says; 0: no guard (libipt's way: it
    /// decodes such a flow forever). Default: [`default_runaway_limit`].
    ///
    /// It never fires on a valid trace: without trace the flow is one fixed path
    /// through the code (a direct branch or call has one target), which ends where an
    /// instruction needs trace or where the next event binds. Once that path comes
    /// back to an instruction it has passed it repeats forever, and a valid trace
    /// leaves such a loop only through an event that binds on it (an interrupt, a
    /// disable): so a valid flow goes at most through each instruction of the image
    /// once and then once more around the loop.
    pub fn runaway_limit(mut self, instructions: u64) -> Self {
        self.settings.runaway_limit = Some(instructions);
        self
    }

    /// Count only (the fast path): no block, instruction or event items, only
    /// [`Item::Counts`], errors and statuses. What ptxed `--quiet` does.
    pub fn count_only(mut self, yes: bool) -> Self {
        self.settings.count_only = yes;
        self
    }

    /// In count-only mode, decode pieces of the trace between PSBs on up to
    /// `threads` threads (0: one per core, at most 8; default 1). The errors and
    /// statuses are those of one thread and the counts add up to the same, but they
    /// come in other portions, and [`Counts::blocks`] is `None` (blocks in code seen
    /// for the first time end where the decoder's cache says). Not with tick events
    /// (their times depend on what was decoded before).
    pub fn threads(mut self, threads: usize) -> Self {
        self.settings.threads = threads;
        self
    }

    /// The smallest piece of the trace worth a thread of its own (0: the default,
    /// 256 KiB).
    pub fn min_piece(mut self, bytes: u64) -> Self {
        self.settings.min_piece = if bytes == 0 {
            parallel::MIN_PIECE
        } else {
            bytes
        };
        self
    }

    /// The decoder.
    pub fn build(self) -> Decoder<'a> {
        Decoder {
            trace: self.trace,
            image: self.image,
            settings: self.settings,
            run: None,
        }
    }
}

/// The runaway guard's default for `image` (see [`DecoderBuilder::runaway_limit`]):
/// 2^24 instructions, or twice the bytes of code in the image if that is more (no
/// valid flow walks further without trace).
pub fn default_runaway_limit(image: &Image) -> u64 {
    let code: u64 = image.sections().iter().map(|s| s.len()).sum();
    (1u64 << 24).max(code.saturating_mul(2))
}

/// The decode driver. See the [module docs](self).
pub struct Decoder<'a> {
    trace: &'a [u8],
    image: &'a Image,
    settings: Settings,
    /// Set up at the first item.
    run: Option<Run<'a>>,
}

/// How the decode runs.
enum Run<'a> {
    Blocks(Engine<'a, BlockStep<'a>>),
    Insns(Engine<'a, InsnStep<'a>>),
    /// A parallel decode, joined; its items in order.
    Joined {
        items: std::vec::IntoIter<Item>,
        total: Tally,
    },
}

impl<'a> Decoder<'a> {
    /// A decoder of `trace` with code from `image`, at block granularity, recovering
    /// from errors as [`Resync::Recover`] says, on one thread.
    pub fn new(trace: &'a [u8], image: &'a Image, config: &Config, flow: FlowOptions) -> Self {
        Self::builder(trace, image)
            .config(config)
            .flow(flow)
            .build()
    }

    /// A builder for a decoder of `trace` with code from `image`.
    pub fn builder(trace: &'a [u8], image: &'a Image) -> DecoderBuilder<'a> {
        DecoderBuilder {
            trace,
            image,
            settings: Settings {
                config: Config::default(),
                flow: FlowOptions::default(),
                granularity: Granularity::Blocks,
                resync: Resync::Recover,
                count_only: false,
                threads: 1,
                min_piece: parallel::MIN_PIECE,
                runaway_limit: None,
            },
        }
    }

    /// The code image.
    pub fn image(&self) -> &'a Image {
        self.image
    }

    fn start(&mut self) -> Run<'a> {
        let s = self.settings;
        let runaway = s
            .runaway_limit
            .unwrap_or_else(|| default_runaway_limit(self.image));
        let engine = |count_only| EngineSettings {
            count_only,
            resync: s.resync,
            runaway,
        };
        // Holes matter to the policy that reports them.
        let holes: Arc<[(u64, u64)]> = if s.resync == Resync::Recover {
            recover::find_holes(self.trace).into()
        } else {
            Arc::from([])
        };
        let env = Env {
            trace: self.trace,
            image: self.image,
            config: s.config,
            flow: s.flow,
            holes,
        };
        let threads = match s.threads {
            0 => parallel::default_threads(),
            n => n,
        };
        // Only where the result cannot depend on how the trace was cut: counts, not
        // times (tick events).
        if s.count_only && threads > 1 && !s.flow.tick_events {
            let joined = match s.granularity {
                Granularity::Blocks => parallel::decode::<BlockStep<'a>>(
                    &env,
                    s.flow,
                    engine(true),
                    threads,
                    s.min_piece,
                ),
                Granularity::Instructions => parallel::decode::<InsnStep<'a>>(
                    &env,
                    s.flow,
                    engine(true),
                    threads,
                    s.min_piece,
                ),
            };
            if let Some(j) = joined {
                let total = j.total;
                let items = j.items();
                return Run::Joined {
                    items: items.into_iter(),
                    total,
                };
            }
        }
        match s.granularity {
            Granularity::Blocks => Run::Blocks(Engine::new(
                BlockStep::new(self.trace, self.image, &s.config, s.flow),
                env,
                engine(s.count_only),
            )),
            Granularity::Instructions => Run::Insns(Engine::new(
                InsnStep::new(self.trace, self.image, &s.config, s.flow),
                env,
                engine(s.count_only),
            )),
        }
    }

    /// The next item into `slot` (no copy of a returned `Option`); `false` at the end.
    #[inline]
    pub fn next_into(&mut self, slot: &mut Item) -> bool {
        let run = match &mut self.run {
            Some(run) => run,
            None => {
                let run = self.start();
                self.run.insert(run)
            }
        };
        match run {
            Run::Blocks(e) => e.next_item(&mut Whole, slot),
            Run::Insns(e) => e.next_item(&mut Whole, slot),
            Run::Joined { items, .. } => match items.next() {
                Some(item) => {
                    *slot = item;
                    true
                }
                None => false,
            },
        }
    }

    /// The instructions and blocks decoded so far.
    pub fn counts(&self) -> Counts {
        match &self.run {
            None => Counts {
                insns: 0,
                blocks: (self.settings.granularity == Granularity::Blocks).then_some(0),
            },
            Some(Run::Blocks(e)) => Counts {
                insns: e.tally.insns,
                blocks: Some(e.tally.blocks),
            },
            Some(Run::Insns(e)) => Counts {
                insns: e.tally.insns,
                blocks: None,
            },
            Some(Run::Joined { total, .. }) => Counts {
                insns: total.insns,
                blocks: None,
            },
        }
    }

    /// The instruction addresses of the last [`Item::Block`]: from the block cache
    /// where the block was built from it, else decoded anew from the image (following
    /// direct jumps and calls). `None` if no block was returned yet.
    pub fn block_ips(&mut self) -> Option<BlockIps<'_>> {
        match &mut self.run {
            Some(Run::Blocks(e)) => e.dec.block_ips(self.image),
            _ => None,
        }
    }
}

impl<'a> Decoder<'a> {
    /// Decodes with the code of `image` from the next block or instruction on: a
    /// context switch to another process, an exec (libipt's `pt_blk_set_image`). What
    /// was learnt about the previous image's code is kept for when it comes back.
    /// Returns `false` (and changes nothing) in a parallel decode, which has run
    /// already.
    pub fn set_image(&mut self, image: &'a Image) -> bool {
        match &mut self.run {
            None => {}
            Some(Run::Blocks(e)) => e.set_image(image),
            Some(Run::Insns(e)) => e.set_image(image),
            Some(Run::Joined { .. }) => return false,
        }
        self.image = image;
        true
    }
}

impl<'a, S: Step<'a>> Engine<'a, S> {
    fn set_image(&mut self, image: &'a Image) {
        self.image = image;
        self.dec.set_image(image);
    }
}

impl Iterator for Decoder<'_> {
    type Item = Item;

    #[inline]
    fn next(&mut self) -> Option<Item> {
        let mut slot = Item::default();
        self.next_into(&mut slot).then_some(slot)
    }
}

/// What the decode loop needs from a flow decoder. The block and the instruction
/// decoder are driven the same way (sync, events, errors, resync); they differ in how
/// a step is decoded, counted and blamed for an error.
pub(crate) trait Step<'a>: Sized + Send {
    /// The state between two steps that decides what comes after (see
    /// [`BlockDecoder::checkpoint`]), for joining the pieces of a parallel decode.
    type Mark: Send + Sync;
    /// Whether it counts blocks ([`Counts::blocks`]).
    const BLOCKS: bool;
    fn new(trace: &'a [u8], image: &'a Image, config: &Config, flow: FlowOptions) -> Self;
    fn sync_forward(&mut self) -> Result<Status, ErrorCode>;
    fn sync_set(&mut self, offset: u64) -> Result<Status, ErrorCode>;
    fn resync(&mut self) -> Result<Progress, ErrorCode>;
    fn offset(&self) -> Option<u64>;
    fn event(&mut self) -> Result<(Event, Status), ErrorCode>;
    /// Forget the last block or instruction before a new sync.
    fn reset(&mut self);
    /// The IP to blame for `code` after the last block or instruction.
    fn error_ip(&self, image: &Image, code: ErrorCode) -> u64;
    /// The counting fast path: skip through warm code, counting.
    fn skip(&mut self, tally: &mut Tally);
    /// Decode and count one block or instruction; whether there is one to report.
    fn step(&mut self, tally: &mut Tally) -> (bool, Result<Progress, ErrorCode>);
    /// The item for the last step, into `slot`.
    fn item(&self, offset: u64, slot: &mut Item);
    fn mark(&self) -> Option<Self::Mark>;
    fn reached(&self, mark: &Self::Mark) -> bool;
    /// See [`BlockDecoder::set_end`].
    fn set_end(&mut self, end: u64);
    /// See [`BlockDecoder::resume_at`].
    fn resume_at(&mut self, at: &ResumePoint) -> Result<Progress, ErrorCode>;
    /// See [`BlockDecoder::trace_position`].
    fn trace_position(&self) -> u64;
    /// See [`BlockDecoder::failed_at_psb`].
    fn failed_at_psb(&self) -> Option<u64>;
    /// The block decoder underneath.
    fn block_decoder(&self) -> &BlockDecoder<'a>;
    /// Decode with the code of `image` from the next step on.
    fn set_image(&mut self, image: &'a Image);
}

/// Where a decode starts and what it sees of its progress: the whole trace, or one
/// piece of a parallel decode.
pub(crate) trait Watch<S> {
    /// Whether steps may skip through warm code.
    fn fast(&self) -> bool {
        true
    }
    /// The first synchronization.
    fn first_sync(&mut self, dec: &mut S) -> Result<Status, ErrorCode>;
    /// Where the first synchronization looks for a PSB.
    fn start(&self) -> u64 {
        0
    }
    /// Between two steps, with `tally` so far; `Break` ends the decode here.
    fn between_steps(&mut self, _dec: &S, _tally: Tally) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }
    /// An error was reported.
    fn error(&mut self, _code: ErrorCode) {}
}

/// The whole trace on one thread.
pub(crate) struct Whole;

impl<'a, S: Step<'a>> Watch<S> for Whole {
    #[inline]
    fn first_sync(&mut self, dec: &mut S) -> Result<Status, ErrorCode> {
        dec.sync_forward()
    }
}

/// What the loop is about to do.
#[derive(Clone, Copy, Debug)]
enum State {
    /// (Re)synchronize at a PSB; `first`: the decode's first.
    Sync { first: bool },
    /// Take events, or decode the next step.
    Running,
    /// Report an error, then go on as the policy says.
    Error(ErrorCode),
    /// Resynchronize after an error.
    Resync,
    /// Look for where to go on after an error at `from` ([`Resync::Recover`]), from
    /// `scan` on.
    Recover { from: u64, scan: u64 },
    /// Report the trace skipped from `from`, then go on at `at`.
    Skip { from: u64, at: ResumePoint },
    /// Go on at a resume point.
    Resume(ResumePoint),
    /// The trace ended: report the end of the trace if `tracing` was on, then stop.
    End { tracing: bool },
    /// The end.
    Done,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct EngineSettings {
    count_only: bool,
    resync: Resync,
    /// The runaway guard (0: none).
    runaway: u64,
}

/// What every engine of one decode shares.
#[derive(Clone)]
pub(crate) struct Env<'a> {
    trace: &'a [u8],
    image: &'a Image,
    config: Config,
    flow: FlowOptions,
    /// The holes in the trace ([`recover::find_holes`]; only with [`Resync::Recover`]).
    holes: Arc<[(u64, u64)]>,
}

/// The decode loop over one flow decoder, one item at a time.
pub(crate) struct Engine<'a, S> {
    dec: S,
    image: &'a Image,
    env: Env<'a>,
    settings: EngineSettings,
    /// The end of the trace the decoder sees: the trace's, or where the next hole
    /// starts.
    end: u64,
    /// Where decoding last went on after an error ([`Resync::Recover`]): each time
    /// further on.
    resumed: Option<u64>,
    /// The runaway guard: the trace position after the last step, and the
    /// instructions decoded when it last changed.
    idle_pos: u64,
    idle_since: u64,
    /// The decoder that tries resume points ([`Resync::Recover`]), made on first
    /// use, and the image it has.
    trial: Option<BlockDecoder<'a>>,
    trial_image: *const Image,
    state: State,
    status: Status,
    /// The offset a failed sync was last retried from.
    sync: u64,
    tally: Tally,
    /// `tally` at the last [`Item::Counts`].
    reported: Tally,
    /// An item to hand out after the counts before it.
    queued: Option<Item>,
    /// Steps taken in count-only mode.
    steps: u32,
}

/// Count-only mode reports the counts at least every this many steps.
const COUNTS_EVERY: u32 = 1 << 10;

impl<'a, S: Step<'a>> Engine<'a, S> {
    fn new(dec: S, env: Env<'a>, settings: EngineSettings) -> Self {
        let len = env.trace.len() as u64;
        Engine {
            dec,
            image: env.image,
            env,
            settings,
            end: len,
            resumed: None,
            idle_pos: u64::MAX,
            idle_since: 0,
            trial: None,
            trial_image: core::ptr::null(),
            state: State::Sync { first: true },
            status: Status::default(),
            sync: 0,
            tally: Tally::default(),
            reported: Tally::default(),
            queued: None,
            steps: 0,
        }
    }

    /// Start again from the beginning (keeping the decoder's caches warm).
    fn restart(&mut self) {
        self.resumed = None;
        self.idle_pos = u64::MAX;
        self.state = State::Sync { first: true };
        self.status = Status::default();
        self.sync = 0;
        self.tally = Tally::default();
        self.reported = Tally::default();
        self.queued = None;
    }

    /// In count-only mode, the counts since the last report, if any.
    fn take_counts(&mut self) -> Option<Item> {
        if !self.settings.count_only || self.tally == self.reported {
            return None;
        }
        let d = self.tally.minus(self.reported);
        self.reported = self.tally;
        Some(Item::Counts(Counts {
            insns: d.insns,
            blocks: S::BLOCKS.then_some(d.blocks),
        }))
    }

    /// Hand out `item`, after the counts before it.
    fn report(&mut self, item: Item, slot: &mut Item) -> bool {
        match self.take_counts() {
            Some(counts) => {
                self.queued = Some(item);
                *slot = counts;
            }
            None => *slot = item,
        }
        true
    }

    fn error(&self, kind: FlowErrorKind, code: ErrorCode) -> Item {
        self.error_at(kind, code, self.dec.offset())
    }

    fn error_at(&self, kind: FlowErrorKind, code: ErrorCode, offset: Option<u64>) -> Item {
        Item::Error(FlowError {
            kind,
            code,
            offset,
            ip: self.dec.error_ip(self.image, code),
        })
    }

    fn recovers(&self) -> bool {
        self.settings.resync == Resync::Recover
    }

    fn len(&self) -> u64 {
        self.env.trace.len() as u64
    }

    /// The first hole that ends after `at`.
    fn hole_after(&self, at: u64) -> Option<(u64, u64)> {
        let holes = &self.env.holes;
        let i = holes.partition_point(|&(_, end)| end <= at);
        holes.get(i).copied()
    }

    /// Let the decoder see the trace from `at` up to the next hole.
    fn see_from(&mut self, at: u64) {
        let end = match self.hole_after(at) {
            // A packet that starts before the hole may end in its first zeros.
            Some((start, end)) if start >= at => (start + recover::PACKET_MAX).min(end),
            _ => self.len(),
        };
        if end != self.end {
            self.end = end;
            self.dec.set_end(end);
        }
    }

    /// The decoder came to the end of the trace it sees, with tracing on or not:
    /// a hole ([`Resync::Recover`]: report it and go on after it), or the end of the
    /// trace (reporting a packet it cuts off).
    fn reached_end(&mut self, tracing: bool) -> Option<Item> {
        if self.recovers() {
            if self.end < self.len() {
                let (start, end) = self.hole_after(self.end).unwrap_or((self.end, self.end));
                self.state = State::Recover {
                    from: start,
                    scan: end,
                };
                return Some(self.error_at(FlowErrorKind::Decode, ErrorCode::Hole, Some(start)));
            }
            if let Some(at) = self.dec.offset().filter(|&o| o < self.len()) {
                self.state = State::End { tracing };
                return Some(self.error_at(FlowErrorKind::Decode, ErrorCode::Truncated, Some(at)));
            }
        }
        self.state = State::Done;
        tracing.then_some(Item::EndOfTrace)
    }

    /// After an error at `from`: where to look for a resume point.
    fn recover_from(&self, from: Option<u64>) -> State {
        let from = from.or(self.resumed).unwrap_or(0);
        State::Recover { from, scan: from }
    }

    /// The runaway guard, after a step: an error if the flow went on for too long
    /// without using trace.
    #[inline]
    fn guard(&mut self) {
        if self.settings.runaway == 0 || !matches!(self.state, State::Running) {
            return;
        }
        let pos = self.dec.trace_position();
        if pos != self.idle_pos {
            self.idle_pos = pos;
            self.idle_since = self.tally.insns;
        } else if self.tally.insns.wrapping_sub(self.idle_since) > self.settings.runaway {
            self.idle_since = self.tally.insns;
            self.state = State::Error(ErrorCode::Runaway);
        }
    }

    fn after_step(&mut self, r: Result<Progress, ErrorCode>) {
        self.state = match r {
            Ok(Progress::Done(s)) => {
                self.status = s;
                State::Running
            }
            Ok(Progress::EventFirst) => {
                self.status = Status {
                    event_pending: true,
                    ..Status::default()
                };
                State::Running
            }
            Err(e) => State::Error(e),
        };
    }

    /// The next item into `slot` (written in place: an item is a hundred bytes);
    /// `false` at the end.
    #[inline]
    fn next_item<W: Watch<S>>(&mut self, watch: &mut W, slot: &mut Item) -> bool {
        if self.queued.is_some() {
            if let Some(item) = self.queued.take() {
                *slot = item;
                return true;
            }
        }
        let items = !self.settings.count_only;
        loop {
            match self.state {
                State::Running => {
                    if self.status.event_pending {
                        let offset = self.dec.offset().unwrap_or(0);
                        match self.dec.event() {
                            Ok((event, s)) => {
                                self.status = s;
                                if items {
                                    *slot = Item::Event(EventItem { event, offset });
                                    return true;
                                }
                            }
                            Err(e) => self.state = State::Error(e),
                        }
                        continue;
                    }
                    if self.status.eos {
                        if let Some(item) = self.reached_end(!self.status.ip_suppressed) {
                            return self.report(item, slot);
                        }
                        continue;
                    }
                    if watch.between_steps(&self.dec, self.tally).is_break() {
                        self.state = State::Done;
                        continue;
                    }
                    if items {
                        let offset = self.dec.offset().unwrap_or(0);
                        let (produced, r) = self.dec.step(&mut self.tally);
                        // An error after the step is reported at the next call,
                        // after the step's item.
                        self.after_step(r);
                        self.guard();
                        if produced {
                            self.dec.item(offset, slot);
                            return true;
                        }
                    } else {
                        if watch.fast() {
                            self.dec.skip(&mut self.tally);
                        }
                        let (_, r) = self.dec.step(&mut self.tally);
                        self.after_step(r);
                        self.guard();
                        // Now and then hand the counts out, so that a caller sees
                        // progress (code that loops without needing trace, `jmp $`,
                        // never comes to an end of its own).
                        self.steps = self.steps.wrapping_add(1);
                        if self.steps.is_multiple_of(COUNTS_EVERY) {
                            if let Some(counts) = self.take_counts() {
                                *slot = counts;
                                return true;
                            }
                        }
                    }
                }
                State::Sync { first } => {
                    self.dec.reset();
                    let r = if first {
                        if self.recovers() {
                            self.see_from(watch.start());
                        }
                        watch.first_sync(&mut self.dec)
                    } else {
                        self.dec.sync_forward()
                    };
                    match r {
                        Ok(s) => {
                            self.status = s;
                            self.state = State::Running;
                        }
                        Err(ErrorCode::Eos) => {
                            if let Some(item) = self.reached_end(false) {
                                return self.report(item, slot);
                            }
                        }
                        Err(e) => {
                            watch.error(e);
                            let item = self.error(FlowErrorKind::Sync, e);
                            // Retry from further on, or give up.
                            self.state = match self.dec.offset() {
                                Some(new) if self.recovers() => self.recover_from(Some(new)),
                                Some(new) if new > self.sync => {
                                    self.sync = new;
                                    State::Sync { first: false }
                                }
                                _ => State::Done,
                            };
                            return self.report(item, slot);
                        }
                    }
                }
                State::Error(code) => {
                    if code == ErrorCode::Eos {
                        if let Some(item) = self.reached_end(false) {
                            return self.report(item, slot);
                        }
                        continue;
                    }
                    watch.error(code);
                    let item = self.error(FlowErrorKind::Decode, code);
                    let from = self.dec.offset();
                    self.state = match self.settings.resync {
                        Resync::NextPsb => State::Sync { first: false },
                        Resync::NextIp => State::Resync,
                        Resync::Recover => match self.dec.failed_at_psb() {
                            // The flow went wrong before this PSB: decode from it.
                            Some(psb) if self.resumed.is_none_or(|r| psb > r) => State::Skip {
                                from: from.unwrap_or(psb),
                                at: ResumePoint {
                                    offset: psb,
                                    kind: ResumeKind::Psb,
                                    ip: 0,
                                },
                            },
                            _ => self.recover_from(from),
                        },
                    };
                    return self.report(item, slot);
                }
                State::Resync => {
                    let failed = match self.dec.resync() {
                        Ok(Progress::Done(s)) => {
                            self.status = s;
                            self.state = State::Running;
                            if s.ip_suppressed {
                                return self.report(Item::Disabled, slot);
                            }
                            continue;
                        }
                        Ok(Progress::EventFirst) => match self.resync_event(items, slot) {
                            Ok(true) => return true,
                            Ok(false) => continue,
                            Err(e) => e,
                        },
                        Err(e) => e,
                    };
                    if failed == ErrorCode::Eos && self.recovers() {
                        if let Some(item) = self.reached_end(false) {
                            return self.report(item, slot);
                        }
                        continue;
                    }
                    watch.error(failed);
                    let item = self.error(FlowErrorKind::Resync, failed);
                    self.state = if self.recovers() {
                        self.recover_from(self.dec.offset())
                    } else {
                        State::Sync { first: false }
                    };
                    return self.report(item, slot);
                }
                State::Recover { from, scan } => {
                    let item = self.find_resume(from, scan);
                    return self.report(item, slot);
                }
                State::Skip { from, at } => {
                    self.state = State::Resume(at);
                    let item = Item::Skipped(SkipItem {
                        from,
                        to: at.offset,
                        at: Some(at),
                    });
                    return self.report(item, slot);
                }
                State::Resume(at) => {
                    self.dec.reset();
                    self.resumed = Some(at.offset);
                    self.see_from(at.offset);
                    let failed = match self.dec.resume_at(&at) {
                        Ok(Progress::Done(s)) => {
                            self.status = s;
                            self.state = State::Running;
                            continue;
                        }
                        Ok(Progress::EventFirst) => {
                            // Taken as after a resync (libipt's `pt_blk_resync`).
                            self.state = State::Resync;
                            match self.resync_event(items, slot) {
                                Ok(true) => return true,
                                Ok(false) => continue,
                                Err(e) => e,
                            }
                        }
                        Err(e) => e,
                    };
                    if failed == ErrorCode::Eos {
                        if let Some(item) = self.reached_end(false) {
                            return self.report(item, slot);
                        }
                        continue;
                    }
                    watch.error(failed);
                    let kind = if at.kind == ResumeKind::Psb {
                        FlowErrorKind::Sync
                    } else {
                        FlowErrorKind::Resync
                    };
                    let item = self.error(kind, failed);
                    let next = self.dec.offset().filter(|&o| o > at.offset);
                    self.state = self.recover_from(Some(next.unwrap_or(at.offset + 1)));
                    return self.report(item, slot);
                }
                State::End { tracing } => {
                    self.state = State::Done;
                    if tracing {
                        return self.report(Item::EndOfTrace, slot);
                    }
                }
                State::Done => {
                    return match self.take_counts() {
                        Some(counts) => {
                            *slot = counts;
                            true
                        }
                        None => false,
                    }
                }
            }
        }
    }

    /// During a resync: take the pending event (into `slot` if items are wanted:
    /// `Ok(true)`).
    fn resync_event(&mut self, items: bool, slot: &mut Item) -> Result<bool, ErrorCode> {
        let offset = self.dec.offset().unwrap_or(0);
        let (event, _) = self.dec.event()?;
        if items {
            *slot = Item::Event(EventItem { event, offset });
        }
        Ok(items)
    }

    /// Run `f` with the trial decoder (made on first use, seeing the trace up to
    /// `end`), the main decoder's block decoder, the image, the configuration and
    /// the trial's budget of instructions.
    fn with_trial<R>(
        &mut self,
        end: u64,
        f: impl FnOnce(&mut BlockDecoder<'a>, &BlockDecoder<'a>, &'a Image, &Config, u64) -> R,
    ) -> R {
        let image = self.image;
        let trial = self.trial.get_or_insert_with(|| {
            BlockDecoder::new(self.env.trace, image, &self.env.config, self.env.flow)
        });
        if !std::ptr::eq(self.trial_image, image) {
            trial.set_image(image);
            self.trial_image = image;
        }
        trial.set_end(end);
        let budget = match self.settings.runaway {
            0 => TRIAL_BUDGET,
            n => n.min(TRIAL_BUDGET),
        };
        f(
            trial,
            self.dec.block_decoder(),
            image,
            &self.env.config,
            budget,
        )
    }

    /// Look for where to go on after an error at `from` ([`Resync::Recover`]), from
    /// `scan` on: the skipped trace, or a hole met first.
    fn find_resume(&mut self, from: u64, scan: u64) -> Item {
        let len = self.len();
        // Each resume point further on than the last.
        let mut scan = scan.max(self.resumed.map_or(0, |r| r + 1));
        loop {
            let hole = self.hole_after(scan);
            let end = match hole {
                Some((start, end)) if start <= scan => {
                    scan = end;
                    continue;
                }
                Some((start, _)) => start,
                None => len,
            };
            let trace = self.env.trace.get(..end as usize).unwrap_or_default();
            // What the trial decoder sees (see `see_from`).
            let visible = hole.map_or(len, |(start, end)| (start + recover::PACKET_MAX).min(end));
            let found = self.with_trial(visible, |trial, main, image, config, budget| {
                recover::find_resume(trace, scan, config, |c| {
                    if !main.mode_known() {
                        return None;
                    }
                    if let Some(ip) = c.whole_ip() {
                        return image.find(ip).map(|_| ip);
                    }
                    // A compressed address: try each way to complete it with code of
                    // the image, on the trial decoder, up to the next PSB+.
                    let psb = crate::packet::find_psb_forward(trace, c.offset as usize)?;
                    let psb_end = recover::psb_end(trace, psb as u64, config)?;
                    let mut ips = [0u64; MAX_COMPLETIONS];
                    let n = image.completions(c.raw, c.bits(), &mut ips)?;
                    ips[..n].iter().copied().find(|&ip| {
                        let at = ResumePoint {
                            offset: c.offset,
                            kind: c.kind,
                            ip,
                        };
                        verify(trial, main, &at, psb_end, budget)
                    })
                })
            });
            if let Some(at) = found {
                self.state = State::Resume(at);
                return Item::Skipped(SkipItem {
                    from,
                    to: at.offset,
                    at: Some(at),
                });
            }
            match hole {
                // No resume point before the hole: report it, look after it.
                Some((start, end)) => {
                    self.state = State::Recover { from, scan: end };
                    return self.error_at(FlowErrorKind::Decode, ErrorCode::Hole, Some(start));
                }
                None => {
                    self.state = State::Done;
                    return Item::Skipped(SkipItem {
                        from,
                        to: len,
                        at: None,
                    });
                }
            }
        }
    }
}

/// Most ways to complete a compressed IP packet's address that a resume tries.
const MAX_COMPLETIONS: usize = 8;

/// Most instructions a trial decode from a resume point takes to reach the next PSB+.
const TRIAL_BUDGET: u64 = 1 << 24;

/// Whether decoding from `at` on `trial` (with what `main` knows of the execution
/// mode, address space and time) goes on without an error up to and through the
/// PSB+ that ends at `psb_end`, within `budget` instructions: the flow agrees with
/// all the trace up to there and with the state the PSB+ gives.
fn verify<'a>(
    trial: &mut BlockDecoder<'a>,
    main: &BlockDecoder<'_>,
    at: &ResumePoint,
    psb_end: u64,
    budget: u64,
) -> bool {
    let mut r = trial.resume_like(at, main);
    let mut status = loop {
        match r {
            Ok(Progress::Done(s)) => break s,
            Ok(Progress::EventFirst) => {
                if trial.event().is_err() {
                    return false;
                }
                r = trial.resync();
            }
            Err(_) => return false,
        }
    };
    let mut insns = 0u64;
    let mut block = NO_BLOCK;
    loop {
        // Past the PSB+: its status updates agreed with the flow.
        if trial.offset().is_ok_and(|o| o >= psb_end) && !status.event_pending {
            return true;
        }
        if status.event_pending {
            match trial.event() {
                Ok((_, s)) => status = s,
                Err(_) => return false,
            }
            continue;
        }
        if status.eos || insns > budget {
            return false;
        }
        match trial.next(&mut block) {
            Ok(s) => status = s,
            Err(_) => return false,
        }
        insns += u64::from(block.ninsn);
    }
}

/// The address after the instruction at `ip`, following direct branches (ptxed's
/// way through a block whose instructions the block cache does not list).
fn next_insn_ip(image: &Image, ip: u64, mode: ExecMode) -> Option<u64> {
    let d = insn::decode_at(image, ip, mode).ok()?;
    Some(d.target.unwrap_or_else(|| d.next_ip()))
}

/// What [`block_error_ip`] looks at in a block.
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
    next_insn_ip(image, block.end_ip, block.mode).unwrap_or(block.end_ip)
}

const NO_BLOCK: Block = Block {
    ip: 0,
    end_ip: 0,
    mode: ExecMode::Unknown,
    ninsn: 0,
    speculative: false,
    truncated: false,
    isid: 0,
    class: None,
};

/// The block decoder as a [`Step`].
pub(crate) struct BlockStep<'a> {
    dec: BlockDecoder<'a>,
    block: Block,
    /// Where execution goes on after `block` (see [`BlockItem::next_ip`]).
    next_ip: Option<u64>,
    /// `block`'s instruction addresses, once asked for.
    ips: Vec<u64>,
    ips_error: Option<CodeError>,
    ips_known: bool,
}

impl BlockStep<'_> {
    fn block_ips(&mut self, image: &Image) -> Option<BlockIps<'_>> {
        if !self.ips_known {
            self.ips_known = true;
            self.ips.clear();
            self.ips_error = None;
            let b = self.block;
            let cached = self.dec.block_ips(&mut self.ips) && self.ips.len() == b.ninsn as usize;
            if !cached {
                self.ips.clear();
                if b.ninsn > 0 {
                    let mut ip = b.ip;
                    self.ips.push(ip);
                    while self.ips.len() < b.ninsn as usize {
                        match next_insn_ip(image, ip, b.mode) {
                            Some(n) => {
                                ip = n;
                                self.ips.push(ip);
                            }
                            None => {
                                self.ips_error = Some(CodeError::new(ErrorCode::BadInsn, ip));
                                break;
                            }
                        }
                    }
                    if self.ips_error.is_none() && ip != b.end_ip {
                        self.ips_error = Some(CodeError::new(ErrorCode::NoSync, ip));
                    }
                }
            }
        }
        Some(BlockIps {
            ips: &self.ips,
            error: self.ips_error,
        })
    }
}

impl<'a> Step<'a> for BlockStep<'a> {
    /// With what an error right after it would blame ([`block_error_ip`]).
    type Mark = (Checkpoint<'a>, (bool, u64, ExecMode));
    const BLOCKS: bool = true;

    fn new(trace: &'a [u8], image: &'a Image, config: &Config, flow: FlowOptions) -> Self {
        BlockStep {
            dec: BlockDecoder::new(trace, image, config, flow),
            block: NO_BLOCK,
            next_ip: None,
            ips: Vec::new(),
            ips_error: None,
            ips_known: false,
        }
    }

    fn sync_forward(&mut self) -> Result<Status, ErrorCode> {
        self.dec.sync_forward()
    }

    fn sync_set(&mut self, offset: u64) -> Result<Status, ErrorCode> {
        self.dec.sync_set(offset)
    }

    fn resync(&mut self) -> Result<Progress, ErrorCode> {
        self.dec.resync()
    }

    #[inline]
    fn offset(&self) -> Option<u64> {
        self.dec.offset().ok()
    }

    fn event(&mut self) -> Result<(Event, Status), ErrorCode> {
        self.dec.event()
    }

    fn reset(&mut self) {
        self.block.ip = 0;
        self.block.ninsn = 0;
    }

    fn error_ip(&self, image: &Image, code: ErrorCode) -> u64 {
        block_error_ip(image, &self.block, code)
    }

    #[inline]
    fn skip(&mut self, tally: &mut Tally) {
        let (insns, blocks) = self.dec.skip_blocks();
        tally.insns += insns;
        tally.blocks += blocks;
    }

    #[inline]
    fn step(&mut self, tally: &mut Tally) -> (bool, Result<Progress, ErrorCode>) {
        let r = self.dec.next(&mut self.block);
        tally.insns += u64::from(self.block.ninsn);
        tally.blocks += 1;
        self.ips_known = false;
        self.next_ip = match r {
            Ok(s) if !s.ip_suppressed => Some(self.dec.ip()),
            _ => None,
        };
        (true, r.map(Progress::Done))
    }

    #[inline]
    fn item(&self, offset: u64, slot: &mut Item) {
        *slot = Item::Block(BlockItem {
            block: self.block,
            offset,
            time: self.dec.time(),
            next_ip: self.next_ip,
        });
    }

    fn mark(&self) -> Option<Self::Mark> {
        Some((self.dec.checkpoint(), blame(&self.block)))
    }

    fn reached(&self, mark: &Self::Mark) -> bool {
        blame(&self.block) == mark.1 && self.dec.reached(&mark.0)
    }

    fn set_end(&mut self, end: u64) {
        self.dec.set_end(end);
    }

    fn resume_at(&mut self, at: &ResumePoint) -> Result<Progress, ErrorCode> {
        self.dec.resume_at(at)
    }

    #[inline]
    fn trace_position(&self) -> u64 {
        self.dec.trace_position()
    }

    fn failed_at_psb(&self) -> Option<u64> {
        self.dec.failed_at_psb()
    }

    fn block_decoder(&self) -> &BlockDecoder<'a> {
        &self.dec
    }

    fn set_image(&mut self, image: &'a Image) {
        self.dec.set_image(image);
        self.ips_known = false;
    }
}

/// The instruction decoder as a [`Step`].
pub(crate) struct InsnStep<'a> {
    dec: InsnDecoder<'a>,
    insn: InsnInfo,
}

const NO_INSN: InsnInfo = InsnInfo {
    ip: 0,
    size: 0,
    mode: ExecMode::Unknown,
    speculative: false,
    isid: 0,
    class: None,
};

impl<'a> Step<'a> for InsnStep<'a> {
    /// With the last instruction, which an error right after it would blame.
    type Mark = (InsnCheckpoint<'a>, InsnInfo);
    const BLOCKS: bool = false;

    fn new(trace: &'a [u8], image: &'a Image, config: &Config, flow: FlowOptions) -> Self {
        InsnStep {
            dec: InsnDecoder::new(trace, image, config, flow),
            insn: NO_INSN,
        }
    }

    fn sync_forward(&mut self) -> Result<Status, ErrorCode> {
        self.dec.sync_forward()
    }

    fn sync_set(&mut self, offset: u64) -> Result<Status, ErrorCode> {
        self.dec.sync_set(offset)
    }

    fn resync(&mut self) -> Result<Progress, ErrorCode> {
        self.dec.resync()
    }

    #[inline]
    fn offset(&self) -> Option<u64> {
        self.dec.offset().ok()
    }

    fn event(&mut self) -> Result<(Event, Status), ErrorCode> {
        self.dec.event()
    }

    fn reset(&mut self) {
        self.insn.ip = 0;
        self.insn.class = None;
    }

    fn error_ip(&self, image: &Image, code: ErrorCode) -> u64 {
        let insn = &self.insn;
        if code == ErrorCode::BadQuery || insn.class.is_none() {
            return insn.ip;
        }
        next_insn_ip(image, insn.ip, insn.mode).unwrap_or(insn.ip)
    }

    #[inline]
    fn skip(&mut self, tally: &mut Tally) {
        tally.insns += self.dec.skip_blocks();
    }

    #[inline]
    fn step(&mut self, tally: &mut Tally) -> (bool, Result<Progress, ErrorCode>) {
        match self.dec.next(&mut self.insn) {
            Ok(Progress::EventFirst) => (false, Ok(Progress::EventFirst)),
            // Nothing decoded before the error.
            Err(e) if self.insn.class.is_none() => (false, Err(e)),
            r => {
                tally.insns += 1;
                (true, r)
            }
        }
    }

    #[inline]
    fn item(&self, offset: u64, slot: &mut Item) {
        *slot = Item::Insn(InsnItem {
            insn: self.insn,
            offset,
            time: self.dec.block_decoder().time(),
        });
    }

    fn mark(&self) -> Option<Self::Mark> {
        Some((self.dec.checkpoint()?, self.insn))
    }

    fn reached(&self, mark: &Self::Mark) -> bool {
        self.insn == mark.1 && self.dec.reached(&mark.0)
    }

    fn set_end(&mut self, end: u64) {
        self.dec.set_end(end);
    }

    fn resume_at(&mut self, at: &ResumePoint) -> Result<Progress, ErrorCode> {
        self.dec.resume_at(at)
    }

    #[inline]
    fn trace_position(&self) -> u64 {
        self.dec.block_decoder().trace_position()
    }

    fn failed_at_psb(&self) -> Option<u64> {
        self.dec.block_decoder().failed_at_psb()
    }

    fn block_decoder(&self) -> &BlockDecoder<'a> {
        self.dec.block_decoder()
    }

    fn set_image(&mut self, image: &'a Image) {
        self.dec.set_image(image);
    }
}
