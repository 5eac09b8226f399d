//! The decoder on hand-made traces, one concern per module (as libipt's
//! ptunit files are): each test encodes a few packets with `pt-encoder`, walks
//! them over a small code map ([`Code`]) and checks the states against what
//! perf's intel-pt-decoder.c returns for the same packets.
//!
//! - `sync`: PSB, the first IP, PSB+ when in sync.
//! - `flow`: TNT, returns, TIPs, TIP.PGE/TIP.PGD, FUP+TIP.
//! - `errors`: OVF, bad packets, code that does not match, the loop guard.
//! - `timing`: TSC, TMA, MTC, CYC, CBR.
//! - `sampling`: instruction periods.
//! - `events`: PTWRITE, power events, MODE.Exec and MODE.TSX.
//! - `buffers`: a trace over more than one buffer.
//! - `hop`: the quick modes.
//! - `fast_path`: `Decoder::take_run` against `decode`, state by state.

use super::*;
use pt_encoder::{IpCompression, IpPacketKind, IpPayload, Packet};
use pt_testkit::trace;
use std::collections::{BTreeMap, BTreeSet};

mod buffers;
mod errors;
mod events;
mod fast_path;
mod flow;
mod hop;
mod sampling;
mod sync;
mod timing;

/// 64-bit code at fixed addresses, perf's view of each instruction
/// (`decode::insn` over the bytes), and a [`Walker`] over it that walks as
/// perf's `intel_pt_walk_next_insn` does.
#[derive(Default)]
struct Code {
    insns: BTreeMap<u64, PerfInsn>,
    /// Each instruction's bytes, for an image of the same code.
    bytes: BTreeMap<u64, Vec<u8>>,
    /// Where the next instruction goes.
    at: u64,
    /// Addresses whose walk fails as one perf reported before (`-ENOENT`).
    known_bad: BTreeSet<u64>,
    /// The address filter's region, if the recording had one (for `pgd_ip`).
    filter: Option<std::ops::Range<u64>>,
    /// Walks asked for.
    walks: usize,
}

impl Code {
    fn new() -> Self {
        Self::default()
    }

    /// Places the next instructions at `ip`.
    fn at(&mut self, ip: u64) -> &mut Self {
        self.at = ip;
        self
    }

    /// The instruction of `bytes`, at the current address.
    fn put(&mut self, bytes: &[u8]) -> &mut Self {
        let i = pt_decoder::insn::decode(bytes, self.at, pt_encoder::ExecMode::Bit64)
            .expect("the test's instruction decodes");
        assert_eq!(usize::from(i.size), bytes.len(), "one instruction");
        self.insns.insert(self.at, PerfInsn::from_pt(&i, bytes));
        self.bytes.insert(self.at, bytes.to_vec());
        self.at += u64::from(i.size);
        self
    }

    fn rel(&self, len: u64, to: u64) -> i64 {
        to.wrapping_sub(self.at + len) as i64
    }

    fn nop(&mut self) -> &mut Self {
        self.put(&[0x90])
    }

    fn nops(&mut self, n: usize) -> &mut Self {
        for _ in 0..n {
            self.nop();
        }
        self
    }

    /// JZ to `to` (rel8 where it reaches, else rel32).
    fn jz(&mut self, to: u64) -> &mut Self {
        match i8::try_from(self.rel(2, to)) {
            Ok(r) => self.put(&[0x74, r as u8]),
            Err(_) => {
                let r = self.rel(6, to) as i32;
                let mut b = vec![0x0f, 0x84];
                b.extend(r.to_le_bytes());
                self.put(&b)
            }
        }
    }

    /// JMP to `to` (rel8 where it reaches, else rel32).
    fn jmp(&mut self, to: u64) -> &mut Self {
        match i8::try_from(self.rel(2, to)) {
            Ok(r) => self.put(&[0xeb, r as u8]),
            Err(_) => {
                let r = self.rel(5, to) as i32;
                let mut b = vec![0xe9];
                b.extend(r.to_le_bytes());
                self.put(&b)
            }
        }
    }

    /// CALL rel32 to `to`.
    fn call(&mut self, to: u64) -> &mut Self {
        let r = self.rel(5, to) as i32;
        let mut b = vec![0xe8];
        b.extend(r.to_le_bytes());
        self.put(&b)
    }

    fn ret(&mut self) -> &mut Self {
        self.put(&[0xc3])
    }

    fn jmp_rax(&mut self) -> &mut Self {
        self.put(&[0xff, 0xe0])
    }

    fn call_rax(&mut self) -> &mut Self {
        self.put(&[0xff, 0xd0])
    }

    fn ptwrite_eax(&mut self) -> &mut Self {
        self.put(&[0xf3, 0x0f, 0xae, 0xe0])
    }

    fn mwait(&mut self) -> &mut Self {
        self.put(&[0x0f, 0x01, 0xc9])
    }

