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
//! Not modelled: VM time correlation, PEBS-via-PT block items (their packets are
//! walked past; no items are gathered), PTWRITE emulated by JMPs.

pub mod insn;
pub mod packet;

use insn::{Branch, Insn, Op, INSN_BUF};
use packet::{Kind, Pkt};

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
        insn: &mut Insn,
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
    pub last: Insn,
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
    /// A branch to deal with (the instruction is in the walk's `Insn`).
    Branch,
    /// A state to return (an instruction sample or a direct branch).
    Return,
}

/// perf's return stack for compressed returns, in blocks.
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

/// `t * n / d` without overflowing early (perf's `multdiv`).
fn multdiv(t: u64, n: u32, d: u32) -> u64 {
    if d == 0 {
        return 0;
    }
    let (n, d) = (u64::from(n), u64::from(d));
    (t / d)
        .wrapping_mul(n)
        .wrapping_add((t % d).wrapping_mul(n) / d)
}

/// `reference` advanced by `cycles` at `cyc_to_tsc` TSC ticks a cycle, as perf
/// computes it: `timestamp += cycle_cnt * cyc_to_tsc` on a `uint64_t`, so the sum
/// is taken in `double` and only then truncated. Truncating the product first
/// lands one tick low where the product falls just short of a whole number (a
/// ratio measured between two MTCs, times the cycles between them, is often
/// 0.999… short of the MTC's own value).
fn add_cycles(reference: u64, cycles: u64, cyc_to_tsc: f64) -> u64 {
    (reference as f64 + cycles as f64 * cyc_to_tsc) as u64
}

fn lower_power_of_2(x: u64) -> u64 {
    if x == 0 {
        0
    } else {
        1u64 << (63 - x.leading_zeros())
    }
}

