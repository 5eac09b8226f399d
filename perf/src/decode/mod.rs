//! perf's Intel PT decoder: a queue's trace and its code → the states perf's
//! intel-pt-decoder.c hands to intel-pt.c, one at a time.
//!
//! perf does not decode the way libipt does, and its samples show it: it
//! synchronizes at a PSB and then at the next IP it can trust, it reports a branch
//! for every taken branch (direct jumps and calls included), it times each state
//! from the last timing packet walked past (TSC, MTC with TMA, CYC with CBR), it
//! samples instructions by counting them as it walks, and after an error it goes
//! on at the next packet with a full IP. Samples equal to perf's come from the same
//! state sequence, so this module follows perf's state machine packet by packet:
//! [`Decoder::decode`] returns the next [`State`], with perf's fields (the sample
//! type bits, from/to IPs, the instruction that branched, counts, timestamps).
//!
//! The instruction walk is the caller's ([`Walker`]): it knows the code of the
//! thread that runs, which changes over the trace. The trace comes as perf's
//! buffers ([`Buffer`]), each AUXTRACE piece of the queue in order.
//!
//! One module per concern: [`packet`] (perf's packet view over pt-decoder's packets),
//! [`insn`] (perf's view of an instruction), `sync` (trace data, PSB+ and
//! synchronization), `timing`, `fup_tip` (FUP, TIP, TNT and the events they bind),
//! `sampling` (instruction periods), `fast_path` ([`Decoder::take_run`]); this module
//! holds the state machine's types, the main loop ([`Decoder::decode`]) and the
//! instruction walk. Unit tests per concern are in `tests/`.
//!
//! Not modelled: VM time correlation, PEBS-via-PT block items (their packets are
//! walked past; no items are gathered), PTWRITE emulated by JMPs.

mod fast_path;
mod fup_tip;
pub mod insn;
pub mod packet;
mod sampling;
mod sync;
mod timing;

pub use timing::tsc_8b;
#[cfg(test)]
use timing::{add_cycles, multdiv};
use timing::{lower_power_of_2, CYC_ENABLE, CYC_THRESHOLD, CYC_THRESHOLD_SHIFT};

use insn::{Branch, Op, PerfInsn, INSN_BUF};
use packet::{Kind, Pkt};
use pt_encoder::ExecMode;

/// Sample type bits of a [`State`] (perf's `enum intel_pt_sample_type`).
#[allow(missing_docs)]
pub mod ty {
    pub const BRANCH: u32 = 1 << 0;
    pub const INSTRUCTION: u32 = 1 << 1;
    pub const TRANSACTION: u32 = 1 << 2;
    pub const PTW: u32 = 1 << 3;
    pub const MWAIT_OP: u32 = 1 << 4;
    pub const PWR_ENTRY: u32 = 1 << 5;
    pub const EX_STOP: u32 = 1 << 6;
    pub const PWR_EXIT: u32 = 1 << 7;
    pub const CBR_CHG: u32 = 1 << 8;
    pub const TRACE_BEGIN: u32 = 1 << 9;
    pub const TRACE_END: u32 = 1 << 10;
    pub const BLK_ITEMS: u32 = 1 << 11;
    pub const PSB_EVT: u32 = 1 << 12;
    pub const EVT: u32 = 1 << 13;
    pub const IFLAG_CHG: u32 = 1 << 14;
}

/// Flag bits of a [`State`] (perf's `INTEL_PT_IN_TX`, …).
#[allow(missing_docs)]
pub mod sflags {
    pub const IN_TX: u32 = 1 << 0;
    pub const ABORT_TX: u32 = 1 << 1;
    pub const ASYNC: u32 = 1 << 2;
    pub const FUP_IP: u32 = 1 << 3;
    pub const SAMPLE_IPC: u32 = 1 << 4;
}

/// The errors a state can carry (perf's `INTEL_PT_ERR_*`; the numbers are perf's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Error {
    /// Memory allocation failed.
    NoMem = 1,
    /// Internal error.
    Intern = 2,
    /// Bad packet.
    BadPkt = 3,
    /// No more data.
    NoData = 4,
    /// Failed to get instruction.
    NoInsn = 5,
    /// Trace doesn't match instruction.
    Mismat = 6,
    /// Overflow packet.
    Ovr = 7,
    /// Lost trace data.
    Lost = 8,
    /// Unknown error.
    Unk = 9,
    /// Never-ending loop.
    NeLoop = 10,
    /// Broken emulated ptwrite.
    Eptw = 11,
}

impl Error {
    /// perf's message (`intel_pt__strerror`).
    pub fn message(self) -> &'static str {
        match self {
            Error::NoMem => "Memory allocation failed",
            Error::Intern => "Internal error",
            Error::BadPkt => "Bad packet",
            Error::NoData => "No more data",
            Error::NoInsn => "Failed to get instruction",
            Error::Mismat => "Trace doesn't match instruction",
            Error::Ovr => "Overflow packet",
            Error::Lost => "Lost trace data",
            Error::Unk => "Unknown error!",
            Error::NeLoop => "Never-ending loop (refer perf config intel-pt.max-loops)",
            Error::Eptw => "Broken emulated ptwrite",
        }
    }

    /// perf's error number.
    pub fn code(self) -> u32 {
        self as u32
    }
}

/// How instructions are sampled (perf's `enum intel_pt_period_type`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PeriodType {
    /// Not at all.
    #[default]
    None,
    /// Every `period` instructions.
    Instructions,
    /// Every `period` TSC ticks (rounded down to a power of 2).
    Ticks,
    /// At every MTC.
    Mtc,
}

