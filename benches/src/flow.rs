//! Generated programs and their traces for the flow-decoder benchmarks (ptxed).
//!
//! * [`tnt_loop`]: a five-instruction loop driven by TNT-64 packets only.
//! * [`calls`]: a dispatch loop that jumps through a register into stubs in four
//!   address regions; each stub makes direct calls and calls through a register, all
//!   returning with compressed returns, and jumps back through a register. Its TIPs use
//!   every IP compression (16, 32 and 48-bit updates, sign-extended 48 bits, full), and
//!   the trace has CYC and MTC packets, and PSB+ (PSB, TSC, TMA, MODE.Exec, FUP, PSBEND)
//!   every 4 KiB.
//!
//! Both know how many instructions their trace executes, so benchmarks can report
//! instructions per second.

use pt_decoder::config::Config;
use pt_decoder::flow::{Block, BlockDecoder, FlowOptions, InsnDecoder, InsnInfo};
use pt_decoder::image::Image;
use pt_encoder::packet::{ExecMode, IpCompression, IpPayload, LastIp, ModeExec, Packet, Tnt};
use pt_encoder::IpPacketKind;

use crate::{Rng, PSB_PERIOD};

/// A generated program and its trace.
#[derive(Clone, Debug)]
pub struct FlowTrace {
    /// The trace (starts with PSB+ and TIP.PGE or a PSB+ FUP).
    pub trace: Vec<u8>,
    /// The code: `(address, bytes)` per section.
    pub sections: Vec<(u64, Vec<u8>)>,
    /// Instructions the trace executes.
    pub insns: u64,
}

impl FlowTrace {
    /// The code as a decoder image.
    pub fn image(&self) -> Image {
        let mut image = Image::new();
        for (i, (addr, bytes)) in self.sections.iter().enumerate() {
            image
                .add_bytes(*addr, bytes.clone(), &format!("s{i}"))
                .expect("generated sections do not overlap");
        }
        image
    }
}

/// Where the main code lives.
pub const MAIN: u64 = 0x40_1000;

fn put(buf: &mut Vec<u8>, p: &Packet) {
    pt_encoder::encode_to_vec(p, buf).expect("generator packet");
}

/// `L: add rax, 1; mov rbx, rax; test rax, rax; nop; jnz L`, taken about `insns / 5`
/// times: one PSB+, TIP.PGE, then TNT-64 packets of 47 taken branches each.
pub fn tnt_loop(insns: u64) -> FlowTrace {
    let code = vec![
        0x48, 0x83, 0xc0, 0x01, 0x48, 0x89, 0xc3, 0x48, 0x85, 0xc0, 0x90, 0x75, 0xf3,
    ];
    let packets = (insns / 5).div_ceil(47).max(1);
    let mut trace = Vec::with_capacity(packets as usize * 8 + 64);
    put(&mut trace, &Packet::Psb);
    put(&mut trace, &Packet::Psbend);
    put(
        &mut trace,
        &Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)),
    );
    put(
        &mut trace,
        &Packet::Ip(
            IpPacketKind::TipPge,
            IpPayload::new(IpCompression::Sext48, MAIN),
        ),
    );
    let tnt = Tnt::from_results(std::iter::repeat_n(true, 47)).expect("47 bits");
    for _ in 0..packets {
        put(&mut trace, &Packet::Tnt64(tnt));
    }
    FlowTrace {
        trace,
        sections: vec![(MAIN, code)],
        // The trace ends after the last jnz: the instructions up to it.
        insns: packets * 47 * 5,
    }
}

/// Stub code, the same at every address (all branches are relative):
///
/// ```text
/// E:  call F           ; direct; return compressed
///     call rbx         ; rbx = G: TIP
///     sub rdx, 1
///     jnz E            ; TNT
///     jmp rcx          ; rcx = M: TIP
/// F:  nop
///     ret
/// G:  add rax, 1
///     ret
/// ```
fn stub() -> Vec<u8> {
    vec![
        0xe8, 0x0a, 0x00, 0x00, 0x00, // call F
        0xff, 0xd3, // call rbx
        0x48, 0x83, 0xea, 0x01, // sub rdx, 1
        0x75, 0xf3, // jnz E
        0xff, 0xe1, // jmp rcx
        0x90, 0xc3, // F: nop; ret
        0x48, 0x83, 0xc0, 0x01, 0xc3, // G: add rax, 1; ret
    ]
}
const STUB_G: u64 = 17;

/// The main loop: `M: add rax, 1; call FM; jmp rsi; FM: nop; ret` (rsi = a stub's E).
fn main_code() -> Vec<u8> {
    vec![
        0x48, 0x83, 0xc0, 0x01, // add rax, 1
        0xe8, 0x02, 0x00, 0x00, 0x00, // call FM
        0xff, 0xe6, // jmp rsi
        0x90, 0xc3, // FM: nop; ret
    ]
}