/// A full TSC from the 7 bytes of a TSC packet and a reference TSC near it (perf's
/// `intel_pt_8b_tsc`).
pub fn tsc_8b(timestamp: u64, reference: u64) -> u64 {
    let mut t = timestamp | (reference & (0xff << 56));
    if t < reference {
        if reference - t > 1 << 55 {
            t = t.wrapping_add(1 << 56);
        }
    } else if t - reference > 1 << 55 {
        t = t.wrapping_sub(1 << 56);
    }
    t
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

const CYC_ENABLE: u64 = 1 << 1;
const CYC_THRESHOLD_SHIFT: u32 = 19;
const CYC_THRESHOLD: u64 = 0xf << CYC_THRESHOLD_SHIFT;

const BIT63: u64 = 1 << 63;

/// The PSB's bytes.
const PSB: [u8; 16] = [
    0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82,
];

/// The first PSB in `buf`.
fn find_psb(buf: &[u8]) -> Option<usize> {
    pt_decoder::packet::find_psb_forward(buf, 0)
}

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

    // ---- trace data -------------------------------------------------------------

    fn len(&self) -> usize {
        if self.split_psb {
            PSB.len().saturating_sub(self.at)
        } else {
            self.data.len().saturating_sub(self.at)
        }
    }

    fn reposition(&mut self) {
        self.ip = 0;
        self.pkt_state = PktState::NoPsb;
        self.timestamp = 0;
        self.have_tma = false;
    }

    /// The next buffer (perf's `intel_pt_get_data`): `Link` if it does not continue
    /// the last one.
    fn get_data(&mut self, reposition: bool) -> Res {
        self.pkt_step = 0;
        let Some(b) = self.bufs.get(self.next_buf_idx).copied() else {
            return Err(Stop::NoData);
        };
        self.next_buf_idx += 1;
        self.data = b.data;
        self.at = 0;
        self.split_psb = false;
        self.pd = None;
        if b.data.is_empty() {
            return Err(Stop::NoData);
        }
        self.buf_timestamp = b.reference;
        if !b.consecutive || reposition {
            self.reposition();
            self.ref_timestamp = b.reference;
            self.state.trace_nr = b.trace_nr;
            return Err(Stop::Link);
        }
        Ok(())
    }

    fn get_next_data(&mut self, reposition: bool) -> Res {
        if let Some((data, at)) = self.split_rest.take() {
            self.data = data;
            self.at = at;
            self.split_psb = false;
            self.pd = None;
            return Ok(());
        }
        self.get_data(reposition)
    }

    /// The packet at the current position, with its length; `None`: a bad packet.
    fn read_packet(&mut self) -> Option<(Pkt, usize)> {
        if self.split_psb {
            return Some((
                Pkt {
                    kind: Kind::Psb,
                    count: 0,
                    payload: 0,
                },
                PSB.len(),
            ));
        }
        self.read_packet_at(self.at)
    }

    fn bad_packet(&mut self) -> Res {
        self.tx_flags = 0;
        self.have_tma = false;
        self.pkt_len = 1;
        self.pkt_step = 1;
        self.packet = Pkt::BAD;
        if self.pkt_state != PktState::NoPsb {
            // perf's INTEL_PT_STATE_ERR1 keeps the packet state.
        }
        Err(Stop::BadMsg)
    }

    fn get_next_packet(&mut self) -> Res {
        self.last_packet_type = self.packet.kind;
        loop {
            self.pos += self.pkt_step as u64;
            self.at += self.pkt_step;
            if self.len() == 0 {
                self.get_next_data(false)?;
            }
            match self.read_packet() {
                Some((p, n)) => {
                    self.packet = p;
                    self.pkt_len = n;
                    self.pkt_step = n;
                }
                None => return self.bad_packet(),
            }
            if self.packet.kind != Kind::Pad {
                return Ok(());
            }
        }
    }

    /// Moves on to the next packet (as [`Decoder::get_next_packet`] would) if it
    /// is in the current buffer and `want` takes it; else nothing changes.
    fn next_packet_if(&mut self, want: impl Fn(&Pkt) -> bool) -> bool {
        if self.split_psb {
            return false;
        }
        let mut at = self.at + self.pkt_step;
        let mut skipped = self.pkt_step;
        let (p, n) = loop {
            let Some(&byte) = self.data.get(at) else {
                return false;
            };
            let Some((p, n)) = packet::tnt8(byte)
                .map(|p| (p, 1))
                .or_else(|| packet::tip_at(self.data, at))
                .or_else(|| self.read_packet_at(at))
            else {
                return false;
            };
            if p.kind != Kind::Pad {
                break (p, n);
            }
            at += n;
            skipped += n;
        };
        if !want(&p) {
            return false;
        }
        self.last_packet_type = self.packet.kind;
        self.pos += skipped as u64;
        self.at = at;
        self.packet = p;
        self.pkt_len = n;
        self.pkt_step = n;
        true
    }

    /// The packet at `at` in the current buffer.
    fn read_packet_at(&mut self, at: usize) -> Option<(Pkt, usize)> {
        let data = self.data;
        let pd = self.pd.get_or_insert_with(|| packet::decoder(data));
        if pd.offset().ok() != Some(at as u64) && pd.sync_set(at as u64).is_err() {
            return None;
        }
        packet::next(pd, data)
    }

    /// Looks at the packets after the current one in the current buffer, handing
    /// each (but PADs) to `cb` with the type of the packet before, until `cb` says
    /// stop (perf's `intel_pt_pkt_lookahead`).
    fn pkt_lookahead(&self, mut cb: impl FnMut(&Self, &Pkt, Kind, u64) -> bool) {
        if self.split_psb {
            return;
        }
        let data = self.data;
        let mut at = self.at;
        let mut step = self.pkt_step;
        let mut pos = self.pos;
        let mut last = self.last_packet_type;
        let mut pd = packet::decoder(data);
        loop {
            let p = loop {
                pos += step as u64;
                at += step;
                if at >= data.len() {
                    return;
                }
                let Some((p, n)) = packet::decode(&mut pd, data, at) else {
                    return;
                };
                step = n;
                if p.kind != Kind::Pad {
                    break p;
                }
            };
            if cb(self, &p, last, pos) {
                return;
            }
            last = p.kind;
        }
    }

    // ---- instruction sampling ---------------------------------------------------

    fn next_period(&mut self) -> u64 {
        let mut timestamp = self.timestamp.wrapping_add(self.timestamp_insn_cnt);
        let mut masked = timestamp & self.period_mask;
        if self.continuous_period {
            if masked > self.last_masked_timestamp {
                return 1;
            }
        } else {
            timestamp = timestamp.wrapping_add(1);
            masked = timestamp & self.period_mask;
            if masked > self.last_masked_timestamp {
                self.last_masked_timestamp = masked;
                self.continuous_period = true;
            }
        }
        if masked < self.last_masked_timestamp {
            return self.period_ticks;
        }
        self.period_ticks
            .wrapping_sub(timestamp.wrapping_sub(masked))
    }

    fn next_sample(&mut self) -> u64 {
        match self.period_type {
            PeriodType::Instructions => self.period.wrapping_sub(self.period_insn_cnt),
            PeriodType::Ticks => self.next_period(),
            PeriodType::None | PeriodType::Mtc => 0,
        }
    }

    fn sample_insn(&mut self) {
        match self.period_type {
            PeriodType::Instructions => self.period_insn_cnt = 0,
            PeriodType::Ticks => {
                let timestamp = self.timestamp.wrapping_add(self.timestamp_insn_cnt);
                let masked = timestamp & self.period_mask;
                if masked > self.last_masked_timestamp {
                    self.last_masked_timestamp = masked;
                } else {
                    self.last_masked_timestamp =
                        self.last_masked_timestamp.wrapping_add(self.period_ticks);
                }
            }
            PeriodType::None | PeriodType::Mtc => {}
        }
        self.state.type_ |= ty::INSTRUCTION;
    }

    fn count_insns(&mut self, n: u64) {
        self.tot_insn_cnt += n;
        self.timestamp_insn_cnt += n;
        self.sample_insn_cnt += n;
        self.period_insn_cnt += n;
    }

    /// Samples the FUP's instruction with the FUP's event.
    fn sample_fup_insn(&mut self, code: &mut dyn Walker) {
        self.state.insn_op = Op::Other;
        self.state.insn_len = 0;
        if !self.p.branch_enable || !self.pge || self.hop || self.ip != self.last_ip {
            return;
        }
        self.mtc_insn = true;
        let max = self.next_sample();
        if max != 1 {
            return;
        }
        let mut insn = Insn::default();
        let mut ip = self.ip;
        let Ok(cnt) = code.walk(&mut insn, &mut ip, 0, max, self.state.to_nr) else {
            return;
        };
        self.ip = ip;
        if insn.branch != Branch::None {
            return;
        }
        self.count_insns(cnt);
        self.sample_insn();
        self.state.type_ |= ty::INSTRUCTION;
        self.ip = self.ip.wrapping_add(u64::from(insn.length));
    }

    /// perf's `intel_pt_walk_insn`.
    fn walk_insn(&mut self, code: &mut dyn Walker, insn: &mut Insn, ip: u64) -> Res<Walked> {
        self.mtc_insn = true;
        let max = self.next_sample();
        let mut cur = self.ip;
        insn.length = 0;
        insn.op = Op::Other;
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

    fn set_insn_state(&mut self, insn: &Insn) {
        self.state.insn_op = insn.op;
        self.state.insn_len = insn.length;
        self.state.insn = insn.buf;
        if self.tx_flags & sflags::IN_TX != 0 {
            self.state.flags |= sflags::IN_TX;
        }
    }

    // ---- MODE, IF, FUP events ---------------------------------------------------

    fn mode_exec_status(&mut self) {
        let iflag = self.packet.count & 4 != 0;
        self.iflag = iflag;
        self.next_iflag = iflag;
        self.state.from_iflag = iflag;
        self.state.to_iflag = iflag;
    }

    fn mode_exec(&mut self) {
        self.next_iflag = self.packet.count & 4 != 0;
    }

    fn sample_iflag(&mut self) {
        self.state.type_ |= ty::IFLAG_CHG;
        self.state.from_iflag = self.iflag;
        self.state.to_iflag = self.next_iflag;
        self.iflag = self.next_iflag;
    }

    fn sample_iflag_chg(&mut self) {
        if self.iflag != self.next_iflag {
            self.sample_iflag();
        }
    }

    fn clear_fup_event(&mut self) {
        self.set_fup_tx_flags = false;
        self.set_fup_ptw = false;
        self.set_fup_mwait = false;
        self.set_fup_pwre = false;
        self.set_fup_exstop = false;
        self.set_fup_bep = false;
        self.set_fup_cfe_ip = false;
        self.set_fup_cfe = false;
        self.evd_cnt = 0;
        self.set_fup_mode_exec = false;
        self.iflag = self.next_iflag;
    }

    /// The events bound to a FUP; whether there were any.
    fn fup_event(&mut self, code: &mut dyn Walker, no_tip: bool) -> bool {
        let ty0 = self.state.type_;
        let mut sample_fup_insn = false;
        let mut ret = false;
        self.state.type_ &= !ty::BRANCH;
        self.state.insn_op = Op::Other;
        self.state.insn_len = 0;

        if self.set_fup_cfe_ip || self.set_fup_cfe {
            let ip = self.set_fup_cfe_ip;
            self.set_fup_cfe_ip = false;
            self.set_fup_cfe = false;
            self.state.type_ |= ty::EVT;
            if !ip && self.pge {
                self.state.type_ |= ty::BRANCH;
            }
            self.state.cfe_type = self.fup_cfe_pkt.count;
            self.state.cfe_vector = self.fup_cfe_pkt.payload as u32;
            self.state.evd_cnt = self.evd_cnt;
            self.state.evd = self.evd;
            self.evd_cnt = 0;
            if ip || self.pge {
                self.state.flags |= sflags::FUP_IP;
            }
            ret = true;
        }
        if self.set_fup_mode_exec {
            self.set_fup_mode_exec = false;
            self.sample_iflag();
            sample_fup_insn = no_tip;
            ret = true;
        }
        if self.set_fup_tx_flags {
            self.set_fup_tx_flags = false;
            self.tx_flags = self.fup_tx_flags;
            self.state.type_ |= ty::TRANSACTION;
            if self.fup_tx_flags & sflags::ABORT_TX != 0 {
                self.state.type_ |= ty::BRANCH;
            }
            self.state.flags = self.fup_tx_flags;
            ret = true;
        }
        if self.set_fup_ptw {
            self.set_fup_ptw = false;
            self.state.type_ |= ty::PTW;
            self.state.flags |= sflags::FUP_IP;
            self.state.ptw_payload = self.fup_ptw_payload;
            ret = true;
        }
        if self.set_fup_mwait {
            self.set_fup_mwait = false;
            self.state.type_ |= ty::MWAIT_OP;
            self.state.mwait_payload = self.fup_mwait_payload;
            ret = true;
        }
        if self.set_fup_pwre {
            self.set_fup_pwre = false;
            self.state.type_ |= ty::PWR_ENTRY;
            self.state.pwre_payload = self.fup_pwre_payload;
            ret = true;
        }
        if self.set_fup_exstop {
            self.set_fup_exstop = false;
            self.state.type_ |= ty::EX_STOP;
            self.state.flags |= sflags::FUP_IP;
            ret = true;
        }
        if self.set_fup_bep {
            self.set_fup_bep = false;
            self.state.type_ |= ty::BLK_ITEMS;
            ret = true;
        }
        if self.overflow {
            self.overflow = false;
            if !ret && !self.pge {
                if self.hop {
                    self.state.type_ = 0;
                    self.pkt_state = PktState::Resample;
                }
                self.pge = true;
                self.state.type_ |= ty::BRANCH | ty::TRACE_BEGIN;
                self.state.from_ip = 0;
                self.state.to_ip = self.ip;
                return true;
            }
        }
        if ret {
            self.state.from_ip = self.ip;
            self.state.to_ip = 0;
            if sample_fup_insn {
                self.sample_fup_insn(code);
            }
        } else {
            self.state.type_ = ty0;
        }
        ret
    }

    fn fup_with_nlip(&self, insn: &Insn, ip: u64, walked: &Res<Walked>) -> bool {
        self.p.fup_with_nlip
            && walked.is_ok()
            && insn.branch == Branch::Indirect
            && ip == self.ip.wrapping_add(u64::from(insn.length))
    }

    fn walk_fup(&mut self, code: &mut dyn Walker) -> Res {
        let mut insn = Insn::default();
        let ip = self.last_ip;
        loop {
            let r = self.walk_insn(code, &mut insn, ip);
            if r == Ok(Walked::Return) {
                return Ok(());
            }
            if r == Err(Stop::Again) || self.fup_with_nlip(&insn, ip, &r) {
                let no_tip = self.pkt_state != PktState::Fup;
                self.pkt_state = PktState::InSync;
                if self.fup_event(code, no_tip) && no_tip {
                    return Ok(());
                }
                return Err(Stop::Again);
            }
            self.set_fup_tx_flags = false;
            r?;
            if insn.branch == Branch::Indirect || insn.branch == Branch::Conditional {
                self.pkt_state = PktState::ErrResync;
                return Err(Stop::Mismatch);
            }
            // perf reports an internal error and walks on (its loop ignores it).
            let _ = self.bug();
        }
    }

    fn bug(&mut self) -> Res {
        self.pkt_state = PktState::NoPsb;
        Err(Stop::Bug)
    }

    fn update_nr(&mut self) {
        self.next_nr = self.pip_payload & 1 != 0;
    }

    fn set_nr(&mut self) {
        self.nr = self.pip_payload & 1 != 0;
        self.next_nr = self.nr;
    }

    fn set_pip(&mut self) {
        self.pip_payload = self.packet.payload;
        self.set_nr();
    }

    fn set_last_ip(&mut self) {
        self.last_ip = calc_ip(&self.packet, self.last_ip);
        self.have_last_ip = true;
    }

    fn set_ip(&mut self) {
        self.set_last_ip();
        self.ip = self.last_ip;
    }

    fn pgd_ip(&mut self, code: &mut dyn Walker, ip: u64) -> Option<bool> {
        code.pgd_ip(ip)
    }

    fn walk_tip(&mut self, code: &mut dyn Walker) -> Res {
        let mut insn = Insn::default();
        let r = self.walk_insn(code, &mut insn, 0);
        if r == Ok(Walked::Return)
            && self.pkt_state == PktState::TipPgd
            && self.state.type_ & ty::BRANCH != 0
            && self.pgd_ip(code, self.state.to_ip) == Some(true)
        {
            // An unconditional branch out of the filter region.
            self.no_progress = 0;
            self.pge = false;
            self.continuous_period = false;
            self.pkt_state = PktState::InSync;
            self.state.type_ |= ty::TRACE_END;
            self.update_nr();
            return Ok(());
        }
        if r? == Walked::Return {
            return Ok(());
        }
        self.update_nr();
        self.sample_iflag_chg();

        if insn.branch == Branch::Indirect {
            if self.pkt_state == PktState::TipPgd {
                self.pge = false;
                self.continuous_period = false;
                self.pkt_state = PktState::InSync;
                self.state.from_ip = self.ip;
                if self.packet.count == 0 {
                    self.state.to_ip = 0;
                } else {
                    self.state.to_ip = self.last_ip;
                    self.ip = self.last_ip;
                }
                self.state.type_ |= ty::TRACE_END;
            } else {
                self.pkt_state = PktState::InSync;
                self.state.from_ip = self.ip;
                if self.packet.count == 0 {
                    self.state.to_ip = 0;
                } else {
                    self.state.to_ip = self.last_ip;
                    self.ip = self.last_ip;
                }
            }
            return Ok(());
        }

        if insn.branch == Branch::Conditional {
            let to_ip = self
                .ip
                .wrapping_add(u64::from(insn.length))
                .wrapping_add(insn.rel as i64 as u64);
            if self.pkt_state == PktState::TipPgd && self.pgd_ip(code, to_ip) == Some(true) {
                // A conditional branch out of the filter region.
                self.pge = false;
                self.continuous_period = false;
                self.pkt_state = PktState::InSync;
                self.ip = to_ip;
                self.state.from_ip = self.ip;
                self.state.to_ip = to_ip;
                self.state.type_ |= ty::TRACE_END;
                return Ok(());
            }
            self.pkt_state = PktState::ErrResync;
            return Err(Stop::Mismatch);
        }
        self.bug()
    }

    fn emulated_ptwrite_state(&mut self) -> Res {
        self.emulated_ptwrite = false;
        Err(Stop::Eptw)
    }

    fn walk_tnt(&mut self, code: &mut dyn Walker) -> Res {
        let mut insn = Insn::default();
        loop {
            if self.emulated_ptwrite {
                return self.emulated_ptwrite_state();
            }
            let r = self.walk_insn(code, &mut insn, 0);
            match r {
                Ok(Walked::Return) => {
                    self.emulated_ptwrite = insn.emulated_ptwrite;
                    return Ok(());
                }
                Err(e) => {
                    self.emulated_ptwrite = false;
                    return Err(e);
                }
                Ok(Walked::Branch) => {}
            }

            if insn.op == Op::Ret {
                if !self.p.return_compression || self.ret_addr == 0 || self.tnt.payload & BIT63 == 0
                {
                    self.pkt_state = PktState::ErrResync;
                    return Err(Stop::Mismatch);
                }
                self.tnt_bit();
                self.state.from_ip = self.ip;
                self.ip = self.ret_addr;
                self.state.to_ip = self.ip;
                return Ok(());
            }

            if insn.branch == Branch::Indirect {
                // A TIP deferred after the TNT.
                self.get_next_packet()?;
                if self.packet.kind != Kind::Tip || self.packet.count == 0 {
                    self.pkt_state = PktState::ErrResync;
                    self.pkt_step = 0;
                    return Err(Stop::Mismatch);
                }
                self.set_last_ip();
                self.state.from_ip = self.ip;
                self.state.to_ip = self.last_ip;
                self.ip = self.last_ip;
                self.update_nr();
                self.sample_iflag_chg();
                return Ok(());
            }

            if insn.branch == Branch::Conditional {
                self.tnt.count -= 1;
                self.pkt_state = if self.tnt.count != 0 {
                    PktState::TntCont
                } else {
                    PktState::InSync
                };
                if self.tnt.payload & BIT63 != 0 {
                    self.tnt.payload <<= 1;
                    self.state.from_ip = self.ip;
                    self.ip = self
                        .ip
                        .wrapping_add(u64::from(insn.length))
                        .wrapping_add(insn.rel as i64 as u64);
                    self.state.to_ip = self.ip;
                    return Ok(());
                }
                // An instruction sample at a branch not taken.
                if self.state.type_ & ty::INSTRUCTION != 0 {
                    self.tnt.payload <<= 1;
                    self.state.type_ = ty::INSTRUCTION;
                    self.state.from_ip = self.ip;
                    self.state.to_ip = 0;
                    self.ip = self.ip.wrapping_add(u64::from(insn.length));
                    return Ok(());
                }
                self.sample_cyc = false;
                self.ip = self.ip.wrapping_add(u64::from(insn.length));
                if self.tnt.count == 0 {
                    self.update_sample_time();
                    return Err(Stop::Again);
                }
                self.tnt.payload <<= 1;
                continue;
            }
            return self.bug();
        }
    }

    fn mode_tsx(&mut self, no_tip: &mut bool) -> Res {
        let fup_tx_flags = (self.packet.payload as u32) & (sflags::IN_TX | sflags::ABORT_TX);
        self.get_next_packet()?;
        if self.packet.kind == Kind::Fup {
            self.fup_tx_flags = fup_tx_flags;
            self.set_fup_tx_flags = true;
            if self.fup_tx_flags & sflags::ABORT_TX == 0 {
                *no_tip = true;
            }
        } else {
            self.tx_flags = (self.packet.payload as u32) & sflags::IN_TX;
        }
        Ok(())
    }

    fn evd(&mut self) -> Res {
        if self.evd_cnt as usize >= MAX_EVDS {
            return Err(Stop::Bug);
        }
        self.evd[self.evd_cnt as usize] = (self.packet.count, self.packet.payload);
        self.evd_cnt += 1;
        Ok(())
    }

    // ---- timing -----------------------------------------------------------------

    fn update_sample_time(&mut self) {
        self.sample_timestamp = self.timestamp;
        self.sample_insn_cnt = self.timestamp_insn_cnt;
        self.state.cycles = self.tot_cyc_cnt;
    }

    fn calc_tsc_timestamp(&mut self) {
        self.have_tma = false;
        if self.ref_timestamp != 0 {
            let t = tsc_8b(self.packet.payload, self.ref_timestamp);
            self.tsc_timestamp = t;
            self.timestamp = t;
            self.ref_timestamp = 0;
            self.timestamp_insn_cnt = 0;
        } else if self.timestamp != 0 {
            let mut t = self.packet.payload | (self.timestamp & (0xff << 56));
            self.tsc_timestamp = t;
            if t < self.timestamp && self.timestamp - t < TSC_SLIP {
                t = self.timestamp;
            }
            if t < self.timestamp {
                if self.buf_timestamp == 0 || t.wrapping_add(1 << 56) < self.buf_timestamp {
                    t = t.wrapping_add(1 << 56);
                    self.tsc_timestamp = t;
                } else {
                    t = self.timestamp;
                }
            }
            self.timestamp = t;
            self.timestamp_insn_cnt = 0;
        }
        if self.last_packet_type == Kind::Cyc {
            self.cyc_ref_timestamp = self.timestamp;
            self.cycle_cnt = 0;
            self.have_calc_cyc_to_tsc = false;
            self.calc_cyc_to_tsc_from(false);
        }
    }

    fn overflow(&mut self) -> Res {
        self.tx_flags = 0;
        self.set_nr();
        self.timestamp_insn_cnt = 0;
        self.pkt_state = PktState::InSync;
        self.state.from_ip = self.ip;
        self.ip = 0;
        self.pge = false;
        self.clear_fup_event();
        self.overflow = true;
        Err(Stop::Overflow)
    }

    fn mtc_cyc_cnt_pge(&mut self) {
        if self.have_cyc {
            return;
        }
        self.cyc_cnt_timestamp = self.timestamp;
        self.base_cyc_cnt = self.tot_cyc_cnt;
    }

    fn mtc_cyc_cnt_cbr(&mut self) {
        self.tsc_to_cyc = f64::from(self.cbr) / self.max_non_turbo_ratio_fp;
        if self.pge {
            self.mtc_cyc_cnt_pge();
        }
    }

    fn mtc_cyc_cnt_upd(&mut self) {
        if self.have_cyc {
            return;
        }
        self.sample_cyc = true;
        if !self.pge || self.timestamp <= self.cyc_cnt_timestamp {
            return;
        }
        let delta = self.timestamp - self.cyc_cnt_timestamp;
        let tot = (delta as f64 * self.tsc_to_cyc) as u64 + self.base_cyc_cnt;
        if tot > self.tot_cyc_cnt {
            self.tot_cyc_cnt = tot;
        }
    }

    fn ctc_to_tsc(&self, ctc: u64) -> u64 {
        if self.tsc_ctc_mult != 0 {
            ctc.wrapping_mul(u64::from(self.tsc_ctc_mult))
        } else {
            multdiv(ctc, self.tsc_ctc_ratio_n, self.tsc_ctc_ratio_d)
        }
    }

    fn calc_tma(&mut self) {
        let ctc = self.packet.payload as u32;
        let fc = self.packet.count;
        let ctc_rem = ctc & self.ctc_rem_mask;
        if self.tsc_ctc_ratio_d == 0 {
            return;
        }
        if self.pge && !self.in_psb {
            self.mtc_cyc_cnt_pge();
        } else {
            self.mtc_cyc_cnt_upd();
        }
        self.last_mtc = (ctc >> self.mtc_shift) & 0xff;
        self.last_ctc = u64::from(ctc - ctc_rem);
        self.ctc_timestamp = self
            .tsc_timestamp
            .wrapping_sub(u64::from(fc))
            .wrapping_sub(self.ctc_to_tsc(u64::from(ctc_rem)));
        self.ctc_delta = 0;
        self.have_tma = true;
        self.fixup_last_mtc = true;
    }

    fn fixup_last_mtc(mtc: u32, mtc_shift: u32, last_mtc: &mut u32) {
        let first_missing_bit = 1u32 << (16 - mtc_shift);
        let mask = !(first_missing_bit - 1);
        *last_mtc |= mtc & mask;
        if *last_mtc >= mtc {
            *last_mtc = last_mtc.wrapping_sub(first_missing_bit) & 0xff;
        }
    }

    fn calc_mtc_timestamp(&mut self) {
        if !self.have_tma {
            return;
        }
        let mtc = self.packet.payload as u32;
        if self.mtc_shift > 8 && self.fixup_last_mtc {
            self.fixup_last_mtc = false;
            let mut last = self.last_mtc;
            Self::fixup_last_mtc(mtc, self.mtc_shift, &mut last);
            self.last_mtc = last;
        }
        let mtc_delta = if mtc > self.last_mtc {
            mtc - self.last_mtc
        } else {
            mtc + 256 - self.last_mtc
        };
        self.ctc_delta += u64::from(mtc_delta) << self.mtc_shift;
        let t = self
            .ctc_timestamp
            .wrapping_add(self.ctc_to_tsc(self.ctc_delta));
        if t >= self.timestamp {
            self.timestamp = t;
        }
        self.mtc_cyc_cnt_upd();
        self.timestamp_insn_cnt = 0;
        self.last_mtc = mtc;
        if self.last_packet_type == Kind::Cyc {
            self.cyc_ref_timestamp = self.timestamp;
            self.cycle_cnt = 0;
            self.have_calc_cyc_to_tsc = false;
            self.calc_cyc_to_tsc_from(true);
        }
    }

    fn calc_cbr(&mut self) {
        let cbr = (self.packet.payload & 0xff) as u32;
        self.cbr_payload = self.packet.payload;
        if self.cbr == cbr {
            return;
        }
        self.cbr = cbr;
        self.cbr_cyc_to_tsc = self.max_non_turbo_ratio_fp / f64::from(cbr);
        self.cyc_ref_timestamp = self.timestamp;
        self.cycle_cnt = 0;
        self.mtc_cyc_cnt_cbr();
    }

    fn calc_cyc_timestamp(&mut self) {
        let mut t = self.cyc_ref_timestamp;
        self.have_cyc = true;
        self.cycle_cnt = self.cycle_cnt.wrapping_add(self.packet.payload);
        if self.pge {
            self.tot_cyc_cnt = self.tot_cyc_cnt.wrapping_add(self.packet.payload);
        }
        self.sample_cyc = true;
        if self.cyc_ref_timestamp == 0 {
            return;
        }
        if self.have_calc_cyc_to_tsc {
            t = add_cycles(t, self.cycle_cnt, self.calc_cyc_to_tsc);
        } else if self.cbr != 0 {
            t = add_cycles(t, self.cycle_cnt, self.cbr_cyc_to_tsc);
        } else {
            return;
        }
        if t >= self.timestamp {
            self.timestamp = t;
        }
        self.timestamp_insn_cnt = 0;
    }

    /// Works out TSC ticks per cycle from the packets ahead (perf's
    /// `intel_pt_calc_cyc_to_tsc`; only after an MTC).
    fn calc_cyc_to_tsc_from(&mut self, from_mtc: bool) {
        if !from_mtc {
            return;
        }
        struct Info {
            cycle_cnt: u64,
            cbr: u32,
            last_mtc: u32,
            ctc_timestamp: u64,
            ctc_delta: u64,
            tsc_timestamp: u64,
            timestamp: u64,
            have_tma: bool,
            fixup_last_mtc: bool,
            cbr_cyc_to_tsc: f64,
        }
        let mut data = Info {
            cycle_cnt: 0,
            cbr: 0,
            last_mtc: self.last_mtc,
            ctc_timestamp: self.ctc_timestamp,
            ctc_delta: self.ctc_delta,
            tsc_timestamp: self.tsc_timestamp,
            timestamp: self.timestamp,
            have_tma: self.have_tma,
            fixup_last_mtc: self.fixup_last_mtc,
            cbr_cyc_to_tsc: 0.0,
        };
        let mut result: Option<f64> = None;
        self.pkt_lookahead(|d, p, last, _pos| {
            let timestamp;
            match p.kind {
                Kind::Tnt
                | Kind::TipPge
                | Kind::Tip
                | Kind::Fup
                | Kind::Psb
                | Kind::Pip
                | Kind::ModeExec
                | Kind::ModeTsx
                | Kind::Psbend
                | Kind::Pad
                | Kind::Vmcs
                | Kind::Mnt
                | Kind::Ptwrite
                | Kind::PtwriteIp
                | Kind::Bbp
                | Kind::Bip
                | Kind::Bep
                | Kind::BepIp
                | Kind::Cfe
                | Kind::CfeIp
                | Kind::Evd => return false,
                Kind::Mtc => {
                    if !data.have_tma {
                        return false;
                    }
                    let mtc = p.payload as u32;
                    if d.mtc_shift > 8 && data.fixup_last_mtc {
                        data.fixup_last_mtc = false;
                        Self::fixup_last_mtc(mtc, d.mtc_shift, &mut data.last_mtc);
                    }
                    let delta = if mtc > data.last_mtc {
                        mtc - data.last_mtc
                    } else {
                        mtc + 256 - data.last_mtc
                    };
                    data.ctc_delta += u64::from(delta) << d.mtc_shift;
                    data.last_mtc = mtc;
                    let t = data
                        .ctc_timestamp
                        .wrapping_add(d.ctc_to_tsc(data.ctc_delta));
                    if t < data.timestamp {
                        return true;
                    }
                    if last != Kind::Cyc {
                        data.timestamp = t;
                        return false;
                    }
                    timestamp = t;
                }
                // TSC packets are not used (timing may have stopped; they slip
                // against CYC in PSB+): from an MTC, a TSC or TMA ends the look.
                Kind::Tsc | Kind::Tma => return true,
                Kind::Cyc => {
                    data.cycle_cnt = data.cycle_cnt.wrapping_add(p.payload);
                    return false;
                }
                Kind::Cbr => {
                    let cbr = p.payload as u32;
                    if data.cbr != 0 && data.cbr != cbr {
                        return true;
                    }
                    data.cbr = cbr;
                    data.cbr_cyc_to_tsc = d.max_non_turbo_ratio_fp / f64::from(cbr);
                    return false;
                }
                _ => return true,
            }
            if data.cbr == 0 && d.cbr != 0 {
                data.cbr = d.cbr;
                data.cbr_cyc_to_tsc = d.cbr_cyc_to_tsc;
            }
            if data.cycle_cnt == 0 {
                return true;
            }
            let cyc_to_tsc = timestamp.wrapping_sub(d.timestamp) as f64 / data.cycle_cnt as f64;
            if data.cbr != 0
                && cyc_to_tsc > data.cbr_cyc_to_tsc
                && cyc_to_tsc / data.cbr_cyc_to_tsc > 1.25
            {
                return true;
            }
            result = Some(cyc_to_tsc);
            true
        });
        // Unused here: the look-ahead's TSC and TMA state.
        let _ = (data.tsc_timestamp, data.ctc_timestamp);
        if let Some(c) = result {
            self.calc_cyc_to_tsc = c;
            self.have_calc_cyc_to_tsc = true;
        }
    }

    // ---- PSB+ -------------------------------------------------------------------

    /// Walks PSB+ when already in sync.
    fn walk_psbend(&mut self) -> Res {
        self.in_psb = true;
        let r = loop {
            if let Err(e) = self.get_next_packet() {
                break Err(e);
            }
            match self.packet.kind {
                Kind::Psbend => break Ok(()),
                Kind::TipPgd
                | Kind::TipPge
                | Kind::Tip
                | Kind::Tnt
                | Kind::TraceStop
                | Kind::Bad
                | Kind::Psb
                | Kind::Ptwrite
                | Kind::PtwriteIp
                | Kind::Exstop
                | Kind::ExstopIp
                | Kind::Mwait
                | Kind::Pwre
                | Kind::Pwrx
                | Kind::Bbp
                | Kind::Bip
                | Kind::Bep
                | Kind::BepIp
                | Kind::Cfe
                | Kind::CfeIp
                | Kind::Evd => {
                    self.have_tma = false;
                    break Err(Stop::Again);
                }
                Kind::Ovf => break self.overflow(),
                Kind::Tsc => self.calc_tsc_timestamp(),
                Kind::Tma => self.calc_tma(),
                Kind::Cbr => self.calc_cbr(),
                Kind::ModeExec => self.mode_exec_status(),
                Kind::Pip => self.set_pip(),
                Kind::Fup => {
                    self.pge = true;
                    if self.packet.count != 0 {
                        self.set_last_ip();
                        self.psb_ip = self.last_ip;
                    }
                }
                Kind::ModeTsx => self.tx_flags = (self.packet.payload as u32) & sflags::IN_TX,
                Kind::Mtc => {
                    self.calc_mtc_timestamp();
                    if self.period_type == PeriodType::Mtc {
                        self.state.type_ |= ty::INSTRUCTION;
                    }
                }
                Kind::Cyc => self.calc_cyc_timestamp(),
                Kind::Vmcs | Kind::Mnt | Kind::Pad => {}
            }
        };
        self.in_psb = false;
        r
    }

    fn walk_fup_tip(&mut self) -> Res {
        if self.tx_flags & sflags::ABORT_TX != 0 {
            self.tx_flags = 0;
            self.state.flags &= !sflags::IN_TX;
            self.state.flags |= sflags::ABORT_TX;
        } else {
            self.state.flags |= sflags::ASYNC;
        }
        loop {
            self.get_next_packet()?;
            match self.packet.kind {
                Kind::Tnt
                | Kind::Fup
                | Kind::TraceStop
                | Kind::Psb
                | Kind::Tsc
                | Kind::Tma
                | Kind::ModeTsx
                | Kind::Bad
                | Kind::Psbend
                | Kind::Ptwrite
                | Kind::PtwriteIp
                | Kind::Exstop
                | Kind::ExstopIp
                | Kind::Mwait
                | Kind::Pwre
                | Kind::Pwrx
                | Kind::Bbp
                | Kind::Bip
                | Kind::Bep
                | Kind::BepIp
                | Kind::Cfe
                | Kind::CfeIp
                | Kind::Evd => {
                    self.pkt_state = PktState::ErrResync;
                    self.pkt_step = 0;
                    return Err(Stop::Mismatch);
                }
                Kind::Cbr => self.calc_cbr(),
                Kind::Ovf => return self.overflow(),
                Kind::TipPgd => {
                    self.state.from_ip = self.ip;
                    if self.packet.count == 0 {
                        self.state.to_ip = 0;
                    } else {
                        self.set_ip();
                        self.state.to_ip = self.ip;
                    }
                    self.pge = false;
                    self.continuous_period = false;
                    self.state.type_ |= ty::TRACE_END;
                    self.update_nr();
                    return Ok(());
                }
                Kind::TipPge => {
                    self.pge = true;
                    self.state.from_ip = 0;
                    if self.packet.count == 0 {
                        self.state.to_ip = 0;
                    } else {
                        self.set_ip();
                        self.state.to_ip = self.ip;
                    }
                    self.state.type_ |= ty::TRACE_BEGIN;
                    self.mtc_cyc_cnt_pge();
                    self.set_nr();
                    return Ok(());
                }
                Kind::Tip => {
                    self.state.from_ip = self.ip;
                    if self.packet.count == 0 {
                        self.state.to_ip = 0;
                    } else {
                        self.set_ip();
                        self.state.to_ip = self.ip;
                    }
                    self.update_nr();
                    self.sample_iflag_chg();
                    return Ok(());
                }
                Kind::Pip => self.pip_payload = self.packet.payload,
                Kind::Mtc => {
                    self.calc_mtc_timestamp();
                    if self.period_type == PeriodType::Mtc {
                        self.state.type_ |= ty::INSTRUCTION;
                    }
                }
                Kind::Cyc => self.calc_cyc_timestamp(),
                Kind::ModeExec => self.mode_exec(),
                Kind::Vmcs | Kind::Mnt | Kind::Pad => {}
            }
        }
    }

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

    fn psb(&mut self) -> Res {
        self.last_ip = 0;
        self.psb_ip = 0;
        self.have_last_ip = true;
        self.stack.clear();
        self.walk_psbend()?;
        self.state.type_ = ty::PSB_EVT;
        self.state.from_ip = self.psb_ip;
        self.state.to_ip = 0;
        Ok(())
    }

    fn fup_in_psb(&mut self, code: &mut dyn Walker) -> Res {
        if self.ip != self.last_ip {
            let r = self.walk_fup(code);
            if r != Err(Stop::Again) {
                return r;
            }
        }
        self.pkt_state = PktState::InSync;
        if self.psb().is_err() {
            self.pkt_state = PktState::ErrResync;
            return Err(Stop::Mismatch);
        }
        Ok(())
    }

    /// A PSB+ whose FUP tells where execution is: walk to it first.
    fn psb_with_fup(&mut self, code: &mut dyn Walker) -> Option<Res> {
        if !self.p.branch_enable {
            return None;
        }
        let mut fup: Option<Pkt> = None;
        let mut after_psbend = 0u32;
        self.pkt_lookahead(|_, p, _, _| match p.kind {
            Kind::Pad
            | Kind::Mnt
            | Kind::Tsc
            | Kind::Tma
            | Kind::ModeExec
            | Kind::ModeTsx
            | Kind::Mtc
            | Kind::Cyc
            | Kind::Vmcs
            | Kind::Cbr
            | Kind::Pip => {
                if after_psbend != 0 {
                    after_psbend -= 1;
                    if after_psbend == 0 {
                        return true;
                    }
                }
                false
            }
            Kind::Fup => {
                if after_psbend != 0 {
                    return true;
                }
                if fup.is_some() || p.count == 0 {
                    return true;
                }
                fup = Some(*p);
                false
            }
            Kind::Psbend => {
                if fup.is_none() {
                    return true;
                }
                // Look on for a TIP.PGE.
                after_psbend = 6;
                false
            }
            Kind::TipPge => {
                // A FUP in PSB+ followed by TIP.PGE is ignored.
                if after_psbend != 0 {
                    fup = None;
                }
                true
            }
            Kind::Ptwrite
            | Kind::PtwriteIp
            | Kind::Exstop
            | Kind::ExstopIp
            | Kind::Mwait
            | Kind::Pwre
            | Kind::Pwrx
            | Kind::Bbp
            | Kind::Bip
            | Kind::Bep
            | Kind::BepIp
            | Kind::Cfe
            | Kind::CfeIp
            | Kind::Evd => {
                if after_psbend != 0 {
                    after_psbend -= 1;
                    return after_psbend == 0;
                }
                true
            }
            _ => true,
        });
        let fup = fup?;
        self.packet = fup;
        self.set_last_ip();
        self.pkt_state = PktState::FupInPsb;
        Some(self.fup_in_psb(code))
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

    fn have_ip(&self) -> bool {
        self.packet.count != 0
            && (self.have_last_ip || self.packet.count == 3 || self.packet.count == 6)
    }

    /// Walks PSB+ to get in sync.
    fn walk_psb(&mut self) -> Res {
        self.in_psb = true;
        let r = loop {
            if let Err(e) = self.get_next_packet() {
                break Err(e);
            }
            match self.packet.kind {
                Kind::TipPgd
                | Kind::TipPge
                | Kind::Tip
                | Kind::Ptwrite
                | Kind::PtwriteIp
                | Kind::Exstop
                | Kind::ExstopIp
                | Kind::Mwait
                | Kind::Pwre
                | Kind::Pwrx
                | Kind::Bbp
                | Kind::Bip
                | Kind::Bep
                | Kind::BepIp
                | Kind::Cfe
                | Kind::CfeIp
                | Kind::Evd => {
                    if self.packet.kind == Kind::TipPgd {
                        self.continuous_period = false;
                    }
                    break Err(Stop::Mismatch);
                }
                Kind::Fup => {
                    self.pge = true;
                    if self.have_ip() {
                        self.set_ip();
                        self.psb_ip = self.ip;
                    }
                }
                Kind::Mtc => self.calc_mtc_timestamp(),
                Kind::Tsc => self.calc_tsc_timestamp(),
                Kind::Tma => self.calc_tma(),
                Kind::Cyc => self.calc_cyc_timestamp(),
                Kind::Cbr => self.calc_cbr(),
                Kind::Pip => self.set_pip(),
                Kind::ModeExec => self.mode_exec_status(),
                Kind::ModeTsx => self.tx_flags = (self.packet.payload as u32) & sflags::IN_TX,
                Kind::TraceStop | Kind::Tnt => {
                    if self.packet.kind == Kind::TraceStop {
                        self.pge = false;
                        self.continuous_period = false;
                        self.tx_flags = 0;
                    }
                    self.have_tma = false;
                    self.pkt_state = if self.ip != 0 {
                        PktState::InSync
                    } else {
                        PktState::ErrResync
                    };
                    break Err(Stop::Mismatch);
                }
                Kind::Bad => break self.bug(),
                Kind::Ovf => break self.overflow(),
                Kind::Psbend => break Ok(()),
                Kind::Psb | Kind::Vmcs | Kind::Mnt | Kind::Pad => {}
            }
        };
        self.in_psb = false;
        r
    }

    fn walk_to_ip(&mut self) -> Res {
        loop {
            self.get_next_packet()?;
            match self.packet.kind {
                Kind::TipPgd => {
                    self.continuous_period = false;
                    self.pge = false;
                    if self.have_ip() {
                        self.set_ip();
                    }
                    if self.ip == 0 {
                        continue;
                    }
                    self.state.type_ |= ty::TRACE_END;
                    return Ok(());
                }
                Kind::TipPge => {
                    self.pge = true;
                    self.mtc_cyc_cnt_pge();
                    if self.have_ip() {
                        self.set_ip();
                    }
                    if self.ip == 0 {
                        continue;
                    }
                    self.state.type_ |= ty::TRACE_BEGIN;
                    return Ok(());
                }
                Kind::Tip => {
                    self.pge = true;
                    if self.have_ip() {
                        self.set_ip();
                    }
                    if self.ip == 0 {
                        continue;
                    }
                    return Ok(());
                }
                Kind::Fup => {
                    if self.have_ip() {
                        self.set_ip();
                    }
                    if self.ip != 0 {
                        return Ok(());
                    }
                }
                Kind::Mtc => self.calc_mtc_timestamp(),
                Kind::Tsc => self.calc_tsc_timestamp(),
                Kind::Tma => self.calc_tma(),
                Kind::Cyc => self.calc_cyc_timestamp(),
                Kind::Cbr => self.calc_cbr(),
                Kind::Pip => self.set_pip(),
                Kind::ModeExec => self.mode_exec_status(),
                Kind::ModeTsx => self.tx_flags = (self.packet.payload as u32) & sflags::IN_TX,
                Kind::Ovf => return self.overflow(),
                Kind::Bad => return self.bug(),
                Kind::TraceStop => {
                    self.pge = false;
                    self.continuous_period = false;
                    self.tx_flags = 0;
                    self.have_tma = false;
                }
                Kind::Psb => {
                    self.state.psb_offset = self.pos;
                    self.psb_ip = 0;
                    self.last_ip = 0;
                    self.have_last_ip = true;
                    self.stack.clear();
                    self.walk_psb()?;
                    self.state.type_ = ty::PSB_EVT;
                    self.state.from_ip = self.psb_ip;
                    self.state.to_ip = 0;
                    return Ok(());
                }
                _ => {}
            }
        }
    }

    fn sync_ip(&mut self) -> Res {
        self.clear_fup_event();
        self.overflow = false;
        if !self.p.branch_enable {
            self.pkt_state = PktState::InSync;
            self.state.type_ = 0;
            return Ok(());
        }
        self.walk_to_ip()?;
        if self.state.type_ & ty::PSB_EVT != 0 && self.ip == 0 {
            return Ok(());
        }
        self.pkt_state = if self.hop {
            PktState::Resample
        } else {
            PktState::InSync
        };
        self.state.from_ip = 0;
        self.state.to_ip = self.ip;
        Ok(())
    }

    /// The part of a PSB at the end of the current buffer.
    fn part_psb(&self) -> usize {
        let buf = &self.data[self.at.min(self.data.len())..];
        for i in (1..PSB.len()).rev() {
            if i > buf.len() {
                continue;
            }
            if buf[buf.len() - i..] == PSB[..i] {
                return i;
            }
        }
        0
    }

    fn get_split_psb(&mut self, part: usize) -> Res {
        self.pos += self.len() as u64;
        self.at = self.data.len();
        self.get_next_data(false)?;
        let rest = PSB.len() - part;
        if rest > self.data.len() || self.data[..rest] != PSB[part..] {
            return Ok(());
        }
        self.pos -= part as u64;
        self.split_rest = Some((self.data, rest));
        self.split_psb = true;
        self.at = 0;
        Ok(())
    }

    fn scan_for_psb(&mut self) -> Res {
        loop {
            if self.len() == 0 {
                self.get_next_data(false)?;
            }
            if self.split_psb {
                self.pkt_step = 0;
                return self.get_next_packet();
            }
            let start = self.at.min(self.data.len());
            match find_psb(&self.data[start..]) {
                Some(n) => {
                    self.pkt_step = n;
                    return self.get_next_packet();
                }
                None => {
                    let part = self.part_psb();
                    if part != 0 {
                        self.get_split_psb(part)?;
                    } else {
                        self.pos += self.len() as u64;
                        self.at = self.data.len();
                    }
                }
            }
        }
    }

    fn sync(&mut self, code: &mut dyn Walker) -> Res {
        self.pge = false;
        self.continuous_period = false;
        self.have_last_ip = false;
        self.last_ip = 0;
        self.psb_ip = 0;
        self.ip = 0;
        self.stack.clear();
        self.scan_for_psb()?;
        self.have_last_ip = true;
        self.pkt_state = PktState::InSync;
        self.walk_psb()?;
        let _ = code;
        self.state.type_ = ty::PSB_EVT;
        self.state.from_ip = self.psb_ip;
        self.state.to_ip = 0;
        if self.ip != 0 {
            // In hop mode, resample to get the PSB FUP's IP as an instruction.
            self.pkt_state = if self.hop {
                PktState::Resample
            } else {
                PktState::InSync
            };
        }
        Ok(())
    }

    fn est_timestamp(&self) -> u64 {
        let mut est = self.sample_insn_cnt << 1;
        if self.cbr != 0 && self.p.max_non_turbo_ratio != 0 {
            est = est.wrapping_mul(u64::from(self.p.max_non_turbo_ratio));
            est /= u64::from(self.cbr);
        }
        self.sample_timestamp.wrapping_add(est)
    }

    /// The next state; at the end of the trace, a state whose error is
    /// [`Error::NoData`].
    pub fn decode(&mut self, code: &mut dyn Walker) -> &State {
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

    /// The fast path of perf's walk through a TNT packet (or towards a TIP): the
    /// states the next calls of [`Decoder::decode`] would return while each is
    /// one step of the code with nothing but the step changing (no packet read,
    /// no time change, no event): at most `max` of them into `out`, the decoder
    /// left as if it had returned them one by one (its state is the last one's).
    ///
    /// Applies when instructions are sampled at every instruction (each
    /// instruction a step) or not at all (each branch that perf reports a
    /// step); stops before anything else: an indirect branch, a return that the
    /// return stack cannot take, the TNT packet's end, an unconditional branch
    /// that perf would check for a loop, and a branch from `kernel_start` or
    /// above to below it (the sample time is then estimated). 0 when the fast
    /// path does not apply at all.
    pub fn take_run<W: Walker + ?Sized>(
        &mut self,
        code: &mut W,
        kernel_start: u64,
        max: usize,
        out: &mut Vec<Step>,
    ) -> usize {
        out.clear();
        let every_insn = match self.period_type {
            PeriodType::Instructions if self.period == 1 => true,
            PeriodType::None => false,
            _ => return 0,
        };
        let applies = self.state.err.is_none()
            && !self.hop
            && !self.emulated_ptwrite
            && !self.sample_cyc
            && self.cbr == self.cbr_seen
            && self.timestamp == self.sample_timestamp;
        if !applies {
            return 0;
        }
        // A TIP's target is taken without a state of its own only while it
        // changes neither VMX root mode nor the interrupt flag.
        let tip_ok = (self.pip_payload & 1 != 0) == self.nr
            && self.nr == self.next_nr
            && self.iflag == self.next_iflag;
        let is_tip = |p: &Pkt| tip_ok && p.kind == Kind::Tip && p.count != 0;
        let crosses = |from: u64, to: u64| from >= kernel_start && to != 0 && to < kernel_start;
        let mut b = RunBlock::default();
        let data = self.data;
        // The last branch walked after the last state (see `TntWalk::tail`).
        let mut tail = None;
        while out.len() < max {
            if self.pkt_state == PktState::InSync {
                // perf's walk_trace: a TNT packet is walked through, a TIP walked
                // towards; any other packet is the slow path's.
                if !self.next_packet_if(|p| (p.kind == Kind::Tnt && p.count != 0) || is_tip(p)) {
                    break;
                }
                if self.packet.kind == Kind::Tnt {
                    self.tnt = self.packet;
                    self.pkt_state = PktState::Tnt;
                } else {
                    self.set_last_ip();
                    self.pkt_state = PktState::Tip;
                }
            }
            let in_tnt = match self.pkt_state {
                PktState::Tnt | PktState::TntCont => true,
                PktState::Tip => false,
                // Towards a TIP.PGD: plain instructions only (a branch may leave the
                // filter region).
                PktState::TipPgd if every_insn => false,
                _ => break,
            };
            if in_tnt && self.tnt.count != 0 {
                // The conditional branches first, in one go.
                let mut w = TntWalk {
                    ip: self.ip,
                    payload: self.tnt.payload,
                    count: self.tnt.count,
                    cont: self.pkt_state == PktState::TntCont,
                    every_insn,
                    return_compression: self.p.return_compression,
                    kernel_start,
                    no_progress: self.no_progress,
                    stack: Some(&mut self.stack.ips),
                    ret_addr: 0,
                    tot: self.tot_insn_cnt,
                    blocks: 0,
                    updated: false,
                    tail: None,
                    ahead: if self.split_psb {
                        &[]
                    } else {
                        data.get(self.at + self.pkt_step..).unwrap_or(&[])
                    },
                    taken: 0,
                };
                let steps = out.len();
                code.follow_tnt(&mut w, max, out);
                if w.blocks != 0 {
                    if w.tail.is_some() {
                        tail = w.tail;
                    } else if out.len() > steps {
                        tail = None;
                    }
                }
                if w.taken != 0 {
                    // Moved on to the last TNT packet the walk took (a byte).
                    let last = self.at + self.pkt_step + w.taken - 1;
                    self.last_packet_type = Kind::Tnt;
                    self.pos += (last - self.at) as u64;
                    self.at = last;
                    self.packet = packet::tnt8(data[last]).unwrap_or(self.packet);
                    self.pkt_len = 1;
                    self.pkt_step = 1;
                }
                if w.blocks != 0 {
                    let (tot, ip, payload, count, cont) = (w.tot, w.ip, w.payload, w.count, w.cont);
                    let (no_progress, ret_addr, updated) = (w.no_progress, w.ret_addr, w.updated);
                    self.count_insns(tot - self.tot_insn_cnt);
                    if every_insn {
                        self.period_insn_cnt = 0;
                    }
                    if updated {
                        self.update_sample_time();
                    }
                    if ret_addr != 0 {
                        self.ret_addr = ret_addr;
                    }
                    self.mtc_insn = true;
                    self.no_progress = no_progress;
                    self.ip = ip;
                    self.tnt.payload = payload;
                    self.tnt.count = count;
                    self.pkt_state = match (count, cont) {
                        (0, _) => PktState::InSync,
                        (_, true) => PktState::TntCont,
                        (_, false) => PktState::Tnt,
                    };
                    continue;
                }
            }
            if !code.next_block(self.ip, &mut b) {
                break;
            }
            let plain = b.ninsn - 1;
            let insn = b.last;
            // What the branch does, decided before anything moves: its target, or
            // `None` if the run cannot take it. Conditional branches and
            // compressed returns are follow_tnt's: one it left is not taken here.
            let direct_to = b
                .last_ip
                .wrapping_add(u64::from(insn.length))
                .wrapping_add(insn.rel as i64 as u64);
            let to_ip = match (insn.branch, insn.op) {
                (Branch::Conditional, _) => None,
                (_, Op::Ret) if in_tnt => None,
                // perf's loop check counts unconditional branches that follow
                // each other (plain instructions walked one at a time reset it).
                (Branch::Unconditional, _) => (self.pkt_state != PktState::TipPgd
                    && (self.no_progress == 0 || (every_insn && plain != 0)))
                    .then_some(direct_to),
                // Indirect: the TIP's target, walked towards or deferred after the
                // TNT bits.
                _ if self.pkt_state == PktState::Tip => tip_ok.then_some(self.last_ip),
                _ if in_tnt => {
                    let last_ip = self.last_ip;
                    let deferred = self
                        .next_packet_if(|p| is_tip(p) && !crosses(b.last_ip, calc_ip(p, last_ip)));
                    deferred.then(|| {
                        self.set_last_ip();
                        self.last_ip
                    })
                }
                _ => None,
            }
            .filter(|&to| !crosses(b.last_ip, to));
            let Some(to_ip) = to_ip else {
                // The plain instructions before it still make states; the walk
                // stops at the branch, which the next decode takes.
                code.stop_in_block(&b, if every_insn { plain } else { 0 });
                if every_insn && plain != 0 {
                    out.push(Step {
                        plain,
                        plain_at: b.plain_at,
                        tot_insn_cnt: self.tot_insn_cnt + u64::from(plain),
                        ..Step::default()
                    });
                    self.after_plain_steps(plain, b.last_ip);
                }
                break;
            };
            self.mtc_insn = true;
            let plain = if every_insn { plain } else { 0 };
            if every_insn {
                if plain != 0 {
                    self.after_plain_steps(plain, b.last_ip);
                }
                self.count_insns(1);
                self.period_insn_cnt = 0;
            } else {
                self.count_insns(u64::from(b.ninsn));
            }
            let type_ = ty::BRANCH | if every_insn { ty::INSTRUCTION } else { 0 };
            // The return stack as perf's walk keeps it.
            match insn.op {
                Op::Call if insn.branch != Branch::Unconditional || insn.rel != 0 => self
                    .stack
                    .push(b.last_ip.wrapping_add(u64::from(insn.length))),
                Op::Ret => self.ret_addr = self.stack.pop(),
                _ => {}
            }
            if insn.branch == Branch::Unconditional {
                self.no_progress = 1;
            } else {
                self.no_progress = 0;
                if self.pkt_state == PktState::Tip {
                    self.pkt_state = PktState::InSync;
                }
            }
            if to_ip != 0 {
                self.ip = to_ip;
            }
            if self.pkt_state.sample_time() {
                self.update_sample_time();
            }
            out.push(Step {
                plain,
                plain_at: b.plain_at,
                from_ip: b.last_ip,
                to_ip,
                tot_insn_cnt: self.tot_insn_cnt,
                type_,
                op: insn.op,
                len: insn.length,
                insn: insn.buf,
            });
            tail = None;
        }
        let Some(&last) = out.last() else {
            if let Some((op, len, insn)) = tail {
                (self.state.insn_op, self.state.insn_len, self.state.insn) = (op, len, insn);
            }
            return 0;
        };
        // The decoder's state is the last state's.
        if last.type_ != 0 {
            self.state.type_ = last.type_;
            self.state.from_ip = last.from_ip;
            self.state.to_ip = last.to_ip;
            self.state.insn_op = last.op;
            self.state.insn_len = last.len;
            self.state.insn = last.insn;
        } else {
            let p = code
                .plain_insns(last.plain_at, last.plain)
                .last()
                .copied()
                .unwrap_or_default();
            self.state.type_ = ty::INSTRUCTION;
            self.state.from_ip = p.ip;
            self.state.to_ip = 0;
            self.state.insn_op = Op::Other;
            self.state.insn_len = p.len;
            self.state.insn = p.bytes;
        }
        if let Some((op, len, insn)) = tail {
            (self.state.insn_op, self.state.insn_len, self.state.insn) = (op, len, insn);
        }
        self.state.flags = if self.have_cyc { 0 } else { sflags::SAMPLE_IPC };
        self.state.timestamp = self.sample_timestamp;
        self.state.est_timestamp = self.est_timestamp();
        self.state.tot_insn_cnt = self.tot_insn_cnt;
        self.state.tot_cyc_cnt = self.sample_tot_cyc_cnt;
        out.len()
    }

    /// `n` plain instructions walked, each a state of its own, up to `ip`.
    fn after_plain_steps(&mut self, n: u32, ip: u64) {
        self.mtc_insn = true;
        self.count_insns(u64::from(n));
        self.period_insn_cnt = 0;
        self.no_progress = 0;
        self.ip = ip;
        if self.pkt_state.sample_time() {
            self.update_sample_time();
        }
    }

    /// Takes the TNT packet's next bit (perf's walk of a conditional branch or
    /// a compressed return).
    fn tnt_bit(&mut self) {
        self.tnt.count -= 1;
        self.pkt_state = if self.tnt.count != 0 {
            PktState::TntCont
        } else {
            PktState::InSync
        };
        self.tnt.payload <<= 1;
    }

    /// Moves on to the last PSB whose TSC is before `timestamp` (perf's
    /// `intel_pt_fast_forward`, for time ranges): first to the last buffer that
    /// starts before it, then PSB by PSB.
    pub fn fast_forward(&mut self, timestamp: u64) {
        let mut buf_timestamp = 0;
        for b in self.bufs.iter().skip(self.next_buf_idx) {
            if b.data.is_empty() {
                continue;
            }
            let Some(tsc) = find_psb(b.data).and_then(|o| next_tsc(&b.data[o..])) else {
                continue;
            };
            if tsc_8b(tsc, b.reference) < timestamp {
                buf_timestamp = b.reference;
            } else {
                break;
            }
        }
        if buf_timestamp != 0 {
            loop {
                self.pos += self.len() as u64;
                self.at = self.data.len();
                self.split_psb = false;
                match self.get_next_data(true) {
                    Ok(()) | Err(Stop::Link) => {}
                    Err(_) => return,
                }
                if self.buf_timestamp == buf_timestamp {
                    break;
                }
            }
        }
        if self.data.is_empty() || self.split_psb {
            return;
        }
        let Some(first) = find_psb(&self.data[self.at.min(self.data.len())..]) else {
            return;
        };
        let mut off = self.at + first;
        while let Some(tsc) = next_tsc(&self.data[off..]) {
            if tsc_8b(tsc, self.buf_timestamp) >= timestamp {
                break;
            }
            self.pos += (off - self.at) as u64;
            self.at = off;
            self.pkt_step = 0;
            self.pd = None;
            self.reposition();
            match pt_decoder::packet::find_psb_forward(self.data, off + 1) {
                Some(n) => off = n,
                None => break,
            }
        }
    }
}

/// The TSC in the PSB+ at the start of `buf` (perf's `intel_pt_next_tsc`).
fn next_tsc(buf: &[u8]) -> Option<u64> {
    let mut pd = packet::decoder(buf);
    let mut at = 0;
    while at < buf.len() {
        let (p, n) = packet::decode(&mut pd, buf, at)?;
        match p.kind {
            Kind::Tsc => return Some(p.payload),
            Kind::Psbend => return None,
            _ => at += n,
        }
    }
    None
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