/// What the decoder is set up with (perf's `struct intel_pt_params`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Params {
    /// Returns may be compressed into TNT bits.
    pub return_compression: bool,
    /// Branch tracing is on (`branch` config term).
    pub branch_enable: bool,
    /// IA32_RTIT_CTL as recorded (for the CYC threshold).
    pub ctl: u64,
    /// The instruction sampling period.
    pub period: u64,
    /// How instructions are sampled.
    pub period_type: PeriodType,
    /// The maximum non-turbo ratio (TSC ticks per 100 MHz).
    pub max_non_turbo_ratio: u32,
    /// MTC period (log2 of CTC ticks per MTC).
    pub mtc_period: u32,
    /// TSC:CTC ratio numerator.
    pub tsc_ctc_ratio_n: u32,
    /// TSC:CTC ratio denominator.
    pub tsc_ctc_ratio_d: u32,
    /// A FUP may carry the next instruction's IP (an erratum of some Atoms).
    pub fup_with_nlip: bool,
    /// perf's 'q' (1: hop from FUP/TIP to FUP/TIP; 2: leap from PSB to PSB).
    pub quick: u32,
    /// The first timestamp of the session.
    pub first_timestamp: u64,
    /// Unconditional branches without a packet before a never-ending loop is
    /// assumed (0: perf's default, 100000).
    pub max_loops: u32,
}

/// One buffer of trace: an AUXTRACE piece of the queue (perf's `struct
/// intel_pt_buffer`).
#[derive(Clone, Copy, Debug)]
pub struct Buffer<'a> {
    /// The trace bytes.
    pub data: &'a [u8],
    /// It continues the buffer before (else decoding starts anew at a PSB).
    pub consecutive: bool,
    /// The TSC when the data was captured (the AUXTRACE reference).
    pub reference: u64,
    /// The buffer's number + 1, which marks discontinuities for the thread stack.
    pub trace_nr: u64,
}

/// Why a walk over the code failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkError {
    /// No code there (perf's `-EINVAL`): reported as "Failed to get instruction".
    NoCode,
    /// The code's file failed before and was reported (perf's `-ENOENT`): the
    /// decoder resynchronizes without reporting it again.
    Known,
}

/// The code, as perf's decoder walks it (`intel_pt_walk_next_insn` and the filter
/// check `intel_pt_pgd_ip`).
pub trait Walker {
    /// Walks from `*ip`: instructions up to and including the first branch, or up to
    /// `to_ip` (not included; `insn.length` is then 0), or `max_insn_cnt`
    /// instructions (if not 0; `*ip` is then the last one walked). `*ip` is left at
    /// the branch (or the last instruction); the count of instructions walked is
    /// returned, and `insn` describes the last one. `nr`: VMX non-root.
    fn walk(
        &mut self,
        insn: &mut PerfInsn,
        ip: &mut u64,
        to_ip: u64,
        max_insn_cnt: u64,
        nr: bool,
    ) -> Result<u64, WalkError>;

    /// Whether tracing stopped at `ip` because of an address filter (perf asks only
    /// when the recording had filters).
    fn pgd_ip(&mut self, _ip: u64) -> Option<bool> {
        None
    }

    /// The code from here on runs in `mode` (MODE.Exec): walks decode it as such.
    /// The decoder says so before the first walk of each [`Decoder::decode`] or
    /// [`Decoder::take_run`] call and at every change; a walker of 64-bit code only
    /// may ignore it.
    fn set_exec_mode(&mut self, _mode: ExecMode) {}

    /// Walks the run of code from `ip` up to and including the branch that ends
    /// it, for [`Decoder::take_run`], describing it in `block`; `false` (and
    /// nothing walked) when the walker cannot tell cheaply (the run does not end
    /// in a branch within one image section, or there is no code).
    fn next_block(&mut self, _ip: u64, _block: &mut RunBlock) -> bool {
        false
    }

    /// Takes back the walk of `block` (the last [`Walker::next_block`]) but for
    /// its first `count` instructions: the next walk goes on after them.
    fn stop_in_block(&mut self, _block: &RunBlock, _count: u32) {}

    /// Follows TNT bits through conditional branches from `walk.ip` (for
    /// [`Decoder::take_run`]): block by block while each ends in a conditional
    /// branch, a bit each, as long as bits are left and `out` has fewer than
    /// `max` steps; the states perf returns for them (see [`TntWalk`]) into
    /// `out`. Stops before anything else, leaving it to the next walk.
    fn follow_tnt(&mut self, _walk: &mut TntWalk<'_>, _max: usize, _out: &mut Vec<Step>) {}

    /// The `n` plain instructions at `at` ([`RunBlock::plain_at`], [`Step::plain_at`]).
    fn plain_insns(&self, _at: [u32; 2], _n: u32) -> &[PlainInsn] {
        &[]
    }
}

/// A run of code that ends in a branch ([`Walker::next_block`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct RunBlock {
    /// Its instructions, the branch included.
    pub ninsn: u32,
    /// The branch's IP.
    pub last_ip: u64,
    /// The branch.
    pub last: PerfInsn,
    /// Where the walker keeps it (the walker's own).
    pub handle: [u32; 2],
    /// Where the walker keeps its instructions (for [`Step::plain_at`]).
    pub plain_at: [u32; 2],
}

impl Step {
    /// Instructions walked before the step's plain instructions.
    pub fn tot_before(&self) -> u64 {
        self.tot_insn_cnt - u64::from(self.plain) - u64::from(self.type_ != 0)
    }
}