/// The stubs: one beside the main loop (16-bit updates), one in the low 4 GiB (32-bit),
/// one in a shared-library region (48-bit update) and one in the kernel (sign-extended).
const STUBS: [u64; 4] = [
    MAIN + 0x100,
    0x7fff_0000,
    0x7f12_3456_0000,
    0xffff_ffff_8100_0000,
];

/// Trace writer: TNT bits gathered into TNT-8 packets, IP compression by rotation.
struct Writer {
    buf: Vec<u8>,
    last: LastIp,
    bits: u64,
    nbits: u32,
    tips: u64,
    tsc: u64,
    ctc: u8,
    next_psb: usize,
    rng: Rng,
}

impl Writer {
    fn tnt(&mut self, taken: bool) {
        self.bits = self.bits << 1 | u64::from(taken);
        self.nbits += 1;
        if self.nbits == Tnt::MAX_SHORT {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.nbits > 0 {
            let tnt = Tnt::from_payload(1 << self.nbits | self.bits).expect("stop bit");
            put(&mut self.buf, &Packet::Tnt8(tnt));
            self.bits = 0;
            self.nbits = 0;
        }
    }

    /// A TIP to `ip`: the most compact payload, or now and then the full IP.
    fn tip(&mut self, ip: u64) {
        self.flush();
        self.tips += 1;
        if self.tips.is_multiple_of(4) {
            let value = 1 + self.rng.below(200);
            put(&mut self.buf, &Packet::Cyc { value });
        }
        if self.tips.is_multiple_of(16) {
            self.ctc = self.ctc.wrapping_add(1);
            put(&mut self.buf, &Packet::Mtc { ctc: self.ctc });
        }
        let mut p = self.last.compress(ip);
        if self.rng.below(8) == 0 {
            p = IpPayload::new(IpCompression::Full, ip);
        }
        self.last.update(p);
        put(&mut self.buf, &Packet::Ip(IpPacketKind::Tip, p));
    }

    /// PSB+ at `ip` if 4 KiB have passed since the last one.
    fn psb_plus(&mut self, ip: u64) {
        if self.buf.len() < self.next_psb {
            return;
        }
        self.flush();
        self.next_psb = self.buf.len() + PSB_PERIOD;
        self.tsc += 0x1_0000;
        put(&mut self.buf, &Packet::Psb);
        put(&mut self.buf, &Packet::Tsc { tsc: self.tsc });
        put(
            &mut self.buf,
            &Packet::Tma {
                ctc: u16::from(self.ctc),
                fc: 0,
            },
        );
        put(
            &mut self.buf,
            &Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)),
        );
        self.last.reset();
        let p = IpPayload::new(IpCompression::Sext48, ip);
        self.last.update(p);
        put(&mut self.buf, &Packet::Ip(IpPacketKind::Fup, p));
        put(&mut self.buf, &Packet::Psbend);
    }
}

/// The call workload with about `insns` instructions (see the [module docs](self)).
/// Each round of the main loop (5 instructions) jumps to a stub chosen at random,
/// which loops 1 to 4 times (8 instructions each) and jumps back (1 instruction).
pub fn calls(insns: u64) -> FlowTrace {
    let mut w = Writer {
        buf: Vec::with_capacity((insns / 4) as usize + 4096),
        last: LastIp::new(),
        bits: 0,
        nbits: 0,
        tips: 0,
        tsc: 0x10_0000,
        ctc: 0,
        next_psb: 0,
        rng: Rng::new(4),
    };
    let mut count = 0u64;
    while count < insns {
        // The first PSB+ enables tracing at M with its FUP.
        w.psb_plus(MAIN);
        // M: add; call FM; nop; ret (compressed: taken); jmp rsi.
        w.tnt(true);
        let e = STUBS[w.rng.below(STUBS.len() as u64) as usize];
        w.tip(e);
        count += 5;
        let rounds = 1 + w.rng.below(4);
        for r in 0..rounds {
            // call F; nop; ret; call rbx → G; add; ret; sub; jnz.
            w.tnt(true);
            w.tip(e + STUB_G);
            w.tnt(true);
            w.tnt(r + 1 < rounds);
            count += 8;
        }
        // jmp rcx → M.
        w.tip(MAIN);
        count += 1;
    }
    w.flush();
    let mut main = main_code();
    main.resize(0x100, 0xcc);
    main.extend_from_slice(&stub());
    let mut sections = vec![(MAIN, main)];
    for &s in &STUBS[1..] {
        sections.push((s, stub()));
    }
    FlowTrace {
        trace: w.buf,
        sections,
        insns: count,
    }
}