    /// The same code as an image (a section per run of adjacent
    /// instructions), for the crate's own walker.
    fn image(&self) -> pt_decoder::image::Image {
        let mut im = pt_decoder::image::Image::new();
        let mut run: Option<(u64, Vec<u8>)> = None;
        for (&ip, b) in &self.bytes {
            match &mut run {
                Some((at, v)) if *at + v.len() as u64 == ip => v.extend_from_slice(b),
                _ => {
                    if let Some((at, v)) = run.take() {
                        im.add_bytes(at, v, "test").expect("a section");
                    }
                    run = Some((ip, b.clone()));
                }
            }
        }
        if let Some((at, v)) = run {
            im.add_bytes(at, v, "test").expect("a section");
        }
        im
    }

    /// A copy of the code so far (to hand to a decode while building on).
    fn done(&self) -> Code {
        Code {
            insns: self.insns.clone(),
            bytes: self.bytes.clone(),
            at: self.at,
            known_bad: self.known_bad.clone(),
            filter: self.filter.clone(),
            walks: 0,
        }
    }
}

impl Walker for Code {
    fn walk(
        &mut self,
        insn: &mut PerfInsn,
        ip: &mut u64,
        to_ip: u64,
        max_insn_cnt: u64,
        _nr: bool,
    ) -> Result<u64, WalkError> {
        self.walks += 1;
        insn.length = 0;
        if to_ip != 0 && *ip == to_ip {
            return Ok(0);
        }
        let mut cnt = 0;
        loop {
            if self.known_bad.contains(ip) {
                return Err(WalkError::Known);
            }
            // perf's walk keeps the IP it failed at, and no count.
            let Some(i) = self.insns.get(ip) else {
                return Err(WalkError::NoCode);
            };
            *insn = *i;
            cnt += 1;
            if insn.branch != Branch::None {
                return Ok(cnt);
            }
            if max_insn_cnt != 0 && cnt >= max_insn_cnt {
                return Ok(cnt);
            }
            *ip += u64::from(insn.length);
            if to_ip != 0 && *ip == to_ip {
                insn.length = 0;
                return Ok(cnt);
            }
        }
    }

    fn pgd_ip(&mut self, ip: u64) -> Option<bool> {
        self.filter.as_ref().map(|r| !r.contains(&ip))
    }
}

/// Params as a recording with branch tracing and return compression has them.
fn params() -> Params {
    Params {
        return_compression: true,
        branch_enable: true,
        ..Params::default()
    }
}

fn fup(ip: u64) -> Packet {
    trace::ip(IpPacketKind::Fup, ip)
}

fn tip(ip: u64) -> Packet {
    trace::ip(IpPacketKind::Tip, ip)
}

fn pge(ip: u64) -> Packet {
    trace::ip(IpPacketKind::TipPge, ip)
}

fn pgd(ip: u64) -> Packet {
    trace::ip(IpPacketKind::TipPgd, ip)
}

/// An IP packet with its IP compressed as `c` says.
fn ip_packet(kind: IpPacketKind, c: IpCompression, ip: u64) -> Packet {
    Packet::Ip(kind, IpPayload::new(c, ip))
}

/// TIP.PGD with the IP suppressed.
fn pgd_none() -> Packet {
    ip_packet(IpPacketKind::TipPgd, IpCompression::Suppressed, 0)
}

/// The trace of `packets` after PSB+ at `ip` (PSB, MODE.Exec, FUP, PSBEND).
fn after_psb(ip: u64, packets: &[Packet]) -> Vec<u8> {
    let mut all = trace::psb_at(ip).to_vec();
    all.extend_from_slice(packets);
    trace::encode(&all)
}

/// One buffer that starts the queue's trace.
fn one_buffer(data: &[u8]) -> Vec<Buffer<'_>> {
    vec![Buffer {
        data,
        consecutive: false,
        reference: 0,
        trace_nr: 1,
    }]
}

/// What a test mostly looks at in a state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Brief {
    type_: u32,
    from: u64,
    to: u64,
    err: Option<Error>,
}

/// The type, IPs and error of `s`.
fn brief(s: &State) -> Brief {
    Brief {
        type_: s.type_,
        from: s.from_ip,
        to: s.to_ip,
        err: s.err,
    }
}

/// A state of `type_` from `from` to `to`.
fn ok(type_: u32, from: u64, to: u64) -> Brief {
    Brief {
        type_,
        from,
        to,
        err: None,
    }
}

/// The next state.
fn next(d: &mut Decoder<'_>, code: &mut Code) -> State {
    *d.decode(code)
}

/// The states up to (not including) the end of the trace, at most 64.
fn all_states(d: &mut Decoder<'_>, code: &mut Code) -> Vec<State> {
    let mut out = Vec::new();
    for _ in 0..64 {
        let s = next(d, code);
        if s.err == Some(Error::NoData) {
            return out;
        }
        out.push(s);
    }
    panic!("the trace does not end: {out:?}");
}