/// A walk through a TNT packet ([`Walker::follow_tnt`]), perf's way: a
/// conditional branch takes a bit, a return takes a bit and its target from the
/// return stack (compressed), a direct jump or call goes on (a call pushes its
/// return address).
#[derive(Debug, Default)]
pub struct TntWalk<'s> {
    /// Where the walk is.
    pub ip: u64,
    /// The bits left, the next one the highest.
    pub payload: u64,
    /// How many are left.
    pub count: u32,
    /// A bit was taken in this packet (perf's TNT_CONT state).
    pub cont: bool,
    /// Every instruction is a state (else only branches are).
    pub every_insn: bool,
    /// Returns may be compressed.
    pub return_compression: bool,
    /// A branch from here or above to below is not followed.
    pub kernel_start: u64,
    /// Unconditional branches in a row (perf's loop check; one is allowed).
    pub no_progress: u32,
    /// perf's return stack.
    pub stack: Option<&'s mut Vec<u64>>,
    /// The last return address taken from it (0: none).
    pub ret_addr: u64,
    /// Instructions walked in all.
    pub tot: u64,
    /// Not 0 once a branch was followed.
    pub blocks: u32,
    /// A state came out at which perf takes the sample time anew (or the last
    /// bit went to a branch not taken without a state).
    pub updated: bool,
    /// The trace after the TNT packet: when its bits run out, the walk goes on
    /// with the short TNT packets that follow it (PADs between are skipped),
    /// as perf would get them one by one with nothing happening in between.
    pub ahead: &'s [u8],
    /// Bytes of `ahead` taken (up to the end of the last TNT packet taken).
    pub taken: usize,
    /// The last branch walked, if it made no state (a branch not taken when
    /// only branches are states): its operation, length and bytes, which perf's
    /// state keeps from the last instruction walked.
    pub tail: Option<(Op, u8, [u8; INSN_BUF])>,
}

/// One plain instruction (a [`Step`]'s, from the walker).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlainInsn {
    /// Its IP.
    pub ip: u64,
    /// Its length.
    pub len: u8,
    /// Its bytes (zero after `len`).
    pub bytes: [u8; INSN_BUF],
}

/// States of a run ([`Decoder::take_run`]): the fields that change from one
/// state of a run to the next (every other field is the run's last state's), for
/// `plain` plain instructions, each a state of its own, and then, if `type_`
/// is not 0, a branch (or the instruction at which it is sampled).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// Plain instructions, each a state (when every instruction is sampled).
    pub plain: u32,
    /// Where the walker keeps them (the walker's own).
    pub plain_at: [u32; 2],
    /// The branch's IP.
    pub from_ip: u64,
    /// The branch target (0: none, a plain instruction or a branch not taken).
    pub to_ip: u64,
    /// Instructions walked up to and including the branch.
    pub tot_insn_cnt: u64,
    /// The branch state's sample type bits ([`ty::INSTRUCTION`], [`ty::BRANCH`];
    /// 0: no branch state, the step is its plain instructions).
    pub type_: u32,
    /// The operation.
    pub op: Op,
    /// Its length.
    pub len: u8,
    /// Its bytes.
    pub insn: [u8; INSN_BUF],
}

/// One step of the decode, as perf's `struct intel_pt_state`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct State {
    /// Sample type bits ([`ty`]).
    pub type_: u32,
    /// The branch source is in VMX non-root.
    pub from_nr: bool,
    /// The branch target is in VMX non-root.
    pub to_nr: bool,
    /// RFLAGS.IF before.
    pub from_iflag: bool,
    /// RFLAGS.IF after.
    pub to_iflag: bool,
    /// The error, if this state reports one.
    pub err: Option<Error>,
    /// The source IP (0: none, e.g. a trace begin).
    pub from_ip: u64,
    /// The target IP (0: none, e.g. a trace end).
    pub to_ip: u64,
    /// Instructions walked so far.
    pub tot_insn_cnt: u64,
    /// Cycles counted so far, as sampled.
    pub tot_cyc_cnt: u64,
    /// Cycles at the sample time.
    pub cycles: u64,
    /// The time (TSC).
    pub timestamp: u64,
    /// The time estimated from the instructions since the timestamp.
    pub est_timestamp: u64,
    /// The trace number (changes at a discontinuity).
    pub trace_nr: u64,
    /// PTWRITE payload.
    pub ptw_payload: u64,
    /// MWAIT payload.
    pub mwait_payload: u64,
    /// PWRE payload.
    pub pwre_payload: u64,
    /// PWRX payload.
    pub pwrx_payload: u64,
    /// CBR packet payload.
    pub cbr_payload: u64,
    /// Offset of the PSB (in the queue's trace).
    pub psb_offset: u64,
    /// Core:bus ratio.
    pub cbr: u32,
    /// Flag bits ([`sflags`]).
    pub flags: u32,
    /// The operation of the instruction that branched.
    pub insn_op: Op,
    /// Its length.
    pub insn_len: u8,
    /// Its bytes.
    pub insn: [u8; INSN_BUF],
    /// CFE type.
    pub cfe_type: u32,
    /// CFE vector.
    pub cfe_vector: u32,
    /// Event data (EVD) items of the event.
    pub evd_cnt: u32,
    /// The EVD items: (type, payload).
    pub evd: [(u32, u64); MAX_EVDS],
}

/// EVD items kept for one event (perf keeps 64).
pub const MAX_EVDS: usize = 8;

/// Where the packet walk is (perf's `enum intel_pt_pkt_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PktState {
    NoPsb,
    NoIp,
    ErrResync,
    InSync,
    TntCont,
    Tnt,
    Tip,
    TipPgd,
    Fup,
    FupNoTip,
    FupInPsb,
    Resample,
}

impl PktState {
    /// Whether a state returned in this packet state takes the current time.
    fn sample_time(self) -> bool {
        !matches!(
            self,
            PktState::Tnt
                | PktState::Tip
                | PktState::TipPgd
                | PktState::Fup
                | PktState::FupNoTip
                | PktState::FupInPsb
        )
    }
}

/// Why a step stopped (perf's negative errno values, and INTEL_PT_RETURN).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// Go on (`-EAGAIN`).
    Again,
    /// Start over in the new packet state (`-ENOLINK`).
    Link,
    /// No more data (`-ENODATA`).
    NoData,
    /// Bad packet (`-EBADMSG`).
    BadMsg,
    /// No instruction (`-EILSEQ`).
    NoInsn,
    /// Trace and code disagree (`-ENOENT`).
    Mismatch,
    /// OVF (`-EOVERFLOW`).
    Overflow,
    /// Never-ending loop (`-ELOOP`).
    Loop,
    /// Broken emulated PTWRITE (`-ECONNRESET`).
    Eptw,
    /// Internal error (`-ENOSYS`).
    Bug,
}

