//! Generated programs and their traces for the flow-decoder benchmarks (ptxed).
//!
//! * [`tnt_loop`]: a five-instruction loop driven by TNT-64 packets only.
//! * [`calls`]: a dispatch loop that jumps through a register into stubs in four
//!   address regions; each stub makes direct calls and calls through a register, all
//!   returning with compressed returns, and jumps back through a register. Its TIPs use
//!   every IP compression (16, 32 and 48-bit updates, sign-extended 48 bits, full), and
//!   the trace has CYC and MTC packets, and PSB+ (PSB, TSC, TMA, MODE.Exec, FUP, PSBEND)
//!   every 4 KiB. A TIP every 6 instructions: denser than most programs.
//! * [`calls_mixed`]: a driver loop calling, through a register, functions with loops that
//!   make direct calls and calls through a register, return compressed or with a TIP, and
//!   end in a jump table; the same kinds of packets, a TIP every 24 instructions (the
//!   density at which libipt's ptxed reaches 80-90 M instructions/s).
//!
//! All know how many instructions their trace executes, so benchmarks can report
//! instructions per second.

use pt_decoder::config::Config;
use pt_decoder::image::Image;
use pt_decoder::listing::Listing;
use pt_decoder::{Decoder, Granularity, Item};
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
    /// One TIP in this many carries the full IP whatever the last IP.
    full_one_in: u64,
    /// The encoding's own choices (full IPs), apart from the program's (`rng`), so
    /// that a program's path does not depend on how it is traced.
    enc: Rng,
    /// CYC, MTC, and TSC and TMA in PSB+ (else none: `tsc=0,mtc=0`).
    timing: bool,
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
        if self.timing && self.tips.is_multiple_of(4) {
            let value = 1 + self.rng.below(200);
            put(&mut self.buf, &Packet::Cyc { value });
        }
        if self.timing && self.tips.is_multiple_of(16) {
            self.ctc = self.ctc.wrapping_add(1);
            put(&mut self.buf, &Packet::Mtc { ctc: self.ctc });
        }
        let mut p = self.last.compress(ip);
        if self.enc.below(self.full_one_in) == 0 {
            p = IpPayload::new(IpCompression::Full, ip);
        }
        self.last.update(p);
        put(&mut self.buf, &Packet::Ip(IpPacketKind::Tip, p));
    }

    /// PSB+ at `ip` if 4 KiB have passed since the last one; true if it wrote one
    /// (which empties the decoder's return stack: later RETs of earlier CALLs need TIPs).
    fn psb_plus(&mut self, ip: u64) -> bool {
        if self.buf.len() < self.next_psb {
            return false;
        }
        self.flush();
        self.next_psb = self.buf.len() + PSB_PERIOD;
        self.tsc += 0x1_0000;
        put(&mut self.buf, &Packet::Psb);
        if self.timing {
            put(&mut self.buf, &Packet::Tsc { tsc: self.tsc });
            put(
                &mut self.buf,
                &Packet::Tma {
                    ctc: u16::from(self.ctc),
                    fc: 0,
                },
            );
        }
        put(
            &mut self.buf,
            &Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)),
        );
        self.last.reset();
        let p = IpPayload::new(IpCompression::Sext48, ip);
        self.last.update(p);
        put(&mut self.buf, &Packet::Ip(IpPacketKind::Fup, p));
        put(&mut self.buf, &Packet::Psbend);
        true
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
        full_one_in: 8,
        enc: Rng::new(5),
        timing: true,
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