/// The block decoder as ptxed `--quiet` drives it (resyncing after errors); returns the
/// instructions it reconstructed.
pub fn quiet_blocks(trace: &[u8], image: &Image, config: &Config) -> u64 {
    let mut dec = BlockDecoder::new(trace, image, config, FlowOptions::default());
    let mut block = Block {
        ip: 0,
        end_ip: 0,
        mode: ExecMode::Unknown,
        ninsn: 0,
        speculative: false,
        truncated: false,
        isid: 0,
        class: None,
    };
    let mut insns = 0;
    let Ok(mut status) = dec.sync_forward() else {
        return 0;
    };
    loop {
        while status.event_pending {
            match dec.event() {
                Ok((_, s)) => status = s,
                Err(_) => return insns,
            }
        }
        if status.eos {
            return insns;
        }
        insns += dec.skip_blocks().0;
        let r = dec.next(&mut block);
        insns += u64::from(block.ninsn);
        match r {
            Ok(s) => status = s,
            Err(_) => match dec.sync_forward() {
                Ok(s) => status = s,
                Err(_) => return insns,
            },
        }
    }
}

/// The instruction decoder as ptxed `--quiet --insn-decoder` drives it.
pub fn quiet_insns(trace: &[u8], image: &Image, config: &Config) -> u64 {
    let mut dec = InsnDecoder::new(trace, image, config, FlowOptions::default());
    let mut insn = InsnInfo {
        ip: 0,
        size: 0,
        mode: ExecMode::Unknown,
        speculative: false,
        isid: 0,
        class: None,
    };
    let mut insns = 0;
    let Ok(mut status) = dec.sync_forward() else {
        return 0;
    };
    loop {
        while status.event_pending {
            match dec.event() {
                Ok((_, s)) => status = s,
                Err(_) => return insns,
            }
        }
        if status.eos {
            return insns;
        }
        insns += dec.skip_blocks();
        match dec.next(&mut insn) {
            Ok(s) => {
                insns += 1;
                status = s;
            }
            Err(pt_decoder::ErrorCode::EventIgnored) => status.event_pending = true,
            Err(_) => match dec.sync_forward() {
                Ok(s) => status = s,
                Err(_) => return insns + u64::from(insn.class.is_some()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pt_decoder::config::Config;
    use pt_decoder::flow::{BlockDecoder, FlowOptions};
    use pt_decoder::PacketDecoder;

    /// Instructions the block decoder reconstructs from the whole trace.
    fn decode(t: &FlowTrace) -> u64 {
        let image = t.image();
        let config = Config::default();
        let mut dec = BlockDecoder::new(&t.trace, &image, &config, FlowOptions::default());
        let mut block = pt_decoder::flow::Block {
            ip: 0,
            end_ip: 0,
            mode: ExecMode::Unknown,
            ninsn: 0,
            speculative: false,
            truncated: false,
            isid: 0,
            class: None,
        };
        let mut n = 0;
        let mut status = dec.sync_forward().expect("sync");
        loop {
            while status.event_pending {
                status = dec.event().expect("event").1;
            }
            if status.eos {
                return n;
            }
            let r = dec.next(&mut block);
            n += u64::from(block.ninsn);
            match r {
                Ok(s) => status = s,
                Err(pt_decoder::ErrorCode::Eos) => return n,
                Err(e) => panic!("decode error {e:?} after {n} instructions"),
            }
        }
    }

    #[test]
    fn loop_trace_decodes_to_its_count() {
        let t = tnt_loop(100_000);
        assert_eq!(decode(&t), t.insns);
    }

    #[test]
    fn call_trace_decodes_to_its_count_with_every_compression() {
        let t = calls(200_000);
        assert!(t.trace.len() > 4 * PSB_PERIOD);
        // The trace ends at a TIP to M: the instructions after it need trace.
        assert_eq!(decode(&t), t.insns);
        let mut d = PacketDecoder::new(&t.trace, &Config::default());
        d.sync_forward().unwrap();
        let mut seen = std::collections::HashSet::new();
        let (mut psb, mut mtc, mut cyc) = (0, 0, 0);
        for r in d {
            match r.unwrap().1 {
                Packet::Ip(IpPacketKind::Tip, p) => {
                    seen.insert(p.compression);
                }
                Packet::Psb => psb += 1,
                Packet::Mtc { .. } => mtc += 1,
                Packet::Cyc { .. } => cyc += 1,
                _ => {}
            }
        }
        assert_eq!(seen.len(), 5, "{seen:?}");
        assert!(psb >= 4 && mtc > 0 && cyc > 0);
    }
}