impl Stop {
    fn error(self) -> Error {
        match self {
            Stop::BadMsg => Error::BadPkt,
            Stop::NoData => Error::NoData,
            Stop::NoInsn => Error::NoInsn,
            Stop::Mismatch => Error::Mismat,
            Stop::Overflow => Error::Ovr,
            Stop::Loop => Error::NeLoop,
            Stop::Eptw => Error::Eptw,
            Stop::Bug => Error::Intern,
            Stop::Again | Stop::Link => Error::Unk,
        }
    }
}

type Res<T = ()> = Result<T, Stop>;

/// What a walk over instructions ended with (perf's 0 and INTEL_PT_RETURN).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Walked {
    /// A branch to deal with (the instruction is in the walk's `PerfInsn`).
    Branch,
    /// A state to return (an instruction sample or a direct branch).
    Return,
}

/// perf's return stack for compressed returns (`intel_pt_stack`, in blocks).
///
/// Not `pt_decoder::flow::RetStack`: perf's stack has no depth limit and a pop
/// of an empty stack yields address 0 (the decoder then reports the bad
/// return where it lands), where libipt's is a ring of 64 that drops the
/// oldest entry and reports an error on an empty pop. The two decoders must
/// differ exactly there.
#[derive(Default)]
struct RetStack {
    ips: Vec<u64>,
}

impl RetStack {
    fn push(&mut self, ip: u64) {
        self.ips.push(ip);
    }
    fn pop(&mut self) -> u64 {
        self.ips.pop().unwrap_or(0)
    }
    fn clear(&mut self) {
        self.ips.clear();
    }
}

/// The default limit of unconditional branches without a packet.
const MAX_LOOPS: u32 = 100_000;

/// TSC packets may slip this far behind MTC time.
const TSC_SLIP: u64 = 0x10000;

/// What the decoder asks of its caller between states.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Position {
    /// Offset of the packet being decoded, from the start of the queue's trace.
    pub pos: u64,
    /// The decoder's IP.
    pub ip: u64,
}

/// The decoder of one queue: see the [module docs](self).
pub struct Decoder<'a> {
    p: Params,
    bufs: Vec<Buffer<'a>>,
    next_buf_idx: usize,
    /// The current buffer and where its unread bytes start.
    data: &'a [u8],
    at: usize,
    /// A PSB split over two buffers: its bytes stand for the current packet and
    /// the next buffer goes on at `split_rest`.
    split_psb: bool,
    split_rest: Option<(&'a [u8], usize)>,
    pd: Option<pt_decoder::PacketDecoder<'a>>,

    state: State,
    pkt_state: PktState,
    packet: Pkt,
    tnt: Pkt,
    pkt_step: usize,
    pkt_len: usize,
    last_packet_type: Kind,

    mtc_insn: bool,
    pge: bool,
    have_tma: bool,
    have_cyc: bool,
    fixup_last_mtc: bool,
    have_last_ip: bool,
    in_psb: bool,
    hop: bool,
    leap: bool,
    emulated_ptwrite: bool,
    nr: bool,
    next_nr: bool,
    iflag: bool,
    next_iflag: bool,
    pos: u64,
    last_ip: u64,
    ip: u64,
    pip_payload: u64,
    timestamp: u64,
    tsc_timestamp: u64,
    ref_timestamp: u64,
    buf_timestamp: u64,
    sample_timestamp: u64,
    ret_addr: u64,
    ctc_timestamp: u64,
    ctc_delta: u64,
    cycle_cnt: u64,
    cyc_ref_timestamp: u64,
    last_ctc: u64,
    last_mtc: u32,
    tsc_ctc_ratio_n: u32,
    tsc_ctc_ratio_d: u32,
    tsc_ctc_mult: u32,
    ctc_rem_mask: u32,
    mtc_shift: u32,
    stack: RetStack,
    cbr: u32,
    cbr_seen: u32,
    max_non_turbo_ratio_fp: f64,
    cbr_cyc_to_tsc: f64,
    calc_cyc_to_tsc: f64,
    have_calc_cyc_to_tsc: bool,
    period: u64,
    period_type: PeriodType,
    tot_insn_cnt: u64,
    period_insn_cnt: u64,
    period_mask: u64,
    period_ticks: u64,
    last_masked_timestamp: u64,
    tot_cyc_cnt: u64,
    sample_tot_cyc_cnt: u64,
    base_cyc_cnt: u64,
    cyc_cnt_timestamp: u64,
    cyc_threshold: u64,
    tsc_to_cyc: f64,
    continuous_period: bool,
    overflow: bool,
    set_fup_tx_flags: bool,
    set_fup_ptw: bool,
    set_fup_mwait: bool,
    set_fup_pwre: bool,
    set_fup_exstop: bool,
    set_fup_bep: bool,
    set_fup_cfe_ip: bool,
    set_fup_cfe: bool,
    set_fup_mode_exec: bool,
    /// The execution mode of the code walked (from MODE.Exec; 64-bit until one says
    /// otherwise).
    exec_mode: ExecMode,
    /// A MODE.Exec outside PSB+: the mode of the TIP's target that follows it.
    pending_exec_mode: Option<ExecMode>,
    /// The mode the walker of this call was told ([`Walker::set_exec_mode`]).
    told_exec_mode: Option<ExecMode>,
    sample_cyc: bool,
    fup_tx_flags: u32,
    tx_flags: u32,
    fup_ptw_payload: u64,
    fup_mwait_payload: u64,
    fup_pwre_payload: u64,
    cbr_payload: u64,
    timestamp_insn_cnt: u64,
    sample_insn_cnt: u64,
    stuck_ip: u64,
    fup_cfe_pkt: Pkt,
    max_loops: u32,
    no_progress: u32,
    stuck_ip_prd: u32,
    stuck_ip_cnt: u32,
    psb_ip: u64,
    evd_cnt: u32,
    evd: [(u32, u64); MAX_EVDS],
}