/// A module of code, the same at every address (all branches are relative): a function
/// `F(outer = edi, inner = esi, g = r9, table = r10)` with a two-level loop that calls a
/// leaf `H` directly and a library function through a register, then dispatches through a
/// jump table; and the library function `G(n = edx)`, a counted loop.
///
/// ```text
/// F:  push rbx; push rbp; mov ebx, edi; xor eax, eax
/// L:  mov ebp, esi
/// I:  call H                  ; direct; RET compressed
///     add rax, rdx; mov r8, rax; shl r8, 2; xor rax, r8; test al, 1
///     jz S                    ; TNT (either way)
///     lea rax, [rax + rax*2 + 1]
/// S:  sub ebp, 1; jnz I       ; TNT
///     call r9                 ; TIP to some region's G
///     sub ebx, 1; jnz L       ; TNT
///     and eax, 3
///     jmp [r10 + rax*8]       ; TIP to C0..C3
/// C0: add rax, 1;  jmp J
/// C1: sub rax, 1;  jmp J
/// C2: xor rax, rbx; jmp J
/// C3: not rax
/// J:  pop rbp; pop rbx; ret   ; TNT or TIP
/// H:  mov rdx, rax; shr rdx, 3; add rdx, 7; ret
/// G:  mov ecx, edx; xor edx, edx
/// LG: add rdx, rcx; rol rdx, 5; xor rdx, rcx; sub ecx, 1; jnz LG    ; TNT
///     mov rax, rdx; ret       ; TNT or TIP
/// ```
fn module() -> Vec<u8> {
    vec![
        0x53, 0x55, 0x89, 0xfb, 0x31,
        0xc0, // F: push rbx; push rbp; mov ebx, edi; xor eax, eax
        0x89, 0xf5, // L: mov ebp, esi
        0xe8, 0x41, 0x00, 0x00, 0x00, // I: call H
        0x48, 0x01, 0xd0, // add rax, rdx
        0x49, 0x89, 0xc0, // mov r8, rax
        0x49, 0xc1, 0xe0, 0x02, // shl r8, 2
        0x4c, 0x31, 0xc0, // xor rax, r8
        0xa8, 0x01, // test al, 1
        0x74, 0x05, // jz S
        0x48, 0x8d, 0x44, 0x40, 0x01, // lea rax, [rax + rax*2 + 1]
        0x83, 0xed, 0x01, // S: sub ebp, 1
        0x75, 0xe0, // jnz I
        0x41, 0xff, 0xd1, // call r9
        0x83, 0xeb, 0x01, // sub ebx, 1
        0x75, 0xd6, // jnz L
        0x83, 0xe0, 0x03, // and eax, 3
        0x41, 0xff, 0x24, 0xc2, // jmp [r10 + rax*8]
        0x48, 0x83, 0xc0, 0x01, 0xeb, 0x0e, // C0: add rax, 1; jmp J
        0x48, 0x83, 0xe8, 0x01, 0xeb, 0x08, // C1: sub rax, 1; jmp J
        0x48, 0x31, 0xd8, 0xeb, 0x03, // C2: xor rax, rbx; jmp J
        0x48, 0xf7, 0xd0, // C3: not rax
        0x5d, 0x5b, 0xc3, // J: pop rbp; pop rbx; ret
        0x48, 0x89, 0xc2, // H: mov rdx, rax
        0x48, 0xc1, 0xea, 0x03, // shr rdx, 3
        0x48, 0x83, 0xc2, 0x07, 0xc3, // add rdx, 7; ret
        0x89, 0xd1, 0x31, 0xd2, // G: mov ecx, edx; xor edx, edx
        0x48, 0x01, 0xca, // LG: add rdx, rcx
        0x48, 0xc1, 0xc2, 0x05, // rol rdx, 5
        0x48, 0x31, 0xca, // xor rdx, rcx
        0x83, 0xe9, 0x01, // sub ecx, 1
        0x75, 0xf1, // jnz LG
        0x48, 0x89, 0xd0, 0xc3, // mov rax, rdx; ret
    ]
}
const MOD_L: u64 = 0x06;
const MOD_AFTER_CALL_H: u64 = 0x0d;
const MOD_AFTER_CALL_G: u64 = 0x2b;
/// The jump-table cases C0..C3 and the instructions each runs before J.
const MOD_CASES: [(u64, u64); 4] = [(0x37, 2), (0x3d, 2), (0x43, 2), (0x48, 1)];
const MOD_G: u64 = 0x5a;
const MOD_LG: u64 = 0x5e;

/// The driver: `M: mov rax, [r12 + r15*8]; call rax; add r13, rax; sub r14, 1; jnz M`.
fn driver() -> Vec<u8> {
    vec![
        0x4b, 0x8b, 0x04, 0xfc, // mov rax, [r12 + r15*8]
        0xff, 0xd0, // call rax
        0x49, 0x01, 0xc5, // add r13, rax
        0x49, 0x83, 0xee, 0x01, // sub r14, 1
        0x75, 0xf1, // jnz M
    ]
}
const DRIVER_AFTER_CALL: u64 = 6;