/// The decoder's states of `data` (one buffer, `p`) over `code`, in brief.
fn briefs(p: Params, data: &[u8], code: &mut Code) -> Vec<Brief> {
    let mut d = Decoder::new(p, one_buffer(data));
    all_states(&mut d, code).iter().map(brief).collect()
}

// ---- arithmetic helpers ---------------------------------------------------------

/// CYC time is summed in floating point before it is truncated, as in perf: a
/// ratio of 1/49 ticks a cycle times 49 cycles is 0.999… in `double`; added to
/// any TSC of more than one tick it rounds to the next tick, as the MTC it was
/// measured against says.
#[test]
fn cycles_add_as_perf_adds_them() {
    let ratio = 1.0 / 49.0;
    assert!(49.0 * ratio < 1.0);
    assert_eq!(
        add_cycles(1_000_000_000_000_000, 49, ratio),
        1_000_000_000_000_001
    );
    assert_eq!(add_cycles(1000, 49, ratio), 1001);
    // From zero the sum is the product itself, truncated.
    assert_eq!(add_cycles(0, 49, ratio), 0);
    assert_eq!(add_cycles(1000, 10, 2.5), 1025);
}

/// `multdiv` does not overflow where `t * n` would.
#[test]
fn multdiv_without_overflow() {
    assert_eq!(multdiv(u64::MAX / 2, 4, 8), u64::MAX / 4);
    assert_eq!(multdiv(10, 3, 0), 0);
    assert_eq!(multdiv(1000, 2, 3), 666);
}

/// A TSC packet's 7 bytes take the upper byte of the reference nearest to it.
#[test]
fn tsc_8b_takes_the_nearest_wrap() {
    let r = 0x0100_0000_0000_0010;
    assert_eq!(tsc_8b(0x20, r), 0x0100_0000_0000_0020);
    // Just below the reference's 2^56 boundary: the previous epoch.
    assert_eq!(tsc_8b(0x00ff_ffff_ffff_fff0, r), 0x00ff_ffff_ffff_fff0);
    // A reference just below a wrap and a packet just after it.
    let r = 0x01ff_ffff_ffff_fff0;
    assert_eq!(tsc_8b(0x10, r), 0x0200_0000_0000_0010);
}

/// IP packets as perf rebuilds them (`intel_pt_calc_ip`): the compressed forms
/// take their upper bits from the last IP, the 6-byte form is sign-extended,
/// and a reserved IPBytes value gives no IP.
#[test]
fn ip_compression_as_perf_rebuilds_it() {
    let last = 0xffff_8000_1234_5678;
    let p = |count, payload| Pkt {
        kind: Kind::Tip,
        count,
        payload,
    };
    assert_eq!(calc_ip(&p(1, 0xabcd), last), 0xffff_8000_1234_abcd);
    assert_eq!(calc_ip(&p(2, 0x9999_0000), last), 0xffff_8000_9999_0000);
    assert_eq!(
        calc_ip(&p(3, 0x8000_0000_1000), last),
        0xffff_8000_0000_1000
    );
    assert_eq!(calc_ip(&p(3, 0x7fff_0000_1000), last), 0x7fff_0000_1000);
    assert_eq!(
        calc_ip(&p(4, 0x1111_2222_3333), last),
        0xffff_1111_2222_3333
    );
    assert_eq!(calc_ip(&p(6, 0x42), last), 0x42);
    assert_eq!(calc_ip(&p(5, 0x42), last), 0);
    assert_eq!(calc_ip(&p(0, 0x42), last), 0);
}

/// The harness walks as perf's walker does: up to and including a branch, up
/// to (not including) a given IP with the length left 0, or a given count.
#[test]
fn the_code_map_walks_as_perf_walks() {
    let mut c = Code::new();
    c.at(0x1000).nops(3).jz(0x1000);
    let mut insn = PerfInsn::default();
    let mut ip = 0x1000;
    assert_eq!(c.walk(&mut insn, &mut ip, 0, 0, false), Ok(4));
    assert_eq!(
        (ip, insn.op, insn.length, insn.rel),
        (0x1003, Op::Jcc, 2, -5)
    );
    let mut ip = 0x1000;
    assert_eq!(c.walk(&mut insn, &mut ip, 0x1002, 0, false), Ok(2));
    assert_eq!((ip, insn.length), (0x1002, 0));
    let mut ip = 0x1000;
    assert_eq!(c.walk(&mut insn, &mut ip, 0, 2, false), Ok(2));
    assert_eq!((ip, insn.length), (0x1001, 1));
    let mut ip = 0x2000;
    assert_eq!(
        c.walk(&mut insn, &mut ip, 0, 0, false),
        Err(WalkError::NoCode)
    );
}