/// The full IP of an IP packet after `last_ip` (perf's `intel_pt_calc_ip`).
fn calc_ip(p: &Pkt, last_ip: u64) -> u64 {
    match p.count {
        1 => (last_ip & 0xffff_ffff_ffff_0000) | p.payload,
        2 => (last_ip & 0xffff_ffff_0000_0000) | p.payload,
        3 => {
            let mut ip = p.payload;
            if ip & 0x8000_0000_0000 != 0 {
                ip |= 0xffff_0000_0000_0000;
            }
            ip
        }
        4 => (last_ip & 0xffff_0000_0000_0000) | p.payload,
        6 => p.payload,
        _ => 0,
    }
}

const BIT63: u64 = 1 << 63;

impl<'a> Decoder<'a> {
    /// A decoder of `bufs` (the queue's buffers in order) with `params`.
    pub fn new(params: Params, bufs: Vec<Buffer<'a>>) -> Self {
        let mut d = Decoder {
            p: params,
            bufs,
            next_buf_idx: 0,
            data: &[],
            at: 0,
            split_psb: false,
            split_rest: None,
            pd: None,
            state: State::default(),
            pkt_state: PktState::NoPsb,
            packet: Pkt {
                kind: Kind::Pad,
                count: 0,
                payload: 0,
            },
            tnt: Pkt::BAD,
            pkt_step: 0,
            pkt_len: 0,
            last_packet_type: Kind::Pad,
            mtc_insn: false,
            pge: false,
            have_tma: false,
            have_cyc: false,
            fixup_last_mtc: false,
            have_last_ip: false,
            in_psb: false,
            hop: params.quick >= 1,
            leap: params.quick >= 2,
            emulated_ptwrite: false,
            nr: false,
            next_nr: false,
            iflag: false,
            next_iflag: false,
            pos: 0,
            last_ip: 0,
            ip: 0,
            pip_payload: 0,
            timestamp: 0,
            tsc_timestamp: 0,
            ref_timestamp: 0,
            buf_timestamp: 0,
            sample_timestamp: 0,
            ret_addr: 0,
            ctc_timestamp: 0,
            ctc_delta: 0,
            cycle_cnt: 0,
            cyc_ref_timestamp: 0,
            last_ctc: 0,
            last_mtc: 0,
            tsc_ctc_ratio_n: params.tsc_ctc_ratio_n,
            tsc_ctc_ratio_d: params.tsc_ctc_ratio_d,
            tsc_ctc_mult: 0,
            ctc_rem_mask: 0,
            mtc_shift: params.mtc_period,
            stack: RetStack::default(),
            cbr: 0,
            cbr_seen: 0,
            max_non_turbo_ratio_fp: f64::from(params.max_non_turbo_ratio),
            cbr_cyc_to_tsc: 0.0,
            calc_cyc_to_tsc: 0.0,
            have_calc_cyc_to_tsc: false,
            period: params.period,
            period_type: params.period_type,
            tot_insn_cnt: 0,
            period_insn_cnt: 0,
            period_mask: 0,
            period_ticks: 0,
            last_masked_timestamp: 0,
            tot_cyc_cnt: 0,
            sample_tot_cyc_cnt: 0,
            base_cyc_cnt: 0,
            cyc_cnt_timestamp: 0,
            cyc_threshold: 0,
            tsc_to_cyc: 0.0,
            continuous_period: false,
            overflow: false,
            set_fup_tx_flags: false,
            set_fup_ptw: false,
            set_fup_mwait: false,
            set_fup_pwre: false,
            set_fup_exstop: false,
            set_fup_bep: false,
            set_fup_cfe_ip: false,
            set_fup_cfe: false,
            set_fup_mode_exec: false,
            exec_mode: ExecMode::Bit64,
            pending_exec_mode: None,
            told_exec_mode: None,
            sample_cyc: false,
            fup_tx_flags: 0,
            tx_flags: 0,
            fup_ptw_payload: 0,
            fup_mwait_payload: 0,
            fup_pwre_payload: 0,
            cbr_payload: 0,
            timestamp_insn_cnt: 0,
            sample_insn_cnt: 0,
            stuck_ip: 0,
            fup_cfe_pkt: Pkt::BAD,
            max_loops: if params.max_loops == 0 {
                MAX_LOOPS
            } else {
                params.max_loops
            },
            no_progress: 0,
            stuck_ip_prd: 0,
            stuck_ip_cnt: 0,
            psb_ip: 0,
            evd_cnt: 0,
            evd: [(0, 0); MAX_EVDS],
        };
        if d.p.ctl & CYC_ENABLE != 0 {
            d.cyc_threshold = (d.p.ctl & CYC_THRESHOLD) >> CYC_THRESHOLD_SHIFT;
        }
        if d.period_type == PeriodType::Ticks {
            let period = lower_power_of_2(d.period);
            d.period_mask = !(period.wrapping_sub(1));
            d.period_ticks = period;
        }
        d.ctc_rem_mask = (1u32 << d.mtc_shift.min(31)) - 1;
        if d.tsc_ctc_ratio_n == 0 {
            d.tsc_ctc_ratio_d = 0;
        }
        if d.tsc_ctc_ratio_d != 0 && d.tsc_ctc_ratio_n % d.tsc_ctc_ratio_d == 0 {
            d.tsc_ctc_mult = d.tsc_ctc_ratio_n / d.tsc_ctc_ratio_d;
        }
        d
    }

    /// Sets the session's first timestamp.
    pub fn set_first_timestamp(&mut self, t: u64) {
        self.p.first_timestamp = t;
    }

    /// Where the decoder is.
    pub fn position(&self) -> Position {
        Position {
            pos: self.pos,
            ip: self.ip,
        }
    }