/// The shape of a [`calls_mixed`] trace.
#[derive(Clone, Copy, Debug)]
pub struct CallsMix {
    /// `F`'s outer loop runs 1 to this many times.
    pub outer: u64,
    /// `F`'s inner loop (a direct call and a data-dependent branch) runs 1 to this many times.
    pub inner: u64,
    /// `G`'s loop runs 1 to this many times.
    pub g_loop: u64,
    /// One `G` return in this many gets a TIP (hardware may send one for any RET); `F`'s
    /// return then does too, since the decoder's return stack no longer matches.
    pub ret_tip_one_in: u64,
    /// One TIP in this many carries the full IP.
    pub full_one_in: u64,
    /// Returns may be compressed (a TNT bit); else every return has a TIP
    /// (`noretcomp`).
    pub ret_compression: bool,
    /// CYC and MTC packets, TSC and TMA in PSB+; else none (`tsc=0,mtc=0`).
    pub timing: bool,
}

impl CallsMix {
    /// The mix of the benchmark: see [`calls_mixed`].
    pub const DEFAULT: CallsMix = CallsMix {
        outer: 3,
        inner: 3,
        g_loop: 5,
        ret_tip_one_in: 4,
        full_one_in: 16,
        ret_compression: true,
        timing: true,
    };

    /// What libxdc, ptcov and iptr-edge-analyzer decode: [`DEFAULT`](Self::DEFAULT)
    /// recorded with `intel_pt/noretcomp,tsc=0,mtc=0/`.
    pub const NORETCOMP_UNTIMED: CallsMix = CallsMix {
        ret_compression: false,
        timing: false,
        ..CallsMix::DEFAULT
    };
}

/// A program of many direct and indirect calls with loops in the called functions, with
/// about `insns` instructions: a driver loop in the main region calls, through a register,
/// a function `F` in one of four regions chosen at random (beside the driver: IP
/// updates of 16 bits; the low 4 GiB: 32 bits; a shared-library region: 48 bits; the
/// kernel: sign-extended 48 bits), which calls `G` in a random region through a register
/// and ends with an indirect jump through a table. Returns are compressed (TNT) except where
/// a PSB+ came between the CALL and its RET, or where the mix sends a TIP. The trace has
/// CYC, MTC and TSC packets, and PSB+ (at the driver's loop head, `F`'s outer loop head or
/// `G`'s loop head) every 4 KiB; now and then a TIP carries the full IP.
///
/// [`CallsMix::DEFAULT`] is tuned to the density of the "many calls" traces that libipt's
/// ptxed reconstructs at 80-90 M instructions/s with its block decoder (and about 30 M/s
/// with its instruction decoder): a TIP every 23.5 instructions, a TNT bit every 5.0, 33
/// trace bytes per 100 instructions; of the TIPs 27% update 16 bits, 13% 32 bits, 22% 48
/// bits, 31% are sign-extended 48 bits and 6% full (see the `flowtrace` example).
///
/// Measured on a 2-core AMD EPYC VM (best wall time of 3 to 5, traces of 50 M and 200 M
/// instructions, several sessions) with libipt 2.3.0-devel ptxed `--quiet`: 84-88 M/s
/// block, 28.4-29.8 M/s insn. Both ptxeds count the same instructions and blocks.
pub fn calls_mixed(insns: u64, mix: CallsMix) -> FlowTrace {
    calls_mixed_with(insns, mix, 7, false)
}

/// One run of the [`calls_mixed`] program from its start, as a fuzzer traces it: PSB+,
/// TIP.PGE at the driver, about `insns` instructions whose choices (the functions
/// called, the loop counts, the branches taken: the program's input) follow from
/// `seed`, and a TIP.PGD where the run leaves for the kernel to exit. PSB+ every
/// 4 KiB as in [`calls_mixed`].
pub fn calls_mixed_run(insns: u64, mix: CallsMix, seed: u64) -> FlowTrace {
    calls_mixed_with(insns, mix, seed, true)
}