    /// The last state returned.
    pub fn state(&self) -> &State {
        &self.state
    }

    // ---- the instruction walk ---------------------------------------------------

    /// perf's `intel_pt_walk_insn`.
    fn walk_insn(&mut self, code: &mut dyn Walker, insn: &mut PerfInsn, ip: u64) -> Res<Walked> {
        self.mtc_insn = true;
        let max = self.next_sample();
        let mut cur = self.ip;
        insn.length = 0;
        insn.op = Op::Other;
        self.tell_exec_mode(code);
        let r = code.walk(insn, &mut cur, ip, max, self.state.to_nr);
        self.ip = cur;
        let cnt = match r {
            Ok(n) => n,
            Err(e) => {
                self.no_progress = 0;
                self.pkt_state = PktState::NoIp;
                return Err(match e {
                    WalkError::Known => Stop::Link,
                    WalkError::NoCode => Stop::NoInsn,
                });
            }
        };
        self.count_insns(cnt);

        let result: Res<Walked>;
        'out: {
            if ip != 0 && self.ip == ip {
                result = Err(Stop::Again);
                break 'out;
            }
            if max != 0 && cnt >= max {
                self.sample_insn();
            }
            if insn.branch == Branch::None {
                self.state.type_ = ty::INSTRUCTION;
                self.state.from_ip = self.ip;
                self.state.to_ip = 0;
                self.ip = self.ip.wrapping_add(u64::from(insn.length));
                result = Ok(Walked::Return);
                break 'out;
            }
            if insn.op == Op::Call {
                // Zero-length calls are left out.
                if insn.branch != Branch::Unconditional || insn.rel != 0 {
                    self.stack
                        .push(self.ip.wrapping_add(u64::from(insn.length)));
                }
            } else if insn.op == Op::Ret {
                self.ret_addr = self.stack.pop();
            }
            if insn.branch == Branch::Unconditional {
                let cnt = self.no_progress;
                self.no_progress += 1;
                self.state.from_ip = self.ip;
                self.ip = self
                    .ip
                    .wrapping_add(u64::from(insn.length))
                    .wrapping_add(insn.rel as i64 as u64);
                self.state.to_ip = self.ip;
                let mut r = Ok(Walked::Return);
                if cnt != 0 {
                    if cnt == 1 {
                        self.stuck_ip = self.state.to_ip;
                        self.stuck_ip_prd = 1;
                        self.stuck_ip_cnt = 1;
                    } else if cnt > self.max_loops || self.state.to_ip == self.stuck_ip {
                        self.pkt_state = PktState::ErrResync;
                        self.no_progress = 0;
                        r = Err(Stop::Loop);
                    } else {
                        self.stuck_ip_cnt -= 1;
                        if self.stuck_ip_cnt == 0 {
                            self.stuck_ip_prd += 1;
                            self.stuck_ip_cnt = self.stuck_ip_prd;
                            self.stuck_ip = self.state.to_ip;
                        }
                    }
                }
                self.set_insn_state(insn);
                return r;
            }
            result = Ok(Walked::Branch);
        }
        self.no_progress = 0;
        self.set_insn_state(insn);
        result
    }

    fn set_insn_state(&mut self, insn: &PerfInsn) {
        self.state.insn_op = insn.op;
        self.state.insn_len = insn.length;
        self.state.insn = insn.buf;
        if self.tx_flags & sflags::IN_TX != 0 {
            self.state.flags |= sflags::IN_TX;
        }
    }

    // ---- the main loop ---------------------------------------------------------

    fn resample(&mut self) -> Res {
        self.pkt_state = PktState::InSync;
        self.state.type_ = ty::INSTRUCTION;
        self.state.from_ip = self.ip;
        self.state.to_ip = 0;
        Ok(())
    }

    /// Hop mode ('q'): TNTs are skipped, IPs taken from FUPs and TIPs.
    fn hop_trace(&mut self, code: &mut dyn Walker, no_tip: &mut bool) -> Hop {
        if self.leap && !self.in_psb && self.packet.kind != Kind::Psb {
            if let Err(e) = self.scan_for_psb() {
                return Hop::Return(Err(e));
            }
        }
        match self.packet.kind {
            Kind::Tnt => Hop::Ignore,
            Kind::TipPgd => {
                self.pge = false;
                if self.packet.count == 0 {
                    self.set_nr();
                    return Hop::Ignore;
                }
                self.set_ip();
                self.state.type_ |= ty::TRACE_END;
                self.state.from_ip = 0;
                self.state.to_ip = self.ip;
                self.update_nr();
                Hop::Return(Ok(()))
            }
            Kind::Tip => {
                if self.packet.count == 0 {
                    self.set_nr();
                    return Hop::Ignore;
                }
                self.set_ip();
                self.state.type_ = ty::INSTRUCTION;
                self.state.from_ip = self.ip;
                self.state.to_ip = 0;
                self.update_nr();
                self.sample_iflag_chg();
                Hop::Return(Ok(()))
            }
            Kind::Fup => {
                if self.packet.count == 0 {
                    return Hop::Ignore;
                }
                self.set_ip();
                if self.set_fup_mwait || self.set_fup_pwre {
                    *no_tip = true;
                }
                if !self.p.branch_enable || !self.pge {
                    *no_tip = true;
                }
                if *no_tip {
                    self.state.type_ = ty::INSTRUCTION;
                    self.state.from_ip = self.ip;
                    self.state.to_ip = 0;
                    self.fup_event(code, *no_tip);
                    return Hop::Return(Ok(()));
                }
                self.fup_event(code, *no_tip);
                self.state.type_ |= ty::INSTRUCTION | ty::BRANCH;
                let r = self.walk_fup_tip();
                if r.is_ok() && self.state.to_ip != 0 {
                    self.pkt_state = PktState::Resample;
                }
                Hop::Return(r)
            }
            Kind::Psb => {
                self.state.psb_offset = self.pos;
                self.psb_ip = 0;
                self.last_ip = 0;
                self.have_last_ip = true;
                match self.walk_psbend() {
                    Err(Stop::Again) => return Hop::Again,
                    Err(e) => return Hop::Return(Err(e)),
                    Ok(()) => {}
                }
                self.state.type_ = ty::PSB_EVT;
                if self.psb_ip != 0 {
                    self.state.type_ |= ty::INSTRUCTION;
                    self.ip = self.psb_ip;
                }
                self.state.from_ip = self.psb_ip;
                self.state.to_ip = 0;
                Hop::Return(Ok(()))
            }
            _ => Hop::Process,
        }
    }

    fn walk_trace(&mut self, code: &mut dyn Walker) -> Res {
        let mut last_packet_type = Kind::Pad;
        let mut no_tip = false;
        let mut fetch = true;
        loop {
            if fetch {
                self.get_next_packet()?;
            }
            fetch = true;
            if self.cyc_threshold != 0 {
                if self.sample_cyc && last_packet_type != Kind::Cyc {
                    self.sample_cyc = false;
                }
                last_packet_type = self.packet.kind;
            }
            if self.hop {
                match self.hop_trace(code, &mut no_tip) {
                    Hop::Ignore => continue,
                    Hop::Return(r) => return r,
                    Hop::Again => {
                        fetch = false;
                        continue;
                    }
                    Hop::Process => {}
                }
            }
            match self.packet.kind {
                Kind::Tnt => {
                    if self.packet.count == 0 {
                        continue;
                    }
                    self.tnt = self.packet;
                    self.pkt_state = PktState::Tnt;
                    match self.walk_tnt(code) {
                        Err(Stop::Again) => continue,
                        r => return r,
                    }
                }
                Kind::TipPgd => {
                    if self.packet.count != 0 {
                        self.set_last_ip();
                    }
                    self.pkt_state = PktState::TipPgd;
                    return self.walk_tip(code);
                }
                Kind::TipPge => {
                    self.pge = true;
                    self.overflow = false;
                    self.mtc_cyc_cnt_pge();
                    self.set_nr();
                    if self.packet.count == 0 {
                        continue;
                    }
                    self.sample_iflag_chg();
                    self.set_ip();
                    self.state.from_ip = 0;
                    self.state.to_ip = self.ip;
                    self.state.type_ |= ty::TRACE_BEGIN;
                    if self.hop {
                        self.pkt_state = PktState::Resample;
                    }
                    return Ok(());
                }
                Kind::Ovf => return self.overflow(),
                Kind::Tip => {
                    if self.packet.count != 0 {
                        self.set_last_ip();
                    }
                    self.pkt_state = PktState::Tip;
                    return self.walk_tip(code);
                }
                Kind::Fup => {
                    if self.packet.count == 0 {
                        no_tip = false;
                        continue;
                    }
                    self.set_last_ip();
                    if !self.p.branch_enable || !self.pge {
                        self.ip = self.last_ip;
                        if self.fup_event(code, no_tip) {
                            return Ok(());
                        }
                        no_tip = false;
                        continue;
                    }
                    if self.set_fup_mwait {
                        no_tip = true;
                    }
                    self.pkt_state = if no_tip {
                        PktState::FupNoTip
                    } else {
                        PktState::Fup
                    };
                    let r = self.walk_fup(code);
                    if r != Err(Stop::Again) {
                        return r;
                    }
                    if no_tip {
                        no_tip = false;
                        continue;
                    }
                    return self.walk_fup_tip();
                }
                Kind::TraceStop => {
                    self.pge = false;
                    self.continuous_period = false;
                    self.tx_flags = 0;
                    self.have_tma = false;
                }
                Kind::Psb => {
                    self.state.psb_offset = self.pos;
                    self.psb_ip = 0;
                    if let Some(r) = self.psb_with_fup(code) {
                        return r;
                    }
                    match self.psb() {
                        Err(Stop::Again) => {
                            fetch = false;
                            continue;
                        }
                        r => return r,
                    }
                }
                Kind::Pip => self.pip_payload = self.packet.payload,
                Kind::Mtc => {
                    self.calc_mtc_timestamp();
                    if self.period_type != PeriodType::Mtc {
                        continue;
                    }
                    // An instruction since the last MTC, and a timestamp.
                    if !self.mtc_insn {
                        continue;
                    }
                    self.mtc_insn = false;
                    if self.timestamp == 0 {
                        continue;
                    }
                    self.state.type_ = ty::INSTRUCTION;
                    self.state.from_ip = self.ip;
                    self.state.to_ip = 0;
                    return Ok(());
                }
                Kind::Tsc => self.calc_tsc_timestamp(),
                Kind::Tma => self.calc_tma(),
                Kind::Cyc => self.calc_cyc_timestamp(),
                Kind::Cbr => {
                    self.calc_cbr();
                    if self.cbr != self.cbr_seen {
                        self.state.type_ = 0;
                        return Ok(());
                    }
                }
                Kind::ModeExec => {
                    self.mode_exec();
                    self.get_next_packet()?;
                    if self.packet.kind == Kind::Fup {
                        self.set_fup_mode_exec = true;
                        no_tip = true;
                    }
                    fetch = false;
                }
                Kind::ModeTsx => {
                    // MODE.TSX need not be followed by a FUP.
                    if !self.pge || self.in_psb {
                        self.tx_flags = (self.packet.payload as u32) & sflags::IN_TX;
                        continue;
                    }
                    self.mode_tsx(&mut no_tip)?;
                    fetch = false;
                }
                Kind::Bad => return self.bug(),
                Kind::Psbend | Kind::Vmcs | Kind::Mnt | Kind::Pad => {}
                Kind::PtwriteIp => {
                    self.fup_ptw_payload = self.packet.payload;
                    self.get_next_packet()?;
                    if self.packet.kind == Kind::Fup {
                        self.set_fup_ptw = true;
                        no_tip = true;
                    }
                    fetch = false;
                }
                Kind::Ptwrite => {
                    self.state.type_ = ty::PTW;
                    self.state.from_ip = self.ip;
                    self.state.to_ip = 0;
                    self.state.ptw_payload = self.packet.payload;
                    return Ok(());
                }
                Kind::Mwait => {
                    self.fup_mwait_payload = self.packet.payload;
                    self.set_fup_mwait = true;
                }
                Kind::Pwre => {
                    if self.set_fup_mwait {
                        self.fup_pwre_payload = self.packet.payload;
                        self.set_fup_pwre = true;
                        continue;
                    }
                    self.state.type_ = ty::PWR_ENTRY;
                    self.state.from_ip = self.ip;
                    self.state.to_ip = 0;
                    self.state.pwrx_payload = self.packet.payload;
                    return Ok(());
                }
                Kind::ExstopIp => {
                    self.get_next_packet()?;
                    if self.packet.kind == Kind::Fup {
                        self.set_fup_exstop = true;
                        no_tip = true;
                    }
                    fetch = false;
                }
                Kind::Exstop => {
                    self.state.type_ = ty::EX_STOP;
                    self.state.from_ip = self.ip;
                    self.state.to_ip = 0;
                    return Ok(());
                }
                Kind::Pwrx => {
                    self.state.type_ = ty::PWR_EXIT;
                    self.state.from_ip = self.ip;
                    self.state.to_ip = 0;
                    self.state.pwrx_payload = self.packet.payload;
                    return Ok(());
                }
                Kind::Bbp | Kind::Bip => {}
                Kind::Bep => {
                    self.state.type_ = ty::BLK_ITEMS;
                    self.state.from_ip = self.ip;
                    self.state.to_ip = 0;
                    return Ok(());
                }
                Kind::BepIp => {
                    self.get_next_packet()?;
                    if self.packet.kind == Kind::Fup {
                        self.set_fup_bep = true;
                        no_tip = true;
                    }
                    fetch = false;
                }
                Kind::Cfe => {
                    self.fup_cfe_pkt = self.packet;
                    self.set_fup_cfe = true;
                    if !self.pge {
                        self.fup_event(code, true);
                        return Ok(());
                    }
                }
                Kind::CfeIp => {
                    self.fup_cfe_pkt = self.packet;
                    self.get_next_packet()?;
                    if self.packet.kind == Kind::Fup {
                        self.set_fup_cfe_ip = true;
                        no_tip = true;
                    }
                    fetch = false;
                }
                Kind::Evd => self.evd()?,
            }
        }
    }

    /// The next state; at the end of the trace, a state whose error is
    /// [`Error::NoData`].
    pub fn decode(&mut self, code: &mut dyn Walker) -> &State {
        self.told_exec_mode = None;
        let r = loop {
            self.state.type_ = ty::BRANCH;
            self.state.flags = 0;
            let r = match self.pkt_state {
                PktState::NoPsb => self.sync(code),
                PktState::NoIp | PktState::ErrResync => {
                    if self.pkt_state == PktState::NoIp {
                        self.have_last_ip = false;
                        self.last_ip = 0;
                        self.ip = 0;
                    }
                    self.sync_ip()
                }
                PktState::InSync => self.walk_trace(code),
                PktState::Tnt | PktState::TntCont => match self.walk_tnt(code) {
                    Err(Stop::Again) => self.walk_trace(code),
                    r => r,
                },
                PktState::Tip | PktState::TipPgd => self.walk_tip(code),
                PktState::Fup => match self.walk_fup(code) {
                    Err(Stop::Again) => self.walk_fup_tip(),
                    r => r,
                },
                PktState::FupNoTip => match self.walk_fup(code) {
                    Err(Stop::Again) => self.walk_trace(code),
                    r => r,
                },
                PktState::FupInPsb => self.fup_in_psb(code),
                PktState::Resample => self.resample(),
            };
            if r != Err(Stop::Link) {
                break r;
            }
        };

        match r {
            Err(e) => {
                self.state.err = Some(e.error());
                if e != Stop::Overflow {
                    self.state.from_ip = self.ip;
                }
                self.update_sample_time();
                self.sample_tot_cyc_cnt = self.tot_cyc_cnt;
                self.set_nr();
            }
            Ok(()) => {
                self.state.err = None;
                if self.cbr != self.cbr_seen {
                    self.cbr_seen = self.cbr;
                    if self.state.type_ == 0 {
                        self.state.from_ip = self.ip;
                        self.state.to_ip = 0;
                    }
                    self.state.type_ |= ty::CBR_CHG;
                    self.state.cbr_payload = self.cbr_payload;
                    self.state.cbr = self.cbr;
                }
                if self.pkt_state.sample_time() {
                    self.update_sample_time();
                    if self.sample_cyc {
                        self.sample_tot_cyc_cnt = self.tot_cyc_cnt;
                        self.state.flags |= sflags::SAMPLE_IPC;
                        self.sample_cyc = false;
                    }
                }
                // With TSC/MTC only, IPC can be sampled as soon as the cycle count
                // changes.
                if !self.have_cyc {
                    self.state.flags |= sflags::SAMPLE_IPC;
                }
            }
        }

        // A PSB event always has the TSC time.
        if self.state.type_ & ty::PSB_EVT != 0 && self.tsc_timestamp != 0 {
            self.sample_timestamp = self.tsc_timestamp;
        }
        self.state.from_nr = self.nr;
        self.state.to_nr = self.next_nr;
        self.nr = self.next_nr;
        self.state.timestamp = self.sample_timestamp;
        self.state.est_timestamp = self.est_timestamp();
        self.state.tot_insn_cnt = self.tot_insn_cnt;
        self.state.tot_cyc_cnt = self.sample_tot_cyc_cnt;
        &self.state
    }
}

/// What the hop mode does with a packet.
enum Hop {
    Ignore,
    Return(Res),
    Again,
    Process,
}

#[cfg(test)]
mod tests;