fn calls_mixed_with(insns: u64, mix: CallsMix, seed: u64, run: bool) -> FlowTrace {
    let mut w = Writer {
        buf: Vec::with_capacity((insns / 8) as usize + 4096),
        last: LastIp::new(),
        bits: 0,
        nbits: 0,
        tips: 0,
        tsc: 0x10_0000,
        ctc: 0,
        next_psb: 0,
        rng: Rng::new(seed),
        full_one_in: mix.full_one_in.max(1),
        enc: Rng::new(seed ^ 0x5eed),
        timing: mix.timing,
    };
    if run {
        // Tracing starts with the run: PSB+ without an IP, then TIP.PGE.
        w.next_psb = PSB_PERIOD;
        put(&mut w.buf, &Packet::Psb);
        put(
            &mut w.buf,
            &Packet::ModeExec(ModeExec::from_mode(ExecMode::Bit64)),
        );
        put(&mut w.buf, &Packet::Psbend);
        let p = w.last.compress(MAIN);
        w.last.update(p);
        put(&mut w.buf, &Packet::Ip(IpPacketKind::TipPge, p));
    }
    let pick = |w: &mut Writer| STUBS[w.rng.below(STUBS.len() as u64) as usize];
    let mut count = 0u64;
    while count < insns {
        // The first PSB+ enables tracing at M with its FUP.
        w.psb_plus(MAIN);
        // mov rax, [..]; call rax → F.
        let f = pick(&mut w);
        w.tip(f);
        count += 2;
        // Whether F's RET may be compressed.
        let mut f_ret_compressed = mix.ret_compression;
        // push; push; mov; xor.
        count += 4;
        let outer = 1 + w.rng.below(mix.outer.max(1));
        for o in 0..outer {
            if w.psb_plus(f + MOD_L) {
                f_ret_compressed = false;
            }
            // mov ebp, esi.
            count += 1;
            let inner = 1 + w.rng.below(mix.inner.max(1));
            for i in 0..inner {
                // call H; mov; shr; add; ret (compressed, or a TIP after the call).
                if mix.ret_compression {
                    w.tnt(true);
                } else {
                    w.tip(f + MOD_AFTER_CALL_H);
                }
                // add; mov; shl; xor; test; jz S (taken: skip the lea).
                let skip = w.rng.below(2) == 0;
                w.tnt(skip);
                // sub; jnz I.
                w.tnt(i + 1 < inner);
                count += 5 + 6 + u64::from(!skip) + 2;
            }
            // call r9 → G; mov; xor.
            let g = pick(&mut w);
            w.tip(g + MOD_G);
            count += 3;
            let tip_one = w.rng.below(mix.ret_tip_one_in.max(1)) == 0;
            let mut g_ret_compressed = mix.ret_compression && !tip_one;
            let n = 1 + w.rng.below(mix.g_loop.max(1));
            for k in 0..n {
                if w.psb_plus(g + MOD_LG) {
                    g_ret_compressed = false;
                }
                // add; rol; xor; sub; jnz LG.
                w.tnt(k + 1 < n);
                count += 5;
            }
            // mov; ret.
            count += 2;
            if g_ret_compressed {
                w.tnt(true);
            } else {
                w.tip(f + MOD_AFTER_CALL_G);
                f_ret_compressed = false;
            }
            // sub; jnz L.
            w.tnt(o + 1 < outer);
            count += 2;
        }
        // and; jmp [table] → a case; its instructions; pop; pop; ret.
        let (case, len) = MOD_CASES[w.rng.below(MOD_CASES.len() as u64) as usize];
        w.tip(f + case);
        count += 2 + len + 3;
        if f_ret_compressed {
            w.tnt(true);
        } else {
            w.tip(MAIN + DRIVER_AFTER_CALL);
        }
        // add; sub; jnz M.
        w.tnt(true);
        count += 3;
    }
    if run {
        // The run exits: into the kernel, out of the traced ranges (IP suppressed).
        w.flush();
        put(
            &mut w.buf,
            &Packet::Ip(
                IpPacketKind::TipPgd,
                IpPayload::new(IpCompression::Suppressed, 0),
            ),
        );
    }
    // The trace ends before the next call rax: mov and call need its TIP.
    w.flush();
    let mut main = driver();
    main.resize((STUBS[0] - MAIN) as usize, 0xcc);
    main.extend_from_slice(&module());
    let mut sections = vec![(MAIN, main)];
    for &s in &STUBS[1..] {
        sections.push((s, module()));
    }
    FlowTrace {
        trace: w.buf,
        sections,
        insns: count,
    }
}

/// What a trace holds: TIPs by IP compression, TNT bits, timing and PSB packets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceMix {
    /// TIPs by IPBytes (index = [`IpCompression`] value).
    pub tips: [u64; 8],
    /// Conditional-branch and compressed-return results in TNT packets.
    pub tnt_bits: u64,
    /// PSB packets.
    pub psb: u64,
    /// MTC packets.
    pub mtc: u64,
    /// CYC packets.
    pub cyc: u64,
    /// TSC packets.
    pub tsc: u64,
}

impl TraceMix {
    /// Counts the packets of `trace` from its first PSB.
    pub fn of(trace: &[u8]) -> Result<TraceMix, pt_decoder::DecodeError> {
        let mut d = pt_decoder::PacketDecoder::new(trace, &Config::default());
        d.sync_forward()?;
        let mut m = TraceMix::default();
        for r in d {
            match r?.1 {
                Packet::Ip(IpPacketKind::Tip, p) => {
                    if let Some(n) = m.tips.get_mut(p.compression as usize) {
                        *n += 1;
                    }
                }
                Packet::Tnt8(t) | Packet::Tnt64(t) => m.tnt_bits += u64::from(t.len()),
                Packet::Psb => m.psb += 1,
                Packet::Mtc { .. } => m.mtc += 1,
                Packet::Cyc { .. } => m.cyc += 1,
                Packet::Tsc { .. } => m.tsc += 1,
                _ => {}
            }
        }
        Ok(m)
    }

    /// All TIPs.
    pub fn tip_count(&self) -> u64 {
        self.tips.iter().sum()
    }

    /// TIPs with `c`.
    pub fn tips_with(&self, c: IpCompression) -> u64 {
        self.tips.get(c as usize).copied().unwrap_or(0)
    }
}

/// The block decoder as ptxed `--quiet` drives it (the driver in count-only mode,
/// resyncing at the next PSB after errors); returns the instructions it reconstructed.
pub fn quiet_blocks(trace: &[u8], image: &Image, config: &Config) -> u64 {
    quiet(trace, image, config, Granularity::Blocks)
}

/// The instruction decoder as ptxed `--quiet --insn-decoder` drives it.
pub fn quiet_insns(trace: &[u8], image: &Image, config: &Config) -> u64 {
    quiet(trace, image, config, Granularity::Instructions)
}

/// The full listing, as ptxed prints it without `--quiet`: every instruction's line
/// (address and text, as `listing` renders them) into `out`, which is emptied whenever
/// it holds a megabyte (as a buffered writer would pass it on). Returns the number of
/// instructions listed.
pub fn listing_blocks(
    trace: &[u8],
    image: &Image,
    config: &Config,
    listing: &mut Listing,
    out: &mut Vec<u8>,
) -> u64 {
    let mut dec = Decoder::builder(trace, image)
        .config(config)
        .granularity(Granularity::Blocks)
        .build();
    let mut item = Item::default();
    let mut insns = 0;
    while dec.next_into(&mut item) {
        let Item::Block(b) = &item else {
            continue;
        };
        let mode = b.block.mode;
        if let Some(ips) = dec.block_ips() {
            for &ip in ips.ips {
                out.extend_from_slice(listing.line(image, ip, mode).text());
                insns += 1;
            }
        }
        if out.len() >= 1 << 20 {
            out.clear();
        }
    }
    insns
}

fn quiet(trace: &[u8], image: &Image, config: &Config, granularity: Granularity) -> u64 {
    let mut dec = Decoder::builder(trace, image)
        .config(config)
        .granularity(granularity)
        .count_only(true)
        .build();
    let mut item = Item::default();
    while dec.next_into(&mut item) {}
    dec.counts().insns
}

#[cfg(test)]
mod tests {
    use super::*;
    use pt_decoder::config::Config;
    use pt_decoder::flow::FlowOptions;
    use pt_decoder::PacketDecoder;

    /// Instructions the block decoder reconstructs from the whole trace, block by
    /// block (no error allowed).
    fn decode(t: &FlowTrace) -> u64 {
        let image = t.image();
        let config = Config::default();
        let mut n = 0;
        for item in Decoder::new(&t.trace, &image, &config, FlowOptions::default()) {
            match item {
                Item::Block(b) => n += u64::from(b.block.ninsn),
                Item::Error(e) => panic!("decode error {e} after {n} instructions"),
                _ => {}
            }
        }
        n
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

    #[test]
    fn mixed_call_trace_decodes_to_its_count_with_every_compression() {
        let t = calls_mixed(300_000, CallsMix::DEFAULT);
        assert_eq!(decode(&t), t.insns);
        let (image, config) = (t.image(), Config::default());
        assert_eq!(quiet_blocks(&t.trace, &image, &config), t.insns);
        assert_eq!(quiet_insns(&t.trace, &image, &config), t.insns);
        let m = TraceMix::of(&t.trace).unwrap();
        for c in [
            IpCompression::Update16,
            IpCompression::Update32,
            IpCompression::Update48,
            IpCompression::Sext48,
            IpCompression::Full,
        ] {
            assert!(m.tips_with(c) > 0, "no {c:?} TIP: {m:?}");
        }
        assert_eq!(m.tips_with(IpCompression::Suppressed), 0);
        assert!(m.psb as usize >= t.trace.len() / PSB_PERIOD, "{m:?}");
        assert!(m.mtc > 0 && m.cyc > 0 && m.tsc == m.psb, "{m:?}");
        // Sparser than `calls`: several instructions per TIP and per TNT bit.
        assert!(
            t.insns > 10 * m.tip_count() && t.insns > 2 * m.tnt_bits,
            "{m:?}"
        );
    }

    /// TIPs to `G`, TIPs to return sites and PSBs in a [`calls_mixed`] trace.
    fn returns(t: &FlowTrace) -> (u64, u64, u64) {
        let mut d = PacketDecoder::new(&t.trace, &Config::default());
        d.sync_forward().unwrap();
        let mut last = LastIp::new();
        let (mut g_calls, mut ret_tips, mut psbs) = (0, 0, 0);
        for r in d {
            match r.unwrap().1 {
                Packet::Psb => {
                    last.reset();
                    psbs += 1;
                }
                Packet::Ip(IpPacketKind::Fup, p) => {
                    last.update(p);
                }
                Packet::Ip(IpPacketKind::Tip, p) => {
                    let ip = last.update(p).unwrap();
                    if STUBS.iter().any(|&s| ip == s + MOD_G) {
                        g_calls += 1;
                    }
                    if ip == MAIN + DRIVER_AFTER_CALL
                        || STUBS.iter().any(|&s| ip == s + MOD_AFTER_CALL_G)
                    {
                        ret_tips += 1;
                    }
                }
                _ => {}
            }
        }
        (g_calls, ret_tips, psbs)
    }

    #[test]
    fn mixed_call_trace_has_uncompressed_returns() {
        let t = calls_mixed(300_000, CallsMix::DEFAULT);
        let (g_calls, ret_tips, _) = returns(&t);
        // One G return in four and the F return after it, and a few after PSBs.
        assert!(
            ret_tips * 4 > g_calls && ret_tips < g_calls,
            "{ret_tips} of {g_calls}"
        );
        // Without random ones, only returns whose call came before a PSB+ get TIPs: one
        // F and one G return per PSB at most.
        let mix = CallsMix {
            ret_tip_one_in: u64::MAX,
            ..CallsMix::DEFAULT
        };
        let t = calls_mixed(300_000, mix);
        assert_eq!(decode(&t), t.insns);
        let (_, ret_tips, psbs) = returns(&t);
        assert!(
            ret_tips > 0 && ret_tips <= 2 * psbs,
            "{ret_tips}, {psbs} PSBs"
        );
    }
}
